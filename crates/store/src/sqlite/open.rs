//! Opening the embedded store: the private home and file, the schema and its
//! migrations, the structural checks made before anything is read.

use super::*;

impl SqliteStore {
    /// Opens (creating if needed) the store in `home`. The directory is created
    /// owner-only.
    pub fn open(home: &Path) -> Result<SqliteStore> {
        create_private_dir(home)?;
        check_private("state directory", home, 0o700)?;
        let path = home.join(STATE_FILE);
        let marker = home.join(INITIALIZED_MARKER);
        let initialized = marker.exists();
        if initialized && !path.exists() {
            return Err(StoreError::Corrupt {
                location: path.display().to_string(),
                detail: "the state file is missing, but this directory held a state".into(),
            });
        }
        create_private_file(&path)?;
        check_private("state file", &path, 0o600)?;
        let sql = sql_error(&path);
        let conn = Connection::open(&path).map_err(sql)?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
            .map_err(sql)?;
        let store = SqliteStore {
            conn,
            path,
            controller_lock: None,
        };
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
    pub(super) fn check_consistency(&self) -> Result<()> {
        self.quick_check(Some(1))?;
        for (table, what) in [
            ("machines", "machine records"),
            ("certificate_authorities", "certificate authorities"),
            ("next_certificate_authorities", "new CAs of a rotation"),
        ] {
            let orphans: i64 = self
                .conn
                .query_row(
                    &format!("SELECT count(*) FROM {table} WHERE control_plane NOT IN (SELECT name FROM control_planes)"),
                    [],
                    |r| r.get(0),
                )
                .map_err(|e| self.err(e))?;
            if orphans > 0 {
                return Err(self.corrupt(format!("{orphans} {what} belong to no control plane")));
            }
        }
        Ok(())
    }

    /// SQLite's page checks (`quick_check`), reporting at most `limit` problems.
    pub(super) fn quick_check(&self, limit: Option<u32>) -> Result<()> {
        let sql = match limit {
            Some(n) => format!("PRAGMA quick_check({n})"),
            None => "PRAGMA quick_check".to_string(),
        };
        let res: String = self
            .conn
            .query_row(&sql, [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if res != "ok" {
            return Err(self.corrupt(res));
        }
        Ok(())
    }

    /// Whether the file holds quorum's schema (a truncated or emptied file does not).
    pub(super) fn has_schema(&self) -> Result<bool> {
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

    pub(super) fn err(&self, source: rusqlite::Error) -> StoreError {
        match source {
            rusqlite::Error::SqliteFailure(e, _)
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
                ) =>
            {
                StoreError::Corrupt {
                    location: self.path.display().to_string(),
                    detail: e.to_string(),
                }
            }
            source => StoreError::Sqlite {
                path: self.path.clone(),
                source,
            },
        }
    }

    pub(super) fn corrupt(&self, detail: impl Into<String>) -> StoreError {
        // One line, whatever SQLite's report looks like.
        let detail: String = detail.into();
        StoreError::Corrupt {
            location: self.path.display().to_string(),
            detail: detail.trim().replace('\n', "; "),
        }
    }

    pub(super) fn init(&self) -> Result<()> {
        // journal_mode returns a row, so it is queried rather than executed.
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(self.corrupt(format!("cannot switch to WAL mode (got {mode})")));
        }
        // The version first: a file from a newer quorum is refused before anything
        // in it changes.
        let version = self.schema_version()?;
        self.conn.execute_batch(SCHEMA).map_err(|e| self.err(e))?;
        if version.is_none() {
            self.conn
                .execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?1)",
                    params![SCHEMA_VERSION.to_string()],
                )
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// The file's schema version (`None`: a new file), an older one migrated to this
    /// one; a newer one, or one no quorum wrote, is refused.
    fn schema_version(&self) -> Result<Option<String>> {
        let version: Option<String> = if self.has_schema()? {
            self.conn
                .query_row("SELECT value FROM meta WHERE key='schema'", [], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(|e| self.err(e))?
        } else {
            None
        };
        match version.as_deref() {
            None => {}
            Some(v) if v == SCHEMA_VERSION.to_string() => {}
            Some(v @ ("1" | "2")) => self.migrate(v)?,
            Some(v) if v.parse::<i64>().is_ok_and(|n| n > SCHEMA_VERSION) => {
                return Err(StoreError::NewerSchema {
                    location: self.path.display().to_string(),
                    found: v.to_string(),
                    reads: SCHEMA_VERSION,
                })
            }
            // No quorum ever wrote another value: the file is damaged.
            Some(v) => return Err(self.corrupt(format!("unknown schema version {v:?}"))),
        }
        Ok(version)
    }

    /// Brings a file of an older schema version (`from`) to this one, one version at
    /// a time: 1 to 2, events gain the replica that wrote them (`by_replica`); 2 to 3,
    /// events gain their step's outcome (`outcome`, read from `ok` and the kind where it
    /// is absent, see `StepOutcome::implied`). The old rows are kept as they are. One
    /// immediate transaction that re-reads the version, so two processes opening the
    /// same old file migrate it once, and a failure leaves the file at `from`.
    pub(super) fn migrate(&self, from: &str) -> Result<()> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.err(e))?;
        let migrate = || -> Result<()> {
            let mut v: String = self
                .conn
                .query_row("SELECT value FROM meta WHERE key='schema'", [], |r| {
                    r.get(0)
                })
                .map_err(|e| self.err(e))?;
            const STEPS: [(&str, &str, &str); 2] = [
                ("1", "2", "ALTER TABLE events ADD COLUMN by_replica TEXT;"),
                ("2", "3", "ALTER TABLE events ADD COLUMN outcome TEXT;"),
            ];
            for (old, new, sql) in STEPS {
                if v == old {
                    self.conn
                        .execute_batch(sql)
                        .and_then(|()| {
                            self.conn.execute(
                                "UPDATE meta SET value = ?1 WHERE key = 'schema'",
                                params![new],
                            )
                        })
                        .map_err(|e| self.err(e))?;
                    v = new.to_string();
                }
            }
            // Another process may have changed the version meanwhile (an older quorum
            // migrating part of the way is handled above).
            if v != SCHEMA_VERSION.to_string() {
                return Err(self.corrupt(format!(
                    "schema version {v:?} found while migrating from {from:?}"
                )));
            }
            Ok(())
        };
        match migrate() {
            Ok(()) => self.conn.execute_batch("COMMIT").map_err(|e| self.err(e)),
            Err(e) => {
                // The migration is all or nothing.
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    pub(super) fn parse_cp(&self, name: &str, doc: &str) -> Result<ControlPlane> {
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

    pub(super) fn modify_control_plane(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut ControlPlane),
    ) -> Result<()> {
        self.change_control_plane(name, |_, cp| {
            f(cp);
            Ok(true)
        })
        .map(drop)
    }
}

/// The pragmas of every connection and the tables of this schema version (`SCHEMA_VERSION`),
/// made where missing.
const SCHEMA: &str = "PRAGMA synchronous=FULL;
                 PRAGMA foreign_keys=ON;
                 PRAGMA secure_delete=ON;
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
                     took_ms INTEGER,
                     by_replica TEXT,
                     outcome TEXT);
                 CREATE INDEX IF NOT EXISTS events_by_cp ON events(control_plane, id);
                 CREATE TABLE IF NOT EXISTS published (
                     control_plane TEXT PRIMARY KEY,
                     doc TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS snapshots (
                     control_plane TEXT NOT NULL,
                     id TEXT NOT NULL,
                     taken_at_unix_s INTEGER NOT NULL,
                     doc TEXT NOT NULL,
                     PRIMARY KEY (control_plane, id));
                 CREATE TABLE IF NOT EXISTS certificate_authorities (
                     control_plane TEXT PRIMARY KEY REFERENCES control_planes(name) ON DELETE CASCADE,
                     cert_pem TEXT NOT NULL,
                     key_pem TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS next_certificate_authorities (
                     control_plane TEXT PRIMARY KEY REFERENCES control_planes(name) ON DELETE CASCADE,
                     cert_pem TEXT NOT NULL,
                     key_pem TEXT NOT NULL);";
