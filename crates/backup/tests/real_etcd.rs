//! Snapshots of real etcd members (3.4.23 and 3.5.1): streamed, checked by etcd's
//! digest, named by the facts etcd's tool reads, and restorable into a member that
//! serves every key; a stream whose member stalls or dies mid-way fails in bounded time
//! and leaves no file.

use etcd_client::{Client, GetOptions};
use quorum_backup::{restore_binary, sha256_hex, status_tool, take, verify, LocalDir, TakeRequest};
use quorum_core::SnapshotReason;
use quorum_etcd::{Etcd, SnapshotStreamError, Timeouts};
use quorum_provider::default_etcd_dir;
use quorum_provider::management::ManagementEtcd;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Keys written before each snapshot, and their size: enough for many 32 KiB chunks.
const KEYS: usize = 200;
const VALUE_BYTES: usize = 4 * 1024;
/// How long a member may take to serve.
const SERVE_TIMEOUT_MS: u64 = 30_000;

/// An address of this test's own: `127.A.B.d` with `A`, `B` from the process and `k`,
/// one per test (other test binaries use other last octets).
fn addr(k: u8, d: u8) -> Ipv4Addr {
    let a = 30 + (std::process::id() % 200) as u8;
    let b = (std::process::id() / 200 % 50) as u8 * 4 + k;
    Ipv4Addr::new(127, a, b, d)
}

fn one_member(dir: &Path, k: u8, version: &str) -> ManagementEtcd {
    ManagementEtcd::start(
        dir,
        &default_etcd_dir(),
        version.parse().unwrap(),
        &[addr(k, 230)],
    )
    .unwrap()
}

