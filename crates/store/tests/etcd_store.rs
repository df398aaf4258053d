//! The etcd backend on a real 3-member management etcd: the same behaviour as the
//! embedded store (one table of steps run against both), writers that never overwrite
//! each other, and leadership with fencing.

use quorum_core::backup::snapshot_id;
use quorum_core::{
    ActionKind, CaPhase, CaRotation, CaStep, ControlPlane, ControlPlaneSpec, DeleteReason, InPlace,
    InPlacePhase, Machine, Remediation, RolloutStrategy, SnapshotFacts, SnapshotReason,
    SnapshotRecord, Verification, Version,
};
use quorum_provider::management::ManagementEtcd;
use quorum_store::{
    Campaign, EventKind, Heartbeat, NewEvent, PublishedStatus, StepInProgress, StepOutcome, Store,
    StoreError, StoreLocation, StoredCa,
};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const VERSION: &str = "3.5.1";

/// A management etcd on addresses of the test's own: `127.A.B.252..254`.
fn management(test: &str, dir: &std::path::Path) -> ManagementEtcd {
    let mut h = DefaultHasher::new();
    (test, std::process::id()).hash(&mut h);
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

fn etcd_store(m: &ManagementEtcd, prefix: &str) -> Store {
    let l = StoreLocation::parse(&m.store_url(prefix), None).unwrap();
    // The cluster may still be electing its first leader: retry within a deadline.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Store::connect(&l, std::path::Path::new("/nonexistent")) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("the management etcd never answered: {e}"),
        }
    }
}

