//! quorum-controller: the runtime loop around the pure core.
//!
//! For every control plane in the store: observe (provider + etcd) -> decide (core) ->
//! perform the decision's actions in order, store writes first when they are intent ->
//! observe again. An action is performed only right after a fresh observation decided
//! it; after any action the loop observes again at once, and while it waits for a
//! condition it looks again every `busy_poll_ms`.
//!
//! Architecture invariant: the controller makes no decision of its own. It translates
//! observations into `quorum_core::Observation` and `Action`s into calls; the only
//! policy it holds is timing: poll intervals here, and the core's one pacing policy
//! (drain, load balancer gating, retry backoff: `quorum_core::pacing`) driven through
//! `pacing::Pacer`.

pub mod access;
mod backups;
pub use backups::snapshot_source;
use quorum_observe::{complete, hosts_view, observe_on, Observed, Recorded};
pub mod balancer;
pub mod failpoints;
pub mod fleet;
pub mod heartbeat;
mod history;
pub mod metrics;
mod orphans;
pub mod pacing;
mod perform;
mod rebuild;
mod reconciler;
pub mod shards;
mod standing;

use quorum_hosts as hosts;
use reconciler::{Reconciler, Shared};
pub use shards::ShardedController;

use access::{now_unix_s, Access};
use quorum_core::lease::Standing;
use quorum_core::{
    Action, ActionKind, ControlPlane, Decision, Machine, Refusal, CLIENT_PORT, PEER_PORT,
};
use quorum_etcd::{EtcdError, Timeouts};
use quorum_haproxy::LbOp;
use quorum_provider::{etcd_binary, LocalProvider, MachineTls, ProviderError, StartRequest};
use quorum_store::{
    Campaign, EventKind, NewEvent, PublishedStatus, StepOutcome, Store, StoreError, StoreLocation,
    StoreTask,
};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Poll interval while a step waits for a condition (a learner catching up, a refusal
/// clearing): a condition that becomes true is acted on within this plus one observation.
pub const BUSY_POLL_MS: u64 = 50;
/// Poll interval when every control plane is converged; a write to the store by the CLI
/// wakes the loop earlier (checked every `BUSY_POLL_MS`).
pub const IDLE_POLL_MS: u64 = 1_000;
/// The published status is rewritten at least this often even if nothing changed, so
/// readers can tell a live controller from a dead one.
const PUBLISH_EVERY_MS: i64 = 1_000;
/// Time between a machine leaving the published endpoints (marked deleting) and the
/// removal of its member: the core's pacing policy (`quorum_core::pacing::DRAIN_MS`).
pub const DRAIN_MS: u64 = quorum_core::pacing::DRAIN_MS;
/// A heartbeat older than this means no controller is running on the home.
pub const CONTROLLER_STALE_MS: i64 = 5_000;

#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error("no leader to send the change to")]
    NoLeader,
    #[error(transparent)]
    Haproxy(#[from] quorum_haproxy::HaproxyError),
    #[error("background task failed: {0}")]
    Join(String),
    #[error(transparent)]
    Pki(#[from] quorum_pki::PkiError),
    #[error("{machine} is no longer draining for its in-place step (the store says {now}): the stop was decided on a stale look and is not performed")]
    StaleStop { machine: String, now: String },
    #[error(transparent)]
    Backup(#[from] quorum_backup::BackupError),
    #[error("{0}")]
    Rebuild(String),
    #[error(transparent)]
    Hosts(#[from] hosts::HostsError),
    #[error(transparent)]
    Machine(#[from] quorum_provider::MachineError),
    #[error("{kind} was routed to the performer of {performer}, which does not perform it")]
    Misrouted {
        kind: ActionKind,
        performer: &'static str,
    },
}

impl ActionError {
    fn is_refusal(&self) -> bool {
        match self {
            ActionError::Etcd(e) => e.is_refusal() || matches!(e, EtcdError::Timeout { .. }),
            ActionError::NoLeader => true,
            _ => false,
        }
    }

    /// What a refusal means, in words for the history (the core's classifier gives
    /// them): etcd's own ("etcdserver: unhealthy cluster") do not say that this is its
    /// normal pacing of membership changes. `None` for a failure.
    fn refusal_reason(&self) -> Option<&'static str> {
        match self {
            ActionError::Etcd(e) => e.reason(),
            ActionError::NoLeader => Some(Refusal::NoLeader.reason()),
            _ => None,
        }
    }
}

pub(crate) use quorum_clock::now_ms;

/// Settings of a controller.
#[derive(Clone, Debug)]
pub struct Config {
    pub home: PathBuf,
    pub etcd_dir: PathBuf,
    /// Name this controller publishes under (host and pid by default).
    pub identity: String,
    pub busy_poll_ms: u64,
    pub idle_poll_ms: u64,
    /// See `DRAIN_MS`.
    pub drain_ms: u64,
    /// Where the state lives (the embedded file in `home`, or a management etcd).
    pub store: StoreLocation,
    /// Leadership lease among replicas sharing a management etcd.
    pub lease_ttl_ms: u64,
    /// Reconciles in flight at once (`fleet::DEFAULT_CONCURRENCY`).
    pub concurrency: usize,
    /// Control planes whose connections stay cached (`fleet::DEFAULT_MAX_OPEN_CONTROL_PLANES`).
    pub max_open_control_planes: usize,
    /// Shards the fleet is split into among the replicas (`--shards`; 1: not sharded,
    /// one replica leads every control plane).
    pub shards: u32,
    /// The shard this controller acts for (`ShardedController` runs one controller per
    /// shard it holds); `None`: every control plane.
    pub shard: Option<u32>,
    /// The key file of the store's secrets (`--secrets-key-file`); `None`: the default
    /// (`quorum_store::secrets::KeyFile::resolve`).
    pub secrets_key_file: Option<PathBuf>,
}

/// A replica's name unless one is given: the host and the process id (`web-1-4242`),
/// unique among the replicas sharing a store.
fn default_identity() -> String {
    let pid = std::process::id();
    match std::fs::read_to_string("/proc/sys/kernel/hostname") {
        Ok(host) if !host.trim().is_empty() => format!("{}-{pid}", host.trim()),
        _ => format!("pid-{pid}"),
    }
}

impl Config {
    pub fn new(home: &Path, etcd_dir: PathBuf) -> Self {
        Config {
            home: home.to_path_buf(),
            etcd_dir,
            identity: default_identity(),
            busy_poll_ms: BUSY_POLL_MS,
            idle_poll_ms: IDLE_POLL_MS,
            drain_ms: DRAIN_MS,
            store: StoreLocation::Embedded,
            lease_ttl_ms: quorum_core::lease::DEFAULT_LEASE_TTL_MS,
            concurrency: fleet::DEFAULT_CONCURRENCY,
            max_open_control_planes: fleet::DEFAULT_MAX_OPEN_CONTROL_PLANES,
            shards: 1,
            shard: None,
            secrets_key_file: None,
        }
    }

    /// Opens the store, with the key file, and checks that its secrets open: a
    /// replica without the key file the others use refuses to start, saying why.
    pub fn connect(&self) -> Result<Store, StoreError> {
        let store =
            Store::connect_keyed(&self.store, &self.home, self.secrets_key_file.as_deref())?;
        store.check_secrets()?;
        Ok(store)
    }

    /// The leadership this controller holds: `shard/3`, or `""` unsharded.
    pub fn scope(&self) -> String {
        self.shard.map(|s| format!("shard/{s}")).unwrap_or_default()
    }

    /// What this controller acts on, for its log: `every control plane` or `shard 3 of 6`.
    pub fn acts_on(&self) -> String {
        match self.shard {
            Some(s) => format!("shard {s} of {}", self.shards),
            None => "every control plane".to_string(),
        }
    }

    /// Whether control plane `cp` is this controller's to act on (its shard's).
    pub fn owns(&self, cp: &str) -> bool {
        self.shard
            .is_none_or(|s| quorum_core::shards::shard_of(cp, self.shards) == s)
    }
}

/// The status a controller publishes (and `quorum status` prints).
#[derive(Clone, Debug, Serialize)]
pub struct StatusDoc<'a> {
    pub decision: &'a Decision,
    pub cluster_version: Option<String>,
    /// The health memory the decision was made with: `quorum status` decides from it.
    pub memory: &'a quorum_core::health::Memory,
}

/// What a reconcile of one control plane did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Performed at least one action: observe again at once.
    Acted,
    /// Waiting for a condition or a retry: look again soon.
    Waiting,
    /// Nothing to do.
    Converged,
}

impl Outcome {
    /// The metrics' label.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Acted => "acted",
            Outcome::Waiting => "waiting",
            Outcome::Converged => "converged",
        }
    }
}

