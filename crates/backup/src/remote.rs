//! Where snapshots are kept: the local directory (`<home>/backups/NAME/`, the default)
//! or, with `spec.backup.store: s3://bucket/prefix`, an S3-compatible object store
//! (`object_store`; the endpoint and credentials from `spec.backup.s3`, read by
//! `access.rs`, over the environment as every S3 tool reads it: `AWS_ENDPOINT`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`, `AWS_ALLOW_HTTP`).
//!
//! A snapshot is always streamed into the local directory first (its digest and facts
//! are checked there, and it is test-restored from there); with S3 it is then uploaded
//! in parts read from the file (never whole in memory) under `<prefix>/<NAME>/<id>`, its
//! record names the bucket, and the local copy goes. Reading one back (a later test
//! restore, a restore) fetches it into the local directory under a temporary name, the
//! same way, and removes it when done.

use crate::{BackupError, LocalDir};
use futures::future::BoxFuture;
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, WriteMultipart};
use quorum_core::s3access::S3Access;
use quorum_core::SnapshotRecord;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The scheme `spec.backup.store` names an S3-compatible store with.
pub const S3_SCHEME: &str = "s3://";
/// The size of each uploaded part (S3's least is 5 MiB), and of each read from the file.
const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts in flight at once.
const PARTS_IN_FLIGHT: usize = 2;
/// One call to the store (a part, a listing, a delete) gives up after this long.
const CALL_TIMEOUT_MS: u64 = 120_000;
/// The suffix of a snapshot being fetched from the store.
const FETCHING_SUFFIX: &str = ".fetching";

/// Where a control plane's snapshot files are kept: what every store does, and all
/// that the rest of quorum asks of one. The local directory (`LocalDir`) and an
/// S3-compatible bucket (`S3Dir`) implement it; `store_for` picks one from the spec,
/// `store_of` from a record's `location`. Another store (GCS, Azure) is one more
/// implementation.
pub trait SnapshotStore: Send + Sync {
    /// Where, in words: what a record's `location` says.
    fn location(&self) -> String;
    /// Keeps the checked local file `file` as snapshot `id`.
    fn put<'a>(&'a self, id: &'a str, file: &'a Path) -> BoxFuture<'a, Result<(), BackupError>>;
    /// Writes snapshot `id` into the local file `to` (whole, or not at all).
    fn get<'a>(&'a self, id: &'a str, to: &'a Path) -> BoxFuture<'a, Result<(), BackupError>>;
    /// Removes snapshot `id`; one already gone is success.
    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), BackupError>>;
    /// The ids kept, sorted.
    fn list(&self) -> BoxFuture<'_, Result<Vec<String>, BackupError>>;
}

/// The store `spec.backup.store` names for control plane `cp` (reached as
/// `spec.backup.s3` says): the local directory `<home>/backups/<cp>/` when it names none.
pub fn store_for(
    home: &Path,
    cp: &str,
    store: Option<&str>,
    access: Option<&S3Access>,
) -> Result<Box<dyn SnapshotStore>, BackupError> {
    Ok(match store {
        None => Box::new(LocalDir::for_control_plane(home, cp)),
        Some(url) => Box::new(S3Dir::for_control_plane(url, cp, access)?),
    })
}

/// How the bucket of `rec` is reached: `spec` (the control plane's own `backup.s3`)
/// while the control plane exists, else as the record's control plane was when the
/// snapshot was taken (`recreate`), else the environment alone.
pub fn access_of<'a>(rec: &'a SnapshotRecord, spec: Option<&'a S3Access>) -> Option<&'a S3Access> {
    spec.or_else(|| rec.recreate.as_ref()?.spec.backup.s3.as_ref())
}

/// The store a record says its file is kept in.
pub fn store_of(
    home: &Path,
    rec: &SnapshotRecord,
    access: Option<&S3Access>,
) -> Result<Box<dyn SnapshotStore>, BackupError> {
    if !is_remote(rec) {
        return Ok(Box::new(LocalDir::for_control_plane(
            home,
            &rec.control_plane,
        )));
    }
    let url = rec
        .location
        .strip_suffix(&format!("/{}", rec.control_plane))
        .unwrap_or(&rec.location);
    Ok(Box::new(S3Dir::for_control_plane(
        url,
        &rec.control_plane,
        access,
    )?))
}

