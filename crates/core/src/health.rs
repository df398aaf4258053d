//! The per-member health model: what is wrong with a member now (`Problem`, from one
//! observation), since when it has been wrong (`Tracker`, the only memory), how soon a
//! stopped process may be started again (`restart_backoff_s`) and in which order a
//! failed member is replaced (`RepairOrder`).
//!
//! A member counts as unhealthy for remediation only once some problem has held,
//! without a break, for `spec.remediation.unhealthyAfter`: a blip never replaces
//! anything, and a dead host is handled in bounded time. The tracker's memory lives in
//! the controller; a controller that takes over starts counting afresh, which only
//! delays a remediation (by at most `unhealthyAfter`), never hastens one.

use crate::decide::View;
use crate::model::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// How many process starts a machine's history keeps (the provider's bound too).
pub const STARTS_KEPT: usize = 16;
/// Starts within this window count toward a crash loop and its backoff. Longer than
/// the backoff's cap times the starts that reach it, so a loop at the cap stays one.
pub const CRASH_LOOP_WINDOW_S: i64 = 600;
/// This many starts within the window, with the process down again, is a crash loop.
pub const CRASH_LOOP_STARTS: usize = 3;
/// The first restart after a start waits this long; each further start in the window
/// doubles it, up to the cap.
pub const RESTART_BACKOFF_BASE_S: i64 = 1;
pub const RESTART_BACKOFF_CAP_S: i64 = 60;
/// A voter whose applied index trails the leader's log by more than this is lagging:
/// etcd's own default for when a follower is sent a snapshot instead of entries
/// (`--snapshot-catchup-entries`).
pub const MAX_APPLY_LAG_ENTRIES: u64 = 5_000;
/// A problem is reported (an `unhealthy` event) once it has lasted this long: a member
/// that is starting, or a blip, is not news; a member that recovers is reported only if
/// its problem was.
pub const REPORT_AFTER_S: i64 = 3;
/// NOSPACE alarms within this window count toward `NOSPACE_MAX_RECURRENCES`.
pub const NOSPACE_WINDOW_S: i64 = 600;
/// A NOSPACE alarm that comes back this often within the window is not repaired again:
/// the live data itself fills the quota, which only a person can change.
pub const NOSPACE_MAX_RECURRENCES: u32 = 3;
/// How many NOSPACE appearances the tracker keeps.
const NOSPACE_KEPT: usize = 8;

/// Something wrong with a member, seen in one observation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "problem", rename_all = "kebab-case")]
pub enum Problem {
    /// Its process is not running.
    Exited,
    /// Its process was started `starts` times within `CRASH_LOOP_WINDOW_S` and is down
    /// again.
    CrashLoop { starts: u32 },
    /// Its member has run before (it published its client URLs) but the data
    /// directory holds no member data: started, etcd would panic or bootstrap a
    /// stranger. Never started as it is.
    DataLost,
    /// The data directory's marker names another member or cluster. Never started as
    /// it is.
    DataForeign { marker: DataMarker },
    /// Its process runs but its endpoint did not answer in time.
    Unreachable,
    /// Its endpoint answered as another member, or as a member of another cluster.
    WrongIdentity { member_id: u64, cluster_id: u64 },
    /// It answered but knows no leader.
    NoLeader,
    /// A linearizable read through it did not answer in time.
    NoQuorumRead,
    /// Its applied index trails the leader's log by `entries`.
    Lagging { entries: u64 },
    /// An active alarm (`NOSPACE`, `CORRUPT`).
    Alarm { alarm: String },
}

