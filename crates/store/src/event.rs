//! A control plane's history: what each event is (`EventKind`), how its step ended
//! (`StepOutcome`), and the record both backends keep.
//!
//! The kinds are stored as the strings every quorum release has written
//! (`add-learner`, ..., `converged`, `refused`, `error`, `lb-add`, ...), so a history
//! written by an older release reads as it was. A kind this release does not know (from
//! a newer one) is kept as written (`EventKind::Other`) rather than refused: the history
//! is for people reading what happened, and one unfamiliar entry must not hide all the
//! others (`quorum events` and `quorum status` would otherwise fail outright).

use quorum_core::ActionKind;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// What an event records.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A step of a decision; whether it was done, refused or failed is its
    /// `StepOutcome`.
    Action(ActionKind),
    /// The control plane reached its spec.
    Converged,
    /// The client endpoints published changed.
    Endpoints,
    /// A member entered (or re-entered) the load balancer's backend.
    LbAdd,
    /// A leaving member was set to drain in the load balancer.
    LbDrain,
    /// A member left the load balancer's backend.
    LbDelete,
    /// A machine's process entered a crash loop (it keeps exiting after its starts).
    CrashLoop,
    /// A member was seen with a problem (the health model's words).
    Unhealthy,
    /// A member's problems went away before it was replaced.
    Recovered,
    /// quorum refuses a step because it would be unsafe (the `Blocked` condition's
    /// message), recorded once per distinct refusal.
    Blocked,
    /// A problem that is not a step's (the load balancer cannot be driven). Releases
    /// before schema version 3 also wrote a failed step as `error`, without its kind.
    Error,
    /// A step etcd refused for now, as written before schema version 3, which records
    /// the step's own kind with the outcome `refused` instead.
    Refused,
    /// A controller replica took the lead from another (a failover, or a controller
    /// started again after it died): who, from whom.
    Takeover,
    /// A kind written by a newer release, kept as written.
    Other(UnknownKind),
}

/// The name of a kind this release does not know. Only parsing makes one, so it never
/// holds a name that `EventKind` has a variant for (and equality stays meaningful).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UnknownKind(String);

impl UnknownKind {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl EventKind {
    /// The stored name (`add-learner`, `converged`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            EventKind::Action(k) => k.as_str(),
            EventKind::Converged => "converged",
            EventKind::Endpoints => "endpoints",
            EventKind::LbAdd => "lb-add",
            EventKind::LbDrain => "lb-drain",
            EventKind::LbDelete => "lb-delete",
            EventKind::CrashLoop => "crash-loop",
            EventKind::Unhealthy => "unhealthy",
            EventKind::Recovered => "recovered",
            EventKind::Blocked => "blocked",
            EventKind::Error => "error",
            EventKind::Refused => "refused",
            EventKind::Takeover => "takeover",
            EventKind::Other(u) => u.as_str(),
        }
    }

    /// The kind stored as `name`; never fails (see `Other`).
    pub fn parse(name: &str) -> EventKind {
        if let Some(k) = ActionKind::from_name(name) {
            return EventKind::Action(k);
        }
        match name {
            "converged" => EventKind::Converged,
            "endpoints" => EventKind::Endpoints,
            "lb-add" => EventKind::LbAdd,
            "lb-drain" => EventKind::LbDrain,
            "lb-delete" => EventKind::LbDelete,
            "crash-loop" => EventKind::CrashLoop,
            "unhealthy" => EventKind::Unhealthy,
            "recovered" => EventKind::Recovered,
            "blocked" => EventKind::Blocked,
            "error" => EventKind::Error,
            "refused" => EventKind::Refused,
            "takeover" => EventKind::Takeover,
            other => EventKind::Other(UnknownKind(other.to_string())),
        }
    }

    /// The step's kind, for an event that records a step.
    pub fn action(&self) -> Option<ActionKind> {
        match self {
            EventKind::Action(k) => Some(*k),
            _ => None,
        }
    }
}

impl From<ActionKind> for EventKind {
    fn from(k: ActionKind) -> Self {
        EventKind::Action(k)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(EventKind::parse(&name))
    }
}

/// How the step an event records ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepOutcome {
    /// Done (an event that is not a step, such as `converged`, is always `ok`).
    Ok,
    /// etcd said no for now (its ~5 s membership check, a learner still catching up,
    /// an election): retried, expected to pass.
    Refused,
    /// It failed; retried with a longer backoff.
    Failed,
}

