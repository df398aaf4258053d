//! `quorum bench rollout`: what clients see during a rollout.
//!
//! Several clients issue a paced mix of writes (each with a unique value) and
//! linearizable reads through etcd-client while a fresh control plane is rolled to
//! another version. Clients reach the members one of two ways (`--client-mode`):
//! following the endpoint set the controller publishes (`<home>/endpoints/<name>.json`),
//! or through an HAProxy whose backend quorum keeps in step. The rollout is quorum's
//! replacement (`--strategy safe`), quorum's in-place restart on the new binary
//! (`in-place`), or the bug report's naive script (`naive`, see `naive.rs`); each
//! combination runs on its own fresh control plane with the same workload (and the same
//! preloaded data, `--preload-mib`, see `preload.rs`). Every operation is recorded; the report gives failures by kind, latency
//! percentiles, the longest window without a successful operation, the rollout's steps,
//! and it reads back every acknowledged write: a missing one is a lost write and fails
//! the run.

use crate::balancer::{place_balancer, start_balancer, wait_backend, Balancer};
use crate::demo;
use crate::naive;
use crate::patterns::{connect_options, PatternFigures, Patterns};
use crate::plot::{latency_svg, PlotOp, PlotStep, StepKind as PlotStepKind};
use crate::preload::{self, Preload};
use crate::report::{self, GoalCheck};
use crate::serving::{self, Answering, NewMember};
use anyhow::{bail, Context, Result};
use quorum_clock::now_ms;
use quorum_controller::endpoints_path;
use quorum_core::{
    ActionKind, ClientErrorKind, ControlPlaneSpec, HaproxySpec, RolloutStrategy,
    DEFAULT_HAPROXY_BACKEND,
};
use quorum_etcd::failover::{Deadlines, Failover, FailoverError, Retry};
use quorum_etcd::ClientTls;
use quorum_ops::{change, change_with, create, teardown, wait, ChangeOptions, Ctx, Place};
use quorum_store::EventKind;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod clients;

pub use clients::read_endpoints;
use clients::*;

const KEY_PREFIX: &str = "bench/w-";
/// A single operation gives up after this long (counted as timed out).
const OP_TIMEOUT_MS: u64 = 2_000;
/// How often a client looks at the published endpoint set.
const ENDPOINTS_POLL_MS: u64 = 100;
/// Operations kept at most (a bound on memory: 500/s for 10 minutes is 300,000).
const MAX_OPS: usize = 1_000_000;
/// Clients that cannot connect within this long before the workload fail the run.
const WARM_UP_LIMIT_MS: u64 = 10_000;

/// Who rolls the control plane, and how. Runs go in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Quorum's controller replacing machines (`rollout.strategy: Replace`): learners,
    /// leadership moved first, endpoints updated and drained before a removal, graceful
    /// stops.
    Safe,
    /// Quorum's controller restarting each member on the new binary with its data
    /// (`rollout.strategy: InPlace`): drained from the endpoints, leadership moved off
    /// it, stopped, started, back once healthy and caught up; followers first.
    InPlace,
    /// The bug report's script: voters added directly, no leadership move, removed
    /// members left in the client endpoints, processes killed.
    Naive,
}

