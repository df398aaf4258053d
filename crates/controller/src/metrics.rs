//! Prometheus metrics of a controller, and the HTTP endpoint (hyper) that serves them.
//!
//! - `quorum_reconciles_total{outcome}`: reconciles by outcome (acted, waiting,
//!   converged, error);
//! - `quorum_reconcile_duration_seconds{control_plane}`: how long one reconcile (observe,
//!   decide, act) of each control plane took;
//! - `quorum_reconcile_queue_depth`: control planes due for a pass and waiting for one of
//!   the `--concurrency` permits; `quorum_reconciles_in_flight`: passes running now;
//!   `quorum_control_plane_tasks`: control planes this replica runs a task for (its share);
//!   `quorum_open_control_planes`: control planes whose connections are open (cached);
//! - `quorum_control_planes{state}`: control planes by state (converged, rolling,
//!   degraded, blocked), as this replica's last pass of each saw it;
//! - `quorum_membership_operations_total{kind, outcome}`: every action by kind and outcome
//!   (ok, refused, failed);
//! - `quorum_rollout_up_to_date_ratio{control_plane}`: machines at the spec's version
//!   over replicas (1 when a rollout is done);
//! - `quorum_leader`: 1 while this replica leads the controllers of its store (with
//!   `--shards`: at least one shard), else 0; `quorum_shards_held`: the shards this
//!   replica leads, and `quorum_controller_replicas`: the live replicas it sees (its
//!   share of the fleet is `quorum_control_plane_tasks`);
//! - `quorum_quorum_margin{control_plane}`: healthy voters minus the quorum size; alert on
//!   0 (one more failure loses quorum), and below 0 quorum is lost or unknown;
//! - `quorum_unhealthy_members{control_plane}`: members with a problem now (the health
//!   model's); `quorum_crash_loops_total{control_plane}`: crash loops that started;
//!   remediations are `quorum_membership_operations_total{kind="mark-deleting"}` and the
//!   `Remediating` condition;
//! - `quorum_snapshot_verifications_total{control_plane, outcome}`: the controller's test
//!   restores of snapshots (ok, failed); alert on a failed one (and on the
//!   `SnapshotRestoreFailed` condition);
//! - `quorum_store_endpoint_up{endpoint}`: 1 while a member of the management etcd serves
//!   this replica's requests and probes (it has a leader), 0 while it is set aside; alert
//!   when fewer than a majority are 1 (none with the embedded store).

use http_body_util::Full;
use hyper::body::Bytes;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

type Labels = Vec<(String, String)>;

/// One leadership's part of the fleet gauges.
#[derive(Default, Clone, Copy)]
struct ScopeFigures {
    leading: bool,
    tasks: usize,
    in_flight: usize,
    open: usize,
}

pub struct Metrics {
    registry: Registry,
    /// Figures per control plane.
    cps: ControlPlaneFigures,
    /// Figures of this replica.
    replica: ReplicaFigures,
    /// Each control plane's last state, to move it between `by_state`'s counts.
    states: std::sync::Mutex<HashMap<String, &'static str>>,
    /// What each leadership of this replica (`""` unsharded, `shard/3`) holds and runs:
    /// the replica's gauges are their sums.
    scopes: std::sync::Mutex<HashMap<String, ScopeFigures>>,
}

/// The metrics labelled by control plane.
struct ControlPlaneFigures {
    reconciles: Family<Labels, Counter>,
    reconcile_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    operations: Family<Labels, Counter>,
    up_to_date: Family<Labels, Gauge<f64, AtomicU64>>,
    quorum_margin: Family<Labels, Gauge>,
    unhealthy: Family<Labels, Gauge>,
    crash_loops: Family<Labels, Counter>,
    verifications: Family<Labels, Counter>,
    by_state: Family<Labels, Gauge>,
}

/// The metrics of the replica as a whole.
struct ReplicaFigures {
    queue_depth: Gauge,
    in_flight: Gauge,
    tasks: Gauge,
    open: Gauge,
    leader: Gauge,
    shards_held: Gauge,
    replicas: Gauge,
    store_up: Family<Labels, Gauge>,
}

