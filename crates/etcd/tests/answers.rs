//! etcd's real answers, collected: for each installed etcd version (3.4.23, 3.5.0,
//! 3.5.1) this starts real clusters, makes each answer quorum must understand happen,
//! and checks the core's one classifier (`quorum_core::classify`) against the real
//! (gRPC code, message) — the same messages `crates/core/tests/classify_table.rs` holds
//! verbatim and the simulator answers with. Run with `--nocapture` to print the table.
//!
//! Plain HTTP: etcd's answers do not depend on the transport (`tests/real_etcd.rs` and
//! the CLI's TLS tests cover TLS).

use etcd_client::{Client, ConnectOptions, GetOptions, MemberAddOptions};
use quorum_core::classify::*;
use quorum_core::{ClusterState, EtcdCall, InitialMember, Machine, Version};
use quorum_etcd::{Etcd, EtcdError};
use quorum_provider::{default_etcd_dir, LocalProvider, StartRequest};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a cluster may take to start and elect a leader on a loaded machine.
const START_LIMIT_MS: u64 = 30_000;
const POLL_MS: u64 = 50;
/// A client deadline longer than etcd's own request timeout (5 s + 2 election timeouts
/// = 7 s with the default 1 s election timeout), so that etcd's answer arrives first.
const PATIENT_CALL_MS: u64 = 15_000;
/// A client deadline for a call etcd holds until the client gives up.
const SHORT_CALL_MS: u64 = 2_000;
/// A member id that no cluster here has.
const UNKNOWN_MEMBER_ID: u64 = 0x0bad_cafe;

/// A loopback subnet of this test's own, 127.253.<b>.x: no other test in the workspace
/// uses 127.253, and a `b` whose addresses are taken is skipped.
fn subnet(hosts: u8) -> u8 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let mut seed = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(40_503));
    for _ in 0..256 {
        let b = (seed % 256) as u8;
        let free = (1..=hosts).all(|x| {
            [2379, 2380].iter().all(|&port| {
                TcpListener::bind(SocketAddr::from((Ipv4Addr::new(127, 253, b, x), port))).is_ok()
            })
        });
        if free {
            return b;
        }
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
    }
    panic!("no free loopback subnet 127.253.x.0/24");
}

/// Real etcd processes of one test, stopped (SIGKILL, by their verified pid) when it ends.
struct Machines {
    provider: LocalProvider,
    started: Vec<String>,
    b: u8,
    version: Version,
    _dir: tempfile::TempDir,
}

impl Drop for Machines {
    fn drop(&mut self) {
        for name in &self.started {
            let _ = self.provider.kill(name);
        }
    }
}

impl Machines {
    fn new(version: &str, hosts: u8) -> Machines {
        let dir = tempfile::tempdir().unwrap();
        Machines {
            provider: LocalProvider::new(dir.path(), default_etcd_dir()),
            started: vec![],
            b: subnet(hosts),
            version: version.parse().unwrap(),
            _dir: dir,
        }
    }

    fn machine(&self, x: u8) -> Machine {
        Machine {
            requested: None,
            ca_step: None,
            placement: None,
            name: format!("m{x}"),
            serial: u64::from(x),
            address: Ipv4Addr::new(127, 253, self.b, x),
            version: self.version,
            bootstrap: true,
            deleting: false,
            tls: false,
            certificates_not_after_unix_s: None,
            remediation: None,
            in_place: None,
        }
    }

    fn start(&mut self, x: u8, cluster: &[u8], state: ClusterState) {
        let initial: Vec<InitialMember> = cluster
            .iter()
            .map(|&y| InitialMember {
                name: self.machine(y).name,
                peer_url: self.machine(y).peer_url(),
            })
            .collect();
        let m = self.machine(x);
        self.provider
            .start(&StartRequest {
                machine: &m,
                cluster_token: "answers",
                state,
                initial_cluster: &initial,
                tls: None,
                quota_backend_bytes: None,
                expect_marker: None,
                force_new_cluster: false,
            })
            .unwrap();
        self.started.push(m.name);
    }

