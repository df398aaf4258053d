//! `quorum bench rollout --preload-mib N`: a database of about N MiB before the workload
//! starts, to see what its size does to a rollout (a replacement copies it to every new
//! member; an in-place restart reopens it where it is).
//!
//! The data is written under its own prefix, so the clients' lost-write check is not
//! affected, and counted again after the rollout. Values are sized so that each of
//! etcd's records fills whole bolt pages with little waste: the database file grows by
//! about the bytes written. No value repeats another's start, yet no randomness is
//! needed (etcd does not compress).

use crate::demo;
use anyhow::{bail, Context, Result};
use etcd_client::{Client, GetOptions};
use futures::StreamExt;
use quorum_etcd::ClientTls;
use serde::Serialize;
use std::time::{Duration, Instant};

pub const PRELOAD_PREFIX: &str = "bench/preload-";
const MIB: u64 = 1024 * 1024;
/// Four bolt pages (4 KiB each) less room for the key, etcd's record around the value
/// and bolt's page and element headers (about 110 bytes together): a record fills its
/// pages to within 2 %.
pub const VALUE_BYTES: usize = 16 * 1024 - 256;
/// Writes in flight at once: enough for etcd to batch its fsyncs.
const PRELOAD_CONCURRENCY: usize = 16;
/// One preload write gives up after this long (a large batch behind a slow disk).
const PRELOAD_WRITE_TIMEOUT_MS: u64 = 30_000;
/// Reading the preloaded keys' count (keys only) gives up after this long.
const COUNT_TIMEOUT_MS: u64 = 60_000;
/// How long to wait for the members' database size to include the preload (etcd
/// commits its backend every 100 ms), and how often to look.
const DB_SIZE_SETTLE_MS: u64 = 5_000;
const DB_SIZE_POLL_MS: u64 = 100;
/// The largest preload: its quota (below) must stay within etcd's 8 GiB ceiling.
pub const MAX_PRELOAD_MIB: u64 = 3_072;
/// etcd's own default quota, kept when it is large enough.
const DEFAULT_QUOTA_BYTES: u64 = 2 * 1024 * MIB;
/// etcd warns above this quota and documents it as the largest suggested.
const MAX_QUOTA_BYTES: u64 = 8 * 1024 * MIB;
/// Room above twice the preload: the workload's own writes, and the free pages a
/// database file keeps.
const QUOTA_MARGIN_BYTES: u64 = 512 * MIB;

/// The quota a control plane holding `mib` of preload is created with: twice the data
/// and a margin, at least etcd's default 2 GiB, at most its suggested 8 GiB. `None`
/// without a preload (etcd's default).
pub fn quota_bytes(mib: u64) -> Option<u64> {
    (mib > 0)
        .then(|| (2 * mib * MIB + QUOTA_MARGIN_BYTES).clamp(DEFAULT_QUOTA_BYTES, MAX_QUOTA_BYTES))
}

/// How many values make `mib` MiB (the last one may overshoot by less than a value).
pub fn keys_for(mib: u64) -> u64 {
    (mib * MIB).div_ceil(VALUE_BYTES as u64)
}

/// What the preload wrote, and what remained after the rollout.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preload {
    pub mib: u64,
    pub keys: u64,
    pub value_bytes: usize,
    /// Keys written by this run (the others were there already).
    pub written: u64,
    pub took_ms: i64,
    /// The largest database file among the members once the preload was written.
    pub db_size_bytes: u64,
    /// The preloaded keys counted after the rollout (all of them, or the run fails).
    pub keys_after: u64,
}

fn key(i: u64) -> String {
    format!("{PRELOAD_PREFIX}{i:08}")
}

/// The value of key `i`: its index, then filler up to `VALUE_BYTES`.
fn value(i: u64) -> Vec<u8> {
    let mut v = format!("{i:08}:").into_bytes();
    v.resize(VALUE_BYTES, b'.');
    v
}

