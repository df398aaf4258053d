//! Many control planes at once: one task per control plane, a bound on how many
//! reconcile at the same moment, and a bounded cache of their connections.
//!
//! The supervisor (`Fleet::tend`, called by the controller's loop every busy poll while
//! this replica may act) lists the control planes when the store changed, starts a task
//! for each new one, wakes the task of each one whose record changed (a CLI write) and
//! reaps the tasks that ended (their control plane is gone). A task (`run_one`) is the
//! only reconciler of its control plane, so at most one reconcile of it is in flight; it
//! takes a permit of the one semaphore for each pass (`--concurrency` of them), and
//! between passes waits by its own pacing: at once after it acted, `busy_poll_ms` while
//! it waits on a condition, `idle_poll_ms` converged (or until woken), and a backoff
//! after errors. A task that waits on a hung member holds one permit for its own
//! observation deadline and delays no other.
//!
//! Architecture invariant: the fleet makes no decision and performs no action; it only
//! says when each control plane's reconciler runs. Leadership stays the controller's:
//! a task passes only while `Shared::acting` is set, every action still checks the lease
//! and the store's fence, and stepping down aborts every task.

use crate::access::Access;
use crate::reconciler::{Reconciler, Shared};
use crate::Outcome;
use quorum_core::pacing::Backoff;
use quorum_core::ControlPlane;
use quorum_store::StoreError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

/// Reconciles in flight at once, by default. A reconcile mostly waits: on etcd (each
/// observation call is bounded by 1 s, a membership change by 5 s), on a machine
/// starting, on the store. Its own CPU is a few milliseconds (decide is microseconds,
/// the rest is TLS and protobuf). On a 2-core machine 32 waiting reconciles cost
/// nothing, and 32 hung control planes (each holding its permit for its 1 s deadlines)
/// still leave the rest of the fleet its turns: the queue gives permits in order, so a
/// healthy control plane waits at most one round of the hung ones' deadlines only when
/// more than 32 are hung at once. `quorum bench fleet` measures it.
pub const DEFAULT_CONCURRENCY: usize = 32;
/// The most `--concurrency` may be: past it, file descriptors (a pass opens a connection
/// per member) run out before anything is gained.
pub const MAX_CONCURRENCY: usize = 1_024;
/// Control planes whose connections (an etcd client per member, TLS credentials) stay
/// cached, by default. Past it the least recently used is closed and opened again on
/// its next pass (a handful of milliseconds). 256 control planes of 3 members keep
/// about 800 sockets open, under the common 1,024 descriptor limit.
pub const DEFAULT_MAX_OPEN_CONTROL_PLANES: usize = 256;
/// The first and the longest wait after a pass ended in an error (the store refused a
/// read, the credentials could not be built): the task tries again, with backoff,
/// forever; a level-triggered reconciler has nothing else to do.
const ERROR_BACKOFF: Backoff = Backoff::new(200, 10_000);

/// A control plane's connections, cached while used, at most `cap` of them.
pub(crate) struct AccessCache {
    cap: usize,
    tick: AtomicU64,
    inner: Mutex<HashMap<String, (Arc<Access>, u64)>>,
}

impl AccessCache {
    pub(crate) fn new(cap: usize) -> Self {
        AccessCache {
            cap: cap.max(1),
            tick: AtomicU64::new(0),
            inner: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<Access>, u64)>> {
        // Plain data: a panic elsewhere leaves a usable map.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached access of `cp`, if still fresh (a stale one is dropped).
    pub(crate) fn get(&self, cp: &ControlPlane, now_unix_s: i64) -> Option<Arc<Access>> {
        let tick = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        let name = cp.name.as_str();
        match map.get_mut(name) {
            Some((a, used)) if a.fresh(cp, now_unix_s) => {
                *used = tick;
                Some(a.clone())
            }
            Some(_) => {
                map.remove(name);
                None
            }
            None => None,
        }
    }

    /// Caches `a` for `cp`, closing the least recently used beyond the bound.
    pub(crate) fn insert(&self, cp: &str, a: Arc<Access>) {
        let tick = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        map.insert(cp.to_string(), (a, tick));
        while map.len() > self.cap {
            let Some(oldest) = map
                .iter()
                .filter(|(k, _)| k.as_str() != cp)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            map.remove(&oldest);
        }
    }

    /// Closes `cp`'s connections (it is gone, or no longer this replica's).
    pub(crate) fn remove(&self, cp: &str) {
        self.lock().remove(cp);
    }

    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    /// Control planes with open connections now.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The store's data version as last read, shared by the controllers of one replica (a
/// controller per shard): a read younger than `fresh_ms` is reused, so a replica holding
/// many shards asks the store once per poll, not once per shard.
pub(crate) struct DataVersion {
    fresh_ms: u64,
    last: Mutex<Option<(Instant, i64)>>,
}

impl DataVersion {
    pub(crate) fn new(fresh_ms: u64) -> Self {
        DataVersion {
            fresh_ms,
            last: Mutex::new(None),
        }
    }

    /// The version read within `fresh_ms`, or `read` now (awaited only then).
    pub(crate) async fn read(
        &self,
        read: impl std::future::Future<Output = Result<i64, StoreError>>,
    ) -> Result<i64, StoreError> {
        let fresh = Duration::from_millis(self.fresh_ms);
        {
            let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, v)) = *last {
                if at.elapsed() < fresh {
                    return Ok(v);
                }
            }
        }
        let v = read.await?;
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), v));
        Ok(v)
    }
}

