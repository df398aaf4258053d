//! `spec.backup.s3`: how one control plane's snapshot bucket is reached, so that two
//! control planes can keep snapshots in two stores, and nobody has to give the
//! controller's whole environment the credentials of every bucket.
//!
//! Invariant: the spec never holds a secret. It names where the credentials are (a
//! file, or a prefix of environment variables) and the process that opens the store
//! (the controller, `quorum snapshot`, `restore`) reads them there; what the spec leaves
//! out comes from the environment (`AWS_*`), as before.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `spec.backup.s3`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3Access {
    /// The S3 endpoint, `https://host[:port]` (or `http://` with `allowHttp`); none:
    /// `AWS_ENDPOINT`, else AWS itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The region; none: `AWS_DEFAULT_REGION`, else us-east-1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Allow a plain-HTTP endpoint (a test or a private network only).
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_http: bool,
    /// Where the access key is; none: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsRef>,
}

/// Where an S3 access key is read from, by the process that opens the store: one of
/// `file` and `env` (a map in a manifest, `credentials: {file: /etc/quorum/s3.env}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialsRef {
    /// A file of `KEY=VALUE` lines (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, and
    /// `AWS_SESSION_TOKEN` if any), readable by its owner only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// A prefix `P` of environment variables: `P_ACCESS_KEY_ID`,
    /// `P_SECRET_ACCESS_KEY` (and `P_SESSION_TOKEN` if any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

/// What a `CredentialsRef` names, once it is known to name exactly one thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialsSource<'a> {
    File(&'a std::path::Path),
    Env(&'a str),
}

impl CredentialsRef {
    /// A reference to a file.
    pub fn file(path: impl Into<PathBuf>) -> CredentialsRef {
        CredentialsRef {
            file: Some(path.into()),
            env: None,
        }
    }

    /// A reference to environment variables.
    pub fn env(prefix: impl Into<String>) -> CredentialsRef {
        CredentialsRef {
            file: None,
            env: Some(prefix.into()),
        }
    }

    /// The one thing it names, or why it does not name exactly one.
    pub fn source(&self) -> Result<CredentialsSource<'_>, String> {
        match (&self.file, &self.env) {
            (Some(f), None) => Ok(CredentialsSource::File(f)),
            (None, Some(e)) => Ok(CredentialsSource::Env(e)),
            _ => Err("backup.s3.credentials names one of file and env".into()),
        }
    }
}

/// The variables a `CredentialsRef::Env` prefix names, in order: key id, secret, token.
pub fn env_names(prefix: &str) -> [String; 3] {
    [
        format!("{prefix}_ACCESS_KEY_ID"),
        format!("{prefix}_SECRET_ACCESS_KEY"),
        format!("{prefix}_SESSION_TOKEN"),
    ]
}

/// The keys a credentials file holds, in order: key id, secret, token.
pub const FILE_KEYS: [&str; 3] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
];

fn is_false(b: &bool) -> bool {
    !*b
}

impl S3Access {
    /// Why it cannot be used, in words naming the field (no I/O: whether the file or
    /// the variables exist is checked where the store is opened, and at `apply`).
    pub fn check(&self, store: Option<&str>) -> Result<(), String> {
        if !store.is_some_and(|s| s.starts_with("s3://")) {
            return Err(
                "backup.s3 says how to reach an S3 bucket, and backup.store names none (s3://bucket/prefix)"
                    .into(),
            );
        }
        if let Some(e) = &self.endpoint {
            let http = e.starts_with("http://");
            if !http && !e.starts_with("https://") {
                return Err(format!(
                    "backup.s3.endpoint {e:?} is not an http(s) URL: use https://host[:port]"
                ));
            }
            if http && !self.allow_http {
                return Err(format!(
                    "backup.s3.endpoint {e:?} is plain HTTP: snapshots hold every key in the clear; use https://, or set backup.s3.allowHttp: true for a test or a private network"
                ));
            }
        }
        let Some(c) = &self.credentials else {
            return Ok(());
        };
        match c.source()? {
            CredentialsSource::File(p) if !p.is_absolute() => Err(format!(
                "backup.s3.credentials.file {:?} must be an absolute path (the controller reads it, from its own directory)",
                p.display()
            )),
            CredentialsSource::Env(prefix) if !valid_prefix(prefix) => Err(format!(
                "backup.s3.credentials.env {prefix:?} must be a variable name prefix: capital letters, digits and '_' (PROD_S3 reads PROD_S3_ACCESS_KEY_ID and PROD_S3_SECRET_ACCESS_KEY)"
            )),
            _ => Ok(()),
        }
    }
}

fn valid_prefix(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with(|c: char| c.is_ascii_digit())
        && p.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_access_is_checked_by_field() {
        let s3 = Some("s3://b-1/p");
        let ok = |a: &S3Access| a.check(s3);
        let table: Vec<(S3Access, Option<&str>, Option<&str>)> = vec![
            (S3Access::default(), s3, None),
            (S3Access::default(), None, Some("backup.store names none")),
            (
                S3Access {
                    endpoint: Some("minio:9000".into()),
                    ..Default::default()
                },
                s3,
                Some("backup.s3.endpoint \"minio:9000\" is not an http(s) URL"),
            ),
            (
                S3Access {
                    endpoint: Some("http://127.0.0.1:9000".into()),
                    ..Default::default()
                },
                s3,
                Some("set backup.s3.allowHttp: true"),
            ),
            (
                S3Access {
                    endpoint: Some("http://127.0.0.1:9000".into()),
                    allow_http: true,
                    ..Default::default()
                },
                s3,
                None,
            ),
            (
                S3Access {
                    credentials: Some(CredentialsRef::file("s3.env")),
                    ..Default::default()
                },
                s3,
                Some("must be an absolute path"),
            ),
            (
                S3Access {
                    credentials: Some(CredentialsRef::env("prod-s3")),
                    ..Default::default()
                },
                s3,
                Some("must be a variable name prefix"),
            ),
            (
                S3Access {
                    credentials: Some(CredentialsRef::env("PROD_S3")),
                    ..Default::default()
                },
                s3,
                None,
            ),
            (
                S3Access {
                    credentials: Some(CredentialsRef::default()),
                    ..Default::default()
                },
                s3,
                Some("names one of file and env"),
            ),
        ];
        for (i, (a, store, want)) in table.into_iter().enumerate() {
            let got = a.check(store);
            match (got, want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "row {i}: {e}"),
                (g, w) => panic!("row {i}: got {g:?}, want {w:?}"),
            }
        }
        assert!(ok(&S3Access::default()).is_ok());
    }

    #[test]
    fn s3_access_reads_as_manifests_write_it() {
        let text = r#"{"endpoint": "https://s3.example:9000", "region": "eu-1", "credentials": {"file": "/etc/quorum/prod.env"}}"#;
        let a: S3Access = serde_json::from_str(text).unwrap();
        assert_eq!(
            a.credentials,
            Some(CredentialsRef::file("/etc/quorum/prod.env"))
        );
        let a: S3Access = serde_json::from_str(r#"{"credentials": {"env": "PROD_S3"}}"#).unwrap();
        assert_eq!(a.credentials, Some(CredentialsRef::env("PROD_S3")));
        assert!(serde_json::from_str::<S3Access>(r#"{"endpont": "x"}"#).is_err());
    }
}
