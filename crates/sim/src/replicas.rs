//! Controller replicas and the leader lease of the simulated store (two replicas only;
//! one replica leads without a lease).

use super::*;

/// What happened to the controller replicas' leadership in a run (all zero with one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Leader keys taken after the first (by either replica).
    pub takeovers: u64,
    /// Replicas paused (SIGSTOP), and of those, for longer than the TTL.
    pub pauses: u64,
    pub pauses_past_ttl: u64,
    /// Replicas crashed (restarting as standbys).
    pub crashes: u64,
    /// Side effects on etcd or machines by a replica without a valid lease (the
    /// deposed leader's one in-flight step).
    pub stale_side_effects: u64,
    /// Store writes (the no-op before a step included) refused by the token fence.
    pub fenced_writes: u64,
    /// Leases lost right after a member removal succeeded.
    pub leases_lost_after_removal: u64,
    /// Leaders that stepped down (fenced, or the store said the lease is gone).
    pub step_downs: u64,
    /// Store outages (no member serves: an election, or a majority gone).
    pub store_outages: u64,
    /// Store members killed or paused.
    pub store_endpoint_faults: u64,
    /// Replicas that lost one attempt on a paused store member.
    pub store_stalls: u64,
    /// Controller passes of a leader that acted on nothing for want of its store.
    pub store_holds: u64,
    /// The longest time from the store serving again to its leader acting.
    pub resume_after_outage_max_ms: u64,
    /// Sharded: shards handed over by a holder they were no longer assigned to.
    pub handovers: u64,
}

impl LeaseCounts {
    pub fn add(&mut self, o: &LeaseCounts) {
        self.takeovers += o.takeovers;
        self.pauses += o.pauses;
        self.pauses_past_ttl += o.pauses_past_ttl;
        self.crashes += o.crashes;
        self.stale_side_effects += o.stale_side_effects;
        self.fenced_writes += o.fenced_writes;
        self.leases_lost_after_removal += o.leases_lost_after_removal;
        self.step_downs += o.step_downs;
        self.store_outages += o.store_outages;
        self.store_endpoint_faults += o.store_endpoint_faults;
        self.store_stalls += o.store_stalls;
        self.store_holds += o.store_holds;
        self.handovers += o.handovers;
        self.resume_after_outage_max_ms = self
            .resume_after_outage_max_ms
            .max(o.resume_after_outage_max_ms);
    }
}

impl std::fmt::Display for LeaseCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} takeovers, {} pauses ({} past the TTL), {} replica crashes, {} stale side effects, {} fenced writes, {} leases lost after a removal, {} step-downs, {} shard handovers; store: {} outages, {} members killed or paused ({} attempts lost on a paused one), {} passes held, a leader acting at most {} ms after the store served again",
            self.takeovers,
            self.pauses,
            self.pauses_past_ttl,
            self.crashes,
            self.stale_side_effects,
            self.fenced_writes,
            self.leases_lost_after_removal,
            self.step_downs,
            self.handovers,
            self.store_outages,
            self.store_endpoint_faults,
            self.store_stalls,
            self.store_holds,
            self.resume_after_outage_max_ms
        )
    }
}

/// A replica's leadership term, as the replica believes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Term {
    pub(crate) token: u64,
    /// Its own lease deadline: send time of its last answered renewal + TTL. `None`: no
    /// lease (the single controller of the embedded store).
    pub(crate) deadline_ms: Option<u64>,
    /// A renewal was refused: the lease is gone, whatever the deadline says.
    pub(crate) lost: bool,
    pub(crate) last_renewal_ms: u64,
    /// It performed its one side effect after its lease had ended.
    pub(crate) stale_done: bool,
}

