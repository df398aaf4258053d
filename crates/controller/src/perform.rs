//! Performing one decided action: the leadership check before it, the crash points
//! around it, the step reported to the heartbeat, and the side effect itself (a store
//! write, a machine, or a membership call to the leader).

use super::*;
use quorum_core::{CaPhase, CaRotation, InPlacePhase, ProviderKind};
use quorum_provider::MachineProvider;

impl Reconciler {
    /// Performs one action, with its failpoints around it. Returns the name of the
    /// machine an allocation recorded (its event names it).
    pub(crate) async fn perform(
        &mut self,
        cp: &ControlPlane,
        access: &Access,
        machines: &[Machine],
        observed: &Observed,
        action: &Action,
    ) -> Result<Option<String>, ActionError> {
        let kind = action.kind();
        // Every action is a side effect (on a member, a machine or the store): only a
        // leader with time to spare may start one, and the store confirms the token.
        self.sh
            .store
            .ensure_leading(self.sh.lease_margin_ms())
            .await?;
        // Under way from here (a `sleep(ms)` failpoint after it makes a long step).
        self.report_step(cp, Some(action));
        failpoints::crash_point(&format!("crash-before-{kind}"));
        let cx = Cx {
            cp,
            access,
            machines,
            observed,
        };
        let res = self.perform_inner(&cx, action).await;
        if res.is_ok() {
            failpoints::crash_point(&format!("crash-after-{kind}"));
        }
        self.report_step(cp, None);
        let allocated = res?;
        if kind == ActionKind::RemoveMember && failpoints::active("lose-lease-after-remove-member")
        {
            // The origin bug report: the lease is lost right after etcd acknowledged the
            // removal; this replica does not know yet.
            self.sh.store.release_lease_keeping_token().await?;
            tracing::warn!("failpoint: the leadership lease was revoked after remove-member");
        }
        if failpoints::LOSABLE.contains(&kind) && failpoints::active(&format!("lose-answer-{kind}"))
        {
            return Err(ActionError::Etcd(EtcdError::Timeout {
                op: "answer (lost by failpoint)",
                endpoint: observed.view.leader_url.clone().unwrap_or_default(),
                timeout_ms: 0,
            }));
        }
        Ok(allocated)
    }

    /// Tells the heartbeat thread which step is under way on this control plane
    /// (`None`: none).
    fn report_step(&self, cp: &ControlPlane, step: Option<&Action>) {
        let steps = self.sh.steps.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = steps.as_ref() {
            h.step(
                &cp.name,
                step.map(|action| quorum_store::StepInProgress {
                    control_plane: cp.name.clone(),
                    description: action.to_string(),
                    since_ms: now_ms(),
                }),
            );
        }
    }

    /// Routes an action to the performer of its kind: the machines, etcd, upkeep, a
    /// rebuild, or a record the core asked for.
    async fn perform_inner(
        &mut self,
        cx: &Cx<'_>,
        action: &Action,
    ) -> Result<Option<String>, ActionError> {
        match action {
            Action::AllocateMachine {
                bootstrap,
                version,
                remediation,
            } => {
                self.allocate(cx, *bootstrap, *version, remediation.as_ref())
                    .await
            }
            Action::StartMachine { .. }
            | Action::StopMachine { .. }
            | Action::DeleteMachine { .. }
            | Action::WriteMarker { .. } => self.perform_machine(cx, action).await.map(|()| None),
            Action::AddLearner { .. }
            | Action::Promote { .. }
            | Action::MoveLeader { .. }
            | Action::RemoveMember { .. }
            | Action::Compact { .. }
            | Action::Defragment { .. }
            | Action::DisarmAlarm { .. } => self.perform_etcd(cx, action).await.map(|()| None),
            Action::TakeSnapshot { .. }
            | Action::PruneSnapshot { .. }
            | Action::VerifySnapshot { .. }
            | Action::PruneFenced { .. } => self.perform_backup(cx, action).await.map(|()| None),
            Action::FenceMachine { .. }
            | Action::SetRebuildPhase { .. }
            | Action::RestoreSnapshot { .. }
            | Action::ForceNewCluster { .. }
            | Action::FinishRebuild { .. } => self.perform_rebuild(cx, action).await,
            Action::MarkDeleting { .. }
            | Action::ForgetControlPlane
            | Action::BeginInPlace { .. }
            | Action::SetInPlacePhase { .. }
            | Action::EndInPlace { .. }
            | Action::SetCaPhase { .. }
            | Action::FinishCaRotation { .. }
            | Action::TakeNextLink { .. } => self.perform_record(cx, action).await.map(|()| None),
        }
    }

