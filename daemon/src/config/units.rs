//! Exact text forms of sizes, durations and PU ranges, in both directions.
//!
//! Parsers take the text an operator wrote and return either the value or the
//! "expected …" half of an error message; they know nothing of keys or sources
//! (the caller adds those). Sizes use integer arithmetic only, so `"1.5 GiB"` is
//! exactly 1,610,612,736 bytes and a value that is not a whole number of bytes
//! is rejected rather than rounded. Every printer's output parses back to the
//! same value.

use crate::limits::PU_ID_LIMIT;
use std::time::Duration;

/// The accepted size forms, for error messages.
pub(super) const SIZE_FORMS: &str = "a size: a whole number of bytes (like 1048576) or a number \
     with a unit, SI kB, MB, GB, TB, PB, EB (powers of 1000) or IEC KiB, MiB, GiB, TiB, PiB, EiB \
     (powers of 1024), units case-insensitive, like \"500 MB\" or \"1.5 GiB\"";

/// The accepted duration forms, for error messages.
pub(super) const DURATION_FORMS: &str = "a duration with a unit (ns, us, ms, s, m, h, days, \
     weeks), like \"30 s\", \"1 m\", \"7 days\" or \"1h 30m\"";

/// Unit names as printed, with their factor. Matching is ASCII
/// case-insensitive: no byte size is ever given in bits, so `mb` can only mean
/// megabytes, and insisting on `MB` would only produce confusing rejections.
/// Bare prefixes (`K`, `M`, `G`) are not accepted: whether they mean 1000 or
/// 1024 differs between tools, and an exact parser must not guess.
const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("kB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("PB", 1_000_000_000_000_000),
    ("EB", 1_000_000_000_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("PiB", 1 << 50),
    ("EiB", 1 << 60),
];

/// Parses `"500 MB"`, `"64KiB"`, `"1.5 GiB"`, `"0"`, `"4096"` (bytes).
///
/// On failure returns what is accepted, for the caller's message.
pub(super) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let number_len = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_len);
    let unit = unit.trim_start();
    let factor = if unit.is_empty() {
        1
    } else {
        SIZE_UNITS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(unit))
            .map(|&(_, factor)| factor)
            .ok_or_else(|| SIZE_FORMS.to_string())?
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    // "1." and ".5" and "1.2.3" are typos more often than intent.
    let well_formed = !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && (!number.contains('.') || !fraction.is_empty())
        && fraction.bytes().all(|b| b.is_ascii_digit());
    if !well_formed {
        return Err(SIZE_FORMS.to_string());
    }
    // Trailing zeros change nothing; past 19 significant decimals no unit
    // (at most 10^18 or 2^60) can make the product whole, so say that rather
    // than letting the digits overflow into a misleading "too big".
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > 19 {
        return Err(format!("a whole number of bytes; {SIZE_FORMS}"));
    }
    let too_big = || "a size below 16 EiB (2^64 bytes)".to_string();
    // value = digits * factor / 10^fraction_len, exactly, in u128.
    let mut digits: u128 = 0;
    for byte in whole.bytes().chain(fraction.bytes()) {
        digits = digits
            .checked_mul(10)
            .and_then(|d| d.checked_add(u128::from(byte - b'0')))
            .ok_or_else(too_big)?;
    }
    let scale = u32::try_from(fraction.len())
        .ok()
        .and_then(|len| 10u128.checked_pow(len))
        .ok_or_else(too_big)?;
    let scaled = digits.checked_mul(u128::from(factor)).ok_or_else(too_big)?;
    if !scaled.is_multiple_of(scale) {
        return Err(format!("a whole number of bytes; {SIZE_FORMS}"));
    }
    u64::try_from(scaled / scale).map_err(|_| too_big())
}

