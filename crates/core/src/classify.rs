//! The one classifier of etcd's answers: from (call, gRPC code, message) to a verdict.
//!
//! The etcd adapter, the benchmark's naive script and its clients, and the simulator's
//! etcd all classify through `classify`, so what the simulator proves holds for the
//! answers the adapter acts on. The answers below are etcd's, verbatim: each was seen
//! from etcd 3.4.23, 3.5.0 and 3.5.1 by `crates/etcd/tests/answers.rs`, which makes it
//! happen against real clusters and checks its verdict, or is marked as taken from
//! etcd's source (`api/v3rpc/rpctypes/error.go`) or a benchmark report when no test can
//! make it happen on demand. `tests/classify_table.rs` holds them all as a table.
//!
//! Pure: no gRPC crate here. The code arrives as gRPC's number (`GrpcCode`).

use std::fmt;

/// gRPC's status codes, numbered as gRPC numbers them
/// (<https://grpc.github.io/grpc/core/md_doc_statuscodes.html>).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GrpcCode {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl GrpcCode {
    /// The code of a number; gRPC reads a number it does not know as `Unknown`.
    pub const fn from_i32(code: i32) -> GrpcCode {
        use GrpcCode::*;
        match code {
            0 => Ok,
            1 => Cancelled,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            _ => Unknown,
        }
    }
}

/// The calls whose answers quorum must understand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtcdCall {
    AddLearner,
    Promote,
    MoveLeader,
    RemoveMember,
    /// A client's request to the key-value store (the benchmark's clients).
    Kv,
    /// quorum's own reads (status, member list, alarms): as `Kv`, nothing in them can
    /// have been done before.
    Observe,
}

/// An answer of etcd as it arrives: its gRPC code and its message, verbatim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EtcdAnswer {
    pub code: GrpcCode,
    pub message: &'static str,
}

impl EtcdAnswer {
    pub const fn new(code: GrpcCode, message: &'static str) -> EtcdAnswer {
        EtcdAnswer { code, message }
    }

    /// The verdict on this answer to `call`.
    pub fn verdict(self, call: EtcdCall) -> Verdict {
        classify(call, self.code, self.message)
    }
}

// Seen from 3.4.23, 3.5.0 and 3.5.1 (crates/etcd/tests/answers.rs makes each happen).

/// A membership change refused by the strict reconfiguration check: the leader has not
/// been connected to every voter for 5 s (also refused while a voter is down). Also
/// the answer to a voter's add or a voter's removal while a voter never started: this
/// check comes first.
pub const UNHEALTHY_CLUSTER: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::Unavailable, "etcdserver: unhealthy cluster");
/// An add whose peer URL a member already has: an earlier add took effect.
pub const PEER_URLS_EXIST: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::FailedPrecondition,
    "etcdserver: Peer URLs already exists",
);
/// The same add again within the same second: etcd derives the new member's id from
/// the peer URLs and the second, so the id exists (checked before the URLs).
pub const MEMBER_ID_EXISTS: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::FailedPrecondition,
    "etcdserver: member ID already exist",
);
pub const TOO_MANY_LEARNERS: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::FailedPrecondition,
    "etcdserver: too many learner members in cluster",
);
pub const LEARNER_NOT_IN_SYNC: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::FailedPrecondition,
    "etcdserver: can only promote a learner member which is in sync with leader",
);
/// Promoting a member that already votes.
pub const NOT_A_LEARNER: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::FailedPrecondition,
    "etcdserver: can only promote a learner member",
);
/// Removing (or promoting) a member that is not there, removed ones included.
pub const MEMBER_NOT_FOUND: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::NotFound, "etcdserver: member not found");
/// Moving leadership to a learner or to an unknown member.
pub const BAD_LEADER_TRANSFEREE: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::FailedPrecondition,
    "etcdserver: bad leader transferee",
);
/// A leader move asked of a member that does not lead (with or without a leader).
pub const NOT_LEADER: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::FailedPrecondition, "etcdserver: not leader");
/// A promote asked of a member without a leader (after etcd's request timeout, 7 s),
/// or a request with the require-leader flag to such a member (at once).
pub const NO_LEADER: EtcdAnswer = EtcdAnswer::new(GrpcCode::Unavailable, "etcdserver: no leader");
/// A write or a linearizable read sent to a learner.
pub const NOT_SUPPORTED_FOR_LEARNER: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::Unavailable,
    "etcdserver: rpc not supported for learner",
);
/// etcd's own deadline ran out: a write to a member without a leader (after etcd's
/// request timeout), or a membership change without a leader (at the client's deadline).
pub const SERVER_DEADLINE: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::Unknown, "context deadline exceeded");
/// The client's deadline (tonic's answer, not etcd's): a membership change without a
/// leader waits until then, so does a leader move to a voter that is not connected, and
/// a change proposed while etcd still applies the previous one is dropped by raft and
/// waits until then too (3.5, where even a change that is then refused goes through
/// raft).
pub const CLIENT_DEADLINE: EtcdAnswer = EtcdAnswer::new(GrpcCode::Cancelled, "Timeout expired");

