//! `quorum status NAME --watch`: the status again and again, one observation a second.
//! On a terminal the screen is redrawn in place; otherwise (a pipe, a file) a new status
//! is printed only when something in it changed, so a log of it reads as a history.

use crate::args::Output;
use crate::cmd::emit;
use crate::cmd::status::render;
use anyhow::Result;
use quorum_clock::now_ms;
use quorum_ops::{status::Status, Ctx};
use std::io::IsTerminal;
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};

/// How often the control plane is observed.
const WATCH_INTERVAL_MS: u64 = 1_000;

/// Watches `name` until Ctrl-C, `timeout`, or its deletion (each ends it with success).
pub async fn run(ctx: &Ctx, name: &str, output: Output, timeout: Option<Duration>) -> Result<()> {
    // A name that does not exist is an error at once, not an empty watch.
    ctx.store.get_control_plane(name)?;
    let terminal = std::io::stdout().is_terminal();
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut tick = tokio::time::interval(Duration::from_millis(WATCH_INTERVAL_MS));
    // An observation slower than the interval delays the next one instead of bunching.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last: Option<serde_json::Value> = None;
    let stop = async {
        match deadline {
            Some(d) => tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = tokio::time::sleep_until(d) => {}
            },
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(stop);
    loop {
        let shown = tokio::select! {
            _ = &mut stop => return Ok(()),
            shown = async {
                tick.tick().await;
                step(ctx, name, output, terminal, &mut last).await
            } => shown?,
        };
        if !shown {
            return Ok(());
        }
    }
}

/// One observation, shown if due; `false` once the control plane is gone or nobody
/// reads any more.
async fn step(
    ctx: &Ctx,
    name: &str,
    output: Output,
    terminal: bool,
    last: &mut Option<serde_json::Value>,
) -> Result<bool> {
    let Some(cp) = ctx.store.control_plane(name)? else {
        emit(&format!("{name} no longer exists (deleted)\n"))?;
        return Ok(false);
    };
    let s = ctx.live(&cp).await?;
    if terminal {
        return emit(&frame(name, &render(&s, output)?));
    }
    let key = change_key(&s)?;
    if last.as_ref() == Some(&key) {
        return Ok(true);
    }
    *last = Some(key);
    let block = match output {
        Output::Table => format!(
            "--- {} UTC\n{}\n",
            quorum_pki::format_unix_ms(now_ms()),
            quorum_ops::status::render_table(&s)
        ),
        // One object per line, as `events --follow -o json` prints.
        Output::Json => format!("{}\n", serde_json::to_string(&s)?),
        Output::Yaml => format!("---\n{}", render(&s, output)?),
    };
    emit(&block)
}

/// A terminal screen: cursor home, each line clearing what was after it, and the rest of
/// the old screen cleared, so it is redrawn in place without flicker.
fn frame(name: &str, text: &str) -> String {
    let mut out = format!(
        "\x1b[HEvery {}s: quorum status {name}    {} (Ctrl-C stops)\x1b[K\n\x1b[K\n",
        WATCH_INTERVAL_MS / 1000,
        quorum_pki::format_unix_s(now_ms() / 1000)
    );
    for line in text.lines() {
        out.push_str(line);
        out.push_str("\x1b[K\n");
    }
    out.push_str("\x1b[J");
    out
}

/// What counts as a change: the status without what moves on its own every second (how
/// long ago the controller was seen, how long its step has run) or with every write
/// (raft indexes).
fn change_key(s: &Status) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(s)?;
    if let Some(c) = v.get_mut("controller").and_then(|c| c.as_object_mut()) {
        c.remove("lastSeenMsAgo");
        if let Some(w) = c.get_mut("workingOn").and_then(|w| w.as_object_mut()) {
            w.remove("forMs");
        }
    }
    if let Some(ms) = v.get_mut("machines").and_then(|m| m.as_array_mut()) {
        for m in ms.iter_mut().filter_map(|m| m.as_object_mut()) {
            m.remove("raftIndex");
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_redraws_in_place() {
        let f = frame("prod", "a\nb\n");
        assert!(f.starts_with("\x1b[HEvery 1s: quorum status prod"), "{f:?}");
        assert!(f.ends_with("a\x1b[K\nb\x1b[K\n\x1b[J"), "{f:?}");
    }
}
