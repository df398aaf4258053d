//! The faults a new user met in issue 29's walkthrough, each on real members through
//! the `quorum` binary: each test failed before its fix.

mod common;
#[path = "repair/support.rs"]
mod support;

use common::*;
use std::time::Duration;
use support::*;

/// Fault 5: after `kill -9` of a member, the history said only `start x-1`. The start
/// now says how the process had ended, and `--wait`'s lines name the machine of a
/// health event and never tick a problem (fault 8).
#[test]
fn a_killed_member_is_restarted_and_the_history_says_why_it_stopped() {
    let mut env = Env::new("walkthrough-kill");
    env.start_controller();
    env.create_and_wait("k", 1, NEW);
    let s = env.status("k");
    let pid = pid_of(&s, "k-1");
    signal_etcd(&env, "k-1", pid, libc::SIGKILL);
    let restarted = "start k-1 (its process had ended: killed by signal 9)";
    env.wait_status("k", "the restart", Duration::from_secs(60), |_| {
        history(&env.store().events_after("k", 0, 1_000).unwrap()).contains(restarted)
    });
    let events = env.store().events_after("k", 0, 1_000).unwrap();
    // The first start of a machine has nothing to say about an earlier process.
    let first = events
        .iter()
        .find(|e| e.kind.as_str() == "start-machine")
        .expect("a first start");
    assert!(!first.message.contains("had ended"), "{}", first.message);
}

/// The pids of the throwaway members (`--name=verify`, serving: not the restore tool)
/// whose data is under `dir`.
fn verify_members(dir: &std::path::Path) -> Vec<i32> {
    let want = format!("--data-dir={}", dir.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let args = cmdline(*pid);
            args.iter().any(|a| a == "--name=verify")
                && args.iter().any(|a| a.starts_with("--listen-client-urls="))
                && args.iter().any(|a| a.starts_with(&want))
        })
        .collect()
}

/// Fault 11: a snapshot's test restore starts a throwaway etcd, which outlived a
/// controller killed in the middle of the verification. It dies with it now.
#[test]
fn a_controller_killed_mid_verification_leaves_no_etcd_behind() {
    let mut env = Env::new("walkthrough-verify");
    env.start_controller();
    let manifest = scheduled_backup_manifest(&env, "v", "* * * * * *", 3);
    env.ok(&[
        "apply",
        "-f",
        manifest.to_str().unwrap(),
        "--wait",
        "--timeout",
        "120s",
    ]);
    let scratch = quorum_backup::scratch_dir(&env.home);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let caught = loop {
        let pids = verify_members(&scratch);
        if !pids.is_empty() {
            break pids;
        }
        assert!(std::time::Instant::now() < deadline, "no test restore seen");
        std::thread::sleep(Duration::from_millis(5));
    };
    env.kill_controller();
    let killed = std::time::Instant::now();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while caught
        .iter()
        .any(|pid| verify_members(&scratch).contains(pid))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the throwaway etcd {caught:?} outlived the controller"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("gone {:?} after the kill", killed.elapsed());
}

/// Writes `n` values of `bytes` each under `big/`.
fn write_big(cluster: &Cluster, n: usize, bytes: usize) {
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        for i in 0..n {
            c.put(format!("big/{i}"), vec![b'x'; bytes], None)
                .await
                .expect("put");
        }
    });
}

