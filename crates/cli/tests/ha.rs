//! Several controllers on one management etcd (`--store etcd://...`): one leads, the
//! others stand by; a killed leader is replaced and the rollout completes; a leader
//! stopped past its lease is fenced off when it resumes; and the origin bug report's
//! scenario (the lease lost right after a member removal) ends with the new leader
//! finishing the rollout. Real processes, real signals, a real 3-member management etcd.
//! The management etcd's faults during a rollout are in `ha/store_faults.rs`, during a
//! repair in `ha/repair_faults.rs`.

mod common;
#[path = "ha/repair_faults.rs"]
mod repair_faults;
#[path = "ha/secrets.rs"]
mod secrets;
#[path = "ha/shards.rs"]
mod shards;
#[path = "ha/store_faults.rs"]
mod store_faults;
#[path = "repair/support.rs"]
mod support;

use common::*;
use quorum_core::ActionKind;
use quorum_provider::management::ManagementEtcd;
use quorum_store::EventKind;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The lease these tests use: short, so takeovers are quick.
const TTL: &str = "2s";

/// A controller replica process; killed (SIGKILL, by PID) when dropped.
struct Replica {
    id: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Replica {
    fn start(env: &Env, id: &str, vars: &[(&str, &str)]) -> Replica {
        Replica::start_with(env, id, vars, &[])
    }

    /// `start`, with more arguments for `quorum controller`.
    fn start_with(env: &Env, id: &str, vars: &[(&str, &str)], args: &[&str]) -> Replica {
        let log = env.dir.path().join(format!("{id}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut all = vec![
            "controller",
            "--metrics-addr",
            "off",
            "--lease-ttl",
            TTL,
            "--identity",
            id,
        ];
        all.extend_from_slice(args);
        let mut cmd = env.cmd(&all);
        cmd.env_remove("FAILPOINTS").env("QUORUM_LOG", "info");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let child = cmd.stdout(Stdio::null()).stderr(file).spawn().unwrap();
        Replica {
            id: id.to_string(),
            child: Some(child),
            log,
        }
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the PID of a child this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for the process to exit by itself, at most `limit`; its exit code.
    fn exit_code_within(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().expect("wait on the replica") {
                self.child = None;
                return status.code();
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The log without backtrace frames, last 40 lines.
            let text = self.log_text();
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| {
                    !l.trim_start().starts_with("at ")
                        && !l.contains(": core::")
                        && !l.contains(": tokio::")
                        && !l.contains(": std::")
                })
                .collect();
            let from = lines.len().saturating_sub(40);
            eprintln!(
                "--- {} log (last 40 lines):\n{}",
                self.id,
                lines[from..].join("\n")
            );
        }
        self.kill9();
    }
}

fn ha_env(test: &str) -> (Env, ManagementEtcd) {
    env_on_management_etcd(test)
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn leader(env: &Env) -> Option<String> {
    env.store().leader().unwrap().map(|l| l.identity)
}

fn wait_leader(env: &Env, id: &str, timeout: Duration) {
    wait_for(&format!("{id} to lead"), timeout, || {
        leader(env).as_deref() == Some(id)
    });
}

/// Waits until the store's history of `cp` after `after` has a successful `kind`.
fn wait_event(env: &Env, cp: &str, after: i64, kind: ActionKind, timeout: Duration) {
    let store = env.store();
    wait_for(&format!("a {kind} event"), timeout, || {
        store
            .events_after(cp, after, 10_000)
            .unwrap()
            .iter()
            .any(|e| e.ok && e.kind == EventKind::Action(kind))
    });
}

fn create_and_fill(env: &Env, cp: &str) -> Vec<(String, String)> {
    env.ok(&[
        "create",
        cp,
        "--replicas",
        "3",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        "180s",
    ]);
    write_keys(&env.endpoints(cp), "k/", 200)
}

fn wait_upgraded(env: &Env, cp: &str) {
    env.wait_status(cp, "the rollout to finish", Duration::from_secs(300), |s| {
        s["converged"] == true && machine_versions(s) == vec![NEW; 3]
    });
}

#[test]
fn one_replica_leads_and_a_standby_finishes_the_rollout_after_a_kill_9() {
    let (env, _mgmt) = ha_env("ha-kill");
    let mut r1 = Replica::start(&env, "r1", &[]);
    wait_leader(&env, "r1", Duration::from_secs(30));
    let r2 = Replica::start(&env, "r2", &[]);
    let keys = create_and_fill(&env, "k");
    // Status names the leading replica.
    let s = env.status("k");
    assert_eq!(s["controllerLeader"]["identity"], "r1", "{s:#}");
    let table = env.ok(&["status", "k"]);
    assert!(table.contains("Leading") && table.contains("r1"), "{table}");
    assert!(r2.log_text().contains("standing by"), "{}", r2.log_text());

    let watch = QuorumWatch::start(&env, "k");
    let after = env.store().last_event_id("k").unwrap();
    env.ok(&["upgrade", "k", "--version", NEW]);
    // In the middle of the rollout: the first new member has joined as a learner.
    wait_event(
        &env,
        "k",
        after,
        ActionKind::AddLearner,
        Duration::from_secs(120),
    );
    r1.kill9();
    let killed = Instant::now();
    wait_leader(&env, "r2", Duration::from_secs(30));
    eprintln!(
        "r2 leads {} ms after r1 was killed",
        killed.elapsed().as_millis()
    );
    wait_upgraded(&env, "k");
    let (samples, violations) = watch.finish();
    assert!(samples > 10);
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    assert_keys(&env.endpoints("k"), "k/", &keys);
    assert_no_orphans(&env, "k");
    assert!(r2.log_text().contains("leading"), "{}", r2.log_text());
    // The history names who took each step: r1 before the kill, r2 after it. r2 is
    // stopped first, so the store and `quorum events` read the same history.
    let mut r2 = r2;
    r2.kill9();
    let h = history(&env, "k");
    let (by_r1, by_r2): (Vec<_>, Vec<_>) = h.iter().partition(|(by, _, _)| by == "r1");
    assert!(!by_r1.is_empty(), "{h:?}");
    assert!(by_r2.iter().all(|(by, _, _)| by == "r2"), "{h:?}");
    assert!(
        by_r2
            .iter()
            .any(|(_, step, _)| *step == Some(ActionKind::RemoveMember)),
        "{h:?}"
    );
    let table = env.ok(&["events", "k", "--last", "0"]);
    let steps_by = |id: &str| {
        table
            .lines()
            .filter(|l| l.split_whitespace().nth(2) == Some(id))
            .count()
    };
    assert_eq!(steps_by("r1"), by_r1.len(), "{table}");
    assert_eq!(steps_by("r2"), by_r2.len(), "{table}");
}

/// An in-place rollout on a management etcd with two replicas: mid-rollout (one member
/// stopped for its restart) the leading replica is killed -9 and so is the management
/// etcd's leader. The standby finishes the rollout on the surviving store members; no
/// membership change is made, each machine's step is begun and stopped once, and every
/// key is intact.
#[test]
fn an_in_place_rollout_survives_a_replica_and_the_management_leader_killed() {
    let (env, mgmt) = ha_env("ha-inplace");
    let mut r1 = Replica::start(&env, "r1", &[]);
    wait_leader(&env, "r1", Duration::from_secs(30));
    let r2 = Replica::start(&env, "r2", &[]);
    let cp = "i";
    env.ok(&[
        "create",
        cp,
        "--replicas",
        "3",
        "--version",
        OLD,
        "--strategy",
        "InPlace",
        "--wait",
        "--timeout",
        "180s",
    ]);
    let keys = write_keys(&env.endpoints(cp), "i/", 200);
    let ids = member_ids(&env, cp);
    let watch = QuorumWatch::start(&env, cp);
    let after = env.store().last_event_id(cp).unwrap();
    env.ok(&["upgrade", cp, "--version", NEW]);
    // Mid-step: the first member is stopped for its restart.
    wait_event(
        &env,
        cp,
        after,
        ActionKind::StopMachine,
        Duration::from_secs(120),
    );
    let leader = store_faults::management_leader(&env);
    r1.kill9();
    mgmt.kill(leader).unwrap();
    wait_leader(&env, "r2", Duration::from_secs(30));
    wait_upgraded(&env, cp);
    let (samples, violations) = watch.finish();
    assert!(samples > 10);
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    assert_keys(&env.endpoints(cp), "i/", &keys);
    assert_eq!(
        member_ids(&env, cp),
        ids,
        "an in-place rollout changed membership"
    );
    let events = env.store().events_after(cp, after, 100_000).unwrap();
    for kind in [ActionKind::AddLearner, ActionKind::RemoveMember] {
        assert!(
            !events
                .iter()
                .any(|e| e.ok && e.kind == EventKind::Action(kind)),
            "{kind} during an in-place rollout"
        );
    }
    for kind in [ActionKind::BeginInPlace, ActionKind::StopMachine] {
        let mut per_machine = std::collections::BTreeMap::<String, usize>::new();
        for e in events
            .iter()
            .filter(|e| e.ok && e.kind == EventKind::Action(kind))
        {
            *per_machine
                .entry(e.machine.clone().unwrap_or_default())
                .or_default() += 1;
        }
        assert_eq!(per_machine.len(), 3, "{kind}: {per_machine:?}");
        assert!(
            per_machine.values().all(|n| *n == 1),
            "{kind}: {per_machine:?}"
        );
    }
    assert_no_orphans(&env, cp);
    drop(r2);
}

/// The store's history of `cp`: (writer, the step done, at_ms) of every event kept; the
/// step is `None` for an event that records no step done (a refusal, the endpoints...).
fn history(env: &Env, cp: &str) -> Vec<(String, Option<ActionKind>, i64)> {
    env.store()
        .events_after(cp, 0, 10_000)
        .unwrap()
        .into_iter()
        .map(|e| {
            let done = e.kind.action().filter(|_| e.ok);
            (e.by.unwrap_or_default(), done, e.at_ms)
        })
        .collect()
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Lines of `text` that record a performed action.
fn performed(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.contains("performed=")).collect()
}

#[test]
fn a_leader_stopped_past_its_lease_is_fenced_off_when_it_resumes() {
    let (env, _mgmt) = ha_env("ha-stop");
    // r1 ignores its own lease deadline: only the store's fence can stop it.
    let r1 = Replica::start(
        &env,
        "r1",
        &[("FAILPOINTS", "ignore-lease-deadline=return")],
    );
    wait_leader(&env, "r1", Duration::from_secs(30));
    let r2 = Replica::start(&env, "r2", &[]);
    let keys = create_and_fill(&env, "s");
    let after = env.store().last_event_id("s").unwrap();
    env.ok(&["upgrade", "s", "--version", NEW]);
    wait_event(
        &env,
        "s",
        after,
        ActionKind::AddLearner,
        Duration::from_secs(120),
    );

    r1.signal(libc::SIGSTOP);
    wait_leader(&env, "r2", Duration::from_secs(30));
    // r2 makes progress while r1 is stopped.
    let taken = env.store().last_event_id("s").unwrap();
    wait_for("r2 to act", Duration::from_secs(60), || {
        performed(&r2.log_text()).len() >= 2
    });
    let r1_before = r1.log_text().len();
    let members_before = member_ids(&env, "s");
    let resumed_ms = wall_ms();
    r1.signal(libc::SIGCONT);
    wait_for("r1 to step down", Duration::from_secs(30), || {
        r1.log_text()[r1_before..].contains("stepping down")
    });
    let resumed = r1.log_text()[r1_before..].to_string();
    eprintln!("r1 after SIGCONT:\n{resumed}");
    // Its next store write was refused by the fence...
    assert!(resumed.contains("no longer leads"), "{resumed}");
    // ...and it performed nothing.
    assert!(performed(&resumed).is_empty(), "{resumed}");
    assert_eq!(leader(&env).as_deref(), Some("r2"));
    // The members r1 saw are still there or were changed by r2 only: every member
    // r2 has since is one of the store's machines (no orphan), checked at the end.
    assert!(!members_before.is_empty());
    assert!(env.store().last_event_id("s").unwrap() >= taken);
    wait_upgraded(&env, "s");
    assert_keys(&env.endpoints("s"), "k/", &keys);
    assert_no_orphans(&env, "s");
    // r1 stands by from then on.
    assert!(performed(&r1.log_text()[r1_before..]).is_empty());
    // The store's history agrees: r1 wrote nothing after it resumed (the fence refused
    // it), and the steps since the takeover are r2's.
    let h = history(&env, "s");
    let late: Vec<_> = h
        .iter()
        .filter(|(by, _, at)| by == "r1" && *at >= resumed_ms)
        .collect();
    assert!(late.is_empty(), "r1 wrote after resuming: {late:?}");
    assert!(
        h.iter()
            .any(|(by, step, _)| by == "r2" && *step == Some(ActionKind::RemoveMember)),
        "{h:?}"
    );
    assert!(r1.log_text()[r1_before..].contains("standing by"));
}

fn member_ids(env: &Env, cp: &str) -> Vec<u64> {
    rt().block_on(async {
        let mut c = env.endpoints(cp).connect().await.unwrap();
        let r = c.member_list().await.unwrap();
        r.members().iter().map(|m| m.id()).collect()
    })
}

#[test]
fn the_lease_lost_right_after_a_member_removal_and_the_new_leader_continues() {
    let (env, _mgmt) = ha_env("ha-bug");
    let r1 = Replica::start(
        &env,
        "r1",
        &[("FAILPOINTS", "lose-lease-after-remove-member=1*return")],
    );
    wait_leader(&env, "r1", Duration::from_secs(30));
    let first_token = env.store().leader().unwrap().unwrap().token;
    let r2 = Replica::start(&env, "r2", &[]);
    let keys = create_and_fill(&env, "b");
    let watch = QuorumWatch::start(&env, "b");
    env.ok(&["upgrade", "b", "--version", NEW]);
    wait_upgraded(&env, "b");
    let (_, violations) = watch.finish();
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    let log1 = r1.log_text();
    assert!(
        log1.contains("the leadership lease was revoked after remove-member"),
        "{log1}"
    );
    assert!(log1.contains("stepping down"), "{log1}");
    // A new term: r2 (r1 waits before it campaigns again, so r2 gets the first go).
    // On a loaded machine r2 may in turn miss a renewal of its 2 s lease and r1 lead
    // again: a legitimate second handover, after which r1 may act.
    let now = env.store().leader().unwrap().unwrap();
    assert!(now.token > first_token, "{now:?}");
    let log2 = r2.log_text();
    assert!(log2.contains("leading token="), "r2 never led:\n{log2}");
    let second_handover = now.identity == "r1";
    // r1 removed one member, then nothing more: r2 did the rest.
    let removed_by_r1 = performed(&log1)
        .iter()
        .filter(|l| l.contains("remove-member"))
        .count();
    assert_eq!(removed_by_r1, 1, "{log1}");
    // Everything r1 logged after the removal it performed (logged once it returned),
    // until it led again, if it did.
    let after_loss = log1
        .split_once("performed=\"remove-member\"")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let until_relead = after_loss
        .split_once("leading token=")
        .map_or(after_loss, |(before, _)| before);
    assert!(performed(until_relead).is_empty(), "{until_relead}");
    assert!(!performed(&log2).is_empty());
    // In the store's history the removal r1 performed is missing (its lease was gone
    // before it could record it); the steps after it are all r2's.
    let h = history(&env, "b");
    let first_by_r2 = h
        .iter()
        .position(|(by, _, _)| by == "r2")
        .expect("r2 acted");
    assert!(
        second_handover || h[first_by_r2..].iter().all(|(by, _, _)| by == "r2"),
        "{h:?}"
    );
    assert!(
        !h[..first_by_r2]
            .iter()
            .any(|(_, step, _)| *step == Some(ActionKind::RemoveMember)),
        "{h:?}"
    );
    assert_keys(&env.endpoints("b"), "k/", &keys);
    assert_no_orphans(&env, "b");
}
