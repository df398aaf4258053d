//! What the repair tests share (`repair.rs`, `repair_parts.rs`, and `ha.rs` for the
//! management etcd): a 3-member control plane with an independent client workload (its
//! own runtime and etcd client on the published endpoints, or on a fixed address such as
//! a load balancer's: unique writes, each acknowledged one read back at the end, and a
//! linearizable read after every write), and a watch that asks every voter for its status
//! every ~200 ms (a sample starts on time even while an earlier one waits on a hung
//! member) and counts the samples in which fewer than a quorum answered. Faults are done
//! to the machines' processes by PID (from `status -o json`), never by name.

#![allow(dead_code)]

use crate::common::*;
use quorum_store::Event;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `spec.remediation.unhealthyAfter` of the scenarios: small, so they run fast, but
/// above the 5 s floor so a slow answer on a loaded machine is not a failure.
pub const UNHEALTHY_AFTER_S: u64 = 6;
/// How long a repair may take once a member counts as unhealthy (the bound).
pub const REPAIR_BOUND_S: u64 = 15;
/// Creation (3 members, TLS) on a loaded machine.
pub const CREATE_TIMEOUT: &str = "120s";
/// etcd's answer to a write once a member raised NOSPACE.
pub const NOSPACE_ERROR: &str = "database space exceeded";
/// One client call of the workload.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Time between two writes of the workload: a steady load that leaves the CPU to the
/// members and the controller on a 2-core machine.
pub const WORKLOAD_PACE: Duration = Duration::from_millis(20);
/// Time between two samples of the majority watch.
pub const WATCH_PACE: Duration = Duration::from_millis(200);
/// The workload reconnects after this many failed calls in a row.
pub const RECONNECT_AFTER_FAILURES: u32 = 3;

// ---------------------------------------------------------------------------------
// Processes, by PID.

pub fn provider(env: &Env) -> quorum_provider::LocalProvider {
    quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir())
}

pub fn data_dir(env: &Env, machine: &str) -> PathBuf {
    provider(env).data_dir(machine)
}

/// Whether `pid` is alive (not a zombie) and an etcd on `data_dir`: never signal a
/// recycled pid.
pub fn is_etcd_of(pid: i32, data_dir: &Path) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, Some("Z") | Some("X") | None) {
        return false;
    }
    let want = format!("--data-dir={}", data_dir.display());
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == want.as_bytes()))
}

/// The command line of `pid`, one argument per element.
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

pub fn signal(pid: i32, sig: libc::c_int) {
    assert!(pid > 0, "never signal a process group");
    // SAFETY: kill(2) on one positive pid, checked to be the machine's etcd by callers.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
}

/// Sends `sig` to the etcd of `machine` (pid `pid`), which must be running.
pub fn signal_etcd(env: &Env, machine: &str, pid: i32, sig: libc::c_int) {
    assert!(
        is_etcd_of(pid, &data_dir(env, machine)),
        "{pid} is not the etcd of {machine}"
    );
    signal(pid, sig);
}

