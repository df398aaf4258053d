//! The store for async code: one thread owns the [`Store`] and runs its calls one at a
//! time; async callers hand it a closure and await the answer.
//!
//! Architecture invariant: no store call runs on an async worker thread, and no lock is
//! held across one. Every backend call blocks (SQLite on the disk; the etcd backend
//! waits on a runtime of its own, up to its call timeout of seconds), and a controller
//! runs on a small runtime: a blocked worker would stall every reconciler scheduled on
//! it. Calls run in the order sent, each to its end before the next, as under the mutex
//! this replaces (every call is one transaction, so order is all callers relied on).
//!
//! Bounded: at most [`QUEUE_BOUND`] calls wait (a caller beyond waits for room), and a
//! caller waits at most [`CALL_LIMIT_MS`] for its answer, queueing included. A call
//! whose caller gave up before it started is never run: a write nobody waits for would
//! land unseen. One that started runs to its end, like an RPC whose answer was lost.

mod calls;

use crate::{Store, StoreError};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Calls waiting for the store's thread, at most.
pub const QUEUE_BOUND: usize = 256;
/// The longest a caller waits for one call's answer, queueing included. Above the etcd
/// backend's own bound on a call (its attempts on every endpoint), so that the backend's
/// error, which names what each endpoint said, is what a caller normally sees.
pub const CALL_LIMIT_MS: u64 = 30_000;

type Job = Box<dyn FnOnce(&mut Store) + Send>;

/// A handle on the store's thread. Clones share the thread; it ends, dropping the
/// store, once the last handle is gone and the calls sent before have run.
#[derive(Clone)]
pub struct StoreTask {
    jobs: mpsc::Sender<Job>,
    location: Arc<str>,
    /// `CALL_LIMIT_MS`, but in tests.
    limit_ms: u64,
}

impl StoreTask {
    /// Moves `store` onto a thread of its own.
    pub fn start(store: Store) -> Result<StoreTask, StoreError> {
        let location: Arc<str> = store.location().into();
        let (jobs, mut queue) = mpsc::channel::<Job>(QUEUE_BOUND);
        std::thread::Builder::new()
            .name("quorum-store-calls".into())
            .spawn(move || {
                let mut store = store;
                while let Some(job) = queue.blocking_recv() {
                    // A call that panicked left nothing half-written (every call is one
                    // transaction); its caller hears the thread dropped its answer, and
                    // the calls after it run as before.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut store)));
                }
            })
            .map_err(|e| StoreError::Unavailable {
                location: location.to_string(),
                op: "start the store's thread",
                detail: e.to_string(),
            })?;
        Ok(StoreTask {
            jobs,
            location,
            limit_ms: CALL_LIMIT_MS,
        })
    }

    /// Where the store is (`StateStore::location`), without a call.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Runs `f` on the store's thread and returns its answer; `op` names the call in
    /// the error when it cannot run or its answer does not come within the limit.
    pub async fn call<T, E>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Store) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |store: &mut Store| {
            // The caller gave up waiting: the call is not made (see the module doc).
            if tx.is_closed() {
                return;
            }
            let _ = tx.send(f(store));
        });
        let limit_ms = self.limit_ms;
        let answer = tokio::time::timeout(Duration::from_millis(limit_ms), async {
            self.jobs.send(job).await.ok()?;
            rx.await.ok()
        })
        .await;
        match answer {
            Ok(Some(result)) => result,
            Ok(None) => Err(self.stopped(op).into()),
            Err(_) => Err(StoreError::Timeout {
                location: self.location.to_string(),
                op,
                timeout_ms: limit_ms,
            }
            .into()),
        }
    }

    /// The thread is gone, or dropped the answer (the call panicked).
    fn stopped(&self, op: &'static str) -> StoreError {
        StoreError::Unavailable {
            location: self.location.to_string(),
            op,
            detail: "the store's thread stopped or the call failed before it answered".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn store() -> (tempfile::TempDir, StoreTask) {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let store = Store::open(&home).expect("store opens");
        (dir, StoreTask::start(store).expect("thread starts"))
    }

    #[tokio::test]
    async fn calls_run_on_the_stores_thread_in_order() {
        let (_dir, task) = store();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut calls = Vec::new();
        for i in 0..20 {
            let seen = seen.clone();
            let t = task.clone();
            calls.push(async move {
                t.call("note", move |_s| {
                    let name = std::thread::current().name().map(str::to_string);
                    seen.lock().expect("not poisoned").push(i);
                    Ok::<_, StoreError>(name)
                })
                .await
            });
        }
        for c in calls {
            let name = c.await.expect("answered");
            assert_eq!(name.as_deref(), Some("quorum-store-calls"));
        }
        assert_eq!(
            *seen.lock().expect("not poisoned"),
            (0..20).collect::<Vec<_>>()
        );
        let cps = task
            .call("list", |s| s.control_planes())
            .await
            .expect("lists");
        assert!(cps.is_empty());
    }

    #[tokio::test]
    async fn a_panicking_call_is_an_error_and_the_next_call_runs() {
        let (_dir, task) = store();
        let err = task
            .call("explode", |_s| -> Result<(), StoreError> {
                panic!("a bug in a call")
            })
            .await
            .expect_err("no answer");
        assert!(err.is_unavailable(), "{err}");
        assert!(err.to_string().contains("explode"), "{err}");
        let v = task.call("version", |s| s.data_version()).await;
        assert!(v.is_ok(), "{v:?}");
    }

    #[tokio::test]
    async fn a_call_given_up_before_it_started_never_runs() {
        let (_dir, task) = store();
        let ran = Arc::new(AtomicUsize::new(0));
        // The thread is held inside a first call until told to go on.
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (held_tx, held_rx) = oneshot::channel::<()>();
        let first = {
            let t = task.clone();
            tokio::spawn(async move {
                t.call("hold", move |_s| {
                    let _ = held_tx.send(());
                    let _ = go_rx.recv_timeout(Duration::from_secs(60));
                    Ok::<_, StoreError>(())
                })
                .await
            })
        };
        held_rx.await.expect("the thread holds");
        let counted = ran.clone();
        let impatient = StoreTask {
            limit_ms: 100,
            ..task.clone()
        };
        let err = impatient
            .call("late", move |_s| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, StoreError>(())
            })
            .await
            .expect_err("given up");
        assert!(
            matches!(err, StoreError::Timeout { op: "late", .. }),
            "{err}"
        );
        go_tx.send(()).expect("the first call waits");
        first
            .await
            .expect("joined")
            .expect("the first call answered");
        // The thread has passed the abandoned call by the time a later one answers.
        task.call("after", |s| s.data_version())
            .await
            .expect("answered");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the abandoned call ran");
    }
}
