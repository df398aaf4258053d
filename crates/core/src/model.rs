//! The domain: what the user wants (spec), what quorum has promised itself (machine
//! records, the durable intent) and what it saw (observation).

pub use crate::inplace_record::{InPlace, InPlacePhase};
pub use crate::placement::ProviderKind;
use crate::span::Span;
use crate::version::Version;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;

/// The standard etcd ports. Every local machine has its own loopback address, so every
/// machine uses the same ports, as separate hosts would.
pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;

/// Largest control plane quorum manages. etcd recommends at most 7 voting members.
pub const MAX_REPLICAS: u32 = 7;

/// How outdated machines are brought up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutStrategy {
    /// Replace machines (the default) or restart them in place on the new binary.
    #[serde(default, skip_serializing_if = "Strategy::is_replace")]
    pub strategy: Strategy,
    /// How many machines above `replicas` may exist during a rollout: 1 (add the new
    /// member before removing the old, the default) or 0 (remove first; needs 3+ replicas).
    #[serde(default = "default_max_surge")]
    pub max_surge: u32,
    /// The in-place step's limits (`strategy: InPlace`).
    #[serde(default, skip_serializing_if = "InPlaceSpec::is_default")]
    pub in_place: InPlaceSpec,
    /// Replace machines before something happens to them.
    #[serde(default, skip_serializing_if = "RolloutBefore::is_empty")]
    pub before: RolloutBefore,
}

/// Conditions that make a machine due for replacement ahead of time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutBefore {
    /// Replace a machine whose certificates expire within this span. Default: a fifth of
    /// `certificates.lifetime` (73 days for the default 365).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_expiry: Option<Span>,
}

impl RolloutBefore {
    fn is_empty(&self) -> bool {
        self.certificates_expiry.is_none()
    }
}

fn default_max_surge() -> u32 {
    1
}

impl Default for RolloutStrategy {
    fn default() -> Self {
        RolloutStrategy {
            strategy: Strategy::Replace,
            max_surge: default_max_surge(),
            in_place: InPlaceSpec::default(),
            before: RolloutBefore::default(),
        }
    }
}

/// How a machine that runs another version (or whose certificates expire soon) is
/// brought up to date.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String")]
pub enum Strategy {
    /// A new machine joins and the old one leaves: right where machines are immutable
    /// (new hosts, new images). Each replacement copies the whole database and waits
    /// out etcd's 5 s check on a new voter.
    #[default]
    Replace,
    /// The same machine, data and identity, restarted on the new binary one member at a
    /// time (etcd's own upgrade procedure): no membership change, no copy. Needs 3 or
    /// more voters, since the restarting member is down meanwhile.
    InPlace,
}

impl Strategy {
    fn is_replace(&self) -> bool {
        *self == Strategy::Replace
    }

    /// The name users write (`--strategy`, manifests): `Replace`, `InPlace`.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Replace => "Replace",
            Strategy::InPlace => "InPlace",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A manifest reads a strategy as `--strategy` does (`inplace`, `in-place`, any case).
impl TryFrom<String> for Strategy {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    /// `Replace` or `InPlace`, also as `replace`, `in-place`, `inplace` (any case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "replace" => Ok(Strategy::Replace),
            "inplace" => Ok(Strategy::InPlace),
            _ => Err(format!(
                "{s:?} is not a rollout strategy: use Replace (new machines join, old ones leave) or InPlace (each member restarted on the new binary, same data)"
            )),
        }
    }
}

/// The in-place step's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InPlaceSpec {
    /// How long a member restarted on the new binary may take to report that version,
    /// be healthy and catch up; past it, the previous binary is put back (while the
    /// cluster version allows) and the rollout stops.
    #[serde(default = "default_in_place_timeout")]
    pub timeout: Span,
}

pub const DEFAULT_IN_PLACE_TIMEOUT: Span = Span::from_secs(60);
/// The least `inPlace.timeout`: a member needs a few seconds to start and catch up.
pub const MIN_IN_PLACE_TIMEOUT: Span = Span::from_secs(5);

