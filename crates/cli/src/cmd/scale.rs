//! `quorum scale`: change the number of members.

use crate::args::ScaleArgs;
use crate::cmd::wait_for;
use crate::usage;
use anyhow::Result;
use quorum_core::ControlPlaneSpec;
use quorum_ops::{change_with, wait, ChangeOptions, Ctx, Place};

pub async fn run(at: &Place, a: ScaleArgs) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    let after = ctx.store.last_event_id(&a.name)?;
    let replicas = a.replicas;
    let opts = ChangeOptions {
        force: a.force,
        dry_run: a.dry_run,
        ..ChangeOptions::default()
    };
    change_with(&mut ctx, &a.name, opts, |s| ControlPlaneSpec {
        replicas,
        ..s.clone()
    })
    .await
    .map_err(usage::scale_flag_error)?;
    wait_for(&ctx, &a.name, wait::Goal::Converged, &a.wait, after).await
}
