//! The simulator's own tests: its checker, its etcd, its replicas and its pacing.

use super::*;

fn world(scenario: Scenario, strict: bool) -> World {
    let mut c = Config::new(1);
    c.scenario = scenario;
    c.strict_reconfig = strict;
    c.trace = true;
    World::new(c)
}

#[test]
fn the_checker_sees_quorum_lost_by_an_action() {
    // 3 voters, one partitioned: removing a healthy one leaves 1 of 2 connected.
    let mut w = world(Scenario::RolloutSurge0, false);
    let victim = w.members[2].id;
    w.impairment = Some((Impairment::PartitionedFromPeers(w.members[1].id), 1_000));
    let a = Action::RemoveMember {
        member_id: victim,
        machine: None,
    };
    assert!(matches!(w.perform(&a, false), Answer::Done));
    assert!(
        w.violation.as_deref().unwrap_or("").contains("quorum lost"),
        "{:?}",
        w.violation
    );
}

#[test]
fn the_checker_sees_a_machine_deleted_under_a_voter() {
    let mut w = world(Scenario::Rollout, true);
    let a = Action::DeleteMachine {
        machine: "sim-1".into(),
    };
    w.perform(&a, false);
    assert!(
        w.violation.as_deref().unwrap_or("").contains("still votes"),
        "{:?}",
        w.violation
    );
}

#[test]
fn strict_reconfig_refuses_an_early_add() {
    let mut w = world(Scenario::ScaleUp, true);
    w.members[0].connected_since_ms = w.now_ms;
    let add = |w: &mut World, peer| etcd_answer(EtcdCall::AddLearner, w.add_learner(peer));
    assert_eq!(
        w.add_learner("http://127.9.9.9:2380"),
        Err(UNHEALTHY_CLUSTER)
    );
    w.now_ms += HEALTH_INTERVAL_MS;
    assert!(matches!(add(&mut w, "http://127.9.9.9:2380"), Answer::Done));
    // The same add again is "already done"; a second learner is refused.
    assert_eq!(w.add_learner("http://127.9.9.9:2380"), Err(PEER_URLS_EXIST));
    assert!(matches!(add(&mut w, "http://127.9.9.9:2380"), Answer::Done));
    assert!(
        matches!(add(&mut w, "http://127.9.9.8:2380"), Answer::Refused(m) if m == TOO_MANY_LEARNERS.message)
    );
}

/// Two replicas, no random faults: only what a test injects happens.
fn two_replicas(scenario: Scenario, strict: bool) -> World {
    let mut c = Config::with_two_replicas(1);
    c.scenario = scenario;
    c.strict_reconfig = strict;
    c.fault_per_mille = 0;
    c.trace = true;
    World::new(c)
}

fn steps(w: &mut World, n: u64) {
    for _ in 0..n {
        w.step();
    }
}

#[test]
fn one_replica_leads_without_a_lease() {
    let w = world(Scenario::Rollout, true);
    assert_eq!(w.replicas.len(), 1);
    assert!(w.leader_key.is_none());
    assert_eq!(w.lease_left_ms(0), None);
    assert!(w.holds_lease(0));
}

#[test]
fn a_leader_renews_and_keeps_its_lease() {
    let mut w = two_replicas(Scenario::ScaleUp, true);
    let n = 3 * w.ttl_steps();
    steps(&mut w, n);
    let k = w.leader_key.expect("held");
    assert_eq!((k.holder, k.token), (0, 1));
    let left = w.lease_left_ms(0).expect("a lease");
    assert!(left as u64 >= margin_ms(w.cfg.lease_ttl_ms), "{left}");
    assert_eq!(w.lease, LeaseCounts::default(), "{}", w.trace);
}

#[test]
fn a_paused_leader_is_replaced_and_its_stale_step_lands_once() {
    let mut w = two_replicas(Scenario::Rollout, true);
    let a = Action::StartMachine {
        machine: "sim-1".into(),
        state: ClusterState::Existing,
        initial_cluster: vec![],
    };
    w.replicas[0].in_flight = Some(a);
    let pause_steps = w.ttl_steps() + 5;
    w.pause(0, pause_steps, "");
    steps(&mut w, pause_steps);
    assert_eq!(w.leader_key.map(|k| k.holder), Some(1), "{}", w.trace);
    assert_eq!(w.lease.takeovers, 1);
    assert_eq!(w.lease.stale_side_effects, 1, "{}", w.trace);
    // Its own deadline passed while paused: it holds, and steps down as soon as its
    // renewal is refused (the store no longer has its lease).
    steps(&mut w, 1);
    assert!(w.replicas[0].term.is_none(), "r0 stepped down");
    assert!(
        w.trace
            .contains("r0 steps down (token 1): the store says its lease is gone"),
        "{}",
        w.trace
    );
    assert!(
        w.trace.contains("STALE r0 (token 1, store token 2)"),
        "{}",
        w.trace
    );
    let o = w.run();
    assert_eq!(o.violation, None, "{}", o.trace);
}

