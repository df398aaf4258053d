//! The etcd store when members of the management etcd fail, on a real 3-member cluster:
//! a dead or stopped member costs at most one attempt, a majority gone is said plainly,
//! the leader's lease outlives an election of the management etcd, and a write whose
//! answer was lost is read back, never done twice.

use super::*;
use quorum_provider::management::ManagementEtcd;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::Ipv4Addr;
use std::sync::atomic::AtomicU32;

/// Test hook: the next `before` transactions fail before they are sent, the next `after`
/// lose their answer after etcd applied them (both as a broken connection would).
#[derive(Default)]
pub(super) struct LoseAnswers {
    before: AtomicU32,
    after: AtomicU32,
}

impl LoseAnswers {
    fn take(n: &AtomicU32) -> bool {
        n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
            .is_ok()
    }

    fn lost() -> etcd_client::Error {
        etcd_client::Error::IoError(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset (test: answer lost)",
        ))
    }

    pub fn before_send(&self) -> Result<(), etcd_client::Error> {
        if Self::take(&self.before) {
            return Err(Self::lost());
        }
        Ok(())
    }

    pub fn after_apply(&self) -> Result<(), etcd_client::Error> {
        if Self::take(&self.after) {
            return Err(Self::lost());
        }
        Ok(())
    }
}

const VERSION: &str = "3.5.1";

/// A management etcd on addresses of the test's own: `127.A.B.252..254`.
fn management(test: &str, dir: &std::path::Path) -> ManagementEtcd {
    let mut h = DefaultHasher::new();
    (test, std::process::id(), "store-unit").hash(&mut h);
    let x = h.finish();
    let (a, b) = (20 + (x % 200) as u8, ((x >> 8) % 200) as u8);
    let addrs: Vec<Ipv4Addr> = (252..=254).map(|d| Ipv4Addr::new(127, a, b, d)).collect();
    ManagementEtcd::start(
        &dir.join("mgmt"),
        &quorum_provider::default_etcd_dir(),
        VERSION.parse().unwrap(),
        &addrs,
    )
    .expect("start the management etcd")
}

/// A store on `m` whose requests go to member `first` first.
fn store_on(m: &ManagementEtcd, first: usize, deadlines: Deadlines) -> EtcdStore {
    let l = EtcdLocation::parse(&m.store_url("t"), None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match EtcdStore::connect_first(&l, deadlines, Some(first)) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("the management etcd never answered: {e}"),
        }
    }
}

