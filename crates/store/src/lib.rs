//! quorum-store: quorum's durable state, in one SQLite file (WAL mode) under the state
//! directory, or in a management etcd cluster (`--store etcd://…`).
//!
//! Holds the control plane specs, the machine records (quorum's durable intent), the
//! event history, the controller's last published status, the sealed secrets, and the
//! controllers' leadership, shards and heartbeats. Every write is one atomic step
//! (SQLite: one immediate transaction with `synchronous=FULL`, WAL mode letting the CLI
//! read and write while a controller runs; etcd: a transaction comparing on the
//! revision read, fenced by the leader's token), so an acknowledged intent survives a
//! crash or power loss and never overwrites another writer's.
//!
//! Async code reaches the store through [`StoreTask`] (`task.rs`): its calls block.
//!
//! Architecture invariant: the store knows nothing of the members it manages or their
//! processes (the etcd it may talk to is its own, the management store). It stores
//! `quorum-core` types as JSON and checks them on the way back in (a record that does
//! not parse is reported as corruption, never skipped).

use quorum_core::model::CLIENT_PORT;
use quorum_core::reach;
use quorum_core::{
    CaRotation, CaStep, ControlPlane, ControlPlaneSpec, Machine, Rebuild, Remediation,
    SnapshotRecord, Verification, Version,
};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod etcd;
mod event;
mod heartbeat;
mod kept;
pub use heartbeat::{Heartbeat, HeartbeatWriter, StepInProgress};
pub mod hosts;
mod sealed;
pub mod secrets;
mod sqlite;
mod task;
pub use etcd::{EtcdLocation, EtcdStore, EtcdTls};
pub use event::{Event, EventKind, NewEvent, StepOutcome, UnknownKind};
pub use quorum_core::failover::EndpointHealth;
pub use quorum_core::lease::FenceToken;
use sealed::next_ca_name;
pub use sealed::NEXT_CA_SUFFIX;
pub use sqlite::SqliteStore;
pub use task::StoreTask;

/// The file inside the state directory.
pub const STATE_FILE: &str = "quorum.db";
/// Written beside the state file once its schema exists: from then on an empty or
/// missing state file is a lost state, never a new one.
pub const INITIALIZED_MARKER: &str = "quorum.db.initialized";
/// How long a writer waits for another writer's transaction (the CLI and a controller).
const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Pause between attempts to initialise a file another process is initialising.
const INIT_RETRY_MS: u64 = 20;
/// Schema version this build reads and writes. Older versions are migrated on open:
/// 1 (events without the replica that wrote them) and 2 (events without their step's
/// outcome; a refused or failed step was written as the kind `refused` or `error`).
const SCHEMA_VERSION: i64 = 3;
/// Events kept per control plane; older ones are pruned on insert.
const EVENTS_KEPT_PER_CONTROL_PLANE: i64 = 10_000;
/// Addresses per /24 used for machines: .2 to .251 (leave .0, .1, and the top free).
const HOSTS_PER_BLOCK: u64 = 250;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state store {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot create the state directory {path}: {source}")]
    Directory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A command that only reads found no home (nothing was created there).
    #[error("no quorum home at {home} (nothing was created there; `quorum create NAME` makes one, or pass --home DIR or set QUORUM_HOME to the one you meant)")]
    NoHome { home: PathBuf },
    #[error("state store {location} is corrupt: {detail}. quorum did not change it; restore it from a backup or move it aside")]
    Corrupt { location: String, detail: String },
    #[error("state store {location} has schema version {found}, written by a newer quorum; this one reads versions up to {reads}. Use a quorum at least as new (quorum did not change the file)")]
    NewerSchema {
        location: String,
        found: String,
        reads: i64,
    },
    #[error("state store {location}: {detail}")]
    Etcd { location: String, detail: String },
    /// No member of the management etcd served a call (the detail says what each said).
    #[error("state store {location}: cannot {op}: {detail}")]
    Unavailable {
        location: String,
        op: &'static str,
        detail: String,
    },
    #[error("state store {location}: no answer within {timeout_ms} ms to {op}")]
    Timeout {
        location: String,
        op: &'static str,
        timeout_ms: u64,
    },
    #[error("state store {location}: {what} kept changing under this write ({attempts} attempts); try again")]
    Conflict {
        location: String,
        what: String,
        attempts: u32,
    },
    /// The write was guarded by a leadership token that is no longer current: another
    /// replica leads now. Nothing was written.
    #[error("this controller no longer leads (its leadership token {token} is stale): the write was refused and nothing changed")]
    Fenced { token: FenceToken },
    /// A side effect was about to be made by a replica that does not lead.
    #[error("this controller does not lead the controllers of this store (it has not won the leadership, or gave it up): it must not act")]
    NotLeading,
    /// Its own lease deadline is close or past, renewals unanswered: no step until one is.
    #[error("this controller's leadership lease is confirmed for {left_ms} ms more, less than the {margin_ms} ms margin a step needs (its renewals are not answered yet)")]
    LeaseEnding { left_ms: i64, margin_ms: u64 },
    /// The store said the leader's lease is gone: another replica may lead.
    #[error("this controller's leadership lease is gone from the store (leadership token {token}): it no longer leads")]
    LeaseLost { token: FenceToken },
    #[error("{what} {} has mode {mode:o}: other users can read quorum's state; quorum refuses to use it until you run `chmod {want:o} {}`", path.display(), path.display())]
    NotPrivate {
        what: &'static str,
        path: PathBuf,
        mode: u32,
        want: u32,
    },
    // User input is shown with `{:?}`: a name with a newline or a control character
    // stays on one line and visible.
    #[error("control plane {0:?} does not exist (see `quorum list`)")]
    NotFound(String),
    #[error("{0} has deletion protection on: nothing was deleted. Turn it off first (`quorum protect {0} --off`, or deletionProtection: false in its manifest)")]
    DeletionProtected(String),
    #[error("control plane {0:?} already exists: change it with `quorum apply`, `quorum scale` or `quorum upgrade`, or remove it with `quorum delete {0}`")]
    AlreadyExists(String),
    #[error("snapshot {id:?} of control plane {cp:?} is recorded already (an id is written once)")]
    SnapshotRecorded { cp: String, id: String },
    #[error(
        "snapshot {id:?} of control plane {cp:?} is not recorded (see `quorum snapshots {cp}`)"
    )]
    SnapshotNotFound { cp: String, id: String },
    #[error("machine {machine:?} of control plane {cp:?} does not exist")]
    MachineNotFound { cp: String, machine: String },
    #[error(
        "control plane {0:?} uses TLS but no certificate authority was given to store with it"
    )]
    MissingCa(String),
    #[error("no free loopback address left in {0}.0.0/16 for a new machine; use a fresh state directory or set QUORUM_SUBNET")]
    AddressesExhausted(String),
    /// `QUORUM_SUBNET` does not name a subnet; nothing was stored.
    #[error("QUORUM_SUBNET {0:?} is not a loopback subnet A.B (as in 127.A.B.x; A from 1 to 255, B from 0 to 255: 42.0, say); nothing was stored")]
    BadSubnetVariable(String),
    /// A secret could not be sealed or opened (no key file, another key file, a sealed
    /// value moved or damaged); the message says what to do. Nothing was changed.
    #[error("secrets: {0}")]
    Secrets(String),
    /// Sharding cannot go ahead as asked (another shard count in force, or a store that
    /// cannot shard); the message says what to do.
    #[error("{0}")]
    Sharding(String),
}

