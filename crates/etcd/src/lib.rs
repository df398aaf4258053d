//! quorum-etcd: the etcd adapter. Observes members (per-member status through each
//! member's own endpoint; the member list asked of the leader) and changes membership
//! (add learner, promote, move leader, remove), always with a timeout, always treating
//! "already done" as success.
//!
//! Architecture invariant: this crate decides nothing. It translates between etcd's
//! API and `quorum-core`'s data; the only judgement it makes is classifying etcd's
//! answers (done, already done, refused for now, failed), and that through the core's
//! one classifier (`quorum_core::classify`), which the simulator's etcd answers through
//! too.

pub mod failover;
mod http;
mod maintenance;
mod snapshot;
mod tls;

pub use maintenance::{DEFRAG_TIMEOUT_MS, QUORUM_READ_KEY};
pub use snapshot::{SnapshotStreamError, SNAPSHOT_IDLE_TIMEOUT_MS, SNAPSHOT_TIMEOUT_MS};

pub use tls::{ClientTls, TlsError};

use etcd_client::{AlarmAction, AlarmType, Client, ConnectOptions, MemberAddOptions};
use quorum_core::{EndpointStatus, EtcdCall, GrpcCode, Member, Refusal, Verdict, Version};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_rustls::rustls;

/// Time limits for every kind of call. Loopback etcd answers in milliseconds; the limits
/// bound how long an unreachable member can hold an observation.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub connect_ms: u64,
    /// Status, member list, alarms, version: the observation.
    pub observe_ms: u64,
    /// Membership changes and leader moves.
    pub change_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_ms: 500,
            observe_ms: 1_000,
            change_ms: 5_000,
        }
    }
}

/// What went wrong talking to etcd.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EtcdError {
    #[error("{op} at {endpoint}: no answer within {timeout_ms} ms")]
    Timeout {
        op: &'static str,
        endpoint: String,
        timeout_ms: u64,
    },
    #[error("{op} at {endpoint}: unreachable: {message}")]
    Unreachable {
        op: &'static str,
        endpoint: String,
        message: String,
    },
    /// etcd said no for now (strict reconfiguration check, learner not in sync, no
    /// leader, ...): try again after a backoff.
    #[error("{op} at {endpoint}: refused for now: {message}")]
    Refused {
        op: &'static str,
        endpoint: String,
        message: String,
        refusal: Refusal,
    },
    #[error("{op} at {endpoint}: {message}")]
    Failed {
        op: &'static str,
        endpoint: String,
        message: String,
    },
}

impl EtcdError {
    /// A refusal that clears by itself (retry soon), as opposed to a failure.
    pub fn is_refusal(&self) -> bool {
        matches!(self, EtcdError::Refused { .. })
    }

    /// Why etcd said no for now, in words for people (`None`: not a refusal).
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            EtcdError::Refused { refusal, .. } => Some(refusal.reason()),
            EtcdError::Timeout { .. } => Some(Refusal::TimedOut.reason()),
            EtcdError::Unreachable { .. } | EtcdError::Failed { .. } => None,
        }
    }

    /// What etcd (or the transport) said.
    pub fn message(&self) -> &str {
        match self {
            EtcdError::Timeout { .. } => "timed out",
            EtcdError::Unreachable { message, .. }
            | EtcdError::Refused { message, .. }
            | EtcdError::Failed { message, .. } => message,
        }
    }
}

/// What a call to etcd came to, when etcd did not refuse it.
enum Answered<T> {
    Done(T),
    /// etcd's answer says an earlier call did it (its answer was lost).
    AlreadyDone,
}

/// An error answer that means success: the change was made by an earlier call.
struct AlreadyDone;

/// etcd's answer to `call` through the core's one classifier (`quorum_core::classify`).
fn classify(
    op: &'static str,
    endpoint: &str,
    call: EtcdCall,
    err: etcd_client::Error,
) -> Result<AlreadyDone, EtcdError> {
    let endpoint = endpoint.to_string();
    let (verdict, message) = match err {
        etcd_client::Error::GRpcStatus(status) => {
            let code = GrpcCode::from_i32(status.code() as i32);
            let message = status.message().to_string();
            (quorum_core::classify(call, code, &message), message)
        }
        etcd_client::Error::TransportError(e) => (Verdict::Unreachable, e.to_string()),
        other => (Verdict::Failed, other.to_string()),
    };
    match verdict {
        Verdict::AlreadyDone => Ok(AlreadyDone),
        Verdict::Refused(refusal) => Err(EtcdError::Refused {
            op,
            endpoint,
            message,
            refusal,
        }),
        Verdict::Unreachable => Err(EtcdError::Unreachable {
            op,
            endpoint,
            message,
        }),
        // `Done` is the answer of a call that succeeded: not an error's.
        Verdict::Done | Verdict::Failed => Err(EtcdError::Failed {
            op,
            endpoint,
            message,
        }),
    }
}

