//! The benchmark's clients: each call through the failover client with its deadline,
//! its failure classified by the core's one classifier, and the loop that paces them.

use super::*;

/// A call's failure through the core's one classifier: etcd's answer (or the
/// transport's) when a member gave one, "timed out" when none answered in time.
pub(super) fn op_error(e: FailoverError) -> OpError {
    let kind = match &e {
        FailoverError::Answer { code, message, .. }
        | FailoverError::MaybeApplied { code, message, .. } => ClientErrorKind::of(*code, message),
        FailoverError::Unavailable { tried, .. }
            if !tried.is_empty()
                && tried
                    .iter()
                    .all(|(_, why)| why.starts_with(quorum_core::failover::NO_ANSWER)) =>
        {
            ClientErrorKind::TimedOut
        }
        FailoverError::Unavailable { .. } => ClientErrorKind::Unavailable,
    };
    (kind, e.to_string())
}

pub fn read_endpoints(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v["endpoints"].as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// A client of the members at `endpoints`: one connection per member, requests to the
/// member that served last and on to the next when it cannot serve (the failover client
/// the store uses), within the client's deadline.
pub(super) async fn connect(
    endpoints: &[String],
    tls: Option<&ClientTls>,
) -> Result<Failover, OpError> {
    let unavailable = |m: String| (ClientErrorKind::Unavailable, m);
    if endpoints.is_empty() {
        return Err(unavailable("no endpoint to connect to".into()));
    }
    let deadlines = Deadlines {
        attempt_ms: quorum_core::failover::ATTEMPT_TIMEOUT_MS.min(OP_TIMEOUT_MS),
        call_ms: OP_TIMEOUT_MS,
    };
    // Clients start on different members, as a fleet of them would.
    let first = rand::random::<u32>() as usize % endpoints.len();
    Failover::connect(endpoints, demo::client_options(tls), deadlines, first)
        .await
        .map_err(|e| unavailable(format!("connecting to {endpoints:?}: {e}")))
}

/// Connects before the workload starts, so that the measurement holds the rollout and
/// not the clients' start-up.
pub(super) async fn connect_first(
    source: &Source,
    tls: Option<&ClientTls>,
) -> Result<Failover, OpError> {
    let start = Instant::now();
    loop {
        match connect(&source.endpoints(), tls).await {
            Ok(c) => return Ok(c),
            Err(e) if start.elapsed() > Duration::from_millis(WARM_UP_LIMIT_MS) => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(ENDPOINTS_POLL_MS)).await,
        }
    }
}

/// A linearizable read, asked of another member when one cannot serve it (a read is safe
/// to repeat: etcd's own Go client repeats it too). Returns the attempts it took.
pub(super) async fn read(c: &Failover) -> Result<u32, OpError> {
    c.call_with(Retry::Always, |mut c| async move {
        c.get("bench/probe", None).await
    })
    .await
    .map(|s| s.attempts)
    .map_err(op_error)
}

/// A write, asked of another member only when it certainly did not reach the cluster
/// (a write is never repeated once it may have been applied, as etcd's Go client does).
pub(super) async fn write_op(c: &Failover, key: &str, value: &str) -> Result<(), OpError> {
    c.call_with(Retry::UnlessMaybeApplied, |mut c| {
        let (k, v) = (key.to_string(), value.to_string());
        async move { c.put(k, v, None).await }
    })
    .await
    .map(drop)
    .map_err(op_error)
}

/// Where a client finds the members.
#[derive(Clone)]
pub(super) enum Source {
    /// An endpoints file, looked at every `ENDPOINTS_POLL_MS`.
    File(PathBuf),
    /// A fixed address (a load balancer).
    Fixed(Vec<String>),
}

impl Source {
    pub(super) fn endpoints(&self) -> Vec<String> {
        match self {
            Source::File(p) => read_endpoints(p),
            Source::Fixed(v) => v.clone(),
        }
    }
}

/// One client: paced operations, following its source of endpoints.
#[allow(clippy::too_many_arguments)]
pub(super) async fn client_loop(
    id: u32,
    source: Source,
    tls: Option<ClientTls>,
    interval: Duration,
    write_ratio: f64,
    ready: Arc<tokio::sync::Barrier>,
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<Op>>>,
    acked: Arc<Mutex<Vec<(String, String)>>>,
) {
    let mut seq: u64 = 0;
    let mut current = source.endpoints();
    let mut client = connect_first(&source, tls.as_ref()).await;
    ready.wait().await;
    let mut last_check = Instant::now();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Writes and reads interleave deterministically at the requested ratio.
    let mut write_credit = 0.0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        if last_check.elapsed() >= Duration::from_millis(ENDPOINTS_POLL_MS) {
            last_check = Instant::now();
            let now = source.endpoints();
            if !now.is_empty() && (now != current || client.is_err()) {
                current = now;
                client = connect(&current, tls.as_ref()).await;
            }
        }
        write_credit += write_ratio;
        let write = write_credit >= 1.0;
        if write {
            write_credit -= 1.0;
        }
        let start_ms = now_ms();
        let started = Instant::now();
        let mut retried = false;
        let result: Result<(), OpError> = match client.as_ref() {
            Err(e) => Err(e.clone()),
            Ok(c) if write => {
                seq += 1;
                let key = format!("{KEY_PREFIX}{id:03}-{seq:08}");
                let value = format!("{id}-{seq}-{start_ms}");
                let r = write_op(c, &key, &value).await;
                if r.is_ok() {
                    acked
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((key, value));
                }
                r
            }
            Ok(c) => read(c).await.map(|attempts| retried = attempts > 1),
        };
        let op = Op {
            start_ms,
            end_ms: now_ms(),
            latency_us: started.elapsed().as_micros() as u64,
            write,
            retried,
            error: result.err(),
        };
        let mut all = ops.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() < MAX_OPS {
            all.push(op);
        }
    }
}
