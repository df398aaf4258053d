//! The decision function: desired state + durable intent + a fresh observation in,
//! the next action(s) and the conditions to report out. Pure: no clock, no I/O.
//!
//! Rules, in priority order (the first that applies wins):
//! 1. teardown of a deleted control plane; a paused one does nothing;
//! 2. a rebuild a person confirmed (`rebuild`: `quorum restore`, `quorum recover`):
//!    fence every old machine but the survivor, then seed one member (the survivor
//!    with `--force-new-cluster`, or a snapshot restored into a new machine) until it
//!    serves alone;
//! 3. bootstrap: allocate the initial machines, then start them together;
//! 4. with no leader to ask: restart stopped members (past their restart backoff), else
//!    wait, or say quorum is lost;
//! 5. restart a machine whose member exists but whose process is down: never on lost or
//!    foreign data, never before its restart backoff (`health::restart_backoff_s`), and
//!    not once it has failed for `unhealthyAfter` (it is remediated instead);
//! 6. mark the data directories of members that answered as themselves (`repair`);
//! 7. carry on an in-place step (`inplace`): drain, stop, record the new binary,
//!    start, wait until it serves; past `inPlace.timeout`, roll it back;
//! 8. finish an add: start and promote a learner; one whose own publish was lost is
//!    stopped and started again in one decision, before anything judges it failed
//!    (`publish`);
//! 9. finish a removal: a machine marked deleting hands off leadership, then its member,
//!    then its process; a remediated one then records its replacement; then its record;
//! 10. remove orphan members (no machine);
//! 11. repair a NOSPACE alarm: compact, defragment, disarm (`upkeep`);
//! 12. remediate: a member whose problem lasted `unhealthyAfter` is marked for
//!     replacement, within the limits (`repair`); one that has not yet is waited on;
//! 13. a machine without a member: join it as a learner (never started) or replace it
//!     (it had data, so its member was removed behind quorum's back);
//! 14. scale up, scale down, roll out outdated machines (surge or remove first, or in
//!     place under `strategy: InPlace`); a new machine no registered host can take is
//!     refused (Blocked) with the ways out, never tried (`placement::room_for`; a
//!     rollout that changed no member offers `--abort`, see `abort`); with nothing else to do, defragment a member
//!     past the spec's threshold, else take a snapshot `spec.backup.schedule` asks for,
//!     else test-restore the newest snapshot once `verifyEvery` passed, else remove one
//!     snapshot retention no longer keeps (`backup`), else one fenced directory kept
//!     past `spec.recovery.keepFenced` (`fenced`). A CA rotation (`carotation`)
//!     makes machines outdated whose CA files are not its phase's, and with none left
//!     and every member healthy, moves to its next phase (or finishes) before any of
//!     the upkeep; then a chained upgrade (`chain`), once every member serves on the
//!     link under way, its preflight holds and a snapshot since is kept, records its
//!     next link.
//!
//! Every membership change is preceded by a quorum projection in which every member
//! that is not provably healthy counts as unhealthy, and at most one membership change
//! is ever proposed by a decision.

pub use crate::action::*;
pub use crate::decision::*;
use crate::model::*;
use crate::repair::has_run;
use crate::version::Version;
use std::collections::BTreeMap;
/// The next step for one control plane.
///
/// `machines` are the control plane's machine records (any order); `observed` must be
/// fresh: taken after the last action was performed.
pub fn decide(cp: &ControlPlane, machines: &[Machine], observed: &Observation) -> Decision {
    let view = View::new(cp, machines, observed);
    let mut step = view.next_step();
    debug_assert!(
        step.actions
            .iter()
            .filter(|a| a.is_membership_change())
            .count()
            <= 1,
        "a decision proposes at most one membership change"
    );
    let conditions = view.conditions(&step);
    let converged = step.actions.is_empty()
        && step.waiting_for.is_none()
        && conditions
            .iter()
            .filter(|c| !c.kind.is_warning())
            .all(|c| c.status == c.kind.good_when_true());
    if converged {
        step.operation = Operation::Idle;
    }
    Decision {
        actions: step.actions,
        operation: step.operation,
        waiting_for: step.waiting_for,
        because: step.because,
        conditions,
        endpoints: view.endpoints(),
        converged,
        voters: view.voters().count(),
        healthy_voters: view.healthy_voters_except(None),
        machines: view.machine_health(),
    }
}

