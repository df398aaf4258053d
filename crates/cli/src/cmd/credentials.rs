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

/// Writes a client certificate for `name` signed by its CA (during a CA rotation, from
/// phase 2 on, by the new one), the key (0600) and the CA bundle (both CAs during a
/// rotation) into `out` (0700), and prints how to use them.
fn credentials(ctx: &Ctx, name: &str, out: &Path, cn: &str, lifetime: Span) -> Result<()> {
    let cp = ctx.store.get_control_plane(name)?;
    if ctx.store.certificate_authority(&cp)?.is_none() {
        bail!("{name} was created with --insecure-plaintext: its members take no certificates (and check none)");
    }
    let a = access::open(&ctx.store, &cp, "quorum-credentials", Default::default())?;
    let (Some(ca), Some(bundle)) = (a.ca(), a.trust_pem()) else {
        bail!("{name}: its CA could not be loaded");
    };
    let now = quorum_clock::now_unix_s();
    let wanted = now.saturating_add(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX));
    let not_after = wanted.min(ca.not_after_unix_s());
    let id = ca.issue_client(cn, now, not_after)?;
    quorum_pki::create_private_dir(out)
        .with_context(|| format!("cannot create {}", out.display()))?;
    let files = [
        ("ca.crt", bundle.as_str()),
        ("client.crt", id.cert_pem.as_str()),
        ("client.key", id.key_pem.as_str()),
    ];
    for (file, pem) in files {
        let path = out.join(file);
        quorum_pki::write_private(&path, pem.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    // The control plane's client addresses (`quorum_core::reach`): a member stays on
    // one of them through every replacement, so a client given all of them is never
    // left with only dead addresses, whether or not it ever re-reads the member list.
    let endpoints = quorum_core::reach::client_urls(&cp, &ctx.store.machines(name)?);
    let d = out.display();
    println!(
        "{name}: wrote {d}/ca.crt, {d}/client.crt and {d}/client.key (CN {cn:?}, valid until {})",
        quorum_pki::format_unix_s(not_after)
    );
    println!();
    println!("  {}", etcdctl_command(&endpoints, out));
    println!();
    println!("{}", client_advice(name, cp.spec.provider.is_local()));
    if let Some(r) = &cp.ca_rotation {
        eprintln!("{}", rotation_warning(name, r));
    }
    Ok(())
}

/// What a client must know during a CA rotation: these credentials' fate.
fn rotation_warning(name: &str, r: &quorum_core::CaRotation) -> String {
    use quorum_core::CaPhase;
    let phase = format!("now in phase {} of 3, {}", r.phase.number(), r.phase);
    match r.phase {
        CaPhase::Trust => format!(
            "warning: {name}'s CA is being rotated ({phase}): this certificate comes from the old CA and is refused from phase 3 on; get new credentials once phase 2 begins (`quorum status {name}` shows it). ca.crt holds both CAs: keep using it."
        ),
        CaPhase::Reissue | CaPhase::Drop => format!(
            "note: {name}'s CA is being rotated ({phase}): this certificate comes from the new CA and stays valid after it. ca.crt holds both CAs; after the rotation the new CA alone suffices."
        ),
    }
}

/// How a client should be configured (printed under the etcdctl line).
fn client_advice(name: &str, local: bool) -> String {
    if local {
        format!("Give clients every one of these addresses: a member of {name} stays on one of them through every replacement, remediation and scale down, so a client that never re-reads the member list is never stranded. After a scale up, `quorum credentials` or `quorum status {name} -o json` (clientAddresses) lists the new ones.")
    } else {
        format!("Members on hosts take the addresses of the hosts they are placed on: clients should follow `quorum status {name} -o json` (endpoints) or re-read the member list as members are replaced.")
    }
}

/// An etcdctl command line with the credentials in `dir` that works with any one of
/// `endpoints` serving (`endpoint health` would fail on the spare address, which has no
/// member most of the time).
fn etcdctl_command(endpoints: &[String], dir: &Path) -> String {
    let d = dir.display();
    let endpoints = if endpoints.is_empty() {
        "https://ADDRESS:2379".to_string()
    } else {
        endpoints.join(",")
    };
    format!("etcdctl --endpoints {endpoints} --cacert {d}/ca.crt --cert {d}/client.crt --key {d}/client.key member list -w table")
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