/// One controller replica. Everything here but the token it holds is memory, lost on a
/// crash or a step-down.
#[derive(Clone, Debug, Default)]
pub(crate) struct Replica {
    /// Leading (by its own belief), or standing by.
    pub(crate) term: Option<Term>,
    /// What its passes remember (`pass::Memory`: the health memory, drain clocks and
    /// retry due times), as the controller keeps it: a replica that takes over starts
    /// with an empty one.
    pub(crate) memory: pass::Memory,
    /// Blocked in a defragmentation call until then.
    pub(crate) busy_until_ms: u64,
    /// Paused (SIGSTOP) until this step: no renewals, no polls, no actions.
    pub(crate) paused_until_step: Option<u64>,
    /// The side effect it was paused between checking and performing.
    pub(crate) in_flight: Option<Action>,
    /// Crashed: restarts as a standby at this step.
    pub(crate) down_until_step: Option<u64>,
    /// A standby's next look at the leader key.
    pub(crate) next_poll_ms: u64,
    /// How it reaches the store (two replicas only).
    pub(crate) store: crate::store::StoreView,
}

/// The leader key of the simulated store (absent once its lease expires or is revoked).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaderKey {
    pub(crate) holder: usize,
    pub(crate) token: u64,
    /// The lease's end by the store's clock.
    pub(crate) expires_at_ms: u64,
}

impl World {
    pub(crate) fn ha(&self) -> bool {
        self.replicas.len() > 1
    }

    /// A prefix naming the replica in trace lines (none with a single controller, whose
    /// trace is as it always was).
    pub(crate) fn tag(&self, i: usize) -> String {
        if self.ha() {
            format!("r{i}: ")
        } else {
            String::new()
        }
    }

    pub(crate) fn faults_on(&self) -> bool {
        self.step <= self.cfg.fault_steps
    }

    pub(crate) fn ttl_steps(&self) -> u64 {
        self.cfg.lease_ttl_ms.div_ceil(STEP_MS)
    }

    /// Neither paused nor down.
    pub(crate) fn runs(&self, i: usize) -> bool {
        let r = &self.replicas[i];
        r.paused_until_step.is_none() && r.down_until_step.is_none()
    }

    pub(crate) fn replicas_settled(&self) -> bool {
        (0..self.replicas.len()).all(|i| self.runs(i))
    }

    /// What is left of replica `i`'s lease by its own clock (`None`: no lease).
    pub(crate) fn lease_left_ms(&self, i: usize) -> Option<i64> {
        match self.replicas[i].term {
            None => Some(-1),
            Some(t) if t.lost => Some(-1),
            Some(t) => t.deadline_ms.map(|d| d as i64 - self.now_ms as i64),
        }
    }

    /// Does the store's leader key hold replica `i`'s token, unexpired? (Always, for the
    /// single controller: the embedded store has no fence.)
    pub(crate) fn holds_lease(&self, i: usize) -> bool {
        if !self.ha() {
            return true;
        }
        let Some(t) = self.replicas[i].term else {
            return false;
        };
        self.leader_key
            .is_some_and(|k| k.token == t.token && self.now_ms < k.expires_at_ms)
    }

    /// The leader's check before a side effect: enough of its lease left by its own clock,
    /// then the fenced no-op write. Failing either, it steps down.
    pub(crate) fn ensure_leading(&mut self, i: usize) -> bool {
        let margin = margin_ms(self.cfg.lease_ttl_ms);
        match self.standing_of(i, margin) {
            Standing::Act => {}
            // Less than the margin left: no step until a renewal is answered.
            Standing::Hold => return false,
            Standing::Lost => {
                self.step_down(i, "the store says its lease is gone");
                return false;
            }
        }
        if !self.holds_lease(i) {
            self.lease.fenced_writes += 1;
            self.step_down(i, "its fenced no-op write was refused");
            return false;
        }
        true
    }

    /// The leader stops leading: its memory goes, and its lease is released if the key
    /// still holds its token.
    pub(crate) fn step_down(&mut self, i: usize, why: &str) {
        let Some(t) = self.replicas[i].term.take() else {
            return;
        };
        if self
            .leader_key
            .is_some_and(|k| k.token == t.token && self.now_ms < k.expires_at_ms)
        {
            self.violate(format!(
                "r{i} steps down ({why}) while the store still holds its lease"
            ));
        }
        self.replicas[i].memory = pass::Memory::default();
        self.replicas[i].next_poll_ms = self.now_ms + standby_poll_ms(self.cfg.lease_ttl_ms);
        self.lease.step_downs += 1;
        if self.leader_key.is_some_and(|k| k.token == t.token) {
            self.leader_key = None;
        }
        self.note(format!("r{i} steps down (token {}): {why}", t.token));
    }

