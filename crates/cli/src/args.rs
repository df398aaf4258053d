//! The command line's grammar: every command, flag and help text (clap derive). What
//! each command does is in `cmd/`, one module per command.

use clap::{Parser, Subcommand, ValueEnum};
use quorum_bench::{demo, failover, fleet, rollout, snapshot};
use quorum_core::{Span, Strategy, DEFAULT_HAPROXY_BACKEND};
use quorum_ops::{parse_lease_ttl, wait};
use std::path::PathBuf;
use std::time::Duration;

use crate::usage;
use quorum_ops::manifest;

mod change;
mod hosts;
mod upkeep;
pub use change::*;
pub use hosts::*;
pub use upkeep::*;

const ABOUT: &str =
    "quorum keeps etcd control planes healthy through upgrades, scaling and machine \
replacement, without ever losing quorum and without getting stuck after a crash.";

const AFTER_HELP: &str = "\
A first session:
  quorum demo                                   # everything below, in a throwaway home
  quorum controller &                           # the reconcile loop (keep it running)
  quorum create prod --replicas 3 --version 3.4.23 --wait
  quorum status prod
  quorum upgrade prod --version 3.5.30 --wait   # member by member, learner first
  quorum scale prod --replicas 5 --wait
  quorum delete prod --wait

State lives in --home (or QUORUM_HOME), default ~/.local/share/quorum/state.
etcd binaries are looked up in QUORUM_ETCD_DIR (default ~/.local/share/quorum/etcd/<version>/etcd);
scripts/install.sh puts them there. QUORUM_LOG sets the log filter (for example debug).
Exit status: 0 done, 1 refused or failed (one line on stderr says why), 2 malformed command line.";

/// Where `quorum controller` serves its metrics unless told otherwise: one port per
/// machine, whatever the home.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9479";

/// The heading of the options every command that uses the state takes.
const GLOBAL: &str = "Global options";

#[derive(Parser)]
#[command(name = "quorum", version, about = ABOUT, after_help = AFTER_HELP)]
pub struct Cli {
    /// State directory: the store and the local machines [env: QUORUM_HOME]
    #[arg(long, global = true, value_name = "DIR", help_heading = GLOBAL)]
    pub home: Option<PathBuf>,
    /// Where the state lives: `embedded` (a file in --home) or a management etcd,
    /// `etcd://host:port,host:port[/prefix]`, shared by several controllers [env: QUORUM_STORE]
    #[arg(long, global = true, value_name = "URL", help_heading = GLOBAL)]
    pub store: Option<String>,
    /// With --store etcd://: the CA bundle that signed the management etcd's certificates
    /// (PEM); with --store-cert and --store-key, the store is reached over mutual TLS
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        requires_all = ["store_cert", "store_key"],
        help_heading = GLOBAL
    )]
    pub store_ca: Option<PathBuf>,
    /// With --store-ca: the client certificate for the management etcd (PEM)
    #[arg(long, global = true, value_name = "FILE", requires = "store_ca", help_heading = GLOBAL)]
    pub store_cert: Option<PathBuf>,
    /// With --store-ca: the client certificate's key (PEM)
    #[arg(long, global = true, value_name = "FILE", requires = "store_ca", help_heading = GLOBAL)]
    pub store_key: Option<PathBuf>,
    /// The key file that seals the CA keys in the store (made at first use, 0600; keep
    /// it private and back it up apart from the state). Every process sharing a store
    /// needs the same file. Default: <home>/secrets.key [env: QUORUM_SECRETS_KEY_FILE]
    #[arg(long, global = true, value_name = "FILE", help_heading = GLOBAL)]
    pub secrets_key_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

#[derive(clap::Args)]
pub struct WaitArgs {
    /// Follow the change until the spec is met, printing each step.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up (exit 1) after this long: 90s, 10m, 1h.
    #[arg(
        long,
        default_value = "10m",
        value_parser = wait::parse_duration,
        value_name = "DURATION",
        requires = "wait"
    )]
    pub timeout: Duration,
}

