//! `quorum etcdctl NAME -- ARGS`: etcdctl of the control plane's version, pointed at the
//! endpoints it publishes now and holding a client certificate issued for this one run.
//! The endpoints and files `quorum credentials` printed go stale as a rollout replaces
//! members; these never do.

use crate::args::EtcdctlArgs;
use anyhow::{bail, Context, Result};
use quorum_core::{ControlPlane, Version};
use quorum_ops::{status, Ctx, Place};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use tokio::signal::unix::{signal, SignalKind};

/// How long the certificate of one run is valid: enough for a long `watch`; a run is
/// not meant to outlive it (the certificate is gone with the run anyway).
const CERTIFICATE_LIFETIME_S: i64 = 24 * 3600;
/// The name etcd's logs show for these runs.
const COMMON_NAME: &str = "quorum-etcdctl";
/// etcdctl's own variables for the flags passed here: etcdctl refuses a flag that is
/// also set in its environment, and the fresh values must win.
const SHADOWED_VARS: [&str; 4] = [
    "ETCDCTL_ENDPOINTS",
    "ETCDCTL_CACERT",
    "ETCDCTL_CERT",
    "ETCDCTL_KEY",
];
/// The temporary directory of the certificate: the owner's only.
const PRIVATE_DIR_MODE: u32 = 0o700;
/// A process ended by signal N exits with this plus N, as shells report it.
const SIGNAL_EXIT_BASE: i32 = 128;

pub async fn run(at: &Place, a: EtcdctlArgs) -> Result<()> {
    let ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    let bin = etcdctl_binary(ctx.provider.etcd_dir(), cp.spec.version)?;
    let endpoints = endpoints(&ctx, &cp).await?;
    // Owner-only (0700: tempfile's own default follows the umask) and removed when
    // dropped, on every path out of here.
    let dir = tempfile::Builder::new()
        .prefix("quorum-etcdctl-")
        .permissions(std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))
        .tempdir()
        .context("cannot create a private temporary directory for the client certificate")?;
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.arg(format!("--endpoints={}", endpoints.join(",")));
    cmd.args(credentials(&ctx, &cp, dir.path())?);
    cmd.args(&a.args);
    for var in SHADOWED_VARS {
        cmd.env_remove(var);
    }
    // The flags above are the v3 API's (3.4 already defaults to it; a user's
    // ETCDCTL_API=2 would make them meaningless).
    cmd.env("ETCDCTL_API", "3");
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    let status = wait_forwarding_signals(child).await?;
    dir.close()
        .context("cannot remove the temporary client certificate")?;
    let code = exit_code(status);
    if code != 0 {
        // etcdctl's exit status is the command's; it has said why on its own stderr.
        // Everything to clean up (the certificate) is gone by now.
        std::process::exit(code);
    }
    Ok(())
}

/// `<etcd dir>/<version>/etcdctl`, installed with the etcd of that version.
fn etcdctl_binary(etcd_dir: &Path, version: Version) -> Result<PathBuf> {
    let bin = etcd_dir.join(version.to_string()).join("etcdctl");
    if !bin.exists() {
        bail!(
            "no etcdctl for etcd {version} at {} (scripts/install.sh installs it with etcd)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Every endpoint the control plane publishes now: its decision on a fresh observation
/// (voting, healthy, not leaving), as the controller publishes it.
async fn endpoints(ctx: &Ctx, cp: &ControlPlane) -> Result<Vec<String>> {
    let a = ctx.access(cp)?;
    let (_, _, decision) = status::decision(&ctx.store, &ctx.provider, &a.etcd, cp).await?;
    if decision.endpoints.is_empty() {
        bail!(
            "{} has no endpoint to connect to now: no member is voting, healthy and staying (`quorum status {}` shows why)",
            cp.name,
            cp.name
        );
    }
    Ok(decision.endpoints)
}

/// For a TLS control plane: a client certificate for this run, its key and the CA
/// bundle, written owner-only into `dir`, as etcdctl's flags. Nothing for plain HTTP.
fn credentials(ctx: &Ctx, cp: &ControlPlane, dir: &Path) -> Result<Vec<String>> {
    let access = ctx.access(cp)?;
    let Some(ca) = access.ca() else {
        return Ok(Vec::new());
    };
    let now = quorum_clock::now_unix_s();
    let not_after = (now + CERTIFICATE_LIFETIME_S).min(ca.not_after_unix_s());
    let id = ca.issue_client(COMMON_NAME, now, not_after)?;
    let mut flags = Vec::new();
    let bundle = access
        .trust_pem()
        .unwrap_or_else(|| ca.cert_pem().to_string());
    for (flag, file, pem) in [
        ("cacert", "ca.crt", bundle.as_str()),
        ("cert", "client.crt", id.cert_pem.as_str()),
        ("key", "client.key", id.key_pem.as_str()),
    ] {
        let path = dir.join(file);
        quorum_pki::write_private(&path, pem.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        flags.push(format!("--{flag}={}", path.display()));
    }
    Ok(flags)
}

/// Waits for etcdctl. Ctrl-C, SIGTERM and SIGHUP are passed on to it instead of ending
/// quorum, so that quorum outlives it and removes the certificate.
async fn wait_forwarding_signals(mut child: tokio::process::Child) -> Result<ExitStatus> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        let sig = tokio::select! {
            st = child.wait() => return Ok(st?),
            _ = int.recv() => libc::SIGINT,
            _ = term.recv() => libc::SIGTERM,
            _ = hup.recv() => libc::SIGHUP,
        };
        // `id()` is `None` once the child was reaped: then there is nobody to tell.
        if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: kill(2) on the pid of our own child, not yet reaped (so not reused).
            unsafe { libc::kill(pid, sig) };
        }
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| SIGNAL_EXIT_BASE + s))
        .unwrap_or(1)
}
