//! The model's own tests: its checker, its environment and its controller's pacing.

use super::perform::{perform, successors};
use super::*;
use quorum_core::ClusterState;

#[test]
fn the_initial_state_is_safe_and_not_the_goal() {
    let s = initial(Variant::ALL[0]);
    assert!(s.check().is_ok());
    assert!(!s.goal());
}

#[test]
fn the_checker_sees_a_lost_quorum() {
    let mut s = initial(Variant::ALL[0]);
    s.procs[0].running = false;
    s.procs[1].running = false;
    assert!(s.check().is_err());
}

#[test]
fn members_match_machines_by_the_serial_in_their_url() {
    let m = machine(12, NEW);
    assert_eq!(serial_of_url(&m.peer_url()), 12);
    assert_eq!(serial_of_url("http://127.250.0.1:2380"), 1);
    assert_eq!(serial_of_url("nonsense"), 0);
}

#[test]
fn the_checker_sees_a_start_on_lost_data_or_with_new() {
    let mut s = initial(Variant::ALL[0]);
    s.procs[1].running = false;
    s.procs[1].has_data = false;
    let start = |state| Action::StartMachine {
        machine: "m-2".into(),
        state,
        initial_cluster: vec![],
        expect: None,
    };
    let err = perform(&mut s, &start(ClusterState::Existing), false).unwrap_err();
    assert!(err.contains("started on lost data"), "{err}");
    let err = perform(&mut s, &start(ClusterState::New), false).unwrap_err();
    assert!(err.contains("`new` after the cluster formed"), "{err}");
}

#[test]
fn a_lost_disk_is_remembered_then_remediated() {
    let mut s = initial(Variant::ALL[0]);
    s.procs[1].running = false;
    s.procs[1].has_data = false;
    s.disk_lost = true;
    // The pass notes the problem; nothing is replaced before it lasts.
    let next = successors(&s).unwrap();
    let (_, noted) = next
        .iter()
        .find(|(l, _)| l == "controller: notes the problems it sees")
        .expect("noted");
    assert_eq!(noted.memory, [("m-2".to_string(), false)]);
    assert!(
        controller_labels(noted).is_empty(),
        "{:?}",
        controller_labels(noted)
    );
    let (_, due) = successors(noted)
        .unwrap()
        .into_iter()
        .find(|(l, _)| l == "m-2's problem lasts unhealthyAfter")
        .expect("time passes");
    let labels = controller_labels(&due);
    assert_eq!(labels.len(), 1, "{labels:?}");
    assert!(
        labels[0].starts_with("controller: mark m-2 for replacement (attempt 1: lost its data"),
        "{labels:?}"
    );
    // A crash forgets: the next controller counts afresh.
    let mut crashed = due.clone();
    crashed.memory.clear();
    assert_eq!(
        controller_labels(&crashed),
        ["controller: notes the problems it sees"]
    );
}

#[test]
fn a_fenced_deletion_keeps_the_record() {
    let mut s = initial(Variant::ALL[0]);
    s.members.retain(|m| m.id != 1);
    perform(
        &mut s,
        &Action::DeleteMachine {
            machine: "m-1".into(),
        },
        true,
    )
    .unwrap();
    assert!(s.machines.iter().any(|m| m.name == "m-1"));
    assert!(!s.procs[0].running);
}

#[test]
fn the_start_of_a_non_member_does_not_run() {
    let mut s = initial(Variant::ALL[0]);
    perform(
        &mut s,
        &Action::AllocateMachine {
            bootstrap: false,
            version: NEW,
            remediation: None,
        },
        false,
    )
    .unwrap();
    let a = Action::StartMachine {
        machine: "m-4".into(),
        state: ClusterState::Existing,
        initial_cluster: vec![],
        expect: None,
    };
    perform(&mut s, &a, false).unwrap();
    assert!(!s.proc("m-4").unwrap().running);
}

/// maxSurge 0: the first step marks m-2 leaving; then its removal is due.
fn leaving() -> State {
    let mut s = initial(Variant::ALL[1]);
    let (_, n) = successors(&s)
        .unwrap()
        .into_iter()
        .find(|(l, _)| l.starts_with("controller: mark m-2"))
        .expect("m-2 marked");
    s = n;
    assert!(s.lb_serves.contains(&"m-2".to_string()));
    s
}

fn controller_labels(s: &State) -> Vec<String> {
    successors(s)
        .unwrap()
        .into_iter()
        .map(|(l, _)| l)
        .filter(|l| l.starts_with("controller:"))
        .collect()
}

#[test]
fn a_removal_is_enabled_only_once_drained_with_the_load_balancer_in_step() {
    let mut s = leaving();
    // Member 1 leads: the removal of m-2 is the next step, once paced.
    let removal = "controller: remove the member of m-2".to_string();
    assert!(!controller_labels(&s).contains(&removal));
    // A pass holds the removal: its drain clock starts, the load balancer is in step.
    let held = "controller: holds 'remove the member of m-2'";
    let (_, after) = successors(&s)
        .unwrap()
        .into_iter()
        .find(|(l, _)| l.starts_with(held))
        .expect("held");
    s = after;
    assert!(s.drain_started && !s.drain_passed);
    assert!(
        s.lb_serves.is_empty(),
        "a reachable load balancer is brought in step"
    );
    s.drain_passed = true;
    s.drained.push("m-2".into());
    s.lb_reachable = false;
    assert!(
        !controller_labels(&s).contains(&removal),
        "{:?}",
        controller_labels(&s)
    );
    s.lb_reachable = true;
    assert!(
        controller_labels(&s).contains(&removal),
        "{:?}",
        controller_labels(&s)
    );
}

