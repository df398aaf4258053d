//! The agent's API (`proto::agent_server::Agent`) over the local provider, and the TLS
//! listener both quorum services serve on.
//!
//! Every handler checks the caller first (the controller's certificate, never an
//! agent's), runs the provider's blocking work on the blocking pool, and turns each
//! failure into a status a person can act on: `PermissionDenied` for a caller that is
//! not the controller, `Aborted` for a stale fencing token, `InvalidArgument` for a
//! request that can never work, `FailedPrecondition` for one that cannot work now
//! (a member still running when its data is to be wiped), `Internal` otherwise.

use crate::fence::{FenceError, Fences};
use crate::install::{self, InstallError};
use crate::proto::{self, agent_server::Agent};
use crate::tls::Identity;
use crate::{valid_member_name, StartSpec, MAX_LOG_LINES};
use futures::{SinkExt, Stream};
use quorum_provider::{LocalProvider, MachineTls, ProviderError, StartRequest};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;
use tonic::{Request, Response, Status};

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 5_000;
/// How many handshakes may be under way at once (more wait to be accepted).
pub const MAX_PENDING_HANDSHAKES: usize = 64;

/// The agent's service.
#[derive(Clone)]
pub struct AgentService {
    inner: Arc<Inner>,
}

struct Inner {
    host: String,
    state_dir: PathBuf,
    provider: LocalProvider,
    fences: Fences,
    identity_cert: Arc<std::sync::RwLock<String>>,
}

impl AgentService {
    /// An agent for host `host` keeping everything under `state_dir`: `etcd/<version>/`
    /// (installed binaries), `machines/<member>/` (the provider's), `fences/`.
    pub fn new(
        host: &str,
        state_dir: &Path,
        stop_grace: Duration,
        identity_cert: Arc<std::sync::RwLock<String>>,
    ) -> AgentService {
        let provider =
            LocalProvider::new(state_dir, state_dir.join("etcd")).with_stop_grace(stop_grace);
        AgentService {
            inner: Arc::new(Inner {
                host: host.to_string(),
                state_dir: state_dir.to_path_buf(),
                provider,
                fences: Fences::new(&state_dir.join("fences")),
                identity_cert,
            }),
        }
    }

    /// The provider the agent runs members with (for tests that look behind it).
    pub fn provider(&self) -> &LocalProvider {
        &self.inner.provider
    }

    pub fn into_server(self) -> proto::agent_server::AgentServer<AgentService> {
        proto::agent_server::AgentServer::new(self)
            .max_decoding_message_size(crate::MAX_REQUEST_BYTES)
            .max_encoding_message_size(crate::MAX_REPLY_BYTES)
    }

    /// Runs `f` on the blocking pool with this agent's state.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| Status::internal(format!("agent task failed: {e}")))?
    }
}

/// Refuses any caller but the controller: agents hold certificates of the same CA.
fn authorize<T>(req: &Request<T>) -> Result<(), Status> {
    let certs = req
        .peer_certs()
        .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
    let leaf = certs
        .first()
        .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
    let (_, _, cn) = quorum_pki::agents::der_validity(leaf.as_ref())
        .map_err(|e| Status::unauthenticated(format!("client certificate: {e}")))?;
    if cn != quorum_pki::agents::CONTROLLER_CN {
        return Err(Status::permission_denied(format!(
            "{cn:?} may not call an agent: only the controller's certificate ({:?}) may",
            quorum_pki::agents::CONTROLLER_CN
        )));
    }
    Ok(())
}

fn member_arg(name: &str) -> Result<(), Status> {
    if valid_member_name(name) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "{name:?} is not a member name (lower-case letters, digits and '-')"
        )))
    }
}

/// The status of a provider failure.
fn provider_status(e: ProviderError) -> Status {
    match &e {
        ProviderError::VersionNotInstalled { .. } | ProviderError::MissingCertificates { .. } => {
            Status::failed_precondition(e.to_string())
        }
        ProviderError::Running { .. }
        | ProviderError::DataChanged { .. }
        | ProviderError::NoMemberData { .. } => Status::failed_precondition(e.to_string()),
        _ => Status::internal(e.to_string()),
    }
}

impl From<FenceError> for Status {
    fn from(e: FenceError) -> Status {
        match e {
            FenceError::Stale { .. } => Status::aborted(e.to_string()),
            FenceError::Missing | FenceError::OtherControlPlane { .. } => {
                Status::invalid_argument(e.to_string())
            }
            FenceError::Io { .. } | FenceError::TooMany => Status::internal(e.to_string()),
        }
    }
}

