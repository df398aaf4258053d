//! Members on hosts (`Config::hosts`): every machine is placed by the core's placement
//! (`quorum_core::placement::place`, what the hosts provider runs) on one of
//! `HOSTS` hosts, two of which share a failure domain; and a host may be lost for a
//! while (a seeded fault): every process on it stops, its agent answers nothing, so
//! every call to the provider about a machine there fails, and its machines are
//! observed as the hosts provider reports a host that does not answer (taken to run,
//! on their data, as last seen; etcd's view of the member judges them). When it comes
//! back, its processes are still stopped (a reboot) and the controller starts them.
//!
//! An operator also removes a spare host (`quorum host remove`) in every hosts run:
//! at a step of the seed's choosing a host with no machine is marked (placement gives
//! it nothing new), and a few steps later it is gone from the hosts registered.
//!
//! Checked at every placement, against the ground truth: no host runs two machines of
//! the control plane, no failure domain holds more than it can lose
//! (`placement::max_per_domain`), no machine lands on a host that does not answer or
//! is being removed; and no host is removed with a machine on it.

use super::*;
use quorum_core::placement::{self, HostView};
use quorum_core::Placement;

/// The hosts of a run: (name, zone). h1 and h2 share zone a; the rest are each their
/// own domain, so a 3-member control plane with a surge member always has a domain
/// free even while one host is lost.
pub(crate) const HOSTS: [(&str, Option<&str>); 7] = [
    ("h1", Some("a")),
    ("h2", Some("a")),
    ("h3", None),
    ("h4", None),
    ("h5", None),
    ("h6", None),
    ("h7", None),
];
/// A host gives each member its own port pair from here (as `HostsProvider` does).
const FIRST_CLIENT_PORT: u16 = 2379;
/// How many steps a removal's mark stands before the record goes (the real command
/// marks, checks, then deletes at once; the window lets placements meet the mark).
const REMOVAL_MARK_STEPS: u64 = 3;

/// The operator's removal of a spare host.
#[derive(Clone, Debug)]
pub(crate) struct HostRemoval {
    pub(crate) host: String,
    pub(crate) marked_at_step: u64,
    /// Its record is gone.
    pub(crate) gone: bool,
}

impl World {
    fn host_views(&self) -> Vec<HostView> {
        let down = self.down_host();
        let removal = self.host_removal.as_ref();
        self.hosts()
            .iter()
            .filter(|(name, _)| !removal.is_some_and(|r| r.gone && r.host == *name))
            .map(|(name, zone)| HostView {
                name: (*name).to_string(),
                zone: zone.map(str::to_string),
                ready: down != Some(*name),
                removing: removal.is_some_and(|r| r.host == *name),
                load: self
                    .machines
                    .iter()
                    .filter(|m| m.placement.as_ref().is_some_and(|p| p.host == *name))
                    .count(),
            })
            .collect()
    }

    /// The hosts as the controller's observation gives them to the core
    /// (`HostRecord::placement_view`): from their records alone, every one taken to
    /// answer, no load counted.
    pub(crate) fn observed_hosts(&self) -> Option<Vec<HostView>> {
        let views = self.host_views().into_iter().map(|v| HostView {
            ready: true,
            load: 0,
            ..v
        });
        self.cfg.hosts.then(|| views.collect())
    }

