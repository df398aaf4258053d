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
//! The repair half (`repair.rs`): a member's disk lost (process killed, data and marker
//! gone, member kept), a crash loop (its next 2 to 6 starts exit at once), a hung member
//! (running, answering nothing), foreign data (a stopped member's data replaced by
//! another cluster's), the keyspace filled to its quota (NOSPACE: writes refused until
//! compacted, defragmented, disarmed), a member applying far behind. The controller keeps
//! the core's `health::Tracker` per replica (a replica that takes over starts with an
//! empty one), the spec remediates after 2 s with maxRetry 1 (`SIM_REMEDIATION`), and
//! once the faults stop a person does what a refusal asks (raises maxRetry; for a NOSPACE
//! alarm the core refuses as recurring, compacts, defragments and disarms). Checked: every
//! start (never `new` after the cluster formed, never on lost or foreign data, never
//! before its restart backoff), every remediation (one at a time, within the limits),
//! every marker (its own member's), and writes accepted again within
//! `NOSPACE_REPAIR_STEPS` once no other fault is active. Two faults are held back where
//! the core cannot repair them (`Config::faults_anywhere` lifts that).
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
//! that `lease::margin_ms` of its lease is left (`lease::standing`), then makes a fenced
//! no-op write; every store write carries its token and is refused once the key is gone
//! or holds another token. A refused write or a renewal the store answers "no such
//! lease" makes a leader step down (dropping its memory); a lease run out by its own
//! clock, its renewals unanswered, only holds it (it acts on nothing until a renewal is
//! answered); a standby polls every `lease::standby_poll_ms` and takes the key once it
//! is free (a new token, fresh memory). Faults added: a replica paused (SIGSTOP) for up
//! to twice the TTL, keeping its memory; a replica crashing and restarting as a standby;
//! the lease lost right after a member removal (the origin bug report); the store
//! unavailable for a while and one store member killed or paused (`store.rs`); and a
//! leader paused between its check and
//! one side effect for longer than the TTL, which it performs on resuming without
//! re-checking (the deposed leader's one stale side effect: its etcd and machine effects
//! land, its store writes are fenced; a member removal is held up so only with etcd's
//! strict reconfiguration check on, as nothing else stops a stale removal decided before
//! a member failed). With one replica (the default) nothing of this exists: the
//! controller leads without a lease, as with the embedded store, and every seed's trace
//! is what it was.
//!
//! With `Config::shards > 1` (`--shards N`, with 2 or 3 replicas) the fleet is sharded
//! (`replicas.rs`): the leader key is the control plane's shard's, each replica holds a
//! registration lease, only the replica the core's `shards::owner_of` assigns the shard
//! to campaigns for it, a holder the shard is no longer assigned to hands it over
//! (revokes its lease, between passes), and the last replica joins during the run. The
//! faults and invariants are the same.
//!
//! After every step the invariants of DESIGN.md are checked (with two replicas also: no
//! side effect without a valid lease except the deposed leader's one in-flight step,
//! never two replicas acting with valid leases in one step, no step-down while the store
//! still holds the lease, and a leader running with a serving store for
//! `lease::resume_after_store_ms` acts); after the fault window the
//! run must converge within a bounded number of steps. The same seed always gives the
//! same trace.

mod backups;
mod carotation;
mod chain;
mod config;
mod controller;
mod etcd;
mod faults;
mod hosts;
mod inplace;
mod invariants;
pub mod model;
mod pacing;
mod publish;
mod rebuild;
mod repair;
mod replicas;
mod requests;
mod store;