fn default_in_place_timeout() -> Span {
    DEFAULT_IN_PLACE_TIMEOUT
}

impl Default for InPlaceSpec {
    fn default() -> Self {
        InPlaceSpec {
            timeout: DEFAULT_IN_PLACE_TIMEOUT,
        }
    }
}

impl InPlaceSpec {
    fn is_default(&self) -> bool {
        *self == InPlaceSpec::default()
    }
}

/// What the user wants a control plane to be.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlPlaneSpec {
    pub replicas: u32,
    pub version: Version,
    #[serde(default)]
    pub rollout: RolloutStrategy,
    #[serde(default)]
    pub paused: bool,
    /// `quorum delete` is refused while it is on (turn it off with `quorum protect
    /// NAME --off` or a manifest): a control plane that must not go by a slip.
    #[serde(default, skip_serializing_if = "is_false")]
    pub deletion_protection: bool,
    /// An HAProxy whose backend quorum keeps in step with the client endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub haproxy: Option<HaproxySpec>,
    /// The machines' certificates (mutual TLS on the client and peer ports).
    #[serde(default)]
    pub certificates: CertificatesSpec,
    /// Plain HTTP on the client and peer ports instead of mutual TLS: anyone who can
    /// reach an address reads and writes everything. Chosen once, at creation.
    #[serde(default, skip_serializing_if = "is_false")]
    pub insecure_plaintext: bool,
    /// How quorum repairs a member that fails on its own.
    #[serde(default, skip_serializing_if = "RemediationSpec::is_default")]
    pub remediation: RemediationSpec,
    /// Space upkeep: when quorum defragments on its own.
    #[serde(default, skip_serializing_if = "MaintenanceSpec::is_default")]
    pub maintenance: MaintenanceSpec,
    /// Scheduled snapshots and how many are kept.
    #[serde(default, skip_serializing_if = "crate::BackupSpec::is_default")]
    pub backup: crate::BackupSpec,
    /// What is kept after a rebuild (fenced directories), and for how long.
    #[serde(
        default,
        skip_serializing_if = "crate::fenced::RecoverySpec::is_default"
    )]
    pub recovery: crate::fenced::RecoverySpec,
    /// Where the members run: `local` (processes on the controller's host, the
    /// default) or `hosts` (on hosts registered with `quorum host add`, through their
    /// agents, each member on its own host or failure domain). Chosen at creation.
    #[serde(default, skip_serializing_if = "ProviderKind::is_local")]
    pub provider: ProviderKind,
}

/// How quorum repairs failed members: by replacement, one at a time, within limits
/// (Cluster API's KubeadmControlPlane rules are the floor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemediationSpec {
    /// How long a problem must hold before the member counts as unhealthy and is
    /// replaced: a blip never replaces anything, a dead host is handled in bounded time.
    #[serde(default = "default_unhealthy_after")]
    pub unhealthy_after: Span,
    /// How many times in a row a machine slot may be remediated (a replacement that
    /// fails within `minHealthyPeriod` is a retry of the same slot). 0: once, no retry.
    #[serde(default = "default_max_retry")]
    pub max_retry: u32,
    /// The least time between two remediations of the same slot.
    #[serde(default = "default_retry_period")]
    pub retry_period: Span,
    /// A failure after a replacement was healthy this long counts as new (its retry
    /// count starts again).
    #[serde(default = "default_min_healthy_period")]
    pub min_healthy_period: Span,
}

pub const DEFAULT_UNHEALTHY_AFTER: Span = Span::from_secs(30);
pub const DEFAULT_MAX_RETRY: u32 = 3;
pub const DEFAULT_RETRY_PERIOD: Span = Span::from_secs(60);
pub const DEFAULT_MIN_HEALTHY_PERIOD: Span = Span::from_secs(3_600);