impl StoreError {
    /// Sharding asked of the embedded store (which has exactly one controller).
    pub fn embedded_cannot_shard() -> StoreError {
        StoreError::Sharding(EMBEDDED_CANNOT_SHARD.to_string())
    }

    /// This replica no longer leads (or may not act as leader): it must step down.
    pub fn lost_leadership(&self) -> bool {
        matches!(
            self,
            StoreError::Fenced { .. } | StoreError::LeaseLost { .. }
        )
    }

    /// No serving store, or no confirmed lease: act on nothing, try again (no step-down).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. }
                | StoreError::Timeout { .. }
                | StoreError::LeaseEnding { .. }
        )
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A control plane's certificate authority, as stored (PEM). The key never leaves the
/// store except to sign; `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCa {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for StoredCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredCa")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The controller's last published view of a control plane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PublishedStatus {
    pub updated_at_ms: i64,
    pub controller: String,
    pub status: serde_json::Value,
}

/// Who leads the controllers of a store, as recorded in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderInfo {
    pub identity: String,
    /// Milliseconds since the Unix epoch when it took the lead.
    pub since_ms: i64,
    /// The leadership token (etcd: the leader key's create revision); writes are fenced
    /// with it.
    pub token: FenceToken,
}

/// The answer to one attempt to lead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Campaign {
    /// This replica leads, with this token, until its lease deadline.
    Leading { token: FenceToken },
    /// Another replica leads (or the key was just taken): wait and try again.
    Standby { leader: Option<LeaderInfo> },
}

/// quorum's durable state, whatever holds it: the embedded SQLite file or a management
/// etcd cluster. Both backends behave the same: every write is one atomic step, a
/// write never silently overwrites another writer's (etcd: compare on the revision
/// read; SQLite: one immediate transaction), and a record that does not parse is
/// corruption, never skipped.
pub trait StateStore: Send {
    /// Where the state lives, for messages (a path or `etcd://...`).
    fn location(&self) -> String;

    /// Checks the backend's integrity (SQLite: a full page check).
    fn check_integrity(&self) -> Result<()>;

