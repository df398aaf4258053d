//! The simulated controller's pacing: the core's `Pacing` (the type the real controller
//! drives), the published endpoints and the simulated load balancer it gates removals
//! on, and the ground-truth check of every removal.

use super::*;

/// How often the pacing policy held an action back in a run, and the load balancer
/// faults it met.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacingCounts {
    /// Controller passes that held a removal while its machine drained...
    pub drain_holds: u64,
    /// ...while the load balancer was not in step...
    pub lb_holds: u64,
    /// ...or held an action that was backing off.
    pub backoff_holds: u64,
    /// Removals of a leaving machine's member performed (each checked against the drain
    /// and the load balancer).
    pub paced_removals: u64,
    /// Load balancer outages injected.
    pub lb_faults: u64,
}

impl PacingCounts {
    pub fn add(&mut self, o: &PacingCounts) {
        self.drain_holds += o.drain_holds;
        self.lb_holds += o.lb_holds;
        self.backoff_holds += o.backoff_holds;
        self.paced_removals += o.paced_removals;
        self.lb_faults += o.lb_faults;
    }
}

impl std::fmt::Display for PacingCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} removals of a leaving machine's member, held {} times while draining and {} while the load balancer was behind ({} outages); {} holds backing off",
            self.paced_removals, self.drain_holds, self.lb_holds, self.lb_faults, self.backoff_holds
        )
    }
}

/// The simulated HAProxy: which members' endpoints its backend serves.
#[derive(Clone, Debug, Default)]
pub(crate) struct SimLb {
    /// Client URLs of the servers that get new requests (a drained server is not here).
    pub(crate) backend: BTreeSet<String>,
    /// Unreachable (its runtime socket gone, the process restarting) until this step.
    pub(crate) down_until_step: Option<u64>,
}

impl World {
    /// Publishes the client endpoints the pass hands out (for clients to follow),
    /// noting when each one left the set: the ground truth the drain is checked against.
    pub(crate) fn publish(&mut self, endpoints: &[String]) {
        let now = self.now_ms;
        let new: BTreeSet<String> = endpoints.iter().cloned().collect();
        for gone in self.published.difference(&new) {
            self.unpublished_at_ms.insert(gone.clone(), now);
        }
        for url in &new {
            self.unpublished_at_ms.remove(url);
        }
        self.published = new;
    }

    /// Brings the load balancer's backend in step with the published endpoints, as the
    /// controller's balancer does; false while it is unreachable (no load balancer: in
    /// step).
    pub(crate) fn sync_lb(&mut self) -> bool {
        let published = &self.published;
        match self.lb.as_mut() {
            None => true,
            Some(lb) if lb.down_until_step.is_some() => false,
            Some(lb) => {
                lb.backend.clone_from(published);
                true
            }
        }
    }

    /// How the controller's adapter classifies a simulated answer (`None`: fenced, the
    /// replica steps down instead).
    pub(crate) fn attempt_of(answer: &Answer) -> Option<Attempt> {
        match answer {
            Answer::Done => Some(Attempt::Done),
            Answer::Refused(_) => Some(Attempt::Refused),
            Answer::Failed(_) => Some(Attempt::Failed),
            Answer::Fenced => None,
        }
    }

    /// Answers the action `pass` handed out, with jitter from the seeded generator (none
    /// drawn once done).
    pub(crate) fn answer(&mut self, i: usize, pass: &mut Pass, attempt: Attempt) {
        let random = match attempt {
            Attempt::Done => 0,
            Attempt::Refused | Attempt::Failed => self.rng.next_u64(),
        };
        let now = self.now_ms;
        pass.performed(&mut self.replicas[i].memory, attempt, now, random);
    }

    pub(crate) fn count_hold(&mut self, i: usize, a: &Action, hold: Hold) {
        match hold {
            Hold::Draining { .. } => self.pacing_counts.drain_holds += 1,
            Hold::LoadBalancerBehind => self.pacing_counts.lb_holds += 1,
            Hold::BackingOff { .. } => {
                // Not traced: a backoff's holds repeat the refusal already noted.
                self.pacing_counts.backoff_holds += 1;
                return;
            }
        }
        let tag = self.tag(i);
        self.note(format!("{tag}holds '{a}': {hold}"));
    }

    /// The removal of `machine`'s member, checked against the ground truth: its endpoint
    /// has been out of the published set for the drain time, and the load balancer sends
    /// it no new request.
    pub(crate) fn check_removal_paced(&mut self, machine: &str) {
        if self.machines.iter().any(|m| m.name == machine) {
            self.pacing_counts.paced_removals += 1;
        }
        self.check_drained(machine, &format!("the member of {machine} removed"));
    }

    /// `what` is about to happen to `machine` (its member removed, or its process
    /// stopped in place), checked against the ground truth: its endpoint has been out of
    /// the published set for the drain time, and the load balancer sends it no new
    /// request.
    pub(crate) fn check_drained(&mut self, machine: &str, what: &str) {
        let Some(url) = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .map(Machine::client_url)
        else {
            return;
        };
        let drain_ms = PacingPolicy::DEFAULT.drain_ms;
        if self.published.contains(&url) {
            self.violate(format!("{what} while its endpoint is published"));
        } else if let Some(at) = self.unpublished_at_ms.get(&url).copied() {
            if self.now_ms < at + drain_ms {
                self.violate(format!(
                    "{what} {} ms after its endpoint was unpublished (drain {drain_ms} ms)",
                    self.now_ms - at
                ));
            }
        }
        if self.lb.as_ref().is_some_and(|lb| lb.backend.contains(&url)) {
            self.violate(format!(
                "{what} while the load balancer still sends clients to it"
            ));
        }
    }

    /// A crash loses everything not in the durable store. The single controller restarts
    /// at once (as before there were replicas); one of two restarts later, as a standby,
    /// leaving its lease to expire in the store.
    pub(crate) fn crash_replica(&mut self, i: usize) {
        self.replicas[i].memory = pass::Memory::default();
        self.replicas[i].busy_until_ms = 0;
        if !self.ha() {
            return;
        }
        let steps = RESTART_MIN_STEPS + self.rng.below(RESTART_SPREAD_STEPS);
        let r = &mut self.replicas[i];
        r.term = None;
        r.in_flight = None;
        r.paused_until_step = None;
        r.down_until_step = Some(self.step + steps);
        self.lease.crashes += 1;
        self.note(format!("r{i} is down for {steps} steps"));
    }
}
