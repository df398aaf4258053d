//! A controller and a network of hosts for one test, with or without agents; every
//! process it started is killed by PID on drop (the network's own drop kills whatever
//! else runs in the hosts, sshd and agents it started included).

use super::network::Network;
use super::Env;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The join service's port on the controller's address.
pub const JOIN_PORT: u16 = 7391;

pub struct Fleet {
    pub env: Env,
    pub net: Network,
    pub controller: Option<Child>,
    pub agents: Vec<Child>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in self.agents.iter_mut().chain(self.controller.iter_mut()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Fleet {
    /// A controller serving joins, and `hosts` hosts each with a joined agent.
    pub fn new(test: &str, hosts: usize) -> Fleet {
        let mut f = Fleet::bare(test, hosts);
        for i in 1..=hosts {
            f.start_agent(i);
        }
        f.wait_ready(hosts);
        f
    }

    /// A controller serving joins, and `hosts` hosts with nothing running on them.
    pub fn bare(test: &str, hosts: usize) -> Fleet {
        let env = Env::new(test);
        let net = Network::new(test, hosts).expect("a network of test hosts");
        let join = format!("{}:{JOIN_PORT}", net.controller_ip());
        let log = std::fs::File::create(env.dir.path().join("controller.log")).unwrap();
        let controller = env
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
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&join).is_err() {
            assert!(Instant::now() < deadline, "the join service never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        Fleet {
            env,
            net,
            controller: Some(controller),
            agents: Vec::new(),
        }
    }

    /// Registers host `i` (1-based) as `h{i}` and starts its agent with the token.
    pub fn start_agent(&mut self, i: usize) {
        let ip = self.net.hosts[i - 1].ip.to_string();
        let name = format!("h{i}");
        let token = self
            .env
            .ok(&["host", "add", &name, "--address", &ip])
            .trim()
            .to_string();
        self.spawn_agent(i, Some(&token), &[]);
    }

    /// Starts host `i`'s agent again on its state (after a host was killed: a reboot),
    /// with `extra` arguments.
    pub fn restart_agent(&mut self, i: usize, extra: &[&str]) {
        self.spawn_agent(i, None, extra);
    }

    /// Host `i`'s agent's log.
    pub fn agent_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.env.dir.path().join(format!("agent-h{i}.log")))
            .unwrap_or_default()
    }

    fn spawn_agent(&mut self, i: usize, token: Option<&str>, extra: &[&str]) {
        let name = format!("h{i}");
        let dir = self.env.dir.path();
        let state = dir.join(format!("agent-{name}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("agent-{name}.log")))
            .unwrap();
        let mut cmd = self.net.command(i, env!("CARGO_BIN_EXE_quorum"));
        cmd.args(["agent", "--state-dir", state.to_str().unwrap()]);
        cmd.args(extra);
        if let Some(t) = token {
            cmd.env("QUORUM_JOIN_TOKEN", t);
        }
        cmd.env_remove("QUORUM_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.agents.push(cmd.spawn().unwrap());
    }

    /// Waits until `hosts` agents are ready.
    pub fn wait_ready(&self, hosts: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.env.ok(&["hosts", "-o", "json"]);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            let ready = v
                .as_array()
                .unwrap()
                .iter()
                .filter(|h| h["agent"] == "ready")
                .count();
            if ready == hosts {
                return;
            }
            assert!(Instant::now() < deadline, "agents not ready:\n{out}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
