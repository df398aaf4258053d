//! `quorum agent`: join (once), then serve the API and keep the certificate renewed.
//!
//! The state directory holds `identity.json` (host, address, join endpoint),
//! `agent.key` (made here, 0600, never sent anywhere), `agent.crt`, `ca.crt` (the hosts
//! CA), and the members (`machines/`), binaries (`etcd/`) and fencing marks (`fences/`).
//! Restarting the agent with the same state directory finds all of it again; the
//! members kept running meanwhile (they are detached).

use crate::join::{self, JoinError};
use crate::server::{self, AgentService};
use crate::tls::{self, Identity, TlsError};
use crate::token::{JoinToken, TokenError};
use serde::{Deserialize, Serialize};
use std::fs;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The first retry of a failed renewal comes after this; each next one after twice as
/// long, up to `RENEW_RETRY_MAX_MS`.
pub const RENEW_RETRY_FIRST_MS: u64 = 1_000;
pub const RENEW_RETRY_MAX_MS: u64 = 60_000;
/// The longest the agent sleeps between looks at its certificate.
pub const RENEW_CHECK_MAX_MS: u64 = 60_000;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("this agent has not joined yet ({0} holds no identity): run `quorum agent --join TOKEN` with the token `quorum host add` printed")]
    NotJoined(PathBuf),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Join(#[from] JoinError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Pki(#[from] quorum_pki::PkiError),
    #[error("{path} is damaged: {detail}; move the state directory aside and join again with a new token")]
    Damaged { path: PathBuf, detail: String },
    #[error("this state directory belongs to host {joined:?}; the token is for {token:?}: use the host's own state directory")]
    OtherHost { joined: String, token: String },
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("serving: {0}")]
    Serve(String),
}

type Result<T> = std::result::Result<T, RuntimeError>;

/// How `quorum agent` runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub state_dir: PathBuf,
    /// The address to serve on (default: the host's recorded address). The port is
    /// always `AGENT_PORT`: it is the one the controller dials.
    pub listen: Option<IpAddr>,
    /// A join token (only needed the first time; the same token again is harmless).
    pub join: Option<String>,
    /// How long a stopping member gets between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
}

/// What identifies this agent, beside its key and certificate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Joined {
    pub host: String,
    pub address: IpAddr,
    /// The join service, for renewals.
    pub endpoint: SocketAddr,
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> RuntimeError + 'a {
    move |source| RuntimeError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The agent's files.
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    pub fn new(dir: &Path) -> StateDir {
        StateDir {
            dir: dir.to_path_buf(),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    fn read(&self, name: &str) -> Result<Option<String>> {
        let p = self.path(name);
        match fs::read_to_string(&p) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("read", &p)(e)),
        }
    }
    fn write(&self, name: &str, text: &str) -> Result<()> {
        quorum_pki::create_private_dir(&self.dir).map_err(io_err("create", &self.dir))?;
        let p = self.path(name);
        quorum_pki::write_private(&p, text.as_bytes()).map_err(io_err("write", &p))
    }
    pub fn joined(&self) -> Result<Option<Joined>> {
        let Some(text) = self.read("identity.json")? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| RuntimeError::Damaged {
                path: self.path("identity.json"),
                detail: e.to_string(),
            })
    }
    /// The key, made now if there is none (before any join, so a retried join asks for
    /// the same key).
    pub fn key(&self) -> Result<String> {
        if let Some(k) = self.read("agent.key")? {
            return Ok(k);
        }
        let k = quorum_pki::agents::new_key_pem()?;
        self.write("agent.key", &k)?;
        Ok(k)
    }
    pub fn certificate(&self) -> Result<Option<(String, String)>> {
        match (self.read("agent.crt")?, self.read("ca.crt")?) {
            (Some(c), Some(ca)) => Ok(Some((c, ca))),
            _ => Ok(None),
        }
    }
    /// Records a certificate (the CA first: a certificate is never on disk without the
    /// CA it chains to).
    pub fn store(&self, issued: &join::Issued) -> Result<()> {
        self.write("ca.crt", &issued.ca_pem)?;
        self.write("agent.crt", &issued.cert_pem)
    }
}

/// Joins with `token` unless this state directory already holds a valid certificate
/// for the same host under the CA the token pins (a repeated `--join` is harmless).
pub async fn join_once(state: &StateDir, token: &JoinToken) -> Result<Joined> {
    if let Some(j) = state.joined()? {
        if j.host != token.host {
            return Err(RuntimeError::OtherHost {
                joined: j.host,
                token: token.host.clone(),
            });
        }
        if let Some((cert, ca)) = state.certificate()? {
            let same_ca = quorum_pki::agents::certificate_sha256(&ca)? == token.ca_sha256;
            let valid = quorum_pki::not_after_unix_s(&cert)? > join::now_unix_s();
            if same_ca && valid {
                tracing::info!(host = %j.host, "already joined");
                return Ok(j);
            }
        }
    }
    let key = state.key()?;
    let issued = join::join(token, &key).await?;
    state.store(&issued)?;
    let joined = Joined {
        host: token.host.clone(),
        address: token.address,
        endpoint: token.endpoint,
    };
    let text = serde_json::to_string_pretty(&joined).unwrap_or_default();
    state.write("identity.json", &text)?;
    Ok(joined)
}

