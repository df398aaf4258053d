//! `quorum bench rollout`: what clients see during a rollout.
//!
//! Several clients issue a paced mix of writes (each with a unique value) and
//! linearizable reads through etcd-client, following the endpoint set the controller
//! publishes (`<home>/endpoints/<name>.json`) the way a real client would, while quorum
//! rolls a fresh control plane to another version. Every operation is recorded; the
//! report gives failures by kind, latency percentiles, the longest window without a
//! successful operation, the rollout's steps, and it reads back every acknowledged
//! write: a missing one is a lost write and fails the run.

use crate::{change, create, demo, status, teardown, wait, Ctx};
use anyhow::{bail, Result};
use etcd_client::{Client, ConnectOptions};
use quorum_controller::{endpoints_path, now_ms};
use quorum_core::ControlPlaneSpec;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NAME: &str = "bench";
const KEY_PREFIX: &str = "bench/w-";
/// A single operation gives up after this long (counted as timed out).
const OP_TIMEOUT_MS: u64 = 2_000;
/// How often a client looks at the published endpoint set.
const ENDPOINTS_POLL_MS: u64 = 100;
/// Operations kept at most (a bound on memory: 500/s for 10 minutes is 300,000).
const MAX_OPS: usize = 1_000_000;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Operations per second, over all clients.
    #[arg(long, default_value_t = 500)]
    rate: u32,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: u32,
    /// Share of writes (the rest are linearizable reads), 0.0 to 1.0.
    #[arg(long, default_value_t = 0.5)]
    write_ratio: f64,
    #[command(flatten)]
    rollout: demo::RolloutArgs,
    /// Workload before the rollout starts and after it ends.
    #[arg(long, default_value = "2s", value_parser = wait::parse_duration)]
    settle: Duration,
    /// Output: table or json.
    #[arg(short = 'o', long, default_value = "table")]
    output: String,
}

#[derive(Clone, Debug)]
struct Op {
    start_ms: i64,
    end_ms: i64,
    write: bool,
    /// None: succeeded; else its kind and what the client library said.
    error: Option<(&'static str, String)>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub rate: u32,
    pub clients: u32,
    pub attempted: usize,
    pub writes_attempted: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub failed_by_kind: BTreeMap<&'static str, usize>,
    /// The first error message of each kind.
    pub error_samples: BTreeMap<&'static str, String>,
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
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub at_ms: i64,
    pub kind: String,
    pub message: String,
}

/// Classifies a failed operation the way an operator would read it.
fn error_kind(e: &str) -> &'static str {
    let e = e.to_ascii_lowercase();
    if e.contains("leader changed") {
        "leader changed"
    } else if e.contains("no leader") {
        "no leader"
    } else if e.contains("learner") {
        "learner"
    } else if e.contains("timed out") || e.contains("deadline") || e.contains("timeout") {
        "timed out"
    } else if e.contains("unavailable")
        || e.contains("transport")
        || e.contains("connect")
        || e.contains("refused")
    {
        "unavailable"
    } else {
        "other"
    }
}

fn read_endpoints(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v["endpoints"].as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}

async fn connect(endpoints: &[String]) -> Option<Client> {
    if endpoints.is_empty() {
        return None;
    }
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_millis(OP_TIMEOUT_MS));
    Client::connect(endpoints, Some(opts)).await.ok()
}

