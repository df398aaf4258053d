//! What the decision asks the runtime to do: `Action`s, their kinds (`ActionKind`,
//! the names every crash point, metric and event uses), and the words each is shown in.

use crate::model::{CaPhase, CaStep, DataMarker, InPlacePhase, RebuildPhase, Remediation};
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
    /// It has been unhealthy for `remediation.unhealthyAfter`: it is replaced.
    Unhealthy,
    /// Its CA files are not those of the CA rotation's phase: it is restarted (in
    /// place) or replaced with them.
    CaRotation,
    /// A person asked for it (`quorum member replace|restart`).
    Requested,
}

impl DeleteReason {
    /// A reason to restart a machine on the binary it has (new certificates or CA
    /// files), not to change its version.
    pub fn keeps_version(self) -> bool {
        matches!(
            self,
            DeleteReason::CertificatesExpiring | DeleteReason::CaRotation | DeleteReason::Requested
        )
    }
}

impl fmt::Display for DeleteReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeleteReason::Outdated => "outdated version",
            DeleteReason::ScaleDown => "scale down",
            DeleteReason::MemberLost => "its member left the cluster",
            DeleteReason::CertificatesExpiring => "its certificates expire soon",
            DeleteReason::Unhealthy => "remediation",
            DeleteReason::CaRotation => "CA rotation",
            DeleteReason::Requested => "asked for by `quorum member`",
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
    /// `remediation`: it replaces a remediated machine and inherits the slot's count.
    AllocateMachine {
        bootstrap: bool,
        version: Version,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remediation: Option<Remediation>,
    },
    /// Start the machine's etcd process.
    StartMachine {
        machine: String,
        state: ClusterState,
        initial_cluster: Vec<InitialMember>,
        /// The marker its data directory held when the start was decided (`None`: none).
        /// The runtime refuses to start if it holds another now, or lost the data that
        /// was marked: a start decided on an observation that went stale (a deposed
        /// controller's, or a disk lost meanwhile) never runs on the wrong data.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<DataMarker>,
    },
    /// MemberAdd as a learner, with the machine's peer URL.
    AddLearner { machine: String, peer_url: String },
    /// Promote a caught-up learner to voter.
    Promote { machine: String, member_id: u64 },
    /// Record that the machine is leaving (before its member is removed).
    MarkDeleting {
        machine: String,
        reason: DeleteReason,
        /// Set when the machine leaves to be remediated: kept on its record until its
        /// replacement carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remediation: Option<Remediation>,
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
    /// Write the identity marker into the machine's data directory (its member answered
    /// as itself): from now on its data is checked before every start.
    WriteMarker { machine: String, marker: DataMarker },
    /// Compact the keyspace up to `revision` (sent to the leader): frees the space old
    /// revisions hold, for a defragmentation to return.
    Compact { revision: i64 },
    /// Defragment one member's database (sent to that member; it stalls while the file
    /// is rewritten, so only while the others hold quorum).
    Defragment { machine: String },
    /// Disarm an alarm of one member (sent to the leader).
    DisarmAlarm { member_id: u64, alarm: String },
    /// Take a snapshot from the leader, test-restore it, and record it: on the spec's
    /// schedule, or (`before`) before a chained upgrade's next link (`chain`).
    TakeSnapshot {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before: Option<Version>,
    },
    /// Remove a snapshot retention no longer keeps: its file, then its record.
    PruneSnapshot { id: String },
    /// Test-restore a recorded snapshot again (`backup.verifyEvery`) and record it.
    VerifySnapshot { id: String },
    /// Remove a fenced directory `spec.recovery.keepFenced` no longer keeps (`fenced`).
    PruneFenced { name: String },
    /// Record that the machine begins an in-place step toward `to` (phase `Draining`):
    /// it leaves the endpoints before anything else happens to it.
    BeginInPlace {
        machine: String,
        to: Version,
        reason: DeleteReason,
    },
    /// Record the machine's next phase and the binary its next start uses: `Restarting`
    /// on `version` (the new one; its certificates are renewed then), or `RollingBack`
    /// on `version` (the previous one), with why.
    SetInPlacePhase {
        machine: String,
        phase: InPlacePhase,
        version: Version,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<String>,
        /// With `Restarting`, during a CA rotation: the phase whose CA files the start
        /// uses (recorded with it, before the start). `None`: the files stay as they are.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ca_step: Option<CaStep>,
    },
    /// The in-place step ended: `RolledBack` keeps its memory (the rollout stops);
    /// otherwise the record is cleared and the machine serves again.
    EndInPlace {
        machine: String,
        outcome: InPlaceOutcome,
    },
    /// A rebuild fences an old machine: its process is stopped, its data directory
    /// moved where no start finds it (kept for a person, never served), then its record
    /// forgotten.
    FenceMachine { machine: String },
    /// Record the rebuild's next phase.
    SetRebuildPhase { phase: RebuildPhase },
    /// Restore the rebuild's snapshot into the seed machine's data directory, with the
    /// rebuild's fresh cluster token (after checking the file against its record).
    RestoreSnapshot { machine: String, id: String },
    /// Start the surviving member with `--force-new-cluster`: it forgets every other
    /// member and serves alone, keeping what it had applied.
    ForceNewCluster {
        machine: String,
        /// The marker its data directory held when the start was decided.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<DataMarker>,
    },
    /// The seed serves alone: the rebuild is over. The seed's record drops what it said
    /// in the old cluster (leaving, an in-place step, a remediation), then the rebuild's record is
    /// cleared; the cluster grows back to `replicas` the normal way.
    FinishRebuild { machine: String },
    /// Every member serves with the CA rotation's files for its phase: record the next
    /// phase.
    SetCaPhase { phase: CaPhase },
    /// Every member serves with the last phase's files: the new CA (generation
    /// `generation`) becomes the CA in force, the old one is forgotten and the rotation's
    /// record cleared, in one store write.
    FinishCaRotation { generation: u32 },
    /// A chained upgrade's link under way is done: record the next (`to`) as the
    /// spec's version and drop it from the road, if the spec is still at `from`.
    TakeNextLink { from: Version, to: Version },
}