/// What the controllers of one replica share (one controller, or one per shard held):
/// the metrics, the `--concurrency` permits (the bound is the replica's), and the last
/// read of the store's data version (read once per poll for all of them).
pub(crate) struct ReplicaParts {
    pub(crate) metrics: Arc<metrics::Metrics>,
    pub(crate) permits: Arc<tokio::sync::Semaphore>,
    pub(crate) data_version: Arc<fleet::DataVersion>,
}

impl ReplicaParts {
    pub(crate) fn new(cfg: &Config) -> Self {
        ReplicaParts {
            metrics: Arc::new(metrics::Metrics::new()),
            permits: Arc::new(tokio::sync::Semaphore::new(fleet::permits(cfg.concurrency))),
            data_version: Arc::new(fleet::DataVersion::new(cfg.busy_poll_ms)),
        }
    }
}

pub struct Controller {
    /// What every control plane's reconciler shares (settings, store, provider, metrics).
    sh: Arc<Shared>,
    /// Reconcilers driven one pass at a time by `reconcile` (a teardown, tests).
    inline: HashMap<String, Reconciler>,
    /// The tasks `run` drives, one per control plane.
    fleet: fleet::Fleet,
    last_heartbeat_ms: i64,
    /// This replica holds the leadership (always, with the embedded store).
    leading: bool,
    /// The leader last reported while standing by (reported once per change).
    last_standby: Option<String>,
    /// When this replica last stepped down (it waits before campaigning again).
    stepped_down_at: Option<Instant>,
    /// The heartbeat thread, while `run` runs (without it, `reconcile_all` beats).
    heartbeats: Option<heartbeat::Heartbeats>,
    /// Since when, and why, this replica acts on nothing for want of its store (its
    /// calls unanswered, or its lease unconfirmed): said once, and once when it ends.
    held: Option<(Instant, String)>,
}