/// How the clients reach the members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientMode {
    /// Follow the endpoint set quorum publishes (`<home>/endpoints/<name>.json`).
    Follow,
    /// Know only an HAProxy address (HTTP/2 mode); the backend is kept in step.
    Haproxy,
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Operations per second, over all clients.
    #[arg(long, default_value_t = 500)]
    pub(crate) rate: u32,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    pub(crate) clients: u32,
    /// Share of writes (the rest are linearizable reads), 0.0 to 1.0.
    #[arg(long, default_value_t = 0.5)]
    pub(crate) write_ratio: f64,
    /// Rollout strategies to run, each on a fresh control plane, side by side:
    /// safe (quorum replaces the machines), in-place (quorum restarts each member on
    /// the new binary), naive (the bug report's script); several as safe,in-place,naive.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "safe")]
    pub(crate) strategy: Vec<Strategy>,
    /// Before the workload, write about this many MiB of data (16 KiB values under
    /// bench/preload-) to each control plane, and count it again after the rollout. The
    /// members' quota is raised to hold it (twice the data and 512 MiB, 2 to 8 GiB).
    /// Each member keeps the database and its log: budget about 2× this on disk per
    /// member, plus one member's worth during a replacement.
    #[arg(long, default_value_t = 0)]
    pub(crate) preload_mib: u64,
    /// How clients reach the members: follow, haproxy, or both as follow,haproxy.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "follow")]
    pub(crate) client_mode: Vec<ClientMode>,
    #[command(flatten)]
    pub(crate) rollout: demo::RolloutArgs,
    /// Workload before the rollout starts and after it ends.
    #[arg(long, default_value = "2s", value_parser = wait::parse_duration)]
    pub(crate) settle: Duration,
    /// Write a latency-over-time picture of each run into this directory
    /// (<strategy>-<client-mode>.svg).
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
    /// Output: table or json.
    #[arg(short = 'o', long, default_value = "table")]
    pub(crate) output: String,
}

#[derive(Clone, Debug)]
pub(crate) struct Op {
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    /// Measured on the monotonic clock, to the microsecond.
    pub(crate) latency_us: u64,
    /// A read repeated once after "leader changed" (its latency covers both tries).
    pub(crate) retried: bool,
    pub(crate) write: bool,
    /// None: succeeded; else its kind and what the client library said.
    pub(crate) error: Option<OpError>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub strategy: Strategy,
    pub client_mode: ClientMode,
    pub from: String,
    pub to: String,
    pub replicas: u32,
    /// The members ran on this many hosts (network namespaces with agents); 0: as
    /// local processes.
    pub hosts: usize,
    pub rate: u32,
    pub clients: u32,
    pub attempted: usize,
    pub writes_attempted: usize,
    pub succeeded: usize,
    pub failed: usize,
    /// Failed writes (never repeated; a failed write may or may not have been applied).
    pub failed_writes: usize,
    /// Reads repeated once after "leader changed" (counted as failed if the repeat failed).
    pub retried_reads: usize,
    pub failed_by_kind: BTreeMap<&'static str, usize>,
    /// The first error message of each kind.
    pub error_samples: BTreeMap<&'static str, String>,
    /// The failed operations, in order (the first `MAX_FAILURES_LISTED`): when each
    /// began, to set beside the steps.
    pub failures: Vec<Failure>,
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    /// The longest time during the run with no operation succeeding.
    pub longest_no_success_ms: i64,
    pub acknowledged_writes: usize,
    pub lost_writes: usize,
    pub rollout_ms: i64,
    /// The rollout's steps, milliseconds from the start of the workload.
    pub steps: Vec<Step>,
    /// The machines the rollout started (new, or restarted in place) and when each
    /// began to serve.
    pub new_members: Vec<NewMember>,
    /// The data written before the workload (`--preload-mib`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preload: Option<Preload>,
    /// The goals this run is held to (issue 16's, for in-place on 3 members), and
    /// whether each was met.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub goals: Vec<GoalCheck>,
    /// The latency-over-time picture, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plot: Option<PathBuf>,
    /// Whether the members spoke mutual TLS (the default) or plain HTTP.
    pub tls: bool,
    /// Through HAProxy: how its calls reached the members.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub haproxy_backend: Option<BackendCalls>,
    /// What a watcher and a lease holder on the addresses a client is given saw
    /// (`patterns`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patterns: Option<PatternFigures>,
}

/// HAProxy's backend counters at the end of a run (`show stat`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendCalls {
    pub calls: u64,
    pub connections_opened: u64,
    pub connections_reused: u64,
}

/// Failed operations listed one by one in a report, at most.
pub(crate) const MAX_FAILURES_LISTED: usize = 100;

