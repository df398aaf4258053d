//! The decision function: desired state + durable intent + a fresh observation in,
//! the next action(s) and the conditions to report out. Pure: no clock, no I/O.
//!
//! Rules, in priority order (the first that applies wins):
//! 1. teardown of a deleted control plane; a paused one does nothing;
//! 2. bootstrap: allocate the initial machines, then start them together;
//! 3. with no leader to ask: restart stopped members, else wait;
//! 4. restart a machine whose member exists but whose process is down;
//! 5. finish an add: start and promote a learner;
//! 6. finish a removal: a machine marked deleting hands off leadership, then its member,
//!    then its process, then its record;
//! 7. remove orphan members (no machine);
//! 8. a machine without a member: join it as a learner (never started) or replace it
//!    (it had data, so its member was removed behind quorum's back);
//! 9. scale up, scale down, roll out outdated machines (surge or remove first).
//!
//! Every membership change is preceded by a quorum projection in which every member
//! that is not provably healthy counts as unhealthy, and at most one membership change
//! is ever proposed by a decision.

use crate::model::*;
use crate::version::Version;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a started etcd joins: the initial bootstrap (`new`) or an existing cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterState {
    New,
    Existing,
}

/// One entry of `--initial-cluster`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InitialMember {
    pub name: String,
    pub peer_url: String,
}

/// Why a machine is being removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeleteReason {
    /// It runs another version than the spec.
    Outdated,
    /// There are more machines than replicas.
    ScaleDown,
    /// Its member is gone from the cluster (removed by someone else); it cannot rejoin
    /// with its old data, so it is replaced.
    MemberLost,
    /// Its certificates expire within `rollout.before.certificatesExpiry`.
    CertificatesExpiring,
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeleteReason::Outdated => "outdated version",
            DeleteReason::ScaleDown => "scale down",
            DeleteReason::MemberLost => "its member left the cluster",
            DeleteReason::CertificatesExpiring => "its certificates expire soon",
        })
    }
}

/// A side effect for the runtime to perform. Store writes (`AllocateMachine`,
/// `MarkDeleting`, `DeleteMachine`'s record removal, `ForgetControlPlane`) record intent;
/// the others act on etcd or on machines. Every action is idempotent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Record a new machine (name, address and peer URL are allocated by the runtime).
    AllocateMachine { bootstrap: bool, version: Version },
    /// Start the machine's etcd process.
    StartMachine {
        machine: String,
        state: ClusterState,
        initial_cluster: Vec<InitialMember>,
    },
    /// MemberAdd as a learner, with the machine's peer URL.
    AddLearner { machine: String, peer_url: String },
    /// Promote a caught-up learner to voter.
    Promote { machine: String, member_id: u64 },
    /// Record that the machine is leaving (before its member is removed).
    MarkDeleting {
        machine: String,
        reason: DeleteReason,
    },
    /// Move leadership from the current leader to another voter (sent to the leader).
    MoveLeader {
        from_member: u64,
        to_member: u64,
        to_machine: String,
    },
    /// MemberRemove. `machine` is `None` for an orphan member.
    RemoveMember {
        member_id: u64,
        machine: Option<String>,
    },
    /// Stop the machine's process gracefully.
    StopMachine { machine: String },
    /// Delete the machine (process, data) and then its record.
    DeleteMachine { machine: String },
    /// Teardown finished: forget the control plane.
    ForgetControlPlane,
}

impl Action {
    /// A change of etcd membership (of which at most one is ever in flight).
    pub fn is_membership_change(&self) -> bool {
        matches!(
            self,
            Action::AddLearner { .. } | Action::Promote { .. } | Action::RemoveMember { .. }
        )
    }

    /// The machine an action is about (the new leader's, for a leader move); `None` for
    /// an allocation, the teardown's end and an orphan member's removal.
    pub fn machine(&self) -> Option<&str> {
        match self {
            Action::StartMachine { machine, .. }
            | Action::AddLearner { machine, .. }
            | Action::Promote { machine, .. }
            | Action::MarkDeleting { machine, .. }
            | Action::StopMachine { machine }
            | Action::DeleteMachine { machine } => Some(machine),
            Action::MoveLeader { to_machine, .. } => Some(to_machine),
            Action::RemoveMember { machine, .. } => machine.as_deref(),
            Action::AllocateMachine { .. } | Action::ForgetControlPlane => None,
        }
    }

