//! The control plane's history as the controller writes it besides its steps: members
//! that turn unhealthy, start a crash loop (with why etcd exited, from its log) or
//! recover, and each distinct refusal.

use super::*;

impl Reconciler {
    /// A refusal (the `Blocked` condition) is history too: what quorum would not do,
    /// and why (the pass hands out each distinct refusal once).
    pub(crate) async fn record_refusal(&mut self, cp: &ControlPlane, msg: &str) {
        tracing::warn!(cp = %cp.name, "refusing: {msg}");
        self.event(
            cp,
            NewEvent::new(EventKind::Blocked, StepOutcome::Refused, msg),
        )
        .await;
    }

    /// One event for each member seen with a problem, each crash loop that starts and
    /// each member that recovers (the history says when a repair began and why).
    pub(crate) async fn record_health(
        &self,
        cp: &ControlPlane,
        machines: &[Machine],
        t: &quorum_core::health::Tracked,
    ) {
        // A teardown stops every member on purpose: nothing it does is a problem.
        if cp.deleting {
            return;
        }
        for (machine, words) in &t.became_unhealthy {
            tracing::warn!(cp = %cp.name, machine = %machine, "unhealthy: {words}");
            let e = NewEvent {
                machine: Some(machine),
                ..NewEvent::new(EventKind::Unhealthy, StepOutcome::Ok, words)
            };
            self.event(cp, e).await;
        }
        for (machine, starts) in &t.crash_loops_started {
            let tail = self.crash_log(cp, machines, machine).await;
            let last = why_it_exited(&tail);
            let msg = if last.is_empty() {
                format!(
                    "crash loop: started {starts} times in {} min, and it exits",
                    quorum_core::health::CRASH_LOOP_WINDOW_S / 60
                )
            } else {
                format!(
                    "crash loop: started {starts} times in {} min, and it exits; its log ends: {last}",
                    quorum_core::health::CRASH_LOOP_WINDOW_S / 60
                )
            };
            tracing::warn!(cp = %cp.name, machine = %machine, "{msg}");
            let e = NewEvent {
                machine: Some(machine),
                ..NewEvent::new(EventKind::CrashLoop, StepOutcome::Failed, &msg)
            };
            self.event(cp, e).await;
        }
        for (machine, lasted_s) in &t.recovered {
            let msg = format!("recovered after {lasted_s}s");
            tracing::info!(cp = %cp.name, machine = %machine, "{msg}");
            let e = NewEvent {
                machine: Some(machine),
                ..NewEvent::new(EventKind::Recovered, StepOutcome::Ok, &msg)
            };
            self.event(cp, e).await;
        }
    }
}

impl Reconciler {
    /// A crash-looping machine's last log lines: from this host's provider, or from
    /// its host's agent (none if the agent does not answer: the event is recorded all
    /// the same).
    async fn crash_log(
        &self,
        cp: &ControlPlane,
        machines: &[Machine],
        machine: &str,
    ) -> Vec<String> {
        let Some(m) = machines.iter().find(|m| m.name == machine) else {
            return Vec::new();
        };
        self.machines_of(cp).log_tail(m, CRASH_LOG_LINES).await
    }
}

/// How many of a crash-looping machine's last log lines are searched for why it exited
/// (a Go panic's stack trace follows its message by a few dozen lines).
const CRASH_LOG_LINES: usize = 60;
/// The longest log message an event quotes.
const MAX_LOG_MESSAGE_CHARS: usize = 300;

/// Why an etcd exited, from the end of its log: the last fatal, panic or error entry of
/// its (zap JSON) log, else the last `panic:` line of a Go panic, else the last line.
fn why_it_exited(tail: &[String]) -> String {
    let level = |l: &str| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()
            .and_then(|v| v.get("level").and_then(|x| x.as_str()).map(str::to_string))
    };
    let serious = tail
        .iter()
        .rev()
        .find(|l| matches!(level(l).as_deref(), Some("fatal" | "panic" | "error")));
    let panic = || tail.iter().rev().find(|l| l.starts_with("panic:"));
    serious
        .or_else(panic)
        .or(tail.last())
        .map(|l| etcd_log_message(l))
        .unwrap_or_default()
}

/// The message of one of etcd's log lines: its zap JSON `msg` (and `error`, when there
/// is one), else the line itself; at most `MAX_LOG_MESSAGE_CHARS`.
fn etcd_log_message(line: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(line).ok();
    let text = match parsed {
        Some(v) => {
            let msg = v.get("msg").and_then(|m| m.as_str()).unwrap_or_default();
            match v.get("error").and_then(|m| m.as_str()) {
                Some(err) => format!("{msg}: {err}"),
                None => msg.to_string(),
            }
        }
        None => line.trim().to_string(),
    };
    text.chars().take(MAX_LOG_MESSAGE_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_is_explained_by_its_most_serious_log_line() {
        let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let fatal =
            r#"{"level":"fatal","msg":"failed to open database","error":"invalid database"}"#;
        let tail = lines(&[
            r#"{"level":"info","msg":"starting"}"#,
            fatal,
            "panic: boom",
            "goroutine 1 [running]:",
            "	/tmp/etcd/server/backend.go:75 +0x1",
        ]);
        assert_eq!(
            why_it_exited(&tail),
            "failed to open database: invalid database"
        );
        let tail = lines(&["panic: boom", "goroutine 1 [running]:", "	main.go:1"]);
        assert_eq!(why_it_exited(&tail), "panic: boom");
        assert_eq!(why_it_exited(&lines(&["last words"])), "last words");
        assert_eq!(why_it_exited(&[]), "");
    }
}