#[derive(Subcommand)]
pub enum Command {
    /// Create a control plane.
    #[command(after_help = "Examples:\n  \
quorum create prod --replicas 3 --version 3.4.23 --wait\n  \
quorum create prod --from-snapshot newest --wait   # bring back a deleted one\n\n\
Members speak mutual TLS on the client and peer ports, with certificates from a CA that\n\
quorum creates for this control plane and keeps in its state. To reach the members,\n\
get a client certificate: quorum credentials NAME --out DIR.")]
    Create(CreateArgs),
    /// Write a client certificate, its key and the CA bundle for a control plane, and
    /// print the etcdctl flags that use them.
    #[command(after_help = "Example:\n  \
quorum credentials prod --out ./prod-creds\n  \
etcdctl --endpoints https://127.0.0.1:2379 --cacert prod-creds/ca.crt \\\n    \
--cert prod-creds/client.crt --key prod-creds/client.key get foo\n\n\
The key file is written with mode 0600 in a 0700 directory; existing files are replaced.")]
    Credentials(CredentialsArgs),
    /// Create or change a control plane from a YAML manifest.
    #[command(after_help = format!("A manifest:\n\n{}", manifest::EXAMPLE))]
    Apply(ApplyArgs),
    /// Roll a control plane to another etcd version, one member at a time.
    #[command(
        after_help = "Example: quorum upgrade prod --version 3.5.30 --wait --timeout 15m\n\
The road to 3.6, link by link: quorum upgrade prod --version 3.6 --dry-run\n\n\
etcd moves one minor version at a time, into 3.6 only from 3.5.32 or later, and never \
below the running cluster version: a version further away is a chained upgrade, one \
rollout per link, each after a test-restored snapshot and a preflight."
    )]
    Upgrade(UpgradeArgs),
    /// Change the number of members.
    #[command(after_help = "Example: quorum scale prod --replicas 5 --wait")]
    Scale(ScaleArgs),
    /// Show machines, members, health, conditions and client endpoints.
    #[command(after_help = "Examples:
  quorum status prod                     once
  quorum status prod --watch             redrawn every second on a terminal (Ctrl-C stops);
                                         piped, a new block only when something changed
  quorum status prod -o json             the fields are described in the README")]
    Status(StatusArgs),
    /// Show a control plane's history: each step quorum took or was refused, when
    /// (UTC), and which controller replica took it.
    #[command(
        after_help = "Examples:\n  quorum events prod                     the newest 50 steps\n  \
quorum events prod --last 0 -o json    every step kept (up to 10,000), as JSON\n  \
quorum events prod --follow            keep printing new steps (Ctrl-C stops)\n\n\
BY names the controller replica (--identity) that wrote the step. After a failover the\n\
new leader's steps carry its name; a deposed leader cannot write any (its writes are\n\
fenced), so a step it still performed on a member shows only in its own log."
    )]
    Events(EventsArgs),
    /// List the control planes, each with its health, state and age.
    #[command(after_help = "Examples:
  quorum list                            NAME, REPLICAS, VERSION, MACHINES, HEALTH, STATE, AGE
  quorum list -o wide                    also the cluster version, leader, controller, endpoints
  quorum list -o json                    every field, for scripts (see the README)

HEALTH is the core's verdict (the one `status` shows): healthy (every member healthy),
degraded (a quorum of voters healthy) or unavailable, with healthy voters / voters.")]
    List(ListArgs),
    /// Print a control plane's manifest: what `apply -f` takes, so it can be edited and
    /// applied again.
    #[command(after_help = "Example:
  quorum get prod -o yaml > prod.yaml    # edit replicas or version, then:
  quorum apply -f prod.yaml --wait

Applying the printed manifest unchanged changes nothing.")]
    Get(GetArgs),
    /// Run etcdctl on a control plane: the etcdctl of its version, with its current
    /// endpoints and a fresh client certificate.
    #[command(after_help = "Examples:
  quorum etcdctl prod -- put greeting hello
  quorum etcdctl prod -- get greeting
  quorum etcdctl prod -- endpoint status -w table

Everything after `--` goes to etcdctl, after --endpoints (every endpoint the control plane
publishes now: voting, healthy, not leaving) and, for a TLS control plane, --cacert, --cert
and --key (a client certificate valid for a day, in a private temporary directory that is
removed when etcdctl ends). etcdctl's exit status is quorum's. Unlike the files of `quorum
credentials`, nothing goes stale when a rollout replaces members.")]
    Etcdctl(EtcdctlArgs),
    /// Defragment the members' databases now, one at a time: followers first, the
    /// leader last, each only while the others hold quorum.
    #[command(after_help = "Examples:
  quorum defrag prod                     every member, in that order
  quorum defrag prod --member prod-2     one member

A member stalls while its database file is rewritten (about 0.1 s for 16 MiB of live
data, measured here), so quorum defragments one at a time, checks just before each that
the other voters that serve are a quorum, and waits for it to serve again before the
next. It stops at the first it cannot do safely, and says why.

The controller defragments on its own too: when a NOSPACE alarm stops writes (it compacts,
defragments and disarms the alarm), and when a member's free share of its database passes
spec.maintenance.defragWhenFragmentedAbove (default 50%; 0 turns that off).")]
    Defrag(DefragArgs),
    /// Take a snapshot of a control plane now, from its leader, into <home>/backups/NAME/.
    #[command(after_help = "Example:
  quorum snapshot prod
  quorum snapshots prod                  # every snapshot recorded, oldest first

The snapshot streams from the leader (it holds every acknowledged write) straight into
<home>/backups/NAME/<name>-<UTC time>-r<revision>.db (owner-only), never whole in memory.
etcd's own sha256 at the stream's end is checked as it arrives, and etcd's tool
(etcdutl snapshot status) reads back its hash, revision, key count and size; only then
does the file get its name and the store a record of it. A failed snapshot leaves no file.

