//! One reconcile pass as a sans-IO state machine: the order in which a controller takes
//! in a fresh observation and acts on the decision made from it, written once. The
//! controller, the simulator and the model check all drive this type, so the order the
//! simulator's seeds and the model check prove is the order that ships.
//!
//! `Pass::begin` brings the health memory up to date with the observation, fills the
//! observation with that memory, and decides. The driver then asks `Pass::next` what to
//! do, does it, and says how it went, until the pass is done:
//!
//! 1. `Request::Record(Note::Refusal)`: a refusal not recorded before (each one once,
//!    whatever figures it carries, until it clears).
//! 2. `Request::Publish`: the client endpoints, `Some` when they change (every pass
//!    yields it, so that a driver publishes its status with it). Before any action, so
//!    clients see a leaving machine go before its member is removed.
//! 3. `Request::Balance`: bring the load balancer in step with the decision's endpoints,
//!    answered by `Pass::balanced` (a control plane without one is in step).
//! 4. `Request::Record(Note::Converged)`: the control plane has reached its spec (once
//!    each time it does).
//! 5. `Request::Perform`: the decision's actions in order, each once pacing lets it (a
//!    machine seen leaving starts its drain as acting starts), answered by
//!    `Pass::performed` with how it ended, which pacing and the health memory take in.
//!    The first action held back, refused or failed ends the pass.
//! 6. `Request::Done`: how the pass ended.
//!
//! A driver may drop a pass at any request (it crashed, lost its lease, had a write
//! fenced): what was not answered is not remembered, and the next pass observes afresh.
//!
//! Architecture invariant: the pass reads no clock and draws no random number. `now_ms`
//! (the driver's monotonic clock) and `random` (the backoff's jitter) are parameters;
//! the observation carries its own wall-clock time.

use crate::health::{Tracked, Tracker};
use crate::pacing::{Attempt, Hold, Pacing, PacingInput, PacingPolicy, Verdict};
use crate::{decide, Action, ConditionKind, ControlPlane, Decision, Machine, Observation};

/// The health memory a pass keeps: `health::Tracker`, or an abstraction of it in a
/// driver whose time is abstract (the model check's).
pub trait HealthMemory {
    /// Takes in a fresh observation (`Tracker::observe`).
    fn observe(&mut self, cp: &ControlPlane, machines: &[Machine], obs: &Observation) -> Tracked;
    /// A defragmentation was performed (`Tracker::defragmented`).
    fn defragmented(&mut self, machine: &str);
    /// A NOSPACE alarm was disarmed (`Tracker::disarmed`).
    fn disarmed(&mut self);
}

impl HealthMemory for Tracker {
    fn observe(&mut self, cp: &ControlPlane, machines: &[Machine], obs: &Observation) -> Tracked {
        Tracker::observe(self, cp, machines, obs)
    }
    fn defragmented(&mut self, machine: &str) {
        Tracker::defragmented(self, machine);
    }
    fn disarmed(&mut self) {
        Tracker::disarmed(self);
    }
}

/// What passes of one control plane remember of the ones before, kept by the driver and
/// lost with it (a crash, a step-down): a fresh one drains again and counts every
/// problem afresh, which delays a step and never hastens one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory<H = Tracker> {
    pub health: H,
    /// Drain clocks and retry due times.
    pub pacing: Pacing,
    /// The refusal last recorded.
    refusal: Option<String>,
    /// Convergence was recorded and the control plane has not left its spec since.
    converged: bool,
}

impl Memory {
    pub fn new(policy: PacingPolicy) -> Memory {
        Memory::with(Tracker::default(), Pacing::new(policy))
    }
}

impl<H> Memory<H> {
    pub fn with(health: H, pacing: Pacing) -> Memory<H> {
        Memory {
            health,
            pacing,
            refusal: None,
            converged: false,
        }
    }
}

