//! `quorum bench snapshot`: what a snapshot, its test restore and a restore cost as the
//! keyspace grows. For each size, a throwaway single etcd member (plain HTTP, on a free
//! `127.253.x.y`) is filled with that many keys, then quorum's own code takes the
//! snapshot from it (`quorum_backup::take`: streamed, digest checked, facts read),
//! test-restores it (`verify`: restored, started, read back) and restores it as a
//! rebuild's seed would be (`restore_seed`: sha256, fresh cluster token, renamed into
//! place). Every process is stopped by PID and every directory removed.

use anyhow::{bail, Context, Result};
use etcd_client::{Client, PutOptions, Txn, TxnOp};
use futures::StreamExt;
use quorum_backup::{LocalDir, SeedRequest, TakeRequest};
use quorum_core::{SnapshotReason, Version};
use quorum_etcd::{Etcd, Timeouts};
use quorum_provider::management::ManagementEtcd;
use quorum_provider::{default_etcd_dir, installed_versions};
use serde::Serialize;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::time::{Duration, Instant};

/// Puts per transaction while filling (etcd allows 128 operations in one).
const PUTS_PER_TXN: usize = 100;
/// Transactions in flight at once: enough for etcd to batch its fsyncs.
const FILL_CONCURRENCY: usize = 16;
/// One fill transaction gives up after this long.
const FILL_TXN_TIMEOUT_MS: u64 = 30_000;
/// The most keys one size may ask for, and the largest value.
const MAX_KEYS: u64 = 5_000_000;
const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The member's quota: etcd's suggested largest, so a million 1 KiB keys fit.
const QUOTA_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// Tries at a free loopback address.
const ADDRESS_ATTEMPTS: u32 = 16;

#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// Key counts to measure, comma-separated.
    #[arg(long, default_value = "10000,100000", value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=MAX_KEYS))]
    keys: Vec<u64>,
    /// The size of each value.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=MAX_VALUE_BYTES as i64))]
    value_bytes: u32,
    /// The etcd version of the member (installed; see `quorum versions`).
    #[arg(long, default_value = "3.5.30")]
    version: String,
    /// Output format.
    #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
    output: String,
}

/// One size's figures.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub keys: u64,
    pub value_bytes: u32,
    pub fill_ms: u64,
    pub snapshot_bytes: u64,
    pub snapshot_ms: u64,
    pub verify_ms: u64,
    pub verified_keys: u64,
    pub restore_ms: u64,
    pub revision_bumped: bool,
}

pub async fn run(args: SnapshotArgs) -> Result<()> {
    let etcd_dir = default_etcd_dir();
    let version: Version = args.version.parse()?;
    if !installed_versions(&etcd_dir).contains(&version) {
        bail!(
            "etcd {version} is not installed in {} (see `quorum versions`)",
            etcd_dir.display()
        );
    }
    let mut rows = Vec::new();
    for keys in &args.keys {
        let row = measure(&etcd_dir, version, *keys, args.value_bytes).await?;
        if args.output == "table" {
            println!("{}", line(&row));
        }
        rows.push(row);
    }
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}

fn line(r: &Row) -> String {
    format!(
        "{} keys of {} B: filled in {:.1}s; snapshot {:.1} MiB in {:.2}s; test restore (restored, started, {} keys read back) {:.2}s; seed restore {:.2}s{}",
        r.keys,
        r.value_bytes,
        r.fill_ms as f64 / 1000.0,
        r.snapshot_bytes as f64 / (1024.0 * 1024.0),
        r.snapshot_ms as f64 / 1000.0,
        r.verified_keys,
        r.verify_ms as f64 / 1000.0,
        r.restore_ms as f64 / 1000.0,
        if r.revision_bumped { " (revision bumped)" } else { "" }
    )
}

async fn measure(
    etcd_dir: &std::path::Path,
    version: Version,
    keys: u64,
    value_bytes: u32,
) -> Result<Row> {
    let dir = tempfile::Builder::new()
        .prefix("quorum-bench-snapshot-")
        .tempdir()
        .context("a scratch directory")?;
    let addr = free_address()?;
    let flags = [format!("--quota-backend-bytes={QUOTA_BYTES}")];
    let member = ManagementEtcd::start_with_flags(
        &dir.path().join("etcd"),
        etcd_dir,
        version,
        &[addr],
        &flags,
    )?;
    let result = measure_on(&member, dir.path(), etcd_dir, version, keys, value_bytes).await;
    member.destroy();
    result
}

