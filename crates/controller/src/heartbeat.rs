//! The controller's heartbeat, beaten from a thread of its own.
//!
//! Readers (`status`, `delete --wait`, a second controller on the home) judge whether a
//! controller runs by how old its heartbeat is. Beaten from the reconcile loop, it went
//! stale whenever one step took long (stopping a member of a cluster without quorum
//! takes ~8 s), and a live controller looked dead. So the loop only says what it does
//! (leading or not, the step under way) and this thread writes it down every
//! `HEARTBEAT_EVERY_MS`, whatever the loop is waiting on.
//!
//! Fencing: the writer is taken from the store when the leadership is won and carries
//! that term's fence, so a deposed leader's thread is refused like any of its writes
//! (and then stops beating until the loop leads again).

use quorum_store::{Heartbeat, HeartbeatWriter, StepInProgress, StoreError};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the heartbeat is written.
pub const HEARTBEAT_EVERY_MS: u64 = 1_000;

/// What the loop tells the thread.
struct Shared {
    identity: String,
    /// The writer of the current term; `None` while not leading.
    writer: Option<Box<dyn HeartbeatWriter>>,
    /// Bumped whenever `writer` is replaced, so a writer taken out for a beat is not put
    /// back over a newer one.
    generation: u64,
    /// The step under way on each control plane (reconcilers run at once).
    steps: BTreeMap<String, StepInProgress>,
    stop: bool,
}