    /// Records a new machine (its address, or its host and ports), with the end of
    /// every certificate it will get.
    async fn allocate(
        &mut self,
        cx: &Cx<'_>,
        bootstrap: bool,
        version: quorum_core::Version,
        remediation: Option<&quorum_core::Remediation>,
    ) -> Result<Option<String>, ActionError> {
        let cp = cx.cp;
        // Refuse to record a machine that could never start.
        etcd_binary(self.sh.provider.etcd_dir(), version)?;
        let now = now_unix_s();
        let not_after = cx.access.ca().map(|ca| {
            cp.spec
                .certificates
                .not_after_unix_s(now, ca.not_after_unix_s())
        });
        let remediation = remediation.cloned();
        let m = if cp.spec.provider.is_local() {
            // Never an address a member still names (`reach::named_by`).
            let named = cx
                .observed
                .observation
                .members
                .as_deref()
                .map(quorum_core::reach::named_by)
                .unwrap_or_default();
            self.sh
                .store
                .allocate_machine(
                    &cp.name,
                    bootstrap,
                    version,
                    not_after,
                    remediation,
                    move |a| !named.contains(&a) && address_is_free(a),
                )
                .await?
        } else {
            let hosts = &self.sh.hosts;
            hosts
                .allocate(
                    &self.sh.store,
                    cp,
                    cx.machines,
                    bootstrap,
                    version,
                    not_after,
                    remediation,
                )
                .await?
        };
        tracing::info!(cp = %cp.name, machine = %m.name, address = %m.address, "allocated");
        Ok(Some(m.name))
    }

    /// A machine's process or data: start, stop, delete, mark its data directory.
    async fn perform_machine(&mut self, cx: &Cx<'_>, action: &Action) -> Result<(), ActionError> {
        let (cp, access, machines) = (cx.cp, cx.access, cx.machines);
        match action {
            Action::StartMachine {
                machine,
                state,
                initial_cluster,
                expect,
            } => {
                let Some(m) = cx.find(machine) else {
                    return Ok(());
                };
                self.start(cx, m, *state, initial_cluster, *expect).await
            }
            Action::StopMachine { machine } => {
                self.check_still_draining(cp, machines, machine).await?;
                self.on_machine(cp, access, machines, machine, MachineOp::Stop)
                    .await
            }
            Action::DeleteMachine { machine } => {
                self.on_machine(cp, access, machines, machine, MachineOp::Delete)
                    .await?;
                failpoints::crash_point("crash-after-destroy-machine");
                Ok(self.sh.store.delete_machine(&cp.name, machine).await?)
            }
            Action::WriteMarker { machine, marker } => {
                let Some(m) = cx.find(machine) else {
                    return Ok(());
                };
                Ok(self.machines_of(cp).write_marker(m, *marker).await?)
            }
            other => Err(misrouted(other, "a machine")),
        }
    }

    /// Starts `m`'s etcd, with its certificates, through its provider.
    async fn start(
        &mut self,
        cx: &Cx<'_>,
        m: &Machine,
        state: quorum_core::ClusterState,
        initial_cluster: &[quorum_core::InitialMember],
        expect: Option<quorum_core::DataMarker>,
    ) -> Result<(), ActionError> {
        let cp = cx.cp;
        let certs = self.machine_certs(cp, cx.access, m)?;
        let req = StartRequest {
            machine: m,
            cluster_token: &cp.name,
            state,
            initial_cluster,
            tls: certs.as_ref().map(|(trust, certs)| MachineTls {
                ca_pem: trust,
                certs,
            }),
            quota_backend_bytes: cp.spec.maintenance.quota_backend_bytes,
            expect_marker: Some(expect),
            force_new_cluster: false,
        };
        Ok(self.machines_of(cp).start(&req).await?)
    }

