//! quorum-store: durable state in one SQLite file (WAL mode) under the state directory.
//!
//! Holds the control plane specs, the machine records (quorum's durable intent), the
//! event history, and the controller's last published status. WAL mode lets the CLI
//! read and write while a controller runs; every write is one transaction with
//! `synchronous=FULL`, so an acknowledged intent survives a crash or power loss.
//!
//! Architecture invariant: the store knows nothing of etcd or processes. It stores
//! `quorum-core` types as JSON and checks them on the way back in (a record that does
//! not parse is reported as corruption, never skipped).

use quorum_core::{ControlPlane, ControlPlaneSpec, Machine, Version};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file inside the state directory.
pub const STATE_FILE: &str = "quorum.db";
/// Written beside the state file once its schema exists: from then on an empty or
/// missing state file is a lost state, never a new one.
pub const INITIALIZED_MARKER: &str = "quorum.db.initialized";
/// How long a writer waits for another writer's transaction (the CLI and a controller).
const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Pause between attempts to initialise a file another process is initialising.
const INIT_RETRY_MS: u64 = 20;
/// Schema version this build reads and writes.
const SCHEMA_VERSION: i64 = 1;
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
    #[error("state store {path} is corrupt: {detail}. quorum did not change it; restore it from a backup or move it aside")]
    Corrupt { path: PathBuf, detail: String },
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
    #[error("control plane {0:?} already exists: change it with `quorum apply`, `quorum scale` or `quorum upgrade`, or remove it with `quorum delete {0}`")]
    AlreadyExists(String),
    #[error("machine {machine:?} of control plane {cp:?} does not exist")]
    MachineNotFound { cp: String, machine: String },
    #[error(
        "control plane {0:?} uses TLS but no certificate authority was given to store with it"
    )]
    MissingCa(String),
    #[error("no free loopback address left in {0}.0.0/16 for a new machine; use a fresh state directory or set QUORUM_SUBNET")]
    AddressesExhausted(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// One entry of a control plane's history: a step quorum took (or failed to take).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub id: i64,
    pub control_plane: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// An action kind (`add-learner`, ...) or `error`, `converged`.
    pub kind: String,
    pub machine: Option<String>,
    pub message: String,
    pub ok: bool,
    /// How long the controller had been waiting before this step (time from the
    /// observation that still said "wait" to this action), when it had been waiting.
    pub waited_ms: Option<i64>,
    /// How long the step took.
    pub took_ms: Option<i64>,
}

