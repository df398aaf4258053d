//! The in-place step (`strategy: InPlace`): situations and the decision expected, and
//! whole in-place rollouts replayed in an ideal world.

use super::*;
use InPlacePhase::*;

const MID: &str = "3.5.0";

#[test]
fn in_place_table() {
    let cases: Vec<(&str, Sit, &str)> = vec![
        // ---- beginning: followers first (oldest first), the leader last
        (
            "a follower begins first: it leaves the endpoints",
            sit(3, NEW, old3()).in_place(),
            "begin-in-place:cp-2",
        ),
        (
            "the oldest follower when the first machine leads another",
            sit(3, NEW, old3()).in_place().leader(2),
            "begin-in-place:cp-1",
        ),
        (
            "the leader last, once it is the only one outdated",
            sit(3, NEW, vec![m(1, OLD), m(2, NEW), m(3, NEW)]).in_place(),
            "begin-in-place:cp-1",
        ),
        (
            "five members: a follower first",
            sit(5, NEW, vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD), m(5, OLD)])
                .in_place()
                .leader(3),
            "begin-in-place:cp-1",
        ),
        (
            "hosts: in place needs no host of its own beside the one it replaces",
            sit(3, NEW, old3()).in_place().on_hosts(3),
            "begin-in-place:cp-2",
        ),
        (
            "hosts: a replacement with no free host is refused, with the ways out",
            sit(3, NEW, old3()).on_hosts(3),
            "refuse: beside the one it replaces: `quorum upgrade cp --strategy InPlace`; or cancel the rollout, which has changed no member yet: `quorum upgrade cp --abort` (back to etcd 3.4.23)",
        ),
        (
            "hosts: a fourth host takes the surge machine",
            sit(3, NEW, old3()).on_hosts(4),
            "allocate-machine",
        ),
        (
            "hosts: a rollout that changed a member cannot be cancelled, only switched",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(3, NEW)]).on_hosts(3),
            "refuse: beside the one it replaces: `quorum upgrade cp --strategy InPlace`",
        ),
        (
            "hosts: a scale-up with no free host is refused",
            sit(5, OLD, old3()).on_hosts(3),
            "refuse: not adding a machine: no host can take another member",
        ),
        (
            "the strategy Replace still replaces",
            sit(3, NEW, old3()),
            "allocate-machine",
        ),
        (
            "preflight: every member healthy (an unreachable one is remediation's first)",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(3, OLD).unreachable()]).in_place(),
            "wait: cp-3: unreachable",
        ),
        (
            "preflight: a failed quorum read is remediation's first",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(3, OLD).quorum_read_fails()]).in_place(),
            "wait: cp-3: a quorum read through it timed out",
        ),
        (
            "preflight: every voter answered a quorum read (one not tried is not proof)",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), Fx { quorum_read: None, ..m(3, OLD) }]).in_place(),
            "wait: cp-3 has not answered a quorum read",
        ),
        (
            "preflight: no alarm",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(3, OLD).alarm("CORRUPT")]).in_place(),
            "wait: cp-3: alarm CORRUPT",
        ),
        (
            "never with fewer than 3 voters",
            sit(1, NEW, vec![m(1, OLD)]).in_place(),
            "refuse: needs 3 or more voters",
        ),
        (
            "certificates due are renewed in place, not replaced",
            sit(3, NEW, vec![m(1, NEW).certs_for(400), m(2, NEW).certs_for(10), m(3, NEW).certs_for(400)])
                .in_place(),
            "begin-in-place:cp-2",
        ),
        // ---- draining
        (
            "draining: a running follower is stopped (after the drain, the pacing's)",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(Draining, OLD, NEW, 1), m(3, OLD)])
                .in_place(),
            "stop-machine:cp-2",
        ),
        (
            "draining: leadership moves off it first",
            sit(3, NEW, vec![m(1, NEW), m(2, NEW), m(3, OLD).in_place(Draining, OLD, NEW, 1)])
                .in_place()
                .leader(3),
            "move-leader:cp-1",
        ),
        (
            "draining: stopped, its new binary is recorded before it starts",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(Draining, OLD, NEW, 1).stopped(), m(3, OLD)])
                .in_place(),
            "set-in-place-phase:cp-2",
        ),
        (
            "draining: not stopped while another member is down: the step is abandoned, it serves again",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(Draining, OLD, NEW, 1), m(3, OLD).unreachable()])
                .in_place(),
            "end-in-place:cp-2",
        ),
        (
            // Found by the simulator: the refusal to stop it held up the remediation of
            // the other member, which waited for the rollout in turn, for ever.
            "draining: another member failed long enough: the step is abandoned so that remediation can act",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(Draining, OLD, NEW, 1), m(3, OLD).lost_data()])
                .in_place()
                .unhealthy_for(3, 60),
            "end-in-place:cp-2",
        ),
        (
            // Found by the simulator: the NOSPACE repair comes after the in-place rule.
            "draining: a NOSPACE alarm: the step is abandoned so that the space can be repaired",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(Draining, OLD, NEW, 1), m(3, OLD).alarm("NOSPACE")])
                .in_place()
                .cluster_alarm(3, "NOSPACE"),
            "end-in-place:cp-2",
        ),
        (
            "draining: a version changed before the restart abandons the step",
            sit(3, MID, vec![m(1, OLD), m(2, OLD).in_place(Draining, OLD, NEW, 1), m(3, OLD)])
                .in_place(),
            "end-in-place:cp-2",
        ),
        (
            // Found by the simulator: recorded in the second of that start, the phase took
            // it for its own, waited out its backoff and never tried the new binary.
            "draining: stopped in the second it was last started: the restart is recorded a second later",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(Draining, OLD, NEW, 1).stopped().started_ago(&[0]), m(3, OLD)])
                .in_place(),
            "wait: its restart is recorded at the next second",
        ),
        // ---- restarting
        (
            "restarting: started on the new binary",
            sit(3, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 0).stopped(), m(3, OLD)])
                .in_place(),
            "start-machine:cp-2",
        ),
        (
            "restarting: it serves on the new version, caught up: back in service",
            sit(3, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 2), m(3, OLD)])
                .in_place(),
            "end-in-place:cp-2",
        ),
        (
            "restarting: still catching up",
            {
                let mut s = sit(3, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 2), m(3, OLD)])
                    .in_place()
                    .log(5000);
                s.machines[1].applied = 100;
                s
            },
            "wait: catching up",
        ),
        (
            "restarting: not answering yet, within the deadline",
            sit(3, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 5).unreachable(), m(3, OLD)])
                .in_place(),
            "wait: waiting for cp-2 to serve on etcd 3.5.1",
        ),
        (
            "restarting: it exited on the new binary; restarted after its backoff",
            sit(3, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 5).stopped().started_ago(&[3, 1]), m(3, OLD)])
                .in_place(),
            "wait: next start in",
        ),
        (
            "restarting: past the deadline, rolled back while the cluster is still 3.4",
            sit(3, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 61).stopped().started_ago(&[1]), m(3, OLD)])
                .in_place()
                .cluster_version("3.4"),
            "set-in-place-phase:cp-2",
        ),
        (
            "restarting: past the deadline, started this very second: the rollback is recorded a second later",
            sit(3, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 61).stopped().started_ago(&[0]), m(3, OLD)])
                .in_place()
                .cluster_version("3.4"),
            "wait: its rollback is recorded at the next second",
        ),
        (
            "restarting: past the deadline with an unknown cluster version: no rollback guessed, remediation's",
            sit(3, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 61).stopped().started_ago(&[1]), m(3, OLD)])
                .in_place(),
            "wait: cp-2: its process is not running; replaced unless",
        ),
        (
            "restarting: past the deadline once the cluster version moved: remediation's",
            sit(3, NEW, vec![m(1, NEW), m(2, NEW), m(3, NEW).in_place(Restarting, OLD, NEW, 61).unreachable()])
                .in_place()
                .cluster_version("3.5")
                .unhealthy_for(3, 61),
            "mark-deleting:cp-3",
        ),
        (
            "restarting: another member that crashed meanwhile is restarted first",
            sit(5, NEW, vec![m(1, OLD), m(2, NEW).in_place(Restarting, OLD, NEW, 1).unreachable(), m(3, OLD), m(4, OLD).stopped(), m(5, OLD)])
                .in_place(),
            "start-machine:cp-4",
        ),
        // ---- rolling back
        (
            "rolling back: the new binary still runs: stopped",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(RollingBack, OLD, NEW, 1).runs(NEW).unreachable(), m(3, OLD)])
                .in_place()
                .cluster_version("3.4"),
            "stop-machine:cp-2",
        ),
        (
            // Found by the model check: the member, cut off past its deadline, came back
            // on the new binary and the cluster version moved; stopping it to start the
            // old one would have left it a binary etcd refuses to run.
            "rolling back: the cluster version moved meanwhile: it goes on with the new binary",
            sit(3, NEW, vec![m(1, NEW), m(2, OLD).in_place(RollingBack, OLD, NEW, 1).runs(NEW), m(3, NEW)])
                .in_place()
                .cluster_version("3.5"),
            "set-in-place-phase:cp-2",
        ),
        (
            "rolling back: stopped, the cluster version moved: started on the new binary, not the old",
            sit(3, NEW, vec![m(1, NEW), m(2, OLD).in_place(RollingBack, OLD, NEW, 1).stopped(), m(3, NEW)])
                .in_place()
                .cluster_version("3.5"),
            "set-in-place-phase:cp-2",
        ),
        (
            "rolling back: the cluster version unknown: nothing stopped or started",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(RollingBack, OLD, NEW, 1).runs(NEW).unreachable(), m(3, OLD)])
                .in_place(),
            "wait: not rolling cp-2 back yet: the cluster version is unknown",
        ),
        (
            "rolling back: stopped: started on the old binary",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(RollingBack, OLD, NEW, 1).stopped(), m(3, OLD)])
                .in_place()
                .cluster_version("3.4"),
            "start-machine:cp-2",
        ),
        (
            "rolling back: serving again on the old binary: the rollout stops",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(RollingBack, OLD, NEW, 2), m(3, OLD)])
                .in_place(),
            "end-in-place:cp-2",
        ),
        (
            "rolled back: the rollout is stopped and says how to go on",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).in_place(RolledBack, OLD, NEW, 20), m(3, OLD)])
                .in_place(),
            "refuse: rollout stopped: cp-2 was rolled back to etcd 3.4.23",
        ),
        (
            "rolled back: another version chosen: the memory is forgotten",
            sit(3, MID, vec![m(1, OLD), m(2, OLD).in_place(RolledBack, OLD, NEW, 20), m(3, OLD)])
                .in_place(),
            "end-in-place:cp-2",
        ),
    ];
    for (name, s, expect) in &cases {
        check(name, s, expect);
    }
}

