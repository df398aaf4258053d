//! Durations as people write them, with one grammar for every flag and manifest field:
//! `parse_duration` (`10m`, `90s`, `1h30m`, `500ms`, `1d`, `365d`, `5min`, `2 weeks`) and
//! `Span`, a whole number of seconds in that grammar, for certificate lifetimes and
//! renewal windows.
//!
//! The grammar is `humantime`'s, with two rules of quorum's on top: a unit is always
//! required (a bare `90` is refused, not guessed as seconds), and months and years are
//! refused (their length varies; `M` next to `m` is a typo waiting to happen), so every
//! accepted text has one exact length.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The longest span accepted: 100 years. Bounds every arithmetic on spans.
pub const MAX_SPAN_S: u64 = 100 * 365 * 86_400;

/// A number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    seconds: u64,
}

/// Units, largest first (Display uses the largest that divides evenly).
const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

impl Span {
    pub const fn from_secs(seconds: u64) -> Span {
        Span { seconds }
    }

    pub const fn days(days: u64) -> Span {
        Span {
            seconds: days * 86_400,
        }
    }

    pub const fn as_secs(self) -> u64 {
        self.seconds
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a duration: write a number and a unit (ms, s, m, h, d, w), for example 90s, 10m, 1h30m or 365d, at most 100 years")]
pub struct SpanError(pub String);

/// Units whose length varies (months, years): refused, see the module doc.
const VARIABLE_UNITS: [&str; 6] = ["M", "month", "months", "y", "year", "years"];

/// Parses a duration in quorum's one grammar (see the module doc).
pub fn parse_duration(text: &str) -> Result<Duration, SpanError> {
    let err = || SpanError(text.to_string());
    // humantime trims nothing, but be explicit: a value with surrounding blanks is
    // almost always a quoting mistake.
    if text.trim() != text || text.is_empty() {
        return Err(err());
    }
    let variable = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|unit| VARIABLE_UNITS.contains(&unit));
    if variable {
        return Err(err());
    }
    let d = humantime::parse_duration(text).map_err(|_| err())?;
    if d.as_secs() > MAX_SPAN_S {
        return Err(err());
    }
    Ok(d)
}

impl FromStr for Span {
    type Err = SpanError;

    fn from_str(s: &str) -> Result<Span, SpanError> {
        let d = parse_duration(s)?;
        // Spans are whole seconds (certificate validity has one-second resolution).
        if d.subsec_nanos() != 0 {
            return Err(SpanError(s.to_string()));
        }
        Ok(Span {
            seconds: d.as_secs(),
        })
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.seconds == 0 {
            return f.write_str("0s");
        }
        let mut left = self.seconds;
        for (unit, size) in UNITS {
            if left >= size {
                write!(f, "{}{unit}", left / size)?;
                left %= size;
            }
        }
        Ok(())
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        d.deserialize_any(SpanVisitor)
    }
}

/// A bare number where a span is wanted: which unit to add, in the words people use.
fn no_unit(n: &str) -> String {
    format!(
        "{n} has no unit: write {n}s for seconds (or {n}m, {n}h, {n}d; units: ms, s, m, h, d, w)"
    )
}

/// Reads a span from text; a bare number (YAML's `365`) gets the same message as any
/// other text without a unit, not serde's "expected a string".
struct SpanVisitor;

impl serde::de::Visitor<'_> for SpanVisitor {
    type Value = Span;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as 365d, 12h or 90s")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Span, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Span, E> {
        Err(E::custom(no_unit(&v.to_string())))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Span, E> {
        Err(E::custom(no_unit(&v.to_string())))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Span, E> {
        Err(E::custom(SpanError(v.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_people_write() {
        for (text, secs) in [
            ("365d", 365 * 86_400),
            ("12h", 12 * 3_600),
            ("90s", 90),
            ("4m30s", 270),
            ("1d12h", 36 * 3_600),
            ("0s", 0),
            ("2w", 14 * 86_400),
            ("5min", 300),
            ("1h 30m", 5_400),
            ("12h1d", 36 * 3_600),
            ("1.5d", 36 * 3_600),
        ] {
            assert_eq!(text.parse::<Span>().unwrap().as_secs(), secs, "{text}");
        }
    }

    #[test]
    fn refuses_the_rest() {
        for bad in [
            "",
            "5",
            "d",
            "5x",
            "-5s",
            "1.5s",
            "36501d",
            "1M",
            "1y",
            "2 years",
            "1month",
            "1500ms",
            "9999999999999s",
            "1d\n",
            " 5m",
        ] {
            assert!(bad.parse::<Span>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_share_the_grammar_with_sub_second_units() {
        for (text, ms) in [
            ("500ms", 500),
            ("90s", 90_000),
            ("10m", 600_000),
            ("5min", 300_000),
            ("1d", 86_400_000),
        ] {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(ms),
                "{text}"
            );
        }
        for bad in ["", "90", "x", "10y", "-5s", " 5m", "1M"] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains("for example 90s"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn displays_in_the_largest_units_and_round_trips() {
        for (secs, text) in [
            (86_400 * 365, "365d"),
            (270, "4m30s"),
            (0, "0s"),
            (90_061, "1d1h1m1s"),
        ] {
            let span = Span::from_secs(secs);
            assert_eq!(span.to_string(), text);
            assert_eq!(text.parse::<Span>().unwrap(), span);
        }
    }
}
