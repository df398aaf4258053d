//! quorum-sim: drives the real `quorum_core::decide` against a simulated etcd cluster,
//! a simulated machine provider and a simulated clock, all from one seed.
//!
//! The simulated etcd follows the rules that matter to quorum: a quorum of connected
//! voters elects a leader and commits writes; one learner at most; learners neither vote
//! nor lead; a learner is promoted only at 90% of the leader's log; leadership moves only
//! from the leader to a connected voter; a removed member stops about a second later; a
//! member must be added before its process starts; the strict reconfiguration check
//! refuses an add unless the leader has been connected to every voter for 5 s, and a
//! removal unless a quorum of the remaining voters has been; and the answers etcd gives:
//! its real (gRPC code, message) pairs from `quorum_core::classify` ("unhealthy
//! cluster", "Peer URLs already exists", "member not found", ...), turned into success,
//! refusal or failure by the same classifier `quorum-etcd` uses.
//!
//! Faults, chosen by the seed during a fault window: controller crash (at any point of a
//! decision's actions, losing everything not in the durable store), a lost answer after
//! the change applied, a timeout before the call reached etcd, a member process dying, a
//! member partitioned from its peers or from the controller, a slow learner, a leader
//! change. The fault budget keeps at most one member impaired at a time, so faults alone
//! never take quorum away: any quorum loss is quorum's own doing.
//!
//! The controller paces its actions by the core's one pacing policy
//! (`quorum_core::pacing`, the type the real controller drives): it publishes the client
//! endpoints before it acts, a member of a leaving machine is removed only once the drain
//! time has passed in simulated time and while the simulated load balancer (HAProxy, in
//! half of the seeds) is in step, and a refused or failed action is retried after the
//! shared backoff with jitter from the seeded generator (delays longer than one step
//! skip steps). A seeded fault makes the load balancer unreachable for a while, and
//! removals must wait for it. Checked against the ground truth at every removal: the
//! machine's endpoint has been unpublished for the drain time, and the load balancer no
//! longer sends clients to it.
//!
//! With `Config::replicas == 2` (`--replicas 2`), two controller replicas share the
//! durable store, as they share a management etcd in the real system. The store keeps a
//! leader key: holder, token (an increasing integer) and the lease's expiry by the
//! store's clock. The leader renews every TTL/3; a renewal moves the store's expiry and
//! the leader's own deadline to the same moment (send time + TTL), so the store never
//! sees the lease end before its holder does. Before each side effect the leader checks
//! that `lease::margin_ms` of its lease is left (`lease::may_act`), then makes a fenced
//! no-op write; every store write carries its token and is refused once the key is gone
//! or holds another token. A refused write, a refused renewal or a lease run out by its
//! own clock makes a leader step down (dropping its memory); a standby polls every
//! `lease::standby_poll_ms` and takes the key once it is free (a new token, fresh
//! memory). Faults added: a replica paused (SIGSTOP) for up to twice the TTL, keeping its
//! memory; a replica crashing and restarting as a standby; the lease lost right after a
//! member removal (the origin bug report); and a leader paused between its check and
//! one side effect for longer than the TTL, which it performs on resuming without
//! re-checking (the deposed leader's one stale side effect: its etcd and machine effects
//! land, its store writes are fenced; a member removal is held up so only with etcd's
//! strict reconfiguration check on, as nothing else stops a stale removal decided before
//! a member failed). With one replica (the default) nothing of this exists: the
//! controller leads without a lease, as with the embedded store, and every seed's trace
//! is what it was.
//!
//! After every step the invariants of DESIGN.md are checked (with two replicas also: no
//! side effect without a valid lease except the deposed leader's one in-flight step, and
//! never two replicas acting with valid leases in one step); after the fault window the
//! run must converge within a bounded number of steps. The same seed always gives the
//! same trace.

pub mod model;

use quorum_core::classify::{
    EtcdAnswer, EtcdCall, Verdict, BAD_LEADER_TRANSFEREE, CLIENT_DEADLINE, LEARNER_NOT_IN_SYNC,
    MEMBER_NOT_FOUND, NOT_A_LEARNER, NOT_LEADER, NO_LEADER, PEER_URLS_EXIST, TOO_MANY_LEARNERS,
    UNHEALTHY_CLUSTER,
};
use quorum_core::lease::{margin_ms, may_act, standby_poll_ms, DEFAULT_LEASE_TTL_MS};
use quorum_core::pacing::{self, Attempt, Hold, Pacing, PacingInput, PacingPolicy};
use quorum_core::{
    decide, quorum_size, Action, ClusterState, ControlPlane, ControlPlaneSpec, EndpointStatus,
    Machine, MachineObservation, Member, Observation, ProcessState, RolloutStrategy, Version,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// Simulated time per controller iteration (observe, decide, act).
pub const STEP_MS: u64 = 100;
/// etcd's strict reconfiguration health interval.
const HEALTH_INTERVAL_MS: u64 = 5_000;
/// A removed member's process exits this long after the removal.
const REMOVED_EXIT_MS: u64 = 1_000;
/// Time without a leader before a new election succeeds.
const ELECTION_MS: u64 = 1_000;
/// Steps after the fault window within which the run must converge.
pub const CONVERGE_WITHIN_STEPS: u64 = 3_000;
/// A crashed replica (of two) restarts as a standby after this many steps at least...
const RESTART_MIN_STEPS: u64 = 5;
/// ...plus up to this many more.
const RESTART_SPREAD_STEPS: u64 = 40;

/// splitmix64: small, fast, and the same on every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        self.next_u64() % n
    }
    /// True with probability `per_mille`/1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// 3 members at 3.4.23 rolled to 3.5.1 (maxSurge 1).
    Rollout,
    /// The same with maxSurge 0.
    RolloutSurge0,
    /// 1 -> 3 members.
    ScaleUp,
    /// 5 -> 3 members.
    ScaleDown,
    /// 3 members plus orphan members (a voter and an added-but-never-started learner)
    /// that match no machine.
    Orphans,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::Rollout,
        Scenario::RolloutSurge0,
        Scenario::ScaleUp,
        Scenario::ScaleDown,
        Scenario::Orphans,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Rollout => "rollout",
            Scenario::RolloutSurge0 => "rollout-surge0",
            Scenario::ScaleUp => "scale-up",
            Scenario::ScaleDown => "scale-down",
            Scenario::Orphans => "orphans",
        }
    }

    pub fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The scenario a seed runs when none is named.
    pub fn for_seed(seed: u64) -> Scenario {
        Scenario::ALL[(seed % Scenario::ALL.len() as u64) as usize]
    }
}

/// Knobs of a run.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub seed: u64,
    pub scenario: Scenario,
    /// Steps during which faults may be injected.
    pub fault_steps: u64,
    /// Chance of a fault per step, per mille.
    pub fault_per_mille: u64,
    /// Keep a human-readable trace (slower).
    pub trace: bool,
    /// etcd's `--strict-reconfig-check`. With it off, etcd accepts any membership change
    /// and quorum's own projection is the only guard, which is what the simulation must
    /// show holds; with it on, etcd's refusals and their 5 s waits are exercised.
    pub strict_reconfig: bool,
    /// Controller replicas: 1 (the default: no lease, as with the embedded store) or 2
    /// (sharing a leader lease, with pauses, crashes, lost leases and stale steps).
    pub replicas: u8,
    /// The leader lease's TTL (with 2 replicas).
    pub lease_ttl_ms: u64,
    /// A load balancer (HAProxy) in front of the members, kept in step with the published
    /// endpoints by the controller; it may be unreachable for a while (a seeded fault).
    pub load_balancer: bool,
}

impl Config {
    pub fn new(seed: u64) -> Config {
        Config {
            seed,
            scenario: Scenario::for_seed(seed),
            fault_steps: 400,
            fault_per_mille: 60,
            trace: false,
            strict_reconfig: (seed / Scenario::ALL.len() as u64).is_multiple_of(2),
            replicas: 1,
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
            load_balancer: (seed / (2 * Scenario::ALL.len() as u64)).is_multiple_of(2),
        }
    }

    /// The same seed with two controller replicas.
    pub fn with_two_replicas(seed: u64) -> Config {
        Config {
            replicas: 2,
            ..Config::new(seed)
        }
    }
}

/// What happened to the controller replicas' leadership in a run (all zero with one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Leader keys taken after the first (by either replica).
    pub takeovers: u64,
    /// Replicas paused (SIGSTOP), and of those, for longer than the TTL.
    pub pauses: u64,
    pub pauses_past_ttl: u64,
    /// Replicas crashed (restarting as standbys).
    pub crashes: u64,
    /// Side effects on etcd or machines by a replica without a valid lease (the
    /// deposed leader's one in-flight step).
    pub stale_side_effects: u64,
    /// Store writes (the no-op before a step included) refused by the token fence.
    pub fenced_writes: u64,
    /// Leases lost right after a member removal succeeded.
    pub leases_lost_after_removal: u64,
    /// Leaders that stepped down (fenced, lease run out, renewal refused).
    pub step_downs: u64,
}

impl LeaseCounts {
    pub fn add(&mut self, o: &LeaseCounts) {
        self.takeovers += o.takeovers;
        self.pauses += o.pauses;
        self.pauses_past_ttl += o.pauses_past_ttl;
        self.crashes += o.crashes;
        self.stale_side_effects += o.stale_side_effects;
        self.fenced_writes += o.fenced_writes;
        self.leases_lost_after_removal += o.leases_lost_after_removal;
        self.step_downs += o.step_downs;
    }
}

impl std::fmt::Display for LeaseCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} takeovers, {} pauses ({} past the TTL), {} replica crashes, {} stale side effects, {} fenced writes, {} leases lost after a removal, {} step-downs",
            self.takeovers,
            self.pauses,
            self.pauses_past_ttl,
            self.crashes,
            self.stale_side_effects,
            self.fenced_writes,
            self.leases_lost_after_removal,
            self.step_downs
        )
    }
}

/// How often the pacing policy held an action back in a run, and the load balancer
/// faults it met.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacingCounts {
    /// Controller passes that held a removal while its machine drained...
    pub drain_holds: u64,
    /// ...while the load balancer was not in step...
    pub lb_holds: u64,
    /// ...or held an action that was backing off.
    pub backoff_holds: u64,
    /// Removals of a leaving machine's member performed (each checked against the drain
    /// and the load balancer).
    pub paced_removals: u64,
    /// Load balancer outages injected.
    pub lb_faults: u64,
}

