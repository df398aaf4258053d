//! A learner whose own publish was lost, started again.
//!
//! etcd serves a member's clients only once its publish (its name and client URLs,
//! proposed through raft when it starts) has come back applied through its own log. A
//! new member whose first contact with the leader is a raft snapshot (after a restore,
//! whose log starts at the snapshot, or once the leader's log is compacted) can be sent
//! its publish already applied inside that snapshot: the leader's member list shows it
//! started, while the member waits for its proposal until etcd's request timeout, 7 s (5 s
//! plus two election timeouts), and serves only after its retry. Seen with etcd 3.5.1
//! after `quorum restore` (TLS, one member restored, two learners joined): 3 of the 4
//! learners of two restores, each `started` in the member list while its own endpoint did
//! not answer, its log saying "failed to publish local member to cluster through raft"
//! with `publish-timeout 7s` (the same words as etcd-io/etcd#16436 and #18534). A second
//! start publishes at once: its log now holds the snapshot, so the proposal comes back
//! through it.
//!
//! Invariant: only a learner's first process is stopped for this (`starts_unix_s` has
//! one start; the start that follows is its second, so never twice), only once the
//! leader's member list shows it published under its own name and its endpoint has not
//! answered for `LOST_AFTER_S`, never from `ETCD_RETRY_S` on (etcd's own retry answers
//! then; a learner still silent has another problem, which remediation judges), and only
//! while the database is at most `MAX_DB_BYTES` (a larger one may still be arriving: the
//! member is then silent because it is busy, and etcd's retry lands right after it).
//! It is stopped and started again in one decision (a pass in between could find it
//! failed for `unhealthyAfter` and replace it, as likely to lose its publish); a crash
//! between the two leaves a stopped learner, which `restart_stopped` starts (its stop was
//! planned, so no backoff holds it).

use crate::decide::{Action, ClusterState, Operation, Seen, Step, View};
use crate::model::{MachineObservation, Member, ProcessState};

/// How long a learner published in the member list may go unanswered before its own
/// publish counts as lost. A learner that received its publish normally serves within
/// milliseconds of the cluster applying it.
pub const LOST_AFTER_S: i64 = 2;

/// When etcd retries a publish that timed out: its request timeout, 5 s plus two
/// election timeouts of 1 s (etcd's defaults, which quorum keeps).
pub const ETCD_RETRY_S: i64 = 7;

/// The largest database whose snapshot is taken to have arrived within `LOST_AFTER_S`
/// (64 MiB: about half a second at a gigabit).
pub const MAX_DB_BYTES: u64 = 64 << 20;

/// Why `machine`'s learner is to be stopped and started again, if its publish was lost
/// (the module's rule); `db_bytes` is the leader's database size.
pub fn lost(
    machine: &str,
    member: &Member,
    obs: &MachineObservation,
    db_bytes: u64,
    now_unix_s: i64,
) -> Option<String> {
    let published = member.name == machine && !member.client_urls.is_empty();
    let silent = obs.process == ProcessState::Running && obs.status.is_none();
    if !member.is_learner || !published || !silent || db_bytes > MAX_DB_BYTES {
        return None;
    }
    let [first_start] = obs.starts_unix_s.as_slice() else {
        return None;
    };
    let age_s = now_unix_s.saturating_sub(*first_start);
    if !(LOST_AFTER_S..ETCD_RETRY_S).contains(&age_s) {
        return None;
    }
    Some(format!(
        "the cluster shows it started, but it has not answered in {age_s}s: its own \
         publish came back inside the leader's snapshot, and etcd would wait until \
         {ETCD_RETRY_S}s to try again; started again, it serves at once"
    ))
}

impl<'a> View<'a> {
    /// Stop learner `s` and start it again in the same pass, joining the cluster as
    /// it is: a pass between them could find it failed long enough and replace it.
    pub(crate) fn restart_learner(&self, op: Operation, s: &Seen<'a>) -> Step {
        let machine = s.machine.name.clone();
        let start = Action::StartMachine {
            machine: machine.clone(),
            state: ClusterState::Existing,
            initial_cluster: self.initial_cluster(),
            expect: s.obs.and_then(|o| o.marker),
        };
        Step::many(op, vec![Action::StopMachine { machine }, start])
    }

