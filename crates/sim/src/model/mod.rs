//! An exhaustive model check of the real decision function against an abstract etcd.
//!
//! The system: a 3-member control plane rolled from 3.4.23 to 3.5.1 (maxSurge 1 or 0) by
//! a controller that runs `quorum_core::decide` on a fresh observation and performs the
//! decision's actions in order, and that may crash after any prefix of them (at most
//! `MAX_CRASHES` times), plus a deposed controller that took a decision earlier and may
//! still perform its first side effect once, at any later moment (its store writes are
//! fenced, so only its effects on etcd and on machines land). The environment moves at
//! any pace: learners catch up, removed members' processes exit, a leaderless cluster
//! elects, and one failure happens at most: a member process dies (the controller
//! restarts it), a member hangs (or is cut off from its peers and the controller) for a
//! while, or a member's disk is lost for good (its process killed, its data gone).
//!
//! Remediation is the core's: the controller keeps the health memory `health::Tracker`
//! keeps (lost in a crash), here abstract: which machines have a problem replacement
//! repairs, and for each whether it has lasted `unhealthyAfter` (an environment step,
//! one machine at a time, so the memory may say anything about the problems seen). A
//! due member is marked for replacement with its remediation record, leaves (leadership
//! first, then its member, then its process), its replacement is recorded before its
//! record goes, and the replacement joins as a learner and is promoted. A lost disk is
//! only ever repaired that way, so the liveness check below proves the path completes.
//! Checked at every start: never `new` after the cluster formed, never on lost data.
//!
//! Pacing is the core's (`quorum_core::pacing`, what the controller runs): before each
//! action the controller asks `Pacing::check`, so a member of a leaving machine is
//! removed only once its drain has passed and while the load balancer is in step. Time
//! is abstract: state bits say whether the controller's drain clock started (a pass saw
//! the machine leaving, after publishing the endpoints without it) and whether it passed
//! (an environment step), and whether the load balancer is reachable (it may become
//! unreachable once, and reachable again); a pass that reaches it brings it in step.
//! The ground truth is kept apart (which leaving machines have drained, which the load
//! balancer still serves), and every removal is checked against it. Retry backoff is not
//! modelled: a refused action just ends the controller's pass, as a wait would.
//!
//! Every reachable state is enumerated (breadth first, states deduplicated). Checked in
//! every state: a majority of voters runs (quorum never lost: a failure is injected only
//! where a majority keeps running, so any loss would be quorum's doing, whatever the
//! health memory says), at most one learner, never an add and a removal in flight
//! together (but beside a deposed controller's stale add), no machine deleted while its
//! member votes. Liveness under fairness: every terminal state is the goal (all members
//! upgraded, every machine with its data), and the goal is reachable from every
//! reachable state (AG EF goal over the explicit state graph). That
//! second check is why this is a purpose-built explorer rather than the `stateright`
//! crate: stateright's `eventually` ignores paths that end in a cycle (a documented
//! false negative), while a stuck cycle is exactly the bug this project exists to prevent.
//!
//! Two faults are held back where the core's rules cannot repair them, as in the
//! simulator (`Variant::faults_anywhere` lets them happen): a disk lost while another
//! machine is leaving, and a deposed controller's stale start.

use quorum_core::health::{self, Problem};
use quorum_core::pacing::{Attempt, Pacing};
use quorum_core::pass::{self, Pass, Request, Stop};
use quorum_core::record::Applying;
use quorum_core::{
    quorum_size, Action, CaGenerations, CaPhase, CaRotation, ControlPlane, ControlPlaneSpec,
    DataMarker, Decision, EndpointStatus, Machine, MachineObservation, MachineRequest, Member,
    Observation, ProcessState, RolloutStrategy, Strategy, Version,
};
use std::hash::Hash;
use std::net::Ipv4Addr;