impl PacingCounts {
    pub fn add(&mut self, o: &PacingCounts) {
        self.drain_holds += o.drain_holds;
        self.lb_holds += o.lb_holds;
        self.backoff_holds += o.backoff_holds;
        self.paced_removals += o.paced_removals;
        self.lb_faults += o.lb_faults;
    }
}

impl std::fmt::Display for PacingCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} removals of a leaving machine's member, held {} times while draining and {} while the load balancer was behind ({} outages); {} holds backing off",
            self.paced_removals, self.drain_holds, self.lb_holds, self.lb_faults, self.backoff_holds
        )
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub seed: u64,
    pub scenario: Scenario,
    pub steps: u64,
    pub decisions: u64,
    pub faults: u64,
    pub sim_ms: u64,
    /// The first invariant violated, if any.
    pub violation: Option<String>,
    /// A hash of the whole trace: equal for equal seeds.
    pub trace_hash: u64,
    pub trace: String,
    /// Controller replicas and lease TTL of the run (to replay it).
    pub replicas: u8,
    pub lease_ttl_ms: u64,
    pub lease: LeaseCounts,
    pub pacing: PacingCounts,
}

#[derive(Clone, Debug)]
struct SimMember {
    id: u64,
    /// Empty until the member's process has started once.
    name: String,
    peer_url: String,
    is_learner: bool,
    /// Last log index this member holds.
    log: u64,
    /// When its peers' connections to it were last (re)established.
    connected_since_ms: u64,
}

#[derive(Clone, Debug, Default)]
struct Proc {
    running: bool,
    has_data: bool,
    /// Exit at this time (a removed member shuts itself down).
    exit_at_ms: Option<u64>,
}

/// A fault in force, with the step at which it heals.
#[derive(Clone, Debug)]
enum Impairment {
    /// The member cannot reach its peers (and they it).
    PartitionedFromPeers(u64),
    /// The controller cannot reach this machine's endpoint.
    HiddenFromController(String),
    /// The machine is broken: its process is down and exits at once when started.
    Down(String),
}

/// A replica's leadership term, as the replica believes it.
#[derive(Clone, Copy, Debug)]
struct Term {
    token: u64,
    /// Its own lease deadline: send time of its last answered renewal + TTL. `None`: no
    /// lease (the single controller of the embedded store).
    deadline_ms: Option<u64>,
    /// A renewal was refused: the lease is gone, whatever the deadline says.
    lost: bool,
    last_renewal_ms: u64,
    /// It performed its one side effect after its lease had ended.
    stale_done: bool,
}

/// One controller replica. Everything here but the token it holds is memory, lost on a
/// crash or a step-down.
#[derive(Clone, Debug, Default)]
struct Replica {
    /// Leading (by its own belief), or standing by.
    term: Option<Term>,
    /// Drain clocks and retry due times: the core's pacing, as the controller keeps it.
    pacing: Pacing,
    /// Paused (SIGSTOP) until this step: no renewals, no polls, no actions.
    paused_until_step: Option<u64>,
    /// The side effect it was paused between checking and performing.
    in_flight: Option<Action>,
    /// Crashed: restarts as a standby at this step.
    down_until_step: Option<u64>,
    /// A standby's next look at the leader key.
    next_poll_ms: u64,
}

/// The leader key of the simulated store (absent once its lease expires or is revoked).
#[derive(Clone, Copy, Debug)]
struct LeaderKey {
    holder: usize,
    token: u64,
    /// The lease's end by the store's clock.
    expires_at_ms: u64,
}

/// The simulated HAProxy: which members' endpoints its backend serves.
#[derive(Clone, Debug, Default)]
struct SimLb {
    /// Client URLs of the servers that get new requests (a drained server is not here).
    backend: BTreeSet<String>,
    /// Unreachable (its runtime socket gone, the process restarting) until this step.
    down_until_step: Option<u64>,
}

/// One simulated control plane with its controller.
pub struct World {
    cfg: Config,
    rng: Rng,
    pub now_ms: u64,
    step: u64,
    // -- etcd
    members: Vec<SimMember>,
    leader: Option<u64>,
    leaderless_since_ms: u64,
    term: u64,
    /// The leader's log index (every acknowledged write is at or below it).
    commit: u64,
    acked: u64,
    next_member_id: u64,
    /// Orphan members that run outside quorum's machines (reachable by peers only).
    external_running: BTreeSet<u64>,
    slow_learners: BTreeSet<u64>,
    impairment: Option<(Impairment, u64)>,
    // -- provider (by machine name)
    procs: BTreeMap<String, Proc>,
    // -- durable store
    cp: ControlPlane,
    machines: Vec<Machine>,
    next_serial: u64,
    next_address: u32,
    // -- controller replicas (one leads) and the store's leader key (two replicas only)
    replicas: Vec<Replica>,
    /// The client endpoints last published (for clients to follow), and when each one
    /// that was published left the set.
    published: BTreeSet<String>,
    unpublished_at_ms: BTreeMap<String, u64>,
    /// The load balancer, if the run has one.
    lb: Option<SimLb>,
    pacing_counts: PacingCounts,
    leader_key: Option<LeaderKey>,
    last_token: u64,
    /// Armed fault: the next successful member removal loses the leader's lease.
    lose_lease_after_removal: bool,
    /// Replicas that performed a side effect with a valid lease this step.
    acted_with_lease: BTreeSet<usize>,
    lease: LeaseCounts,
    // -- bookkeeping
    decisions: u64,
    /// What the controller's last decision said (a converged decision takes no action).
    last_converged: bool,
    faults: u64,
    trace: String,
    hash: u64,
    violation: Option<String>,
}

const OLD: Version = Version::new(3, 4, 23);
const NEW: Version = Version::new(3, 5, 1);