/// What the supervisor does before its next turn.
enum Turn {
    /// Turn again at once (it just stepped down: campaign again).
    Again,
    /// Sleep this long (unless stopped).
    Sleep(u64),
}

/// What one attempt to lead came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lead {
    Leading,
    /// Another replica leads (its identity, when known).
    Standby(Option<String>),
}

impl Controller {
    /// A controller of every control plane (or, with `cfg.shard`, of one shard's),
    /// with metrics and permits of its own.
    pub fn new(cfg: Config) -> Result<Self, StoreError> {
        let parts = ReplicaParts::new(&cfg);
        Controller::with_parts(cfg, &parts)
    }

    /// A controller sharing what its replica's controllers share (one per shard it
    /// holds). Agrees on the shard count with the other replicas first, and scopes the
    /// leadership to the shard.
    pub(crate) fn with_parts(cfg: Config, parts: &ReplicaParts) -> Result<Self, StoreError> {
        let mut store = cfg.connect()?;
        store.agree_shards(cfg.shards)?;
        if cfg.shard.is_some() {
            store.set_scope(&cfg.scope())?;
        }
        let store = StoreTask::start(store)?;
        Ok(Controller {
            sh: Arc::new(Shared::new(cfg, store, parts)),
            inline: HashMap::new(),
            fleet: fleet::Fleet::new(parts.permits.clone()),
            last_heartbeat_ms: 0,
            leading: false,
            last_standby: None,
            stepped_down_at: None,
            heartbeats: None,
            held: None,
        })
    }