fn default_unhealthy_after() -> Span {
    DEFAULT_UNHEALTHY_AFTER
}
fn default_max_retry() -> u32 {
    DEFAULT_MAX_RETRY
}
fn default_retry_period() -> Span {
    DEFAULT_RETRY_PERIOD
}
fn default_min_healthy_period() -> Span {
    DEFAULT_MIN_HEALTHY_PERIOD
}

impl Default for RemediationSpec {
    fn default() -> Self {
        RemediationSpec {
            unhealthy_after: DEFAULT_UNHEALTHY_AFTER,
            max_retry: DEFAULT_MAX_RETRY,
            retry_period: DEFAULT_RETRY_PERIOD,
            min_healthy_period: DEFAULT_MIN_HEALTHY_PERIOD,
        }
    }
}

impl RemediationSpec {
    fn is_default(&self) -> bool {
        *self == RemediationSpec::default()
    }
}

/// Space upkeep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintenanceSpec {
    /// Defragment a member (one at a time) once this percentage of its database file is
    /// free (`dbSize − dbSizeInUse`, after compaction). 0 turns automatic
    /// defragmentation off; a NOSPACE alarm is always repaired.
    #[serde(default = "default_defrag_percent")]
    pub defrag_when_fragmented_above: Percent,
    /// etcd's `--quota-backend-bytes`: the database size at which a member raises
    /// NOSPACE and refuses writes. `None`: etcd's default (2 GiB). Applies to each
    /// member from its next start (a rollout or a replacement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_backend_bytes: Option<u64>,
}

pub const DEFAULT_DEFRAG_PERCENT: Percent = Percent(50);

fn default_defrag_percent() -> Percent {
    DEFAULT_DEFRAG_PERCENT
}

impl Default for MaintenanceSpec {
    fn default() -> Self {
        MaintenanceSpec {
            defrag_when_fragmented_above: DEFAULT_DEFRAG_PERCENT,
            quota_backend_bytes: None,
        }
    }
}

impl MaintenanceSpec {
    fn is_default(&self) -> bool {
        *self == MaintenanceSpec::default()
    }
}

/// A whole percentage, 0 to 100, written `50%` (or a bare `50`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Percent(pub u8);

impl std::fmt::Display for Percent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}%", self.0)
    }
}

impl std::str::FromStr for Percent {
    type Err = String;
    fn from_str(s: &str) -> Result<Percent, String> {
        let digits = s.strip_suffix('%').unwrap_or(s).trim_end();
        match digits.parse::<u8>() {
            Ok(n) if n <= 100 => Ok(Percent(n)),
            _ => Err(format!(
                "{s:?} is not a percentage: write a whole number from 0 to 100, for example 50%"
            )),
        }
    }
}

impl Serialize for Percent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Percent, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => u8::try_from(n)
                .ok()
                .filter(|n| *n <= 100)
                .map(Percent)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!("{n} is not a percentage from 0 to 100"))
                }),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl ControlPlaneSpec {
    /// `replicas` members at `version`, everything else as `create` sets it by default
    /// (mutual TLS, maxSurge 1, no load balancer, the default schedules).
    pub fn new(replicas: u32, version: Version) -> ControlPlaneSpec {
        ControlPlaneSpec {
            recovery: Default::default(),
            deletion_protection: false,
            replicas,
            version,
            rollout: Default::default(),
            paused: false,
            haproxy: None,
            certificates: Default::default(),
            insecure_plaintext: false,
            remediation: Default::default(),
            maintenance: Default::default(),
            backup: Default::default(),
            provider: ProviderKind::Local,
        }
    }

    /// Whether the members speak mutual TLS (the default).
    pub fn tls(&self) -> bool {
        !self.insecure_plaintext
    }

    /// How long before its certificates expire a machine is replaced.
    pub fn certificates_renew_before(&self) -> Span {
        self.rollout
            .before
            .certificates_expiry
            .unwrap_or(Span::from_secs(self.certificates.lifetime.as_secs() / 5))
    }

    /// Whether a machine's certificates expire within the renewal window at `now_unix_s`.
    /// A machine without certificates (plaintext) never expires.
    pub fn certificates_due(&self, machine: &Machine, now_unix_s: i64) -> bool {
        let Some(not_after) = machine.certificates_not_after_unix_s else {
            return false;
        };
        // Both terms are bounded (a span is at most 100 years), so no overflow.
        let renew_s = i64::try_from(self.certificates_renew_before().as_secs()).unwrap_or(i64::MAX);
        not_after.saturating_sub(renew_s) <= now_unix_s
    }
}