pub(crate) use crate::step::Step;

/// A machine with what was seen of it and its member, if any.
pub(crate) struct Seen<'a> {
    pub(crate) machine: &'a Machine,
    pub(crate) obs: Option<&'a MachineObservation>,
    pub(crate) member: Option<&'a Member>,
}

impl Seen<'_> {
    pub(crate) fn running(&self) -> bool {
        self.obs.is_some_and(|o| o.process == ProcessState::Running)
    }
    pub(crate) fn has_data(&self) -> bool {
        self.obs.is_some_and(|o| o.has_data)
    }
    pub(crate) fn status(&self) -> Option<&EndpointStatus> {
        self.obs.and_then(|o| o.status.as_ref())
    }
}

pub(crate) struct View<'a> {
    pub(crate) cp: &'a ControlPlane,
    /// Sorted by serial (oldest first).
    pub(crate) seen: Vec<Seen<'a>>,
    pub(crate) members: Option<&'a [Member]>,
    pub(crate) orphans: Vec<&'a Member>,
    pub(crate) leader_id: Option<u64>,
    pub(crate) now_unix_s: i64,
    /// Since when each machine has had a problem (the tracker's memory).
    pub(crate) problem_since: &'a BTreeMap<String, i64>,
    /// Whether the keyspace is compacted to its revision (probed under NOSPACE).
    pub(crate) compacted: Option<bool>,
    /// Defragmented since the NOSPACE alarm appeared (the tracker's memory).
    pub(crate) defragmented: &'a std::collections::BTreeSet<String>,
    pub(crate) nospace_recurrences: u32,
    /// The cluster's alarms by member id (the leader's list).
    pub(crate) alarms: &'a [(u64, String)],
    /// The recorded snapshots and the control plane's creation (`Observation`).
    pub(crate) snapshots: &'a [crate::SnapshotSeen],
    pub(crate) created_at_unix_s: Option<i64>,
    /// The control plane's fenced directories (`fenced`).
    pub(crate) fenced: &'a [crate::fenced::FencedSeen],
    /// The cluster version the leader reported (`None`: unknown).
    pub(crate) cluster_version: Option<Version>,
    /// The hosts a new machine could go to (`None`: not the `hosts` provider).
    pub(crate) hosts: Option<&'a [crate::placement::HostView]>,
}