/// Talks to the members of one control plane (or several plaintext ones); keeps one
/// client per endpoint.
pub struct Etcd {
    clients: Mutex<HashMap<String, Client>>,
    timeouts: Timeouts,
    /// Mutual TLS: the gRPC options and the rustls configuration for `/version` and
    /// `/health`. `None`: plain HTTP (`http://` endpoints only).
    tls: Option<(ClientTls, Arc<rustls::ClientConfig>)>,
}

impl Default for Etcd {
    fn default() -> Self {
        Etcd::new(Timeouts::default())
    }
}

/// What the member list and statuses said, before matching to machines.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    /// By endpoint (client URL): the status or why there is none.
    pub statuses: HashMap<String, Result<EndpointStatus, EtcdError>>,
    /// From the leader, when one could be found and asked.
    pub members: Option<Vec<Member>>,
    /// The client URL the member list came from (the leader's).
    pub leader_url: Option<String>,
    pub cluster_version: Option<Version>,
    /// By endpoint, for every voter whose status answered: whether a linearizable read
    /// through it answered within `observe_ms` (`Etcd::quorum_read`). Learners serve
    /// no linearizable reads, so they have no entry; nor has an endpoint whose status
    /// did not answer.
    pub quorum_reads: HashMap<String, bool>,
    /// Every active alarm in the cluster, as (member id, alarm name: `NOSPACE`,
    /// `CORRUPT`), from the leader's alarm list, or from the members' statuses when no
    /// leader could be asked. The pairs `Etcd::disarm` takes.
    pub alarms: Vec<(u64, String)>,
    /// Whether the keyspace is compacted up to the leader's current revision
    /// (`Etcd::compacted`): asked of the leader only while some member has a NOSPACE
    /// alarm (`None` otherwise, or when the leader did not answer).
    pub compacted: Option<bool>,
}

/// What the leader answered during an observation.
struct LeaderAnswers {
    url: String,
    members: Vec<Member>,
    alarms: Option<Vec<(u64, String)>>,
    cluster_version: Option<Version>,
}

impl Etcd {
    pub fn new(timeouts: Timeouts) -> Self {
        Etcd {
            clients: Mutex::new(HashMap::new()),
            timeouts,
            tls: None,
        }
    }

    /// A client for the members of one control plane that speaks mutual TLS with
    /// `tls` (checked here: credentials that do not parse are refused up front).
    pub fn with_tls(timeouts: Timeouts, tls: ClientTls) -> Result<Self, TlsError> {
        let config = tls.rustls_config()?;
        Ok(Etcd {
            tls: Some((tls, config)),
            ..Etcd::new(timeouts)
        })
    }

