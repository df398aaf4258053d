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
use quorum_core::pacing::{Pacing, PacingInput, Verdict};
use quorum_core::{
    decide, quorum_size, Action, ControlPlane, ControlPlaneSpec, DataMarker, EndpointStatus,
    Machine, MachineObservation, Member, Observation, ProcessState, RolloutStrategy, Version,
};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::net::Ipv4Addr;

pub const MAX_CRASHES: u8 = 2;
const OLD: Version = Version::new(3, 4, 23);
const NEW: Version = Version::new(3, 5, 1);
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
    /// remediation waits for the removal), and a deposed controller's stale start of a
    /// machine whose disk is lost meanwhile (nothing checks the data again at the start).
    pub faults_anywhere: bool,
}

impl Variant {
    /// The systems checked: quorum alone (etcd's check off, so quorum's own projection
    /// is the only guard), and quorum with a deposed controller (which only etcd's
    /// check can stop from performing a removal it decided before a member died;
    /// fencing and the leadership re-check of the distributed store narrow that window).
    pub const ALL: [Variant; 4] = [
        Variant {
            max_surge: 1,
            etcd_strict: false,
            deposed: false,
            faults_anywhere: false,
        },
        Variant {
            max_surge: 0,
            etcd_strict: false,
            deposed: false,
            faults_anywhere: false,
        },
        Variant {
            max_surge: 1,
            etcd_strict: true,
            deposed: true,
            faults_anywhere: false,
        },
        Variant {
            max_surge: 0,
            etcd_strict: true,
            deposed: true,
            faults_anywhere: false,
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
    /// Empty when every property holds.
    pub violations: Vec<String>,
}

fn machine(serial: u64, version: Version) -> Machine {
    Machine {
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

/// 3 healthy members at OLD, spec at NEW.
pub fn initial(variant: Variant) -> State {
    let machines: Vec<Machine> = (1..=3).map(|i| machine(i, OLD)).collect();
    let max_surge = variant.max_surge;
    State {
        variant,
        cp: ControlPlane {
            name: "m".into(),
            spec: ControlPlaneSpec {
                replicas: 3,
                version: NEW,
                rollout: RolloutStrategy {
                    max_surge,
                    ..RolloutStrategy::default()
                },
                paused: false,
                haproxy: None,
                certificates: Default::default(),
                insecure_plaintext: true,
                remediation: Default::default(),
                maintenance: Default::default(),
            },
            deleting: false,
        },
        procs: machines
            .iter()
            .map(|m| Proc {
                name: m.name.clone(),
                running: true,
                has_data: true,
            })
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

    fn observe(&self) -> Observation {
        let mut obs = Observation::default();
        for mach in &self.machines {
            let p = self.proc(&mach.name);
            let running = p.is_some_and(|p| p.running);
            let member = self.members.iter().find(|m| m.serial == mach.serial);
            let status = match member {
                Some(m) if running && s_partitioned_not(self, m.id) => Some(EndpointStatus {
                    member_id: m.id,
                    leader_id: self.leader.unwrap_or(0),
                    raft_term: 1,
                    raft_index: if m.caught_up { 100 } else { 0 },
                    raft_applied_index: if m.caught_up { 100 } else { 0 },
                    version: Some(mach.version),
                    is_learner: m.is_learner,
                    alarms: vec![],
                    cluster_id: CLUSTER_ID,
                    revision: 0,
                    db_size_bytes: 0,
                    db_size_in_use_bytes: 0,
                }),
                _ => None,
            };
            obs.machines.insert(
                mach.name.clone(),
                MachineObservation {
                    process: if running {
                        ProcessState::Running
                    } else {
                        ProcessState::Stopped
                    },
                    has_data: p.is_some_and(|p| p.has_data),
                    status,
                    // Written with the data at its first start (the simulator covers the
                    // marker's own step); gone with it.
                    marker: member
                        .filter(|_| p.is_some_and(|p| p.has_data))
                        .map(|m| DataMarker {
                            cluster_id: CLUSTER_ID,
                            member_id: m.id,
                        }),
                    quorum_read: None,
                    starts_unix_s: vec![],
                    running_version: None,
                },
            );
        }
        obs.now_unix_s = NOW_UNIX_S;
        obs.problem_since_unix_s = self.problem_since();
        if self.leader.is_some() {
            obs.members = Some(
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
                    .collect(),
            );
        }
        obs
    }

    fn goal(&self) -> bool {
        if self.partitioned.is_some() {
            return false;
        }
        let data_everywhere = self.procs.iter().all(|p| p.has_data);
        data_everywhere
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

    /// The start of a controller's pass: it publishes the endpoints (without the leaving
    /// machines), brings a reachable load balancer in step, and its pacing sees the
    /// leaving machines (their drain clock starts).
    fn begin_pass(&mut self) {
        if self.lb_reachable {
            self.lb_serves.clear();
        }
        if self.machines.iter().any(|m| m.deleting) {
            self.drain_started = true;
        }
    }

    /// Since when each remembered problem holds, as the tracker would say it.
    fn problem_since(&self) -> std::collections::BTreeMap<String, i64> {
        let after_s = self.cp.spec.remediation.unhealthy_after.as_secs() as i64;
        self.memory
            .iter()
            .map(|(m, due)| {
                (
                    m.clone(),
                    if *due {
                        NOW_UNIX_S - after_s
                    } else {
                        NOW_UNIX_S
                    },
                )
            })
            .collect()
    }

    /// The controller's pass takes in a fresh observation (`health::Tracker::observe`,
    /// in the model's abstract time): a machine with a problem that replacement repairs
    /// is remembered (not yet for `unhealthyAfter`), one without is forgotten.
    fn track(&mut self, observed: &Observation) {
        let problems = health::assess(&self.cp, &self.machines, observed);
        let remediable: Vec<String> = problems
            .into_iter()
            .filter(|(_, ps)| ps.iter().any(Problem::remediable))
            .map(|(m, _)| m)
            .collect();
        let old = std::mem::take(&mut self.memory);
        self.memory = remediable
            .into_iter()
            .map(|m| {
                let due = old.iter().any(|(o, d)| *o == m && *d);
                (m, due)
            })
            .collect();
    }

    /// The shared pacing policy's verdict on `a`, in the model's abstract time: the
    /// controller saw the leaving machines at 0 (if its clock started) and it is now
    /// either then or past the drain.
    fn pacing(&self, a: &Action) -> Verdict {
        let mut p = Pacing::default();
        if self.drain_started {
            p.observe(0, &self.machines);
        }
        let input = PacingInput {
            now_ms: if self.drain_passed {
                p.policy().drain_ms
            } else {
                0
            },
            lb_in_step: self.lb_reachable,
        };
        p.check(a, &input)
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
        if !self.has_quorum() {
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
        Ok(())
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

/// Performs one action. `fenced`: the deposed controller, whose store writes fail.
/// Returns false if etcd refused (the rest of the decision is not performed), or an
/// error for a violated property.
fn perform(s: &mut State, a: &Action, fenced: bool) -> Result<bool, String> {
    match a {
        Action::AllocateMachine {
            bootstrap,
            version,
            remediation,
        } => {
            if !fenced {
                let m = Machine {
                    bootstrap: *bootstrap,
                    remediation: remediation.clone(),
                    ..machine(s.next_serial, *version)
                };
                s.next_serial += 1;
                s.procs.push(Proc {
                    name: m.name.clone(),
                    running: false,
                    has_data: false,
                });
                s.machines.push(m);
            }
        }
        Action::MarkDeleting {
            machine,
            remediation,
            ..
        } => {
            if !fenced {
                if let Some(m) = s.machines.iter_mut().find(|m| &m.name == machine) {
                    m.deleting = true;
                    if remediation.is_some() {
                        m.remediation = remediation.clone();
                    }
                    // It leaves the endpoints at the next pass: a new drain, and the
                    // load balancer serves it until a pass brings it in step.
                    s.drain_started = false;
                    s.drain_passed = false;
                    s.lb_serves.push(machine.clone());
                }
            }
        }
        // The model's data directories carry their marker from their first start (it
        // is the observation's `marker`), and its keyspace never fills: the simulator
        // covers markers and space upkeep.
        Action::ForgetControlPlane
        | Action::WriteMarker { .. }
        | Action::Compact { .. }
        | Action::Defragment { .. }
        | Action::DisarmAlarm { .. } => {}
        Action::StartMachine { machine, state, .. } => {
            let serial = s
                .machines
                .iter()
                .find(|m| &m.name == machine)
                .map(|m| m.serial);
            let Some(serial) = serial else {
                return Ok(true);
            };
            if *state == quorum_core::ClusterState::New {
                return Err(format!(
                    "{machine} started with `new` after the cluster formed"
                ));
            }
            let lost = s.members.iter().any(|m| m.serial == serial && m.named)
                && s.proc(machine).is_some_and(|p| !p.has_data && !p.running);
            if lost {
                return Err(format!("{machine} started on lost data"));
            }
            let is_member = s.members.iter().any(|m| m.serial == serial);
            // etcd started for a machine that is not a member exits at once.
            if is_member {
                if let Some(p) = s.proc_mut(machine) {
                    p.running = true;
                    p.has_data = true;
                }
                if let Some(m) = s.members.iter_mut().find(|m| m.serial == serial) {
                    m.named = true;
                }
            }
        }
        Action::AddLearner { peer_url, .. } => {
            if s.leader.is_none() {
                return Ok(false);
            }
            if s.members.iter().any(|m| &m.peer_url == peer_url) {
                return Ok(true); // already done
            }
            if s.members.iter().any(|m| m.is_learner) {
                return Ok(false); // too many learners
            }
            let id = s.next_member_id;
            s.next_member_id += 1;
            s.members.push(MMember {
                id,
                peer_url: peer_url.clone(),
                serial: serial_of_url(peer_url),
                named: false,
                is_learner: true,
                caught_up: false,
            });
        }
        Action::Promote { member_id, .. } => {
            if s.leader.is_none() {
                return Ok(false);
            }
            match s.members.iter_mut().find(|m| m.id == *member_id) {
                Some(m) if m.is_learner && !m.caught_up => return Ok(false),
                Some(m) => m.is_learner = false,
                None => return Ok(false),
            }
        }
        Action::MoveLeader { to_member, .. } => {
            let ok = s
                .members
                .iter()
                .any(|m| m.id == *to_member && !m.is_learner && s.member_running(m));
            if s.leader.is_none() || !ok {
                return Ok(false);
            }
            s.leader = Some(*to_member);
        }
        Action::RemoveMember { member_id, machine } => {
            if let Some(m) = machine {
                s.check_removal_paced(m)?;
            }
            if s.leader.is_none() {
                return Ok(false);
            }
            // etcd's strict reconfiguration check (on by default): a removal must leave a
            // running majority of the remaining voters. quorum's own projection never
            // relies on it; a deposed controller's stale removal, decided before a member
            // died, is what it stops.
            let remaining: Vec<&MMember> = s.voters().filter(|m| m.id != *member_id).collect();
            let running = remaining.iter().filter(|m| s.member_running(m)).count();
            let voter = s
                .members
                .iter()
                .any(|m| m.id == *member_id && !m.is_learner);
            if s.variant.etcd_strict && voter && running < quorum_size(remaining.len()) {
                return Ok(false);
            }
            s.members.retain(|m| m.id != *member_id);
            if s.leader == Some(*member_id) {
                s.leader = None;
            }
        }
        Action::StopMachine { machine } => {
            if let Some(p) = s.proc_mut(machine) {
                p.running = false;
            }
        }
        Action::DeleteMachine { machine } => {
            if let Some(m) = s.machines.iter().find(|m| &m.name == machine) {
                let serial = m.serial;
                if s.members
                    .iter()
                    .any(|x| x.serial == serial && !x.is_learner)
                {
                    return Err(format!("{machine} deleted while its member votes"));
                }
            }
            if let Some(p) = s.proc_mut(machine) {
                p.running = false;
                p.has_data = false;
            }
            if !fenced {
                s.machines.retain(|m| &m.name != machine);
                s.procs.retain(|p| &p.name != machine);
                s.drained.retain(|m| m != machine);
                s.lb_serves.retain(|m| m != machine);
            }
        }
    }
    Ok(true)
}

/// Every successor of `s`, or a violated property.
fn successors(s: &State) -> Result<Vec<(String, State)>, String> {
    let mut out = Vec::new();
    // The controller's pass starts with its health memory brought up to date.
    let mut tracked = s.clone();
    let mut observed = s.observe();
    tracked.track(&observed);
    observed.problem_since_unix_s = tracked.problem_since();
    let d = decide(&tracked.cp, &tracked.machines, &observed);
    if d.actions.is_empty() && tracked != *s {
        out.push((
            "controller: notes the problems it sees".to_string(),
            tracked.clone(),
        ));
    }
    if d.actions
        .iter()
        .filter(|a| a.is_membership_change())
        .count()
        > 1
    {
        return Err("several membership changes in one decision".into());
    }
    // The controller performs a prefix of the decision (a shorter one is a crash).
    for k in 1..=d.actions.len() {
        let crash = k < d.actions.len();
        if crash && s.crashes >= MAX_CRASHES {
            continue;
        }
        let mut n = tracked.clone();
        n.begin_pass();
        let mut steps = Vec::new();
        for a in &d.actions[..k] {
            // Held by pacing (draining, the load balancer behind): the pass ends, as
            // after a refusal.
            if let Verdict::Wait(hold) = n.pacing(a) {
                steps.push(format!("holds '{a}' ({hold})"));
                break;
            }
            steps.push(a.to_string());
            if !perform(&mut n, a, false)? {
                break;
            }
        }
        let mut label = steps.join(", ");
        if crash {
            n.crashes += 1;
            // Its pacing and health memory go with it: the next controller drains again
            // and counts every problem afresh.
            n.drain_started = false;
            n.drain_passed = false;
            n.memory.clear();
            label.push_str(" (then the controller crashes)");
        }
        out.push((format!("controller: {label}"), n));
    }
    // The deposed controller decides now and acts later, once. Its pass brings a
    // reachable load balancer in step too, and its step passed the same pacing check.
    if s.variant.deposed && s.stale.is_none() && !s.stale_used {
        if let Some(a) = d.actions.first() {
            let mut n = tracked.clone();
            if n.lb_reachable {
                n.lb_serves.clear();
            }
            let held = s.variant.faults_anywhere || !matches!(a, Action::StartMachine { .. });
            if held && n.pacing(a) == Verdict::Go {
                n.stale = Some(a.clone());
                out.push((format!("deposed controller decides: {a}"), n));
            }
        }
    }
    if let Some(a) = &s.stale {
        let mut n = s.clone();
        n.stale = None;
        n.stale_used = true;
        let added = |x: &State, url: &str| x.members.iter().any(|m| m.peer_url == url);
        if let Action::AddLearner { peer_url, .. } = a {
            if !added(&n, peer_url) {
                perform(&mut n, a, true)?;
                if added(&n, peer_url) {
                    n.stale_learner = Some(peer_url.clone());
                }
            }
        } else {
            perform(&mut n, a, true)?;
        }
        out.push((format!("deposed controller performs: {a}"), n));
    }
    // The environment.
    for (i, m) in s.members.iter().enumerate() {
        if m.is_learner && !m.caught_up && s.member_running(m) {
            let mut n = s.clone();
            n.members[i].caught_up = true;
            out.push((format!("learner {} catches up", m.id), n));
        }
    }
    for (i, p) in s.procs.iter().enumerate() {
        let member = s
            .machines
            .iter()
            .find(|x| x.name == p.name)
            .and_then(|x| s.members.iter().find(|m| m.serial == x.serial));
        if p.running && member.is_none() {
            // A removed member's process shuts itself down.
            let mut n = s.clone();
            n.procs[i].running = false;
            out.push((format!("removed member's process {} exits", p.name), n));
        }
    }
    // One fault per run (a death or a cut-off member): a 3-member cluster tolerates one
    // failure. With two (a voter dead and the learner cut off), a deposed controller's
    // promote decided before both can lose quorum: that window is bounded by the
    // distributed store's fencing and leadership re-check, not by this core.
    let fault_free = !s.died && !s.partition_used && !s.disk_lost;
    let leaving = s.machines.iter().any(|m| m.deleting);
    let disk_may_go = s.variant.faults_anywhere || !leaving;
    if fault_free {
        // A member's process dies (once), or its disk is lost with it: only when a
        // majority would still run, so any quorum loss is quorum's doing, not the
        // environment's.
        for (i, p) in s.procs.iter().enumerate() {
            if !p.running {
                continue;
            }
            let mut n = s.clone();
            n.procs[i].running = false;
            n.died = true;
            if n.has_quorum() {
                let mut lost = n.clone();
                lost.died = false;
                lost.disk_lost = true;
                lost.procs[i].has_data = false;
                if lost.leader.is_some_and(|l| {
                    lost.members
                        .iter()
                        .find(|m| m.id == l)
                        .is_some_and(|m| !lost.member_running(m))
                }) {
                    lost.leader = None;
                }
                if disk_may_go {
                    out.push((format!("{} loses its disk", p.name), lost));
                }
                let dead_leader = n
                    .leader
                    .and_then(|l| n.members.iter().find(|m| m.id == l))
                    .is_some_and(|m| !n.member_running(m));
                if dead_leader {
                    n.leader = None;
                }
                out.push((format!("{}'s process dies", p.name), n));
            }
        }
    }
    if fault_free {
        for m in s.members.iter().filter(|m| s.member_running(m)) {
            let mut n = s.clone();
            n.partitioned = Some(m.id);
            n.partition_used = true;
            if n.has_quorum() {
                if n.leader == Some(m.id) {
                    n.leader = None;
                }
                out.push((format!("member {} hangs (or is cut off)", m.id), n));
            }
        }
    }
    if s.partitioned.is_some() {
        let mut n = s.clone();
        n.partitioned = None;
        out.push(("the hung member resumes".to_string(), n));
    }
    // Time: a problem the controller remembers lasts `unhealthyAfter` (each on its own,
    // so its memory may say anything about the problems it sees).
    for (i, (m, due)) in s.memory.iter().enumerate() {
        if !due {
            let mut n = s.clone();
            n.memory[i].1 = true;
            out.push((format!("{m}'s problem lasts unhealthyAfter"), n));
        }
    }
    // Time: the controller's drain clock passes (the leaving machines' endpoints have
    // been unpublished at least that long).
    if s.drain_started && !s.drain_passed {
        let mut n = s.clone();
        n.drain_passed = true;
        for m in s.machines.iter().filter(|m| m.deleting) {
            if !n.drained.contains(&m.name) {
                n.drained.push(m.name.clone());
            }
        }
        out.push(("the drain passes".to_string(), n));
    }
    if s.lb_reachable && !s.lb_fault_used {
        let mut n = s.clone();
        n.lb_reachable = false;
        n.lb_fault_used = true;
        out.push(("the load balancer becomes unreachable".to_string(), n));
    }
    if !s.lb_reachable {
        let mut n = s.clone();
        n.lb_reachable = true;
        out.push(("the load balancer is reachable again".to_string(), n));
    }
    if s.leader.is_none() {
        if let Some(m) = s
            .voters()
            .filter(|m| s.member_running(m))
            .min_by_key(|m| m.id)
        {
            let mut n = s.clone();
            n.leader = Some(m.id);
            out.push((format!("member {} is elected", m.id), n));
        }
    }
    for (_, n) in &mut out {
        n.members.sort_by_key(|m| m.id);
        n.procs.sort_by(|a, b| a.name.cmp(&b.name));
        n.machines.sort_by_key(|m| m.serial);
        n.drained.sort();
        n.lb_serves.sort();
        n.lb_serves.dedup();
        n.memory.sort();
    }
    Ok(out)
}

/// Explores every reachable state from `initial(variant)`.
pub fn check(variant: Variant) -> Report {
    let start = initial(variant);
    // States by their hash (the states themselves are kept once, in `states`).
    let mut index: HashMap<u64, Vec<usize>, BuildHasherDefault<FxHasher>> = HashMap::default();
    let mut states: Vec<State> = Vec::new();
    let mut edges: Vec<Vec<usize>> = Vec::new();
    let mut depth: Vec<usize> = Vec::new();
    let mut parent: Vec<Option<(usize, String)>> = vec![None];
    let mut queue = VecDeque::new();
    let mut violations = Vec::new();
    index.insert(fx_hash(&start), vec![0]);
    states.push(start);
    edges.push(vec![]);
    depth.push(0);
    queue.push_back(0);
    let mut transitions = 0;
    while let Some(i) = queue.pop_front() {
        if let Err(e) = states[i].check() {
            violations.push(format!("{e}, after: {}", path_to(&parent, i)));
            break;
        }
        let next = match successors(&states[i]) {
            Ok(n) => n,
            Err(e) => {
                violations.push(format!("{e}, after: {}", path_to(&parent, i)));
                break;
            }
        };
        for (label, n) in next {
            transitions += 1;
            let h = fx_hash(&n);
            let seen = index
                .get(&h)
                .and_then(|js| js.iter().copied().find(|j| states[*j] == n));
            let j = match seen {
                Some(j) => j,
                None => {
                    let j = states.len();
                    if j >= MAX_STATES {
                        violations.push(format!(
                            "more than {MAX_STATES} states: the model is unbounded"
                        ));
                        break;
                    }
                    index.entry(h).or_default().push(j);
                    states.push(n);
                    parent.push(Some((i, label)));
                    edges.push(vec![]);
                    depth.push(depth[i] + 1);
                    queue.push_back(j);
                    j
                }
            };
            if j != i {
                edges[i].push(j);
            }
        }
        if !violations.is_empty() {
            break;
        }
    }
    // Liveness: terminal states are goals, and a goal is reachable from every state.
    let goal: Vec<bool> = states.iter().map(State::goal).collect();
    if violations.is_empty() {
        for (i, s) in states.iter().enumerate() {
            if edges[i].is_empty() && !goal[i] {
                let _ = s;
                violations.push(format!(
                    "stuck (no next step, not upgraded), after: {}",
                    path_to(&parent, i)
                ));
                break;
            }
        }
    }
    if violations.is_empty() {
        let mut reverse: Vec<Vec<usize>> = vec![vec![]; states.len()];
        for (i, es) in edges.iter().enumerate() {
            for &j in es {
                reverse[j].push(i);
            }
        }
        let mut reaches = goal.clone();
        let mut q: VecDeque<usize> = (0..states.len()).filter(|&i| goal[i]).collect();
        while let Some(j) = q.pop_front() {
            for &i in &reverse[j] {
                if !reaches[i] {
                    reaches[i] = true;
                    q.push_back(i);
                }
            }
        }
        if let Some(i) = (0..states.len()).find(|&i| !reaches[i]) {
            violations.push(format!("no way to finish, after: {}", path_to(&parent, i)));
        }
    }
    Report {
        states: states.len(),
        transitions,
        max_depth: depth.iter().copied().max().unwrap_or(0),
        goal_states: goal.iter().filter(|g| **g).count(),
        disk_lost_states: states.iter().filter(|s| s.disk_lost).count(),
        remediation_states: states
            .iter()
            .filter(|s| s.machines.iter().any(|m| m.remediation.is_some()))
            .count(),
        violations,
    }
}

/// FxHash (rustc's): the explored states are hashed millions of times, and SipHash's
/// resistance to chosen keys buys nothing here.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        for b in chunks.remainder() {
            self.add(u64::from(*b));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

fn fx_hash(s: &State) -> u64 {
    let mut h = FxHasher::default();
    s.hash(&mut h);
    h.finish()
}

/// The steps from the initial state to state `i`.
fn path_to(parent: &[Option<(usize, String)>], mut i: usize) -> String {
    let mut steps = Vec::new();
    while let Some((p, label)) = &parent[i] {
        steps.push(label.clone());
        i = *p;
    }
    steps.reverse();
    steps.join(" -> ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_core::ClusterState;

    #[test]
    fn the_initial_state_is_safe_and_not_the_goal() {
        let s = initial(Variant::ALL[0]);
        assert!(s.check().is_ok());
        assert!(!s.goal());
    }

    #[test]
    fn the_checker_sees_a_lost_quorum() {
        let mut s = initial(Variant::ALL[0]);
        s.procs[0].running = false;
        s.procs[1].running = false;
        assert!(s.check().is_err());
    }

    #[test]
    fn members_match_machines_by_the_serial_in_their_url() {
        let m = machine(12, NEW);
        assert_eq!(serial_of_url(&m.peer_url()), 12);
        assert_eq!(serial_of_url("http://127.250.0.1:2380"), 1);
        assert_eq!(serial_of_url("nonsense"), 0);
    }

    #[test]
    fn the_checker_sees_a_start_on_lost_data_or_with_new() {
        let mut s = initial(Variant::ALL[0]);
        s.procs[1].running = false;
        s.procs[1].has_data = false;
        let start = |state| Action::StartMachine {
            machine: "m-2".into(),
            state,
            initial_cluster: vec![],
            expect: None,
        };
        let err = perform(&mut s, &start(ClusterState::Existing), false).unwrap_err();
        assert!(err.contains("started on lost data"), "{err}");
        let err = perform(&mut s, &start(ClusterState::New), false).unwrap_err();
        assert!(err.contains("`new` after the cluster formed"), "{err}");
    }

    #[test]
    fn a_lost_disk_is_remembered_then_remediated() {
        let mut s = initial(Variant::ALL[0]);
        s.procs[1].running = false;
        s.procs[1].has_data = false;
        s.disk_lost = true;
        // The pass notes the problem; nothing is replaced before it lasts.
        let next = successors(&s).unwrap();
        let (_, noted) = next
            .iter()
            .find(|(l, _)| l == "controller: notes the problems it sees")
            .expect("noted");
        assert_eq!(noted.memory, [("m-2".to_string(), false)]);
        assert!(
            controller_labels(noted).is_empty(),
            "{:?}",
            controller_labels(noted)
        );
        let (_, due) = successors(noted)
            .unwrap()
            .into_iter()
            .find(|(l, _)| l == "m-2's problem lasts unhealthyAfter")
            .expect("time passes");
        let labels = controller_labels(&due);
        assert_eq!(labels.len(), 1, "{labels:?}");
        assert!(
            labels[0].starts_with("controller: mark m-2 for replacement (attempt 1: lost its data"),
            "{labels:?}"
        );
        // A crash forgets: the next controller counts afresh.
        let mut crashed = due.clone();
        crashed.memory.clear();
        assert_eq!(
            controller_labels(&crashed),
            ["controller: notes the problems it sees"]
        );
    }

    #[test]
    fn a_fenced_deletion_keeps_the_record() {
        let mut s = initial(Variant::ALL[0]);
        s.members.retain(|m| m.id != 1);
        perform(
            &mut s,
            &Action::DeleteMachine {
                machine: "m-1".into(),
            },
            true,
        )
        .unwrap();
        assert!(s.machines.iter().any(|m| m.name == "m-1"));
        assert!(!s.procs[0].running);
    }

    #[test]
    fn the_start_of_a_non_member_does_not_run() {
        let mut s = initial(Variant::ALL[0]);
        perform(
            &mut s,
            &Action::AllocateMachine {
                bootstrap: false,
                version: NEW,
                remediation: None,
            },
            false,
        )
        .unwrap();
        let a = Action::StartMachine {
            machine: "m-4".into(),
            state: ClusterState::Existing,
            initial_cluster: vec![],
            expect: None,
        };
        perform(&mut s, &a, false).unwrap();
        assert!(!s.proc("m-4").unwrap().running);
    }

    /// maxSurge 0: the first step marks m-2 leaving; then its removal is due.
    fn leaving() -> State {
        let mut s = initial(Variant::ALL[1]);
        let (_, n) = successors(&s)
            .unwrap()
            .into_iter()
            .find(|(l, _)| l.starts_with("controller: mark m-2"))
            .expect("m-2 marked");
        s = n;
        assert!(s.lb_serves.contains(&"m-2".to_string()));
        s
    }

    fn controller_labels(s: &State) -> Vec<String> {
        successors(s)
            .unwrap()
            .into_iter()
            .map(|(l, _)| l)
            .filter(|l| l.starts_with("controller:"))
            .collect()
    }

    #[test]
    fn a_removal_is_enabled_only_once_drained_with_the_load_balancer_in_step() {
        let mut s = leaving();
        // Member 1 leads: the removal of m-2 is the next step, once paced.
        let removal = "controller: remove the member of m-2".to_string();
        assert!(!controller_labels(&s).contains(&removal));
        s.begin_pass();
        assert!(s.drain_started && !s.drain_passed);
        assert!(
            s.lb_serves.is_empty(),
            "a reachable load balancer is brought in step"
        );
        s.drain_passed = true;
        s.drained.push("m-2".into());
        s.lb_reachable = false;
        assert!(
            !controller_labels(&s).contains(&removal),
            "{:?}",
            controller_labels(&s)
        );
        s.lb_reachable = true;
        assert!(
            controller_labels(&s).contains(&removal),
            "{:?}",
            controller_labels(&s)
        );
    }

    #[test]
    fn the_checker_sees_a_removal_before_the_drain_or_behind_the_load_balancer() {
        let a = Action::RemoveMember {
            member_id: 2,
            machine: Some("m-2".into()),
        };
        let mut s = leaving();
        let err = perform(&mut s, &a, false).unwrap_err();
        assert!(err.contains("before its drain passed"), "{err}");
        let mut s = leaving();
        s.drained.push("m-2".into());
        let err = perform(&mut s, &a, false).unwrap_err();
        assert!(err.contains("load balancer still sends clients"), "{err}");
        s.lb_serves.clear();
        assert_eq!(perform(&mut s, &a, false), Ok(true));
    }
}