pub const MAX_CRASHES: u8 = 2;
/// How often a sharded control plane's shard may move to another replica in a run.
pub const MAX_SHARD_MOVES: u8 = 1;
const OLD: Version = Version::new(3, 4, 23);
const NEW: Version = Version::new(3, 5, 1);
/// The chain variant's first link: a minor step, then a patch step to NEW.
const MID: Version = Version::new(3, 5, 0);
/// A bound on the explored states: the check fails rather than run away.
pub const MAX_STATES: usize = 5_000_000;
/// The model's clock stands still: whether a problem has lasted `unhealthyAfter` is a
/// state bit (`Memory`), set by an environment step.
const NOW_UNIX_S: i64 = 1_800_000_000;
const CLUSTER_ID: u64 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct MMember {
    id: u64,
    peer_url: String,
    /// The serial of the machine whose peer URL it has (a machine's address ends in its
    /// serial): members match machines by it without formatting URLs in the hot loop.
    serial: u64,
    /// The process started once (etcd then knows its name).
    named: bool,
    is_learner: bool,
    caught_up: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Proc {
    name: String,
    running: bool,
    has_data: bool,
    /// The binary it was last started from (its record's version then): what it
    /// reports while it runs.
    binary: Version,
    /// The CA files of its last start.
    files: CaGenerations,
}

impl Proc {
    fn new(name: String, running: bool, has_data: bool, binary: Version) -> Proc {
        Proc {
            name,
            running,
            has_data,
            binary,
            files: CaGenerations::plain(0),
        }
    }
}

/// Which system is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub max_surge: u32,
    /// etcd's `--strict-reconfig-check`: a removal must leave a running majority.
    pub etcd_strict: bool,
    /// A deposed controller may perform one stale side effect: in lease terms, a replica
    /// that passed its check (`lease::may_act` with the margin, then the fenced no-op
    /// write) for its decision's first action, was paused past its TTL while the other
    /// replica took the leader key (a new token), and performs that action on resuming
    /// without checking again. Its store writes carry the old token and are refused; its
    /// effects on etcd and on machines land. The simulator's two-replica mode (`lib.rs`,
    /// `Config::replicas`) plays the same fault with timed leases, renewals and takeovers.
    pub deposed: bool,
    /// Faults also where the core's rules cannot repair them (off in `ALL`; the binary's
    /// `--model-check --faults-anywhere` shows the counterexamples): a disk lost while
    /// another machine is leaving (its removal then needs the dead member's vote, and
    /// remediation waits for the removal), a deposed controller's stale start of a
    /// machine whose disk is lost meanwhile (nothing checks the data again at the start),
    /// and its stale stop of a member (an in-place step's: nothing fences a process kill).
    pub faults_anywhere: bool,
    /// `strategy: InPlace` (`inplace.rs`): each member restarted on the new binary, with
    /// the cluster version, a new binary that fails to start, the step's deadline, the
    /// rollback and the person who retries a stopped rollout.
    pub in_place: bool,
    /// A recovery a person confirmed (`rebuild.rs`): the run begins with two of three
    /// members gone with their data and `recover --from-member` recorded; the
    /// controller fences, forces the survivor and grows the cluster back, with its
    /// crashes and a deposed controller's stale step.
    pub recovery: bool,
    /// A deleted control plane brought back from a snapshot (`quorum create NAME
    /// --from-snapshot ID`, `recreate.rs` in `quorum_ops`): the run begins with no
    /// machine and no member, and the restore from the snapshot recorded; the
    /// controller allocates the seed, restores the snapshot into it, starts it as a new
    /// cluster and grows it back to three through learners, with its crashes, a
    /// deposed controller's stale step and one failure.
    pub recreate: bool,
    /// A sharded fleet (`controller --shards N`): the control plane's shard may move to
    /// another replica at any moment between two passes (`MAX_SHARD_MOVES` times), as
    /// when a replica joins or dies. The new holder starts with no memory (drain clock,
    /// health memory), and the former holder may be the deposed controller with its one
    /// stale side effect (a provider call still running when its passes were stopped
    /// and its lease given up). A move in the middle of a pass is a crash: covered.
    pub sharded: bool,
    /// A CA rotation (`quorum rotate-ca`) recorded at the start, of 3 TLS members
    /// already on the new version: each phase restarts (here: replaces) every member
    /// with its files, with crashes, a deposed controller's stale step and one
    /// failure. Checked in every state: every running member trusts every other
    /// running member's certificates and quorum's own; the goal has it finished.
    pub ca_rotation: bool,
    /// Members on hosts (`spec.provider: hosts`): the one failure is a host lost for a
    /// while, instead of the member faults: its process stops, every call to its agent
    /// fails (the controller's pass ends there), and the machine is observed as the
    /// hosts provider reports a silent host (taken to run, no version: etcd judges it).
    /// It comes back with its process stopped. One member per host (the core's
    /// placement), so a host is its machine here.
    pub hosts: bool,
    /// A person's `quorum member replace` and `quorum member restart` recorded at the
    /// start, on two of 3 members already on the new version: the controller replaces
    /// one and restarts the other in place, with its crashes, a deposed controller's
    /// stale step and one failure. The goal has no request left, the replaced machine
    /// gone and the restarted one back in service.
    pub requests: bool,
    /// A chained upgrade (`quorum_core::chain`): the spec at MID with the road's one
    /// link to NEW left, from 3 members at OLD; the controller takes the link once
    /// every member runs MID, with its crashes (one between the links among them), a
    /// deposed controller's stale step and one failure. The goal has the road through.
    pub chain: bool,
}

