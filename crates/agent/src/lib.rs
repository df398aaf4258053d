//! quorum-agent: members on real hosts. `quorum agent` runs on each host and runs etcd
//! members there for the controller, the way the local provider does on the
//! controller's own host (it embeds that provider: detached processes found again after
//! its own restart, SIGTERM then SIGKILL). It serves a small API over mutual TLS
//! (`server`), called through `client`. The join service (`join`), served by the
//! controller, exchanges a one-time token for the agent's certificate and renews it.
//!
//! Architecture invariants:
//! - The agent keeps no desired state: it starts, stops, reports and wipes what it is
//!   told, and the controller's store stays the one source of truth. What it keeps is
//!   its own identity (key, certificate, the hosts CA), the installed binaries, the
//!   members' directories, and one number per control plane: the highest fencing token
//!   it has seen (`fence`), which is what makes a deposed controller harmless.
//! - The agent knows nothing of the store; the join service reaches it through the
//!   `Registry` trait, which the caller implements.
//! - Every call has a deadline: the client's connect and request timeouts, the
//!   server's bound on a request's size.
//! - Only the controller commands an agent: the API refuses a client certificate that
//!   is not the controller's, even one from the hosts CA (agents hold such certificates
//!   too).

pub mod client;
pub mod fence;
pub use quorum_provider::install;
pub mod join;
pub mod runtime;
pub mod server;
pub mod tls;
pub mod token;

/// The generated API (proto/agent.proto).
pub mod proto {
    tonic::include_proto!("quorum.agent.v1");
}

use quorum_core::{ClusterState, DataMarker, InitialMember, Machine};
use serde::{Deserialize, Serialize};

/// The port an agent serves its API on unless told otherwise.
pub const AGENT_PORT: u16 = 7390;
/// The port the controller's join service listens on unless told otherwise.
pub const JOIN_PORT: u16 = 7391;
/// The agent's version, reported to the controller.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The largest request the agent accepts: an install carries etcd's binaries
/// (etcd 3.5 with etcdctl and etcdutl: about 60 MiB).
pub const MAX_REQUEST_BYTES: usize = 256 * 1024 * 1024;
/// The largest answer a client accepts (a report of many members, a log tail).
pub const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;
/// The most log lines one `Logs` call returns.
pub const MAX_LOG_LINES: u32 = 1_000;

/// A member's configuration, as the controller sends it in `Start`: what the local
/// provider's `StartRequest` borrows, owned.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartSpec {
    pub machine: Machine,
    pub cluster_token: String,
    pub state: ClusterState,
    pub initial_cluster: Vec<InitialMember>,
    /// Required when `machine.tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<MemberTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_backend_bytes: Option<u64>,
    /// See the local provider's `StartRequest::expect_marker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_marker: Option<Option<DataMarker>>,
    #[serde(default)]
    pub force_new_cluster: bool,
}

/// A member's certificates, in PEM.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberTls {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    pub peer_cert_pem: String,
    pub peer_key_pem: String,
    pub not_after_unix_s: i64,
}

impl std::fmt::Debug for MemberTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberTls")
            .field("not_after_unix_s", &self.not_after_unix_s)
            .field("keys", &"<redacted>")
            .finish()
    }
}

/// Whether `name` can name a member on an agent: a control plane's machine name
/// (`<control plane>-<serial>`, lower-case letters, digits and '-'), never a path.
pub fn valid_member_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Whether member `name` belongs to control plane `cp`: `<cp>-<serial>`.
pub fn member_of(name: &str, cp: &str) -> bool {
    name.strip_prefix(cp)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|serial| !serial.is_empty() && serial.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `host` can name a host: a DNS label (it is a SAN of the agent's certificate).
pub fn valid_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 63
        && !host.starts_with('-')
        && !host.ends_with('-')
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_are_never_paths() {
        for bad in ["", "../x", "a/b", "A-1", "-a", "a 1", ".", "a.1"] {
            assert!(!valid_member_name(bad), "{bad:?}");
        }
        assert!(valid_member_name("prod-12"));
    }

    #[test]
    fn a_member_belongs_to_the_control_plane_its_name_begins_with() {
        assert!(member_of("prod-12", "prod"));
        assert!(member_of("a-b-3", "a-b"));
        assert!(!member_of("a-b-3", "a"));
        assert!(!member_of("prod-", "prod"));
        assert!(!member_of("prod12", "prod"));
        assert!(!member_of("other-1", "prod"));
    }
}
