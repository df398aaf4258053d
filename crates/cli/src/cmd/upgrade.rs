//! `quorum upgrade`: roll a control plane to another etcd version.

use crate::args::UpgradeArgs;
use crate::cmd::wait_for;
use anyhow::Result;
use quorum_core::ControlPlaneSpec;
use quorum_ops::{change, wait, Ctx, Place};

pub async fn run(at: &Place, a: UpgradeArgs) -> Result<()> {
    let mut ctx = Ctx::open(at)?;
    ctx.store.get_control_plane(&a.name)?;
    let version = ctx.version(&a.version)?;
    let after = ctx.store.last_event_id(&a.name)?;
    change(&mut ctx, &a.name, a.force, |s| ControlPlaneSpec {
        version,
        ..s.clone()
    })
    .await?;
    wait_for(&ctx, &a.name, wait::Goal::Converged, &a.wait, after).await
}
