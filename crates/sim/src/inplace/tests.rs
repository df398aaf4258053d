//! The simulator's in-place step: its etcd (binaries, the cluster version), its fault
//! (a new binary that fails to start), its person, and its checks.

use super::*;

/// An in-place world of `n` members on `from`, the spec at `to` (then the rest of
/// `plan`), no random faults, a fault window that never ends unless `faults_end`
/// (the person acts only once the faults stopped).
fn in_place(n: u32, from: Version, to: Version, plan: &[Version], faults_end: bool) -> World {
    let mut c = Config::new(1);
    c.scenario = if n == 5 {
        Scenario::InPlace5
    } else {
        Scenario::InPlace
    };
    c.strict_reconfig = true;
    c.load_balancer = true;
    c.fault_per_mille = 0;
    c.fault_steps = if faults_end { 0 } else { 1_000_000 };
    c.ca_rotation = false;
    c.member_request = false;
    c.trace = true;
    let mut w = World::new(c);
    for m in &mut w.machines {
        m.version = from;
    }
    for p in w.procs.values_mut() {
        p.binary = Some(from);
    }
    w.cluster_version = line_of(from);
    w.cp.spec.version = to;
    w.plan = plan.to_vec();
    w
}

fn until(w: &mut World, max: u64, done: impl Fn(&World) -> bool) -> u64 {
    for k in 1..=max {
        w.step();
        assert_eq!(w.violation, None, "{}", w.trace);
        if done(w) {
            return k;
        }
    }
    panic!("not done within {max} steps:\n{}", w.trace);
}

fn out_of_service(w: &World) -> Vec<String> {
    w.machines
        .iter()
        .filter(|m| m.in_place_out_of_service())
        .map(|m| m.name.clone())
        .collect()
}

fn violation(w: &World) -> &str {
    w.violation.as_deref().unwrap_or("")
}

#[test]
fn three_and_five_members_go_through_the_plan_in_place_one_at_a_time() {
    for n in [3, 5] {
        let mut w = in_place(n, OLD, MID, &[NEW], true);
        let mut lines = vec![];
        let o = loop {
            let over = w.step();
            assert!(out_of_service(&w).len() <= 1, "{}", w.trace);
            // The cluster version is the lowest minor every member runs, never above.
            let lowest = w
                .procs
                .values()
                .filter_map(|p| p.binary)
                .map(line_of)
                .min()
                .expect("binaries");
            assert!(w.cluster_version <= lowest, "{}", w.trace);
            if lines.last() != Some(&w.cluster_version) {
                lines.push(w.cluster_version);
            }
            if over {
                break w.finish();
            }
        };
        assert_eq!(o.violation, None, "{}", o.trace);
        assert_eq!(lines, [line_of(OLD), line_of(MID)], "{}", o.trace);
        // Two rollouts of n steps each, no membership change, no rollback.
        let c = o.in_place;
        assert_eq!(
            (c.begun, c.done, c.stops),
            (2 * u64::from(n), 2 * u64::from(n), 2 * u64::from(n)),
            "{c}"
        );
        assert_eq!((c.rollbacks, c.version_changes), (0, 1), "{c}");
        assert_eq!(o.repair.remediations, 0);
        assert!(!o.trace.contains("add "), "{}", o.trace);
        assert!(o.trace.contains("OPERATOR moves the spec to etcd 3.5.1"));
    }
}

#[test]
fn a_member_restarted_on_the_new_binary_reports_it() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    until(&mut w, 100, |w| w.in_place.done == 1);
    let obs = w.observe();
    let upgraded = &obs.machines["sim-2"];
    assert_eq!(upgraded.running_version, Some(NEW));
    assert_eq!(upgraded.status.as_ref().and_then(|s| s.version), Some(NEW));
    let other = &obs.machines["sim-1"];
    assert_eq!(other.status.as_ref().and_then(|s| s.version), Some(OLD));
    // One member on 3.5 is not all of them: the cluster version stays.
    assert_eq!(obs.cluster_version, Some(line_of(OLD)));
}

