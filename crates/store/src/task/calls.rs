//! The store's calls that async code makes, one `async fn` each: the arguments are
//! copied onto the store's thread (`StoreTask::call`), the answer comes back. Named as
//! `StateStore`'s, whose documentation they share.

use super::StoreTask;
use crate::{
    Campaign, EndpointHealth, EventKind, HeartbeatWriter, NewEvent, PublishedStatus, Result,
    StepOutcome,
};
use quorum_core::{
    CaRotation, ControlPlane, Machine, Remediation, SnapshotRecord, Verification, Version,
};
use std::net::Ipv4Addr;

/// A `NewEvent` with its own strings, to cross to the store's thread.
struct OwnedEvent {
    kind: EventKind,
    outcome: StepOutcome,
    machine: Option<String>,
    message: String,
    waited_ms: Option<i64>,
    took_ms: Option<i64>,
    by: Option<String>,
}

impl OwnedEvent {
    fn of(e: &NewEvent<'_>) -> Self {
        OwnedEvent {
            kind: e.kind.clone(),
            outcome: e.outcome,
            machine: e.machine.map(str::to_string),
            message: e.message.to_string(),
            waited_ms: e.waited_ms,
            took_ms: e.took_ms,
            by: e.by.map(str::to_string),
        }
    }

    fn new_event(&self) -> NewEvent<'_> {
        NewEvent {
            kind: self.kind.clone(),
            outcome: self.outcome,
            machine: self.machine.as_deref(),
            message: &self.message,
            waited_ms: self.waited_ms,
            took_ms: self.took_ms,
            by: self.by.as_deref(),
        }
    }
}

impl StoreTask {
    pub async fn control_plane(&self, name: &str) -> Result<Option<ControlPlane>> {
        let name = name.to_string();
        self.call("read a control plane", move |s| s.control_plane(&name))
            .await
    }

    pub async fn control_planes(&self) -> Result<Vec<ControlPlane>> {
        self.call("list the control planes", |s| s.control_planes())
            .await
    }

    pub async fn data_version(&self) -> Result<i64> {
        self.call("read the data version", |s| s.data_version())
            .await
    }

    pub async fn machines(&self, cp: &str) -> Result<Vec<Machine>> {
        let cp = cp.to_string();
        self.call("read the machines", move |s| s.machines(&cp))
            .await
    }

    pub async fn machine(&self, cp: &str, machine: &str) -> Result<Machine> {
        let (cp, machine) = (cp.to_string(), machine.to_string());
        self.call("read a machine", move |s| s.machine(&cp, &machine))
            .await
    }

    pub async fn allocate_machine(
        &self,
        cp: &str,
        bootstrap: bool,
        version: Version,
        certificates_not_after_unix_s: Option<i64>,
        remediation: Option<Remediation>,
        is_free: impl Fn(Ipv4Addr) -> bool + Send + 'static,
    ) -> Result<Machine> {
        let cp = cp.to_string();
        self.call("record a new machine", move |s| {
            s.allocate_machine(
                &cp,
                bootstrap,
                version,
                certificates_not_after_unix_s,
                remediation,
                &is_free,
            )
        })
        .await
    }

    /// `StateStore::update_machine`, `change` applied to the record read there.
    pub async fn update_machine(
        &self,
        cp: &str,
        machine: &str,
        what: &'static str,
        change: impl Fn(&mut Machine) -> bool + Send + 'static,
    ) -> Result<()> {
        let (cp, machine) = (cp.to_string(), machine.to_string());
        self.call(what, move |s| {
            s.update_machine(&cp, &machine, what, &change)
        })
        .await
    }

    pub async fn delete_machine(&self, cp: &str, machine: &str) -> Result<()> {
        let (cp, machine) = (cp.to_string(), machine.to_string());
        self.call("delete a machine record", move |s| {
            s.delete_machine(&cp, &machine)
        })
        .await
    }

    pub async fn set_rebuild(&self, cp: &str, rebuild: Option<quorum_core::Rebuild>) -> Result<()> {
        let cp = cp.to_string();
        self.call("record a rebuild's phase", move |s| {
            s.set_rebuild(&cp, rebuild.as_ref())
        })
        .await
    }

    /// `Store::take_next_link`.
    pub async fn take_next_link(
        &self,
        cp: &str,
        from: quorum_core::Version,
        to: quorum_core::Version,
        now_unix_s: i64,
    ) -> Result<bool> {
        let cp = cp.to_string();
        self.call("record a chained upgrade's next link", move |s| {
            s.take_next_link(&cp, from, to, now_unix_s)
        })
        .await
    }

    pub async fn set_ca_rotation(&self, cp: &str, rotation: CaRotation) -> Result<bool> {
        let cp = cp.to_string();
        self.call("record a CA rotation's step", move |s| {
            s.set_ca_rotation(&cp, &rotation)
        })
        .await
    }

