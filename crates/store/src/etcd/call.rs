//! How one store call reaches the management etcd: on the store's runtime, through the
//! failover client (`quorum_etcd::failover`: the member that served last, then the
//! others, within the call's deadline), and how its failure reads to people.

use crate::{Result, StoreError};
use etcd_client::Client;
use quorum_core::failover::{is_connect_error, is_unreachable, EndpointHealth, CALL_TIMEOUT_MS};
use quorum_etcd::failover::{Failover, FailoverError, Served};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Beyond the call's own deadline, how long the caller waits for the runtime to answer
/// (only a runtime that stopped would need it).
const ANSWER_SLACK_MS: u64 = 1_000;

/// The store's runtime and failover client, as the store, its heartbeat writer and its
/// lease keeper share them.
#[derive(Clone)]
pub(super) struct Conn {
    pub rt: tokio::runtime::Handle,
    pub pool: Arc<Failover>,
    pub location: String,
    /// Test hook: answers to lose (see `tests.rs`).
    #[cfg(test)]
    pub lose: Arc<super::tests::LoseAnswers>,
}

impl Conn {
    /// Runs one etcd call (`f` once per attempt) through the failover client, from a
    /// thread that is not one of the runtime's; bounded by the call's deadline.
    pub fn call<T, F, Fut>(&self, op: &'static str, f: F) -> Result<Served<T>>
    where
        F: FnMut(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let pool = self.pool.clone();
        self.rt.spawn(async move {
            let _ = tx.send(pool.call(f).await);
        });
        match rx.recv_timeout(Duration::from_millis(CALL_TIMEOUT_MS + ANSWER_SLACK_MS)) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(op, e)),
            Err(_) => Err(StoreError::Timeout {
                location: self.location.clone(),
                op,
                timeout_ms: CALL_TIMEOUT_MS,
            }),
        }
    }

    fn error(&self, op: &'static str, e: FailoverError) -> StoreError {
        match e {
            // (The store retries every call: `MaybeApplied` does not arise.)
            FailoverError::Answer {
                endpoint, message, ..
            }
            | FailoverError::MaybeApplied {
                endpoint, message, ..
            } => StoreError::Etcd {
                location: self.location.clone(),
                detail: format!("{op}: {endpoint}: {message}"),
            },
            FailoverError::Unavailable {
                waited_ms,
                tried,
                health,
                ..
            } => StoreError::Unavailable {
                location: self.location.clone(),
                op,
                detail: unavailable_detail(waited_ms, &tried, &health),
            },
        }
    }
}

/// Why no member served, in words: a clear "lost its quorum" only when a majority of the
/// members cannot be reached; "no leader" when they answer without one (an election, or
/// members cut off from each other); otherwise what each said.
pub(super) fn unavailable_detail(
    waited_ms: u64,
    tried: &[(String, String)],
    health: &[EndpointHealth],
) -> String {
    let n = health.len().max(tried.len());
    let why = |e: &str| -> Option<&str> {
        tried
            .iter()
            .find(|(t, _)| t == e)
            .map(|(_, w)| w.as_str())
            .or_else(|| {
                health
                    .iter()
                    .find(|h| h.endpoint == e)
                    .and_then(|h| h.error.as_deref())
            })
    };
    let endpoints: Vec<&str> = health.iter().map(|h| h.endpoint.as_str()).collect();
    let unreachable: Vec<&str> = endpoints
        .iter()
        .copied()
        .filter(|e| why(e).is_some_and(is_unreachable))
        .collect();
    let list = endpoints
        .iter()
        .map(|e| format!("{}: {}", host(e), why(e).unwrap_or("not asked")))
        .collect::<Vec<_>>()
        .join("; ");
    let refused = endpoints
        .iter()
        .filter(|e| why(e).is_some_and(is_connect_error))
        .count();
    if refused == n {
        format!("none of the {n} members of the management etcd accepts connections ({list}): is it running, and is --store right?")
    } else if unreachable.len() > n / 2 {
        format!(
            "{} of {n} members of the management etcd are unreachable ({list}): it has lost its quorum, and quorum can neither read nor change its state until a majority of the members is back",
            unreachable.len()
        )
    } else if endpoints
        .iter()
        .all(|e| why(e).is_some_and(|w| w.contains("no leader")))
    {
        format!("the members of the management etcd answer but have no leader ({list}): an election is under way, or they cannot reach each other")
    } else {
        format!("no member of the management etcd served it within {waited_ms} ms ({list})")
    }
}

/// `127.0.0.1:2379` of `http://127.0.0.1:2379`.
fn host(endpoint: &str) -> &str {
    endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
}

#[cfg(test)]
mod unit {
    use super::*;

    fn h(e: &str, up: bool, error: Option<&str>) -> EndpointHealth {
        EndpointHealth {
            endpoint: e.into(),
            up,
            leader: false,
            version: None,
            error: error.map(str::to_string),
            down_for_ms: None,
        }
    }

    #[test]
    fn only_a_majority_out_of_reach_reads_as_a_lost_quorum() {
        let refused = "tcp connect error: Connection refused (os error 111)";
        let two_gone = [
            h("http://a:2379", false, Some(refused)),
            h("http://b:2379", false, Some("no answer within 1000 ms")),
            h("http://c:2379", false, Some("etcdserver: no leader")),
        ];
        let d = unavailable_detail(5_000, &[], &two_gone);
        assert!(d.starts_with("2 of 3 members"), "{d}");
        assert!(d.contains("lost its quorum") && d.contains("c:2379: etcdserver: no leader"));
        let election = [
            h("http://a:2379", false, Some("etcdserver: no leader")),
            h("http://b:2379", false, Some("etcdserver: no leader")),
            h("http://c:2379", false, Some("etcdserver: no leader")),
        ];
        let d = unavailable_detail(5_000, &[], &election);
        assert!(d.contains("no leader") && !d.contains("quorum"), "{d}");
        let one_gone = [
            h("http://a:2379", false, Some(refused)),
            h(
                "http://b:2379",
                false,
                Some("etcdserver: request timed out"),
            ),
            h("http://c:2379", true, None),
        ];
        let d = unavailable_detail(5_000, &[], &one_gone);
        assert!(d.starts_with("no member") && !d.contains("quorum"), "{d}");
        let none = [
            h("http://a:2379", false, Some(refused)),
            h("http://b:2379", false, Some(refused)),
        ];
        let d = unavailable_detail(5_000, &[], &none);
        assert!(
            d.starts_with("none of the 2 members") && d.contains("--store"),
            "{d}"
        );
    }
}