/// What the pass asks its driver to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Record(Note),
    /// Publish the client endpoints: `Some` to change them to these, `None` to leave
    /// them as they are.
    Publish(Option<Vec<String>>),
    /// Bring the load balancer in step with `Pass::decision().endpoints`, then answer
    /// `Pass::balanced`.
    Balance,
    /// Perform this action, then answer `Pass::performed`.
    Perform(Perform),
    Done(End),
}

/// Something for the history: each once, when it first holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The decision refuses a step, in its words.
    Refusal(String),
    /// The control plane meets its spec.
    Converged,
}

/// One action to perform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Perform {
    /// Its place in the decision.
    pub index: usize,
    pub action: Action,
    /// Why the core decided it, where its name alone does not say (`Decision::because`,
    /// which concerns the first action only).
    pub because: Option<String>,
}

/// How a pass ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct End {
    /// Some action was performed.
    pub acted: bool,
    /// Where it stopped before the end of the decision, if it did.
    pub stopped: Option<Stop>,
}

/// Why a pass stopped before the end of its decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Pacing held the action back (draining, the load balancer behind, backing off).
    Held { action: Action, hold: Hold },
    /// The action was refused or failed.
    Ended { action: Action, attempt: Attempt },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Refusal,
    Publish,
    Balance,
    Converged,
    /// Acting begins: pacing takes in the machines.
    Act,
    /// The action at `index` is next, if pacing lets it.
    Next,
    /// The action at `index` was handed out; its answer is awaited.
    Awaiting,
    Done,
}

/// One pass over one control plane (see the module doc).
#[derive(Clone, Debug)]
pub struct Pass {
    decision: Decision,
    machines: Vec<Machine>,
    tracked: Tracked,
    /// The endpoints to publish, until handed out.
    publish: Option<Vec<String>>,
    stage: Stage,
    index: usize,
    /// Until the driver says otherwise, the load balancer is not known to be in step.
    lb_in_step: bool,
    acted: bool,
    stopped: Option<Stop>,
}

impl Pass {
    /// Takes in `obs` (a fresh observation of `machines`, the records): the health
    /// memory is brought up to date and put into `obs`, and the decision is made on it.
    /// `published`: the client endpoints published now, as the driver knows them
    /// (`None`: nothing yet).
    pub fn begin<H: HealthMemory>(
        cp: &ControlPlane,
        machines: Vec<Machine>,
        obs: &mut Observation,
        published: Option<&[String]>,
        mem: &mut Memory<H>,
    ) -> Pass {
        let tracked = mem.health.observe(cp, &machines, obs);
        tracked.memory().fill(obs);
        let decision = decide(cp, &machines, obs);
        let publish = crate::reach::to_publish(&decision.endpoints, published, &machines);
        Pass {
            decision,
            machines,
            tracked,
            publish,
            stage: Stage::Refusal,
            index: 0,
            lb_in_step: false,
            acted: false,
            stopped: None,
        }
    }

    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The records the pass decided on.
    pub fn machines(&self) -> &[Machine] {
        &self.machines
    }

    /// What the health memory learned from this pass's observation.
    pub fn tracked(&self) -> &Tracked {
        &self.tracked
    }

    /// What to do next; `now_ms` is the driver's monotonic clock.
    pub fn next<H: HealthMemory>(&mut self, mem: &mut Memory<H>, now_ms: u64) -> Request {
        loop {
            if let Some(request) = self.step(mem, now_ms) {
                return request;
            }
        }
    }

    /// Moves one stage on; `None` when that stage asks nothing of the driver.
    fn step<H: HealthMemory>(&mut self, mem: &mut Memory<H>, now_ms: u64) -> Option<Request> {
        match self.stage {
            Stage::Refusal => {
                self.stage = Stage::Publish;
                self.new_refusal(mem)
                    .map(|r| Request::Record(Note::Refusal(r)))
            }
            Stage::Publish => {
                self.stage = Stage::Balance;
                Some(Request::Publish(self.publish.take()))
            }
            Stage::Balance => {
                self.stage = Stage::Converged;
                Some(Request::Balance)
            }
            Stage::Converged => {
                self.stage = Stage::Act;
                let first = self.decision.converged && !mem.converged;
                mem.converged = self.decision.converged;
                first.then_some(Request::Record(Note::Converged))
            }
            Stage::Act => {
                // The endpoints of this pass are published: a machine seen leaving
                // starts its drain now.
                mem.pacing.observe(now_ms, &self.machines);
                self.stage = Stage::Next;
                None
            }
            Stage::Next => Some(self.next_action(mem, now_ms)),
            // Asked again without an answer: the driver gave up on that action (as
            // after a crash), so the pass is over.
            Stage::Awaiting | Stage::Done => {
                self.stage = Stage::Done;
                Some(Request::Done(self.end()))
            }
        }
    }

