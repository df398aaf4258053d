//! Leadership timing among controller replicas, as pure arithmetic: the runtime measures
//! (a monotonic clock, the lease deadline the store keeps) and asks here what it may do.
//!
//! Why a margin: a step is checked, then performed. The check must leave enough of the
//! lease for the step to be issued before the lease can end in the store, because only
//! then can another replica take over. A step that still lands late repeats what the new
//! leader would do from the same durable intent (see ARCHITECTURE.md, "Several
//! controllers").

use serde::{Deserialize, Serialize};
use std::fmt;

/// A leadership's fencing token: which term of leadership a store write or a call to an
/// agent belongs to. A store (or an agent) refuses a token lower than the highest it
/// has seen, or one that is no longer the leader key's. The etcd store's is the leader
/// key's create revision; the embedded store (one process, nothing to fence) has
/// `EMBEDDED`. A newtype, so that it is never confused with a revision, a member id or
/// a count.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct FenceToken(pub i64);

impl FenceToken {
    /// The embedded store's token: one process leads alone, and nothing is fenced.
    pub const EMBEDDED: FenceToken = FenceToken(0);

    pub fn is_embedded(self) -> bool {
        self == FenceToken::EMBEDDED
    }
}

impl fmt::Display for FenceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

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

/// What a leader may do now, by its lease (see `standing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Enough of the lease is left: act.
    Act,
    /// Less than the margin is left by the leader's own clock, but the store has not said
    /// the lease is gone: its renewals went unanswered (the store unreachable, an election
    /// of the management etcd under way). Act on nothing until a renewal is answered. No
    /// other replica can lead meanwhile: the leader key lives as long as the lease, and a
    /// lease ends only in a store that has a leader, which answers renewals.
    Hold,
    /// The store said the lease is gone (a renewal answered "no such lease"): step down.
    Lost,
}

/// A leader's standing with `left_ms` of its lease left by its own clock (`None`: no
/// lease, the embedded store), `lost` when the store said the lease is gone, and a step
/// needing `margin_ms`.
pub fn standing(left_ms: Option<i64>, lost: bool, margin_ms: u64) -> Standing {
    if lost {
        Standing::Lost
    } else if may_act(left_ms, margin_ms) {
        Standing::Act
    } else {
        Standing::Hold
    }
}

/// How often a leader renews its lease while renewals are answered. One that is not
/// answered is tried again at once (the store's call goes round every member, pausing
/// `failover::ROUND_BACKOFF` between rounds).
pub fn renew_every_ms(ttl_ms: u64) -> u64 {
    ttl_ms / 3
}

/// etcd's default election timeout (`--election-timeout`, 1 s) is randomised up to twice
/// that: a management etcd whose leader died or stopped has a new one within about this
/// (the vote itself takes milliseconds on a local network).
pub const MANAGEMENT_ELECTION_MS: u64 = 2_000;

/// Once its store serves again, the longest before a leader that polls every `poll_ms`
/// acts: one attempt lost on a member that stopped answering, one pause between rounds
/// over the members (its renewal is then answered), and one poll.
pub fn resume_after_store_ms(poll_ms: u64) -> u64 {
    crate::failover::ATTEMPT_TIMEOUT_MS + crate::failover::ROUND_BACKOFF.cap_ms + poll_ms
}

/// The longest a management etcd fault that leaves a majority of its members delays a
/// leader that polls every `poll_ms`: an election, then `resume_after_store_ms`. A store
/// unavailable for longer (a majority down) delays it by that time plus the latter.
pub fn store_fault_delay_bound_ms(poll_ms: u64) -> u64 {
    MANAGEMENT_ELECTION_MS + resume_after_store_ms(poll_ms)
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
        // (left_ms, lost, standing with the default TTL's margin of 1 s)
        let standings: &[(Option<i64>, bool, Standing)] = &[
            (None, false, Standing::Act),
            (Some(1_000), false, Standing::Act),
            (Some(999), false, Standing::Hold),
            (Some(-30_000), false, Standing::Hold),
            (Some(4_000), true, Standing::Lost),
            (None, true, Standing::Lost),
        ];
        for (left, lost, want) in standings {
            assert_eq!(
                standing(*left, *lost, margin_ms(4_000)),
                *want,
                "{left:?} {lost}"
            );
        }
        assert_eq!(renew_every_ms(4_000), 1_333);
        assert_eq!(store_fault_delay_bound_ms(50), 3_250);
        assert!(check_ttl_ms(1_000).is_err());
        assert_eq!(check_ttl_ms(4_000), Ok(4_000));
    }
}
