//! The exhaustive model check of a 3-member rollout, in the test suite: with crashes, a
//! deposed controller, and one failure (a process dying, a member hanging, a disk lost)
//! that remediation repairs.

use quorum_sim::model::{check, Variant};
use std::time::Instant;

#[test]
fn every_reachable_state_is_safe_and_can_finish() {
    for v in Variant::ALL {
        let t = Instant::now();
        let r = check(v);
        println!(
            "{v:?}: {} states, {} transitions, depth {}, {} with a disk lost, {} remediating, {:.2}s",
            r.states,
            r.transitions,
            r.max_depth,
            r.disk_lost_states,
            r.remediation_states,
            t.elapsed().as_secs_f64()
        );
        assert!(
            r.violations.is_empty(),
            "{v:?}: {}",
            r.violations.join("\n")
        );
        assert!(r.goal_states > 0, "{v:?}: the goal is reachable");
        assert!(r.states > 100, "{v:?}: explored only {} states", r.states);
        // The repair path was explored: disks were lost and machines remediated.
        assert!(r.disk_lost_states > 0, "{v:?}");
        assert!(r.remediation_states > 0, "{v:?}");
    }
}
