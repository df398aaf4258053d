//! The embedded backend: one SQLite file (WAL mode) in the state directory.

use super::*;

mod events;
mod open;
mod snapshots;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::time::Duration;

/// The state file inside the state directory.
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// While this process is the home's controller: the lock file, held with
    /// `flock(LOCK_EX)`. The kernel releases it when the process ends, however it ends.
    controller_lock: Option<std::fs::File>,
}

/// Writes the home's heartbeat record.
fn write_heartbeat(conn: &Connection, beat: &Heartbeat) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('controller.heartbeat', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![beat.encode()],
    )
    .map(drop)
}

/// The controller's heartbeat thread's own connection to the state file.
struct SqliteHeartbeat {
    conn: Connection,
    path: PathBuf,
}

impl HeartbeatWriter for SqliteHeartbeat {
    fn beat(&mut self, beat: &Heartbeat) -> Result<()> {
        write_heartbeat(&self.conn, beat).map_err(sql_error(&self.path))
    }
}

/// Beside the state file: held by the one controller of a home.
pub const CONTROLLER_LOCK: &str = "controller.lock";

impl SqliteStore {
    /// One immediate transaction: `f` changes the control plane read and may write
    /// more in the same transaction; it returns whether anything is to change (false:
    /// nothing is written).
    fn change_control_plane(
        &mut self,
        name: &str,
        f: impl FnOnce(&rusqlite::Transaction<'_>, &mut ControlPlane) -> rusqlite::Result<bool>,
    ) -> Result<bool> {
        let path = self.path.clone();
        let sql = sql_error(&path);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let doc: Option<String> = tx
            .query_row(
                "SELECT doc FROM control_planes WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql_error(&path))?;
        let Some(doc) = doc else {
            return Err(StoreError::NotFound(name.to_string()));
        };
        let mut cp: ControlPlane = serde_json::from_str(&doc).map_err(|e| StoreError::Corrupt {
            location: path.display().to_string(),
            detail: format!("control plane '{name}': {e}"),
        })?;
        if !f(&tx, &mut cp).map_err(sql_error(&path))? {
            return Ok(false);
        }
        assert_eq!(cp.name, name, "a change never renames a control plane");
        tx.execute(
            "UPDATE control_planes SET doc = ?2 WHERE name = ?1",
            params![name, to_json(&cp)],
        )
        .and_then(|_| tx.commit())
        .map_err(sql_error(&path))?;
        Ok(true)
    }

    fn controller_lock_path(&self) -> PathBuf {
        self.path.with_file_name(CONTROLLER_LOCK)
    }

    /// Takes the home's controller lock without waiting. `Ok(None)`: taken (the lock
    /// file now names `identity`); `Ok(Some(info))`: another live process holds it.
    fn try_lock_controller(&mut self, identity: &str) -> Result<Option<LeaderInfo>> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::io::AsRawFd;
        let path = self.controller_lock_path();
        let io = |source| StoreError::Directory {
            path: path.clone(),
            source,
        };
        create_private_file(&path)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        // SAFETY: flock(2) on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::WouldBlock {
                return Err(io(err));
            }
            let mut text = String::new();
            // The holder may be writing its name right now: a partial read only makes
            // the name shown less precise.
            let _ = file.read_to_string(&mut text);
            let mut lines = text.lines();
            let holder = lines.next().unwrap_or("").trim();
            let since_ms = lines
                .next()
                .and_then(|l| l.trim().parse().ok())
                .unwrap_or(0);
            return Ok(Some(LeaderInfo {
                identity: if holder.is_empty() {
                    "another controller".into()
                } else {
                    holder.to_string()
                },
                since_ms,
                token: FenceToken::EMBEDDED,
            }));
        }
        let since_ms = quorum_clock::now_ms();
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{identity}\n{since_ms}\n"))
            .and_then(|()| file.flush())
            .map_err(io)?;
        self.controller_lock = Some(file);
        Ok(None)
    }
}

impl StateStore for SqliteStore {
    /// One controller per home: the first takes the lock file, the others stand by
    /// until it ends (a second `quorum controller` on the same home would otherwise act
    /// twice on every step).
    fn campaign(&mut self, identity: &str, _ttl_ms: u64) -> Result<Campaign> {
        if self.controller_lock.is_some() {
            return Ok(Campaign::Leading {
                token: FenceToken::EMBEDDED,
            });
        }
        match self.try_lock_controller(identity)? {
            None => Ok(Campaign::Leading {
                token: FenceToken::EMBEDDED,
            }),
            Some(holder) => Ok(Campaign::Standby {
                leader: Some(holder),
            }),
        }
    }

