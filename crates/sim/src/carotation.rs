//! CA rotations in the simulated world: a person runs `quorum rotate-ca` once in a
//! run (in half of the seeds, at a step the seed chooses within the fault window, so
//! it meets rollouts, scaling, in-place steps, rebuilds, crashes and deposed leaders);
//! every start records the CA files its machine record named then (what it trusts and
//! the CA its certificates come from, as `ControlPlane::ca_files` gives the real
//! controller). Checked after every step: every running member trusts every other
//! running member's issuer and quorum's own (no peer or client connection refused),
//! and a run converges only with the rotation finished.

use super::*;

/// What the CA rotations of a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaCounts {
    /// Rotations begun (`rotate-ca`), phases recorded, rotations finished.
    pub begun: u64,
    pub phases: u64,
    pub finished: u64,
    /// Members started with a rotation's files (of any of its phases).
    pub starts: u64,
}

impl CaCounts {
    pub fn add(&mut self, o: &CaCounts) {
        self.begun += o.begun;
        self.phases += o.phases;
        self.finished += o.finished;
        self.starts += o.starts;
    }
}

impl std::fmt::Display for CaCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} CA rotations begun, {} phases recorded, {} finished, {} starts with a rotation's files",
            self.begun, self.phases, self.finished, self.starts
        )
    }
}

impl World {
    /// Records the files of a start of `name` (its machine record as it is now).
    pub(crate) fn record_ca_files(&mut self, name: &str) {
        let Some(m) = self.machines.iter().find(|m| m.name == name) else {
            return;
        };
        let files = self.cp.ca_generations(m.ca_step);
        let rotating = self
            .cp
            .ca_rotation
            .as_ref()
            .is_some_and(|r| m.ca_step.map(|s| s.generation) == Some(r.to));
        if rotating {
            self.ca.starts += 1;
        }
        if let Some(p) = self.procs.get_mut(name) {
            p.files = files;
        }
    }

    /// The person's `quorum rotate-ca`, once, at the step the seed chose.
    pub(crate) fn ca_rotation_operator(&mut self) {
        if !self.cfg.ca_rotation || self.step != self.rotate_ca_at_step() {
            return;
        }
        if self.cp.deleting || self.cp.ca_rotation.is_some() {
            return;
        }
        let from = self.cp.ca_generation;
        let now = self.now_unix_s();
        self.cp.ca_rotation = Some(CaRotation {
            from,
            to: from + 1,
            phase: CaPhase::Trust,
            since_unix_s: now,
            started_unix_s: now,
        });
        self.ca.begun += 1;
        self.note(format!(
            "  operator: rotate the CA (generation {from} -> {})",
            from + 1
        ));
    }

    /// Within the fault window, chosen by the seed (not the generator: the other
    /// seeds' traces stay as they were).
    fn rotate_ca_at_step(&self) -> u64 {
        let window = self.cfg.fault_steps.max(2);
        1 + self.cfg.seed.wrapping_mul(0x9E37_79B9) % (window - 1)
    }

    /// `SetCaPhase` and `FinishCaRotation`: store writes (refused to a deposed leader).
    pub(crate) fn perform_ca(&mut self, a: &Action, fenced: bool) -> Answer {
        if fenced {
            return Answer::Fenced;
        }
        match a {
            Action::SetCaPhase { phase } => {
                if let Some(r) = self.cp.ca_rotation.as_mut() {
                    if r.phase != *phase {
                        r.phase = *phase;
                        self.ca.phases += 1;
                    }
                }
            }
            Action::FinishCaRotation { generation }
                if self.cp.ca_rotation.as_ref().map(|r| r.to) == Some(*generation) =>
            {
                self.cp.ca_rotation = None;
                self.cp.ca_generation = *generation;
                self.ca.finished += 1;
            }
            _ => {}
        }
        Answer::Done
    }

    /// Every running member accepts every other running member's peer certificate and
    /// quorum's own client certificate, and quorum every running member's server
    /// certificate (`quorum_core::first_distrust`).
    pub(crate) fn check_ca_trust(&mut self) {
        let running: Vec<(&str, CaGenerations)> = self
            .procs
            .iter()
            .filter(|(name, p)| p.running && self.member_of_machine(name).is_some())
            .map(|(name, p)| (name.as_str(), p.files))
            .collect();
        if let Some(why) = quorum_core::first_distrust(&self.cp, &running) {
            self.violate(format!("TLS trust broken: {why}"));
        }
    }
}
