//! The `quorum` command line. Everything here is the binary's edge: it parses input,
//! checks it against the core's rules, writes the store, and prints.

mod events;
mod manifest;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use quorum_bench::{demo, failover, rollout};
use quorum_controller::access;
use quorum_controller::{Config, Controller};
use quorum_core::{
    CertificatesSpec, ControlPlaneSpec, HaproxySpec, RolloutBefore, RolloutStrategy, Span,
    CLIENT_PORT, DEFAULT_HAPROXY_BACKEND,
};
use quorum_ops::{
    change, create, haproxy_frontend_tls, parse_lease_ttl, status, teardown, wait, Ctx, Place,
};
use quorum_provider::{default_etcd_dir, installed_versions};
use quorum_store::StoreLocation;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ABOUT: &str =
    "quorum keeps etcd control planes healthy through upgrades, scaling and machine \
replacement, without ever losing quorum and without getting stuck after a crash.";

const AFTER_HELP: &str = "\
A first session:
  quorum demo                                   # everything below, in a throwaway home
  quorum controller &                           # the reconcile loop (keep it running)
  quorum create prod --replicas 3 --version 3.4.23 --wait
  quorum status prod
  quorum upgrade prod --version 3.5.1 --wait    # member by member, learner first
  quorum scale prod --replicas 5 --wait
  quorum delete prod --wait

State lives in --home (or QUORUM_HOME), default ~/.local/share/quorum/state.
etcd binaries are looked up in QUORUM_ETCD_DIR (default ~/.local/share/quorum/etcd/<version>/etcd);
scripts/install.sh puts them there. QUORUM_LOG sets the log filter (for example debug).
Exit status: 0 done, 1 refused or failed (one line on stderr says why), 2 malformed command line.";

#[derive(Parser)]
#[command(name = "quorum", version, about = ABOUT, after_help = AFTER_HELP)]
struct Cli {
    /// State directory: the store and the local machines [env: QUORUM_HOME]
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Where the state lives: `embedded` (a file in --home) or a management etcd,
    /// `etcd://host:port,host:port[/prefix]`, shared by several controllers [env: QUORUM_STORE]
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    /// With --store etcd://: the CA bundle that signed the management etcd's certificates
    /// (PEM); with --store-cert and --store-key, the store is reached over mutual TLS
    #[arg(long, global = true, value_name = "FILE", requires_all = ["store_cert", "store_key"])]
    store_ca: Option<PathBuf>,
    /// With --store-ca: the client certificate for the management etcd (PEM)
    #[arg(long, global = true, value_name = "FILE", requires = "store_ca")]
    store_cert: Option<PathBuf>,
    /// With --store-ca: the client certificate's key (PEM)
    #[arg(long, global = true, value_name = "FILE", requires = "store_ca")]
    store_key: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
    Yaml,
}

#[derive(clap::Args)]
struct WaitArgs {
    /// Follow the change until the spec is met, printing each step.
    #[arg(long)]
    wait: bool,
    /// With --wait: give up (exit 1) after this long: 90s, 10m, 1h.
    #[arg(long, default_value = "10m", value_parser = wait::parse_duration, value_name = "DURATION")]
    timeout: Duration,
}

