//! Reaching an etcd cluster through several endpoints, as pure bookkeeping: which member
//! to ask first, which to set aside, when to probe one set aside again, and what an
//! error answer means for the request (ask another member? may it have been applied?).
//!
//! The I/O (one client per endpoint, the deadlines, the probing task) is
//! `quorum_etcd::failover`; the store (the management etcd) and the benchmark's clients
//! use it, and the simulator's controller replicas keep the same `EndpointSet` for their
//! store. Time is a parameter (`now_ms`, the caller's monotonic clock) and so is
//! randomness (`random`, for the probe backoff's jitter).
//!
//! Why one client per endpoint rather than one balanced channel: a balanced channel
//! (tonic's, which `etcd-client` builds over all endpoints) sends a request to whichever
//! endpoint it picks and returns that endpoint's error; it never marks an endpoint down.
//! With one of three members dead, a third of the requests failed (issue 19). Here a
//! request goes to the member that last served, and to the next one when it cannot.

use crate::classify::{classify, EtcdCall, GrpcCode, Refusal, Verdict};
use crate::pacing::Backoff;
use serde::Serialize;

/// One attempt on one member. A paused process (SIGSTOP) accepts connections and never
/// answers: after this the request goes to another member. A healthy member on loopback
/// answers in milliseconds, a write with its fsync in tens.
pub const ATTEMPT_TIMEOUT_MS: u64 = 1_000;
/// A whole call, over every attempt and member: what an election of the cluster may take
/// (etcd's default election timeout is 1 s, randomised up to 2 s) with room to spare.
pub const CALL_TIMEOUT_MS: u64 = 5_000;
/// Pause between rounds over every member when none served (an election under way):
/// short, so the first request after the election is not late by much.
pub const ROUND_BACKOFF: Backoff = Backoff::new(20, 200);
/// A member set aside is probed after this backoff (per failure in a row).
pub const PROBE_BACKOFF: Backoff = Backoff::new(100, 2_000);
/// A member in service is probed this often, so that one that dies or stops is set aside
/// before requests land on it, and its state (the metric, `status`) stays fresh.
pub const PROBE_EVERY_MS: u64 = 1_000;
/// Deadline of one probe.
pub const PROBE_TIMEOUT_MS: u64 = 1_000;

/// What to do after a member answered a request with an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// etcd's answer about the request itself (a permission, an argument, a compaction):
    /// another member would say the same. Return it.
    Return,
    /// The member could not serve it (unreachable, no leader, a learner, stopping, no
    /// answer in time): ask another. `maybe_applied`: the request may have reached the
    /// cluster's log all the same, so a write retried elsewhere must be read back before
    /// a "compare failed" answer to the retry is believed.
    TryAnother { maybe_applied: bool },
}

/// The answers of a member that cannot serve, through the core's one classifier.
/// Everything that is not an answer of etcd's (its messages begin `etcdserver:`) with a
/// code saying "about the request" is the transport's: the member is unreachable, or the
/// connection broke on the way (then the request may have arrived).
pub fn next_after_error(code: GrpcCode, message: &str) -> Next {
    match classify(EtcdCall::Kv, code, message) {
        // Said before the request reached raft: the require-leader check of etcd's gRPC
        // layer, and a learner's refusal of client requests.
        Verdict::Refused(Refusal::Learner) => Next::TryAnother {
            maybe_applied: false,
        },
        // A timeout, a leader change, a stopping server: proposed maybe, applied maybe.
        // "no leader" too: only the require-leader check (which quorum sets) says it
        // before proposing, but an older path says it after etcd's own deadline.
        Verdict::Refused(_) => Next::TryAnother {
            maybe_applied: true,
        },
        Verdict::Unreachable => Next::TryAnother {
            maybe_applied: !is_connect_error(message),
        },
        Verdict::Done | Verdict::AlreadyDone => Next::Return,
        Verdict::Failed => {
            let about_the_request = message.starts_with("etcdserver:")
                || matches!(
                    code,
                    GrpcCode::InvalidArgument
                        | GrpcCode::NotFound
                        | GrpcCode::AlreadyExists
                        | GrpcCode::PermissionDenied
                        | GrpcCode::FailedPrecondition
                        | GrpcCode::OutOfRange
                        | GrpcCode::Unimplemented
                        | GrpcCode::Unauthenticated
                );
            if about_the_request {
                Next::Return
            } else {
                Next::TryAnother {
                    maybe_applied: true,
                }
            }
        }
    }
}

