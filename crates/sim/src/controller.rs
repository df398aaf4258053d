//! The simulated controller: one iteration of a replica (observe, decide, pace, perform
//! with faults around each call), and every action performed against the simulated
//! world, with the invariants that concern the action itself.

use super::*;

/// What an action came to; for a call to etcd, etcd's reply through the classifier.
pub(crate) enum Answer {
    Done,
    /// Transient: retry soon.
    Refused(&'static str),
    Failed(&'static str),
    /// The store refused the write: another replica holds the leader key, or none does.
    Fenced,
}

/// How the controller classifies an action whose answer never came: an etcd call's
/// client deadline through the core's classifier (a refusal: retried soon, its effect
/// unknown), anything else (a machine, a store write) as a failure, as the controller's
/// `ActionError` does.
pub(crate) fn timed_out(a: &Action) -> Attempt {
    let call = match a {
        Action::AddLearner { .. } => EtcdCall::AddLearner,
        Action::Promote { .. } => EtcdCall::Promote,
        Action::MoveLeader { .. } => EtcdCall::MoveLeader,
        Action::RemoveMember { .. } => EtcdCall::RemoveMember,
        _ => return Attempt::Failed,
    };
    match etcd_answer(call, Err(CLIENT_DEADLINE)) {
        Answer::Done => Attempt::Done,
        Answer::Refused(_) => Attempt::Refused,
        Answer::Failed(_) | Answer::Fenced => Attempt::Failed,
    }
}

/// etcd's reply to `call` as the controller sees it: through the core's classifier, the
/// one `quorum-etcd` uses, so a change to it changes the simulator too.
pub(crate) fn etcd_answer(call: EtcdCall, reply: Result<(), EtcdAnswer>) -> Answer {
    let Err(a) = reply else {
        return Answer::Done;
    };
    match a.verdict(call) {
        Verdict::Done | Verdict::AlreadyDone => Answer::Done,
        Verdict::Refused(_) => Answer::Refused(a.message),
        Verdict::Unreachable | Verdict::Failed => Answer::Failed(a.message),
    }
}

impl World {
    /// Performs an action against the simulated world; the invariants that concern the
    /// action itself are checked here, against the ground truth. `fenced`: the store
    /// refuses the performer's writes (its token is stale), so only its effects on etcd
    /// and on machines land.
    pub(crate) fn perform(&mut self, a: &Action, fenced: bool) -> Answer {
        let before_quorum = self.has_quorum();
        self.check_in_place_membership(a);
        let unreachable = World::provider_target(a).is_some_and(|m| self.on_down_host(m));
        let answer = if unreachable {
            // The host's agent does not answer: nothing happens there.
            Answer::Failed("the host's agent does not answer")
        } else {
            self.perform_reachable(a, fenced)
        };
        // A rebuild's fence gives up the old cluster by a person's choice: its own
        // invariant is that no seed starts beside an old member (`rebuild.rs`).
        let fence = matches!(a, Action::FenceMachine { .. });
        if before_quorum && !self.has_quorum() && !fence {
            let (v, c) = (self.voters().count(), self.connected_voters());
            self.violate(format!(
                "quorum lost by quorum's action '{a}': {c} of {v} voters connected"
            ));
        }
        answer
    }

    /// `perform` where the machine's provider answers.
    fn perform_reachable(&mut self, a: &Action, fenced: bool) -> Answer {
        match a {
            Action::AllocateMachine { .. } | Action::MarkDeleting { .. } if fenced => {
                Answer::Fenced
            }
            Action::AllocateMachine {
                bootstrap,
                version,
                remediation,
            } => self.allocate(*bootstrap, *version, remediation.as_ref()),
            Action::StartMachine {
                machine,
                state,
                expect,
                ..
            } => self.start_checked(machine, *state, *expect, fenced),
            Action::AddLearner { peer_url, .. } => {
                etcd_answer(EtcdCall::AddLearner, self.add_learner(peer_url))
            }
            Action::Promote { member_id, .. } => {
                etcd_answer(EtcdCall::Promote, self.promote(*member_id))
            }
            Action::MarkDeleting {
                machine,
                remediation,
                ..
            } => self.mark_leaving(machine, remediation.as_ref()),
            Action::MoveLeader { to_member, .. } => {
                etcd_answer(EtcdCall::MoveLeader, self.move_leader(*to_member))
            }
            Action::RemoveMember { member_id, machine } => {
                self.remove_paced(*member_id, machine.as_deref())
            }
            Action::StopMachine { machine } => self.stop(machine),
            Action::DeleteMachine { machine } => self.delete_machine(machine, fenced),
            Action::ForgetControlPlane if fenced => Answer::Fenced,
            Action::ForgetControlPlane => Answer::Done,
            Action::WriteMarker { machine, marker } => self.write_marker(machine, *marker, fenced),
            Action::Compact { revision } => self.compact(*revision),
            Action::Defragment { machine } => self.defragment(machine),
            Action::DisarmAlarm { member_id, alarm } => self.disarm(*member_id, alarm),
            Action::BeginInPlace { .. }
            | Action::SetInPlacePhase { .. }
            | Action::EndInPlace { .. } => self.perform_in_place(a, fenced),
            Action::TakeSnapshot { .. } => self.take_snapshot(fenced),
            Action::PruneSnapshot { id } => self.prune_snapshot(id, fenced),
            Action::VerifySnapshot { id } => self.verify_snapshot(id, fenced),
            Action::PruneFenced { name } => self.prune_fenced(name),
            Action::FenceMachine { .. }
            | Action::SetRebuildPhase { .. }
            | Action::RestoreSnapshot { .. }
            | Action::ForceNewCluster { .. }
            | Action::FinishRebuild { .. } => self.perform_rebuild(a, fenced),
            Action::SetCaPhase { .. } | Action::FinishCaRotation { .. } => {
                self.perform_ca(a, fenced)
            }
            Action::TakeNextLink { from, to } => self.take_next_link(*from, *to, fenced),
        }
    }

    /// A new machine, placed (on hosts) by the core's placement.
    fn allocate(
        &mut self,
        bootstrap: bool,
        version: Version,
        remediation: Option<&quorum_core::Remediation>,
    ) -> Answer {
        if remediation.is_some() {
            self.repair.replacements += 1;
        }
        match self.alloc_machine(bootstrap, version, remediation.cloned()) {
            Ok(m) => {
                let on = m
                    .placement
                    .as_ref()
                    .map(|p| format!(" on {}", p.host))
                    .unwrap_or_default();
                self.note(format!("  allocated {}{on}", m.name));
                Answer::Done
            }
            Err(e) => {
                self.note(format!("  placement refused: {e}"));
                Answer::Failed("no host can take the machine")
            }
        }
    }

    /// The provider's check just before etcd runs: the data directory still holds the
    /// marker the start was decided on (and, marked, its data); then the start.
    fn start_checked(
        &mut self,
        machine: &str,
        state: quorum_core::ClusterState,
        expect: Option<DataMarker>,
        fenced: bool,
    ) -> Answer {
        let p = self.procs.get(machine);
        let marker = p.and_then(|p| p.marker);
        let has_data = p.is_some_and(|p| p.has_data);
        if marker != expect || (expect.is_some() && !has_data) {
            Answer::Failed("its data directory changed since the start was decided")
        } else {
            self.start_machine(machine, state, fenced)
        }
    }

    /// The record write of a machine leaving (`Machine::mark_deleting`), its remediation
    /// checked against the ground truth first.
    fn mark_leaving(
        &mut self,
        machine: &str,
        remediation: Option<&quorum_core::Remediation>,
    ) -> Answer {
        if let Some(rec) = remediation {
            self.check_remediation(machine, rec);
        }
        if let Some(m) = self.machines.iter_mut().find(|m| m.name == machine) {
            m.mark_deleting(remediation);
        }
        Answer::Done
    }

    /// A member removed: a removal etcd refused disturbed no client (a deposed
    /// controller's stale one, against a cluster rebuilt meanwhile, is refused by etcd's
    /// strict reconfiguration check), so the drain is checked for the ones it took.
    fn remove_paced(&mut self, member_id: u64, machine: Option<&str>) -> Answer {
        let answer = etcd_answer(EtcdCall::RemoveMember, self.remove_member(member_id));
        if let (Some(m), Answer::Done) = (machine, &answer) {
            self.check_removal_paced(m);
        }
        answer
    }

    /// A process stopped (a learner's only as the rules allow; an in-place one with the
    /// checks of its step).
    fn stop(&mut self, machine: &str) -> Answer {
        self.check_learner_stop(machine);
        let in_place = self.before_in_place_stop(machine);
        if let Some(p) = self.procs.get_mut(machine) {
            p.running = false;
            p.exit_at_ms = None;
            p.stop_asked = true;
        }
        if let Some(was_connected) = in_place {
            self.after_in_place_stop(machine, was_connected);
        }
        Answer::Done
    }

    /// The machine goes (process and data), then its record, a store write.
    fn delete_machine(&mut self, machine: &str, fenced: bool) -> Answer {
        let url = self
            .machines
            .iter()
            .find(|m| m.name == machine)
            .map(|m| m.peer_url());
        if let Some(url) = url {
            if self
                .members
                .iter()
                .any(|m| m.peer_url == url && !m.is_learner)
            {
                self.violate(format!("{machine} deleted while its member still votes"));
            }
        }
        self.procs.remove(machine);
        if fenced {
            return Answer::Fenced;
        }
        self.machines.retain(|m| m.name != machine);
        Answer::Done
    }

    /// Performs an action as replica `i`, whose store writes carry its token. Every side
    /// effect is by the holder of a valid lease, except the deposed leader's one
    /// `in_flight` step (checked before its pause, performed after it without a check).
    pub(crate) fn perform_as(&mut self, i: usize, a: &Action, in_flight: bool) -> Answer {
        let holds = self.holds_lease(i);
        if holds {
            self.acted_with_lease.insert(i);
            if self.acted_with_lease.len() > 1 {
                self.violate(format!(
                    "replicas {:?} acted in one step, each with a valid lease",
                    self.acted_with_lease
                ));
            }
        } else if !in_flight {
            self.violate(format!(
                "r{i} performed '{a}' without a valid lease, and not as its in-flight step"
            ));
        } else if !a.writes_records_only() {
            self.stale_side_effect(i, a);
        }
        let answer = self.perform(a, !holds);
        if !holds && matches!(answer, Answer::Done) {
            if let Action::AddLearner { peer_url, .. } = a {
                self.stale_learner = Some(peer_url.clone());
            }
        }
        let removed = matches!(a, Action::RemoveMember { .. }) && matches!(answer, Answer::Done);
        if holds && removed && self.lose_lease_after_removal && self.faults_on() {
            self.lose_lease_after_removal = false;
            self.lease.leases_lost_after_removal += 1;
            self.leader_key = None;
            // Its lease ended after its step: the next holder may act in this step too
            // (the leases do not overlap).
            self.acted_with_lease.remove(&i);
            self.note(format!(
                "FAULT r{i}'s lease is lost right after '{a}'; it still believes it leads"
            ));
        }
        answer
    }

    /// The deposed leader's side effect: counted, and at most one per term.
    fn stale_side_effect(&mut self, i: usize, a: &Action) {
        self.lease.stale_side_effects += 1;
        let store_token = self.leader_key.map_or(0, |k| k.token);
        let Some(t) = self.replicas[i].term.as_mut() else {
            self.violate(format!("r{i} performed '{a}' while standing by"));
            return;
        };
        let (token, again) = (t.token, t.stale_done);
        t.stale_done = true;
        if again {
            self.violate(format!(
                "r{i} performed a second side effect after its lease ended: '{a}'"
            ));
        }
        self.note(format!(
            "STALE r{i} (token {token}, store token {store_token}) performs '{a}' without re-checking"
        ));
    }

    /// One iteration of replica `i`, if it runs and leads: its own lease check, then one
    /// pass (`quorum_core::pass`), its requests answered against the simulated world,
    /// with faults around each action, until it ends (or the replica crashes, is paused,
    /// or steps down).
    pub(crate) fn controller_step(&mut self, i: usize, faults_on: bool) {
        if !self.may_pass(i) {
            return;
        }
        let mut pass = self.begin_pass(i);
        self.take_in(pass.decision());
        loop {
            let now = self.now_ms;
            match pass.next(&mut self.replicas[i].memory, now) {
                // The simulator traces refusals as it takes the decision in.
                Request::Record(_) => {}
                Request::Publish(Some(endpoints)) => self.publish(&endpoints),
                Request::Publish(None) => {}
                Request::Balance => {
                    let in_step = self.sync_lb();
                    pass.balanced(in_step);
                }
                Request::Perform(p) => {
                    if !self.perform_step(i, &mut pass, &p.action, faults_on) {
                        return;
                    }
                }
                Request::Done(end) => {
                    if let Some(Stop::Held { action, hold }) = end.stopped {
                        self.count_hold(i, &action, hold);
                    }
                    return;
                }
            }
        }
    }

    /// Whether replica `i` passes now: it runs and leads, its store serves, its lease
    /// is confirmed, and no defragmentation call blocks it.
    fn may_pass(&mut self, i: usize) -> bool {
        if !self.runs(i) || self.replicas[i].term.is_none() {
            return false;
        }
        // Nothing without the store: not even an observation (the machines are in it).
        if !self.store_serves(i) {
            self.lease.store_holds += 1;
            return false;
        }
        // The lease before anything else: gone in the store ends the term; not confirmed
        // (run out by its own clock, its renewals unanswered) holds the replica.
        match self.standing_of(i, 0) {
            Standing::Act => self.acted_after_outage(i),
            Standing::Hold => return false,
            Standing::Lost => {
                self.step_down(i, "the store says its lease is gone");
                return false;
            }
        }
        // A defragmentation call blocks its caller until the member is done.
        self.replicas[i].busy_until_ms <= self.now_ms
    }

    /// The simulator's notes and checks on a pass's decision.
    fn take_in(&mut self, d: &Decision) {
        self.decisions += 1;
        self.last_converged = d.converged;
        self.note_refusal(d);
        self.note_stopped_rollout(d);
        self.note_quorum_lost(d);
        self.check_in_place_endpoints(&d.endpoints);
        if d.actions
            .iter()
            .filter(|a| a.is_membership_change())
            .count()
            > 1
        {
            self.violate(format!(
                "several membership changes in one decision: {:?}",
                d.actions
            ));
        }
    }

    /// One action the pass handed out, with faults around the call, answered to the
    /// pass; false when the pass ends here (the replica crashed, was paused, stepped
    /// down, or the answer never came).
    fn perform_step(&mut self, i: usize, pass: &mut Pass, a: &Action, faults_on: bool) -> bool {
        if !self.ensure_leading(i) {
            return false;
        }
        if faults_on
            && self.ha()
            && self.rng.chance(self.cfg.fault_per_mille / 3)
            && self.may_pause_in_flight(a)
        {
            self.pause_in_flight(i, a);
            return false;
        }
        if faults_on && self.rng.chance(self.cfg.fault_per_mille / 3) {
            self.fault_around(i, pass, a);
            return false;
        }
        let answer = self.perform_as(i, a, false);
        if let (Action::Defragment { .. }, Answer::Done) = (a, &answer) {
            // The call blocks while the member rewrites its file.
            self.replicas[i].busy_until_ms = self.now_ms + repair::DEFRAG_STALL_MS;
        }
        let tag = self.tag(i);
        match &answer {
            Answer::Done => self.note(format!("{tag}did '{a}'")),
            Answer::Refused(why) => self.note(format!("{tag}'{a}' refused: {why}")),
            Answer::Failed(why) => self.note(format!("{tag}'{a}' failed: {why}")),
            Answer::Fenced => {
                self.lease.fenced_writes += 1;
                self.step_down(i, &format!("its write for '{a}' was fenced"));
                return false;
            }
        }
        let Some(attempt) = Self::attempt_of(&answer) else {
            return false;
        };
        self.answer(i, pass, attempt);
        attempt == Attempt::Done
    }

    /// A fault around the call of `a`: the replica crashes before it, or the call
    /// times out before it reaches etcd, or it is performed and then the replica
    /// crashes or its answer is lost (classified as the controller's adapter classifies
    /// a timeout).
    fn fault_around(&mut self, i: usize, pass: &mut Pass, a: &Action) {
        self.faults += 1;
        let tag = self.tag(i);
        match self.rng.below(3) {
            0 => {
                self.note(format!("{tag}CRASH before '{a}'"));
                self.crash_replica(i);
            }
            1 => {
                self.note(format!("{tag}TIMEOUT before '{a}' reached etcd"));
                self.answer(i, pass, timed_out(a));
            }
            _ => {
                let ans = self.perform_as(i, a, false);
                let applied = matches!(ans, Answer::Done);
                if self.rng.chance(500) {
                    self.note(format!("{tag}CRASH after '{a}' (applied: {applied})"));
                    self.crash_replica(i);
                } else {
                    self.note(format!("{tag}LOST ANSWER of '{a}' (applied: {applied})"));
                    self.answer(i, pass, timed_out(a));
                }
            }
        }
    }
}