#[derive(Subcommand)]
enum Command {
    /// Create a control plane.
    #[command(
        after_help = "Example: quorum create prod --replicas 3 --version 3.4.23 --wait\n\n\
Members speak mutual TLS on the client and peer ports, with certificates from a CA that\n\
quorum creates for this control plane and keeps in its state. To reach the members,\n\
get a client certificate: quorum credentials NAME --out DIR."
    )]
    Create {
        /// Name of the new control plane: lowercase letters, digits and '-'.
        name: String,
        /// Number of etcd members: 1, 3, 5 or 7.
        #[arg(long, default_value_t = 3, allow_negative_numbers = true)]
        replicas: u32,
        /// etcd version, installed (see `quorum versions`); 3.4 means the newest installed 3.4.x.
        #[arg(long)]
        version: String,
        /// 1: add each new member before removing an old one; 0: remove first (3+ replicas).
        #[arg(long, default_value_t = 1)]
        max_surge: u32,
        /// Accept an even replica count.
        #[arg(long)]
        force: bool,
        /// Keep this HAProxy's backend in step with the members: the path of its runtime
        /// API socket (a `stats socket ... level admin` line; see `quorum haproxy-config`).
        #[arg(long, value_name = "SOCKET")]
        haproxy_runtime_api: Option<String>,
        /// With --haproxy-runtime-api: the backend that holds the members.
        #[arg(long, default_value = DEFAULT_HAPROXY_BACKEND, value_name = "NAME")]
        haproxy_backend: String,
        /// How long each machine's certificates are valid: 365d, 12h, 90s.
        #[arg(long, default_value = "365d", value_name = "DURATION")]
        certificate_lifetime: Span,
        /// Replace a machine (by a normal rollout) when its certificates expire within
        /// this span. Default: a fifth of the lifetime.
        #[arg(long, value_name = "DURATION")]
        renew_before: Option<Span>,
        /// DANGEROUS: plain HTTP on the client and peer ports, no certificates. Anyone
        /// who can reach a member's address can read and change everything in it.
        #[arg(long)]
        insecure_plaintext: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Write a client certificate, its key and the CA bundle for a control plane, and
    /// print the etcdctl flags that use them.
    #[command(after_help = "Example:\n  \
quorum credentials prod --out ./prod-creds\n  \
etcdctl --endpoints https://127.0.0.1:2379 --cacert prod-creds/ca.crt \\\n    \
--cert prod-creds/client.crt --key prod-creds/client.key get foo\n\n\
The key file is written with mode 0600 in a 0700 directory; existing files are replaced.")]
    Credentials {
        /// The control plane.
        name: String,
        /// Directory for ca.crt, client.crt and client.key (created owner-only).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The certificate's common name (who the client is, in etcd's logs).
        #[arg(long, default_value = "quorum-user", value_name = "CN")]
        common_name: String,
        /// How long the certificate is valid: 30d, 12h.
        #[arg(long, default_value = "30d", value_name = "DURATION")]
        lifetime: Span,
    },
    /// Create or change a control plane from a YAML manifest.
    #[command(after_help = format!("A manifest:\n\n{}", manifest::EXAMPLE))]
    Apply {
        /// The manifest ('-' for standard input).
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: PathBuf,
        /// Accept an even replica count, or a change while a member is unreachable.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Roll a control plane to another etcd version, one member at a time.
    #[command(
        after_help = "Example: quorum upgrade prod --version 3.5.1 --wait --timeout 15m\n\n\
etcd moves one minor version at a time, and never below the running cluster version."
    )]
    Upgrade {
        /// The control plane.
        name: String,
        /// The etcd version to roll to (installed; 3.5 means the newest installed 3.5.x).
        #[arg(long)]
        version: String,
        /// Record the change even if a member is unreachable (quorum still refuses every unsafe step).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Change the number of members.
    #[command(after_help = "Example: quorum scale prod --replicas 5 --wait")]
    Scale {
        /// The control plane.
        name: String,
        /// The new number of etcd members: 1, 3, 5 or 7.
        #[arg(long, allow_negative_numbers = true)]
        replicas: u32,
        /// Accept an even count, or a change while a member is unreachable.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Show machines, members, health, conditions and client endpoints.
    #[command(after_help = "The fields of -o json and -o yaml are described in the README.")]
    Status {
        /// The control plane.
        name: String,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
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
    Events {
        /// The control plane.
        name: String,
        /// How many of the newest steps to show; 0 shows every one kept.
        #[arg(
            long,
            default_value_t = 50,
            value_name = "N",
            allow_negative_numbers = true
        )]
        last: u32,
        /// Keep printing new steps as they are recorded, until Ctrl-C or deletion.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Output format (with --follow, -o json prints one object per line).
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// List the control planes.
    List,
    /// Delete a control plane: stop and remove every machine and its data.
    Delete {
        /// The control plane.
        name: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Run the reconcile loop in the foreground for every control plane (Ctrl-C stops it;
    /// the machines keep running).
    #[command(
        after_help = "The controller keeps <home>/endpoints/<name>.json current: the client URLs \
clients should use (voting, healthy, not leaving), replaced before a leaving member is removed."
    )]
    Controller {
        /// Serve Prometheus metrics on ADDR (GET /metrics), or 'off'.
        #[arg(long, default_value = "127.0.0.1:9479", value_name = "ADDR")]
        metrics_addr: String,
        /// With --store etcd://: the leadership lease. A dead leader is replaced within
        /// about this long; a leader that cannot renew stops acting before it ends.
        #[arg(long, default_value = "4s", value_parser = parse_lease_ttl, value_name = "DURATION")]
        lease_ttl: Duration,
        /// Name this replica publishes (in `quorum status` and the leader key).
        /// Default: host and process id.
        #[arg(long, value_name = "NAME")]
        identity: Option<String>,
    },
    /// Pause or resume the reconciliation of one control plane.
    Pause {
        /// The control plane.
        name: String,
        /// Resume instead of pausing.
        #[arg(long)]
        resume: bool,
    },
    /// Print an HAProxy configuration for a control plane: an HTTP/2 frontend for its
    /// clients, the admin socket quorum drives, and a backend with its current members.
    #[command(after_help = "Example:\n  \
quorum create prod --version 3.5.1 --haproxy-runtime-api /run/quorum-haproxy/admin.sock\n  \
quorum haproxy-config prod --bind 127.0.0.1:2379 > haproxy.cfg && haproxy -f haproxy.cfg\n\n\
From then on the controller adds a member to the backend once its /health passes, and\n\
sets a leaving member to maintenance (then shuts its sessions) before removing it.")]
    HaproxyConfig {
        /// The control plane (created with --haproxy-runtime-api, or a manifest's spec.haproxy).
        name: String,
        /// Address the frontend listens on for etcd clients: IP:PORT.
        #[arg(long, value_name = "ADDR")]
        bind: std::net::SocketAddr,
        /// For a TLS control plane: where to write HAProxy's own certificate and key
        /// (haproxy.pem, for its frontend) and the CA bundle (ca.crt).
        /// Default: <home>/haproxy/<name>.
        #[arg(long, value_name = "DIR")]
        tls_dir: Option<PathBuf>,
    },
    /// List the installed etcd versions.
    Versions,
    /// In a fresh temporary home: create 3 members at etcd 3.4.23, write keys, upgrade to
    /// 3.5.1 with progress, verify every key, report timings, clean up.
    Demo(demo::DemoArgs),
    /// Measure what clients see.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// In a fresh temporary home: a paced client workload (writes and linearizable reads)
    /// during a rollout, through the published endpoints or an HAProxy, by quorum or by a
    /// naive script; reports failures by kind, latency, the longest gap without a
    /// success, when new members began to serve, and lost writes (which fail the run).
    #[command(after_help = "Examples:
  quorum bench rollout                       quorum's rollout, clients following the endpoints
  quorum bench rollout --rate 100 --settle 1s -o json
                                             a short run, machine-readable
  quorum bench rollout --strategy safe,naive --client-mode follow,haproxy --plot docs/bench
                                             the side-by-side comparison (4 fresh control planes)")]
    Rollout(rollout::BenchArgs),
    /// Several controllers on a throwaway 3-member management etcd: SIGKILL the leading
    /// one again and again and time until a standby's first write as leader.
    #[command(after_help = "Examples:
  quorum bench failover                      20 kills, lease 4s, 2 replicas
  quorum bench failover --runs 5 --lease-ttl 2s --replicas 3 -o json")]
    Failover(failover::FailoverArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("QUORUM_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(if matches!(cli.command, Command::Controller { .. }) {
            "info"
        } else {
            "warn"
        })
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match quorum_controller::failpoints::init_from_env() {
        Ok(set) if !set.is_empty() => eprintln!("failpoints armed: {}", set.join(", ")),
        Ok(_) => {}
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--store` (else `QUORUM_STORE`, else embedded) with its TLS files.
fn store_location(cli: &Cli) -> Result<StoreLocation> {
    let url = cli
        .store
        .clone()
        .or_else(|| std::env::var("QUORUM_STORE").ok())
        .unwrap_or_default();
    let tls = match (&cli.store_ca, &cli.store_cert, &cli.store_key) {
        (Some(ca), Some(cert), Some(key)) => {
            let read = |p: &PathBuf| {
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
            };
            Some(quorum_store::EtcdTls {
                ca_pem: read(ca)?,
                cert_pem: read(cert)?,
                key_pem: read(key)?,
            })
        }
        _ => None,
    };
    StoreLocation::parse(&url, tls).map_err(|e| anyhow!(e))
}

/// `--home`, else `QUORUM_HOME`, else the user's data directory.
fn home(cli_home: Option<PathBuf>) -> PathBuf {
    cli_home
        .or_else(|| {
            std::env::var_os("QUORUM_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| quorum_provider::data_home().join("quorum").join("state"))
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

async fn run(cli: Cli) -> Result<()> {
    let store = store_location(&cli)?;
    let home = home(cli.home);
    let at = Place {
        home: home.clone(),
        store,
    };
    match cli.command {
        Command::Create {
            name,
            replicas,
            version,
            max_surge,
            force,
            haproxy_runtime_api,
            haproxy_backend,
            certificate_lifetime,
            renew_before,
            insecure_plaintext,
            wait,
        } => {
            let mut ctx = Ctx::open(&at)?;
            let version = ctx.version(&version)?;
            let spec = ControlPlaneSpec {
                replicas,
                version,
                rollout: RolloutStrategy {
                    max_surge,
                    before: RolloutBefore {
                        certificates_expiry: renew_before,
                    },
                },
                paused: false,
                haproxy: haproxy_runtime_api.map(|runtime_api| HaproxySpec {
                    runtime_api,
                    backend: haproxy_backend,
                }),
                certificates: CertificatesSpec {
                    lifetime: certificate_lifetime,
                },
                insecure_plaintext,
            };
            create(&mut ctx, &name, spec, force)?;
            wait_for(&ctx, &name, wait::Goal::Converged, &wait, 0).await
        }
        Command::Apply { file, force, wait } => {
            let (text, source) = if file.as_os_str() == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .context("reading the manifest from standard input")?;
                (s, "standard input".to_string())
            } else {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                (text, file.display().to_string())
            };
            let m = manifest::parse(&text, &source)?;
            let mut ctx = Ctx::open(&at)?;
            let name = m.metadata.name.clone();
            let after = ctx.store.last_event_id(&name)?;
            if ctx.store.control_plane(&name)?.is_some() {
                change(&mut ctx, &name, force, |_| m.spec.clone()).await?;
            } else {
                create(&mut ctx, &name, m.spec, force)?;
            }
            wait_for(&ctx, &name, wait::Goal::Converged, &wait, after).await
        }
        Command::Upgrade {
            name,
            version,
            force,
            wait,
        } => {
            let mut ctx = Ctx::open(&at)?;
            ctx.store.get_control_plane(&name)?;
            let version = ctx.version(&version)?;
            let after = ctx.store.last_event_id(&name)?;
            change(&mut ctx, &name, force, |s| ControlPlaneSpec {
                version,
                ..s.clone()
            })
            .await?;
            wait_for(&ctx, &name, wait::Goal::Converged, &wait, after).await
        }
        Command::Scale {
            name,
            replicas,
            force,
            wait,
        } => {
            let mut ctx = Ctx::open(&at)?;
            let after = ctx.store.last_event_id(&name)?;
            change(&mut ctx, &name, force, |s| ControlPlaneSpec {
                replicas,
                ..s.clone()
            })
            .await?;
            wait_for(&ctx, &name, wait::Goal::Converged, &wait, after).await
        }
        Command::Pause { name, resume } => {
            let mut ctx = Ctx::open(&at)?;
            let mut spec = ctx.store.get_control_plane(&name)?.spec;
            if spec.paused != resume {
                println!(
                    "{name}: already {}",
                    if resume {
                        "running (not paused)"
                    } else {
                        "paused"
                    }
                );
                return Ok(());
            }
            spec.paused = !resume;
            ctx.store.update_spec(&name, &spec)?;
            if resume {
                println!("{name}: resumed");
            } else {
                println!("{name}: paused: quorum takes no step on it until `quorum pause {name} --resume`");
            }
            Ok(())
        }
        Command::Status { name, output } => {
            let ctx = Ctx::open(&at)?;
            let cp = ctx.store.get_control_plane(&name)?;
            let s = ctx.live(&cp).await?;
            match output {
                Output::Table => print!("{}", status::render_table(&s)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&s)?),
                Output::Yaml => print!("{}", serde_yaml::to_string(&s)?),
            }
            Ok(())
        }
        Command::Events {
            name,
            last,
            follow,
            output,
        } => {
            if follow && matches!(output, Output::Yaml) {
                use clap::CommandFactory;
                Cli::command()
                    .error(
                        clap::error::ErrorKind::ArgumentConflict,
                        "--follow prints a table or JSON lines (-o json), not YAML",
                    )
                    .exit();
            }
            let ctx = Ctx::open(&at)?;
            let format = match output {
                Output::Table => events::Format::Table,
                Output::Json => events::Format::Json,
                Output::Yaml => events::Format::Yaml,
            };
            events::run(&ctx.store, &name, last, follow, format).await
        }
        Command::List => list(&at),
        Command::Delete { name, wait } => {
            let mut ctx = Ctx::open(&at)?;
            ctx.store.get_control_plane(&name)?;
            let after = ctx.store.last_event_id(&name)?;
            ctx.store.mark_control_plane_deleting(&name)?;
            if wait::controller_active(&ctx.store) {
                println!(
                    "{name}: marked for deletion; the running controller removes its machines"
                );
                if !wait.wait {
                    return Ok(());
                }
                // Follow it; should it stop (a stale heartbeat), finish the teardown here.
                let mut last = after;
                let deadline = std::time::Instant::now() + wait.timeout;
                while ctx.store.control_plane(&name)?.is_some() {
                    wait::print_events(&ctx.store, &name, &mut last, ctx.started_ms, false)?;
                    if !wait::controller_active(&ctx.store) {
                        println!("{name}: the controller stopped; finishing the deletion here");
                        teardown(&at, &name, Some(ctx.started_ms)).await?;
                        // The teardown printed its own steps.
                        last = ctx.store.last_event_id(&name)?;
                        break;
                    }
                    if std::time::Instant::now() >= deadline {
                        bail!(
                            "{name}: not deleted within {}s; see `quorum status {name}`",
                            wait.timeout.as_secs()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                wait::print_events(&ctx.store, &name, &mut last, ctx.started_ms, false)?;
            } else {
                // Teardown needs no quorum and no controller: do it here.
                println!("{name}: marked for deletion; stopping and removing its machines");
                teardown(&at, &name, Some(ctx.started_ms)).await?;
            }
            if ctx.store.control_plane(&name)?.is_none() {
                println!("{name}: deleted");
            }
            Ok(())
        }
        Command::Controller {
            metrics_addr,
            lease_ttl,
            identity,
        } => {
            let mut cfg = Config::new(&home, default_etcd_dir());
            cfg.store = at.store.clone();
            cfg.lease_ttl_ms = lease_ttl.as_millis() as u64;
            if let Some(id) = identity {
                cfg.identity = id;
            }
            let where_ = match &at.store {
                StoreLocation::Embedded => home.display().to_string(),
                StoreLocation::Etcd(l) => l.url(),
            };
            let mut c =
                Controller::new(cfg).with_context(|| format!("opening the store {where_}"))?;
            let stop = Arc::new(AtomicBool::new(false));
            if metrics_addr != "off" {
                let listener = tokio::net::TcpListener::bind(&metrics_addr).await.with_context(|| {
                    format!("cannot serve metrics on {metrics_addr} (another controller there?); choose another with --metrics-addr, or 'off'")
                })?;
                eprintln!(
                    "quorum controller: metrics on http://{}/metrics",
                    listener.local_addr()?
                );
                tokio::spawn(quorum_controller::metrics::serve(
                    listener,
                    c.metrics(),
                    stop.clone(),
                ));
            }
            let s2 = stop.clone();
            tokio::spawn(async move {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {},
                    _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {},
                }
                s2.store(true, Ordering::Relaxed);
            });
            eprintln!(
                "quorum controller: home {}, store {} (Ctrl-C to stop; machines keep running)",
                home.display(),
                where_
            );
            c.run(stop).await;
            Ok(())
        }
        Command::Credentials {
            name,
            out,
            common_name,
            lifetime,
        } => {
            let ctx = Ctx::open(&at)?;
            credentials(&ctx, &name, &out, &common_name, lifetime)
        }
        Command::HaproxyConfig {
            name,
            bind,
            tls_dir,
        } => {
            let ctx = Ctx::open(&at)?;
            let cp = ctx.store.get_control_plane(&name)?;
            let Some(h) = &cp.spec.haproxy else {
                bail!(
                    "{name} has no HAProxy: create it with --haproxy-runtime-api SOCKET (or set \
                     spec.haproxy.runtimeApi in its manifest)"
                );
            };
            let servers: Vec<(String, std::net::SocketAddr)> = ctx
                .store
                .machines(&name)?
                .iter()
                .filter(|m| !m.deleting)
                .map(|m| {
                    (
                        m.name.clone(),
                        std::net::SocketAddr::from((m.address, CLIENT_PORT)),
                    )
                })
                .collect();
            let tls = match ctx.store.certificate_authority(&cp)? {
                None => None,
                Some(stored) => {
                    let dir = tls_dir.unwrap_or_else(|| home.join("haproxy").join(&name));
                    Some(haproxy_frontend_tls(&name, &stored, bind, &dir)?)
                }
            };
            print!(
                "{}",
                quorum_haproxy::config(
                    &name,
                    bind,
                    Path::new(&h.runtime_api),
                    &h.backend,
                    &servers,
                    tls.as_ref(),
                )
            );
            Ok(())
        }
        Command::Versions => {
            let dir = default_etcd_dir();
            let vs = installed_versions(&dir);
            if vs.is_empty() {
                bail!(
                    "no etcd installed in {}: run scripts/install.sh (or set QUORUM_ETCD_DIR)",
                    dir.display()
                );
            }
            for v in vs {
                let warn = if v.has_known_data_inconsistency_bug() {
                    "  (known data inconsistency bug, fixed in 3.5.3)"
                } else {
                    ""
                };
                println!("{v}{warn}");
            }
            Ok(())
        }
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(BenchCommand::Rollout(args)) => rollout::run(args).await,
        Command::Bench(BenchCommand::Failover(args)) => failover::run(args).await,
    }
}

fn list(at: &Place) -> Result<()> {
    let ctx = Ctx::open(at)?;
    let cps = ctx.store.control_planes()?;
    if cps.is_empty() {
        let place = match &at.store {
            StoreLocation::Embedded => at.home.display().to_string(),
            StoreLocation::Etcd(l) => l.url(),
        };
        println!(
            "No control planes in {place}. Create one with `quorum create NAME --version 3.4.23`."
        );
        return Ok(());
    }
    let mut rows = vec![["NAME", "REPLICAS", "VERSION", "MACHINES", "STATE"]
        .map(String::from)
        .to_vec()];
    for cp in cps {
        let n = ctx.store.machines(&cp.name)?.len();
        let state = if cp.deleting {
            "deleting".to_string()
        } else if cp.spec.paused {
            "paused".into()
        } else {
            ctx.store
                .published_status(&cp.name)?
                .and_then(|p| {
                    p.status
                        .pointer("/decision/operation")
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "unknown (no controller yet)".into())
        };
        rows.push(vec![
            cp.name,
            cp.spec.replicas.to_string(),
            cp.spec.version.to_string(),
            n.to_string(),
            state,
        ]);
    }
    print!("{}", status::columns(&rows));
    Ok(())
}

/// Writes a client certificate for `name` signed by its CA, the key (0600) and the CA
/// bundle into `out` (0700), and prints how to use them.
fn credentials(ctx: &Ctx, name: &str, out: &Path, cn: &str, lifetime: Span) -> Result<()> {
    let cp = ctx.store.get_control_plane(name)?;
    let Some(stored) = ctx.store.certificate_authority(&cp)? else {
        bail!("{name} was created with --insecure-plaintext: its members take no certificates (and check none)");
    };
    let ca = quorum_pki::Ca::from_pem(name, &stored.cert_pem, &stored.key_pem)?;
    let now = access::now_unix_s();
    let wanted = now.saturating_add(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX));
    let not_after = wanted.min(ca.not_after_unix_s());
    let id = ca.issue_client(cn, now, not_after)?;
    quorum_pki::create_private_dir(out)
        .with_context(|| format!("cannot create {}", out.display()))?;
    let files = [
        ("ca.crt", ca.cert_pem()),
        ("client.crt", id.cert_pem.as_str()),
        ("client.key", id.key_pem.as_str()),
    ];
    for (file, pem) in files {
        let path = out.join(file);
        quorum_pki::write_private(&path, pem.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let endpoints = ctx.store.machines(name)?;
    let endpoints: Vec<String> = endpoints
        .iter()
        .filter(|m| !m.deleting)
        .map(|m| m.client_url())
        .collect();
    let d = out.display();
    println!(
        "{name}: wrote {d}/ca.crt, {d}/client.crt and {d}/client.key (CN {cn:?}, valid until {})",
        quorum_pki::format_unix_s(not_after)
    );
    println!();
    println!(
        "  etcdctl --endpoints {} --cacert {d}/ca.crt --cert {d}/client.crt --key {d}/client.key endpoint health",
        if endpoints.is_empty() { "https://ADDRESS:2379".to_string() } else { endpoints.join(",") }
    );
    println!();
    println!(
        "Clients should follow `quorum status {name} -o json` (endpoints) as members are replaced."
    );
    Ok(())
}