/// The transport could not connect: the request never left.
pub fn is_connect_error(message: &str) -> bool {
    message.contains(crate::classify::TCP_CONNECT_ERROR.message)
        || message.contains("Connection refused")
}

/// A member that failed so cannot be reached at all (its connection refused, or no
/// answer within the attempt's deadline), as opposed to one that answered without being
/// able to serve (no leader, a leader change, a learner). Most members unreachable for a
/// whole call's deadline means the cluster has lost its quorum (an election ends sooner;
/// during one, a follower still waiting on the dead leader answers nothing in time).
pub fn is_unreachable(why: &str) -> bool {
    // The client's own per-request deadline (tonic's words) is the same: no answer.
    is_connect_error(why)
        || why.starts_with(NO_ANSWER)
        || why == crate::classify::CLIENT_DEADLINE.message
}

/// How a failed attempt without any answer is described (`is_unreachable` knows it).
pub const NO_ANSWER: &str = "no answer within";

/// What is known of one endpoint, for people and metrics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointHealth {
    pub endpoint: String,
    /// It served the last request or probe asked of it (and has a leader).
    pub up: bool,
    /// It is the cluster's leader (known from a probe).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leader: bool,
    /// The etcd version it reports (known from a probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why it is set aside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For how long it has been set aside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_for_ms: Option<u64>,
}

/// How many of `health` serve, and whether that is a majority.
pub fn majority_up(health: &[EndpointHealth]) -> bool {
    let up = health.iter().filter(|h| h.up).count();
    up > health.len() / 2
}

#[derive(Clone, Debug, Default)]
struct MemberState {
    up: bool,
    /// Failures in a row (requests and probes).
    failures: u32,
    error: Option<String>,
    down_since_ms: Option<u64>,
    next_probe_ms: u64,
    leader: bool,
    version: Option<String>,
}

/// The state of the endpoints of one cluster, as one client sees them: every member is
/// presumed up until a request or a probe fails on it; one that fails is set aside (asked
/// only when no member in service can serve) and probed with `PROBE_BACKOFF`; one that
/// serves is back in service. Requests go first to the member that served last (its
/// connection is warm), then to the others in service, then to those set aside.
#[derive(Clone, Debug)]
pub struct EndpointSet {
    members: Vec<MemberState>,
    preferred: usize,
}

