//! The classifier against etcd's real answers, verbatim.
//!
//! Rows marked `ALL` were seen, identical, from etcd 3.4.23, 3.5.0 and 3.5.1 by
//! `crates/etcd/tests/answers.rs` (which makes each happen against real clusters and
//! checks the same verdict). `BENCH` rows were seen by `quorum bench rollout`
//! (docs/bench/report.json); `SOURCE` rows are etcd's own error definitions
//! (api/v3rpc/rpctypes/error.go, 3.4 and 3.5), for races no test provokes on demand.
//! No version answered differently from another: where the test made an answer happen,
//! 3.4.23, 3.5.0 and 3.5.1 said the same words with the same code.

use quorum_core::classify::{self, KNOWN_ANSWERS};
use quorum_core::{ClientErrorKind, EtcdAnswer, EtcdCall, GrpcCode, Refusal, Verdict};

const ALL: &str = "3.4.23, 3.5.0, 3.5.1";
const BENCH: &str = "benchmark";
const SOURCE: &str = "etcd source";
/// Seen while the test did not yet wait for etcd to settle between changes (see
/// `settle` in answers.rs): 3.5 proposes even a change it then refuses, and raft drops
/// a change proposed right after another, so the client waits until its deadline.
const V3_5_BACK_TO_BACK: &str = "3.5.0, 3.5.1, back to back";

use EtcdCall::*;
use GrpcCode::*;
use Verdict::*;

/// (where seen, what was done, the call, code, message, verdict).
type Row = (
    &'static str,
    &'static str,
    EtcdCall,
    GrpcCode,
    &'static str,
    Verdict,
);

