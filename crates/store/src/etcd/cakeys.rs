//! Re-sealing CA keys in the management etcd (`StateStore::replace_ca_keys`).

use super::*;

impl EtcdStore {
    /// A transaction per record, each comparing the record's revision; after replacing
    /// plaintext keys, the history is compacted to now, so no earlier revision still
    /// holds one (a defragmentation of the management etcd then drops the bytes).
    pub(super) fn replace_ca_keys_kv(
        &mut self,
        changes: &[(String, String, String)],
    ) -> Result<usize> {
        let mut replaced = 0;
        let mut last_revision = 0;
        for (cp, old, new) in changes {
            let key = self.key(&format!("ca/{cp}"));
            let Some(kv) = self.get(&key, "read a CA")? else {
                continue;
            };
            let mut r: CaRecord = self.parse(&kv)?;
            if r.key_pem != *old {
                continue;
            }
            r.key_pem = new.clone();
            let value = to_json(&r);
            let put = TxnOp::put(key.clone(), value.clone(), None);
            let unchanged = Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision);
            let landed = Landed::Value {
                key,
                value: value.into_bytes(),
            };
            if let Committed::Yes(rev) =
                self.commit("seal a CA key", vec![unchanged], vec![put], Some(landed))?
            {
                replaced += 1;
                last_revision = last_revision.max(rev);
            }
        }
        let any_plaintext = changes
            .iter()
            .any(|(_, old, _)| crate::secrets::Sealed::parse(old).is_none());
        if any_plaintext && last_revision > 0 {
            self.call(
                "compact the history of the plaintext keys",
                move |mut c| async move { c.compact(last_revision, None).await.map(drop) },
            )?;
        }
        Ok(replaced)
    }
}
