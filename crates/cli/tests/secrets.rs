//! Secrets at rest, on the embedded store with real processes: no CA key readable in the
//! state files' bytes; a state written before sealing is sealed at its first open; a
//! missing or wrong key file is refused, one line, nothing changed (and a controller
//! refuses to start); a sealed key moved to another record does not open; the
//! key-encryption key rotated under a running controller, and after a crash at each of
//! the rotation's failpoints. The management etcd's side is `ha::secrets`.

mod common;
use common::*;
use quorum_core::{ControlPlane, ControlPlaneSpec, Version};
use quorum_store::{SqliteStore, StateStore, StoredCa};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A TLS control plane's record, as `create` makes it (not started: these tests look
/// at the store).
fn tls_cp(name: &str) -> ControlPlane {
    let version: Version = OLD.parse().unwrap();
    ControlPlane {
        spec_version: 0,
        client_addresses: Vec::new(),
        ca_generation: 0,
        ca_rotation: None,
        road: None,
        v2_api_never_open: false,
        name: name.into(),
        spec: ControlPlaneSpec::new(1, version),
        deleting: false,
        rebuild: None,
    }
}

fn new_ca(name: &str) -> StoredCa {
    let ca = quorum_pki::Ca::generate(name, 1_700_000_000, 10 * 365 * 86_400).unwrap();
    StoredCa {
        cert_pem: ca.cert_pem().to_string(),
        key_pem: ca.key_pem().to_string(),
    }
}

/// The bytes a PEM's body decodes to (the raw key).
pub fn pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .concat();
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in body.bytes().filter(|c| *c != b'=') {
        acc = (acc << 6) | val(c);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// Whether `hay` holds `needle` anywhere.
pub fn holds(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Every byte of the embedded store's files (the database, its write-ahead log and its
/// shared memory), concatenated.
fn state_bytes(home: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(home).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("quorum.db") && p.is_file() {
            all.extend(std::fs::read(&p).unwrap());
        }
    }
    assert!(!all.is_empty(), "no state file in {}", home.display());
    all
}

/// The CA key as the store opens it.
fn ca_key(env: &Env, name: &str) -> String {
    let store = env.store();
    let cp = store.get_control_plane(name).unwrap();
    store.certificate_authority(&cp).unwrap().unwrap().key_pem
}

fn assert_no_key_at_rest(home: &Path, key_pem: &str) {
    let bytes = state_bytes(home);
    assert!(
        !holds(&bytes, b"PRIVATE KEY"),
        "a PEM marker in the state files"
    );
    let der = pem_der(key_pem);
    assert!(der.len() > 60, "{} bytes", der.len());
    assert!(!holds(&bytes, &der), "the raw key bytes in the state files");
    // Nor its base64 body, line by line.
    for line in key_pem
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 16)
    {
        assert!(
            !holds(&bytes, line.as_bytes()),
            "a line of the PEM in the state files"
        );
    }
}

