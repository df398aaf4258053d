//! Upkeep of members: a quorum read through one member, compaction, defragmentation
//! and alarms. Each call goes to exactly the member asked (its own client), within a
//! bound, and treats "already so" as success.

use crate::{bounded, Etcd, EtcdError};
use etcd_client::{AlarmAction, AlarmOptions, AlarmType, GetOptions};

/// The key a quorum read asks for (it need not exist: the read is about the path to
/// a quorum, not the value).
pub const QUORUM_READ_KEY: &str = "quorum-health-probe";

/// How long one member's defragmentation may take. etcd rewrites the member's whole
/// database file into a new one and blocks every request to that member meanwhile, so
/// the bound is far above the observation's. Measured on loopback members of 3.5.1
/// (`crates/etcd/tests/maintenance.rs`): 10 ms for a 17 MB file compacted to 0.5 MB of
/// live data (a NOSPACE repair), 90 to 125 ms for 16 MiB of live data; a slow disk and
/// the largest database etcd allows (8 GiB) take far longer.
pub const DEFRAG_TIMEOUT_MS: u64 = 60_000;

/// Alarm names as statuses and alarm lists show them.
pub(crate) const NOSPACE: &str = "NOSPACE";
pub(crate) const CORRUPT: &str = "CORRUPT";

/// The name of an alarm, as etcd's own text shows it.
pub(crate) fn alarm_name(alarm: AlarmType) -> &'static str {
    match alarm {
        AlarmType::Nospace => NOSPACE,
        AlarmType::Corrupt => CORRUPT,
        AlarmType::None => "NONE",
    }
}

/// The alarm of a name (`None` for one etcd does not know).
fn alarm_type(name: &str) -> Option<AlarmType> {
    match name {
        NOSPACE => Some(AlarmType::Nospace),
        CORRUPT => Some(AlarmType::Corrupt),
        _ => None,
    }
}

/// A status's `errors`, as (this member's own alarm names, every alarm active in the
/// cluster). etcd (3.4 and 3.5, `api/v3rpc/maintenance.go`, `Status`) lists in them
/// every active alarm of any member, each as its `AlarmMember` in protobuf's text form,
/// `memberID:1185654540687482829 alarm:NOSPACE ` (seen from 3.4.23 and 3.5.1), and
/// `etcdserver: no leader` when the member knows no leader, which its `leader_id` of 0
/// says already. Any other text is kept among the member's own alarms, verbatim: an
/// error etcd reports is never dropped unread.
pub(crate) fn status_errors(
    member_id: u64,
    errors: &[String],
) -> (Vec<String>, Vec<(u64, String)>) {
    let mut own: Vec<String> = Vec::new();
    let mut all: Vec<(u64, String)> = Vec::new();
    for e in errors {
        if e == quorum_core::classify::NO_LEADER.message {
            continue;
        }
        match alarm_member(e) {
            Some((member, name)) => {
                if member == member_id && !own.contains(&name) {
                    own.push(name.clone());
                }
                if !all.contains(&(member, name.clone())) {
                    all.push((member, name));
                }
            }
            None => {
                if !own.contains(e) {
                    own.push(e.clone());
                }
            }
        }
    }
    (own, all)
}

/// `memberID:<id> alarm:<NAME>` (etcd's `AlarmMember` in protobuf's text form, with a
/// trailing space) as (id, name).
fn alarm_member(text: &str) -> Option<(u64, String)> {
    let mut words = text.split_whitespace();
    let member = words.next()?.strip_prefix("memberID:")?.parse().ok()?;
    let name = words.next()?.strip_prefix("alarm:")?;
    if words.next().is_some() || name.is_empty() {
        return None;
    }
    Some((member, name.to_string()))
}

/// etcd's answer to a read below the compacted revision, and to a compaction at or
/// below it: `rpctypes.ErrGRPCCompacted` (gRPC code OutOfRange), the same in 3.4.23
/// and 3.5.1. The core's classifier knows no call for which it means "already done",
/// so it arrives here as a failure with this message.
const COMPACTED_MESSAGE: &str = "etcdserver: mvcc: required revision has been compacted";

/// Whether `e` is etcd's answer that the revision asked has been compacted.
fn says_compacted(e: &EtcdError) -> bool {
    matches!(e, EtcdError::Failed { message, .. } if message == COMPACTED_MESSAGE)
}

impl Etcd {
    /// A linearizable (not serializable) read of one key through exactly this member:
    /// it answers only once the member has confirmed with a quorum that it is up to
    /// date, so it fails for a member that is partitioned, stopped or without a leader,
    /// within `connect_ms` + `observe_ms`. A learner always fails it ("rpc not
    /// supported for learner").
    pub async fn quorum_read(&self, endpoint: &str) -> Result<(), EtcdError> {
        let mut c = self.client(endpoint).await?;
        let t = self.timeouts.observe_ms;
        let opts = GetOptions::new().with_limit(1).with_keys_only();
        let res = bounded("quorum read", endpoint, t, async {
            c.get(QUORUM_READ_KEY, Some(opts)).await
        })
        .await;
        if res.is_err() {
            // A connection that did not answer in time is not reused.
            self.forget(endpoint);
        }
        res.map(|_| ())
    }

