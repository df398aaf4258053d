//! One SSH session (russh): the server's host key checked against a known-hosts file
//! before anything is sent, public-key authentication, and commands run one channel
//! each with a deadline and a bound on what they print.

use russh::client;
use russh::keys::{self, HashAlg, PrivateKeyWithHashAlg, PublicKey};
use russh::ChannelMsg;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncRead;

/// How long the TCP connection, key exchange and authentication may take together.
pub const CONNECT_TIMEOUT_MS: u64 = 15_000;
/// The most a command's standard output or standard error is kept (the rest is cut).
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// A session with nothing on it for this long is closed by russh.
const INACTIVITY_TIMEOUT_S: u64 = 120;

/// Where to log in: `user@host`, and the port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub user: String,
    pub host: String,
    pub port: u16,
}

impl Target {
    /// Reads `user@host` (an IPv6 address in brackets: `root@[2001:db8::1]`).
    pub fn parse(s: &str, port: u16) -> Result<Target, SshError> {
        let bad = || SshError::Target(s.to_string());
        let (user, host) = s.split_once('@').ok_or_else(bad)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let plain = |t: &str| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        };
        if !plain(user) || user.contains(':') || !plain(host) || port == 0 {
            return Err(bad());
        }
        Ok(Target {
            user: user.to_string(),
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}@[{}]:{}", self.user, self.host, self.port)
        } else {
            write!(f, "{}@{}:{}", self.user, self.host, self.port)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("{0:?} is not an SSH target: write USER@HOST (e.g. root@198.18.0.11)")]
    Target(String),
    #[error("cannot read the SSH key {path}: {detail}")]
    Key { path: PathBuf, detail: String },
    #[error("cannot reach {target}: {detail}")]
    Connect { target: String, detail: String },
    #[error("{what} on {target} took longer than {after_ms} ms")]
    Timeout {
        target: String,
        what: String,
        after_ms: u64,
    },
    #[error("{target} offered a host key that {known_hosts} does not know ({fingerprint}); check it on the host (ssh-keygen -lf /etc/ssh/ssh_host_{kind}_key.pub), then record it, e.g. ssh-keyscan -p {port} -t {kind} {host} >> {known_hosts}")]
    UnknownHostKey {
        target: String,
        host: String,
        port: u16,
        kind: String,
        fingerprint: String,
        known_hosts: String,
    },
    #[error("{target} offered a host key ({fingerprint}) that differs from the one on line {line} of {known_hosts}: refusing (a changed host, or someone in between); if the host was reinstalled, remove that line and record the new key")]
    HostKeyChanged {
        target: String,
        fingerprint: String,
        line: usize,
        known_hosts: String,
    },
    #[error("cannot read the known-hosts file {known_hosts}: {detail}")]
    KnownHosts { known_hosts: String, detail: String },
    #[error("{target} refused the key {key} for user {user}")]
    AuthRejected {
        target: String,
        user: String,
        key: String,
    },
    #[error("SSH to {target}: {detail}")]
    Protocol { target: String, detail: String },
}

/// What the host-key check saw, kept for the error (russh only learns "refused").
#[derive(Default)]
struct Seen {
    refusal: Option<SshError>,
}

struct Checker {
    target: Target,
    known_hosts: PathBuf,
    seen: Arc<Mutex<Seen>>,
}

impl client::Handler for Checker {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        offered: &keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        // A host certificate is checked by the key it certifies: quorum trusts host
        // keys listed in known-hosts, not certificate authorities.
        let key = &match offered {
            keys::PublicKeyOrCertificate::PublicKey { key, .. } => key.clone(),
            keys::PublicKeyOrCertificate::Certificate(c) => {
                PublicKey::new(c.public_key().clone(), "")
            }
        };
        let t = &self.target;
        let kh = self.known_hosts.display().to_string();
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        let refusal = match keys::check_known_hosts_path(&t.host, t.port, key, &self.known_hosts) {
            Ok(true) => return Ok(true),
            Ok(false) => SshError::UnknownHostKey {
                target: t.to_string(),
                host: t.host.clone(),
                port: t.port,
                kind: key_kind(key),
                fingerprint,
                known_hosts: kh,
            },
            Err(keys::Error::KeyChanged { line }) => SshError::HostKeyChanged {
                target: t.to_string(),
                fingerprint,
                line,
                known_hosts: kh,
            },
            Err(e) => SshError::KnownHosts {
                known_hosts: kh,
                detail: e.to_string(),
            },
        };
        if let Ok(mut seen) = self.seen.lock() {
            seen.refusal = Some(refusal);
        }
        Ok(false)
    }
}