    fn setting(&self, key: &str) -> Result<Option<String>>;
    /// Sets a setting unless it is already set; returns the value in force.
    fn setting_or_init(&self, key: &str, value: &str) -> Result<String>;
    /// Changes a setting from `expected` to `value` in one compare-and-swap; false when
    /// it held something else (nothing changed).
    fn replace_setting(&self, key: &str, expected: &str, value: &str) -> Result<bool>;
    /// Removes a setting that holds `expected`, in one compare-and-delete; false when it
    /// held something else (nothing changed). Already absent: true (the end sought).
    fn remove_setting(&self, key: &str, expected: &str) -> Result<bool>;
    /// The settings whose keys begin with `prefix`, by key (host records: `host/`).
    fn settings_under(&self, prefix: &str) -> Result<Vec<(String, String)>>;

    /// Records a new control plane. The history of an earlier one of the same name is
    /// dropped in the same step, so it never shows up as the new one's. A control plane
    /// that uses TLS is stored with its certificate authority, in the same step, so one
    /// never exists without the other.
    fn create_control_plane(
        &mut self,
        cp: &ControlPlane,
        ca: Option<&StoredCa>,
        now_ms: i64,
    ) -> Result<()>;
    /// The certificate authority of a control plane; `None` for a plaintext one. A TLS
    /// control plane without one is corruption.
    fn certificate_authority(&self, cp: &ControlPlane) -> Result<Option<StoredCa>>;

    /// Every control plane's CA key as stored (sealed, or plaintext PEM in a state from
    /// before secrets were sealed), by control plane. `Store` seals and opens them.
    fn ca_keys(&self) -> Result<Vec<(String, String)>>;
    /// Replaces CA keys as stored, each only if it still holds what was read:
    /// `(control plane, stored now, new)`. One transaction in the embedded store; in etcd
    /// as few as its transaction limit allows, each record compared. Returns how many
    /// were replaced (a record changed meanwhile is left as it is).
    fn replace_ca_keys(&mut self, changes: &[(String, String, String)]) -> Result<usize>;

    /// Records that a controller is alive (fenced like every write of a leader).
    fn controller_heartbeat(&self, beat: &Heartbeat) -> Result<()>;
    /// The last controller heartbeat, if a controller has beaten and not stopped since.
    fn last_controller_heartbeat(&self) -> Result<Option<Heartbeat>>;
    /// A handle that records heartbeats from another thread, with this store's current
    /// fence: the controller beats from a thread of its own, so a long step never makes
    /// it look dead. Take a new one after every change of leadership (a writer taken
    /// while leading is refused as `Fenced` once the leadership is gone).
    fn heartbeat_writer(&self) -> Result<Box<dyn HeartbeatWriter>>;
    /// A controller that stops cleanly withdraws its heartbeat (only its own), so
    /// readers know at once that none runs, instead of after `CONTROLLER_STALE_MS`.
    fn controller_stopped(&self, identity: &str) -> Result<()>;

    fn control_plane(&self, name: &str) -> Result<Option<ControlPlane>>;
    fn control_planes(&self) -> Result<Vec<ControlPlane>>;
    /// When a control plane was created (the `now_ms` given to `create_control_plane`);
    /// `None` when it does not exist, or for an etcd record written before creation
    /// times were kept.
    fn created_at_ms(&self, name: &str) -> Result<Option<i64>>;
    /// Replaces the spec of an existing control plane.
    fn update_spec(&mut self, name: &str, spec: &ControlPlaneSpec) -> Result<()>;
    /// Replaces the spec only if its version is still `expected` (the one the caller
    /// read; `ControlPlane::spec_version`), and moves the version on by one, in one
    /// compare-and-swap write. `false`: someone changed the spec since, and nothing was
    /// written (read it again and decide again).
    /// The chained upgrade's road is written with it (`None`: none).
    fn replace_spec(
        &mut self,
        name: &str,
        expected: u64,
        spec: &ControlPlaneSpec,
        road: Option<&quorum_core::chain::Road>,
    ) -> Result<bool>;
    /// A chained upgrade's next link (`quorum_core::chain`): only while the spec's
    /// version is `from` and the road's next link is `to`, the spec's version becomes
    /// `to` (its spec version moves on) and the road drops it, recording `now_unix_s`
    /// as the link's beginning, in one write. False, nothing changed, otherwise (taken
    /// already, or the person changed the spec since).
    fn take_next_link(
        &mut self,
        name: &str,
        from: Version,
        to: Version,
        now_unix_s: i64,
    ) -> Result<bool>;
    /// Records the intent to tear the control plane down; refused
    /// (`StoreError::DeletionProtected`, nothing written) while its spec has
    /// `deletion_protection`, checked in the same write. Marked already is success.
    fn mark_control_plane_deleting(&mut self, name: &str) -> Result<()>;
    /// Records a rebuild (a confirmed restore or recovery), its next phase, or (`None`)
    /// its end.
    fn set_rebuild(&mut self, name: &str, rebuild: Option<&Rebuild>) -> Result<()>;
    /// A CA rotation's new CA as stored (`None` when none is stored).
    fn next_certificate_authority(&self, name: &str) -> Result<Option<StoredCa>>;
    /// Begins a CA rotation: the new CA (its key sealed for `<name>/next`) and the
    /// rotation's record, in one step. False, with nothing changed, when the control
    /// plane records a rotation already.
    fn begin_ca_rotation(
        &mut self,
        name: &str,
        next: &StoredCa,
        rotation: &CaRotation,
    ) -> Result<bool>;
    /// Records a CA rotation's next phase: only while the rotation recorded is the one
    /// to `rotation.to` (false, nothing changed, otherwise).
    fn set_ca_rotation(&mut self, name: &str, rotation: &CaRotation) -> Result<bool>;
    /// Ends the rotation to `generation`: `ca` (the new CA, its key sealed for the CA's
    /// own record) becomes the control plane's CA, the new CA's record goes, and the
    /// control plane records generation `generation` and no rotation, in one step.
    /// Already finished is success (false: nothing changed).
    fn finish_ca_rotation(&mut self, name: &str, generation: u32, ca: &StoredCa) -> Result<bool>;
    /// Forgets a control plane, its machines, its CA and its published status (its
    /// events stay until a control plane of the same name is created again).
    fn forget_control_plane(&mut self, name: &str) -> Result<()>;