    /// What kind of step this is (for events, metrics and failpoints).
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::AllocateMachine { .. } => ActionKind::AllocateMachine,
            Action::StartMachine { .. } => ActionKind::StartMachine,
            Action::AddLearner { .. } => ActionKind::AddLearner,
            Action::Promote { .. } => ActionKind::Promote,
            Action::MarkDeleting { .. } => ActionKind::MarkDeleting,
            Action::MoveLeader { .. } => ActionKind::MoveLeader,
            Action::RemoveMember { .. } => ActionKind::RemoveMember,
            Action::StopMachine { .. } => ActionKind::StopMachine,
            Action::DeleteMachine { .. } => ActionKind::DeleteMachine,
            Action::ForgetControlPlane => ActionKind::ForgetControlPlane,
        }
    }
}

/// Declares `ActionKind` from one list, so that its variants, `ALL`, the kebab-case
/// names and their serde form cannot drift apart: a kind is added in one place.
macro_rules! action_kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)+) => {
        /// The kind of an `Action`, without its data. Its kebab-case name is what events,
        /// metrics and failpoints have always used (`add-learner`, ...): stored
        /// histories depend on it, so a name never changes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum ActionKind {
            $($(#[$doc])* #[serde(rename = $name)] $variant,)+
        }

        impl ActionKind {
            /// Every kind, in declaration order (failpoints and metrics enumerate it).
            pub const ALL: &'static [ActionKind] = &[$(ActionKind::$variant),+];

            /// The kebab-case name (`add-learner`, ...).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ActionKind::$variant => $name,)+
                }
            }
        }
    };
}

action_kinds! {
    AllocateMachine = "allocate-machine",
    StartMachine = "start-machine",
    AddLearner = "add-learner",
    Promote = "promote",
    MarkDeleting = "mark-deleting",
    MoveLeader = "move-leader",
    RemoveMember = "remove-member",
    StopMachine = "stop-machine",
    DeleteMachine = "delete-machine",
    ForgetControlPlane = "forget-control-plane",
}

impl ActionKind {
    /// The kind named `name` (its `as_str`), if there is one.
    pub fn from_name(name: &str) -> Option<ActionKind> {
        ActionKind::ALL.iter().copied().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::AllocateMachine { bootstrap, version } => {
                let what = if *bootstrap {
                    "initial machine"
                } else {
                    "machine"
                };
                write!(f, "allocate a new {what} (etcd {version})")
            }
            Action::StartMachine { machine, state, .. } => match state {
                ClusterState::New => write!(f, "start {machine} (new cluster)"),
                ClusterState::Existing => write!(f, "start {machine}"),
            },
            Action::AddLearner { machine, .. } => write!(f, "add {machine} as a learner"),
            Action::Promote { machine, .. } => write!(f, "promote {machine} to voter"),
            Action::MarkDeleting { machine, reason } => {
                write!(f, "mark {machine} for deletion ({reason})")
            }
            Action::MoveLeader { to_machine, .. } => {
                write!(f, "move leadership to {to_machine}")
            }
            Action::RemoveMember {
                machine: Some(m), ..
            } => write!(f, "remove the member of {m}"),
            Action::RemoveMember {
                member_id,
                machine: None,
            } => write!(f, "remove orphan member {member_id:x}"),
            Action::StopMachine { machine } => write!(f, "stop {machine}"),
            Action::DeleteMachine { machine } => write!(f, "delete {machine}"),
            Action::ForgetControlPlane => write!(f, "forget the control plane"),
        }
    }
}

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
    Deleting,
    Paused,
    /// No leader could be asked: nothing that needs one can happen.
    WaitingForQuorum,
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
            Operation::Deleting => "deleting",
            Operation::Paused => "paused",
            Operation::WaitingForQuorum => "waiting for quorum",
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

