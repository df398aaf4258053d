//! A snapshot restored into the data directory of the machine that seeds a rebuilt
//! cluster (`quorum restore`, `quorum recover --from-snapshot`).
//!
//! The file is checked against its record's sha256 first; etcd's tool restores it into
//! `<data>.restoring` beside the data directory, which is renamed into place only
//! whole. A data directory that already holds member data is the restore done (a
//! crash after the rename): nothing is restored twice, and nothing half-restored is
//! ever started.
//!
//! The restore is given a fresh cluster token: etcd derives the cluster and member IDs
//! from the peer URLs and the token, so the new cluster can never be taken for the old
//! one, nor an old member for one of its own.

use crate::BackupError;
use quorum_core::SnapshotRecord;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How far a restore moves the revision on where etcd's tool can (`--bump-revision`),
/// with every older revision marked compacted (`--mark-compacted`): a watcher of the
/// old cluster that resumes from a revision it saw is told to re-list instead of
/// missing what changed. etcd's own recommendation is a billion.
pub const REVISION_BUMP: u64 = 1_000_000_000;
/// How long asking the tool what it supports may take.
const HELP_TIMEOUT_MS: u64 = 10_000;
/// The suffix of the directory a restore writes before it is renamed into place.
pub const RESTORING_SUFFIX: &str = ".restoring";

/// The seed's restore: which file, with which tool, into which machine.
#[derive(Clone, Debug)]
pub struct SeedRequest<'a> {
    pub rec: &'a SnapshotRecord,
    /// The snapshot's file (checked against `rec.sha256`).
    pub file: &'a Path,
    /// etcdutl or etcdctl (`status_tool`).
    pub tool: &'a Path,
    /// The machine's data directory: absent, or empty, before.
    pub data_dir: &'a Path,
    pub name: &'a str,
    pub peer_url: &'a str,
    /// The rebuild's fresh cluster token.
    pub cluster_token: &'a str,
}

/// What a restore came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seeded {
    /// The revision was moved on by `REVISION_BUMP` and older ones marked compacted.
    /// `false`: this tool cannot (etcd before 3.5.10), and watchers must re-list.
    pub bumped: bool,
    /// Already restored (a data directory with member data was found): nothing done.
    pub already: bool,
    pub took_ms: u64,
}

/// Does `tool` restore with `--bump-revision` and `--mark-compacted`? Its own help says.
pub async fn supports_revision_bump(tool: &Path) -> bool {
    let mut cmd = tokio::process::Command::new(tool);
    cmd.args(["snapshot", "restore", "--help"])
        .env("ETCDCTL_API", "3")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let run = tokio::time::timeout(Duration::from_millis(HELP_TIMEOUT_MS), cmd.output());
    match run.await {
        Ok(Ok(out)) => {
            let text = [out.stdout, out.stderr].concat();
            let text = String::from_utf8_lossy(&text);
            text.contains("bump-revision") && text.contains("mark-compacted")
        }
        _ => false,
    }
}

/// Restores `req.rec` into `req.data_dir` (see the module doc). Idempotent.
pub async fn restore_seed(req: &SeedRequest<'_>) -> Result<Seeded, BackupError> {
    let started = Instant::now();
    if req.data_dir.join("member").is_dir() {
        return Ok(Seeded {
            bumped: false,
            already: true,
            took_ms: 0,
        });
    }
    crate::digest::check_unchanged(req.rec, req.file)?;
    let staging = restoring_dir(req.data_dir);
    clear_the_way(req.data_dir, &staging)?;
    let bumped = supports_revision_bump(req.tool).await;
    restore_into(req, &staging, bumped).await?;
    std::fs::rename(&staging, req.data_dir).map_err(|e| store_error(req.data_dir, e))?;
    Ok(Seeded {
        bumped,
        already: false,
        took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// Removes what is in the way of a restore into `data_dir` through `staging` (an
/// earlier restore's staging, an empty data directory), and makes its parent.
fn clear_the_way(data_dir: &Path, staging: &Path) -> Result<(), BackupError> {
    remove_if_present(staging)?;
    // An empty data directory (made by anything but a restore) is in the rename's way.
    if data_dir.is_dir() {
        std::fs::remove_dir(data_dir).map_err(|e| store_error(data_dir, e))?;
    }
    if let Some(parent) = data_dir.parent() {
        quorum_pki::create_private_dir(parent).map_err(|e| store_error(parent, e))?;
    }
    Ok(())
}

/// Restores the snapshot into `staging` as the one member of a new cluster (revisions
/// moved on if `bumped`), and checks that it left member data there.
async fn restore_into(
    req: &SeedRequest<'_>,
    staging: &Path,
    bumped: bool,
) -> Result<(), BackupError> {
    let mut cmd = tokio::process::Command::new(req.tool);
    cmd.args(["snapshot", "restore"])
        .arg(req.file)
        .arg(format!("--data-dir={}", staging.display()))
        .arg(format!("--name={}", req.name))
        .arg(format!("--initial-cluster={}={}", req.name, req.peer_url))
        .arg(format!("--initial-advertise-peer-urls={}", req.peer_url))
        .arg(format!("--initial-cluster-token={}", req.cluster_token))
        .env("ETCDCTL_API", "3")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if bumped {
        cmd.arg(format!("--bump-revision={REVISION_BUMP}"))
            .arg("--mark-compacted");
    }
    let timeout = Duration::from_millis(crate::RESTORE_TIMEOUT_MS);
    let out = tokio::time::timeout(timeout, cmd.output())
        .await
        .map_err(|_| {
            tool_error(format!(
                "restore: no end within {} ms",
                crate::RESTORE_TIMEOUT_MS
            ))
        })?
        .map_err(|e| tool_error(format!("running {}: {e}", req.tool.display())))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let _ = std::fs::remove_dir_all(staging);
        return Err(tool_error(format!(
            "restore of {} failed ({}): {}",
            req.rec.id,
            out.status,
            stderr.trim().lines().last().unwrap_or("no message")
        )));
    }
    if !staging.join("member").is_dir() {
        return Err(tool_error(format!(
            "the restore of {} left no member data in {}",
            req.rec.id,
            staging.display()
        )));
    }
    Ok(())
}

/// Where a restore into `data_dir` is written before it is renamed into place.
pub fn restoring_dir(data_dir: &Path) -> PathBuf {
    let mut name = data_dir.as_os_str().to_os_string();
    name.push(RESTORING_SUFFIX);
    PathBuf::from(name)
}

fn remove_if_present(dir: &Path) -> Result<(), BackupError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(store_error(dir, e)),
    }
}

fn tool_error(message: String) -> BackupError {
    BackupError::Tool { message }
}

fn store_error(at: &Path, e: std::io::Error) -> BackupError {
    BackupError::Store {
        location: at.display().to_string(),
        message: e.to_string(),
    }
}
