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
use quorum_haproxy::{plan, HaproxyError, LbOp, RuntimeApi, Server, ServerTls};
use std::net::SocketAddr;

/// Every runtime API command gives up after this long.
pub const RUNTIME_API_TIMEOUT_MS: u64 = 1_000;

/// What HAProxy needs to reach members that speak mutual TLS: the control plane's CA
/// and a client certificate with its key, loaded through the admin socket under the
/// names in `names` (the key never touches HAProxy's disk).
#[derive(Clone)]
pub struct LbTls {
    pub ca_pem: String,
    /// Certificate then key, PEM.
    pub bundle_pem: String,
    pub names: ServerTls,
}

impl LbTls {
    /// The in-memory names for a control plane's CA and client certificate.
    pub fn names(control_plane: &str) -> ServerTls {
        ServerTls {
            ca_file: format!("quorum-{control_plane}-ca"),
            crt: format!("quorum-{control_plane}-client"),
        }
    }
}

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
    /// The TLS material was (re)loaded into HAProxy in this sync.
    pub tls_loaded: bool,
}

fn api(spec: &HaproxySpec) -> RuntimeApi {
    RuntimeApi::new(&spec.runtime_api, RUNTIME_API_TIMEOUT_MS)
}

pub fn addr(m: &Machine) -> SocketAddr {
    SocketAddr::from((m.address, CLIENT_PORT))
}

/// The backend's servers now. Blocking, bounded by the runtime API timeout.
pub fn read(spec: &HaproxySpec) -> Result<Vec<Server>, String> {
    api(spec)
        .servers(&spec.backend)
        .map_err(|e| format!("reading HAProxy's backend: {e}"))
}

/// Whether `m` is already in the backend, taking traffic, at its address.
pub fn serving(current: &[Server], m: &Machine) -> bool {
    current
        .iter()
        .any(|s| s.name == m.name && s.addr == addr(m) && !s.maintenance)
}

/// Brings the backend from `current` to `desired` (name and address of each member
/// that may take traffic: in the endpoints and healthy). With `tls`, the CA and client
/// certificate are loaded first when `reload` says so (a new certificate) or when a
/// server is to be added and HAProxy does not hold them (it restarted). Blocking,
/// bounded by the runtime API timeout per command; run it off the async threads.
pub fn apply(
    spec: &HaproxySpec,
    desired: &[(String, SocketAddr)],
    current: &[Server],
    tls: Option<&LbTls>,
    reload: bool,
) -> Synced {
    let api = api(spec);
    let mut out = Synced::default();
    let ops = plan(desired, current);
    if let Some(t) = tls {
        let adds = ops.iter().any(|op| matches!(op, LbOp::Add { .. }));
        if reload || adds {
            match ensure_tls(&api, t, reload) {
                Ok(loaded) => out.tls_loaded = loaded,
                Err(e) => {
                    out.blocked = Some(format!("loading TLS credentials into HAProxy: {e}"));
                    return out;
                }
            }
        }
    }
    for op in ops {
        let res = match &op {
            LbOp::Add { name, addr } => {
                api.add_server(&spec.backend, name, *addr, tls.map(|t| &t.names))
            }
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

/// Loads the CA and the client certificate unless HAProxy holds both and `force` is
/// off. Returns whether it loaded them.
pub fn ensure_tls(api: &RuntimeApi, t: &LbTls, force: bool) -> Result<bool, HaproxyError> {
    if !force
        && api.loaded("cert")?.contains(&t.names.crt)
        && api.loaded("ca-file")?.contains(&t.names.ca_file)
    {
        return Ok(false);
    }
    api.load_ca_file(&t.names.ca_file, &t.ca_pem)?;
    api.load_certificate(&t.names.crt, &t.bundle_pem)?;
    Ok(true)
}

/// Right before `machine`'s member is removed: maintenance (again, idempotent) and its
/// sessions shut, so no client request is still on its way to it.
pub fn shut_before_removal(spec: &HaproxySpec, machine: &str) -> Result<(), HaproxyError> {
    api(spec).drain_server(&spec.backend, machine)
}