#[test]
fn a_rollback_records_the_previous_binary_and_why() {
    let s = sit(
        3,
        NEW,
        vec![
            m(1, OLD),
            m(2, NEW)
                .in_place(Restarting, OLD, NEW, 61)
                .stopped()
                .started_ago(&[1]),
            m(3, OLD),
        ],
    )
    .in_place()
    .cluster_version("3.4");
    let d = check("rollback", &s, "set-in-place-phase:cp-2");
    match &d.actions[0] {
        Action::SetInPlacePhase {
            phase,
            version,
            failure,
            ..
        } => {
            assert_eq!(*phase, RollingBack);
            assert_eq!(version.to_string(), OLD);
            let why = failure.as_deref().unwrap_or_default();
            assert!(why.contains("not serving on etcd 3.5.1 after 61s"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_machine_out_of_service_in_place_is_no_endpoint_and_no_transferee() {
    let s = sit(
        3,
        NEW,
        vec![
            m(1, NEW),
            m(2, NEW).in_place(Restarting, OLD, NEW, 2).applied(1),
            m(3, OLD),
        ],
    )
    .in_place()
    .log(5000)
    .leader(3);
    let (cp, machines, observed) = s.build();
    let d = decide(&cp, &machines, &observed);
    assert!(
        !d.endpoints.iter().any(|e| e.contains("127.9.0.2")),
        "{:?}",
        d.endpoints
    );
    assert_eq!(d.endpoints.len(), 2);
}

/// Ideal world for the in-place step: every action succeeds at once.
pub(crate) fn apply_in_place(w: &mut Sit, a: &Action) {
    let serial_of = |n: &str| n.trim_start_matches("cp-").parse::<u64>().unwrap();
    let text = |v: Version| -> &'static str {
        [OLD, MID, NEW]
            .into_iter()
            .find(|s| *s == v.to_string())
            .unwrap()
    };
    match a {
        Action::BeginInPlace {
            machine,
            to,
            reason,
        } => {
            let f = w
                .machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap();
            f.in_place = Some(InPlace {
                from: f.version.parse().unwrap(),
                to: *to,
                phase: Draining,
                since_unix_s: NOW_UNIX_S,
                reason: *reason,
                failure: None,
            });
        }
        Action::SetInPlacePhase {
            machine,
            phase,
            version,
            failure,
            ..
        } => {
            let f = w
                .machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap();
            f.version = text(*version);
            let ip = f.in_place.as_mut().unwrap();
            ip.phase = *phase;
            ip.failure = failure.clone();
        }
        Action::EndInPlace { machine, outcome } => {
            let f = w
                .machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap();
            match outcome {
                InPlaceOutcome::RolledBack => f.in_place.as_mut().unwrap().phase = RolledBack,
                _ => f.in_place = None,
            }
        }
        Action::StartMachine { machine, .. } => {
            let f = w
                .machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap();
            f.running = true;
            f.reachable = true;
            f.runs = None;
        }
        other => apply_ideal(w, other),
    }
}

#[test]
fn in_place_rollouts_replay_to_convergence_without_a_membership_change() {
    for n in [3u64, 5] {
        for (from, to) in [(OLD, MID), (MID, NEW), (OLD, NEW)] {
            let mut world = sit(n as u32, to, (1..=n).map(|i| m(i, from)).collect()).in_place();
            world.leader = 2;
            let mut order = vec![];
            let mut steps = 0;
            loop {
                steps += 1;
                assert!(steps < 200, "no convergence for {n} members {from} -> {to}");
                let (cp, machines, observed) = world.build();
                let d = decide(&cp, &machines, &observed);
                assert!(
                    d.actions.iter().all(|a| !a.is_membership_change()),
                    "an in-place rollout changed membership: {:?}",
                    d.actions
                );
                let down = world.machines.iter().filter(|f| !f.running).count();
                assert!(down <= 1, "{down} members down at once");
                assert_eq!(world.machines.len(), n as usize);
                if d.converged {
                    break;
                }
                let action = d
                    .actions
                    .first()
                    .cloned()
                    .unwrap_or_else(|| panic!("stuck: {d:?}"));
                if let Action::BeginInPlace { machine, .. } = &action {
                    order.push(machine.clone());
                }
                apply_in_place(&mut world, &action);
            }
            assert!(world
                .machines
                .iter()
                .all(|f| f.version == to && f.in_place.is_none()));
            // Followers first, the leader (cp-2 at the start) last.
            assert_eq!(order.len(), n as usize, "{order:?}");
            assert_eq!(order.last().map(String::as_str), Some("cp-2"), "{order:?}");
        }
    }
}

/// A rollout that changed no member is taken back (`abort::untouched`) and switched
/// between steps only (`abort::mid_step`): (case, situation, untouched version, the
/// words of what holds the strategy, the words of what changed a member).
#[test]
fn a_rollout_is_cancelled_only_untouched_and_switched_only_between_steps() {
    type Row = (
        &'static str,
        Sit,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    );
    let rows: Vec<Row> = vec![
        ("no rollout", sit(3, OLD, old3()), None, None, None),
        (
            "recorded, nothing changed",
            sit(3, NEW, old3()),
            Some(OLD),
            None,
            None,
        ),
        (
            "a member replaced on the new version",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(4, NEW)]),
            None,
            None,
            Some("cp-4 already runs etcd 3.5.1"),
        ),
        (
            "a surge machine joining",
            sit(
                3,
                NEW,
                vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, NEW).learner()],
            ),
            None,
            Some("4 machines for 3 replicas"),
            Some("cp-4 already runs etcd 3.5.1"),
        ),
        (
            "a machine leaving",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(3, OLD).deleting()]),
            None,
            Some("cp-3 is leaving"),
            Some("cp-3 is leaving"),
        ),
        (
            "a member draining for its in-place step",
            sit(
                3,
                NEW,
                vec![
                    m(1, OLD),
                    m(2, OLD).in_place(Draining, OLD, NEW, 1),
                    m(3, OLD),
                ],
            )
            .in_place(),
            None,
            Some("cp-2 is being restarted in place (draining)"),
            Some("cp-2 is being restarted in place"),
        ),
        (
            "a member rolled back runs its old version: untouched",
            sit(
                3,
                NEW,
                vec![
                    m(1, OLD),
                    m(2, OLD).in_place(RolledBack, OLD, NEW, 1),
                    m(3, OLD),
                ],
            )
            .in_place(),
            Some(OLD),
            None,
            None,
        ),
    ];
    for (case, s, untouched, held, changed) in rows {
        let (cp, machines, _) = s.build();
        let got = abort::untouched(&cp.spec, &machines).map(|v| v.to_string());
        assert_eq!(got.as_deref(), untouched, "{case}");
        let mid = abort::mid_step(&cp.spec, &machines);
        match (mid, held) {
            (None, None) => {}
            (Some(g), Some(w)) => assert!(g.contains(w), "{case}: {g}"),
            (g, w) => panic!("{case}: mid_step {g:?}, want {w:?}"),
        }
        match (abort::changed_member(&cp.spec, &machines), changed) {
            (None, None) => {}
            (Some(g), Some(w)) => assert!(g.contains(w), "{case}: {g}"),
            (g, w) => panic!("{case}: changed_member {g:?}, want {w:?}"),
        }
    }
}