    /// Why learner `s` is to be stopped and started again: its own publish was lost
    /// (`publish`). Judged only against a leader that answers (its database size).
    pub(crate) fn publish_lost(&self, s: &Seen<'a>, learner: &Member) -> Option<String> {
        let db_bytes = self.leader_status()?.db_size_bytes;
        lost(&s.machine.name, learner, s.obs?, db_bytes, self.now_unix_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EndpointStatus;

    const NOW: i64 = 1_800_000_000;

    fn learner(name: &str, client: bool) -> Member {
        Member {
            id: 7,
            name: name.into(),
            peer_urls: vec!["https://127.0.0.5:2380".into()],
            client_urls: if client {
                vec!["https://127.0.0.5:2379".into()]
            } else {
                vec![]
            },
            is_learner: true,
        }
    }

    fn running(starts: &[i64]) -> MachineObservation {
        MachineObservation {
            process: ProcessState::Running,
            has_data: true,
            status: None,
            marker: None,
            quorum_read: None,
            starts_unix_s: starts.to_vec(),
            planned_starts_unix_s: vec![],
            running_version: None,
        }
    }

    fn answering() -> EndpointStatus {
        EndpointStatus {
            member_id: 7,
            leader_id: 1,
            raft_term: 2,
            raft_index: 10,
            raft_applied_index: 10,
            version: None,
            is_learner: true,
            alarms: vec![],
            cluster_id: 1,
            revision: 3,
            db_size_bytes: 1,
            db_size_in_use_bytes: 1,
        }
    }

    #[test]
    fn a_published_silent_first_process_is_restarted_between_2_and_7_seconds() {
        let m = learner("c-5", true);
        for age in [0, 1] {
            assert_eq!(
                lost("c-5", &m, &running(&[NOW - age]), 0, NOW),
                None,
                "{age}"
            );
        }
        for age in [2, 3, 6] {
            let why = lost("c-5", &m, &running(&[NOW - age]), 0, NOW).expect("lost");
            assert!(why.contains(&format!("{age}s")), "{why}");
        }
        // From etcd's retry on, the rule is not the answer.
        assert_eq!(lost("c-5", &m, &running(&[NOW - 7]), 0, NOW), None);
    }

    #[test]
    fn anything_else_is_left_alone() {
        let old = NOW - 3;
        let m = learner("c-5", true);
        // Not published yet (etcd has not applied its name), or under another name.
        assert_eq!(
            lost("c-5", &learner("", false), &running(&[old]), 0, NOW),
            None
        );
        assert_eq!(
            lost("c-5", &learner("c-4", true), &running(&[old]), 0, NOW),
            None
        );
        // A voter.
        let voter = Member {
            is_learner: false,
            ..m.clone()
        };
        assert_eq!(lost("c-5", &voter, &running(&[old]), 0, NOW), None);
        // It answers; it is not running.
        let mut obs = running(&[old]);
        obs.status = Some(answering());
        assert_eq!(lost("c-5", &m, &obs, 0, NOW), None);
        let mut obs = running(&[old]);
        obs.process = ProcessState::Stopped;
        assert_eq!(lost("c-5", &m, &obs, 0, NOW), None);
        // Its second process (the rule's own restart, or any other), or no start known.
        assert_eq!(lost("c-5", &m, &running(&[old - 1, old]), 0, NOW), None);
        assert_eq!(lost("c-5", &m, &running(&[]), 0, NOW), None);
        // A database that may still be arriving.
        assert_eq!(
            lost("c-5", &m, &running(&[old]), MAX_DB_BYTES + 1, NOW),
            None
        );
        assert!(lost("c-5", &m, &running(&[old]), MAX_DB_BYTES, NOW).is_some());
    }
}
