//! `quorum upgrade`: roll a control plane to another etcd version (and choose how), or
//! go on with a rollout that stopped after a rollback.

use crate::args::UpgradeArgs;
use crate::cmd::wait_for;
use anyhow::{bail, Result};
use quorum_core::{abort, ControlPlane, ControlPlaneSpec, RolloutStrategy, Version};
use quorum_ops::{change_routed, retry_rollout, wait, ChangeOptions, Ctx, Place, Route};

pub async fn run(at: &Place, a: UpgradeArgs) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    let mut version = match &a.version {
        Some(v) => Some(ctx.version(v)?),
        None => None,
    };
    let after = ctx.store.last_event_id(&a.name)?;
    if a.retry {
        retry_rollout(&mut ctx, &a.name)?;
    }
    let mut opts = ChangeOptions {
        force: a.force,
        allow_downgrade: a.allow_downgrade,
        dry_run: a.dry_run,
        no_snapshot: a.no_snapshot,
        expect_version: None,
    };
    let mut route = Route::Road {
        via: a
            .via
            .iter()
            .map(|v| ctx.version(v))
            .collect::<Result<_>>()?,
    };
    if a.abort {
        route = Route::Direct;
        version = Some(abort_to(&ctx, &cp)?);
        // Against the spec read here: a change made meanwhile is a conflict, never
        // undone by a cancel computed before it.
        opts.expect_version = Some(cp.spec_version);
    }
    if version.is_some() || a.strategy.is_some() {
        change_routed(&mut ctx, &a.name, opts, &route, |s| ControlPlaneSpec {
            version: version.unwrap_or(s.version),
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

/// The version `--abort` goes back to: the one every member still runs, while the
/// rollout has changed none (`quorum_core::abort`); otherwise why it cannot.
fn abort_to(ctx: &Ctx, cp: &ControlPlane) -> Result<Version> {
    let name = &cp.name;
    let machines = ctx.store.machines(name)?;
    if let Some(v) = abort::untouched(&cp.spec, &machines) {
        return Ok(v);
    }
    let rolling = machines.iter().any(|m| m.version != cp.spec.version);
    match abort::changed_member(&cp.spec, &machines).filter(|_| rolling) {
        Some(changed) => {
            let oldest = machines.iter().map(|m| m.version).min().unwrap_or(cp.spec.version);
            bail!(
                "{name}: the rollout to etcd {} has changed a member ({changed}), so it cannot be cancelled; go back with `quorum upgrade {name} --version {oldest} --allow-downgrade` (each changed member is rolled again), or let it finish",
                cp.spec.version
            )
        }
        None => bail!(
            "{name}: no rollout is under way: every machine runs etcd {}, as the spec says; nothing to cancel",
            cp.spec.version
        ),
    }
}