async fn client(url: &str) -> Client {
    let deadline = Instant::now() + Duration::from_millis(SERVE_TIMEOUT_MS);
    loop {
        if let Ok(mut c) = Client::connect([url], None).await {
            if c.get("probe", None).await.is_ok() {
                return c;
            }
        }
        assert!(Instant::now() < deadline, "{url} never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes `KEYS` keys under `k/` and returns the revision of the last write.
async fn fill(url: &str) -> i64 {
    fill_with(url, VALUE_BYTES).await
}

async fn fill_with(url: &str, value_bytes: usize) -> i64 {
    let mut c = client(url).await;
    let mut rev = 0;
    for i in 0..KEYS {
        let value = vec![b'a' + (i % 26) as u8; value_bytes];
        let r = c.put(format!("k/{i:04}"), value, None).await.unwrap();
        rev = r.header().unwrap().revision();
    }
    rev
}

/// A throwaway etcd on a restored data directory, killed (by PID) when dropped.
struct Restored(Child);

impl Drop for Restored {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Restores `file` with etcd's tool into `dir` as a single member on `at`, starts it,
/// and returns the keys under `k/` it serves with the revision it reports.
async fn restore_and_count(file: &Path, dir: &Path, at: Ipv4Addr) -> (i64, i64) {
    let etcd_dir = default_etcd_dir();
    let tool = status_tool(&etcd_dir).unwrap();
    let data = dir.join("restored");
    let peer = format!("http://{at}:2380");
    let out = Command::new(&tool)
        .args(["snapshot", "restore"])
        .arg(file)
        .arg(format!("--data-dir={}", data.display()))
        .args(["--name=r", &format!("--initial-cluster=r={peer}")])
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .env("ETCDCTL_API", "3")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = format!("http://{at}:2379");
    let etcd = etcd_dir.join("3.5.1").join("etcd");
    let child = Command::new(etcd)
        .arg(format!("--data-dir={}", data.display()))
        .args(["--name=r", &format!("--listen-peer-urls={peer}")])
        .arg(format!("--listen-client-urls={url}"))
        .arg(format!("--advertise-client-urls={url}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _running = Restored(child);
    let mut c = client(&url).await;
    let r = c
        .get(
            "k/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap();
    (r.count(), r.header().unwrap().revision())
}

/// An on-demand snapshot of control plane `b` from member 0 of `m`, at a fixed time.
fn request<'a>(m: &'a ManagementEtcd, url: &'a str, version: &str) -> TakeRequest<'a> {
    TakeRequest {
        control_plane: "b",
        reason: SnapshotReason::OnDemand,
        from_machine: m.name(0),
        endpoint: url,
        etcd_version: version.parse().unwrap(),
        spec_version: version.parse().unwrap(),
        rollout_to: None,
        now_unix_s: 1_800_000_000,
    }
}

async fn snapshot_of(version: &str, k: u8) {
    let dir = tempfile::tempdir().unwrap();
    let m = one_member(&dir.path().join("etcd"), k, version);
    let url = m.client_url(0);
    let revision = fill(&url).await;
    let etcd = Etcd::new(Timeouts::default());
    let store = LocalDir::for_control_plane(&dir.path().join("home"), "b");
    let req = request(&m, &url, version);
    let tool = status_tool(&default_etcd_dir()).unwrap();
    let rec = take(&etcd, &store, &tool, &req).await.unwrap();
    // Named by what etcd's tool read: every write is in it.
    assert_eq!(rec.facts.revision, revision, "{version}: {rec:?}");
    assert_eq!(rec.id, format!("b-20270115T080000Z-r{revision}.db"));
    assert!(rec.facts.total_keys >= KEYS as u64, "{rec:?}");
    let file = store.path(&rec.id);
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes.len() as u64, rec.size_bytes);
    assert_eq!(rec.size_bytes, rec.facts.total_size_bytes + 32);
    assert_eq!(sha256_hex(&bytes), rec.sha256);
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(store.list(), vec![rec.id.clone()], "no partial file left");
    // The file is a snapshot etcd restores: every key, at the revision recorded.
    let (count, restored_rev) = restore_and_count(&file, dir.path(), addr(k, 231)).await;
    assert_eq!(count, KEYS as i64, "{version}");
    assert_eq!(restored_rev, revision, "{version}");
    m.destroy();

    // quorum's own test restore says the same, and leaves nothing behind.
    let etcd_bin = restore_binary(&default_etcd_dir(), rec.etcd_version).unwrap();
    let scratch = dir.path().join("scratch");
    let v = verify(&rec, &file, &tool, &etcd_bin, &scratch, 1_800_000_060).await;
    assert!(v.ok, "{version}: {v:?}");
    assert_eq!((v.revision, v.at_unix_s), (revision, 1_800_000_060));
    assert!(v.keys >= KEYS as u64, "{v:?}");
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "scratch removed"
    );
    // A stored file that changed since it was taken never counts as verified.
    let mut damaged = bytes.clone();
    damaged[bytes.len() / 2] ^= 0xff;
    std::fs::write(&file, &damaged).unwrap();
    let v = verify(&rec, &file, &tool, &etcd_bin, &scratch, 1_800_000_070).await;
    assert!(
        !v.ok && v.error.as_deref().unwrap_or("").contains("changed since"),
        "{v:?}"
    );
    // Nor does one whose facts are not the file's (a restore at another revision).
    std::fs::write(&file, &bytes).unwrap();
    let mut wrong = rec.clone();
    wrong.facts.revision += 1;
    let v = verify(&wrong, &file, &tool, &etcd_bin, &scratch, 1_800_000_080).await;
    assert!(
        !v.ok && v.error.as_deref().unwrap_or("").contains("revision"),
        "{v:?}"
    );
    // A release that cannot start (one being rolled out, say) fails the test restore
    // as soon as it exits, with the reason, not after the serve deadline.
    let broken = dir.path().join("broken-etcd");
    std::fs::write(&broken, "#!/bin/sh\necho 'bad release' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let v = verify(&rec, &file, &tool, &broken, &scratch, 1_800_000_090).await;
    let error = v.error.clone().unwrap_or_default();
    assert!(
        !v.ok && error.contains("exited") && error.contains("bad release"),
        "{v:?}"
    );
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "scratch removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_3_4_23_restores_every_key() {
    snapshot_of("3.4.23", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_3_5_1_restores_every_key() {
    snapshot_of("3.5.1", 1).await;
}

/// SIGCONTs the member when dropped, so a failing assertion leaves no stopped process.
struct Resume<'a>(&'a ManagementEtcd);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.resume(0);
    }
}

/// The fault on etcd's side: its member stops sending mid-stream (paused, as a stalled
/// disk or a frozen host would) or dies. The stream fails within its bound, and
/// nothing in the snapshot store looks like a snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stalls_or_dies_mid_stream_fails_it_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let m = one_member(&dir.path().join("etcd"), 2, "3.5.1");
    let url = m.client_url(0);
    // 20 MiB: more than the transport's buffers hold, so a paused member leaves the
    // stream waiting.
    fill_with(&url, 100 * 1024).await;
    let etcd = Etcd::new(Timeouts::default());
    let idle_ms = 1_000;

    let _resume = Resume(&m);
    let mut chunks = 0;
    let mut pause_after_first = |_: &[u8]| {
        chunks += 1;
        if chunks == 1 {
            m.pause(0);
        }
        Ok(())
    };
    let t = Instant::now();
    let e = etcd
        .snapshot_bounded(&url, &mut pause_after_first, idle_ms, 60_000)
        .await
        .unwrap_err();
    let took = t.elapsed();
    assert!(matches!(e, SnapshotStreamError::Etcd(_)), "{e}");
    assert!(
        took < Duration::from_millis(idle_ms + 5_000),
        "{took:?}: {e}"
    );
    m.resume(0);

    // Dead mid-stream: the stream ends in an error, however the connection broke.
    let mut kill_after_first = |_: &[u8]| {
        m.kill(0).unwrap();
        Ok(())
    };
    let e = etcd
        .snapshot_bounded(&url, &mut kill_after_first, idle_ms, 60_000)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            SnapshotStreamError::Etcd(_) | SnapshotStreamError::Truncated { .. }
        ),
        "{e}"
    );

    // Through `take`: the member gone, nothing by a snapshot's name is left.
    let store = LocalDir::for_control_plane(&dir.path().join("home"), "b");
    let req = request(&m, &url, "3.5.1");
    let tool = status_tool(&default_etcd_dir()).unwrap();
    assert!(take(&etcd, &store, &tool, &req).await.is_err());
    assert_eq!(store.list(), Vec::<String>::new());
    assert_eq!(std::fs::read_dir(store.path("")).unwrap().count(), 0);
    m.destroy();
}
