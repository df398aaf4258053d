//! The seeded faults of the members and the load balancer, and their healing.

use super::*;

impl World {
    pub(crate) fn maybe_fault(&mut self) {
        if !self.rng.chance(self.cfg.fault_per_mille) {
            return;
        }
        // One impairment at a time keeps faults within what quorum can tolerate.
        if self.impairment.is_some() {
            return;
        }
        self.faults += 1;
        let heal_at = self.step + 5 + self.rng.below(40);
        let kind = self.rng.below(if self.lb.is_some() { 7 } else { 6 });
        match kind {
            6 => {
                // The load balancer is unreachable: it keeps serving what it served, and
                // cannot be brought in step until it heals. Not a member impairment.
                if let Some(lb) = self.lb.as_mut() {
                    if lb.down_until_step.is_none() {
                        lb.down_until_step = Some(heal_at);
                        self.pacing_counts.lb_faults += 1;
                        self.note("FAULT the load balancer is unreachable".into());
                    }
                }
            }
            0 | 5 => {
                // A member process dies (the controller restarts it), or its machine
                // breaks for a while (its process cannot start until it heals).
                let broken = kind == 5;
                let running: Vec<String> = self
                    .procs
                    .iter()
                    .filter(|(_, p)| p.running)
                    .map(|(n, _)| n.clone())
                    .collect();
                if let Some(n) = self.pick(&running) {
                    if self.safe_to_impair_machine(&n) {
                        self.note(format!(
                            "FAULT {n} {}",
                            if broken { "breaks" } else { "process dies" }
                        ));
                        if let Some(p) = self.procs.get_mut(&n) {
                            p.running = false;
                        }
                        if broken {
                            self.impairment = Some((Impairment::Down(n), heal_at));
                        }
                    }
                }
            }
            1 => {
                let ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
                if let Some(id) = self.pick(&ids) {
                    let name = self
                        .members
                        .iter()
                        .find(|m| m.id == id)
                        .map(|m| m.name.clone())
                        .unwrap_or_default();
                    if self.safe_to_impair_member(id) {
                        self.note(format!("FAULT {id:x} ({name}) partitioned from its peers"));
                        self.impairment = Some((Impairment::PartitionedFromPeers(id), heal_at));
                    }
                }
            }
            2 => {
                let names: Vec<String> = self.machines.iter().map(|m| m.name.clone()).collect();
                if let Some(n) = self.pick(&names) {
                    self.note(format!("FAULT {n} unreachable from the controller"));
                    self.impairment = Some((Impairment::HiddenFromController(n), heal_at));
                }
            }
            3 => {
                let learners: Vec<u64> = self
                    .members
                    .iter()
                    .filter(|m| m.is_learner)
                    .map(|m| m.id)
                    .collect();
                if let Some(id) = self.pick(&learners) {
                    self.note(format!("FAULT learner {id:x} is slow"));
                    self.slow_learners.insert(id);
                }
            }
            _ => {
                let candidates: Vec<u64> = self
                    .voters()
                    .filter(|m| self.member_connected(m) && Some(m.id) != self.leader)
                    .map(|m| m.id)
                    .collect();
                if let Some(id) = self.pick(&candidates) {
                    if self.leader.is_some() {
                        self.note(format!("FAULT leadership moves to {id:x}"));
                        self.leader = Some(id);
                        self.term += 1;
                    }
                }
            }
        }
    }

    pub(crate) fn pick<T: Clone>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            Some(xs[self.rng.below(xs.len() as u64) as usize].clone())
        }
    }

    /// Would the cluster keep a quorum of connected voters without this member?
    pub(crate) fn safe_to_impair_member(&self, id: u64) -> bool {
        let voters = self.voters().count();
        let connected = self
            .voters()
            .filter(|m| m.id != id && self.member_connected(m))
            .count();
        connected >= quorum_size(voters)
    }

    pub(crate) fn safe_to_impair_machine(&self, name: &str) -> bool {
        let url = self
            .machines
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.peer_url());
        match self
            .members
            .iter()
            .find(|m| Some(&m.peer_url) == url.as_ref())
        {
            Some(m) => self.safe_to_impair_member(m.id),
            None => true,
        }
    }

    pub(crate) fn heal(&mut self) {
        let step = self.step;
        if let Some(lb) = self.lb.as_mut() {
            if lb.down_until_step.is_some_and(|s| s <= step) {
                lb.down_until_step = None;
                self.note("HEAL the load balancer is reachable".into());
            }
        }
        if let Some((imp, at)) = &self.impairment {
            if *at <= self.step {
                let what = format!("{imp:?}");
                if let Impairment::PartitionedFromPeers(id) = imp {
                    let id = *id;
                    let now = self.now_ms;
                    if let Some(m) = self.members.iter_mut().find(|m| m.id == id) {
                        m.connected_since_ms = now;
                    }
                }
                self.impairment = None;
                self.note(format!("HEAL {what}"));
            }
        }
    }
}
