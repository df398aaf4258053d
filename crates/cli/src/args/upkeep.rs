//! The grammar of the commands that look after a control plane beside its spec:
//! `quorum config view`, `quorum logs`, `quorum fenced` and `quorum protect`.

use super::Output;
use crate::usage;
use clap::Subcommand;

#[derive(clap::Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub what: ConfigCommand,
}

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// The effective settings and where each came from.
    View {
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
}

/// The most lines `quorum logs --tail` prints per machine.
pub const MAX_LOG_TAIL: u32 = 10_000;

#[derive(clap::Args)]
pub struct LogsArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// One of its machines (as `quorum status` names them); none: every one.
    pub machine: Option<String>,
    /// How many of the last lines to print (per machine; at most 10000).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub tail: u32,
    /// Then print new lines as they come, until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

#[derive(clap::Args)]
pub struct FencedArgs {
    /// The control plane (deleted ones too); none: every fenced directory.
    #[arg(value_parser = usage::cp_name)]
    pub name: Option<String>,
    /// Remove them now (asks for the name, or `all`; --yes without a terminal).
    #[arg(long)]
    pub prune: bool,
    /// Go ahead without asking.
    #[arg(long, requires = "prune")]
    pub yes: bool,
    /// Output format.
    #[arg(
        short = 'o',
        long,
        value_enum,
        default_value = "table",
        conflicts_with = "prune"
    )]
    pub output: Output,
}

#[derive(clap::Args)]
pub struct ProtectArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Turn deletion protection off.
    #[arg(long)]
    pub off: bool,
}

#[derive(clap::Args)]
pub struct MemberArgs {
    #[command(subcommand)]
    pub command: MemberCommand,
}

#[derive(Subcommand)]
pub enum MemberCommand {
    /// Replace one member by a new machine, as a rollout by replacement would: a new
    /// member joins as a learner and is promoted, then the old one leaves.
    Replace(MemberStepArgs),
    /// Restart one member in place on its binary and data, as an in-place rollout
    /// would: out of the endpoints, leadership moved off, stopped, started, waited on.
    Restart(MemberStepArgs),
}

#[derive(clap::Args)]
pub struct MemberStepArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// The machine, as `quorum status` names it (prod-2).
    pub machine: String,
    /// Ask for a replacement even where no host can take the new machine now (the
    /// step then waits, Blocked, until one can).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub wait: super::WaitArgs,
}
