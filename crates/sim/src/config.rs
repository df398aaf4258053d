//! What a run is: the seeded generator, the scenarios, a run's knobs and its outcome.

use super::*;

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
    /// 3 members upgraded in place (`strategy: InPlace`), along a version plan chosen by
    /// the seed (`inplace::VERSION_PLANS`): a minor step then a patch step, a minor step,
    /// or a patch step.
    InPlace,
    /// The same with 5 members.
    InPlace5,
    /// 3 members rolled to 3.5.1, and during it a majority of voters dies with its data;
    /// once `QuorumLost` shows, a person recovers from the survivor it names or restores
    /// the newest verified snapshot (`rebuild.rs`).
    QuorumLoss,
}

impl Scenario {
    pub const ALL: [Scenario; 8] = [
        Scenario::Rollout,
        Scenario::RolloutSurge0,
        Scenario::ScaleUp,
        Scenario::ScaleDown,
        Scenario::Orphans,
        Scenario::InPlace,
        Scenario::InPlace5,
        Scenario::QuorumLoss,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Rollout => "rollout",
            Scenario::RolloutSurge0 => "rollout-surge0",
            Scenario::ScaleUp => "scale-up",
            Scenario::ScaleDown => "scale-down",
            Scenario::Orphans => "orphans",
            Scenario::InPlace => "in-place",
            Scenario::InPlace5 => "in-place-5",
            Scenario::QuorumLoss => "quorum-loss",
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
    /// Shards of a sharded fleet (`controller --shards`; 1: not sharded). With 2 or 3
    /// replicas: each replica registers on a lease of its own, the control plane's shard
    /// goes to the live replica `quorum_core::shards::owner_of` names, only that replica
    /// campaigns for the shard's lease, and a holder the shard is no longer assigned to
    /// hands it over (stops, then revokes its lease). The last replica joins later.
    pub shards: u32,
    /// A load balancer (HAProxy) in front of the members, kept in step with the published
    /// endpoints by the controller; it may be unreachable for a while (a seeded fault).
    pub load_balancer: bool,
    /// Inject the repair faults in any state. Off by default, two are held back where
    /// the core's rules cannot repair them (these runs show where it then waits for
    /// ever): NOSPACE without a quorum margin to defragment into, or with member faults
    /// while the alarm is active (`faults::nospace_repairable`); and a member's data
    /// lost for good (disk, foreign data) while another machine is leaving, whose
    /// removal then needs the dead member's vote and which blocks its remediation (one
    /// at a time).
    pub faults_anywhere: bool,
    /// TLS members, and a person runs `quorum rotate-ca` once within the fault window
    /// (`carotation.rs`).
    pub ca_rotation: bool,
    /// Members on hosts (`spec.provider: hosts`, `hosts.rs`): placed by the core's
    /// placement, and a host may be lost for a while. Not with a quorum loss (a rebuild
    /// on hosts is refused by the product for now).
    pub hosts: bool,
    /// Of hosts runs of `Scenario::Rollout`: only as many hosts as replicas, each its
    /// own domain. The rollout by replacement has no host for its surge machine, so the
    /// core refuses it (Blocked, naming the ways out); once the faults stop the person
    /// switches it to in place or cancels it (`quorum upgrade --strategy InPlace` or
    /// `--abort`, by the seed), which `quorum_core::abort` must allow, as it has
    /// changed no member.
    pub tight_hosts: bool,
    /// A person asks for one member's replacement or restart (`quorum member`) at a
    /// step the seed picks (`requests.rs`): a third of the runs, never with a quorum
    /// loss.
    pub member_request: bool,
    /// Of rollout and in-place runs: the person asks for a version two links away, a
    /// chained upgrade (`chain.rs`): a third of them.
    pub chain: bool,
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
            shards: 1,
            load_balancer: (seed / (2 * Scenario::ALL.len() as u64)).is_multiple_of(2),
            faults_anywhere: false,
            ca_rotation: (seed / (4 * Scenario::ALL.len() as u64)).is_multiple_of(2),
            hosts: Scenario::for_seed(seed) != Scenario::QuorumLoss
                && (seed / (8 * Scenario::ALL.len() as u64)).is_multiple_of(2),
            tight_hosts: Scenario::for_seed(seed) == Scenario::Rollout
                && (seed / (16 * Scenario::ALL.len() as u64)).is_multiple_of(2),
            member_request: (seed / 3).is_multiple_of(3),
            chain: (seed / 7) % 3 == 1,
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
    /// Controller replicas, lease TTL and shards of the run (to replay it).
    pub replicas: u8,
    pub lease_ttl_ms: u64,
    pub shards: u32,
    pub lease: LeaseCounts,
    pub pacing: PacingCounts,
    pub repair: RepairCounts,
    pub publish: crate::PublishCounts,
    pub in_place: InPlaceCounts,
    pub backups: crate::BackupCounts,
    pub rebuilds: crate::RebuildCounts,
    pub ca: crate::CaCounts,
    /// The run injected faults anywhere (`Config::faults_anywhere`), to replay it.
    pub faults_anywhere: bool,
    /// Members on hosts (`Config::hosts`), and how many hosts were lost.
    pub hosts: bool,
    pub hosts_lost: u64,
    /// A spare host removed by an operator during the run (0 or 1).
    pub hosts_removed: u64,
    /// Rollouts with no host for their surge machine that the person switched to in
    /// place or cancelled (`Config::tight_hosts`).
    pub rollouts_taken_back: u64,
    /// The person's `quorum member` request of the run, if one was made.
    pub member_request: Option<quorum_core::MachineRequest>,
}