/// One client: paced operations, following the published endpoints.
async fn client_loop(
    id: u32,
    endpoints_file: PathBuf,
    interval: Duration,
    write_ratio: f64,
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<Op>>>,
    acked: Arc<Mutex<Vec<(String, String)>>>,
) {
    let mut seq: u64 = 0;
    let mut current = read_endpoints(&endpoints_file);
    let mut client = connect(&current).await;
    let mut last_check = Instant::now();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Writes and reads interleave deterministically at the requested ratio.
    let mut write_credit = 0.0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        if last_check.elapsed() >= Duration::from_millis(ENDPOINTS_POLL_MS) {
            last_check = Instant::now();
            let now = read_endpoints(&endpoints_file);
            if !now.is_empty() && now != current {
                current = now;
                client = connect(&current).await;
            }
        }
        write_credit += write_ratio;
        let write = write_credit >= 1.0;
        if write {
            write_credit -= 1.0;
        }
        let start_ms = now_ms();
        let result: Result<(), String> = match client.as_mut() {
            None => Err("unavailable: no endpoint to connect to".into()),
            Some(c) => {
                if write {
                    seq += 1;
                    let key = format!("{KEY_PREFIX}{id:03}-{seq:08}");
                    let value = format!("{id}-{seq}-{start_ms}");
                    match tokio::time::timeout(
                        Duration::from_millis(OP_TIMEOUT_MS),
                        c.put(key.clone(), value.clone(), None),
                    )
                    .await
                    {
                        Ok(Ok(_)) => {
                            acked
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push((key, value));
                            Ok(())
                        }
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err("timed out".into()),
                    }
                } else {
                    match tokio::time::timeout(
                        Duration::from_millis(OP_TIMEOUT_MS),
                        c.get("bench/probe", None),
                    )
                    .await
                    {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err("timed out".into()),
                    }
                }
            }
        };
        let op = Op {
            start_ms,
            end_ms: now_ms(),
            write,
            error: result.err().map(|e| (error_kind(&e), e)),
        };
        let mut all = ops.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() < MAX_OPS {
            all.push(op);
        }
    }
}

pub async fn run(args: BenchArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.write_ratio) {
        bail!(
            "--write-ratio must be between 0 and 1, got {}",
            args.write_ratio
        );
    }
    if args.rate == 0 || args.clients == 0 {
        bail!("--rate and --clients must be at least 1");
    }
    if args.output != "table" && args.output != "json" {
        bail!("-o must be table or json, got '{}'", args.output);
    }
    let home =
        std::env::temp_dir().join(format!("quorum-bench-{}-{}", std::process::id(), now_ms()));
    let stop = Arc::new(AtomicBool::new(false));
    let controller = demo::start_controller(&home, stop.clone())?;
    let result = tokio::select! {
        r = body(&home, &args) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    let cleanup = teardown(&home, NAME, None).await;
    stop.store(true, Ordering::Relaxed);
    let _ = controller.join();
    demo::kill_leftovers(&home);
    let _ = std::fs::remove_dir_all(&home);
    cleanup?;
    let report = result?;
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    if report.lost_writes > 0 {
        bail!("{} acknowledged writes were lost", report.lost_writes);
    }
    Ok(())
}