    /// Everything cached for control planes (reconcilers, their tasks, connections) is
    /// dropped: a new term starts afresh, and a deposed replica acts on nothing.
    fn forget_all(&mut self) {
        self.sh.set_acting(false);
        self.inline.clear();
        self.fleet.stop_all(&self.sh);
        self.sh.access.clear();
    }

    /// One attempt to lead (the embedded store: always granted). On taking the lead,
    /// everything cached from an earlier term is dropped and a heartbeat is written at
    /// once: it is the new leader's first (fenced) write.
    pub async fn lead(&mut self) -> Result<Lead, StoreError> {
        if self.leading {
            return Ok(Lead::Leading);
        }
        // A replica that just stepped down was the one cut off, paused or fenced: the
        // others get the first go at the free lease (the HA tests rely on this order).
        let since_step_down_ms = self
            .stepped_down_at
            .map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX));
        let ttl_ms = self.sh.cfg.lease_ttl_ms;
        if !quorum_core::lease::may_campaign(since_step_down_ms, ttl_ms) {
            return Ok(Lead::Standby(None));
        }
        let campaign = self
            .sh
            .store
            .campaign(&self.sh.cfg.identity, ttl_ms)
            .await?;
        match campaign {
            Campaign::Leading { token } => {
                self.sh.set_fence_token(token);
                self.forget_all();
                self.leading = true;
                self.last_standby = None;
                // Whose heartbeat this one replaces: another's is a takeover.
                let before = self.sh.store.last_controller_heartbeat().await?;
                let now = now_ms();
                self.sh.store.controller_heartbeat(self.beat(now)).await?;
                self.last_heartbeat_ms = now;
                if let Some(b) = before.filter(|b| b.identity != self.sh.cfg.identity) {
                    self.record_takeover(&b, now).await;
                }
                if let Some(h) = &self.heartbeats {
                    h.lead(self.sh.store.heartbeat_writer().await?);
                }
                self.sh.metrics.leading(&self.sh.cfg.scope(), true);
                if !token.is_embedded() {
                    tracing::info!(token = token.0, ttl_ms, "leading");
                }
                Ok(Lead::Leading)
            }
            Campaign::Standby { leader } => {
                let who = leader.map(|l| l.identity);
                if who != self.last_standby {
                    tracing::info!(
                        leader = who.as_deref().unwrap_or("(none)"),
                        acts_on = %self.sh.cfg.acts_on(),
                        "standing by: another controller leads; this one takes over when it stops"
                    );
                    self.last_standby = who.clone();
                }
                Ok(Lead::Standby(who))
            }
        }
    }

    /// Says in the history of every control plane this replica acts on that it took
    /// over, from whom, and how long that one had been silent: without it, only the BY
    /// column changes, and `--wait` shows seconds of silence. Best effort.
    async fn record_takeover(&self, from: &quorum_store::Heartbeat, now: i64) {
        let silent_s = (now - from.at_ms).max(0) as f64 / 1000.0;
        let msg = format!(
            "controller {} took over from {} (its last heartbeat {silent_s:.1}s ago)",
            self.sh.cfg.identity, from.identity
        );
        tracing::info!("{msg}");
        let cps = match self.sh.store.control_planes().await {
            Ok(cps) => cps,
            Err(e) => return tracing::warn!("recording the takeover failed: {e}"),
        };
        for cp in cps.iter().filter(|c| self.sh.cfg.owns(&c.name)) {
            let e = NewEvent {
                by: Some(&self.sh.cfg.identity),
                ..NewEvent::new(EventKind::Takeover, StepOutcome::Ok, &msg)
            };
            if let Err(err) = self.sh.store.record_event(&cp.name, now, &e).await {
                tracing::warn!(cp = %cp.name, "recording the takeover failed: {err}");
            }
        }
    }

    /// Gives the leadership up (after the store refused a write, or the lease ran out).
    async fn step_down(&mut self, why: &str) {
        if !self.leading {
            return;
        }
        tracing::warn!("stepping down: {why}");
        self.forget_all();
        if let Some(h) = &self.heartbeats {
            h.stand_down();
        }
        self.store_step_down().await;
        self.leading = false;
        self.stepped_down_at = Some(Instant::now());
        self.sh.metrics.leading(&self.sh.cfg.scope(), false);
    }

    /// The controller's metrics (to serve with `metrics::serve`).
    pub fn metrics(&self) -> Arc<metrics::Metrics> {
        self.sh.metrics.clone()
    }

    /// A heartbeat of this replica at `now_ms`, with no step in progress.
    fn beat(&self, now_ms: i64) -> quorum_store::Heartbeat {
        quorum_store::Heartbeat {
            identity: self.sh.cfg.identity.clone(),
            at_ms: now_ms,
            step: None,
        }
    }

    /// Runs until `stop` is set. Errors reading the store are reported and retried.
    pub async fn run(&mut self, stop: Arc<AtomicBool>) {
        tracing::info!(
            home = %self.sh.cfg.home.display(),
            store = %self.sh.store.location(),
            concurrency = self.sh.cfg.concurrency,
            acts_on = %self.sh.cfg.acts_on(),
            "controller running"
        );
        let beats = heartbeat::Heartbeats::start(&self.sh.cfg.identity);
        *self.sh.steps.lock().unwrap_or_else(|p| p.into_inner()) = Some(beats.steps());
        self.heartbeats = Some(beats);
        self.run_loop(&stop).await;
        // The tasks end before the lease is given up: once it is, another replica may
        // take the leadership at once (a shard handed over, a standby), and nothing of
        // this one's may still be under way then.
        self.sh.set_acting(false);
        self.inline.clear();
        let tasks = self.fleet.stop_all(&self.sh);
        if !tasks_end_within(tasks, TASKS_END_MS).await {
            tracing::warn!(
                "some control plane's pass did not end within {TASKS_END_MS} ms of being \
                 stopped; the lease is given up anyway (every write of it is fenced)"
            );
        }
        self.forget_all();
        *self.sh.steps.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if let Some(h) = self.heartbeats.take() {
            h.stop();
        }
        if self.sh.cfg.shard.is_some() && self.leading {
            failpoints::crash_point("crash-before-shard-release");
        }
        // Said at once, so readers do not wait for the heartbeat to go stale (and while
        // still leading, so the write passes the fence).
        if self.leading {
            if let Err(e) = self
                .sh
                .store
                .controller_stopped(&self.sh.cfg.identity)
                .await
            {
                tracing::warn!("withdrawing the heartbeat: {e}");
            }
        }
        self.store_step_down().await;
        if self.sh.cfg.shard.is_some() && self.leading {
            failpoints::crash_point("crash-after-shard-release");
        }
        tracing::info!("controller stopped");
    }

    /// The supervisor: leadership and the lease first, then the tasks (`fleet`), every
    /// `busy_poll_ms`. The reconciles themselves run in the tasks.
    async fn run_loop(&mut self, stop: &Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            match self.turn().await {
                Turn::Again => {}
                Turn::Sleep(ms) => sleep_unless(stop, ms).await,
            }
        }
    }

    /// One turn of the supervisor: lead (or stand by), check the lease and what the
    /// tasks reported, then tend the fleet. What to do before the next turn.
    async fn turn(&mut self) -> Turn {
        let health = self.sh.store.endpoint_health(false).await;
        self.sh.metrics.store_endpoints(&health);
        if let Some(t) = self.campaign_turn().await {
            return t;
        }
        if let Some(t) = self.lease_turn().await {
            return t;
        }
        if let Some(t) = self.trouble_turn().await {
            return t;
        }
        self.tend_turn().await
    }

    /// Tells the store this replica no longer leads (its lease given up); a store that
    /// cannot be told lets the lease run out.
    async fn store_step_down(&self) {
        if let Err(e) = self.sh.store.step_down().await {
            tracing::warn!("giving up the lease: {e}; it runs out on its own");
        }
    }

    /// Leadership: `None` while this replica leads; else how long to stand by.
    async fn campaign_turn(&mut self) -> Option<Turn> {
        let standby_poll_ms = quorum_core::lease::standby_poll_ms(self.sh.cfg.lease_ttl_ms);
        match self.lead().await {
            Ok(Lead::Leading) => return None,
            Ok(Lead::Standby(who)) => {
                if who.is_some() {
                    self.store_answers();
                }
            }
            Err(e) if e.is_unavailable() => self.hold(&e.to_string()),
            Err(e) => tracing::error!("campaign: {e}"),
        }
        Some(Turn::Sleep(standby_poll_ms))
    }

    /// The lease, by this replica's own clock and by what the store said of it, before
    /// anything else happens, even with nothing to do: `None` if it may act.
    async fn lease_turn(&mut self) -> Option<Turn> {
        if failpoints::enabled("ignore-lease-deadline") {
            return None;
        }
        let (left, lost) = match self.sh.store.lease().await {
            Ok(lease) => lease,
            // The store's thread did not answer: nothing is confirmed.
            Err(e) => {
                self.sh.set_acting(false);
                self.hold(&e.to_string());
                return Some(Turn::Sleep(self.sh.cfg.busy_poll_ms));
            }
        };
        match quorum_core::lease::standing(left, lost, 0) {
            Standing::Act => None,
            Standing::Lost => {
                self.step_down("the store says the leadership lease is gone")
                    .await;
                Some(Turn::Again)
            }
            Standing::Hold => {
                self.sh.set_acting(false);
                let why = self.lease_unconfirmed().await;
                self.hold(&why);
                Some(Turn::Sleep(self.sh.cfg.busy_poll_ms))
            }
        }
    }

    /// What a task met that concerns the whole replica: `None` if nothing.
    async fn trouble_turn(&mut self) -> Option<Turn> {
        match self.sh.take_trouble()? {
            fleet::Trouble::LostLeadership(why) => {
                self.step_down(&why).await;
                Some(Turn::Again)
            }
            fleet::Trouble::Unavailable(why) => {
                self.sh.set_acting(false);
                self.hold(&why);
                Some(Turn::Sleep(self.sh.cfg.busy_poll_ms))
            }
        }
    }

    /// Leading, the lease confirmed, nothing reported: the tasks may pass, and the
    /// fleet is tended.
    async fn tend_turn(&mut self) -> Turn {
        self.sh.set_acting(true);
        match self.fleet.tend(&self.sh).await {
            Ok(()) => self.store_answers(),
            Err(e) if e.lost_leadership() => {
                self.step_down(&e.to_string()).await;
                return Turn::Again;
            }
            Err(e) if e.is_unavailable() => {
                self.sh.set_acting(false);
                self.hold(&e.to_string());
            }
            Err(e) => tracing::error!("listing the control planes: {e}"),
        }
        Turn::Sleep(self.sh.cfg.busy_poll_ms)
    }

    /// One pass over every control plane, one after another (for a caller driving
    /// passes itself; `run` runs each control plane in its own task). The most urgent
    /// outcome wins; the first error ends the pass.
    pub async fn reconcile_all(&mut self) -> Result<Outcome, StoreError> {
        let now = now_ms();
        // Without `run`'s heartbeat thread (a caller driving passes itself), beat here.
        let every_ms = heartbeat::HEARTBEAT_EVERY_MS as i64;
        if self.heartbeats.is_none() && now - self.last_heartbeat_ms >= every_ms {
            self.sh.store.controller_heartbeat(self.beat(now)).await?;
            self.last_heartbeat_ms = now;
        }
        let mut cps = self.sh.store.control_planes().await?;
        cps.retain(|c| self.sh.cfg.owns(&c.name));
        self.inline.retain(|k, _| cps.iter().any(|c| &c.name == k));
        let mut overall = Outcome::Converged;
        for cp in cps {
            let o = self.reconcile(&cp).await?;
            overall = match (overall, o) {
                (Outcome::Acted, _) | (_, Outcome::Acted) => Outcome::Acted,
                (Outcome::Waiting, _) | (_, Outcome::Waiting) => Outcome::Waiting,
                _ => Outcome::Converged,
            };
        }
        Ok(overall)
    }

    /// Observe, decide, act for one control plane, here and now (its reconciler is kept
    /// between calls).
    pub async fn reconcile(&mut self, cp: &ControlPlane) -> Result<Outcome, StoreError> {
        self.sh.set_acting(self.leading);
        let sh = self.sh.clone();
        let r = self
            .inline
            .entry(cp.name.clone())
            .or_insert_with(|| Reconciler::new(sh));
        let t = Instant::now();
        let res = r.reconcile(cp).await;
        let label = res.as_ref().map_or("error", |o| o.label());
        self.sh
            .metrics
            .reconciled(&cp.name, label, t.elapsed().as_secs_f64());
        res
    }
}

