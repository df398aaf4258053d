//! Mutual TLS on real etcd: only holders of a certificate from the control plane's CA
//! reach its members, a member without a valid peer certificate cannot join, and
//! machines whose certificates expire soon are replaced by a normal rollout.

mod common;

use common::*;
use etcd_client::ConnectOptions;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn now_unix_s() -> i64 {
    quorum_clock::now_unix_s()
}

fn tls_options(ca_pem: &str, cert_pem: Option<(&str, &str)>) -> ConnectOptions {
    let mut t =
        etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(ca_pem));
    if let Some((cert, key)) = cert_pem {
        t = t.identity(etcd_client::Identity::from_pem(cert, key));
    }
    ConnectOptions::new().with_tls(t)
}

#[test]
fn only_clients_with_a_certificate_from_the_control_planes_ca_get_in() {
    let mut env = Env::new("tls-clients");
    env.start_controller();
    env.ok(&[
        "create",
        "t",
        "--replicas",
        "1",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        "120s",
    ]);
    let cluster = env.endpoints("t");
    assert!(
        cluster.endpoints.iter().all(|e| e.starts_with("https://")),
        "{:?}",
        cluster.endpoints
    );
    // The machine's keys are private on disk.
    let tls_dir = env.home.join("machines").join("t-1").join("tls");
    assert_eq!(mode(&tls_dir), 0o700);
    for f in ["server.key", "peer.key", "server.crt", "peer.crt", "ca.crt"] {
        assert_eq!(mode(&tls_dir.join(f)), 0o600, "{f}");
    }

    // The user's credentials, as `quorum credentials` writes them.
    let out = env.dir.path().join("creds");
    let printed = env.ok(&[
        "credentials",
        "t",
        "--out",
        out.to_str().unwrap(),
        "--common-name",
        "alice",
    ]);
    assert!(
        printed.contains("--cacert") && printed.contains("client.key"),
        "{printed}"
    );
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");
    assert_eq!(mode(&out), 0o700);
    assert_eq!(mode(&out.join("client.key")), 0o600);
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
    let (ca, cert, key) = (read("ca.crt"), read("client.crt"), read("client.key"));
    try_read(&cluster.endpoints, tls_options(&ca, Some((&cert, &key))))
        .expect("a client with the control plane's certificate is served");

    // No client certificate: the handshake is refused.
    let e = try_read(&cluster.endpoints, tls_options(&ca, None)).unwrap_err();
    eprintln!("without a certificate: {e}");
    // A certificate from another CA (trusting the right CA for the server): refused.
    let other = quorum_pki::Ca::generate("intruder", now_unix_s(), 86_400).unwrap();
    let id = other
        .issue_client("mallory", now_unix_s(), now_unix_s() + 3_600)
        .unwrap();
    let e = try_read(
        &cluster.endpoints,
        tls_options(&ca, Some((&id.cert_pem, &id.key_pem))),
    )
    .unwrap_err();
    eprintln!("with another CA's certificate: {e}");
    // Plain HTTP to the TLS port: no answer.
    let plain: Vec<String> = cluster
        .endpoints
        .iter()
        .map(|e| e.replace("https://", "http://"))
        .collect();
    let e = try_read(&plain, ConnectOptions::new()).unwrap_err();
    eprintln!("plain HTTP: {e}");
    // And the client that is let in still is.
    try_read(&cluster.endpoints, tls_options(&ca, Some((&cert, &key)))).unwrap();

    // A plaintext control plane has nothing to hand out.
    env.ok(&[
        "create",
        "p",
        "--replicas",
        "1",
        "--version",
        NEW,
        "--insecure-plaintext",
    ]);
    let e = env.fails(&["credentials", "p", "--out", out.to_str().unwrap()]);
    assert!(e.contains("--insecure-plaintext"), "{e}");
    env.ok(&["delete", "p", "--yes", "--wait", "--timeout", "60s"]);
}

