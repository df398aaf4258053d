//! A snapshot is verified by a test restore: its stored file checked against the
//! recorded sha256, restored with etcd's tool into a scratch directory, started as a
//! throwaway single member on a private loopback address, and read back (its revision
//! must be the recorded one; its keys are counted), then stopped and removed.

use crate::BackupError;
use etcd_client::{Client, ConnectOptions, GetOptions};
use quorum_core::{SnapshotRecord, Verification, Version};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd's tool may take to restore a snapshot into a data directory.
pub const RESTORE_TIMEOUT_MS: u64 = 300_000;
/// How long the restored member may take to serve.
pub const SERVE_TIMEOUT_MS: u64 = 60_000;
/// How often to ask it meanwhile.
const SERVE_POLL_MS: u64 = 100;
/// The loopback range test restores use (`127.254.x.y`): apart from the machines'
/// `127.A.B.x` subnets (quorum draws `A` from `16..216`; the tests' own from `30..230`).
const VERIFY_NET: u8 = 254;
/// How many random addresses to try before giving up on a free one.
const ADDRESS_ATTEMPTS: u32 = 16;

/// The installed etcd a restore runs on: the snapshot's own version where it is
/// installed (the release the data was written by, and known to start here), else the
/// oldest installed release of the same minor or newer (each reads every older
/// snapshot). The newest is not preferred: a release being rolled out may be the one
/// that cannot start.
pub fn restore_binary(etcd_dir: &Path, snapshot_of: Version) -> Result<PathBuf, BackupError> {
    Ok(etcd_dir
        .join(restore_version(etcd_dir, snapshot_of)?.to_string())
        .join("etcd"))
}

/// What a test restore of a snapshot of `snapshot_of` runs: the tool that restores it
/// (`restore_tool` of the release it starts on) and that release's etcd
/// (`restore_binary`).
pub fn verify_kit(
    etcd_dir: &Path,
    snapshot_of: Version,
) -> Result<(PathBuf, PathBuf), BackupError> {
    let runs = restore_version(etcd_dir, snapshot_of)?;
    let tool = crate::restore_tool(etcd_dir, runs)?;
    Ok((tool, etcd_dir.join(runs.to_string()).join("etcd")))
}

/// The release `restore_binary` picks.
fn restore_version(etcd_dir: &Path, snapshot_of: Version) -> Result<Version, BackupError> {
    let installed = quorum_provider::installed_versions(etcd_dir);
    let pick = installed.iter().find(|v| **v == snapshot_of).or_else(|| {
        installed
            .iter()
            .find(|v| (v.major, v.minor) >= (snapshot_of.major, snapshot_of.minor))
    });
    match pick {
        Some(v) => Ok(*v),
        None => Err(BackupError::Tool {
            message: format!(
                "no etcd of {}.{} or newer is installed in {} to restore a snapshot of {snapshot_of} into",
                snapshot_of.major,
                snapshot_of.minor,
                etcd_dir.display()
            ),
        }),
    }
}

/// Test-restores `rec`'s file (at `file`) with `tool` and `etcd` in a scratch directory
/// under `scratch_parent`, and says what came of it at `now_unix_s`. A restore that
/// fails is a `Verification` with `ok: false` and the reason, not an error: it is the
/// answer. The scratch directory and the member are gone when this returns.
pub async fn verify(
    rec: &SnapshotRecord,
    file: &Path,
    tool: &Path,
    etcd: &Path,
    scratch_parent: &Path,
    now_unix_s: i64,
) -> Verification {
    let started = Instant::now();
    let outcome = restore_and_read(rec, file, tool, etcd, scratch_parent).await;
    let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match outcome {
        Ok((revision, keys)) => Verification {
            at_unix_s: now_unix_s,
            ok: true,
            revision,
            keys,
            took_ms,
            error: None,
        },
        Err(e) => Verification {
            at_unix_s: now_unix_s,
            ok: false,
            revision: 0,
            keys: 0,
            took_ms,
            error: Some(e.to_string()),
        },
    }
}

async fn restore_and_read(
    rec: &SnapshotRecord,
    file: &Path,
    tool: &Path,
    etcd: &Path,
    scratch_parent: &Path,
) -> Result<(i64, u64), BackupError> {
    crate::digest::check_unchanged(rec, file)?;
    std::fs::create_dir_all(scratch_parent).map_err(|e| scratch_error(scratch_parent, e))?;
    let scratch = tempfile::Builder::new()
        .prefix(".verify-")
        .tempdir_in(scratch_parent)
        .map_err(|e| scratch_error(scratch_parent, e))?;
    let addr = free_address()?;
    let data = scratch.path().join("data");
    let peer = format!("http://{addr}:{}", quorum_core::PEER_PORT);
    let client = format!("http://{addr}:{}", quorum_core::CLIENT_PORT);
    restore(tool, file, &data, &peer).await?;
    let mut member = start_member(etcd, scratch.path(), &data, &peer, &client)?;
    let read = read_back(&client, &mut member.0).await;
    drop(member);
    let (revision, keys) = read.map_err(|e| {
        let log = std::fs::read_to_string(scratch.path().join("etcd.log")).unwrap_or_default();
        let last = log.lines().last().unwrap_or("").to_string();
        tool_error(format!("the restored member: {e} (its log: {last})"))
    })?;
    // A keyspace never written to is at revision 0 in the file and 1 once served.
    if revision != rec.facts.revision.max(1) {
        return Err(BackupError::Facts(format!(
            "the restored member is at revision {revision}, the snapshot's facts say {}",
            rec.facts.revision
        )));
    }
    Ok((revision, keys))
}

