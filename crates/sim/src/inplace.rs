//! The in-place step in the simulator (`strategy: InPlace`): the binary each process
//! runs and reports, etcd's cluster version, the in-place records the controller
//! writes, a new binary that fails to start, the person who changes the version or
//! retries a stopped rollout, and the checks.
//!
//! - A process runs the binary of the machine record's `version` when it starts, and
//!   reports that version (its status) and, through the provider, `running_version`.
//! - etcd's leader looks at its members' versions every `VERSION_MONITOR_MS` and moves
//!   the cluster version up to the lowest minor they all run, once every member answers;
//!   it never moves down. A binary whose minor is below the cluster version exits at
//!   once (etcd refuses to downgrade the cluster).
//! - The fault "the new binary fails to start" (a corrupt or wrong binary on one host):
//!   every start of that version on that machine exits at once, a crash loop, so the step
//!   times out and is rolled back. It lasts until the person finds it, once the faults
//!   stop: they replace the binary and retry (`quorum upgrade --retry`: the rolled-back
//!   record is cleared).
//! - The version plan (`VERSION_PLANS`): the spec moves to the next version once the
//!   rollout converged, or, during the faults, while a step drains (that step is then
//!   abandoned and the rollout goes on toward the new version).
//!
//! Checked: an in-place rollout never changes membership on its own (every member added
//! or removed is a remediation's); at most one member is out of service in place at a
//! time; such a member is never in the published endpoints, and is stopped only once its
//! endpoint has been unpublished for the drain and the load balancer no longer sends it
//! clients; its stop never leaves fewer connected voters than a quorum; no binary below
//! the cluster version is ever started; every in-place step ends (back in service,
//! rolled back, or left to remediation) within `IN_PLACE_END_STEPS` steps without a
//! fault; a deposed controller's in-place record writes are fenced (`Answer::Fenced`).

use super::*;
use quorum_core::{InPlaceOutcome, InPlacePhase, Strategy};

/// etcd's leader checks its members' versions this often (`monitorVersionInterval`).
pub(crate) const VERSION_MONITOR_MS: u64 = 4_000;
/// The spec's in-place timeout in the simulator: short against the 40 s fault window,
/// so that a crash loop or a hang on the restarted member outlasts it too.
pub const SIM_IN_PLACE_TIMEOUT: Span = Span::from_secs(10);
/// An in-place step ends within this many steps without a fault (a drain, a restart
/// that fails for the whole timeout, a rollback that fails for another timeout, then
/// remediation's turn; with the restart backoff and the retries' backoff between).
pub const IN_PLACE_END_STEPS: u64 = 400;
/// Chance per step, during the faults, that the person moves the spec to the next
/// version of the plan while a member drains.
const MID_ROLLOUT_CHANGE_PER_MILLE: u64 = 100;

/// The controller's last decision stopped the rollout after a rollback (`stopped`);
/// the stop of the rolled-back record there is has been counted (`counted`).
#[derive(Debug, Default)]
pub(crate) struct RolloutStop {
    pub(crate) stopped: bool,
    pub(crate) counted: bool,
}

pub(crate) const MID: Version = Version::new(3, 5, 0);

/// The versions an in-place run goes through: where the members start, then each
/// version the spec moves to, one rollout after another.
pub(crate) const VERSION_PLANS: [(Version, &[Version]); 3] = [
    // A minor step, then a patch step.
    (OLD, &[MID, NEW]),
    // A minor step.
    (OLD, &[NEW]),
    // A patch step.
    (MID, &[NEW]),
];

