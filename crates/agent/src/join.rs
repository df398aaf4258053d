//! Joining and renewing: the controller's join service and the agent's end of it.
//!
//! A join: the agent makes its key on its host, dials the endpoint in its token
//! trusting only the CA the token pins, and sends the token's secret with a
//! certificate request. The service checks the request's signature, has the registry
//! consume the token (once, before its expiry) and pin the key, then signs.
//!
//! A renewal: the agent dials with its current certificate (expired by at most
//! `tls::RENEW_GRACE_S` is accepted) and asks for the same key again; the service
//! renews only the key the registry pinned for that host. A host that is removed, or a
//! key that is not the pinned one, gets nothing.

use crate::proto::{self, join_client, join_server};
use crate::tls::{self, Identity};
use crate::token::JoinToken;
use quorum_pki::agents::{
    certificate_der_key_sha256, der_validity, request_key_sha256, AGENT_CN_PREFIX,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// How long a join or renewal call may take.
pub const JOIN_TIMEOUT_MS: u64 = 10_000;

/// What the registry grants: the address to certify and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub address: IpAddr,
    pub not_after_unix_s: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("no host {0:?} is registered (see `quorum hosts`)")]
    UnknownHost(String),
    /// The claim is not good: a wrong or used secret, an expired token, another key.
    #[error("{0}")]
    Refused(String),
    /// The registry cannot answer now (its store is unreachable).
    #[error("{0}")]
    Unavailable(String),
}

/// Where hosts are registered (the controller's store). Blocking calls.
pub trait Registry: Send + Sync + 'static {
    /// Consumes `host`'s join token if `secret` is its secret, unused and unexpired,
    /// pins `key_sha256` as the host's key and records the certificate's end, in one
    /// write.
    fn join(
        &self,
        host: &str,
        secret: &str,
        key_sha256: &str,
        now_unix_s: i64,
    ) -> Result<Grant, RegistryError>;
    /// Allows a renewal of `host`'s certificate for `key_sha256` if that is its pinned
    /// key, and records the new end.
    fn renew(&self, host: &str, key_sha256: &str, now_unix_s: i64) -> Result<Grant, RegistryError>;
}

/// The join service: a registry and the hosts CA that signs.
pub struct JoinService {
    registry: Arc<dyn Registry>,
    ca: Arc<quorum_pki::Ca>,
}

impl JoinService {
    pub fn new(registry: Arc<dyn Registry>, ca: Arc<quorum_pki::Ca>) -> JoinService {
        JoinService { registry, ca }
    }

    pub fn into_server(self) -> join_server::JoinServer<JoinService> {
        join_server::JoinServer::new(self)
    }

    async fn grant(
        &self,
        f: impl FnOnce(&dyn Registry, i64) -> Result<Grant, RegistryError> + Send + 'static,
    ) -> Result<(Grant, i64), Status> {
        let registry = self.registry.clone();
        let now = now_unix_s();
        let grant = tokio::task::spawn_blocking(move || f(registry.as_ref(), now))
            .await
            .map_err(|e| Status::internal(format!("join task failed: {e}")))?
            .map_err(|e| match e {
                RegistryError::UnknownHost(_) => Status::not_found(e.to_string()),
                RegistryError::Refused(_) => Status::permission_denied(e.to_string()),
                RegistryError::Unavailable(_) => Status::unavailable(e.to_string()),
            })?;
        Ok((grant, now))
    }

    fn sign(
        &self,
        csr_pem: &str,
        host: &str,
        grant: Grant,
        now: i64,
    ) -> Result<proto::Certificate, Status> {
        let cert_pem = self
            .ca
            .issue_agent(csr_pem, host, grant.address, now, grant.not_after_unix_s)
            .map_err(|e| Status::internal(format!("signing the certificate: {e}")))?;
        Ok(proto::Certificate {
            cert_pem,
            ca_pem: self.ca.cert_pem().to_string(),
        })
    }
}

