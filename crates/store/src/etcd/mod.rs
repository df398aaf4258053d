//! The distributed backend: quorum's state in a management etcd cluster (separate from
//! the control planes quorum manages), shared by several controller replicas.
//!
//! Every write is one etcd transaction. A write that depends on what was read compares
//! the revision read (`mod_revision`, or `create_revision == 0` for "absent"), so two
//! writers never silently overwrite each other: the loser re-reads and retries, bounded.
//! A leading controller adds its fence to every transaction: `create_revision(leader
//! key) == token`. Once another replica has taken the key, a deposed leader's writes
//! are refused (`StoreError::Fenced`) and nothing it wrote is applied.
//!
//! The store's API is synchronous (like the embedded one). Calls run on a small runtime
//! of the store's own, so a caller inside another tokio runtime can use it too; every
//! call has a deadline.
//!
//! The management etcd may lose any minority of its members: every call goes through
//! `quorum_etcd::failover` (one client per member, the member that served last first,
//! the next one when it cannot serve, members set aside and probed in the background;
//! `call.rs`). A write retried on another member after an attempt that may have landed
//! (a timeout, a broken connection) is one compare-and-swap transaction, so it never
//! applies twice; when its comparison then fails, the store reads back what the first
//! attempt would have written (`Landed`) and decides whether it landed.
//!
//! Keys, under a prefix (default `/quorum/`):
//! `cp/<name>` (spec and next serial), `ca/<name>`, `machine/<cp>/<name>`,
//! `event/<cp>/<at_ms>-<nonce>` (an event's id is its key's create revision),
//! `status/<cp>`, `setting/<key>`, `next-address`, `heartbeat`, and `leader` (attached
//! to the leader's lease). A sharded fleet has a leadership per scope instead:
//! `shard/<n>/leader` and `shard/<n>/heartbeat` for each shard, `replica/<name>/leader`
//! for each live replica (its registration), and the count in force in
//! `setting/controller-shards`.

mod allocate;
mod cakeys;
mod call;
mod events;
mod lease;
mod location;
mod plumbing;
mod records;
mod snapshots;
#[cfg(test)]
mod tests;

use super::*;
use call::Conn;
use etcd_client::{
    Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp, TxnOpResponse,
};
use lease::{EtcdHeartbeat, Leadership, LeaseClock};
pub use location::{EtcdLocation, EtcdTls};
use quorum_core::failover::{EndpointHealth, CALL_TIMEOUT_MS};
use quorum_etcd::failover::{Deadlines, Failover, Served};
use records::{absent, backoff, one_line, to_kvs, CaRecord, CpRecord, EventRecord};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Attempts of a read-modify-write that keeps losing to other writers, and the pause
/// between attempts: the core's backoff (up to 10 ms doubling, capped at 200 ms, drawn
/// from the upper half of that with `rand`), so contending writers spread out.
const WRITE_ATTEMPTS: u32 = 12;
const WRITE_BACKOFF: quorum_core::pacing::Backoff = quorum_core::pacing::Backoff::new(10, 200);
/// Events kept per control plane (pruned every `PRUNE_EVERY` events this process records).
const EVENTS_KEPT: i64 = 10_000;
const PRUNE_EVERY: u64 = 256;
/// `data_version` folds the number of control planes into the newest record's revision:
/// distinct for any count below it.
const DATA_VERSION_COUNT_SPAN: i64 = 1_000_003;
/// etcd's shortest useful lease (it raises shorter ones to about 1.5 s anyway).
const MIN_TTL_S: i64 = 2;
/// The longest lease accepted: a deposed leader could act this long.
const MAX_TTL_S: i64 = 60;

pub struct EtcdStore {
    /// Runs the store's calls; `None` only while dropping.
    rt: Option<tokio::runtime::Runtime>,
    conn: Conn,
    /// Probes the members in the background (aborted on drop).
    prober: tokio::task::JoinHandle<()>,
    location: String,
    prefix: String,
    leadership: Option<Leadership>,
    /// Where this connection's leadership lives (`shard/3`); `None`: the one leadership
    /// of an unsharded fleet (`leader`, `heartbeat`).
    scope: Option<String>,
    /// The shard count this connection agreed to (`agree_shards`): every campaign
    /// compares the setting with it.
    shards: Option<u32>,
    events_recorded: AtomicU64,
}

