//! Restore and recovery through the `quorum` binary on real members (3 at etcd 3.4.23,
//! TLS; the restore from a snapshot at the current 3.5), with an independent client
//! that records every acknowledged write:
//! - `restore --from`: every key up to the snapshot's revision present, none after, a
//!   new cluster ID, the old members fenced, revisions moved on so that a watcher of
//!   the old cluster is told "compacted";
//! - two of three members killed and their data wiped: `QuorumLost` names the survivor
//!   and the snapshot, `recover --from-member` keeps every write the survivor applied,
//!   `recover --from-snapshot` every write up to the snapshot;
//! - the old members' etcd, started again with its own flags, cannot come back;
//! - snapshots kept in an S3-compatible store (moto's server, started and stopped by
//!   PID): taken there, restored from there, and no rollout while it is unreachable
//!   unless `--no-snapshot`.
//!
//! Each prints its time to recover (RTO) and the acknowledged writes lost (RPO).

mod common;
#[path = "repair/support.rs"]
mod support;

use common::*;
use quorum_core::ActionKind;
use quorum_store::EventKind;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const TIMEOUT: &str = "240s";
/// How long a cluster that lost its majority may take to show `QuorumLost`: past
/// unhealthyAfter, and a controller pass or two.
const QUORUM_LOST_WITHIN: Duration = Duration::from_secs(UNHEALTHY_AFTER_S + 60);

fn create(env: &mut Env, cp: &str) {
    create_at(env, cp, OLD);
}

fn create_at(env: &mut Env, cp: &str, version: &str) {
    env.start_controller();
    apply(env, cp, version, &remediation(""), &CREATE_FLAGS);
}

/// The cluster ID the published endpoints answer with.
fn cluster_id(env: &Env, cp: &str) -> u64 {
    let cluster = env.endpoints(cp);
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        let r = c.get("probe", None).await.expect("get");
        r.header().expect("header").cluster_id()
    })
}

/// Every key under `prefix` that the member at `client_url` holds, read from it alone
/// (serializable: no quorum needed).
fn read_member(env: &Env, cp: &str, client_url: &str, prefix: &str) -> HashMap<String, String> {
    let cluster = Cluster {
        endpoints: vec![client_url.to_string()],
        tls: env.client_tls(cp),
    };
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        let opts = etcd_client::GetOptions::new()
            .with_prefix()
            .with_serializable();
        let r = tokio::time::timeout(Duration::from_secs(10), c.get(prefix, Some(opts)))
            .await
            .expect("serializable read timed out")
            .expect("serializable read");
        r.kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )
            })
            .collect()
    })
}

/// Kills `victims` and removes their data, as hosts that die with their disks.
fn lose_with_data(env: &Env, s: &Value, victims: &[String]) -> Vec<Vec<String>> {
    let mut argvs = Vec::new();
    for v in victims {
        let pid = pid_of(s, v);
        argvs.push(cmdline(pid));
        disk_loss(env, v, pid);
    }
    argvs
}

/// Starts each old member's etcd again with its own command line and requires that it
/// does not come back: it exits (its keys and data were moved away by the fence), or,
/// should it run, the control plane's membership does not name it. Stops what it
/// started, by PID.
fn old_members_cannot_come_back(env: &Env, cp: &str, argvs: &[Vec<String>]) {
    let members_before = member_ids(env, cp);
    for argv in argvs {
        let (bin, args) = argv.split_first().expect("a command line");
        let mut child = Command::new(bin)
            .args(args.iter().filter(|a| !a.is_empty()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the old member's etcd");
        let deadline = Instant::now() + Duration::from_secs(20);
        let exited = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if exited.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(
            exited.is_some_and(|st| !st.success()),
            "the old member {} started again with its own flags and kept running",
            args.iter().find(|a| a.starts_with("--name=")).unwrap()
        );
    }
    assert_eq!(
        member_ids(env, cp),
        members_before,
        "the membership changed"
    );
}

fn member_ids(env: &Env, cp: &str) -> Vec<u64> {
    let cluster = env.endpoints(cp);
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        let mut ids: Vec<u64> = c
            .member_list()
            .await
            .expect("member list")
            .members()
            .iter()
            .map(|m| m.id())
            .collect();
        ids.sort();
        ids
    })
}

