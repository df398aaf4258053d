//! One reconcile pass (`quorum_core::pass`): the requests a driver gets, in order, for a
//! situation, the memory it starts with and the answers it gives. The trace language:
//! `refusal`, `publish:N` (N endpoints, changed) or `publish` (unchanged), `balance`,
//! `converged`, `kind:machine` (an action handed out; answered from the row's script,
//! done by default), `held:drain|lb|backoff`, `stopped:refused|failed`, `done` or
//! `done:acted`.

use super::*;
use quorum_core::health::{Tracked, Tracker};
use quorum_core::pacing::{Attempt, Hold, PacingPolicy};
use quorum_core::pass::{HealthMemory, Memory, Note, Pass, Request, Stop};

/// How a driver answers one pass.
#[derive(Clone)]
struct Answers {
    /// What the driver knows is published now.
    published: Option<Vec<String>>,
    /// The load balancer's answer.
    lb_in_step: bool,
    /// How each action handed out ends, in order (done once the script runs out).
    attempts: Vec<Attempt>,
    now_ms: u64,
}

fn answers() -> Answers {
    Answers {
        published: None,
        lb_in_step: true,
        attempts: vec![],
        now_ms: 0,
    }
}

/// Drives one pass over `s` with `mem`; the trace of its requests.
fn run<H: HealthMemory>(s: &Sit, mem: &mut Memory<H>, a: &Answers) -> String {
    let (cp, machines, mut obs) = s.build();
    let mut pass = Pass::begin(&cp, machines, &mut obs, a.published.as_deref(), mem);
    let mut trace = Vec::new();
    let mut attempts = a.attempts.iter();
    loop {
        match pass.next(mem, a.now_ms) {
            Request::Record(Note::Refusal(_)) => trace.push("refusal".to_string()),
            Request::Record(Note::Converged) => trace.push("converged".to_string()),
            Request::Publish(Some(e)) => trace.push(format!("publish:{}", e.len())),
            Request::Publish(None) => trace.push("publish".to_string()),
            Request::Balance => {
                trace.push("balance".to_string());
                pass.balanced(a.lb_in_step);
            }
            Request::Perform(p) => {
                let what = p.action.machine().map(|m| format!(":{m}"));
                trace.push(format!("{}{}", p.action.kind(), what.unwrap_or_default()));
                let attempt = attempts.next().copied().unwrap_or(Attempt::Done);
                pass.performed(mem, attempt, a.now_ms, 0);
            }
            Request::Done(end) => {
                trace.push(match end.stopped {
                    Some(Stop::Held { hold, .. }) => match hold {
                        Hold::Draining { .. } => "held:drain",
                        Hold::LoadBalancerBehind => "held:lb",
                        Hold::BackingOff { .. } => "held:backoff",
                    }
                    .to_string(),
                    Some(Stop::Ended { attempt, .. }) => {
                        format!("stopped:{attempt:?}").to_lowercase()
                    }
                    None => "—".to_string(),
                });
                trace.retain(|t| t != "—");
                trace.push(if end.acted { "done:acted" } else { "done" }.to_string());
                return trace.join(" ");
            }
        }
    }
}

fn memory() -> Memory {
    Memory::new(PacingPolicy::DEFAULT)
}

/// Three voters and cp-4 marked for deletion (a scale down from 4).
fn leaving() -> Sit {
    sit(
        3,
        OLD,
        vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD).deleting()],
    )
}

fn endpoints(s: &Sit) -> Vec<String> {
    let (cp, machines, obs) = s.build();
    decide(&cp, &machines, &obs).endpoints
}

