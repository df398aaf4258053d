//! A client that sticks to what it was told, as many real etcd clients do (an HA
//! application keeping its leader key in etcd, configured as its documentation says):
//!
//! - it is configured with a fixed list of client addresses;
//! - it talks to one address at a time and keeps using it while it answers;
//! - it re-reads the member list only when a request fails, from the other addresses it
//!   knows, and then knows exactly the members' client URLs;
//! - when every address it knows fails, it goes back to the configured list;
//! - it holds a lease (`LEASE_TTL_S`) with a key under it, kept alive every
//!   `KEEPALIVE_EVERY_MS`, as a leader election does.
//!
//! It is *stranded* when every address it knows and every configured address fails
//! at once: then it cannot reach the cluster again without a person. The report says
//! how often that happened, whether its lease ever expired, and the longest time
//! between two answered keep-alives.

use etcd_client::{Client, ConnectOptions, PutOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The lease a leader election holds (seconds).
pub const LEASE_TTL_S: i64 = 10;
/// How often the lease is kept alive: a third of its life, as etcd's own clients do.
pub const KEEPALIVE_EVERY_MS: u64 = 3_000;
/// Each call's deadline: an address that does not answer within it has failed.
const CALL_TIMEOUT_MS: u64 = 1_000;
/// How long to wait before the next round of addresses after all of them failed.
const STRANDED_RETRY_MS: u64 = 500;

/// What a sticky client saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StickyReport {
    /// Times every address it knew and every configured address failed together.
    pub stranded: u32,
    /// The longest time it was stranded, from the first round that found nothing
    /// until an address answered again (ms).
    pub longest_stranded_ms: u64,
    /// Times its lease was found expired (its keep-alive answered TTL 0).
    pub leases_expired: u32,
    /// The longest time between two answered keep-alives (ms).
    pub longest_keepalive_gap_ms: u64,
    /// Times it re-read the member list (each after a failure).
    pub refreshes: u32,
    /// Times it went back to the configured list.
    pub back_to_configured: u32,
    /// Keep-alives answered.
    pub keepalives: u64,
    /// The addresses it knew last.
    pub known: Vec<String>,
    /// The last failure, for the report.
    pub last_error: Option<String>,
}

