//! Chained upgrades (issue 31): `quorum upgrade --version` to a release two links away
//! plans the road, shows it with `--dry-run`, records the first link and the rest, and
//! the controller takes each link once the one before converged, after a snapshot of
//! its own. Run here through 3.5.16 (`--via`), on real members; the road into 3.6 is
//! planned against a directory of releases that includes a 3.6 (no 3.6 binary runs
//! here; a dry run runs none).

mod common;

use common::*;
use quorum_core::{ActionKind, SnapshotReason, Version};
use std::path::Path;
use std::time::{Duration, Instant};

/// A release directory `dir/<version>` whose `etcd` says it is `version` (for a dry
/// run's plan only: nothing starts it).
fn fake_release(dir: &Path, version: &str) {
    let d = dir.join(version);
    std::fs::create_dir_all(&d).unwrap();
    for bin in ["etcd", "etcdctl", "etcdutl"] {
        let p = d.join(bin);
        std::fs::write(&p, format!("#!/bin/sh\necho 'etcd Version: {version}'\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A release directory with the installed `real` releases and `fake` ones beside them.
fn releases(env: &Env, name: &str, real: &[&str], fake: &[&str]) -> std::path::PathBuf {
    let dir = env.dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let installed = quorum_provider::default_etcd_dir();
    for v in real {
        std::os::unix::fs::symlink(installed.join(v), dir.join(v)).unwrap();
    }
    for v in fake {
        fake_release(&dir, v);
    }
    dir
}

fn with_releases(env: &Env, dir: &Path, args: &[&str]) -> std::process::Output {
    env.cmd(args)
        .env("QUORUM_ETCD_DIR", dir)
        .output()
        .expect("run quorum")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The road from 3.4.23 into 3.6 is planned through the newest 3.5 at or above the
/// stone; without one, or past a minor with `--via`, it is refused with the reason.
#[test]
fn the_road_into_3_6_is_planned_and_refused_where_it_cannot_go() {
    let mut env = Env::new("chain-plan");
    env.start_controller();
    env.create_and_wait("rd", 1, OLD);
    let later = releases(&env, "later", &[OLD], &["3.5.30", "3.5.33", "3.6.2"]);
    let t = Instant::now();
    let o = with_releases(
        &env,
        &later,
        &["upgrade", "rd", "--version", "3.6.2", "--dry-run"],
    );
    let took = t.elapsed();
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains("3.4.23 -> 3.5.33 -> 3.6.2: 2 rollouts"),
        "{said}"
    );
    assert!(
        said.contains("a snapshot taken and test-restored before each"),
        "{said}"
    );
    assert!(said.contains("dry run: nothing was changed"), "{said}");
    println!(
        "dry run of the road 3.4.23 -> 3.6.2 took {:.2}s:\n{said}",
        took.as_secs_f64()
    );
    // Nothing recorded.
    assert!(env.store().get_control_plane("rd").unwrap().road.is_none());
    // The newest 3.5 here is below 3.6's stone: no road, and why.
    let stale = releases(&env, "stale", &[OLD], &["3.5.30", "3.6.2"]);
    let o = with_releases(
        &env,
        &stale,
        &["upgrade", "rd", "--version", "3.6.2", "--dry-run"],
    );
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(
        said.contains("newest installed 3.5 is 3.5.30") && said.contains("#21889"),
        "{said}"
    );
    // A named road that skips a minor is refused link by link.
    let o = with_releases(
        &env,
        &later,
        &[
            "upgrade",
            "rd",
            "--version",
            "3.6.2",
            "--via",
            "3.5.30",
            "--dry-run",
        ],
    );
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(
        said.contains("--via does not go: 3.5.30 -> 3.6.2"),
        "{said}"
    );
    assert!(said.contains("3.5.32 or later"), "{said}");
    // A stop where the road already is, or named twice, is refused.
    for via in ["3.4.23,3.5.30", "3.5.30,3.5.30"] {
        let o = with_releases(
            &env,
            &later,
            &[
                "upgrade",
                "rd",
                "--version",
                "3.6.2",
                "--via",
                via,
                "--dry-run",
            ],
        );
        assert!(!o.status.success(), "{via}: {}", text(&o));
        assert!(text(&o).contains("name each release once"), "{}", text(&o));
    }
    // A stop that is no version is refused by the grammar, naming it.
    let o = with_releases(
        &env,
        &later,
        &["upgrade", "rd", "--version", "3.6.2", "--via", "nonsense"],
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("nonsense"), "{}", text(&o));
}

/// 3.5.1 -> 3.5.16 -> 3.5.30 by replacement, asked as one upgrade: each link a rollout,
/// the second recorded by the controller only after every member ran the first and a
/// snapshot of its own; the road is shown in status while it runs and gone at its end.
#[test]
fn a_chained_upgrade_runs_each_link_after_a_snapshot() {
    let mut env = Env::new("chain-run");
    env.start_controller();
    env.create_and_wait("ch", 1, "3.5.1");
    let keys = write_keys(&env.endpoints("ch"), "k/", 50);
    let dry = env.ok(&[
        "upgrade",
        "ch",
        "--version",
        NEW,
        "--via",
        "3.5.16",
        "--dry-run",
    ]);
    assert!(
        dry.contains("3.5.1 -> 3.5.16 -> 3.5.30: 2 rollouts"),
        "{dry}"
    );
    let t = Instant::now();
    let out = env.ok(&[
        "upgrade",
        "ch",
        "--version",
        NEW,
        "--via",
        "3.5.16",
        "--wait",
        "--timeout",
        "4m",
    ]);
    let took = t.elapsed();
    assert!(
        out.contains("a chained upgrade to etcd 3.5.30 takes the road"),
        "{out}"
    );
    let s = env.status("ch");
    assert_eq!(machine_versions(&s), vec![NEW]);
    assert!(s.get("road").is_none(), "{s:#}");
    assert_keys(&env.endpoints("ch"), "k/", &keys);
    // The order: the first link's machines, the controller's snapshot, the next link.
    let events = env.store().events_after("ch", 0, 10_000).unwrap();
    let at = |kind: ActionKind| {
        events
            .iter()
            .position(|e| e.ok && e.kind.action() == Some(kind))
            .unwrap_or_else(|| panic!("no {kind} in {events:#?}"))
    };
    let link = at(ActionKind::TakeNextLink);
    let snapshot = at(ActionKind::TakeSnapshot);
    assert!(snapshot < link, "the snapshot came after the link");
    let first_link_machine = events
        .iter()
        .position(|e| {
            e.ok && e.kind.action() == Some(ActionKind::AllocateMachine)
                && e.message.contains("3.5.16")
        })
        .expect("a machine at 3.5.16");
    assert!(first_link_machine < snapshot, "{events:#?}");
    assert_eq!(ok_steps(&env, "ch", "take-next-link"), 1);
    let to_new: Version = NEW.parse().unwrap();
    let before = env.store().snapshots("ch").unwrap();
    let kinds: Vec<(SnapshotReason, Option<Version>)> =
        before.iter().map(|r| (r.reason, r.rollout_to)).collect();
    assert!(
        kinds.contains(&(
            SnapshotReason::BeforeRollout,
            Some("3.5.16".parse().unwrap())
        )),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(SnapshotReason::BeforeRollout, Some(to_new))),
        "{kinds:?}"
    );
    println!(
        "3.5.1 -> 3.5.16 -> 3.5.30 (one member, by replacement) took {:.1}s",
        took.as_secs_f64()
    );
}

/// The road is recorded with the first link (and shown by status); a cancel goes back
/// to what every member runs and drops the road, saying so.
#[test]
fn a_road_is_dropped_by_a_cancel_and_said() {
    let mut env = Env::new("chain-drop");
    env.start_controller();
    env.create_and_wait("dr", 1, "3.5.1");
    env.kill_controller();
    let out = env.ok(&["upgrade", "dr", "--version", NEW, "--via", "3.5.16"]);
    assert!(out.contains("3.5.1 -> 3.5.16 -> 3.5.30"), "{out}");
    let cp = env.store().get_control_plane("dr").unwrap();
    assert_eq!(cp.spec.version.to_string(), "3.5.16");
    let road = cp.road.expect("the road recorded");
    assert_eq!(road.links, vec![NEW.parse::<Version>().unwrap()]);
    let s = env.status("dr");
    assert_eq!(s["road"]["links"][0], NEW, "{s:#}");
    let table = env.ok(&["status", "dr"]);
    assert!(
        table.contains("Road             3.5.16 (under way) -> 3.5.30, one rollout each"),
        "{table}"
    );
    // `--abort` goes back to what every member runs: the road goes with it.
    let out = env.ok(&["upgrade", "dr", "--abort"]);
    assert!(
        out.contains("the chained upgrade to etcd 3.5.30 is dropped"),
        "{out}"
    );
    let cp = env.store().get_control_plane("dr").unwrap();
    assert!(cp.road.is_none());
    assert_eq!(cp.spec.version.to_string(), "3.5.1");
    env.start_controller();
    env.wait_status("dr", "converged on 3.5.1", Duration::from_secs(60), |s| {
        s["converged"] == true && machine_versions(s) == vec!["3.5.1"]
    });
}
