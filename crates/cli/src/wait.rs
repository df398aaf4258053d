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

pub fn format_event(e: &Event, since_ms: i64) -> String {
    let t = (e.at_ms - since_ms) as f64 / 1000.0;
    let mark = if e.ok { "✓" } else { "✗" };
    format!("[{t:>7.1}s] {mark} {}", e.message)
}

/// Follows `name` until `goal` or `timeout`; prints one line per step (and, on a
/// terminal, a live line with what it waits for).
pub async fn wait(
    store: &Store,
    provider: &LocalProvider,
    etcd: &Etcd,
    name: &str,
    goal: Goal,
    timeout: Duration,
    after_event: i64,
) -> Result<()> {
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let start_ms = quorum_controller::now_ms();
    let mut last_event = after_event;
    let mut warned_no_controller = false;
    let mut last_reason = String::new();
    loop {
        for e in store.events_after(name, last_event, 1_000)? {
            last_event = e.id;
            if tty {
                eprint!("\r\x1b[K");
            }
            println!("{}", format_event(&e, start_ms));
        }
        let Some(cp) = store.control_plane(name)? else {
            if goal == Goal::Gone {
                if tty {
                    eprint!("\r\x1b[K");
                }
                return Ok(());
            }
            bail!("control plane '{name}' was deleted while waiting");
        };
        let s = live(store, provider, etcd, &cp).await?;
        if goal == Goal::Converged && s.converged {
            if tty {
                eprint!("\r\x1b[K");
            }
            return Ok(());
        }
        let reason = match (&s.waiting_for, s.decision.is_blocked()) {
            (Some(w), true) => format!("blocked: {w}"),
            (Some(w), false) => format!("waiting for {w}"),
            (None, _) => s.operation.to_string(),
        };
        if !s.controller.as_ref().is_some_and(|c| c.active)
            && !warned_no_controller
            && start.elapsed() > Duration::from_millis(CONTROLLER_STALE_MS as u64)
        {
            warned_no_controller = true;
            eprintln!("note: no controller is working on '{name}': start one with `quorum controller` (in another terminal)");
        }
        if start.elapsed() >= timeout {
            if tty {
                eprint!("\r\x1b[K");
            }
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

/// Parses `90s`, `10m`, `1h`, `500ms` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration: use for example 90s, 10m or 1h"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "'{s}' has an unknown unit '{unit}': use ms, s, m or h"
            ))
        }
    };
    if !(secs > 0.0 && secs < 7.0 * 86400.0) {
        return Err(format!("'{s}' is out of range: between 1ms and 7 days"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        for bad in ["", "x", "10y", "-5s", "0s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