#[test]
fn a_store_unavailable_past_the_ttl_holds_the_leader_and_no_one_takes_over() {
    let mut w = two_replicas(Scenario::Rollout, true);
    steps(&mut w, 5);
    let ttl_steps = w.ttl_steps();
    let decisions = w.decisions;
    w.store_unavailable_for_test(3 * ttl_steps * STEP_MS);
    // Up to the last step without a store.
    steps(&mut w, 3 * ttl_steps - 1);
    // Nothing decided, nothing taken over, nobody stepped down.
    assert_eq!(w.decisions, decisions, "{}", w.trace);
    assert_eq!(w.lease.takeovers, 0, "{}", w.trace);
    assert_eq!(w.lease.step_downs, 0, "{}", w.trace);
    assert!(
        w.lease_left_ms(0).is_some_and(|l| l < 0),
        "r0's own deadline passed"
    );
    // Served again: the renewal is answered at once, r0 acts on, with the same token.
    steps(&mut w, 1);
    assert!(w.decisions > decisions, "{}", w.trace);
    assert_eq!(w.leader_key.map(|k| (k.holder, k.token)), Some((0, 1)));
    assert!(w.lease.resume_after_outage_max_ms <= STEP_MS);
    let o = w.run();
    assert_eq!(o.violation, None, "{}", o.trace);
}

#[test]
fn a_paused_store_member_costs_the_replica_that_asks_it_one_attempt() {
    let mut w = two_replicas(Scenario::Rollout, true);
    steps(&mut w, 3);
    let first = w.replicas[0].store.members.preferred();
    w.store_member_paused_for_test(first);
    assert_eq!(w.lease.store_stalls, 1, "{}", w.trace);
    let decisions = w.decisions;
    let attempt_steps = quorum_core::failover::ATTEMPT_TIMEOUT_MS / STEP_MS;
    steps(&mut w, attempt_steps - 1);
    assert_eq!(
        w.decisions, decisions,
        "r0 waits on its attempt: {}",
        w.trace
    );
    steps(&mut w, 2);
    assert!(w.decisions > decisions, "{}", w.trace);
    assert_ne!(w.replicas[0].store.members.preferred(), first);
    let o = w.run();
    assert_eq!(o.violation, None, "{}", o.trace);
}

#[test]
fn a_deposed_leaders_store_write_is_fenced() {
    let mut w = two_replicas(Scenario::ScaleDown, true);
    w.replicas[0].in_flight = Some(Action::MarkDeleting {
        machine: "sim-1".into(),
        reason: quorum_core::DeleteReason::ScaleDown,
        remediation: None,
    });
    let pause_steps = w.ttl_steps() + 1;
    w.pause(0, pause_steps, "");
    steps(&mut w, pause_steps);
    assert_eq!(w.lease.fenced_writes, 1, "{}", w.trace);
    assert_eq!(w.lease.stale_side_effects, 0);
    assert!(w
        .trace
        .contains("r0 steps down (token 1): its in-flight write"));
    assert!(w.replicas[0].term.is_none());
}

#[test]
fn a_lease_lost_after_a_removal_fences_the_old_leader() {
    let mut w = two_replicas(Scenario::Rollout, true);
    w.lose_lease_after_removal = true;
    for _ in 0..2_000 {
        if w.lease.leases_lost_after_removal > 0 && w.lease.takeovers > 0 {
            break;
        }
        w.step();
    }
    assert_eq!(w.lease.leases_lost_after_removal, 1, "{}", w.trace);
    assert!(w.replicas[0].term.is_none(), "{}", w.trace);
    assert_eq!(w.lease.takeovers, 1);
    let o = w.run();
    assert_eq!(o.violation, None, "{}", o.trace);
}

#[test]
fn the_checker_sees_a_side_effect_without_a_lease() {
    let mut w = two_replicas(Scenario::Rollout, true);
    w.leader_key = None;
    let a = Action::StopMachine {
        machine: "sim-9".into(),
    };
    w.perform_as(0, &a, false);
    assert!(
        w.violation
            .as_deref()
            .unwrap_or("")
            .contains("without a valid lease"),
        "{:?}",
        w.violation
    );
}

