//! Deletion that can be undone (issue 29), through the `quorum` binary on real members:
//! a protected control plane is not deleted; a deleted one's snapshots stay listed; and
//! `quorum create NAME --from-snapshot newest` brings it back with every key, the same
//! CA (a client certificate issued before the deletion works against the new members)
//! and the same spec.

mod common;

use common::*;
use std::time::Instant;

const CP: &str = "u";
const KEYS: usize = 200;

/// The TLS files `quorum credentials` wrote into `dir`.
fn credentials_in(dir: &std::path::Path) -> quorum_etcd::ClientTls {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("credentials file");
    quorum_etcd::ClientTls {
        ca_pem: read("ca.crt"),
        cert_pem: read("client.crt"),
        key_pem: read("client.key"),
    }
}

#[test]
fn a_deleted_control_plane_comes_back_from_its_snapshot() {
    let mut env = Env::new("undelete");
    env.start_controller();
    env.ok(&[
        "create",
        CP,
        "--replicas",
        "3",
        "--version",
        OLD,
        "--certificate-lifetime",
        "90d",
        "--max-surge",
        "0",
        "--wait",
        "--timeout",
        "120s",
    ]);
    let keys = write_keys(&env.endpoints(CP), "undelete/", KEYS);
    env.ok(&["snapshot", CP]);
    let creds = env.dir.path().join("creds");
    env.ok(&["credentials", CP, "--out", creds.to_str().unwrap()]);
    let (spec_before, ca_before) = {
        let store = env.store();
        let cp = store.get_control_plane(CP).unwrap();
        let ca = store.certificate_authority(&cp).unwrap().unwrap();
        (cp.spec, ca.cert_pem)
    };

    // Protected: refused, nothing changed.
    env.ok(&["protect", CP]);
    let refused = env.fails(&["delete", CP, "--yes"]);
    assert!(refused.contains("deletion protection"), "{refused}");
    let s = env.status(CP);
    assert_eq!(s["machines"].as_array().unwrap().len(), 3, "{s}");
    env.ok(&["protect", CP, "--off"]);

    let said = env.ok(&["delete", CP, "--yes", "--wait", "--timeout", "120s"]);
    assert!(
        said.contains(&format!("quorum create {CP} --from-snapshot newest")),
        "delete says how to bring it back: {said}"
    );
    assert!(env.store().control_plane(CP).unwrap().is_none());
    let listed = env.ok(&["snapshots"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(CP) && l.contains("deleted")),
        "{listed}"
    );

    let started = Instant::now();
    let out = env.ok(&[
        "create",
        CP,
        "--from-snapshot",
        "newest",
        "--wait",
        "--timeout",
        "180s",
    ]);
    println!(
        "brought back in {:.1} s:\n{out}",
        started.elapsed().as_secs_f64()
    );
    let store = env.store();
    let cp = store.get_control_plane(CP).unwrap();
    assert_eq!(cp.spec, spec_before, "the spec as it was");
    let ca = store.certificate_authority(&cp).unwrap().unwrap();
    assert_eq!(ca.cert_pem, ca_before, "the CA as it was");
    assert!(
        cp.rebuild.is_none(),
        "the restore finished: {:?}",
        cp.rebuild
    );
    // Every key, read with the client certificate issued before the deletion.
    let cluster = Cluster {
        endpoints: env.endpoints(CP).endpoints,
        tls: Some(credentials_in(&creds)),
    };
    assert_keys(&cluster, "undelete/", &keys);
    let s = env.status(CP);
    assert_eq!(s["machines"].as_array().unwrap().len(), 3, "{s}");

    // Bringing back a name that exists is refused, saying what to do instead.
    let e = env.fails(&["create", CP, "--from-snapshot", "newest"]);
    assert!(e.contains("quorum restore"), "{e}");
    env.ok(&["delete", CP, "--yes", "--wait", "--timeout", "120s"]);
}

#[test]
fn bringing_back_refuses_what_it_cannot_do() {
    let env = Env::new("undelete-refusals");
    env.ok(&[
        "create",
        "x",
        "--replicas",
        "1",
        "--version",
        OLD,
        "--insecure-plaintext",
    ]);
    // No snapshot: nothing to bring back.
    env.ok(&["delete", "x", "--yes"]);
    let e = env.fails(&["create", "x", "--from-snapshot", "newest"]);
    assert!(e.contains("no snapshots"), "{e}");
    // Spec flags do not go with --from-snapshot: the snapshot's spec is the one.
    let e = env.fails(&[
        "create",
        "x",
        "--from-snapshot",
        "newest",
        "--replicas",
        "3",
    ]);
    assert!(e.contains("cannot be used with"), "{e}");
    // --version is needed without it.
    let e = env.fails(&["create", "x"]);
    assert!(e.contains("--version"), "{e}");
}

/// A deleted control plane's snapshots stay under the retention they were kept with:
/// a controller removes what it no longer keeps (file and record), and nothing else.
#[test]
fn a_deleted_control_planes_snapshots_stay_under_their_retention() {
    let mut env = Env::new("undelete-retention");
    let manifest = scheduled_backup_manifest(&env, "o", "off", 2);
    env.start_controller();
    env.ok(&[
        "apply",
        "-f",
        manifest.to_str().unwrap(),
        "--wait",
        "--timeout",
        "120s",
    ]);
    // No controller while the three are taken and the control plane deleted: one
    // would apply the retention to a live control plane at once.
    assert_eq!(env.terminate_controller(), Some(0));
    for _ in 0..3 {
        env.ok(&["snapshot", "o", "--no-verify"]);
    }
    env.ok(&["delete", "o", "--yes"]);
    let (recs, ids, files) = snapshot_records_and_files(&env, "o");
    assert_eq!((recs.len(), &ids), (3, &files), "all three stay at first");
    env.start_controller();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let kept = loop {
        let (recs, ids, files) = snapshot_records_and_files(&env, "o");
        if recs.len() == 2 && ids == files {
            break recs;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "retention never applied: {ids:?}, files {files:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let taken: Vec<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    let stayed: Vec<&str> = kept.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(stayed, taken[1..], "the newest two stay");
    let history = history(&env.store().events_after("o", 0, 1_000).unwrap());
    assert!(
        history.contains("retention no longer keeps it"),
        "{history}"
    );
}
