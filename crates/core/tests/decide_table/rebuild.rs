//! Rebuilds a person confirmed (`quorum recover`, `quorum restore`), phase by phase,
//! and the `QuorumLost` condition that names both ways back.

use super::*;

const TOKEN: &str = "cp-00000000000000aa";

impl Sit {
    fn rebuilding(mut self, from: RebuildSource, phase: RebuildPhase) -> Self {
        self.rebuild = Some(Rebuild {
            from,
            token: TOKEN.into(),
            phase,
            requested_at_unix_s: NOW_UNIX_S - 60,
        });
        self
    }
    fn recovering(self, phase: RebuildPhase) -> Self {
        self.rebuilding(
            RebuildSource::Member {
                machine: "cp-1".into(),
            },
            phase,
        )
    }
    fn restoring(self, phase: RebuildPhase) -> Self {
        self.rebuilding(
            RebuildSource::Snapshot {
                id: "s1.db".into(),
                revision: 100,
            },
            phase,
        )
    }
}

use RebuildPhase::{Fencing, Seeding};

/// cp-1 survives (running, knows no leader); cp-2 and cp-3 are gone with their data.
fn lost_majority() -> Vec<Fx> {
    vec![m(1, OLD), m(2, OLD).lost_data(), m(3, OLD).lost_data()]
}

#[test]
fn a_recovery_from_a_member_fences_the_rest_then_forces_the_survivor() {
    let cases: Vec<(&str, Sit, &str)> = vec![
        (
            "fencing: every other old member at once",
            sit(3, OLD, lost_majority()).no_leader().recovering(Fencing),
            "fence-machine:cp-2 fence-machine:cp-3",
        ),
        (
            "fencing: a leaving machine is fenced too",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).lost_data().deleting()])
                .no_leader()
                .recovering(Fencing),
            "fence-machine:cp-2",
        ),
        (
            "fenced; the survivor still runs with the old membership: stop it",
            sit(3, OLD, vec![m(1, OLD)]).no_leader().recovering(Fencing),
            "stop-machine:cp-1",
        ),
        (
            "fenced and stopped: seeding is recorded before the force",
            sit(3, OLD, vec![m(1, OLD).stopped()])
                .no_leader()
                .recovering(Fencing),
            "set-rebuild-phase",
        ),
        (
            "seeding: start it with --force-new-cluster",
            sit(3, OLD, vec![m(1, OLD).stopped()])
                .no_leader()
                .recovering(Seeding),
            "force-new-cluster:cp-1",
        ),
        (
            "seeding, started: wait for it to lead alone",
            sit(3, OLD, vec![m(1, OLD)]).no_leader().recovering(Seeding),
            "wait: to lead a cluster of its own",
        ),
        (
            "seeding, a crash loop: the backoff holds",
            sit(3, OLD, vec![m(1, OLD).stopped().started_ago(&[3, 2, 1])])
                .no_leader()
                .recovering(Seeding),
            "wait: next start in",
        ),
        (
            "it leads a cluster of one: the rebuild ends",
            sit(3, OLD, vec![m(1, OLD)]).recovering(Seeding),
            "finish-rebuild",
        ),
        (
            "ended: the normal rules grow it back",
            sit(3, OLD, vec![m(1, OLD)]),
            "allocate-machine",
        ),
        (
            "a crash after fencing, a new member meanwhile: fenced too",
            sit(
                3,
                OLD,
                vec![m(1, OLD).stopped(), m(4, OLD).fresh().no_member()],
            )
            .no_leader()
            .recovering(Seeding),
            "fence-machine:cp-4",
        ),
        (
            "the survivor lost its data too: refused, with the way out",
            sit(3, OLD, vec![m(1, OLD).lost_data()])
                .no_leader()
                .recovering(Seeding),
            "refuse: quorum restore cp --from",
        ),
        (
            "the survivor's record is gone: refused",
            sit(3, OLD, vec![]).no_leader().recovering(Seeding),
            "refuse: no machine record",
        ),
        (
            "a rebuild waits while the control plane is paused",
            {
                let mut s = sit(3, OLD, lost_majority()).no_leader().recovering(Fencing);
                s.paused = true;
                s
            },
            "wait: paused",
        ),
    ];
    for (case, s, expect) in cases {
        check(case, &s, expect);
    }
}

