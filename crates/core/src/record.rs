//! How a step changes a machine record: `Machine::apply`, the one function the
//! controller's store writes (each in one compare-and-swap), the simulator and the model
//! check call for the record-only actions, so that none of them writes a copy.
//!
//! Invariant: every write here is idempotent. Applying an action whose change is already
//! on the record changes nothing and says so (`false`), so a step repeated after a crash
//! or a lost answer writes nothing the second time.

use crate::action::Action;
use crate::model::{Machine, Remediation};

/// What applying an action needs beyond the record: the driver's wall clock, and the
/// end date of certificates issued now (`CertificatesSpec::not_after_unix_s`, from the
/// CA in force; `None` where no certificate is issued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applying {
    pub now_unix_s: i64,
    pub renewed_not_after_unix_s: Option<i64>,
}

impl Machine {
    /// Applies `a` to this record if it is a record-only action about this machine
    /// (`MarkDeleting`, `BeginInPlace`, `SetInPlacePhase`, `EndInPlace`); true if the
    /// record changed (false: nothing to write, already done or not this record's).
    pub fn apply(&mut self, a: &Action, at: &Applying) -> bool {
        if a.machine() != Some(self.name.as_str()) {
            return false;
        }
        let now = at.now_unix_s;
        match a {
            Action::MarkDeleting { remediation, .. } => self.mark_deleting(remediation.as_ref()),
            Action::BeginInPlace { to, reason, .. } => self.begin_in_place(*to, *reason, now),
            Action::SetInPlacePhase {
                phase,
                version,
                failure,
                ca_step,
                ..
            } => {
                let renewed = at.renewed_not_after_unix_s;
                let failure = failure.as_deref();
                self.set_in_place_phase(*phase, *version, failure, *ca_step, renewed, now)
            }
            Action::EndInPlace { outcome, .. } => self.end_in_place(outcome, now),
            _ => false,
        }
    }

    /// The record write of `Action::MarkDeleting`: the machine is leaving, with the
    /// remediation it leaves for, if any (kept on the record so that its replacement
    /// inherits the slot's retry count even if the process crashes in between). False if
    /// it was leaving already: its first reason stands.
    pub fn mark_deleting(&mut self, remediation: Option<&Remediation>) -> bool {
        if self.deleting {
            return false;
        }
        self.deleting = true;
        if let Some(r) = remediation {
            self.remediation = Some(r.clone());
        }
        true
    }
}