fn install_status(e: InstallError) -> Status {
    match e {
        InstallError::Io { .. } => Status::internal(e.to_string()),
        _ => Status::invalid_argument(e.to_string()),
    }
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn report(
        &self,
        req: Request<proto::ReportRequest>,
    ) -> Result<Response<proto::ReportReply>, Status> {
        authorize(&req)?;
        let cert = self
            .inner
            .identity_cert
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let reply = self
            .blocking(move |i| {
                let members = i
                    .provider
                    .list()
                    .into_iter()
                    .filter(|m| valid_member_name(m))
                    .map(|m| member_report(&i.provider, &m))
                    .collect();
                Ok(proto::ReportReply {
                    host: i.host.clone(),
                    agent_version: crate::AGENT_VERSION.to_string(),
                    etcd_versions: quorum_provider::installed_versions(i.provider.etcd_dir())
                        .iter()
                        .map(|v| v.to_string())
                        .collect(),
                    disk_free_bytes: disk_free_bytes(&i.state_dir).unwrap_or(0),
                    members,
                    certificate_not_after_unix_s: quorum_pki::not_after_unix_s(&cert).unwrap_or(0),
                })
            })
            .await?;
        Ok(Response::new(reply))
    }

    async fn install(
        &self,
        req: Request<proto::InstallRequest>,
    ) -> Result<Response<proto::InstallReply>, Status> {
        authorize(&req)?;
        let req = req.into_inner();
        let installed = self
            .blocking(move |i| {
                let bins: Vec<install::Binary<'_>> = req
                    .binaries
                    .iter()
                    .map(|b| install::Binary {
                        name: &b.name,
                        sha256: &b.sha256,
                        content: &b.content,
                    })
                    .collect();
                install::install(i.provider.etcd_dir(), &req.version, &bins).map_err(install_status)
            })
            .await?;
        Ok(Response::new(proto::InstallReply { installed }))
    }

    async fn start(
        &self,
        req: Request<proto::StartRequest>,
    ) -> Result<Response<proto::StartReply>, Status> {
        authorize(&req)?;
        let req = req.into_inner();
        let spec: StartSpec = serde_json::from_slice(&req.spec_json)
            .map_err(|e| Status::invalid_argument(format!("member configuration: {e}")))?;
        member_arg(&spec.machine.name)?;
        let pid = self
            .blocking(move |i| {
                i.fences
                    .admit(req.fence.as_ref(), &spec.machine.name.clone(), || {
                        start_member(i, &spec)
                    })
            })
            .await?;
        Ok(Response::new(proto::StartReply { pid }))
    }

    async fn stop(
        &self,
        req: Request<proto::MemberRequest>,
    ) -> Result<Response<proto::Done>, Status> {
        authorize(&req)?;
        self.fenced(req.into_inner(), |p, m| p.stop(m)).await
    }

    async fn wipe(
        &self,
        req: Request<proto::MemberRequest>,
    ) -> Result<Response<proto::Done>, Status> {
        authorize(&req)?;
        self.fenced(req.into_inner(), |p, m| p.wipe_data(m)).await
    }

    async fn delete(
        &self,
        req: Request<proto::MemberRequest>,
    ) -> Result<Response<proto::Done>, Status> {
        authorize(&req)?;
        self.fenced(req.into_inner(), |p, m| p.delete(m)).await
    }

    async fn write_marker(
        &self,
        req: Request<proto::WriteMarkerRequest>,
    ) -> Result<Response<proto::Done>, Status> {
        authorize(&req)?;
        let req = req.into_inner();
        member_arg(&req.member)?;
        let marker = quorum_core::DataMarker {
            cluster_id: req.cluster_id,
            member_id: req.member_id,
        };
        self.blocking(move |i| {
            i.fences.admit(req.fence.as_ref(), &req.member, || {
                i.provider
                    .write_marker(&req.member, marker)
                    .map_err(provider_status)
            })
        })
        .await?;
        Ok(Response::new(proto::Done {}))
    }

    async fn logs(
        &self,
        req: Request<proto::LogsRequest>,
    ) -> Result<Response<proto::LogsReply>, Status> {
        authorize(&req)?;
        let req = req.into_inner();
        member_arg(&req.member)?;
        let n = req.lines.min(MAX_LOG_LINES) as usize;
        let lines = self
            .blocking(move |i| Ok(i.provider.last_log_lines(&req.member, n)))
            .await?;
        Ok(Response::new(proto::LogsReply { lines }))
    }
}