pub fn wait_gone(pid: i32, data: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_etcd_of(pid, data) {
        assert!(Instant::now() < deadline, "{pid} outlived SIGKILL");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The host of `machine` loses its disk: its etcd is frozen (so nothing restarts it on
/// the old data in between), its data directory removed, then the process killed.
pub fn disk_loss(env: &Env, machine: &str, pid: i32) {
    let data = data_dir(env, machine);
    signal_etcd(env, machine, pid, libc::SIGSTOP);
    std::fs::remove_dir_all(&data).expect("remove the data directory");
    signal(pid, libc::SIGKILL);
    wait_gone(pid, &data);
}

// ---------------------------------------------------------------------------------
// Status.

pub fn rows(s: &Value) -> &Vec<Value> {
    s["machines"].as_array().expect("machines")
}

pub fn row<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    rows(s).iter().find(|m| m["name"] == name)
}

pub fn names(s: &Value) -> Vec<String> {
    rows(s)
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

pub fn pid_of(s: &Value, name: &str) -> i32 {
    let pid = row(s, name).and_then(|m| m["pid"].as_i64());
    i32::try_from(pid.unwrap_or_else(|| panic!("{name} has no pid: {s:#}"))).unwrap()
}

/// A follower that is not leaving: faults go to a follower, so the timings do not
/// include an election.
pub fn follower(s: &Value) -> String {
    rows(s)
        .iter()
        .find(|m| m["role"] == "follower" && m["deleting"] == false)
        .and_then(|m| m["name"].as_str())
        .unwrap_or_else(|| panic!("no follower: {s:#}"))
        .to_string()
}

pub fn followers(s: &Value) -> Vec<String> {
    rows(s)
        .iter()
        .filter(|m| m["role"] == "follower" && m["deleting"] == false)
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

pub fn healthy_voters(s: &Value) -> usize {
    rows(s)
        .iter()
        .filter(|m| {
            m["healthy"] == true
                && m["deleting"] == false
                && (m["role"] == "leader" || m["role"] == "follower")
        })
        .count()
}

/// Three machines, three healthy voters, none of `gone` among them.
pub fn repaired(s: &Value, gone: &[&str]) -> bool {
    let names = names(s);
    names.len() == 3 && healthy_voters(s) == 3 && gone.iter().all(|g| !names.iter().any(|n| n == g))
}

pub fn condition(s: &Value, kind: &str) -> (bool, String) {
    let c = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} condition: {s:#}"));
    (
        c["status"] == true,
        c["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// The problems `status` shows for `machine`, in words.
pub fn problems(s: &Value, machine: &str) -> Vec<String> {
    row(s, machine)
        .and_then(|m| m["problems"].as_array())
        .map(|ps| {
            ps.iter()
                .map(|p| p.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------
// Creation and history.

/// Writes a manifest for `cp` (3 replicas at `version`, with `spec` lines added under
/// `spec:`) and applies it with `flags`.
pub fn apply(env: &Env, cp: &str, version: &str, spec: &str, flags: &[&str]) -> String {
    let path = env.dir.path().join(format!(
        "{cp}-{}.yaml",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let mut text = format!(
        "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata:\n  name: {cp}\nspec:\n  replicas: 3\n  version: {version}\n"
    );
    for line in spec.lines().filter(|l| !l.trim().is_empty()) {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    let mut args = vec!["apply", "-f", path.to_str().unwrap()];
    args.extend(flags);
    env.ok(&args)
}

/// `apply`'s flags for a creation: wait until it converged.
pub const CREATE_FLAGS: [&str; 3] = ["--wait", "--timeout", CREATE_TIMEOUT];

/// `remediation:` with unhealthyAfter and more fields (YAML lines, no indent).
pub fn remediation(more: &str) -> String {
    let mut s = format!("remediation:\n  unhealthyAfter: {UNHEALTHY_AFTER_S}s\n");
    for line in more.lines().filter(|l| !l.trim().is_empty()) {
        s.push_str("  ");
        s.push_str(line);
        s.push('\n');
    }
    s
}

pub fn events_after(env: &Env, cp: &str, after: i64) -> Vec<Event> {
    env.store().events_after(cp, after, 100_000).unwrap()
}

pub fn last_event_id(env: &Env, cp: &str) -> i64 {
    env.store().last_event_id(cp).unwrap()
}

pub fn kind_is(e: &Event, kind: &str) -> bool {
    e.kind.to_string() == kind
}

pub fn about(e: &Event, machine: &str) -> bool {
    e.machine.as_deref() == Some(machine)
}

/// Index of the first event after `from` that satisfies `f`.
pub fn find_from(events: &[Event], from: usize, f: impl Fn(&Event) -> bool) -> Option<usize> {
    events.iter().skip(from).position(f).map(|i| i + from)
}

/// A `mark-deleting` done for remediation: "mark a-1 for replacement (attempt 1: ...)"
/// (a machine leaving for any other reason says why: "(outdated version)").
pub fn is_remediation(e: &Event) -> bool {
    e.ok && kind_is(e, "mark-deleting") && e.message.contains("for replacement (attempt")
}

/// The machines marked for remediation, in the order they were.
pub fn remediations(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter(|e| is_remediation(e))
        .filter_map(|e| e.machine.clone())
        .collect()
}

// ---------------------------------------------------------------------------------
// The client workload.

/// What the workload saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Writes etcd acknowledged, in order: each must be read back at the end.
    pub acked: Vec<(String, String)>,
    /// When each was acknowledged.
    pub acked_at: Vec<Instant>,
    /// Writes that failed or timed out: not acknowledged (they may or may not have
    /// taken effect, so they are not checked either way).
    pub write_errors: u64,
    /// Connections (re)made that failed: no call was sent.
    pub connect_errors: u64,
    /// Of those, refused with NOSPACE.
    pub nospace: u64,
    pub reads_ok: u64,
    pub read_errors: u64,
    /// A linearizable read after an acknowledged write that did not see it.
    pub stale_reads: Vec<String>,
    pub last_ack: Option<Instant>,
    pub first_nospace: Option<Instant>,
    /// The first acknowledged write after the first NOSPACE.
    pub first_ack_after_nospace: Option<Instant>,
    /// Large values written while filling the database.
    pub filled_bytes: u64,
    /// Failed calls (writes and reads) by what the client said, for reports.
    pub errors: std::collections::BTreeMap<String, u64>,
}

impl Tally {
    fn error(&mut self, e: String) {
        *self.errors.entry(e).or_default() += 1;
    }
}

/// What a failed call said, short: etcd-client's text up to the first detail.
fn error_text<T>(r: &Result<Result<T, etcd_client::Error>, tokio::time::error::Elapsed>) -> String {
    match r {
        Ok(Ok(_)) => String::new(),
        Ok(Err(e)) => {
            let text = e.to_string();
            let short: String = text.chars().take(ERROR_TEXT_CHARS).collect();
            short
        }
        Err(_) => format!("no answer within {CALL_TIMEOUT:?}"),
    }
}

/// How much of an error's text the tally keeps (the rest names connections and ids).
const ERROR_TEXT_CHARS: usize = 100;

/// Where the workload sends its calls.
#[derive(Clone, Debug)]
pub enum Source {
    /// The endpoints file the controller publishes (re-read before every write).
    Published(PathBuf),
    /// A fixed list, such as a load balancer's address.
    Fixed(Vec<String>),
}

/// An independent client: its own thread, runtime and etcd client on the endpoints the
/// controller publishes (re-read before every write, as a client following them would),
/// or on a fixed address.
pub struct Workload {
    stop: Arc<AtomicBool>,
    /// Set by `start_filling`, cleared by the workload at the first NOSPACE.
    filling: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    prefix: String,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Workload {
    /// Unique keys under `prefix`; once `start_filling` is called, also overwrites two
    /// keys with values of `fill` bytes until etcd answers NOSPACE.
    pub fn start(env: &Env, cp: &str, prefix: &str, fill: Option<usize>) -> Workload {
        let path = quorum_controller::endpoints_path(&env.home, cp);
        Workload::start_on(env, cp, prefix, fill, Source::Published(path))
    }

    /// The same, with its calls sent to `source`.
    pub fn start_on(
        env: &Env,
        cp: &str,
        prefix: &str,
        fill: Option<usize>,
        source: Source,
    ) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let filling = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let tls = env.client_tls(cp);
        let w = WorkloadShared {
            source,
            tls,
            prefix: prefix.to_string(),
            fill,
            stop: stop.clone(),
            filling: filling.clone(),
            tally: tally.clone(),
        };
        let handle = std::thread::spawn(move || rt().block_on(run_workload(w)));
        Workload {
            stop,
            filling,
            tally,
            prefix: prefix.to_string(),
            handle: Some(handle),
        }
    }

    pub fn start_filling(&self) {
        self.filling.store(true, Ordering::Relaxed);
    }

    pub fn acked(&self) -> usize {
        self.tally.lock().unwrap().acked.len()
    }

    /// Writes acknowledged after `from` and before `to`.
    pub fn acked_between(&self, from: Instant, to: Instant) -> usize {
        self.with(|t| {
            t.acked_at
                .iter()
                .filter(|at| **at > from && **at < to)
                .count()
        })
    }

    pub fn with<T>(&self, f: impl FnOnce(&Tally) -> T) -> T {
        f(&self.tally.lock().unwrap())
    }

    /// Waits until `n` more writes were acknowledged (the cluster takes writes).
    pub fn wait_more_acked(&self, n: usize, timeout: Duration) {
        let start = self.acked();
        let deadline = Instant::now() + timeout;
        while self.acked() < start + n {
            assert!(
                Instant::now() < deadline,
                "the workload got {} of {n} writes acknowledged in {timeout:?}: {:?}",
                self.acked() - start,
                self.with(|t| (t.write_errors, t.nospace, t.read_errors))
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the workload and returns its tally, unchecked (a recovery that gives up
    /// writes by a person's choice counts them itself).
    pub fn stop(mut self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("workload thread");
        std::mem::take(&mut *self.tally.lock().unwrap())
    }

    /// Stops the workload, reads every acknowledged write back (linearizable), and
    /// returns the tally. 0 lost acknowledged writes and 0 stale reads, or it panics.
    pub fn finish(mut self, env: &Env, cp: &str) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("workload thread");
        let tally = std::mem::take(&mut *self.tally.lock().unwrap());
        assert!(
            tally.stale_reads.is_empty(),
            "stale reads: {:?}",
            tally.stale_reads
        );
        assert!(!tally.acked.is_empty(), "no write was acknowledged");
        let stored = read_prefix(&env.endpoints(cp), &self.prefix);
        let lost: Vec<&(String, String)> = tally
            .acked
            .iter()
            .filter(|(k, v)| stored.get(k) != Some(v))
            .collect();
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged writes lost, first {:?}",
            lost.len(),
            tally.acked.len(),
            lost.first()
        );
        tally
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

pub fn published_endpoints(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| {
            v["endpoints"].as_array().map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// What the workload's thread gets.
pub struct WorkloadShared {
    source: Source,
    tls: Option<quorum_etcd::ClientTls>,
    prefix: String,
    fill: Option<usize>,
    stop: Arc<AtomicBool>,
    filling: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
}

pub async fn run_workload(w: WorkloadShared) {
    let WorkloadShared {
        source,
        tls,
        prefix,
        fill,
        stop,
        filling,
        tally,
    } = w;
    let mut conn: Option<(Vec<String>, etcd_client::Client)> = None;
    let mut failures_in_row = 0u32;
    let big = vec![b'x'; fill.unwrap_or(0)];
    let token = std::process::id();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let endpoints = match &source {
            Source::Published(path) => published_endpoints(path),
            Source::Fixed(list) => list.clone(),
        };
        let stale = conn.as_ref().is_none_or(|(e, _)| *e != endpoints);
        if endpoints.is_empty() {
            tokio::time::sleep(WORKLOAD_PACE).await;
            continue;
        }
        if stale || failures_in_row >= RECONNECT_AFTER_FAILURES {
            failures_in_row = 0;
            let cluster = Cluster {
                endpoints: endpoints.clone(),
                tls: tls.clone(),
            };
            match tokio::time::timeout(CALL_TIMEOUT, cluster.connect()).await {
                Ok(Ok(c)) => conn = Some((endpoints, c)),
                failed => {
                    {
                        let mut t = tally.lock().unwrap();
                        t.connect_errors += 1;
                        t.error(format!("connect: {}", error_text(&failed)));
                    }
                    conn = None;
                    tokio::time::sleep(WORKLOAD_PACE).await;
                    continue;
                }
            }
        }
        let Some((_, c)) = conn.as_mut() else {
            continue;
        };
        if fill.is_some() && filling.load(Ordering::Relaxed) {
            // Not under `prefix`: overwritten, so not checked as unique writes are.
            let key = format!("fill/{}", seq % 2);
            match tokio::time::timeout(CALL_TIMEOUT, c.put(key, big.clone(), None)).await {
                Ok(Ok(_)) => tally.lock().unwrap().filled_bytes += big.len() as u64,
                Ok(Err(e)) if e.to_string().contains(NOSPACE_ERROR) => {
                    filling.store(false, Ordering::Relaxed);
                    tally
                        .lock()
                        .unwrap()
                        .first_nospace
                        .get_or_insert(Instant::now());
                }
                _ => {}
            }
        }
        seq += 1;
        let (k, v) = (format!("{prefix}{seq:07}"), format!("{seq}-{token}"));
        let put = tokio::time::timeout(CALL_TIMEOUT, c.put(k.clone(), v.clone(), None)).await;
        let acked = matches!(put, Ok(Ok(_)));
        {
            let mut t = tally.lock().unwrap();
            let now = Instant::now();
            if acked {
                t.acked.push((k.clone(), v.clone()));
                t.acked_at.push(now);
                t.last_ack = Some(now);
                if t.first_nospace.is_some() && t.first_ack_after_nospace.is_none() {
                    t.first_ack_after_nospace = Some(now);
                }
            } else {
                t.write_errors += 1;
                t.error(format!("put: {}", error_text(&put)));
                if let Ok(Err(e)) = &put {
                    if e.to_string().contains(NOSPACE_ERROR) {
                        t.nospace += 1;
                        t.first_nospace.get_or_insert(now);
                        filling.store(false, Ordering::Relaxed);
                    }
                }
            }
        }
        if acked {
            failures_in_row = 0;
            // Linearizable (etcd's default): it must see the write just acknowledged.
            let got = tokio::time::timeout(CALL_TIMEOUT, c.get(k.clone(), None)).await;
            let mut t = tally.lock().unwrap();
            match got {
                Ok(Ok(r)) => {
                    t.reads_ok += 1;
                    let seen = r.kvs().first().map(|kv| kv.value().to_vec());
                    if seen.as_deref() != Some(v.as_bytes()) {
                        t.stale_reads.push(format!("{k}: {seen:?}, wanted {v}"));
                    }
                }
                _ => {
                    t.read_errors += 1;
                    t.error(format!("get: {}", error_text(&got)));
                }
            }
        } else {
            failures_in_row += 1;
        }
        tokio::time::sleep(WORKLOAD_PACE).await;
    }
}

/// Every key under `prefix`, read linearizably (in pages: the values are small).
pub fn read_prefix(cluster: &Cluster, prefix: &str) -> std::collections::HashMap<String, String> {
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        let resp = tokio::time::timeout(
            Duration::from_secs(20),
            c.get(prefix, Some(etcd_client::GetOptions::new().with_prefix())),
        )
        .await
        .expect("read-back timed out")
        .expect("read-back");
        resp.kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )
            })
            .collect()
    })
}

// ---------------------------------------------------------------------------------
// The majority watch.

#[derive(Debug, Default)]
pub struct WatchLog {
    pub samples: u64,
    /// Samples in which fewer voters than a quorum answered: when each began and when
    /// it ended (since the watch started; a sample waits for its timeouts, so a member
    /// stopped just after it began can still fail it), and how many answered.
    pub minority: Vec<(Duration, Duration, String)>,
    /// When (since the watch started) the earliest sample in which every voter
    /// answered began: samples before it watched a control plane still settling after
    /// its creation (first connections made under load), not the test's subject.
    pub settled: Option<Duration>,
    /// The member ids of every sample that could read the member list, with when.
    pub memberships: Vec<(Instant, BTreeSet<u64>)>,
}

impl WatchLog {
    /// The samples without a majority from the first that saw every voter on (all of
    /// them when none did).
    pub fn minority_after_settling(&self) -> Vec<&(Duration, Duration, String)> {
        let settled = self.settled.unwrap_or_default();
        self.minority
            .iter()
            .filter(|(at, _, _)| *at >= settled)
            .collect()
    }
}

/// Asks every machine's endpoint for its status every `WATCH_PACE`; a sample in which
/// fewer voters answered than a quorum of the voters is recorded.
pub struct MajorityWatch {
    pub stop: Arc<AtomicBool>,
    pub log: Arc<Mutex<WatchLog>>,
    pub handle: Option<std::thread::JoinHandle<()>>,
    pub started: Instant,
}

impl MajorityWatch {
    pub fn start(env: &Env, cp: &str) -> MajorityWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(WatchLog::default()));
        let (home, location, cp) = (env.home.clone(), env.store_location(), cp.to_string());
        let (stop2, log2) = (stop.clone(), log.clone());
        let started = Instant::now();
        let handle = std::thread::spawn(move || {
            let store = quorum_store::Store::connect(&location, &home).unwrap();
            let timeouts = quorum_etcd::Timeouts {
                connect_ms: 1_000,
                observe_ms: 2_000,
                change_ms: 2_000,
            };
            let control_plane = store.get_control_plane(&cp).unwrap();
            let etcd = Arc::new(
                quorum_controller::access::open(&store, &control_plane, "quorum-watch", timeouts)
                    .unwrap()
                    .etcd,
            );
            // The voters of the newest sample that read a member list.
            let voters: Arc<Mutex<(Option<Instant>, Vec<u64>)>> = Arc::default();
            rt().block_on(async move {
                // A sample starts every WATCH_PACE, whether or not the last one ended (a
                // hung member makes a sample wait for its timeouts): each is judged at
                // its start.
                let mut samples = Vec::new();
                // The machines of the last read of the store that succeeded: the store
                // (a management etcd) may fail for a while, the members do not with it.
                let mut urls: Vec<String> = Vec::new();
                while !stop2.load(Ordering::Relaxed) {
                    if let Ok(machines) = store.machines(&cp) {
                        urls = machines.iter().map(|m| m.client_url()).collect();
                    }
                    let urls = urls.clone();
                    let (etcd, voters, log) = (etcd.clone(), voters.clone(), log2.clone());
                    samples.push(tokio::spawn(async move {
                        let at = Instant::now();
                        let view = etcd.observe(&urls).await;
                        // Without a leader, the member list of any member that answers.
                        let mut members = view.members.clone();
                        for (url, r) in &view.statuses {
                            if members.is_some() {
                                break;
                            }
                            if r.is_ok() {
                                members = etcd.member_list(url).await.ok();
                            }
                        }
                        let mut voters = voters.lock().unwrap();
                        let mut log = log.lock().unwrap();
                        log.samples += 1;
                        if let Some(ms) = &members {
                            if voters.0.is_none_or(|newest| newest < at) {
                                let ids = ms.iter().filter(|m| !m.is_learner).map(|m| m.id);
                                *voters = (Some(at), ids.collect());
                            }
                            log.memberships
                                .push((at, ms.iter().map(|m| m.id).collect()));
                        }
                        let voters = &voters.1;
                        let answering = view
                            .statuses
                            .values()
                            .filter_map(|r| r.as_ref().ok())
                            .filter(|s| voters.contains(&s.member_id))
                            .count();
                        let since = at.duration_since(started);
                        if !voters.is_empty() && answering == voters.len() {
                            log.settled = Some(log.settled.map_or(since, |s| s.min(since)));
                        }
                        if voters.is_empty() || answering < voters.len() / 2 + 1 {
                            // What the silent ones said, so a failure can be read.
                            let errors: Vec<String> = view
                                .statuses
                                .iter()
                                .filter_map(|(url, r)| r.as_ref().err().map(|e| (url, e)))
                                .map(|(url, e)| format!("{url}: {e}"))
                                .collect();
                            log.minority.push((
                                since,
                                started.elapsed(),
                                format!(
                                    "{answering} of {} voters answered ({})",
                                    voters.len(),
                                    errors.join("; ")
                                ),
                            ));
                        }
                    }));
                    tokio::time::sleep(WATCH_PACE).await;
                }
                for sample in samples {
                    sample.await.expect("a sample");
                }
            });
        });
        MajorityWatch {
            stop,
            log,
            handle: Some(handle),
            started,
        }
    }

    /// Every member id in the member lists read after `since`, and how many were read.
    pub fn members_seen_after(&self, since: Instant) -> (BTreeSet<u64>, usize) {
        let log = self.log.lock().unwrap();
        let after: Vec<&BTreeSet<u64>> = log
            .memberships
            .iter()
            .filter(|(at, _)| *at > since)
            .map(|(_, ids)| ids)
            .collect();
        (
            after.iter().flat_map(|ids| ids.iter().copied()).collect(),
            after.len(),
        )
    }

    /// Waits until a sample has seen every voter answer (see `WatchLog::settled`).
    pub fn wait_settled(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.log.lock().unwrap().settled.is_none() {
            assert!(
                Instant::now() < deadline,
                "no sample saw every voter answer within {timeout:?}: {:?}",
                self.log.lock().unwrap().minority
            );
            std::thread::sleep(WATCH_PACE);
        }
    }

    pub fn finish(mut self) -> WatchLog {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("watch thread");
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    /// Stops and requires a majority of voters to have answered in every sample.
    pub fn finish_with_majority(self) -> WatchLog {
        let log = self.finish();
        assert!(log.samples >= 10, "only {} samples", log.samples);
        let minority = log.minority_after_settling();
        assert!(
            minority.is_empty(),
            "{} of {} samples without a majority of voters answering: {:?}",
            minority.len(),
            log.samples,
            &minority[..minority.len().min(10)]
        );
        log
    }
}

impl Drop for MajorityWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------
// A scenario: a control plane with a workload and a watch.

pub struct Scene {
    pub env: Env,
    pub cp: String,
    pub work: Workload,
    pub watch: MajorityWatch,
}

impl Scene {
    /// A controller, a 3-member control plane at `version` made from a manifest with
    /// `spec` lines, the workload (able to fill the database with `fill`-byte values
    /// once told to) and the watch, with some writes acknowledged before it returns.
    pub fn new(test: &str, cp: &str, version: &str, spec: &str, fill: Option<usize>) -> Scene {
        let mut env = Env::new(test);
        env.start_controller();
        apply(&env, cp, version, spec, &CREATE_FLAGS);
        let source = Source::Published(quorum_controller::endpoints_path(&env.home, cp));
        Scene::watching(env, cp, fill, source)
    }

    /// The workload (on `source`) and the watch on `cp`, which serves already (its
    /// controllers run in `env`), with some writes acknowledged before it returns.
    pub fn watching(env: Env, cp: &str, fill: Option<usize>, source: Source) -> Scene {
        let work = Workload::start_on(&env, cp, "w/", fill, source);
        let watch = MajorityWatch::start(&env, cp);
        work.wait_more_acked(20, Duration::from_secs(30));
        watch.wait_settled(Duration::from_secs(30));
        Scene {
            env,
            cp: cp.to_string(),
            work,
            watch,
        }
    }

    pub fn status(&self) -> Value {
        self.env.status(&self.cp)
    }

    pub fn wait(&self, what: &str, timeout: Duration, cond: impl Fn(&Value) -> bool) -> Value {
        self.env.wait_status(&self.cp, what, timeout, cond)
    }

    /// Waits for the control plane to converge (every condition good).
    pub fn wait_converged(&self) -> Value {
        self.wait("converged", Duration::from_secs(90), |s| {
            s["converged"] == true && repaired(s, &[])
        })
    }
}

/// Waits for the repair after a fault at `t0` on `victim`: back to three healthy
/// voters, the victim gone. Returns how long it took from the fault.
pub fn wait_repaired(sc: &Scene, victim: &str, t0: Instant) -> Duration {
    let bound = Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S);
    sc.wait(
        &format!("{victim} replaced, 3 healthy voters"),
        bound + Duration::from_secs(60),
        |s| repaired(s, &[victim]),
    );
    t0.elapsed()
}

/// Starts of `machine` among `events` (whatever their outcome).
pub fn starts_of(events: &[Event], machine: &str) -> usize {
    events
        .iter()
        .filter(|e| kind_is(e, "start-machine") && about(e, machine))
        .count()
}

/// The events of a replacement of `victim`: `unhealthy` about it, then its
/// `mark-deleting` for remediation, then a promotion; no crash loop of it.
pub fn assert_replaced_in_order(events: &[Event], victim: &str) {
    let h = history(events);
    let unhealthy = events
        .iter()
        .position(|e| kind_is(e, "unhealthy") && about(e, victim))
        .unwrap_or_else(|| panic!("no unhealthy event for {victim}:\n{h}"));
    let marked = find_from(events, unhealthy, |e| {
        e.ok && kind_is(e, "mark-deleting") && about(e, victim)
    })
    .unwrap_or_else(|| panic!("no mark-deleting of {victim} after unhealthy:\n{h}"));
    assert!(
        is_remediation(&events[marked]),
        "{}",
        events[marked].message
    );
    find_from(events, marked, |e| e.ok && kind_is(e, "promote"))
        .unwrap_or_else(|| panic!("no promote after the mark-deleting of {victim}:\n{h}"));
    assert!(
        !events
            .iter()
            .any(|e| kind_is(e, "crash-loop") && about(e, victim)),
        "{victim} was seen in a crash loop:\n{h}"
    );
    assert_eq!(
        remediations(events),
        [victim.to_string()],
        "one remediation, of {victim}:\n{h}"
    );
}