use quorum_core::classify::{
    EtcdAnswer, EtcdCall, Verdict, BAD_LEADER_TRANSFEREE, CLIENT_DEADLINE, LEARNER_NOT_IN_SYNC,
    MEMBER_NOT_FOUND, NOT_A_LEARNER, NOT_LEADER, NO_LEADER, PEER_URLS_EXIST, TOO_MANY_LEARNERS,
    UNHEALTHY_CLUSTER,
};
use quorum_core::health;
use quorum_core::lease::{
    margin_ms, renew_every_ms, standby_poll_ms, Standing, DEFAULT_LEASE_TTL_MS,
};
use quorum_core::pacing::{Attempt, Hold, PacingPolicy};
use quorum_core::pass::{self, Pass, Request, Stop};
use quorum_core::record::Applying;
use quorum_core::{
    decide, quorum_size, Action, CaGenerations, CaPhase, CaRotation, ClusterState, ControlPlane,
    ControlPlaneSpec, DataMarker, Decision, EndpointStatus, Machine, MachineObservation, Member,
    Observation, ProcessState, RemediationSpec, RolloutStrategy, Span, Version,
};
use std::collections::{BTreeMap, BTreeSet};

pub use backups::BackupCounts;
pub use carotation::CaCounts;
pub use config::{Config, Outcome, Rng, Scenario};
use controller::{etcd_answer, Answer};
use hosts::HostRemoval;
pub use inplace::{InPlaceCounts, IN_PLACE_END_STEPS, SIM_IN_PLACE_TIMEOUT};
pub use pacing::PacingCounts;
use pacing::SimLb;
pub use publish::PublishCounts;
pub use rebuild::RebuildCounts;
use repair::Keyspace;
pub use repair::{RepairCounts, NOSPACE_REPAIR_STEPS};
pub use replicas::LeaseCounts;
use replicas::{LeaderKey, Replica, Term};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// Simulated time per controller iteration (observe, decide, act).
pub const STEP_MS: u64 = 100;
/// The end of the simulated CA (ten years after the epoch): past every certificate.
pub const SIM_CA_NOT_AFTER_UNIX_S: i64 = EPOCH_UNIX_S + 10 * 365 * 86_400;
/// etcd's strict reconfiguration health interval.
const HEALTH_INTERVAL_MS: u64 = 5_000;
/// A removed member's process exits this long after the removal.
const REMOVED_EXIT_MS: u64 = 1_000;
/// Time without a leader before a new election succeeds.
const ELECTION_MS: u64 = 1_000;
/// Steps after the fault window within which the run must converge.
pub const CONVERGE_WITHIN_STEPS: u64 = 3_000;
/// The simulated clock's Unix time at 0 ms (the observation's `now_unix_s`).
pub const EPOCH_UNIX_S: i64 = 1_700_000_000;
/// The spec's remediation in the simulator: a problem counts after 2 s (a partition or
/// a hidden endpoint of 0.5 to 4.5 s sometimes outlasts it), a slot is replaced again
/// after 5 s at the soonest, once in a row (maxRetry 1), and a replacement healthy for
/// 30 s starts the count afresh: within a 40 s fault window, a slot can exhaust it.
/// `spec.recovery` in the simulator: fenced directories kept a minute (runs are minutes
/// long), so that runs remove some.
pub const SIM_RECOVERY: quorum_core::fenced::RecoverySpec = quorum_core::fenced::RecoverySpec {
    keep_fenced: quorum_core::Span::from_secs(60),
};

