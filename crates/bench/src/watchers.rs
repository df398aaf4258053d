//! The watch pattern of control-plane clients (kube-apiserver's watch cache,
//! client-go's reflectors), measured: a watcher follows a key prefix from a revision
//! and, on any error, resumes from the last revision it saw on the next address it
//! knows; told "compacted", it lists the prefix again and carries on from there. A
//! writer puts one key at a time under the prefix and keeps each acknowledged write's
//! revision, so `judge` can say, for each watcher, which events it missed, saw twice or
//! saw out of order.

use crate::sticky::timed;
use etcd_client::{Client, ConnectOptions, EventType, GetOptions, WatchOptions};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a watch may go without any message before it counts as broken. etcd sends
/// progress notifications only when asked, so the writer's pace bounds the silence.
const SILENT_MS: u64 = 3_000;
/// Pause between two attempts to resume after every address failed.
const RETRY_MS: u64 = 200;
/// Time between two writes.
const WRITE_EVERY_MS: u64 = 20;
/// The most revisions a watcher keeps (a bound on memory; a run writes far fewer).
const MAX_SEEN: usize = 1_000_000;

/// What one watcher saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchReport {
    /// Put events received.
    pub events: u64,
    /// Events whose revision it had seen already.
    pub duplicated: u64,
    /// Events whose revision was below the last one it had seen (and new).
    pub out_of_order: u64,
    /// Times its stream broke (an error, its end, or silence past `SILENT_MS`).
    pub broken: u32,
    /// The longest time from a break to a stream resumed (ms).
    pub longest_resume_ms: u64,
    /// Times it was told "compacted" and listed the prefix again.
    pub compacted: u32,
    /// The last error, for the report.
    pub last_error: Option<String>,
}

/// What `judge` found, for one watcher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Acknowledged writes it never saw (nor listed after a compaction).
    pub missed: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
}

struct Shared {
    report: WatchReport,
    /// Revisions of the events seen, and of the keys listed after a compaction.
    seen: BTreeSet<i64>,
}

/// A running watcher of a prefix.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Follows `prefix` from revision `from` through `endpoints` (one at a time, the
    /// next on any error), on the current tokio runtime.
    pub fn start(
        endpoints: Vec<String>,
        opts: ConnectOptions,
        prefix: String,
        from: i64,
    ) -> Watcher {
        assert!(!endpoints.is_empty(), "a watcher needs an address");
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Mutex::new(Shared {
            report: WatchReport::default(),
            seen: BTreeSet::new(),
        }));
        let w = Follow {
            endpoints,
            opts,
            prefix,
            next_rev: from,
            shared: shared.clone(),
        };
        let s = stop.clone();
        let task = tokio::spawn(async move { w.run(&s).await });
        Watcher { stop, shared, task }
    }

    /// Waits until it has seen `revision` (or `timeout` passes); whether it did.
    pub async fn wait_seen(&self, revision: i64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let last = self.lock().seen.last().copied().unwrap_or(0);
            if last >= revision {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops it; what it saw, and the verdict against the writer's acknowledged
    /// revisions.
    pub async fn stop(self, acked: &[i64]) -> (WatchReport, Verdict) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        let s = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let missed = acked.iter().filter(|r| !s.seen.contains(r)).count() as u64;
        let v = Verdict {
            missed,
            duplicated: s.report.duplicated,
            out_of_order: s.report.out_of_order,
        };
        (s.report.clone(), v)
    }
}

struct Follow {
    endpoints: Vec<String>,
    opts: ConnectOptions,
    prefix: String,
    /// The revision to resume from: one past the last seen.
    next_rev: i64,
    shared: Arc<Mutex<Shared>>,
}

/// Why a stream ended.
enum End {
    Stopped,
    Broken(String),
    Compacted,
}

impl Follow {
    fn note(&self, f: impl FnOnce(&mut Shared)) {
        f(&mut self.shared.lock().unwrap_or_else(|p| p.into_inner()));
    }

    async fn run(mut self, stop: &AtomicBool) {
        let mut at = 0usize;
        let mut broken_since: Option<Instant> = None;
        while !stop.load(Ordering::SeqCst) {
            let url = self.endpoints[at % self.endpoints.len()].clone();
            let end = match timed(Client::connect([url], Some(self.opts.clone()))).await {
                Ok(c) => self.follow(c, stop, &mut broken_since).await,
                Err(e) => End::Broken(e),
            };
            match end {
                End::Stopped => return,
                End::Compacted => {
                    self.note(|s| s.report.compacted += 1);
                    if let Err(e) = self.relist(at).await {
                        self.broke(&mut broken_since, e);
                        at += 1;
                    }
                }
                End::Broken(e) => {
                    self.broke(&mut broken_since, e);
                    at += 1;
                    if at.is_multiple_of(self.endpoints.len()) {
                        tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
                    }
                }
            }
        }
    }