#[test]
fn the_cluster_version_moves_only_once_every_member_answers() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    for p in w.procs.values_mut() {
        p.binary = Some(NEW);
    }
    w.hang("sim-3", u64::MAX);
    w.next_version_check_ms = 0;
    w.monitor_cluster_version();
    assert_eq!(w.cluster_version, line_of(OLD));
    w.impairment = None;
    w.reconnect_machines(&["sim-3".into()]);
    // Not before the leader's next look.
    w.monitor_cluster_version();
    assert_eq!(w.cluster_version, line_of(OLD));
    w.next_version_check_ms = 0;
    w.monitor_cluster_version();
    assert_eq!(w.cluster_version, line_of(NEW));
    assert_eq!(w.in_place.cluster_version_moves, 1);
}

#[test]
fn a_new_binary_that_fails_to_start_is_rolled_back_and_the_rollout_stops() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    w.procs.get_mut("sim-2").expect("sim-2").bad_binary = Some(NEW);
    until(&mut w, 400, |w| w.rollout_stop.stopped);
    let ip = w.machines[1].in_place.clone().expect("the record");
    assert_eq!(ip.phase, InPlacePhase::RolledBack);
    assert!(
        ip.failure
            .as_deref()
            .unwrap_or("")
            .contains("not serving on etcd 3.5.1"),
        "{ip:?}"
    );
    assert_eq!(w.machines[1].version, OLD);
    let p = &w.procs["sim-2"];
    assert!(p.running && p.binary == Some(OLD));
    assert_eq!(w.cluster_version, line_of(OLD));
    assert!(w.in_place.failed_starts >= 2, "{}", w.in_place);
    assert_eq!(
        (
            w.in_place.rollbacks,
            w.in_place.rolled_back,
            w.in_place.stopped_rollouts
        ),
        (1, 1, 1)
    );
    // It waited the timeout out, and the cluster kept its quorum and endpoints.
    assert!(w.trace.contains("crash loop"), "{}", w.trace);
    assert_eq!(w.published.len(), 3, "{:?}", w.published);
    assert!(w.has_quorum());
    // Stopped: nothing moves on.
    let begun = w.in_place.begun;
    for _ in 0..100 {
        w.step();
    }
    assert_eq!((w.in_place.begun, w.violation.as_deref()), (begun, None));
}

#[test]
fn the_person_retries_a_stopped_rollout_once_the_faults_stop_and_it_converges() {
    let mut w = in_place(5, OLD, NEW, &[], true);
    w.procs.get_mut("sim-4").expect("sim-4").bad_binary = Some(NEW);
    let o = w.run();
    assert_eq!(o.violation, None, "{}", o.trace);
    assert_eq!(
        (o.in_place.rolled_back, o.in_place.retries),
        (1, 1),
        "{}",
        o.in_place
    );
    assert!(o
        .trace
        .contains("OPERATOR replaces the broken binary and retries"));
}

#[test]
fn the_checker_sees_a_start_below_the_cluster_version() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    w.cluster_version = line_of(NEW);
    w.procs.get_mut("sim-1").expect("sim-1").running = false;
    w.start_machine("sim-1", ClusterState::Existing, false);
    assert!(
        violation(&w).contains("below the cluster version 3.5"),
        "{:?}",
        w.violation
    );
    assert!(!w.procs["sim-1"].running, "etcd refuses it");
}

fn begin(w: &mut World, machine: &str) {
    let a = Action::BeginInPlace {
        machine: machine.into(),
        to: NEW,
        reason: quorum_core::DeleteReason::Outdated,
    };
    assert!(matches!(w.perform(&a, false), Answer::Done));
}

#[test]
fn the_checker_sees_an_in_place_member_published_or_stopped_undrained() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    begin(&mut w, "sim-2");
    let all: Vec<String> = w.machines.iter().map(Machine::client_url).collect();
    w.check_in_place_endpoints(&all);
    assert!(
        violation(&w).contains("out of service in place"),
        "{:?}",
        w.violation
    );
    let mut w = in_place(3, OLD, NEW, &[], false);
    w.publish(
        &w.machines
            .iter()
            .map(Machine::client_url)
            .collect::<Vec<_>>(),
    );
    begin(&mut w, "sim-2");
    let stop = Action::StopMachine {
        machine: "sim-2".into(),
    };
    w.perform(&stop, false);
    assert!(
        violation(&w).contains("stopped in place while its endpoint is published"),
        "{:?}",
        w.violation
    );
}