/// Certificates quorum issues to machines from the control plane's own CA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertificatesSpec {
    /// How long a machine's certificates are valid from the moment it is created.
    #[serde(default = "default_certificate_lifetime")]
    pub lifetime: Span,
}

pub const DEFAULT_CERTIFICATE_LIFETIME: Span = Span::days(365);

fn default_certificate_lifetime() -> Span {
    DEFAULT_CERTIFICATE_LIFETIME
}

impl CertificatesSpec {
    /// When the certificates of a machine created, or restarted in place, at
    /// `now_unix_s` end: a whole lifetime on, never past the end of the CA that signs
    /// them (`ca_not_after_unix_s`). Fixed then for every certificate the machine gets
    /// until its next restart: the core compares it with the renewal window.
    pub fn not_after_unix_s(&self, now_unix_s: i64, ca_not_after_unix_s: i64) -> i64 {
        let lifetime_s = i64::try_from(self.lifetime.as_secs()).unwrap_or(i64::MAX);
        now_unix_s
            .saturating_add(lifetime_s)
            .min(ca_not_after_unix_s)
    }
}

impl Default for CertificatesSpec {
    fn default() -> Self {
        CertificatesSpec {
            lifetime: DEFAULT_CERTIFICATE_LIFETIME,
        }
    }
}

/// The HAProxy in front of a control plane's members, driven through its runtime API:
/// a member enters the backend only once its `/health` passes and leaves it (maintenance,
/// sessions shut) before its etcd member is removed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HaproxySpec {
    /// The runtime API: the unix socket of a `stats socket ... level admin` line.
    pub runtime_api: String,
    /// The backend that holds the members.
    #[serde(default = "default_haproxy_backend")]
    pub backend: String,
}

pub const DEFAULT_HAPROXY_BACKEND: &str = "etcd";

fn default_haproxy_backend() -> String {
    DEFAULT_HAPROXY_BACKEND.to_string()
}

/// A control plane as stored: the spec plus the teardown intent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ControlPlane {
    pub name: String,
    pub spec: ControlPlaneSpec,
    /// Intent: the user asked to delete it; every machine is stopped and deleted.
    #[serde(default)]
    pub deleting: bool,
    /// Intent: a person confirmed a restore or a recovery (`quorum restore`, `quorum
    /// recover`); the cluster is rebuilt from one source before anything else happens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<Rebuild>,
    /// The generation of the CA the store holds as this control plane's (0: the one it
    /// was created with; each finished rotation adds one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ca_generation: u32,
    /// Intent: a CA rotation under way (`quorum rotate-ca`), with its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_rotation: Option<CaRotation>,
    /// The spec's version, moved on by every spec write; a command's change is a
    /// compare-and-swap on it (`metadata.resourceVersion` in manifests).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spec_version: u64,
    /// The addresses its clients are given, in order (`reach`): a new local machine
    /// takes the first one no machine holds. Written only when a machine is recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_addresses: Vec<std::net::SocketAddrV4>,
    /// Intent: a chained upgrade's links still to go after the spec's version
    /// (`chain`); `None` when the spec's version is where the person asked to go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub road: Option<crate::chain::Road>,
    /// Created by a quorum that closes etcd's v2 API on every member from the start
    /// (`--enable-v2=false`), so its v2 store holds no client's content: etcd 3.6
    /// starts on it (`chain::V2Store`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub v2_api_never_open: bool,
}

