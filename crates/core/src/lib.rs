//! quorum-core: the domain and the pure decision function.
//!
//! Architecture invariant: this crate performs no I/O and reads no clock. It knows
//! nothing of etcd-client, SQLite, processes or tokio; everything it needs arrives as
//! data (`ControlPlane`, `Machine` records, an `Observation`) and everything it wants
//! done leaves as data (`Decision`).

pub mod abort;
mod action;
pub mod backup;
pub mod carotation;
pub mod chain;
pub mod classify;
mod conditions;
pub mod decide;
mod decision;
pub mod downgrade;
pub mod failover;
pub mod fenced;
pub mod health;
pub mod inplace;
mod inplace_record;
pub mod lease;
pub mod model;
pub mod pacing;
pub mod pass;
pub mod placement;
pub mod publish;
pub mod reach;
mod rebuild;
pub mod record;
mod repair;
pub mod road;
pub mod s3access;
pub mod shards;
pub mod span;
mod step;
pub mod survivor;
pub mod upkeep;
pub mod validate;
pub mod version;

pub use backup::{
    BackupSpec, Recreate, RetentionSpec, SnapshotFacts, SnapshotReason, SnapshotRecord,
    SnapshotSeen, Verification,
};
pub use carotation::{first_distrust, CaGenerations};
pub use classify::{classify, ClientErrorKind, EtcdAnswer, EtcdCall, GrpcCode, Refusal, Verdict};
pub use decide::{
    decide, Action, ActionKind, ClusterState, Condition, ConditionKind, Decision, DeleteReason,
    InPlaceOutcome, InitialMember, MachineHealth, Operation, Role,
};
pub use decision::{FleetState, Health};
pub use model::*;
pub use span::{parse_duration, Span, SpanError};
pub use validate::{validate_name, validate_spec, validate_spec_change, SpecError};
pub use version::{
    check_version_change, ResolveError, Version, VersionChangeError, VersionRequest,
};
