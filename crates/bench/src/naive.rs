//! The naive rollout: the baseline `quorum bench rollout --strategy naive` measures
//! quorum against. It exists only inside the benchmark.
//!
//! It does what the bug report's scripts did, one old member at a time, oldest first:
//! add the new member as a voter directly (no learner), start it, hand its address to
//! the clients (the endpoint list, or HAProxy's backend) at once, wait for it to answer,
//! then remove the old member without moving leadership off it, kill its process
//! (SIGKILL) and leave its address where the clients find it.

use crate::rollout::{Step, StepKind};
use anyhow::{bail, Context, Result};
use etcd_client::Client;
use quorum_clock::now_ms;
use quorum_clock::now_unix_s;
use quorum_controller::access::Access;
use quorum_controller::address_is_free;
use quorum_controller::balancer::LbTls;
use quorum_core::{
    ActionKind, ClusterState, ControlPlane, EtcdCall, GrpcCode, InitialMember, Machine, Refusal,
    Verdict, Version,
};
use quorum_etcd::ClientTls;
use quorum_haproxy::RuntimeApi;
use quorum_ops::Ctx;
use quorum_provider::MachineTls;
use quorum_provider::StartRequest;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Every membership RPC of the naive script gives up after this long.
const RPC_TIMEOUT_MS: u64 = 5_000;
/// How long a new member may take to answer before the script gives up.
const JOIN_LIMIT_MS: u64 = 60_000;
const POLL_MS: u64 = 50;
/// The naive script's retry interval for a refused change.
const RETRY_MS: u64 = 200;

/// Where the naive script tells clients about members.
pub enum Clients {
    /// An endpoints file in the format the controller publishes; the script only ever
    /// appends to it.
    File(PathBuf),
    /// An HAProxy backend: new members are added (and enabled) at once, none removed.
    Haproxy {
        api: RuntimeApi,
        backend: String,
        /// For TLS members: what HAProxy presents to them (loaded before the first add).
        tls: Option<LbTls>,
    },
}

/// Rolls every machine of `cp` that is not at `to`; returns the steps it took, in
/// milliseconds since `t0_ms`. The control plane must be paused (the controller must not
/// act on it meanwhile).
pub async fn rollout(
    ctx: &mut Ctx,
    cp: &str,
    to: Version,
    clients: &Clients,
    t0_ms: i64,
) -> Result<Vec<Step>> {
    let control_plane = ctx.store.get_control_plane(cp)?;
    let access = ctx.access(&control_plane)?;
    let mut script = Script {
        cp: &control_plane,
        access: &access,
        clients,
        t0_ms,
        steps: Vec::new(),
    };
    let mut old: Vec<Machine> = ctx
        .store
        .machines(cp)?
        .into_iter()
        .filter(|m| m.version != to)
        .collect();
    old.sort_by_key(|m| m.serial);
    for o in old {
        let endpoints: Vec<String> = ctx
            .store
            .machines(cp)?
            .iter()
            .map(Machine::client_url)
            .collect();
        let mut client = connect(&endpoints, script.tls()).await?;
        let new = script.add_new(ctx, &mut client, to).await?;
        script.remove_old(ctx, &mut client, &new, &o).await?;
    }
    Ok(script.steps)
}

/// What the script keeps while it rolls: the control plane, how to reach it, where it
/// tells clients, and the steps it took.
struct Script<'a> {
    cp: &'a ControlPlane,
    access: &'a Access,
    clients: &'a Clients,
    /// The steps' times count from it.
    t0_ms: i64,
    steps: Vec<Step>,
}