impl Problem {
    /// Whether replacing the member is the repair. A full database (NOSPACE) is
    /// repaired in place by compaction and defragmentation: a replacement would copy
    /// the same data into the same quota.
    pub fn remediable(&self) -> bool {
        !matches!(self, Problem::Alarm { alarm } if alarm == "NOSPACE")
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Exited => f.write_str("its process is not running"),
            Problem::CrashLoop { starts } => write!(
                f,
                "crash loop: started {starts} times in {} min and down again",
                CRASH_LOOP_WINDOW_S / 60
            ),
            Problem::DataLost => {
                f.write_str("lost its data: its member ran before but its data directory is empty")
            }
            Problem::DataForeign { marker } => write!(
                f,
                "its data directory belongs to member {:x} of cluster {:x}",
                marker.member_id, marker.cluster_id
            ),
            Problem::Unreachable => f.write_str("unreachable"),
            Problem::WrongIdentity {
                member_id,
                cluster_id,
            } => write!(
                f,
                "answers as member {member_id:x} of cluster {cluster_id:x}"
            ),
            Problem::NoLeader => f.write_str("knows no leader"),
            Problem::NoQuorumRead => f.write_str("a quorum read through it timed out"),
            Problem::Lagging { entries } => write!(f, "{entries} entries behind the leader"),
            Problem::Alarm { alarm } => write!(f, "alarm {alarm}"),
        }
    }
}

/// Every machine's problems now, by name: machines with a member that are not
/// leaving. A machine without problems is absent.
pub fn assess(
    cp: &ControlPlane,
    machines: &[Machine],
    observed: &Observation,
) -> BTreeMap<String, Vec<Problem>> {
    View::new(cp, machines, observed).problems()
}

/// The starts that were not planned: `starts_unix_s` without `planned_unix_s` (each
/// planned start taken off once). What a crash loop and a restart backoff count.
pub fn crash_starts(starts_unix_s: &[i64], planned_unix_s: &[i64]) -> Vec<i64> {
    let mut planned = planned_unix_s.to_vec();
    starts_unix_s
        .iter()
        .copied()
        .filter(|t| match planned.iter().position(|p| p == t) {
            Some(i) => {
                planned.swap_remove(i);
                false
            }
            None => true,
        })
        .collect()
}

/// The starts within the crash-loop window before `now_unix_s`.
pub fn recent_starts(starts_unix_s: &[i64], now_unix_s: i64) -> usize {
    starts_unix_s
        .iter()
        .filter(|t| now_unix_s.saturating_sub(**t) < CRASH_LOOP_WINDOW_S)
        .count()
}

/// How long after its last start a stopped process may be started again: nothing
/// without a recent start, else doubling with each recent start, up to the cap.
pub fn restart_backoff_s(recent_starts: usize) -> i64 {
    if recent_starts == 0 {
        return 0;
    }
    // Shifting by more than 6 passes the cap anyway; the bound keeps the shift defined.
    let doublings = (recent_starts - 1).min(6) as u32;
    (RESTART_BACKOFF_BASE_S << doublings).min(RESTART_BACKOFF_CAP_S)
}

/// Since when each machine has had some problem without a break (restarted when a
/// problem that replacement repairs appears): the health model's only memory, kept by
/// the controller across observations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tracker {
    since_unix_s: BTreeMap<String, i64>,
    /// The machines seen in a crash loop at the last observation.
    looping: Vec<String>,
    /// A NOSPACE alarm was active at the last observation.
    nospace: bool,
    /// When NOSPACE alarms appeared (the last `NOSPACE_KEPT`).
    nospace_seen_unix_s: Vec<i64>,
    /// Machines defragmented since the current NOSPACE alarm appeared.
    defragmented: BTreeSet<String>,
    /// Machines whose problem was reported (and whose recovery will be).
    reported: BTreeSet<String>,
    /// Machines that had a problem replacement repairs at the last observation.
    remediable: BTreeSet<String>,
}