impl SnapshotStore for LocalDir {
    fn location(&self) -> String {
        LocalDir::location(self)
    }

    fn put<'a>(&'a self, id: &'a str, file: &'a Path) -> BoxFuture<'a, Result<(), BackupError>> {
        Box::pin(async move {
            let to = self.path(id);
            if file == to {
                return Ok(());
            }
            self.ensure()?;
            copy_whole(file, &to)
        })
    }

    fn get<'a>(&'a self, id: &'a str, to: &'a Path) -> BoxFuture<'a, Result<(), BackupError>> {
        Box::pin(async move {
            let from = self.path(id);
            if from == to {
                return Ok(());
            }
            copy_whole(&from, to)
        })
    }

    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), BackupError>> {
        Box::pin(async move {
            let path = self.path(id);
            match std::fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(store_error(&path.display().to_string(), e.to_string())),
            }
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<String>, BackupError>> {
        Box::pin(async move { Ok(LocalDir::list(self)) })
    }
}

impl SnapshotStore for S3Dir {
    fn location(&self) -> String {
        S3Dir::location(self)
    }

    fn put<'a>(&'a self, id: &'a str, file: &'a Path) -> BoxFuture<'a, Result<(), BackupError>> {
        Box::pin(self.upload(id, file))
    }

    fn get<'a>(&'a self, id: &'a str, to: &'a Path) -> BoxFuture<'a, Result<(), BackupError>> {
        Box::pin(self.download(id, to))
    }

    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), BackupError>> {
        Box::pin(S3Dir::remove(self, id))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<String>, BackupError>> {
        Box::pin(S3Dir::list(self))
    }
}

/// Copies `from` to `to` through `<to>.fetching`, renamed when whole.
fn copy_whole(from: &Path, to: &Path) -> Result<(), BackupError> {
    let mut partial = to.as_os_str().to_os_string();
    partial.push(FETCHING_SUFFIX);
    let partial = PathBuf::from(partial);
    let at = to.display().to_string();
    std::fs::copy(from, &partial).map_err(|e| store_error(&at, e.to_string()))?;
    std::fs::rename(&partial, to).map_err(|e| store_error(&at, e.to_string()))
}

/// A control plane's snapshots in an S3-compatible bucket.
#[derive(Debug)]
pub struct S3Dir {
    store: AmazonS3,
    bucket: String,
    /// `<prefix>/<control plane>`, without slashes at either end.
    prefix: String,
}

impl S3Dir {
    /// The store `url` (`s3://bucket[/prefix]`) names, for control plane `cp`, reached
    /// as `access` says over the environment.
    pub fn for_control_plane(
        url: &str,
        cp: &str,
        access: Option<&S3Access>,
    ) -> Result<S3Dir, BackupError> {
        let (bucket, prefix) = parse_s3_url(url).map_err(|m| store_error(url, m))?;
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&bucket);
        if let Some(a) = access {
            builder = crate::access::apply(builder, a).map_err(|m| store_error(url, m))?;
        }
        let store = builder
            .build()
            .map_err(|e| store_error(url, e.to_string()))?;
        let prefix = [prefix.as_str(), cp]
            .iter()
            .filter(|p| !p.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        Ok(S3Dir {
            store,
            bucket,
            prefix,
        })
    }

    /// `s3://bucket/prefix/NAME`: what a record's `location` says.
    pub fn location(&self) -> String {
        format!("{S3_SCHEME}{}/{}", self.bucket, self.prefix)
    }

    fn object(&self, id: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{id}", self.prefix))
    }

