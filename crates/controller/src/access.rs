//! How quorum reaches one control plane's members: an etcd adapter with the right
//! credentials. For a TLS control plane (the default) that is a client certificate
//! issued on the spot from the control plane's CA in the store; the key stays in
//! memory, never on disk. The controller and the CLI (`status`, `--wait`) both use it.

use quorum_core::ControlPlane;
use quorum_etcd::{ClientTls, Etcd, Timeouts};
use quorum_pki::Ca;
use quorum_store::{Store, StoreError};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Lifetime of the client certificates quorum issues to itself. A long-running
/// controller replaces its certificate when less than `SELF_RENEW_S` is left.
pub const SELF_CERT_LIFETIME_S: i64 = 7 * 86_400;
const SELF_RENEW_S: i64 = 86_400;

pub fn now_unix_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// An adapter for one control plane, and its CA (for issuing machine certificates).
pub struct Access {
    pub etcd: Arc<Etcd>,
    pub ca: Option<Ca>,
    /// The client credentials quorum presents (also loaded into HAProxy, which
    /// presents them to the members on the clients' behalf).
    pub client: Option<ClientTls>,
    /// When this access must be rebuilt (its client certificate is near its end).
    renew_at_unix_s: i64,
}

impl Access {
    /// Whether it can still be used at `now_unix_s`.
    pub fn fresh(&self, now_unix_s: i64) -> bool {
        now_unix_s < self.renew_at_unix_s
    }
}

/// Loads the control plane's CA (a CA that does not load is corruption of the store)
/// and builds an adapter that presents a client certificate with `common_name`.
pub fn open(
    store: &Store,
    cp: &ControlPlane,
    common_name: &str,
    timeouts: Timeouts,
) -> Result<Access, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt {
        location: store.location(),
        detail,
    };
    let Some(stored) = store.certificate_authority(cp)? else {
        return Ok(Access {
            etcd: Arc::new(Etcd::new(timeouts)),
            ca: None,
            client: None,
            renew_at_unix_s: i64::MAX,
        });
    };
    let ca = Ca::from_pem(&cp.name, &stored.cert_pem, &stored.key_pem)
        .map_err(|e| corrupt(e.to_string()))?;
    let now = now_unix_s();
    let not_after = (now + SELF_CERT_LIFETIME_S).min(ca.not_after_unix_s());
    let me = ca
        .issue_client(common_name, now, not_after)
        .map_err(|e| corrupt(format!("cannot issue quorum's own client certificate: {e}")))?;
    let tls = ClientTls {
        ca_pem: ca.cert_pem().to_string(),
        cert_pem: me.cert_pem,
        key_pem: me.key_pem,
    };
    let etcd = Etcd::with_tls(timeouts, tls.clone()).map_err(|e| corrupt(e.to_string()))?;
    Ok(Access {
        etcd: Arc::new(etcd),
        ca: Some(ca),
        client: Some(tls),
        renew_at_unix_s: not_after - SELF_RENEW_S.min((not_after - now) / 2),
    })
}