impl Variant {
    /// What every variant is unless it says otherwise: maxSurge 1, quorum alone.
    pub const BASE: Variant = Variant {
        chain: false,
        requests: false,
        max_surge: 1,
        etcd_strict: false,
        deposed: false,
        faults_anywhere: false,
        in_place: false,
        recovery: false,
        recreate: false,
        sharded: false,
        ca_rotation: false,
        hosts: false,
    };

    /// The systems checked: quorum alone (etcd's check off, so quorum's own projection
    /// is the only guard), and quorum with a deposed controller (which only etcd's
    /// check can stop from performing a removal it decided before a member died;
    /// fencing and the leadership re-check of the distributed store narrow that window);
    /// and the in-place rollout with a deposed controller; and a sharded fleet, whose
    /// control plane moves between replicas.
    pub const ALL: [Variant; 12] = [
        Variant::BASE,
        Variant {
            max_surge: 0,
            ..Variant::BASE
        },
        Variant {
            etcd_strict: true,
            deposed: true,
            ..Variant::BASE
        },
        Variant {
            max_surge: 0,
            etcd_strict: true,
            deposed: true,
            ..Variant::BASE
        },
        Variant {
            etcd_strict: true,
            deposed: true,
            in_place: true,
            ..Variant::BASE
        },
        Variant {
            etcd_strict: true,
            deposed: true,
            recovery: true,
            ..Variant::BASE
        },
        Variant {
            etcd_strict: true,
            deposed: true,
            sharded: true,
            ..Variant::BASE
        },
        Variant {
            etcd_strict: true,
            ca_rotation: true,
            ..Variant::BASE
        },
        Variant {
            etcd_strict: true,
            deposed: true,
            hosts: true,
            ..Variant::BASE
        },
        Variant {
            etcd_strict: true,
            deposed: true,
            recreate: true,
            ..Variant::BASE
        },
        Variant {
            requests: true,
            etcd_strict: true,
            deposed: true,
            ..Variant::BASE
        },
        Variant {
            chain: true,
            etcd_strict: true,
            deposed: true,
            ..Variant::BASE
        },
    ];
}