/// A key and what etcd says of it.
struct Kv {
    key: String,
    value: Vec<u8>,
    create_revision: i64,
    mod_revision: i64,
    lease: i64,
}

/// How to tell, by reading back, whether a write whose first attempt may have landed
/// (its answer lost) did land, when the retry's comparison failed.
enum Landed {
    /// `key` holds exactly `value`: a record only this write makes (it names the serial,
    /// the address, the nonce or the whole new state it chose; a competing writer that
    /// read the same revision would have been refused by the same comparison).
    Value { key: String, value: Vec<u8> },
}

/// What a transaction came to.
enum Committed {
    /// Applied, at this revision.
    Yes(i64),
    /// A data comparison failed (someone else wrote first); nothing applied.
    Conflict,
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.step_down();
        self.prober.abort();
        if let Some(rt) = self.rt.take() {
            // Never blocks, so dropping the store inside another runtime is fine.
            rt.shutdown_background();
        }
    }
}

impl StateStore for EtcdStore {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn check_integrity(&self) -> Result<()> {
        // Every record is checked as it is read; here, that the cluster answers.
        self.control_planes().map(drop)
    }

    fn setting(&self, key: &str) -> Result<Option<String>> {
        let Some(kv) = self.get(&self.key(&format!("setting/{key}")), "read a setting")? else {
            return Ok(None);
        };
        String::from_utf8(kv.value)
            .map(Some)
            .map_err(|_| self.corrupt(format!("setting {key:?} is not text")))
    }

    fn setting_or_init(&self, key: &str, value: &str) -> Result<String> {
        let k = self.key(&format!("setting/{key}"));
        // A lost answer needs no reading back: the setting is read just below.
        self.commit(
            "initialise a setting",
            vec![absent(&k)],
            vec![TxnOp::put(k, value, None)],
            None,
        )?;
        self.setting(key)?
            .ok_or_else(|| self.corrupt(format!("setting {key:?} vanished after it was written")))
    }

    fn replace_setting(&self, key: &str, expected: &str, value: &str) -> Result<bool> {
        let k = self.key(&format!("setting/{key}"));
        let same = Compare::value(k.clone(), CompareOp::Equal, expected);
        let landed = Landed::Value {
            key: k.clone(),
            value: value.as_bytes().to_vec(),
        };
        let put = TxnOp::put(k, value, None);
        match self.commit("change a setting", vec![same], vec![put], Some(landed))? {
            Committed::Yes(_) => Ok(true),
            Committed::Conflict => Ok(false),
        }
    }

    fn remove_setting(&self, key: &str, expected: &str) -> Result<bool> {
        let k = self.key(&format!("setting/{key}"));
        let same = Compare::value(k.clone(), CompareOp::Equal, expected);
        let delete = TxnOp::delete(k.clone(), None);
        match self.commit("remove a setting", vec![same], vec![delete], None)? {
            Committed::Yes(_) => Ok(true),
            // Absent is the end sought, whoever removed it (this call's own delete
            // whose answer was lost included).
            Committed::Conflict => Ok(self.get(&k, "read a setting")?.is_none()),
        }
    }

    fn settings_under(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let base = self.key("setting/");
        let kvs = self.list(
            &format!("{base}{prefix}"),
            GetOptions::new(),
            "read settings",
        )?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in kvs {
            let key = kv.key[base.len()..].to_string();
            let value = String::from_utf8(kv.value)
                .map_err(|_| self.corrupt(format!("setting {key:?} is not text")))?;
            out.push((key, value));
        }
        out.sort();
        Ok(out)
    }

