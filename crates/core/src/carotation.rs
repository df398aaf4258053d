//! A CA rotation (`quorum rotate-ca`), as rules. The store holds the CA in force and,
//! during a rotation, the new one; `ControlPlane.ca_rotation` holds the phase, and each
//! machine record the CA files its next start uses (`Machine.ca_step`).
//!
//! Phases, each recorded before any member uses its files:
//! 1. `Trust`: every member restarted trusting both CAs (certificates still from the
//!    old one, and quorum's own client certificate too);
//! 2. `Reissue`: every member restarted with its peer certificate from the new CA
//!    (quorum's own client certificate from the new CA from this phase on; every member
//!    trusts it); its server certificate stays the old CA's, so clients that trust
//!    only the old CA keep working;
//! 3. `Drop`: every member restarted trusting only the new CA, its server certificate
//!    from it too; then the new CA becomes the CA in force and the old one is forgotten
//!    (`FinishCaRotation`).
//!
//! Why it never cuts a member off: a phase moves on only once every machine's record
//! says the phase's files and every member serves (a voter, healthy: started since its
//! record was written), so at any moment two running members are at most one phase
//! apart, and each phase's files are accepted by the previous and the next phase's:
//! `Trust` members accept old-CA peer certificates (none-phase and `Trust` peers) and
//! new-CA ones (`Reissue` peers); `Reissue` members trust both; `Drop` members meet only
//! `Reissue` and `Drop` peers, whose peer certificates are the new CA's. Quorum's own
//! client certificate follows the same rule (old CA until `Reissue` is recorded), and
//! quorum trusts both CAs' server certificates while a rotation is under way.
//!
//! The restarts themselves are the rollout's (`DeleteReason::CaRotation`): in place
//! under `strategy: InPlace` (the restart's record takes the phase's files), else a
//! replacement allocated with them, one member at a time, with the same preflight and
//! quorum projection as any other.

use crate::decide::*;
use crate::model::*;

impl<'a> View<'a> {
    /// Whether a machine's CA files are not the rotation phase's (never without a
    /// rotation, and never for a plaintext machine).
    pub(crate) fn ca_outdated(&self, m: &Machine) -> bool {
        match &self.cp.ca_rotation {
            Some(r) => m.tls && m.ca_step != Some(r.wanted()),
            None => false,
        }
    }

    /// With no machine outdated and the size right: once every member serves with the
    /// phase's files, record the next phase, or after the last, finish.
    pub(crate) fn advance_ca_rotation(&self) -> Option<Step> {
        let r = self.cp.ca_rotation.as_ref()?;
        let op = Operation::RollingOut;
        let wanted = r.wanted();
        // A member's restart rolled back stops the rotation as it stops a rollout,
        // until the person retries.
        if let Some(stopped) = self.stopped_rollout() {
            return Some(stopped);
        }
        for s in &self.seen {
            let name = &s.machine.name;
            if s.machine.deleting || s.machine.in_place.is_some() {
                return Some(Step::wait(
                    op,
                    format!("CA rotation: {name} is still changing"),
                ));
            }
            if s.machine.tls && s.machine.ca_step != Some(wanted) {
                return Some(Step::wait(
                    op,
                    format!(
                        "CA rotation: {name} does not have phase {}'s files yet",
                        r.phase.number()
                    ),
                ));
            }
            let serves = s.member.is_some_and(|m| !m.is_learner && self.healthy(m));
            if !serves {
                return Some(Step::wait(
                    op,
                    format!(
                        "CA rotation: waiting for {name} to serve with phase {}'s files",
                        r.phase.number()
                    ),
                ));
            }
        }
        Some(Step::act(
            op,
            match r.phase.next() {
                Some(phase) => Action::SetCaPhase { phase },
                None => Action::FinishCaRotation { generation: r.to },
            },
        ))
    }
}

/// A machine's CA files as generations: the CAs it trusts, and those its peer and its
/// server certificates come from (what the simulator, the model check and the tests
/// compare; the controller issues from `CaFiles`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CaGenerations {
    /// Each trusted generation once, lowest first.
    pub trusts: [Option<u32>; 2],
    pub peer: u32,
    pub server: u32,
}

impl CaGenerations {
    /// The files of generation `g` alone (no rotation).
    pub fn plain(g: u32) -> CaGenerations {
        CaGenerations {
            trusts: [Some(g), None],
            peer: g,
            server: g,
        }
    }

    pub fn trusts(&self, g: u32) -> bool {
        self.trusts.contains(&Some(g))
    }
}

impl ControlPlane {
    /// `ca_files` as generations: the CA in force is `ca_generation`, a rotation's new
    /// one its `to`.
    pub fn ca_generations(&self, step: Option<CaStep>) -> CaGenerations {
        let f = self.ca_files(step);
        let current = self.ca_generation;
        let next = self.ca_rotation.as_ref().map_or(current, |r| r.to);
        let by = |n: bool| if n { next } else { current };
        // In order, each once, so that equal files compare equal.
        let mut trusts = [None, None];
        let mut listed = [current, next]
            .into_iter()
            .zip([f.trusts_current, f.trusts_next])
            .filter_map(|(g, t)| t.then_some(g))
            .collect::<Vec<u32>>();
        listed.sort_unstable();
        listed.dedup();
        for (slot, g) in trusts.iter_mut().zip(listed) {
            *slot = Some(g);
        }
        CaGenerations {
            trusts,
            peer: by(f.peer_by_next),
            server: by(f.server_by_next),
        }
    }

    /// The generation quorum's own client certificate comes from.
    pub fn controller_ca_generation(&self) -> u32 {
        match &self.ca_rotation {
            Some(r) if self.controller_uses_next_ca() => r.to,
            _ => self.ca_generation,
        }
    }

    /// Whether quorum trusts a server certificate of generation `g`: the CA in force,
    /// and during a rotation the new one.
    pub fn controller_trusts(&self, g: u32) -> bool {
        g == self.ca_generation || self.ca_rotation.as_ref().is_some_and(|r| r.to == g)
    }
}

/// The first refusal among running members, in words, if there is one: a member that
/// does not trust another's peer certificate or quorum's client certificate, or a
/// server certificate quorum does not trust. `None`: every connection is accepted.
pub fn first_distrust(cp: &ControlPlane, running: &[(&str, CaGenerations)]) -> Option<String> {
    let ours = cp.controller_ca_generation();
    for (a, fa) in running {
        if !cp.controller_trusts(fa.server) {
            return Some(format!(
                "quorum does not trust {a}'s server certificate (CA generation {})",
                fa.server
            ));
        }
        if !fa.trusts(ours) {
            return Some(format!(
                "{a} does not trust quorum's own certificate (CA generation {ours})"
            ));
        }
        if let Some((b, fb)) = running.iter().find(|(_, fb)| !fa.trusts(fb.peer)) {
            return Some(format!(
                "{a} does not trust {b}'s peer certificate (CA generation {})",
                fb.peer
            ));
        }
    }
    None
}
