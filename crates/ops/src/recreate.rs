//! Bringing a deleted control plane back from one of its snapshots (`quorum create
//! NAME --from-snapshot ID`, and `quorum restore` into a name that no longer exists):
//! the spec and the CA kept with the snapshot (`quorum_core::Recreate`), and every key.
//!
//! The whole of it is one store write: the control plane, its CA and a confirmed
//! restore from the snapshot (`quorum_core::rebuild`, which then seeds one member from
//! the snapshot and grows it back through learners). A crash leaves either nothing or
//! that record, which any controller carries on.

use crate::rebuild::{fresh_token, refuse_failed, verified_words};
use crate::{snapshot, status, Ctx};
use anyhow::{bail, Result};
use quorum_clock::now_ms;
use quorum_core::{
    validate_name, ControlPlane, Rebuild, RebuildPhase, RebuildSource, SnapshotRecord,
};

/// The control plane `name` as the snapshot `which` (an id, or `newest`) keeps it,
/// with a confirmed restore from that snapshot recorded; and what to say about it.
pub fn plan(ctx: &Ctx, name: &str, which: &str, now_unix_s: i64) -> Result<(ControlPlane, String)> {
    validate_name(name)?;
    if ctx.store.control_plane(name)?.is_some() {
        bail!(
            "{name} exists: `quorum restore {name} --from {which}` takes it back to a snapshot; --from-snapshot brings back one that was deleted"
        );
    }
    let rec = snapshot::find(ctx, name, which)?;
    refuse_failed(name, &rec)?;
    let Some(kept) = rec.recreate.clone() else {
        bail!(
            "snapshot {} was recorded by an earlier release of quorum, which kept no spec or CA with it: create {name} with flags (`quorum create {name} --replicas N --version V`), then `quorum restore {name} --from {}` (the CA will be a new one)",
            rec.id,
            rec.id
        );
    };
    quorum_provider::etcd_binary(ctx.provider.etcd_dir(), kept.spec.version)?;
    let cp = ControlPlane {
        spec_version: 0,
        client_addresses: Vec::new(),
        ca_generation: kept.ca_generation,
        ca_rotation: None,
        road: None,
        // A restored snapshot holds the v3 store only: the v2 store starts empty, and
        // every member quorum starts keeps the v2 API closed.
        v2_api_never_open: true,
        name: name.to_string(),
        spec: kept.spec,
        deleting: false,
        rebuild: Some(Rebuild {
            from: RebuildSource::Snapshot {
                id: rec.id.clone(),
                revision: rec.facts.revision,
            },
            token: fresh_token(name),
            phase: RebuildPhase::Fencing,
            requested_at_unix_s: now_unix_s,
        }),
    };
    let text = words(&cp, &rec, now_unix_s);
    Ok((cp, text))
}

/// Records the control plane `plan` made, with the CA its snapshot keeps.
pub fn record(ctx: &mut Ctx, cp: &ControlPlane) -> Result<()> {
    let Some(Rebuild {
        from: RebuildSource::Snapshot { id, .. },
        ..
    }) = &cp.rebuild
    else {
        bail!("{}: no snapshot to bring it back from", cp.name);
    };
    let rec = snapshot::find(ctx, &cp.name, id)?;
    let ca = ctx.store.snapshot_ca(&rec)?;
    if cp.spec.tls() && ca.is_none() {
        bail!(
            "snapshot {id} keeps no CA for {}, which used TLS: it cannot be brought back with its certificates",
            cp.name
        );
    }
    ctx.store.create_control_plane(cp, ca.as_ref(), now_ms())?;
    Ok(())
}

/// What bringing `cp` back does, for people.
fn words(cp: &ControlPlane, rec: &SnapshotRecord, now_unix_s: i64) -> String {
    let spec = &cp.spec;
    format!(
        "quorum will bring {name} back from snapshot {id} (taken {ago} ago from {from}; revision {rev}, {keys} keys; {verified}):\n  \
         1. {name} as it was then: {replicas} at etcd {version}{tls}\n  \
         2. restore the snapshot into one new member with a fresh cluster token, and grow it back to {replicas} through learners\n\
         what is lost: every write after revision {rev}",
        name = cp.name,
        id = rec.id,
        ago = crate::rebuild::age((now_unix_s - rec.taken_at_unix_s).max(0)),
        from = rec.from_machine,
        rev = rec.facts.revision,
        keys = rec.facts.total_keys,
        verified = verified_words(rec),
        replicas = status::plural(spec.replicas, "replica"),
        version = spec.version,
        tls = if spec.tls() {
            format!(", its CA of then (generation {}: certificates it issued work again)", cp.ca_generation)
        } else {
            ", plain HTTP".to_string()
        },
    )
}