    /// Uploads `file` as snapshot `id`, part by part.
    pub async fn upload(&self, id: &str, file: &Path) -> Result<(), BackupError> {
        let at = format!("{}/{id}", self.location());
        let upload = timed(&at, self.store.put_multipart(&self.object(id))).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut f = std::fs::File::open(file).map_err(|e| store_error(&at, e.to_string()))?;
        let mut buf = vec![0u8; PART_BYTES];
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| store_error(&at, e.to_string()))?;
            if n == 0 {
                break;
            }
            timed(&at, writer.wait_for_capacity(PARTS_IN_FLIGHT)).await?;
            writer.write(&buf[..n]);
        }
        timed(&at, writer.finish()).await?;
        Ok(())
    }

    /// Downloads snapshot `id` into `to` (through `<to>.fetching`, renamed when whole).
    pub async fn download(&self, id: &str, to: &Path) -> Result<(), BackupError> {
        let at = format!("{}/{id}", self.location());
        let got = timed(&at, self.store.get(&self.object(id))).await?;
        let mut partial = to.as_os_str().to_os_string();
        partial.push(FETCHING_SUFFIX);
        let partial = PathBuf::from(partial);
        let mut f = std::fs::File::create(&partial).map_err(|e| store_error(&at, e.to_string()))?;
        let mut stream = got.into_stream();
        loop {
            let next = tokio::time::timeout(Duration::from_millis(CALL_TIMEOUT_MS), stream.next())
                .await
                .map_err(|_| store_error(&at, format!("no data for {CALL_TIMEOUT_MS} ms")))?;
            let Some(chunk) = next else { break };
            let chunk = chunk.map_err(|e| store_error(&at, e.to_string()))?;
            f.write_all(&chunk)
                .map_err(|e| store_error(&at, e.to_string()))?;
        }
        f.sync_all().map_err(|e| store_error(&at, e.to_string()))?;
        std::fs::rename(&partial, to).map_err(|e| store_error(&at, e.to_string()))?;
        Ok(())
    }

    /// Removes snapshot `id`; one already gone is success.
    pub async fn remove(&self, id: &str) -> Result<(), BackupError> {
        let at = format!("{}/{id}", self.location());
        match tokio::time::timeout(
            Duration::from_millis(CALL_TIMEOUT_MS),
            self.store.delete(&self.object(id)),
        )
        .await
        {
            Ok(Ok(())) | Ok(Err(object_store::Error::NotFound { .. })) => Ok(()),
            Ok(Err(e)) => Err(store_error(&at, e.to_string())),
            Err(_) => Err(store_error(
                &at,
                format!("no answer within {CALL_TIMEOUT_MS} ms"),
            )),
        }
    }

    /// The ids stored, sorted.
    pub async fn list(&self) -> Result<Vec<String>, BackupError> {
        let prefix = ObjectPath::from(self.prefix.clone());
        let mut out = Vec::new();
        let mut items = self.store.list(Some(&prefix));
        loop {
            let next = tokio::time::timeout(Duration::from_millis(CALL_TIMEOUT_MS), items.next())
                .await
                .map_err(|_| store_error(&self.location(), "listing stalled".into()))?;
            let Some(meta) = next else { break };
            let meta = meta.map_err(|e| store_error(&self.location(), e.to_string()))?;
            if let Some(name) = meta.location.filename() {
                out.push(name.to_string());
            }
        }
        out.sort();
        Ok(out)
    }
}

/// After a snapshot was taken (and test-restored) in `local`: with an S3 store, upload
/// it and name the bucket in the record. The local file stays until the record is
/// written (`drop_local_copy`), so a crash in between loses nothing.
pub async fn keep(
    store: Option<&str>,
    access: Option<&S3Access>,
    local: &LocalDir,
    rec: &mut SnapshotRecord,
) -> Result<(), BackupError> {
    if store.is_none() {
        // The local directory: the file is where it is kept already.
        return Ok(());
    }
    let kept = store_for(local.home(), &rec.control_plane, store, access)?;
    kept.put(&rec.id, &local.path(&rec.id)).await?;
    rec.location = kept.location();
    Ok(())
}

/// Whether `rec` is kept in an object store.
pub fn is_remote(rec: &SnapshotRecord) -> bool {
    rec.location.starts_with(S3_SCHEME)
}

/// Once its record names the bucket, the local copy of a stored snapshot goes.
pub fn drop_local_copy(local: &LocalDir, rec: &SnapshotRecord) {
    if is_remote(rec) {
        let _ = std::fs::remove_file(local.path(&rec.id));
    }
}

