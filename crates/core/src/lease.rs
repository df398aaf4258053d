//! Leadership timing among controller replicas, as pure arithmetic: the runtime measures
//! (a monotonic clock, the lease deadline the store keeps) and asks here what it may do.
//!
//! Why a margin: a step is checked, then performed. The check must leave enough of the
//! lease for the step to be issued before the lease can end in the store, because only
//! then can another replica take over. A step that still lands late repeats what the new
//! leader would do from the same durable intent (see ARCHITECTURE.md, "Several
//! controllers").

/// Default lease: a deposed or dead leader is replaced within about this long.
pub const DEFAULT_LEASE_TTL_MS: u64 = 4_000;
/// Shortest lease accepted (etcd raises shorter ones to about 1.5 s anyway).
pub const MIN_LEASE_TTL_MS: u64 = 2_000;
/// Longest lease accepted: a dead leader stalls every rollout this long.
pub const MAX_LEASE_TTL_MS: u64 = 60_000;

/// How much of its lease a leader must have left to start a step: a quarter of the TTL,
/// at least 500 ms (one bounded call to a member or a store write).
pub fn margin_ms(ttl_ms: u64) -> u64 {
    (ttl_ms / 4).max(500)
}

/// How often a standby looks whether the leader key is free.
pub fn standby_poll_ms(ttl_ms: u64) -> u64 {
    (ttl_ms / 20).clamp(50, 500)
}

/// How long a replica that just stepped down waits before it campaigns again: the
/// others get the first go (it was the one that lost its lease or was fenced, so it is
/// the likelier to be cut off or slow).
pub fn rejoin_after_ms(ttl_ms: u64) -> u64 {
    ttl_ms / 2
}

/// Whether a replica may campaign, `since_step_down_ms` after it last stepped down
/// (`None`: it never led, or not since it started).
pub fn may_campaign(since_step_down_ms: Option<u64>, ttl_ms: u64) -> bool {
    match since_step_down_ms {
        None => true,
        Some(since) => since >= rejoin_after_ms(ttl_ms),
    }
}

/// Whether a leader with `left_ms` of lease (by its own clock; `None`: no lease, the
/// embedded store's single controller) may start a step needing `margin_ms`.
pub fn may_act(left_ms: Option<i64>, margin_ms: u64) -> bool {
    match left_ms {
        None => true,
        Some(left) => left >= margin_ms as i64,
    }
}

/// Checks a TTL given on the command line.
pub fn check_ttl_ms(ttl_ms: u64) -> Result<u64, String> {
    if (MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&ttl_ms) {
        Ok(ttl_ms)
    } else {
        Err(format!(
            "a lease TTL of {ttl_ms} ms is outside {MIN_LEASE_TTL_MS}..={MAX_LEASE_TTL_MS} ms"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        // (left_ms, ttl_ms, may act)
        let rows: &[(Option<i64>, u64, bool)] = &[
            (None, 4_000, true),
            (Some(4_000), 4_000, true),
            (Some(1_000), 4_000, true),
            (Some(999), 4_000, false),
            (Some(0), 4_000, false),
            (Some(-5), 4_000, false),
            (Some(600), 2_000, true),
            (Some(499), 2_000, false),
            (Some(3_749), 15_000, false),
            (Some(3_750), 15_000, true),
        ];
        for (left, ttl, want) in rows {
            assert_eq!(may_act(*left, margin_ms(*ttl)), *want, "{left:?} {ttl}");
        }
        assert_eq!(standby_poll_ms(4_000), 200);
        assert!(rejoin_after_ms(4_000) > standby_poll_ms(4_000));
        // (ms since stepping down, ttl_ms, may campaign)
        let rejoin: &[(Option<u64>, u64, bool)] = &[
            (None, 4_000, true),
            (Some(0), 4_000, false),
            (Some(1_999), 4_000, false),
            (Some(2_000), 4_000, true),
            (Some(999), 2_000, false),
            (Some(1_000), 2_000, true),
            (Some(u64::MAX), 60_000, true),
        ];
        for (since, ttl, want) in rejoin {
            assert_eq!(may_campaign(*since, *ttl), *want, "{since:?} {ttl}");
        }
        assert_eq!(standby_poll_ms(60_000), 500);
        assert!(check_ttl_ms(1_000).is_err());
        assert_eq!(check_ttl_ms(4_000), Ok(4_000));
    }
}
