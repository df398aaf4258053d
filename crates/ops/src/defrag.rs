//! `quorum defrag NAME`: defragment every member on demand, one at a time, in the core's
//! order (followers and learners first, the leader last), each only if, on a fresh
//! observation just before it, the other voters that serve are a quorum.
//! A member stalls while its database file is rewritten; one at a time, quorum holds.

use crate::{status, Ctx};
use anyhow::{bail, Context, Result};
use quorum_core::{upkeep, ControlPlane};
use std::time::{Duration, Instant};

/// How long to wait for a defragmented member to serve again (answer as itself with
/// a leader) before the next one starts.
const SERVE_AGAIN_TIMEOUT_MS: u64 = 30_000;
/// How often to look while waiting.
const SERVE_AGAIN_POLL_MS: u64 = 200;

/// One member's defragmentation, as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Defragmented {
    pub machine: String,
    pub db_before_bytes: u64,
    pub db_after_bytes: u64,
    pub took_ms: u64,
}

/// Defragments the members of `cp` (or only `only`), one at a time. Stops at the first
/// that cannot be done safely, saying why.
pub async fn defrag(ctx: &Ctx, cp: &ControlPlane, only: Option<&str>) -> Result<Vec<Defragmented>> {
    let access = ctx.access(cp)?;
    let (machines, observed, _) =
        status::decision(&ctx.store, &ctx.provider, &access.etcd, cp).await?;
    if observed.observation.members.is_none() {
        bail!(
            "{}: no member answered as leader, so nothing is defragmented (a member stalls while it is; without a quorum that risks more than it returns)",
            cp.name
        );
    }
    let mut plan = upkeep::defrag_plan(cp, &machines, &observed.observation);
    if let Some(m) = only {
        if !plan.iter().any(|p| p == m) {
            bail!(
                "{m} is not a member of {} (its members: {})",
                cp.name,
                plan.join(", ")
            );
        }
        plan.retain(|p| p == m);
    }
    let mut done = Vec::new();
    for name in plan {
        // A fresh look before each: the previous one may still be catching up, or a
        // member may have failed meanwhile.
        let (machines, observed, _) =
            status::decision(&ctx.store, &ctx.provider, &access.etcd, cp).await?;
        if let Err(why) = upkeep::defrag_check(cp, &machines, &observed.observation, &name) {
            bail!("not defragmenting {name}: {why}");
        }
        let Some(m) = machines.iter().find(|m| m.name == name) else {
            continue;
        };
        let url = m.client_url();
        let before = db_size(&observed, &name);
        say!(ctx, "defragmenting {name} (database {})", bytes(before));
        let t = Instant::now();
        access
            .etcd
            .defragment(&url)
            .await
            .with_context(|| format!("defragmenting {name}"))?;
        let took_ms = t.elapsed().as_millis() as u64;
        let after = serves_again(ctx, cp, &name).await?;
        say!(
            ctx,
            "  {name}: {} -> {} in {:.1}s",
            bytes(before),
            bytes(after),
            took_ms as f64 / 1000.0
        );
        done.push(Defragmented {
            machine: name,
            db_before_bytes: before,
            db_after_bytes: after,
            took_ms,
        });
    }
    Ok(done)
}

fn db_size(observed: &quorum_observe::Observed, machine: &str) -> u64 {
    observed
        .observation
        .machines
        .get(machine)
        .and_then(|o| o.status.as_ref())
        .map_or(0, |st| st.db_size_bytes)
}

/// Waits (bounded) until `machine` answers as itself with a leader; returns its
/// database size then.
async fn serves_again(ctx: &Ctx, cp: &ControlPlane, machine: &str) -> Result<u64> {
    let access = ctx.access(cp)?;
    let deadline = Instant::now() + Duration::from_millis(SERVE_AGAIN_TIMEOUT_MS);
    loop {
        let (_, observed, decision) =
            status::decision(&ctx.store, &ctx.provider, &access.etcd, cp).await?;
        let serving = observed
            .observation
            .machines
            .get(machine)
            .and_then(|o| o.status.as_ref())
            .is_some_and(|st| st.leader_id != 0);
        if serving && decision.machine(machine).is_some() {
            return Ok(db_size(&observed, machine));
        }
        if Instant::now() >= deadline {
            bail!(
                "{machine} does not serve {}s after its defragmentation; nothing else was defragmented",
                SERVE_AGAIN_TIMEOUT_MS / 1000
            );
        }
        tokio::time::sleep(Duration::from_millis(SERVE_AGAIN_POLL_MS)).await;
    }
}

/// "16.0 MiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(16 << 20), "16.0 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
