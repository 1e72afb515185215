//! Kubernetes resource quantities ("10Gi", "500M", "1.5G", "1e9") as byte or object counts:
//! what the controller's preflight compares with a ResourceQuota and what ferry-sim sizes
//! claims with. The suffixes are the API's (`k8s.io/apimachinery/pkg/api/resource`).

/// Parses a storage quantity into bytes, rounding up. `None` for anything unparsable.
pub fn parse_bytes(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    if let Some(exp) = suffix.strip_prefix(['e', 'E']) {
        let bytes = (n * 10f64.powi(exp.parse().ok()?)).ceil();
        return (bytes.is_finite() && bytes >= 0.0).then_some(bytes as u64);
    }
    let mult: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "Pi" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "Ei" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = (n * mult).ceil();
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes as u64)
}

/// Bytes as a quantity string, in whole MiB (rounded up) when not a whole GiB.
pub fn format_bytes(bytes: u64) -> String {
    const MI: u64 = 1024 * 1024;
    const GI: u64 = 1024 * MI;
    if bytes > 0 && bytes.is_multiple_of(GI) {
        format!("{}Gi", bytes / GI)
    } else {
        format!("{}Mi", bytes.div_ceil(MI).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_and_decimal_suffixes() {
        assert_eq!(parse_bytes("10Gi"), Some(10 * 1024 * 1024 * 1024));
        assert_eq!(parse_bytes("64Mi"), Some(64 * 1024 * 1024));
        assert_eq!(parse_bytes("1.5G"), Some(1_500_000_000));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("1e9"), Some(1_000_000_000));
        assert_eq!(parse_bytes("10"), Some(10));
        assert_eq!(parse_bytes("1500m"), Some(2), "rounded up");
        assert_eq!(parse_bytes("1Xi"), None);
        assert_eq!(parse_bytes(""), None);
    }

    #[test]
    fn formats_round_up_to_mebibytes() {
        assert_eq!(format_bytes(2 * 1024 * 1024 * 1024), "2Gi");
        assert_eq!(format_bytes(1), "1Mi");
        assert_eq!(format_bytes(0), "1Mi");
        assert_eq!(format_bytes(64 * 1024 * 1024 + 1), "65Mi");
    }
}