/// What the in-place step did and met in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InPlaceCounts {
    /// Steps begun (`BeginInPlace` recorded), new binaries recorded (`Restarting`),
    /// members back in service on the new binary.
    pub begun: u64,
    pub restarts: u64,
    pub done: u64,
    /// Rollbacks recorded (`RollingBack`), members back and serving on their previous
    /// binary (`RolledBack`), steps abandoned (the version changed while draining, or a
    /// rolled-back version no longer wanted).
    pub rollbacks: u64,
    pub rolled_back: u64,
    pub abandoned: u64,
    /// Members out of service in place marked for replacement instead (their data
    /// lost, or the rollback barred or failed).
    pub left_to_remediation: u64,
    /// Members stopped in place (each checked: drained, quorum kept).
    pub stops: u64,
    /// Faults: a new binary that fails to start; starts that exited at once on one.
    pub bad_binaries: u64,
    pub failed_starts: u64,
    /// Rollouts the controller stopped after a rollback (it refused to go on), and the
    /// person's retries once the faults stopped.
    pub stopped_rollouts: u64,
    pub retries: u64,
    /// The spec moved to the next version of the plan (at convergence or mid-rollout),
    /// and the cluster version moved.
    pub version_changes: u64,
    pub cluster_version_moves: u64,
    /// A chained upgrade's links the controller took (`chain`).
    pub links_taken: u64,
    /// The longest in-place step, in steps without a fault.
    pub end_max_steps: u64,
}

impl InPlaceCounts {
    pub fn add(&mut self, o: &InPlaceCounts) {
        self.begun += o.begun;
        self.restarts += o.restarts;
        self.done += o.done;
        self.rollbacks += o.rollbacks;
        self.rolled_back += o.rolled_back;
        self.abandoned += o.abandoned;
        self.left_to_remediation += o.left_to_remediation;
        self.stops += o.stops;
        self.bad_binaries += o.bad_binaries;
        self.failed_starts += o.failed_starts;
        self.stopped_rollouts += o.stopped_rollouts;
        self.retries += o.retries;
        self.version_changes += o.version_changes;
        self.cluster_version_moves += o.cluster_version_moves;
        self.links_taken += o.links_taken;
        self.end_max_steps = self.end_max_steps.max(o.end_max_steps);
    }
}

impl std::fmt::Display for InPlaceCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} steps begun, {} new binaries recorded, {} members stopped in place, {} back in service; {} rollbacks ({} members back on their previous binary), {} steps abandoned, {} left to remediation; faults: {} new binaries that fail to start ({} starts exited at once); {} rollouts stopped, {} retried by the operator; {} version changes, {} chain links taken, {} cluster version moves; the longest step {} steps ({} ms) without a fault",
            self.begun,
            self.restarts,
            self.stops,
            self.done,
            self.rollbacks,
            self.rolled_back,
            self.abandoned,
            self.left_to_remediation,
            self.bad_binaries,
            self.failed_starts,
            self.stopped_rollouts,
            self.retries,
            self.version_changes,
            self.links_taken,
            self.cluster_version_moves,
            self.end_max_steps,
            self.end_max_steps * STEP_MS
        )
    }
}

/// The cluster version etcd derives from members running `v`: its minor line.
pub(crate) fn line_of(v: Version) -> Version {
    Version::new(v.major, v.minor, 0)
}

impl World {
    pub(crate) fn in_place_strategy(&self) -> bool {
        self.cp.spec.rollout.strategy == Strategy::InPlace
    }

    /// An in-place scenario's spec and version plan (chosen by the seed): the version
    /// the members start at.
    pub(crate) fn plan_in_place(&mut self) -> Version {
        let (from, to) = VERSION_PLANS[self.rng.below(VERSION_PLANS.len() as u64) as usize];
        self.cp.spec.rollout.strategy = Strategy::InPlace;
        self.cp.spec.rollout.in_place.timeout = SIM_IN_PLACE_TIMEOUT;
        self.plan = to[1..].to_vec();
        self.cp.spec.version = to[0];
        from
    }

    /// The binary a member runs (or last started): its machine's process's; an orphan
    /// outside quorum's machines runs the scenarios' oldest.
    pub(crate) fn binary_of_member(&self, m: &SimMember) -> Option<Version> {
        if self.external_running.contains(&m.id) {
            return Some(OLD);
        }
        let mach = self.machine_of_member(m)?;
        self.procs.get(&mach.name).and_then(|p| p.binary)
    }

