//! One control plane's reconciler: observe, decide, act, with the memory that control
//! plane needs between passes (its health tracker, pacing, what was last recorded).
//!
//! Architecture invariant: a reconciler touches only its own control plane. What every
//! control plane shares (settings, the store, the machine provider, the metrics, the
//! connection cache) is `Shared`, behind an `Arc`; the store runs on a thread of its own
//! (`quorum_store::StoreTask`): a store call is awaited, never made on a runtime thread,
//! and no lock is held across one. So reconcilers of different control planes run at
//! once, each on its own task, and one that waits on a hung member or a slow store
//! waits alone.

use super::*;
use quorum_core::lease::FenceToken;
use quorum_core::pacing::{Attempt, PacingPolicy};
use quorum_core::pass::{End, Memory, Note, Pass, Perform, Request};
use std::sync::Mutex;

/// What every reconciler of one controller shares.
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    /// The store, on its own thread: every call is awaited (`StoreTask::call`).
    pub(crate) store: StoreTask,
    pub(crate) provider: LocalProvider,
    /// The `hosts` provider's connections to agents.
    pub(crate) hosts: Arc<crate::hosts::HostsProvider>,
    /// This replica's leadership token while it leads (`FenceToken`, held as its
    /// number): the fencing token every destructive call to an agent carries.
    fence_token: std::sync::atomic::AtomicI64,
    pub(crate) metrics: Arc<metrics::Metrics>,
    /// The store's data version, read at most once per poll for the whole replica.
    pub(crate) data_version: Arc<fleet::DataVersion>,
    /// Credentials and etcd clients per control plane, bounded (`fleet::AccessCache`).
    pub(crate) access: fleet::AccessCache,
    /// Where steps under way are reported (to the heartbeat), while `run` runs.
    pub(crate) steps: Mutex<Option<heartbeat::Steps>>,
    /// Set by the controller's loop while this replica leads and its store serves:
    /// tasks pass only while it is set.
    acting: AtomicBool,
    /// What a task met that concerns the whole replica (the first since the loop looked).
    trouble: Mutex<Option<fleet::Trouble>>,
}

impl Shared {
    pub(crate) fn new(cfg: Config, store: StoreTask, parts: &ReplicaParts) -> Self {
        let provider = LocalProvider::new(&cfg.home, cfg.etcd_dir.clone());
        let hosts = Arc::new(crate::hosts::HostsProvider::new(cfg.etcd_dir.clone()));
        Shared {
            access: fleet::AccessCache::new(cfg.max_open_control_planes),
            cfg,
            store,
            hosts,
            fence_token: std::sync::atomic::AtomicI64::new(FenceToken::EMBEDDED.0),
            provider,
            metrics: parts.metrics.clone(),
            data_version: parts.data_version.clone(),
            steps: Mutex::new(None),
            acting: AtomicBool::new(false),
            trouble: Mutex::new(None),
        }
    }

    /// The fencing token of this replica's leadership (the embedded store's while it
    /// has not led).
    pub(crate) fn fence_token(&self) -> FenceToken {
        FenceToken(self.fence_token.load(Ordering::SeqCst))
    }

    pub(crate) fn set_fence_token(&self, token: FenceToken) {
        self.fence_token.store(token.0, Ordering::SeqCst);
    }

    pub(crate) fn acting(&self) -> bool {
        self.acting.load(Ordering::SeqCst)
    }

    pub(crate) fn set_acting(&self, yes: bool) {
        self.acting.store(yes, Ordering::SeqCst);
    }

