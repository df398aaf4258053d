//! The controller's end of the agent API: one connection per host, every call with a
//! deadline, every failure typed so the caller can tell a host it cannot reach from an
//! agent whose certificate has expired, a refusal from a stale fencing token, and a
//! call that failed.

use crate::proto::{self, agent_client};
use crate::tls;
use crate::{StartSpec, MAX_REPLY_BYTES, MAX_REQUEST_BYTES};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Code;

/// How long connecting (TCP and TLS) may take.
pub const CONNECT_TIMEOUT_MS: u64 = 3_000;
/// How long an ordinary call may take (a stop waits up to the provider's grace, 10 s).
pub const CALL_TIMEOUT_MS: u64 = 30_000;
/// How long an install may take (it carries tens of MiB).
pub const INSTALL_TIMEOUT_MS: u64 = 300_000;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("host {host} ({address}): cannot reach its agent: {reason}")]
    Unreachable {
        host: String,
        address: SocketAddr,
        reason: String,
    },
    #[error("host {host} ({address}): its agent's certificate has expired; refusing to use it until it is renewed (the agent renews by itself once it can reach the join service, for up to 30 days after expiry; after that, `quorum host add {host} --address IP --rejoin` and start the agent with the new token)")]
    CertificateExpired { host: String, address: SocketAddr },
    #[error("host {host} ({address}): the agent's certificate is not valid for it: {reason}")]
    Untrusted {
        host: String,
        address: SocketAddr,
        reason: String,
    },
    #[error("host {host}: {what} refused: {message}")]
    Fenced {
        host: String,
        what: &'static str,
        message: String,
    },
    #[error("host {host}: {what} refused: {message}")]
    Refused {
        host: String,
        what: &'static str,
        message: String,
    },
    #[error("host {host}: {what} failed ({code:?}): {message}")]
    Failed {
        host: String,
        what: &'static str,
        code: Code,
        message: String,
    },
    #[error("the member configuration does not serialise: {0}")]
    Spec(String),
}

impl AgentError {
    /// Whether the agent could not be reached at all (as opposed to refusing or
    /// failing a call): the host may be down or cut off.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, AgentError::Unreachable { .. })
    }
}

/// A connection to one host's agent.
#[derive(Clone, Debug)]
pub struct AgentClient {
    host: String,
    address: SocketAddr,
    inner: agent_client::AgentClient<Channel>,
}

