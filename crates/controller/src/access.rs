//! How quorum reaches one control plane's members: an etcd adapter with the right
//! credentials. For a TLS control plane (the default) that is a client certificate
//! issued on the spot from the control plane's CA in the store; the key stays in
//! memory, never on disk. The controller and the CLI (`status`, `--wait`) both use it.

use quorum_core::{CaFiles, CaPhase, ControlPlane, Machine};
use quorum_etcd::{ClientTls, Etcd, Timeouts};
use quorum_pki::{Ca, MachineCerts};
use quorum_store::{Store, StoreError};
use std::sync::Arc;

/// Lifetime of the client certificates quorum issues to itself. A long-running
/// controller replaces its certificate when less than `SELF_RENEW_S` is left.
pub const SELF_CERT_LIFETIME_S: i64 = 7 * 86_400;
const SELF_RENEW_S: i64 = 86_400;

pub(crate) use quorum_clock::now_unix_s;

/// An adapter for one control plane, and its CAs (for issuing machine certificates).
pub struct Access {
    pub etcd: Arc<Etcd>,
    /// Every CA of the control plane (the new one too, during a rotation).
    pub cas: Option<Cas>,
    /// The client credentials quorum presents (also loaded into HAProxy, which
    /// presents them to the members on the clients' behalf). Their `ca_pem` is what a
    /// client trusts: both CAs during a rotation.
    pub client: Option<ClientTls>,
    /// When this access must be rebuilt (its client certificate is near its end).
    renew_at_unix_s: i64,
    /// The CA generation and rotation phase it was built for: built again when either
    /// moves.
    made_for: (u32, Option<CaPhase>),
    /// Client certificates come from the rotation's new CA (`controller_uses_next_ca`).
    clients_from_next: bool,
}

/// A control plane's CAs: the one in force and, during a rotation, the new one.
pub struct Cas {
    pub current: Ca,
    pub next: Option<Ca>,
}

impl Cas {
    /// Every CA certificate, PEM, one after the other: what a client should trust.
    pub fn bundle_pem(&self) -> String {
        self.pem_of(true, self.next.is_some())
    }

    fn pem_of(&self, current: bool, next: bool) -> String {
        let mut out = String::new();
        let mut push = |pem: &str| {
            out.push_str(pem.trim_end());
            out.push('\n');
        };
        if current {
            push(self.current.cert_pem());
        }
        if let (true, Some(n)) = (next, &self.next) {
            push(n.cert_pem());
        }
        out
    }

    /// A machine's files for a start: what it trusts (PEM) and its certificates, fresh
    /// keys every time, ending at `not_after_unix_s` (or the issuing CA's end).
    pub fn machine_files(
        &self,
        files: CaFiles,
        m: &Machine,
        now_unix_s: i64,
        not_after_unix_s: i64,
    ) -> Result<(String, MachineCerts), quorum_pki::PkiError> {
        let issue = |by_next: bool| {
            let ca = match &self.next {
                Some(n) if by_next => n,
                _ => &self.current,
            };
            ca.issue_machine_from(
                &m.name,
                m.address.into(),
                &[quorum_provider::LOCAL_SOURCE_ADDRESS],
                now_unix_s,
                not_after_unix_s.min(ca.not_after_unix_s()),
            )
        };
        let mut certs = issue(files.peer_by_next)?;
        if files.server_by_next != files.peer_by_next {
            let other = issue(files.server_by_next)?;
            certs.server = other.server;
            certs.not_after_unix_s = certs.not_after_unix_s.min(other.not_after_unix_s);
        }
        let trust = self.pem_of(
            files.trusts_current || self.next.is_none(),
            files.trusts_next,
        );
        Ok((trust, certs))
    }
}

impl Cas {
    /// The CA client certificates come from: the one in force, or the new one.
    fn for_clients(&self, next: bool) -> &Ca {
        match &self.next {
            Some(n) if next => n,
            _ => &self.current,
        }
    }
}

