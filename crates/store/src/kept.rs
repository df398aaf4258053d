//! What a snapshot record keeps so that a deleted control plane can come back
//! (`quorum create NAME --from-snapshot ID`): the spec and the CA the control plane had
//! when the snapshot was recorded (`quorum_core::Recreate`).
//!
//! Architecture invariant: a CA key kept with a snapshot is sealed before a backend
//! sees it, for that snapshot record alone (`snapshot-ca/<cp>/<id>`: copied into
//! another record it does not open), and it is re-wrapped with every other secret when
//! the key-encryption key is rotated, so no snapshot outlives the key that opens it.

use super::*;
use quorum_core::Recreate;

/// The identity a snapshot's copy of the CA key is sealed for.
fn snapshot_ca_record(cp: &str, id: &str) -> String {
    format!("snapshot-ca/{cp}/{id}")
}

impl Store {
    /// Records a snapshot (see `StateStore::record_snapshot`) with what recreates its
    /// control plane: the spec and CA recorded now, unless the record brings its own;
    /// the CA's key sealed for this record. A control plane already gone records none.
    pub fn record_snapshot(&self, rec: &SnapshotRecord) -> Result<()> {
        let mut rec = rec.clone();
        if rec.recreate.is_none() {
            rec.recreate = self.recreate_now(&rec.control_plane)?;
        }
        if let Some(r) = rec.recreate.as_mut() {
            if let Some(key) = r.ca_key.take() {
                r.ca_key = Some(self.seal_for_snapshot(&rec.control_plane, &rec.id, &key)?);
            }
        }
        self.inner.record_snapshot(&rec)
    }

    /// The control plane `cp`'s spec and CA as they are now (its key in plaintext:
    /// `record_snapshot` seals it).
    fn recreate_now(&self, cp: &str) -> Result<Option<Recreate>> {
        let Some(now) = self.inner.control_plane(cp)? else {
            return Ok(None);
        };
        let ca = self.certificate_authority(&now)?;
        Ok(Some(Recreate {
            spec: now.spec.clone(),
            ca_generation: now.ca_generation,
            ca_cert_pem: ca.as_ref().map(|c| c.cert_pem.clone()),
            ca_key: ca.map(|c| c.key_pem),
        }))
    }

    /// Seals `key` (a PEM, or a value sealed already, which is kept) for snapshot `id`.
    fn seal_for_snapshot(&self, cp: &str, id: &str, key: &str) -> Result<String> {
        if secrets::Sealed::parse(key).is_some() {
            return Ok(key.to_string());
        }
        let with = self.sealing_key()?;
        secrets::seal(
            self.keys.as_ref(),
            &with,
            &snapshot_ca_record(cp, id),
            key.as_bytes(),
        )
    }

    /// The CA kept with snapshot `rec`, its key opened; `None` when it keeps none (a
    /// plaintext control plane, or a record of an earlier release).
    pub fn snapshot_ca(&self, rec: &SnapshotRecord) -> Result<Option<StoredCa>> {
        let Some(r) = &rec.recreate else {
            return Ok(None);
        };
        let (Some(cert_pem), Some(stored)) = (&r.ca_cert_pem, &r.ca_key) else {
            return Ok(None);
        };
        let corrupt = |why: String| StoreError::Corrupt {
            location: self.inner.location(),
            detail: format!(
                "the CA kept with snapshot {} of {:?}: {why}",
                rec.id, rec.control_plane
            ),
        };
        let sealed = match secrets::Sealed::parse(stored) {
            Some(Ok(s)) => s,
            Some(Err(why)) => return Err(corrupt(why)),
            None => return Err(corrupt("its key is not sealed".into())),
        };
        let record = snapshot_ca_record(&rec.control_plane, &rec.id);
        let pem = secrets::open(self.keys.as_ref(), &record, &sealed)?;
        let key_pem = String::from_utf8(pem.to_vec())
            .map_err(|_| corrupt("its key opens to something that is not text".into()))?;
        Ok(Some(StoredCa {
            cert_pem: cert_pem.clone(),
            key_pem,
        }))
    }

    /// Every snapshot record that keeps a CA key, with the key as stored.
    fn kept_ca_keys(&self) -> Result<Vec<(SnapshotRecord, String)>> {
        let mut out = Vec::new();
        for cp in self.inner.snapshotted_control_planes()? {
            for rec in self.inner.snapshots(&cp)? {
                if let Some(key) = rec.recreate.as_ref().and_then(|r| r.ca_key.clone()) {
                    out.push((rec, key));
                }
            }
        }
        Ok(out)
    }

    /// Re-wraps, with `new_key`, the CA keys snapshots keep, at most `max`; how many.
    pub(crate) fn rewrap_kept(&self, new_key: &str, max: usize) -> Result<usize> {
        let mut done = 0;
        for (rec, stored) in self.kept_ca_keys()? {
            if done >= max {
                break;
            }
            let Some(Ok(sealed)) = secrets::Sealed::parse(&stored) else {
                continue; // not sealed: `snapshot_ca` reports it
            };
            if sealed.key_id == new_key {
                continue;
            }
            if !self.keys.holds(&sealed.key_id)? {
                return Err(self.missing_key(&sealed.key_id));
            }
            let record = snapshot_ca_record(&rec.control_plane, &rec.id);
            let again = secrets::rewrap(self.keys.as_ref(), &record, &sealed, new_key)?;
            let change = |r: &mut SnapshotRecord| match r.recreate.as_mut() {
                Some(k) if k.ca_key.as_deref() == Some(stored.as_str()) => {
                    k.ca_key = Some(again.clone());
                    true
                }
                _ => false,
            };
            let what = "re-wrap a snapshot's CA key";
            self.inner
                .update_snapshot(&rec.control_plane, &rec.id, what, &change)?;
            done += 1;
        }
        Ok(done)
    }

    /// The key ids the CA keys kept with snapshots are wrapped with, counted into `ids`.
    pub(crate) fn count_kept(
        &self,
        ids: &mut std::collections::BTreeMap<String, usize>,
    ) -> Result<()> {
        for (_, stored) in self.kept_ca_keys()? {
            let id = match secrets::Sealed::parse(&stored) {
                Some(Ok(s)) => s.key_id,
                Some(Err(_)) => "(damaged)".to_string(),
                None => "(plaintext)".to_string(),
            };
            *ids.entry(id).or_default() += 1;
        }
        Ok(())
    }
}
