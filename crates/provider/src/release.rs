//! Adding an etcd release quorum has never seen (`quorum versions add`): from a
//! directory holding its binaries, from a release tarball in etcd's own layout
//! (`etcd-vX.Y.Z-linux-amd64.tar.gz`, its binaries in `etcd-vX.Y.Z-linux-amd64/`), or
//! from Debian's packages (`etcd-server_….deb` carries `etcd` and `etcdutl`,
//! `etcd-client_….deb` carries `etcdctl`).
//!
//! Invariant: nothing is installed unless every file matches the digest given for it,
//! every binary runs here and reports one and the same version, and that version is the
//! one its source claims (the tarball's name, the package's version, `--version`). The
//! install itself is `install::install`: the version's directory appears whole.

use crate::install::{self, Binary, InstallError};
use quorum_core::Version;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long unpacking one tarball or package may take.
pub const UNPACK_TIMEOUT_MS: u64 = 120_000;
/// How long a binary may take to print its version.
pub const VERSION_TIMEOUT_MS: u64 = 10_000;
/// The largest source file read (etcd's tarballs are about 20 MiB).
pub const MAX_SOURCE_BYTES: u64 = 512 * 1024 * 1024;
/// How deep below a tarball's root its binaries are looked for
/// (`etcd-v3.5.30-linux-amd64/etcd` in etcd's own).
const MAX_SEARCH_DEPTH: usize = 3;
/// The most output read from a version command.
const MAX_VERSION_OUTPUT_BYTES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// (`error` is not a `#[source]`: its words are said once, here.)
    #[error("{path}: {what}: {error}")]
    Io {
        path: PathBuf,
        what: &'static str,
        error: io::Error,
    },
    #[error(
        "{path} is neither a directory, a release tarball (.tar.gz) nor a Debian package (.deb)"
    )]
    UnknownKind { path: PathBuf },
    #[error("{path} is {bytes} bytes, more than the {MAX_SOURCE_BYTES} read from a source")]
    TooLarge { path: PathBuf, bytes: u64 },
    #[error("{given} --sha256 given for {files} files: give one per tarball or package, in the order of the paths (a directory has none)")]
    DigestCount { given: usize, files: usize },
    #[error("{digest:?} is not a SHA-256 in hex (64 characters)")]
    BadDigest { digest: String },
    #[error("{path} does not match its SHA-256: expected {expected}, got {actual}; nothing was installed")]
    Mismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{tool} on {path}: {message}")]
    Tool {
        tool: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("no {binary} in {sources}{hint}")]
    Missing {
        binary: &'static str,
        sources: String,
        hint: &'static str,
    },
    #[error("{binary} found twice: {first} and {second}; give one source of each binary")]
    Twice {
        binary: &'static str,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("{path} does not run here: {message}")]
    DoesNotRun { path: PathBuf, message: String },
    #[error("the binaries disagree: {which}; nothing was installed")]
    Disagree { which: String },
    #[error(
        "{claimant} says etcd {claimed}, but the binaries report {reported}; nothing was installed"
    )]
    WrongClaim {
        claimant: String,
        claimed: Version,
        reported: Version,
    },
    #[error(transparent)]
    Install(#[from] InstallError),
}

/// What a path given to `add` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceKind {
    Directory,
    /// A tarball; the version its name claims, where it follows etcd's naming.
    Tarball(Option<Version>),
    Debian,
}

impl SourceKind {
    /// Reads what `path` is from the file system and its name.
    pub fn of(path: &Path) -> Result<SourceKind, ReleaseError> {
        let meta = fs::metadata(path).map_err(|error| ReleaseError::Io {
            path: path.to_path_buf(),
            what: "cannot read it",
            error,
        })?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if meta.is_dir() {
            Ok(SourceKind::Directory)
        } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
            Ok(SourceKind::Tarball(tarball_claim(name)))
        } else if name.ends_with(".deb") {
            Ok(SourceKind::Debian)
        } else {
            Err(ReleaseError::UnknownKind {
                path: path.to_path_buf(),
            })
        }
    }
}

/// The version in a tarball's name in etcd's layout: `etcd-v3.5.30-linux-amd64.tar.gz`.
pub fn tarball_claim(name: &str) -> Option<Version> {
    let rest = name.strip_prefix("etcd-v")?;
    rest.split('-').next()?.parse().ok()
}

