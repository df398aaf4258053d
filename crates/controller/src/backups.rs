//! The scheduled half of snapshots: the controller takes one when `spec.backup.schedule`
//! says, or before a chained upgrade's next link (`Action::TakeSnapshot`), test-restores it at once and again every
//! `verifyEvery` (`Action::VerifySnapshot`), and removes what retention no longer
//! keeps (`Action::PruneSnapshot`). The I/O is `quorum-backup`'s; when is the
//! core's (`quorum_core::backup`).

use super::*;
use quorum_backup::{LocalDir, TakeRequest};
use quorum_core::SnapshotReason;

/// The machine a snapshot streams from (the one at the leader's client URL `url`) and
/// the etcd version it runs (as observed, else its record's).
pub fn snapshot_source<'a>(
    machines: &'a [Machine],
    observed: &Observed,
    url: &str,
) -> Option<(&'a Machine, quorum_core::Version)> {
    let leader = machines.iter().find(|m| m.client_url() == url)?;
    let running = observed
        .observation
        .machines
        .get(&leader.name)
        .and_then(|o| o.running_version)
        .unwrap_or(leader.version);
    Some((leader, running))
}

impl Reconciler {
    /// Takes a snapshot from the leader, records it, test-restores it and records that.
    /// A failed test restore is recorded (and counted in the metrics), not an error:
    /// the snapshot was taken; it just does not count as verified.
    pub(crate) async fn take_snapshot(
        &self,
        cp: &ControlPlane,
        access: &Access,
        machines: &[Machine],
        observed: &Observed,
        before: Option<quorum_core::Version>,
    ) -> Result<(), ActionError> {
        let url = observed
            .view
            .leader_url
            .clone()
            .ok_or(ActionError::NoLeader)?;
        let (leader, running) =
            snapshot_source(machines, observed, &url).ok_or(ActionError::NoLeader)?;
        let etcd_dir = self.sh.provider.etcd_dir();
        let tool = quorum_backup::status_tool(etcd_dir)?;
        let dir = LocalDir::for_control_plane(&self.sh.cfg.home, &cp.name);
        let recorded: Vec<String> = self
            .sh
            .store
            .snapshots(&cp.name)
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect();
        dir.remove_unrecorded(&recorded, std::time::SystemTime::now());
        let req = TakeRequest {
            control_plane: &cp.name,
            reason: match before {
                Some(_) => SnapshotReason::BeforeRollout,
                None => SnapshotReason::Scheduled,
            },
            from_machine: &leader.name,
            endpoint: &url,
            etcd_version: running,
            spec_version: cp.spec.version,
            rollout_to: before,
            now_unix_s: access::now_unix_s(),
        };
        let mut rec = quorum_backup::take(&access.etcd, &dir, &tool, &req).await?;
        let recorded = async {
            // Restored before it is recorded: one write, and no one sees it unverified.
            rec.verification = Some(self.restore(cp, &rec).await?);
            // Into the bucket, if the spec names one, before the record says it is there.
            let (store, s3) = (cp.spec.backup.store.as_deref(), cp.spec.backup.s3.as_ref());
            quorum_backup::keep(store, s3, &dir, &mut rec).await?;
            self.sh.store.record_snapshot(rec.clone()).await?;
            Ok::<(), ActionError>(())
        }
        .await;
        if let Err(e) = recorded {
            // Never recorded: its file goes now, not at the next snapshot's clean-up.
            dir.discard(&rec.id);
            return Err(e);
        }
        quorum_backup::drop_local_copy(&dir, &rec);
        Ok(())
    }

    /// Test-restores the recorded snapshot `id` again (`backup.verifyEvery`). One that
    /// is no longer recorded (pruned meanwhile) is nothing to do.
    pub(crate) async fn verify_snapshot(
        &self,
        cp: &ControlPlane,
        id: &str,
    ) -> Result<(), ActionError> {
        let recs = self.sh.store.snapshots(&cp.name).await?;
        match recs.iter().find(|r| r.id == id) {
            Some(rec) => self.restore_and_record(cp, rec).await,
            None => Ok(()),
        }
    }

    /// The test restore of `rec`, recorded and counted. A failed one is recorded (the
    /// `SnapshotRestoreFailed` condition shows it), not an error.
    async fn restore_and_record(
        &self,
        cp: &ControlPlane,
        rec: &quorum_core::SnapshotRecord,
    ) -> Result<(), ActionError> {
        let v = self.restore(cp, rec).await?;
        self.sh
            .store
            .record_verification(&cp.name, &rec.id, v)
            .await?;
        Ok(())
    }

    /// A test restore of `rec`, counted and logged; what it came to is the caller's to
    /// record.
    async fn restore(
        &self,
        cp: &ControlPlane,
        rec: &quorum_core::SnapshotRecord,
    ) -> Result<quorum_core::Verification, ActionError> {
        let etcd_dir = self.sh.provider.etcd_dir();
        let (tool, etcd) = quorum_backup::verify_kit(etcd_dir, rec.etcd_version)?;
        let scratch = quorum_backup::scratch_dir(&self.sh.cfg.home);
        let dir = LocalDir::for_control_plane(&self.sh.cfg.home, &cp.name);
        let s3 = quorum_backup::access_of(rec, cp.spec.backup.s3.as_ref());
        let file = quorum_backup::local_copy(&dir, rec, s3).await?;
        let now = access::now_unix_s();
        let v = quorum_backup::verify(rec, &file.path, &tool, &etcd, &scratch, now).await;
        self.sh.metrics.verified(&cp.name, v.ok);
        match &v.error {
            None => {
                tracing::info!(cp = %cp.name, id = %rec.id, keys = v.keys, "snapshot test-restored")
            }
            Some(e) => {
                tracing::warn!(cp = %cp.name, id = %rec.id, "snapshot FAILED its test restore: {e}")
            }
        }
        Ok(v)
    }

    /// Removes a snapshot's file and then its record (`remove_snapshot`).
    pub(crate) async fn prune_snapshot(
        &self,
        cp: &ControlPlane,
        id: &str,
    ) -> Result<(), ActionError> {
        remove_snapshot(&self.sh, &cp.name, id, cp.spec.backup.s3.as_ref()).await
    }
}

/// Removes a snapshot's file (wherever its record says it is kept, and any local copy),
/// then its record; either already gone is success. Also for snapshots of a deleted
/// control plane (`orphans.rs`: `s3` none, the bucket reached as the record's control
/// plane was).
pub(crate) async fn remove_snapshot(
    sh: &Shared,
    cp: &str,
    id: &str,
    s3: Option<&quorum_core::s3access::S3Access>,
) -> Result<(), ActionError> {
    let dir = LocalDir::for_control_plane(&sh.cfg.home, cp);
    let rec = sh
        .store
        .snapshots(cp)
        .await?
        .into_iter()
        .find(|r| r.id == id);
    match rec {
        Some(rec) => {
            let access = quorum_backup::access_of(&rec, s3);
            quorum_backup::remove_kept(&dir, &rec, access).await?
        }
        None => {
            let path = dir.path(id);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(ActionError::Backup(quorum_backup::BackupError::Store {
                        location: path.display().to_string(),
                        message: e.to_string(),
                    }))
                }
            }
        }
    }
    sh.store.delete_snapshot(cp, id).await?;
    Ok(())
}
