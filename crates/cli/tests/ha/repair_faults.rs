//! The management etcd fails while two controller replicas repair a control plane: one
//! member of a 3-member control plane at 3.5.1 loses its disk, and at the same moment
//! (a) the management etcd's leader is killed (SIGKILL, left down), or (b) once the
//! remediation began (its `mark-deleting` is in the store's history) the management
//! etcd's leader is stopped (SIGSTOP) for 10 s, then resumed. Either way the repair ends
//! with 3 healthy voters, each membership change of it made once (the store's history,
//! the replicas' logs of what they performed, and the managed cluster's member list),
//! every acknowledged write of the client workload kept and a majority of the managed
//! voters answering throughout (`repair/support.rs`).

use super::store_faults::{assert_each_change_once, management_leader};
use super::{ha_env, wait_leader, wall_ms, Replica};
use crate::common::*;
use crate::support::*;
use quorum_store::Event;
use std::time::{Duration, Instant};

/// How long (b) keeps the management etcd's leader stopped.
const PAUSE: Duration = Duration::from_secs(10);
/// How often the test reads the store's history while waiting for a step.
const EVENT_POLL: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MgmtFault {
    /// (a) its leader SIGKILLed with the disk loss, left down.
    KillLeader,
    /// (b) its leader SIGSTOPped for `PAUSE` once the remediation began.
    PauseLeader,
}

/// Lines of a replica's log that record a performed `kind` about `machine`.
fn performed_about(log: &str, kind: &str, machine: &str) -> usize {
    let mark = format!("performed=\"{kind}\"");
    log.lines()
        .filter(|l| l.contains(&mark))
        .filter(|l| {
            l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .any(|w| w == machine)
        })
        .count()
}

fn count_done(events: &[Event], kind: &str, machine: &str) -> usize {
    events
        .iter()
        .filter(|e| e.ok && kind_is(e, kind) && about(e, machine))
        .count()
}

fn run(fault: MgmtFault, test: &str) {
    let (env, mgmt) = ha_env(test);
    let r1 = Replica::start(&env, "r1", &[]);
    wait_leader(&env, "r1", Duration::from_secs(30));
    let r2 = Replica::start(&env, "r2", &[]);
    let cp = "m";
    apply(&env, cp, NEW, &remediation(""), &CREATE_FLAGS);
    let source = Source::Published(quorum_controller::endpoints_path(&env.home, cp));
    let sc = Scene::watching(env, cp, None, source);
    let s = sc.status();
    let victim = follower(&s);
    let token_before = sc.env.store().leader().unwrap().unwrap().token;
    let before = last_event_id(&sc.env, cp);
    let leader = management_leader(&sc.env);
    let fault_ms = wall_ms();
    disk_loss(&sc.env, &victim, pid_of(&s, &victim));
    let mut paused_ms = None;
    match fault {
        MgmtFault::KillLeader => mgmt.kill(leader).unwrap(),
        MgmtFault::PauseLeader => {
            // The remediation began: its first step is in the store's history.
            let store = sc.env.store();
            let deadline = Instant::now() + Duration::from_secs(UNHEALTHY_AFTER_S + 30);
            loop {
                let events = store.events_after(cp, before, 10_000).unwrap();
                if count_done(&events, "mark-deleting", &victim) > 0 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{victim} never marked for replacement:\n{}",
                    history(&events)
                );
                std::thread::sleep(EVENT_POLL);
            }
            mgmt.pause(leader);
            paused_ms = Some(wall_ms());
            // The fault lasts PAUSE; the managed cluster, which does not depend on the
            // management etcd, takes writes meanwhile.
            let paused = Instant::now();
            while paused.elapsed() < PAUSE {
                sc.work.wait_more_acked(1, Duration::from_secs(5));
                std::thread::sleep(Duration::from_millis(100));
            }
            mgmt.resume(leader);
        }
    }
    sc.wait(
        &format!("{victim} replaced, 3 healthy voters"),
        Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S + 60),
        |s| repaired(s, &[&victim]),
    );
    sc.work.wait_more_acked(20, Duration::from_secs(30));
    let s = sc.wait_converged();
    assert!(repaired(&s, &[&victim]), "{s:#}");
    let events = events_after(&sc.env, cp, before);
    let h = history(&events);
    let takeover = sc.env.store().leader().unwrap().unwrap();
    // The management etcd after the fault: who leads it, and which members serve.
    let store_health = sc.env.store().endpoint_health(true);
    let (up, store_leader): (Vec<bool>, Vec<bool>) =
        store_health.iter().map(|h| (h.up, h.leader)).unzip();
    if fault == MgmtFault::KillLeader {
        assert!(!up[leader], "the killed member {leader} is back: {up:?}");
        assert_eq!(up.iter().filter(|u| **u).count(), 2, "{up:?}");
    }
    let since_fault_s = |kind: &str| {
        let e = events
            .iter()
            .find(|e| kind_is(e, kind))
            .unwrap_or_else(|| panic!("no {kind}:\n{h}"));
        (e.at_ms - fault_ms) as f64 / 1000.0
    };
    eprintln!(
        "{fault:?} of the management etcd (member {leader}) with the disk loss of {victim}: \
         endpoints without it {:.1}s after the fault, converged after {:.1}s; controller \
         leader {} (token {} before, {} after); management members up {up:?}, leading \
         {store_leader:?}\n{h}",
        since_fault_s("endpoints"),
        since_fault_s("converged"),
        takeover.identity,
        token_before,
        takeover.token
    );
    // The remediation, once: in the store's history...
    assert_eq!(count_done(&events, "mark-deleting", &victim), 1, "{h}");
    assert_eq!(count_done(&events, "remove-member", &victim), 1, "{h}");
    assert_eq!(remediations(&events), [victim.as_str()], "{h}");
    // ...and in what the replicas performed (a step whose record the store lost would
    // show here only).
    let logs = [r1.log_text(), r2.log_text()];
    for kind in ["mark-deleting", "remove-member"] {
        let done: usize = logs.iter().map(|l| performed_about(l, kind, &victim)).sum();
        assert_eq!(done, 1, "{kind} of {victim} performed {done} times");
    }
    if let Some(paused_ms) = paused_ms {
        // The fault fell inside the remediation: its promotion started after it.
        let promote = events
            .iter()
            .find(|e| e.ok && kind_is(e, "promote"))
            .unwrap_or_else(|| panic!("no promotion:\n{h}"));
        let started = promote.at_ms - promote.took_ms.unwrap_or(0);
        assert!(
            started >= paused_ms,
            "promoted {} ms before the pause: the fault missed the remediation\n{h}",
            paused_ms - started
        );
    }
    let Scene {
        env,
        cp: name,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    let tally = work.finish(&env, &name);
    eprintln!(
        "the workload: {} acknowledged writes, {} failed: {:?}",
        tally.acked.len(),
        tally.write_errors,
        tally.errors
    );
    // Each membership change once, and exactly the stored machines as voters.
    assert_each_change_once(&env, &name);
    drop((r1, r2));
    drop(mgmt);
    drop(env);
}

#[test]
fn disk_loss_repaired_while_the_management_leader_is_killed() {
    run(MgmtFault::KillLeader, "repair-mgmt-kill");
}

#[test]
fn disk_loss_repaired_while_the_management_leader_is_stopped_mid_remediation() {
    run(MgmtFault::PauseLeader, "repair-mgmt-pause");
}