impl Access {
    /// The CA client certificates come from now (quorum's own, `quorum credentials`,
    /// `quorum etcdctl`): the CA in force, or during a CA rotation from its phase
    /// `Reissue` on, the new one. `None` for a plaintext control plane.
    pub fn ca(&self) -> Option<&Ca> {
        self.cas
            .as_ref()
            .map(|c| c.for_clients(self.clients_from_next))
    }

    /// Whether it can still be used at `now_unix_s` for `cp` as stored now.
    pub fn fresh(&self, cp: &ControlPlane, now_unix_s: i64) -> bool {
        now_unix_s < self.renew_at_unix_s && self.made_for == made_for(cp)
    }

    /// What a client of the control plane trusts (PEM; both CAs during a rotation).
    pub fn trust_pem(&self) -> Option<String> {
        self.cas.as_ref().map(Cas::bundle_pem)
    }
}

fn made_for(cp: &ControlPlane) -> (u32, Option<CaPhase>) {
    (cp.ca_generation, cp.ca_rotation.as_ref().map(|r| r.phase))
}

/// How many times `open` reads a control plane's CAs again when a CA rotation moved
/// on between its reads (each move is one step of a rotation, so two retries cover a
/// finish racing the first read; more would mean a store changing under us).
const LOAD_ATTEMPTS: usize = 3;

/// Loads the control plane's CAs (a CA that does not load is corruption of the store)
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
    let Some((read, current, next)) = read_cas(store, cp)? else {
        return Ok(Access {
            etcd: Arc::new(Etcd::new(timeouts)),
            cas: None,
            client: None,
            renew_at_unix_s: i64::MAX,
            made_for: made_for(cp),
            clients_from_next: false,
        });
    };
    let current = Ca::from_pem(&cp.name, &current.cert_pem, &current.key_pem)
        .map_err(|e| corrupt(e.to_string()))?;
    let next = next
        .map(|n| Ca::from_pem(&cp.name, &n.cert_pem, &n.key_pem))
        .transpose()
        .map_err(|e| corrupt(e.to_string()))?;
    let cp = &read;
    let cas = Cas { current, next };
    let clients_from_next = cp.controller_uses_next_ca();
    let issuer = cas.for_clients(clients_from_next);
    let now = now_unix_s();
    let not_after = (now + SELF_CERT_LIFETIME_S).min(issuer.not_after_unix_s());
    let me = issuer
        .issue_client(common_name, now, not_after)
        .map_err(|e| corrupt(format!("cannot issue quorum's own client certificate: {e}")))?;
    let tls = ClientTls {
        ca_pem: cas.bundle_pem(),
        cert_pem: me.cert_pem,
        key_pem: me.key_pem,
    };
    let etcd = Etcd::with_tls(timeouts, tls.clone()).map_err(|e| corrupt(e.to_string()))?;
    Ok(Access {
        etcd: Arc::new(etcd),
        cas: Some(cas),
        client: Some(tls),
        renew_at_unix_s: not_after - SELF_RENEW_S.min((not_after - now) / 2),
        made_for: made_for(cp),
        clients_from_next,
    })
}

/// The control plane as last read, with its CA and the next one (a rotation's);
/// `None` for a plaintext control plane. The control plane and its CAs are separate
/// reads: a rotation that finished between them (the controller deletes the new CA as
/// it makes it current) looks like a missing CA, so the control plane is read again,
/// up to `LOAD_ATTEMPTS` times; only a record that still says "rotating" is corruption.
fn read_cas(
    store: &Store,
    cp: &ControlPlane,
) -> Result<
    Option<(
        ControlPlane,
        quorum_store::StoredCa,
        Option<quorum_store::StoredCa>,
    )>,
    StoreError,
