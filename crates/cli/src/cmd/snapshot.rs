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
    let Some(name) = &a.name else {
        if a.verify.is_some() {
            anyhow::bail!("--verify needs the control plane: `quorum snapshots NAME --verify ID`");
        }
        return owners(&ctx, &a.output);
    };
    if let Some(which) = &a.verify {
        let rec = snapshot::find(&ctx, name, which)?;
        snapshot::verify(&ctx, &rec).await?;
    }
    let recs = snapshot::list(&ctx, name)?;
    match a.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&recs)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(&recs)?),
        Output::Table if recs.is_empty() => {
            println!("{name}: no snapshots yet (`quorum snapshot {name}` takes one)")
        }
        Output::Table => {
            println!("{}", snapshot::table(&recs));
            if ctx.store.control_plane(name)?.is_none() {
                println!("{name} was deleted: `quorum create {name} --from-snapshot newest` brings it back (its spec, its CA, every key)");
            }
        }
    }
    Ok(())
}

/// Every name that has snapshots: how many, the newest, and whether it still exists.
fn owners(ctx: &Ctx, output: &Output) -> Result<()> {
    let owners = snapshot::owners(ctx)?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&owners)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(&owners)?),
        Output::Table if owners.is_empty() => {
            println!("no snapshots yet (`quorum snapshot NAME` takes one)")
        }
        Output::Table => println!("{}", snapshot::owners_table(&owners)),
    }
    Ok(())
}