/// The upstream version in a Debian package version: `3.5.30-2` and `1:3.5.30+dfsg-2`
/// are 3.5.30.
pub fn debian_claim(package_version: &str) -> Option<Version> {
    let v = package_version.trim();
    let v = v.split_once(':').map_or(v, |(_, rest)| rest);
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    v[..end].trim_end_matches('.').parse().ok()
}

/// A release that was added (or found already installed).
#[derive(Clone, Debug)]
pub struct Added {
    pub version: Version,
    pub dir: PathBuf,
    /// The binaries installed, by name.
    pub binaries: Vec<&'static str>,
    /// False when this version was installed with exactly these binaries already.
    pub changed: bool,
}

/// Adds the release in `paths` to `etcd_dir` (see the module doc). `sha256` holds one
/// digest per file source, in order, or none; `claimed` is the version the caller
/// says it is.
pub fn add(
    etcd_dir: &Path,
    paths: &[PathBuf],
    sha256: &[String],
    claimed: Option<Version>,
) -> Result<Added, ReleaseError> {
    let kinds = paths
        .iter()
        .map(|p| SourceKind::of(p))
        .collect::<Result<Vec<_>, _>>()?;
    let work = Scratch::new(etcd_dir)?;
    let staged = stage(paths, &kinds, &work)?;
    check_digests(paths, &staged, &kinds, sha256)?;
    let mut roots = Vec::new();
    let mut claims = Vec::new();
    if let Some(v) = claimed {
        claims.push(("--version".to_string(), v));
    }
    for (i, ((path, file), kind)) in paths.iter().zip(&staged).zip(&kinds).enumerate() {
        let (root, claim) = unpack(path, file, kind, &work.0.join(i.to_string()))?;
        roots.push(root);
        claims.extend(claim.map(|v| (path.display().to_string(), v)));
    }
    let found = find_binaries(&roots, &kinds)?;
    let version = agreed_version(&found, paths)?;
    for (claimant, claimed) in claims {
        if claimed != version {
            return Err(ReleaseError::WrongClaim {
                claimant,
                claimed,
                reported: version,
            });
        }
    }
    required(&found, version, paths, &kinds)?;
    let changed = install_found(etcd_dir, version, &found)?;
    Ok(Added {
        version,
        dir: etcd_dir.join(version.to_string()),
        binaries: found.iter().map(|f| f.name).collect(),
        changed,
    })
}

/// Each source as it will be read: a directory as it is; a file copied into the
/// scratch directory first, so that the bytes whose digest is checked are the bytes
/// unpacked (the file given could change in between).
fn stage(
    paths: &[PathBuf],
    kinds: &[SourceKind],
    work: &Scratch,
) -> Result<Vec<PathBuf>, ReleaseError> {
    let mut staged = Vec::new();
    for (i, (path, kind)) in paths.iter().zip(kinds).enumerate() {
        if *kind == SourceKind::Directory {
            staged.push(path.clone());
            continue;
        }
        let bytes = read_bounded(path)?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let copy = work.0.join(format!("source-{i}-{name}"));
        fs::write(&copy, bytes).map_err(|error| ReleaseError::Io {
            path: copy.clone(),
            what: "cannot copy it into a scratch directory",
            error,
        })?;
        staged.push(copy);
    }
    Ok(staged)
}

/// Every file source's digest (of its staged copy, named by the path given), checked
/// before anything is unpacked.
fn check_digests(
    paths: &[PathBuf],
    staged: &[PathBuf],
    kinds: &[SourceKind],
    sha256: &[String],
) -> Result<(), ReleaseError> {
    let files: Vec<(&PathBuf, &PathBuf)> = paths
        .iter()
        .zip(staged)
        .zip(kinds)
        .filter(|(_, k)| **k != SourceKind::Directory)
        .map(|(p, _)| p)
        .collect();
    if sha256.is_empty() {
        return Ok(());
    }
    if sha256.len() != files.len() {
        return Err(ReleaseError::DigestCount {
            given: sha256.len(),
            files: files.len(),
        });
    }
    for ((path, copy), digest) in files.into_iter().zip(sha256) {
        let hex = digest.len() == 64 && digest.bytes().all(|c| c.is_ascii_hexdigit());
        if !hex {
            return Err(ReleaseError::BadDigest {
                digest: digest.clone(),
            });
        }
        let actual = install::sha256_hex(&read_bounded(copy)?);
        if actual != digest.to_ascii_lowercase() {
            return Err(ReleaseError::Mismatch {
                path: path.clone(),
                expected: digest.to_ascii_lowercase(),
                actual,
            });
        }
    }
    Ok(())
}

