//! Scheduled snapshots and retention in the simulator: the controller's `TakeSnapshot`
//! and `PruneSnapshot` against a simulated snapshot store. Faults: no leader to stream
//! from, a leader that stalls mid-stream (the snapshot fails), a test restore that fails
//! (the snapshot stays, unverified). Checked: a snapshot is taken only from a leader
//! with a quorum behind it, and retention never removes the newest verified snapshot
//! nor one of the newest `retention.last`.

use crate::World;
use quorum_core::backup::SnapshotSeen;
use quorum_core::{BackupSpec, RetentionSpec};

/// The simulator's `spec.backup`: every 20 s of simulated time, keeping 1 (no days: the
/// runs are minutes long), so that runs take and prune snapshots.
pub fn sim_backup() -> BackupSpec {
    BackupSpec {
        s3: None,
        schedule: "*/20 * * * * *".into(),
        retention: RetentionSpec { last: 1, days: 0 },
        // Between two scheduled ones: the newest is restored again once.
        verify_every: quorum_core::Span::from_secs(10),
        store: None,
    }
}

/// Per mille: a snapshot whose leader stalls mid-stream; a test restore that fails.
const STALL_PER_MILLE: u64 = 50;
const BAD_RESTORE_PER_MILLE: u64 = 100;

/// What the snapshots did in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupCounts {
    pub taken: u64,
    pub failed: u64,
    pub unverified: u64,
    pub pruned: u64,
    pub restored_again: u64,
}

impl BackupCounts {
    pub fn add(&mut self, o: &BackupCounts) {
        self.taken += o.taken;
        self.failed += o.failed;
        self.unverified += o.unverified;
        self.pruned += o.pruned;
        self.restored_again += o.restored_again;
    }
}

impl std::fmt::Display for BackupCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} scheduled snapshots taken ({} failed their test restore), {} failed (no leader, or it stalled mid-stream), {} restored again (verifyEvery), {} removed by retention",
            self.taken, self.unverified, self.failed, self.restored_again, self.pruned
        )
    }
}

impl World {
    pub(crate) fn take_snapshot(&mut self, fenced: bool) -> crate::Answer {
        let leader_serves = self.leader.is_some() && self.has_quorum();
        if !leader_serves || self.rng.chance(STALL_PER_MILLE) {
            self.backups.failed += 1;
            return crate::Answer::Failed("snapshot: no leader to stream from, or it stalled");
        }
        if fenced {
            // Streamed, but the record is refused: the file is not a snapshot of record.
            return crate::Answer::Fenced;
        }
        let verified = !self.rng.chance(BAD_RESTORE_PER_MILLE);
        self.next_snapshot += 1;
        let now = self.now_unix_s();
        let id = format!("sim-{:05}", self.next_snapshot);
        self.snapshot_logs.insert(id.clone(), self.commit);
        self.snapshots.push(SnapshotSeen {
            id,
            taken_at_unix_s: now,
            revision: self.space.revision,
            verified,
            restored_at_unix_s: Some(now),
            restore_failed: (!verified).then(|| "the restored member did not serve".into()),
        });
        self.backups.taken += 1;
        self.backups.unverified += u64::from(!verified);
        crate::Answer::Done
    }

    /// A test restore again: of a snapshot still recorded (one pruned meanwhile is
    /// nothing to do); it may fail.
    pub(crate) fn verify_snapshot(&mut self, id: &str, fenced: bool) -> crate::Answer {
        if fenced {
            return crate::Answer::Fenced;
        }
        let ok = !self.rng.chance(BAD_RESTORE_PER_MILLE);
        let now = self.now_unix_s();
        if let Some(s) = self.snapshots.iter_mut().find(|s| s.id == id) {
            s.verified = ok;
            s.restored_at_unix_s = Some(now);
            s.restore_failed = (!ok).then(|| "the restored member did not serve".into());
            self.backups.restored_again += 1;
        }
        crate::Answer::Done
    }

    pub(crate) fn prune_snapshot(&mut self, id: &str, fenced: bool) -> crate::Answer {
        let mut newest_first = self.snapshots.clone();
        newest_first.sort_by(|a, b| (b.taken_at_unix_s, &b.id).cmp(&(a.taken_at_unix_s, &a.id)));
        let last = self.cp.spec.backup.retention.last as usize;
        if newest_first.iter().take(last).any(|s| s.id == id) {
            self.violate(format!("retention removed {id}, one of the newest {last}"));
        }
        if newest_first
            .iter()
            .find(|s| s.verified)
            .is_some_and(|s| s.id == id)
        {
            self.violate(format!(
                "retention removed {id}, the newest verified snapshot"
            ));
        }
        if fenced {
            return crate::Answer::Fenced;
        }
        let before = self.snapshots.len();
        self.snapshots.retain(|s| s.id != id);
        self.backups.pruned += (before - self.snapshots.len()) as u64;
        crate::Answer::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Answer, Config};

    fn world_with(snapshots: &[(&str, i64, bool)]) -> World {
        let mut w = World::new(Config::new(7));
        w.snapshots = snapshots
            .iter()
            .map(|(id, at, verified)| SnapshotSeen {
                id: id.to_string(),
                taken_at_unix_s: *at,
                verified: *verified,
                ..SnapshotSeen::default()
            })
            .collect();
        w
    }

    /// The checks bite: removing the newest, or the newest verified, is a violation;
    /// removing what retention allows is not.
    #[test]
    fn the_checker_sees_retention_remove_what_it_must_keep() {
        let mut w = world_with(&[("a", 1, true), ("b", 2, false)]);
        assert!(matches!(w.prune_snapshot("b", false), Answer::Done));
        assert!(
            w.violation.as_deref().unwrap_or("").contains("newest 1"),
            "{:?}",
            w.violation
        );
        let mut w = world_with(&[("a", 1, true), ("b", 2, false)]);
        w.prune_snapshot("a", false);
        assert!(
            w.violation
                .as_deref()
                .unwrap_or("")
                .contains("newest verified"),
            "{:?}",
            w.violation
        );
        let mut w = world_with(&[("a", 1, false), ("b", 2, true)]);
        w.prune_snapshot("a", false);
        assert_eq!(w.violation, None);
        assert_eq!(w.snapshots.len(), 1);
    }
}