    /// The machines of a control plane, by serial.
    fn machines(&self, cp: &str) -> Result<Vec<Machine>>;
    /// Records a new machine: the next serial of the control plane and the next free
    /// loopback address of this state (`is_free` says whether an address can be used,
    /// for example because nothing listens on it). Addresses are never reused.
    fn allocate_machine(
        &mut self,
        cp: &str,
        bootstrap: bool,
        version: Version,
        certificates_not_after_unix_s: Option<i64>,
        remediation: Option<Remediation>,
        is_free: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Result<Machine> {
        self.allocate_machine_at(
            cp,
            bootstrap,
            version,
            certificates_not_after_unix_s,
            remediation,
            None,
            is_free,
        )
    }
    /// `allocate_machine`, on a host when `at` says which (the `hosts` provider: the
    /// host's address and the machine's ports there; no loopback address is taken).
    #[allow(clippy::too_many_arguments)]
    fn allocate_machine_at(
        &mut self,
        cp: &str,
        bootstrap: bool,
        version: Version,
        certificates_not_after_unix_s: Option<i64>,
        remediation: Option<Remediation>,
        at: Option<&Placed>,
        is_free: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Result<Machine>;
    /// Records that a machine is leaving (idempotent), with the remediation it is
    /// leaving for, if any (kept on the record so its replacement inherits the slot's
    /// retry count even if the process crashes in between).
    fn mark_machine_deleting(
        &mut self,
        cp: &str,
        machine: &str,
        remediation: Option<&Remediation>,
    ) -> Result<()> {
        let what = "mark a machine leaving";
        self.update_machine(cp, machine, what, &|m| m.mark_deleting(remediation))
    }
    /// Removes a machine record (idempotent: an absent record is success).
    fn delete_machine(&mut self, cp: &str, machine: &str) -> Result<()>;
    /// Changes a machine record in one compare-and-swap write: `change` edits the record
    /// read and returns whether it changed anything (nothing to change is success
    /// without a write, so a repeated step is idempotent). `what` names the change in
    /// errors ("record an in-place phase").
    fn update_machine(
        &mut self,
        cp: &str,
        machine: &str,
        what: &'static str,
        change: &dyn Fn(&mut Machine) -> bool,
    ) -> Result<()>;

    fn record_event(&self, cp: &str, at_ms: i64, e: &NewEvent<'_>) -> Result<i64>;
    /// Events of a control plane with an id above `after_id`, oldest first, at most `limit`.
    fn events_after(&self, cp: &str, after_id: i64, limit: u32) -> Result<Vec<Event>>;
    /// The id of the newest event of a control plane (0 when there is none).
    fn last_event_id(&self, cp: &str) -> Result<i64>;

    fn publish_status(&self, cp: &str, status: &PublishedStatus) -> Result<()>;
    fn published_status(&self, cp: &str) -> Result<Option<PublishedStatus>>;

    /// Records a snapshot once its file is complete (`quorum_backup::take`). An id is
    /// written once: the same id again is refused. Records outlive their control
    /// plane's deletion, as the files do: a deleted control plane can be restored.
    fn record_snapshot(&self, rec: &SnapshotRecord) -> Result<()>;
    /// Records the outcome of a test restore of a recorded snapshot (the last one is
    /// kept; a newer one replaces it). A snapshot not recorded is an error.
    fn record_verification(&self, cp: &str, id: &str, v: &Verification) -> Result<()> {
        let what = "record a snapshot's verification";
        self.update_snapshot(cp, id, what, &|r| {
            r.verification = Some(v.clone());
            true
        })
    }
    /// Changes a snapshot record in one compare-and-swap write: `change` edits the
    /// record read and says whether it changed anything (nothing is success without a
    /// write). `what` names the change in errors. A snapshot not recorded is an error.
    fn update_snapshot(
        &self,
        cp: &str,
        id: &str,
        what: &'static str,
        change: &dyn Fn(&mut SnapshotRecord) -> bool,
    ) -> Result<()>;
    /// The names that have snapshot records, by name: control planes that exist and
    /// those deleted (their snapshots outlive them).
    fn snapshotted_control_planes(&self) -> Result<Vec<String>>;
    /// Forgets a snapshot record (after its file was removed). A record not there is
    /// success: the removal is retried after a crash.
    fn delete_snapshot(&self, cp: &str, id: &str) -> Result<()>;
    /// The snapshots recorded for a control plane, oldest first. A record that does not
    /// match its id or its control plane is reported as corrupt.
    fn snapshots(&self, cp: &str) -> Result<Vec<SnapshotRecord>>;

    /// A number that changes whenever a control plane's record changes (embedded:
    /// whenever anyone commits a write): a cheap way for the controller to notice the
    /// CLI created, changed or deleted a control plane.
    fn data_version(&self) -> Result<i64>;

    // ---- leadership among controller replicas

    /// Puts this connection's leadership under `scope` (`shard/3`, `replica/web-1-42`):
    /// its leader key, its fence and its heartbeat become `<scope>/leader` and
    /// `<scope>/heartbeat`, so one store holds many independent leaderships, each with
    /// its own lease. Only before the first campaign. The embedded store has one
    /// controller and no scopes.
    fn set_scope(&mut self, scope: &str) -> Result<()> {
        let _ = scope;
        Err(StoreError::embedded_cannot_shard())
    }

    /// Agrees with every other replica of this store on the shard count (1: not
    /// sharded). The count in force is a setting that changes only while no replica
    /// leads anything (no leader key of any shard, nor the unsharded one, exists), in
    /// the same transaction that checks it; every campaign of this connection then
    /// compares it, so replicas that lead at the same time agree on the count. Another
    /// count in force is `StoreError::Sharding`, which says what to do.
    fn agree_shards(&mut self, count: u32) -> Result<()> {
        if count == 1 {
            Ok(())
        } else {
            Err(StoreError::embedded_cannot_shard())
        }
    }

    /// The leaders of the scopes under `prefix` (`shard/`, `replica/`): each scope
    /// (`shard/3`) and who holds it, by scope (none for the embedded store).
    fn scoped_leaders(&self, prefix: &str) -> Result<Vec<(String, LeaderInfo)>> {
        let _ = prefix;
        Ok(Vec::new())
    }

    /// Who leads the controller that acts on control plane `cp` (its shard's leader
    /// with a sharded fleet), and that controller's last heartbeat.
    fn controller_of(&self, cp: &str) -> Result<(Option<LeaderInfo>, Option<Heartbeat>)> {
        let _ = cp;
        Ok((self.leader()?, self.last_controller_heartbeat()?))
    }

    /// One attempt to lead the controllers of this store, with a lease of `ttl_ms`.
    /// The embedded store has one controller per state directory: the process holding
    /// its lock file leads, any other stands by (no lease, no fencing: one host).
    fn campaign(&mut self, identity: &str, ttl_ms: u64) -> Result<Campaign> {
        let _ = (identity, ttl_ms);
        Ok(Campaign::Leading {
            token: FenceToken::EMBEDDED,
        })
    }

    /// Before a side effect on a managed cluster: fails unless this replica still leads
    /// with at least `margin_ms` of its lease left (checked locally), then confirms the
    /// token with a fenced no-op write that the store refuses if another replica leads.
    /// `None` skips the local deadline (only tests do that, to exercise the fence).
    fn ensure_leading(&self, margin_ms: Option<u64>) -> Result<()> {
        let _ = margin_ms;
        Ok(())
    }

    /// How long this replica's lease lasts yet, by its own clock (negative: over or
    /// lost); `None` when there is no lease (the embedded store).
    fn lease_left_ms(&self) -> Option<i64> {
        None
    }

    /// The store said this replica's lease is gone (it must step down).
    fn lease_lost(&self) -> bool {
        false
    }

    /// Each member of a distributed store (none for the embedded one), as requests and
    /// background probes found it, or as probed now (`probe`: for one-shot readers).
    fn endpoint_health(&self, probe: bool) -> Vec<EndpointHealth> {
        let _ = probe;
        Vec::new()
    }

    /// For failure tests only: ends the lease in the store at once while this replica
    /// keeps its token and deadline, as when a renewal is lost and the lease expires
    /// before the replica notices (the situation of quorum's origin bug report).
    fn release_lease_keeping_token(&self) -> Result<()> {
        Ok(())
    }

    /// Gives up leadership (stops renewing, releases the lease, drops the token).
    fn step_down(&mut self) {}

    /// Who leads, as recorded (`None` for the embedded store, or when no one does).
    fn leader(&self) -> Result<Option<LeaderInfo>> {
        Ok(None)
    }

    // ---- provided

    fn get_control_plane(&self, name: &str) -> Result<ControlPlane> {
        self.control_plane(name)?
            .ok_or_else(|| StoreError::NotFound(name.to_string()))
    }

    fn machine(&self, cp: &str, machine: &str) -> Result<Machine> {
        self.machines(cp)?
            .into_iter()
            .find(|m| m.name == machine)
            .ok_or_else(|| StoreError::MachineNotFound {
                cp: cp.to_string(),
                machine: machine.to_string(),
            })
    }

    /// The loopback subnet `A.B` (as in 127.A.B.x) this state allocates from, chosen
    /// once. `QUORUM_SUBNET` (for example `42.0`) fixes it before first use; otherwise
    /// a random one away from 127.0.x.x is picked.
    fn subnet(&self) -> Result<(u8, u8)> {
        let wanted = subnet_wanted(std::env::var("QUORUM_SUBNET").ok())?;
        let fallback = || {
            // Process id and clock mixed: distinct state directories on one machine get
            // distinct subnets with high probability; allocation also skips busy addresses.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let x = (std::process::id() ^ t).wrapping_mul(2_654_435_761);
            format!("{}.{}", 16 + (x >> 24) % 200, (x >> 8) & 0xf0)
        };
        let value = self.setting_or_init("subnet", &wanted.unwrap_or_else(fallback))?;
        parse_subnet(&value).ok_or_else(|| StoreError::Corrupt {
            location: self.location(),
            detail: format!("bad subnet setting {value:?}"),
        })
    }
}

/// Where the state lives: the embedded file in the state directory, or a management
/// etcd cluster (`etcd://host:port,host:port`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum StoreLocation {
    #[default]
    Embedded,
    Etcd(EtcdLocation),
}

impl StoreLocation {
    /// Parses `--store`: empty or `embedded` for the state file, `etcd://...` for a
    /// management etcd. `tls` is the client certificate for an etcd that wants one.
    pub fn parse(s: &str, tls: Option<EtcdTls>) -> Result<StoreLocation, String> {
        let s = s.trim();
        if s.is_empty() || s == "embedded" {
            if tls.is_some() {
                return Err(
                    "--store-ca/--store-cert/--store-key apply only to --store etcd://...".into(),
                );
            }
            return Ok(StoreLocation::Embedded);
        }
        EtcdLocation::parse(s, tls).map(StoreLocation::Etcd)
    }
}

/// Why the embedded store refuses sharding.
const EMBEDDED_CANNOT_SHARD: &str = "sharding the controllers needs a management etcd: run \
    every replica with --store etcd://HOST:PORT,... (the embedded state file has exactly \
    one controller, the process holding its lock)";

/// The setting that holds the shard count in force (`StateStore::agree_shards`).
pub const SHARDS_SETTING: &str = "controller-shards";

/// The store, whichever backend holds it. Derefs to [`StateStore`], but seals every
/// secret before a backend stores it and opens it after a backend read it
/// (`secrets.rs`): `create_control_plane` and `certificate_authority` here are the ones
/// callers reach.
pub struct Store {
    inner: Box<dyn StateStore>,
    keys: Box<dyn secrets::KeyProvider>,
}

impl Store {
    /// Opens (creating if needed) the embedded store in `home`, owner-only, with the
    /// default key file (`secrets::KeyFile::resolve`).
    pub fn open(home: &Path) -> Result<Store> {
        Store::open_keyed(home, None)
    }

    /// `open`, with the key file `key_file` (`--secrets-key-file`).
    pub fn open_keyed(home: &Path, key_file: Option<&Path>) -> Result<Store> {
        Store::ready(
            Box::new(SqliteStore::open(home)?),
            Box::new(secrets::KeyFile::resolve(home, key_file)),
        )
    }

    /// A store of `inner` with `keys`, its plaintext secrets sealed (a state from before
    /// quorum sealed them is sealed at its first open, in one transaction).
    fn ready(inner: Box<dyn StateStore>, keys: Box<dyn secrets::KeyProvider>) -> Result<Store> {
        let mut s = Store { inner, keys };
        s.seal_plaintext_secrets()?;
        Ok(s)
    }

    /// Opens the embedded store in `home` only if it exists: for commands that only
    /// read, which must not leave a new home behind (`StoreError::NoHome`). A home that
    /// held a state and lost it is still reported as corrupt.
    pub fn open_existing(home: &Path) -> Result<Store> {
        Store::open_existing_keyed(home, None)
    }

    /// `open_existing`, with the key file `key_file`.
    pub fn open_existing_keyed(home: &Path, key_file: Option<&Path>) -> Result<Store> {
        let held_state = home.join(STATE_FILE).exists() || home.join(INITIALIZED_MARKER).exists();
        if !held_state {
            return Err(StoreError::NoHome {
                home: home.to_path_buf(),
            });
        }
        Store::open_keyed(home, key_file)
    }

    /// `connect`, for commands that only read: the embedded store must already exist.
    pub fn connect_existing(location: &StoreLocation, home: &Path) -> Result<Store> {
        Store::connect_existing_keyed(location, home, None)
    }

    /// `connect_existing`, with the key file `key_file`.
    pub fn connect_existing_keyed(
        location: &StoreLocation,
        home: &Path,
        key_file: Option<&Path>,
    ) -> Result<Store> {
        match location {
            StoreLocation::Embedded => Store::open_existing_keyed(home, key_file),
            StoreLocation::Etcd(_) => Store::connect_keyed(location, home, key_file),
        }
    }

    /// Opens the store at `location` (the embedded one lives in `home`), with the
    /// default key file.
    pub fn connect(location: &StoreLocation, home: &Path) -> Result<Store> {
        Store::connect_keyed(location, home, None)
    }

    /// `connect`, with the key file `key_file` (`--secrets-key-file`; default: see
    /// `secrets::KeyFile::resolve`).
    pub fn connect_keyed(
        location: &StoreLocation,
        home: &Path,
        key_file: Option<&Path>,
    ) -> Result<Store> {
        match location {
            StoreLocation::Embedded => Store::open_keyed(home, key_file),
            StoreLocation::Etcd(l) => Store::ready(
                Box::new(EtcdStore::connect(l)?),
                Box::new(secrets::KeyFile::resolve(home, key_file)),
            ),
        }
    }
}

impl std::ops::Deref for Store {
    type Target = dyn StateStore;
    fn deref(&self) -> &Self::Target {
        self.inner.as_ref()
    }
}

impl std::ops::DerefMut for Store {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.inner.as_mut()
    }
}

// Milliseconds since the Unix epoch (for records only; no decision reads it).
use quorum_clock::now_ms;

fn to_json<T: Serialize>(v: &T) -> String {
    // Serializing these plain data types cannot fail: no maps with non-string keys, no
    // custom serializers that error.
    serde_json::to_string(v).expect("quorum's records serialize to JSON")
}

/// `QUORUM_SUBNET`, checked before it is stored: a bad value would be kept, and every
/// later allocation would call the store corrupt.
fn subnet_wanted(value: Option<String>) -> Result<Option<String>> {
    match value {
        Some(v) if parse_subnet(&v).is_none() => Err(StoreError::BadSubnetVariable(v)),
        v => Ok(v),
    }
}

fn parse_subnet(s: &str) -> Option<(u8, u8)> {
    let (a, b) = s.split_once('.')?;
    let a: u8 = a.parse().ok()?;
    let b: u8 = b.parse().ok()?;
    // 127.0.x.x is left alone: 127.0.0.1 is where system services (a system etcd) live.
    (a != 0).then_some((a, b))
}

/// A machine's place on a host (`StateStore::allocate_machine_at`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub address: Ipv4Addr,
    pub placement: quorum_core::Placement,
}