    /// Whether the keyspace, as this member holds it, is compacted up to `revision`:
    /// a read at `revision - 1` is then answered "required revision has been
    /// compacted". A `revision` of 1 or less has nothing below it: compacted. Within
    /// `connect_ms` + `observe_ms`.
    pub async fn compacted(&self, endpoint: &str, revision: i64) -> Result<bool, EtcdError> {
        if revision <= 1 {
            return Ok(true);
        }
        let mut c = self.client(endpoint).await?;
        let t = self.timeouts.observe_ms;
        let opts = GetOptions::new()
            .with_revision(revision - 1)
            .with_limit(1)
            .with_keys_only();
        let res = bounded("compaction probe", endpoint, t, async {
            c.get(QUORUM_READ_KEY, Some(opts)).await
        })
        .await;
        match res {
            Ok(_) => Ok(false),
            Err(e) if says_compacted(&e) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Compacts the keyspace (every member: the compaction goes through raft) up to
    /// `revision`, logically (etcd frees the space in the background; a
    /// defragmentation returns it to the disk). A keyspace already compacted there is
    /// success. Within `connect_ms` + `change_ms`.
    pub async fn compact(&self, endpoint: &str, revision: i64) -> Result<(), EtcdError> {
        let mut c = self.client(endpoint).await?;
        let t = self.timeouts.change_ms;
        let res = bounded("compact", endpoint, t, async {
            c.compact(revision, None).await
        })
        .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) if says_compacted(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Defragments this one member (its own connection, not shared: the call may
    /// take up to `DEFRAG_TIMEOUT_MS`, while the member answers nothing else).
    /// Defragmenting a member that needs none is success too.
    pub async fn defragment(&self, endpoint: &str) -> Result<(), EtcdError> {
        let mut c = self.connect_one(endpoint, DEFRAG_TIMEOUT_MS).await?;
        bounded("defragment", endpoint, DEFRAG_TIMEOUT_MS, async {
            c.defragment().await
        })
        .await
        .map(|_| ())
    }

    /// Disarms `alarm` (`NOSPACE` or `CORRUPT`, as statuses show it) of member
    /// `member_id`, asked of any member (the disarm goes through raft). An alarm that
    /// is not active is success. Within `connect_ms` + `change_ms`.
    pub async fn disarm(
        &self,
        endpoint: &str,
        member_id: u64,
        alarm: &str,
    ) -> Result<(), EtcdError> {
        let Some(kind) = alarm_type(alarm) else {
            return Err(EtcdError::Failed {
                op: "alarm disarm",
                endpoint: endpoint.to_string(),
                message: format!("etcd has no alarm {alarm:?} (it has {NOSPACE} and {CORRUPT})"),
            });
        };
        let mut c = self.client(endpoint).await?;
        let t = self.timeouts.change_ms;
        let mut opts = AlarmOptions::new();
        opts.with_member(member_id);
        bounded("alarm disarm", endpoint, t, async {
            c.alarm(AlarmAction::Deactivate, kind, Some(opts)).await
        })
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_names_its_own_alarms_and_keeps_everyone_s() {
        let errors = [
            "memberID:7 alarm:NOSPACE ".to_string(),
            "memberID:9 alarm:NOSPACE ".to_string(),
            "memberID:7 alarm:CORRUPT ".to_string(),
            "etcdserver: no leader".to_string(),
        ];
        let (own, all) = status_errors(7, &errors);
        assert_eq!(own, ["NOSPACE", "CORRUPT"]);
        assert_eq!(
            all,
            [
                (7, "NOSPACE".to_string()),
                (9, "NOSPACE".to_string()),
                (7, "CORRUPT".to_string())
            ]
        );
        let (own, all) = status_errors(9, &errors);
        assert_eq!(own, ["NOSPACE"]);
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn an_error_that_is_not_an_alarm_is_kept_verbatim() {
        let errors = [
            "something etcd says".to_string(),
            "memberID:x alarm:NOSPACE".to_string(),
            "memberID:7 alarm:".to_string(),
        ];
        let (own, all) = status_errors(7, &errors);
        assert_eq!(own, errors);
        assert!(all.is_empty());
    }

    #[test]
    fn alarm_names_round_trip() {
        for t in [AlarmType::Nospace, AlarmType::Corrupt] {
            assert_eq!(alarm_type(alarm_name(t)), Some(t));
        }
        assert_eq!(alarm_type("nospace"), None);
    }

    #[test]
    fn only_the_compacted_answer_says_compacted() {
        let failed = |message: &str| EtcdError::Failed {
            op: "x",
            endpoint: "e".into(),
            message: message.into(),
        };
        assert!(says_compacted(&failed(COMPACTED_MESSAGE)));
        assert!(!says_compacted(&failed(
            "etcdserver: mvcc: required revision is a future revision"
        )));
        assert!(!says_compacted(&EtcdError::Timeout {
            op: "x",
            endpoint: "e".into(),
            timeout_ms: 1
        }));
    }
}