#[rustfmt::skip]
const TABLE: &[Row] = &[
    // Membership: the strict reconfiguration check.
    (ALL, "add learner while a voter is not connected", AddLearner, Unavailable,
        "etcdserver: unhealthy cluster", Refused(Refusal::Unhealthy)),
    (ALL, "add voter while a voter never started", AddLearner, Unavailable,
        "etcdserver: unhealthy cluster", Refused(Refusal::Unhealthy)),
    (ALL, "remove a voter while a voter never started", RemoveMember, Unavailable,
        "etcdserver: unhealthy cluster", Refused(Refusal::Unhealthy)),
    (ALL, "add learner without a leader", AddLearner, Unavailable,
        "etcdserver: unhealthy cluster", Refused(Refusal::Unhealthy)),
    // Membership: already done.
    (ALL, "add learner again, within the same second", AddLearner, FailedPrecondition,
        "etcdserver: member ID already exist", AlreadyDone),
    (ALL, "add learner again, a later second", AddLearner, FailedPrecondition,
        "etcdserver: Peer URLs already exists", AlreadyDone),
    (ALL, "promote a voter", Promote, FailedPrecondition,
        "etcdserver: can only promote a learner member", AlreadyDone),
    (ALL, "remove an unknown member", RemoveMember, NotFound,
        "etcdserver: member not found", AlreadyDone),
    (ALL, "remove a removed learner", RemoveMember, NotFound,
        "etcdserver: member not found", AlreadyDone),
    // Membership: refused for now.
    (ALL, "add a second learner", AddLearner, FailedPrecondition,
        "etcdserver: too many learner members in cluster", Refused(Refusal::TooManyLearners)),
    (ALL, "promote a learner not in sync", Promote, FailedPrecondition,
        "etcdserver: can only promote a learner member which is in sync with leader",
        Refused(Refusal::LearnerNotInSync)),
    (ALL, "move leader, asked of a follower", MoveLeader, FailedPrecondition,
        "etcdserver: not leader", Refused(Refusal::NotLeader)),
    (ALL, "move leader to a voter never started (etcd waits; the client's deadline)",
        MoveLeader, Cancelled, "Timeout expired", Refused(Refusal::TimedOut)),
    (ALL, "move leader without a leader", MoveLeader, FailedPrecondition,
        "etcdserver: not leader", Refused(Refusal::NotLeader)),
    (ALL, "promote without a leader (after 7 s)", Promote, Unavailable,
        "etcdserver: no leader", Refused(Refusal::NoLeader)),
    (ALL, "remove a member without a leader (the client's deadline)", RemoveMember,
        Cancelled, "Timeout expired", Refused(Refusal::TimedOut)),
    (ALL, "remove a member without a leader (etcd's deadline, if it answers first; seen on a put)",
        RemoveMember, Unknown, "context deadline exceeded", Refused(Refusal::TimedOut)),
    (V3_5_BACK_TO_BACK, "remove a learner right after another change", RemoveMember,
        Cancelled, "Timeout expired", Refused(Refusal::TimedOut)),
    (V3_5_BACK_TO_BACK, "add a learner right after another change", AddLearner,
        Cancelled, "Timeout expired", Refused(Refusal::TimedOut)),
    (V3_5_BACK_TO_BACK, "promote right after another change", Promote,
        Cancelled, "Timeout expired", Refused(Refusal::TimedOut)),
    // Membership: failed.
    (ALL, "promote an unknown member", Promote, NotFound,
        "etcdserver: member not found", Failed),
    (ALL, "move leader to a learner", MoveLeader, FailedPrecondition,
        "etcdserver: bad leader transferee", Failed),
    (ALL, "move leader to an unknown member", MoveLeader, FailedPrecondition,
        "etcdserver: bad leader transferee", Failed),
    // Key-value requests.
    (ALL, "put without a leader, leader required", Kv, Unavailable,
        "etcdserver: no leader", Refused(Refusal::NoLeader)),
    (ALL, "put without a leader (after 7 s)", Kv, Unknown,
        "context deadline exceeded", Refused(Refusal::TimedOut)),
    (ALL, "put to a learner", Kv, Unavailable,
        "etcdserver: rpc not supported for learner", Refused(Refusal::Learner)),
    (ALL, "linearizable get to a learner", Kv, Unavailable,
        "etcdserver: rpc not supported for learner", Refused(Refusal::Learner)),
    (BENCH, "a request to a member being stopped", Kv, Unknown, "raft: stopped",
        Refused(Refusal::Stopped)),
    (BENCH, "a request to a member's address with nothing listening", Kv, Unavailable,
        "tcp connect error", Unreachable),
    (BENCH, "a request to a closing member (stream refused)", Kv, Unavailable,
        "h2 protocol error: http2 error", Unreachable),
    (BENCH, "a request without an answer in time", Kv, Cancelled, "Timeout expired",
        Refused(Refusal::TimedOut)),
    // etcd's definitions of answers to races.
    (SOURCE, "a linearizable read while leadership moves", Kv, Unavailable,
        "etcdserver: leader changed", Refused(Refusal::LeaderChanged)),
    (SOURCE, "a commit that took too long", Kv, Unavailable,
        "etcdserver: request timed out", Refused(Refusal::TimedOut)),
    (SOURCE, "a commit that took too long, the leader lost", AddLearner, Unavailable,
        "etcdserver: request timed out, possibly due to previous leader failure",
        Refused(Refusal::TimedOut)),
    (SOURCE, "a commit that took too long, the connection lost", RemoveMember, Unavailable,
        "etcdserver: request timed out, possibly due to connection lost",
        Refused(Refusal::TimedOut)),
    (SOURCE, "add a voter with too few started members", AddLearner, FailedPrecondition,
        "etcdserver: re-configuration failed due to not enough started members",
        Refused(Refusal::NotEnoughStarted)),
    (SOURCE, "a request to a stopping member", Promote, Unavailable,
        "etcdserver: server stopped", Refused(Refusal::Stopped)),
    (SOURCE, "a request too large", Kv, InvalidArgument, "etcdserver: request is too large",
        Failed),
    (SOURCE, "the database is full", AddLearner, ResourceExhausted,
        "etcdserver: mvcc: database space exceeded", Failed),
];

#[test]
fn every_real_answer_has_its_verdict() {
    for (seen, what, call, code, message, verdict) in TABLE {
        assert_eq!(
            classify(*call, *code, message),
            *verdict,
            "{what} ({seen}): {code:?} {message:?}"
        );
    }
}