fn fenced(env: &Env) -> usize {
    std::fs::read_dir(env.home.join("fenced")).map_or(0, |d| d.count())
}

fn newest_snapshot(env: &Env, cp: &str) -> (String, i64) {
    let out = env.ok(&["snapshots", cp, "-o", "json"]);
    let list: Value = serde_json::from_str(&out).unwrap();
    let last = list.as_array().unwrap().last().expect("a snapshot").clone();
    (
        last["id"].as_str().unwrap().to_string(),
        last["facts"]["revision"].as_i64().unwrap(),
    )
}

/// The message of `QuorumLost`, while it holds (it is shown only then).
fn quorum_lost(s: &Value) -> Option<String> {
    s["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["kind"] == "QuorumLost" && c["status"] == true)
        .map(|c| c["message"].as_str().unwrap_or_default().to_string())
}

/// The revision a watch of `cp` from `start` is told was compacted (0: not told
/// within 10 s).
fn compaction_seen(env: &Env, cp: &str, start: i64) -> i64 {
    let cluster = env.endpoints(cp);
    rt().block_on(async {
        let mut c = cluster.connect().await.expect("connect");
        let opts = etcd_client::WatchOptions::new()
            .with_prefix()
            .with_start_revision(start);
        let mut stream = c.watch("", Some(opts)).await.expect("watch");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while let Ok(Ok(Some(resp))) = tokio::time::timeout_at(deadline, stream.message()).await {
            if resp.compact_revision() > 0 {
                return resp.compact_revision();
            }
        }
        0
    })
}

/// `quorum restore CP --from ID --yes --wait`.
fn restore_args<'a>(cp: &'a str, id: &'a str) -> [&'a str; 8] {
    [
        "restore",
        cp,
        "--from",
        id,
        "--yes",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]
}

/// Waits for `QuorumLost` and returns its message.
fn wait_quorum_lost(env: &Env, cp: &str) -> String {
    let s = env.wait_status(cp, "QuorumLost", QUORUM_LOST_WITHIN, |s| {
        quorum_lost(s).is_some()
    });
    quorum_lost(&s).unwrap_or_default()
}

