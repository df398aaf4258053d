//! `quorum bench rollout`'s table output: one table per run, then the runs side by side.

use crate::rollout::{label, ClientMode, Report};
use quorum_ops::status;

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
    let mut rows = vec![
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
        vec!["new members".into(), new_members(r)],
    ];
    if let Some(line) = haproxy_backend(r) {
        rows.push(vec!["haproxy backend".into(), line]);
    }
    print!("{}", status::columns(&rows));
    for (kind, msg) in &r.error_samples {
        println!("  first '{kind}' failure: {msg}");
    }
    if let Some(p) = &r.plot {
        println!("  picture: {}", p.display());
    }
}

fn workload(r: &Report) -> String {
    format!(
        "{} ops/s from {} clients, {}, {}; {} rollout {} -> {}",
        r.rate,
        r.clients,
        match r.client_mode {
            ClientMode::Follow => "following the published endpoints",
            ClientMode::Haproxy => "through HAProxy",
        },
        if r.tls { "mutual TLS" } else { "plain HTTP" },
        label(r.strategy),
        r.from,
        r.to
    )
}

fn operations(r: &Report) -> String {
    let failures = if r.failed_by_kind.is_empty() {
        "none".to_string()
    } else {
        r.failed_by_kind
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
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
    let mut rows = vec![vec![
        "strategy".to_string(),
        "clients".into(),
        "failed".into(),
        "reads repeated".into(),
        "p50 ms".into(),
        "p99 ms".into(),
        "max ms".into(),
        "longest gap ms".into(),
        "rollout s".into(),
        "lost writes".into(),
    ]];
    for r in reports {
        rows.push(vec![
            label(r.strategy),
            label(r.client_mode),
            format!("{} of {}", r.failed, r.attempted),
            r.retried_reads.to_string(),
            format!("{:.1}", r.latency_ms_p50),
            format!("{:.1}", r.latency_ms_p99),
            format!("{:.1}", r.latency_ms_max),
            r.longest_no_success_ms.to_string(),
            format!("{:.1}", r.rollout_ms as f64 / 1000.0),
            r.lost_writes.to_string(),
        ]);
    }
    print!("{}", status::columns(&rows));
}
