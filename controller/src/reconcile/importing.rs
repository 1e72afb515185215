//! Importing: one CDI DataVolume per staged disk, all `Succeeded`.
//!
//! CDI's failure contract: a transient importer failure shows as `restartCount` rising with the
//! `Running` condition `False` (reason `Error`) while the phase stays `ImportInProgress`; CDI
//! restarts the importer itself. A permanent one is phase `Failed`. ferry gives up after
//! [`Policy::max_import_restarts`](super::scope::Policy) restarts of one disk.

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, DiskImported},
    DiskStatus, Phase, Progress, Reason, names,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::checkpoint::{Checkpoint, Io};
use super::credentials;
use super::intents::Cleanup;
use super::outcome::{Outcome, Record, Step};
use super::scope::Scope;
use super::world::{self, staged_keys};
use crate::Result;
use crate::apis::cdi::{self, DataVolume, DvState};
use crate::children::{Ownership, datavolume, ownership, secret};
use crate::kubeio::create_if_absent;
use crate::ports::StagingLogin;
use crate::problem::Problem;

/// The Importing checkpoint.
#[derive(Debug)]
pub struct Importing;

/// What Importing observes.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The staging login the CDI Secret is made from, and whose CA (if any) the DataVolumes
    /// name.
    pub credentials: Result<Option<StagingLogin>, Problem>,
    /// The CDI S3 Secret exists.
    pub secret_present: bool,
    /// One per disk.
    pub dvs: Vec<DvState>,
    /// A child name (CDI Secret or CA ConfigMap, a DataVolume) held by an object that is not
    /// this migration's: never read as progress.
    pub conflict: Option<Problem>,
}

/// What Importing does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the CDI S3 Secret from the staging credentials (after the CA ConfigMap, when
    /// staging has a private CA: a present Secret means its ConfigMap is there too).
    CreateS3Secret,
    /// Create the DataVolume of disk `n`.
    CreateDataVolume(usize),
}

