//! Repair on real etcd processes: a member fails on its own (disk loss, a hang, another
//! cluster's data, a full database, two of three down, a slot that keeps failing, a
//! failure during a rollout) and quorum repairs it, or says why it does not.
//!
//! Every scenario runs a 3-member control plane with an independent client workload
//! and a majority watch (`repair/support.rs`); faults are done to the machines'
//! processes by PID (from `status -o json`), never by name.

mod common;
#[path = "repair/support.rs"]
mod support;

use common::*;
use quorum_store::Event;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;

// ---------------------------------------------------------------------------------
// (a) disk loss

/// One member's host loses its disk; returns the time from the fault to three healthy
/// voters again.
fn scenario_disk_loss(run: &str) -> Duration {
    let sc = Scene::new(&format!("repair-a-{run}"), "a", NEW, &remediation(""), None);
    let s = sc.status();
    let victim = follower(&s);
    let pid = pid_of(&s, &victim);
    let before = last_event_id(&sc.env, &sc.cp);
    let t0 = Instant::now();
    disk_loss(&sc.env, &victim, pid);
    // The provider's record of the machine's starts, read while the machine exists.
    let starts_file = provider(&sc.env).machine_dir(&victim).join("starts");
    let most_starts = std::cell::Cell::new(0usize);
    let bound = Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S);
    sc.wait(
        &format!("{victim} replaced, 3 healthy voters"),
        bound + Duration::from_secs(60),
        |s| {
            if let Ok(t) = std::fs::read_to_string(&starts_file) {
                most_starts.set(most_starts.get().max(t.lines().count()));
            }
            repaired(s, &[&victim])
        },
    );
    let took = t0.elapsed();
    assert!(took <= bound, "repaired after {took:?}, over {bound:?}");
    // Writes went on while one member was gone, and after.
    let during = sc.work.acked_between(t0, Instant::now());
    assert!(during > 0, "no write acknowledged while {victim} was gone");
    sc.work.wait_more_acked(20, Duration::from_secs(30));
    sc.wait_converged();
    let events = events_after(&sc.env, &sc.cp, before);
    eprintln!(
        "disk loss of {victim}: 3 healthy voters again after {:.1}s\n{}",
        took.as_secs_f64(),
        history(&events)
    );
    assert_replaced_in_order(&events, &victim);
    // No crash loop: the machine whose data is gone was not started again (at most a
    // start in flight when its disk went).
    let starts = starts_of(&events, &victim);
    assert!(
        starts <= 2,
        "{victim} started {starts} times:\n{}",
        history(&events)
    );
    // The bootstrap start, plus those.
    assert!(
        most_starts.get() <= 1 + 2,
        "{victim}'s starts file: {} starts",
        most_starts.get()
    );
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    work.finish(&env, &cp);
    assert_no_orphans(&env, &cp);
    took
}

#[test]
fn disk_loss_is_replaced_without_a_crash_loop() {
    scenario_disk_loss("once");
}

// ---------------------------------------------------------------------------------
// (b) a hung member

