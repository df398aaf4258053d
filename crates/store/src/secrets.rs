//! Envelope encryption of the secrets quorum keeps in its store (every control plane's
//! CA private key), in both backends.
//!
//! Each secret is sealed on its own: a fresh 256-bit data key encrypts it (AES-256-GCM,
//! `ring`), and the data key is wrapped by a key-encryption key (AES-256-GCM again). The
//! record's identity (`ca-key/<control plane>`) is the associated data of both, so a
//! sealed value copied into another record does not open. What is stored is one line
//! of text, `quorum-sealed:v1:<key id>:<hex nonce+wrapped data key>:<hex nonce+ciphertext>`,
//! in the field that held the PEM before.
//!
//! The key-encryption key comes from a `KeyProvider`. The one built is `KeyFile`: a file
//! of its own (`<home>/secrets.key` by default, 0600), created at first use, never
//! written to the store; the store records only its id (`setting/secrets-key-id`), so a
//! process given another file, or none, is refused with what to do instead of sealing
//! with a key the others do not have. A KMS (Vault transit, a cloud KMS) is another
//! `KeyProvider`: the stores never see which.
//!
//! Architecture invariant: the backends store and compare opaque strings; only `Store`
//! (in `lib.rs`) seals and opens, so no backend can write a plaintext key by mistake.

use crate::{Result, StoreError};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use zeroize::Zeroizing;

/// How a sealed value begins.
pub const SEALED_PREFIX: &str = "quorum-sealed:v1:";
/// The setting that names the key-encryption key the store's secrets are sealed with.
pub const KEY_ID_SETTING: &str = "secrets-key-id";
/// The default key file, in the home.
pub const DEFAULT_KEY_FILE: &str = "secrets.key";
/// The environment variable that names another key file (as `--secrets-key-file` does).
pub const KEY_FILE_ENV: &str = "QUORUM_SECRETS_KEY_FILE";
/// Bytes of a key (AES-256).
const KEY_BYTES: usize = 32;
/// The most keys a key file may hold (the current one and those still being retired).
const MAX_KEYS: usize = 8;
/// The most bytes a key file may have (a few lines).
const MAX_KEY_FILE_BYTES: u64 = 4_096;

/// Where the key-encryption key comes from: a key file (built), or a KMS.
pub trait KeyProvider: Send + Sync {
    /// Where the keys are, for messages (a path, a KMS key name).
    fn location(&self) -> String;
    /// The id of the key new data keys are wrapped with; `create` makes one if there is
    /// none yet (a key file at first use).
    fn current_id(&self, create: bool) -> Result<String>;
    /// Whether the provider holds the key `id`.
    fn holds(&self, id: &str) -> Result<bool>;
    /// Wraps `data_key` with the key `id`, bound to `aad`.
    fn wrap(&self, id: &str, data_key: &[u8], aad: &[u8]) -> Result<Vec<u8>>;
    /// Opens a data key wrapped with the key `id` and bound to `aad`.
    fn unwrap(&self, id: &str, wrapped: &[u8], aad: &[u8]) -> Result<Zeroizing<Vec<u8>>>;
    /// The refusal when `what` (a record, a store's secrets) is sealed with the key `id`
    /// and the provider does not hold it: says which, and what to do.
    fn missing(&self, what: &str, id: &str) -> StoreError;
}

/// A secret sealed for one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    wrapped: Vec<u8>,
    ciphertext: Vec<u8>,
}

impl Sealed {
    /// Parses a stored value; `None` when it is not sealed (a plaintext PEM of a state
    /// written before secrets were sealed).
    pub fn parse(stored: &str) -> Option<std::result::Result<Sealed, String>> {
        let rest = stored.trim().strip_prefix(SEALED_PREFIX)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let [key_id, wrapped, ciphertext] = parts[..] else {
            return Some(Err(format!(
                "a sealed value has {} parts, not 3",
                parts.len()
            )));
        };
        let (Some(wrapped), Some(ciphertext)) = (from_hex(wrapped), from_hex(ciphertext)) else {
            return Some(Err("a sealed value is not hex".into()));
        };
        if key_id.is_empty() || wrapped.len() <= NONCE_LEN || ciphertext.len() <= NONCE_LEN {
            return Some(Err("a sealed value is truncated".into()));
        }
        Some(Ok(Sealed {
            key_id: key_id.to_string(),
            wrapped,
            ciphertext,
        }))
    }

