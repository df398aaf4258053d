//! The seam between the controller and wherever members run: [`MachineProvider`], the
//! operations a reconcile performs on one machine's process and data. The local
//! provider implements it here; members on registered hosts implement it through their
//! agents (`quorum_hosts::OnHosts`, in a crate of its own beside the agent client: the
//! agent crate itself runs members with the local provider, so it cannot be below it).
//!
//! Architecture invariant: a step names no provider. The controller picks the
//! implementation for a control plane's `spec.provider` in one place and performs
//! starts, stops, deletions, marker writes and log reads through this trait alone.

use crate::{LocalProvider, ProviderError, StartRequest};
use quorum_core::{DataMarker, Machine, Version};
use std::future::Future;
use std::pin::Pin;

/// A boxed future (the trait is used as `dyn MachineProvider`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a machine operation failed with.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error(transparent)]
    Local(#[from] ProviderError),
    /// From a machine on another host: its agent's answer, or the way to it.
    #[error(transparent)]
    Remote(Box<dyn std::error::Error + Send + Sync>),
    /// A blocking call of the local provider did not end (its thread panicked).
    #[error("the provider's call on {machine} did not end: {reason}")]
    Join { machine: String, reason: String },
}

/// The operations a reconcile performs on a machine (see the module doc). Each is
/// idempotent: starting one that runs, stopping or deleting one that is gone, writing
/// the marker it has, is success.
pub trait MachineProvider: Send + Sync {
    /// Starts `req.machine`'s etcd as the request says.
    fn start<'a>(&'a self, req: &'a StartRequest<'a>) -> BoxFuture<'a, Result<(), MachineError>>;

    /// Stops its etcd, its data kept.
    fn stop<'a>(&'a self, m: &'a Machine) -> BoxFuture<'a, Result<(), MachineError>>;

    /// Stops its etcd and removes its data.
    fn delete<'a>(&'a self, m: &'a Machine) -> BoxFuture<'a, Result<(), MachineError>>;

    /// Writes the marker naming the cluster and member its data belongs to.
    fn write_marker<'a>(
        &'a self,
        m: &'a Machine,
        marker: DataMarker,
    ) -> BoxFuture<'a, Result<(), MachineError>>;

    /// The last `lines` lines of its etcd's log; none when they cannot be read now.
    fn log_tail<'a>(&'a self, m: &'a Machine, lines: usize) -> BoxFuture<'a, Vec<String>>;

    /// For a start of a machine whose process ran before: a planned restart (quorum
    /// stopped it), or how that process ended (`killed by signal 9`), from what the
    /// provider keeps; read before the start, which takes it. `None`: nothing known
    /// here (on hosts the agent keeps it: `quorum host list -o json`).
    fn why_it_stopped(&self, _machine: &str) -> Option<String> {
        None
    }

    /// Whether it can rebuild a control plane after quorum loss (fence a machine's
    /// directory, restore a seed from a snapshot, force a new cluster on a survivor):
    /// the steps read and move the machines' data directories where the controller
    /// runs. `Err` says why not.
    fn rebuilds(&self) -> Result<(), MachineError> {
        Ok(())
    }

    /// Makes `version` ready where `machines` run, ahead of their restarts (an in-place
    /// step beginning). Best effort; nothing to do where every version is at hand.
    fn prepare(&self, _machines: &[Machine], _version: Version) {}
}

impl LocalProvider {
    /// Runs a blocking operation on `m` off the async threads.
    async fn blocking(
        &self,
        m: &Machine,
        op: impl FnOnce(&LocalProvider, &str) -> crate::Result<()> + Send + 'static,
    ) -> Result<(), MachineError> {
        let (p, name) = (self.clone(), m.name.clone());
        tokio::task::spawn_blocking(move || op(&p, &name))
            .await
            .map_err(|e| MachineError::Join {
                machine: m.name.clone(),
                reason: e.to_string(),
            })??;
        Ok(())
    }
}

impl MachineProvider for LocalProvider {
    fn start<'a>(&'a self, req: &'a StartRequest<'a>) -> BoxFuture<'a, Result<(), MachineError>> {
        // Inline, as it always was: bounded by the start's own wait for the process to
        // come up, and the request borrows what a blocking thread could not.
        Box::pin(async move { Ok(LocalProvider::start(self, req).map(|_pid| ())?) })
    }

    fn stop<'a>(&'a self, m: &'a Machine) -> BoxFuture<'a, Result<(), MachineError>> {
        Box::pin(self.blocking(m, LocalProvider::stop))
    }

    fn delete<'a>(&'a self, m: &'a Machine) -> BoxFuture<'a, Result<(), MachineError>> {
        Box::pin(self.blocking(m, LocalProvider::delete))
    }

    fn write_marker<'a>(
        &'a self,
        m: &'a Machine,
        marker: DataMarker,
    ) -> BoxFuture<'a, Result<(), MachineError>> {
        Box::pin(self.blocking(m, move |p, n| LocalProvider::write_marker(p, n, marker)))
    }

    fn log_tail<'a>(&'a self, m: &'a Machine, lines: usize) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move { self.last_log_lines(&m.name, lines) })
    }

    /// From the files beside its data: quorum's own stop ends in SIGKILL once etcd has
    /// closed its data, which is no news.
    fn why_it_stopped(&self, machine: &str) -> Option<String> {
        if self.stop_was_requested(machine) {
            return Some("a planned restart: quorum stopped it".into());
        }
        let why = self.last_exit(machine)?;
        Some(format!("its process had ended: {why}"))
    }
}
