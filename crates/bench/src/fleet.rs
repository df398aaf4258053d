//! `quorum bench fleet`: many control planes upgraded at once by one controller group.
//!
//! In a throwaway directory: `--replicas` controller processes (this binary; one on the
//! embedded store, or several sharing a 3-member management etcd on loopback), then
//! `--control-planes` control planes of `--members` members each are created and, once
//! all have converged, every one is upgraded `--from` → `--to` at once. Reports the wall
//! time, each control plane's rollout time (from its upgrade's record to its first
//! published converged status at the new version: p50, p99, max), each controller's
//! CPU time and peak resident memory, and the most file descriptors it held (sampled
//! from /proc every 200 ms). Everything started is stopped by PID at the end, whatever
//! ends the run; the control planes are deleted through the controllers first.

use anyhow::{anyhow, bail, Context, Result};
use quorum_clock::now_ms;
use quorum_core::{ControlPlaneSpec, Version};
use quorum_ops::{ChangeOptions, Ctx, Place};
use quorum_provider::management::ManagementEtcd;
use quorum_provider::{default_etcd_dir, installed_versions, LocalProvider};
use quorum_store::{Store, StoreLocation};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most control planes one run may ask for (each is at least one etcd process).
const MAX_CONTROL_PLANES: u32 = 500;
/// How often the controllers' /proc figures and the control planes' progress are read.
const SAMPLE_EVERY_MS: u64 = 200;
/// Deleting the fleet at the end gives up after this long (then stops what is left by
/// PID, as always).
const TEARDOWN_LIMIT: Duration = Duration::from_secs(300);

#[derive(clap::Args)]
pub struct FleetArgs {
    /// Control planes to create, then upgrade all at once.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=MAX_CONTROL_PLANES as i64))]
    control_planes: u32,
    /// Members of each control plane.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=7))]
    members: u32,
    /// The version they are created at (installed; see `quorum versions`).
    #[arg(long, default_value = "3.4.23")]
    from: String,
    /// The version they are all upgraded to.
    #[arg(long, default_value = "3.5.30")]
    to: String,
    /// Controller processes: 1 on the embedded store; 2 or more share a 3-member
    /// management etcd (`--store etcd://`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=5))]
    replicas: u32,
    /// With 2 or more replicas: the controllers' `--shards` (the fleet spread over the
    /// replicas). Default: 3 per replica; 1 makes one replica lead and the others stand
    /// by.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=quorum_core::shards::MAX_SHARDS as i64))]
    shards: Option<u32>,
    /// Each controller's `--concurrency`.
    #[arg(long, default_value_t = quorum_controller::fleet::DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// Give up on the creation, or on the rollout, after this long.
    #[arg(long, default_value = "20m", value_parser = quorum_ops::wait::parse_duration)]
    timeout: Duration,
    /// Output: table or json.
    #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
    output: String,
    /// Keep the throwaway directory (each controller's log).
    #[arg(long)]
    keep: bool,
}

/// One controller process and what was read of it.
struct Replica {
    id: String,
    child: Child,
    peak_rss_kib: u64,
    peak_fds: u64,
    cpu_ticks_at_upgrade: Option<u64>,
}

/// Everything the run started; stopped by PID when dropped.
struct Started {
    dir: PathBuf,
    replicas: Vec<Replica>,
    mgmt: Option<ManagementEtcd>,
    stop: Arc<AtomicBool>,
}

