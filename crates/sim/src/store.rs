//! The management etcd as the two controller replicas reach it, with its faults (two
//! replicas only):
//!
//! - **store unavailable for T**: no member can serve (an election after its leader died
//!   or stopped: 1 to 2 s, `lease::MANAGEMENT_ELECTION_MS`; or a majority of its members
//!   gone: up to three TTLs). No call is answered: renewals, the fenced no-op before a
//!   step, every write and read; standbys cannot look at the leader key. Leases do not
//!   end in a store without a leader (only a leader expires them), so the leader key's
//!   expiry stands still; the new leader extends every lease by its TTL plus etcd's
//!   election timeout, as etcd does on a change of leader.
//! - **one store endpoint dead**: one of the three members killed or paused (SIGSTOP) for
//!   a while. A replica that asked it first (its `EndpointSet`, the core's, as the real
//!   failover client keeps it) loses one attempt on it: nothing for a killed member (the
//!   connection is refused at once), `failover::ATTEMPT_TIMEOUT_MS` for a paused one,
//!   during which that replica does nothing (its loop and its renewals wait on the
//!   store). It then asks another. If the member was the store's leader, an election
//!   follows as above.
//!
//! The leader holds (acts on nothing) while it cannot confirm its lease, and steps down
//! only when the store says the lease is gone (`lease::standing`). Checked: no replica
//! steps down while the store still holds its lease, and a leader that has run with a
//! serving store for `lease::resume_after_store_ms` acts.

use super::{World, STEP_MS};
use quorum_core::failover::{EndpointSet, ATTEMPT_TIMEOUT_MS};
use quorum_core::lease::{standing, Standing, MANAGEMENT_ELECTION_MS};

/// Members of the simulated management etcd.
pub(super) const STORE_MEMBERS: usize = 3;
/// etcd's election timeout: a new leader extends every lease by it.
const ELECTION_TIMEOUT_MS: u64 = 1_000;

/// What the replicas' store is doing.
#[derive(Clone, Debug, Default)]
pub(super) struct SimStore {
    /// No member serves until then.
    pub unavailable_until_ms: Option<u64>,
    /// Since when it serves (after the last outage).
    pub serving_since_ms: u64,
    /// The member that leads the store.
    pub leader_member: usize,
    /// A member killed or paused, until it heals.
    pub dead: Option<DeadMember>,
    /// When the last outage ended, and the token that held the lease then, until that
    /// leader acts (for the figures).
    pub recovered: Option<(u64, u64)>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct DeadMember {
    pub member: usize,
    pub heals_at_ms: u64,
}

/// A replica's connection to the store: which member it asks first, and whether it is
/// stuck in an attempt on a member that does not answer.
#[derive(Clone, Debug)]
pub(super) struct StoreView {
    pub members: EndpointSet,
    pub stalled_until_ms: Option<u64>,
    /// Since when the replica has run (not paused, down or stalled).
    pub running_since_ms: u64,
}

impl StoreView {
    pub fn new(first: usize) -> StoreView {
        StoreView {
            members: EndpointSet::new(STORE_MEMBERS, first),
            stalled_until_ms: None,
            running_since_ms: 0,
        }
    }
}

impl Default for StoreView {
    fn default() -> Self {
        StoreView::new(0)
    }
}

impl World {
    /// Does the store answer replica `i` now?
    pub(super) fn store_serves(&self, i: usize) -> bool {
        if !self.ha() {
            return true;
        }
        self.store.unavailable_until_ms.is_none()
            && self.replicas[i].store.stalled_until_ms.is_none()
    }

    /// The store's side of a step, before the replicas': outages and stalls that end, the
    /// dead member healing, and the lease expiry standing still while nothing serves.
    pub(super) fn tick_store(&mut self) {
        let now = self.now_ms;
        for i in 0..self.replicas.len() {
            if self.replicas[i]
                .store
                .stalled_until_ms
                .is_some_and(|t| t <= now)
            {
                self.replicas[i].store.stalled_until_ms = None;
                self.replicas[i].store.running_since_ms = now;
                self.note(format!(
                    "r{i}'s attempt on the stopped store member gives up; it asks another"
                ));
            }
        }
        if let Some(d) = self.store.dead {
            if d.heals_at_ms <= now {
                self.store.dead = None;
                for r in &mut self.replicas {
                    r.store.members.served(d.member, now);
                }
                self.note(format!("store member {} is back", d.member));
            }
        }
        match self.store.unavailable_until_ms {
            Some(until) if until <= now => {
                self.store.unavailable_until_ms = None;
                self.store.serving_since_ms = now;
                self.store.recovered = self.leader_key.map(|k| (now, k.token));
                // A new store leader: every lease lasts its TTL plus the election timeout
                // from now (etcd's lessor promotion).
                let extended = now + self.cfg.lease_ttl_ms + ELECTION_TIMEOUT_MS;
                if let Some(k) = self.leader_key.as_mut() {
                    k.expires_at_ms = k.expires_at_ms.max(extended);
                }
                self.note("the store has a leader again: leases are extended".into());
            }
            Some(_) => {
                // Without a leader, no lease ends.
                if let Some(k) = self.leader_key.as_mut() {
                    k.expires_at_ms += STEP_MS;
                }
            }
            None => {}
        }
    }

