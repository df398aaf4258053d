//! Snapshots that outlive their control plane: a deleted control plane's snapshots are
//! what brings it back (`quorum create NAME --from-snapshot ID`), so they stay, under
//! the retention they were kept with (`quorum_core::backup::orphan_prunes`). The fleet
//! runs this pass every `ORPHAN_PASS_EVERY_MS`, for the names its shard owns.
//!
//! Each removal is `prune-snapshot`'s, with its crash points: the file first, then the
//! record, either already gone being success, so a crash between them is finished by
//! the next pass.

use super::*;
use crate::backups::remove_snapshot;

/// How often the fleet looks at the snapshots of deleted control planes (they only
/// age: nothing new is taken of them).
pub(crate) const ORPHAN_PASS_EVERY_MS: u64 = 60_000;
/// The most snapshots one pass removes (the next pass takes the rest).
const MAX_ORPHAN_PRUNES_PER_PASS: usize = 64;

/// One pass: removes what retention no longer keeps of deleted control planes'
/// snapshots; how many it removed.
pub(crate) async fn pass(sh: &Shared) -> Result<usize, ActionError> {
    let names = orphaned(sh).await?;
    let now = now_unix_s();
    let mut removed = 0;
    for name in names {
        let recs = sh.store.snapshots(&name).await?;
        for id in quorum_core::backup::orphan_prunes(&recs, now) {
            if removed >= MAX_ORPHAN_PRUNES_PER_PASS {
                return Ok(removed);
            }
            prune(sh, &name, &id).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The names this replica owns that have snapshots and no control plane.
async fn orphaned(sh: &Shared) -> Result<Vec<String>, StoreError> {
    let existing: std::collections::HashSet<String> = sh
        .store
        .control_planes()
        .await?
        .into_iter()
        .map(|c| c.name)
        .collect();
    Ok(sh
        .store
        .snapshotted_control_planes()
        .await?
        .into_iter()
        .filter(|n| !existing.contains(n) && sh.cfg.owns(n))
        .collect())
}

/// Removes one, as a leader with time to spare, between the crash points of
/// `prune-snapshot`, and records it in the deleted control plane's history.
async fn prune(sh: &Shared, name: &str, id: &str) -> Result<(), ActionError> {
    sh.store.ensure_leading(sh.lease_margin_ms()).await?;
    let kind = ActionKind::PruneSnapshot;
    failpoints::crash_point(&format!("crash-before-{kind}"));
    remove_snapshot(sh, name, id, None).await?;
    failpoints::crash_point(&format!("crash-after-{kind}"));
    let msg = format!("removed snapshot {id} of the deleted {name}: retention no longer keeps it");
    let e = NewEvent {
        by: Some(&sh.cfg.identity),
        ..NewEvent::new(EventKind::Action(kind), StepOutcome::Ok, &msg)
    };
    if let Err(err) = sh.store.record_event(name, now_ms(), &e).await {
        tracing::warn!("recording an event failed: {err}");
    }
    tracing::info!(cp = %name, id = %id, "removed a deleted control plane's snapshot");
    Ok(())
}
