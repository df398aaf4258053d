//! `quorum-sim`: run seeds of the deterministic simulator, replay one, or benchmark.

use clap::Parser;
use quorum_sim::{
    replay_command, run, BackupCounts, CaCounts, Config, InPlaceCounts, LeaseCounts, Outcome,
    PacingCounts, PublishCounts, RebuildCounts, RepairCounts, Scenario,
};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "quorum-sim",
    about = "Drives quorum's real decision function against a simulated etcd with seeded faults, checking its invariants after every step.",
    after_help = "Examples:\n  quorum-sim --seeds 100000              # run seeds 0..100000, print seeds per second\n  quorum-sim --seed 42 --trace           # replay one seed, step by step\n  quorum-sim --seed 42 --scenario rollout\n  quorum-sim --seeds 10000 --replicas 2  # two controllers sharing a lease, with lease faults"
)]
struct Args {
    /// Replay exactly this seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run this many seeds, starting at --from.
    #[arg(long, default_value_t = 10_000)]
    seeds: u64,
    /// First seed of --seeds.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// rollout, rollout-surge0, scale-up, scale-down, orphans, in-place, in-place-5 or quorum-loss
    /// (default: chosen by the seed).
    #[arg(long)]
    scenario: Option<String>,
    /// Print the whole trace of --seed.
    #[arg(long)]
    trace: bool,
    /// Controller replicas: 1 (one controller, no lease, as with the embedded store), 2
    /// or 3 (replicas sharing a leader lease in the store: renewals every TTL/3, a margin
    /// check and a fenced no-op write before every side effect, takeover by the standby
    /// once the lease expires; plus faults: a replica paused past its TTL, a replica
    /// crashing, the lease lost right after a member removal, a leader paused between
    /// its check and a side effect that it performs, stale, on resuming, the store
    /// unavailable for a while (an election, a majority of it gone), and one store member
    /// killed or paused). A different number of replicas gives a different trace for the
    /// same seed.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=3))]
    replicas: u8,
    /// With --replicas 2 or 3: a sharded fleet of N shards (`controller --shards N`):
    /// each replica registers on a lease, the control plane's shard goes to the live
    /// replica the core assigns it to, a holder it is no longer assigned to hands it
    /// over, and the last replica joins during the run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    shards: u32,
    /// The leader lease's TTL with --replicas 2.
    #[arg(long, value_name = "MS", default_value_t = quorum_core::lease::DEFAULT_LEASE_TTL_MS, value_parser = parse_ttl_ms)]
    lease_ttl_ms: u64,
    /// Inject the repair faults in any state, also where the core's rules leave the
    /// repair waiting for ever (NOSPACE without a quorum margin to defragment into, or
    /// with member faults during it; a member's data lost for good while another machine
    /// is leaving). Off by default; these runs show the gaps.
    #[arg(long)]
    faults_anywhere: bool,
    /// Where the members run: local or hosts (placed by the core's placement on seven
    /// hosts, one of them possibly lost for a while). Default: chosen by the seed
    /// (never hosts with quorum-loss: a rebuild on hosts is refused for now).
    #[arg(long, value_parser = ["local", "hosts"])]
    provider: Option<String>,
    /// Worker threads for --seeds.
    #[arg(long, default_value_t = 2)]
    threads: u64,
    /// Instead: drive this many control planes through a rollout at once (one thread) and
    /// print decisions per second, simulated and real time, and memory per control plane.
    #[arg(long, value_name = "N")]
    scale: Option<usize>,
    /// Instead: exhaustively model-check a 3-member rollout (maxSurge 1 and 0, and in
    /// place) with up to two controller crashes, a deposed controller's stale step, and
    /// one failure (a process dying, a member hanging, a disk lost) repaired by
    /// remediation; in place also a new binary that fails to start, and its rollback.
    #[arg(long)]
    model_check: bool,
}

