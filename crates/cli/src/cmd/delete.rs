//! `quorum delete`: mark a control plane deleting; the running controller removes its
//! machines, or, when none runs, this command does (the teardown needs no quorum).

use crate::args::{DeleteArgs, WaitArgs};
use anyhow::{bail, Result};
use quorum_ops::{teardown, wait, Ctx, Place};
use std::time::{Duration, Instant};

/// How often `delete --wait` looks at a deletion the controller performs.
const DELETE_POLL_MS: u64 = 200;

pub async fn run(at: &Place, a: DeleteArgs) -> Result<()> {
    let name = a.name;
    let mut ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&name)?;
    if cp.spec.deletion_protection && !cp.deleting {
        return Err(quorum_store::StoreError::DeletionProtected(name).into());
    }
    // Asked once: a deletion already marked goes on without asking again.
    if !cp.deleting {
        println!("{}", plan(&ctx, &name)?);
        if !a.yes {
            crate::cmd::confirm(&name)?;
        }
    }
    let after = ctx.store.last_event_id(&name)?;
    ctx.store.mark_control_plane_deleting(&name)?;
    if wait::controller_active(&ctx.store) {
        println!("{name}: marked for deletion; the running controller removes its machines");
        if !a.wait.wait {
            return Ok(());
        }
        follow_controller(at, &ctx, &name, &a.wait, after).await?;
    } else {
        // Teardown needs no quorum and no controller: do it here.
        println!("{name}: marked for deletion; stopping and removing its machines");
        teardown(at, &name, Some(ctx.started_ms)).await?;
    }
    if ctx.store.control_plane(&name)?.is_none() {
        // A controller of another home (a shared store) may have finished it: what it
        // left in this home goes too (the teardown above removed it already, if it ran).
        quorum_controller::remove_local_files(&at.home, &name)?;
        println!("{name}: deleted");
    }
    Ok(())
}

/// What a deletion does, said before it is confirmed.
fn plan(ctx: &Ctx, name: &str) -> Result<String> {
    let machines: Vec<String> = ctx
        .store
        .machines(name)?
        .into_iter()
        .map(|m| m.name)
        .collect();
    let snapshots = ctx.store.snapshots(name)?.len();
    let fenced = ctx.provider.list_fenced(Some(name)).len();
    let fenced = match fenced {
        0 => String::new(),
        1 => format!(" and its fenced directory (an old member's data a rebuild set aside: `quorum fenced {name}`)"),
        n => format!(" and its {n} fenced directories (old members' data a rebuild set aside: `quorum fenced {name}`)"),
    };
    Ok(format!(
        "{name}: deleting stops and removes its {} ({}) with their data{fenced}, and forgets its spec and its CA; {}",
        if machines.len() == 1 { "machine".to_string() } else { format!("{} machines", machines.len()) },
        if machines.is_empty() { "none yet".to_string() } else { machines.join(", ") },
        match snapshots {
            0 => format!("it has no snapshot, so it cannot be brought back (`quorum snapshot {name}` takes one first)"),
            n => format!("its {} stay, with its spec and CA: `quorum create {name} --from-snapshot newest` brings it back", quorum_ops::status::plural(n as u32, "snapshot")),
        }
    ))
}

/// Follows the controller's deletion of `name`, printing its steps; should the
/// controller stop (a stale heartbeat), finishes the teardown here.
async fn follow_controller(
    at: &Place,
    ctx: &Ctx,
    name: &str,
    w: &WaitArgs,
    after: i64,
) -> Result<()> {
    let mut last = after;
    let deadline = Instant::now() + w.timeout;
    while ctx.store.control_plane(name)?.is_some() {
        wait::print_events(&ctx.store, name, &mut last, ctx.started_ms, false, None)?;
        if !wait::controller_active(&ctx.store) {
            println!("{name}: the controller stopped; finishing the deletion here");
            teardown(at, name, Some(ctx.started_ms)).await?;
            // The teardown printed its own steps.
            last = ctx.store.last_event_id(name)?;
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "{name}: not deleted within {}s; see `quorum status {name}`",
                w.timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(DELETE_POLL_MS)).await;
    }
    wait::print_events(&ctx.store, name, &mut last, ctx.started_ms, false, None)?;
    Ok(())
}
