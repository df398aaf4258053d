//! `quorum demo --hosts 3`: the demo's upgrade with each member on a host of its own
//! (network namespaces on a bridge, an agent in each), every key verified, and nothing
//! left behind: no namespace, no bridge, no process of the demo's hosts.

use std::process::Command;

#[test]
fn the_demo_upgrades_a_control_plane_on_three_hosts_and_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_quorum"))
        .args(["demo", "--hosts", "3", "--keys", "300", "--timeout", "5m"])
        .env("TMPDIR", tmp.path())
        .env_remove("QUORUM_HOME")
        .env_remove("QUORUM_STORE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}");
    for want in [
        "== 0. 3 hosts",
        "hosts ready in",
        "on 3 hosts, at most one member on each",
        "upgrade to etcd 3.5.30, in place",
        "✓ all 300 keys read back intact",
        "✓ every member runs etcd 3.5.30",
        "done: every process the demo started has stopped",
    ] {
        assert!(stdout.contains(want), "{want:?} missing:\n{stdout}");
    }
    // Each member on its own host: three distinct addresses in the endpoints.
    let endpoints = stdout
        .lines()
        .find(|l| l.starts_with("== 2."))
        .unwrap()
        .to_string();
    let hosts: std::collections::BTreeSet<&str> = endpoints
        .split([',', ' '])
        .filter_map(|w| w.strip_prefix("https://"))
        .filter_map(|w| w.split(':').next())
        .collect();
    assert_eq!(hosts.len(), 3, "{endpoints}");
    assert!(hosts.iter().all(|h| h.starts_with("198.18.")), "{hosts:?}");
    // The namespaces it made are gone, and their bridge.
    let namespaces: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.split("(namespace ").nth(1))
        .filter_map(|r| r.split(')').next())
        .map(String::from)
        .collect();
    assert_eq!(namespaces.len(), 3, "{stdout}");
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for ns in &namespaces {
        assert!(
            !listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns.as_str())),
            "{ns} left behind: {listed}"
        );
    }
    let third = namespaces[0]
        .trim_start_matches('q')
        .split('h')
        .next()
        .unwrap();
    let bridge = Command::new("ip")
        .args(["link", "show", &format!("qb{third}")])
        .output()
        .unwrap();
    assert!(!bridge.status.success(), "bridge qb{third} left behind");
}