/// One failed operation.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// When it began, milliseconds from the start of the workload.
    pub at_ms: i64,
    pub took_ms: f64,
    pub write: bool,
    pub kind: &'static str,
    pub message: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub at_ms: i64,
    pub kind: StepKind,
    /// The machine it acted on.
    pub machine: Option<String>,
    pub message: String,
    /// How long the step itself took (quorum's steps; `at_ms` is when it ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<i64>,
}

/// What a rollout step was: an entry of quorum's history, or one of the naive script's
/// own steps. Serialized as its name (`add-learner`, `add-voter`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A step of quorum's (or the naive script's step of the same kind).
    Action(ActionKind),
    /// Another entry of quorum's history (endpoints published, the load balancer).
    Event(EventKind),
    /// The naive script adds the new member straight as a voter.
    AddVoter,
    /// The naive script tells its clients about the new member.
    AddEndpoint,
    /// The naive script kills the old machine (SIGKILL).
    KillMachine,
}

impl StepKind {
    pub fn as_str(&self) -> &str {
        match self {
            StepKind::Action(k) => k.as_str(),
            StepKind::Event(e) => e.as_str(),
            StepKind::AddVoter => "add-voter",
            StepKind::AddEndpoint => "add-endpoint",
            StepKind::KillMachine => "kill-machine",
        }
    }

    fn of(kind: EventKind) -> StepKind {
        match kind {
            EventKind::Action(k) => StepKind::Action(k),
            other => StepKind::Event(other),
        }
    }

    /// Its color class in the picture.
    fn plot_kind(&self) -> PlotStepKind {
        match self {
            StepKind::Action(ActionKind::AddLearner) => PlotStepKind::Learner,
            StepKind::Action(ActionKind::Promote) => PlotStepKind::Promote,
            StepKind::Action(ActionKind::MoveLeader) => PlotStepKind::MoveLeader,
            StepKind::Action(ActionKind::RemoveMember) => PlotStepKind::Remove,
            StepKind::Action(ActionKind::StopMachine) => PlotStepKind::Stop,
            StepKind::Action(ActionKind::StartMachine) => PlotStepKind::Start,
            _ => PlotStepKind::Other,
        }
    }
}

impl Serialize for StepKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A failed operation: its kind, the way an operator would read it, and what the client
/// library said.
type OpError = (ClientErrorKind, String);

pub async fn run(mut args: BenchArgs) -> Result<()> {
    check_args(&mut args)?;
    let home =
        std::env::temp_dir().join(format!("quorum-bench-{}-{}", std::process::id(), now_ms()));
    // The hosts outlive every run (each run's control plane is placed on them anew);
    // their join service stops with them.
    let join_stop = Arc::new(AtomicBool::new(false));
    let hosts = start_hosts(&home, args.rollout.hosts, &join_stop).await?;
    let mut reports = Vec::new();
    let mut result = Ok(());
    'runs: for strategy in args.strategy.clone() {
        for mode in args.client_mode.clone() {
            let name = format!("bench-{}-{}", label(strategy), label(mode));
            match run_with_controller(&home, &args, &name, strategy, mode).await {
                Ok(r) => reports.push(r),
                Err(e) => {
                    result = Err(e.context(format!("run {name}")));
                    break 'runs;
                }
            }
        }
    }
    join_stop.store(true, Ordering::Relaxed);
    drop(hosts);
    demo::kill_leftovers(&home);
    let _ = std::fs::remove_dir_all(&home);
    // The runs that finished are reported even when a later one failed.
    if args.output == "json" {
        let doc = serde_json::json!({ "runs": reports });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        report::print(&reports);
    }
    result?;
    check_data_kept(&reports)
}

