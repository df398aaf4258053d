//! A controller's sign of life as the store keeps it.

use crate::Result;
use serde::{Deserialize, Serialize};

/// A controller's sign of life: who, when (ms since the Unix epoch), and the step it is
/// in the middle of, if any (so a reader can tell "busy for 8 s" from "dead").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub identity: String,
    pub at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepInProgress>,
}

/// A step a controller has started and not finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepInProgress {
    pub control_plane: String,
    /// The step as the controller describes it (`remove member 3a1f… (prod-2)`).
    pub description: String,
    /// When it started, in ms since the Unix epoch.
    pub since_ms: i64,
}

impl Heartbeat {
    /// The stored form: JSON.
    pub(crate) fn encode(&self) -> String {
        // A struct of strings and integers always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the stored form: JSON, or `"<at_ms> <identity>"` as quorum wrote it before
    /// heartbeats said which step was in progress.
    pub(crate) fn decode(text: &str) -> Option<Heartbeat> {
        if let Ok(beat) = serde_json::from_str::<Heartbeat>(text) {
            return Some(beat);
        }
        let (at, identity) = text.split_once(' ')?;
        Some(Heartbeat {
            identity: identity.to_string(),
            at_ms: at.parse().ok()?,
            step: None,
        })
    }
}

/// Records heartbeats from a thread of the controller's own (see
/// `StateStore::heartbeat_writer`). Each call is bounded like every store call.
pub trait HeartbeatWriter: Send {
    fn beat(&mut self, beat: &Heartbeat) -> Result<()>;
}
