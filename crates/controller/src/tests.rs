use super::*;

/// A refusal's event says what it means, in the classifier's words, and a failure
/// has no such reason.
#[test]
fn refusals_are_explained() {
    let refused = ActionError::Etcd(EtcdError::Refused {
        op: "member add",
        endpoint: "http://127.0.0.2:2379".into(),
        message: quorum_core::classify::UNHEALTHY_CLUSTER.message.into(),
        refusal: Refusal::Unhealthy,
    });
    assert!(refused.is_refusal());
    assert_eq!(
        refused.refusal_reason(),
        Some("etcd accepts one membership change per ~5 s; retrying")
    );
    assert!(ActionError::NoLeader
        .refusal_reason()
        .is_some_and(|r| r.contains("no leader")));
    let failed = ActionError::Etcd(EtcdError::Failed {
        op: "member add",
        endpoint: "http://127.0.0.2:2379".into(),
        message: "etcdserver: bad leader transferee".into(),
    });
    assert!(!failed.is_refusal() && failed.refusal_reason().is_none());
}

/// A forgotten control plane leaves nothing in the home: its endpoints file and its
/// HAProxy directory (with HAProxy's private key) go, another control plane's stay,
/// and removing again is no error.
#[test]
fn forgetting_removes_the_endpoints_file_and_the_haproxy_dir() {
    let home = std::env::temp_dir().join(format!("quorum-forget-{}", std::process::id()));
    for cp in ["a", "b"] {
        write_endpoints_file(&home, cp, &[]).unwrap();
        std::fs::create_dir_all(haproxy_dir(&home, cp)).unwrap();
        std::fs::write(haproxy_dir(&home, cp).join("haproxy.pem"), "key").unwrap();
    }
    remove_local_files(&home, "a").unwrap();
    assert!(!endpoints_path(&home, "a").exists());
    assert!(!haproxy_dir(&home, "a").exists());
    assert!(endpoints_path(&home, "b").exists());
    assert!(haproxy_dir(&home, "b").join("haproxy.pem").exists());
    remove_local_files(&home, "a").unwrap();
    std::fs::remove_dir_all(&home).unwrap();
}