    /// Replica `i` takes the free leader key: a new token, fresh memory.
    pub(crate) fn take_lead(&mut self, i: usize) {
        self.last_token += 1;
        let (token, now, ttl_ms) = (self.last_token, self.now_ms, self.cfg.lease_ttl_ms);
        self.leader_key = Some(LeaderKey {
            holder: i,
            token,
            expires_at_ms: now + ttl_ms,
        });
        let r = &mut self.replicas[i];
        r.memory = pass::Memory::default();
        r.term = Some(Term {
            token,
            deadline_ms: Some(now + ttl_ms),
            lost: false,
            last_renewal_ms: now,
            stale_done: false,
        });
        if token > 1 {
            self.lease.takeovers += 1;
        }
        self.note(format!("r{i} takes the lead (token {token})"));
    }

    /// The store's side of time: a lease not renewed in time ends, and its key with it.
    pub(crate) fn expire_leader_key(&mut self) {
        if let Some(k) = self.leader_key {
            if k.expires_at_ms <= self.now_ms {
                self.leader_key = None;
                self.note(format!(
                    "the lease of r{} (token {}) expired in the store",
                    k.holder, k.token
                ));
            }
        }
    }

    /// Each replica's tick (two replicas only): restarts, resumptions (with the in-flight
    /// step), a leader's renewal, a standby's poll.
    pub(crate) fn tick_replicas(&mut self) {
        self.tick_store();
        self.expire_leader_key();
        for i in 0..self.replicas.len() {
            self.restart_if_due(i);
            // A resumed replica's renewal is still on its way this step.
            if self.resume_if_due(i) || !self.runs(i) {
                continue;
            }
            if self.sharded() {
                self.register(i);
                if self.replicas[i].term.is_some() && !self.assigned(i) {
                    self.hand_over(i);
                    continue;
                }
            }
            if self.replicas[i].term.is_some() {
                self.renew_if_due(i);
            } else {
                self.campaign_if_due(i);
            }
        }
    }

    // -- a sharded fleet

    pub(crate) fn sharded(&self) -> bool {
        self.ha() && self.cfg.shards > 1
    }

    /// Every replica registered but the last, which joins during the run; the shard
    /// goes to its owner among them.
    pub(crate) fn start_sharded(&mut self, n: usize) {
        self.shard = quorum_core::shards::shard_of(&self.cp.name, self.cfg.shards);
        let until = self.now_ms + self.cfg.lease_ttl_ms;
        self.registered_until_ms = vec![until; n];
        self.registered_until_ms[n - 1] = 0;
        let join_steps = 1 + self.rng.below(self.cfg.fault_steps.max(1));
        self.replicas[n - 1].down_until_step = Some(join_steps);
        self.note(format!(
            "sharded: shard {} of {}; r{} joins at step {join_steps}",
            self.shard,
            self.cfg.shards,
            n - 1
        ));
        let owner = (0..n).find(|i| self.assigned(*i)).unwrap_or(0);
        self.take_lead(owner);
    }

    /// A running replica whose store serves renews its registration (the real one
    /// renews every TTL/3; every step here, so it lapses exactly a TTL after the replica
    /// stopped renewing it).
    pub(crate) fn register(&mut self, i: usize) {
        if self.store_serves(i) {
            let until = self.now_ms + self.cfg.lease_ttl_ms;
            if self.registered_until_ms[i] < self.now_ms {
                self.note(format!("r{i} registers"));
            }
            self.registered_until_ms[i] = until;
        }
    }

    /// Whether the shard is assigned to replica `i`, by the registrations it reads now
    /// (itself counted as live, as the real replica does).
    pub(crate) fn assigned(&self, i: usize) -> bool {
        let names: Vec<String> = (0..self.replicas.len()).map(|j| format!("r{j}")).collect();
        let live: Vec<&str> = (0..self.replicas.len())
            .filter(|j| *j == i || self.registered_until_ms[*j] > self.now_ms)
            .map(|j| names[j].as_str())
            .collect();
        quorum_core::shards::owner_of(self.shard, &live) == Some(names[i].as_str())
    }