    /// `Store::finish_ca_rotation` (the next CA, sealed, becomes the control plane's).
    pub async fn finish_ca_rotation(&self, cp: &str, generation: u32) -> Result<bool> {
        let cp = cp.to_string();
        self.call("finish a CA rotation", move |s| {
            s.finish_ca_rotation(&cp, generation)
        })
        .await
    }

    pub async fn forget_control_plane(&self, cp: &str) -> Result<()> {
        let cp = cp.to_string();
        self.call("forget a control plane", move |s| {
            s.forget_control_plane(&cp)
        })
        .await
    }

    pub async fn record_event(&self, cp: &str, at_ms: i64, e: &NewEvent<'_>) -> Result<i64> {
        let (cp, e) = (cp.to_string(), OwnedEvent::of(e));
        self.call("record an event", move |s| {
            s.record_event(&cp, at_ms, &e.new_event())
        })
        .await
    }

    pub async fn publish_status(&self, cp: &str, status: PublishedStatus) -> Result<()> {
        let cp = cp.to_string();
        self.call("publish a status", move |s| s.publish_status(&cp, &status))
            .await
    }

    pub async fn snapshots(&self, cp: &str) -> Result<Vec<SnapshotRecord>> {
        let cp = cp.to_string();
        self.call("list the snapshots", move |s| s.snapshots(&cp))
            .await
    }

    pub async fn snapshotted_control_planes(&self) -> Result<Vec<String>> {
        self.call("list the snapshotted control planes", |s| {
            s.snapshotted_control_planes()
        })
        .await
    }

    pub async fn record_snapshot(&self, rec: SnapshotRecord) -> Result<()> {
        self.call("record a snapshot", move |s| s.record_snapshot(&rec))
            .await
    }

    pub async fn record_verification(&self, cp: &str, id: &str, v: Verification) -> Result<()> {
        let (cp, id) = (cp.to_string(), id.to_string());
        self.call("record a snapshot's verification", move |s| {
            s.record_verification(&cp, &id, &v)
        })
        .await
    }

    pub async fn delete_snapshot(&self, cp: &str, id: &str) -> Result<()> {
        let (cp, id) = (cp.to_string(), id.to_string());
        self.call("delete a snapshot record", move |s| {
            s.delete_snapshot(&cp, &id)
        })
        .await
    }

    pub async fn campaign(&self, identity: &str, ttl_ms: u64) -> Result<Campaign> {
        let identity = identity.to_string();
        self.call("campaign for the leadership", move |s| {
            s.campaign(&identity, ttl_ms)
        })
        .await
    }

    pub async fn ensure_leading(&self, margin_ms: Option<u64>) -> Result<()> {
        self.call("check the leadership", move |s| s.ensure_leading(margin_ms))
            .await
    }

    /// The lease's time left by this replica's clock, and whether the store said it is
    /// gone (`StateStore::lease_left_ms`, `lease_lost`), read together.
    pub async fn lease(&self) -> Result<(Option<i64>, bool)> {
        self.call("read the lease", |s| {
            Ok((s.lease_left_ms(), s.lease_lost()))
        })
        .await
    }

    pub async fn release_lease_keeping_token(&self) -> Result<()> {
        self.call("release the lease", |s| s.release_lease_keeping_token())
            .await
    }

    pub async fn step_down(&self) -> Result<()> {
        self.call("step down", |s| {
            s.step_down();
            Ok(())
        })
        .await
    }

    /// `StateStore::endpoint_health`: empty when the call cannot be made (as for the
    /// embedded store, which has no endpoints).
    pub async fn endpoint_health(&self, probe: bool) -> Vec<EndpointHealth> {
        self.call("read the store's endpoints", move |s| {
            Ok::<_, crate::StoreError>(s.endpoint_health(probe))
        })
        .await
        .unwrap_or_default()
    }

    pub async fn controller_heartbeat(&self, beat: crate::Heartbeat) -> Result<()> {
        self.call("write a heartbeat", move |s| s.controller_heartbeat(&beat))
            .await
    }

    pub async fn last_controller_heartbeat(&self) -> Result<Option<crate::Heartbeat>> {
        self.call("read the last heartbeat", |s| s.last_controller_heartbeat())
            .await
    }

    pub async fn heartbeat_writer(&self) -> Result<Box<dyn HeartbeatWriter>> {
        self.call("open a heartbeat writer", |s| s.heartbeat_writer())
            .await
    }

    pub async fn controller_stopped(&self, identity: &str) -> Result<()> {
        let identity = identity.to_string();
        self.call("withdraw the heartbeat", move |s| {
            s.controller_stopped(&identity)
        })
        .await
    }
}
