//! A state file written by an earlier release (see `fixtures/README.md`) opens with this
//! one: it is migrated to the current schema and every record and event reads back.

use quorum_core::ActionKind;
use quorum_store::{Event, EventKind, NewEvent, StepOutcome, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Written by quorum at commit c1a7ab4 (schema version 2).
const FIXTURE: &str = "tests/fixtures/state-c1a7ab4.db";

/// The action kinds of release c1a7ab4 (its `ActionKind::ALL`): the fixture holds an
/// event of each.
const ACTION_KINDS_OF_C1A7AB4: &[&str] = &[
    "allocate-machine",
    "start-machine",
    "add-learner",
    "promote",
    "mark-deleting",
    "move-leader",
    "remove-member",
    "stop-machine",
    "delete-machine",
    "forget-control-plane",
];

/// A private home holding a copy of the fixture (the store refuses a state others can
/// read, and opening migrates the file: the fixture itself stays as it was committed).
fn home_with_fixture(dir: &tempfile::TempDir) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = home.join(quorum_store::STATE_FILE);
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE), &file).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    home
}

fn raw(home: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(home.join(quorum_store::STATE_FILE)).unwrap()
}

fn schema(home: &Path) -> String {
    raw(home)
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .unwrap()
}

/// (control plane, kind) -> count, as the file holds them.
fn raw_kinds(home: &Path) -> BTreeMap<(String, String), usize> {
    let conn = raw(home);
    let mut stmt = conn
        .prepare("SELECT control_plane, kind, count(*) FROM events GROUP BY control_plane, kind")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok(((r.get(0)?, r.get(1)?), r.get::<_, i64>(2)? as usize))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// What every event of an old history must read as: a known kind, the outcome its
/// `ok` and kind imply, and a step's machine where the step had one.
fn check_old_event(e: &Event) {
    assert!(!matches!(e.kind, EventKind::Other(_)), "{e:?}");
    let want = match (&e.kind, e.ok) {
        (_, true) => StepOutcome::Ok,
        (EventKind::Refused, false) => StepOutcome::Refused,
        (EventKind::Error, false) => StepOutcome::Failed,
        _ => panic!("an old release wrote only refused and error events as not ok: {e:?}"),
    };
    assert_eq!(e.outcome, want, "{e:?}");
    match e.kind {
        EventKind::Action(k)
            if !matches!(
                k,
                ActionKind::AllocateMachine | ActionKind::ForgetControlPlane
            ) =>
        {
            assert!(e.machine.is_some(), "{e:?}")
        }
        EventKind::Refused | EventKind::LbAdd | EventKind::LbDrain | EventKind::LbDelete => {
            assert!(e.machine.is_some(), "{e:?}")
        }
        _ => {}
    }
    assert!(e.by.is_some() && !e.message.is_empty(), "{e:?}");
}

#[test]
fn a_state_file_of_release_c1a7ab4_opens_and_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let home = home_with_fixture(&dir);
    assert_eq!(schema(&home), "2");
    let before = raw_kinds(&home);
    // Two opens, as the CLI and a controller would: the second finds it migrated.
    let s = Store::open(&home).unwrap();
    let again = Store::open(&home).unwrap();
    assert_eq!(schema(&home), "3");
    s.check_integrity().unwrap();

    // Every record.
    let cps = s.control_planes().unwrap();
    let names: Vec<&str> = cps.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(cps[0].spec.version.to_string(), "3.5.0");
    assert!(cps[0].spec.haproxy.is_some());
    let machines = |cp: &str| -> Vec<String> {
        s.machines(cp)
            .unwrap()
            .into_iter()
            .map(|m| m.name)
            .collect()
    };
    assert_eq!(machines("a"), ["a-4", "a-5", "a-6"]);
    assert_eq!(machines("c"), ["c-1"]);
    // Written before machine records had a remediation: they read as having none.
    let docs: Vec<String> = {
        let conn = raw(&home);
        let mut stmt = conn.prepare("SELECT doc FROM machines").unwrap();
        let rows = stmt.query_map([], |r| r.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(docs.len(), 4);
    assert!(docs.iter().all(|d| !d.contains("remediation")), "{docs:?}");
    for cp in ["a", "c"] {
        for m in s.machines(cp).unwrap() {
            assert_eq!(m.remediation, None, "{m:?}");
        }
    }
    assert!(s.certificate_authority(&cps[0]).unwrap().is_none());
    assert!(s.certificate_authority(&cps[1]).unwrap().is_some());
    for cp in ["a", "c"] {
        assert!(s.published_status(cp).unwrap().is_some(), "{cp}");
    }
    assert_eq!(s.setting("subnet").unwrap().as_deref(), Some("77.7"));
    // The state file always kept when each control plane was created.
    let created = s.created_at_ms("a").unwrap().expect("a creation time");
    assert!(created > 1_600_000_000_000, "{created}");
    assert!(s.last_controller_heartbeat().unwrap().is_some());

    // Every event, of the control planes that exist and of one deleted (its history
    // outlives it), with the kinds the file holds.
    let mut read: BTreeMap<(String, String), usize> = BTreeMap::new();
    for cp in ["a", "b", "c"] {
        let events = again.events_after(cp, 0, 10_000).unwrap();
        assert!(!events.is_empty(), "{cp}");
        for e in &events {
            check_old_event(e);
            *read
                .entry((cp.to_string(), e.kind.as_str().to_string()))
                .or_default() += 1;
        }
    }
    assert_eq!(read, before);
    // The file holds every kind of event the release wrote.
    let kinds: std::collections::BTreeSet<&str> = before.keys().map(|(_, k)| k.as_str()).collect();
    // Every action kind that release knew (kinds added since cannot be in it), each
    // still read as that action.
    for k in ACTION_KINDS_OF_C1A7AB4 {
        assert!(kinds.contains(k), "no {k} event in the fixture");
        assert!(
            matches!(EventKind::parse(k), EventKind::Action(a) if a.as_str() == *k),
            "{k}"
        );
    }
    for k in [
        "converged",
        "endpoints",
        "refused",
        "error",
        "lb-add",
        "lb-drain",
        "lb-delete",
    ] {
        assert!(kinds.contains(k), "no {k} event in the fixture");
    }

    // The migrated file takes events of this release, outcome included.
    let last = s.last_event_id("a").unwrap();
    let id = s
        .record_event(
            "a",
            1,
            &NewEvent {
                machine: Some("a-5"),
                by: Some("test"),
                ..NewEvent::new(ActionKind::AddLearner, StepOutcome::Refused, "m")
            },
        )
        .unwrap();
    let new = again.events_after("a", last, 10).unwrap();
    assert_eq!(new.len(), 1);
    assert_eq!(
        (new[0].id, &new[0].kind, new[0].outcome, new[0].ok),
        (
            id,
            &EventKind::Action(ActionKind::AddLearner),
            StepOutcome::Refused,
            false
        )
    );
}