pub const SIM_REMEDIATION: RemediationSpec = RemediationSpec {
    unhealthy_after: Span::from_secs(2),
    max_retry: 1,
    retry_period: Span::from_secs(5),
    min_healthy_period: Span::from_secs(30),
};
/// A crashed replica (of two) restarts as a standby after this many steps at least...
const RESTART_MIN_STEPS: u64 = 5;
/// ...plus up to this many more.
const RESTART_SPREAD_STEPS: u64 = 40;

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
    /// The machine whose peer URL it has, found once when the member is added (addresses
    /// are never reused): matching by formatting URLs every time cost half the run.
    machine: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct Proc {
    running: bool,
    has_data: bool,
    /// Exit at this time (a removed member shuts itself down).
    exit_at_ms: Option<u64>,
    /// The identity marker of its data directory (none before quorum writes it).
    marker: Option<DataMarker>,
    /// When its process was started (Unix seconds of the simulated clock), the last
    /// `health::STARTS_KEPT`, as the provider keeps them.
    starts_unix_s: Vec<i64>,
    /// Those that followed a stop quorum asked for (planned), as the local provider
    /// marks them (`stop_asked` taken by the next start).
    planned_starts_unix_s: Vec<i64>,
    /// Quorum stopped it (`StopMachine`): its next start is planned.
    stop_asked: bool,
    /// A crash loop: this many of its next starts exit at once.
    crash_starts_left: u32,
    /// The size of its database file (it grows with the keyspace and shrinks only by a
    /// defragmentation).
    db_size_bytes: u64,
    /// Defragmenting until then: it answers nothing and votes nothing.
    stalled_until_ms: Option<u64>,
    /// Its own publish was lost (`publish.rs`): it runs and replicates, the cluster shows
    /// it started, but its endpoint answers nothing until then (etcd's retry).
    publish_lost_until_ms: Option<u64>,
    /// The etcd version of the binary it was last started from (the machine record's
    /// version at that start): what it reports while it runs.
    binary: Option<Version>,
    /// A fault: every start of this version exits at once (a broken binary on the host).
    bad_binary: Option<Version>,
    /// When it was last started, and when its in-place phase was last recorded: the
    /// first start in a phase (on that phase's binary) is not held to the backoff.
    last_start_ms: Option<u64>,
    phase_at_ms: Option<u64>,
    /// The CA files of its last start.
    files: CaGenerations,
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
    /// The member's process hangs (SIGSTOP): it keeps running but answers nothing, to
    /// its peers or to the controller.
    Hung(String),
    /// The member applies far behind its log (a slow disk): its applied index trails
    /// the leader by `LAG_ENTRIES`.
    Lagging(u64),
    /// A host is lost (`hosts.rs`): its processes stopped, its agent silent.
    HostDown(String),
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
    /// The leader's log index (every acknowledged write is at or below it). It starts
    /// far enough into the log that a lagging member can trail it by more than
    /// `health::MAX_APPLY_LAG_ENTRIES`.
    commit: u64,
    acked: u64,
    next_member_id: u64,
    /// Orphan members that run outside quorum's machines (reachable by peers only).
    external_running: BTreeSet<u64>,
    slow_learners: BTreeSet<u64>,
    impairment: Option<(Impairment, u64)>,
    /// etcd's cluster version (its minor line): the lowest minor every member ran when
    /// the leader last saw them all; it never moves down.
    cluster_version: Version,
    /// When the leader next looks at its members' versions.
    next_version_check_ms: u64,
    // -- provider (by machine name)
    procs: BTreeMap<String, Proc>,
    // -- durable store
    cp: ControlPlane,
    machines: Vec<Machine>,
    next_serial: u64,
    next_address: u32,
    /// The client addresses a client was given once the first voters served, and told
    /// again after a change of the replica count (with it): one of them must always
    /// name a voter (`reach`).
    client_given: (u32, Vec<Ipv4Addr>),
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
    /// Sharded: the control plane's shard, and when each replica's registration
    /// expires in the store (0: never registered).
    shard: u32,
    registered_until_ms: Vec<u64>,
    /// Armed fault: the next successful member removal loses the leader's lease.
    lose_lease_after_removal: bool,
    /// Replicas that performed a side effect with a valid lease this step.
    acted_with_lease: BTreeSet<usize>,
    lease: LeaseCounts,
    /// The management etcd the replicas share (two replicas only).
    store: store::SimStore,
    /// What CA rotations did.
    ca: CaCounts,
    // -- the keyspace: revisions, compaction, alarms and the quota
    space: Keyspace,
    repair: RepairCounts,
    publish: publish::PublishCounts,
    /// Learners stopped outside a removal, an in-place step or a teardown (`publish.rs`).
    publish_stopped: BTreeSet<String>,
    /// Since when (step) a NOSPACE alarm has been active with no other fault: writes
    /// must be accepted again within `repair::NOSPACE_REPAIR_STEPS`.
    nospace_whole_since_step: Option<u64>,
    /// What the leading controller's last decision refused, if it refused.
    last_refusal: Option<String>,
    /// What the leading controller's last decision waited for (traced when it changes).
    last_wait: Option<String>,
    /// The operator's `quorum defrag` under way.
    operator: repair::OperatorDefrag,
    /// The learner a deposed leader's stale step added (by peer URL), if any: the new
    /// leader may have marked a machine for removal meanwhile.
    stale_learner: Option<String>,
    // -- the in-place step (`inplace.rs`)
    /// The versions the spec moves to next, one rollout after another.
    plan: Vec<Version>,
    in_place: InPlaceCounts,
    /// Machines out of service in place, and for how many steps without a fault.
    in_place_open: BTreeMap<String, u64>,
    /// The controller's last decision stopped the rollout after a rollback.
    rollout_stop: inplace::RolloutStop,
    /// Fenced directories (`rebuild.rs`): what a fence moved out of reach, until
    /// `spec.recovery.keepFenced` has passed.
    fenced_dirs: Vec<quorum_core::fenced::FencedSeen>,
    // -- snapshots (`backups.rs`)
    snapshots: Vec<quorum_core::backup::SnapshotSeen>,
    /// The leader's log index each snapshot holds (what a restore from it keeps).
    snapshot_logs: BTreeMap<String, u64>,
    next_snapshot: u64,
    // -- rebuilds a person confirmed (`rebuild.rs`)
    rebuilds: RebuildCounts,
    /// What the leading controller's last `QuorumLost` said, while it holds.
    quorum_lost: Option<String>,
    backups: BackupCounts,
    // -- bookkeeping
    decisions: u64,
    /// What the controller's last decision said (a converged decision takes no action).
    last_converged: bool,
    faults: u64,
    /// Hosts lost (`hosts.rs`).
    hosts_lost: u64,
    /// Stuck rollouts the person took back (`Config::tight_hosts`).
    rollouts_taken_back: u64,
    /// The person's `quorum member` request, once made (`requests.rs`).
    asked: Option<requests::Asked>,
    /// The spare host an operator removes in a hosts run (`hosts.rs`): marked, then gone.
    host_removal: Option<HostRemoval>,
    trace: String,
    hash: u64,
    violation: Option<String>,
}

