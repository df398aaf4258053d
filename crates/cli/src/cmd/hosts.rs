//! `quorum host add`, `quorum host install` and `quorum hosts`.

use crate::args::{HostAddArgs, HostCommand, HostInstallArgs, HostRemoveArgs, HostsArgs};
use anyhow::Result;
use quorum_agent::client::{AgentClient, AgentError};
use quorum_ops::hosts::{self, AddHost, HostRecord};
use quorum_ops::Place;
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;

/// How long `quorum hosts` waits for all agents together.
const REPORT_DEADLINE_MS: u64 = 5_000;

pub async fn run(at: &Place, c: HostCommand) -> Result<()> {
    match c {
        HostCommand::Add(a) => add(at, a),
        HostCommand::Install(a) => install(at, a).await,
        HostCommand::Remove(a) => remove(at, a),
    }
}

fn remove(at: &Place, a: HostRemoveArgs) -> Result<()> {
    let store = at.connect()?;
    let r = hosts::remove(&store, &a.name, now_unix_s().saturating_mul(1_000))?;
    println!(
        "host {} ({}) removed{}",
        a.name,
        r.address,
        if r.joined {
            "; its agent's certificate is no longer renewed: stop the agent on the host and delete its state directory"
        } else {
            ""
        }
    );
    Ok(())
}

async fn install(at: &Place, a: HostInstallArgs) -> Result<()> {
    let target = quorum_ssh::Target::parse(&a.ssh, a.ssh_port)?;
    quorum_ssh::plan::check_prefix(&a.prefix)?;
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("HOME is not set: give --key and --known-hosts"))?;
    let ssh_dir = home.join(".ssh");
    let key = match a.key {
        Some(k) => k,
        None => ["id_ed25519", "id_ecdsa"]
            .iter()
            .map(|n| ssh_dir.join(n))
            .find(|p| p.exists())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no SSH key at {0}/id_ed25519 or {0}/id_ecdsa: give one with --key FILE",
                    ssh_dir.display()
                )
            })?,
    };
    if !key.is_file() {
        anyhow::bail!("no SSH key at {}: give one with --key FILE", key.display());
    }
    let req = quorum_ops::hostinstall::InstallHost {
        name: a.name.clone(),
        target,
        key,
        known_hosts: a.known_hosts.unwrap_or_else(|| ssh_dir.join("known_hosts")),
        address: a.address,
        labels: a.record.labels.into_iter().collect(),
        prefix: a.prefix.clone(),
        certificate_lifetime_s: a.record.certificate_lifetime.as_secs(),
        endpoint: a.record.join_endpoint,
        rejoin: a.rejoin,
        binary: std::env::current_exe()?,
    };
    let store = at.connect()?;
    let done = quorum_ops::hostinstall::install(&store, &req, now_unix_s(), |s| {
        eprintln!("{}: {s}", a.name)
    })
    .await?;
    let sent = if done.uploaded_bytes == 0 {
        "binary already there".to_string()
    } else {
        format!(
            "{:.1} MB sent in {:.1}s",
            done.uploaded_bytes as f64 / 1e6,
            done.upload_ms as f64 / 1e3
        )
    };
    println!(
        "host {} at {}: agent {} under {} ({}), {}, sha256 {}; {} and answering {:.1}s after its start",
        a.name,
        done.address,
        if done.uploaded_bytes == 0 { "restarted" } else { "installed" },
        a.prefix,
        done.started,
        sent,
        &done.sha256[..16],
        if done.joined_now { "joined" } else { "already joined" },
        done.join_ms as f64 / 1e3
    );
    Ok(())
}

fn add(at: &Place, a: HostAddArgs) -> Result<()> {
    let store = at.connect()?;
    let now = now_unix_s();
    let req = AddHost {
        name: a.name.clone(),
        address: a.address,
        labels: a.record.labels.into_iter().collect(),
        token_ttl_s: a.token_ttl.as_secs().max(1),
        certificate_lifetime_s: a.record.certificate_lifetime.as_secs(),
        rejoin: a.rejoin,
        endpoint: a.record.join_endpoint,
    };
    let token = hosts::add(&store, &req, now)?;
    let labels = if req.labels.is_empty() {
        String::new()
    } else {
        let l: Vec<String> = req.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(" ({})", l.join(", "))
    };
    let until = quorum_pki::format_unix_s(now + req.token_ttl_s as i64);
    eprintln!(
        "host {} {} at {}{labels}; its join token (below) works once, until {until}, at the join service {}.",
        a.name,
        if a.rejoin { "may join again" } else { "added" },
        a.address,
        token.endpoint
    );
    eprintln!("{}", join_hint(&a.name));
    println!("{}", token.encode());
    Ok(())
}

/// How to start the agent on the new host: the token in the environment (off the
/// command line `ps` shows, as `quorum agent --help` says), the state directory named.
fn join_hint(host: &str) -> String {
    format!(
        "On {host}, run:  QUORUM_JOIN_TOKEN='<token>' quorum agent --state-dir /var/lib/quorum-agent\n(or `quorum host install {host} ...` does it over SSH)"
    )
}

/// One host as `quorum hosts` shows it.
struct Seen {
    record: HostRecord,
    report: Option<Result<quorum_agent::proto::ReportReply, AgentError>>,
}