#[test]
fn a_restore_fences_every_old_member_then_seeds_one_new_machine() {
    let cases: Vec<(&str, Sit, &str)> = vec![
        (
            "fencing: every old member, healthy ones too",
            sit(3, OLD, old3()).restoring(Fencing),
            "fence-machine:cp-1 fence-machine:cp-2 fence-machine:cp-3",
        ),
        (
            "all fenced: seeding is recorded",
            sit(3, OLD, vec![]).no_leader().restoring(Fencing),
            "set-rebuild-phase",
        ),
        (
            "seeding: one new machine at the spec's version",
            sit(3, NEW, vec![]).no_leader().restoring(Seeding),
            "allocate-machine",
        ),
        (
            "seeding: the snapshot into its empty data directory",
            sit(3, OLD, vec![m(4, OLD).fresh().no_member()])
                .no_leader()
                .restoring(Seeding),
            "restore-snapshot:cp-4",
        ),
        (
            "restored: started as a new cluster of one",
            sit(3, OLD, vec![m(4, OLD).no_member().unmarked().stopped()])
                .no_leader()
                .restoring(Seeding),
            "start-machine:cp-4",
        ),
        (
            "started: wait for it to serve",
            sit(3, OLD, vec![m(4, OLD).no_member().unmarked()])
                .no_leader()
                .restoring(Seeding),
            "wait: to serve the restored data",
        ),
        (
            "a second machine allocated by a crash: fenced, the seed kept",
            sit(
                3,
                OLD,
                vec![m(4, OLD).fresh().no_member(), m(5, OLD).fresh().no_member()],
            )
            .no_leader()
            .restoring(Seeding),
            "fence-machine:cp-5",
        ),
        (
            "the seed serves alone: the rebuild ends",
            sit(3, OLD, vec![m(4, OLD)]).restoring(Seeding),
            "finish-rebuild",
        ),
    ];
    for (case, s, expect) in cases {
        check(case, &s, expect);
    }
}

/// The seed starts with `new` and only itself in the initial cluster.
#[test]
fn the_seed_of_a_restore_starts_alone_as_a_new_cluster() {
    let s = sit(3, OLD, vec![m(4, OLD).no_member().unmarked().stopped()])
        .no_leader()
        .restoring(Seeding);
    let d = check("restored", &s, "start-machine:cp-4");
    match &d.actions[0] {
        Action::StartMachine {
            state,
            initial_cluster,
            ..
        } => {
            assert_eq!(*state, ClusterState::New);
            let names: Vec<&str> = initial_cluster.iter().map(|m| m.name.as_str()).collect();
            assert_eq!(names, ["cp-4"]);
        }
        a => panic!("{a:?}"),
    }
}

fn quorum_lost(d: &Decision) -> Option<String> {
    d.condition(ConditionKind::QuorumLost)
        .filter(|c| c.status)
        .map(|c| c.message.clone())
}