/// A snapshot's file, readable locally: where it lies, or fetched from the object store
/// into the local directory (and removed when this is dropped).
#[derive(Debug)]
pub struct LocalCopy {
    pub path: PathBuf,
    fetched: bool,
}

impl Drop for LocalCopy {
    fn drop(&mut self) {
        if self.fetched {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The file of `rec` to read, fetched from its bucket (reached as `access` says) when it
/// is kept in one and no local copy is left.
pub async fn local_copy(
    local: &LocalDir,
    rec: &SnapshotRecord,
    access: Option<&S3Access>,
) -> Result<LocalCopy, BackupError> {
    let path = local.path(&rec.id);
    if !is_remote(rec) || path.exists() {
        return Ok(LocalCopy {
            path,
            fetched: false,
        });
    }
    let kept = store_of(local.home(), rec, access)?;
    local.ensure()?;
    let fetched = local.path(&format!("{}.fetched", rec.id));
    kept.get(&rec.id, &fetched).await?;
    Ok(LocalCopy {
        path: fetched,
        fetched: true,
    })
}

/// Removes `rec`'s file wherever it is kept (both: a local copy may be left).
pub async fn remove_kept(
    local: &LocalDir,
    rec: &SnapshotRecord,
    access: Option<&S3Access>,
) -> Result<(), BackupError> {
    if is_remote(rec) {
        store_of(local.home(), rec, access)?.remove(&rec.id).await?;
    }
    SnapshotStore::remove(local, &rec.id).await
}

/// `s3://bucket[/prefix]` → (bucket, prefix without slashes at either end).
pub fn parse_s3_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix(S3_SCHEME)
        .ok_or_else(|| format!("{url:?} is not an s3:// URL (s3://bucket/prefix)"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("{url:?} names no bucket (s3://bucket/prefix)"));
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

async fn timed<T>(
    at: &str,
    f: impl std::future::Future<Output = object_store::Result<T>>,
) -> Result<T, BackupError> {
    match tokio::time::timeout(Duration::from_millis(CALL_TIMEOUT_MS), f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(store_error(at, e.to_string())),
        Err(_) => Err(store_error(
            at,
            format!("no answer within {CALL_TIMEOUT_MS} ms"),
        )),
    }
}

fn store_error(location: &str, message: String) -> BackupError {
    BackupError::Store {
        location: location.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The local directory through the trait: put, list, get, remove, on real files.
    #[tokio::test]
    async fn the_local_directory_keeps_snapshots_through_the_trait() {
        let home = tempfile::tempdir().unwrap();
        let store = store_for(home.path(), "cp", None, None).unwrap();
        assert!(
            store.location().ends_with("backups/cp"),
            "{}",
            store.location()
        );
        let src = home.path().join("taken.db");
        std::fs::write(&src, b"snapshot bytes").unwrap();
        store.put("cp-1.db", &src).await.unwrap();
        assert_eq!(store.list().await.unwrap(), vec!["cp-1.db".to_string()]);
        let back = home.path().join("back.db");
        store.get("cp-1.db", &back).await.unwrap();
        assert_eq!(std::fs::read(&back).unwrap(), b"snapshot bytes");
        store.remove("cp-1.db").await.unwrap();
        store.remove("cp-1.db").await.unwrap();
        assert!(store.list().await.unwrap().is_empty());
        // A bucket name S3 would refuse is refused before any call.
        assert!(store_for(home.path(), "cp", Some("s3://"), None).is_err());
    }

    #[test]
    fn s3_urls_name_a_bucket_and_a_prefix() {
        assert_eq!(
            parse_s3_url("s3://b/p/q/").unwrap(),
            ("b".to_string(), "p/q".to_string())
        );
        assert_eq!(
            parse_s3_url("s3://b").unwrap(),
            ("b".to_string(), String::new())
        );
        assert!(parse_s3_url("s3:///p").unwrap_err().contains("no bucket"));
        assert!(parse_s3_url("gs://b").unwrap_err().contains("not an s3://"));
    }
}