    /// Plain HTTP or mutual TLS, as the credentials say.
    pub fn for_credentials(timeouts: Timeouts, tls: Option<ClientTls>) -> Result<Self, TlsError> {
        match tls {
            Some(t) => Etcd::with_tls(timeouts, t),
            None => Ok(Etcd::new(timeouts)),
        }
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// A client for exactly one endpoint (never balanced across members: a status must
    /// come from the member asked, and a membership change must go to the leader).
    async fn client(&self, endpoint: &str) -> Result<Client, EtcdError> {
        if let Some(c) = self.lock().get(endpoint) {
            return Ok(c.clone());
        }
        let client = self.connect_one(endpoint, self.timeouts.change_ms).await?;
        self.lock().insert(endpoint.to_string(), client.clone());
        Ok(client)
    }

    /// A new connection to exactly one endpoint whose every request is cut off by gRPC
    /// after `request_timeout_ms` (each call bounds itself too; this is the backstop).
    async fn connect_one(
        &self,
        endpoint: &str,
        request_timeout_ms: u64,
    ) -> Result<Client, EtcdError> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(self.timeouts.connect_ms))
            .with_timeout(Duration::from_millis(request_timeout_ms))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
        if let Some((tls, _)) = &self.tls {
            opts = opts.with_tls(tls.grpc_options());
        }
        let fut = Client::connect([endpoint], Some(opts));
        bounded("connect", endpoint, self.timeouts.connect_ms, fut).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Client>> {
        // A panic while holding this lock leaves a plain map behind: still usable.
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the cached client of an endpoint (after a failure, or when a machine goes).
    pub fn forget(&self, endpoint: &str) {
        self.lock().remove(endpoint);
    }

    /// The status a member reports about itself, with its own alarms (`alarms` holds
    /// the names of the alarms raised by this member only: `NOSPACE`, `CORRUPT`; etcd
    /// reports every member's alarms in every status, and `ClusterView::alarms` keeps
    /// them all).
    pub async fn status(&self, endpoint: &str) -> Result<EndpointStatus, EtcdError> {
        self.status_with_alarms(endpoint).await.map(|(st, _)| st)
    }

    /// The status, and every alarm active in the cluster as this member knows them.
    async fn status_with_alarms(
        &self,
        endpoint: &str,
    ) -> Result<(EndpointStatus, Vec<(u64, String)>), EtcdError> {
        let mut c = self.client(endpoint).await?;
        let t = self.timeouts.observe_ms;
        let res = bounded("status", endpoint, t, async { c.status().await }).await;
        let st = match res {
            Ok(st) => st,
            Err(e) => {
                self.forget(endpoint);
                return Err(e);
            }
        };
        let member_id = st.header().map(|h| h.member_id()).unwrap_or(0);
        let cluster_id = st.header().map(|h| h.cluster_id()).unwrap_or(0);
        let revision = st.header().map(|h| h.revision()).unwrap_or(0);
        let (own, all) = maintenance::status_errors(member_id, st.errors());
        let status = EndpointStatus {
            member_id,
            leader_id: st.leader(),
            raft_term: st.raft_term(),
            raft_index: st.raft_index(),
            raft_applied_index: st.raft_applied_index(),
            version: st.version().parse().ok(),
            is_learner: st.is_learner(),
            alarms: own,
            cluster_id,
            revision,
            db_size_bytes: u64::try_from(st.db_size()).unwrap_or(0),
            db_size_in_use_bytes: u64::try_from(st.raft_used_db_size()).unwrap_or(0),
        };
        Ok((status, all))
    }

    pub async fn member_list(&self, endpoint: &str) -> Result<Vec<Member>, EtcdError> {
        let mut c = self.client(endpoint).await?;
        let t = self.timeouts.observe_ms;
        let res = bounded("member list", endpoint, t, async { c.member_list().await }).await?;
        Ok(res
            .members()
            .iter()
            .map(|m| Member {
                id: m.id(),
                name: m.name().to_string(),
                peer_urls: m.peer_urls().to_vec(),
                client_urls: m.client_urls().to_vec(),
                is_learner: m.is_learner(),
            })
            .collect())
    }

    /// Active alarms by member id, as the asked member knows them.
    pub async fn alarms(&self, endpoint: &str) -> Result<Vec<(u64, String)>, EtcdError> {
        let mut c = self.client(endpoint).await?;
        let t = self.timeouts.observe_ms;
        let res = bounded("alarm list", endpoint, t, async {
            c.alarm(AlarmAction::Get, AlarmType::None, None).await
        })
        .await?;
        Ok(res
            .alarms()
            .iter()
            .map(|a| {
                (
                    a.member_id(),
                    maintenance::alarm_name(a.alarm()).to_string(),
                )
            })
            .collect())
    }

    /// The cluster version (`etcdcluster` of the `/version` endpoint): the version the
    /// whole cluster speaks, which moves up only when every member runs the new one.
    pub async fn cluster_version(&self, endpoint: &str) -> Result<Option<Version>, EtcdError> {
        let t = self.timeouts.observe_ms;
        let get = http::get(endpoint, "/version", self.rustls());
        let (_, body) = bounded_io("version", endpoint, t, get).await?;
        Ok(
            http::cluster_version_field(&body)
                .and_then(|v| Version::parse_cluster_version(&v).ok()),
        )
    }

    /// A member's own `/health`: `Ok` when it answers 200 with `"health":"true"`.
    pub async fn health(&self, endpoint: &str) -> Result<(), EtcdError> {
        let t = self.timeouts.observe_ms;
        let get = http::get(endpoint, "/health", self.rustls());
        let (status, body) = bounded_io("health", endpoint, t, get).await?;
        if status == 200 && http::says_healthy(&body) {
            Ok(())
        } else {
            // Not a refusal of a call: the member says it is not healthy (yet).
            Err(EtcdError::Failed {
                op: "health",
                endpoint: endpoint.to_string(),
                message: format!("HTTP {status}: {}", String::from_utf8_lossy(&body).trim()),
            })
        }
    }

    fn rustls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.tls.as_ref().map(|(_, c)| c.clone())
    }

