//! The management etcd under the store: connecting (first member that answers), the
//! keys of this state and its scopes, bounded calls with failover, the fenced commit
//! every write goes through, and the read-change-write of a control plane record.

use super::*;

impl EtcdStore {
    /// Connects and checks, within a deadline, that the cluster answers.
    pub fn connect(l: &EtcdLocation) -> Result<EtcdStore> {
        Self::connect_first(l, Deadlines::default(), None)
    }

    /// `connect` with other deadlines, asking member `first` first (tests choose them).
    pub(super) fn connect_first(
        l: &EtcdLocation,
        deadlines: Deadlines,
        first: Option<usize>,
    ) -> Result<EtcdStore> {
        let location = l.url();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("quorum-store")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Etcd {
                location: location.clone(),
                detail: format!("cannot start the store's runtime: {e}"),
            })?;
        let pool = Arc::new(connect_pool(&rt, l, deadlines, first)?);
        let prober = {
            let _in_rt = rt.enter();
            pool.spawn_prober()
        };
        let conn = Conn {
            rt: rt.handle().clone(),
            pool,
            location: location.clone(),
            #[cfg(test)]
            lose: Default::default(),
        };
        let store = EtcdStore {
            rt: Some(rt),
            conn,
            prober,
            location,
            prefix: l.prefix.clone(),
            leadership: None,
            scope: None,
            shards: None,
            events_recorded: AtomicU64::new(0),
        };
        store.reached()
    }

    /// This store, once a read proved the cluster is there (the clients connect
    /// lazily).
    fn reached(self) -> Result<EtcdStore> {
        match self.get(&self.key("setting/"), "reach the cluster") {
            Err(StoreError::Unavailable { detail, .. }) if detail.contains("dns error") => {
                Err(StoreError::Etcd {
                    location: self.location.clone(),
                    detail: "no host name of the management etcd resolves (is --store right?)"
                        .to_string(),
                })
            }
            Err(e) => Err(e),
            Ok(_) => Ok(self),
        }
    }

    pub(super) fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// A key of this connection's leadership: `<scope>/<name>`, or `<name>` unscoped.
    pub(super) fn scoped(&self, name: &str) -> String {
        match &self.scope {
            Some(scope) => self.key(&format!("{scope}/{name}")),
            None => self.key(name),
        }
    }

    /// Every leader key there may be: the unsharded one and each possible shard's.
    pub(super) fn every_leader_key(&self) -> Vec<String> {
        let mut keys = vec![self.key("leader")];
        keys.extend(
            (0..quorum_core::shards::MAX_SHARDS).map(|s| self.key(&format!("shard/{s}/leader"))),
        );
        keys
    }

    /// The shard count in force and the revision of its setting (0: absent).
    pub(super) fn shards_in_force(&self) -> Result<(Option<u32>, i64)> {
        let key = self.key(&format!("setting/{SHARDS_SETTING}"));
        let Some(kv) = self.get(&key, "read the shard count")? else {
            return Ok((None, 0));
        };
        let text = String::from_utf8_lossy(&kv.value).to_string();
        let count = text
            .trim()
            .parse::<u32>()
            .map_err(|_| self.corrupt(format!("the shard count {text:?} is not a number")))?;
        Ok((Some(count), kv.mod_revision))
    }

    /// The refusal of a replica whose shard count is not the one in force.
    pub(super) fn shards_differ(&self, ours: u32, theirs: u32) -> StoreError {
        let leaders = self
            .scoped_leaders("shard/")
            .unwrap_or_default()
            .into_iter()
            .map(|(_, l)| l.identity)
            .chain(self.leader_at("leader").ok().flatten().map(|l| l.identity))
            .collect::<std::collections::BTreeSet<_>>();
        let who = if leaders.is_empty() {
            "a replica".to_string()
        } else {
            leaders.into_iter().collect::<Vec<_>>().join(", ")
        };
        let said = |n: u32| {
            if n == 1 {
                "without --shards".to_string()
            } else {
                format!("with --shards {n}")
            }
        };
        StoreError::Sharding(format!(
            "the controllers sharing {} run {} ({who} leading now), and this one was started \
             {}: start it {} too, or stop every replica to change the count",
            self.location,
            said(theirs),
            said(ours),
            said(theirs)
        ))
    }

    /// The leader recorded at `rest` (a leader key under the prefix).
    pub(super) fn leader_at(&self, rest: &str) -> Result<Option<LeaderInfo>> {
        let Some(kv) = self.get(&self.key(rest), "read the leader")? else {
            return Ok(None);
        };
        let mut info: LeaderInfo = self.parse(&kv)?;
        info.token = FenceToken(kv.create_revision);
        Ok(Some(info))
    }

    /// Runs one etcd call through the failover client (`f` once per attempt); the value
    /// and how it was obtained.
    pub(super) fn call_served<T, F, Fut>(&self, op: &'static str, f: F) -> Result<Served<T>>
    where
        F: FnMut(etcd_client::Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.conn.call(op, f)
    }

    /// The same, for a call that is safe to repeat (a read, a lease call): its value.
    pub(super) fn call<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T>
    where
        F: FnMut(etcd_client::Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.conn.call(op, f).map(|s| s.value)
    }

    pub(super) fn get(&self, key: &str, op: &'static str) -> Result<Option<Kv>> {
        let key = key.to_string();
        let mut kvs = self.call(op, move |mut c| {
            let key = key.clone();
            async move {
                let r = c.get(key, None).await?;
                Ok(to_kvs(r.kvs()))
            }
        })?;
        Ok(kvs.pop())
    }

    pub(super) fn list(&self, prefix: &str, opts: GetOptions, op: &'static str) -> Result<Vec<Kv>> {
        let prefix = prefix.to_string();
        self.call(op, move |mut c| {
            let (prefix, opts) = (prefix.clone(), opts.clone());
            async move {
                let r = c.get(prefix, Some(opts.with_prefix())).await?;
                Ok(to_kvs(r.kvs()))
            }
        })
    }

    /// One transaction: `compares` (plus the fence, when this replica leads), then
    /// `ops`. A failed fence is `Fenced`; a failed data comparison is `Conflict`, unless
    /// an earlier attempt may have landed and `landed` reads back that it did.
    pub(super) fn commit(
        &self,
        op: &'static str,
        mut compares: Vec<Compare>,
        ops: Vec<TxnOp>,
        landed: Option<Landed>,
    ) -> Result<Committed> {
        let fence = self.leadership.as_ref().map(|l| l.token);
        let leader_key = self.scoped("leader");
        if let Some(token) = fence {
            compares.push(Compare::create_revision(
                leader_key.clone(),
                CompareOp::Equal,
                token.0,
            ));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then(ops)
            .or_else([TxnOp::get(leader_key, None)]);
        #[cfg(test)]
        let lose = self.conn.lose.clone();
        let served = self.call_served(op, move |mut c| {
            let txn = txn.clone();
            #[cfg(test)]
            let lose = lose.clone();
            async move {
                #[cfg(test)]
                lose.before_send()?;
                let r = c.txn(txn).await?;
                #[cfg(test)]
                lose.after_apply()?;
                let revision = r.header().map_or(0, |h| h.revision());
                let leader_now = r.op_responses().into_iter().find_map(|o| match o {
                    TxnOpResponse::Get(g) => {
                        Some(g.kvs().first().map_or(0, |kv| kv.create_revision()))
                    }
                    _ => None,
                });
                Ok((r.succeeded(), revision, leader_now))
            }
        })?;
        let (ok, revision, leader_now) = served.value;
        if ok {
            return Ok(Committed::Yes(revision));
        }
        if served.maybe_applied_before {
            if let Some(Landed::Value { key, value }) = &landed {
                if let Some(kv) = self.get(key, "read back a write whose answer was lost")? {
                    if kv.value == *value {
                        return Ok(Committed::Yes(kv.mod_revision));
                    }
                }
            }
        }
        match (fence, leader_now) {
            (Some(token), Some(now)) if now != token.0 => Err(StoreError::Fenced { token }),
            _ => Ok(Committed::Conflict),
        }
    }

    pub(super) fn corrupt(&self, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            location: self.location.clone(),
            detail: one_line(&detail.into()),
        }
    }

    pub(super) fn parse<T: serde::de::DeserializeOwned>(&self, kv: &Kv) -> Result<T> {
        serde_json::from_slice(&kv.value).map_err(|e| self.corrupt(format!("{:?}: {e}", kv.key)))
    }

    pub(super) fn cp_record(&self, name: &str) -> Result<Option<(CpRecord, i64)>> {
        let Some(kv) = self.get(&self.key(&format!("cp/{name}")), "read a control plane")? else {
            return Ok(None);
        };
        let rec: CpRecord = self.parse(&kv)?;
        if rec.control_plane.name != name {
            return Err(self.corrupt(format!(
                "{:?} holds a control plane named {:?}",
                kv.key, rec.control_plane.name
            )));
        }
        Ok(Some((rec, kv.mod_revision)))
    }

    /// Read, change, write back if nobody wrote in between; bounded retries.
    pub(super) fn modify_control_plane(
        &mut self,
        name: &str,
        f: &dyn Fn(&mut ControlPlane),
    ) -> Result<()> {
        self.change_control_plane(
            name,
            "update a control plane",
            &|cp| {
                f(cp);
                true
            },
            &Vec::new,
        )
        .map(drop)
    }

    /// Read, change, write back with `extra` in the same transaction if nobody wrote the
    /// control plane in between; bounded retries. `f` returns whether anything is to
    /// change (false: nothing is written).
    pub(super) fn change_control_plane(
        &mut self,
        name: &str,
        what: &'static str,
        f: &dyn Fn(&mut ControlPlane) -> bool,
        extra: &dyn Fn() -> Vec<TxnOp>,
    ) -> Result<bool> {
        let key = self.key(&format!("cp/{name}"));
        for attempt in 0..WRITE_ATTEMPTS {
            backoff(attempt);
            let Some((mut rec, rev)) = self.cp_record(name)? else {
                return Err(StoreError::NotFound(name.to_string()));
            };
            if !f(&mut rec.control_plane) {
                return Ok(false);
            }
            assert_eq!(rec.control_plane.name, name, "a change never renames");
            let value = to_json(&rec);
            let mut ops = vec![TxnOp::put(key.clone(), value.clone(), None)];
            ops.extend(extra());
            let same = Compare::mod_revision(key.clone(), CompareOp::Equal, rev);
            let landed = Landed::Value {
                key: key.clone(),
                value: value.into_bytes(),
            };
            if let Committed::Yes(_) = self.commit(what, vec![same], ops, Some(landed))? {
                return Ok(true);
            }
        }
        Err(self.conflict(format!("control plane {name:?}")))
    }

    pub(super) fn conflict(&self, what: String) -> StoreError {
        StoreError::Conflict {
            location: self.location.clone(),
            what,
            attempts: WRITE_ATTEMPTS,
        }
    }

    pub(super) fn prune_events(&self, cp: &str) -> Result<()> {
        let prefix = self.key(&format!("event/{cp}/"));
        let p = prefix.clone();
        let count = self.call("count events", move |mut c| {
            let p = p.clone();
            async move {
                let r = c
                    .get(p, Some(GetOptions::new().with_prefix().with_count_only()))
                    .await?;
                Ok(r.count())
            }
        })?;
        let excess = count - EVENTS_KEPT;
        if excess <= 0 {
            return Ok(());
        }
        // Keys sort by time: the oldest `excess` keys go.
        let oldest = self.list(
            &prefix,
            GetOptions::new().with_keys_only().with_limit(excess),
            "list old events",
        )?;
        if let Some(last) = oldest.last() {
            let end = format!("{}\0", last.key);
            let del = TxnOp::delete(prefix, Some(DeleteOptions::new().with_range(end)));
            self.commit("prune events", vec![], vec![del], None)?;
        }
        Ok(())
    }
}