/// The address of a new machine of `cp` (both backends): on a host, the host's; a
/// local one takes the first of the control plane's client addresses no machine holds
/// (`quorum_core::reach`), which `cp.client_addresses` records; a fresh address is the
/// first of `subnet` from `*next_addr` on that `is_free` accepts, and `*next_addr` moves
/// past it, so a fresh address was never used by another control plane.
fn choose_address(
    cp: &mut ControlPlane,
    held: &[Machine],
    subnet: (u8, u8),
    next_addr: &mut u64,
    at: Option<&Placed>,
    is_free: &dyn Fn(Ipv4Addr) -> bool,
) -> Result<Ipv4Addr> {
    if let Some(p) = at {
        return Ok(p.address);
    }
    let held: Vec<SocketAddrV4> = held.iter().map(Machine::client_address).collect();
    let mut exhausted = false;
    let mut fresh = || loop {
        let Some(a) = address_at(subnet, *next_addr) else {
            exhausted = true;
            return None;
        };
        *next_addr += 1;
        if is_free(a) {
            return Some(SocketAddrV4::new(a, CLIENT_PORT));
        }
    };
    let usable = |a: SocketAddrV4| is_free(*a.ip());
    let taken = reach::take(
        &cp.client_addresses,
        &held,
        cp.spec.replicas,
        &usable,
        &mut fresh,
    );
    match taken {
        Some(t) => {
            cp.client_addresses = t.addresses;
            Ok(*t.address.ip())
        }
        None => {
            debug_assert!(exhausted, "take fails only when no fresh address is left");
            Err(StoreError::AddressesExhausted(format!("127.{}", subnet.0)))
        }
    }
}

