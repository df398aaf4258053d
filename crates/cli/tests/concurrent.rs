//! Four commands changing one control plane at once (issue 29: `upgrade`, `scale`,
//! `pause`, `apply`): every change that was reported recorded (exit 0) is in the spec
//! afterwards, on both store backends, with and without a running controller; a
//! manifest read before another change lands or is refused as a conflict; `apply` of a manifest read before another change
//! is refused, naming what it would set back, unless `--force-conflicts`.
//!
//! Trials: `QUORUM_CONCURRENT_TRIALS` (default 10 per backend; the issue's figure is 50).

mod common;

use common::*;
use std::process::Command;

const CP: &str = "r";
/// The version the trials alternate with (`NEW` is the other).
const OTHER: &str = "3.5.16";

fn trials() -> usize {
    count_from_env("QUORUM_CONCURRENT_TRIALS", 10)
}

fn wait_out(c: &mut Command) -> std::process::Child {
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn quorum")
}

/// What one command of a trial meant to set, and how to tell it is in the spec.
struct Meant {
    what: &'static str,
    kept: fn(&quorum_core::ControlPlaneSpec, &str) -> bool,
    value: String,
}

/// `upgrade`, `scale`, `pause` and `apply` (of a manifest `get` printed at the trial's
/// start, with `deletionProtection` switched) started at the same moment, `trials()`
/// times: every one that exited 0 is in the spec afterwards, and the only refusal is
/// `apply`'s, which names the conflict.
fn four_changes_at_once(env: &Env, force: bool) {
    let mut recorded = 0;
    let mut conflicts = 0;
    for t in 0..trials() {
        let even = t % 2 == 0;
        let (version, replicas) = if even { (OTHER, "5") } else { (NEW, "3") };
        let manifest = env.dir.path().join(format!("trial-{t}.yaml"));
        let yaml = env.ok(&["get", CP, "-o", "yaml"]);
        let protect = !yaml.contains("deletionProtection: true");
        let switched = yaml.replace(
            &format!("deletionProtection: {}", !protect),
            &format!("deletionProtection: {protect}"),
        );
        std::fs::write(&manifest, switched).unwrap();
        let mut up = vec![
            "upgrade",
            CP,
            "--version",
            version,
            "--allow-downgrade",
            "--no-snapshot",
        ];
        let mut sc = vec!["scale", CP, "--replicas", replicas];
        let mut ap = vec![
            "apply",
            "-f",
            manifest.to_str().unwrap(),
            "--allow-downgrade",
            "--no-snapshot",
        ];
        let pa = if even {
            vec!["pause", CP]
        } else {
            vec!["pause", CP, "--resume"]
        };
        if force {
            up.push("--force");
            sc.push("--force");
            ap.push("--force");
        }
        // Started in a rotating order, so each is sometimes first (a manifest lands only
        // if it is the first to write).
        let all = [&up, &sc, &pa, &ap];
        let mut children: Vec<Option<std::process::Child>> = (0..4).map(|_| None).collect();
        for k in 0..4 {
            let i = (k + t) % 4;
            children[i] = Some(wait_out(&mut env.cmd(all[i])));
        }
        let outs: Vec<_> = children
            .into_iter()
            .map(|c| {
                c.expect("every command started")
                    .wait_with_output()
                    .unwrap()
            })
            .collect();
        let spec = env.store().get_control_plane(CP).unwrap().spec;
        let meant = [
            Meant {
                what: "upgrade",
                kept: |s, v| s.version.to_string() == v,
                value: version.into(),
            },
            Meant {
                what: "scale",
                kept: |s, v| s.replicas.to_string() == v,
                value: replicas.into(),
            },
            Meant {
                what: "pause",
                kept: |s, v| s.paused.to_string() == v,
                value: even.to_string(),
            },
            Meant {
                what: "apply",
                kept: |s, v| s.deletion_protection.to_string() == v,
                value: protect.to_string(),
            },
        ];
        for (o, m) in outs.iter().zip(&meant) {
            if o.status.success() {
                recorded += 1;
                assert!(
                    (m.kept)(&spec, &m.value),
                    "trial {t}: {} said it was recorded and is gone: {spec:?}\n{}",
                    m.what,
                    printed(o)
                );
            } else if m.what == "apply" && printed(o).contains("conflict") {
                conflicts += 1;
            } else {
                panic!("trial {t}: {} was refused:\n{}", m.what, printed(o));
            }
        }
    }
    println!(
        "{} trials of 4 changes at once: {recorded} recorded and kept, {conflicts} manifests refused as conflicts",
        trials()
    );
    assert_eq!(recorded + conflicts, 4 * trials());
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
    four_changes_at_once(&env, false);
}

#[test]
fn concurrent_changes_are_all_kept_while_the_controller_acts_on_them() {
    let mut env = Env::new("concurrent-controller");
    created(&mut env);
    // The controller replaces and scales as the trials change the spec: changes are
    // made while members come and go (--force: an unreachable member is no refusal).
    four_changes_at_once(&env, true);
}

#[test]
fn concurrent_changes_are_all_kept_on_a_management_etcd() {
    let (mut env, mgmt) = env_on_management_etcd("concurrent-etcd");
    created(&mut env);
    env.kill_controller();
    four_changes_at_once(&env, false);
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
