//! `quorum bench rollout`'s report: built from the recorded operations, printed as one
//! table per run, then the runs side by side; for an in-place run, the goals.

use crate::rollout::{
    label, BenchArgs, ClientMode, Failure, Op, Report, Step, Strategy, MAX_FAILURES_LISTED,
};
use quorum_ops::status;
use serde::Serialize;
use std::collections::BTreeMap;

/// Issue 16's goals for an in-place rollout of 3 members (at the default 500 ops/s):
/// the whole rollout within 4 s, no operation slower than 500 ms, at most 0.05 % of
/// the operations failed, no acknowledged write lost.
const GOAL_REPLICAS: u32 = 3;
const GOAL_ROLLOUT_MS: i64 = 4_000;
const GOAL_MAX_LATENCY_MS: f64 = 500.0;
const GOAL_FAILED_PERCENT: f64 = 0.05;

/// One goal, what was measured, and whether it was met.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalCheck {
    pub goal: String,
    pub measured: String,
    pub met: bool,
}

/// The goals a run is held to: issue 16's for an in-place rollout of 3 members without
/// preloaded data; none otherwise.
pub(crate) fn goals(r: &Report) -> Vec<GoalCheck> {
    if r.strategy != Strategy::InPlace || r.replicas != GOAL_REPLICAS || r.preload.is_some() {
        return Vec::new();
    }
    let failed_percent = failed_percent(r);
    vec![
        GoalCheck {
            goal: format!("rollout <= {:.0} s", GOAL_ROLLOUT_MS as f64 / 1000.0),
            measured: format!("{:.1} s", r.rollout_ms as f64 / 1000.0),
            met: r.rollout_ms <= GOAL_ROLLOUT_MS,
        },
        GoalCheck {
            goal: format!("max latency < {GOAL_MAX_LATENCY_MS:.0} ms"),
            measured: format!("{:.1} ms", r.latency_ms_max),
            met: r.latency_ms_max < GOAL_MAX_LATENCY_MS,
        },
        GoalCheck {
            goal: format!("failed <= {GOAL_FAILED_PERCENT} %"),
            measured: format!("{failed_percent:.3} % ({})", by_kind(r)),
            met: failed_percent <= GOAL_FAILED_PERCENT,
        },
        GoalCheck {
            goal: "0 lost writes".into(),
            measured: r.lost_writes.to_string(),
            met: r.lost_writes == 0,
        },
    ]
}

/// Failures listed one by one in the table, at most (the JSON has more).
const FAILURES_PRINTED: usize = 10;

/// When the failures began, each beside the last step before it ("4.31 s, 12 ms after
/// move-leader a-1"), when there are few enough to read.
fn failures_beside_steps(r: &Report) -> Option<String> {
    if r.failures.is_empty() || r.failed > FAILURES_PRINTED {
        return None;
    }
    let each: Vec<String> = r
        .failures
        .iter()
        .map(|f| {
            let what = if f.write { "write" } else { "read" };
            let step = r.steps.iter().rev().find(|s| s.at_ms <= f.at_ms);
            match step {
                Some(s) => {
                    // A step on no one machine (the endpoints published) names none.
                    let on = s
                        .machine
                        .as_deref()
                        .map(|m| format!(" {m}"))
                        .unwrap_or_default();
                    format!(
                        "{:.2} s ({what}, {}; {} ms after {}{on})",
                        f.at_ms as f64 / 1000.0,
                        f.kind,
                        f.at_ms - s.at_ms,
                        s.kind.as_str(),
                    )
                }
                None => format!("{:.2} s ({what}, {})", f.at_ms as f64 / 1000.0, f.kind),
            }
        })
        .collect();
    Some(format!("failures at: {}", each.join("; ")))
}

fn failed_percent(r: &Report) -> f64 {
    if r.attempted == 0 {
        return 0.0;
    }
    100.0 * r.failed as f64 / r.attempted as f64
}