#[test]
fn the_checker_sees_two_replicas_acting_with_valid_leases() {
    let mut w = two_replicas(Scenario::Rollout, true);
    w.replicas[1].term = w.replicas[0].term;
    let a = Action::StopMachine {
        machine: "sim-9".into(),
    };
    w.perform_as(0, &a, false);
    assert_eq!(w.violation, None);
    w.perform_as(1, &a, false);
    assert!(
        w.violation
            .as_deref()
            .unwrap_or("")
            .contains("acted in one step"),
        "{:?}",
        w.violation
    );
}

/// The hazard the in-flight pause is kept away from without etcd's strict check: a
/// removal decided while 3 voters were healthy, performed stale after one failed.
#[test]
fn a_stale_removal_is_stopped_only_by_etcds_strict_check() {
    for strict in [false, true] {
        let mut w = two_replicas(Scenario::RolloutSurge0, strict);
        let victim = w.members[2].id;
        if let Some(p) = w.procs.get_mut("sim-2") {
            p.running = false;
        }
        w.leader_key = None;
        let a = Action::RemoveMember {
            member_id: victim,
            machine: Some("sim-3".into()),
        };
        let answer = w.perform_as(0, &a, true);
        assert_eq!(w.lease.stale_side_effects, 1);
        if strict {
            assert!(matches!(answer, Answer::Refused(_)));
            assert_eq!(w.violation, None);
        } else {
            assert!(
                w.violation.as_deref().unwrap_or("").contains("quorum lost"),
                "{:?}",
                w.violation
            );
        }
        assert_eq!(
            w.may_pause_in_flight(&a),
            strict,
            "the simulator holds a removal up only with the strict check"
        );
    }
}

#[test]
fn a_lagging_learner_is_not_promoted() {
    let mut w = world(Scenario::ScaleUp, false);
    assert_eq!(w.add_learner("http://127.9.9.9:2380"), Ok(()));
    let id = w.members.last().unwrap().id;
    assert_eq!(w.promote(id), Err(LEARNER_NOT_IN_SYNC));
    assert!(matches!(
        etcd_answer(EtcdCall::Promote, w.promote(id)),
        Answer::Refused(_)
    ));
    let voter = w.members[0].id;
    assert_eq!(w.promote(voter), Err(NOT_A_LEARNER));
    assert!(
        matches!(
            etcd_answer(EtcdCall::Promote, w.promote(voter)),
            Answer::Done
        ),
        "a voter: already done"
    );
}

/// The table's terms turned into the simulator's (its answers, its load balancer
/// reachable or not, or none) and back through the functions `controller_step` uses.
struct Sim {
    w: World,
    calls: u64,
}

impl quorum_core::pacing::Driver for Sim {
    fn machines(&mut self, now_ms: u64, machines: &[Machine]) {
        self.w.now_ms = now_ms;
        self.w.machines = machines.to_vec();
        self.w.observe_pacing(0);
    }
    fn attempt(&mut self, now_ms: u64, a: &Action, outcome: Attempt, random: u64) -> Option<u64> {
        self.w.now_ms = now_ms;
        // etcd's real answers, through the classifier as `perform` passes them.
        let answer = match outcome {
            Attempt::Done => etcd_answer(EtcdCall::AddLearner, Ok(())),
            Attempt::Refused => etcd_answer(EtcdCall::AddLearner, Err(UNHEALTHY_CLUSTER)),
            Attempt::Failed => etcd_answer(EtcdCall::MoveLeader, Err(BAD_LEADER_TRANSFEREE)),
        };
        let attempt = World::attempt_of(&answer).expect("not fenced");
        assert_eq!(attempt, outcome);
        self.w.record_attempt(0, a, attempt, random)
    }
    fn check(&mut self, now_ms: u64, a: &Action, lb_in_step: bool) -> quorum_core::pacing::Verdict {
        self.calls += 1;
        self.w.now_ms = now_ms;
        // Out of step: an unreachable load balancer. In step: a reachable one, or
        // none at all.
        self.w.lb = (!lb_in_step || self.calls.is_multiple_of(2)).then(|| SimLb {
            down_until_step: (!lb_in_step).then_some(u64::MAX),
            ..SimLb::default()
        });
        let in_step = self.w.sync_lb();
        self.w.pacing_verdict(0, a, in_step)
    }
}

#[test]
fn the_simulator_paces_by_the_shared_table() {
    for case in quorum_core::pacing::table() {
        let mut d = Sim {
            w: world(Scenario::Rollout, true),
            calls: 0,
        };
        if let Err(e) = quorum_core::pacing::run_case(&case, &mut d) {
            panic!("{e}");
        }
    }
}

/// No random faults: only what a test injects happens.
fn quiet(scenario: Scenario, strict: bool, load_balancer: bool) -> World {
    let mut c = Config::new(1);
    c.scenario = scenario;
    c.strict_reconfig = strict;
    c.load_balancer = load_balancer;
    c.fault_per_mille = 0;
    c.trace = true;
    World::new(c)
}