    /// A call to etcd: a membership change through the leader, or upkeep.
    async fn perform_etcd(&mut self, cx: &Cx<'_>, action: &Action) -> Result<(), ActionError> {
        let etcd = &cx.access.etcd;
        match action {
            Action::AddLearner { peer_url, .. } => {
                etcd.add_learner(&cx.leader()?, peer_url).await?;
                Ok(())
            }
            Action::Promote { member_id, .. } => {
                Ok(etcd.promote(&cx.leader()?, *member_id).await?)
            }
            Action::MoveLeader { to_member, .. } => {
                Ok(etcd.move_leader(&cx.leader()?, *to_member).await?)
            }
            Action::RemoveMember { member_id, machine } => {
                if let (Some(h), Some(m)) = (&cx.cp.spec.haproxy, machine) {
                    let (h, m) = (h.clone(), m.clone());
                    tokio::task::spawn_blocking(move || balancer::shut_before_removal(&h, &m))
                        .await
                        .map_err(|e| ActionError::Join(e.to_string()))??;
                }
                Ok(etcd.remove(&cx.leader()?, *member_id).await?)
            }
            Action::Compact { revision } => Ok(etcd.compact(&cx.leader()?, *revision).await?),
            Action::Defragment { machine } => match cx.find(machine) {
                Some(m) => Ok(etcd.defragment(&m.client_url()).await?),
                None => Ok(()),
            },
            Action::DisarmAlarm { member_id, alarm } => {
                Ok(etcd.disarm(&cx.leader()?, *member_id, alarm).await?)
            }
            other => Err(misrouted(other, "etcd")),
        }
    }

    /// Snapshots and fenced directories: take, prune, verify; remove.
    async fn perform_backup(&mut self, cx: &Cx<'_>, action: &Action) -> Result<(), ActionError> {
        let cp = cx.cp;
        match action {
            Action::TakeSnapshot { before } => {
                self.take_snapshot(cp, cx.access, cx.machines, cx.observed, *before)
                    .await
            }
            Action::PruneSnapshot { id } => self.prune_snapshot(cp, id).await,
            Action::VerifySnapshot { id } => self.verify_snapshot(cp, id).await,
            // Decided only from this host's own fenced directories (`fenced_into`).
            Action::PruneFenced { name } => Ok(self.sh.provider.remove_fenced(name)?),
            other => Err(misrouted(other, "backups")),
        }
    }

    /// A rebuild's steps (where the provider can rebuild: `MachineProvider::rebuilds`).
    async fn perform_rebuild(
        &mut self,
        cx: &Cx<'_>,
        action: &Action,
    ) -> Result<Option<String>, ActionError> {
        let (cp, access, machines) = (cx.cp, cx.access, cx.machines);
        if !action.writes_records_only() {
            self.machines_of(cp).rebuilds()?;
        }
        match action {
            Action::SetRebuildPhase { phase } => {
                self.set_rebuild_phase(cp, Some(*phase)).await?;
                Ok(None)
            }
            Action::FinishRebuild { machine } => {
                self.finish_rebuild(cp, machine).await?;
                Ok(None)
            }
            Action::FenceMachine { machine } => {
                self.fence_machine(cp, access, machines, machine).await
            }
            Action::RestoreSnapshot { machine, id } => {
                self.restore_seed(cp, machines, machine, id).await
            }
            Action::ForceNewCluster { machine, expect } => {
                self.force_new_cluster(cp, access, machines, machine, *expect)
                    .await?;
                Ok(None)
            }
            other => Err(misrouted(other, "a rebuild")),
        }
    }