Then it is verified by a test restore: restored with etcdutl into a scratch directory,
started as a throwaway member on a private loopback address (127.254.x.y), read back (it
must serve the snapshot's revision; its keys are counted), stopped and removed. The
outcome is recorded; a failed one exits 1 and the snapshot does not count as verified.

quorum also takes one before every change of the etcd version (upgrade, apply): the
change is not recorded without it, unless --no-snapshot is given.")]
    Snapshot(SnapshotArgs),
    /// List a control plane's snapshots: time, revision, keys, size, why, verified.
    /// Without a name: every name that has snapshots, deleted control planes included.
    #[command(after_help = "Examples:
  quorum snapshots                       # which control planes have snapshots, deleted ones too
  quorum snapshots prod
  quorum snapshots prod -o json          # every recorded fact, the sha256 included
  quorum snapshots prod --verify newest  # test-restore one again (or give its id)

The snapshots of a deleted control plane stay, listed and under the same retention:
`quorum create NAME --from-snapshot ID` brings it back (its spec, its CA, every key).")]
    Snapshots(SnapshotsArgs),
    /// A member's etcd log (every member's, prefixed, without a machine).
    #[command(after_help = "Examples:
  quorum logs prod                    # the last 50 lines of each member, prefixed
  quorum logs prod prod-2 --tail 200
  quorum logs prod prod-2 --follow    # then new lines as they come (Ctrl-C stops)

On the local provider the log is <home>/machines/MACHINE/etcd.log; members on hosts are
read through their host's agent (--follow asks it every second).")]
    Logs(LogsArgs),
    /// The directories a restore or recovery moved out of reach (old members' data),
    /// and removing them.
    #[command(after_help = "Examples:
  quorum fenced                     # every fenced directory: whose, when, how big
  quorum fenced prod -o json
  quorum fenced prod --prune        # remove prod's now (asks for the name; --yes)

A restore or a recovery fences each old member: stops it and moves its machine
directory (its data included) under <home>/fenced/, so nothing starts it again. They are
kept for you to look at or copy from, and removed by the controller once
spec.recovery.keepFenced has passed (7d by default), or by `quorum delete`.")]
    Fenced(FencedArgs),
    /// Rebuild a control plane from a snapshot: every write after it is lost. Asks for
    /// confirmation.
    #[command(after_help = RESTORE_HELP)]
    Restore(RestoreArgs),
    /// Bring a control plane back after it lost quorum: from its most up-to-date
    /// surviving member, or from a snapshot. Asks for confirmation.
    #[command(after_help = RECOVER_HELP)]
    Recover(RecoverArgs),
    /// Print a shell completion script.
    #[command(after_help = "Examples:
  source <(quorum completion bash)                        # this shell only
  quorum completion bash > ~/.local/share/bash-completion/completions/quorum
  quorum completion zsh > \"${fpath[1]}/_quorum\"           # then start a new zsh
  quorum completion fish > ~/.config/fish/completions/quorum.fish")]
    Completion(CompletionArgs),
    /// Delete a control plane: stop and remove every machine and its data. Says what
    /// goes and asks for the name (--yes without a terminal)
    #[command(after_help = "\
Examples:
  quorum delete prod                     # says what goes, asks you to type prod
  quorum delete prod --yes --wait        # in a script: no question, follow it to the end

Its snapshots stay: `quorum create prod --from-snapshot newest` brings it back. A control
plane with deletion protection (`quorum protect prod`) is not deleted until it is off.")]
    Delete(DeleteArgs),
    /// Run the reconcile loop in the foreground for every control plane (Ctrl-C stops it;
    /// the machines keep running).
    #[command(
        after_help = "The controller keeps <home>/endpoints/<name>.json current: the client URLs \
clients should use (voting, healthy, not leaving), replaced before a leaving member is removed."
    )]
    Controller(ControllerArgs),
    /// Replace one member, or restart it in place: the controller does it by the same
    /// rules, pacing and crash safety as a rollout's step.
    #[command(after_help = "Examples:
  quorum member replace prod prod-2          # a new machine, then prod-2 leaves
  quorum member restart prod prod-2 --wait   # the same member, stopped and started

Each waits until every member is healthy, and is done one step at a time with any
other (a rollout, a repair). A replacement with maxSurge 1 adds the new member before the old one leaves; a
restart takes the member down meanwhile, so it needs 3 or more members.")]
    Member(MemberArgs),
    /// Pause or resume the reconciliation of one control plane.
    Pause(PauseArgs),
    /// Turn deletion protection on (or --off): `quorum delete` refuses a protected
    /// control plane.
    #[command(after_help = "Examples:
  quorum protect prod          # `quorum delete prod` is refused from now on
  quorum protect prod --off    # before deleting it on purpose

In a manifest: spec.deletionProtection: true. `quorum get prod` shows it.")]
    Protect(ProtectArgs),
    /// Print an HAProxy configuration for a control plane: an HTTP/2 frontend for its
    /// clients, the admin socket quorum drives, and a backend with its current members.
    #[command(after_help = "Example:\n  \
quorum create prod --version 3.5.30 --haproxy-runtime-api /run/quorum-haproxy/admin.sock\n  \
quorum haproxy-config prod --bind 127.0.0.1:2379 > haproxy.cfg && haproxy -f haproxy.cfg\n\n\
From then on the controller adds a member to the backend once its /health passes, and\n\
sets a leaving member to maintenance (then shuts its sessions) before removing it.")]
    HaproxyConfig(HaproxyConfigArgs),
    /// The key file that seals the CA keys in the store: where it is, which key the store
    /// uses, and rotating it while controllers run.
    #[command(
        after_help = "Every control plane's CA private key is sealed in the store with a data key of its own
