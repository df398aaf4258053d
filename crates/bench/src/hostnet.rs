//! A network of test hosts on this machine: each host a Linux network namespace with
//! its own address in the benchmarking range (198.18.X.10+i/24, X chosen per test),
//! joined by a bridge whose address (198.18.X.1) is the controller's, in the root
//! namespace. Partitions are nftables rules inside a host's namespace; a host is stopped
//! or killed through every process in its namespace (`ip netns pids`, by PID).
//! Everything is torn down on drop, also when the test or the demo failed. Used by the
//! tests on a network of hosts, by `quorum demo --hosts` and `quorum bench rollout
//! --hosts`.
//!
//! Needs root, iproute2 and nftables (scripts/install.sh installs them).

use anyhow::{anyhow, bail, Result};
use std::net::Ipv4Addr;
use std::process::Command;

/// The third octets tried for a network's /24 (one per test running at once).
const THIRD_OCTETS: std::ops::Range<u16> = 2..250;

/// The most hosts a network has (each is 198.18.X.(10 + i)).
pub const MAX_HOSTS: usize = 200;

/// One host of the network.
pub struct NetHost {
    pub ns: String,
    pub ip: Ipv4Addr,
}

pub struct Network {
    pub bridge: String,
    pub third: u8,
    pub hosts: Vec<NetHost>,
}

fn run(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| anyhow!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        bail!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    }
}

impl Network {
    /// A network of `n` hosts for `test` (a name that spreads concurrent users over
    /// the /24s). Needs root and iproute2.
    pub fn new(test: &str, n: usize) -> Result<Network> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("a network of hosts is made of network namespaces: run as root");
        }
        if n == 0 || n > MAX_HOSTS {
            bail!("a network has 1 to {MAX_HOSTS} hosts, not {n}");
        }
        if Command::new("ip").arg("-V").output().is_err() {
            bail!("a network of hosts needs iproute2's ip (scripts/install.sh installs it)");
        }
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (test, std::process::id()).hash(&mut h);
        let start = (h.finish() % u64::from(THIRD_OCTETS.end - THIRD_OCTETS.start)) as u16;
        // Claim a /24 by creating its bridge: a name in use means another test has it.
        let span = THIRD_OCTETS.end - THIRD_OCTETS.start;
        let third = (0..span)
            .map(|k| THIRD_OCTETS.start + (start + k) % span)
            .find(|x| run(&["ip", "link", "add", &format!("qb{x}"), "type", "bridge"]).is_ok())
            .ok_or_else(|| anyhow!("no free /24 in 198.18.0.0/16 for a network of hosts"))?
            as u8;
        let mut net = Network {
            bridge: format!("qb{third}"),
            third,
            hosts: Vec::new(),
        };
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", net.controller_ip()),
            "dev",
            &net.bridge,
        ])?;
        run(&["ip", "link", "set", &net.bridge, "up"])?;
        for i in 1..=n {
            let ns = format!("q{third}h{i}");
            let ip = Ipv4Addr::new(198, 18, third, 10 + i as u8);
            run(&["ip", "netns", "add", &ns])?;
            net.hosts.push(NetHost { ns: ns.clone(), ip });
            let (outer, inner) = (format!("q{third}h{i}o"), format!("q{third}h{i}i"));
            run(&[
                "ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner, "netns", &ns,
            ])?;
            run(&["ip", "link", "set", &outer, "master", &net.bridge, "up"])?;
            run(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                &inner,
            ])?;
            run(&["ip", "-n", &ns, "link", "set", &inner, "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// The controller's address (on the bridge, in the root namespace).
    pub fn controller_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.third, 1)
    }

    /// A command that runs `program` inside host `i`'s namespace (1-based). `ip netns
    /// exec` becomes the program, so the child's PID is the program's.
    pub fn command(&self, i: usize, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.hosts[i - 1].ns, program]);
        c
    }

    /// Cuts host `i` off from `peers` (their addresses), both ways, or only what it
    /// receives from them with `one_way`.
    pub fn partition(&self, i: usize, peers: &[Ipv4Addr], one_way: bool) -> Result<()> {
        let ns = &self.hosts[i - 1].ns;
        let set = peers
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let output = if one_way {
            String::new()
        } else {
            format!(
                "chain cout {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }};"
            )
        };
        let rules = format!(
            "table inet qpart {{ chain cin {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}; {output} }}"
        );
        run(&["ip", "netns", "exec", ns, "nft", &rules])
    }

    /// Removes host `i`'s partition.
    pub fn heal(&self, i: usize) -> Result<()> {
        let ns = &self.hosts[i - 1].ns;
        run(&["ip", "netns", "exec", ns, "nft", "delete table inet qpart"])
    }

    /// The PIDs of every process in host `i`'s namespace.
    pub fn pids(&self, i: usize) -> Vec<i32> {
        pids_in(&self.hosts[i - 1].ns)
    }

    /// Sends `signal` to every process of host `i` (SIGSTOP: the host hangs; SIGKILL:
    /// it dies).
    pub fn signal_host(&self, i: usize, signal: i32) {
        for pid in self.pids(i) {
            // SAFETY: kill(2) with a PID read just now from the namespace's list.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }
}

fn pids_in(ns: &str) -> Vec<i32> {
    Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for Network {
    fn drop(&mut self) {
        for h in &self.hosts {
            for pid in pids_in(&h.ns) {
                // SAFETY: as above; SIGCONT first so a stopped process dies at once.
                unsafe {
                    libc::kill(pid, libc::SIGCONT);
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !pids_in(&h.ns).is_empty() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = run(&["ip", "netns", "del", &h.ns]);
        }
        let _ = run(&["ip", "link", "del", &self.bridge]);
    }
}
