//! Snapshots through the `quorum` binary on real members: `snapshot` and `snapshots`,
//! the snapshot an upgrade takes before it is recorded, and an upgrade that is not
//! recorded when no snapshot can be taken (the leader hung) unless `--no-snapshot`.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const TIMEOUT: &str = "180s";

fn snapshots(env: &Env, cp: &str) -> Vec<Value> {
    let out = env.ok(&["snapshots", cp, "-o", "json"]);
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn provider(env: &Env) -> quorum_provider::LocalProvider {
    quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir())
}

#[test]
fn snapshots_are_taken_on_demand_and_before_every_upgrade() {
    let mut env = Env::new("snap");
    env.start_controller();
    env.create_and_wait("s", 3, OLD);
    let out = env.ok(&["snapshots", "s"]);
    assert!(out.contains("no snapshots yet"), "{out}");
    let keys = write_keys(&env.endpoints("s"), "k/", 300);

    let out = env.ok(&["snapshot", "s"]);
    assert!(
        out.contains("s: snapshot s-") && out.contains("(leader, etcd 3.4.23)"),
        "{out}"
    );
    let list = snapshots(&env, "s");
    assert_eq!(list.len(), 1, "{list:?}");
    let first = &list[0];
    assert_eq!(first["reason"], "on-demand");
    assert!(
        out.contains("verified in") && out.contains("restored, served"),
        "{out}"
    );
    assert_eq!(first["verification"]["ok"], true, "{first}");
    assert!(
        first["verification"]["keys"].as_u64().unwrap() >= 300,
        "{first}"
    );
    assert!(
        first["facts"]["revision"].as_i64().unwrap() >= 300,
        "{first}"
    );
    let file = env
        .home
        .join("backups/s")
        .join(first["id"].as_str().unwrap());
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes.len() as u64, first["sizeBytes"].as_u64().unwrap());
    assert_eq!(quorum_backup::sha256_hex(&bytes), first["sha256"]);

    let out = env.ok(&[
        "upgrade",
        "s",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    assert!(
        out.contains("(leader, etcd 3.4.23)"),
        "the snapshot is said first:\n{out}"
    );
    let list = snapshots(&env, "s");
    assert_eq!(list.len(), 2, "{list:?}");
    let before = &list[1];
    assert_eq!(before["reason"], "before-rollout");
    assert_eq!(before["rolloutTo"], NEW);
    assert_eq!(before["specVersion"], OLD);
    assert_eq!(before["etcdVersion"], OLD, "taken before any member moved");
    assert!(
        before["facts"]["revision"].as_i64() >= first["facts"]["revision"].as_i64(),
        "{list:?}"
    );
    // Taken before the rollout's first step.
    let store = quorum_store::Store::open(&env.home).unwrap();
    let events = store.events_after("s", 0, 10_000).unwrap();
    let first_learner = events
        .iter()
        .find(|e| e.kind.to_string() == "add-learner")
        .expect("the rollout added learners");
    assert!(
        before["takenAtUnixS"].as_i64().unwrap() * 1000 <= first_learner.at_ms,
        "{before}\n{}",
        history(&events)
    );
    assert_keys(&env.endpoints("s"), "k/", &keys);
    let table = env.ok(&["snapshots", "s"]);
    assert!(
        table.contains(&format!("before-rollout to {NEW}")) && table.contains("on-demand"),
        "{table}"
    );
    // Taken before the rollout without a test restore; the controller restores the
    // newest once it has nothing else to do (`backup.verifyEvery`: never restored).
    let id = before["id"].as_str().unwrap().to_string();
    env.wait_status(
        "s",
        "the snapshot before the rollout restored",
        Duration::from_secs(60),
        |_| {
            let recs = env.store().snapshots("s").unwrap();
            recs.iter().any(|r| r.id == id && r.verified())
        },
    );
    let evs = env.store().events_after("s", 0, 10_000).unwrap();
    assert_eq!(
        ok_steps(&env, "s", "verify-snapshot"),
        1,
        "{}",
        history(&evs)
    );
    // Verified on demand again: the newest (the one before the rollout).
    let out = env.ok(&["snapshots", "s", "--verify", "newest"]);
    assert!(
        out.contains("verified in") && out.matches("yes, ").count() == 2,
        "{out}"
    );
    let e = env.fails(&["snapshots", "s", "--verify", "s-none.db"]);
    assert!(e.contains("has no snapshot \"s-none.db\""), "{e}");

    // A scale starts no rollout of versions: no snapshot.
    env.ok(&[
        "scale",
        "s",
        "--replicas",
        "1",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    assert_eq!(snapshots(&env, "s").len(), 2);
    // A deleted control plane's snapshots stay listed, as their files stay.
    env.ok(&["delete", "s", "--yes", "--wait", "--timeout", TIMEOUT]);
    assert_eq!(snapshots(&env, "s").len(), 2);
    assert!(file.exists());
    let e = env.fails(&["snapshots", "nope"]);
    assert!(e.contains("does not exist and has no snapshots"), "{e}");
}

/// The fault on etcd's side: the only member hangs (SIGSTOP). No snapshot can be
/// taken, so the upgrade is not recorded (even with --force) and nothing is left in
/// the backups; `--no-snapshot` records it, saying no snapshot was taken.
#[test]
fn an_upgrade_is_not_recorded_when_the_leader_cannot_give_a_snapshot() {
    let mut env = Env::new("snaphang");
    env.start_controller();
    env.create_and_wait("h", 1, OLD);
    let p = provider(&env);
    let machine = env.status("h")["machines"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    p.pause(&machine);
    struct Resume<'a>(&'a quorum_provider::LocalProvider, &'a str);
    impl Drop for Resume<'_> {
        fn drop(&mut self) {
            self.0.resume(self.1);
        }
    }
    let resume = Resume(&p, &machine);

    let e = env.fails(&["snapshot", "h"]);
    assert!(e.contains("no member answers as leader"), "{e}");
    let e = env.fails(&["upgrade", "h", "--version", NEW, "--force"]);
    assert!(
        e.contains("the change was not recorded") && e.contains("--no-snapshot"),
        "{e}"
    );
    assert_eq!(env.status("h")["spec"]["version"], OLD, "nothing recorded");
    let backups = env.home.join("backups/h");
    let left = std::fs::read_dir(&backups).map_or(0, |d| d.count());
    assert_eq!(left, 0, "no file left in {}", backups.display());

    let out = env.ok(&["upgrade", "h", "--version", NEW, "--force", "--no-snapshot"]);
    assert!(
        out.contains("no snapshot was taken before this rollout"),
        "{out}"
    );
    drop(resume);
    env.wait_status("h", "the rollout", Duration::from_secs(120), |s| {
        s["converged"] == true && machine_versions(s) == vec![NEW]
    });
    let e = env.ok(&["snapshots", "h"]);
    assert!(e.contains("no snapshots yet"), "{e}");
}

/// `spec.backup`: a snapshot every 2 s, retention keeping 2. The controller takes,
/// verifies and prunes them; while the only member hangs (the fault on etcd's side)
/// none is taken and nothing is lost; once it is back, they go on. Every file left has
/// a record and every record its file.
#[test]
fn scheduled_snapshots_are_taken_verified_pruned_and_wait_out_a_hung_member() {
    let mut env = Env::new("snapsched");
    let manifest = scheduled_backup_manifest(&env, "b", "*/2 * * * * *", 2);
    env.start_controller();
    env.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let files_and_records = |env: &Env| snapshot_records_and_files(env, "b");
    let taken = |env: &Env| {
        (
            ok_steps(env, "b", "take-snapshot"),
            ok_steps(env, "b", "prune-snapshot"),
        )
    };
    wait_until(
        "3 scheduled snapshots, one restored again, one pruned",
        Duration::from_secs(60),
        || {
            let (took, pruned) = taken(&env);
            took >= 3 && pruned >= 1 && ok_steps(&env, "b", "verify-snapshot") >= 1
        },
    );
    // Retention keeps 2 (and the newest verified). Pruning comes after a due snapshot
    // in the rule order, so on a loaded machine, where taking and test-restoring one
    // takes as long as the 2 s schedule, a few passes may go by before it catches up.
    wait_until(
        "retention keeps 2 (and the newest verified)",
        Duration::from_secs(30),
        || files_and_records(&env).0.len() <= 3,
    );
    let (recs, _, _) = files_and_records(&env);
    assert!(
        recs.iter()
            .all(|r| r.reason.as_str() == "scheduled" && r.verified()),
        "{recs:?}"
    );
    let m = env.metrics();
    assert!(
        m.contains("quorum_snapshot_verifications_total{control_plane=\"b\",outcome=\"ok\"}"),
        "{m}"
    );

    // The only member hangs: no snapshot can be taken; none is recorded.
    let p = provider(&env);
    let machine = env.status("b")["machines"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    p.pause(&machine);
    let (took_before, _) = taken(&env);
    wait_until(
        "a refused or failed attempt",
        Duration::from_secs(30),
        || {
            env.store()
                .events_after("b", 0, 10_000)
                .unwrap()
                .iter()
                .any(|e| e.kind.to_string() == "take-snapshot" && e.outcome.as_str() != "ok")
                || env.status("b")["converged"] == false
        },
    );
    assert!(
        taken(&env).0 <= took_before + 1,
        "none taken while it hangs"
    );
    p.resume(&machine);
    wait_until(
        "snapshots again once it is back",
        Duration::from_secs(60),
        || taken(&env).0 >= took_before + 2,
    );
    wait_until(
        "every file with its record",
        Duration::from_secs(30),
        || {
            let (_, ids, files) = files_and_records(&env);
            ids == files
        },
    );
    let table = env.ok(&["snapshots", "b"]);
    assert!(
        table.contains("scheduled") && table.contains("yes, "),
        "{table}"
    );
}

fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
