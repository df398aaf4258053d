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

use common::patterns::{measured, print_table, urls, ways, Row, Way};
use common::workload::Creds;
use common::*;
use quorum_bench::patterns::Patterns;
use quorum_bench::sticky::{Sticky, StickyReport, LEASE_TTL_S};
use serde_json::Value;
use std::time::{Duration, Instant};
use support::*;

const CP: &str = "cl";
/// The version the rollouts alternate with (`NEW` is the other).
const OTHER: &str = "3.5.16";
const ROLLOUT_TIMEOUT: &str = "5m";

fn rounds() -> usize {
    count_from_env("QUORUM_CLIENT_ROUNDS", 2)
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
    let text = printed(&out);
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
    // One client on each address, so one of them uses the member replaced last (the
    // client the default rollout used to strand: every address it knew was gone before
    // its first failure).
    let start = |list: &[String], tag: &str| -> Vec<Sticky> {
        let _in = rt.enter();
        (0..list.len())
            .map(|i| {
                Sticky::start_at(
                    list.to_vec(),
                    i,
                    creds.options(),
                    format!("leader/{tag}/{i}"),
                )
            })
            .collect()
    };
    let (a, b) = (start(&direct, "direct"), start(&given, "given"));
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
            a[0].report().known
        );
    }
    let stop = |all: Vec<Sticky>| {
        rt.block_on(futures::future::join_all(all.into_iter().map(Sticky::stop)))
    };
    for (list, clients) in [(&direct, a), (&given, b)] {
        let what = if list == &given {
            "the client addresses"
        } else {
            "the members' addresses at creation"
        };
        for (r, first) in stop(clients).iter().zip(list.iter()) {
            check(&format!("a client given {what}, first on {first}"), r);
        }
    }
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