#[test]
fn a_refused_add_is_retried_after_a_real_backoff() {
    // The one voter has just (re)connected: etcd's strict check refuses adds for 5 s.
    let mut w = quiet(Scenario::ScaleUp, true, false);
    w.members[0].connected_since_ms = w.now_ms;
    let steps = HEALTH_INTERVAL_MS / STEP_MS - 5;
    for _ in 0..steps {
        w.step();
    }
    let refusals = w
        .trace
        .matches("refused: etcdserver: unhealthy cluster")
        .count() as u64;
    // Backing off 125..=250 ms after the third refusal: about one try in two steps,
    // never one per step.
    assert!(refusals >= steps / 4, "{refusals} of {steps}\n{}", w.trace);
    assert!(
        refusals <= steps * 2 / 3,
        "{refusals} of {steps}\n{}",
        w.trace
    );
    assert!(w.pacing_counts.backoff_holds > 0);
    let o = w.run();
    assert_eq!(o.violation, None, "{}", o.trace);
}

#[test]
fn a_removal_waits_for_the_drain_and_for_the_load_balancer() {
    let mut w = quiet(Scenario::ScaleDown, false, true);
    // The load balancer is unreachable from the start, for 40 steps.
    if let Some(lb) = w.lb.as_mut() {
        lb.down_until_step = Some(40);
    }
    let o = w.run();
    assert_eq!(o.violation, None, "{}", o.trace);
    assert!(o.pacing.lb_holds > 0, "{}", o.trace);
    assert!(o.pacing.drain_holds > 0, "{}", o.trace);
    assert_eq!(o.pacing.paced_removals, 2, "{}", o.trace);
    let first_removal = o.trace.find("did 'remove the member of").expect("removed");
    let healed = o.trace.find("HEAL the load balancer").expect("healed");
    assert!(healed < first_removal, "{}", o.trace);
    assert!(o.trace.contains("the load balancer is not in step"));
    assert!(o.trace.contains("clients drain until"));
}

#[test]
fn the_checker_sees_a_removal_before_the_drain_passed() {
    let mut w = quiet(Scenario::ScaleDown, false, false);
    let url = w.machines[4].client_url();
    let all: Vec<String> = w.machines.iter().map(Machine::client_url).collect();
    let a = Action::RemoveMember {
        member_id: w.members[4].id,
        machine: Some(w.machines[4].name.clone()),
    };
    // Published: its clients are pointed at it.
    w.publish(&all);
    w.perform(&a, false);
    assert!(
        w.violation
            .as_deref()
            .unwrap_or("")
            .contains("while its endpoint is published"),
        "{:?}",
        w.violation
    );
    // Unpublished, but only 400 ms ago.
    let mut w = quiet(Scenario::ScaleDown, false, false);
    w.publish(&all);
    w.publish(
        &all.iter()
            .filter(|u| **u != url)
            .cloned()
            .collect::<Vec<_>>(),
    );
    w.now_ms += 400;
    w.perform(&a, false);
    assert!(
        w.violation
            .as_deref()
            .unwrap_or("")
            .contains("400 ms after its endpoint was unpublished"),
        "{:?}",
        w.violation
    );
    // 500 ms: drained.
    let mut w = quiet(Scenario::ScaleDown, false, false);
    w.publish(&all);
    w.publish(
        &all.iter()
            .filter(|u| **u != url)
            .cloned()
            .collect::<Vec<_>>(),
    );
    w.now_ms += PacingPolicy::DEFAULT.drain_ms;
    w.perform(&a, false);
    assert_eq!(w.violation, None);
}

#[test]
fn the_checker_sees_a_removal_the_load_balancer_still_serves() {
    let mut w = quiet(Scenario::ScaleDown, false, true);
    let all: Vec<String> = w.machines.iter().map(Machine::client_url).collect();
    let a = Action::RemoveMember {
        member_id: w.members[4].id,
        machine: Some(w.machines[4].name.clone()),
    };
    w.publish(&all);
    assert!(w.sync_lb());
    // Unpublished and drained, but the load balancer went away before it caught up.
    if let Some(lb) = w.lb.as_mut() {
        lb.down_until_step = Some(u64::MAX);
    }
    w.publish(&all[..4]);
    assert!(!w.sync_lb());
    w.now_ms += 10 * PacingPolicy::DEFAULT.drain_ms;
    w.perform(&a, false);
    assert!(
        w.violation
            .as_deref()
            .unwrap_or("")
            .contains("while the load balancer still sends clients to it"),
        "{:?}",
        w.violation
    );
}
