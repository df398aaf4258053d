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
pub use backups::{snapshot_source, snapshots_into};
pub mod balancer;
pub mod failpoints;
pub mod heartbeat;
mod history;
pub mod metrics;
pub mod pacing;
mod perform;
mod rebuild;
mod standing;

use access::{now_unix_s, Access};
use quorum_core::lease::Standing;
use quorum_core::{
    decide, Action, ActionKind, ConditionKind, ControlPlane, Decision, Machine, MachineObservation,
    Observation, ProcessState, Refusal, CLIENT_PORT, PEER_PORT,
};
use quorum_etcd::{ClusterView, Etcd, EtcdError, Timeouts};
use quorum_haproxy::LbOp;
use quorum_provider::{etcd_binary, LocalProvider, MachineTls, ProviderError, StartRequest};
use quorum_store::{
    Campaign, EventKind, NewEvent, PublishedStatus, StepOutcome, Store, StoreError, StoreLocation,
};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

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
        }
    }
}

/// An observation of one control plane, with what the adapters need to act on it.
pub struct Observed {
    pub observation: Observation,
    pub view: ClusterView,
    pub pids: HashMap<String, i32>,
}

/// Observes a control plane: every machine through the provider, every running
/// machine's endpoint through etcd, the member list from the leader.
pub async fn observe(provider: &LocalProvider, etcd: &Etcd, machines: &[Machine]) -> Observed {
    let mut obs = Observation::default();
    let mut pids = HashMap::new();
    let mut endpoints = Vec::new();
    for m in machines {
        let st = provider.observe(&m.name);
        if let Some(pid) = st.pid {
            pids.insert(m.name.clone(), pid);
        }
        if st.process == ProcessState::Running {
            endpoints.push(m.client_url());
        }
        obs.machines.insert(
            m.name.clone(),
            MachineObservation {
                process: st.process,
                has_data: st.has_data,
                status: None,
                marker: st.marker,
                quorum_read: None,
                starts_unix_s: st.starts_unix_s,
                running_version: st.running_version,
            },
        );
    }
    let view = etcd.observe(&endpoints).await;
    for m in machines {
        if let Some(Ok(st)) = view.statuses.get(&m.client_url()) {
            if let Some(o) = obs.machines.get_mut(&m.name) {
                o.status = Some(st.clone());
                o.quorum_read = view.quorum_reads.get(&m.client_url()).copied();
            }
        }
    }
    obs.members = view.members.clone();
    obs.compacted = view.compacted;
    obs.alarms = view.alarms.clone();
    obs.cluster_version = view.cluster_version;
    obs.now_unix_s = now_unix_s();
    Observed {
        observation: obs,
        view,
        pids,
    }
}

/// The status a controller publishes (and `quorum status` prints).
#[derive(Clone, Debug, Serialize)]
pub struct StatusDoc<'a> {
    pub decision: &'a Decision,
    pub cluster_version: Option<String>,
}