/// `metric`, registered in `r` under `name` with `help`.
fn registered<M: prometheus_client::registry::Metric + Clone>(
    r: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    r.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("quorum");
        let cps = ControlPlaneFigures::register(&mut registry);
        let replica = ReplicaFigures::register(&mut registry);
        Metrics {
            registry,
            cps,
            replica,
            states: std::sync::Mutex::new(HashMap::new()),
            scopes: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Whether this replica leads `scope` (`""` unsharded, `shard/3`).
    pub fn leading(&self, scope: &str, yes: bool) {
        self.with_scope(scope, |f| f.leading = yes);
    }

    /// The live replicas a sharded replica sees.
    pub fn replicas(&self, n: usize) {
        self.replica
            .replicas
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A leadership ended for good (a shard given up): its part leaves the sums.
    pub fn forget_scope(&self, scope: &str) {
        let mut scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        scopes.remove(scope);
        self.sum(&scopes);
    }

    fn with_scope(&self, scope: &str, f: impl FnOnce(&mut ScopeFigures)) {
        let mut scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        f(scopes.entry(scope.to_string()).or_default());
        self.sum(&scopes);
    }

    fn sum(&self, scopes: &HashMap<String, ScopeFigures>) {
        let n = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
        let total = |f: fn(&ScopeFigures) -> usize| n(scopes.values().map(f).sum());
        self.replica
            .leader
            .set(i64::from(scopes.values().any(|f| f.leading)));
        self.replica.shards_held.set(n(scopes
            .iter()
            .filter(|(k, f)| k.starts_with("shard/") && f.leading)
            .count()));
        self.replica.tasks.set(total(|f| f.tasks));
        self.replica.in_flight.set(total(|f| f.in_flight));
        self.replica.open.set(total(|f| f.open));
    }

    pub fn reconciled(&self, cp: &str, outcome: &str, seconds: f64) {
        self.cps
            .reconciles
            .get_or_create(&vec![("outcome".into(), outcome.into())])
            .inc();
        self.cps
            .reconcile_seconds
            .get_or_create(&vec![("control_plane".into(), cp.into())])
            .observe(seconds);
    }

    /// A control plane's task is due and waits for a permit (`+1`), or got one (`-1`).
    pub fn queued(&self, delta: i64) {
        self.replica.queue_depth.inc_by(delta);
    }

    /// The fleet of leadership `scope` as its supervisor last saw it.
    pub fn fleet(&self, scope: &str, tasks: usize, in_flight: usize, open: usize) {
        self.with_scope(scope, |f| {
            f.tasks = tasks;
            f.in_flight = in_flight;
            f.open = open;
        });
    }

    /// A control plane's state after a pass (`quorum_core::FleetState`'s name).
    pub fn state(&self, cp: &str, state: &'static str) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let before = states.insert(cp.to_string(), state);
        if before == Some(state) {
            return;
        }
        if let Some(b) = before {
            self.cps
                .by_state
                .get_or_create(&vec![("state".into(), b.into())])
                .dec();
        }
        self.cps
            .by_state
            .get_or_create(&vec![("state".into(), state.into())])
            .inc();
    }

    pub fn operation(&self, kind: &str, outcome: &str) {
        self.cps
            .operations
            .get_or_create(&vec![
                ("kind".into(), kind.into()),
                ("outcome".into(), outcome.into()),
            ])
            .inc();
    }

    pub fn control_plane(&self, cp: &str, up_to_date_ratio: f64, quorum_margin: i64) {
        let l = vec![("control_plane".to_string(), cp.to_string())];
        self.cps.up_to_date.get_or_create(&l).set(up_to_date_ratio);
        self.cps.quorum_margin.get_or_create(&l).set(quorum_margin);
    }

    /// The health model's view of one control plane: members with a problem now, and
    /// crash loops that started since the last call.
    pub fn health(&self, cp: &str, unhealthy_members: usize, crash_loops_started: usize) {
        let l = vec![("control_plane".to_string(), cp.to_string())];
        self.cps
            .unhealthy
            .get_or_create(&l)
            .set(i64::try_from(unhealthy_members).unwrap_or(i64::MAX));
        self.cps
            .crash_loops
            .get_or_create(&l)
            .inc_by(crash_loops_started as u64);
    }

    /// A test restore of a scheduled snapshot came to `ok` or not.
    pub fn verified(&self, cp: &str, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        self.cps
            .verifications
            .get_or_create(&vec![
                ("control_plane".to_string(), cp.to_string()),
                ("outcome".to_string(), outcome.to_string()),
            ])
            .inc();
    }

    /// What this replica knows of each member of its store.
    pub fn store_endpoints(&self, health: &[quorum_store::EndpointHealth]) {
        for h in health {
            let l = vec![("endpoint".to_string(), h.endpoint.clone())];
            self.replica.store_up.get_or_create(&l).set(i64::from(h.up));
        }
    }

    /// Forgets a control plane's gauges (it was deleted).
    pub fn forget(&self, cp: &str) {
        let l = vec![("control_plane".to_string(), cp.to_string())];
        self.cps.up_to_date.remove(&l);
        self.cps.quorum_margin.remove(&l);
        self.cps.unhealthy.remove(&l);
        self.cps.crash_loops.remove(&l);
        self.cps.reconcile_seconds.remove(&l);
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = states.remove(cp) {
            self.cps
                .by_state
                .get_or_create(&vec![("state".into(), b.into())])
                .dec();
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Largest request head read from a scraper (hyper's smallest read buffer).
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// A scraper's whole exchange (request and answer) must fit in this.
const REQUEST_TIMEOUT_MS: u64 = 2_000;
/// How often the accept loop looks at `stop`.
const STOP_POLL_MS: u64 = 200;
/// Scrapes served at once; a further connection waits in the kernel's backlog.
const MAX_CONNECTIONS: usize = 16;

/// Serves `GET /metrics` (HTTP/1.1, hyper) on `listener` until `stop` is set.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    while !stop.load(Ordering::Relaxed) {
        let accepted =
            tokio::time::timeout(Duration::from_millis(STOP_POLL_MS), listener.accept()).await;
        let Ok(Ok((conn, _))) = accepted else {
            continue;
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let m = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let m = m.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&req, &m)) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .max_buf_size(MAX_REQUEST_BYTES)
                .keep_alive(false)
                .serve_connection(hyper_util::rt::TokioIo::new(conn), service);
            // A scraper that stalls is dropped: the timeout bounds the task's life.
            let _ = tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), served).await;
            drop(slot);
        });
    }
}