    /// A record the core asked for: a machine leaving, a control plane forgotten, an
    /// in-place step's phases, a CA rotation's, a chained upgrade's next link.
    async fn perform_record(&mut self, cx: &Cx<'_>, action: &Action) -> Result<(), ActionError> {
        let cp = cx.cp;
        match action {
            Action::MarkDeleting { machine, .. }
            | Action::BeginInPlace { machine, .. }
            | Action::SetInPlacePhase { machine, .. }
            | Action::EndInPlace { machine, .. } => {
                self.refuse_unstartable(action)?;
                let at = self.applying(cx);
                let what = match action {
                    Action::MarkDeleting { .. } => "mark a machine leaving",
                    Action::BeginInPlace { .. } => "begin an in-place step",
                    Action::SetInPlacePhase { .. } => "record an in-place phase",
                    _ => "end an in-place step",
                };
                let applied = action.clone();
                self.sh
                    .store
                    .update_machine(&cp.name, machine, what, move |m| m.apply(&applied, &at))
                    .await?;
                if let Action::BeginInPlace { to, .. } = action {
                    self.machines_of(cp).prepare(cx.machines, *to);
                }
                Ok(())
            }
            Action::ForgetControlPlane => Ok(self.sh.store.forget_control_plane(&cp.name).await?),
            Action::SetCaPhase { phase } => self.set_ca_phase(cp, *phase).await,
            // Taken already, or the spec changed since: nothing to do (the next pass
            // decides from what is recorded).
            Action::TakeNextLink { from, to } => {
                let taken = self
                    .sh
                    .store
                    .take_next_link(&cp.name, *from, *to, now_unix_s());
                taken.await?;
                Ok(())
            }
            Action::FinishCaRotation { generation } => {
                self.sh
                    .store
                    .finish_ca_rotation(&cp.name, *generation)
                    .await?;
                Ok(())
            }
            other => Err(misrouted(other, "a record")),
        }
    }

    /// Refuses to record a binary that could never start: an in-place step's target,
    /// or the binary of its next phase.
    fn refuse_unstartable(&self, action: &Action) -> Result<(), ActionError> {
        let version = match action {
            Action::BeginInPlace { to, .. } => *to,
            Action::SetInPlacePhase { version, .. } => *version,
            _ => return Ok(()),
        };
        etcd_binary(self.sh.provider.etcd_dir(), version)?;
        Ok(())
    }

    /// What `Machine::apply` needs: the time, and the end date of certificates issued
    /// now (a restart in place gets certificates a whole lifetime from now).
    fn applying(&self, cx: &Cx<'_>) -> quorum_core::record::Applying {
        let now_unix_s = now_unix_s();
        let certificates = &cx.cp.spec.certificates;
        let renewed_not_after_unix_s = cx
            .access
            .ca()
            .map(|ca| certificates.not_after_unix_s(now_unix_s, ca.not_after_unix_s()));
        quorum_core::record::Applying {
            now_unix_s,
            renewed_not_after_unix_s,
        }
    }

    /// Records the CA rotation's next phase, if the rotation the decision saw is still
    /// the one recorded (a rotation moved on or finished meanwhile is left alone).
    async fn set_ca_phase(&self, cp: &ControlPlane, phase: CaPhase) -> Result<(), ActionError> {
        let Some(r) = &cp.ca_rotation else {
            return Ok(());
        };
        let next = CaRotation {
            phase,
            since_unix_s: now_unix_s(),
            ..r.clone()
        };
        self.sh.store.set_ca_rotation(&cp.name, next).await?;
        Ok(())
    }

    /// The fencing token an agent call on `cp` carries: this replica's leadership.
    fn fence(&self, cp: &ControlPlane) -> quorum_agent::proto::Fence {
        quorum_agent::proto::Fence {
            control_plane: cp.name.clone(),
            token: self.sh.fence_token().0,
        }
    }

    /// Where `cp`'s members run, to act on them: the one place a step looks at
    /// `spec.provider` (`quorum_provider::MachineProvider`).
    pub(crate) fn machines_of(&self, cp: &ControlPlane) -> Box<dyn MachineProvider> {
        match cp.spec.provider {
            ProviderKind::Local => Box::new(self.sh.provider.clone()),
            ProviderKind::Hosts => Box::new(quorum_hosts::OnHosts {
                hosts: self.sh.hosts.clone(),
                store: self.sh.store.clone(),
                fence: self.fence(cp),
            }),
        }
    }