/// One state of the whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    variant: Variant,
    cp: ControlPlane,
    machines: Vec<Machine>,
    next_serial: u64,
    procs: Vec<Proc>,
    members: Vec<MMember>,
    next_member_id: u64,
    leader: Option<u64>,
    crashes: u8,
    /// Times the control plane's shard moved to another replica (sharded variant).
    shard_moves: u8,
    /// A member process may die once (the controller restarts it).
    died: bool,
    /// A member may hang once (SIGSTOP) or be cut off from its peers and the controller:
    /// its process runs, it answers nothing, until it heals.
    partitioned: Option<u64>,
    partition_used: bool,
    /// A member's disk may be lost once: its process killed, its data gone for good
    /// (only remediation repairs it).
    disk_lost: bool,
    /// The controller's health memory (`health::Tracker`, lost in a crash): the
    /// machines with a problem that replacement repairs, and whether it has lasted
    /// `unhealthyAfter` (an environment step says so; the model has no clock).
    memory: Vec<(String, bool)>,
    /// The deposed controller's pending side effect.
    stale: Option<Action>,
    stale_used: bool,
    /// The learner its stale add created (by peer URL): the controller may have marked
    /// a machine for removal meanwhile (remediation comes before joins).
    stale_learner: Option<String>,
    /// The controller's drain clock (its memory, lost in a crash): started by a pass
    /// that saw a machine leaving, passed by an environment step.
    drain_started: bool,
    drain_passed: bool,
    /// Ground truth: leaving machines whose endpoints have been unpublished for the
    /// drain time, and leaving machines the load balancer still sends clients to.
    drained: Vec<String>,
    lb_serves: Vec<String>,
    /// The load balancer is reachable (a pass brings it in step); it may become
    /// unreachable once.
    lb_reachable: bool,
    lb_fault_used: bool,
    /// etcd's cluster version has moved to NEW's minor (every member ran it, all
    /// answering): no binary below it starts since (in-place variant only).
    cluster_new: bool,
    /// The machine on which NEW fails to start (every start exits at once), until the
    /// person replaces it; it may happen once.
    bad_binary: Option<String>,
    bad_used: bool,
    /// The machine whose host is lost now (hosts variant); it may happen once.
    host_down: Option<String>,
    host_used: bool,
    /// A learner whose own publish was lost (`publish.rs`); it may happen once.
    publish: Option<publish::LostPublish>,
    publish_used: bool,
}

/// What the exploration found.
#[derive(Debug)]
pub struct Report {
    pub states: usize,
    pub transitions: usize,
    pub max_depth: usize,
    pub goal_states: usize,
    /// States with a machine's disk lost, and states in which a remediation is recorded
    /// (a machine leaving to be replaced, or its replacement): the repair path was
    /// explored.
    pub disk_lost_states: usize,
    pub remediation_states: usize,
    /// States with an in-place step under way, with it rolling back or rolled back,
    /// and with NEW failing to start somewhere (the in-place variant).
    pub in_place_states: usize,
    pub rollback_states: usize,
    pub bad_binary_states: usize,
    /// States with a CA rotation in its last phase (the rotation variant).
    pub ca_last_phase_states: usize,
    /// States with a learner's publish lost, and with it stopped by the core's rule
    /// (the recreate variant, `publish.rs`).
    pub lost_publish_states: usize,
    pub publish_stopped_states: usize,
    /// Empty when every property holds.
    pub violations: Vec<String>,
}

/// The controller's health memory (`health::Tracker`) in the model's abstract time: the
/// machines with a problem that replacement repairs, and whether each has lasted
/// `unhealthyAfter` (an environment step says so; the model has no clock).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Remembered {
    pub(super) memory: Vec<(String, bool)>,
    after_s: i64,
}

impl pass::HealthMemory for Remembered {
    /// As `Tracker::observe`: a machine with a problem that replacement repairs is
    /// remembered (not yet for `unhealthyAfter`), one without is forgotten.
    fn observe(
        &mut self,
        cp: &ControlPlane,
        machines: &[Machine],
        observed: &Observation,
    ) -> health::Tracked {
        let problems = health::assess(cp, machines, observed);
        let old = std::mem::take(&mut self.memory);
        self.memory = problems
            .into_iter()
            .filter(|(_, ps)| ps.iter().any(Problem::remediable))
            .map(|(m, _)| {
                let due = old.iter().any(|(o, d)| *o == m && *d);
                (m, due)
            })
            .collect();
        health::Tracked {
            since_unix_s: problem_since(&self.memory, self.after_s),
            ..Default::default()
        }
    }
    /// Never decided in the model: its keyspace never fills.
    fn defragmented(&mut self, _machine: &str) {}
    fn disarmed(&mut self) {}
}