    /// etcd's leader, every `VERSION_MONITOR_MS`: once every member answers, the cluster
    /// version moves up to the lowest minor they run.
    pub(crate) fn monitor_cluster_version(&mut self) {
        if self.now_ms < self.next_version_check_ms || self.leader.is_none() {
            return;
        }
        self.next_version_check_ms = self.now_ms + VERSION_MONITOR_MS;
        let mut lowest: Option<Version> = None;
        for m in &self.members {
            if !self.member_connected(m) {
                return;
            }
            let Some(v) = self.binary_of_member(m) else {
                return;
            };
            lowest = Some(lowest.map_or(line_of(v), |l| l.min(line_of(v))));
        }
        if let Some(v) = lowest.filter(|v| *v > self.cluster_version) {
            self.cluster_version = v;
            self.in_place.cluster_version_moves += 1;
            self.note(format!(
                "the cluster version moves to {}.{}: every member runs it",
                v.major, v.minor
            ));
        }
    }

    /// A binary about to start, checked: never below the cluster version (etcd refuses
    /// it: the point of no return of a minor upgrade). False if it exits at once.
    pub(crate) fn check_binary(&mut self, name: &str, binary: Version) -> bool {
        self.check_no_skipped_minor(name, binary);
        if line_of(binary) < self.cluster_version {
            let cv = self.cluster_version;
            self.violate(format!(
                "{name} started on etcd {binary}, below the cluster version {}.{}: etcd refuses it",
                cv.major, cv.minor
            ));
            return false;
        }
        let bad = self
            .procs
            .get(name)
            .is_some_and(|p| p.bad_binary == Some(binary));
        if bad {
            self.in_place.failed_starts += 1;
            self.note(format!("{name}'s etcd {binary} exits at once"));
        }
        !bad
    }

    /// The controller's in-place record writes (store writes: fenced for a deposed
    /// controller), as the real controller performs them (`perform.rs`).
    pub(crate) fn perform_in_place(&mut self, a: &Action, fenced: bool) -> Answer {
        if fenced {
            return Answer::Fenced;
        }
        let now = self.now_unix_s();
        let at = Applying {
            now_unix_s: now,
            renewed_not_after_unix_s: self.renewed_not_after(now),
        };
        let changed = self
            .machines
            .iter_mut()
            .find(|m| a.machine() == Some(m.name.as_str()))
            .is_some_and(|m| m.apply(a, &at));
        if changed {
            self.count_in_place(a);
        }
        Answer::Done
    }

    /// What an in-place record write that changed the record counts.
    fn count_in_place(&mut self, a: &Action) {
        match a {
            Action::BeginInPlace { .. } => self.in_place.begun += 1,
            Action::SetInPlacePhase { machine, phase, .. } => {
                let now_ms = self.now_ms;
                if let Some(p) = self.procs.get_mut(machine) {
                    p.phase_at_ms = Some(now_ms);
                }
                match phase {
                    InPlacePhase::Restarting => self.in_place.restarts += 1,
                    InPlacePhase::RollingBack => self.in_place.rollbacks += 1,
                    _ => {}
                }
            }
            Action::EndInPlace { outcome, .. } => match outcome {
                InPlaceOutcome::RolledBack => self.in_place.rolled_back += 1,
                InPlaceOutcome::Done => self.in_place.done += 1,
                InPlaceOutcome::Abandoned => self.in_place.abandoned += 1,
            },
            _ => {}
        }
    }

    /// A membership change in an in-place run must be a remediation's (the machine it
    /// concerns carries a remediation record) or an orphan's removal: the in-place step
    /// itself never adds or removes a member. (A member out of service in place that is
    /// marked for replacement is counted: its step was left to remediation.) A
    /// replacement a person asked for (`quorum member replace`) is one under either
    /// strategy: once asked, the run's membership changes are not the in-place step's
    /// alone (its new machine joins even when remediation took the one asked for first).
    pub(crate) fn check_in_place_membership(&mut self, a: &Action) {
        let asked = self
            .asked
            .as_ref()
            .is_some_and(|a| a.request == quorum_core::MachineRequest::Replace);
        if !self.in_place_strategy() || asked {
            return;
        }
        let remediated = |w: &World, name: &str| {
            w.machines
                .iter()
                .find(|m| m.name == name)
                .is_none_or(|m| m.remediation.is_some())
        };
        if let Action::MarkDeleting { machine, .. } = a {
            let out = self
                .machines
                .iter()
                .any(|m| &m.name == machine && m.in_place_out_of_service());
            if out {
                self.in_place.left_to_remediation += 1;
            }
        }
        let own = match a {
            Action::AllocateMachine {
                remediation: None, ..
            }
            | Action::MarkDeleting {
                remediation: None, ..
            } => true,
            Action::AddLearner { machine, .. } | Action::Promote { machine, .. } => {
                !remediated(self, machine)
            }
            Action::RemoveMember {
                machine: Some(machine),
                ..
            } => !remediated(self, machine),
            _ => false,
        };
        if own {
            self.violate(format!(
                "an in-place rollout changed membership on its own: '{a}'"
            ));
        }
    }

