//! The etcd adapter against a real etcd: "already done" answers are success, refusals
//! are classified as such, unreachable endpoints answer within their timeout.

use quorum_core::{ClusterState, InitialMember, Machine};
use quorum_etcd::{Etcd, EtcdError, Timeouts};
use quorum_provider::{default_etcd_dir, LocalProvider, StartRequest};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

struct Member {
    provider: LocalProvider,
    machine: Machine,
    _dir: tempfile::TempDir,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.provider.kill(&self.machine.name);
    }
}

fn single_member(last_octet: u8) -> Member {
    let dir = tempfile::tempdir().unwrap();
    let provider = LocalProvider::new(dir.path(), default_etcd_dir());
    let machine = Machine {
        name: format!("e-{last_octet}"),
        serial: 1,
        address: Ipv4Addr::new(127, 252, (std::process::id() % 250) as u8, last_octet),
        version: "3.4.23".parse().unwrap(),
        bootstrap: true,
        deleting: false,
        tls: false,
        certificates_not_after_unix_s: None,
    };
    let initial = [InitialMember {
        name: machine.name.clone(),
        peer_url: machine.peer_url(),
    }];
    provider
        .start(&StartRequest {
            machine: &machine,
            cluster_token: "e",
            state: ClusterState::New,
            initial_cluster: &initial,
            tls: None,
        })
        .unwrap();
    Member {
        provider,
        machine,
        _dir: dir,
    }
}

async fn until_ok<T>(
    what: &str,
    limit: Duration,
    mut f: impl AsyncFnMut() -> Result<T, EtcdError>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

#[tokio::test]
async fn membership_calls_are_idempotent() {
    let m = single_member(20);
    let url = m.machine.client_url();
    let etcd = Etcd::default();
    let st = until_ok("status", Duration::from_secs(20), async || {
        etcd.status(&url).await
    })
    .await;
    let me = st.member_id;
    until_ok("a leader", Duration::from_secs(20), async || {
        let s = etcd.status(&url).await?;
        if s.leader_id == me {
            Ok(())
        } else {
            Err(EtcdError::Failed {
                op: "wait",
                endpoint: url.clone(),
                message: "no leader".into(),
            })
        }
    })
    .await;
    let view = etcd.observe(std::slice::from_ref(&url)).await;
    assert_eq!(view.members.as_ref().map(|m| m.len()), Some(1));
    assert_eq!(view.leader_url.as_deref(), Some(url.as_str()));
    assert_eq!(
        view.cluster_version.map(|v| (v.major, v.minor)),
        Some((3, 4))
    );

    // An add whose answer was "lost": the second add finds the member and succeeds.
    let peer = "http://127.252.250.99:2380";
    let id = until_ok("add learner", Duration::from_secs(20), async || {
        etcd.add_learner(&url, peer).await
    })
    .await;
    assert_eq!(etcd.add_learner(&url, peer).await.unwrap(), id);
    let members = etcd.member_list(&url).await.unwrap();
    assert!(members
        .iter()
        .any(|x| x.id == id && x.is_learner && x.name.is_empty()));

    // A learner that never started is not in sync: a refusal, not a failure.
    let e = etcd.promote(&url, id).await.unwrap_err();
    assert!(e.is_refusal(), "{e}");
    // Promoting a voter is "already done".
    etcd.promote(&url, me).await.unwrap();

    // Removing twice: the second finds nothing to remove, which is success.
    etcd.remove(&url, id).await.unwrap();
    etcd.remove(&url, id).await.unwrap();
    assert_eq!(etcd.member_list(&url).await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_unreachable_endpoint_answers_within_its_timeout() {
    let etcd = Etcd::new(Timeouts {
        connect_ms: 200,
        observe_ms: 300,
        change_ms: 500,
    });
    // Nothing listens there.
    let url = "http://127.252.251.1:2379";
    let t = Instant::now();
    let e = etcd.status(url).await.unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        matches!(e, EtcdError::Unreachable { .. } | EtcdError::Timeout { .. }),
        "{e}"
    );
    let view = etcd.observe(&[url.to_string()]).await;
    assert!(view.members.is_none());
}
