//! quorum-observe: one look at a control plane, as the controller decides from it and
//! `quorum status` shows it. Every machine through its provider (the process and its
//! data here, or its host's agent's report), every running member's endpoint and the
//! member list through etcd, then what the records add (the snapshots, since when the
//! control plane exists, the fenced directories). The health memory is put in by the
//! pass (`quorum_core::pass`), the same for both.
//!
//! Architecture invariant: it reads and never acts: no record written, no process
//! started or stopped, no change sent to etcd. The controller and `quorum status` call
//! the same functions, so `status` shows exactly what the controller decides from.

use quorum_clock::now_unix_s;
use quorum_core::{ControlPlane, Machine, MachineObservation, Observation, ProcessState};
use quorum_etcd::{ClusterView, Etcd};
use quorum_hosts as hosts;
use quorum_provider::LocalProvider;
use quorum_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::Arc;

/// An observation of one control plane, with what the adapters need to act on it.
pub struct Observed {
    pub observation: Observation,
    pub view: ClusterView,
    pub pids: HashMap<String, i32>,
}

/// Observes a control plane: every machine through the provider, every running
/// machine's endpoint through etcd, the member list from the leader.
pub async fn observe(provider: &LocalProvider, etcd: &Etcd, machines: &[Machine]) -> Observed {
    let states = machines
        .iter()
        .map(|m| (m.name.clone(), provider.observe(&m.name)))
        .collect();
    observe_states(states, etcd, machines).await
}

/// The hosts this process may need to observe a control plane of provider `kind`:
/// their records and the controller's TLS towards their agents (`None` for a local
/// control plane, or when nothing lets it reach the agents yet).
pub fn hosts_view(
    store: &quorum_store::Store,
    kind: quorum_core::ProviderKind,
) -> (
    Vec<quorum_store::hosts::HostRecord>,
    Option<Arc<quorum_agent::tls::ClientConfig>>,
) {
    if kind.is_local() {
        return (Vec::new(), None);
    }
    let records = quorum_store::hosts::list(store).unwrap_or_default();
    (records, hosts::controller_tls(store, now_unix_s()).ok())
}

/// `observe` for any provider: a `hosts` control plane's machines through their
/// hosts' agents (`view` from `hosts_view`).
pub async fn observe_on(
    local: &LocalProvider,
    agents: &hosts::HostsProvider,
    view: (
        Vec<quorum_store::hosts::HostRecord>,
        Option<Arc<quorum_agent::tls::ClientConfig>>,
    ),
    kind: quorum_core::ProviderKind,
    etcd: &Etcd,
    machines: &[Machine],
) -> Observed {
    if kind.is_local() {
        return observe(local, etcd, machines).await;
    }
    let view_empty = view.0.is_empty();
    let hosts = view
        .0
        .iter()
        .map(quorum_store::hosts::HostRecord::placement_view)
        .collect();
    let states = agents.observe(&view.0, view.1, machines).await;
    let mut observed = observe_states(states, etcd, machines).await;
    // No record read (none registered, or the store failed): unknown, so the core
    // decides no refusal on it; placement itself says why at the step.
    observed.observation.hosts = (!view_empty).then_some(hosts);
    observed
}

/// What an observation needs beyond one look at the machines and the health memory,
/// the same for the controller and for `quorum status`: the recorded snapshots and the
/// fenced directories.
pub fn complete(
    recorded: Recorded,
    provider: &LocalProvider,
    cp: &ControlPlane,
    observed: &mut Observed,
) {
    recorded.fill(&mut observed.observation);
    fenced_into(provider, cp, &mut observed.observation);
}

/// The rest of an observation, once the provider said what it sees of each machine.
async fn observe_states(
    mut states: HashMap<String, quorum_provider::MachineState>,
    etcd: &Etcd,
    machines: &[Machine],
) -> Observed {
    let mut obs = Observation::default();
    let mut pids = HashMap::new();
    let mut endpoints = Vec::new();
    for m in machines {
        let st = states
            .remove(&m.name)
            .unwrap_or(quorum_provider::MachineState {
                process: ProcessState::Stopped,
                pid: None,
                has_data: false,
                data_dir: quorum_provider::DataDirState::Missing,
                marker: None,
                starts_unix_s: Vec::new(),
                planned_starts_unix_s: Vec::new(),
                running_version: None,
            });
        if let Some(pid) = st.pid {
            pids.insert(m.name.clone(), pid);
        }
        if st.process == ProcessState::Running {
            endpoints.push(m.client_url());
        }
        obs.machines.insert(
            m.name.clone(),
            MachineObservation {
                process: st.process,
                has_data: st.has_data,
                status: None,
                marker: st.marker,
                quorum_read: None,
                starts_unix_s: st.starts_unix_s,
                planned_starts_unix_s: st.planned_starts_unix_s,
                running_version: st.running_version,
            },
        );
    }
    let view = etcd.observe(&endpoints).await;
    for m in machines {
        if let Some(Ok(st)) = view.statuses.get(&m.client_url()) {
            if let Some(o) = obs.machines.get_mut(&m.name) {
                o.status = Some(st.clone());
                o.quorum_read = view.quorum_reads.get(&m.client_url()).copied();
            }
        }
    }
    obs.members = view.members.clone();
    obs.compacted = view.compacted;
    obs.alarms = view.alarms.clone();
    obs.cluster_version = view.cluster_version;
    obs.now_unix_s = now_unix_s();
    Observed {
        observation: obs,
        view,
        pids,
    }
}

/// What an observation needs of a control plane's records besides its machines, for
/// `spec.backup`: the snapshots recorded, and when the control plane was created (the
/// schedule counts from there until the first).
pub struct Recorded {
    snapshots: Vec<quorum_core::SnapshotRecord>,
    created_at_ms: Option<i64>,
}

impl Recorded {
    pub fn read(store: &Store, cp: &str) -> Result<Recorded, StoreError> {
        Ok(Recorded {
            snapshots: store.snapshots(cp)?,
            created_at_ms: store.created_at_ms(cp)?,
        })
    }

    pub fn fill(self, obs: &mut quorum_core::Observation) {
        obs.snapshots = self.snapshots.iter().map(|r| r.seen()).collect();
        obs.created_at_unix_s = self.created_at_ms.map(|ms| ms.div_euclid(1000));
    }
}

/// What the decision needs for `spec.recovery`: the control plane's fenced
/// directories on this host (members on hosts keep none here).
pub fn fenced_into(
    provider: &LocalProvider,
    cp: &ControlPlane,
    obs: &mut quorum_core::Observation,
) {
    if cp.spec.provider.is_local() {
        obs.fenced = provider.list_fenced(Some(&cp.name));
    }
}
