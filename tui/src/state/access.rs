//! What the user may do, per namespace, as the API server answered `SelfSubjectAccessReview`s
//! (issue #49: permissions known up front). A verb the answers refuse is greyed where it is
//! offered and its key says why instead of asking to confirm; a verb not answered yet, or whose
//! review failed, is allowed here and left to the API server, so a missing answer never blocks.
//!
//! Asked once per namespace of a cluster when the namespace first appears on the board (a
//! migration or a wave in it), and again for every namespace after each (re-)list of the
//! cluster's migrations: a reconnect re-lists, and permissions may have changed meanwhile.

use std::collections::{HashMap, HashSet};

use super::{ClusterId, Effect, TargetKind, Verb};

/// The roles ferry ships for people (`deploy/controller/user-roles.yaml`): `ferry-view`
/// watches and reads pod logs; `ferry-operate` also patches the intents and deletes.
pub const VIEW_ROLE: &str = "ferry-view";
/// See [`VIEW_ROLE`].
pub const OPERATE_ROLE: &str = "ferry-operate";

/// One question put to the API server about a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// `patch` on `virtualmachinemigrations`: cancel, retry, pause, resume, cutover.
    PatchMigrations,
    /// `patch` on `migrationwaves`: the same verbs on a wave.
    PatchWaves,
    /// `delete` on `virtualmachinemigrations`.
    DeleteMigrations,
    /// `delete` on `migrationwaves`.
    DeleteWaves,
    /// `get` on `pods/log`: the pod logs view.
    GetPodLogs,
}

impl Check {
    /// Every question, asked together per namespace.
    pub const ALL: [Check; 5] = [
        Check::PatchMigrations,
        Check::PatchWaves,
        Check::DeleteMigrations,
        Check::DeleteWaves,
        Check::GetPodLogs,
    ];

    /// What `verb` on an object of `kind` needs.
    pub fn of(verb: Verb, kind: TargetKind) -> Check {
        match (verb, kind) {
            (Verb::Delete, TargetKind::Migration) => Check::DeleteMigrations,
            (Verb::Delete, TargetKind::Wave) => Check::DeleteWaves,
            // Every other verb is a merge patch of the spec's intents (`ferry_crds::intent`).
            (
                Verb::Cancel | Verb::Retry | Verb::Pause | Verb::Resume | Verb::Cutover,
                TargetKind::Migration,
            ) => Check::PatchMigrations,
            (
                Verb::Cancel | Verb::Retry | Verb::Pause | Verb::Resume | Verb::Cutover,
                TargetKind::Wave,
            ) => Check::PatchWaves,
        }
    }

    /// The RBAC verb.
    pub fn verb(self) -> &'static str {
        match self {
            Check::PatchMigrations | Check::PatchWaves => "patch",
            Check::DeleteMigrations | Check::DeleteWaves => "delete",
            Check::GetPodLogs => "get",
        }
    }

    /// The API group (`""`: the core group).
    pub fn group(self) -> &'static str {
        match self {
            Check::PatchMigrations
            | Check::PatchWaves
            | Check::DeleteMigrations
            | Check::DeleteWaves => ferry_crds::GROUP,
            Check::GetPodLogs => "",
        }
    }

    /// The resource.
    pub fn resource(self) -> &'static str {
        match self {
            Check::PatchMigrations | Check::DeleteMigrations => "virtualmachinemigrations",
            Check::PatchWaves | Check::DeleteWaves => "migrationwaves",
            Check::GetPodLogs => "pods",
        }
    }

    /// The subresource, if any.
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Check::GetPodLogs => Some("log"),
            Check::PatchMigrations
            | Check::PatchWaves
            | Check::DeleteMigrations
            | Check::DeleteWaves => None,
        }
    }

    /// The resource as RBAC rules write it (`pods/log`).
    pub fn resource_path(self) -> String {
        match self.subresource() {
            Some(s) => format!("{}/{s}", self.resource()),
            None => self.resource().to_owned(),
        }
    }

    /// Whether a 403's message is RBAC refusing this check (`User "viewer" cannot patch
    /// resource "virtualmachinemigrations" …`), rather than an admission policy or webhook
    /// refusing the request (also 403, about the request, not the user's role).
    pub fn refused_in(self, message: &str) -> bool {
        message.contains(&format!("cannot {} resource", self.verb()))
    }

    /// The least of ferry's roles that grants it (`deploy/controller/user-roles.yaml`;
    /// `ferry-edit` and the built-in `edit` and `admin` include `ferry-operate`).
    pub fn role(self) -> &'static str {
        match self {
            Check::PatchMigrations
            | Check::PatchWaves
            | Check::DeleteMigrations
            | Check::DeleteWaves => OPERATE_ROLE,
            Check::GetPodLogs => VIEW_ROLE,
        }
    }
}

