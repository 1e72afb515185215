//! How often the controllers act and write, shared by the migration's and the wave's: the
//! backoff of a retry (with jitter, so that what failed together does not retry together), the
//! delay after a failed reconcile, and whether a status change is worth a write now, later or
//! not at all. Pure.

use std::time::Duration;

use crate::Error;
use crate::policy::Policy;

/// Delay before in-phase retry number `retry` (0 for the first): `base · 2^retry`, capped at
/// `cap`, minus up to a quarter of it as jitter derived from `seed` (the migration's uid), so
/// that migrations failing together do not retry together. Pure and deterministic.
pub fn backoff(retry: u32, base: Duration, cap: Duration, seed: &str) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(retry.min(20)));
    let capped = exp.min(cap);
    let h = seed
        .bytes()
        .chain(retry.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let quarter = capped / 4;
    let jitter_ms = if quarter.as_millis() == 0 {
        0
    } else {
        h % (quarter.as_millis() as u64 + 1)
    };
    capped.saturating_sub(Duration::from_millis(jitter_ms))
}

/// How long to wait after a failed reconcile, the `failures`-th failure in a row of the object
/// with `uid`. Pure.
pub fn retry_delay(err: &Error, failures: u32, policy: &Policy, uid: &str) -> Duration {
    if err.is_conflict() {
        return Duration::from_millis(200);
    }
    backoff(failures, policy.backoff_base, policy.backoff_cap, uid)
}

/// Whether a status is worth writing now, later, or not at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worth {
    /// Write it in this reconcile.
    Now,
    /// Only details or progress moved and the last write is too recent: look again after this
    /// long, and write then.
    Later(Duration),
    /// Nothing worth a write changed.
    No,
}

impl Worth {
    /// For a change that may wait: now when `interval` passed since the last write
    /// (`since_last`; `None`: never written), else when it will have.
    pub fn once_per(interval: Duration, since_last: Option<Duration>) -> Worth {
        match since_last {
            Some(d) if d < interval => Worth::Later(interval - d),
            _ => Worth::Now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_secs(2);
        let cap = Duration::from_secs(60);
        let d: Vec<_> = (0..8).map(|r| backoff(r, base, cap, "uid")).collect();
        for (r, d) in d.iter().enumerate() {
            let nominal = (base * 2u32.pow(r as u32)).min(cap);
            assert!(
                *d <= nominal && *d >= nominal * 3 / 4,
                "retry {r}: {d:?} vs {nominal:?}"
            );
        }
        assert_eq!(
            backoff(3, base, cap, "a"),
            backoff(3, base, cap, "a"),
            "deterministic"
        );
    }

    proptest! {
        #[test]
        fn backoff_stays_within_three_quarters_and_the_cap(retry in 0u32..100, seed in ".{0,40}", base_ms in 1u64..10_000, cap_ms in 1u64..600_000) {
            let base = Duration::from_millis(base_ms);
            let cap = Duration::from_millis(cap_ms);
            let d = backoff(retry, base, cap, &seed);
            let nominal = base.saturating_mul(2u32.saturating_pow(retry.min(20))).min(cap);
            prop_assert!(d <= nominal);
            prop_assert!(d >= nominal - nominal / 4);
        }
    }
}
