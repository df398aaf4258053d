//! The repair rules of `decide`: what is wrong with each member (the health model's
//! `Problem`s, judged here from one observation), whether a stopped process may be
//! started (never on lost or foreign data, and only after its restart backoff), the
//! identity markers of data directories, and remediation by replacement.
//!
//! Remediation replaces one member at a time, never while another machine is leaving
//! or a learner is pending (those rules come first in `decide`'s chain), never when
//! the quorum projection says the removal could lose quorum, and within
//! `spec.remediation`'s limits. The failed member is removed first (`health::
//! repair_order`), its record kept until its replacement is recorded, so the slot's
//! retry count survives a crash in between.

use crate::decide::*;
use crate::health::{self, Problem, RepairOrder};
use crate::model::*;
use std::collections::BTreeMap;

impl<'a> View<'a> {
    /// The cluster id the leader answered with (0: unknown).
    pub(crate) fn cluster_id(&self) -> u64 {
        self.leader_status().map_or(0, |st| st.cluster_id)
    }

    /// Every machine's problems now (machines with a member, not leaving).
    pub(crate) fn problems(&self) -> BTreeMap<String, Vec<Problem>> {
        self.seen
            .iter()
            .filter(|s| !s.machine.deleting)
            .filter_map(|s| {
                let ps = self.problems_of(s);
                (!ps.is_empty()).then(|| (s.machine.name.clone(), ps))
            })
            .collect()
    }

    pub(crate) fn problems_of(&self, s: &Seen<'_>) -> Vec<Problem> {
        let Some(member) = s.member else {
            return self.problems_without_members(s);
        };
        let mut out: Vec<Problem> = self.data_problem(s).into_iter().collect();
        if !s.running() && !out.is_empty() {
            // Not started on purpose: the data is the problem, not the process.
            return out;
        }
        if !s.running() {
            out.extend(self.stopped_problem(s, member));
            return out;
        }
        let Some(st) = s.status() else {
            out.push(Problem::Unreachable);
            return out;
        };
        let cluster = self.cluster_id();
        if st.member_id != member.id || (cluster != 0 && st.cluster_id != cluster) {
            out.push(Problem::WrongIdentity {
                member_id: st.member_id,
                cluster_id: st.cluster_id,
            });
            return out;
        }
        out.extend(self.serving_problems(s, member, st));
        out
    }

    /// The problem of a member whose process is not running: exited, or in a crash
    /// loop; none for one that never ran (it is due a start).
    fn stopped_problem(&self, s: &Seen<'_>, member: &Member) -> Option<Problem> {
        // Planned restarts (an in-place step's, a CA rotation's) are no crash.
        let starts = s
            .obs
            .map(MachineObservation::crash_starts)
            .unwrap_or_default();
        let mut recent = health::recent_starts(&starts, self.now_unix_s);
        // Stopped on purpose for an in-place step: the starts of earlier steps (a CA
        // rotation restarts each member three times in a minute) are no crash loop;
        // only those since this phase began count.
        if let Some(ip) = s
            .machine
            .in_place
            .as_ref()
            .filter(|_| s.machine.in_place_out_of_service())
        {
            recent = starts
                .iter()
                .filter(|t| **t >= ip.since_unix_s)
                .count()
                .min(recent);
        }
        // A member that was added (or listed in the initial cluster) but never started
        // is not down: it is due a start.
        if !has_run(member) && recent == 0 {
            return None;
        }
        Some(if recent >= health::CRASH_LOOP_STARTS {
            Problem::CrashLoop {
                starts: recent as u32,
            }
        } else {
            Problem::Exited
        })
    }

    /// The problems a member that answers as itself reports: no leader, no quorum
    /// read, a log behind the leader's, alarms.
    fn serving_problems(&self, s: &Seen<'_>, member: &Member, st: &EndpointStatus) -> Vec<Problem> {
        let mut out = Vec::new();
        if st.leader_id == 0 {
            out.push(Problem::NoLeader);
        }
        if s.obs.and_then(|o| o.quorum_read) == Some(false) {
            out.push(Problem::NoQuorumRead);
        }
        if !member.is_learner {
            if let Some(leader) = self.leader_status() {
                let behind = leader.raft_index.saturating_sub(st.raft_applied_index);
                if behind > health::MAX_APPLY_LAG_ENTRIES {
                    out.push(Problem::Lagging { entries: behind });
                }
            }
        }
        for alarm in &st.alarms {
            out.push(Problem::Alarm {
                alarm: alarm.clone(),
            });
        }
        out
    }

