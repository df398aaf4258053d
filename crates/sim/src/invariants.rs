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
        self.check_client_reach();
        self.check_nospace_bound();
        self.check_ca_trust();
        self.check_in_place();
        self.check_lease();
        if self.ha() {
            self.check_store_liveness();
        }
    }

    /// A client given the control plane's client addresses once its first voters
    /// served always finds a voter at one of them (`quorum_core::reach`): replacements,
    /// remediations and scaling take the addresses their predecessors freed. A rebuild
    /// (restore, recovery) is a person's choice to start over and is not held to it;
    /// members on hosts follow their hosts.
    fn check_client_reach(&mut self) {
        if self.cp.rebuild.is_some() {
            // Clients are told the addresses again once the rebuilt cluster has them.
            self.client_given = (0, Vec::new());
        }
        if self.cfg.hosts || self.cp.rebuild.is_some() {
            return;
        }
        let voters: Vec<Ipv4Addr> = self
            .voters()
            .filter_map(|m| self.machine_of_member(m))
            .map(|m| m.address)
            .collect();
        if voters.is_empty() {
            return;
        }
        let replicas = self.cp.spec.replicas;
        let wanted = quorum_core::reach::wanted_len(replicas);
        // Told the whole list once it is as long as the replica count wants, and again
        // after a scale up has grown it (as the README asks of operators); a scale down
        // tells nothing: the list a client has stays good.
        if replicas > self.client_given.0 && self.cp.client_addresses.len() >= wanted {
            let told = self.cp.client_addresses.iter().map(|a| *a.ip()).collect();
            self.client_given = (replicas, told);
            return;
        }
        let given = &self.client_given.1;
        if !given.is_empty() && !voters.iter().any(|a| given.contains(a)) {
            self.violate(format!(
                "a client given {given:?} finds no voter: voters at {voters:?}"
            ));
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
            && self.machines.iter().all(|m| m.requested.is_none())
            && self
                .lb
                .as_ref()
                .is_none_or(|lb| lb.down_until_step.is_none() && lb.backend == self.published)
    }

    /// Converged, the clients are told every member: the published endpoints are the
    /// client URLs of every machine (a pass that never published, or published late,
    /// would leave clients on a list that moved on without them).
    pub(crate) fn check_published(&mut self) {
        let every: BTreeSet<String> = self.machines.iter().map(|m| m.client_url()).collect();
        if self.published != every {
            let told: Vec<&String> = self.published.iter().collect();
            self.violate(format!(
                "converged, but clients are told {told:?} while every member serves: {every:?}"
            ));
        }
    }
}
