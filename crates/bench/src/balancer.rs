//! The HAProxy a `--client-mode haproxy` run puts in front of its control plane.

use anyhow::{bail, Context, Result};
use quorum_controller::address_is_free;
use quorum_core::{CLIENT_PORT, DEFAULT_HAPROXY_BACKEND};
use quorum_haproxy::{HaproxyProcess, RuntimeApi};
use quorum_ops::Ctx;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Every HAProxy runtime API command gives up after this long.
const HAPROXY_TIMEOUT_MS: u64 = 2_000;
/// How often the backend is looked at while waiting for it.
const BACKEND_POLL_MS: u64 = 100;

/// An HAProxy in front of one control plane, started for the run and stopped with it.
pub(crate) struct Balancer {
    pub(crate) process: HaproxyProcess,
    pub(crate) api: RuntimeApi,
    pub(crate) frontend: SocketAddr,
}

/// Where a control plane's HAProxy will run: its frontend (a free address of the
/// home's subnet) and its directory and admin socket.
pub(crate) struct BalancerPlace {
    frontend: SocketAddr,
    dir: PathBuf,
    pub(crate) socket: PathBuf,
}

pub(crate) fn place_balancer(ctx: &Ctx, home: &Path, name: &str) -> Result<BalancerPlace> {
    let (a, b) = ctx.store.subnet()?;
    // Machines take addresses from .1 upwards; the balancers take them from the top.
    let ip = (200u8..=250)
        .rev()
        .map(|x| Ipv4Addr::new(127, a, b, x))
        .find(|ip| address_is_free(*ip))
        .context("no free address for HAProxy in 127.A.B.200-250")?;
    let frontend = SocketAddr::from((ip, CLIENT_PORT));
    let dir = home.join("haproxy").join(name);
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join("admin.sock");
    Ok(BalancerPlace {
        frontend,
        dir,
        socket,
    })
}

/// Starts an HAProxy with an empty backend for `cp` (which exists: a TLS frontend
/// needs a certificate from its CA).
pub(crate) fn start_balancer(
    ctx: &Ctx,
    cp: &quorum_core::ControlPlane,
    place: BalancerPlace,
) -> Result<Balancer> {
    let BalancerPlace {
        frontend,
        dir,
        socket,
    } = place;
    let tls = match ctx.store.certificate_authority(cp)? {
        Some(stored) => Some(quorum_ops::haproxy_frontend_tls(
            &cp.name, &stored, frontend, &dir,
        )?),
        None => None,
    };
    let config = quorum_haproxy::config(
        &cp.name,
        frontend,
        &socket,
        DEFAULT_HAPROXY_BACKEND,
        &[],
        tls.as_ref(),
    );
    let process = HaproxyProcess::start(&dir, &config, &socket, 10_000)?;
    Ok(Balancer {
        process,
        api: RuntimeApi::new(&socket, HAPROXY_TIMEOUT_MS),
        frontend,
    })
}

/// Waits until HAProxy's backend holds `n` enabled servers.
pub(crate) async fn wait_backend(api: &RuntimeApi, n: usize, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let api2 = api.clone();
        let servers =
            tokio::task::spawn_blocking(move || api2.servers(DEFAULT_HAPROXY_BACKEND)).await??;
        if servers.iter().filter(|s| !s.maintenance).count() == n {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!(
                "HAProxy's backend did not reach {n} servers within {}s: {servers:?}",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(BACKEND_POLL_MS)).await;
    }
}