#[test]
fn the_checker_sees_a_removal_before_the_drain_or_behind_the_load_balancer() {
    let a = Action::RemoveMember {
        member_id: 2,
        machine: Some("m-2".into()),
    };
    let mut s = leaving();
    let err = perform(&mut s, &a, false).unwrap_err();
    assert!(err.contains("before its drain passed"), "{err}");
    let mut s = leaving();
    s.drained.push("m-2".into());
    let err = perform(&mut s, &a, false).unwrap_err();
    assert!(err.contains("load balancer still sends clients"), "{err}");
    s.lb_serves.clear();
    assert_eq!(perform(&mut s, &a, false), Ok(true));
}

// ---------------------------------------------------------------- the in-place step

/// The variant checked in place: with a deposed controller (and etcd's strict check).
fn in_place_variant() -> Variant {
    let v: Vec<Variant> = Variant::ALL.into_iter().filter(|v| v.in_place).collect();
    assert_eq!(v.len(), 1, "{v:?}");
    v[0]
}

#[test]
fn the_in_place_variant_has_a_deposed_controller() {
    let v = in_place_variant();
    assert!(v.deposed && v.etcd_strict && !v.faults_anywhere, "{v:?}");
    assert_eq!(initial(v).cp.spec.rollout.strategy, Strategy::InPlace);
}

#[test]
fn the_checker_sees_a_start_below_the_cluster_version() {
    let mut s = initial(in_place_variant());
    s.cluster_new = true;
    s.procs[0].running = false;
    let err = perform(
        &mut s,
        &Action::StartMachine {
            machine: "m-1".into(),
            state: ClusterState::Existing,
            initial_cluster: vec![],
            expect: None,
        },
        false,
    )
    .unwrap_err();
    assert!(err.contains("below the cluster version"), "{err}");
}

#[test]
fn a_deposed_controllers_in_place_write_changes_nothing() {
    let mut s = initial(in_place_variant());
    let a = Action::BeginInPlace {
        machine: "m-2".into(),
        to: NEW,
        reason: quorum_core::DeleteReason::Outdated,
    };
    perform(&mut s, &a, true).unwrap();
    assert!(s.machines.iter().all(|m| m.in_place.is_none()));
    perform(&mut s, &a, false).unwrap();
    assert!(s.machines[1].in_place_out_of_service());
    assert!(s.lb_serves.contains(&"m-2".to_string()));
}

#[test]
fn the_in_place_step_begins_with_a_follower_and_a_broken_binary_is_rolled_back() {
    // The first pass begins m-2's step (m-1 leads).
    let labels = controller_labels(&initial(in_place_variant()));
    assert_eq!(
        labels,
        ["controller: begin upgrading m-2 in place to etcd 3.5.1: drain it"]
    );
    // m-2 restarting on a binary that exits at once: only once its deadline has passed
    // is it rolled back, to its previous binary.
    let mut s = initial(in_place_variant());
    s.bad_binary = Some("m-2".into());
    s.bad_used = true;
    s.procs[1].running = false;
    s.machines[1].version = NEW;
    s.machines[1].in_place = Some(quorum_core::InPlace {
        from: OLD,
        to: NEW,
        phase: quorum_core::InPlacePhase::Restarting,
        since_unix_s: NOW_UNIX_S,
        reason: quorum_core::DeleteReason::Outdated,
        failure: None,
    });
    assert_eq!(controller_labels(&s), ["controller: start m-2"]);
    let (_, started) = successors(&s)
        .unwrap()
        .into_iter()
        .find(|(l, _)| l == "controller: start m-2")
        .expect("started");
    assert!(!started.procs[1].running, "it exits at once");
    // A pass that changed something is no time passing; once the passes change
    // nothing, the deadline may pass.
    let deadline = |x: &State| {
        successors(x)
            .unwrap()
            .into_iter()
            .find(|(l, _)| l == "m-2's in-place deadline passes")
    };
    assert!(deadline(&s).is_none());
    let (_, late) =
        deadline(&started).expect("the deadline passes while the start changes nothing");
    let labels = controller_labels(&late);
    assert!(
        labels[0].starts_with("controller: roll m-2 back to etcd 3.4.23"),
        "{labels:?}"
    );
}

/// The finding the simulator holds back too: a deposed controller's stop of a member
/// (decided once its drain passed) lands after another member failed, and quorum is
/// lost. Nothing fences a process kill.
#[test]
fn a_deposed_controllers_stop_of_a_member_can_take_quorum_away() {
    let r = check(Variant {
        faults_anywhere: true,
        ..in_place_variant()
    });
    assert!(
        r.violations
            .iter()
            .any(|v| v.contains("the in-place stop of")
                && v.contains("deposed controller decides: stop")),
        "{:?}",
        r.violations
    );
}

