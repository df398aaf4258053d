//! The repair half in the simulator: the keyspace (revisions, compaction, a quota and
//! its NOSPACE alarm, each member's database file), the maintenance calls (compact,
//! defragment, disarm), data markers, the checks of every start (never `new` after the
//! cluster formed, never on lost or foreign data, never before the restart backoff) and
//! of every remediation (one at a time, within `maxRetry`, `retryPeriod` and
//! `minHealthyPeriod`), the NOSPACE bound, and the operator who raises `maxRetry` once
//! the faults stop.

use super::*;
use quorum_core::classify::EtcdCall;
use quorum_core::upkeep::{self, NOSPACE};

/// The simulated cluster's id, and the one a foreign data directory carries.
pub(crate) const CLUSTER_ID: u64 = 0x5eed_c1a5;
pub(crate) const FOREIGN_CLUSTER_ID: u64 = 0xf0e1_97c1;
/// The log index the scenarios start at: far enough in that a lagging member can
/// trail the leader by more than `health::MAX_APPLY_LAG_ENTRIES`.
pub(crate) const INITIAL_LOG_INDEX: u64 = 100_000;

/// The operator's `quorum defrag` under way (the machines left), and until when its
/// last defragmentation stalls.
#[derive(Debug, Default)]
pub(crate) struct OperatorDefrag {
    pub(crate) plan: Option<Vec<String>>,
    pub(crate) busy_until_ms: u64,
}
/// How far a lagging member's applied index trails its log.
pub(crate) const LAG_ENTRIES: u64 = 2 * health::MAX_APPLY_LAG_ENTRIES;
/// Each client write overwrites a key with a value this large: the old value stays in
/// the database (a revision in the history) until a compaction frees it.
pub(crate) const VALUE_BYTES: u64 = 1 << 10;
/// The live keyspace (the latest value of every key).
pub(crate) const LIVE_BYTES: u64 = 1 << 20;
/// `--quota-backend-bytes`: a write that would grow the receiving member's database
/// file to this raises NOSPACE. About 15,000 writes of history: a run's own writes (one
/// per step) never reach it; a burst (the NOSPACE fault) does.
pub(crate) const QUOTA_BYTES: u64 = 16 << 20;
/// A defragmentation rewrites the file: the member answers nothing and votes nothing
/// for this long, and the call blocks the controller as long.
pub(crate) const DEFRAG_STALL_MS: u64 = 1_000;
/// Once a NOSPACE alarm is active and no other fault is, writes must be accepted again
/// within this many steps: a compaction, a defragmentation of each member (each
/// stalling it `DEFRAG_STALL_MS`, with the elections a leader's stall costs) and the
/// disarm, with room for refusals and backoff. The figure reached is reported
/// (`RepairCounts::nospace_repair_max_steps`).
pub const NOSPACE_REPAIR_STEPS: u64 = 300;

/// The keyspace all members share, and its alarms.
#[derive(Clone, Debug)]
pub(crate) struct Keyspace {
    pub(crate) revision: i64,
    pub(crate) compacted_revision: i64,
    /// Active alarms by member id. etcd keeps the alarm of a member that was removed
    /// (etcd-io/etcd#14379): an alarm outlives its member.
    pub(crate) alarms: BTreeSet<(u64, String)>,
}

impl Default for Keyspace {
    fn default() -> Self {
        Keyspace {
            revision: 1_000,
            compacted_revision: 1_000,
            alarms: BTreeSet::new(),
        }
    }
}

impl Keyspace {
    /// The part of a database file in use: the live keys plus the history not yet
    /// compacted (the same on every member: compaction is replicated).
    pub(crate) fn in_use_bytes(&self) -> u64 {
        let history = (self.revision - self.compacted_revision).max(0) as u64;
        LIVE_BYTES + history * VALUE_BYTES
    }

    pub(crate) fn nospace(&self) -> bool {
        self.alarms.iter().any(|(_, a)| a == NOSPACE)
    }

    pub(crate) fn compacted(&self) -> bool {
        self.compacted_revision >= self.revision
    }

    /// The alarms a member's status reports: its own (as the controller attributes
    /// the alarm list by member id).
    pub(crate) fn alarms_of(&self, member_id: u64) -> Vec<String> {
        self.alarms
            .iter()
            .filter(|(m, _)| *m == member_id)
            .map(|(_, a)| a.clone())
            .collect()
    }
}

