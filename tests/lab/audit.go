package main

import "path/filepath"

// The audit policy: metadata of every write (create, update, patch, delete) at ResponseComplete,
// nothing about reads, so DIR/logs/audit.log stays small enough for a whole test run.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

func auditPolicyPath(dir string) string { return filepath.Join(dir, "audit-policy.yaml") }

func writeAuditPolicy(dir string) error {
	return writeFileAtomic(auditPolicyPath(dir), []byte(auditPolicy), 0o644)
}
