//! A learner whose own publish was lost (`quorum_core::publish`): the cluster shows it
//! started while its endpoint stays silent until etcd's retry at 7 s. Its first process
//! is stopped between 2 s and 7 s after it started, and started again at once; nothing
//! else is stopped for this, and never twice.

use super::*;

impl Fx {
    /// Added but not yet published: the member list has no name or client URLs for it.
    fn unpublished(mut self) -> Self {
        self.ran = false;
        self
    }
}

/// Three voters and learner cp-4 (published by default) as `learner` is seen.
fn joining(learner: Fx) -> Sit {
    sit(4, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD), learner])
}

#[test]
fn publish_table() {
    let silent = || m(4, OLD).learner().unreachable();
    let cases: Vec<(&str, Sit, &str)> = vec![
        (
            "published, silent 3s after its first start: stop it",
            joining(silent().started_ago(&[3])),
            "stop-machine:cp-4 start-machine:cp-4",
        ),
        (
            "published, silent 1s after its first start: wait",
            joining(silent().started_ago(&[1])),
            "wait: learner cp-4 to answer",
        ),
        (
            "silent at etcd's retry: no longer this rule's",
            joining(silent().started_ago(&[7])),
            "wait: learner cp-4 to answer",
        ),
        (
            "silent, not published yet: wait",
            joining(silent().unpublished().started_ago(&[3])),
            "wait: learner cp-4 to answer",
        ),
        (
            "silent long enough to remediate: started again first, not replaced",
            joining(silent().started_ago(&[3])).unhealthy_for(4, 60),
            "stop-machine:cp-4 start-machine:cp-4",
        ),
        (
            "a crash after the stop: started again at once, as a member joining",
            joining(m(4, OLD).learner().stopped().started_ago(&[3])),
            "start-machine:cp-4",
        ),
        (
            "its second process silent too: never stopped twice",
            joining(silent().started_ago(&[4, 1]).planned(&[1])),
            "wait: learner cp-4 to answer",
        ),
        (
            "its second process silent long after: never stopped twice",
            joining(silent().started_ago(&[6, 3]).planned(&[3])),
            "wait: learner cp-4 to answer",
        ),
    ];
    for (case, s, expect) in &cases {
        check(case, s, expect);
    }
}

#[test]
fn the_stop_says_why() {
    let s = joining(m(4, OLD).learner().unreachable().started_ago(&[3]));
    let d = check("lost publish", &s, "stop-machine:cp-4 start-machine:cp-4");
    let why = d.because.expect("a reason");
    assert!(why.contains("publish") && why.contains("3s"), "{why}");
    // Any other step gives no reason.
    let d = check("promote", &joining(m(4, OLD).learner()), "promote:cp-4");
    assert_eq!(d.because, None);
}

#[test]
fn a_database_that_may_still_be_arriving_is_waited_on() {
    let big = quorum_core::publish::MAX_DB_BYTES + 1;
    let s = sit(
        4,
        OLD,
        vec![
            m(1, OLD).db(big, big),
            m(2, OLD).db(big, big),
            m(3, OLD).db(big, big),
            m(4, OLD).learner().unreachable().started_ago(&[3]),
        ],
    );
    check("a big database", &s, "wait: learner cp-4 to answer");
}

#[test]
fn a_silent_voter_is_never_stopped_for_it() {
    let s = sit(
        3,
        OLD,
        vec![
            m(1, OLD),
            m(2, OLD),
            m(3, OLD).unreachable().started_ago(&[3]),
        ],
    );
    let (cp, machines, observed) = s.build();
    let d = decide(&cp, &machines, &observed);
    assert!(
        !d.actions
            .iter()
            .any(|a| a.kind() == ActionKind::StopMachine),
        "{:?}",
        d.actions
    );
}
