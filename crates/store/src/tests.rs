use super::*;
use quorum_core::{ActionKind, RolloutStrategy};

#[test]
fn opening_for_reading_creates_no_home() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("never-made");
    let e = Store::open_existing(&home).err().unwrap();
    assert!(matches!(e, StoreError::NoHome { .. }), "{e}");
    assert!(e.to_string().contains("no quorum home at"), "{e}");
    assert!(!home.exists(), "a read created the home");
    // An existing directory without a state is not a home either, and stays empty.
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    assert!(matches!(
        Store::open_existing(&home),
        Err(StoreError::NoHome { .. })
    ));
    assert_eq!(std::fs::read_dir(&home).unwrap().count(), 0);
    // Once made, it opens; once its state is lost, that is corruption, not "no home".
    drop(Store::open(&home).unwrap());
    assert!(Store::open_existing(&home).is_ok());
    std::fs::remove_file(home.join(STATE_FILE)).unwrap();
    let e = Store::open_existing(&home).err().unwrap();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
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

/// A state file as quorum wrote it with schema version 1 (events without a writer).
fn write_v1_file(home: &Path, schema: &str) {
    crate::create_private_file(&home.join(STATE_FILE)).unwrap();
    let conn = rusqlite::Connection::open(home.join(STATE_FILE)).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE control_planes (name TEXT PRIMARY KEY, doc TEXT NOT NULL,
             next_serial INTEGER NOT NULL DEFAULT 1, created_at_ms INTEGER NOT NULL);
         CREATE TABLE machines (control_plane TEXT NOT NULL REFERENCES control_planes(name)
             ON DELETE CASCADE, name TEXT NOT NULL, doc TEXT NOT NULL,
             PRIMARY KEY (control_plane, name));
         CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT,
             control_plane TEXT NOT NULL, at_ms INTEGER NOT NULL, kind TEXT NOT NULL,
             machine TEXT, message TEXT NOT NULL, ok INTEGER NOT NULL,
             waited_ms INTEGER, took_ms INTEGER);
         INSERT INTO events(control_plane, at_ms, kind, machine, message, ok)
             VALUES ('a', 7, 'promote', 'a-4', 'promote a-4 to voter', 1);",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('schema', ?1)",
        [schema],
    )
    .unwrap();
}

#[test]
fn a_version_1_file_is_migrated_and_keeps_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let home = private(&dir);
    write_v1_file(&home, "1");
    // Two opens, as the CLI and a controller would: the second finds it migrated.
    let s = Store::open(&home).unwrap();
    let again = Store::open(&home).unwrap();
    let old = s.events_after("a", 0, 10).unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(
        (old[0].kind.as_str(), old[0].by.as_deref(), old[0].outcome),
        ("promote", None, StepOutcome::Ok)
    );
    let id = s
        .record_event(
            "a",
            8,
            &NewEvent {
                by: Some("r1"),
                ..NewEvent::new(ActionKind::RemoveMember, StepOutcome::Refused, "m")
            },
        )
        .unwrap();
    let new = again.events_after("a", old[0].id, 10).unwrap();
    assert_eq!(
        (new[0].id, new[0].by.as_deref(), new[0].outcome, new[0].ok),
        (id, Some("r1"), StepOutcome::Refused, false)
    );
    drop((s, again));
    let conn = rusqlite::Connection::open(home.join(STATE_FILE)).unwrap();
    let v: String = conn
        .query_row("SELECT value FROM meta WHERE key='schema'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION.to_string());
}

#[test]
fn a_file_from_a_newer_quorum_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let home = private(&dir);
    write_v1_file(&home, "9");
    let before = std::fs::read(home.join(STATE_FILE)).unwrap();
    let Err(err) = Store::open(&home) else {
        panic!("a file from a newer quorum was opened")
    };
    let err = err.to_string();
    assert!(
        err.contains("schema version 9, written by a newer quorum")
            && err.contains("reads versions up to 3"),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    assert_eq!(std::fs::read(home.join(STATE_FILE)).unwrap(), before);
}

