//! Where a command works and what it holds open while it works.

use crate::{status, wait};
use anyhow::Result;
use quorum_clock::now_ms;
use quorum_controller::access::{self, Access};
use quorum_core::{ControlPlane, Version, VersionRequest};
use quorum_etcd::{ClientTls, Timeouts};
use quorum_provider::{default_etcd_dir, installed_versions, LocalProvider};
use quorum_store::{Store, StoreLocation};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a command works: the home (local machines, endpoint files; the embedded
/// store) and the store.
#[derive(Clone)]
pub struct Place {
    pub home: PathBuf,
    pub store: StoreLocation,
    /// The key file of the store's secrets (`--secrets-key-file`); `None`:
    /// `QUORUM_SECRETS_KEY_FILE`, else `<home>/secrets.key`.
    pub secrets_key_file: Option<PathBuf>,
    /// Where the home, the store and the key file came from (`quorum config view`,
    /// and errors that depend on the store).
    pub origins: Origins,
}

/// Where a setting came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag (`--home`).
    Flag(&'static str),
    /// An environment variable (`QUORUM_STORE`).
    Env(&'static str),
    #[default]
    Default,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag(flag) => write!(f, "from the flag {flag}"),
            Origin::Env(var) => write!(f, "from the environment: {var}"),
            Origin::Default => f.write_str("the default"),
        }
    }
}

/// Where each part of a `Place` came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Origins {
    pub home: Origin,
    pub store: Origin,
    pub key_file: Origin,
}

impl Place {
    pub fn embedded(home: &Path) -> Place {
        Place {
            home: home.to_path_buf(),
            store: StoreLocation::Embedded,
            secrets_key_file: None,
            origins: Origins::default(),
        }
    }

    /// The store, in words, and where it came from: what an error that depends on
    /// the store adds (`control plane "x" does not exist` in which store?).
    pub fn store_words(&self) -> String {
        let what = match &self.store {
            StoreLocation::Embedded => format!(
                "the state file in {}",
                self.home.join(quorum_store::STATE_FILE).display()
            ),
            StoreLocation::Etcd(l) => format!("the management etcd {}", l.url()),
        };
        format!("{what} ({})", self.origins.store)
    }

    /// Opens the store of this place, with its key file.
    pub fn connect(&self) -> Result<Store, quorum_store::StoreError> {
        Store::connect_keyed(&self.store, &self.home, self.secrets_key_file.as_deref())
    }

    /// `connect`, for a command that must not make a home (`StoreError::NoHome`).
    pub fn connect_existing(&self) -> Result<Store, quorum_store::StoreError> {
        Store::connect_existing_keyed(&self.store, &self.home, self.secrets_key_file.as_deref())
    }
}

pub struct Ctx {
    /// The home: machines, endpoint files, backups (and the embedded store).
    pub home: PathBuf,
    pub store: Store,
    pub provider: LocalProvider,
    /// How to reach each control plane's members, built on first use.
    access: Mutex<HashMap<String, Arc<Access>>>,
    /// When the command started (progress times count from here).
    pub started_ms: i64,
    /// Print nothing but errors (for commands whose output is a report).
    pub quiet: bool,
}

impl Ctx {
    pub fn open(at: &Place) -> Result<Ctx> {
        Ctx::with_store(at, at.connect()?)
    }

    /// For commands that only read (`list`, `status`, `events`, ...): a home that does
    /// not exist is an error ("no quorum home at ..."), and nothing is created.
    pub fn open_existing(at: &Place) -> Result<Ctx> {
        Ctx::with_store(at, at.connect_existing()?)
    }

    fn with_store(at: &Place, store: Store) -> Result<Ctx> {
        let provider = LocalProvider::new(&at.home, default_etcd_dir());
        Ok(Ctx {
            home: at.home.clone(),
            store,
            provider,
            access: Mutex::new(HashMap::new()),
            started_ms: now_ms(),
            quiet: false,
        })
    }

    /// The adapter (with quorum's own client certificate, for a TLS control plane) for
    /// `cp`'s members.
    pub fn access(&self, cp: &ControlPlane) -> Result<Arc<Access>> {
        let mut cache = self.access.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = cache.get(&cp.name) {
            if a.fresh(cp, quorum_clock::now_unix_s()) {
                return Ok(a.clone());
            }
        }
        let a = Arc::new(access::open(
            &self.store,
            cp,
            "quorum-cli",
            Timeouts::default(),
        )?);
        cache.insert(cp.name.clone(), a.clone());
        Ok(a)
    }

    /// The credentials a client of `cp` presents (`None` for plain HTTP).
    pub fn client_tls(&self, cp: &ControlPlane) -> Result<Option<ClientTls>> {
        Ok(self.access(cp)?.client.clone())
    }

    /// Observes and decides for `cp` now.
    pub async fn live(&self, cp: &ControlPlane) -> Result<status::Status> {
        let a = self.access(cp)?;
        status::live(&self.store, &self.provider, &a.etcd, cp).await
    }

    /// Follows `name` until `goal`, printing its steps after `after_event` with times
    /// counted from `since_ms`.
    pub async fn follow(
        &self,
        name: &str,
        goal: wait::Goal,
        timeout: Duration,
        after_event: i64,
        since_ms: i64,
    ) -> Result<()> {
        wait::wait(
            &self.store,
            &self.provider,
            &|cp| Ok(self.access(cp)?.etcd.clone()),
            name,
            goal,
            timeout,
            after_event,
            since_ms,
        )
        .await
    }

    /// Resolves a user's version (`3.5.1` as is, `3.5` the newest installed 3.5.x) the
    /// one way every command and manifest does: `quorum_core::VersionRequest`.
    pub fn version(&self, s: &str) -> Result<Version> {
        let installed = installed_versions(self.provider.etcd_dir());
        Ok(s.parse::<VersionRequest>()?.resolve(&installed)?)
    }

    /// The etcd versions installed here, oldest first.
    pub fn installed(&self) -> Vec<Version> {
        installed_versions(self.provider.etcd_dir())
    }
}

pub fn list_versions(vs: &[Version]) -> String {
    if vs.is_empty() {
        return "none; run scripts/install.sh".into();
    }
    vs.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