/// A running sticky client; `stop` ends it and returns what it saw.
pub struct Sticky {
    stop: Arc<AtomicBool>,
    report: Arc<Mutex<StickyReport>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sticky {
    /// Starts a client configured with `configured` (client URLs) that holds `key`
    /// under its lease, on the current tokio runtime.
    pub fn start(configured: Vec<String>, opts: ConnectOptions, key: String) -> Sticky {
        Sticky::start_at(configured, 0, opts, key)
    }

    /// `start`, using the configured address `first` first: which member a client
    /// happens to use decides whether it fails (and so learns) early or late.
    pub fn start_at(
        configured: Vec<String>,
        first: usize,
        opts: ConnectOptions,
        key: String,
    ) -> Sticky {
        assert!(
            !configured.is_empty(),
            "a client is configured with an address"
        );
        assert!(
            first < configured.len(),
            "the first address is one of the list"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let report = Arc::new(Mutex::new(StickyReport {
            known: configured.clone(),
            ..StickyReport::default()
        }));
        let mut c = Conn {
            configured: configured.clone(),
            known: configured,
            at: first,
            client: None,
            opts,
            report: report.clone(),
        };
        let s = stop.clone();
        let task = tokio::spawn(async move { c.run(&key, &s).await });
        Sticky { stop, report, task }
    }

    /// What it saw so far.
    pub fn report(&self) -> StickyReport {
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops it; what it saw.
    pub async fn stop(self) -> StickyReport {
        self.stop.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

struct Conn {
    configured: Vec<String>,
    known: Vec<String>,
    /// The index in `known` of the address in use.
    at: usize,
    client: Option<Client>,
    opts: ConnectOptions,
    report: Arc<Mutex<StickyReport>>,
}

/// `f` within `CALL_TIMEOUT_MS`, its error in words (the patterns' clients share it).
pub(crate) async fn timed<T, E: std::fmt::Display>(
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(Duration::from_millis(CALL_TIMEOUT_MS), f).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {CALL_TIMEOUT_MS} ms")),
    }
}

impl Conn {
    fn note(&self, f: impl FnOnce(&mut StickyReport)) {
        f(&mut self.report.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// A client of the address in use (one address: it never moves by itself).
    async fn client(&mut self) -> Result<Client, String> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let url = self.known[self.at].clone();
        let c = timed(Client::connect([url], Some(self.opts.clone()))).await?;
        self.client = Some(c.clone());
        Ok(c)
    }

    /// Holds the lease until `stop`: grant, put the key under it, keep it alive.
    async fn run(&mut self, key: &str, stop: &AtomicBool) {
        let mut lease: Option<i64> = None;
        let mut last_alive = Instant::now();
        let mut started = false;
        while !stop.load(Ordering::SeqCst) {
            match self.keep(key, &mut lease).await {
                Ok(()) => {
                    if started {
                        let gap_ms = last_alive.elapsed().as_millis() as u64;
                        self.note(|r| {
                            r.longest_keepalive_gap_ms = r.longest_keepalive_gap_ms.max(gap_ms);
                            r.keepalives += 1;
                        });
                    }
                    started = true;
                    last_alive = Instant::now();
                    tokio::time::sleep(Duration::from_millis(KEEPALIVE_EVERY_MS)).await;
                }
                Err(e) => {
                    self.note(|r| r.last_error = Some(e));
                    self.fail_over(stop).await;
                }
            }
        }
        // A gap still open when it stops counts too.
        let open_ms = last_alive.elapsed().as_millis() as u64;
        self.note(|r| r.longest_keepalive_gap_ms = r.longest_keepalive_gap_ms.max(open_ms));
    }

    /// One keep-alive (a grant and a put first, or again after the lease expired).
    async fn keep(&mut self, key: &str, lease: &mut Option<i64>) -> Result<(), String> {
        let mut c = self.client().await?;
        if let Some(id) = *lease {
            let (mut keeper, mut stream) = timed(c.lease_keep_alive(id)).await?;
            timed(keeper.keep_alive()).await?;
            let answer = timed(stream.message()).await?;
            match answer {
                Some(a) if a.ttl() > 0 => return Ok(()),
                _ => {
                    self.note(|r| r.leases_expired += 1);
                    *lease = None;
                }
            }
        }
        let id = timed(c.lease_grant(LEASE_TTL_S, None)).await?.id();
        let put = PutOptions::new().with_lease(id);
        timed(c.put(key, "leader", Some(put))).await?;
        *lease = Some(id);
        Ok(())
    }

    /// After a failure: re-read the member list from the other addresses known; when
    /// none answers, from the configured ones; when none of those answers either, it is
    /// stranded, and tries again until one does (or `stop`).
    async fn fail_over(&mut self, stop: &AtomicBool) {
        self.client = None;
        let failed = self.known[self.at].clone();
        let mut others: Vec<String> = self
            .known
            .iter()
            .filter(|u| **u != failed)
            .cloned()
            .collect();
        others.push(failed);
        if self.refresh_from(&others).await {
            return;
        }
        self.note(|r| r.back_to_configured += 1);
        let mut since: Option<Instant> = None;
        while !stop.load(Ordering::SeqCst) {
            let configured = self.configured.clone();
            if self.refresh_from(&configured).await {
                if let Some(s) = since {
                    let ms = s.elapsed().as_millis() as u64;
                    self.note(|r| r.longest_stranded_ms = r.longest_stranded_ms.max(ms));
                }
                return;
            }
            if since.is_none() {
                since = Some(Instant::now());
                self.note(|r| r.stranded += 1);
            }
            tokio::time::sleep(Duration::from_millis(STRANDED_RETRY_MS)).await;
        }
    }

    /// Reads the member list from the first of `from` that answers; then knows its
    /// members' client URLs and uses the address that answered.
    async fn refresh_from(&mut self, from: &[String]) -> bool {
        for url in from {
            let Ok(mut c) = timed(Client::connect([url.clone()], Some(self.opts.clone()))).await
            else {
                continue;
            };
            let Ok(list) = timed(c.member_list()).await else {
                continue;
            };
            let mut known: Vec<String> = list
                .members()
                .iter()
                .flat_map(|m| m.client_urls().iter().cloned())
                .collect();
            if known.is_empty() {
                continue;
            }
            known.sort();
            known.dedup();
            self.at = known.iter().position(|u| u == url).unwrap_or(0);
            self.known = known.clone();
            self.client = None;
            self.note(|r| {
                r.refreshes += 1;
                r.known = known;
            });
            return true;
        }
        false
    }
}
