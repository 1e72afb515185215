//! The bounded phase history in `status.history`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Phase;

/// How many entries `status.history` keeps; the oldest are dropped first.
pub const MAX_HISTORY: usize = 32;

/// One stay in a phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PhaseTransition {
    /// The phase entered.
    pub phase: Phase,
    /// Attempt number (status.attempts) during this stay.
    #[serde(default)]
    pub attempt: i32,
    /// When the phase was entered.
    pub entered_at: Time,
    /// When the phase was left; unset for the current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_at: Option<Time>,
}

/// Records entering `phase` at `now`: closes the open entry and appends a new one, keeping at
/// most [`MAX_HISTORY`] entries. Pure; returns whether the history changed.
///
/// # Guarantees
/// Idempotent: when the last entry is already `phase` for `attempt` and still open, nothing
/// changes, so a reconcile that runs twice records one stay.
pub fn record_phase(
    history: &mut Vec<PhaseTransition>,
    phase: Phase,
    attempt: i32,
    now: &Time,
) -> bool {
    if let Some(last) = history.last_mut() {
        if last.phase == phase && last.attempt == attempt && last.left_at.is_none() {
            return false;
        }
        if last.left_at.is_none() {
            last.left_at = Some(now.clone());
        }
    }
    history.push(PhaseTransition {
        phase,
        attempt,
        entered_at: now.clone(),
        left_at: None,
    });
    if history.len() > MAX_HISTORY {
        history.drain(..history.len() - MAX_HISTORY);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{t0, t1, ts};

    #[test]
    fn record_phase_closes_the_open_entry_and_appends() {
        let mut h = vec![];
        assert!(record_phase(&mut h, Phase::Preparing, 1, &t0()));
        assert!(record_phase(&mut h, Phase::Converting, 1, &t1()));
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].left_at, Some(t1()));
        assert_eq!(h[1].entered_at, t1());
        assert_eq!(h[1].left_at, None);
    }

    #[test]
    fn recording_the_current_phase_again_is_a_no_op() {
        let mut h = vec![];
        record_phase(&mut h, Phase::Importing, 1, &t0());
        assert!(!record_phase(&mut h, Phase::Importing, 1, &t1()));
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].entered_at, t0());
    }

    #[test]
    fn a_retry_of_the_same_phase_is_a_new_stay() {
        let mut h = vec![];
        record_phase(&mut h, Phase::Importing, 1, &t0());
        assert!(record_phase(&mut h, Phase::Importing, 2, &t1()));
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn history_is_bounded_and_drops_the_oldest() {
        let mut h = vec![];
        for i in 0..(MAX_HISTORY as i64 + 10) {
            let phase = if i % 2 == 0 {
                Phase::Importing
            } else {
                Phase::Failed
            };
            record_phase(&mut h, phase, i as i32, &ts(i));
        }
        assert_eq!(h.len(), MAX_HISTORY);
        assert_eq!(h[0].entered_at, ts(10));
        assert_eq!(h[MAX_HISTORY - 1].entered_at, ts(MAX_HISTORY as i64 + 9));
        assert!(h[..MAX_HISTORY - 1].iter().all(|e| e.left_at.is_some()));
    }
}