    fn create_control_plane(
        &mut self,
        cp: &ControlPlane,
        ca: Option<&StoredCa>,
        now_ms: i64,
    ) -> Result<()> {
        if cp.spec.tls() && ca.is_none() {
            return Err(StoreError::MissingCa(cp.name.clone()));
        }
        let key = self.key(&format!("cp/{}", cp.name));
        let rec = CpRecord {
            control_plane: cp.clone(),
            next_serial: 1,
            created_at_ms: Some(now_ms),
        };
        let value = to_json(&rec);
        let mut ops = vec![
            TxnOp::put(key.clone(), value.clone(), None),
            TxnOp::delete(
                self.key(&format!("event/{}/", cp.name)),
                Some(DeleteOptions::new().with_prefix()),
            ),
        ];
        if let Some(ca) = ca {
            let doc = CaRecord {
                cert_pem: ca.cert_pem.clone(),
                key_pem: ca.key_pem.clone(),
            };
            ops.push(TxnOp::put(
                self.key(&format!("ca/{}", cp.name)),
                to_json(&doc),
                None,
            ));
        }
        let landed = Landed::Value {
            key: key.clone(),
            value: value.into_bytes(),
        };
        match self.commit(
            "create a control plane",
            vec![absent(&key)],
            ops,
            Some(landed),
        )? {
            Committed::Yes(_) => Ok(()),
            Committed::Conflict => Err(StoreError::AlreadyExists(cp.name.clone())),
        }
    }

    fn ca_keys(&self) -> Result<Vec<(String, String)>> {
        let prefix = self.key("ca/");
        let kvs = self.list(&prefix, GetOptions::new().with_prefix(), "read the CAs")?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in &kvs {
            let r: CaRecord = self.parse(kv)?;
            out.push((kv.key[prefix.len()..].to_string(), r.key_pem));
        }
        Ok(out)
    }

    fn replace_ca_keys(&mut self, changes: &[(String, String, String)]) -> Result<usize> {
        self.replace_ca_keys_kv(changes)
    }

    fn certificate_authority(&self, cp: &ControlPlane) -> Result<Option<StoredCa>> {
        let ca = match self.get(&self.key(&format!("ca/{}", cp.name)), "read a CA")? {
            Some(kv) => {
                let r: CaRecord = self.parse(&kv)?;
                Some(StoredCa {
                    cert_pem: r.cert_pem,
                    key_pem: r.key_pem,
                })
            }
            None => None,
        };
        if cp.spec.tls() && ca.is_none() {
            return Err(self.corrupt(format!(
                "control plane {:?} uses TLS but its certificate authority is missing",
                cp.name
            )));
        }
        Ok(ca)
    }

    fn controller_heartbeat(&self, beat: &Heartbeat) -> Result<()> {
        let put = TxnOp::put(self.scoped("heartbeat"), beat.encode(), None);
        self.commit("record a heartbeat", vec![], vec![put], None)
            .map(drop)
    }

    /// Unscoped: the unsharded controller's heartbeat, else the newest of any shard's.
    fn last_controller_heartbeat(&self) -> Result<Option<Heartbeat>> {
        if let Some(kv) = self.get(&self.scoped("heartbeat"), "read the heartbeat")? {
            return Ok(Heartbeat::decode(&String::from_utf8_lossy(&kv.value)));
        }
        if self.scope.is_some() {
            return Ok(None);
        }
        let beats = self.list(
            &self.key("shard/"),
            GetOptions::new().with_prefix(),
            "read the shards' heartbeats",
        )?;
        Ok(beats
            .iter()
            .filter(|kv| kv.key.ends_with("/heartbeat"))
            .filter_map(|kv| Heartbeat::decode(&String::from_utf8_lossy(&kv.value)))
            .max_by_key(|b| b.at_ms))
    }

    fn heartbeat_writer(&self) -> Result<Box<dyn HeartbeatWriter>> {
        Ok(Box::new(EtcdHeartbeat {
            conn: self.conn.clone(),
            key: self.scoped("heartbeat"),
            leader_key: self.scoped("leader"),
            fence: self.leadership.as_ref().map(|l| l.token),
        }))
    }

    fn controller_stopped(&self, identity: &str) -> Result<()> {
        let Some(kv) = self.get(&self.scoped("heartbeat"), "read the heartbeat")? else {
            return Ok(());
        };
        let ours = Heartbeat::decode(&String::from_utf8_lossy(&kv.value))
            .is_some_and(|b| b.identity == identity);
        if !ours {
            return Ok(());
        }
        // Only if nobody beat since it was read; a conflict means another replica
        // leads now, and its heartbeat stays.
        let unchanged =
            Compare::mod_revision(self.scoped("heartbeat"), CompareOp::Equal, kv.mod_revision);
        let delete = TxnOp::delete(self.scoped("heartbeat"), None);
        self.commit(
            "withdraw the heartbeat",
            vec![unchanged],
            vec![delete],
            None,
        )
        .map(drop)
    }

