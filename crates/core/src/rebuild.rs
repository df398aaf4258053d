//! Rebuilding a cluster a person asked for (`quorum restore`, `quorum recover`), the
//! step with no leader (restart what can be restarted, wait for an election, or say
//! that quorum is lost and which way back is left), and the `QuorumLost` condition
//! that tells a person when and how.
//!
//! A rebuild is the one operation that gives up the cluster as it is, so it never
//! starts on quorum's own judgement: a person confirms it, which writes
//! `ControlPlane.rebuild`. From then on the rule here comes before every other (a
//! teardown and a pause excepted), in two durable phases:
//!
//! 1. `Fencing`: every old machine but the survivor is fenced (stopped, its data moved
//!    where no start finds it, its record forgotten), all at once: there is no quorum
//!    left to protect, and none of them may come back. The survivor is stopped (it
//!    still runs with the old membership). Then the phase `Seeding` is recorded.
//! 2. `Seeding`: from a member, the survivor starts with `--force-new-cluster`; from a
//!    snapshot, one new machine is allocated, the snapshot restored into it with a
//!    fresh cluster token (so its cluster ID is new), and it starts as a new cluster.
//!    Once the seed leads a cluster of which it is the only member, the rebuild ends
//!    and the normal rules grow the cluster back to `replicas` through learners.
//!
//! Nothing old is ever started again once fencing began, and the seed starts only once
//! no old machine is left: two clusters that both think they are the control plane
//! never run at once.

use crate::decide::*;
use crate::model::*;
use crate::survivor::{self, Survivor};