/// What a decision reads from the tracker's memory: the fields of an `Observation` no
/// single look can give. The controller fills its observation from it, the simulator
/// too, and the controller publishes it with its status so that `quorum status`
/// decides from the same memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// `Observation::problem_since_unix_s`.
    #[serde(default)]
    pub problem_since_unix_s: BTreeMap<String, i64>,
    /// `Observation::defragmented`.
    #[serde(default)]
    pub defragmented: BTreeSet<String>,
    /// `Observation::nospace_recurrences`.
    #[serde(default)]
    pub nospace_recurrences: u32,
}

impl Memory {
    /// The memory an observation was filled with.
    pub fn of(obs: &Observation) -> Memory {
        Memory {
            problem_since_unix_s: obs.problem_since_unix_s.clone(),
            defragmented: obs.defragmented.clone(),
            nospace_recurrences: obs.nospace_recurrences,
        }
    }

    /// Puts the memory into `obs`: the one place an observation gets it.
    pub fn fill(&self, obs: &mut Observation) {
        obs.problem_since_unix_s = self.problem_since_unix_s.clone();
        obs.defragmented = self.defragmented.clone();
        obs.nospace_recurrences = self.nospace_recurrences;
    }

    /// The memory of the machines that have a problem in `obs` now: what a reader that
    /// is not the tracker (`quorum status`) may take from a published one, since a
    /// problem that healed and came back is a new one.
    pub fn of_problems_now(
        self,
        cp: &ControlPlane,
        machines: &[Machine],
        obs: &Observation,
    ) -> Memory {
        let now = assess(cp, machines, obs);
        Memory {
            problem_since_unix_s: self
                .problem_since_unix_s
                .into_iter()
                .filter(|(m, _)| now.contains_key(m))
                .collect(),
            ..self
        }
    }
}

/// What one observation changed in the tracker's memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tracked {
    /// For `Observation::problem_since_unix_s`.
    pub since_unix_s: BTreeMap<String, i64>,
    /// Machines that entered a crash loop with this observation (one event each).
    pub crash_loops_started: Vec<(String, u32)>,
    /// Machines whose problem has now lasted `REPORT_AFTER_S` (reported once until they
    /// are fine again), with the problems in words.
    pub became_unhealthy: Vec<(String, String)>,
    /// Reported machines whose problems went away, with how long they lasted (seconds).
    pub recovered: Vec<(String, i64)>,
    /// For `Observation::defragmented`.
    pub defragmented: BTreeSet<String>,
    /// For `Observation::nospace_recurrences`.
    pub nospace_recurrences: u32,
}

impl Tracked {
    /// What a decision reads of it (`Memory::fill`).
    pub fn memory(&self) -> Memory {
        Memory {
            problem_since_unix_s: self.since_unix_s.clone(),
            defragmented: self.defragmented.clone(),
            nospace_recurrences: self.nospace_recurrences,
        }
    }
}

impl Tracker {
    /// Takes in a fresh observation; returns since when each machine has had a
    /// problem, to set on the observation before deciding.
    pub fn observe(
        &mut self,
        cp: &ControlPlane,
        machines: &[Machine],
        observed: &Observation,
    ) -> Tracked {
        let now = observed.now_unix_s;
        let problems = assess(cp, machines, observed);
        // Without a member list (quorum lost, or an election) no member is judged:
        // the memory goes, as with a controller that takes over (a remediation is
        // delayed, never hastened), but nothing recovered.
        let judged = observed.members.is_some();
        let mut recovered = Vec::new();
        let reported = &mut self.reported;
        self.since_unix_s.retain(|m, since| {
            let still = problems.contains_key(m);
            // A machine that left the records (deleted) did not recover.
            let here = machines.iter().any(|x| &x.name == m && !x.deleting);
            if !still && judged && reported.remove(m) && here {
                recovered.push((m.clone(), now.saturating_sub(*since)));
            }
            still
        });
        self.reported.retain(|m| problems.contains_key(m));
        let mut became_unhealthy = Vec::new();
        let remediable: BTreeSet<String> = problems
            .iter()
            .filter(|(_, ps)| ps.iter().any(Problem::remediable))
            .map(|(m, _)| m.clone())
            .collect();
        for (m, ps) in &problems {
            let since = self.since_unix_s.entry(m.clone()).or_insert(now);
            // A problem that replacement repairs restarts the clock when it appears: a
            // member that was full (NOSPACE) for a minute and then stalls in its
            // defragmentation has been unreachable for the stall, not for the minute
            // (found by the simulator: it was remediated at once).
            if remediable.contains(m) && !self.remediable.contains(m) {
                *since = now;
            }
            let since = *since;
            if now.saturating_sub(since) >= REPORT_AFTER_S && self.reported.insert(m.clone()) {
                let words: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
                became_unhealthy.push((m.clone(), words.join(", ")));
            }
        }
        self.remediable = remediable;
        let crash_loops_started = self.loops_started(&problems);
        let nospace_recurrences = self.nospace_seen(observed, now);
        Tracked {
            since_unix_s: self.since_unix_s.clone(),
            crash_loops_started,
            became_unhealthy,
            recovered,
            defragmented: self.defragmented.clone(),
            nospace_recurrences,
        }
    }

