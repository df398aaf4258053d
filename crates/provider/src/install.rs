//! Installing an etcd version from its binaries (sent by the controller to an agent's
//! host, or added by `quorum versions add`), each checked against its SHA-256 before
//! anything is kept: a binary whose digest is wrong is never written under the
//! version's directory. The version's directory appears whole (built beside it, then
//! renamed into place), so the provider never sees half an install.

use quorum_core::Version;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The binaries an install may carry; `etcd` is required.
pub const BINARY_NAMES: [&str; 3] = ["etcd", "etcdctl", "etcdutl"];

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{0:?} is not an etcd version (expected MAJOR.MINOR.PATCH, e.g. 3.5.1)")]
    Version(String),
    #[error("binary {0:?} is not one quorum installs (etcd, etcdctl, etcdutl)")]
    UnknownBinary(String),
    #[error("binary {0:?} is named twice")]
    Duplicate(String),
    #[error("an install must carry the etcd binary")]
    NoEtcd,
    #[error("binary {name:?}: {digest:?} is not a SHA-256 in hex (64 characters)")]
    BadDigest { name: String, digest: String },
    #[error("binary {name:?} does not match its SHA-256: expected {expected}, got {actual}; nothing was installed")]
    Mismatch {
        name: String,
        expected: String,
        actual: String,
    },
    #[error("installing etcd {version}: {what}: {source}")]
    Io {
        version: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

/// One binary to install.
#[derive(Clone, Debug)]
pub struct Binary<'a> {
    pub name: &'a str,
    pub sha256: &'a str,
    pub content: &'a [u8],
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    quorum_pki::agents::der_sha256(bytes)
}

/// Installs `binaries` as etcd `version` under `etcd_dir/<version>/`. Returns false when
/// that version is already installed with exactly these binaries (nothing changed).
/// Every digest is checked before the first byte is written.
pub fn install(
    etcd_dir: &Path,
    version: &str,
    binaries: &[Binary<'_>],
) -> Result<bool, InstallError> {
    let parsed: Version = version
        .parse()
        .map_err(|_| InstallError::Version(version.to_string()))?;
    let version = parsed.to_string();
    check(binaries)?;
    let target = etcd_dir.join(&version);
    if binaries
        .iter()
        .all(|b| same_file(&target.join(b.name), b.sha256))
    {
        return Ok(false);
    }
    let io_err = |what, source| InstallError::Io {
        version: version.clone(),
        what,
        source,
    };
    fs::create_dir_all(etcd_dir).map_err(|e| io_err("create the etcd directory", e))?;
    let staging = etcd_dir.join(format!(".{version}.installing-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir(&staging).map_err(|e| io_err("create the staging directory", e))?;
    let written = (|| -> io::Result<()> {
        for b in binaries {
            let path = staging.join(b.name);
            let mut f = fs::File::create(&path)?;
            f.write_all(b.content)?;
            f.sync_all()?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        }
        fs::File::open(&staging)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&staging);
        return Err(io_err("write the binaries", e));
    }
    // A different install of the same version is replaced whole. A member running
    // from the old binary keeps its open file; its next start uses the new one.
    if target.exists() {
        let old = etcd_dir.join(format!(".{version}.replaced-{}", std::process::id()));
        let _ = fs::remove_dir_all(&old);
        fs::rename(&target, &old).map_err(|e| io_err("move the old install aside", e))?;
        let _ = fs::remove_dir_all(&old);
    }
    fs::rename(&staging, &target).map_err(|e| io_err("move the install into place", e))?;
    fs::File::open(etcd_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("sync the etcd directory", e))?;
    Ok(true)
}

fn check(binaries: &[Binary<'_>]) -> Result<(), InstallError> {
    let mut seen: Vec<&str> = Vec::new();
    for b in binaries {
        if !BINARY_NAMES.contains(&b.name) {
            return Err(InstallError::UnknownBinary(b.name.to_string()));
        }
        if seen.contains(&b.name) {
            return Err(InstallError::Duplicate(b.name.to_string()));
        }
        seen.push(b.name);
        let hex = b.sha256.len() == 64 && b.sha256.bytes().all(|c| c.is_ascii_hexdigit());
        if !hex {
            return Err(InstallError::BadDigest {
                name: b.name.to_string(),
                digest: b.sha256.to_string(),
            });
        }
        let actual = sha256_hex(b.content);
        if actual != b.sha256.to_ascii_lowercase() {
            return Err(InstallError::Mismatch {
                name: b.name.to_string(),
                expected: b.sha256.to_ascii_lowercase(),
                actual,
            });
        }
    }
    if !seen.contains(&"etcd") {
        return Err(InstallError::NoEtcd);
    }
    Ok(())
}

fn same_file(path: &Path, sha256: &str) -> bool {
    fs::read(path).is_ok_and(|bytes| sha256_hex(&bytes) == sha256.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_digest_installs_nothing_and_a_right_one_installs_once() {
        let d = tempfile::tempdir().unwrap();
        let content = b"#!/bin/sh\necho etcd\n";
        let good = sha256_hex(content);
        let bad = sha256_hex(b"something else");
        let bin = |sha: &'static str| Binary {
            name: "etcd",
            sha256: sha,
            content,
        };
        let bad: &'static str = Box::leak(bad.into_boxed_str());
        let good: &'static str = Box::leak(good.into_boxed_str());
        let err = install(d.path(), "3.5.1", &[bin(bad)]).unwrap_err();
        assert!(matches!(err, InstallError::Mismatch { .. }), "{err}");
        assert!(!d.path().join("3.5.1").exists());
        assert!(install(d.path(), "3.5.1", &[bin(good)]).unwrap());
        assert!(
            !install(d.path(), "3.5.1", &[bin(good)]).unwrap(),
            "already installed"
        );
        let mode = fs::metadata(d.path().join("3.5.1/etcd"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        for (v, bins, want) in [
            ("3.5", vec![bin(good)], "not an etcd version"),
            ("3.5.1", vec![], "must carry the etcd binary"),
            (
                "3.5.1",
                vec![Binary {
                    name: "../sh",
                    sha256: good,
                    content,
                }],
                "not one quorum installs",
            ),
            ("3.5.1", vec![bin("abc")], "not a SHA-256"),
        ] {
            let e = install(d.path(), v, &bins).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