#[test]
fn restore_from_a_snapshot_keeps_every_write_up_to_it_and_none_after() {
    let mut env = Env::new("restore");
    let cp = "rs";
    // The current 3.5 (its etcdutl moves revisions on: watchers are told to re-list).
    create_at(&mut env, cp, NEW);
    let before = write_keys(&env.endpoints(cp), "k/", 200);
    env.ok(&["snapshot", cp]);
    let (id, revision) = newest_snapshot(&env, cp);
    let after = write_keys(&env.endpoints(cp), "after/", 50);
    let old_cluster = cluster_id(&env, cp);
    let old_names = names(&env.status(cp));

    // Without a terminal and without --yes, nothing happens.
    let out = env.fails(&["restore", cp, "--from", &id]);
    assert!(out.contains("not confirmed"), "{out}");
    assert!(env.status(cp).get("rebuild").is_none());
    assert_eq!(fenced(&env), 0);

    let t = Instant::now();
    let out = env.ok(&restore_args(cp, &id));
    let rto = t.elapsed();
    assert!(
        out.contains(&format!(
            "what is lost: every write after revision {revision}"
        )) && out.contains("50 revisions")
            && out.contains("fresh cluster token"),
        "{out}"
    );
    // etcdutl 3.5.30 (the members' own) moves revisions on, and says so.
    assert!(out.contains("revisions move on by 1000000000"), "{out}");
    let s = env.status(cp);
    assert!(s.get("rebuild").is_none(), "{s:#}");
    assert_eq!(names(&s).len(), 3);
    assert!(
        names(&s).iter().all(|n| !old_names.contains(n)),
        "old machines left: {s:#}"
    );
    assert_keys(&env.endpoints(cp), "k/", &before);
    assert_keys(&env.endpoints(cp), "after/", &[]);
    assert_ne!(cluster_id(&env, cp), old_cluster, "a new cluster ID");
    assert_eq!(fenced(&env), 3);
    // A watcher of the old cluster that saw every write resumes after the last one:
    // it is told its revision was compacted (and re-lists), instead of waiting for
    // revisions the new cluster would reach with other writes.
    let resumed_at = revision + after.len() as i64 + 1;
    let compacted = compaction_seen(&env, cp, resumed_at);
    assert!(
        compacted > resumed_at + 1_000_000_000 - 100,
        "a watch from {resumed_at} was told compacted at {compacted}"
    );
    for kind in ["fence-machine", "restore-snapshot", "finish-rebuild"] {
        assert!(ok_steps(&env, cp, kind) >= 1, "no {kind} in the history");
    }
    // Each step's machine field names a machine (issue 29: a fence's and a restore's
    // whole message stood there), and its message says what happened.
    let events = env.store().events_after(cp, 0, 100_000).unwrap();
    for e in events.iter().filter(|e| e.ok) {
        if let Some(m) = &e.machine {
            let serial = m.strip_prefix(&format!("{cp}-")).unwrap_or_default();
            assert!(
                serial.parse::<u64>().is_ok(),
                "{:?} names no machine: {e:?}",
                m
            );
        }
    }
    let lost = learners_started_again(&events);
    println!(
        "restore of 3 members from {id}: {:.1}s until 3 members served again (RTO); {} writes after revision {revision} lost by choice, {} kept; {lost} of 2 learners lost their publish and were started again",
        rto.as_secs_f64(),
        after.len(),
        before.len()
    );
}

/// Fault 10 of issue 29: a learner whose own publish was lost (it came back inside the
/// leader's snapshot, `quorum_core::publish`) is stopped once, says why, is started
/// again as a planned restart, and then serves (it is promoted). Whether etcd loses a
/// publish is a race (seen for 3 of 4 learners after a restore here); each time it
/// does, this is what must follow. Returns how many were.
fn learners_started_again(events: &[quorum_store::Event]) -> usize {
    let of = |kind: ActionKind, m: &str| {
        events
            .iter()
            .filter(|e| {
                e.ok && e.kind == EventKind::Action(kind) && e.machine.as_deref() == Some(m)
            })
            .map(|e| (e.id, e.message.as_str()))
            .collect::<Vec<_>>()
    };
    let stopped: Vec<&quorum_store::Event> = events
        .iter()
        .filter(|e| {
            e.ok && e.kind == EventKind::Action(ActionKind::StopMachine)
                && e.message
                    .contains("publish came back inside the leader's snapshot")
        })
        .collect();
    for e in &stopped {
        let m = e.machine.as_deref().expect("a stop names its machine");
        let stops = of(ActionKind::StopMachine, m);
        assert_eq!(stops.len(), 1, "{m} stopped more than once: {stops:?}");
        let starts = of(ActionKind::StartMachine, m);
        assert!(
            starts
                .iter()
                .any(|(id, msg)| *id > e.id && msg.contains("a planned restart")),
            "{m} not started again after its stop: {starts:?}"
        );
        let promoted = of(ActionKind::Promote, m);
        assert!(
            promoted.iter().any(|(id, _)| *id > e.id),
            "{m} never served after its restart: {events:#?}"
        );
    }
    stopped.len()
}

