//! The default snapshot store: a local directory, `<home>/backups/<name>/`, owner-only.
//! A snapshot is written as `<id>.partial` and renamed to `<id>` once complete and
//! synced, so a file named like a snapshot is always a whole one.

use crate::BackupError;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The suffix of a snapshot still being written (or cut off by a crash).
pub const PARTIAL_SUFFIX: &str = ".partial";
/// A partial file older than this is left from a crash (no snapshot may stream for
/// longer: `SNAPSHOT_TIMEOUT_MS`) and is removed by the next snapshot.
pub const STALE_PARTIAL_AGE: Duration = Duration::from_millis(2 * quorum_etcd::SNAPSHOT_TIMEOUT_MS);

/// A control plane's snapshots in a local directory.
#[derive(Clone, Debug)]
pub struct LocalDir {
    root: PathBuf,
}

impl LocalDir {
    /// `<home>/backups/<cp>/`.
    pub fn for_control_plane(home: &Path, cp: &str) -> Self {
        LocalDir {
            root: home.join("backups").join(cp),
        }
    }

    /// The home this directory is in (`<home>/backups/<cp>/`).
    pub fn home(&self) -> &Path {
        self.root
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new(""))
    }

    /// Where the snapshots are, in words (recorded with each snapshot).
    pub fn location(&self) -> String {
        self.root.display().to_string()
    }

    pub fn path(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// Creates the directory (and `backups/`) owner-only; an existing one is made so
    /// (snapshots hold every key).
    pub(crate) fn ensure(&self) -> Result<(), BackupError> {
        let err = |e: std::io::Error| BackupError::Store {
            location: self.location(),
            message: e.to_string(),
        };
        if let Some(parent) = self.root.parent() {
            quorum_pki::create_private_dir(parent).map_err(err)?;
        }
        quorum_pki::create_private_dir(&self.root).map_err(err)
    }

    /// Opens `<tag>.partial` for a new snapshot (0600, never over an existing file),
    /// after removing partial files a crash left behind. Its final name is given at
    /// `commit`, once its contents are known.
    pub fn begin(&self, tag: &str) -> Result<Partial, BackupError> {
        self.ensure()?;
        self.remove_stale_partials(SystemTime::now());
        let path = self.root.join(format!("{tag}{PARTIAL_SUFFIX}"));
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| store_error(&path, e))?;
        Ok(Partial {
            file: Some(file),
            path,
            root: self.root.clone(),
        })
    }

    /// The complete snapshot files, by name, sorted (their names sort by time).
    pub fn list(&self) -> Vec<String> {
        let mut out: Vec<String> = fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n.ends_with(".db"))
            .collect();
        out.sort();
        out
    }

    /// Removes the file of snapshot `id`, which will never be recorded (what came after
    /// its commit failed). Best effort: a file left is removed later as unrecorded.
    pub fn discard(&self, id: &str) {
        match fs::remove_file(self.path(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(file = %self.path(id).display(), "cannot remove an unrecorded snapshot: {e}");
            }
            _ => {}
        }
    }

    /// Removes snapshot files no record names (`recorded`: the ids the store holds)
    /// that are older than any snapshot can take: a crash between a file's commit and
    /// its record left them, and nothing else would. Younger ones may be about to be
    /// recorded. Returns what it removed.
    pub fn remove_unrecorded(&self, recorded: &[String], now: SystemTime) -> Vec<String> {
        let mut removed = Vec::new();
        for name in self.list() {
            if recorded.contains(&name) {
                continue;
            }
            let path = self.root.join(&name);
            let age = fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok());
            if age.is_some_and(|a| a > STALE_PARTIAL_AGE) && fs::remove_file(&path).is_ok() {
                tracing::info!(file = %path.display(), "removed a snapshot file no record names (left by a crash)");
                removed.push(name);
            }
        }
        removed
    }

    fn remove_stale_partials(&self, now: SystemTime) {
        for e in fs::read_dir(&self.root).into_iter().flatten().flatten() {
            let name = e.file_name();
            if !name.to_string_lossy().ends_with(PARTIAL_SUFFIX) {
                continue;
            }
            let age = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok());
            if age.is_some_and(|a| a > STALE_PARTIAL_AGE) {
                tracing::info!(file = %e.path().display(), "removing a snapshot a crash cut off");
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// A snapshot being written. Dropped without `commit`, its file is removed: a failed
/// snapshot leaves nothing that could be taken for one.
pub struct Partial {
    file: Option<fs::File>,
    path: PathBuf,
    root: PathBuf,
}

impl Partial {
    pub fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.write_all(chunk),
            None => Err(std::io::Error::other("snapshot file already closed")),
        }
    }

    /// The file as written so far (to read its facts before it is committed).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs what was written to disk.
    pub fn sync(&mut self) -> Result<(), BackupError> {
        match &self.file {
            Some(f) => f.sync_all().map_err(|e| store_error(&self.path, e)),
            None => Ok(()),
        }
    }

    /// Syncs the file, renames it to the first of `ids` no snapshot has (never over
    /// one) and syncs the directory: from here on it is a snapshot, and a crash keeps
    /// it. Returns the id it took.
    pub fn commit(mut self, ids: impl IntoIterator<Item = String>) -> Result<String, BackupError> {
        self.sync()?;
        let Some(id) = ids.into_iter().find(|id| !self.root.join(id).exists()) else {
            return Err(store_error(
                &self.root,
                std::io::Error::other("every name this snapshot may take is taken"),
            ));
        };
        let to = self.root.join(&id);
        fs::rename(&self.path, &to).map_err(|e| store_error(&to, e))?;
        // Renamed: nothing for Drop to remove.
        self.file = None;
        fs::File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(|e| store_error(&self.root, e))?;
        Ok(id)
    }
}