#[tonic::async_trait]
impl join_server::Join for JoinService {
    async fn join(
        &self,
        req: Request<proto::JoinRequest>,
    ) -> Result<Response<proto::Certificate>, Status> {
        let req = req.into_inner();
        if !crate::valid_host_name(&req.host) {
            return Err(Status::invalid_argument(format!(
                "{:?} is not a host name",
                req.host
            )));
        }
        let key = request_key_sha256(&req.csr_pem)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let (host, secret) = (req.host.clone(), req.secret.clone());
        let (grant, now) = self
            .grant(move |r, now| r.join(&host, &secret, &key, now))
            .await?;
        tracing::info!(host = %req.host, address = %grant.address, "host joined");
        Ok(Response::new(self.sign(
            &req.csr_pem,
            &req.host,
            grant,
            now,
        )?))
    }

    async fn renew(
        &self,
        req: Request<proto::RenewRequest>,
    ) -> Result<Response<proto::Certificate>, Status> {
        let leaf = req
            .peer_certs()
            .and_then(|c| c.first().cloned())
            .ok_or_else(|| {
                Status::unauthenticated(
                    "a renewal needs the current certificate as the client certificate",
                )
            })?;
        let (_, _, cn) =
            der_validity(leaf.as_ref()).map_err(|e| Status::unauthenticated(e.to_string()))?;
        let host = cn
            .strip_prefix(AGENT_CN_PREFIX)
            .filter(|h| crate::valid_host_name(h))
            .ok_or_else(|| Status::permission_denied(format!("{cn:?} is not an agent")))?
            .to_string();
        let current = certificate_der_key_sha256(leaf.as_ref())
            .map_err(|e| Status::unauthenticated(e.to_string()))?;
        let csr = req.into_inner().csr_pem;
        let asked =
            request_key_sha256(&csr).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if asked != current {
            return Err(Status::permission_denied(
                "a renewal is for the key of the current certificate; a new key needs a new join token",
            ));
        }
        let h = host.clone();
        let (grant, now) = self.grant(move |r, now| r.renew(&h, &asked, now)).await?;
        tracing::info!(%host, not_after = grant.not_after_unix_s, "agent certificate renewed");
        Ok(Response::new(self.sign(&csr, &host, grant, now)?))
    }
}

/// What an agent got from the join service.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub ca_pem: String,
}

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("cannot reach the join service at {endpoint}: {reason}")]
    Unreachable {
        endpoint: SocketAddr,
        reason: String,
    },
    #[error("the join service at {endpoint} refused: {message}")]
    Refused {
        endpoint: SocketAddr,
        message: String,
    },
    #[error("the join service at {endpoint} answered with {what}")]
    BadAnswer { endpoint: SocketAddr, what: String },
    #[error("{0}")]
    Local(String),
}

/// Joins with `token`, for the key `key_pem`.
pub async fn join(token: &JoinToken, key_pem: &str) -> Result<Issued, JoinError> {
    let endpoint = token.endpoint;
    let config =
        tls::joining_client(&token.ca_sha256).map_err(|e| JoinError::Local(e.to_string()))?;
    let csr = quorum_pki::agents::certificate_request(key_pem, &token.host)
        .map_err(|e| JoinError::Local(e.to_string()))?;
    let mut client = connect(endpoint, config).await?;
    let reply = call(
        endpoint,
        client.join(proto::JoinRequest {
            host: token.host.clone(),
            secret: token.secret.clone(),
            csr_pem: csr,
        }),
    )
    .await?;
    check_issued(endpoint, &reply, key_pem, Some(&token.ca_sha256))?;
    Ok(Issued {
        cert_pem: reply.cert_pem,
        ca_pem: reply.ca_pem,
    })
}

