//! Space upkeep, a rule of `decide` and a plan for `quorum defrag`.
//!
//! A NOSPACE alarm makes etcd refuse every write until a person (or quorum) frees
//! space and disarms it. The repair: compact the keyspace to its current revision (frees
//! the pages old revisions hold; whether it is done is observed), defragment every member
//! that serves, once (followers first, the leader last, each only while the others hold
//! quorum, since a member stalls while its file is rewritten; which were done is the
//! tracker's memory, as sizes cannot tell under the alarm), then disarm the alarm. An
//! alarm that keeps coming back means the live data fills the quota: quorum stops and
//! says so. Without an alarm, a member whose free share of its database passes
//! `spec.maintenance.defragWhenFragmentedAbove` is defragmented the same way, once
//! nothing else is under way.

use crate::decide::*;
use crate::health;
use crate::model::*;

/// Automatic defragmentation leaves a file alone unless it would return at least this
/// much: rewriting a small file costs a stall for nothing.
pub const AUTO_DEFRAG_MIN_FREE_BYTES: u64 = 1 << 20;

/// The alarm that makes etcd refuse writes.
pub const NOSPACE: &str = "NOSPACE";

impl View<'_> {
    /// Answers as itself and knows a leader; alarms allowed (a member with NOSPACE
    /// still serves reads and votes).
    fn serving(&self, s: &Seen<'_>) -> bool {
        match (s.member, s.status()) {
            (Some(m), Some(st)) => st.member_id == m.id && st.leader_id != 0,
            _ => false,
        }
    }

    /// Whether defragmenting `s` keeps quorum: the other voters that serve are a
    /// quorum of all voters. A learner never votes.
    pub(crate) fn defrag_safe(&self, s: &Seen<'_>) -> Result<(), String> {
        let Some(member) = s.member else {
            return Err(format!("{} has no member", s.machine.name));
        };
        if !self.serving(s) {
            return Err(format!("{} does not answer", s.machine.name));
        }
        if member.is_learner {
            return Ok(());
        }
        let voters = self.voters().count();
        let others = self
            .seen
            .iter()
            .filter(|o| o.member.is_some_and(|m| !m.is_learner && m.id != member.id))
            .filter(|o| self.serving(o))
            .count();
        if others < quorum_size(voters) {
            return Err(format!(
                "while {} is defragmented {others} of {voters} voters would serve, below the quorum of {}",
                s.machine.name,
                quorum_size(voters)
            ));
        }
        Ok(())
    }

    /// Members in defragmentation order: followers and learners by serial, the leader
    /// last (its stall costs an election timeout's worth of writes at worst).
    pub(crate) fn defrag_order(&self) -> Vec<&Seen<'_>> {
        let mut out: Vec<&Seen<'_>> = self
            .seen
            .iter()
            .filter(|s| s.member.is_some() && !s.machine.deleting)
            .collect();
        out.sort_by_key(|s| {
            let leads = s.member.is_some_and(|m| Some(m.id) == self.leader_id);
            (leads, s.machine.serial)
        });
        out
    }

    fn free_bytes(s: &Seen<'_>) -> Option<(u64, u64)> {
        let st = s.status()?;
        Some((
            st.db_size_bytes.saturating_sub(st.db_size_in_use_bytes),
            st.db_size_bytes,
        ))
    }

    fn defragment(&self, s: &Seen<'_>, op: Operation) -> Step {
        match self.defrag_safe(s) {
            Ok(()) => Step::act(
                op,
                Action::Defragment {
                    machine: s.machine.name.clone(),
                },
            ),
            Err(why) => Step::refuse(op, format!("not defragmenting {}: {why}", s.machine.name)),
        }
    }

    /// The members with a NOSPACE alarm: from the leader's alarm list (it has the alarm
    /// of a member that does not answer or was removed) and from the members' statuses.
    fn nospace_members(&self) -> Vec<u64> {
        let listed = self
            .alarms
            .iter()
            .filter(|(_, a)| a == NOSPACE)
            .map(|(id, _)| *id);
        let reported = self.seen.iter().filter_map(|s| {
            let st = s.status()?;
            st.alarms
                .iter()
                .any(|a| a == NOSPACE)
                .then_some(st.member_id)
        });
        let mut out: Vec<u64> = listed.chain(reported).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The NOSPACE repair: compact, defragment each member that serves, disarm.
    pub(crate) fn repair_nospace(&self) -> Option<Step> {
        let alarmed = self.nospace_members();
        if alarmed.is_empty() {
            return None;
        }
        let op = Operation::Maintaining;
        if self.nospace_recurrences >= health::NOSPACE_MAX_RECURRENCES {
            return Some(Step::refuse(
                op,
                format!(
                    "NOSPACE came back {} times in {} min: the live data fills the quota, and compacting and defragmenting again cannot help. Raise spec.maintenance.quotaBackendBytes (members take it at their next start) or delete data, then `quorum etcdctl {} -- alarm disarm`",
                    self.nospace_recurrences,
                    health::NOSPACE_WINDOW_S / 60,
                    self.cp.name
                ),
            ));
        }
        match self.compacted {
            None => {
                return Some(Step::wait(
                    op,
                    "NOSPACE: checking whether the keyspace is compacted",
                ))
            }
            Some(false) => {
                let Some(leader) = self.leader_status() else {
                    return Some(Step::wait(op, "NOSPACE: waiting for a leader to compact"));
                };
                return Some(Step::act(
                    op,
                    Action::Compact {
                        revision: leader.revision,
                    },
                ));
            }
            Some(true) => {}
        }
        // Each member that serves, once (a member that does not is skipped: it cannot
        // be defragmented, and is repaired as a member).
        let next = self
            .defrag_order()
            .into_iter()
            .find(|s| self.serving(s) && !self.defragmented.contains(&s.machine.name));
        if let Some(s) = next {
            return Some(self.defragment(s, op));
        }
        let actions = alarmed
            .into_iter()
            .map(|member_id| Action::DisarmAlarm {
                member_id,
                alarm: NOSPACE.to_string(),
            })
            .collect();
        Some(Step::many(op, actions))
    }

    /// Automatic defragmentation once a member's free share passes the spec's
    /// threshold (0: off). Only healthy members, one at a time.
    pub(crate) fn auto_defrag(&self) -> Option<Step> {
        let percent = u64::from(self.spec().maintenance.defrag_when_fragmented_above.0);
        if percent == 0 {
            return None;
        }
        let s = self.defrag_order().into_iter().find(|s| {
            s.member.is_some_and(|m| self.healthy(m))
                && Self::free_bytes(s).is_some_and(|(free, size)| {
                    free >= AUTO_DEFRAG_MIN_FREE_BYTES
                        && free.saturating_mul(100) > size.saturating_mul(percent)
                })
        })?;
        Some(self.defragment(s, Operation::Maintaining))
    }
}

/// `quorum defrag`'s plan: the machines to defragment, in order (followers and
/// learners first, the leader last). Before each, `defrag_check` says whether it is
/// safe on a fresh observation.
pub fn defrag_plan(cp: &ControlPlane, machines: &[Machine], observed: &Observation) -> Vec<String> {
    let view = View::new(cp, machines, observed);
    view.defrag_order()
        .into_iter()
        .map(|s| s.machine.name.clone())
        .collect()
}

/// Whether defragmenting `machine` now keeps quorum (the others that serve are a
/// quorum of the voters), on a fresh observation.
pub fn defrag_check(
    cp: &ControlPlane,
    machines: &[Machine],
    observed: &Observation,
    machine: &str,
) -> Result<(), String> {
    let view = View::new(cp, machines, observed);
    if observed.members.is_none() {
        return Err("no member answered as leader".into());
    }
    let s = view
        .seen
        .iter()
        .find(|s| s.machine.name == machine)
        .ok_or_else(|| format!("no machine {machine}"))?;
    view.defrag_safe(s)
}