/// A rotation of a control plane's CA from generation `from` (the CA in force) to `to`
/// (a new CA, stored beside it). Each phase is a restart of every member with the
/// phase's files, one member at a time through the rollout strategy; the phase moves
/// on once every member serves with them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaRotation {
    pub from: u32,
    pub to: u32,
    pub phase: CaPhase,
    /// When this phase was recorded (Unix seconds).
    pub since_unix_s: i64,
    /// When the rotation began (Unix seconds).
    pub started_unix_s: i64,
}

impl CaRotation {
    /// What every machine's files must be made for in this phase.
    pub fn wanted(&self) -> CaStep {
        CaStep {
            generation: self.to,
            phase: self.phase,
        }
    }
}

/// The phases of a CA rotation, in order. What a member started in each is given
/// (trusted CAs; the CA its certificates come from):
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaPhase {
    /// Trusts both CAs; certificates from the old one.
    Trust,
    /// Trusts both CAs; its peer certificate from the new one. Its server certificate
    /// (what clients verify) stays the old CA's: a client that trusts only the old CA
    /// keeps working until the last phase. (Serving a new-CA certificate with a copy of
    /// the new CA signed by the old one does not do: the old CA was made with a path
    /// length of 0, and Go's verifier, etcdctl's and every Go client's, refuses it.)
    Reissue,
    /// Trusts only the new CA; both certificates from the new one. A client certificate
    /// from the old CA is refused by a member from its restart in this phase on.
    Drop,
}

impl CaPhase {
    /// The phase after this one; `None` after the last (the rotation is finished).
    pub fn next(self) -> Option<CaPhase> {
        match self {
            CaPhase::Trust => Some(CaPhase::Reissue),
            CaPhase::Reissue => Some(CaPhase::Drop),
            CaPhase::Drop => None,
        }
    }

    /// Its place, 1 to 3 (`status` says "phase 2 of 3").
    pub fn number(self) -> u8 {
        match self {
            CaPhase::Trust => 1,
            CaPhase::Reissue => 2,
            CaPhase::Drop => 3,
        }
    }

    /// Whether a member in this phase trusts the old CA.
    pub fn trusts_old(self) -> bool {
        self != CaPhase::Drop
    }

    /// Whether a member in this phase has its peer certificate from the new CA (and
    /// quorum its own client certificate).
    pub fn peer_by_new(self) -> bool {
        self != CaPhase::Trust
    }

    /// Whether a member in this phase serves clients a certificate from the new CA.
    pub fn server_by_new(self) -> bool {
        self == CaPhase::Drop
    }
}

impl fmt::Display for CaPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CaPhase::Trust => "trust both CAs",
            CaPhase::Reissue => "certificates from the new CA",
            CaPhase::Drop => "drop the old CA",
        })
    }
}

/// The CA files a machine's next start uses: made for phase `phase` of the rotation to
/// generation `generation`. Once that rotation is finished, the files of its last
/// phase are the plain files of the CA in force (generation `generation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaStep {
    pub generation: u32,
    pub phase: CaPhase,
}

/// Which CA a machine's files come from, as the controller issues them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaFiles {
    /// It trusts the CA in force (the rotation's old one).
    pub trusts_current: bool,
    /// It trusts the rotation's new CA.
    pub trusts_next: bool,
    /// Its peer certificate comes from the new CA (else from the CA in force).
    pub peer_by_next: bool,
    /// Its server certificate comes from the new CA (else from the CA in force).
    pub server_by_next: bool,
}

impl ControlPlane {
    /// The CA files for a machine whose record says `step`: the phase's while a rotation
    /// to that generation is under way, else those of the CA in force alone (a machine
    /// recorded for an earlier or a finished rotation, or for none).
    pub fn ca_files(&self, step: Option<CaStep>) -> CaFiles {
        let plain = CaFiles {
            trusts_current: true,
            trusts_next: false,
            peer_by_next: false,
            server_by_next: false,
        };
        match (&self.ca_rotation, step) {
            (Some(r), Some(s)) if s.generation == r.to => CaFiles {
                trusts_current: s.phase.trusts_old(),
                trusts_next: true,
                peer_by_next: s.phase.peer_by_new(),
                server_by_next: s.phase.server_by_new(),
            },
            _ => plain,
        }
    }

