//! `quorum apply -f`: create or change a control plane from a manifest.

use crate::args::ApplyArgs;
use crate::cmd::wait_for;
use anyhow::{Context, Result};
use quorum_ops::manifest;
use quorum_ops::{change_with, create_with, wait, ChangeOptions, Ctx, Place};

pub async fn run(at: &Place, a: ApplyArgs) -> Result<()> {
    let (text, source) = if a.file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .context("reading the manifest from standard input")?;
        (s, "standard input".to_string())
    } else {
        let text = std::fs::read_to_string(&a.file)
            .with_context(|| format!("cannot read {}", a.file.display()))?;
        (text, a.file.display().to_string())
    };
    let mut ctx = Ctx::open(at)?;
    let m = manifest::parse(&text, &source, &ctx.installed())?;
    let name = m.metadata.name.clone();
    let after = ctx.store.last_event_id(&name)?;
    let expect_version = match m.metadata.version(&source)? {
        Some(_) if a.force_conflicts => None,
        v => v,
    };
    let opts = ChangeOptions {
        force: a.force,
        allow_downgrade: a.allow_downgrade || m.allow_downgrade,
        dry_run: a.dry_run,
        no_snapshot: a.no_snapshot,
        expect_version,
    };
    // A spec the rules refuse is this file's fault: its errors begin with the file's
    // name, as the parser's do.
    let named = |e: anyhow::Error| match e.downcast_ref::<quorum_core::SpecError>() {
        Some(_) => e.context(source.clone()),
        None => e,
    };
    if ctx.store.control_plane(&name)?.is_some() {
        change_with(&mut ctx, &name, opts, |_| m.spec.clone())
            .await
            .map_err(named)?;
    } else {
        create_with(&mut ctx, &name, m.spec, opts).map_err(named)?;
    }
    wait_for(&ctx, &name, wait::Goal::Converged, &a.wait, after).await
}
