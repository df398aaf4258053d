//! Requests to an etcd cluster through whichever of its members can serve them, as a
//! careful etcd client makes them: one client per endpoint (never one balanced channel,
//! which returns the error of whichever endpoint it picked), the core's `EndpointSet` to
//! choose the member (`quorum_core::failover`), a deadline per attempt and per call, and
//! a task that probes the members in the background.
//!
//! Linearizable: every client sets etcd's require-leader flag, so a member without a
//! leader (partitioned, or during an election) answers "no leader" at once instead of
//! waiting, and the request moves on. Reads are etcd's default, linearizable: a
//! partitioned member cannot confirm the leader's commit index and never serves one.
//! quorum sends no serializable read through this.
//!
//! Used for the management etcd (`quorum-store`) and the benchmark's clients.

use etcd_client::{Client, ConnectOptions};
use quorum_core::failover::{
    is_connect_error, next_after_error, EndpointHealth, EndpointSet, Next, ATTEMPT_TIMEOUT_MS,
    CALL_TIMEOUT_MS, NO_ANSWER, PROBE_TIMEOUT_MS, ROUND_BACKOFF,
};
use quorum_core::GrpcCode;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often the probing task looks for members due a probe.
const PROBE_TICK_MS: u64 = 100;

/// The deadlines of a `Failover` (the core's by default; tests shorten them).
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    pub attempt_ms: u64,
    pub call_ms: u64,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            attempt_ms: ATTEMPT_TIMEOUT_MS,
            call_ms: CALL_TIMEOUT_MS,
        }
    }
}

/// A call's value, and how it was obtained.
#[derive(Debug)]
pub struct Served<T> {
    pub value: T,
    /// The member that served it.
    pub endpoint: String,
    /// An earlier attempt of this call failed in a way that may have applied it (a
    /// timeout, a broken connection, a leader change): for a write, a "compare failed"
    /// answer may mean that the earlier attempt landed. The caller reads back to decide.
    pub maybe_applied_before: bool,
    /// Attempts made (1: the first member asked served it).
    pub attempts: u32,
}

/// Which failed attempts a call goes on from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Every attempt a member could not serve: reads, and writes that are safe to repeat
    /// (compare-and-swap transactions, which never apply twice).
    Always,
    /// Only attempts that certainly did not reach the cluster (a refused connection, a
    /// learner's refusal): a plain write, as etcd's own Go client treats one.
    UnlessMaybeApplied,
}

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FailoverError {
    /// etcd's answer about the request itself (another member would say the same).
    #[error("{endpoint}: {message}")]
    Answer {
        endpoint: String,
        code: GrpcCode,
        message: String,
    },
    /// An attempt failed in a way that may have applied it, and the call was not to be
    /// repeated then (`Retry::UnlessMaybeApplied`).
    #[error("{endpoint}: {message} (it may have been applied; not repeated)")]
    MaybeApplied {
        endpoint: String,
        code: GrpcCode,
        message: String,
    },
    /// No member served it within the call's deadline.
    #[error("no member served the request within {waited_ms} ms ({})", tried_text(.tried))]
    Unavailable {
        waited_ms: u64,
        /// The last error of each member asked, by endpoint.
        tried: Vec<(String, String)>,
        /// Some attempt may have applied it.
        maybe_applied: bool,
        /// Every member's state after the call.
        health: Vec<EndpointHealth>,
    },
}