/// A TTL in milliseconds, within the bounds the controller accepts.
fn parse_ttl_ms(s: &str) -> Result<u64, String> {
    let ttl_ms = s
        .parse::<u64>()
        .map_err(|e| format!("'{s}' is not a number of milliseconds: {e}"))?;
    quorum_core::lease::check_ttl_ms(ttl_ms)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let scenario = match args.scenario.as_deref().map(|s| (s, Scenario::parse(s))) {
        None => None,
        Some((_, Some(s))) => Some(s),
        Some((s, None)) => {
            eprintln!("error: unknown scenario '{s}': use rollout, rollout-surge0, scale-up, scale-down, orphans, in-place, in-place-5 or quorum-loss");
            return ExitCode::from(2);
        }
    };
    if args.shards > 1 && args.replicas < 2 {
        eprintln!(
            "error: --shards {} needs --replicas 2 or 3 (one replica holds every shard)",
            args.shards
        );
        return ExitCode::from(2);
    }
    let cfg = |seed| config(&args, scenario, seed);
    let ok = if args.model_check {
        model_check(args.faults_anywhere)
    } else if let Some(n) = args.scale {
        scale(n, args.from)
    } else if let Some(seed) = args.seed {
        replay(Config {
            trace: args.trace,
            ..cfg(seed)
        })
    } else {
        seeds(&args, &cfg)
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The run of `seed` as the flags ask.
fn config(args: &Args, scenario: Option<Scenario>, seed: u64) -> Config {
    let mut c = Config::new(seed);
    if let Some(s) = scenario {
        c.scenario = s;
    }
    c.replicas = args.replicas;
    c.lease_ttl_ms = args.lease_ttl_ms;
    c.shards = args.shards;
    c.faults_anywhere = args.faults_anywhere;
    if let Some(p) = &args.provider {
        c.hosts = p == "hosts";
    }
    if c.scenario == Scenario::QuorumLoss {
        c.hosts = false;
    }
    c
}

/// `--model-check`: every variant, one line each; true if every property holds.
fn model_check(faults_anywhere: bool) -> bool {
    let mut ok = true;
    let total = Instant::now();
    for mut v in quorum_sim::model::Variant::ALL {
        v.faults_anywhere = faults_anywhere;
        let t = Instant::now();
        let r = quorum_sim::model::check(v);
        println!(
            "model check, 3-member rollout, {}: {} states, {} transitions, depth {}, {} goal states, {:.2}s: {}",
            variant_words(&v),
            r.states,
            r.transitions,
            r.max_depth,
            r.goal_states,
            t.elapsed().as_secs_f64(),
            if r.violations.is_empty() { "every property holds".to_string() } else { r.violations.join("; ") }
        );
        ok &= r.violations.is_empty();
    }
    println!("model check: {:.2}s in all", total.elapsed().as_secs_f64());
    ok
}

/// A model-check variant in words.
fn variant_words(v: &quorum_sim::model::Variant) -> String {
    let extras = [
        (v.sharded, ", sharded (the shard moves between replicas)"),
        (v.hosts, ", members on hosts (a host lost for a while)"),
        (
            v.recreate,
            ", deleted and brought back from a snapshot (a learner's publish lost)",
        ),
        (
            v.requests,
            ", a member replaced and one restarted on request",
        ),
        (v.chain, ", a chained upgrade (OLD -> 3.5.0 -> NEW)"),
        (v.faults_anywhere, ", faults anywhere"),
    ];
    format!(
        "{}, etcd strict check {}, deposed controller {}{}",
        if v.in_place {
            "in place".to_string()
        } else {
            format!("maxSurge {}", v.max_surge)
        },
        if v.etcd_strict { "on" } else { "off" },
        if v.deposed { "yes" } else { "no" },
        extras
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, w)| *w)
            .collect::<String>()
    )
}

/// `--scale N`: many control planes at once; true without a violation.
fn scale(n: usize, from: u64) -> bool {
    let r = quorum_sim::run_many(n, from);
    println!(
        "{} control planes rolled 3.4.23 -> 3.5.1 at once: {} decisions in {:.1}s real ({:.0} decisions/s), {:.1}s simulated, {} violations, ~{} KiB resident per control plane",
        r.control_planes,
        r.decisions,
        r.real_secs,
        r.decisions as f64 / r.real_secs,
        r.sim_secs,
        r.violations,
        r.bytes_per_control_plane / 1024
    );
    r.violations == 0
}

/// `--seed S`: one run, its trace if asked, and its figures; true without a violation.
fn replay(c: Config) -> bool {
    let o = run(c);
    print!("{}", o.trace);
    println!(
        "seed {} ({}): {} steps, {} decisions, {} faults, {:.1}s simulated, trace hash {:016x}: {}",
        o.seed,
        o.scenario.name(),
        o.steps,
        o.decisions,
        o.faults,
        o.sim_ms as f64 / 1000.0,
        o.trace_hash,
        o.violation.as_deref().unwrap_or("ok")
    );
    println!("pacing: {}", o.pacing);
    println!("repair: {}", o.repair);
    println!("publish: {}", o.publish);
    println!("in place: {}", o.in_place);
    println!("CA rotations: {}", o.ca);
    if o.hosts {
        println!(
            "hosts: {} lost, {} removed, {} stuck rollouts taken back",
            o.hosts_lost, o.hosts_removed, o.rollouts_taken_back
        );
    }
    if o.replicas > 1 {
        println!("{} replicas: {}", o.replicas, o.lease);
    }
    o.violation.is_none()
}

