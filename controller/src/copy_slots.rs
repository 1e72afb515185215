//! Limits of migrations copying at once from one ESXi host and from one datastore, across every
//! wave and lone migration the controller runs (`--max-copies-per-host`,
//! `--max-copies-per-datastore`): a wave's `maxInFlight` bounds one wave, while two waves over
//! the same host or datastore would saturate it together.
//!
//! A migration takes its slot in Preparing, before the source is touched, and holds it while it
//! copies: from its power-off (recorded in `status.sourcePowerOff`) or, for a source already off
//! or a warm first copy, from Converting, until it leaves Converting. That is read from the
//! migrations the controller watches ([`holds`], pure), so a restart forgets nothing. Between a
//! grant and the status write that shows it, the grant is remembered here ([`Slots`]): two
//! reconciles deciding at once cannot both take the last slot. A migration without a slot waits
//! in `Queued` (reason `HostCopyLimit` or `DatastoreCopyLimit`, the message naming which and how
//! many), nothing read from vSphere while it waits.
//!
//! Not counted: a warm migration's precopy rounds and its cutover copy (short reads of changed
//! areas, made while it waits for its cutover in CuttingOver).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferry_crds::{Phase, Reason, VirtualMachineMigration};

/// Where a migration copies from: its source's ESXi host and the datastores of its disks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// The ESXi host, by name (none when vSphere said none).
    pub host: Option<String>,
    /// The datastores, each once.
    pub datastores: Vec<String>,
}

impl Place {
    /// Where `vmm`'s recorded source copies from, once Preparing recorded it. Pure.
    pub fn of(vmm: &VirtualMachineMigration) -> Option<Self> {
        let source = vmm.status.as_ref()?.source.as_deref()?;
        Some(Self::of_source(source))
    }

    /// Where `source` copies from. Pure.
    pub fn of_source(source: &ferry_crds::DiscoveredSource) -> Self {
        Self {
            host: source.host.clone(),
            datastores: source.datastores().into_iter().map(str::to_owned).collect(),
        }
    }
}

/// The limits, 0 for none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Most migrations copying at once from one ESXi host.
    pub per_host: u32,
    /// Most migrations copying at once from one datastore.
    pub per_datastore: u32,
}

/// Where a limit comes from, as a message names it.
const HOST_FLAG: &str = "the controller's --max-copies-per-host";
const DATASTORE_FLAG: &str = "the controller's --max-copies-per-datastore";
const HOST_SPEC: &str = "its spec.conversion.copyLimits.perHost";
const DATASTORE_SPEC: &str = "its spec.conversion.copyLimits.perDatastore";

impl Limits {
    /// Whether any limit is set.
    pub fn any(self) -> bool {
        self.per_host > 0 || self.per_datastore > 0
    }

    /// The limits for a migration asking for `own` (`spec.conversion.copyLimits`): each the
    /// lower of the controller's and its own, never higher than the controller's; with where
    /// each comes from (host, datastore). Pure.
    pub fn within(
        self,
        own: Option<&ferry_crds::CopyLimits>,
    ) -> (Self, (&'static str, &'static str)) {
        let lower = |controller: u32, own: Option<u32>, flag, spec| match own {
            Some(o) if o > 0 && (controller == 0 || o < controller) => (o, spec),
            _ => (controller, flag),
        };
        let (per_host, host_by) = lower(
            self.per_host,
            own.and_then(|o| o.per_host),
            HOST_FLAG,
            HOST_SPEC,
        );
        let (per_datastore, datastore_by) = lower(
            self.per_datastore,
            own.and_then(|o| o.per_datastore),
            DATASTORE_FLAG,
            DATASTORE_SPEC,
        );
        (
            Self {
                per_host,
                per_datastore,
            },
            (host_by, datastore_by),
        )
    }
}

/// Whether a migration may take a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It may copy (or already holds its slot, or no limit applies).
    Free,
    /// A limit is reached: the first one found, host before datastores.
    Full {
        /// `HostCopyLimit` or `DatastoreCopyLimit`.
        reason: Reason,
        /// The host's or datastore's name.
        name: String,
        /// How many copy from it now.
        copying: usize,
        /// The limit.
        limit: u32,
        /// Where the limit comes from: the controller's flag or the migration's spec.
        by: &'static str,
    },
}

impl Verdict {
    /// The words of a migration waiting for this slot.
    pub fn message(&self) -> Option<String> {
        match self {
            Verdict::Free => None,
            Verdict::Full {
                reason,
                name,
                copying,
                limit,
                by,
            } => {
                let what = match reason {
                    Reason::HostCopyLimit => "ESXi host",
                    _ => "datastore",
                };
                let copy = if *copying == 1 {
                    "1 migration copies".to_owned()
                } else {
                    format!("{copying} migrations copy")
                };
                // What a narrow board column shows first: where it waits.
                Some(format!(
                    "waiting for a copy slot on {what} {name}: {copy} from it now, the limit is {limit} ({by}); the source is untouched"
                ))
            }
        }
    }
}