#[test]
fn a_member_without_a_valid_peer_certificate_cannot_join() {
    let mut env = Env::new("tls-peers");
    env.start_controller();
    env.ok(&[
        "create",
        "j",
        "--replicas",
        "1",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        "120s",
    ]);
    let cluster = env.endpoints("j");
    let store = quorum_store::Store::open(&env.home).unwrap();
    let m1 = store.machines("j").unwrap().remove(0);
    // The intruder: the next address of the subnet, certificates from another CA.
    let octets = m1.address.octets();
    let addr = std::net::Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3] + 50);
    let peer_url = format!("https://{addr}:2380");
    let client_url = format!("https://{addr}:2379");
    let other = quorum_pki::Ca::generate("intruder", now_unix_s(), 86_400).unwrap();
    let certs = other
        .issue_machine_from(
            "rogue",
            addr.into(),
            &[quorum_provider::LOCAL_SOURCE_ADDRESS],
            now_unix_s(),
            now_unix_s() + 3_600,
        )
        .unwrap();
    let dir = env.dir.path().join("rogue");
    quorum_pki::create_private_dir(&dir).unwrap();
    let write = |f: &str, s: &str| quorum_pki::write_private(&dir.join(f), s.as_bytes()).unwrap();
    write("ca.crt", other.cert_pem());
    write("peer.crt", &certs.peer.cert_pem);
    write("peer.key", &certs.peer.key_pem);
    write("server.crt", &certs.server.cert_pem);
    write("server.key", &certs.server.key_pem);

    // quorum would remove the unknown member at once: hold it still while we look.
    env.ok(&["pause", "j"]);
    // Someone with admin credentials adds the member; only the certificate is wrong.
    let (member_id, initial) = rt().block_on(async {
        let mut c = cluster.connect().await.unwrap();
        let r = c
            .member_add(
                [peer_url.clone()],
                Some(etcd_client::MemberAddOptions::new().with_is_learner()),
            )
            .await
            .unwrap();
        let id = r.member().unwrap().id();
        let initial: Vec<String> = r
            .member_list()
            .iter()
            .map(|m| {
                let name = if m.id() == id { "rogue" } else { m.name() };
                format!("{name}={}", m.peer_urls()[0])
            })
            .collect();
        (id, initial.join(","))
    });
    let etcd =
        quorum_provider::etcd_binary(&quorum_provider::default_etcd_dir(), NEW.parse().unwrap())
            .unwrap();
    let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
    let f = |n: &str| dir.join(n).display().to_string();
    let mut rogue = Command::new(etcd)
        .args([
            "--name=rogue".to_string(),
            format!("--data-dir={}", f("data")),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster={initial}"),
            "--initial-cluster-state=existing".into(),
            "--initial-cluster-token=j".into(),
            format!("--cert-file={}", f("server.crt")),
            format!("--key-file={}", f("server.key")),
            format!("--trusted-ca-file={}", f("ca.crt")),
            "--client-cert-auth".into(),
            format!("--peer-cert-file={}", f("peer.crt")),
            format!("--peer-key-file={}", f("peer.key")),
            format!("--peer-trusted-ca-file={}", f("ca.crt")),
            "--peer-client-cert-auth".into(),
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    // The peers refuse each other's certificates: wait for that in the member's log.
    let member_log = env.home.join("machines").join(&m1.name).join("etcd.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    let rejected = loop {
        let text = std::fs::read_to_string(&member_log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| {
            (l.contains("rejected connection") || l.contains("failed to dial"))
                && (l.contains("certificate") || l.contains("x509"))
        }) {
            break line.to_string();
        }
        if Instant::now() > deadline {
            let rogue_log = std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
            let _ = rogue.kill();
            panic!("the member never rejected the intruder; its log:\n{text}\nthe intruder's:\n{rogue_log}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("member's log: {rejected}");
    // The intruder never joined: its member never started (no name) and the cluster
    // still answers with its one voter.
    let members = rt().block_on(async {
        let mut c = cluster.connect().await.unwrap();
        c.member_list().await.unwrap().members().to_vec()
    });
    let m = members.iter().find(|m| m.id() == member_id).unwrap();
    assert!(m.name().is_empty(), "the intruder started: {m:?}");
    assert!(m.is_learner());
    let _ = rogue.kill();
    let _ = rogue.wait();
    env.ok(&["pause", "j", "--resume"]);
    // quorum removes the orphan member itself (it belongs to no machine).
    env.wait_status(
        "j",
        "the orphan member to be removed",
        Duration::from_secs(60),
        |s| s["converged"] == true,
    );
    let members = rt().block_on(async {
        let mut c = cluster.connect().await.unwrap();
        c.member_list().await.unwrap().members().to_vec()
    });
    assert_eq!(members.len(), 1, "{members:?}");
}

#[test]
fn machines_whose_certificates_expire_soon_are_replaced_with_data_intact() {
    let mut env = Env::new("tls-expiry");
    env.start_controller();
    env.ok(&[
        "create",
        "e",
        "--replicas",
        "3",
        "--version",
        NEW,
        "--certificate-lifetime",
        "5m",
        "--wait",
        "--timeout",
        "180s",
    ]);
    let store = quorum_store::Store::open(&env.home).unwrap();
    let before: Vec<String> = store
        .machines("e")
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    for m in store.machines("e").unwrap() {
        let not_after = m
            .certificates_not_after_unix_s
            .expect("a TLS machine's expiry");
        let pem = std::fs::read_to_string(
            env.home
                .join("machines")
                .join(&m.name)
                .join("tls")
                .join("server.crt"),
        )
        .unwrap();
        // The certificate on disk ends when the record says.
        assert_eq!(quorum_pki::not_after_unix_s(&pem).unwrap(), not_after);
        assert!(not_after - now_unix_s() <= 300, "{not_after}");
    }
    let keys = write_keys(&env.endpoints("e"), "e/", 300);
    // Certificates for an hour from now on; anything expiring within 10 minutes is due,
    // which is every machine made with the 5 minute lifetime.
    let manifest = env.dir.path().join("e.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata:\n  name: e\nspec:\n  replicas: 3\n  version: {NEW}\n  certificates:\n    lifetime: 1h\n  rollout:\n    before:\n      certificatesExpiry: 10m\n"
        ),
    )
    .unwrap();
    env.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let s = env.wait_status(
        "e",
        "every machine replaced",
        Duration::from_secs(240),
        |s| s["converged"] == true && machine_names(s).iter().all(|n| !before.contains(n)),
    );
    assert_eq!(machine_names(&s).len(), 3);
    assert_keys(&env.endpoints("e"), "e/", &keys);
    for m in store.machines("e").unwrap() {
        let left = m.certificates_not_after_unix_s.unwrap() - now_unix_s();
        assert!(left > 3_000, "{}: {left} s left", m.name);
    }
    // Each replacement said why.
    let history = quorum_store::Store::open(&env.home)
        .unwrap()
        .events_after("e", 0, 10_000)
        .unwrap();
    let marked: Vec<_> = history
        .iter()
        .filter(|e| {
            e.kind == quorum_store::EventKind::Action(quorum_core::ActionKind::MarkDeleting) && e.ok
        })
        .collect();
    assert_eq!(marked.len(), 3, "{marked:?}");
    assert!(
        marked
            .iter()
            .all(|e| e.message.contains("certificates expire soon")),
        "{marked:?}"
    );
}

/// Under `strategy: InPlace` a machine due for new certificates keeps its data, its
/// member and its name: it is restarted with certificates that end a lifetime later.
#[test]
fn certificates_expiring_soon_are_renewed_in_place_with_the_same_members() {
    let mut env = Env::new("tls-inplace");
    env.start_controller();
    env.ok(&[
        "create",
        "r",
        "--replicas",
        "3",
        "--version",
        NEW,
        "--strategy",
        "InPlace",
        "--certificate-lifetime",
        "5m",
        "--wait",
        "--timeout",
        "180s",
    ]);
    let store = quorum_store::Store::open(&env.home).unwrap();
    let before = store.machines("r").unwrap();
    let ids_before = member_ids(&env, "r");
    let keys = write_keys(&env.endpoints("r"), "r/", 200);
    let manifest = env.dir.path().join("r.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata:\n  name: r\nspec:\n  replicas: 3\n  version: {NEW}\n  certificates:\n    lifetime: 1h\n  rollout:\n    strategy: InPlace\n    before:\n      certificatesExpiry: 10m\n"
        ),
    )
    .unwrap();
    env.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let renewed = |s: &serde_json::Value| {
        s["converged"] == true
            && quorum_store::Store::open(&env.home)
                .unwrap()
                .machines("r")
                .unwrap()
                .iter()
                .all(|m| m.certificates_not_after_unix_s.unwrap() - now_unix_s() > 3_000)
    };
    let s = env.wait_status(
        "r",
        "every machine renewed",
        Duration::from_secs(180),
        renewed,
    );
    // The same machines and members: nothing was replaced.
    let names: Vec<String> = before.iter().map(|m| m.name.clone()).collect();
    assert_eq!(machine_names(&s), names);
    assert_eq!(member_ids(&env, "r"), ids_before);
    assert_keys(&env.endpoints("r"), "r/", &keys);
    for m in store.machines("r").unwrap() {
        let pem = std::fs::read_to_string(
            env.home
                .join("machines")
                .join(&m.name)
                .join("tls")
                .join("server.crt"),
        )
        .unwrap();
        // The certificate the member serves now ends when the record says.
        assert_eq!(
            quorum_pki::not_after_unix_s(&pem).unwrap(),
            m.certificates_not_after_unix_s.unwrap()
        );
    }
    let history = store.events_after("r", 0, 10_000).unwrap();
    let begun: Vec<_> = history
        .iter()
        .filter(|e| {
            e.kind == quorum_store::EventKind::Action(quorum_core::ActionKind::BeginInPlace) && e.ok
        })
        .collect();
    assert_eq!(begun.len(), 3, "{begun:?}");
    assert!(
        begun.iter().all(|e| e.message.contains("certificates")),
        "{begun:?}"
    );
    let membership_changes = history.iter().filter(|e| {
        matches!(
            e.kind,
            quorum_store::EventKind::Action(
                quorum_core::ActionKind::AddLearner | quorum_core::ActionKind::RemoveMember
            )
        )
    });
    assert_eq!(membership_changes.count(), 0);
}

/// The member ids of a control plane's machines, sorted (from `status`).
fn member_ids(env: &Env, name: &str) -> Vec<u64> {
    let mut ids: Vec<u64> = env.status(name)["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| u64::from_str_radix(m["memberId"].as_str().unwrap(), 16).unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

fn machine_names(s: &serde_json::Value) -> Vec<String> {
    s["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}
