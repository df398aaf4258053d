//! What a replica does while its store cannot serve, or cannot confirm its lease: it
//! holds (acts on nothing), says why once, and says once when it goes on.

use super::*;

impl Controller {
    /// This replica acts on nothing for want of its store: said once per reason.
    pub(crate) fn hold(&mut self, why: &str) {
        let same = self.held.as_ref().is_some_and(|(_, w)| w == why);
        if !same {
            tracing::warn!("not acting: {why}");
            let since = self.held.as_ref().map_or_else(Instant::now, |(t, _)| *t);
            self.held = Some((since, why.to_string()));
        }
    }

    /// The store answered (and, leading, confirmed the lease): said once after a hold.
    pub(crate) fn store_answers(&mut self) {
        if let Some((since, _)) = self.held.take() {
            tracing::info!(
                held_ms = since.elapsed().as_millis() as u64,
                "the store answers again; acting again"
            );
        }
    }

    /// Why a leader holds while its lease is unconfirmed, with what the management
    /// etcd's members say when most do not serve. Without figures that change from one
    /// pass to the next: it is said once.
    pub(crate) async fn lease_unconfirmed(&self) -> String {
        format!(
            "the store has not confirmed this controller's leadership lease in time (its renewals go unanswered{}); acting again once one is",
            store_trouble(&self.sh.store.endpoint_health(false).await)
        )
    }
}

/// What the members of a management etcd say, when fewer than a majority serve.
fn store_trouble(health: &[quorum_store::EndpointHealth]) -> String {
    if health.is_empty() || quorum_core::failover::majority_up(health) {
        return String::new();
    }
    let up = health.iter().filter(|h| h.up).count();
    let down: Vec<String> = health
        .iter()
        .filter(|h| !h.up)
        .map(|h| format!("{}: {}", h.endpoint, h.error.as_deref().unwrap_or("down")))
        .collect();
    format!(
        ": the management etcd has lost its quorum, {up} of {} members serve ({})",
        health.len(),
        down.join("; ")
    )
}
