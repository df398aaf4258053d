//! A person's `quorum member replace|restart` in the middle of runs with faults.

use super::*;

/// Runs in which a person asks for one member to be replaced or restarted, under the
/// faults of their scenario, with one and two controllers: every run converges with
/// the request carried out (a run ends converged only with no request left, and a
/// replacement's machine gone).
#[test]
fn member_requests_are_carried_out_under_faults() {
    let mut asked = BTreeMap::new();
    for seed in (0..600u64).filter(|s| Config::new(*s).member_request) {
        for cfg in [Config::new(seed), Config::with_two_replicas(seed)] {
            let o = run(cfg);
            assert!(
                o.violation.is_none(),
                "{:?}: {}",
                o.violation,
                replay_command(&o)
            );
            if let Some(r) = o.member_request {
                *asked.entry(r.to_string()).or_insert(0) += 1;
            }
        }
    }
    assert!(asked.get("replace").is_some_and(|n| *n > 40), "{asked:?}");
    assert!(asked.get("restart").is_some_and(|n| *n > 40), "{asked:?}");
}
