//! CA rotation on real etcd (`quorum rotate-ca`): a 3-member control plane rotated in
//! place, and by replacement, under an independent client workload that checks every
//! acknowledged write, with a client that holds the old CA's certificate and trusts
//! only the old CA.

mod common;

use common::workload::*;
use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a whole rotation may take here before the test gives up.
const ROTATION_DEADLINE: Duration = Duration::from_secs(240);

/// The client endpoints quorum publishes (healthy voters, none leaving).
fn endpoints(env: &Env, name: &str) -> Vec<String> {
    env.status(name)["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// A linearizable read with `creds` through the published endpoints: `Ok` once one of
/// up to three attempts (an endpoint may go away between the status and the read)
/// gets in, else the last error.
fn read_with(env: &Env, name: &str, creds: &Creds) -> Result<(), String> {
    let mut last = Err(String::new());
    for _ in 0..3 {
        last = read_once(&endpoints(env, name), creds);
        if last.is_ok() {
            break;
        }
    }
    last
}

/// One linearizable read with `creds` through `endpoints`, within a deadline.
fn read_once(endpoints: &[String], creds: &Creds) -> Result<(), String> {
    try_read(endpoints, creds.options())
}

/// The phase the status shows (`None` without a rotation), and the CA generation.
fn phase(s: &serde_json::Value) -> (Option<String>, u64) {
    (
        s["caRotation"]["phase"].as_str().map(str::to_string),
        s["caGeneration"].as_u64().unwrap_or(0),
    )
}

fn tls_file(env: &Env, machine: &str, file: &str) -> String {
    std::fs::read_to_string(
        env.home
            .join("machines")
            .join(machine)
            .join("tls")
            .join(file),
    )
    .unwrap()
}

/// Rotates `name` (3 members, created with `create_args`) under the workload; returns a
/// line for the report.
fn rotate_under_load(test: &str, create_args: &[&str]) -> String {
    let mut env = Env::new(test);
    let name = "rc";
    env.start_controller();
    let mut args = vec!["create", name, "--replicas", "3", "--version", NEW];
    args.extend_from_slice(create_args);
    args.extend_from_slice(&["--wait", "--timeout", "180s"]);
    env.ok(&args);
    let dir: PathBuf = env.dir.path().to_path_buf();
    // The old-CA client: a certificate from the old CA, trusting only the old CA.
    let old = Creds::fetch(&env, name, &dir.join("old"));
    assert_eq!(old.ca.matches("BEGIN CERTIFICATE").count(), 1);
    let eps = endpoints(&env, name);
    read_with(&env, name, &old).expect("the old-CA client works before the rotation");
    let ids_before: Vec<u64> = member_ids(&env, name);

    let watch = QuorumWatch::start(&env, name);
    let work = Workload::start(eps.clone(), old.clone());
    let t = Instant::now();
    let out = env.ok(&["rotate-ca", name, "--yes"]);
    assert!(out.contains("phase 1 of 3"), "{out}");
    // Both CAs' keys are stored sealed: no private key in the state's bytes.
    assert!(
        !state_bytes(&env.home)
            .windows(b"PRIVATE KEY".len())
            .any(|w| w == b"PRIVATE KEY"),
        "a private key in the state files during the rotation"
    );
    // Again: nothing changes.
    let again = env.ok(&["rotate-ca", name, "--yes"]);
    assert!(again.contains("already under way"), "{again}");

    let mut seen: Vec<(String, f64)> = vec![];
    let mut old_checked = BTreeMap::new();
    let mut fresh: Option<Creds> = None;
    loop {
        assert!(
            t.elapsed() < ROTATION_DEADLINE,
            "no end of the rotation after {:?}; phases seen {seen:?}\n{}",
            t.elapsed(),
            env.ok(&["status", name])
        );
        let s = env.status(name);
        let (p, generation) = phase(&s);
        work.follow(
            s["endpoints"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect(),
        );
        let label = p
            .clone()
            .unwrap_or_else(|| format!("done (generation {generation})"));
        if seen.last().map(|(l, _)| l) != Some(&label) {
            seen.push((label.clone(), t.elapsed().as_secs_f64()));
        }
        match p.as_deref() {
            // Before the last phase, the old-CA client gets in: once in phase 1, once
            // in phase 2.
            Some(ph @ ("trust" | "reissue")) if !old_checked.contains_key(ph) => {
                let r = read_with(&env, name, &old);
                old_checked.insert(ph.to_string(), r.clone());
                assert!(
                    r.is_ok(),
                    "the old-CA client was refused in phase {ph}: {r:?}"
                );
            }
            _ => {}
        }
        // Phase 2: the client gets new credentials, as `quorum credentials` tells it to.
        if p.as_deref() == Some("reissue") && fresh.is_none() {
            let c = Creds::fetch(&env, name, &dir.join("new"));
            assert_eq!(c.ca.matches("BEGIN CERTIFICATE").count(), 2, "both CAs");
            work.use_creds(c.clone());
            fresh = Some(c);
        }
        if p.is_none() && generation == 1 && s["converged"] == true {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = t.elapsed();
    let (acked, failures, attempts) = work.finish();
    let (samples, violations) = watch.finish();
    assert!(samples > 10, "the quorum watch took only {samples} samples");
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    let eps = endpoints(&env, name);

    // After the last phase, the old CA's client is refused; the new credentials work.
    let refused = read_with(&env, name, &old);
    assert!(refused.is_err(), "the old-CA client still gets in");
    let fresh = fresh.expect("new credentials were fetched in phase 2");
    read_with(&env, name, &fresh).expect("the new credentials work");
    // Credentials issued now trust the new CA alone.
    let now = Creds::fetch(&env, name, &dir.join("after"));
    assert_eq!(now.ca.matches("BEGIN CERTIFICATE").count(), 1);
    read_with(&env, name, &now).expect("credentials after the rotation work");
    assert_acked(&eps, &now, &acked);
    assert!(
        acked.len() > 20,
        "the workload wrote only {} keys",
        acked.len()
    );

    // Every member: certificates from the new CA only, trusting it alone.
    let store = env.store();
    let cp = store.get_control_plane(name).unwrap();
    let ca = store.certificate_authority(&cp).unwrap().unwrap();
    let new_cn = quorum_pki::names(&ca.cert_pem).unwrap().0;
    assert_eq!(new_cn, format!("quorum {name} CA 2"));
    assert!(store.next_certificate_authority(name).unwrap().is_none());
    for m in store.machines(name).unwrap() {
        assert_eq!(
            tls_file(&env, &m.name, "ca.crt").trim(),
            ca.cert_pem.trim(),
            "{}",
            m.name
        );
        for f in ["server.crt", "peer.crt"] {
            let (_, issuer) = quorum_pki::names(&tls_file(&env, &m.name, f)).unwrap();
            assert_eq!(issuer, new_cn, "{} {f}", m.name);
        }
    }
    let phases: Vec<&str> = seen.iter().map(|(l, _)| l.as_str()).collect();
    assert!(phases.contains(&"reissue"), "{seen:?}");
    assert_eq!(
        old_checked.len(),
        2,
        "the old-CA client was tried in phases 1 and 2: {seen:?}"
    );
    let history = store.events_after(name, 0, 10_000).unwrap();
    let ok = |k: quorum_core::ActionKind| {
        history
            .iter()
            .filter(|e| e.ok && e.kind == quorum_store::EventKind::Action(k))
            .count()
    };
    assert_eq!(ok(quorum_core::ActionKind::SetCaPhase), 2);
    assert_eq!(ok(quorum_core::ActionKind::FinishCaRotation), 1);
    let in_place = create_args.contains(&"InPlace");
    if in_place {
        // The same members throughout: no membership change.
        assert_eq!(member_ids(&env, name), ids_before);
        assert_eq!(ok(quorum_core::ActionKind::AddLearner), 0);
        assert_eq!(ok(quorum_core::ActionKind::BeginInPlace), 9);
    } else {
        assert_eq!(ok(quorum_core::ActionKind::AddLearner), 9);
    }
    let failed: u64 = failures.values().sum();
    let line = format!(
        "{test}: rotation took {:.1}s (phases at {}), {attempts} writes tried, {} acknowledged and all read back, {failed} failed {failures:?}",
        took.as_secs_f64(),
        seen.iter()
            .map(|(l, s)| format!("{l} {s:.1}s"))
            .collect::<Vec<_>>()
            .join(", "),
        acked.len(),
    );
    println!("{line}");
    line
}

/// The bytes of the state file and its write-ahead log.
fn state_bytes(home: &Path) -> Vec<u8> {
    let mut out = vec![];
    for e in std::fs::read_dir(home).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_string_lossy().to_string();
        if file.starts_with("quorum.db") && p.is_file() {
            out.extend(std::fs::read(&p).unwrap());
        }
    }
    assert!(!out.is_empty(), "no state file in {}", home.display());
    out
}

/// The member ids of a control plane's machines, sorted (from `status`).
fn member_ids(env: &Env, name: &str) -> Vec<u64> {
    let mut ids: Vec<u64> = env.status(name)["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["memberId"].as_str())
        .map(|s| u64::from_str_radix(s, 16).unwrap())
        .collect();
    ids.sort();
    ids
}

#[test]
fn the_ca_is_rotated_in_place_under_a_client_workload() {
    rotate_under_load("ca-rotate-inplace", &["--strategy", "InPlace"]);
}

#[test]
fn the_ca_is_rotated_by_replacement_under_a_client_workload() {
    rotate_under_load("ca-rotate-replace", &[]);
}

#[test]
fn rotate_ca_refuses_what_it_cannot_rotate_and_changes_nothing() {
    let mut env = Env::new("ca-rotate-refusals");
    env.start_controller();
    env.ok(&[
        "create",
        "plain",
        "--replicas",
        "1",
        "--version",
        NEW,
        "--insecure-plaintext",
        "--wait",
        "--timeout",
        "120s",
    ]);
    let e = env.fails(&["rotate-ca", "nope"]);
    assert!(e.contains("nope"), "{e}");
    let e = env.fails(&["rotate-ca", "plain"]);
    assert!(e.contains("no CA to rotate"), "{e}");
    let cp = env.store().get_control_plane("plain").unwrap();
    assert_eq!((cp.ca_generation, cp.ca_rotation), (0, None));
    let e = env.fails(&["rotate-ca"]);
    assert!(e.to_lowercase().contains("usage"), "{e}");
    // Issue 29 fault 7: it says what it will do, and starts nothing unasked.
    env.ok(&["create", "t", "--replicas", "1", "--version", NEW]);
    let said = env.ok(&["rotate-ca", "t", "--dry-run"]);
    assert!(
        said.contains("generation 0") && said.contains("dry run"),
        "{said}"
    );
    let e = env.fails(&["rotate-ca", "t"]);
    assert!(e.contains("--yes"), "{e}");
    let cp = env.store().get_control_plane("t").unwrap();
    assert_eq!(
        (cp.ca_generation, cp.ca_rotation),
        (0, None),
        "nothing begun"
    );
}

/// etcd fails too: a member killed (SIGKILL) in the middle of a rotation is started
/// again with the files its record names, and the rotation finishes with every key.
#[test]
fn a_member_killed_mid_rotation_comes_back_and_the_rotation_finishes() {
    let mut env = Env::new("ca-rotate-kill");
    let name = "rk";
    env.start_controller();
    env.ok(&[
        "create",
        name,
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
    let keys = write_keys(&env.endpoints(name), "k/", 200);
    let watch = QuorumWatch::start(&env, name);
    env.ok(&["rotate-ca", name, "--yes"]);
    // In phase 2, kill a member that runs and is not being restarted.
    let victim = env.wait_status(
        name,
        "phase 2 with a member to kill",
        ROTATION_DEADLINE,
        |s| {
            phase(s).0.as_deref() == Some("reissue")
                && s["machines"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["pid"].as_i64().is_some() && m["inPlace"].is_null())
        },
    );
    let m = victim["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["pid"].as_i64().is_some() && m["inPlace"].is_null())
        .unwrap();
    let (machine, pid) = (
        m["name"].as_str().unwrap().to_string(),
        m["pid"].as_i64().unwrap() as i32,
    );
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let data = env.home.join("machines").join(&machine).join("data");
    assert!(
        String::from_utf8_lossy(&cmdline).contains(&data.display().to_string()),
        "{pid} is not the etcd of {machine}"
    );
    assert!(pid > 0, "never signal a process group");
    // SAFETY: kill(2) on one positive pid, checked above to be this machine's etcd.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    env.wait_status(name, "the rotation finished", ROTATION_DEADLINE, |s| {
        s["converged"] == true && s.get("caRotation").is_none() && s["caGeneration"] == 1
    });
    let (_, violations) = watch.finish();
    // One member killed on top of one restarting may leave a moment without a quorum:
    // that is etcd's failure, not quorum's; what matters is that it comes back.
    println!("quorum watch while a member was killed: {violations:?}");
    assert_keys(&env.endpoints(name), "k/", &keys);
    let store = env.store();
    let cp = store.get_control_plane(name).unwrap();
    let ca = store.certificate_authority(&cp).unwrap().unwrap();
    for m in store.machines(name).unwrap() {
        assert_eq!(tls_file(&env, &m.name, "ca.crt").trim(), ca.cert_pem.trim());
        let (_, issuer) = quorum_pki::names(&tls_file(&env, &m.name, "server.crt")).unwrap();
        assert_eq!(issuer, format!("quorum {name} CA 2"), "{}", m.name);
    }
}
