//! `quorum bench failover`: how long the controllers of a shared store go without a
//! leader when the leading replica dies.
//!
//! In a throwaway directory: a 3-member management etcd on loopback, `--replicas`
//! controller processes (this binary) on it, then `--runs` times: SIGKILL the leading
//! replica at a random point of its renewal cycle, time until a standby's first write as
//! leader (its heartbeat, fenced with the new token; it reconciles right after), and
//! restart the killed one as a standby.
//! Everything started is stopped by PID at the end, whatever ends the run.

use anyhow::{anyhow, bail, Context, Result};
use quorum_clock::now_ms;
use quorum_provider::management::ManagementEtcd;
use quorum_provider::{default_etcd_dir, installed_versions};
use quorum_store::{Store, StoreLocation};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct FailoverArgs {
    /// Leader kills to time.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// The controllers' leadership lease (`controller --lease-ttl`).
    #[arg(long, default_value = "4s", value_parser = quorum_ops::parse_lease_ttl)]
    lease_ttl: Duration,
    /// Controller processes sharing the store.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=5))]
    replicas: u32,
    /// Output: table or json.
    #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
    output: String,
    /// Keep the throwaway directory (logs of every replica and etcd member).
    #[arg(long)]
    keep: bool,
}

/// How long a takeover may take before the run is called failed: far above any TTL.
const TAKEOVER_LIMIT_MS: u64 = 120_000;

struct Replica {
    id: String,
    child: Child,
}

/// Everything the run started; stopped by PID when dropped.
struct Fleet {
    dir: PathBuf,
    replicas: Vec<Replica>,
    mgmt: Option<ManagementEtcd>,
    /// Set when the command is interrupted: every wait gives up.
    stop: Arc<AtomicBool>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for r in &mut self.replicas {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
        if let Some(m) = self.mgmt.take() {
            m.destroy();
        }
    }
}

impl Fleet {
    fn spawn(&self, id: &str, store_url: &str, ttl: Duration) -> Result<Replica> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{id}.log")))?;
        let child = Command::new(std::env::current_exe()?)
            .args([
                "controller",
                "--home",
                &self.dir.join("home").display().to_string(),
                "--store",
                store_url,
                "--lease-ttl",
                &format!("{}ms", ttl.as_millis()),
                "--identity",
                id,
                "--metrics-addr",
                "off",
            ])
            .env("QUORUM_LOG", "info")
            .env_remove("FAILPOINTS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting a controller replica")?;
        Ok(Replica {
            id: id.to_string(),
            child,
        })
    }
}

pub async fn run(args: FailoverArgs) -> Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "quorum-bench-failover-{}-{}",
        std::process::id(),
        now_ms()
    ));
    quorum_pki::create_private_dir(&dir)?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let stop = Arc::new(AtomicBool::new(false));
    // The measurement blocks (process waits, store calls): it runs on a thread of its
    // own that owns everything it starts, so a signal only has to ask it to stop.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (d2, s2) = (dir.clone(), stop.clone());
    let params = (args.runs, args.lease_ttl, args.replicas);
    let worker = std::thread::spawn(move || {
        let mut fleet = Fleet {
            dir: d2,
            replicas: vec![],
            mgmt: None,
            stop: s2,
        };
        let r = measure(params, &mut fleet);
        drop(fleet);
        let _ = tx.send(r);
    });
    let interrupted = tokio::select! {
        r = rx => Ok(r.unwrap_or_else(|_| Err(anyhow!("the measurement thread panicked")))),
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow!("terminated")),
        _ = hup.recv() => Err(anyhow!("hung up")),
    };
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || worker.join()).await;
    if args.keep {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = interrupted??;
    print_report(&args, &report)
}

struct Report {
    version: String,
    takeovers_ms: Vec<i64>,
}

fn measure((runs, lease_ttl, replicas): (u32, Duration, u32), fleet: &mut Fleet) -> Result<Report> {
    let version = installed_versions(&default_etcd_dir())
        .into_iter()
        .max()
        .ok_or_else(|| anyhow!("no etcd installed; run scripts/install.sh"))?;
    // A loopback /24 of our own, away from 127.0.x.x.
    let x = (std::process::id() as u64 ^ now_ms() as u64).wrapping_mul(2_654_435_761);
    let (a, b) = (16 + (x >> 24) % 200, (x >> 8) % 250);
    let addrs: Vec<Ipv4Addr> = (252..=254)
        .map(|d| Ipv4Addr::new(127, a as u8, b as u8, d))
        .collect();
    eprintln!(
        "management etcd {version} on {}..254; {} replicas, lease {} ms, {} runs",
        addrs[0],
        replicas,
        lease_ttl.as_millis(),
        runs
    );
    let mgmt = ManagementEtcd::start(
        &fleet.dir.join("mgmt"),
        &default_etcd_dir(),
        version,
        &addrs,
    )?;
    let url = mgmt.store_url("quorum");
    fleet.mgmt = Some(mgmt);
    let location = StoreLocation::parse(&url, None).map_err(|e| anyhow!(e))?;
    let store = connect(&location, fleet)?;
    for i in 1..=replicas {
        let r = fleet.spawn(&format!("r{i}"), &url, lease_ttl)?;
        fleet.replicas.push(r);
    }
    let mut takeovers_ms = Vec::new();
    let mut leader = wait_new_leader(&store, None, Instant::now(), &fleet.stop)?;
    for run in 1..=runs {
        // Every replica is up and the standbys are standing by before the kill.
        wait_standbys(fleet, replicas as usize, &leader)?;
        let (new, ms) = kill_leader(fleet, &store, &leader, run, lease_ttl)?;
        eprintln!("run {run:>3}: {leader} killed, {new} led after {ms} ms");
        takeovers_ms.push(ms);
        // The killed replica comes back as a standby.
        restart(fleet, &leader, &url, lease_ttl)?;
        leader = new;
    }
    Ok(Report {
        version: version.to_string(),
        takeovers_ms,
    })
}