    /// The action at `index` if pacing lets it go now, else the end of the pass.
    fn next_action<H>(&mut self, mem: &Memory<H>, now_ms: u64) -> Request {
        let Some(action) = self.decision.actions.get(self.index) else {
            self.stage = Stage::Done;
            return Request::Done(self.end());
        };
        let input = PacingInput {
            now_ms,
            lb_in_step: self.lb_in_step,
        };
        if let Verdict::Wait(hold) = mem.pacing.check(action, &input) {
            self.stopped = Some(Stop::Held {
                action: action.clone(),
                hold,
            });
            self.stage = Stage::Done;
            return Request::Done(self.end());
        }
        self.stage = Stage::Awaiting;
        Request::Perform(Perform {
            index: self.index,
            action: action.clone(),
            because: self.decision.because.clone().filter(|_| self.index == 0),
        })
    }

    /// The load balancer is in step with the endpoints (or there is none), or not.
    pub fn balanced(&mut self, in_step: bool) {
        self.lb_in_step = in_step;
    }

    /// How the action handed out last ended, at `now_ms`; `random` (uniform over `u64`)
    /// is the jitter of its backoff if it did not succeed.
    pub fn performed<H: HealthMemory>(
        &mut self,
        mem: &mut Memory<H>,
        attempt: Attempt,
        now_ms: u64,
        random: u64,
    ) {
        if self.stage != Stage::Awaiting {
            debug_assert!(false, "an answer with no action awaiting one");
            return;
        }
        let Some(action) = self.decision.actions.get(self.index) else {
            return;
        };
        mem.pacing.record(action, attempt, now_ms, random);
        if attempt != Attempt::Done {
            self.stopped = Some(Stop::Ended {
                action: action.clone(),
                attempt,
            });
            self.stage = Stage::Done;
            return;
        }
        // What an action changes in the health memory: a member defragmented under
        // this alarm is not defragmented again for it; a disarmed alarm that returns is
        // a new one.
        match action {
            Action::Defragment { machine } => mem.health.defragmented(machine),
            Action::DisarmAlarm { .. } => mem.health.disarmed(),
            _ => {}
        }
        self.acted = true;
        self.index += 1;
        self.stage = Stage::Next;
    }

    /// A refusal to record: the decision's `Blocked` condition, unless the one recorded
    /// last says the same (the same refusal with other figures, "next start in 3s" then
    /// "2s", is the same refusal).
    fn new_refusal<H>(&self, mem: &mut Memory<H>) -> Option<String> {
        let now = self
            .decision
            .condition(ConditionKind::Blocked)
            .filter(|c| c.status)
            .map(|c| c.message.clone());
        if now.as_deref().map(shape) == mem.refusal.as_deref().map(shape) {
            return None;
        }
        mem.refusal.clone_from(&now);
        now
    }

    fn end(&self) -> End {
        End {
            acted: self.acted,
            stopped: self.stopped.clone(),
        }
    }
}

/// A message with each run of digits as `#`: what stays when only figures change.
fn shape(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for c in msg.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shape;

    #[test]
    fn refusals_that_differ_only_in_figures_have_one_shape() {
        assert_eq!(
            shape("quorum is lost: 1 of 3 answer (a down, next start in 12s)"),
            shape("quorum is lost: 1 of 3 answer (a down, next start in 3s)")
        );
        assert_ne!(shape("not removing a-1"), shape("not adding a-1"));
    }
}