#[test]
fn quorum_lost_names_the_survivor_that_applied_most_and_the_newest_verified_snapshot() {
    let after_s = RemediationSpec::default().unhealthy_after.as_secs() as i64;
    let lost = sit(
        5,
        OLD,
        vec![
            m(1, OLD).applied(900),
            m(2, OLD).applied(1200),
            m(3, OLD).lost_data(),
            m(4, OLD).stopped(),
            m(5, OLD).lost_data(),
        ],
    )
    .electing()
    .unhealthy_for(1, after_s + 5)
    .snapshot("old.db", 7_200, true)
    .snapshot("bad.db", 600, false);
    let d = decide_sit(&lost);
    let msg = quorum_lost(&d).expect("QuorumLost");
    for want in [
        "3 of 5 members do not answer (cp-3, cp-4, cp-5)",
        "quorum recover cp --from-member cp-2",
        "applied index 1200",
        "quorum recover cp --from-snapshot old.db",
        "loses every write after revision 100",
    ] {
        assert!(msg.contains(want), "'{want}' not in: {msg}");
    }
    assert!(!msg.contains("bad.db"), "{msg}");

    // Not before unhealthyAfter, not with a quorum that answers, not with a leader,
    // not once a rebuild is recorded.
    let young = sit(3, OLD, lost_majority())
        .electing()
        .unhealthy_for(1, after_s - 1);
    assert_eq!(quorum_lost(&decide_sit(&young)), None);
    let minority = sit(3, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD).lost_data()])
        .electing()
        .unhealthy_for(3, after_s + 5);
    assert_eq!(quorum_lost(&decide_sit(&minority)), None);
    let led = sit(3, OLD, lost_majority()).unhealthy_for(2, after_s + 5);
    assert!(decide_sit(&led).leader().is_some());
    assert_eq!(quorum_lost(&decide_sit(&led)), None);
    let rebuilding = sit(3, OLD, lost_majority())
        .electing()
        .unhealthy_for(1, after_s + 5)
        .recovering(Fencing);
    assert_eq!(quorum_lost(&decide_sit(&rebuilding)), None);

    // No survivor answers: it says what to do first.
    let silent = sit(3, OLD, lost_majority())
        .no_leader()
        .unhealthy_for(2, after_s + 5);
    let msg = quorum_lost(&decide_sit(&silent)).expect("QuorumLost");
    assert!(msg.contains("no survivor answers"), "{msg}");

    // Without a verified snapshot, it says so.
    let bare = sit(3, OLD, lost_majority())
        .electing()
        .unhealthy_for(1, after_s + 5);
    let msg = quorum_lost(&decide_sit(&bare)).expect("QuorumLost");
    assert!(msg.contains("there is no verified snapshot"), "{msg}");
}

fn decide_sit(s: &Sit) -> Decision {
    let (cp, machines, observed) = s.build();
    decide(&cp, &machines, &observed)
}

/// The survivor `QuorumLost` names is the one `recover --from-member` accepts: one core
/// rule (`survivor::best`) for both. A learner that applied more is never named (the
/// condition used to name the survivor that applied most, learners included, which the
/// recovery's plan then refused).
#[test]
fn quorum_lost_names_the_survivor_the_recovery_accepts() {
    let after_s = RemediationSpec::default().unhealthy_after.as_secs() as i64;
    let lost = sit(
        3,
        OLD,
        vec![
            m(1, OLD).applied(900),
            m(2, OLD).lost_data(),
            m(3, OLD).lost_data(),
            m(4, OLD).learner().applied(5000),
        ],
    )
    .electing()
    .unhealthy_for(1, after_s + 5);
    let (_, machines, observed) = lost.build();
    let msg = quorum_lost(&decide_sit(&lost)).expect("QuorumLost");
    assert!(msg.contains("--from-member cp-1"), "{msg}");
    assert!(!msg.contains("--from-member cp-4"), "{msg}");
    let survivors: Vec<survivor::Survivor<'_>> = machines
        .iter()
        .map(|x| {
            let st = observed
                .machines
                .get(&x.name)
                .and_then(|o| o.status.as_ref());
            survivor::Survivor::of(&x.name, x.serial, st)
        })
        .collect();
    let named = survivors.iter().find(|s| s.machine == "cp-1").unwrap();
    assert_eq!(survivor::worse_than_another(named, &survivors, None), None);
    let learner = survivors.iter().find(|s| s.machine == "cp-4").unwrap();
    assert!(survivor::worse_than_another(learner, &survivors, None).is_some());
}