    fn control_plane(&self, name: &str) -> Result<Option<ControlPlane>> {
        Ok(self.cp_record(name)?.map(|(r, _)| r.control_plane))
    }

    fn created_at_ms(&self, name: &str) -> Result<Option<i64>> {
        Ok(self.cp_record(name)?.and_then(|(r, _)| r.created_at_ms))
    }

    fn control_planes(&self) -> Result<Vec<ControlPlane>> {
        let prefix = self.key("cp/");
        let mut out = Vec::new();
        for kv in self.list(&prefix, GetOptions::new(), "list control planes")? {
            let rec: CpRecord = self.parse(&kv)?;
            if kv.key[prefix.len()..] != rec.control_plane.name {
                return Err(self.corrupt(format!(
                    "{:?} holds a control plane named {:?}",
                    kv.key, rec.control_plane.name
                )));
            }
            out.push(rec.control_plane);
        }
        Ok(out)
    }

    fn update_spec(&mut self, name: &str, spec: &ControlPlaneSpec) -> Result<()> {
        self.modify_control_plane(name, &|cp| {
            cp.spec = spec.clone();
            cp.spec_version += 1;
        })
    }

    fn replace_spec(
        &mut self,
        name: &str,
        expected: u64,
        spec: &ControlPlaneSpec,
        road: Option<&quorum_core::chain::Road>,
    ) -> Result<bool> {
        // The record's revision is compared by the write, so the version checked here
        // is the one replaced.
        self.change_control_plane(
            name,
            "replace a spec",
            &|cp| {
                if cp.spec_version != expected {
                    return false;
                }
                cp.spec = spec.clone();
                cp.road = road.cloned();
                cp.spec_version += 1;
                true
            },
            &Vec::new,
        )
    }

    fn take_next_link(
        &mut self,
        name: &str,
        from: Version,
        to: Version,
        now_unix_s: i64,
    ) -> Result<bool> {
        self.change_control_plane(
            name,
            "record a chained upgrade's next link",
            &|cp| cp.take_next_link(from, to, now_unix_s),
            &Vec::new,
        )
    }

    fn mark_control_plane_deleting(&mut self, name: &str) -> Result<()> {
        self.modify_control_plane(name, &mark_deleting)?;
        deleting_or_protected(name, self.control_plane(name)?)
    }

    fn set_rebuild(&mut self, name: &str, rebuild: Option<&Rebuild>) -> Result<()> {
        self.modify_control_plane(name, &|cp| cp.rebuild = rebuild.cloned())
    }

    fn next_certificate_authority(&self, name: &str) -> Result<Option<StoredCa>> {
        let key = self.key(&format!("ca/{}", next_ca_name(name)));
        match self.get(&key, "read a rotation's new CA")? {
            Some(kv) => {
                let r: CaRecord = self.parse(&kv)?;
                Ok(Some(StoredCa {
                    cert_pem: r.cert_pem,
                    key_pem: r.key_pem,
                }))
            }
            None => Ok(None),
        }
    }

    fn begin_ca_rotation(
        &mut self,
        name: &str,
        next: &StoredCa,
        rotation: &CaRotation,
    ) -> Result<bool> {
        let next_key = self.key(&format!("ca/{}", next_ca_name(name)));
        let doc = to_json(&CaRecord {
            cert_pem: next.cert_pem.clone(),
            key_pem: next.key_pem.clone(),
        });
        self.change_control_plane(
            name,
            "begin a CA rotation",
            &|cp| {
                if cp.ca_rotation.is_some() {
                    return false;
                }
                cp.ca_rotation = Some(rotation.clone());
                true
            },
            &|| vec![TxnOp::put(next_key.clone(), doc.clone(), None)],
        )
    }

    fn set_ca_rotation(&mut self, name: &str, rotation: &CaRotation) -> Result<bool> {
        self.change_control_plane(
            name,
            "record a CA rotation's phase",
            &|cp| {
                match &cp.ca_rotation {
                    Some(r) if r.to == rotation.to && r != rotation => {}
                    _ => return false,
                }
                cp.ca_rotation = Some(rotation.clone());
                true
            },
            &Vec::new,
        )
    }

