//! `quorum demo`: the whole product in two minutes, in a throwaway home.

use crate::hosts::Hosts;
use anyhow::{bail, Context, Result};
use etcd_client::{Client, ConnectOptions, GetOptions};
use futures::FutureExt;
use quorum_clock::now_ms;
use quorum_controller::{Config, Controller};
use quorum_core::{ActionKind, ControlPlaneSpec, RolloutStrategy, Version};
use quorum_etcd::ClientTls;
use quorum_ops::{change, create, status, teardown, wait, Ctx, Place};
use quorum_provider::default_etcd_dir;
use quorum_store::Event;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAME: &str = "demo";
const KEY_PREFIX: &str = "demo/key-";
/// Writes in flight at once while loading keys.
const WRITE_CONCURRENCY: usize = 32;

/// The control plane a throwaway run creates and the rollout it performs.
#[derive(clap::Args)]
pub struct RolloutArgs {
    /// etcd version the control plane starts at.
    #[arg(long, default_value = "3.4.23")]
    pub from: Version,
    /// etcd version it is rolled to.
    #[arg(long, default_value = "3.5.30")]
    pub to: Version,
    /// Number of members.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// 1: add each new member before removing an old one; 0: remove first.
    #[arg(long, default_value_t = 1)]
    pub max_surge: u32,
    /// Give up after this long: 90s, 10m.
    #[arg(long, default_value = "10m", value_parser = wait::parse_duration)]
    pub timeout: Duration,
    /// Run the control plane in plain HTTP instead of mutual TLS (the default): for
    /// comparing what TLS costs, never for data that matters.
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// Run the members on this many hosts instead of as local processes: each host a
    /// network namespace on this machine with its own address (198.18.X.0/24) and its
    /// own `quorum agent`, one member per host (needs root and iproute2). 0: local
    /// processes.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub hosts: usize,
}

impl RolloutArgs {
    /// Refuses a number of hosts that cannot hold the control plane.
    pub fn check_hosts(&self) -> Result<()> {
        if self.hosts > 0 && (self.hosts as u64) < u64::from(self.replicas) {
            bail!(
                "--hosts {} cannot hold {} members: a host runs one member of a control plane",
                self.hosts,
                self.replicas
            );
        }
        Ok(())
    }

    /// Whether there is a host for a replacement's new member beside the old ones.
    pub fn hosts_allow_replacement(&self) -> bool {
        self.hosts == 0 || self.hosts as u64 >= u64::from(self.replicas + self.max_surge)
    }

    /// The spec the control plane is created with.
    pub fn initial_spec(&self) -> ControlPlaneSpec {
        ControlPlaneSpec {
            recovery: Default::default(),
            deletion_protection: false,
            replicas: self.replicas,
            version: self.from,
            rollout: RolloutStrategy {
                max_surge: self.max_surge,
                ..RolloutStrategy::default()
            },
            paused: false,
            haproxy: None,
            certificates: Default::default(),
            insecure_plaintext: self.insecure_plaintext,
            remediation: Default::default(),
            maintenance: Default::default(),
            // A scheduled snapshot would land in the measurement (quorum still takes
            // one before the upgrade, as always).
            backup: quorum_core::BackupSpec {
                schedule: quorum_core::backup::SCHEDULE_OFF.into(),
                ..Default::default()
            },
            provider: if self.hosts > 0 {
                quorum_core::ProviderKind::Hosts
            } else {
                quorum_core::ProviderKind::Local
            },
        }
    }
}

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Keys to write before the upgrade (each verified after it).
    #[arg(long, default_value_t = 5000)]
    keys: u32,
    #[command(flatten)]
    rollout: RolloutArgs,
    /// Keep the temporary home (logs, data) for inspection; processes are stopped anyway.
    #[arg(long)]
    keep: bool,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    args.rollout.check_hosts()?;
    let home =
        std::env::temp_dir().join(format!("quorum-demo-{}-{}", std::process::id(), now_ms()));
    println!("quorum demo: home {}", home.display());
    let stop = Arc::new(AtomicBool::new(false));
    let controller = start_controller(&home, stop.clone())?;
    let hosts = match args.rollout.hosts {
        0 => Ok(None),
        n => {
            println!("\n== 0. {n} hosts: network namespaces on a bridge, a quorum agent in each");
            let t = Instant::now();
            let h = Hosts::start(&home, n, &stop).await;
            if let Ok(h) = &h {
                for (i, host) in h.net.hosts.iter().enumerate() {
                    println!(
                        "h{} at {} (namespace {}): agent joined",
                        i + 1,
                        host.ip,
                        host.ns
                    );
                }
                println!("hosts ready in {:.1}s", t.elapsed().as_secs_f64());
            }
            h.map(Some)
        }
    };
    // Whatever ends the demo (success, error, a panic such as a closed stdout, Ctrl-C,
    // SIGTERM, SIGHUP), the cleanup below runs.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let result = if let Err(e) = &hosts {
        Err(anyhow::anyhow!("{e:#}"))
    } else {
        tokio::select! {
        r = std::panic::AssertUnwindSafe(body(&home, &args)).catch_unwind() => {
            r.unwrap_or_else(|_| Err(anyhow::anyhow!("the demo panicked (see above)")))
        }
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow::anyhow!("terminated")),
        _ = hup.recv() => Err(anyhow::anyhow!("hung up")),
        }
    };
    say("\ncleaning up: stopping every machine the demo started");
    // The controller stops first: the teardown acts as the home's one controller.
    stop.store(true, Ordering::Relaxed);
    let _ = controller.join();
    let cleanup = teardown(&Place::embedded(&home), NAME, None).await;
    // The agents, then every process left in a host, then the hosts themselves.
    drop(hosts);
    kill_leftovers(&home);
    if args.keep {
        say(&format!(
            "kept {} (logs and data of every machine)",
            home.display()
        ));
    } else {
        let _ = std::fs::remove_dir_all(&home);
    }
    cleanup?;
    say("done: every process the demo started has stopped");
    result
}

