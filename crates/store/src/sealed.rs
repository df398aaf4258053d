//! The secrets `Store` keeps for its backends: every CA key sealed before a backend
//! stores it and opened after a backend read it (`secrets.rs` does the sealing); the CA
//! records (and a rotation's new CA) as callers see them; sealing plaintext keys of
//! earlier releases; re-wrapping under a new key-encryption key.

use super::*;

/// The identity a CA key is sealed for (the associated data of its sealing).
fn ca_record(cp: &str) -> String {
    format!("ca-key/{cp}")
}

/// The setting that holds the hosts CA (which certifies host agents and the
/// controller towards them): its certificate and its key, sealed like every CA key.
pub const HOSTS_CA_SETTING: &str = "hosts/ca";
/// The record the hosts CA's key is sealed for ('@' is in no control plane's name).
const HOSTS_CA_RECORD: &str = "ca-key/@hosts";

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HostsCaSetting {
    cert_pem: String,
    key_pem: String,
}

/// How `ca_keys` names a rotation's new CA: `<control plane>/next` (a control plane's
/// name has no `/`), so its sealed key is bound to a record of its own.
pub const NEXT_CA_SUFFIX: &str = "/next";

pub(crate) fn next_ca_name(cp: &str) -> String {
    format!("{cp}{NEXT_CA_SUFFIX}")
}

impl Store {
    /// Where the key-encryption keys are (for messages).
    pub fn keys_location(&self) -> String {
        self.keys.location()
    }

    /// The key new secrets are sealed with: the one the store names, which this
    /// process's key provider must hold; or, for a store that has none yet, the
    /// provider's (a key file made now), recorded in the store.
    pub(crate) fn sealing_key(&self) -> Result<String> {
        if let Some(id) = self.inner.setting(secrets::KEY_ID_SETTING)? {
            if !self.keys.holds(&id)? {
                return Err(self.missing_key(&id));
            }
            return Ok(id);
        }
        let id = self.keys.current_id(true)?;
        let agreed = self.inner.setting_or_init(secrets::KEY_ID_SETTING, &id)?;
        if agreed != id {
            return Err(self.missing_key(&agreed));
        }
        Ok(id)
    }

    pub(crate) fn missing_key(&self, id: &str) -> StoreError {
        self.keys
            .missing(&format!("the secrets in {}", self.inner.location()), id)
    }

    /// Fails unless this process can open the store's secrets: a controller checks it
    /// before it starts, so a replica without the key file refuses to start, saying
    /// why, instead of failing at its first TLS control plane.
    pub fn check_secrets(&self) -> Result<()> {
        match self.inner.setting(secrets::KEY_ID_SETTING)? {
            Some(id) if !self.keys.holds(&id)? => Err(self.missing_key(&id)),
            _ => Ok(()),
        }
    }

    /// Records a new control plane (see `StateStore::create_control_plane`), its CA key
    /// sealed.
    pub fn create_control_plane(
        &mut self,
        cp: &ControlPlane,
        ca: Option<&StoredCa>,
        now_ms: i64,
    ) -> Result<()> {
        let sealed = match ca {
            Some(ca) => {
                let key = self.sealing_key()?;
                Some(StoredCa {
                    cert_pem: ca.cert_pem.clone(),
                    key_pem: secrets::seal(
                        self.keys.as_ref(),
                        &key,
                        &ca_record(&cp.name),
                        ca.key_pem.as_bytes(),
                    )?,
                })
            }
            None => None,
        };
        self.inner.create_control_plane(cp, sealed.as_ref(), now_ms)
    }

    /// The certificate authority of a control plane (see
    /// `StateStore::certificate_authority`), its key opened.
    pub fn certificate_authority(&self, cp: &ControlPlane) -> Result<Option<StoredCa>> {
        let Some(stored) = self.inner.certificate_authority(cp)? else {
            return Ok(None);
        };
        let key_pem = self.open_ca_key(&cp.name, &stored.key_pem)?;
        Ok(Some(StoredCa {
            cert_pem: stored.cert_pem,
            key_pem,
        }))
    }

    /// A CA rotation's new CA, its key opened.
    pub fn next_certificate_authority(&self, name: &str) -> Result<Option<StoredCa>> {
        let Some(stored) = self.inner.next_certificate_authority(name)? else {
            return Ok(None);
        };
        let key_pem = self.open_ca_key(&next_ca_name(name), &stored.key_pem)?;
        Ok(Some(StoredCa {
            cert_pem: stored.cert_pem,
            key_pem,
        }))
    }