/// What the repair half did and met in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairCounts {
    /// Faults injected: a member's disk lost, a crash loop, a hung member, a stopped
    /// member's data replaced by another cluster's, the keyspace filled to its quota, a
    /// member applying far behind.
    pub disk_losses: u64,
    pub crash_loops: u64,
    pub hangs: u64,
    pub foreign_data: u64,
    pub nospace: u64,
    pub lagging: u64,
    /// Machines marked for replacement by remediation, and replacements recorded.
    pub remediations: u64,
    pub replacements: u64,
    /// Controller passes that refused a remediation: the slot's `maxRetry` was spent, or
    /// the removal could lose quorum.
    pub max_retry_refusals: u64,
    pub quorum_refusals: u64,
    /// Times the operator raised `maxRetry` after the faults stopped.
    pub max_retry_raised: u64,
    /// Crash loops the controller's tracker reported (one event each).
    pub crash_loop_events: u64,
    /// Maintenance performed: markers written, compactions, defragmentations, alarms
    /// disarmed.
    pub markers: u64,
    pub compactions: u64,
    pub defrags: u64,
    pub disarms: u64,
    /// Client writes refused (NOSPACE).
    pub writes_refused: u64,
    /// NOSPACE episodes that ended with no other fault active, and the longest of them
    /// (steps from the cluster being whole to writes accepted).
    pub nospace_repaired: u64,
    pub nospace_repair_max_steps: u64,
    /// Starts by a deposed leader's one in-flight step that came before the backoff
    /// (the step was checked before its pause; not a loop).
    pub stale_early_starts: u64,
    /// NOSPACE repaired by the operator once the faults stopped, after the core refused
    /// an alarm that kept coming back.
    pub operator_nospace: u64,
}

impl RepairCounts {
    pub fn add(&mut self, o: &RepairCounts) {
        self.disk_losses += o.disk_losses;
        self.crash_loops += o.crash_loops;
        self.hangs += o.hangs;
        self.foreign_data += o.foreign_data;
        self.nospace += o.nospace;
        self.lagging += o.lagging;
        self.remediations += o.remediations;
        self.replacements += o.replacements;
        self.max_retry_refusals += o.max_retry_refusals;
        self.quorum_refusals += o.quorum_refusals;
        self.max_retry_raised += o.max_retry_raised;
        self.crash_loop_events += o.crash_loop_events;
        self.markers += o.markers;
        self.compactions += o.compactions;
        self.defrags += o.defrags;
        self.disarms += o.disarms;
        self.writes_refused += o.writes_refused;
        self.nospace_repaired += o.nospace_repaired;
        self.nospace_repair_max_steps = self
            .nospace_repair_max_steps
            .max(o.nospace_repair_max_steps);
        self.stale_early_starts += o.stale_early_starts;
        self.operator_nospace += o.operator_nospace;
    }
}

impl std::fmt::Display for RepairCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "faults: {} disks lost, {} crash loops, {} hung members, {} foreign data directories, {} keyspaces filled (NOSPACE), {} lagging members; {} remediations ({} replacements recorded), {} passes refused for maxRetry (raised {} times by the operator once the faults stopped), {} refused as they could lose quorum; {} crash-loop events; {} markers written, {} compactions, {} defragmentations, {} alarms disarmed; {} writes refused, {} NOSPACE repairs, the longest {} steps ({} ms) from the cluster whole to writes accepted, {} repaired by the operator after the core refused a recurring alarm; {} stale early starts",
            self.disk_losses,
            self.crash_loops,
            self.hangs,
            self.foreign_data,
            self.nospace,
            self.lagging,
            self.remediations,
            self.replacements,
            self.max_retry_refusals,
            self.max_retry_raised,
            self.quorum_refusals,
            self.crash_loop_events,
            self.markers,
            self.compactions,
            self.defrags,
            self.disarms,
            self.writes_refused,
            self.nospace_repaired,
            self.nospace_repair_max_steps,
            self.nospace_repair_max_steps * STEP_MS,
            self.operator_nospace,
            self.stale_early_starts
        )
    }
}

impl World {
    /// A client write reaches the leader: refused while NOSPACE is active, and raises
    /// it when the leader's database file would reach the quota. True if accepted.
    pub(crate) fn client_write(&mut self, leader: u64) -> bool {
        if self.space.nospace() {
            self.repair.writes_refused += 1;
            return false;
        }
        let in_use = self.space.in_use_bytes();
        let db = self
            .members
            .iter()
            .find(|m| m.id == leader)
            .and_then(|m| self.machine_of_member(m))
            .and_then(|x| self.procs.get(&x.name))
            .map_or(in_use, |p| p.db_size_bytes.max(in_use));
        if db + VALUE_BYTES >= QUOTA_BYTES {
            self.space.alarms.insert((leader, NOSPACE.to_string()));
            self.repair.writes_refused += 1;
            self.note(format!(
                "NOSPACE raised by {leader:x}: its database file is {db} bytes of a {QUOTA_BYTES} quota"
            ));
            return false;
        }
        self.space.revision += 1;
        true
    }

