//! A plain etcd cluster for quorum's own state (`--store etcd://...`), started as local
//! processes: what the tests and `quorum bench failover` use as the management etcd.
//! It is not a managed control plane: no controller changes its membership. Tests of the
//! store's fault tolerance kill, stop, pause and restart its members one by one.

use crate::{LocalProvider, MachineTls, ProviderError, Result, StartRequest};
use quorum_core::{ClusterState, InitialMember, Machine, Version};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the cluster may take to answer on every member after the start.
const READY_TIMEOUT_MS: u64 = 30_000;

/// A running management etcd; its processes are killed (by PID) when dropped.
pub struct ManagementEtcd {
    provider: LocalProvider,
    machines: Vec<Machine>,
    initial: Vec<InitialMember>,
    /// The CA and each member's certificates, for a TLS cluster (kept for restarts).
    tls: Option<(String, Vec<quorum_pki::MachineCerts>)>,
}

/// The machines of the management etcd: `mgmt-1`... one per address, at `version`,
/// with TLS and certificates until the end of `tls`'s lifetime for a TLS cluster.
fn member_machines(
    addresses: &[Ipv4Addr],
    version: Version,
    tls: Option<(&quorum_pki::Ca, i64, i64)>,
) -> Vec<Machine> {
    addresses
        .iter()
        .enumerate()
        .map(|(i, a)| Machine {
            requested: None,
            ca_step: None,
            placement: None,
            name: format!("mgmt-{}", i + 1),
            serial: i as u64 + 1,
            address: *a,
            version,
            bootstrap: true,
            deleting: false,
            tls: tls.is_some(),
            certificates_not_after_unix_s: tls.map(|(_, now, life)| now + life),
            remediation: None,
            in_place: None,
        })
        .collect()
}

impl ManagementEtcd {
    /// Starts one member per address (plain HTTP, standard ports) in `dir`, and waits
    /// until each member's client port accepts connections.
    pub fn start(
        dir: &Path,
        etcd_dir: &Path,
        version: Version,
        addresses: &[Ipv4Addr],
    ) -> Result<Self> {
        Self::start_with(dir, etcd_dir, version, addresses, None, &[])
    }

    /// The same, every member started with `flags` after the usual ones (for example
    /// `--quota-backend-bytes=...` to reach NOSPACE quickly).
    pub fn start_with_flags(
        dir: &Path,
        etcd_dir: &Path,
        version: Version,
        addresses: &[Ipv4Addr],
        flags: &[String],
    ) -> Result<Self> {
        Self::start_with(dir, etcd_dir, version, addresses, None, flags)
    }

    /// The same with mutual TLS on both ports: every member's certificates come from
    /// `ca` and last `lifetime_s`; clients need a certificate from `ca` too.
    pub fn start_tls(
        dir: &Path,
        etcd_dir: &Path,
        version: Version,
        addresses: &[Ipv4Addr],
        ca: &quorum_pki::Ca,
        now_unix_s: i64,
        lifetime_s: i64,
    ) -> Result<Self> {
        let tls = Some((ca, now_unix_s, lifetime_s));
        Self::start_with(dir, etcd_dir, version, addresses, tls, &[])
    }

    fn start_with(
        dir: &Path,
        etcd_dir: &Path,
        version: Version,
        addresses: &[Ipv4Addr],
        tls: Option<(&quorum_pki::Ca, i64, i64)>,
        flags: &[String],
    ) -> Result<Self> {
        let provider =
            LocalProvider::new(dir, etcd_dir.to_path_buf()).with_etcd_flags(flags.to_vec());
        let machines = member_machines(addresses, version, tls);
        let initial: Vec<InitialMember> = machines
            .iter()
            .map(|m| InitialMember {
                name: m.name.clone(),
                peer_url: m.peer_url(),
            })
            .collect();
        let mut me = ManagementEtcd {
            provider,
            machines,
            initial,
            tls: None,
        };
        let mut all_certs = Vec::new();
        for m in &me.machines {
            all_certs.extend(me.start_member(m, tls)?);
        }
        if let Some((ca, _, _)) = tls {
            me.tls = Some((ca.cert_pem().to_string(), all_certs));
        }
        for i in 0..me.machines.len() {
            me.wait_accepting(i)?;
        }
        Ok(me)
    }

