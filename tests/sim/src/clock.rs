//! Wall-clock time as the sim writes it into status fields, and speed-scaled delays.

use std::time::Duration;

use k8s_openapi::jiff::{Timestamp, Unit};

/// Now, rounded to milliseconds.
pub fn now() -> Timestamp {
    Timestamp::now()
        .round(Unit::Millisecond)
        .unwrap_or_else(|_| Timestamp::now())
}

/// RFC 3339 with milliseconds: what `metav1.Time` parses, precise enough for scaled delays.
pub fn format(ts: Timestamp) -> String {
    ts.round(Unit::Millisecond).unwrap_or(ts).to_string()
}

/// Parses a timestamp written by the sim or the apiserver.
pub fn parse(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

/// The time elapsed from `since` to `now` (zero when `since` is in the future).
pub fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    let d = now.duration_since(since);
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

/// `since + d`.
pub fn add(since: Timestamp, d: Duration) -> Timestamp {
    since.checked_add(d).unwrap_or(since)
}

/// The speed factor every delay and throughput of the sim is scaled by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speed(f64);

impl Speed {
    /// `factor` must be positive; anything else means 1.
    pub fn new(factor: f64) -> Speed {
        if factor.is_finite() && factor > 0.0 {
            Speed(factor)
        } else {
            Speed(1.0)
        }
    }

    pub fn factor(self) -> f64 {
        self.0
    }

    /// A delay of the real component, as the sim plays it at this speed.
    pub fn delay(self, real: Duration) -> Duration {
        real.div_f64(self.0)
    }

    /// A delay given in milliseconds of the real component.
    pub fn ms(self, real_ms: u64) -> Duration {
        self.delay(Duration::from_millis(real_ms))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn formats_with_milliseconds_and_parses_back() {
        let ts: Timestamp = "2026-03-01T10:00:00.123456Z".parse().unwrap();
        let s = format(ts);
        assert_eq!(s, "2026-03-01T10:00:00.123Z");
        assert_eq!(
            parse(&s).unwrap(),
            "2026-03-01T10:00:00.123Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(
            format("2026-03-01T10:00:00Z".parse().unwrap()),
            "2026-03-01T10:00:00Z"
        );
    }

    #[test]
    fn elapsed_never_goes_negative() {
        let a: Timestamp = "2026-03-01T10:00:00Z".parse().unwrap();
        let b = add(a, Duration::from_millis(1500));
        assert_eq!(elapsed(a, b), Duration::from_millis(1500));
        assert_eq!(elapsed(b, a), Duration::ZERO);
    }

    #[test]
    fn speed_scales_delays_and_rejects_nonsense() {
        assert_eq!(Speed::new(4.0).ms(1000), Duration::from_millis(250));
        assert_eq!(Speed::new(0.0).factor(), 1.0);
        assert_eq!(Speed::new(f64::NAN).factor(), 1.0);
        assert_eq!(Speed::new(-3.0).factor(), 1.0);
    }
}
