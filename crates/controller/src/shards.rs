//! One replica of a sharded fleet (`quorum controller --shards N --store etcd://...`).
//!
//! The fleet's control planes are split into N shards (`quorum_core::shards::shard_of`,
//! by name). Each shard is a leadership of its own in the store, exactly like the one
//! leadership of an unsharded fleet: a leader key under `shard/<n>/` attached to a
//! lease, a token, every write fenced with it, the lease margin checked before every
//! side effect. A replica runs one `Controller` per shard it holds, each acting only on
//! its shard's control planes, all of them sharing the replica's `--concurrency`
//! permits and metrics.
//!
//! Which replica should hold which shard: each replica registers (a leader key under
//! `replica/<identity>/`, on a lease of its own), and every `REGISTRY_POLL_MS` reads the
//! registrations and computes `quorum_core::shards::assigned_to`. It starts a controller
//! for each shard assigned to it (that controller campaigns, and takes the shard as soon
//! as its lease is free) and stops the controller of each shard assigned elsewhere: its
//! passes are aborted and awaited, then its lease is revoked, so the new holder takes
//! it at its next look. A replica that dies stops renewing: its registration and its
//! shards' leases expire within the TTL, and the others take its shards at their next
//! look after that.
//!
//! Architecture invariant: the assignment decides only which shards a replica *tries*
//! to hold; what makes a control plane one replica's is its shard's lease. Two replicas
//! that disagree for a moment (one has not yet seen a registration) both try, and the
//! lease admits one.

use crate::metrics::Metrics;
use crate::{sleep_unless, Config, Controller, ReplicaParts};
use quorum_core::shards::assigned_to;
use quorum_store::{Campaign, Store, StoreError, StoreLocation};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::task::JoinHandle;

/// How often a replica reads the registrations and moves shards. A share moves within
/// the lease TTL (the dead replica's leases expire) plus this, plus a campaign.
pub const REGISTRY_POLL_MS: u64 = 250;

/// A shard this replica runs a controller for.
struct Held {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

/// A replica of a sharded fleet (see the module doc).
pub struct ShardedController {
    cfg: Config,
    /// The connection that holds this replica's registration.
    registry: Store,
    /// What every shard's controller shares.
    parts: ReplicaParts,
    held: BTreeMap<u32, Held>,
    /// What was last said (the replicas seen, the shards held), to say changes once.
    last_said: Option<(Vec<String>, Vec<u32>)>,
    /// The last error said, to say a repeated one once.
    last_error: Option<String>,
}

impl ShardedController {
    /// Connects, agrees on the shard count with the other replicas (a replica started
    /// with another count is refused here, with what to do), and prepares the
    /// registration.
    pub fn new(cfg: Config) -> Result<Self, StoreError> {
        assert!(cfg.shard.is_none(), "a replica holds shards, not one shard");
        if cfg.store == StoreLocation::Embedded {
            // Said before the embedded store is opened (which would make a home).
            return Err(StoreError::embedded_cannot_shard());
        }
        let mut registry = cfg.connect()?;
        registry.agree_shards(cfg.shards)?;
        registry.set_scope(&format!("replica/{}", cfg.identity))?;
        Ok(ShardedController {
            parts: ReplicaParts::new(&cfg),
            cfg,
            registry,
            held: BTreeMap::new(),
            last_said: None,
            last_error: None,
        })
    }

    /// The replica's metrics (every shard's controller adds to them).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.parts.metrics.clone()
    }

    /// Runs until `stop` is set; then stops every shard's controller (each gives its
    /// lease up once its passes ended) and withdraws the registration.
    pub async fn run(&mut self, stop: Arc<AtomicBool>) {
        tracing::info!(
            identity = %self.cfg.identity,
            shards = self.cfg.shards,
            store = %self.registry.location(),
            "sharded controller running"
        );
        while !stop.load(Ordering::Relaxed) {
            match self.tend().await {
                Ok(()) => self.last_error = None,
                Err(e) => {
                    if self.last_error.as_deref() != Some(&e.to_string()) {
                        tracing::error!("sharding: {e}");
                        self.last_error = Some(e.to_string());
                    }
                }
            }
            sleep_unless(&stop, REGISTRY_POLL_MS).await;
        }
        let all: Vec<u32> = self.held.keys().copied().collect();
        self.release(&all).await;
        self.registry.step_down();
        tracing::info!("sharded controller stopped");
    }

