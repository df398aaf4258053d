//! Pacing: whether a decided action may be performed now, and when to ask again.
//!
//! `decide` says *what* to do; this says *when*, from data the caller observed:
//!
//! - a member of a machine that left the published client endpoints is removed only once
//!   the drain time has passed since the caller first saw the machine leaving, so that
//!   clients following the endpoints have moved off it;
//! - nor while the load balancer in front of the members is not known to be in step
//!   with the endpoints (it may still send clients to that member);
//! - an action that etcd refused or that failed is retried after an exponential backoff
//!   with jitter (`Backoff`), short for etcd's transient refusals, longer for failures.
//!
//! One `Pacing` holds one control plane's memory of this (drain clocks, retry due
//! times). The controller and the simulator both drive this type, so the policy the
//! simulator checks is the one that ships; `table()` is the shared table both are tested
//! against. Time is a parameter (`now_ms`, the caller's monotonic clock in milliseconds)
//! and so is randomness (`random`, a uniform `u64` from the caller's generator): this
//! module reads no clock and draws no random number.

use crate::{Action, Machine};
use std::collections::BTreeMap;
use std::fmt;

/// Time between a machine leaving the published endpoints and the removal of its
/// member. Measured with `quorum bench rollout`: removing 14 ms after publishing failed
/// requests of clients that re-read the endpoints every 100 ms; with 500 ms, none.
pub const DRAIN_MS: u64 = 500;
/// The longest first retry after a refusal or a failure (the delay doubles per failure
/// in a row, up to the cap).
pub const RETRY_FIRST_MS: u64 = 100;
/// Retry cap for etcd's transient refusals ("unhealthy cluster" for ~5 s after a
/// membership change, a learner not yet in sync, no leader): they clear by themselves,
/// so ask often.
pub const RETRY_CAP_REFUSAL_MS: u64 = 250;
/// Retry cap for failures (anything else): they may need a person.
pub const RETRY_CAP_FAILURE_MS: u64 = 5_000;

/// Exponential backoff with jitter: before retry `n` (after `n` failures in a row) the
/// delay is drawn uniformly from the upper half of `first_ms * 2^(n-1)`, capped at
/// `cap_ms` ("equal jitter"). The lower half-bound keeps the growth, so a condition
/// that lasts is asked about rarely; the random upper half spreads retries of writers
/// (or controllers) contending for the same thing apart. (Jitter over the whole range
/// could retry at once, which is no backoff.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backoff {
    pub first_ms: u64,
    pub cap_ms: u64,
}

impl Backoff {
    pub const fn new(first_ms: u64, cap_ms: u64) -> Backoff {
        Backoff { first_ms, cap_ms }
    }

    /// The longest delay before retry `failures` (0: the first attempt, no delay).
    pub fn ceiling_ms(&self, failures: u32) -> u64 {
        if failures == 0 {
            return 0;
        }
        // Past 2^32 every cap in use is reached; the shift stays defined.
        let doubling = 1u64 << (failures - 1).min(32);
        self.first_ms.saturating_mul(doubling).min(self.cap_ms)
    }

    /// The delay before retry `failures`, with `random` (uniform over `u64`) choosing
    /// where in the upper half of the ceiling it falls.
    pub fn delay_ms(&self, failures: u32, random: u64) -> u64 {
        let ceiling = self.ceiling_ms(failures);
        let low = ceiling - ceiling / 2;
        low + random % (ceiling - low + 1)
    }
}

/// The numbers of one pacing policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PacingPolicy {
    pub drain_ms: u64,
    /// After etcd's transient refusals (and timeouts, whose effect is unknown).
    pub refusal: Backoff,
    /// After failures.
    pub failure: Backoff,
}

impl PacingPolicy {
    /// What the controller runs and the simulator checks.
    pub const DEFAULT: PacingPolicy = PacingPolicy {
        drain_ms: DRAIN_MS,
        refusal: Backoff::new(RETRY_FIRST_MS, RETRY_CAP_REFUSAL_MS),
        failure: Backoff::new(RETRY_FIRST_MS, RETRY_CAP_FAILURE_MS),
    };
}

impl Default for PacingPolicy {
    fn default() -> Self {
        PacingPolicy::DEFAULT
    }
}