/// Since when each remembered problem holds, as the tracker would say it.
fn problem_since(
    memory: &[(String, bool)],
    after_s: i64,
) -> std::collections::BTreeMap<String, i64> {
    memory
        .iter()
        .map(|(m, due)| {
            let since = if *due {
                NOW_UNIX_S - after_s
            } else {
                NOW_UNIX_S
            };
            (m.clone(), since)
        })
        .collect()
}

fn machine(serial: u64, version: Version) -> Machine {
    Machine {
        requested: None,
        ca_step: None,
        placement: None,
        name: format!("m-{serial}"),
        serial,
        address: Ipv4Addr::new(127, 1, 0, serial as u8),
        version,
        bootstrap: serial <= 3,
        deleting: false,
        tls: false,
        certificates_not_after_unix_s: None,
        remediation: None,
        in_place: None,
    }
}

/// 3 healthy members at OLD, spec at NEW; or, for a recovery, the state `recover
/// --from-member m-1` is confirmed in.
pub fn initial(variant: Variant) -> State {
    if variant.recovery {
        return rebuild::initial_recovery(variant);
    }
    if variant.recreate {
        return rebuild::initial_recreate(variant);
    }
    initial_rollout(variant)
}

/// The rollout variants' start: 3 healthy members at OLD (at NEW for a CA rotation or
/// a person's requests), spec at NEW.
fn initial_rollout(variant: Variant) -> State {
    // A CA rotation and a person's requests run on their own: the members are on the
    // spec's version already.
    let from = if variant.ca_rotation || variant.requests {
        NEW
    } else {
        OLD
    };
    let machines = initial_machines(variant, from);
    State {
        variant,
        cp: rollout_control_plane(variant),
        procs: machines
            .iter()
            .map(|m| Proc::new(m.name.clone(), true, true, from))
            .collect(),
        members: machines
            .iter()
            .map(|m| MMember {
                id: m.serial,
                peer_url: m.peer_url(),
                serial: m.serial,
                named: true,
                is_learner: false,
                caught_up: true,
            })
            .collect(),
        machines,
        next_serial: 4,
        next_member_id: 4,
        leader: Some(1),
        crashes: 0,
        shard_moves: 0,
        died: false,
        partitioned: None,
        partition_used: false,
        disk_lost: false,
        memory: vec![],
        stale: None,
        stale_used: false,
        stale_learner: None,
        drain_started: false,
        drain_passed: false,
        drained: vec![],
        lb_serves: vec![],
        lb_reachable: true,
        lb_fault_used: false,
        cluster_new: false,
        bad_binary: None,
        bad_used: false,
        host_down: None,
        host_used: false,
        publish: None,
        publish_used: false,
    }
}

/// The three machines at `from` (with TLS in a CA rotation; in the requests variant,
/// a replacement asked of m-1 and a restart of m-2).
fn initial_machines(variant: Variant, from: Version) -> Vec<Machine> {
    let asked = |i: u64| match i {
        1 if variant.requests => Some(MachineRequest::Replace),
        2 if variant.requests => Some(MachineRequest::Restart),
        _ => None,
    };
    (1..=3)
        .map(|i| Machine {
            tls: variant.ca_rotation,
            requested: asked(i),
            ..machine(i, from)
        })
        .collect()
}

