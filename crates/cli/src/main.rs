//! The `quorum` command line. Everything here is the binary's edge: it parses input,
//! checks it against the core's rules, writes the store, and prints.

mod demo;
mod manifest;
mod status;
mod wait;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use quorum_controller::{Config, Controller};
use quorum_core::{
    validate_name, validate_spec, validate_spec_change, ControlPlane, ControlPlaneSpec,
    RolloutStrategy, Version,
};
use quorum_etcd::Etcd;
use quorum_provider::{default_etcd_dir, etcd_binary, installed_versions, LocalProvider};
use quorum_store::Store;
use std::path::PathBuf;
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
scripts/install.sh puts them there.";

#[derive(Parser)]
#[command(name = "quorum", version, about = ABOUT, after_help = AFTER_HELP)]
struct Cli {
    /// State directory (the store and the local machines).
    #[arg(long, global = true, env = "QUORUM_HOME", value_name = "DIR")]
    home: Option<PathBuf>,
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
    #[command(after_help = "Example: quorum create prod --replicas 3 --version 3.4.23 --wait")]
    Create {
        /// Lowercase letters, digits and '-'.
        name: String,
        /// Number of etcd members: 1, 3, 5 or 7.
        #[arg(long, default_value_t = 3)]
        replicas: u32,
        /// etcd version; must be installed (see `quorum versions`).
        #[arg(long)]
        version: Version,
        /// 1: add a new member before removing an old one (default); 0: remove first.
        #[arg(long, default_value_t = 1)]
        max_surge: u32,
        /// Accept an even replica count.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitArgs,
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
        name: String,
        #[arg(long)]
        version: Version,
        /// Record the change even if a member is unreachable (quorum still refuses every unsafe step).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Change the number of members.
    #[command(after_help = "Example: quorum scale prod --replicas 5 --wait")]
    Scale {
        name: String,
        #[arg(long)]
        replicas: u32,
        /// Accept an even count, or a change while a member is unreachable.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Show machines, members, health, conditions and client endpoints.
    Status {
        name: String,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// List the control planes.
    List,
    /// Delete a control plane: stop and remove every machine and its data.
    Delete {
        name: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Run the reconcile loop in the foreground for every control plane (Ctrl-C stops it;
    /// the machines keep running).
    Controller,
    /// Pause or resume the reconciliation of one control plane.
    Pause {
        name: String,
        /// Resume instead of pausing.
        #[arg(long)]
        resume: bool,
    },
    /// List the installed etcd versions.
    Versions,
    /// In a fresh temporary home: create 3 members at etcd 3.4.23, write keys, upgrade to
    /// 3.5.1 with progress, verify every key, report timings, clean up.
    Demo(demo::DemoArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("QUORUM_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(if matches!(cli.command, Command::Controller) {
            "info"
        } else {
            "warn"
        })
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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

fn home(cli_home: Option<PathBuf>) -> PathBuf {
    cli_home.unwrap_or_else(|| quorum_provider::data_home().join("quorum").join("state"))
}

struct Ctx {
    home: PathBuf,
    store: Store,
    provider: LocalProvider,
    etcd: Etcd,
}

impl Ctx {
    fn open(home: PathBuf) -> Result<Ctx> {
        let store = Store::open(&home)?;
        let provider = LocalProvider::new(&home, default_etcd_dir());
        Ok(Ctx {
            home,
            store,
            provider,
            etcd: Etcd::default(),
        })
    }

    async fn wait(
        &self,
        name: &str,
        goal: wait::Goal,
        w: &WaitArgs,
        after_event: i64,
    ) -> Result<()> {
        if w.wait {
            wait::wait(
                &self.store,
                &self.provider,
                &self.etcd,
                name,
                goal,
                w.timeout,
                after_event,
            )
            .await?;
        }
        Ok(())
    }
}

async fn run(cli: Cli) -> Result<()> {
    let home = home(cli.home);
    match cli.command {
        Command::Create {
            name,
            replicas,
            version,
            max_surge,
            force,
            wait,
        } => {
            let spec = ControlPlaneSpec {
                replicas,
                version,
                rollout: RolloutStrategy { max_surge },
                paused: false,
            };
            let mut ctx = Ctx::open(home)?;
            create(&mut ctx, &name, spec, force)?;
            ctx.wait(&name, wait::Goal::Converged, &wait, 0).await
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
            let mut ctx = Ctx::open(home)?;
            let name = m.metadata.name.clone();
            let after = ctx.store.last_event_id(&name)?;
            if ctx.store.control_plane(&name)?.is_some() {
                change(&mut ctx, &name, force, |_| m.spec.clone()).await?;
            } else {
                create(&mut ctx, &name, m.spec, force)?;
            }
            ctx.wait(&name, wait::Goal::Converged, &wait, after).await
        }
        Command::Upgrade {
            name,
            version,
            force,
            wait,
        } => {
            let mut ctx = Ctx::open(home)?;
            let after = ctx.store.last_event_id(&name)?;
            change(&mut ctx, &name, force, |s| ControlPlaneSpec {
                version,
                ..s.clone()
            })
            .await?;
            ctx.wait(&name, wait::Goal::Converged, &wait, after).await
        }
        Command::Scale {
            name,
            replicas,
            force,
            wait,
        } => {
            let mut ctx = Ctx::open(home)?;
            let after = ctx.store.last_event_id(&name)?;
            change(&mut ctx, &name, force, |s| ControlPlaneSpec {
                replicas,
                ..s.clone()
            })
            .await?;
            ctx.wait(&name, wait::Goal::Converged, &wait, after).await
        }
        Command::Pause { name, resume } => {
            let mut ctx = Ctx::open(home)?;
            let mut spec = ctx.store.get_control_plane(&name)?.spec;
            spec.paused = !resume;
            ctx.store.update_spec(&name, &spec)?;
            println!(
                "{name}: {}",
                if resume {
                    "resumed"
                } else {
                    "paused: quorum takes no step on it until `quorum pause --resume`"
                }
            );
            Ok(())
        }
        Command::Status { name, output } => {
            let ctx = Ctx::open(home)?;
            let cp = ctx.store.get_control_plane(&name)?;
            let s = status::live(&ctx.store, &ctx.provider, &ctx.etcd, &cp).await?;
            match output {
                Output::Table => print!("{}", status::render_table(&s)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&s)?),
                Output::Yaml => print!("{}", serde_yaml::to_string(&s)?),
            }
            Ok(())
        }
        Command::List => {
            let ctx = Ctx::open(home)?;
            let cps = ctx.store.control_planes()?;
            if cps.is_empty() {
                println!("No control planes in {}. Create one with `quorum create NAME --version 3.4.23`.", ctx.home.display());
                return Ok(());
            }
            let mut rows = vec![vec![
                "NAME".to_string(),
                "REPLICAS".into(),
                "VERSION".into(),
                "MACHINES".into(),
                "STATE".into(),
            ]];
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
        Command::Delete { name, wait } => {
            let ctx = Ctx::open(home.clone())?;
            ctx.store.get_control_plane(&name)?;
            let after = ctx.store.last_event_id(&name)?;
            println!("{name}: marked for deletion; stopping and removing its machines");
            // Teardown needs no quorum: do it here, so it works without a controller (a
            // running controller doing the same steps is harmless: each is idempotent).
            teardown(&home, &name).await?;
            ctx.wait(&name, wait::Goal::Gone, &wait, after).await?;
            println!("{name}: deleted");
            Ok(())
        }
        Command::Controller => {
            let cfg = Config::new(&home, default_etcd_dir());
            let mut c = Controller::new(cfg)
                .with_context(|| format!("opening the store in {}", home.display()))?;
            let stop = Arc::new(AtomicBool::new(false));
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
                "quorum controller: home {} (Ctrl-C to stop; machines keep running)",
                home.display()
            );
            c.run(stop).await;
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
    }
}

/// Checks and stores a new control plane.
fn create(ctx: &mut Ctx, name: &str, spec: ControlPlaneSpec, force: bool) -> Result<()> {
    validate_name(name)?;
    validate_spec(&spec, force)?;
    etcd_binary(ctx.provider.etcd_dir(), spec.version)?;
    let cp = ControlPlane {
        name: name.to_string(),
        spec: spec.clone(),
        deleting: false,
    };
    ctx.store
        .create_control_plane(&cp, quorum_controller::now_ms())?;
    println!(
        "{name}: created: {} replicas at etcd {}{}",
        spec.replicas,
        spec.version,
        if spec.version.has_known_data_inconsistency_bug() {
            " (warning: this version has a known data inconsistency bug, fixed in 3.5.3)"
        } else {
            ""
        }
    );
    Ok(())
}

/// Checks a spec change against the live cluster and stores it.
async fn change(
    ctx: &mut Ctx,
    name: &str,
    force: bool,
    f: impl FnOnce(&ControlPlaneSpec) -> ControlPlaneSpec,
) -> Result<()> {
    let cp = ctx.store.get_control_plane(name)?;
    if cp.deleting {
        bail!("{name} is being deleted; create it again once `quorum list` no longer shows it");
    }
    let new = f(&cp.spec);
    if new == cp.spec {
        println!(
            "{name}: unchanged (already {} replicas at etcd {})",
            new.replicas, new.version
        );
        return Ok(());
    }
    validate_spec(&new, force)?;
    let lowest = ctx.store.machines(name)?.iter().map(|m| m.version).min();
    // The version rules that need no cluster first: they give the clearest answer.
    validate_spec_change(&cp.spec, &new, lowest, None, force)?;
    etcd_binary(ctx.provider.etcd_dir(), new.version)?;
    let s = status::live(&ctx.store, &ctx.provider, &ctx.etcd, &cp).await?;
    let unhealthy: Vec<&str> = s
        .machines
        .iter()
        .filter(|m| m.role != "none" && !m.healthy && !m.deleting)
        .map(|m| m.name.as_str())
        .collect();
    if !force && !s.machines.is_empty() && !unhealthy.is_empty() {
        bail!(
            "{name}: {} not healthy or unreachable (see `quorum status {name}`); fix that first, or pass --force to record the change anyway (quorum still refuses every unsafe step)",
            unhealthy.join(", ")
        );
    }
    let cluster_version = s
        .cluster_version
        .as_deref()
        .and_then(|v| v.parse::<Version>().ok());
    if new.version != cp.spec.version
        && cluster_version.is_none()
        && !force
        && !s.machines.is_empty()
    {
        bail!("{name}: cannot read the cluster version (no leader answered), so the version change cannot be checked; bring the control plane back first, or pass --force");
    }
    validate_spec_change(&cp.spec, &new, lowest, cluster_version, force)?;
    ctx.store.update_spec(name, &new)?;
    if new.version != cp.spec.version {
        println!(
            "{name}: upgrade recorded: etcd {} -> {} (member by member)",
            cp.spec.version, new.version
        );
        if new.version.has_known_data_inconsistency_bug() {
            println!(
                "warning: etcd {} has a known data inconsistency bug, fixed in 3.5.3",
                new.version
            );
        }
    }
    if new.replicas != cp.spec.replicas {
        println!(
            "{name}: scale recorded: {} -> {} replicas",
            cp.spec.replicas, new.replicas
        );
    }
    if new.rollout != cp.spec.rollout || new.paused != cp.spec.paused {
        println!("{name}: rollout settings recorded");
    }
    Ok(())
}

/// Drives the teardown of a control plane marked deleting until it is gone.
async fn teardown(home: &std::path::Path, name: &str) -> Result<()> {
    // Bounded: stopping a machine takes at most its grace period plus the SIGKILL wait.
    const TEARDOWN_LIMIT: Duration = Duration::from_secs(120);
    let mut c = Controller::new(Config::new(home, default_etcd_dir()))?;
    let mut store = Store::open(home)?;
    match store.mark_control_plane_deleting(name) {
        Ok(()) | Err(quorum_store::StoreError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let start = std::time::Instant::now();
    while start.elapsed() < TEARDOWN_LIMIT {
        let Some(cp) = store.control_plane(name)? else {
            return Ok(());
        };
        if c.reconcile(&cp).await? != quorum_controller::Outcome::Acted {
            tokio::time::sleep(Duration::from_millis(quorum_controller::BUSY_POLL_MS)).await;
        }
    }
    Err(anyhow!(
        "{name}: teardown did not finish within {}s; see `quorum status {name}`",
        TEARDOWN_LIMIT.as_secs()
    ))
}
