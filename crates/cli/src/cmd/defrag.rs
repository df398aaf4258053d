//! `quorum defrag NAME [--member MACHINE]`: on-demand defragmentation (see
//! `quorum_ops::defrag`).

use crate::args::DefragArgs;
use anyhow::Result;
use quorum_ops::{defrag, Ctx, Place};

pub async fn run(at: &Place, a: DefragArgs) -> Result<()> {
    let ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    let done = defrag::defrag(&ctx, &cp, a.member.as_deref()).await?;
    let before: u64 = done.iter().map(|d| d.db_before_bytes).sum();
    let after: u64 = done.iter().map(|d| d.db_after_bytes).sum();
    println!(
        "defragmented {} member{} of {}: {} -> {} in all",
        done.len(),
        if done.len() == 1 { "" } else { "s" },
        cp.name,
        defrag::bytes(before),
        defrag::bytes(after)
    );
    Ok(())
}