/// `quorum member replace|restart`: a person's request about one machine is rolled as
/// an outdated machine would be, by the step it asks for whatever the strategy, with
/// every rule of that step (preflight, one at a time, quorum kept).
#[test]
fn a_member_asked_to_be_replaced_or_restarted() {
    use MachineRequest::{Replace, Restart};
    let at = |serial: u64, r| {
        let mut ms = vec![m(1, NEW), m(2, NEW), m(3, NEW)];
        ms[serial as usize - 1] = m(serial, NEW).asked(r);
        ms
    };
    let cases: Vec<(&str, Sit, &str)> = vec![
        (
            "replace: a surge machine first",
            sit(3, NEW, at(2, Replace)),
            "allocate-machine",
        ),
        (
            "replace: the one asked for leaves once its successor joined, not another",
            sit(3, NEW, {
                let mut ms = at(2, Replace);
                ms.push(m(4, NEW));
                ms
            }),
            "mark-deleting:cp-2",
        ),
        (
            "replace under InPlace is still a replacement",
            sit(3, NEW, at(2, Replace)).in_place(),
            "allocate-machine",
        ),
        (
            "replace with maxSurge 0: the one asked for leaves first",
            sit(3, NEW, at(3, Replace)).surge(0),
            "mark-deleting:cp-3",
        ),
        (
            "restart: begun in place under Replace too",
            sit(3, NEW, at(3, Restart)),
            "begin-in-place:cp-3",
        ),
        (
            "restart: only once every member is healthy",
            sit(
                3,
                NEW,
                vec![m(1, NEW).unreachable(), m(2, NEW), m(3, NEW).asked(Restart)],
            ),
            "wait: cp-1: unreachable",
        ),
        (
            "restart: refused with one voter (it would take the only member down)",
            sit(1, NEW, vec![m(1, NEW).asked(Restart)]),
            "refuse: an in-place rollout needs 3 or more voters",
        ),
        (
            "restart waits for the version rollout by replacement to end",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(3, OLD).asked(Restart)]),
            "allocate-machine",
        ),
        (
            "restart under InPlace rides with the version rollout",
            sit(3, NEW, vec![m(1, NEW), m(2, NEW), m(3, OLD).asked(Restart)]).in_place(),
            "begin-in-place:cp-3",
        ),
    ];
    for (case, s, expect) in &cases {
        check(case, s, expect);
    }
    // The step's reason says who asked, and a restart keeps the version.
    let d = check(
        "restart",
        &sit(3, NEW, at(1, Restart)).leader(2),
        "begin-in-place:cp-1",
    );
    match &d.actions[0] {
        Action::BeginInPlace { to, reason, .. } => {
            assert_eq!(to.to_string(), NEW);
            assert_eq!(*reason, DeleteReason::Requested);
        }
        a => panic!("{a:?}"),
    }
    let up = d.condition(ConditionKind::UpToDate).unwrap();
    assert!(
        !up.status && up.message.contains("cp-1 (restart asked for)"),
        "{up:?}"
    );
}