impl AgentService {
    async fn fenced(
        &self,
        req: proto::MemberRequest,
        op: fn(&LocalProvider, &str) -> Result<(), ProviderError>,
    ) -> Result<Response<proto::Done>, Status> {
        member_arg(&req.member)?;
        self.blocking(move |i| {
            i.fences.admit(req.fence.as_ref(), &req.member, || {
                op(&i.provider, &req.member).map_err(provider_status)
            })
        })
        .await?;
        Ok(Response::new(proto::Done {}))
    }
}

fn start_member(i: &Inner, spec: &StartSpec) -> Result<i32, Status> {
    let certs = spec.tls.as_ref().map(|t| quorum_pki::MachineCerts {
        server: quorum_pki::Identity {
            cert_pem: t.server_cert_pem.clone(),
            key_pem: t.server_key_pem.clone(),
        },
        peer: quorum_pki::Identity {
            cert_pem: t.peer_cert_pem.clone(),
            key_pem: t.peer_key_pem.clone(),
        },
        not_after_unix_s: t.not_after_unix_s,
    });
    let tls = match (&spec.tls, &certs) {
        (Some(t), Some(c)) => Some(MachineTls {
            ca_pem: &t.ca_pem,
            certs: c,
        }),
        _ => None,
    };
    let req = StartRequest {
        machine: &spec.machine,
        cluster_token: &spec.cluster_token,
        state: spec.state,
        initial_cluster: &spec.initial_cluster,
        tls,
        quota_backend_bytes: spec.quota_backend_bytes,
        expect_marker: spec.expect_marker,
        force_new_cluster: spec.force_new_cluster,
    };
    i.provider.start(&req).map_err(provider_status)
}

fn member_report(p: &LocalProvider, name: &str) -> proto::MemberReport {
    let st = p.observe(name);
    let data_dir = match st.data_dir {
        quorum_provider::DataDirState::Missing => "missing",
        quorum_provider::DataDirState::Empty => "empty",
        quorum_provider::DataDirState::Member => "member",
        quorum_provider::DataDirState::Other => "other",
    };
    proto::MemberReport {
        name: name.to_string(),
        running: st.process == quorum_core::ProcessState::Running,
        pid: st.pid.unwrap_or(0),
        data_dir: data_dir.to_string(),
        has_marker: st.marker.is_some(),
        cluster_id: st.marker.map_or(0, |m| m.cluster_id),
        member_id: st.marker.map_or(0, |m| m.member_id),
        starts_unix_s: st.starts_unix_s,
        running_version: st
            .running_version
            .map(|v| v.to_string())
            .unwrap_or_default(),
        last_exit: p.last_exit(name).unwrap_or_default(),
    }
}

/// Free bytes for unprivileged users on the file system holding `dir`.
pub fn disk_free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `st` a properly sized out-parameter.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| (st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// TLS connections accepted on `listener`: each handshake runs in its own task with a
/// deadline (a slow or silent client holds up nobody), at most
/// `MAX_PENDING_HANDSHAKES` at once; failed handshakes are logged and dropped.
pub fn incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> impl Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> {
    let (tx, rx) = futures::channel::mpsc::channel(MAX_PENDING_HANDSHAKES);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (acceptor, mut out) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let handshake = tokio::time::timeout(
                    Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
                    acceptor.accept(tcp),
                )
                .await;
                match handshake {
                    Ok(Ok(tls)) => {
                        let _ = out.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake refused"),
                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                }
            });
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// Keeps the certificate the report shows in step with the identity served.
pub fn shared_cert(cert_pem: &str) -> Arc<std::sync::RwLock<String>> {
    Arc::new(std::sync::RwLock::new(cert_pem.to_string()))
}

/// Replaces the served certificate and the reported one together.
pub fn replace_identity(
    identity: &Identity,
    shown: &std::sync::RwLock<String>,
    cert_pem: &str,
    key_pem: &str,
) -> Result<(), crate::tls::TlsError> {
    identity.replace(cert_pem, key_pem)?;
    *shown.write().unwrap_or_else(|p| p.into_inner()) = cert_pem.to_string();
    Ok(())
}
