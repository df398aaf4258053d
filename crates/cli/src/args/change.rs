//! The grammar of the commands that change a running control plane's version or size:
//! `quorum upgrade` and `quorum scale`.

use super::{usage, Strategy, WaitArgs};

#[derive(clap::Args)]
pub struct UpgradeArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// The etcd version to roll to (installed; 3.5 means the newest installed 3.5.x).
    /// One that skips a minor or starts below etcd's stepping stone (3.4 -> 3.6, 3.5.16
    /// -> 3.6) is reached by a chained upgrade: one rollout per link, through the newest
    /// installed patch of each minor passed, each after a snapshot and a preflight
    /// (`--dry-run` shows the road).
    #[arg(long, value_parser = usage::version_text, required_unless_present_any = ["retry", "strategy", "abort"])]
    pub version: Option<String>,
    /// Stop at these releases on the way to --version, in order (comma-separated), each
    /// a rollout of its own: the road then is exactly these, checked link by link.
    #[arg(long, value_delimiter = ',', value_parser = usage::version_text, value_name = "VERSION,...", requires = "version")]
    pub via: Vec<String>,
    /// Roll out this way from now on: Replace (new machines join, old ones leave) or
    /// InPlace (each member restarted on the new binary, same data, followers first).
    /// Changeable while no rollout runs, or while the one that runs has changed no
    /// member (a rollout stuck for want of a host switches to InPlace). Default: the
    /// control plane's own.
    #[arg(long, value_parser = usage::strategy, value_name = "STRATEGY")]
    pub strategy: Option<Strategy>,
    /// Go on with a rollout that stopped because a member did not serve on the new
    /// binary and was rolled back (see `quorum status` and `quorum events`): fix the
    /// cause first.
    #[arg(long, conflicts_with = "dry_run")]
    pub retry: bool,
    /// Cancel the rollout under way, back to the version every member still runs.
    /// Only while it has changed no member: once one was replaced or restarted, going
    /// back is a downgrade (`--version OLD --allow-downgrade`).
    #[arg(long, conflicts_with_all = ["version", "retry", "strategy", "allow_downgrade"])]
    pub abort: bool,
    /// Record the change even if a member is unreachable, or no host can take its new
    /// machines now (quorum still refuses every unsafe step).
    #[arg(long)]
    pub force: bool,
    /// Confirm a move to an older etcd version (a patch included); refused without it.
    /// Never below the running cluster version.
    #[arg(long)]
    pub allow_downgrade: bool,
    /// Record a version change without taking a snapshot from the leader first (by
    /// default the change is not recorded unless the snapshot succeeds).
    #[arg(long)]
    pub no_snapshot: bool,
    /// Check the change against the rules and the live cluster, print what it would
    /// do (from -> to, how many machines, a downgrade or not), and change nothing.
    #[arg(long, conflicts_with = "wait")]
    pub dry_run: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(clap::Args)]
pub struct ScaleArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// The new number of etcd members: 1, 3, 5 or 7 (2, 4 or 6 with --force).
    #[arg(long, allow_negative_numbers = true, value_parser = usage::replicas, value_name = "N")]
    pub replicas: u32,
    /// Accept an even count, or a change while a member is unreachable.
    #[arg(long)]
    pub force: bool,
    /// Check the change against the rules and the live cluster, print what it would
    /// do (from -> to, how many machines, a downgrade or not), and change nothing.
    #[arg(long, conflicts_with = "wait")]
    pub dry_run: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}
