//! A sharded fleet: the shard goes to the replica the core assigns it to when one
//! joins, a handover that keeps acting is a violation, and sharded seeds with every
//! fault hold every invariant.

use super::*;

/// Three replicas of a sharded fleet, no random faults: r2 joins during the run.
fn sharded(shards: u32) -> World {
    let mut c = Config::with_two_replicas(1);
    c.replicas = 3;
    c.shards = shards;
    c.fault_per_mille = 0;
    c.trace = true;
    World::new(c)
}

/// A shard count under which the simulated control plane's shard goes to a different
/// replica among two live ones (r0, r1) than among three (with the joiner r2).
fn count_that_moves_on_join() -> u32 {
    (2..=quorum_core::shards::MAX_SHARDS)
        .find(|n| {
            let s = quorum_core::shards::shard_of("sim", *n);
            quorum_core::shards::owner_of(s, &["r0", "r1"])
                != quorum_core::shards::owner_of(s, &["r0", "r1", "r2"])
        })
        .expect("some count moves the shard")
}

#[test]
fn the_shard_is_handed_to_the_replica_it_is_assigned_to_when_one_joins() {
    let n = count_that_moves_on_join();
    let w = sharded(n);
    let s = w.shard;
    let first = w.leader_key.expect("led from the start").holder;
    assert!(w.assigned(first), "{}", w.trace);
    // Of the two registered replicas, only the assigned one campaigns. (r2, not yet
    // started, counts itself live, as a replica does: it will claim the shard.)
    for i in 0..2 {
        assert_eq!(w.assigned(i), i == first, "r{i}, shard {s}");
    }
    assert!(w.assigned(2), "shard {s} goes to r2 once it joins");
    let out = w.run();
    assert_eq!(out.violation, None, "{}", out.trace);
    // r2 joined, the shard moved to its new owner by a handover (a revoked lease, not
    // an expiry), and the rollout finished under it.
    assert!(out.trace.contains("r2 restarts"), "{}", out.trace);
    assert!(out.lease.handovers >= 1, "{}", out.trace);
    assert_eq!(out.lease.step_downs, 0, "{}", out.trace);
    let owner = quorum_core::shards::owner_of(s, &["r0", "r1", "r2"]).unwrap();
    assert!(
        out.trace.contains(&format!("{owner} takes the lead")),
        "{}",
        out.trace
    );
}

#[test]
fn a_handover_that_keeps_acting_is_seen_by_the_checker() {
    // A holder that revoked its lease but kept its term (a handover that did not stop
    // its passes) acts beside the new holder: the checker must say so.
    let n = count_that_moves_on_join();
    let mut w = sharded(n);
    let first = w.leader_key.expect("led").holder;
    let kept = w.replicas[first].term;
    w.hand_over(first);
    let other = (0..3).find(|i| *i != first).unwrap();
    w.take_lead(other);
    w.replicas[first].term = kept;
    let a = Action::StopMachine {
        machine: "sim-9".into(),
    };
    w.perform_as(other, &a, false);
    w.perform_as(first, &a, false);
    w.check_invariants();
    assert!(
        w.violation.is_some() || w.lease.stale_side_effects > 0,
        "{}",
        w.trace
    );
}

#[test]
fn sharded_seeds_with_every_fault_hold_every_invariant() {
    for seed in 0..200 {
        for (replicas, shards) in [(2u8, 4u32), (3, 6)] {
            let mut c = Config::new(seed);
            c.replicas = replicas;
            c.shards = shards;
            let o = crate::run(c);
            assert_eq!(o.violation, None, "{}", crate::replay_command(&o));
        }
    }
}