#[test]
fn control_plane_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&private(&dir)).unwrap();
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    assert!(matches!(
        s.create_control_plane(&cp("a"), None, 2),
        Err(StoreError::AlreadyExists(_))
    ));
    let mut spec = s.get_control_plane("a").unwrap().spec;
    spec.replicas = 5;
    s.update_spec("a", &spec).unwrap();
    assert_eq!(s.get_control_plane("a").unwrap().spec.replicas, 5);
    assert!(matches!(
        s.update_spec("b", &spec),
        Err(StoreError::NotFound(_))
    ));
    s.mark_control_plane_deleting("a").unwrap();
    assert!(s.get_control_plane("a").unwrap().deleting);
    s.forget_control_plane("a").unwrap();
    assert!(s.control_plane("a").unwrap().is_none());
}

#[test]
fn machines_get_serials_and_distinct_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&private(&dir)).unwrap();
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    s.create_control_plane(&cp("b"), None, 1).unwrap();
    let v = "3.4.23".parse().unwrap();
    let busy = Ipv4Addr::from(0);
    let m1 = s
        .allocate_machine("a", true, v, None, None, &|_| true)
        .unwrap();
    // The next address is "busy": allocation skips it.
    let skip = address_at(s.subnet().unwrap(), 1).unwrap();
    let m2 = s
        .allocate_machine("a", true, v, None, None, &|a| a != skip && a != busy)
        .unwrap();
    let m3 = s
        .allocate_machine("b", true, v, None, None, &|_| true)
        .unwrap();
    assert_eq!((m1.serial, m2.serial, m3.serial), (1, 2, 1));
    assert_eq!(m1.name, "a-1");
    assert_ne!(m2.address, skip);
    let addrs = [m1.address, m2.address, m3.address];
    assert!(addrs
        .iter()
        .all(|a| a.octets()[0] == 127 && a.octets()[1] != 0));
    assert_ne!(addrs[0], addrs[1]);
    assert_ne!(addrs[1], addrs[2]);
    s.mark_machine_deleting("a", "a-1", None).unwrap();
    s.mark_machine_deleting("a", "a-1", None).unwrap();
    assert!(s.machine("a", "a-1").unwrap().deleting);
    s.delete_machine("a", "a-1").unwrap();
    s.delete_machine("a", "a-1").unwrap();
    assert_eq!(s.machines("a").unwrap().len(), 1);
}

#[test]
fn a_remediation_record_round_trips_through_allocate_and_mark_deleting() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Store::open(&tmp.path().join("home")).unwrap();
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    let v = "3.5.1".parse().unwrap();
    let old = s
        .allocate_machine("a", true, v, None, None, &|_| true)
        .unwrap();
    let r = Remediation {
        machine: old.name.clone(),
        attempt: 1,
        at_unix_s: 1_800_000_000,
        reason: "its data directory belongs to another cluster".into(),
    };
    s.mark_machine_deleting("a", &old.name, Some(&r)).unwrap();
    s.mark_machine_deleting("a", &old.name, None).unwrap();
    let marked = s.machine("a", &old.name).unwrap();
    assert!(marked.deleting);
    assert_eq!(marked.remediation.as_ref(), Some(&r));
    let new = s
        .allocate_machine("a", false, v, None, Some(r.clone()), &|_| true)
        .unwrap();
    // Read back through another connection, as the CLI reads what a controller wrote.
    let again = Store::open(&tmp.path().join("home")).unwrap();
    assert_eq!(again.machine("a", &new.name).unwrap().remediation, Some(r));
    assert_eq!(again.machine("a", &new.name).unwrap(), new);
    // The stored document names it only when there is one.
    let doc = stored_doc(&tmp.path().join("home"), &old.name);
    assert!(
        doc.contains("\"remediation\":{\"machine\":\"a-1\",\"attempt\":1,"),
        "{doc}"
    );
}

/// A machine's stored JSON document, read without the store.
fn stored_doc(home: &Path, machine: &str) -> String {
    rusqlite::Connection::open(home.join(STATE_FILE))
        .unwrap()
        .query_row("SELECT doc FROM machines WHERE name = ?1", [machine], |r| {
            r.get(0)
        })
        .unwrap()
}