    /// The machines that entered a crash loop with this observation. A loop lasts until
    /// the machine is fine again: between its restarts, while its process runs for a
    /// moment, it is the same loop, not a new one.
    fn loops_started(&mut self, problems: &BTreeMap<String, Vec<Problem>>) -> Vec<(String, u32)> {
        self.looping.retain(|m| problems.contains_key(m));
        let mut started = Vec::new();
        for (m, ps) in problems {
            for p in ps {
                if let Problem::CrashLoop { starts } = p {
                    if !self.looping.contains(m) {
                        self.looping.push(m.clone());
                        started.push((m.clone(), *starts));
                    }
                }
            }
        }
        started
    }

    /// Takes in whether a NOSPACE alarm is raised now; returns how many times one
    /// appeared within `NOSPACE_WINDOW_S`.
    fn nospace_seen(&mut self, observed: &Observation, now: i64) -> u32 {
        let nospace = observed
            .alarms
            .iter()
            .any(|(_, a)| a == crate::upkeep::NOSPACE)
            || observed.machines.values().any(|o| {
                o.status
                    .as_ref()
                    .is_some_and(|st| st.alarms.iter().any(|a| a == crate::upkeep::NOSPACE))
            });
        if nospace && !self.nospace {
            self.nospace_seen_unix_s.push(now);
            let excess = self.nospace_seen_unix_s.len().saturating_sub(NOSPACE_KEPT);
            self.nospace_seen_unix_s.drain(..excess);
        }
        if !nospace {
            self.defragmented.clear();
        }
        self.nospace = nospace;
        self.nospace_seen_unix_s
            .iter()
            .filter(|t| now.saturating_sub(**t) < NOSPACE_WINDOW_S)
            .count() as u32
    }

    /// The runtime disarmed the NOSPACE alarm: an alarm seen after this is a new one
    /// (counted toward the recurrences, its members defragmented again), even if no
    /// observation fell between the disarm and its return. Without this, an alarm raised
    /// again by the very next write was disarmed again at every pass, for ever (found by
    /// the simulator: a second fill right after a repair).
    pub fn disarmed(&mut self) {
        self.nospace = false;
        self.defragmented.clear();
    }

    /// The runtime defragmented `machine`: under a NOSPACE alarm, it is not done again
    /// until the alarm is gone and comes back.
    pub fn defragmented(&mut self, machine: &str) {
        if self.nospace {
            self.defragmented.insert(machine.to_string());
        }
    }
}

/// In which order a failed voter is replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairOrder {
    /// Remove the failed member, then add its replacement as a learner and promote it.
    RemoveFirst,
    /// Add the replacement as a learner, promote it, then remove the failed member.
    AddFirst,
}

