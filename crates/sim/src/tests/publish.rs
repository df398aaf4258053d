//! A learner whose own publish was lost (`publish.rs`): stopped once by the core's rule
//! and started again, well before etcd's own retry; a stop of a learner that answers,
//! or a second one, is a violation.

use super::*;

/// A steady 3-member world scaled to 4: its learner is about to join.
fn joining() -> World {
    let mut w = steady(false);
    w.cp.spec.replicas = 4;
    until(&mut w, 100, |w| w.members.iter().any(|m| m.is_learner));
    w
}

/// The machine of the world's learner.
fn learner_of(w: &World) -> String {
    w.machines
        .iter()
        .find(|m| w.member_of_machine(&m.name).is_some_and(|x| x.is_learner))
        .map(|m| m.name.clone())
        .expect("a learner")
}

#[test]
fn a_lost_publish_is_answered_by_a_restart_before_etcds_retry() {
    let mut w = joining();
    let learner = learner_of(&w);
    until(&mut w, 50, |w| {
        w.procs.get(&learner).is_some_and(|p| p.running)
    });
    // Whatever the seed drew, this learner's first start lost its publish.
    let retry_ms = w.now_ms + quorum_core::publish::ETCD_RETRY_S as u64 * 1_000;
    w.procs.get_mut(&learner).unwrap().publish_lost_until_ms = Some(retry_ms);
    until(&mut w, 200, |w| {
        w.member_of_machine(&learner).is_some_and(|m| !m.is_learner)
    });
    assert!(
        w.now_ms < retry_ms,
        "promoted only after etcd's retry:\n{}",
        w.trace
    );
    assert!(w.publish.restarted >= 1, "{}", w.trace);
    assert!(
        w.trace.contains(&format!("did 'stop {learner}'")),
        "{}",
        w.trace
    );
    until(&mut w, 500, |w| {
        let d = decide(&w.cp, &w.machines, &w.observe());
        d.converged && d.healthy_voters == 4
    });
}

#[test]
fn a_learner_stopped_while_it_answers_or_twice_is_a_violation() {
    let mut w = joining();
    let learner = learner_of(&w);
    until(&mut w, 50, |w| {
        w.procs.get(&learner).is_some_and(|p| p.running)
    });
    let silent = w.now_ms + 5_000;
    w.procs.get_mut(&learner).unwrap().publish_lost_until_ms = Some(silent);
    w.check_learner_stop(&learner);
    assert_eq!(w.violation, None);
    w.procs.get_mut(&learner).unwrap().publish_lost_until_ms = Some(silent);
    w.check_learner_stop(&learner);
    assert!(
        w.violation
            .as_deref()
            .is_some_and(|v| v.contains("a second time")),
        "{:?}",
        w.violation
    );
    let mut w = joining();
    let learner = learner_of(&w);
    until(&mut w, 50, |w| {
        w.procs.get(&learner).is_some_and(|p| p.running) && !w.publish_silent(&learner)
    });
    w.check_learner_stop(&learner);
    assert!(
        w.violation
            .as_deref()
            .is_some_and(|v| v.contains("while it answered")),
        "{:?}",
        w.violation
    );
}