    /// Every connected member applies the writes: its file grows to the bytes in use.
    pub(crate) fn grow_db_files(&mut self) {
        let in_use = self.space.in_use_bytes();
        let connected: Vec<String> = self
            .members
            .iter()
            .filter(|m| self.member_connected(m))
            .filter_map(|m| self.machine_of_member(m).map(|x| x.name.clone()))
            .collect();
        for name in connected {
            if let Some(p) = self.procs.get_mut(&name) {
                p.db_size_bytes = p.db_size_bytes.max(in_use);
            }
        }
    }

    /// A start, checked against the ground truth before it happens.
    pub(crate) fn check_start(
        &mut self,
        name: &str,
        state: ClusterState,
        member: Option<SimMember>,
        stale: bool,
    ) {
        // Every scenario starts from a cluster that has formed: `new` now would found
        // a second cluster under the same name.
        if state == ClusterState::New && !self.new_cluster_allowed() {
            self.violate(format!(
                "{name} started with ClusterState::New after the cluster formed"
            ));
        }
        let p = self.procs.get(name).cloned().unwrap_or_default();
        if let Some(m) = &member {
            if !m.name.is_empty() && !p.has_data {
                self.violate(format!(
                    "started a member on lost data: {name} (member {:x} ran before, its data directory is empty)",
                    m.id
                ));
            }
            let mine = DataMarker {
                cluster_id: CLUSTER_ID,
                member_id: m.id,
            };
            if let Some(marker) = p.marker.filter(|mk| *mk != mine) {
                self.violate(format!(
                    "started a member on foreign data: {name} (member {:x}) holds the data of member {:x} of cluster {:x}",
                    m.id, marker.member_id, marker.cluster_id
                ));
            }
        }
        let now_s = self.now_unix_s();
        // The first start in an in-place phase, on that phase's binary, is not a crash
        // loop's next attempt: no backoff before it (the core's rule).
        let first_in_phase = p
            .phase_at_ms
            .is_some_and(|at| p.last_start_ms.is_none_or(|last| last < at));
        // Planned starts (after a stop quorum asked for) are no crash: the backoff
        // counts the others, as the core does.
        let crashes = health::crash_starts(&p.starts_unix_s, &p.planned_starts_unix_s);
        if let Some(last) = crashes.iter().max().copied().filter(|_| !first_in_phase) {
            let recent = health::recent_starts(&crashes, now_s);
            let backoff_s = health::restart_backoff_s(recent);
            if now_s - last < backoff_s {
                if stale {
                    self.repair.stale_early_starts += 1;
                } else {
                    self.violate(format!(
                        "{name} started {}s after its last start; with {recent} starts in the window its backoff is {backoff_s}s",
                        now_s - last
                    ));
                }
            }
        }
    }

    /// A remediation about to be recorded, checked: one at a time (nothing else leaving,
    /// no learner pending), and within the spec's limits against the slot's last record.
    pub(crate) fn check_remediation(&mut self, machine: &str, rec: &quorum_core::Remediation) {
        self.repair.remediations += 1;
        let spec = self.cp.spec.remediation;
        self.note(format!(
            "  remediation of {machine}: attempt {} ({})",
            rec.attempt, rec.reason
        ));
        if let Some(other) = self
            .machines
            .iter()
            .find(|m| m.deleting && m.name != machine)
        {
            let other = other.name.clone();
            self.violate(format!(
                "{machine} remediated while {other} is still leaving"
            ));
        }
        let learner = self
            .members
            .iter()
            .any(|m| m.is_learner && self.machine_of_member(m).is_some_and(|x| x.name != machine));
        if learner {
            self.violate(format!(
                "{machine} remediated while another machine's learner is pending"
            ));
        }
        if rec.attempt > spec.max_retry + 1 {
            self.violate(format!(
                "{machine} remediated as attempt {} past maxRetry {}",
                rec.attempt, spec.max_retry
            ));
        }
        let prev = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .and_then(|m| m.remediation.clone())
            .filter(|r| r.machine != machine);
        let retry_s = spec.retry_period.as_secs() as i64;
        let healthy_s = spec.min_healthy_period.as_secs() as i64;
        match prev {
            Some(p) if rec.at_unix_s - p.at_unix_s < healthy_s => {
                if rec.attempt != p.attempt + 1 {
                    self.violate(format!(
                        "{machine} remediated as attempt {} after attempt {} {}s ago",
                        rec.attempt,
                        p.attempt,
                        rec.at_unix_s - p.at_unix_s
                    ));
                }
                if rec.at_unix_s - p.at_unix_s < retry_s {
                    self.violate(format!(
                        "{machine} remediated {}s after its slot's last remediation (retryPeriod {retry_s}s)",
                        rec.at_unix_s - p.at_unix_s
                    ));
                }
            }
            _ if rec.attempt != 1 => {
                self.violate(format!(
                    "{machine} remediated as attempt {} with no recent remediation of its slot",
                    rec.attempt
                ));
            }
            _ => {}
        }
    }

