//! `quorum pause [--resume]` and `quorum protect [--off]`: one switch of a control
//! plane's spec each, written by compare-and-swap.

use crate::args::{PauseArgs, ProtectArgs};
use anyhow::Result;
use quorum_core::ControlPlaneSpec;
use quorum_ops::{Ctx, Place};

/// What a switch says: when it already was as asked, and once it is.
struct Words {
    already: String,
    done: String,
}

pub fn run(at: &Place, a: PauseArgs) -> Result<()> {
    let PauseArgs { name, resume } = a;
    let words = if resume {
        Words {
            already: format!("{name}: already running (not paused)"),
            done: format!("{name}: resumed"),
        }
    } else {
        Words {
            already: format!("{name}: already paused"),
            done: format!(
                "{name}: paused: quorum takes no step on it until `quorum pause {name} --resume`"
            ),
        }
    };
    switch(at, &name, !resume, |s| &mut s.paused, &words)
}

pub fn protect(at: &Place, a: ProtectArgs) -> Result<()> {
    let ProtectArgs { name, off } = a;
    let words = if off {
        Words {
            already: format!("{name}: deletion protection is already off"),
            done: format!("{name}: deletion protection off: `quorum delete {name}` deletes it"),
        }
    } else {
        Words {
            already: format!("{name}: deletion protection is already on"),
            done: format!("{name}: deletion protection on: `quorum delete {name}` is refused until `quorum protect {name} --off`"),
        }
    };
    switch(at, &name, !off, |s| &mut s.deletion_protection, &words)
}

/// Sets one switch of `name`'s spec to `on`. Only that switch changes: written if the
/// spec is still the one read, else read again (a change made meanwhile by another
/// command is kept, never written back over).
fn switch(
    at: &Place,
    name: &str,
    on: bool,
    field: fn(&mut ControlPlaneSpec) -> &mut bool,
    words: &Words,
) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    for _ in 0..quorum_ops::SPEC_WRITE_ATTEMPTS {
        let cp = ctx.store.get_control_plane(name)?;
        if cp.deleting {
            anyhow::bail!("{name} is being deleted; nothing was changed");
        }
        let mut spec = cp.spec;
        if *field(&mut spec) == on {
            println!("{}", words.already);
            return Ok(());
        }
        *field(&mut spec) = on;
        if ctx
            .store
            .replace_spec(name, cp.spec_version, &spec, cp.road.as_ref())?
        {
            println!("{}", words.done);
            return Ok(());
        }
    }
    anyhow::bail!("{name}: the spec kept changing meanwhile; nothing was recorded: run it again")
}
