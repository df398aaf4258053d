//! End to end on real etcd processes: the `quorum` binary, a controller process, real
//! members on loopback. Every test has its own home and subnet and kills what it started.

mod common;

use common::*;
use quorum_core::ActionKind;
use quorum_store::EventKind;
use std::time::Duration;

const TIMEOUT: &str = "180s";

#[test]
fn rollout_3_4_23_to_3_5_1_keeps_every_key() {
    let mut env = Env::new("rollout");
    env.start_controller();
    env.ok(&[
        "create",
        "r",
        "--replicas",
        "3",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let keys = write_keys(&env.endpoints("r"), "k/", 2000);
    let out = env.ok(&[
        "upgrade",
        "r",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    assert!(
        out.contains("add r-4 as a learner"),
        "progress lines:\n{out}"
    );
    let s = env.wait_status("r", "cluster version 3.5", Duration::from_secs(30), |s| {
        s["clusterVersion"] == "3.5"
    });
    assert_eq!(machine_versions(&s), vec![NEW; 3]);
    assert_eq!(s["endpoints"].as_array().unwrap().len(), 3);
    assert_keys(&env.endpoints("r"), "k/", &keys);
    // Every old member was replaced learner-first, and leadership was moved off before
    // the leader's removal.
    let kinds = env.event_kinds("r");
    assert_eq!(kinds.iter().filter(|k| *k == "add-learner").count(), 3);
    assert_eq!(kinds.iter().filter(|k| *k == "promote").count(), 3);
    assert_eq!(kinds.iter().filter(|k| *k == "remove-member").count(), 3);
    assert!(kinds.iter().any(|k| k == "move-leader"), "{kinds:?}");
    // Each member is removed only after the drain: its machine left the endpoints first.
    let store = quorum_store::Store::open(&env.home).unwrap();
    let events = store.events_after("r", 0, 10_000).unwrap();
    let step = |k| EventKind::Action(k);
    for rm in events
        .iter()
        .filter(|e| e.ok && e.kind == step(ActionKind::RemoveMember))
    {
        let marked = events
            .iter()
            .find(|e| e.ok && e.kind == step(ActionKind::MarkDeleting) && e.machine == rm.machine)
            .expect("marked before removed");
        let drained = rm.at_ms - marked.at_ms;
        assert!(
            drained >= quorum_controller::DRAIN_MS as i64,
            "{:?} removed {drained} ms after it was marked",
            rm.machine
        );
    }
    // `quorum events` shows the same history, each step with the controller that took it.
    let out = env.ok(&["events", "r", "--last", "0", "-o", "json"]);
    let shown: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    // The controller may have recorded more since `events` was read: a longer history
    // that starts with the same steps.
    assert!(shown.len() >= events.len(), "{out}");
    for (s, e) in shown.iter().zip(&events) {
        assert_eq!(s["id"], e.id, "{out}");
    }
    assert!(
        shown
            .iter()
            .all(|e| e["by"].as_str().is_some_and(|b| !b.is_empty())),
        "{out}"
    );
    let table = env.ok(&["events", "r", "--last", "3"]);
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(table.starts_with("TIME (UTC)"), "{table}");
    // `status` shows the newest of them.
    // (The controller may record one more in between: newer is fine, older is not.)
    let newest_before = store.last_event_id("r").unwrap();
    let last = &env.status("r")["lastEvent"];
    assert!(last["id"].as_i64().unwrap() >= newest_before, "{last:#}");
    assert_eq!(last["by"], shown[0]["by"], "{last:#}");
    let table = env.ok(&["status", "r"]);
    assert!(
        table.contains("Last step") && table.contains("quorum events r"),
        "{table}"
    );
    // Going back below the cluster version is refused and changes nothing.
    let err = env.fails(&["upgrade", "r", "--version", OLD]);
    assert!(
        err.contains("older than the running cluster version"),
        "{err}"
    );
    assert_eq!(env.status("r")["spec"]["version"], NEW);
    env.ok(&["delete", "r", "--yes", "--wait", "--timeout", "60s"]);
    // The history outlives the control plane. Its last step is recorded once the record
    // is gone, so it may land just after `delete --wait` returns: wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = env.ok(&["events", "r", "--last", "3"]);
        if out.contains("forget") || std::time::Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        out.contains("forget") && out.contains("r no longer exists"),
        "{out}"
    );
}

#[test]
fn upgrade_with_max_surge_0_removes_first() {
    let mut env = Env::new("surge0");
    env.start_controller();
    env.ok(&[
        "create",
        "s",
        "--replicas",
        "3",
        "--version",
        OLD,
        "--max-surge",
        "0",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let keys = write_keys(&env.endpoints("s"), "s/", 500);
    env.ok(&[
        "upgrade",
        "s",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let s = env.status("s");
    assert_eq!(machine_versions(&s), vec![NEW; 3]);
    assert_keys(&env.endpoints("s"), "s/", &keys);
    // Remove first: a machine is marked for deletion before any new one is allocated,
    // so there are never more than 3 machines.
    let kinds = env.event_kinds("s");
    let first_mark = kinds.iter().position(|k| k == "mark-deleting").unwrap();
    let first_new = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| *k == "allocate-machine")
        .map(|(i, _)| i)
        .nth(3)
        .unwrap();
    assert!(first_mark < first_new, "{kinds:?}");
}

#[test]
fn scale_3_to_5_to_3_keeps_data() {
    let mut env = Env::new("scale35");
    env.start_controller();
    env.ok(&[
        "create",
        "c",
        "--replicas",
        "3",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let keys = write_keys(&env.endpoints("c"), "c/", 500);
    env.ok(&[
        "scale",
        "c",
        "--replicas",
        "5",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let s = env.status("c");
    assert_eq!(s["machines"].as_array().unwrap().len(), 5);
    assert_eq!(s["endpoints"].as_array().unwrap().len(), 5);
    assert_keys(&env.endpoints("c"), "c/", &keys);
    env.ok(&[
        "scale",
        "c",
        "--replicas",
        "3",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let s = env.status("c");
    assert_eq!(s["machines"].as_array().unwrap().len(), 3);
    // The members furthest down the client addresses went first (`core::reach`): the
    // three left hold the first three, so clients given the list at creation keep
    // every member they knew.
    let given: Vec<&str> = s["clientAddresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    let mut kept: Vec<String> = s["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    kept.sort();
    let mut first: Vec<String> = given[..3].iter().map(|u| u.to_string()).collect();
    first.sort();
    assert_eq!(kept, first, "{s:#}");
    assert_keys(&env.endpoints("c"), "c/", &keys);
}

#[test]
fn scale_1_to_3() {
    let mut env = Env::new("scale13");
    env.start_controller();
    env.ok(&[
        "create",
        "one",
        "--replicas",
        "1",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let keys = write_keys(&env.endpoints("one"), "o/", 300);
    env.ok(&[
        "scale",
        "one",
        "--replicas",
        "3",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let s = env.status("one");
    assert_eq!(s["endpoints"].as_array().unwrap().len(), 3);
    let roles: Vec<&str> = s["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles.iter().filter(|r| **r == "leader").count(),
        1,
        "{roles:?}"
    );
    assert_eq!(
        roles.iter().filter(|r| **r == "follower").count(),
        2,
        "{roles:?}"
    );
    assert_keys(&env.endpoints("one"), "o/", &keys);
    // The controller publishes the endpoints for clients to follow, and its metrics say
    // the quorum margin (3 healthy voters, quorum 2: margin 1).
    let file = std::fs::read_to_string(env.home.join("endpoints").join("one.json")).unwrap();
    let published: serde_json::Value = serde_json::from_str(&file).unwrap();
    assert_eq!(published["endpoints"], s["endpoints"], "{file}");
    let metrics = env.metrics();
    assert!(
        metrics.contains("quorum_quorum_margin{control_plane=\"one\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("quorum_membership_operations_total{kind=\"promote\",outcome=\"ok\"} 2"),
        "{metrics}"
    );
    // With no controller running, `list` and `status` derive the state from the same
    // decision (walkthrough item 5: `list` showed the stopped controller's last
    // published "idle" while `status` said "scaling up").
    env.kill_controller();
    env.ok(&["scale", "one", "--replicas", "5"]);
    let operation = env.status("one")["operation"].as_str().unwrap().to_string();
    assert_eq!(operation, "scaling up");
    let list = env.ok(&["list"]);
    let row = list
        .lines()
        .find(|l| l.starts_with("one "))
        .unwrap_or_else(|| panic!("{list}"));
    let state = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .nth(5);
    assert_eq!(state, Some("scaling up"), "{list}");
}

#[test]
fn a_controller_killed_mid_rollout_is_resumed_by_the_next() {
    let mut env = Env::new("crash");
    env.start_controller();
    env.ok(&[
        "create",
        "x",
        "--replicas",
        "3",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let keys = write_keys(&env.endpoints("x"), "x/", 500);
    env.ok(&["upgrade", "x", "--version", NEW]);
    // Crash (SIGKILL) the controller as soon as the first member removal is done.
    env.wait_status("x", "a first removal", Duration::from_secs(120), |_| {
        env.event_kinds("x").iter().any(|k| k == "remove-member")
    });
    env.kill_controller();
    env.start_controller();
    env.ok(&["status", "x"]);
    let out = env.ok(&[
        "upgrade",
        "x",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    assert!(out.contains("unchanged"), "{out}");
    let s = env.status("x");
    assert_eq!(machine_versions(&s), vec![NEW; 3]);
    assert_keys(&env.endpoints("x"), "x/", &keys);
}

/// `quorum bench rollout` in its short form: a few seconds of a light workload.
fn short_bench<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "bench",
        "rollout",
        "--rate",
        "100",
        "--clients",
        "4",
        "--settle",
        "1s",
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    args
}

/// The client-disruption benchmark in its short form: quorum's rollout under a paced
/// workload, once with clients following the published endpoints and once with clients
/// that only know a real HAProxy whose backend the controller keeps in step. Every
/// acknowledged write must be read back, and the load balancer must follow the order
/// quorum promises: a member enters the backend after its promotion, and leaves it
/// (maintenance) before its member is removed.
#[test]
fn bench_rollout_short_form_loses_no_write() {
    let env = Env::new("bench");
    let plots = env.dir.path().join("plots");
    let out = env.ok(&short_bench(&[
        "--client-mode",
        "follow,haproxy",
        "--plot",
        plots.to_str().unwrap(),
    ]));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("the report is JSON on stdout");
    let runs = doc["runs"].as_array().expect("a list of runs");
    assert_eq!(runs.len(), 2, "{doc:#}");
    for r in runs {
        assert_eq!(r["strategy"], "safe", "{r:#}");
        assert_eq!(r["lostWrites"], 0, "{r:#}");
        assert!(r["acknowledgedWrites"].as_u64().unwrap() > 100, "{r:#}");
        assert!(r["attempted"].as_u64().unwrap() > 500, "{r:#}");
        assert!(r["latencyMsMax"].as_f64().unwrap() > 0.0);
        let steps: Vec<(&str, &str)> = r["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["kind"].as_str().unwrap(), s["message"].as_str().unwrap()))
            .collect();
        let count = |kind: &str| steps.iter().filter(|(k, _)| *k == kind).count();
        assert_eq!(count("add-learner"), 3, "{steps:?}");
        let svg = std::fs::read_to_string(r["plot"].as_str().unwrap()).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("promote"), "{svg}");
        assert_eq!(r["tls"], true, "{r:#}");
        if r["clientMode"] == "haproxy" {
            assert_eq!(count("lb-add"), 3, "{steps:?}");
            // HAProxy's own count of the calls it passed on: at least every call a
            // client saw succeed, each over a new or a reused connection.
            let b = &r["haproxyBackend"];
            let calls = b["calls"].as_u64().expect("haproxyBackend.calls");
            assert!(calls >= r["succeeded"].as_u64().unwrap(), "{b:#}");
            let (opened, reused) = (
                b["connectionsOpened"].as_u64().unwrap(),
                b["connectionsReused"].as_u64().unwrap(),
            );
            assert!(opened > 0 && opened + reused >= calls, "{b:#}");
            // For each removed machine: drained from HAProxy before its member goes.
            for (i, (kind, msg)) in steps.iter().enumerate() {
                if *kind != "remove-member" {
                    continue;
                }
                let machine = msg
                    .split_whitespace()
                    .find(|w| w.starts_with("bench-"))
                    .unwrap()
                    .trim_matches(|c: char| !c.is_ascii_alphanumeric());
                let drained = steps[..i]
                    .iter()
                    .any(|(k, m)| *k == "lb-drain" && m.contains(machine));
                assert!(
                    drained,
                    "{machine} removed before HAProxy drained it: {steps:?}"
                );
            }
        }
    }
}

/// The naive baseline runs too (it exists only inside the benchmark): voters added
/// directly, members removed without a leadership move, processes killed. Even so,
/// etcd loses no acknowledged write.
#[test]
fn bench_naive_baseline_runs() {
    let env = Env::new("bench-naive");
    let out = env.ok(&short_bench(&["--strategy", "naive"]));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("the report is JSON on stdout");
    let r = &doc["runs"][0];
    assert_eq!(r["strategy"], "naive", "{r:#}");
    assert!(r.get("haproxyBackend").is_none(), "{r:#}");
    assert_eq!(r["lostWrites"], 0, "{r:#}");
    let kinds: Vec<&str> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    for kind in ["add-voter", "remove-member", "kill-machine"] {
        assert_eq!(kinds.iter().filter(|k| **k == kind).count(), 3, "{kinds:?}");
    }
    assert!(!kinds.contains(&"add-learner") && !kinds.contains(&"move-leader"));
}

/// quorum's in-place rollout under the same workload, with a small preloaded database:
/// each member restarted once on the new binary (drained, stopped, started, back in
/// service), no membership change, every acknowledged write and preloaded key there
/// after it, and each restarted member's time to serve measured from its own start.
#[test]
fn bench_in_place_restarts_each_member_once() {
    let env = Env::new("bench-in-place");
    let out = env.ok(&short_bench(&[
        "--strategy",
        "in-place",
        "--preload-mib",
        "2",
    ]));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("the report is JSON on stdout");
    let r = &doc["runs"][0];
    assert_eq!(r["strategy"], "in-place", "{r:#}");
    assert_eq!(r["lostWrites"], 0, "{r:#}");
    assert!(r["acknowledgedWrites"].as_u64().unwrap() > 100, "{r:#}");
    let kinds: Vec<&str> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "begin-in-place",
        "stop-machine",
        "start-machine",
        "end-in-place",
    ] {
        assert_eq!(kinds.iter().filter(|k| **k == kind).count(), 3, "{kinds:?}");
    }
    for kind in ["add-learner", "remove-member", "delete-machine"] {
        assert!(!kinds.contains(&kind), "{kinds:?}");
    }
    let restarted = r["newMembers"].as_array().unwrap();
    assert_eq!(restarted.len(), 3, "{r:#}");
    for m in restarted {
        let after = m["servingAfterMs"]
            .as_i64()
            .expect("each restarted member serves");
        assert!((0..60_000).contains(&after), "{m:#}");
    }
    let p = &r["preload"];
    assert_eq!(p["mib"], 2, "{p:#}");
    assert!(p["keys"].as_u64().unwrap() > 0, "{p:#}");
    assert_eq!(p["keysAfter"], p["keys"], "{p:#}");
    assert!(
        p["dbSizeBytes"].as_u64().unwrap() >= 2 * 1024 * 1024,
        "{p:#}"
    );
    // The issue's goals are for a rollout without preloaded data.
    assert!(r.get("goals").is_none(), "{r:#}");
}

/// A controller process this test started; killed (SIGKILL, by PID) when dropped.
struct Spawned(std::process::Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A second `quorum controller` on the same home stands by instead of acting twice on
/// every step, and takes over when the first one dies (the kernel releases its lock).
#[test]
fn a_second_controller_on_the_same_home_stands_by_until_the_first_dies() {
    let mut env = Env::new("two-ctl");
    env.start_controller();
    env.ok(&[
        "create",
        "t",
        "--replicas",
        "1",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let log = env.dir.path().join("second.log");
    let second = env
        .cmd(&[
            "controller",
            "--metrics-addr",
            "off",
            "--identity",
            "second",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _second = Spawned(second);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !log_text().contains("standing by") {
        assert!(std::time::Instant::now() < deadline, "{}", log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let store = quorum_store::Store::open(&env.home).unwrap();
    let first = store.events_after("t", 0, 10_000).unwrap();
    assert!(!first.is_empty());
    assert!(
        first.iter().all(|e| e.by.as_deref() != Some("second")),
        "the second controller acted while the first one ran: {first:?}"
    );
    env.kill_controller();
    // Marked once the first controller is dead: until then it may still record a step
    // of its own (a converged event after a slow observation, on a loaded machine).
    let before_kill = store.last_event_id("t").unwrap();
    env.ok(&[
        "scale",
        "t",
        "--replicas",
        "3",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let after = store.events_after("t", before_kill, 10_000).unwrap();
    assert!(
        after
            .iter()
            .any(|e| e.kind == EventKind::Action(ActionKind::AddLearner)),
        "{after:?}"
    );
    assert!(
        after.iter().all(|e| e.by.as_deref() == Some("second")),
        "{after:?}"
    );
    // The history says so (issue 29 fault 17: only the BY column changed).
    assert!(
        after.iter().any(|e| e.kind == EventKind::Takeover
            && e.message.starts_with("controller second took over from ")),
        "{after:?}"
    );
    // Every machine was started once: no step was taken twice.
    let all = store.events_after("t", 0, 10_000).unwrap();
    for m in ["t-1", "t-2", "t-3"] {
        let starts = all
            .iter()
            .filter(|e| {
                e.ok && e.kind == EventKind::Action(ActionKind::StartMachine)
                    && e.machine.as_deref() == Some(m)
            })
            .count();
        assert_eq!(starts, 1, "{m}: {all:?}");
    }
    assert!(
        log_text().contains("leading") || log_text().contains("performed="),
        "{}",
        log_text()
    );
}