/// Prints `bytes` with the unit that gives the smallest whole number, so
/// 500,000,000 prints as `"500 MB"` and 4 GiB as `"4 GiB"`; `0` prints as `"0"`.
pub(super) fn format_size(bytes: u64) -> String {
    if bytes == 0 {
        return "0".to_string();
    }
    let (name, factor) = SIZE_UNITS
        .iter()
        .filter(|&&(_, factor)| bytes.is_multiple_of(factor))
        .min_by_key(|&&(_, factor)| bytes / factor)
        .copied()
        .unwrap_or(("B", 1));
    format!("{} {name}", bytes / factor)
}

/// `1.5 GiB`, `12.0 MiB`, `512 B`: rounded, for messages only (a value a
/// configuration file takes is printed by [`format_size`]).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Parses a humantime duration, plus a bare `"0"`: humantime wants a unit even
/// for zero, but `0` is the natural way to say "disabled".
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text).map_err(|_| DURATION_FORMS.to_string())
}

/// Duration units as printed (singular, plural) with their length in
/// nanoseconds, largest first.
const DURATION_UNITS: &[(&str, &str, u128)] = &[
    ("day", "days", 86_400_000_000_000),
    ("h", "h", 3_600_000_000_000),
    ("m", "m", 60_000_000_000),
    ("s", "s", 1_000_000_000),
    ("ms", "ms", 1_000_000),
    ("us", "us", 1_000),
    ("ns", "ns", 1),
];

/// The largest unit that divides `nanos` exactly (nanoseconds divide all).
fn largest_unit(nanos: u128) -> (&'static str, &'static str, u128) {
    DURATION_UNITS
        .iter()
        .copied()
        .find(|&(_, _, unit)| nanos.is_multiple_of(unit))
        .unwrap_or(("ns", "ns", 1))
}

fn in_unit(nanos: u128, (one, many, unit): (&str, &str, u128)) -> String {
    let count = nanos / unit;
    format!("{count} {}", if count == 1 { one } else { many })
}

/// Prints `duration` in the largest unit that divides it exactly (`"7 days"`,
/// `"90 m"`, `"1500 ms"`); `Duration::ZERO` prints as `"0"`.
pub(super) fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0".to_string();
    }
    in_unit(nanos, largest_unit(nanos))
}

/// Prints the bounds of a duration range so that they read in one unit
/// when that stays short: `1 s` to `300 s` rather than `1 s` to `5 m`, but
/// `100 ms` to `1 h` rather than `100 ms` to `3600000 ms`.
pub(super) fn format_duration_range(min: Duration, max: Duration) -> (String, String) {
    let (min_nanos, max_nanos) = (min.as_nanos(), max.as_nanos());
    let unit = largest_unit(min_nanos);
    let max_text =
        if min_nanos != 0 && max_nanos.is_multiple_of(unit.2) && max_nanos / unit.2 <= 1000 {
            in_unit(max_nanos, unit)
        } else {
            format_duration(max)
        };
    (format_duration(min), max_text)
}

/// The accepted `sharding.cpu_allocation` forms, for error messages.
pub(super) const CPU_ALLOCATION_FORMS: &str = "\"physical\", \"all\", a shard count N >= 1, a \
     PU range \"a..b\" (end exclusive) or \"a..=b\" (end inclusive), or a non-empty list of \
     distinct PU ids like [0, 2, 4]";

