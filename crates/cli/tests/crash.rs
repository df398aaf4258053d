//! Crash anywhere, resume correctly: for every failpoint of the controller, a real
//! rollout (3 members, etcd 3.4.23 -> 3.5.1, keys written before) crashes there, a fresh
//! controller takes over, and the rollout must complete with every key intact, quorum
//! never lost (watched from outside), and no member or machine orphaned. The in-place
//! step's failpoints (and the stops, starts and leader moves it makes) crash an in-place
//! rollout, which must also end with the same members on the same data.
//!
//! Needs the `failpoints` feature (scripts/test.sh builds with --all-features).
#![cfg(feature = "failpoints")]

mod common;
#[path = "inplace/support.rs"]
mod inplace;

use common::*;
use quorum_controller::failpoints::{self, CRASH_EXIT_CODE};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TIMEOUT: &str = "180s";
/// Scenarios run at once (each has its own home, subnet and processes).
const PARALLEL: usize = 3;

/// A failpoint exercised by a teardown (`quorum delete` crashing there): forgetting the
/// control plane happens only there, and stopping a machine happens there for certain.
/// (In a rollout, etcd often shuts a removed member down by itself before quorum would
/// stop it, so a rollout reaches stop-machine only by timing.)
fn is_teardown_point(p: &str) -> bool {
    p.ends_with("forget-control-plane") || p.ends_with("stop-machine")
}

/// The prefix of a failpoint crashed during an in-place rollout rather than a
/// replacement (`in-place/crash-before-stop-machine`): the kinds an in-place rollout
/// shares with the others.
const IN_PLACE_PREFIX: &str = "in-place/";

/// The kinds an in-place step performs besides its own, each crashed during one too.
const IN_PLACE_SHARED_KINDS: [&str; 3] = ["stop-machine", "start-machine", "move-leader"];

/// The prefix of a failpoint crashed while a member that failed to start on the new
/// binary is rolled back (`rollback/crash-after-end-in-place`).
const ROLLBACK_PREFIX: &str = "rollback/";

/// The rollback's own side effects, each crashed before and after: recording the
/// previous binary (the second `set-in-place-phase`, after the one that recorded the new
/// binary) and ending the step as rolled back (the first `end-in-place`), with the
/// `fail` actions that make the failpoint fire at that hit.
const ROLLBACK_POINTS: [(&str, &str); 4] = [
    ("crash-before-set-in-place-phase", "1*off->return"),
    ("crash-after-set-in-place-phase", "1*off->return"),
    ("crash-before-end-in-place", "return"),
    ("crash-after-end-in-place", "return"),
];

/// `inPlace.timeout` of the rollback scenario: the least allowed.
const ROLLBACK_TIMEOUT: &str = "timeout: 5s";

/// A failpoint exercised by an in-place rollout: the in-place step's own kinds
/// (`begin-in-place`, `set-in-place-phase`, `end-in-place`), and the shared ones
/// prefixed with `IN_PLACE_PREFIX`.
fn is_in_place_point(p: &str) -> bool {
    p.contains("in-place")
}

/// Every failpoint of an in-place rollout that `failpoints::all` does not name: the
/// shared kinds, before and after, and the rollback's.
fn in_place_extra_points() -> Vec<String> {
    IN_PLACE_SHARED_KINDS
        .iter()
        .flat_map(|k| ["before", "after"].map(|w| format!("{IN_PLACE_PREFIX}crash-{w}-{k}")))
        .chain(
            ROLLBACK_POINTS
                .iter()
                .map(|(p, _)| format!("{ROLLBACK_PREFIX}{p}")),
        )
        .collect()
}

/// A failpoint exercised by the NOSPACE repair (compaction, defragmentation, disarm):
/// no rollout reaches those steps.
/// A failpoint of the scheduled snapshots (`take-snapshot`, `verify-snapshot`,
/// `prune-snapshot`).
fn is_snapshot_point(p: &str) -> bool {
    p.ends_with("-snapshot")
}