pub struct Heartbeats {
    shared: Arc<(Mutex<Shared>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeats {
    /// Starts the thread; it beats only once `lead` gives it a writer.
    pub fn start(identity: &str) -> Heartbeats {
        let shared = Arc::new((
            Mutex::new(Shared {
                identity: identity.to_string(),
                writer: None,
                generation: 0,
                steps: BTreeMap::new(),
                stop: false,
            }),
            Condvar::new(),
        ));
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("quorum-heartbeat".into())
            .spawn(move || beat_until_stopped(&s))
            .ok();
        if thread.is_none() {
            tracing::error!(
                "cannot start the heartbeat thread; readers may think no controller runs"
            );
        }
        Heartbeats { shared, thread }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared.0)
    }

    /// This replica leads: beat with `writer` (taken in this term) from now on.
    pub fn lead(&self, writer: Box<dyn HeartbeatWriter>) {
        let mut s = self.lock();
        s.writer = Some(writer);
        s.generation += 1;
        drop(s);
        self.shared.1.notify_all();
    }

    /// This replica no longer leads: stop beating.
    pub fn stand_down(&self) {
        let mut s = self.lock();
        s.writer = None;
        s.generation += 1;
        s.steps.clear();
    }

    /// Where reconcilers report their steps (any number of handles).
    pub fn steps(&self) -> Steps {
        Steps {
            shared: self.shared.clone(),
        }
    }

    /// Stops the thread and waits for it (at most one store call).
    pub fn stop(mut self) {
        self.lock().stop = true;
        self.shared.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A handle reconcilers report their steps through.
#[derive(Clone)]
pub struct Steps {
    shared: Arc<(Mutex<Shared>, Condvar)>,
}

impl Steps {
    /// The step under way on `cp` (`None` once it ended); written with the next beat.
    pub fn step(&self, cp: &str, step: Option<StepInProgress>) {
        let mut s = lock(&self.shared.0);
        match step {
            Some(step) => {
                s.steps.insert(cp.to_string(), step);
            }
            None => {
                s.steps.remove(cp);
            }
        }
    }
}

/// The step a beat names: the oldest under way, the one a reader most needs to know
/// about (the heartbeat record names one step, as it always has).
fn oldest(steps: &BTreeMap<String, StepInProgress>) -> Option<StepInProgress> {
    steps.values().min_by_key(|s| s.since_ms).cloned()
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic elsewhere while holding the lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn beat_until_stopped(shared: &(Mutex<Shared>, Condvar)) {
    let (m, wake) = shared;
    let mut s = lock(m);
    // The last error said (a store out of reach fails every beat the same way).
    let mut last_error: Option<String> = None;
    loop {
        if s.stop {
            return;
        }
        if let Some(mut writer) = s.writer.take() {
            let generation = s.generation;
            let beat = Heartbeat {
                identity: s.identity.clone(),
                at_ms: crate::now_ms(),
                step: oldest(&s.steps),
            };
            // The store call runs without the lock: the loop never waits on it.
            drop(s);
            let res = writer.beat(&beat);
            s = lock(m);
            match res {
                Ok(()) => {
                    if last_error.take().is_some() {
                        tracing::info!("heartbeat recorded again");
                    }
                }
                Err(e @ StoreError::Fenced { .. }) => {
                    tracing::warn!("heartbeat refused, this replica no longer leads: {e}");
                    continue_without(&mut s, generation);
                    continue;
                }
                Err(e) => {
                    let text = e.to_string();
                    if last_error.as_deref() != Some(text.as_str()) {
                        tracing::warn!("heartbeat: {text}");
                        last_error = Some(text);
                    }
                }
            }
            if s.generation == generation {
                s.writer = Some(writer);
            }
        }
        s = wake
            .wait_timeout(s, Duration::from_millis(HEARTBEAT_EVERY_MS))
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// After a fenced beat: no writer until the loop leads again (unless it already did).
fn continue_without(s: &mut Shared, generation: u64) {
    if s.generation == generation {
        s.writer = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    /// Counts beats; refuses them as fenced once `fenced` is set.
    struct Counting {
        beats: Arc<AtomicU64>,
        fenced: Arc<std::sync::atomic::AtomicBool>,
        last: Arc<Mutex<Option<Heartbeat>>>,
    }

    impl HeartbeatWriter for Counting {
        fn beat(&mut self, beat: &Heartbeat) -> Result<(), StoreError> {
            if self.fenced.load(Ordering::SeqCst) {
                return Err(StoreError::Fenced {
                    token: quorum_store::FenceToken(1),
                });
            }
            self.beats.fetch_add(1, Ordering::SeqCst);
            *self.last.lock().unwrap() = Some(beat.clone());
            Ok(())
        }
    }

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn beats_while_leading_with_the_step_and_stops_when_fenced() {
        let beats = Arc::new(AtomicU64::new(0));
        let fenced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let last = Arc::new(Mutex::new(None));
        let h = Heartbeats::start("r1");
        // Not leading: no beat.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(beats.load(Ordering::SeqCst), 0);
        // Two control planes under way at once: the beat names the older step.
        let steps = h.steps();
        steps.step(
            "prod",
            Some(StepInProgress {
                control_plane: "prod".into(),
                description: "stop machine prod-1".into(),
                since_ms: 1,
            }),
        );
        steps.step(
            "dev",
            Some(StepInProgress {
                control_plane: "dev".into(),
                description: "stop machine dev-1".into(),
                since_ms: 2,
            }),
        );
        h.lead(Box::new(Counting {
            beats: beats.clone(),
            fenced: fenced.clone(),
            last: last.clone(),
        }));
        // The first beat comes at once (lead wakes the thread), not a period later.
        wait_until("the first beat", || beats.load(Ordering::SeqCst) >= 1);
        let b = last.lock().unwrap().clone().unwrap();
        assert_eq!(b.identity, "r1");
        assert_eq!(b.step.unwrap().description, "stop machine prod-1");
        // Fenced: the thread drops the writer and beats no more.
        fenced.store(true, Ordering::SeqCst);
        wait_until("the writer dropped", || h.lock().writer.is_none());
        let n = beats.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(beats.load(Ordering::SeqCst), n);
        let t0 = Instant::now();
        h.stop();
        assert!(t0.elapsed() < Duration::from_millis(HEARTBEAT_EVERY_MS));
    }
}