/// Belt and braces: no machine of a throwaway home outlives the command, whatever
/// happened before (each is killed by the pid its pid file names).
pub fn kill_leftovers(home: &Path) {
    let provider = quorum_provider::LocalProvider::new(home, default_etcd_dir());
    for m in provider.list() {
        if let Err(e) = provider.kill(&m) {
            eprintln!("warning: {e}");
        }
    }
}

/// Prints a line, ignoring a closed stdout (the cleanup must go on regardless).
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// The controller runs on its own thread and runtime, as it would in its own process.
pub fn start_controller(home: &Path, stop: Arc<AtomicBool>) -> Result<std::thread::JoinHandle<()>> {
    let mut c = Controller::new(Config {
        identity: "demo-controller".into(),
        ..Config::new(home, default_etcd_dir())
    })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(std::thread::Builder::new()
        .name("controller".into())
        .spawn(move || rt.block_on(c.run(stop)))?)
}

async fn body(home: &Path, args: &DemoArgs) -> Result<()> {
    let mut ctx = Ctx::open(&Place::embedded(home))?;
    let strategy = create_step(&mut ctx, args).await?;
    let (tls, values) = write_step(&ctx, args).await?;
    let (after, total) = upgrade_step(&mut ctx, args, strategy).await?;

    println!("\n== 4. verify");
    verify(&ctx, args, tls.as_ref(), &values).await?;

    let events = ctx.store.events_after(NAME, after, 10_000)?;
    print_report(&events, total);
    Ok(())
}

/// Step 1: creates the control plane (in place when no host is spare for a
/// replacement) and follows it until it converged; the rollout strategy it got.
async fn create_step(ctx: &mut Ctx, args: &DemoArgs) -> Result<quorum_core::Strategy> {
    let mut spec = args.rollout.initial_spec();
    if !args.rollout.hosts_allow_replacement() {
        // One member per host: with no spare host, each member is upgraded where it is.
        spec.rollout.strategy = quorum_core::Strategy::InPlace;
    }
    let on = match args.rollout.hosts {
        0 => "as local processes".to_string(),
        n => format!("on {n} hosts, at most one member on each"),
    };
    println!(
        "\n== 1. create {} members at etcd {} {on}",
        args.rollout.replicas, args.rollout.from
    );
    let t_create = Instant::now();
    let strategy = spec.rollout.strategy;
    create(ctx, NAME, spec, false)?;
    ctx.follow(
        NAME,
        wait::Goal::Converged,
        args.rollout.timeout,
        0,
        now_ms(),
    )
    .await?;
    println!("created in {:.1}s", t_create.elapsed().as_secs_f64());
    Ok(strategy)
}

/// Step 2: writes the keys through the published endpoints; the clients' credentials
/// and what was written.
async fn write_step(
    ctx: &Ctx,
    args: &DemoArgs,
) -> Result<(Option<ClientTls>, Vec<(String, String)>)> {
    let cp = ctx.store.get_control_plane(NAME)?;
    let s = ctx.live(&cp).await?;
    println!(
        "\n== 2. write {} keys through the published endpoints {}",
        args.keys,
        s.endpoints.join(",")
    );
    let t_write = Instant::now();
    let tls = ctx.client_tls(&cp)?;
    let values = write_keys(&s.endpoints, tls.as_ref(), args.keys).await?;
    println!(
        "wrote {} keys in {:.1}s",
        args.keys,
        t_write.elapsed().as_secs_f64()
    );
    Ok((tls, values))
}