#[test]
fn recovery_from_the_survivor_keeps_every_write_it_applied() {
    let mut env = Env::new("recover-member");
    let cp = "rm";
    create(&mut env, cp);
    write_keys(&env.endpoints(cp), "k/", 100);
    let work = Workload::start(&env, cp, "w/", None);
    work.wait_more_acked(100, Duration::from_secs(60));
    let s = env.status(cp);
    let survivor = follower(&s);
    let victims: Vec<String> = names(&s).into_iter().filter(|n| n != &survivor).collect();
    let argvs = lose_with_data(&env, &s, &victims);
    let lost_at = Instant::now();

    let message = wait_quorum_lost(&env, cp);
    let tally = work.stop();
    assert!(
        message.contains(&format!("quorum recover {cp} --from-member {survivor}")),
        "{message}"
    );
    // What the survivor applied, read from it alone before the recovery.
    let url = row(&env.status(cp), &survivor).unwrap()["address"]
        .as_str()
        .map(|a| format!("https://{a}:2379"))
        .unwrap();
    let applied = read_member(&env, cp, &url, "w/");

    // Refused from a member that is not one, and refused while a leader answers is
    // covered by the plan's own check; a victim has no data left.
    let out = env.fails(&["recover", cp, "--from-member", &victims[0], "--yes"]);
    assert!(out.contains("no data left"), "{out}");

    let t = Instant::now();
    env.ok(&[
        "recover",
        cp,
        "--from-member",
        &survivor,
        "--yes",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let rto = t.elapsed();
    let s = env.status(cp);
    assert_eq!(names(&s).len(), 3, "{s:#}");
    assert!(names(&s).contains(&survivor));
    let stored = read_prefix(&env.endpoints(cp), "w/");
    let missing_applied = applied
        .iter()
        .filter(|(k, v)| stored.get(*k) != Some(v))
        .count();
    assert_eq!(missing_applied, 0, "writes the survivor applied were lost");
    let rpo = tally
        .acked
        .iter()
        .filter(|(k, v)| stored.get(k) != Some(v))
        .count();
    assert_eq!(fenced(&env), 2);
    old_members_cannot_come_back(&env, cp, &argvs);
    println!(
        "recovery of 3 members from the survivor {survivor}: {:.1}s from `recover` to 3 members serving (RTO), {:.1}s from the loss; {rpo} of {} acknowledged writes lost (RPO); {} applied by the survivor, all kept",
        rto.as_secs_f64(),
        lost_at.elapsed().as_secs_f64(),
        tally.acked.len(),
        applied.len()
    );
}

#[test]
fn recovery_from_a_snapshot_after_the_majority_is_lost() {
    let mut env = Env::new("recover-snap");
    let cp = "rn";
    create(&mut env, cp);
    let before = write_keys(&env.endpoints(cp), "k/", 100);
    env.ok(&["snapshot", cp]);
    let (id, revision) = newest_snapshot(&env, cp);
    let work = Workload::start(&env, cp, "w/", None);
    work.wait_more_acked(50, Duration::from_secs(60));
    let s = env.status(cp);
    let survivor = follower(&s);
    let victims: Vec<String> = names(&s).into_iter().filter(|n| n != &survivor).collect();
    let argvs = lose_with_data(&env, &s, &victims);

    let message = wait_quorum_lost(&env, cp);
    let tally = work.stop();
    assert!(
        message.contains(&format!("quorum recover {cp} --from-snapshot {id}"))
            && message.contains(&format!("loses every write after revision {revision}")),
        "{message}"
    );
    let t = Instant::now();
    env.ok(&[
        "recover",
        cp,
        "--from-snapshot",
        "newest",
        "--yes",
        "--wait",
        "--timeout",
        TIMEOUT,
    ]);
    let rto = t.elapsed();
    assert_eq!(names(&env.status(cp)).len(), 3);
    assert_keys(&env.endpoints(cp), "k/", &before);
    // Every write after the snapshot is gone: none of the workload's.
    let stored = read_prefix(&env.endpoints(cp), "w/");
    assert!(
        stored.is_empty(),
        "{} writes after the snapshot",
        stored.len()
    );
    assert_eq!(fenced(&env), 3, "the survivor is fenced too");
    old_members_cannot_come_back(&env, cp, &argvs);
    println!(
        "recovery of 3 members from snapshot {id}: {:.1}s (RTO); {} of {} acknowledged writes lost, all after revision {revision} (RPO)",
        rto.as_secs_f64(),
        tally.acked.len(),
        tally.acked.len()
    );
}

// ---------------------------------------------------------------- an S3-compatible store

/// moto's S3-compatible server on this test's own loopback address, stopped by PID.
struct Moto {
    child: Child,
    addr: String,
}

/// Where scripts/install.sh put moto (`QUORUM_MOTO_DIR`, else the XDG data directory).
fn moto_server() -> std::path::PathBuf {
    let dir = std::env::var_os("QUORUM_MOTO_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let data = std::env::var_os("XDG_DATA_HOME")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".local/share")
                });
            data.join("quorum/moto")
        });
    dir.join("bin/moto_server")
}

