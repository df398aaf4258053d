//! The side effects of a rebuild a person confirmed (`quorum restore`, `quorum
//! recover`): fencing old machines, recording the phase, restoring the seed from a
//! snapshot, and forcing the survivor into a cluster of its own. When each is due is
//! the core's (`quorum_core::rebuild`); each is idempotent, so a crash anywhere is
//! finished by the next controller's same decision.

use super::*;
use quorum_backup::{LocalDir, SeedRequest};
use quorum_core::{ClusterState, Rebuild, RebuildPhase};

impl Reconciler {
    /// Stops the machine, moves its directory where no start finds it, then forgets its
    /// record. Returns where the directory went, for the history.
    pub(crate) async fn fence_machine(
        &mut self,
        cp: &ControlPlane,
        access: &Access,
        machines: &[Machine],
        name: &str,
    ) -> Result<Option<String>, ActionError> {
        let (p, n) = (self.sh.provider.clone(), name.to_string());
        let moved = tokio::task::spawn_blocking(move || p.fence(&n))
            .await
            .map_err(|e| ActionError::Join(e.to_string()))??;
        if let Some(m) = machines.iter().find(|m| m.name == name) {
            access.etcd.forget(&m.client_url());
        }
        failpoints::crash_point(failpoints::CRASH_AFTER_FENCE_FILES);
        self.sh.store.delete_machine(&cp.name, name).await?;
        tracing::warn!(cp = %cp.name, machine = %name, to = ?moved, "fenced");
        Ok(Some(match moved {
            Some(to) => format!(
                "fenced {name}: stopped, its directory moved to {}",
                to.display()
            ),
            None => format!("fenced {name}: nothing of it was left on this host"),
        }))
    }

    /// Records the rebuild's next phase (or, `None`, its end).
    pub(crate) async fn set_rebuild_phase(
        &mut self,
        cp: &ControlPlane,
        phase: Option<RebuildPhase>,
    ) -> Result<(), ActionError> {
        let next: Option<Rebuild> = match (phase, &cp.rebuild) {
            (Some(phase), Some(rb)) => Some(Rebuild {
                phase,
                ..rb.clone()
            }),
            (Some(_), None) => return Err(ActionError::Rebuild(no_rebuild(cp))),
            (None, _) => None,
        };
        self.sh.store.set_rebuild(&cp.name, next).await?;
        Ok(())
    }

    /// Ends the rebuild: the seed's record drops what it said in the old cluster
    /// (leaving, an in-place step: there is no other member to hand over to; the slot
    /// it replaced, whose retry count means nothing in a new cluster), then the
    /// rebuild's record goes. A crash in between repeats the first write, a no-op.
    pub(crate) async fn finish_rebuild(
        &mut self,
        cp: &ControlPlane,
        machine: &str,
    ) -> Result<(), ActionError> {
        self.sh
            .store
            .update_machine(&cp.name, machine, "end a rebuild", |m| {
                let changed = m.deleting || m.in_place.is_some() || m.remediation.is_some();
                m.deleting = false;
                m.in_place = None;
                m.remediation = None;
                changed
            })
            .await?;
        self.set_rebuild_phase(cp, None).await
    }