    fn finish_ca_rotation(&mut self, name: &str, generation: u32, ca: &StoredCa) -> Result<bool> {
        let ca_key = self.key(&format!("ca/{name}"));
        let next_key = self.key(&format!("ca/{}", next_ca_name(name)));
        let doc = to_json(&CaRecord {
            cert_pem: ca.cert_pem.clone(),
            key_pem: ca.key_pem.clone(),
        });
        self.change_control_plane(
            name,
            "finish a CA rotation",
            &|cp| {
                if cp.ca_rotation.as_ref().map(|r| r.to) != Some(generation) {
                    return false;
                }
                cp.ca_rotation = None;
                cp.ca_generation = generation;
                true
            },
            &|| {
                vec![
                    TxnOp::put(ca_key.clone(), doc.clone(), None),
                    TxnOp::delete(next_key.clone(), None),
                ]
            },
        )
    }

    fn forget_control_plane(&mut self, name: &str) -> Result<()> {
        let prefix = Some(DeleteOptions::new().with_prefix());
        let ops = vec![
            TxnOp::delete(self.key(&format!("machine/{name}/")), prefix),
            TxnOp::delete(self.key(&format!("status/{name}")), None),
            TxnOp::delete(self.key(&format!("ca/{name}")), None),
            TxnOp::delete(self.key(&format!("ca/{}", next_ca_name(name))), None),
            TxnOp::delete(self.key(&format!("cp/{name}")), None),
        ];
        self.commit("forget a control plane", vec![], ops, None)
            .map(drop)
    }

    fn machines(&self, cp: &str) -> Result<Vec<Machine>> {
        let prefix = self.key(&format!("machine/{cp}/"));
        let mut out = Vec::new();
        for kv in self.list(&prefix, GetOptions::new(), "list machines")? {
            let m: Machine = self.parse(&kv)?;
            let name = &kv.key[prefix.len()..];
            check_machine_filed(cp, name, &m).map_err(|e| self.corrupt(e))?;
            out.push(m);
        }
        out.sort_by_key(|m| m.serial);
        Ok(out)
    }

    fn allocate_machine_at(
        &mut self,
        cp: &str,
        bootstrap: bool,
        version: Version,
        certificates_not_after_unix_s: Option<i64>,
        remediation: Option<Remediation>,
        at: Option<&Placed>,
        is_free: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Result<Machine> {
        self.allocate_at(
            cp,
            bootstrap,
            version,
            certificates_not_after_unix_s,
            remediation,
            at,
            is_free,
        )
    }

    fn update_machine(
        &mut self,
        cp: &str,
        machine: &str,
        what: &'static str,
        change: &dyn Fn(&mut Machine) -> bool,
    ) -> Result<()> {
        let key = self.key(&format!("machine/{cp}/{machine}"));
        for attempt in 0..WRITE_ATTEMPTS {
            backoff(attempt);
            let Some(kv) = self.get(&key, "read a machine")? else {
                return Err(StoreError::MachineNotFound {
                    cp: cp.to_string(),
                    machine: machine.to_string(),
                });
            };
            let mut m: Machine = self.parse(&kv)?;
            if !change(&mut m) {
                return Ok(());
            }
            assert_eq!(m.name, machine, "a change never renames a machine");
            let same = Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision);
            let value = to_json(&m);
            let put = TxnOp::put(key.clone(), value.clone(), None);
            let landed = Landed::Value {
                key: key.clone(),
                value: value.into_bytes(),
            };
            if let Committed::Yes(_) = self.commit(what, vec![same], vec![put], Some(landed))? {
                return Ok(());
            }
        }
        Err(self.conflict(format!("machine {machine:?}")))
    }

    fn delete_machine(&mut self, cp: &str, machine: &str) -> Result<()> {
        let del = TxnOp::delete(self.key(&format!("machine/{cp}/{machine}")), None);
        self.commit("delete a machine record", vec![], vec![del], None)
            .map(drop)
    }

    fn record_event(&self, cp: &str, at_ms: i64, e: &NewEvent<'_>) -> Result<i64> {
        self.record_event_kv(cp, at_ms, e)
    }

    fn events_after(&self, cp: &str, after_id: i64, limit: u32) -> Result<Vec<Event>> {
        self.events_after_kv(cp, after_id, limit)
    }

