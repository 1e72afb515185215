package main

import "path/filepath"

// The audit policy, at Metadata level and ResponseComplete: every request authenticated as a
// ServiceAccount, reads included (what a component running with a ServiceAccount token did, for
// the RBAC proofs), and every write of anyone else (who, impersonating whom: how a test proves
// that a fenced controller wrote nothing). Other reads are not logged, so DIR/logs/audit.log
// stays small enough for a whole test run.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

func auditPolicyPath(dir string) string { return filepath.Join(dir, "audit-policy.yaml") }

func writeAuditPolicy(dir string) error {
	return writeFileAtomic(auditPolicyPath(dir), []byte(auditPolicy), 0o644)
}