    /// A task met trouble for the whole replica: the controller's loop acts on it (a
    /// lost leadership outranks an unavailable store).
    pub(crate) fn report(&self, t: fleet::Trouble) {
        let mut slot = self.trouble.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*slot, Some(fleet::Trouble::LostLeadership(_))) {
            *slot = Some(t);
        }
    }

    pub(crate) fn take_trouble(&self) -> Option<fleet::Trouble> {
        self.trouble
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// The margin a step needs; `None` (skip the local deadline, leaving the store's
    /// fence as the only check) only under the `ignore-lease-deadline` failpoint.
    pub(crate) fn lease_margin_ms(&self) -> Option<u64> {
        if failpoints::enabled("ignore-lease-deadline") {
            return None;
        }
        Some(quorum_core::lease::margin_ms(self.cfg.lease_ttl_ms))
    }

    /// The credentials and adapter for a control plane's members, built once and
    /// rebuilt before the controller's own client certificate runs out.
    pub(crate) async fn access_for(&self, cp: &ControlPlane) -> Result<Arc<Access>, StoreError> {
        if let Some(a) = self.access.get(cp, now_unix_s()) {
            return Ok(a);
        }
        let identity = format!("quorum-controller {}", self.cfg.identity);
        let read = cp.clone();
        let a = Arc::new(
            self.store
                .call("read a control plane's CAs", move |s| {
                    access::open(s, &read, &identity, Timeouts::default())
                })
                .await?,
        );
        self.access.insert(&cp.name, a.clone());
        Ok(a)
    }
}

pub(crate) struct CpState {
    /// What one pass remembers of the ones before (`quorum_core::pass::Memory`): the
    /// health memory, drain clocks and retry due times (made with the configured drain
    /// time), the refusal and convergence last recorded. A controller that takes over
    /// starts afresh, which only delays a step.
    pub(crate) memory: Memory,
    /// When the previous reconcile of this control plane ended, if it left work pending
    /// (it acted or waited). After an idle (converged) pass this is `None`: the time
    /// spent idle is not a reaction delay.
    pub(crate) last_end: Option<Instant>,
    /// Last error message recorded, to record each distinct error once.
    pub(crate) last_error: Option<String>,
    pub(crate) last_published: Option<(String, i64)>,
    /// The endpoints last written to the endpoints file.
    pub(crate) last_endpoints: Option<Vec<String>>,
    /// The load balancer problem last reported (reported once until it changes).
    pub(crate) last_lb_problem: Option<String>,
    /// The client certificate last loaded into the load balancer.
    pub(crate) lb_cert: Option<String>,
}

impl CpState {
    fn new(drain_ms: u64) -> CpState {
        CpState {
            memory: Memory::new(PacingPolicy {
                drain_ms,
                ..PacingPolicy::DEFAULT
            }),
            last_end: None,
            last_error: None,
            last_published: None,
            last_endpoints: None,
            last_lb_problem: None,
            lb_cert: None,
        }
    }
}

/// One control plane's reconciler (see the module doc).
pub(crate) struct Reconciler {
    pub(crate) sh: Arc<Shared>,
    pub(crate) st: CpState,
}

impl Reconciler {
    pub(crate) fn new(sh: Arc<Shared>) -> Self {
        let st = CpState::new(sh.cfg.drain_ms);
        Reconciler { sh, st }
    }

    /// One pass over a control plane (`quorum_core::pass`): this answers its requests.
    pub async fn reconcile(&mut self, cp: &ControlPlane) -> Result<Outcome, StoreError> {
        let (mut pass, access, observed) = self.begin(cp).await?;
        let waited_ms = self
            .st
            .last_end
            .map(|t| Instant::now().duration_since(t).as_millis() as i64);
        let mut balancer = None;
        let end = loop {
            match pass.next(&mut self.st.memory, quorum_clock::monotonic_ms()) {
                Request::Record(Note::Refusal(msg)) => self.record_refusal(cp, &msg).await,
                Request::Record(Note::Converged) => {
                    self.record_converged(cp, pass.machines()).await
                }
                Request::Publish(endpoints) => {
                    self.publish(cp, &pass, &observed, endpoints).await?
                }
                Request::Balance => {
                    let (d, machines) = (pass.decision(), pass.machines());
                    balancer = self.sync_balancer(cp, &access, d, machines).await;
                    pass.balanced(pacing::lb_in_step(balancer.as_ref()));
                }
                Request::Perform(p) => {
                    let cx = Acting {
                        cp,
                        access: &access,
                        observed: &observed,
                        waited_ms,
                    };
                    self.act(&mut pass, &cx, p).await?;
                }
                Request::Done(end) => break end,
            }
        };
        let outcome = outcome(pass.decision(), balancer.as_ref(), &end);
        tracing::debug!(cp = %cp.name, "pass ended: {end:?}");
        self.st.last_end = (outcome != Outcome::Converged).then(Instant::now);
        Ok(outcome)
    }