    pub fn encode(&self) -> String {
        format!(
            "{SEALED_PREFIX}{}:{}:{}",
            self.key_id,
            to_hex(&self.wrapped),
            to_hex(&self.ciphertext)
        )
    }
}

/// The associated data of a data key: it opens only for this record and this key.
fn wrap_aad(key_id: &str, record: &str) -> Vec<u8> {
    format!("quorum data key|{key_id}|{record}").into_bytes()
}

fn secret_aad(record: &str) -> Vec<u8> {
    format!("quorum secret|{record}").into_bytes()
}

/// Seals `plaintext` for `record` (its identity, e.g. `ca-key/prod`) with the provider's
/// current key.
pub fn seal(p: &dyn KeyProvider, key_id: &str, record: &str, plaintext: &[u8]) -> Result<String> {
    let rng = SystemRandom::new();
    let mut data_key = Zeroizing::new([0u8; KEY_BYTES]);
    rng.fill(data_key.as_mut())
        .map_err(|_| secrets_error("the system's random source failed"))?;
    let wrapped = p.wrap(key_id, data_key.as_ref(), &wrap_aad(key_id, record))?;
    let ciphertext = aead_seal(data_key.as_ref(), plaintext, &secret_aad(record))?;
    Ok(Sealed {
        key_id: key_id.to_string(),
        wrapped,
        ciphertext,
    }
    .encode())
}

/// Opens a sealed value of `record`. A value sealed for another record, or damaged, is
/// refused (`StoreError::Secrets`).
pub fn open(p: &dyn KeyProvider, record: &str, s: &Sealed) -> Result<Zeroizing<Vec<u8>>> {
    if !p.holds(&s.key_id)? {
        return Err(p.missing(record, &s.key_id));
    }
    let data_key = p
        .unwrap(&s.key_id, &s.wrapped, &wrap_aad(&s.key_id, record))
        .map_err(|_| sealed_for_another(record))?;
    aead_open(&data_key, &s.ciphertext, &secret_aad(record)).map_err(|_| sealed_for_another(record))
}

/// Unwraps a sealed value's data key with its key and wraps it again with `new_key`:
/// the ciphertext stays as it is.
pub fn rewrap(p: &dyn KeyProvider, record: &str, s: &Sealed, new_key: &str) -> Result<String> {
    let data_key = p
        .unwrap(&s.key_id, &s.wrapped, &wrap_aad(&s.key_id, record))
        .map_err(|_| sealed_for_another(record))?;
    let wrapped = p.wrap(new_key, &data_key, &wrap_aad(new_key, record))?;
    Ok(Sealed {
        key_id: new_key.to_string(),
        wrapped,
        ciphertext: s.ciphertext.clone(),
    }
    .encode())
}

fn sealed_for_another(record: &str) -> StoreError {
    secrets_error(format!(
        "the sealed secret of {record} does not open with its key: it was sealed for another \
         record (moved), or it is damaged; quorum did not change it"
    ))
}

pub(crate) fn secrets_error(detail: impl Into<String>) -> StoreError {
    StoreError::Secrets(detail.into())
}

/// AES-256-GCM with a random nonce: `nonce || ciphertext || tag`.
fn aead_seal(key: &[u8], plaintext: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
    let k = LessSafeKey::new(
        UnboundKey::new(&AES_256_GCM, key).map_err(|_| secrets_error("a key is not 256 bits"))?,
    );
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| secrets_error("the system's random source failed"))?;
    let mut buf = plaintext.to_vec();
    k.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad),
        &mut buf,
    )
    .map_err(|_| secrets_error("sealing failed"))?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&buf);
    Ok(out)
}

