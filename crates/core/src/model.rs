//! The domain: what the user wants (spec), what quorum has promised itself (machine
//! records, the durable intent) and what it saw (observation).

use crate::version::Version;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// The standard etcd ports. Every local machine has its own loopback address, so every
/// machine uses the same ports, as separate hosts would.
pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;

/// Largest control plane quorum manages. etcd recommends at most 7 voting members.
pub const MAX_REPLICAS: u32 = 7;

/// How outdated machines are replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutStrategy {
    /// How many machines above `replicas` may exist during a rollout: 1 (add the new
    /// member before removing the old, the default) or 0 (remove first; needs 3+ replicas).
    #[serde(default = "default_max_surge")]
    pub max_surge: u32,
}

fn default_max_surge() -> u32 {
    1
}

impl Default for RolloutStrategy {
    fn default() -> Self {
        RolloutStrategy {
            max_surge: default_max_surge(),
        }
    }
}

/// What the user wants a control plane to be.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlPlaneSpec {
    pub replicas: u32,
    pub version: Version,
    #[serde(default)]
    pub rollout: RolloutStrategy,
    #[serde(default)]
    pub paused: bool,
    /// An HAProxy whose backend quorum keeps in step with the client endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub haproxy: Option<HaproxySpec>,
}

/// The HAProxy in front of a control plane's members, driven through its runtime API:
/// a member enters the backend only once its `/health` passes and leaves it (maintenance,
/// sessions shut) before its etcd member is removed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HaproxySpec {
    /// The runtime API: the unix socket of a `stats socket ... level admin` line.
    pub runtime_api: String,
    /// The backend that holds the members.
    #[serde(default = "default_haproxy_backend")]
    pub backend: String,
}

pub const DEFAULT_HAPROXY_BACKEND: &str = "etcd";

fn default_haproxy_backend() -> String {
    DEFAULT_HAPROXY_BACKEND.to_string()
}

/// A control plane as stored: the spec plus the teardown intent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ControlPlane {
    pub name: String,
    pub spec: ControlPlaneSpec,
    /// Intent: the user asked to delete it; every machine is stopped and deleted.
    #[serde(default)]
    pub deleting: bool,
}

/// A machine record: durable intent, written before the side effect it announces.
/// A record exists before its member is added; `deleting` is set before its member is
/// removed. Members are matched to machines by peer URL.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Machine {
    pub name: String,
    /// Creation order within the control plane; lower is older.
    pub serial: u64,
    pub address: Ipv4Addr,
    pub version: Version,
    /// Part of the initial cluster (started with `--initial-cluster-state new`).
    pub bootstrap: bool,
    /// Intent: this machine is leaving. Its member is removed, then it is stopped and deleted.
    #[serde(default)]
    pub deleting: bool,
}

impl Machine {
    pub fn peer_url(&self) -> String {
        format!("http://{}:{}", self.address, PEER_PORT)
    }

    pub fn client_url(&self) -> String {
        format!("http://{}:{}", self.address, CLIENT_PORT)
    }
}

/// A member as the leader's member list reports it. A member that was added but has
/// not started yet has an empty name and no client URLs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

/// What one member's own endpoint said about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointStatus {
    pub member_id: u64,
    /// 0 when the member knows no leader.
    pub leader_id: u64,
    pub raft_term: u64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    /// The server's own version (not the cluster version).
    pub version: Option<Version>,
    pub is_learner: bool,
    /// Active alarms on this member (for example `NOSPACE`, `CORRUPT`).
    pub alarms: Vec<String>,
}

/// The machine's process, as the machine provider sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    Running,
    Stopped,
}

/// What was seen of one machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineObservation {
    pub process: ProcessState,
    /// The data directory holds member data: the machine was started at least once.
    pub has_data: bool,
    /// `None` when the endpoint did not answer within its timeout.
    pub status: Option<EndpointStatus>,
}

/// A fresh observation of one control plane.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The member list as the leader reports it; `None` when no leader could be asked
    /// (no quorum, nothing started yet, or nothing reachable).
    pub members: Option<Vec<Member>>,
    /// The cluster version the leader reports, when known.
    pub cluster_version: Option<Version>,
    /// By machine name. A machine missing here was not observed: it counts as stopped,
    /// without data and unreachable.
    pub machines: BTreeMap<String, MachineObservation>,
}

/// The leader as the members see it: the leader id reported with the highest term (a
/// stale view after a partition has a lower term). The leader may be a member that
/// answers no status itself (an orphan).
pub fn leader_of<'a>(statuses: impl IntoIterator<Item = &'a EndpointStatus>) -> Option<u64> {
    statuses
        .into_iter()
        .filter(|s| s.leader_id != 0)
        .max_by_key(|s| s.raft_term)
        .map(|s| s.leader_id)
}

impl Observation {
    /// The leader as the observed members see it.
    pub fn leader_id(&self) -> Option<u64> {
        leader_of(self.machines.values().filter_map(|o| o.status.as_ref()))
    }
}

/// `floor(n/2) + 1`: the number of voters that must agree.
pub const fn quorum_size(voters: usize) -> usize {
    voters / 2 + 1
}