/// The failures by kind, "none" without any.
fn by_kind(r: &Report) -> String {
    if r.failed_by_kind.is_empty() {
        return "none".into();
    }
    r.failed_by_kind
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every run's table, then (with several runs) one line per run.
pub(crate) fn print(reports: &[Report]) {
    for r in reports {
        print_table(r);
        println!();
    }
    if reports.len() > 1 {
        print_comparison(reports);
    }
}

fn print_table(r: &Report) {
    let mut rows = measured_rows(r);
    if let Some(p) = &r.preload {
        rows.push(vec!["preloaded data".into(), preload_line(p)]);
    }
    for g in &r.goals {
        let mark = if g.met { "met" } else { "MISSED" };
        rows.push(vec![
            format!("goal {}", g.goal),
            format!("{mark}: {}", g.measured),
        ]);
    }
    if let Some(line) = haproxy_backend(r) {
        rows.push(vec!["haproxy backend".into(), line]);
    }
    if let Some(p) = &r.patterns {
        rows.extend(pattern_rows(p));
    }
    print!("{}", status::columns(&rows));
    for (kind, msg) in &r.error_samples {
        println!("  first '{kind}' failure: {msg}");
    }
    if let Some(line) = failures_beside_steps(r) {
        println!("  {line}");
    }
    if let Some(p) = &r.plot {
        println!("  picture: {}", p.display());
    }
}

/// The rows every run has: the workload, what its operations saw, the rollout.
fn measured_rows(r: &Report) -> Vec<Vec<String>> {
    vec![
        vec!["workload".to_string(), workload(r)],
        vec!["operations".into(), operations(r)],
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
        vec![
            match r.strategy {
                Strategy::InPlace => "restarted members".into(),
                Strategy::Safe | Strategy::Naive => "new members".into(),
            },
            new_members(r),
        ],
    ]
}

/// The preloaded data, and how much of it was there after the rollout.
fn preload_line(p: &crate::preload::Preload) -> String {
    format!(
        "{} MiB in {} keys of {} bytes ({} written in {:.1} s); database {:.0} MiB; \
         {} keys after the rollout",
        p.mib,
        p.keys,
        p.value_bytes,
        p.written,
        p.took_ms as f64 / 1000.0,
        p.db_size_bytes as f64 / (1024.0 * 1024.0),
        p.keys_after
    )
}

/// The watch and lease patterns' rows.
fn pattern_rows(p: &crate::patterns::PatternFigures) -> Vec<Vec<String>> {
    let behind = if p.behind { ", NEVER CAUGHT UP" } else { "" };
    vec![
        vec![
            "watch".into(),
            format!(
                "{} events of {} writes: {} missed, {} duplicated, {} out of order{behind}; \
                 {} streams broken, longest resume {} ms",
                p.events,
                p.acknowledged,
                p.missed,
                p.duplicated,
                p.out_of_order,
                p.streams_broken,
                p.longest_resume_ms
            ),
        ],
        vec![
            "lease".into(),
            format!(
                "{} expired, longest keep-alive gap {} ms; stranded {} times",
                p.leases_expired, p.longest_keepalive_gap_ms, p.stranded
            ),
        ],
    ]
}

fn workload(r: &Report) -> String {
    format!(
        "{} ops/s from {} clients, {}, {}; {} rollout {} -> {}{}",
        r.rate,
        r.clients,
        match r.client_mode {
            ClientMode::Follow => "following the published endpoints",
            ClientMode::Haproxy => "through HAProxy",
        },
        if r.tls { "mutual TLS" } else { "plain HTTP" },
        label(r.strategy),
        r.from,
        r.to,
        match r.hosts {
            0 => " (local processes)".to_string(),
            n => format!(" (members on {n} hosts, through their agents)"),
        }
    )
}

fn operations(r: &Report) -> String {
    let failures = by_kind(r);
    format!(
        "{} attempted ({} writes), {} succeeded, {} failed ({failures}; {} of them \
         writes), {} reads repeated after 'leader changed'",
        r.attempted, r.writes_attempted, r.succeeded, r.failed, r.failed_writes, r.retried_reads
    )
}

fn new_members(r: &Report) -> String {
    let serving: Vec<String> = r
        .new_members
        .iter()
        .map(|m| match m.serving_after_ms {
            Some(ms) => format!("{} {:.2} s", m.machine, ms as f64 / 1000.0),
            None => format!("{} never", m.machine),
        })
        .collect();
    format!("serving after start: {}", serving.join(", "))
}

fn haproxy_backend(r: &Report) -> Option<String> {
    let b = r.haproxy_backend.as_ref()?;
    let mut line = format!(
        "{} calls to the members over {} new connections ({} calls reused one)",
        b.calls, b.connections_opened, b.connections_reused
    );
    if b.connections_reused == 0 && b.connections_opened > 1 {
        // Measured on HAProxy 2.6.12; see the README's HAProxy section.
        line.push_str("; HAProxy 2.6 never reuses a connection to a server added at run time");
    }
    Some(line)
}

/// One line per run, side by side.
fn print_comparison(reports: &[Report]) {
    let preload = reports.iter().any(|r| r.preload.is_some());
    let mut header = vec![
        "strategy".to_string(),
        "clients".into(),
        "failed".into(),
        "failed by kind".into(),
        "reads repeated".into(),
        "p50 ms".into(),
        "p99 ms".into(),
        "max ms".into(),
        "longest gap ms".into(),
        "rollout s".into(),
        "lost writes".into(),
    ];
    if preload {
        header.push("database MiB".into());
    }
    let mut rows = vec![header];
    for r in reports {
        let mut row = vec![
            label(r.strategy),
            label(r.client_mode),
            format!(
                "{} of {} ({:.3} %)",
                r.failed,
                r.attempted,
                failed_percent(r)
            ),
            by_kind(r),
            r.retried_reads.to_string(),
            format!("{:.1}", r.latency_ms_p50),
            format!("{:.1}", r.latency_ms_p99),
            format!("{:.1}", r.latency_ms_max),
            r.longest_no_success_ms.to_string(),
            format!("{:.1}", r.rollout_ms as f64 / 1000.0),
            r.lost_writes.to_string(),
        ];
        if preload {
            row.push(r.preload.as_ref().map_or("-".into(), |p| {
                format!("{:.0}", p.db_size_bytes as f64 / (1024.0 * 1024.0))
            }));
        }
        rows.push(row);
    }
    print!("{}", status::columns(&rows));
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn summarize(
    args: &BenchArgs,
    (strategy, client_mode): (Strategy, ClientMode),
    ops: &[Op],
    (t0, t1): (i64, i64),
    (acknowledged, lost): (usize, usize),
    rollout_ms: i64,
    steps: Vec<Step>,
) -> Report {
    let (failed_by_kind, error_samples) = failures_by_kind(ops);
    let lat = success_latencies_ms(ops);
    let failed = ops.iter().filter(|o| o.error.is_some()).count();
    Report {
        strategy,
        client_mode,
        from: args.rollout.from.to_string(),
        to: args.rollout.to.to_string(),
        replicas: args.rollout.replicas,
        hosts: args.rollout.hosts,
        rate: args.rate,
        clients: args.clients,
        attempted: ops.len(),
        writes_attempted: ops.iter().filter(|o| o.write).count(),
        succeeded: ops.len() - failed,
        failed,
        failed_writes: ops.iter().filter(|o| o.write && o.error.is_some()).count(),
        retried_reads: ops.iter().filter(|o| o.retried).count(),
        failed_by_kind,
        error_samples,
        failures: first_failures(ops, t0),
        latency_ms_p50: percentile(&lat, 0.50),
        latency_ms_p99: percentile(&lat, 0.99),
        latency_ms_max: lat.last().copied().unwrap_or(0.0),
        longest_no_success_ms: longest_no_success_ms(ops, t0, t1),
        acknowledged_writes: acknowledged,
        lost_writes: lost,
        rollout_ms,
        steps,
        new_members: Vec::new(),
        plot: None,
        tls: !args.rollout.insecure_plaintext,
        haproxy_backend: None,
        patterns: None,
        preload: None,
        goals: Vec::new(),
    }
}

/// How many operations failed of each kind, and the first message of each kind.
fn failures_by_kind(
    ops: &[Op],
) -> (
    BTreeMap<&'static str, usize>,
    BTreeMap<&'static str, String>,
) {
    let mut failed_by_kind = BTreeMap::new();
    let mut error_samples = BTreeMap::new();
    for (kind, msg) in ops.iter().filter_map(|o| o.error.as_ref()) {
        *failed_by_kind.entry(kind.as_str()).or_insert(0) += 1;
        error_samples
            .entry(kind.as_str())
            .or_insert_with(|| msg.clone());
    }
    (failed_by_kind, error_samples)
}

/// The latencies of the operations that succeeded, in milliseconds, lowest first.
fn success_latencies_ms(ops: &[Op]) -> Vec<f64> {
    let mut lat: Vec<f64> = ops
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.latency_us as f64 / 1000.0)
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    lat
}

/// The longest gap between successive successes, counting the run's edges (`t0`,
/// `t1`).
fn longest_no_success_ms(ops: &[Op], t0: i64, t1: i64) -> i64 {
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
    longest
}

/// The failed operations in the order they began, the first `MAX_FAILURES_LISTED`.
fn first_failures(ops: &[Op], t0: i64) -> Vec<Failure> {
    let mut failures: Vec<Failure> = ops
        .iter()
        .filter_map(|o| {
            let (kind, message) = o.error.as_ref()?;
            Some(Failure {
                at_ms: o.start_ms - t0,
                took_ms: o.latency_us as f64 / 1000.0,
                write: o.write,
                kind: kind.as_str(),
                message: message.clone(),
            })
        })
        .collect();
    failures.sort_by_key(|f| f.at_ms);
    failures.truncate(MAX_FAILURES_LISTED);
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::ClientMode;

    fn report(strategy: Strategy, replicas: u32) -> Report {
        Report {
            strategy,
            client_mode: ClientMode::Follow,
            from: "3.4.23".into(),
            to: "3.5.1".into(),
            replicas,
            hosts: 0,
            rate: 500,
            clients: 8,
            attempted: 4_000,
            writes_attempted: 2_000,
            succeeded: 3_998,
            failed: 2,
            failed_writes: 2,
            retried_reads: 0,
            failed_by_kind: BTreeMap::from([("other", 2)]),
            error_samples: BTreeMap::new(),
            failures: Vec::new(),
            latency_ms_p50: 2.0,
            latency_ms_p99: 30.0,
            latency_ms_max: 499.9,
            longest_no_success_ms: 80,
            acknowledged_writes: 1_998,
            lost_writes: 0,
            rollout_ms: 4_000,
            steps: Vec::new(),
            new_members: Vec::new(),
            plot: None,
            tls: true,
            haproxy_backend: None,
            patterns: None,
            preload: None,
            goals: Vec::new(),
        }
    }

    /// The goals hold at their bounds and are missed just past them; they apply to an
    /// in-place run of 3 members only.
    #[test]
    fn in_place_goals_at_their_bounds() {
        let r = report(Strategy::InPlace, 3);
        let g = goals(&r);
        assert_eq!(g.len(), 4);
        assert!(g.iter().all(|g| g.met), "{g:?}");
        assert!(g[2].measured.contains("0.050 % (other: 2)"), "{g:?}");
        let mut r = report(Strategy::InPlace, 3);
        r.rollout_ms = 4_001;
        r.latency_ms_max = 500.0;
        r.failed = 3;
        r.lost_writes = 1;
        assert!(goals(&r).iter().all(|g| !g.met), "{:?}", goals(&r));
        assert!(goals(&report(Strategy::Safe, 3)).is_empty());
        assert!(goals(&report(Strategy::InPlace, 5)).is_empty());
    }

    /// Each failure is set beside the last step before it.
    #[test]
    fn failures_are_placed_after_their_step() {
        use crate::rollout::StepKind;
        use quorum_core::ActionKind;
        let mut r = report(Strategy::InPlace, 3);
        r.steps = vec![Step {
            at_ms: 4_200,
            kind: StepKind::Action(ActionKind::MoveLeader),
            machine: Some("a-1".into()),
            message: "move leadership to a-1".into(),
            took_ms: Some(100),
        }];
        r.failures = [(100, "timed out"), (4_300, "no leader")]
            .into_iter()
            .map(|(at_ms, kind)| Failure {
                at_ms,
                took_ms: 3.0,
                write: true,
                kind,
                message: String::new(),
            })
            .collect();
        assert_eq!(
            failures_beside_steps(&r).unwrap(),
            "failures at: 0.10 s (write, timed out); 4.30 s (write, no leader; 100 ms after move-leader a-1)"
        );
        r.failed = FAILURES_PRINTED + 1;
        assert_eq!(failures_beside_steps(&r), None);
    }
}