/// Why a key is refused: what it does, what that needs, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What the key does, in a word or two (`retry`, `pod logs`).
    pub what: &'static str,
    /// What it needs.
    pub check: Check,
    /// The cluster of the namespace.
    pub cluster: ClusterId,
    /// The namespace that refuses it.
    pub namespace: String,
}

/// The answers so far, and which namespaces were asked since their cluster's last list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Access {
    /// Bumped when the board forgets everything (a new scope or context): an answer to an
    /// older question is dropped, its client may have been another cluster's.
    generation: u64,
    /// Namespaces asked about since their cluster's last list.
    asked: HashMap<ClusterId, HashSet<String>>,
    /// The answers: `true` allowed, `false` refused; a check absent is unknown.
    known: HashMap<ClusterId, HashMap<String, HashMap<Check, bool>>>,
}

impl Access {
    /// Whether `check` is allowed in `namespace`: `None` when not known (not answered yet, or
    /// the review failed).
    pub fn allowed(&self, cluster: ClusterId, namespace: &str, check: Check) -> Option<bool> {
        self.known
            .get(&cluster)?
            .get(namespace)?
            .get(&check)
            .copied()
    }

    /// Asks about `namespace` unless it was asked since its cluster's last list.
    pub fn ask(&mut self, cluster: ClusterId, namespace: &str, fx: &mut Vec<Effect>) {
        let asked = self.asked.entry(cluster).or_default();
        if asked.contains(namespace) {
            return;
        }
        asked.insert(namespace.to_owned());
        fx.push(Effect::ReviewAccess {
            cluster,
            namespace: namespace.to_owned(),
            generation: self.generation,
        });
    }

    /// A (re-)list of `cluster` began a new round: every namespace is asked again when seen
    /// (the answers so far stay until the new ones arrive).
    pub fn relisted(&mut self, cluster: ClusterId) {
        self.asked.remove(&cluster);
    }

    /// What the API server answered; an answer of an older generation is dropped, and a
    /// failed check forgets what was known of it (unknown: the API decides).
    pub fn answered(
        &mut self,
        cluster: ClusterId,
        namespace: String,
        generation: u64,
        answers: Vec<(Check, Result<bool, String>)>,
    ) {
        if generation != self.generation {
            return;
        }
        let ns = self
            .known
            .entry(cluster)
            .or_default()
            .entry(namespace)
            .or_default();
        for (check, answer) in answers {
            match answer {
                Ok(allowed) => {
                    ns.insert(check, allowed);
                }
                Err(_) => {
                    ns.remove(&check);
                }
            }
        }
    }

    /// The API server refused a request that needed `check` in `namespace`: whatever was
    /// known, it is refused now (permissions change; the next review may say otherwise).
    pub fn refused_by_server(&mut self, cluster: ClusterId, namespace: &str, check: Check) {
        self.known
            .entry(cluster)
            .or_default()
            .entry(namespace.to_owned())
            .or_default()
            .insert(check, false);
    }

