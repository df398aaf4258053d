//! `quorum create`: a new control plane from flags.

use crate::args::CreateArgs;
use crate::cmd::wait_for;
use crate::usage;
use anyhow::Result;
use quorum_core::{
    CertificatesSpec, ControlPlaneSpec, HaproxySpec, RolloutBefore, RolloutStrategy,
};
use quorum_ops::{create, wait, Ctx, Place};

pub async fn run(at: &Place, a: CreateArgs) -> Result<()> {
    let mut ctx = Ctx::open(at)?;
    let version = ctx.version(&a.version)?;
    let spec = ControlPlaneSpec {
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
