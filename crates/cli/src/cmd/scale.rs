//! `quorum scale`: change the number of members.

use crate::args::ScaleArgs;
use crate::cmd::wait_for;
use anyhow::Result;
use quorum_core::ControlPlaneSpec;
use quorum_ops::{change, wait, Ctx, Place};

pub async fn run(at: &Place, a: ScaleArgs) -> Result<()> {
    let mut ctx = Ctx::open(at)?;
    let after = ctx.store.last_event_id(&a.name)?;
    let replicas = a.replicas;
    change(&mut ctx, &a.name, a.force, |s| ControlPlaneSpec {
        replicas,
        ..s.clone()
    })
    .await?;
    wait_for(&ctx, &a.name, wait::Goal::Converged, &a.wait, after).await
}
