//! `quorum upgrade`: roll a control plane to another etcd version (and choose how), or
//! go on with a rollout that stopped after a rollback.

use crate::args::UpgradeArgs;
use crate::cmd::wait_for;
use anyhow::Result;
use quorum_core::{ControlPlaneSpec, RolloutStrategy};
use quorum_ops::{change_with, retry_rollout, wait, ChangeOptions, Ctx, Place};

pub async fn run(at: &Place, a: UpgradeArgs) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    let version = match &a.version {
        Some(v) => ctx.version(v)?,
        None => cp.spec.version,
    };
    let after = ctx.store.last_event_id(&a.name)?;
    if a.retry {
        retry_rollout(&mut ctx, &a.name)?;
    }
    let opts = ChangeOptions {
        force: a.force,
        allow_downgrade: a.allow_downgrade,
        dry_run: a.dry_run,
        no_snapshot: a.no_snapshot,
        expect_version: None,
    };
    if a.version.is_some() || a.strategy.is_some() {
        change_with(&mut ctx, &a.name, opts, |s| ControlPlaneSpec {
            version,
            rollout: RolloutStrategy {
                strategy: a.strategy.unwrap_or(s.rollout.strategy),
                ..s.rollout
            },
            ..s.clone()
        })
        .await?;
    }
    wait_for(&ctx, &a.name, wait::Goal::Converged, &a.wait, after).await
}
