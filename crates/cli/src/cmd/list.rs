//! `quorum list`: the control planes, each with its health, state and age, as a table
//! (`-o wide` for more columns) or every field as JSON or YAML.

use crate::args::{ListArgs, ListOutput};
use crate::cmd::emit;
use anyhow::Result;
use quorum_clock::now_ms;
use quorum_core::Decision;
use quorum_ops::{status, Ctx, Place};
use quorum_store::{StoreError, StoreLocation};
use serde::Serialize;

/// One control plane, as `-o json` and `-o yaml` print it (the table shows a subset).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    name: String,
    replicas: u32,
    version: String,
    machines: usize,
    /// healthy, degraded or unavailable: the core's conditions.
    health: &'static str,
    healthy_voters: usize,
    voters: usize,
    /// The decision's operation (`status`'s "Operation").
    state: String,
    converged: bool,
    paused: bool,
    deleting: bool,
    /// RFC 3339, UTC, to the second; absent when the store does not know it.
    created_at: Option<String>,
    age_seconds: Option<i64>,
    cluster_version: Option<String>,
    leader: Option<String>,
    /// The identity of the controller reconciling it, when one is active.
    controller: Option<String>,
    endpoints: Vec<String>,
}

/// One row per control plane. Everything in it comes from a fresh observation and the
/// decision on it, exactly as `status` derives it (`Ctx::live`): a controller's last
/// published view would disagree with `status` whenever the controller is stopped or
/// behind.
pub async fn run(at: &Place, a: ListArgs) -> Result<()> {
    let table = matches!(a.output, ListOutput::Table | ListOutput::Wide);
    let ctx = match Ctx::open_existing(at) {
        Ok(ctx) => ctx,
        // Nothing to list is not an error; creating a home to say so would be.
        Err(e) if matches!(e.downcast_ref(), Some(StoreError::NoHome { .. })) => {
            emit(&if table {
                format!(
                    "No quorum home at {} yet, so no control planes. Create one with `quorum create NAME --version 3.4.23`.\n",
                    at.home.display()
                )
            } else {
                // An empty list, in the format asked for.
                empty(a.output)?
            })?;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let cps = ctx.store.control_planes()?;
    if cps.is_empty() && table {
        let place = match &at.store {
            StoreLocation::Embedded => at.home.display().to_string(),
            StoreLocation::Etcd(l) => l.url(),
        };
        println!(
            "No control planes in {place}. Create one with `quorum create NAME --version 3.4.23`."
        );
        return Ok(());
    }
    let mut rows = Vec::with_capacity(cps.len());
    for cp in cps {
        let s = ctx.live(&cp).await?;
        let created_at_ms = ctx.store.created_at_ms(&cp.name)?;
        rows.push(row(s, created_at_ms, now_ms()));
    }
    emit(&render(&rows, a.output)?)?;
    Ok(())
}

fn render(rows: &[Row], output: ListOutput) -> Result<String> {
    Ok(match output {
        ListOutput::Table => table(rows, false),
        ListOutput::Wide => table(rows, true),
        ListOutput::Json => format!("{}\n", serde_json::to_string_pretty(rows)?),
        ListOutput::Yaml => serde_yaml::to_string(rows)?,
    })
}

/// No rows as JSON or YAML.
fn empty(output: ListOutput) -> Result<String> {
    render(&[], output)
}

fn row(s: status::Status, created_at_ms: Option<i64>, now_ms: i64) -> Row {
    let d = &s.decision;
    Row {
        health: health(d),
        healthy_voters: d.healthy_voters,
        voters: d.voters,
        replicas: s.spec.replicas,
        version: s.spec.version.to_string(),
        machines: s.machines.len(),
        state: s.operation,
        converged: s.converged,
        paused: s.spec.paused,
        deleting: s.deleting,
        created_at: created_at_ms.map(|ms| quorum_pki::format_rfc3339(ms.div_euclid(1000))),
        age_seconds: created_at_ms.map(|c| (now_ms - c).max(0) / 1000),
        cluster_version: s.cluster_version,
        leader: s.leader,
        controller: s.controller.filter(|c| c.active).map(|c| c.identity),
        endpoints: s.endpoints,
        name: s.name,
    }
}

/// The core's verdict in a word (`Decision::health`), the one the fleet's state
/// counts by.
fn health(d: &Decision) -> &'static str {
    d.health().name()
}

fn table(rows: &[Row], wide: bool) -> String {
    let mut header = vec![
        "NAME", "REPLICAS", "VERSION", "MACHINES", "HEALTH", "STATE", "AGE",
    ];
    if wide {
        header.extend(["CLUSTER VERSION", "LEADER", "CONTROLLER", "ENDPOINTS"]);
    }
    let mut out = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    for r in rows {
        let mut cells = vec![
            r.name.clone(),
            r.replicas.to_string(),
            r.version.clone(),
            r.machines.to_string(),
            format!("{} {}/{}", r.health, r.healthy_voters, r.voters),
            r.state.clone(),
            r.age_seconds.map_or_else(|| "-".into(), age),
        ];
        if wide {
            cells.extend([
                or_none(&r.cluster_version),
                or_none(&r.leader),
                or_none(&r.controller),
                if r.endpoints.is_empty() {
                    "-".into()
                } else {
                    r.endpoints.join(",")
                },
            ]);
        }
        out.push(cells);
    }
    status::columns(&out)
}

/// An age as kubectl prints one: exact while short, coarser as it grows
/// (`45s`, `5m30s`, `50m`, `5h30m`, `36h`, `3d5h`, `90d`, `3y`).
fn age(secs: i64) -> String {
    const MIN: i64 = 60;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;
    const YEAR: i64 = 365 * DAY;
    let s = secs.max(0);
    let with = |big: i64, big_unit: &str, small: i64, small_unit: &str| {
        let rest = (s % big) / small;
        if rest == 0 {
            format!("{}{big_unit}", s / big)
        } else {
            format!("{}{big_unit}{rest}{small_unit}", s / big)
        }
    };
    match s {
        s if s < 2 * MIN => format!("{s}s"),
        s if s < 10 * MIN => with(MIN, "m", 1, "s"),
        s if s < 3 * HOUR => format!("{}m", s / MIN),
        s if s < 8 * HOUR => with(HOUR, "h", MIN, "m"),
        s if s < 2 * DAY => format!("{}h", s / HOUR),
        s if s < 8 * DAY => with(DAY, "d", HOUR, "h"),
        s if s < 2 * YEAR => format!("{}d", s / DAY),
        s => format!("{}y", s / YEAR),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (120, "2m"),
            (330, "5m30s"),
            (3000, "50m"),
            (3 * 3600, "3h"),
            (5 * 3600 + 30 * 60, "5h30m"),
            (36 * 3600, "36h"),
            (3 * 86400 + 5 * 3600, "3d5h"),
            (90 * 86400, "90d"),
            (3 * 365 * 86400, "3y"),
            (-5, "0s"),
        ];
        for (secs, want) in cases {
            assert_eq!(age(secs), want, "{secs}");
        }
    }
}