impl Checkpoint for Importing {
    const PHASE: Phase = Phase::Importing;
    const CONDITIONS: &'static [ConditionType] = &[DiskImported];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::UnfinishedDataVolumes];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let mut conflicts = vec![];
        let secret_present = match io
            .api::<Secret>()
            .get_opt(&secret::s3_secret_name(io.vmm))
            .await?
        {
            Some(s) => match ownership("Secret", &s.metadata, io.vmm) {
                Ownership::Ours => true,
                Ownership::Foreign(c) => {
                    conflicts.push(c);
                    false
                }
            },
            None => false,
        };
        conflicts.extend(
            world::conflict::<ConfigMap>(io, &secret::s3_ca_config_map_name(io.vmm)).await?,
        );
        let credentials = credentials::staging_login(io).await?.map(Some);
        let dv_api = io.api::<DataVolume>();
        let mut dvs = vec![];
        for i in 0..staged_keys(io.vmm).len() {
            let found = dv_api.get_opt(&names::datavolume_name(io.vmm, i)).await?;
            dvs.push(
                match found.as_ref().map(|d| ownership("DataVolume", &d.metadata, io.vmm)) {
                    Some(Ownership::Foreign(c)) => {
                        conflicts.push(c);
                        DvState::Absent
                    }
                    Some(Ownership::Ours) | None => cdi::observe(found.as_ref()),
                },
            );
        }
        Ok(Observed {
            credentials,
            secret_present,
            dvs,
            conflict: conflicts.first().map(|c| c.problem(world::RENAME_HINT)),
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, observed: &Observed, action: &Action) -> Result<Option<Problem>> {
        let m = &io.ctx.metrics;
        let fm = names::CONTROLLER_FIELD_MANAGER;
        match action {
            Action::CreateS3Secret => {
                let login = match &observed.credentials {
                    Ok(Some(l)) => l,
                    // The decision asks for the Secret only with the credentials in hand.
                    Ok(None) => return Ok(None),
                    Err(p) => return Ok(Some(p.clone())),
                };
                if let Some(pem) = &login.ca_bundle {
                    let map = secret::cdi_ca_config_map(io.vmm, pem)?;
                    create_if_absent(m, &io.api::<ConfigMap>(), &map, fm).await?;
                }
                let creds = secret::S3Credentials {
                    access_key_id: login.access_key_id.clone(),
                    secret_access_key: login.secret_access_key.clone(),
                };
                let obj = secret::cdi_s3_secret(io.vmm, &creds)?;
                create_if_absent(m, &io.api::<Secret>(), &obj, fm).await?;
            }
            Action::CreateDataVolume(i) => {
                let ca = match &observed.credentials {
                    Ok(Some(l)) => l
                        .ca_bundle
                        .as_ref()
                        .map(|_| secret::s3_ca_config_map_name(io.vmm)),
                    Ok(None) => None,
                    Err(p) => return Ok(Some(p.clone())),
                };
                let cap = io
                    .vmm
                    .status
                    .as_ref()
                    .and_then(|s| s.source.as_ref())
                    .and_then(|s| s.disks.get(*i))
                    .map_or(0, |d| d.capacity_bytes);
                let dv = datavolume::data_volume(
                    io.vmm,
                    *i,
                    cap,
                    &secret::s3_secret_name(io.vmm),
                    ca.as_deref(),
                )?;
                create_if_absent(m, &io.api::<DataVolume>(), &dv, fm).await?;
            }
        }
        Ok(None)
    }
}

/// Bytes CDI copies for disk `i`: the staged image's size, else the disk's capacity.
fn disk_size(old: &[DiskStatus], i: usize) -> i64 {
    old.get(i)
        .and_then(|d| d.staged_bytes.or(d.capacity_bytes))
        .unwrap_or(0)
        .max(0)
}

/// Per-disk import status and overall progress (rate and ETA averaged over the time spent in
/// Importing). Pure.
fn progress(scope: &Scope<Observed>, dvs: &[DvState]) -> Record {
    let old = scope
        .vmm
        .status
        .as_ref()
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let secs = scope.in_phase_for().as_secs_f64();
    let mut disks = Vec::with_capacity(dvs.len());
    let (mut done, mut total) = (0i64, 0i64);
    for (i, dv) in dvs.iter().enumerate() {
        let size = disk_size(old, i);
        let (phase, pct) = match dv {
            DvState::Absent => (None, 0.0),
            DvState::Deleting => (Some("Deleting".to_owned()), 0.0),
            DvState::InProgress { phase, percent, .. } => {
                (Some(phase.clone()), percent.unwrap_or(0.0))
            }
            DvState::Succeeded => (Some("Succeeded".to_owned()), 100.0),
            DvState::Failed { .. } => (Some("Failed".to_owned()), 0.0),
        };
        let bytes = (size as f64 * pct / 100.0).round() as i64;
        done += bytes;
        total += size;
        let mut d = old.get(i).cloned().unwrap_or_default();
        d.index = i32::try_from(i).unwrap_or(i32::MAX);
        d.data_volume = Some(names::datavolume_name(&scope.vmm, i));
        d.import_phase = phase;
        d.bytes_done = Some(bytes);
        d.percent = Some((pct * 100.0).round() / 100.0);
        d.rate_bytes_per_second =
            (secs >= 1.0 && bytes > 0 && pct < 100.0).then(|| (bytes as f64 / secs) as i64);
        disks.push(d);
    }
    let percent = if total > 0 {
        ((done as f64 * 10_000.0 / total as f64).round() / 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    };
    let rate = (secs >= 1.0 && done > 0).then(|| (done as f64 / secs) as i64);
    let eta = rate.filter(|r| *r > 0).map(|r| (total - done).max(0) / r);
    Record {
        source: None,
        disks: Some(disks),
        progress: Some(Progress {
            percent,
            bytes_done: done,
            bytes_total: total,
            rate_bytes_per_second: rate,
            eta_seconds: eta,
        }),
    }
}

/// Decides the Importing step. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let Observed {
        credentials,
        secret_present,
        dvs,
        conflict,
    } = &scope.world;
    let record = progress(scope, dvs);
    if let Some(p) = conflict {
        return Outcome::from_problem(scope, p, Some(DiskImported)).recording(record);
    }
    let n = dvs.len();
    let fail = |message: String| {
        Outcome::failure(
            Reason::ImportFailed,
            message,
            true,
            Phase::Importing,
            DiskImported,
        )
        .recording(record.clone())
    };
    for (i, dv) in dvs.iter().enumerate() {
        match dv {
            DvState::Failed { message } => {
                return fail(format!(
                    "DataVolume {} failed: {message}; fix the cause, then raise spec.retry",
                    names::datavolume_name(&scope.vmm, i)
                ));
            }
            DvState::InProgress {
                restarts, failing, ..
            } if *restarts > scope.policy.max_import_restarts => {
                return fail(format!(
                    "the importer of DataVolume {} restarted {restarts} times{}; raise spec.retry to import again",
                    names::datavolume_name(&scope.vmm, i),
                    failing
                        .as_deref()
                        .map(|m| format!(" (last: {m})"))
                        .unwrap_or_default()
                ));
            }
            _ => {}
        }
    }
    if dvs.iter().all(|d| *d == DvState::Succeeded) && n > 0 {
        let msg = format!("{n} DataVolume(s) imported");
        return Outcome::new(
            Step::Advance {
                to: Phase::CreatingVM,
            },
            msg.clone(),
        )
        .with(DiskImported, True, Reason::Imported, msg)
        .recording(record);
    }
    let mut actions = vec![];
    if !secret_present {
        if let Err(p) = credentials {
            return Outcome::from_problem(scope, p, Some(DiskImported)).recording(record);
        }
        actions.push(Action::CreateS3Secret);
    }
    actions.extend(
        dvs.iter()
            .enumerate()
            .filter(|(_, d)| **d == DvState::Absent)
            .map(|(i, _)| Action::CreateDataVolume(i)),
    );
    let pct = record.progress.as_ref().map_or(0.0, |p| p.percent);
    let restarting: Vec<String> = dvs
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match d {
            DvState::InProgress {
                restarts, failing, ..
            } if *restarts > 0 => Some(format!(
                "disk {i}: importer restarted {restarts} time(s){}",
                failing
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )),
            _ => None,
        })
        .collect();
    // The condition's message stays put while bytes flow (a write per percent would follow);
    // the percentage goes to the summary line, which is written throttled.
    let (reason, cond_msg) = if restarting.is_empty() {
        (Reason::InProgress, format!("importing {n} disk(s)"))
    } else {
        (
            Reason::TransientError,
            format!("importing {n} disk(s); {}", restarting.join("; ")),
        )
    };
    let step = if actions.is_empty() {
        Step::Wait {
            requeue: scope.policy.wait_requeue,
        }
    } else {
        Step::Act(actions)
    };
    Outcome::new(step, format!("importing {n} disk(s): {pct:.1}%"))
        .with(DiskImported, Unknown, reason, cond_msg)
        .recording(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};
    use proptest::prelude::*;

    fn running(pct: f64, restarts: i32) -> DvState {
        DvState::InProgress {
            phase: "ImportInProgress".into(),
            percent: Some(pct),
            restarts,
            failing: (restarts > 0).then(|| "boom".into()),
        }
    }

    fn scope_with(
        dvs: Vec<DvState>,
        secret_present: bool,
        credentials: Result<(), Problem>,
    ) -> Scope<Observed> {
        let mut vmm = migration("m")
            .with_disks(dvs.len())
            .with_phase(Phase::Importing);
        if let Some(s) = vmm.status.as_mut() {
            ferry_crds::history::record_phase(&mut s.history, Phase::Importing, 1, &ts(0));
        }
        Scope {
            vmm,
            now: ts(10).0,
            policy: Policy::default(),
            retries: 0,
            world: Observed {
                credentials: credentials.map(|()| None),
                secret_present,
                dvs,
                conflict: None,
            },
        }
    }

    fn decide_with(dvs: Vec<DvState>) -> Outcome<Action> {
        decide(&scope_with(dvs, true, Ok(())))
    }

    #[test]
    fn table() {
        use DvState::*;
        assert_eq!(
            decide_with(vec![Succeeded, Succeeded]).step,
            Step::Advance {
                to: Phase::CreatingVM
            }
        );
        assert_eq!(
            decide_with(vec![Absent, Absent]).step,
            Step::Act(vec![
                Action::CreateDataVolume(0),
                Action::CreateDataVolume(1)
            ])
        );
        assert_eq!(
            decide_with(vec![Succeeded, Absent]).step,
            Step::Act(vec![Action::CreateDataVolume(1)])
        );
        assert!(matches!(
            decide_with(vec![running(45.0, 0), Succeeded]).step,
            Step::Wait { .. }
        ));
        assert!(matches!(
            decide_with(vec![Deleting]).step,
            Step::Wait { .. }
        ));
        let transient = decide_with(vec![running(40.0, 1)]);
        assert!(
            matches!(transient.step, Step::Wait { .. }),
            "CDI restarts the importer itself"
        );
        assert_eq!(transient.conditions[0].reason, Reason::TransientError);
        let gave_up = decide_with(vec![running(
            40.0,
            Policy::default().max_import_restarts + 1,
        )]);
        assert!(matches!(
            gave_up.step,
            Step::Fail {
                reason: Reason::ImportFailed,
                resume: Phase::Importing,
                ..
            }
        ));
        let failed = decide_with(vec![
            Failed {
                message: "checksum".into(),
            },
            Succeeded,
        ]);
        assert!(matches!(
            failed.step,
            Step::Fail {
                reason: Reason::ImportFailed,
                retriable: true,
                ..
            }
        ));
        assert_eq!(
            failed.conditions[0].status,
            ferry_crds::ConditionStatus::False
        );
    }

    #[test]
    fn the_cdi_secret_comes_first_and_waits_for_credentials() {
        let o = decide(&scope_with(vec![DvState::Absent], false, Ok(())));
        assert_eq!(
            o.step,
            Step::Act(vec![Action::CreateS3Secret, Action::CreateDataVolume(0)])
        );
        let o = decide(&scope_with(
            vec![DvState::Absent],
            false,
            Err(Problem::transient(Reason::SecretNotFound, "no secret")),
        ));
        assert!(matches!(
            o.step,
            Step::Retry {
                reason: Reason::SecretNotFound,
                ..
            }
        ));
    }

    #[test]
    fn a_datavolume_of_another_migration_is_a_conflict_not_an_import() {
        let mut scope = scope_with(vec![DvState::Absent], true, Ok(()));
        scope.world.conflict = Some(Problem::permanent(
            Reason::TargetConflict,
            "DataVolume m-disk-0 already exists and was made by an earlier migration",
        ));
        let o = decide(&scope);
        assert!(matches!(
            o.step,
            Step::Fail {
                reason: Reason::TargetConflict,
                retriable: false,
                ..
            }
        ));
        assert_eq!(o.conditions[0].reason, Reason::TargetConflict);
    }

    #[test]
    fn progress_is_weighted_by_disk_size_with_rate_and_eta() {
        let o = decide_with(vec![running(50.0, 0), DvState::Succeeded]);
        let p = o.record.progress.unwrap();
        assert_eq!(p.bytes_total, 2 * (64 << 20));
        assert_eq!(p.percent, 75.0);
        assert_eq!(p.bytes_done, (64 << 20) * 3 / 2);
        assert_eq!(p.rate_bytes_per_second, Some((64 << 20) * 3 / 2 / 10));
        assert_eq!(
            p.eta_seconds,
            Some(3),
            "a quarter left at a tenth of the total per second"
        );
        let disks = o.record.disks.unwrap();
        assert_eq!(disks[0].import_phase.as_deref(), Some("ImportInProgress"));
        assert_eq!(disks[0].data_volume.as_deref(), Some("m-disk-0"));
        assert_eq!(disks[1].percent, Some(100.0));
    }

    fn dv_state() -> impl Strategy<Value = DvState> {
        prop_oneof![
            Just(DvState::Absent),
            Just(DvState::Deleting),
            Just(DvState::Succeeded),
            "[a-z]{0,8}".prop_map(|m| DvState::Failed { message: m }),
            (0.0f64..100.0, 0i32..6, any::<bool>()).prop_map(|(p, r, f)| DvState::InProgress {
                phase: "ImportInProgress".into(),
                percent: Some(p),
                restarts: r,
                failing: f.then(|| "x".into())
            }),
        ]
    }

    proptest! {
        #[test]
        fn every_observed_state_leads_to_exactly_the_right_kind_of_step(dvs in proptest::collection::vec(dv_state(), 1..5)) {
            let o = decide_with(dvs.clone());
            let max = Policy::default().max_import_restarts;
            let failed = dvs.iter().any(|d| match d {
                DvState::Failed { .. } => true,
                DvState::InProgress { restarts, .. } => *restarts > max,
                _ => false,
            });
            match &o.step {
                Step::Fail { reason, .. } => prop_assert!(failed && *reason == Reason::ImportFailed),
                Step::Advance { to } => prop_assert!(!failed && *to == Phase::CreatingVM && dvs.iter().all(|d| *d == DvState::Succeeded)),
                Step::Act(actions) => {
                    prop_assert!(!failed);
                    for a in actions {
                        let Action::CreateDataVolume(i) = a else { return Err(TestCaseError::fail("only DV creation")) };
                        prop_assert_eq!(&dvs[*i], &DvState::Absent);
                    }
                    prop_assert_eq!(actions.len(), dvs.iter().filter(|d| **d == DvState::Absent).count());
                }
                Step::Wait { .. } => prop_assert!(!failed && !dvs.contains(&DvState::Absent)),
                Step::Retry { .. } => prop_assert!(false, "the CDI secret exists here"),
            }
            let p = o.record.progress.unwrap();
            prop_assert!((0.0..=100.0).contains(&p.percent));
            prop_assert!(p.bytes_done <= p.bytes_total);
        }
    }
}
