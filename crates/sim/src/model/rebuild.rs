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

/// A control plane deleted and brought back from a snapshot: no machine, no member, no
/// process, new client addresses to come, and the restore from snapshot `snap` (of
/// revision 100) recorded, as `quorum create m --from-snapshot snap` records it.
pub(super) fn initial_recreate(variant: Variant) -> State {
    let mut s = initial_rollout(variant);
    s.machines.clear();
    s.procs.clear();
    s.members.clear();
    s.leader = None;
    s.cp.client_addresses.clear();
    s.cp.rebuild = Some(Rebuild {
        from: RebuildSource::Snapshot {
            id: SNAPSHOT.into(),
            revision: 100,
        },
        token: "m-recreated".into(),
        phase: RebuildPhase::Fencing,
        requested_at_unix_s: NOW_UNIX_S,
    });
    s
}

/// The snapshot the recreate variant restores.
const SNAPSHOT: &str = "snap";

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
            Action::RestoreSnapshot { machine, id } => self.restore(machine, id)?,
            _ => unreachable!("not a rebuild action: {a}"),
        }
        Ok(())
    }

    /// The snapshot into the seed's empty data directory, as a new cluster of one (a
    /// fresh member ID, not yet named). The controller re-reads the store right before:
    /// a stale restore finds no rebuild in its seeding phase; and it never writes into a
    /// directory that holds data.
    fn restore(&mut self, machine: &str, id: &str) -> Result<(), String> {
        if !self.variant.recreate {
            return Err("a snapshot restore decided in a recovery from a member".into());
        }
        if id != SNAPSHOT {
            return Err(format!("restored {id}, not the snapshot recorded"));
        }
        if !self.seeding() {
            return Ok(());
        }
        let Some(serial) = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .map(|m| m.serial)
        else {
            return Ok(());
        };
        let Some(p) = self.proc_mut(machine) else {
            return Ok(());
        };
        if p.has_data {
            return Ok(());
        }
        if p.running {
            return Err(format!("{machine} restored into while its process runs"));
        }
        p.has_data = true;
        let id = self.next_member_id;
        self.next_member_id += 1;
        let peer_url = self
            .machines
            .iter()
            .find(|m| m.serial == serial)
            .map(|m| m.peer_url())
            .unwrap_or_default();
        self.members = vec![MMember {
            id,
            peer_url,
            serial,
            named: false,
            is_learner: false,
            caught_up: true,
        }];
        self.leader = None;
        Ok(())
    }

    /// The seed of a restore starts as a new cluster: only while the rebuild seeds,
    /// only on the data restored into it, and only with no other process running.
    pub(super) fn start_seed(&mut self, machine: &str) -> Result<(), String> {
        let serial = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .map(|m| m.serial);
        let alone = self.members.len() == 1 && self.members[0].serial == serial.unwrap_or(0);
        let fresh = alone && !self.members[0].named;
        if !self.variant.recreate || !fresh {
            return Err(format!(
                "{machine} started with `new` after the cluster formed"
            ));
        }
        if !self.proc(machine).is_some_and(|p| p.has_data) {
            return Err(format!(
                "{machine} started as a new cluster with no data restored"
            ));
        }
        if let Some(other) = self.procs.iter().find(|p| p.running && p.name != machine) {
            return Err(format!(
                "{machine} started as a new cluster while {} runs: two clusters",
                other.name
            ));
        }
        if let Some(p) = self.proc_mut(machine) {
            p.running = true;
        }
        self.members[0].named = true;
        self.leader = Some(self.members[0].id);
        Ok(())
    }

    fn seeding(&self) -> bool {
        self.cp
            .rebuild
            .as_ref()
            .is_some_and(|rb| rb.phase == RebuildPhase::Seeding)
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
