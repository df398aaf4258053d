//! CA rotations in the simulated world: a person runs `quorum rotate-ca` once in a
//! run (in half of the seeds, at a step the seed chooses within the fault window, so
//! it meets rollouts, scaling, in-place steps, rebuilds, crashes and deposed leaders);
//! every start records the CA files its machine record named then (what it trusts and
//! the CA its certificates come from, as `ControlPlane::ca_files` gives the real
//! controller). Checked after every step: every running member trusts every other
//! running member's issuer and quorum's own (no peer or client connection refused),
//! and a run converges only with the rotation finished.

use super::*;

/// What a started member's TLS files say: the CA generations it trusts (bit `g`) and
/// the generations its peer and server certificates come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SimFiles {
    trusts: u64,
    peer: u32,
    server: u32,
}

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

/// Generations above this are not simulated (one rotation a run).
const MAX_GENERATION: u32 = 63;

impl World {
    /// The files a start of `m` gets now.
    pub(crate) fn ca_files_of(&self, m: &Machine) -> SimFiles {
        let files = self.cp.ca_files(m.ca_step);
        let current = self.cp.ca_generation.min(MAX_GENERATION);
        let next = self
            .cp
            .ca_rotation
            .as_ref()
            .map_or(current, |r| r.to.min(MAX_GENERATION));
        let mut trusts = 0u64;
        if files.trusts_current {
            trusts |= 1 << current;
        }
        if files.trusts_next {
            trusts |= 1 << next;
        }
        let by = |next_one: bool| if next_one { next } else { current };
        SimFiles {
            trusts,
            peer: by(files.peer_by_next),
            server: by(files.server_by_next),
        }
    }

    /// Records the files of a start of `name` (its machine record as it is now).
    pub(crate) fn record_ca_files(&mut self, name: &str) {
        let Some(m) = self.machines.iter().find(|m| m.name == name) else {
            return;
        };
        let files = self.ca_files_of(m);
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
    /// quorum's own client certificate (the CA the control plane record names for it),
    /// and quorum accepts every running member's server certificate (it trusts the CA
    /// in force, and a rotation's new one while it runs).
    pub(crate) fn check_ca_trust(&mut self) {
        let running: Vec<(&String, SimFiles)> = self
            .procs
            .iter()
            .filter(|(name, p)| p.running && self.member_of_machine(name).is_some())
            .map(|(name, p)| (name, p.files))
            .collect();
        let ours = if self.cp.controller_uses_next_ca() {
            self.cp.ca_rotation.as_ref().map_or(0, |r| r.to)
        } else {
            self.cp.ca_generation
        };
        let current = self.cp.ca_generation.min(MAX_GENERATION);
        let quorum_trusts = (1u64 << current)
            | self
                .cp
                .ca_rotation
                .as_ref()
                .map_or(0, |r| 1u64 << r.to.min(MAX_GENERATION));
        let mut broken = None;
        'outer: for (a, fa) in &running {
            if quorum_trusts & (1 << fa.server) == 0 {
                broken = Some(format!(
                    "quorum does not trust {a}'s server certificate (CA generation {})",
                    fa.server
                ));
                break;
            }
            if fa.trusts & (1 << ours.min(MAX_GENERATION)) == 0 {
                broken = Some(format!(
                    "{a} does not trust quorum's own certificate (CA generation {ours})"
                ));
                break;
            }
            for (b, fb) in &running {
                if fa.trusts & (1 << fb.peer) == 0 {
                    broken = Some(format!(
                        "{a} does not trust {b}'s peer certificate (CA generation {})",
                        fb.peer
                    ));
                    break 'outer;
                }
            }
        }
        if let Some(why) = broken {
            self.violate(format!("TLS trust broken: {why}"));
        }
    }
}