(AES-256-GCM), wrapped by the key file's key; the store holds only that key's id. Keep the
key file private and back it up apart from the state: without it the CA keys cannot be
opened. Every process sharing a store (replicas on a management etcd, the CLI) needs the
same file (--secrets-key-file FILE, or QUORUM_SECRETS_KEY_FILE; default <home>/secrets.key).

Examples:
  quorum secrets status            # the key file, its keys, what the store uses
  quorum secrets rotate            # a new key; every data key re-wrapped; the old key retired"
    )]
    Secrets(SecretsCommands),
    /// Rotate a control plane's CA without downtime: a new CA, trusted everywhere, then
    /// every certificate from it, then the old CA dropped.
    #[command(
        name = "rotate-ca",
        after_help = "Three phases, each recorded before it begins, each a restart of every member, one at a
time, through the control plane's rollout strategy (in place with `strategy: InPlace`,
else by replacement), with the same preflight and quorum checks as an upgrade:
  1. every member trusts both CAs (certificates still from the old one);
  2. every member gets its peer certificate from the new CA; quorum's own certificate,
     and those `quorum credentials` issues, come from it too (the certificate a member
     serves clients stays the old CA's, so clients that trust only the old CA still work);
  3. every member trusts only the new CA and serves a certificate from it; then the new
     CA is the CA and the old one is gone.
Client certificates from the old CA keep working until phase 3, and are refused by each
member from its restart in phase 3. Get new ones in phase 2: `quorum credentials NAME
--out DIR` (its ca.crt holds both CAs; in phase 1 it still issues from the old CA, and
says so). `quorum status NAME` shows the phase. Running it again during a rotation
changes nothing. It says what it will do and asks for the name (--yes skips that;
without a terminal, --yes is required).

Examples:
  quorum rotate-ca prod --dry-run      # what it would do, nothing changed
  quorum rotate-ca prod --wait
  quorum rotate-ca prod --yes && quorum status prod --watch"
    )]
    RotateCa(RotateCaArgs),
    /// Register hosts whose agents run members, or install their agents over SSH (see
    /// `quorum agent --help`).
    #[command(
        after_help = "Examples, with the controller started with --join-listen 198.18.0.1:7391:
  quorum host install h1 --ssh root@198.18.0.11 --label zone=a   # copies, starts, joins
  quorum host add h2 --address 198.18.0.12 --label zone=b        # by hand: prints a token
  # then on host h2:
  QUORUM_JOIN_TOKEN=qj1.eyJob3N0Ijoi... quorum agent

A token works once, for --token-ttl (default 24h). The agent makes its own key on its host
and exchanges the token for a certificate from the hosts CA; only the token's SHA-256 is
kept in the store."
    )]
    Host(HostCommands),
    /// List the hosts: address, labels, whether their agent answers, its version, the
    /// etcd versions installed there, the members it runs, and its certificate's end.
    #[command(after_help = "Examples:
  quorum hosts
  quorum hosts -o json

Each agent is asked over mutual TLS with a deadline; one that does not answer is shown as
unreachable, with why (a refused connection, an expired certificate).")]
    Hosts(HostsArgs),
    /// Run the host agent: etcd members on this host, for the controller, over an
    /// authenticated API (gRPC, mutual TLS).
    #[command(
        after_help = "The first time, with the token `quorum host add` printed:
  quorum agent --join qj1.eyJob3N0Ijoi... --state-dir /var/lib/quorum-agent
After that (a restart, a reboot), without the token:
  quorum agent --state-dir /var/lib/quorum-agent

The agent makes its key in --state-dir (0600; it never leaves the host), serves on the
host's address, port 7390, and renews its certificate two thirds into its life. An agent
that was off past its certificate's end renews at its next start, for up to 30 days after.
Members it runs are detached: they keep running while the agent restarts, and it finds them
again. It keeps no desired state: the controller's store is the one source of truth. Calls
that can destroy data carry the control plane's fencing token; a token older than one seen
is refused, so a deposed controller cannot act through an agent."
    )]
    Agent(AgentArgs),
    /// List the installed etcd versions, or add one quorum has never seen.
    #[command(after_help = "Examples:
  quorum versions                       # the installed ones, with their known bugs
  quorum versions add ./etcd-v3.5.30-linux-amd64.tar.gz --sha256 <hex>
  quorum versions add etcd-server_3.5.30-2_amd64.deb etcd-client_3.5.30-2_amd64.deb
  quorum versions add /opt/etcd/bin --version 3.5.30

Versions live in $QUORUM_ETCD_DIR/<version>/ (default ~/.local/share/quorum/etcd), one
directory each with etcd, etcdctl and (from 3.5) etcdutl; scripts/install.sh installs
3.4.23, 3.5.0, 3.5.1, 3.5.16 and 3.5.30.")]
    Versions(VersionsArgs),
    /// Where this command line works: the home, the store, the key file, where
    /// snapshots go and where etcd comes from, and where each setting came from.
    #[command(after_help = "Examples:
  quorum config view                     # the effective settings and their origin
  QUORUM_STORE=etcd://10.0.0.5:2379 quorum --home /srv/q config view -o json