    fn last_event_id(&self, cp: &str) -> Result<i64> {
        self.last_event_id_kv(cp)
    }

    fn publish_status(&self, cp: &str, status: &PublishedStatus) -> Result<()> {
        let put = TxnOp::put(self.key(&format!("status/{cp}")), to_json(status), None);
        self.commit("publish a status", vec![], vec![put], None)
            .map(drop)
    }

    fn published_status(&self, cp: &str) -> Result<Option<PublishedStatus>> {
        match self.get(&self.key(&format!("status/{cp}")), "read a status")? {
            Some(kv) => self.parse(&kv).map(Some),
            None => Ok(None),
        }
    }

    // ---- snapshots (`etcd/snapshots.rs`)

    fn record_snapshot(&self, rec: &SnapshotRecord) -> Result<()> {
        self.record_snapshot_kv(rec)
    }

    fn update_snapshot(
        &self,
        cp: &str,
        id: &str,
        what: &'static str,
        change: &dyn Fn(&mut SnapshotRecord) -> bool,
    ) -> Result<()> {
        self.update_snapshot_kv(cp, id, what, change)
    }

    fn snapshotted_control_planes(&self) -> Result<Vec<String>> {
        self.snapshotted_control_planes_kv()
    }

    fn delete_snapshot(&self, cp: &str, id: &str) -> Result<()> {
        self.delete_snapshot_kv(cp, id)
    }

    fn snapshots(&self, cp: &str) -> Result<Vec<SnapshotRecord>> {
        self.snapshots_kv(cp)
    }

    /// Changes when a control plane's record is written, created or removed: the newest
    /// record's mod revision and the number of records, in one read of one key. (The
    /// store's own revision would change with every heartbeat, event and published
    /// status, and make every controller of a fleet list every control plane at every
    /// look.)
    fn data_version(&self) -> Result<i64> {
        let key = self.key("cp/");
        self.call("read the control planes' revision", move |mut c| {
            let key = key.clone();
            async move {
                let opts = GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_sort(SortTarget::Mod, SortOrder::Descend)
                    .with_limit(1);
                let r = c.get(key, Some(opts)).await?;
                let newest = r.kvs().first().map_or(0, |kv| kv.mod_revision());
                Ok(newest
                    .saturating_mul(DATA_VERSION_COUNT_SPAN)
                    .saturating_add(r.count() % DATA_VERSION_COUNT_SPAN))
            }
        })
    }

    fn campaign(&mut self, identity: &str, ttl_ms: u64) -> Result<Campaign> {
        if let Some(l) = &self.leadership {
            return Ok(Campaign::Leading { token: l.token });
        }
        if let Some(leader) = self.leader()? {
            return Ok(Campaign::Standby {
                leader: Some(leader),
            });
        }
        let ttl_s = (ttl_ms.div_ceil(1_000) as i64).clamp(MIN_TTL_S, MAX_TTL_S);
        // Before the first attempt: the deadline counts from no later than etcd's.
        let sent = Instant::now();
        let (lease_id, granted_s) = self.call("grant a lease", move |mut c| async move {
            let r = c.lease_grant(ttl_s, None).await?;
            Ok((r.id(), r.ttl()))
        })?;
        let Some(revision) = self.take_leader_key(identity, lease_id)? else {
            return self.lost_campaign(lease_id);
        };
        let clock = LeaseClock::new(sent + Duration::from_secs(granted_s.max(0) as u64));
        let keeper = lease::keep_lease(
            &self.conn,
            lease_id,
            granted_s.max(MIN_TTL_S),
            clock.clone(),
        );
        self.leadership = Some(Leadership {
            token: FenceToken(revision),
            lease_id,
            clock,
            keeper,
        });
        Ok(Campaign::Leading {
            token: FenceToken(revision),
        })
    }