    /// Begins a CA rotation with the new CA `next` (see
    /// `StateStore::begin_ca_rotation`), its key sealed.
    pub fn begin_ca_rotation(
        &mut self,
        name: &str,
        next: &StoredCa,
        rotation: &CaRotation,
    ) -> Result<bool> {
        let key = self.sealing_key()?;
        let sealed = StoredCa {
            cert_pem: next.cert_pem.clone(),
            key_pem: secrets::seal(
                self.keys.as_ref(),
                &key,
                &ca_record(&next_ca_name(name)),
                next.key_pem.as_bytes(),
            )?,
        };
        self.inner.begin_ca_rotation(name, &sealed, rotation)
    }

    /// Ends the rotation to `generation` (see `StateStore::finish_ca_rotation`): the
    /// new CA's key is opened and sealed again for the CA's own record.
    pub fn finish_ca_rotation(&mut self, name: &str, generation: u32) -> Result<bool> {
        let Some(next) = self.next_certificate_authority(name)? else {
            // Finished already (the new CA's record goes in the same step).
            return Ok(false);
        };
        let key = self.sealing_key()?;
        let sealed = StoredCa {
            cert_pem: next.cert_pem,
            key_pem: secrets::seal(
                self.keys.as_ref(),
                &key,
                &ca_record(name),
                next.key_pem.as_bytes(),
            )?,
        };
        self.inner.finish_ca_rotation(name, generation, &sealed)
    }

    fn open_ca_key(&self, cp: &str, stored: &str) -> Result<String> {
        match secrets::Sealed::parse(stored) {
            // Plaintext, from a state not yet sealed (sealed at the next open).
            None => Ok(stored.to_string()),
            Some(Err(why)) => Err(StoreError::Corrupt {
                location: self.inner.location(),
                detail: format!("the CA key of {cp:?}: {why}"),
            }),
            Some(Ok(sealed)) => {
                let pem = secrets::open(self.keys.as_ref(), &ca_record(cp), &sealed)?;
                String::from_utf8(pem.to_vec()).map_err(|_| StoreError::Corrupt {
                    location: self.inner.location(),
                    detail: format!("the CA key of {cp:?} opens to something that is not text"),
                })
            }
        }
    }

    /// The hosts CA, its key opened; `None` before the first host was added.
    pub fn hosts_ca(&self) -> Result<Option<StoredCa>> {
        let Some(text) = self.inner.setting(HOSTS_CA_SETTING)? else {
            return Ok(None);
        };
        let (stored, sealed) = self.parse_hosts_ca(&text)?;
        let pem = secrets::open(self.keys.as_ref(), HOSTS_CA_RECORD, &sealed)?;
        let key_pem = String::from_utf8(pem.to_vec()).map_err(|_| StoreError::Corrupt {
            location: self.inner.location(),
            detail: "the hosts CA key opens to something that is not text".into(),
        })?;
        Ok(Some(StoredCa {
            cert_pem: stored.cert_pem,
            key_pem,
        }))
    }

    /// The hosts CA, made by `make` and recorded (its key sealed) if there is none yet.
    /// Two callers racing agree on the first recorded.
    pub fn hosts_ca_or_init(&self, make: impl FnOnce() -> Result<StoredCa>) -> Result<StoredCa> {
        if let Some(ca) = self.hosts_ca()? {
            return Ok(ca);
        }
        let ca = make()?;
        let key = self.sealing_key()?;
        let sealed = secrets::seal(
            self.keys.as_ref(),
            &key,
            HOSTS_CA_RECORD,
            ca.key_pem.as_bytes(),
        )?;
        let text = serde_json::to_string(&HostsCaSetting {
            cert_pem: ca.cert_pem.clone(),
            key_pem: sealed,
        })
        .map_err(|e| StoreError::Corrupt {
            location: self.inner.location(),
            detail: format!("the hosts CA: {e}"),
        })?;
        self.inner.setting_or_init(HOSTS_CA_SETTING, &text)?;
        self.hosts_ca()?.ok_or_else(|| StoreError::Corrupt {
            location: self.inner.location(),
            detail: "the hosts CA vanished after it was written".into(),
        })
    }

    fn parse_hosts_ca(&self, text: &str) -> Result<(HostsCaSetting, secrets::Sealed)> {
        let damaged = |why: String| StoreError::Corrupt {
            location: self.inner.location(),
            detail: format!("the hosts CA: {why}"),
        };
        let stored: HostsCaSetting =
            serde_json::from_str(text).map_err(|e| damaged(e.to_string()))?;
        let sealed = match secrets::Sealed::parse(&stored.key_pem) {
            Some(Ok(s)) => s,
            Some(Err(why)) => return Err(damaged(why.to_string())),
            None => return Err(damaged("its key is not sealed".into())),
        };
        Ok((stored, sealed))
    }