/// How many preloaded keys there are (keys only, counted by etcd).
pub async fn count(endpoints: &[String], tls: Option<&ClientTls>) -> Result<u64> {
    let mut c = Client::connect(endpoints, Some(demo::client_options(tls)))
        .await
        .context("connecting to the control plane")?;
    let opts = GetOptions::new().with_prefix().with_count_only();
    let r = tokio::time::timeout(
        Duration::from_millis(COUNT_TIMEOUT_MS),
        c.get(PRELOAD_PREFIX, Some(opts)),
    )
    .await
    .context("counting the preloaded keys timed out")??;
    Ok(u64::try_from(r.count()).unwrap_or(0))
}

/// Writes the preloaded keys that are not there yet (keys are numbered: a partial
/// earlier preload is completed), then reads the database size of every member.
pub async fn preload(endpoints: &[String], tls: Option<&ClientTls>, mib: u64) -> Result<Preload> {
    if mib > MAX_PRELOAD_MIB {
        bail!("--preload-mib is at most {MAX_PRELOAD_MIB} (the quota would pass 8 GiB)");
    }
    let keys = keys_for(mib);
    let present = count(endpoints, tls).await?;
    let client = Client::connect(endpoints, Some(demo::client_options(tls)))
        .await
        .context("connecting to the control plane")?;
    let start = Instant::now();
    let mut puts = futures::stream::iter(present..keys)
        .map(|i| {
            let mut c = client.clone();
            async move {
                let put = c.put(key(i), value(i), None);
                tokio::time::timeout(Duration::from_millis(PRELOAD_WRITE_TIMEOUT_MS), put)
                    .await
                    .with_context(|| format!("preload write {i} timed out"))?
                    .with_context(|| format!("preload write {i} failed"))
            }
        })
        .buffer_unordered(PRELOAD_CONCURRENCY);
    while let Some(r) = puts.next().await {
        r?;
    }
    let took_ms = i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX);
    // etcd's status reports the database as of its backend's last commit (every
    // 100 ms): asked at once, the last writes may not be in it yet.
    let data_bytes = keys * VALUE_BYTES as u64;
    let deadline = Instant::now() + Duration::from_millis(DB_SIZE_SETTLE_MS);
    let db_size_bytes = loop {
        let size = db_size(endpoints, tls).await?;
        if size >= data_bytes || Instant::now() >= deadline {
            break size;
        }
        tokio::time::sleep(Duration::from_millis(DB_SIZE_POLL_MS)).await;
    };
    Ok(Preload {
        mib,
        keys,
        value_bytes: VALUE_BYTES,
        written: keys - present.min(keys),
        took_ms,
        db_size_bytes,
        keys_after: 0,
    })
}

/// The largest database of `endpoints`, as their statuses report it.
async fn db_size(endpoints: &[String], tls: Option<&ClientTls>) -> Result<u64> {
    let mut largest = 0;
    for e in endpoints {
        let mut c = Client::connect([e.as_str()], Some(demo::client_options(tls)))
            .await
            .with_context(|| format!("connecting to {e}"))?;
        let s = c.status().await.with_context(|| format!("status of {e}"))?;
        largest = largest.max(u64::try_from(s.db_size()).unwrap_or(0));
    }
    Ok(largest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_holds_twice_the_preload_within_etcds_bounds() {
        assert_eq!(quota_bytes(0), None);
        assert_eq!(quota_bytes(64), Some(DEFAULT_QUOTA_BYTES));
        assert_eq!(quota_bytes(1024), Some(2560 * MIB));
        assert_eq!(quota_bytes(MAX_PRELOAD_MIB), Some(6656 * MIB));
        assert_eq!(quota_bytes(10_000), Some(MAX_QUOTA_BYTES));
    }

    #[test]
    fn keys_cover_the_size_asked() {
        assert_eq!(keys_for(0), 0);
        let k = keys_for(1024);
        assert!(k * VALUE_BYTES as u64 >= 1024 * MIB);
        assert!((k - 1) * (VALUE_BYTES as u64) < 1024 * MIB);
        let v = value(42);
        assert_eq!(v.len(), VALUE_BYTES);
        assert!(v.starts_with(b"00000042:"));
        assert_eq!(key(42), "bench/preload-00000042");
    }
}
