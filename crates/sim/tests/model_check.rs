//! The exhaustive model check of a 3-member rollout, in the test suite: with crashes, a
//! deposed controller, and one failure (a process dying, a member hanging, a disk lost)
//! that remediation repairs; and the in-place rollout with a deposed controller, a new
//! binary that fails to start, and its rollback; and a recovery after quorum loss from
//! the survivor (fence, force, grow back) with crashes and a deposed controller; and a
//! sharded fleet, whose control plane's shard moves between replicas; and a CA rotation,
//! every member replaced three times, with trust between every two running members
//! checked in every state; and members on hosts, one host lost for a while; and a
//! chained upgrade, two rollouts one after the other.

use quorum_sim::model::{check, Variant};
use std::time::Instant;

#[test]
fn every_reachable_state_is_safe_and_can_finish() {
    check_each(Variant::ALL.into_iter().filter(|v| !v.chain));
}

/// A chained upgrade's two rollouts, with a crash between the links among the rest:
/// the largest variant, in a test of its own so the two run side by side.
#[test]
fn a_chained_upgrade_is_safe_and_always_finishes_its_road() {
    let chain: Vec<Variant> = Variant::ALL.into_iter().filter(|v| v.chain).collect();
    assert_eq!(chain.len(), 1, "{chain:?}");
    assert!(chain[0].deposed && chain[0].etcd_strict);
    check_each(chain.into_iter());
}

fn check_each(variants: impl Iterator<Item = Variant>) {
    for v in variants {
        let t = Instant::now();
        let r = check(v);
        println!(
            "{v:?}: {} states, {} transitions, depth {}, {} with a disk lost, {} remediating, {} in place ({} rolling back or rolled back, {} with a broken binary), {} in a CA rotation's last phase, {:.2}s",
            r.states,
            r.transitions,
            r.max_depth,
            r.disk_lost_states,
            r.remediation_states,
            r.in_place_states,
            r.rollback_states,
            r.bad_binary_states,
            r.ca_last_phase_states,
            t.elapsed().as_secs_f64()
        );
        assert!(
            r.violations.is_empty(),
            "{v:?}: {}",
            r.violations.join("\n")
        );
        assert!(r.goal_states > 0, "{v:?}: the goal is reachable");
        assert!(r.states > 100, "{v:?}: explored only {} states", r.states);
        // The repair path was explored: disks were lost and machines remediated. (A
        // recovery begins with two disks lost and no further one: its repair is the
        // rebuild, whose states the explorer walks all the same.)
        // On hosts the one failure is a host lost for a while, no disk.
        if !v.recovery && !v.hosts {
            assert!(r.disk_lost_states > 0, "{v:?}");
        }
        if !v.recovery {
            assert!(r.remediation_states > 0, "{v:?}");
        }
        // The in-place variant explored its steps, a new binary failing to start, and
        // rollbacks.
        if v.sharded {
            assert!(v.deposed && v.etcd_strict, "{v:?}");
        }
        if v.ca_rotation {
            assert!(r.ca_last_phase_states > 0, "{v:?}");
        }
        if v.in_place {
            assert!(r.in_place_states > 0, "{v:?}");
            assert!(r.bad_binary_states > 0, "{v:?}");
            assert!(r.rollback_states > 0, "{v:?}");
        }
    }
}