/// A new machine record (both backends): serial `serial` of control plane `cp`, at
/// `address` (`choose_address`).
#[allow(clippy::too_many_arguments)]
fn new_machine(
    cp: &str,
    serial: u64,
    address: Ipv4Addr,
    at: Option<&Placed>,
    version: Version,
    bootstrap: bool,
    certificates_not_after_unix_s: Option<i64>,
    remediation: Option<Remediation>,
    ca_step: Option<CaStep>,
) -> Result<Machine> {
    Ok(Machine {
        requested: None,
        ca_step: ca_step.filter(|_| certificates_not_after_unix_s.is_some()),
        placement: at.map(|p| p.placement.clone()),
        name: format!("{cp}-{serial}"),
        serial,
        address,
        version,
        bootstrap,
        deleting: false,
        tls: certificates_not_after_unix_s.is_some(),
        certificates_not_after_unix_s,
        remediation,
        in_place: None,
    })
}

/// Checks a machine record read back from where it is filed (`key_name`, under control
/// plane `cp`): the name must be the one it is filed under, and `<cp>-<serial>`, so a
/// record filed under another control plane is corruption, never a machine of this one.
/// Returns what is wrong, for the backend's corruption error.
/// Marks `cp` deleting unless it is protected (both backends, inside their
/// read-modify-write of the record).
fn mark_deleting(cp: &mut ControlPlane) {
    if !cp.spec.deletion_protection {
        cp.deleting = true;
    }
}