const OLD: Version = Version::new(3, 4, 23);
const NEW: Version = Version::new(3, 5, 1);

/// How a scenario starts: the members the cluster has, then the replicas, the version
/// and the maxSurge its spec asks for.
fn start_of(scenario: Scenario) -> (u32, u32, Version, u32) {
    match scenario {
        Scenario::Rollout => (3, 3, NEW, 1),
        Scenario::RolloutSurge0 => (3, 3, NEW, 0),
        Scenario::ScaleUp => (1, 3, OLD, 1),
        Scenario::ScaleDown => (5, 3, OLD, 1),
        Scenario::Orphans => (3, 3, OLD, 1),
        Scenario::InPlace => (3, 3, OLD, 1),
        Scenario::InPlace5 => (5, 5, OLD, 1),
        Scenario::QuorumLoss => (3, 3, NEW, 1),
    }
}

/// The control plane a run manages, as created: three replicas on the old version,
/// plain HTTP, the simulator's recovery, remediation and backup settings, on hosts in
/// a hosts run.
fn sim_control_plane(cfg: &Config) -> ControlPlane {
    ControlPlane {
        spec_version: 0,
        client_addresses: Vec::new(),
        ca_generation: 0,
        ca_rotation: None,
        road: None,
        v2_api_never_open: false,
        name: "sim".into(),
        spec: ControlPlaneSpec {
            recovery: SIM_RECOVERY,
            deletion_protection: false,
            replicas: 3,
            version: OLD,
            rollout: RolloutStrategy::default(),
            paused: false,
            haproxy: None,
            certificates: Default::default(),
            insecure_plaintext: true,
            remediation: SIM_REMEDIATION,
            maintenance: Default::default(),
            backup: backups::sim_backup(),
            provider: if cfg.hosts {
                quorum_core::ProviderKind::Hosts
            } else {
                quorum_core::ProviderKind::Local
            },
        },
        deleting: false,
        rebuild: None,
    }
}