/// Step 3: upgrades to the new version and follows the rollout until it converged; the
/// last event before it, and how long it took.
async fn upgrade_step(
    ctx: &mut Ctx,
    args: &DemoArgs,
    strategy: quorum_core::Strategy,
) -> Result<(i64, Duration)> {
    let how = match strategy {
        quorum_core::Strategy::InPlace => {
            "in place: each member restarted on the new binary with its data (no spare host for a replacement)"
        }
        _ => "by replacement: a new member added beside each old one, then the old one removed",
    };
    println!("\n== 3. upgrade to etcd {}, {how}", args.rollout.to);
    let after = ctx.store.last_event_id(NAME)?;
    let t_up = Instant::now();
    change(ctx, NAME, false, |s| ControlPlaneSpec {
        version: args.rollout.to,
        ..s.clone()
    })
    .await?;
    ctx.follow(
        NAME,
        wait::Goal::Converged,
        args.rollout.timeout,
        after,
        now_ms(),
    )
    .await?;
    Ok((after, t_up.elapsed()))
}

/// Every key reads back intact, every member runs the new version, and the cluster
/// version follows.
async fn verify(
    ctx: &Ctx,
    args: &DemoArgs,
    tls: Option<&ClientTls>,
    values: &[(String, String)],
) -> Result<()> {
    let cp = ctx.store.get_control_plane(NAME)?;
    let s = ctx.live(&cp).await?;
    verify_keys(&s.endpoints, tls, values).await?;
    println!("✓ all {} keys read back intact", values.len());
    for m in &s.machines {
        if m.running_version.as_deref() != Some(&args.rollout.to.to_string()) {
            bail!(
                "{} runs {:?}, expected {}",
                m.name,
                m.running_version,
                args.rollout.to
            );
        }
    }
    println!(
        "✓ every member runs etcd {} ({})",
        args.rollout.to,
        s.machines
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let want_cluster = format!("{}.{}", args.rollout.to.major, args.rollout.to.minor);
    // The cluster version follows a moment after the last member runs the new version.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut cluster = s.cluster_version.clone();
    while cluster.as_deref() != Some(&want_cluster) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cluster = ctx.live(&cp).await?.cluster_version;
    }
    if cluster.as_deref() != Some(&want_cluster) {
        bail!("cluster version is {cluster:?}, expected {want_cluster}");
    }
    println!("✓ cluster version {want_cluster}");
    Ok(())
}

/// Connection options for a client of a control plane: its credentials when it
/// speaks TLS.
pub fn client_options(tls: Option<&ClientTls>) -> ConnectOptions {
    let opts = ConnectOptions::new();
    match tls {
        Some(t) => opts.with_tls(t.grpc_options()),
        None => opts,
    }
}

async fn write_keys(
    endpoints: &[String],
    tls: Option<&ClientTls>,
    n: u32,
) -> Result<Vec<(String, String)>> {
    let client = Client::connect(endpoints, Some(client_options(tls)))
        .await
        .context("connecting to the control plane")?;
    let nonce = now_ms();
    let values: Vec<(String, String)> = (0..n)
        .map(|i| (format!("{KEY_PREFIX}{i:06}"), format!("value-{i}-{nonce}")))
        .collect();
    for chunk in values.chunks(WRITE_CONCURRENCY) {
        let puts = chunk.iter().map(|(k, v)| {
            let mut c = client.clone();
            let (k, v) = (k.clone(), v.clone());
            async move { tokio::time::timeout(Duration::from_secs(5), c.put(k, v, None)).await }
        });
        for r in futures::future::join_all(puts).await {
            r.context("a write timed out")?.context("a write failed")?;
        }
    }
    Ok(values)
}

async fn verify_keys(
    endpoints: &[String],
    tls: Option<&ClientTls>,
    values: &[(String, String)],
) -> Result<()> {
    let (missing, read) = missing_keys(endpoints, tls, KEY_PREFIX, values).await?;
    if missing > 0 || read != values.len() {
        bail!(
            "{missing} of {} keys missing or changed ({read} read)",
            values.len()
        );
    }
    Ok(())
}

/// Reads every key under `prefix` (linearizably) and counts the `expected` pairs that
/// are missing or hold another value; also returns how many keys were read.
pub async fn missing_keys(
    endpoints: &[String],
    tls: Option<&ClientTls>,
    prefix: &str,
    expected: &[(String, String)],
) -> Result<(usize, usize)> {
    let mut client = Client::connect(endpoints, Some(client_options(tls)))
        .await
        .context("connecting to the control plane")?;
    let resp = tokio::time::timeout(
        Duration::from_secs(30),
        client.get(prefix, Some(GetOptions::new().with_prefix())),
    )
    .await
    .context("reading the keys back timed out")??;
    let got: std::collections::HashMap<&[u8], &[u8]> =
        resp.kvs().iter().map(|kv| (kv.key(), kv.value())).collect();
    let missing = expected
        .iter()
        .filter(|(k, v)| got.get(k.as_bytes()) != Some(&v.as_bytes()))
        .count();
    Ok((missing, got.len()))
}

