//! Fuzzing the state loader (proptest): whatever happens to the state file (records
//! overwritten with arbitrary bytes, the file truncated anywhere, bytes flipped), the
//! store never panics and never answers with less than it holds: it reports the file
//! as corrupt, or returns every record. Cases per property: QUORUM_FUZZ_CASES (default
//! a CI-sized number).

use proptest::prelude::*;
use quorum_core::{ControlPlane, ControlPlaneSpec, RolloutStrategy, Version};
use quorum_store::{Store, StoreError, STATE_FILE};
use std::path::{Path, PathBuf};

const CONTROL_PLANES: usize = 3;
const MACHINES_EACH: usize = 3;

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("QUORUM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A home holding a few control planes with machines, closed (WAL checkpointed).
fn populated() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mut s = Store::open(&home).unwrap();
    for i in 0..CONTROL_PLANES {
        let cp = ControlPlane {
            spec_version: 0,
            client_addresses: Vec::new(),
            ca_generation: 0,
            ca_rotation: None,
            road: None,
            v2_api_never_open: false,
            name: format!("cp{i}"),
            spec: ControlPlaneSpec {
                recovery: Default::default(),
                deletion_protection: false,
                replicas: 3,
                version: Version::new(3, 5, 1),
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
        };
        s.create_control_plane(&cp, None, 1).unwrap();
        for _ in 0..MACHINES_EACH {
            s.allocate_machine(&cp.name, true, cp.spec.version, None, None, &|_| true)
                .unwrap();
        }
    }
    drop(s);
    (dir, home)
}

/// What a reader gets: Ok with everything, or an error. Never a panic, never less.
fn read_all(home: &Path) -> Result<(usize, usize), StoreError> {
    let s = Store::open(home)?;
    let cps = s.control_planes()?;
    let mut machines = 0;
    for cp in &cps {
        machines += s.machines(&cp.name)?.len();
    }
    Ok((cps.len(), machines))
}

fn assert_all_or_error(home: &Path) -> Result<(), TestCaseError> {
    match read_all(home) {
        Ok(counts) => prop_assert_eq!(counts, (CONTROL_PLANES, CONTROL_PLANES * MACHINES_EACH)),
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(!msg.is_empty() && !msg.contains('\n'), "{msg}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(64))]

    /// A record overwritten with arbitrary text is reported, never skipped.
    #[test]
    fn overwritten_records_are_reported(
        table in prop::sample::select(vec!["control_planes", "machines"]),
        row in 0usize..CONTROL_PLANES,
        doc in ".{0,200}",
    ) {
        let (_dir, home) = populated();
        let conn = rusqlite::Connection::open(home.join(STATE_FILE)).unwrap();
        conn.execute(
            &format!("UPDATE {table} SET doc = ?1 WHERE rowid = (SELECT rowid FROM {table} LIMIT 1 OFFSET ?2)"),
            rusqlite::params![doc, row as i64],
        ).unwrap();
        drop(conn);
        match read_all(&home) {
            // The new text may happen to be a valid record (for example the same one).
            Ok(counts) => prop_assert_eq!(counts, (CONTROL_PLANES, CONTROL_PLANES * MACHINES_EACH)),
            Err(e) => prop_assert!(matches!(e, StoreError::Corrupt { .. }), "{e}"),
        }
    }

    /// A file truncated anywhere is reported or (cut only in free space) read whole.
    #[test]
    fn truncated_files_are_reported(keep_permille in 0u64..1000) {
        let (_dir, home) = populated();
        let file = home.join(STATE_FILE);
        let len = std::fs::metadata(&file).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(len * keep_permille / 1000).unwrap();
        drop(f);
        assert_all_or_error(&home)?;
    }

    /// Flipped bytes never crash the loader or make it answer with fewer records.
    #[test]
    fn flipped_bytes_never_crash(flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8)) {
        let (_dir, home) = populated();
        let file = home.join(STATE_FILE);
        let mut bytes = std::fs::read(&file).unwrap();
        for (at, mask) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
        }
        std::fs::write(&file, &bytes).unwrap();
        assert_all_or_error(&home)?;
    }
}