    fn kill(&self, x: u8) {
        self.provider.kill(&self.machine(x).name).unwrap();
    }
}

async fn client(url: &str, require_leader: bool, timeout_ms: u64) -> Client {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_millis(timeout_ms))
        .with_require_leader(require_leader);
    Client::connect([url], Some(opts)).await.unwrap()
}

/// The gRPC code and message of an answer (`Ok` and "" for success).
fn answer<T>(r: Result<T, etcd_client::Error>) -> (GrpcCode, String) {
    match r {
        Ok(_) => (GrpcCode::Ok, String::new()),
        Err(etcd_client::Error::GRpcStatus(s)) => {
            (GrpcCode::from_i32(s.code() as i32), s.message().to_string())
        }
        Err(e) => panic!("not an answer of etcd: {e}"),
    }
}

/// Checks one real answer: it is one of `expected` (none: success), and the core's
/// classifier gives it `verdict`. Prints it, for the table in the core's test.
fn check(
    version: &str,
    what: &str,
    call: EtcdCall,
    (code, message): (GrpcCode, String),
    expected: &[EtcdAnswer],
    verdict: Verdict,
) {
    println!("{version} | {what} | {code:?} | {message}");
    if expected.is_empty() {
        assert_eq!(code, GrpcCode::Ok, "{version}: {what}: {message}");
    } else {
        assert!(
            expected
                .iter()
                .any(|a| a.code == code && a.message == message),
            "{version}: {what}: answered {code:?} {message:?}, expected one of {expected:?}"
        );
    }
    assert_eq!(
        quorum_core::classify(call, code, &message),
        verdict,
        "{version}: {what}: {code:?} {message:?}"
    );
}