/// Refuses arguments that cannot run (before anything starts), and puts the strategies
/// and client modes in run order, once each.
fn check_args(args: &mut BenchArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.write_ratio) {
        bail!(
            "--write-ratio must be between 0 and 1, got {}",
            args.write_ratio
        );
    }
    if args.rate == 0 || args.clients == 0 {
        bail!("--rate and --clients must be at least 1");
    }
    args.rollout.check_hosts()?;
    if args.rollout.hosts > 0 {
        if args.strategy.contains(&Strategy::Naive) {
            bail!("--strategy naive runs its own local processes: it has no --hosts form");
        }
        if args.strategy.contains(&Strategy::Safe) && !args.rollout.hosts_allow_replacement() {
            bail!(
                "--strategy safe on hosts needs --hosts {} at least: the new member of a replacement needs a host beside the {} old ones (or use --strategy in-place)",
                args.rollout.replicas + args.rollout.max_surge,
                args.rollout.replicas
            );
        }
    }
    if args.output != "table" && args.output != "json" {
        bail!("-o must be table or json, got '{}'", args.output);
    }
    args.strategy.sort();
    args.strategy.dedup();
    args.client_mode.sort();
    args.client_mode.dedup();
    if args.client_mode.contains(&ClientMode::Haproxy) {
        let bin = quorum_haproxy::haproxy_binary();
        if !bin.exists() {
            bail!(
                "--client-mode haproxy needs HAProxy at {} (scripts/install.sh installs it; \
                 QUORUM_HAPROXY names another binary)",
                bin.display()
            );
        }
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--plot: cannot create {}", dir.display()))?;
    }
    Ok(())
}