    /// The holder gives the shard up: its passes are over (between steps here), its
    /// memory goes, its lease is revoked so the assigned replica takes it at its next
    /// look.
    pub(crate) fn hand_over(&mut self, i: usize) {
        let Some(t) = self.replicas[i].term.take() else {
            return;
        };
        self.replicas[i].memory = pass::Memory::default();
        self.replicas[i].next_poll_ms = self.now_ms + standby_poll_ms(self.cfg.lease_ttl_ms);
        if self.leader_key.is_some_and(|k| k.token == t.token) {
            self.leader_key = None;
        }
        self.lease.handovers += 1;
        self.note(format!(
            "r{i} hands the shard over (token {}): it is assigned elsewhere now",
            t.token
        ));
    }

    pub(crate) fn restart_if_due(&mut self, i: usize) {
        if self.replicas[i]
            .down_until_step
            .is_some_and(|s| s <= self.step)
        {
            self.replicas[i].down_until_step = None;
            self.replicas[i].next_poll_ms = self.now_ms;
            self.replicas[i].store.running_since_ms = self.now_ms;
            self.note(format!("r{i} restarts as a standby"));
        }
    }

    /// Ends a pause that is over; the replica then performs the step it was paused in
    /// front of, without checking again. True if it resumed.
    pub(crate) fn resume_if_due(&mut self, i: usize) -> bool {
        if self.replicas[i]
            .paused_until_step
            .is_none_or(|s| s > self.step)
        {
            return false;
        }
        self.replicas[i].paused_until_step = None;
        self.replicas[i].store.running_since_ms = self.now_ms;
        self.note(format!("r{i} resumes"));
        if let Some(a) = self.replicas[i].in_flight.take() {
            if a.writes_records_only() && !self.store_serves(i) {
                self.note(format!(
                    "r{i}: its in-flight '{a}' fails: the store serves nothing"
                ));
                return true;
            }
            match self.perform_as(i, &a, true) {
                Answer::Fenced => {
                    self.lease.fenced_writes += 1;
                    self.step_down(i, &format!("its in-flight write for '{a}' was fenced"));
                }
                Answer::Done => self.note(format!("r{i}: its in-flight '{a}' is done")),
                Answer::Refused(why) | Answer::Failed(why) => {
                    self.note(format!("r{i}: its in-flight '{a}' failed: {why}"))
                }
            }
        }
        true
    }

    /// Every TTL/3 the leader renews: the store's expiry and its own deadline move to
    /// the same moment. A renewal of a lease the store no longer has is refused.
    pub(crate) fn renew_if_due(&mut self, i: usize) {
        let ttl_ms = self.cfg.lease_ttl_ms;
        let now = self.now_ms;
        let Some(t) = self.replicas[i].term else {
            return;
        };
        // Not answered: tried again every step (at once, as the real keeper does).
        if t.lost || now < t.last_renewal_ms + renew_every_ms(ttl_ms) || !self.store_serves(i) {
            return;
        }
        match self.leader_key.as_mut() {
            Some(k) if k.token == t.token => {
                k.expires_at_ms = now + ttl_ms;
                if let Some(t) = self.replicas[i].term.as_mut() {
                    t.deadline_ms = Some(now + ttl_ms);
                    t.last_renewal_ms = now;
                }
            }
            _ => {
                if let Some(t) = self.replicas[i].term.as_mut() {
                    t.lost = true;
                }
                self.note(format!(
                    "r{i}'s lease renewal is refused: the lease is gone"
                ));
            }
        }
    }

    /// A standby looks at the leader key every poll interval and takes it if free.
    pub(crate) fn campaign_if_due(&mut self, i: usize) {
        if self.now_ms < self.replicas[i].next_poll_ms {
            return;
        }
        self.replicas[i].next_poll_ms = self.now_ms + standby_poll_ms(self.cfg.lease_ttl_ms);
        // Sharded, a replica campaigns only for a shard assigned to it.
        if self.sharded() && !self.assigned(i) {
            return;
        }
        if self.leader_key.is_none() && self.store_serves(i) {
            self.take_lead(i);
        }
    }

