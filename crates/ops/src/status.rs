//! A control plane's status: observed live (the same observation and decision the
//! controller makes), plus what the controller last published.

use crate::haproxy::{probe, HaproxyState};
use anyhow::Result;
use quorum_clock::now_ms;
use quorum_core::health::Memory;
use quorum_core::{
    decide, Condition, ControlPlane, Decision, HaproxySpec, Machine, ProcessState, Role,
};
use quorum_etcd::Etcd;
use quorum_provider::LocalProvider;
use quorum_store::{Heartbeat, PublishedStatus, Store};
use serde::Serialize;
use std::net::SocketAddr;

pub use quorum_controller::CONTROLLER_STALE_MS;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub name: String,
    pub spec: quorum_core::ControlPlaneSpec,
    pub deleting: bool,
    /// A restore or recovery a person confirmed, while it runs: its source and phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<quorum_core::Rebuild>,
    /// A CA rotation under way (`quorum rotate-ca`): its generations and phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_rotation: Option<quorum_core::CaRotation>,
    /// The generation of the CA in force (0: the one it was created with).
    pub ca_generation: u32,
    /// The version the whole cluster speaks (etcd's cluster version).
    pub cluster_version: Option<String>,
    pub operation: String,
    pub waiting_for: Option<String>,
    /// The steps quorum would take next, in order (what the controller is about to do).
    pub next_actions: Vec<String>,
    pub converged: bool,
    /// The machine whose member leads, when a leader answered.
    pub leader: Option<String>,
    /// Client URLs to use: voting, healthy, not leaving.
    pub endpoints: Vec<String>,
    /// The client URLs to configure a client with, all of them (`quorum_core::reach`):
    /// one of them names a voter through every replacement, remediation and scale down.
    pub client_addresses: Vec<String>,
    pub machines: Vec<MachineRow>,
    pub conditions: Vec<Condition>,
    /// A read-only look at the control plane's HAProxy, when its spec names one (also
    /// the `HaproxyInStep` condition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub haproxy: Option<HaproxyState>,
    pub controller: Option<ControllerInfo>,
    /// The replica that leads the controllers, with a store shared by several (etcd).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_leader: Option<quorum_store::LeaderInfo>,
    /// With a sharded fleet (`controller --shards N`): the control plane's shard, whose
    /// leader is `controller_leader`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// The newest entry of the control plane's history (`quorum events` has them all).
    pub last_event: Option<quorum_store::Event>,
    /// Its snapshots, as recorded (`quorum snapshots` lists them all).
    pub snapshots: SnapshotSummary,
    /// Each member of a management etcd (`--store etcd://...`), as probed by `status`:
    /// whether it serves, which one leads, why one does not. Empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub store: Vec<quorum_store::EndpointHealth>,
    /// A chained upgrade's links still to go after the spec's version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub road: Option<quorum_core::chain::Road>,
    #[serde(skip)]
    pub decision: Decision,
    /// What a link's preflight reads, for the spec's version (`quorum_core::chain`):
    /// asked of a version change before it is recorded.
    #[serde(skip)]
    pub link: quorum_core::chain::LinkFacts,
}

/// What `status` says of a control plane's snapshots.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSummary {
    pub count: usize,
    /// The newest one's id and when it was taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newest: Option<SnapshotBrief>,
    /// The one taken before a rollout to the spec's version (absent when none was:
    /// recorded with --no-snapshot, or no rollout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_this_rollout: Option<SnapshotBrief>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotBrief {
    pub id: String,
    pub taken_at_unix_s: i64,
    pub revision: i64,
}