/// The request's record writes, shared by every driver: a restart asked for becomes
/// its step in one write; a step that restarted the member answers a restart asked
/// meanwhile, one abandoned before its stop leaves it asked.
#[test]
fn a_restart_request_is_handed_to_its_step_and_answered_by_its_end() {
    let asked = |r| {
        sit(3, NEW, vec![m(1, NEW), m(2, NEW).asked(r), m(3, NEW)])
            .build()
            .1
    };
    let new: Version = NEW.parse().unwrap();
    let mut ms = asked(MachineRequest::Restart);
    assert!(ms[1].begin_in_place(new, DeleteReason::Requested, NOW_UNIX_S));
    assert_eq!(ms[1].requested, None);
    assert!(
        !ms[1].begin_in_place(new, DeleteReason::Requested, NOW_UNIX_S),
        "already begun"
    );
    // Asked again while its step runs, then the step ends: answered, or not.
    for (outcome, left) in [
        (InPlaceOutcome::Done, None),
        (InPlaceOutcome::RolledBack, None),
        (InPlaceOutcome::Abandoned, Some(MachineRequest::Restart)),
    ] {
        let mut m2 = ms[1].clone();
        m2.requested = Some(MachineRequest::Restart);
        assert!(m2.end_in_place(&outcome, NOW_UNIX_S));
        assert_eq!(m2.requested, left, "{outcome:?}");
    }
    // A replacement asked for is not a restart's to answer.
    let mut ms = asked(MachineRequest::Replace);
    assert!(ms[1].begin_in_place(new, DeleteReason::CertificatesExpiring, NOW_UNIX_S));
    assert!(ms[1].end_in_place(&InPlaceOutcome::Done, NOW_UNIX_S));
    assert_eq!(ms[1].requested, Some(MachineRequest::Replace));
}

