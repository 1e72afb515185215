//! Whether a cached copy of an object may be decided on, against the resourceVersion this
//! process last wrote or read fresh. Pure.
//!
//! Resource versions of one resource are comparable since Kubernetes 1.35 (KEP-5504, stable: a
//! positive decimal integer without leading zeros, larger is newer; client-go's
//! `resourceversion.CompareResourceVersion`). A version that is not of that form is not
//! compared: the caller reads fresh, as it would without the rule.

use std::cmp::Ordering;

/// A cached copy against the version last known current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// The version our last write or fresh read returned.
    Current,
    /// Older than our own last write: that write's watch event is on its way and brings a
    /// reconcile of its own, so nothing need be read now.
    Behind,
    /// Newer than anything we wrote or read (someone else wrote since): the newest version
    /// known, as good as a fresh read for a decision whose write has the version as
    /// precondition.
    Ahead,
    /// Nothing known (a start, a conflict), or a version that cannot be compared: read fresh.
    Unknown,
}

/// Compares the cached copy's version with the one last known current.
#[must_use]
pub fn compare(cached: Option<&str>, known: Option<&str>) -> Cached {
    let (Some(cached), Some(known)) = (cached, known) else {
        return Cached::Unknown;
    };
    if cached == known {
        return Cached::Current;
    }
    match order(cached, known) {
        Some(Ordering::Less) => Cached::Behind,
        Some(Ordering::Greater) => Cached::Ahead,
        Some(Ordering::Equal) | None => Cached::Unknown,
    }
}

/// KEP-5504's order: by length, then digit by digit; `None` when either is not a positive
/// integer without leading zeros.
fn order(a: &str, b: &str) -> Option<Ordering> {
    (well_formed(a) && well_formed(b)).then(|| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

fn well_formed(v: &str) -> bool {
    !v.is_empty() && !v.starts_with('0') && v.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_copy_is_placed_against_the_last_known_version() {
        assert_eq!(compare(Some("7"), Some("7")), Cached::Current);
        assert_eq!(compare(Some("6"), Some("7")), Cached::Behind);
        assert_eq!(compare(Some("8"), Some("7")), Cached::Ahead);
        assert_eq!(
            compare(Some("10"), Some("9")),
            Cached::Ahead,
            "by length first"
        );
        assert_eq!(compare(Some("99"), Some("100")), Cached::Behind);
        assert_eq!(compare(Some("7"), None), Cached::Unknown, "nothing known");
        assert_eq!(compare(None, Some("7")), Cached::Unknown);
    }

    #[test]
    fn versions_kep_5504_does_not_order_are_not_compared() {
        for odd in ["", "07", "0", "7a", "-7", "abc"] {
            assert_eq!(compare(Some(odd), Some("8")), Cached::Unknown, "{odd:?}");
            assert_eq!(compare(Some("8"), Some(odd)), Cached::Unknown, "{odd:?}");
        }
        assert_eq!(
            compare(Some("abc"), Some("abc")),
            Cached::Current,
            "equality needs no order"
        );
    }
}
