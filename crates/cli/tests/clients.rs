//! Clients that stick to what they were told (issue 28): a fixed list of addresses,
//! the member list re-read only when a request fails, back to the configured list when
//! every known address fails, and a 10 s lease with a key under it
//! (`quorum_bench::sticky`). Through default replacement rollouts and remediations of
//! lost members, such a client is never left without a live address and its lease
//! never expires, whether it was given the members' addresses at creation or the
//! control plane's client addresses (`quorum_core::reach`).
//!
//! Rounds: `QUORUM_CLIENT_ROUNDS` (default 2; each one rollout and one remediation).

mod common;
#[path = "repair/support.rs"]
mod support;

use common::workload::Creds;
use common::*;
use quorum_bench::sticky::{Sticky, StickyReport, LEASE_TTL_S};
use serde_json::Value;
use std::time::Instant;
use support::*;

const CP: &str = "cl";
/// The version the rollouts alternate with (`NEW` is the other).
const OTHER: &str = "3.5.0";
const ROLLOUT_TIMEOUT: &str = "5m";

fn rounds() -> usize {
    std::env::var("QUORUM_CLIENT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2)
}

fn urls(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .expect("a list")
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// A rollout by replacement (the default strategy) to `version`, waited for; what it
/// printed.
fn roll(env: &Env, version: &str) -> String {
    let out = env.run(&[
        "upgrade",
        CP,
        "--version",
        version,
        "--allow-downgrade",
        "--no-snapshot",
        "--wait",
        "--timeout",
        ROLLOUT_TIMEOUT,
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the rollout to {version} failed:\n{text}"
    );
    text
}

/// A follower loses its disk and is replaced (remediation).
fn lose_a_member(sc: &Scene) {
    let s = sc.status();
    let victim = follower(&s);
    let t0 = Instant::now();
    disk_loss(&sc.env, &victim, pid_of(&s, &victim));
    wait_repaired(sc, &victim, t0);
}

fn check(who: &str, r: &StickyReport) {
    eprintln!("{who}: {r:?}");
    assert_eq!(
        r.stranded, 0,
        "{who} was left without a live address: {r:?}"
    );
    assert_eq!(r.leases_expired, 0, "{who}'s lease expired: {r:?}");
    assert!(
        r.longest_keepalive_gap_ms < LEASE_TTL_S as u64 * 1_000,
        "{who}: {r:?}"
    );
    assert!(r.keepalives > 0, "{who} never kept its lease alive: {r:?}");
}

#[test]
fn a_client_with_a_fixed_list_is_never_stranded_by_rollouts_or_remediation() {
    let sc = Scene::new("clients-sticky", CP, NEW, &remediation(""), None);
    let s = sc.status();
    let direct = urls(&s["endpoints"]);
    let given = urls(&s["clientAddresses"]);
    assert_eq!(direct.len(), 3, "{s:#}");
    assert_eq!(given.len(), 4, "three members and a spare: {s:#}");
    assert!(direct.iter().all(|u| given.contains(u)), "{s:#}");
    let creds = Creds::fetch(&sc.env, CP, &sc.env.dir.path().join("creds"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (a, b) = {
        let _in = rt.enter();
        (
            Sticky::start(direct.clone(), creds.options(), "leader/direct".into()),
            Sticky::start(given.clone(), creds.options(), "leader/given".into()),
        )
    };
    let started = Instant::now();
    let mut version = NEW;
    for round in 0..rounds() {
        version = if version == NEW { OTHER } else { NEW };
        let said = roll(&sc.env, version);
        assert!(
            !said.contains("without a live address"),
            "no client of 3 members is at risk:\n{said}"
        );
        lose_a_member(&sc);
        eprintln!(
            "round {}: rolled to {version} and remediated, {:.1?} in; given {:?}",
            round + 1,
            started.elapsed(),
            a.report().known
        );
    }
    let (ra, rb) = rt.block_on(async { (a.stop().await, b.stop().await) });
    check("a client given the members' addresses at creation", &ra);
    check("a client given the client addresses", &rb);
    // Every member is on an address clients were given, after all of it.
    let after = sc.status();
    let now = urls(&after["endpoints"]);
    assert!(
        now.iter().all(|u| given.contains(u)),
        "{now:?} vs {given:?}"
    );
    assert_eq!(
        urls(&after["clientAddresses"]),
        given,
        "the list never moved"
    );
    sc.work.finish(&sc.env, CP);
}

/// A single member's client that knows only the member's address would be stranded by
/// its replacement: `upgrade` says so, and names the addresses to give clients.
#[test]
fn a_rollout_that_would_strand_a_client_says_so() {
    let mut env = Env::new("clients-warn");
    env.start_controller();
    env.create_and_wait(CP, 1, NEW);
    let s = env.status(CP);
    let given = urls(&s["clientAddresses"]);
    assert_eq!(given.len(), 2, "the member and a spare: {s:#}");
    let out = env.ok(&[
        "upgrade",
        CP,
        "--version",
        OTHER,
        "--allow-downgrade",
        "--dry-run",
    ]);
    let member = urls(&s["endpoints"]).join(",");
    assert!(
        out.contains(&format!("a client that knows only {member}"))
            && out.contains(&given.join(",")),
        "{out}"
    );
    let creds = env.ok(&[
        "credentials",
        CP,
        "--out",
        env.dir.path().join("c").to_str().unwrap(),
    ]);
    assert!(creds.contains(&given.join(",")), "{creds}");
}