    /// The CA step a machine recorded now is made for: the rotation's phase, if one is
    /// under way (a new machine, or a restart recorded in place, starts with its files).
    pub fn ca_step_now(&self) -> Option<CaStep> {
        self.ca_rotation.as_ref().map(CaRotation::wanted)
    }

    /// The CA quorum's own client certificate comes from: the new one from phase
    /// `Reissue` on (every member trusts it by then), else the one in force.
    pub fn controller_uses_next_ca(&self) -> bool {
        self.ca_rotation
            .as_ref()
            .is_some_and(|r| r.phase.peer_by_new())
    }
}

/// A rebuild of the cluster from one source, confirmed by a person. The old members
/// are fenced first (stopped, their data moved out of reach, their records forgotten),
/// then one member is seeded from the source and serves alone; the rest joins through
/// learners, the normal path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rebuild {
    pub from: RebuildSource,
    /// `--initial-cluster-token` of a cluster restored from a snapshot: fresh, so that
    /// its cluster ID (a hash of the peer URLs and the token) is never the old one's.
    pub token: String,
    pub phase: RebuildPhase,
    /// When the person confirmed it (Unix seconds).
    pub requested_at_unix_s: i64,
}

/// What a rebuild starts from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RebuildSource {
    /// A surviving member, restarted with `--force-new-cluster`: it keeps its cluster
    /// and member IDs and everything it had applied, and forgets the other members.
    Member { machine: String },
    /// A recorded snapshot, restored with etcd's tool into a new machine (a new cluster,
    /// at the snapshot's revision).
    Snapshot { id: String, revision: i64 },
}

impl fmt::Display for RebuildSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RebuildSource::Member { machine } => write!(f, "member {machine}"),
            RebuildSource::Snapshot { id, revision } => {
                write!(f, "snapshot {id} (revision {revision})")
            }
        }
    }
}

/// Where a rebuild is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RebuildPhase {
    /// Every old machine but the survivor is fenced; the survivor is stopped.
    Fencing,
    /// The seed is made (a snapshot restored into a new machine) and started (the
    /// survivor with `--force-new-cluster`), until it serves alone.
    Seeding,
}

impl fmt::Display for RebuildPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RebuildPhase::Fencing => "fencing the old members",
            RebuildPhase::Seeding => "seeding the new cluster",
        })
    }
}

/// A machine record: durable intent, written before the side effect it announces.
/// A record exists before its member is added; `deleting` is set before its member is
/// removed. Members are matched to machines by peer URL.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Machine {
    pub name: String,
    /// Creation order within the control plane; lower is older.
    pub serial: u64,
    pub address: Ipv4Addr,
    pub version: Version,
    /// Part of the initial cluster (started with `--initial-cluster-state new`).
    pub bootstrap: bool,
    /// Intent: this machine is leaving. Its member is removed, then it is stopped and deleted.
    #[serde(default)]
    pub deleting: bool,
    /// Its etcd speaks mutual TLS on both ports (`https://` URLs).
    #[serde(default)]
    pub tls: bool,
    /// When its certificates expire (fixed when the machine is allocated; every
    /// certificate issued to it ends then). `None` without TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_not_after_unix_s: Option<i64>,
    /// This machine replaces one that was remediated (or, on a machine marked
    /// deleting, this machine is being remediated): the slot's retry count travels with
    /// its replacement, so `maxRetry` holds across machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<Remediation>,
    /// Intent: an in-place step under way on this machine (or, in phase `RolledBack`,
    /// the memory of one that failed, which stops the rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place: Option<InPlace>,
    /// The CA files its next start uses (recorded at allocation, and with the restart
    /// of an in-place step, before the start that uses them). `None`: the CA in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_step: Option<CaStep>,
    /// The host it runs on, with its ports (the `hosts` provider); `None`: a local
    /// machine on its own loopback address and etcd's ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// Intent: a person asked for this machine to be replaced or restarted in place
    /// (`quorum member replace|restart`). A replacement stays asked for until the
    /// machine is gone; a restart is handed to its in-place step when that begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<MachineRequest>,
}

