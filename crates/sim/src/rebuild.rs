//! A rebuild a person confirmed, simulated: fencing old machines, forcing the survivor
//! into a cluster of its own, restoring a seed from a snapshot, and the invariant that
//! matters most here: a seed never starts while any other old member runs (two
//! clusters that both think they are the control plane).

use super::*;
use quorum_core::{ConditionKind, Decision, Rebuild, RebuildPhase, RebuildSource};

/// The earliest step at which the `quorum-loss` scenario loses its majority, and the
/// spread after it (drawn from the seed).
const LOSS_FROM_STEP: u64 = 10;
const LOSS_SPREAD_STEPS: u64 = 150;

/// What the rebuilds of a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RebuildCounts {
    /// Majorities lost with their data (the `quorum-loss` scenario).
    pub quorum_losses: u64,
    /// Rebuilds a person confirmed, by source.
    pub from_member: u64,
    pub from_snapshot: u64,
    /// Of those restores, the ones a person made by deleting the control plane and
    /// bringing it back from the snapshot.
    pub recreated: u64,
    pub fenced: u64,
    /// Fenced directories removed once kept `keepFenced`.
    pub fenced_removed: u64,
    pub finished: u64,
    /// Acknowledged entries the chosen source did not hold: the recovery's data loss,
    /// which the person accepted when they confirmed.
    pub entries_lost: u64,
}

impl RebuildCounts {
    pub fn add(&mut self, o: &RebuildCounts) {
        self.quorum_losses += o.quorum_losses;
        self.from_member += o.from_member;
        self.from_snapshot += o.from_snapshot;
        self.recreated += o.recreated;
        self.fenced += o.fenced;
        self.fenced_removed += o.fenced_removed;
        self.finished += o.finished;
        self.entries_lost += o.entries_lost;
    }
}

impl std::fmt::Display for RebuildCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} majorities lost with their data; a person confirmed {} recoveries from the survivor and {} restores of a snapshot ({} by deleting it and bringing it back); {} machines fenced ({} fenced directories removed after keepFenced), {} rebuilds finished; {} acknowledged entries given up by those choices",
            self.quorum_losses,
            self.from_member,
            self.from_snapshot,
            self.recreated,
            self.fenced,
            self.fenced_removed,
            self.finished,
            self.entries_lost
        )
    }
}

impl World {
    /// The `quorum-loss` scenario's fault and its person: a majority of voters dies with
    /// its data once, at a step drawn from the seed; once the controller shows
    /// `QuorumLost`, the person confirms one of the two ways back it names (from a
    /// snapshot, when a verified one exists and the seed says so).
    pub(crate) fn quorum_loss_step(&mut self, faults_on: bool) {
        if self.cfg.scenario != Scenario::QuorumLoss {
            return;
        }
        if self.rebuilds.quorum_losses == 0 {
            let at = LOSS_FROM_STEP + self.cfg.seed % LOSS_SPREAD_STEPS;
            if faults_on && self.step >= at {
                self.lose_majority();
            }
            return;
        }
        // One confirmation per loss: a person does not rebuild a cluster again because
        // its one member restarted (a wrong guess that would throw away writes).
        let confirmed = self.rebuilds.from_member + self.rebuilds.from_snapshot;
        if self.cp.rebuild.is_some() || confirmed >= self.rebuilds.quorum_losses {
            return;
        }
        let Some(message) = self.quorum_lost.take() else {
            return;
        };
        let by_snapshot = self.rng.chance(500);
        let snapshot = quorum_core::backup::newest_verified(&self.snapshots).cloned();
        let from = match (by_snapshot, snapshot, survivor_named(&message)) {
            (true, Some(s), _) | (false, Some(s), None) => RebuildSource::Snapshot {
                id: s.id.clone(),
                revision: s.revision,
            },
            (_, _, Some(m)) => RebuildSource::Member { machine: m },
            // Nothing to recover from yet: a person waits for a survivor to answer.
            (_, None, None) => return,
        };
        match from {
            RebuildSource::Member { .. } => self.rebuilds.from_member += 1,
            RebuildSource::Snapshot { .. } => self.rebuilds.from_snapshot += 1,
        }
        // Half the restores go the long way: the person deletes the control plane and
        // brings it back from the snapshot (`quorum create NAME --from-snapshot`).
        if matches!(from, RebuildSource::Snapshot { .. }) && self.rng.chance(500) {
            self.delete_for_recreate();
            self.note(format!("OPERATOR brings it back from {from}"));
        } else {
            self.note(format!("OPERATOR confirms a rebuild from {from}"));
        }
        self.cp.rebuild = Some(Rebuild {
            from,
            token: format!("sim-{}", self.step),
            phase: RebuildPhase::Fencing,
            requested_at_unix_s: self.now_unix_s(),
        });
    }