    /// The records and a fresh observation, taken in by a new pass (its health memory's
    /// events recorded), with the metrics of both.
    async fn begin(
        &mut self,
        cp: &ControlPlane,
    ) -> Result<(Pass, Arc<Access>, Observed), StoreError> {
        // One call for every record the pass reads: each call waits its turn on the
        // store's thread, behind every other control plane's.
        let (name, kind) = (cp.name.clone(), cp.spec.provider);
        let (machines, view, recorded) = self
            .sh
            .store
            .call("read the records", move |s| {
                let machines = s.machines(&name)?;
                let view = crate::hosts_view(s, kind);
                Ok::<_, StoreError>((machines, view, crate::Recorded::read(s, &name)?))
            })
            .await?;
        let access = self.sh.access_for(cp).await?;
        let (provider, hosts) = (&self.sh.provider, &self.sh.hosts);
        let mut observed =
            crate::observe_on(provider, hosts, view, kind, &access.etcd, &machines).await;
        crate::complete(recorded, provider, cp, &mut observed);
        // After a start, what the file holds is what is published.
        if self.st.last_endpoints.is_none() {
            self.st.last_endpoints = read_endpoints_file(&self.sh.cfg.home, &cp.name);
        }
        let published = self.st.last_endpoints.as_deref();
        let obs = &mut observed.observation;
        let pass = Pass::begin(cp, machines, obs, published, &mut self.st.memory);
        self.record_health(cp, pass.machines(), pass.tracked())
            .await;
        let tracked = pass.tracked();
        let (problems, loops) = (
            tracked.since_unix_s.len(),
            tracked.crash_loops_started.len(),
        );
        self.sh.metrics.health(&cp.name, problems, loops);
        let decision = pass.decision();
        let up_to_date = pass
            .machines()
            .iter()
            .filter(|m| m.version == cp.spec.version && !m.deleting)
            .count();
        let share = up_to_date as f64 / f64::from(cp.spec.replicas.max(1));
        let metrics = &self.sh.metrics;
        metrics.control_plane(&cp.name, share, decision.quorum_margin());
        metrics.state(&cp.name, decision.fleet_state().name());
        Ok((pass, access, observed))
    }

    /// One `Converged` event each time the control plane reaches its spec.
    async fn record_converged(&mut self, cp: &ControlPlane, machines: &[Machine]) {
        let n = machines.len();
        let msg = format!(
            "{n} machine{} at etcd {}, every member healthy",
            if n == 1 { "" } else { "s" },
            cp.spec.version
        );
        self.event(
            cp,
            NewEvent::new(EventKind::Converged, StepOutcome::Ok, &msg),
        )
        .await;
    }

    /// Performs one action the pass handed out and answers it with how it ended; a
    /// store that says this replica may not act now ends the pass (the next observes
    /// again, whatever the call did).
    async fn act(
        &mut self,
        pass: &mut Pass,
        cx: &Acting<'_>,
        p: Perform,
    ) -> Result<(), StoreError> {
        let t0 = Instant::now();
        // Read before the start: a start clears what it says.
        let stopped = self.why_it_stopped(cx.cp, &p.action);
        let (cp, access, observed) = (cx.cp, cx.access, cx.observed);
        let res = match self
            .perform(cp, access, pass.machines(), observed, &p.action)
            .await
        {
            Err(ActionError::Store(e)) if e.lost_leadership() || e.is_unavailable() => {
                return Err(e)
            }
            res => res,
        };
        let took_ms = t0.elapsed().as_millis() as i64;
        let attempt = pacing::attempt_of(&res);
        let memory = &mut self.st.memory;
        pass.performed(
            memory,
            attempt,
            quorum_clock::monotonic_ms(),
            pacing::jitter(),
        );
        match res {
            Ok(allocated) => {
                let why = [
                    p.because.map(|b| format!(": {b}")),
                    stopped.map(|w| format!(" ({w})")),
                ];
                let done = Done {
                    allocated: allocated.as_deref(),
                    why: &why.into_iter().flatten().collect::<String>(),
                    took_ms,
                    waited_ms: cx.waited_ms,
                };
                self.performed(cp, &p.action, &done).await;
            }
            Err(e) => {
                let refused = attempt == Attempt::Refused;
                self.did_not_perform(cp, &p.action, &e, refused, took_ms)
                    .await;
            }
        }
        Ok(())
    }

