//! quorum-backup: snapshots of a control plane, taken from its leader.
//!
//! A snapshot streams from the leader (etcd's snapshot API) straight into a file in
//! the snapshot store, never whole in memory; etcd's own digest at the stream's end
//! is checked as it arrives, the file's facts (hash, revision, keys, size) are read
//! back with etcd's own tool, and only then does the file get its final name. The
//! record returned is what the caller stores.
//!
//! Architecture invariant: this crate knows nothing of quorum's store. It takes a
//! leader to stream from and gives back a `SnapshotRecord`; what is recorded, and
//! when a snapshot is needed, is decided elsewhere (`quorum_core::backup`).

pub mod access;
mod digest;
mod facts;
mod local;
mod remote;
mod restore;
mod verify;

pub use digest::{sha256_file, sha256_hex, DigestMismatch, StreamDigests};
pub use facts::{parse_facts, read_facts, restore_tool, status_tool, STATUS_TIMEOUT_MS};
pub use local::{LocalDir, Partial, PARTIAL_SUFFIX, STALE_PARTIAL_AGE};
pub use remote::{
    access_of, drop_local_copy, is_remote, keep, local_copy, parse_s3_url, remove_kept, store_for,
    store_of, LocalCopy, S3Dir, SnapshotStore, S3_SCHEME,
};
pub use restore::{
    restore_seed, restoring_dir, supports_revision_bump, SeedRequest, Seeded, RESTORING_SUFFIX,
    REVISION_BUMP,
};
pub use verify::{restore_binary, verify, verify_kit, RESTORE_TIMEOUT_MS, SERVE_TIMEOUT_MS};

use quorum_core::backup::{check_record, compact_utc, snapshot_id, MAX_SNAPSHOTS_PER_SECOND};
use quorum_core::{SnapshotReason, SnapshotRecord, Version};
use quorum_etcd::{Etcd, SnapshotStreamError};
use std::path::Path;
use std::time::Instant;

/// Where test restores happen: `<home>/backups/.scratch/` (a name no control plane can
/// have: names start with a letter).
pub fn scratch_dir(home: &Path) -> std::path::PathBuf {
    home.join("backups").join(".scratch")
}

/// What went wrong taking a snapshot. Whatever it is, no file by a snapshot's name is
/// left behind.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("streaming the snapshot: {0}")]
    Stream(#[from] SnapshotStreamError),
    #[error(transparent)]
    Digest(#[from] DigestMismatch),
    #[error("snapshot store {location}: {message}")]
    Store { location: String, message: String },
    #[error("reading the snapshot's facts: {message}")]
    Tool { message: String },
    #[error("the snapshot's facts do not add up: {0}")]
    Facts(String),
}

/// The member a snapshot is taken from (the leader), and why it is taken.
#[derive(Clone, Debug)]
pub struct TakeRequest<'a> {
    pub control_plane: &'a str,
    pub reason: SnapshotReason,
    pub from_machine: &'a str,
    /// That member's client URL.
    pub endpoint: &'a str,
    /// The etcd version it runs.
    pub etcd_version: Version,
    pub spec_version: Version,
    pub rollout_to: Option<Version>,
    /// The time it is taken (its id and record say it; the caller reads the clock).
    pub now_unix_s: i64,
}

/// Takes a snapshot: streams it into `store`, checks etcd's digest, reads its facts
/// with `tool` (`status_tool`), names it by them, and returns its record.
pub async fn take(
    etcd: &Etcd,
    store: &LocalDir,
    tool: &Path,
    req: &TakeRequest<'_>,
) -> Result<SnapshotRecord, BackupError> {
    let started = Instant::now();
    let tag = format!(
        "{}-{}-{}",
        req.control_plane,
        compact_utc(req.now_unix_s),
        std::process::id()
    );
    let mut partial = store.begin(&tag)?;
    let mut digests = StreamDigests::default();
    let mut sink = |chunk: &[u8]| {
        digests.update(chunk);
        partial.write(chunk)
    };
    etcd.snapshot(req.endpoint, &mut sink).await?;
    let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let digested = digests.finish()?;
    partial.sync()?;
    let facts = read_facts(tool, partial.path()).await?;
    // etcd's database, then its 32-byte digest: the file and the facts agree on size.
    let want_bytes = facts.total_size_bytes + quorum_core::backup::SNAPSHOT_DIGEST_BYTES as u64;
    if digested.bytes != want_bytes {
        return Err(BackupError::Facts(format!(
            "{} bytes streamed, but the database is {} bytes (and 32 of digest)",
            digested.bytes, facts.total_size_bytes
        )));
    }
    let ids = (0..MAX_SNAPSHOTS_PER_SECOND)
        .map(|n| snapshot_id(req.control_plane, req.now_unix_s, facts.revision, n));
    let id = partial.commit(ids)?;
    let record = SnapshotRecord {
        recreate: None,
        id,
        control_plane: req.control_plane.to_string(),
        taken_at_unix_s: req.now_unix_s,
        reason: req.reason,
        from_machine: req.from_machine.to_string(),
        etcd_version: req.etcd_version,
        spec_version: req.spec_version,
        rollout_to: req.rollout_to,
        location: store.location(),
        sha256: digested.file_sha256,
        size_bytes: digested.bytes,
        facts,
        took_ms,
        verification: None,
    };
    // What is returned is what a later check reads back.
    check_record(&record).map_err(BackupError::Facts)?;
    Ok(record)
}