/// Parses `"a..b"` (end exclusive, like Rust) and `"a..=b"` (inclusive) into
/// the PU ids it names. `None` when `text` is not range-shaped at all, so the
/// caller can try other forms; `Some(Err)` when it is a range but a bad one.
pub(super) fn parse_pu_range(text: &str) -> Option<Result<Vec<u32>, String>> {
    let (start, rest) = text.trim().split_once("..")?;
    let (end, inclusive) = match rest.strip_prefix('=') {
        Some(end) => (end, true),
        None => (rest, false),
    };
    let bound = |s: &str| s.trim().parse::<u32>().ok().filter(|&id| id < PU_ID_LIMIT);
    let (Some(start), Some(end)) = (bound(start), bound(end)) else {
        return Some(Err(format!(
            "a PU range with both ends below {PU_ID_LIMIT}, like \"0..4\" or \"0..=3\""
        )));
    };
    let ids: Vec<u32> = if inclusive {
        (start..=end).collect()
    } else {
        (start..end).collect()
    };
    if ids.is_empty() {
        return Some(Err(
            "a non-empty PU range (\"a..b\" needs a < b, \"a..=b\" needs a <= b)".to_string(),
        ));
    }
    Some(Ok(ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves messages' sizes are rounded to one decimal of the largest
    /// binary unit that keeps them at 1 or more.
    #[test]
    fn human_bytes_rounds_to_a_readable_unit() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }

    /// IEC and SI units give exact powers of 1024 and 1000, with or without a
    /// space and in any case.
    #[test]
    fn sizes_with_units_are_exact() {
        let cases: &[(&str, u64)] = &[
            ("1 GiB", 1_073_741_824),
            ("1 GB", 1_000_000_000),
            ("500 MB", 500_000_000),
            ("64KiB", 65_536),
            ("64 kib", 65_536),
            ("64 KB", 64_000),
            ("64 kB", 64_000),
            ("4 GiB", 4 << 30),
            ("3 TiB", 3 << 40),
            ("2 PB", 2_000_000_000_000_000),
            ("15 EiB", 15 << 60),
            ("7 B", 7),
            (" 8 MiB ", 8 << 20),
        ];
        for &(text, bytes) in cases {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    /// Plain numbers are bytes, and zero needs no unit.
    #[test]
    fn sizes_plain_numbers_are_bytes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0 B"), Ok(0));
    }

    /// Decimals are accepted only when they come to a whole number of bytes.
    #[test]
    fn sizes_with_decimals_are_exact_or_rejected() {
        assert_eq!(parse_size("1.5 GiB"), Ok(1_610_612_736));
        assert_eq!(parse_size("0.5 KiB"), Ok(512));
        assert_eq!(parse_size("2.25 MB"), Ok(2_250_000));
        assert_eq!(parse_size("1.000 kB"), Ok(1000));
        let err = parse_size("1.0001 KiB").unwrap_err();
        assert!(err.contains("whole number of bytes"), "{err}");
        assert!(parse_size("1.5").is_err());
        assert_eq!(parse_size("1.50000000000000000000000000000 KiB"), Ok(1536));
        let err = parse_size("1.00000000000000000000000000000000000000001 KiB").unwrap_err();
        assert!(err.contains("whole number of bytes"), "{err}");
    }

    /// Typos and ambiguous forms are rejected with the accepted forms listed.
    #[test]
    fn sizes_garbage_is_rejected() {
        for text in [
            "",
            " ",
            "MB",
            "1 K",
            "1 M",
            "1 G",
            "1 mbit",
            "-1",
            "-1 MB",
            "1,5 GiB",
            "1_000",
            "1.",
            ".5 GiB",
            "1.2.3 MB",
            "ten",
            "1 GiB extra",
            "1e9",
            "0x10",
        ] {
            let err = parse_size(text).unwrap_err();
            assert!(err.contains("KiB") && err.contains("MB"), "{text}: {err}");
        }
    }

    /// Values past u64 are rejected rather than wrapped, including ones whose
    /// digits alone overflow the u128 intermediate.
    #[test]
    fn sizes_overflow_is_rejected() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        for text in [
            "18446744073709551616",
            "16 EiB",
            "19 EB",
            "99999999999999999999999999999999999999999999 B",
        ] {
            let err = parse_size(text).unwrap_err();
            assert!(err.contains("below 16 EiB"), "{text}: {err}");
        }
    }

    /// The printer picks the shortest exact form, and it parses back.
    #[test]
    fn sizes_print_and_parse_back() {
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(500_000_000), "500 MB");
        assert_eq!(format_size(4 << 30), "4 GiB");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(1_610_612_736), "1536 MiB");
        assert_eq!(format_size(12_345), "12345 B");
        for bytes in [
            0,
            1,
            999,
            1000,
            1024,
            12_345,
            500_000_000,
            1 << 60,
            u64::MAX,
        ] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes), "{bytes}");
        }
    }

    /// Humantime forms, a bare zero, and garbage.
    #[test]
    fn durations_parse() {
        let cases: &[(&str, u64)] = &[
            ("7 days", 7 * 86_400),
            ("1 m", 60),
            ("30 s", 30),
            ("1h 30m", 5_400),
            ("1 h", 3_600),
            ("0", 0),
            ("0 s", 0),
            ("2 weeks", 14 * 86_400),
        ];
        for &(text, secs) in cases {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
        assert_eq!(parse_duration("500 ms"), Ok(Duration::from_millis(500)));
        // humantime 2.4 takes decimals, exactly.
        assert_eq!(parse_duration("1.5 h"), Ok(Duration::from_secs(5_400)));
        for text in ["", "30", "1 fortnight", "s", "-1 s", "1 h 30"] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("like \"30 s\""), "{text}: {err}");
        }
    }

    /// Printed durations use the largest exact unit and parse back.
    #[test]
    fn durations_print_and_parse_back() {
        assert_eq!(format_duration(Duration::ZERO), "0");
        assert_eq!(format_duration(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(format_duration(Duration::from_secs(86_400)), "1 day");
        assert_eq!(format_duration(Duration::from_secs(60)), "1 m");
        assert_eq!(format_duration(Duration::from_secs(5_400)), "90 m");
        assert_eq!(format_duration(Duration::from_millis(1_500)), "1500 ms");
        for duration in [
            Duration::ZERO,
            Duration::from_secs(30),
            Duration::from_secs(3_600),
            Duration::from_nanos(1_000_000_007),
            Duration::from_micros(3),
            Duration::from_secs(400 * 86_400),
        ] {
            assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }
    }

    /// Ranges: exclusive and inclusive ends, empty and malformed ranges.
    #[test]
    fn pu_ranges_parse() {
        assert_eq!(parse_pu_range("0..4"), Some(Ok(vec![0, 1, 2, 3])));
        assert_eq!(parse_pu_range("2..=4"), Some(Ok(vec![2, 3, 4])));
        assert_eq!(parse_pu_range("5..=5"), Some(Ok(vec![5])));
        assert_eq!(parse_pu_range(" 1 .. 3 "), Some(Ok(vec![1, 2])));
        assert_eq!(parse_pu_range("physical"), None);
        for text in ["4..4", "4..2", "3..=2"] {
            let err = parse_pu_range(text).unwrap().unwrap_err();
            assert!(err.contains("non-empty"), "{text}: {err}");
        }
        for text in ["..4", "0..", "a..b", "0..-1", "0..70000", "0...4"] {
            let err = parse_pu_range(text).unwrap().unwrap_err();
            assert!(err.contains("both ends"), "{text}: {err}");
        }
    }

    /// Range bounds read in the lower bound's unit while that stays short,
    /// else each in its own largest unit.
    #[test]
    fn duration_range_bounds() {
        let range = |min: u64, max: u64| {
            format_duration_range(Duration::from_millis(min), Duration::from_millis(max))
        };
        assert_eq!(range(1_000, 300_000), ("1 s".into(), "300 s".into()));
        assert_eq!(range(100, 3_600_000), ("100 ms".into(), "1 h".into()));
        assert_eq!(range(10, 3_600_000), ("10 ms".into(), "1 h".into()));
        assert_eq!(range(0, 60_000), ("0".into(), "1 m".into()));
        assert_eq!(range(1_000, 1_500), ("1 s".into(), "1500 ms".into()));
    }
}
