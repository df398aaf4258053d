//! `Span`: a whole number of seconds, written the way people write lifetimes
//! (`365d`, `12h`, `90s`, `4m30s`). Used for certificate lifetimes and renewal windows.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

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
#[error("{0:?} is not a duration: write a number and a unit (d, h, m, s), for example 365d, 12h, 90s or 4m30s, at most 100 years")]
pub struct SpanError(pub String);

impl FromStr for Span {
    type Err = SpanError;

    fn from_str(s: &str) -> Result<Span, SpanError> {
        let err = || SpanError(s.to_string());
        let mut total: u64 = 0;
        let mut digits = String::new();
        let mut last_unit = usize::MAX;
        for c in s.chars() {
            if c.is_ascii_digit() {
                if digits.len() >= 12 {
                    return Err(err());
                }
                digits.push(c);
                continue;
            }
            // Units in decreasing order, each once: "1d12h" yes, "12h1d" or "1h1h" no.
            let Some(i) = UNITS.iter().position(|(u, _)| *u == c) else {
                return Err(err());
            };
            if digits.is_empty() || (last_unit != usize::MAX && i <= last_unit) {
                return Err(err());
            }
            let n: u64 = digits.parse().map_err(|_| err())?;
            total = n
                .checked_mul(UNITS[i].1)
                .and_then(|v| v.checked_add(total))
                .ok_or_else(err)?;
            digits.clear();
            last_unit = i;
        }
        if !digits.is_empty() || last_unit == usize::MAX || total > MAX_SPAN_S {
            return Err(err());
        }
        Ok(Span { seconds: total })
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
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
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
            "1h1d",
            "1h1h",
            "-5s",
            "1.5d",
            "5 d",
            "36501d",
            "9999999999999s",
            "1d\n",
            " 5m",
        ] {
            assert!(bad.parse::<Span>().is_err(), "{bad:?}");
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
