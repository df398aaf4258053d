//! `quorum credentials`: a client certificate for a control plane, and how to use it.

use crate::args::CredentialsArgs;
use anyhow::{bail, Context, Result};
use quorum_controller::access;
use quorum_core::Span;
use quorum_ops::{Ctx, Place};
use std::path::Path;

pub fn run(at: &Place, a: CredentialsArgs) -> Result<()> {
    let ctx = Ctx::open_existing(at)?;
    credentials(&ctx, &a.name, &a.out, &a.common_name, a.lifetime)
}

/// Writes a client certificate for `name` signed by its CA, the key (0600) and the CA
/// bundle into `out` (0700), and prints how to use them.
fn credentials(ctx: &Ctx, name: &str, out: &Path, cn: &str, lifetime: Span) -> Result<()> {
    let cp = ctx.store.get_control_plane(name)?;
    let Some(stored) = ctx.store.certificate_authority(&cp)? else {
        bail!("{name} was created with --insecure-plaintext: its members take no certificates (and check none)");
    };
    let ca = quorum_pki::Ca::from_pem(name, &stored.cert_pem, &stored.key_pem)?;
    let now = access::now_unix_s();
    let wanted = now.saturating_add(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX));
    let not_after = wanted.min(ca.not_after_unix_s());
    let id = ca.issue_client(cn, now, not_after)?;
    quorum_pki::create_private_dir(out)
        .with_context(|| format!("cannot create {}", out.display()))?;
    let files = [
        ("ca.crt", ca.cert_pem()),
        ("client.crt", id.cert_pem.as_str()),
        ("client.key", id.key_pem.as_str()),
    ];
    for (file, pem) in files {
        let path = out.join(file);
        quorum_pki::write_private(&path, pem.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Every member's endpoint, so etcdctl (which moves to another endpoint when one
    // fails) keeps working while one of them is down.
    let endpoints: Vec<String> = ctx
        .store
        .machines(name)?
        .iter()
        .filter(|m| !m.deleting)
        .map(|m| m.client_url())
        .collect();
    let d = out.display();
    println!(
        "{name}: wrote {d}/ca.crt, {d}/client.crt and {d}/client.key (CN {cn:?}, valid until {})",
        quorum_pki::format_unix_s(not_after)
    );
    println!();
    println!("  {}", etcdctl_command(&endpoints, out));
    println!();
    println!(
        "Clients should follow `quorum status {name} -o json` (endpoints) as members are replaced."
    );
    Ok(())
}

/// The etcdctl command line that checks every endpoint with the credentials in `dir`.
fn etcdctl_command(endpoints: &[String], dir: &Path) -> String {
    let d = dir.display();
    let endpoints = if endpoints.is_empty() {
        "https://ADDRESS:2379".to_string()
    } else {
        endpoints.join(",")
    };
    format!("etcdctl --endpoints {endpoints} --cacert {d}/ca.crt --cert {d}/client.crt --key {d}/client.key endpoint health")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_command_names_every_endpoint() {
        let eps: Vec<String> = (2..5)
            .map(|i| format!("https://127.9.0.{i}:2379"))
            .collect();
        let line = etcdctl_command(&eps, Path::new("/c"));
        assert!(line.starts_with(
            "etcdctl --endpoints https://127.9.0.2:2379,https://127.9.0.3:2379,https://127.9.0.4:2379 --cacert /c/ca.crt"
        ), "{line}");
        assert!(etcdctl_command(&[], Path::new("/c")).contains("https://ADDRESS:2379"));
    }
}
