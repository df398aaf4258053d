//! `quorum create`: a new control plane from flags.

use crate::args::{CreateArgs, WaitArgs};
use crate::cmd::wait_for;
use crate::usage;
use anyhow::Result;
use quorum_core::{
    CertificatesSpec, ControlPlaneSpec, HaproxySpec, RolloutBefore, RolloutStrategy,
};
use quorum_ops::{create, wait, Ctx, Place};

pub async fn run(at: &Place, a: CreateArgs) -> Result<()> {
    if let Some(which) = &a.from_snapshot {
        return recreate(at, &a.name, which, &a.wait).await;
    }
    let mut ctx = Ctx::open(at)?;
    // clap requires --version unless --from-snapshot is given.
    let version = ctx.version(a.version.as_deref().unwrap_or_default())?;
    let spec = ControlPlaneSpec {
        recovery: Default::default(),
        deletion_protection: false,
        replicas: a.replicas,
        version,
        rollout: RolloutStrategy {
            strategy: a.strategy,
            max_surge: a.max_surge,
            before: RolloutBefore {
                certificates_expiry: a.renew_before,
            },
            ..RolloutStrategy::default()
        },
        paused: false,
        haproxy: a.haproxy_runtime_api.map(|runtime_api| HaproxySpec {
            runtime_api,
            backend: a.haproxy_backend,
        }),
        certificates: CertificatesSpec {
            lifetime: a.certificate_lifetime,
        },
        insecure_plaintext: a.insecure_plaintext,
        remediation: Default::default(),
        maintenance: Default::default(),
        backup: quorum_core::BackupSpec {
            schedule: a.backup_schedule,
            ..Default::default()
        },
        provider: a.provider,
    };
    // The spec came from flags: the core's refusals of it name the flags (exit 2).
    create(&mut ctx, &a.name, spec, a.force).map_err(usage::create_flag_error)?;
    wait_for(&ctx, &a.name, wait::Goal::Converged, &a.wait, 0).await
}

/// Brings back the deleted control plane `name` from its snapshot `which`
/// (`quorum_ops::recreate`): says what it does, records it, follows it with --wait.
pub async fn recreate(at: &Place, name: &str, which: &str, w: &WaitArgs) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    let now = quorum_clock::now_unix_s();
    let (cp, text) = quorum_ops::recreate::plan(&ctx, name, which, now)?;
    println!("{text}");
    quorum_ops::recreate::record(&mut ctx, &cp)?;
    println!(
        "{name}: recorded; the controller restores it (`quorum status {name}` shows the phase)"
    );
    wait_for(&ctx, name, wait::Goal::Converged, w, 0).await
}
