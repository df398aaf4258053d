//! The records as stored in the management etcd (JSON), and small helpers of the store.

use super::{Kv, WRITE_BACKOFF};
use crate::EventKind;
use etcd_client::{Compare, CompareOp};
use quorum_core::ControlPlane;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CpRecord {
    pub(super) control_plane: ControlPlane,
    pub(super) next_serial: u64,
    /// When it was created. Records of earlier releases have none (they read as
    /// unknown); an earlier release that rewrites the record drops it, which is harmless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) created_at_ms: Option<i64>,
}

/// An event as stored (its id is the key's create revision).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct EventRecord {
    pub(super) at_ms: i64,
    pub(super) kind: EventKind,
    pub(super) machine: Option<String>,
    pub(super) message: String,
    pub(super) ok: bool,
    pub(super) waited_ms: Option<i64>,
    pub(super) took_ms: Option<i64>,
    /// Absent in records written before quorum recorded the writer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) by: Option<String>,
    /// Absent in records written before quorum recorded it (see
    /// `StepOutcome::implied`). Read as text so that an outcome a newer release adds
    /// does not make the record unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) outcome: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CaRecord {
    pub(super) cert_pem: String,
    pub(super) key_pem: String,
}

pub(super) fn to_kvs(kvs: &[etcd_client::KeyValue]) -> Vec<Kv> {
    kvs.iter()
        .map(|kv| Kv {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: kv.value().to_vec(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            lease: kv.lease(),
        })
        .collect()
}

/// Sleeps before retry `attempt` (none before the first): `WRITE_BACKOFF`.
pub(super) fn backoff(attempt: u32) {
    let delay_ms = WRITE_BACKOFF.delay_ms(attempt, rand::random());
    if delay_ms > 0 {
        std::thread::sleep(Duration::from_millis(delay_ms));
    }
}

pub(super) fn one_line(s: &str) -> String {
    s.trim().replace('\n', "; ")
}

pub(super) fn absent(key: &str) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, 0)
}