/// Whether `vmm` holds a copy slot, as its status shows: copying (Converting), or in Preparing
/// past its power-off. Pure.
pub fn holds(vmm: &VirtualMachineMigration) -> bool {
    let Some(s) = vmm.status.as_ref() else {
        return false;
    };
    match vmm.phase() {
        Phase::Converting => true,
        Phase::Preparing => s.source_power_off.is_some(),
        Phase::Pending
        | Phase::Queued
        | Phase::Importing
        | Phase::CuttingOver
        | Phase::ConvertingGuest
        | Phase::CreatingVM
        | Phase::Starting
        | Phase::Validating
        | Phase::Succeeded
        | Phase::Failed
        | Phase::Cancelled
        | Phase::RolledBack => false,
    }
}

/// Whether `mine` may copy while `others` (each holder's place, not including its own) do,
/// within `limits` (the controller's). Pure.
pub fn verdict<'a>(
    mine: &Place,
    others: impl IntoIterator<Item = &'a Place>,
    limits: Limits,
) -> Verdict {
    verdict_by(mine, others, limits, (HOST_FLAG, DATASTORE_FLAG))
}

/// [`verdict`], each limit named by where it comes from (`by`: host, datastore). Pure.
fn verdict_by<'a>(
    mine: &Place,
    others: impl IntoIterator<Item = &'a Place>,
    limits: Limits,
    by: (&'static str, &'static str),
) -> Verdict {
    if !limits.any() {
        return Verdict::Free;
    }
    let mut hosts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut stores: BTreeMap<&str, usize> = BTreeMap::new();
    for p in others {
        if let Some(h) = p.host.as_deref() {
            *hosts.entry(h).or_default() += 1;
        }
        for d in &p.datastores {
            *stores.entry(d.as_str()).or_default() += 1;
        }
    }
    let full = |reason, name: &str, copying: usize, limit: u32, by| {
        (limit > 0 && copying >= limit as usize).then(|| Verdict::Full {
            reason,
            name: name.to_owned(),
            copying,
            limit,
            by,
        })
    };
    let host = mine.host.as_deref().and_then(|h| {
        full(
            Reason::HostCopyLimit,
            h,
            hosts.get(h).copied().unwrap_or(0),
            limits.per_host,
            by.0,
        )
    });
    host.or_else(|| {
        mine.datastores.iter().find_map(|d| {
            full(
                Reason::DatastoreCopyLimit,
                d,
                stores.get(d.as_str()).copied().unwrap_or(0),
                limits.per_datastore,
                by.1,
            )
        })
    })
    .unwrap_or(Verdict::Free)
}

/// How long a grant is remembered without the status that shows it: a migration granted a
/// slot writes its power-off record or Converting within a reconcile or two; one that did not
/// (another rule stopped it) gives the slot back after this.
const GRANT_TTL: Duration = Duration::from_secs(60);

/// The grants not yet shown by the migrations' statuses, by migration uid.
#[derive(Debug, Default)]
pub struct Slots {
    granted: Mutex<BTreeMap<String, (Place, Instant)>>,
}

impl Slots {
    /// Takes a slot for migration `uid` copying from `mine`, given the `holders` the watch
    /// shows (uid and place, `uid`'s own included or not), within `limits` (the controller's,
    /// lowered by the migration's `own`), or says which limit holds it. Atomic over every
    /// caller: the count and the grant happen under one lock.
    pub fn take(
        &self,
        uid: &str,
        mine: &Place,
        holders: &[(String, Place)],
        (limits, own): (Limits, Option<&ferry_crds::CopyLimits>),
        now: Instant,
    ) -> Verdict {
        let (limits, by) = limits.within(own);
        let mut granted = self.granted.lock().unwrap_or_else(|p| p.into_inner());
        // A grant the watch now shows as a holder, or too old, is no longer remembered here.
        granted.retain(|u, (_, at)| {
            now.duration_since(*at) < GRANT_TTL && !holders.iter().any(|(h, _)| h == u)
        });
        if !limits.any() || holders.iter().any(|(h, _)| h == uid) {
            return Verdict::Free;
        }
        let others = holders.iter().map(|(_, p)| p).chain(
            granted
                .iter()
                .filter(|(u, _)| *u != uid)
                .map(|(_, (p, _))| p),
        );
        let v = verdict_by(mine, others, limits, by);
        if v == Verdict::Free {
            granted.insert(uid.to_owned(), (mine.clone(), now));
        }
        v
    }