/// What a person asked of one machine (`quorum member`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MachineRequest {
    /// Replaced by a new machine, as a rollout by replacement would.
    Replace,
    /// Restarted in place on its binary and data, as an in-place step would.
    Restart,
}

impl fmt::Display for MachineRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MachineRequest::Replace => "replace",
            MachineRequest::Restart => "restart",
        })
    }
}

/// Where a machine of the `hosts` provider runs: the host (its `address` is the
/// machine's) and the ports its etcd listens on there (hosts carry members of several
/// control planes, each on its own pair).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub host: String,
    pub client_port: u16,
    pub peer_port: u16,
}

/// One remediation of a machine slot.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remediation {
    /// The machine that was (or is being) replaced.
    pub machine: String,
    /// Remediations of this slot in a row, this one included (1 for a first failure).
    pub attempt: u32,
    /// When the remediation was decided (Unix seconds).
    pub at_unix_s: i64,
    /// Why, in words ("unreachable for 31s").
    pub reason: String,
}

impl Machine {
    /// Whether it is out of the endpoints for an in-place step (draining, restarting,
    /// rolling back).
    pub fn in_place_out_of_service(&self) -> bool {
        self.in_place
            .as_ref()
            .is_some_and(|ip| ip.phase.out_of_service())
    }

    /// The host it runs on (`hosts` provider).
    pub fn host(&self) -> Option<&str> {
        self.placement.as_ref().map(|p| p.host.as_str())
    }
}

/// A member as the leader's member list reports it. A member that was added but has
/// not started yet has an empty name and no client URLs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

/// What one member's own endpoint said about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointStatus {
    pub member_id: u64,
    /// 0 when the member knows no leader.
    pub leader_id: u64,
    pub raft_term: u64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    /// The server's own version (not the cluster version).
    pub version: Option<Version>,
    pub is_learner: bool,
    /// Active alarms on this member (for example `NOSPACE`, `CORRUPT`).
    pub alarms: Vec<String>,
    /// The cluster this member belongs to (from the answer's header).
    #[serde(default)]
    pub cluster_id: u64,
    /// The store revision the member has applied (from the answer's header).
    #[serde(default)]
    pub revision: i64,
    /// The size of its database file, and the part of it in use; the rest is free
    /// space only a defragmentation returns.
    #[serde(default)]
    pub db_size_bytes: u64,
    #[serde(default)]
    pub db_size_in_use_bytes: u64,
}

/// What a data directory's identity marker says it holds, written by quorum once the
/// member first answered as itself: checked before every start, so a directory that
/// belongs to another member or cluster is never started as this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataMarker {
    pub cluster_id: u64,
    pub member_id: u64,
}

/// The machine's process, as the machine provider sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    Running,
    Stopped,
}

/// What was seen of one machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineObservation {
    pub process: ProcessState,
    /// The data directory holds member data: the machine was started at least once.
    pub has_data: bool,
    /// `None` when the endpoint did not answer within its timeout.
    pub status: Option<EndpointStatus>,
    /// The identity marker of its data directory; `None` when there is none (no data,
    /// or data from before markers existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<DataMarker>,
    /// Whether a linearizable read through its own endpoint answered in time; `None`
    /// when not tried (its status did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_read: Option<bool>,
    /// When its process was started (Unix seconds), oldest first: the last
    /// `health::STARTS_KEPT` at most. A crash loop is counted from these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starts_unix_s: Vec<i64>,
    /// Those of `starts_unix_s` that followed a stop quorum asked for (an in-place
    /// step, a CA rotation's restart): planned, so never counted toward a crash loop or
    /// a restart backoff (`crash_starts`); an in-place step still sees its own start
    /// among `starts_unix_s`. Empty where the provider cannot tell (hosts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planned_starts_unix_s: Vec<i64>,
    /// The etcd version of the binary its running process was started from (the
    /// provider's record; `None` when stopped or unknown). The in-place step tells a
    /// member still on the new binary from one already back on the old one by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_version: Option<Version>,
}