/// One member hangs (SIGSTOP) past unhealthyAfter; returns the time from the fault to
/// three healthy voters again. Then the old process is let go on (SIGCONT): its member
/// is gone, so it never comes back.
fn scenario_hang(run: &str) -> Duration {
    let sc = Scene::new(&format!("repair-b-{run}"), "b", NEW, &remediation(""), None);
    let s = sc.status();
    let victim = follower(&s);
    let pid = pid_of(&s, &victim);
    let member_id =
        u64::from_str_radix(row(&s, &victim).unwrap()["memberId"].as_str().unwrap(), 16).unwrap();
    let data = data_dir(&sc.env, &victim);
    let before = last_event_id(&sc.env, &sc.cp);
    let t0 = Instant::now();
    signal_etcd(&sc.env, &victim, pid, libc::SIGSTOP);
    // The host wakes up as soon as its member is removed (before quorum stops its
    // process, if it can be that quick): the old process runs again, with its data
    // and its old idea of the cluster, but its member is gone.
    let deadline = Instant::now() + Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S + 60);
    let removed_at = loop {
        let removed = events_after(&sc.env, &sc.cp, before)
            .iter()
            .any(|e| e.ok && kind_is(e, "remove-member") && about(e, &victim));
        if removed {
            break Instant::now();
        }
        assert!(Instant::now() < deadline, "{victim} was never removed");
        std::thread::sleep(Duration::from_millis(10));
    };
    let old_ran_on = is_etcd_of(pid, &data);
    if old_ran_on {
        signal(pid, libc::SIGCONT);
    }
    let took = wait_repaired(&sc, &victim, t0);
    let bound = Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S);
    assert!(took <= bound, "repaired after {took:?}, over {bound:?}");
    let during = sc.work.acked_between(t0, Instant::now());
    assert!(during > 0, "no write acknowledged while {victim} hung");
    // Long enough for the old process to have rejoined, had it been able to: it is
    // stopped by quorum or exits by itself (etcd stops a member that learns it was
    // removed), while the cluster goes on taking writes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while is_etcd_of(pid, &data) {
        assert!(
            Instant::now() < deadline,
            "the old process of {victim} still runs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sc.work.wait_more_acked(50, Duration::from_secs(30));
    let s = sc.wait_converged();
    assert!(repaired(&s, &[&victim]), "{s:#}");
    let (seen, lists) = sc.watch.members_seen_after(removed_at);
    assert!(
        lists >= 5,
        "only {lists} member lists read after the removal"
    );
    assert!(
        !seen.contains(&member_id),
        "the removed member {member_id:x} reappeared: {seen:x?}"
    );
    let events = events_after(&sc.env, &sc.cp, before);
    eprintln!(
        "{victim} hung: 3 healthy voters again after {:.1}s (old process {}):\n{}",
        took.as_secs_f64(),
        if old_ran_on {
            "resumed when its member was removed"
        } else {
            "ended before its member's removal was seen"
        },
        history(&events)
    );
    assert_replaced_in_order(&events, &victim);
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    work.finish(&env, &cp);
    assert_no_orphans(&env, &cp);
    took
}

#[test]
fn hung_member_is_replaced_and_never_rejoins() {
    scenario_hang("once");
}

// ---------------------------------------------------------------------------------
// (c) another cluster's data

