//! Secrets at rest on a management etcd: no CA key readable in any value of its keyspace;
//! a plaintext key written by an earlier release is sealed at the next connection and
//! its history compacted away; the key rotated under a running replica; a replica
//! without the key file the others use refuses to start and says why.

use super::*;
use quorum_store::{EtcdStore, StateStore, StoredCa};

/// Every value in the management etcd now, and the revision read. A member that was
/// just restarted answers only once it has rejoined: a failed read is tried again,
/// within a deadline.
fn keyspace(mgmt: &ManagementEtcd) -> (Vec<u8>, i64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match read_keyspace(mgmt) {
            Ok(r) => return r,
            Err(e) => assert!(Instant::now() < deadline, "the management etcd: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read_keyspace(mgmt: &ManagementEtcd) -> Result<(Vec<u8>, i64), etcd_client::Error> {
    rt().block_on(async {
        let mut c = etcd_client::Client::connect(mgmt.endpoints(), None).await?;
        let r = c
            .get("", Some(etcd_client::GetOptions::new().with_all_keys()))
            .await?;
        let mut all = Vec::new();
        for kv in r.kvs() {
            all.extend_from_slice(kv.key());
            all.extend_from_slice(kv.value());
        }
        Ok((all, r.header().map_or(0, |h| h.revision())))
    })
}

fn holds(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn no_ca_key_is_readable_in_the_management_etcd_and_a_replica_without_the_key_refuses() {
    let (env, mgmt) = ha_env("ha-secrets");
    let _r1 = Replica::start(&env, "r1", &[]);
    env.create_and_wait("e", 1, OLD);
    let (bytes, _) = keyspace(&mgmt);
    assert!(
        holds(&bytes, b"quorum-sealed:v1:"),
        "the sealed key is there"
    );
    assert!(
        !holds(&bytes, b"PRIVATE KEY"),
        "a PEM marker in the management etcd"
    );

    // A plaintext key, as an earlier release wrote it, through the backend directly.
    let quorum_store::StoreLocation::Etcd(l) = env.store_location() else {
        unreachable!()
    };
    let mut raw = EtcdStore::connect(&l).unwrap();
    let ca = quorum_pki::Ca::generate("legacy", 1_700_000_000, 86_400 * 365).unwrap();
    let mut cp = env.store().get_control_plane("e").unwrap();
    cp.name = "legacy".into();
    cp.spec.paused = true; // nothing to start: only its record matters here
    StateStore::create_control_plane(
        &mut raw,
        &cp,
        Some(&StoredCa {
            cert_pem: ca.cert_pem().into(),
            key_pem: ca.key_pem().into(),
        }),
        1,
    )
    .unwrap();
    let (bytes, plain_rev) = keyspace(&mgmt);
    assert!(holds(&bytes, b"PRIVATE KEY"), "written in plaintext");
    // The next connection seals it, and compacts the history that held it.
    let store = env.store();
    let (bytes, _) = keyspace(&mgmt);
    assert!(
        !holds(&bytes, b"PRIVATE KEY"),
        "sealed at the next connection"
    );
    let opened = store.certificate_authority(&cp).unwrap().unwrap();
    assert_eq!(opened.key_pem, ca.key_pem());
    let old = rt().block_on(async {
        let mut c = etcd_client::Client::connect(mgmt.endpoints(), None)
            .await
            .unwrap();
        c.get(
            "",
            Some(
                etcd_client::GetOptions::new()
                    .with_all_keys()
                    .with_revision(plain_rev),
            ),
        )
        .await
    });
    let e = old.expect_err("the plaintext revision is compacted");
    assert!(e.to_string().contains("compacted"), "{e}");

    // The key rotated while r1 runs: every record re-wrapped (the legacy one too), and
    // r1 (same key file, read again for the new key) runs a new TLS control plane.
    let out = env.ok(&["secrets", "rotate"]);
    assert!(out.contains("2 sealed CA keys re-wrapped"), "{out}");
    env.create_and_wait("f", 1, OLD);
    let status: serde_json::Value =
        serde_json::from_str(&env.ok(&["secrets", "status", "-o", "json"])).unwrap();
    let key = status["storeKey"].as_str().unwrap();
    assert_eq!(status["recordsByKey"][key], 3, "{status:#}");

    // A replica given another key file refuses to start, saying why.
    let other = env.dir.path().join("other.key");
    let mut r2 = Replica::start_with(
        &env,
        "r2",
        &[],
        &["--secrets-key-file", other.to_str().unwrap()],
    );
    let code = r2.exit_code_within(Duration::from_secs(30));
    assert!(code.is_some_and(|c| c != 0), "r2 should refuse: {code:?}");
    let log = r2.log_text();
    assert!(
        log.contains("does not exist") && log.contains("--secrets-key-file"),
        "{log}"
    );
}

/// A CA rotation on a management etcd, with what fails there: the leading replica
/// killed (SIGKILL) and the management etcd's leader killed right after phase 2 is
/// recorded. The standby finishes the rotation: every key intact, quorum kept, the
/// same members, the new CA in force with its key sealed, no new-CA record left.
#[test]
fn a_ca_rotation_survives_its_leader_and_the_management_leader_killed() {
    let (env, mgmt) = ha_env("ha-ca-rotation");
    let mut r1 = Replica::start(&env, "r1", &[]);
    wait_leader(&env, "r1", Duration::from_secs(30));
    let _r2 = Replica::start(&env, "r2", &[]);
    let cp = "rot";
    env.ok(&[
        "create",
        cp,
        "--replicas",
        "3",
        "--version",
        NEW,
        "--strategy",
        "InPlace",
        "--wait",
        "--timeout",
        "180s",
    ]);
    let keys = write_keys(&env.endpoints(cp), "r/", 200);
    let ids = member_ids(&env, cp);
    let watch = QuorumWatch::start(&env, cp);
    let after = env.store().last_event_id(cp).unwrap();
    env.ok(&["rotate-ca", cp, "--yes"]);
    wait_event(
        &env,
        cp,
        after,
        ActionKind::SetCaPhase,
        Duration::from_secs(120),
    );
    let leader = store_faults::management_leader(&env);
    r1.kill9();
    mgmt.kill(leader).unwrap();
    wait_leader(&env, "r2", Duration::from_secs(30));
    env.wait_status(cp, "the rotation finished", Duration::from_secs(240), |s| {
        s["converged"] == true && s.get("caRotation").is_none() && s["caGeneration"] == 1
    });
    let (samples, violations) = watch.finish();
    assert!(samples > 10);
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    assert_keys(&env.endpoints(cp), "r/", &keys);
    assert_eq!(member_ids(&env, cp), ids, "the same members");
    let store = env.store();
    assert!(store.next_certificate_authority(cp).unwrap().is_none());
    let control_plane = store.get_control_plane(cp).unwrap();
    let ca = store
        .certificate_authority(&control_plane)
        .unwrap()
        .unwrap();
    assert_eq!(
        quorum_pki::names(&ca.cert_pem).unwrap().0,
        "quorum rot CA 2"
    );
    // The killed management member back (it catches up), then every value read.
    mgmt.restart(leader).unwrap();
    let (bytes, _) = keyspace(&mgmt);
    assert!(
        !holds(&bytes, b"PRIVATE KEY"),
        "a PEM marker in the management etcd"
    );
    assert!(
        !holds(&bytes, ca.key_pem.as_bytes()),
        "the new CA's key in the management etcd"
    );
}