/// Where the client endpoints of a control plane are published for clients to follow:
/// `<home>/endpoints/<name>.json`, `{"endpoints": [...], "updatedAtMs": ...}`, replaced
/// atomically whenever the set changes (before a leaving member is removed).
pub fn endpoints_path(home: &Path, cp: &str) -> PathBuf {
    home.join("endpoints").join(format!("{cp}.json"))
}

/// The endpoints the file of `cp` publishes now (`None`: no file, or not one of ours).
fn read_endpoints_file(home: &Path, cp: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(endpoints_path(home, cp)).ok()?;
    let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
    doc["endpoints"]
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn write_endpoints_file(home: &Path, cp: &str, endpoints: &[String]) -> std::io::Result<()> {
    let path = endpoints_path(home, cp);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let doc = serde_json::json!({ "endpoints": endpoints, "updatedAtMs": now_ms() });
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, format!("{doc:#}\n"))?;
    std::fs::rename(&tmp, &path)
}

/// Where `quorum haproxy-config` writes, by default, HAProxy's own certificate and key
/// (`haproxy.pem`) and the CA bundle of a TLS control plane: `<home>/haproxy/<name>`.
pub fn haproxy_dir(home: &Path, cp: &str) -> PathBuf {
    home.join("haproxy").join(cp)
}

