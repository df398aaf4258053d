//! `quorum member replace|restart NAME MACHINE`: a person asks for one machine to be
//! replaced or restarted in place. The request is one field of the machine's record
//! (`Machine::requested`), written in one compare-and-swap; the controller rolls it by
//! the core's rules for that step (preflight, pacing, one at a time, quorum kept,
//! crash-safe), exactly as it rolls an outdated machine. Nothing here touches etcd.

use crate::{status, Ctx};
use anyhow::{bail, Result};
use quorum_core::{ControlPlane, Machine, MachineRequest, Strategy};

/// Fewest voters an in-place restart keeps a quorum with (one is down meanwhile): the
/// core's own limit, refused here first with the way round.
const MIN_RESTART_VOTERS: u32 = 3;

/// What the command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    /// Recorded now.
    Recorded,
    /// The same request was already recorded: nothing written.
    Already,
    /// Recorded in place of the other request, which had not begun (a person who
    /// changed their mind: a replacement no host can take becomes a restart).
    Instead(MachineRequest),
}

/// Records `request` for `machine` of control plane `name`, after the checks a person
/// deserves before anything is written: the machine exists and stays, a restart keeps a
/// quorum, a replacement has a host to go to (unless `force`).
pub fn ask(
    ctx: &mut Ctx,
    name: &str,
    machine: &str,
    request: MachineRequest,
    force: bool,
) -> Result<Asked> {
    let cp = ctx.store.get_control_plane(name)?;
    if cp.deleting {
        bail!("{name} is being deleted");
    }
    let machines = ctx.store.machines(name)?;
    let Some(m) = machines.iter().find(|m| m.name == machine) else {
        let names: Vec<&str> = machines.iter().map(|m| m.name.as_str()).collect();
        bail!(
            "{name} has no machine {machine:?}; its machines: {} (`quorum status {name}`)",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    };
    if m.deleting {
        bail!("{machine} is already leaving {name}; nothing to {request}");
    }
    if request == MachineRequest::Restart && m.in_place_out_of_service() {
        bail!(
            "{machine} is being restarted in place now (`quorum status {name}`); nothing more to ask"
        );
    }
    let had = m.requested;
    if had == Some(request) {
        return Ok(Asked::Already);
    }
    check(ctx, &cp, &machines, m, request, force)?;
    let what = match request {
        MachineRequest::Replace => "ask for a replacement",
        MachineRequest::Restart => "ask for a restart",
    };
    ctx.store.update_machine(name, machine, what, &|r| {
        if r.deleting || r.requested == Some(request) {
            return false;
        }
        r.requested = Some(request);
        true
    })?;
    Ok(had.map_or(Asked::Recorded, Asked::Instead))
}

/// The rules that refuse a request before it is recorded.
fn check(
    ctx: &Ctx,
    cp: &ControlPlane,
    machines: &[Machine],
    m: &Machine,
    request: MachineRequest,
    force: bool,
) -> Result<()> {
    let name = &cp.name;
    match request {
        MachineRequest::Restart if cp.spec.replicas < MIN_RESTART_VOTERS => bail!(
            "{name}: a restart in place takes {} down, and with {} the rest would not keep a quorum; replace it instead (`quorum member replace {name} {}`)",
            m.name,
            status::plural(cp.spec.replicas, "replica"),
            m.name
        ),
        MachineRequest::Replace if !force && !cp.spec.provider.is_local() => {
            let surge = usize::from(cp.spec.rollout.max_surge >= 1);
            let hosts: Vec<_> = quorum_store::hosts::list(&ctx.store)?
                .iter()
                .map(quorum_store::hosts::HostRecord::placement_view)
                .collect();
            let room = quorum_core::placement::room_for(&hosts, machines, cp.spec.replicas, surge);
            if let Err(why) = room {
                bail!(
                    "{name}: {} cannot be replaced now: {why}, or restart it in place instead (`quorum member restart {name} {}`); pass --force to ask anyway (the step then waits, Blocked, for a host)",
                    m.name,
                    m.name
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The sentence that says what will happen, for the person who asked.
pub fn plan(cp: &ControlPlane, machine: &str, request: MachineRequest) -> String {
    let name = &cp.name;
    let paused = if cp.spec.paused {
        format!(" ({name} is paused: nothing happens until `quorum pause {name} --resume`)")
    } else {
        String::new()
    };
    let how = match request {
        MachineRequest::Replace if cp.spec.rollout.max_surge >= 1 => format!(
            "a new machine joins as a learner and is promoted, then {machine} hands off leadership if it leads, leaves the endpoints and the cluster, and is deleted with its data"
        ),
        MachineRequest::Replace => format!(
            "{machine} leaves the endpoints and the cluster first (maxSurge 0), then a new machine joins in its place"
        ),
        MachineRequest::Restart => format!(
            "{machine} leaves the endpoints, hands off leadership if it leads, is stopped and started again on etcd {} and its data, and is waited on until it serves",
            cp.spec.version
        ),
    };
    let when = match (request, cp.spec.rollout.strategy) {
        (MachineRequest::Restart, Strategy::Replace) => {
            " once every machine runs the spec's version and every member is healthy"
        }
        _ => " once every member is healthy",
    };
    let done = match request {
        MachineRequest::Replace => "replaced",
        MachineRequest::Restart => "restarted in place",
    };
    format!("{name}: {machine} will be {done}{when}: {how}{paused}")
}
