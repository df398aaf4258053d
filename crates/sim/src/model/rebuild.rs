//! The model's rebuild transitions (a recovery a person confirmed): fencing old
//! machines, forcing the survivor into a cluster of its own, and the property that a
//! seed never starts while another old member runs.

use super::*;
use quorum_core::{Rebuild, RebuildPhase, RebuildSource};

/// Three members at NEW, m-2 and m-3 gone with their data (no leader: quorum is lost),
/// m-1 running with its data, and the person's `recover --from-member m-1` recorded.
/// No further disk is lost (the only copy left is m-1's).
pub(super) fn initial_recovery(variant: Variant) -> State {
    let mut s = initial_rollout(variant);
    for m in &mut s.machines {
        m.version = NEW;
    }
    for p in &mut s.procs {
        p.binary = NEW;
        if p.name != "m-1" {
            p.running = false;
            p.has_data = false;
        }
    }
    s.leader = None;
    s.disk_lost = true;
    s.cp.rebuild = Some(Rebuild {
        from: RebuildSource::Member {
            machine: "m-1".into(),
        },
        token: "m-recovery".into(),
        phase: RebuildPhase::Fencing,
        requested_at_unix_s: NOW_UNIX_S,
    });
    s
}

impl State {
    /// Performs a rebuild action. `fenced`: the deposed controller (store writes fail,
    /// and its stale force finds the store's rebuild ended or moved on).
    pub(super) fn perform_rebuild(&mut self, a: &Action, fenced: bool) -> Result<(), String> {
        match a {
            Action::FenceMachine { machine } => {
                self.procs.retain(|p| &p.name != machine);
                if !fenced {
                    self.machines.retain(|m| &m.name != machine);
                }
            }
            Action::SetRebuildPhase { phase } => {
                if let (false, Some(rb)) = (fenced, self.cp.rebuild.as_mut()) {
                    rb.phase = *phase;
                }
            }
            Action::FinishRebuild { machine } => {
                if !fenced {
                    if let Some(m) = self.machines.iter_mut().find(|m| &m.name == machine) {
                        m.deleting = false;
                        m.in_place = None;
                        m.remediation = None;
                    }
                    self.cp.rebuild = None;
                }
            }
            Action::ForceNewCluster { machine, .. } => self.force(machine)?,
            // The model recovers from a member only (the simulator covers snapshots).
            Action::RestoreSnapshot { .. } => {
                return Err("a snapshot restore decided in a recovery from a member".into())
            }
            _ => unreachable!("not a rebuild action: {a}"),
        }
        Ok(())
    }

    fn force(&mut self, machine: &str) -> Result<(), String> {
        // The controller re-reads the store right before: a stale force finds no
        // rebuild in its seeding phase and is not performed.
        let seeding = self
            .cp
            .rebuild
            .as_ref()
            .is_some_and(|rb| rb.phase == RebuildPhase::Seeding);
        if !seeding {
            return Ok(());
        }
        let Some(p) = self.proc(machine) else {
            return Err(format!("{machine} forced with no process or data left"));
        };
        if p.running {
            return Ok(());
        }
        if !p.has_data {
            return Err(format!("{machine} forced on lost data"));
        }
        if let Some(other) = self.procs.iter().find(|p| p.running && p.name != machine) {
            return Err(format!(
                "{machine} forced into a new cluster while {} still runs: two clusters",
                other.name
            ));
        }
        let serial = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .map(|m| m.serial);
        self.members.retain(|m| Some(m.serial) == serial);
        for m in &mut self.members {
            m.is_learner = false;
            m.named = true;
            m.caught_up = true;
        }
        self.leader = self.members.first().map(|m| m.id);
        if let Some(p) = self.proc_mut(machine) {
            p.running = true;
        }
        Ok(())
    }
}