    /// SIGSTOP for `steps` steps; memory kept.
    pub(crate) fn pause(&mut self, i: usize, steps: u64, what: &str) {
        self.lease.pauses += 1;
        if steps * STEP_MS > self.cfg.lease_ttl_ms {
            self.lease.pauses_past_ttl += 1;
        }
        self.replicas[i].paused_until_step = Some(self.step + steps);
        self.note(format!(
            "FAULT r{i} paused for {steps} steps ({} ms){what}",
            steps * STEP_MS
        ));
    }

    /// Which steps the in-flight pause may hold up. Without etcd's strict reconfiguration
    /// check, not a removal: a removal decided while every voter was healthy and performed
    /// after a member failed, during the pause, loses quorum, and only etcd's check can
    /// refuse it (the model check's deposed controller runs with that check for the same
    /// reason; `a_stale_removal_is_stopped_only_by_etcds_strict_check` shows both sides).
    /// The margin and the fence bound a deposed leader's staleness, but not a pause
    /// between its check and its side effect.
    ///
    /// Never a defragmentation or a start, for the same reason with nothing in etcd to
    /// stop them (found by this simulator, reported for the core and the provider): a
    /// defragmentation decided while the others served, performed after one of them
    /// failed, stalls the cluster below quorum for its length; a start decided before
    /// the machine's disk was lost or its data replaced starts it on lost or foreign data
    /// (the decision checked the data, the provider does not check it again).
    ///
    /// Nor, unless `Config::faults_anywhere`, the stop of a machine that has a member (an
    /// in-place step's), with nothing in etcd or the provider to stop it either: decided
    /// while the others served, performed after one of them failed, it takes quorum away
    /// (3 members); decided during a drain, performed after the step ended or began
    /// again, it stops a member that serves (found by this simulator and the model
    /// check, reported). A process kill has no fence: whatever the controller checks
    /// before it, the pause can come after the check.
    pub(crate) fn may_pause_in_flight(&self, a: &Action) -> bool {
        match a {
            Action::Defragment { .. } | Action::StartMachine { .. } => false,
            Action::StopMachine { machine } => {
                self.cfg.faults_anywhere || self.member_of_machine(machine).is_none()
            }
            Action::RemoveMember { .. } => self.cfg.strict_reconfig,
            _ => true,
        }
    }

    /// The worst case of a check followed by a side effect: the leader passed its check
    /// for `a`, is paused past its TTL, and performs `a` when it resumes.
    pub(crate) fn pause_in_flight(&mut self, i: usize, a: &Action) {
        self.faults += 1;
        let ttl_steps = self.ttl_steps();
        let steps = ttl_steps + 1 + self.rng.below(ttl_steps);
        self.replicas[i].in_flight = Some(a.clone());
        self.pause(i, steps, &format!(" between its check and '{a}'"));
    }

    /// A fault of the replicas (two only): a pause (half of them past the TTL), a crash,
    /// or the lease lost after the next member removal.
    pub(crate) fn maybe_replica_fault(&mut self) {
        if !self.rng.chance(self.cfg.fault_per_mille / 4) {
            return;
        }
        let running: Vec<usize> = (0..self.replicas.len()).filter(|i| self.runs(*i)).collect();
        match self.rng.below(4) {
            3 => self.store_fault(),
            0 => {
                if let Some(i) = self.pick(&running) {
                    self.faults += 1;
                    let steps = 1 + self.rng.below(2 * self.ttl_steps());
                    self.pause(i, steps, "");
                }
            }
            1 => {
                if let Some(i) = self.pick(&running) {
                    self.faults += 1;
                    self.note(format!("FAULT r{i} crashes"));
                    self.crash_replica(i);
                }
            }
            _ => {
                if !self.lose_lease_after_removal {
                    self.faults += 1;
                    self.lose_lease_after_removal = true;
                    self.note("FAULT armed: the next member removal loses the lease".into());
                }
            }
        }
    }
}