    /// A store fault (two replicas, one store fault at a time): the store unavailable
    /// for a while, or one member dead or paused.
    pub(super) fn store_fault(&mut self) {
        if self.store.unavailable_until_ms.is_some() || self.store.dead.is_some() {
            return;
        }
        self.faults += 1;
        if self.rng.chance(500) {
            let ms = if self.rng.chance(500) {
                // An election.
                ELECTION_TIMEOUT_MS
                    + self
                        .rng
                        .below(MANAGEMENT_ELECTION_MS - ELECTION_TIMEOUT_MS + 1)
            } else {
                // A majority of the members gone, then back.
                STEP_MS + self.rng.below(3 * self.cfg.lease_ttl_ms)
            };
            self.store_unavailable(ms, "");
            return;
        }
        let member = self.rng.below(STORE_MEMBERS as u64) as usize;
        let paused = self.rng.chance(500);
        let heals_at_ms = self.now_ms + STEP_MS * (5 + self.rng.below(60));
        self.member_lost(member, paused, heals_at_ms);
    }

    /// Store member `member` killed or `paused` until `heals_at_ms`: a replica that asked
    /// it first loses one attempt on it (a paused one), then asks another; if it led the
    /// store, an election follows.
    fn member_lost(&mut self, member: usize, paused: bool, heals_at_ms: u64) {
        self.store.dead = Some(DeadMember {
            member,
            heals_at_ms,
        });
        self.lease.store_endpoint_faults += 1;
        let how = if paused { "paused" } else { "killed" };
        self.note(format!("FAULT store member {member} {how}"));
        let now = self.now_ms;
        for i in 0..self.replicas.len() {
            let asked_first = self.replicas[i].store.members.preferred() == member;
            let random = self.rng.next_u64();
            self.replicas[i]
                .store
                .members
                .failed(member, now, how, random);
            if asked_first && paused && self.runs(i) {
                self.lease.store_stalls += 1;
                self.replicas[i].store.stalled_until_ms = Some(now + ATTEMPT_TIMEOUT_MS);
                self.note(format!(
                    "r{i} waits {ATTEMPT_TIMEOUT_MS} ms on the stopped store member"
                ));
            }
        }
        if member == self.store.leader_member {
            let ms = ELECTION_TIMEOUT_MS
                + self
                    .rng
                    .below(MANAGEMENT_ELECTION_MS - ELECTION_TIMEOUT_MS + 1);
            self.store.leader_member = (member + 1) % STORE_MEMBERS;
            self.store_unavailable(ms, " (its leader was the member lost: an election)");
        }
    }

    fn store_unavailable(&mut self, ms: u64, why: &str) {
        self.lease.store_outages += 1;
        self.store.unavailable_until_ms = Some(self.now_ms + ms);
        self.note(format!("FAULT the store serves nothing for {ms} ms{why}"));
    }

    /// A replica's standing before it acts: `Hold` (and counted) while it cannot confirm
    /// its lease, whatever the reason.
    pub(super) fn standing_of(&mut self, i: usize, margin_ms: u64) -> Standing {
        let lost = self.replicas[i].term.is_some_and(|t| t.lost);
        let s = standing(self.lease_left_ms(i), lost, margin_ms);
        if s == Standing::Hold {
            self.lease.store_holds += 1;
        }
        s
    }

    /// Replica `i` may act: if it held the lease when the store served again, how long
    /// after that (or after it last resumed, when it was paused or stalled meanwhile).
    pub(super) fn acted_after_outage(&mut self, i: usize) {
        let Some((at, token)) = self.store.recovered else {
            return;
        };
        if self.replicas[i].term.is_some_and(|t| t.token == token) {
            self.store.recovered = None;
            let since = at.max(self.replicas[i].store.running_since_ms);
            self.lease.resume_after_outage_max_ms = self
                .lease
                .resume_after_outage_max_ms
                .max(self.now_ms - since);
        }
    }

    /// Checks: a leader that has run with a serving store for the bound acts.
    pub(super) fn check_store_liveness(&mut self) {
        let Some(k) = self.leader_key else {
            return;
        };
        let i = k.holder;
        let Some(t) = self.replicas[i].term else {
            return;
        };
        if t.token != k.token || t.lost || !self.runs(i) || !self.store_serves(i) {
            return;
        }
        let since = self
            .store
            .serving_since_ms
            .max(self.replicas[i].store.running_since_ms);
        let bound = quorum_core::lease::resume_after_store_ms(STEP_MS);
        let margin = quorum_core::lease::margin_ms(self.cfg.lease_ttl_ms);
        if self.now_ms >= since + bound
            && standing(self.lease_left_ms(i), false, margin) != Standing::Act
        {
            self.violate(format!(
                "r{i} holds the lease and has run with a serving store for {} ms, yet cannot act",
                self.now_ms - since
            ));
        }
    }
}

#[cfg(test)]
impl World {
    /// The store unavailable from now for `ms` (a test's fault).
    pub(super) fn store_unavailable_for_test(&mut self, ms: u64) {
        self.store_unavailable(ms, "");
    }

    /// Store member `member` paused from now for a while, not the store's leader (a
    /// test's fault).
    pub(super) fn store_member_paused_for_test(&mut self, member: usize) {
        self.store.leader_member = (member + 1) % STORE_MEMBERS;
        self.member_lost(member, true, self.now_ms + 50 * STEP_MS);
    }
}
