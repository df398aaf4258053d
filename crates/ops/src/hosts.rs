//! Hosts and their agents, as the store keeps them: one record per host (setting
//! `host/<name>`, JSON), the hosts CA (sealed, `Store::hosts_ca`), and where the join
//! service listens (setting `hosts/join-endpoint`). `quorum host add` writes a record
//! with a one-time join token (only the SHA-256 of its secret is kept); the join
//! service (`StoreRegistry`) consumes it, pins the agent's key and records its
//! certificate's end; renewals are for that key only.
//!
//! Every change of a record is a compare-and-swap on the text read, retried a bounded
//! number of times, so two controllers serving joins never both consume one token.

use anyhow::{anyhow, bail, Context, Result};
use quorum_agent::join::{Grant, Registry, RegistryError};
use quorum_agent::token::JoinToken;
pub use quorum_store::hosts::{get, list, HostRecord, PendingJoin, HOST_PREFIX};
use quorum_store::hosts::{key, read};
use quorum_store::{Store, StoredCa};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

/// Where the join service listens, as the controller serving it recorded it.
pub const JOIN_ENDPOINT_SETTING: &str = "hosts/join-endpoint";
/// How long a join token works unless `--token-ttl` says otherwise.
pub const DEFAULT_TOKEN_TTL_S: u64 = 24 * 3_600;
/// How long an agent's certificate lasts unless `--certificate-lifetime` says otherwise.
/// The agent renews it two thirds of the way.
pub const DEFAULT_AGENT_CERT_LIFETIME_S: u64 = 90 * 86_400;
/// The shortest certificate lifetime allowed (tests use it to see expiry).
pub const MIN_AGENT_CERT_LIFETIME_S: u64 = 10;
/// How long the controller's own certificate towards agents lasts (one is made per
/// process start and per day).
pub const CONTROLLER_CERT_LIFETIME_S: i64 = 86_400;
/// How many times a record change is tried against concurrent writers.
const WRITE_ATTEMPTS: u32 = 5;
/// The most labels a host may carry.
pub const MAX_LABELS: usize = 16;

/// What `quorum host add` asks for.
#[derive(Clone, Debug)]
pub struct AddHost {
    pub name: String,
    pub address: IpAddr,
    pub labels: BTreeMap<String, String>,
    pub token_ttl_s: u64,
    pub certificate_lifetime_s: u64,
    /// The host exists: issue a new token (the agent lost its state, or its certificate
    /// is past the renewal grace).
    pub rejoin: bool,
    /// Where agents reach the join service; default: what the controller recorded.
    pub endpoint: Option<SocketAddr>,
}