impl Script<'_> {
    fn tls(&self) -> Option<&ClientTls> {
        self.access.client.as_ref()
    }

    /// Records a step on `machine`, at the time now.
    fn step(&mut self, kind: StepKind, machine: &str, message: String) {
        self.steps.push(Step {
            at_ms: now_ms() - self.t0_ms,
            kind,
            machine: Some(machine.to_string()),
            message,
            took_ms: None,
        })
    }

    /// A new machine at `to`: added as a voter, started, handed to the clients at
    /// once, and answering.
    async fn add_new(
        &mut self,
        ctx: &mut Ctx,
        client: &mut Client,
        to: Version,
    ) -> Result<Machine> {
        let cp = &self.cp.name;
        let certificates = &self.cp.spec.certificates;
        let not_after = self
            .access
            .ca()
            .map(|ca| certificates.not_after_unix_s(now_unix_s(), ca.not_after_unix_s()));
        let new = ctx
            .store
            .allocate_machine(cp, false, to, not_after, None, &address_is_free)?;
        let add = add_voter(client, &new).await?;
        self.step(
            StepKind::AddVoter,
            &new.name,
            format!("added {} as a voter", new.name),
        );
        self.start(ctx, &new, &add, not_after)?;
        self.step(
            StepKind::Action(ActionKind::StartMachine),
            &new.name,
            format!("started {}", new.name),
        );
        add_to_clients(self.clients, &new)?;
        self.step(
            StepKind::AddEndpoint,
            &new.name,
            format!("clients may use {} at once", new.name),
        );
        wait_answers(&self.access.etcd, &new).await?;
        Ok(new)
    }

    /// Starts the new machine into the cluster its add answered with (`add`), with
    /// certificates valid until `not_after` for a TLS control plane.
    fn start(
        &self,
        ctx: &Ctx,
        new: &Machine,
        add: &[etcd_client::Member],
        not_after: Option<i64>,
    ) -> Result<()> {
        let initial: Vec<InitialMember> = add
            .iter()
            .flat_map(|m| {
                let name = if m.name().is_empty() {
                    new.name.clone()
                } else {
                    m.name().to_string()
                };
                m.peer_urls().iter().map(move |u| InitialMember {
                    name: name.clone(),
                    peer_url: u.clone(),
                })
            })
            .collect();
        let certs = match (self.access.ca(), not_after) {
            (Some(ca), Some(t)) => Some((
                ca,
                ca.issue_machine_from(
                    &new.name,
                    new.address.into(),
                    &[quorum_provider::LOCAL_SOURCE_ADDRESS],
                    now_unix_s(),
                    t,
                )?,
            )),
            _ => None,
        };
        ctx.provider.start(&StartRequest {
            machine: new,
            cluster_token: &self.cp.name,
            state: ClusterState::Existing,
            initial_cluster: &initial,
            tls: certs.as_ref().map(|(ca, certs)| MachineTls {
                ca_pem: ca.cert_pem(),
                certs,
            }),
            quota_backend_bytes: None,
            expect_marker: None,
            force_new_cluster: false,
        })?;
        Ok(())
    }

    /// Removes the old machine `o`'s member (through the new member), kills its
    /// process and deletes it, leaving its address where the clients find it.
    async fn remove_old(
        &mut self,
        ctx: &mut Ctx,
        client: &mut Client,
        new: &Machine,
        o: &Machine,
    ) -> Result<()> {
        let members = bounded("list members", client.member_list()).await?;
        let id = members
            .members()
            .iter()
            .find(|m| m.name() == o.name || m.peer_urls().contains(&o.peer_url()))
            .map(|m| m.id());
        if let Some(id) = id {
            // Through any member, and without moving leadership first: if `o` leads,
            // the cluster has no leader until an election ends.
            let mut c = connect(&[new.client_url()], self.tls()).await?;
            let start = Instant::now();
            while let Err(e) = bounded("remove a member", c.member_remove(id)).await {
                match verdict(EtcdCall::RemoveMember, &e) {
                    // An earlier try whose answer was lost removed it.
                    Verdict::AlreadyDone => break,
                    Verdict::Refused(_) if within_join_limit(start) => {}
                    _ => return Err(e),
                }
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            }
            self.step(
                StepKind::Action(ActionKind::RemoveMember),
                &o.name,
                format!("removed {}'s member", o.name),
            );
        }
        ctx.provider.kill(&o.name)?;
        self.step(
            StepKind::KillMachine,
            &o.name,
            format!("killed {} (SIGKILL)", o.name),
        );
        ctx.provider.delete(&o.name)?;
        ctx.store.delete_machine(&self.cp.name, &o.name)?;
        Ok(())
    }
}

/// The core's verdict (the one classifier of etcd's answers) on a call that failed.
/// etcd's strict reconfiguration check answers "unhealthy cluster" until every member
/// has been connected for 5 s, and a cluster electing a leader answers late or not at
/// all: refusals, which a script's retry loop tries again, for a while.
fn verdict(call: EtcdCall, e: &anyhow::Error) -> Verdict {
    if e.downcast_ref::<tokio::time::error::Elapsed>().is_some() {
        return Verdict::Refused(Refusal::TimedOut); // the script's own deadline
    }
    match e.downcast_ref::<etcd_client::Error>() {
        Some(etcd_client::Error::GRpcStatus(s)) => {
            quorum_core::classify(call, GrpcCode::from_i32(s.code() as i32), s.message())
        }
        Some(etcd_client::Error::TransportError(_)) => Verdict::Unreachable,
        _ => Verdict::Failed,
    }
}

