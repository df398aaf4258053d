//! `quorum logs NAME [MACHINE] [--tail N] [--follow]`: a member's etcd log, from this
//! host's machine directory (the local provider) or through its host's agent (`hosts`).

use crate::args::LogsArgs;
use anyhow::{bail, Context, Result};
use quorum_core::Machine;
use quorum_hosts::{placed_on, HostsProvider};
use quorum_ops::{Ctx, Place};
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

/// How often `--follow` looks for new lines (a local file) or asks the agent (hosts).
const FOLLOW_POLL_MS: u64 = 250;
const FOLLOW_HOSTS_POLL_MS: u64 = 1_000;
/// The most bytes `--follow` reads from one file in one look.
const MAX_FOLLOW_READ_BYTES: u64 = 1 << 20;

pub async fn run(at: &Place, a: LogsArgs) -> Result<()> {
    let ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    let all = ctx.store.machines(&a.name)?;
    let machines: Vec<Machine> = match &a.machine {
        None => all,
        Some(m) => match all.iter().find(|x| &x.name == m) {
            Some(x) => vec![x.clone()],
            None => bail!(
                "{} has no machine {m:?}: its machines are {}",
                a.name,
                names(&all)
            ),
        },
    };
    if machines.is_empty() {
        bail!("{} has no machines yet: nothing has logged", a.name);
    }
    // One machine's lines as they are; several, each line prefixed with its machine.
    let prefix = machines.len() > 1;
    let lines = a.tail.min(crate::args::MAX_LOG_TAIL);
    if cp.spec.provider.is_local() {
        // Where following starts is taken before the tail is read: a line written in
        // between may print twice, never not at all.
        let paths: Vec<_> = machines
            .iter()
            .map(|m| ctx.provider.log_path(&m.name))
            .collect();
        let from: Vec<u64> = paths
            .iter()
            .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
            .collect();
        for m in &machines {
            for l in ctx.provider.last_log_lines(&m.name, lines as usize) {
                say(prefix, &m.name, &l)?;
            }
        }
        if a.follow {
            follow_local(&machines, &paths, from, prefix).await?;
        }
        return Ok(());
    }
    let agents = HostsProvider::new(ctx.provider.etcd_dir().to_path_buf());
    let mut last: Vec<Option<String>> = vec![None; machines.len()];
    loop {
        for (i, m) in machines.iter().enumerate() {
            let host = placed_on(m)?;
            let t = agents.target_in(&ctx.store, &host)?;
            let got = agents
                .logs(&t, m, lines)
                .await
                .with_context(|| format!("the log of {} on {host}", m.name))?;
            // Following: only the lines after the last one printed.
            let from = last[i]
                .as_ref()
                .and_then(|l| got.iter().rposition(|x| x == l).map(|p| p + 1))
                .unwrap_or(0);
            for l in &got[from..] {
                say(prefix, &m.name, l)?;
            }
            if let Some(l) = got.last() {
                last[i] = Some(l.clone());
            }
        }
        if !a.follow {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(FOLLOW_HOSTS_POLL_MS)).await;
    }
}

/// Prints what each machine's log file gains, until interrupted. A file that shrinks
/// (a new data directory after a replacement) is read again from its start.
async fn follow_local(
    machines: &[Machine],
    paths: &[std::path::PathBuf],
    mut at: Vec<u64>,
    prefix: bool,
) -> Result<()> {
    let mut partial: Vec<String> = vec![String::new(); paths.len()];
    loop {
        for (i, path) in paths.iter().enumerate() {
            let len = std::fs::metadata(path).map_or(0, |m| m.len());
            if len < at[i] {
                at[i] = 0;
            }
            if len == at[i] {
                continue;
            }
            let mut f = std::fs::File::open(path)?;
            f.seek(SeekFrom::Start(at[i]))?;
            let mut chunk = String::new();
            let n = f
                .take(MAX_FOLLOW_READ_BYTES)
                .read_to_string(&mut chunk)
                .unwrap_or(0);
            at[i] += n as u64;
            partial[i].push_str(&chunk);
            while let Some(end) = partial[i].find('\n') {
                let line: String = partial[i].drain(..=end).collect();
                say(prefix, &machines[i].name, line.trim_end())?;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(FOLLOW_POLL_MS)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

fn say(prefix: bool, machine: &str, line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = if prefix {
        writeln!(out, "[{machine}] {line}")
    } else {
        writeln!(out, "{line}")
    };
    match written {
        // The reader went away (`| head`): that ends the command quietly.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => Ok(r?),
    }
}

fn names(ms: &[Machine]) -> String {
    let n: Vec<&str> = ms.iter().map(|m| m.name.as_str()).collect();
    if n.is_empty() {
        "none".into()
    } else {
        n.join(", ")
    }
}
