//! `quorum snapshot NAME` and `quorum snapshots NAME`: a snapshot taken from the
//! leader into `<home>/backups/NAME/`, its facts recorded in the store; and the list.
//! The same snapshot is taken before a change that starts a rollout is recorded
//! (`spec::change_with`), so no rollout starts without one unless `--no-snapshot`.

use crate::{status, Ctx};
use anyhow::{bail, Context, Result};
use quorum_backup::{LocalDir, TakeRequest};
use quorum_core::{ControlPlane, SnapshotReason, SnapshotRecord, Verification, Version};

/// Takes a snapshot of `cp` from its leader and, with `verify`, test-restores it;
/// records it (with the restore's outcome, in one write: no one sees it unverified
/// meanwhile) and says so. A failed restore is recorded, then returned as an error.
pub async fn take(
    ctx: &Ctx,
    cp: &ControlPlane,
    reason: SnapshotReason,
    rollout_to: Option<Version>,
    verify: bool,
) -> Result<SnapshotRecord> {
    let access = ctx.access(cp)?;
    let (machines, observed, _) =
        status::decision(&ctx.store, &ctx.provider, &access.etcd, cp).await?;
    let Some(url) = observed.view.leader_url.clone() else {
        bail!(
            "{}: no member answers as leader, so no snapshot can be taken (a snapshot comes from the leader: it holds every acknowledged write); see `quorum status {}`",
            cp.name,
            cp.name
        );
    };
    let Some((leader, running)) = quorum_controller::snapshot_source(&machines, &observed, &url)
    else {
        bail!(
            "{}: the leader at {url} is no machine of quorum's; no snapshot taken",
            cp.name
        );
    };
    let tool = quorum_backup::status_tool(ctx.provider.etcd_dir())?;
    let dir = LocalDir::for_control_plane(&ctx.home, &cp.name);
    let recorded: Vec<String> = ctx
        .store
        .snapshots(&cp.name)?
        .into_iter()
        .map(|r| r.id)
        .collect();
    dir.remove_unrecorded(&recorded, std::time::SystemTime::now());
    let req = TakeRequest {
        control_plane: &cp.name,
        reason,
        from_machine: &leader.name,
        endpoint: &url,
        etcd_version: running,
        spec_version: cp.spec.version,
        rollout_to,
        now_unix_s: quorum_clock::now_unix_s(),
    };
    let mut rec = quorum_backup::take(&access.etcd, &dir, &tool, &req)
        .await
        .with_context(|| format!("{}: snapshot from {}", cp.name, leader.name))?;
    // Said once it is recorded where it is kept: a snapshot that fails on the way
    // (its test restore's tool, the bucket) leaves no file and is never said taken.
    if let Err(e) = verify_keep_record(ctx, cp, &dir, &mut rec, verify).await {
        dir.discard(&rec.id);
        return Err(e);
    }
    say!(ctx, "{}", taken_line(&rec));
    quorum_backup::drop_local_copy(&dir, &rec);
    if let Some(v) = &rec.verification {
        say_verified(ctx, &rec, v)?;
    }
    Ok(rec)
}

/// The steps between a snapshot's file and its record: the test restore (with
/// `verify`), the copy into the bucket the spec names, and the record.
async fn verify_keep_record(
    ctx: &Ctx,
    cp: &ControlPlane,
    dir: &LocalDir,
    rec: &mut SnapshotRecord,
    verify: bool,
) -> Result<()> {
    if verify {
        rec.verification = Some(restore(ctx, rec).await?);
    }
    // Into the bucket, if the spec names one, before the record says it is there.
    let s3 = cp.spec.backup.s3.as_ref();
    quorum_backup::keep(cp.spec.backup.store.as_deref(), s3, dir, rec)
        .await
        .with_context(|| {
            format!(
                "{}: keeping snapshot {} in {} (nothing was recorded, no file is left)",
                cp.name,
                rec.id,
                cp.spec
                    .backup
                    .store
                    .as_deref()
                    .unwrap_or("the local directory")
            )
        })?;
    ctx.store.record_snapshot(rec)?;
    Ok(())
}

