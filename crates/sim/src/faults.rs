//! The seeded faults of the members and the load balancer, and their healing.

use super::*;

/// Fault kinds: 0 a process dies, 1 a partition, 2 an endpoint hidden from the
/// controller, 3 a slow learner, 4 a leader change, 5 a machine breaks, 6 the load
/// balancer unreachable, 7 to 12 the repair half's (`repair_fault`), 13 a new binary
/// that fails to start (in-place runs only: `inplace.rs`), 14 a host lost (runs on
/// hosts only: `hosts.rs`).
const FAULT_KINDS: u64 = 15;
const BAD_BINARY: u64 = 13;
const HOST_LOST: u64 = 14;
/// The repair fault that fills the keyspace to its quota (NOSPACE).
const KEYSPACE_FILL: u64 = 11;
/// The kinds that impair no member: a slow learner, a leader change, the load
/// balancer, the keyspace filled.
const NOT_MEMBER_FAULTS: [u64; 4] = [3, 4, 6, 11];

impl World {
    /// At the run's fault rate, one fault of a kind the run allows now, unless a fault
    /// is in force already or a rebuild is pending.
    pub(crate) fn maybe_fault(&mut self) {
        if !self.rng.chance(self.cfg.fault_per_mille) {
            return;
        }
        // One impairment at a time keeps faults within what quorum can tolerate.
        if self.impairment.is_some() {
            return;
        }
        // A majority already lost: the rebuild meets the controller's faults (crashes,
        // stale steps), not a second member fault on the only copy left.
        if self.rebuild_pending() {
            return;
        }
        self.faults += 1;
        let heal_at = self.step + 5 + self.rng.below(40);
        let kinds = self.fault_kinds();
        let kind = kinds[self.rng.below(kinds.len() as u64) as usize];
        match kind {
            BAD_BINARY => self.bad_binary_fault(),
            HOST_LOST => self.host_fault(heal_at),
            7..=12 => self.repair_fault(kind, heal_at),
            6 => self.load_balancer_fault(heal_at),
            0 | 5 => self.process_fault(kind == 5, heal_at),
            1 => self.partition_fault(heal_at),
            2 => self.hide_from_controller_fault(heal_at),
            3 => self.slow_learner_fault(),
            _ => self.leader_change_fault(),
        }
    }

    /// The fault kinds this run may inject now.
    fn fault_kinds(&self) -> Vec<u64> {
        // Kind 6 (the load balancer) only in runs that have one. While NOSPACE is
        // active, no member fault (`Config::faults_anywhere` lifts this).
        let quiet_members = self.keyspace_full() && !self.cfg.faults_anywhere;
        (0..FAULT_KINDS)
            .filter(|k| *k != 6 || self.lb.is_some())
            .filter(|k| *k != BAD_BINARY || self.in_place_strategy())
            .filter(|k| *k != HOST_LOST || self.cfg.hosts)
            .filter(|k| !quiet_members || NOT_MEMBER_FAULTS.contains(k))
            // A rebuilt cluster is one member for a while: NOSPACE there has no quorum
            // margin to defragment into, a case held back everywhere (`faults_anywhere`).
            .filter(|k| *k != KEYSPACE_FILL || self.cfg.scenario != Scenario::QuorumLoss)
            .collect()
    }

    /// The load balancer is unreachable: it keeps serving what it served, and cannot be
    /// brought in step until it heals. Not a member impairment.
    fn load_balancer_fault(&mut self, heal_at: u64) {
        if let Some(lb) = self.lb.as_mut() {
            if lb.down_until_step.is_none() {
                lb.down_until_step = Some(heal_at);
                self.pacing_counts.lb_faults += 1;
                self.note("FAULT the load balancer is unreachable".into());
            }
        }
    }

    /// A member process dies (the controller restarts it), or, `broken`, its machine
    /// breaks for a while (its process cannot start until it heals).
    fn process_fault(&mut self, broken: bool, heal_at: u64) {
        let running: Vec<String> = self
            .procs
            .iter()
            .filter(|(_, p)| p.running)
            .map(|(n, _)| n.clone())
            .collect();
        if let Some(n) = self.pick(&running) {
            if self.safe_to_impair_machine(&n) {
                self.note(format!(
                    "FAULT {n} {}",
                    if broken { "breaks" } else { "process dies" }
                ));
                if let Some(p) = self.procs.get_mut(&n) {
                    p.running = false;
                }
                if broken {
                    self.impairment = Some((Impairment::Down(n), heal_at));
                }
            }
        }
    }

