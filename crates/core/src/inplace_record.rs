//! An in-place step's record: its types, and the writes of it every driver performs
//! (the controller, the simulator, the model check) so that none has a copy.
//!
//! Invariant: the record is written before each side effect of the step, and a
//! person's restart request (`Machine::requested`) is handed to the step, or answered
//! by its end, in the same write: a crash leaves the request or the step, never both
//! and never neither.

use crate::action::{DeleteReason, InPlaceOutcome};
use crate::model::{CaStep, Machine, MachineRequest};
use crate::version::Version;
use serde::{Deserialize, Serialize};
use std::fmt;

/// An in-place step of one machine, recorded before each of its side effects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlace {
    /// The binary it ran when the step began.
    pub from: Version,
    /// The binary it moves to (the spec's version when the step began; the same as
    /// `from` for a certificate renewal).
    pub to: Version,
    pub phase: InPlacePhase,
    /// When this phase was recorded (Unix seconds): the restart's deadline counts from it.
    pub since_unix_s: i64,
    /// Why the step was taken.
    pub reason: DeleteReason,
    /// Why it was rolled back (phases `RollingBack` and `RolledBack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// Where an in-place step is. The machine record's `version` is the binary its next
/// start uses: `from` while draining and rolling back, `to` while restarting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InPlacePhase {
    /// Out of the endpoints; leadership moves off it; then it is stopped.
    Draining,
    /// Stopped and recorded on the new binary: started, then waited on until it reports
    /// the new version, is healthy and has caught up.
    Restarting,
    /// It did not come up in time: recorded back on the previous binary, stopped if the
    /// new one runs, started on the old one.
    RollingBack,
    /// Back and healthy on the previous binary: the rollout stops here until the user
    /// retries or chooses another version.
    RolledBack,
}

impl InPlacePhase {
    /// Whether the machine is out of the client endpoints in this phase.
    pub fn out_of_service(self) -> bool {
        !matches!(self, InPlacePhase::RolledBack)
    }
}

impl fmt::Display for InPlacePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InPlacePhase::Draining => "draining",
            InPlacePhase::Restarting => "restarting",
            InPlacePhase::RollingBack => "rolling back",
            InPlacePhase::RolledBack => "rolled back",
        })
    }
}

impl Machine {
    /// The record write of `Action::BeginInPlace`, the same for every driver: false
    /// (nothing written, already done) while a step is under way or it is leaving. A
    /// restart a person asked for becomes this step in the same write, so a crash
    /// leaves the request or the step, never both and never neither.
    pub fn begin_in_place(&mut self, to: Version, reason: DeleteReason, now_unix_s: i64) -> bool {
        if self.in_place.is_some() || self.deleting {
            return false;
        }
        self.in_place = Some(InPlace {
            from: self.version,
            to,
            phase: InPlacePhase::Draining,
            since_unix_s: now_unix_s,
            reason,
            failure: None,
        });
        if self.requested == Some(MachineRequest::Restart) {
            self.requested = None;
        }
        true
    }

    /// The record write of `Action::SetInPlacePhase`, the same for every driver: false
    /// (nothing written, already done) without a step, or in `phase` already. The
    /// record moves to the phase's binary (`version`); a CA rotation's step records the
    /// CA files its start uses (TLS machines only); a restart gets certificates that end
    /// at `renewed_not_after_unix_s` (`CertificatesSpec::not_after_unix_s`, from the CA
    /// in force), where the machine has certificates: how an in-place renewal renews.
    pub fn set_in_place_phase(
        &mut self,
        phase: InPlacePhase,
        version: Version,
        failure: Option<&str>,
        ca_step: Option<CaStep>,
        renewed_not_after_unix_s: Option<i64>,
        now_unix_s: i64,
    ) -> bool {
        let Some(ip) = self.in_place.as_mut().filter(|ip| ip.phase != phase) else {
            return false;
        };
        ip.phase = phase;
        ip.since_unix_s = now_unix_s;
        if let Some(f) = failure {
            ip.failure = Some(f.to_string());
        }
        self.version = version;
        if let (Some(step), true) = (ca_step, self.tls) {
            self.ca_step = Some(step);
        }
        let renewed = renewed_not_after_unix_s.filter(|_| phase == InPlacePhase::Restarting);
        if let (Some(t), Some(_)) = (renewed, self.certificates_not_after_unix_s) {
            self.certificates_not_after_unix_s = Some(t);
        }
        true
    }