Each setting comes from a flag (--home, --store, --secrets-key-file), else the
environment (QUORUM_HOME, QUORUM_STORE, QUORUM_SECRETS_KEY_FILE, QUORUM_ETCD_DIR, the
AWS_* variables), else the default. It opens nothing, so it answers with the store down.")]
    Config(ConfigArgs),
    /// Print quorum's own version (as `quorum -V` does; the etcd versions are `quorum versions`).
    Version(NoState),
    /// In a fresh temporary home: create 3 members at etcd 3.4.23, write keys, upgrade to
    /// 3.5.30 with progress, verify every key, report timings, clean up (`--hosts 3`: the
    /// members on three hosts made on this machine, each with its agent).
    Demo(DemoCommand),
    /// Measure what clients see.
    Bench(BenchCommands),
}

/// `quorum versions`: a list, or `add`.
#[derive(clap::Args)]
pub struct VersionsArgs {
    #[command(subcommand)]
    pub command: Option<VersionsCommand>,
    #[command(flatten)]
    pub no_state: NoState,
}

#[derive(Subcommand)]
pub enum VersionsCommand {
    /// Add an etcd release: from a directory holding its binaries, a release tarball in
    /// etcd's own layout (etcd-vX.Y.Z-linux-amd64.tar.gz), or Debian's packages
    /// (etcd-server carries etcd and etcdutl, etcd-client carries etcdctl: give both).
    /// Each binary must run here and report the version its source claims (the
    /// tarball's name, the package's version, --version); nothing is installed
    /// otherwise. Adding a version that is there with the same binaries changes nothing.
    Add(VersionsAddArgs),
}

#[derive(clap::Args)]
pub struct VersionsAddArgs {
    /// Directories, tarballs (.tar.gz) or Debian packages (.deb) of one release.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The SHA-256 (hex) each tarball or package must have, one per file in the order
    /// given (as published beside etcd's releases in SHA256SUMS).
    #[arg(long, value_name = "HEX")]
    pub sha256: Vec<String>,
    /// The version this is: refused unless the binaries report it.
    #[arg(long, value_name = "X.Y.Z")]
    pub version: Option<quorum_core::Version>,
    #[command(flatten)]
    pub no_state: NoState,
}

