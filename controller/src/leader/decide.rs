//! The election's decision, pure: given the Lease as read and what this candidate observed of
//! it before, take it, renew it, or wait.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;

/// What a candidate remembers of the Lease: the record it last saw and when (its own clock) it
/// first saw that record. A record that has not changed for its lease duration is expired.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// The holder, renew time and duration last seen (`None` before the first read).
    pub record: Option<Record>,
    /// When `record` was first seen.
    pub at: Option<Instant>,
}

/// The part of a Lease's spec the election compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// `holderIdentity` ("" when released).
    pub holder: String,
    /// `renewTime` as written (RFC 3339), compared for change only, never as a clock.
    pub renew_time: String,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
    /// `leaseTransitions`.
    pub transitions: i32,
}

impl Record {
    /// The record of a Lease spec.
    pub fn of(spec: &LeaseSpec) -> Record {
        Record {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renew_time: spec
                .renew_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            duration: Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
            ),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

impl Observed {
    /// Notes the record read at `now`: the observation time moves only when the record changed.
    pub fn note(&mut self, record: Record, now: Instant) {
        if self.record.as_ref() != Some(&record) {
            self.record = Some(record);
            self.at = Some(now);
        }
    }
}

/// What to do with the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// We hold it: write a new renew time (keep acquire time and transitions).
    Renew,
    /// Nobody holds it, or its holder stopped renewing: take it (transitions + 1).
    Take {
        /// `leaseTransitions` to write.
        transitions: i32,
    },
    /// Someone else holds it and renewed within its duration.
    Wait {
        /// The holder.
        holder: String,
        /// How long until it expires as we observed it.
        expires_in: Duration,
    },
}

/// Decides. Pure.
///
/// # Guarantees
/// * Never `Take` while another holder's record changed less than its duration ago (as
///   observed by this candidate).
/// * `Renew` only when we are the holder; a released lease (empty holder) is taken at once.
pub fn decide(observed: &Observed, me: &str, now: Instant) -> Decision {
    let Some(record) = &observed.record else {
        return Decision::Take { transitions: 0 };
    };
    if record.holder == me {
        return Decision::Renew;
    }
    if record.holder.is_empty() {
        return Decision::Take {
            transitions: record.transitions.saturating_add(1),
        };
    }
    let seen = observed.at.unwrap_or(now);
    let expires = seen + record.duration;
    if now >= expires {
        Decision::Take {
            transitions: record.transitions.saturating_add(1),
        }
    } else {
        Decision::Wait {
            holder: record.holder.clone(),
            expires_in: expires - now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: &str, renew: &str) -> Record {
        Record {
            holder: holder.into(),
            renew_time: renew.into(),
            duration: Duration::from_secs(10),
            transitions: 3,
        }
    }

    #[test]
    fn a_held_lease_is_taken_only_once_its_record_stood_still_for_its_duration() {
        let t0 = Instant::now();
        let mut o = Observed::default();
        o.note(rec("other", "r1"), t0);
        assert!(matches!(decide(&o, "me", t0), Decision::Wait { .. }));
        // The same record seen again later does not restart the clock.
        o.note(rec("other", "r1"), t0 + Duration::from_secs(9));
        assert!(matches!(
            decide(&o, "me", t0 + Duration::from_secs(9)),
            Decision::Wait { expires_in, .. } if expires_in == Duration::from_secs(1)
        ));
        assert_eq!(
            decide(&o, "me", t0 + Duration::from_secs(10)),
            Decision::Take { transitions: 4 }
        );
        // A renewal restarts it.
        o.note(rec("other", "r2"), t0 + Duration::from_secs(10));
        assert!(matches!(
            decide(&o, "me", t0 + Duration::from_secs(19)),
            Decision::Wait { .. }
        ));
    }

    #[test]
    fn own_lease_is_renewed_a_released_or_missing_one_taken() {
        let t0 = Instant::now();
        let mut o = Observed::default();
        assert_eq!(decide(&o, "me", t0), Decision::Take { transitions: 0 });
        o.note(rec("me", "r1"), t0);
        assert_eq!(decide(&o, "me", t0), Decision::Renew);
        o.note(rec("", "r1"), t0);
        assert_eq!(decide(&o, "me", t0), Decision::Take { transitions: 4 });
    }
}
