//! Crash anywhere, resume correctly: for every failpoint of the controller, a real
//! rollout (3 members, etcd 3.4.23 -> 3.5.1, keys written before) crashes there, a fresh
//! controller takes over, and the rollout must complete with every key intact, quorum
//! never lost (watched from outside), and no member or machine orphaned.
//!
//! Needs the `failpoints` feature (scripts/test.sh builds with --all-features).
#![cfg(feature = "failpoints")]

mod common;

use common::*;
use quorum_controller::failpoints::{self, CRASH_EXIT_CODE};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TIMEOUT: &str = "180s";
/// Scenarios run at once (each has its own home, subnet and processes).
const PARALLEL: usize = 3;

/// A failpoint exercised by a teardown (`quorum delete` crashing there): forgetting the
/// control plane happens only there, and stopping a machine happens there for certain.
/// (In a rollout, etcd often shuts a removed member down by itself before quorum would
/// stop it, so a rollout reaches stop-machine only by timing.)
fn is_teardown_point(p: &str) -> bool {
    p.ends_with("forget-control-plane") || p.ends_with("stop-machine")
}

/// Creates 3 members at OLD with keys, records the upgrade with no controller running,
/// and starts a controller armed with `point`.
fn prepare(env: &mut Env, name: &str, point: &str, actions: &str) -> Vec<(String, String)> {
    env.start_controller();
    env.ok(&[
        "create",
        name,
        "--replicas",
        "3",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let keys = write_keys(&env.endpoints(name), "k/", 300);
    env.kill_controller();
    env.ok(&["upgrade", name, "--version", NEW]);
    env.start_controller_with(&[("FAILPOINTS", &format!("{point}={actions}"))]);
    keys
}

fn finish_and_check(env: &mut Env, name: &str, keys: &[(String, String)], watch: QuorumWatch) {
    env.ok(&[
        "upgrade",
        name,
        "--version",
        NEW,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let (samples, violations) = watch.finish();
    assert!(samples > 10, "the quorum watch took only {samples} samples");
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    let s = env.status(name);
    assert_eq!(machine_versions(&s), vec![NEW; 3]);
    assert_keys(&env.endpoints(name), "k/", keys);
    assert_no_orphans(env, name);
}

/// The rollout scenario for one failpoint; returns a line for the summary.
fn rollout_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "fp";
    let lose = point.starts_with("lose-answer-");
    let keys = prepare(
        &mut env,
        name,
        point,
        if lose { "1*return" } else { "return" },
    );
    let watch = QuorumWatch::start(&env, name);
    let t = Instant::now();
    if lose {
        // No crash: the controller sees a timeout for a change that took effect, and must
        // recognise it as done from its next observation.
        finish_and_check(&mut env, name, &keys, watch);
        let store = quorum_store::Store::open(&env.home).unwrap();
        let lost = store
            .events_after(name, 0, 10_000)
            .unwrap()
            .into_iter()
            .any(|e| !e.ok && e.message.contains("lost by failpoint"));
        assert!(lost, "{point}: the answer was never lost");
        return format!(
            "{point}: answer lost once, rollout completed in {:.1}s",
            t.elapsed().as_secs_f64()
        );
    }
    let code = env.controller_exit(Duration::from_secs(120));
    assert_eq!(
        code,
        Some(CRASH_EXIT_CODE),
        "{point}: the controller did not crash there (never reached?)"
    );
    let crashed_after = t.elapsed();
    env.start_controller();
    finish_and_check(&mut env, name, &keys, watch);
    format!(
        "{point}: crashed after {:.1}s, resumed and completed in {:.1}s",
        crashed_after.as_secs_f64(),
        (t.elapsed() - crashed_after).as_secs_f64()
    )
}

/// The teardown scenario: `quorum delete` itself crashes; running it again finishes.
fn teardown_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    env.start_controller();
    env.ok(&[
        "create",
        "td",
        "--replicas",
        "1",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    env.kill_controller();
    // With no live controller (its heartbeat gone stale), `delete` tears down itself.
    env.wait_controller_heartbeat_stale();
    let out = env
        .cmd(&["delete", "td"])
        .env("FAILPOINTS", format!("{point}=return"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(CRASH_EXIT_CODE),
        "{point}: delete did not crash there"
    );
    if point == "crash-after-forget-control-plane" {
        // It crashed after forgetting the control plane: it is gone, and saying so is right.
        let e = env.fails(&["delete", "td"]);
        assert!(e.contains("does not exist"), "{e}");
    } else {
        env.ok(&["delete", "td", "--wait", "--timeout", "60s"]);
    }
    let list = env.ok(&["list"]);
    assert!(list.contains("No control planes"), "{list}");
    let provider =
        quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir());
    assert!(
        provider.list().is_empty(),
        "machines left: {:?}",
        provider.list()
    );
    format!("{point}: delete crashed, rerun completed")
}

#[test]
fn every_failpoint_crashes_and_the_next_controller_finishes() {
    let points = failpoints::all();
    assert!(points.len() >= 20, "failpoints: {points:?}");
    let queue = Arc::new(Mutex::new(points.clone()));
    let results = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..PARALLEL)
        .map(|_| {
            let (queue, results) = (queue.clone(), results.clone());
            std::thread::spawn(move || loop {
                let Some(point) = queue.lock().unwrap().pop() else {
                    return;
                };
                let p = point.clone();
                let r = std::panic::catch_unwind(move || {
                    if is_teardown_point(&p) {
                        teardown_scenario(&p)
                    } else {
                        rollout_scenario(&p)
                    }
                });
                let line = r.map_err(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                });
                results.lock().unwrap().push((point, line));
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let results = results.lock().unwrap();
    let mut failed = Vec::new();
    for (point, r) in results.iter() {
        match r {
            Ok(line) => println!("ok   {line}"),
            Err(e) => {
                println!("FAIL {point}: {e}");
                failed.push(point.clone());
            }
        }
    }
    println!("{} failpoints, {} failed", results.len(), failed.len());
    assert_eq!(results.len(), points.len(), "every failpoint ran");
    assert!(failed.is_empty(), "failed: {failed:?}");
}

/// The origin bug report: the controller dies right after a member removal is
/// acknowledged, before anything else is recorded. The next controller must see the
/// removed member's machine as intended for deletion (not as an unhealthy member that
/// blocks everything) and continue.
#[test]
fn bug_report_crash_after_member_removal() {
    let mut env = Env::new("bug-report");
    let keys = prepare(&mut env, "br", "crash-after-remove-member", "return");
    let watch = QuorumWatch::start(&env, "br");
    assert_eq!(
        env.controller_exit(Duration::from_secs(120)),
        Some(CRASH_EXIT_CODE)
    );
    // No controller runs now. 4 machines, 3 members, and the removed one's machine is
    // marked for deletion: the next step is to stop or delete it, not to refuse.
    let s = env.status("br");
    let machines = s["machines"].as_array().unwrap();
    assert_eq!(machines.len(), 4, "{s:#}");
    let leaving: Vec<&serde_json::Value> =
        machines.iter().filter(|m| m["deleting"] == true).collect();
    assert_eq!(leaving.len(), 1, "{s:#}");
    assert_eq!(leaving[0]["role"], "none", "its member is gone: {s:#}");
    assert_eq!(
        s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == "Blocked")
            .unwrap()["status"],
        false
    );
    let next = s["nextActions"][0].as_str().unwrap();
    let gone = leaving[0]["name"].as_str().unwrap();
    assert!(
        next == format!("stop {gone}") || next == format!("delete {gone}"),
        "next: {next}\n{s:#}"
    );
    env.start_controller();
    finish_and_check(&mut env, "br", &keys, watch);
}