    /// Re-wraps the hosts CA's key with `new_key`; whether it changed anything.
    fn rewrap_hosts_ca(&mut self, new_key: &str) -> Result<bool> {
        let Some(text) = self.inner.setting(HOSTS_CA_SETTING)? else {
            return Ok(false);
        };
        let (stored, sealed) = self.parse_hosts_ca(&text)?;
        if sealed.key_id == new_key {
            return Ok(false);
        }
        if !self.keys.holds(&sealed.key_id)? {
            return Err(self.missing_key(&sealed.key_id));
        }
        let again = secrets::rewrap(self.keys.as_ref(), HOSTS_CA_RECORD, &sealed, new_key)?;
        let text2 = serde_json::to_string(&HostsCaSetting {
            cert_pem: stored.cert_pem,
            key_pem: again,
        })
        .map_err(|e| StoreError::Corrupt {
            location: self.inner.location(),
            detail: format!("the hosts CA: {e}"),
        })?;
        // Another writer changed it meanwhile: it re-wrapped it too, or will.
        self.inner.replace_setting(HOSTS_CA_SETTING, &text, &text2)
    }

    /// Seals every CA key still stored in plaintext; how many.
    pub fn seal_plaintext_secrets(&mut self) -> Result<usize> {
        let plain: Vec<(String, String)> = self
            .inner
            .ca_keys()?
            .into_iter()
            .filter(|(_, stored)| secrets::Sealed::parse(stored).is_none())
            .collect();
        if plain.is_empty() {
            return Ok(0);
        }
        let key = self.sealing_key()?;
        let mut changes = Vec::with_capacity(plain.len());
        for (cp, stored) in plain {
            let sealed =
                secrets::seal(self.keys.as_ref(), &key, &ca_record(&cp), stored.as_bytes())?;
            changes.push((cp, stored, sealed));
        }
        self.inner.replace_ca_keys(&changes)
    }

    /// Re-wraps every sealed secret's data key with the key `new_key` (which the key
    /// provider must hold); how many were re-wrapped. Records already wrapped with it
    /// are left as they are, so it can run again after a crash.
    pub fn rewrap_secrets(&mut self, new_key: &str) -> Result<usize> {
        self.rewrap_some_secrets(new_key, usize::MAX)
    }

    /// `rewrap_secrets`, at most `max` records (a rotation re-wraps one at a time, so a
    /// crash can fall between two).
    pub fn rewrap_some_secrets(&mut self, new_key: &str, max: usize) -> Result<usize> {
        let mut changes = Vec::new();
        for (cp, stored) in self.inner.ca_keys()? {
            let Some(parsed) = secrets::Sealed::parse(&stored) else {
                continue; // plaintext: sealed at open
            };
            let sealed = parsed.map_err(|why| StoreError::Corrupt {
                location: self.inner.location(),
                detail: format!("the CA key of {cp:?}: {why}"),
            })?;
            if sealed.key_id == new_key {
                continue;
            }
            if !self.keys.holds(&sealed.key_id)? {
                return Err(self.missing_key(&sealed.key_id));
            }
            let again = secrets::rewrap(self.keys.as_ref(), &ca_record(&cp), &sealed, new_key)?;
            changes.push((cp, stored, again));
            if changes.len() >= max {
                break;
            }
        }
        let hosts = usize::from(changes.len() < max && self.rewrap_hosts_ca(new_key)?);
        let left = max - changes.len() - hosts;
        let mut done = hosts + self.inner.replace_ca_keys(&changes)?;
        // Then the CA keys snapshots keep (`kept.rs`).
        if left > 0 {
            done += self.rewrap_kept(new_key, left)?;
        }
        Ok(done)
    }

    /// The key ids the store's secrets are wrapped with now, and how many with each.
    pub fn secrets_key_ids(&self) -> Result<std::collections::BTreeMap<String, usize>> {
        let mut ids = std::collections::BTreeMap::new();
        for (_, stored) in self.inner.ca_keys()? {
            let id = match secrets::Sealed::parse(&stored) {
                Some(Ok(s)) => s.key_id,
                Some(Err(_)) => "(damaged)".to_string(),
                None => "(plaintext)".to_string(),
            };
            *ids.entry(id).or_default() += 1;
        }
        if let Some(text) = self.inner.setting(HOSTS_CA_SETTING)? {
            let id = match self.parse_hosts_ca(&text) {
                Ok((_, sealed)) => sealed.key_id,
                Err(_) => "(damaged)".to_string(),
            };
            *ids.entry(id).or_default() += 1;
        }
        self.count_kept(&mut ids)?;
        Ok(ids)
    }
}