    /// The record write of `Action::EndInPlace`, the same for every driver: false
    /// (nothing written, already done) without a step, or one already rolled back. A
    /// step that restarted the member (done, or rolled back: restarted twice) also
    /// answers a restart a person asked for meanwhile; one abandoned before its stop
    /// restarted nothing, and leaves the request.
    pub fn end_in_place(&mut self, outcome: &InPlaceOutcome, now_unix_s: i64) -> bool {
        let Some(ip) = self.in_place.as_mut() else {
            return false;
        };
        let restarted = match outcome {
            InPlaceOutcome::RolledBack if ip.phase == InPlacePhase::RolledBack => return false,
            InPlaceOutcome::RolledBack => {
                ip.phase = InPlacePhase::RolledBack;
                ip.since_unix_s = now_unix_s;
                true
            }
            InPlaceOutcome::Done => {
                self.in_place = None;
                true
            }
            InPlaceOutcome::Abandoned => {
                self.in_place = None;
                false
            }
        };
        if restarted && self.requested == Some(MachineRequest::Restart) {
            self.requested = None;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CaPhase;

    const OLD: Version = Version::new(3, 5, 0);
    const NEW: Version = Version::new(3, 5, 1);

    fn draining(tls: bool, not_after: Option<i64>) -> Machine {
        let mut m = Machine {
            requested: None,
            name: "m-1".into(),
            serial: 1,
            address: std::net::Ipv4Addr::new(198, 18, 0, 1),
            version: OLD,
            bootstrap: true,
            deleting: false,
            tls,
            certificates_not_after_unix_s: not_after,
            remediation: None,
            in_place: None,
            ca_step: None,
            placement: None,
        };
        assert!(m.begin_in_place(NEW, DeleteReason::Outdated, 100));
        m
    }

    /// The simulator once recorded a restart without renewing the certificate dates the
    /// controller renewed: one write now, for every driver.
    #[test]
    fn a_restart_renews_the_certificates_and_records_the_phase_binary() {
        let mut m = draining(true, Some(1_000));
        let step = CaStep {
            generation: 1,
            phase: CaPhase::Trust,
        };
        let restarting = InPlacePhase::Restarting;
        assert!(m.set_in_place_phase(restarting, NEW, None, Some(step), Some(9_000), 200));
        assert_eq!(m.certificates_not_after_unix_s, Some(9_000));
        assert_eq!((m.version, m.ca_step), (NEW, Some(step)));
        let ip = m.in_place.clone().expect("a step");
        assert_eq!(
            (ip.phase, ip.since_unix_s, ip.failure),
            (restarting, 200, None)
        );
        // Already there: nothing written.
        assert!(!m.set_in_place_phase(restarting, NEW, None, None, Some(9_999), 300));
        assert_eq!(m.certificates_not_after_unix_s, Some(9_000));
        // Rolling back keeps the dates, records why, and the previous binary.
        let back = InPlacePhase::RollingBack;
        assert!(m.set_in_place_phase(back, OLD, Some("not serving"), None, Some(9_999), 400));
        assert_eq!(m.certificates_not_after_unix_s, Some(9_000));
        assert_eq!(m.version, OLD);
        assert_eq!(
            m.in_place.and_then(|ip| ip.failure).as_deref(),
            Some("not serving")
        );
    }

    #[test]
    fn a_plaintext_machine_gets_no_dates_or_ca_files() {
        let mut m = draining(false, None);
        let step = CaStep {
            generation: 1,
            phase: CaPhase::Trust,
        };
        let restarting = InPlacePhase::Restarting;
        assert!(m.set_in_place_phase(restarting, NEW, None, Some(step), Some(9_000), 200));
        assert_eq!((m.certificates_not_after_unix_s, m.ca_step), (None, None));
        let mut none = draining(true, Some(1));
        none.in_place = None;
        assert!(!none.set_in_place_phase(restarting, NEW, None, None, Some(9), 200));
    }
}
