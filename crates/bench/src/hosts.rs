//! Members on hosts for `quorum demo --hosts N` and `quorum bench rollout --hosts N`:
//! a network of N hosts on this machine (network namespaces, `hostnet`), the join
//! service on the bridge's address, and in each host a `quorum agent` of this very
//! binary, joined with the token `quorum host add` would print. The controller then
//! places members on them through their agents, exactly as on real hosts.

use crate::hostnet::Network;
use anyhow::{Context, Result};
use quorum_ops::hosts::{self, AddHost};
use quorum_ops::Place;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The join service's port on the bridge's address.
const JOIN_PORT: u16 = 7391;

/// The hosts and their agents; on drop the agents are killed by PID and the
/// network's drop kills every process left in a host (the members), then removes it.
pub struct Hosts {
    // Dropped after the agents (fields drop in order).
    agents: Vec<Child>,
    pub net: Network,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for a in &mut self.agents {
            let _ = a.kill();
            let _ = a.wait();
        }
    }
}

impl Hosts {
    /// Builds `n` hosts for the home at `home` and waits until every agent joined and
    /// answers; the join service runs until `stop`.
    pub async fn start(home: &Path, n: usize, stop: &Arc<AtomicBool>) -> Result<Hosts> {
        let net = Network::new(&home.display().to_string(), n)?;
        let mut fleet = Hosts {
            agents: Vec::new(),
            net,
        };
        let place = Place::embedded(home);
        let join = SocketAddr::new(fleet.net.controller_ip().into(), JOIN_PORT);
        hosts::serve_join(&place, join, stop).await?;
        let store = place.connect()?;
        let exe = std::env::current_exe().context("this quorum binary")?;
        let now = quorum_clock::now_unix_s();
        for i in 1..=n {
            let name = format!("h{i}");
            let address = fleet.net.hosts[i - 1].ip.into();
            let add = AddHost {
                name: name.clone(),
                address,
                labels: Default::default(),
                token_ttl_s: quorum_ops::hostinstall::INSTALL_TOKEN_TTL_S,
                certificate_lifetime_s: hosts::DEFAULT_AGENT_CERT_LIFETIME_S,
                rejoin: false,
                endpoint: None,
            };
            let token = hosts::add(&store, &add, now)?;
            let dir = home.join("agents");
            std::fs::create_dir_all(&dir)?;
            let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
            let mut cmd = fleet.net.command(i, &exe.display().to_string());
            cmd.arg("agent")
                .arg("--state-dir")
                .arg(dir.join(&name))
                .env("QUORUM_JOIN_TOKEN", token.encode())
                .env_remove("QUORUM_LOG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            fleet.agents.push(
                cmd.spawn()
                    .with_context(|| format!("starting the agent of {name}"))?,
            );
        }
        for i in 1..=n {
            quorum_ops::hostinstall::wait_ready(&store, &format!("h{i}"), true).await?;
        }
        Ok(fleet)
    }
}