/// Kills the replica that leads (`leader`) at a moment of its lease's renewal cycle
/// that varies with `run`, and waits for another to take over; the new leader, and
/// the milliseconds from the kill to its first heartbeat.
fn kill_leader(
    fleet: &mut Fleet,
    store: &Store,
    leader: &str,
    run: u32,
    lease_ttl: Duration,
) -> Result<(String, i64)> {
    let idx = replica_index(fleet, leader)?;
    // Kill at a random moment of the lease's renewal cycle, once the leader has
    // renewed at least once (right after a takeover its lease is fresh, which
    // would measure only the worst case).
    let phase_ms = phase_ms(run, lease_ttl);
    std::thread::sleep(Duration::from_millis(phase_ms));
    let killed_at_ms = now_ms();
    let killed = Instant::now();
    fleet.replicas[idx].child.kill()?;
    fleet.replicas[idx].child.wait()?;
    let new = wait_new_leader(store, Some(leader), killed, &fleet.stop)?;
    let beat = store
        .last_controller_heartbeat()?
        .ok_or_else(|| anyhow!("no heartbeat after the takeover"))?;
    if beat.identity != new {
        bail!("the heartbeat is {:?}'s, the leader {new:?}", beat.identity);
    }
    Ok((new, beat.at_ms - killed_at_ms))
}

/// Starts the replica `id` again (after its kill), as a standby.
fn restart(fleet: &mut Fleet, id: &str, url: &str, lease_ttl: Duration) -> Result<()> {
    let idx = replica_index(fleet, id)?;
    fleet.replicas[idx] = fleet.spawn(id, url, lease_ttl)?;
    Ok(())
}

/// Where replica `id` is in the fleet.
fn replica_index(fleet: &Fleet, id: &str) -> Result<usize> {
    fleet
        .replicas
        .iter()
        .position(|r| r.id == id)
        .ok_or_else(|| anyhow!("the leader {id:?} is not one of ours"))
}

/// A delay in `[ttl/3, ttl)` that varies from run to run (splitmix64 of the run and
/// the process id): where in the renewal cycle the leader dies.
fn phase_ms(run: u32, ttl: Duration) -> u64 {
    let mut z =
        (u64::from(run) << 32 | u64::from(std::process::id())).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let ttl_ms = ttl.as_millis() as u64;
    ttl_ms / 3 + z % (ttl_ms - ttl_ms / 3)
}

fn connect(location: &StoreLocation, fleet: &Fleet) -> Result<Store> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Store::connect(location, &fleet.dir) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > deadline || fleet.stop.load(Ordering::Relaxed) => {
                return Err(e.into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Waits until someone other than `old` leads and has written its first heartbeat.
fn wait_new_leader(
    store: &Store,
    old: Option<&str>,
    since: Instant,
    stop: &AtomicBool,
) -> Result<String> {
    loop {
        if stop.load(Ordering::Relaxed) {
            bail!("stopped");
        }
        if let Some(l) = store.leader()? {
            let beat = store.last_controller_heartbeat()?;
            if Some(l.identity.as_str()) != old && beat.is_some_and(|b| b.identity == l.identity) {
                return Ok(l.identity);
            }
        }
        if since.elapsed() > Duration::from_millis(TAKEOVER_LIMIT_MS) {
            bail!("no new leader within {TAKEOVER_LIMIT_MS} ms");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until every replica but the leader has logged that it stands by.
fn wait_standbys(fleet: &Fleet, n: usize, leader: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = fleet
            .replicas
            .iter()
            .filter(|r| r.id != leader)
            .filter(|r| {
                std::fs::read_to_string(fleet.dir.join(format!("{}.log", r.id)))
                    .is_ok_and(|t| t.contains("standing by"))
            })
            .count();
        if ready + 1 >= n {
            return Ok(());
        }
        if Instant::now() > deadline || fleet.stop.load(Ordering::Relaxed) {
            bail!(
                "the standbys did not start within 30 s (logs in {})",
                fleet.dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn print_report(args: &FailoverArgs, r: &Report) -> Result<()> {
    let mut sorted = r.takeovers_ms.clone();
    sorted.sort_unstable();
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0
    };
    let (min, max) = (sorted[0], sorted[n - 1]);
    let ttl_ms = args.lease_ttl.as_millis() as u64;
    if args.output == "json" {
        let doc = serde_json::json!({
            "runs": n,
            "replicas": args.replicas,
            "leaseTtlMs": ttl_ms,
            "managementEtcd": r.version,
            "takeoverMs": r.takeovers_ms,
            "medianMs": median,
            "minMs": min,
            "maxMs": max,
        });
        println!("{doc:#}");
        return Ok(());
    }
    println!("failover: SIGKILL of the leading controller -> a standby's first write as leader");
    println!(
        "  runs            {n} ({} replicas, management etcd {})",
        args.replicas, r.version
    );
    println!(
        "  lease TTL       {ttl_ms} ms (renewed every {} ms)",
        ttl_ms / 3
    );
    println!("  median          {median:.0} ms");
    println!("  min / max       {min} / {max} ms");
    println!("  each run (ms)   {:?}", r.takeovers_ms);
    Ok(())
}