impl Moto {
    fn start(env: &Env) -> Moto {
        let host = format!("127.{}.250", env.subnet());
        let log = std::fs::File::create(env.dir.path().join("moto.log")).unwrap();
        let child = Command::new(moto_server())
            .args(["-H", &host, "-p", "5000"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("moto_server (scripts/install.sh installs it)");
        let m = Moto {
            child,
            addr: format!("{host}:5000"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&m.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto never listened on {}",
                m.addr
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    /// Creates a bucket (moto checks no signature).
    fn create_bucket(&self, name: &str) {
        let mut s = std::net::TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "PUT /{name} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// What every quorum process needs to reach it.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://{}", self.addr)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_DEFAULT_REGION", "us-east-1".into()),
        ]
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run_with(env: &Env, vars: &[(&'static str, String)], args: &[&str]) -> std::process::Output {
    let mut c = env.cmd(args);
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().expect("run quorum")
}

fn ok_with(env: &Env, vars: &[(&'static str, String)], args: &[&str]) -> String {
    let out = run_with(env, vars, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "quorum {args:?} failed:\n{text}");
    text
}

#[test]
fn snapshots_kept_in_s3_restore_every_key_up_to_them_and_gate_rollouts() {
    let mut env = Env::new("restore-s3");
    let cp = "s3";
    let mut moto = Moto::start(&env);
    moto.create_bucket("quorum-snapshots");
    let vars = moto.env();
    let vars_ref: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.start_controller_with(&vars_ref);
    let store = "backup:\n  schedule: \"off\"\n  store: s3://quorum-snapshots/prod";
    apply(&env, cp, OLD, store, &CREATE_FLAGS);
    let before = write_keys(&env.endpoints(cp), "k/", 100);

    let out = ok_with(&env, &vars, &["snapshot", cp]);
    assert!(out.contains("verified"), "{out}");
    let list: Value =
        serde_json::from_str(&ok_with(&env, &vars, &["snapshots", cp, "-o", "json"])).unwrap();
    let rec = list.as_array().unwrap().last().unwrap().clone();
    assert_eq!(rec["location"], "s3://quorum-snapshots/prod/s3", "{rec}");
    let (id, revision) = (
        rec["id"].as_str().unwrap().to_string(),
        rec["facts"]["revision"].as_i64().unwrap(),
    );
    let table = ok_with(&env, &vars, &["snapshots", cp]);
    assert!(
        table.contains("kept in s3://quorum-snapshots/prod/s3"),
        "{table}"
    );
    // Kept in the bucket only: no local copy left.
    let local = snapshot_records_and_files(&env, cp).2;
    assert!(local.is_empty(), "local copies: {local:?}");
    let after = write_keys(&env.endpoints(cp), "after/", 30);

    let t = Instant::now();
    let out = ok_with(&env, &vars, &restore_args(cp, &id));
    assert!(
        out.contains(&format!("every write after revision {revision}")),
        "{out}"
    );
    assert_keys(&env.endpoints(cp), "k/", &before);
    assert_keys(&env.endpoints(cp), "after/", &[]);
    println!(
        "restore of 3 members from {id} in S3 (moto): {:.1}s (RTO); {} writes after revision {revision} lost by choice",
        t.elapsed().as_secs_f64(),
        after.len()
    );

    // The store unreachable: no rollout without its snapshot, unless --no-snapshot.
    moto.stop();
    let out = run_with(&env, &vars, &["upgrade", cp, "--version", NEW]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("quorum-snapshots"),
        "{text}"
    );
    assert_eq!(env.status(cp)["spec"]["version"], OLD, "nothing recorded");
    // Issue 29 fault 16: a snapshot the store did not keep is never said taken, and
    // leaves no local file without a record.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!said.contains(" taken from "), "{said}");
    let (_, ids, files) = snapshot_records_and_files(&env, cp);
    assert!(
        files.iter().all(|f| ids.contains(f)),
        "unrecorded: {files:?} (records {ids:?})"
    );
    let out = ok_with(
        &env,
        &vars,
        &["upgrade", cp, "--version", NEW, "--no-snapshot"],
    );
    assert!(
        out.contains("without a snapshot") || out.contains("no snapshot"),
        "{out}"
    );
    assert_eq!(env.status(cp)["spec"]["version"], NEW);
}

/// `spec.backup.s3` (issue 29: a backup store per control plane, checked at `apply`):
/// with no `AWS_*` variable anywhere, neither in the controller's environment nor the
/// commands', the control plane reaches its own bucket through its own endpoint and
/// credentials file: a snapshot is kept there and a restore reads it back. `apply`
/// refuses a credentials file others can read, and a missing one, naming it.
#[test]
fn a_control_plane_reaches_its_own_bucket_with_its_own_credentials() {
    use std::os::unix::fs::PermissionsExt;
    let mut env = Env::new("restore-s3-own");
    let cp = "own";
    let moto = Moto::start(&env);
    moto.create_bucket("own-snapshots");
    env.start_controller();
    let creds = env.dir.path().join("s3.env");
    std::fs::write(
        &creds,
        "AWS_ACCESS_KEY_ID=test\nAWS_SECRET_ACCESS_KEY=test\n",
    )
    .unwrap();
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o644)).unwrap();
    let manifest = |file: &std::path::Path| {
        let path = env.dir.path().join("own.yaml");
        let text = format!(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata:\n  name: {cp}\nspec:\n  replicas: 1\n  version: {NEW}\n  backup:\n    schedule: \"off\"\n    store: s3://own-snapshots/p\n    s3:\n      endpoint: http://{}\n      allowHttp: true\n      region: us-east-1\n      credentials:\n        file: {}\n",
            moto.addr,
            file.display()
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let path = manifest(&creds);
    let apply = |p: &std::path::Path| {
        let p = p.to_str().unwrap().to_string();
        env.run(&["apply", "-f", &p, "--wait", "--timeout", TIMEOUT])
    };
    let e = apply(&path);
    assert!(!e.status.success());
    let text = String::from_utf8_lossy(&e.stderr);
    assert!(text.contains("can be read by others (mode 644)"), "{text}");
    let missing = manifest(&env.dir.path().join("nowhere.env"));
    let text = String::from_utf8_lossy(&apply(&missing).stderr).to_string();
    assert!(text.contains("nowhere.env"), "{text}");
    assert!(
        env.store().control_plane(cp).unwrap().is_none(),
        "nothing recorded"
    );

    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = manifest(&creds);
    let out = apply(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = write_keys(&env.endpoints(cp), "k/", 20);
    let out = env.ok(&["snapshot", cp]);
    assert!(out.contains("verified"), "{out}");
    let recs = env.store().snapshots(cp).unwrap();
    let rec = recs.last().unwrap();
    assert_eq!(rec.location, "s3://own-snapshots/p/own");
    assert!(
        snapshot_records_and_files(&env, cp).2.is_empty(),
        "kept in the bucket only"
    );
    write_keys(&env.endpoints(cp), "after/", 5);
    env.ok(&restore_args(cp, &rec.id));
    assert_keys(&env.endpoints(cp), "k/", &before);
    assert_keys(&env.endpoints(cp), "after/", &[]);
}
