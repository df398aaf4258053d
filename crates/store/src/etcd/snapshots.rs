//! Snapshot records in the management etcd: `snapshot/<cp>/<id>`, written once (an
//! absent-key guard), a verification by read-modify-write on the key's revision; read
//! back checked (`check_snapshot_filed`) and ordered by time, then as recorded.

use super::*;

impl EtcdStore {
    pub(super) fn record_snapshot_kv(&self, rec: &SnapshotRecord) -> Result<()> {
        let key = self.key(&format!("snapshot/{}/{}", rec.control_plane, rec.id));
        let value = to_json(rec);
        let put = TxnOp::put(key.clone(), value.clone(), None);
        let landed = Landed::Value {
            key: key.clone(),
            value: value.into_bytes(),
        };
        match self.commit(
            "record a snapshot",
            vec![absent(&key)],
            vec![put],
            Some(landed),
        )? {
            Committed::Yes(_) => Ok(()),
            Committed::Conflict => Err(StoreError::SnapshotRecorded {
                cp: rec.control_plane.clone(),
                id: rec.id.clone(),
            }),
        }
    }

    pub(super) fn update_snapshot_kv(
        &self,
        cp: &str,
        id: &str,
        what: &'static str,
        change: &dyn Fn(&mut SnapshotRecord) -> bool,
    ) -> Result<()> {
        let key = self.key(&format!("snapshot/{cp}/{id}"));
        for attempt in 0..WRITE_ATTEMPTS {
            backoff(attempt);
            let Some(kv) = self.get(&key, "read a snapshot record")? else {
                return Err(StoreError::SnapshotNotFound {
                    cp: cp.to_string(),
                    id: id.to_string(),
                });
            };
            let mut rec: SnapshotRecord = self.parse(&kv)?;
            check_snapshot_filed(cp, id, &rec).map_err(|e| self.corrupt(e))?;
            if !change(&mut rec) {
                return Ok(());
            }
            // The change may not move the record to another id or control plane.
            check_snapshot_filed(cp, id, &rec).map_err(|e| self.corrupt(e))?;
            let same = Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision);
            let value = to_json(&rec);
            let put = TxnOp::put(key.clone(), value.clone(), None);
            let landed = Landed::Value {
                key: key.clone(),
                value: value.into_bytes(),
            };
            if let Committed::Yes(_) = self.commit(what, vec![same], vec![put], Some(landed))? {
                return Ok(());
            }
        }
        Err(self.conflict(format!("snapshot {id:?}")))
    }

    /// Names under `snapshot/`, each once (keys only: the records are not read).
    pub(super) fn snapshotted_control_planes_kv(&self) -> Result<Vec<String>> {
        let prefix = self.key("snapshot/");
        let keys = self.list(
            &prefix,
            GetOptions::new().with_keys_only(),
            "list snapshots",
        )?;
        let mut names: Vec<String> = keys
            .iter()
            .filter_map(|kv| {
                kv.key[prefix.len()..]
                    .split_once('/')
                    .map(|(cp, _)| cp.to_string())
            })
            .collect();
        names.dedup();
        Ok(names)
    }

    pub(super) fn delete_snapshot_kv(&self, cp: &str, id: &str) -> Result<()> {
        let del = TxnOp::delete(self.key(&format!("snapshot/{cp}/{id}")), None);
        self.commit("forget a snapshot", vec![], vec![del], None)
            .map(drop)
    }

    pub(super) fn snapshots_kv(&self, cp: &str) -> Result<Vec<SnapshotRecord>> {
        let prefix = self.key(&format!("snapshot/{cp}/"));
        let mut out = Vec::new();
        for kv in self.list(&prefix, GetOptions::new(), "list snapshots")? {
            let r: SnapshotRecord = self.parse(&kv)?;
            let id = &kv.key[prefix.len()..];
            check_snapshot_filed(cp, id, &r).map_err(|e| self.corrupt(e))?;
            out.push((kv.create_revision, r));
        }
        // By time, then in the order recorded (two in one second: the first first).
        out.sort_by_key(|(created, r)| (r.taken_at_unix_s, *created));
        Ok(out.into_iter().map(|(_, r)| r).collect())
    }
}
