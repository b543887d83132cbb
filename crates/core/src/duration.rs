//! Durations in config: `<integer><unit>`, unit one of `ms s m h d`.

use thiserror::Error;

/// Why a config duration was refused; each variant carries the text as written.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Not `<integer><unit>`: a fraction, a sign, a space or an unknown unit.
    #[error(
        "{0:?} is not a duration: expected <integer><unit> with unit one of ms, s, m, h, d (e.g. \"1s\", \"500ms\")"
    )]
    Malformed(String),
    /// A zero window or refill period would divide by zero.
    #[error("{0:?} is zero; a duration must be positive")]
    Zero(String),
    /// More milliseconds than a `u64` holds.
    #[error("{0:?} is too long to count in milliseconds")]
    TooLong(String),
}

/// Parses `"250ms"`, `"1s"`, `"5m"`, `"1h"`, `"7d"` into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, DurationError> {
    let malformed = || DurationError::Malformed(text.to_owned());
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(malformed)?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(malformed());
    }
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(malformed()),
    };
    let amount: u64 = digits
        .parse()
        .map_err(|_| DurationError::TooLong(text.to_owned()))?;
    if amount == 0 {
        return Err(DurationError::Zero(text.to_owned()));
    }
    amount
        .checked_mul(factor)
        .ok_or_else(|| DurationError::TooLong(text.to_owned()))
}

/// Formats milliseconds in the largest unit that divides them exactly.
pub fn format_duration_ms(ms: u64) -> String {
    for (factor, unit) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ] {
        if ms != 0 && ms.is_multiple_of(factor) {
            return format!("{}{unit}", ms / factor);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("1s"), Ok(1_000));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for bad in [
            "", "s", "10", "1.5s", "-1s", "1 s", "1sec", "1S", "10x", "s1",
        ] {
            assert!(
                matches!(parse_duration_ms(bad), Err(DurationError::Malformed(_))),
                "{bad:?} should be malformed"
            );
        }
        assert_eq!(
            parse_duration_ms("0s"),
            Err(DurationError::Zero("0s".into()))
        );
        assert_eq!(
            parse_duration_ms("99999999999999999999ms"),
            Err(DurationError::TooLong("99999999999999999999ms".into()))
        );
        assert_eq!(
            parse_duration_ms("999999999999999d"),
            Err(DurationError::TooLong("999999999999999d".into()))
        );
    }

    #[test]
    fn formats_in_the_largest_exact_unit() {
        assert_eq!(format_duration_ms(1_000), "1s");
        assert_eq!(format_duration_ms(700), "700ms");
        assert_eq!(format_duration_ms(90_000), "90s");
        assert_eq!(format_duration_ms(3_600_000), "1h");
    }
}
