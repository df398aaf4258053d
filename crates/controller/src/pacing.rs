//! The controller's side of the one pacing policy (`quorum_core::pacing`, which the
//! pass drives on `quorum_clock::monotonic_ms`): `rand` for the jitter, and the
//! translation of what it saw (the load balancer's sync, how an action ended) into the
//! core's terms. The numbers and the rules live in the core; the simulator drives the
//! same type.

use crate::{balancer, ActionError};
use quorum_core::pacing::Attempt;

/// A uniform random value for the backoff's jitter.
pub fn jitter() -> u64 {
    rand::random()
}

/// How the controller classifies an action's end for pacing: etcd's transient refusals,
/// a call that timed out (its effect unknown; the next observation tells) and no leader
/// to send it to are refusals, retried soon; anything else is a failure.
pub fn attempt_of<T>(res: &Result<T, ActionError>) -> Attempt {
    match res {
        Ok(_) => Attempt::Done,
        Err(e) if e.is_refusal() => Attempt::Refused,
        Err(_) => Attempt::Failed,
    }
}

/// The load balancer is in step unless this pass could not bring it in step (no load
/// balancer: nothing to wait for).
pub fn lb_in_step(synced: Option<&balancer::Synced>) -> bool {
    synced.is_none_or(|s| s.blocked.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_core::pacing::{
        run_case, table, Driver, Pacing, PacingInput, PacingPolicy, Verdict,
    };
    use quorum_core::{Action, Machine};
    use quorum_etcd::EtcdError;

    /// The table's terms turned into the controller's (an `ActionError` of each class,
    /// a load balancer sync that was blocked or not, or none) and back through
    /// `attempt_of` and `lb_in_step`, into the pacing the pass keeps.
    struct Controller {
        pacing: Pacing,
        calls: u64,
    }

    impl Driver for Controller {
        fn machines(&mut self, now_ms: u64, machines: &[Machine]) {
            self.pacing.observe(now_ms, machines);
        }
        fn attempt(
            &mut self,
            now_ms: u64,
            a: &Action,
            outcome: Attempt,
            random: u64,
        ) -> Option<u64> {
            self.calls += 1;
            let res: Result<(), ActionError> = match outcome {
                Attempt::Done => Ok(()),
                // Both kinds of refusal the controller meets.
                Attempt::Refused if self.calls.is_multiple_of(2) => Err(ActionError::NoLeader),
                Attempt::Refused => Err(ActionError::Etcd(EtcdError::Timeout {
                    op: "member add",
                    endpoint: "https://127.0.0.1:2379".into(),
                    timeout_ms: 5_000,
                })),
                Attempt::Failed => Err(ActionError::Join("panicked".into())),
            };
            let class = attempt_of(&res);
            assert_eq!(
                class, outcome,
                "the controller classifies {res:?} as {class:?}"
            );
            self.pacing.record(a, class, now_ms, random)
        }
        fn check(&mut self, now_ms: u64, a: &Action, lb_in_step: bool) -> Verdict {
            self.calls += 1;
            let synced = balancer::Synced {
                blocked: (!lb_in_step).then(|| "haproxy: connection refused".to_string()),
                ..Default::default()
            };
            // No load balancer at all counts as in step.
            let synced = (!lb_in_step || self.calls.is_multiple_of(2)).then_some(&synced);
            let input = PacingInput {
                now_ms,
                lb_in_step: super::lb_in_step(synced),
            };
            self.pacing.check(a, &input)
        }
    }

    #[test]
    fn the_controller_paces_by_the_shared_table() {
        for case in table() {
            let mut d = Controller {
                pacing: Pacing::new(PacingPolicy {
                    drain_ms: crate::DRAIN_MS,
                    ..PacingPolicy::DEFAULT
                }),
                calls: 0,
            };
            if let Err(e) = run_case(&case, &mut d) {
                panic!("{e}");
            }
        }
    }
}
