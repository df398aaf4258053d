//! `quorum versions` and `quorum versions add` (issue 31), into an etcd directory of the
//! test's own: from a release tarball in etcd's layout that the test builds from the
//! installed 3.5.30 binaries, from Debian's packages `scripts/install.sh` fetched and
//! checked (kept in `<etcd dir>/.packages/`), and from a directory; with wrong digests,
//! a lying name and a half package refused, installing nothing.

mod common;

use common::*;
use quorum_provider::{default_etcd_dir, installed_versions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `quorum versions ARGS` with `QUORUM_ETCD_DIR=etcd_dir`.
fn versions(env: &Env, etcd_dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["versions"];
    all.extend(args);
    env.cmd(&all)
        .env("QUORUM_ETCD_DIR", etcd_dir)
        .output()
        .expect("run quorum")
}

fn ok(out: &Output) -> String {
    let text = printed(out);
    assert!(out.status.success(), "{text}");
    text
}

fn fails(out: &Output) -> String {
    let text = printed(out);
    assert!(!out.status.success(), "succeeded: {text}");
    text
}

fn sha256(path: &Path) -> String {
    quorum_provider::install::sha256_hex(&std::fs::read(path).unwrap())
}

/// `etcd-v3.5.30-linux-amd64.tar.gz` in etcd's layout, from the installed binaries.
fn release_tarball(dir: &Path, version: &str) -> PathBuf {
    let top = format!("etcd-v{version}-linux-amd64");
    let inside = dir.join(&top);
    std::fs::create_dir_all(&inside).unwrap();
    for b in ["etcd", "etcdctl", "etcdutl"] {
        let from = default_etcd_dir().join(version).join(b);
        std::fs::copy(&from, inside.join(b))
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/install.sh installs it)", from.display()));
    }
    std::fs::write(inside.join("README.md"), "etcd\n").unwrap();
    let tarball = dir.join(format!("{top}.tar.gz"));
    let status = Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir)
        .arg(&top)
        .status()
        .unwrap();
    assert!(status.success());
    tarball
}

#[test]
fn a_release_is_added_from_a_tarball_a_directory_and_debian_packages() {
    let env = Env::new("versions-add");
    let etcd_dir = env.dir.path().join("etcd");
    let e = fails(&versions(&env, &etcd_dir, &[]));
    assert!(
        e.contains("no etcd installed") && e.contains("versions add"),
        "{e}"
    );

    // A tarball, checked against its digest.
    let tarball = release_tarball(env.dir.path(), "3.5.30");
    let t = tarball.to_str().unwrap();
    let wrong = "0".repeat(64);
    let e = fails(&versions(&env, &etcd_dir, &["add", t, "--sha256", &wrong]));
    assert!(e.contains("does not match its SHA-256"), "{e}");
    assert!(installed_versions(&etcd_dir).is_empty());
    let sum = sha256(&tarball);
    let out = ok(&versions(&env, &etcd_dir, &["add", t, "--sha256", &sum]));
    assert!(out.contains("added etcd 3.5.30"), "{out}");
    let out = ok(&versions(&env, &etcd_dir, &["add", t, "--sha256", &sum]));
    assert!(out.contains("nothing changed"), "{out}");
    assert_eq!(ok(&versions(&env, &etcd_dir, &[])).trim(), "3.5.30");

    // A tarball whose name claims another release than its binaries report.
    let liar = env.dir.path().join("etcd-v3.5.31-linux-amd64.tar.gz");
    std::fs::copy(&tarball, &liar).unwrap();
    let e = fails(&versions(&env, &etcd_dir, &["add", liar.to_str().unwrap()]));
    assert!(
        e.contains("says etcd 3.5.31") && e.contains("report 3.5.30"),
        "{e}"
    );

    // Debian's packages: the server's alone lacks etcdctl, and says where it is.
    let packages = default_etcd_dir().join(".packages");
    let server = packages.join("etcd-server_3.5.16-4_amd64.deb");
    let client = packages.join("etcd-client_3.5.16-4_amd64.deb");
    let (s, c) = (server.to_str().unwrap(), client.to_str().unwrap());
    let e = fails(&versions(&env, &etcd_dir, &["add", s]));
    assert!(e.contains("no etcdctl") && e.contains("etcd-client"), "{e}");
    let sums = [sha256(&server), sha256(&client)];
    let args = ["add", s, c, "--sha256", &sums[0], "--sha256", &sums[1]];
    let out = ok(&versions(&env, &etcd_dir, &args));
    assert!(out.contains("added etcd 3.5.16"), "{out}");

    // A directory, with the version it is said to be.
    let dir = default_etcd_dir().join("3.5.1");
    let d = dir.to_str().unwrap();
    let e = fails(&versions(
        &env,
        &etcd_dir,
        &["add", d, "--version", "3.5.2"],
    ));
    assert!(e.contains("--version says etcd 3.5.2"), "{e}");
    let out = ok(&versions(
        &env,
        &etcd_dir,
        &["add", d, "--version", "3.5.1"],
    ));
    assert!(
        out.contains("added etcd 3.5.1") && out.contains("known data"),
        "{out}"
    );
    let listed = ok(&versions(&env, &etcd_dir, &[]));
    let names: Vec<&str> = listed
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(names, ["3.5.1", "3.5.16", "3.5.30"], "{listed}");
    // Every added binary runs and says its version.
    for v in ["3.5.1", "3.5.16", "3.5.30"] {
        for b in ["etcd", "etcdctl", "etcdutl"] {
            let path = etcd_dir.join(v).join(b);
            let got = quorum_provider::release::reported_version(b, &path).unwrap();
            assert_eq!(got.to_string(), v, "{}", path.display());
        }
    }
    // Nothing half-made is left beside them.
    let left: Vec<String> = std::fs::read_dir(&etcd_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");

    // A path that is none of the three.
    let e = fails(&versions(&env, &etcd_dir, &["add", "/etc/hostname"]));
    assert!(e.contains("neither a directory"), "{e}");
    let e = fails(&versions(&env, &etcd_dir, &["add"]));
    assert!(e.contains("PATH"), "{e}");
}

/// What `scripts/install.sh` leaves: every version the issue names.
#[test]
fn the_install_leaves_the_current_releases() {
    let env = Env::new("versions-list");
    let out = env.ok(&["versions"]);
    for v in ["3.4.23", "3.5.0", "3.5.1", "3.5.16", "3.5.30"] {
        assert!(out.lines().any(|l| l.starts_with(v)), "{v} missing:\n{out}");
    }
}
