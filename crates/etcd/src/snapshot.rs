//! Streaming a member's snapshot (etcd's Maintenance.Snapshot): chunk by chunk into a
//! sink, never whole in memory, with a bound on the wait for each chunk and on the
//! whole stream.

use crate::{bounded, Etcd, EtcdError};
use std::time::Instant;

/// How long a snapshot stream may go without a chunk before it is given up: a member
/// that stops sending (paused, its disk stalled) fails the snapshot in bounded time.
pub const SNAPSHOT_IDLE_TIMEOUT_MS: u64 = 15_000;
/// The longest a whole snapshot may take (a 1 GiB database streams in seconds on
/// loopback; a slow link or disk gets this long).
pub const SNAPSHOT_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// What went wrong streaming a snapshot: etcd's side, or the sink's.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotStreamError {
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error("writing the snapshot: {0}")]
    Write(#[source] std::io::Error),
    #[error("snapshot from {endpoint}: the stream ended after {bytes} bytes, before etcd's last chunk (the member stopped or the connection broke)")]
    Truncated { endpoint: String, bytes: u64 },
}

impl Etcd {
    /// Streams the snapshot of the member at `endpoint` into `sink`, chunk by chunk (on
    /// its own connection, whose every request may take `SNAPSHOT_TIMEOUT_MS`). Returns
    /// the bytes streamed: the database followed by etcd's 32-byte sha256 of it (the
    /// sink gets both; checking the digest is the caller's). Each chunk must come
    /// within `SNAPSHOT_IDLE_TIMEOUT_MS`, and the whole within `SNAPSHOT_TIMEOUT_MS`.
    pub async fn snapshot(
        &self,
        endpoint: &str,
        sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
    ) -> Result<u64, SnapshotStreamError> {
        self.snapshot_bounded(
            endpoint,
            sink,
            SNAPSHOT_IDLE_TIMEOUT_MS,
            SNAPSHOT_TIMEOUT_MS,
        )
        .await
    }

    /// `snapshot` with its bounds given (tests use short ones).
    pub async fn snapshot_bounded(
        &self,
        endpoint: &str,
        sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
        idle_timeout_ms: u64,
        total_timeout_ms: u64,
    ) -> Result<u64, SnapshotStreamError> {
        let started = Instant::now();
        let mut c = self.connect_one(endpoint, total_timeout_ms).await?;
        let mut stream = bounded("snapshot", endpoint, idle_timeout_ms, async {
            c.snapshot().await
        })
        .await?;
        let mut bytes = 0u64;
        // etcd sends the database's last chunk with nothing remaining, then its digest
        // (also with nothing remaining), then ends the stream.
        let mut saw_last = false;
        loop {
            let left_ms = total_timeout_ms.saturating_sub(elapsed_ms(started));
            let wait_ms = idle_timeout_ms.min(left_ms).max(1);
            let chunk = bounded("snapshot", endpoint, wait_ms, stream.message()).await?;
            let Some(chunk) = chunk else {
                // An end before the last chunk is a cut stream, whatever gRPC says.
                if !saw_last {
                    return Err(SnapshotStreamError::Truncated {
                        endpoint: endpoint.to_string(),
                        bytes,
                    });
                }
                return Ok(bytes);
            };
            sink(chunk.blob()).map_err(SnapshotStreamError::Write)?;
            bytes += chunk.blob().len() as u64;
            saw_last |= chunk.remaining_bytes() == 0;
        }
    }
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}
