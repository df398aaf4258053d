//! Two commands changing one control plane at once (issue 29): every change that was
//! reported recorded (exit 0) is in the spec afterwards, on both store backends, with
//! and without a running controller; `apply` of a manifest read before another change
//! is refused, naming what it would set back, unless `--force-conflicts`.
//!
//! Trials: `QUORUM_CONCURRENT_TRIALS` (default 10 per backend; the issue's figure is 50).

mod common;

use common::*;
use std::process::Command;

const CP: &str = "r";
/// The version the trials alternate with (`NEW` is the other).
const OTHER: &str = "3.5.0";

fn trials() -> usize {
    count_from_env("QUORUM_CONCURRENT_TRIALS", 10)
}

fn wait_out(c: &mut Command) -> std::process::Child {
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn quorum")
}

/// `upgrade` and `scale` started at the same moment, `trials()` times, each pair
/// changing both fields; both must be in the spec after every pair that exited 0.
fn upgrade_and_scale_at_once(env: &Env, force: bool) {
    let mut recorded = 0;
    for t in 0..trials() {
        let (version, replicas) = if t % 2 == 0 { (OTHER, "5") } else { (NEW, "3") };
        let mut up = vec![
            "upgrade",
            CP,
            "--version",
            version,
            "--allow-downgrade",
            "--no-snapshot",
        ];
        let mut sc = vec!["scale", CP, "--replicas", replicas];
        if force {
            up.push("--force");
            sc.push("--force");
        }
        let a = wait_out(&mut env.cmd(&up));
        let b = wait_out(&mut env.cmd(&sc));
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let spec = env.store().get_control_plane(CP).unwrap().spec;
        for (o, what, kept) in [
            (&a, "upgrade", spec.version.to_string() == version),
            (&b, "scale", spec.replicas.to_string() == replicas),
        ] {
            if o.status.success() {
                recorded += 1;
                assert!(
                    kept,
                    "trial {t}: {what} said it was recorded and is gone: {spec:?}\n{}",
                    printed(o)
                );
            } else {
                panic!("trial {t}: {what} was refused:\n{}", printed(o));
            }
        }
    }
    assert_eq!(recorded, 2 * trials());
}

fn created(env: &mut Env) {
    env.start_controller();
    env.create_and_wait(CP, 3, NEW);
}

#[test]
fn concurrent_changes_are_all_kept_on_the_embedded_store() {
    let mut env = Env::new("concurrent-embedded");
    created(&mut env);
    env.kill_controller();
    upgrade_and_scale_at_once(&env, false);
}

#[test]
fn concurrent_changes_are_all_kept_while_the_controller_acts_on_them() {
    let mut env = Env::new("concurrent-controller");
    created(&mut env);
    // The controller replaces and scales as the trials change the spec: changes are
    // made while members come and go (--force: an unreachable member is no refusal).
    upgrade_and_scale_at_once(&env, true);
}

#[test]
fn concurrent_changes_are_all_kept_on_a_management_etcd() {
    let (mut env, mgmt) = env_on_management_etcd("concurrent-etcd");
    created(&mut env);
    env.kill_controller();
    upgrade_and_scale_at_once(&env, false);
    drop(env);
    drop(mgmt);
}

/// `get -o yaml` carries the spec's version; a manifest read before another change is
/// refused, naming what it would set back, and `--force-conflicts` applies it anyway.
#[test]
fn a_stale_manifest_is_a_conflict_unless_forced() {
    let mut env = Env::new("concurrent-apply");
    created(&mut env);
    env.kill_controller();
    let yaml = env.ok(&["get", CP, "-o", "yaml"]);
    assert!(yaml.contains("resourceVersion:"), "{yaml}");
    let path = env.dir.path().join("r.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let file = path.to_str().unwrap();
    // Applied unchanged, it changes nothing.
    let out = env.ok(&["apply", "-f", file]);
    assert!(out.contains("unchanged"), "{out}");
    env.ok(&["scale", CP, "--replicas", "5"]);
    let err = env.fails(&["apply", "-f", file]);
    assert!(
        err.contains("conflict")
            && err.contains("spec.replicas: 5 -> 3")
            && err.contains("--force-conflicts"),
        "{err}"
    );
    assert_eq!(
        env.store().get_control_plane(CP).unwrap().spec.replicas,
        5,
        "nothing written"
    );
    env.ok(&["apply", "-f", file, "--force-conflicts"]);
    assert_eq!(env.store().get_control_plane(CP).unwrap().spec.replicas, 3);
    // A version no quorum wrote is named.
    std::fs::write(
        &path,
        yaml.replace("resourceVersion: '", "resourceVersion: 'x"),
    )
    .unwrap();
    let bad = env.fails(&["apply", "-f", file]);
    assert!(bad.contains("metadata.resourceVersion"), "{bad}");
}
