//! Test support: a private home, a private loopback subnet, the real `quorum` binary,
//! a controller process, and cleanup by PID of everything started.

#![allow(dead_code)]

pub mod fleet;
pub mod patterns;
pub use quorum_bench::hostnet as network;
pub mod workload;

use etcd_client::{Client, ConnectOptions, GetOptions};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const OLD: &str = "3.4.23";
pub const NEW: &str = "3.5.30";

pub struct Env {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    subnet: String,
    controller: Option<Child>,
    /// `--store` for every command (a management etcd), or the embedded store.
    pub store_url: Option<String>,
}

impl Env {
    /// A fresh home with a subnet derived from the test's name, so parallel tests never
    /// share an address (allocation also skips any address in use).
    pub fn new(test: &str) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let mut h = DefaultHasher::new();
        (test, std::process::id()).hash(&mut h);
        let x = h.finish();
        let subnet = format!("{}.{}", 20 + x % 200, (x >> 8) % 200);
        Env {
            dir,
            home,
            subnet,
            controller: None,
            store_url: None,
        }
    }

    /// The subnet `A.B` of this env's addresses (machines use 127.A.B.2 and up).
    pub fn subnet(&self) -> &str {
        &self.subnet
    }

    /// The store this env's commands use.
    pub fn store_location(&self) -> quorum_store::StoreLocation {
        quorum_store::StoreLocation::parse(self.store_url.as_deref().unwrap_or(""), None).unwrap()
    }

    /// Opens the store this env's commands use.
    pub fn store(&self) -> quorum_store::Store {
        quorum_store::Store::connect(&self.store_location(), &self.home).unwrap()
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_quorum"));
        c.args(args)
            .env("QUORUM_HOME", &self.home)
            .env("QUORUM_SUBNET", &self.subnet)
            // No test waits on an hourly snapshot, and none should meet one at hh:00
            // (the snapshot tests set their own schedules).
            .env("QUORUM_BACKUP_SCHEDULE", "off")
            .env_remove("QUORUM_LOG")
            .env_remove("QUORUM_SECRETS_KEY_FILE")
            .stdin(Stdio::null());
        match &self.store_url {
            Some(u) => c.env("QUORUM_STORE", u),
            None => c.env_remove("QUORUM_STORE"),
        };
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run quorum")
    }

    /// Runs and requires success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "quorum {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs and requires failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "quorum {args:?} should have failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn start_controller(&mut self) {
        self.start_controller_with(&[]);
    }

    /// Starts a controller with extra environment (for example `FAILPOINTS`).
    pub fn start_controller_with(&mut self, vars: &[(&str, &str)]) {
        assert!(self.controller.is_none(), "one controller per test env");
        let log = std::fs::File::create(self.dir.path().join(format!(
            "controller-{}.log",
            Instant::now().elapsed().as_nanos()
        )))
        .unwrap();
        let metrics = self.metrics_addr();
        let mut cmd = self.cmd(&["controller", "--metrics-addr", &metrics]);
        cmd.env_remove("FAILPOINTS");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn controller");
        self.controller = Some(child);
    }

    /// Kills the controller with SIGKILL (a crash), by PID.
    pub fn kill_controller(&mut self) {
        if let Some(mut c) = self.controller.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `create NAME --replicas N --version V --wait`, within two minutes.
    pub fn create_and_wait(&self, name: &str, replicas: u32, version: &str) -> String {
        let replicas = replicas.to_string();
        self.ok(&[
            "create",
            name,
            "--replicas",
            &replicas,
            "--version",
            version,
            "--wait",
            "--timeout",
            "120s",
        ])
    }

    /// Stops the controller with SIGTERM, by PID, and returns its exit code (it must
    /// exit within 30 s).
    pub fn terminate_controller(&mut self) -> Option<i32> {
        let c = self.controller.as_ref()?;
        let pid = libc::pid_t::try_from(c.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) on the pid of a child this env spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "SIGTERM");
        let code = self.controller_exit(Duration::from_secs(30));
        assert!(self.controller.is_none(), "the controller ignored SIGTERM");
        code
    }

    /// Where this env's controller serves metrics: .1 of its own subnet (machines start at .2).
    pub fn metrics_addr(&self) -> String {
        format!("127.{}.1:9479", self.subnet)
    }

    /// GET /metrics from this env's controller, waiting (with a deadline) for it to answer.
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = std::net::TcpStream::connect(self.metrics_addr()) {
                c.write_all(b"GET /metrics HTTP/1.1\r\nHost: q\r\n\r\n")
                    .unwrap();
                let mut s = String::new();
                c.read_to_string(&mut s).unwrap();
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the controller's metrics endpoint never answered"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the controller process exits by itself; returns its exit code.
    pub fn controller_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let c = self.controller.as_mut()?;
        loop {
            if let Some(st) = c.try_wait().expect("try_wait") {
                self.controller = None;
                return st.code();
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until no controller heartbeat on this home is recent.
    pub fn wait_controller_heartbeat_stale(&self) {
        let store = self.store();
        let deadline = Instant::now() + Duration::from_secs(30);
        while store
            .last_controller_heartbeat()
            .unwrap()
            .is_some_and(|beat| {
                quorum_clock::now_ms() - beat.at_ms < quorum_controller::CONTROLLER_STALE_MS
            })
        {
            assert!(Instant::now() < deadline, "the heartbeat never went stale");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn status(&self, name: &str) -> serde_json::Value {
        let out = self.ok(&["status", name, "-o", "json"]);
        serde_json::from_str(&out).expect("status json")
    }

    /// The published endpoints of `name`, with the credentials a client needs.
    pub fn endpoints(&self, name: &str) -> Cluster {
        let endpoints = self.status(name)["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        Cluster {
            endpoints,
            tls: self.client_tls(name),
        }
    }

    /// A client certificate for `name` (from its CA in the store), or `None` for a
    /// plaintext control plane.
    pub fn client_tls(&self, name: &str) -> Option<quorum_etcd::ClientTls> {
        let store = self.store();
        let cp = store.get_control_plane(name).unwrap();
        quorum_controller::access::open(&store, &cp, "quorum-test", Default::default())
            .unwrap()
            .client
            .clone()
    }

    /// Waits (with a deadline) until `cond` holds for the status of `name`.
    pub fn wait_status(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.status(name);
            if cond(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last status:\n{s:#}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stored events of a control plane, read from the store file.
    pub fn event_kinds(&self, name: &str) -> Vec<String> {
        let store = self.store();
        store
            .events_after(name, 0, 100_000)
            .unwrap()
            .into_iter()
            .filter(|e| e.ok)
            .map(|e| e.kind.to_string())
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.kill_controller();
        if std::thread::panicking() {
            // Show what the controller saw; the machines' logs are in the home, which is
            // kept (machines are still stopped below).
            let log =
                std::fs::read_to_string(self.dir.path().join("controller.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "--- controller log (last 40 lines, newest first):\n{}",
                tail.join("\n")
            );
            eprintln!("--- kept {}", self.dir.path().display());
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
            let _ = dir.keep();
        }
        // Every machine this test started, by the PID in its pid file.
        let provider =
            quorum_provider::LocalProvider::new(&self.home, quorum_provider::default_etcd_dir());
        for m in provider.list() {
            let _ = provider.kill(&m);
        }
    }
}

/// Where a client connects, and how.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub endpoints: Vec<String>,
    pub tls: Option<quorum_etcd::ClientTls>,
}

impl Cluster {
    pub async fn connect(&self) -> Result<Client, etcd_client::Error> {
        let mut opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        if let Some(t) = &self.tls {
            opts = opts.with_tls(t.grpc_options());
        }
        Client::connect(&self.endpoints, Some(opts)).await
    }
}

/// An env whose commands use a fresh 3-member management etcd on its own addresses
/// (`127.A.B.252..254`; machines use `.2` and up), once it answers.
pub fn env_on_management_etcd(test: &str) -> (Env, quorum_provider::management::ManagementEtcd) {
    let mut env = Env::new(test);
    let (a, b) = env.subnet().split_once('.').unwrap();
    let (a, b): (u8, u8) = (a.parse().unwrap(), b.parse().unwrap());
    let addrs: Vec<std::net::Ipv4Addr> = (252..=254)
        .map(|d| std::net::Ipv4Addr::new(127, a, b, d))
        .collect();
    let mgmt = quorum_provider::management::ManagementEtcd::start(
        &env.dir.path().join("mgmt"),
        &quorum_provider::default_etcd_dir(),
        NEW.parse().unwrap(),
        &addrs,
    )
    .expect("start the management etcd");
    env.store_url = Some(mgmt.store_url("quorum"));
    let location = env.store_location();
    let deadline = Instant::now() + Duration::from_secs(30);
    while quorum_store::Store::connect(&location, &env.home).is_err() {
        assert!(
            Instant::now() < deadline,
            "the management etcd never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (env, mgmt)
}

/// What a command printed, stdout then stderr.
pub fn printed(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A count from the environment variable `name` (a test's rounds or trials), else
/// `default`.
pub fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Connects with `opts` and tries a linearizable read, within a deadline.
pub fn try_read(endpoints: &[String], opts: ConnectOptions) -> Result<(), String> {
    rt().block_on(async {
        let opts = opts
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(2));
        let attempt = async {
            let mut c = Client::connect(endpoints, Some(opts))
                .await
                .map_err(|e| e.to_string())?;
            c.get("probe", None).await.map_err(|e| e.to_string())?;
            Ok::<(), String>(())
        };
        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(r) => r,
            Err(_) => Err("no answer within 5 s".into()),
        }
    })
}

/// Writes `n` keys with unique values; returns them.
pub fn write_keys(cluster: &Cluster, prefix: &str, n: usize) -> Vec<(String, String)> {
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let (k, v) = (
                format!("{prefix}{i:05}"),
                format!("v{i}-{}", std::process::id()),
            );
            tokio::time::timeout(Duration::from_secs(5), c.put(k.clone(), v.clone(), None))
                .await
                .expect("put timed out")
                .expect("put");
            out.push((k, v));
        }
        out
    })
}

/// Reads every key under `prefix` (linearizable) and requires exactly `want`.
pub fn assert_keys(cluster: &Cluster, prefix: &str, want: &[(String, String)]) {
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        let resp = tokio::time::timeout(
            Duration::from_secs(10),
            c.get(prefix, Some(GetOptions::new().with_prefix())),
        )
        .await
        .expect("get timed out")
        .expect("get");
        let got: Vec<(String, String)> = resp
            .kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key_str().unwrap().to_string(),
                    kv.value_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(got.len(), want.len(), "key count");
        assert_eq!(got, want, "keys and values");
    });
}

pub fn machine_versions(s: &serde_json::Value) -> Vec<String> {
    s["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["runningVersion"].as_str().unwrap_or("none").to_string())
        .collect()
}

/// Watches a control plane's quorum from outside, as a client would: every sample asks
/// every machine's endpoint for its status and the leader for the member list, and
/// records a violation when fewer voters answer than a quorum of the voters (three
/// samples in a row, so one slow answer on a loaded machine is not a violation).
pub struct QuorumWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<(u64, Vec<String>)>>,
}

/// Consecutive bad samples that make a violation.
const WATCH_BAD_SAMPLES: u32 = 3;

impl QuorumWatch {
    pub fn start(env: &Env, cp: &str) -> QuorumWatch {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (home, location) = (env.home.clone(), env.store_location());
        let (cp, stop2) = (cp.to_string(), stop.clone());
        let handle = std::thread::spawn(move || {
            let store = quorum_store::Store::connect(&location, &home).unwrap();
            let timeouts = quorum_etcd::Timeouts {
                connect_ms: 300,
                observe_ms: 1000,
                change_ms: 1000,
            };
            let control_plane = store.get_control_plane(&cp).unwrap();
            let open = |c: &quorum_core::ControlPlane| {
                quorum_controller::access::open(&store, c, "quorum-watch", timeouts).unwrap()
            };
            let mut access = open(&control_plane);
            let rt = rt();
            let (mut samples, mut bad_run, mut leaderless_since) = (0u64, 0u32, None::<Instant>);
            let mut violations = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                // Credentials follow the control plane (a CA rotation changes them).
                if let Ok(Some(now)) = store.control_plane(&cp) {
                    if !access.fresh(&now, quorum_clock::now_unix_s()) {
                        access = open(&now);
                    }
                }
                let etcd = access.etcd.clone();
                let urls: Vec<String> = store
                    .machines(&cp)
                    .unwrap_or_default()
                    .iter()
                    .map(|m| m.client_url())
                    .collect();
                let view = rt.block_on(etcd.observe(&urls));
                samples += 1;
                match &view.members {
                    None => {
                        let since = *leaderless_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_secs(3) {
                            violations.push(format!("no leader for {:?}", since.elapsed()));
                            leaderless_since = None;
                        }
                    }
                    Some(members) => {
                        leaderless_since = None;
                        let voters: Vec<u64> = members
                            .iter()
                            .filter(|m| !m.is_learner)
                            .map(|m| m.id)
                            .collect();
                        let answering = view
                            .statuses
                            .values()
                            .filter_map(|r| r.as_ref().ok())
                            .filter(|s| voters.contains(&s.member_id) && s.alarms.is_empty())
                            .count();
                        if answering < voters.len() / 2 + 1 {
                            bad_run += 1;
                            if bad_run == WATCH_BAD_SAMPLES {
                                violations.push(format!(
                                    "{answering} of {} voters answering",
                                    voters.len()
                                ));
                            }
                        } else {
                            bad_run = 0;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (samples, violations)
        });
        QuorumWatch {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops watching; returns (samples, violations).
    pub fn finish(mut self) -> (u64, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

/// Requires exactly the stored machines to exist: as members (matched by peer URL, all
/// voters), as machine directories, and nothing else.
pub fn assert_no_orphans(env: &Env, cp: &str) {
    let store = env.store();
    let machines = store.machines(cp).unwrap();
    let urls: Vec<String> = machines.iter().map(|m| m.client_url()).collect();
    let control_plane = store.get_control_plane(cp).unwrap();
    let etcd =
        quorum_controller::access::open(&store, &control_plane, "quorum-test", Default::default())
            .unwrap()
            .etcd;
    // One observation may meet an election (a rollout just ended, a machine under
    // load): the member list is waited for, with a deadline.
    let deadline = Instant::now() + Duration::from_secs(30);
    let members = loop {
        let view = rt().block_on(etcd.observe(&urls));
        if let Some(members) = view.members {
            break members;
        }
        assert!(
            Instant::now() < deadline,
            "no leader answered within 30 s: {:?}",
            view.statuses
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        members.len(),
        machines.len(),
        "members {members:?} vs machines {machines:?}"
    );
    for m in &machines {
        assert!(
            members
                .iter()
                .any(|x| x.peer_urls.contains(&m.peer_url()) && !x.is_learner),
            "{} has no voting member",
            m.name
        );
    }
    let provider =
        quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir());
    let mut names: Vec<String> = machines.iter().map(|m| m.name.clone()).collect();
    names.sort();
    // This control plane's directories (machines are named `<cp>-<serial>`).
    let dirs: Vec<String> = provider
        .list()
        .into_iter()
        .filter(|d| d.rsplit_once('-').is_some_and(|(of, _)| of == cp))
        .collect();
    assert_eq!(dirs, names, "machine directories vs records");
}

/// The history in one line per event (with its time from the first), for messages.
pub fn history(events: &[quorum_store::Event]) -> String {
    let first_ms = events.first().map_or(0, |e| e.at_ms);
    events
        .iter()
        .map(|e| {
            format!(
                "{} +{:.1}s {} {} {:?}: {}",
                e.id,
                (e.at_ms - first_ms) as f64 / 1000.0,
                e.kind,
                e.outcome.as_str(),
                e.machine,
                e.message
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes a manifest of a 1-member control plane `name` at the newest version that
/// snapshots on `schedule`, keeping the newest `last`, and test-restores the newest
/// again every second; returns its path.
pub fn scheduled_backup_manifest(env: &Env, name: &str, schedule: &str, last: u32) -> PathBuf {
    let path = env.dir.path().join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {{name: {name}}}\nspec:\n  replicas: 1\n  version: \"{NEW}\"\n  backup: {{schedule: \"{schedule}\", retention: {{last: {last}, days: 0}}, verifyEvery: 1s}}\n"
        ),
    )
    .unwrap();
    path
}

/// The ids of `cp`'s snapshot records and the snapshot files in its backups
/// directory, each sorted: equal when every file has its record and every record its
/// file.
pub fn snapshot_records_and_files(
    env: &Env,
    cp: &str,
) -> (Vec<quorum_core::SnapshotRecord>, Vec<String>, Vec<String>) {
    let recs = env.store().snapshots(cp).unwrap();
    let mut ids: Vec<String> = recs.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    let mut files: Vec<String> = std::fs::read_dir(env.home.join("backups").join(cp))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .filter(|n| n.ends_with(".db"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    (recs, ids, files)
}

/// How many steps of `kind` in `cp`'s history succeeded.
pub fn ok_steps(env: &Env, cp: &str, kind: &str) -> usize {
    env.store()
        .events_after(cp, 0, 10_000)
        .unwrap()
        .iter()
        .filter(|e| e.kind.to_string() == kind && e.outcome.as_str() == "ok")
        .count()
}