/// After `mark_deleting` was written: a protected control plane not marked before is
/// refused.
fn deleting_or_protected(name: &str, now: Option<ControlPlane>) -> Result<()> {
    match now {
        None => Err(StoreError::NotFound(name.to_string())),
        Some(cp) if !cp.deleting => Err(StoreError::DeletionProtected(name.to_string())),
        Some(_) => Ok(()),
    }
}

/// A snapshot record read back under `cp` is one of `cp`'s, whole.
fn check_snapshot_filed(cp: &str, id: &str, r: &SnapshotRecord) -> Result<(), String> {
    if r.control_plane != cp || r.id != id {
        return Err(format!(
            "snapshot record '{id}' of '{cp}' holds '{}' of '{}'",
            r.id, r.control_plane
        ));
    }
    quorum_core::backup::check_record(r)
}

fn check_machine_filed(cp: &str, key_name: &str, m: &Machine) -> Result<(), String> {
    if m.name != key_name || m.name != format!("{cp}-{}", m.serial) {
        return Err(format!(
            "machine record {key_name:?} under control plane {cp:?} holds {:?} (serial {})",
            m.name, m.serial
        ));
    }
    Ok(())
}

/// The `n`th machine address of subnet `127.A.B`: 250 hosts per /24, moving up through
/// the third octet.
fn address_at((a, b): (u8, u8), n: u64) -> Option<Ipv4Addr> {
    let block = u64::from(b) + n / HOSTS_PER_BLOCK;
    if block > 255 {
        return None;
    }
    Some(Ipv4Addr::new(
        127,
        a,
        block as u8,
        (n % HOSTS_PER_BLOCK + 2) as u8,
    ))
}