async fn body(home: &Path, args: &BenchArgs) -> Result<Report> {
    let mut ctx = Ctx::open(home)?;
    ctx.quiet = true;
    let spec = args.rollout.initial_spec();
    eprintln!(
        "bench: creating {} members at etcd {}",
        args.rollout.replicas, args.rollout.from
    );
    create(&mut ctx, NAME, spec, false)?;
    quiet_wait(&ctx, args.rollout.timeout).await?;
    let endpoints_file = endpoints_path(home, NAME);
    let ops = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let interval = Duration::from_secs_f64(f64::from(args.clients) / f64::from(args.rate));
    let workers: Vec<_> = (0..args.clients)
        .map(|id| {
            tokio::spawn(client_loop(
                id,
                endpoints_file.clone(),
                interval,
                args.write_ratio,
                stop.clone(),
                ops.clone(),
                acked.clone(),
            ))
        })
        .collect();
    let t0 = now_ms();
    eprintln!(
        "bench: {} ops/s from {} clients; rollout to {} after {:?}",
        args.rate, args.clients, args.rollout.to, args.settle
    );
    tokio::time::sleep(args.settle).await;
    let after = ctx.store.last_event_id(NAME)?;
    let up_start = now_ms();
    change(&mut ctx, NAME, false, |s| ControlPlaneSpec {
        version: args.rollout.to,
        ..s.clone()
    })
    .await?;
    quiet_wait(&ctx, args.rollout.timeout).await?;
    let rollout_ms = now_ms() - up_start;
    tokio::time::sleep(args.settle).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let t1 = now_ms();
    let steps = ctx
        .store
        .events_after(NAME, after, 10_000)?
        .into_iter()
        .filter(|e| e.ok && e.kind != "converged")
        .map(|e| Step {
            at_ms: e.at_ms - t0,
            kind: e.kind,
            message: e.message,
        })
        .collect();
    let cp = ctx.store.get_control_plane(NAME)?;
    let endpoints = status::live(&ctx.store, &ctx.provider, &ctx.etcd, &cp)
        .await?
        .endpoints;
    let acked = std::mem::take(&mut *acked.lock().unwrap_or_else(|p| p.into_inner()));
    // Acknowledged writes missing (or changed) when read back are lost writes.
    let (lost, _) = demo::missing_keys(&endpoints, KEY_PREFIX, &acked).await?;
    let ops = std::mem::take(&mut *ops.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(summarize(
        args,
        &ops,
        t0,
        t1,
        acked.len(),
        lost,
        rollout_ms,
        steps,
    ))
}

/// Waits for convergence without printing progress (the report is the output).
async fn quiet_wait(ctx: &Ctx, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let cp = ctx.store.get_control_plane(NAME)?;
        let s = status::live(&ctx.store, &ctx.provider, &ctx.etcd, &cp).await?;
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

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    args: &BenchArgs,
    ops: &[Op],
    t0: i64,
    t1: i64,
    acknowledged: usize,
    lost: usize,
    rollout_ms: i64,
    steps: Vec<Step>,
) -> Report {
    let mut failed_by_kind = BTreeMap::new();
    let mut error_samples = BTreeMap::new();
    for (kind, msg) in ops.iter().filter_map(|o| o.error.as_ref()) {
        *failed_by_kind.entry(*kind).or_insert(0) += 1;
        error_samples.entry(*kind).or_insert_with(|| msg.clone());
    }
    let mut lat: Vec<f64> = ops
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| (o.end_ms - o.start_ms) as f64)
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    // The longest gap between successive successes, counting the run's edges.
    let mut ends: Vec<i64> = ops
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.end_ms)
        .collect();
    ends.sort_unstable();
    let mut longest = 0;
    let mut prev = t0;
    for e in ends.iter().copied().chain(std::iter::once(t1)) {
        longest = longest.max(e - prev);
        prev = e;
    }
    let failed = ops.iter().filter(|o| o.error.is_some()).count();
    Report {
        rate: args.rate,
        clients: args.clients,
        attempted: ops.len(),
        writes_attempted: ops.iter().filter(|o| o.write).count(),
        succeeded: ops.len() - failed,
        failed,
        failed_by_kind,
        error_samples,
        latency_ms_p50: percentile(&lat, 0.50),
        latency_ms_p99: percentile(&lat, 0.99),
        latency_ms_max: lat.last().copied().unwrap_or(0.0),
        longest_no_success_ms: longest,
        acknowledged_writes: acknowledged,
        lost_writes: lost,
        rollout_ms,
        steps,
    }
}

fn print_table(r: &Report) {
    let failures = if r.failed_by_kind.is_empty() {
        "none".to_string()
    } else {
        r.failed_by_kind
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rows = vec![
        vec![
            "workload".to_string(),
            format!(
                "{} ops/s from {} clients, following the published endpoints",
                r.rate, r.clients
            ),
        ],
        vec![
            "operations".into(),
            format!(
                "{} attempted ({} writes), {} succeeded, {} failed ({failures})",
                r.attempted, r.writes_attempted, r.succeeded, r.failed
            ),
        ],
        vec![
            "latency".into(),
            format!(
                "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                r.latency_ms_p50, r.latency_ms_p99, r.latency_ms_max
            ),
        ],
        vec![
            "longest gap".into(),
            format!(
                "{} ms without a successful operation",
                r.longest_no_success_ms
            ),
        ],
        vec![
            "writes".into(),
            format!(
                "{} acknowledged, {} lost",
                r.acknowledged_writes, r.lost_writes
            ),
        ],
        vec![
            "rollout".into(),
            format!(
                "{:.1} s, {} steps",
                r.rollout_ms as f64 / 1000.0,
                r.steps.len()
            ),
        ],
    ];
    print!("{}", status::columns(&rows));
    for (kind, msg) in &r.error_samples {
        println!("  first '{kind}' failure: {msg}");
    }
}