    /// What an action that was performed leaves behind: local files of a forgotten
    /// control plane, its metric and its event (the pass took in what it changes in the
    /// health memory). `why` is
    /// added to the event's message (why the core decided it, how the machine stopped).
    async fn performed(&mut self, cp: &ControlPlane, action: &Action, done: &Done<'_>) {
        self.sh.metrics.operation(action.kind().as_str(), "ok");
        if let Action::ForgetControlPlane = action {
            self.sh.metrics.forget(&cp.name);
            if let Err(e) = remove_local_files(&self.sh.cfg.home, &cp.name) {
                tracing::warn!(cp = %cp.name, "{e}");
            }
        }
        let took_ms = done.took_ms;
        tracing::info!(cp = %cp.name, performed = action.kind().as_str(), took_ms, "{action}");
        self.st.last_error = None;
        let mut message = perform::done_message(action, done.allocated);
        message.push_str(done.why);
        self.event(
            cp,
            NewEvent {
                // An allocation names the machine it recorded; other steps' answers (a
                // fence's, a restore's) are their message.
                machine: match action {
                    Action::AllocateMachine { .. } => done.allocated,
                    _ => action.machine(),
                },
                waited_ms: done.waited_ms,
                took_ms: Some(took_ms),
                ..NewEvent::new(action.kind(), StepOutcome::Ok, &message)
            },
        )
        .await;
    }