fn store_error(path: &Path, e: std::io::Error) -> BackupError {
    BackupError::Store {
        location: path.display().to_string(),
        message: e.to_string(),
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_snapshot_appears_whole_or_not_at_all() {
        let home = tempfile::tempdir().unwrap();
        let d = LocalDir::for_control_plane(home.path(), "prod");
        let mut p = d.begin("a").unwrap();
        p.write(b"half").unwrap();
        assert!(d.list().is_empty(), "a partial file is no snapshot");
        drop(p);
        assert!(
            fs::read_dir(d.path("")).unwrap().next().is_none(),
            "a failed one leaves nothing"
        );
        let mut p = d.begin("a").unwrap();
        p.write(b"whole").unwrap();
        let id = p.commit(["a.db".to_string()]).unwrap();
        assert_eq!(fs::read(d.path(&id)).unwrap(), b"whole");
        assert_eq!(d.list(), vec!["a.db".to_string()]);
        let mut again = d.begin("b").unwrap();
        again.write(b"again").unwrap();
        let ids = ["a.db".to_string(), "a-2.db".to_string()];
        assert_eq!(
            again.commit(ids.clone()).unwrap(),
            "a-2.db",
            "never over one"
        );
        assert_eq!(fs::read(d.path("a.db")).unwrap(), b"whole");
        let third = d.begin("c").unwrap();
        assert!(third.commit(ids).is_err(), "every name taken");
        assert_eq!(
            d.list(),
            vec!["a-2.db".to_string(), "a.db".to_string()],
            "the failed one is gone"
        );
        for dir in [home.path().join("backups"), d.path("")] {
            let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", dir.display());
        }
        let mode = fs::metadata(d.path("a.db")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn an_existing_directory_is_made_owner_only_again() {
        let home = tempfile::tempdir().unwrap();
        let d = LocalDir::for_control_plane(home.path(), "prod");
        drop(d.begin("a").unwrap());
        fs::set_permissions(d.path(""), fs::Permissions::from_mode(0o755)).unwrap();
        drop(d.begin("b").unwrap());
        let mode = fs::metadata(d.path("")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn only_old_files_no_record_names_are_removed() {
        let home = tempfile::tempdir().unwrap();
        let d = LocalDir::for_control_plane(home.path(), "prod");
        d.ensure().unwrap();
        for f in ["kept.db", "orphan.db", "in-flight.partial"] {
            fs::write(d.path(f), b"x").unwrap();
        }
        let recorded = vec!["kept.db".to_string()];
        assert!(
            d.remove_unrecorded(&recorded, SystemTime::now()).is_empty(),
            "a young one may be about to be recorded"
        );
        let later = SystemTime::now() + STALE_PARTIAL_AGE + Duration::from_secs(1);
        assert_eq!(
            d.remove_unrecorded(&recorded, later),
            vec!["orphan.db".to_string()]
        );
        assert!(d.path("kept.db").exists() && d.path("in-flight.partial").exists());
    }

    #[test]
    fn only_partials_older_than_any_snapshot_can_take_are_removed() {
        let home = tempfile::tempdir().unwrap();
        let d = LocalDir::for_control_plane(home.path(), "prod");
        d.ensure().unwrap();
        fs::write(d.path("old.db.partial"), b"x").unwrap();
        fs::write(d.path("kept.db"), b"x").unwrap();
        d.remove_stale_partials(SystemTime::now());
        assert!(
            d.path("old.db.partial").exists(),
            "a recent one may be in progress"
        );
        d.remove_stale_partials(SystemTime::now() + STALE_PARTIAL_AGE + Duration::from_secs(1));
        assert!(!d.path("old.db.partial").exists());
        assert!(d.path("kept.db").exists());
    }
}