impl Drop for Started {
    fn drop(&mut self) {
        for r in &mut self.replicas {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
        // Whatever the deletion left (an interrupted run): every machine of the home,
        // stopped by the PID its provider recorded, its directory removed.
        let provider = LocalProvider::new(&self.dir.join("home"), default_etcd_dir());
        for name in provider.list() {
            if let Err(e) = provider.delete(&name) {
                eprintln!("stopping {name}: {e}");
            }
        }
        if let Some(m) = self.mgmt.take() {
            m.destroy();
        }
    }
}

/// The report.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub control_planes: u32,
    pub members: u32,
    pub replicas: u32,
    pub shards: u32,
    pub concurrency: usize,
    pub from: String,
    pub to: String,
    pub create_wall_ms: u64,
    pub rollout_wall_ms: u64,
    pub rollout_p50_ms: u64,
    pub rollout_p99_ms: u64,
    pub rollout_max_ms: u64,
    pub controllers: Vec<ControllerFigures>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerFigures {
    pub identity: String,
    /// CPU time (user + system) during the rollout.
    pub cpu_ms: u64,
    pub peak_rss_mib: f64,
    pub peak_fds: u64,
    /// Control planes whose rollout steps this replica recorded.
    pub control_planes: usize,
}

pub async fn run(args: FleetArgs) -> Result<()> {
    let plan = Plan::of(&args)?;
    let dir = std::env::temp_dir().join(format!(
        "quorum-bench-fleet-{}-{}",
        std::process::id(),
        now_ms()
    ));
    quorum_pki::create_private_dir(&dir)?;
    let outcome = measure_on_own_thread(plan, &dir).await;
    if args.keep {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = outcome?;
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// Measures `plan` in `dir` until it ends or a signal (Ctrl-C, SIGTERM) stops it.
async fn measure_on_own_thread(plan: Plan, dir: &std::path::Path) -> Result<Report> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stop = Arc::new(AtomicBool::new(false));
    // The measurement blocks (process waits, store calls): it runs on a thread of its
    // own that owns everything it starts, so a signal only has to ask it to stop.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (d2, s2) = (dir.to_path_buf(), stop.clone());
    let worker = std::thread::spawn(move || {
        let mut started = Started {
            dir: d2,
            replicas: vec![],
            mgmt: None,
            stop: s2,
        };
        let r = measure(&plan, &mut started);
        drop(started);
        let _ = tx.send(r);
    });
    let outcome = tokio::select! {
        r = rx => r.unwrap_or_else(|_| Err(anyhow!("the measurement thread panicked"))),
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow!("terminated")),
    };
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || worker.join()).await;
    outcome
}

struct Plan {
    n: u32,
    members: u32,
    from: Version,
    to: Version,
    replicas: u32,
    shards: u32,
    concurrency: usize,
    timeout: Duration,
    quiet: bool,
}

impl Plan {
    /// The run `args` ask for, refused before anything starts: both versions installed,
    /// a version change the rules allow, an odd member count, shards only with several
    /// replicas (default: 3 per replica).
    fn of(args: &FleetArgs) -> Result<Plan> {
        let etcd_dir = default_etcd_dir();
        let installed = installed_versions(&etcd_dir);
        let from: Version = args.from.parse()?;
        let to: Version = args.to.parse()?;
        for v in [from, to] {
            if !installed.contains(&v) {
                bail!(
                    "etcd {v} is not installed in {} (see `quorum versions`; scripts/install.sh installs 3.4.23, 3.5.0, 3.5.1, 3.5.16 and 3.5.30; `quorum versions add` adds others)",
                    etcd_dir.display()
                );
            }
        }
        quorum_core::check_version_change(from, None, to, false)
            .map_err(|e| anyhow!("--from {from} --to {to}: {e}"))?;
        if args.members.is_multiple_of(2) {
            bail!(
                "--members {}: an even member count tolerates no more failures than one fewer; use an odd count",
                args.members
            );
        }
        let shards = match (args.shards, args.replicas) {
            (Some(n), 1) if n > 1 => bail!(
                "--shards {n} needs --replicas 2 or more (sharding needs a management etcd, which \
                 this bench starts only for several replicas)"
            ),
            (Some(n), _) => n,
            (None, 1) => 1,
            (None, r) => 3 * r,
        };
        Ok(Plan {
            n: args.control_planes,
            members: args.members,
            from,
            to,
            replicas: args.replicas,
            shards,
            concurrency: args.concurrency,
            timeout: args.timeout,
            quiet: args.output == "json",
        })
    }
}

fn say(plan: &Plan, line: &str) {
    if !plan.quiet {
        eprintln!("{line}");
    }
}

fn measure(plan: &Plan, started: &mut Started) -> Result<Report> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let home = started.dir.join("home");
    let location = store_location(plan, started)?;
    let at = Place {
        home: home.clone(),
        store: location.clone(),
        secrets_key_file: None,
        origins: Default::default(),
    };
    let mut ctx = connect(&at, &started.stop)?;
    ctx.quiet = true;
    for i in 1..=plan.replicas {
        let r = spawn(started, &location, &format!("r{i}"), plan)?;
        started.replicas.push(r);
    }
    let names: Vec<String> = (1..=plan.n).map(|i| format!("fleet-{i:03}")).collect();
    let create_wall_ms = create_fleet(plan, started, &mut ctx, &names)?;

    for r in &mut started.replicas {
        r.cpu_ticks_at_upgrade = cpu_ticks(r.child.id());
    }
    let before_event: HashMap<String, i64> = names
        .iter()
        .map(|n| Ok((n.clone(), ctx.store.last_event_id(n)?)))
        .collect::<Result<_>>()?;
    let t_rollout = Instant::now();
    let took = upgrade_fleet(plan, started, &rt, &mut ctx, &names)?;
    let rollout_wall_ms = t_rollout.elapsed().as_millis() as u64;
    let share = shares(&ctx.store, &names, &before_event)?;
    let report = Report {
        control_planes: plan.n,
        members: plan.members,
        replicas: plan.replicas,
        shards: plan.shards,
        concurrency: plan.concurrency,
        from: plan.from.to_string(),
        to: plan.to.to_string(),
        create_wall_ms,
        rollout_wall_ms,
        rollout_p50_ms: percentile(&took, 50),
        rollout_p99_ms: percentile(&took, 99),
        rollout_max_ms: took.last().copied().unwrap_or(0),
        controllers: controller_figures(started, &share),
    };
    say(plan, "deleting the fleet");
    teardown(&mut ctx, &names, &started.stop)?;
    Ok(report)
}

