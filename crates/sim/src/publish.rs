//! A learner whose own publish was lost (`quorum_core::publish`), etcd's side and its
//! checks. etcd sends a new member the leader's raft snapshot at its first contact once
//! the log is compacted (always after a restore), and the member's own publish can
//! arrive applied inside it: the cluster shows it started, it replicates, but its
//! endpoint answers nothing until etcd's retry, `quorum_core::publish::ETCD_RETRY_S`
//! after its start. Here a learner's first start loses its publish with
//! `LOST_PER_MILLE`; a later start never does (its log holds the snapshot).
//!
//! Checked: a learner that is not leaving, not in an in-place step and not torn down is
//! stopped only while its endpoint is silent, and at most once.

use super::*;

/// How often a learner's first start loses its publish: often (3 of 4 learners after a
/// restore with etcd 3.5.1), so both the rule and etcd's own retry are exercised.
const LOST_PER_MILLE: u64 = 500;

/// What the lost publishes came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublishCounts {
    /// Learners whose first start lost its publish.
    pub lost: u64,
    /// Of those, stopped by the core's rule (and started again).
    pub restarted: u64,
    /// Of those, answered by etcd's own retry (the rule did not act in time).
    pub retried: u64,
}

impl PublishCounts {
    pub fn add(&mut self, o: &PublishCounts) {
        self.lost += o.lost;
        self.restarted += o.restarted;
        self.retried += o.retried;
    }
}

impl std::fmt::Display for PublishCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lost publishes: {} learners, {} started again by the core, {} answered by etcd's retry",
            self.lost, self.restarted, self.retried
        )
    }
}

impl World {
    /// At a member's start: a learner's first process may lose its publish.
    pub(crate) fn maybe_lose_publish(&mut self, machine: &str, learner: bool) {
        let first = self
            .procs
            .get(machine)
            .is_some_and(|p| p.starts_unix_s.len() == 1);
        if !learner || !first || !self.rng.chance(LOST_PER_MILLE) {
            return;
        }
        let until = self.now_ms + quorum_core::publish::ETCD_RETRY_S as u64 * 1_000;
        if let Some(p) = self.procs.get_mut(machine) {
            p.publish_lost_until_ms = Some(until);
        }
        self.publish.lost += 1;
        self.note(format!("{machine}'s publish came back inside the snapshot"));
    }

    /// Its endpoint is silent: its publish was lost and etcd has not retried yet.
    pub(crate) fn publish_silent(&self, machine: &str) -> bool {
        self.procs
            .get(machine)
            .is_some_and(|p| p.running && p.publish_lost_until_ms.is_some())
    }

    /// etcd's retry: a lost publish lands at its time.
    pub(crate) fn tick_publish(&mut self) {
        let now = self.now_ms;
        let mut retried = Vec::new();
        for (name, p) in self.procs.iter_mut() {
            if p.publish_lost_until_ms.is_some_and(|t| t <= now) {
                p.publish_lost_until_ms = None;
                retried.push(name.clone());
            }
        }
        for name in retried {
            self.publish.retried += 1;
            self.note(format!("{name} publishes on etcd's retry"));
        }
    }

    /// Before a decision's stop of `machine`: a learner not leaving, not in an in-place
    /// step and not torn down is stopped only while silent, and only once.
    pub(crate) fn check_learner_stop(&mut self, machine: &str) {
        let Some(rec) = self.machines.iter().find(|m| m.name == machine) else {
            return;
        };
        let learner = self
            .member_of_machine(machine)
            .is_some_and(|m| m.is_learner);
        let running = self.procs.get(machine).is_some_and(|p| p.running);
        if !learner || !running || rec.deleting || rec.in_place.is_some() || self.cp.deleting {
            return;
        }
        let silent = self.publish_silent(machine)
            || !self.responsive(machine)
            || matches!(&self.impairment, Some((Impairment::HiddenFromController(n), _)) if n == machine);
        if !silent {
            self.violate(format!("learner {machine} stopped while it answered"));
        }
        if !self.publish_stopped.insert(machine.to_string()) {
            self.violate(format!(
                "learner {machine} stopped a second time for its publish"
            ));
        }
        if let Some(p) = self.procs.get_mut(machine) {
            if p.publish_lost_until_ms.take().is_some() {
                self.publish.restarted += 1;
            }
        }
    }
}