fn cp(name: &str) -> ControlPlane {
    ControlPlane {
        spec_version: 0,
        client_addresses: Vec::new(),
        ca_generation: 0,
        ca_rotation: None,
        road: None,
        v2_api_never_open: false,
        name: name.into(),
        spec: ControlPlaneSpec {
            recovery: Default::default(),
            deletion_protection: false,
            replicas: 3,
            version: "3.4.23".parse().unwrap(),
            rollout: quorum_core::RolloutStrategy::default(),
            paused: false,
            haproxy: None,
            certificates: Default::default(),
            insecure_plaintext: true,
            remediation: Default::default(),
            maintenance: Default::default(),
            backup: Default::default(),
            provider: Default::default(),
        },
        deleting: false,
        rebuild: None,
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

/// Waits until every member but `except` serves (after a start or a restart).
fn wait_serving(s: &EtcdStore, except: &[usize]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = s.endpoint_health(true);
        if h.iter()
            .enumerate()
            .all(|(i, e)| e.up || except.contains(&i))
        {
            return;
        }
        assert!(Instant::now() < deadline, "members never served: {h:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A member that serves and does not lead.
fn follower(s: &EtcdStore) -> usize {
    let h = s.endpoint_health(true);
    let leader = h.iter().position(|e| e.leader).expect("a leader");
    (leader + 1) % h.len()
}

#[test]
fn a_write_whose_answer_was_lost_is_read_back_and_never_done_twice() {
    let dir = tempfile::tempdir().unwrap();
    let m = management("lost-answers", dir.path());
    let mut s = store_on(&m, 0, Deadlines::default());
    let v: Version = "3.4.23".parse().unwrap();

    // Created, then its answer lost: the retry's "absent" comparison fails, the read-back
    // finds the record it wrote, and the create is a success, not "already exists".
    s.conn.lose.after.store(1, Ordering::SeqCst);
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    assert_eq!(s.control_planes().unwrap().len(), 1);
    // A real second create is still refused.
    assert!(matches!(
        s.create_control_plane(&cp("a"), None, 2),
        Err(StoreError::AlreadyExists(_))
    ));
    // Lost before it was sent: the retry lands it, once.
    s.conn.lose.before.store(1, Ordering::SeqCst);
    s.create_control_plane(&cp("b"), None, 3).unwrap();
    assert_eq!(s.control_planes().unwrap().len(), 2);

    // A machine allocated, its answer lost: the same machine, not a second one.
    s.conn.lose.after.store(1, Ordering::SeqCst);
    let m1 = s
        .allocate_machine("a", true, v, None, None, &|_| true)
        .unwrap();
    assert_eq!(m1.name, "a-1");
    let ms = s.machines("a").unwrap();
    assert_eq!(ms.len(), 1, "{ms:?}");
    let m2 = s
        .allocate_machine("a", true, v, None, None, &|_| true)
        .unwrap();
    assert_eq!((m2.name.as_str(), m2.serial), ("a-2", 2));
    assert_ne!(m1.address, m2.address);

    // An event recorded, its answer lost: one event, under the id returned.
    s.conn.lose.after.store(1, Ordering::SeqCst);
    let e = NewEvent::new(EventKind::Converged, StepOutcome::Ok, "once");
    let id = s.record_event("a", 10, &e).unwrap();
    let events = s.events_after("a", 0, 100).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].id, id);

    // A machine marked leaving and a spec changed, both answers lost: done once each.
    s.conn.lose.after.store(1, Ordering::SeqCst);
    s.mark_machine_deleting("a", "a-1", None).unwrap();
    assert!(s.machine("a", "a-1").unwrap().deleting);
    s.conn.lose.after.store(1, Ordering::SeqCst);
    let mut spec = cp("a").spec;
    spec.replicas = 5;
    s.update_spec("a", &spec).unwrap();
    assert_eq!(s.get_control_plane("a").unwrap().spec.replicas, 5);

    // A setting removed, its answer lost: the retry finds it gone, which is success.
    s.setting_or_init("gone", "1").unwrap();
    s.conn.lose.after.store(1, Ordering::SeqCst);
    assert!(s.remove_setting("gone", "1").unwrap());
    assert_eq!(s.setting("gone").unwrap(), None);

    // Leadership taken, its answer lost: the key carries this store's lease, so it leads.
    s.conn.lose.after.store(1, Ordering::SeqCst);
    let Campaign::Leading { token } = s.campaign("r1", 4_000).unwrap() else {
        panic!("the campaign whose answer was lost did not lead");
    };
    assert_eq!(
        s.leader().unwrap().map(|l| (l.identity, l.token)),
        Some(("r1".into(), token))
    );
    s.ensure_leading(Some(500)).unwrap();
}

#[test]
fn a_dead_or_stopped_member_costs_at_most_one_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let m = management("dead-member", dir.path());
    let deadlines = Deadlines::default();
    let mut s = store_on(&m, 0, deadlines);
    wait_serving(&s, &[]);
    s.create_control_plane(&cp("a"), None, 1).unwrap();

    // The member in use dies (a follower: the leader's death is an election, below): the
    // next member serves at once.
    let dead = follower(&s);
    s.conn.pool.prefer(dead);
    m.kill(dead).unwrap();
    let (r, took) = timed(|| s.control_planes());
    assert_eq!(r.unwrap().len(), 1);
    assert!(
        took < Duration::from_millis(deadlines.attempt_ms),
        "{took:?}"
    );
    for _ in 0..20 {
        let (r, took) = timed(|| s.machines("a"));
        r.unwrap();
        assert!(took < Duration::from_millis(500), "{took:?}");
    }
    let h = s.endpoint_health(false);
    assert_eq!(h.iter().filter(|e| e.up).count(), 2, "{h:?}");
    assert!(!h[dead].up && h[dead].error.is_some(), "{h:?}");

    // Back: probed in the background, in service again.
    m.restart(dead).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.endpoint_health(false)[dead].up {
        assert!(Instant::now() < deadline, "{:?}", s.endpoint_health(false));
        std::thread::sleep(Duration::from_millis(50));
    }

    // The member in use stops (SIGSTOP): it accepts connections and answers nothing.
    // The call that meets it waits one attempt, then the others serve at once.
    let stopped = follower(&s);
    s.conn.pool.prefer(stopped);
    m.pause(stopped);
    let (r, took) = timed(|| s.control_planes());
    r.unwrap();
    assert!(
        took >= Duration::from_millis(deadlines.attempt_ms)
            && took < Duration::from_millis(2 * deadlines.attempt_ms),
        "{took:?}"
    );
    for _ in 0..10 {
        let e = NewEvent::new(EventKind::Converged, StepOutcome::Ok, "x");
        let (r, took) = timed(|| s.record_event("a", 1, &e));
        r.unwrap();
        assert!(took < Duration::from_millis(500), "{took:?}");
    }
    let h = s.endpoint_health(true);
    m.resume(stopped);
    assert_eq!(h.iter().filter(|e| e.up).count(), 2, "{h:?}");
    // "no answer within 1000 ms", or the HTTP/2 keep-alive's verdict on its connection.
    assert!(!h[stopped].up && h[stopped].error.is_some(), "{h:?}");
    assert_eq!(h.iter().filter(|e| e.leader).count(), 1, "{h:?}");
}

#[test]
fn a_majority_gone_is_said_plainly_and_the_store_serves_once_one_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let m = management("majority-gone", dir.path());
    let deadlines = Deadlines {
        attempt_ms: 1_000,
        call_ms: 2_500,
    };
    let s = store_on(&m, 0, deadlines);
    wait_serving(&s, &[]);
    m.kill(0).unwrap();
    m.kill(1).unwrap();
    let (r, took) = timed(|| s.control_planes());
    let e = r.unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
    let text = e.to_string();
    eprintln!("{text}");
    // Two refuse connections; the third may say it has no leader, or (still waiting on
    // the leader that died) not answer in time.
    assert!(
        text.contains("2 of 3 members") || text.contains("3 of 3 members"),
        "{text}"
    );
    assert!(text.contains("lost its quorum"), "{text}");
    assert!(
        took < Duration::from_millis(deadlines.call_ms + 1_000),
        "{took:?}"
    );
    // A connection to it says so too.
    let l = EtcdLocation::parse(&m.store_url("t"), None).unwrap();
    let e = EtcdStore::connect_first(&l, deadlines, Some(2))
        .err()
        .unwrap();
    assert!(e.to_string().contains("lost its quorum"), "{e}");

    m.restart(1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match s.control_planes() {
            Ok(cps) => {
                assert!(cps.is_empty());
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "never served again: {e}"),
        }
    }
    let h = s.endpoint_health(true);
    assert_eq!(h.iter().filter(|e| e.up).count(), 2, "{h:?}");
}