/// The global store flags, hidden and refused, for a command that reads no state
/// (`version`, `versions`, `demo`, `bench`): given after such a command they would
/// otherwise be accepted and ignored. clap gives a command no copy of a global flag
/// whose id it already has, so these take the global ones' place there.
#[derive(clap::Args)]
pub struct NoState {
    #[arg(long, hide = true, value_name = "DIR", value_parser = usage::no_state::<PathBuf>)]
    home: Option<PathBuf>,
    #[arg(long, hide = true, value_name = "URL", value_parser = usage::no_state::<String>)]
    store: Option<String>,
    #[arg(long, hide = true, value_name = "FILE", value_parser = usage::no_state::<PathBuf>)]
    store_ca: Option<PathBuf>,
    #[arg(long, hide = true, value_name = "FILE", value_parser = usage::no_state::<PathBuf>)]
    store_cert: Option<PathBuf>,
    #[arg(long, hide = true, value_name = "FILE", value_parser = usage::no_state::<PathBuf>)]
    store_key: Option<PathBuf>,
    #[arg(long, hide = true, value_name = "FILE", value_parser = usage::no_state::<PathBuf>)]
    secrets_key_file: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct DemoCommand {
    #[command(flatten)]
    pub demo: demo::DemoArgs,
    #[command(flatten)]
    pub no_state: NoState,
}

#[derive(clap::Args)]
pub struct SecretsCommands {
    #[command(subcommand)]
    pub command: SecretsCommand,
}

#[derive(Subcommand)]
pub enum SecretsCommand {
    /// Where the key file is, the keys it holds, the key the store names, and how many
    /// sealed records each key wraps.
    Status(SecretsArgs),
    /// Rotate the key-encryption key while controllers run: a new key in the key file,
    /// named in the store, every record's data key re-wrapped with it, then the old key
    /// removed from the file. Safe to run again after a crash: it finishes the rotation
    /// it finds under way. Processes on other hosts open the re-wrapped records only
    /// with the new file: share the file, or copy it to them as soon as this has run.
    Rotate(SecretsArgs),
}

#[derive(clap::Args)]
pub struct SecretsArgs {
    /// Output: table or json.
    #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
    pub output: String,
}

#[derive(clap::Args)]
pub struct BenchCommands {
    #[command(subcommand)]
    pub command: BenchCommand,
    #[command(flatten)]
    pub no_state: NoState,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// In a fresh temporary home: a paced client workload (writes and linearizable reads)
    /// during a rollout, through the published endpoints or an HAProxy, by quorum
    /// (replacing machines, or restarting them in place) or by a naive script; reports
    /// the rollout's time, failures by kind, latency, the longest gap without a success,
    /// when started members began to serve, and lost writes (which fail the run).
    #[command(after_help = "Examples:
  quorum bench rollout                       quorum's rollout (replacement), clients following the endpoints
  quorum bench rollout --rate 100 --settle 1s -o json
                                             a short run, machine-readable
  quorum bench rollout --strategy safe,in-place,naive
                                             replacement, in place and the naive script side by side
  quorum bench rollout --strategy safe,in-place --preload-mib 256
                                             what a 256 MiB database does to each (about 3 GiB of disk at most)
  quorum bench rollout --strategy safe,naive --client-mode follow,haproxy --plot docs/bench
                                             the side-by-side comparison (4 fresh control planes)")]
    Rollout(rollout::BenchArgs),
    /// Several controllers on a throwaway 3-member management etcd: SIGKILL the leading
    /// one again and again and time until a standby's first write as leader.
    #[command(after_help = "Examples:
  quorum bench failover                      20 kills, lease 4s, 2 replicas
  quorum bench failover --runs 5 --lease-ttl 2s --replicas 3 -o json")]
    Failover(failover::FailoverArgs),
    /// On a throwaway single etcd member filled with N keys: how long quorum takes to
    /// snapshot it (streamed, digest and facts checked), to test-restore the snapshot
    /// (restored, started, read back) and to restore it as a rebuild's seed, and how big
    /// the snapshot is.
    #[command(after_help = "Examples:
  quorum bench snapshot                               10,000 and 100,000 keys of 1 KiB
  quorum bench snapshot --keys 10000,100000,1000000   up to a million (about 3.5 GiB of disk at once)
  quorum bench snapshot --keys 50000 --value-bytes 4096 -o json")]
    Snapshot(snapshot::SnapshotArgs),
    /// Many control planes, one controller group: N control planes are created, then
    /// all upgraded at once. Reports the wall time, each one's rollout time (p50, p99,
    /// max), and each controller's CPU time, peak memory and file descriptors.
    #[command(after_help = "Examples:
  quorum bench fleet                                  10 control planes of 1 member, 3.4.23 -> 3.5.30
  quorum bench fleet --control-planes 50              50 at once (about 100 etcd processes at the peak)
  quorum bench fleet --control-planes 25 --members 3  25 of 3 members
  quorum bench fleet --replicas 2                     2 controllers sharing a management etcd
  quorum bench fleet --concurrency 4 -o json          fewer reconciles at once; the figures as JSON")]
    Fleet(fleet::FleetArgs),
}

#[derive(clap::Args)]
pub struct CreateArgs {
    /// Name of the new control plane: lowercase letters, digits and '-'.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Number of etcd members: 1, 3, 5 or 7 (2, 4 or 6 with --force).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true, value_parser = usage::replicas, value_name = "N")]
    pub replicas: u32,
    /// etcd version, installed (see `quorum versions`); 3.4 means the newest installed 3.4.x.
    #[arg(long, value_parser = usage::version_text, required_unless_present = "from_snapshot")]
    pub version: Option<String>,
    /// Bring back a deleted control plane from one of its snapshots (an id from
    /// `quorum snapshots`, or `newest`): its spec and CA as they were when the snapshot
    /// was taken (client certificates it issued work again), and every key.
    #[arg(long, value_name = "ID", conflicts_with_all = [
        "version", "replicas", "max_surge", "strategy", "force", "haproxy_runtime_api",
        "certificate_lifetime", "renew_before", "insecure_plaintext", "provider",
        "deletion_protection",
    ])]
    pub from_snapshot: Option<String>,
    /// Refuse `quorum delete` until it is turned off (`quorum protect NAME --off`).
    #[arg(long)]
    pub deletion_protection: bool,
    /// 1: add each new member before removing an old one; 0: remove first (3+ replicas).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = usage::max_surge, value_name = "N")]
    pub max_surge: u32,
    /// How upgrades and certificate renewals roll out: Replace (a new machine joins,
    /// the old one leaves; for immutable machines) or InPlace (each member restarted
    /// on the new binary with the same data, followers first; 3+ replicas, no copy).
    #[arg(long, default_value = "Replace", value_parser = usage::strategy, value_name = "STRATEGY")]
    pub strategy: Strategy,
    /// Accept an even replica count.
    #[arg(long)]
    pub force: bool,
    /// Keep this HAProxy's backend in step with the members: the path of its runtime
    /// API socket (a `stats socket ... level admin` line; see `quorum haproxy-config`).
    #[arg(long, value_name = "SOCKET")]
    pub haproxy_runtime_api: Option<String>,
    /// With --haproxy-runtime-api: the backend that holds the members.
    #[arg(long, default_value = DEFAULT_HAPROXY_BACKEND, value_name = "NAME", requires = "haproxy_runtime_api")]
    pub haproxy_backend: String,
    /// How long each machine's certificates are valid: 365d, 12h, 90s.
    #[arg(long, default_value = "365d", value_name = "DURATION")]
    pub certificate_lifetime: Span,
    /// Replace a machine (by a normal rollout) when its certificates expire within
    /// this span. Default: a fifth of the lifetime.
    #[arg(long, value_name = "DURATION")]
    pub renew_before: Option<Span>,
    /// DANGEROUS: plain HTTP on the client and peer ports, no certificates. Anyone
    /// who can reach a member's address can read and change everything in it.
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// When the controller takes snapshots on its own: a cron expression (UTC; 5 fields,
    /// or 6 with seconds first), or `off`. Retention keeps the newest 24 and one a day
    /// for 7 days (change both with `apply -f`, `spec.backup`).
    #[arg(long, env = "QUORUM_BACKUP_SCHEDULE", default_value = quorum_core::backup::DEFAULT_SCHEDULE, value_name = "CRON")]
    pub backup_schedule: String,
    /// Where the members run: local (processes on this host, each on its own loopback
    /// address) or hosts (on the hosts `quorum host add` registered, through their
    /// agents, one member per host, no zone holding more members than the control plane
    /// can lose).
    #[arg(long, default_value = "local", value_parser = parse_provider, value_name = "PROVIDER")]
    pub provider: quorum_core::ProviderKind,
    #[command(flatten)]
    pub wait: WaitArgs,
}