/// The identity marker quorum writes into a data directory.
const MARKER_FILE: &str = "quorum-member.json";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            // A file may be rewritten while it is copied (the donor runs): any bytes do,
            // this data must never be started anyway.
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn data_of_another_cluster_is_never_started_and_is_replaced() {
    let sc = Scene::new("repair-c", "c", NEW, &remediation(""), None);
    // A second control plane, whose member's data (with its marker) is copied over.
    sc.env.ok(&[
        "create",
        "donor",
        "--replicas",
        "1",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        CREATE_TIMEOUT,
    ]);
    let donor_status = sc.env.status("donor");
    let donor = names(&donor_status)[0].clone();
    let donor_member = row(&donor_status, &donor).unwrap()["memberId"]
        .as_str()
        .unwrap()
        .to_string();
    let donor_data = data_dir(&sc.env, &donor);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !donor_data.join(MARKER_FILE).exists() {
        assert!(
            Instant::now() < deadline,
            "the donor's data was never marked"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = sc.status();
    let victim = follower(&s);
    let pid = pid_of(&s, &victim);
    let data = data_dir(&sc.env, &victim);
    assert!(
        data.join(MARKER_FILE).exists(),
        "{victim}'s data was never marked"
    );
    let before = last_event_id(&sc.env, &sc.cp);
    // Frozen while its directory is swapped, so nothing restarts it in between.
    let t0 = Instant::now();
    signal_etcd(&sc.env, &victim, pid, libc::SIGSTOP);
    std::fs::remove_dir_all(&data).unwrap();
    copy_dir(&donor_data, &data);
    signal(pid, libc::SIGKILL);
    wait_gone(pid, &data);
    // Refused: never started on that data, and `status` says whose data it is.
    let started = std::cell::Cell::new(false);
    let s = sc.wait("the foreign data named", Duration::from_secs(60), |s| {
        if row(s, &victim).is_some_and(|m| m["process"] == "running") {
            started.set(true);
        }
        problems(s, &victim)
            .iter()
            .any(|p| p.contains("belongs to member") && p.contains("of cluster"))
    });
    let (degraded, message) = condition(&s, "Degraded");
    assert!(
        degraded
            && message.contains(&victim)
            && message.contains(&format!("belongs to member {donor_member} of cluster")),
        "{message} (the donor's member is {donor_member})"
    );
    // Repaired: replaced.
    sc.wait(
        &format!("{victim} replaced"),
        Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S + 60),
        |s| {
            if row(s, &victim).is_some_and(|m| m["process"] == "running") {
                started.set(true);
            }
            repaired(s, &[&victim])
        },
    );
    assert!(
        !started.get(),
        "{victim} was started on another cluster's data"
    );
    let during = sc.work.acked_between(t0, Instant::now());
    assert!(during > 0, "no write acknowledged while {victim} was down");
    let events = events_after(&sc.env, &sc.cp, before);
    eprintln!("{message}\n{}", history(&events));
    assert_eq!(
        starts_of(&events, &victim),
        0,
        "{victim} was started:\n{}",
        history(&events)
    );
    assert_eq!(
        remediations(&events),
        [victim.as_str()],
        "{}",
        history(&events)
    );
    sc.wait_converged();
    // The donor never noticed; it goes, so that only `c`'s machines are left.
    assert!(
        repaired_n(&sc.env.status("donor"), 1),
        "{:#}",
        sc.env.status("donor")
    );
    sc.env
        .ok(&["delete", "donor", "--yes", "--wait", "--timeout", "60s"]);
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    work.finish(&env, &cp);
    assert_no_orphans(&env, &cp);
}

/// `n` machines, all healthy voters.
fn repaired_n(s: &Value, n: usize) -> bool {
    names(s).len() == n && healthy_voters(s) == n
}

// ---------------------------------------------------------------------------------
// (d) NOSPACE

/// The database quota of the NOSPACE scenario, and the size of the values that fill it.
const QUOTA_BYTES: u64 = 16 << 20;
const FILL_VALUE_BYTES: usize = 1 << 20;

/// The workload fills a database with a small quota until etcd refuses writes; returns
/// the time from the first refusal to the first write accepted again.
fn scenario_nospace(run: &str) -> Duration {
    let spec = format!(
        "{}maintenance:\n  quotaBackendBytes: {QUOTA_BYTES}\n",
        remediation("")
    );
    let sc = Scene::new(
        &format!("repair-d-{run}"),
        "d",
        NEW,
        &spec,
        Some(FILL_VALUE_BYTES),
    );
    let s = sc.status();
    // Each member was started with the quota.
    for m in names(&s) {
        let args = cmdline(pid_of(&s, &m));
        assert!(
            args.iter()
                .any(|a| *a == format!("--quota-backend-bytes={QUOTA_BYTES}")),
            "{m}: {args:?}"
        );
    }
    let before = last_event_id(&sc.env, &sc.cp);
    sc.work.start_filling();
    let deadline = Instant::now() + Duration::from_secs(60);
    while sc.work.with(|t| t.first_nospace.is_none()) {
        assert!(
            Instant::now() < deadline,
            "no NOSPACE after filling {} bytes",
            sc.work.with(|t| t.filled_bytes)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while sc.work.with(|t| t.first_ack_after_nospace.is_none()) {
        assert!(
            Instant::now() < deadline,
            "writes still refused 60 s after NOSPACE:\n{}",
            history(&events_after(&sc.env, &sc.cp, before))
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = sc.work.with(|t| {
        t.first_ack_after_nospace
            .unwrap()
            .duration_since(t.first_nospace.unwrap())
    });
    sc.work.wait_more_acked(20, Duration::from_secs(30));
    let s = sc.wait_converged();
    assert!(
        rows(&s)
            .iter()
            .all(|m| m["alarms"].as_array().unwrap().is_empty()),
        "{s:#}"
    );
    // Compacted, every member defragmented (the leader last), then the alarm disarmed.
    let events = events_after(&sc.env, &sc.cp, before);
    let h = history(&events);
    let compact = events
        .iter()
        .position(|e| e.ok && kind_is(e, "compact"))
        .unwrap_or_else(|| panic!("no compact:\n{h}"));
    let disarm = find_from(&events, compact, |e| e.ok && kind_is(e, "disarm-alarm"))
        .unwrap_or_else(|| panic!("no disarm-alarm after compact:\n{h}"));
    let defragmented: Vec<String> = events[compact..disarm]
        .iter()
        .filter(|e| e.ok && kind_is(e, "defragment"))
        .filter_map(|e| e.machine.clone())
        .collect();
    let unique: BTreeSet<&String> = defragmented.iter().collect();
    assert_eq!(unique.len(), 3, "defragmented {defragmented:?}:\n{h}");
    assert!(
        remediations(&events).is_empty(),
        "a full database is not a reason to replace a member:\n{h}"
    );
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    let tally = work.finish(&env, &cp);
    assert!(tally.nospace > 0, "{tally:?}");
    eprintln!(
        "NOSPACE after {} MiB: writes accepted again after {:.1}s ({} refused with NOSPACE, {} acknowledged)\n{h}",
        tally.filled_bytes >> 20,
        took.as_secs_f64(),
        tally.nospace,
        tally.acked.len()
    );
    took
}

#[test]
fn nospace_is_repaired_without_a_person() {
    scenario_nospace("once");
}

// ---------------------------------------------------------------------------------
// (e) two of three down

/// Event kinds that change membership or machines.
const CHANGES: [&str; 6] = [
    "allocate-machine",
    "add-learner",
    "promote",
    "mark-deleting",
    "remove-member",
    "delete-machine",
];

fn member_ids(s: &Value) -> BTreeSet<u64> {
    rows(s)
        .iter()
        .filter_map(|m| m["memberId"].as_str())
        .map(|id| u64::from_str_radix(id, 16).unwrap())
        .collect()
}

#[test]
fn two_of_three_down_remediates_nothing_and_says_why() {
    let sc = Scene::new("repair-e", "e", NEW, &remediation(""), None);
    let s = sc.status();
    let victims = followers(&s);
    assert_eq!(victims.len(), 2, "{s:#}");
    let pids: Vec<i32> = victims.iter().map(|v| pid_of(&s, v)).collect();
    let (machines, members) = (names(&s), member_ids(&s));
    let before = last_event_id(&sc.env, &sc.cp);
    let fault = Instant::now();
    let fault_in_watch = fault.duration_since(sc.watch.started);
    for (v, pid) in victims.iter().zip(&pids) {
        signal_etcd(&sc.env, v, *pid, libc::SIGSTOP);
    }
    // It says why it replaces nothing, and keeps to it past unhealthyAfter: each look
    // finds the same machines.
    let said = std::cell::RefCell::new(String::new());
    let refusal = |s: &Value| {
        let (blocked, message) = condition(s, "Blocked");
        blocked && (message.contains("quorum is lost") || message.contains("could lose quorum"))
    };
    sc.wait(
        "a refusal that names quorum",
        Duration::from_secs(90),
        |s| {
            assert_eq!(names(s), machines, "machines changed during the fault");
            if refusal(s) {
                *said.borrow_mut() = condition(s, "Blocked").1;
            }
            !said.borrow().is_empty()
                && fault.elapsed() > Duration::from_secs(UNHEALTHY_AFTER_S + 5)
                && refusal(s)
        },
    );
    let said = said.into_inner();
    assert!(
        said.contains("Bring") || said.contains("bring"),
        "says what to do: {said}"
    );
    let events = events_after(&sc.env, &sc.cp, before);
    eprintln!(
        "two of three down: Blocked says: {said}\n{}",
        history(&events)
    );
    assert!(
        !events.iter().any(|e| CHANGES.iter().any(|k| kind_is(e, k))),
        "a change while two of three were down:\n{}",
        history(&events)
    );
    // Nor is any of them said to have recovered while they are down (without a leader
    // no member can be judged).
    assert!(
        !events
            .iter()
            .any(|e| kind_is(e, "recovered") && victims.iter().any(|v| about(e, v))),
        "recovered while down:\n{}",
        history(&events)
    );
    // The refusal is in the history too, once.
    let refusals: Vec<&Event> = events.iter().filter(|e| kind_is(e, "blocked")).collect();
    assert!(
        refusals.iter().any(|e| e.message.contains("quorum")),
        "no refusal recorded:\n{}",
        history(&events)
    );
    let (seen, lists) = sc.watch.members_seen_after(fault);
    assert!(
        lists >= 5,
        "only {lists} member lists read during the fault"
    );
    assert_eq!(seen, members, "the membership changed during the fault");
    // One comes back: the other, still down past unhealthyAfter, is replaced.
    signal(pids[0], libc::SIGCONT);
    sc.wait(
        &format!("{} replaced", victims[1]),
        Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S + 60),
        |s| repaired(s, &[&victims[1]]),
    );
    let repaired_at = Instant::now();
    sc.work.wait_more_acked(20, Duration::from_secs(30));
    let s = sc.wait_converged();
    assert!(names(&s).contains(&victims[0]), "{s:#}");
    let events = events_after(&sc.env, &sc.cp, before);
    assert_eq!(
        remediations(&events),
        [victims[1].as_str()],
        "{}",
        history(&events)
    );
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    let log = watch.finish();
    // The majority was lost only while the fault lasted (and the election after it): a
    // sample outside it began after the repair or ended before the fault (one that
    // began just before the members stopped waits for their answers into the fault).
    let recovered_in_watch = repaired_at.duration_since(fault) + fault_in_watch;
    let outside: Vec<&(Duration, Duration, String)> = log
        .minority_after_settling()
        .into_iter()
        .filter(|(began, ended, _)| *ended < fault_in_watch || *began > recovered_in_watch)
        .collect();
    assert!(
        outside.is_empty(),
        "majority lost outside the fault: {outside:?}"
    );
    assert!(
        !log.minority.is_empty(),
        "the watch never saw the majority lost ({} samples)",
        log.samples
    );
    work.finish(&env, &cp);
    assert_no_orphans(&env, &cp);
}

// ---------------------------------------------------------------------------------
// (f) maxRetry

#[test]
fn max_retry_exhausted_stops_says_so_and_resumes_when_raised() {
    let limits = |max_retry: u32| remediation(&format!("maxRetry: {max_retry}\nretryPeriod: 1s"));
    let sc = Scene::new("repair-f", "f", NEW, &limits(0), None);
    let s = sc.status();
    let first = follower(&s);
    disk_loss(&sc.env, &first, pid_of(&s, &first));
    wait_repaired(&sc, &first, Instant::now());
    // The replacement fails too, well within minHealthyPeriod (1h).
    let s = sc.wait_converged();
    let before: Vec<String> = names(&s);
    let second = store_replacement_of(&sc.env, &sc.cp, &first);
    assert!(before.contains(&second), "{second} not in {before:?}");
    let from = last_event_id(&sc.env, &sc.cp);
    disk_loss(&sc.env, &second, pid_of(&s, &second));
    let s = sc.wait("the maxRetry refusal", Duration::from_secs(60), |s| {
        let (blocked, message) = condition(s, "Blocked");
        blocked && message.contains("maxRetry is 0")
    });
    let (_, message) = condition(&s, "Blocked");
    assert!(message.contains(&second), "{message}");
    assert_eq!(names(&s), before, "machines changed while refusing");
    // Refused for as long as the limit holds: past another unhealthyAfter, nothing.
    let refused_at = Instant::now();
    sc.wait("the refusal kept", Duration::from_secs(60), |s| {
        assert_eq!(names(s), before, "machines changed while refusing");
        refused_at.elapsed() > Duration::from_secs(UNHEALTHY_AFTER_S)
            && condition(s, "Blocked").1.contains("maxRetry is 0")
    });
    let events = events_after(&sc.env, &sc.cp, from);
    assert!(
        remediations(&events).is_empty(),
        "a second remediation despite maxRetry 0:\n{}",
        history(&events)
    );
    let refusals: Vec<&Event> = events.iter().filter(|e| kind_is(e, "blocked")).collect();
    assert_eq!(
        refusals.len(),
        1,
        "one refusal recorded:\n{}",
        history(&events)
    );
    assert!(
        refusals[0].message.contains("maxRetry is 0"),
        "{}",
        refusals[0].message
    );
    // A person raises the limit, as the refusal says (a plain `apply`: a change of how
    // quorum repairs is never refused): it resumes and converges.
    apply(&sc.env, &sc.cp, NEW, &limits(1), &[]);
    wait_repaired(&sc, &second, Instant::now());
    sc.wait_converged();
    let events = events_after(&sc.env, &sc.cp, from);
    eprintln!(
        "the refusal: {}\n{}",
        condition(&s, "Blocked").1,
        history(&events)
    );
    assert_eq!(
        remediations(&events),
        [second.as_str()],
        "{}",
        history(&events)
    );
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    work.finish(&env, &cp);
    assert_no_orphans(&env, &cp);
}

/// The machine recorded as the replacement of `machine`.
fn store_replacement_of(env: &Env, cp: &str, machine: &str) -> String {
    env.store()
        .machines(cp)
        .unwrap()
        .into_iter()
        .find(|m| m.name != machine && m.remediation.as_ref().is_some_and(|r| r.machine == machine))
        .unwrap_or_else(|| panic!("no replacement of {machine} recorded"))
        .name
}

// ---------------------------------------------------------------------------------
// (g) a rollout meets a dead member

#[test]
fn rollout_with_a_dead_member_replaces_it_first() {
    let sc = Scene::new("repair-g", "g", OLD, &remediation(""), None);
    let s = sc.status();
    let victim = follower(&s);
    let before = last_event_id(&sc.env, &sc.cp);
    let t0 = Instant::now();
    disk_loss(&sc.env, &victim, pid_of(&s, &victim));
    // A plain `upgrade`: with a quorum serving, a dead member does not stop a change
    // from being recorded (quorum replaces it first, and says so).
    let out = sc.env.ok(&["upgrade", &sc.cp, "--version", NEW]);
    assert!(out.contains("quorum replaces it first"), "{out}");
    let s = sc.wait("the rollout done", Duration::from_secs(240), |s| {
        repaired(s, &[&victim]) && machine_versions(s) == vec![NEW; 3] && s["converged"] == true
    });
    assert!(rows(&s).iter().all(|m| m["version"] == NEW), "{s:#}");
    let during = sc.work.acked_between(t0, Instant::now());
    assert!(during > 0, "no write acknowledged during the rollout");
    let events = events_after(&sc.env, &sc.cp, before);
    let h = history(&events);
    let marks: Vec<&Event> = events
        .iter()
        .filter(|e| e.ok && kind_is(e, "mark-deleting"))
        .collect();
    assert_eq!(marks.len(), 3, "{h}");
    assert!(
        about(marks[0], &victim) && is_remediation(marks[0]),
        "the dead member goes first:\n{h}"
    );
    // Nothing was added for the rollout before the dead member was marked.
    let first_mark = events.iter().position(|e| e.id == marks[0].id).unwrap();
    assert!(
        !events[..first_mark]
            .iter()
            .any(|e| e.ok && (kind_is(e, "allocate-machine") || kind_is(e, "add-learner"))),
        "the rollout went ahead of the repair:\n{h}"
    );
    eprintln!("{h}");
    assert_eq!(remediations(&events), [victim.as_str()], "{h}");
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    work.finish(&env, &cp);
    assert_no_orphans(&env, &cp);
}

// ---------------------------------------------------------------------------------
// `quorum defrag`

/// Keys of `FRAGMENT_VALUE_BYTES` each written per transaction (etcd allows 128
/// operations in one).
const FRAGMENT_BATCH: usize = 100;
const FRAGMENT_VALUE_BYTES: usize = 4 << 10;

/// Writes `bytes` under `prefix`, in batches of one transaction each.
async fn write_bulk(c: &mut etcd_client::Client, prefix: &str, bytes: usize) {
    let value = vec![b'f'; FRAGMENT_VALUE_BYTES];
    let keys = bytes / FRAGMENT_VALUE_BYTES;
    for batch in 0..keys.div_ceil(FRAGMENT_BATCH) {
        let ops: Vec<etcd_client::TxnOp> = (batch * FRAGMENT_BATCH
            ..keys.min((batch + 1) * FRAGMENT_BATCH))
            .map(|i| etcd_client::TxnOp::put(format!("{prefix}{i:06}"), value.clone(), None))
            .collect();
        tokio::time::timeout(
            Duration::from_secs(10),
            c.txn(etcd_client::Txn::new().and_then(ops)),
        )
        .await
        .expect("bulk write timed out")
        .expect("bulk write");
    }
}

/// Leaves `garbage` bytes free in every member's database: written, deleted, compacted
/// (as etcd's own auto-compaction would), after `live` bytes that stay.
fn fragment(cluster: &Cluster, prefix: &str, live: usize, garbage: usize) {
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        write_bulk(&mut c, &format!("{prefix}live/"), live).await;
        let gone = format!("{prefix}garbage/");
        write_bulk(&mut c, &gone, garbage).await;
        let del = c
            .delete(gone, Some(etcd_client::DeleteOptions::new().with_prefix()))
            .await
            .expect("delete");
        let revision = del.header().unwrap().revision();
        c.compact(
            revision,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .expect("compact");
    });
}

/// Each machine's database size, by name, as its own member reports it.
fn db_sizes(env: &Env, cp: &str) -> std::collections::BTreeMap<String, (u64, u64)> {
    let store = env.store();
    let control_plane = store.get_control_plane(cp).unwrap();
    let etcd =
        quorum_controller::access::open(&store, &control_plane, "quorum-test", Default::default())
            .unwrap()
            .etcd;
    let rt = rt();
    store
        .machines(cp)
        .unwrap()
        .iter()
        .map(|m| {
            let st = rt.block_on(etcd.status(&m.client_url())).expect("status");
            (m.name.clone(), (st.db_size_bytes, st.db_size_in_use_bytes))
        })
        .collect()
}

/// The machines a `quorum defrag` output says it defragmented, in order.
fn defragmented(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("defragmenting "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn defrag_command_shrinks_every_member_leader_last() {
    let mut env = Env::new("repair-defrag");
    env.start_controller();
    // Automatic defragmentation off: the command does it.
    apply(
        &env,
        "df",
        NEW,
        "maintenance:\n  defragWhenFragmentedAbove: 0\n",
        &CREATE_FLAGS,
    );
    // Bad inputs: one clear line, exit 1, as every other command; a malformed command
    // line, exit 2.
    for (args, says) in [
        (vec!["defrag", "nope"], "\"nope\" does not exist"),
        (
            vec!["defrag", "df", "--member", "df-9"],
            "df-9 is not a member of df",
        ),
    ] {
        let out = env.run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    for args in [vec!["defrag"], vec!["defrag", "df", "--member"]] {
        assert_eq!(env.run(&args).status.code(), Some(2), "{args:?}");
    }
    let cluster = env.endpoints("df");
    let keys = write_keys(&cluster, "k/", 100);
    fragment(&cluster, "f/", 1 << 20, 8 << 20);
    let before = db_sizes(&env, "df");
    for (m, (size, in_use)) in &before {
        assert!(
            size - in_use > 4 << 20,
            "{m}: {size} bytes, {in_use} in use"
        );
    }
    let s = env.status("df");
    let leader = s["leader"].as_str().unwrap().to_string();
    // One member only.
    let one = follower(&s);
    let out = env.ok(&["defrag", "df", "--member", &one]);
    assert_eq!(defragmented(&out), [one.as_str()], "{out}");
    let after_one = db_sizes(&env, "df");
    assert!(
        after_one[&one].0 < before[&one].0 / 2,
        "{after_one:?} vs {before:?}"
    );
    // Every member: followers first, the leader last, each smaller.
    let out = env.ok(&["defrag", "df"]);
    let order = defragmented(&out);
    assert_eq!(order.len(), 3, "{out}");
    assert_eq!(order.last(), Some(&leader), "the leader last:\n{out}");
    assert!(out.contains("defragmented 3 members of df"), "{out}");
    let after = db_sizes(&env, "df");
    for (m, (size, _)) in &after {
        assert!(
            *size < before[m].0 / 2,
            "{m}: {size} bytes after, {:?} before",
            before[m]
        );
    }
    assert_keys(&env.endpoints("df"), "k/", &keys);
    let s = env.status("df");
    assert!(repaired(&s, &[]) && s["converged"] == true, "{s:#}");
    env.terminate_controller();
}

// ---------------------------------------------------------------------------------
// A member hangs in the middle of the controller's call to it.

/// What etcd logs when a defragmentation starts and ends.
const DEFRAG_STARTS: &str = "\"msg\":\"starting defragment\"";
const DEFRAG_ENDS: &str = "\"msg\":\"finished defragment\"";

/// The bytes `path` has gained since `from`; moves `from` on.
fn log_since(path: &Path, from: &mut u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len < *from {
        *from = 0;
    }
    let mut s = String::new();
    if f.seek(SeekFrom::Start(*from)).is_ok() && f.read_to_string(&mut s).is_ok() {
        *from += s.len() as u64;
    }
    s
}

#[test]
fn a_member_hung_inside_a_defragmentation_does_not_stall_the_controller() {
    let sc = Scene::new("repair-hang-defrag", "h", NEW, &remediation(""), None);
    let provider = provider(&sc.env);
    let s = sc.status();
    let logs: Vec<(String, PathBuf, i32)> = names(&s)
        .into_iter()
        .map(|m| {
            let pid = pid_of(&s, &m);
            (m.clone(), provider.log_path(&m), pid)
        })
        .collect();
    let mut offsets: Vec<u64> = logs
        .iter()
        .map(|(_, p, _)| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .collect();
    let before = last_event_id(&sc.env, &sc.cp);
    // Live data makes a defragmentation take long enough (~100 ms) to be caught in
    // the middle; the garbage makes the controller defragment on its own (over 50%).
    fragment(&sc.env.endpoints(&sc.cp), "f/", 16 << 20, 40 << 20);
    // Catch a member in its defragmentation (the controller's call to it open) and
    // freeze it there. A defragmentation that ended before the freeze landed is let go
    // on, and the next member's is tried.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (victim, pid, hung_at) = 'caught: loop {
        assert!(Instant::now() < deadline, "no defragmentation was caught");
        for (i, (m, path, pid)) in logs.iter().enumerate() {
            let new = log_since(path, &mut offsets[i]);
            let Some(at) = new.find(DEFRAG_STARTS) else {
                continue;
            };
            if new[at..].contains(DEFRAG_ENDS) {
                continue;
            }
            signal_etcd(&sc.env, m, *pid, libc::SIGSTOP);
            let t = Instant::now();
            if log_since(path, &mut offsets[i]).contains(DEFRAG_ENDS) {
                signal(*pid, libc::SIGCONT);
                continue;
            }
            break 'caught (m.clone(), *pid, t);
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    // The controller's call is bounded: it fails, and the next step comes.
    let bound = Duration::from_millis(quorum_etcd::DEFRAG_TIMEOUT_MS) + Duration::from_secs(15);
    let failed = loop {
        let events = events_after(&sc.env, &sc.cp, before);
        if let Some(e) = events
            .iter()
            .find(|e| kind_is(e, "defragment") && about(e, &victim) && !e.ok)
        {
            break e.clone();
        }
        assert!(
            hung_at.elapsed() < bound,
            "the controller's defragmentation of {victim} never ended:\n{}",
            history(&events)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let stalled = hung_at.elapsed();
    // Writes went on meanwhile (2 of 3 members serve).
    sc.work.wait_more_acked(20, Duration::from_secs(30));
    signal(pid, libc::SIGCONT);
    let s = sc.wait_converged();
    let events = events_after(&sc.env, &sc.cp, failed.id);
    assert!(
        events.iter().any(|e| e.ok),
        "nothing came after the failed call:\n{}",
        history(&events)
    );
    eprintln!(
        "{victim} hung in its defragmentation: the controller's call ended after {:.1}s ({}); then {} more steps",
        stalled.as_secs_f64(),
        failed.message,
        events.len()
    );
    let sizes = db_sizes(&sc.env, &sc.cp);
    for (m, (size, in_use)) in &sizes {
        assert!(
            size - in_use < 20 << 20,
            "{m} was never defragmented: {size} bytes, {in_use} in use"
        );
    }
    assert!(repaired(&s, &[]), "{s:#}");
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    work.finish(&env, &cp);
}

// ---------------------------------------------------------------------------------
// Timings for the closing note.

#[test]
#[ignore = "runs (a), (b) and (d) 5 times each, one after the other (about 3 minutes)"]
fn repair_timings() {
    const RUNS: usize = 5;
    type Scenario = fn(&str) -> Duration;
    let faults: [(&str, &str, Scenario); 3] = [
        (
            "(a) disk loss of one member",
            "fault to 3 healthy voters",
            scenario_disk_loss,
        ),
        (
            "(b) SIGSTOP of one member",
            "fault to 3 healthy voters",
            scenario_hang,
        ),
        (
            "(d) NOSPACE under writes",
            "first refused write to first accepted",
            scenario_nospace,
        ),
    ];
    let mut table = vec![format!(
        "unhealthyAfter {UNHEALTHY_AFTER_S}s; {RUNS} runs each, 3 members at etcd {NEW} with TLS"
    )];
    for (fault, measured, scenario) in faults {
        let mut times: Vec<Duration> = (0..RUNS).map(|i| scenario(&format!("timing{i}"))).collect();
        let all: Vec<String> = times
            .iter()
            .map(|t| format!("{:.1}", t.as_secs_f64()))
            .collect();
        times.sort();
        table.push(format!(
            "{fault}: median {:.1}s, max {:.1}s ({measured}; runs: {})",
            times[RUNS / 2].as_secs_f64(),
            times[RUNS - 1].as_secs_f64(),
            all.join(", ")
        ));
    }
    println!("{}", table.join("\n"));
}