#[test]
fn the_checker_sees_an_in_place_stop_that_takes_quorum_away() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    begin(&mut w, "sim-2");
    w.now_ms += 10 * PacingPolicy::DEFAULT.drain_ms;
    w.procs.get_mut("sim-3").expect("sim-3").running = false;
    w.perform(
        &Action::StopMachine {
            machine: "sim-2".into(),
        },
        false,
    );
    assert!(
        violation(&w).contains("the in-place stop of sim-2 leaves 1 of 3 voters connected"),
        "{:?}",
        w.violation
    );
}

#[test]
fn the_checker_sees_two_members_out_of_service_and_a_membership_change_of_its_own() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    begin(&mut w, "sim-1");
    begin(&mut w, "sim-2");
    w.check_in_place();
    assert!(
        violation(&w).contains("out of service in place at once"),
        "{:?}",
        w.violation
    );
    let mut w = in_place(3, OLD, NEW, &[], false);
    w.perform(
        &Action::MarkDeleting {
            machine: "sim-1".into(),
            reason: quorum_core::DeleteReason::Outdated,
            remediation: None,
        },
        false,
    );
    assert!(
        violation(&w).contains("changed membership on its own"),
        "{:?}",
        w.violation
    );
}

#[test]
fn the_checker_sees_an_in_place_step_that_does_not_end() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    begin(&mut w, "sim-2");
    for _ in 0..=IN_PLACE_END_STEPS {
        w.check_in_place();
    }
    assert!(
        violation(&w).contains("has not ended after"),
        "{:?}",
        w.violation
    );
}

#[test]
fn a_deposed_controllers_in_place_writes_are_fenced() {
    let mut c = Config::with_two_replicas(1);
    c.scenario = Scenario::InPlace;
    c.fault_per_mille = 0;
    c.trace = true;
    let mut w = World::new(c);
    w.leader_key = None;
    let before = w.machines.clone();
    for a in [
        Action::BeginInPlace {
            machine: "sim-1".into(),
            to: NEW,
            reason: quorum_core::DeleteReason::Outdated,
        },
        Action::SetInPlacePhase {
            machine: "sim-1".into(),
            phase: InPlacePhase::Restarting,
            version: NEW,
            failure: None,
            ca_step: None,
        },
        Action::EndInPlace {
            machine: "sim-1".into(),
            outcome: InPlaceOutcome::Done,
        },
    ] {
        assert!(matches!(w.perform_as(0, &a, true), Answer::Fenced), "{a}");
    }
    assert_eq!(w.machines, before);
    assert_eq!(w.violation, None, "{}", w.trace);
}

/// Without `faults_anywhere`, the stop of a member is never the step a replica is
/// paused in front of (nothing fences a kill); the stop of a machine whose member is
/// gone still is.
#[test]
fn a_stop_of_a_member_is_never_a_stale_step() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    let stop = |m: &str| Action::StopMachine { machine: m.into() };
    assert!(!w.may_pause_in_flight(&stop("sim-1")));
    assert!(w.may_pause_in_flight(&stop("sim-9")));
    w.cfg.faults_anywhere = true;
    assert!(w.may_pause_in_flight(&stop("sim-1")));
}

/// A restart in place renews a TLS machine's certificates, as the controller's does
/// (`Machine::apply` with the end date of certificates issued now): before the shared
/// record write, the simulator recorded the phase and kept the old date.
#[test]
fn a_restart_in_place_renews_the_certificates_as_the_controller_does() {
    let mut w = in_place(3, OLD, NEW, &[], false);
    w.cfg.ca_rotation = true;
    for m in &mut w.machines {
        m.certificates_not_after_unix_s = Some(EPOCH_UNIX_S + 86_400);
    }
    begin(&mut w, "sim-2");
    let restart = Action::SetInPlacePhase {
        machine: "sim-2".into(),
        phase: InPlacePhase::Restarting,
        version: NEW,
        failure: None,
        ca_step: None,
    };
    assert!(matches!(w.perform(&restart, false), Answer::Done));
    let renewed = w.renewed_not_after(w.now_unix_s());
    assert!(renewed.is_some_and(|t| t > EPOCH_UNIX_S + 86_400));
    let date = |w: &World, name: &str| {
        w.machines
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| m.certificates_not_after_unix_s)
    };
    assert_eq!(
        date(&w, "sim-2"),
        renewed,
        "the restarted machine is renewed"
    );
    assert_eq!(
        date(&w, "sim-1"),
        Some(EPOCH_UNIX_S + 86_400),
        "no other machine is"
    );
}
