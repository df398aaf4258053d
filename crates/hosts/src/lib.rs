//! The `hosts` provider: members of a control plane with `spec.provider: hosts` run on
//! registered hosts, through each host's agent (quorum-agent), one connection per host.
//!
//! What the local provider does with a process, this does with a call: observe is one
//! `Report` per host, start sends the member's configuration (after installing its etcd
//! version on the host when the host lacks it, from this controller's binaries), stop,
//! delete, wipe and marker carry the control plane's fencing token. A host whose agent
//! does not answer is not guessed at: its members are reported as last seen, running,
//! and the etcd observation (unreachable member) drives health and remediation.
//!
//! `machines.rs` is this provider's `quorum_provider::MachineProvider` (`OnHosts`).
//! It is a crate of its own, not part of quorum-provider, because the agent crate it
//! calls runs its members with the local provider.
//!
//! Architecture invariant: nothing here decides; placement is `quorum_core::placement`,
//! fed with the host records and the machines recorded.

pub mod machines;
pub use machines::OnHosts;

use quorum_agent::client::{AgentClient, AgentError};
use quorum_agent::proto::{Fence, ReportReply};
use quorum_agent::StartSpec;
use quorum_core::placement::{self, HostView, PlacementError};
use quorum_core::{DataMarker, Machine, Placement, ProcessState, Version};
use quorum_provider::{DataDirState, MachineState};
use quorum_store::hosts::{claim_is_fresh, port_claim_key, HostRecord};
use quorum_store::{Placed, Store, StoreTask};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long the controller's own certificate towards agents is used before a new one
/// is made (it is valid for a day).
pub const CONTROLLER_CERT_REFRESH_S: i64 = 12 * 3_600;
/// The first port pair a host gives a member: etcd's own; the next ones go up by 2.
pub const FIRST_CLIENT_PORT: u16 = 2379;
/// The most members one host runs (port pairs 2379/2380 up to 2379 + 2·(n-1)).
pub const MAX_MEMBERS_PER_HOST: u16 = 1_000;
/// How long one host's report may take within an observation.
pub const REPORT_TIMEOUT_MS: u64 = 3_000;