/// The short name ssh-keygen and ssh-keyscan use for a key's type.
fn key_kind(key: &PublicKey) -> String {
    match key.algorithm().as_str() {
        "ssh-ed25519" => "ed25519".into(),
        "ssh-rsa" => "rsa".into(),
        a if a.starts_with("ecdsa-") => "ecdsa".into(),
        a => a.to_string(),
    }
}

/// What a command printed and how it ended.
#[derive(Debug, Default)]
pub struct Output {
    /// Its exit status (`None`: it ended without one, e.g. killed by a signal).
    pub status: Option<u32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

/// The private key at `key`: an OpenSSH key without a passphrase.
fn load_key(key: &Path) -> Result<keys::PrivateKey, SshError> {
    if let Err(e) = std::fs::File::open(key) {
        return Err(SshError::Key {
            path: key.to_path_buf(),
            detail: e.to_string(),
        });
    }
    keys::load_secret_key(key, None).map_err(|e| SshError::Key {
        path: key.to_path_buf(),
        detail: match e {
            keys::Error::KeyIsEncrypted => {
                "it is protected by a passphrase; give a key without one (a key made for installing agents)".into()
            }
            e => format!("{e} (it must be an OpenSSH private key, ed25519 or ECDSA)"),
        },
    })
}

/// Connects to `target` (its host key checked against `known_hosts`: a refusal is
/// the error) and authenticates with `private` (read from `key`).
async fn log_in(
    target: &Target,
    key: &Path,
    private: keys::PrivateKey,
    known_hosts: &Path,
) -> Result<client::Handle<Checker>, SshError> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let checker = Checker {
        target: target.clone(),
        known_hosts: known_hosts.to_path_buf(),
        seen: seen.clone(),
    };
    let config = Arc::new(client::Config {
        inactivity_timeout: Some(Duration::from_secs(INACTIVITY_TIMEOUT_S)),
        ..Default::default()
    });
    let t = target.to_string();
    let addr = (target.host.as_str(), target.port);
    let mut handle = match client::connect(config, addr, checker).await {
        Ok(h) => h,
        Err(e) => {
            let refused = seen.lock().ok().and_then(|mut s| s.refusal.take());
            return Err(refused.unwrap_or_else(|| SshError::Connect {
                target: t.clone(),
                detail: describe(&e),
            }));
        }
    };
    let hash = handle
        .best_supported_rsa_hash()
        .await
        .map_err(|e| protocol(&t, e))?
        .flatten();
    let auth = handle
        .authenticate_publickey(
            target.user.clone(),
            PrivateKeyWithHashAlg::new(Arc::new(private), hash),
        )
        .await
        .map_err(|e| protocol(&t, e))?;
    if !auth.success() {
        return Err(SshError::AuthRejected {
            target: t.clone(),
            user: target.user.clone(),
            key: key.display().to_string(),
        });
    }
    Ok(handle)
}

/// An authenticated session.
pub struct Session {
    target: Target,
    handle: client::Handle<Checker>,
}

