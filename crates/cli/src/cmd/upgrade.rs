//! `quorum upgrade`: roll a control plane to another etcd version.

use crate::args::UpgradeArgs;
use crate::cmd::wait_for;
use anyhow::Result;
use quorum_core::ControlPlaneSpec;
use quorum_ops::{change_with, wait, ChangeOptions, Ctx, Place};

pub async fn run(at: &Place, a: UpgradeArgs) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    ctx.store.get_control_plane(&a.name)?;
    let version = ctx.version(&a.version)?;
    let after = ctx.store.last_event_id(&a.name)?;
    let opts = ChangeOptions {
        force: a.force,
        allow_downgrade: a.allow_downgrade,
        dry_run: a.dry_run,
    };
    change_with(&mut ctx, &a.name, opts, |s| ControlPlaneSpec {
        version,
        ..s.clone()
    })
    .await?;
    wait_for(&ctx, &a.name, wait::Goal::Converged, &a.wait, after).await
}