#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Placement(#[from] PlacementError),
    #[error(transparent)]
    Store(#[from] quorum_store::StoreError),
    #[error(transparent)]
    Records(#[from] quorum_store::hosts::HostsError),
    #[error("machine {0} has no host recorded (it was not placed by the hosts provider)")]
    NotPlaced(String),
    #[error("host {0} is not registered (see `quorum hosts`)")]
    UnknownHost(String),
    #[error("host {host} has address {address}: members need an IPv4 address")]
    NotIpv4 { host: String, address: IpAddr },
    #[error("host {0} has no free port pair for another member")]
    NoPorts(String),
    #[error("etcd {version} is not installed on this controller ({dir}), so it cannot be installed on host {host}: run scripts/install.sh")]
    NoBinaries {
        version: Version,
        dir: PathBuf,
        host: String,
    },
    #[error("the hosts CA: {0}")]
    Tls(String),
    #[error("{0} is not available with the hosts provider yet")]
    Unsupported(&'static str),
    #[error("host {0} is being removed (quorum host remove): it takes no new member")]
    Removing(String),
}

/// The controller's TLS configuration towards agents, from the hosts CA.
pub fn controller_tls(
    store: &Store,
    now_unix_s: i64,
) -> Result<Arc<quorum_agent::tls::ClientConfig>, HostsError> {
    let Some(ca) = store.hosts_ca()? else {
        return Err(HostsError::Tls(
            "there is none yet: add a host first (quorum host add)".into(),
        ));
    };
    let ca = quorum_pki::Ca::from_pem("hosts", &ca.cert_pem, &ca.key_pem)
        .map_err(|e| HostsError::Tls(e.to_string()))?;
    let id = ca
        .issue_client(
            quorum_pki::agents::CONTROLLER_CN,
            now_unix_s,
            (now_unix_s + 86_400).min(ca.not_after_unix_s()),
        )
        .map_err(|e| HostsError::Tls(e.to_string()))?;
    let identity = quorum_agent::tls::Identity::new(&id.cert_pem, &id.key_pem)
        .map_err(|e| HostsError::Tls(e.to_string()))?;
    quorum_agent::tls::client(ca.cert_pem(), identity).map_err(|e| HostsError::Tls(e.to_string()))
}

/// A host to call, with what calling it takes.
#[derive(Clone)]
pub struct Target {
    pub host: HostRecord,
    tls: Arc<quorum_agent::tls::ClientConfig>,
}

/// Connections to agents, and what each host last reported.
pub struct HostsProvider {
    etcd_dir: PathBuf,
    tls: std::sync::Mutex<Option<(i64, Arc<quorum_agent::tls::ClientConfig>)>>,
    clients: tokio::sync::Mutex<HashMap<String, AgentClient>>,
    last: std::sync::Mutex<HashMap<String, quorum_agent::proto::MemberReport>>,
    /// One placement at a time in this process: two control planes placed at once
    /// could pick the same ports on a host.
    placing: tokio::sync::Mutex<()>,
    /// One install at a time per host (a staged install and a start's meet here, and
    /// the second finds the version there). One entry per host registered.
    installing: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl HostsProvider {
    pub fn new(etcd_dir: PathBuf) -> HostsProvider {
        HostsProvider {
            etcd_dir,
            tls: std::sync::Mutex::new(None),
            clients: tokio::sync::Mutex::new(HashMap::new()),
            last: std::sync::Mutex::new(HashMap::new()),
            placing: tokio::sync::Mutex::new(()),
            installing: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The controller's TLS configuration towards agents, made again every
    /// `CONTROLLER_CERT_REFRESH_S`.
    async fn tls(
        &self,
        store: &StoreTask,
        now: i64,
    ) -> Result<Arc<quorum_agent::tls::ClientConfig>, HostsError> {
        if let Some((at, c)) = self.tls.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            if now - at < CONTROLLER_CERT_REFRESH_S {
                return Ok(c.clone());
            }
        }
        let c = store
            .call("read the hosts' CA", move |s| controller_tls(s, now))
            .await?;
        *self.tls.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, c.clone()));
        Ok(c)
    }

    /// A connection to `host`'s agent (made if needed; dropped on a failure, so the
    /// next call dials again).
    async fn client(
        &self,
        h: &HostRecord,
        tls: Arc<quorum_agent::tls::ClientConfig>,
    ) -> Result<AgentClient, AgentError> {
        if let Some(c) = self.clients.lock().await.get(&h.name) {
            return Ok(c.clone());
        }
        let addr = SocketAddr::new(h.address, quorum_agent::AGENT_PORT);
        let c = AgentClient::connect(&h.name, addr, tls).await?;
        self.clients.lock().await.insert(h.name.clone(), c.clone());
        Ok(c)
    }

    async fn forget(&self, host: &str) {
        self.clients.lock().await.remove(host);
    }

    /// What a call to `host` needs: its record and the TLS configuration.
    pub async fn target(&self, store: &StoreTask, host: &str) -> Result<Target, HostsError> {
        let name = host.to_string();
        let h = store
            .call("read a host", move |s| host_record(s, &name))
            .await?;
        Ok(Target {
            host: h,
            tls: self.tls(store, now_unix_s()).await?,
        })
    }

    /// `target`, for a caller holding the store itself (a command of the CLI).
    pub fn target_in(&self, store: &Store, host: &str) -> Result<Target, HostsError> {
        Ok(Target {
            host: host_record(store, host)?,
            tls: controller_tls(store, now_unix_s())?,
        })
    }

    /// The last `lines` lines of machine `m`'s etcd log on its host (within
    /// `REPORT_TIMEOUT_MS`).
    pub async fn logs(
        &self,
        t: &Target,
        m: &Machine,
        lines: u32,
    ) -> Result<Vec<String>, HostsError> {
        let name = m.name.clone();
        let ask = self.on_host(t, |mut c| async move { c.logs(&name, lines).await });
        match tokio::time::timeout(Duration::from_millis(REPORT_TIMEOUT_MS), ask).await {
            Ok(r) => r,
            Err(_) => Err(HostsError::Agent(AgentError::Unreachable {
                host: t.host.name.clone(),
                address: SocketAddr::new(t.host.address, quorum_agent::AGENT_PORT),
                reason: format!("no log lines within {REPORT_TIMEOUT_MS} ms"),
            })),
        }
    }

    /// Runs `f` on the target's agent; an unreachable agent's connection is dropped.
    async fn on_host<T, F, Fut>(&self, t: &Target, f: F) -> Result<T, HostsError>
    where
        F: FnOnce(AgentClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, AgentError>>,
    {
        let c = self.client(&t.host, t.tls.clone()).await?;
        let r = f(c).await;
        if let Err(e) = &r {
            if e.is_unreachable() || matches!(e, AgentError::CertificateExpired { .. }) {
                self.forget(&t.host.name).await;
            }
        }
        Ok(r?)
    }

    /// What every machine's host reports of it. Hosts are asked at once, each with a
    /// deadline.
    pub async fn observe(
        &self,
        hosts: &[HostRecord],
        tls: Option<Arc<quorum_agent::tls::ClientConfig>>,
        machines: &[Machine],
    ) -> HashMap<String, MachineState> {
        let mut wanted: Vec<&HostRecord> = hosts
            .iter()
            .filter(|h| machines.iter().any(|m| m.host() == Some(h.name.as_str())))
            .collect();
        wanted.dedup_by(|a, b| a.name == b.name);
        let asks = wanted.into_iter().map(|h| {
            let tls = tls.clone();
            async move {
                let r = match tls {
                    Some(tls) => {
                        let go = async {
                            let mut c = self.client(h, tls).await?;
                            c.report().await
                        };
                        match tokio::time::timeout(Duration::from_millis(REPORT_TIMEOUT_MS), go)
                            .await
                        {
                            Ok(r) => r.ok(),
                            Err(_) => None,
                        }
                    }
                    None => None,
                };
                (h.name.clone(), r)
            }
        });
        let reports: Vec<(String, Option<ReportReply>)> = futures::future::join_all(asks).await;
        let mut out = HashMap::new();
        for (host, report) in reports {
            if report.is_none() {
                self.forget(&host).await;
            }
            for m in machines.iter().filter(|m| m.host() == Some(host.as_str())) {
                let st = match &report {
                    Some(r) => {
                        let seen = r.members.iter().find(|x| x.name == m.name).cloned();
                        if let Some(s) = &seen {
                            self.last
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(m.name.clone(), s.clone());
                        }
                        state_of(seen.as_ref(), true)
                    }
                    // Not answering: as last seen, running (not restarted blindly).
                    None => {
                        let last = self
                            .last
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get(&m.name)
                            .cloned();
                        state_of(last.as_ref(), false)
                    }
                };
                out.insert(m.name.clone(), st);
            }
        }
        out
    }

    /// What placement needs of each host: whether its agent answers now (within
    /// `REPORT_TIMEOUT_MS`), its zone, whether it is being removed, and its load (the
    /// members of every control plane it carries, of `all`).
    async fn host_views(
        &self,
        hosts: &[HostRecord],
        tls: &Arc<quorum_agent::tls::ClientConfig>,
        all: &[Machine],
    ) -> Vec<HostView> {
        let mut views = Vec::new();
        for h in hosts {
            let ready =
                match tokio::time::timeout(Duration::from_millis(REPORT_TIMEOUT_MS), async {
                    let mut c = self.client(h, tls.clone()).await?;
                    c.report().await
                })
                .await
                {
                    Ok(Ok(_)) => true,
                    _ => {
                        self.forget(&h.name).await;
                        false
                    }
                };
            views.push(HostView {
                name: h.name.clone(),
                zone: h.zone().map(str::to_string),
                ready,
                removing: h.removing_unix_s.is_some(),
                load: all
                    .iter()
                    .filter(|m| m.host() == Some(h.name.as_str()))
                    .count(),
            });
        }
        views
    }

    /// Chooses a host and ports for a new machine of `cp` (whose machines are
    /// `machines`) and records it there, in one store write.
    #[allow(clippy::too_many_arguments)]
    pub async fn allocate(
        &self,
        store: &StoreTask,
        cp: &quorum_core::ControlPlane,
        machines: &[Machine],
        bootstrap: bool,
        version: Version,
        not_after: Option<i64>,
        remediation: Option<quorum_core::Remediation>,
    ) -> Result<Machine, HostsError> {
        let _one = self.placing.lock().await;
        let hosts = store
            .call("list the hosts", |s| quorum_store::hosts::list(s))
            .await?;
        let tls = self.tls(store, now_unix_s()).await?;
        // Every member each host carries (of every control plane).
        let all = store.call("read every machine", every_machine).await?;
        let views = self.host_views(&hosts, &tls, &all).await;
        let replaces = remediation.as_ref().map(|r| r.machine.as_str());
        let beside: Vec<Machine> = placement::beside(machines, replaces)
            .into_iter()
            .cloned()
            .collect();
        let host = placement::place(&views, &beside, cp.spec.replicas)?;
        let address = address_of(&hosts, &host)?;
        let claim = Claim {
            host,
            claimant: format!("{} {:x}", cp.name, rand::random::<u64>()),
            claimed_ms: now_ms(),
        };
        let cp = cp.name.clone();
        store
            .call("record a placed machine", move |s| {
                let placed = Placed {
                    address,
                    placement: claim.port(s, &all)?,
                };
                let m = s.allocate_machine_at(
                    &cp,
                    bootstrap,
                    version,
                    not_after,
                    remediation,
                    Some(&placed),
                    &|_| true,
                )?;
                claim.release(s, placed.placement.client_port);
                Ok(m)
            })
            .await
    }

    /// Starts a member on `t` (its host): installs its version there first if the
    /// host lacks it.
    pub async fn start(
        &self,
        t: &Target,
        fence: &Fence,
        spec: &StartSpec,
    ) -> Result<i32, HostsError> {
        self.ensure_version(t, spec.machine.version).await?;
        let (fence, spec) = (fence.clone(), spec.clone());
        self.on_host(t, |mut c| async move { c.start(&fence, &spec).await })
            .await
    }

    /// Installs `version` on `t`'s host from this controller's binaries, unless the
    /// host has it already (idempotent: the agent checks every digest and renames the
    /// version's directory into place whole).
    pub async fn ensure_version(&self, t: &Target, version: Version) -> Result<(), HostsError> {
        let lock = self
            .installing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(t.host.name.clone())
            .or_default()
            .clone();
        let _one = lock.lock().await;
        let has = self
            .on_host(t, |mut c| async move { c.report().await })
            .await?
            .etcd_versions
            .contains(&version.to_string());
        if !has {
            let bins = self.binaries(version, &t.host.name)?;
            self.on_host(t, |mut c| async move {
                c.install(&version.to_string(), bins).await
            })
            .await?;
        }
        Ok(())
    }

    fn binaries(&self, version: Version, host: &str) -> Result<Vec<(String, Vec<u8>)>, HostsError> {
        let dir = self.etcd_dir.join(version.to_string());
        let mut out = Vec::new();
        for name in quorum_agent::install::BINARY_NAMES {
            match std::fs::read(dir.join(name)) {
                Ok(bytes) => out.push((name.to_string(), bytes)),
                Err(_) if name != "etcd" => {}
                Err(_) => {
                    return Err(HostsError::NoBinaries {
                        version,
                        dir: self.etcd_dir.clone(),
                        host: host.to_string(),
                    })
                }
            }
        }
        Ok(out)
    }

    pub async fn stop(&self, t: &Target, fence: &Fence, m: &Machine) -> Result<(), HostsError> {
        let (name, fence) = (m.name.clone(), fence.clone());
        self.on_host(t, |mut c| async move { c.stop(&fence, &name).await })
            .await
    }

    pub async fn delete(&self, t: &Target, fence: &Fence, m: &Machine) -> Result<(), HostsError> {
        let (name, fence) = (m.name.clone(), fence.clone());
        self.on_host(t, |mut c| async move { c.delete(&fence, &name).await })
            .await
    }

    pub async fn write_marker(
        &self,
        t: &Target,
        fence: &Fence,
        m: &Machine,
        marker: DataMarker,
    ) -> Result<(), HostsError> {
        let (name, fence) = (m.name.clone(), fence.clone());
        self.on_host(t, |mut c| async move {
            c.write_marker(&fence, &name, marker).await
        })
        .await
    }
}

/// The host machine `m` was placed on.
pub fn placed_on(m: &Machine) -> Result<String, HostsError> {
    m.host()
        .map(str::to_string)
        .ok_or_else(|| HostsError::NotPlaced(m.name.clone()))
}

/// The ports machines on `host` are recorded at, in `machines`.
fn ports_in_use(machines: &[Machine], host: &str) -> Vec<u16> {
    machines
        .iter()
        .filter_map(|m| m.placement.as_ref())
        .filter(|p| p.host == host)
        .map(|p| p.client_port)
        .collect()
}

/// Claims the first port pair of `host` that no machine is recorded at (in `machines`,
/// every control plane's, read just before) and no live claim holds. Replicas of a
/// sharded fleet place different control planes on one host at once: the machine
/// records alone would give both the same ports, so each first claims its pair with a
/// compare-and-set in the store (`hosts/port/<host>/<port>`: who, when). A claim whose
/// port has no machine recorded is another allocation under way for
/// `PORT_CLAIM_STALE_MS`, then stale and taken over; the records stay the truth.
pub fn claim_port(
    store: &Store,
    host: &str,
    machines: &[Machine],
    now_ms: i64,
    claimant: &str,
) -> Result<u16, HostsError> {
    let used = ports_in_use(machines, host);
    let mine = claim_value(claimant, now_ms);
    for port in (0..MAX_MEMBERS_PER_HOST).map(|k| FIRST_CLIENT_PORT + 2 * k) {
        if used.contains(&port) {
            continue;
        }
        let key = port_claim_key(host, port);
        let held = store.setting_or_init(&key, &mine)?;
        if held == mine {
            return Ok(port);
        }
        if claim_is_fresh(&held, now_ms) {
            continue;
        }
        // Old: taken over only if no machine was recorded at it meanwhile.
        let mut now_recorded = Vec::new();
        for c in store.control_planes()? {
            now_recorded.extend(store.machines(&c.name)?);
        }
        if ports_in_use(&now_recorded, host).contains(&port) {
            continue;
        }
        if store.replace_setting(&key, &held, &mine)? {
            return Ok(port);
        }
    }
    Err(HostsError::NoPorts(host.to_string()))
}

/// The record of `host`, which must be registered.
fn host_record(store: &Store, host: &str) -> Result<HostRecord, HostsError> {
    quorum_store::hosts::get(store, host)?.ok_or_else(|| HostsError::UnknownHost(host.to_string()))
}

/// The host's address, which a member's URLs carry (IPv4 only).
fn address_of(hosts: &[HostRecord], host: &str) -> Result<std::net::Ipv4Addr, HostsError> {
    let h = hosts
        .iter()
        .find(|h| h.name == host)
        .ok_or_else(|| HostsError::UnknownHost(host.to_string()))?;
    match h.address {
        IpAddr::V4(address) => Ok(address),
        address => Err(HostsError::NotIpv4 {
            host: h.name.clone(),
            address,
        }),
    }
}

/// Every machine recorded, of every control plane.
fn every_machine(store: &mut Store) -> Result<Vec<Machine>, HostsError> {
    let mut all = Vec::new();
    for c in store.control_planes()? {
        all.extend(store.machines(&c.name)?);
    }
    Ok(all)
}

/// One allocation's claim on a port pair of a host (`claim_port`).
struct Claim {
    host: String,
    claimant: String,
    claimed_ms: i64,
}

impl Claim {
    /// Claims a port pair on the host, `all` being every machine recorded.
    fn port(&self, store: &Store, all: &[Machine]) -> Result<Placement, HostsError> {
        let client_port = claim_port(store, &self.host, all, self.claimed_ms, &self.claimant)?;
        // Read again after the claim: a `quorum host remove` that checked the claims
        // before this one was made has marked the host by now (it marks, then checks),
        // and one that checks later sees this claim and refuses.
        match quorum_store::hosts::get(store, &self.host)? {
            Some(h) if h.removing_unix_s.is_none() => Ok(Placement {
                host: self.host.clone(),
                client_port,
                peer_port: client_port + 1,
            }),
            _ => Err(HostsError::Removing(self.host.clone())),
        }
    }

    /// The machine record holds the port now; the claim is released so that a fresh
    /// claim always means an allocation under way (`quorum host remove` waits for
    /// those). Released or not (a crash here), it is stale after PORT_CLAIM_STALE_MS.
    fn release(&self, store: &mut Store, client_port: u16) {
        let claim = port_claim_key(&self.host, client_port);
        let value = claim_value(&self.claimant, self.claimed_ms);
        if let Err(e) = store.remove_setting(&claim, &value) {
            tracing::warn!(error = %e, %claim, "releasing a port claim failed; it goes stale");
        }
    }
}

/// A port claim's value: who claimed it, and when (its last word).
fn claim_value(claimant: &str, now_ms: i64) -> String {
    format!("{claimant} {now_ms}")
}

/// A member's report as the local provider's `MachineState`. `answered`: the host
/// answered now (else the report is the last one seen, and the member is taken to run).
fn state_of(r: Option<&quorum_agent::proto::MemberReport>, answered: bool) -> MachineState {
    let Some(r) = r else {
        // Reported absent: no process, no data. Never seen (a host that does not
        // answer, asked by a process with no memory of it, such as `quorum status`):
        // taken to run on its data, unmarked, so that only what etcd sees (an
        // unreachable member) judges it; no marker is written without its member
        // answering as itself.
        return MachineState {
            planned_starts_unix_s: Vec::new(),
            process: if answered {
                ProcessState::Stopped
            } else {
                ProcessState::Running
            },
            pid: None,
            has_data: !answered,
            data_dir: if answered {
                DataDirState::Missing
            } else {
                DataDirState::Member
            },
            marker: None,
            starts_unix_s: Vec::new(),
            running_version: None,
        };
    };
    let data_dir = match r.data_dir.as_str() {
        "member" => DataDirState::Member,
        "empty" => DataDirState::Empty,
        "other" => DataDirState::Other,
        _ => DataDirState::Missing,
    };
    MachineState {
        planned_starts_unix_s: Vec::new(),
        process: if r.running || !answered {
            ProcessState::Running
        } else {
            ProcessState::Stopped
        },
        pid: (r.pid > 0).then_some(r.pid),
        has_data: data_dir == DataDirState::Member,
        data_dir,
        marker: r.has_marker.then_some(DataMarker {
            cluster_id: r.cluster_id,
            member_id: r.member_id,
        }),
        starts_unix_s: r.starts_unix_s.clone(),
        running_version: r.running_version.parse().ok(),
    }
}

use quorum_clock::{now_ms, now_unix_s};

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_core::{ControlPlane, ControlPlaneSpec};

    fn machines(store: &Store) -> Vec<Machine> {
        let mut all = Vec::new();
        for c in store.control_planes().unwrap() {
            all.extend(store.machines(&c.name).unwrap());
        }
        all
    }

    /// Two replicas placing members of different control planes on one host at once
    /// get different ports (the second sees the first's claim before its record); a
    /// port with a machine recorded is never claimed; a claim left by an allocation that
    /// never recorded its machine is taken over once stale.
    #[test]
    fn concurrent_placements_on_one_host_get_their_own_ports() {
        let home = tempfile::tempdir().unwrap();
        let mut store = Store::open(&home.path().join("home")).unwrap();
        let spec: ControlPlaneSpec = serde_json::from_value(
            serde_json::json!({"replicas": 3, "version": "3.5.1", "insecurePlaintext": true, "provider": "hosts"}),
        )
        .unwrap();
        let cp = ControlPlane {
            spec_version: 0,
            client_addresses: Vec::new(),
            name: "a".into(),
            spec,
            deleting: false,
            rebuild: None,
            ca_generation: 0,
            ca_rotation: None,
            road: None,
            v2_api_never_open: false,
        };
        store.create_control_plane(&cp, None, 1).unwrap();
        let t0 = 1_800_000_000_000;
        // Both read the records (none on h1), then claim.
        let seen = machines(&store);
        let first = claim_port(&store, "h1", &seen, t0, "a 1").unwrap();
        let second = claim_port(&store, "h1", &seen, t0 + 5, "b 2").unwrap();
        assert_eq!((first, second), (2379, 2381));
        // The first records its machine at its port; a third allocator, reading the
        // records now, skips it and the second's claim still under way.
        let placed = Placed {
            address: "198.18.0.11".parse().unwrap(),
            placement: Placement {
                host: "h1".into(),
                client_port: first,
                peer_port: first + 1,
            },
        };
        let v: Version = "3.5.1".parse().unwrap();
        store
            .allocate_machine_at("a", true, v, None, None, Some(&placed), &|_| true)
            .unwrap();
        let third = claim_port(&store, "h1", &machines(&store), t0 + 10, "c 3").unwrap();
        assert_eq!(third, 2383);
        // Long after: the second never recorded a machine (it crashed): its port is
        // taken over; the recorded one never is. Another host has ports of its own.
        let later = t0 + quorum_store::hosts::PORT_CLAIM_STALE_MS + 10;
        let fourth = claim_port(&store, "h1", &machines(&store), later, "d 4").unwrap();
        assert_eq!(fourth, 2381);
        assert_eq!(
            claim_port(&store, "h2", &machines(&store), later, "e 5").unwrap(),
            2379
        );
    }
}