    /// With no member list (quorum lost, or an election), a machine that has run is
    /// judged by its process and its endpoint alone: membership is unknown, so nothing
    /// about its data or its log can be said.
    fn problems_without_members(&self, s: &Seen<'_>) -> Vec<Problem> {
        let Some(obs) = s.obs else {
            return vec![];
        };
        // A machine that never ran is due a start, not down. One that ran (its start
        // history outlives its data) and has none now is down: with no leader to ask,
        // that is all that can be known of it, and `QuorumLost` counts on it.
        let ran = obs.has_data || obs.marker.is_some() || !obs.starts_unix_s.is_empty();
        if self.members.is_some() || !ran {
            return vec![];
        }
        if !s.running() {
            // Its data gone: what stops it from coming back (a start would not bring
            // it into the cluster), so the health says that, not "not running".
            if !obs.has_data {
                return vec![Problem::DataLost];
            }
            let recent = health::recent_starts(&obs.crash_starts(), self.now_unix_s);
            return vec![if recent >= health::CRASH_LOOP_STARTS {
                Problem::CrashLoop {
                    starts: recent as u32,
                }
            } else {
                Problem::Exited
            }];
        }
        match s.status() {
            None => vec![Problem::Unreachable],
            Some(st) if st.leader_id == 0 => vec![Problem::NoLeader],
            Some(_) => vec![],
        }
    }

    /// Data that must never be started as this member: gone although its member ran
    /// before (etcd would panic on a log it no longer has, or with `new` bootstrap a
    /// cluster of its own), or marked as another member's or another cluster's.
    pub(crate) fn data_problem(&self, s: &Seen<'_>) -> Option<Problem> {
        let member = s.member?;
        let obs = s.obs?;
        if !obs.has_data && has_run(member) {
            return Some(Problem::DataLost);
        }
        let marker = obs.marker?;
        let cluster = self.cluster_id();
        let foreign =
            marker.member_id != member.id || (cluster != 0 && marker.cluster_id != cluster);
        foreign.then_some(Problem::DataForeign { marker })
    }

    /// Without a member list (no leader answered), whether a machine's data is another
    /// cluster's: its marker names a cluster that more of the other machines (by their
    /// markers or their answers) contradict than confirm.
    pub(crate) fn foreign_without_leader(&self, s: &Seen<'_>) -> bool {
        let Some(mine) = s.obs.and_then(|o| o.marker) else {
            return false;
        };
        let (mut agree, mut differ) = (0, 0);
        for o in self
            .seen
            .iter()
            .filter(|o| o.machine.name != s.machine.name)
        {
            let marked = o.obs.and_then(|x| x.marker).map(|m| m.cluster_id);
            let answered = o.status().map(|st| st.cluster_id).filter(|c| *c != 0);
            match marked.or(answered) {
                Some(c) if c == mine.cluster_id => agree += 1,
                Some(_) => differ += 1,
                None => {}
            }
        }
        differ > agree
    }

    /// Seconds until a stopped machine may be started again (0: now).
    pub(crate) fn restart_wait_s(&self, s: &Seen<'_>) -> i64 {
        // The backoff doubles with each start that was not planned.
        let starts = s
            .obs
            .map(MachineObservation::crash_starts)
            .unwrap_or_default();
        let Some(last) = starts.iter().max() else {
            return 0;
        };
        let backoff = health::restart_backoff_s(health::recent_starts(&starts, self.now_unix_s));
        (last.saturating_add(backoff) - self.now_unix_s).max(0)
    }