    /// The marker written into a machine's data directory must name its own member of
    /// this cluster (a deposed leader's stale write may find the member removed since:
    /// the machine then leaves, its data with it).
    pub(crate) fn write_marker(
        &mut self,
        machine: &str,
        marker: DataMarker,
        stale: bool,
    ) -> Answer {
        let url = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .map(Machine::peer_url);
        let member = self
            .members
            .iter()
            .find(|m| Some(&m.peer_url) == url.as_ref())
            .map(|m| m.id);
        let mine = member.map(|id| DataMarker {
            cluster_id: CLUSTER_ID,
            member_id: id,
        });
        if mine != Some(marker) && !(stale && mine.is_none()) {
            self.violate(format!(
                "{machine}'s data marked as member {:x} of cluster {:x}, not its own ({mine:?})",
                marker.member_id, marker.cluster_id
            ));
        }
        match self.procs.get_mut(machine) {
            Some(p) if p.has_data => {
                p.marker = Some(marker);
                self.repair.markers += 1;
                Answer::Done
            }
            _ => Answer::Failed("no data directory"),
        }
    }

    /// Compaction is a proposal: it needs a leader.
    pub(crate) fn compact(&mut self, revision: i64) -> Answer {
        if self.leader.is_none() {
            return etcd_answer(EtcdCall::Kv, Err(quorum_core::classify::NO_LEADER));
        }
        if revision > self.space.revision {
            return Answer::Failed("mvcc: required revision is a future revision");
        }
        if revision > self.space.compacted_revision {
            self.space.compacted_revision = revision;
            self.repair.compactions += 1;
        }
        // An earlier compaction to it or past it: "required revision has been
        // compacted", done.
        Answer::Done
    }

    /// The member rewrites its file (to the bytes in use) and stalls meanwhile. Only a
    /// member that answers can be asked.
    pub(crate) fn defragment(&mut self, machine: &str) -> Answer {
        let hidden = matches!(&self.impairment, Some((Impairment::HiddenFromController(n), _)) if n == machine);
        if hidden || !self.responsive(machine) {
            return Answer::Failed(quorum_core::classify::CLIENT_DEADLINE.message);
        }
        let in_use = self.space.in_use_bytes();
        let until = self.now_ms + DEFRAG_STALL_MS;
        if let Some(p) = self.procs.get_mut(machine) {
            p.db_size_bytes = in_use;
            p.stalled_until_ms = Some(until);
        }
        self.repair.defrags += 1;
        Answer::Done
    }

    /// Disarming is a proposal too.
    pub(crate) fn disarm(&mut self, member_id: u64, alarm: &str) -> Answer {
        if self.leader.is_none() {
            return etcd_answer(EtcdCall::Kv, Err(quorum_core::classify::NO_LEADER));
        }
        if self.space.alarms.remove(&(member_id, alarm.to_string())) {
            self.repair.disarms += 1;
        }
        Answer::Done
    }

    /// What the leading controller refused, counted by kind and kept for the operator.
    pub(crate) fn note_refusal(&mut self, d: &quorum_core::Decision) {
        // What the controller waits for, traced when it changes.
        if d.waiting_for != self.last_wait {
            self.last_wait.clone_from(&d.waiting_for);
            if let Some(w) = &d.waiting_for {
                let how = if d.is_blocked() { "refuses" } else { "waits" };
                self.note(format!("{how}: {w}"));
            }
        }
        if !d.is_blocked() {
            self.last_refusal = None;
            return;
        }
        let why = d.waiting_for.clone().unwrap_or_default();
        if why.contains("remediation.maxRetry") {
            self.repair.max_retry_refusals += 1;
        } else if why.starts_with("not remediating") {
            self.repair.quorum_refusals += 1;
        }
        self.last_refusal = Some(why);
    }