/// Refuses a directory or file that group or others may read, write or enter: the state
/// holds everything about the control planes (and will hold their keys).
fn check_private(what: &'static str, path: &Path, want: u32) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|source| StoreError::Directory {
            path: path.to_path_buf(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(StoreError::NotPrivate {
                what,
                path: path.to_path_buf(),
                mode,
                want,
            });
        }
    }
    Ok(())
}

/// Creates the state file owner-only if it does not exist yet (before SQLite opens it,
/// so that it is never readable by others, not even for a moment); an existing file is
/// left as it is.
/// Creates `path` (0600) unless it exists. An existing file is never opened here: on
/// Linux, closing any descriptor of a file drops every POSIX lock this process holds on
/// it, SQLite's among them, and another process could then take the state file's WAL
/// for unused and delete it while this process's connections still write to it
/// (seen: the join service's store, opened beside the controller's, lost its writes).
fn create_private_file(path: &Path) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    let mut o = std::fs::OpenOptions::new();
    o.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
        .map(drop)
        .map_err(|source| StoreError::Directory {
            path: path.to_path_buf(),
            source,
        })
}

fn create_private_dir(dir: &Path) -> Result<()> {
    let err = |source| StoreError::Directory {
        path: dir.to_path_buf(),
        source,
    };
    if !dir.exists() {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            b.mode(0o700);
        }
        b.create(dir).map_err(err)?;
    }
    Ok(())
}

/// A private home inside a test's temporary directory (which may be 0755).
#[cfg(test)]
fn private(dir: &tempfile::TempDir) -> PathBuf {
    let home = dir.path().join("home");
    create_private_dir(&home).unwrap();
    home
}

#[cfg(test)]
mod tests;