async fn measure_on(
    member: &ManagementEtcd,
    dir: &std::path::Path,
    etcd_dir: &std::path::Path,
    version: Version,
    keys: u64,
    value_bytes: u32,
) -> Result<Row> {
    let url = member.client_url(0);
    let t = Instant::now();
    fill(&url, keys, value_bytes as usize).await?;
    let fill_ms = ms(t);
    let etcd = Etcd::new(Timeouts::default());
    let store = LocalDir::for_control_plane(&dir.join("home"), "bench");
    let tool = quorum_backup::status_tool(etcd_dir)?;
    let req = TakeRequest {
        control_plane: "bench",
        reason: SnapshotReason::OnDemand,
        from_machine: member.name(0),
        endpoint: &url,
        etcd_version: version,
        spec_version: version,
        rollout_to: None,
        now_unix_s: quorum_clock::now_unix_s(),
    };
    let rec = quorum_backup::take(&etcd, &store, &tool, &req).await?;
    let file = store.path(&rec.id);
    let bin = quorum_backup::restore_binary(etcd_dir, rec.etcd_version)?;
    let v = quorum_backup::verify(&rec, &file, &tool, &bin, &dir.join("scratch"), 0).await;
    if let Some(e) = &v.error {
        bail!("the test restore of {} keys failed: {e}", keys);
    }
    let data_dir = dir.join("seed").join("data");
    let seed = SeedRequest {
        rec: &rec,
        file: &file,
        tool: &tool,
        data_dir: &data_dir,
        name: "seed",
        peer_url: "http://127.0.0.1:2380",
        cluster_token: "bench-seed",
    };
    let seeded = quorum_backup::restore_seed(&seed).await?;
    Ok(Row {
        keys,
        value_bytes,
        fill_ms,
        snapshot_bytes: rec.size_bytes,
        snapshot_ms: rec.took_ms,
        verify_ms: v.took_ms,
        verified_keys: v.keys,
        restore_ms: seeded.took_ms,
        revision_bumped: seeded.bumped,
    })
}

/// Writes `keys` keys of `value_bytes` each, `PUTS_PER_TXN` to a transaction,
/// `FILL_CONCURRENCY` transactions at once.
async fn fill(url: &str, keys: u64, value_bytes: usize) -> Result<()> {
    let client = Client::connect([url], None).await?;
    let value = vec![b'v'; value_bytes];
    let batches: Vec<(u64, u64)> = (0..keys)
        .step_by(PUTS_PER_TXN)
        .map(|from| (from, (from + PUTS_PER_TXN as u64).min(keys)))
        .collect();
    let mut results = futures::stream::iter(batches)
        .map(|(from, to)| {
            let mut c = client.clone();
            let ops: Vec<TxnOp> = (from..to)
                .map(|i| TxnOp::put(format!("bench/{i:08}"), value.clone(), None::<PutOptions>))
                .collect();
            async move {
                tokio::time::timeout(
                    Duration::from_millis(FILL_TXN_TIMEOUT_MS),
                    c.txn(Txn::new().and_then(ops)),
                )
                .await
            }
        })
        .buffer_unordered(FILL_CONCURRENCY);
    while let Some(r) = results.next().await {
        r.map_err(|_| anyhow::anyhow!("a fill transaction took over {FILL_TXN_TIMEOUT_MS} ms"))??;
    }
    Ok(())
}

fn ms(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A random `127.253.x.y` whose client and peer ports are free.
fn free_address() -> Result<Ipv4Addr> {
    for _ in 0..ADDRESS_ATTEMPTS {
        let a = Ipv4Addr::new(127, 253, rand::random::<u8>(), rand::random_range(1..255));
        let free = [quorum_core::CLIENT_PORT, quorum_core::PEER_PORT]
            .iter()
            .all(|p| TcpListener::bind(SocketAddrV4::new(a, *p)).is_ok());
        if free {
            return Ok(a);
        }
    }
    bail!("no free loopback address in 127.253.0.0/16 after {ADDRESS_ATTEMPTS} tries")
}
