//! `quorum rotate-ca`: begin a rotation of a control plane's CA, and follow it.

use crate::args::RotateCaArgs;
use crate::cmd::confirm;
use crate::cmd::wait_for;
use anyhow::Result;
use quorum_ops::carotation::{begin, describe, plan, Begun};
use quorum_ops::{wait, Ctx, Place};

pub async fn run(at: &Place, a: RotateCaArgs) -> Result<()> {
    let mut ctx = Ctx::open_existing(at)?;
    let name = &a.name;
    let after = ctx.store.last_event_id(name)?;
    // Said and confirmed first: a rotation restarts every member three times, and a
    // rotation finished a minute ago is no reason to start another unasked.
    if let Some(text) = plan(&ctx, name)? {
        println!("{text}");
        if a.dry_run {
            println!("dry run: nothing was changed");
            return Ok(());
        }
        if !a.yes {
            confirm(name)?;
        }
    }
    match begin(&mut ctx, name)? {
        Begun::Now(r) => {
            println!(
                "{name}: CA rotation begun: a new CA (generation {}) is stored beside the one in force",
                r.to
            );
            println!("{name}: {}", describe(&r));
            println!(
                "{name}: client certificates from the old CA work until phase 3; get new ones before it: quorum credentials {name} --out DIR"
            );
        }
        Begun::Already(r) => {
            println!(
                "{name}: a CA rotation is already under way, nothing changed: {}",
                describe(&r)
            );
        }
    }
    if ctx.store.get_control_plane(name)?.spec.paused {
        println!(
            "note: {name} is paused; the rotation goes on once `quorum pause {name} --resume`"
        );
    }
    wait_for(&ctx, name, wait::Goal::Converged, &a.wait, after).await
}