#[test]
fn pass_table() {
    let drained = Answers {
        now_ms: PacingPolicy::DEFAULT.drain_ms,
        ..answers()
    };
    // Each row: the situation, the passes before it (with their answers) and this
    // pass's answers, and the trace expected of this pass.
    type Row = (&'static str, Sit, Vec<Answers>, Answers, &'static str);
    let rows: Vec<Row> = vec![
        (
            "converged, first pass: the endpoints published, convergence recorded",
            sit(3, OLD, old3()),
            vec![],
            answers(),
            "publish:3 balance converged done",
        ),
        (
            "converged again: nothing new to publish or record",
            sit(3, OLD, old3()),
            vec![answers()],
            Answers {
                published: Some(endpoints(&sit(3, OLD, old3()))),
                ..answers()
            },
            "publish balance done",
        ),
        (
            "a leaving machine: its removal waits for the drain, which starts now",
            leaving(),
            vec![],
            answers(),
            "publish:3 balance held:drain done",
        ),
        (
            "drained: removed, then the rest of the decision",
            leaving(),
            vec![answers()],
            drained.clone(),
            "publish:3 balance remove-member:cp-4 done:acted",
        ),
        (
            "drained, but the load balancer is behind: held",
            leaving(),
            vec![answers()],
            Answers {
                lb_in_step: false,
                ..drained.clone()
            },
            "publish:3 balance held:lb done",
        ),
        (
            "the removal refused by etcd ends the pass",
            leaving(),
            vec![answers()],
            Answers {
                attempts: vec![Attempt::Refused],
                ..drained.clone()
            },
            "publish:3 balance remove-member:cp-4 stopped:refused done",
        ),
        (
            "refused a moment ago: backing off",
            leaving(),
            vec![
                answers(),
                Answers {
                    attempts: vec![Attempt::Refused],
                    ..drained.clone()
                },
            ],
            drained.clone(),
            "publish:3 balance held:backoff done",
        ),
        (
            "a refusal is recorded before anything else",
            sit(1, NEW, vec![m(1, OLD)]).surge(0),
            vec![],
            answers(),
            "refusal publish:1 balance done",
        ),
        (
            "and once",
            sit(1, NEW, vec![m(1, OLD)]).surge(0),
            vec![answers()],
            answers(),
            "publish:1 balance done",
        ),
    ];
    let mut failures = Vec::new();
    for (case, s, before, now, expect) in rows {
        let mut mem = memory();
        for a in &before {
            run(&s, &mut mem, a);
        }
        let got = run(&s, &mut mem, &now);
        if got != expect {
            failures.push(format!("{case}:\n  expected {expect}\n  got      {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A health memory that counts what the pass told it.
#[derive(Default)]
struct Spy {
    observed: u32,
    defragmented: Vec<String>,
    disarmed: u32,
}

impl HealthMemory for Spy {
    fn observe(&mut self, _: &ControlPlane, _: &[Machine], _: &Observation) -> Tracked {
        self.observed += 1;
        Tracked::default()
    }
    fn defragmented(&mut self, machine: &str) {
        self.defragmented.push(machine.to_string());
    }
    fn disarmed(&mut self) {
        self.disarmed += 1;
    }
}

#[test]
fn the_health_memory_takes_in_what_was_done_and_only_that() {
    // A member over the defragmentation threshold: defragmented, as the decision says.
    let s = sit(
        3,
        OLD,
        vec![m(1, OLD), m(2, OLD).db(8 << 20, 2 << 20), m(3, OLD)],
    );
    let (cp, machines, obs) = s.build();
    let d = decide(&cp, &machines, &obs);
    assert!(
        d.actions
            .iter()
            .any(|a| matches!(a, Action::Defragment { .. })),
        "{:?}",
        d.actions
    );
    let mut mem = Memory::with(Spy::default(), Default::default());
    let trace = run(&s, &mut mem, &answers());
    assert!(trace.contains("defragment:cp-2"), "{trace}");
    assert_eq!(mem.health.observed, 1);
    assert_eq!(mem.health.defragmented, ["cp-2"]);
    // Failed: nothing to remember.
    let mut mem = Memory::with(Spy::default(), Default::default());
    let failed = Answers {
        attempts: vec![Attempt::Failed],
        ..answers()
    };
    run(&s, &mut mem, &failed);
    assert!(mem.health.defragmented.is_empty());
    assert_eq!(mem.health.disarmed, 0);
    // The tracker itself is a health memory.
    let mut mem = Memory::with(Tracker::default(), Default::default());
    run(&s, &mut mem, &answers());
}

#[test]
fn why_the_first_action_was_decided_goes_with_it_only() {
    let s = sit(
        4,
        OLD,
        vec![
            m(1, OLD),
            m(2, OLD),
            m(3, OLD),
            m(4, OLD).learner().unreachable().started_ago(&[3]),
        ],
    );
    let (cp, machines, mut obs) = s.build();
    let mut mem = memory();
    let mut pass = Pass::begin(&cp, machines, &mut obs, None, &mut mem);
    let mut because = Vec::new();
    loop {
        match pass.next(&mut mem, 0) {
            Request::Balance => pass.balanced(true),
            Request::Perform(p) => {
                because.push((p.index, p.because.is_some()));
                pass.performed(&mut mem, Attempt::Done, 0, 0);
            }
            Request::Done(_) => break,
            _ => {}
        }
    }
    assert_eq!(because, [(0, true), (1, false)]);
}

#[test]
fn a_driver_that_gives_up_on_an_action_ends_the_pass() {
    let (cp, machines, mut obs) = leaving().build();
    let mut mem = memory();
    // A pass before this one saw cp-4 leaving: its drain has passed.
    run(&leaving(), &mut mem, &answers());
    let mut pass = Pass::begin(&cp, machines, &mut obs, None, &mut mem);
    let now = PacingPolicy::DEFAULT.drain_ms;
    let mut performs = 0;
    let end = loop {
        match pass.next(&mut mem, now) {
            Request::Balance => pass.balanced(true),
            // Handed out, never answered (a timeout the driver did not classify).
            Request::Perform(_) => performs += 1,
            Request::Done(end) => break end,
            _ => {}
        }
    };
    assert_eq!(performs, 1);
    assert!(!end.acted);
}
