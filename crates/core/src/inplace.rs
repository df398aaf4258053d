//! The in-place step (`rollout.strategy: InPlace`): the same machine, data and identity,
//! restarted on the new binary, one member at a time, followers first and the leader
//! last, with no membership change (etcd's own upgrade procedure).
//!
//! Per machine, every phase recorded before its side effects:
//! 1. preflight (every voter healthy and answering a quorum read, no learner, no alarm,
//!    3 or more voters, the cluster survives this member being down), then
//!    `BeginInPlace` records phase `Draining`: the machine leaves the client endpoints;
//! 2. leadership moves off it; after the drain (the pacing's, as for a removal) it is
//!    stopped (should the cluster no longer spare it by then, the step is abandoned:
//!    it serves again, and begins afresh once every member is healthy);
//! 3. `SetInPlacePhase(Restarting, new)` records the new binary, then it is started on
//!    the same data directory;
//! 4. once it reports the new version, is healthy and has caught up with the leader
//!    (`MAX_CATCH_UP_LAG_ENTRIES`), `EndInPlace(Done)` puts it back in the endpoints.
//!
//! A member that does not come up within `inPlace.timeout` is rolled back (phase
//! `RollingBack`: the previous binary recorded, the new one stopped, the old one
//! started) while the cluster version is still the old one, and the rollout stops
//! (`RolledBack`) until the user retries. Once the cluster version has moved, no binary
//! can go back below it: the member is left to remediation (a replacement on the new
//! version), and undoing the upgrade is a restore from a snapshot.
//!
//! What the rest of `decide` owes this rule: a machine out of service in place is never
//! a leader transferee nor in the endpoints, and `restart_stopped` leaves its starts to
//! this rule (it would start the wrong binary while draining).

use crate::decide::*;
use crate::model::*;
use crate::version::Version;

/// A restarted member is caught up when its applied index is at most this far behind
/// the leader's: about 2 s of writes at the benchmark's 500 ops/s, gone in milliseconds
/// once it serves, and small against `health::MAX_APPLY_LAG_ENTRIES`.
pub const MAX_CATCH_UP_LAG_ENTRIES: u64 = 1_000;

/// The fewest voters an in-place step runs with: the restarting member is down, and
/// the others must keep a quorum with a member to spare for a leader move.
pub const MIN_IN_PLACE_VOTERS: usize = 3;

impl<'a> View<'a> {
    /// Carry on with a machine's in-place step, or forget one that no longer applies.
    pub(crate) fn continue_in_place(&self) -> Option<Step> {
        for s in self.seen.iter().filter(|s| !s.machine.deleting) {
            let Some(ip) = &s.machine.in_place else {
                continue;
            };
            let step = match ip.phase {
                InPlacePhase::Draining => Some(self.drain_in_place(s, ip)),
                InPlacePhase::Restarting => self.restart_in_place(s, ip),
                InPlacePhase::RollingBack => self.roll_back_in_place(s, ip),
                InPlacePhase::RolledBack => self.forget_rolled_back(s, ip),
            };
            if step.is_some() {
                return step;
            }
        }
        None
    }

    fn end(&self, s: &Seen<'_>, outcome: InPlaceOutcome) -> Step {
        Step::act(
            Operation::RollingOut,
            Action::EndInPlace {
                machine: s.machine.name.clone(),
                outcome,
            },
        )
    }

    /// Phase `Draining`: leadership off it, then stop it (the pacing holds the stop
    /// until the drain has passed), then record the new binary.
    fn drain_in_place(&self, s: &Seen<'_>, ip: &InPlace) -> Step {
        let op = Operation::RollingOut;
        let name = &s.machine.name;
        // Nothing happened to it yet but leaving the endpoints: a version changed since
        // is a new decision, taken from the start.
        if ip.to != self.spec().version && !ip.reason.keeps_version() {
            return self.end(s, InPlaceOutcome::Abandoned);
        }
        if !s.running() {
            if self.started_this_second(s) {
                return Step::wait(
                    op,
                    format!("{name} stopped; its restart is recorded at the next second"),
                );
            }
            return Step::act(
                op,
                Action::SetInPlacePhase {
                    machine: name.clone(),
                    phase: InPlacePhase::Restarting,
                    version: ip.to,
                    failure: None,
                    ca_step: self.cp.ca_step_now(),
                },
            );
        }
        if let Some(member) = s.member {
            // The cluster cannot spare it now (another member down, hung, or under an
            // alarm): nothing has happened to it yet but leaving the endpoints, so the
            // step is forgotten and it serves again; it begins afresh once every member
            // is healthy. Refusing here instead held up every later rule, among them
            // the remediation and the NOSPACE repair that bring the other member back:
            // the rollout waited for them, and they for it (found by the simulator).
            if self.survives_down(member).is_err() {
                return self.end(s, InPlaceOutcome::Abandoned);
            }
            if self.leader_id == Some(member.id) {
                return self.move_leader_off(op, member, name);
            }
        }
        Step::act(
            op,
            Action::StopMachine {
                machine: name.clone(),
            },
        )
    }

