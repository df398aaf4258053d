//! HAProxy's own certificate for a TLS control plane's frontend.

use anyhow::{Context, Result};
use quorum_controller::access;
use std::path::Path;

/// HAProxy's frontend certificate (SAN: the bind address) and the CA bundle, written
/// into `dir` for the configuration to reference.
pub fn haproxy_frontend_tls(
    name: &str,
    stored: &quorum_store::StoredCa,
    bind: std::net::SocketAddr,
    dir: &Path,
) -> Result<quorum_haproxy::FrontendTls> {
    let ca = quorum_pki::Ca::from_pem(name, &stored.cert_pem, &stored.key_pem)?;
    let now = access::now_unix_s();
    let not_after = (now + 365 * 86_400).min(ca.not_after_unix_s());
    let certs = ca.issue_machine(&format!("{name}-haproxy"), bind.ip(), now, not_after)?;
    quorum_pki::create_private_dir(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let tls = quorum_haproxy::FrontendTls {
        crt: dir.join("haproxy.pem"),
        ca_file: dir.join("ca.crt"),
    };
    let bundle = format!(
        "{}\n{}\n",
        certs.server.cert_pem.trim_end(),
        certs.server.key_pem.trim_end()
    );
    quorum_pki::write_private(&tls.crt, bundle.as_bytes())?;
    quorum_pki::write_private(&tls.ca_file, ca.cert_pem().as_bytes())?;
    eprintln!(
        "{name}: wrote HAProxy's certificate {} (mode 0600) and the CA bundle {}",
        tls.crt.display(),
        tls.ca_file.display()
    );
    Ok(tls)
}