/// Where the controllers keep their state: the embedded store for one replica; for
/// several, a management etcd started on a loopback /24 of the run's own.
fn store_location(plan: &Plan, started: &mut Started) -> Result<StoreLocation> {
    if plan.replicas <= 1 {
        return Ok(StoreLocation::Embedded);
    }
    let version = *installed_versions(&default_etcd_dir())
        .iter()
        .max()
        .ok_or_else(|| anyhow!("no etcd installed; run scripts/install.sh"))?;
    // A loopback /24 of our own, away from 127.0.x.x and from the machines' subnets.
    let x = (std::process::id() as u64 ^ now_ms() as u64).wrapping_mul(2_654_435_761);
    let (a, b) = (16 + (x >> 24) % 200, (x >> 8) % 250);
    let addrs: Vec<Ipv4Addr> = (252..=254)
        .map(|d| Ipv4Addr::new(127, a as u8, b as u8, d))
        .collect();
    let mgmt = ManagementEtcd::start(
        &started.dir.join("mgmt"),
        &default_etcd_dir(),
        version,
        &addrs,
    )?;
    let url = mgmt.store_url("quorum");
    started.mgmt = Some(mgmt);
    say(plan, &format!("management etcd {version}: {url}"));
    StoreLocation::parse(&url, None).map_err(|e| anyhow!(e))
}

/// Creates the control planes `names` and waits until every one converged; the wall
/// time it took.
fn create_fleet(
    plan: &Plan,
    started: &mut Started,
    ctx: &mut Ctx,
    names: &[String],
) -> Result<u64> {
    say(
        plan,
        &format!(
            "creating {} control planes of {} member{} at etcd {} ({} controller{}{}, --concurrency {})",
            plan.n,
            plan.members,
            if plan.members == 1 { "" } else { "s" },
            plan.from,
            plan.replicas,
            if plan.replicas == 1 { "" } else { "s" },
            if plan.shards > 1 { format!(", --shards {}", plan.shards) } else { String::new() },
            plan.concurrency
        ),
    );
    let t_create = Instant::now();
    for name in names {
        quorum_ops::create(ctx, name, spec(plan), false)?;
    }
    let requested: HashMap<String, i64> = names.iter().map(|n| (n.clone(), 0)).collect();
    wait_all(plan, started, &ctx.store, &requested, plan.from)?;
    let create_wall_ms = t_create.elapsed().as_millis() as u64;
    say(
        plan,
        &format!(
            "created in {:.1} s; upgrading every one to {}",
            create_wall_ms as f64 / 1000.0,
            plan.to
        ),
    );
    Ok(create_wall_ms)
}

/// Upgrades every control plane of `names` at once and waits until every one is at
/// the new version; how long each took from its upgrade's record, shortest first.
fn upgrade_fleet(
    plan: &Plan,
    started: &mut Started,
    rt: &tokio::runtime::Runtime,
    ctx: &mut Ctx,
    names: &[String],
) -> Result<Vec<u64>> {
    let mut requested = HashMap::new();
    for name in names {
        let opts = ChangeOptions {
            no_snapshot: true,
            ..ChangeOptions::default()
        };
        let to = plan.to;
        requested.insert(name.clone(), now_ms());
        rt.block_on(quorum_ops::change_with(ctx, name, opts, |s| {
            ControlPlaneSpec {
                version: to,
                ..s.clone()
            }
        }))
        .with_context(|| format!("upgrading {name}"))?;
    }
    let done_ms = wait_all(plan, started, &ctx.store, &requested, plan.to)?;
    let mut took: Vec<u64> = names
        .iter()
        .map(|n| (done_ms[n] - requested[n]).max(0) as u64)
        .collect();
    took.sort_unstable();
    Ok(took)
}