    /// Forgets `uid`'s grant (it was cancelled, failed or deleted before it showed).
    pub fn give_back(&self, uid: &str) {
        self.granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::fixtures::migration;

    fn place(host: &str, stores: &[&str]) -> Place {
        Place {
            host: Some(host.into()),
            datastores: stores.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn the_host_limit_and_then_each_datastores_hold() {
        let limits = Limits {
            per_host: 2,
            per_datastore: 3,
        };
        let a = place("esx1", &["ds1"]);
        let b = place("esx1", &["ds2"]);
        let c = place("esx2", &["ds1"]);
        assert_eq!(verdict(&a, [&b], limits), Verdict::Free);
        let Verdict::Full {
            reason,
            name,
            copying,
            limit,
            ..
        } = verdict(&a, [&a, &b], limits)
        else {
            panic!("two copy from esx1 already")
        };
        assert_eq!(
            (reason, name.as_str(), copying, limit),
            (Reason::HostCopyLimit, "esx1", 2, 2)
        );
        // Another host, but ds1 holds three copies: the datastore's limit.
        let v = verdict(&c, [&a, &a, &c], limits);
        assert!(
            matches!(&v, Verdict::Full { reason: Reason::DatastoreCopyLimit, name, copying: 3, .. } if name == "ds1"),
            "{v:?}"
        );
        assert!(v.message().unwrap().contains("datastore ds1"), "{v:?}");
        // No limits: always free.
        assert_eq!(verdict(&a, [&a, &a, &a], Limits::default()), Verdict::Free);
        // A zero limit is none, the other still holds.
        let host_only = Limits {
            per_host: 1,
            per_datastore: 0,
        };
        assert_eq!(verdict(&c, [&a, &b], host_only), Verdict::Free);
    }

    #[test]
    fn a_migrations_own_limits_only_lower_the_controllers() {
        let controller = Limits {
            per_host: 4,
            per_datastore: 0,
        };
        let own = |h, d| ferry_crds::CopyLimits {
            per_host: h,
            per_datastore: d,
        };
        let (l, by) = controller.within(Some(&own(Some(1), Some(3))));
        assert_eq!((l.per_host, l.per_datastore), (1, 3));
        assert_eq!(by, (HOST_SPEC, DATASTORE_SPEC));
        // Higher than the controller's: the controller's holds.
        let (l, by) = controller.within(Some(&own(Some(9), None)));
        assert_eq!((l.per_host, l.per_datastore), (4, 0));
        assert_eq!(by, (HOST_FLAG, DATASTORE_FLAG));
        // The message says which limit held it.
        let slots = Slots::default();
        let p = place("esx1", &["ds1"]);
        let at = Instant::now();
        let mine = own(Some(1), None);
        let shown = [("x".to_owned(), p.clone())];
        let v = slots.take("m", &p, &shown, (controller, Some(&mine)), at);
        assert!(
            v.message()
                .unwrap()
                .contains("limit is 1 (its spec.conversion.copyLimits.perHost)"),
            "{v:?}"
        );
        assert_eq!(
            slots.take("m", &p, &shown, (controller, None), at),
            Verdict::Free
        );
    }

    #[test]
    fn two_callers_at_once_cannot_both_take_the_last_slot() {
        let slots = Slots::default();
        let limits = Limits {
            per_host: 1,
            per_datastore: 0,
        };
        let at = Instant::now();
        let p = place("esx1", &["ds1"]);
        assert_eq!(slots.take("a", &p, &[], (limits, None), at), Verdict::Free);
        // b decides before a's status shows: a's grant counts.
        assert!(matches!(
            slots.take("b", &p, &[], (limits, None), at),
            Verdict::Full { copying: 1, .. }
        ));
        // a asks again (its next reconcile): still its own.
        assert_eq!(slots.take("a", &p, &[], (limits, None), at), Verdict::Free);
        // The watch shows a as a holder: counted once, from the watch.
        let shown = [("a".to_owned(), p.clone())];
        assert!(matches!(
            slots.take("b", &p, &shown, (limits, None), at),
            Verdict::Full { copying: 1, .. }
        ));
        // a finished copying (no longer a holder): b takes the slot.
        assert_eq!(slots.take("b", &p, &[], (limits, None), at), Verdict::Free);
        // A grant never shown is given back after its time.
        assert!(matches!(
            slots.take("c", &p, &[], (limits, None), at),
            Verdict::Full { .. }
        ));
        let later = at + GRANT_TTL + Duration::from_secs(1);
        assert_eq!(
            slots.take("c", &p, &[], (limits, None), later),
            Verdict::Free
        );
        slots.give_back("c");
        assert_eq!(
            slots.take("d", &p, &[], (limits, None), later),
            Verdict::Free
        );
    }

    #[test]
    fn a_migration_holds_its_slot_from_its_power_off_through_converting() {
        let mut m = migration("m").with_phase(Phase::Preparing);
        assert!(!holds(&m), "not yet touched");
        m.status.as_mut().unwrap().source_power_off = Some(Default::default());
        assert!(holds(&m));
        assert!(holds(&migration("m").with_phase(Phase::Converting)));
        assert!(!holds(&migration("m").with_phase(Phase::Importing)));
        assert!(!holds(&migration("m").with_phase(Phase::Queued)));
    }
}