/// Crashes the controller at `point` while it takes scheduled snapshots (every 2 s,
/// retention keeping 1) of a 1-member control plane; the next controller goes on:
/// snapshots are taken, verified and pruned, and every file left has a record and
/// every record its file.
fn snapshot_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "sn";
    let manifest = scheduled_backup_manifest(&env, name, "*/2 * * * * *", 1);
    env.start_controller_with(&[("FAILPOINTS", &format!("{point}=return"))]);
    env.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    expect_crash(&mut env, point);
    env.start_controller();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (recs, ids, files) = snapshot_records_and_files(&env, name);
        let done = ok_steps(&env, name, "take-snapshot") >= 3
            && ok_steps(&env, name, "prune-snapshot") >= 1
            && ok_steps(&env, name, "verify-snapshot") >= 1
            && files == ids
            && recs.iter().any(|r| r.verified());
        if done {
            return format!("{point}: crashed, next controller took, verified and pruned");
        }
        assert!(
            Instant::now() < deadline,
            "{point}: after 90 s: records {ids:?}, files {files:?}\n{}",
            history(&env.store().events_after(name, 0, 10_000).unwrap())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A failpoint of removing fenced directories (`prune-fenced`).
fn is_fenced_point(p: &str) -> bool {
    p.ends_with("-prune-fenced")
}

/// Crashes the controller at `point` while it removes the fenced directory a restore
/// left (`spec.recovery.keepFenced: 1s`); the next controller goes on: the control
/// plane serves, and no fenced directory is left.
fn fenced_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "fe";
    let manifest = env.dir.path().join("fe.yaml");
    std::fs::write(
        &manifest,
        format!("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {{name: {name}}}\nspec:\n  replicas: 1\n  version: \"{NEW}\"\n  recovery: {{keepFenced: 1s}}\n"),
    )
    .unwrap();
    env.start_controller_with(&[("FAILPOINTS", &format!("{point}=return"))]);
    env.ok(&[
        "apply",
        "-f",
        manifest.to_str().unwrap(),
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    env.ok(&["snapshot", name]);
    env.ok(&["restore", name, "--from", "newest", "--yes"]);
    expect_crash(&mut env, point);
    env.start_controller();
    let provider =
        quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = env.status(name);
        if s["converged"] == true && provider.list_fenced(Some(name)).is_empty() {
            return format!("{point}: crashed, the next controller removed the fenced directory");
        }
        assert!(
            Instant::now() < deadline,
            "{point}: after 90 s: fenced {:?}\n{}",
            provider.list_fenced(Some(name)),
            history(&env.store().events_after(name, 0, 10_000).unwrap())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn is_upkeep_point(p: &str) -> bool {
    p.ends_with("-compact") || p.ends_with("-defragment") || p.ends_with("-disarm-alarm")
}

/// The database quota of the NOSPACE scenario: small, so it fills in a second.
const NOSPACE_QUOTA_BYTES: u64 = 2 << 20;
/// A value of the fill: a quota's worth in a few dozen puts.
const FILL_VALUE_BYTES: usize = 100 << 10;
/// At most this many puts to reach NOSPACE (about 20 fill a 2 MiB quota).
const MAX_FILL_PUTS: usize = 400;

/// Puts large values until etcd answers NOSPACE ("database space exceeded"); returns
/// the keys written before it.
fn fill_until_nospace(cluster: &Cluster) -> usize {
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        let value = "x".repeat(FILL_VALUE_BYTES);
        for i in 0..MAX_FILL_PUTS {
            let put = c.put(format!("fill/{:03}", i % 8), value.clone(), None);
            match tokio::time::timeout(Duration::from_secs(5), put).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) if e.to_string().contains("database space exceeded") => return i,
                Ok(Err(e)) => panic!("put {i}: {e}"),
                Err(_) => panic!("put {i} timed out"),
            }
        }
        panic!("no NOSPACE after {MAX_FILL_PUTS} puts of {FILL_VALUE_BYTES} bytes")
    })
}