fn classify(call: EtcdCall, code: GrpcCode, message: &str) -> Verdict {
    quorum_core::classify(call, code, message)
}

/// The answers the simulator gives (`KNOWN_ANSWERS`) are all in the table above: the
/// simulator answers with etcd's real words.
#[test]
fn the_simulators_answers_are_real_ones() {
    for a in KNOWN_ANSWERS {
        assert!(
            TABLE.iter().any(|r| r.3 == a.code && r.4 == a.message),
            "{a:?} is not an answer in the table"
        );
    }
}

/// "Already done" holds only for the call it answers: the same words from another
/// call are a failure.
#[test]
fn already_done_belongs_to_its_call() {
    let cases = [
        (classify::PEER_URLS_EXIST, Promote),
        (classify::MEMBER_NOT_FOUND, Promote),
        (classify::MEMBER_NOT_FOUND, MoveLeader),
        (classify::NOT_A_LEARNER, AddLearner),
    ];
    for (a, call) in cases {
        assert_eq!(a.verdict(call), Failed, "{a:?} to {call:?}");
    }
}

/// Anything etcd might say that is not in the table fails; the transport's words
/// (not "etcdserver: ...") mean the member was not reached.
#[test]
fn unknown_answers_fail_and_transport_errors_are_unreachable() {
    assert_eq!(
        classify(AddLearner, FailedPrecondition, "etcdserver: something new"),
        Failed
    );
    assert_eq!(
        classify(AddLearner, Unavailable, "etcdserver: something new"),
        Failed
    );
    assert_eq!(
        classify(Promote, Unavailable, "error trying to connect"),
        Unreachable
    );
    assert_eq!(
        classify(Kv, DeadlineExceeded, "Deadline Exceeded"),
        Refused(Refusal::TimedOut)
    );
    assert_eq!(classify(Kv, Ok, ""), Done);
}

#[test]
fn client_error_kinds_of_real_answers() {
    let cases: [(EtcdAnswer, ClientErrorKind); 9] = [
        (classify::LEADER_CHANGED, ClientErrorKind::LeaderChanged),
        (classify::NO_LEADER, ClientErrorKind::NoLeader),
        (
            classify::NOT_SUPPORTED_FOR_LEARNER,
            ClientErrorKind::Learner,
        ),
        (classify::SERVER_DEADLINE, ClientErrorKind::TimedOut),
        (classify::CLIENT_DEADLINE, ClientErrorKind::TimedOut),
        (classify::REQUEST_TIMED_OUT, ClientErrorKind::TimedOut),
        (classify::RAFT_STOPPED, ClientErrorKind::Unavailable),
        (classify::TCP_CONNECT_ERROR, ClientErrorKind::Unavailable),
        (classify::HTTP2_REFUSED_STREAM, ClientErrorKind::Unavailable),
    ];
    for (a, kind) in cases {
        assert_eq!(ClientErrorKind::of(a.code, a.message), kind, "{a:?}");
    }
    assert_eq!(
        ClientErrorKind::of(InvalidArgument, "etcdserver: request is too large"),
        ClientErrorKind::Other
    );
    // The names reports have always used.
    let names: Vec<&str> = [
        ClientErrorKind::LeaderChanged,
        ClientErrorKind::NoLeader,
        ClientErrorKind::Learner,
        ClientErrorKind::TimedOut,
        ClientErrorKind::Unavailable,
        ClientErrorKind::Other,
    ]
    .iter()
    .map(|k| k.as_str())
    .collect();
    assert_eq!(
        names,
        [
            "leader changed",
            "no leader",
            "learner",
            "timed out",
            "unavailable",
            "other"
        ]
    );
}

/// Every refusal says why in words an operator reads, and says that quorum retries.
#[test]
fn every_refusal_has_a_reason() {
    for (_, what, _, _, _, verdict) in TABLE {
        if let Refused(r) = verdict {
            assert!(r.reason().ends_with("; retrying"), "{what}: {}", r.reason());
        }
    }
    assert_eq!(
        Refusal::Unhealthy.reason(),
        "etcd accepts one membership change per ~5 s; retrying"
    );
}
