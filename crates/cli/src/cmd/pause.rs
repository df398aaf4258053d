//! `quorum pause [--resume]`: stop or resume the reconciliation of one control plane.

use crate::args::PauseArgs;
use anyhow::Result;
use quorum_ops::{Ctx, Place};

pub fn run(at: &Place, a: PauseArgs) -> Result<()> {
    let PauseArgs { name, resume } = a;
    let mut ctx = Ctx::open_existing(at)?;
    let mut spec = ctx.store.get_control_plane(&name)?.spec;
    if spec.paused != resume {
        println!(
            "{name}: already {}",
            if resume {
                "running (not paused)"
            } else {
                "paused"
            }
        );
        return Ok(());
    }
    spec.paused = !resume;
    ctx.store.update_spec(&name, &spec)?;
    if resume {
        println!("{name}: resumed");
    } else {
        println!("{name}: paused: quorum takes no step on it until `quorum pause {name} --resume`");
    }
    Ok(())
}