/// A test restore of `rec`'s file (restored with etcd's tool, started as a throwaway
/// member on a private loopback address, read back, removed).
async fn restore(ctx: &Ctx, rec: &SnapshotRecord) -> Result<Verification> {
    let etcd_dir = ctx.provider.etcd_dir();
    let (tool, etcd) = quorum_backup::verify_kit(etcd_dir, rec.etcd_version)?;
    let dir = LocalDir::for_control_plane(&ctx.home, &rec.control_plane);
    // The control plane's own access to its bucket, or the record's if it is gone.
    let spec = ctx.store.get_control_plane(&rec.control_plane).ok();
    let own = spec.as_ref().and_then(|c| c.spec.backup.s3.as_ref());
    let access = quorum_backup::access_of(rec, own);
    let file = quorum_backup::local_copy(&dir, rec, access).await?;
    let scratch = quorum_backup::scratch_dir(&ctx.home);
    let now = quorum_clock::now_unix_s();
    Ok(quorum_backup::verify(rec, &file.path, &tool, &etcd, &scratch, now).await)
}

/// Says what a test restore came to; a failed one is an error.
fn say_verified(ctx: &Ctx, rec: &SnapshotRecord, v: &Verification) -> Result<()> {
    match &v.error {
        None => {
            say!(
                ctx,
                "{}: snapshot {} verified in {:.1} s: restored, served {} keys at revision {}",
                rec.control_plane,
                rec.id,
                v.took_ms as f64 / 1000.0,
                v.keys,
                v.revision
            );
            Ok(())
        }
        Some(e) => bail!(
            "{}: snapshot {} FAILED its test restore (recorded; it does not count as verified): {e}",
            rec.control_plane,
            rec.id
        ),
    }
}

/// Test-restores the recorded `rec` again, records the outcome, and says it. A failed
/// restore is recorded too, and returned as an error.
pub async fn verify(ctx: &Ctx, rec: &SnapshotRecord) -> Result<Verification> {
    let v = restore(ctx, rec).await?;
    ctx.store
        .record_verification(&rec.control_plane, &rec.id, &v)?;
    say_verified(ctx, rec, &v)?;
    Ok(v)
}

/// The recorded snapshot `which` names: an id, or `newest`.
pub fn find(ctx: &Ctx, name: &str, which: &str) -> Result<SnapshotRecord> {
    let recs = list(ctx, name)?;
    let found = if which == "newest" {
        recs.last().cloned()
    } else {
        recs.iter().find(|r| r.id == which).cloned()
    };
    match found {
        Some(r) => Ok(r),
        None if recs.is_empty() => bail!("{name} has no snapshots (`quorum snapshot {name}` takes one)"),
        None => bail!(
            "{name} has no snapshot {which:?}: its newest is {} (`quorum snapshots {name}` lists them)",
            recs.last().map_or("", |r| r.id.as_str())
        ),
    }
}

/// `prod: snapshot prod-20261203T194501Z-r1234.db taken from prod-2 (leader, etcd
/// 3.5.1) in 0.2 s: revision 1234, 5,012 keys, 1.2 MiB; in /home/q/backups/prod`.
pub fn taken_line(r: &SnapshotRecord) -> String {
    format!(
        "{}: snapshot {} taken from {} (leader, etcd {}) in {:.1} s: revision {}, {} keys, {}; in {}",
        r.control_plane,
        r.id,
        r.from_machine,
        r.etcd_version,
        r.took_ms as f64 / 1000.0,
        r.facts.revision,
        r.facts.total_keys,
        crate::defrag::bytes(r.size_bytes),
        r.location
    )
}

/// The snapshots of `name`, oldest first, as recorded (a control plane that is gone
/// still has its snapshots listed: they are what it can be restored from).
pub fn list(ctx: &Ctx, name: &str) -> Result<Vec<SnapshotRecord>> {
    let recs = ctx.store.snapshots(name)?;
    if recs.is_empty() && ctx.store.control_plane(name)?.is_none() {
        bail!("control plane {name:?} does not exist and has no snapshots (see `quorum list`)");
    }
    Ok(recs)
}