#[derive(Default)]
struct CpState {
    /// Since when each machine has had a problem: the health model's only memory (a
    /// controller that takes over starts afresh, which only delays a remediation).
    health: quorum_core::health::Tracker,
    /// When the previous reconcile of this control plane ended, if it left work pending
    /// (it acted or waited). After an idle (converged) pass this is `None`: the time
    /// spent idle is not a reaction delay.
    last_end: Option<Instant>,
    /// Drain clocks and retry due times (created with the configured drain time; a
    /// restarted controller drains again, which is only slower).
    pacer: Option<pacing::Pacer>,
    /// Last error message recorded, to record each distinct error once.
    last_error: Option<String>,
    last_published: Option<(String, i64)>,
    converged_recorded: bool,
    /// The endpoints last written to the endpoints file.
    last_endpoints: Option<Vec<String>>,
    /// The load balancer problem last reported (reported once until it changes).
    last_lb_problem: Option<String>,
    /// The refusal last recorded (each distinct one once, until it clears).
    last_blocked: Option<String>,
    /// The client certificate last loaded into the load balancer.
    lb_cert: Option<String>,
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

pub struct Controller {
    cfg: Config,
    store: Store,
    provider: LocalProvider,
    /// How to reach each control plane's members (its credentials), by name.
    access: HashMap<String, Arc<Access>>,
    state: HashMap<String, CpState>,
    last_heartbeat_ms: i64,
    metrics: Arc<metrics::Metrics>,
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

/// What one attempt to lead came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lead {
    Leading,
    /// Another replica leads (its identity, when known).
    Standby(Option<String>),
}

impl Controller {
    pub fn new(cfg: Config) -> Result<Self, StoreError> {
        let store = Store::connect(&cfg.store, &cfg.home)?;
        let provider = LocalProvider::new(&cfg.home, cfg.etcd_dir.clone());
        Ok(Controller {
            cfg,
            store,
            provider,
            access: HashMap::new(),
            state: HashMap::new(),
            last_heartbeat_ms: 0,
            metrics: Arc::new(metrics::Metrics::new()),
            leading: false,
            last_standby: None,
            stepped_down_at: None,
            heartbeats: None,
            held: None,
        })
    }