impl World {
    pub fn new(cfg: Config) -> World {
        let mut w = World::blank(cfg);
        let (start, spec_replicas, version, surge) = start_of(cfg.scenario);
        let (from, version) = match cfg.scenario {
            Scenario::InPlace | Scenario::InPlace5 => {
                let from = w.plan_in_place();
                (from, w.cp.spec.version)
            }
            _ => (OLD, version),
        };
        // Created with as many replicas as it starts with (the stores reserve the client
        // addresses for them); the spec's count below is a person's later change.
        w.cp.spec.replicas = start;
        for _ in 0..start {
            w.seed_member(from);
        }
        w.cluster_version = inplace::line_of(from);
        if cfg.scenario == Scenario::Orphans {
            w.seed_orphans();
        }
        w.leader = w.members.first().map(|m| m.id);
        w.cp.spec.replicas = spec_replicas;
        w.cp.spec.version = version;
        w.cp.spec.rollout.max_surge = surge;
        // In some seeds the person asks for a version two minors away: a chained
        // upgrade (`chain`), by replacement or in place.
        let chains = matches!(cfg.scenario, Scenario::Rollout | Scenario::InPlace);
        if chains && cfg.chain {
            w.plan.clear();
            w.record_road(from, chain::CHAIN_TARGET);
        }
        // The cluster has been up a while: the first change need not wait.
        w.now_ms = HEALTH_INTERVAL_MS;
        w.note_start(start, from, version);
        w.start_replicas();
        w
    }

    /// The world before its cluster is seeded: no member, no machine, nothing counted.
    fn blank(cfg: Config) -> World {
        World {
            cfg,
            rng: Rng::new(cfg.seed),
            now_ms: 0,
            step: 0,
            members: vec![],
            leader: None,
            leaderless_since_ms: 0,
            term: 1,
            commit: repair::INITIAL_LOG_INDEX,
            acked: repair::INITIAL_LOG_INDEX,
            next_member_id: 0x1000,
            external_running: BTreeSet::new(),
            slow_learners: BTreeSet::new(),
            impairment: None,
            procs: BTreeMap::new(),
            cp: sim_control_plane(&cfg),
            machines: vec![],
            next_serial: 1,
            next_address: 1,
            client_given: (0, vec![]),
            replicas: vec![],
            published: BTreeSet::new(),
            unpublished_at_ms: BTreeMap::new(),
            lb: cfg.load_balancer.then(SimLb::default),
            pacing_counts: PacingCounts::default(),
            leader_key: None,
            last_token: 0,
            shard: 0,
            registered_until_ms: vec![],
            lose_lease_after_removal: false,
            acted_with_lease: BTreeSet::new(),
            store: store::SimStore::default(),
            lease: LeaseCounts::default(),
            space: Keyspace::default(),
            repair: RepairCounts::default(),
            publish: Default::default(),
            publish_stopped: BTreeSet::new(),
            nospace_whole_since_step: None,
            last_refusal: None,
            last_wait: None,
            operator: Default::default(),
            stale_learner: None,
            plan: vec![],
            in_place: InPlaceCounts::default(),
            fenced_dirs: Vec::new(),
            snapshots: Vec::new(),
            snapshot_logs: BTreeMap::new(),
            next_snapshot: 0,
            rebuilds: RebuildCounts::default(),
            ca: CaCounts::default(),
            quorum_lost: None,
            backups: BackupCounts::default(),
            in_place_open: BTreeMap::new(),
            rollout_stop: Default::default(),
            cluster_version: OLD,
            next_version_check_ms: 0,
            decisions: 0,
            last_converged: false,
            faults: 0,
            hosts_lost: 0,
            rollouts_taken_back: 0,
            asked: None,
            host_removal: None,
            trace: String::new(),
            hash: 0xcbf2_9ce4_8422_2325,
            violation: None,
        }
    }