    /// Would a quorum of healthy voters remain with `member` down?
    fn survives_down(&self, member: &Member) -> Result<(), String> {
        let voters = self.voters().count();
        let healthy = self.healthy_voters_except(Some(member.id));
        if healthy < quorum_size(voters) {
            return Err(format!(
                "with it down {healthy} of {voters} voters would be healthy, below the quorum of {}",
                quorum_size(voters)
            ));
        }
        Ok(())
    }

    /// Whether it was started within the current second. A phase recorded now would
    /// take that start for its own (`since_unix_s` has whole seconds) and wait out its
    /// backoff before ever starting the phase's binary: the new binary of a member that
    /// had crashed just before its step was then never tried, and the step rolled back
    /// at its deadline (found by the simulator). The phase is recorded a second later.
    fn started_this_second(&self, s: &Seen<'_>) -> bool {
        s.obs
            .is_some_and(|o| o.starts_unix_s.iter().any(|t| *t >= self.now_unix_s))
    }

    /// Start it if it has not been started in this phase (or, after a crash, once its
    /// restart backoff has passed); `None` when its data is gone (remediation's case).
    fn start_in_place(&self, s: &Seen<'_>, ip: &InPlace) -> Option<Step> {
        if self.data_problem(s).is_some() {
            return None;
        }
        let starts = s.obs.map_or(&[][..], |o| &o.starts_unix_s[..]);
        let started_in_phase = starts.iter().any(|t| *t >= ip.since_unix_s);
        if started_in_phase && self.restart_wait_s(s) > 0 {
            return Some(Step::wait(
                Operation::RollingOut,
                format!(
                    "{} exited on etcd {}; next start in {}s",
                    s.machine.name,
                    s.machine.version,
                    self.restart_wait_s(s)
                ),
            ));
        }
        Some(Step::act(
            Operation::RollingOut,
            Action::StartMachine {
                machine: s.machine.name.clone(),
                state: ClusterState::Existing,
                initial_cluster: self.initial_cluster(),
                expect: s.obs.and_then(|o| o.marker),
            },
        ))
    }

    /// Why the member is not yet serving on `version` (`None`: it is: running that
    /// binary, reporting that version, healthy and caught up with the leader).
    fn not_up_on(&self, s: &Seen<'_>, version: Version) -> Option<String> {
        let name = &s.machine.name;
        if !s.running() {
            return Some(format!("{name} is not running"));
        }
        let Some(st) = s.status() else {
            return Some(format!("{name} does not answer yet"));
        };
        if st.version != Some(version) {
            return Some(match st.version {
                Some(v) => format!("{name} reports etcd {v}, not {version}"),
                None => format!("{name} reports no version"),
            });
        }
        if !s.member.is_some_and(|m| self.healthy(m)) {
            return Some(format!("{name} is not healthy yet"));
        }
        let leader = self.leader_status()?;
        let behind = leader
            .raft_applied_index
            .saturating_sub(st.raft_applied_index);
        if behind > MAX_CATCH_UP_LAG_ENTRIES {
            return Some(format!("{name} is catching up ({behind} entries behind)"));
        }
        None
    }

    fn phase_age_s(&self, ip: &InPlace) -> i64 {
        self.now_unix_s.saturating_sub(ip.since_unix_s).max(0)
    }

    fn timed_out(&self, ip: &InPlace) -> bool {
        let timeout_s =
            i64::try_from(self.spec().rollout.in_place.timeout.as_secs()).unwrap_or(i64::MAX);
        self.phase_age_s(ip) > timeout_s
    }

