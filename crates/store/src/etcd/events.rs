//! Events in the management etcd: one key each, written once, so its create revision\n//! is the event's id and the cursor `quorum events` follows; pruned every `PRUNE_EVERY`.

use super::*;

impl EtcdStore {
    pub(super) fn record_event_kv(&self, cp: &str, at_ms: i64, e: &NewEvent<'_>) -> Result<i64> {
        let n = self.events_recorded.fetch_add(1, Ordering::Relaxed);
        // Unique without coordination: time, process and a per-process counter.
        let nonce = (u64::from(std::process::id()) << 32) | (n & 0xffff_ffff);
        let key = self.key(&format!("event/{cp}/{at_ms:015}-{nonce:016x}"));
        let rec = EventRecord {
            at_ms,
            kind: e.kind.clone(),
            machine: e.machine.map(str::to_string),
            message: e.message.to_string(),
            ok: e.outcome == StepOutcome::Ok,
            waited_ms: e.waited_ms,
            took_ms: e.took_ms,
            by: e.by.map(str::to_string),
            outcome: Some(e.outcome.as_str().to_string()),
        };
        let value = to_json(&rec);
        let put = TxnOp::put(key.clone(), value.clone(), None);
        // An event key is written once: its revision is its create revision, the id.
        let landed = Landed::Value {
            key: key.clone(),
            value: value.into_bytes(),
        };
        let id = match self.commit(
            "record an event",
            vec![absent(&key)],
            vec![put],
            Some(landed),
        )? {
            Committed::Yes(rev) => rev,
            Committed::Conflict => return Err(self.conflict(format!("event key {key:?}"))),
        };
        if n % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune_events(cp)?;
        }
        Ok(id)
    }

    pub(super) fn events_after_kv(
        &self,
        cp: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let opts = GetOptions::new()
            .with_min_create_revision(after_id + 1)
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(i64::from(limit));
        let kvs = self.list(&self.key(&format!("event/{cp}/")), opts, "read events")?;
        kvs.iter()
            .map(|kv| {
                let r: EventRecord = self.parse(kv)?;
                let outcome = StepOutcome::read(r.outcome.as_deref(), &r.kind, r.ok);
                Ok(Event {
                    id: kv.create_revision,
                    control_plane: cp.to_string(),
                    at_ms: r.at_ms,
                    kind: r.kind,
                    machine: r.machine,
                    message: r.message,
                    ok: r.ok,
                    outcome,
                    waited_ms: r.waited_ms,
                    took_ms: r.took_ms,
                    by: r.by,
                })
            })
            .collect()
    }

    pub(super) fn last_event_id_kv(&self, cp: &str) -> Result<i64> {
        let opts = GetOptions::new()
            .with_keys_only()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1);
        let kvs = self.list(
            &self.key(&format!("event/{cp}/")),
            opts,
            "read the last event",
        )?;
        Ok(kvs.first().map_or(0, |kv| kv.create_revision))
    }
}