/// Renews the certificate of `identity` (key `key_pem`) at `endpoint`, trusting `ca_pem`.
pub async fn renew(
    endpoint: SocketAddr,
    ca_pem: &str,
    identity: Arc<Identity>,
    host: &str,
    key_pem: &str,
) -> Result<Issued, JoinError> {
    let config = tls::client(ca_pem, identity).map_err(|e| JoinError::Local(e.to_string()))?;
    let csr = quorum_pki::agents::certificate_request(key_pem, host)
        .map_err(|e| JoinError::Local(e.to_string()))?;
    let mut client = connect(endpoint, config).await?;
    let reply = call(endpoint, client.renew(proto::RenewRequest { csr_pem: csr })).await?;
    let pin = quorum_pki::agents::certificate_sha256(ca_pem)
        .map_err(|e| JoinError::Local(e.to_string()))?;
    check_issued(endpoint, &reply, key_pem, Some(&pin))?;
    Ok(Issued {
        cert_pem: reply.cert_pem,
        ca_pem: reply.ca_pem,
    })
}

async fn connect(
    endpoint: SocketAddr,
    config: Arc<tokio_rustls::rustls::ClientConfig>,
) -> Result<join_client::JoinClient<tonic::transport::Channel>, JoinError> {
    match tokio::time::timeout(
        Duration::from_millis(JOIN_TIMEOUT_MS),
        crate::client::channel(endpoint, config),
    )
    .await
    {
        Ok(Ok(ch)) => Ok(join_client::JoinClient::new(ch)),
        Ok(Err(e)) => Err(JoinError::Unreachable {
            endpoint,
            reason: crate::client::chain(&e),
        }),
        Err(_) => Err(JoinError::Unreachable {
            endpoint,
            reason: format!("no connection within {JOIN_TIMEOUT_MS} ms"),
        }),
    }
}

async fn call<T>(
    endpoint: SocketAddr,
    fut: impl std::future::Future<Output = Result<Response<T>, Status>>,
) -> Result<T, JoinError> {
    match tokio::time::timeout(Duration::from_millis(JOIN_TIMEOUT_MS), fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) if s.code() == tonic::Code::Unavailable => Err(JoinError::Unreachable {
            endpoint,
            reason: s.message().to_string(),
        }),
        Ok(Err(s)) => Err(JoinError::Refused {
            endpoint,
            message: s.message().to_string(),
        }),
        Err(_) => Err(JoinError::Unreachable {
            endpoint,
            reason: format!("no answer within {JOIN_TIMEOUT_MS} ms"),
        }),
    }
}

/// The answer certifies our key, under the CA we expect.
fn check_issued(
    endpoint: SocketAddr,
    reply: &proto::Certificate,
    key_pem: &str,
    ca_sha256: Option<&str>,
) -> Result<(), JoinError> {
    let bad = |what: String| JoinError::BadAnswer { endpoint, what };
    let ours =
        quorum_pki::agents::key_sha256(key_pem).map_err(|e| JoinError::Local(e.to_string()))?;
    let certified = quorum_pki::agents::certificate_key_sha256(&reply.cert_pem)
        .map_err(|e| bad(format!("a certificate that does not parse: {e}")))?;
    if certified != ours {
        return Err(bad("a certificate for another key".into()));
    }
    if let Some(pin) = ca_sha256 {
        let ca = quorum_pki::agents::certificate_sha256(&reply.ca_pem)
            .map_err(|e| bad(format!("a CA that does not parse: {e}")))?;
        if ca != pin.to_ascii_lowercase() {
            return Err(bad(format!("another CA (sha256 {ca}, expected {pin})")));
        }
    }
    Ok(())
}

/// Serves the join service on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: JoinService,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), crate::runtime::RuntimeError> {
    let config = tls::join_server(ca_pem, cert_pem, key_pem)?;
    tonic::transport::Server::builder()
        .timeout(Duration::from_millis(JOIN_TIMEOUT_MS))
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(crate::server::incoming(listener, config), shutdown)
        .await
        .map_err(|e| crate::runtime::RuntimeError::Serve(crate::client::chain(&e)))
}

pub(crate) use quorum_clock::now_unix_s;
