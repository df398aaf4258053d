//! The clocks of quorum's adapters: the one wall clock, and the monotonic clock a pass
//! is paced by. The core reads no clock: time reaches it as a field of the observation
//! (`Observation::now_unix_s`) or an argument (`now_ms` of a pass); the controller, the
//! store, the providers, the agent and the command line read it here, so that there is
//! one definition of "now" and one place a test could move it.
//!
//! Architecture invariant: nothing in `quorum-core` depends on this crate.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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

/// Milliseconds on a monotonic clock, counted from the first call in this process:
/// drain and retry times (a pass's `now_ms`) must not move with the wall clock.
pub fn monotonic_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let ms = EPOCH.get_or_init(Instant::now).elapsed().as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX)
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

    #[test]
    fn the_monotonic_clock_never_goes_back() {
        let a = monotonic_ms();
        let b = monotonic_ms();
        assert!(b >= a, "{a} {b}");
    }
}