#[test]
fn no_ca_key_is_readable_in_the_state_files() {
    let mut env = Env::new("secrets-at-rest");
    env.start_controller();
    env.create_and_wait("a", 1, OLD);
    let key = ca_key(&env, "a");
    assert!(key.contains("PRIVATE KEY"), "the store opens it");
    assert_no_key_at_rest(&env.home, &key);
    // The key file: private, and not the CA key either.
    let kf = env.home.join("secrets.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&kf).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!holds(&std::fs::read(&kf).unwrap(), &pem_der(&key)));
    let status = env.ok(&["secrets", "status"]);
    assert!(status.contains("1 with"), "{status}");
}

/// A state written before quorum sealed secrets: a plaintext CA key, written through
/// the backend directly, as that release did.
fn legacy_state(env: &Env, names: &[&str]) -> Vec<String> {
    std::fs::create_dir_all(&env.home).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut raw = SqliteStore::open(&env.home).unwrap();
    names
        .iter()
        .map(|n| {
            let ca = new_ca(n);
            StateStore::create_control_plane(&mut raw, &tls_cp(n), Some(&ca), 1).unwrap();
            ca.key_pem
        })
        .collect()
}

fn credentials(env: &Env, name: &str) -> PathBuf {
    let out = env.dir.path().join(format!("creds-{name}"));
    let _ = std::fs::remove_dir_all(&out);
    env.ok(&["credentials", name, "--out", out.to_str().unwrap()]);
    out
}

#[test]
fn a_state_from_before_sealing_is_sealed_at_its_first_open() {
    let env = Env::new("secrets-migrate");
    let keys = legacy_state(&env, &["old-a", "old-b"]);
    assert!(
        holds(&state_bytes(&env.home), b"PRIVATE KEY"),
        "the legacy state is plaintext"
    );
    // Any command opens the store: the keys are sealed, in one transaction.
    env.ok(&["list"]);
    for k in &keys {
        assert_no_key_at_rest(&env.home, k);
    }
    let status: serde_json::Value =
        serde_json::from_str(&env.ok(&["secrets", "status", "-o", "json"])).unwrap();
    let id = status["storeKey"].as_str().unwrap().to_string();
    assert_eq!(status["recordsByKey"][&id], 2, "{status:#}");
    assert_eq!(ca_key(&env, "old-a"), keys[0]);
    credentials(&env, "old-b");
}

#[test]
fn a_missing_or_wrong_key_file_is_refused_and_changes_nothing() {
    let env = Env::new("secrets-no-key");
    legacy_state(&env, &["k"]);
    env.ok(&["list"]);
    let kf = env.home.join("secrets.key");
    let kept = env.dir.path().join("kept.key");
    std::fs::rename(&kf, &kept).unwrap();
    let before = std::fs::read(env.home.join("quorum.db")).unwrap();
    let out = env.dir.path().join("creds");
    let e = env.fails(&["credentials", "k", "--out", out.to_str().unwrap()]);
    assert!(
        e.contains("does not exist") && e.contains("backup") && e.contains("--secrets-key-file"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    // `secrets status` says what it found, and fails.
    let e = env.fails(&["secrets", "status"]);
    assert!(
        e.contains("cannot open the store's secrets") && e.contains("does not exist"),
        "{e}"
    );
    // A controller refuses to start, saying why.
    let e = env.fails(&["controller", "--metrics-addr", "off"]);
    assert!(e.contains("--secrets-key-file"), "{e}");
    // Another key file: the same.
    let other = env.dir.path().join("other.key");
    let wrong = quorum_store::secrets::KeyFile::at(&other);
    wrong.add_key().unwrap();
    let e = env.fails(&[
        "--secrets-key-file",
        other.to_str().unwrap(),
        "credentials",
        "k",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(e.contains("does not hold"), "{e}");
    assert_eq!(
        std::fs::read(env.home.join("quorum.db")).unwrap(),
        before,
        "the state changed"
    );
    // The right file, given elsewhere, opens it.
    env.ok(&[
        "--secrets-key-file",
        kept.to_str().unwrap(),
        "credentials",
        "k",
        "--out",
        out.to_str().unwrap(),
    ]);
}

#[test]
fn a_sealed_key_moved_to_another_record_is_refused() {
    let env = Env::new("secrets-moved");
    legacy_state(&env, &["x", "y"]);
    env.ok(&["list"]);
    let mut raw = SqliteStore::open(&env.home).unwrap();
    let stored: std::collections::BTreeMap<String, String> =
        raw.ca_keys().unwrap().into_iter().collect();
    let n = raw
        .replace_ca_keys(&[("y".into(), stored["y"].clone(), stored["x"].clone())])
        .unwrap();
    assert_eq!(n, 1);
    drop(raw);
    let out = env.dir.path().join("creds");
    let e = env.fails(&["credentials", "y", "--out", out.to_str().unwrap()]);
    assert!(e.contains("sealed for another record"), "{e}");
    credentials(&env, "x");
}

fn rotate_status(env: &Env) -> serde_json::Value {
    serde_json::from_str(&env.ok(&["secrets", "status", "-o", "json"])).unwrap()
}

/// After a rotation finished: one key in the file, the store names it, every record
/// wrapped with it.
fn assert_rotated(env: &Env, records: usize) -> String {
    let s = rotate_status(env);
    let keys = s["keyFileKeys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{s:#}");
    let id = keys[0].as_str().unwrap().to_string();
    assert_eq!(s["storeKey"], id.as_str(), "{s:#}");
    assert_eq!(s["recordsByKey"][&id], records, "{s:#}");
    assert_eq!(s["recordsByKey"].as_object().unwrap().len(), 1, "{s:#}");
    id
}

#[test]
fn the_key_is_rotated_under_a_running_controller_and_after_a_crash_at_each_point() {
    let mut env = Env::new("secrets-rotate");
    env.start_controller();
    env.create_and_wait("r", 1, OLD);
    let mut last = assert_rotated(&env, 1);
    let out = env.ok(&["secrets", "rotate"]);
    assert!(
        out.contains("Rotated") && out.contains("1 sealed CA key re-wrapped"),
        "{out}"
    );
    let id = assert_rotated(&env, 1);
    assert_ne!(id, last);
    last = id;
    for point in quorum_controller::failpoints::SECRETS {
        let o = env
            .cmd(&["secrets", "rotate"])
            .env("FAILPOINTS", format!("{point}=return"))
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(quorum_controller::failpoints::CRASH_EXIT_CODE),
            "{point}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // Every record opens after the crash.
        credentials(&env, "r");
        let out = env.ok(&["secrets", "rotate"]);
        assert!(out.contains("re-wrapped with"), "{point}: {out}");
        let id = assert_rotated(&env, 1);
        assert_ne!(id, last, "{point}");
        last = id;
    }
    // The running controller still opens the CA: two new members get certificates.
    env.ok(&[
        "scale",
        "r",
        "--replicas",
        "3",
        "--wait",
        "--timeout",
        "120s",
    ]);
    env.wait_status("r", "three members", Duration::from_secs(60), |s| {
        s["converged"] == true && machine_versions(s).len() == 3
    });
    assert_no_key_at_rest(&env.home, &ca_key(&env, "r"));
}
