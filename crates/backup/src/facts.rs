//! A snapshot's facts as etcd's own tool reads them: `etcdutl snapshot status -w json`
//! (3.5), or `etcdctl snapshot status` where only 3.4 is installed.

use crate::BackupError;
use quorum_core::SnapshotFacts;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long etcd's tool may take to read a snapshot's facts (it reads the whole
/// database: seconds for a gigabyte).
pub const STATUS_TIMEOUT_MS: u64 = 120_000;
/// The most of the tool's output read (its JSON is one short line).
const MAX_STATUS_OUTPUT_BYTES: usize = 64 * 1024;

/// The tool that reads snapshot files: the newest installed `etcdutl`, else the newest
/// `etcdctl` (3.4's reads them itself).
pub fn status_tool(etcd_dir: &Path) -> Result<PathBuf, BackupError> {
    let versions = quorum_provider::installed_versions(etcd_dir);
    let dir = |v: &quorum_core::Version| etcd_dir.join(v.to_string());
    let found = versions
        .iter()
        .rev()
        .map(|v| dir(v).join("etcdutl"))
        .chain(versions.iter().rev().map(|v| dir(v).join("etcdctl")))
        .find(|p| p.is_file());
    found.ok_or_else(|| BackupError::Tool {
        message: format!(
            "neither etcdutl nor etcdctl is installed in {} (scripts/install.sh installs them)",
            etcd_dir.display()
        ),
    })
}

/// The tool that restores a snapshot into a member that will run `runs`: that
/// release's own `etcdutl` (3.5 and later) or `etcdctl` (3.4 restores with it), else
/// the newest installed one of its minor line. Not the newest of all, as `status_tool`
/// is: a restore writes the data directory the member then opens, so it is written
/// by the code of the line that opens it (a 3.4 member is never handed what 3.5's
/// etcdutl wrote).
pub fn restore_tool(etcd_dir: &Path, runs: quorum_core::Version) -> Result<PathBuf, BackupError> {
    let versions = quorum_provider::installed_versions(etcd_dir);
    let line: Vec<_> = versions
        .iter()
        .rev()
        .filter(|v| v.minor_line() == runs.minor_line())
        .collect();
    let own = versions.iter().filter(|v| **v == runs);
    let found = own
        .chain(line)
        .flat_map(|v| ["etcdutl", "etcdctl"].map(|t| etcd_dir.join(v.to_string()).join(t)))
        .find(|p| p.is_file());
    found.ok_or_else(|| BackupError::Tool {
        message: format!(
            "no etcdutl or etcdctl of etcd {}.{} is installed in {} to restore a member that runs {runs} (`quorum versions add` adds one)",
            runs.major,
            runs.minor,
            etcd_dir.display()
        ),
    })
}

/// Reads the facts of the snapshot at `file` with `tool`, within `STATUS_TIMEOUT_MS`.
pub async fn read_facts(tool: &Path, file: &Path) -> Result<SnapshotFacts, BackupError> {
    let mut cmd = tokio::process::Command::new(tool);
    cmd.args(["snapshot", "status", "-w", "json"])
        .arg(file)
        .env("ETCDCTL_API", "3")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let run = tokio::time::timeout(Duration::from_millis(STATUS_TIMEOUT_MS), cmd.output());
    let out = match run.await {
        Err(_) => {
            return Err(BackupError::Tool {
                message: format!(
                    "{} snapshot status {}: no answer within {STATUS_TIMEOUT_MS} ms",
                    tool.display(),
                    file.display()
                ),
            })
        }
        Ok(Err(e)) => {
            return Err(BackupError::Tool {
                message: format!("running {}: {e}", tool.display()),
            })
        }
        Ok(Ok(out)) => out,
    };
    let stdout =
        String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(MAX_STATUS_OUTPUT_BYTES)]);
    if !out.status.success() {
        let stderr =
            String::from_utf8_lossy(&out.stderr[..out.stderr.len().min(MAX_STATUS_OUTPUT_BYTES)]);
        return Err(BackupError::Tool {
            message: format!(
                "{} snapshot status {}: {} ({})",
                tool.display(),
                file.display(),
                stderr.trim().lines().last().unwrap_or("no message"),
                out.status
            ),
        });
    }
    parse_facts(&stdout).map_err(|message| BackupError::Tool {
        message: format!("{} snapshot status: {message}", tool.display()),
    })
}

/// The JSON etcd's tools print: `{"hash":…,"revision":…,"totalKey":…,"totalSize":…}`.
pub fn parse_facts(text: &str) -> Result<SnapshotFacts, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        hash: u32,
        revision: i64,
        total_key: u64,
        total_size: u64,
    }
    let s: Status = serde_json::from_str(text.trim())
        .map_err(|e| format!("unexpected output '{}': {e}", text.trim()))?;
    // Revision 0: nothing was ever written (etcd's own records are no revision).
    if s.revision < 0 || s.total_size == 0 {
        return Err(format!(
            "no database in it (revision {}, {} bytes)",
            s.revision, s.total_size
        ));
    }
    Ok(SnapshotFacts {
        hash: s.hash,
        revision: s.revision,
        total_keys: s.total_key,
        total_size_bytes: s.total_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcds_status_json_is_read_and_nonsense_is_refused() {
        let f = parse_facts(r#"{"hash":3802529698,"revision":2,"totalKey":7,"totalSize":20480}"#)
            .unwrap();
        assert_eq!(
            f,
            SnapshotFacts {
                hash: 3_802_529_698,
                revision: 2,
                total_keys: 7,
                total_size_bytes: 20_480
            }
        );
        let empty = parse_facts(r#"{"hash":1,"revision":0,"totalKey":3,"totalSize":20480}"#);
        assert_eq!(
            empty.map(|f| f.revision),
            Ok(0),
            "a keyspace never written to"
        );
        for bad in [
            "",
            "Error: snapshot file integrity check failed",
            r#"{"hash":1,"revision":0,"totalKey":0,"totalSize":0}"#,
            r#"{"hash":1,"revision":-1,"totalKey":3,"totalSize":20480}"#,
            r#"{"hash":-1,"revision":2,"totalKey":7,"totalSize":1}"#,
        ] {
            assert!(parse_facts(bad).is_err(), "{bad}");
        }
    }
}
