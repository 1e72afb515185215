package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/rbac"
)

// runManifests prints, as one YAML stream, what virt-operator would install for virt-api and
// virt-controller, from virt-operator's own generators (GenerateCurrentInstallStrategy's parts):
// the CRDs, the cluster-wide and the components' RBAC (ServiceAccounts, Roles, bindings) and
// virt-api's validating and mutating webhook configurations. With --webhook-url the webhooks
// call that URL (plus each webhook's path) instead of the virt-api Service, trusting --ca-bundle:
// the lab has no Service network, virt-api listens on 127.0.0.1.
func runManifests(args []string) {
	fs := flag.NewFlagSet("manifests", flag.ExitOnError)
	ns := fs.String("namespace", "kubevirt", "KubeVirt's install namespace")
	what := fs.String("only", "crds,rbac,webhooks", "comma-separated: crds, rbac, webhooks, cdi-stubs")
	url := fs.String("webhook-url", "", "base URL of virt-api (e.g. https://127.0.0.1:8443); default: the Service")
	caFile := fs.String("ca-bundle", "", "PEM file the API server trusts for virt-api's serving certificate")
	_ = fs.Parse(args)

	var objs []runtime.Object
	want := map[string]bool{}
	for _, w := range strings.Split(*what, ",") {
		want[strings.TrimSpace(w)] = true
	}
	if want["crds"] {
		for _, f := range []func() (*extv1.CustomResourceDefinition, error){
			components.NewVirtualMachineInstanceCrd, components.NewPresetCrd, components.NewReplicaSetCrd,
			components.NewVirtualMachineCrd, components.NewVirtualMachineInstanceMigrationCrd,
			components.NewVirtualMachineSnapshotCrd, components.NewVirtualMachineSnapshotContentCrd,
			components.NewVirtualMachineRestoreCrd, components.NewVirtualMachineInstancetypeCrd,
			components.NewVirtualMachineClusterInstancetypeCrd, components.NewVirtualMachinePoolCrd,
			components.NewMigrationPolicyCrd, components.NewVirtualMachinePreferenceCrd,
			components.NewVirtualMachineClusterPreferenceCrd, components.NewVirtualMachineExportCrd,
			components.NewVirtualMachineCloneCrd, components.NewVirtualMachineBackupCrd,
			components.NewVirtualMachineBackupTrackerCrd,
			components.NewKubeVirtCrd,
		} {
			crd, err := f()
			if err != nil {
				fail(err)
			}
			objs = append(objs, crd)
		}
	}
	if want["cdi-stubs"] {
		objs = append(objs, cdiStubs()...)
	}
	if want["rbac"] {
		objs = append(objs, rbac.GetAllCluster()...)
		objs = append(objs, rbac.GetAllApiServer(*ns)...)
		objs = append(objs, rbac.GetAllController(*ns, true)...)
	}
	if want["webhooks"] {
		var ca []byte
		if *caFile != "" {
			var err error
			if ca, err = os.ReadFile(*caFile); err != nil {
				fail(err)
			}
		}
		point := func(cc *admissionregistrationv1.WebhookClientConfig) {
			if *url != "" && cc.Service != nil {
				path := ""
				if cc.Service.Path != nil {
					path = *cc.Service.Path
				}
				u := strings.TrimSuffix(*url, "/") + path
				cc.URL = &u
				cc.Service = nil
			}
			if ca != nil {
				cc.CABundle = ca
			}
		}
		v := components.NewVirtAPIValidatingWebhookConfiguration(*ns)
		for i := range v.Webhooks {
			point(&v.Webhooks[i].ClientConfig)
		}
		m := components.NewVirtAPIMutatingWebhookConfiguration(*ns)
		for i := range m.Webhooks {
			point(&m.Webhooks[i].ClientConfig)
		}
		objs = append(objs, v, m)
	}
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			fail(err)
		}
		fmt.Printf("---\n%s", b)
	}
}

// cdiStubs are schema-less CRDs for the CDI kinds virt-controller and virt-api watch once they see
// a DataVolume CRD (the lab has one): without them their informers never sync. CDI itself is not
// in the lab; these only make the kinds exist (no objects are created).
func cdiStubs() []runtime.Object {
	yes := true
	crd := func(plural, kind string, scope extv1.ResourceScope) runtime.Object {
		return &extv1.CustomResourceDefinition{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".cdi.kubevirt.io", Labels: map[string]string{"ferry.example/stub": "cdi"}},
			Spec: extv1.CustomResourceDefinitionSpec{
				Group: "cdi.kubevirt.io",
				Names: extv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List"},
				Scope: scope,
				Versions: []extv1.CustomResourceDefinitionVersion{{
					Name: "v1beta1", Served: true, Storage: true,
					Subresources: &extv1.CustomResourceSubresources{Status: &extv1.CustomResourceSubresourceStatus{}},
					Schema: &extv1.CustomResourceValidation{OpenAPIV3Schema: &extv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: &yes,
					}},
				}},
			},
		}
	}
	return []runtime.Object{
		crd("cdis", "CDI", extv1.ClusterScoped),
		crd("cdiconfigs", "CDIConfig", extv1.ClusterScoped),
		crd("storageprofiles", "StorageProfile", extv1.ClusterScoped),
		crd("datasources", "DataSource", extv1.NamespaceScoped),
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "manifests:", err)
	os.Exit(1)
}