/// The control plane of the rollout variants: 3 replicas at NEW, rolled out as the
/// variant says, with a CA rotation begun in the rotation variant.
fn rollout_control_plane(variant: Variant) -> ControlPlane {
    ControlPlane {
        spec_version: 0,
        client_addresses: given_addresses(),
        ca_generation: 0,
        ca_rotation: variant.ca_rotation.then_some(CaRotation {
            from: 0,
            to: 1,
            phase: CaPhase::Trust,
            since_unix_s: NOW_UNIX_S,
            started_unix_s: NOW_UNIX_S,
        }),
        // The chain's link under way is MID, with NEW left on the road: the model has
        // no snapshots (the simulator covers them).
        road: variant.chain.then_some(quorum_core::chain::Road {
            links: vec![NEW],
            link_began_unix_s: NOW_UNIX_S,
            snapshots: false,
        }),
        v2_api_never_open: true,
        name: "m".into(),
        spec: ControlPlaneSpec {
            recovery: Default::default(),
            deletion_protection: false,
            replicas: 3,
            version: if variant.chain { MID } else { NEW },
            rollout: RolloutStrategy {
                max_surge: variant.max_surge,
                strategy: if variant.in_place {
                    Strategy::InPlace
                } else {
                    Strategy::Replace
                },
                ..RolloutStrategy::default()
            },
            paused: false,
            haproxy: None,
            certificates: Default::default(),
            insecure_plaintext: true,
            remediation: Default::default(),
            maintenance: Default::default(),
            backup: Default::default(),
            provider: Default::default(),
        },
        deleting: false,
        rebuild: None,
    }
}

impl State {
    fn proc(&self, name: &str) -> Option<&Proc> {
        self.procs.iter().find(|p| p.name == name)
    }

    fn proc_mut(&mut self, name: &str) -> Option<&mut Proc> {
        self.procs.iter_mut().find(|p| p.name == name)
    }

    fn machine_of(&self, m: &MMember) -> Option<&Machine> {
        self.machines.iter().find(|x| x.serial == m.serial)
    }

    /// Running and connected: what counts towards quorum.
    fn member_running(&self, m: &MMember) -> bool {
        self.partitioned != Some(m.id)
            && self
                .machine_of(m)
                .and_then(|x| self.proc(&x.name))
                .is_some_and(|p| p.running)
    }

    fn voters(&self) -> impl Iterator<Item = &MMember> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    fn has_quorum(&self) -> bool {
        let v = self.voters().count();
        v > 0 && self.voters().filter(|m| self.member_running(m)).count() >= quorum_size(v)
    }

    /// What the controller observes in this state.
    fn observe(&self) -> Observation {
        let mut obs = Observation::default();
        for mach in &self.machines {
            obs.machines
                .insert(mach.name.clone(), self.observe_machine(mach));
        }
        obs.now_unix_s = NOW_UNIX_S;
        let after_s = self.cp.spec.remediation.unhealthy_after.as_secs() as i64;
        obs.problem_since_unix_s = problem_since(&self.memory, after_s);
        if self.leader.is_some() {
            obs.cluster_version = Some(self.cluster_version());
            obs.members = Some(self.member_list());
        }
        obs
    }

    /// What the provider and the endpoint of machine `mach` say of it.
    fn observe_machine(&self, mach: &Machine) -> MachineObservation {
        let p = self.proc(&mach.name);
        let running = p.is_some_and(|p| p.running);
        // A silent host's machines are reported as last seen: taken to run.
        let silent = self.host_down.as_deref() == Some(mach.name.as_str());
        let member = self.members.iter().find(|m| m.serial == mach.serial);
        let status = match member {
            Some(m)
                if running && s_partitioned_not(self, m.id) && !self.publish_silent(&mach.name) =>
            {
                Some(self.endpoint_status(m, p))
            }
            _ => None,
        };
        let (starts_unix_s, planned_starts_unix_s) = self.starts_of(&mach.name);
        // A linearizable read through a voter that answers, as the simulator tries
        // it: the in-place preflight needs every voter's (a requested restart is an
        // in-place step). (The other variants leave it untried, as before.)
        let tried = self.variant.in_place || self.variant.requests;
        let quorum_read = match (member, &status) {
            (Some(m), Some(_)) if tried && !m.is_learner => Some(self.leader.is_some()),
            _ => None,
        };
        MachineObservation {
            planned_starts_unix_s,
            process: if running || silent {
                ProcessState::Running
            } else {
                ProcessState::Stopped
            },
            has_data: p.is_some_and(|p| p.has_data),
            status,
            // Written with the data at its first start (the simulator covers the
            // marker's own step; data restored from a snapshot has none until
            // then); gone with it.
            marker: member
                .filter(|m| m.named && p.is_some_and(|p| p.has_data))
                .map(|m| DataMarker {
                    cluster_id: CLUSTER_ID,
                    member_id: m.id,
                }),
            quorum_read,
            starts_unix_s,
            running_version: p.filter(|p| p.running && !silent).map(|p| p.binary),
        }
    }