    /// Phase `Restarting`: start it on the new binary, wait until it serves, then put
    /// it back; past the deadline, roll it back while the cluster version allows.
    fn restart_in_place(&self, s: &Seen<'_>, ip: &InPlace) -> Option<Step> {
        let name = &s.machine.name;
        let Some(why) = self.not_up_on(s, ip.to) else {
            return Some(self.end(s, InPlaceOutcome::Done));
        };
        if self.timed_out(ip) {
            let failure = format!(
                "not serving on etcd {} after {}s: {why}",
                ip.to,
                self.phase_age_s(ip)
            );
            return match self.rollback_allowed(ip) {
                Ok(()) if self.started_this_second(s) => Some(Step::wait(
                    Operation::RollingOut,
                    format!("{failure}; its rollback is recorded at the next second"),
                )),
                Ok(()) => Some(Step::act(
                    Operation::RollingOut,
                    Action::SetInPlacePhase {
                        machine: name.clone(),
                        phase: InPlacePhase::RollingBack,
                        version: ip.from,
                        failure: Some(failure),
                        ca_step: None,
                    },
                )),
                // The cluster version has moved: no binary below it starts. Left to
                // remediation, which replaces it on the new version.
                Err(_) => None,
            };
        }
        if !s.running() {
            return self.start_in_place(s, ip);
        }
        let timeout_s = self.spec().rollout.in_place.timeout.as_secs();
        Some(Step::wait(
            Operation::RollingOut,
            format!(
                "waiting for {name} to serve on etcd {} ({why}; {}s of {timeout_s}s)",
                ip.to,
                self.phase_age_s(ip)
            ),
        ))
    }

    /// The previous binary may go back while the cluster version is not above it (a
    /// patch step, or a minor step before every member ran the new minor).
    pub(crate) fn rollback_allowed(&self, ip: &InPlace) -> Result<(), String> {
        match self.cluster_version {
            Some(cv) if cv.minor_line() <= ip.from.minor_line() => Ok(()),
            Some(cv) => Err(format!(
                "the cluster version is already {}.{}: etcd {} cannot run it; only a restore from a snapshot goes back",
                cv.major, cv.minor, ip.from
            )),
            None => Err("the cluster version is unknown".into()),
        }
    }

    /// Phase `RollingBack`: stop the new binary, start the old one, and once it serves
    /// again stop the rollout. Past a second deadline it is left to remediation.
    ///
    /// The cluster version is looked at again before each of these: it can move after
    /// the rollback was recorded (the member, cut off until then, came back up on the new
    /// binary beside peers all on it), and then the old binary would never start again
    /// (etcd refuses to run below the cluster version). The member goes on with the new
    /// binary instead, under a fresh deadline (found by the model check). Once it is
    /// stopped, the cluster version cannot move (etcd moves it only with every member
    /// answering), so the old binary's start is safe.
    fn roll_back_in_place(&self, s: &Seen<'_>, ip: &InPlace) -> Option<Step> {
        let name = &s.machine.name;
        let op = Operation::RollingOut;
        let moved = self
            .cluster_version
            .is_some_and(|cv| cv.minor_line() > ip.from.minor_line());
        if moved {
            return Some(Step::act(
                op,
                Action::SetInPlacePhase {
                    machine: name.clone(),
                    phase: InPlacePhase::Restarting,
                    version: ip.to,
                    failure: None,
                    ca_step: self.cp.ca_step_now(),
                },
            ));
        }
        let allowed = self.rollback_allowed(ip);
        let not_yet = |why: String| {
            Some(Step::wait(
                Operation::RollingOut,
                format!("not rolling {name} back yet: {why}"),
            ))
        };
        // The provider's record of the running binary; without one, its own answer.
        let running = s
            .obs
            .and_then(|o| o.running_version)
            .or_else(|| s.status().and_then(|st| st.version));
        let running_new = s.running() && running == Some(ip.to) && ip.to != ip.from;
        if running_new {
            if let Err(why) = allowed {
                return not_yet(why);
            }
            return Some(Step::act(
                op,
                Action::StopMachine {
                    machine: name.clone(),
                },
            ));
        }
        let Some(why) = self.not_up_on(s, ip.from) else {
            // A restart a person asked for has no other binary to keep the cluster
            // off: back and healthy, there is no rollout to stop, and the step is
            // forgotten (its rollback is in the history).
            if ip.reason == DeleteReason::Requested && ip.to == ip.from {
                return Some(self.end(s, InPlaceOutcome::Abandoned));
            }
            return Some(self.end(s, InPlaceOutcome::RolledBack));
        };
        if self.timed_out(ip) {
            return None;
        }
        if !s.running() {
            if let Err(why) = allowed {
                return not_yet(why);
            }
            return self.start_in_place(s, ip);
        }
        Some(Step::wait(
            op,
            format!(
                "waiting for {name} to serve again on etcd {} ({why})",
                ip.from
            ),
        ))
    }

