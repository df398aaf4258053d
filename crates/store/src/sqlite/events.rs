//! Events in the state file: appended with an autoincrement id (the cursor `quorum events`\n//! follows), the oldest pruned past `EVENTS_KEPT_PER_CONTROL_PLANE`.

use super::*;

impl SqliteStore {
    pub(super) fn record_event_sql(&self, cp: &str, at_ms: i64, e: &NewEvent<'_>) -> Result<i64> {
        self.conn
            .execute(
                "INSERT INTO events(control_plane, at_ms, kind, machine, message, ok, waited_ms, took_ms, by_replica, outcome)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    cp,
                    at_ms,
                    e.kind.as_str(),
                    e.machine,
                    e.message,
                    e.outcome == StepOutcome::Ok,
                    e.waited_ms,
                    e.took_ms,
                    e.by,
                    e.outcome.as_str()
                ],
            )
            .map_err(|e| self.err(e))?;
        let id = self.conn.last_insert_rowid();
        if id % 256 == 0 {
            self.conn
                .execute(
                    "DELETE FROM events WHERE control_plane = ?1 AND id <= ?2",
                    params![cp, id - EVENTS_KEPT_PER_CONTROL_PLANE],
                )
                .map_err(|e| self.err(e))?;
        }
        Ok(id)
    }

    pub(super) fn events_after_sql(
        &self,
        cp: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, control_plane, at_ms, kind, machine, message, ok, waited_ms, took_ms, by_replica, outcome
                 FROM events WHERE control_plane = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![cp, after_id, limit], |r| {
                let kind = EventKind::parse(&r.get::<_, String>(3)?);
                let ok: bool = r.get(6)?;
                let outcome =
                    StepOutcome::read(r.get::<_, Option<String>>(10)?.as_deref(), &kind, ok);
                Ok(Event {
                    id: r.get(0)?,
                    control_plane: r.get(1)?,
                    at_ms: r.get(2)?,
                    kind,
                    machine: r.get(4)?,
                    message: r.get(5)?,
                    ok,
                    outcome,
                    waited_ms: r.get(7)?,
                    took_ms: r.get(8)?,
                    by: r.get(9)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    pub(super) fn last_event_id_sql(&self, cp: &str) -> Result<i64> {
        self.conn
            .query_row(
                "SELECT COALESCE(MAX(id), 0) FROM events WHERE control_plane = ?1",
                params![cp],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }
}