    /// Observes a cluster through the given client URLs: every status in parallel; then,
    /// at the same time, a quorum read through every voter that answered (in parallel)
    /// and the member list, alarms and cluster version from the leader; last, only
    /// while some member has a NOSPACE alarm, whether the leader's keyspace is compacted.
    /// Every call is bounded, and a hung member holds up the others by at most one
    /// bound: its status, or (answering its status but without a quorum) its read,
    /// which runs beside the leader's calls.
    pub async fn observe(&self, endpoints: &[String]) -> ClusterView {
        let answers =
            futures::future::join_all(endpoints.iter().map(|e| self.status_with_alarms(e))).await;
        let mut reported: Vec<(u64, String)> = Vec::new();
        let mut view = ClusterView::default();
        for (endpoint, answer) in endpoints.iter().zip(answers) {
            let answer = answer.map(|(st, all)| {
                for a in all {
                    if !reported.contains(&a) {
                        reported.push(a);
                    }
                }
                st
            });
            view.statuses.insert(endpoint.clone(), answer);
        }
        // A learner serves no linearizable read ("rpc not supported for learner"):
        // it is not asked, rather than seen failing.
        let voters: Vec<&String> = view
            .statuses
            .iter()
            .filter(|(_, r)| r.as_ref().is_ok_and(|s| !s.is_learner))
            .map(|(e, _)| e)
            .collect();
        let reads = futures::future::join_all(
            voters
                .iter()
                .map(|e| async move { ((*e).clone(), self.quorum_read(e).await.is_ok()) }),
        );
        let (reads, leader) = tokio::join!(reads, self.ask_leader(&view.statuses));
        view.quorum_reads = reads.into_iter().collect();
        // The leader's alarm list is the cluster's; without it, what the members said.
        let alarms = leader
            .as_ref()
            .and_then(|l| l.alarms.clone())
            .unwrap_or(reported);
        for (member, alarm) in &alarms {
            for st in view.statuses.values_mut().flatten() {
                if st.member_id == *member && !st.alarms.contains(alarm) {
                    st.alarms.push(alarm.clone());
                }
            }
        }
        view.alarms = alarms;
        let Some(leader) = leader else {
            return view;
        };
        view.members = Some(leader.members);
        view.cluster_version = leader.cluster_version;
        let nospace = view.alarms.iter().any(|(_, a)| a == maintenance::NOSPACE);
        if nospace {
            // The leader's own revision; an orphan leader answered no status of ours,
            // so the highest revision a member reports stands in for it.
            let revision = view
                .statuses
                .get(&leader.url)
                .and_then(|r| r.as_ref().ok())
                .or_else(|| view.statuses.values().flatten().max_by_key(|s| s.revision))
                .map(|s| s.revision);
            if let Some(revision) = revision {
                view.compacted = self.compacted(&leader.url, revision).await.ok();
            }
        }
        view.leader_url = Some(leader.url);
        view
    }

    /// The leader's answers: found among `statuses` (or, for an orphan leader, through
    /// a follower's member list), its member list, alarms and cluster version. `None`
    /// when there is no leader or it did not answer its member list.
    async fn ask_leader(
        &self,
        statuses: &HashMap<String, Result<EndpointStatus, EtcdError>>,
    ) -> Option<LeaderAnswers> {
        let leader_id = quorum_core::leader_of(statuses.values().filter_map(|r| r.as_ref().ok()))?;
        let mut leader_url = statuses.iter().find_map(|(url, r)| {
            r.as_ref()
                .ok()
                .filter(|s| s.member_id == leader_id)
                .map(|_| url.clone())
        });
        if leader_url.is_none() {
            // The leader is not one of our endpoints (an orphan member): find its URL in
            // a follower's member list, then ask it.
            for (url, r) in statuses {
                if r.is_err() {
                    continue;
                }
                if let Ok(ms) = self.member_list(url).await {
                    leader_url = ms
                        .iter()
                        .find(|m| m.id == leader_id)
                        .and_then(|m| m.client_urls.first().cloned());
                    break;
                }
            }
        }
        let url = leader_url?;
        let members = self.member_list(&url).await.ok()?;
        let alarms = self.alarms(&url).await.ok();
        let cluster_version = self.cluster_version(&url).await.ok().flatten();
        Some(LeaderAnswers {
            url,
            members,
            alarms,
            cluster_version,
        })
    }