#[test]
fn cli_and_controller_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = Store::open(&private(&dir)).unwrap();
    let reader = Store::open(&private(&dir)).unwrap();
    let before = reader.data_version().unwrap();
    writer.create_control_plane(&cp("a"), None, 1).unwrap();
    assert_ne!(reader.data_version().unwrap(), before);
    assert_eq!(reader.control_planes().unwrap().len(), 1);
    let id = writer
        .record_event(
            "a",
            5,
            &NewEvent {
                machine: Some("a-4"),
                ..NewEvent::new(ActionKind::AddLearner, StepOutcome::Ok, "m")
            },
        )
        .unwrap();
    let evs = reader.events_after("a", 0, 10).unwrap();
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].id, id);
    assert_eq!(reader.last_event_id("a").unwrap(), id);
}

#[test]
fn a_corrupt_record_is_reported_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let home = private(&dir);
    let mut s = Store::open(&home).unwrap();
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    rusqlite::Connection::open(home.join(STATE_FILE))
        .unwrap()
        .execute(
            "UPDATE control_planes SET doc = '{\"name\": \"a\", \"spec\": 7}'",
            [],
        )
        .unwrap();
    let e = s.control_planes().unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("did not change it"));
}

/// A snapshot record is only restored from as what it says it is: one moved to another
/// control plane's rows, or under another id, reads as corrupt.
#[test]
fn a_snapshot_record_moved_elsewhere_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let home = private(&dir);
    let s = Store::open(&home).unwrap();
    let rec = snapshot_of("a", 1_800_000_000);
    s.record_snapshot(&rec).unwrap();
    let conn = rusqlite::Connection::open(home.join(STATE_FILE)).unwrap();
    conn.execute("UPDATE snapshots SET control_plane = 'b'", [])
        .unwrap();
    let e = s.snapshots("b").unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    conn.execute("UPDATE snapshots SET control_plane = 'a', id = 'x.db'", [])
        .unwrap();
    let e = s.snapshots("a").unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
}

#[test]
fn a_file_that_is_not_a_database_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        private(&dir).join(STATE_FILE),
        b"this is not sqlite, just some bytes that are long enough to look like a header",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let f = private(&dir).join(STATE_FILE);
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let e = Store::open(&private(&dir)).err().expect("open must fail");
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
}

#[test]
fn an_emptied_or_missing_state_file_is_not_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let home = private(&dir);
    let mut s = Store::open(&home).unwrap();
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    drop(s);
    let file = home.join(STATE_FILE);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(0)
        .unwrap();
    let e = Store::open(&home)
        .err()
        .expect("an emptied state is refused");
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 0, "left as found");
    std::fs::remove_file(&file).unwrap();
    let e = Store::open(&home)
        .err()
        .expect("a missing state is refused");
    assert!(e.to_string().contains("missing"), "{e}");
    assert!(!file.exists(), "nothing created in its place");
}

#[test]
fn a_state_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mut s = Store::open(&home).unwrap();
    s.create_control_plane(&cp("a"), None, 1).unwrap();
    drop(s);
    let chmod =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    chmod(&home, 0o755);
    let e = Store::open(&home).err().expect("a 0755 home is refused");
    assert!(
        matches!(e, StoreError::NotPrivate { mode: 0o755, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("chmod 700"), "{e}");
    chmod(&home, 0o700);
    chmod(&home.join(STATE_FILE), 0o644);
    let e = Store::open(&home)
        .err()
        .expect("a 0644 state file is refused");
    assert!(e.to_string().contains("chmod 600"), "{e}");
    // Refusing changed nothing: fixed by hand, the state is all there.
    chmod(&home.join(STATE_FILE), 0o600);
    let s = Store::open(&home).unwrap();
    assert_eq!(s.control_planes().unwrap().len(), 1);
}

#[test]
fn state_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let _s = Store::open(&home).unwrap();
    let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let mode = std::fs::metadata(home.join(STATE_FILE))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

#[cfg(test)]
mod concurrency_tests {
    use super::*;

    #[test]
    fn two_processes_opening_a_new_file_at_once_both_succeed() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let home = dir.path().join("home");
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let h = home.clone();
                    std::thread::spawn(move || Store::open(&h).map(|_| ()))
                })
                .collect();
            for h in handles {
                h.join().unwrap().unwrap();
            }
        }
    }
}