    /// One look: register, read the registrations, give up the shards assigned
    /// elsewhere, start the ones assigned here.
    async fn tend(&mut self) -> Result<(), StoreError> {
        self.reap();
        let me = self.cfg.identity.clone();
        if self.registry.lease_lost() {
            // Renewals said the lease is gone: register again (the shards' own leases
            // are separate; each shard's controller looks after its own).
            self.registry.step_down();
        }
        match self.registry.campaign(&me, self.cfg.lease_ttl_ms)? {
            Campaign::Leading { .. } => {}
            Campaign::Standby { leader } => {
                // The registration of an earlier process of the same identity has not
                // expired yet: hold nothing until it has.
                let since = leader.map_or(0, |l| l.since_ms);
                return Err(StoreError::Sharding(format!(
                    "a replica named {me:?} is registered already (since {since} ms after the \
                     epoch); this one waits for that registration to end (at most --lease-ttl \
                     after that process stopped). Give each replica its own --identity"
                )));
            }
        }
        let replicas: Vec<String> = self
            .registry
            .scoped_leaders("replica/")?
            .into_iter()
            .filter_map(|(scope, _)| scope.strip_prefix("replica/").map(str::to_string))
            .collect();
        let names: Vec<&str> = replicas.iter().map(String::as_str).collect();
        let want = assigned_to(&me, self.cfg.shards, &names);
        let give_up: Vec<u32> = self
            .held
            .keys()
            .filter(|s| !want.contains(s))
            .copied()
            .collect();
        self.release(&give_up).await;
        let take: Vec<u32> = want
            .iter()
            .filter(|s| !self.held.contains_key(s))
            .copied()
            .collect();
        for s in take {
            self.start(s)?;
        }
        self.parts.metrics.replicas(replicas.len());
        self.say(replicas, want);
        Ok(())
    }

    /// Starts the controller of shard `s` (it campaigns for the shard's lease).
    fn start(&mut self, s: u32) -> Result<(), StoreError> {
        let mut cfg = self.cfg.clone();
        cfg.shard = Some(s);
        let mut c = Controller::with_parts(cfg, &self.parts)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = tokio::spawn(async move { c.run(flag).await });
        self.held.insert(s, Held { stop, handle });
        Ok(())
    }

    /// Stops the controllers of `shards`, all at once, and waits for each to end (its
    /// passes ended, then its lease revoked).
    async fn release(&mut self, shards: &[u32]) {
        let mut ending = Vec::new();
        for s in shards {
            if let Some(h) = self.held.remove(s) {
                h.stop.store(true, Ordering::Relaxed);
                ending.push((*s, h.handle));
            }
        }
        for (s, handle) in ending {
            if let Err(e) = handle.await {
                tracing::error!(shard = s, "the shard's controller ended badly: {e}");
            }
            self.parts.metrics.forget_scope(&format!("shard/{s}"));
            tracing::info!(shard = s, "shard given up");
        }
    }

    /// Forgets the controllers that ended on their own (a panic): they start again.
    fn reap(&mut self) {
        let ended: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, h)| h.handle.is_finished())
            .map(|(s, _)| *s)
            .collect();
        for s in ended {
            tracing::error!(shard = s, "the shard's controller ended; starting it again");
            self.held.remove(&s);
            self.parts.metrics.forget_scope(&format!("shard/{s}"));
        }
    }

    fn say(&mut self, mut replicas: Vec<String>, want: Vec<u32>) {
        replicas.sort();
        let now = (replicas, want);
        if self.last_said.as_ref() != Some(&now) {
            tracing::info!(
                replicas = %now.0.join(", "),
                shards = ?now.1,
                of = self.cfg.shards,
                "shards assigned to this replica"
            );
            self.last_said = Some(now);
        }
    }
}
