//! A control plane's health in a word and its state in the fleet: one definition
//! (`Decision::health`) for `quorum list`'s HEALTH column and the fleet's count
//! (`quorum_control_planes{state}`), which once disagreed (a learner added but not yet
//! started read "degraded" in the list and "rolling" in the fleet).

use super::*;

#[test]
fn health_and_fleet_state_agree() {
    let cases: Vec<(&str, Sit, Health, FleetState)> = vec![
        (
            "every member healthy",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD)]),
            Health::Healthy,
            FleetState::Converged,
        ),
        (
            "a learner catching up: no problem yet, rolling",
            sit(
                4,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD).learner().applied(100),
                ],
            ),
            Health::Healthy,
            FleetState::Rolling,
        ),
        (
            "a learner added, not started yet: no problem, rolling",
            sit(
                4,
                OLD,
                vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD).learner().fresh()],
            ),
            Health::Healthy,
            FleetState::Rolling,
        ),
        (
            "a voter unreachable: a problem, a quorum still serves",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD).unreachable()]),
            Health::Degraded,
            FleetState::Degraded,
        ),
        (
            "no quorum of healthy voters",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD).unreachable()],
            ),
            Health::Unavailable,
            FleetState::Degraded,
        ),
    ];
    for (case, s, health, state) in cases {
        let (cp, machines, observed) = s.build();
        let d = decide(&cp, &machines, &observed);
        assert_eq!((d.health(), d.fleet_state()), (health, state), "{case}");
    }
}