fn beat(identity: &str, at_ms: i64) -> Heartbeat {
    Heartbeat {
        identity: identity.into(),
        at_ms,
        step: None,
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
            rollout: RolloutStrategy::default(),
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

/// The behaviour both backends must share, step by step.
fn behaviour(s: &mut Store) {
    let v: Version = "3.4.23".parse().unwrap();
    assert_eq!(s.control_planes().unwrap(), vec![]);
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    assert!(matches!(
        s.create_control_plane(&cp("a"), None, 2),
        Err(StoreError::AlreadyExists(_))
    ));
    // A TLS control plane is never stored without its CA.
    let mut tls = cp("t");
    tls.spec.insecure_plaintext = false;
    assert!(matches!(
        s.create_control_plane(&tls, None, 1),
        Err(StoreError::MissingCa(_))
    ));
    assert_eq!(s.control_plane("t").unwrap(), None);

    let mut spec = cp("a").spec;
    spec.replicas = 5;
    s.update_spec("a", &spec).unwrap();
    assert_eq!(s.get_control_plane("a").unwrap().spec.replicas, 5);
    assert!(matches!(
        s.update_spec("nope", &spec),
        Err(StoreError::NotFound(_))
    ));

    let m1 = s
        .allocate_machine("a", true, v, None, None, &|_| true)
        .unwrap();
    let m2 = s
        .allocate_machine("a", true, v, None, None, &|a| a.octets()[3] != 3)
        .unwrap();
    assert_eq!((m1.name.as_str(), m1.serial), ("a-1", 1));
    assert_eq!((m2.name.as_str(), m2.serial), ("a-2", 2));
    assert_ne!(m1.address, m2.address);
    // A busy address is skipped.
    assert_ne!(m2.address.octets()[3], 3);
    // The creation time outlives changes of the spec and of the record's serial.
    assert_eq!(s.created_at_ms("a").unwrap(), Some(1));
    assert_eq!(s.created_at_ms("nope").unwrap(), None);
    s.mark_machine_deleting("a", "a-1", None).unwrap();
    s.mark_machine_deleting("a", "a-1", None).unwrap();
    assert!(s.machine("a", "a-1").unwrap().deleting);
    s.delete_machine("a", "a-1").unwrap();
    s.delete_machine("a", "a-1").unwrap();
    assert_eq!(
        s.machines("a")
            .unwrap()
            .iter()
            .map(|m| m.serial)
            .collect::<Vec<_>>(),
        vec![2]
    );
    assert!(matches!(
        s.mark_machine_deleting("a", "a-1", None),
        Err(StoreError::MachineNotFound { .. })
    ));

    assert_eq!(s.last_event_id("a").unwrap(), 0);
    let id1 = s
        .record_event(
            "a",
            10,
            &NewEvent {
                by: Some("r1"),
                machine: Some("a-2"),
                ..NewEvent::new(ActionKind::Promote, StepOutcome::Refused, "m")
            },
        )
        .unwrap();
    // A kind this release does not know (as a newer one may write) is kept as written.
    let newer = EventKind::parse("from-a-newer-release");
    let id2 = s
        .record_event("a", 11, &NewEvent::new(newer, StepOutcome::Ok, "m"))
        .unwrap();
    assert!(id2 > id1);
    let evs = s.events_after("a", 0, 10).unwrap();
    assert_eq!(
        evs.iter()
            .map(|e| (e.kind.as_str(), e.outcome, e.ok, e.machine.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("promote", StepOutcome::Refused, false, Some("a-2")),
            ("from-a-newer-release", StepOutcome::Ok, true, None)
        ]
    );
    assert_eq!(evs[0].kind, EventKind::Action(ActionKind::Promote));
    // The writer is kept; an event written without one reads back without one.
    assert_eq!(
        evs.iter().map(|e| e.by.as_deref()).collect::<Vec<_>>(),
        [Some("r1"), None]
    );
    assert_eq!(s.events_after("a", id1, 10).unwrap().len(), 1);
    assert_eq!(s.last_event_id("a").unwrap(), id2);

    let st = PublishedStatus {
        updated_at_ms: 5,
        controller: "c".into(),
        status: serde_json::json!({"converged": true}),
    };
    s.publish_status("a", &st).unwrap();
    assert_eq!(s.published_status("a").unwrap(), Some(st));
    s.controller_heartbeat(&beat("me", 42)).unwrap();
    assert_eq!(s.last_controller_heartbeat().unwrap(), Some(beat("me", 42)));
    // From another thread, through a writer, with the step in progress.
    let busy = Heartbeat {
        step: Some(StepInProgress {
            control_plane: "a".into(),
            description: "stop machine a-1".into(),
            since_ms: 40,
        }),
        ..beat("me", 43)
    };
    let mut w = s.heartbeat_writer().unwrap();
    let sent = busy.clone();
    std::thread::spawn(move || w.beat(&sent).unwrap())
        .join()
        .unwrap();
    assert_eq!(s.last_controller_heartbeat().unwrap(), Some(busy));
    // Only its own heartbeat is withdrawn by a controller that stops.
    s.controller_stopped("someone else").unwrap();
    assert!(s.last_controller_heartbeat().unwrap().is_some());
    s.controller_stopped("me").unwrap();
    assert_eq!(s.last_controller_heartbeat().unwrap(), None);
    assert_eq!(s.setting_or_init("k", "1").unwrap(), "1");
    assert_eq!(s.setting_or_init("k", "2").unwrap(), "1");
    // Compare-and-delete: not while it holds something else; absent is the end sought.
    assert!(!s.remove_setting("k", "2").unwrap());
    assert_eq!(s.setting("k").unwrap().as_deref(), Some("1"));
    assert!(s.remove_setting("k", "1").unwrap());
    assert_eq!(s.setting("k").unwrap(), None);
    assert!(s.remove_setting("k", "1").unwrap());
    assert_eq!(s.setting_or_init("k", "3").unwrap(), "3");

    let before = s.data_version().unwrap();
    s.mark_control_plane_deleting("a").unwrap();
    assert!(s.get_control_plane("a").unwrap().deleting);
    s.forget_control_plane("a").unwrap();
    assert_eq!(s.control_plane("a").unwrap(), None);
    assert_eq!(s.machines("a").unwrap(), vec![]);
    assert_eq!(s.published_status("a").unwrap(), None);
    // Events outlive the control plane until one of the same name is created again.
    assert_eq!(s.events_after("a", 0, 10).unwrap().len(), 2);
    s.create_control_plane(&cp("a"), None, 3).unwrap();
    assert_eq!(s.events_after("a", 0, 10).unwrap().len(), 0);
    // Serials start again; addresses are never reused.
    let m3 = s
        .allocate_machine("a", true, v, None, None, &|_| true)
        .unwrap();
    assert_eq!(m3.serial, 1);
    assert!(m3.address != m1.address && m3.address != m2.address);
    assert!(s.data_version().unwrap() != before || s.location().ends_with("quorum.db"));
}

/// A machine's remediation record, as both backends must keep it: written with the
/// replacement's allocation and with the leaving machine's mark, read back whole, never
/// cleared by a mark without one.
fn remediation_behaviour(s: &mut Store) {
    let v: Version = "3.5.1".parse().unwrap();
    s.create_control_plane(&cp("r"), None, 1).unwrap();
    let old = s
        .allocate_machine("r", true, v, None, None, &|_| true)
        .unwrap();
    assert_eq!(old.remediation, None);
    assert_eq!(s.machine("r", &old.name).unwrap().remediation, None);
    let r = Remediation {
        machine: old.name.clone(),
        attempt: 2,
        at_unix_s: 1_800_000_000,
        reason: "unreachable for 31s".into(),
    };
    // The leaving machine keeps why it leaves; marking again (with it or without it)
    // changes nothing.
    s.mark_machine_deleting("r", &old.name, Some(&r)).unwrap();
    let marked = s.machine("r", &old.name).unwrap();
    assert!(marked.deleting);
    assert_eq!(marked.remediation.as_ref(), Some(&r));
    s.mark_machine_deleting("r", &old.name, Some(&r)).unwrap();
    s.mark_machine_deleting("r", &old.name, None).unwrap();
    assert_eq!(s.machine("r", &old.name).unwrap(), marked);
    // Its replacement inherits the record from its allocation on.
    let new = s
        .allocate_machine("r", false, v, None, Some(r.clone()), &|_| true)
        .unwrap();
    assert_eq!(new.remediation.as_ref(), Some(&r));
    assert_eq!(s.machine("r", &new.name).unwrap(), new);
    assert_eq!(
        s.machines("r")
            .unwrap()
            .iter()
            .map(|m| m.remediation.clone())
            .collect::<Vec<_>>(),
        [Some(r.clone()), Some(r)]
    );
    // A machine marked leaving without a remediation (a rollout) has none.
    let plain = s
        .allocate_machine("r", false, v, None, None, &|_| true)
        .unwrap();
    s.mark_machine_deleting("r", &plain.name, None).unwrap();
    assert_eq!(s.machine("r", &plain.name).unwrap().remediation, None);
}

/// `update_machine`, as both backends must do it: the change read back whole, no write
/// when nothing changes, a missing machine an error that names it.
fn update_behaviour(s: &mut Store) {
    let v: Version = "3.4.23".parse().unwrap();
    s.create_control_plane(&cp("u"), None, 1).unwrap();
    let m = s
        .allocate_machine("u", true, v, None, None, &|_| true)
        .unwrap();
    let ip = InPlace {
        from: v,
        to: "3.5.1".parse().unwrap(),
        phase: InPlacePhase::Draining,
        since_unix_s: 1_800_000_000,
        reason: DeleteReason::Outdated,
        failure: None,
    };
    let begin = |r: &mut Machine| {
        if r.in_place.is_some() {
            return false;
        }
        r.in_place = Some(ip.clone());
        true
    };
    s.update_machine("u", &m.name, "begin", &begin).unwrap();
    let after = s.machine("u", &m.name).unwrap();
    assert_eq!(after.in_place.as_ref(), Some(&ip));
    assert_eq!(
        Machine {
            in_place: None,
            ..after.clone()
        },
        m
    );
    // Again: nothing to change, and nothing changes.
    s.update_machine("u", &m.name, "begin", &begin).unwrap();
    assert_eq!(s.machine("u", &m.name).unwrap(), after);
    let e = s.update_machine("u", "u-99", "begin", &begin).unwrap_err();
    assert!(e.to_string().contains("u-99"), "{e}");
}

/// A snapshot record as `quorum_backup::take` makes one.
fn snapshot(cp: &str, at_unix_s: i64, revision: i64) -> SnapshotRecord {
    SnapshotRecord {
        recreate: None,
        id: snapshot_id(cp, at_unix_s, revision, 0),
        control_plane: cp.into(),
        taken_at_unix_s: at_unix_s,
        reason: SnapshotReason::OnDemand,
        from_machine: format!("{cp}-1"),
        etcd_version: VERSION.parse().unwrap(),
        spec_version: VERSION.parse().unwrap(),
        rollout_to: None,
        location: "/backups".into(),
        sha256: "ab".repeat(32),
        size_bytes: 20_512,
        facts: SnapshotFacts {
            hash: 7,
            revision,
            total_keys: 9,
            total_size_bytes: 20_480,
        },
        took_ms: 4,
        verification: None,
    }
}

/// Snapshot records, as both backends must keep them: oldest first, per control plane,
/// an id written once, and kept after the control plane is forgotten.
fn snapshot_behaviour(s: &mut Store) {
    s.create_control_plane(&cp("s"), None, 1).unwrap();
    assert_eq!(s.snapshots("s").unwrap(), vec![]);
    let newer = snapshot("s", 1_800_000_100, 40);
    let older = snapshot("s", 1_800_000_000, 30);
    s.record_snapshot(&newer).unwrap();
    s.record_snapshot(&older).unwrap();
    s.record_snapshot(&snapshot("other", 1_800_000_000, 5))
        .unwrap();
    // A second one in the same second, at the same revision: listed after it, though
    // its id sorts before.
    let twin = SnapshotRecord {
        id: snapshot_id("s", 1_800_000_100, 40, 1),
        ..newer.clone()
    };
    s.record_snapshot(&twin).unwrap();
    // Each keeps the spec (and CA: none here) of its control plane when recorded; one
    // of a control plane that does not exist keeps none.
    let kept = |r: &SnapshotRecord| SnapshotRecord {
        recreate: Some(quorum_core::Recreate {
            spec: cp("s").spec,
            ca_generation: 0,
            ca_cert_pem: None,
            ca_key: None,
        }),
        ..r.clone()
    };
    let (older, newer, twin) = (kept(&older), kept(&newer), kept(&twin));
    assert_eq!(s.snapshots("other").unwrap()[0].recreate, None);
    assert_eq!(s.snapshotted_control_planes().unwrap(), ["other", "s"]);
    let all = vec![older.clone(), newer.clone(), twin.clone()];
    assert_eq!(s.snapshots("s").unwrap(), all);
    let again = s.record_snapshot(&older).unwrap_err();
    assert!(
        matches!(again, StoreError::SnapshotRecorded { .. }),
        "{again}"
    );
    // A test restore's outcome is kept with the record; the newest replaces it.
    let failed = Verification {
        at_unix_s: 1_800_000_200,
        ok: false,
        revision: 0,
        keys: 0,
        took_ms: 9,
        error: Some("did not serve".into()),
    };
    s.record_verification("s", &newer.id, &failed).unwrap();
    let passed = Verification {
        ok: true,
        revision: 40,
        keys: 12,
        error: None,
        ..failed.clone()
    };
    s.record_verification("s", &newer.id, &passed).unwrap();
    let read = s.snapshots("s").unwrap();
    assert_eq!(read[1].verification.as_ref(), Some(&passed));
    assert!(read[1].verified() && !read[0].verified() && !read[2].verified());
    let e = s
        .record_verification("s", "s-none.db", &passed)
        .unwrap_err();
    assert!(matches!(e, StoreError::SnapshotNotFound { .. }), "{e}");
    // Forgotten (retention): gone from the list; again, nothing to do.
    s.delete_snapshot("s", &older.id).unwrap();
    s.delete_snapshot("s", &older.id).unwrap();
    let all: Vec<SnapshotRecord> = s.snapshots("s").unwrap();
    assert_eq!(all, read[1..].to_vec());
    // Protected: not marked deleting, nothing written.
    let mut spec = cp("s").spec;
    spec.deletion_protection = true;
    s.update_spec("s", &spec).unwrap();
    let e = s.mark_control_plane_deleting("s").unwrap_err();
    assert!(matches!(e, StoreError::DeletionProtected(_)), "{e}");
    assert!(!s.get_control_plane("s").unwrap().deleting);
    s.forget_control_plane("s").unwrap();
    assert_eq!(s.snapshots("s").unwrap(), all, "they outlive it");
    assert_eq!(s.snapshotted_control_planes().unwrap(), ["other", "s"]);
}

/// A CA rotation's records: begun once with its new CA, its phase moved only while it
/// is the rotation recorded, machines allocated meanwhile recorded with its files, the
/// new CA's key sealed (the store's secrets list it, and re-wraps it), and the finish
/// one step: the new CA in force, the old one gone, the generation moved.
fn ca_rotation_behaviour(s: &mut Store) {
    let v: Version = "3.5.1".parse().unwrap();
    let mut tls = cp("rot");
    tls.spec.insecure_plaintext = false;
    let old = quorum_pki::Ca::generate("rot", 1_800_000_000, 86_400 * 365).unwrap();
    let stored = |ca: &quorum_pki::Ca| StoredCa {
        cert_pem: ca.cert_pem().to_string(),
        key_pem: ca.key_pem().to_string(),
    };
    s.create_control_plane(&tls, Some(&stored(&old)), 1)
        .unwrap();
    assert_eq!(s.next_certificate_authority("rot").unwrap(), None);
    let new = quorum_pki::Ca::generate_generation("rot", 1, 1_800_000_000, 86_400 * 365).unwrap();
    let rotation = CaRotation {
        from: 0,
        to: 1,
        phase: CaPhase::Trust,
        since_unix_s: 5,
        started_unix_s: 5,
    };
    assert!(s
        .begin_ca_rotation("rot", &stored(&new), &rotation)
        .unwrap());
    // Once only: a second rotation while one is under way changes nothing.
    let other = quorum_pki::Ca::generate_generation("rot", 1, 1_800_000_000, 86_400).unwrap();
    assert!(!s
        .begin_ca_rotation("rot", &stored(&other), &rotation)
        .unwrap());
    assert_eq!(
        s.next_certificate_authority("rot").unwrap(),
        Some(stored(&new))
    );
    let r = s.get_control_plane("rot").unwrap();
    assert_eq!(r.ca_rotation.as_ref(), Some(&rotation));
    // Both keys are sealed, each for its own record.
    let ids = s.secrets_key_ids().unwrap();
    assert_eq!(ids.values().sum::<usize>(), 2, "{ids:?}");
    assert!(!ids.contains_key("(plaintext)"), "{ids:?}");
    // A machine recorded now starts with the phase's files.
    let m = s
        .allocate_machine("rot", false, v, Some(1_900_000_000), None, &|_| true)
        .unwrap();
    assert_eq!(
        m.ca_step,
        Some(CaStep {
            generation: 1,
            phase: CaPhase::Trust
        })
    );
    let reissue = CaRotation {
        phase: CaPhase::Reissue,
        ..rotation.clone()
    };
    assert!(s.set_ca_rotation("rot", &reissue).unwrap());
    assert!(!s.set_ca_rotation("rot", &reissue).unwrap(), "already");
    let elsewhere = CaRotation {
        to: 7,
        ..reissue.clone()
    };
    assert!(
        !s.set_ca_rotation("rot", &elsewhere).unwrap(),
        "not this rotation"
    );
    assert!(
        !s.finish_ca_rotation("rot", 7).unwrap(),
        "not this rotation"
    );
    assert!(s.finish_ca_rotation("rot", 1).unwrap());
    assert!(!s.finish_ca_rotation("rot", 1).unwrap(), "finished already");
    let r = s.get_control_plane("rot").unwrap();
    assert_eq!((r.ca_generation, r.ca_rotation.as_ref()), (1, None));
    assert_eq!(s.certificate_authority(&r).unwrap(), Some(stored(&new)));
    assert_eq!(s.next_certificate_authority("rot").unwrap(), None);
    assert_eq!(s.secrets_key_ids().unwrap().values().sum::<usize>(), 1);
    s.forget_control_plane("rot").unwrap();
}

/// A machine takes one of its control plane's client addresses again once no machine
/// holds it (`quorum_core::reach`); the list is kept with the control plane, through
/// spec changes, and another control plane's machines never get one of them.
fn client_address_behaviour(s: &mut Store) {
    let v: Version = "3.4.23".parse().unwrap();
    s.create_control_plane(&cp("ca"), None, 1).unwrap();
    s.create_control_plane(&cp("cb"), None, 1).unwrap();
    let free = |_| true;
    let first: Vec<Machine> = (0..3)
        .map(|_| {
            s.allocate_machine("ca", true, v, None, None, &free)
                .unwrap()
        })
        .collect();
    let kept = s.get_control_plane("ca").unwrap().client_addresses;
    assert_eq!(kept.len(), 4, "three members and a spare");
    let held: Vec<_> = first.iter().map(Machine::client_address).collect();
    assert_eq!(&kept[..3], &held[..]);
    let other = s
        .allocate_machine("cb", true, v, None, None, &free)
        .unwrap();
    assert!(!kept.contains(&other.client_address()), "never another's");
    // A spec change keeps the list.
    let mut spec = cp("ca").spec;
    spec.version = "3.5.1".parse().unwrap();
    s.update_spec("ca", &spec).unwrap();
    let spare = s
        .allocate_machine("ca", false, v, None, None, &free)
        .unwrap();
    assert_eq!(
        spare.client_address(),
        kept[3],
        "the first replacement takes the spare"
    );
    s.delete_machine("ca", &first[0].name).unwrap();
    let second = s
        .allocate_machine("ca", false, v, None, None, &free)
        .unwrap();
    assert_eq!(
        second.address, first[0].address,
        "then the address it freed"
    );
    // Something still listening there: passed over for a fresh one, kept at the end.
    s.delete_machine("ca", &first[1].name).unwrap();
    let busy = first[1].address;
    let third = s
        .allocate_machine("ca", false, v, None, None, &|a| a != busy)
        .unwrap();
    assert!(third.address != busy && !kept.contains(&third.client_address()));
    let now = s.get_control_plane("ca").unwrap().client_addresses;
    assert_eq!(
        (&now[..4], now.get(4)),
        (&kept[..], Some(&third.client_address()))
    );
    s.forget_control_plane("ca").unwrap();
    s.forget_control_plane("cb").unwrap();
}

#[test]
fn both_backends_behave_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mut embedded = Store::open(&home).unwrap();
    behaviour(&mut embedded);
    client_address_behaviour(&mut embedded);
    remediation_behaviour(&mut embedded);
    update_behaviour(&mut embedded);
    snapshot_behaviour(&mut embedded);
    ca_rotation_behaviour(&mut embedded);
    let m = management("same", dir.path());
    let mut distributed = etcd_store(&m, "same");
    behaviour(&mut distributed);
    client_address_behaviour(&mut distributed);
    remediation_behaviour(&mut distributed);
    update_behaviour(&mut distributed);
    snapshot_behaviour(&mut distributed);
    ca_rotation_behaviour(&mut distributed);
    // Another prefix is another state.
    let other = etcd_store(&m, "other");
    assert_eq!(other.control_planes().unwrap(), vec![]);
}

#[test]
fn concurrent_writers_never_overwrite_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let m = management("concurrent", dir.path());
    let mut s = etcd_store(&m, "c");
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    let v: Version = "3.4.23".parse().unwrap();
    let url = m.store_url("c");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let l = StoreLocation::parse(&url, None).unwrap();
                let mut s = Store::connect(&l, std::path::Path::new("/nonexistent")).unwrap();
                let mut spec = cp("a").spec;
                (0..5)
                    .map(|i| {
                        spec.replicas = 3 + i;
                        s.update_spec("a", &spec).unwrap();
                        s.allocate_machine("a", false, v, None, None, &|_| true)
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut made: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let stored = s.machines("a").unwrap();
    assert_eq!(stored.len(), 20, "every allocation is stored");
    made.sort_by_key(|m| m.serial);
    assert_eq!(made, stored);
    let serials: Vec<u64> = stored.iter().map(|m| m.serial).collect();
    assert_eq!(serials, (1..=20).collect::<Vec<_>>());
    let mut addrs: Vec<_> = stored.iter().map(|m| m.address).collect();
    addrs.dedup();
    assert_eq!(addrs.len(), 20, "no address handed out twice");
}

#[test]
fn one_leader_and_a_deposed_leaders_writes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = management("fence", dir.path());
    let mut a = etcd_store(&m, "f");
    let mut b = etcd_store(&m, "f");
    let token_a = match a.campaign("a", 2_000).unwrap() {
        Campaign::Leading { token } => token,
        other => panic!("the first replica should lead: {other:?}"),
    };
    let mut a_beats = a.heartbeat_writer().unwrap();
    a_beats.beat(&beat("a", 6)).unwrap();
    match b.campaign("b", 2_000).unwrap() {
        Campaign::Standby { leader: Some(l) } => {
            assert_eq!((l.identity.as_str(), l.token), ("a", token_a))
        }
        other => panic!("the second replica should stand by: {other:?}"),
    }
    assert_eq!(a.leader().unwrap().unwrap().identity, "a");
    a.create_control_plane(&cp("x"), None, 1).unwrap();
    a.ensure_leading(Some(500)).unwrap();
    assert!(a.lease_left_ms().unwrap() > 500);
    // The lease keeper renews: the deadline moves past the first TTL.
    let deadline = Instant::now() + Duration::from_secs(10);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3_000) {
        assert!(Instant::now() < deadline);
        a.ensure_leading(Some(200)).expect("renewed in time");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A's lease ends in etcd while A still believes it leads.
    a.release_lease_keeping_token().unwrap();
    let token_b = match b.campaign("b", 2_000).unwrap() {
        Campaign::Leading { token } => token,
        other => panic!("b should lead once a's lease is gone: {other:?}"),
    };
    assert!(token_b > token_a);
    // Every write of A is refused, and nothing of it lands.
    let e = a.controller_heartbeat(&beat("a", 7)).unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    // So are the beats of the heartbeat thread it started while it led.
    let e = a_beats.beat(&beat("a", 7)).unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    let e = a.ensure_leading(None).unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    let e = a.mark_control_plane_deleting("x").unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    assert!(!b.get_control_plane("x").unwrap().deleting);
    assert!(a
        .allocate_machine("x", true, "3.4.23".parse().unwrap(), None, None, &|_| true)
        .is_err());
    assert_eq!(b.machines("x").unwrap(), vec![]);
    let x1 = b
        .allocate_machine("x", true, "3.4.23".parse().unwrap(), None, None, &|_| true)
        .unwrap();
    let e = a
        .update_machine("x", &x1.name, "mark", &|m| {
            m.deleting = true;
            true
        })
        .unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    assert!(!b.machine("x", &x1.name).unwrap().deleting);
    b.delete_machine("x", &x1.name).unwrap();
    // B's writes go through.
    b.controller_heartbeat(&beat("b", 8)).unwrap();
    assert_eq!(
        b.last_controller_heartbeat().unwrap().unwrap().identity,
        "b"
    );
    // A steps down and, while B leads, stands by.
    a.step_down();
    assert!(matches!(
        a.campaign("a", 2_000).unwrap(),
        Campaign::Standby { .. }
    ));
    // B steps down: its lease is released at once and A can take over.
    b.step_down();
    assert!(matches!(
        a.campaign("a", 2_000).unwrap(),
        Campaign::Leading { .. }
    ));
}

#[test]
fn a_management_etcd_with_mutual_tls_is_reached_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let ca = quorum_pki::Ca::generate("management", now, 86_400).unwrap();
    let mut h = DefaultHasher::new();
    ("tls", std::process::id()).hash(&mut h);
    let x = h.finish();
    let (a, b) = (20 + (x % 200) as u8, ((x >> 8) % 200) as u8);
    let addrs: Vec<Ipv4Addr> = (252..=254).map(|d| Ipv4Addr::new(127, a, b, d)).collect();
    let m = ManagementEtcd::start_tls(
        &dir.path().join("mgmt"),
        &quorum_provider::default_etcd_dir(),
        VERSION.parse().unwrap(),
        &addrs,
        &ca,
        now,
        3_600,
    )
    .expect("start the management etcd with TLS");
    let id = ca
        .issue_client("quorum-controller", now, now + 3_600)
        .unwrap();
    let tls = quorum_store::EtcdTls {
        ca_pem: ca.cert_pem().to_string(),
        cert_pem: id.cert_pem.clone(),
        key_pem: id.key_pem.clone(),
    };
    let l = StoreLocation::parse(&m.store_url("tls"), Some(tls)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut s = loop {
        match Store::connect(&l, std::path::Path::new("/nonexistent")) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("never reached over TLS: {e}"),
        }
    };
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    assert_eq!(s.control_planes().unwrap().len(), 1);
    assert!(matches!(
        s.campaign("tls", 2_000).unwrap(),
        Campaign::Leading { .. }
    ));
    // Without a client certificate, or plain HTTP, the store is not reached.
    let plain = StoreLocation::parse(&m.store_url("tls"), None).unwrap();
    let e = Store::connect(&plain, std::path::Path::new("/nonexistent"))
        .err()
        .expect("plain HTTP to a TLS management etcd fails");
    eprintln!("plain: {e}");
    let other = quorum_pki::Ca::generate("other", now, 86_400).unwrap();
    let id = other.issue_client("mallory", now, now + 3_600).unwrap();
    let wrong = quorum_store::EtcdTls {
        ca_pem: ca.cert_pem().to_string(),
        cert_pem: id.cert_pem.clone(),
        key_pem: id.key_pem.clone(),
    };
    let l = StoreLocation::parse(&m.store_url("tls"), Some(wrong)).unwrap();
    let e = Store::connect(&l, std::path::Path::new("/nonexistent"))
        .err()
        .expect("another CA's certificate is refused");
    eprintln!("another CA: {e}");
}

#[test]
fn an_unreachable_store_is_a_clear_error() {
    // Nothing listens here (a fresh loopback address, port 9).
    let l = StoreLocation::parse("etcd://127.9.9.9:9", None).unwrap();
    let t = Instant::now();
    let e = Store::connect(&l, std::path::Path::new("/nonexistent"))
        .err()
        .expect("no etcd there");
    let msg = e.to_string();
    eprintln!("{msg}");
    assert!(msg.contains("etcd://127.9.9.9:9"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    assert!(t.elapsed() < Duration::from_secs(15));
    for bad in [
        "etcd://",
        "etcd://host",
        "etcd://h:99999",
        "http://h:1",
        "etcd://h:1//",
    ] {
        let e = StoreLocation::parse(bad, None).unwrap_err();
        assert!(e.contains("--store"), "{bad}: {e}");
    }
}

/// The keys a management etcd held after a run of quorum at commit c1a7ab4 (see
/// `fixtures/README.md`), put back under a fresh prefix in creation order, read with
/// this release: every record and every event, each with the outcome its `ok` and
/// kind imply (those records have none of their own).
#[test]
fn a_history_of_release_c1a7ab4_reads_back() {
    let fixture: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/etcd-c1a7ab4.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = management("old", dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // What the old release wrote: (control plane, kind) -> count.
    let mut written: std::collections::BTreeMap<(String, String), usize> = Default::default();
    rt.block_on(async {
        let endpoints: Vec<String> = m.endpoints();
        let mut c = etcd_client::Client::connect(endpoints, None).await.unwrap();
        for kv in &fixture {
            let (key, value) = (kv["key"].as_str().unwrap(), kv["value"].as_str().unwrap());
            if let Some(rest) = key.strip_prefix("event/") {
                let cp = rest.split('/').next().unwrap().to_string();
                let rec: serde_json::Value = serde_json::from_str(value).unwrap();
                assert!(rec.get("outcome").is_none(), "an old record: {value}");
                let kind = rec["kind"].as_str().unwrap().to_string();
                *written.entry((cp, kind)).or_default() += 1;
            }
            c.put(format!("/old/{key}"), value, None).await.unwrap();
        }
    });
    // That release stored its CA key in plaintext: opening seals it, with a key file
    // made in the home given (this test's own).
    let l = StoreLocation::parse(&m.store_url("old"), None).unwrap();
    let home = dir.path().join("home");
    let s = Store::connect(&l, &home).unwrap();
    assert!(home.join("secrets.key").exists());
    let cps = s.control_planes().unwrap();
    let names: Vec<&str> = cps.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["e", "g"]);
    let machines = |cp: &str| -> Vec<String> {
        s.machines(cp)
            .unwrap()
            .into_iter()
            .map(|m| m.name)
            .collect()
    };
    assert_eq!(
        (machines("e"), machines("g")),
        (vec!["e-1".to_string()], vec!["g-1".to_string()])
    );
    // Machine records from before remediation records existed: none.
    let machine_records = fixture
        .iter()
        .filter(|kv| kv["key"].as_str().unwrap().starts_with("machine/"))
        .count();
    assert!(machine_records > 0);
    assert!(fixture
        .iter()
        .all(|kv| !kv["value"].as_str().unwrap().contains("remediation")));
    for cp in ["e", "g"] {
        for m in s.machines(cp).unwrap() {
            assert_eq!(m.remediation, None, "{m:?}");
        }
    }
    assert!(s.certificate_authority(&cps[0]).unwrap().is_none());
    assert!(s.certificate_authority(&cps[1]).unwrap().is_some());
    assert!(s.published_status("e").unwrap().is_some());
    // That release kept no creation time in the etcd record: it reads as unknown.
    assert_eq!(s.created_at_ms("e").unwrap(), None);
    assert_eq!(s.setting("subnet").unwrap().as_deref(), Some("77.9"));
    assert!(s.last_controller_heartbeat().unwrap().is_some());
    let mut read: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for cp in ["e", "f", "g"] {
        for e in s.events_after(cp, 0, 10_000).unwrap() {
            assert!(!matches!(e.kind, EventKind::Other(_)), "{e:?}");
            assert_eq!(e.outcome, StepOutcome::implied(&e.kind, e.ok), "{e:?}");
            if e.kind == EventKind::Refused {
                assert!(
                    e.outcome == StepOutcome::Refused && e.machine.is_some(),
                    "{e:?}"
                );
            }
            *read
                .entry((cp.to_string(), e.kind.as_str().to_string()))
                .or_default() += 1;
        }
    }
    assert_eq!(read, written);
    assert!(written.contains_key(&("e".to_string(), "refused".to_string())));
    assert!(written.contains_key(&("f".to_string(), "forget-control-plane".to_string())));
}

/// A store of a sharded fleet: `shards` agreed, leadership under `scope`.
fn shard_store(m: &ManagementEtcd, prefix: &str, shards: u32, scope: &str) -> Store {
    let mut s = etcd_store(m, prefix);
    s.agree_shards(shards).unwrap();
    s.set_scope(scope).unwrap();
    s
}

#[test]
fn each_shard_has_its_own_leader_and_fence_and_the_count_is_agreed() {
    let dir = tempfile::tempdir().unwrap();
    let m = management("shards", dir.path());
    let (p, n) = ("s", 4);
    let mut a0 = shard_store(&m, p, n, "shard/0");
    let mut b1 = shard_store(&m, p, n, "shard/1");
    let mut b0 = shard_store(&m, p, n, "shard/0");
    let token_a0 = match a0.campaign("a", 2_000).unwrap() {
        Campaign::Leading { token } => token,
        other => panic!("a should lead shard 0: {other:?}"),
    };
    // Another shard is another leadership: b leads it while a leads shard 0.
    assert!(matches!(
        b1.campaign("b", 2_000).unwrap(),
        Campaign::Leading { .. }
    ));
    match b0.campaign("b", 2_000).unwrap() {
        Campaign::Standby { leader: Some(l) } => assert_eq!(l.identity, "a"),
        other => panic!("b should stand by on shard 0: {other:?}"),
    }
    // A heartbeat is no change to the control planes: the fleet's controllers do not
    // list them again for it (etcd's data version counts control plane records only).
    let version = a0.data_version().unwrap();
    a0.controller_heartbeat(&beat("a", 5)).unwrap();
    b1.controller_heartbeat(&beat("b", 6)).unwrap();
    assert_eq!(a0.data_version().unwrap(), version);
    let mut leaders = a0.scoped_leaders("shard/").unwrap();
    leaders.sort_by(|x, y| x.0.cmp(&y.0));
    let names: Vec<(&str, &str)> = leaders
        .iter()
        .map(|(s, l)| (s.as_str(), l.identity.as_str()))
        .collect();
    assert_eq!(names, vec![("shard/0", "a"), ("shard/1", "b")]);

    // Who acts on a control plane: its shard's leader, with that shard's heartbeat.
    let plain = etcd_store(&m, p);
    for name in ["x", "y", "z", "w", "v"] {
        let (leader, beat) = plain.controller_of(name).unwrap();
        match quorum_core::shards::shard_of(name, n) {
            0 => assert_eq!(
                (leader.unwrap().identity, beat.unwrap().at_ms),
                ("a".into(), 5)
            ),
            1 => assert_eq!(
                (leader.unwrap().identity, beat.unwrap().at_ms),
                ("b".into(), 6)
            ),
            _ => assert_eq!((leader, beat), (None, None)),
        }
    }
    // Unscoped readers see the newest heartbeat of any shard.
    assert_eq!(plain.last_controller_heartbeat().unwrap().unwrap().at_ms, 6);

    // A replica with another count is refused while any leads, and says what to do.
    let mut other = etcd_store(&m, p);
    let e = other.agree_shards(2).unwrap_err();
    assert!(
        e.to_string().contains("run with --shards 4") && e.to_string().contains("a, b leading"),
        "{e}"
    );
    let mut unsharded = etcd_store(&m, p);
    let e = unsharded.agree_shards(1).unwrap_err();
    assert!(e.to_string().contains("started without --shards"), "{e}");

    // Shard 0's lease ends in etcd while a still believes it leads: b takes shard 0,
    // and every write of a on shard 0 is refused, shard 1's writes untouched.
    a0.release_lease_keeping_token().unwrap();
    let token_b0 = match b0.campaign("b", 2_000).unwrap() {
        Campaign::Leading { token } => token,
        other => panic!("b should take shard 0 once a's lease is gone: {other:?}"),
    };
    assert!(token_b0 > token_a0);
    let e = a0.controller_heartbeat(&beat("a", 7)).unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    let e = a0.ensure_leading(None).unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    let e = a0.create_control_plane(&cp("q"), None, 1).unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    b0.ensure_leading(Some(200)).unwrap();
    b1.ensure_leading(Some(200)).unwrap();
    b0.create_control_plane(&cp("q"), None, 1).unwrap();
    let created = b0.data_version().unwrap();
    assert_ne!(created, version);
    b0.forget_control_plane("q").unwrap();
    assert_ne!(
        b0.data_version().unwrap(),
        created,
        "a removal changes it too"
    );

    // With every leadership given up, the count may change; a campaign of a connection
    // that agreed to the old count is then refused with the same message.
    a0.step_down();
    b0.step_down();
    b1.step_down();
    other.agree_shards(2).unwrap();
    other.set_scope("shard/1").unwrap();
    assert!(matches!(
        other.campaign("c", 2_000).unwrap(),
        Campaign::Leading { .. }
    ));
    // (While another holds shard 0 the stale connection only stands by; once the shard
    // is free its campaign compares the count and is refused.)
    let mut late = shard_store(&m, p, 2, "shard/0");
    drop(late.campaign("d", 2_000).unwrap());
    assert!(matches!(
        b0.campaign("b", 2_000).unwrap(),
        Campaign::Standby { .. }
    ));
    late.step_down();
    let e = b0.campaign("b", 2_000).unwrap_err();
    assert!(e.to_string().contains("run with --shards 2"), "{e}");

    // The embedded store has one controller: no scopes, no count above 1.
    let home = tempfile::tempdir().unwrap();
    let mut embedded = Store::open(&home.path().join("home")).unwrap();
    embedded.agree_shards(1).unwrap();
    let e = embedded.agree_shards(3).unwrap_err();
    assert!(e.to_string().contains("needs a management etcd"), "{e}");
    assert!(embedded.set_scope("shard/0").is_err());
}
