//! Performing one decided action: the leadership check before it, the crash points
//! around it, the step reported to the heartbeat, and the side effect itself (a store
//! write, a machine, or a membership call to the leader).

use super::*;
use quorum_core::{CaPhase, CaRotation, InPlacePhase};

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
        self.sh.store().ensure_leading(self.sh.lease_margin_ms())?;
        // Under way from here (a `sleep(ms)` failpoint after it makes a long step).
        self.report_step(cp, Some(action));
        failpoints::crash_point(&format!("crash-before-{kind}"));
        let res = self
            .perform_inner(cp, access, machines, observed, action)
            .await;
        if res.is_ok() {
            failpoints::crash_point(&format!("crash-after-{kind}"));
        }
        self.report_step(cp, None);
        let allocated = res?;
        if kind == ActionKind::RemoveMember && failpoints::active("lose-lease-after-remove-member")
        {
            // The origin bug report: the lease is lost right after etcd acknowledged the
            // removal; this replica does not know yet.
            self.sh.store().release_lease_keeping_token()?;
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

    async fn perform_inner(
        &mut self,
        cp: &ControlPlane,
        access: &Access,
        machines: &[Machine],
        observed: &Observed,
        action: &Action,
    ) -> Result<Option<String>, ActionError> {
        let find = |name: &str| machines.iter().find(|m| m.name == name);
        let leader = || {
            observed
                .view
                .leader_url
                .clone()
                .ok_or(ActionError::NoLeader)
        };
        match action {
            Action::AllocateMachine {
                bootstrap,
                version,
                remediation,
            } => {
                // Refuse to record a machine that could never start.
                etcd_binary(self.sh.provider.etcd_dir(), *version)?;
                let now = now_unix_s();
                let not_after = access.ca().map(|ca| {
                    cp.spec
                        .certificates
                        .not_after_unix_s(now, ca.not_after_unix_s())
                });
                let m = if cp.spec.provider.is_local() {
                    // Never an address a member still names (`reach::named_by`).
                    let named = observed
                        .observation
                        .members
                        .as_deref()
                        .map(quorum_core::reach::named_by)
                        .unwrap_or_default();
                    self.sh.store().allocate_machine(
                        &cp.name,
                        *bootstrap,
                        *version,
                        not_after,
                        remediation.clone(),
                        &|a| !named.contains(&a) && address_is_free(a),
                    )?
                } else {
                    self.sh
                        .hosts
                        .allocate(
                            &self.sh.store,
                            cp,
                            machines,
                            *bootstrap,
                            *version,
                            not_after,
                            remediation.clone(),
                        )
                        .await?
                };
                tracing::info!(cp = %cp.name, machine = %m.name, address = %m.address, "allocated");
                Ok(Some(m.name))
            }
            Action::StartMachine {
                machine,
                state,
                initial_cluster,
                expect,
            } => {
                let Some(m) = find(machine) else {
                    return Ok(None);
                };
                let certs = self.machine_certs(cp, access, m)?;
                let req = StartRequest {
                    machine: m,
                    cluster_token: &cp.name,
                    state: *state,
                    initial_cluster,
                    tls: certs.as_ref().map(|(trust, certs)| MachineTls {
                        ca_pem: trust,
                        certs,
                    }),
                    quota_backend_bytes: cp.spec.maintenance.quota_backend_bytes,
                    expect_marker: Some(*expect),
                    force_new_cluster: false,
                };
                if cp.spec.provider.is_local() {
                    self.sh.provider.start(&req)?;
                } else {
                    let spec = start_spec(&req);
                    let t = self.target(m)?;
                    self.sh.hosts.start(&t, &self.fence(cp), &spec).await?;
                }
                Ok(None)
            }
            Action::AddLearner { peer_url, .. } => {
                access.etcd.add_learner(&leader()?, peer_url).await?;
                Ok(None)
            }
            Action::Promote { member_id, .. } => {
                access.etcd.promote(&leader()?, *member_id).await?;
                Ok(None)
            }
            Action::MarkDeleting {
                machine,
                remediation,
                ..
            } => {
                self.sh
                    .store()
                    .mark_machine_deleting(&cp.name, machine, remediation.as_ref())?;
                Ok(None)
            }
            Action::MoveLeader { to_member, .. } => {
                access.etcd.move_leader(&leader()?, *to_member).await?;
                Ok(None)
            }
            Action::RemoveMember { member_id, machine } => {
                if let (Some(h), Some(m)) = (&cp.spec.haproxy, machine) {
                    let (h, m) = (h.clone(), m.clone());
                    tokio::task::spawn_blocking(move || balancer::shut_before_removal(&h, &m))
                        .await
                        .map_err(|e| ActionError::Join(e.to_string()))??;
                }
                access.etcd.remove(&leader()?, *member_id).await?;
                Ok(None)
            }
            Action::StopMachine { machine } => {
                self.check_still_draining(cp, machines, machine)?;
                self.on_machine(cp, access, machines, machine, MachineOp::Stop)
                    .await?;
                Ok(None)
            }
            Action::DeleteMachine { machine } => {
                self.on_machine(cp, access, machines, machine, MachineOp::Delete)
                    .await?;
                failpoints::crash_point("crash-after-destroy-machine");
                self.sh.store().delete_machine(&cp.name, machine)?;
                Ok(None)
            }
            Action::ForgetControlPlane => {
                self.sh.store().forget_control_plane(&cp.name)?;
                Ok(None)
            }
            Action::WriteMarker { machine, marker } if !cp.spec.provider.is_local() => {
                let Some(m) = find(machine) else {
                    return Ok(None);
                };
                let t = self.target(m)?;
                self.sh
                    .hosts
                    .write_marker(&t, &self.fence(cp), m, *marker)
                    .await?;
                Ok(None)
            }
            Action::WriteMarker { machine, marker } => {
                let (p, n, marker) = (self.sh.provider.clone(), machine.clone(), *marker);
                tokio::task::spawn_blocking(move || p.write_marker(&n, marker))
                    .await
                    .map_err(|e| ActionError::Join(e.to_string()))??;
                Ok(None)
            }
            Action::Compact { revision } => {
                access.etcd.compact(&leader()?, *revision).await?;
                Ok(None)
            }
            Action::Defragment { machine } => {
                let Some(m) = find(machine) else {
                    return Ok(None);
                };
                access.etcd.defragment(&m.client_url()).await?;
                Ok(None)
            }
            Action::DisarmAlarm { member_id, alarm } => {
                access.etcd.disarm(&leader()?, *member_id, alarm).await?;
                Ok(None)
            }
            Action::TakeSnapshot => {
                self.take_snapshot(cp, access, machines, observed).await?;
                Ok(None)
            }
            Action::PruneSnapshot { id } => {
                self.prune_snapshot(cp, id).await?;
                Ok(None)
            }
            Action::VerifySnapshot { id } => {
                self.verify_snapshot(cp, id).await?;
                Ok(None)
            }
            Action::PruneFenced { name } => {
                // Decided only from this host's own fenced directories (`fenced_into`).
                self.sh.provider.remove_fenced(name)?;
                Ok(None)
            }
            Action::FenceMachine { machine } if !cp.spec.provider.is_local() => {
                let _ = machine;
                Err(
                    hosts::HostsError::Unsupported("rebuilding a control plane after quorum loss")
                        .into(),
                )
            }
            Action::FenceMachine { machine } => {
                self.fence_machine(cp, access, machines, machine).await
            }
            Action::SetRebuildPhase { phase } => {
                self.set_rebuild_phase(cp, Some(*phase))?;
                Ok(None)
            }
            Action::RestoreSnapshot { machine, id } if !cp.spec.provider.is_local() => {
                let _ = machine;
                Err(
                    hosts::HostsError::Unsupported("rebuilding a control plane after quorum loss")
                        .into(),
                )
            }
            Action::RestoreSnapshot { machine, id } => {
                self.restore_seed(cp, machines, machine, id).await
            }
            Action::ForceNewCluster { machine, expect } if !cp.spec.provider.is_local() => {
                let _ = machine;
                Err(
                    hosts::HostsError::Unsupported("rebuilding a control plane after quorum loss")
                        .into(),
                )
            }
            Action::ForceNewCluster { machine, expect } => {
                self.force_new_cluster(cp, access, machines, machine, *expect)?;
                Ok(None)
            }
            Action::FinishRebuild { machine } => {
                self.finish_rebuild(cp, machine)?;
                Ok(None)
            }
            Action::BeginInPlace {
                machine,
                to,
                reason,
            } => {
                // Refuse to begin what could never restart.
                etcd_binary(self.sh.provider.etcd_dir(), *to)?;
                let (to, reason, now) = (*to, *reason, now_unix_s());
                self.sh.store().update_machine(
                    &cp.name,
                    machine,
                    "begin an in-place step",
                    &|m| m.begin_in_place(to, reason, now),
                )?;
                if !cp.spec.provider.is_local() {
                    self.stage_version(machines, to);
                }
                Ok(None)
            }
            Action::SetInPlacePhase {
                machine,
                phase,
                version,
                failure,
                ca_step,
            } => {
                etcd_binary(self.sh.provider.etcd_dir(), *version)?;
                let (phase, version, now, ca_step) = (*phase, *version, now_unix_s(), *ca_step);
                let renewed = access.ca().map(|ca| {
                    cp.spec
                        .certificates
                        .not_after_unix_s(now, ca.not_after_unix_s())
                });
                let failure = failure.as_deref();
                self.sh.store().update_machine(
                    &cp.name,
                    machine,
                    "record an in-place phase",
                    &|m| m.set_in_place_phase(phase, version, failure, ca_step, renewed, now),
                )?;
                Ok(None)
            }
            Action::SetCaPhase { phase } => {
                self.set_ca_phase(cp, *phase)?;
                Ok(None)
            }
            Action::FinishCaRotation { generation } => {
                self.sh.store().finish_ca_rotation(&cp.name, *generation)?;
                Ok(None)
            }
            Action::EndInPlace { machine, outcome } => {
                let (outcome, now) = (outcome.clone(), now_unix_s());
                self.sh.store().update_machine(
                    &cp.name,
                    machine,
                    "end an in-place step",
                    &|m| m.end_in_place(&outcome, now),
                )?;
                Ok(None)
            }
        }
    }

    /// Records the CA rotation's next phase, if the rotation the decision saw is still
    /// the one recorded (a rotation moved on or finished meanwhile is left alone).
    fn set_ca_phase(&self, cp: &ControlPlane, phase: CaPhase) -> Result<(), ActionError> {
        let Some(r) = &cp.ca_rotation else {
            return Ok(());
        };
        let next = CaRotation {
            phase,
            since_unix_s: now_unix_s(),
            ..r.clone()
        };
        self.sh.store().set_ca_rotation(&cp.name, &next)?;
        Ok(())
    }

    /// The fencing token an agent call on `cp` carries: this replica's leadership.
    fn fence(&self, cp: &ControlPlane) -> quorum_agent::proto::Fence {
        quorum_agent::proto::Fence {
            control_plane: cp.name.clone(),
            token: self
                .sh
                .fence_token
                .load(std::sync::atomic::Ordering::SeqCst),
        }
    }

    /// Installs `version` on every host the control plane's members run on, each in a
    /// task of its own, when an in-place step begins: the binaries travel to all hosts
    /// at once, while the first member drains, instead of one host after another inside
    /// each member's restart. Best effort: a start installs what is missing anyway (and
    /// waits for a staged install under way on its host), and says so if that fails.
    fn stage_version(&self, machines: &[Machine], version: quorum_core::Version) {
        let mut seen = std::collections::BTreeSet::new();
        for m in machines.iter().filter(|m| !m.deleting) {
            let Some(host) = m.host() else { continue };
            if !seen.insert(host.to_string()) {
                continue;
            }
            let t = match self.target(m) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(host, error = %e, "cannot stage etcd {version} there");
                    continue;
                }
            };
            let sh = self.sh.clone();
            tokio::spawn(async move {
                if let Err(e) = sh.hosts.ensure_version(&t, version).await {
                    tracing::warn!(host = %t.host.name, %version, error = %e, "staging the new version failed; a start there installs it");
                }
            });
        }
    }

    /// The host of machine `m`, ready to call.
    pub(crate) fn target(&self, m: &Machine) -> Result<hosts::Target, ActionError> {
        let host = hosts::placed_on(m)?;
        Ok(self.sh.hosts.target(&self.sh.store(), &host)?)
    }

    /// The stop of an in-place step is checked against the store right before it: a
    /// member stopped on a stale look (a deposed controller's, resumed after its
    /// successor finished this member's step and began the next one's) would be a
    /// second member down. The record read now must still say `draining`.
    fn check_still_draining(
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
        let now = self.sh.store().machine(&cp.name, name)?;
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

    /// Runs a (blocking, bounded) provider operation on a machine off the async threads,
    /// then drops the cached etcd client of the machine, which no longer serves.
    async fn on_machine(
        &self,
        cp: &ControlPlane,
        access: &Access,
        machines: &[Machine],
        name: &str,
        op: MachineOp,
    ) -> Result<(), ActionError> {
        if !cp.spec.provider.is_local() {
            let Some(m) = machines.iter().find(|m| m.name == name) else {
                return Ok(());
            };
            let t = self.target(m)?;
            let fence = self.fence(cp);
            match op {
                MachineOp::Stop => self.sh.hosts.stop(&t, &fence, m).await?,
                MachineOp::Delete => self.sh.hosts.delete(&t, &fence, m).await?,
            }
            access.etcd.forget(&m.client_url());
            return Ok(());
        }
        let p = self.sh.provider.clone();
        let n = name.to_string();
        let op: fn(&LocalProvider, &str) -> Result<(), ProviderError> = match op {
            MachineOp::Stop => LocalProvider::stop,
            MachineOp::Delete => LocalProvider::delete,
        };
        tokio::task::spawn_blocking(move || op(&p, &n))
            .await
            .map_err(|e| ActionError::Join(e.to_string()))??;
        if let Some(m) = machines.iter().find(|m| m.name == name) {
            access.etcd.forget(&m.client_url());
        }
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

/// A start as the agent takes it (owned).
fn start_spec(req: &StartRequest<'_>) -> quorum_agent::StartSpec {
    quorum_agent::StartSpec {
        machine: req.machine.clone(),
        cluster_token: req.cluster_token.to_string(),
        state: req.state,
        initial_cluster: req.initial_cluster.to_vec(),
        tls: req.tls.map(|t| quorum_agent::MemberTls {
            ca_pem: t.ca_pem.to_string(),
            server_cert_pem: t.certs.server.cert_pem.clone(),
            server_key_pem: t.certs.server.key_pem.clone(),
            peer_cert_pem: t.certs.peer.cert_pem.clone(),
            peer_key_pem: t.certs.peer.key_pem.clone(),
            not_after_unix_s: t.certs.not_after_unix_s,
        }),
        quota_backend_bytes: req.quota_backend_bytes,
        expect_marker: req.expect_marker,
        force_new_cluster: req.force_new_cluster,
    }
}

/// What `on_machine` does to a machine.
#[derive(Clone, Copy, Debug)]
enum MachineOp {
    Stop,
    Delete,
}
