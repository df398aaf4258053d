//! Host agents, as real processes: `quorum controller --join-listen`, `quorum host add`,
//! `quorum agent --join`, and real etcd members the agent runs, reached over mutual TLS
//! with the controller's certificate. Each agent is a "host" on its own loopback address
//! (127.A.B.201 and up): these are the agent's own behaviours; control planes on a
//! network of hosts are in `hosts_network.rs`, installs over SSH in `hosts_ssh.rs`.
//!
//! What fails here is real too: the agent is SIGKILLed and restarted, its certificate
//! is left to expire, a deposed controller's token is sent.

mod common;

use common::Env;
use quorum_agent::client::{AgentClient, AgentError};
use quorum_agent::proto::Fence;
use quorum_agent::{StartSpec, AGENT_PORT};
use quorum_core::{ClusterState, InitialMember, Machine, Version};
use quorum_provider::LocalProvider;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The controller (join service) and the agents of one test, stopped by PID on drop,
/// with every member the agents started.
struct Hosts {
    env: Env,
    controller: Option<Child>,
    agents: Vec<(String, PathBuf, Option<Child>)>,
}

impl Hosts {
    fn new(test: &str) -> Hosts {
        let mut h = Hosts {
            env: Env::new(test),
            controller: None,
            agents: Vec::new(),
        };
        h.start_controller();
        h
    }

