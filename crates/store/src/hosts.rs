//! Host records (the `hosts` provider): one per host, in the settings as
//! `host/<name>` (JSON). Written by `quorum host add` and the join service (in
//! quorum-ops), read by the controller to place and reach members.

use crate::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

pub const HOST_PREFIX: &str = "host/";

/// A record that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("the record of {key} in {location} is damaged: {detail}")]
pub struct DamagedHost {
    pub key: String,
    pub location: String,
    pub detail: String,
}

/// What reading hosts can fail with.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error(transparent)]
    Store(#[from] crate::StoreError),
    #[error(transparent)]
    Damaged(#[from] DamagedHost),
}

/// A host, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostRecord {
    pub name: String,
    pub address: IpAddr,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub certificate_lifetime_s: u64,
    pub added_unix_s: i64,
    /// An outstanding join token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<PendingJoin>,
    /// The key the agent joined with (SHA-256 of its SubjectPublicKeyInfo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined_unix_s: Option<i64>,
    /// The end of the last certificate issued to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_not_after_unix_s: Option<i64>,
    /// `quorum host remove` began at this time: placement gives it nothing new (a
    /// removal that was cut off leaves it here until run again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removing_unix_s: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingJoin {
    pub secret_sha256: String,
    pub expires_unix_s: i64,
}

impl HostRecord {
    /// Its failure domain label (`zone`), if any.
    pub fn zone(&self) -> Option<&str> {
        self.labels
            .get(quorum_core::placement::ZONE_LABEL)
            .map(String::as_str)
    }

    /// The host as an observation gives it to the core: whether a new machine could
    /// go there by the record alone. Its agent is taken to answer (placement finds out)
    /// and its load is not counted: neither decides whether a host can take a machine,
    /// only which one does.
    pub fn placement_view(&self) -> quorum_core::placement::HostView {
        quorum_core::placement::HostView {
            name: self.name.clone(),
            zone: self.zone().map(str::to_string),
            ready: true,
            removing: self.removing_unix_s.is_some(),
            load: 0,
        }
    }
}

pub fn key(name: &str) -> String {
    format!("{HOST_PREFIX}{name}")
}

/// Where the claims on a host's port pairs are kept (`<prefix><host>/<client port>`:
/// "claimant since_ms"), made before a machine is recorded at a port.
pub const PORT_CLAIM_PREFIX: &str = "hosts/port/";

pub fn port_claim_key(host: &str, client_port: u16) -> String {
    format!("{PORT_CLAIM_PREFIX}{host}/{client_port}")
}

/// The port claims on `host`: (setting key, value).
pub fn port_claims(store: &Store, host: &str) -> Result<Vec<(String, String)>, HostsError> {
    Ok(store.settings_under(&format!("{PORT_CLAIM_PREFIX}{host}/"))?)
}

/// A port claim with no machine recorded at its port is taken for another replica's
/// allocation under way for this long; older, it is stale (an allocation that crashed,
/// or a machine deleted since) and may be taken over.
pub const PORT_CLAIM_STALE_MS: i64 = 60_000;

/// When a port claim was made (its value's last word), if it says.
pub fn claim_since_ms(value: &str) -> Option<i64> {
    value.rsplit(' ').next().and_then(|t| t.parse::<i64>().ok())
}

/// Whether a port claim (its value) is an allocation still under way at `now_ms`:
/// younger than `PORT_CLAIM_STALE_MS`. One that does not say when it was made is
/// stale. The allocation that takes a port over and `quorum host remove`, which waits
/// for allocations under way, judge by this one rule.
pub fn claim_is_fresh(value: &str, now_ms: i64) -> bool {
    claim_since_ms(value)
        .is_some_and(|since_ms| now_ms.saturating_sub(since_ms) < PORT_CLAIM_STALE_MS)
}

/// Every host, by name.
pub fn list(store: &Store) -> Result<Vec<HostRecord>, HostsError> {
    let mut out = Vec::new();
    for (k, text) in store.settings_under(HOST_PREFIX)? {
        out.push(parse(store, &k, &text)?);
    }
    Ok(out)
}

pub fn get(store: &Store, name: &str) -> Result<Option<HostRecord>, HostsError> {
    read(store, name).map(|r| r.map(|(h, _)| h))
}

pub fn read(store: &Store, name: &str) -> Result<Option<(HostRecord, String)>, HostsError> {
    let Some(text) = store.setting(&key(name))? else {
        return Ok(None);
    };
    Ok(Some((parse(store, &key(name), &text)?, text)))
}

fn parse(store: &Store, key: &str, text: &str) -> Result<HostRecord, DamagedHost> {
    serde_json::from_str(text).map_err(|e| DamagedHost {
        key: key.to_string(),
        location: store.location(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_fresh_for_a_minute_and_one_that_does_not_say_when_is_stale() {
        let t = 1_800_000_000_000;
        assert!(claim_is_fresh(&format!("prod 1f {t}"), t));
        assert!(claim_is_fresh(
            &format!("prod 1f {t}"),
            t + PORT_CLAIM_STALE_MS - 1
        ));
        assert!(!claim_is_fresh(
            &format!("prod 1f {t}"),
            t + PORT_CLAIM_STALE_MS
        ));
        assert!(!claim_is_fresh("prod 1f", t));
        assert!(!claim_is_fresh("", t));
    }
}