    /// An action refused for now or failed: its metric, and its event unless the same
    /// one was the last.
    async fn did_not_perform(
        &mut self,
        cp: &ControlPlane,
        action: &Action,
        e: &ActionError,
        refused: bool,
        took_ms: i64,
    ) {
        let ended = if refused {
            StepOutcome::Refused
        } else {
            StepOutcome::Failed
        };
        self.sh
            .metrics
            .operation(action.kind().as_str(), ended.as_str());
        let msg = match e.refusal_reason() {
            Some(reason) => format!("{action}: {reason} ({e})"),
            None => format!("{action}: {e}"),
        };
        let repeat = self.st.last_error.as_deref() == Some(msg.as_str());
        self.st.last_error = Some(msg.clone());
        if repeat {
            return;
        }
        if refused {
            tracing::info!(cp = %cp.name, "{msg}");
        } else {
            tracing::warn!(cp = %cp.name, "{msg}");
        }
        let event = NewEvent {
            machine: action.machine(),
            took_ms: Some(took_ms),
            ..NewEvent::new(action.kind(), ended, &msg)
        };
        self.event(cp, event).await;
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
        let reload = match (&tls, Some(&self.st)) {
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
            self.st.lb_cert = cert;
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
            )
            .await;
        }
        let problem = synced
            .blocked
            .clone()
            .or_else(|| synced.cleanup_errors.first().cloned());
        let st = &mut self.st;
        if st.last_lb_problem != problem {
            st.last_lb_problem = problem.clone();
            if let Some(p) = problem {
                tracing::warn!(cp = %cp.name, "haproxy: {p}");
                let message = format!("haproxy: {p}");
                self.event(
                    cp,
                    NewEvent::new(EventKind::Error, StepOutcome::Failed, &message),
                )
                .await;
            }
        }
        Some(synced)
    }

    /// For a start of a machine whose process ran before: why it stopped, as its
    /// provider knows (`MachineProvider::why_it_stopped`).
    fn why_it_stopped(&self, cp: &ControlPlane, action: &Action) -> Option<String> {
        match action {
            Action::StartMachine { machine, .. } => self.machines_of(cp).why_it_stopped(machine),
            _ => None,
        }
    }

    /// Records `e` as written by this controller. A failure is logged, not returned:
    /// the history is for people, and a step must not fail because of it.
    pub(crate) async fn event(&self, cp: &ControlPlane, e: NewEvent<'_>) {
        let e = NewEvent {
            by: Some(&self.sh.cfg.identity),
            ..e
        };
        if let Err(err) = self.sh.store.record_event(&cp.name, now_ms(), &e).await {
            tracing::warn!("recording an event failed: {err}");
        }
    }

    /// Publishes the endpoints the pass hands out (`Some` when they change) to the
    /// endpoints file, and this pass's status to the store (when it changed, or every
    /// `PUBLISH_EVERY_MS`).
    async fn publish(
        &mut self,
        cp: &ControlPlane,
        pass: &Pass,
        o: &Observed,
        endpoints: Option<Vec<String>>,
    ) -> Result<(), StoreError> {
        if let Some(endpoints) = endpoints {
            write_endpoints_file(&self.sh.cfg.home, &cp.name, &endpoints).map_err(|e| {
                StoreError::Directory {
                    path: endpoints_path(&self.sh.cfg.home, &cp.name),
                    source: e,
                }
            })?;
            let msg = if endpoints.is_empty() {
                "client endpoints published: none yet (no member serves)".to_string()
            } else {
                format!("client endpoints published: {}", endpoints.join(" "))
            };
            self.st.last_endpoints = Some(endpoints);
            self.event(
                cp,
                NewEvent::new(EventKind::Endpoints, StepOutcome::Ok, &msg),
            )
            .await;
        }
        let d = pass.decision();
        let memory = quorum_core::health::Memory::of(&o.observation);
        let doc = StatusDoc {
            decision: d,
            cluster_version: o.observation.cluster_version.map(|v| v.to_string()),
            memory: &memory,
        };
        let status = serde_json::to_value(&doc).unwrap_or(serde_json::Value::Null);
        let text = status.to_string();
        let now = now_ms();
        let st = &mut self.st;
        if let Some((prev, at)) = &st.last_published {
            if *prev == text && now - at < PUBLISH_EVERY_MS {
                return Ok(());
            }
        }
        st.last_published = Some((text, now));
        failpoints::crash_point("crash-before-publish-status");
        let published = PublishedStatus {
            updated_at_ms: now,
            controller: self.sh.cfg.identity.clone(),
            status,
        };
        let res = self.sh.store.publish_status(&cp.name, published).await;
        failpoints::crash_point("crash-after-publish-status");
        res
    }
}

/// What performing a pass's actions needs beside the pass: the control plane, its
/// access, the observation the pass decided on, and how long the controller waited
/// before this pass.
struct Acting<'a> {
    cp: &'a ControlPlane,
    access: &'a Access,
    observed: &'a Observed,
    waited_ms: Option<i64>,
}

/// How a pass went, for the controller's poll: converged, waiting, or acted (an action
/// performed, or the load balancer changed).
fn outcome(d: &Decision, balancer: Option<&balancer::Synced>, end: &End) -> Outcome {
    let lb = balancer.map(|b| {
        (
            !b.done.is_empty(),
            b.blocked.is_some() || !b.unhealthy.is_empty(),
        )
    });
    match (end.acted, lb) {
        (true, _) | (false, Some((true, _))) => Outcome::Acted,
        (false, Some((false, true))) => Outcome::Waiting,
        _ if d.converged => Outcome::Converged,
        _ => Outcome::Waiting,
    }
}

/// What a performed action's event says beyond the action.
struct Done<'a> {
    /// The machine an allocation recorded.
    allocated: Option<&'a str>,
    /// Added to the message: why the core decided it, how the machine had stopped.
    why: &'a str,
    took_ms: i64,
    /// How long the controller waited before this pass, if it had been waiting.
    waited_ms: Option<i64>,
}