fn within_join_limit(since: Instant) -> bool {
    since.elapsed() < Duration::from_millis(JOIN_LIMIT_MS)
}

/// Adds `m` as a voter, retrying while etcd refuses or does not answer (an add whose
/// answer was lost shows up as "already exists" on the retry: etcd answers an add of a
/// voter as it answers a learner's); returns the members.
async fn add_voter(client: &mut Client, m: &Machine) -> Result<Vec<etcd_client::Member>> {
    let start = Instant::now();
    loop {
        let e = match bounded("add a voter", client.member_add(vec![m.peer_url()], None)).await {
            Ok(r) => return Ok(r.member_list().to_vec()),
            Err(e) => e,
        };
        match verdict(EtcdCall::AddLearner, &e) {
            Verdict::AlreadyDone => {
                let list = bounded("list members", client.member_list()).await?;
                return Ok(list.members().to_vec());
            }
            Verdict::Refused(_) if within_join_limit(start) => {
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            }
            _ => return Err(e),
        }
    }
}

async fn connect(endpoints: &[String], tls: Option<&ClientTls>) -> Result<Client> {
    let opts = crate::demo::client_options(tls)
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_millis(RPC_TIMEOUT_MS));
    bounded("connect", Client::connect(endpoints, Some(opts)))
        .await
        .with_context(|| format!("naive rollout: connecting to {endpoints:?}"))
}

async fn bounded<T>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T> {
    match tokio::time::timeout(Duration::from_millis(RPC_TIMEOUT_MS), f).await {
        Ok(r) => r.with_context(|| format!("naive rollout: {what}")),
        // Kept as the error underneath, for `verdict`.
        Err(elapsed) => Err(anyhow::Error::new(elapsed).context(format!(
            "naive rollout: {what}: no answer within {RPC_TIMEOUT_MS} ms"
        ))),
    }
}

fn add_to_clients(clients: &Clients, m: &Machine) -> Result<()> {
    match clients {
        Clients::File(path) => {
            let mut eps = crate::rollout::read_endpoints(path);
            eps.push(m.client_url());
            let doc = serde_json::json!({ "endpoints": eps, "updatedAtMs": now_ms() });
            let tmp = path.with_extension("json.tmp");
            std::fs::write(&tmp, format!("{doc:#}\n"))?;
            std::fs::rename(&tmp, path)?;
        }
        Clients::Haproxy { api, backend, tls } => {
            let addr = std::net::SocketAddr::from((m.address, quorum_core::CLIENT_PORT));
            if let Some(t) = tls {
                quorum_controller::balancer::ensure_tls(api, t, false)?;
            }
            api.add_server(backend, &m.name, addr, tls.as_ref().map(|t| &t.names))?;
        }
    }
    Ok(())
}

/// Waits until the new member answers a status request.
async fn wait_answers(etcd: &quorum_etcd::Etcd, m: &Machine) -> Result<()> {
    let start = Instant::now();
    loop {
        if etcd.status(&m.client_url()).await.is_ok() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_millis(JOIN_LIMIT_MS) {
            bail!(
                "naive rollout: {} did not answer within {JOIN_LIMIT_MS} ms",
                m.name
            );
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdict finds the error underneath the script's context: its own deadline is
    /// a refusal (retried), a client library error that is no answer of etcd's fails.
    #[tokio::test]
    async fn verdicts_see_through_the_context() {
        let elapsed = tokio::time::timeout(Duration::ZERO, std::future::pending::<()>())
            .await
            .unwrap_err();
        let e = anyhow::Error::new(elapsed).context("naive rollout: add a voter: no answer");
        assert_eq!(
            verdict(EtcdCall::AddLearner, &e),
            Verdict::Refused(Refusal::TimedOut)
        );
        let e = anyhow::Error::new(etcd_client::Error::InvalidArgs("x".into()))
            .context("naive rollout: remove a member");
        assert_eq!(verdict(EtcdCall::RemoveMember, &e), Verdict::Failed);
    }
}