impl SnapshotSummary {
    fn of(recs: &[quorum_core::SnapshotRecord], spec_version: quorum_core::Version) -> Self {
        let brief = |r: &quorum_core::SnapshotRecord| SnapshotBrief {
            id: r.id.clone(),
            taken_at_unix_s: r.taken_at_unix_s,
            revision: r.facts.revision,
        };
        SnapshotSummary {
            count: recs.len(),
            newest: recs.last().map(brief),
            before_this_rollout: recs
                .iter()
                .rev()
                .find(|r| {
                    r.reason == quorum_core::SnapshotReason::BeforeRollout
                        && r.rollout_to == Some(spec_version)
                })
                .map(brief),
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineRow {
    pub name: String,
    pub address: String,
    /// The version the machine was created with.
    pub version: String,
    /// The version its etcd reports (absent when it does not answer).
    pub running_version: Option<String>,
    /// Hex, as etcdctl prints it.
    pub member_id: Option<String>,
    /// leader, follower, learner, or none (no member): the decision's.
    pub role: Role,
    /// By the decision's rule (the one that gates every membership change).
    pub healthy: bool,
    /// What is wrong with it now (the health model's words); empty when nothing is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Since when (UTC) it has had a problem without a break, as the controller
    /// remembers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_since: Option<String>,
    /// How long that is, in seconds, at the time of the look (for the table).
    #[serde(skip)]
    pub unhealthy_for_s: Option<i64>,
    pub raft_index: Option<u64>,
    pub process: String,
    pub pid: Option<i32>,
    pub deleting: bool,
    pub alarms: Vec<String>,
    /// When its certificates expire (UTC), for a TLS machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificates_expire_at: Option<String>,
    /// Its in-place step, if one is under way or stopped the rollout: from, to, phase,
    /// since when and, after a rollback, why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_place: Option<quorum_core::InPlace>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerInfo {
    pub identity: String,
    pub last_seen_ms_ago: i64,
    /// Its heartbeat is fresh (a controller that stopped withdraws it at once).
    pub active: bool,
    /// The step on this control plane it is in the middle of, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_on: Option<StepInfo>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepInfo {
    pub step: String,
    pub for_ms: i64,
}

/// The decision on a fresh observation of `cp`, as the controller would make it now:
/// the one source of what `status`, `list` and `--wait` say (its operation, each
/// machine's role and health), whether or not a controller runs.
pub async fn decision(
    store: &Store,
    provider: &LocalProvider,
    etcd: &Etcd,
    cp: &ControlPlane,
) -> Result<(Vec<Machine>, quorum_observe::Observed, Decision)> {
    let machines = store.machines(&cp.name)?;
    let view = quorum_observe::hosts_view(store, cp.spec.provider);
    let agents = quorum_hosts::HostsProvider::new(provider.etcd_dir().to_path_buf());
    let mut observed =
        quorum_observe::observe_on(provider, &agents, view, cp.spec.provider, etcd, &machines)
            .await;
    // The controller's health memory as it published it (since when each machine that
    // has a problem now has had it, the NOSPACE repair's): so `status` says how long,
    // and decides as the controller does.
    let memory = remembered(store, &cp.name)?.of_problems_now(cp, &machines, &observed.observation);
    memory.fill(&mut observed.observation);
    let recorded = quorum_observe::Recorded::read(store, &cp.name)?;
    quorum_observe::complete(recorded, provider, cp, &mut observed);
    let decision = decide(cp, &machines, &observed.observation);
    Ok((machines, observed, decision))
}

/// The controller's health memory as it published it with its status, if it published
/// within `REMEMBERED_MS` (empty otherwise, or from a controller that published none).
fn remembered(store: &Store, cp: &str) -> Result<Memory> {
    let Some(p) = store.published_status(cp)? else {
        return Ok(Memory::default());
    };
    Ok(memory_in(&p.status, now_ms() - p.updated_at_ms))
}

/// Older than this, what the controller remembered may have healed and broken again
/// since: not shown as how long.
const REMEMBERED_MS: i64 = 30_000;

/// The memory in a published status document `age_ms` old.
fn memory_in(status: &serde_json::Value, age_ms: i64) -> Memory {
    if age_ms > REMEMBERED_MS {
        return Memory::default();
    }
    status
        .get("memory")
        .cloned()
        .and_then(|v| serde_json::from_value::<Memory>(v).ok())
        .unwrap_or_default()
}

/// The status of `cp` as observed now (the controller's observation and decision),
/// with its load balancer's backend and what its controller last published.
pub async fn live(
    store: &Store,
    provider: &LocalProvider,
    etcd: &Etcd,
    cp: &ControlPlane,
) -> Result<Status> {
    let (machines, observed, decision) = decision(store, provider, etcd, cp).await?;
    let obs = &observed.observation;
    let rows: Vec<MachineRow> = machines
        .iter()
        .map(|m| machine_row(m, &observed, &decision))
        .collect();
    let leader_name = decision.leader().map(str::to_string);
    let haproxy = match &cp.spec.haproxy {
        Some(h) => Some(probe_haproxy(h.clone(), &machines, &decision).await?),
        None => None,
    };
    let mut conditions = decision.conditions.clone();
    if let (Some(h), Some(state)) = (&cp.spec.haproxy, &haproxy) {
        conditions.push(state.condition(&cp.name, h));
    }
    // Liveness from the home's heartbeat (beaten from its own thread, so a long step
    // does not make a live controller look dead), not from when it last published.
    // Sharded, the controller that acts on this control plane is its shard's leader.
    let (controller_leader, beat) = store.controller_of(&cp.name)?;
    let shard = ShardInfo::of(store, &cp.name)?;
    let controller = store
        .published_status(&cp.name)?
        .map(|p| ControllerInfo::of(p, beat, &cp.name));
    Ok(Status {
        name: cp.name.clone(),
        spec: cp.spec.clone(),
        deleting: cp.deleting,
        rebuild: cp.rebuild.clone(),
        ca_rotation: cp.ca_rotation.clone(),
        ca_generation: cp.ca_generation,
        cluster_version: obs
            .cluster_version
            .map(|v| format!("{}.{}", v.major, v.minor)),
        operation: decision.operation.to_string(),
        waiting_for: decision.waiting_for.clone(),
        next_actions: decision.actions.iter().map(|a| a.to_string()).collect(),
        converged: decision.converged,
        leader: leader_name,
        endpoints: decision.endpoints.clone(),
        client_addresses: quorum_core::reach::client_urls(cp, &machines),
        machines: rows,
        conditions,
        haproxy,
        controller,
        controller_leader,
        shard,
        last_event: newest_event(store, &cp.name)?,
        snapshots: SnapshotSummary::of(&store.snapshots(&cp.name)?, cp.spec.version),
        store: Vec::new(),
        road: cp.road.clone(),
        link: quorum_core::chain::link_facts(cp, &machines, obs, cp.spec.version),
        decision,
    })
}

impl ControllerInfo {
    /// The controller that published `p` for control plane `cp`, judged alive by its
    /// heartbeat `beat` (one of another controller says nothing of it).
    fn of(p: PublishedStatus, beat: Option<Heartbeat>, cp: &str) -> ControllerInfo {
        let now = now_ms();
        let beat = beat.filter(|b| b.identity == p.controller);
        let seen_ms = beat
            .as_ref()
            .map_or(p.updated_at_ms, |b| b.at_ms.max(p.updated_at_ms));
        let working_on = beat
            .as_ref()
            .and_then(|b| b.step.as_ref())
            .filter(|step| step.control_plane == cp)
            .map(|step| StepInfo {
                step: step.description.clone(),
                for_ms: (now - step.since_ms).max(0),
            });
        ControllerInfo {
            active: beat.is_some_and(|b| now - b.at_ms < CONTROLLER_STALE_MS),
            identity: p.controller,
            last_seen_ms_ago: now - seen_ms,
            working_on,
        }
    }
}

/// A control plane's shard in a sharded fleet.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ShardInfo {
    pub index: u32,
    pub count: u32,
}

impl ShardInfo {
    /// The shard of control plane `cp`, when the store's fleet is sharded.
    fn of(store: &Store, cp: &str) -> Result<Option<ShardInfo>> {
        Ok(store
            .setting(quorum_store::SHARDS_SETTING)?
            .and_then(|n| n.trim().parse::<u32>().ok())
            .filter(|count| *count > 1)
            .map(|count| ShardInfo {
                index: quorum_core::shards::shard_of(cp, count),
                count,
            }))
    }
}

/// Reads the backend of `h` (off the async threads; bounded) and compares it with the
/// decision's client endpoints, the set the controller keeps the backend in step with.
async fn probe_haproxy(
    h: HaproxySpec,
    machines: &[Machine],
    decision: &Decision,
) -> Result<HaproxyState> {
    let desired: Vec<(String, SocketAddr)> = machines
        .iter()
        .filter(|m| decision.endpoints.contains(&m.client_url()))
        .map(|m| (m.name.clone(), quorum_controller::balancer::addr(m)))
        .collect();
    Ok(tokio::task::spawn_blocking(move || probe(&h, &desired)).await?)
}

/// The newest event of `cp` (event ids grow; the newest is the one with the last id).
fn newest_event(store: &Store, cp: &str) -> Result<Option<quorum_store::Event>> {
    let last = store.last_event_id(cp)?;
    if last == 0 {
        return Ok(None);
    }
    Ok(store.events_after(cp, last - 1, 1)?.into_iter().next())
}

fn machine_row(
    m: &Machine,
    observed: &quorum_observe::Observed,
    decision: &Decision,
) -> MachineRow {
    let o = observed.observation.machines.get(&m.name);
    let st = o.and_then(|o| o.status.as_ref());
    let member = observed
        .observation
        .members
        .iter()
        .flatten()
        .find(|mb| mb.peer_urls.contains(&m.peer_url()));
    // The decision judged every machine it was given, and it was given these.
    let judged = decision.machine(&m.name);
    let role = judged.map_or(Role::NoMember, |h| h.role);
    let healthy = judged.is_some_and(|h| h.healthy);
    let problems = judged.map(|h| h.problems.clone()).unwrap_or_default();
    let since = judged.and_then(|h| h.unhealthy_since_unix_s);
    MachineRow {
        problems,
        unhealthy_since: since.map(quorum_pki::format_rfc3339),
        unhealthy_for_s: since.map(|t| (observed.observation.now_unix_s - t).max(0)),
        name: m.name.clone(),
        address: m.address.to_string(),
        version: m.version.to_string(),
        running_version: st.and_then(|s| s.version).map(|v| v.to_string()),
        member_id: member.map(|mb| format!("{:x}", mb.id)),
        role,
        healthy,
        raft_index: st.map(|s| s.raft_index),
        process: match o.map(|o| o.process) {
            Some(ProcessState::Running) => "running".into(),
            _ => "stopped".into(),
        },
        pid: observed.pids.get(&m.name).copied(),
        deleting: m.deleting,
        in_place: m.in_place.clone(),
        alarms: st.map(|s| s.alarms.clone()).unwrap_or_default(),
        certificates_expire_at: m
            .certificates_not_after_unix_s
            .map(quorum_pki::format_rfc3339),
    }
}

/// The human-readable form.
pub fn render_table(s: &Status) -> String {
    let mut out = String::new();
    for (k, v) in summary_lines(s) {
        out.push_str(&format!("{k:<17}{v}\n"));
    }
    out.push('\n');
    out.push_str(&columns(&machine_rows(s)));
    out.push('\n');
    out.push_str(&columns(&condition_rows(s)));
    out
}

/// The block above the tables: one (label, text) per line.
fn summary_lines(s: &Status) -> Vec<(&'static str, String)> {
    let mut lines = vec![("Control plane", s.name.clone()), ("Spec", spec_line(s))];
    if let Some(rb) = &s.rebuild {
        let at = quorum_core::backup::compact_utc(rb.requested_at_unix_s);
        let text = format!("from {}, phase {} (confirmed at {at})", rb.from, rb.phase);
        lines.push(("Rebuild", text));
    }
    if let Some(r) = &s.ca_rotation {
        lines.push(("CA rotation", crate::carotation::describe(r)));
    }
    if let Some(road) = &s.road {
        let rest: Vec<String> = road.links.iter().map(|v| v.to_string()).collect();
        let text = format!(
            "{} (under way) -> {}, one rollout each",
            s.spec.version,
            rest.join(" -> ")
        );
        lines.push(("Road", text));
    }
    lines.push(("Transport", transport_line(s)));
    let cluster_version = s.cluster_version.as_deref();
    let cluster_version = cluster_version.unwrap_or("unknown (no leader answered)");
    lines.push(("Cluster version", cluster_version.to_string()));
    lines.push(("Operation", operation_line(s)));
    if let Some(line) = snapshot_line(s) {
        lines.push(("Snapshot", line));
    }
    lines.push(("Controller", controller_line(s)));
    if let Some(line) = leading_line(s) {
        lines.push(("Leading", line));
    }
    if !s.store.is_empty() {
        lines.push(("Store", store_line(&s.store)));
    }
    if let Some(line) = last_step_line(s) {
        lines.push(("Last step", line));
    }
    let endpoints = if s.endpoints.is_empty() {
        "none healthy".to_string()
    } else {
        s.endpoints.join(",")
    };
    lines.push(("Endpoints", endpoints));
    if !s.client_addresses.is_empty() {
        let text = format!(
            "{} (give clients all of them)",
            s.client_addresses.join(",")
        );
        lines.push(("Clients", text));
    }
    lines
}

fn spec_line(s: &Status) -> String {
    format!(
        "{}, etcd {}, {}{}{}",
        plural(s.spec.replicas, "replica"),
        s.spec.version,
        match s.spec.rollout.strategy {
            quorum_core::Strategy::Replace => format!(
                "rolled out by replacement (maxSurge {})",
                s.spec.rollout.max_surge
            ),
            quorum_core::Strategy::InPlace => format!(
                "rolled out in place (restart deadline {})",
                s.spec.rollout.in_place.timeout
            ),
        },
        if s.spec.provider.is_local() {
            ""
        } else {
            ", members on hosts"
        },
        if s.spec.paused { ", paused" } else { "" }
    )
}

fn transport_line(s: &Status) -> String {
    if !s.spec.tls() {
        return "PLAIN HTTP (insecurePlaintext): no authentication, no encryption".into();
    }
    let soonest = s
        .machines
        .iter()
        .filter_map(|m| m.certificates_expire_at.as_deref())
        .min();
    format!(
        "mutual TLS (certificates for {}, renewed {} before expiry{})",
        s.spec.certificates.lifetime,
        s.spec.certificates_renew_before(),
        soonest
            .map(|t| format!("; soonest expiry {t}"))
            .unwrap_or_default()
    )
}

fn operation_line(s: &Status) -> String {
    match &s.waiting_for {
        Some(w) if s.decision.is_blocked() => format!("{} — BLOCKED: {w}", s.operation),
        Some(w) => format!("{} — {w}", s.operation),
        None if s.converged => match s.haproxy.as_ref().filter(|h| !h.in_step) {
            None => "idle (converged)".to_string(),
            Some(_) => {
                "idle (converged), but HAProxy is NOT in step: see the HaproxyInStep condition"
                    .to_string()
            }
        },
        None => format!("{} — next: {}", s.operation, summarize(&s.next_actions)),
    }
}

/// A version rollout's way back, if it goes wrong (a CA rotation alone keeps every
/// version, and has none).
fn snapshot_line(s: &Status) -> Option<String> {
    let versions_move = s
        .machines
        .iter()
        .any(|m| m.version != s.spec.version.to_string());
    let rolling = s.operation == quorum_core::Operation::RollingOut.to_string();
    if !rolling || (s.ca_rotation.is_some() && !versions_move) {
        return None;
    }
    Some(match &s.snapshots.before_this_rollout {
        Some(b) => format!(
            "{} (revision {}, taken before this rollout)",
            b.id, b.revision
        ),
        None => format!(
            "none taken for a rollout to {} (`quorum snapshot {}` takes one now)",
            s.spec.version, s.name
        ),
    })
}

fn controller_line(s: &Status) -> String {
    match &s.controller {
        Some(c) if c.active => match &c.working_on {
            Some(w) => format!(
                "{} (seen {:.1}s ago; working on: {} for {:.1}s)",
                c.identity,
                c.last_seen_ms_ago as f64 / 1000.0,
                w.step,
                w.for_ms as f64 / 1000.0
            ),
            None => format!(
                "{} (seen {:.1}s ago)",
                c.identity,
                c.last_seen_ms_ago as f64 / 1000.0
            ),
        },
        Some(c) => format!(
            "none active (last: {}, {}s ago) — start one with `quorum controller`",
            c.identity,
            c.last_seen_ms_ago / 1000
        ),
        None => "none has seen it yet — start one with `quorum controller`".into(),
    }
}

fn leading_line(s: &Status) -> Option<String> {
    if let Some(l) = &s.controller_leader {
        let since_s = (now_ms() - l.since_ms).max(0) / 1000;
        let shard = s
            .shard
            .map(|sh| format!("shard {} of {}, ", sh.index, sh.count))
            .unwrap_or_default();
        return Some(format!(
            "{} ({shard}for {since_s}s; leadership token {})",
            l.identity, l.token
        ));
    }
    s.shard.map(|sh| {
        format!(
            "nobody: shard {} of {} has no replica yet (one takes it within --lease-ttl \
             of a replica starting or dying)",
            sh.index, sh.count
        )
    })
}

fn last_step_line(s: &Status) -> Option<String> {
    let e = s.last_event.as_ref()?;
    let mark = crate::wait::mark(e);
    let ago_s = (now_ms() - e.at_ms).max(0) / 1000;
    let by =
        e.by.as_deref()
            .map(|b| format!("by {b}, "))
            .unwrap_or_default();
    Some(format!(
        "{mark} {} ({by}{ago_s}s ago; all of them: quorum events {})",
        e.message, s.name
    ))
}

/// The machines table: a header, then a row per machine.
fn machine_rows(s: &Status) -> Vec<Vec<String>> {
    let header = [
        "MACHINE",
        "ADDRESS",
        "VERSION",
        "MEMBER",
        "ROLE",
        "HEALTH",
        "RAFT INDEX",
        "PROCESS",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    rows.extend(s.machines.iter().map(machine_cells));
    rows
}

fn machine_cells(m: &MachineRow) -> Vec<String> {
    let version = match &m.running_version {
        Some(v) if *v != m.version => format!("{} (runs {v})", m.version),
        _ => m.version.clone(),
    };
    let name = match &m.in_place {
        _ if m.deleting => format!("{} (leaving)", m.name),
        Some(ip) if ip.from != ip.to => {
            format!(
                "{} (in place {} -> {}: {})",
                m.name, ip.from, ip.to, ip.phase
            )
        }
        Some(ip) => format!("{} (in place, new certificates: {})", m.name, ip.phase),
        None => m.name.clone(),
    };
    vec![
        name,
        m.address.clone(),
        version,
        m.member_id.clone().unwrap_or_else(|| "-".into()),
        m.role.to_string(),
        health_cell(m),
        m.raft_index
            .map(|i| i.to_string())
            .unwrap_or_else(|| "-".into()),
        match m.pid {
            Some(pid) => format!("{} (pid {pid})", m.process),
            None => m.process.clone(),
        },
    ]
}

/// The table's short form of a machine's health: the words of its first problem
/// before the details ("lost its data", "crash loop"), how many more, for how long;
/// `-o json` and the Degraded condition have them whole.
fn health_cell(m: &MachineRow) -> String {
    if let Some(first) = m.problems.first() {
        let first = first.split(": ").next().unwrap_or(first);
        let more = match m.problems.len() {
            1 => String::new(),
            n => format!(" (+{})", n - 1),
        };
        return match m.unhealthy_for_s {
            Some(s) => format!("{first}{more}, {s}s"),
            None => format!("{first}{more}"),
        };
    }
    if !m.alarms.is_empty() {
        return format!("alarm: {}", m.alarms.join(","));
    }
    if m.healthy { "healthy" } else { "unhealthy" }.to_string()
}

fn condition_rows(s: &Status) -> Vec<Vec<String>> {
    std::iter::once(vec!["CONDITION".into(), "STATUS".into(), "MESSAGE".into()])
        .chain(s.conditions.iter().map(|c| {
            let status = if c.status { "True" } else { "False" };
            vec![format!("{:?}", c.kind), status.into(), c.message.clone()]
        }))
        .collect()
}

/// The management etcd's members in one line: how many serve, the leader, and each one
/// set aside with why.
pub fn store_line(health: &[quorum_store::EndpointHealth]) -> String {
    let host = |e: &str| e.split_once("://").map_or(e, |(_, h)| h).to_string();
    let up = health.iter().filter(|h| h.up).count();
    let mut line = format!("management etcd: {up} of {} members serve", health.len());
    if let Some(l) = health.iter().find(|h| h.leader) {
        line.push_str(&format!(" (leader {})", host(&l.endpoint)));
    }
    if !quorum_core::failover::majority_up(health) {
        line.push_str(" — NO QUORUM: quorum can neither read nor change its state");
    }
    for h in health.iter().filter(|h| !h.up) {
        let since = h
            .down_for_ms
            .map(|ms| format!(" for {:.1}s", ms as f64 / 1000.0))
            .unwrap_or_default();
        line.push_str(&format!(
            "; {} DOWN{since}: {}",
            host(&h.endpoint),
            h.error.as_deref().unwrap_or("not answering")
        ));
    }
    line
}

/// `1 replica`, `3 replicas`.
pub fn plural(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Left-aligned columns separated by two spaces.
pub fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == r.len() {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// "a, a, b" -> "a (x2), b": a decision may repeat one step for several machines.
fn summarize(steps: &[String]) -> String {
    let mut out: Vec<(String, usize)> = Vec::new();
    for st in steps {
        match out.last_mut() {
            Some((last, n)) if last == st => *n += 1,
            _ => out.push((st.clone(), 1)),
        }
    }
    out.iter()
        .map(|(st, n)| {
            if *n > 1 {
                format!("{st} (x{n})")
            } else {
                st.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_store::EndpointHealth;

    fn member(e: &str, up: bool, leader: bool, error: Option<&str>) -> EndpointHealth {
        EndpointHealth {
            endpoint: format!("http://{e}"),
            up,
            leader,
            version: None,
            error: error.map(str::to_string),
            down_for_ms: (!up).then_some(12_300),
        }
    }

    #[test]
    fn the_store_line_names_the_members_set_aside_and_a_lost_quorum() {
        let one_down = [
            member("a:2379", true, false, None),
            member("b:2379", false, false, Some("tcp connect error")),
            member("c:2379", true, true, None),
        ];
        assert_eq!(
            store_line(&one_down),
            "management etcd: 2 of 3 members serve (leader c:2379); b:2379 DOWN for 12.3s: tcp connect error"
        );
        let two_down = [
            member("a:2379", false, false, Some("tcp connect error")),
            member("b:2379", false, false, Some("tcp connect error")),
            member("c:2379", false, false, Some("etcdserver: no leader")),
        ];
        let line = store_line(&two_down);
        assert!(
            line.starts_with("management etcd: 0 of 3 members serve — NO QUORUM"),
            "{line}"
        );
        assert!(
            line.ends_with("c:2379 DOWN for 12.3s: etcdserver: no leader"),
            "{line}"
        );
    }
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    /// `status` decides from the whole memory the controller published with its status
    /// (it once read back only since when, from the decision's machines, and left out
    /// the NOSPACE repair's memory), and from none that is too old.
    #[test]
    fn the_published_memory_is_read_back_whole_while_fresh() {
        let memory = Memory {
            problem_since_unix_s: [("p-2".to_string(), 1_800_000_000)].into(),
            defragmented: ["p-1".to_string()].into(),
            nospace_recurrences: 2,
        };
        let doc = serde_json::json!({ "decision": {}, "memory": memory });
        assert_eq!(memory_in(&doc, 1_000), memory);
        assert_eq!(memory_in(&doc, REMEMBERED_MS + 1), Memory::default());
        // A status published before the memory was: nothing remembered.
        assert_eq!(
            memory_in(&serde_json::json!({ "decision": {} }), 0),
            Memory::default()
        );
    }
}
