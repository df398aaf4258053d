//! A controller's liveness as readers see it: alive through a long step (its heartbeat
//! is beaten from a thread of its own), gone at once after a clean stop.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// A clean stop (SIGTERM) is visible at once: `status` says no controller is active
/// right after the process exits, not after the heartbeat goes stale.
#[test]
fn a_stopped_controller_is_known_stopped_at_once() {
    let mut env = Env::new("life-stop");
    env.start_controller();
    env.create_and_wait("ls", 1, OLD);
    let s = env.status("ls");
    assert_eq!(s["controller"]["active"], true, "{s}");
    assert_eq!(env.terminate_controller(), Some(0));
    let s = env.status("ls");
    assert_eq!(s["controller"]["active"], false, "{s}");
    let text = env.ok(&["status", "ls"]);
    assert!(text.contains("none active"), "{text}");
    env.ok(&["delete", "ls", "--yes", "--wait", "--timeout", "60s"]);
}

/// The walkthrough's failure: during a step of several seconds, `delete --wait` decided
/// the controller had died, tried to finish the deletion itself and failed. With the
/// heartbeat beaten from its own thread, the controller stays alive to readers, `status`
/// names the step under way, and `delete --wait` follows it to the end.
#[cfg(feature = "failpoints")]
#[test]
fn a_long_step_keeps_the_controller_alive_for_readers() {
    const STEP_MS: u64 = 7_000;
    let mut env = Env::new("life-long");
    env.start_controller_with(&[(
        "FAILPOINTS",
        &format!("crash-after-stop-machine=1*sleep({STEP_MS})"),
    )]);
    env.create_and_wait("ll", 1, OLD);
    let mut delete = env
        .cmd(&["delete", "ll", "--yes", "--wait", "--timeout", "120s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While the stop is under way (well past CONTROLLER_STALE_MS of it), the controller
    // is active and says what it is doing.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen_working = false;
    while Instant::now() < deadline && delete.try_wait().unwrap().is_none() {
        let out = env.run(&["status", "ll", "-o", "json"]);
        if out.status.success() {
            let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let c = &s["controller"];
            if let Some(w) = c["workingOn"].as_object() {
                assert_eq!(c["active"], true, "{s}");
                let for_ms = w["forMs"].as_i64().unwrap();
                if for_ms > quorum_controller::CONTROLLER_STALE_MS + 500 {
                    seen_working = true;
                    assert!(w["step"].as_str().unwrap().contains("stop"), "{s}");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = delete.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "delete --wait failed:\n{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("finishing the deletion here"), "{stdout}");
    assert!(!stderr.contains("finishing the deletion here"), "{stderr}");
    assert!(seen_working, "status never showed the long step under way");
    assert_eq!(
        env.controller_exit(Duration::from_millis(1)),
        None,
        "the controller died"
    );
}
