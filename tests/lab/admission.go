package main

import "path/filepath"

// The admission plugins a hardened distribution enables beyond kube-apiserver's defaults, so
// that what ferry needs of them shows in the lab rather than on a customer's cluster:
//   - OwnerReferencesPermissionEnforcement (on in OpenShift): setting blockOwnerDeletion needs
//     `update` on the owner's finalizers subresource, changing ownerReferences needs `delete`.
//   - NodeRestriction, AlwaysPullImages, EventRateLimit: the CIS Kubernetes Benchmark's 1.2.15,
//     1.2.11 and 1.2.9.
//   - DenyServiceExternalIPs: the mitigation of CVE-2020-8554 that hardened guides recommend.
//
// PodSecurity, ServiceAccount, NamespaceLifecycle, LimitRanger, ResourceQuota and the admission
// policies and webhooks are among the defaults and stay on.
var hardenedAdmissionPlugins = []string{
	"NodeRestriction",
	"OwnerReferencesPermissionEnforcement",
	"AlwaysPullImages",
	"EventRateLimit",
	"DenyServiceExternalIPs",
}

// EventRateLimit's limits (it refuses to start without them), of the order hardened guides show:
// core/v1 Events per namespace and per user. Events of events.k8s.io/v1, which ferry writes, are
// not limited by the plugin.
const admissionConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: EventRateLimit
  configuration:
    apiVersion: eventratelimit.admission.k8s.io/v1alpha1
    kind: Configuration
    limits:
    - type: Namespace
      qps: 50
      burst: 100
      cacheSize: 2000
    - type: User
      qps: 10
      burst: 50
`

func admissionConfigPath(dir string) string { return filepath.Join(dir, "admission-config.yaml") }

func writeAdmissionConfig(dir string) error {
	return writeFileAtomic(admissionConfigPath(dir), []byte(admissionConfig), 0o644)
}