impl MachineObservation {
    /// The starts that were not planned (`planned_starts_unix_s` left out): what a
    /// crash loop and a restart backoff count. A planned start is taken off once per
    /// time it appears there.
    pub fn crash_starts(&self) -> Vec<i64> {
        crate::health::crash_starts(&self.starts_unix_s, &self.planned_starts_unix_s)
    }
}

/// A fresh observation of one control plane.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The member list as the leader reports it; `None` when no leader could be asked
    /// (no quorum, nothing started yet, or nothing reachable).
    pub members: Option<Vec<Member>>,
    /// The cluster version the leader reports, when known.
    pub cluster_version: Option<Version>,
    /// By machine name. A machine missing here was not observed: it counts as stopped,
    /// without data and unreachable.
    pub machines: BTreeMap<String, MachineObservation>,
    /// When the observation was taken (Unix seconds): the core reads no clock, so time
    /// (for certificate expiry) arrives with the observation.
    #[serde(default)]
    pub now_unix_s: i64,
    /// Since when (Unix seconds) each machine has had a problem without a break, as
    /// `health::Tracker` remembers it across observations. A machine missing here has
    /// no lasting problem; with this empty, nothing counts as unhealthy long enough to
    /// remediate (a reader that is not the controller never remediates).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub problem_since_unix_s: BTreeMap<String, i64>,
    /// Whether the keyspace is compacted up to the current revision (probed only while
    /// a NOSPACE alarm is active; `None` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted: Option<bool>,
    /// The machines defragmented since the current NOSPACE alarm was first seen, as
    /// `health::Tracker` remembers. Under the alarm the sizes cannot say it: etcd
    /// updates a member's in-use size only at its next commit, and none comes.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub defragmented: BTreeSet<String>,
    /// Every active alarm of the cluster as (member id, name), from the leader's alarm
    /// list: it includes the alarm of a member that does not answer, and of one that was
    /// removed (etcd keeps it, and it still refuses writes), which no status reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<(u64, String)>,
    /// How often a NOSPACE alarm appeared within `health::NOSPACE_WINDOW_S`, as the
    /// tracker remembers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nospace_recurrences: u32,
    /// The control plane's recorded snapshots, for `spec.backup`'s schedule and
    /// retention.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<crate::SnapshotSeen>,
    /// When the control plane was created (Unix seconds): the schedule counts from it
    /// until the first snapshot. `None` (a reader that does not know): no scheduled
    /// snapshot and no pruning is decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_unix_s: Option<i64>,
    /// The control plane's fenced directories (`fenced`), for `spec.recovery`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fenced: Vec<crate::fenced::FencedSeen>,
    /// The hosts registered, as placement sees them (`None`: not the `hosts`
    /// provider). A new machine is decided only where one of them can take it
    /// (`placement::room_for`); whether a host's agent answers is known for hosts that
    /// run a member of this control plane, and found out at placement for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<crate::placement::HostView>>,
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// The leader as the members see it: the leader id reported with the highest term (a
/// stale view after a partition has a lower term). The leader may be a member that
/// answers no status itself (an orphan).
pub fn leader_of<'a>(statuses: impl IntoIterator<Item = &'a EndpointStatus>) -> Option<u64> {
    statuses
        .into_iter()
        .filter(|s| s.leader_id != 0)
        .max_by_key(|s| s.raft_term)
        .map(|s| s.leader_id)
}

impl Observation {
    /// The leader as the observed members see it.
    pub fn leader_id(&self) -> Option<u64> {
        leader_of(self.machines.values().filter_map(|o| o.status.as_ref()))
    }
}

/// `floor(n/2) + 1`: the number of voters that must agree.
pub const fn quorum_size(voters: usize) -> usize {
    voters / 2 + 1
}