/// A name that has snapshots (`quorum snapshots` without a name).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    pub name: String,
    /// False: the control plane was deleted; its snapshots are what brings it back.
    pub exists: bool,
    pub snapshots: usize,
    pub newest: String,
    pub newest_taken_at_unix_s: i64,
}

/// Every name that has snapshots, by name, deleted control planes included.
pub fn owners(ctx: &Ctx) -> Result<Vec<Owner>> {
    let mut out = Vec::new();
    for name in ctx.store.snapshotted_control_planes()? {
        let recs = ctx.store.snapshots(&name)?;
        let Some(newest) = recs.last() else {
            continue; // pruned meanwhile
        };
        out.push(Owner {
            exists: ctx.store.control_plane(&name)?.is_some(),
            snapshots: recs.len(),
            newest: newest.id.clone(),
            newest_taken_at_unix_s: newest.taken_at_unix_s,
            name,
        });
    }
    Ok(out)
}

/// One row per name that has snapshots, for people.
pub fn owners_table(owners: &[Owner]) -> String {
    let mut rows = vec![vec![
        "NAME".to_string(),
        "STATE".into(),
        "SNAPSHOTS".into(),
        "NEWEST (UTC)".into(),
        "NEWEST".into(),
    ]];
    for o in owners {
        rows.push(vec![
            o.name.clone(),
            if o.exists { "exists" } else { "deleted" }.into(),
            o.snapshots.to_string(),
            quorum_pki::format_rfc3339(o.newest_taken_at_unix_s),
            o.newest.clone(),
        ]);
    }
    let mut text = status::columns(&rows);
    if owners.iter().any(|o| !o.exists) {
        text.push_str("a deleted one comes back with `quorum create NAME --from-snapshot newest`");
    }
    text.trim_end().to_string()
}

/// One row per snapshot, for people.
pub fn table(recs: &[SnapshotRecord]) -> String {
    let mut rows = vec![[
        "TAKEN (UTC)".to_string(),
        "ID".into(),
        "REVISION".into(),
        "KEYS".into(),
        "SIZE".into(),
        "FROM".into(),
        "REASON".into(),
        "VERIFIED".into(),
    ]];
    for r in recs {
        rows.push([
            quorum_pki::format_rfc3339(r.taken_at_unix_s),
            r.id.clone(),
            r.facts.revision.to_string(),
            r.facts.total_keys.to_string(),
            crate::defrag::bytes(r.size_bytes),
            format!("{} ({})", r.from_machine, r.etcd_version),
            match r.rollout_to {
                Some(v) => format!("{} to {v}", r.reason),
                None => r.reason.to_string(),
            },
            verified_cell(r),
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut lines: Vec<String> = rows
        .iter()
        .map(|r| {
            r.iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        })
        .collect();
    // Where they are kept (a bucket or the local directory), once per place.
    let mut places: Vec<&str> = recs.iter().map(|r| r.location.as_str()).collect();
    places.sort_unstable();
    places.dedup();
    lines.extend(places.iter().map(|p| format!("kept in {p}")));
    lines.join("\n")
}

/// "yes, 12 keys (2026-12-03T19:45:01Z)", "FAILED: ... ", or "no" (etcd's digest and
/// tool checked the file when it was taken; a test restore is what verifies it).
fn verified_cell(r: &SnapshotRecord) -> String {
    match &r.verification {
        None => "no".into(),
        Some(v) if v.ok => format!(
            "yes, {} keys ({})",
            v.keys,
            quorum_pki::format_rfc3339(v.at_unix_s)
        ),
        Some(v) => format!(
            "FAILED ({}): {}",
            quorum_pki::format_rfc3339(v.at_unix_s),
            v.error.as_deref().unwrap_or("no reason recorded")
        ),
    }
}
