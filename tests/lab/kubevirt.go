package main

// KubeVirt's own virt-api and virt-controller in the lab (ferry-lab --kubevirt, #28): what
// tests/kubevirt/run.sh does by hand, as entries of the component table. The binary is
// ferry-kubevirt (tests/kubevirt, KubeVirt's Go module built by tests/kubevirt/build.sh), found
// next to ferry-lab; it also prints what virt-operator would install (`ferry-kubevirt
// manifests`: CRDs, RBAC, webhook configurations, from virt-operator's own generators), which
// the lab applies server-side, as virt-operator would.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// kubevirtNamespace is KubeVirt's install namespace: virt-api and virt-controller read theirs
// from the ServiceAccount file (absent here) and fall back to this one.
const kubevirtNamespace = "kubevirt"

// kubevirtTokenTTL: the ServiceAccount tokens in the components' kubeconfigs, made again at every start.
const kubevirtTokenTTL = 30 * 24 * time.Hour

// kubevirtOwns says whether a CRD of crds/*.yaml is one KubeVirt installs itself: with --kubevirt
// the lab leaves those to KubeVirt's manifests (full schemas) instead of its schema-less stand-ins.
// CDI's (cdi.kubevirt.io) stays the lab's: CDI is not in the lab.
func kubevirtOwns(crd *apiextv1.CustomResourceDefinition) bool {
	g := crd.Spec.Group
	return g == "kubevirt.io" || (strings.HasSuffix(g, ".kubevirt.io") && g != "cdi.kubevirt.io")
}

// kubevirtComponents are the table's entries for --kubevirt, after crds.
func (l *lab) kubevirtComponents() []*component {
	return []*component{{
		// virt-operator's part: KubeVirt's CRDs, RBAC, the KubeVirt CR (status Deployed),
		// certificates and the two ServiceAccounts' kubeconfigs.
		name:  "kubevirt",
		needs: []string{"apiserver", "crds"},
		start: l.kubevirtInstall,
		log:   "apiserver.log",
	}, {
		name:  "virt-controller",
		ports: []string{"virtController"},
		needs: []string{"kubevirt"},
		start: l.virtControllerStart,
		ready: probe{what: "/healthz ok", timeout: 3 * time.Minute, every: 300 * time.Millisecond, check: l.virtControllerReady},
	}, {
		name:  "virt-api",
		ports: []string{"virtApi"},
		needs: []string{"kubevirt"},
		start: l.virtAPIStart,
		ready: probe{what: "/apis/subresources.kubevirt.io/v1/healthz ok", timeout: 3 * time.Minute, every: 300 * time.Millisecond,
			check: l.virtAPIReady},
	}, {
		// virt-api's validating and mutating webhook configurations, pointing at 127.0.0.1 (the
		// lab has no Service network); ready once a VirtualMachine goes through both.
		name:  "kubevirt-webhooks",
		needs: []string{"virt-api"},
		start: l.kubevirtWebhooks,
		ready: probe{what: "a VirtualMachine mutated and an invalid one refused by virt-api (server-side dry run)",
			timeout: 2 * time.Minute, every: 300 * time.Millisecond, check: l.kubevirtAdmits},
		json: "kubevirt",
		info: l.kubevirtInfo,
		url:  l.virtAPIURL,
		log:  "virt-api.log",
	}}
}

// kubevirtState is what the KubeVirt components keep.
type kubevirtState struct {
	bin      string // ferry-kubevirt
	version  string // what it was built from, e.g. v1.8.3
	dyn      dynamic.Interface
	mapper   *restmapper.DeferredDiscoveryRESTMapper
	webhooks []*unstructured.Unstructured // virt-api's webhook configurations, registered once it answers
}

// kubevirtVersion is the kubevirt.io/kubevirt module ferry-kubevirt was built from, read from
// the binary's build information (running it takes seconds: KubeVirt's package init).
func kubevirtVersion(bin string) (string, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("%s: %w", bin, err)
	}
	for _, d := range bi.Deps {
		if d.Path == "kubevirt.io/kubevirt" {
			if d.Replace != nil {
				d = d.Replace
			}
			return d.Version, nil
		}
	}
	return "", fmt.Errorf("%s was not built from kubevirt.io/kubevirt", bin)
}

