//! The grammar of hosts and their agents: `quorum host add|install|remove`, `quorum
//! hosts` and `quorum agent`.

use super::NoState;
use clap::Subcommand;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct HostCommands {
    #[command(subcommand)]
    pub command: HostCommand,
}

#[derive(Subcommand)]
pub enum HostCommand {
    /// Register a host and print the one-time token its agent joins with.
    Add(HostAddArgs),
    /// Install the agent on a host over SSH, start it, and wait until it joined.
    #[command(after_help = "Examples (the controller started with --join-listen):
  quorum host install h1 --ssh root@198.18.0.11
  quorum host install h2 --ssh admin@h2.example.net --address 198.18.0.12 --label zone=b \\
      --key ~/.ssh/quorum_ed25519

SSH is used once: to copy this quorum binary to PREFIX/bin/quorum (checked by SHA-256;
not sent again when the same binary is there) and start `quorum agent` as the systemd unit
quorum-agent.service where systemd runs (KillMode=process: members outlive an agent
restart), or detached where it does not. The join token travels in the agent's
environment, never on a command line. The host's key must be in the known-hosts file
already: quorum never trusts a key on first sight. Running it again upgrades the binary and
restarts the agent; its members keep running. A host not recorded yet is recorded as
`quorum host add` would.")]
    Install(HostInstallArgs),
    /// Remove a host that runs no member: its record and port claims go, its agent's
    /// certificate is no longer renewed.
    #[command(after_help = "Example:
  quorum host remove h4

Refused, naming them, while members of any control plane are recorded on the host. The
agent keeps running until you stop it; on the host, afterwards:
  systemctl disable --now quorum-agent    # or kill the detached agent
  rm -r /var/lib/quorum-agent             # its key, certificate and etcd binaries
Added again later (quorum host add or install), it joins with a new token.")]
    Remove(HostRemoveArgs),
}

#[derive(clap::Args)]
pub struct HostRemoveArgs {
    /// The host's name (as `quorum hosts` lists it).
    pub name: String,
}

#[derive(clap::Args)]
pub struct HostInstallArgs {
    /// The host's name (as for `quorum host add`).
    pub name: String,
    /// Where to log in: USER@HOST.
    #[arg(long, value_name = "USER@HOST")]
    pub ssh: String,
    /// The SSH port.
    #[arg(long, default_value_t = 22, value_name = "PORT")]
    pub ssh_port: u16,
    /// The private key to log in with (ed25519 or ECDSA, without a passphrase)
    /// [default: ~/.ssh/id_ed25519, else ~/.ssh/id_ecdsa].
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// The known-hosts file the host's key is checked against [default:
    /// ~/.ssh/known_hosts].
    #[arg(long, value_name = "FILE")]
    pub known_hosts: Option<PathBuf>,
    /// The address the agent and members listen on [default: the SSH host, when it is
    /// an address]. Only for a host not recorded yet.
    #[arg(long, value_name = "IP")]
    pub address: Option<std::net::IpAddr>,
    #[command(flatten)]
    pub record: HostRecordArgs,
    /// Where the binary (PREFIX/bin/quorum) and the agent's state (PREFIX/state) go on
    /// the host.
    #[arg(long, default_value = "/opt/quorum", value_name = "DIR")]
    pub prefix: String,
    /// The host's agent joined before but lost its state there: join again.
    #[arg(long)]
    pub rejoin: bool,
}

#[derive(clap::Args)]
pub struct HostAddArgs {
    /// The host's name: lower-case letters, digits and '-' (a DNS label; it is in the
    /// agent's certificate).
    pub name: String,
    /// The address the agent and the members listen on.
    #[arg(long, value_name = "IP")]
    pub address: std::net::IpAddr,
    #[command(flatten)]
    pub record: HostRecordArgs,
    /// How long the token works.
    #[arg(long, default_value = "24h", value_parser = humantime_duration, value_name = "DURATION")]
    pub token_ttl: Duration,
    /// The host exists: issue a new token (its agent lost its state, or its certificate
    /// ended more than 30 days ago).
    #[arg(long)]
    pub rejoin: bool,
}

/// What `quorum host add` and `quorum host install` both record of a host.
#[derive(clap::Args)]
pub struct HostRecordArgs {
    /// A label, KEY=VALUE, repeatable; `zone=...` names the failure domain.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = quorum_ops::hosts::parse_label)]
    pub labels: Vec<(String, String)>,
    /// How long each certificate of the agent lasts (renewed two thirds of the way).
    #[arg(long, default_value = "90d", value_parser = humantime_duration, value_name = "DURATION")]
    pub certificate_lifetime: Duration,
    /// Where agents reach the join service: IP:PORT. Default: what the controller
    /// started with --join-listen recorded.
    #[arg(long, value_name = "IP:PORT")]
    pub join_endpoint: Option<std::net::SocketAddr>,
}

pub(super) fn humantime_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration (e.g. 90s, 24h, 90d): {e}"))
}

#[derive(clap::Args)]
pub struct HostsArgs {
    /// Output: table or json.
    #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
    pub output: String,
}

#[derive(clap::Args)]
pub struct AgentArgs {
    /// The agent's own state: its key and certificate, installed etcd binaries, members'
    /// data [default: ~/.local/share/quorum/agent]
    #[arg(
        long,
        value_name = "DIR",
        env = "QUORUM_AGENT_DIR",
        hide_env_values = true
    )]
    pub state_dir: Option<PathBuf>,
    /// The join token from `quorum host add` (needed once; the same token again is
    /// harmless). From the environment, it stays off the command line `ps` shows.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "QUORUM_JOIN_TOKEN",
        hide_env_values = true
    )]
    pub join: Option<String>,
    /// The address to serve on, e.g. 0.0.0.0 when the address the host was added with is
    /// not on this host's interfaces (a NAT). Default: that address. The port is always
    /// 7390, the one the controller dials.
    #[arg(long, value_name = "IP")]
    pub listen: Option<std::net::IpAddr>,
    /// How long a stopping member gets between SIGTERM and SIGKILL.
    #[arg(long, default_value = "10s", value_parser = humantime_duration, value_name = "DURATION")]
    pub stop_grace: Duration,
    #[command(flatten)]
    pub no_state: NoState,
}