    /// The hosts registered: all of `HOSTS`, or with `Config::tight_hosts` one of its
    /// own domain per replica.
    fn hosts(&self) -> &'static [(&'static str, Option<&'static str>)] {
        if self.cfg.hosts && self.cfg.tight_hosts {
            let n = (self.cp.spec.replicas as usize).clamp(1, HOSTS.len() - 2);
            &HOSTS[2..2 + n]
        } else {
            &HOSTS
        }
    }

    /// A rollout by replacement refused for want of a host, with the ways out: in every
    /// other run the person cancels it at once, as offered while it has changed no
    /// member; otherwise, once the faults stop, they switch it to in place. Each must be
    /// what the command accepts then.
    pub(crate) fn stuck_rollout_operator(&mut self, faults_on: bool) {
        let Some(why) = self.last_refusal.clone() else {
            return;
        };
        if !why.contains("no host can take") || !why.contains("--strategy InPlace") {
            return;
        }
        let cancels = !(self.cfg.seed / 8).is_multiple_of(2);
        if faults_on && !(cancels && why.contains("--abort")) {
            return;
        }
        self.last_refusal = None;
        self.rollouts_taken_back += 1;
        let untouched = quorum_core::abort::untouched(&self.cp.spec, &self.machines);
        if why.contains("--abort") != untouched.is_some() {
            self.violate(format!(
                "a cancel offered ({why}) where the command says otherwise"
            ));
            return;
        }
        match untouched {
            Some(running) if cancels => {
                // `quorum upgrade --abort` drops a chained upgrade's road with it.
                self.cp.spec.version = running;
                self.cp.road = None;
                self.note(format!(
                    "OPERATOR cancels the stuck rollout: back to {running}"
                ));
            }
            _ => {
                if let Some(busy) = quorum_core::abort::mid_step(&self.cp.spec, &self.machines) {
                    self.violate(format!("a switch to in place offered mid-step: {busy}"));
                    return;
                }
                self.cp.spec.rollout.strategy = quorum_core::Strategy::InPlace;
                self.note("OPERATOR switches the stuck rollout to in place".into());
            }
        }
    }

    /// The host lost now, if one is.
    pub(crate) fn down_host(&self) -> Option<&str> {
        match &self.impairment {
            Some((Impairment::HostDown(h), _)) => Some(h.as_str()),
            _ => None,
        }
    }

    /// Where a new machine goes (hosts runs), with the invariants checked; `Err` is the
    /// placement's refusal, which the allocation answers with.
    pub(crate) fn place_machine(
        &mut self,
        replaces: Option<String>,
    ) -> Result<Option<Placement>, String> {
        if !self.cfg.hosts {
            return Ok(None);
        }
        let views = self.host_views();
        let beside: Vec<Machine> = placement::beside(&self.machines, replaces.as_deref())
            .into_iter()
            .cloned()
            .collect();
        if let Some(r) = replaces
            .as_deref()
            .filter(|_| beside.len() < self.machines.len())
        {
            self.check_left_out(r);
        }
        let host =
            placement::place(&views, &beside, self.cp.spec.replicas).map_err(|e| e.to_string())?;
        self.check_placed_on(&host, &views, &beside);
        let k = self
            .host_views()
            .iter()
            .find(|v| v.name == host)
            .map_or(0, |v| v.load) as u16;
        Ok(Some(Placement {
            host,
            client_port: FIRST_CLIENT_PORT + 2 * k,
            peer_port: FIRST_CLIENT_PORT + 1 + 2 * k,
        }))
    }

    /// The machine `r` a replacement was placed without: left out only once its member
    /// is removed and its process stopped, as the core records a replacement only then.
    fn check_left_out(&mut self, r: &str) {
        let member = self.member_of_machine(r).is_some();
        let running = self.procs.get(r).is_some_and(|p| p.running);
        if member || running {
            self.violate(format!(
                "a replacement placed beside {r}, which still has a member or runs"
            ));
        }
    }

    /// The host chosen for a new machine beside `beside` answers, is not being
    /// removed, has no other machine of the control plane, and leaves its failure
    /// domain with no more machines than the replicas can lose.
    fn check_placed_on(&mut self, host: &str, views: &[HostView], beside: &[Machine]) {
        let view = views.iter().find(|v| v.name == host);
        if !view.is_some_and(|v| v.ready) {
            self.violate(format!("a machine placed on {host}, which does not answer"));
        }
        if self.host_removal.as_ref().is_some_and(|r| r.host == host) {
            self.violate(format!(
                "a machine placed on {host}, which is being removed"
            ));
        }
        if beside
            .iter()
            .any(|m| m.placement.as_ref().is_some_and(|p| p.host == host))
        {
            self.violate(format!(
                "a second machine of the control plane placed on {host}"
            ));
        }
        let zone = view.and_then(|v| v.zone.clone());
        let in_domain = |m: &Machine| {
            m.placement.as_ref().is_some_and(|p| {
                let z = HOSTS
                    .iter()
                    .find(|(n, _)| *n == p.host)
                    .and_then(|(_, z)| *z);
                match (&zone, z) {
                    (Some(a), Some(b)) => a == b,
                    _ => p.host == host,
                }
            })
        };
        let after = beside.iter().filter(|m| in_domain(m)).count() + 1;
        if after > placement::max_per_domain(self.cp.spec.replicas) {
            self.violate(format!(
                "{after} machines in {host}'s failure domain, more than {} of {} replicas can lose",
                placement::max_per_domain(self.cp.spec.replicas),
                self.cp.spec.replicas
            ));
        }
    }

    /// The operator's removal of a spare host (hosts runs): marked at a step the seed
    /// picks, gone `REMOVAL_MARK_STEPS` later. No random draw: the runs' faults stay
    /// what they were for each seed.
    pub(crate) fn host_removal_step(&mut self) {
        if !self.cfg.hosts {
            return;
        }
        let at = 10 + self.cfg.seed % 40;
        match &self.host_removal {
            None if self.step == at => {
                // The last spare host, as an operator retiring one would pick: no machine
                // of the control plane on it, and answering.
                let down = self.down_host().map(str::to_string);
                let spare = self.hosts().iter().rev().map(|(n, _)| *n).find(|n| {
                    down.as_deref() != Some(*n)
                        && !self
                            .machines
                            .iter()
                            .any(|m| m.placement.as_ref().is_some_and(|p| p.host == *n))
                });
                if let Some(host) = spare {
                    self.note(format!("OPERATOR host {host} is being removed"));
                    self.host_removal = Some(HostRemoval {
                        host: host.to_string(),
                        marked_at_step: self.step,
                        gone: false,
                    });
                }
            }
            Some(r) if !r.gone && self.step >= r.marked_at_step + REMOVAL_MARK_STEPS => {
                let host = r.host.clone();
                if let Some(m) = self
                    .machines
                    .iter()
                    .find(|m| m.placement.as_ref().is_some_and(|p| p.host == host))
                {
                    let what = format!("host {host} removed with {} on it", m.name);
                    self.violate(what);
                }
                self.note(format!("OPERATOR host {host} removed"));
                if let Some(r) = self.host_removal.as_mut() {
                    r.gone = true;
                }
            }
            _ => {}
        }
    }

    /// The machine is on the host lost now.
    pub(crate) fn on_down_host(&self, machine: &str) -> bool {
        let Some(down) = self.down_host() else {
            return false;
        };
        self.machines
            .iter()
            .find(|m| m.name == machine)
            .and_then(|m| m.placement.as_ref())
            .is_some_and(|p| p.host == down)
    }

    /// The machine an action asks the provider (the host's agent) about, if any.
    pub(crate) fn provider_target(a: &Action) -> Option<&str> {
        match a {
            Action::StartMachine { machine, .. }
            | Action::StopMachine { machine }
            | Action::DeleteMachine { machine }
            | Action::WriteMarker { machine, .. }
            | Action::FenceMachine { machine, .. }
            | Action::RestoreSnapshot { machine, .. }
            | Action::ForceNewCluster { machine, .. } => Some(machine.as_str()),
            _ => None,
        }
    }

    /// A host is lost (hosts runs only): every process on it stops, until it heals.
    /// Only where the loss of its members leaves a quorum, as for any member fault.
    pub(crate) fn host_fault(&mut self, heal_at: u64) {
        let running: Vec<(String, String)> = self
            .machines
            .iter()
            .filter(|m| self.procs.get(&m.name).is_some_and(|p| p.running))
            .filter_map(|m| {
                m.placement
                    .as_ref()
                    .map(|p| (p.host.clone(), m.name.clone()))
            })
            .collect();
        let hosts: Vec<String> = running.iter().map(|(h, _)| h.clone()).collect();
        let Some(host) = self.pick(&hosts) else {
            return;
        };
        let on: Vec<String> = self
            .machines
            .iter()
            .filter(|m| m.placement.as_ref().is_some_and(|p| p.host == host))
            .map(|m| m.name.clone())
            .collect();
        if !on.iter().all(|n| self.safe_to_impair_machine(n)) {
            return;
        }
        self.note(format!("FAULT host {host} is lost ({})", on.join(", ")));
        for n in &on {
            if let Some(p) = self.procs.get_mut(n) {
                p.running = false;
                p.exit_at_ms = None;
            }
        }
        self.hosts_lost += 1;
        self.impairment = Some((Impairment::HostDown(host), heal_at));
    }
}