    fn broke(&self, since: &mut Option<Instant>, e: String) {
        if since.is_none() {
            *since = Some(Instant::now());
            self.note(|s| s.report.broken += 1);
        }
        self.note(|s| s.report.last_error = Some(e));
    }

    /// After "compacted": the prefix as it is now counts as seen, and the watch resumes
    /// after the revision it was read at.
    async fn relist(&mut self, at: usize) -> Result<(), String> {
        let url = self.endpoints[at % self.endpoints.len()].clone();
        let mut c = timed(Client::connect([url], Some(self.opts.clone()))).await?;
        let opts = GetOptions::new().with_prefix();
        let r = timed(c.get(self.prefix.as_str(), Some(opts))).await?;
        let rev = r.header().map_or(0, |h| h.revision());
        let listed: Vec<i64> = r.kvs().iter().map(|kv| kv.mod_revision()).collect();
        self.note(|s| {
            for x in listed {
                if s.seen.len() < MAX_SEEN {
                    s.seen.insert(x);
                }
            }
        });
        self.next_rev = rev + 1;
        Ok(())
    }

    /// Follows one stream until it ends; records every event.
    async fn follow(
        &mut self,
        mut c: Client,
        stop: &AtomicBool,
        since: &mut Option<Instant>,
    ) -> End {
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(self.next_rev);
        let mut stream = match timed(c.watch(self.prefix.as_str(), Some(opts))).await {
            Ok(w) => w,
            Err(e) => return End::Broken(e),
        };
        loop {
            if stop.load(Ordering::SeqCst) {
                return End::Stopped;
            }
            let msg =
                tokio::time::timeout(Duration::from_millis(SILENT_MS), stream.message()).await;
            let resp = match msg {
                Err(_) => return End::Broken(format!("silent for {SILENT_MS} ms")),
                Ok(Err(e)) => return End::Broken(e.to_string()),
                Ok(Ok(None)) => return End::Broken("the stream ended".into()),
                Ok(Ok(Some(r))) => r,
            };
            if resp.compact_revision() > 0 {
                return End::Compacted;
            }
            if resp.canceled() {
                return End::Broken(format!("canceled: {}", resp.cancel_reason()));
            }
            if let Some(t) = since.take() {
                let ms = t.elapsed().as_millis() as u64;
                self.note(|s| s.report.longest_resume_ms = s.report.longest_resume_ms.max(ms));
            }
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                if ev.event_type() != EventType::Put {
                    continue;
                }
                let rev = kv.mod_revision();
                self.next_rev = self.next_rev.max(rev + 1);
                self.note(|s| record(s, rev));
            }
        }
    }
}

fn record(s: &mut Shared, rev: i64) {
    s.report.events += 1;
    let last = s.seen.last().copied().unwrap_or(0);
    if s.seen.contains(&rev) {
        s.report.duplicated += 1;
    } else {
        if rev < last {
            s.report.out_of_order += 1;
        }
        if s.seen.len() < MAX_SEEN {
            s.seen.insert(rev);
        }
    }
}

/// Puts one key at a time under a prefix, keeping each acknowledged write's revision.
pub struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<i64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    /// Writes under `prefix` through `endpoints` (the next one on any failure).
    pub fn start(endpoints: Vec<String>, opts: ConnectOptions, prefix: String) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (s, a) = (stop.clone(), acked.clone());
        let task = tokio::spawn(async move {
            let mut at = 0usize;
            let mut n = 0u64;
            let mut client: Option<Client> = None;
            while !s.load(Ordering::SeqCst) {
                if client.is_none() {
                    let url = endpoints[at % endpoints.len()].clone();
                    client = timed(Client::connect([url], Some(opts.clone()))).await.ok();
                }
                if let Some(c) = client.as_mut() {
                    match timed(c.put(format!("{prefix}{n:09}"), "v", None)).await {
                        Ok(r) => {
                            n += 1;
                            let rev = r.header().map_or(0, |h| h.revision());
                            a.lock().unwrap_or_else(|p| p.into_inner()).push(rev);
                        }
                        Err(_) => {
                            client = None;
                            at += 1;
                        }
                    }
                } else {
                    at += 1;
                }
                tokio::time::sleep(Duration::from_millis(WRITE_EVERY_MS)).await;
            }
        });
        Writer { stop, acked, task }
    }

    /// The acknowledged revisions so far.
    pub fn acked(&self) -> Vec<i64> {
        self.acked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops it; every acknowledged revision, in order.
    pub async fn stop(self) -> Vec<i64> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        self.acked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
