//! The in-place step in the model (`Variant::in_place`): the controller's record
//! writes, the binary each process runs and reports, etcd's cluster version, a new
//! binary that fails to start, the step's deadline (abstract time: an environment step
//! moves a phase's `since_unix_s` past `inPlace.timeout`), the person who retries a
//! stopped rollout, and the checks.
//!
//! Checked: at most one member out of service in place; never one in the decision's
//! endpoints; its stop only once its drain has passed and the load balancer no longer
//! serves it, and never leaving fewer running voters than a quorum; no membership change
//! but a remediation's; no binary started below the cluster version; a deposed
//! controller's record writes change nothing. The goal adds: every record gone and the
//! cluster version moved; it stays reachable from every state, so every in-place step
//! ends (back in service, or rolled back and retried, or left to remediation).

use super::*;
use quorum_core::{Decision, InPlacePhase};

/// The cluster versions (minor lines) before and after the upgrade.
const OLD_LINE: Version = Version::new(3, 4, 0);
const NEW_LINE: Version = Version::new(3, 5, 0);

impl State {
    pub(super) fn cluster_version(&self) -> Version {
        if self.cluster_new {
            NEW_LINE
        } else {
            OLD_LINE
        }
    }

    /// Safety: at most one member out of service in place.
    pub(super) fn check_in_place(&self) -> Result<(), String> {
        let out = self
            .machines
            .iter()
            .filter(|m| m.in_place_out_of_service())
            .count();
        if out > 1 {
            return Err(format!("{out} members out of service in place at once"));
        }
        Ok(())
    }

    /// The decision's endpoints: none of a member out of service in place.
    pub(super) fn check_endpoints(&self, endpoints: &[String]) -> Result<(), String> {
        for m in self.machines.iter().filter(|m| m.in_place_out_of_service()) {
            if endpoints.contains(&m.client_url()) {
                return Err(format!(
                    "{} in the endpoints while out of service in place",
                    m.name
                ));
            }
        }
        Ok(())
    }

    /// A membership change must be a remediation's: the in-place step adds and
    /// removes no member.
    pub(super) fn check_membership(&self, a: &Action) -> Result<(), String> {
        if !self.variant.in_place {
            return Ok(());
        }
        let own = matches!(
            a,
            Action::AllocateMachine {
                remediation: None,
                ..
            } | Action::MarkDeleting {
                remediation: None,
                ..
            }
        );
        if own {
            return Err(format!(
                "an in-place rollout changed membership on its own: {a}"
            ));
        }
        Ok(())
    }

    /// A binary about to start: never below the cluster version. Whether it runs (NEW
    /// on the machine where it is broken exits at once).
    pub(super) fn check_binary(&self, machine: &str, binary: Version) -> Result<bool, String> {
        let line = Version::new(binary.major, binary.minor, 0);
        if line < self.cluster_version() {
            return Err(format!(
                "{machine} started on etcd {binary}, below the cluster version"
            ));
        }
        Ok(!(binary == NEW && self.bad_binary.as_deref() == Some(machine)))
    }

    /// The stop of a member out of service in place, checked before it (drained, the
    /// load balancer no longer serving it) and after it (`after_stop`). Whether it is one.
    pub(super) fn before_stop(&self, machine: &str) -> Result<bool, String> {
        let out = self
            .machines
            .iter()
            .any(|m| m.name == machine && !m.deleting && m.in_place_out_of_service());
        if !out {
            return Ok(false);
        }
        if !self.drained.iter().any(|m| m == machine) {
            return Err(format!(
                "{machine} stopped in place before its drain passed"
            ));
        }
        if self.lb_serves.iter().any(|m| m == machine) {
            return Err(format!(
                "{machine} stopped in place while the load balancer still sends clients to it"
            ));
        }
        Ok(true)
    }

    pub(super) fn after_stop(&self, machine: &str) -> Result<(), String> {
        if !self.has_quorum() {
            return Err(format!(
                "the in-place stop of {machine} leaves fewer running voters than a quorum"
            ));
        }
        Ok(())
    }