fn parse_provider(s: &str) -> Result<quorum_core::ProviderKind, String> {
    match s {
        "local" => Ok(quorum_core::ProviderKind::Local),
        "hosts" => Ok(quorum_core::ProviderKind::Hosts),
        _ => Err(format!("{s:?} is not a provider: use local or hosts")),
    }
}

#[derive(clap::Args)]
pub struct CredentialsArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Directory for ca.crt, client.crt and client.key (created owner-only).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The certificate's common name (who the client is, in etcd's logs).
    #[arg(long, default_value = "quorum-user", value_name = "CN")]
    pub common_name: String,
    /// How long the certificate is valid: 30d, 12h.
    #[arg(long, default_value = "30d", value_name = "DURATION")]
    pub lifetime: Span,
}

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// The manifest ('-' for standard input).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Accept an even replica count, or a change while a member is unreachable.
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
    /// Apply a manifest whose metadata.resourceVersion is older than the control
    /// plane's (someone changed it since `quorum get`): its spec replaces theirs.
    #[arg(long)]
    pub force_conflicts: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
    /// Keep watching: on a terminal, redraw every second; otherwise print a new status
    /// (a JSON object per line with -o json) only when something changed. Ctrl-C stops.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// With --watch: stop (exit 0) after this long: 90s, 10m, 1h.
    #[arg(long, requires = "watch", value_parser = wait::parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
}

/// `list -o`: a table, a wider table, or every field.
#[derive(Clone, Copy, ValueEnum)]
pub enum ListOutput {
    Table,
    /// The table with the cluster version, leader, controller and endpoints.
    Wide,
    Json,
    Yaml,
}

#[derive(clap::Args)]
pub struct ListArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: ListOutput,
}

/// `get -o`: the manifest as YAML or as JSON (both are taken by `apply -f`).
#[derive(Clone, Copy, ValueEnum)]
pub enum ManifestOutput {
    Yaml,
    Json,
}

#[derive(clap::Args)]
pub struct GetArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "yaml")]
    pub output: ManifestOutput,
}

#[derive(clap::Args)]
pub struct EtcdctlArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// etcdctl's command and flags, after `--`.
    #[arg(required = true, last = true, value_name = "ETCDCTL ARGS")]
    pub args: Vec<std::ffi::OsString>,
}

#[derive(clap::Args)]
pub struct DefragArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Only this machine (as `quorum status` names it).
    #[arg(long, value_name = "MACHINE")]
    pub member: Option<String>,
}

#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Skip the test restore that verifies the new snapshot (it stays unverified).
    #[arg(long)]
    pub no_verify: bool,
}

#[derive(clap::Args)]
pub struct SnapshotsArgs {
    /// The control plane (deleted ones too); none: every name that has snapshots.
    #[arg(value_parser = usage::cp_name)]
    pub name: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
    /// Test-restore this snapshot now (its id, or `newest`) and record the outcome,
    /// then list.
    #[arg(long, value_name = "ID")]
    pub verify: Option<String>,
}

const RESTORE_HELP: &str = "Examples:
  quorum snapshots prod                                  # what there is to restore from
  quorum restore prod --from prod-20261204T141908Z-r301.db
  quorum restore prod --from newest --yes --wait

It prints what it will do and what is lost (every write after the snapshot's revision),
then asks you to type the control plane's name (--yes skips that; without a terminal,
--yes is required). Then the controller:
  1. fences the old members: stops each and moves its directory to <home>/fenced/, so
     none can come back (nothing is deleted: remove them yourself once satisfied);
  2. restores the snapshot into one new member with a fresh cluster token, so the new
     cluster can never be taken for the old one;
  3. grows it back to spec.replicas through learners, the normal safe path.
Each step is recorded before it is taken; a controller that crashes resumes it.

Watchers: where etcdutl supports it (etcd 3.5.10 and later) revisions move on by a
billion and older ones are marked compacted, so watches resumed from the old cluster are
told to re-list. With an older etcdutl (before 3.5.10: 3.5.1 and 3.4.23 here) clients
with watches must re-list.";

const RECOVER_HELP: &str = "Examples:
  quorum status prod                                     # QuorumLost names both ways back
  quorum recover prod --from-member prod-2
  quorum recover prod --from-snapshot newest --yes --wait

When a majority of members is lost (QuorumLost in `quorum status`), etcd cannot elect a
leader and nothing can be written. --from-member M fences every other old member (stop,
directory moved to <home>/fenced/), then restarts M with --force-new-cluster: it keeps
everything it applied and becomes a cluster of one, which quorum grows back through
learners. --from-snapshot restores as `quorum restore` does.

quorum never does this on its own, and it asks you to confirm: a wrong guess (a member
that was only slow, a survivor that was behind) throws away acknowledged writes, and
none of etcd, Kubernetes' kubeadm, Cluster API or etcd-druid automates it either.
--from-member is refused while a leader answers.";