/// How an in-place step ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InPlaceOutcome {
    /// The member serves on the new binary.
    Done,
    /// Back and healthy on the previous binary; the rollout stops.
    RolledBack,
    /// The step no longer applies (the spec's version changed before the restart, the
    /// cluster can no longer spare the member before its stop, or a rolled-back step's
    /// version is no longer wanted): forgotten.
    Abandoned,
}

impl Action {
    /// A change of etcd membership (of which at most one is ever in flight).
    pub fn is_membership_change(&self) -> bool {
        matches!(
            self,
            Action::AddLearner { .. } | Action::Promote { .. } | Action::RemoveMember { .. }
        )
    }

    /// Whether performing it writes quorum's own records and nothing else (no call to
    /// etcd, a machine or a snapshot store). Such a write is fenced by the leadership
    /// token whenever it comes, so a deposed controller's is refused however late: the
    /// simulator lets a paused replica's in-flight one through the fence and the model
    /// check takes it in one transition, both by this rule. Exhaustive, so a new action
    /// is classified where it is added.
    pub fn writes_records_only(&self) -> bool {
        match self {
            Action::AllocateMachine { .. }
            | Action::MarkDeleting { .. }
            | Action::ForgetControlPlane
            | Action::BeginInPlace { .. }
            | Action::SetInPlacePhase { .. }
            | Action::EndInPlace { .. }
            | Action::SetRebuildPhase { .. }
            | Action::FinishRebuild { .. }
            | Action::SetCaPhase { .. }
            | Action::FinishCaRotation { .. }
            | Action::TakeNextLink { .. } => true,
            Action::StartMachine { .. }
            | Action::StopMachine { .. }
            | Action::DeleteMachine { .. }
            | Action::WriteMarker { .. }
            | Action::AddLearner { .. }
            | Action::Promote { .. }
            | Action::MoveLeader { .. }
            | Action::RemoveMember { .. }
            | Action::Compact { .. }
            | Action::Defragment { .. }
            | Action::DisarmAlarm { .. }
            | Action::TakeSnapshot { .. }
            | Action::PruneSnapshot { .. }
            | Action::VerifySnapshot { .. }
            | Action::PruneFenced { .. }
            | Action::FenceMachine { .. }
            | Action::RestoreSnapshot { .. }
            | Action::ForceNewCluster { .. } => false,
        }
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
            | Action::DeleteMachine { machine }
            | Action::WriteMarker { machine, .. }
            | Action::Defragment { machine }
            | Action::BeginInPlace { machine, .. }
            | Action::SetInPlacePhase { machine, .. }
            | Action::EndInPlace { machine, .. }
            | Action::FenceMachine { machine }
            | Action::RestoreSnapshot { machine, .. }
            | Action::ForceNewCluster { machine, .. }
            | Action::FinishRebuild { machine } => Some(machine),
            Action::MoveLeader { to_machine, .. } => Some(to_machine),
            Action::RemoveMember { machine, .. } => machine.as_deref(),
            Action::AllocateMachine { .. }
            | Action::ForgetControlPlane
            | Action::Compact { .. }
            | Action::DisarmAlarm { .. }
            | Action::TakeSnapshot { .. }
            | Action::PruneSnapshot { .. }
            | Action::VerifySnapshot { .. }
            | Action::PruneFenced { .. }
            | Action::SetRebuildPhase { .. }
            | Action::SetCaPhase { .. }
            | Action::FinishCaRotation { .. }
            | Action::TakeNextLink { .. } => None,
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
            Action::WriteMarker { .. } => ActionKind::WriteMarker,
            Action::Compact { .. } => ActionKind::Compact,
            Action::Defragment { .. } => ActionKind::Defragment,
            Action::DisarmAlarm { .. } => ActionKind::DisarmAlarm,
            Action::TakeSnapshot { .. } => ActionKind::TakeSnapshot,
            Action::PruneSnapshot { .. } => ActionKind::PruneSnapshot,
            Action::PruneFenced { .. } => ActionKind::PruneFenced,
            Action::VerifySnapshot { .. } => ActionKind::VerifySnapshot,
            Action::BeginInPlace { .. } => ActionKind::BeginInPlace,
            Action::SetInPlacePhase { .. } => ActionKind::SetInPlacePhase,
            Action::EndInPlace { .. } => ActionKind::EndInPlace,
            Action::FenceMachine { .. } => ActionKind::FenceMachine,
            Action::SetRebuildPhase { .. } => ActionKind::SetRebuildPhase,
            Action::RestoreSnapshot { .. } => ActionKind::RestoreSnapshot,
            Action::ForceNewCluster { .. } => ActionKind::ForceNewCluster,
            Action::FinishRebuild { .. } => ActionKind::FinishRebuild,
            Action::SetCaPhase { .. } => ActionKind::SetCaPhase,
            Action::FinishCaRotation { .. } => ActionKind::FinishCaRotation,
            Action::TakeNextLink { .. } => ActionKind::TakeNextLink,
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
    WriteMarker = "write-marker",
    Compact = "compact",
    Defragment = "defragment",
    DisarmAlarm = "disarm-alarm",
    BeginInPlace = "begin-in-place",
    SetInPlacePhase = "set-in-place-phase",
    EndInPlace = "end-in-place",
    TakeSnapshot = "take-snapshot",
    PruneSnapshot = "prune-snapshot",
    VerifySnapshot = "verify-snapshot",
    PruneFenced = "prune-fenced",
    FenceMachine = "fence-machine",
    SetRebuildPhase = "set-rebuild-phase",
    RestoreSnapshot = "restore-snapshot",
    ForceNewCluster = "force-new-cluster",
    FinishRebuild = "finish-rebuild",
    SetCaPhase = "set-ca-phase",
    FinishCaRotation = "finish-ca-rotation",
    TakeNextLink = "take-next-link",
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

impl Action {
    /// The words of a membership change or a leadership move.
    fn fmt_membership(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::AddLearner { machine, .. } => write!(f, "add {machine} as a learner"),
            Action::Promote { machine, .. } => write!(f, "promote {machine} to voter"),
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
            // Never reached: `Display` sends it its own actions only.
            other => f.write_str(other.kind().as_str()),
        }
    }

    /// The words of an upkeep action: markers, space, snapshots, fenced directories.
    fn fmt_upkeep(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::WriteMarker { machine, .. } => {
                write!(f, "mark the data directory of {machine} as its member's")
            }
            Action::Compact { revision } => {
                write!(f, "compact the keyspace to revision {revision}")
            }
            Action::Defragment { machine } => write!(f, "defragment {machine}"),
            Action::DisarmAlarm { member_id, alarm } => {
                write!(f, "disarm the {alarm} alarm of member {member_id:x}")
            }
            Action::TakeSnapshot { before: None } => {
                write!(f, "take a scheduled snapshot from the leader")
            }
            Action::TakeSnapshot { before: Some(v) } => {
                write!(
                    f,
                    "take a snapshot from the leader before the rollout to etcd {v}"
                )
            }
            Action::PruneSnapshot { id } => {
                write!(f, "remove snapshot {id} (retention keeps it no longer)")
            }
            Action::VerifySnapshot { id } => write!(f, "test-restore snapshot {id}"),
            Action::PruneFenced { name } => {
                write!(f, "remove the fenced directory {name} (kept long enough)")
            }
            // Never reached: `Display` sends each its own actions.
            other => f.write_str(other.kind().as_str()),
        }
    }

