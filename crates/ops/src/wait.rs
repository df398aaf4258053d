//! `--wait`: follow a control plane until its spec is met, printing each step.

use crate::status::{live, Status, CONTROLLER_STALE_MS};
use anyhow::{bail, Result};
use quorum_core::{Action, ActionKind, ControlPlane, Decision};
use quorum_etcd::Etcd;
use quorum_provider::LocalProvider;
use quorum_store::{Event, EventKind, StepOutcome, Store};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often `--wait` looks at the control plane.
const WAIT_POLL_MS: u64 = 200;

/// What to wait for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    /// The spec is met (decision converged).
    Converged,
    /// The control plane is gone (after `quorum delete`).
    Gone,
}

/// One progress line: seconds since the command started, a mark (✓ done, … not
/// accepted yet and retried, ✗ failed and retried), what happened.
pub fn format_event(e: &Event, since_ms: i64) -> String {
    let t = (e.at_ms - since_ms).max(0) as f64 / 1000.0;
    // A health event's words do not name the machine ("unreachable"): the line does.
    match &e.machine {
        Some(m) if !e.message.contains(m.as_str()) => {
            format!("[{t:>6.1}s] {} {m}: {}", mark(e), e.message)
        }
        _ => format!("[{t:>6.1}s] {} {}", mark(e), e.message),
    }
}

/// ✓ done, … not accepted by etcd yet (retried), ✗ failed (retried) or a problem seen
/// (a member unhealthy, a crash loop: recorded as seen, never a success).
pub fn mark(e: &Event) -> &'static str {
    if matches!(e.kind, EventKind::Unhealthy | EventKind::CrashLoop) {
        return "✗";
    }
    match e.outcome {
        StepOutcome::Ok => "✓",
        StepOutcome::Refused => "…",
        StepOutcome::Failed => "✗",
    }
}

/// A step etcd refused and that no step has been done since: while it is the next
/// step, the live line says that it is being retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `None` for a refusal written before events recorded the step's kind.
    kind: Option<ActionKind>,
    machine: Option<String>,
}

impl Refusal {
    /// The refusal pending after `e`, given the one pending before it.
    pub fn after(pending: Option<Refusal>, e: &Event) -> Option<Refusal> {
        match (e.outcome, &e.kind) {
            (StepOutcome::Refused, kind) => Some(Refusal {
                kind: kind.action(),
                machine: e.machine.clone(),
            }),
            // A step done (or failed) since: the refusal is behind.
            (_, EventKind::Action(_)) => None,
            _ => pending,
        }
    }

    /// Is `a` the step that was refused?
    fn is(&self, a: &Action) -> bool {
        self.kind.is_none_or(|k| k == a.kind()) && self.machine.as_deref() == a.machine()
    }
}

/// What the live line says: what the decision waits for, or its next step (and
/// whether etcd refused that very step and it is being retried).
pub fn live_reason(d: &Decision, refused: Option<&Refusal>) -> String {
    match (&d.waiting_for, d.is_blocked(), d.actions.first()) {
        (Some(w), true, _) => format!("BLOCKED: {w}"),
        (Some(w), false, _) => w.clone(),
        (None, _, Some(a)) if refused.is_some_and(|r| r.is(a)) => {
            format!("next: {a} (not accepted by etcd yet, retrying)")
        }
        (None, _, Some(a)) => format!("next: {a}"),
        (None, _, None) => d.operation.to_string(),
    }
}

/// Is a controller running on this home (a recent heartbeat)?
pub fn controller_active(store: &Store) -> bool {
    store
        .last_controller_heartbeat()
        .ok()
        .flatten()
        .is_some_and(|beat| {
            quorum_clock::now_ms() - beat.at_ms < quorum_controller::CONTROLLER_STALE_MS
        })
}

/// Prints the events of `name` after `*last_event` (updating it); returns the refusal
/// still pending after them (starting from `refused`).
pub fn print_events(
    store: &Store,
    name: &str,
    last_event: &mut i64,
    since_ms: i64,
    tty: bool,
    mut refused: Option<Refusal>,
) -> Result<Option<Refusal>> {
    for e in store.events_after(name, *last_event, 1_000)? {
        *last_event = e.id;
        refused = Refusal::after(refused, &e);
        if e.kind == EventKind::Converged {
            continue;
        }
        if tty {
            eprint!("\r\x1b[K");
        }
        println!("{}", format_event(&e, since_ms));
    }
    Ok(refused)
}