    /// Markers for data directories whose member answered as itself but that carry
    /// none yet (new members, and data from before markers existed).
    pub(crate) fn mark_data(&self) -> Option<Step> {
        let cluster = self.cluster_id();
        if cluster == 0 {
            return None;
        }
        let actions: Vec<Action> = self
            .seen
            .iter()
            .filter(|s| !s.machine.deleting && s.running())
            .filter_map(|s| {
                let member = s.member?;
                let st = s.status()?;
                let obs = s.obs?;
                let mine = st.member_id == member.id && st.cluster_id == cluster;
                (mine && obs.has_data && obs.marker.is_none()).then(|| Action::WriteMarker {
                    machine: s.machine.name.clone(),
                    marker: DataMarker {
                        cluster_id: cluster,
                        member_id: member.id,
                    },
                })
            })
            .collect();
        (!actions.is_empty()).then(|| Step::many(Operation::Maintaining, actions))
    }

    /// How long `name` has had a problem without a break (0 when the controller has no
    /// memory of it: a reader, or a controller that just took over).
    pub(crate) fn unhealthy_for_s(&self, name: &str) -> i64 {
        self.problem_since
            .get(name)
            .map_or(0, |since| self.now_unix_s.saturating_sub(*since).max(0))
    }

    /// Whether `s` has a remediable problem that has lasted `unhealthyAfter`.
    pub(crate) fn failed_long_enough(&self, s: &Seen<'_>) -> bool {
        let after_s = self.spec().remediation.unhealthy_after.as_secs() as i64;
        !s.machine.deleting
            && self.problems_of(s).iter().any(Problem::remediable)
            && self.unhealthy_for_s(&s.machine.name) >= after_s
    }

