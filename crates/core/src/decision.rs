//! What a decision says besides its actions: the operation under way, the conditions,
//! each machine's role and health as the rules judge them, and the client endpoints.

use crate::action::Action;
use crate::model::quorum_size;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What the control plane is doing, as a user would name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    Idle,
    Bootstrapping,
    ScalingUp,
    ScalingDown,
    RollingOut,
    Repairing,
    /// Space upkeep: compaction, defragmentation, an alarm disarmed, a marker written.
    Maintaining,
    Deleting,
    Paused,
    /// No leader could be asked: nothing that needs one can happen.
    WaitingForQuorum,
    /// A confirmed restore from a snapshot is under way (`quorum restore`).
    Restoring,
    /// A confirmed recovery from a surviving member is under way (`quorum recover`).
    Recovering,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Idle => "idle",
            Operation::Bootstrapping => "bootstrapping",
            Operation::ScalingUp => "scaling up",
            Operation::ScalingDown => "scaling down",
            Operation::RollingOut => "rolling out",
            Operation::Repairing => "repairing",
            Operation::Maintaining => "maintaining",
            Operation::Deleting => "deleting",
            Operation::Paused => "paused",
            Operation::WaitingForQuorum => "waiting for quorum",
            Operation::Restoring => "restoring",
            Operation::Recovering => "recovering",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConditionKind {
    /// A quorum of voters is healthy: the cluster serves clients.
    Available,
    /// Every member is healthy (reachable, has a leader, no alarm).
    Healthy,
    /// Every machine runs the spec's version.
    UpToDate,
    /// There are exactly `replicas` voters and nothing else in flight.
    Scaled,
    /// quorum refuses a step because it would be unsafe; the message says why.
    Blocked,
    /// The spec's version has a known defect.
    VersionWarning,
    /// Some member has a problem now (the message names each, with since when); it
    /// is remediated once the problem has held for `remediation.unhealthyAfter`.
    Degraded,
    /// A failed member is being replaced.
    Remediating,
    /// The control plane's HAProxy answers on its runtime API and its backend serves
    /// exactly the client endpoints. The decision never sees HAProxy, so `decide` does
    /// not set it: `status` adds it from a read-only look at the backend.
    HaproxyInStep,
    /// The newest snapshot's last test restore failed (the message says why): there
    /// may be no way back. Present only then.
    SnapshotRestoreFailed,
    /// A majority of the voters has been lost for `remediation.unhealthyAfter`: quorum
    /// cannot repair it alone. The message names the most up-to-date survivor and the
    /// newest verified snapshot, with the command for each way back. Present only then.
    QuorumLost,
}

impl ConditionKind {
    /// Whether `status: true` is the good state (Available, Healthy...) rather than the
    /// bad one (Blocked, Degraded, Remediating, VersionWarning).
    pub fn good_when_true(self) -> bool {
        !matches!(
            self,
            ConditionKind::Blocked
                | ConditionKind::Degraded
                | ConditionKind::Remediating
                | ConditionKind::VersionWarning
                | ConditionKind::SnapshotRestoreFailed
                | ConditionKind::QuorumLost
        )
    }

    /// A warning to read, not a reason to act: it never keeps a decision from being
    /// converged (there is nothing quorum can do about it on its own).
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            ConditionKind::VersionWarning | ConditionKind::SnapshotRestoreFailed
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub kind: ConditionKind,
    pub status: bool,
    pub message: String,
}

/// The role of a machine's member, as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Leader,
    Follower,
    Learner,
    /// No member (not joined yet, or removed), or no leader answered with the list.
    #[serde(rename = "none")]
    NoMember,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Learner => "learner",
            Role::NoMember => "none",
        })
    }
}

/// One machine as the decision judged it. Readers (`status`, `list`, the benchmarks)
/// show this rather than a rule of their own, so what they call healthy is exactly
/// what gates every membership change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineHealth {
    pub machine: String,
    pub role: Role,
    /// Provably healthy: its member's own endpoint answered as that member, it knows a
    /// leader and has no alarm. A machine without a member is never healthy.
    pub healthy: bool,
    /// What is wrong with it now, in words ("unreachable", "lost its data"); empty when
    /// nothing is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Since when (Unix seconds) it has had a problem without a break, as the
    /// controller remembers it (`None` for a reader that keeps no memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_since_unix_s: Option<i64>,
}

