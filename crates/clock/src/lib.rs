//! The one wall clock of quorum's adapters. The core reads no clock: time reaches it as
//! a field of the observation (`Observation::now_unix_s`); the controller, the store,
//! the providers, the agent and the command line read it here, so that there is one
//! definition of "now" and one place a test could move it.
//!
//! Architecture invariant: nothing in `quorum-core` depends on this crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Now, in seconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_unix_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_units_read_the_same_clock() {
        let (s, ms) = (now_unix_s(), now_ms());
        // Taken one after the other: at most a second apart, and after 2020.
        assert!((ms / 1_000 - s).abs() <= 1, "{s} {ms}");
        assert!(s > 1_577_836_800, "{s}");
    }
}