/// Waits until a write through `c` succeeds. etcd answers a membership change once it
/// applied it, but raft learns that a moment later, and drops a membership change
/// proposed in between (3.5 proposes even the changes it then refuses); the client
/// would wait until its deadline. A write committed after the change means raft knows.
async fn settle(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_millis(START_LIMIT_MS);
    while let Err(e) = c.put("settle", "", None).await {
        assert!(Instant::now() < deadline, "no write succeeds: {e}");
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Waits until some member of `urls` reports that it leads; returns its client URL and
/// member id.
async fn leader(etcd: &Etcd, urls: &[String]) -> (String, u64) {
    let deadline = Instant::now() + Duration::from_millis(START_LIMIT_MS);
    loop {
        for u in urls {
            if let Ok(st) = etcd.status(u).await {
                if st.leader_id != 0 && st.leader_id == st.member_id {
                    return (u.clone(), st.member_id);
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader among {urls:?}");
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Waits until the member at `url` says it has no leader.
async fn leaderless(etcd: &Etcd, url: &str) {
    let deadline = Instant::now() + Duration::from_millis(START_LIMIT_MS);
    loop {
        if etcd.status(url).await.is_ok_and(|st| st.leader_id == 0) {
            return;
        }
        assert!(Instant::now() < deadline, "{url} still has a leader");
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn learner_opts() -> Option<MemberAddOptions> {
    Some(MemberAddOptions::new().with_is_learner())
}

/// Cluster A: three voters of which only two ever start. The leader is never connected
/// to the third, so the strict reconfiguration check refuses every change for good;
/// then one of the two is killed and the other is left without a leader.
async fn without_a_quorum(version: &str, etcd: &Etcd) {
    use EtcdCall::*;
    use Verdict::*;
    let mut a = Machines::new(version, 3);
    a.start(1, &[1, 2, 3], ClusterState::New);
    a.start(2, &[1, 2, 3], ClusterState::New);
    let urls = [a.machine(1).client_url(), a.machine(2).client_url()];
    let (lead, _) = leader(etcd, &urls).await;
    let (follower, follower_x) = if lead == urls[0] {
        (urls[1].clone(), 2)
    } else {
        (urls[0].clone(), 1)
    };
    let follower_id = etcd.status(&follower).await.unwrap().member_id;
    let mut c = client(&lead, false, PATIENT_CALL_MS).await;
    let phantom = format!("http://127.253.{}.9:2380", a.b);
    let unhealthy = Refused(Refusal::Unhealthy);

    let r = c.member_add([phantom.clone()], learner_opts()).await;
    let what = "add learner, a voter never connected";
    check(
        version,
        what,
        AddLearner,
        answer(r),
        &[UNHEALTHY_CLUSTER],
        unhealthy,
    );
    let r = c.member_add([phantom.clone()], None).await;
    let what = "add voter, a voter never started";
    check(
        version,
        what,
        AddLearner,
        answer(r),
        &[UNHEALTHY_CLUSTER],
        unhealthy,
    );
    let r = c.member_remove(follower_id).await;
    let what = "remove a started voter, a voter never started";
    check(
        version,
        what,
        RemoveMember,
        answer(r),
        &[UNHEALTHY_CLUSTER],
        unhealthy,
    );
    let r = client(&follower, false, PATIENT_CALL_MS)
        .await
        .move_leader(follower_id)
        .await;
    let what = "move leader, asked of a follower";
    check(
        version,
        what,
        MoveLeader,
        answer(r),
        &[NOT_LEADER],
        Refused(Refusal::NotLeader),
    );
    let never_started = etcd
        .member_list(&lead)
        .await
        .unwrap()
        .iter()
        .find(|m| m.name == a.machine(3).name)
        .map(|m| m.id)
        .unwrap();
    let r = client(&lead, false, SHORT_CALL_MS)
        .await
        .move_leader(never_started)
        .await;
    // etcd waits for the transfer until the client gives up (its own deadline is the
    // client's, counted from a moment later).
    let what = "move leader to a voter never started";
    let timed_out = Refused(Refusal::TimedOut);
    check(
        version,
        what,
        MoveLeader,
        answer(r),
        &[CLIENT_DEADLINE],
        timed_out,
    );
    // The adapter says why, in the words events will carry.
    let e = etcd.add_learner(&lead, &phantom).await.unwrap_err();
    assert!(e.is_refusal(), "{version}: {e}");
    assert_eq!(e.reason(), Some(Refusal::Unhealthy.reason()), "{version}");

    a.kill(follower_x);
    leaderless(etcd, &lead).await;
    // Both take etcd's request timeout (7 s): at the same time.
    let mut c2 = client(&lead, false, PATIENT_CALL_MS).await;
    let (put, promote) = tokio::join!(c.put("k", "v", None), c2.member_promote(UNKNOWN_MEMBER_ID));
    let what = "put, no leader";
    check(
        version,
        what,
        Kv,
        answer(put),
        &[SERVER_DEADLINE],
        Refused(Refusal::TimedOut),
    );
    let what = "promote, no leader";
    check(
        version,
        what,
        Promote,
        answer(promote),
        &[NO_LEADER],
        Refused(Refusal::NoLeader),
    );
    let r = client(&lead, true, PATIENT_CALL_MS)
        .await
        .put("k", "v", None)
        .await;
    let what = "put, no leader, leader required";
    check(
        version,
        what,
        Kv,
        answer(r),
        &[NO_LEADER],
        Refused(Refusal::NoLeader),
    );
    let r = c.member_add([phantom.clone()], learner_opts()).await;
    let what = "add learner, no leader";
    check(
        version,
        what,
        AddLearner,
        answer(r),
        &[UNHEALTHY_CLUSTER],
        unhealthy,
    );
    let r = c.move_leader(follower_id).await;
    let what = "move leader, no leader";
    check(
        version,
        what,
        MoveLeader,
        answer(r),
        &[NOT_LEADER],
        Refused(Refusal::NotLeader),
    );
    // etcd holds the change until the deadline: whichever side gives up first answers.
    let r = client(&lead, false, SHORT_CALL_MS)
        .await
        .member_remove(UNKNOWN_MEMBER_ID)
        .await;
    let what = "remove an unknown member, no leader";
    let either = [CLIENT_DEADLINE, SERVER_DEADLINE];
    check(
        version,
        what,
        RemoveMember,
        answer(r),
        &either,
        Refused(Refusal::TimedOut),
    );
}

/// Cluster B: one voter (never refused by the strict check: it is connected to every
/// voter there is), then a learner that never starts, then one that runs.
async fn one_voter(version: &str, etcd: &Etcd) {
    use EtcdCall::*;
    use Verdict::*;
    let mut b = Machines::new(version, 2);
    b.start(1, &[1], ClusterState::New);
    let (s, s_id) = leader(etcd, &[b.machine(1).client_url()]).await;
    let mut c = client(&s, false, PATIENT_CALL_MS).await;
    let phantom = format!("http://127.253.{}.9:2380", b.b);
    let id_of = |r: etcd_client::MemberAddResponse| r.member().map(|m| m.id()).unwrap();

    // Early in a second, so that the same add again is most likely in the same second
    // (etcd derives the new id from the URLs and the second: the same id).
    while SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_millis())
        .unwrap_or(0)
        > 200
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent_s = unix_s();
    let added = id_of(
        c.member_add([phantom.clone()], learner_opts())
            .await
            .unwrap(),
    );
    settle(&mut c).await;
    let r = c.member_add([phantom.clone()], learner_opts()).await;
    let same_second = unix_s() == sent_s;
    let what = "add learner again, same second";
    let expected: &[EtcdAnswer] = if same_second {
        &[MEMBER_ID_EXISTS]
    } else {
        &[MEMBER_ID_EXISTS, PEER_URLS_EXIST]
    };
    check(version, what, AddLearner, answer(r), expected, AlreadyDone);
    settle(&mut c).await;
    let later = unix_s() + 1;
    while unix_s() < later {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    let r = c.member_add([phantom.clone()], learner_opts()).await;
    let what = "add learner again, a later second";
    check(
        version,
        what,
        AddLearner,
        answer(r),
        &[PEER_URLS_EXIST],
        AlreadyDone,
    );
    settle(&mut c).await;
    let other = format!("http://127.253.{}.8:2380", b.b);
    let r = c.member_add([other], learner_opts()).await;
    let what = "add a second learner";
    let refused = Refused(Refusal::TooManyLearners);
    check(
        version,
        what,
        AddLearner,
        answer(r),
        &[TOO_MANY_LEARNERS],
        refused,
    );
    settle(&mut c).await;
    let r = c.member_promote(added).await;
    let what = "promote a learner never started";
    let refused = Refused(Refusal::LearnerNotInSync);
    check(
        version,
        what,
        Promote,
        answer(r),
        &[LEARNER_NOT_IN_SYNC],
        refused,
    );
    settle(&mut c).await;
    let r = c.member_promote(s_id).await;
    check(
        version,
        "promote a voter",
        Promote,
        answer(r),
        &[NOT_A_LEARNER],
        AlreadyDone,
    );
    settle(&mut c).await;
    let r = c.member_promote(UNKNOWN_MEMBER_ID).await;
    let what = "promote an unknown member";
    check(
        version,
        what,
        Promote,
        answer(r),
        &[MEMBER_NOT_FOUND],
        Failed,
    );
    settle(&mut c).await;
    let r = c.move_leader(added).await;
    let what = "move leader to a learner";
    check(
        version,
        what,
        MoveLeader,
        answer(r),
        &[BAD_LEADER_TRANSFEREE],
        Failed,
    );
    let r = c.move_leader(UNKNOWN_MEMBER_ID).await;
    let what = "move leader to an unknown member";
    check(
        version,
        what,
        MoveLeader,
        answer(r),
        &[BAD_LEADER_TRANSFEREE],
        Failed,
    );
    let r = c.member_remove(UNKNOWN_MEMBER_ID).await;
    let what = "remove an unknown member";
    check(
        version,
        what,
        RemoveMember,
        answer(r),
        &[MEMBER_NOT_FOUND],
        AlreadyDone,
    );
    settle(&mut c).await;
    let r = c.member_remove(added).await;
    check(
        version,
        "remove a learner",
        RemoveMember,
        answer(r),
        &[],
        Done,
    );
    settle(&mut c).await;
    let r = c.member_remove(added).await;
    let what = "remove a learner again";
    check(
        version,
        what,
        RemoveMember,
        answer(r),
        &[MEMBER_NOT_FOUND],
        AlreadyDone,
    );
    settle(&mut c).await;

    // The adapter on the same answers: "already done" is success.
    let id = etcd.add_learner(&s, &phantom).await.unwrap();
    settle(&mut c).await;
    assert_eq!(
        etcd.add_learner(&s, &phantom).await.unwrap(),
        id,
        "{version}"
    );
    settle(&mut c).await;
    let e = etcd.promote(&s, id).await.unwrap_err();
    assert_eq!(
        e.reason(),
        Some(Refusal::LearnerNotInSync.reason()),
        "{version}: {e}"
    );
    settle(&mut c).await;
    etcd.promote(&s, s_id).await.unwrap();
    settle(&mut c).await;
    let e = etcd.move_leader(&s, id).await.unwrap_err();
    assert!(matches!(e, EtcdError::Failed { .. }), "{version}: {e}");
    etcd.remove(&s, id).await.unwrap();
    settle(&mut c).await;
    etcd.remove(&s, id).await.unwrap();
    settle(&mut c).await;

    // A learner that runs.
    let l = b.machine(2);
    let joined = id_of(c.member_add([l.peer_url()], learner_opts()).await.unwrap());
    settle(&mut c).await;
    b.start(2, &[1, 2], ClusterState::Existing);
    let l_url = l.client_url();
    let deadline = Instant::now() + Duration::from_millis(START_LIMIT_MS);
    while etcd.status(&l_url).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "{version}: the learner never answered"
        );
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    let mut lc = client(&l_url, false, PATIENT_CALL_MS).await;
    let learner = Refused(Refusal::Learner);
    let r = lc.put("k", "v", None).await;
    let what = "put to a learner";
    check(
        version,
        what,
        Kv,
        answer(r),
        &[NOT_SUPPORTED_FOR_LEARNER],
        learner,
    );
    let r = lc.get("k", None).await;
    let what = "linearizable get to a learner";
    check(
        version,
        what,
        Kv,
        answer(r),
        &[NOT_SUPPORTED_FOR_LEARNER],
        learner,
    );
    let r = lc
        .get("k", Some(GetOptions::new().with_serializable()))
        .await;
    check(
        version,
        "serializable get to a learner",
        Kv,
        answer(r),
        &[],
        Done,
    );
    let r = c.move_leader(joined).await;
    let what = "move leader to a running learner";
    check(
        version,
        what,
        MoveLeader,
        answer(r),
        &[BAD_LEADER_TRANSFEREE],
        Failed,
    );
    // Refused until it caught up, then promoted.
    let deadline = Instant::now() + Duration::from_millis(START_LIMIT_MS);
    loop {
        let (code, message) = answer(c.member_promote(joined).await);
        settle(&mut c).await;
        if code == GrpcCode::Ok {
            check(
                version,
                "promote a learner in sync",
                Promote,
                (code, message),
                &[],
                Done,
            );
            break;
        }
        let what = "promote a learner catching up";
        let refused = Refused(Refusal::LearnerNotInSync);
        check(
            version,
            what,
            Promote,
            (code, message),
            &[LEARNER_NOT_IN_SYNC],
            refused,
        );
        assert!(Instant::now() < deadline, "{version}: never in sync");
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

async fn answers_of(version: &str) {
    let etcd = Etcd::default();
    tokio::join!(without_a_quorum(version, &etcd), one_voter(version, &etcd));
}

#[tokio::test]
async fn etcd_3_4_23() {
    answers_of("3.4.23").await;
}

#[tokio::test]
async fn etcd_3_5_0() {
    answers_of("3.5.0").await;
}

#[tokio::test]
async fn etcd_3_5_1() {
    answers_of("3.5.1").await;
}