/// The `n` hosts the runs place their members on (none for 0).
async fn start_hosts(
    home: &Path,
    n: usize,
    join_stop: &Arc<AtomicBool>,
) -> Result<Option<crate::hosts::Hosts>> {
    if n == 0 {
        return Ok(None);
    }
    let t = Instant::now();
    let h = crate::hosts::Hosts::start(home, n, join_stop).await?;
    eprintln!(
        "bench: {n} hosts ready in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    Ok(Some(h))
}

/// One run (`run_one`) with a controller of its own, then its control plane torn down
/// and its balancer stopped, whatever the run's end (Ctrl-C included).
async fn run_with_controller(
    home: &Path,
    args: &BenchArgs,
    name: &str,
    strategy: Strategy,
    mode: ClientMode,
) -> Result<Report> {
    // A controller per run: it is stopped before the teardown, which acts as the home's
    // one controller.
    let stop = Arc::new(AtomicBool::new(false));
    let controller = demo::start_controller(home, stop.clone())?;
    // The balancer outlives the control plane's teardown, which drains it.
    let mut balancer = None;
    let r = tokio::select! {
        r = run_one(home, args, name, strategy, mode, &mut balancer) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    stop.store(true, Ordering::Relaxed);
    let _ = controller.join();
    let cleanup = teardown(&Place::embedded(home), name, None).await;
    if let Some(mut b) = balancer {
        b.process.stop();
    }
    r.and_then(|r| cleanup.map(|_| r))
}

/// Fails the bench when a run lost an acknowledged write or a preloaded key.
fn check_data_kept(reports: &[Report]) -> Result<()> {
    let lost: usize = reports.iter().map(|r| r.lost_writes).sum();
    if lost > 0 {
        bail!("{lost} acknowledged writes were lost");
    }
    let missing: u64 = reports
        .iter()
        .filter_map(|r| r.preload.as_ref())
        .map(|p| p.keys.saturating_sub(p.keys_after))
        .sum();
    if missing > 0 {
        bail!("{missing} preloaded keys were missing after the rollout");
    }
    Ok(())
}

pub(crate) fn label<T: clap::ValueEnum>(v: T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

async fn run_one(
    home: &Path,
    args: &BenchArgs,
    name: &str,
    strategy: Strategy,
    mode: ClientMode,
    balancer: &mut Option<Balancer>,
) -> Result<Report> {
    let mut ctx = Ctx::open(&Place::embedded(home))?;
    ctx.quiet = true;
    let (tls, source) = prepare(&mut ctx, home, args, name, (strategy, mode), balancer).await?;
    let balancer = balancer.as_ref();
    let mut preloaded = preload_if_asked(home, args, name, tls.as_ref()).await?;
    let pattern_urls = pattern_urls(&ctx, name, &source, strategy)?;
    let patterns = Patterns::start(&pattern_urls, &connect_options(tls.as_ref()), name);
    let workload = Workload::start(args, &source, &tls, home, name).await;
    let t0 = now_ms();
    say_workload(args, name, strategy);
    tokio::time::sleep(args.settle).await;
    let after = ctx.store.last_event_id(name)?;
    let up_start = now_ms();
    let naive_steps = match strategy {
        Strategy::Naive => {
            let to = args.rollout.to;
            hand_to_naive_script(&mut ctx, name, to).await?;
            let clients = naive_clients(balancer, &source, tls.as_ref(), name)?;
            Some(naive::rollout(&mut ctx, name, to, &clients, t0).await?)
        }
        _ => {
            roll_with_quorum(&mut ctx, args, name, strategy).await?;
            None
        }
    };
    let rollout_ms = now_ms() - up_start;
    tokio::time::sleep(args.settle).await;
    let (ops, acked, began) = workload.finish().await;
    let patterns = patterns.finish().await;
    // The counters only describe the run; without them the report (and its lost-write
    // check) still stands.
    let haproxy_backend = balancer.and_then(|b| backend_calls(b, name));
    let t1 = now_ms();
    let steps = match naive_steps {
        Some(s) => s,
        None => recorded_steps(&ctx, name, after, t0)?,
    };
    let lost = read_back(&ctx, name, tls.as_ref(), &acked, preloaded.as_mut()).await?;
    let new_members = serving::started(&steps, &began, t0);
    let mut report = report::summarize(
        args,
        (strategy, mode),
        &ops,
        (t0, t1),
        (acked.len(), lost),
        rollout_ms,
        steps,
    );
    report.new_members = new_members;
    report.patterns = Some(patterns);
    report.haproxy_backend = haproxy_backend;
    report.preload = preloaded;
    report.goals = report::goals(&report);
    if let Some(dir) = &args.plot {
        report.plot = Some(plot(dir, (strategy, mode), &report, &ops, (t0, t1))?);
    }
    Ok(report)
}

/// What the run's workload is, said as it begins.
fn say_workload(args: &BenchArgs, name: &str, strategy: Strategy) {
    eprintln!(
        "bench {name}: {} ops/s from {} clients; {} rollout to {} after {:?}",
        args.rate,
        args.clients,
        label(strategy),
        args.rollout.to,
        args.settle
    );
}

/// Writes the run's picture into `dir`; its path.
fn plot(
    dir: &Path,
    (strategy, mode): (Strategy, ClientMode),
    report: &Report,
    ops: &[Op],
    (t0, t1): (i64, i64),
) -> Result<PathBuf> {
    let path = dir.join(format!("{}-{}.svg", label(strategy), label(mode)));
    std::fs::write(&path, picture(report, ops, t0, t1)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The preloaded data `--preload-mib` asks for, written straight to the members (not
/// through a balancer).
async fn preload_if_asked(
    home: &Path,
    args: &BenchArgs,
    name: &str,
    tls: Option<&ClientTls>,
) -> Result<Option<Preload>> {
    if args.preload_mib == 0 {
        return Ok(None);
    }
    let endpoints = read_endpoints(&endpoints_path(home, name));
    eprintln!("bench {name}: preloading {} MiB", args.preload_mib);
    Ok(Some(
        preload::preload(&endpoints, tls, args.preload_mib).await?,
    ))
}

/// Reads back, after the rollout, every acknowledged write (those missing or changed
/// are lost writes: how many) and counts the preloaded keys.
async fn read_back(
    ctx: &Ctx,
    name: &str,
    tls: Option<&ClientTls>,
    acked: &[(String, String)],
    preloaded: Option<&mut Preload>,
) -> Result<usize> {
    let cp = ctx.store.get_control_plane(name)?;
    let endpoints = ctx.live(&cp).await?.endpoints;
    let (lost, _) = demo::missing_keys(&endpoints, tls, KEY_PREFIX, acked).await?;
    if let Some(p) = preloaded {
        p.keys_after = preload::count(&endpoints, tls).await?;
    }
    Ok(lost)
}

/// The addresses the watch and lease patterns use, those such a client is given: the
/// control plane's client addresses, the naive script's list, or HAProxy's.
fn pattern_urls(ctx: &Ctx, name: &str, source: &Source, strategy: Strategy) -> Result<Vec<String>> {
    Ok(match (source, strategy) {
        (Source::File(_), Strategy::Safe | Strategy::InPlace) => {
            let cp = ctx.store.get_control_plane(name)?;
            quorum_core::reach::client_urls(&cp, &ctx.store.machines(name)?)
        }
        (s, _) => s.endpoints(),
    })
}

/// Quorum's rollout to the bench's version (`safe`: by replacement; `in-place`: as
/// `quorum upgrade --strategy InPlace`), waited for until it converged.
async fn roll_with_quorum(
    ctx: &mut Ctx,
    args: &BenchArgs,
    name: &str,
    strategy: Strategy,
) -> Result<()> {
    let to = args.rollout.to;
    if strategy == Strategy::InPlace {
        // The strategy changes with the version, while no rollout runs.
        change(ctx, name, false, |s| ControlPlaneSpec {
            version: to,
            rollout: RolloutStrategy {
                strategy: quorum_core::Strategy::InPlace,
                ..s.rollout
            },
            ..s.clone()
        })
        .await?;
    } else {
        change(ctx, name, false, |s| ControlPlaneSpec {
            version: to,
            ..s.clone()
        })
        .await?;
    }
    quiet_wait(ctx, name, args.rollout.timeout).await
}

/// Records the version `to` for the naive script to roll to, with the controller's
/// hands off: paused, and no longer minding HAProxy. The bug report's script takes no
/// snapshot either (quorum's strategies do, and their times include it).
async fn hand_to_naive_script(ctx: &mut Ctx, name: &str, to: quorum_core::Version) -> Result<()> {
    let opts = ChangeOptions {
        no_snapshot: true,
        ..ChangeOptions::default()
    };
    change_with(ctx, name, opts, |s| ControlPlaneSpec {
        version: to,
        paused: true,
        haproxy: None,
        ..s.clone()
    })
    .await
}

/// Creates the control plane (and its HAProxy, in that mode) and waits until it serves:
/// converged, in the backend, and in the published endpoints. Returns the clients'
/// credentials and where they find the members.
async fn prepare(
    ctx: &mut Ctx,
    home: &Path,
    args: &BenchArgs,
    name: &str,
    (strategy, mode): (Strategy, ClientMode),
    balancer: &mut Option<Balancer>,
) -> Result<(Option<ClientTls>, Source)> {
    let place = match mode {
        ClientMode::Haproxy => Some(place_balancer(ctx, home, name)?),
        ClientMode::Follow => None,
    };
    eprintln!(
        "bench {name}: creating {} members at etcd {}",
        args.rollout.replicas, args.rollout.from
    );
    let mut spec = args.rollout.initial_spec();
    spec.maintenance.quota_backend_bytes = preload::quota_bytes(args.preload_mib);
    create(ctx, name, spec, false)?;
    let cp = ctx.store.get_control_plane(name)?;
    let tls = ctx.client_tls(&cp)?;
    if let Some(place) = place {
        // HAProxy's TLS frontend needs the control plane's CA, so HAProxy starts after
        // the control plane is created, and only then is it named in the spec: the
        // controller never looks for an HAProxy that is not there yet.
        let haproxy = HaproxySpec {
            runtime_api: place.socket.display().to_string(),
            backend: DEFAULT_HAPROXY_BACKEND.to_string(),
        };
        *balancer = Some(start_balancer(ctx, &cp, place)?);
        let mut spec = cp.spec.clone();
        spec.haproxy = Some(haproxy);
        ctx.store.update_spec(name, &spec)?;
    }
    let balancer = balancer.as_ref();
    quiet_wait(ctx, name, args.rollout.timeout).await?;
    if let Some(b) = &balancer {
        wait_backend(&b.api, args.rollout.replicas as usize, args.rollout.timeout).await?;
    }
    // The controller publishes the endpoints on its next pass after convergence.
    wait_endpoints_file(
        &endpoints_path(home, name),
        args.rollout.replicas as usize,
        args.rollout.timeout,
    )
    .await?;
    let source = match (balancer, strategy) {
        (Some(b), _) => Source::Fixed(vec![b.frontend.to_string()]),
        (None, Strategy::Safe | Strategy::InPlace) => Source::File(endpoints_path(home, name)),
        (None, Strategy::Naive) => {
            // The naive script keeps its own list: it adds members, never removes one.
            let path = home.join("naive").join(format!("{name}.json"));
            std::fs::create_dir_all(home.join("naive"))?;
            std::fs::copy(endpoints_path(home, name), &path)?;
            Source::File(path)
        }
    };
    Ok((tls, source))
}

/// The paced clients of one run and the probe of new members, running until `finish`.
struct Workload {
    workers: Vec<tokio::task::JoinHandle<()>>,
    probe: tokio::task::JoinHandle<Answering>,
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<Op>>>,
    acked: Arc<Mutex<Vec<(String, String)>>>,
}

impl Workload {
    /// Starts the clients and returns once every one of them is ready.
    async fn start(
        args: &BenchArgs,
        source: &Source,
        tls: &Option<ClientTls>,
        home: &Path,
        name: &str,
    ) -> Workload {
        let ops = Arc::new(Mutex::new(Vec::new()));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let interval = Duration::from_secs_f64(f64::from(args.clients) / f64::from(args.rate));
        let ready = Arc::new(tokio::sync::Barrier::new(args.clients as usize + 1));
        let workers: Vec<_> = (0..args.clients)
            .map(|id| {
                tokio::spawn(client_loop(
                    id,
                    source.clone(),
                    tls.clone(),
                    interval,
                    args.write_ratio,
                    ready.clone(),
                    stop.clone(),
                    ops.clone(),
                    acked.clone(),
                ))
            })
            .collect();
        ready.wait().await;
        let probe = tokio::spawn(serving::probe(
            home.to_path_buf(),
            name.to_string(),
            tls.clone(),
            stop.clone(),
        ));
        Workload {
            workers,
            probe,
            stop,
            ops,
            acked,
        }
    }

    /// Stops the clients and the probe. Returns every operation, the acknowledged
    /// writes (key, value), and when each machine began to answer.
    async fn finish(self) -> (Vec<Op>, Vec<(String, String)>, Answering) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            let _ = w.await;
        }
        let began = self.probe.await.unwrap_or_default();
        let acked = std::mem::take(&mut *self.acked.lock().unwrap_or_else(|p| p.into_inner()));
        let ops = std::mem::take(&mut *self.ops.lock().unwrap_or_else(|p| p.into_inner()));
        (ops, acked, began)
    }
}

/// Where the naive script puts new members for the clients to find.
fn naive_clients(
    balancer: Option<&Balancer>,
    source: &Source,
    tls: Option<&ClientTls>,
    name: &str,
) -> Result<naive::Clients> {
    Ok(match (balancer, source) {
        (Some(b), _) => naive::Clients::Haproxy {
            api: b.api.clone(),
            backend: DEFAULT_HAPROXY_BACKEND.to_string(),
            tls: tls.map(|c| quorum_controller::balancer::LbTls {
                ca_pem: c.ca_pem.clone(),
                bundle_pem: format!("{}\n{}", c.cert_pem.trim_end(), c.key_pem.trim_end()),
                names: quorum_controller::balancer::LbTls::names(name),
            }),
        },
        (None, Source::File(p)) => naive::Clients::File(p.clone()),
        (None, Source::Fixed(_)) => bail!("a fixed endpoint needs a balancer"),
    })
}

/// HAProxy's backend counters at the end of a run, when it answers.
fn backend_calls(b: &Balancer, name: &str) -> Option<BackendCalls> {
    match b.api.backend_connections(DEFAULT_HAPROXY_BACKEND) {
        Ok(c) => Some(BackendCalls {
            calls: c.calls,
            connections_opened: c.opened,
            connections_reused: c.reused,
        }),
        Err(e) => {
            eprintln!("bench {name}: HAProxy's backend counters are not in the report: {e}");
            None
        }
    }
}

/// The steps quorum's controller recorded during the rollout, from the store.
fn recorded_steps(ctx: &Ctx, name: &str, after: i64, t0: i64) -> Result<Vec<Step>> {
    Ok(ctx
        .store
        .events_after(name, after, 10_000)?
        .into_iter()
        .filter(|e| e.ok && e.kind != EventKind::Converged)
        .map(|e| Step {
            at_ms: e.at_ms - t0,
            kind: StepKind::of(e.kind),
            machine: e.machine,
            message: e.message,
            took_ms: e.took_ms,
        })
        .collect())
}

/// The latency-over-time picture of a run.
fn picture(r: &Report, ops: &[Op], t0: i64, t1: i64) -> Result<String> {
    let plot_ops: Vec<PlotOp> = ops
        .iter()
        .map(|o| PlotOp {
            at_ms: o.start_ms - t0,
            latency_ms: o.latency_us as f64 / 1000.0,
            failed: o.error.is_some(),
        })
        .collect();
    // Bookkeeping steps (allocating a record, marking intent) change nothing a client sees.
    let quiet = [
        ActionKind::AllocateMachine,
        ActionKind::MarkDeleting,
        ActionKind::DeleteMachine,
        ActionKind::SetInPlacePhase,
    ]
    .map(StepKind::Action);
    let steps: Vec<PlotStep> = r
        .steps
        .iter()
        .filter(|s| !quiet.contains(&s.kind))
        .map(|s| PlotStep {
            at_ms: s.at_ms,
            label: format!(
                "{} {}",
                s.kind.as_str(),
                s.machine.as_deref().unwrap_or_default()
            ),
            kind: s.kind.plot_kind(),
        })
        .collect();
    let title = format!(
        "{} rollout {} -> {}, clients {}: {} ops/s from {} clients",
        label(r.strategy),
        r.from,
        r.to,
        match r.client_mode {
            ClientMode::Follow => "following quorum's endpoints",
            ClientMode::Haproxy => "through HAProxy",
        },
        r.rate,
        r.clients
    );
    let subtitle = format!(
        "{} failed of {}; p99 {:.1} ms, max {:.1} ms; longest gap {} ms; rollout {:.1} s; {} lost writes",
        r.failed,
        r.attempted,
        r.latency_ms_p99,
        r.latency_ms_max,
        r.longest_no_success_ms,
        r.rollout_ms as f64 / 1000.0,
        r.lost_writes
    );
    latency_svg(&title, &subtitle, &plot_ops, &steps, t1 - t0)
}

/// Waits until the published endpoints file lists `n` endpoints.
async fn wait_endpoints_file(path: &Path, n: usize, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    while read_endpoints(path).len() != n {
        if start.elapsed() > timeout {
            bail!(
                "{} did not list {n} endpoints within {}s",
                path.display(),
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(ENDPOINTS_POLL_MS)).await;
    }
    Ok(())
}

/// Waits for convergence without printing progress (the report is the output).
async fn quiet_wait(ctx: &Ctx, name: &str, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let cp = ctx.store.get_control_plane(name)?;
        let s = ctx.live(&cp).await?;
        if s.converged {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!(
                "the control plane did not converge within {}s: {}",
                timeout.as_secs(),
                s.operation
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
