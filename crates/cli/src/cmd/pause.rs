//! `quorum pause [--resume]`: stop or resume the reconciliation of one control plane.

use crate::args::PauseArgs;
use anyhow::Result;
use quorum_ops::{Ctx, Place};

pub fn run(at: &Place, a: PauseArgs) -> Result<()> {
    let PauseArgs { name, resume } = a;
    let mut ctx = Ctx::open_existing(at)?;
    // Only `paused` changes: written if the spec is still the one read, else read again
    // (a change made meanwhile by another command is kept, never written back over).
    for _ in 0..quorum_ops::SPEC_WRITE_ATTEMPTS {
        let cp = ctx.store.get_control_plane(&name)?;
        let mut spec = cp.spec;
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
        if ctx.store.replace_spec(&name, cp.spec_version, &spec)? {
            if resume {
                println!("{name}: resumed");
            } else {
                println!("{name}: paused: quorum takes no step on it until `quorum pause {name} --resume`");
            }
            return Ok(());
        }
    }
    anyhow::bail!(
        "{name}: the spec kept changing while pausing it; nothing was recorded: run it again"
    )
}