/// Each controller's figures since the upgrade began, with the control planes whose
/// steps it recorded (`share`).
fn controller_figures(
    started: &Started,
    share: &BTreeMap<String, usize>,
) -> Vec<ControllerFigures> {
    started
        .replicas
        .iter()
        .map(|r| ControllerFigures {
            identity: r.id.clone(),
            cpu_ms: cpu_ticks(r.child.id())
                .zip(r.cpu_ticks_at_upgrade)
                .map_or(0, |(now, then)| ticks_to_ms(now.saturating_sub(then))),
            peak_rss_mib: r.peak_rss_kib as f64 / 1024.0,
            peak_fds: r.peak_fds,
            control_planes: share.get(&r.id).copied().unwrap_or(0),
        })
        .collect()
}

fn spec(plan: &Plan) -> ControlPlaneSpec {
    ControlPlaneSpec {
        // A scheduled snapshot would land in the measurement.
        backup: quorum_core::BackupSpec {
            schedule: quorum_core::backup::SCHEDULE_OFF.into(),
            ..Default::default()
        },
        ..ControlPlaneSpec::new(plan.members, plan.from)
    }
}

/// The store (a management etcd takes a moment to elect its leader).
fn connect(at: &Place, stop: &AtomicBool) -> Result<Ctx> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Ctx::open(at) {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline || stop.load(Ordering::Relaxed) => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn spawn(started: &Started, location: &StoreLocation, id: &str, plan: &Plan) -> Result<Replica> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(started.dir.join(format!("{id}.log")))?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args([
        "controller",
        "--home",
        &started.dir.join("home").display().to_string(),
        "--identity",
        id,
        "--metrics-addr",
        "off",
        "--concurrency",
        &plan.concurrency.to_string(),
        "--shards",
        &plan.shards.to_string(),
    ]);
    if let StoreLocation::Etcd(l) = location {
        cmd.args(["--store", &l.url()]);
    }
    let child = cmd
        .env("QUORUM_LOG", "info")
        .env_remove("FAILPOINTS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting a controller")?;
    Ok(Replica {
        id: id.to_string(),
        child,
        peak_rss_kib: 0,
        peak_fds: 0,
        cpu_ticks_at_upgrade: None,
    })
}

/// Waits until every control plane runs `version` on all its members and has published
/// a converged status after its request (`requested`, ms since the epoch); returns when
/// each was first seen so. Samples the controllers meanwhile.
fn wait_all(
    plan: &Plan,
    started: &mut Started,
    store: &Store,
    requested: &HashMap<String, i64>,
    version: Version,
) -> Result<HashMap<String, i64>> {
    let deadline = Instant::now() + plan.timeout;
    let mut done: HashMap<String, i64> = HashMap::new();
    let mut last_said = Instant::now();
    while done.len() < requested.len() {
        if started.stop.load(Ordering::Relaxed) {
            bail!("stopped");
        }
        for r in &mut started.replicas {
            if let Ok(Some(status)) = r.child.try_wait() {
                bail!(
                    "controller {} exited ({status}); its log is in {}",
                    r.id,
                    started.dir.display()
                );
            }
            sample(r);
        }
        for (name, since_ms) in requested {
            if done.contains_key(name) {
                continue;
            }
            if converged_at(store, name, version, *since_ms, plan.members)? {
                done.insert(name.clone(), now_ms());
            }
        }
        if Instant::now() > deadline {
            let left: Vec<&String> = requested
                .keys()
                .filter(|n| !done.contains_key(*n))
                .collect();
            bail!(
                "{} of {} control planes did not reach etcd {version} within {:?} (first: {:?}); logs in {}",
                left.len(),
                requested.len(),
                plan.timeout,
                left.first(),
                started.dir.display()
            );
        }
        if last_said.elapsed() > Duration::from_secs(10) {
            say(
                plan,
                &format!("  {} of {} at etcd {version}", done.len(), requested.len()),
            );
            last_said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(SAMPLE_EVERY_MS));
    }
    Ok(done)
}

/// `name` runs `version` on exactly `members` machines and its controller published a
/// converged status at or after `since_ms`.
fn converged_at(
    store: &Store,
    name: &str,
    version: Version,
    since_ms: i64,
    members: u32,
) -> Result<bool> {
    let machines = store.machines(name)?;
    let all_at = machines.len() == members as usize
        && machines.iter().all(|m| m.version == version && !m.deleting);
    if !all_at {
        return Ok(false);
    }
    Ok(store.published_status(name)?.is_some_and(|p| {
        p.updated_at_ms >= since_ms
            && p.status["decision"]["converged"] == serde_json::Value::Bool(true)
    }))
}