impl<'a> View<'a> {
    pub(crate) fn new(
        cp: &'a ControlPlane,
        machines: &'a [Machine],
        observed: &'a Observation,
    ) -> Self {
        let members = observed.members.as_deref();
        let mut seen: Vec<Seen<'a>> = machines
            .iter()
            .map(|m| {
                let peer = m.peer_url();
                Seen {
                    machine: m,
                    obs: observed.machines.get(&m.name),
                    member: members
                        .and_then(|ms| ms.iter().find(|mb| mb.peer_urls.contains(&peer))),
                }
            })
            .collect();
        seen.sort_by_key(|s| s.machine.serial);
        let orphans = members
            .map(|ms| {
                ms.iter()
                    .filter(|mb| {
                        !machines
                            .iter()
                            .any(|m| mb.peer_urls.contains(&m.peer_url()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let leader_id = observed.leader_id();
        View {
            cp,
            seen,
            members,
            orphans,
            leader_id,
            now_unix_s: observed.now_unix_s,
            problem_since: &observed.problem_since_unix_s,
            compacted: observed.compacted,
            defragmented: &observed.defragmented,
            nospace_recurrences: observed.nospace_recurrences,
            alarms: &observed.alarms,
            snapshots: &observed.snapshots,
            created_at_unix_s: observed.created_at_unix_s,
            fenced: &observed.fenced,
            cluster_version: observed.cluster_version,
            hosts: observed.hosts.as_deref(),
        }
    }

    pub(crate) fn spec(&self) -> &ControlPlaneSpec {
        &self.cp.spec
    }

    /// Why a machine must be replaced even though the count is right: it runs another
    /// version than the spec, or its certificates expire within the renewal window.
    pub(crate) fn outdated(&self, m: &Machine) -> Option<DeleteReason> {
        if m.version != self.spec().version {
            Some(DeleteReason::Outdated)
        } else if self.spec().certificates_due(m, self.now_unix_s) {
            Some(DeleteReason::CertificatesExpiring)
        } else if self.ca_outdated(m) {
            Some(DeleteReason::CaRotation)
        } else if m.requested == Some(MachineRequest::Replace) {
            Some(DeleteReason::Requested)
        } else {
            None
        }
    }

    /// A restart in place a person asked for and that has not begun (`quorum member
    /// restart`): rolled like an outdated machine under `strategy: InPlace`, whatever
    /// the strategy, once no machine needs replacing.
    pub(crate) fn restart_asked(&self, m: &Machine) -> bool {
        m.requested == Some(MachineRequest::Restart) && m.in_place.is_none() && !m.deleting
    }

    pub(crate) fn voters(&self) -> impl Iterator<Item = &'a Member> + '_ {
        self.members.into_iter().flatten().filter(|m| !m.is_learner)
    }

    pub(crate) fn seen_of(&self, member: &Member) -> Option<&Seen<'a>> {
        self.seen
            .iter()
            .find(|s| s.member.is_some_and(|m| m.id == member.id))
    }

    /// Provably healthy: its own endpoint answered as this member, it knows a leader and
    /// has no alarm. A member without a machine (an orphan) cannot be proven healthy.
    pub(crate) fn healthy(&self, member: &Member) -> bool {
        self.seen_of(member)
            .and_then(|s| s.status())
            .is_some_and(|st| {
                st.member_id == member.id && st.leader_id != 0 && st.alarms.is_empty()
            })
    }

    /// Each machine's role and health, by the rule of `healthy`.
    fn machine_health(&self) -> Vec<MachineHealth> {
        self.seen
            .iter()
            .map(|s| {
                let role = match s.member {
                    None => Role::NoMember,
                    Some(m) if m.is_learner => Role::Learner,
                    Some(m) if Some(m.id) == self.leader_id => Role::Leader,
                    Some(_) => Role::Follower,
                };
                let problems: Vec<String> = if s.machine.deleting {
                    vec![]
                } else {
                    self.problems_of(s).iter().map(|p| p.to_string()).collect()
                };
                MachineHealth {
                    machine: s.machine.name.clone(),
                    role,
                    healthy: s.member.is_some_and(|m| self.healthy(m)),
                    unhealthy_since_unix_s: (!problems.is_empty())
                        .then(|| self.problem_since.get(&s.machine.name).copied())
                        .flatten(),
                    problems,
                }
            })
            .collect()
    }

    pub(crate) fn healthy_voters_except(&self, except: Option<u64>) -> usize {
        self.voters()
            .filter(|m| Some(m.id) != except && self.healthy(m))
            .count()
    }

    /// Would the cluster keep a healthy majority if `remove` (a voter) left?
    pub(crate) fn safe_to_remove_voter(&self, remove: u64) -> Result<(), String> {
        let voters_after = self.voters().filter(|m| m.id != remove).count();
        let healthy_after = self.healthy_voters_except(Some(remove));
        if voters_after == 0 {
            return Err("removing it would leave no voting member".into());
        }
        if healthy_after < quorum_size(voters_after) {
            return Err(format!(
                "removing it would leave {healthy_after} healthy of {voters_after} voters, below the quorum of {}",
                quorum_size(voters_after)
            ));
        }
        Ok(())
    }

    /// Would the cluster keep a healthy majority with one more voter (the learner)?
    fn safe_to_promote(&self, learner: &Member) -> Result<(), String> {
        let voters_after = self.voters().count() + 1;
        let healthy_after = self.healthy_voters_except(None) + usize::from(self.healthy(learner));
        if healthy_after < quorum_size(voters_after) {
            return Err(format!(
                "promoting it would leave {healthy_after} healthy of {voters_after} voters, below the quorum of {}",
                quorum_size(voters_after)
            ));
        }
        Ok(())
    }

    /// Preflight for starting a membership change that is not already in flight: every
    /// member healthy, no alarm, no learner pending, nothing leaving.
    pub(crate) fn preflight(&self) -> Result<(), String> {
        for m in self.members.into_iter().flatten() {
            let name = self.name_of(m);
            if m.is_learner {
                return Err(format!("learner {name} is still pending"));
            }
            if let Some(st) = self.seen_of(m).and_then(|s| s.status()) {
                if !st.alarms.is_empty() {
                    return Err(format!(
                        "member {name} has alarms: {}",
                        st.alarms.join(", ")
                    ));
                }
            }
            if !self.healthy(m) {
                return Err(format!("member {name} is not healthy"));
            }
        }
        if let Some(s) = self.seen.iter().find(|s| s.machine.deleting) {
            return Err(format!("{} is still being deleted", s.machine.name));
        }
        Ok(())
    }

    pub(crate) fn name_of(&self, m: &Member) -> String {
        match self.seen_of(m) {
            Some(s) => s.machine.name.clone(),
            None if !m.name.is_empty() => m.name.clone(),
            None => format!("{:x}", m.id),
        }
    }

    fn next_step(&self) -> Step {
        if self.cp.deleting {
            return self.teardown();
        }
        if self.spec().paused {
            return Step::wait(
                Operation::Paused,
                format!(
                    "paused: quorum takes no step until `quorum pause {} --resume`",
                    self.cp.name
                ),
            );
        }
        if let Some(step) = self.rebuild() {
            return step;
        }
        if let Some(step) = self.bootstrap() {
            return step;
        }
        let Some(members) = self.members else {
            return self.without_leader();
        };
        self.restart_stopped()
            .or_else(|| self.mark_data())
            .or_else(|| self.continue_in_place())
            .or_else(|| self.finish_learner())
            .or_else(|| self.finish_deletion())
            .or_else(|| self.remove_orphan())
            .or_else(|| self.repair_nospace())
            .or_else(|| self.remediate())
            .or_else(|| self.join_or_replace())
            .unwrap_or_else(|| self.reconcile_size(members))
    }

    fn teardown(&self) -> Step {
        if self.seen.is_empty() {
            return Step::act(Operation::Deleting, Action::ForgetControlPlane);
        }
        // Every machine goes: no quorum to protect. Stop the running ones first, then
        // delete them all.
        let actions: Vec<Action> = self
            .seen
            .iter()
            .map(|s| {
                let machine = s.machine.name.clone();
                if s.running() {
                    Action::StopMachine { machine }
                } else {
                    Action::DeleteMachine { machine }
                }
            })
            .collect();
        Step {
            because: None,
            actions,
            operation: Operation::Deleting,
            waiting_for: None,
            blocked: false,
        }
    }

    /// The initial cluster: allocate `replicas` machines (all before any starts, so the
    /// initial cluster is fixed), then start every one not yet running.
    fn bootstrap(&self) -> Option<Step> {
        if self.members.is_some() || self.seen.iter().any(|s| !s.machine.bootstrap) {
            return None;
        }
        // A marker is written only once a member answered as itself with a leader: the
        // cluster formed, and this is a lost quorum, not a bootstrap. Starting a member
        // that lost its data with `new` now would found a stranger of the same name.
        if self
            .seen
            .iter()
            .any(|s| s.obs.is_some_and(|o| o.marker.is_some()))
        {
            return None;
        }
        // Nor once a member answered at all: etcd serves clients only after its member
        // was published through a leader.
        if self.seen.iter().any(|s| s.status().is_some()) {
            return None;
        }
        let started = self.seen.iter().any(|s| s.running() || s.has_data());
        if !started && self.seen.len() < self.spec().replicas as usize {
            return Some(self.allocate_initial());
        }
        if self.seen.is_empty() {
            return None;
        }
        Some(self.start_initial())
    }

    /// A new cluster's missing initial machines, allocated.
    fn allocate_initial(&self) -> Step {
        let missing = (self.spec().replicas as usize).saturating_sub(self.seen.len());
        let actions = (0..missing)
            .map(|_| Action::AllocateMachine {
                bootstrap: true,
                version: self.spec().version,
                remediation: None,
            })
            .collect();
        Step::many(Operation::Bootstrapping, actions)
    }

    /// A new cluster's initial machines started, each with the initial cluster (a
    /// machine with data restarts from it, etcd ignores the initial cluster then: `new`
    /// only for one that never started), or the wait for them to elect a leader.
    fn start_initial(&self) -> Step {
        let initial: Vec<InitialMember> = self
            .seen
            .iter()
            .map(|s| InitialMember {
                name: s.machine.name.clone(),
                peer_url: s.machine.peer_url(),
            })
            .collect();
        let actions: Vec<Action> = self
            .seen
            .iter()
            .filter(|s| !s.running() && self.restart_wait_s(s) == 0)
            .map(|s| Action::StartMachine {
                machine: s.machine.name.clone(),
                state: if s.has_data() {
                    ClusterState::Existing
                } else {
                    ClusterState::New
                },
                initial_cluster: initial.clone(),
                expect: s.obs.and_then(|o| o.marker),
            })
            .collect();
        if actions.is_empty() {
            return Step::wait(
                Operation::Bootstrapping,
                "waiting for the initial members to elect a leader",
            );
        }
        Step::many(Operation::Bootstrapping, actions)
    }

    /// The member list of the running cluster, for `--initial-cluster` of a joining member.
    pub(crate) fn initial_cluster(&self) -> Vec<InitialMember> {
        let mut out = Vec::new();
        for m in self.members.into_iter().flatten() {
            let name = match self.seen_of(m) {
                Some(s) => s.machine.name.clone(),
                None => m.name.clone(),
            };
            for url in &m.peer_urls {
                out.push(InitialMember {
                    name: name.clone(),
                    peer_url: url.clone(),
                });
            }
        }
        out
    }

    /// A machine whose member exists but whose process is down: start it. This covers a
    /// learner that was added but not started yet and a member whose process died. Never
    /// on data that is lost or another member's (remediation replaces those), and never
    /// before its restart backoff has passed (the remediation rule says when).
    fn restart_stopped(&self) -> Option<Step> {
        let s = self.seen.iter().find(|s| {
            s.member.is_some()
                && !s.running()
                && !s.machine.deleting
                // The in-place rule starts these, on the binary of their phase.
                && !s.machine.in_place_out_of_service()
                && self.data_problem(s).is_none()
                && self.restart_wait_s(s) == 0
                && !(self.failed_long_enough(s) && self.remediation_would_start(s))
        })?;
        // Bootstrapped with `new` only if its member has never run: a member that ran
        // and lost its data is `DataLost`, never started.
        let fresh_bootstrap =
            s.machine.bootstrap && !s.has_data() && s.member.is_some_and(|m| !has_run(m));
        let state = if fresh_bootstrap {
            ClusterState::New
        } else {
            ClusterState::Existing
        };
        let initial_cluster = if fresh_bootstrap {
            self.seen
                .iter()
                .filter(|o| o.machine.bootstrap)
                .map(|o| InitialMember {
                    name: o.machine.name.clone(),
                    peer_url: o.machine.peer_url(),
                })
                .collect()
        } else {
            self.initial_cluster()
        };
        let op = if s.member.is_some_and(|m| m.is_learner) {
            self.growth_operation()
        } else {
            Operation::Repairing
        };
        Some(Step::act(
            op,
            Action::StartMachine {
                machine: s.machine.name.clone(),
                state,
                initial_cluster,
                expect: s.obs.and_then(|o| o.marker),
            },
        ))
    }

    /// What adding a member is for: a rollout if anything is outdated, else scaling up.
    pub(crate) fn growth_operation(&self) -> Operation {
        if self.remediating().is_some() {
            Operation::Repairing
        } else if self.seen.iter().any(|s| self.outdated(s.machine).is_some()) {
            Operation::RollingOut
        } else {
            Operation::ScalingUp
        }
    }

    fn shrink_operation(&self) -> Operation {
        if self.seen.iter().any(|s| self.outdated(s.machine).is_some()) {
            Operation::RollingOut
        } else {
            Operation::ScalingDown
        }
    }

    /// Whether remediating `s` would start now: no rule before remediation acts (nothing
    /// leaving, no other learner, no orphan, no NOSPACE repair) and it is within the limits
    /// and the quorum projection. Until then a member that failed for `unhealthyAfter` is
    /// still restarted (after its backoff): a crash loop that ends, while another machine
    /// leaves or maxRetry is spent, would otherwise never run again (found by the
    /// simulator).
    fn remediation_would_start(&self, s: &Seen<'a>) -> bool {
        let busy = self.seen.iter().any(|o| {
            o.machine.deleting
                || (o.machine.name != s.machine.name && o.member.is_some_and(|m| m.is_learner))
        });
        let nospace = self.seen.iter().any(|o| {
            o.status()
                .is_some_and(|st| st.alarms.iter().any(|a| a == crate::upkeep::NOSPACE))
        });
        if busy || nospace || !self.orphans.is_empty() {
            return false;
        }
        self.remediate_one(s, &self.problems_of(s))
            .is_some_and(|step| !step.actions.is_empty())
    }

    /// A learner of a live machine is promoted once it has caught up.
    fn finish_learner(&self) -> Option<Step> {
        let s = self
            .seen
            .iter()
            .find(|s| s.member.is_some_and(|m| m.is_learner) && !s.machine.deleting)?;
        let learner = s.member?;
        let op = self.growth_operation();
        let name = &s.machine.name;
        // Before remediation: a replacement would likely lose its publish the same way.
        if let Some(why) = self.publish_lost(s, learner) {
            return Some(self.restart_learner(op, s).because(why));
        }
        if self.failed_long_enough(s) {
            // A learner that cannot start or answer is remediated like any member,
            // rather than waited on forever; and only it: nothing else is remediated
            // while a learner is pending (the simulator found a voter remediated beside
            // it). A machine leaving (beside a learner only after a deposed controller's
            // stale add) goes first.
            if self.seen.iter().any(|o| o.machine.deleting) {
                return None;
            }
            return self.remediate_one(s, &self.problems_of(s));
        }
        let Some(st) = s.status() else {
            return Some(Step::wait(
                op,
                format!("waiting for learner {name} to answer"),
            ));
        };
        let Some(leader) = self.leader_status() else {
            return Some(Step::wait(
                op,
                "waiting for a leader to compare the learner with",
            ));
        };
        // etcd promotes a learner whose log is at 90% of the leader's or more; asking
        // earlier only earns a refusal.
        if st.raft_applied_index.saturating_mul(10) < leader.raft_index.saturating_mul(9) {
            return Some(Step::wait(
                op,
                format!(
                    "waiting for learner {name} to catch up ({} of {})",
                    st.raft_applied_index, leader.raft_index
                ),
            ));
        }
        if let Err(why) = self.safe_to_promote(learner) {
            return Some(Step::refuse(op, format!("not promoting {name}: {why}")));
        }
        Some(Step::act(
            op,
            Action::Promote {
                machine: name.clone(),
                member_id: learner.id,
            },
        ))
    }

    pub(crate) fn leader_status(&self) -> Option<&EndpointStatus> {
        let id = self.leader_id?;
        self.seen
            .iter()
            .filter_map(|s| s.status())
            .find(|st| st.member_id == id)
    }

    /// The voter to hand leadership to: healthy, not leaving; one at the spec's version
    /// first (it will not have to hand leadership on again), and among those the oldest.
    /// The oldest has been connected to its peers longest: a leader whose connection to
    /// a voter is younger than etcd's 5 s health interval refuses membership changes
    /// ("unhealthy cluster"), so the newest member would stall the next step.
    fn transferee(&self, from: u64) -> Option<(&Member, &Machine)> {
        self.seen
            .iter()
            .filter(|s| !s.machine.deleting && !s.machine.in_place_out_of_service())
            .filter_map(|s| s.member.map(|m| (m, s.machine)))
            .filter(|(m, _)| !m.is_learner && m.id != from && self.healthy(m))
            .min_by_key(|(_, machine)| (self.outdated(machine).is_some(), machine.serial))
    }

    pub(crate) fn move_leader_off(&self, op: Operation, member: &Member, label: &str) -> Step {
        match self.transferee(member.id) {
            Some((to, machine)) => Step::act(
                op,
                Action::MoveLeader {
                    from_member: member.id,
                    to_member: to.id,
                    to_machine: machine.name.clone(),
                },
            ),
            None => Step::refuse(
                op,
                format!("{label} leads and no healthy voter can take over leadership"),
            ),
        }
    }

    /// A machine marked deleting: leadership off it, member removed, process stopped,
    /// record deleted. Its absence from the member list is the sign the removal happened,
    /// even if nothing recorded it (the crash of the origin bug report).
    fn finish_deletion(&self) -> Option<Step> {
        let s = self.seen.iter().find(|s| s.machine.deleting)?;
        let remediated = s
            .machine
            .remediation
            .as_ref()
            .is_some_and(|r| r.machine == s.machine.name);
        let op = if remediated {
            Operation::Repairing
        } else {
            self.shrink_operation()
        };
        let name = s.machine.name.clone();
        let Some(member) = s.member else {
            if s.running() {
                return Some(Step::act(op, Action::StopMachine { machine: name }));
            }
            if let Some(replacement) = self.replacement_for(s) {
                if let Some(why) = self.no_room(op, Some(&name)) {
                    return Some(Step::refuse(op, why));
                }
                return Some(Step::act(op, replacement));
            }
            return Some(Step::act(op, Action::DeleteMachine { machine: name }));
        };
        if member.is_learner {
            return Some(Step::act(
                op,
                Action::RemoveMember {
                    member_id: member.id,
                    machine: Some(name),
                },
            ));
        }
        if self.leader_id == Some(member.id) {
            return Some(self.move_leader_off(op, member, &name));
        }
        if let Err(why) = self.safe_to_remove_voter(member.id) {
            return Some(Step::refuse(op, format!("not removing {name}: {why}")));
        }
        Some(Step::act(
            op,
            Action::RemoveMember {
                member_id: member.id,
                machine: Some(name),
            },
        ))
    }

    /// A member that matches no machine: remove it (learners freely, voters only when
    /// the projection allows, leaders after moving leadership).
    fn remove_orphan(&self) -> Option<Step> {
        let orphan = *self.orphans.first()?;
        let op = Operation::Repairing;
        let label = format!("orphan member {}", self.name_of(orphan));
        if !orphan.is_learner {
            if self.leader_id == Some(orphan.id) {
                return Some(self.move_leader_off(op, orphan, &label));
            }
            if let Err(why) = self.safe_to_remove_voter(orphan.id) {
                return Some(Step::refuse(op, format!("not removing {label}: {why}")));
            }
        }
        Some(Step::act(
            op,
            Action::RemoveMember {
                member_id: orphan.id,
                machine: None,
            },
        ))
    }

    /// A live machine without a member: join it if it never ran, replace it if it did.
    fn join_or_replace(&self) -> Option<Step> {
        let s = self
            .seen
            .iter()
            .find(|s| s.member.is_none() && !s.machine.deleting)?;
        let name = s.machine.name.clone();
        if s.has_data() {
            return Some(Step::act(
                Operation::Repairing,
                Action::MarkDeleting {
                    machine: name,
                    reason: DeleteReason::MemberLost,
                    remediation: None,
                },
            ));
        }
        let op = self.growth_operation();
        if s.running() {
            // A process without data and without a member cannot be ours to join: it
            // would have been started only after the add. Stop it and join cleanly.
            return Some(Step::act(op, Action::StopMachine { machine: name }));
        }
        if let Err(why) = self.preflight() {
            return Some(Step::wait(op, format!("not adding {name} yet: {why}")));
        }
        Some(Step::act(
            op,
            Action::AddLearner {
                peer_url: s.machine.peer_url(),
                machine: name,
            },
        ))
    }

    /// Everything is settled (every machine has a voting member, nothing leaving): bring
    /// the count to `replicas` and every machine to the spec's version.
    fn reconcile_size(&self, members: &[Member]) -> Step {
        let spec = self.spec();
        let replicas = spec.replicas as usize;
        let active = self.seen.len();
        let outdated: Vec<&Seen> = self
            .seen
            .iter()
            .filter(|s| self.outdated(s.machine).is_some())
            .collect();
        if active < replicas {
            return self.allocate(self.growth_operation());
        }
        if active > replicas {
            return self.mark_victim(self.shrink_operation(), members);
        }
        let restarts: Vec<&Seen> = self
            .seen
            .iter()
            .filter(|s| self.outdated(s.machine).is_none() && self.restart_asked(s.machine))
            .collect();
        let replace_asked = outdated
            .iter()
            .any(|s| s.machine.requested == Some(MachineRequest::Replace));
        if outdated.is_empty() && !restarts.is_empty() {
            return self.begin_in_place(&restarts);
        }
        if outdated.is_empty() {
            return self
                .advance_ca_rotation()
                .or_else(|| self.advance_road())
                .or_else(|| self.auto_defrag())
                .or_else(|| self.snapshot_upkeep())
                .unwrap_or(Step {
                    because: None,
                    actions: vec![],
                    operation: Operation::Idle,
                    waiting_for: None,
                    blocked: false,
                });
        }
        // A replacement a person asked for is one, under either strategy.
        if spec.rollout.strategy == Strategy::InPlace && !replace_asked {
            let all: Vec<&Seen> = outdated.iter().chain(&restarts).copied().collect();
            return self.begin_in_place(&all);
        }
        if spec.rollout.max_surge >= 1 {
            return self.allocate(Operation::RollingOut);
        }
        self.mark_victim(Operation::RollingOut, members)
    }

    /// With nothing else to do: a scheduled snapshot once `spec.backup.schedule` fired
    /// since the newest, else a test restore of the newest once `verifyEvery` passed
    /// since its last (or it never had one), else the oldest snapshot retention no
    /// longer keeps.
    fn snapshot_upkeep(&self) -> Option<Step> {
        let created = self.created_at_unix_s?;
        let backup = &self.spec().backup;
        let now = self.now_unix_s;
        let newest = self.snapshots.iter().map(|s| s.taken_at_unix_s).max();
        if crate::backup::snapshot_due(backup, newest, created, now) {
            return Some(Step::act(
                Operation::Maintaining,
                Action::TakeSnapshot { before: None },
            ));
        }
        if let Some(s) = crate::backup::verify_due(self.snapshots, backup, now) {
            let id = s.id.clone();
            return Some(Step::act(
                Operation::Maintaining,
                Action::VerifySnapshot { id },
            ));
        }
        let plan = crate::backup::retention_plan(self.snapshots, backup.retention, now);
        plan.into_iter()
            .next()
            .map(|id| Step::act(Operation::Maintaining, Action::PruneSnapshot { id }))
            .or_else(|| self.fenced_upkeep())
    }

    /// A fenced directory kept past `spec.recovery.keepFenced` goes, oldest first.
    fn fenced_upkeep(&self) -> Option<Step> {
        let keep = self.spec().recovery.keep_fenced;
        let old = crate::fenced::prunable(self.fenced, keep, self.now_unix_s)?;
        let name = old.name.clone();
        Some(Step::act(
            Operation::Maintaining,
            Action::PruneFenced { name },
        ))
    }

    fn allocate(&self, op: Operation) -> Step {
        if let Err(why) = self.preflight() {
            return Step::wait(op, format!("not adding a machine yet: {why}"));
        }
        if let Some(why) = self.no_room(op, None) {
            return Step::refuse(op, why);
        }
        Step::act(
            op,
            Action::AllocateMachine {
                bootstrap: false,
                version: self.spec().version,
                remediation: None,
            },
        )
    }

    /// Choose the machine to remove (outdated first, followers before the leader, of up
    /// to date ones the one furthest down the client addresses (`reach::rank`), oldest
    /// first) and record
    /// the intent, if removing it keeps quorum.
    fn mark_victim(&self, op: Operation, _members: &[Member]) -> Step {
        let spec = self.spec();
        let victim = self.seen.iter().min_by_key(|s| {
            let up_to_date = self.outdated(s.machine).is_none();
            let leads = s.member.is_some_and(|m| Some(m.id) == self.leader_id);
            let kept = &self.cp.client_addresses;
            let rank = crate::reach::victim_rank(kept, s.machine, up_to_date);
            let asked = s.machine.requested == Some(MachineRequest::Replace);
            (!asked, up_to_date, leads, rank, s.machine.serial)
        });
        let Some(victim) = victim else {
            return Step::wait(op, "no machine to remove");
        };
        let Some(member) = victim.member else {
            return Step::wait(op, format!("{} has no member yet", victim.machine.name));
        };
        if let Err(why) = self.preflight() {
            return Step::wait(
                op,
                format!("not removing {} yet: {why}", victim.machine.name),
            );
        }
        if let Err(why) = self.safe_to_remove_voter(member.id) {
            let hint = if spec.rollout.max_surge == 0 && self.seen.len() <= spec.replicas as usize {
                " (with maxSurge 0 a control plane needs 3 or more replicas; use maxSurge 1)"
            } else {
                ""
            };
            return Step::refuse(
                op,
                format!("not removing {}: {why}{hint}", victim.machine.name),
            );
        }
        let reason = self
            .outdated(victim.machine)
            .unwrap_or(DeleteReason::ScaleDown);
        Step::act(
            op,
            Action::MarkDeleting {
                machine: victim.machine.name.clone(),
                reason,
                remediation: None,
            },
        )
    }
}