    /// The words of an in-place step's beginning, by its reason.
    fn fmt_begin_in_place(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::BeginInPlace {
                machine,
                to,
                reason: DeleteReason::CertificatesExpiring,
            } => write!(
                f,
                "begin renewing {machine}'s certificates in place (etcd {to}): drain it"
            ),
            Action::BeginInPlace {
                machine,
                to,
                reason: DeleteReason::CaRotation,
            } => write!(
                f,
                "begin restarting {machine} in place with the CA rotation's files (etcd {to}): drain it"
            ),
            Action::BeginInPlace {
                machine,
                to,
                reason: DeleteReason::Requested,
            } => write!(
                f,
                "begin restarting {machine} in place on etcd {to}, as asked (`quorum member restart`): drain it"
            ),
            Action::BeginInPlace { machine, to, .. } => {
                write!(
                    f,
                    "begin upgrading {machine} in place to etcd {to}: drain it"
                )
            }
            // Never reached: `fmt_in_place` sends it its own action only.
            other => f.write_str(other.kind().as_str()),
        }
    }

    /// The words of an in-place step's record writes.
    fn fmt_in_place(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::BeginInPlace { .. } => self.fmt_begin_in_place(f),
            Action::SetInPlacePhase {
                machine,
                phase: InPlacePhase::RollingBack,
                version,
                failure,
                ..
            } => write!(
                f,
                "roll {machine} back to etcd {version}{}",
                failure
                    .as_ref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            ),
            Action::SetInPlacePhase {
                machine,
                version,
                ca_step: Some(step),
                ..
            } => write!(
                f,
                "record {machine} on etcd {version} with the CA files of phase {} ({}), to restart it",
                step.phase.number(),
                step.phase
            ),
            Action::SetInPlacePhase {
                machine, version, ..
            } => write!(f, "record {machine} on etcd {version}, to restart it"),
            Action::EndInPlace {
                machine,
                outcome: InPlaceOutcome::Done,
            } => write!(f, "put {machine} back in service"),
            Action::EndInPlace {
                machine,
                outcome: InPlaceOutcome::RolledBack,
            } => write!(
                f,
                "stop the rollout: {machine} is back on its previous binary"
            ),
            Action::EndInPlace {
                machine,
                outcome: InPlaceOutcome::Abandoned,
            } => write!(f, "forget {machine}'s in-place step"),
            // Never reached: `Display` sends each its own actions.
            other => f.write_str(other.kind().as_str()),
        }
    }

    /// The words of a rebuild's and a CA rotation's steps.
    fn fmt_recovery(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::FenceMachine { machine } => write!(
                f,
                "fence {machine}: stop it, move its data out of reach, forget it"
            ),
            Action::SetRebuildPhase { phase } => write!(f, "record the rebuild: {phase}"),
            Action::RestoreSnapshot { machine, id } => {
                write!(f, "restore snapshot {id} into {machine} (a new cluster)")
            }
            Action::ForceNewCluster { machine, .. } => write!(
                f,
                "start {machine} with --force-new-cluster (it serves alone)"
            ),
            Action::FinishRebuild { machine } => {
                write!(f, "end the rebuild: {machine} serves alone")
            }
            Action::SetCaPhase { phase } => write!(
                f,
                "CA rotation: every member is in step; record phase {} of 3 ({phase})",
                phase.number()
            ),
            Action::FinishCaRotation { generation } => write!(
                f,
                "CA rotation: every member trusts only the new CA; make it the CA in force (generation {generation}) and forget the old one"
            ),
            // Never reached: `Display` sends each its own actions.
            other => f.write_str(other.kind().as_str()),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::AllocateMachine {
                remediation: Some(r),
                version,
                ..
            } => write!(
                f,
                "allocate a machine to replace {} (etcd {version})",
                r.machine
            ),
            Action::AllocateMachine {
                bootstrap: true,
                version,
                ..
            } => write!(f, "allocate a new initial machine (etcd {version})"),
            Action::AllocateMachine { version, .. } => {
                write!(f, "allocate a new machine (etcd {version})")
            }
            Action::StartMachine { machine, state, .. } => match state {
                ClusterState::New => write!(f, "start {machine} (new cluster)"),
                ClusterState::Existing => write!(f, "start {machine}"),
            },
            Action::MarkDeleting {
                machine,
                remediation: Some(r),
                ..
            } => write!(
                f,
                "mark {machine} for replacement (attempt {}: {})",
                r.attempt, r.reason
            ),
            Action::MarkDeleting {
                machine, reason, ..
            } => {
                write!(f, "mark {machine} for deletion ({reason})")
            }
            Action::AddLearner { .. }
            | Action::Promote { .. }
            | Action::MoveLeader { .. }
            | Action::RemoveMember { .. } => self.fmt_membership(f),
            Action::StopMachine { machine } => write!(f, "stop {machine}"),
            Action::DeleteMachine { machine } => write!(f, "delete {machine}"),
            Action::ForgetControlPlane => write!(f, "forget the control plane"),
            Action::WriteMarker { .. }
            | Action::Compact { .. }
            | Action::Defragment { .. }
            | Action::DisarmAlarm { .. }
            | Action::TakeSnapshot { .. }
            | Action::PruneSnapshot { .. }
            | Action::VerifySnapshot { .. }
            | Action::PruneFenced { .. } => self.fmt_upkeep(f),
            Action::BeginInPlace { .. }
            | Action::SetInPlacePhase { .. }
            | Action::EndInPlace { .. } => self.fmt_in_place(f),
            Action::FenceMachine { .. }
            | Action::SetRebuildPhase { .. }
            | Action::RestoreSnapshot { .. }
            | Action::ForceNewCluster { .. }
            | Action::FinishRebuild { .. }
            | Action::SetCaPhase { .. }
            | Action::FinishCaRotation { .. } => self.fmt_recovery(f),
            Action::TakeNextLink { from, to } => write!(
                f,
                "chained upgrade: every member serves on etcd {from}; record the next link, etcd {to}"
            ),
        }
    }
}