fn aead_open(key: &[u8], sealed: &[u8], aad: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    let k = LessSafeKey::new(
        UnboundKey::new(&AES_256_GCM, key).map_err(|_| secrets_error("a key is not 256 bits"))?,
    );
    if sealed.len() <= NONCE_LEN {
        return Err(secrets_error("a sealed value is truncated"));
    }
    let (nonce, rest) = sealed.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| secrets_error("bad nonce"))?;
    let mut buf = Zeroizing::new(rest.to_vec());
    let n = k
        .open_in_place(nonce, Aad::from(aad), buf.as_mut())
        .map_err(|_| secrets_error("does not open"))?
        .len();
    buf.truncate(n);
    Ok(buf)
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A key's id: the first 8 bytes of its SHA-256, in hex. Says which key sealed what
/// without saying anything of the key.
fn key_id(key: &[u8]) -> String {
    to_hex(&ring::digest::digest(&ring::digest::SHA256, key).as_ref()[..8])
}

/// Keys by id, the current one first.
type Keys = Vec<(String, Zeroizing<Vec<u8>>)>;

/// The key-encryption keys in a file of their own (see the module doc). Format, one key
/// per line, the first the current one:
///
/// ```text
/// # quorum secrets key file: ...
/// key <id> <64 hex digits>
/// ```
pub struct KeyFile {
    path: PathBuf,
    /// May make the file's directory (the home, for the default file); a file named
    /// explicitly must be in a directory that exists, so a mistyped path is an error
    /// rather than a new key.
    make_dir: bool,
    /// The keys as last read (read at first use; again after `add_key`).
    keys: Mutex<Option<Keys>>,
}

impl KeyFile {
    /// The key file at `path`, named explicitly: its directory must exist.
    pub fn at(path: &Path) -> KeyFile {
        KeyFile {
            path: path.to_path_buf(),
            make_dir: false,
            keys: Mutex::new(None),
        }
    }

    /// The key file to use: `explicit`, else `QUORUM_SECRETS_KEY_FILE`, else
    /// `<home>/secrets.key` (whose directory, the home, is made if needed).
    pub fn resolve(home: &Path, explicit: Option<&Path>) -> KeyFile {
        if let Some(p) = explicit {
            return KeyFile::at(p);
        }
        match std::env::var_os(KEY_FILE_ENV) {
            Some(p) if !p.is_empty() => KeyFile::at(Path::new(&p)),
            _ => KeyFile {
                make_dir: true,
                ..KeyFile::at(&home.join(DEFAULT_KEY_FILE))
            },
        }
    }

