//! What a decision reports besides its step: the conditions (each with the sentence
//! that explains it) and the client endpoints.

use crate::decide::*;
use crate::model::*;

impl View<'_> {
    pub(crate) fn conditions(&self, step: &Step) -> Vec<Condition> {
        let mut out = vec![
            self.available_condition(),
            self.healthy_condition(),
            self.up_to_date_condition(),
            self.scaled_condition(),
            Condition {
                kind: ConditionKind::Blocked,
                status: step.blocked,
                message: if step.blocked {
                    step.waiting_for.clone().unwrap_or_default()
                } else {
                    "nothing refused".into()
                },
            },
            self.degraded_condition(),
        ];
        let remediating = self.remediating();
        out.push(Condition {
            kind: ConditionKind::Remediating,
            status: remediating.is_some(),
            message: remediating.unwrap_or_else(|| "no member is being replaced".into()),
        });
        if let Some(warning) = self.spec().version.known_bug_warning() {
            out.push(Condition {
                kind: ConditionKind::VersionWarning,
                status: true,
                message: warning,
            });
        }
        out.extend(self.quorum_lost());
        out.extend(self.restore_failed_condition());
        out
    }

    /// A quorum of the voters is healthy.
    fn available_condition(&self) -> Condition {
        let voters = self.voters().count();
        let healthy_voters = self.healthy_voters_except(None);
        let available =
            self.members.is_some() && voters > 0 && healthy_voters >= quorum_size(voters);
        Condition {
            kind: ConditionKind::Available,
            status: available,
            message: if self.members.is_none() {
                "no member answered as leader".into()
            } else {
                format!(
                    "{healthy_voters} of {voters} voters healthy (quorum {})",
                    quorum_size(voters)
                )
            },
        }
    }

    /// Every member is healthy.
    fn healthy_condition(&self) -> Condition {
        let unhealthy: Vec<String> = self
            .members
            .into_iter()
            .flatten()
            .filter(|m| !self.healthy(m))
            .map(|m| self.name_of(m))
            .collect();
        Condition {
            kind: ConditionKind::Healthy,
            status: self.members.is_some() && unhealthy.is_empty(),
            message: if self.members.is_none() {
                "member health unknown".into()
            } else if unhealthy.is_empty() {
                "every member healthy".into()
            } else {
                format!("not healthy: {}", unhealthy.join(", "))
            },
        }
    }

    /// Every machine is as the spec says (no machine to replace or restart, and why).
    fn up_to_date_condition(&self) -> Condition {
        let outdated: Vec<String> = self
            .seen
            .iter()
            .filter_map(|s| {
                match self.outdated(s.machine).or_else(|| {
                    self.restart_asked(s.machine)
                        .then_some(DeleteReason::Requested)
                })? {
                    DeleteReason::Requested => {
                        let what = s.machine.requested.unwrap_or(MachineRequest::Replace);
                        Some(format!("{} ({what} asked for)", s.machine.name))
                    }
                    DeleteReason::CertificatesExpiring => {
                        Some(format!("{} (certificates expire soon)", s.machine.name))
                    }
                    DeleteReason::CaRotation => Some(format!("{} (CA rotation)", s.machine.name)),
                    _ => Some(format!("{} ({})", s.machine.name, s.machine.version)),
                }
            })
            .collect();
        Condition {
            kind: ConditionKind::UpToDate,
            status: outdated.is_empty() && !self.seen.is_empty(),
            message: if self.seen.is_empty() {
                "no machine yet".into()
            } else if outdated.is_empty() {
                format!("every machine runs {}", self.spec().version)
            } else {
                format!("to replace: {}", outdated.join(", "))
            },
        }
    }

    /// As many voting members as replicas, and nothing joining or leaving.
    fn scaled_condition(&self) -> Condition {
        let spec = self.spec();
        let voters = self.voters().count();
        let learners = self
            .members
            .into_iter()
            .flatten()
            .filter(|m| m.is_learner)
            .count();
        let leaving = self.seen.iter().filter(|s| s.machine.deleting).count();
        let scaled = voters == spec.replicas as usize
            && self.seen.len() == spec.replicas as usize
            && learners == 0
            && leaving == 0
            && self.orphans.is_empty();
        Condition {
            kind: ConditionKind::Scaled,
            status: scaled,
            message: format!(
                "{}, {}, {} ({leaving} leaving), {} wanted",
                counted(voters, "voter"),
                counted(learners, "learner"),
                counted(self.seen.len(), "machine"),
                spec.replicas
            ),
        }
    }

    /// Some member has a problem, with since when.
    fn degraded_condition(&self) -> Condition {
        let problems = self.problems();
        Condition {
            kind: ConditionKind::Degraded,
            status: !problems.is_empty(),
            message: if problems.is_empty() {
                "no member has a problem".into()
            } else {
                problems
                    .iter()
                    .map(|(m, ps)| match self.problem_since.get(m) {
                        Some(_) => format!(
                            "{m}: {} (for {}s)",
                            crate::repair::words(ps),
                            self.unhealthy_for_s(m)
                        ),
                        None => format!("{m}: {}", crate::repair::words(ps)),
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        }
    }

    /// The newest snapshot failed its test restore.
    fn restore_failed_condition(&self) -> Option<Condition> {
        let newest = crate::backup::newest(self.snapshots)?;
        let why = newest.restore_failed.as_ref()?;
        Some(Condition {
            kind: ConditionKind::SnapshotRestoreFailed,
            status: true,
            message: format!(
                "the newest snapshot, {}, failed its test restore: {why}; take another (`quorum snapshot {}`) and find out why (`quorum snapshots {} -o json`)",
                newest.id, self.cp.name, self.cp.name
            ),
        })
    }

    /// The URLs clients should use: machines that are not leaving, whose member votes
    /// and is healthy. A learner never appears here (it refuses client requests).
    pub(crate) fn endpoints(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter(|s| !s.machine.deleting && !s.machine.in_place_out_of_service())
            .filter(|s| s.member.is_some_and(|m| !m.is_learner && self.healthy(m)))
            .map(|s| s.machine.client_url())
            .collect()
    }
}

/// "1 voter", "3 voters": a count and its noun, agreeing.
fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