/// Reads a whole source file, at most `MAX_SOURCE_BYTES`.
fn read_bounded(path: &Path) -> Result<Vec<u8>, ReleaseError> {
    let io_err = |what, error| ReleaseError::Io {
        path: path.to_path_buf(),
        what,
        error,
    };
    let bytes = fs::metadata(path)
        .map_err(|e| io_err("cannot read it", e))?
        .len();
    if bytes > MAX_SOURCE_BYTES {
        return Err(ReleaseError::TooLarge {
            path: path.to_path_buf(),
            bytes,
        });
    }
    fs::read(path).map_err(|e| io_err("cannot read it", e))
}

/// A scratch directory beside the installs (the same file system), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(etcd_dir: &Path) -> Result<Scratch, ReleaseError> {
        let dir = etcd_dir.join(format!(".adding-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|error| ReleaseError::Io {
            path: dir.clone(),
            what: "cannot create a scratch directory",
            error,
        })?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Where the binaries of `path` (read from `file`, its staged copy) are to be looked
/// for, and the version it claims: a directory as it is; a tarball or a package
/// unpacked into `into`.
fn unpack(
    path: &Path,
    file: &Path,
    kind: &SourceKind,
    into: &Path,
) -> Result<(PathBuf, Option<Version>), ReleaseError> {
    let mkdir = |error| ReleaseError::Io {
        path: into.to_path_buf(),
        what: "cannot create a scratch directory",
        error,
    };
    match kind {
        SourceKind::Directory => Ok((path.to_path_buf(), None)),
        SourceKind::Tarball(claim) => {
            fs::create_dir_all(into).map_err(mkdir)?;
            let mut tar = Command::new("tar");
            tar.arg("-xzf").arg(file).arg("-C").arg(into);
            run_tool("tar", path, tar, UNPACK_TIMEOUT_MS)?;
            Ok((into.to_path_buf(), *claim))
        }
        SourceKind::Debian => {
            fs::create_dir_all(into).map_err(mkdir)?;
            let mut field = Command::new("dpkg-deb");
            field.arg("--field").arg(file).arg("Version");
            let out = run_tool("dpkg-deb", path, field, UNPACK_TIMEOUT_MS)?;
            let claim = debian_claim(&out).ok_or_else(|| ReleaseError::Tool {
                tool: "dpkg-deb",
                path: path.to_path_buf(),
                message: format!("its package version {:?} names no etcd version", out.trim()),
            })?;
            let mut extract = Command::new("dpkg-deb");
            extract.arg("--extract").arg(file).arg(into);
            run_tool("dpkg-deb", path, extract, UNPACK_TIMEOUT_MS)?;
            // Debian's binaries are in usr/bin (its etc/ holds an init script of the
            // same name).
            Ok((into.join("usr").join("bin"), Some(claim)))
        }
    }
}