pub async fn list(at: &Place, a: HostsArgs) -> Result<()> {
    let store = at.connect()?;
    let records = hosts::list(&store)?;
    let tls = if records.iter().any(|h| h.key_sha256.is_some()) {
        Some(hosts::controller_tls(&store, now_unix_s())?)
    } else {
        None
    };
    let asks = records.into_iter().map(|record| {
        let tls = tls.clone();
        async move {
            let report = match (&tls, record.key_sha256.is_some()) {
                (Some(tls), true) => Some(ask(&record, tls.clone()).await),
                _ => None,
            };
            Seen { record, report }
        }
    });
    let seen = futures::future::join_all(asks).await;
    if a.output == "json" {
        let v: Vec<serde_json::Value> = seen.iter().map(to_json).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if seen.is_empty() {
        println!("No hosts. Add one: quorum host add NAME --address IP");
        return Ok(());
    }
    let rows: Vec<[String; 7]> = seen.iter().map(row).collect();
    let head = [
        "NAME",
        "ADDRESS",
        "LABELS",
        "AGENT",
        "MEMBERS",
        "ETCD",
        "CERTIFICATE ENDS",
    ];
    let mut widths = head.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(widths.iter()).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(head.to_vec());
    for r in &rows {
        line(r.iter().map(String::as_str).collect());
    }
    for s in &seen {
        if let Some(Err(e)) = &s.report {
            println!("  {}: {e}", s.record.name);
        }
    }
    Ok(())
}

async fn ask(
    h: &HostRecord,
    tls: std::sync::Arc<quorum_agent::tls::ClientConfig>,
) -> Result<quorum_agent::proto::ReportReply, AgentError> {
    let addr = SocketAddr::new(h.address, quorum_agent::AGENT_PORT);
    let go = async {
        let mut c = AgentClient::connect(&h.name, addr, tls).await?;
        c.report().await
    };
    match tokio::time::timeout(Duration::from_millis(REPORT_DEADLINE_MS), go).await {
        Ok(r) => r,
        Err(_) => Err(AgentError::Unreachable {
            host: h.name.clone(),
            address: addr,
            reason: format!("no report within {REPORT_DEADLINE_MS} ms"),
        }),
    }
}

fn agent_state(s: &Seen) -> (&'static str, Option<String>) {
    match &s.report {
        None if s.record.join.is_some() => ("waiting to join", None),
        None => ("not joined", None),
        Some(Ok(_)) => ("ready", None),
        Some(Err(AgentError::CertificateExpired { .. })) => ("certificate expired", None),
        Some(Err(e)) if e.is_unreachable() => ("unreachable", Some(e.to_string())),
        Some(Err(e)) => ("refused", Some(e.to_string())),
    }
}

fn row(s: &Seen) -> [String; 7] {
    let h = &s.record;
    let labels: Vec<String> = h.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let (state, _) = agent_state(s);
    let (agent, members, etcd) = match &s.report {
        Some(Ok(r)) => {
            let running = r.members.iter().filter(|m| m.running).count();
            (
                format!("{state} ({})", r.agent_version),
                format!("{running}/{}", r.members.len()),
                r.etcd_versions.join(","),
            )
        }
        _ => (state.to_string(), "-".into(), "-".into()),
    };
    let agent = if h.removing_unix_s.is_some() {
        format!("{agent}, being removed")
    } else {
        agent
    };
    let ends = h
        .certificate_not_after_unix_s
        .map(quorum_pki::format_unix_s)
        .unwrap_or_else(|| "-".into());
    [
        h.name.clone(),
        h.address.to_string(),
        if labels.is_empty() {
            "-".into()
        } else {
            labels.join(",")
        },
        agent,
        members,
        etcd,
        ends,
    ]
}

fn to_json(s: &Seen) -> serde_json::Value {
    let h = &s.record;
    let (state, error) = agent_state(s);
    let report = match &s.report {
        Some(Ok(r)) => json!({
            "version": r.agent_version,
            "etcdVersions": r.etcd_versions,
            "diskFreeBytes": r.disk_free_bytes,
            "members": r.members.iter().map(|m| json!({
                "name": m.name,
                "running": m.running,
                "pid": m.pid,
                "dataDir": m.data_dir,
                "clusterId": m.has_marker.then(|| format!("{:x}", m.cluster_id)),
                "memberId": m.has_marker.then(|| format!("{:x}", m.member_id)),
                "starts": m.starts_unix_s.len(),
                "runningVersion": m.running_version,
                "lastExit": m.last_exit,
            })).collect::<Vec<_>>(),
        }),
        _ => serde_json::Value::Null,
    };
    json!({
        "name": h.name,
        "address": h.address.to_string(),
        "labels": h.labels,
        "agent": state,
        "error": error,
        "joinedAt": h.joined_unix_s.map(quorum_pki::format_rfc3339),
        "joinTokenExpires": h.join.as_ref().map(|j| quorum_pki::format_rfc3339(j.expires_unix_s)),
        "certificateNotAfter": h.certificate_not_after_unix_s.map(quorum_pki::format_rfc3339),
        "removing": h.removing_unix_s.is_some(),
        "report": report,
    })
}

use quorum_clock::now_unix_s;

#[cfg(test)]
mod tests {
    #[test]
    fn the_join_hint_keeps_the_token_off_the_command_line() {
        let h = super::join_hint("h1");
        assert!(
            h.contains("QUORUM_JOIN_TOKEN='<token>' quorum agent --state-dir"),
            "{h}"
        );
        assert!(!h.contains("--join"), "{h}");
    }
}
