//! Snapshot records in the state file: one row per snapshot, its record as JSON, the
//! id written once; read back checked (`check_snapshot_filed`).

use super::*;

impl SqliteStore {
    pub(super) fn record_snapshot_sql(&self, rec: &SnapshotRecord) -> Result<()> {
        let n = self
            .conn
            .execute(
                "INSERT OR IGNORE INTO snapshots(control_plane, id, taken_at_unix_s, doc)
                 VALUES (?1, ?2, ?3, ?4)",
                params![rec.control_plane, rec.id, rec.taken_at_unix_s, to_json(rec)],
            )
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::SnapshotRecorded {
                cp: rec.control_plane.clone(),
                id: rec.id.clone(),
            });
        }
        Ok(())
    }

    pub(super) fn update_snapshot_sql(
        &self,
        cp: &str,
        id: &str,
        change: &dyn Fn(&mut SnapshotRecord) -> bool,
    ) -> Result<()> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        let doc: Option<String> = tx
            .query_row(
                "SELECT doc FROM snapshots WHERE control_plane = ?1 AND id = ?2",
                params![cp, id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some(doc) = doc else {
            return Err(StoreError::SnapshotNotFound {
                cp: cp.to_string(),
                id: id.to_string(),
            });
        };
        let mut rec: SnapshotRecord = serde_json::from_str(&doc)
            .map_err(|e| self.corrupt(format!("snapshot record '{id}' of '{cp}': {e}")))?;
        check_snapshot_filed(cp, id, &rec).map_err(|e| self.corrupt(e))?;
        if !change(&mut rec) {
            return Ok(());
        }
        // The change may not move the record to another id or control plane.
        check_snapshot_filed(cp, id, &rec).map_err(|e| self.corrupt(e))?;
        tx.execute(
            "UPDATE snapshots SET doc = ?3 WHERE control_plane = ?1 AND id = ?2",
            params![cp, id, to_json(&rec)],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    pub(super) fn snapshotted_control_planes_sql(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT control_plane FROM snapshots ORDER BY 1")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| self.err(e));
        rows
    }

    pub(super) fn delete_snapshot_sql(&self, cp: &str, id: &str) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM snapshots WHERE control_plane = ?1 AND id = ?2",
                params![cp, id],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub(super) fn snapshots_sql(&self, cp: &str) -> Result<Vec<SnapshotRecord>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, doc FROM snapshots WHERE control_plane = ?1
                 ORDER BY taken_at_unix_s, rowid",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![cp], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, doc) = row.map_err(|e| self.err(e))?;
            let rec: SnapshotRecord = serde_json::from_str(&doc)
                .map_err(|e| self.corrupt(format!("snapshot record '{id}' of '{cp}': {e}")))?;
            check_snapshot_filed(cp, &id, &rec).map_err(|e| self.corrupt(e))?;
            out.push(rec);
        }
        Ok(out)
    }
}