/// The outcome of one decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// To perform in order; the runtime stops at the first failure and observes again.
    pub actions: Vec<Action>,
    pub operation: Operation,
    /// When there is no action: what quorum is waiting for, or why it refuses, as a
    /// sentence of its own ("waiting for learner prod-4 to answer", "not removing prod-2:
    /// …"); readers print it as it is, after the operation.
    pub waiting_for: Option<String>,
    /// With actions: why the first was decided, where its name alone does not say (a
    /// learner stopped to be started again, `publish`); the controller adds it to that
    /// action's event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub because: Option<String>,
    pub conditions: Vec<Condition>,
    /// Client URLs clients should use: voting, healthy, not deleting.
    pub endpoints: Vec<String>,
    /// Nothing to do and nothing to wait for: the spec is met.
    pub converged: bool,
    /// Voting members (0 when no leader could be asked).
    pub voters: usize,
    /// Voters that are provably healthy.
    pub healthy_voters: usize,
    /// Every machine (oldest first): its member's role and health.
    pub machines: Vec<MachineHealth>,
}

/// How a control plane serves (`Decision::health`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Degraded,
    Unavailable,
}

impl Health {
    pub fn name(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::Unavailable => "unavailable",
        }
    }
}

/// A control plane's state as a fleet counts it (`Decision::fleet_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetState {
    /// Nothing to do: every machine at the spec, every member healthy.
    Converged,
    /// A change in progress (a rollout, a scale, a repair) and nothing wrong.
    Rolling,
    /// Some member has a problem, or no quorum of voters is healthy.
    Degraded,
    /// quorum refuses a step, or quorum is lost: a person is needed.
    Blocked,
}

impl FleetState {
    pub const ALL: [FleetState; 4] = [
        FleetState::Converged,
        FleetState::Rolling,
        FleetState::Degraded,
        FleetState::Blocked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FleetState::Converged => "converged",
            FleetState::Rolling => "rolling",
            FleetState::Degraded => "degraded",
            FleetState::Blocked => "blocked",
        }
    }
}

impl Decision {
    /// Healthy voters minus the quorum size: 0 means one more failure loses quorum;
    /// below 0 quorum is lost (or unknown: no leader could be asked).
    pub fn quorum_margin(&self) -> i64 {
        if self.voters == 0 {
            return -1;
        }
        self.healthy_voters as i64 - quorum_size(self.voters) as i64
    }
}

impl Decision {
    pub fn condition(&self, kind: ConditionKind) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    pub fn is_blocked(&self) -> bool {
        self.condition(ConditionKind::Blocked)
            .is_some_and(|c| c.status)
    }

    /// How the control plane serves, in a word (`quorum list`'s HEALTH): unavailable
    /// without a healthy quorum of voters; degraded while some member has a problem
    /// (the `Degraded` condition); healthy otherwise. A learner still joining is no
    /// problem yet, so a rollout reads healthy while its voters are.
    pub fn health(&self) -> Health {
        let on = |k| self.condition(k).is_some_and(|c| c.status);
        if !on(ConditionKind::Available) {
            Health::Unavailable
        } else if on(ConditionKind::Degraded) {
            Health::Degraded
        } else {
            Health::Healthy
        }
    }

    /// Where the control plane stands, in the four words a fleet is counted by
    /// (`quorum_control_planes{state}`). A refusal outranks a problem, and a problem
    /// outranks work in progress: what needs a person comes first.
    pub fn fleet_state(&self) -> FleetState {
        let on = |k| self.condition(k).is_some_and(|c| c.status);
        if self.is_blocked() || on(ConditionKind::QuorumLost) {
            FleetState::Blocked
        } else if self.health() != Health::Healthy {
            FleetState::Degraded
        } else if self.converged {
            FleetState::Converged
        } else {
            FleetState::Rolling
        }
    }

    /// How the decision judged `machine` (`None` for a machine it was not given).
    pub fn machine(&self, machine: &str) -> Option<&MachineHealth> {
        self.machines.iter().find(|m| m.machine == machine)
    }

    /// The machine whose member leads, when a leader answered.
    pub fn leader(&self) -> Option<&str> {
        self.machines
            .iter()
            .find(|m| m.role == Role::Leader)
            .map(|m| m.machine.as_str())
    }
}