    /// `<file><suffix>`, beside it.
    fn beside(&self, suffix: &str) -> PathBuf {
        let mut name = self
            .path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        name.push(suffix);
        self.path.with_file_name(name)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Keys>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the file (`None` when it does not exist).
    fn read(&self) -> Result<Option<Keys>> {
        let bad = |why: String| {
            secrets_error(format!(
                "the key file {} {why}; quorum changed nothing",
                self.path.display()
            ))
        };
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(format!("cannot be read: {e}"))),
        };
        if !meta.is_file() {
            return Err(bad(
                "is not a file (a directory?): name the key file itself".to_string(),
            ));
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(format!(
                "has mode {mode:o}: others can read it; run `chmod 600 {}`",
                self.path.display()
            )));
        }
        if meta.len() > MAX_KEY_FILE_BYTES {
            return Err(bad(format!("is {} bytes, not a key file", meta.len())));
        }
        let text = Zeroizing::new(
            std::fs::read_to_string(&self.path).map_err(|e| bad(format!("cannot be read: {e}")))?,
        );
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let parts: Vec<&str> = line.split_whitespace().collect();
            let ["key", id, hex] = parts[..] else {
                return Err(bad(format!("line {} is not `key <id> <hex>`", n + 1)));
            };
            let key = Zeroizing::new(from_hex(hex).unwrap_or_default());
            if key.len() != KEY_BYTES {
                return Err(bad(format!("line {}: the key is not 64 hex digits", n + 1)));
            }
            if key_id(&key) != id {
                return Err(bad(format!(
                    "line {}: the key does not match its id {id}",
                    n + 1
                )));
            }
            keys.push((id.to_string(), key));
        }
        if keys.is_empty() || keys.len() > MAX_KEYS {
            return Err(bad(format!(
                "holds {} keys (1 to {MAX_KEYS} expected)",
                keys.len()
            )));
        }
        Ok(Some(keys))
    }

    /// The keys, read once.
    fn keys(&self) -> Result<Option<Keys>> {
        let mut slot = self.lock();
        if slot.is_none() {
            *slot = self.read()?;
        }
        Ok(slot.clone())
    }

    /// The keys, read again if `id` is not among those read (a rotation by another
    /// process added it to the same file).
    fn keys_with(&self, id: &str) -> Result<Option<Keys>> {
        let keys = self.keys()?;
        if keys
            .as_ref()
            .is_some_and(|ks| ks.iter().any(|(k, _)| k == id))
        {
            return Ok(keys);
        }
        let fresh = self.read()?;
        *self.lock() = fresh.clone();
        Ok(fresh)
    }

    fn key(&self, id: &str) -> Result<Zeroizing<Vec<u8>>> {
        self.keys_with(id)?
            .unwrap_or_default()
            .into_iter()
            .find(|(k, _)| k == id)
            .map(|(_, key)| key)
            .ok_or_else(|| {
                secrets_error(format!(
                    "the key file {} holds no key {id}",
                    self.path.display()
                ))
            })
    }

    /// Makes a new key and puts it first (current), keeping the others. The first key
    /// is published with a hard link, which fails if another process made the file
    /// meanwhile (its key is then used, not replaced); a later one replaces the file
    /// whole (rename), under a lock, so two rotations cannot lose each other's key.
    pub fn add_key(&self) -> Result<String> {
        let _lock = self.exclusive()?;
        let mut key = Zeroizing::new(vec![0u8; KEY_BYTES]);
        SystemRandom::new()
            .fill(key.as_mut())
            .map_err(|_| secrets_error("the system's random source failed"))?;
        let id = key_id(&key);
        let mut keys = self.read()?.unwrap_or_default();
        let first = keys.is_empty();
        keys.insert(0, (id.clone(), key));
        if first {
            if !self.publish_new(&keys)? {
                // Another process made the key file first: use its key.
                let theirs = self.read()?;
                *self.lock() = theirs.clone();
                return theirs
                    .and_then(|ks| ks.first().map(|(k, _)| k.clone()))
                    .ok_or_else(|| secrets_error("the key file vanished while it was made"));
            }
        } else {
            self.replace(&keys)?;
        }
        *self.lock() = Some(keys);
        Ok(id)
    }

    /// Keeps only the key `id` (the others retired).
    pub fn keep_only(&self, id: &str) -> Result<()> {
        let _lock = self.exclusive()?;
        let keys: Vec<_> = self
            .read()?
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k == id)
            .collect();
        if keys.is_empty() {
            return Err(secrets_error(format!(
                "the key file {} holds no key {id}",
                self.path.display()
            )));
        }
        self.replace(&keys)?;
        *self.lock() = Some(keys);
        Ok(())
    }

    /// The key ids in the file, the current one first (read now).
    pub fn ids(&self) -> Result<Vec<String>> {
        Ok(self
            .read()?
            .unwrap_or_default()
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    /// An exclusive lock on `<file>.lock` (flock: released however the process ends),
    /// held while the file changes.
    fn exclusive(&self) -> Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if self.make_dir {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| secrets_error(format!("cannot create {}: {e}", dir.display())))?;
            } else if !dir.is_dir() {
                return Err(secrets_error(format!(
                    "cannot make the key file {}: its directory {} does not exist (a mistyped \
                     --secrets-key-file?); quorum changed nothing",
                    self.path.display(),
                    dir.display()
                )));
            }
        }
        let lock_path = self.beside(".lock");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| secrets_error(format!("cannot open {}: {e}", lock_path.display())))?;
        // SAFETY: flock on a descriptor this function owns; blocks until granted.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(secrets_error(format!(
                "cannot lock {}: {}",
                lock_path.display(),
                std::io::Error::last_os_error()
            )));
        }
        Ok(f)
    }

    /// Writes `keys` to a new temporary file (0600 from the start, synced).
    fn write_tmp(&self, keys: &Keys) -> Result<PathBuf> {
        let io = |what: &str, e: std::io::Error| {
            secrets_error(format!("cannot {what} {}: {e}", self.path.display()))
        };
        let mut text = Zeroizing::new(String::from(
            "# quorum secrets key file: the key-encryption keys of the secrets in quorum's store.\n\
             # Keep it private and back it up apart from the state: without it the CA keys in\n\
             # the store cannot be opened. Every process sharing a store needs the same file.\n",
        ));
        for (id, key) in keys {
            text.push_str(&format!("key {id} {}\n", to_hex(key)));
        }
        let tmp = self.beside(".tmp");
        let _ = std::fs::remove_file(&tmp);
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io("create", e))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| io("write", e))?;
        Ok(tmp)
    }

    /// Publishes the first key file; false if one exists already.
    fn publish_new(&self, keys: &Keys) -> Result<bool> {
        let tmp = self.write_tmp(keys)?;
        let linked = std::fs::hard_link(&tmp, &self.path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(secrets_error(format!(
                "cannot create {}: {e}",
                self.path.display()
            ))),
        }
    }

    /// Replaces the key file whole.
    fn replace(&self, keys: &Keys) -> Result<()> {
        let tmp = self.write_tmp(keys)?;
        std::fs::rename(&tmp, &self.path)
            .map_err(|e| secrets_error(format!("cannot replace {}: {e}", self.path.display())))
    }
}

