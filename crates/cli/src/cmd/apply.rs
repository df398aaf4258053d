//! `quorum apply -f`: create or change a control plane from a manifest.

use crate::args::ApplyArgs;
use crate::cmd::wait_for;
use crate::manifest;
use anyhow::{Context, Result};
use quorum_ops::{change, create, wait, Ctx, Place};

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
    let m = manifest::parse(&text, &source)?;
    let mut ctx = Ctx::open(at)?;
    let name = m.metadata.name.clone();
    let after = ctx.store.last_event_id(&name)?;
    if ctx.store.control_plane(&name)?.is_some() {
        change(&mut ctx, &name, a.force, |_| m.spec.clone()).await?;
    } else {
        create(&mut ctx, &name, m.spec, a.force)?;
    }
    wait_for(&ctx, &name, wait::Goal::Converged, &a.wait, after).await
}