    /// MemberAdd as a learner; returns the new member's id. A member already holding
    /// these peer URLs (an earlier add whose answer was lost) is success.
    pub async fn add_learner(&self, leader: &str, peer_url: &str) -> Result<u64, EtcdError> {
        let mut c = self.client(leader).await?;
        let t = self.timeouts.change_ms;
        let urls = [peer_url.to_string()];
        let res = change("member add", leader, EtcdCall::AddLearner, t, async {
            c.member_add(urls, Some(MemberAddOptions::new().with_is_learner()))
                .await
        })
        .await?;
        match res {
            Answered::Done(r) => r.member().map(|m| m.id()).ok_or_else(|| EtcdError::Failed {
                op: "member add",
                endpoint: leader.to_string(),
                message: "answer without the new member".into(),
            }),
            // The same add again ("Peer URLs already exists", or "member ID already
            // exist" within the same second): the member is there; find its id.
            Answered::AlreadyDone => {
                let members = self.member_list(leader).await?;
                members
                    .iter()
                    .find(|m| m.peer_urls.iter().any(|u| u == peer_url))
                    .map(|m| m.id)
                    .ok_or_else(|| EtcdError::Failed {
                        op: "member add",
                        endpoint: leader.to_string(),
                        message: format!("{peer_url} exists but is not in the member list"),
                    })
            }
        }
    }

    /// Promotes a learner. A member that already votes is success.
    pub async fn promote(&self, leader: &str, member_id: u64) -> Result<(), EtcdError> {
        let mut c = self.client(leader).await?;
        let t = self.timeouts.change_ms;
        change("member promote", leader, EtcdCall::Promote, t, async {
            c.member_promote(member_id).await
        })
        .await
        .map(|_| ())
    }

    /// Moves leadership to `to_member`; sent to the current leader.
    pub async fn move_leader(&self, leader: &str, to_member: u64) -> Result<(), EtcdError> {
        let mut c = self.client(leader).await?;
        let t = self.timeouts.change_ms;
        change("move leader", leader, EtcdCall::MoveLeader, t, async {
            c.move_leader(to_member).await
        })
        .await
        .map(|_| ())
    }

    /// Removes a member. A member that is already gone is success.
    pub async fn remove(&self, leader: &str, member_id: u64) -> Result<(), EtcdError> {
        let mut c = self.client(leader).await?;
        let t = self.timeouts.change_ms;
        change("member remove", leader, EtcdCall::RemoveMember, t, async {
            c.member_remove(member_id).await
        })
        .await
        .map(|_| ())
    }
}

/// A call to etcd within `timeout_ms`, its answer classified as an answer to `call`.
async fn change<T>(
    op: &'static str,
    endpoint: &str,
    call: EtcdCall,
    timeout_ms: u64,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<Answered<T>, EtcdError> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), fut).await {
        Ok(Ok(v)) => Ok(Answered::Done(v)),
        Ok(Err(e)) => classify(op, endpoint, call, e).map(|AlreadyDone| Answered::AlreadyDone),
        Err(_) => Err(EtcdError::Timeout {
            op,
            endpoint: endpoint.to_string(),
            timeout_ms,
        }),
    }
}

/// A read (connect, status, member list, alarms) within `timeout_ms`.
async fn bounded<T>(
    op: &'static str,
    endpoint: &str,
    timeout_ms: u64,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match change(op, endpoint, EtcdCall::Observe, timeout_ms, fut).await? {
        Answered::Done(v) => Ok(v),
        // The classifier has no "already done" answer to a read; were one to appear,
        // it would be a failure, not a value.
        Answered::AlreadyDone => Err(EtcdError::Failed {
            op,
            endpoint: endpoint.to_string(),
            message: "an answer meaning \"already done\" to a read".into(),
        }),
    }
}

async fn bounded_io<T>(
    op: &'static str,
    endpoint: &str,
    timeout_ms: u64,
    fut: impl Future<Output = std::io::Result<T>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(EtcdError::Unreachable {
            op,
            endpoint: endpoint.to_string(),
            message: e.to_string(),
        }),
        Err(_) => Err(EtcdError::Timeout {
            op,
            endpoint: endpoint.to_string(),
            timeout_ms,
        }),
    }
}