func (l *lab) virtAPIURL() string { return fmt.Sprintf("https://127.0.0.1:%d", l.port("virtApi")) }
func (l *lab) virtControllerURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", l.port("virtController"))
}

// The KubeVirt certificates (virt-operator keeps them in the Secrets kubevirt-virt-api-certs and
// kubevirt-virt-handler-certs, signed by kubevirt-ca), in DIR/pki.
func (l *lab) kvPath(name string) string { return filepath.Join(l.pki.dir, name) }

func (l *lab) kubevirtPKI() error {
	ca, caKey, err := l.pki.ensureCA(l.kvPath("kubevirt-ca.crt"), l.kvPath("kubevirt-ca.key"), "kubevirt.io@ferry-lab")
	if err != nil {
		return err
	}
	const validity = 10 * 365 * 24 * time.Hour
	if err := l.pki.ensureLeaf(l.kvPath("virt-api.crt"), l.kvPath("virt-api.key"), ca, caKey,
		pkix.Name{CommonName: "virt-api." + kubevirtNamespace + ".pod.cluster.local"},
		[]string{"localhost", "virt-api." + kubevirtNamespace + ".svc"}, []net.IP{net.ParseIP("127.0.0.1")},
		x509.ExtKeyUsageServerAuth, validity); err != nil {
		return err
	}
	return l.pki.ensureLeaf(l.kvPath("virt-handler-client.crt"), l.kvPath("virt-handler-client.key"), ca, caKey,
		pkix.Name{CommonName: "kubevirt.io:system:client:virt-handler"}, nil, nil, x509.ExtKeyUsageClientAuth, validity)
}