#[test]
fn the_leaders_lease_outlives_an_election_of_the_management_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let m = management("lease-election", dir.path());
    let mut s = store_on(&m, 0, Deadlines::default());
    wait_serving(&s, &[]);
    let Campaign::Leading { token } = s.campaign("r1", 2_000).unwrap() else {
        panic!("did not lead");
    };
    let mut other = store_on(&m, 1, Deadlines::default());
    // Kill the management etcd's leader.
    let leader = s
        .endpoint_health(true)
        .iter()
        .position(|h| h.leader)
        .expect("a leader");
    let killed = Instant::now();
    m.kill(leader).unwrap();
    // The lease may run short by this process's clock during the election, but the store
    // never says it is gone, and no other replica can take the key.
    let mut held_ms = 0u128;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(!s.lease_lost(), "the lease was lost in an election");
        if let Ok(Campaign::Leading { .. }) = other.campaign("r2", 2_000) {
            panic!("another replica took the lead during the election");
        }
        match s.ensure_leading(Some(quorum_core::lease::margin_ms(2_000))) {
            Ok(()) if killed.elapsed() > Duration::from_secs(4) => break,
            Ok(()) => {}
            Err(e) if e.is_unavailable() => held_ms += 50,
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline, "never confirmed again");
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("held about {held_ms} ms after the management leader was killed");
    assert_eq!(s.leader().unwrap().map(|l| l.token), Some(token));
}

/// A lease that etcd lets go (revoked here, as an expiry past a majority's absence
/// would): the keeper says the term is over, and the replica leads again on a new lease
/// with a new token. Before, this client's "lease not found" was retried forever.
#[test]
fn a_lease_etcd_let_go_ends_the_term_and_the_replica_campaigns_again() {
    let dir = tempfile::tempdir().unwrap();
    let m = management("lease-gone", dir.path());
    let mut s = store_on(&m, 0, Deadlines::default());
    wait_serving(&s, &[]);
    let Campaign::Leading { token } = s.campaign("r1", 2_000).unwrap() else {
        panic!("did not lead");
    };
    let lease_id = s.leadership.as_ref().expect("leading").lease_id;
    s.conn
        .call("revoke the lease", move |mut c| async move {
            c.lease_revoke(lease_id).await?;
            Ok(())
        })
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !s.lease_lost() {
        assert!(
            Instant::now() < deadline,
            "the keeper never saw the lease gone"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(s.ensure_leading(None).is_err());
    // As the controller does on `Standing::Lost`: step down, then campaign.
    s.step_down();
    let Campaign::Leading { token: again } = s.campaign("r1", 2_000).unwrap() else {
        panic!("did not lead again");
    };
    assert_ne!(again, token);
}