/// Fault 12: `recover --from-member` took any member named. One that holds less than
/// the newest verified snapshot (it was frozen while the others took more writes than
/// its socket buffers hold, and the others then died with their data) is now refused,
/// naming the better way back, unless `--accept-data-loss`.
#[test]
fn a_recovery_from_a_survivor_behind_the_snapshot_is_refused() {
    let mut env = Env::new("walkthrough-recover");
    env.start_controller();
    env.create_and_wait("r", 3, NEW);
    // No remediation meanwhile: the faults below are the test's.
    env.ok(&["pause", "r"]);
    let s = env.status("r");
    let behind = follower(&s);
    let pid = pid_of(&s, &behind);
    signal_etcd(&env, &behind, pid, libc::SIGSTOP);
    write_big(&env.endpoints("r"), 400, 64 * 1024);
    env.ok(&["snapshot", "r"]);
    for m in names(&s).into_iter().filter(|m| *m != behind) {
        disk_loss(&env, &m, pid_of(&s, &m));
    }
    signal_etcd(&env, &behind, pid, libc::SIGCONT);
    // Fault 1: the health says the data is gone (the advice, a rebuild rather than a
    // start that cannot help, is the decision table's: paused, it is not shown here).
    let lost: Vec<String> = names(&s).into_iter().filter(|m| *m != behind).collect();
    env.wait_status("r", "the losses seen", Duration::from_secs(60), |s| {
        lost.iter()
            .all(|m| row(s, m).is_some_and(|r| r["problems"].to_string().contains("lost its data")))
    });
    let text = env.ok(&["status", "r"]);
    assert!(text.contains("lost its data"), "{text}");
    let recover = ["recover", "r", "--from-member", behind.as_str(), "--yes"];
    let e = env.fails(&recover);
    assert!(
        e.contains("holds more")
            && e.contains("--from-snapshot")
            && e.contains("--accept-data-loss"),
        "{e}"
    );
    assert!(
        env.store()
            .get_control_plane("r")
            .unwrap()
            .rebuild
            .is_none(),
        "nothing recorded"
    );
    let said = env.ok(&[&recover[..], &["--accept-data-loss"]].concat());
    assert!(
        said.contains("warning:") && said.contains("holds more"),
        "{said}"
    );
    assert!(env
        .store()
        .get_control_plane("r")
        .unwrap()
        .rebuild
        .is_some());
}

/// Fault 15: with `QUORUM_STORE` exported, `quorum --home DIR ...` used the management
/// etcd and said nothing of it. `config view` says where each setting came from, and
/// an error that depends on the store names it.
#[test]
fn config_view_says_where_each_setting_came_from() {
    let env = Env::new("walkthrough-config");
    let other = env.dir.path().join("other-home");
    let view = env
        .cmd(&[
            "--home",
            other.to_str().unwrap(),
            "config",
            "view",
            "-o",
            "json",
        ])
        .env("QUORUM_STORE", "etcd://127.0.0.1:1/quorum")
        .output()
        .unwrap();
    let settings: serde_json::Value = serde_json::from_slice(&view.stdout).expect("json");
    let find = |name: &str| {
        settings
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name}: {settings:#}"))
    };
    assert_eq!(find("home")["from"], "from the flag --home");
    assert_eq!(find("store")["value"], "etcd://127.0.0.1:1/quorum");
    assert_eq!(find("store")["from"], "from the environment: QUORUM_STORE");
    assert!(!other.exists(), "config view opens nothing");
    // An error that depends on a store chosen by a flag or the environment says which
    // store it was, and where that came from.
    env.ok(&["create", "here", "--replicas", "1", "--version", NEW]);
    let out = env
        .cmd(&["pause", "elsewhere"])
        .env("QUORUM_STORE", "embedded")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("does not exist")
            && e.contains("note: the store is the state file in")
            && e.contains("(from the environment: QUORUM_STORE)"),
        "{e}"
    );
}

/// Fault 9: fenced directories piled up under the home, survived `delete`, and no
/// command listed or removed them.
#[test]
fn fenced_directories_are_listed_pruned_and_go_with_their_control_plane() {
    let mut env = Env::new("walkthrough-fenced");
    env.start_controller();
    env.create_and_wait("f", 1, NEW);
    let restore = |env: &Env| {
        env.ok(&["snapshot", "f", "--no-verify"]);
        env.ok(&[
            "restore",
            "f",
            "--from",
            "newest",
            "--yes",
            "--wait",
            "--timeout",
            "120s",
        ]);
    };
    restore(&env);
    let listed: serde_json::Value =
        serde_json::from_str(&env.ok(&["fenced", "f", "-o", "json"])).unwrap();
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed:#}");
    assert_eq!(rows[0]["controlPlane"], "f");
    assert_eq!(rows[0]["machine"], "f-1");
    assert!(rows[0]["sizeBytes"].as_u64().unwrap() > 0);
    assert!(env.ok(&["fenced"]).contains("f-1"));
    // --prune asks (no terminal here: refused, nothing removed), --yes removes.
    let e = env.fails(&["fenced", "f", "--prune"]);
    assert!(e.contains("--yes"), "{e}");
    assert_eq!(
        env.ok(&["fenced", "f", "-o", "json"])
            .matches("\"name\"")
            .count(),
        1
    );
    let out = env.ok(&["fenced", "f", "--prune", "--yes"]);
    assert!(out.contains("removed"), "{out}");
    assert!(env.ok(&["fenced", "f"]).contains("no fenced directories"));
    // Another restore fences again; delete says so and removes it with the rest.
    restore(&env);
    let said = env.ok(&["delete", "f", "--yes", "--wait", "--timeout", "120s"]);
    assert!(said.contains("its fenced directory"), "{said}");
    assert!(env.ok(&["fenced"]).contains("no fenced directories"));
}

