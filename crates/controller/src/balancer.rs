//! Keeps a control plane's HAProxy backend in step with its published endpoints.
//!
//! Each reconcile, after the endpoints are published and before any action: read the
//! backend, work out what to change (`quorum_haproxy::plan`, a pure function) and do it.
//! A member enters the backend only once its `/health` passes; a member that left the
//! endpoints is put in maintenance (no new requests) at once, and its remaining sessions
//! are shut right before its etcd member is removed (`shut_before_removal`), after the
//! controller's drain period. A removal never happens while the backend could not be
//! brought in step (the reconcile reports `Blocked` and the controller holds removals).

use quorum_core::{HaproxySpec, Machine, CLIENT_PORT};
use quorum_haproxy::{etcd_health, plan, HaproxyError, LbOp, RuntimeApi};
use std::net::SocketAddr;

/// Every runtime API command gives up after this long.
pub const RUNTIME_API_TIMEOUT_MS: u64 = 1_000;
/// A member's `/health` probe gives up after this long.
pub const HEALTH_TIMEOUT_MS: u64 = 500;

/// What a sync did.
#[derive(Debug, Default)]
pub struct Synced {
    /// Operations performed, for the event log.
    pub done: Vec<LbOp>,
    /// Members in the endpoints whose `/health` did not pass yet (not added).
    pub unhealthy: Vec<String>,
    /// Why the backend is not in step, if it is not: removals wait.
    pub blocked: Option<String>,
    /// Cleanup that failed (a drained server that could not be deleted yet); harmless.
    pub cleanup_errors: Vec<String>,
}

fn api(spec: &HaproxySpec) -> RuntimeApi {
    RuntimeApi::new(&spec.runtime_api, RUNTIME_API_TIMEOUT_MS)
}

fn addr(m: &Machine) -> SocketAddr {
    SocketAddr::from((m.address, CLIENT_PORT))
}

/// Brings the backend in step with `endpoints` (client URLs of `machines`). Blocking:
/// bounded by the runtime API and health timeouts; run it off the async threads.
pub fn sync(spec: &HaproxySpec, endpoints: &[String], machines: &[Machine]) -> Synced {
    let api = api(spec);
    let mut out = Synced::default();
    let current = match api.servers(&spec.backend) {
        Ok(c) => c,
        Err(e) => {
            out.blocked = Some(format!("reading HAProxy's backend: {e}"));
            return out;
        }
    };
    let mut desired = Vec::new();
    for m in machines
        .iter()
        .filter(|m| endpoints.contains(&m.client_url()))
    {
        let serving = current
            .iter()
            .any(|s| s.name == m.name && s.addr == addr(m) && !s.maintenance);
        // A member enters the backend only once it says it is healthy itself.
        if serving || etcd_health(addr(m), HEALTH_TIMEOUT_MS).is_ok() {
            desired.push((m.name.clone(), addr(m)));
        } else {
            out.unhealthy.push(m.name.clone());
        }
    }
    for op in plan(&desired, &current) {
        let res = match &op {
            LbOp::Add { name, addr } => api.add_server(&spec.backend, name, *addr),
            LbOp::Enable { name } => api.enable_server(&spec.backend, name),
            LbOp::Drain { name } => api.set_maintenance(&spec.backend, name),
            LbOp::Delete { name } => match api.delete_server(&spec.backend, name) {
                Ok(()) => Ok(()),
                Err(e) => {
                    out.cleanup_errors.push(format!("{op}: {e}"));
                    continue;
                }
            },
        };
        match res {
            Ok(()) => out.done.push(op),
            Err(e) => {
                out.blocked = Some(format!("{op}: {e}"));
                return out;
            }
        }
    }
    out
}

/// Right before `machine`'s member is removed: maintenance (again, idempotent) and its
/// sessions shut, so no client request is still on its way to it.
pub fn shut_before_removal(spec: &HaproxySpec, machine: &str) -> Result<(), HaproxyError> {
    api(spec).drain_server(&spec.backend, machine)
}