    /// A member is cut off from its peers until `heal_at`.
    fn partition_fault(&mut self, heal_at: u64) {
        let ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
        if let Some(id) = self.pick(&ids) {
            let name = self
                .members
                .iter()
                .find(|m| m.id == id)
                .map(|m| m.name.clone())
                .unwrap_or_default();
            if self.safe_to_impair_member(id) {
                self.note(format!("FAULT {id:x} ({name}) partitioned from its peers"));
                self.impairment = Some((Impairment::PartitionedFromPeers(id), heal_at));
            }
        }
    }

    /// A machine's endpoint is hidden from the controller until `heal_at`.
    fn hide_from_controller_fault(&mut self, heal_at: u64) {
        let names: Vec<String> = self.machines.iter().map(|m| m.name.clone()).collect();
        if let Some(n) = self.pick(&names) {
            self.note(format!("FAULT {n} unreachable from the controller"));
            self.impairment = Some((Impairment::HiddenFromController(n), heal_at));
        }
    }

    /// A learner becomes slow to catch up.
    fn slow_learner_fault(&mut self) {
        let learners: Vec<u64> = self
            .members
            .iter()
            .filter(|m| m.is_learner)
            .map(|m| m.id)
            .collect();
        if let Some(id) = self.pick(&learners) {
            self.note(format!("FAULT learner {id:x} is slow"));
            self.slow_learners.insert(id);
        }
    }

    /// Leadership moves to another connected voter (in a new term), if there is a
    /// leader.
    fn leader_change_fault(&mut self) {
        let candidates: Vec<u64> = self
            .voters()
            .filter(|m| self.member_connected(m) && Some(m.id) != self.leader)
            .map(|m| m.id)
            .collect();
        if let Some(id) = self.pick(&candidates) {
            if self.leader.is_some() {
                self.note(format!("FAULT leadership moves to {id:x}"));
                self.leader = Some(id);
                self.term += 1;
            }
        }
    }

    /// The faults of the repair half: a member's disk lost, a crash loop, a hung
    /// member, foreign data, the keyspace filled to its quota, a member applying far
    /// behind. Each member fault only where the cluster keeps a quorum without the
    /// member, so any quorum loss is still quorum's own doing.
    fn repair_fault(&mut self, kind: u64, heal_at: u64) {
        // Data lost for good while a machine leaves: nothing repairs it (see
        // `Config::faults_anywhere`).
        if matches!(kind, 7 | 10) && self.machine_leaving() && !self.cfg.faults_anywhere {
            return;
        }
        match kind {
            7 => {
                if let Some(n) = self.pick_impairable(false) {
                    self.lose_disk(&n);
                }
            }
            8 => {
                if let Some(n) = self.pick_impairable(true) {
                    let starts = 2 + self.rng.below(5) as u32;
                    self.crash_loop(&n, starts);
                }
            }
            9 => {
                if let Some(n) = self.pick_impairable(true) {
                    self.hang(&n, heal_at);
                }
            }
            10 => {
                if let Some(n) = self.pick_impairable(false) {
                    let member_id = self.rng.next_u64();
                    self.replace_data(&n, member_id);
                }
            }
            11 => self.keyspace_fill_fault(),
            _ => self.lag_fault(heal_at),
        }
    }

    /// A machine is leaving (marked, or being marked by a replica's step in flight).
    fn machine_leaving(&self) -> bool {
        self.machines.iter().any(|x| x.deleting)
            || self
                .replicas
                .iter()
                .any(|r| matches!(r.in_flight, Some(Action::MarkDeleting { .. })))
    }

    /// A machine with a member and data (and, if `running`, a process that answers)
    /// picked by the seed, if the cluster keeps a quorum without it.
    fn pick_impairable(&mut self, running: bool) -> Option<String> {
        let candidates = self.machines_with_member(running);
        self.pick(&candidates)
            .filter(|n| self.safe_to_impair_machine(n))
    }