    /// The stop of a member out of service in place, checked before it: drained as a
    /// removal is (unpublished for the drain, the load balancer no longer serving it).
    /// Returns whether it is one, and whether its member was connected.
    pub(crate) fn before_in_place_stop(&mut self, machine: &str) -> Option<bool> {
        let out = self
            .machines
            .iter()
            .any(|m| m.name == machine && !m.deleting && m.in_place_out_of_service());
        if !out {
            return None;
        }
        self.in_place.stops += 1;
        self.check_drained(machine, "stopped in place");
        Some(
            self.member_of_machine(machine)
                .is_some_and(|m| self.member_connected(m)),
        )
    }

    /// ...and after it: the healthy voters left still make a quorum.
    pub(crate) fn after_in_place_stop(&mut self, machine: &str, was_connected: bool) {
        // A stopped process is no longer hung: the next start runs afresh.
        if matches!(&self.impairment, Some((Impairment::Hung(n), _)) if n == machine) {
            self.impairment = None;
            self.note(format!("HEAL {machine} was hung: its process is gone"));
        }
        let voters = self.voters().count();
        let connected = self.connected_voters();
        if was_connected && connected < quorum_size(voters) {
            self.violate(format!(
                "the in-place stop of {machine} leaves {connected} of {voters} voters connected, below the quorum"
            ));
        }
    }

    /// The decision's endpoints, checked before they are published: none of a member
    /// out of service in place.
    pub(crate) fn check_in_place_endpoints(&mut self, endpoints: &[String]) {
        let out: Vec<String> = self
            .machines
            .iter()
            .filter(|m| m.in_place_out_of_service())
            .map(Machine::client_url)
            .filter(|url| endpoints.contains(url))
            .collect();
        if let Some(url) = out.first() {
            self.violate(format!(
                "{url} published while its member is out of service in place"
            ));
        }
    }

    /// A decision that stops the rollout after a rollback: counted once per rolled-back
    /// record.
    pub(crate) fn note_stopped_rollout(&mut self, d: &quorum_core::Decision) {
        let stopped = d.is_blocked()
            && d.waiting_for
                .as_deref()
                .is_some_and(|w| w.starts_with("rollout stopped"));
        let rolled_back = self.machines.iter().any(|m| {
            m.in_place
                .as_ref()
                .is_some_and(|ip| ip.phase == InPlacePhase::RolledBack)
        });
        if stopped && !self.rollout_stop.counted {
            self.in_place.stopped_rollouts += 1;
            self.rollout_stop.counted = true;
        }
        self.rollout_stop.counted &= rolled_back;
        self.rollout_stop.stopped = stopped;
    }

    /// The fault: the spec's version fails to start on a machine that an in-place step
    /// will restart on it (a member not yet upgraded, or one restarting and not yet
    /// running it): every start of it there exits at once, until the person replaces it.
    pub(crate) fn bad_binary_fault(&mut self) {
        let v = self.cp.spec.version;
        let candidates: Vec<String> = self
            .machines
            .iter()
            .filter(|m| !m.deleting && self.member_of_machine(&m.name).is_some())
            .filter(|m| {
                let restarting = m.in_place.as_ref().is_some_and(|ip| ip.to == v);
                m.version != v || restarting
            })
            .filter(|m| {
                self.procs
                    .get(&m.name)
                    .is_some_and(|p| p.bad_binary.is_none() && !(p.running && p.binary == Some(v)))
            })
            .map(|m| m.name.clone())
            .collect();
        let Some(n) = self.pick(&candidates) else {
            return;
        };
        if let Some(p) = self.procs.get_mut(&n) {
            p.bad_binary = Some(v);
        }
        self.in_place.bad_binaries += 1;
        self.note(format!(
            "FAULT etcd {v} fails to start on {n}: every start of it exits at once"
        ));
    }