    /// The status the endpoint of member `m` (process `p`) answers.
    fn endpoint_status(&self, m: &MMember, p: Option<&Proc>) -> EndpointStatus {
        EndpointStatus {
            member_id: m.id,
            leader_id: self.leader.unwrap_or(0),
            raft_term: 1,
            raft_index: if m.caught_up { 100 } else { 0 },
            raft_applied_index: if m.caught_up { 100 } else { 0 },
            version: p.map(|p| p.binary),
            is_learner: m.is_learner,
            alarms: vec![],
            cluster_id: CLUSTER_ID,
            revision: 0,
            db_size_bytes: 0,
            db_size_in_use_bytes: 0,
        }
    }

    /// The member list as the leader gives it.
    fn member_list(&self) -> Vec<Member> {
        self.members
            .iter()
            .map(|m| Member {
                id: m.id,
                name: if m.named {
                    self.machine_of(m)
                        .map(|x| x.name.clone())
                        .unwrap_or_default()
                } else {
                    String::new()
                },
                peer_urls: vec![m.peer_url.clone()],
                // etcd lists a member's client URLs once it has started (the
                // core's sign that it ran).
                client_urls: if m.named {
                    vec![m.peer_url.replace(":2380", ":2379")]
                } else {
                    vec![]
                },
                is_learner: m.is_learner,
            })
            .collect()
    }

    fn goal(&self) -> bool {
        if self.partitioned.is_some() {
            return false;
        }
        let data_everywhere = self.procs.iter().all(|p| p.has_data);
        let in_place_done = !self.variant.in_place
            || (self.cluster_new && self.machines.iter().all(|m| m.in_place.is_none()));
        let requests_done = !self.variant.requests
            || (self
                .machines
                .iter()
                .all(|m| m.requested.is_none() && m.in_place.is_none())
                && !self.machines.iter().any(|m| m.name == "m-1"));
        data_everywhere
            && in_place_done
            && requests_done
            && self.cp.ca_rotation.is_none()
            && self.cp.road.is_none()
            && self.machines.len() == 3
            && self
                .machines
                .iter()
                .all(|m| m.version == NEW && !m.deleting)
            && self.members.len() == 3
            && self
                .members
                .iter()
                .all(|m| !m.is_learner && self.member_running(m))
    }

    /// What the controller's pass starts with (`pass::Memory`), in the model's abstract
    /// time: its health memory, and its pacing, which saw the leaving machines at 0 if
    /// its drain clock started.
    fn pass_memory(&self) -> pass::Memory<Remembered> {
        let mut pacing = Pacing::default();
        if self.drain_started {
            pacing.observe(0, &self.machines);
        }
        let health = Remembered {
            memory: self.memory.clone(),
            after_s: self.cp.spec.remediation.unhealthy_after.as_secs() as i64,
        };
        pass::Memory::with(health, pacing)
    }

    /// The controller's clock during a pass, in the model's abstract time: when the
    /// leaving machines were seen (0), or past their drain.
    fn pass_now_ms(&self) -> u64 {
        if self.drain_passed {
            Pacing::default().policy().drain_ms
        } else {
            0
        }
    }

    /// A removal of a leaving machine's member, against the ground truth.
    fn check_removal_paced(&self, machine: &str) -> Result<(), String> {
        if !self.machines.iter().any(|m| m.name == machine) {
            return Ok(());
        }
        if !self.drained.iter().any(|m| m == machine) {
            return Err(format!(
                "the member of {machine} removed before its drain passed"
            ));
        }
        if self.lb_serves.iter().any(|m| m == machine) {
            return Err(format!(
                "the member of {machine} removed while the load balancer still sends clients to it"
            ));
        }
        Ok(())
    }

