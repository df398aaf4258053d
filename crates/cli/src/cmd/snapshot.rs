//! `quorum snapshot NAME` and `quorum snapshots NAME` (see `quorum_ops::snapshot`).

use crate::args::{Output, SnapshotArgs, SnapshotsArgs};
use anyhow::Result;
use quorum_core::SnapshotReason;
use quorum_ops::{snapshot, Ctx, Place};

pub async fn take(at: &Place, a: SnapshotArgs) -> Result<()> {
    let ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    snapshot::take(&ctx, &cp, SnapshotReason::OnDemand, None, !a.no_verify).await?;
    Ok(())
}

pub async fn list(at: &Place, a: SnapshotsArgs) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    // JSON or YAML on standard output is the whole output.
    ctx.quiet = !matches!(a.output, Output::Table);
    if let Some(which) = &a.verify {
        let rec = snapshot::find(&ctx, &a.name, which)?;
        snapshot::verify(&ctx, &rec).await?;
    }
    let recs = snapshot::list(&ctx, &a.name)?;
    match a.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&recs)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(&recs)?),
        Output::Table if recs.is_empty() => {
            println!(
                "{}: no snapshots yet (`quorum snapshot {}` takes one)",
                a.name, a.name
            )
        }
        Output::Table => println!("{}", snapshot::table(&recs)),
    }
    Ok(())
}