// ---------------------------------------------------------------- recovery

/// A recovery from the survivor, with crashes and a deposed controller's stale step:
/// every state safe (a forced start only once no other old member runs), every state
/// able to reach three members at NEW again, and the goal reached.
#[test]
fn a_recovery_from_the_survivor_always_grows_back_safely() {
    let v: Vec<Variant> = Variant::ALL.into_iter().filter(|v| v.recovery).collect();
    assert_eq!(v.len(), 1, "{v:?}");
    let r = check(v[0]);
    println!(
        "recovery: {} states, {} transitions, depth {}, {} goal states",
        r.states, r.transitions, r.max_depth, r.goal_states
    );
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.goal_states > 0 && r.states > 100, "{} states", r.states);
}

/// A deleted control plane brought back from a snapshot, with crashes, a deposed
/// controller's stale step and one failure: every state safe (the seed starts `new`
/// only on the restored data and alone), and three members at NEW reached from every
/// state.
#[test]
fn a_control_plane_brought_back_from_a_snapshot_always_grows_back_safely() {
    let v: Vec<Variant> = Variant::ALL.into_iter().filter(|v| v.recreate).collect();
    assert_eq!(v.len(), 1, "{v:?}");
    let r = check(v[0]);
    println!(
        "recreate: {} states, {} transitions, depth {}, {} goal states, {} with a publish lost, {} with it stopped by the rule",
        r.states, r.transitions, r.max_depth, r.goal_states, r.lost_publish_states, r.publish_stopped_states
    );
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.goal_states > 0 && r.states > 100, "{} states", r.states);
    // A learner's lost publish was explored, and so was the rule's answer to it.
    assert!(r.publish_stopped_states > 0, "{r:?}");
}

/// `quorum member replace` and `quorum member restart` recorded on two of three
/// members, with crashes, a deposed controller's stale step and one failure: every
/// state safe, and from every state the replaced machine gone, the restarted one back
/// in service and no request left.
#[test]
fn a_member_replaced_and_one_restarted_on_request_always_finish_safely() {
    let v: Vec<Variant> = Variant::ALL.into_iter().filter(|v| v.requests).collect();
    assert_eq!(v.len(), 1, "{v:?}");
    let r = check(v[0]);
    println!(
        "requests: {} states, {} transitions, depth {}, {} goal states",
        r.states, r.transitions, r.max_depth, r.goal_states
    );
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.goal_states > 0 && r.states > 100, "{} states", r.states);
}

/// A seed started `new` while another process runs is two clusters: a violation.
#[test]
fn a_seed_started_beside_another_process_is_a_violation() {
    let v = Variant::ALL.into_iter().find(|v| v.recreate).unwrap();
    let mut s = initial(v);
    if let Some(rb) = s.cp.rebuild.as_mut() {
        rb.phase = quorum_core::RebuildPhase::Seeding;
    }
    let alloc = Action::AllocateMachine {
        bootstrap: true,
        version: NEW,
        remediation: None,
    };
    perform(&mut s, &alloc, false).unwrap();
    perform(&mut s, &alloc, false).unwrap();
    let restore = Action::RestoreSnapshot {
        machine: "m-4".into(),
        id: "snap".into(),
    };
    perform(&mut s, &restore, false).unwrap();
    s.procs[1].running = true;
    let start = Action::StartMachine {
        machine: "m-4".into(),
        state: quorum_core::ClusterState::New,
        initial_cluster: vec![],
        expect: None,
    };
    let err = perform(&mut s, &start, false).unwrap_err();
    assert!(err.contains("two clusters"), "{err}");
}

#[test]
fn a_forced_start_beside_a_running_old_member_is_a_violation() {
    let v = Variant::ALL.into_iter().find(|v| v.recovery).unwrap();
    let mut s = initial(v);
    if let Some(rb) = s.cp.rebuild.as_mut() {
        rb.phase = quorum_core::RebuildPhase::Seeding;
    }
    s.procs[0].running = false;
    s.procs[1].running = true;
    let force = Action::ForceNewCluster {
        machine: "m-1".into(),
        expect: None,
    };
    let err = perform(&mut s, &force, false).unwrap_err();
    assert!(err.contains("two clusters"), "{err}");
}

// ---------------------------------------------------------------- members on hosts

/// A host lost during the rollout (its member stopped, its agent silent, the machine
/// taken to run as last seen), with crashes and a deposed controller: every property
/// holds, and the rollout reaches its goal from every state once the host is back.
#[test]
fn a_host_lost_during_a_rollout_never_costs_quorum_and_the_rollout_finishes() {
    let v: Vec<Variant> = Variant::ALL.into_iter().filter(|v| v.hosts).collect();
    assert_eq!(v.len(), 1, "{v:?}");
    let r = check(v[0]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.goal_states > 0);
    assert!(
        r.remediation_states > 0,
        "a lost host's member was remediated somewhere"
    );
    println!("hosts: {} states, {} transitions", r.states, r.transitions);
}
