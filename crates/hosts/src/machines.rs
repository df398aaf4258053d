//! Members on registered hosts, driven through their agents: the `hosts` provider's
//! side of `quorum_provider::MachineProvider`. Every call that changes something
//! carries this replica's fencing token, so an agent refuses a deposed leader.

use crate::{placed_on, HostsError, HostsProvider, Target};
use quorum_agent::proto::Fence;
use quorum_core::{DataMarker, Machine, Version};
use quorum_provider::machines::BoxFuture;
use quorum_provider::{MachineError, MachineProvider, StartRequest};
use quorum_store::StoreTask;
use std::sync::Arc;

/// The machines of one control plane on hosts, for one pass.
pub struct OnHosts {
    pub hosts: Arc<HostsProvider>,
    pub store: StoreTask,
    /// This replica's leadership, carried by every call that changes something.
    pub fence: Fence,
}

impl From<HostsError> for MachineError {
    fn from(e: HostsError) -> Self {
        MachineError::Remote(Box::new(e))
    }
}

impl OnHosts {
    /// The host of `m`, ready to call.
    async fn target(&self, m: &Machine) -> Result<Target, HostsError> {
        self.hosts.target(&self.store, &placed_on(m)?).await
    }
}

impl MachineProvider for OnHosts {
    fn start<'a>(&'a self, req: &'a StartRequest<'a>) -> BoxFuture<'a, Result<(), MachineError>> {
        Box::pin(async move {
            let spec = start_spec(req);
            let t = self.target(req.machine).await?;
            self.hosts.start(&t, &self.fence, &spec).await?;
            Ok(())
        })
    }

    fn stop<'a>(&'a self, m: &'a Machine) -> BoxFuture<'a, Result<(), MachineError>> {
        Box::pin(async move {
            let t = self.target(m).await?;
            Ok(self.hosts.stop(&t, &self.fence, m).await?)
        })
    }

    fn delete<'a>(&'a self, m: &'a Machine) -> BoxFuture<'a, Result<(), MachineError>> {
        Box::pin(async move {
            let t = self.target(m).await?;
            Ok(self.hosts.delete(&t, &self.fence, m).await?)
        })
    }

    fn write_marker<'a>(
        &'a self,
        m: &'a Machine,
        marker: DataMarker,
    ) -> BoxFuture<'a, Result<(), MachineError>> {
        Box::pin(async move {
            let t = self.target(m).await?;
            Ok(self.hosts.write_marker(&t, &self.fence, m, marker).await?)
        })
    }

    /// From its host's agent; none if the agent does not answer.
    fn log_tail<'a>(&'a self, m: &'a Machine, lines: usize) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move {
            let Ok(t) = self.target(m).await else {
                return Vec::new();
            };
            let lines = u32::try_from(lines).unwrap_or(u32::MAX);
            match self.hosts.logs(&t, m, lines).await {
                Ok(lines) => lines,
                Err(e) => {
                    tracing::warn!(machine = %m.name, error = %e, "no log lines from its host");
                    Vec::new()
                }
            }
        })
    }

    /// Not yet: a rebuild's steps work on data directories where the controller runs.
    fn rebuilds(&self) -> Result<(), MachineError> {
        let what = "rebuilding a control plane after quorum loss";
        Err(HostsError::Unsupported(what).into())
    }

    /// Installs `version` on every host the machines run on, each in a task of its
    /// own, when an in-place step begins: the binaries travel to all hosts at once,
    /// while the first member drains, instead of one host after another inside each
    /// member's restart. Best effort: a start installs what is missing anyway (and
    /// waits for a staged install under way on its host), and says so if that fails.
    fn prepare(&self, machines: &[Machine], version: Version) {
        let mut seen = std::collections::BTreeSet::new();
        for m in machines.iter().filter(|m| !m.deleting) {
            let Some(host) = m.host() else { continue };
            if !seen.insert(host.to_string()) {
                continue;
            }
            let (hosts, store, m) = (self.hosts.clone(), self.store.clone(), m.clone());
            tokio::spawn(async move {
                let staged = match hosts.target(&store, &placed_on(&m)?).await {
                    Ok(t) => hosts.ensure_version(&t, version).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = &staged {
                    let host = m.host().unwrap_or_default();
                    tracing::warn!(host, %version, error = %e, "staging the new version failed; a start there installs it");
                }
                staged
            });
        }
    }
}

/// A start as the agent takes it (owned).
pub fn start_spec(req: &StartRequest<'_>) -> quorum_agent::StartSpec {
    quorum_agent::StartSpec {
        machine: req.machine.clone(),
        cluster_token: req.cluster_token.to_string(),
        state: req.state,
        initial_cluster: req.initial_cluster.to_vec(),
        tls: req.tls.map(|t| quorum_agent::MemberTls {
            ca_pem: t.ca_pem.to_string(),
            server_cert_pem: t.certs.server.cert_pem.clone(),
            server_key_pem: t.certs.server.key_pem.clone(),
            peer_cert_pem: t.certs.peer.cert_pem.clone(),
            peer_key_pem: t.certs.peer.key_pem.clone(),
            not_after_unix_s: t.certs.not_after_unix_s,
        }),
        quota_backend_bytes: req.quota_backend_bytes,
        expect_marker: req.expect_marker,
        force_new_cluster: req.force_new_cluster,
    }
}