/// The connections to the members of `l`, made on `rt` within `CALL_TIMEOUT_MS`.
fn connect_pool(
    rt: &tokio::runtime::Runtime,
    l: &EtcdLocation,
    deadlines: Deadlines,
    first: Option<usize>,
) -> Result<Failover> {
    let location = l.url();
    let mut opts = ConnectOptions::new();
    if let Some(t) = &l.tls {
        opts = opts.with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(&t.ca_pem))
                .identity(etcd_client::Identity::from_pem(&t.cert_pem, &t.key_pem)),
        );
    }
    let endpoints = l.endpoints.clone();
    // Replicas (and commands) start on different members: the load spreads, and a
    // dead member is not everyone's first try.
    let first = first.unwrap_or_else(|| rand::random::<u32>() as usize % endpoints.len().max(1));
    // Not `block_on`: the caller may itself run inside a runtime.
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(Failover::connect(&endpoints, opts, deadlines, first).await);
    });
    rx.recv_timeout(Duration::from_millis(CALL_TIMEOUT_MS))
        .map_err(|_| StoreError::Timeout {
            location: location.clone(),
            op: "connect",
            timeout_ms: CALL_TIMEOUT_MS,
        })?
        .map_err(|e| StoreError::Etcd {
            location,
            detail: one_line(&e.to_string()),
        })
}