    /// Machines with a member and data, and if `running`, a process that answers.
    fn machines_with_member(&self, running: bool) -> Vec<String> {
        self.machines
            .iter()
            .filter(|x| self.member_of_machine(&x.name).is_some())
            .filter(|x| {
                self.procs
                    .get(&x.name)
                    .is_some_and(|p| p.has_data && (!running || self.responsive(&x.name)))
            })
            .map(|x| x.name.clone())
            .collect()
    }

    /// The keyspace fills to its quota (NOSPACE), unless full already or, unless
    /// anywhere goes, where the core would not repair it.
    fn keyspace_fill_fault(&mut self) {
        // At most `NOSPACE_MAX_RECURRENCES - 1` bursts a run: an alarm that comes back
        // that often is, to the core, live data filling the quota, which it leaves to a
        // person (and the run's history is small).
        let bursts = self.repair.nospace < u64::from(health::NOSPACE_MAX_RECURRENCES) - 1;
        let may = self.cfg.faults_anywhere || (bursts && self.nospace_repairable());
        if !self.keyspace_full() && may {
            self.fill_keyspace();
        }
    }

    /// A connected member applies far behind its log until `heal_at`.
    fn lag_fault(&mut self, heal_at: u64) {
        let ids: Vec<u64> = self
            .members
            .iter()
            .filter(|m| self.member_connected(m))
            .map(|m| m.id)
            .collect();
        if let Some(id) = self.pick(&ids) {
            self.lag(id, heal_at);
        }
    }

    /// The machine loses its disk: its process is killed, its data and marker removed
    /// (the provider keeps its record of starts). Its member stays.
    pub(crate) fn lose_disk(&mut self, n: &str) {
        if let Some(p) = self.procs.get_mut(n) {
            *p = Proc {
                starts_unix_s: std::mem::take(&mut p.starts_unix_s),
                planned_starts_unix_s: std::mem::take(&mut p.planned_starts_unix_s),
                ..Proc::default()
            };
        }
        self.repair.disk_losses += 1;
        self.note(format!(
            "FAULT {n} loses its disk: its process is killed and its data removed"
        ));
    }

    /// Its process dies, and exits right after each of its next `starts` starts.
    pub(crate) fn crash_loop(&mut self, n: &str, starts: u32) {
        if let Some(p) = self.procs.get_mut(n) {
            p.running = false;
            p.exit_at_ms = None;
            p.crash_starts_left = starts;
        }
        self.repair.crash_loops += 1;
        self.note(format!(
            "FAULT {n} crash-loops: its process dies, and exits right after each of its next {starts} starts"
        ));
    }

    /// It hangs (SIGSTOP) until `heal_at` (a step): running, answering nothing.
    pub(crate) fn hang(&mut self, n: &str, heal_at: u64) {
        self.repair.hangs += 1;
        self.note(format!("FAULT {n} hangs (SIGSTOP): it answers nothing"));
        self.impairment = Some((Impairment::Hung(n.to_string()), heal_at));
    }

    /// It stops, and its data directory is replaced by another cluster's member's
    /// (`member_id`).
    pub(crate) fn replace_data(&mut self, n: &str, member_id: u64) {
        if let Some(p) = self.procs.get_mut(n) {
            p.running = false;
            p.exit_at_ms = None;
            p.has_data = true;
            p.marker = Some(DataMarker {
                cluster_id: repair::FOREIGN_CLUSTER_ID,
                member_id,
            });
        }
        self.repair.foreign_data += 1;
        self.note(format!(
            "FAULT {n} stops and its data directory is replaced by another cluster's"
        ));
    }

    /// A burst of writes: the history reaches the quota, and the next write raises
    /// NOSPACE.
    pub(crate) fn fill_keyspace(&mut self) {
        let room = repair::QUOTA_BYTES.saturating_sub(self.space.in_use_bytes());
        self.space.revision += (room / repair::VALUE_BYTES) as i64;
        self.grow_db_files();
        self.repair.nospace += 1;
        self.note(format!(
            "FAULT a burst of writes fills the keyspace to its quota (revision {})",
            self.space.revision
        ));
    }