    /// Starts the controller with its join service, and waits for the service.
    fn start_controller(&mut self) {
        let join = self.join_addr();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.env.dir.path().join("controller.log"))
            .unwrap();
        let child = self
            .env
            .cmd(&[
                "controller",
                "--metrics-addr",
                "off",
                "--join-listen",
                &join,
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.controller = Some(child);
        wait_until(
            Duration::from_secs(20),
            "the join service to listen",
            || std::net::TcpStream::connect(&join).is_ok(),
        );
    }

    fn kill_controller(&mut self) {
        if let Some(mut c) = self.controller.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn join_addr(&self) -> String {
        format!("127.{}.1:7391", self.env.subnet())
    }

    fn host_ip(&self, i: usize) -> IpAddr {
        format!("127.{}.{}", self.env.subnet(), 200 + i)
            .parse()
            .unwrap()
    }

    /// `quorum host add`; the token.
    fn add(&self, name: &str, i: usize, extra: &[&str]) -> String {
        let ip = self.host_ip(i).to_string();
        let mut args = vec!["host", "add", name, "--address", &ip];
        args.extend_from_slice(extra);
        self.env.ok(&args).trim().to_string()
    }

    fn state_dir(&self, name: &str) -> PathBuf {
        self.env.dir.path().join(format!("agent-{name}"))
    }

    /// Starts host `name`'s agent (with `token` the first time).
    fn start_agent(&mut self, name: &str, token: Option<&str>) {
        let dir = self.state_dir(name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.env.dir.path().join(format!("agent-{name}.log")))
            .unwrap();
        let dir_s = dir.display().to_string();
        let mut args = vec!["agent", "--state-dir", &dir_s];
        if let Some(t) = token {
            args.extend(["--join", t]);
        }
        let child = self
            .env
            .cmd(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        match self.agents.iter_mut().find(|(n, _, _)| n == name) {
            Some(slot) => slot.2 = Some(child),
            None => self.agents.push((name.to_string(), dir, Some(child))),
        }
    }

    /// SIGKILLs host `name`'s agent (its members keep running).
    fn kill_agent(&mut self, name: &str) {
        if let Some((_, _, Some(mut c))) = self
            .agents
            .iter_mut()
            .find(|(n, _, _)| n == name)
            .map(|(n, d, c)| (n.clone(), d.clone(), c.take()))
        {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn agent_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.env.dir.path().join(format!("agent-{name}.log")))
            .unwrap_or_default()
    }

    fn tls(&self) -> std::sync::Arc<quorum_agent::tls::ClientConfig> {
        quorum_ops::hosts::controller_tls(&self.env.store(), now_unix_s()).unwrap()
    }

    async fn client(&self, name: &str, i: usize) -> Result<AgentClient, AgentError> {
        AgentClient::connect(
            name,
            SocketAddr::new(self.host_ip(i), AGENT_PORT),
            self.tls(),
        )
        .await
    }

    /// The agent of host `name` answers (within 20 s).
    async fn ready(&self, name: &str, i: usize) -> AgentClient {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.client(name, i).await {
                Ok(c) => return c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("agent {name} not ready: {e}\n{}", self.agent_log(name)),
            }
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for (_, dir, child) in &mut self.agents {
            if let Some(c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
            // Every member the agent started, by its PID file, checked against /proc.
            let p = LocalProvider::new(dir, dir.join("etcd"));
            for m in p.list() {
                let _ = p.kill(&m);
            }
        }
        if let Some(c) = &mut self.controller {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn now_unix_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn etcd_binaries(version: &str) -> Vec<(String, Vec<u8>)> {
    let dir = quorum_provider::default_etcd_dir().join(version);
    ["etcd", "etcdctl"]
        .iter()
        .map(|n| (n.to_string(), std::fs::read(dir.join(n)).unwrap()))
        .collect()
}

fn one_member(ip: IpAddr, version: &str) -> StartSpec {
    let machine = Machine {
        requested: None,
        name: "alpha-1".into(),
        serial: 1,
        address: match ip {
            IpAddr::V4(a) => a,
            IpAddr::V6(_) => unreachable!("test hosts are IPv4"),
        },
        version: version.parse::<Version>().unwrap(),
        bootstrap: true,
        deleting: false,
        tls: false,
        certificates_not_after_unix_s: None,
        remediation: None,
        in_place: None,
        ca_step: None,
        placement: None,
    };
    StartSpec {
        initial_cluster: vec![InitialMember {
            name: machine.name.clone(),
            peer_url: machine.peer_url(),
        }],
        machine,
        cluster_token: "alpha".into(),
        state: ClusterState::New,
        tls: None,
        quota_backend_bytes: None,
        expect_marker: None,
        force_new_cluster: false,
    }
}

async fn put_get(url: &str, key: &str) -> bool {
    let opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2));
    let Ok(mut c) = etcd_client::Client::connect([url], Some(opts)).await else {
        return false;
    };
    if c.put(key, "v", None).await.is_err() {
        return false;
    }
    c.get(key, None)
        .await
        .is_ok_and(|r| r.kvs().first().is_some_and(|kv| kv.value() == b"v"))
}

async fn serves(url: &str, key: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if put_get(url, key).await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn data_dir_state(r: &quorum_agent::proto::ReportReply, member: &str) -> String {
    r.members
        .iter()
        .find(|m| m.name == member)
        .map(|m| m.data_dir.clone())
        .unwrap_or_else(|| "absent".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_runs_a_member_survives_its_own_restart_and_refuses_a_stale_token() {
    let mut h = Hosts::new("agent_member");
    let token = h.add("h1", 1, &["--label", "zone=a"]);
    h.start_agent("h1", Some(&token));
    let mut c = h.ready("h1", 1).await;

    // The token worked once: another agent with it is refused, saying why.
    let other = h.state_dir("thief");
    let out = h.env.run(&[
        "agent",
        "--join",
        &token,
        "--state-dir",
        &other.display().to_string(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("works once"), "{err}");
    let bad = h.env.fails(&[
        "agent",
        "--join",
        "qj1.garbage",
        "--state-dir",
        &other.display().to_string(),
    ]);
    assert!(bad.contains("damaged"), "{bad}");

    // Install: a wrong digest installs nothing; the right one installs 3.5.1 once.
    let bins = etcd_binaries("3.5.1");
    let wrong = quorum_agent::proto::InstallRequest {
        version: "3.5.1".into(),
        binaries: vec![quorum_agent::proto::Binary {
            name: "etcd".into(),
            sha256: "00".repeat(32),
            content: bins[0].1.clone(),
        }],
    };
    let e = c.install_raw(wrong).await.unwrap_err().to_string();
    assert!(e.contains("does not match its SHA-256"), "{e}");
    assert!(c.report().await.unwrap().etcd_versions.is_empty());
    assert!(c.install("3.5.1", bins.clone()).await.unwrap());
    assert!(
        !c.install("3.5.1", bins).await.unwrap(),
        "already installed"
    );
    assert_eq!(c.report().await.unwrap().etcd_versions, vec!["3.5.1"]);

    // A member on the host, through the agent.
    let spec = one_member(h.host_ip(1), "3.5.1");
    let url = spec.machine.client_url();
    let fence = |token| Fence {
        control_plane: "alpha".into(),
        token,
    };
    let pid = c.start(&fence(5), &spec).await.unwrap();
    assert!(
        serves(&url, "before", Duration::from_secs(20)).await,
        "the member serves"
    );
    let r = c.report().await.unwrap();
    let m = r.members.iter().find(|m| m.name == "alpha-1").unwrap();
    assert!(
        m.running && m.pid == pid && m.running_version == "3.5.1",
        "{m:?}"
    );
    assert_eq!(r.host, "h1");
    assert!(r.disk_free_bytes > 0);

    // The agent dies; the member does not. A new agent finds it.
    h.kill_agent("h1");
    assert!(
        put_get(&url, "agent-down").await,
        "the member serves without its agent"
    );
    h.start_agent("h1", None);
    let mut c = h.ready("h1", 1).await;
    let r = c.report().await.unwrap();
    let m = r.members.iter().find(|m| m.name == "alpha-1").unwrap();
    assert!(m.running && m.pid == pid, "found again: {m:?}");
    let listed = h.env.ok(&["hosts"]);
    assert!(
        listed.contains("h1") && listed.contains("ready") && listed.contains("1/1"),
        "{listed}"
    );

    // Another agent's certificate may not command one: only the controller's may.
    let agent_id = quorum_agent::tls::Identity::new(
        &std::fs::read_to_string(h.state_dir("h1").join("agent.crt")).unwrap(),
        &std::fs::read_to_string(h.state_dir("h1").join("agent.key")).unwrap(),
    )
    .unwrap();
    let ca = std::fs::read_to_string(h.state_dir("h1").join("ca.crt")).unwrap();
    let as_agent = quorum_agent::tls::client(&ca, agent_id).unwrap();
    let mut intruder =
        AgentClient::connect("h1", SocketAddr::new(h.host_ip(1), AGENT_PORT), as_agent)
            .await
            .unwrap();
    let e = intruder
        .stop(&fence(9), "alpha-1")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("may not call an agent"), "{e}");

    // A newer controller (token 7) stops the member; the deposed one (token 5) cannot
    // wipe it, and nothing changes; the newer one can.
    c.stop(&fence(7), "alpha-1").await.unwrap();
    let e = c.wipe(&fence(5), "alpha-1").await.unwrap_err();
    assert!(matches!(e, AgentError::Fenced { .. }), "{e}");
    assert!(e.to_string().contains("stale fencing token 5"), "{e}");
    assert_eq!(
        data_dir_state(&c.report().await.unwrap(), "alpha-1"),
        "member"
    );
    let e = c.start(&fence(6), &spec).await.unwrap_err();
    assert!(matches!(e, AgentError::Fenced { .. }), "{e}");
    assert!(
        !c.report().await.unwrap().members[0].running,
        "a stale start starts nothing"
    );
    // A token of another control plane does not cover this one's member.
    let e = c
        .wipe(
            &Fence {
                control_plane: "beta".into(),
                token: 100,
            },
            "alpha-1",
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a member of control plane"), "{e}");
    c.wipe(&fence(7), "alpha-1").await.unwrap();
    assert_eq!(
        data_dir_state(&c.report().await.unwrap(), "alpha-1"),
        "missing"
    );
    // The mark outlives the agent.
    h.kill_agent("h1");
    h.start_agent("h1", None);
    let mut c = h.ready("h1", 1).await;
    let e = c.delete(&fence(6), "alpha-1").await.unwrap_err();
    assert!(matches!(e, AgentError::Fenced { .. }), "{e}");
    c.delete(&fence(7), "alpha-1").await.unwrap();
    assert!(c.report().await.unwrap().members.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_agent_certificate_is_refused_then_renewed() {
    let mut h = Hosts::new("agent_expiry");
    let token = h.add("h2", 2, &["--certificate-lifetime", "12s"]);
    h.start_agent("h2", Some(&token));
    let mut c = h.ready("h2", 2).await;

    // Running, the agent renews two thirds of the way (at about 8 s).
    let first = c.report().await.unwrap().certificate_not_after_unix_s;
    let deadline = Instant::now() + Duration::from_secs(20);
    let renewed = loop {
        let now = h
            .ready("h2", 2)
            .await
            .report()
            .await
            .unwrap()
            .certificate_not_after_unix_s;
        if now > first {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "no renewal within 20 s:\n{}",
            h.agent_log("h2")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!("renewed: the certificate's end moved from {first} to {renewed}");

    // The agent is off past its certificate's end, and comes back while the join
    // service is down too: it serves its expired certificate, which the controller
    // refuses, saying so, until the agent has renewed it.
    h.kill_agent("h2");
    h.kill_controller();
    wait_until(Duration::from_secs(30), "the certificate to expire", || {
        now_unix_s() > renewed
    });
    h.start_agent("h2", None);
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        match h.client("h2", 2).await {
            Err(e @ AgentError::CertificateExpired { .. }) => break e,
            Ok(_) => panic!("an expired agent certificate was accepted"),
            Err(e) => assert!(Instant::now() < deadline, "never refused as expired: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("refused: {refused}");
    let listed = h.env.ok(&["hosts"]);
    assert!(listed.contains("certificate expired"), "{listed}");

    // The join service is back: the agent renews (its retry backs off from 1 s) and is
    // back in service without a restart.
    h.start_controller();
    let back = Instant::now();
    let deadline = back + Duration::from_secs(60);
    loop {
        match h.client("h2", 2).await {
            Ok(mut c) => {
                let r = c.report().await.unwrap();
                assert!(r.certificate_not_after_unix_s > now_unix_s(), "{r:?}");
                break;
            }
            Err(e) => assert!(
                Instant::now() < deadline,
                "not back in service: {e}\n{}",
                h.agent_log("h2")
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "back in service {:.1} s after the join service returned",
        back.elapsed().as_secs_f64()
    );
    assert!(h.agent_log("h2").contains("agent certificate renewed"));
    let listed = h.env.ok(&["hosts"]);
    assert!(listed.contains("ready"), "{listed}");
}