> {
    let mut read = cp.clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match load_cas(store, &read)? {
            Loaded::None => return Ok(None),
            Loaded::Cas(current, next) => return Ok(Some((read, current, next))),
            Loaded::NextMissing(to) => {
                let again = store.control_plane(&cp.name)?;
                let moved = again.as_ref().map(made_for) != Some(made_for(&read));
                match again {
                    Some(again) if moved && attempt < LOAD_ATTEMPTS => read = again,
                    _ => {
                        return Err(StoreError::Corrupt {
                            location: store.location(),
                            detail: format!(
                                "a CA rotation of {:?} to generation {to} is recorded but its new CA is missing",
                                cp.name
                            ),
                        })
                    }
                }
            }
        }
    }
}

/// What one read of a control plane's CAs found.
enum Loaded {
    /// The control plane has no CA (plaintext).
    None,
    /// Its CA, and the rotation's new CA when it is rotating.
    Cas(quorum_store::StoredCa, Option<quorum_store::StoredCa>),
    /// It is rotating to this generation but the new CA was not there.
    NextMissing(u32),
}

fn load_cas(store: &Store, cp: &ControlPlane) -> Result<Loaded, StoreError> {
    let Some(current) = store.certificate_authority(cp)? else {
        return Ok(Loaded::None);
    };
    let Some(r) = &cp.ca_rotation else {
        return Ok(Loaded::Cas(current, None));
    };
    Ok(match store.next_certificate_authority(&cp.name)? {
        Some(next) => Loaded::Cas(current, Some(next)),
        None => Loaded::NextMissing(r.to),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_core::{CaRotation, ControlPlaneSpec};
    use quorum_store::StoredCa;

    fn stored(ca: &Ca) -> StoredCa {
        StoredCa {
            cert_pem: ca.cert_pem().to_string(),
            key_pem: ca.key_pem().to_string(),
        }
    }

    /// A reader that read the control plane while a CA rotation was under way and its
    /// CAs after the rotation finished (the new CA made current and deleted as "next")
    /// gets the CAs in force now, not a report of corruption (CI saw `quorum status`
    /// fail this way while a controller finished a rotation).
    #[test]
    fn a_rotation_finishing_between_the_reads_is_not_corruption() {
        let home = tempfile::tempdir().unwrap();
        let mut store = Store::open(&home.path().join("home")).unwrap();
        let spec: ControlPlaneSpec =
            serde_json::from_value(serde_json::json!({"replicas": 3, "version": "3.5.1"})).unwrap();
        let cp = ControlPlane {
            spec_version: 0,
            client_addresses: Vec::new(),
            name: "rot".into(),
            spec,
            deleting: false,
            rebuild: None,
            ca_generation: 0,
            ca_rotation: None,
            road: None,
            v2_api_never_open: false,
        };
        let now = now_unix_s();
        let old = Ca::generate("rot", now, 86_400).unwrap();
        store
            .create_control_plane(&cp, Some(&stored(&old)), 1)
            .unwrap();
        let new = Ca::generate_generation("rot", 1, now, 86_400).unwrap();
        let rotation = CaRotation {
            from: 0,
            to: 1,
            phase: CaPhase::Trust,
            since_unix_s: now,
            started_unix_s: now,
        };
        assert!(store
            .begin_ca_rotation("rot", &stored(&new), &rotation)
            .unwrap());
        let rotating = store.get_control_plane("rot").unwrap();
        let during = open(&store, &rotating, "quorum-test", Timeouts::default()).unwrap();
        assert!(during.cas.as_ref().unwrap().next.is_some());
        assert!(during.fresh(&rotating, now));

        assert!(store.finish_ca_rotation("rot", 1).unwrap());
        let after = open(&store, &rotating, "quorum-test", Timeouts::default()).unwrap();
        let cas = after.cas.as_ref().unwrap();
        assert!(cas.next.is_none(), "the rotation is over");
        assert_eq!(
            cas.current.cert_pem(),
            new.cert_pem(),
            "the new CA is in force"
        );
        assert!(
            !after.fresh(&rotating, now),
            "built for the store's record, so the stale reader builds again"
        );
        assert!(after.fresh(&store.get_control_plane("rot").unwrap(), now));
    }
}
