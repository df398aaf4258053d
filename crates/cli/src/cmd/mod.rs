//! One module per command. Each takes its parsed arguments and the place to work in;
//! the operations they share with the benchmark tooling are in `quorum-ops`.

mod agent;
mod apply;
mod completion;
mod config;
mod controller;
mod create;
mod credentials;
mod defrag;
mod delete;
mod etcdctl;
mod events;
mod fenced;
mod get;
mod haproxy_config;
mod hosts;
mod list;
mod logs;
mod member;
mod pause;
mod rebuild;
mod rotate_ca;
mod scale;
mod secrets;
mod snapshot;
mod status;
mod upgrade;
mod versions;
mod watch;

use crate::args::{BenchCommand, Command, EventsArgs, Output, WaitArgs};
use anyhow::Result;
use quorum_bench::{demo, failover, rollout};
use quorum_ops::{wait, Ctx, Place};

/// Runs one command.
pub async fn run(at: &Place, command: Command) -> Result<()> {
    match command {
        Command::Create(a) => create::run(at, a).await,
        Command::Apply(a) => apply::run(at, a).await,
        Command::Upgrade(a) => upgrade::run(at, a).await,
        Command::Scale(a) => scale::run(at, a).await,
        Command::Pause(a) => pause::run(at, a),
        Command::Protect(a) => pause::protect(at, a),
        Command::Status(a) => status::run(at, a).await,
        Command::Events(a) => run_events(at, a).await,
        Command::List(a) => list::run(at, a).await,
        Command::Get(a) => get::run(at, a),
        Command::Etcdctl(a) => etcdctl::run(at, a).await,
        Command::Defrag(a) => defrag::run(at, a).await,
        Command::Snapshot(a) => snapshot::take(at, a).await,
        Command::Snapshots(a) => snapshot::list(at, a).await,
        Command::Restore(a) => rebuild::restore(at, a).await,
        Command::Recover(a) => rebuild::recover(at, a).await,
        Command::Completion(a) => completion::run(a),
        Command::Delete(a) => delete::run(at, a).await,
        Command::Controller(a) => controller::run(at, a).await,
        Command::Credentials(a) => credentials::run(at, a),
        Command::HaproxyConfig(a) => haproxy_config::run(at, a),
        Command::Secrets(s) => secrets::run(at, s.command),
        Command::RotateCa(a) => rotate_ca::run(at, a).await,
        Command::Host(h) => hosts::run(at, h.command).await,
        Command::Hosts(a) => hosts::list(at, a).await,
        Command::Agent(a) => agent::run(a).await,
        Command::Versions(v) => versions::run(v),
        Command::Config(a) => config::run(at, a),
        Command::Fenced(a) => fenced::run(at, a),
        Command::Logs(a) => logs::run(at, a).await,
        Command::Member(a) => member::run(at, a).await,
        Command::Version(_) => {
            use clap::CommandFactory;
            print!("{}", crate::args::Cli::command().render_version());
            Ok(())
        }
        Command::Demo(a) => demo::run(a.demo).await,
        Command::Bench(b) => match b.command {
            BenchCommand::Rollout(a) => rollout::run(a).await,
            BenchCommand::Failover(a) => failover::run(a).await,
            BenchCommand::Snapshot(a) => quorum_bench::snapshot::run(a).await,
            BenchCommand::Fleet(a) => quorum_bench::fleet::run(a).await,
        },
    }
}

/// `--wait`: follows `name` to `goal`; without it, says when nothing will act.
async fn wait_for(
    ctx: &Ctx,
    name: &str,
    goal: wait::Goal,
    w: &WaitArgs,
    after_event: i64,
) -> Result<()> {
    if w.wait {
        ctx.follow(name, goal, w.timeout, after_event, ctx.started_ms)
            .await?;
    } else if !wait::controller_active(&ctx.store) {
        println!("note: no controller is running on this home; nothing happens until one runs: `quorum controller`");
    }
    Ok(())
}

/// Writes `text` to standard output; `false` when the reader went away (`| head`),
/// which ends a command quietly rather than as an error.
pub fn emit(text: &str) -> Result<bool> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `quorum events`: the flags' checks; the history is read and printed in `events`.
async fn run_events(at: &Place, a: EventsArgs) -> Result<()> {
    if a.follow && matches!(a.output, Output::Yaml) {
        use clap::CommandFactory;
        crate::args::Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--follow prints a table or JSON lines (-o json), not YAML",
            )
            .exit();
    }
    let ctx = Ctx::open_existing(at)?;
    let format = match a.output {
        Output::Table => events::Format::Table,
        Output::Json => events::Format::Json,
        Output::Yaml => events::Format::Yaml,
    };
    events::run(&ctx.store, &a.name, a.last, a.follow, format).await
}

/// Asks the person at the terminal to type the control plane's name.
pub(crate) fn confirm(name: &str) -> Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        anyhow::bail!("not confirmed: there is no terminal to ask on; read the plan above and run the command again with --yes");
    }
    print!("type the control plane's name ({name}) to go ahead, anything else to stop: ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim() != name {
        anyhow::bail!("not confirmed: nothing was changed");
    }
    Ok(())
}