/// Fault 2: after `kill -9` of the leader, the endpoints file said `none` for a moment:
/// a client following it, as the README recommends, had nothing to connect to. It
/// keeps the members it had until the decision names members again.
#[test]
fn the_endpoints_file_is_never_empty_after_a_leader_dies() {
    let mut env = Env::new("walkthrough-endpoints");
    env.start_controller();
    env.create_and_wait("e", 3, NEW);
    let file = env.home.join("endpoints").join("e.json");
    let read = || -> Vec<String> {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        doc["endpoints"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(read().len(), 3);
    let s = env.status("e");
    let leader = rows(&s)
        .iter()
        .find(|m| m["role"] == "leader")
        .and_then(|m| m["name"].as_str())
        .expect("a leader")
        .to_string();
    let after = env.store().last_event_id("e").unwrap();
    signal_etcd(&env, &leader, pid_of(&s, &leader), libc::SIGKILL);
    // Watched until the dead leader is restarted and every member serves again.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut samples = 0;
    loop {
        let now = read();
        assert!(
            !now.is_empty(),
            "the endpoints file was empty after {samples} samples"
        );
        samples += 1;
        let s = env.status("e");
        if s["converged"] == true && now.len() == 3 && samples > 50 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not back: {s:#}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let events = env.store().events_after("e", after, 1_000).unwrap();
    assert!(
        !events.iter().any(|e| e.message.contains("none yet")),
        "{}",
        history(&events)
    );
}

/// Fault 13: `get -o yaml` left out the defaults in force; it shows every field, in the
/// order people read it, and what it prints applies again unchanged.
#[test]
fn get_shows_the_defaults_in_force_and_applies_back_unchanged() {
    let env = Env::new("walkthrough-get");
    env.ok(&["create", "g", "--replicas", "1", "--version", NEW]);
    let yaml = env.ok(&["get", "g", "-o", "yaml"]);
    for field in [
        "unhealthyAfter: 30s",
        "provider: local",
        "keepFenced: 7d",
        "deletionProtection: false",
        "strategy: Replace",
        "schedule: off",
    ] {
        assert!(yaml.contains(field), "{field} missing:\n{yaml}");
    }
    let spec = yaml.split("spec:\n").nth(1).unwrap_or_default();
    assert!(spec.starts_with("  replicas: 1\n  version:"), "{yaml}");
    let file = env.dir.path().join("g.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let again = env.ok(&["apply", "-f", file.to_str().unwrap()]);
    assert!(again.contains("unchanged"), "{again}");
}

/// `quorum logs`: a member's etcd log, its last lines, every member's prefixed, and
/// `--follow` printing what the log gains.
#[test]
fn logs_print_a_members_log_and_follow_it() {
    let mut env = Env::new("walkthrough-logs");
    env.start_controller();
    env.create_and_wait("l", 1, NEW);
    let out = env.ok(&["logs", "l", "l-1", "--tail", "5"]);
    assert_eq!(out.lines().count(), 5, "{out}");
    assert!(
        out.lines().all(|l| l.starts_with('{')),
        "etcd's JSON lines: {out}"
    );
    let e = env.fails(&["logs", "l", "l-9"]);
    assert!(e.contains("its machines are l-1"), "{e}");
    let mut follow = env
        .cmd(&["logs", "l", "--follow", "--tail", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = support::provider(&env).log_path("l-1");
    let mut stdout = follow.stdout.take().unwrap();
    let (printed, tail_printed) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        while !seen.contains("a line the test appended") {
            match std::io::Read::read(&mut stdout, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
            let _ = printed.send(());
        }
        seen
    });
    // Appended once the follower has printed its tail: it prints what comes after.
    tail_printed
        .recv_timeout(Duration::from_secs(20))
        .expect("the follower printed its tail");
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, b"a line the test appended\n").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !reader.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "--follow never printed the new line"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(reader.join().unwrap().contains("a line the test appended"));
}

/// `quorum member restart` and `quorum member replace`: one member, on request, by the
/// rules of a rollout's step, while a client writes through the endpoints quorum
/// publishes and an outside watch checks the quorum: the restarted member is the same
/// machine in a new process, the replaced one is gone, every acknowledged write is
/// there, the quorum never dropped. Wrong requests are refused with what to do.
#[test]
fn a_member_is_restarted_or_replaced_on_request() {
    use common::workload::{assert_acked, Creds, Workload};
    let mut env = Env::new("walkthrough-member");
    env.start_controller();
    env.create_and_wait("mb", 3, NEW);
    let e = env.fails(&["member", "restart", "mb", "mb-9"]);
    assert!(
        e.contains("mb has no machine \"mb-9\"; its machines: mb-1, mb-2, mb-3"),
        "{e}"
    );
    let creds = Creds::fetch(&env, "mb", &env.dir.path().join("creds"));
    let work = Workload::start(env.endpoints("mb").endpoints, creds.clone());
    let watch = QuorumWatch::start(&env, "mb");

    let before = pid_of(&env.status("mb"), "mb-2");
    let out = env.ok(&[
        "member",
        "restart",
        "mb",
        "mb-2",
        "--wait",
        "--timeout",
        "120s",
    ]);
    assert!(out.contains("mb-2 will be restarted in place"), "{out}");
    let s = env.status("mb");
    assert_ne!(pid_of(&s, "mb-2"), before, "a new process");
    let names: Vec<String> = env
        .store()
        .machines("mb")
        .unwrap()
        .iter()
        .map(|m| m.name.clone())
        .collect();
    assert_eq!(names, ["mb-1", "mb-2", "mb-3"]);
    assert!(env
        .store()
        .machines("mb")
        .unwrap()
        .iter()
        .all(|m| m.requested.is_none()));
    work.follow(env.endpoints("mb").endpoints);

    let out = env.ok(&[
        "member",
        "replace",
        "mb",
        "mb-1",
        "--wait",
        "--timeout",
        "120s",
    ]);
    assert!(out.contains("mb-1 will be replaced"), "{out}");
    let names: Vec<String> = env
        .store()
        .machines("mb")
        .unwrap()
        .iter()
        .map(|m| m.name.clone())
        .collect();
    assert_eq!(names, ["mb-2", "mb-3", "mb-4"]);
    work.follow(env.endpoints("mb").endpoints);
    let (acked, _failures, _attempts) = work.finish();
    let (_checks, violations) = watch.finish();
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    assert_acked(&env.endpoints("mb").endpoints, &creds, &acked);
    let events = history(&env.store().events_after("mb", 0, 1_000).unwrap());
    assert!(events.contains("asked for by `quorum member`"), "{events}");
    assert!(
        events.contains("begin restarting mb-2 in place on etcd"),
        "{events}"
    );
    // A stop quorum asked for is no news in the start that follows it.
    assert!(
        events.contains("start mb-2 (a planned restart: quorum stopped it)"),
        "{events}"
    );
    assert!(!events.contains("killed by signal"), "{events}");

    // Asked twice: said, nothing written again; gone: refused.
    let e = env.fails(&["member", "replace", "mb", "mb-1"]);
    assert!(e.contains("its machines: mb-2, mb-3, mb-4"), "{e}");
    env.ok(&["pause", "mb"]);
    let out = env.ok(&["member", "replace", "mb", "mb-3"]);
    assert!(out.contains("mb is paused"), "{out}");
    let out = env.ok(&["member", "replace", "mb", "mb-3"]);
    assert!(out.contains("already asked for"), "{out}");
    // A change of mind: the request not begun is replaced by the new one.
    let out = env.ok(&["member", "restart", "mb", "mb-3"]);
    assert!(
        out.contains("instead of the replace asked for before"),
        "{out}"
    );
    let m3 = env.store().machines("mb").unwrap();
    let m3 = m3.iter().find(|m| m.name == "mb-3").unwrap();
    assert_eq!(m3.requested, Some(quorum_core::MachineRequest::Restart));
}