    /// Restores snapshot `id` into `machine`'s (absent or empty) data directory, with
    /// the rebuild's fresh cluster token. Returns what it did, for the history.
    pub(crate) async fn restore_seed(
        &self,
        cp: &ControlPlane,
        machines: &[Machine],
        machine: &str,
        id: &str,
    ) -> Result<Option<String>, ActionError> {
        let rb = cp
            .rebuild
            .as_ref()
            .ok_or_else(|| ActionError::Rebuild(no_rebuild(cp)))?;
        let m = machines
            .iter()
            .find(|m| m.name == machine)
            .ok_or_else(|| ActionError::Rebuild(format!("{machine} has no record")))?;
        let rec = self.sh.store.snapshots(&cp.name).await?
            .into_iter()
            .find(|r| r.id == id)
            .ok_or_else(|| {
                ActionError::Rebuild(format!(
                    "snapshot {id} is no longer recorded for {}: `quorum snapshots {}` lists those there are",
                    cp.name, cp.name
                ))
            })?;
        let dir = LocalDir::for_control_plane(&self.sh.cfg.home, &cp.name);
        let s3 = quorum_backup::access_of(&rec, cp.spec.backup.s3.as_ref());
        let copy = quorum_backup::local_copy(&dir, &rec, s3).await?;
        let file = copy.path.clone();
        let tool = quorum_backup::restore_tool(self.sh.provider.etcd_dir(), m.version)?;
        let data_dir = self.sh.provider.data_dir(machine);
        let peer_url = m.peer_url();
        let req = SeedRequest {
            rec: &rec,
            file: &file,
            tool: &tool,
            data_dir: &data_dir,
            name: machine,
            peer_url: &peer_url,
            cluster_token: &rb.token,
        };
        let seeded = quorum_backup::restore_seed(&req).await?;
        tracing::warn!(cp = %cp.name, machine, id, ?seeded, "restored the seed");
        Ok(Some(seeded_message(machine, &rec, &seeded)))
    }

    /// Starts `machine` with `--force-new-cluster` on the data the decision saw.
    pub(crate) async fn force_new_cluster(
        &self,
        cp: &ControlPlane,
        access: &Access,
        machines: &[Machine],
        machine: &str,
        expect: Option<quorum_core::DataMarker>,
    ) -> Result<(), ActionError> {
        let Some(m) = machines.iter().find(|m| m.name == machine) else {
            return Err(ActionError::Rebuild(format!("{machine} has no record")));
        };
        // Read again right before: a deposed controller's force, decided before the
        // rebuild ended and the cluster grew back, would cut the new members off.
        let now = self.sh.store.control_plane(&cp.name).await?;
        let seeding = now
            .as_ref()
            .and_then(|c| c.rebuild.as_ref())
            .is_some_and(|rb| {
                rb.phase == RebuildPhase::Seeding
                    && Some(&rb.token) == cp.rebuild.as_ref().map(|r| &r.token)
            });
        if !seeding {
            return Err(ActionError::Rebuild(format!(
                "the store no longer records this rebuild in its seeding phase: {machine} is not forced on a stale decision"
            )));
        }
        let certs = self.machine_certs(cp, access, m)?;
        let req = StartRequest {
            machine: m,
            cluster_token: &cp.name,
            state: ClusterState::Existing,
            initial_cluster: &[],
            tls: certs.as_ref().map(|(trust, certs)| MachineTls {
                ca_pem: trust,
                certs,
            }),
            quota_backend_bytes: cp.spec.maintenance.quota_backend_bytes,
            expect_marker: Some(expect),
            force_new_cluster: true,
        };
        self.sh.provider.start(&req)?;
        Ok(())
    }
}

fn no_rebuild(cp: &ControlPlane) -> String {
    format!(
        "no restore or recovery is recorded for {} any more",
        cp.name
    )
}

/// The history's words for a restored seed: what it holds, and what watchers must know.
fn seeded_message(
    machine: &str,
    rec: &quorum_core::SnapshotRecord,
    seeded: &quorum_backup::Seeded,
) -> String {
    let head = format!(
        "restored {} (revision {}, {} keys) into {machine}",
        rec.id, rec.facts.revision, rec.facts.total_keys
    );
    match (seeded.already, seeded.bumped) {
        (true, _) => format!("{head}: already there"),
        (false, true) => format!(
            "{head} in {} ms; revisions moved on by {} and older ones marked compacted, so watchers re-list",
            seeded.took_ms,
            quorum_backup::REVISION_BUMP
        ),
        (false, false) => format!(
            "{head} in {} ms; this etcdutl cannot move revisions on (3.5.10 and later can): clients with watches must re-list",
            seeded.took_ms
        ),
    }
}