    /// Replace a member whose remediable problem has lasted `unhealthyAfter`.
    pub(crate) fn remediate(&self) -> Option<Step> {
        let spec = &self.spec().remediation;
        let after_s = spec.unhealthy_after.as_secs() as i64;
        let problems = self.problems();
        let failing: Vec<(&Seen<'a>, &Vec<Problem>)> = self
            .seen
            .iter()
            .filter_map(|s| problems.get(&s.machine.name).map(|ps| (s, ps)))
            .filter(|(_, ps)| ps.iter().any(Problem::remediable))
            .collect();
        let due = failing
            .iter()
            .find(|(s, _)| self.unhealthy_for_s(&s.machine.name) >= after_s);
        if let Some(&(s, ps)) = due {
            return self.remediate_one(s, ps);
        }
        // Nothing has failed long enough: say what is wrong and when it is replaced (a
        // wait, so no membership change starts meanwhile).
        let (s, ps) = *failing.first()?;
        let name = &s.machine.name;
        let left = after_s - self.unhealthy_for_s(name);
        let mut why = format!("{name}: {}", words(ps));
        if !s.running() {
            let wait = self.restart_wait_s(s);
            if wait > 0 && self.data_problem(s).is_none() {
                why.push_str(&format!("; next start in {wait}s"));
            }
        }
        Some(Step::wait(
            Operation::Repairing,
            format!("{why}; replaced unless it recovers within {left}s"),
        ))
    }

    pub(crate) fn remediate_one(&self, s: &Seen<'a>, ps: &[Problem]) -> Option<Step> {
        let name = &s.machine.name;
        let op = Operation::Repairing;
        let member = s.member?;
        let attempt = match self.remediation_attempt(s, ps) {
            Ok(attempt) => attempt,
            Err(step) => return Some(step),
        };
        if !member.is_learner {
            if let Err(why) = self.safe_to_remove_voter(member.id) {
                return Some(Step::refuse(
                    op,
                    format!(
                        "not remediating {name} ({}): {why}; quorum replaces nothing that could lose quorum. Bring a member back (start its host or process) and the rest is repaired",
                        words(ps)
                    ),
                ));
            }
            let voters = self.voters().count();
            let healthy = self.healthy_voters_except(None);
            // `health::remove_first_never_keeps_less` proves removal first never keeps a
            // smaller margin, so there is no add-first path to take.
            debug_assert_eq!(
                health::repair_order(voters, healthy.min(voters - 1)),
                RepairOrder::RemoveFirst
            );
        }
        let unhealthy_s = self.unhealthy_for_s(name);
        Some(Step::act(
            op,
            Action::MarkDeleting {
                machine: name.clone(),
                reason: DeleteReason::Unhealthy,
                remediation: Some(Remediation {
                    machine: name.clone(),
                    attempt,
                    at_unix_s: self.now_unix_s,
                    reason: format!("{} for {unhealthy_s}s", words(ps)),
                }),
            },
        ))
    }

    /// Which remediation of its slot this one would be (1 after a healthy period), or
    /// the step instead: refused past `maxRetry`, or waiting out `retryPeriod`.
    fn remediation_attempt(&self, s: &Seen<'a>, ps: &[Problem]) -> Result<u32, Step> {
        let spec = &self.spec().remediation;
        let name = &s.machine.name;
        let op = Operation::Repairing;
        let Some(prev) = s.machine.remediation.as_ref().filter(|prev| {
            self.now_unix_s - prev.at_unix_s < spec.min_healthy_period.as_secs() as i64
        }) else {
            return Ok(1);
        };
        let ago = self.now_unix_s - prev.at_unix_s;
        if prev.attempt > spec.max_retry {
            return Err(Step::refuse(
                op,
                format!(
                    // No figure that changes from one pass to the next (how long ago):
                    // each distinct refusal is recorded once.
                    "not remediating {name}: its slot was replaced {} time{} in a row within minHealthyPeriod {}, and remediation.maxRetry is {}. Find the cause (`quorum events {cp}`, the machine's etcd.log), then raise spec.remediation.maxRetry, or replace it by hand",
                    prev.attempt,
                    if prev.attempt == 1 { "" } else { "s" },
                    spec.min_healthy_period,
                    spec.max_retry,
                    cp = self.cp.name,
                ),
            ));
        }
        let period_s = spec.retry_period.as_secs() as i64;
        if ago < period_s {
            return Err(Step::wait(
                op,
                format!(
                    "{name}: {}; replaced again in {}s (remediation.retryPeriod {})",
                    words(ps),
                    period_s - ago,
                    spec.retry_period
                ),
            ));
        }
        Ok(prev.attempt + 1)
    }

    /// A remediated machine whose member is gone and whose process is stopped: record
    /// its replacement (carrying the slot's retry count) before its own record goes,
    /// unless one was recorded already or the spec no longer wants the machine.
    pub(crate) fn replacement_for(&self, s: &Seen<'a>) -> Option<Action> {
        let rec = s.machine.remediation.as_ref()?;
        if rec.machine != s.machine.name {
            return None;
        }
        let replaced = self.seen.iter().any(|o| {
            o.machine
                .remediation
                .as_ref()
                .is_some_and(|r| r.machine == s.machine.name && o.machine.name != s.machine.name)
        });
        let staying = self.seen.iter().filter(|o| !o.machine.deleting).count();
        if replaced || staying >= self.spec().replicas as usize {
            return None;
        }
        Some(Action::AllocateMachine {
            bootstrap: false,
            version: self.spec().version,
            remediation: Some(rec.clone()),
        })
    }

    /// A remediation under way: a machine leaving to be replaced, or a replacement that
    /// is not a healthy voter yet.
    pub(crate) fn remediating(&self) -> Option<String> {
        self.seen.iter().find_map(|s| {
            let rec = s.machine.remediation.as_ref()?;
            if rec.machine == s.machine.name {
                return s.machine.deleting.then(|| {
                    format!(
                        "replacing {} (attempt {}): {}",
                        rec.machine, rec.attempt, rec.reason
                    )
                });
            }
            let voting = s.member.is_some_and(|m| !m.is_learner && self.healthy(m));
            (!voting).then(|| {
                format!(
                    "{} replaces {} (attempt {}): {}",
                    s.machine.name, rec.machine, rec.attempt, rec.reason
                )
            })
        })
    }
}

/// Whether a member has run: it published its client URLs (etcd lists a member added
/// by `MemberAdd` without a name or client URLs, and one of the initial cluster with its
/// name from `--initial-cluster` but no client URLs, until each first starts).
pub(crate) fn has_run(member: &Member) -> bool {
    !member.client_urls.is_empty()
}

/// Problems as one phrase: "unreachable, a quorum read through it timed out".
pub(crate) fn words(ps: &[Problem]) -> String {
    ps.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