/// Parses `k=v` labels (letters, digits, '-', '_', '.'; keys 1–63, values 0–63).
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not a label: write KEY=VALUE, e.g. zone=a"))?;
    let ok = |t: &str, min: usize| {
        t.len() >= min
            && t.len() <= 63
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    if !ok(k, 1) || !ok(v, 0) {
        return Err(format!(
            "{s:?} is not a label: keys and values use letters, digits, '-', '_' and '.', up to 63 each"
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

/// The hosts CA, made at first use.
pub fn hosts_ca(store: &Store, now_unix_s: i64) -> Result<quorum_pki::Ca> {
    let stored = store.hosts_ca_or_init(|| {
        let ca = quorum_pki::Ca::generate("hosts", now_unix_s, quorum_pki::DEFAULT_CA_LIFETIME_S)
            .map_err(|e| quorum_store::StoreError::Corrupt {
            location: "the hosts CA".into(),
            detail: e.to_string(),
        })?;
        Ok(StoredCa {
            cert_pem: ca.cert_pem().to_string(),
            key_pem: ca.key_pem().to_string(),
        })
    })?;
    Ok(quorum_pki::Ca::from_pem(
        "hosts",
        &stored.cert_pem,
        &stored.key_pem,
    )?)
}

/// Records host `req.name` (or, with `rejoin`, a new token for it) and returns its join
/// token.
pub fn add(store: &Store, req: &AddHost, now_unix_s: i64) -> Result<JoinToken> {
    check_add(req)?;
    let endpoint = join_endpoint(store, req)?;
    let ca = hosts_ca(store, now_unix_s)?;
    let secret = JoinToken::new_secret();
    let join = PendingJoin {
        secret_sha256: JoinToken::secret_sha256(&secret),
        expires_unix_s: now_unix_s
            .saturating_add(i64::try_from(req.token_ttl_s).unwrap_or(i64::MAX)),
    };
    match (read(store, &req.name)?, req.rejoin) {
        (Some(_), false) => bail!(
            "host {} exists; to give its agent a new token (state lost, or its certificate expired long ago): quorum host add {} --address {} --rejoin",
            req.name,
            req.name,
            req.address
        ),
        (None, true) => bail!("no host {} to rejoin; add it without --rejoin", req.name),
        (Some((h, text)), true) => record_rejoin(store, req, h, &text, join)?,
        (None, false) => record_new(store, req, join, now_unix_s)?,
    }
    Ok(JoinToken {
        host: req.name.clone(),
        address: req.address,
        endpoint,
        ca_sha256: quorum_pki::agents::certificate_sha256(ca.cert_pem())?,
        secret,
    })
}

/// Refuses a name that is not a host name.
pub(crate) fn check_host_name(name: &str) -> Result<()> {
    if !quorum_agent::valid_host_name(name) {
        bail!(
            "{name:?} is not a host name: use 1 to 63 lower-case letters, digits or '-' (not at either end)"
        );
    }
    Ok(())
}

/// The checks of a request on its own: a host name, an address members can listen on,
/// not too many labels, a certificate lifetime that leaves time to renew.
fn check_add(req: &AddHost) -> Result<()> {
    check_host_name(&req.name)?;
    if req.address.is_unspecified() || req.address.is_multicast() {
        bail!(
            "{} cannot be a host's address: give the address its agent and members listen on",
            req.address
        );
    }
    if req.labels.len() > MAX_LABELS {
        bail!("a host carries at most {MAX_LABELS} labels");
    }
    if req.certificate_lifetime_s < MIN_AGENT_CERT_LIFETIME_S {
        bail!(
            "a certificate lifetime under {MIN_AGENT_CERT_LIFETIME_S} s leaves no time to renew it"
        );
    }
    Ok(())
}

/// Where the agent joins: the endpoint asked for, else the one the controller serving
/// joins recorded.
fn join_endpoint(store: &Store, req: &AddHost) -> Result<SocketAddr> {
    match req.endpoint {
        Some(e) => Ok(e),
        None => store
            .setting(JOIN_ENDPOINT_SETTING)?
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                anyhow!(
                    "no join service is known: start the controller with --join-listen IP:PORT, or give --join-endpoint IP:PORT"
                )
            }),
    }
}

/// Gives the recorded host `h` (read as `text`) the new `join`, with the labels and
/// certificate lifetime asked for; its address stays.
fn record_rejoin(
    store: &Store,
    req: &AddHost,
    h: HostRecord,
    text: &str,
    join: PendingJoin,
) -> Result<()> {
    if h.address != req.address {
        bail!(
            "host {} is at {}, not {}: a host keeps its address (its members' URLs name it)",
            req.name,
            h.address,
            req.address
        );
    }
    let next = HostRecord {
        join: Some(join),
        labels: if req.labels.is_empty() {
            h.labels.clone()
        } else {
            req.labels.clone()
        },
        certificate_lifetime_s: req.certificate_lifetime_s,
        ..h
    };
    if !store.replace_setting(&key(&req.name), text, &to_json(&next))? {
        bail!(
            "host {} changed while its token was made; run the command again",
            req.name
        );
    }
    Ok(())
}

/// Records a new host with `join`, unless another host has its address or someone
/// added it meanwhile.
fn record_new(store: &Store, req: &AddHost, join: PendingJoin, now_unix_s: i64) -> Result<()> {
    if let Some(other) = list(store)?.into_iter().find(|h| h.address == req.address) {
        bail!(
            "{} is already the address of host {}",
            req.address,
            other.name
        );
    }
    let rec = HostRecord {
        name: req.name.clone(),
        address: req.address,
        labels: req.labels.clone(),
        certificate_lifetime_s: req.certificate_lifetime_s,
        added_unix_s: now_unix_s,
        join: Some(join),
        key_sha256: None,
        joined_unix_s: None,
        certificate_not_after_unix_s: None,
        removing_unix_s: None,
    };
    let text = to_json(&rec);
    if store.setting_or_init(&key(&req.name), &text)? != text {
        bail!("host {} was added by someone else meanwhile", req.name);
    }
    Ok(())
}

/// What `quorum host remove` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    pub address: IpAddr,
    /// Its agent had joined (it holds a certificate, no longer renewed).
    pub joined: bool,
    /// Stale port claims removed with it.
    pub claims: usize,
}

/// Removes host `name`'s record, and the port claims on it, when no machine of any
/// control plane is recorded there. The record is first marked (placement gives it
/// nothing new, and an allocation that claimed a port before the mark reads it again
/// after its claim and gives up), then the machines and claims are checked again: a
/// fresh claim is an allocation under way, and the mark is taken back. A removal cut
/// off after the mark leaves the host marked; running it again finishes it. Its
/// agent's certificate is not renewed after (the join service knows no such host).
pub fn remove(store: &Store, name: &str, now_ms: i64) -> Result<Removed> {
    let Some((h, text)) = read(store, name)? else {
        bail!("no host {name} is registered (`quorum hosts` lists them)");
    };
    refuse_if_in_use(store, name)?;
    let marked = if h.removing_unix_s.is_some() {
        text.clone()
    } else {
        let next = to_json(&HostRecord {
            removing_unix_s: Some(now_ms / 1_000),
            ..h.clone()
        });
        if !store.replace_setting(&key(name), &text, &next)? {
            bail!("host {name} changed while it was being removed; run the command again");
        }
        next
    };
    let claims = quorum_store::hosts::port_claims(store, name)?;
    let placing = claims
        .iter()
        .any(|(_, v)| quorum_store::hosts::claim_is_fresh(v, now_ms));
    let in_use = refuse_if_in_use(store, name);
    if placing || in_use.is_err() {
        if marked != text {
            // Taken back: the host stays as it was. Failing, it stays marked, which
            // only keeps new members off it until this command runs again.
            let _ = store.replace_setting(&key(name), &marked, &text);
        }
        in_use?;
        bail!(
            "a member is being placed on host {name} right now; run the command again in a minute"
        );
    }
    for (k, v) in &claims {
        store.remove_setting(k, v)?;
    }
    if !store.remove_setting(&key(name), &marked)? {
        bail!("host {name} changed while it was being removed; run the command again");
    }
    Ok(Removed {
        address: h.address,
        joined: h.key_sha256.is_some(),
        claims: claims.len(),
    })
}

/// Fails, naming them, when machines of any control plane are recorded on `host`.
fn refuse_if_in_use(store: &Store, host: &str) -> Result<()> {
    let mut on = Vec::new();
    for cp in store.control_planes()? {
        for m in store.machines(&cp.name)? {
            if m.host() == Some(host) {
                on.push(format!("{} ({})", m.name, cp.name));
            }
        }
    }
    if on.is_empty() {
        return Ok(());
    }
    bail!(
        "host {host} still runs {}: {}. A host is removed once nothing runs there: delete those control planes, or scale them down until no member is left on it (moving a member off a host is not built yet)",
        if on.len() == 1 { "a member".to_string() } else { format!("{} members", on.len()) },
        on.join(", ")
    )
}

fn to_json(h: &HostRecord) -> String {
    // A record of strings and numbers always serialises.
    serde_json::to_string(h).unwrap_or_default()
}

/// The controller's identity towards agents: the hosts CA, and a client certificate
/// (CN "quorum controller") valid for a day.
pub fn controller_identity(
    store: &Store,
    now_unix_s: i64,
) -> Result<(String, quorum_pki::Identity)> {
    let ca = hosts_ca(store, now_unix_s)?;
    let id = ca.issue_client(
        quorum_pki::agents::CONTROLLER_CN,
        now_unix_s,
        now_unix_s + CONTROLLER_CERT_LIFETIME_S,
    )?;
    Ok((ca.cert_pem().to_string(), id))
}

/// The rustls configuration the controller dials agents with.
pub fn controller_tls(
    store: &Store,
    now_unix_s: i64,
) -> Result<Arc<quorum_agent::tls::ClientConfig>> {
    let (ca, id) = controller_identity(store, now_unix_s)?;
    let identity = quorum_agent::tls::Identity::new(&id.cert_pem, &id.key_pem)?;
    Ok(quorum_agent::tls::client(&ca, identity)?)
}

/// The join service's identity at `ip`: the hosts CA and a server certificate for it.
pub fn join_identity(
    store: &Store,
    ip: IpAddr,
    now_unix_s: i64,
) -> Result<(String, quorum_pki::Identity)> {
    let ca = hosts_ca(store, now_unix_s)?;
    let id = ca.issue_service(
        "quorum join service",
        ip,
        now_unix_s,
        now_unix_s + quorum_pki::DEFAULT_CA_LIFETIME_S as i64 / 10,
    )?;
    Ok((ca.cert_pem().to_string(), id))
}

/// The registry the join service consults: the store's host records.
pub struct StoreRegistry {
    store: Mutex<Store>,
}

impl StoreRegistry {
    pub fn new(store: Store) -> StoreRegistry {
        StoreRegistry {
            store: Mutex::new(store),
        }
    }

    /// Reads host `name`, lets `change` judge and edit it, writes it back if unchanged
    /// meanwhile; retried against concurrent writers.
    fn update(
        &self,
        name: &str,
        change: impl Fn(&mut HostRecord) -> Result<Grant, RegistryError>,
    ) -> Result<Grant, RegistryError> {
        let store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let unavailable = |e: anyhow::Error| RegistryError::Unavailable(format!("{e:#}"));
        for _ in 0..WRITE_ATTEMPTS {
            let (mut h, text) = read(&store, name)
                .map_err(|e| unavailable(e.into()))?
                .ok_or_else(|| RegistryError::UnknownHost(name.to_string()))?;
            let grant = change(&mut h)?;
            match store.replace_setting(&key(name), &text, &to_json(&h)) {
                Ok(true) => return Ok(grant),
                Ok(false) => continue,
                Err(e) => return Err(unavailable(e.into())),
            }
        }
        Err(RegistryError::Unavailable(format!(
            "host {name}'s record kept changing under {WRITE_ATTEMPTS} attempts; try again"
        )))
    }
}

fn lifetime_end(h: &HostRecord, now: i64) -> i64 {
    now.saturating_add(i64::try_from(h.certificate_lifetime_s).unwrap_or(i64::MAX))
}

impl Registry for StoreRegistry {
    fn join(
        &self,
        host: &str,
        secret: &str,
        key_sha256: &str,
        now: i64,
    ) -> Result<Grant, RegistryError> {
        let claimed = JoinToken::secret_sha256(secret);
        self.update(host, |h| {
            let Some(pending) = &h.join else {
                return Err(RegistryError::Refused(format!(
                    "host {host} has no join token outstanding (a token works once): `quorum host add {host} --address {} --rejoin` makes a new one",
                    h.address
                )));
            };
            if pending.secret_sha256 != claimed {
                return Err(RegistryError::Refused(format!("that is not host {host}'s join token")));
            }
            if now > pending.expires_unix_s {
                return Err(RegistryError::Refused(format!(
                    "host {host}'s join token expired at {}: `quorum host add {host} --address {} --rejoin` makes a new one",
                    quorum_pki::format_unix_s(pending.expires_unix_s),
                    h.address
                )));
            }
            let end = lifetime_end(h, now);
            h.join = None;
            h.key_sha256 = Some(key_sha256.to_string());
            h.joined_unix_s = Some(now);
            h.certificate_not_after_unix_s = Some(end);
            Ok(Grant {
                address: h.address,
                not_after_unix_s: end,
            })
        })
    }

    fn renew(&self, host: &str, key_sha256: &str, now: i64) -> Result<Grant, RegistryError> {
        self.update(host, |h| {
            if h.key_sha256.as_deref() != Some(key_sha256) {
                return Err(RegistryError::Refused(format!(
                    "host {host} joined with another key; renewals are for that key only (join again with a new token)"
                )));
            }
            let end = lifetime_end(h, now);
            h.certificate_not_after_unix_s = Some(end);
            Ok(Grant {
                address: h.address,
                not_after_unix_s: end,
            })
        })
    }
}

/// Serves the join service on `addr` until `stop`, after recording `addr` in the store
/// (so `quorum host add` puts it in tokens). Its own store connection: a join never
/// waits on a reconcile.
pub async fn serve_join(
    at: &crate::Place,
    addr: std::net::SocketAddr,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<()> {
    if addr.ip().is_unspecified() {
        bail!("--join-listen needs the address agents dial ({addr} is every address): its certificate names it");
    }
    let store = at.connect()?;
    let now = quorum_clock::now_unix_s();
    let text = addr.to_string();
    let recorded = store.setting_or_init(JOIN_ENDPOINT_SETTING, &text)?;
    if recorded != text && !store.replace_setting(JOIN_ENDPOINT_SETTING, &recorded, &text)? {
        bail!("the join endpoint in the store changed while this controller recorded its own; start it again");
    }
    let ca = hosts_ca(&store, now)?;
    let (ca_pem, id) = join_identity(&store, addr.ip(), now)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--join-listen {addr}"))?;
    let registry = std::sync::Arc::new(StoreRegistry::new(store));
    let service = quorum_agent::join::JoinService::new(registry, std::sync::Arc::new(ca));
    let stop = stop.clone();
    let until_stop = async move {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    tokio::spawn(async move {
        if let Err(e) = quorum_agent::join::serve(
            listener,
            service,
            &ca_pem,
            &id.cert_pem,
            &id.key_pem,
            until_stop,
        )
        .await
        {
            tracing::error!(error = %e, "the join service stopped");
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn add_req(name: &str, ip: &str) -> AddHost {
        AddHost {
            name: name.into(),
            address: ip.parse().unwrap(),
            labels: BTreeMap::new(),
            token_ttl_s: 60,
            certificate_lifetime_s: 3_600,
            rejoin: false,
            endpoint: Some("127.0.0.1:7391".parse().unwrap()),
        }
    }

    /// A control plane `cp` with one machine recorded on `host`.
    fn place_one(store: &mut Store, cp: &str, host: &str) {
        let spec: quorum_core::ControlPlaneSpec =
            serde_json::from_str(r#"{"replicas": 1, "version": "3.5.1", "provider": "hosts", "insecurePlaintext": true}"#)
                .unwrap();
        let c = quorum_core::ControlPlane {
            spec_version: 0,
            client_addresses: Vec::new(),
            ca_generation: 0,
            ca_rotation: None,
            road: None,
            v2_api_never_open: false,
            name: cp.into(),
            spec: spec.clone(),
            deleting: false,
            rebuild: None,
        };
        store.create_control_plane(&c, None, NOW * 1_000).unwrap();
        let placed = quorum_store::Placed {
            address: std::net::Ipv4Addr::new(198, 18, 0, 12),
            placement: quorum_core::Placement {
                host: host.into(),
                client_port: 2379,
                peer_port: 2380,
            },
        };
        store
            .allocate_machine_at(cp, true, spec.version, None, None, Some(&placed), &|_| true)
            .unwrap();
    }

    #[test]
    fn a_host_is_removed_only_when_nothing_runs_or_is_being_placed_there() {
        let t = tempfile::tempdir().unwrap();
        let mut store = Store::open(&t.path().join("home")).unwrap();
        let now_ms = NOW * 1_000;
        let fresh = |host: &str, at_ms: i64| {
            (
                quorum_store::hosts::port_claim_key(host, 2381),
                format!("db 1f {at_ms}"),
            )
        };
        for (n, ip) in [
            ("h1", "198.18.0.11"),
            ("h2", "198.18.0.12"),
            ("h3", "198.18.0.13"),
        ] {
            add(&store, &add_req(n, ip), NOW).unwrap();
        }
        let missing = remove(&store, "h9", now_ms).unwrap_err().to_string();
        assert!(missing.contains("no host h9 is registered"), "{missing}");

        // A member on h2: refused, named, the record untouched.
        place_one(&mut store, "prod", "h2");
        let before = read(&store, "h2").unwrap().unwrap().1;
        let busy = remove(&store, "h2", now_ms).unwrap_err().to_string();
        assert!(
            busy.contains("still runs a member: prod-1 (prod)"),
            "{busy}"
        );
        assert_eq!(read(&store, "h2").unwrap().unwrap().1, before);

        // A port claim on h3 made 10 s ago, with no machine yet: an allocation under
        // way. Refused, and the mark taken back.
        let (k, v) = fresh("h3", now_ms - 10_000);
        store.setting_or_init(&k, &v).unwrap();
        let placing = remove(&store, "h3", now_ms).unwrap_err().to_string();
        assert!(placing.contains("being placed on host h3"), "{placing}");
        assert_eq!(get(&store, "h3").unwrap().unwrap().removing_unix_s, None);
        // The same claim two minutes later is stale: removed with the host.
        let later_ms = now_ms + 120_000;
        let r = remove(&store, "h3", later_ms).unwrap();
        assert_eq!((r.claims, r.joined), (1, false));
        assert_eq!(get(&store, "h3").unwrap(), None);
        assert_eq!(store.setting(&k).unwrap(), None);
        // Its agent's certificate is not renewed any more.
        let reg = StoreRegistry::new(Store::open(&t.path().join("home")).unwrap());
        let renew = reg.renew("h3", "k3", NOW).unwrap_err().to_string();
        assert!(renew.contains("no host \"h3\""), "{renew}");

        // A removal cut off after its mark: the host takes nothing new (the mark is
        // what placement reads) until the command runs again and finishes.
        let (h1, text) = read(&store, "h1").unwrap().unwrap();
        let marked = to_json(&HostRecord {
            removing_unix_s: Some(NOW),
            ..h1
        });
        assert!(store.replace_setting(&key("h1"), &text, &marked).unwrap());
        assert_eq!(remove(&store, "h1", later_ms).unwrap().claims, 0);
        assert_eq!(
            list(&store)
                .unwrap()
                .iter()
                .map(|h| h.name.as_str())
                .collect::<Vec<_>>(),
            ["h2"]
        );
        // Added again, it is a new host with a new token.
        add(&store, &add_req("h1", "198.18.0.11"), NOW + 5).unwrap();
        assert_eq!(get(&store, "h1").unwrap().unwrap().removing_unix_s, None);
    }

    #[test]
    fn a_token_joins_once_and_renewals_are_for_the_joined_key() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("home");
        let store = Store::open(&d).unwrap();
        let token = add(&store, &add_req("h1", "198.18.0.11"), NOW).unwrap();
        let reg = StoreRegistry::new(Store::open(&d).unwrap());
        assert!(matches!(
            reg.join("h1", &JoinToken::new_secret(), "k1", NOW),
            Err(RegistryError::Refused(_))
        ));
        let g = reg.join("h1", &token.secret, "k1", NOW + 1).unwrap();
        assert_eq!(g.not_after_unix_s, NOW + 1 + 3_600);
        let h = get(&store, "h1").unwrap().unwrap();
        assert_eq!((h.join, h.key_sha256.as_deref()), (None, Some("k1")));
        let again = reg
            .join("h1", &token.secret, "k2", NOW + 2)
            .unwrap_err()
            .to_string();
        assert!(again.contains("works once"), "{again}");
        assert!(reg.renew("h1", "k2", NOW + 3).is_err());
        assert_eq!(
            reg.renew("h1", "k1", NOW + 4).unwrap().not_after_unix_s,
            NOW + 4 + 3_600
        );
        assert!(matches!(
            reg.renew("h2", "k1", NOW),
            Err(RegistryError::UnknownHost(_))
        ));
    }

    #[test]
    fn an_expired_token_is_refused_and_a_rejoin_issues_another() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("home");
        let store = Store::open(&d).unwrap();
        let t1 = add(&store, &add_req("h1", "198.18.0.11"), NOW).unwrap();
        let reg = StoreRegistry::new(Store::open(&d).unwrap());
        let e = reg
            .join("h1", &t1.secret, "k1", NOW + 61)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expired"), "{e}");
        let dup = add(&store, &add_req("h1", "198.18.0.11"), NOW)
            .unwrap_err()
            .to_string();
        assert!(dup.contains("--rejoin"), "{dup}");
        let same_addr = add(&store, &add_req("h2", "198.18.0.11"), NOW)
            .unwrap_err()
            .to_string();
        assert!(same_addr.contains("already the address"), "{same_addr}");
        let t2 = add(
            &store,
            &AddHost {
                rejoin: true,
                ..add_req("h1", "198.18.0.11")
            },
            NOW + 100,
        )
        .unwrap();
        assert!(
            reg.join("h1", &t1.secret, "k1", NOW + 101).is_err(),
            "the old token is gone"
        );
        reg.join("h1", &t2.secret, "k1", NOW + 101).unwrap();
        assert_eq!(list(&store).unwrap().len(), 1);
        for (bad, want) in [("H1", "not a host name"), ("h-", "not a host name")] {
            let e = add(&store, &add_req(bad, "198.18.0.12"), NOW)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = add(&store, &add_req("h3", "0.0.0.0"), NOW)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be a host's address"), "{e}");
    }
}