fn tried_text(tried: &[(String, String)]) -> String {
    tried
        .iter()
        .map(|(e, why)| format!("{e}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a call has been through so far.
struct Call {
    /// The last error of each member asked, by endpoint.
    tried: Vec<(String, String)>,
    /// Some attempt may have applied it.
    maybe_applied: bool,
    attempts: u32,
}

/// What one attempt of a call came to.
enum Attempt<T> {
    /// The call ends with this.
    Ends(Result<Served<T>, FailoverError>),
    /// The member could not serve it, for this reason: another is asked.
    Failed(String),
}

/// The clients of one cluster and what is known of its members.
pub struct Failover {
    endpoints: Vec<String>,
    clients: Vec<Client>,
    set: Mutex<EndpointSet>,
    origin: Instant,
    deadlines: Deadlines,
}

/// The code and message of a client error: gRPC's for a status, and the transport's
/// (as unavailable, or unknown) otherwise.
pub fn code_and_message(e: &etcd_client::Error) -> (GrpcCode, String) {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            (GrpcCode::from_i32(s.code() as i32), s.message().to_string())
        }
        etcd_client::Error::TransportError(t) => (GrpcCode::Unavailable, t.to_string()),
        other => (GrpcCode::Unknown, other.to_string()),
    }
}

impl Failover {
    /// One client per endpoint (connected lazily: nothing is sent yet), with `opts` (TLS)
    /// plus the require-leader flag and the attempt deadline; requests go to `first`
    /// first. Fails only for an endpoint that is not a URL.
    pub async fn connect(
        endpoints: &[String],
        opts: ConnectOptions,
        deadlines: Deadlines,
        first: usize,
    ) -> Result<Failover, etcd_client::Error> {
        let attempt = Duration::from_millis(deadlines.attempt_ms);
        let opts = opts
            .with_require_leader(true)
            .with_connect_timeout(attempt)
            .with_timeout(attempt)
            // A connection whose peer stopped answering is closed, not waited on.
            .with_keep_alive(attempt, attempt);
        let mut clients = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            clients.push(Client::connect([e], Some(opts.clone())).await?);
        }
        Ok(Failover {
            endpoints: endpoints.to_vec(),
            clients,
            set: Mutex::new(EndpointSet::new(endpoints.len(), first)),
            origin: Instant::now(),
            deadlines,
        })
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, EndpointSet> {
        // Plain data: usable after a panic elsewhere.
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The member asked first now (the one that served last).
    pub fn preferred(&self) -> usize {
        self.lock().preferred()
    }

    /// Asks member `i` first from now on (until another serves).
    pub fn prefer(&self, i: usize) {
        if i < self.endpoints.len() {
            let now = self.now_ms();
            self.lock().served(i, now);
        }
    }

    /// What is known of every member now.
    pub fn health(&self) -> Vec<EndpointHealth> {
        let now = self.now_ms();
        self.lock().health(&self.endpoints, now)
    }

    /// Runs `f` with a member's client until one serves it: the member that served last
    /// first, each attempt within the attempt deadline, every member once per round, and
    /// rounds until the call's deadline (an election ends within it), or until a round in
    /// which most members refused the connection (they are down: the cluster has lost its
    /// quorum, said at once). `f` is called once per attempt.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<Served<T>, FailoverError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_with(Retry::Always, f).await
    }

    /// `call`, going on from failed attempts as `retry` says.
    pub async fn call_with<T, F, Fut>(
        &self,
        retry: Retry,
        mut f: F,
    ) -> Result<Served<T>, FailoverError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(self.deadlines.call_ms);
        let mut call = Call {
            tried: Vec::new(),
            maybe_applied: false,
            attempts: 0,
        };
        let mut round = 0u32;
        loop {
            let order = self.lock().order();
            let mut refused = 0;
            for i in order {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let limit = left.min(Duration::from_millis(self.deadlines.attempt_ms));
                let attempt_started = Instant::now();
                call.attempts += 1;
                let why = match self.attempt(i, limit, retry, &mut f, &mut call).await {
                    Attempt::Ends(result) => return result,
                    Attempt::Failed(why) => why,
                };
                if self.note_failure(i, why, attempt_started, &mut call) {
                    refused += 1;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || refused > self.endpoints.len() / 2 {
                return Err(FailoverError::Unavailable {
                    waited_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                    tried: call.tried,
                    maybe_applied: call.maybe_applied,
                    health: self.health(),
                });
            }
            round = round.saturating_add(1);
            let pause = Duration::from_millis(ROUND_BACKOFF.delay_ms(round, rand::random()));
            tokio::time::sleep(pause.min(left)).await;
        }
    }

    /// One attempt of a call with member `i`'s client, within `limit`: the call ends
    /// (served, answered, or failed in a way `retry` does not go on from), or the
    /// member could not serve it.
    async fn attempt<T, F, Fut>(
        &self,
        i: usize,
        limit: Duration,
        retry: Retry,
        f: &mut F,
        call: &mut Call,
    ) -> Attempt<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let endpoint = &self.endpoints[i];
        match tokio::time::timeout(limit, f(self.clients[i].clone())).await {
            Ok(Ok(value)) => {
                self.lock().served(i, self.now_ms());
                Attempt::Ends(Ok(Served {
                    value,
                    endpoint: endpoint.clone(),
                    maybe_applied_before: call.maybe_applied,
                    attempts: call.attempts,
                }))
            }
            Ok(Err(e)) => {
                let (code, message) = code_and_message(&e);
                match next_after_error(code, &message) {
                    Next::Return => {
                        // It answered: it serves.
                        self.lock().served(i, self.now_ms());
                        Attempt::Ends(Err(FailoverError::Answer {
                            endpoint: endpoint.clone(),
                            code,
                            message,
                        }))
                    }
                    Next::TryAnother { maybe_applied: m } => {
                        call.maybe_applied |= m;
                        if m && retry == Retry::UnlessMaybeApplied {
                            self.lock()
                                .failed(i, self.now_ms(), &message, rand::random());
                            return Attempt::Ends(Err(FailoverError::MaybeApplied {
                                endpoint: endpoint.clone(),
                                code,
                                message,
                            }));
                        }
                        Attempt::Failed(one_line(&message))
                    }
                }
            }
            Err(_) => {
                call.maybe_applied = true;
                let why = format!("{NO_ANSWER} {} ms", limit.as_millis());
                if retry == Retry::UnlessMaybeApplied {
                    self.lock().failed(i, self.now_ms(), &why, rand::random());
                    return Attempt::Ends(Err(FailoverError::MaybeApplied {
                        endpoint: endpoint.clone(),
                        code: GrpcCode::DeadlineExceeded,
                        message: why,
                    }));
                }
                Attempt::Failed(why)
            }
        }
    }

    /// Records that member `i` could not serve the call (`why`), for the set and for
    /// the call's error; true if it refused the connection.
    fn note_failure(
        &self,
        i: usize,
        why: String,
        attempt_started: Instant,
        call: &mut Call,
    ) -> bool {
        let endpoint = &self.endpoints[i];
        tracing::debug!(
            endpoint = %endpoint,
            after_ms = attempt_started.elapsed().as_millis() as u64,
            "attempt failed, asking another member: {why}"
        );
        // Refused connections only: a member that does not answer in time may be a
        // follower waiting on a leader that just died (an election, not a loss).
        let refused = is_connect_error(&why);
        self.lock().failed(i, self.now_ms(), &why, rand::random());
        match call.tried.iter_mut().find(|(e, _)| e == endpoint) {
            Some(t) => t.1 = why,
            None => call.tried.push((endpoint.clone(), why)),
        }
        refused
    }

    /// Probes member `i` (its status, within `PROBE_TIMEOUT_MS`): in service if it
    /// answers with a leader, set aside otherwise.
    pub async fn probe(&self, i: usize) {
        let Some(client) = self.clients.get(i) else {
            return;
        };
        self.lock().probing(i, self.now_ms());
        let mut c = client.clone();
        let limit = Duration::from_millis(PROBE_TIMEOUT_MS.min(self.deadlines.attempt_ms));
        let res = tokio::time::timeout(limit, c.status()).await;
        let now = self.now_ms();
        match res {
            Ok(Ok(st)) if st.leader() != 0 => {
                let me = st.header().map_or(0, |h| h.member_id());
                let version = Some(st.version().to_string()).filter(|v| !v.is_empty());
                self.lock().probed(i, now, me == st.leader(), version);
            }
            Ok(Ok(_)) => self.lock().failed(i, now, "no leader", rand::random()),
            Ok(Err(e)) => {
                let (_, message) = code_and_message(&e);
                self.lock()
                    .failed(i, now, &one_line(&message), rand::random());
            }
            Err(_) => self.lock().failed(
                i,
                now,
                &format!("{NO_ANSWER} {} ms", limit.as_millis()),
                rand::random(),
            ),
        }
    }

    /// Probes every member at once and returns what is then known (for a one-shot reader
    /// such as `quorum status`, which has no probing task).
    pub async fn probe_all(&self) -> Vec<EndpointHealth> {
        futures::future::join_all((0..self.clients.len()).map(|i| self.probe(i))).await;
        self.health()
    }

    /// Probes the members that are due (set aside: by their backoff; in service: every
    /// `PROBE_EVERY_MS`) until the returned task is aborted.
    pub fn spawn_prober(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let due = {
                    let now = me.now_ms();
                    let mut set = me.lock();
                    let due = set.probes_due(now);
                    // Not due again while this probe runs.
                    for i in &due {
                        set.probing(*i, now);
                    }
                    due
                };
                for i in due {
                    let m = me.clone();
                    // Each probe on its own: a member that hangs does not hold the others.
                    tokio::spawn(async move { m.probe(i).await });
                }
                tokio::time::sleep(Duration::from_millis(PROBE_TICK_MS)).await;
            }
        })
    }
}

fn one_line(s: &str) -> String {
    s.trim().replace('\n', "; ")
}