/// When the certificate `cert_pem` is due for renewal: two thirds into its life (its
/// `notBefore` is back-dated by the clock-skew allowance, which is not life).
pub fn renew_at_unix_s(cert_pem: &str) -> Result<i64> {
    let (not_before, not_after, _) = quorum_pki::agents::validity(cert_pem)?;
    let issued = not_before + quorum_pki::CLOCK_SKEW_S;
    Ok(not_after - (not_after - issued).max(0) / 3)
}

/// Runs the agent until `shutdown` resolves.
pub async fn run(
    config: AgentConfig,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    let state = StateDir::new(&config.state_dir);
    let joined = match &config.join {
        Some(text) => join_once(&state, &JoinToken::decode(text)?).await?,
        None => state
            .joined()?
            .ok_or_else(|| RuntimeError::NotJoined(config.state_dir.clone()))?,
    };
    let key = state.key()?;
    let (cert, ca) = state
        .certificate()?
        .ok_or_else(|| RuntimeError::NotJoined(config.state_dir.clone()))?;
    let identity = Identity::new(&cert, &key)?;
    let shown = server::shared_cert(&cert);
    // Renew before serving if it is due (an agent that was off for long comes back
    // with a certificate the controller accepts, or keeps trying below).
    let renewer = Renewer {
        state: StateDir::new(&config.state_dir),
        joined: joined.clone(),
        key: key.clone(),
        identity: identity.clone(),
        shown: shown.clone(),
    };
    if renewer.due()? {
        if let Err(e) = renewer.renew().await {
            tracing::warn!(error = %e, "renewing the agent's certificate failed; retrying in the background");
        }
    }
    let address = SocketAddr::new(config.listen.unwrap_or(joined.address), crate::AGENT_PORT);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| RuntimeError::Bind { address, source })?;
    let tls = tls::agent_server(&ca, identity)?;
    let service = AgentService::new(&joined.host, &config.state_dir, config.stop_grace, shown);
    tracing::info!(host = %joined.host, %address, "agent serving");
    let renewing = tokio::spawn(renewer.run());
    let served = tonic::transport::Server::builder()
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(server::incoming(listener, tls), shutdown)
        .await;
    renewing.abort();
    served.map_err(|e| RuntimeError::Serve(crate::client::chain(&e)))
}

/// Keeps the agent's certificate renewed.
struct Renewer {
    state: StateDir,
    joined: Joined,
    key: String,
    identity: Arc<Identity>,
    shown: Arc<RwLock<String>>,
}

impl Renewer {
    fn current(&self) -> String {
        self.shown.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn due(&self) -> Result<bool> {
        Ok(join::now_unix_s() >= renew_at_unix_s(&self.current())?)
    }

    async fn renew(&self) -> Result<()> {
        let (_, ca) = self
            .state
            .certificate()?
            .ok_or_else(|| RuntimeError::NotJoined(self.state.dir.clone()))?;
        let issued = join::renew(
            self.joined.endpoint,
            &ca,
            self.identity.clone(),
            &self.joined.host,
            &self.key,
        )
        .await?;
        self.state.store(&issued)?;
        server::replace_identity(&self.identity, &self.shown, &issued.cert_pem, &self.key)?;
        tracing::info!(
            not_after = %quorum_pki::format_unix_s(quorum_pki::not_after_unix_s(&issued.cert_pem)?),
            "agent certificate renewed"
        );
        Ok(())
    }

    async fn run(self) {
        let mut retry_ms = RENEW_RETRY_FIRST_MS;
        loop {
            let wait_ms = match renew_at_unix_s(&self.current()) {
                Ok(at) => {
                    let s = (at - join::now_unix_s()).max(0) as u64;
                    s.saturating_mul(1_000).min(RENEW_CHECK_MAX_MS)
                }
                Err(_) => RENEW_CHECK_MAX_MS,
            };
            if wait_ms > 0 {
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
                continue;
            }
            match self.renew().await {
                Ok(()) => retry_ms = RENEW_RETRY_FIRST_MS,
                Err(e) => {
                    tracing::warn!(error = %e, retry_ms, "renewing the agent's certificate failed");
                    tokio::time::sleep(Duration::from_millis(retry_ms)).await;
                    retry_ms = (retry_ms * 2).min(RENEW_RETRY_MAX_MS);
                }
            }
        }
    }
}
