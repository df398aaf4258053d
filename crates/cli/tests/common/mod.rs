//! Test support: a private home, a private loopback subnet, the real `quorum` binary,
//! a controller process, and cleanup by PID of everything started.

#![allow(dead_code)]

use etcd_client::{Client, GetOptions};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const OLD: &str = "3.4.23";
pub const NEW: &str = "3.5.1";

pub struct Env {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    subnet: String,
    controller: Option<Child>,
}

impl Env {
    /// A fresh home with a subnet derived from the test's name, so parallel tests never
    /// share an address (allocation also skips any address in use).
    pub fn new(test: &str) -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let mut h = DefaultHasher::new();
        (test, std::process::id()).hash(&mut h);
        let x = h.finish();
        let subnet = format!("{}.{}", 20 + x % 200, (x >> 8) % 200);
        Env {
            dir,
            home,
            subnet,
            controller: None,
        }
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_quorum"));
        c.args(args)
            .env("QUORUM_HOME", &self.home)
            .env("QUORUM_SUBNET", &self.subnet)
            .env_remove("QUORUM_LOG")
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run quorum")
    }

    /// Runs and requires success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "quorum {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs and requires failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "quorum {args:?} should have failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn start_controller(&mut self) {
        assert!(self.controller.is_none(), "one controller per test env");
        let log = std::fs::File::create(self.dir.path().join(format!(
            "controller-{}.log",
            Instant::now().elapsed().as_nanos()
        )))
        .unwrap();
        let child = self
            .cmd(&["controller"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn controller");
        self.controller = Some(child);
    }

    /// Kills the controller with SIGKILL (a crash), by PID.
    pub fn kill_controller(&mut self) {
        if let Some(mut c) = self.controller.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn status(&self, name: &str) -> serde_json::Value {
        let out = self.ok(&["status", name, "-o", "json"]);
        serde_json::from_str(&out).expect("status json")
    }

    pub fn endpoints(&self, name: &str) -> Vec<String> {
        self.status(name)["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    }

    /// Waits (with a deadline) until `cond` holds for the status of `name`.
    pub fn wait_status(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.status(name);
            if cond(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last status:\n{s:#}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stored events of a control plane, read from the store file.
    pub fn event_kinds(&self, name: &str) -> Vec<String> {
        let store = quorum_store::Store::open(&self.home).unwrap();
        store
            .events_after(name, 0, 100_000)
            .unwrap()
            .into_iter()
            .filter(|e| e.ok)
            .map(|e| e.kind)
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.kill_controller();
        // Every machine this test started, by the PID in its pid file.
        let provider =
            quorum_provider::LocalProvider::new(&self.home, quorum_provider::default_etcd_dir());
        for m in provider.list() {
            let _ = provider.kill(&m);
        }
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Writes `n` keys with unique values; returns them.
pub fn write_keys(endpoints: &[String], prefix: &str, n: usize) -> Vec<(String, String)> {
    rt().block_on(async {
        let mut c = Client::connect(endpoints, None).await.expect("connect");
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let (k, v) = (
                format!("{prefix}{i:05}"),
                format!("v{i}-{}", std::process::id()),
            );
            tokio::time::timeout(Duration::from_secs(5), c.put(k.clone(), v.clone(), None))
                .await
                .expect("put timed out")
                .expect("put");
            out.push((k, v));
        }
        out
    })
}

/// Reads every key under `prefix` (linearizable) and requires exactly `want`.
pub fn assert_keys(endpoints: &[String], prefix: &str, want: &[(String, String)]) {
    rt().block_on(async {
        let mut c = Client::connect(endpoints, None).await.expect("connect");
        let resp = tokio::time::timeout(
            Duration::from_secs(10),
            c.get(prefix, Some(GetOptions::new().with_prefix())),
        )
        .await
        .expect("get timed out")
        .expect("get");
        let got: Vec<(String, String)> = resp
            .kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key_str().unwrap().to_string(),
                    kv.value_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(got.len(), want.len(), "key count");
        assert_eq!(got, want, "keys and values");
    });
}

pub fn machine_versions(s: &serde_json::Value) -> Vec<String> {
    s["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["runningVersion"].as_str().unwrap_or("none").to_string())
        .collect()
}