/// Whether a put is accepted now.
fn put_accepted(cluster: &Cluster) -> bool {
    rt().block_on(async {
        let Ok(mut c) = cluster.connect().await else {
            return false;
        };
        let put = c.put("after-nospace", "ok", None);
        matches!(
            tokio::time::timeout(Duration::from_secs(5), put).await,
            Ok(Ok(_))
        )
    })
}

/// The NOSPACE scenario: a 3-member control plane with a tiny quota is filled to NOSPACE
/// with no controller running; a controller armed with `point` repairs it (crashing
/// there, or losing that step's answer once), and the next controller finishes: writes
/// are accepted again and no alarm is left.
fn nospace_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "ns";
    let manifest = env.dir.path().join("ns.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {{name: {name}}}\nspec:\n  replicas: 3\n  version: \"{NEW}\"\n  maintenance: {{quotaBackendBytes: {NOSPACE_QUOTA_BYTES}}}\n"
        ),
    )
    .unwrap();
    env.start_controller();
    let apply_and_wait = |env: &Env| {
        env.ok(&[
            "apply",
            "-f",
            manifest.to_str().unwrap(),
            "--wait",
            "--timeout",
            TIMEOUT,
        ])
    };
    apply_and_wait(&env);
    let keys = write_keys(&env.endpoints(name), "k/", 50);
    env.kill_controller();
    let cluster = env.endpoints(name);
    let puts = fill_until_nospace(&cluster);
    let lose = point.starts_with("lose-answer-");
    let actions = if lose { "1*return" } else { "return" };
    env.start_controller_with(&[("FAILPOINTS", &format!("{point}={actions}"))]);
    let t = Instant::now();
    if !lose {
        expect_crash(&mut env, point);
        env.start_controller();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while !put_accepted(&cluster) {
        assert!(
            Instant::now() < deadline,
            "{point}: writes still refused 120s after NOSPACE: {:#}",
            env.status(name)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    apply_and_wait(&env);
    let s = env.status(name);
    let alarms: Vec<&serde_json::Value> = s["machines"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["alarms"].as_array().unwrap())
        .collect();
    assert!(alarms.is_empty(), "{point}: alarms left: {s:#}");
    assert_keys(&cluster, "k/", &keys);
    assert_no_orphans(&env, name);
    if lose {
        let lost = env
            .store()
            .events_after(name, 0, 10_000)
            .unwrap()
            .into_iter()
            .any(|e| !e.ok && e.message.contains("lost by failpoint"));
        assert!(lost, "{point}: the answer was never lost");
    }
    format!(
        "{point}: NOSPACE after {puts} puts, writes accepted again {:.1}s after the controller started",
        t.elapsed().as_secs_f64()
    )
}

/// Creates 3 members at OLD with keys, records the upgrade with no controller running,
/// and starts a controller armed with `point`.
fn prepare(env: &mut Env, name: &str, point: &str, actions: &str) -> Vec<(String, String)> {
    env.start_controller();
    env.ok(&[
        "create",
        name,
        "--replicas",
        "3",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let keys = write_keys(&env.endpoints(name), "k/", 300);
    env.kill_controller();
    env.ok(&["upgrade", name, "--version", NEW]);
    env.start_controller_with(&[("FAILPOINTS", &format!("{point}={actions}"))]);
    keys
}

fn finish_and_check(env: &mut Env, name: &str, keys: &[(String, String)], watch: QuorumWatch) {
    env.ok(&[
        "upgrade",
        name,
        "--version",
        NEW,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let (samples, violations) = watch.finish();
    assert!(samples > 10, "the quorum watch took only {samples} samples");
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    let s = env.status(name);
    assert_eq!(machine_versions(&s), vec![NEW; 3]);
    assert_keys(&env.endpoints(name), "k/", keys);
    assert_no_orphans(env, name);
}

/// The rollout scenario for one failpoint; returns a line for the summary.
fn rollout_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "fp";
    let lose = point.starts_with("lose-answer-");
    let keys = prepare(
        &mut env,
        name,
        point,
        if lose { "1*return" } else { "return" },
    );
    let watch = QuorumWatch::start(&env, name);
    let t = Instant::now();
    if lose {
        // No crash: the controller sees a timeout for a change that took effect, and must
        // recognise it as done from its next observation.
        finish_and_check(&mut env, name, &keys, watch);
        let store = quorum_store::Store::open(&env.home).unwrap();
        let lost = store
            .events_after(name, 0, 10_000)
            .unwrap()
            .into_iter()
            .any(|e| !e.ok && e.message.contains("lost by failpoint"));
        assert!(lost, "{point}: the answer was never lost");
        return format!(
            "{point}: answer lost once, rollout completed in {:.1}s",
            t.elapsed().as_secs_f64()
        );
    }
    expect_crash(&mut env, point);
    let crashed_after = t.elapsed();
    env.start_controller();
    finish_and_check(&mut env, name, &keys, watch);
    format!(
        "{point}: crashed after {:.1}s, resumed and completed in {:.1}s",
        crashed_after.as_secs_f64(),
        (t.elapsed() - crashed_after).as_secs_f64()
    )
}

/// The in-place scenario: 3 members at OLD rolled out in place to NEW by a controller
/// that crashes at `point`; the next controller finishes with the same members on the
/// same data, every key intact, and no membership step taken.
fn in_place_scenario(point: &str) -> String {
    let failpoint = point.strip_prefix(IN_PLACE_PREFIX).unwrap_or(point);
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "ip";
    env.start_controller();
    inplace::create_in_place(&env, name, 3, OLD, "");
    let keys = write_keys(&env.endpoints(name), "k/", 300);
    let before = inplace::identity(&env, name);
    env.kill_controller();
    let from = inplace::last_event_id(&env, name);
    env.ok(&["upgrade", name, "--version", NEW]);
    env.start_controller_with(&[("FAILPOINTS", &format!("{failpoint}=return"))]);
    let watch = QuorumWatch::start(&env, name);
    let t = Instant::now();
    expect_crash(&mut env, point);
    let crashed_after = t.elapsed();
    env.start_controller();
    finish_and_check(&mut env, name, &keys, watch);
    assert_eq!(
        inplace::identity(&env, name),
        before,
        "{point}: the same members on the same data"
    );
    let events = inplace::events_after(&env, name, from);
    inplace::assert_no_membership_step(&events);
    // Every step ended (a crash right after a step loses its event, so the records say).
    let machines = env.store().machines(name).unwrap();
    assert!(
        machines.iter().all(|m| m.in_place.is_none()),
        "{point}: an in-place step left: {machines:?}"
    );
    format!(
        "{point}: crashed after {:.1}s, resumed and completed in place in {:.1}s",
        crashed_after.as_secs_f64(),
        (t.elapsed() - crashed_after).as_secs_f64()
    )
}

/// The rollback scenario: 3 members at OLD rolled out in place to a NEW that exits at
/// once; the controller crashes at `point` while it rolls the first member back. The
/// next controller finishes the rollback (every member back on OLD, the rollout
/// stopped), and once NEW is fixed `upgrade --retry` finishes the rollout, on the same
/// members and data throughout.
fn rollback_scenario(point: &str) -> String {
    let failpoint = point.strip_prefix(ROLLBACK_PREFIX).unwrap();
    let actions = ROLLBACK_POINTS
        .iter()
        .find(|(p, _)| *p == failpoint)
        .map(|(_, a)| *a)
        .unwrap();
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "rb";
    let bins = inplace::EtcdDir::new(env.dir.path());
    bins.install_real(OLD);
    bins.install_broken(NEW);
    env.start_controller_with(&[bins.var()]);
    let path = inplace::manifest(&env, name, 3, OLD, ROLLBACK_TIMEOUT);
    let path = path.to_str().unwrap();
    bins.ok(&env, &["apply", "-f", path, "--wait", "--timeout", TIMEOUT]);
    let keys = write_keys(&env.endpoints(name), "k/", 300);
    let before = inplace::identity(&env, name);
    env.kill_controller();
    bins.ok(&env, &["upgrade", name, "--version", NEW]);
    env.start_controller_with(&[
        bins.var(),
        ("FAILPOINTS", &format!("{failpoint}={actions}")),
    ]);
    let watch = QuorumWatch::start(&env, name);
    let t = Instant::now();
    expect_crash(&mut env, point);
    let crashed_after = t.elapsed();
    env.start_controller_with(&[bins.var()]);
    let s = env.wait_status(
        name,
        "the rollout stopped by a rollback",
        Duration::from_secs(120),
        |s| inplace::blocked(s).0,
    );
    let (_, message) = inplace::blocked(&s);
    assert!(
        message.contains(&format!("was rolled back to etcd {OLD}")),
        "{point}: {message}"
    );
    assert_eq!(machine_versions(&s), vec![OLD; 3], "{point}: {s:#}");
    assert_keys(&env.endpoints(name), "k/", &keys);
    let stopped_after = t.elapsed();
    bins.install_real(NEW);
    bins.ok(
        &env,
        &["upgrade", name, "--retry", "--wait", "--timeout", TIMEOUT],
    );
    let (samples, violations) = watch.finish();
    assert!(samples > 10, "the quorum watch took only {samples} samples");
    assert!(
        violations.is_empty(),
        "{point}: quorum lost: {violations:?}"
    );
    let s = env.status(name);
    assert_eq!(machine_versions(&s), vec![NEW; 3], "{point}: {s:#}");
    assert_keys(&env.endpoints(name), "k/", &keys);
    assert_no_orphans(&env, name);
    assert_eq!(
        inplace::identity(&env, name),
        before,
        "{point}: the same members on the same data"
    );
    format!(
        "{point}: crashed after {:.1}s, rolled back and stopped at {:.1}s, retried and completed in {:.1}s",
        crashed_after.as_secs_f64(),
        stopped_after.as_secs_f64(),
        (t.elapsed() - stopped_after).as_secs_f64()
    )
}

/// Waits for the controller armed at `point` to crash there, within 120 s.
/// A CA rotation's own steps (`quorum rotate-ca`).
fn is_ca_point(p: &str) -> bool {
    p.ends_with("set-ca-phase") || p.ends_with("finish-ca-rotation")
}

/// The CA rotation scenario: 3 members at NEW, in place, their CA rotated by a
/// controller that crashes at `point`; the next controller finishes the rotation on the
/// same members and data, with every key intact and quorum kept throughout.
fn ca_rotation_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "ca";
    env.start_controller();
    inplace::create_in_place(&env, name, 3, NEW, "");
    let keys = write_keys(&env.endpoints(name), "k/", 300);
    let before = inplace::identity(&env, name);
    env.kill_controller();
    let from = inplace::last_event_id(&env, name);
    env.ok(&["rotate-ca", name, "--yes"]);
    env.start_controller_with(&[("FAILPOINTS", &format!("{point}=return"))]);
    let watch = QuorumWatch::start(&env, name);
    let t = Instant::now();
    expect_crash(&mut env, point);
    let crashed_after = t.elapsed();
    env.start_controller();
    env.wait_status(
        name,
        "the rotation finished",
        Duration::from_secs(180),
        |s| s["converged"] == true && s.get("caRotation").is_none() && s["caGeneration"] == 1,
    );
    let (samples, violations) = watch.finish();
    assert!(samples > 10, "the quorum watch took only {samples} samples");
    assert!(
        violations.is_empty(),
        "{point}: quorum lost: {violations:?}"
    );
    assert_keys(&env.endpoints(name), "k/", &keys);
    assert_eq!(
        inplace::identity(&env, name),
        before,
        "{point}: the same members"
    );
    inplace::assert_no_membership_step(&inplace::events_after(&env, name, from));
    assert!(env
        .store()
        .next_certificate_authority(name)
        .unwrap()
        .is_none());
    format!(
        "{point}: crashed after {:.1}s, resumed and rotated in {:.1}s",
        crashed_after.as_secs_f64(),
        (t.elapsed() - crashed_after).as_secs_f64()
    )
}

/// A chained upgrade's own step (`quorum upgrade --version` two links away).
fn is_chain_point(p: &str) -> bool {
    p.ends_with("take-next-link")
}

/// The chain scenario: 3 members at 3.5.1 in place, upgraded to NEW through 3.5.16 (a
/// road of two links) by a controller that crashes at `point`, between the links. The
/// next controller takes the link it had not, or goes on from the one it had: every
/// member ends on NEW, the road through, the same members, every key intact and
/// quorum kept throughout, and the snapshot before the second link recorded.
fn chain_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "ch";
    env.start_controller();
    inplace::create_in_place(&env, name, 3, "3.5.1", "");
    let keys = write_keys(&env.endpoints(name), "k/", 300);
    let before = inplace::identity(&env, name);
    env.kill_controller();
    env.ok(&["upgrade", name, "--version", NEW, "--via", "3.5.16"]);
    env.start_controller_with(&[("FAILPOINTS", &format!("{point}=return"))]);
    let watch = QuorumWatch::start(&env, name);
    let t = Instant::now();
    expect_crash(&mut env, point);
    let crashed_after = t.elapsed();
    env.start_controller();
    env.wait_status(name, "the road's end", Duration::from_secs(240), |s| {
        s["converged"] == true && s.get("road").is_none() && machine_versions(s) == vec![NEW; 3]
    });
    let (samples, violations) = watch.finish();
    assert!(samples > 10, "the quorum watch took only {samples} samples");
    assert!(
        violations.is_empty(),
        "{point}: quorum lost: {violations:?}"
    );
    assert_keys(&env.endpoints(name), "k/", &keys);
    assert_eq!(
        inplace::identity(&env, name),
        before,
        "{point}: the same members"
    );
    let before_link = env.store().snapshots(name).unwrap().into_iter().any(|r| {
        r.reason == quorum_core::SnapshotReason::BeforeRollout
            && r.rollout_to == Some(NEW.parse().unwrap())
    });
    assert!(
        before_link,
        "{point}: no snapshot recorded before the link to {NEW}"
    );
    format!(
        "{point}: crashed after {:.1}s, resumed and took the road to its end in {:.1}s",
        crashed_after.as_secs_f64(),
        (t.elapsed() - crashed_after).as_secs_f64()
    )
}

fn expect_crash(env: &mut Env, point: &str) {
    let code = env.controller_exit(Duration::from_secs(120));
    assert_eq!(
        code,
        Some(CRASH_EXIT_CODE),
        "{point}: the controller did not crash there (never reached?)"
    );
}

/// The action kinds of a rebuild (`quorum restore`, `quorum recover`), and the point
/// inside a fence between moving the machine away and forgetting its record.
const REBUILD_KINDS: [&str; 5] = [
    "fence-machine",
    "set-rebuild-phase",
    "restore-snapshot",
    "force-new-cluster",
    "finish-rebuild",
];

fn is_rebuild_point(p: &str) -> bool {
    p == quorum_controller::failpoints::CRASH_AFTER_FENCE_FILES
        || REBUILD_KINDS.iter().any(|k| p.ends_with(k))
}

/// The names of `s`'s machines, and the pid of each that runs.
fn machines_of(s: &serde_json::Value) -> Vec<(String, Option<i32>)> {
    s["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["pid"].as_i64().map(|p| p as i32),
            )
        })
        .collect()
}

/// A rebuild crashed at `point`, then finished by the next controller: a recovery
/// from the survivor after two of three members died with their data (the points of
/// `force-new-cluster`), or a restore of a healthy 1-member cluster from a snapshot
/// (the rest: every restore step is there with one member, and it is quick). Either
/// ends with its members serving the keys it must, every old machine fenced, and never
/// a seed started beside an old member (no old process is left running).
fn rebuild_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    let name = "rb";
    let from_member = point.ends_with("force-new-cluster");
    let replicas: usize = if from_member { 3 } else { 1 };
    env.start_controller_with(&[("FAILPOINTS", &format!("{point}=return"))]);
    env.ok(&[
        "create",
        name,
        "--replicas",
        &replicas.to_string(),
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let keys = write_keys(&env.endpoints(name), "k/", 100);
    let provider =
        quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir());
    let old = machines_of(&env.status(name));
    let old_names: Vec<String> = old.iter().map(|(n, _)| n.clone()).collect();
    if from_member {
        // Two of three die with their data; the third (every key was acknowledged by
        // a majority, so wait for it to have applied them all) survives.
        let survivor = old_names[0].clone();
        env.wait_status(
            name,
            "every member at the same index",
            Duration::from_secs(30),
            |s| {
                let idx: Vec<_> = s["machines"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["raftIndex"].clone())
                    .collect();
                idx.windows(2).all(|w| w[0] == w[1])
            },
        );
        for (m, _) in old.iter().filter(|(m, _)| *m != survivor) {
            provider.kill(m).unwrap();
            std::fs::remove_dir_all(provider.data_dir(m)).unwrap();
        }
        env.wait_status(name, "no leader", Duration::from_secs(60), |s| {
            s["leader"].is_null()
        });
        env.ok(&["recover", name, "--from-member", &survivor, "--yes"]);
    } else {
        env.ok(&["snapshot", name]);
        write_keys(&env.endpoints(name), "after/", 20);
        env.ok(&["restore", name, "--from", "newest", "--yes"]);
    }
    let t = Instant::now();
    expect_crash(&mut env, point);
    let crashed_after = t.elapsed();
    env.start_controller();
    let s = env.wait_status(
        name,
        "the rebuild finished and its members serve",
        Duration::from_secs(180),
        |s| s["converged"] == true && s.get("rebuild").is_none(),
    );
    let now: Vec<String> = machines_of(&s).into_iter().map(|(n, _)| n).collect();
    assert_eq!(now.len(), replicas, "{s:#}");
    assert_keys(&env.endpoints(name), "k/", &keys);
    if !from_member {
        assert_keys(&env.endpoints(name), "after/", &[]);
    }
    // Every old machine but a survivor is fenced: no process, no directory.
    let kept = if from_member { 1 } else { 0 };
    let fenced: Vec<&String> = old_names.iter().filter(|n| !now.contains(n)).collect();
    assert_eq!(fenced.len(), replicas - kept, "{old_names:?} -> {now:?}");
    for (n, pid) in &old {
        if fenced.contains(&n) {
            assert!(!provider.machine_dir(n).exists(), "{n} not fenced");
            if let Some(pid) = pid {
                assert!(
                    !std::path::Path::new(&format!("/proc/{pid}")).exists()
                        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                            .is_ok_and(|st| st.contains(") Z")),
                    "the old member {n} (pid {pid}) still runs"
                );
            }
        }
    }
    assert_no_orphans(&env, name);
    format!(
        "{point}: {} crashed after {:.1}s, the next controller finished it in {:.1}s",
        if from_member { "recovery" } else { "restore" },
        crashed_after.as_secs_f64(),
        (t.elapsed() - crashed_after).as_secs_f64()
    )
}

/// The teardown scenario: `quorum delete` itself crashes; running it again finishes.
fn teardown_scenario(point: &str) -> String {
    let mut env = Env::new(&format!("crash-{point}"));
    env.start_controller();
    env.ok(&[
        "create",
        "td",
        "--replicas",
        "1",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    env.kill_controller();
    // With no live controller (its heartbeat gone stale), `delete` tears down itself.
    env.wait_controller_heartbeat_stale();
    let out = env
        .cmd(&["delete", "td", "--yes"])
        .env("FAILPOINTS", format!("{point}=return"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(CRASH_EXIT_CODE),
        "{point}: delete did not crash there"
    );
    if point == "crash-after-forget-control-plane" {
        // It crashed after forgetting the control plane: it is gone, and saying so is right.
        let e = env.fails(&["delete", "td", "--yes"]);
        assert!(e.contains("does not exist"), "{e}");
    } else {
        env.ok(&["delete", "td", "--yes", "--wait", "--timeout", "60s"]);
    }
    let list = env.ok(&["list"]);
    assert!(list.contains("No control planes"), "{list}");
    let provider =
        quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir());
    assert!(
        provider.list().is_empty(),
        "machines left: {:?}",
        provider.list()
    );
    format!("{point}: delete crashed, rerun completed")
}

#[test]
fn every_failpoint_crashes_and_the_next_controller_finishes() {
    let mut all = failpoints::all();
    assert!(all.len() >= 20, "failpoints: {all:?}");
    all.extend(in_place_extra_points());
    // `CRASH_POINTS=defragment,compact` runs only the points containing one of these
    // (for a run by hand; `in-place` runs the in-place rollout's, `rollback/` those of
    // its rollback); CI runs them all.
    let only = std::env::var("CRASH_POINTS").unwrap_or_default();
    let points: Vec<String> = all
        .into_iter()
        .filter(|p| only.is_empty() || only.split(',').any(|o| p.contains(o)))
        .collect();
    let queue = Arc::new(Mutex::new(points.clone()));
    let results = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..PARALLEL)
        .map(|_| {
            let (queue, results) = (queue.clone(), results.clone());
            std::thread::spawn(move || loop {
                let Some(point) = queue.lock().unwrap().pop() else {
                    return;
                };
                let p = point.clone();
                let r = std::panic::catch_unwind(move || {
                    if p.starts_with(ROLLBACK_PREFIX) {
                        rollback_scenario(&p)
                    } else if is_rebuild_point(&p) {
                        rebuild_scenario(&p)
                    } else if is_ca_point(&p) {
                        ca_rotation_scenario(&p)
                    } else if is_chain_point(&p) {
                        chain_scenario(&p)
                    } else if is_in_place_point(&p) {
                        in_place_scenario(&p)
                    } else if is_teardown_point(&p) {
                        teardown_scenario(&p)
                    } else if is_upkeep_point(&p) {
                        nospace_scenario(&p)
                    } else if is_snapshot_point(&p) {
                        snapshot_scenario(&p)
                    } else if is_fenced_point(&p) {
                        fenced_scenario(&p)
                    } else {
                        rollout_scenario(&p)
                    }
                });
                let line = r.map_err(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                });
                results.lock().unwrap().push((point, line));
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let results = results.lock().unwrap();
    let mut failed = Vec::new();
    for (point, r) in results.iter() {
        match r {
            Ok(line) => println!("ok   {line}"),
            Err(e) => {
                println!("FAIL {point}: {e}");
                failed.push(point.clone());
            }
        }
    }
    println!("{} failpoints, {} failed", results.len(), failed.len());
    assert_eq!(results.len(), points.len(), "every failpoint ran");
    assert!(failed.is_empty(), "failed: {failed:?}");
}

/// The origin bug report: the controller dies right after a member removal is
/// acknowledged, before anything else is recorded. The next controller must see the
/// removed member's machine as intended for deletion (not as an unhealthy member that
/// blocks everything) and continue.
#[test]
fn bug_report_crash_after_member_removal() {
    let mut env = Env::new("bug-report");
    let keys = prepare(&mut env, "br", "crash-after-remove-member", "return");
    let watch = QuorumWatch::start(&env, "br");
    assert_eq!(
        env.controller_exit(Duration::from_secs(120)),
        Some(CRASH_EXIT_CODE)
    );
    // No controller runs now. 4 machines, 3 members, and the removed one's machine is
    // marked for deletion: the next step is to stop or delete it, not to refuse.
    let s = env.status("br");
    let machines = s["machines"].as_array().unwrap();
    assert_eq!(machines.len(), 4, "{s:#}");
    let leaving: Vec<&serde_json::Value> =
        machines.iter().filter(|m| m["deleting"] == true).collect();
    assert_eq!(leaving.len(), 1, "{s:#}");
    assert_eq!(leaving[0]["role"], "none", "its member is gone: {s:#}");
    assert_eq!(
        s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == "Blocked")
            .unwrap()["status"],
        false
    );
    let next = s["nextActions"][0].as_str().unwrap();
    let gone = leaving[0]["name"].as_str().unwrap();
    assert!(
        next == format!("stop {gone}") || next == format!("delete {gone}"),
        "next: {next}\n{s:#}"
    );
    env.start_controller();
    finish_and_check(&mut env, "br", &keys, watch);
}