#[derive(clap::Args)]
pub struct RestoreArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// The snapshot to restore: its id (`quorum snapshots NAME`), or `newest`.
    #[arg(long, value_name = "SNAPSHOT")]
    pub from: String,
    /// Go ahead without asking.
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(clap::Args)]
#[group(id = "source", required = true, multiple = false, args = ["from_member", "from_snapshot"])]
pub struct RecoverArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Recover from this surviving member (as `quorum status` names it).
    #[arg(long, value_name = "MACHINE")]
    pub from_member: Option<String>,
    /// Recover from this snapshot instead: its id, or `newest`.
    #[arg(long, value_name = "SNAPSHOT")]
    pub from_snapshot: Option<String>,
    /// Recover from the member named even where another survivor, or the newest
    /// verified snapshot, holds more (a learner, a member far behind).
    #[arg(long, requires = "from_member")]
    pub accept_data_loss: bool,
    /// Go ahead without asking.
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
    #[command(flatten)]
    pub no_state: NoState,
}

#[derive(clap::Args)]
pub struct EventsArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// How many of the newest steps to show; 0 shows every one kept.
    #[arg(
        long,
        default_value_t = 50,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub last: u32,
    /// Keep printing new steps as they are recorded, until Ctrl-C or deletion.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Output format (with --follow, -o json prints one object per line).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

#[derive(clap::Args)]
pub struct DeleteArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Go ahead without asking (without a terminal, required: nothing is deleted
    /// otherwise).
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(clap::Args)]
pub struct ControllerArgs {
    /// Serve Prometheus metrics on ADDR (GET /metrics), or 'off'. Controllers of
    /// different homes on one machine each need their own.
    #[arg(long, default_value = DEFAULT_METRICS_ADDR, value_name = "ADDR")]
    pub metrics_addr: String,
    /// With --store etcd://: the leadership lease. A dead leader is replaced within
    /// about this long; a leader that cannot renew stops acting before it ends.
    #[arg(long, default_value = "4s", value_parser = parse_lease_ttl, value_name = "DURATION")]
    pub lease_ttl: Duration,
    /// Name this replica publishes (in `quorum status` and the leader key).
    /// Default: host and process id.
    #[arg(long, value_name = "NAME")]
    pub identity: Option<String>,
    /// Control planes reconciled at the same moment. Each control plane has its own
    /// task, and at most one pass of it runs at a time; a pass mostly waits on etcd, so
    /// this can be well above the number of cores. A hung control plane holds one of
    /// these while it waits out its deadlines, and delays no other.
    #[arg(long, default_value_t = quorum_controller::fleet::DEFAULT_CONCURRENCY,
          value_parser = parse_concurrency, value_name = "N")]
    pub concurrency: usize,
    /// Control planes whose connections stay open between passes; past it the least
    /// recently used are closed (and opened again when next needed).
    #[arg(long, default_value_t = quorum_controller::fleet::DEFAULT_MAX_OPEN_CONTROL_PLANES,
          value_parser = parse_max_open, value_name = "N")]
    pub max_open_control_planes: usize,
    /// With --store etcd://: split the control planes into N shards, spread over the
    /// live replicas, each shard led by one replica at a time (a lease and a fence per
    /// shard, as for the one leadership without it). A replica that dies or joins moves
    /// shards within about --lease-ttl plus a second. Every replica of a store must be
    /// given the same N; to change it, stop them all. Default 1: one replica leads
    /// every control plane, the others stand by.
    #[arg(long, default_value_t = 1, value_parser = parse_shards, value_name = "N")]
    pub shards: u32,
    /// Serve the join service on IP:PORT: host agents exchange their one-time tokens
    /// there and renew their certificates. Recorded in the store, so `quorum host add`
    /// puts it in tokens. Off by default.
    #[arg(long, value_name = "IP:PORT")]
    pub join_listen: Option<std::net::SocketAddr>,
}

fn parse_shards(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("--shards takes a whole number, not {s:?}"))?;
    quorum_core::shards::check_count(n)
}

fn parse_concurrency(s: &str) -> Result<usize, String> {
    let max = quorum_controller::fleet::MAX_CONCURRENCY;
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to {max}")),
    }
}

fn parse_max_open(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number, 1 or more".to_string()),
    }
}

#[derive(clap::Args)]
pub struct RotateCaArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Say what the rotation would do, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Go ahead without asking (needed without a terminal).
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(clap::Args)]
pub struct PauseArgs {
    /// The control plane.
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Resume instead of pausing.
    #[arg(long)]
    pub resume: bool,
}

#[derive(clap::Args)]
pub struct HaproxyConfigArgs {
    /// The control plane (created with --haproxy-runtime-api, or a manifest's spec.haproxy).
    #[arg(value_parser = usage::cp_name)]
    pub name: String,
    /// Address the frontend listens on for etcd clients: IP:PORT.
    #[arg(long, value_name = "ADDR")]
    pub bind: std::net::SocketAddr,
    /// For a TLS control plane: where to write HAProxy's own certificate and key
    /// (haproxy.pem, for its frontend) and the CA bundle (ca.crt).
    /// Default: <home>/haproxy/<name> (removed with the control plane; a directory
    /// given here is not).
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
}