// manifests runs `ferry-kubevirt manifests ARGS` and returns its objects.
func (l *lab) kubevirtManifests(ctx context.Context, args ...string) ([]*unstructured.Unstructured, error) {
	cmd := exec.CommandContext(ctx, l.kv.bin, append([]string{"manifests", "--namespace", kubevirtNamespace}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s manifests %s: %w: %s", l.kv.bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 64<<10)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("manifests %s: %w", strings.Join(args, " "), err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// kubevirtApply applies objects server-side (field manager ferry-lab, conflicts forced), as
// `kubectl apply --server-side --force-conflicts` does.
func (l *lab) kubevirtApply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := l.kv.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) { // a kind whose CRD was just established
			l.kv.mapper.Reset()
			m, err = l.kv.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = l.kv.dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = l.kv.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		// What sigs.k8s.io/yaml writes for unset fields of typed objects; not for an apply.
		unstructured.RemoveNestedField(o.Object, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(o.Object, "status")
		for attempt := 0; ; attempt++ {
			_, err = ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "ferry-lab", Force: true})
			if err == nil || attempt >= 5 || ctx.Err() != nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

// kubevirtInstall does virt-operator's part (what tests/kubevirt/run.sh does with kubectl).
func (l *lab) kubevirtInstall(ctx context.Context) (func(), error) {
	bin, err := l.findHelper("ferry-kubevirt", "FERRY_KUBEVIRT")
	if err != nil {
		return nil, fmt.Errorf("%w (tests/kubevirt/build.sh)", err)
	}
	l.kv.bin = bin
	if l.kv.version, err = kubevirtVersion(bin); err != nil {
		return nil, err
	}
	progress("kubevirt: installing KubeVirt %s's CRDs, RBAC and KubeVirt CR (%s)", l.kv.version, bin)
	cfg := l.restConfig()
	if l.kv.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	l.kv.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(l.kube.Discovery()))
	// Webhooks of an earlier start call a virt-api that is not up yet (failurePolicy Fail):
	// kubevirt-webhooks registers them again once virt-api answers.
	if err := l.kubevirtRemoveWebhooks(ctx); err != nil {
		return nil, err
	}
	if err := l.kubevirtPKI(); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}

	// One run of ferry-kubevirt (its start-up alone takes ~3 s): everything, the webhooks kept
	// for kubevirt-webhooks, which registers them once virt-api answers.
	all, err := l.kubevirtManifests(ctx, "--only", "crds,cdi-stubs,rbac,webhooks",
		"--webhook-url", l.virtAPIURL(), "--ca-bundle", l.kvPath("kubevirt-ca.crt"))
	if err != nil {
		return nil, err
	}
	var crds, rbac []*unstructured.Unstructured
	l.kv.webhooks = nil
	for _, o := range all {
		switch o.GetKind() {
		case "CustomResourceDefinition":
			crds = append(crds, o)
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			l.kv.webhooks = append(l.kv.webhooks, o)
		default:
			rbac = append(rbac, o)
		}
	}
	// CRDs: KubeVirt's (over the lab's schema-less ones of an earlier start without --kubevirt),
	// and schema-less stand-ins of the CDI kinds both components watch once they see the lab's
	// DataVolume CRD (cdis, cdiconfigs, storageprofiles, datasources): without them their
	// informers never sync.
	if err := l.kubevirtApply(ctx, crds); err != nil {
		return nil, err
	}
	for _, c := range crds {
		if err := l.waitEstablished(ctx, c.GetName()); err != nil {
			return nil, err
		}
	}
	l.kv.mapper.Reset()

	if _, err := l.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubevirtNamespace}},
		metav1.CreateOptions{FieldManager: "ferry-lab"}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	// RBAC: ServiceAccounts kubevirt-apiserver and kubevirt-controller, their roles and
	// bindings, and KubeVirt's aggregated kubevirt.io:{admin,edit,view,migrate}.
	if err := l.kubevirtApply(ctx, rbac); err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(l.kvPath("kubevirt-ca.crt"))
	if err != nil {
		return nil, err
	}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "kubevirt-ca", "namespace": kubevirtNamespace},
		"data":     map[string]any{"ca-bundle": string(ca)},
	}}
	// The KubeVirt CR: both components read their configuration only from one with a phase.
	kv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt", "namespace": kubevirtNamespace},
		"spec":     map[string]any{"configuration": map[string]any{"developerConfiguration": map[string]any{}}},
	}}
	if err := l.kubevirtApply(ctx, []*unstructured.Unstructured{cm, kv}); err != nil {
		return nil, err
	}
	// virt-operator writes status. Without defaultArchitecture every VMI is refused
	// ("unsupported architecture: "): the VMI mutator defaults spec.architecture from it.
	status := fmt.Sprintf(`{"status":{"phase":"Deployed","observedKubeVirtVersion":%q,"targetKubeVirtVersion":%q,"defaultArchitecture":"amd64"}}`,
		l.kv.version, l.kv.version)
	if _, err := l.kv.dyn.Resource(schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "kubevirts"}).
		Namespace(kubevirtNamespace).Patch(ctx, "kubevirt", types.MergePatchType, []byte(status), metav1.PatchOptions{FieldManager: "ferry-lab"}, "status"); err != nil {
		return nil, fmt.Errorf("KubeVirt status: %w", err)
	}
	// virt-handler is played by ferry-sim (--kubevirt real); it writes VMI status, which virt-api's
	// VMI mutator keeps only from KubeVirt's ServiceAccounts (it restores the old status of anyone
	// else's update, pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator.go), so it needs
	// virt-handler's ServiceAccount. ferry-kubevirt manifests prints no virt-handler RBAC: this
	// role grants what the sim writes as virt-handler, the VMIs, and no more.
	if err := l.kubevirtApply(ctx, handlerRBAC()); err != nil {
		return nil, err
	}
	// Each component as its own ServiceAccount: virt-api's admitters tell virt-controller's
	// and virt-handler's writes by their names.
	for _, sa := range []string{"kubevirt-apiserver", "kubevirt-controller", kubevirtHandlerSA} {
		ttl := int64(kubevirtTokenTTL / time.Second)
		tr, err := l.kube.CoreV1().ServiceAccounts(kubevirtNamespace).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("token of %s: %w", sa, err)
		}
		if err := writeTokenKubeconfig(l.kvPath(sa+".kubeconfig"), l.apiURL(), l.pki.caCert, sa, tr.Status.Token); err != nil {
			return nil, err
		}
	}
	progress("kubevirt: %d CRDs, %d RBAC objects, KubeVirt %s/kubevirt Deployed", len(crds), len(rbac), kubevirtNamespace)
	return nil, nil
}

// kubevirtHandlerSA is virt-handler's ServiceAccount name (components.HandlerServiceAccountName).
const kubevirtHandlerSA = "kubevirt-handler"

