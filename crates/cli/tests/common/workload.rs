//! An independent client workload for tests: it writes keys one after another through
//! the endpoints it follows, keeps every acknowledged write, counts failures by kind,
//! and checks at the end that every acknowledged write is there.

use super::*;
use etcd_client::{Client, ConnectOptions, GetOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Credentials written by `quorum credentials NAME --out DIR`.
#[derive(Clone)]
pub struct Creds {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl Creds {
    pub fn fetch(env: &Env, name: &str, dir: &Path) -> Creds {
        env.ok(&["credentials", name, "--out", dir.to_str().unwrap()]);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        Creds {
            ca: read("ca.crt"),
            cert: read("client.crt"),
            key: read("client.key"),
        }
    }

    pub fn options(&self) -> ConnectOptions {
        let tls = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&self.ca))
            .identity(etcd_client::Identity::from_pem(&self.cert, &self.key));
        ConnectOptions::new()
            .with_tls(tls)
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(2))
    }
}

/// The kind of a client failure, for the report.
pub fn kind_of(e: &str) -> &'static str {
    let e = e.to_lowercase();
    if e.contains("certificate") || e.contains("handshake") || e.contains("tls") {
        "tls"
    } else if e.contains("deadline") || e.contains("timed out") || e.contains("timeout") {
        "timeout"
    } else if e.contains("unavailable") || e.contains("connect") || e.contains("transport") {
        "unavailable"
    } else if e.contains("raft: stopped") {
        "member leaving"
    } else if e.contains("leader") {
        "no leader"
    } else {
        "other"
    }
}

/// What the workload saw: the writes acknowledged, and the failures by kind.
pub type WorkloadResult = (Vec<(String, String)>, BTreeMap<String, u64>);

/// An independent client: it writes keys one after another through every member's
/// endpoint with the credentials it was given (switching to fresh ones when told, as a
/// client does after `quorum credentials` warns it), and keeps every acknowledged write.
pub struct Workload {
    stop: Arc<AtomicBool>,
    /// Where it writes: the endpoints quorum publishes, as a client follows them.
    endpoints: Arc<Mutex<Vec<String>>>,
    creds: Arc<Mutex<(u64, Creds)>>,
    handle: Option<std::thread::JoinHandle<WorkloadResult>>,
    attempts: Arc<AtomicU64>,
}

impl Workload {
    pub fn start(endpoints: Vec<String>, creds: Creds) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let creds = Arc::new(Mutex::new((0u64, creds)));
        let attempts = Arc::new(AtomicU64::new(0));
        let endpoints = Arc::new(Mutex::new(endpoints));
        let (stop2, creds2, attempts2) = (stop.clone(), creds.clone(), attempts.clone());
        let endpoints2 = endpoints.clone();
        let handle = std::thread::spawn(move || {
            let rt = rt();
            let mut acked = vec![];
            let mut failures: BTreeMap<String, u64> = BTreeMap::new();
            // What an unclassified failure said, once (printed in the report).
            let mut examples: BTreeMap<&'static str, String> = BTreeMap::new();
            let mut client: Option<(u64, Client)> = None;
            let mut i = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let (generation, c) = creds2.lock().unwrap().clone();
                if client.as_ref().map(|(g, _)| *g) != Some(generation) {
                    let eps = endpoints2.lock().unwrap().clone();
                    client = rt
                        .block_on(Client::connect(&eps, Some(c.options())))
                        .ok()
                        .map(|cl| (generation, cl));
                    if client.is_none() {
                        *failures.entry("connect".into()).or_default() += 1;
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                }
                let Some((_, cl)) = client.as_mut() else {
                    continue;
                };
                let (k, v) = (format!("w/{i:06}"), format!("v{i}"));
                attempts2.fetch_add(1, Ordering::Relaxed);
                let put = rt.block_on(async {
                    tokio::time::timeout(Duration::from_secs(3), cl.put(k.clone(), v.clone(), None))
                        .await
                });
                match put {
                    Ok(Ok(_)) => acked.push((k, v)),
                    Ok(Err(e)) => {
                        let kind = kind_of(&e.to_string());
                        if matches!(kind, "other" | "tls") && !examples.contains_key(kind) {
                            examples.insert(kind, e.to_string());
                        }
                        *failures.entry(kind.into()).or_default() += 1;
                        // A new connection next time (a member may have gone away).
                        client = None;
                    }
                    Err(_) => {
                        *failures.entry("timeout".into()).or_default() += 1;
                        client = None;
                    }
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            for (kind, e) in examples {
                println!("workload: a failure of kind {kind}: {e}");
            }
            (acked, failures)
        });
        Workload {
            stop,
            endpoints,
            creds,
            handle: Some(handle),
            attempts,
        }
    }

    /// Follows the endpoints quorum publishes (used at its next connection).
    pub fn follow(&self, eps: Vec<String>) {
        if !eps.is_empty() {
            *self.endpoints.lock().unwrap() = eps;
        }
    }

    /// Switches to fresh credentials.
    pub fn use_creds(&self, c: Creds) {
        let mut g = self.creds.lock().unwrap();
        *g = (g.0 + 1, c);
    }

    pub fn finish(mut self) -> (Vec<(String, String)>, BTreeMap<String, u64>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let (acked, failures) = self.handle.take().unwrap().join().unwrap();
        (acked, failures, self.attempts.load(Ordering::Relaxed))
    }
}

/// Every key under `w/` that the workload saw acknowledged is there, with its value.
pub fn assert_acked(endpoints: &[String], creds: &Creds, acked: &[(String, String)]) {
    // Published endpoints only: every member answers for the whole keyspace.
    let got: BTreeMap<String, String> = rt().block_on(async {
        let mut c = Client::connect(endpoints, Some(creds.options()))
            .await
            .unwrap();
        let r = c
            .get("w/", Some(GetOptions::new().with_prefix()))
            .await
            .unwrap();
        r.kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key_str().unwrap().to_string(),
                    kv.value_str().unwrap().to_string(),
                )
            })
            .collect()
    });
    let lost: Vec<&String> = acked
        .iter()
        .filter(|(k, v)| got.get(k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost: {lost:?}",
        lost.len()
    );
}