    /// `quorum delete` to its end, as the teardown does it (every process stopped and its
    /// data removed, every record forgotten): what `create --from-snapshot` then finds is
    /// a name with snapshots and nothing else. The control plane comes back new, with
    /// no client addresses yet (clients are given the new ones).
    fn delete_for_recreate(&mut self) {
        let names: Vec<String> = self.machines.iter().map(|m| m.name.clone()).collect();
        self.note(format!(
            "OPERATOR deletes the control plane: {} stopped, data removed",
            if names.is_empty() {
                "nothing".into()
            } else {
                names.join(", ")
            }
        ));
        for n in &names {
            self.procs.remove(n);
        }
        self.machines.clear();
        self.cp.client_addresses.clear();
        self.client_given = (0, Vec::new());
        self.rebuilds.recreated += 1;
    }

    /// Kills a majority of the voters (all but `n - quorum`) and wipes their data, once
    /// the cluster is whole (no other fault: what is lost is the majority, and the
    /// survivor has its data) and every machine is a voter: with no leader the core
    /// counts machines, not members (a learner would count as a voter there).
    fn lose_majority(&mut self) {
        let voters: Vec<String> = self
            .members
            .iter()
            .filter(|m| !m.is_learner)
            .filter_map(|m| m.machine.clone())
            .collect();
        let whole = self.impairment.is_none()
            && voters.len() == self.members.len()
            && voters.len() == self.machines.len()
            && voters
                .iter()
                .all(|v| self.procs.get(v).is_some_and(|p| p.running && p.has_data));
        if voters.len() < 2 || !whole {
            return;
        }
        let lose = voters.len() - quorum_size(voters.len()) + 1;
        let keep = self.rng.below(voters.len() as u64) as usize;
        let victims: Vec<String> = voters
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != keep)
            .map(|(_, n)| n.clone())
            .take(lose)
            .collect();
        let formed_unix_s = EPOCH_UNIX_S;
        for v in &victims {
            let p = self.procs.entry(v.clone()).or_default();
            // The provider's start history lives beside the data and outlives it; the
            // members a run begins with were started before it.
            if p.starts_unix_s.is_empty() {
                p.starts_unix_s.push(formed_unix_s);
            }
            p.running = false;
            p.has_data = false;
            p.marker = None;
            p.exit_at_ms = None;
        }
        self.rebuilds.quorum_losses += 1;
        self.note(format!(
            "FAULT quorum lost: {} die with their data",
            victims.join(", ")
        ));
    }

    /// The `quorum-loss` scenario lost its majority and the rebuild has not ended yet.
    pub(crate) fn rebuild_pending(&self) -> bool {
        self.rebuilds.quorum_losses > self.rebuilds.finished
    }

    /// Remembers what the controller's `QuorumLost` says, for the person.
    pub(crate) fn note_quorum_lost(&mut self, d: &Decision) {
        self.quorum_lost = d
            .condition(ConditionKind::QuorumLost)
            .filter(|c| c.status)
            .map(|c| c.message.clone());
    }

    /// Performs one of the rebuild's actions.
    pub(crate) fn perform_rebuild(&mut self, a: &Action, fenced: bool) -> Answer {
        match a {
            Action::FenceMachine { machine } => {
                // Outside the store first (its process and directory), then the record.
                if self.procs.remove(machine).is_some() {
                    let at = self.now_unix_s();
                    self.fenced_dirs.push(quorum_core::fenced::FencedSeen {
                        name: quorum_core::fenced::fenced_name(machine, at, 0),
                        fenced_at_unix_s: at,
                    });
                }
                self.rebuilds.fenced += 1;
                if fenced {
                    return Answer::Fenced;
                }
                self.machines.retain(|m| &m.name != machine);
                Answer::Done
            }
            Action::SetRebuildPhase { phase } => {
                if fenced {
                    return Answer::Fenced;
                }
                if let Some(rb) = self.cp.rebuild.as_mut() {
                    rb.phase = *phase;
                }
                Answer::Done
            }
            Action::FinishRebuild { machine } => {
                if fenced {
                    return Answer::Fenced;
                }
                if let Some(m) = self.machines.iter_mut().find(|m| &m.name == machine) {
                    m.deleting = false;
                    m.in_place = None;
                    m.remediation = None;
                }
                if self.cp.rebuild.take().is_some() {
                    self.rebuilds.finished += 1;
                }
                Answer::Done
            }
            Action::ForceNewCluster { machine, expect } => self.force_new_cluster(machine, *expect),
            Action::RestoreSnapshot { machine, id } => self.restore_seed(machine, id),
            _ => unreachable!("not a rebuild action: {a}"),
        }
    }

    /// Removes a fenced directory, checked against the ground truth: never one fenced
    /// less than `keepFenced` ago. One gone already is success.
    pub(crate) fn prune_fenced(&mut self, name: &str) -> Answer {
        let keep_s = self.cp.spec.recovery.keep_fenced.as_secs() as i64;
        let now = self.now_unix_s();
        if let Some(f) = self.fenced_dirs.iter().find(|f| f.name == name) {
            let age = now - f.fenced_at_unix_s;
            if age <= keep_s {
                self.violate(format!(
                    "fenced {name} removed {age}s after its fence (keepFenced {keep_s}s)"
                ));
            }
            self.fenced_dirs.retain(|f| f.name != name);
            self.rebuilds.fenced_removed += 1;
        }
        Answer::Done
    }

    /// The controller re-reads the rebuild from the store right before it forces a
    /// cluster (a deposed controller's stale step finds it ended).
    fn seeding(&self) -> bool {
        self.cp
            .rebuild
            .as_ref()
            .is_some_and(|rb| rb.phase == RebuildPhase::Seeding)
    }

    fn force_new_cluster(&mut self, machine: &str, expect: Option<DataMarker>) -> Answer {
        if !self.seeding() {
            return Answer::Failed("no rebuild in its seeding phase: a stale step");
        }
        let p = self.procs.get(machine).cloned().unwrap_or_default();
        if p.marker != expect || !p.has_data {
            return Answer::Failed("its data directory changed since the start was decided");
        }
        if p.running {
            return Answer::Done;
        }
        self.check_alone(machine);
        let Some(mine) = self.member_of_machine(machine).cloned() else {
            // Its data names a member the membership forgot: etcd would exit.
            return Answer::Done;
        };
        let lost = self.acked.saturating_sub(mine.log);
        self.rebuilds.entries_lost += lost;
        self.acked = self.acked.min(mine.log);
        self.commit = mine.log;
        self.members = vec![SimMember {
            is_learner: false,
            connected_since_ms: self.now_ms,
            name: machine.to_string(),
            ..mine.clone()
        }];
        self.leader = None;
        self.stale_learner = None;
        self.external_running.clear();
        let p = self.procs.entry(machine.to_string()).or_default();
        p.running = true;
        p.last_start_ms = Some(self.now_ms);
        self.record_ca_files(machine);
        self.note(format!(
            "  {machine} forced into a cluster of its own at log {} ({lost} acknowledged entries it never had)",
            mine.log
        ));
        Answer::Done
    }

    /// The snapshot into the seed's empty data directory, as a new cluster whose only
    /// member is the seed (a fresh token: a new member ID).
    fn restore_seed(&mut self, machine: &str, id: &str) -> Answer {
        let recorded = self.snapshots.iter().any(|s| s.id == id);
        let Some(log) = self.snapshot_logs.get(id).copied().filter(|_| recorded) else {
            return Answer::Failed("the snapshot is no longer recorded");
        };
        let Some(mach) = self.machines.iter().find(|m| m.name == machine).cloned() else {
            return Answer::Done;
        };
        let p = self.procs.entry(machine.to_string()).or_default();
        if p.has_data {
            return Answer::Done;
        }
        p.has_data = true;
        p.marker = None;
        let lost = self.acked.saturating_sub(log);
        self.rebuilds.entries_lost += lost;
        self.acked = self.acked.min(log);
        self.commit = log;
        let member = SimMember {
            id: self.next_member_id,
            name: String::new(),
            peer_url: mach.peer_url(),
            is_learner: false,
            log,
            connected_since_ms: self.now_ms,
            machine: Some(machine.to_string()),
        };
        self.next_member_id += 1;
        self.members = vec![member];
        self.leader = None;
        self.stale_learner = None;
        self.external_running.clear();
        self.note(format!(
            "  {id} restored into {machine} at log {log} ({lost} acknowledged entries after it)"
        ));
        Answer::Done
    }

    /// The seed starts only once no other old member runs.
    pub(crate) fn check_alone(&mut self, seed: &str) {
        let others: Vec<String> = self
            .procs
            .iter()
            .filter(|(n, p)| n.as_str() != seed && p.running)
            .map(|(n, _)| n.clone())
            .collect();
        if !others.is_empty() {
            self.violate(format!(
                "{seed} seeds a new cluster while {} still run: two clusters",
                others.join(", ")
            ));
        }
    }

    /// A start with `ClusterState::New` is the seed of a restore, and nothing else.
    pub(crate) fn new_cluster_allowed(&self) -> bool {
        self.cp.rebuild.as_ref().is_some_and(|rb| {
            rb.phase == RebuildPhase::Seeding && matches!(rb.from, RebuildSource::Snapshot { .. })
        })
    }
}

/// The machine `QuorumLost` tells a person to recover from.
fn survivor_named(message: &str) -> Option<String> {
    let rest = message.split_once("--from-member ")?.1;
    let name: String = rest.chars().take_while(|c| *c != '`').collect();
    (!name.is_empty()).then_some(name)
}