/// Which replica recorded each control plane's steps since `after` (the one with most).
fn shares(
    store: &Store,
    names: &[String],
    after: &HashMap<String, i64>,
) -> Result<BTreeMap<String, usize>> {
    let mut share = BTreeMap::new();
    for name in names {
        let mut by: HashMap<String, usize> = HashMap::new();
        for e in store.events_after(name, after[name], 100_000)? {
            if let Some(b) = e.by {
                *by.entry(b).or_default() += 1;
            }
        }
        if let Some((who, _)) = by.into_iter().max_by_key(|(_, n)| *n) {
            *share.entry(who).or_default() += 1;
        }
    }
    Ok(share)
}

/// Deletes every control plane through the controllers (marked deleting; they stop and
/// remove the machines), and waits until the store has none.
fn teardown(ctx: &mut Ctx, names: &[String], stop: &AtomicBool) -> Result<()> {
    for name in names {
        match ctx.store.mark_control_plane_deleting(name) {
            Ok(()) | Err(quorum_store::StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let deadline = Instant::now() + TEARDOWN_LIMIT;
    while !ctx.store.control_planes()?.is_empty() {
        if Instant::now() > deadline || stop.load(Ordering::Relaxed) {
            bail!("the fleet was not deleted within {TEARDOWN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(SAMPLE_EVERY_MS));
    }
    Ok(())
}

/// Reads a controller's resident memory and open descriptors, keeping the peaks.
fn sample(r: &mut Replica) {
    let pid = r.child.id();
    if let Some(kib) = rss_kib(pid) {
        r.peak_rss_kib = r.peak_rss_kib.max(kib);
    }
    if let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        r.peak_fds = r.peak_fds.max(d.count() as u64);
    }
}

fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    // VmHWM: the peak resident set, as the kernel counts it (a sample can miss a peak).
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// User plus system time of `pid`, in clock ticks (/proc/PID/stat fields 14 and 15).
fn cpu_ticks(pid: u32) -> Option<u64> {
    parse_cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces: count from the
    // last ')'. Fields after it start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_to_ms(ticks: u64) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    ticks * 1000 / hz
}

/// The `p`th percentile of sorted figures (nearest rank).
fn percentile(sorted: &[u64], p: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as u64).div_ceil(100).max(1) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn print_table(r: &Report) {
    let s = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    println!(
        "fleet: {} control planes of {} member{}, etcd {} -> {}, all at once",
        r.control_planes,
        r.members,
        if r.members == 1 { "" } else { "s" },
        r.from,
        r.to
    );
    let sharded = if r.shards > 1 {
        format!(", --shards {}", r.shards)
    } else {
        String::new()
    };
    println!(
        "  controllers     {}{sharded} (--concurrency {})",
        r.replicas, r.concurrency
    );
    println!("  created in      {}", s(r.create_wall_ms));
    println!("  rollout wall    {}", s(r.rollout_wall_ms));
    println!(
        "  each rollout    p50 {}   p99 {}   max {}",
        s(r.rollout_p50_ms),
        s(r.rollout_p99_ms),
        s(r.rollout_max_ms)
    );
    for c in &r.controllers {
        println!(
            "  controller {:<4} CPU {} during the rollout, peak RSS {:.1} MiB, peak fds {}, rolled {} control plane{}",
            c.identity,
            s(c.cpu_ms),
            c.peak_rss_mib,
            c.peak_fds,
            c.control_planes,
            if c.control_planes == 1 { "" } else { "s" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (quorum (a b)) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 3 0";
        assert_eq!(parse_cpu_ticks(stat), Some(42));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), 50);
        assert_eq!(percentile(&v, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }

    #[test]
    fn the_spec_never_schedules_a_snapshot() {
        let plan = Plan {
            n: 1,
            members: 3,
            from: "3.4.23".parse().unwrap(),
            to: "3.5.1".parse().unwrap(),
            replicas: 1,
            shards: 1,
            concurrency: 4,
            timeout: Duration::from_secs(1),
            quiet: true,
        };
        let s = spec(&plan);
        assert_eq!(s.replicas, 3);
        assert_eq!(s.backup.schedule, quorum_core::backup::SCHEDULE_OFF);
        quorum_core::validate_spec(&s, false).unwrap();
    }
}