    /// The person, each step of an in-place run: moves the spec to the next version of
    /// the plan (once the rollout converged; during the faults also while a member
    /// drains), and once the faults stop, answers a stopped rollout: finds the broken
    /// binary, replaces it, and retries (the rolled-back record is cleared, as
    /// `quorum upgrade --retry` does).
    pub(crate) fn in_place_operator(&mut self, faults_on: bool) {
        if !self.in_place_strategy() {
            return;
        }
        if let Some(&next) = self.plan.first() {
            let draining = self.machines.iter().any(|m| {
                m.in_place
                    .as_ref()
                    .is_some_and(|ip| ip.phase == InPlacePhase::Draining)
            });
            let mid = faults_on && draining && self.rng.chance(MID_ROLLOUT_CHANGE_PER_MILLE);
            if self.last_converged || mid {
                self.plan.remove(0);
                self.cp.spec.version = next;
                self.last_converged = false;
                self.in_place.version_changes += 1;
                self.note(format!(
                    "OPERATOR moves the spec to etcd {next}{}",
                    if mid { " while a member drains" } else { "" }
                ));
            }
        }
        if faults_on || !self.rollout_stop.stopped {
            return;
        }
        for p in self.procs.values_mut() {
            p.bad_binary = None;
        }
        for m in &mut self.machines {
            if m.in_place
                .as_ref()
                .is_some_and(|ip| ip.phase == InPlacePhase::RolledBack)
            {
                m.in_place = None;
            }
        }
        self.rollout_stop.stopped = false;
        self.last_refusal = None;
        self.in_place.retries += 1;
        self.note("OPERATOR replaces the broken binary and retries the rollout".into());
    }

    /// Whether a fault is active that can hold an in-place step up: an impairment, a
    /// replica or the store not running, the load balancer unreachable, a crash loop,
    /// NOSPACE, or a member of a staying machine down (other than those out of service
    /// in place, whose stop is the step's own).
    fn in_place_quiet(&self) -> bool {
        if self.impairment.is_some() || !self.replicas_settled() || self.keyspace_full() {
            return false;
        }
        if self.ha() && self.store.unavailable_until_ms.is_some() {
            return false;
        }
        if self
            .lb
            .as_ref()
            .is_some_and(|lb| lb.down_until_step.is_some())
        {
            return false;
        }
        !self
            .machines
            .iter()
            .filter(|x| !x.deleting && !x.in_place_out_of_service())
            .any(|x| {
                let member = self.member_of_machine(&x.name).is_some();
                let p = self.procs.get(&x.name);
                member && p.is_none_or(|p| !p.running || p.crash_starts_left > 0)
            })
    }

    /// Every step: at most one member out of service in place, and each in-place step
    /// ends within `IN_PLACE_END_STEPS` steps without a fault.
    pub(crate) fn check_in_place(&mut self) {
        let out: Vec<String> = self
            .machines
            .iter()
            .filter(|m| m.in_place_out_of_service())
            .map(|m| m.name.clone())
            .collect();
        if out.len() > 1 {
            self.violate(format!("{out:?} out of service in place at once"));
        }
        let quiet = self.in_place_quiet();
        let open: Vec<String> = self
            .machines
            .iter()
            .filter(|m| m.in_place_out_of_service() && !m.deleting)
            .map(|m| m.name.clone())
            .collect();
        self.in_place_open.retain(|name, _| open.contains(name));
        for name in open {
            let steps = self.in_place_open.entry(name.clone()).or_insert(0);
            *steps = if quiet { *steps + 1 } else { 0 };
            let steps = *steps;
            self.in_place.end_max_steps = self.in_place.end_max_steps.max(steps);
            if steps > IN_PLACE_END_STEPS {
                self.violate(format!(
                    "{name}'s in-place step has not ended after {steps} steps without a fault"
                ));
            }
        }
    }

    /// The in-place part of convergence: the plan is through, no record is left, and
    /// the cluster version is the spec's.
    pub(crate) fn in_place_converged(&self) -> bool {
        self.plan.is_empty()
            && self.cp.road.is_none()
            && self.machines.iter().all(|m| m.in_place.is_none())
            && self.cluster_version == line_of(self.cp.spec.version)
    }
}

#[cfg(test)]
mod tests;