    /// Member `id` applies `LAG_ENTRIES` behind its log until `heal_at`.
    pub(crate) fn lag(&mut self, id: u64, heal_at: u64) {
        self.repair.lagging += 1;
        self.note(format!(
            "FAULT {id:x} applies {} entries behind its log",
            repair::LAG_ENTRIES
        ));
        self.impairment = Some((Impairment::Lagging(id), heal_at));
    }

    /// Whether the core can repair a NOSPACE alarm raised now: three voters or more, all
    /// connected, each of a machine, no learner, nothing leaving or waiting to join, no
    /// impairment. Elsewhere no member can be defragmented while the others keep quorum
    /// (one or two voters, one of three down for good), and the repair waits forever:
    /// a finding for the core (see the report; `--nospace-anywhere` shows it).
    pub(crate) fn nospace_repairable(&self) -> bool {
        let voters = self.voters().count();
        let marking = self
            .replicas
            .iter()
            .any(|r| matches!(r.in_flight, Some(Action::MarkDeleting { .. })));
        voters >= 3
            && !marking
            && self.impairment.is_none()
            && self.members.len() == self.machines.len()
            && self.machines.iter().all(|x| !x.deleting)
            && self.members.iter().all(|m| {
                !m.is_learner
                    && self.member_connected(m)
                    && self.machine_of_member(m).is_some()
                    && self
                        .machine_of_member(m)
                        .and_then(|x| self.procs.get(&x.name))
                        .is_some_and(|p| p.crash_starts_left == 0)
            })
    }

    /// NOSPACE is active, or the next write raises it: the keyspace, or a member's
    /// database file (not defragmented since), is at the quota.
    pub(crate) fn keyspace_full(&self) -> bool {
        let in_use = self.space.in_use_bytes();
        self.space.nospace()
            || self
                .procs
                .values()
                .map(|p| p.db_size_bytes.max(in_use))
                .chain([in_use])
                .any(|db| db + repair::VALUE_BYTES >= repair::QUOTA_BYTES)
    }

    pub(crate) fn pick<T: Clone>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            Some(xs[self.rng.below(xs.len() as u64) as usize].clone())
        }
    }

    /// Would the cluster keep a quorum of connected voters without this member?
    pub(crate) fn safe_to_impair_member(&self, id: u64) -> bool {
        let voters = self.voters().count();
        let connected = self
            .voters()
            .filter(|m| m.id != id && self.member_connected(m))
            .count();
        connected >= quorum_size(voters)
    }

    pub(crate) fn safe_to_impair_machine(&self, name: &str) -> bool {
        let url = self
            .machines
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.peer_url());
        match self
            .members
            .iter()
            .find(|m| Some(&m.peer_url) == url.as_ref())
        {
            Some(m) => self.safe_to_impair_member(m.id),
            None => true,
        }
    }

    /// The faults stop: a crash loop ends with them (its next start runs), as an
    /// impairment heals.
    pub(crate) fn end_crash_loops(&mut self) {
        let looping: Vec<String> = self
            .procs
            .iter()
            .filter(|(_, p)| p.crash_starts_left > 0)
            .map(|(n, _)| n.clone())
            .collect();
        for n in looping {
            if let Some(p) = self.procs.get_mut(&n) {
                p.crash_starts_left = 0;
            }
            self.note(format!("HEAL {n}'s crash loop ends"));
        }
    }

    pub(crate) fn heal(&mut self) {
        let step = self.step;
        if let Some(lb) = self.lb.as_mut() {
            if lb.down_until_step.is_some_and(|s| s <= step) {
                lb.down_until_step = None;
                self.note("HEAL the load balancer is reachable".into());
            }
        }
        if let Some((imp, at)) = &self.impairment {
            if *at <= self.step {
                let what = format!("{imp:?}");
                if let Impairment::PartitionedFromPeers(id) = imp {
                    let id = *id;
                    let now = self.now_ms;
                    if let Some(m) = self.members.iter_mut().find(|m| m.id == id) {
                        m.connected_since_ms = now;
                    }
                }
                if let Impairment::Hung(n) = imp {
                    let n = n.clone();
                    self.reconnect_machines(&[n]);
                }
                self.impairment = None;
                self.note(format!("HEAL {what}"));
            }
        }
    }
}
