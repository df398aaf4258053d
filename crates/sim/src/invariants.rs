//! The invariants checked after every step, and convergence.

use super::*;

impl World {
    pub(crate) fn check_invariants(&mut self) {
        let learners = self.members.iter().filter(|m| m.is_learner).count();
        // Orphan learners of the Orphans scenario predate quorum; count quorum's own.
        let own_learners = self
            .members
            .iter()
            .filter(|m| m.is_learner && self.machine_of_member(m).is_some())
            .count();
        if own_learners > 1 {
            self.violate(format!("{learners} learners at once"));
        }
        let removal_in_flight = self.machines.iter().any(|mach| {
            mach.deleting
                && self
                    .member_of_machine(&mach.name)
                    .is_some_and(|m| !m.is_learner)
        });
        // A deposed leader's stale add may land beside a removal the new leader marked
        // meanwhile (remediation comes before joins): the learner is then promoted before
        // the removal (`finish_learner` comes first), and quorum's own steps never
        // start one beside the other.
        let stale = self.stale_learner.as_ref().is_some_and(|url| {
            self.members
                .iter()
                .any(|m| &m.peer_url == url && m.is_learner)
        });
        if own_learners > 0 && removal_in_flight && !stale {
            self.violate("an add and a removal in flight together".into());
        }
        // No acknowledged write lost: some voter holds every acknowledged entry.
        let best = self.voters().map(|m| m.log).max().unwrap_or(0);
        if best < self.acked {
            self.violate(format!(
                "acknowledged writes lost: best voter log {best} < acked {}",
                self.acked
            ));
        }
        self.check_nospace_bound();
        self.check_ca_trust();
        self.check_in_place();
        self.check_lease();
        if self.ha() {
            self.check_store_liveness();
        }
    }

    /// The store never sees a lease end before its holder does.
    pub(crate) fn check_lease(&mut self) {
        let Some(k) = self.leader_key else {
            return;
        };
        let holder_deadline = self.replicas[k.holder]
            .term
            .filter(|t| t.token == k.token)
            .and_then(|t| t.deadline_ms);
        if holder_deadline.is_some_and(|d| d > k.expires_at_ms) {
            self.violate(format!(
                "the store's lease (token {}) ends at {} ms, before its holder's own deadline {holder_deadline:?}",
                k.token, k.expires_at_ms
            ));
        }
    }

    /// Has the spec been met? Only asked again when the controller's last decision said
    /// so, which saves a second decision per step.
    pub(crate) fn converged(&self) -> bool {
        if !self.last_converged {
            return false;
        }
        let d = decide(&self.cp, &self.machines, &self.observe());
        d.converged
            && self
                .machines
                .iter()
                .all(|m| m.version == self.cp.spec.version)
            && self.machines.len() == self.cp.spec.replicas as usize
            && self.members.len() == self.machines.len()
            && self.space.alarms.is_empty()
            && self.in_place_converged()
            && self.cp.ca_rotation.is_none()
            && self
                .lb
                .as_ref()
                .is_none_or(|lb| lb.down_until_step.is_none() && lb.backend == self.published)
    }
}