impl KeyProvider for KeyFile {
    fn location(&self) -> String {
        format!("the key file {}", self.path.display())
    }

    fn current_id(&self, create: bool) -> Result<String> {
        match self.keys()? {
            Some(keys) => Ok(keys[0].0.clone()),
            None if create => self.add_key(),
            None => Err(secrets_error(format!(
                "there is no key file at {}",
                self.path.display()
            ))),
        }
    }

    fn holds(&self, id: &str) -> Result<bool> {
        Ok(self
            .keys_with(id)?
            .is_some_and(|keys| keys.iter().any(|(k, _)| k == id)))
    }

    fn wrap(&self, id: &str, data_key: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
        aead_seal(&self.key(id)?, data_key, aad)
    }

    fn unwrap(&self, id: &str, wrapped: &[u8], aad: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        aead_open(&self.key(id)?, wrapped, aad)
    }

    fn missing(&self, what: &str, id: &str) -> StoreError {
        let why = if self.path.exists() {
            format!(
                "which the key file {} does not hold: it is not the file the others use; give \
                 this process that one",
                self.path.display()
            )
        } else {
            format!(
                "and the key file {} does not exist: restore it from your backup, or give \
                 this process the file the others use",
                self.path.display()
            )
        };
        secrets_error(format!(
            "{what}: sealed with key {id}, {why} (--secrets-key-file FILE, or \
             QUORUM_SECRETS_KEY_FILE); quorum changed nothing"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> (tempfile::TempDir, KeyFile) {
        let dir = tempfile::tempdir().unwrap();
        let f = KeyFile::at(&dir.path().join("secrets.key"));
        (dir, f)
    }

    #[test]
    fn a_sealed_secret_opens_only_for_its_record_and_its_key() {
        let (_d, f) = file();
        let id = f.current_id(true).unwrap();
        let pem = b"-----BEGIN PRIVATE KEY-----\nMIGH...\n-----END PRIVATE KEY-----\n";
        let stored = seal(&f, &id, "ca-key/prod", pem).unwrap();
        assert!(stored.starts_with(SEALED_PREFIX), "{stored}");
        assert!(!stored.contains("PRIVATE KEY"));
        let s = Sealed::parse(&stored).unwrap().unwrap();
        assert_eq!(open(&f, "ca-key/prod", &s).unwrap().as_slice(), pem);
        // Moved to another record: refused.
        let e = open(&f, "ca-key/dev", &s).unwrap_err().to_string();
        assert!(e.contains("sealed for another record"), "{e}");
        // Damaged: refused.
        let mut bad = s.clone();
        let last = bad.ciphertext.len() - 1;
        bad.ciphertext[last] ^= 1;
        assert!(open(&f, "ca-key/prod", &bad).is_err());
        // Two seals of the same secret differ (fresh data key and nonces).
        assert_ne!(seal(&f, &id, "ca-key/prod", pem).unwrap(), stored);
        // Another key file does not hold the key: said so, with what to do.
        let (_d2, other) = file();
        other.current_id(true).unwrap();
        let e = open(&other, "ca-key/prod", &s).unwrap_err().to_string();
        assert!(
            e.contains("does not hold") && e.contains("--secrets-key-file"),
            "{e}"
        );
        // No key file at all: said so.
        let gone = KeyFile::at(&_d2.path().join("gone.key"));
        let e = open(&gone, "ca-key/prod", &s).unwrap_err().to_string();
        assert!(e.contains("does not exist") && e.contains("backup"), "{e}");
    }

    #[test]
    fn a_new_key_rewraps_and_the_old_one_can_then_go() {
        let (_d, f) = file();
        let old = f.current_id(true).unwrap();
        let stored = seal(&f, &old, "ca-key/prod", b"secret").unwrap();
        let new = f.add_key().unwrap();
        assert_ne!(new, old);
        assert_eq!(f.current_id(false).unwrap(), new);
        let s = Sealed::parse(&stored).unwrap().unwrap();
        let again = rewrap(&f, "ca-key/prod", &s, &new).unwrap();
        let s2 = Sealed::parse(&again).unwrap().unwrap();
        assert_eq!(s2.key_id, new);
        f.keep_only(&new).unwrap();
        let reread = KeyFile::at(f.path());
        assert_eq!(
            open(&reread, "ca-key/prod", &s2).unwrap().as_slice(),
            b"secret"
        );
        assert!(open(&reread, "ca-key/prod", &s).is_err());
    }

    #[test]
    fn a_bad_key_file_is_a_clear_error() {
        let (_d, f) = file();
        assert!(f
            .current_id(false)
            .unwrap_err()
            .to_string()
            .contains("no key file"));
        f.current_id(true).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(f.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        for (text, says) in [
            ("key abc 00\n", "not 64 hex digits"),
            ("garbage\n", "is not `key <id> <hex>`"),
            ("# nothing\n", "holds 0 keys"),
            (
                "key 0000000000000000 0000000000000000000000000000000000000000000000000000000000000000\n",
                "does not match its id",
            ),
        ] {
            std::fs::write(f.path(), text).unwrap();
            let e = KeyFile::at(f.path()).current_id(false).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("changed nothing"), "{text}: {e}");
        }
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = KeyFile::at(f.path())
            .current_id(false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("chmod 600"), "{e}");
        // A directory: not advice to chmod it.
        let e = KeyFile::at(_d.path())
            .current_id(false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a file") && !e.contains("chmod"), "{e}");
        // A named file in a directory that does not exist: no new key, no directory.
        let typo = _d.path().join("no-such-dir").join("k");
        let e = KeyFile::at(&typo).current_id(true).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        assert!(!typo.parent().unwrap().exists());
    }

    #[test]
    fn hex_round_trips_and_a_malformed_sealed_value_is_refused() {
        assert_eq!(
            from_hex(&to_hex(&[0, 1, 254, 255])),
            Some(vec![0, 1, 254, 255])
        );
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
        assert!(Sealed::parse("-----BEGIN PRIVATE KEY-----").is_none());
        assert!(Sealed::parse("quorum-sealed:v1:a:b").unwrap().is_err());
        assert!(Sealed::parse("quorum-sealed:v1:id:00:00").unwrap().is_err());
    }
}
