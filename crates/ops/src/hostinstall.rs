//! `quorum host install`: put the agent on a host over SSH and see it join. SSH is used
//! once, to carry the binary and start the agent; afterwards the controller speaks to
//! the agent's own API only.
//!
//! The order keeps a failure cheap: connect and probe first (the host's key checked,
//! nothing written anywhere), then record the host and make its token, then upload
//! (skipped when the same binary is there), start, and wait until the agent joined and
//! answers. Running it again is safe: a joined agent gets no new token (it keeps its
//! key), a binary in place is not sent again, a running agent is restarted (its members
//! are detached and keep running).

use crate::hosts::{self, AddHost, HostRecord};
use anyhow::{anyhow, bail, Context, Result};
use quorum_agent::token::JoinToken;
use quorum_ssh::{plan, Session, Target};
use quorum_store::Store;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the token an install makes works: it is used at once.
pub const INSTALL_TOKEN_TTL_S: u64 = 15 * 60;
/// How long a probe, a start or a log read may take.
const STEP_TIMEOUT_MS: u64 = 30_000;
/// How long the upload of the binary may take.
const UPLOAD_TIMEOUT_MS: u64 = 10 * 60_000;
/// How long the agent has to join and answer after it started.
pub const JOIN_DEADLINE_MS: u64 = 60_000;
/// How often the store and the agent are asked meanwhile.
const JOIN_POLL_MS: u64 = 200;
/// How many lines of the agent's log an error shows.
const LOG_LINES: u32 = 20;

/// What `quorum host install` asks for.
#[derive(Clone, Debug)]
pub struct InstallHost {
    pub name: String,
    pub target: Target,
    /// The private key to log in with.
    pub key: PathBuf,
    pub known_hosts: PathBuf,
    /// The address the agent and members listen on (default: the SSH host, if it is
    /// an address). Only for a host not recorded yet.
    pub address: Option<IpAddr>,
    pub labels: BTreeMap<String, String>,
    /// Where the binary and the agent's state go on the host.
    pub prefix: String,
    pub certificate_lifetime_s: u64,
    pub endpoint: Option<SocketAddr>,
    /// A joined host's agent joins again (its state on the host was lost).
    pub rejoin: bool,
    /// The binary to install (this one).
    pub binary: PathBuf,
}

/// What an install did, with how long each part took.
#[derive(Clone, Debug)]
pub struct Installed {
    pub address: IpAddr,
    pub sha256: String,
    /// Bytes sent (0: the same binary was there).
    pub uploaded_bytes: u64,
    /// How the agent runs: "systemd" or "detached pid N".
    pub started: String,
    /// A new token was used (a first join or a rejoin).
    pub joined_now: bool,
    pub probe_ms: u64,
    pub upload_ms: u64,
    pub join_ms: u64,
}

/// Installs and starts the agent of host `req.name` over SSH; `step` hears each step.
pub async fn install(
    store: &Store,
    req: &InstallHost,
    now_unix_s: i64,
    mut step: impl FnMut(&str),
) -> Result<Installed> {
    plan::check_prefix(&req.prefix)?;
    hosts::check_host_name(&req.name)?;
    let existing = hosts::get(store, &req.name)?;
    let address = host_address(req, existing.as_ref())?;
    let (sha256, size) = digest(&req.binary)?;

    let t = Instant::now();
    step(&format!(
        "connecting to {} (host key checked against {})",
        req.target,
        req.known_hosts.display()
    ));
    let ssh = Session::connect(&req.target, &req.key, &req.known_hosts).await?;
    let probe = probe_host(&ssh, req).await?;
    let systemd = probe.systemd && probe.root;
    let probe_ms = ms(t);

    let token = host_token(store, req, existing.as_ref(), address, now_unix_s)?;

    let t = Instant::now();
    let installed = probe.installed_sha256.as_deref();
    let uploaded_bytes = send_binary(&ssh, req, installed, &sha256, size, &mut step).await?;
    let upload_ms = ms(t);

    let started = start_agent(&ssh, req, systemd, token.as_ref()).await?;
    step(&format!(
        "agent started ({started}); waiting for it to join and answer"
    ));

    let t = Instant::now();
    if let Err(e) = wait_ready(store, &req.name, token.is_some()).await {
        let log = agent_log(&ssh, req, systemd).await;
        ssh.close().await;
        bail!(
            "{e}\nthe agent's last log lines on {}:\n{}",
            req.name,
            log.trim_end()
        );
    }
    if token.is_some() {
        forget_token(&ssh, req).await;
    }
    ssh.close().await;
    Ok(Installed {
        address,
        sha256,
        uploaded_bytes,
        started,
        joined_now: token.is_some(),
        probe_ms,
        upload_ms,
        join_ms: ms(t),
    })
}

