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