fn snapshot_of(cp: &str, at: i64) -> quorum_core::SnapshotRecord {
    quorum_core::SnapshotRecord {
        recreate: None,
        id: quorum_core::backup::snapshot_id(cp, at, 3, 0),
        control_plane: cp.into(),
        taken_at_unix_s: at,
        reason: quorum_core::SnapshotReason::OnDemand,
        from_machine: format!("{cp}-1"),
        etcd_version: "3.5.1".parse().unwrap(),
        spec_version: "3.5.1".parse().unwrap(),
        rollout_to: None,
        location: "/b".into(),
        sha256: "0".repeat(64),
        size_bytes: 20_512,
        facts: quorum_core::SnapshotFacts {
            hash: 1,
            revision: 3,
            total_keys: 7,
            total_size_bytes: 20_480,
        },
        took_ms: 1,
        verification: None,
    }
}

/// A snapshot keeps its control plane's spec and CA (`kept.rs`): the key sealed for
/// that record alone (never plaintext in the file; copied to another record it does
/// not open), opened on request, and re-wrapped with the store's other secrets when
/// the key-encryption key is rotated.
#[test]
fn a_snapshot_keeps_its_ca_sealed_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    let home = private(&dir);
    let mut s = Store::open(&home).unwrap();
    let mut tls = cp("k");
    tls.spec.insecure_plaintext = false;
    let ca = StoredCa {
        cert_pem: "CERT-OF-K".into(),
        key_pem: "PRIVATE-KEY-OF-K".into(),
    };
    s.create_control_plane(&tls, Some(&ca), 1).unwrap();
    s.record_snapshot(&snapshot_of("k", 1_800_000_000)).unwrap();
    let rec = s.snapshots("k").unwrap().remove(0);
    assert_eq!(rec.recreate.as_ref().unwrap().spec, tls.spec);
    assert_eq!(s.snapshot_ca(&rec).unwrap(), Some(ca.clone()));
    let file = std::fs::read(home.join(STATE_FILE)).unwrap();
    let plain = file.windows(16).any(|w| w == b"PRIVATE-KEY-OF-K");
    assert!(!plain, "a CA key in plaintext in the state file");
    // Copied into another snapshot's record, it does not open.
    let moved = quorum_core::SnapshotRecord {
        id: quorum_core::backup::snapshot_id("k", 1_800_000_000, 3, 1),
        ..rec.clone()
    };
    let e = s.snapshot_ca(&moved).unwrap_err();
    assert!(matches!(e, StoreError::Secrets(_)), "{e}");
    // A new key-encryption key: the CA and the snapshot's copy are both re-wrapped.
    let old = s.setting(secrets::KEY_ID_SETTING).unwrap().unwrap();
    let new = secrets::KeyFile::resolve(&home, None).add_key().unwrap();
    assert!(s
        .replace_setting(secrets::KEY_ID_SETTING, &old, &new)
        .unwrap());
    assert_eq!(s.rewrap_secrets(&new).unwrap(), 2);
    let ids = s.secrets_key_ids().unwrap();
    assert_eq!(ids.into_iter().collect::<Vec<_>>(), [(new, 2)]);
    let rec = s.snapshots("k").unwrap().remove(0);
    assert_eq!(s.snapshot_ca(&rec).unwrap(), Some(ca));
}

/// A malformed `QUORUM_SUBNET` is refused naming the variable before anything is
/// stored (it was stored, and every allocation then called the store corrupt).
#[test]
fn a_bad_subnet_variable_is_refused_by_name_and_never_stored() {
    for bad in ["99", "0.7", "300.1", "a.b", ""] {
        let e = subnet_wanted(Some(bad.into())).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("QUORUM_SUBNET {bad:?} is not a loopback subnet")),
            "{e}"
        );
    }
    assert_eq!(
        subnet_wanted(Some("99.7".into())).unwrap().as_deref(),
        Some("99.7")
    );
    assert_eq!(subnet_wanted(None).unwrap(), None);
}