    /// One attempt to lead (the embedded store: always granted). On taking the lead,
    /// everything cached from an earlier term is dropped and a heartbeat is written at
    /// once: it is the new leader's first (fenced) write.
    pub fn lead(&mut self) -> Result<Lead, StoreError> {
        if self.leading {
            return Ok(Lead::Leading);
        }
        // A replica that just stepped down was the one cut off, paused or fenced: the
        // others get the first go at the free lease (the HA tests rely on this order).
        let since_step_down_ms = self
            .stepped_down_at
            .map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX));
        if !quorum_core::lease::may_campaign(since_step_down_ms, self.cfg.lease_ttl_ms) {
            return Ok(Lead::Standby(None));
        }
        match self
            .store
            .campaign(&self.cfg.identity, self.cfg.lease_ttl_ms)?
        {
            Campaign::Leading { token } => {
                self.state.clear();
                self.leading = true;
                self.last_standby = None;
                let now = now_ms();
                self.store.controller_heartbeat(&self.beat(now))?;
                self.last_heartbeat_ms = now;
                if let Some(h) = &self.heartbeats {
                    h.lead(self.store.heartbeat_writer()?);
                }
                self.metrics.leading(true);
                if token != 0 {
                    tracing::info!(token, ttl_ms = self.cfg.lease_ttl_ms, "leading");
                }
                Ok(Lead::Leading)
            }
            Campaign::Standby { leader } => {
                let who = leader.map(|l| l.identity);
                if who != self.last_standby {
                    tracing::info!(
                        leader = who.as_deref().unwrap_or("(none)"),
                        "standing by: another controller leads; this one takes over when it stops"
                    );
                    self.last_standby = who.clone();
                }
                Ok(Lead::Standby(who))
            }
        }
    }

    /// Gives the leadership up (after the store refused a write, or the lease ran out).
    fn step_down(&mut self, why: &str) {
        if !self.leading {
            return;
        }
        tracing::warn!("stepping down: {why}");
        if let Some(h) = &self.heartbeats {
            h.stand_down();
        }
        self.store.step_down();
        self.leading = false;
        self.stepped_down_at = Some(Instant::now());
        self.state.clear();
        self.metrics.leading(false);
    }

    /// The margin a step needs; `None` (skip the local deadline, leaving the store's
    /// fence as the only check) only under the `ignore-lease-deadline` failpoint.
    fn lease_margin_ms(&self) -> Option<u64> {
        if failpoints::enabled("ignore-lease-deadline") {
            return None;
        }
        Some(quorum_core::lease::margin_ms(self.cfg.lease_ttl_ms))
    }

    /// The controller's metrics (to serve with `metrics::serve`).
    pub fn metrics(&self) -> Arc<metrics::Metrics> {
        self.metrics.clone()
    }

    /// A heartbeat of this replica at `now_ms`, with no step in progress.
    fn beat(&self, now_ms: i64) -> quorum_store::Heartbeat {
        quorum_store::Heartbeat {
            identity: self.cfg.identity.clone(),
            at_ms: now_ms,
            step: None,
        }
    }

    /// Runs until `stop` is set. Errors reading the store are reported and retried.
    pub async fn run(&mut self, stop: Arc<AtomicBool>) {
        tracing::info!(home = %self.cfg.home.display(), store = %self.store.location(), "controller running");
        self.heartbeats = Some(heartbeat::Heartbeats::start(&self.cfg.identity));
        self.run_loop(&stop).await;
        if let Some(h) = self.heartbeats.take() {
            h.stop();
        }
        // Said at once, so readers do not wait for the heartbeat to go stale (and while
        // still leading, so the write passes the fence).
        if self.leading {
            if let Err(e) = self.store.controller_stopped(&self.cfg.identity) {
                tracing::warn!("withdrawing the heartbeat: {e}");
            }
        }
        self.store.step_down();
        tracing::info!("controller stopped");
    }

    async fn run_loop(&mut self, stop: &Arc<AtomicBool>) {
        let standby_poll_ms = quorum_core::lease::standby_poll_ms(self.cfg.lease_ttl_ms);
        while !stop.load(Ordering::Relaxed) {
            self.metrics
                .store_endpoints(&self.store.endpoint_health(false));
            match self.lead() {
                Ok(Lead::Leading) => {}
                Ok(Lead::Standby(who)) => {
                    if who.is_some() {
                        self.store_answers();
                    }
                    sleep_unless(stop, standby_poll_ms).await;
                    continue;
                }
                Err(e) if e.is_unavailable() => {
                    self.hold(&e.to_string());
                    sleep_unless(stop, standby_poll_ms).await;
                    continue;
                }
                Err(e) => {
                    tracing::error!("campaign: {e}");
                    sleep_unless(stop, standby_poll_ms).await;
                    continue;
                }
            }
            // The lease, by this replica's own clock and by what the store said of it,
            // before anything else happens, even with nothing to do.
            if !failpoints::enabled("ignore-lease-deadline") {
                let left = self.store.lease_left_ms();
                match quorum_core::lease::standing(left, self.store.lease_lost(), 0) {
                    Standing::Act => {}
                    Standing::Lost => {
                        self.step_down("the store says the leadership lease is gone");
                        continue;
                    }
                    Standing::Hold => {
                        let why = self.lease_unconfirmed();
                        self.hold(&why);
                        sleep_unless(stop, self.cfg.busy_poll_ms).await;
                        continue;
                    }
                }
            }
            let outcome = match self.reconcile_all().await {
                Ok(o) => {
                    self.store_answers();
                    o
                }
                Err(e) if e.lost_leadership() => {
                    self.step_down(&e.to_string());
                    continue;
                }
                Err(e) if e.is_unavailable() => {
                    self.hold(&e.to_string());
                    Outcome::Waiting
                }
                Err(e) => {
                    tracing::error!("reconcile: {e}");
                    Outcome::Waiting
                }
            };
            match outcome {
                Outcome::Acted => {}
                Outcome::Waiting => sleep_unless(stop, self.cfg.busy_poll_ms).await,
                Outcome::Converged => self.idle(stop).await,
            }
        }
    }

    /// Sleeps up to the idle interval, waking early if the store changes.
    async fn idle(&self, stop: &AtomicBool) {
        let start = Instant::now();
        let before = self.store.data_version().ok();
        while start.elapsed() < Duration::from_millis(self.cfg.idle_poll_ms) {
            sleep_unless(stop, self.cfg.busy_poll_ms).await;
            if stop.load(Ordering::Relaxed) || self.store.data_version().ok() != before {
                return;
            }
            if !quorum_core::lease::may_act(self.store.lease_left_ms(), 0) {
                return;
            }
        }
    }

    /// One pass over every control plane; the most urgent outcome wins.
    pub async fn reconcile_all(&mut self) -> Result<Outcome, StoreError> {
        let now = now_ms();
        // Without `run`'s heartbeat thread (a caller driving passes itself), beat here.
        let every_ms = heartbeat::HEARTBEAT_EVERY_MS as i64;
        if self.heartbeats.is_none() && now - self.last_heartbeat_ms >= every_ms {
            self.store.controller_heartbeat(&self.beat(now))?;
            self.last_heartbeat_ms = now;
        }
        let cps = self.store.control_planes()?;
        self.state.retain(|k, _| cps.iter().any(|c| &c.name == k));
        self.access.retain(|k, _| cps.iter().any(|c| &c.name == k));
        let mut overall = Outcome::Converged;
        for cp in cps {
            let t = Instant::now();
            let o = match self.reconcile(&cp).await {
                Ok(o) => o,
                Err(e) => {
                    self.metrics.reconciled("error", t.elapsed().as_secs_f64());
                    return Err(e);
                }
            };
            let label = match o {
                Outcome::Acted => "acted",
                Outcome::Waiting => "waiting",
                Outcome::Converged => "converged",
            };
            self.metrics.reconciled(label, t.elapsed().as_secs_f64());
            overall = match (overall, o) {
                (Outcome::Acted, _) | (_, Outcome::Acted) => Outcome::Acted,
                (Outcome::Waiting, _) | (_, Outcome::Waiting) => Outcome::Waiting,
                _ => Outcome::Converged,
            };
        }
        Ok(overall)
    }

    /// The credentials and adapter for a control plane's members, built once and
    /// rebuilt before the controller's own client certificate runs out.
    fn access_for(&mut self, cp: &ControlPlane) -> Result<Arc<Access>, StoreError> {
        if let Some(a) = self.access.get(&cp.name) {
            if a.fresh(now_unix_s()) {
                return Ok(a.clone());
            }
        }
        let identity = format!("quorum-controller {}", self.cfg.identity);
        let a = Arc::new(access::open(
            &self.store,
            cp,
            &identity,
            Timeouts::default(),
        )?);
        self.access.insert(cp.name.clone(), a.clone());
        Ok(a)
    }

    /// Observe, decide, act for one control plane.
    pub async fn reconcile(&mut self, cp: &ControlPlane) -> Result<Outcome, StoreError> {
        let machines = self.store.machines(&cp.name)?;
        let access = self.access_for(cp)?;
        let mut observed = observe(&self.provider, &access.etcd, &machines).await;
        let tracked = self
            .state
            .entry(cp.name.clone())
            .or_default()
            .health
            .observe(cp, &machines, &observed.observation);
        observed.observation.problem_since_unix_s = tracked.since_unix_s.clone();
        observed.observation.defragmented = tracked.defragmented.clone();
        observed.observation.nospace_recurrences = tracked.nospace_recurrences;
        snapshots_into(&self.store, cp, &mut observed.observation)?;
        self.record_health(cp, &tracked);
        self.metrics.health(
            &cp.name,
            tracked.since_unix_s.len(),
            tracked.crash_loops_started.len(),
        );
        let decision = decide(cp, &machines, &observed.observation);
        let up_to_date = machines
            .iter()
            .filter(|m| m.version == cp.spec.version && !m.deleting)
            .count();
        self.metrics.control_plane(
            &cp.name,
            up_to_date as f64 / f64::from(cp.spec.replicas.max(1)),
            decision.quorum_margin(),
        );
        self.record_blocked(cp, &decision);
        // Published before any action: clients see a leaving machine go from the
        // endpoints before its member is removed.
        self.publish(cp, &decision, &observed)?;
        let balancer = self.sync_balancer(cp, &access, &decision, &machines).await;
        let started = Instant::now();
        let waited_ms = self
            .state
            .get(&cp.name)
            .and_then(|s| s.last_end)
            .map(|t| started.duration_since(t).as_millis() as i64);
        let mut outcome = if decision.converged {
            Outcome::Converged
        } else {
            Outcome::Waiting
        };
        if decision.converged {
            let st = self.state.entry(cp.name.clone()).or_default();
            if !st.converged_recorded {
                st.converged_recorded = true;
                let n = machines.len();
                let msg = format!(
                    "{n} machine{} at etcd {}, every member healthy",
                    if n == 1 { "" } else { "s" },
                    cp.spec.version
                );
                self.event(
                    cp,
                    NewEvent::new(EventKind::Converged, StepOutcome::Ok, &msg),
                );
            }
        } else {
            self.state
                .entry(cp.name.clone())
                .or_default()
                .converged_recorded = false;
        }
        if let Some(b) = &balancer {
            if !b.done.is_empty() {
                outcome = Outcome::Acted;
            } else if b.blocked.is_some() || !b.unhealthy.is_empty() {
                outcome = Outcome::Waiting;
            }
        }
        // The endpoints of this pass are published: a machine seen leaving starts its
        // drain now.
        self.pacer(&cp.name).observe(pacing::clock_ms(), &machines);
        for action in &decision.actions {
            let verdict = self
                .pacer(&cp.name)
                .check(pacing::clock_ms(), action, balancer.as_ref());
            if let quorum_core::pacing::Verdict::Wait(hold) = verdict {
                // Draining, the load balancer behind, or backing off: a wait, not a
                // failure; look again soon.
                tracing::debug!(cp = %cp.name, "holding '{action}': {hold}");
                break;
            }
            let t0 = Instant::now();
            let res = match self
                .perform(cp, &access, &machines, &observed, action)
                .await
            {
                // Not the action's failure: this replica may not act now (it no longer
                // leads, or its store cannot serve or confirm its lease). The next pass
                // observes again, whatever the call did.
                Err(ActionError::Store(e)) if e.lost_leadership() || e.is_unavailable() => {
                    return Err(e)
                }
                res => res,
            };
            let took_ms = t0.elapsed().as_millis() as i64;
            let (attempt, _) =
                self.pacer(&cp.name)
                    .record(pacing::clock_ms(), action, &res, pacing::jitter());
            let machine = action.machine();
            match res {
                Ok(allocated) => {
                    self.metrics.operation(action.kind().as_str(), "ok");
                    if let Action::Defragment { machine } = action {
                        self.state
                            .entry(cp.name.clone())
                            .or_default()
                            .health
                            .defragmented(machine);
                    }
                    if let Action::DisarmAlarm { .. } = action {
                        self.state
                            .entry(cp.name.clone())
                            .or_default()
                            .health
                            .disarmed();
                    }
                    if matches!(action, Action::ForgetControlPlane) {
                        self.metrics.forget(&cp.name);
                        if let Err(e) = remove_local_files(&self.cfg.home, &cp.name) {
                            tracing::warn!(cp = %cp.name, "{e}");
                        }
                    }
                    tracing::info!(cp = %cp.name, performed = action.kind().as_str(), took_ms, "{action}");
                    let st = self.state.entry(cp.name.clone()).or_default();
                    st.last_error = None;
                    let message = perform::done_message(action, allocated.as_deref());
                    self.event(
                        cp,
                        NewEvent {
                            machine: allocated.as_deref().or(machine),
                            waited_ms,
                            took_ms: Some(took_ms),
                            ..NewEvent::new(action.kind(), StepOutcome::Ok, &message)
                        },
                    );
                    outcome = Outcome::Acted;
                }
                Err(e) => {
                    let refusal = attempt == quorum_core::pacing::Attempt::Refused;
                    let ended = if refusal {
                        StepOutcome::Refused
                    } else {
                        StepOutcome::Failed
                    };
                    self.metrics
                        .operation(action.kind().as_str(), ended.as_str());
                    let msg = match e.refusal_reason() {
                        Some(reason) => format!("{action}: {reason} ({e})"),
                        None => format!("{action}: {e}"),
                    };
                    let st = self.state.entry(cp.name.clone()).or_default();
                    let repeat = st.last_error.as_deref() == Some(msg.as_str());
                    st.last_error = Some(msg.clone());
                    if !repeat {
                        if refusal {
                            tracing::info!(cp = %cp.name, "{msg}");
                        } else {
                            tracing::warn!(cp = %cp.name, "{msg}");
                        }
                        self.event(
                            cp,
                            NewEvent {
                                machine,
                                took_ms: Some(took_ms),
                                ..NewEvent::new(action.kind(), ended, &msg)
                            },
                        );
                    }
                    break;
                }
            }
        }
        self.state.entry(cp.name.clone()).or_default().last_end =
            (outcome != Outcome::Converged).then(Instant::now);
        Ok(outcome)
    }

    /// Reads the backend, probes the members that should enter it (their own
    /// `/health`, with the control plane's credentials), then changes the backend.
    async fn sync_balancer_inner(
        &self,
        cp: &ControlPlane,
        spec: quorum_core::HaproxySpec,
        access: &Access,
        d: &Decision,
        machines: &[Machine],
    ) -> balancer::Synced {
        let failed = |e: tokio::task::JoinError| balancer::Synced {
            blocked: Some(format!("background task failed: {e}")),
            ..Default::default()
        };
        let s2 = spec.clone();
        let current = match tokio::task::spawn_blocking(move || balancer::read(&s2)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                return balancer::Synced {
                    blocked: Some(e),
                    ..Default::default()
                }
            }
            Err(e) => return failed(e),
        };
        let mut desired = Vec::new();
        let mut unhealthy = Vec::new();
        for m in machines
            .iter()
            .filter(|m| d.endpoints.contains(&m.client_url()))
        {
            // A member enters the backend only once it says it is healthy itself.
            if balancer::serving(&current, m) || access.etcd.health(&m.client_url()).await.is_ok() {
                desired.push((m.name.clone(), balancer::addr(m)));
            } else {
                unhealthy.push(m.name.clone());
            }
        }
        let tls = access.client.as_ref().map(|c| balancer::LbTls {
            ca_pem: c.ca_pem.clone(),
            bundle_pem: format!("{}\n{}", c.cert_pem.trim_end(), c.key_pem.trim_end()),
            names: balancer::LbTls::names(&cp.name),
        });
        // A new client certificate (a restarted controller, or a renewal) is loaded
        // before it is needed.
        let reload = match (&tls, self.state.get(&cp.name)) {
            (Some(_), st) => {
                st.and_then(|s| s.lb_cert.as_ref()) != access.client.as_ref().map(|c| &c.cert_pem)
            }
            (None, _) => false,
        };
        let mut synced = tokio::task::spawn_blocking(move || {
            balancer::apply(&spec, &desired, &current, tls.as_ref(), reload)
        })
        .await
        .unwrap_or_else(failed);
        synced.unhealthy = unhealthy;
        synced
    }

    /// Brings the control plane's HAProxy backend (if it has one) in step with the
    /// decision's endpoints; records what changed and why it could not.
    async fn sync_balancer(
        &mut self,
        cp: &ControlPlane,
        access: &Access,
        d: &Decision,
        machines: &[Machine],
    ) -> Option<balancer::Synced> {
        let spec = cp.spec.haproxy.clone()?;
        let synced = self
            .sync_balancer_inner(cp, spec, access, d, machines)
            .await;
        if synced.tls_loaded {
            let cert = access.client.as_ref().map(|c| c.cert_pem.clone());
            self.state.entry(cp.name.clone()).or_default().lb_cert = cert;
        }
        for op in &synced.done {
            tracing::info!(cp = %cp.name, "haproxy: {op}");
            let kind = match op {
                LbOp::Add { .. } | LbOp::Enable { .. } => EventKind::LbAdd,
                LbOp::Drain { .. } => EventKind::LbDrain,
                LbOp::Delete { .. } => EventKind::LbDelete,
            };
            let message = format!("haproxy: {op}");
            self.event(
                cp,
                NewEvent {
                    machine: Some(op.name()),
                    ..NewEvent::new(kind, StepOutcome::Ok, &message)
                },
            );
        }
        let problem = synced
            .blocked
            .clone()
            .or_else(|| synced.cleanup_errors.first().cloned());
        let st = self.state.entry(cp.name.clone()).or_default();
        if st.last_lb_problem != problem {
            st.last_lb_problem = problem.clone();
            if let Some(p) = problem {
                tracing::warn!(cp = %cp.name, "haproxy: {p}");
                let message = format!("haproxy: {p}");
                self.event(
                    cp,
                    NewEvent::new(EventKind::Error, StepOutcome::Failed, &message),
                );
            }
        }
        Some(synced)
    }

    /// The pacing of a control plane (made with the configured drain time).
    fn pacer(&mut self, cp: &str) -> &mut pacing::Pacer {
        let drain_ms = self.cfg.drain_ms;
        self.state
            .entry(cp.to_string())
            .or_default()
            .pacer
            .get_or_insert_with(|| pacing::Pacer::new(drain_ms))
    }

    /// Records `e` as written by this controller. A failure is logged, not returned:
    /// the history is for people, and a step must not fail because of it.
    fn event(&self, cp: &ControlPlane, e: NewEvent<'_>) {
        let e = NewEvent {
            by: Some(&self.cfg.identity),
            ..e
        };
        if let Err(err) = self.store.record_event(&cp.name, now_ms(), &e) {
            tracing::warn!("recording an event failed: {err}");
        }
    }

    fn publish(&mut self, cp: &ControlPlane, d: &Decision, o: &Observed) -> Result<(), StoreError> {
        if self
            .state
            .get(&cp.name)
            .and_then(|s| s.last_endpoints.as_ref())
            != Some(&d.endpoints)
        {
            write_endpoints_file(&self.cfg.home, &cp.name, &d.endpoints).map_err(|e| {
                StoreError::Directory {
                    path: endpoints_path(&self.cfg.home, &cp.name),
                    source: e,
                }
            })?;
            self.state
                .entry(cp.name.clone())
                .or_default()
                .last_endpoints = Some(d.endpoints.clone());
            let msg = if d.endpoints.is_empty() {
                "client endpoints published: none yet (no member serves)".to_string()
            } else {
                format!("client endpoints published: {}", d.endpoints.join(" "))
            };
            self.event(
                cp,
                NewEvent::new(EventKind::Endpoints, StepOutcome::Ok, &msg),
            );
        }
        let doc = StatusDoc {
            decision: d,
            cluster_version: o.observation.cluster_version.map(|v| v.to_string()),
        };
        let status = serde_json::to_value(&doc).unwrap_or(serde_json::Value::Null);
        let text = status.to_string();
        let now = now_ms();
        let st = self.state.entry(cp.name.clone()).or_default();
        if let Some((prev, at)) = &st.last_published {
            if *prev == text && now - at < PUBLISH_EVERY_MS {
                return Ok(());
            }
        }
        st.last_published = Some((text, now));
        failpoints::crash_point("crash-before-publish-status");
        let res = self.store.publish_status(
            &cp.name,
            &PublishedStatus {
                updated_at_ms: now,
                controller: self.cfg.identity.clone(),
                status,
            },
        );
        failpoints::crash_point("crash-after-publish-status");
        res
    }
}

/// Where the client endpoints of a control plane are published for clients to follow:
/// `<home>/endpoints/<name>.json`, `{"endpoints": [...], "updatedAtMs": ...}`, replaced
/// atomically whenever the set changes (before a leaving member is removed).
pub fn endpoints_path(home: &Path, cp: &str) -> PathBuf {
    home.join("endpoints").join(format!("{cp}.json"))
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
    let results = [
        (std::fs::remove_file(&endpoints), endpoints),
        (std::fs::remove_dir_all(&haproxy), haproxy),
    ];
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

async fn sleep_unless(stop: &AtomicBool, ms: u64) {
    if !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

#[cfg(test)]
mod tests;