/// Follows `name` until `goal` or `timeout`; prints one line per step (and, on a
/// terminal, a live line with what it waits for). Times count from `since_ms`.
#[allow(clippy::too_many_arguments)]
pub async fn wait(
    store: &Store,
    provider: &LocalProvider,
    // The adapter for the control plane as read now: its credentials change with a CA
    // rotation's phases.
    etcd: &dyn Fn(&ControlPlane) -> Result<std::sync::Arc<Etcd>>,
    name: &str,
    goal: Goal,
    timeout: Duration,
    after_event: i64,
    since_ms: i64,
) -> Result<()> {
    let mut follow = Follow::new(store, name, after_event, since_ms);
    loop {
        follow.print_events()?;
        let Some(cp) = store.control_plane(name)? else {
            follow.clear();
            if goal == Goal::Gone {
                return Ok(());
            }
            bail!("control plane '{name}' was deleted while waiting");
        };
        let adapter = etcd(&cp)?;
        let s = live(store, provider, &adapter, &cp).await?;
        if goal == Goal::Converged && s.converged {
            return follow.say_converged(&s);
        }
        if goal == Goal::Converged && s.spec.paused {
            follow.clear();
            bail!("'{name}' is paused, so nothing changes until `quorum pause {name} --resume`; the change is recorded");
        }
        let reason = live_reason(&s.decision, follow.refused.as_ref());
        follow.warn_if_no_controller();
        if follow.start.elapsed() >= timeout {
            follow.clear();
            bail!(
                "'{name}' did not reach its spec within {}s: {} ({reason})",
                timeout.as_secs(),
                s.operation
            );
        }
        follow.show_progress(&s, reason);
        tokio::time::sleep(Duration::from_millis(WAIT_POLL_MS)).await;
    }
}

/// What `wait` keeps from one look at the control plane to the next.
struct Follow<'a> {
    store: &'a Store,
    name: &'a str,
    /// When the command started: the lines' times count from it.
    since_ms: i64,
    /// Standard error is a terminal, so it shows a live line.
    tty: bool,
    /// When the wait started: its timeout counts from it.
    start: Instant,
    /// The last event printed.
    last_event: i64,
    /// The step etcd refused and that is being retried, if any.
    refused: Option<Refusal>,
    warned_no_controller: bool,
    /// The live line's reason as last shown.
    last_reason: String,
}

impl<'a> Follow<'a> {
    fn new(store: &'a Store, name: &'a str, after_event: i64, since_ms: i64) -> Follow<'a> {
        Follow {
            store,
            name,
            since_ms,
            tty: std::io::stderr().is_terminal(),
            start: Instant::now(),
            last_event: after_event,
            refused: None,
            warned_no_controller: false,
            last_reason: String::new(),
        }
    }

    /// Clears the live line, on a terminal.
    fn clear(&self) {
        if self.tty {
            eprint!("\r\x1b[K");
        }
    }

    /// Prints the events since the last look, and keeps the refusal they leave pending.
    fn print_events(&mut self) -> Result<()> {
        self.refused = print_events(
            self.store,
            self.name,
            &mut self.last_event,
            self.since_ms,
            self.tty,
            self.refused.take(),
        )?;
        Ok(())
    }

    /// Prints the last steps and the line that says the spec is met.
    fn say_converged(&mut self, s: &Status) -> Result<()> {
        self.clear();
        let name = self.name;
        // The steps recorded while the status was read (the last promotion, the
        // endpoints it published) come before the line that says it is done.
        print_events(
            self.store,
            name,
            &mut self.last_event,
            self.since_ms,
            false,
            None,
        )?;
        let n = s.machines.len();
        println!(
            "[{:>6.1}s] ✓ {name}: {n} machine{} at etcd {}, every member healthy; client endpoints: {}",
            (quorum_clock::now_ms() - self.since_ms) as f64 / 1000.0,
            if n == 1 { "" } else { "s" },
            s.spec.version,
            s.endpoints.join(" ")
        );
        Ok(())
    }

    /// Says once, when the wait has lasted longer than a controller's heartbeat may
    /// be stale, that no controller runs (nothing would change without one).
    fn warn_if_no_controller(&mut self) {
        if !self.warned_no_controller
            && self.start.elapsed() > Duration::from_millis(CONTROLLER_STALE_MS as u64)
            && !controller_active(self.store)
        {
            self.warned_no_controller = true;
            self.clear();
            eprintln!("note: no controller is running on this home: start one with `quorum controller` (in another terminal)");
        }
    }

    /// The live line on a terminal; elsewhere, a line each time the reason the control
    /// plane is blocked changes.
    fn show_progress(&mut self, s: &Status, reason: String) {
        if self.tty {
            eprint!(
                "\r\x1b[K  {:>5.1}s  {}: {}",
                self.start.elapsed().as_secs_f64(),
                s.operation,
                reason
            );
            let _ = std::io::stderr().flush();
        } else if reason != self.last_reason && s.decision.is_blocked() {
            println!("  ... {reason}");
        }
        self.last_reason = reason;
    }
}

/// The longest `--timeout`: a week. Longer is a mistake (or a job for a scheduler).
const MAX_TIMEOUT_S: u64 = 7 * 86_400;