// Seen by the benchmark (docs/bench/report.json), from members being stopped or
// removed under load; no test makes them happen on demand.

/// A request to a member whose raft has stopped (being stopped or removed).
pub const RAFT_STOPPED: EtcdAnswer = EtcdAnswer::new(GrpcCode::Unknown, "raft: stopped");
/// tonic's: nothing listens on the member's address.
pub const TCP_CONNECT_ERROR: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::Unavailable, "tcp connect error");
/// tonic's: the member's HTTP/2 server refused the stream (it is closing).
pub const HTTP2_REFUSED_STREAM: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::Unavailable, "h2 protocol error: http2 error");

// From etcd's source (api/v3rpc/rpctypes/error.go, the same in 3.4 and 3.5): answers
// to races (an election during a read, a slow commit) that no test provokes reliably.

/// A linearizable read that was waiting when leadership moved.
pub const LEADER_CHANGED: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::Unavailable, "etcdserver: leader changed");
pub const REQUEST_TIMED_OUT: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::Unavailable, "etcdserver: request timed out");
pub const TIMED_OUT_LEADER_FAIL: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::Unavailable,
    "etcdserver: request timed out, possibly due to previous leader failure",
);
pub const TIMED_OUT_CONNECTION_LOST: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::Unavailable,
    "etcdserver: request timed out, possibly due to connection lost",
);
/// A voter's add (or removal) that would leave fewer started members than a quorum.
/// Not seen: where a voter never started, every version answered `UNHEALTHY_CLUSTER`.
pub const NOT_ENOUGH_STARTED: EtcdAnswer = EtcdAnswer::new(
    GrpcCode::FailedPrecondition,
    "etcdserver: re-configuration failed due to not enough started members",
);
pub const SERVER_STOPPED: EtcdAnswer =
    EtcdAnswer::new(GrpcCode::Unavailable, "etcdserver: server stopped");

/// Every answer above: the simulator answers only with these, and the table test checks
/// each against the answers it lists verbatim.
pub const KNOWN_ANSWERS: &[EtcdAnswer] = &[
    UNHEALTHY_CLUSTER,
    PEER_URLS_EXIST,
    MEMBER_ID_EXISTS,
    TOO_MANY_LEARNERS,
    LEARNER_NOT_IN_SYNC,
    NOT_A_LEARNER,
    MEMBER_NOT_FOUND,
    BAD_LEADER_TRANSFEREE,
    NOT_LEADER,
    NO_LEADER,
    NOT_SUPPORTED_FOR_LEARNER,
    SERVER_DEADLINE,
    CLIENT_DEADLINE,
    RAFT_STOPPED,
    TCP_CONNECT_ERROR,
    HTTP2_REFUSED_STREAM,
    LEADER_CHANGED,
    REQUEST_TIMED_OUT,
    TIMED_OUT_LEADER_FAIL,
    TIMED_OUT_CONNECTION_LOST,
    NOT_ENOUGH_STARTED,
    SERVER_STOPPED,
];

/// What an answer means for the call that got it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Done,
    /// An error that says the change is in place already (an earlier call whose answer
    /// was lost did it): success.
    AlreadyDone,
    /// etcd said no for now; the same call later may pass.
    Refused(Refusal),
    /// The call did not reach etcd, or its answer was lost on the way (a transport
    /// error, not an answer of etcd's).
    Unreachable,
    /// Anything else: the call is wrong for the cluster as it is.
    Failed,
}

/// Why etcd said no for now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The strict reconfiguration check (`UNHEALTHY_CLUSTER`).
    Unhealthy,
    NotEnoughStarted,
    TooManyLearners,
    LearnerNotInSync,
    NoLeader,
    /// The member asked no longer leads.
    NotLeader,
    LeaderChanged,
    /// No answer in time, from etcd's deadline or the client's.
    TimedOut,
    /// The member is stopping.
    Stopped,
    /// A client request to a learner.
    Learner,
}

