//! One bounded etcd call from a thread outside the store's runtime, and the heartbeat
//! writer that the controller's heartbeat thread uses (the same calls, fenced).

use super::*;

/// Runs one etcd call on `rt`, bounded by `CALL_TIMEOUT_MS`, from a thread that is not
/// one of the runtime's.
pub(super) fn bounded_call<T, F, Fut>(
    rt: &tokio::runtime::Handle,
    client: &Client,
    location: &str,
    op: &'static str,
    f: F,
) -> Result<T>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let fut = f(client.clone());
    rt.spawn(async move {
        let r = tokio::time::timeout(Duration::from_millis(CALL_TIMEOUT_MS), fut).await;
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_millis(CALL_TIMEOUT_MS + 1_000)) {
        Ok(Ok(Ok(v))) => Ok(v),
        Ok(Ok(Err(e))) => Err(StoreError::Etcd {
            location: location.to_string(),
            detail: format!("{op}: {}", one_line(&e.to_string())),
        }),
        Ok(Err(_)) | Err(_) => Err(StoreError::Timeout {
            location: location.to_string(),
            op,
            timeout_ms: CALL_TIMEOUT_MS,
        }),
    }
}

/// The controller's heartbeat thread's writer: the store's client and runtime, and the
/// fence of the term it was taken in.
pub(super) struct EtcdHeartbeat {
    pub(super) rt: tokio::runtime::Handle,
    pub(super) client: Client,
    pub(super) location: String,
    pub(super) key: String,
    pub(super) leader_key: String,
    pub(super) fence: Option<i64>,
}

impl HeartbeatWriter for EtcdHeartbeat {
    fn beat(&mut self, beat: &Heartbeat) -> Result<()> {
        let mut txn = Txn::new();
        if let Some(token) = self.fence {
            txn = txn.when([Compare::create_revision(
                self.leader_key.clone(),
                CompareOp::Equal,
                token,
            )]);
        }
        let txn = txn.and_then([TxnOp::put(self.key.clone(), beat.encode(), None)]);
        let op = "record a heartbeat";
        let ok = bounded_call(
            &self.rt,
            &self.client,
            &self.location,
            op,
            |mut c| async move { Ok(c.txn(txn).await?.succeeded()) },
        )?;
        match (ok, self.fence) {
            (true, _) => Ok(()),
            (false, Some(token)) => Err(StoreError::Fenced { token }),
            // Without a fence the transaction has no condition: it cannot fail.
            (false, None) => Ok(()),
        }
    }
}
