//! `quorum controller`: the reconcile loop in the foreground, with its metrics endpoint,
//! until Ctrl-C or SIGTERM (the machines keep running).

use crate::args::{ControllerArgs, DEFAULT_METRICS_ADDR};
use anyhow::{bail, Context, Result};
use quorum_controller::{Config, Controller, ShardedController};
use quorum_ops::Place;
use quorum_provider::default_etcd_dir;
use quorum_store::StoreLocation;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub async fn run(at: &Place, a: ControllerArgs) -> Result<()> {
    let home = &at.home;
    let mut cfg = Config::new(home, default_etcd_dir());
    cfg.store = at.store.clone();
    cfg.lease_ttl_ms = a.lease_ttl.as_millis() as u64;
    cfg.concurrency = a.concurrency;
    cfg.max_open_control_planes = a.max_open_control_planes;
    cfg.shards = a.shards;
    cfg.secrets_key_file = at.secrets_key_file.clone();
    if let Some(id) = a.identity {
        cfg.identity = id;
    }
    let where_ = match &at.store {
        StoreLocation::Embedded => home.display().to_string(),
        StoreLocation::Etcd(l) => l.url(),
    };
    if a.shards > 1 && at.store == StoreLocation::Embedded {
        bail!(
            "--shards {} needs a management etcd shared by the replicas: run every replica \
             with --store etcd://HOST:PORT,... (the embedded state file has exactly one \
             controller, the process holding its lock)",
            a.shards
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let opening = || format!("opening the store {where_}");
    let (mut c, sharded) = if a.shards > 1 {
        let c = ShardedController::new(cfg).with_context(opening)?;
        (Replica::Sharded(c), format!(", {} shards", a.shards))
    } else {
        let c = Controller::new(cfg).with_context(opening)?;
        (Replica::One(c), String::new())
    };
    if a.metrics_addr != "off" {
        serve_metrics(&a.metrics_addr, c.metrics(), &stop).await?;
    }
    if let Some(addr) = a.join_listen {
        quorum_ops::hosts::serve_join(at, addr, &stop).await?;
        eprintln!("quorum controller: join service on {addr}");
    }
    tokio::spawn(stop_on_signal(stop.clone()));
    eprintln!(
        "quorum controller: home {}, store {}{sharded} (Ctrl-C to stop; machines keep running)",
        home.display(),
        where_
    );
    match &mut c {
        Replica::One(c) => c.run(stop).await,
        Replica::Sharded(c) => c.run(stop).await,
    }
    Ok(())
}

/// This process's controller: one leadership over every control plane, or a replica of
/// a sharded fleet.
enum Replica {
    One(Controller),
    Sharded(ShardedController),
}

impl Replica {
    fn metrics(&self) -> Arc<quorum_controller::metrics::Metrics> {
        match self {
            Replica::One(c) => c.metrics(),
            Replica::Sharded(c) => c.metrics(),
        }
    }
}

/// Serves Prometheus metrics on `addr` until `stop`.
async fn serve_metrics(
    addr: &str,
    metrics: Arc<quorum_controller::metrics::Metrics>,
    stop: &Arc<AtomicBool>,
) -> Result<()> {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        // The port is per machine, the controller lock per home: a controller of another
        // home on this machine holds the default port. Say so, with the way out.
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => bail!(
            "cannot serve metrics on {addr}: the address is in use, most likely by another \
             quorum controller on this machine (one per home; controllers of different homes \
             share the default port {DEFAULT_METRICS_ADDR}); give each its own with \
             --metrics-addr 127.0.0.1:PORT, or --metrics-addr off"
        ),
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "cannot serve metrics on {addr}; choose another with --metrics-addr, or 'off'"
                )
            })
        }
    };
    eprintln!(
        "quorum controller: metrics on http://{}/metrics",
        listener.local_addr()?
    );
    tokio::spawn(quorum_controller::metrics::serve(
        listener,
        metrics,
        stop.clone(),
    ));
    Ok(())
}

/// Sets `stop` on Ctrl-C or SIGTERM.
async fn stop_on_signal(stop: Arc<AtomicBool>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {},
    }
    stop.store(true, Ordering::Relaxed);
}