    /// The controller's record writes, as the real controller performs them; a deposed
    /// controller's are fenced (nothing changes).
    pub(super) fn perform_in_place(&mut self, a: &Action, fenced: bool) {
        if fenced {
            return;
        }
        // Its words are the controller's, not the state's: one failure is as good as
        // another to the model (fewer states).
        let a = &match a {
            Action::SetInPlacePhase {
                machine,
                phase,
                version,
                failure: Some(_),
                ca_step,
            } => Action::SetInPlacePhase {
                machine: machine.clone(),
                phase: *phase,
                version: *version,
                failure: Some(String::new()),
                ca_step: *ca_step,
            },
            _ => a.clone(),
        };
        // The model's machines have no certificate dates: nothing to renew.
        let at = Applying {
            now_unix_s: NOW_UNIX_S,
            renewed_not_after_unix_s: None,
        };
        let Some(m) = self
            .machines
            .iter_mut()
            .find(|m| a.machine() == Some(m.name.as_str()))
        else {
            return;
        };
        let had_step = m.in_place.is_some();
        let changed = m.apply(a, &at);
        match a {
            Action::BeginInPlace { machine, .. } if changed => {
                // It leaves the endpoints at the next pass: a new drain, and the load
                // balancer serves it until a pass brings it in step.
                self.drain_started = false;
                self.drain_passed = false;
                self.lb_serves.push(machine.clone());
            }
            Action::EndInPlace { machine, .. } if had_step => {
                // Back in service: its next step drains afresh.
                self.drained.retain(|d| d != machine);
                self.lb_serves.retain(|d| d != machine);
            }
            _ => {}
        }
    }

    /// The environment's in-place moves: etcd moves the cluster version once every
    /// member runs NEW (all answering); NEW may fail to start on a machine not yet on it
    /// (once); a phase's deadline passes; and, when the controller refuses to go on after
    /// a rollback, the person replaces the broken binary and retries.
    pub(super) fn in_place_env(&self, d: &Decision, idle: bool, out: &mut Vec<(String, State)>) {
        if !self.variant.in_place {
            return;
        }
        let all_new = self.leader.is_some()
            && self.members.iter().all(|m| {
                self.member_running(m)
                    && self
                        .machine_of(m)
                        .and_then(|x| self.proc(&x.name))
                        .is_some_and(|p| p.binary == NEW)
            });
        if !self.cluster_new && all_new {
            let mut n = self.clone();
            n.cluster_new = true;
            out.push(("the cluster version moves to 3.5".to_string(), n));
        }
        if !self.bad_used {
            for m in self.machines.iter().filter(|m| !m.deleting) {
                let on_new = self.proc(&m.name).is_some_and(|p| p.binary == NEW);
                if !on_new {
                    let mut n = self.clone();
                    n.bad_binary = Some(m.name.clone());
                    n.bad_used = true;
                    out.push((format!("etcd {NEW} fails to start on {}", m.name), n));
                }
            }
        }
        // A deadline passes only while the controller is idle (it waits, or its passes
        // change nothing): a pass takes milliseconds against a timeout of a minute, so it
        // does not sit through one with a step to take (after a crash, the next
        // controller's pass comes first).
        let timeout_s = self.cp.spec.rollout.in_place.timeout.as_secs() as i64;
        for (i, m) in self.machines.iter().enumerate().filter(|_| idle) {
            let timed = m.in_place.as_ref().is_some_and(|ip| {
                matches!(
                    ip.phase,
                    InPlacePhase::Restarting | InPlacePhase::RollingBack
                ) && ip.since_unix_s == NOW_UNIX_S
            });
            if timed {
                let mut n = self.clone();
                if let Some(ip) = n.machines[i].in_place.as_mut() {
                    ip.since_unix_s = NOW_UNIX_S - timeout_s - 1;
                }
                out.push((format!("{}'s in-place deadline passes", m.name), n));
            }
        }
        let stopped = d.is_blocked()
            && d.waiting_for
                .as_deref()
                .is_some_and(|w| w.starts_with("rollout stopped"));
        if stopped {
            let mut n = self.clone();
            n.bad_binary = None;
            for m in &mut n.machines {
                if m.in_place
                    .as_ref()
                    .is_some_and(|ip| ip.phase == InPlacePhase::RolledBack)
                {
                    m.in_place = None;
                }
            }
            out.push((
                "the person replaces the broken binary and retries the rollout".to_string(),
                n,
            ));
        }
    }
}