    /// The stop of an in-place step is checked against the store right before it: a
    /// member stopped on a stale look (a deposed controller's, resumed after its
    /// successor finished this member's step and began the next one's) would be a
    /// second member down. The record read now must still say `draining`.
    async fn check_still_draining(
        &self,
        cp: &ControlPlane,
        machines: &[Machine],
        name: &str,
    ) -> Result<(), ActionError> {
        let draining = |m: &Machine| {
            m.in_place
                .as_ref()
                .is_some_and(|ip| ip.phase == InPlacePhase::Draining)
        };
        if !machines.iter().any(|m| m.name == name && draining(m)) {
            return Ok(());
        }
        let now = self.sh.store.machine(&cp.name, name).await?;
        if draining(&now) {
            return Ok(());
        }
        Err(ActionError::StaleStop {
            machine: name.to_string(),
            now: match &now.in_place {
                Some(ip) => ip.phase.to_string(),
                None => "its step ended".to_string(),
            },
        })
    }

    /// A machine's files for a start: what it trusts (PEM) and its certificates, fresh
    /// keys every time, ending when its record says (fixed at allocation), from the CA
    /// its record's CA step names (`ControlPlane::ca_files`). `None` for a plaintext
    /// control plane.
    pub(crate) fn machine_certs(
        &self,
        cp: &ControlPlane,
        access: &Access,
        m: &Machine,
    ) -> Result<Option<(String, quorum_pki::MachineCerts)>, ActionError> {
        Ok(match (&access.cas, m.certificates_not_after_unix_s) {
            (Some(cas), Some(not_after)) => {
                Some(cas.machine_files(cp.ca_files(m.ca_step), m, now_unix_s(), not_after)?)
            }
            _ => None,
        })
    }

    /// Stops or deletes a machine through its provider, then drops the cached etcd
    /// client of the machine, which no longer serves. One with no record is gone.
    async fn on_machine(
        &self,
        cp: &ControlPlane,
        access: &Access,
        machines: &[Machine],
        name: &str,
        op: MachineOp,
    ) -> Result<(), ActionError> {
        let Some(m) = machines.iter().find(|m| m.name == name) else {
            return Ok(());
        };
        let provider = self.machines_of(cp);
        match op {
            MachineOp::Stop => provider.stop(m).await?,
            MachineOp::Delete => provider.delete(m).await?,
        }
        access.etcd.forget(&m.client_url());
        Ok(())
    }
}

/// The history's words for a step that was done: an allocation names the machine it
/// allocated (three "allocate a new initial machine" lines said nothing).
pub(crate) fn done_message(action: &Action, allocated: Option<&str>) -> String {
    match (action, allocated) {
        (
            Action::AllocateMachine {
                version,
                remediation: Some(r),
                ..
            },
            Some(name),
        ) => format!(
            "allocated {name} to replace {} (etcd {version}, attempt {})",
            r.machine, r.attempt
        ),
        (
            Action::AllocateMachine {
                bootstrap, version, ..
            },
            Some(name),
        ) => {
            let role = if *bootstrap {
                "an initial member"
            } else {
                "a new member"
            };
            format!("allocated {name} as {role} (etcd {version})")
        }
        // Fences and restores say what they did (where the directory went; whether
        // revisions moved on).
        (Action::FenceMachine { .. } | Action::RestoreSnapshot { .. }, Some(done)) => {
            done.to_string()
        }
        _ => action.to_string(),
    }
}

/// What `on_machine` does to a machine.
#[derive(Clone, Copy, Debug)]
enum MachineOp {
    Stop,
    Delete,
}

/// What performing any action reads: the control plane, its access, its machine records
/// and the observation the decision was made from.
pub(crate) struct Cx<'a> {
    pub(crate) cp: &'a ControlPlane,
    pub(crate) access: &'a Access,
    pub(crate) machines: &'a [Machine],
    pub(crate) observed: &'a Observed,
}

impl Cx<'_> {
    fn find(&self, name: &str) -> Option<&Machine> {
        self.machines.iter().find(|m| m.name == name)
    }

    /// The leader's client URL, where membership changes and cluster-wide upkeep go.
    fn leader(&self) -> Result<String, ActionError> {
        self.observed
            .view
            .leader_url
            .clone()
            .ok_or(ActionError::NoLeader)
    }
}

/// `perform_inner` sent an action to a performer that does not take it: a fault of the
/// routing, reported as the action's failure rather than a panic.
fn misrouted(action: &Action, performer: &'static str) -> ActionError {
    ActionError::Misrouted {
        kind: action.kind(),
        performer,
    }
}
