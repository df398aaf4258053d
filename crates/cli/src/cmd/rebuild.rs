//! `quorum restore` and `quorum recover`: print the plan (`quorum_ops::rebuild`), get a
//! person's confirmation, record it; the controller performs it.

use super::{confirm, wait_for};
use crate::args::{RecoverArgs, RestoreArgs, WaitArgs};
use anyhow::{bail, Result};
use quorum_ops::rebuild::{self, From};
use quorum_ops::{wait, Ctx, Place};

pub async fn restore(at: &Place, a: RestoreArgs) -> Result<()> {
    // Into a name that no longer exists: nothing is lost, so nothing to confirm.
    let ctx = Ctx::open_existing(at)?;
    if ctx.store.control_plane(&a.name)?.is_none() && !ctx.store.snapshots(&a.name)?.is_empty() {
        return crate::cmd::create::recreate(at, &a.name, &a.from, &a.wait).await;
    }
    run(at, &a.name, From::Snapshot(a.from), a.yes, false, &a.wait).await
}

pub async fn recover(at: &Place, a: RecoverArgs) -> Result<()> {
    let from = match (a.from_member, a.from_snapshot) {
        (Some(m), None) => From::Member(m),
        (None, Some(s)) => From::Snapshot(s),
        // clap's group requires exactly one.
        _ => bail!("give one of --from-member and --from-snapshot"),
    };
    run(at, &a.name, from, a.yes, a.accept_data_loss, &a.wait).await
}

async fn run(
    at: &Place,
    name: &str,
    from: From,
    yes: bool,
    accept_data_loss: bool,
    w: &WaitArgs,
) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(name)?;
    let now = quorum_clock::now_unix_s();
    let plan = rebuild::plan(&ctx, &cp, &from, now, accept_data_loss).await?;
    println!("{}", plan.text);
    if !yes {
        confirm(name)?;
    }
    let after = ctx.store.last_event_id(name)?;
    rebuild::confirm(&mut ctx, name, &plan)?;
    println!("{name}: confirmed and recorded; the controller performs it (`quorum status {name}` shows the phase)");
    wait_for(&ctx, name, wait::Goal::Converged, w, after).await
}