/// Parses a `--timeout` in quorum's one duration grammar (`quorum_core::parse_duration`:
/// `90s`, `10m`, `1h`, `1d`, `500ms`; a unit is required), between 1 ms and a week.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = quorum_core::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(MAX_TIMEOUT_S) {
        return Err(format!("{s:?} is out of range: between 1ms and 7d"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("5min").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        for bad in ["", "x", "10y", "-5s", "0s", "90", "8d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    fn event(kind: ActionKind, outcome: StepOutcome, machine: &str) -> Event {
        Event {
            id: 1,
            control_plane: "a".into(),
            at_ms: 0,
            kind: EventKind::Action(kind),
            machine: Some(machine.into()),
            message: format!("{kind} {machine}"),
            ok: outcome == StepOutcome::Ok,
            outcome,
            waited_ms: None,
            took_ms: None,
            by: None,
        }
    }

    #[test]
    fn a_health_line_names_its_machine_and_never_ticks_a_problem() {
        let health = |kind, message: &str| Event {
            kind,
            message: message.into(),
            ..event(ActionKind::Promote, StepOutcome::Ok, "a-2")
        };
        let seen = format_event(&health(EventKind::Unhealthy, "unreachable"), 0);
        assert_eq!(seen, "[   0.0s] ✗ a-2: unreachable");
        let back = format_event(&health(EventKind::Recovered, "recovered after 7s"), 0);
        assert_eq!(back, "[   0.0s] ✓ a-2: recovered after 7s");
        // A step's words name their machine already: not twice.
        let step = format_event(&event(ActionKind::Promote, StepOutcome::Ok, "a-2"), 0);
        assert_eq!(step, "[   0.0s] ✓ promote a-2");
    }

    fn next(action: Action) -> Decision {
        Decision {
            because: None,
            actions: vec![action],
            operation: quorum_core::Operation::ScalingUp,
            waiting_for: None,
            conditions: vec![],
            endpoints: vec![],
            converged: false,
            voters: 3,
            healthy_voters: 3,
            machines: vec![],
        }
    }

    fn add(machine: &str) -> Action {
        Action::AddLearner {
            machine: machine.into(),
            peer_url: format!("http://{machine}:2380"),
        }
    }

    fn promote(machine: &str) -> Action {
        Action::Promote {
            machine: machine.into(),
            member_id: 7,
        }
    }

    /// Walkthrough item 6: the live line said "(not accepted by etcd yet, retrying)"
    /// for later steps that etcd never refused.
    #[test]
    fn the_live_line_says_retrying_only_for_the_refused_step() {
        let history = [
            event(ActionKind::AddLearner, StepOutcome::Refused, "a-3"),
            event(ActionKind::AddLearner, StepOutcome::Refused, "a-3"),
        ];
        let refused = history.iter().fold(None, Refusal::after);
        let line = live_reason(&next(add("a-3")), refused.as_ref());
        assert_eq!(
            line,
            "next: add a-3 as a learner (not accepted by etcd yet, retrying)"
        );
        // Another step next (another machine's, or another kind): nothing was refused.
        assert_eq!(
            live_reason(&next(add("a-4")), refused.as_ref()),
            "next: add a-4 as a learner"
        );
        assert_eq!(
            live_reason(&next(promote("a-3")), refused.as_ref()),
            "next: promote a-3 to voter"
        );
        // Once a step is done, the refusal is behind, even if the same kind comes next.
        let done = Refusal::after(
            refused.clone(),
            &event(ActionKind::AddLearner, StepOutcome::Ok, "a-3"),
        );
        assert_eq!(done, None);
        assert_eq!(
            live_reason(&next(add("a-3")), done.as_ref()),
            "next: add a-3 as a learner"
        );
        // Events that are not steps (endpoints, the load balancer) leave it pending.
        let mut lb = event(ActionKind::AddLearner, StepOutcome::Ok, "a-2");
        lb.kind = EventKind::LbAdd;
        assert_eq!(Refusal::after(refused.clone(), &lb), refused);
        // A refusal written before events named the step matches by machine.
        let mut old = event(ActionKind::AddLearner, StepOutcome::Refused, "a-3");
        old.kind = EventKind::Refused;
        let legacy = Refusal::after(None, &old);
        assert!(live_reason(&next(add("a-3")), legacy.as_ref()).ends_with("retrying)"));
        assert!(!live_reason(&next(add("a-4")), legacy.as_ref()).ends_with("retrying)"));
        // Waiting or blocked: say so, whatever was refused.
        let mut waiting = next(add("a-3"));
        waiting.actions.clear();
        waiting.waiting_for = Some("learner a-3 is catching up (900 of 1000)".into());
        assert_eq!(
            live_reason(&waiting, refused.as_ref()),
            "learner a-3 is catching up (900 of 1000)"
        );
    }

    #[test]
    fn marks_follow_the_outcome() {
        let m = |o| mark(&event(ActionKind::Promote, o, "a-1"));
        assert_eq!(
            [
                m(StepOutcome::Ok),
                m(StepOutcome::Refused),
                m(StepOutcome::Failed)
            ],
            ["✓", "…", "✗"]
        );
    }
}