/// Restores the snapshot `file` into `data` with `tool`, as a one-member cluster whose
/// member listens for peers on `peer`.
async fn restore(tool: &Path, file: &Path, data: &Path, peer: &str) -> Result<(), BackupError> {
    let mut restore = tokio::process::Command::new(tool);
    restore
        .args(["snapshot", "restore"])
        .arg(file)
        .arg(format!("--data-dir={}", data.display()))
        .arg("--name=verify")
        .arg(format!("--initial-cluster=verify={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .env("ETCDCTL_API", "3")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_millis(RESTORE_TIMEOUT_MS), restore.output())
        .await
        .map_err(|_| tool_error(format!("restore: no end within {RESTORE_TIMEOUT_MS} ms")))?
        .map_err(|e| tool_error(format!("running {}: {e}", tool.display())))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(tool_error(format!(
            "restore failed ({}): {}",
            out.status,
            stderr.trim().lines().last().unwrap_or("no message")
        )));
    }
    Ok(())
}

/// Starts the throwaway member on the restored `data`, its standard error to
/// `etcd.log` in `scratch`.
fn start_member(
    etcd: &Path,
    scratch: &Path,
    data: &Path,
    peer: &str,
    client: &str,
) -> Result<Throwaway, BackupError> {
    let log =
        std::fs::File::create(scratch.join("etcd.log")).map_err(|e| scratch_error(scratch, e))?;
    let mut cmd = Command::new(etcd);
    die_with_parent(&mut cmd);
    let child = cmd
        .arg(format!("--data-dir={}", data.display()))
        .arg("--name=verify")
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| tool_error(format!("starting {}: {e}", etcd.display())))?;
    Ok(Throwaway(child))
}

/// The throwaway member dies with the process that started it: a controller killed
/// in the middle of a test restore leaves no etcd behind (`Throwaway` covers every
/// other way out, by drop).
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid before the fork; in the child only prctl, getppid and _exit, which
    // are async-signal-safe.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died between the fork and the prctl: nobody would stop it.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// The restored member's revision and key count, once it serves (within
/// `SERVE_TIMEOUT_MS`). A member that exits meanwhile is the answer at once: waiting
/// out the deadline for a process that is gone would hold up the controller's pass.
async fn read_back(url: &str, member: &mut Child) -> Result<(i64, u64), String> {
    let deadline = Instant::now() + Duration::from_millis(SERVE_TIMEOUT_MS);
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_millis(2_000));
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        if let Ok(Some(status)) = member.try_wait() {
            return Err(format!("it exited ({status}) before it served"));
        }
        match Client::connect([url], Some(opts.clone())).await {
            Ok(mut c) => {
                let all = GetOptions::new().with_from_key().with_count_only();
                match c.get(vec![0u8], Some(all)).await {
                    Ok(r) => {
                        let revision = r.header().map_or(0, |h| h.revision());
                        return Ok((revision, u64::try_from(r.count()).unwrap_or(0)));
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(SERVE_POLL_MS)).await;
    }
    Err(format!(
        "did not serve within {SERVE_TIMEOUT_MS} ms: {last}"
    ))
}

/// A random `127.254.x.y` whose client and peer ports are free.
fn free_address() -> Result<Ipv4Addr, BackupError> {
    for _ in 0..ADDRESS_ATTEMPTS {
        let a = Ipv4Addr::new(
            127,
            VERIFY_NET,
            rand::random::<u8>(),
            rand::random_range(1..255),
        );
        let free = [quorum_core::CLIENT_PORT, quorum_core::PEER_PORT]
            .iter()
            .all(|p| TcpListener::bind(SocketAddrV4::new(a, *p)).is_ok());
        if free {
            return Ok(a);
        }
    }
    Err(tool_error(format!(
        "no free loopback address in 127.{VERIFY_NET}.0.0/16 after {ADDRESS_ATTEMPTS} tries"
    )))
}

/// The restored member, killed (by its PID) and waited for when dropped: it holds a
/// copy of every key and must not outlive the check.
struct Throwaway(Child);

impl Drop for Throwaway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tool_error(message: String) -> BackupError {
    BackupError::Tool { message }
}

fn scratch_error(at: &Path, e: std::io::Error) -> BackupError {
    BackupError::Store {
        location: at.display().to_string(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installed(versions: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for v in versions {
            std::fs::create_dir_all(dir.path().join(v)).unwrap();
            std::fs::write(dir.path().join(v).join("etcd"), "").unwrap();
        }
        dir
    }

    fn picked(dir: &Path, snapshot_of: &str) -> Option<String> {
        restore_binary(dir, snapshot_of.parse().unwrap())
            .ok()
            .map(|p| {
                p.parent()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
    }

    #[test]
    fn a_restore_runs_on_the_snapshots_own_release_else_the_closest_newer_one() {
        let dir = installed(&["3.4.23", "3.5.0", "3.5.1"]);
        let at = dir.path();
        assert_eq!(picked(at, "3.4.23").as_deref(), Some("3.4.23"));
        assert_eq!(picked(at, "3.5.1").as_deref(), Some("3.5.1"));
        // Not installed: the oldest of the same minor or newer.
        assert_eq!(picked(at, "3.4.20").as_deref(), Some("3.4.23"));
        assert_eq!(picked(at, "3.5.3").as_deref(), Some("3.5.0"));
        assert_eq!(picked(at, "3.3.27").as_deref(), Some("3.4.23"));
        // Nothing reads a snapshot newer than every installed release.
        let e = restore_binary(at, "3.6.0".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("no etcd of 3.6 or newer"), "{e}");
    }
}