/// Removes what a forgotten control plane left in the home outside the store: its
/// endpoints file and its HAProxy directory (which holds a private key). Whoever
/// finishes a deletion calls it: the controller that forgets the control plane, and the
/// CLI for its own home. What is already gone is no error; the other removal is still
/// tried when one fails.
pub fn remove_local_files(home: &Path, cp: &str) -> std::io::Result<()> {
    let endpoints = endpoints_path(home, cp);
    let haproxy = haproxy_dir(home, cp);
    let mut results = vec![
        (std::fs::remove_file(&endpoints), endpoints),
        (std::fs::remove_dir_all(&haproxy), haproxy),
    ];
    // Its fenced directories (`quorum fenced`): old members' data a rebuild set aside.
    let provider = LocalProvider::new(home, quorum_provider::default_etcd_dir());
    for f in provider.list_fenced(Some(cp)) {
        let path = provider.fenced_dir().join(&f.name);
        results.push((std::fs::remove_dir_all(&path), path));
    }
    for (res, path) in results {
        match res {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("cannot remove {}: {e}", path.display()),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// An address is free for a new machine when nothing listens on its client or peer port.
pub fn address_is_free(a: Ipv4Addr) -> bool {
    [CLIENT_PORT, PEER_PORT]
        .iter()
        .all(|p| TcpListener::bind(SocketAddrV4::new(a, *p)).is_ok())
}

/// How long a stopping controller waits for its aborted passes to end before it gives
/// its lease up. An aborted pass ends at its next await; the longest it can take is one
/// store call in progress (bounded by its deadline, `CALL_TIMEOUT_MS`).
const TASKS_END_MS: u64 = quorum_core::failover::CALL_TIMEOUT_MS + 1_000;

/// Waits for every aborted task to end, at most `limit_ms`; whether all did.
async fn tasks_end_within(tasks: Vec<tokio::task::JoinHandle<()>>, limit_ms: u64) -> bool {
    let all = async {
        for t in tasks {
            let _ = t.await; // cancelled: the expected outcome
        }
    };
    tokio::time::timeout(Duration::from_millis(limit_ms), all)
        .await
        .is_ok()
}

async fn sleep_unless(stop: &AtomicBool, ms: u64) {
    if !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

#[cfg(test)]
mod tests;