/// What an action is about, for its retry key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    /// An allocation or the teardown's end: one of each is decided at a time.
    ControlPlane,
    Machine(String),
    /// An orphan member (no machine).
    Member(u64),
}

/// The identity of an action for retries: its kind and what it is about. Two decisions
/// of the same step (the same kind on the same machine) share a key even if details
/// differ (a start's initial cluster, a leader move's source), so a step that keeps
/// failing backs off however it is phrased.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RetryKey {
    pub kind: String,
    pub subject: Subject,
}

impl RetryKey {
    pub fn of(a: &Action) -> RetryKey {
        let subject = match (a, a.machine()) {
            (_, Some(m)) => Subject::Machine(m.to_string()),
            (Action::RemoveMember { member_id, .. }, None) => Subject::Member(*member_id),
            (_, None) => Subject::ControlPlane,
        };
        RetryKey {
            kind: a.kind().to_string(),
            subject,
        }
    }

    fn machine(&self) -> Option<&str> {
        match &self.subject {
            Subject::Machine(m) => Some(m),
            _ => None,
        }
    }
}

impl fmt::Display for RetryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Subject::ControlPlane => write!(f, "{}", self.kind),
            Subject::Machine(m) => write!(f, "{} {m}", self.kind),
            Subject::Member(id) => write!(f, "{} {id:x}", self.kind),
        }
    }
}

/// What the caller observed that pacing depends on, besides the stored machines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacingInput {
    /// The caller's monotonic clock, in milliseconds.
    pub now_ms: u64,
    /// The load balancer's backend was brought in step with the published endpoints in
    /// this pass (true when the control plane has no load balancer).
    pub lb_in_step: bool,
}

/// Why an action waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hold {
    /// Its machine left the endpoints less than the drain time ago.
    Draining { until_ms: u64 },
    /// The load balancer may still send clients to its member: look again when it is
    /// back in step (no time is known).
    LoadBalancerBehind,
    /// It was refused or failed `failures` times in a row; due again at `until_ms`.
    BackingOff { until_ms: u64, failures: u32 },
}

impl Hold {
    /// When to look again, if a time is known.
    pub fn until_ms(&self) -> Option<u64> {
        match self {
            Hold::Draining { until_ms } | Hold::BackingOff { until_ms, .. } => Some(*until_ms),
            Hold::LoadBalancerBehind => None,
        }
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hold::Draining { until_ms } => write!(f, "clients drain until {until_ms} ms"),
            Hold::LoadBalancerBehind => f.write_str("the load balancer is not in step"),
            Hold::BackingOff { until_ms, failures } => write!(
                f,
                "backing off after {failures} failure{} until {until_ms} ms",
                if *failures == 1 { "" } else { "s" }
            ),
        }
    }
}

/// May an action be performed now?
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Go,
    Wait(Hold),
}

/// How an attempt ended, as the caller's adapter classified the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attempt {
    Done,
    /// A transient refusal (or a timeout): retry soon.
    Refused,
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Retry {
    failures: u32,
    due_ms: u64,
}

/// One control plane's pacing memory: when each leaving machine's drain ends, and when
/// each action that did not succeed may be tried again. Lost with the caller's memory
/// (a crash, a step-down): a fresh one drains again, which is only slower.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pacing {
    policy: PacingPolicy,
    /// Leaving machines and when their member may be removed (or, in place, stopped).
    drains: BTreeMap<String, u64>,
    /// Machines out of service for an in-place step: their stop waits for the drain.
    in_place: std::collections::BTreeSet<String>,
    retries: BTreeMap<RetryKey, Retry>,
}

impl Pacing {
    pub fn new(policy: PacingPolicy) -> Pacing {
        Pacing {
            policy,
            drains: BTreeMap::new(),
            in_place: Default::default(),
            retries: BTreeMap::new(),
        }
    }

    pub fn policy(&self) -> &PacingPolicy {
        &self.policy
    }