    /// Phase `RolledBack`: the memory that stops the rollout, forgotten once the spec no
    /// longer asks for that version in place.
    fn forget_rolled_back(&self, s: &Seen<'_>, ip: &InPlace) -> Option<Step> {
        let spec = self.spec();
        let wanted = spec.rollout.strategy == Strategy::InPlace
            && (ip.to == spec.version || ip.reason.keeps_version());
        (!wanted).then(|| self.end(s, InPlaceOutcome::Abandoned))
    }

    /// The rollout stopped by a rollback, if one did: its refusal.
    pub(crate) fn stopped_rollout(&self) -> Option<Step> {
        let (s, ip) = self.seen.iter().find_map(|s| {
            let ip = s.machine.in_place.as_ref()?;
            (ip.phase == InPlacePhase::RolledBack).then_some((s, ip))
        })?;
        Some(Step::refuse(
            Operation::RollingOut,
            format!(
                "rollout stopped: {} was rolled back to etcd {} ({}); find the cause with `quorum events {}`, then `quorum upgrade {} --retry`, or choose another version",
                s.machine.name,
                ip.from,
                ip.failure.as_deref().unwrap_or("it did not serve on the new binary"),
                self.cp.name,
                self.cp.name
            ),
        ))
    }

    /// Whether the cluster may lose a member for a restart now: the preflight holds and
    /// every voter answered a quorum read.
    fn ready_to_restart(&self) -> Result<(), String> {
        self.preflight()?;
        let unread = self.seen.iter().find(|s| {
            s.member.is_some_and(|m| !m.is_learner)
                && s.obs.and_then(|o| o.quorum_read) != Some(true)
        });
        match unread {
            Some(u) => Err(format!("{} has not answered a quorum read", u.machine.name)),
            None => Ok(()),
        }
    }

    /// Begin the in-place step of the next outdated machine: followers first (oldest
    /// first), the leader last.
    pub(crate) fn begin_in_place(&self, outdated: &[&Seen<'a>]) -> Step {
        let op = Operation::RollingOut;
        if let Some(stopped) = self.stopped_rollout() {
            return stopped;
        }
        if let Some(busy) = self
            .seen
            .iter()
            .find(|s| s.machine.in_place_out_of_service())
        {
            return Step::wait(
                op,
                format!("{} is still being restarted in place", busy.machine.name),
            );
        }
        let voters = self.voters().count();
        if voters < MIN_IN_PLACE_VOTERS {
            return Step::refuse(
                op,
                format!(
                    "an in-place rollout needs {MIN_IN_PLACE_VOTERS} or more voters (a restarting member is down, and with {voters} the rest would not keep a quorum); use --strategy Replace"
                ),
            );
        }
        let Some(victim) = outdated.iter().min_by_key(|s| {
            let leads = s.member.is_some_and(|m| Some(m.id) == self.leader_id);
            (leads, s.machine.serial)
        }) else {
            return Step::wait(op, "nothing to upgrade");
        };
        let name = &victim.machine.name;
        if let Err(why) = self.ready_to_restart() {
            return Step::wait(op, format!("not restarting {name} yet: {why}"));
        }
        let Some(member) = victim.member else {
            return Step::wait(op, format!("{name} has no member yet"));
        };
        if let Err(why) = self.survives_down(member) {
            return Step::refuse(op, format!("not restarting {name}: {why}"));
        }
        let reason = match self.outdated(victim.machine) {
            Some(r) => r,
            None if self.restart_asked(victim.machine) => DeleteReason::Requested,
            None => DeleteReason::Outdated,
        };
        let to = if reason.keeps_version() {
            victim.machine.version
        } else {
            self.spec().version
        };
        Step::act(
            op,
            Action::BeginInPlace {
                machine: name.clone(),
                to,
                reason,
            },
        )
    }
}
