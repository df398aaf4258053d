//! An in-place step's record: its types, and the two writes of it every driver
//! performs (the controller, the simulator, the model check) so that none has a copy.
//!
//! Invariant: the record is written before each side effect of the step, and a
//! person's restart request (`Machine::requested`) is handed to the step, or answered
//! by its end, in the same write: a crash leaves the request or the step, never both
//! and never neither.

use crate::action::{DeleteReason, InPlaceOutcome};
use crate::model::{Machine, MachineRequest};
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