/// The address the agent and members listen on: the recorded one for a host recorded
/// already (another is refused, as its members' URLs name it), else the one asked
/// for, else the SSH host if it is an address.
fn host_address(req: &InstallHost, existing: Option<&HostRecord>) -> Result<IpAddr> {
    Ok(match (existing, req.address) {
        (Some(h), Some(a)) if h.address != a => bail!(
            "host {} is at {}, not {a}: a host keeps its address (its members' URLs name it)",
            req.name,
            h.address
        ),
        (Some(h), _) => h.address,
        (None, Some(a)) => a,
        (None, None) => req.target.host.parse().map_err(|_| {
            anyhow!(
                "{} is not an address: give the address the agent and members listen on with --address IP",
                req.target.host
            )
        })?,
    })
}

/// Probes the host (nothing written): what it runs and has, refused unless it is of
/// this binary's architecture.
async fn probe_host(ssh: &Session, req: &InstallHost) -> Result<plan::Probe> {
    let probe = ssh
        .run(
            "the probe",
            &plan::probe_script(&req.prefix),
            None,
            STEP_TIMEOUT_MS,
        )
        .await?;
    if !probe.success() {
        bail!(
            "the probe failed on {}: {}",
            req.target,
            probe.stderr.trim()
        );
    }
    let probe = plan::parse_probe(&probe.stdout)?;
    let ours = plan::uname_machine(std::env::consts::ARCH);
    if probe.arch != ours {
        bail!(
            "{} is {}, this quorum binary is built for {ours}: install a {} build from that host's own machine",
            req.target,
            probe.arch,
            probe.arch
        );
    }
    Ok(probe)
}

/// The host's record, and a token unless its agent joined already (and is not asked to
/// join again).
fn host_token(
    store: &Store,
    req: &InstallHost,
    existing: Option<&HostRecord>,
    address: IpAddr,
    now_unix_s: i64,
) -> Result<Option<JoinToken>> {
    Ok(match (existing, req.rejoin) {
        (Some(h), false) if h.key_sha256.is_some() => None,
        _ => {
            let add = AddHost {
                name: req.name.clone(),
                address,
                labels: req.labels.clone(),
                token_ttl_s: INSTALL_TOKEN_TTL_S,
                certificate_lifetime_s: req.certificate_lifetime_s,
                rejoin: existing.is_some(),
                endpoint: req.endpoint,
            };
            Some(hosts::add(store, &add, now_unix_s)?)
        }
    })
}

/// Sends the binary (`sha256`, `size` bytes) unless the host has it already
/// (`installed`); the bytes sent.
async fn send_binary(
    ssh: &Session,
    req: &InstallHost,
    installed: Option<&str>,
    sha256: &str,
    size: u64,
    step: &mut impl FnMut(&str),
) -> Result<u64> {
    if installed == Some(sha256) {
        step(&format!("{}/bin/quorum is this binary already", req.prefix));
        return Ok(0);
    }
    step(&format!(
        "sending the binary ({} MB) to {}/bin/quorum",
        size / 1_000_000,
        req.prefix
    ));
    upload(ssh, req, sha256).await?;
    Ok(size)
}