impl StepOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            StepOutcome::Ok => "ok",
            StepOutcome::Refused => "refused",
            StepOutcome::Failed => "failed",
        }
    }

    /// The outcome stored as `name`, if it is one this release knows.
    pub fn parse(name: &str) -> Option<StepOutcome> {
        [StepOutcome::Ok, StepOutcome::Refused, StepOutcome::Failed]
            .into_iter()
            .find(|o| o.as_str() == name)
    }

    /// The outcome of a record that has none of its own (written before schema version
    /// 3), or one this release does not know: `ok` says whether it was done, and a
    /// refusal was then written as the kind `refused`.
    pub fn implied(kind: &EventKind, ok: bool) -> StepOutcome {
        match (ok, kind) {
            (true, _) => StepOutcome::Ok,
            (false, EventKind::Refused) => StepOutcome::Refused,
            (false, _) => StepOutcome::Failed,
        }
    }

    /// The outcome stored (`None` in older records), else the one implied.
    pub(crate) fn read(stored: Option<&str>, kind: &EventKind, ok: bool) -> StepOutcome {
        stored
            .and_then(StepOutcome::parse)
            .unwrap_or_else(|| StepOutcome::implied(kind, ok))
    }
}

impl fmt::Display for StepOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a control plane's history: a step quorum took (or failed to take).
/// Serialised (by `quorum events -o json`) with the camelCase names of the other JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub id: i64,
    pub control_plane: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    pub kind: EventKind,
    /// The machine the event is about (the one allocated, for an allocation); `None`
    /// when it concerns none (an orphan member, the control plane as a whole).
    pub machine: Option<String>,
    pub message: String,
    /// `outcome == StepOutcome::Ok`, kept for readers of the JSON form.
    pub ok: bool,
    pub outcome: StepOutcome,
    /// How long the controller had been waiting before this step (time from the
    /// observation that still said "wait" to this action), when it had been waiting.
    pub waited_ms: Option<i64>,
    /// How long the step took.
    pub took_ms: Option<i64>,
    /// The controller replica (or CLI process) that wrote it; `None` for events written
    /// before quorum recorded it.
    pub by: Option<String>,
}

/// An event to append.
#[derive(Clone, Debug)]
pub struct NewEvent<'a> {
    pub kind: EventKind,
    pub outcome: StepOutcome,
    pub machine: Option<&'a str>,
    pub message: &'a str,
    pub waited_ms: Option<i64>,
    pub took_ms: Option<i64>,
    /// Who writes it: a controller's identity.
    pub by: Option<&'a str>,
}

impl<'a> NewEvent<'a> {
    /// An event of `kind` that ended with `outcome`, about no machine, untimed.
    pub fn new(kind: impl Into<EventKind>, outcome: StepOutcome, message: &'a str) -> Self {
        NewEvent {
            kind: kind.into(),
            outcome,
            machine: None,
            message,
            waited_ms: None,
            took_ms: None,
            by: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name any release has written reads back as its own variant and writes
    /// back byte for byte.
    #[test]
    fn every_stored_name_round_trips() {
        let mut names: Vec<&str> = ActionKind::ALL.iter().map(|k| k.as_str()).collect();
        names.extend([
            "converged",
            "endpoints",
            "lb-add",
            "lb-drain",
            "lb-delete",
            "error",
            "refused",
            "takeover",
        ]);
        for name in names {
            let k = EventKind::parse(name);
            assert!(!matches!(k, EventKind::Other(_)), "{name} is known");
            assert_eq!(k.as_str(), name);
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<EventKind>(&json).unwrap(), k);
        }
        assert_eq!(
            EventKind::parse("promote"),
            EventKind::Action(ActionKind::Promote)
        );
    }

    #[test]
    fn a_kind_from_a_newer_release_is_kept_as_written() {
        let k: EventKind = serde_json::from_str("\"snapshot-taken\"").unwrap();
        assert_eq!(k.as_str(), "snapshot-taken");
        assert!(matches!(k, EventKind::Other(_)));
        assert_eq!(serde_json::to_string(&k).unwrap(), "\"snapshot-taken\"");
        assert_eq!(k.action(), None);
    }

    #[test]
    fn old_records_imply_their_outcome() {
        let promote = EventKind::Action(ActionKind::Promote);
        let read = StepOutcome::read;
        assert_eq!(read(None, &promote, true), StepOutcome::Ok);
        assert_eq!(read(None, &EventKind::Refused, false), StepOutcome::Refused);
        assert_eq!(read(None, &EventKind::Error, false), StepOutcome::Failed);
        assert_eq!(read(Some("refused"), &promote, false), StepOutcome::Refused);
        // An outcome this release does not know falls back on `ok`.
        assert_eq!(read(Some("skipped"), &promote, false), StepOutcome::Failed);
        for o in [StepOutcome::Ok, StepOutcome::Refused, StepOutcome::Failed] {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{o}\""));
            assert_eq!(StepOutcome::parse(o.as_str()), Some(o));
        }
    }
}
