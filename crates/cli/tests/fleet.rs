//! Many control planes, one controller: no control plane can slow another.
//!
//! Real processes throughout: one `quorum controller`, real etcd members, and hung
//! neighbours made by SIGSTOP on their etcd (by PID), continued before cleanup.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// SIGCONTs the processes it holds when dropped (so cleanup can stop them), also when
/// the test fails.
struct Stopped(Vec<i32>);

impl Stopped {
    fn stop(&mut self, pid: i32) {
        // SAFETY: kill(2) on the pid of an etcd this test's controller started and the
        // status just reported running.
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGSTOP) },
            0,
            "SIGSTOP {pid}"
        );
        self.0.push(pid);
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for pid in &self.0 {
            // SAFETY: as above; a process already gone makes this a no-op error.
            unsafe { libc::kill(*pid, libc::SIGCONT) };
        }
    }
}

/// The pid of each running machine of `cp`.
fn pids(env: &Env, cp: &str) -> Vec<i32> {
    env.status(cp)["machines"]
        .as_array()
        .expect("machines")
        .iter()
        .filter_map(|m| m["pid"].as_i64())
        .map(|p| i32::try_from(p).expect("a pid fits i32"))
        .collect()
}

/// Whether `s` says a quorum of voters is healthy (its `Available` condition).
fn available(s: &serde_json::Value) -> bool {
    s["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .any(|c| c["kind"] == "Available" && c["status"] == true)
}

/// `upgrade NAME --version NEW --wait`, timed; then every member runs NEW and every
/// key written before is there.
fn timed_rollout(env: &Env, cp: &str) -> Duration {
    let cluster = env.endpoints(cp);
    let keys = write_keys(&cluster, "k", 200);
    let t = Instant::now();
    env.ok(&[
        "upgrade",
        cp,
        "--version",
        NEW,
        "--wait",
        "--timeout",
        "180s",
    ]);
    let took = t.elapsed();
    let s = env.status(cp);
    assert_eq!(machine_versions(&s), vec![NEW; 3], "{s:#}");
    assert_keys(&env.endpoints(cp), "k", &keys);
    took
}

/// The measurement: a 3-member rollout alone, then the same rollout beside
/// three hung 1-member control planes (their etcd SIGSTOPped: every observation of
/// them waits out its deadlines). With one task per control plane, the hung ones wait
/// alone: the rollout beside them takes no more than 1.2 times the one alone.
#[test]
fn hung_control_planes_do_not_slow_a_rollout_beside_them() {
    let mut env = Env::new("fleet-hung");
    env.start_controller();
    env.create_and_wait("alone", 3, OLD);
    let alone = timed_rollout(&env, "alone");
    env.ok(&["delete", "alone", "--yes", "--wait", "--timeout", "60s"]);

    let mut stopped = Stopped(Vec::new());
    for name in ["hung-a", "hung-b", "hung-c"] {
        env.create_and_wait(name, 1, OLD);
        let p = pids(&env, name);
        assert_eq!(p.len(), 1, "{name}: {p:?}");
        stopped.stop(p[0]);
    }
    // The controller has seen them hung: each one's status says so.
    for name in ["hung-a", "hung-b", "hung-c"] {
        env.wait_status(name, "its member hung", Duration::from_secs(30), |s| {
            !available(s)
        });
    }
    env.create_and_wait("beside", 3, OLD);
    let beside = timed_rollout(&env, "beside");
    // The hung ones are still hung (the measurement was made beside them).
    for name in ["hung-a", "hung-b", "hung-c"] {
        let s = env.status(name);
        assert!(!available(&s), "{name}: {s:#}");
    }
    let ratio = beside.as_secs_f64() / alone.as_secs_f64();
    println!(
        "rollout {OLD} -> {NEW} of 3 members: alone {:.1} s, beside 3 hung control planes {:.1} s ({ratio:.2}x)",
        alone.as_secs_f64(),
        beside.as_secs_f64()
    );
    assert!(
        ratio <= 1.2,
        "beside 3 hung control planes the rollout took {ratio:.2}x as long as alone ({beside:?} vs {alone:?})"
    );
    drop(stopped);
}
