//! `quorum haproxy-config`: an HAProxy configuration for a control plane's clients.

use crate::args::HaproxyConfigArgs;
use anyhow::{bail, Result};
use quorum_core::CLIENT_PORT;
use quorum_ops::{haproxy_frontend_tls, Ctx, Place};
use std::net::SocketAddr;
use std::path::Path;

pub fn run(at: &Place, a: HaproxyConfigArgs) -> Result<()> {
    let HaproxyConfigArgs {
        name,
        bind,
        tls_dir,
    } = a;
    let ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&name)?;
    let Some(h) = &cp.spec.haproxy else {
        bail!(
            "{name} has no HAProxy: create it with --haproxy-runtime-api SOCKET (or set \
             spec.haproxy.runtimeApi in its manifest)"
        );
    };
    let servers: Vec<(String, SocketAddr)> = ctx
        .store
        .machines(&name)?
        .iter()
        .filter(|m| !m.deleting)
        .map(|m| (m.name.clone(), SocketAddr::from((m.address, CLIENT_PORT))))
        .collect();
    let tls = match ctx.store.certificate_authority(&cp)? {
        None => None,
        Some(stored) => {
            let dir = tls_dir.unwrap_or_else(|| quorum_controller::haproxy_dir(&at.home, &name));
            Some(haproxy_frontend_tls(&name, &stored, bind, &dir)?)
        }
    };
    print!(
        "{}",
        quorum_haproxy::config(
            &name,
            bind,
            Path::new(&h.runtime_api),
            &h.backend,
            &servers,
            tls.as_ref(),
        )
    );
    Ok(())
}
