//! A rebuild a person confirmed, simulated: fencing old machines, forcing the survivor
//! into a cluster of its own, restoring a seed from a snapshot, and the invariant that
//! matters most here: a seed never starts while any other old member runs (two
//! clusters that both think they are the control plane).

use super::*;
use quorum_core::{RebuildPhase, RebuildSource};

/// What the rebuilds of a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RebuildCounts {
    /// Majorities lost with their data (the `quorum-loss` scenario).
    pub quorum_losses: u64,
    /// Rebuilds a person confirmed, by source.
    pub from_member: u64,
    pub from_snapshot: u64,
    pub fenced: u64,
    pub finished: u64,
    /// Acknowledged entries the chosen source did not hold: the recovery's data loss,
    /// which the person accepted when they confirmed.
    pub entries_lost: u64,
}

impl World {
    /// Performs one of the rebuild's actions.
    pub(crate) fn perform_rebuild(&mut self, a: &Action, fenced: bool) -> Answer {
        match a {
            Action::FenceMachine { machine } => {
                // Outside the store first (its process and directory), then the record.
                self.procs.remove(machine);
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
            Action::FinishRebuild => {
                if fenced {
                    return Answer::Fenced;
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