    /// Forgets everything (a new scope or context); answers to questions asked before are
    /// dropped when they arrive.
    pub fn clear(&mut self) {
        self.generation += 1;
        self.asked.clear();
        self.known.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The roles named here are the ones `deploy/` ships, and each grants what it is named for.
    #[test]
    fn the_roles_named_are_the_deployed_ones_that_grant_each_check() {
        let yaml = include_str!("../../../deploy/controller/user-roles.yaml");
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        let name = |d: &serde_yaml::Value| d["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let rules_of = |role: &str| -> Vec<serde_yaml::Value> {
            // An aggregated role's rules are those of the ClusterRoles its selectors pick.
            let r = docs.iter().find(|d| name(d) == role).unwrap();
            let selectors = r["aggregationRule"]["clusterRoleSelectors"]
                .as_sequence()
                .unwrap();
            docs.iter()
                .filter(|d| {
                    selectors.iter().any(|s| {
                        s["matchLabels"].as_mapping().unwrap().iter().all(|(k, v)| {
                            d["metadata"]["labels"].get(k.as_str().unwrap()) == Some(v)
                        })
                    })
                })
                .flat_map(|d| d["rules"].as_sequence().unwrap().clone())
                .collect()
        };
        let grants = |rules: &[serde_yaml::Value], c: Check| {
            let has = |r: &serde_yaml::Value, field: &str, want: &str| {
                r[field]
                    .as_sequence()
                    .is_some_and(|s| s.iter().any(|v| v.as_str() == Some(want)))
            };
            rules.iter().any(|r| {
                has(r, "apiGroups", c.group())
                    && has(r, "resources", &c.resource_path())
                    && has(r, "verbs", c.verb())
            })
        };
        for c in Check::ALL {
            assert!(
                grants(&rules_of(c.role()), c),
                "{} does not grant {c:?}",
                c.role()
            );
        }
        // And the view role does not grant what the operate role is named for.
        let rbac = "virtualmachinemigrations.migration.platform.example \"a\" is forbidden: User \"viewer\" cannot patch resource \"virtualmachinemigrations\" in API group \"migration.platform.example\" in the namespace \"apps\"";
        assert!(Check::PatchMigrations.refused_in(rbac));
        assert!(!Check::DeleteMigrations.refused_in(rbac));
        let policy = "migrationwaves.migration.platform.example \"w\" is forbidden: ValidatingAdmissionPolicy 'ferry-authoring' with binding 'ferry-authoring' denied request: only intents";
        assert!(!Check::PatchWaves.refused_in(policy));
        for c in [Check::PatchMigrations, Check::DeleteWaves] {
            assert!(!grants(&rules_of(VIEW_ROLE), c), "{VIEW_ROLE} grants {c:?}");
        }
    }

    #[test]
    fn a_namespace_is_asked_once_per_list_and_answers_of_an_older_generation_are_dropped() {
        let mut a = Access::default();
        let mut fx = vec![];
        a.ask(ClusterId(0), "apps", &mut fx);
        a.ask(ClusterId(0), "apps", &mut fx);
        a.ask(ClusterId(1), "apps", &mut fx);
        assert_eq!(fx.len(), 2);
        a.relisted(ClusterId(0));
        a.ask(ClusterId(0), "apps", &mut fx);
        assert_eq!(fx.len(), 3);
        let no = vec![(Check::PatchMigrations, Ok(false))];
        a.answered(ClusterId(0), "apps".into(), 0, no.clone());
        assert_eq!(
            a.allowed(ClusterId(0), "apps", Check::PatchMigrations),
            Some(false)
        );
        // A failed review of that check: unknown again.
        a.answered(
            ClusterId(0),
            "apps".into(),
            0,
            vec![(Check::PatchMigrations, Err("timeout".into()))],
        );
        assert_eq!(
            a.allowed(ClusterId(0), "apps", Check::PatchMigrations),
            None
        );
        a.clear();
        a.answered(ClusterId(0), "apps".into(), 0, no);
        assert_eq!(
            a.allowed(ClusterId(0), "apps", Check::PatchMigrations),
            None
        );
    }
}