/// A channel to `address` over TLS with `config`, checking the peer's certificate
/// against the address's IP. Connects now (so an expired certificate or a dead host is
/// an error here, typed by `classify`).
pub async fn channel(
    address: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> Result<Channel, tonic::transport::Error> {
    let connector = tower::service_fn(move |_: Uri| {
        let config = config.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(address).await?;
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(tls::server_name(address.ip()), tcp)
                .await?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    });
    // The URI only names the authority for HTTP/2; the connector above dials.
    Endpoint::from_shared(format!("http://{address}"))?
        .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
        .timeout(Duration::from_millis(CALL_TIMEOUT_MS))
        .connect_with_connector(connector)
        .await
}

impl AgentClient {
    /// Connects to host `host`'s agent at `address` with the controller's TLS
    /// configuration (`tls::client` with the controller's identity).
    pub async fn connect(
        host: &str,
        address: SocketAddr,
        config: Arc<rustls::ClientConfig>,
    ) -> Result<AgentClient, AgentError> {
        let connect = channel(address, config);
        let ch =
            match tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS + 500), connect)
                .await
            {
                Ok(Ok(ch)) => ch,
                Ok(Err(e)) => return Err(connect_error(host, address, &e)),
                Err(_) => {
                    return Err(AgentError::Unreachable {
                        host: host.to_string(),
                        address,
                        reason: format!("no connection within {CONNECT_TIMEOUT_MS} ms"),
                    })
                }
            };
        Ok(AgentClient {
            host: host.to_string(),
            address,
            inner: agent_client::AgentClient::new(ch)
                .max_decoding_message_size(MAX_REPLY_BYTES)
                .max_encoding_message_size(MAX_REQUEST_BYTES),
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub async fn report(&mut self) -> Result<proto::ReportReply, AgentError> {
        let r = self.inner.report(proto::ReportRequest {}).await;
        self.answer("report", r)
    }

    /// Installs etcd `version` from `binaries` (name, content); the digests are
    /// computed here and checked there.
    pub async fn install(
        &mut self,
        version: &str,
        binaries: Vec<(String, Vec<u8>)>,
    ) -> Result<bool, AgentError> {
        let binaries = binaries
            .into_iter()
            .map(|(name, content)| proto::Binary {
                sha256: crate::install::sha256_hex(&content),
                name,
                content,
            })
            .collect();
        let mut req = tonic::Request::new(proto::InstallRequest {
            version: version.to_string(),
            binaries,
        });
        req.set_timeout(Duration::from_millis(INSTALL_TIMEOUT_MS));
        let r = self.inner.install(req).await;
        self.answer("install", r).map(|r| r.installed)
    }

    /// Sends a raw install request (digests as given): for tests of the agent's check.
    pub async fn install_raw(&mut self, req: proto::InstallRequest) -> Result<bool, AgentError> {
        let r = self.inner.install(req).await;
        self.answer("install", r).map(|r| r.installed)
    }

    pub async fn start(
        &mut self,
        fence: &proto::Fence,
        spec: &StartSpec,
    ) -> Result<i32, AgentError> {
        let spec_json = serde_json::to_vec(spec).map_err(|e| AgentError::Spec(e.to_string()))?;
        let r = self
            .inner
            .start(proto::StartRequest {
                fence: Some(fence.clone()),
                spec_json,
            })
            .await;
        self.answer("start", r).map(|r| r.pid)
    }

    pub async fn stop(&mut self, fence: &proto::Fence, member: &str) -> Result<(), AgentError> {
        let r = self.inner.stop(member_req(fence, member)).await;
        self.answer("stop", r).map(|_| ())
    }

    pub async fn wipe(&mut self, fence: &proto::Fence, member: &str) -> Result<(), AgentError> {
        let r = self.inner.wipe(member_req(fence, member)).await;
        self.answer("wipe", r).map(|_| ())
    }

    pub async fn delete(&mut self, fence: &proto::Fence, member: &str) -> Result<(), AgentError> {
        let r = self.inner.delete(member_req(fence, member)).await;
        self.answer("delete", r).map(|_| ())
    }

    pub async fn write_marker(
        &mut self,
        fence: &proto::Fence,
        member: &str,
        marker: quorum_core::DataMarker,
    ) -> Result<(), AgentError> {
        let r = self
            .inner
            .write_marker(proto::WriteMarkerRequest {
                fence: Some(fence.clone()),
                member: member.to_string(),
                cluster_id: marker.cluster_id,
                member_id: marker.member_id,
            })
            .await;
        self.answer("write marker", r).map(|_| ())
    }

    pub async fn logs(&mut self, member: &str, lines: u32) -> Result<Vec<String>, AgentError> {
        let r = self
            .inner
            .logs(proto::LogsRequest {
                member: member.to_string(),
                lines,
            })
            .await;
        self.answer("logs", r).map(|r| r.lines)
    }

    fn answer<T>(
        &self,
        what: &'static str,
        r: Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, AgentError> {
        r.map(tonic::Response::into_inner)
            .map_err(|s| status_error(&self.host, self.address, what, s))
    }
}

fn member_req(fence: &proto::Fence, member: &str) -> proto::MemberRequest {
    proto::MemberRequest {
        fence: Some(fence.clone()),
        member: member.to_string(),
    }
}

/// A failed connect, typed: an expired or untrusted certificate, or no agent there.
pub fn connect_error(host: &str, address: SocketAddr, e: &tonic::transport::Error) -> AgentError {
    if tls::is_expired(e) {
        return AgentError::CertificateExpired {
            host: host.to_string(),
            address,
        };
    }
    if let Some(r) = tls::rustls_error(e) {
        return AgentError::Untrusted {
            host: host.to_string(),
            address,
            reason: r.to_string(),
        };
    }
    AgentError::Unreachable {
        host: host.to_string(),
        address,
        reason: chain(e),
    }
}

fn status_error(
    host: &str,
    address: SocketAddr,
    what: &'static str,
    s: tonic::Status,
) -> AgentError {
    let host = host.to_string();
    let message = s.message().to_string();
    match s.code() {
        Code::Aborted => AgentError::Fenced {
            host,
            what,
            message,
        },
        Code::PermissionDenied
        | Code::Unauthenticated
        | Code::InvalidArgument
        | Code::FailedPrecondition => AgentError::Refused {
            host,
            what,
            message,
        },
        Code::Unavailable | Code::DeadlineExceeded => AgentError::Unreachable {
            host,
            address,
            reason: format!("{what}: {message}"),
        },
        code => AgentError::Failed {
            host,
            what,
            code,
            message,
        },
    }
}

/// An error and its sources, on one line.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}