impl Session {
    /// Connects to `target`, checks its host key against `known_hosts` and logs in
    /// with the private key at `key`.
    pub async fn connect(
        target: &Target,
        key: &Path,
        known_hosts: &Path,
    ) -> Result<Session, SshError> {
        let private = load_key(key)?;
        let t = target.to_string();
        let login = log_in(target, key, private, known_hosts);
        let handle = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), login)
            .await
            .map_err(|_| SshError::Timeout {
                target: t.clone(),
                what: "connecting and logging in".into(),
                after_ms: CONNECT_TIMEOUT_MS,
            })??;
        Ok(Session {
            target: target.clone(),
            handle,
        })
    }

    /// Runs `command` (through the user's shell, as `ssh host command` does) with
    /// `stdin` as its standard input, for at most `timeout_ms`.
    pub async fn run(
        &self,
        what: &str,
        command: &str,
        stdin: Option<&mut (dyn AsyncRead + Unpin + Send)>,
        timeout_ms: u64,
    ) -> Result<Output, SshError> {
        let t = self.target.to_string();
        let work = async {
            let mut ch = self
                .handle
                .channel_open_session()
                .await
                .map_err(|e| protocol(&t, e))?;
            ch.exec(true, command).await.map_err(|e| protocol(&t, e))?;
            if let Some(input) = stdin {
                ch.data(input).await.map_err(|e| protocol(&t, e))?;
            }
            ch.eof().await.map_err(|e| protocol(&t, e))?;
            let mut out = Output::default();
            let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
            while let Some(msg) = ch.wait().await {
                match msg {
                    ChannelMsg::Data { data } => keep(&mut stdout, &data),
                    ChannelMsg::ExtendedData { data, .. } => keep(&mut stderr, &data),
                    ChannelMsg::ExitStatus { exit_status } => out.status = Some(exit_status),
                    _ => {}
                }
            }
            out.stdout = String::from_utf8_lossy(&stdout).into_owned();
            out.stderr = String::from_utf8_lossy(&stderr).into_owned();
            Ok(out)
        };
        tokio::time::timeout(Duration::from_millis(timeout_ms), work)
            .await
            .map_err(|_| SshError::Timeout {
                target: t.clone(),
                what: what.to_string(),
                after_ms: timeout_ms,
            })?
    }

    /// Says goodbye (best effort: the host may already have gone).
    pub async fn close(self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
}

fn keep(buf: &mut Vec<u8>, data: &[u8]) {
    let room = MAX_OUTPUT_BYTES.saturating_sub(buf.len());
    buf.extend_from_slice(&data[..data.len().min(room)]);
}

fn protocol(target: &str, e: russh::Error) -> SshError {
    SshError::Protocol {
        target: target.to_string(),
        detail: describe(&e),
    }
}

/// russh's own words, except where they do not say what happened: its `Disconnected`
/// is also what a port answered by something other than sshd (a proxy, another
/// service that hangs up) gives.
fn describe(e: &russh::Error) -> String {
    match e {
        russh::Error::Disconnect => {
            "the connection was closed before the SSH exchange finished (is sshd listening on that port?)".into()
        }
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_user_at_host() {
        let t = Target::parse("root@198.18.0.11", 22).unwrap();
        assert_eq!(
            (t.user.as_str(), t.host.as_str(), t.port),
            ("root", "198.18.0.11", 22)
        );
        assert_eq!(t.to_string(), "root@198.18.0.11:22");
        let v6 = Target::parse("admin@[2001:db8::1]", 2222).unwrap();
        assert_eq!(v6.host, "2001:db8::1");
        assert_eq!(v6.to_string(), "admin@[2001:db8::1]:2222");
        for bad in [
            "198.18.0.11",
            "@h",
            "root@",
            "ro ot@h",
            "root@h;id",
            "a:b@h",
        ] {
            assert!(Target::parse(bad, 22).is_err(), "{bad}");
        }
        assert!(Target::parse("root@h", 0).is_err());
    }

    /// A port where something accepts and hangs up (not sshd): the error says that, not
    /// only russh's "Disconnected".
    #[test]
    fn a_port_that_hangs_up_is_named_as_not_sshd() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id_ed25519");
        let made = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(made.success());
        let known = dir.path().join("known_hosts");
        std::fs::write(&known, "").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let hang_up = tokio::spawn(async move {
                // Hangs up cleanly (a FIN, as a proxy with nothing behind it does) and
                // reads whatever the client sends until it closes: no unread data, so
                // no reset.
                let (mut sock, _) = listener.accept().await.unwrap();
                tokio::io::AsyncWriteExt::shutdown(&mut sock).await.unwrap();
                let mut sink = [0u8; 4096];
                while let Ok(n) = tokio::io::AsyncReadExt::read(&mut sock, &mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
            });
            let target = Target::parse("root@127.0.0.1", port).unwrap();
            let err = Session::connect(&target, &key, &known).await.err().unwrap();
            hang_up.await.unwrap();
            err
        });
        let text = err.to_string();
        assert!(
            matches!(err, SshError::Connect { .. }) && text.contains("is sshd listening"),
            "{text}"
        );
    }
}
