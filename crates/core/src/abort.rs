//! A rollout that has changed no member can be taken back as if it never began.
//!
//! Invariant: a rollout is *untouched* while every machine still runs the one version
//! it ran before (no machine of the new version was made), none is leaving, and none is
//! in an in-place step (one rolled back runs its old version again, so it counts as
//! untouched). While it is, going back to that version is not a downgrade of any member
//! (`quorum upgrade NAME --abort` needs no `--allow-downgrade`), and the strategy can
//! change (a rollout stuck on a replacement no host can take switches to in place).
//! Once one member changed, going back replaces or restarts that member again, which is
//! a downgrade and is confirmed as one.
//!
//! Invariant: the strategy changes between steps only (`mid_step` says why not): no machine
//! leaving, none in an in-place step, no machine beyond the replicas (a surge machine
//! joining). There the next step is the strategy's own choice, so switching mixes
//! nothing; a rollout stuck for want of a host for its surge machine switches to in
//! place even after remediation replaced a member on the new version.
//!
//! `View::no_room` is the refusal that offers both: a new machine no host can take
//! (`placement::room_for`) is refused, Blocked, naming the switch, and the cancel
//! while the rollout is untouched.

use crate::decide::{Operation, View};
use crate::model::{ControlPlaneSpec, InPlacePhase, Machine, MachineRequest};
use crate::version::Version;

/// The version every machine still runs, when a rollout to `spec.version` is under way
/// and has changed no member; `None` when no rollout runs or one has changed a member.
pub fn untouched(spec: &ControlPlaneSpec, machines: &[Machine]) -> Option<Version> {
    let first = machines.first()?.version;
    let unchanged = machines.iter().all(|m| {
        let stepping = m
            .in_place
            .as_ref()
            .is_some_and(|ip| ip.phase != InPlacePhase::RolledBack);
        m.version == first && !m.deleting && !stepping
    });
    (unchanged && first != spec.version).then_some(first)
}

/// What makes a rollout touched, in words, for a refusal (`None`: untouched, or no
/// rollout): the first machine that changed.
pub fn changed_member(spec: &ControlPlaneSpec, machines: &[Machine]) -> Option<String> {
    if untouched(spec, machines).is_some() {
        return None;
    }
    let oldest = machines.iter().map(|m| m.version).min()?;
    machines.iter().find_map(|m| {
        let stepping = m
            .in_place
            .as_ref()
            .filter(|ip| ip.phase != InPlacePhase::RolledBack);
        if let Some(ip) = stepping {
            Some(format!(
                "{} is being restarted in place ({})",
                m.name, ip.phase
            ))
        } else if m.deleting {
            Some(format!("{} is leaving", m.name))
        } else if m.version != oldest {
            Some(format!("{} already runs etcd {}", m.name, m.version))
        } else {
            None
        }
    })
}

/// Why the strategy cannot change now (`None`: it can): a step is under way.
pub fn mid_step(spec: &ControlPlaneSpec, machines: &[Machine]) -> Option<String> {
    let stepping = machines.iter().find_map(|m| {
        let ip = m.in_place.as_ref()?;
        (ip.phase != InPlacePhase::RolledBack)
            .then(|| format!("{} is being restarted in place ({})", m.name, ip.phase))
    });
    let leaving = machines
        .iter()
        .find(|m| m.deleting)
        .map(|m| format!("{} is leaving", m.name));
    let surplus = (machines.len() > spec.replicas as usize).then(|| {
        format!(
            "{} machines for {} replicas (one is joining)",
            machines.len(),
            spec.replicas
        )
    });
    stepping.or(leaving).or(surplus)
}

impl View<'_> {
    /// Why no host can take the new machine `op` needs (the replacement of `replaces`,
    /// for a remediation), if none can: the step is
    /// refused (Blocked), never tried, with the ways out. A rollout that has changed no
    /// member yet can be cancelled or switched to in place (`abort`).
    pub(crate) fn no_room(&self, op: Operation, replaces: Option<&str>) -> Option<String> {
        let hosts = self.hosts?;
        let machines: Vec<Machine> = self.seen.iter().map(|s| s.machine.clone()).collect();
        let beside: Vec<Machine> = crate::placement::beside(&machines, replaces)
            .into_iter()
            .cloned()
            .collect();
        let why = crate::placement::room_for(hosts, &beside, self.spec().replicas, 1).err()?;
        let name = &self.cp.name;
        let mut out = String::new();
        let asked = machines
            .iter()
            .find(|m| m.requested == Some(MachineRequest::Replace));
        if let Some(m) = asked {
            out = format!(
                ", or restart {} in place instead: `quorum member restart {name} {}`",
                m.name, m.name
            );
        } else if op == Operation::RollingOut
            && crate::abort::mid_step(self.spec(), &machines).is_none()
        {
            out = format!(", or roll out in place, so that no member needs a host of its own beside the one it replaces: `quorum upgrade {name} --strategy InPlace`");
            if let Some(running) = crate::abort::untouched(self.spec(), &machines) {
                out.push_str(&format!("; or cancel the rollout, which has changed no member yet: `quorum upgrade {name} --abort` (back to etcd {running})"));
            }
        }
        Some(format!("not adding a machine: {why}{out}"))
    }
}
