//! `quorum list`: the control planes, with the state the controller last published.

use anyhow::Result;
use quorum_ops::{status, Ctx, Place};
use quorum_store::StoreLocation;

pub fn run(at: &Place) -> Result<()> {
    let ctx = Ctx::open(at)?;
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
        let n = ctx.store.machines(&cp.name)?.len();
        let state = if cp.deleting {
            "deleting".to_string()
        } else if cp.spec.paused {
            "paused".into()
        } else {
            ctx.store
                .published_status(&cp.name)?
                .and_then(|p| {
                    p.status
                        .pointer("/decision/operation")
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "unknown (no controller yet)".into())
        };
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
