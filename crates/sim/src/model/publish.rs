//! A learner whose own publish was lost (`quorum_core::publish`), in the model: in the
//! variant that grows a cluster back from a snapshot (`Variant::recreate`), where every
//! learner's first contact with the leader is a raft snapshot. Once per run, a learner
//! that has just started and caught up on nothing may have its publish come back inside
//! that snapshot: the member list shows it started, its endpoint answers nothing. Time
//! is abstract: an environment step says `LOST_AFTER_S` has passed since its start (the
//! only time the rule may act), another that etcd retried (it answers, the rule is moot).
//!
//! Checked at every stop the live controller performs: a learner that is not leaving,
//! not in an in-place step and not torn down is stopped only while its publish is lost,
//! and only once. Liveness (every state reaches the goal) covers the restart.

use super::*;

/// The lost publish of the run, if one happened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct LostPublish {
    machine: String,
    /// `quorum_core::publish::LOST_AFTER_S` has passed since its start.
    aged: bool,
    /// Stopped by the core's rule, and since then started again.
    stopped: bool,
    restarted: bool,
}

/// Seconds after its start at which an aged lost publish is observed: past
/// `LOST_AFTER_S`, before etcd's retry.
const AGED_S: i64 = quorum_core::publish::LOST_AFTER_S + 1;

impl State {
    /// Its endpoint answers nothing: its publish is lost and it was not started again.
    pub(super) fn publish_silent(&self, machine: &str) -> bool {
        self.publish
            .as_ref()
            .is_some_and(|l| l.machine == machine && !l.stopped)
    }

    /// The core's rule stopped the learner whose publish was lost.
    pub(super) fn publish_stopped(&self) -> bool {
        self.publish.as_ref().is_some_and(|l| l.stopped)
    }

    /// The starts the provider reports for `machine`: only the lost publish's machine's
    /// are modelled (its first start, then the planned one after the rule's stop). The
    /// others report none, so no restart backoff holds them: the model has no clock.
    pub(super) fn starts_of(&self, machine: &str) -> (Vec<i64>, Vec<i64>) {
        match &self.publish {
            Some(l) if l.machine == machine => {
                let first = NOW_UNIX_S - if l.aged { AGED_S } else { 0 };
                if l.restarted {
                    (vec![first, NOW_UNIX_S], vec![NOW_UNIX_S])
                } else {
                    (vec![first], vec![])
                }
            }
            _ => (vec![], vec![]),
        }
    }

    /// Before the live controller's stop of `machine` (the module's check).
    pub(super) fn check_learner_stop(&mut self, machine: &str) -> Result<(), String> {
        let Some(rec) = self.machines.iter().find(|m| m.name == machine) else {
            return Ok(());
        };
        let serial = rec.serial;
        let learner = self
            .members
            .iter()
            .any(|m| m.serial == serial && m.is_learner);
        let running = self.proc(machine).is_some_and(|p| p.running);
        if !learner || !running || rec.deleting || rec.in_place.is_some() || self.cp.deleting {
            return Ok(());
        }
        match self.publish.as_mut() {
            Some(l) if l.machine == machine && !l.stopped => {
                l.stopped = true;
                Ok(())
            }
            _ => Err(format!("learner {machine} stopped while it answered")),
        }
    }

    /// At a start of `machine`: the lost publish's machine starts its second process.
    pub(super) fn note_start(&mut self, machine: &str) {
        if let Some(l) = self.publish.as_mut() {
            if l.machine == machine && l.stopped {
                l.restarted = true;
            }
        }
    }

    /// The environment's steps of a lost publish.
    pub(super) fn publish_steps(&self, out: &mut Vec<(String, State)>) {
        if !self.variant.recreate {
            return;
        }
        if !self.publish_used {
            for m in self.members.iter().filter(|m| m.is_learner && !m.caught_up) {
                let Some(x) = self.machine_of(m) else {
                    continue;
                };
                if !self.proc(&x.name).is_some_and(|p| p.running) || !m.named {
                    continue;
                }
                let mut n = self.clone();
                n.publish_used = true;
                n.publish = Some(LostPublish {
                    machine: x.name.clone(),
                    aged: false,
                    stopped: false,
                    restarted: false,
                });
                out.push((
                    format!("{}'s publish comes back inside the snapshot", x.name),
                    n,
                ));
            }
        }
        let Some(l) = self.publish.as_ref().filter(|l| !l.stopped) else {
            return;
        };
        if !l.aged {
            let mut n = self.clone();
            if let Some(x) = n.publish.as_mut() {
                x.aged = true;
            }
            out.push((format!("{AGED_S}s pass since {} started", l.machine), n));
        }
        let mut n = self.clone();
        n.publish = None;
        out.push((format!("{} publishes on etcd's retry", l.machine), n));
    }
}
