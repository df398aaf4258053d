//! Reading `spec.backup.s3` (`quorum_core::s3access`) where the store is opened: the
//! access key from the file or the variables it names, applied over what the
//! environment gives (`AWS_*`). Also what `apply` asks before it records a spec, so a
//! missing file or a file others can read is said then, not at the first snapshot.

use object_store::aws::AmazonS3Builder;
use quorum_core::s3access::{env_names, CredentialsRef, CredentialsSource, S3Access, FILE_KEYS};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The most bytes a credentials file may hold: a few keys, never a large file.
const MAX_CREDENTIALS_BYTES: u64 = 64 * 1024;

/// An S3 access key, as read.
pub struct AccessKey {
    pub id: String,
    pub secret: String,
    pub token: Option<String>,
}

impl std::fmt::Debug for AccessKey {
    /// Never the secret or the token, in logs or errors.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AccessKey {{ id: {:?}, .. }}", self.id)
    }
}

/// Reads the access key `r` names, or says why it cannot (naming the file or the
/// variables, never a value).
pub fn read_key(r: &CredentialsRef) -> Result<AccessKey, String> {
    match r.source()? {
        CredentialsSource::File(path) => read_file(path),
        CredentialsSource::Env(prefix) => {
            let [id, secret, token] = env_names(prefix);
            let get = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
            match (get(&id), get(&secret)) {
                (Some(i), Some(s)) => Ok(AccessKey {
                    id: i,
                    secret: s,
                    token: get(&token),
                }),
                _ => Err(format!(
                    "backup.s3.credentials.env: {id} and {secret} are not both set in this process's environment"
                )),
            }
        }
    }
}

fn read_file(path: &Path) -> Result<AccessKey, String> {
    let shown = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| format!("backup.s3.credentials.file {shown}: {e}"))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "backup.s3.credentials.file {shown} can be read by others (mode {:o}): `chmod 600 {shown}`",
            meta.permissions().mode() & 0o777
        ));
    }
    if meta.len() > MAX_CREDENTIALS_BYTES {
        return Err(format!(
            "backup.s3.credentials.file {shown} is {} bytes, more than a credentials file holds ({MAX_CREDENTIALS_BYTES})",
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("backup.s3.credentials.file {shown}: {e}"))?;
    let value = |key: &str| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.strip_prefix("export ").unwrap_or(l).split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
            .filter(|v| !v.is_empty())
    };
    let [id, secret, token] = FILE_KEYS;
    match (value(id), value(secret)) {
        (Some(i), Some(s)) => Ok(AccessKey {
            id: i,
            secret: s,
            token: value(token),
        }),
        _ => Err(format!(
            "backup.s3.credentials.file {shown} has no {id}=… and {secret}=… lines"
        )),
    }
}

/// `builder` (from the environment) with what `access` says over it.
pub fn apply(builder: AmazonS3Builder, access: &S3Access) -> Result<AmazonS3Builder, String> {
    let mut b = builder;
    if let Some(e) = &access.endpoint {
        b = b.with_endpoint(e);
    }
    if let Some(r) = &access.region {
        b = b.with_region(r);
    }
    if access.allow_http {
        b = b.with_allow_http(true);
    }
    if let Some(r) = &access.credentials {
        let key = read_key(r)?;
        b = b
            .with_access_key_id(key.id)
            .with_secret_access_key(key.secret);
        if let Some(t) = key.token {
            b = b.with_token(t);
        }
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(mode: u32, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s3.env");
        std::fs::File::create(&p)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, p)
    }

    #[test]
    fn a_credentials_file_is_read_only_when_private_and_whole() {
        let (_d, p) = file(
            0o600,
            "# prod\nexport AWS_ACCESS_KEY_ID=AKIA1\nAWS_SECRET_ACCESS_KEY=\"s3cr3t\"\n",
        );
        let k = read_key(&CredentialsRef::file(p)).unwrap();
        assert_eq!((k.id.as_str(), k.secret.as_str()), ("AKIA1", "s3cr3t"));
        assert_eq!(k.token, None);
        assert!(!format!("{k:?}").contains("s3cr3t"));
        let (_d, p) = file(0o644, "AWS_ACCESS_KEY_ID=a\nAWS_SECRET_ACCESS_KEY=b\n");
        let e = read_key(&CredentialsRef::file(p)).unwrap_err();
        assert!(
            e.contains("can be read by others (mode 644)") && e.contains("chmod 600"),
            "{e}"
        );
        let (_d, p) = file(0o600, "AWS_ACCESS_KEY_ID=a\n");
        let e = read_key(&CredentialsRef::file(p)).unwrap_err();
        assert!(
            e.contains("has no AWS_ACCESS_KEY_ID=… and AWS_SECRET_ACCESS_KEY=… lines"),
            "{e}"
        );
        assert!(!e.contains("=a"), "never a value: {e}");
        let e = read_key(&CredentialsRef::file("/nonexistent/s3.env")).unwrap_err();
        assert!(e.contains("/nonexistent/s3.env"), "{e}");
    }

    #[test]
    fn credentials_from_variables_name_what_is_missing() {
        let e = read_key(&CredentialsRef::env("QUORUM_TEST_NONE_S3")).unwrap_err();
        assert!(
            e.contains(
                "QUORUM_TEST_NONE_S3_ACCESS_KEY_ID and QUORUM_TEST_NONE_S3_SECRET_ACCESS_KEY"
            ),
            "{e}"
        );
    }
}