/// The answer to one request: the exposition for `GET /metrics`, 404 otherwise.
fn answer<B>(req: &hyper::Request<B>, m: &Metrics) -> hyper::Response<Full<Bytes>> {
    let (status, body) = if req.method() == hyper::Method::GET && req.uri().path() == "/metrics" {
        (hyper::StatusCode::OK, m.encode())
    } else {
        (
            hyper::StatusCode::NOT_FOUND,
            "quorum serves only GET /metrics\n".to_string(),
        )
    };
    let mut res = hyper::Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    );
    res
}

impl ControlPlaneFigures {
    fn register(r: &mut Registry) -> Self {
        let by_state = "Control planes by state (converged, rolling, degraded, blocked)";
        let verifications = "The controller's test restores of snapshots, by control plane and outcome (ok, failed)";
        ControlPlaneFigures {
            reconciles: registered(r, "reconciles", "Reconciles by outcome", Family::default()),
            reconcile_seconds: registered(
                r,
                "reconcile_duration_seconds",
                "Time for one reconcile of one control plane",
                Family::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.001, 2.0, 14))
                }),
            ),
            operations: registered(
                r,
                "membership_operations",
                "Actions performed, by kind and outcome",
                Family::default(),
            ),
            up_to_date: registered(
                r,
                "rollout_up_to_date_ratio",
                "Machines at the spec's version over replicas",
                Family::default(),
            ),
            quorum_margin: registered(
                r,
                "quorum_margin",
                "Healthy voters minus the quorum size (0: one more failure loses quorum)",
                Family::default(),
            ),
            unhealthy: registered(
                r,
                "unhealthy_members",
                "Members with a problem now (the health model's)",
                Family::default(),
            ),
            crash_loops: registered(
                r,
                "crash_loops",
                "Crash loops that started (a member's process kept exiting after its starts)",
                Family::default(),
            ),
            by_state: registered(r, "control_planes", by_state, Family::default()),
            verifications: registered(
                r,
                "snapshot_verifications",
                verifications,
                Family::default(),
            ),
        }
    }
}