    /// The orphan members of `Scenario::Orphans`: a voter whose machine record was
    /// lost, running outside quorum's machines, and a learner that was added but never
    /// started.
    fn seed_orphans(&mut self) {
        let id = self.new_member_id();
        self.members.push(SimMember {
            id,
            name: "ghost".into(),
            peer_url: "http://127.250.0.1:2380".into(),
            is_learner: false,
            log: self.commit,
            connected_since_ms: 0,
            machine: None,
        });
        self.external_running.insert(id);
        let id = self.new_member_id();
        self.members.push(SimMember {
            id,
            name: String::new(),
            peer_url: "http://127.250.0.2:2380".into(),
            is_learner: true,
            log: 0,
            connected_since_ms: 0,
            machine: None,
        });
    }

    /// The trace's first line: how the run starts (`start` members on etcd `from`) and
    /// what its spec asks for.
    fn note_start(&mut self, start: u32, from: Version, version: Version) {
        let cfg = self.cfg;
        self.note(format!(
            "start {} with {start} members on etcd {from}, spec etcd {version}{}{}, strict reconfig {}{}",
            cfg.scenario.name(),
            if self.in_place_strategy() { " in place" } else { "" },
            self.plan.iter().map(|v| format!(" then {v}")).collect::<String>(),
            if cfg.strict_reconfig { "on" } else { "off" },
            if cfg.load_balancer {
                ", behind a load balancer"
            } else {
                ""
            }
        ));
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
        // Each replica asks a store member of its own first.
        for i in 0..n {
            let first = self.rng.below(store::STORE_MEMBERS as u64) as usize;
            self.replicas[i].store = store::StoreView::new(first);
        }
        if self.sharded() {
            self.start_sharded(n);
            return;
        }
        self.take_lead(0);
    }

    fn new_member_id(&mut self) -> u64 {
        self.next_member_id += 1 + self.rng.below(7);
        self.next_member_id
    }

    fn alloc_machine(
        &mut self,
        bootstrap: bool,
        version: Version,
        remediation: Option<quorum_core::Remediation>,
    ) -> Result<Machine, String> {
        let placement = self.place_machine(remediation.as_ref().map(|r| r.machine.clone()))?;
        let serial = self.next_serial;
        self.next_serial += 1;
        let address = match &placement {
            // Members on hosts go where placement puts them (`reach` keeps no list).
            Some(_) => self.fresh_address(),
            None => self.take_address()?,
        };
        let m = Machine {
            requested: None,
            // Recorded with the CA files of a rotation's phase, as the stores do.
            ca_step: self.cp.ca_step_now().filter(|_| self.cfg.ca_rotation),
            placement,
            name: format!("sim-{serial}"),
            serial,
            address,
            version,
            bootstrap,
            deleting: false,
            // TLS where the run rotates its CA (the rotation restarts TLS members only).
            tls: self.cfg.ca_rotation,
            certificates_not_after_unix_s: self.renewed_not_after(self.now_unix_s()),
            remediation,
            in_place: None,
        };
        self.machines.push(m.clone());
        self.procs.insert(m.name.clone(), Proc::default());
        Ok(m)
    }

    /// When the certificates of a TLS machine created or restarted in place now end, as
    /// the controller computes it (`CertificatesSpec::not_after_unix_s`); `None` for a
    /// plaintext run.
    pub(crate) fn renewed_not_after(&self, now_unix_s: i64) -> Option<i64> {
        let certificates = &self.cp.spec.certificates;
        self.cfg
            .ca_rotation
            .then(|| certificates.not_after_unix_s(now_unix_s, SIM_CA_NOT_AFTER_UNIX_S))
    }

    /// An address no machine ever had (members on hosts).
    fn fresh_address(&mut self) -> Ipv4Addr {
        let n = self.next_address;
        self.next_address += 1;
        Ipv4Addr::new(127, 200, (n / 250) as u8, (n % 250 + 2) as u8)
    }

    /// A local machine's address, as the stores choose it (`take_address`; the
    /// controller's observation is fresh when it allocates; here it is the truth).
    fn take_address(&mut self) -> Result<Ipv4Addr, String> {
        let peer_urls: Vec<String> = self.members.iter().map(|m| m.peer_url.clone()).collect();
        let mut next = self.next_address;
        let fresh = || {
            let n = next;
            next += 1;
            Ipv4Addr::new(127, 200, (n / 250) as u8, (n % 250 + 2) as u8)
        };
        let a = take_address(&mut self.cp, &self.machines, &peer_urls, fresh);
        self.next_address = next;
        a.ok_or_else(|| "no address left".to_string())
    }