/// The next step for one control plane.
///
/// `machines` are the control plane's machine records (any order); `observed` must be
/// fresh: taken after the last action was performed.
pub fn decide(cp: &ControlPlane, machines: &[Machine], observed: &Observation) -> Decision {
    let view = View::new(cp, machines, observed);
    let mut step = view.next_step();
    debug_assert!(
        step.actions
            .iter()
            .filter(|a| a.is_membership_change())
            .count()
            <= 1,
        "a decision proposes at most one membership change"
    );
    let conditions = view.conditions(&step);
    let converged = step.actions.is_empty()
        && step.waiting_for.is_none()
        && conditions
            .iter()
            .filter(|c| c.kind != ConditionKind::VersionWarning)
            .all(|c| c.status == (c.kind != ConditionKind::Blocked));
    if converged {
        step.operation = Operation::Idle;
    }
    Decision {
        actions: step.actions,
        operation: step.operation,
        waiting_for: step.waiting_for,
        conditions,
        endpoints: view.endpoints(),
        converged,
        voters: view.voters().count(),
        healthy_voters: view.healthy_voters_except(None),
        machines: view.machine_health(),
    }
}

struct Step {
    actions: Vec<Action>,
    operation: Operation,
    waiting_for: Option<String>,
    blocked: bool,
}

impl Step {
    fn act(operation: Operation, action: Action) -> Step {
        Step {
            actions: vec![action],
            operation,
            waiting_for: None,
            blocked: false,
        }
    }
    fn wait(operation: Operation, why: impl Into<String>) -> Step {
        Step {
            actions: vec![],
            operation,
            waiting_for: Some(why.into()),
            blocked: false,
        }
    }
    fn refuse(operation: Operation, why: impl Into<String>) -> Step {
        Step {
            blocked: true,
            ..Step::wait(operation, why)
        }
    }
}

/// A machine with what was seen of it and its member, if any.
struct Seen<'a> {
    machine: &'a Machine,
    obs: Option<&'a MachineObservation>,
    member: Option<&'a Member>,
}

impl Seen<'_> {
    fn running(&self) -> bool {
        self.obs.is_some_and(|o| o.process == ProcessState::Running)
    }
    fn has_data(&self) -> bool {
        self.obs.is_some_and(|o| o.has_data)
    }
    fn status(&self) -> Option<&EndpointStatus> {
        self.obs.and_then(|o| o.status.as_ref())
    }
}

struct View<'a> {
    cp: &'a ControlPlane,
    /// Sorted by serial (oldest first).
    seen: Vec<Seen<'a>>,
    members: Option<&'a [Member]>,
    orphans: Vec<&'a Member>,
    leader_id: Option<u64>,
    now_unix_s: i64,
}