    /// Takes in the stored machines, once per pass and after the endpoints of that pass
    /// were published: a machine seen leaving for the first time starts its drain now;
    /// what is remembered of machines that are gone is forgotten.
    pub fn observe(&mut self, now_ms: u64, machines: &[Machine]) {
        let known = |name: &str| machines.iter().any(|m| m.name == name);
        // A machine stays leaving until it is gone, or until its in-place step ends
        // (its next step drains again, from a fresh clock).
        let leaving = |m: &Machine| m.deleting || m.in_place_out_of_service();
        self.drains
            .retain(|name, _| machines.iter().any(|m| m.name == *name && leaving(m)));
        self.in_place = machines
            .iter()
            .filter(|m| !m.deleting && m.in_place_out_of_service())
            .map(|m| m.name.clone())
            .collect();
        self.retries
            .retain(|key, _| key.machine().is_none_or(&known));
        let until = now_ms.saturating_add(self.policy.drain_ms);
        for m in machines.iter().filter(|m| leaving(m)) {
            self.drains.entry(m.name.clone()).or_insert(until);
        }
    }

    /// When the member of `machine` may be removed (`None`: not seen leaving).
    pub fn drain_until_ms(&self, machine: &str) -> Option<u64> {
        self.drains.get(machine).copied()
    }

    /// When the action may be tried again (`None`: no failure remembered).
    pub fn due_ms(&self, a: &Action) -> Option<u64> {
        self.retries.get(&RetryKey::of(a)).map(|r| r.due_ms)
    }

    /// May `a` be performed now? Removals of a leaving machine's member wait for its
    /// drain and for the load balancer; every action waits out its backoff.
    pub fn check(&self, a: &Action, input: &PacingInput) -> Verdict {
        let drained = match a {
            Action::RemoveMember {
                machine: Some(m), ..
            } => Some(m),
            // The stop of an in-place step is its member's leaving: the same drain.
            Action::StopMachine { machine } if self.in_place.contains(machine) => Some(machine),
            _ => None,
        };
        if let Some(m) = drained {
            // Only a machine marked deleting has its member removed, and `observe` saw
            // it first; one it did not see has not started draining (fail safe).
            let until_ms = self
                .drain_until_ms(m)
                .unwrap_or_else(|| input.now_ms.saturating_add(self.policy.drain_ms));
            if input.now_ms < until_ms {
                return Verdict::Wait(Hold::Draining { until_ms });
            }
            if !input.lb_in_step {
                return Verdict::Wait(Hold::LoadBalancerBehind);
            }
        }
        match self.retries.get(&RetryKey::of(a)) {
            Some(r) if input.now_ms < r.due_ms => Verdict::Wait(Hold::BackingOff {
                until_ms: r.due_ms,
                failures: r.failures,
            }),
            _ => Verdict::Go,
        }
    }

    /// Records how an attempt of `a` at `now_ms` ended; returns when it may be tried
    /// again (`None` once done). `random` is uniform over `u64` (the jitter).
    pub fn record(
        &mut self,
        a: &Action,
        attempt: Attempt,
        now_ms: u64,
        random: u64,
    ) -> Option<u64> {
        let key = RetryKey::of(a);
        let backoff = match attempt {
            Attempt::Done => {
                self.retries.remove(&key);
                return None;
            }
            Attempt::Refused => self.policy.refusal,
            Attempt::Failed => self.policy.failure,
        };
        let failures = self
            .retries
            .get(&key)
            .map_or(1, |r| r.failures.saturating_add(1));
        let due_ms = now_ms.saturating_add(backoff.delay_ms(failures, random));
        self.retries.insert(key, Retry { failures, due_ms });
        Some(due_ms)
    }
}

/// One step of a row of the shared table.
#[derive(Clone, Debug)]
pub enum Step {
    /// The stored machines at `now_ms`: (name, marked deleting).
    Machines {
        now_ms: u64,
        machines: Vec<(&'static str, bool)>,
    },
    /// An attempt at `now_ms` ended so, with this jitter; the retry is due at `due_ms`
    /// (`None`: done).
    Attempt {
        now_ms: u64,
        action: Action,
        outcome: Attempt,
        random: u64,
        due_ms: Option<u64>,
    },
    /// At `now_ms`, with the load balancer in step or not, the verdict on `action`.
    Check {
        now_ms: u64,
        action: Action,
        lb_in_step: bool,
        expect: Verdict,
    },
}

/// A row of the shared table: a name and steps from a fresh `Pacing` with the default
/// policy.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: &'static str,
    pub steps: Vec<Step>,
}

