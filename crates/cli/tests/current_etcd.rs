//! Current etcd (issue 31): a control plane goes from 3.4.23 to 3.5.30 (the newest 3.5
//! `scripts/install.sh` installs), then down to 3.5.16 and back to 3.5.30, by
//! replacement in one test and in place in the other, each step under the client
//! patterns (watches resumed from their last revision, leases kept alive) and an
//! independent writer: 0 events missed, duplicated or out of order, 0 leases expired,
//! every acknowledged write read back at the end. Each step's time is printed
//! (`-- --nocapture`).

mod common;

use common::patterns::{measured, print_table, urls, ways};
use common::workload::{assert_acked, Creds, Workload};
use common::*;
use serde_json::Value;
use std::time::Instant;

const CURRENT: &str = "3.5.30";
const EARLIER: &str = "3.5.16";
const ROLLOUT_TIMEOUT: &str = "5m";

/// Every member runs `version`.
fn runs(s: &Value, version: &str) -> bool {
    let machines = s["machines"].as_array().cloned().unwrap_or_default();
    machines.len() == 3
        && machines
            .iter()
            .all(|m| m["runningVersion"] == version && m["healthy"] == true)
}

/// 3.4.23 -> 3.5.30 -> 3.5.16 -> 3.5.30 with `strategy`, measured.
fn the_road(test: &str, strategy: &str) {
    let mut env = Env::new(test);
    env.start_controller();
    env.create_and_wait("ce", 3, OLD);
    let s = env.status("ce");
    let creds = Creds::fetch(&env, "ce", &env.dir.path().join("creds"));
    let ways = ways(&s);
    // The writer follows the published endpoints, as a client of quorum's does.
    let writer = Workload::start(urls(&s["endpoints"]), creds.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    let mut took = Vec::new();
    for (op, to) in [
        ("3.4.23 -> 3.5.30", CURRENT),
        ("3.5.30 -> 3.5.16", EARLIER),
        ("3.5.16 -> 3.5.30", CURRENT),
    ] {
        rows.extend(measured(&rt, &creds, &ways, op, || {
            let t = Instant::now();
            let args = [
                "upgrade",
                "ce",
                "--version",
                to,
                "--strategy",
                strategy,
                "--allow-downgrade",
                "--wait",
                "--timeout",
                ROLLOUT_TIMEOUT,
            ];
            let out = env.run(&args);
            let said = printed(&out);
            assert!(out.status.success(), "{op} failed:\n{said}");
            took.push((op, t.elapsed()));
            let s = env.status("ce");
            assert!(runs(&s, to), "{op}: not every member runs {to}: {s:#}");
            writer.follow(urls(&s["endpoints"]));
        }));
    }
    let (acked, failures, attempts) = writer.finish();
    print_table(&rows);
    for (op, t) in &took {
        println!("{strategy}: {op}: {:.1}s", t.as_secs_f64());
    }
    println!(
        "{strategy}: {} of {attempts} writes acknowledged, failures {failures:?}",
        acked.len()
    );
    for r in &rows {
        let what = format!("{} ({})", r.op, r.way);
        assert!(r.figures.clean(), "{what}: {:?}", r.figures);
        assert!(r.figures.events > 0, "{what}: no event");
    }
    assert!(!acked.is_empty(), "the writer never wrote");
    assert_acked(&urls(&env.status("ce")["endpoints"]), &creds, &acked);
    let cv = env.status("ce")["clusterVersion"].clone();
    assert_eq!(cv, "3.5", "the cluster version after the road");
}

#[test]
fn from_3_4_to_current_3_5_and_a_patch_down_and_back_by_replacement() {
    the_road("current-replace", "Replace");
}

#[test]
fn from_3_4_to_current_3_5_and_a_patch_down_and_back_in_place() {
    the_road("current-inplace", "InPlace");
}
