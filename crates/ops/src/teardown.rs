//! Deleting a control plane: the teardown, driven here as the home's one controller.

use crate::{wait, Place};
use anyhow::{anyhow, bail, Result};
use quorum_controller::{Config, Controller};
use quorum_provider::default_etcd_dir;
use std::time::Duration;

/// Drives the teardown of a control plane until it is gone (marking it deleting first,
/// idempotently). With `print_since_ms`, prints each step as it happens.
pub async fn teardown(at: &Place, name: &str, print_since_ms: Option<i64>) -> Result<()> {
    // Bounded: stopping a machine takes at most its grace period plus the SIGKILL wait.
    const TEARDOWN_LIMIT: Duration = Duration::from_secs(120);
    let mut store = at.connect()?;
    // With a sharded fleet, this acts as the controller of the control plane's shard
    // (and stands aside if a replica holds it), with the count in force.
    let shards = match store.setting(quorum_store::SHARDS_SETTING)? {
        Some(n) => n.trim().parse::<u32>().unwrap_or(1).max(1),
        None => 1,
    };
    let mut c = Controller::new(Config {
        store: at.store.clone(),
        identity: format!("quorum-delete-{}", std::process::id()),
        secrets_key_file: at.secrets_key_file.clone(),
        shards,
        shard: (shards > 1).then(|| quorum_core::shards::shard_of(name, shards)),
        ..Config::new(&at.home, default_etcd_dir())
    })?;
    // Acting as the controller takes the leadership, as any controller would.
    if let quorum_controller::Lead::Standby(who) = c.lead().await? {
        bail!(
            "{name}: controller {} leads and will finish the deletion; follow it with `quorum status {name}`",
            who.as_deref().unwrap_or("(another)")
        );
    }
    let mut last_event = store.last_event_id(name)?;
    match store.mark_control_plane_deleting(name) {
        Ok(()) | Err(quorum_store::StoreError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let start = std::time::Instant::now();
    while start.elapsed() < TEARDOWN_LIMIT {
        let Some(cp) = store.control_plane(name)? else {
            // Forgotten (by this reconcile, or by another controller that finished it):
            // nothing of it may stay in this home, its HAProxy key least of all.
            quorum_controller::remove_local_files(&at.home, name)?;
            return Ok(());
        };
        let outcome = c.reconcile(&cp).await?;
        if let Some(since) = print_since_ms {
            wait::print_events(&store, name, &mut last_event, since, false, None)?;
        }
        if outcome != quorum_controller::Outcome::Acted {
            tokio::time::sleep(Duration::from_millis(quorum_controller::BUSY_POLL_MS)).await;
        }
    }
    Err(anyhow!(
        "{name}: teardown did not finish within {}s; see `quorum status {name}`",
        TEARDOWN_LIMIT.as_secs()
    ))
}