/// One member replacement, from allocating the new machine to deleting the old one.
#[derive(Default)]
struct Replacement {
    allocated_ms: i64,
    new_machine: Option<String>,
    learner_added_ms: Option<i64>,
    old_machine: Option<String>,
    marked_ms: Option<i64>,
    deleted_ms: Option<i64>,
}

fn replacements(events: &[Event]) -> Vec<Replacement> {
    let mut done = Vec::new();
    let mut open: Option<Replacement> = None;
    for e in events.iter().filter(|e| e.ok) {
        match (e.kind.action(), open.as_mut()) {
            (Some(ActionKind::AllocateMachine), _) => {
                open = Some(Replacement {
                    allocated_ms: e.at_ms,
                    ..Default::default()
                })
            }
            (Some(ActionKind::AddLearner), Some(r)) => {
                r.learner_added_ms = Some(e.at_ms);
                r.new_machine = e.machine.clone();
            }
            (Some(ActionKind::MarkDeleting), Some(r)) => {
                r.marked_ms = Some(e.at_ms);
                r.old_machine = e.machine.clone();
            }
            (Some(ActionKind::DeleteMachine), Some(r)) => {
                r.deleted_ms = Some(e.at_ms);
                done.extend(open.take());
            }
            _ => {}
        }
    }
    done
}

/// Each in-place step: the machine, and when it began and ended.
fn in_place_steps(events: &[Event]) -> Vec<(String, i64, Option<i64>)> {
    let mut steps: Vec<(String, i64, Option<i64>)> = Vec::new();
    for e in events.iter().filter(|e| e.ok) {
        let m = e.machine.clone().unwrap_or_default();
        match e.kind.action() {
            Some(ActionKind::BeginInPlace) => steps.push((m, e.at_ms, None)),
            Some(ActionKind::EndInPlace) => {
                if let Some(s) = steps.iter_mut().rev().find(|s| s.0 == m && s.2.is_none()) {
                    s.2 = Some(e.at_ms);
                }
            }
            _ => {}
        }
    }
    steps
}

fn print_report(events: &[Event], total: Duration) {
    println!("\n== report");
    let steps = in_place_steps(events);
    if !steps.is_empty() {
        let mut rows = vec![["IN PLACE", "MEMBER", "DRAIN+STOP+START+CATCH UP"]
            .map(String::from)
            .to_vec()];
        for (i, (m, begin, end)) in steps.iter().enumerate() {
            rows.push(vec![
                format!("#{}", i + 1),
                m.clone(),
                end.map_or("-".into(), |e| {
                    format!("{:.2}s", (e - begin) as f64 / 1000.0)
                }),
            ]);
        }
        print!("{}", status::columns(&rows));
        println!("total upgrade time: {:.1}s", total.as_secs_f64());
        return;
    }
    let secs = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}s", (b - a) as f64 / 1000.0),
        _ => "-".to_string(),
    };
    let mut rows = vec![[
        "REPLACEMENT",
        "NEW",
        "OLD",
        "ADD WAIT",
        "JOIN+PROMOTE",
        "REMOVAL",
        "TOTAL",
    ]
    .map(String::from)
    .to_vec()];
    for (i, r) in replacements(events).iter().enumerate() {
        rows.push(vec![
            format!("#{}", i + 1),
            r.new_machine.clone().unwrap_or_default(),
            r.old_machine.clone().unwrap_or_default(),
            secs(Some(r.allocated_ms), r.learner_added_ms),
            secs(r.learner_added_ms, r.marked_ms),
            secs(r.marked_ms, r.deleted_ms),
            secs(Some(r.allocated_ms), r.deleted_ms),
        ]);
    }
    print!("{}", status::columns(&rows));
    println!("(ADD WAIT is mostly etcd's strict reconfiguration check: a learner add is refused until the leader has been connected to every voter for 5 s)");
    let mut waits: Vec<i64> = events
        .iter()
        .filter(|e| e.ok)
        .filter_map(|e| e.waited_ms)
        .collect();
    waits.sort_unstable();
    if let (Some(median), Some(max)) = (waits.get(waits.len() / 2), waits.last()) {
        println!(
            "controller reaction (end of the previous reconcile -> next action) over {} actions: median {median} ms, max {max} ms",
            waits.len()
        );
    }
    println!("total upgrade time: {:.1}s", total.as_secs_f64());
}