impl ReplicaFigures {
    fn register(r: &mut Registry) -> Self {
        let store_up =
            "1 while a member of the management etcd serves requests (has a leader), else 0";
        ReplicaFigures {
            queue_depth: registered(
                r,
                "reconcile_queue_depth",
                "Control planes due for a pass and waiting for a permit (--concurrency)",
                Gauge::default(),
            ),
            in_flight: registered(
                r,
                "reconciles_in_flight",
                "Reconciles running now",
                Gauge::default(),
            ),
            tasks: registered(
                r,
                "control_plane_tasks",
                "Control planes this replica runs a task for (its share of the fleet)",
                Gauge::default(),
            ),
            open: registered(
                r,
                "open_control_planes",
                "Control planes whose connections are open (cached)",
                Gauge::default(),
            ),
            leader: registered(
                r,
                "leader",
                "1 while this replica leads the controllers of its store",
                Gauge::default(),
            ),
            shards_held: registered(
                r,
                "shards_held",
                "Shards this replica leads (--shards; 0 without)",
                Gauge::default(),
            ),
            replicas: registered(
                r,
                "controller_replicas",
                "Live controller replicas this replica sees (--shards; 0 without)",
                Gauge::default(),
            ),
            store_up: registered(r, "store_endpoint_up", store_up, Family::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn exposition_names_every_metric() {
        let m = Metrics::new();
        m.reconciled("prod", "acted", 0.004);
        m.state("prod", "rolling");
        m.state("prod", "converged");
        m.state("dev", "blocked");
        m.queued(1);
        // Two shards' fleets add up; a shard given up leaves the sums.
        m.fleet("shard/0", 1, 1, 1);
        m.fleet("shard/1", 1, 0, 1);
        m.fleet("shard/2", 5, 5, 5);
        m.leading("shard/0", true);
        m.leading("shard/1", true);
        m.leading("shard/2", true);
        m.forget_scope("shard/2");
        m.replicas(3);
        m.operation("add-learner", "refused");
        m.operation("add-learner", "ok");
        m.control_plane("prod", 0.5, 1);
        m.health("prod", 1, 1);
        let up = |endpoint: &str, up: bool| quorum_store::EndpointHealth {
            endpoint: endpoint.into(),
            up,
            leader: false,
            version: None,
            error: None,
            down_for_ms: None,
        };
        m.store_endpoints(&[up("http://a:2379", true), up("http://b:2379", false)]);
        let text = m.encode();
        for want in [
            "quorum_reconciles_total{outcome=\"acted\"} 1",
            "quorum_reconcile_duration_seconds_count{control_plane=\"prod\"} 1",
            "quorum_control_planes{state=\"converged\"} 1",
            "quorum_control_planes{state=\"rolling\"} 0",
            "quorum_control_planes{state=\"blocked\"} 1",
            "quorum_reconcile_queue_depth 1",
            "quorum_reconciles_in_flight 1",
            "quorum_control_plane_tasks 2",
            "quorum_open_control_planes 2",
            "quorum_leader 1",
            "quorum_shards_held 2",
            "quorum_controller_replicas 3",
            "quorum_membership_operations_total{kind=\"add-learner\",outcome=\"refused\"} 1",
            "quorum_rollout_up_to_date_ratio{control_plane=\"prod\"} 0.5",
            "quorum_quorum_margin{control_plane=\"prod\"} 1",
            "quorum_unhealthy_members{control_plane=\"prod\"} 1",
            "quorum_crash_loops_total{control_plane=\"prod\"} 1",
            "quorum_store_endpoint_up{endpoint=\"http://a:2379\"} 1",
            "quorum_store_endpoint_up{endpoint=\"http://b:2379\"} 0",
            "# EOF",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        m.forget("prod");
        assert!(!m.encode().contains("control_plane=\"prod\""));
    }

    #[tokio::test]
    async fn the_endpoint_serves_metrics_and_refuses_other_paths() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let m = Arc::new(Metrics::new());
        m.control_plane("x", 1.0, 0);
        let stop = Arc::new(AtomicBool::new(false));
        let server = tokio::spawn(serve(listener, m, stop.clone()));
        let get = |path: &'static str| async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut s = String::new();
            c.read_to_string(&mut s).await.unwrap();
            s
        };
        let ok = get("/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains("quorum_quorum_margin{control_plane=\"x\"} 0"),
            "{ok}"
        );
        assert!(get("/").await.starts_with("HTTP/1.1 404"));
        stop.store(true, Ordering::Relaxed);
        server.await.unwrap();
    }
}
