//! envoyproxy/ratelimit's time units: their names in the YAML, their
//! length as it counts them, and their value in the protocol
//! (`RateLimitResponse.RateLimit.Unit`), which numbers them in another order.

/// envoyproxy/ratelimit's units, with their length as it counts them
/// (a month is 30 days, a year 365). Windows align to the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 60 minutes.
    Hour,
    /// 24 hours.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// Its place in [`Unit::ALL`] (declaration order), for tables by unit.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The unit a YAML `unit` names, case-insensitively.
    pub fn parse(text: &str) -> Option<Unit> {
        Self::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(text))
    }

    /// Its name in the YAML, lower-case.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// Its length in milliseconds.
    pub fn ms(self) -> u64 {
        const S: u64 = 1_000;
        match self {
            Unit::Second => S,
            Unit::Minute => 60 * S,
            Unit::Hour => 3_600 * S,
            Unit::Day => 86_400 * S,
            Unit::Week => 7 * 86_400 * S,
            Unit::Month => 30 * 86_400 * S,
            Unit::Year => 365 * 86_400 * S,
        }
    }

    /// The protocol's enum value (`RateLimitResponse.RateLimit.Unit`).
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit for a protocol enum value, if it names one.
    pub fn from_proto(value: i32) -> Option<Unit> {
        Self::ALL.into_iter().find(|u| u.proto() == value)
    }

    /// The unit a span is best stated in: exact when one matches, else the
    /// smallest that covers it.
    pub fn covering(ms: u64) -> Unit {
        Self::ALL
            .into_iter()
            .find(|u| u.ms() == ms)
            .or_else(|| Self::ALL.into_iter().find(|u| u.ms() >= ms))
            .unwrap_or(Unit::Year)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_sit_at_their_index_and_round_trip_through_the_protocol() {
        for (i, unit) in Unit::ALL.into_iter().enumerate() {
            assert_eq!(unit.index(), i);
            assert_eq!(Unit::from_proto(unit.proto()), Some(unit));
            assert_eq!(Unit::parse(unit.name()), Some(unit));
        }
    }
}