    /// Starts the member of machine `m` into the new cluster, with certificates issued
    /// by the CA of `tls` (its time now and their lifetime) for a TLS cluster: returned.
    fn start_member(
        &self,
        m: &Machine,
        tls: Option<(&quorum_pki::Ca, i64, i64)>,
    ) -> Result<Option<quorum_pki::MachineCerts>> {
        let certs = match tls {
            Some((ca, now, life)) => Some(
                ca.issue_machine_from(
                    &m.name,
                    m.address.into(),
                    &[crate::LOCAL_SOURCE_ADDRESS],
                    now,
                    now + life,
                )
                .map_err(|e| ProviderError::Io {
                    machine: m.name.clone(),
                    what: "issue certificates",
                    source: std::io::Error::other(e.to_string()),
                })?,
            ),
            None => None,
        };
        self.provider.start(&StartRequest {
            machine: m,
            cluster_token: "quorum-management",
            state: ClusterState::New,
            initial_cluster: &self.initial,
            tls: match (tls, &certs) {
                (Some((ca, _, _)), Some(certs)) => Some(MachineTls {
                    ca_pem: ca.cert_pem(),
                    certs,
                }),
                _ => None,
            },
            quota_backend_bytes: None,
            expect_marker: None,
            force_new_cluster: false,
        })?;
        Ok(certs)
    }

    /// Waits until member `i`'s client port accepts connections.
    fn wait_accepting(&self, i: usize) -> Result<()> {
        let m = &self.machines[i];
        let deadline = Instant::now() + Duration::from_millis(READY_TIMEOUT_MS);
        let addr = std::net::SocketAddr::from((m.address, quorum_core::CLIENT_PORT));
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err(crate::ProviderError::NotReady {
                    machine: m.name.clone(),
                    waited_ms: READY_TIMEOUT_MS,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// How many members it has.
    pub fn len(&self) -> usize {
        self.machines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.machines.is_empty()
    }

    /// The client URL of member `i`.
    pub fn client_url(&self, i: usize) -> String {
        self.machines[i].client_url()
    }

    /// Kills member `i` (SIGKILL, by PID); its data stays, so `restart` brings it back.
    pub fn kill(&self, i: usize) -> Result<()> {
        self.provider.kill(&self.machines[i].name)
    }

    /// Stops member `i` cleanly (SIGTERM, then SIGKILL after the provider's grace).
    pub fn stop(&self, i: usize) -> Result<()> {
        self.provider.stop(&self.machines[i].name)
    }

    /// Pauses member `i` (SIGSTOP): it accepts connections and answers nothing.
    pub fn pause(&self, i: usize) {
        self.provider.pause(&self.machines[i].name);
    }

    /// Resumes a paused member `i` (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.provider.resume(&self.machines[i].name);
    }

    /// Starts member `i` again on its data (running already is success) and waits until
    /// its client port accepts connections. It answers requests only once it has rejoined
    /// (etcd serves nothing before it has published itself through a leader).
    pub fn restart(&self, i: usize) -> Result<()> {
        self.spawn(i)?;
        self.wait_accepting(i)
    }

    /// Starts member `i` again as `restart` does (with `--initial-cluster-state new`,
    /// which etcd ignores on existing data), without waiting for anything.
    pub fn spawn(&self, i: usize) -> Result<()> {
        let m = &self.machines[i];
        let tls = self.tls.as_ref().map(|(ca_pem, certs)| MachineTls {
            ca_pem,
            certs: &certs[i],
        });
        self.provider
            .start(&StartRequest {
                machine: m,
                cluster_token: "quorum-management",
                state: ClusterState::New,
                initial_cluster: &self.initial,
                tls,
                quota_backend_bytes: None,
                expect_marker: None,
                force_new_cluster: false,
            })
            .map(|_| ())
    }

    /// The provider that runs the members.
    pub fn provider(&self) -> &LocalProvider {
        &self.provider
    }

    /// The machine name of member `i` (for the provider's calls).
    pub fn name(&self, i: usize) -> &str {
        &self.machines[i].name
    }

    /// The pid of member `i`'s process, if it runs.
    pub fn pid(&self, i: usize) -> Option<i32> {
        self.provider.observe(&self.machines[i].name).pid
    }

    /// `host:port` of every member's client port.
    pub fn endpoints(&self) -> Vec<String> {
        self.machines
            .iter()
            .map(|m| format!("{}:{}", m.address, quorum_core::CLIENT_PORT))
            .collect()
    }

    /// The `--store` value that points at this cluster, with a key prefix.
    pub fn store_url(&self, prefix: &str) -> String {
        format!(
            "etcd://{}/{}",
            self.endpoints().join(","),
            prefix.trim_matches('/')
        )
    }

    /// Kills every member (SIGKILL, by PID) and removes their data.
    pub fn destroy(&self) {
        for m in &self.machines {
            let _ = self.provider.kill(&m.name);
            let _ = self.provider.delete(&m.name);
        }
    }
}

impl Drop for ManagementEtcd {
    fn drop(&mut self) {
        self.destroy();
    }
}