impl<'a> View<'a> {
    fn new(cp: &'a ControlPlane, machines: &'a [Machine], observed: &'a Observation) -> Self {
        let members = observed.members.as_deref();
        let mut seen: Vec<Seen<'a>> = machines
            .iter()
            .map(|m| {
                let peer = m.peer_url();
                Seen {
                    machine: m,
                    obs: observed.machines.get(&m.name),
                    member: members
                        .and_then(|ms| ms.iter().find(|mb| mb.peer_urls.contains(&peer))),
                }
            })
            .collect();
        seen.sort_by_key(|s| s.machine.serial);
        let orphans = members
            .map(|ms| {
                ms.iter()
                    .filter(|mb| {
                        !machines
                            .iter()
                            .any(|m| mb.peer_urls.contains(&m.peer_url()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let leader_id = observed.leader_id();
        View {
            cp,
            seen,
            members,
            orphans,
            leader_id,
            now_unix_s: observed.now_unix_s,
        }
    }

    fn spec(&self) -> &ControlPlaneSpec {
        &self.cp.spec
    }

    /// Why a machine must be replaced even though the count is right: it runs another
    /// version than the spec, or its certificates expire within the renewal window.
    fn outdated(&self, m: &Machine) -> Option<DeleteReason> {
        if m.version != self.spec().version {
            Some(DeleteReason::Outdated)
        } else if self.spec().certificates_due(m, self.now_unix_s) {
            Some(DeleteReason::CertificatesExpiring)
        } else {
            None
        }
    }

    fn voters(&self) -> impl Iterator<Item = &'a Member> + '_ {
        self.members.into_iter().flatten().filter(|m| !m.is_learner)
    }

    fn seen_of(&self, member: &Member) -> Option<&Seen<'a>> {
        self.seen
            .iter()
            .find(|s| s.member.is_some_and(|m| m.id == member.id))
    }

    /// Provably healthy: its own endpoint answered as this member, it knows a leader and
    /// has no alarm. A member without a machine (an orphan) cannot be proven healthy.
    fn healthy(&self, member: &Member) -> bool {
        self.seen_of(member)
            .and_then(|s| s.status())
            .is_some_and(|st| {
                st.member_id == member.id && st.leader_id != 0 && st.alarms.is_empty()
            })
    }

    /// Each machine's role and health, by the rule of `healthy`.
    fn machine_health(&self) -> Vec<MachineHealth> {
        self.seen
            .iter()
            .map(|s| {
                let role = match s.member {
                    None => Role::NoMember,
                    Some(m) if m.is_learner => Role::Learner,
                    Some(m) if Some(m.id) == self.leader_id => Role::Leader,
                    Some(_) => Role::Follower,
                };
                MachineHealth {
                    machine: s.machine.name.clone(),
                    role,
                    healthy: s.member.is_some_and(|m| self.healthy(m)),
                }
            })
            .collect()
    }

    fn healthy_voters_except(&self, except: Option<u64>) -> usize {
        self.voters()
            .filter(|m| Some(m.id) != except && self.healthy(m))
            .count()
    }

    /// Would the cluster keep a healthy majority if `remove` (a voter) left?
    fn safe_to_remove_voter(&self, remove: u64) -> Result<(), String> {
        let voters_after = self.voters().filter(|m| m.id != remove).count();
        let healthy_after = self.healthy_voters_except(Some(remove));
        if voters_after == 0 {
            return Err("removing it would leave no voting member".into());
        }
        if healthy_after < quorum_size(voters_after) {
            return Err(format!(
                "removing it would leave {healthy_after} healthy of {voters_after} voters, below the quorum of {}",
                quorum_size(voters_after)
            ));
        }
        Ok(())
    }

    /// Would the cluster keep a healthy majority with one more voter (the learner)?
    fn safe_to_promote(&self, learner: &Member) -> Result<(), String> {
        let voters_after = self.voters().count() + 1;
        let healthy_after = self.healthy_voters_except(None) + usize::from(self.healthy(learner));
        if healthy_after < quorum_size(voters_after) {
            return Err(format!(
                "promoting it would leave {healthy_after} healthy of {voters_after} voters, below the quorum of {}",
                quorum_size(voters_after)
            ));
        }
        Ok(())
    }

    /// Preflight for starting a membership change that is not already in flight: every
    /// member healthy, no alarm, no learner pending, nothing leaving.
    fn preflight(&self) -> Result<(), String> {
        for m in self.members.into_iter().flatten() {
            let name = self.name_of(m);
            if m.is_learner {
                return Err(format!("learner {name} is still pending"));
            }
            if let Some(st) = self.seen_of(m).and_then(|s| s.status()) {
                if !st.alarms.is_empty() {
                    return Err(format!(
                        "member {name} has alarms: {}",
                        st.alarms.join(", ")
                    ));
                }
            }
            if !self.healthy(m) {
                return Err(format!("member {name} is not healthy"));
            }
        }
        if let Some(s) = self.seen.iter().find(|s| s.machine.deleting) {
            return Err(format!("{} is still being deleted", s.machine.name));
        }
        Ok(())
    }

    fn name_of(&self, m: &Member) -> String {
        match self.seen_of(m) {
            Some(s) => s.machine.name.clone(),
            None if !m.name.is_empty() => m.name.clone(),
            None => format!("{:x}", m.id),
        }
    }

    fn next_step(&self) -> Step {
        if self.cp.deleting {
            return self.teardown();
        }
        if self.spec().paused {
            return Step::wait(
                Operation::Paused,
                format!(
                    "paused: quorum takes no step until `quorum pause {} --resume`",
                    self.cp.name
                ),
            );
        }
        if let Some(step) = self.bootstrap() {
            return step;
        }
        let Some(members) = self.members else {
            return self.without_leader();
        };
        self.restart_stopped()
            .or_else(|| self.finish_learner())
            .or_else(|| self.finish_deletion())
            .or_else(|| self.remove_orphan())
            .or_else(|| self.join_or_replace())
            .unwrap_or_else(|| self.reconcile_size(members))
    }

    fn teardown(&self) -> Step {
        if self.seen.is_empty() {
            return Step::act(Operation::Deleting, Action::ForgetControlPlane);
        }
        // Every machine goes: no quorum to protect. Stop the running ones first, then
        // delete them all.
        let actions: Vec<Action> = self
            .seen
            .iter()
            .map(|s| {
                let machine = s.machine.name.clone();
                if s.running() {
                    Action::StopMachine { machine }
                } else {
                    Action::DeleteMachine { machine }
                }
            })
            .collect();
        Step {
            actions,
            operation: Operation::Deleting,
            waiting_for: None,
            blocked: false,
        }
    }

    /// The initial cluster: allocate `replicas` machines (all before any starts, so the
    /// initial cluster is fixed), then start every one not yet running.
    fn bootstrap(&self) -> Option<Step> {
        if self.members.is_some() || self.seen.iter().any(|s| !s.machine.bootstrap) {
            return None;
        }
        let started = self.seen.iter().any(|s| s.running() || s.has_data());
        if !started && self.seen.len() < self.spec().replicas as usize {
            let missing = self.spec().replicas as usize - self.seen.len();
            let actions = (0..missing)
                .map(|_| Action::AllocateMachine {
                    bootstrap: true,
                    version: self.spec().version,
                })
                .collect();
            return Some(Step {
                actions,
                operation: Operation::Bootstrapping,
                waiting_for: None,
                blocked: false,
            });
        }
        if self.seen.is_empty() {
            return None;
        }
        let initial: Vec<InitialMember> = self
            .seen
            .iter()
            .map(|s| InitialMember {
                name: s.machine.name.clone(),
                peer_url: s.machine.peer_url(),
            })
            .collect();
        let actions: Vec<Action> = self
            .seen
            .iter()
            .filter(|s| !s.running())
            .map(|s| Action::StartMachine {
                machine: s.machine.name.clone(),
                state: ClusterState::New,
                initial_cluster: initial.clone(),
            })
            .collect();
        if actions.is_empty() {
            return Some(Step::wait(
                Operation::Bootstrapping,
                "waiting for the initial members to elect a leader",
            ));
        }
        Some(Step {
            actions,
            operation: Operation::Bootstrapping,
            waiting_for: None,
            blocked: false,
        })
    }

    /// No leader answered: membership cannot change. Restart members that were started
    /// before (their data makes `--initial-cluster` irrelevant); otherwise wait.
    fn without_leader(&self) -> Step {
        let actions: Vec<Action> = self
            .seen
            .iter()
            .filter(|s| !s.running() && s.has_data() && !s.machine.deleting)
            .map(|s| Action::StartMachine {
                machine: s.machine.name.clone(),
                state: ClusterState::Existing,
                initial_cluster: vec![],
            })
            .collect();
        if !actions.is_empty() {
            return Step {
                actions,
                operation: Operation::Repairing,
                waiting_for: None,
                blocked: false,
            };
        }
        if self.seen.is_empty() {
            return Step::wait(
                Operation::WaitingForQuorum,
                "no machine and no reachable member: nothing to bootstrap from",
            );
        }
        Step::wait(
            Operation::WaitingForQuorum,
            "no member answered as leader: waiting for a quorum of members",
        )
    }

    /// The member list of the running cluster, for `--initial-cluster` of a joining member.
    fn initial_cluster(&self) -> Vec<InitialMember> {
        let mut out = Vec::new();
        for m in self.members.into_iter().flatten() {
            let name = match self.seen_of(m) {
                Some(s) => s.machine.name.clone(),
                None => m.name.clone(),
            };
            for url in &m.peer_urls {
                out.push(InitialMember {
                    name: name.clone(),
                    peer_url: url.clone(),
                });
            }
        }
        out
    }

    /// A machine whose member exists but whose process is down: start it. This covers a
    /// learner that was added but not started yet and a member whose process died.
    fn restart_stopped(&self) -> Option<Step> {
        let s = self
            .seen
            .iter()
            .find(|s| s.member.is_some() && !s.running() && !s.machine.deleting)?;
        let fresh_bootstrap = s.machine.bootstrap && !s.has_data();
        let state = if fresh_bootstrap {
            ClusterState::New
        } else {
            ClusterState::Existing
        };
        let initial_cluster = if fresh_bootstrap {
            self.seen
                .iter()
                .filter(|o| o.machine.bootstrap)
                .map(|o| InitialMember {
                    name: o.machine.name.clone(),
                    peer_url: o.machine.peer_url(),
                })
                .collect()
        } else {
            self.initial_cluster()
        };
        let op = if s.member.is_some_and(|m| m.is_learner) {
            self.growth_operation()
        } else {
            Operation::Repairing
        };
        Some(Step::act(
            op,
            Action::StartMachine {
                machine: s.machine.name.clone(),
                state,
                initial_cluster,
            },
        ))
    }

    /// What adding a member is for: a rollout if anything is outdated, else scaling up.
    fn growth_operation(&self) -> Operation {
        if self.seen.iter().any(|s| self.outdated(s.machine).is_some()) {
            Operation::RollingOut
        } else {
            Operation::ScalingUp
        }
    }

    fn shrink_operation(&self) -> Operation {
        if self.seen.iter().any(|s| self.outdated(s.machine).is_some()) {
            Operation::RollingOut
        } else {
            Operation::ScalingDown
        }
    }

    /// A learner of a live machine is promoted once it has caught up.
    fn finish_learner(&self) -> Option<Step> {
        let s = self
            .seen
            .iter()
            .find(|s| s.member.is_some_and(|m| m.is_learner) && !s.machine.deleting)?;
        let learner = s.member?;
        let op = self.growth_operation();
        let name = &s.machine.name;
        let Some(st) = s.status() else {
            return Some(Step::wait(
                op,
                format!("waiting for learner {name} to answer"),
            ));
        };
        let Some(leader) = self.leader_status() else {
            return Some(Step::wait(
                op,
                "waiting for a leader to compare the learner with",
            ));
        };
        // etcd promotes a learner whose log is at 90% of the leader's or more; asking
        // earlier only earns a refusal.
        if st.raft_applied_index.saturating_mul(10) < leader.raft_index.saturating_mul(9) {
            return Some(Step::wait(
                op,
                format!(
                    "waiting for learner {name} to catch up ({} of {})",
                    st.raft_applied_index, leader.raft_index
                ),
            ));
        }
        if let Err(why) = self.safe_to_promote(learner) {
            return Some(Step::refuse(op, format!("not promoting {name}: {why}")));
        }
        Some(Step::act(
            op,
            Action::Promote {
                machine: name.clone(),
                member_id: learner.id,
            },
        ))
    }

    fn leader_status(&self) -> Option<&EndpointStatus> {
        let id = self.leader_id?;
        self.seen
            .iter()
            .filter_map(|s| s.status())
            .find(|st| st.member_id == id)
    }

    /// The voter to hand leadership to: healthy, not leaving; one at the spec's version
    /// first (it will not have to hand leadership on again), and among those the oldest.
    /// The oldest has been connected to its peers longest: a leader whose connection to
    /// a voter is younger than etcd's 5 s health interval refuses membership changes
    /// ("unhealthy cluster"), so the newest member would stall the next step.
    fn transferee(&self, from: u64) -> Option<(&Member, &Machine)> {
        self.seen
            .iter()
            .filter(|s| !s.machine.deleting)
            .filter_map(|s| s.member.map(|m| (m, s.machine)))
            .filter(|(m, _)| !m.is_learner && m.id != from && self.healthy(m))
            .min_by_key(|(_, machine)| (self.outdated(machine).is_some(), machine.serial))
    }

    fn move_leader_off(&self, op: Operation, member: &Member, label: &str) -> Step {
        match self.transferee(member.id) {
            Some((to, machine)) => Step::act(
                op,
                Action::MoveLeader {
                    from_member: member.id,
                    to_member: to.id,
                    to_machine: machine.name.clone(),
                },
            ),
            None => Step::refuse(
                op,
                format!("{label} leads and no healthy voter can take over leadership"),
            ),
        }
    }

    /// A machine marked deleting: leadership off it, member removed, process stopped,
    /// record deleted. Its absence from the member list is the sign the removal happened,
    /// even if nothing recorded it (the crash of the origin bug report).
    fn finish_deletion(&self) -> Option<Step> {
        let s = self.seen.iter().find(|s| s.machine.deleting)?;
        let op = self.shrink_operation();
        let name = s.machine.name.clone();
        let Some(member) = s.member else {
            return Some(if s.running() {
                Step::act(op, Action::StopMachine { machine: name })
            } else {
                Step::act(op, Action::DeleteMachine { machine: name })
            });
        };
        if member.is_learner {
            return Some(Step::act(
                op,
                Action::RemoveMember {
                    member_id: member.id,
                    machine: Some(name),
                },
            ));
        }
        if self.leader_id == Some(member.id) {
            return Some(self.move_leader_off(op, member, &name));
        }
        if let Err(why) = self.safe_to_remove_voter(member.id) {
            return Some(Step::refuse(op, format!("not removing {name}: {why}")));
        }
        Some(Step::act(
            op,
            Action::RemoveMember {
                member_id: member.id,
                machine: Some(name),
            },
        ))
    }

    /// A member that matches no machine: remove it (learners freely, voters only when
    /// the projection allows, leaders after moving leadership).
    fn remove_orphan(&self) -> Option<Step> {
        let orphan = *self.orphans.first()?;
        let op = Operation::Repairing;
        let label = format!("orphan member {}", self.name_of(orphan));
        if !orphan.is_learner {
            if self.leader_id == Some(orphan.id) {
                return Some(self.move_leader_off(op, orphan, &label));
            }
            if let Err(why) = self.safe_to_remove_voter(orphan.id) {
                return Some(Step::refuse(op, format!("not removing {label}: {why}")));
            }
        }
        Some(Step::act(
            op,
            Action::RemoveMember {
                member_id: orphan.id,
                machine: None,
            },
        ))
    }

    /// A live machine without a member: join it if it never ran, replace it if it did.
    fn join_or_replace(&self) -> Option<Step> {
        let s = self
            .seen
            .iter()
            .find(|s| s.member.is_none() && !s.machine.deleting)?;
        let name = s.machine.name.clone();
        if s.has_data() {
            return Some(Step::act(
                Operation::Repairing,
                Action::MarkDeleting {
                    machine: name,
                    reason: DeleteReason::MemberLost,
                },
            ));
        }
        let op = self.growth_operation();
        if s.running() {
            // A process without data and without a member cannot be ours to join: it
            // would have been started only after the add. Stop it and join cleanly.
            return Some(Step::act(op, Action::StopMachine { machine: name }));
        }
        if let Err(why) = self.preflight() {
            return Some(Step::wait(op, format!("not adding {name} yet: {why}")));
        }
        Some(Step::act(
            op,
            Action::AddLearner {
                peer_url: s.machine.peer_url(),
                machine: name,
            },
        ))
    }

    /// Everything is settled (every machine has a voting member, nothing leaving): bring
    /// the count to `replicas` and every machine to the spec's version.
    fn reconcile_size(&self, members: &[Member]) -> Step {
        let spec = self.spec();
        let replicas = spec.replicas as usize;
        let active = self.seen.len();
        let outdated: Vec<&Seen> = self
            .seen
            .iter()
            .filter(|s| self.outdated(s.machine).is_some())
            .collect();
        if active < replicas {
            return self.allocate(self.growth_operation());
        }
        if active > replicas {
            return self.mark_victim(self.shrink_operation(), members);
        }
        if outdated.is_empty() {
            return Step {
                actions: vec![],
                operation: Operation::Idle,
                waiting_for: None,
                blocked: false,
            };
        }
        if spec.rollout.max_surge >= 1 {
            return self.allocate(Operation::RollingOut);
        }
        self.mark_victim(Operation::RollingOut, members)
    }

    fn allocate(&self, op: Operation) -> Step {
        if let Err(why) = self.preflight() {
            return Step::wait(op, format!("not adding a machine yet: {why}"));
        }
        Step::act(
            op,
            Action::AllocateMachine {
                bootstrap: false,
                version: self.spec().version,
            },
        )
    }

    /// Choose the machine to remove (outdated first, followers before the leader,
    /// oldest first) and record the intent, if removing it keeps quorum.
    fn mark_victim(&self, op: Operation, _members: &[Member]) -> Step {
        let spec = self.spec();
        let victim = self.seen.iter().min_by_key(|s| {
            let up_to_date = self.outdated(s.machine).is_none();
            let leads = s.member.is_some_and(|m| Some(m.id) == self.leader_id);
            (up_to_date, leads, s.machine.serial)
        });
        let Some(victim) = victim else {
            return Step::wait(op, "no machine to remove");
        };
        let Some(member) = victim.member else {
            return Step::wait(op, format!("{} has no member yet", victim.machine.name));
        };
        if let Err(why) = self.preflight() {
            return Step::wait(
                op,
                format!("not removing {} yet: {why}", victim.machine.name),
            );
        }
        if let Err(why) = self.safe_to_remove_voter(member.id) {
            let hint = if spec.rollout.max_surge == 0 && self.seen.len() <= spec.replicas as usize {
                " (with maxSurge 0 a control plane needs 3 or more replicas; use maxSurge 1)"
            } else {
                ""
            };
            return Step::refuse(
                op,
                format!("not removing {}: {why}{hint}", victim.machine.name),
            );
        }
        let reason = self
            .outdated(victim.machine)
            .unwrap_or(DeleteReason::ScaleDown);
        Step::act(
            op,
            Action::MarkDeleting {
                machine: victim.machine.name.clone(),
                reason,
            },
        )
    }

    fn conditions(&self, step: &Step) -> Vec<Condition> {
        let spec = self.spec();
        let voters = self.voters().count();
        let healthy_voters = self.healthy_voters_except(None);
        let available =
            self.members.is_some() && voters > 0 && healthy_voters >= quorum_size(voters);
        let unhealthy: Vec<String> = self
            .members
            .into_iter()
            .flatten()
            .filter(|m| !self.healthy(m))
            .map(|m| self.name_of(m))
            .collect();
        let outdated: Vec<String> = self
            .seen
            .iter()
            .filter_map(|s| match self.outdated(s.machine)? {
                DeleteReason::CertificatesExpiring => {
                    Some(format!("{} (certificates expire soon)", s.machine.name))
                }
                _ => Some(format!("{} ({})", s.machine.name, s.machine.version)),
            })
            .collect();
        let learners = self
            .members
            .into_iter()
            .flatten()
            .filter(|m| m.is_learner)
            .count();
        let leaving = self.seen.iter().filter(|s| s.machine.deleting).count();
        let scaled = voters == spec.replicas as usize
            && self.seen.len() == spec.replicas as usize
            && learners == 0
            && leaving == 0
            && self.orphans.is_empty();
        let mut out = vec![
            Condition {
                kind: ConditionKind::Available,
                status: available,
                message: if self.members.is_none() {
                    "no member answered as leader".into()
                } else {
                    format!(
                        "{healthy_voters} of {voters} voters healthy (quorum {})",
                        quorum_size(voters)
                    )
                },
            },
            Condition {
                kind: ConditionKind::Healthy,
                status: self.members.is_some() && unhealthy.is_empty(),
                message: if self.members.is_none() {
                    "member health unknown".into()
                } else if unhealthy.is_empty() {
                    "every member healthy".into()
                } else {
                    format!("not healthy: {}", unhealthy.join(", "))
                },
            },
            Condition {
                kind: ConditionKind::UpToDate,
                status: outdated.is_empty() && !self.seen.is_empty(),
                message: if self.seen.is_empty() {
                    "no machine yet".into()
                } else if outdated.is_empty() {
                    format!("every machine runs {}", spec.version)
                } else {
                    format!("to replace: {}", outdated.join(", "))
                },
            },
            Condition {
                kind: ConditionKind::Scaled,
                status: scaled,
                message: format!(
                    "{}, {}, {} ({leaving} leaving), {} wanted",
                    counted(voters, "voter"),
                    counted(learners, "learner"),
                    counted(self.seen.len(), "machine"),
                    spec.replicas
                ),
            },
            Condition {
                kind: ConditionKind::Blocked,
                status: step.blocked,
                message: if step.blocked {
                    step.waiting_for.clone().unwrap_or_default()
                } else {
                    "nothing refused".into()
                },
            },
        ];
        if spec.version.has_known_data_inconsistency_bug() {
            out.push(Condition {
                kind: ConditionKind::VersionWarning,
                status: true,
                message: format!(
                    "etcd {} has a known data inconsistency bug (fixed in 3.5.3); plan to move to 3.5.3 or later",
                    spec.version
                ),
            });
        }
        out
    }

    /// The URLs clients should use: machines that are not leaving, whose member votes
    /// and is healthy. A learner never appears here (it refuses client requests).
    fn endpoints(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter(|s| !s.machine.deleting)
            .filter(|s| s.member.is_some_and(|m| !m.is_learner && self.healthy(m)))
            .map(|s| s.machine.client_url())
            .collect()
    }
}

/// "1 voter", "3 voters": a count and its noun, agreeing.
fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
