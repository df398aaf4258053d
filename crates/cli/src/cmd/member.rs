//! `quorum member replace|restart NAME MACHINE`: ask for one member to be replaced or
//! restarted in place, and follow it with --wait.

use crate::args::{MemberArgs, MemberCommand};
use crate::cmd::wait_for;
use anyhow::Result;
use quorum_core::MachineRequest;
use quorum_ops::member::{self, Asked};
use quorum_ops::{wait, Ctx, Place};

pub async fn run(at: &Place, a: MemberArgs) -> Result<()> {
    let (request, a) = match a.command {
        MemberCommand::Replace(a) => (MachineRequest::Replace, a),
        MemberCommand::Restart(a) => (MachineRequest::Restart, a),
    };
    let mut ctx = Ctx::open_existing(at)?;
    let after = ctx.store.last_event_id(&a.name)?;
    let asked = member::ask(&mut ctx, &a.name, &a.machine, request, a.force)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    match asked {
        Asked::Recorded => println!("{}", member::plan(&cp, &a.machine, request)),
        Asked::Instead(had) => println!(
            "{} (instead of the {had} asked for before)",
            member::plan(&cp, &a.machine, request)
        ),
        Asked::Already => println!(
            "{}: a {request} of {} was already asked for; nothing recorded again (`quorum status {}`)",
            a.name, a.machine, a.name
        ),
    }
    wait_for(&ctx, &a.name, wait::Goal::Converged, &a.wait, after).await
}