/// Watches and leases through every kind of operation quorum performs on a running
/// control plane: 0 events missed, duplicated or out of order, 0 leases expired, no
/// client stranded. The table goes to stderr (`-- --nocapture`).
#[test]
fn watches_and_leases_survive_every_operation() {
    let mut env = Env::new("clients-watch");
    env.start_controller();
    apply(&env, CP, NEW, &remediation(""), &CREATE_FLAGS);
    let s = env.status(CP);
    let creds = Creds::fetch(&env, CP, &env.dir.path().join("creds"));
    let ways = ways(&s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let wait = ["--wait", "--timeout", ROLLOUT_TIMEOUT];
    let mut rows = Vec::new();
    rows.extend(measured(&rt, &creds, &ways, "replacement rollout", || {
        roll(&env, OTHER);
    }));
    rows.extend(measured(&rt, &creds, &ways, "in-place rollout", || {
        let mut args = vec!["upgrade", CP, "--version", NEW, "--strategy", "InPlace"];
        args.extend(["--no-snapshot"]);
        args.extend(wait);
        env.ok(&args);
    }));
    rows.extend(measured(&rt, &creds, &ways, "scale 3 -> 5 -> 3", || {
        for n in ["5", "3"] {
            let mut args = vec!["scale", CP, "--replicas", n];
            args.extend(wait);
            env.ok(&args);
        }
    }));
    rows.extend(measured(
        &rt,
        &creds,
        &ways,
        "leader kill -9, restarted",
        || {
            let s = env.status(CP);
            let leader = s["leader"].as_str().expect("a leader").to_string();
            let pid = pid_of(&s, &leader);
            signal_etcd(&env, &leader, pid, libc::SIGKILL);
            env.wait_status(CP, "the leader restarted", Duration::from_secs(60), |s| {
                healthy_voters(s) == 3 && pid_of(s, &leader) != pid
            });
        },
    ));
    rows.extend(measured(&rt, &creds, &ways, "data lost, replaced", || {
        let s = env.status(CP);
        let victim = follower(&s);
        disk_loss(&env, &victim, pid_of(&s, &victim));
        env.wait_status(CP, "replaced", Duration::from_secs(120), |s| {
            repaired(s, &[&victim])
        });
    }));
    rows.extend(measured(&rt, &creds, &ways, "defragmentation", || {
        env.ok(&["defrag", CP]);
    }));
    let fresh = ca_rotation(&env, &rt, &creds, &ways, &mut rows);
    let (restored, said) = restore(&env, &rt, &fresh, &ways);
    print_table(&rows);
    print_table(&restored);
    for r in &rows {
        let what = format!("{} ({})", r.op, r.way);
        assert!(r.figures.clean(), "{what}: {:?}", r.figures);
        assert!(r.figures.events > 0, "{what}: no event");
    }
    // A restore ends every watch on purpose (its revisions are compacted away): each
    // watcher must be told so, never left to miss events silently; the writes after
    // the snapshot are lost by the restore itself, as it says before it asks. Where
    // no installed etcdutl can move revisions on (before etcd 3.5.10), a watch resumed
    // from the old cluster waits for revisions the new one reaches only later and
    // misses what comes before: `restore` says so to the person who confirms it.
    let bumps = !said.contains("cannot move revisions on");
    for r in &restored {
        let f = &r.figures;
        assert_eq!(
            (f.duplicated, f.out_of_order, f.behind),
            (0, 0, false),
            "{f:?}"
        );
        if bumps {
            assert!(f.compacted > 0, "{}: never told 'compacted': {f:?}", r.way);
        } else {
            assert!(said.contains("clients with watches must re-list"), "{said}");
        }
    }
}

fn phase(s: &Value) -> String {
    s["caRotation"]["phase"]
        .as_str()
        .unwrap_or("done")
        .to_string()
}

/// A CA rotation, in place: a client holding credentials from before is measured
/// through phases 1 and 2 (from phase 3 on its old-CA certificate is refused, by
/// design), one with credentials fetched in phase 2 through phases 2 and 3. Returns
/// the credentials that outlive the rotation.
fn ca_rotation(
    env: &Env,
    rt: &tokio::runtime::Runtime,
    creds: &Creds,
    ways: &[Way],
    rows: &mut Vec<Row>,
) -> Creds {
    let start = |c: &Creds, tag: &str| -> Vec<Patterns> {
        let _in = rt.enter();
        ways.iter()
            .enumerate()
            .map(|(i, w)| Patterns::start(&w.urls, &c.options(), &format!("{tag}/{i}")))
            .collect()
    };
    // Every way at once: the clients with credentials from before must stop before
    // the first member restarts in phase 3, which refuses them by design.
    let finish = |ps: Vec<Patterns>, op: &'static str, rows: &mut Vec<Row>| {
        let all = rt.block_on(futures::future::join_all(
            ps.into_iter().map(Patterns::finish),
        ));
        for (figures, w) in all.into_iter().zip(ways) {
            rows.push(Row {
                op,
                way: w.name,
                figures,
            });
        }
    };
    let before = start(creds, "rotation-before");
    env.ok(&["rotate-ca", CP, "--yes"]);
    let limit = Duration::from_secs(180);
    env.wait_status(CP, "phase 2", limit, |s| phase(s) != "trust");
    let fresh = Creds::fetch(env, CP, &env.dir.path().join("creds-rotated"));
    let after = start(&fresh, "rotation-after");
    env.wait_status(CP, "phase 3", limit, |s| {
        matches!(phase(s).as_str(), "drop" | "done")
    });
    finish(
        before,
        "CA rotation, phases 1-2 (credentials from before)",
        rows,
    );
    env.wait_status(CP, "rotated", limit, |s| {
        phase(s) == "done" && s["converged"] == true
    });
    finish(
        after,
        "CA rotation, phases 2-3 (credentials from phase 2)",
        rows,
    );
    fresh
}

/// A snapshot, then a restore from it under the patterns; what `restore` said.
fn restore(
    env: &Env,
    rt: &tokio::runtime::Runtime,
    creds: &Creds,
    ways: &[Way],
) -> (Vec<Row>, String) {
    env.ok(&["snapshot", CP]);
    let mut said = String::new();
    let rows = measured(rt, creds, ways, "restore", || {
        let out = env.run(&[
            "restore",
            CP,
            "--from",
            "newest",
            "--yes",
            "--wait",
            "--timeout",
            "5m",
        ]);
        said = printed(&out);
        assert!(out.status.success(), "restore failed:\n{said}");
    });
    (rows, said)
}
