//! A CA rotation (`quorum rotate-ca`): situations and the decision expected, and whole
//! rotations replayed in an ideal world, checking at every start that every running
//! member trusts every other's certificates and quorum's own.

use super::*;
use CaPhase::*;

/// Three TLS members on the spec's version, each with the files of `phases[i]`.
fn tls3(phases: [Option<CaPhase>; 3]) -> Vec<Fx> {
    (1..=3)
        .zip(phases)
        .map(|(i, p)| {
            let f = m(i, NEW).certs_for(365);
            match p {
                Some(p) => f.ca(p),
                None => f,
            }
        })
        .collect()
}

#[test]
fn ca_rotation_table() {
    let cases: Vec<(&str, Sit, &str)> = vec![
        (
            "no rotation: TLS members with the CA in force are converged",
            sit(3, NEW, tls3([None, None, None])),
            "converged",
        ),
        (
            "a rotation begun: replace the first member (surge), like a rollout",
            sit(3, NEW, tls3([None, None, None])).rotating(Trust),
            "allocate-machine",
        ),
        (
            "in place: a follower is restarted first",
            sit(3, NEW, tls3([None, None, None]))
                .rotating(Trust)
                .in_place(),
            "begin-in-place:cp-2",
        ),
        (
            "in place: the leader last",
            sit(3, NEW, tls3([None, Some(Trust), Some(Trust)]))
                .rotating(Trust)
                .in_place(),
            "begin-in-place:cp-1",
        ),
        (
            "every member has phase 1's files and serves: phase 2",
            sit(3, NEW, tls3([Some(Trust), Some(Trust), Some(Trust)])).rotating(Trust),
            "set-ca-phase",
        ),
        (
            "phase 2: a member with phase 1's files is outdated",
            sit(3, NEW, tls3([Some(Trust), Some(Reissue), Some(Reissue)]))
                .rotating(Reissue)
                .in_place(),
            "begin-in-place:cp-1",
        ),
        (
            "every member has phase 2's files: phase 3",
            sit(3, NEW, tls3([Some(Reissue), Some(Reissue), Some(Reissue)])).rotating(Reissue),
            "set-ca-phase",
        ),
        (
            "every member has phase 3's files: finish",
            sit(3, NEW, tls3([Some(Drop), Some(Drop), Some(Drop)])).rotating(Drop),
            "finish-ca-rotation",
        ),
        (
            "in step but a member does not answer: remediation's wait, no next phase",
            {
                let mut ms = tls3([Some(Trust), Some(Trust), Some(Trust)]);
                ms[2] = ms[2].clone().unreachable();
                sit(3, NEW, ms).rotating(Trust).leader(1)
            },
            "wait: cp-3: unreachable",
        ),
        (
            "a version rollout and a rotation together: the replacement serves both",
            sit(
                3,
                NEW,
                vec![
                    m(1, OLD).certs_for(365),
                    m(2, OLD).certs_for(365),
                    m(3, OLD).certs_for(365),
                ],
            )
            .rotating(Trust),
            "allocate-machine",
        ),
        (
            "a plaintext control plane is never outdated by a rotation",
            sit(3, NEW, vec![m(1, NEW), m(2, NEW), m(3, NEW)]).rotating(Trust),
            "set-ca-phase",
        ),
    ];
    for (case, s, expect) in &cases {
        check(case, s, expect);
    }
}

#[test]
fn an_in_place_restart_records_the_phase_files_with_the_restart() {
    let mut f = m(2, NEW).certs_for(365).stopped();
    f.in_place = Some(InPlace {
        from: NEW.parse().unwrap(),
        to: NEW.parse().unwrap(),
        phase: InPlacePhase::Draining,
        since_unix_s: NOW_UNIX_S - 5,
        reason: DeleteReason::CaRotation,
        failure: None,
    });
    let s = sit(
        3,
        NEW,
        vec![m(1, NEW).certs_for(365), f, m(3, NEW).certs_for(365)],
    )
    .rotating(Reissue)
    .in_place();
    let d = check("restart", &s, "set-in-place-phase:cp-2");
    match &d.actions[0] {
        Action::SetInPlacePhase { ca_step, .. } => assert_eq!(
            *ca_step,
            Some(CaStep {
                generation: 1,
                phase: Reissue
            })
        ),
        other => panic!("{other:?}"),
    }
}

/// Ideal world: `apply_in_place` plus the rotation's own records.
fn apply_rotation(w: &mut Sit, a: &Action) {
    let serial_of = |n: &str| n.trim_start_matches("cp-").parse::<u64>().unwrap();
    match a {
        Action::SetCaPhase { phase } => w.ca_rotation = Some(*phase),
        Action::FinishCaRotation { generation } => {
            w.ca_rotation = None;
            w.ca_generation = *generation;
        }
        Action::SetInPlacePhase {
            machine,
            ca_step: Some(step),
            ..
        } => {
            w.machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap()
                .ca_step = Some(*step);
            inplace::apply_in_place(w, a);
        }
        other => inplace::apply_in_place(w, other),
    }
}

#[test]
fn whole_rotations_replay_to_convergence_and_no_member_ever_distrusts_another() {
    for (strategy, surge) in [
        (Strategy::Replace, 1),
        (Strategy::Replace, 0),
        (Strategy::InPlace, 1),
    ] {
        let mut world = sit(3, NEW, tls3([None, None, None]))
            .surge(surge)
            .rotating(Trust);
        world.strategy = strategy;
        world.leader = 2;
        let mut running: BTreeMap<String, CaGenerations> = (1..=3)
            .map(|i| (name(i), CaGenerations::plain(0)))
            .collect();
        let mut phases = vec![];
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 400, "no convergence ({strategy:?}, surge {surge})");
            let (cp, machines, observed) = world.build();
            let d = decide(&cp, &machines, &observed);
            if d.converged {
                break;
            }
            let action = d
                .actions
                .first()
                .cloned()
                .unwrap_or_else(|| panic!("stuck ({strategy:?}, surge {surge}): {d:?}"));
            if let Action::SetCaPhase { phase } = &action {
                phases.push(*phase);
            }
            apply_rotation(&mut world, &action);
            // The files of a start are those its record names as it is now.
            let (cp, machines, _) = world.build();
            if let Action::StartMachine { machine, .. } = &action {
                let m = machines.iter().find(|m| &m.name == machine).unwrap();
                running.insert(m.name.clone(), cp.ca_generations(m.ca_step));
            }
            running.retain(|n, _| {
                world
                    .machines
                    .iter()
                    .any(|f| name(f.serial) == *n && f.running)
            });
            let files: Vec<(&str, CaGenerations)> =
                running.iter().map(|(n, g)| (n.as_str(), *g)).collect();
            if let Some(why) = first_distrust(&cp, &files) {
                panic!("{strategy:?}: {why} after {action}");
            }
        }
        assert_eq!(phases, [Reissue, Drop], "{strategy:?}");
        assert_eq!(world.ca_generation, 1);
        assert!(world.ca_rotation.is_none());
        let (cp, machines, _) = world.build();
        for m in &machines {
            let g = cp.ca_generations(m.ca_step);
            assert_eq!(g, CaGenerations::plain(1), "{strategy:?}: {}", m.name);
        }
        for (n, f) in &running {
            assert_eq!(
                *f,
                CaGenerations::plain(1),
                "{strategy:?}: {n} runs old files"
            );
        }
    }
}