/// The least quorum margin (healthy voters minus the quorum size) over every step of
/// a replacement of one failed voter among `voters`, `healthy` of them healthy (the
/// replacement counted healthy once promoted, as promotion requires).
pub fn least_margin(order: RepairOrder, voters: usize, healthy: usize) -> i64 {
    let margin = |h: usize, n: usize| h as i64 - quorum_size(n) as i64;
    let steps = match order {
        // Removed; then the learner (no vote) promoted.
        RepairOrder::RemoveFirst => vec![margin(healthy, voters - 1), margin(healthy + 1, voters)],
        // The learner added (no change), promoted, then the failed member removed.
        RepairOrder::AddFirst => vec![
            margin(healthy, voters),
            margin(healthy + 1, voters + 1),
            margin(healthy + 1, voters),
        ],
    };
    steps.into_iter().min().unwrap_or(i64::MIN)
}

/// The order that keeps the larger least margin; removal first on a tie (etcd's FAQ
/// advises it, and it never needs more members up at once). Removal first never keeps
/// less: removing an unhealthy voter lowers the quorum without lowering the healthy
/// count, while adding first raises the quorum before the new member can vote (see
/// `remove_first_never_keeps_less` and ARCHITECTURE.md).
pub fn repair_order(voters: usize, healthy: usize) -> RepairOrder {
    assert!(
        voters >= 1 && healthy < voters,
        "a failed voter among the voters"
    );
    let remove = least_margin(RepairOrder::RemoveFirst, voters, healthy);
    let add = least_margin(RepairOrder::AddFirst, voters, healthy);
    if add > remove {
        RepairOrder::AddFirst
    } else {
        RepairOrder::RemoveFirst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap() {
        let got: Vec<i64> = (0..10).map(restart_backoff_s).collect();
        assert_eq!(got, [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(restart_backoff_s(usize::MAX), RESTART_BACKOFF_CAP_S);
    }

    #[test]
    fn a_loop_at_the_cap_stays_a_loop() {
        // Starts every cap-length keep enough of them in the window to stay at the cap.
        let per_window = (CRASH_LOOP_WINDOW_S / RESTART_BACKOFF_CAP_S) as usize;
        assert!(restart_backoff_s(per_window) == RESTART_BACKOFF_CAP_S);
        assert!(per_window >= CRASH_LOOP_STARTS);
        assert!(per_window <= STARTS_KEPT);
    }

    #[test]
    fn recent_starts_count_the_window_only() {
        let now = 10_000;
        let starts = [now - 700, now - 599, now - 10, now];
        assert_eq!(recent_starts(&starts, now), 3);
        assert_eq!(recent_starts(&[], now), 0);
    }

    #[test]
    fn remove_first_never_keeps_less() {
        for voters in 1..=crate::model::MAX_REPLICAS as usize {
            for healthy in 0..voters {
                let remove = least_margin(RepairOrder::RemoveFirst, voters, healthy);
                let add = least_margin(RepairOrder::AddFirst, voters, healthy);
                assert!(remove >= add, "{voters} voters, {healthy} healthy");
                assert_eq!(repair_order(voters, healthy), RepairOrder::RemoveFirst);
            }
        }
        // Three voters, one dead: both orders run at margin 0; five, one dead: 1.
        assert_eq!(least_margin(RepairOrder::RemoveFirst, 3, 2), 0);
        assert_eq!(least_margin(RepairOrder::AddFirst, 3, 2), 0);
        assert_eq!(least_margin(RepairOrder::RemoveFirst, 5, 4), 1);
    }

    #[test]
    fn only_a_full_database_is_not_remediated() {
        let nospace = Problem::Alarm {
            alarm: "NOSPACE".into(),
        };
        let corrupt = Problem::Alarm {
            alarm: "CORRUPT".into(),
        };
        assert!(!nospace.remediable());
        assert!(corrupt.remediable());
        assert!(Problem::DataLost.remediable());
    }
}