/// Why a task could not pass, for the controller's loop to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Trouble {
    /// The store refused a write as fenced, or said the lease is gone: step down.
    LostLeadership(String),
    /// The store cannot serve: hold.
    Unavailable(String),
}

impl Trouble {
    fn of(e: &StoreError) -> Option<Trouble> {
        if e.lost_leadership() {
            Some(Trouble::LostLeadership(e.to_string()))
        } else if e.is_unavailable() {
            Some(Trouble::Unavailable(e.to_string()))
        } else {
            None
        }
    }
}

struct Task {
    handle: JoinHandle<()>,
    wake: Arc<Notify>,
    /// The control plane's record as last listed, to wake the task when it changes.
    record: String,
}

/// The tasks of one controller's term (see the module doc).
pub(crate) struct Fleet {
    tasks: HashMap<String, Task>,
    permits: Arc<Semaphore>,
    /// Passes of this fleet's tasks running now (the permits may be shared).
    in_flight: Arc<AtomicUsize>,
    last_data_version: Option<i64>,
    listed_at: Option<Instant>,
    /// The pass over deleted control planes' snapshots (`orphans.rs`): when it last
    /// started, and the task while it runs.
    orphans_at: Option<Instant>,
    orphan_task: Option<JoinHandle<()>>,
}

/// The permits of `--concurrency N`, bounded.
pub(crate) fn permits(concurrency: usize) -> usize {
    concurrency.clamp(1, MAX_CONCURRENCY)
}

impl Fleet {
    /// A fleet whose passes take `permits`, made with `permits(concurrency)` of them
    /// (shared by every shard a replica holds: the bound is the replica's).
    pub(crate) fn new(permits: Arc<Semaphore>) -> Self {
        Fleet {
            tasks: HashMap::new(),
            permits,
            in_flight: Arc::new(AtomicUsize::new(0)),
            last_data_version: None,
            listed_at: None,
            orphans_at: None,
            orphan_task: None,
        }
    }