/// What runs of many seeds add up to.
#[derive(Default)]
struct Totals {
    seeds: u64,
    decisions: u64,
    faults: u64,
    failed: Vec<Outcome>,
    lease: LeaseCounts,
    pacing: PacingCounts,
    repair: RepairCounts,
    in_place: InPlaceCounts,
    backups: BackupCounts,
    rebuilds: RebuildCounts,
    ca: CaCounts,
    publish: PublishCounts,
    /// Runs with members on hosts, and hosts lost in them.
    host_runs: u64,
    hosts_lost: u64,
}

impl Totals {
    fn add(&mut self, o: Outcome) {
        self.seeds += 1;
        self.decisions += o.decisions;
        self.faults += o.faults;
        self.lease.add(&o.lease);
        self.pacing.add(&o.pacing);
        self.repair.add(&o.repair);
        self.in_place.add(&o.in_place);
        self.backups.add(&o.backups);
        self.rebuilds.add(&o.rebuilds);
        self.ca.add(&o.ca);
        self.publish.add(&o.publish);
        self.host_runs += u64::from(o.hosts);
        self.hosts_lost += o.hosts_lost;
        if o.violation.is_some() {
            self.failed.push(o);
        }
    }

    fn merge(&mut self, t: Totals) {
        self.seeds += t.seeds;
        self.decisions += t.decisions;
        self.faults += t.faults;
        self.lease.add(&t.lease);
        self.pacing.add(&t.pacing);
        self.repair.add(&t.repair);
        self.in_place.add(&t.in_place);
        self.backups.add(&t.backups);
        self.rebuilds.add(&t.rebuilds);
        self.ca.add(&t.ca);
        self.publish.add(&t.publish);
        self.host_runs += t.host_runs;
        self.hosts_lost += t.hosts_lost;
        self.failed.extend(t.failed);
    }
}

/// `--seeds N`: seeds `from..from+N` on `--threads` workers; true without a violation.
fn seeds(args: &Args, cfg: &(dyn Fn(u64) -> Config + Sync)) -> bool {
    let t = Instant::now();
    let (from, n, threads) = (args.from, args.seeds, args.threads.max(1));
    let mut all = Totals::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                s.spawn(move || {
                    let mut out = Totals::default();
                    let mut seed = from + k;
                    while seed < from + n {
                        out.add(run(cfg(seed)));
                        seed += threads;
                    }
                    out
                })
            })
            .collect();
        for h in handles {
            all.merge(h.join().expect("worker"));
        }
    });
    let secs = t.elapsed().as_secs_f64();
    print_totals(&all, from, n, secs, args.replicas);
    all.failed.is_empty()
}

fn print_totals(all: &Totals, from: u64, n: u64, secs: f64, replicas: u8) {
    for o in &all.failed {
        println!(
            "seed {} ({}) violated: {}\n  replay: {}",
            o.seed,
            o.scenario.name(),
            o.violation.as_deref().unwrap_or(""),
            replay_command(o)
        );
    }
    let (seeds, faults, decisions) = (all.seeds, all.faults, all.decisions);
    println!(
        "{seeds} seeds ({from}..{}), {} violations, {faults} faults injected, {decisions} decisions in {secs:.1}s: {:.0} seeds/s, {:.0} decisions/s",
        from + n,
        all.failed.len(),
        seeds as f64 / secs,
        decisions as f64 / secs
    );
    println!("pacing: {}", all.pacing);
    println!("repair: {}", all.repair);
    println!("publish: {}", all.publish);
    println!("in place: {}", all.in_place);
    println!("backups: {}", all.backups);
    println!("rebuilds: {}", all.rebuilds);
    println!("CA rotations: {}", all.ca);
    println!(
        "hosts: {} runs with members on hosts, {} hosts lost",
        all.host_runs, all.hosts_lost
    );
    if replicas > 1 {
        println!("{replicas} replicas: {}", all.lease);
    }
}