impl EndpointSet {
    /// `n` endpoints, all presumed up; requests go to `first` first (spread the clients
    /// of one cluster over its members by giving them different ones).
    pub fn new(n: usize, first: usize) -> EndpointSet {
        let members = vec![
            MemberState {
                up: true,
                ..MemberState::default()
            };
            n
        ];
        EndpointSet {
            members,
            preferred: if n == 0 { 0 } else { first % n },
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.members.get(i).is_some_and(|m| m.up)
    }

    pub fn up_count(&self) -> usize {
        self.members.iter().filter(|m| m.up).count()
    }

    /// The member asked first.
    pub fn preferred(&self) -> usize {
        self.preferred
    }

    /// The order in which to ask the members for one request: the preferred one if in
    /// service, the others in service (from the preferred one on), then those set aside,
    /// the one set aside last first (the likeliest to be back).
    pub fn order(&self) -> Vec<usize> {
        let n = self.members.len();
        let ring = (0..n).map(|k| (self.preferred + k) % n);
        let mut order: Vec<usize> = ring.clone().filter(|i| self.members[*i].up).collect();
        let mut aside: Vec<usize> = ring.filter(|i| !self.members[*i].up).collect();
        aside.sort_by_key(|i| std::cmp::Reverse(self.members[*i].down_since_ms));
        order.extend(aside);
        order
    }

    /// Member `i` served a request or a probe: in service, and asked first from now on.
    pub fn served(&mut self, i: usize, now_ms: u64) {
        let Some(m) = self.members.get_mut(i) else {
            return;
        };
        m.up = true;
        m.failures = 0;
        m.error = None;
        m.down_since_ms = None;
        m.next_probe_ms = now_ms + PROBE_EVERY_MS;
        self.preferred = i;
    }

    /// What a probe of member `i` learnt besides that it serves.
    pub fn probed(&mut self, i: usize, now_ms: u64, leader: bool, version: Option<String>) {
        let preferred = self.preferred;
        self.served(i, now_ms);
        // A probe answering is no reason to move requests off a member that serves them.
        if self.members.get(preferred).is_some_and(|m| m.up) {
            self.preferred = preferred;
        }
        if let Some(m) = self.members.get_mut(i) {
            m.leader = leader;
            m.version = version;
        }
    }

    /// Member `i` could not serve (`why`): set aside, probed after the backoff. Requests
    /// move to the next member in service.
    pub fn failed(&mut self, i: usize, now_ms: u64, why: &str, random: u64) {
        let Some(m) = self.members.get_mut(i) else {
            return;
        };
        m.up = false;
        m.leader = false;
        m.failures = m.failures.saturating_add(1);
        m.error = Some(why.to_string());
        m.down_since_ms.get_or_insert(now_ms);
        m.next_probe_ms = now_ms + PROBE_BACKOFF.delay_ms(m.failures, random);
        if self.preferred == i {
            let n = self.members.len();
            if let Some(next) = (1..n).map(|k| (i + k) % n).find(|j| self.members[*j].up) {
                self.preferred = next;
            }
        }
    }

    /// The members to probe now; each is then not due again before its next probe time
    /// (`probing` moves it), so a slow probe is not started twice.
    pub fn probes_due(&self, now_ms: u64) -> Vec<usize> {
        (0..self.members.len())
            .filter(|i| self.members[*i].next_probe_ms <= now_ms)
            .collect()
    }

    /// A probe of member `i` starts now.
    pub fn probing(&mut self, i: usize, now_ms: u64) {
        if let Some(m) = self.members.get_mut(i) {
            m.next_probe_ms = now_ms + PROBE_TIMEOUT_MS.max(PROBE_EVERY_MS);
        }
    }

    /// What is known of every member, named by `endpoints` (in the same order).
    pub fn health(&self, endpoints: &[String], now_ms: u64) -> Vec<EndpointHealth> {
        self.members
            .iter()
            .zip(endpoints)
            .map(|(m, e)| EndpointHealth {
                endpoint: e.clone(),
                up: m.up,
                leader: m.up && m.leader,
                version: m.version.clone(),
                error: if m.up { None } else { m.error.clone() },
                down_for_ms: m.down_since_ms.map(|t| now_ms.saturating_sub(t)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_member_is_set_aside_and_asked_last_until_it_serves() {
        let mut s = EndpointSet::new(3, 0);
        assert_eq!(s.order(), vec![0, 1, 2]);
        s.failed(0, 1_000, "tcp connect error", 0);
        assert_eq!(s.preferred(), 1);
        assert_eq!(s.order(), vec![1, 2, 0]);
        assert_eq!(s.up_count(), 2);
        // Probed after the first backoff step (50..=100 ms), not before (the others, never
        // probed yet, are due at once).
        assert_eq!(s.probes_due(1_049), vec![1, 2]);
        assert_eq!(s.probes_due(1_100), vec![0, 1, 2]);
        s.probing(0, 1_100);
        assert!(!s.probes_due(1_150).contains(&0));
        // Failing again doubles the backoff, up to the cap.
        for k in 0..10 {
            s.failed(0, 2_000 + k, "tcp connect error", u64::MAX);
        }
        assert!(s.probes_due(2_000 + PROBE_BACKOFF.cap_ms).contains(&0));
        assert!(!s.probes_due(2_000 + PROBE_BACKOFF.cap_ms / 2).contains(&0));
        let h = s.health(&["a".into(), "b".into(), "c".into()], 3_000);
        assert!(!h[0].up && h[0].down_for_ms == Some(2_000));
        assert_eq!(h[0].error.as_deref(), Some("tcp connect error"));
        assert!(h[1].up && h[1].error.is_none());
        assert!(majority_up(&h));
        // A probe that answers brings it back, without taking the requests off member 1.
        s.probed(0, 3_100, true, Some("3.5.1".into()));
        assert_eq!(s.order(), vec![1, 2, 0]);
        let h = s.health(&["a".into(), "b".into(), "c".into()], 3_100);
        assert!(h[0].up && h[0].leader && h[0].down_for_ms.is_none());
        // A request served by 2 makes 2 the first asked.
        s.served(2, 3_200);
        assert_eq!(s.order(), vec![2, 0, 1]);
    }

    #[test]
    fn with_every_member_set_aside_the_last_one_to_fail_is_asked_first() {
        let mut s = EndpointSet::new(3, 2);
        assert_eq!(s.order(), vec![2, 0, 1]);
        s.failed(2, 10, "x", 0);
        s.failed(0, 20, "x", 0);
        s.failed(1, 30, "x", 0);
        assert_eq!(s.order(), vec![1, 0, 2]);
        let h = s.health(&["a".into(), "b".into(), "c".into()], 40);
        assert!(!majority_up(&h));
    }

    #[test]
    fn what_an_error_answer_means_for_the_request() {
        use crate::classify::*;
        let rows: &[(EtcdAnswer, Next)] = &[
            (
                TCP_CONNECT_ERROR,
                Next::TryAnother {
                    maybe_applied: false,
                },
            ),
            (
                NOT_SUPPORTED_FOR_LEARNER,
                Next::TryAnother {
                    maybe_applied: false,
                },
            ),
            (
                NO_LEADER,
                Next::TryAnother {
                    maybe_applied: true,
                },
            ),
            (
                LEADER_CHANGED,
                Next::TryAnother {
                    maybe_applied: true,
                },
            ),
            (
                TIMED_OUT_LEADER_FAIL,
                Next::TryAnother {
                    maybe_applied: true,
                },
            ),
            (
                CLIENT_DEADLINE,
                Next::TryAnother {
                    maybe_applied: true,
                },
            ),
            (
                HTTP2_REFUSED_STREAM,
                Next::TryAnother {
                    maybe_applied: true,
                },
            ),
            (
                SERVER_STOPPED,
                Next::TryAnother {
                    maybe_applied: true,
                },
            ),
            (
                EtcdAnswer::new(GrpcCode::Unknown, "transport error"),
                Next::TryAnother {
                    maybe_applied: true,
                },
            ),
            (
                EtcdAnswer::new(
                    GrpcCode::OutOfRange,
                    "etcdserver: mvcc: required revision has been compacted",
                ),
                Next::Return,
            ),
            (
                EtcdAnswer::new(GrpcCode::PermissionDenied, "etcdserver: permission denied"),
                Next::Return,
            ),
            (
                EtcdAnswer::new(
                    GrpcCode::InvalidArgument,
                    "etcdserver: duplicate key given in txn request",
                ),
                Next::Return,
            ),
        ];
        for (a, want) in rows {
            assert_eq!(next_after_error(a.code, a.message), *want, "{a:?}");
        }
        assert!(is_connect_error(
            "tcp connect error: Connection refused (os error 111)"
        ));
        assert!(is_unreachable("no answer within 1000 ms"));
        assert!(is_unreachable("tcp connect error"));
        assert!(is_unreachable("Timeout expired"));
        assert!(!is_unreachable("etcdserver: no leader"));
    }
}