    /// Starts, wakes and reaps tasks (see the module doc). Lists the control planes only
    /// when the store changed, or `idle_poll_ms` after the last listing.
    pub(crate) async fn tend(&mut self, sh: &Arc<Shared>) -> Result<(), StoreError> {
        self.reap(sh);
        self.tend_orphans(sh);
        let version = sh.data_version.read(sh.store.data_version()).await?;
        let due = self
            .listed_at
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(sh.cfg.idle_poll_ms));
        if self.last_data_version == Some(version) && !due {
            self.publish(sh);
            return Ok(());
        }
        let mut cps = sh.store.control_planes().await?;
        // A sharded replica's controller runs only its shard's control planes.
        cps.retain(|c| sh.cfg.owns(&c.name));
        self.last_data_version = Some(version);
        self.listed_at = Some(Instant::now());
        for cp in cps {
            let record = serde_json::to_string(&cp).unwrap_or_default();
            match self.tasks.get_mut(&cp.name) {
                Some(t) if t.record == record => {}
                Some(t) => {
                    t.record = record;
                    t.wake.notify_one();
                }
                None => {
                    let wake = Arc::new(Notify::new());
                    let handle = tokio::spawn(run_one(
                        sh.clone(),
                        cp.name.clone(),
                        wake.clone(),
                        self.permits.clone(),
                        self.in_flight.clone(),
                    ));
                    self.tasks.insert(
                        cp.name.clone(),
                        Task {
                            handle,
                            wake,
                            record,
                        },
                    );
                }
            }
        }
        self.publish(sh);
        Ok(())
    }

    /// Starts the pass over deleted control planes' snapshots (`orphans.rs`) when it is
    /// due and none runs.
    fn tend_orphans(&mut self, sh: &Arc<Shared>) {
        let every = Duration::from_millis(crate::orphans::ORPHAN_PASS_EVERY_MS);
        let due = self.orphans_at.is_none_or(|t| t.elapsed() >= every);
        let running = self.orphan_task.as_ref().is_some_and(|h| !h.is_finished());
        if !due || running {
            return;
        }
        self.orphans_at = Some(Instant::now());
        let sh = sh.clone();
        self.orphan_task = Some(tokio::spawn(async move {
            match crate::orphans::pass(&sh).await {
                Ok(0) => {}
                Ok(n) => tracing::info!("removed {n} snapshot(s) of deleted control planes"),
                Err(e) => {
                    tracing::warn!("the pass over deleted control planes' snapshots failed: {e}")
                }
            }
        }));
    }

    /// Removes the tasks that ended (their control plane is gone), with what they held.
    fn reap(&mut self, sh: &Shared) {
        let ended: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.handle.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        for name in ended {
            self.tasks.remove(&name);
            sh.access.remove(&name);
            sh.metrics.forget(&name);
        }
    }

    fn publish(&self, sh: &Shared) {
        let in_flight = self.in_flight.load(Ordering::Relaxed);
        sh.metrics.fleet(
            &sh.cfg.scope(),
            self.tasks.len(),
            in_flight,
            sh.access.len(),
        );
    }

    /// Aborts every task (this replica stepped down, or stops): what one was doing ends
    /// at its next await, exactly as if the process had ended there. Returns the tasks,
    /// for a caller that must know they ended (before it gives its lease up).
    pub(crate) fn stop_all(&mut self, sh: &Shared) -> Vec<JoinHandle<()>> {
        let mut ended = Vec::with_capacity(self.tasks.len());
        for (name, t) in self.tasks.drain() {
            t.handle.abort();
            sh.access.remove(&name);
            ended.push(t.handle);
        }
        if let Some(h) = self.orphan_task.take() {
            h.abort();
            ended.push(h);
        }
        self.last_data_version = None;
        self.listed_at = None;
        self.orphans_at = None;
        sh.metrics.fleet(&sh.cfg.scope(), 0, 0, sh.access.len());
        ended
    }
}

/// One control plane's task: passes, each with a permit, paced by their outcome, until
/// the control plane is gone. Errors that concern the whole replica (its leadership, its
/// store) are handed to the controller's loop through `Shared::report`.
async fn run_one(
    sh: Arc<Shared>,
    name: String,
    wake: Arc<Notify>,
    permits: Arc<Semaphore>,
    in_flight: Arc<AtomicUsize>,
) {
    let mut r = Reconciler::new(sh.clone());
    let mut failures: u32 = 0;
    let mut last_error: Option<String> = None;
    loop {
        sh.metrics.queued(1);
        let permit = permits.clone().acquire_owned().await;
        sh.metrics.queued(-1);
        let Ok(permit) = permit else {
            return; // closed: the controller stops
        };
        let delay_ms = if !sh.acting() {
            // The replica holds (its store cannot serve or confirm its lease).
            drop(permit);
            sh.cfg.busy_poll_ms
        } else {
            let t = Instant::now();
            let res = {
                let _running = Running::start(&in_flight);
                pass(&mut r, &name).await
            };
            drop(permit);
            let label = match &res {
                Ok(Some(o)) => o.label(),
                Ok(None) => return, // gone
                Err(_) => "error",
            };
            sh.metrics
                .reconciled(&name, label, t.elapsed().as_secs_f64());
            match res {
                Ok(Some(o)) => {
                    failures = 0;
                    last_error = None;
                    match o {
                        Outcome::Acted => 0,
                        Outcome::Waiting => sh.cfg.busy_poll_ms,
                        Outcome::Converged => sh.cfg.idle_poll_ms,
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    if let Some(t) = Trouble::of(&e) {
                        sh.report(t);
                    } else if last_error.as_deref() != Some(&e.to_string()) {
                        tracing::error!(cp = %name, "reconcile: {e}");
                        last_error = Some(e.to_string());
                    }
                    failures = failures.saturating_add(1);
                    ERROR_BACKOFF.delay_ms(failures, rand::random())
                }
            }
        };
        if delay_ms > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
                _ = wake.notified() => {}
            }
        }
    }
}

/// Counts a pass as running until dropped (also when its task is aborted mid-pass).
struct Running<'a>(&'a AtomicUsize);

impl<'a> Running<'a> {
    fn start(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Running(n)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One pass: the control plane's record read now, then a reconcile. `None` once the
/// control plane is gone.
async fn pass(r: &mut Reconciler, name: &str) -> Result<Option<Outcome>, StoreError> {
    let cp = r.sh.store.control_plane(name).await?;
    let Some(cp) = cp else {
        return Ok(None);
    };
    r.reconcile(&cp).await.map(Some)
}
