//! The exhaustive model check of a 3-member rollout, in the test suite.

use quorum_sim::model::{check, Variant};

#[test]
fn every_reachable_state_is_safe_and_can_finish() {
    for v in Variant::ALL {
        let r = check(v);
        println!(
            "{v:?}: {} states, {} transitions, depth {}",
            r.states, r.transitions, r.max_depth
        );
        assert!(
            r.violations.is_empty(),
            "{v:?}: {}",
            r.violations.join("\n")
        );
        assert!(r.goal_states > 0, "{v:?}: the goal is reachable");
        assert!(r.states > 100, "{v:?}: explored only {} states", r.states);
    }
}