    /// Once the faults stop, a person reads a refusal for `maxRetry` and raises it, as
    /// the refusal tells them to.
    pub(crate) fn operator_step(&mut self) {
        if self.operator.plan.is_some() {
            self.operator_nospace_step();
            return;
        }
        let recurring = self
            .last_refusal
            .as_deref()
            .is_some_and(|w| w.contains("NOSPACE came back"));
        if recurring {
            // The refusal says only a person can free the space: they compact, run
            // `quorum defrag` (member by member, each checked) and disarm by hand.
            let plan = upkeep::defrag_plan(&self.cp, &self.machines, &self.observe());
            self.note(format!(
                "OPERATOR compacts, defragments {plan:?} one at a time, then disarms"
            ));
            let revision = self.space.revision;
            self.compact(revision);
            self.operator.plan = Some(plan);
            self.last_refusal = None;
            return;
        }
        let spent = self
            .last_refusal
            .as_deref()
            .is_some_and(|w| w.contains("remediation.maxRetry"));
        if spent {
            self.cp.spec.remediation.max_retry += 1;
            self.repair.max_retry_raised += 1;
            self.last_refusal = None;
            self.note(format!(
                "OPERATOR raises spec.remediation.maxRetry to {}",
                self.cp.spec.remediation.max_retry
            ));
        }
    }

    /// The operator's `quorum defrag`, one member a step once the last one's stall is
    /// over (each only when `upkeep::defrag_check` says the others keep quorum; one that
    /// does not answer is skipped), then `etcdctl alarm disarm`.
    fn operator_nospace_step(&mut self) {
        if self.now_ms < self.operator.busy_until_ms {
            return;
        }
        let Some(mut plan) = self.operator.plan.take() else {
            return;
        };
        if plan.is_empty() {
            if self.leader.is_none() {
                self.operator.plan = Some(plan);
                return;
            }
            let alarms = std::mem::take(&mut self.space.alarms);
            self.repair.operator_nospace += 1;
            self.note(format!("OPERATOR disarms {} alarms", alarms.len()));
            return;
        }
        let machine = plan.remove(0);
        let observed = self.observe();
        match upkeep::defrag_check(&self.cp, &self.machines, &observed, &machine) {
            Ok(()) => {
                if matches!(self.defragment(&machine), Answer::Done) {
                    self.operator.busy_until_ms = self.now_ms + DEFRAG_STALL_MS;
                    self.note(format!("OPERATOR defragments {machine}"));
                }
            }
            Err(why) if why.contains("does not answer") || why.contains("no machine") => {
                self.note(format!("OPERATOR skips {machine}: {why}"));
            }
            // Quorum at stake: try it again later.
            Err(_) => plan.push(machine),
        }
        self.operator.plan = Some(plan);
    }

    /// Whether some fault other than NOSPACE is active: an impairment, a member of a
    /// staying machine not running (died, broken, its disk lost, its data foreign, in a
    /// crash loop), a replica not running, or the store not serving.
    pub(crate) fn other_fault_active(&self) -> bool {
        if self.impairment.is_some() || !self.replicas_settled() {
            return true;
        }
        if self.ha() && self.store.unavailable_until_ms.is_some() {
            return true;
        }
        self.machines.iter().filter(|x| !x.deleting).any(|x| {
            let member = self.member_of_machine(&x.name).is_some();
            let p = self.procs.get(&x.name);
            member && p.is_none_or(|p| !p.running || p.crash_starts_left > 0)
        })
    }

    /// NOSPACE: once no other fault is active, writes are accepted again within
    /// `NOSPACE_REPAIR_STEPS`.
    pub(crate) fn check_nospace_bound(&mut self) {
        if !self.space.nospace() {
            if let Some(since) = self.nospace_whole_since_step.take() {
                self.repair.nospace_repaired += 1;
                self.repair.nospace_repair_max_steps =
                    self.repair.nospace_repair_max_steps.max(self.step - since);
            }
            return;
        }
        // A recurring alarm is left to a person (the core refuses it): the bound is for
        // quorum's own repair.
        let for_a_person = self.operator.plan.is_some()
            || self
                .last_refusal
                .as_deref()
                .is_some_and(|w| w.contains("NOSPACE came back"));
        if self.other_fault_active() || for_a_person {
            self.nospace_whole_since_step = None;
            return;
        }
        let since = *self.nospace_whole_since_step.get_or_insert(self.step);
        if self.step - since > NOSPACE_REPAIR_STEPS {
            self.violate(format!(
                "writes refused (NOSPACE) for {} steps with no other fault active",
                self.step - since
            ));
        }
    }
}