    /// Safety properties of this state.
    fn check(&self) -> Result<(), String> {
        // A recovery begins where quorum is gone; once it ends, quorum holds again.
        if !self.has_quorum() && self.cp.rebuild.is_none() {
            return Err("quorum lost".into());
        }
        let learners = self.members.iter().filter(|m| m.is_learner).count();
        if learners > 1 {
            return Err(format!("{learners} learners"));
        }
        let removing = self.machines.iter().any(|x| {
            x.deleting
                && self
                    .members
                    .iter()
                    .any(|m| m.serial == x.serial && !m.is_learner)
        });
        // Quorum's own steps never start an add beside a removal; a deposed
        // controller's stale add may land beside one (the learner is then promoted, or
        // removed as an orphan, before the removal: `finish_learner` and
        // `remove_orphan` come first).
        let stale = self
            .members
            .iter()
            .any(|m| m.is_learner && self.stale_learner.as_ref() == Some(&m.peer_url));
        if learners == 1 && removing && !stale {
            return Err("an add and a removal in flight together".into());
        }
        self.check_ca_trust()?;
        self.check_client_reach()?;
        self.check_in_place()
    }

    /// Every running member trusts every other running member's peer certificate and
    /// quorum's own, and quorum every running member's server certificate.
    fn check_ca_trust(&self) -> Result<(), String> {
        let running: Vec<(&str, CaGenerations)> = self
            .procs
            .iter()
            .filter(|p| {
                p.running
                    && self.machines.iter().any(|m| {
                        m.name == p.name && self.members.iter().any(|x| x.serial == m.serial)
                    })
            })
            .map(|p| (p.name.as_str(), p.files))
            .collect();
        match quorum_core::first_distrust(&self.cp, &running) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
}

/// The client addresses of the model's control plane: its three members' and a spare.
fn given_addresses() -> Vec<std::net::SocketAddrV4> {
    (1..=4)
        .map(|i| {
            std::net::SocketAddrV4::new(
                Ipv4Addr::new(127, 1, 0, i),
                quorum_core::model::CLIENT_PORT,
            )
        })
        .collect()
}

impl State {
    /// A new machine's address, as the stores choose it (`crate::take_address`); a
    /// fresh one is `127.1.k.<serial>`, k counting the fresh addresses of the
    /// allocation.
    pub(super) fn take_address(&mut self) -> Ipv4Addr {
        let peer_urls: Vec<String> = self.members.iter().map(|m| m.peer_url.clone()).collect();
        let serial = self.next_serial as u8;
        // Each fresh address another: the machine's first, then the spares.
        let mut k = 0u8;
        crate::take_address(&mut self.cp, &self.machines, &peer_urls, || {
            k += 1;
            Ipv4Addr::new(127, 1, k, serial)
        })
        .expect("a fresh address is always there")
    }

    /// A client given the client addresses finds a voter on one of them (`reach`),
    /// except during a rebuild a person confirmed.
    fn check_client_reach(&self) -> Result<(), String> {
        // A control plane brought back has new addresses: its clients are given them.
        if self.cp.rebuild.is_some() || self.variant.recovery || self.variant.recreate {
            return Ok(());
        }
        let given = given_addresses();
        let on_given = self.voters().any(|m| {
            self.machines
                .iter()
                .any(|x| x.serial == m.serial && given.contains(&x.client_address()))
        });
        if on_given {
            Ok(())
        } else {
            Err("a client given the client addresses finds no voter on them".into())
        }
    }
}

/// The serial a model machine's peer URL ends in (`http://127.1.0.<serial>:2380`).
fn serial_of_url(url: &str) -> u64 {
    url.rsplit_once(':')
        .and_then(|(host, _)| host.rsplit_once('.'))
        .and_then(|(_, last)| last.parse().ok())
        .unwrap_or(0)
}

fn s_partitioned_not(s: &State, id: u64) -> bool {
    s.partitioned != Some(id)
}

mod explore;
mod inplace;
mod perform;
mod publish;
mod rebuild;
#[cfg(test)]
mod tests;

pub use explore::check;
