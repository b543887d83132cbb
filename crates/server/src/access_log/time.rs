//! An access log's timestamps as a trace's `t_ms` (milliseconds since the
//! Unix epoch, UTC): nginx's `$time_local` (`10/Oct/2000:13:55:36 -0700`),
//! RFC 3339 (Envoy's `%START_TIME%`: `2000-10-10T20:55:36.123Z`), and a
//! number of milliseconds. Anything else, and any time before 1970, is a
//! fault naming what was read.

use tollgate_core::quote;

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// nginx's `$time_local`, without its brackets: `DD/Mon/YYYY:HH:MM:SS ±HHMM`.
pub fn nginx_time(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "time {} is not nginx's DD/Mon/YYYY:HH:MM:SS +ZZZZ",
            quote(text)
        )
    };
    let b = text.as_bytes();
    if b.len() != 26 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[20] != b' ' {
        return Err(bad());
    }
    let day = digits(&b[0..2]).ok_or_else(bad)?;
    let month = MONTHS
        .iter()
        .position(|m| m.as_bytes() == &b[3..6])
        .ok_or_else(bad)? as u64
        + 1;
    let year = digits(&b[7..11]).ok_or_else(bad)?;
    let clock = clock_of(&b[12..20]).ok_or_else(bad)?;
    let offset = offset_of(&b[21..26]).ok_or_else(bad)?;
    to_ms(text, (year, month, day), clock, 0, offset)
}

/// RFC 3339: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; `t` or a space
/// for `T` and `z` for `Z` are taken too. A fraction finer than a
/// millisecond is cut to the millisecond.
pub fn rfc3339_time(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "time {} is not RFC 3339 (YYYY-MM-DDTHH:MM:SS[.fff]Z or ±HH:MM)",
            quote(text)
        )
    };
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    let year = digits(&b[0..4]).ok_or_else(bad)?;
    let month = digits(&b[5..7]).ok_or_else(bad)?;
    let day = digits(&b[8..10]).ok_or_else(bad)?;
    let clock = clock_of(&b[11..19]).ok_or_else(bad)?;
    let mut rest = &b[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix(b".") {
        let len = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return Err(bad());
        }
        let mut ms_digits = [b'0'; 3];
        for (slot, digit) in ms_digits.iter_mut().zip(&fraction[..len]) {
            *slot = *digit;
        }
        millis = digits(&ms_digits).ok_or_else(bad)?;
        rest = &fraction[len..];
    }
    let offset = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            offset_of(&[*sign, *h1, *h2, *m1, *m2]).ok_or_else(bad)?
        }
        _ => return Err(bad()),
    };
    to_ms(text, (year, month, day), clock, millis, offset)
}

/// A whole number of milliseconds since the epoch, as a JSON number.
pub fn millis_time(value: &serde_json::Value) -> Result<u64, String> {
    value
        .as_u64()
        .ok_or_else(|| format!("time {value} is not a whole number of milliseconds since 1970"))
}

/// ASCII digits as a number; `None` for anything else (a sign included).
fn digits(b: &[u8]) -> Option<u64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// `HH:MM:SS` as seconds into the day; a leap second (`:60`) is taken.
fn clock_of(b: &[u8]) -> Option<u64> {
    if b.len() != 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, s) = (digits(&b[0..2])?, digits(&b[3..5])?, digits(&b[6..8])?);
    (h < 24 && m < 60 && s <= 60).then_some(h * 3600 + m * 60 + s)
}

/// `±HHMM` as signed seconds east of UTC.
fn offset_of(b: &[u8]) -> Option<i64> {
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    if b.len() != 5 {
        return None;
    }
    let (h, m) = (digits(&b[1..3])?, digits(&b[3..5])?);
    if h > 23 || m > 59 {
        return None;
    }
    Some(sign * i64::try_from(h * 3600 + m * 60).ok()?)
}

/// The instant, checked: a real calendar day, not before 1970 in UTC.
fn to_ms(
    text: &str,
    (year, month, day): (u64, u64, u64),
    clock: u64,
    millis: u64,
    offset: i64,
) -> Result<u64, String> {
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(format!("time {}: no such day", quote(text)));
    }
    let days = days_from_civil(year, month, day);
    let local = days * 86_400 + i64::try_from(clock).unwrap_or(0);
    let utc = local - offset;
    if utc < 0 {
        return Err(format!("time {}: before 1970", quote(text)));
    }
    u64::try_from(utc)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .and_then(|ms| ms.checked_add(millis))
        .ok_or_else(|| format!("time {}: out of range", quote(text)))
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`); negative before it.
fn days_from_civil(year: u64, month: u64, day: u64) -> i64 {
    let y = i64::try_from(year).unwrap_or(0) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::try_from(month).unwrap_or(1);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::try_from(day).unwrap_or(1) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