    fn step_down(&mut self) {
        // Closing the file releases the lock.
        self.controller_lock = None;
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    /// Checks the file's integrity (a full read of every page).
    fn check_integrity(&self) -> Result<()> {
        self.quick_check(None)
    }

    // ---- settings

    fn setting(&self, key: &str) -> Result<Option<String>> {
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
    fn setting_or_init(&self, key: &str, value: &str) -> Result<String> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES (?1, ?2)",
                params![format!("setting.{key}"), value],
            )
            .map_err(|e| self.err(e))?;
        self.setting(key)?
            .ok_or_else(|| self.corrupt(format!("setting {key} vanished after it was written")))
    }

    fn replace_setting(&self, key: &str, expected: &str, value: &str) -> Result<bool> {
        let n = self
            .conn
            .execute(
                "UPDATE meta SET value = ?3 WHERE key = ?1 AND value = ?2",
                params![format!("setting.{key}"), expected, value],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    fn remove_setting(&self, key: &str, expected: &str) -> Result<bool> {
        let key = format!("setting.{key}");
        let n = self
            .conn
            .execute(
                "DELETE FROM meta WHERE key = ?1 AND value = ?2",
                params![key, expected],
            )
            .map_err(|e| self.err(e))?;
        if n == 1 {
            return Ok(true);
        }
        let left: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(left.is_none())
    }

    fn settings_under(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let from = format!("setting.{prefix}");
        let mut stmt = self
            .conn
            .prepare("SELECT key, value FROM meta WHERE substr(key, 1, ?2) = ?1 ORDER BY key")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![from, from.chars().count() as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (key, value) = row.map_err(|e| self.err(e))?;
            out.push((key["setting.".len()..].to_string(), value));
        }
        Ok(out)
    }

    // ---- control planes

    /// Records a new control plane. The history of an earlier one of the same name is
    /// dropped in the same transaction, so it never shows up as the new one's.
    /// A control plane that uses TLS is stored with its certificate authority, in the
    /// same transaction, so one never exists without the other.
    fn create_control_plane(
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

    fn ca_keys(&self) -> Result<Vec<(String, String)>> {
        let mut stmt = self
            .conn
            .prepare(
                // One line: SQLite quotes the statement in its errors, and ours are one line.
                "SELECT control_plane, key_pem FROM certificate_authorities UNION ALL SELECT control_plane || '/next', key_pem FROM next_certificate_authorities ORDER BY 1",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| self.err(e));
        rows
    }

    /// One immediate transaction; then the write-ahead log is checkpointed and
    /// truncated, and (`secure_delete`) the replaced values' bytes are zeroed, so a key
    /// sealed here leaves no plaintext copy in either file.
    fn replace_ca_keys(&mut self, changes: &[(String, String, String)]) -> Result<usize> {
        if changes.is_empty() {
            return Ok(0);
        }
        let path = self.path.clone();
        let sql = sql_error(&path);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let mut replaced = 0;
        for (cp, old, new) in changes {
            let sql_text = match cp.strip_suffix(NEXT_CA_SUFFIX) {
                Some(_) => "UPDATE next_certificate_authorities SET key_pem = ?3 WHERE control_plane = ?1 AND key_pem = ?2",
                None => "UPDATE certificate_authorities SET key_pem = ?3 WHERE control_plane = ?1 AND key_pem = ?2",
            };
            let owner = cp.strip_suffix(NEXT_CA_SUFFIX).unwrap_or(cp);
            replaced += tx
                .execute(sql_text, params![owner, old, new])
                .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(|e| self.err(e))?;
        Ok(replaced)
    }

    /// The certificate authority of a control plane; `None` for a plaintext one. A TLS
    /// control plane without one is corruption.
    fn certificate_authority(&self, cp: &ControlPlane) -> Result<Option<StoredCa>> {
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

    fn controller_heartbeat(&self, beat: &Heartbeat) -> Result<()> {
        write_heartbeat(&self.conn, beat).map_err(|e| self.err(e))
    }

    fn last_controller_heartbeat(&self) -> Result<Option<Heartbeat>> {
        let v: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'controller.heartbeat'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(v.as_deref().and_then(Heartbeat::decode))
    }

    fn heartbeat_writer(&self) -> Result<Box<dyn HeartbeatWriter>> {
        // A connection of its own: rusqlite's connections are not shared across threads.
        let sql = sql_error(&self.path);
        let conn = Connection::open(&self.path).map_err(sql)?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
            .map_err(sql_error(&self.path))?;
        Ok(Box::new(SqliteHeartbeat {
            conn,
            path: self.path.clone(),
        }))
    }

    fn controller_stopped(&self, identity: &str) -> Result<()> {
        // One controller per home (the lock), so no other heartbeat can race this one;
        // the identity check keeps a stale process from erasing a live one's.
        let Some(beat) = self.last_controller_heartbeat()? else {
            return Ok(());
        };
        if beat.identity == identity {
            self.conn
                .execute("DELETE FROM meta WHERE key = 'controller.heartbeat'", [])
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    fn control_plane(&self, name: &str) -> Result<Option<ControlPlane>> {
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

    fn created_at_ms(&self, name: &str) -> Result<Option<i64>> {
        self.conn
            .query_row(
                "SELECT created_at_ms FROM control_planes WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    fn control_planes(&self) -> Result<Vec<ControlPlane>> {
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

    /// Replaces the spec of an existing control plane.
    fn update_spec(&mut self, name: &str, spec: &ControlPlaneSpec) -> Result<()> {
        self.modify_control_plane(name, |cp| {
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
        // One immediate transaction: the version read is the version replaced.
        self.change_control_plane(name, |_, cp| {
            if cp.spec_version != expected {
                return Ok(false);
            }
            cp.spec = spec.clone();
            cp.road = road.cloned();
            cp.spec_version += 1;
            Ok(true)
        })
    }

    fn take_next_link(
        &mut self,
        name: &str,
        from: Version,
        to: Version,
        now_unix_s: i64,
    ) -> Result<bool> {
        self.change_control_plane(name, |_, cp| Ok(cp.take_next_link(from, to, now_unix_s)))
    }

    fn set_rebuild(&mut self, name: &str, rebuild: Option<&Rebuild>) -> Result<()> {
        self.modify_control_plane(name, |cp| cp.rebuild = rebuild.cloned())
    }

    fn next_certificate_authority(&self, name: &str) -> Result<Option<StoredCa>> {
        self.conn
            .query_row(
                "SELECT cert_pem, key_pem FROM next_certificate_authorities WHERE control_plane = ?1",
                params![name],
                |r| {
                    Ok(StoredCa {
                        cert_pem: r.get(0)?,
                        key_pem: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    fn begin_ca_rotation(
        &mut self,
        name: &str,
        next: &StoredCa,
        rotation: &CaRotation,
    ) -> Result<bool> {
        self.change_control_plane(name, |tx, cp| {
            if cp.ca_rotation.is_some() {
                return Ok(false);
            }
            cp.ca_rotation = Some(rotation.clone());
            tx.execute(
                "INSERT OR REPLACE INTO next_certificate_authorities(control_plane, cert_pem, key_pem) VALUES (?1, ?2, ?3)",
                params![name, next.cert_pem, next.key_pem],
            )?;
            Ok(true)
        })
    }

    fn set_ca_rotation(&mut self, name: &str, rotation: &CaRotation) -> Result<bool> {
        self.change_control_plane(name, |_, cp| {
            match &cp.ca_rotation {
                Some(r) if r.to == rotation.to && r != rotation => {}
                _ => return Ok(false),
            }
            cp.ca_rotation = Some(rotation.clone());
            Ok(true)
        })
    }

    fn finish_ca_rotation(&mut self, name: &str, generation: u32, ca: &StoredCa) -> Result<bool> {
        self.change_control_plane(name, |tx, cp| {
            if cp.ca_rotation.as_ref().map(|r| r.to) != Some(generation) {
                return Ok(false);
            }
            cp.ca_rotation = None;
            cp.ca_generation = generation;
            tx.execute(
                "UPDATE certificate_authorities SET cert_pem = ?2, key_pem = ?3 WHERE control_plane = ?1",
                params![name, ca.cert_pem, ca.key_pem],
            )?;
            tx.execute(
                "DELETE FROM next_certificate_authorities WHERE control_plane = ?1",
                params![name],
            )?;
            Ok(true)
        })
    }

    fn mark_control_plane_deleting(&mut self, name: &str) -> Result<()> {
        self.modify_control_plane(name, mark_deleting)?;
        deleting_or_protected(name, self.control_plane(name)?)
    }

    /// Forgets a control plane, its machines and its published status (its events stay
    /// until a control plane of the same name is created again).
    fn forget_control_plane(&mut self, name: &str) -> Result<()> {
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
        .and_then(|_| {
            tx.execute(
                "DELETE FROM next_certificate_authorities WHERE control_plane = ?1",
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

    fn machines(&self, cp: &str) -> Result<Vec<Machine>> {
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
            check_machine_filed(cp, &name, &m).map_err(|e| self.corrupt(e))?;
            out.push(m);
        }
        out.sort_by_key(|m| m.serial);
        Ok(out)
    }

    /// Records a new machine: the next serial of the control plane and its address
    /// (`choose_address`: one of its client addresses no machine holds, or the next free
    /// loopback address of this state directory; `is_free` says whether an address can
    /// be used, for example because nothing listens on it).
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
        let subnet = self.subnet()?;
        let path = self.path.clone();
        let sql = sql_error(&path);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let (serial, mut record) = control_plane_in(&tx, cp, &path)?;
        // The CA files of a rotation's phase, read in the same transaction as the
        // allocation: a machine recorded now starts with them.
        let ca_step = record.ca_step_now();
        let held = machines_in(&tx, cp, &path)?;
        // A fresh address was never used by another control plane; one of this control
        // plane's own is taken again only once no machine of it holds it and nothing
        // listens there (`quorum_core::reach`).
        let mut next = next_address_in(&tx).map_err(sql)?;
        let address = choose_address(&mut record, &held, subnet, &mut next, at, is_free)?;
        let machine = new_machine(
            cp,
            serial as u64,
            address,
            at,
            version,
            bootstrap,
            certificates_not_after_unix_s,
            remediation,
            ca_step,
        )?;
        record_allocation(&tx, cp, &machine, serial, &record, next)
            .and_then(|_| tx.commit())
            .map_err(sql)?;
        Ok(machine)
    }

    fn update_machine(
        &mut self,
        cp: &str,
        machine: &str,
        _what: &'static str,
        change: &dyn Fn(&mut Machine) -> bool,
    ) -> Result<()> {
        let path = self.path.clone();
        let sql = sql_error(&path);
        // One immediate transaction: the record written is the record read.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let doc: Option<String> = tx
            .query_row(
                "SELECT doc FROM machines WHERE control_plane = ?1 AND name = ?2",
                params![cp, machine],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        let Some(doc) = doc else {
            return Err(StoreError::MachineNotFound {
                cp: cp.to_string(),
                machine: machine.to_string(),
            });
        };
        let mut m: Machine = serde_json::from_str(&doc).map_err(|e| StoreError::Corrupt {
            location: path.display().to_string(),
            detail: format!("machine '{machine}' of '{cp}': {e}"),
        })?;
        if !change(&mut m) {
            return Ok(());
        }
        assert_eq!(m.name, machine, "a change never renames a machine");
        tx.execute(
            "UPDATE machines SET doc = ?3 WHERE control_plane = ?1 AND name = ?2",
            params![cp, machine, to_json(&m)],
        )
        .and_then(|_| tx.commit())
        .map_err(sql)?;
        Ok(())
    }

    /// Removes a machine record (idempotent: an absent record is success).
    fn delete_machine(&mut self, cp: &str, machine: &str) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM machines WHERE control_plane = ?1 AND name = ?2",
                params![cp, machine],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    // ---- events

    fn record_event(&self, cp: &str, at_ms: i64, e: &NewEvent<'_>) -> Result<i64> {
        self.record_event_sql(cp, at_ms, e)
    }

    /// Events of a control plane with an id above `after_id`, oldest first, at most `limit`.
    fn events_after(&self, cp: &str, after_id: i64, limit: u32) -> Result<Vec<Event>> {
        self.events_after_sql(cp, after_id, limit)
    }

    /// The id of the newest event of a control plane (0 when there is none).
    fn last_event_id(&self, cp: &str) -> Result<i64> {
        self.last_event_id_sql(cp)
    }

    // ---- published status

    fn publish_status(&self, cp: &str, status: &PublishedStatus) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO published(control_plane, doc) VALUES (?1, ?2)
                 ON CONFLICT(control_plane) DO UPDATE SET doc = excluded.doc",
                params![cp, to_json(status)],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    fn published_status(&self, cp: &str) -> Result<Option<PublishedStatus>> {
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

    // ---- snapshots (`sqlite/snapshots.rs`)

    fn record_snapshot(&self, rec: &SnapshotRecord) -> Result<()> {
        self.record_snapshot_sql(rec)
    }

    fn update_snapshot(
        &self,
        cp: &str,
        id: &str,
        what: &'static str,
        change: &dyn Fn(&mut SnapshotRecord) -> bool,
    ) -> Result<()> {
        let _ = what; // one SQLite transaction: no retry to name
        self.update_snapshot_sql(cp, id, change)
    }

    fn snapshotted_control_planes(&self) -> Result<Vec<String>> {
        self.snapshotted_control_planes_sql()
    }

    fn delete_snapshot(&self, cp: &str, id: &str) -> Result<()> {
        self.delete_snapshot_sql(cp, id)
    }

    fn snapshots(&self, cp: &str) -> Result<Vec<SnapshotRecord>> {
        self.snapshots_sql(cp)
    }

    /// A number that changes whenever any connection commits a write to the file: a
    /// cheap way for the controller to notice the CLI changed something.
    fn data_version(&self) -> Result<i64> {
        self.conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }
}

/// Maps SQLite errors of the file at `path` (for use while `self.conn` is borrowed).
/// The machines of `cp` as `tx` sees them (inside an allocation's transaction).
fn machines_in(tx: &rusqlite::Connection, cp: &str, path: &Path) -> Result<Vec<Machine>> {
    let sql = sql_error(path);
    let mut stmt = tx
        .prepare("SELECT name, doc FROM machines WHERE control_plane = ?1")
        .map_err(sql)?;
    let rows = stmt
        .query_map(params![cp], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(sql)?;
    let mut out = Vec::new();
    for row in rows {
        let (name, doc) = row.map_err(sql)?;
        let m: Machine = serde_json::from_str(&doc)
            .map_err(|e| format!("machine '{name}' of '{cp}': {e}"))
            .and_then(|m| check_machine_filed(cp, &name, &m).map(|()| m))
            .map_err(|detail| StoreError::Corrupt {
                location: path.display().to_string(),
                detail,
            })?;
        out.push(m);
    }
    out.sort_by_key(|m| m.serial);
    Ok(out)
}

fn sql_error(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + Copy + '_ {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

/// Control plane `cp`'s next machine serial and its record, read in `tx`.
fn control_plane_in(
    tx: &rusqlite::Transaction<'_>,
    cp: &str,
    path: &Path,
) -> Result<(i64, ControlPlane)> {
    let row: Option<(i64, String)> = tx
        .query_row(
            "SELECT next_serial, doc FROM control_planes WHERE name = ?1",
            params![cp],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql_error(path))?;
    let Some((serial, doc)) = row else {
        return Err(StoreError::NotFound(cp.to_string()));
    };
    let record = serde_json::from_str::<ControlPlane>(&doc).map_err(|e| StoreError::Corrupt {
        location: path.display().to_string(),
        detail: format!("control plane '{cp}': {e}"),
    })?;
    Ok((serial, record))
}

/// The next fresh loopback address's number in this state directory (0 at first).
fn next_address_in(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<u64> {
    let next: Option<i64> = tx
        .query_row(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'next_address'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(next.unwrap_or(0) as u64)
}

/// Writes a new machine of `cp`, its control plane's next serial and record (`serial` was
/// the machine's), and the next fresh address's number, in `tx`.
fn record_allocation(
    tx: &rusqlite::Transaction<'_>,
    cp: &str,
    machine: &Machine,
    serial: i64,
    record: &ControlPlane,
    next_address: u64,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO machines(control_plane, name, doc) VALUES (?1, ?2, ?3)",
        params![cp, machine.name, to_json(machine)],
    )?;
    tx.execute(
        "UPDATE control_planes SET next_serial = ?2, doc = ?3 WHERE name = ?1",
        params![cp, serial + 1, to_json(record)],
    )?;
    tx.execute(
        "INSERT INTO meta(key, value) VALUES ('next_address', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![(next_address as i64).to_string()],
    )?;
    Ok(())
}
