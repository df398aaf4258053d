//! `quorum list`: the control planes, each with its state from a fresh decision.

use anyhow::Result;
use quorum_ops::{status, Ctx, Place};
use quorum_store::{StoreError, StoreLocation};

/// One row per control plane. Its state is the operation of the decision on a fresh
/// observation, exactly as `status` derives it: a controller's last published view
/// would disagree with `status` whenever the controller is stopped or behind.
pub async fn run(at: &Place) -> Result<()> {
    let ctx = match Ctx::open_existing(at) {
        Ok(ctx) => ctx,
        // Nothing to list is not an error; creating a home to say so would be.
        Err(e) if matches!(e.downcast_ref(), Some(StoreError::NoHome { .. })) => {
            println!(
                "No quorum home at {} yet, so no control planes. Create one with `quorum create NAME --version 3.4.23`.",
                at.home.display()
            );
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let cps = ctx.store.control_planes()?;
    if cps.is_empty() {
        let place = match &at.store {
            StoreLocation::Embedded => at.home.display().to_string(),
            StoreLocation::Etcd(l) => l.url(),
        };
        println!(
            "No control planes in {place}. Create one with `quorum create NAME --version 3.4.23`."
        );
        return Ok(());
    }
    let mut rows = vec![["NAME", "REPLICAS", "VERSION", "MACHINES", "STATE"]
        .map(String::from)
        .to_vec()];
    for cp in cps {
        let access = ctx.access(&cp)?;
        let (machines, _, decision) =
            status::decision(&ctx.store, &ctx.provider, &access.etcd, &cp).await?;
        let n = machines.len();
        let state = decision.operation.to_string();
        rows.push(vec![
            cp.name,
            cp.spec.replicas.to_string(),
            cp.spec.version.to_string(),
            n.to_string(),
            state,
        ]);
    }
    print!("{}", status::columns(&rows));
    Ok(())
}