/// What an action came to; for a call to etcd, etcd's reply through the classifier.
enum Answer {
    Done,
    /// Transient: retry soon.
    Refused(&'static str),
    Failed(&'static str),
    /// The store refused the write: another replica holds the leader key, or none does.
    Fenced,
}

/// etcd's reply to `call` as the controller sees it: through the core's classifier, the
/// one `quorum-etcd` uses, so a change to it changes the simulator too.
/// How the controller classifies an action whose answer never came: an etcd call's
/// client deadline through the core's classifier (a refusal: retried soon, its effect
/// unknown), anything else (a machine, a store write) as a failure, as the controller's
/// `ActionError` does.
fn timed_out(a: &Action) -> Attempt {
    let call = match a {
        Action::AddLearner { .. } => EtcdCall::AddLearner,
        Action::Promote { .. } => EtcdCall::Promote,
        Action::MoveLeader { .. } => EtcdCall::MoveLeader,
        Action::RemoveMember { .. } => EtcdCall::RemoveMember,
        _ => return Attempt::Failed,
    };
    match etcd_answer(call, Err(CLIENT_DEADLINE)) {
        Answer::Done => Attempt::Done,
        Answer::Refused(_) => Attempt::Refused,
        Answer::Failed(_) | Answer::Fenced => Attempt::Failed,
    }
}

fn etcd_answer(call: EtcdCall, reply: Result<(), EtcdAnswer>) -> Answer {
    let Err(a) = reply else {
        return Answer::Done;
    };
    match a.verdict(call) {
        Verdict::Done | Verdict::AlreadyDone => Answer::Done,
        Verdict::Refused(_) => Answer::Refused(a.message),
        Verdict::Unreachable | Verdict::Failed => Answer::Failed(a.message),
    }
}

impl World {
    pub fn new(cfg: Config) -> World {
        let mut w = World {
            cfg,
            rng: Rng::new(cfg.seed),
            now_ms: 0,
            step: 0,
            members: vec![],
            leader: None,
            leaderless_since_ms: 0,
            term: 1,
            commit: 100,
            acked: 100,
            next_member_id: 0x1000,
            external_running: BTreeSet::new(),
            slow_learners: BTreeSet::new(),
            impairment: None,
            procs: BTreeMap::new(),
            cp: ControlPlane {
                name: "sim".into(),
                spec: ControlPlaneSpec {
                    replicas: 3,
                    version: OLD,
                    rollout: RolloutStrategy::default(),
                    paused: false,
                    haproxy: None,
                    certificates: Default::default(),
                    insecure_plaintext: true,
                },
                deleting: false,
            },
            machines: vec![],
            next_serial: 1,
            next_address: 1,
            replicas: vec![],
            published: BTreeSet::new(),
            unpublished_at_ms: BTreeMap::new(),
            lb: cfg.load_balancer.then(SimLb::default),
            pacing_counts: PacingCounts::default(),
            leader_key: None,
            last_token: 0,
            lose_lease_after_removal: false,
            acted_with_lease: BTreeSet::new(),
            lease: LeaseCounts::default(),
            decisions: 0,
            last_converged: false,
            faults: 0,
            trace: String::new(),
            hash: 0xcbf2_9ce4_8422_2325,
            violation: None,
        };
        let (start, spec_replicas, version, surge) = match cfg.scenario {
            Scenario::Rollout => (3, 3, NEW, 1),
            Scenario::RolloutSurge0 => (3, 3, NEW, 0),
            Scenario::ScaleUp => (1, 3, OLD, 1),
            Scenario::ScaleDown => (5, 3, OLD, 1),
            Scenario::Orphans => (3, 3, OLD, 1),
        };
        for _ in 0..start {
            w.seed_member(OLD);
        }
        if cfg.scenario == Scenario::Orphans {
            // A voter whose machine record was lost, running outside quorum's machines,
            // and a learner that was added but never started.
            let id = w.new_member_id();
            w.members.push(SimMember {
                id,
                name: "ghost".into(),
                peer_url: "http://127.250.0.1:2380".into(),
                is_learner: false,
                log: w.commit,
                connected_since_ms: 0,
            });
            w.external_running.insert(id);
            let id = w.new_member_id();
            w.members.push(SimMember {
                id,
                name: String::new(),
                peer_url: "http://127.250.0.2:2380".into(),
                is_learner: true,
                log: 0,
                connected_since_ms: 0,
            });
        }
        w.leader = w.members.first().map(|m| m.id);
        w.cp.spec.replicas = spec_replicas;
        w.cp.spec.version = version;
        w.cp.spec.rollout.max_surge = surge;
        // The cluster has been up a while: the first change need not wait.
        w.now_ms = HEALTH_INTERVAL_MS;
        w.note(format!(
            "start {} with {start} members, strict reconfig {}{}",
            cfg.scenario.name(),
            if cfg.strict_reconfig { "on" } else { "off" },
            if cfg.load_balancer {
                ", behind a load balancer"
            } else {
                ""
            }
        ));
        w.start_replicas();
        w
    }

    /// One replica leading without a lease, or two with replica 0 holding the key.
    fn start_replicas(&mut self) {
        let n = usize::from(self.cfg.replicas.max(1));
        self.replicas = vec![Replica::default(); n];
        if n == 1 {
            self.replicas[0].term = Some(Term {
                token: 0,
                deadline_ms: None,
                lost: false,
                last_renewal_ms: 0,
                stale_done: false,
            });
            return;
        }
        self.note(format!(
            "{n} controller replicas, lease TTL {} ms",
            self.cfg.lease_ttl_ms
        ));
        self.take_lead(0);
    }

    fn new_member_id(&mut self) -> u64 {
        self.next_member_id += 1 + self.rng.below(7);
        self.next_member_id
    }

    fn alloc_machine(&mut self, bootstrap: bool, version: Version) -> Machine {
        let serial = self.next_serial;
        self.next_serial += 1;
        let n = self.next_address;
        self.next_address += 1;
        let m = Machine {
            name: format!("sim-{serial}"),
            serial,
            address: Ipv4Addr::new(127, 200, (n / 250) as u8, (n % 250 + 2) as u8),
            version,
            bootstrap,
            deleting: false,
            tls: false,
            certificates_not_after_unix_s: None,
        };
        self.machines.push(m.clone());
        self.procs.insert(m.name.clone(), Proc::default());
        m
    }

    /// A healthy running member with its machine, as the scenario's starting point.
    fn seed_member(&mut self, version: Version) {
        let m = self.alloc_machine(true, version);
        let id = self.new_member_id();
        self.members.push(SimMember {
            id,
            name: m.name.clone(),
            peer_url: m.peer_url(),
            is_learner: false,
            log: self.commit,
            connected_since_ms: 0,
        });
        let p = self.procs.get_mut(&m.name).expect("just allocated");
        p.running = true;
        p.has_data = true;
    }

    // ---------------------------------------------------------------- trace

    fn note(&mut self, line: String) {
        for b in line.bytes().chain([b'\n']) {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        if self.cfg.trace {
            let _ = writeln!(
                self.trace,
                "[{:>7}ms #{:<4}] {line}",
                self.now_ms, self.step
            );
        }
    }

    fn violate(&mut self, what: String) {
        if self.violation.is_none() {
            self.note(format!("VIOLATION: {what}"));
            self.violation = Some(what);
        }
    }

    // ---------------------------------------------------------------- etcd model

    fn machine_of_member(&self, m: &SimMember) -> Option<&Machine> {
        self.machines.iter().find(|x| x.peer_url() == m.peer_url)
    }

    /// Is the member's process running?
    fn member_running(&self, m: &SimMember) -> bool {
        if self.external_running.contains(&m.id) {
            return true;
        }
        self.machine_of_member(m)
            .and_then(|x| self.procs.get(&x.name))
            .is_some_and(|p| p.running)
    }

    /// Running and able to reach its peers.
    fn member_connected(&self, m: &SimMember) -> bool {
        self.member_running(m)
            && !matches!(&self.impairment, Some((Impairment::PartitionedFromPeers(id), _)) if *id == m.id)
    }

    fn voters(&self) -> impl Iterator<Item = &SimMember> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    fn connected_voters(&self) -> usize {
        self.voters().filter(|m| self.member_connected(m)).count()
    }

    fn has_quorum(&self) -> bool {
        let voters = self.voters().count();
        voters > 0 && self.connected_voters() >= quorum_size(voters)
    }

    /// One tick of the cluster: elections, replication, client writes, exits.
    fn tick_etcd(&mut self) {
        // Removed members shut down by themselves.
        let now = self.now_ms;
        for p in self.procs.values_mut() {
            if p.exit_at_ms.is_some_and(|t| t <= now) {
                p.running = false;
                p.exit_at_ms = None;
            }
        }
        // Leadership.
        let leader_ok = self
            .leader
            .and_then(|id| self.members.iter().find(|m| m.id == id))
            .is_some_and(|m| !m.is_learner && self.member_connected(m))
            && self.has_quorum();
        if !leader_ok {
            if self.leader.is_some() {
                self.leader = None;
                self.leaderless_since_ms = now;
                self.note("leader lost".into());
            }
            if self.has_quorum() && now - self.leaderless_since_ms >= ELECTION_MS {
                // The connected voter with the longest log wins.
                let winner = self
                    .voters()
                    .filter(|m| self.member_connected(m))
                    .max_by_key(|m| (m.log, m.id))
                    .map(|m| m.id);
                if let Some(w) = winner {
                    self.leader = Some(w);
                    self.term += 1;
                    self.note(format!("elected {w:x} in term {}", self.term));
                }
            }
        }
        // A client write per tick while there is a leader: committed on a quorum of
        // connected voters, and replicated to every connected member.
        if let Some(l) = self.leader {
            self.commit += 1;
            self.acked = self.commit;
            let commit = self.commit;
            let connected: Vec<bool> = self
                .members
                .iter()
                .map(|m| self.member_connected(m))
                .collect();
            let slow = self.slow_learners.clone();
            for (m, conn) in self.members.iter_mut().zip(connected) {
                if !conn {
                    continue;
                }
                if m.is_learner && m.log + 50 < commit {
                    // A learner catches up by snapshot in a few ticks (slowly if slow).
                    let step = if slow.contains(&m.id) {
                        commit / 40 + 1
                    } else {
                        commit / 2 + 1
                    };
                    m.log = (m.log + step).min(commit);
                } else {
                    m.log = commit;
                }
            }
            debug_assert!(self.members.iter().any(|m| m.id == l && m.log == commit));
        }
    }

    fn connected_for_interval(&self, m: &SimMember) -> bool {
        self.member_connected(m) && self.now_ms >= m.connected_since_ms + HEALTH_INTERVAL_MS
    }

    /// etcd's reply (its real answers; `Ok` for success) to an add of a learner.
    fn add_learner(&mut self, peer: &str) -> Result<(), EtcdAnswer> {
        if self.leader.is_none() {
            // The former leader is connected to no voter: the strict check answers.
            return Err(UNHEALTHY_CLUSTER);
        }
        if self.members.iter().any(|m| m.peer_url == peer) {
            return Err(PEER_URLS_EXIST); // the earlier add took effect
        }
        if self.members.iter().any(|m| m.is_learner) {
            return Err(TOO_MANY_LEARNERS);
        }
        if self.cfg.strict_reconfig && !self.voters().all(|m| self.connected_for_interval(m)) {
            return Err(UNHEALTHY_CLUSTER);
        }
        let id = self.new_member_id();
        self.members.push(SimMember {
            id,
            name: String::new(),
            peer_url: peer.to_string(),
            is_learner: true,
            log: 0,
            connected_since_ms: self.now_ms,
        });
        Ok(())
    }

    fn promote(&mut self, id: u64) -> Result<(), EtcdAnswer> {
        if self.leader.is_none() {
            return Err(NO_LEADER);
        }
        let commit = self.commit;
        let Some(m) = self.members.iter().find(|m| m.id == id) else {
            return Err(MEMBER_NOT_FOUND);
        };
        if !m.is_learner {
            return Err(NOT_A_LEARNER); // it votes already
        }
        if !self.member_connected(m) || m.log * 10 < commit * 9 {
            return Err(LEARNER_NOT_IN_SYNC);
        }
        let m = self
            .members
            .iter_mut()
            .find(|m| m.id == id)
            .expect("found above");
        m.is_learner = false;
        Ok(())
    }

    fn move_leader(&mut self, to: u64) -> Result<(), EtcdAnswer> {
        let Some(l) = self.leader else {
            return Err(NOT_LEADER); // asked of the former leader
        };
        if l == to {
            return Ok(());
        }
        let Some(t) = self.members.iter().find(|m| m.id == to) else {
            return Err(BAD_LEADER_TRANSFEREE);
        };
        if t.is_learner {
            return Err(BAD_LEADER_TRANSFEREE);
        }
        if !self.member_connected(t) {
            // etcd waits for the transfer until the client gives up.
            return Err(CLIENT_DEADLINE);
        }
        self.leader = Some(to);
        self.term += 1;
        Ok(())
    }

    fn remove_member(&mut self, id: u64) -> Result<(), EtcdAnswer> {
        if self.leader.is_none() {
            // etcd holds the change until the client gives up.
            return Err(CLIENT_DEADLINE);
        }
        let Some(idx) = self.members.iter().position(|m| m.id == id) else {
            return Err(MEMBER_NOT_FOUND); // removed already
        };
        if self.cfg.strict_reconfig && !self.members[idx].is_learner {
            // Strict check: a quorum of the remaining voters connected for the interval.
            let remaining: Vec<&SimMember> = self.voters().filter(|m| m.id != id).collect();
            let ok = remaining
                .iter()
                .filter(|m| self.connected_for_interval(m))
                .count();
            if remaining.is_empty() || ok < quorum_size(remaining.len()) {
                return Err(UNHEALTHY_CLUSTER);
            }
        }
        let m = self.members.remove(idx);
        self.external_running.remove(&m.id);
        let exit_at = self.now_ms + REMOVED_EXIT_MS;
        if let Some(mach) = self.machines.iter().find(|x| x.peer_url() == m.peer_url) {
            if let Some(p) = self.procs.get_mut(&mach.name) {
                if p.running {
                    p.exit_at_ms = Some(exit_at);
                }
            }
        }
        if self.leader == Some(id) {
            self.leader = None;
            self.leaderless_since_ms = self.now_ms;
        }
        Ok(())
    }

    fn start_machine(&mut self, name: &str, state: ClusterState) -> Answer {
        let Some(mach) = self.machines.iter().find(|m| m.name == name).cloned() else {
            return Answer::Done;
        };
        let now = self.now_ms;
        let member = self
            .members
            .iter()
            .position(|m| m.peer_url == mach.peer_url());
        let broken = matches!(&self.impairment, Some((Impairment::Down(n), _)) if n == name);
        let p = self.procs.entry(name.to_string()).or_default();
        if p.running || broken {
            // A broken machine's etcd exits at once: the start "succeeds", nothing runs.
            return Answer::Done;
        }
        match member {
            Some(i) => {
                p.running = true;
                p.has_data = true;
                let m = &mut self.members[i];
                m.name = name.to_string();
                m.connected_since_ms = now;
                Answer::Done
            }
            // Not a member: etcd exits at start ("member not found in cluster").
            None if state == ClusterState::Existing || p.has_data => Answer::Done,
            None => Answer::Done,
        }
    }

    // ---------------------------------------------------------------- observation

    fn observe(&self) -> Observation {
        let hidden = match &self.impairment {
            Some((Impairment::HiddenFromController(n), _)) => Some(n.as_str()),
            _ => None,
        };
        let mut obs = Observation::default();
        for mach in &self.machines {
            let p = self.procs.get(&mach.name).cloned().unwrap_or_default();
            let member = self.members.iter().find(|m| m.peer_url == mach.peer_url());
            let status = match member {
                Some(m) if p.running && hidden != Some(mach.name.as_str()) => {
                    Some(EndpointStatus {
                        member_id: m.id,
                        leader_id: if self.member_connected(m) {
                            self.leader.unwrap_or(0)
                        } else {
                            0
                        },
                        raft_term: self.term,
                        raft_index: m.log,
                        raft_applied_index: m.log,
                        version: Some(mach.version),
                        is_learner: m.is_learner,
                        alarms: vec![],
                    })
                }
                _ => None,
            };
            obs.machines.insert(
                mach.name.clone(),
                MachineObservation {
                    process: if p.running {
                        ProcessState::Running
                    } else {
                        ProcessState::Stopped
                    },
                    has_data: p.has_data,
                    status,
                },
            );
        }
        // The member list comes from the leader, if the controller can reach it.
        let leader_visible = self.leader.is_some_and(|l| {
            self.members
                .iter()
                .find(|m| m.id == l)
                .and_then(|m| self.machine_of_member(m))
                .is_some_and(|mach| hidden != Some(mach.name.as_str()))
                || self.external_running.contains(&l)
        });
        if leader_visible {
            obs.members = Some(
                self.members
                    .iter()
                    .map(|m| Member {
                        id: m.id,
                        name: m.name.clone(),
                        peer_urls: vec![m.peer_url.clone()],
                        client_urls: if m.name.is_empty() {
                            vec![]
                        } else {
                            vec![m.peer_url.replace("2380", "2379")]
                        },
                        is_learner: m.is_learner,
                    })
                    .collect(),
            );
        }
        obs
    }

    // ---------------------------------------------------------------- controller

    /// Performs an action against the simulated world; the invariants that concern the
    /// action itself are checked here, against the ground truth. `fenced`: the store
    /// refuses the performer's writes (its token is stale), so only its effects on etcd
    /// and on machines land.
    fn perform(&mut self, a: &Action, fenced: bool) -> Answer {
        let before_quorum = self.has_quorum();
        let answer = match a {
            Action::AllocateMachine { .. } | Action::MarkDeleting { .. } if fenced => {
                Answer::Fenced
            }
            Action::AllocateMachine { bootstrap, version } => {
                let m = self.alloc_machine(*bootstrap, *version);
                self.note(format!("  allocated {}", m.name));
                Answer::Done
            }
            Action::StartMachine { machine, state, .. } => self.start_machine(machine, *state),
            Action::AddLearner { peer_url, .. } => {
                etcd_answer(EtcdCall::AddLearner, self.add_learner(peer_url))
            }
            Action::Promote { member_id, .. } => {
                etcd_answer(EtcdCall::Promote, self.promote(*member_id))
            }
            Action::MarkDeleting { machine, .. } => {
                if let Some(m) = self.machines.iter_mut().find(|m| &m.name == machine) {
                    m.deleting = true;
                }
                Answer::Done
            }
            Action::MoveLeader { to_member, .. } => {
                etcd_answer(EtcdCall::MoveLeader, self.move_leader(*to_member))
            }
            Action::RemoveMember { member_id, machine } => {
                if let Some(m) = machine {
                    self.check_removal_paced(m);
                }
                etcd_answer(EtcdCall::RemoveMember, self.remove_member(*member_id))
            }
            Action::StopMachine { machine } => {
                if let Some(p) = self.procs.get_mut(machine) {
                    p.running = false;
                    p.exit_at_ms = None;
                }
                Answer::Done
            }
            Action::DeleteMachine { machine } => self.delete_machine(machine, fenced),
            Action::ForgetControlPlane if fenced => Answer::Fenced,
            Action::ForgetControlPlane => Answer::Done,
        };
        if before_quorum && !self.has_quorum() {
            let (v, c) = (self.voters().count(), self.connected_voters());
            self.violate(format!(
                "quorum lost by quorum's action '{a}': {c} of {v} voters connected"
            ));
        }
        answer
    }

    /// The machine goes (process and data), then its record, a store write.
    fn delete_machine(&mut self, machine: &str, fenced: bool) -> Answer {
        let url = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .map(|m| m.peer_url());
        if let Some(url) = url {
            if self
                .members
                .iter()
                .any(|m| m.peer_url == url && !m.is_learner)
            {
                self.violate(format!("{machine} deleted while its member still votes"));
            }
        }
        self.procs.remove(machine);
        if fenced {
            return Answer::Fenced;
        }
        self.machines.retain(|m| m.name != machine);
        Answer::Done
    }

    /// An action with an effect outside the store (on etcd or a machine).
    fn acts_outside_store(a: &Action) -> bool {
        !matches!(
            a,
            Action::AllocateMachine { .. }
                | Action::MarkDeleting { .. }
                | Action::ForgetControlPlane
        )
    }

    /// Performs an action as replica `i`, whose store writes carry its token. Every side
    /// effect is by the holder of a valid lease, except the deposed leader's one
    /// `in_flight` step (checked before its pause, performed after it without a check).
    fn perform_as(&mut self, i: usize, a: &Action, in_flight: bool) -> Answer {
        let holds = self.holds_lease(i);
        if holds {
            self.acted_with_lease.insert(i);
            if self.acted_with_lease.len() > 1 {
                self.violate(format!(
                    "replicas {:?} acted in one step, each with a valid lease",
                    self.acted_with_lease
                ));
            }
        } else if !in_flight {
            self.violate(format!(
                "r{i} performed '{a}' without a valid lease, and not as its in-flight step"
            ));
        } else if Self::acts_outside_store(a) {
            self.stale_side_effect(i, a);
        }
        let answer = self.perform(a, !holds);
        let removed = matches!(a, Action::RemoveMember { .. }) && matches!(answer, Answer::Done);
        if holds && removed && self.lose_lease_after_removal && self.faults_on() {
            self.lose_lease_after_removal = false;
            self.lease.leases_lost_after_removal += 1;
            self.leader_key = None;
            self.note(format!(
                "FAULT r{i}'s lease is lost right after '{a}'; it still believes it leads"
            ));
        }
        answer
    }

    /// The deposed leader's side effect: counted, and at most one per term.
    fn stale_side_effect(&mut self, i: usize, a: &Action) {
        self.lease.stale_side_effects += 1;
        let store_token = self.leader_key.map_or(0, |k| k.token);
        let Some(t) = self.replicas[i].term.as_mut() else {
            self.violate(format!("r{i} performed '{a}' while standing by"));
            return;
        };
        let (token, again) = (t.token, t.stale_done);
        t.stale_done = true;
        if again {
            self.violate(format!(
                "r{i} performed a second side effect after its lease ended: '{a}'"
            ));
        }
        self.note(format!(
            "STALE r{i} (token {token}, store token {store_token}) performs '{a}' without re-checking"
        ));
    }

    /// One iteration of replica `i`, if it runs and leads: its own lease check, then
    /// observe, decide, and perform the actions in order until one fails (or the replica
    /// crashes, is paused, or steps down).
    fn controller_step(&mut self, i: usize, faults_on: bool) {
        if !self.runs(i) || self.replicas[i].term.is_none() {
            return;
        }
        // A lease that ran out by its own clock ends the term before anything else.
        if !may_act(self.lease_left_ms(i), 0) {
            self.step_down(i, "its lease ran out by its own clock");
            return;
        }
        let obs = self.observe();
        let d = decide(&self.cp, &self.machines, &obs);
        self.decisions += 1;
        self.last_converged = d.converged;
        if d.actions
            .iter()
            .filter(|a| a.is_membership_change())
            .count()
            > 1
        {
            self.violate(format!(
                "several membership changes in one decision: {:?}",
                d.actions
            ));
        }
        // As the controller: publish the endpoints, bring the load balancer in step,
        // then pace (a machine seen leaving starts its drain now).
        self.publish(&d.endpoints);
        let lb_in_step = self.sync_lb();
        self.observe_pacing(i);
        let tag = self.tag(i);
        for a in &d.actions {
            if let pacing::Verdict::Wait(hold) = self.pacing_verdict(i, a, lb_in_step) {
                self.count_hold(i, a, hold);
                return;
            }
            if !self.ensure_leading(i) {
                return;
            }
            if faults_on
                && self.ha()
                && self.rng.chance(self.cfg.fault_per_mille / 3)
                && self.may_pause_in_flight(a)
            {
                self.pause_in_flight(i, a);
                return;
            }
            // Faults around the call.
            if faults_on && self.rng.chance(self.cfg.fault_per_mille / 3) {
                self.faults += 1;
                match self.rng.below(3) {
                    0 => {
                        self.note(format!("{tag}CRASH before '{a}'"));
                        self.crash_replica(i);
                        return;
                    }
                    1 => {
                        // Classified as the controller's adapter classifies a timeout.
                        self.note(format!("{tag}TIMEOUT before '{a}' reached etcd"));
                        self.backoff(i, a, timed_out(a));
                        return;
                    }
                    _ => {
                        let ans = self.perform_as(i, a, false);
                        let applied = matches!(ans, Answer::Done);
                        if self.rng.chance(500) {
                            self.note(format!("{tag}CRASH after '{a}' (applied: {applied})"));
                            self.crash_replica(i);
                        } else {
                            self.note(format!("{tag}LOST ANSWER of '{a}' (applied: {applied})"));
                            self.backoff(i, a, timed_out(a));
                        }
                        return;
                    }
                }
            }
            let answer = self.perform_as(i, a, false);
            match &answer {
                Answer::Done => self.note(format!("{tag}did '{a}'")),
                Answer::Refused(why) => self.note(format!("{tag}'{a}' refused: {why}")),
                Answer::Failed(why) => self.note(format!("{tag}'{a}' failed: {why}")),
                Answer::Fenced => {
                    self.lease.fenced_writes += 1;
                    self.step_down(i, &format!("its write for '{a}' was fenced"));
                    return;
                }
            }
            if let Some(attempt) = Self::attempt_of(&answer) {
                self.backoff(i, a, attempt);
                if attempt != Attempt::Done {
                    return;
                }
            }
        }
    }

    // ---------------------------------------------------------------- pacing

    /// Publishes the decision's client endpoints (for clients to follow), noting when
    /// each one left the set: the ground truth the drain is checked against.
    fn publish(&mut self, endpoints: &[String]) {
        let now = self.now_ms;
        let new: BTreeSet<String> = endpoints.iter().cloned().collect();
        for gone in self.published.difference(&new) {
            self.unpublished_at_ms.insert(gone.clone(), now);
        }
        for url in &new {
            self.unpublished_at_ms.remove(url);
        }
        self.published = new;
    }

    /// Brings the load balancer's backend in step with the published endpoints, as the
    /// controller's balancer does; false while it is unreachable (no load balancer: in
    /// step).
    fn sync_lb(&mut self) -> bool {
        let published = &self.published;
        match self.lb.as_mut() {
            None => true,
            Some(lb) if lb.down_until_step.is_some() => false,
            Some(lb) => {
                lb.backend.clone_from(published);
                true
            }
        }
    }

    /// The controller's pass over the stored machines (`Pacing::observe`).
    fn observe_pacing(&mut self, i: usize) {
        let now = self.now_ms;
        self.replicas[i].pacing.observe(now, &self.machines);
    }

    /// May replica `i` perform `a` now, by the shared policy?
    fn pacing_verdict(&self, i: usize, a: &Action, lb_in_step: bool) -> pacing::Verdict {
        let input = PacingInput {
            now_ms: self.now_ms,
            lb_in_step,
        };
        self.replicas[i].pacing.check(a, &input)
    }

    /// How the controller's adapter classifies a simulated answer (`None`: fenced, the
    /// replica steps down instead).
    fn attempt_of(answer: &Answer) -> Option<Attempt> {
        match answer {
            Answer::Done => Some(Attempt::Done),
            Answer::Refused(_) => Some(Attempt::Refused),
            Answer::Failed(_) => Some(Attempt::Failed),
            Answer::Fenced => None,
        }
    }

    /// Records an attempt in replica `i`'s pacing, with `random` as the jitter.
    fn record_attempt(
        &mut self,
        i: usize,
        a: &Action,
        attempt: Attempt,
        random: u64,
    ) -> Option<u64> {
        let now = self.now_ms;
        self.replicas[i].pacing.record(a, attempt, now, random)
    }

    /// Records an attempt with jitter from the seeded generator (none needed once done).
    fn backoff(&mut self, i: usize, a: &Action, attempt: Attempt) {
        let random = match attempt {
            Attempt::Done => 0,
            Attempt::Refused | Attempt::Failed => self.rng.next_u64(),
        };
        self.record_attempt(i, a, attempt, random);
    }

    fn count_hold(&mut self, i: usize, a: &Action, hold: Hold) {
        match hold {
            Hold::Draining { .. } => self.pacing_counts.drain_holds += 1,
            Hold::LoadBalancerBehind => self.pacing_counts.lb_holds += 1,
            Hold::BackingOff { .. } => {
                // Not traced: a backoff's holds repeat the refusal already noted.
                self.pacing_counts.backoff_holds += 1;
                return;
            }
        }
        let tag = self.tag(i);
        self.note(format!("{tag}holds '{a}': {hold}"));
    }

    /// The removal of `machine`'s member, checked against the ground truth: its endpoint
    /// has been out of the published set for the drain time, and the load balancer sends
    /// it no new request.
    fn check_removal_paced(&mut self, machine: &str) {
        let Some(url) = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .map(Machine::client_url)
        else {
            return;
        };
        self.pacing_counts.paced_removals += 1;
        let drain_ms = PacingPolicy::DEFAULT.drain_ms;
        if self.published.contains(&url) {
            self.violate(format!(
                "the member of {machine} removed while its endpoint is published"
            ));
        } else if let Some(at) = self.unpublished_at_ms.get(&url).copied() {
            if self.now_ms < at + drain_ms {
                self.violate(format!(
                    "the member of {machine} removed {} ms after its endpoint was unpublished (drain {drain_ms} ms)",
                    self.now_ms - at
                ));
            }
        }
        if self.lb.as_ref().is_some_and(|lb| lb.backend.contains(&url)) {
            self.violate(format!(
                "the member of {machine} removed while the load balancer still sends clients to it"
            ));
        }
    }

    /// A crash loses everything not in the durable store. The single controller restarts
    /// at once (as before there were replicas); one of two restarts later, as a standby,
    /// leaving its lease to expire in the store.
    fn crash_replica(&mut self, i: usize) {
        self.replicas[i].pacing = Pacing::default();
        if !self.ha() {
            return;
        }
        let steps = RESTART_MIN_STEPS + self.rng.below(RESTART_SPREAD_STEPS);
        let r = &mut self.replicas[i];
        r.term = None;
        r.in_flight = None;
        r.paused_until_step = None;
        r.down_until_step = Some(self.step + steps);
        self.lease.crashes += 1;
        self.note(format!("r{i} is down for {steps} steps"));
    }

    // ---------------------------------------------------------------- replicas and lease

    fn ha(&self) -> bool {
        self.replicas.len() > 1
    }

    /// A prefix naming the replica in trace lines (none with a single controller, whose
    /// trace is as it always was).
    fn tag(&self, i: usize) -> String {
        if self.ha() {
            format!("r{i}: ")
        } else {
            String::new()
        }
    }

    fn faults_on(&self) -> bool {
        self.step <= self.cfg.fault_steps
    }

    fn ttl_steps(&self) -> u64 {
        self.cfg.lease_ttl_ms.div_ceil(STEP_MS)
    }

    /// Neither paused nor down.
    fn runs(&self, i: usize) -> bool {
        let r = &self.replicas[i];
        r.paused_until_step.is_none() && r.down_until_step.is_none()
    }

    fn replicas_settled(&self) -> bool {
        (0..self.replicas.len()).all(|i| self.runs(i))
    }

    /// What is left of replica `i`'s lease by its own clock (`None`: no lease).
    fn lease_left_ms(&self, i: usize) -> Option<i64> {
        match self.replicas[i].term {
            None => Some(-1),
            Some(t) if t.lost => Some(-1),
            Some(t) => t.deadline_ms.map(|d| d as i64 - self.now_ms as i64),
        }
    }

    /// Does the store's leader key hold replica `i`'s token, unexpired? (Always, for the
    /// single controller: the embedded store has no fence.)
    fn holds_lease(&self, i: usize) -> bool {
        if !self.ha() {
            return true;
        }
        let Some(t) = self.replicas[i].term else {
            return false;
        };
        self.leader_key
            .is_some_and(|k| k.token == t.token && self.now_ms < k.expires_at_ms)
    }

    /// The leader's check before a side effect: enough of its lease left by its own clock,
    /// then the fenced no-op write. Failing either, it steps down.
    fn ensure_leading(&mut self, i: usize) -> bool {
        let margin = margin_ms(self.cfg.lease_ttl_ms);
        if !may_act(self.lease_left_ms(i), margin) {
            self.step_down(i, "less than the margin of its lease is left");
            return false;
        }
        if !self.holds_lease(i) {
            self.lease.fenced_writes += 1;
            self.step_down(i, "its fenced no-op write was refused");
            return false;
        }
        true
    }

    /// The leader stops leading: its memory goes, and its lease is released if the key
    /// still holds its token.
    fn step_down(&mut self, i: usize, why: &str) {
        let Some(t) = self.replicas[i].term.take() else {
            return;
        };
        self.replicas[i].pacing = Pacing::default();
        self.replicas[i].next_poll_ms = self.now_ms + standby_poll_ms(self.cfg.lease_ttl_ms);
        self.lease.step_downs += 1;
        if self.leader_key.is_some_and(|k| k.token == t.token) {
            self.leader_key = None;
        }
        self.note(format!("r{i} steps down (token {}): {why}", t.token));
    }

    /// Replica `i` takes the free leader key: a new token, fresh memory.
    fn take_lead(&mut self, i: usize) {
        self.last_token += 1;
        let (token, now, ttl_ms) = (self.last_token, self.now_ms, self.cfg.lease_ttl_ms);
        self.leader_key = Some(LeaderKey {
            holder: i,
            token,
            expires_at_ms: now + ttl_ms,
        });
        let r = &mut self.replicas[i];
        r.pacing = Pacing::default();
        r.term = Some(Term {
            token,
            deadline_ms: Some(now + ttl_ms),
            lost: false,
            last_renewal_ms: now,
            stale_done: false,
        });
        if token > 1 {
            self.lease.takeovers += 1;
        }
        self.note(format!("r{i} takes the lead (token {token})"));
    }

    /// The store's side of time: a lease not renewed in time ends, and its key with it.
    fn expire_leader_key(&mut self) {
        if let Some(k) = self.leader_key {
            if k.expires_at_ms <= self.now_ms {
                self.leader_key = None;
                self.note(format!(
                    "the lease of r{} (token {}) expired in the store",
                    k.holder, k.token
                ));
            }
        }
    }

    /// Each replica's tick (two replicas only): restarts, resumptions (with the in-flight
    /// step), a leader's renewal, a standby's poll.
    fn tick_replicas(&mut self) {
        self.expire_leader_key();
        for i in 0..self.replicas.len() {
            self.restart_if_due(i);
            // A resumed replica's renewal is still on its way this step.
            if self.resume_if_due(i) || !self.runs(i) {
                continue;
            }
            if self.replicas[i].term.is_some() {
                self.renew_if_due(i);
            } else {
                self.campaign_if_due(i);
            }
        }
    }

    fn restart_if_due(&mut self, i: usize) {
        if self.replicas[i]
            .down_until_step
            .is_some_and(|s| s <= self.step)
        {
            self.replicas[i].down_until_step = None;
            self.replicas[i].next_poll_ms = self.now_ms;
            self.note(format!("r{i} restarts as a standby"));
        }
    }

    /// Ends a pause that is over; the replica then performs the step it was paused in
    /// front of, without checking again. True if it resumed.
    fn resume_if_due(&mut self, i: usize) -> bool {
        if self.replicas[i]
            .paused_until_step
            .is_none_or(|s| s > self.step)
        {
            return false;
        }
        self.replicas[i].paused_until_step = None;
        self.note(format!("r{i} resumes"));
        if let Some(a) = self.replicas[i].in_flight.take() {
            match self.perform_as(i, &a, true) {
                Answer::Fenced => {
                    self.lease.fenced_writes += 1;
                    self.step_down(i, &format!("its in-flight write for '{a}' was fenced"));
                }
                Answer::Done => self.note(format!("r{i}: its in-flight '{a}' is done")),
                Answer::Refused(why) | Answer::Failed(why) => {
                    self.note(format!("r{i}: its in-flight '{a}' failed: {why}"))
                }
            }
        }
        true
    }

    /// Every TTL/3 the leader renews: the store's expiry and its own deadline move to
    /// the same moment. A renewal of a lease the store no longer has is refused.
    fn renew_if_due(&mut self, i: usize) {
        let ttl_ms = self.cfg.lease_ttl_ms;
        let now = self.now_ms;
        let Some(t) = self.replicas[i].term else {
            return;
        };
        if t.lost || now < t.last_renewal_ms + ttl_ms / 3 {
            return;
        }
        match self.leader_key.as_mut() {
            Some(k) if k.token == t.token => {
                k.expires_at_ms = now + ttl_ms;
                if let Some(t) = self.replicas[i].term.as_mut() {
                    t.deadline_ms = Some(now + ttl_ms);
                    t.last_renewal_ms = now;
                }
            }
            _ => {
                if let Some(t) = self.replicas[i].term.as_mut() {
                    t.lost = true;
                }
                self.note(format!(
                    "r{i}'s lease renewal is refused: the lease is gone"
                ));
            }
        }
    }

    /// A standby looks at the leader key every poll interval and takes it if free.
    fn campaign_if_due(&mut self, i: usize) {
        if self.now_ms < self.replicas[i].next_poll_ms {
            return;
        }
        self.replicas[i].next_poll_ms = self.now_ms + standby_poll_ms(self.cfg.lease_ttl_ms);
        if self.leader_key.is_none() {
            self.take_lead(i);
        }
    }

    /// SIGSTOP for `steps` steps; memory kept.
    fn pause(&mut self, i: usize, steps: u64, what: &str) {
        self.lease.pauses += 1;
        if steps * STEP_MS > self.cfg.lease_ttl_ms {
            self.lease.pauses_past_ttl += 1;
        }
        self.replicas[i].paused_until_step = Some(self.step + steps);
        self.note(format!(
            "FAULT r{i} paused for {steps} steps ({} ms){what}",
            steps * STEP_MS
        ));
    }

    /// Which steps the in-flight pause may hold up. Without etcd's strict reconfiguration
    /// check, not a removal: a removal decided while every voter was healthy and performed
    /// after a member failed, during the pause, loses quorum, and only etcd's check can
    /// refuse it (the model check's deposed controller runs with that check for the same
    /// reason; `a_stale_removal_is_stopped_only_by_etcds_strict_check` shows both sides).
    /// The margin and the fence bound a deposed leader's staleness, but not a pause
    /// between its check and its side effect.
    fn may_pause_in_flight(&self, a: &Action) -> bool {
        self.cfg.strict_reconfig || !matches!(a, Action::RemoveMember { .. })
    }

    /// The worst case of a check followed by a side effect: the leader passed its check
    /// for `a`, is paused past its TTL, and performs `a` when it resumes.
    fn pause_in_flight(&mut self, i: usize, a: &Action) {
        self.faults += 1;
        let ttl_steps = self.ttl_steps();
        let steps = ttl_steps + 1 + self.rng.below(ttl_steps);
        self.replicas[i].in_flight = Some(a.clone());
        self.pause(i, steps, &format!(" between its check and '{a}'"));
    }

    /// A fault of the replicas (two only): a pause (half of them past the TTL), a crash,
    /// or the lease lost after the next member removal.
    fn maybe_replica_fault(&mut self) {
        if !self.rng.chance(self.cfg.fault_per_mille / 4) {
            return;
        }
        let running: Vec<usize> = (0..self.replicas.len()).filter(|i| self.runs(*i)).collect();
        match self.rng.below(3) {
            0 => {
                if let Some(i) = self.pick(&running) {
                    self.faults += 1;
                    let steps = 1 + self.rng.below(2 * self.ttl_steps());
                    self.pause(i, steps, "");
                }
            }
            1 => {
                if let Some(i) = self.pick(&running) {
                    self.faults += 1;
                    self.note(format!("FAULT r{i} crashes"));
                    self.crash_replica(i);
                }
            }
            _ => {
                if !self.lose_lease_after_removal {
                    self.faults += 1;
                    self.lose_lease_after_removal = true;
                    self.note("FAULT armed: the next member removal loses the lease".into());
                }
            }
        }
    }

    // ---------------------------------------------------------------- faults

    fn maybe_fault(&mut self) {
        if !self.rng.chance(self.cfg.fault_per_mille) {
            return;
        }
        // One impairment at a time keeps faults within what quorum can tolerate.
        if self.impairment.is_some() {
            return;
        }
        self.faults += 1;
        let heal_at = self.step + 5 + self.rng.below(40);
        let kind = self.rng.below(if self.lb.is_some() { 7 } else { 6 });
        match kind {
            6 => {
                // The load balancer is unreachable: it keeps serving what it served, and
                // cannot be brought in step until it heals. Not a member impairment.
                if let Some(lb) = self.lb.as_mut() {
                    if lb.down_until_step.is_none() {
                        lb.down_until_step = Some(heal_at);
                        self.pacing_counts.lb_faults += 1;
                        self.note("FAULT the load balancer is unreachable".into());
                    }
                }
            }
            0 | 5 => {
                // A member process dies (the controller restarts it), or its machine
                // breaks for a while (its process cannot start until it heals).
                let broken = kind == 5;
                let running: Vec<String> = self
                    .procs
                    .iter()
                    .filter(|(_, p)| p.running)
                    .map(|(n, _)| n.clone())
                    .collect();
                if let Some(n) = self.pick(&running) {
                    if self.safe_to_impair_machine(&n) {
                        self.note(format!(
                            "FAULT {n} {}",
                            if broken { "breaks" } else { "process dies" }
                        ));
                        if let Some(p) = self.procs.get_mut(&n) {
                            p.running = false;
                        }
                        if broken {
                            self.impairment = Some((Impairment::Down(n), heal_at));
                        }
                    }
                }
            }
            1 => {
                let ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
                if let Some(id) = self.pick(&ids) {
                    let name = self
                        .members
                        .iter()
                        .find(|m| m.id == id)
                        .map(|m| m.name.clone())
                        .unwrap_or_default();
                    if self.safe_to_impair_member(id) {
                        self.note(format!("FAULT {id:x} ({name}) partitioned from its peers"));
                        self.impairment = Some((Impairment::PartitionedFromPeers(id), heal_at));
                    }
                }
            }
            2 => {
                let names: Vec<String> = self.machines.iter().map(|m| m.name.clone()).collect();
                if let Some(n) = self.pick(&names) {
                    self.note(format!("FAULT {n} unreachable from the controller"));
                    self.impairment = Some((Impairment::HiddenFromController(n), heal_at));
                }
            }
            3 => {
                let learners: Vec<u64> = self
                    .members
                    .iter()
                    .filter(|m| m.is_learner)
                    .map(|m| m.id)
                    .collect();
                if let Some(id) = self.pick(&learners) {
                    self.note(format!("FAULT learner {id:x} is slow"));
                    self.slow_learners.insert(id);
                }
            }
            _ => {
                let candidates: Vec<u64> = self
                    .voters()
                    .filter(|m| self.member_connected(m) && Some(m.id) != self.leader)
                    .map(|m| m.id)
                    .collect();
                if let Some(id) = self.pick(&candidates) {
                    if self.leader.is_some() {
                        self.note(format!("FAULT leadership moves to {id:x}"));
                        self.leader = Some(id);
                        self.term += 1;
                    }
                }
            }
        }
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            Some(xs[self.rng.below(xs.len() as u64) as usize].clone())
        }
    }

    /// Would the cluster keep a quorum of connected voters without this member?
    fn safe_to_impair_member(&self, id: u64) -> bool {
        let voters = self.voters().count();
        let connected = self
            .voters()
            .filter(|m| m.id != id && self.member_connected(m))
            .count();
        connected >= quorum_size(voters)
    }

    fn safe_to_impair_machine(&self, name: &str) -> bool {
        let url = self
            .machines
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.peer_url());
        match self
            .members
            .iter()
            .find(|m| Some(&m.peer_url) == url.as_ref())
        {
            Some(m) => self.safe_to_impair_member(m.id),
            None => true,
        }
    }

    fn heal(&mut self) {
        let step = self.step;
        if let Some(lb) = self.lb.as_mut() {
            if lb.down_until_step.is_some_and(|s| s <= step) {
                lb.down_until_step = None;
                self.note("HEAL the load balancer is reachable".into());
            }
        }
        if let Some((imp, at)) = &self.impairment {
            if *at <= self.step {
                let what = format!("{imp:?}");
                if let Impairment::PartitionedFromPeers(id) = imp {
                    let id = *id;
                    let now = self.now_ms;
                    if let Some(m) = self.members.iter_mut().find(|m| m.id == id) {
                        m.connected_since_ms = now;
                    }
                }
                self.impairment = None;
                self.note(format!("HEAL {what}"));
            }
        }
    }

    // ---------------------------------------------------------------- invariants

    fn check_invariants(&mut self) {
        let learners = self.members.iter().filter(|m| m.is_learner).count();
        // Orphan learners of the Orphans scenario predate quorum; count quorum's own.
        let own_learners = self
            .members
            .iter()
            .filter(|m| m.is_learner && self.machine_of_member(m).is_some())
            .count();
        if own_learners > 1 {
            self.violate(format!("{learners} learners at once"));
        }
        let removal_in_flight = self.machines.iter().any(|mach| {
            mach.deleting
                && self
                    .members
                    .iter()
                    .any(|m| m.peer_url == mach.peer_url() && !m.is_learner)
        });
        if own_learners > 0 && removal_in_flight {
            self.violate("an add and a removal in flight together".into());
        }
        // No acknowledged write lost: some voter holds every acknowledged entry.
        let best = self.voters().map(|m| m.log).max().unwrap_or(0);
        if best < self.acked {
            self.violate(format!(
                "acknowledged writes lost: best voter log {best} < acked {}",
                self.acked
            ));
        }
        self.check_lease();
    }

    /// The store never sees a lease end before its holder does.
    fn check_lease(&mut self) {
        let Some(k) = self.leader_key else {
            return;
        };
        let holder_deadline = self.replicas[k.holder]
            .term
            .filter(|t| t.token == k.token)
            .and_then(|t| t.deadline_ms);
        if holder_deadline.is_some_and(|d| d > k.expires_at_ms) {
            self.violate(format!(
                "the store's lease (token {}) ends at {} ms, before its holder's own deadline {holder_deadline:?}",
                k.token, k.expires_at_ms
            ));
        }
    }

    /// Has the spec been met? Only asked again when the controller's last decision said
    /// so, which saves a second decision per step.
    fn converged(&self) -> bool {
        if !self.last_converged {
            return false;
        }
        let d = decide(&self.cp, &self.machines, &self.observe());
        d.converged
            && self
                .machines
                .iter()
                .all(|m| m.version == self.cp.spec.version)
            && self.machines.len() == self.cp.spec.replicas as usize
            && self.members.len() == self.machines.len()
            && self
                .lb
                .as_ref()
                .is_none_or(|lb| lb.down_until_step.is_none() && lb.backend == self.published)
    }

    /// One step: faults (in the window), healing, the cluster's tick, the replicas' tick
    /// (two replicas), one iteration of each leading replica, the invariant checks. Returns true when the run is over (converged,
    /// violated, or past its step limit).
    pub fn step(&mut self) -> bool {
        let limit = self.cfg.fault_steps + CONVERGE_WITHIN_STEPS;
        if self.violation.is_some() || self.step >= limit {
            return true;
        }
        self.step += 1;
        self.now_ms += STEP_MS;
        let faults_on = self.step <= self.cfg.fault_steps;
        if faults_on {
            self.maybe_fault();
            if self.ha() {
                self.maybe_replica_fault();
            }
        }
        self.heal();
        self.tick_etcd();
        self.acted_with_lease.clear();
        if self.ha() {
            self.tick_replicas();
        }
        for i in 0..self.replicas.len() {
            self.controller_step(i, faults_on);
        }
        self.check_invariants();
        if !faults_on && self.impairment.is_none() && self.replicas_settled() && self.converged() {
            self.note("converged".into());
            return true;
        }
        self.violation.is_some()
    }

    /// Runs to convergence (or a violation, or the step limit).
    pub fn run(mut self) -> Outcome {
        while !self.step() {}
        self.finish()
    }

    /// Ends a run: a run that did not converge is a violation (a stuck state).
    pub fn finish(mut self) -> Outcome {
        self.last_converged = true;
        if self.violation.is_none() && !self.converged() {
            let d = decide(&self.cp, &self.machines, &self.observe());
            self.violate(format!(
                "stuck: not converged {} steps after the faults stopped (operation {}, waiting for {:?}, next {:?})",
                CONVERGE_WITHIN_STEPS, d.operation, d.waiting_for, d.actions
            ));
        }
        Outcome {
            seed: self.cfg.seed,
            scenario: self.cfg.scenario,
            steps: self.step,
            decisions: self.decisions,
            faults: self.faults,
            sim_ms: self.now_ms,
            violation: self.violation,
            trace_hash: self.hash,
            trace: self.trace,
            replicas: self.cfg.replicas,
            lease_ttl_ms: self.cfg.lease_ttl_ms,
            lease: self.lease,
            pacing: self.pacing_counts,
        }
    }
}

/// What driving many control planes at once measured.
#[derive(Clone, Debug)]
pub struct ScaleReport {
    pub control_planes: usize,
    pub decisions: u64,
    pub violations: usize,
    pub real_secs: f64,
    /// Simulated time until the last control plane converged.
    pub sim_secs: f64,
    /// Resident memory added by the control planes (at the end of the run, when every
    /// one has its most machines and history), per control plane.
    pub bytes_per_control_plane: u64,
}

/// Resident set size of this process, in bytes (Linux), if known.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Drives `n` control planes through a rollout (3 members, 3.4.23 -> 3.5.1) at once,
/// in lockstep, in this thread, each with the real decision function. No faults: this
/// measures the decision function at scale, not its robustness.
pub fn run_many(n: usize, seed_base: u64) -> ScaleReport {
    let before = rss_bytes().unwrap_or(0);
    let mut worlds: Vec<World> = (0..n as u64)
        .map(|i| {
            let mut c = Config::new(seed_base + i);
            c.scenario = Scenario::Rollout;
            c.fault_steps = 0;
            World::new(c)
        })
        .collect();
    let after = rss_bytes().unwrap_or(0);
    let t = std::time::Instant::now();
    let mut done = vec![false; n];
    let mut remaining = n;
    while remaining > 0 {
        for (w, d) in worlds.iter_mut().zip(done.iter_mut()) {
            if !*d && w.step() {
                *d = true;
                remaining -= 1;
            }
        }
    }
    let real_secs = t.elapsed().as_secs_f64();
    let peak = rss_bytes().unwrap_or(0).max(after);
    let sim_secs = worlds.iter().map(|w| w.now_ms).max().unwrap_or(0) as f64 / 1000.0;
    let mut decisions = 0;
    let mut violations = 0;
    for w in worlds {
        let o = w.finish();
        decisions += o.decisions;
        violations += usize::from(o.violation.is_some());
    }
    ScaleReport {
        control_planes: n,
        decisions,
        violations,
        real_secs,
        sim_secs,
        bytes_per_control_plane: peak.saturating_sub(before) / n.max(1) as u64,
    }
}

/// Runs one seed.
pub fn run(cfg: Config) -> Outcome {
    World::new(cfg).run()
}

/// The command that replays a seed.
pub fn replay_command(o: &Outcome) -> String {
    let mut c = format!(
        "cargo run --release -p quorum-sim -- --seed {} --scenario {} --trace",
        o.seed,
        o.scenario.name()
    );
    if o.replicas > 1 {
        let _ = write!(c, " --replicas {}", o.replicas);
        if o.lease_ttl_ms != DEFAULT_LEASE_TTL_MS {
            let _ = write!(c, " --lease-ttl-ms {}", o.lease_ttl_ms);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(scenario: Scenario, strict: bool) -> World {
        let mut c = Config::new(1);
        c.scenario = scenario;
        c.strict_reconfig = strict;
        c.trace = true;
        World::new(c)
    }

    #[test]
    fn the_checker_sees_quorum_lost_by_an_action() {
        // 3 voters, one partitioned: removing a healthy one leaves 1 of 2 connected.
        let mut w = world(Scenario::RolloutSurge0, false);
        let victim = w.members[2].id;
        w.impairment = Some((Impairment::PartitionedFromPeers(w.members[1].id), 1_000));
        let a = Action::RemoveMember {
            member_id: victim,
            machine: None,
        };
        assert!(matches!(w.perform(&a, false), Answer::Done));
        assert!(
            w.violation.as_deref().unwrap_or("").contains("quorum lost"),
            "{:?}",
            w.violation
        );
    }

    #[test]
    fn the_checker_sees_a_machine_deleted_under_a_voter() {
        let mut w = world(Scenario::Rollout, true);
        let a = Action::DeleteMachine {
            machine: "sim-1".into(),
        };
        w.perform(&a, false);
        assert!(
            w.violation.as_deref().unwrap_or("").contains("still votes"),
            "{:?}",
            w.violation
        );
    }

    #[test]
    fn strict_reconfig_refuses_an_early_add() {
        let mut w = world(Scenario::ScaleUp, true);
        w.members[0].connected_since_ms = w.now_ms;
        let add = |w: &mut World, peer| etcd_answer(EtcdCall::AddLearner, w.add_learner(peer));
        assert_eq!(
            w.add_learner("http://127.9.9.9:2380"),
            Err(UNHEALTHY_CLUSTER)
        );
        w.now_ms += HEALTH_INTERVAL_MS;
        assert!(matches!(add(&mut w, "http://127.9.9.9:2380"), Answer::Done));
        // The same add again is "already done"; a second learner is refused.
        assert_eq!(w.add_learner("http://127.9.9.9:2380"), Err(PEER_URLS_EXIST));
        assert!(matches!(add(&mut w, "http://127.9.9.9:2380"), Answer::Done));
        assert!(
            matches!(add(&mut w, "http://127.9.9.8:2380"), Answer::Refused(m) if m == TOO_MANY_LEARNERS.message)
        );
    }

    /// Two replicas, no random faults: only what a test injects happens.
    fn two_replicas(scenario: Scenario, strict: bool) -> World {
        let mut c = Config::with_two_replicas(1);
        c.scenario = scenario;
        c.strict_reconfig = strict;
        c.fault_per_mille = 0;
        c.trace = true;
        World::new(c)
    }

    fn steps(w: &mut World, n: u64) {
        for _ in 0..n {
            w.step();
        }
    }

    #[test]
    fn one_replica_leads_without_a_lease() {
        let w = world(Scenario::Rollout, true);
        assert_eq!(w.replicas.len(), 1);
        assert!(w.leader_key.is_none());
        assert_eq!(w.lease_left_ms(0), None);
        assert!(w.holds_lease(0));
    }

    #[test]
    fn a_leader_renews_and_keeps_its_lease() {
        let mut w = two_replicas(Scenario::ScaleUp, true);
        let n = 3 * w.ttl_steps();
        steps(&mut w, n);
        let k = w.leader_key.expect("held");
        assert_eq!((k.holder, k.token), (0, 1));
        let left = w.lease_left_ms(0).expect("a lease");
        assert!(left as u64 >= margin_ms(w.cfg.lease_ttl_ms), "{left}");
        assert_eq!(w.lease, LeaseCounts::default(), "{}", w.trace);
    }

    #[test]
    fn a_paused_leader_is_replaced_and_its_stale_step_lands_once() {
        let mut w = two_replicas(Scenario::Rollout, true);
        let a = Action::StartMachine {
            machine: "sim-1".into(),
            state: ClusterState::Existing,
            initial_cluster: vec![],
        };
        w.replicas[0].in_flight = Some(a);
        let pause_steps = w.ttl_steps() + 5;
        w.pause(0, pause_steps, "");
        steps(&mut w, pause_steps);
        assert_eq!(w.leader_key.map(|k| k.holder), Some(1), "{}", w.trace);
        assert_eq!(w.lease.takeovers, 1);
        assert_eq!(w.lease.stale_side_effects, 1, "{}", w.trace);
        assert!(w.replicas[0].term.is_none(), "r0 stepped down");
        assert!(
            w.trace.contains("STALE r0 (token 1, store token 2)"),
            "{}",
            w.trace
        );
        let o = w.run();
        assert_eq!(o.violation, None, "{}", o.trace);
    }

    #[test]
    fn a_deposed_leaders_store_write_is_fenced() {
        let mut w = two_replicas(Scenario::ScaleDown, true);
        w.replicas[0].in_flight = Some(Action::MarkDeleting {
            machine: "sim-1".into(),
            reason: quorum_core::DeleteReason::ScaleDown,
        });
        let pause_steps = w.ttl_steps() + 1;
        w.pause(0, pause_steps, "");
        steps(&mut w, pause_steps);
        assert_eq!(w.lease.fenced_writes, 1, "{}", w.trace);
        assert_eq!(w.lease.stale_side_effects, 0);
        assert!(w
            .trace
            .contains("r0 steps down (token 1): its in-flight write"));
        assert!(w.replicas[0].term.is_none());
    }

    #[test]
    fn a_lease_lost_after_a_removal_fences_the_old_leader() {
        let mut w = two_replicas(Scenario::Rollout, true);
        w.lose_lease_after_removal = true;
        for _ in 0..2_000 {
            if w.lease.leases_lost_after_removal > 0 && w.lease.takeovers > 0 {
                break;
            }
            w.step();
        }
        assert_eq!(w.lease.leases_lost_after_removal, 1, "{}", w.trace);
        assert!(w.replicas[0].term.is_none(), "{}", w.trace);
        assert_eq!(w.lease.takeovers, 1);
        let o = w.run();
        assert_eq!(o.violation, None, "{}", o.trace);
    }

    #[test]
    fn the_checker_sees_a_side_effect_without_a_lease() {
        let mut w = two_replicas(Scenario::Rollout, true);
        w.leader_key = None;
        let a = Action::StopMachine {
            machine: "sim-9".into(),
        };
        w.perform_as(0, &a, false);
        assert!(
            w.violation
                .as_deref()
                .unwrap_or("")
                .contains("without a valid lease"),
            "{:?}",
            w.violation
        );
    }

    #[test]
    fn the_checker_sees_two_replicas_acting_with_valid_leases() {
        let mut w = two_replicas(Scenario::Rollout, true);
        w.replicas[1].term = w.replicas[0].term;
        let a = Action::StopMachine {
            machine: "sim-9".into(),
        };
        w.perform_as(0, &a, false);
        assert_eq!(w.violation, None);
        w.perform_as(1, &a, false);
        assert!(
            w.violation
                .as_deref()
                .unwrap_or("")
                .contains("acted in one step"),
            "{:?}",
            w.violation
        );
    }

    /// The hazard the in-flight pause is kept away from without etcd's strict check: a
    /// removal decided while 3 voters were healthy, performed stale after one failed.
    #[test]
    fn a_stale_removal_is_stopped_only_by_etcds_strict_check() {
        for strict in [false, true] {
            let mut w = two_replicas(Scenario::RolloutSurge0, strict);
            let victim = w.members[2].id;
            if let Some(p) = w.procs.get_mut("sim-2") {
                p.running = false;
            }
            w.leader_key = None;
            let a = Action::RemoveMember {
                member_id: victim,
                machine: Some("sim-3".into()),
            };
            let answer = w.perform_as(0, &a, true);
            assert_eq!(w.lease.stale_side_effects, 1);
            if strict {
                assert!(matches!(answer, Answer::Refused(_)));
                assert_eq!(w.violation, None);
            } else {
                assert!(
                    w.violation.as_deref().unwrap_or("").contains("quorum lost"),
                    "{:?}",
                    w.violation
                );
            }
            assert_eq!(
                w.may_pause_in_flight(&a),
                strict,
                "the simulator holds a removal up only with the strict check"
            );
        }
    }

    #[test]
    fn a_lagging_learner_is_not_promoted() {
        let mut w = world(Scenario::ScaleUp, false);
        assert_eq!(w.add_learner("http://127.9.9.9:2380"), Ok(()));
        let id = w.members.last().unwrap().id;
        assert_eq!(w.promote(id), Err(LEARNER_NOT_IN_SYNC));
        assert!(matches!(
            etcd_answer(EtcdCall::Promote, w.promote(id)),
            Answer::Refused(_)
        ));
        let voter = w.members[0].id;
        assert_eq!(w.promote(voter), Err(NOT_A_LEARNER));
        assert!(
            matches!(
                etcd_answer(EtcdCall::Promote, w.promote(voter)),
                Answer::Done
            ),
            "a voter: already done"
        );
    }

    /// The table's terms turned into the simulator's (its answers, its load balancer
    /// reachable or not, or none) and back through the functions `controller_step` uses.
    struct Sim {
        w: World,
        calls: u64,
    }

    impl quorum_core::pacing::Driver for Sim {
        fn machines(&mut self, now_ms: u64, machines: &[Machine]) {
            self.w.now_ms = now_ms;
            self.w.machines = machines.to_vec();
            self.w.observe_pacing(0);
        }
        fn attempt(
            &mut self,
            now_ms: u64,
            a: &Action,
            outcome: Attempt,
            random: u64,
        ) -> Option<u64> {
            self.w.now_ms = now_ms;
            // etcd's real answers, through the classifier as `perform` passes them.
            let answer = match outcome {
                Attempt::Done => etcd_answer(EtcdCall::AddLearner, Ok(())),
                Attempt::Refused => etcd_answer(EtcdCall::AddLearner, Err(UNHEALTHY_CLUSTER)),
                Attempt::Failed => etcd_answer(EtcdCall::MoveLeader, Err(BAD_LEADER_TRANSFEREE)),
            };
            let attempt = World::attempt_of(&answer).expect("not fenced");
            assert_eq!(attempt, outcome);
            self.w.record_attempt(0, a, attempt, random)
        }
        fn check(&mut self, now_ms: u64, a: &Action, lb_in_step: bool) -> pacing::Verdict {
            self.calls += 1;
            self.w.now_ms = now_ms;
            // Out of step: an unreachable load balancer. In step: a reachable one, or
            // none at all.
            self.w.lb = (!lb_in_step || self.calls.is_multiple_of(2)).then(|| SimLb {
                down_until_step: (!lb_in_step).then_some(u64::MAX),
                ..SimLb::default()
            });
            let in_step = self.w.sync_lb();
            self.w.pacing_verdict(0, a, in_step)
        }
    }

    #[test]
    fn the_simulator_paces_by_the_shared_table() {
        for case in quorum_core::pacing::table() {
            let mut d = Sim {
                w: world(Scenario::Rollout, true),
                calls: 0,
            };
            if let Err(e) = quorum_core::pacing::run_case(&case, &mut d) {
                panic!("{e}");
            }
        }
    }

    /// No random faults: only what a test injects happens.
    fn quiet(scenario: Scenario, strict: bool, load_balancer: bool) -> World {
        let mut c = Config::new(1);
        c.scenario = scenario;
        c.strict_reconfig = strict;
        c.load_balancer = load_balancer;
        c.fault_per_mille = 0;
        c.trace = true;
        World::new(c)
    }

    #[test]
    fn a_refused_add_is_retried_after_a_real_backoff() {
        // The one voter has just (re)connected: etcd's strict check refuses adds for 5 s.
        let mut w = quiet(Scenario::ScaleUp, true, false);
        w.members[0].connected_since_ms = w.now_ms;
        let steps = HEALTH_INTERVAL_MS / STEP_MS - 5;
        for _ in 0..steps {
            w.step();
        }
        let refusals = w
            .trace
            .matches("refused: etcdserver: unhealthy cluster")
            .count() as u64;
        // Backing off 125..=250 ms after the third refusal: about one try in two steps,
        // never one per step.
        assert!(refusals >= steps / 4, "{refusals} of {steps}\n{}", w.trace);
        assert!(
            refusals <= steps * 2 / 3,
            "{refusals} of {steps}\n{}",
            w.trace
        );
        assert!(w.pacing_counts.backoff_holds > 0);
        let o = w.run();
        assert_eq!(o.violation, None, "{}", o.trace);
    }

    #[test]
    fn a_removal_waits_for_the_drain_and_for_the_load_balancer() {
        let mut w = quiet(Scenario::ScaleDown, false, true);
        // The load balancer is unreachable from the start, for 40 steps.
        if let Some(lb) = w.lb.as_mut() {
            lb.down_until_step = Some(40);
        }
        let o = w.run();
        assert_eq!(o.violation, None, "{}", o.trace);
        assert!(o.pacing.lb_holds > 0, "{}", o.trace);
        assert!(o.pacing.drain_holds > 0, "{}", o.trace);
        assert_eq!(o.pacing.paced_removals, 2, "{}", o.trace);
        let first_removal = o.trace.find("did 'remove the member of").expect("removed");
        let healed = o.trace.find("HEAL the load balancer").expect("healed");
        assert!(healed < first_removal, "{}", o.trace);
        assert!(o.trace.contains("the load balancer is not in step"));
        assert!(o.trace.contains("clients drain until"));
    }

    #[test]
    fn the_checker_sees_a_removal_before_the_drain_passed() {
        let mut w = quiet(Scenario::ScaleDown, false, false);
        let url = w.machines[4].client_url();
        let all: Vec<String> = w.machines.iter().map(Machine::client_url).collect();
        let a = Action::RemoveMember {
            member_id: w.members[4].id,
            machine: Some(w.machines[4].name.clone()),
        };
        // Published: its clients are pointed at it.
        w.publish(&all);
        w.perform(&a, false);
        assert!(
            w.violation
                .as_deref()
                .unwrap_or("")
                .contains("while its endpoint is published"),
            "{:?}",
            w.violation
        );
        // Unpublished, but only 400 ms ago.
        let mut w = quiet(Scenario::ScaleDown, false, false);
        w.publish(&all);
        w.publish(
            &all.iter()
                .filter(|u| **u != url)
                .cloned()
                .collect::<Vec<_>>(),
        );
        w.now_ms += 400;
        w.perform(&a, false);
        assert!(
            w.violation
                .as_deref()
                .unwrap_or("")
                .contains("400 ms after its endpoint was unpublished"),
            "{:?}",
            w.violation
        );
        // 500 ms: drained.
        let mut w = quiet(Scenario::ScaleDown, false, false);
        w.publish(&all);
        w.publish(
            &all.iter()
                .filter(|u| **u != url)
                .cloned()
                .collect::<Vec<_>>(),
        );
        w.now_ms += PacingPolicy::DEFAULT.drain_ms;
        w.perform(&a, false);
        assert_eq!(w.violation, None);
    }

    #[test]
    fn the_checker_sees_a_removal_the_load_balancer_still_serves() {
        let mut w = quiet(Scenario::ScaleDown, false, true);
        let all: Vec<String> = w.machines.iter().map(Machine::client_url).collect();
        let a = Action::RemoveMember {
            member_id: w.members[4].id,
            machine: Some(w.machines[4].name.clone()),
        };
        w.publish(&all);
        assert!(w.sync_lb());
        // Unpublished and drained, but the load balancer went away before it caught up.
        if let Some(lb) = w.lb.as_mut() {
            lb.down_until_step = Some(u64::MAX);
        }
        w.publish(&all[..4]);
        assert!(!w.sync_lb());
        w.now_ms += 10 * PacingPolicy::DEFAULT.drain_ms;
        w.perform(&a, false);
        assert!(
            w.violation
                .as_deref()
                .unwrap_or("")
                .contains("while the load balancer still sends clients to it"),
            "{:?}",
            w.violation
        );
    }
}