    fn ensure_leading(&self, margin_ms: Option<u64>) -> Result<()> {
        let Some(l) = &self.leadership else {
            return Err(StoreError::NotLeading);
        };
        if l.clock.lost() {
            return Err(StoreError::LeaseLost { token: l.token });
        }
        if let Some(margin_ms) = margin_ms {
            let left_ms = l.clock.left_ms();
            if left_ms < margin_ms as i64 {
                return Err(StoreError::LeaseEnding { left_ms, margin_ms });
            }
        }
        // The fenced no-op: etcd itself confirms the token is current.
        match self.commit("confirm leadership", vec![], vec![], None)? {
            Committed::Yes(_) => {}
            Committed::Conflict => return Err(StoreError::Fenced { token: l.token }),
        }
        if let Some(margin_ms) = margin_ms {
            let left_ms = l.clock.left_ms();
            if left_ms <= 0 {
                return Err(StoreError::LeaseEnding { left_ms, margin_ms });
            }
        }
        Ok(())
    }

    fn lease_left_ms(&self) -> Option<i64> {
        let l = self.leadership.as_ref()?;
        if l.clock.lost() {
            return Some(-1);
        }
        Some(l.clock.left_ms())
    }

    fn lease_lost(&self) -> bool {
        self.leadership.as_ref().is_some_and(|l| l.clock.lost())
    }

    fn step_down(&mut self) {
        let Some(l) = self.leadership.take() else {
            return;
        };
        l.keeper.abort();
        // Best effort and bounded: an unreleased lease expires by itself.
        let id = l.lease_id;
        let _ = self.call("release the lease", move |mut c| async move {
            c.lease_revoke(id).await.map(drop)
        });
    }

    fn release_lease_keeping_token(&self) -> Result<()> {
        let Some(l) = &self.leadership else {
            return Ok(());
        };
        let id = l.lease_id;
        l.keeper.abort();
        self.call("revoke the lease", move |mut c| async move {
            c.lease_revoke(id).await.map(drop)
        })
    }

    fn endpoint_health(&self, probe: bool) -> Vec<EndpointHealth> {
        if !probe {
            return self.conn.pool.health();
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let pool = self.conn.pool.clone();
        self.conn.rt.spawn(async move {
            let _ = tx.send(pool.probe_all().await);
        });
        let slack_ms = quorum_core::failover::PROBE_TIMEOUT_MS + 1_000;
        rx.recv_timeout(Duration::from_millis(slack_ms))
            .unwrap_or_else(|_| self.conn.pool.health())
    }

    fn leader(&self) -> Result<Option<LeaderInfo>> {
        let Some(kv) = self.get(&self.scoped("leader"), "read the leader")? else {
            return Ok(None);
        };
        let mut info: LeaderInfo = self.parse(&kv)?;
        info.token = FenceToken(kv.create_revision);
        Ok(Some(info))
    }

    fn set_scope(&mut self, scope: &str) -> Result<()> {
        assert!(
            self.leadership.is_none(),
            "a scope is set before the first campaign"
        );
        let valid = scope.split('/').count() == 2
            && scope
                .split('/')
                .all(|part| !part.is_empty() && !part.contains(char::is_whitespace));
        if !valid {
            return Err(StoreError::Sharding(format!(
                "{scope:?} is not a leadership scope (`shard/N` or `replica/NAME`)"
            )));
        }
        self.scope = Some(scope.to_string());
        Ok(())
    }

    fn agree_shards(&mut self, count: u32) -> Result<()> {
        let key = self.key(&format!("setting/{SHARDS_SETTING}"));
        for attempt in 1..=WRITE_ATTEMPTS {
            let (in_force, revision) = self.shards_in_force()?;
            if in_force == Some(count) {
                self.shards = Some(count);
                return Ok(());
            }
            // Another count, or none yet: set ours, but only while no replica leads
            // anything (every leader key absent), in the same transaction.
            let mut compares: Vec<Compare> =
                self.every_leader_key().iter().map(|k| absent(k)).collect();
            compares.push(Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                revision,
            ));
            let put = TxnOp::put(key.clone(), count.to_string(), None);
            // Not `commit`: no fence (nothing is led yet), and a lost answer is read
            // back by the next attempt's first read.
            let txn = Txn::new().when(compares).and_then([put]);
            let won = self.call("agree on the shard count", move |mut c| {
                let txn = txn.clone();
                async move { Ok(c.txn(txn).await?.succeeded()) }
            })?;
            if won {
                self.shards = Some(count);
                return Ok(());
            }
            if let Some(theirs) = in_force {
                let someone_leads = !self.scoped_leaders("shard/")?.is_empty()
                    || self.leader_at("leader")?.is_some();
                if someone_leads {
                    return Err(self.shards_differ(count, theirs));
                }
            }
            backoff(attempt);
        }
        Err(StoreError::Conflict {
            location: self.location.clone(),
            what: "the shard count".to_string(),
            attempts: WRITE_ATTEMPTS,
        })
    }