/// Sends the binary to `bin/quorum` under the prefix (`sha256` checked on the host).
async fn upload(ssh: &Session, req: &InstallHost, sha256: &str) -> Result<()> {
    let mut file = tokio::fs::File::open(&req.binary)
        .await
        .with_context(|| format!("cannot read {}", req.binary.display()))?;
    let up = ssh
        .run(
            "the upload",
            &plan::upload_script(&req.prefix, sha256),
            Some(&mut file),
            UPLOAD_TIMEOUT_MS,
        )
        .await?;
    if !up.success() {
        bail!("the upload to {} failed: {}", req.target, up.stderr.trim());
    }
    Ok(())
}

/// Starts the agent (with `token` to join, if any); how it runs: "systemd" or
/// "detached pid N".
async fn start_agent(
    ssh: &Session,
    req: &InstallHost,
    systemd: bool,
    token: Option<&JoinToken>,
) -> Result<String> {
    let encoded = token.map(|t| t.encode());
    let start = ssh
        .run(
            "starting the agent",
            &plan::start_script(&req.prefix, systemd, encoded.as_deref()),
            None,
            STEP_TIMEOUT_MS,
        )
        .await?;
    if !start.success() {
        bail!(
            "starting the agent on {} failed: {}",
            req.target,
            start.stderr.trim()
        );
    }
    Ok(start
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("started="))
        .unwrap_or("?")
        .replace("pid=", "pid "))
}

/// The last `LOG_LINES` of the agent's log (empty if they cannot be read): what an
/// error about an agent that did not become ready shows.
async fn agent_log(ssh: &Session, req: &InstallHost, systemd: bool) -> String {
    ssh.run(
        "reading the agent's log",
        &plan::log_tail_script(&req.prefix, systemd, LOG_LINES),
        None,
        STEP_TIMEOUT_MS,
    )
    .await
    .map(|o| o.stdout)
    .unwrap_or_default()
}

/// Removes the token from the host. Best effort: a token left behind is spent already.
async fn forget_token(ssh: &Session, req: &InstallHost) {
    let _ = ssh
        .run(
            "removing the spent token",
            &plan::forget_token_script(&req.prefix),
            None,
            STEP_TIMEOUT_MS,
        )
        .await;
}

/// Waits (up to `JOIN_DEADLINE_MS`) until host `name` joined (when it was given a
/// token) and its agent answers.
pub async fn wait_ready(store: &Store, name: &str, joining: bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_millis(JOIN_DEADLINE_MS);
    let mut last = String::from("it has not joined");
    loop {
        let rec =
            hosts::get(store, name)?.ok_or_else(|| anyhow!("host {name} was removed meanwhile"))?;
        // A token consumed is a join done (the join service clears it as it pins the key).
        let joined = rec.key_sha256.is_some() && (!joining || rec.join.is_none());
        if joined {
            let tls = hosts::controller_tls(store, quorum_clock::now_unix_s())?;
            let addr = SocketAddr::new(rec.address, quorum_agent::AGENT_PORT);
            let ask = async {
                let mut c = quorum_agent::client::AgentClient::connect(name, addr, tls).await?;
                c.report().await
            };
            match tokio::time::timeout(Duration::from_millis(JOIN_POLL_MS * 10), ask).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => last = format!("it joined but does not answer: {e}"),
                Err(_) => last = "it joined but does not answer yet".into(),
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "the agent of {name} was not ready within {} s: {last}",
                JOIN_DEADLINE_MS / 1_000
            );
        }
        tokio::time::sleep(Duration::from_millis(JOIN_POLL_MS)).await;
    }
}

/// The SHA-256 (hex) and size of a file.
fn digest(path: &std::path::Path) -> Result<(String, u64)> {
    use std::io::Read;
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        ctx.update(&buf[..n]);
    }
    let hex: String = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, size))
}

fn ms(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}
