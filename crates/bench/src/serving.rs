//! When each machine a rollout started began to serve: a new member (a replacement,
//! the naive script's voter) or a member restarted in place on the new binary.

use crate::rollout::{Step, StepKind};
use quorum_clock::now_ms;
use quorum_core::ActionKind;
use quorum_etcd::ClientTls;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the bench looks at every machine.
const PROBE_EVERY_MS: u64 = 50;
/// A status request to a machine that does not answer gives up this soon, so that a
/// stopped machine does not delay the look at the others.
const PROBE_CONNECT_MS: u64 = 100;
const PROBE_STATUS_MS: u64 = 200;

/// A machine the rollout started, and when it began to serve clients.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewMember {
    pub machine: String,
    pub started_at_ms: i64,
    /// From its start to its first answer to a status request after it; None: never
    /// answered.
    pub serving_after_ms: Option<i64>,
}

/// For each machine, when it began answering: every moment the probe saw it answer
/// after it had not (or at the first look), in order. A member restarted in place
/// stops answering and begins again; a new member begins once.
pub type Answering = BTreeMap<String, Vec<i64>>;

/// Records when each machine of `cp` begins to answer a status request (its gRPC server
/// serves only once the member is ready), until `stop`.
pub async fn probe(
    home: PathBuf,
    cp: String,
    tls: Option<ClientTls>,
    stop: Arc<AtomicBool>,
) -> Answering {
    let mut began = Answering::new();
    let Ok(store) = quorum_store::Store::open(&home) else {
        return began;
    };
    let timeouts = quorum_etcd::Timeouts {
        connect_ms: PROBE_CONNECT_MS,
        observe_ms: PROBE_STATUS_MS,
        change_ms: PROBE_STATUS_MS,
    };
    let Ok(etcd) = quorum_etcd::Etcd::for_credentials(timeouts, tls) else {
        return began;
    };
    let mut answered: BTreeMap<String, bool> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        for m in store.machines(&cp).unwrap_or_default() {
            let now = etcd.status(&m.client_url()).await.is_ok();
            let before = answered.insert(m.name.clone(), now);
            if now && before != Some(true) {
                began.entry(m.name.clone()).or_default().push(now_ms());
            }
        }
        tokio::time::sleep(Duration::from_millis(PROBE_EVERY_MS)).await;
    }
    began
}

/// For each machine the rollout started: how long after that start it first answered.
pub fn started(steps: &[Step], began: &Answering, t0: i64) -> Vec<NewMember> {
    steps
        .iter()
        .filter(|s| s.kind == StepKind::Action(ActionKind::StartMachine))
        .filter_map(|s| {
            let machine = s.machine.clone()?;
            let serving_after_ms = began
                .get(&machine)
                .and_then(|times| times.iter().map(|t| t - t0).find(|t| *t >= s.at_ms))
                .map(|t| t - s.at_ms);
            Some(NewMember {
                machine,
                started_at_ms: s.at_ms,
                serving_after_ms,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(machine: &str, at_ms: i64) -> Step {
        Step {
            at_ms,
            kind: StepKind::Action(ActionKind::StartMachine),
            machine: Some(machine.into()),
            message: format!("start {machine}"),
            took_ms: None,
        }
    }

    /// A restarted member answered before the rollout too: its serving time counts from
    /// the answer after its start, not from the first answer of the run.
    #[test]
    fn serving_counts_from_the_answer_after_each_start() {
        let t0 = 1_000_000;
        let began = Answering::from([
            ("a-1".to_string(), vec![t0 + 10, t0 + 2_600]),
            ("a-4".to_string(), vec![t0 + 5_300]),
        ]);
        let steps = [
            start("a-1", 2_000),
            start("a-4", 5_000),
            start("a-2", 6_000),
        ];
        let s = started(&steps, &began, t0);
        let after: Vec<_> = s
            .iter()
            .map(|m| (m.machine.as_str(), m.serving_after_ms))
            .collect();
        assert_eq!(
            after,
            [("a-1", Some(600)), ("a-4", Some(300)), ("a-2", None)]
        );
    }
}