/// A caller's pacing path, as a table test drives it: the caller translates each step
/// into its own terms (its answers, its load balancer state) and back through its own
/// code, which must end in this module.
pub trait Driver {
    fn machines(&mut self, now_ms: u64, machines: &[Machine]);
    fn attempt(
        &mut self,
        now_ms: u64,
        action: &Action,
        outcome: Attempt,
        random: u64,
    ) -> Option<u64>;
    fn check(&mut self, now_ms: u64, action: &Action, lb_in_step: bool) -> Verdict;
}

/// The stored record of a machine named `name` (only the name and the deleting mark
/// matter to pacing).
pub fn table_machine(name: &str, deleting: bool) -> Machine {
    Machine {
        requested: None,
        ca_step: None,
        placement: None,
        name: name.to_string(),
        serial: 1,
        address: std::net::Ipv4Addr::new(127, 0, 0, 1),
        version: crate::Version::new(3, 5, 1),
        bootstrap: false,
        deleting,
        tls: false,
        certificates_not_after_unix_s: None,
        remediation: None,
        in_place: None,
    }
}

/// Runs one row through a driver built fresh for it; the first mismatch is the error.
pub fn run_case(case: &Case, d: &mut dyn Driver) -> Result<(), String> {
    for (i, step) in case.steps.iter().enumerate() {
        let at = |what: String| format!("{}, step {i}: {what}", case.name);
        match step {
            Step::Machines { now_ms, machines } => {
                let ms: Vec<Machine> = machines
                    .iter()
                    .map(|(n, deleting)| table_machine(n, *deleting))
                    .collect();
                d.machines(*now_ms, &ms);
            }
            Step::Attempt {
                now_ms,
                action,
                outcome,
                random,
                due_ms,
            } => {
                let got = d.attempt(*now_ms, action, *outcome, *random);
                if got != *due_ms {
                    return Err(at(format!(
                        "'{action}' {outcome:?} at {now_ms} ms: due {got:?}, expected {due_ms:?}"
                    )));
                }
            }
            Step::Check {
                now_ms,
                action,
                lb_in_step,
                expect,
            } => {
                let got = d.check(*now_ms, action, *lb_in_step);
                if got != *expect {
                    return Err(at(format!(
                        "'{action}' at {now_ms} ms (load balancer in step: {lb_in_step}): {got:?}, expected {expect:?}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The table the controller's and the simulator's pacing are both driven through (each
/// in its own crate's tests, with a fresh driver per row), and the core's own. Jitter:
/// `random` 0 picks the lowest delay (half the ceiling), `u64::MAX` one near the top.
pub fn table() -> Vec<Case> {
    [rows::drain(), rows::backoff(), rows::memory()].concat()
}

/// The rows of `table` by topic, written in a few words (below) so that each step
/// reads as a row: when, what, and what pacing must answer.
mod rows {
    use super::{Attempt, Case, Hold, Step, Verdict};
    use crate::Action;

    /// A removal waits for its machine's drain, and then for the load balancer.
    pub(super) fn drain() -> Vec<Case> {
        vec![
            Case {
                name: "a removal waits for the drain, counted from when the machine is first seen leaving",
                steps: vec![
                    seen(1_000, &[("cp-1", false), ("cp-2", false)]),
                    seen(2_000, &[("cp-1", true), ("cp-2", false)]),
                    // Seen leaving again later: the clock does not restart.
                    seen(2_300, &[("cp-1", true), ("cp-2", false)]),
                    check(2_000, remove("cp-1"), true, draining(2_500)),
                    check(2_499, remove("cp-1"), true, draining(2_500)),
                    check(2_500, remove("cp-1"), true, GO),
                    // Other actions and orphans never drain.
                    check(2_000, stop("cp-1"), true, GO),
                    check(2_000, orphan(), true, GO),
                ],
            },
            Case {
                name: "a removal of a machine never seen leaving is held for a whole drain",
                steps: vec![check(7_000, remove("cp-9"), true, draining(7_500))],
            },
            Case {
                name: "the load balancer holds a drained removal until it is in step",
                steps: vec![
                    seen(0, &[("cp-1", true)]),
                    check(400, remove("cp-1"), false, draining(500)),
                    check(600, remove("cp-1"), false, LB_BEHIND),
                    check(5_000, remove("cp-1"), false, LB_BEHIND),
                    check(5_000, remove("cp-1"), true, GO),
                    // An orphan member is in no backend.
                    check(600, orphan(), false, GO),
                    check(600, add(), false, GO),
                ],
            },
        ]
    }

    /// Refusals and failures back off, each with its own ceiling; a removal backing off
    /// still waits for the drain and the load balancer first.
    pub(super) fn backoff() -> Vec<Case> {
        vec![
            Case {
                name: "refusals back off 100 ms doubling to 250 ms, with jitter in the upper half",
                steps: vec![
                    attempt(10_000, add(), Attempt::Refused, 0, Some(10_050)),
                    check(10_049, add(), true, off(10_050, 1)),
                    check(10_050, add(), true, GO),
                    attempt(
                        10_050,
                        add(),
                        Attempt::Refused,
                        u64::MAX,
                        Some(10_050 + 100 + (u64::MAX % 101)),
                    ),
                    attempt(11_000, add(), Attempt::Refused, 0, Some(11_125)),
                    attempt(12_000, add(), Attempt::Refused, 125, Some(12_250)),
                    attempt(13_000, add(), Attempt::Refused, 126, Some(13_125)),
                    // Another step backs off on its own.
                    check(13_000, promote(), true, GO),
                    attempt(13_500, add(), Attempt::Done, 0, None),
                    check(13_500, add(), true, GO),
                    // Done resets the count.
                    attempt(14_000, add(), Attempt::Refused, 0, Some(14_050)),
                ],
            },
            Case {
                name: "failures back off 100 ms doubling to 5 s",
                steps: vec![
                    attempt(0, promote(), Attempt::Failed, 0, Some(50)),
                    attempt(100, promote(), Attempt::Failed, 0, Some(200)),
                    attempt(300, promote(), Attempt::Failed, 0, Some(500)),
                    attempt(600, promote(), Attempt::Failed, 0, Some(1_000)),
                    attempt(1_000, promote(), Attempt::Failed, 0, Some(1_800)),
                    attempt(2_000, promote(), Attempt::Failed, 0, Some(3_600)),
                    attempt(4_000, promote(), Attempt::Failed, 0, Some(6_500)),
                    attempt(7_000, promote(), Attempt::Failed, 2_500, Some(12_000)),
                    check(11_999, promote(), true, off(12_000, 8)),
                    // A refusal after failures keeps the count, with the refusal's cap.
                    attempt(12_000, promote(), Attempt::Refused, 0, Some(12_125)),
                    check(12_000, promote(), true, off(12_125, 9)),
                ],
            },
            Case {
                name: "a backing-off removal waits for the drain and the load balancer first",
                steps: vec![
                    seen(0, &[("cp-1", true)]),
                    attempt(600, remove("cp-1"), Attempt::Refused, 0, Some(650)),
                    check(620, remove("cp-1"), false, LB_BEHIND),
                    check(620, remove("cp-1"), true, off(650, 1)),
                    check(650, remove("cp-1"), true, GO),
                ],
            },
        ]
    }

    /// What pacing remembers: a machine's retries only while it exists, and retries by
    /// kind and subject.
    pub(super) fn memory() -> Vec<Case> {
        vec![
            Case {
                name: "a machine that is gone is forgotten, its retries with it",
                steps: vec![
                    seen(0, &[("cp-1", true), ("cp-4", false)]),
                    attempt(0, stop("cp-1"), Attempt::Failed, 0, Some(50)),
                    attempt(0, orphan(), Attempt::Failed, 0, Some(50)),
                    seen(10, &[("cp-4", false)]),
                    check(10, stop("cp-1"), true, GO),
                    check(10, orphan(), true, off(50, 1)),
                    // A machine of the same name leaving again (names are never reused,
                    // but the rule holds) starts a new drain.
                    seen(20, &[("cp-1", true), ("cp-4", false)]),
                    check(20, remove("cp-1"), true, draining(520)),
                ],
            },
            Case {
                name: "retries are keyed by kind and subject, not by the action's details",
                steps: vec![
                    attempt(0, move_leader(1, 2, "cp-2"), Attempt::Failed, 0, Some(50)),
                    check(10, move_leader(3, 2, "cp-2"), true, off(50, 1)),
                    check(10, move_leader(1, 3, "cp-3"), true, GO),
                    check(10, remove_member(0x98), true, GO),
                ],
            },
        ]
    }

    // The actions the rows act on.

    /// The removal of machine `m`'s member.
    fn remove(m: &str) -> Action {
        Action::RemoveMember {
            member_id: 0x11,
            machine: Some(m.to_string()),
        }
    }

    /// The removal of an orphan member (no machine).
    fn orphan() -> Action {
        remove_member(0x99)
    }

    /// The removal of member `member_id`, of no machine.
    fn remove_member(member_id: u64) -> Action {
        Action::RemoveMember {
            member_id,
            machine: None,
        }
    }

    fn add() -> Action {
        Action::AddLearner {
            machine: "cp-4".into(),
            peer_url: "https://127.0.0.4:2380".into(),
        }
    }

    fn promote() -> Action {
        Action::Promote {
            machine: "cp-4".into(),
            member_id: 0x44,
        }
    }

    fn stop(m: &str) -> Action {
        Action::StopMachine { machine: m.into() }
    }

    fn move_leader(from_member: u64, to_member: u64, to_machine: &str) -> Action {
        Action::MoveLeader {
            from_member,
            to_member,
            to_machine: to_machine.into(),
        }
    }

    // What pacing answers.

    const GO: Verdict = Verdict::Go;
    const LB_BEHIND: Verdict = Verdict::Wait(Hold::LoadBalancerBehind);

    fn off(until_ms: u64, failures: u32) -> Verdict {
        Verdict::Wait(Hold::BackingOff { until_ms, failures })
    }

    fn draining(until_ms: u64) -> Verdict {
        Verdict::Wait(Hold::Draining { until_ms })
    }

    // The steps.

    /// The stored machines at `now_ms`: (name, marked deleting).
    fn seen(now_ms: u64, machines: &[(&'static str, bool)]) -> Step {
        Step::Machines {
            now_ms,
            machines: machines.to_vec(),
        }
    }

    fn check(now_ms: u64, action: Action, lb_in_step: bool, expect: Verdict) -> Step {
        Step::Check {
            now_ms,
            action,
            lb_in_step,
            expect,
        }
    }

    fn attempt(
        now_ms: u64,
        action: Action,
        outcome: Attempt,
        random: u64,
        due_ms: Option<u64>,
    ) -> Step {
        Step::Attempt {
            now_ms,
            action,
            outcome,
            random,
            due_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core itself, with nothing between the table and `Pacing`.
    struct Direct(Pacing);

    impl Driver for Direct {
        fn machines(&mut self, now_ms: u64, machines: &[Machine]) {
            self.0.observe(now_ms, machines);
        }
        fn attempt(
            &mut self,
            now_ms: u64,
            a: &Action,
            outcome: Attempt,
            random: u64,
        ) -> Option<u64> {
            self.0.record(a, outcome, now_ms, random)
        }
        fn check(&mut self, now_ms: u64, a: &Action, lb_in_step: bool) -> Verdict {
            self.0.check(a, &PacingInput { now_ms, lb_in_step })
        }
    }

    #[test]
    fn the_shared_table_holds_for_the_core() {
        for case in table() {
            run_case(&case, &mut Direct(Pacing::default())).unwrap();
        }
    }

    /// The stop of an in-place step is its member's leaving: it waits for the drain and
    /// the load balancer as a removal does; a later step of the same machine drains
    /// again from its own start; other stops never wait.
    #[test]
    fn an_in_place_stop_waits_for_the_drain() {
        let mut p = Pacing::default();
        let mut m = table_machine("m-1", false);
        let stop = Action::StopMachine {
            machine: "m-1".into(),
        };
        let go =
            |p: &Pacing, now_ms, lb_in_step| p.check(&stop, &PacingInput { now_ms, lb_in_step });
        p.observe(0, std::slice::from_ref(&m));
        assert_eq!(go(&p, 0, true), Verdict::Go, "not in place: no drain");
        m.in_place = Some(crate::model::InPlace {
            from: m.version,
            to: m.version,
            phase: crate::model::InPlacePhase::Draining,
            since_unix_s: 0,
            reason: crate::action::DeleteReason::Outdated,
            failure: None,
        });
        p.observe(1_000, std::slice::from_ref(&m));
        assert_eq!(
            go(&p, 1_100, true),
            Verdict::Wait(Hold::Draining { until_ms: 1_500 })
        );
        assert_eq!(
            go(&p, 1_500, false),
            Verdict::Wait(Hold::LoadBalancerBehind)
        );
        assert_eq!(go(&p, 1_500, true), Verdict::Go);
        // The step ends; the next one (another version) drains again.
        let ip = m.in_place.take();
        p.observe(5_000, std::slice::from_ref(&m));
        assert_eq!(go(&p, 5_000, true), Verdict::Go);
        m.in_place = ip;
        p.observe(9_000, std::slice::from_ref(&m));
        assert_eq!(
            go(&p, 9_000, true),
            Verdict::Wait(Hold::Draining { until_ms: 9_500 })
        );
    }

    #[test]
    fn a_wrong_expectation_is_reported() {
        let case = Case {
            name: "wrong",
            steps: vec![Step::Check {
                now_ms: 0,
                action: Action::ForgetControlPlane,
                lb_in_step: true,
                expect: Verdict::Wait(Hold::LoadBalancerBehind),
            }],
        };
        let err = run_case(&case, &mut Direct(Pacing::default())).unwrap_err();
        assert!(err.contains("wrong, step 0"), "{err}");
    }

    #[test]
    fn backoff_ceilings_and_jitter_bounds() {
        let refusal = PacingPolicy::DEFAULT.refusal;
        let failure = PacingPolicy::DEFAULT.failure;
        // (failures, refusal ceiling, failure ceiling)
        let rows: &[(u32, u64, u64)] = &[
            (0, 0, 0),
            (1, 100, 100),
            (2, 200, 200),
            (3, 250, 400),
            (6, 250, 3_200),
            (7, 250, 5_000),
            (40, 250, 5_000),
            (u32::MAX, 250, 5_000),
        ];
        for (n, r, f) in rows {
            assert_eq!(refusal.ceiling_ms(*n), *r, "refusal {n}");
            assert_eq!(failure.ceiling_ms(*n), *f, "failure {n}");
        }
        assert_eq!(
            refusal.delay_ms(0, 12345),
            0,
            "no delay before the first attempt"
        );
        // Every delay lies in the upper half of its ceiling, both ends reachable.
        let b = Backoff::new(10, 200);
        for n in 1..=12 {
            let c = b.ceiling_ms(n);
            assert_eq!(b.delay_ms(n, 0), c - c / 2);
            assert_eq!(b.delay_ms(n, c / 2), c, "{n}");
            for r in [1, 7, 1 << 40, u64::MAX] {
                let d = b.delay_ms(n, r);
                assert!((c - c / 2..=c).contains(&d), "{n} {r} {d}");
            }
        }
        // Odd ceilings: the half rounds up.
        assert_eq!(Backoff::new(5, 5).delay_ms(1, 0), 3);
        assert_eq!(Backoff::new(1, 1).delay_ms(1, 0), 1);
    }

    #[test]
    fn jitter_spreads_delays_over_the_range() {
        // A cheap, fixed sequence standing in for a generator: every value of the range
        // comes out, so the jitter is not stuck at one end.
        let b = PacingPolicy::DEFAULT.refusal;
        let seen: std::collections::BTreeSet<u64> = (0..1_000u64)
            .map(|i| b.delay_ms(2, i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect();
        assert_eq!(seen.len(), 101, "every delay of 100..=200 ms");
    }

    #[test]
    fn retry_keys() {
        let k = |a: &Action| RetryKey::of(a).to_string();
        assert_eq!(
            k(&Action::StopMachine {
                machine: "cp-1".into()
            }),
            "stop-machine cp-1"
        );
        assert_eq!(
            k(&Action::RemoveMember {
                member_id: 0xab,
                machine: None
            }),
            "remove-member ab"
        );
        assert_eq!(k(&Action::ForgetControlPlane), "forget-control-plane");
        assert_eq!(
            k(&Action::AllocateMachine {
                bootstrap: true,
                version: crate::Version::new(3, 5, 1),
                remediation: None,
            }),
            k(&Action::AllocateMachine {
                bootstrap: false,
                version: crate::Version::new(3, 4, 23),
                remediation: None,
            }),
        );
    }
}