/// `Machine::apply`, the record write of every record-only action for every driver:
/// idempotent, about its own record only, and the first reason for leaving stands.
#[test]
fn a_record_write_applies_once_and_to_its_own_machine_only() {
    let mut ms = sit(3, OLD, old3()).build().1;
    let at = record::Applying {
        now_unix_s: NOW_UNIX_S,
        renewed_not_after_unix_s: None,
    };
    let first = Remediation {
        machine: "cp-2".into(),
        attempt: 1,
        at_unix_s: NOW_UNIX_S,
        reason: "lost its data".into(),
    };
    let mark = |r: &Remediation| Action::MarkDeleting {
        machine: "cp-2".into(),
        reason: DeleteReason::Unhealthy,
        remediation: Some(r.clone()),
    };
    assert!(!ms[0].apply(&mark(&first), &at), "not cp-1's record");
    assert!(!ms[0].deleting);
    assert!(ms[1].apply(&mark(&first), &at));
    assert!(ms[1].deleting);
    let second = Remediation {
        attempt: 2,
        ..first.clone()
    };
    assert!(!ms[1].apply(&mark(&second), &at), "already leaving");
    assert_eq!(ms[1].remediation, Some(first));
    // An action that is no record write changes nothing.
    let stop = Action::StopMachine {
        machine: "cp-3".into(),
    };
    assert!(!ms[2].apply(&stop, &at));
    // An in-place step, begun once.
    let new: Version = NEW.parse().unwrap();
    let begin = Action::BeginInPlace {
        machine: "cp-3".into(),
        to: new,
        reason: DeleteReason::Outdated,
    };
    assert!(ms[2].apply(&begin, &at));
    assert!(!ms[2].apply(&begin, &at), "already begun");
}