// handlerRBAC is the ServiceAccount kubevirt/kubevirt-handler and a ClusterRole of the lab's own
// (ferry-lab-virt-handler, not virt-operator's kubevirt-handler) to read and update VMIs.
func handlerRBAC() []*unstructured.Unstructured {
	const role = "ferry-lab-virt-handler"
	return []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "v1", "kind": "ServiceAccount",
		"metadata": map[string]any{"name": kubevirtHandlerSA, "namespace": kubevirtNamespace},
	}}, {Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": role},
		"rules": []any{map[string]any{
			"apiGroups": []any{"kubevirt.io"},
			"resources": []any{"virtualmachineinstances"},
			"verbs":     []any{"get", "list", "watch", "update", "patch"},
		}},
	}}, {Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": role},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": kubevirtHandlerSA, "namespace": kubevirtNamespace}},
	}}}
}

func (l *lab) waitEstablished(ctx context.Context, name string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		crd, err := l.apiext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err == nil && established(crd) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not Established within a minute (%v)", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeTokenKubeconfig writes a kubeconfig with the lab's CA and a bearer token.
func writeTokenKubeconfig(path, server, caFile, user, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: lab
  context:
    cluster: lab
    user: %s
    namespace: %s
current-context: lab
`, server, base64Std(ca), user, token, user, kubevirtNamespace)
	return writeFileAtomic(path, []byte(content), 0o600)
}

func (l *lab) virtControllerStart(context.Context) (func(), error) {
	args := []string{"virt-controller",
		"--kubeconfig", l.kvPath("kubevirt-controller.kubeconfig"),
		"--listen", "127.0.0.1", "--port", strconv.Itoa(l.port("virtController")),
		"--leader-elect-lease-duration", "15s",
		"--launcher-image", "quay.io/kubevirt/virt-launcher:" + l.kv.version,
		"--exporter-image", "quay.io/kubevirt/virt-exportserver:" + l.kv.version,
		// Its /healthz, /leader and metrics are served over TLS.
		"--prom-cert-file", l.kvPath("virt-api.crt"), "--prom-key-file", l.kvPath("virt-api.key"),
	}
	c := l.newChild("virt-controller", l.kv.bin, args, syscall.SIGTERM)
	progress("virt-controller: KubeVirt %s virt-controller starting, %s (child process, log %s)", l.kv.version, l.virtControllerURL(), c.logPath)
	return runChild(c)
}

func (l *lab) virtAPIStart(context.Context) (func(), error) {
	args := []string{"virt-api",
		"--kubeconfig", l.kvPath("kubevirt-apiserver.kubeconfig"),
		"--listen", "127.0.0.1", "--port", strconv.Itoa(l.port("virtApi")),
		"--tls-cert-file", l.kvPath("virt-api.crt"), "--tls-key-file", l.kvPath("virt-api.key"),
		// For console/VNC subresources towards virt-handler (none in the lab).
		"--handler-cert-file", l.kvPath("virt-handler-client.crt"), "--handler-key-file", l.kvPath("virt-handler-client.key"),
	}
	// SIGKILL: on SIGTERM virt-api sleeps 5 s (for load balancers to drop it) before it shuts
	// down; it keeps no state, and nothing in the lab balances load.
	c := l.newChild("virt-api", l.kv.bin, args, syscall.SIGKILL)
	progress("virt-api: KubeVirt %s virt-api starting on %s (child process, log %s)", l.kv.version, l.virtAPIURL(), c.logPath)
	return runChild(c)
}

// kubevirtHTTP trusts the KubeVirt CA (virt-api's and virt-controller's serving certificate).
func (l *lab) kubevirtHTTP() (*http.Client, error) {
	ca, err := os.ReadFile(l.kvPath("kubevirt-ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

func (l *lab) httpOK(ctx context.Context, url string) error {
	cl, err := l.kubevirtHTTP()
	if err != nil {
		return failed{err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

func (l *lab) virtControllerReady(ctx context.Context) error {
	return l.httpOK(ctx, l.virtControllerURL()+"/healthz")
}

func (l *lab) virtAPIReady(ctx context.Context) error {
	return l.httpOK(ctx, l.virtAPIURL()+"/apis/subresources.kubevirt.io/v1/healthz")
}

// kubevirtWebhooks registers virt-api's webhooks (virt-operator's generators), every
// clientConfig.service replaced by https://127.0.0.1:PORT/PATH and the KubeVirt CA.
func (l *lab) kubevirtWebhooks(ctx context.Context) (func(), error) {
	objs := l.kv.webhooks
	if err := l.kubevirtApply(ctx, objs); err != nil {
		return nil, err
	}
	n := 0
	for _, o := range objs {
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		n += len(hooks)
	}
	progress("kubevirt-webhooks: %d webhooks of %d configurations call %s", n, len(objs), l.virtAPIURL())
	return nil, nil
}

// kubevirtAdmits is ready once the apiserver calls virt-api for VirtualMachines: an invalid one
// (a disk without its volume) is refused by virt-api's validator, and a valid one comes back
// mutated (the VM mutator gives it a firmware UUID). Both as server-side dry runs: nothing is
// created.
func (l *lab) kubevirtAdmits(ctx context.Context) error {
	vms := l.kv.dyn.Resource(schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}).
		Namespace(kubevirtNamespace)
	vm := func(disks []any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
			"metadata": map[string]any{"name": "ferry-lab-probe"},
			"spec": map[string]any{"runStrategy": "Halted", "template": map[string]any{"spec": map[string]any{
				"domain": map[string]any{"devices": map[string]any{"disks": disks}, "memory": map[string]any{"guest": "64Mi"}},
			}}},
		}}
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "ferry-lab"}
	_, err := vms.Create(ctx, vm([]any{map[string]any{"name": "root", "disk": map[string]any{"bus": "virtio"}}}), dry)
	if err == nil {
		return errors.New("an invalid VirtualMachine was admitted: the apiserver does not call virt-api's validator yet")
	}
	if !strings.Contains(err.Error(), `admission webhook "virtualmachine-validator.kubevirt.io" denied the request`) {
		return fmt.Errorf("invalid VirtualMachine: %w", err)
	}
	got, err := vms.Create(ctx, vm([]any{}), dry)
	if err != nil {
		return fmt.Errorf("valid VirtualMachine: %w", err)
	}
	if uuid, _, _ := unstructured.NestedString(got.Object, "spec", "template", "spec", "domain", "firmware", "uuid"); uuid == "" {
		return errors.New("a VirtualMachine was admitted unmutated: the apiserver does not call virt-api's mutator yet")
	}
	return nil
}

type kubevirtInfo struct {
	Version        string `json:"version"`
	Namespace      string `json:"namespace"`
	VirtAPI        string `json:"virtApi"`
	VirtController string `json:"virtController"`
	CAFile         string `json:"caFile"`
	// HandlerKubeconfig: a token of ServiceAccount kubevirt/kubevirt-handler, for whoever plays
	// virt-handler (ferry-sim --kubevirt real --virt-handler-kubeconfig).
	HandlerKubeconfig string `json:"handlerKubeconfig"`
}

func (l *lab) kubevirtInfo() (any, error) {
	return kubevirtInfo{
		Version: l.kv.version, Namespace: kubevirtNamespace, VirtAPI: l.virtAPIURL(),
		VirtController: l.virtControllerURL(), CAFile: l.kvPath("kubevirt-ca.crt"),
		HandlerKubeconfig: l.kvPath(kubevirtHandlerSA + ".kubeconfig"),
	}, nil
}

// kubevirtRemoveWebhooks removes virt-api's webhook configurations, when this state dir ever
// ran with --kubevirt (DIR/pki/kubevirt-ca.crt exists; otherwise it does nothing). They have
// failurePolicy Fail and call a virt-api that is not running: a lab started without --kubevirt
// would refuse every VirtualMachine; one started with it registers them again once virt-api
// answers (kubevirt-webhooks).
func (l *lab) kubevirtRemoveWebhooks(ctx context.Context) error {
	if !exists(l.kvPath("kubevirt-ca.crt")) {
		return nil
	}
	ar := l.kube.AdmissionregistrationV1()
	errV := ar.ValidatingWebhookConfigurations().Delete(ctx, "virt-api-validator", metav1.DeleteOptions{})
	errM := ar.MutatingWebhookConfigurations().Delete(ctx, "virt-api-mutator", metav1.DeleteOptions{})
	for _, err := range []error{errV, errM} {
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("virt-api's webhook configurations: %w", err)
		}
	}
	if errV == nil || errM == nil {
		progress("%s: virt-api's webhook configurations of an earlier start removed", cmp.Or(map[bool]string{true: "kubevirt"}[l.kubevirt], "crds"))
	}
	return nil
}