/// An event to append.
#[derive(Clone, Debug, Default)]
pub struct NewEvent<'a> {
    pub kind: &'a str,
    pub machine: Option<&'a str>,
    pub message: &'a str,
    pub ok: bool,
    pub waited_ms: Option<i64>,
    pub took_ms: Option<i64>,
}

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

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the store in `home`. The directory is created
    /// owner-only.
    pub fn open(home: &Path) -> Result<Store> {
        create_private_dir(home)?;
        check_private("state directory", home, 0o700)?;
        let path = home.join(STATE_FILE);
        let marker = home.join(INITIALIZED_MARKER);
        let initialized = marker.exists();
        if initialized && !path.exists() {
            return Err(StoreError::Corrupt {
                path,
                detail: "the state file is missing, but this directory held a state".into(),
            });
        }
        create_private_file(&path)?;
        check_private("state file", &path, 0o600)?;
        let sql = sql_error(&path);
        let conn = Connection::open(&path).map_err(sql)?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
            .map_err(sql)?;
        let store = Store { conn, path };
        if initialized && !store.has_schema()? {
            return Err(store
                .corrupt("the file is empty or lost its tables, but this directory held a state"));
        }
        // Two processes opening a new file at once (the CLI and a controller) contend for
        // the lock that switching to WAL and creating the schema need; SQLite does not
        // always wait on that one, so retry, bounded.
        let deadline = std::time::Instant::now() + Duration::from_millis(BUSY_TIMEOUT_MS);
        loop {
            match store.init() {
                Err(StoreError::Sqlite {
                    source: rusqlite::Error::SqliteFailure(e, _),
                    ..
                }) if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(INIT_RETRY_MS));
                }
                Err(e) => return Err(e),
                Ok(()) => break,
            }
        }
        store.check_consistency()?;
        if !initialized {
            create_private_file(&marker)?;
        }
        Ok(store)
    }

    /// Structural checks at open, so corruption is reported before anything acts on the
    /// state: SQLite's own page checks (`quick_check`, a full read; the state is small)
    /// and no machine record pointing at a control plane that does not exist.
    fn check_consistency(&self) -> Result<()> {
        let quick: String = self
            .conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if quick != "ok" {
            return Err(self.corrupt(quick));
        }
        let orphans: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM machines WHERE control_plane NOT IN (SELECT name FROM control_planes)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if orphans > 0 {
            return Err(self.corrupt(format!(
                "{orphans} machine records belong to no control plane"
            )));
        }
        let orphan_cas: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM certificate_authorities WHERE control_plane NOT IN (SELECT name FROM control_planes)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if orphan_cas > 0 {
            return Err(self.corrupt(format!(
                "{orphan_cas} certificate authorities belong to no control plane"
            )));
        }
        Ok(())
    }

    /// Whether the file holds quorum's schema (a truncated or emptied file does not).
    fn has_schema(&self) -> Result<bool> {
        self.conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n == 1)
            .map_err(|e| self.err(e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        match source {
            rusqlite::Error::SqliteFailure(e, _)
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
                ) =>
            {
                StoreError::Corrupt {
                    path: self.path.clone(),
                    detail: e.to_string(),
                }
            }
            source => StoreError::Sqlite {
                path: self.path.clone(),
                source,
            },
        }
    }

    fn corrupt(&self, detail: impl Into<String>) -> StoreError {
        // One line, whatever SQLite's report looks like.
        let detail: String = detail.into();
        StoreError::Corrupt {
            path: self.path.clone(),
            detail: detail.trim().replace('\n', "; "),
        }
    }

    fn init(&self) -> Result<()> {
        // journal_mode returns a row, so it is queried rather than executed.
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(self.corrupt(format!("cannot switch to WAL mode (got {mode})")));
        }
        self.conn
            .execute_batch(
                "PRAGMA synchronous=FULL;
                 PRAGMA foreign_keys=ON;
                 CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS control_planes (
                     name TEXT PRIMARY KEY,
                     doc TEXT NOT NULL,
                     next_serial INTEGER NOT NULL DEFAULT 1,
                     created_at_ms INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS machines (
                     control_plane TEXT NOT NULL REFERENCES control_planes(name) ON DELETE CASCADE,
                     name TEXT NOT NULL,
                     doc TEXT NOT NULL,
                     PRIMARY KEY (control_plane, name));
                 CREATE TABLE IF NOT EXISTS events (
                     id INTEGER PRIMARY KEY AUTOINCREMENT,
                     control_plane TEXT NOT NULL,
                     at_ms INTEGER NOT NULL,
                     kind TEXT NOT NULL,
                     machine TEXT,
                     message TEXT NOT NULL,
                     ok INTEGER NOT NULL,
                     waited_ms INTEGER,
                     took_ms INTEGER);
                 CREATE INDEX IF NOT EXISTS events_by_cp ON events(control_plane, id);
                 CREATE TABLE IF NOT EXISTS published (
                     control_plane TEXT PRIMARY KEY,
                     doc TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS certificate_authorities (
                     control_plane TEXT PRIMARY KEY REFERENCES control_planes(name) ON DELETE CASCADE,
                     cert_pem TEXT NOT NULL,
                     key_pem TEXT NOT NULL);",
            )
            .map_err(|e| self.err(e))?;
        let version: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key='schema'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.err(e))?;
        match version {
            None => {
                self.conn
                    .execute(
                        "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?1)",
                        params![SCHEMA_VERSION.to_string()],
                    )
                    .map_err(|e| self.err(e))?;
            }
            Some(v) if v == SCHEMA_VERSION.to_string() => {}
            Some(v) => {
                return Err(self.corrupt(format!(
                    "schema version {v}, this quorum reads version {SCHEMA_VERSION}"
                )))
            }
        }
        Ok(())
    }

    /// Checks the file's integrity (a full read of every page).
    pub fn check_integrity(&self) -> Result<()> {
        let res: String = self
            .conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if res != "ok" {
            return Err(self.corrupt(res));
        }
        Ok(())
    }

    // ---- settings

    pub fn setting(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                params![format!("setting.{key}")],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Sets a setting unless it is already set; returns the value in force.
    pub fn setting_or_init(&self, key: &str, value: &str) -> Result<String> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES (?1, ?2)",
                params![format!("setting.{key}"), value],
            )
            .map_err(|e| self.err(e))?;
        self.setting(key)?
            .ok_or_else(|| self.corrupt(format!("setting {key} vanished after it was written")))
    }

    // ---- control planes

    /// Records a new control plane. The history of an earlier one of the same name is
    /// dropped in the same transaction, so it never shows up as the new one's.
    /// A control plane that uses TLS is stored with its certificate authority, in the
    /// same transaction, so one never exists without the other.
    pub fn create_control_plane(
        &mut self,
        cp: &ControlPlane,
        ca: Option<&StoredCa>,
        now_ms: i64,
    ) -> Result<()> {
        if cp.spec.tls() && ca.is_none() {
            return Err(StoreError::MissingCa(cp.name.clone()));
        }
        let doc = to_json(cp);
        let path = self.path.clone();
        let sql = sql_error(&path);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let n = tx
            .execute(
                "INSERT OR IGNORE INTO control_planes(name, doc, created_at_ms) VALUES (?1, ?2, ?3)",
                params![cp.name, doc, now_ms],
            )
            .map_err(sql)?;
        if n == 0 {
            return Err(StoreError::AlreadyExists(cp.name.clone()));
        }
        tx.execute(
            "DELETE FROM events WHERE control_plane = ?1",
            params![cp.name],
        )
        .and_then(|_| match ca {
            Some(ca) => tx.execute(
                "INSERT OR REPLACE INTO certificate_authorities(control_plane, cert_pem, key_pem) VALUES (?1, ?2, ?3)",
                params![cp.name, ca.cert_pem, ca.key_pem],
            ),
            None => Ok(0),
        })
        .and_then(|_| tx.commit())
        .map_err(sql)
    }

    /// The certificate authority of a control plane; `None` for a plaintext one. A TLS
    /// control plane without one is corruption.
    pub fn certificate_authority(&self, cp: &ControlPlane) -> Result<Option<StoredCa>> {
        let ca = self
            .conn
            .query_row(
                "SELECT cert_pem, key_pem FROM certificate_authorities WHERE control_plane = ?1",
                params![cp.name],
                |r| {
                    Ok(StoredCa {
                        cert_pem: r.get(0)?,
                        key_pem: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))?;
        if cp.spec.tls() && ca.is_none() {
            return Err(self.corrupt(format!(
                "control plane {:?} uses TLS but its certificate authority is missing",
                cp.name
            )));
        }
        Ok(ca)
    }

    /// Records that a controller is alive (`identity`, at `now_ms`).
    pub fn controller_heartbeat(&self, identity: &str, now_ms: i64) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO meta(key, value) VALUES ('controller.heartbeat', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![format!("{now_ms} {identity}")],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The last controller heartbeat: (identity, at_ms).
    pub fn last_controller_heartbeat(&self) -> Result<Option<(String, i64)>> {
        let v: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'controller.heartbeat'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(v.and_then(|v| {
            let (at, who) = v.split_once(' ')?;
            Some((who.to_string(), at.parse().ok()?))
        }))
    }

    pub fn control_plane(&self, name: &str) -> Result<Option<ControlPlane>> {
        let doc: Option<String> = self
            .conn
            .query_row(
                "SELECT doc FROM control_planes WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        doc.map(|d| self.parse_cp(name, &d)).transpose()
    }

    pub fn get_control_plane(&self, name: &str) -> Result<ControlPlane> {
        self.control_plane(name)?
            .ok_or_else(|| StoreError::NotFound(name.to_string()))
    }

    pub fn control_planes(&self) -> Result<Vec<ControlPlane>> {
        let mut stmt = self
            .conn
            .prepare("SELECT name, doc FROM control_planes ORDER BY name")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (name, doc) = row.map_err(|e| self.err(e))?;
            out.push(self.parse_cp(&name, &doc)?);
        }
        Ok(out)
    }

    fn parse_cp(&self, name: &str, doc: &str) -> Result<ControlPlane> {
        let cp: ControlPlane = serde_json::from_str(doc)
            .map_err(|e| self.corrupt(format!("control plane '{name}': {e}")))?;
        if cp.name != name {
            return Err(self.corrupt(format!(
                "control plane row '{name}' holds a record named '{}'",
                cp.name
            )));
        }
        Ok(cp)
    }

    /// Replaces the spec of an existing control plane.
    pub fn update_spec(&mut self, name: &str, spec: &ControlPlaneSpec) -> Result<()> {
        self.modify_control_plane(name, |cp| cp.spec = spec.clone())
    }

    /// Records the intent to tear the control plane down.
    pub fn mark_control_plane_deleting(&mut self, name: &str) -> Result<()> {
        self.modify_control_plane(name, |cp| cp.deleting = true)
    }

    fn modify_control_plane(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut ControlPlane),
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| StoreError::Sqlite {
                path: self.path.clone(),
                source: e,
            })?;
        let doc: Option<String> = tx
            .query_row(
                "SELECT doc FROM control_planes WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| StoreError::Sqlite {
                path: self.path.clone(),
                source: e,
            })?;
        let Some(doc) = doc else {
            return Err(StoreError::NotFound(name.to_string()));
        };
        let mut cp: ControlPlane = serde_json::from_str(&doc).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            detail: format!("control plane '{name}': {e}"),
        })?;
        f(&mut cp);
        assert_eq!(
            cp.name, name,
            "a modification never renames a control plane"
        );
        tx.execute(
            "UPDATE control_planes SET doc = ?2 WHERE name = ?1",
            params![name, to_json(&cp)],
        )
        .and_then(|_| tx.commit())
        .map_err(|e| StoreError::Sqlite {
            path: self.path.clone(),
            source: e,
        })
    }

    /// Forgets a control plane, its machines and its published status (its events stay
    /// until a control plane of the same name is created again).
    pub fn forget_control_plane(&mut self, name: &str) -> Result<()> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| StoreError::Sqlite {
            path: path.clone(),
            source: e,
        })?;
        tx.execute(
            "DELETE FROM machines WHERE control_plane = ?1",
            params![name],
        )
        .and_then(|_| {
            tx.execute(
                "DELETE FROM published WHERE control_plane = ?1",
                params![name],
            )
        })
        .and_then(|_| {
            tx.execute(
                "DELETE FROM certificate_authorities WHERE control_plane = ?1",
                params![name],
            )
        })
        .and_then(|_| tx.execute("DELETE FROM control_planes WHERE name = ?1", params![name]))
        .and_then(|_| tx.commit())
        .map_err(|e| StoreError::Sqlite {
            path: self.path.clone(),
            source: e,
        })?;
        Ok(())
    }

    // ---- machines

    pub fn machines(&self, cp: &str) -> Result<Vec<Machine>> {
        let mut stmt = self
            .conn
            .prepare("SELECT name, doc FROM machines WHERE control_plane = ?1")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![cp], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (name, doc) = row.map_err(|e| self.err(e))?;
            let m: Machine = serde_json::from_str(&doc)
                .map_err(|e| self.corrupt(format!("machine '{name}' of '{cp}': {e}")))?;
            if m.name != name {
                return Err(self.corrupt(format!("machine row '{name}' holds '{}'", m.name)));
            }
            // Machine names are `<control plane>-<serial>`: a record filed under another
            // control plane is corruption, not a machine of that one.
            if m.name != format!("{cp}-{}", m.serial) {
                return Err(self.corrupt(format!(
                    "machine '{name}' (serial {}) is filed under control plane '{cp}'",
                    m.serial
                )));
            }
            out.push(m);
        }
        out.sort_by_key(|m| m.serial);
        Ok(out)
    }

    /// Records a new machine: the next serial of the control plane and the next free
    /// loopback address of this state directory (`is_free` says whether an address can
    /// be used, for example because nothing listens on it).
    pub fn allocate_machine(
        &mut self,
        cp: &str,
        bootstrap: bool,
        version: Version,
        certificates_not_after_unix_s: Option<i64>,
        is_free: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Result<Machine> {
        let subnet = self.subnet()?;
        let path = self.path.clone();
        let sql = sql_error(&path);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let serial: Option<i64> = tx
            .query_row(
                "SELECT next_serial FROM control_planes WHERE name = ?1",
                params![cp],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        let Some(serial) = serial else {
            return Err(StoreError::NotFound(cp.to_string()));
        };
        let mut next_addr: i64 = tx
            .query_row(
                "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'next_address'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?
            .unwrap_or(0);
        // Addresses are never reused within a state directory: a removed member's process
        // may linger for a moment, and a stale status from it must not be mistaken for
        // a new machine's.
        let address = loop {
            let Some(a) = address_at(subnet, next_addr as u64) else {
                return Err(StoreError::AddressesExhausted(format!("127.{}", subnet.0)));
            };
            next_addr += 1;
            if is_free(a) {
                break a;
            }
        };
        let machine = Machine {
            name: format!("{cp}-{serial}"),
            serial: serial as u64,
            address,
            version,
            bootstrap,
            deleting: false,
            tls: certificates_not_after_unix_s.is_some(),
            certificates_not_after_unix_s,
        };
        tx.execute(
            "INSERT INTO machines(control_plane, name, doc) VALUES (?1, ?2, ?3)",
            params![cp, machine.name, to_json(&machine)],
        )
        .and_then(|_| {
            tx.execute(
                "UPDATE control_planes SET next_serial = ?2 WHERE name = ?1",
                params![cp, serial + 1],
            )
        })
        .and_then(|_| {
            tx.execute(
                "INSERT INTO meta(key, value) VALUES ('next_address', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![next_addr.to_string()],
            )
        })
        .and_then(|_| tx.commit())
        .map_err(sql)?;
        Ok(machine)
    }

    /// Records that a machine is leaving (idempotent).
    pub fn mark_machine_deleting(&mut self, cp: &str, machine: &str) -> Result<()> {
        let mut m = self.machine(cp, machine)?;
        if m.deleting {
            return Ok(());
        }
        m.deleting = true;
        self.conn
            .execute(
                "UPDATE machines SET doc = ?3 WHERE control_plane = ?1 AND name = ?2",
                params![cp, machine, to_json(&m)],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn machine(&self, cp: &str, machine: &str) -> Result<Machine> {
        self.machines(cp)?
            .into_iter()
            .find(|m| m.name == machine)
            .ok_or_else(|| StoreError::MachineNotFound {
                cp: cp.to_string(),
                machine: machine.to_string(),
            })
    }

    /// Removes a machine record (idempotent: an absent record is success).
    pub fn delete_machine(&mut self, cp: &str, machine: &str) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM machines WHERE control_plane = ?1 AND name = ?2",
                params![cp, machine],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The loopback subnet `A.B` (as in 127.A.B.x) this state directory allocates from,
    /// chosen once. `QUORUM_SUBNET` (for example `42.0`) fixes it before first use;
    /// otherwise a random one away from 127.0.x.x is picked.
    pub fn subnet(&self) -> Result<(u8, u8)> {
        let wanted = std::env::var("QUORUM_SUBNET").ok();
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
        parse_subnet(&value).ok_or_else(|| self.corrupt(format!("bad subnet setting '{value}'")))
    }

    // ---- events

    pub fn record_event(&self, cp: &str, at_ms: i64, e: &NewEvent<'_>) -> Result<i64> {
        self.conn
            .execute(
                "INSERT INTO events(control_plane, at_ms, kind, machine, message, ok, waited_ms, took_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![cp, at_ms, e.kind, e.machine, e.message, e.ok, e.waited_ms, e.took_ms],
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

    /// Events of a control plane with an id above `after_id`, oldest first, at most `limit`.
    pub fn events_after(&self, cp: &str, after_id: i64, limit: u32) -> Result<Vec<Event>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, control_plane, at_ms, kind, machine, message, ok, waited_ms, took_ms
                 FROM events WHERE control_plane = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![cp, after_id, limit], |r| {
                Ok(Event {
                    id: r.get(0)?,
                    control_plane: r.get(1)?,
                    at_ms: r.get(2)?,
                    kind: r.get(3)?,
                    machine: r.get(4)?,
                    message: r.get(5)?,
                    ok: r.get(6)?,
                    waited_ms: r.get(7)?,
                    took_ms: r.get(8)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The id of the newest event of a control plane (0 when there is none).
    pub fn last_event_id(&self, cp: &str) -> Result<i64> {
        self.conn
            .query_row(
                "SELECT COALESCE(MAX(id), 0) FROM events WHERE control_plane = ?1",
                params![cp],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    // ---- published status

    pub fn publish_status(&self, cp: &str, status: &PublishedStatus) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO published(control_plane, doc) VALUES (?1, ?2)
                 ON CONFLICT(control_plane) DO UPDATE SET doc = excluded.doc",
                params![cp, to_json(status)],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    pub fn published_status(&self, cp: &str) -> Result<Option<PublishedStatus>> {
        let doc: Option<String> = self
            .conn
            .query_row(
                "SELECT doc FROM published WHERE control_plane = ?1",
                params![cp],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        doc.map(|d| {
            serde_json::from_str(&d)
                .map_err(|e| self.corrupt(format!("published status of '{cp}': {e}")))
        })
        .transpose()
    }

    /// A number that changes whenever any connection commits a write to the file: a
    /// cheap way for the controller to notice the CLI changed something.
    pub fn data_version(&self) -> Result<i64> {
        self.conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }
}

/// Maps SQLite errors of the file at `path` (for use while `self.conn` is borrowed).
fn sql_error(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + Copy + '_ {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

fn to_json<T: Serialize>(v: &T) -> String {
    // Serializing these plain data types cannot fail: no maps with non-string keys, no
    // custom serializers that error.
    serde_json::to_string(v).expect("quorum's records serialize to JSON")
}

fn parse_subnet(s: &str) -> Option<(u8, u8)> {
    let (a, b) = s.split_once('.')?;
    let a: u8 = a.parse().ok()?;
    let b: u8 = b.parse().ok()?;
    // 127.0.x.x is left alone: 127.0.0.1 is where system services (a system etcd) live.
    (a != 0).then_some((a, b))
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
fn create_private_file(path: &Path) -> Result<()> {
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
mod tests {
    use super::*;
    use quorum_core::RolloutStrategy;

    fn cp(name: &str) -> ControlPlane {
        ControlPlane {
            name: name.into(),
            spec: ControlPlaneSpec {
                replicas: 3,
                version: "3.4.23".parse().unwrap(),
                rollout: RolloutStrategy::default(),
                paused: false,
                haproxy: None,
                certificates: Default::default(),
                insecure_plaintext: true,
            },
            deleting: false,
        }
    }

    #[test]
    fn control_plane_lifecycle() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&private(&dir)).unwrap();
        s.create_control_plane(&cp("a"), None, 1).unwrap();
        assert!(matches!(
            s.create_control_plane(&cp("a"), None, 2),
            Err(StoreError::AlreadyExists(_))
        ));
        let mut spec = s.get_control_plane("a").unwrap().spec;
        spec.replicas = 5;
        s.update_spec("a", &spec).unwrap();
        assert_eq!(s.get_control_plane("a").unwrap().spec.replicas, 5);
        assert!(matches!(
            s.update_spec("b", &spec),
            Err(StoreError::NotFound(_))
        ));
        s.mark_control_plane_deleting("a").unwrap();
        assert!(s.get_control_plane("a").unwrap().deleting);
        s.forget_control_plane("a").unwrap();
        assert!(s.control_plane("a").unwrap().is_none());
    }

    #[test]
    fn machines_get_serials_and_distinct_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&private(&dir)).unwrap();
        s.create_control_plane(&cp("a"), None, 1).unwrap();
        s.create_control_plane(&cp("b"), None, 1).unwrap();
        let v = "3.4.23".parse().unwrap();
        let busy = Ipv4Addr::from(0);
        let m1 = s.allocate_machine("a", true, v, None, &|_| true).unwrap();
        // The next address is "busy": allocation skips it.
        let skip = address_at(s.subnet().unwrap(), 1).unwrap();
        let m2 = s
            .allocate_machine("a", true, v, None, &|a| a != skip && a != busy)
            .unwrap();
        let m3 = s.allocate_machine("b", true, v, None, &|_| true).unwrap();
        assert_eq!((m1.serial, m2.serial, m3.serial), (1, 2, 1));
        assert_eq!(m1.name, "a-1");
        assert_ne!(m2.address, skip);
        let addrs = [m1.address, m2.address, m3.address];
        assert!(addrs
            .iter()
            .all(|a| a.octets()[0] == 127 && a.octets()[1] != 0));
        assert_ne!(addrs[0], addrs[1]);
        assert_ne!(addrs[1], addrs[2]);
        s.mark_machine_deleting("a", "a-1").unwrap();
        s.mark_machine_deleting("a", "a-1").unwrap();
        assert!(s.machine("a", "a-1").unwrap().deleting);
        s.delete_machine("a", "a-1").unwrap();
        s.delete_machine("a", "a-1").unwrap();
        assert_eq!(s.machines("a").unwrap().len(), 1);
    }

    #[test]
    fn cli_and_controller_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Store::open(&private(&dir)).unwrap();
        let reader = Store::open(&private(&dir)).unwrap();
        let before = reader.data_version().unwrap();
        writer.create_control_plane(&cp("a"), None, 1).unwrap();
        assert_ne!(reader.data_version().unwrap(), before);
        assert_eq!(reader.control_planes().unwrap().len(), 1);
        let id = writer
            .record_event(
                "a",
                5,
                &NewEvent {
                    kind: "add-learner",
                    machine: Some("a-4"),
                    message: "m",
                    ok: true,
                    ..Default::default()
                },
            )
            .unwrap();
        let evs = reader.events_after("a", 0, 10).unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].id, id);
        assert_eq!(reader.last_event_id("a").unwrap(), id);
    }

    #[test]
    fn a_corrupt_record_is_reported_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&private(&dir)).unwrap();
        s.create_control_plane(&cp("a"), None, 1).unwrap();
        s.conn
            .execute(
                "UPDATE control_planes SET doc = '{\"name\": \"a\", \"spec\": 7}'",
                [],
            )
            .unwrap();
        let e = s.control_planes().unwrap_err();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("did not change it"));
    }

    #[test]
    fn a_file_that_is_not_a_database_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            private(&dir).join(STATE_FILE),
            b"this is not sqlite, just some bytes that are long enough to look like a header",
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            let f = private(&dir).join(STATE_FILE);
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let e = Store::open(&private(&dir)).err().expect("open must fail");
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    }

    #[test]
    fn an_emptied_or_missing_state_file_is_not_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let home = private(&dir);
        let mut s = Store::open(&home).unwrap();
        s.create_control_plane(&cp("a"), None, 1).unwrap();
        drop(s);
        let file = home.join(STATE_FILE);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(0)
            .unwrap();
        let e = Store::open(&home)
            .err()
            .expect("an emptied state is refused");
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 0, "left as found");
        std::fs::remove_file(&file).unwrap();
        let e = Store::open(&home)
            .err()
            .expect("a missing state is refused");
        assert!(e.to_string().contains("missing"), "{e}");
        assert!(!file.exists(), "nothing created in its place");
    }

    #[test]
    fn a_state_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let mut s = Store::open(&home).unwrap();
        s.create_control_plane(&cp("a"), None, 1).unwrap();
        drop(s);
        let chmod = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        chmod(&home, 0o755);
        let e = Store::open(&home).err().expect("a 0755 home is refused");
        assert!(
            matches!(e, StoreError::NotPrivate { mode: 0o755, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("chmod 700"), "{e}");
        chmod(&home, 0o700);
        chmod(&home.join(STATE_FILE), 0o644);
        let e = Store::open(&home)
            .err()
            .expect("a 0644 state file is refused");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        // Refusing changed nothing: fixed by hand, the state is all there.
        chmod(&home.join(STATE_FILE), 0o600);
        let s = Store::open(&home).unwrap();
        assert_eq!(s.control_planes().unwrap().len(), 1);
    }

    #[test]
    fn state_directory_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let _s = Store::open(&home).unwrap();
        let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let mode = std::fs::metadata(home.join(STATE_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }
}

#[cfg(test)]
mod concurrency_tests {
    use super::*;

    #[test]
    fn two_processes_opening_a_new_file_at_once_both_succeed() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let home = dir.path().join("home");
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let h = home.clone();
                    std::thread::spawn(move || Store::open(&h).map(|_| ()))
                })
                .collect();
            for h in handles {
                h.join().unwrap().unwrap();
            }
        }
    }
}
