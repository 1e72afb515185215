//! Plain-text formatting shared by the screen and `ferry board --once`: ages, bytes, rates.

use k8s_openapi::jiff::Timestamp;

/// A duration in seconds as people read it: `42s`, `3m05s`, `1h02m`, `3d04h`.
pub fn duration(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Seconds from `then` to `now` (0 when `then` is later).
pub fn secs_between(then: Timestamp, now: Timestamp) -> i64 {
    now.as_second().saturating_sub(then.as_second()).max(0)
}

/// A length to its largest unit, at most four characters: `59s`, `47m`, `23h`, `12d`.
pub fn short_duration(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// [`short_duration`] of `then` at `now`, or `-`.
pub fn short_age(then: Option<Timestamp>, now: Timestamp) -> String {
    then.map_or_else(|| "-".to_owned(), |t| short_duration(secs_between(t, now)))
}

/// Age of `then` at `now`, or `-`.
pub fn age(then: Option<Timestamp>, now: Timestamp) -> String {
    then.map_or_else(|| "-".to_owned(), |t| duration(secs_between(t, now)))
}

/// Bytes in binary units: `512B`, `64.0MiB`, `1.5GiB`.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    if v < 10.0 {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.0}{unit}")
    }
}

/// A rate: `12MiB/s`.
pub fn rate(bps: i64) -> String {
    format!("{}/s", bytes(bps))
}

/// A percentage without decimals, clamped to 0..=100: `45%`.
pub fn percent(p: f64) -> String {
    if p.is_nan() {
        return "NaN%".to_owned();
    }
    // As an integer: a float with `{:.0}` takes the exact (bignum) formatting path, once per
    // row on screen and frame.
    format!("{}%", p.clamp(0.0, 100.0).floor() as u8)
}

/// A text gauge `width` cells wide, with eighth blocks for the partial cell.
pub fn gauge(p: f64, width: usize) -> (String, String) {
    const PARTIAL: [&str; 8] = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"];
    let eighths = ((p.clamp(0.0, 100.0) / 100.0) * (width * 8) as f64).floor() as usize;
    let full = eighths / 8;
    let mut filled = "█".repeat(full);
    let mut used = full;
    if full < width && !eighths.is_multiple_of(8) {
        filled.push_str(PARTIAL[eighths % 8]);
        used += 1;
    }
    (filled, "░".repeat(width - used))
}

/// `12:00:03` (UTC).
pub fn clock(t: Timestamp) -> String {
    t.strftime("%H:%M:%S").to_string()
}

/// `12:00:03` (UTC) of seconds since the epoch.
pub fn clock_secs(secs: i64) -> String {
    Timestamp::from_second(secs).map_or_else(|_| "-".to_owned(), clock)
}

/// A moment to come, in UTC, as short as `now` leaves it clear: `03:13Z` within a day,
/// `Jan 2 03:13Z` later; with seconds when it has any (`03:13:30Z`).
pub fn moment(t: Timestamp, now: Timestamp) -> String {
    let time = if t.as_second().rem_euclid(60) == 0 {
        "%H:%MZ"
    } else {
        "%H:%M:%SZ"
    };
    if t.as_second().saturating_sub(now.as_second()) < 86_400 {
        t.strftime(time).to_string()
    } else {
        t.strftime(&format!("%b %-d {time}")).to_string()
    }
}

/// `s` cut to `width` characters, ending in `…` when cut.
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// `s` in lines of at most `width` characters, broken between words (a word longer than a line
/// is cut); at least one line. The views scroll by lines, so a long message is wrapped here
/// rather than by the widget.
pub fn wrap(s: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut out = vec![];
    let mut line = String::new();
    let mut len = 0;
    for word in s.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        if len > 0 && len + 1 + word.len() > width {
            out.push(std::mem::take(&mut line));
            len = 0;
        }
        while word.len() > width {
            let rest = word.split_off(width);
            out.push(word.into_iter().collect());
            word = rest;
        }
        if len > 0 {
            line.push(' ');
            len += 1;
        }
        len += word.len();
        line.extend(word);
    }
    if len > 0 || out.is_empty() {
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_is_the_floor_of_the_clamped_value_as_a_whole_number() {
        for (p, want) in [
            (0.0, "0%"),
            (0.99, "0%"),
            (42.7, "42%"),
            (99.999, "99%"),
            (100.0, "100%"),
            (250.0, "100%"),
            (-3.0, "0%"),
            (f64::NAN, "NaN%"),
        ] {
            assert_eq!(percent(p), want, "{p}");
        }
    }

    #[test]
    fn moments_to_come_show_the_date_only_beyond_a_day() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let now = at("2026-01-01T01:00:00Z");
        for (t, want) in [
            ("2026-01-01T03:13:00Z", "03:13Z"),
            ("2026-01-01T03:13:30Z", "03:13:30Z"),
            ("2026-01-02T00:59:00Z", "00:59Z"),
            ("2026-01-02T01:00:00Z", "Jan 2 01:00Z"),
            ("2026-02-14T18:05:00Z", "Feb 14 18:05Z"),
            ("2025-12-31T23:00:00Z", "23:00Z"),
        ] {
            assert_eq!(moment(at(t), now), want, "{t}");
        }
    }

    #[test]
    fn durations_read_like_kubectl_ages() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(59), "59s");
        assert_eq!(duration(185), "3m05s");
        assert_eq!(duration(3720), "1h02m");
        assert_eq!(duration(273_600), "3d04h");
        assert_eq!(duration(-5), "0s");
    }

    #[test]
    fn bytes_use_binary_units() {
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(64 << 20), "64MiB");
        assert_eq!(bytes(1536 << 20), "1.5GiB");
    }

    #[test]
    fn gauge_fills_proportionally_and_keeps_its_width() {
        assert_eq!(gauge(0.0, 4), (String::new(), "░░░░".into()));
        assert_eq!(gauge(50.0, 4), ("██".into(), "░░".into()));
        assert_eq!(gauge(100.0, 4), ("████".into(), String::new()));
        let (f, e) = gauge(45.0, 10);
        assert_eq!(f.chars().count() + e.chars().count(), 10);
        assert_eq!(f, "████▌");
    }

    #[test]
    fn wrap_breaks_between_words_and_cuts_only_a_word_longer_than_a_line() {
        assert_eq!(
            wrap("take the  snapshots out", 10),
            ["take the", "snapshots", "out"]
        );
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("a abcdefghij", 4), ["a", "abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), [""]);
        for line in wrap("one two three four five six seven eight nine ten", 9) {
            assert!(line.chars().count() <= 9, "{line}");
        }
    }

    #[test]
    fn fit_cuts_with_an_ellipsis() {
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
    }
}
