//! The client patterns of `quorum_bench::patterns` (watches resumed from their last
//! revision, leases kept alive, a client following the addresses it was given) run
//! beside an operation, one set per way a client reaches the cluster.

use super::workload::Creds;
use quorum_bench::patterns::{PatternFigures, Patterns};
use serde_json::Value;
use std::time::Duration;

/// One way a client reaches the cluster: the addresses it was given.
pub struct Way {
    pub name: &'static str,
    pub urls: Vec<String>,
}

/// A list of addresses in a status (`endpoints`, `clientAddresses`), sorted.
pub fn urls(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .expect("a list")
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// The two ways a client of a control plane with status `s` is given: the members'
/// addresses at this moment, and the control plane's client addresses.
pub fn ways(s: &Value) -> [Way; 2] {
    [
        Way {
            name: "members' at creation",
            urls: urls(&s["endpoints"]),
        },
        Way {
            name: "client addresses",
            urls: urls(&s["clientAddresses"]),
        },
    ]
}

/// One operation's figures for one way.
pub struct Row {
    pub op: &'static str,
    pub way: &'static str,
    pub figures: PatternFigures,
}

/// Runs `op` beside the client patterns (`quorum_bench::patterns`) on each way.
pub fn measured(
    rt: &tokio::runtime::Runtime,
    creds: &Creds,
    ways: &[Way],
    op_name: &'static str,
    op: impl FnOnce(),
) -> Vec<Row> {
    let patterns: Vec<Patterns> = {
        let _in = rt.enter();
        ways.iter()
            .enumerate()
            .map(|(i, w)| Patterns::start(&w.urls, &creds.options(), &format!("{op_name}/{i}")))
            .collect()
    };
    rt.block_on(async { tokio::time::sleep(Duration::from_secs(1)).await });
    op();
    rt.block_on(async { tokio::time::sleep(Duration::from_secs(1)).await });
    let all = rt.block_on(futures::future::join_all(
        patterns.into_iter().map(Patterns::finish),
    ));
    all.into_iter()
        .zip(ways)
        .map(|(figures, w)| Row {
            op: op_name,
            way: w.name,
            figures,
        })
        .collect()
}

pub fn print_table(rows: &[Row]) {
    eprintln!(
        "| operation | addresses given | events | missed | duplicated | out of order | streams broken | longest resume ms | told compacted | leases expired | longest keep-alive gap ms | stranded |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let f = &r.figures;
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.op,
            r.way,
            f.events,
            f.missed,
            f.duplicated,
            f.out_of_order,
            f.streams_broken,
            f.longest_resume_ms,
            f.compacted,
            f.leases_expired,
            f.longest_keepalive_gap_ms,
            f.stranded
        );
    }
}
