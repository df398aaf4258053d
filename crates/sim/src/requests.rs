//! A person's `quorum member replace|restart` (a third of the runs, never with a
//! quorum loss): at a step the seed picks, one staying machine is asked to be replaced
//! or restarted in place, as the command records it (`Machine::requested`), after the
//! command's own checks (a restart only with 3 or more replicas; a machine leaving is
//! refused). No random draw: the rest of each seed's run is what it was.
//!
//! Checked: a run converges only with no request left (`invariants::converged`), so a
//! request is carried out or the run is stuck; a replacement removes the machine asked
//! for, a restart keeps it (`check_requests`).

use super::*;
use quorum_core::MachineRequest;

/// What the person asked, to check it was done.
#[derive(Clone, Debug)]
pub(crate) struct Asked {
    pub(crate) machine: String,
    pub(crate) request: MachineRequest,
}

impl World {
    /// The person's request, once, at the step the seed chose.
    pub(crate) fn member_request_step(&mut self) {
        let seed = self.cfg.seed;
        let picked = self.cfg.member_request && self.cfg.scenario != Scenario::QuorumLoss;
        if !picked || self.asked.is_some() || self.step != 30 + seed % 50 {
            return;
        }
        let staying: Vec<String> = self
            .machines
            .iter()
            .filter(|m| !m.deleting && m.requested.is_none() && !m.in_place_out_of_service())
            .map(|m| m.name.clone())
            .collect();
        if staying.is_empty() {
            return;
        }
        let machine = staying[(seed / 7) as usize % staying.len()].clone();
        // As the command checks: a restart needs 3 replicas, a replacement a host for
        // its new machine (it is refused without --force on hosts with none free).
        let request = if (seed / 5).is_multiple_of(2) && self.cp.spec.replicas >= 3 {
            MachineRequest::Restart
        } else if self.cfg.hosts && self.cfg.tight_hosts {
            return;
        } else {
            MachineRequest::Replace
        };
        if let Some(m) = self.machines.iter_mut().find(|m| m.name == machine) {
            m.requested = Some(request);
        }
        // The in-place runs' step deadline: a NOSPACE alarm raised while the member is
        // restarting keeps it unhealthy, and the repair waits for the step to end (at
        // the default 60 s, past what the run allows writes to be refused).
        self.cp.spec.rollout.in_place.timeout = crate::SIM_IN_PLACE_TIMEOUT;
        self.note(format!("OPERATOR quorum member {request} sim {machine}"));
        self.asked = Some(Asked { machine, request });
    }

    /// At convergence: a replacement asked for removed its machine; a restart kept it
    /// (unless something else replaced it meanwhile: remediation, a rollout).
    pub(crate) fn check_requests(&mut self) {
        let Some(a) = self.asked.clone() else {
            return;
        };
        let there = self.machines.iter().any(|m| m.name == a.machine);
        if a.request == MachineRequest::Replace && there {
            self.violate(format!(
                "{} was asked to be replaced and is still there",
                a.machine
            ));
        }
        if self.machines.iter().any(|m| m.requested.is_some()) {
            self.violate("converged with a request left".into());
        }
    }
}