impl View<'_> {
    /// No leader answered: membership cannot change. Restart members that were started
    /// before (their data makes `--initial-cluster` irrelevant) once their backoff has
    /// passed; otherwise wait for an election, or say quorum is lost and nothing can be
    /// repaired without it.
    pub(crate) fn without_leader(&self) -> Step {
        let stopped: Vec<&Seen> = self
            .seen
            .iter()
            .filter(|s| !s.running() && s.has_data() && !s.machine.deleting)
            .collect();
        let actions: Vec<Action> = stopped
            .iter()
            .filter(|s| self.restart_wait_s(s) == 0 && !self.foreign_without_leader(s))
            .map(|s| Action::StartMachine {
                machine: s.machine.name.clone(),
                state: ClusterState::Existing,
                initial_cluster: vec![],
                expect: s.obs.and_then(|o| o.marker),
            })
            .collect();
        if !actions.is_empty() {
            return Step::many(Operation::Repairing, actions);
        }
        if self.seen.is_empty() {
            return Step::wait(
                Operation::WaitingForQuorum,
                "no machine and no reachable member: nothing to bootstrap from",
            );
        }
        let answering = self.seen.iter().filter(|s| s.status().is_some()).count();
        let down = self.down_in_words();
        let all_running = self.seen.iter().all(|s| s.running() || s.machine.deleting);
        let n = self.seen.iter().filter(|s| !s.machine.deleting).count();
        if down.is_empty() || (answering == 0 && all_running) || answering >= quorum_size(n) {
            // An election (a quorum answers, knowing no leader yet), or processes just
            // started: nothing says quorum is gone yet.
            return Step::wait(
                Operation::WaitingForQuorum,
                "no member answered as leader: waiting for a quorum of members",
            );
        }
        // Only machines that still have their data can bring quorum back by starting.
        let with_data = self
            .seen
            .iter()
            .filter(|s| !s.machine.deleting && (s.has_data() || s.status().is_some()))
            .count();
        let way_back = if with_data >= quorum_size(n) {
            "Bring back a member (start its host or process) and the rest is repaired".to_string()
        } else {
            format!(
                "only {with_data} of {n} still have their data, so starting members cannot bring it back: rebuild it from a survivor or a snapshot (`quorum recover {} --from-member M` or `--from-snapshot ID`; the QuorumLost condition names which)",
                self.cp.name
            )
        };
        Step::refuse(
            Operation::WaitingForQuorum,
            format!(
                "quorum is lost: {answering} of {n} members answer ({}), below the quorum of {}; quorum replaces no member without a quorum (removing one needs a leader, and a replacement could not join). {way_back}",
                down.join(", "),
                quorum_size(n)
            ),
        )
    }

    /// The machines that do not answer, each with why in words (unreachable, down
    /// without data, down until its next start).
    fn down_in_words(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter(|s| !s.machine.deleting && s.status().is_none())
            .map(|s| {
                let wait = self.restart_wait_s(s);
                let name = &s.machine.name;
                if s.running() {
                    format!("{name} unreachable")
                } else if !s.has_data() {
                    format!("{name} down without data")
                } else {
                    format!("{name} down (next start in {wait}s)")
                }
            })
            .collect()
    }

    /// The rebuild's next step, while one is recorded.
    pub(crate) fn rebuild(&self) -> Option<Step> {
        let rb = self.cp.rebuild.as_ref()?;
        let op = match rb.from {
            RebuildSource::Member { .. } => Operation::Recovering,
            RebuildSource::Snapshot { .. } => Operation::Restoring,
        };
        // What the rebuild keeps: the survivor, or the seed once seeding began.
        let keep = |s: &Seen<'_>| match (&rb.from, rb.phase) {
            (RebuildSource::Member { machine }, _) => s.machine.name == *machine,
            (RebuildSource::Snapshot { .. }, RebuildPhase::Fencing) => false,
            (RebuildSource::Snapshot { .. }, RebuildPhase::Seeding) => self.is_seed(s),
        };
        let fence: Vec<Action> = self
            .seen
            .iter()
            .filter(|s| !keep(s))
            .map(|s| Action::FenceMachine {
                machine: s.machine.name.clone(),
            })
            .collect();
        if !fence.is_empty() {
            return Some(Step::many(op, fence));
        }
        match (&rb.from, rb.phase) {
            (RebuildSource::Member { machine }, phase) => {
                Some(self.recover_from_member(op, machine, phase))
            }
            (RebuildSource::Snapshot { .. }, RebuildPhase::Fencing) => Some(Step::act(
                op,
                Action::SetRebuildPhase {
                    phase: RebuildPhase::Seeding,
                },
            )),
            (RebuildSource::Snapshot { id, .. }, RebuildPhase::Seeding) => {
                Some(self.restore_from_snapshot(op, id))
            }
        }
    }

    /// In phase `Seeding` of a snapshot restore, the seed is the oldest machine (the
    /// one allocated then); any other is fenced.
    fn is_seed(&self, s: &Seen<'_>) -> bool {
        self.seen
            .first()
            .is_some_and(|first| first.machine.name == s.machine.name)
    }

    fn recover_from_member(&self, op: Operation, machine: &str, phase: RebuildPhase) -> Step {
        let Some(s) = self.seen.iter().find(|s| s.machine.name == machine) else {
            return Step::refuse(
                op,
                format!(
                    "the survivor {machine} has no machine record any more: nothing to recover from; restore from a snapshot instead (`quorum restore {} --from ID`)",
                    self.cp.name
                ),
            );
        };
        if !s.has_data() && !s.running() {
            return Step::refuse(
                op,
                format!(
                    "the survivor {machine} has no data any more: nothing to recover from; restore from a snapshot instead (`quorum restore {} --from ID`)",
                    self.cp.name
                ),
            );
        }
        if phase == RebuildPhase::Fencing {
            if s.running() {
                // It still runs with the old membership: stopped before it is forced.
                return Step::act(
                    op,
                    Action::StopMachine {
                        machine: machine.to_string(),
                    },
                );
            }
            return Step::act(
                op,
                Action::SetRebuildPhase {
                    phase: RebuildPhase::Seeding,
                },
            );
        }
        if self.serves_alone(s) {
            return Step::act(
                op,
                Action::FinishRebuild {
                    machine: machine.to_string(),
                },
            );
        }
        if s.running() {
            return Step::wait(
                op,
                format!("waiting for {machine} to lead a cluster of its own"),
            );
        }
        if let Some(step) = self.seed_backoff(op, s) {
            return step;
        }
        Step::act(
            op,
            Action::ForceNewCluster {
                machine: machine.to_string(),
                expect: s.obs.and_then(|o| o.marker),
            },
        )
    }

    fn restore_from_snapshot(&self, op: Operation, id: &str) -> Step {
        let Some(seed) = self.seen.first() else {
            return Step::act(
                op,
                Action::AllocateMachine {
                    bootstrap: true,
                    version: self.spec().version,
                    remediation: None,
                },
            );
        };
        let machine = seed.machine.name.clone();
        if self.serves_alone(seed) {
            return Step::act(op, Action::FinishRebuild { machine });
        }
        if seed.running() {
            return Step::wait(
                op,
                format!("waiting for {machine} to serve the restored data"),
            );
        }
        // Restored data carries no marker until the seed served: a marked directory is
        // not what this rebuild restored (copied from elsewhere), and is never started.
        if seed.obs.and_then(|o| o.marker).is_some() {
            return Step::act(op, Action::FenceMachine { machine });
        }
        if !seed.has_data() {
            return Step::act(
                op,
                Action::RestoreSnapshot {
                    machine,
                    id: id.to_string(),
                },
            );
        }
        if let Some(step) = self.seed_backoff(op, seed) {
            return step;
        }
        Step::act(
            op,
            Action::StartMachine {
                state: ClusterState::New,
                initial_cluster: vec![InitialMember {
                    name: machine.clone(),
                    peer_url: seed.machine.peer_url(),
                }],
                expect: seed.obs.and_then(|o| o.marker),
                machine,
            },
        )
    }

    /// A seed that stopped again waits out the restart backoff, as any member does.
    fn seed_backoff(&self, op: Operation, s: &Seen<'_>) -> Option<Step> {
        let wait_s = self.restart_wait_s(s);
        (wait_s > 0).then(|| {
            Step::wait(
                op,
                format!("{} stopped again; next start in {wait_s}s", s.machine.name),
            )
        })
    }

    /// The seed leads a cluster in which it is the only voter. A learner beside it
    /// (a deposed controller's stale add, landed on the new cluster) is no reason to
    /// wait: once the rebuild ends, the normal rules remove a member that matches no
    /// machine.
    fn serves_alone(&self, s: &Seen<'_>) -> bool {
        let voters = self
            .members
            .map_or(0, |ms| ms.iter().filter(|m| !m.is_learner).count());
        voters == 1 && s.member.is_some_and(|m| !m.is_learner && self.healthy(m))
    }

    /// `QuorumLost`, when no leader answers, more members than a quorum can spare do
    /// not answer at all, and that has lasted `remediation.unhealthyAfter` (the oldest
    /// problem the controller remembers: a survivor's "knows no leader", or a lost
    /// member's own): the survivor that applied the most and the newest verified
    /// snapshot, with the command for each way back.
    pub(crate) fn quorum_lost(&self) -> Option<Condition> {
        if self.members.is_some() || self.cp.rebuild.is_some() || self.seen.is_empty() {
            return None;
        }
        let after_s = self.spec().remediation.unhealthy_after.as_secs() as i64;
        // With no leader there is no membership to read: every machine counts, a
        // leaving one too (its removal needs the very quorum that is gone).
        let voters: Vec<&Seen<'_>> = self.seen.iter().collect();
        let n = voters.len();
        let lost: Vec<&Seen<'_>> = voters
            .iter()
            .copied()
            .filter(|s| s.status().is_none())
            .collect();
        let for_s = voters
            .iter()
            .map(|s| self.unhealthy_for_s(&s.machine.name))
            .max()
            .unwrap_or(0);
        if n - lost.len() >= quorum_size(n) || for_s < after_s {
            return None;
        }
        let name = &self.cp.name;
        let survivors: Vec<Survivor<'_>> = voters
            .iter()
            .map(|s| Survivor::of(&s.machine.name, s.machine.serial, s.status()))
            .collect();
        let newest = crate::backup::newest_verified(self.snapshots);
        let from_member = match survivor::best(&survivors) {
            Some(b) => {
                let snapshot = newest.map(|snap| (snap.id.as_str(), snap.revision));
                let worse = survivor::worse_than_another(b, &survivors, snapshot)
                    .map(|why| format!(" (refused without --accept-data-loss: {why})"))
                    .unwrap_or_default();
                format!(
                    "the most up-to-date survivor is {m} (revision {rev}, applied index {applied}): `quorum recover {name} --from-member {m}` keeps every write it applied{worse}",
                    m = b.machine,
                    rev = b.revision.unwrap_or_default(),
                    applied = b.applied_index
                )
            }
            None => "no survivor answers: start one that has its data (its host or process), then recover from it".to_string(),
        };
        let from_snapshot = match newest {
            Some(snap) => format!(
                "the newest verified snapshot is {id} (revision {rev}, taken {ago}s ago): `quorum recover {name} --from-snapshot {id}` loses every write after revision {rev}",
                id = snap.id,
                rev = snap.revision,
                ago = (self.now_unix_s - snap.taken_at_unix_s).max(0)
            ),
            None => "there is no verified snapshot".to_string(),
        };
        let down: Vec<&str> = lost.iter().map(|s| s.machine.name.as_str()).collect();
        Some(Condition {
            kind: ConditionKind::QuorumLost,
            status: true,
            message: format!(
                "{} of {n} members do not answer ({}) and no leader for {for_s}s (unhealthyAfter {after_s}s): if they cannot be brought back with their data, quorum cannot come back on its own; {from_member}; {from_snapshot}. Each asks for confirmation",
                lost.len(),
                down.join(", ")
            ),
        })
    }
}