    /// A healthy running member with its machine, as the scenario's starting point.
    fn seed_member(&mut self, version: Version) {
        // The hosts of a run hold every seeded member (`hosts::HOSTS`).
        let m = self
            .alloc_machine(true, version, None)
            .expect("a host for every seeded member");
        let id = self.new_member_id();
        self.members.push(SimMember {
            id,
            name: m.name.clone(),
            peer_url: m.peer_url(),
            is_learner: false,
            log: self.commit,
            connected_since_ms: 0,
            machine: Some(m.name.clone()),
        });
        let db = self.space.in_use_bytes();
        let p = self.procs.get_mut(&m.name).expect("just allocated");
        p.running = true;
        p.has_data = true;
        p.db_size_bytes = db;
        p.binary = Some(version);
        self.record_ca_files(&m.name);
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
        self.host_removal_step();
        if faults_on {
            self.maybe_fault();
            if self.ha() {
                self.maybe_replica_fault();
            }
        }
        self.heal();
        if !faults_on {
            self.end_crash_loops();
            self.operator_step();
        }
        self.stuck_rollout_operator(faults_on);
        self.member_request_step();
        self.quorum_loss_step(faults_on);
        self.in_place_operator(faults_on);
        self.ca_rotation_operator();
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
            self.check_requests();
            self.check_published();
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
            shards: self.cfg.shards,
            lease: self.lease,
            pacing: self.pacing_counts,
            repair: self.repair,
            publish: self.publish,
            in_place: self.in_place,
            backups: self.backups,
            rebuilds: self.rebuilds,
            ca: self.ca,
            faults_anywhere: self.cfg.faults_anywhere,
            hosts: self.cfg.hosts,
            hosts_lost: self.hosts_lost,
            rollouts_taken_back: self.rollouts_taken_back,
            member_request: self.asked.as_ref().map(|a| a.request),
            hosts_removed: u64::from(self.host_removal.as_ref().is_some_and(|r| r.gone)),
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
    if o.faults_anywhere {
        c.push_str(" --faults-anywhere");
    }
    let _ = write!(c, " --provider {}", if o.hosts { "hosts" } else { "local" });
    if o.replicas > 1 {
        let _ = write!(c, " --replicas {}", o.replicas);
        if o.lease_ttl_ms != DEFAULT_LEASE_TTL_MS {
            let _ = write!(c, " --lease-ttl-ms {}", o.lease_ttl_ms);
        }
        if o.shards > 1 {
            let _ = write!(c, " --shards {}", o.shards);
        }
    }
    c
}

#[cfg(test)]
mod tests;

/// A new local machine's address, as the stores choose it (`quorum_core::reach::take`):
/// one of `cp`'s client addresses no machine of `machines` holds and no member's peer
/// URL (`peer_urls`) names, else `fresh()`. The simulator and the model check share it.
pub(crate) fn take_address(
    cp: &mut ControlPlane,
    machines: &[Machine],
    peer_urls: &[String],
    mut fresh: impl FnMut() -> Ipv4Addr,
) -> Option<Ipv4Addr> {
    use quorum_core::reach;
    use std::net::SocketAddrV4;
    let held: Vec<SocketAddrV4> = machines.iter().map(Machine::client_address).collect();
    let named: Vec<Ipv4Addr> = peer_urls
        .iter()
        .filter_map(|u| reach::address_of_url(u))
        .collect();
    let usable = |a: SocketAddrV4| !named.contains(a.ip());
    let port = quorum_core::model::CLIENT_PORT;
    let mut fresh = || Some(SocketAddrV4::new(fresh(), port));
    let kept = cp.client_addresses.clone();
    let t = reach::take(&kept, &held, cp.spec.replicas, &usable, &mut fresh)?;
    cp.client_addresses = t.addresses;
    Some(*t.address.ip())
}
