//! `--wait`: follow a control plane until its spec is met, printing each step.

use crate::status::{live, CONTROLLER_STALE_MS};
use anyhow::{bail, Result};
use quorum_etcd::Etcd;
use quorum_provider::LocalProvider;
use quorum_store::{Event, Store};
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
    format!("[{t:>6.1}s] {} {}", mark(e), e.message)
}

/// ✓ done, … not accepted by etcd yet (retried), ✗ failed (retried).
pub fn mark(e: &Event) -> &'static str {
    match (e.ok, e.kind.as_str()) {
        (true, _) => "✓",
        (false, "refused") => "…",
        (false, _) => "✗",
    }
}

/// Is a controller running on this home (a recent heartbeat)?
pub fn controller_active(store: &Store) -> bool {
    store
        .last_controller_heartbeat()
        .ok()
        .flatten()
        .is_some_and(|beat| {
            quorum_controller::now_ms() - beat.at_ms < quorum_controller::CONTROLLER_STALE_MS
        })
}

/// Prints the events of `name` after `*last_event` (updating it); returns whether the
/// newest printed one was a refusal that is being retried.
pub fn print_events(
    store: &Store,
    name: &str,
    last_event: &mut i64,
    since_ms: i64,
    tty: bool,
) -> Result<bool> {
    let mut refused = false;
    for e in store.events_after(name, *last_event, 1_000)? {
        *last_event = e.id;
        if e.kind == "converged" {
            continue;
        }
        refused = e.kind == "refused";
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
    etcd: &Etcd,
    name: &str,
    goal: Goal,
    timeout: Duration,
    after_event: i64,
    since_ms: i64,
) -> Result<()> {
    let tty = std::io::stderr().is_terminal();
    let clear = || {
        if tty {
            eprint!("\r\x1b[K");
        }
    };
    let start = Instant::now();
    let mut last_event = after_event;
    let mut warned_no_controller = false;
    let mut retrying = false;
    let mut last_reason = String::new();
    loop {
        if print_events(store, name, &mut last_event, since_ms, tty)? {
            retrying = true;
        }
        let Some(cp) = store.control_plane(name)? else {
            clear();
            if goal == Goal::Gone {
                return Ok(());
            }
            bail!("control plane '{name}' was deleted while waiting");
        };
        let s = live(store, provider, etcd, &cp).await?;
        if goal == Goal::Converged && s.converged {
            clear();
            let n = s.machines.len();
            println!(
                "[{:>6.1}s] ✓ {name}: {n} machine{} at etcd {}, every member healthy; client endpoints: {}",
                (quorum_controller::now_ms() - since_ms) as f64 / 1000.0,
                if n == 1 { "" } else { "s" },
                s.spec.version,
                s.endpoints.join(" ")
            );
            return Ok(());
        }
        if goal == Goal::Converged && s.spec.paused {
            clear();
            bail!("'{name}' is paused, so nothing changes until `quorum pause {name} --resume`; the change is recorded");
        }
        let reason = match (
            &s.waiting_for,
            s.decision.is_blocked(),
            s.decision.actions.first(),
        ) {
            (Some(w), true, _) => format!("BLOCKED: {w}"),
            (Some(w), false, _) => w.clone(),
            (None, _, Some(a)) if retrying => {
                format!("next: {a} (not accepted by etcd yet, retrying)")
            }
            (None, _, Some(a)) => format!("next: {a}"),
            (None, _, None) => s.operation.clone(),
        };
        if s.waiting_for.is_some() {
            retrying = false;
        }
        if !warned_no_controller
            && start.elapsed() > Duration::from_millis(CONTROLLER_STALE_MS as u64)
            && !controller_active(store)
        {
            warned_no_controller = true;
            clear();
            eprintln!("note: no controller is running on this home: start one with `quorum controller` (in another terminal)");
        }
        if start.elapsed() >= timeout {
            clear();
            bail!(
                "'{name}' did not reach its spec within {}s: {} ({reason})",
                timeout.as_secs(),
                s.operation
            );
        }
        if tty {
            eprint!(
                "\r\x1b[K  {:>5.1}s  {}: {}",
                start.elapsed().as_secs_f64(),
                s.operation,
                reason
            );
            let _ = std::io::stderr().flush();
        } else if reason != last_reason && s.decision.is_blocked() {
            println!("  ... {reason}");
        }
        last_reason = reason;
        tokio::time::sleep(Duration::from_millis(WAIT_POLL_MS)).await;
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
}
