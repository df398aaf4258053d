//! The leader's lease: the task that renews it, the deadline it keeps, and the fenced
//! heartbeat writer of its term.
//!
//! Renewals go through the failover client like every call: a member that dies or stops
//! answering costs one attempt, and a renewal that no member answers (an election of the
//! management etcd, or a majority of it gone) is tried again at once, so the first
//! renewal after the store is back comes within one pause between rounds. Meanwhile the
//! deadline stands: the leader acts on nothing once less than its margin is left
//! (`lease::Standing::Hold`), and acts again as soon as a renewal is answered. Only etcd
//! saying the lease is gone (a renewal answered with TTL 0) ends the term.

use super::call::Conn;
use crate::{FenceToken, Heartbeat, HeartbeatWriter, Result, StoreError};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use quorum_core::failover::{CALL_TIMEOUT_MS, ROUND_BACKOFF};
use quorum_etcd::failover::FailoverError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// This replica's term: its token (the leader key's create revision), its lease, the
/// deadline the keeper moves, and the keeper.
pub(super) struct Leadership {
    pub token: FenceToken,
    pub lease_id: i64,
    pub clock: Arc<LeaseClock>,
    pub keeper: tokio::task::JoinHandle<()>,
}

/// What the lease-keeping task shares with the store.
pub(super) struct LeaseClock {
    /// Until when this replica may act: the send time of the last renewal that etcd
    /// answered, plus the TTL it granted. etcd starts its own count later (when it
    /// processes the renewal), and extends every lease when its own leader changes, so
    /// the lease never ends in etcd before this.
    valid_until: Mutex<Instant>,
    /// etcd said the lease is gone.
    lost: AtomicBool,
}

impl LeaseClock {
    pub fn new(valid_until: Instant) -> Arc<LeaseClock> {
        Arc::new(LeaseClock {
            valid_until: Mutex::new(valid_until),
            lost: AtomicBool::new(false),
        })
    }

    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Milliseconds left by this process's clock (negative: past).
    pub fn left_ms(&self) -> i64 {
        let until = *self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if until > now {
            (until - now).as_millis() as i64
        } else {
            -((now - until).as_millis() as i64)
        }
    }

    fn renewed(&self, sent: Instant, ttl_s: i64) {
        let until = sent + Duration::from_secs(ttl_s.max(0) as u64);
        let mut v = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
        // Answers may arrive out of order; the deadline only moves forward.
        if until > *v {
            *v = until;
        }
    }
}

/// Starts the task that renews `lease_id` every third of its TTL (at once after a
/// renewal nobody answered) and moves the deadline forward on each answer.
pub(super) fn keep_lease(
    conn: &Conn,
    lease_id: i64,
    ttl_s: i64,
    clock: Arc<LeaseClock>,
) -> tokio::task::JoinHandle<()> {
    let pool = conn.pool.clone();
    let every = Duration::from_millis(quorum_core::lease::renew_every_ms(
        ttl_s.max(1) as u64 * 1_000,
    ));
    conn.rt.spawn(async move {
        let mut next = Instant::now() + every;
        loop {
            tokio::time::sleep_until(next.into()).await;
            let renewed = pool
                .call(|mut c| async move {
                    // The send time of this attempt: the one that is answered counts.
                    let sent = Instant::now();
                    let (mut keeper, mut answers) = match c.lease_keep_alive(lease_id).await {
                        Ok(k) => k,
                        // etcd answered the first keep-alive with TTL 0, which this
                        // client (etcd-client 0.21) reports as this error, not as an
                        // answer: the lease is gone. Taken for a retryable failure, it
                        // was renewed forever and the replica never campaigned again
                        // (CI: two of three management members down past the TTL).
                        Err(etcd_client::Error::LeaseKeepAliveError(m))
                            if m == "lease not found" =>
                        {
                            return Ok((sent, 0));
                        }
                        Err(e) => return Err(e),
                    };
                    keeper.keep_alive().await?;
                    match answers.message().await? {
                        Some(a) => Ok((sent, a.ttl())),
                        None => Err(etcd_client::Error::LeaseKeepAliveError(
                            "the keep-alive stream ended without an answer".into(),
                        )),
                    }
                })
                .await;
            match renewed {
                Ok(s) if s.value.1 > 0 => {
                    clock.renewed(s.value.0, s.value.1);
                    next = Instant::now() + every;
                }
                Ok(_) => {
                    // TTL 0: etcd no longer knows the lease; another replica may lead.
                    clock.lost.store(true, Ordering::SeqCst);
                    return;
                }
                // No member answered within the call's deadline (it went round them all
                // meanwhile, so an election has ended): again at once.
                Err(FailoverError::Unavailable { waited_ms, .. })
                    if waited_ms >= CALL_TIMEOUT_MS =>
                {
                    next = Instant::now()
                }
                // Most members out of reach (said at once), or etcd's answer about the
                // request: again after one pause between rounds, not in a tight loop.
                Err(_) => {
                    next = Instant::now() + Duration::from_millis(ROUND_BACKOFF.cap_ms);
                }
            }
        }
    })
}

/// The controller's heartbeat thread's writer: the store's client and runtime, and the
/// fence of the term it was taken in.
pub(super) struct EtcdHeartbeat {
    pub conn: Conn,
    pub key: String,
    pub leader_key: String,
    pub fence: Option<FenceToken>,
}

impl HeartbeatWriter for EtcdHeartbeat {
    fn beat(&mut self, beat: &Heartbeat) -> Result<()> {
        let mut txn = Txn::new();
        if let Some(token) = self.fence {
            txn = txn.when([Compare::create_revision(
                self.leader_key.clone(),
                CompareOp::Equal,
                token.0,
            )]);
        }
        let txn = txn.and_then([TxnOp::put(self.key.clone(), beat.encode(), None)]);
        let ok = self
            .conn
            .call("record a heartbeat", move |mut c| {
                let txn = txn.clone();
                async move { Ok(c.txn(txn).await?.succeeded()) }
            })?
            .value;
        // A put retried after an attempt that may have landed puts the same beat again.
        match (ok, self.fence) {
            (true, _) => Ok(()),
            (false, Some(token)) => Err(StoreError::Fenced { token }),
            // Without a fence the transaction has no condition: it cannot fail.
            (false, None) => Ok(()),
        }
    }
}