    fn scoped_leaders(&self, prefix: &str) -> Result<Vec<(String, LeaderInfo)>> {
        let base = self.key("");
        let kvs = self.list(
            &self.key(prefix),
            GetOptions::new().with_prefix(),
            "read the scopes' leaders",
        )?;
        let mut out = Vec::new();
        for kv in kvs.iter().filter(|kv| kv.key.ends_with("/leader")) {
            let scope = kv.key[base.len()..kv.key.len() - "/leader".len()].to_string();
            let mut info: LeaderInfo = self.parse(kv)?;
            info.token = FenceToken(kv.create_revision);
            out.push((scope, info));
        }
        Ok(out)
    }

    fn controller_of(&self, cp: &str) -> Result<(Option<LeaderInfo>, Option<Heartbeat>)> {
        let scope = match self.shards_in_force()?.0 {
            Some(count) if count > 1 => {
                format!("shard/{}/", quorum_core::shards::shard_of(cp, count))
            }
            _ => String::new(),
        };
        let leader = self.leader_at(&format!("{scope}leader"))?;
        let beat = self
            .get(
                &self.key(&format!("{scope}heartbeat")),
                "read the heartbeat",
            )?
            .and_then(|kv| Heartbeat::decode(&String::from_utf8_lossy(&kv.value)));
        Ok((leader, beat))
    }
}

impl EtcdStore {
    /// Puts the leader key, bound to `lease_id`, if no replica holds it (and, sharded,
    /// the shard count agreed to is still the one in force): the revision it was
    /// created at (the leadership token) if this replica won.
    fn take_leader_key(&self, identity: &str, lease_id: i64) -> Result<Option<i64>> {
        let key = self.scoped("leader");
        let info = LeaderInfo {
            identity: identity.to_string(),
            since_ms: crate::now_ms(),
            token: FenceToken::EMBEDDED,
        };
        let put = TxnOp::put(
            key.clone(),
            to_json(&info),
            Some(PutOptions::new().with_lease(lease_id)),
        );
        // Not `commit`: there is no fence yet, and the comparison is the election (and,
        // sharded, that the count agreed to is still the one in force).
        let mut compares = vec![absent(&key)];
        if let Some(count) = self.shards {
            compares.push(Compare::value(
                self.key(&format!("setting/{SHARDS_SETTING}")),
                CompareOp::Equal,
                count.to_string(),
            ));
        }
        let txn = Txn::new().when(compares).and_then([put]);
        let served = self.call_served("take the leader key", move |mut c| {
            let txn = txn.clone();
            async move {
                let r = c.txn(txn).await?;
                Ok((r.succeeded(), r.header().map_or(0, |h| h.revision())))
            }
        })?;
        let (mut won, mut revision) = served.value;
        if !won && served.maybe_applied_before {
            // The first attempt may have taken the key: it is ours if it carries our lease.
            if let Some(kv) = self.get(&key, "read back the leader key")? {
                if kv.lease == lease_id {
                    (won, revision) = (true, kv.create_revision);
                }
            }
        }
        Ok(won.then_some(revision))
    }

    /// This replica did not win: its lease goes, a changed shard count is an error,
    /// and it stands by the leader there is.
    fn lost_campaign(&self, lease_id: i64) -> Result<Campaign> {
        let _ = self.call("revoke an unused lease", move |mut c| async move {
            c.lease_revoke(lease_id).await.map(drop)
        });
        if let Some(ours) = self.shards {
            match self.shards_in_force()?.0 {
                Some(theirs) if theirs == ours => {}
                Some(theirs) => return Err(self.shards_differ(ours, theirs)),
                None => {
                    return Err(StoreError::Sharding(format!(
                        "the shard count vanished from {} while this controller ran: \
                         restart it",
                        self.location
                    )))
                }
            }
        }
        Ok(Campaign::Standby {
            leader: self.leader()?,
        })
    }
}
