//! Secrets at rest on a management etcd: no CA key readable in any value of its keyspace;
//! a plaintext key written by an earlier release is sealed at the next connection and
//! its history compacted away; the key rotated under a running replica; a replica
//! without the key file the others use refuses to start and says why.

use super::*;
use quorum_store::{EtcdStore, StateStore, StoredCa};

/// Every value in the management etcd now, and the revision read.
fn keyspace(mgmt: &ManagementEtcd) -> (Vec<u8>, i64) {
    rt().block_on(async {
        let mut c = etcd_client::Client::connect(mgmt.endpoints(), None)
            .await
            .unwrap();
        let r = c
            .get("", Some(etcd_client::GetOptions::new().with_all_keys()))
            .await
            .unwrap();
        let mut all = Vec::new();
        for kv in r.kvs() {
            all.extend_from_slice(kv.key());
            all.extend_from_slice(kv.value());
        }
        (all, r.header().unwrap().revision())
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