impl Refusal {
    /// A short reason for people (events, `--wait`'s line).
    pub const fn reason(self) -> &'static str {
        match self {
            Refusal::Unhealthy => "etcd accepts one membership change per ~5 s; retrying",
            Refusal::NotEnoughStarted => {
                "etcd waits until enough members have started for a quorum; retrying"
            }
            Refusal::TooManyLearners => "etcd allows one learner at a time; retrying",
            Refusal::LearnerNotInSync => {
                "the learner is still catching up with the leader; retrying"
            }
            Refusal::NoLeader => "etcd has no leader (an election is under way); retrying",
            Refusal::NotLeader => "the member asked no longer leads; retrying",
            Refusal::LeaderChanged => "etcd's leader changed during the call; retrying",
            Refusal::TimedOut => "etcd did not answer in time; retrying",
            Refusal::Stopped => "the member is stopping; retrying",
            Refusal::Learner => "a learner serves no client requests; retrying",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// What etcd's messages say, by the part that tells them apart. Longer messages that
/// begin like shorter ones come first.
const REFUSALS: &[(&str, Refusal)] = &[
    (UNHEALTHY_CLUSTER.message, Refusal::Unhealthy),
    (NOT_ENOUGH_STARTED.message, Refusal::NotEnoughStarted),
    (TOO_MANY_LEARNERS.message, Refusal::TooManyLearners),
    (LEARNER_NOT_IN_SYNC.message, Refusal::LearnerNotInSync),
    (NO_LEADER.message, Refusal::NoLeader),
    (NOT_LEADER.message, Refusal::NotLeader),
    (LEADER_CHANGED.message, Refusal::LeaderChanged),
    // Every variant of etcd's request timeout begins so.
    (REQUEST_TIMED_OUT.message, Refusal::TimedOut),
    (SERVER_DEADLINE.message, Refusal::TimedOut),
    (CLIENT_DEADLINE.message, Refusal::TimedOut),
    (SERVER_STOPPED.message, Refusal::Stopped),
    (RAFT_STOPPED.message, Refusal::Stopped),
    (NOT_SUPPORTED_FOR_LEARNER.message, Refusal::Learner),
];

/// Answers that mean "done before" for one call.
fn already_done(call: EtcdCall, message: &str) -> bool {
    match call {
        EtcdCall::AddLearner => {
            message == PEER_URLS_EXIST.message || message == MEMBER_ID_EXISTS.message
        }
        // Exactly: "... a learner member which is in sync" is a refusal.
        EtcdCall::Promote => message == NOT_A_LEARNER.message,
        EtcdCall::RemoveMember => message == MEMBER_NOT_FOUND.message,
        EtcdCall::MoveLeader | EtcdCall::Kv | EtcdCall::Observe => false,
    }
}

/// The verdict on etcd's answer (`code`, `message`) to `call`. Messages are compared
/// verbatim (`message` is the gRPC status message, as etcd sent it), except that every
/// "request timed out, ..." is a timeout.
pub fn classify(call: EtcdCall, code: GrpcCode, message: &str) -> Verdict {
    if code == GrpcCode::Ok {
        return Verdict::Done;
    }
    if already_done(call, message) {
        return Verdict::AlreadyDone;
    }
    if code == GrpcCode::DeadlineExceeded {
        return Verdict::Refused(Refusal::TimedOut);
    }
    let refusal = REFUSALS.iter().find(|(m, _)| {
        if *m == REQUEST_TIMED_OUT.message {
            message.starts_with(m)
        } else {
            message == *m
        }
    });
    if let Some((_, r)) = refusal {
        return Verdict::Refused(*r);
    }
    // etcd's own "unavailable" answers all begin "etcdserver:"; the rest are the
    // transport's (connection refused, a stream reset by a closing server).
    if code == GrpcCode::Unavailable && !message.starts_with("etcdserver:") {
        return Verdict::Unreachable;
    }
    Verdict::Failed
}

/// How a failed client request reads to an operator (the benchmark's error kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientErrorKind {
    LeaderChanged,
    NoLeader,
    Learner,
    TimedOut,
    Unavailable,
    Other,
}

impl ClientErrorKind {
    /// The kind of a failed key-value request's answer.
    pub fn of(code: GrpcCode, message: &str) -> ClientErrorKind {
        ClientErrorKind::of_verdict(classify(EtcdCall::Kv, code, message))
    }

    pub fn of_verdict(v: Verdict) -> ClientErrorKind {
        match v {
            Verdict::Refused(Refusal::LeaderChanged) => ClientErrorKind::LeaderChanged,
            Verdict::Refused(Refusal::NoLeader) => ClientErrorKind::NoLeader,
            Verdict::Refused(Refusal::Learner) => ClientErrorKind::Learner,
            Verdict::Refused(Refusal::TimedOut) => ClientErrorKind::TimedOut,
            Verdict::Unreachable | Verdict::Refused(_) => ClientErrorKind::Unavailable,
            Verdict::Done | Verdict::AlreadyDone | Verdict::Failed => ClientErrorKind::Other,
        }
    }

    /// The name reports use.
    pub const fn as_str(self) -> &'static str {
        match self {
            ClientErrorKind::LeaderChanged => "leader changed",
            ClientErrorKind::NoLeader => "no leader",
            ClientErrorKind::Learner => "learner",
            ClientErrorKind::TimedOut => "timed out",
            ClientErrorKind::Unavailable => "unavailable",
            ClientErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for ClientErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_number_round_trips() {
        for n in 0..=16 {
            assert_eq!(GrpcCode::from_i32(n) as i32, n);
        }
        assert_eq!(GrpcCode::from_i32(17), GrpcCode::Unknown);
        assert_eq!(GrpcCode::from_i32(-1), GrpcCode::Unknown);
    }

    #[test]
    fn every_refusal_message_is_known() {
        for (m, _) in REFUSALS {
            assert!(KNOWN_ANSWERS.iter().any(|a| a.message == *m), "{m}");
        }
    }
}