/// Runs an unpacking tool on `path`; its standard output.
fn run_tool(
    tool: &'static str,
    path: &Path,
    cmd: Command,
    timeout_ms: u64,
) -> Result<String, ReleaseError> {
    let failed = |message: String| ReleaseError::Tool {
        tool,
        path: path.to_path_buf(),
        message,
    };
    let out = run_bounded(cmd, timeout_ms).map_err(failed)?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(failed(format!("{}: {}", out.status, err.trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd` to its end, at most `timeout_ms` (then it is killed).
fn run_bounded(mut cmd: Command, timeout_ms: u64) -> Result<std::process::Output, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().map_err(|e| format!("cannot run it: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_millis(timeout_ms)) {
        Ok(out) => out.map_err(|e| e.to_string()),
        Err(_) => {
            // SAFETY of the pid: the child is not reaped until its waiting thread
            // sees it end, so the pid still names it.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            Err(format!("no end within {timeout_ms} ms (killed)"))
        }
    }
}

/// One binary of the release, found.
#[derive(Clone, Debug)]
struct Found {
    name: &'static str,
    path: PathBuf,
    reports: Version,
}

/// Each of etcd's binaries found in `roots` (at most `MAX_SEARCH_DEPTH` below), with
/// the version it reports. A binary in two sources is refused.
fn find_binaries(roots: &[PathBuf], kinds: &[SourceKind]) -> Result<Vec<Found>, ReleaseError> {
    let mut found: Vec<Found> = Vec::new();
    for name in install::BINARY_NAMES {
        for (root, kind) in roots.iter().zip(kinds) {
            // A directory given is the release itself, and a package's usr/bin: only
            // their own files count. A tarball has its binaries a directory down.
            let depth = match kind {
                SourceKind::Tarball(_) => MAX_SEARCH_DEPTH,
                SourceKind::Directory | SourceKind::Debian => 0,
            };
            let Some(path) = search(root, name, depth) else {
                continue;
            };
            if let Some(first) = found.iter().find(|f| f.name == name) {
                return Err(ReleaseError::Twice {
                    binary: name,
                    first: first.path.clone(),
                    second: path,
                });
            }
            let reports = reported_version(name, &path)?;
            found.push(Found {
                name,
                path,
                reports,
            });
        }
    }
    Ok(found)
}

/// The first executable regular file named `name` at most `depth` directories below
/// `dir`, in name order.
fn search(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let here = dir.join(name);
    // Executable files only: a package also carries `etc/default/etcd`, a config file.
    if fs::metadata(&here).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) {
        return Some(here);
    }
    if depth == 0 {
        return None;
    }
    let mut subdirs: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    subdirs.sort();
    subdirs
        .into_iter()
        .find_map(|d| search(&d, name, depth - 1))
}

/// What `name` at `path` says its version is: `etcd --version` prints `etcd Version:
/// 3.5.30`, `etcdctl version` prints `etcdctl version: 3.5.30`, `etcdutl version`
/// prints `etcdutl version: 3.5.30` (3.4's etcdctl too, with ETCDCTL_API=3).
pub fn reported_version(name: &str, path: &Path) -> Result<Version, ReleaseError> {
    let mut cmd = Command::new(path);
    cmd.arg(if name == "etcd" {
        "--version"
    } else {
        "version"
    })
    .env("ETCDCTL_API", "3");
    let does_not_run = |message: String| ReleaseError::DoesNotRun {
        path: path.to_path_buf(),
        message,
    };
    let out = run_bounded(cmd, VERSION_TIMEOUT_MS).map_err(does_not_run)?;
    let text =
        String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(MAX_VERSION_OUTPUT_BYTES)])
            .into_owned();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(does_not_run(format!("{}: {}", out.status, err.trim())));
    }
    let prefix = format!("{name} version:");
    text.lines()
        .find_map(|l| {
            let l = l.trim();
            let rest = l.get(..prefix.len())?;
            rest.eq_ignore_ascii_case(&prefix)
                .then(|| l[prefix.len()..].trim().parse().ok())
                .flatten()
        })
        .ok_or_else(|| does_not_run(format!("it printed no {prefix:?} line: {:?}", text.trim())))
}

/// The one version every binary found reports.
fn agreed_version(found: &[Found], paths: &[PathBuf]) -> Result<Version, ReleaseError> {
    let Some(first) = found.first() else {
        return Err(ReleaseError::Missing {
            binary: "etcd",
            sources: listed(paths),
            hint: " (an etcd release holds etcd, etcdctl and, from 3.5, etcdutl)",
        });
    };
    if found.iter().all(|f| f.reports == first.reports) {
        return Ok(first.reports);
    }
    let which = found
        .iter()
        .map(|f| format!("{} reports {}", f.path.display(), f.reports))
        .collect::<Vec<_>>()
        .join(", ");
    Err(ReleaseError::Disagree { which })
}

/// etcd and etcdctl always; etcdutl from 3.5 (it restores snapshots there).
fn required(
    found: &[Found],
    version: Version,
    paths: &[PathBuf],
    kinds: &[SourceKind],
) -> Result<(), ReleaseError> {
    let mut needed = vec!["etcd", "etcdctl"];
    if version >= Version::new(3, 5, 0) {
        needed.push("etcdutl");
    }
    let debian = kinds.contains(&SourceKind::Debian);
    for binary in needed {
        if found.iter().any(|f| f.name == binary) {
            continue;
        }
        let hint = match (binary, debian) {
            ("etcdctl", true) => {
                ": Debian puts it in the etcd-client package; give that package too"
            }
            (_, true) => {
                ": Debian puts etcd and etcdutl in the etcd-server package; give that package too"
            }
            _ => "",
        };
        return Err(ReleaseError::Missing {
            binary,
            sources: listed(paths),
            hint,
        });
    }
    Ok(())
}

/// The paths, for an error.
fn listed(paths: &[PathBuf]) -> String {
    let all: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    all.join(", ")
}

/// Installs the binaries found as `version`; whether anything changed.
fn install_found(etcd_dir: &Path, version: Version, found: &[Found]) -> Result<bool, ReleaseError> {
    let mut contents = Vec::new();
    for f in found {
        contents.push(read_bounded(&f.path)?);
    }
    let digests: Vec<String> = contents.iter().map(|c| install::sha256_hex(c)).collect();
    let binaries: Vec<Binary<'_>> = found
        .iter()
        .zip(&contents)
        .zip(&digests)
        .map(|((f, content), sha256)| Binary {
            name: f.name,
            sha256,
            content,
        })
        .collect();
    Ok(install::install(etcd_dir, &version.to_string(), &binaries)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_read_from_names_and_package_versions() {
        let v = |s: &str| s.parse::<Version>().ok();
        assert_eq!(
            tarball_claim("etcd-v3.5.30-linux-amd64.tar.gz"),
            v("3.5.30")
        );
        assert_eq!(tarball_claim("etcd-v3.6.4-linux-arm64.tar.gz"), v("3.6.4"));
        assert_eq!(tarball_claim("etcd.tar.gz"), None);
        assert_eq!(tarball_claim("etcd-vnext-linux-amd64.tar.gz"), None);
        assert_eq!(debian_claim("3.5.30-2"), v("3.5.30"));
        assert_eq!(debian_claim("1:3.5.16+dfsg-4"), v("3.5.16"));
        assert_eq!(debian_claim("3.4.23-4+b1"), v("3.4.23"));
        assert_eq!(debian_claim("garbage"), None);
    }

    #[test]
    fn a_source_is_told_by_its_kind_and_name() {
        let d = tempfile::tempdir().unwrap();
        let file = |n: &str| {
            let p = d.path().join(n);
            fs::write(&p, b"x").unwrap();
            p
        };
        assert_eq!(SourceKind::of(d.path()).unwrap(), SourceKind::Directory);
        assert_eq!(
            SourceKind::of(&file("etcd-v3.5.30-linux-amd64.tar.gz")).unwrap(),
            SourceKind::Tarball("3.5.30".parse().ok())
        );
        assert_eq!(SourceKind::of(&file("e.deb")).unwrap(), SourceKind::Debian);
        let e = SourceKind::of(&file("etcd.zip")).unwrap_err();
        assert!(e.to_string().contains("neither a directory"), "{e}");
        let e = SourceKind::of(&d.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    /// A fake etcd release: shell scripts that print the version lines etcd's do.
    fn fake_release(dir: &Path, etcd: &str, etcdctl: &str, etcdutl: Option<&str>) {
        use std::os::unix::fs::PermissionsExt;
        fs::create_dir_all(dir).unwrap();
        let mut bins = vec![
            ("etcd", format!("etcd Version: {etcd}\nGit SHA: x\n")),
            (
                "etcdctl",
                format!("etcdctl version: {etcdctl}\nAPI version: 3.5\n"),
            ),
        ];
        if let Some(u) = etcdutl {
            bins.push((
                "etcdutl",
                format!("etcdutl version: {u}\nAPI version: 3.5\n"),
            ));
        }
        for (name, out) in bins {
            let p = dir.join(name);
            fs::write(
                &p,
                format!("#!/bin/sh\nprintf '{}'\n", out.replace('\n', "\\n")),
            )
            .unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    #[test]
    fn a_directory_is_added_once_and_its_versions_must_agree() {
        let d = tempfile::tempdir().unwrap();
        let etcd_dir = d.path().join("etcd");
        let src = d.path().join("src");
        fake_release(&src, "3.5.99", "3.5.99", Some("3.5.99"));
        let added = add(&etcd_dir, std::slice::from_ref(&src), &[], None).unwrap();
        assert_eq!(added.version, Version::new(3, 5, 99));
        assert!(added.changed);
        assert_eq!(added.binaries, vec!["etcd", "etcdctl", "etcdutl"]);
        assert!(etcd_dir.join("3.5.99/etcdutl").is_file());
        // Again: already there, nothing changed, no scratch directory left.
        assert!(
            !add(&etcd_dir, std::slice::from_ref(&src), &[], None)
                .unwrap()
                .changed
        );
        let left: Vec<_> = fs::read_dir(&etcd_dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");

        let claimed = Some(Version::new(3, 5, 98));
        let e = add(&etcd_dir, std::slice::from_ref(&src), &[], claimed).unwrap_err();
        assert!(matches!(e, ReleaseError::WrongClaim { .. }), "{e}");

        let odd = d.path().join("odd");
        fake_release(&odd, "3.5.97", "3.5.96", Some("3.5.97"));
        let e = add(&etcd_dir, &[odd], &[], None).unwrap_err();
        assert!(e.to_string().contains("disagree"), "{e}");
        assert!(!etcd_dir.join("3.5.97").exists());

        let no_util = d.path().join("no-util");
        fake_release(&no_util, "3.5.95", "3.5.95", None);
        let e = add(&etcd_dir, std::slice::from_ref(&no_util), &[], None).unwrap_err();
        assert!(e.to_string().contains("no etcdutl"), "{e}");
        fake_release(&no_util, "3.4.95", "3.4.95", None);
        assert!(add(&etcd_dir, &[no_util], &[], None).unwrap().changed);
    }

    #[test]
    fn digests_are_checked_before_anything_is_unpacked() {
        let d = tempfile::tempdir().unwrap();
        let tarball = d.path().join("etcd-v3.5.99-linux-amd64.tar.gz");
        fs::write(&tarball, b"not a tarball").unwrap();
        let etcd_dir = d.path().join("etcd");
        let paths = [tarball.clone()];
        let wrong = install::sha256_hex(b"other");
        let e = add(&etcd_dir, &paths, &[wrong], None).unwrap_err();
        assert!(matches!(e, ReleaseError::Mismatch { .. }), "{e}");
        let e = add(&etcd_dir, &paths, &["abc".into()], None).unwrap_err();
        assert!(matches!(e, ReleaseError::BadDigest { .. }), "{e}");
        let e = add(&etcd_dir, &paths, &["a".repeat(64), "b".repeat(64)], None).unwrap_err();
        assert!(matches!(e, ReleaseError::DigestCount { .. }), "{e}");
        // The right digest: unpacking is tried, and tar's own words say why it fails.
        let right = install::sha256_hex(b"not a tarball");
        let e = add(&etcd_dir, &paths, &[right], None).unwrap_err();
        assert!(matches!(e, ReleaseError::Tool { tool: "tar", .. }), "{e}");
        assert!(!etcd_dir.join("3.5.99").exists());
    }

    #[test]
    fn a_tarball_in_etcds_layout_is_added() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("etcd-v3.5.99-linux-amd64");
        fake_release(&top, "3.5.99", "3.5.99", Some("3.5.99"));
        let tarball = d.path().join("etcd-v3.5.99-linux-amd64.tar.gz");
        let ok = Command::new("tar")
            .arg("-czf")
            .arg(&tarball)
            .arg("-C")
            .arg(d.path())
            .arg("etcd-v3.5.99-linux-amd64")
            .status()
            .unwrap();
        assert!(ok.success());
        let etcd_dir = d.path().join("etcd");
        let sum = install::sha256_hex(&fs::read(&tarball).unwrap());
        let added = add(&etcd_dir, std::slice::from_ref(&tarball), &[sum], None).unwrap();
        assert_eq!(added.version, Version::new(3, 5, 99));
        // Its name claims another version than its binaries report: refused.
        let renamed = d.path().join("etcd-v3.5.98-linux-amd64.tar.gz");
        fs::copy(&tarball, &renamed).unwrap();
        let e = add(&etcd_dir, &[renamed], &[], None).unwrap_err();
        assert!(e.to_string().contains("says etcd 3.5.98"), "{e}");
    }
}
