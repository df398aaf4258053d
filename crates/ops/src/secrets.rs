//! `quorum secrets`: where the store's secrets are sealed, and the rotation of the
//! key-encryption key while controllers run.
//!
//! A rotation, each step durable before the next, so a crash anywhere leaves every
//! record readable and `rotate` run again finishes it:
//! 1. a new key in the key file, first (current), the old ones kept (or, after a crash,
//!    the new key a rotation already added: the file's current key is not the one the
//!    store names);
//! 2. the store names the new key (`setting/secrets-key-id`): every secret sealed from
//!    now on uses it;
//! 3. every data key wrapped with another key is re-wrapped with it, one record at a
//!    time (the ciphertexts stay as they are);
//! 4. once no record uses them, the old keys leave the file.

use crate::Place;
use anyhow::{bail, Result};
use quorum_controller::failpoints::crash_point;
use quorum_store::secrets::{KeyFile, KEY_ID_SETTING};
use serde::Serialize;
use std::collections::BTreeMap;

/// How often step 3 goes over the records: a secret sealed with the old key by a
/// process that read the store before step 2 is re-wrapped by the next pass.
const REWRAP_PASSES: usize = 3;

/// What `quorum secrets status` shows.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretsStatus {
    pub key_file: String,
    /// The ids of the keys in the key file, the current one first (empty: none yet).
    pub key_file_keys: Vec<String>,
    /// The key the store names (`None`: nothing sealed yet).
    pub store_key: Option<String>,
    /// Sealed records by the key their data key is wrapped with.
    pub records_by_key: BTreeMap<String, usize>,
}

/// What a rotation did.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rotated {
    pub old_keys: Vec<String>,
    pub new_key: String,
    pub rewrapped: usize,
    /// An interrupted rotation was finished rather than a new one started.
    pub resumed: bool,
    pub key_file: String,
}

fn key_file(at: &Place) -> KeyFile {
    KeyFile::resolve(&at.home, at.secrets_key_file.as_deref())
}

pub fn status(at: &Place) -> Result<SecretsStatus> {
    let store = at.connect_existing()?;
    let kf = key_file(at);
    Ok(SecretsStatus {
        key_file: kf.path().display().to_string(),
        key_file_keys: kf.ids()?,
        store_key: store.setting(KEY_ID_SETTING)?,
        records_by_key: store.secrets_key_ids()?,
    })
}

pub fn rotate(at: &Place) -> Result<Rotated> {
    // Opening seals any plaintext secret first.
    let mut store = at.connect_existing()?;
    let kf = key_file(at);
    let Some(named) = store.setting(KEY_ID_SETTING)? else {
        bail!(
            "nothing to rotate: no secret is sealed in {} yet (the key file {} is made when \
             the first TLS control plane is created)",
            store.location(),
            kf.path().display()
        );
    };
    store.check_secrets()?;
    let ids = kf.ids()?;
    // 1. The new key, durable in the file before anything uses it.
    let (new_key, resumed) = match ids.first() {
        // Interrupted after step 1 (the file's current key is not the named one yet), or
        // after step 2 with old keys still in the file: finish that rotation.
        Some(first) if *first != named || ids.len() > 1 => (first.clone(), true),
        _ => (kf.add_key()?, false),
    };
    crash_point("crash-after-secrets-key-added");
    // 2. The store names it: new secrets are sealed with it from now on.
    if named != new_key && !store.replace_setting(KEY_ID_SETTING, &named, &new_key)? {
        bail!(
            "the key the store names changed during the rotation (another `quorum secrets \
             rotate`?); nothing was re-wrapped: run it again"
        );
    }
    crash_point("crash-after-secrets-key-named");
    // 3. Every data key re-wrapped, one record at a time.
    let mut rewrapped = 0;
    for _ in 0..REWRAP_PASSES {
        loop {
            let n = store.rewrap_some_secrets(&new_key, 1)?;
            if n == 0 {
                break;
            }
            rewrapped += n;
            crash_point("crash-mid-secrets-rewrap");
        }
        if store.secrets_key_ids()?.keys().all(|k| *k == new_key) {
            break;
        }
    }
    let left: Vec<String> = store
        .secrets_key_ids()?
        .into_keys()
        .filter(|k| *k != new_key)
        .collect();
    if !left.is_empty() {
        bail!(
            "records still use {} after {REWRAP_PASSES} passes (being written as it ran?); the \
             old keys stay in {}: run `quorum secrets rotate` again",
            left.join(", "),
            kf.path().display()
        );
    }
    // 4. The old keys leave the file.
    crash_point("crash-before-secrets-key-retired");
    let old_keys: Vec<String> = kf.ids()?.into_iter().filter(|k| *k != new_key).collect();
    kf.keep_only(&new_key)?;
    Ok(Rotated {
        old_keys,
        new_key,
        rewrapped,
        resumed,
        key_file: kf.path().display().to_string(),
    })
}
