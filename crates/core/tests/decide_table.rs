//! The decision table: situations and the decision quorum must take in each.
//!
//! Each case builds a control plane, its machine records and an observation with a
//! small fixture language, then states the expected decision:
//! - `"kind:machine kind:machine"`: exactly these actions, in order (machine optional);
//! - `"wait: text"`: no action, waiting for something whose description contains text;
//! - `"refuse: text"`: no action, Blocked, the reason contains text;
//! - `"converged"`: nothing to do, every condition good.

use quorum_core::placement::HostView;
use quorum_core::*;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

const OLD: &str = "3.4.23";
const NEW: &str = "3.5.1";
const CLUSTER_ID: u64 = 0xc1;

#[derive(Clone, Copy, PartialEq)]
enum Mem {
    None,
    Voter,
    Learner,
}

#[derive(Clone)]
struct Fx {
    serial: u64,
    version: &'static str,
    bootstrap: bool,
    deleting: bool,
    member: Mem,
    running: bool,
    has_data: bool,
    reachable: bool,
    alarms: Vec<String>,
    applied: u64,
    /// When its certificates expire (Unix seconds); `None`: a plaintext machine.
    not_after: Option<i64>,
    /// Its member has run (it published its client URLs) even without data now.
    ran: bool,
    /// The data directory's marker: `None` unmarked; by default its own member's.
    marker: Option<DataMarker>,
    quorum_read: Option<bool>,
    /// Process starts, in seconds before the situation's moment.
    starts_ago_s: Vec<i64>,
    /// Of those, the planned ones (after a stop quorum asked for).
    planned_ago_s: Vec<i64>,
    db: (u64, u64),
    remediation: Option<Remediation>,
    in_place: Option<InPlace>,
    /// The version its running process is and reports (`None`: the record's).
    runs: Option<&'static str>,
    /// The CA files its record names (`None`: the CA in force).
    ca_step: Option<CaStep>,
    /// What a person asked of it (`quorum member`).
    requested: Option<MachineRequest>,
}

/// A healthy running voter at `version`.
fn m(serial: u64, version: &'static str) -> Fx {
    Fx {
        serial,
        version,
        bootstrap: serial <= 3,
        deleting: false,
        member: Mem::Voter,
        running: true,
        has_data: true,
        reachable: true,
        alarms: vec![],
        applied: 1000,
        not_after: None,
        ran: true,
        marker: Some(DataMarker {
            cluster_id: CLUSTER_ID,
            member_id: member_id(serial),
        }),
        quorum_read: Some(true),
        starts_ago_s: vec![],
        planned_ago_s: vec![],
        db: (4 << 20, 4 << 20),
        remediation: None,
        in_place: None,
        runs: None,
        ca_step: None,
        requested: None,
    }
}

impl Fx {
    /// `quorum member replace|restart` asked for it.
    fn asked(mut self, r: MachineRequest) -> Self {
        self.requested = Some(r);
        self
    }
    fn deleting(mut self) -> Self {
        self.deleting = true;
        self
    }
    fn learner(mut self) -> Self {
        self.member = Mem::Learner;
        self
    }
    /// No member (so no marker either: one is written only once a member answered).
    fn no_member(mut self) -> Self {
        self.member = Mem::None;
        self.marker = None;
        self
    }
    /// Allocated but never started: no process, no data.
    fn fresh(mut self) -> Self {
        self.running = false;
        self.has_data = false;
        self.reachable = false;
        self.ran = false;
        self.marker = None;
        self
    }
    /// Its host lost the disk: the process is gone and so is the data, but its member
    /// has run (it published its client URLs).
    fn lost_data(mut self) -> Self {
        self.running = false;
        self.reachable = false;
        self.has_data = false;
        self.marker = None;
        self
    }
    /// Data from before markers existed.
    fn unmarked(mut self) -> Self {
        self.marker = None;
        self
    }
    /// Data copied from another cluster's member.
    fn foreign_data(mut self) -> Self {
        self.marker = Some(DataMarker {
            cluster_id: 0xbad,
            member_id: 0x999,
        });
        self
    }
    fn quorum_read_fails(mut self) -> Self {
        self.quorum_read = Some(false);
        self
    }
    /// Started at these many seconds before now.
    fn started_ago(mut self, ago_s: &[i64]) -> Self {
        self.starts_ago_s = ago_s.to_vec();
        self
    }
    /// Of its starts, these were planned (an in-place step's, a CA rotation's).
    fn planned(mut self, ago_s: &[i64]) -> Self {
        self.planned_ago_s = ago_s.to_vec();
        self
    }
    fn db(mut self, size: u64, in_use: u64) -> Self {
        self.db = (size, in_use);
        self
    }
    /// It replaced `machine` (or, marked deleting, is being replaced when `machine` is
    /// itself) `ago_s` seconds ago, as attempt `attempt`.
    fn remediated(mut self, machine: &str, attempt: u32, ago_s: i64) -> Self {
        self.remediation = Some(Remediation {
            machine: machine.into(),
            attempt,
            at_unix_s: NOW_UNIX_S - ago_s,
            reason: "unreachable for 30s".into(),
        });
        self
    }
    /// An in-place step in `phase` from `from` to `to`, recorded `ago_s` seconds ago
    /// (the record's version is the phase's: `to` while restarting, `from` otherwise).
    fn in_place(
        mut self,
        phase: InPlacePhase,
        from: &'static str,
        to: &'static str,
        ago_s: i64,
    ) -> Self {
        self.version = if phase == InPlacePhase::Restarting {
            to
        } else {
            from
        };
        self.in_place = Some(InPlace {
            from: from.parse().unwrap(),
            to: to.parse().unwrap(),
            phase,
            since_unix_s: NOW_UNIX_S - ago_s,
            reason: DeleteReason::Outdated,
            failure: (phase >= InPlacePhase::RollingBack).then(|| "not serving".to_string()),
        });
        self
    }
    /// Its running process is (and reports) `version`, whatever its record says.
    fn runs(mut self, version: &'static str) -> Self {
        self.runs = Some(version);
        self
    }
    fn stopped(mut self) -> Self {
        self.running = false;
        self.reachable = false;
        self
    }
    fn unreachable(mut self) -> Self {
        self.reachable = false;
        self
    }
    fn alarm(mut self, a: &str) -> Self {
        self.alarms.push(a.into());
        self
    }
    fn applied(mut self, idx: u64) -> Self {
        self.applied = idx;
        self
    }
    fn boot(mut self, b: bool) -> Self {
        self.bootstrap = b;
        self
    }
    /// Its record names the CA files of phase `phase` of the rotation to generation 1.
    fn ca(mut self, phase: CaPhase) -> Self {
        self.ca_step = Some(CaStep {
            generation: 1,
            phase,
        });
        self
    }
    /// TLS, with certificates that expire `in_days` after the situation's moment.
    fn certs_for(mut self, in_days: i64) -> Self {
        self.not_after = Some(NOW_UNIX_S + in_days * 86_400);
        self
    }
}

/// The moment of every situation (what the observation says); certificates in the
/// fixtures expire relative to it. The default renewal window is 73 days (a fifth of 365).
const NOW_UNIX_S: i64 = 1_800_000_000;

fn name(serial: u64) -> String {
    format!("cp-{serial}")
}
fn member_id(serial: u64) -> u64 {
    0x100 + serial
}
fn addr(serial: u64) -> Ipv4Addr {
    Ipv4Addr::new(127, 9, 0, serial as u8)
}

#[derive(Clone)]
struct Sit {
    replicas: u32,
    version: &'static str,
    max_surge: u32,
    paused: bool,
    deleting_cp: bool,
    machines: Vec<Fx>,
    /// Serial of the leading machine (0: the leader is an orphan, see `orphan_leader`).
    leader: u64,
    /// Orphan members: (id, name, is_learner).
    orphans: Vec<(u64, &'static str, bool)>,
    orphan_leader: Option<u64>,
    /// false: no leader could be asked for the member list.
    members_visible: bool,
    /// With no leader: the members still answer their status (an election).
    electing: bool,
    /// Seconds each machine (by serial) has had a problem, as the tracker remembers.
    unhealthy_for: Vec<(u64, i64)>,
    compacted: Option<bool>,
    /// Defragmented since the NOSPACE alarm appeared, by serial.
    defragmented: Vec<u64>,
    /// The leader's alarm list: (member id, alarm).
    cluster_alarms: Vec<(u64, String)>,
    nospace_recurrences: u32,
    /// The leader's (and every member's) raft index.
    raft_index: u64,
    remediation: RemediationSpec,
    defrag_percent: u8,
    strategy: Strategy,
    cluster_version: Option<&'static str>,
    backup: BackupSpec,
    /// Recorded snapshots: (id, seconds before now, verified).
    snapshots: Vec<(&'static str, i64, bool)>,
    /// Fenced directories: (name, seconds before now it was fenced).
    fenced: Vec<(&'static str, i64)>,
    /// Seconds before now the control plane was created (`None`: unknown).
    created_ago_s: Option<i64>,
    /// When a snapshot (by id) was last restored, if not when it was taken (`None`:
    /// never).
    restored_ago_s: BTreeMap<&'static str, Option<i64>>,
    /// A restore or recovery a person confirmed.
    rebuild: Option<Rebuild>,
    /// The CA generation in force, and a rotation's phase (to generation + 1).
    ca_generation: u32,
    ca_rotation: Option<CaPhase>,
    /// A chained upgrade's links still to go, and how long ago the link under way
    /// began (`chain`).
    road: Option<(Vec<&'static str>, i64)>,
    v2_api_never_open: bool,
    /// Hosts registered (0: the local provider).
    hosts: usize,
}

fn sit(replicas: u32, version: &'static str, machines: Vec<Fx>) -> Sit {
    let leader = machines
        .iter()
        .find(|f| f.member == Mem::Voter && f.reachable)
        .map(|f| f.serial)
        .unwrap_or(0);
    Sit {
        replicas,
        version,
        max_surge: 1,
        paused: false,
        deleting_cp: false,
        machines,
        leader,
        orphans: vec![],
        orphan_leader: None,
        members_visible: true,
        electing: false,
        unhealthy_for: vec![],
        compacted: None,
        defragmented: vec![],
        cluster_alarms: vec![],
        nospace_recurrences: 0,
        raft_index: 1000,
        remediation: RemediationSpec::default(),
        defrag_percent: 50,
        strategy: Strategy::Replace,
        cluster_version: None,
        backup: BackupSpec::default(),
        snapshots: vec![],
        fenced: vec![],
        created_ago_s: None,
        restored_ago_s: BTreeMap::new(),
        rebuild: None,
        ca_generation: 0,
        ca_rotation: None,
        road: None,
        v2_api_never_open: false,
        hosts: 0,
    }
}

impl Sit {
    /// On the `hosts` provider with `n` hosts `h1`..: machine `serial` runs on `h{serial}`.
    fn on_hosts(mut self, n: usize) -> Self {
        self.hosts = n;
        self
    }
    fn leader(mut self, serial: u64) -> Self {
        self.leader = serial;
        self
    }
    fn surge(mut self, s: u32) -> Self {
        self.max_surge = s;
        self
    }
    fn orphan(mut self, id: u64, name: &'static str, learner: bool) -> Self {
        self.orphans.push((id, name, learner));
        self
    }
    fn no_leader(mut self) -> Self {
        self.members_visible = false;
        self
    }
    /// No leader, but the members answer (knowing none): an election.
    fn electing(mut self) -> Self {
        self.members_visible = false;
        self.electing = true;
        self
    }
    /// Machine `serial` has had a problem for `secs`, as the tracker remembers.
    fn unhealthy_for(mut self, serial: u64, secs: i64) -> Self {
        self.unhealthy_for.push((serial, secs));
        self
    }
    /// Every member's log reaches `index`, applied that far unless said otherwise.
    fn log(mut self, index: u64) -> Self {
        self.raft_index = index;
        for f in &mut self.machines {
            f.applied = f.applied.max(index);
        }
        self
    }
    fn cluster_alarm(mut self, member: u64, alarm: &str) -> Self {
        self.cluster_alarms.push((member, alarm.into()));
        self
    }
    fn defragmented(mut self, serials: &[u64]) -> Self {
        self.defragmented = serials.to_vec();
        self
    }
    fn nospace_recurrences(mut self, n: u32) -> Self {
        self.nospace_recurrences = n;
        self
    }
    fn compacted(mut self, c: bool) -> Self {
        self.compacted = Some(c);
        self
    }
    fn max_retry(mut self, n: u32) -> Self {
        self.remediation.max_retry = n;
        self
    }
    fn in_place(mut self) -> Self {
        self.strategy = Strategy::InPlace;
        self
    }
    fn cluster_version(mut self, v: &'static str) -> Self {
        self.cluster_version = Some(v);
        self
    }
    fn defrag_above(mut self, percent: u8) -> Self {
        self.defrag_percent = percent;
        self
    }

    /// A chained upgrade with `links` still to go, the link under way begun `ago_s`
    /// seconds before now, on a control plane whose v2 API was never open.
    fn road(mut self, links: &[&'static str], ago_s: i64) -> Self {
        self.road = Some((links.to_vec(), ago_s));
        self.v2_api_never_open = true;
        self
    }
    /// Created before quorum closed etcd's v2 API: its v2 store may hold content.
    fn v2_maybe_open(mut self) -> Self {
        self.v2_api_never_open = false;
        self
    }

    /// A CA rotation from generation 0 to 1, in phase `phase`.
    fn rotating(mut self, phase: CaPhase) -> Self {
        self.ca_rotation = Some(phase);
        self
    }

    fn build(&self) -> (ControlPlane, Vec<Machine>, Observation) {
        let cp = ControlPlane {
            spec_version: 0,
            client_addresses: Vec::new(),
            ca_generation: self.ca_generation,
            ca_rotation: self.ca_rotation.map(|phase| CaRotation {
                from: self.ca_generation,
                to: self.ca_generation + 1,
                phase,
                since_unix_s: NOW_UNIX_S,
                started_unix_s: NOW_UNIX_S,
            }),
            road: self
                .road
                .as_ref()
                .map(|(links, ago)| quorum_core::chain::Road {
                    links: links.iter().map(|v| v.parse().unwrap()).collect(),
                    link_began_unix_s: NOW_UNIX_S - ago,
                    snapshots: true,
                }),
            v2_api_never_open: self.v2_api_never_open,
            name: "cp".into(),
            spec: ControlPlaneSpec {
                recovery: Default::default(),
                deletion_protection: false,
                replicas: self.replicas,
                version: self.version.parse().unwrap(),
                rollout: RolloutStrategy {
                    max_surge: self.max_surge,
                    strategy: self.strategy,
                    ..RolloutStrategy::default()
                },
                paused: self.paused,
                haproxy: None,
                certificates: Default::default(),
                insecure_plaintext: true,
                remediation: self.remediation,
                maintenance: MaintenanceSpec {
                    defrag_when_fragmented_above: Percent(self.defrag_percent),
                    ..MaintenanceSpec::default()
                },
                backup: self.backup.clone(),
                provider: if self.hosts > 0 {
                    ProviderKind::Hosts
                } else {
                    ProviderKind::Local
                },
            },
            deleting: self.deleting_cp,
            rebuild: self.rebuild.clone(),
        };
        let machines: Vec<Machine> = self
            .machines
            .iter()
            .map(|f| Machine {
                requested: f.requested,
                ca_step: f.ca_step,
                placement: (self.hosts > 0).then(|| Placement {
                    host: format!("h{}", f.serial),
                    client_port: 2379,
                    peer_port: 2380,
                }),
                name: name(f.serial),
                serial: f.serial,
                address: addr(f.serial),
                version: f.version.parse().unwrap(),
                bootstrap: f.bootstrap,
                deleting: f.deleting,
                tls: f.not_after.is_some(),
                certificates_not_after_unix_s: f.not_after,
                remediation: f.remediation.clone(),
                in_place: f.in_place.clone(),
            })
            .collect();
        let leader_id = match self.orphan_leader {
            Some(id) => id,
            None if self.leader == 0 || self.electing => 0,
            None => member_id(self.leader),
        };
        let mut members = vec![];
        let mut obs = BTreeMap::new();
        for (f, mach) in self.machines.iter().zip(&machines) {
            if f.member != Mem::None {
                let started = f.ran;
                members.push(Member {
                    id: member_id(f.serial),
                    // etcd names a member of the initial cluster from the start; one
                    // added later only once it runs. Client URLs come with the first run.
                    name: if started || f.bootstrap {
                        mach.name.clone()
                    } else {
                        String::new()
                    },
                    peer_urls: vec![mach.peer_url()],
                    client_urls: if started {
                        vec![mach.client_url()]
                    } else {
                        vec![]
                    },
                    is_learner: f.member == Mem::Learner,
                });
            }
            let answers = self.members_visible || self.electing;
            let status = (f.reachable && f.running && answers).then(|| EndpointStatus {
                member_id: member_id(f.serial),
                leader_id,
                raft_term: 2,
                raft_index: self.raft_index,
                raft_applied_index: f.applied,
                version: Some(f.runs.unwrap_or(f.version).parse().unwrap()),
                is_learner: f.member == Mem::Learner,
                alarms: f.alarms.clone(),
                cluster_id: CLUSTER_ID,
                revision: 500,
                db_size_bytes: f.db.0,
                db_size_in_use_bytes: f.db.1,
            });
            obs.insert(
                mach.name.clone(),
                MachineObservation {
                    process: if f.running {
                        ProcessState::Running
                    } else {
                        ProcessState::Stopped
                    },
                    has_data: f.has_data,
                    quorum_read: status.as_ref().and(f.quorum_read),
                    status,
                    marker: f.marker.filter(|_| f.has_data),
                    starts_unix_s: f.starts_ago_s.iter().map(|a| NOW_UNIX_S - a).collect(),
                    planned_starts_unix_s: f.planned_ago_s.iter().map(|a| NOW_UNIX_S - a).collect(),
                    running_version: f
                        .running
                        .then(|| f.runs.unwrap_or(f.version).parse().unwrap()),
                },
            );
        }
        for (id, n, learner) in &self.orphans {
            members.push(Member {
                id: *id,
                name: n.to_string(),
                peer_urls: vec![format!("http://127.9.9.{}:2380", id & 0xff)],
                client_urls: vec![],
                is_learner: *learner,
            });
        }
        let observed = Observation {
            members: self.members_visible.then_some(members),
            cluster_version: self
                .cluster_version
                .map(|v| Version::parse_cluster_version(v).unwrap()),
            machines: obs,
            now_unix_s: NOW_UNIX_S,
            problem_since_unix_s: self
                .unhealthy_for
                .iter()
                .map(|(serial, secs)| (name(*serial), NOW_UNIX_S - secs))
                .collect(),
            compacted: self.compacted,
            defragmented: self.defragmented.iter().map(|s| name(*s)).collect(),
            nospace_recurrences: self.nospace_recurrences,
            alarms: self.cluster_alarms.clone(),
            snapshots: self
                .snapshots
                .iter()
                .map(|(id, ago, verified)| SnapshotSeen {
                    id: id.to_string(),
                    taken_at_unix_s: NOW_UNIX_S - ago,
                    revision: 100,
                    verified: *verified,
                    // Restored when taken; a failed restore says so.
                    restored_at_unix_s: self
                        .restored_ago_s
                        .get(id)
                        .map(|r| r.map(|ago| NOW_UNIX_S - ago))
                        .unwrap_or(Some(NOW_UNIX_S - ago)),
                    restore_failed: (!*verified).then(|| "did not serve".to_string()),
                })
                .collect(),
            created_at_unix_s: self.created_ago_s.map(|ago| NOW_UNIX_S - ago),
            fenced: self
                .fenced
                .iter()
                .map(|(name, ago)| quorum_core::fenced::FencedSeen {
                    name: name.to_string(),
                    fenced_at_unix_s: NOW_UNIX_S - ago,
                })
                .collect(),
            hosts: (self.hosts > 0).then(|| {
                (1..=self.hosts)
                    .map(|i| HostView {
                        name: format!("h{i}"),
                        zone: None,
                        ready: true,
                        removing: false,
                        load: 0,
                    })
                    .collect()
            }),
        };
        (cp, machines, observed)
    }
}

fn check(case: &str, s: &Sit, expect: &str) -> Decision {
    let (cp, machines, observed) = s.build();
    let d = decide(&cp, &machines, &observed);
    let actions: Vec<String> = d
        .actions
        .iter()
        .map(|a| {
            let target = match a {
                Action::RemoveMember {
                    member_id,
                    machine: None,
                } => Some(format!("{member_id:x}")),
                Action::PruneSnapshot { id } | Action::VerifySnapshot { id } => Some(id.clone()),
                Action::PruneFenced { name } => Some(name.clone()),
                _ => a.machine().map(str::to_string),
            };
            match target {
                Some(t) => format!("{}:{}", a.kind(), t),
                None => a.kind().to_string(),
            }
        })
        .collect();
    let got = actions.join(" ");
    let ctx = format!(
        "case '{case}': got actions [{got}], waiting {:?}, blocked {}",
        d.waiting_for,
        d.is_blocked()
    );
    // Invariant of every decision: at most one membership change.
    assert!(
        d.actions
            .iter()
            .filter(|a| a.is_membership_change())
            .count()
            <= 1,
        "{ctx}"
    );
    if let Some(text) = expect.strip_prefix("wait: ") {
        assert!(d.actions.is_empty(), "{ctx}");
        assert!(!d.is_blocked(), "{ctx}");
        let w = d.waiting_for.clone().unwrap_or_default();
        assert!(w.contains(text), "{ctx}: expected waiting for '{text}'");
    } else if let Some(text) = expect.strip_prefix("refuse: ") {
        assert!(d.actions.is_empty(), "{ctx}");
        assert!(d.is_blocked(), "{ctx}");
        let msg = &d.condition(ConditionKind::Blocked).unwrap().message;
        assert!(
            msg.contains(text),
            "{ctx}: expected refusal with '{text}', got '{msg}'"
        );
    } else if expect == "converged" {
        assert!(d.converged, "{ctx}, conditions {:?}", d.conditions);
        assert!(d.actions.is_empty(), "{ctx}");
    } else {
        let want: Vec<&str> = expect.split_whitespace().collect();
        let got: Vec<&str> = actions.iter().map(|s| s.as_str()).collect();
        let matches = want.len() == got.len()
            && want.iter().zip(&got).all(|(w, g)| {
                if w.contains(':') {
                    w == g
                } else {
                    g.split(':').next() == Some(*w)
                }
            });
        assert!(matches, "{ctx}: expected [{expect}]");
        assert!(!d.converged, "{ctx}");
    }
    d
}

#[path = "decide_table/backup.rs"]
mod backup;
#[path = "decide_table/carotation.rs"]
mod carotation;
#[path = "decide_table/chain.rs"]
mod chain;
#[path = "decide_table/fleet.rs"]
mod fleet;
#[path = "decide_table/inplace.rs"]
mod inplace;
#[path = "decide_table/pass.rs"]
mod pass;
#[path = "decide_table/publish.rs"]
mod publish;
#[path = "decide_table/rebuild.rs"]
mod rebuild;

fn old3() -> Vec<Fx> {
    vec![m(1, OLD), m(2, OLD), m(3, OLD)]
}

#[test]
fn decision_table() {
    let cases: Vec<(&str, Sit, &str)> = vec![
        // --- bootstrap
        (
            "empty: allocate the initial machines",
            sit(3, OLD, vec![]).no_leader(),
            "allocate-machine allocate-machine allocate-machine",
        ),
        (
            "allocated, none started: start all as a new cluster",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).fresh().no_member(),
                    m(2, OLD).fresh().no_member(),
                    m(3, OLD).fresh().no_member(),
                ],
            )
            .no_leader(),
            "start-machine:cp-1 start-machine:cp-2 start-machine:cp-3",
        ),
        (
            "crash during allocation: allocate the rest",
            sit(
                3,
                OLD,
                vec![m(1, OLD).fresh().no_member(), m(2, OLD).fresh().no_member()],
            )
            .no_leader(),
            "allocate-machine",
        ),
        (
            "crash during start: start the others, same initial cluster",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).no_member().unreachable(),
                    m(2, OLD).fresh().no_member(),
                    m(3, OLD).fresh().no_member(),
                ],
            )
            .no_leader(),
            "start-machine:cp-2 start-machine:cp-3",
        ),
        (
            "all started, no leader yet: wait",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).no_member().unreachable(),
                    m(2, OLD).no_member().unreachable(),
                    m(3, OLD).no_member().unreachable(),
                ],
            )
            .no_leader(),
            "wait: elect a leader",
        ),
        (
            "bootstrap member formed without one machine: start it as new",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD).fresh()]),
            "start-machine:cp-3",
        ),
        (
            "single-member bootstrap",
            sit(1, OLD, vec![]).no_leader(),
            "allocate-machine",
        ),
        // --- steady state
        (
            "healthy and up to date: converged",
            sit(3, OLD, old3()),
            "converged",
        ),
        (
            "paused: nothing, even if outdated",
            {
                let mut s = sit(3, NEW, old3());
                s.paused = true;
                s
            },
            "wait: paused",
        ),
        // --- scale up
        (
            "scale 3 -> 5: allocate",
            sit(5, OLD, old3()),
            "allocate-machine",
        ),
        (
            "allocated machine: add it as a learner",
            sit(
                5,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD).fresh().no_member(),
                ],
            ),
            "add-learner:cp-4",
        ),
        (
            "learner added, not started: start it joining the existing cluster",
            sit(
                5,
                OLD,
                vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD).learner().fresh()],
            ),
            "start-machine:cp-4",
        ),
        (
            "learner behind: wait for it to catch up",
            sit(
                5,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD).learner().applied(100),
                ],
            ),
            "wait: catch up",
        ),
        (
            "learner caught up: promote",
            sit(
                5,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD).learner().applied(950),
                ],
            ),
            "promote:cp-4",
        ),
        (
            "learner started but not answering: wait",
            sit(
                5,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD).learner().unreachable(),
                ],
            ),
            "wait: learner cp-4 to answer",
        ),
        (
            "scale up with an unhealthy member: do not allocate",
            sit(5, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD).unreachable()]),
            "wait: cp-3: unreachable; replaced unless it recovers within 30s",
        ),
        (
            "add refused while a member has an alarm",
            sit(
                5,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD).alarm("NOSPACE"),
                    m(3, OLD),
                    m(4, OLD).fresh().no_member(),
                ],
            ),
            "wait: NOSPACE: checking whether the keyspace is compacted",
        ),
        (
            "scale 1 -> 3: allocate",
            sit(3, OLD, vec![m(1, OLD)]),
            "allocate-machine",
        ),
        (
            "scale 1 -> 3: second member promoted with 1 voter",
            sit(3, OLD, vec![m(1, OLD), m(4, OLD).learner()]),
            "promote:cp-4",
        ),
        // --- scale down
        (
            "scale 5 -> 3: mark the oldest follower",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD), m(5, OLD)],
            )
            .leader(5),
            "mark-deleting:cp-1",
        ),
        (
            "scale down: the leader goes last",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD), m(5, OLD)],
            )
            .leader(1),
            "mark-deleting:cp-2",
        ),
        (
            "deleting the leader: move leadership first, to the oldest healthy voter",
            sit(
                3,
                OLD,
                vec![m(1, OLD).deleting(), m(2, OLD), m(3, OLD), m(4, OLD)],
            )
            .leader(1),
            "move-leader:cp-2",
        ),
        (
            "rollout, deleting the outdated leader: leadership goes to an up-to-date voter",
            sit(
                3,
                NEW,
                vec![m(1, OLD).deleting(), m(2, OLD), m(5, NEW), m(6, NEW)],
            )
            .leader(1),
            "move-leader:cp-5",
        ),
        (
            "no transferee among the unhealthy: the healthy one is chosen",
            sit(
                3,
                NEW,
                vec![
                    m(1, OLD).deleting(),
                    m(5, NEW).unreachable(),
                    m(6, NEW),
                    m(7, NEW),
                ],
            )
            .leader(1),
            "move-leader:cp-6",
        ),
        (
            "deleting a follower: remove its member",
            sit(
                3,
                OLD,
                vec![m(1, OLD).deleting(), m(2, OLD), m(3, OLD), m(4, OLD)],
            )
            .leader(2),
            "remove-member:cp-1",
        ),
        (
            "member removed, process still up: stop it",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).deleting().no_member(),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD),
                ],
            )
            .leader(2),
            "stop-machine:cp-1",
        ),
        (
            "member removed, process stopped: delete the machine",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).deleting().no_member().stopped(),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD),
                ],
            )
            .leader(2),
            "delete-machine:cp-1",
        ),
        (
            "removal that would lose quorum: refuse",
            sit(
                1,
                OLD,
                vec![m(1, OLD).deleting(), m(2, OLD), m(3, OLD).unreachable()],
            )
            .leader(2),
            "refuse: below the quorum",
        ),
        (
            "deleting a learner: remove it without projection",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD).learner().deleting(),
                ],
            ),
            "remove-member:cp-4",
        ),
        (
            "deleting the leader with no healthy transferee: refuse",
            sit(1, OLD, vec![m(1, OLD).deleting(), m(2, OLD).unreachable()]).leader(1),
            "refuse: no healthy voter can take over",
        ),
        (
            "scale 3 -> 1 with an unhealthy member: wait",
            sit(1, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD).unreachable()]),
            "wait: cp-3: unreachable; replaced unless",
        ),
        // --- certificates that expire within the renewal window (73 days by default)
        (
            "certificates far from expiry: converged",
            sit(
                3,
                NEW,
                vec![
                    m(1, NEW).certs_for(300),
                    m(2, NEW).certs_for(300),
                    m(3, NEW).certs_for(100),
                ],
            ),
            "converged",
        ),
        (
            "certificates expiring within the window: surge a replacement",
            sit(
                3,
                NEW,
                vec![
                    m(1, NEW).certs_for(300),
                    m(2, NEW).certs_for(30),
                    m(3, NEW).certs_for(300),
                ],
            ),
            "allocate-machine",
        ),
        (
            "certificates expiring, replacement joined: the expiring machine leaves",
            sit(
                3,
                NEW,
                vec![
                    m(1, NEW).certs_for(300),
                    m(2, NEW).certs_for(30),
                    m(3, NEW).certs_for(300),
                    m(4, NEW).certs_for(365),
                ],
            )
            .leader(1),
            "mark-deleting:cp-2",
        ),
        (
            "certificates expiring and maxSurge 0: the expiring follower leaves first",
            sit(
                3,
                NEW,
                vec![
                    m(1, NEW).certs_for(10),
                    m(2, NEW).certs_for(300),
                    m(3, NEW).certs_for(300),
                ],
            )
            .leader(2)
            .surge(0),
            "mark-deleting:cp-1",
        ),
        (
            "certificates already expired: still replaced the same way",
            sit(
                3,
                NEW,
                vec![
                    m(1, NEW).certs_for(-1),
                    m(2, NEW).certs_for(300),
                    m(3, NEW).certs_for(300),
                ],
            ),
            "allocate-machine",
        ),
        // --- rollout, maxSurge 1
        (
            "rollout: surge a new machine",
            sit(3, NEW, old3()),
            "allocate-machine",
        ),
        (
            "rollout: new machine promoted, mark the oldest outdated",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, NEW)]).leader(2),
            "mark-deleting:cp-1",
        ),
        (
            "rollout: followers before the leader",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, NEW)]).leader(1),
            "mark-deleting:cp-2",
        ),
        (
            "rollout: a pending learner is promoted before anything else",
            sit(
                3,
                NEW,
                vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, NEW).learner()],
            ),
            "promote:cp-4",
        ),
        (
            "rollout finished: converged",
            sit(3, NEW, vec![m(4, NEW), m(5, NEW), m(6, NEW)]),
            "converged",
        ),
        (
            "rollout: the outdated leader is the last to go",
            sit(3, NEW, vec![m(1, OLD), m(5, NEW), m(6, NEW), m(7, NEW)]).leader(1),
            "mark-deleting:cp-1",
        ),
        // --- rollout, maxSurge 0
        (
            "maxSurge 0: remove first",
            sit(3, NEW, old3()).surge(0).leader(3),
            "mark-deleting:cp-1",
        ),
        (
            "maxSurge 0: after the removal, allocate the replacement",
            sit(3, NEW, vec![m(2, OLD), m(3, OLD)]).surge(0),
            "allocate-machine",
        ),
        (
            "maxSurge 0 with an unhealthy member: wait",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD)])
                .surge(0)
                .leader(3),
            "wait: cp-2: unreachable; replaced unless",
        ),
        (
            "maxSurge 0 on one replica: refuse and say why",
            sit(1, NEW, vec![m(1, OLD)]).surge(0),
            "refuse: use maxSurge 1",
        ),
        // --- quorum projection on promote
        (
            "promote that cannot keep quorum: refuse",
            sit(
                5,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD).unreachable(),
                    m(3, OLD).unreachable(),
                    m(4, OLD).learner(),
                ],
            ),
            "refuse: below the quorum",
        ),
        // --- orphans
        (
            "orphan voter: remove it",
            sit(3, OLD, old3()).orphan(0x999, "ghost", false),
            "remove-member:999",
        ),
        (
            "orphan unstarted learner (empty name): remove it",
            sit(3, OLD, old3()).orphan(0x998, "", true),
            "remove-member:998",
        ),
        (
            "orphan leader: move leadership first",
            {
                let mut s = sit(3, OLD, old3()).orphan(0x999, "ghost", false);
                s.orphan_leader = Some(0x999);
                s
            },
            "move-leader:cp-1",
        ),
        (
            "orphan whose removal would lose quorum: refuse",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).unreachable()]).orphan(0x999, "ghost", false),
            "refuse: not removing orphan member ghost",
        ),
        // --- the origin bug report: 4 machines, 3 members, the removed one unreachable
        (
            "bug report: removed member's machine unreachable: stop it and go on",
            sit(
                3,
                NEW,
                vec![
                    m(1, OLD).deleting().no_member().unreachable(),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, NEW),
                ],
            )
            .leader(2),
            "stop-machine:cp-1",
        ),
        (
            "bug report: removed member's process gone: delete the machine",
            sit(
                3,
                NEW,
                vec![
                    m(1, OLD).deleting().no_member().stopped(),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, NEW),
                ],
            )
            .leader(2),
            "delete-machine:cp-1",
        ),
        (
            "bug report without intent: a started machine lost its member: replace it",
            sit(
                3,
                NEW,
                vec![
                    m(1, OLD).no_member().unreachable(),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, NEW),
                ],
            )
            .leader(2),
            "mark-deleting:cp-1",
        ),
        (
            "bug report recovered: the rollout continues",
            sit(3, NEW, vec![m(2, OLD), m(3, OLD), m(4, NEW)]).leader(2),
            "allocate-machine",
        ),
        // --- repair
        (
            "a member's process died: restart it",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).stopped(), m(3, OLD)]),
            "start-machine:cp-2",
        ),
        (
            "no quorum: restart the stopped members",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).stopped(),
                    m(2, OLD).stopped(),
                    m(3, OLD).unreachable(),
                ],
            )
            .no_leader(),
            "start-machine:cp-1 start-machine:cp-2",
        ),
        (
            "no quorum, everything running: wait",
            sit(
                3,
                OLD,
                vec![
                    m(4, OLD).unreachable(),
                    m(5, OLD).unreachable(),
                    m(6, OLD).unreachable(),
                ],
            )
            .no_leader(),
            "wait: no member answered as leader",
        ),
        (
            "a process without member nor data: stop it before joining",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(4, OLD)
                        .no_member()
                        .unreachable()
                        .boot(false)
                        .fresh_running(),
                ],
            ),
            "stop-machine:cp-4",
        ),
        // --- teardown
        (
            "delete the control plane: stop running machines, delete stopped ones",
            {
                let mut s = sit(3, OLD, vec![m(1, OLD), m(2, OLD).stopped(), m(3, OLD)]);
                s.deleting_cp = true;
                s
            },
            "stop-machine:cp-1 delete-machine:cp-2 stop-machine:cp-3",
        ),
        (
            "teardown done: forget the control plane",
            {
                let mut s = sit(3, OLD, vec![]);
                s.deleting_cp = true;
                s
            },
            "forget-control-plane",
        ),
    ];
    assert!(
        cases.len() >= 50,
        "the table keeps at least 50 cases, has {}",
        cases.len()
    );
    for (name, s, expect) in &cases {
        check(name, s, expect);
    }
}

impl Fx {
    /// A process running without data (started outside quorum's sequence).
    fn fresh_running(mut self) -> Self {
        self.running = true;
        self.has_data = false;
        self
    }
}

#[test]
fn endpoints_exclude_learners_leavers_and_unhealthy() {
    let s = sit(
        3,
        NEW,
        vec![
            m(1, OLD).deleting(),
            m(2, OLD),
            m(3, OLD).unreachable(),
            m(4, NEW),
            m(5, NEW).learner(),
        ],
    )
    .leader(2);
    let (cp, machines, observed) = s.build();
    let d = decide(&cp, &machines, &observed);
    assert_eq!(
        d.endpoints,
        vec![machines[1].client_url(), machines[3].client_url()]
    );
}

#[test]
fn conditions_say_what_is_wrong() {
    let s = sit(3, NEW, vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD)]);
    let (cp, machines, observed) = s.build();
    let d = decide(&cp, &machines, &observed);
    let c = |k| d.condition(k).unwrap().clone();
    assert!(c(ConditionKind::Available).status);
    assert!(!c(ConditionKind::Healthy).status);
    assert!(c(ConditionKind::Healthy).message.contains("cp-2"));
    assert!(!c(ConditionKind::UpToDate).status);
    assert!(c(ConditionKind::VersionWarning).message.contains("3.5.3"));
    assert!(c(ConditionKind::Degraded).status);
    assert_eq!(c(ConditionKind::Degraded).message, "cp-2: unreachable");
    assert!(!c(ConditionKind::Remediating).status);
    // Waiting to see whether cp-2 recovers before anything else changes.
    assert_eq!(d.operation, Operation::Repairing);
    // 2 of 3 voters healthy, quorum 2: one more failure loses quorum.
    assert_eq!((d.voters, d.healthy_voters, d.quorum_margin()), (3, 2, 0));
}

#[test]
fn a_status_from_another_member_does_not_prove_health() {
    // The address answered, but as a different member (a stale process): not healthy.
    let s = sit(5, OLD, old3());
    let (cp, machines, mut observed) = s.build();
    observed
        .machines
        .get_mut("cp-3")
        .unwrap()
        .status
        .as_mut()
        .unwrap()
        .member_id = 0x777;
    let d = decide(&cp, &machines, &observed);
    assert!(d.actions.is_empty());
    let w = d.waiting_for.unwrap();
    assert!(w.contains("cp-3: answers as member 777"), "{w}");
}

#[test]
fn start_of_a_joining_member_lists_the_cluster_and_itself() {
    let s = sit(
        5,
        OLD,
        vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD).learner().fresh()],
    );
    let (cp, machines, observed) = s.build();
    let d = decide(&cp, &machines, &observed);
    let Action::StartMachine {
        state,
        initial_cluster,
        expect: None,
        ..
    } = &d.actions[0]
    else {
        panic!("{d:?}")
    };
    assert_eq!(*state, ClusterState::Existing);
    let names: Vec<&str> = initial_cluster.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["cp-1", "cp-2", "cp-3", "cp-4"]);
}

#[test]
fn a_full_rollout_replays_to_convergence() {
    // Drive decide against a tiny ideal world (every action succeeds at once) and check
    // that a 3-member rollout converges with the membership invariants intact.
    for surge in [0, 1] {
        let mut world = sit(3, NEW, old3()).surge(surge);
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 200, "no convergence with maxSurge {surge}");
            let (cp, machines, observed) = world.build();
            let d = decide(&cp, &machines, &observed);
            let voters = world
                .machines
                .iter()
                .filter(|f| f.member == Mem::Voter)
                .count();
            assert!(
                voters >= 2,
                "fewer than 2 voters during the rollout (surge {surge})"
            );
            if d.converged {
                break;
            }
            let action = d
                .actions
                .first()
                .cloned()
                .unwrap_or_else(|| panic!("stuck: {d:?}"));
            apply_ideal(&mut world, &action);
        }
        assert!(world.machines.iter().all(|f| f.version == NEW));
        assert_eq!(world.machines.len(), 3);
    }
}

fn apply_ideal(w: &mut Sit, a: &Action) {
    let serial_of = |n: &str| n.trim_start_matches("cp-").parse::<u64>().unwrap();
    match a {
        Action::AllocateMachine { version, .. } => {
            let serial = w.machines.iter().map(|f| f.serial).max().unwrap_or(0) + 1;
            let v: &'static str = if version.to_string() == NEW { NEW } else { OLD };
            // TLS like the others; recorded with the rotation's files, as the stores do.
            let tls = w.machines.iter().find_map(|f| f.not_after);
            let mut f = m(serial, v).fresh().no_member().boot(false);
            f.not_after = tls;
            f.ca_step = w.build().0.ca_step_now().filter(|_| tls.is_some());
            w.machines.push(f);
        }
        Action::AddLearner { machine, .. } => {
            let f = w
                .machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap();
            f.member = Mem::Learner;
        }
        Action::StartMachine { machine, .. } => {
            let f = w
                .machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap();
            f.running = true;
            f.has_data = true;
            f.reachable = true;
            f.ran = true;
        }
        Action::WriteMarker { machine, marker } => {
            w.machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap()
                .marker = Some(*marker);
        }
        Action::Promote { machine, .. } => {
            w.machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap()
                .member = Mem::Voter;
        }
        Action::MarkDeleting { machine, .. } => {
            w.machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap()
                .deleting = true;
        }
        Action::MoveLeader { to_machine, .. } => w.leader = serial_of(to_machine),
        Action::RemoveMember {
            machine: Some(machine),
            ..
        } => {
            w.machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap()
                .member = Mem::None;
        }
        Action::StopMachine { machine } => {
            let f = w
                .machines
                .iter_mut()
                .find(|f| f.serial == serial_of(machine))
                .unwrap();
            f.running = false;
            f.reachable = false;
        }
        Action::DeleteMachine { machine } => w.machines.retain(|f| f.serial != serial_of(machine)),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn action_kinds_lists_every_variant() {
    let v = "3.4.23".parse().unwrap();
    let m = || "m".to_string();
    // A new variant fails to compile here until it is listed: the match is exhaustive.
    let all = [
        Action::AllocateMachine {
            bootstrap: false,
            version: v,
            remediation: None,
        },
        Action::StartMachine {
            machine: m(),
            state: ClusterState::New,
            initial_cluster: vec![],
            expect: None,
        },
        Action::AddLearner {
            machine: m(),
            peer_url: m(),
        },
        Action::Promote {
            machine: m(),
            member_id: 1,
        },
        Action::MarkDeleting {
            machine: m(),
            reason: DeleteReason::ScaleDown,
            remediation: None,
        },
        Action::MoveLeader {
            from_member: 1,
            to_member: 2,
            to_machine: m(),
        },
        Action::RemoveMember {
            member_id: 1,
            machine: None,
        },
        Action::StopMachine { machine: m() },
        Action::DeleteMachine { machine: m() },
        Action::ForgetControlPlane,
        Action::WriteMarker {
            machine: m(),
            marker: DataMarker {
                cluster_id: 1,
                member_id: 2,
            },
        },
        Action::Compact { revision: 9 },
        Action::Defragment { machine: m() },
        Action::DisarmAlarm {
            member_id: 1,
            alarm: "NOSPACE".into(),
        },
        Action::BeginInPlace {
            machine: m(),
            to: v,
            reason: DeleteReason::Outdated,
        },
        Action::SetInPlacePhase {
            ca_step: None,
            machine: m(),
            phase: InPlacePhase::Restarting,
            version: v,
            failure: None,
        },
        Action::EndInPlace {
            machine: m(),
            outcome: InPlaceOutcome::Done,
        },
        Action::TakeSnapshot { before: None },
        Action::PruneSnapshot { id: "s.db".into() },
        Action::VerifySnapshot { id: "s.db".into() },
        Action::PruneFenced {
            name: "cp-1@1800000000".into(),
        },
        Action::FenceMachine { machine: m() },
        Action::SetRebuildPhase {
            phase: RebuildPhase::Seeding,
        },
        Action::RestoreSnapshot {
            machine: m(),
            id: "s.db".into(),
        },
        Action::ForceNewCluster {
            machine: m(),
            expect: None,
        },
        Action::FinishRebuild { machine: m() },
        Action::SetCaPhase {
            phase: CaPhase::Reissue,
        },
        Action::FinishCaRotation { generation: 1 },
        Action::TakeNextLink { from: v, to: v },
    ];
    for a in &all {
        match a {
            Action::AllocateMachine { .. }
            | Action::StartMachine { .. }
            | Action::AddLearner { .. }
            | Action::Promote { .. }
            | Action::MarkDeleting { .. }
            | Action::MoveLeader { .. }
            | Action::RemoveMember { .. }
            | Action::StopMachine { .. }
            | Action::DeleteMachine { .. }
            | Action::ForgetControlPlane
            | Action::WriteMarker { .. }
            | Action::Compact { .. }
            | Action::Defragment { .. }
            | Action::DisarmAlarm { .. }
            | Action::BeginInPlace { .. }
            | Action::SetInPlacePhase { .. }
            | Action::EndInPlace { .. }
            | Action::TakeSnapshot { .. }
            | Action::PruneSnapshot { .. }
            | Action::VerifySnapshot { .. }
            | Action::PruneFenced { .. }
            | Action::FenceMachine { .. }
            | Action::SetRebuildPhase { .. }
            | Action::RestoreSnapshot { .. }
            | Action::ForceNewCluster { .. }
            | Action::FinishRebuild { .. }
            | Action::SetCaPhase { .. }
            | Action::FinishCaRotation { .. }
            | Action::TakeNextLink { .. } => {}
        }
    }
    let kinds: Vec<ActionKind> = all.iter().map(|a| a.kind()).collect();
    assert_eq!(kinds, ActionKind::ALL);
}

/// The names are those stored in every history so far: a renamed kind would make old
/// events unreadable as steps. Serde, `as_str`, `Display` and `from_name` agree.
#[test]
fn action_kind_names_are_stable() {
    let names: Vec<&str> = ActionKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "allocate-machine",
            "start-machine",
            "add-learner",
            "promote",
            "mark-deleting",
            "move-leader",
            "remove-member",
            "stop-machine",
            "delete-machine",
            "forget-control-plane",
            "write-marker",
            "compact",
            "defragment",
            "disarm-alarm",
            "begin-in-place",
            "set-in-place-phase",
            "end-in-place",
            "take-snapshot",
            "prune-snapshot",
            "verify-snapshot",
            "prune-fenced",
            "fence-machine",
            "set-rebuild-phase",
            "restore-snapshot",
            "force-new-cluster",
            "finish-rebuild",
            "set-ca-phase",
            "finish-ca-rotation",
            "take-next-link",
        ]
    );
    for k in ActionKind::ALL {
        let json = serde_json::to_string(k).unwrap();
        assert_eq!(json, format!("\"{k}\""));
        assert_eq!(serde_json::from_str::<ActionKind>(&json).unwrap(), *k);
        assert_eq!(ActionKind::from_name(k.as_str()), Some(*k));
    }
    assert_eq!(ActionKind::from_name("refused"), None);
}

/// Roles and health come from the rule that gates membership changes: a member is
/// healthy only when its own endpoint answers as it, knows a leader and has no alarm.
#[test]
fn the_decision_reports_each_machine_role_and_health() {
    let s = sit(
        3,
        OLD,
        vec![
            m(1, OLD),
            m(2, OLD).alarm("NOSPACE"),
            m(3, OLD).unreachable(),
            m(4, OLD).learner(),
            m(5, OLD).no_member().fresh(),
            m(6, OLD).deleting(),
        ],
    );
    let (cp, machines, observed) = s.build();
    let d = decide(&cp, &machines, &observed);
    let got: Vec<(String, Role, bool)> = d
        .machines
        .iter()
        .map(|h| (h.machine.clone(), h.role, h.healthy))
        .collect();
    let want = [
        ("cp-1", Role::Leader, true),
        ("cp-2", Role::Follower, false),
        ("cp-3", Role::Follower, false),
        ("cp-4", Role::Learner, true),
        ("cp-5", Role::NoMember, false),
        // Leaving does not make a machine unhealthy (it only leaves the endpoints).
        ("cp-6", Role::Follower, true),
    ]
    .map(|(n, r, h)| (n.to_string(), r, h));
    assert_eq!(got, want);
    assert_eq!(d.leader(), Some("cp-1"));
    assert_eq!(d.machine("cp-4").map(|h| h.role), Some(Role::Learner));
    // The endpoints and the Healthy condition agree with the per-machine health.
    assert_eq!(d.endpoints, vec![machines[0].client_url()]);
    let healthy = d.condition(ConditionKind::Healthy).unwrap();
    assert!(
        !healthy.status && healthy.message.contains("cp-2, cp-3"),
        "{healthy:?}"
    );
    // Without a leader to ask, no member is known: no role, nothing provably healthy.
    let (cp, machines, observed) = sit(3, OLD, vec![m(1, OLD), m(2, OLD)]).no_leader().build();
    let d = decide(&cp, &machines, &observed);
    assert!(d
        .machines
        .iter()
        .all(|h| h.role == Role::NoMember && !h.healthy));
    assert_eq!(d.leader(), None);
}

/// The repair half: lost and foreign data, crash loops, hung members, remediation and
/// its limits, NOSPACE and defragmentation. `unhealthy_for(serial, s)` is what the
/// controller's tracker remembers; the default `unhealthyAfter` is 30 s.
#[test]
fn repair_table() {
    let mib = 1u64 << 20;
    let nospace = |f: Fx| f.alarm("NOSPACE");
    let lagging = |applied: u64| {
        let mut s = sit(3, OLD, old3()).log(20_000);
        s.machines[1].applied = applied;
        s
    };
    let cases: Vec<(&str, Sit, &str)> = vec![
        // --- data that must never be started as it is
        (
            "disk lost: never started, replaced once it lasts",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).lost_data(), m(3, OLD)]).unhealthy_for(2, 5),
            "wait: cp-2: lost its data: its member ran before but its data directory is empty; replaced unless it recovers within 25s",
        ),
        (
            "disk lost for 30s: remediate",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).lost_data(), m(3, OLD)]).unhealthy_for(2, 30),
            "mark-deleting:cp-2",
        ),
        (
            "a bootstrap member that ran and lost its data is never started with new",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).lost_data(), m(3, OLD)]),
            "wait: cp-2: lost its data",
        ),
        (
            "a bootstrap member that never ran (named, no client URLs) is started with new",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).fresh(), m(3, OLD)]),
            "start-machine:cp-2",
        ),
        (
            "data of another cluster: never started",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).stopped().foreign_data(), m(3, OLD)])
                .unhealthy_for(2, 3),
            "wait: cp-2: its data directory belongs to member 999 of cluster bad",
        ),
        (
            "data of another cluster for 30s: remediate",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).stopped().foreign_data(), m(3, OLD)])
                .unhealthy_for(2, 30),
            "mark-deleting:cp-2",
        ),
        (
            "no leader: data of another cluster is not restarted either",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).stopped().foreign_data(),
                    m(2, OLD).stopped(),
                    m(3, OLD),
                ],
            )
            .no_leader(),
            "start-machine:cp-2",
        ),
        (
            "no leader, before markers: a bootstrap machine with data restarts from it",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).stopped().unmarked(),
                    m(2, OLD).unmarked(),
                    m(3, OLD).unmarked(),
                ],
            )
            .no_leader(),
            "start-machine:cp-1",
        ),
        (
            "an election, before markers: a member that lost its data is not bootstrapped",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).lost_data().unmarked(),
                    m(2, OLD).unmarked(),
                    m(3, OLD).unmarked(),
                ],
            )
            .electing(),
            "wait: no member answered as leader",
        ),
        (
            "no leader, before markers: a restart waits its backoff",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).stopped().unmarked().started_ago(&[0]),
                    m(2, OLD).unmarked(),
                    m(3, OLD).unmarked(),
                ],
            )
            .no_leader(),
            "wait: waiting for the initial members to elect a leader",
        ),
        (
            "data from before markers: started",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).stopped().unmarked(), m(3, OLD)]),
            "start-machine:cp-2",
        ),
        (
            "an unmarked member that answers as itself gets its marker",
            sit(3, OLD, vec![m(1, OLD).unmarked(), m(2, OLD), m(3, OLD).unmarked()]),
            "write-marker:cp-1 write-marker:cp-3",
        ),
        // --- restarts back off; a crash loop is a problem like any other
        (
            "died once, long ago started: restarted at once",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).stopped().started_ago(&[9_000]), m(3, OLD)]),
            "start-machine:cp-2",
        ),
        (
            "third start in the window: waits its backoff (4s after the last)",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD).stopped().started_ago(&[20, 10, 3]), m(3, OLD)],
            )
            .unhealthy_for(2, 20),
            "wait: cp-2: crash loop: started 3 times in 10 min and down again; next start in 1s; replaced unless it recovers within 10s",
        ),
        (
            "third start in the window, backoff passed: started",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD).stopped().started_ago(&[20, 10, 5]), m(3, OLD)],
            ),
            "start-machine:cp-2",
        ),
        (
            "a crash loop for 30s: remediate",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD).stopped().started_ago(&[40, 30, 2]), m(3, OLD)],
            )
            .unhealthy_for(2, 30),
            "mark-deleting:cp-2",
        ),
        (
            "a crash loop for 30s, its backoff passed: replaced, not started again",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD).stopped().started_ago(&[40, 30, 20]), m(3, OLD)],
            )
            .unhealthy_for(2, 35),
            "mark-deleting:cp-2",
        ),
        // --- a hung or lagging member
        (
            "hung (running, unreachable) for 10s: wait",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD)]).unhealthy_for(2, 10),
            "wait: cp-2: unreachable; replaced unless it recovers within 20s",
        ),
        (
            "hung for 30s: remediate",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD)]).unhealthy_for(2, 30),
            "mark-deleting:cp-2",
        ),
        (
            "quorum reads through it time out for 30s: remediate",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).quorum_read_fails(), m(3, OLD)])
                .unhealthy_for(2, 31),
            "mark-deleting:cp-2",
        ),
        (
            "lagging far behind the leader: a problem",
            lagging(10),
            "wait: cp-2: 19990 entries behind the leader; replaced unless",
        ),
        (
            "the lagging voter must trail by more than etcd's catch-up entries",
            lagging(15_000),
            "converged",
        ),
        // --- what remediation never does
        (
            "two of three down: remediating one could lose quorum",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD).lost_data()],
            )
            .unhealthy_for(2, 60)
            .unhealthy_for(3, 60),
            "refuse: not remediating cp-2 (unreachable): removing it would leave 1 healthy of 2 voters, below the quorum of 2",
        ),
        (
            "two of five down: one at a time",
            sit(
                5,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD).unreachable(),
                    m(3, OLD).lost_data(),
                    m(4, OLD),
                    m(5, OLD),
                ],
            )
            .unhealthy_for(2, 60)
            .unhealthy_for(3, 60),
            "mark-deleting:cp-2",
        ),
        (
            "no leader, two of three down: says quorum is lost",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD).lost_data()],
            )
            .no_leader(),
            "refuse: quorum is lost: 0 of 3 members answer",
        ),
        (
            "no leader, two of three lost their data: starting cannot help, rebuilding can",
            sit(
                3,
                OLD,
                vec![m(1, OLD).unreachable(), m(2, OLD).lost_data(), m(3, OLD).lost_data()],
            )
            .no_leader(),
            "refuse: quorum is lost: 0 of 3 members answer (cp-1 unreachable, cp-2 down without data, cp-3 down without data), below the quorum of 2; quorum replaces no member without a quorum (removing one needs a leader, and a replacement could not join). only 1 of 3 still have their data, so starting members cannot bring it back: rebuild it",
        ),
        (
            "no leader, restarts wait their backoff",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).stopped().started_ago(&[8, 4, 1]),
                    m(2, OLD).stopped().started_ago(&[8, 4, 1]),
                    m(3, OLD),
                ],
            )
            .no_leader(),
            "refuse: cp-1 down (next start in 3s)",
        ),
        (
            "a learner that lost its data is not waited on: it is remediated",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD).learner().lost_data()],
            )
            .unhealthy_for(4, 30),
            "mark-deleting:cp-4",
        ),
        (
            "a learner that lost its data, not for long yet: waited on",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD), m(3, OLD), m(4, OLD).learner().lost_data()],
            )
            .unhealthy_for(4, 3),
            "wait: waiting for learner cp-4 to answer",
        ),
        (
            "failed for unhealthyAfter, its remediation waits on a machine leaving: restarted meanwhile",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD).stopped().started_ago(&[200, 100]),
                    m(3, OLD).deleting(),
                ],
            )
            .unhealthy_for(2, 300),
            "start-machine:cp-2",
        ),
        (
            "failed for unhealthyAfter, maxRetry spent: restarted meanwhile",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(3, OLD),
                    m(4, OLD)
                        .stopped()
                        .started_ago(&[200, 100])
                        .remediated("cp-2", 1, 300),
                ],
            )
            .unhealthy_for(4, 300)
            .max_retry(0),
            "start-machine:cp-4",
        ),
        (
            "a learner is promoted before anything is remediated",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD), m(3, OLD).unreachable(), m(4, OLD).learner()],
            )
            .unhealthy_for(3, 60),
            "promote:cp-4",
        ),
        (
            "a learner that never answers is remediated, not waited on forever",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD).learner().stopped().started_ago(&[50, 30, 10]),
                ],
            )
            .unhealthy_for(4, 45),
            "mark-deleting:cp-4",
        ),
        (
            "a learner that has not failed long enough is waited on",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD),
                    m(3, OLD),
                    m(4, OLD).learner().stopped().started_ago(&[50, 30, 2]),
                ],
            )
            .unhealthy_for(4, 5),
            "wait: learner cp-4 to answer",
        ),
        // --- limits
        (
            "the replacement failed within minHealthyPeriod, maxRetry 0: refuse",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(3, OLD), m(4, OLD).unreachable().remediated("cp-2", 1, 300)],
            )
            .unhealthy_for(4, 60)
            .max_retry(0),
            "refuse: not remediating cp-4: its slot was replaced 1 time in a row within minHealthyPeriod 1h, and remediation.maxRetry is 0",
        ),
        (
            "the limit raised: remediate again",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(3, OLD), m(4, OLD).unreachable().remediated("cp-2", 1, 300)],
            )
            .unhealthy_for(4, 60)
            .max_retry(1),
            "mark-deleting:cp-4",
        ),
        (
            "within retryPeriod of the last remediation: wait",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(3, OLD), m(4, OLD).unreachable().remediated("cp-2", 1, 40)],
            )
            .unhealthy_for(4, 35),
            "wait: cp-4: unreachable; replaced again in 20s (remediation.retryPeriod 1m)",
        ),
        (
            "a failure after minHealthyPeriod is new",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(3, OLD), m(4, OLD).unreachable().remediated("cp-2", 9, 4_000)],
            )
            .unhealthy_for(4, 60)
            .max_retry(0),
            "mark-deleting:cp-4",
        ),
        // --- the replacement
        (
            "remediated, member removed, stopped: its replacement is recorded first",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD).deleting().no_member().stopped().remediated("cp-2", 1, 20),
                    m(3, OLD),
                ],
            ),
            "allocate-machine",
        ),
        (
            "replacement recorded: the remediated record goes",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(2, OLD).deleting().no_member().stopped().remediated("cp-2", 1, 20),
                    m(3, OLD),
                    m(4, OLD).fresh().no_member().boot(false).remediated("cp-2", 1, 20),
                ],
            ),
            "delete-machine:cp-2",
        ),
        (
            "the replacement joins as a learner",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD),
                    m(3, OLD),
                    m(4, OLD).fresh().no_member().boot(false).remediated("cp-2", 1, 20),
                ],
            ),
            "add-learner:cp-4",
        ),
        (
            "a remediated leader hands leadership off first",
            sit(
                3,
                OLD,
                vec![
                    m(1, OLD).quorum_read_fails().deleting().remediated("cp-1", 1, 5),
                    m(2, OLD),
                    m(3, OLD),
                ],
            )
            .leader(1),
            "move-leader:cp-2",
        ),
        (
            "a rollout meets a dead member: it is replaced first",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).lost_data(), m(3, OLD)]).unhealthy_for(2, 30),
            "mark-deleting:cp-2",
        ),
        (
            "a rollout meets a dead member that has not lasted: waits",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).lost_data(), m(3, OLD)]).unhealthy_for(2, 3),
            "wait: cp-2: lost its data",
        ),
        // --- NOSPACE: compact, defragment followers then the leader, disarm
        (
            "NOSPACE, not compacted: compact",
            sit(3, OLD, vec![nospace(m(1, OLD)), nospace(m(2, OLD)), m(3, OLD)]).compacted(false),
            "compact",
        ),
        (
            "NOSPACE, compacted: defragment a follower first",
            sit(3, OLD, vec![nospace(m(1, OLD)), nospace(m(2, OLD)), m(3, OLD)]).compacted(true),
            "defragment:cp-2",
        ),
        (
            "NOSPACE, followers done: the leader last",
            sit(3, OLD, vec![nospace(m(1, OLD)), nospace(m(2, OLD)), m(3, OLD)])
                .compacted(true)
                .defragmented(&[2, 3]),
            "defragment:cp-1",
        ),
        (
            "NOSPACE, every member defragmented: disarm",
            sit(3, OLD, vec![nospace(m(1, OLD)), nospace(m(2, OLD)), m(3, OLD)])
                .compacted(true)
                .defragmented(&[1, 2, 3]),
            "disarm-alarm disarm-alarm",
        ),
        (
            "NOSPACE with a follower down: no defragmentation that loses quorum",
            sit(
                3,
                OLD,
                vec![nospace(m(1, OLD)), nospace(m(2, OLD)), m(3, OLD).unreachable()],
            )
            .compacted(true),
            "refuse: not defragmenting cp-2: while cp-2 is defragmented 1 of 3 voters would serve",
        ),
        (
            "NOSPACE of a removed member (only the leader's list has it): repaired too",
            sit(3, OLD, old3())
                .cluster_alarm(0x999, "NOSPACE")
                .compacted(true)
                .defragmented(&[1, 2, 3]),
            "disarm-alarm",
        ),
        (
            "NOSPACE of a member that does not answer: compacted and repaired",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD).unreachable()])
                .cluster_alarm(member_id(3), "NOSPACE")
                .compacted(false),
            "compact",
        ),
        (
            "NOSPACE that keeps coming back: the data fills the quota",
            sit(3, OLD, vec![nospace(m(1, OLD)), nospace(m(2, OLD)), m(3, OLD)])
                .compacted(true)
                .nospace_recurrences(3),
            "refuse: NOSPACE came back 3 times in 10 min",
        ),
        // --- defragmentation on its own
        (
            "a member past the threshold is defragmented when nothing else happens",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).db(8 * mib, 2 * mib), m(3, OLD)]),
            "defragment:cp-2",
        ),
        (
            "small free space is left alone",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).db(mib, mib / 4), m(3, OLD)]),
            "converged",
        ),
        (
            "automatic defragmentation off",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).db(8 * mib, 2 * mib), m(3, OLD)])
                .defrag_above(0),
            "converged",
        ),
        (
            "not during a rollout",
            sit(3, NEW, vec![m(1, OLD), m(2, OLD).db(8 * mib, 2 * mib), m(3, OLD)]),
            "allocate-machine",
        ),
    ];
    for (case, s, expect) in cases {
        check(case, &s, expect);
    }
}

/// The state a start uses: `new` only for an initial member that never ran.
#[test]
fn only_a_member_that_never_ran_is_started_with_new() {
    let state = |f: Fx| {
        let s = sit(3, OLD, vec![m(1, OLD), f, m(3, OLD)]);
        let d = check("start", &s, "start-machine:cp-2");
        match &d.actions[0] {
            Action::StartMachine { state, .. } => *state,
            a => panic!("{a:?}"),
        }
    };
    assert_eq!(state(m(2, OLD).fresh()), ClusterState::New);
    assert_eq!(state(m(2, OLD).stopped()), ClusterState::Existing);
    assert_eq!(
        state(m(2, OLD).stopped().unmarked()),
        ClusterState::Existing
    );
}

/// Without a leader and before markers exist, a lost quorum looks like a bootstrap:
/// a machine with data is still restarted from it, never with `new` (the simulator's
/// check of every start found it: a leader in a crash loop on quorum's first pass).
#[test]
fn a_leaderless_restart_never_bootstraps_data() {
    let s = sit(
        3,
        OLD,
        vec![
            m(1, OLD).stopped().unmarked(),
            m(2, OLD).unmarked(),
            m(3, OLD).fresh().unmarked(),
        ],
    )
    .no_leader();
    let d = check(
        "bootstrap with data",
        &s,
        "start-machine:cp-1 start-machine:cp-3",
    );
    let states: Vec<ClusterState> = d
        .actions
        .iter()
        .map(|a| match a {
            Action::StartMachine { state, .. } => *state,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(states, [ClusterState::Existing, ClusterState::New]);
}

/// A remediation records the slot's count and why, and the replacement inherits it.
#[test]
fn a_remediation_is_recorded_and_inherited() {
    let s = sit(3, OLD, vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD)]).unhealthy_for(2, 31);
    let d = check("hung", &s, "mark-deleting:cp-2");
    let Action::MarkDeleting {
        reason,
        remediation: Some(r),
        ..
    } = &d.actions[0]
    else {
        panic!("{:?}", d.actions)
    };
    assert_eq!(*reason, DeleteReason::Unhealthy);
    assert_eq!((r.machine.as_str(), r.attempt), ("cp-2", 1));
    assert_eq!(r.at_unix_s, NOW_UNIX_S);
    assert_eq!(r.reason, "unreachable for 31s");
    let degraded = d.condition(ConditionKind::Degraded).unwrap();
    assert!(degraded.status);
    assert_eq!(degraded.message, "cp-2: unreachable (for 31s)");
    let health = d.machine("cp-2").unwrap();
    assert_eq!(health.problems, ["unreachable"]);
    assert_eq!(health.unhealthy_since_unix_s, Some(NOW_UNIX_S - 31));

    let s = sit(
        3,
        OLD,
        vec![
            m(1, OLD),
            m(2, OLD)
                .deleting()
                .no_member()
                .stopped()
                .remediated("cp-2", 2, 20),
            m(3, OLD),
        ],
    );
    let d = check("replacement", &s, "allocate-machine");
    let Action::AllocateMachine {
        remediation: Some(r),
        ..
    } = &d.actions[0]
    else {
        panic!("{:?}", d.actions)
    };
    assert_eq!((r.machine.as_str(), r.attempt), ("cp-2", 2));
    let remediating = d.condition(ConditionKind::Remediating).unwrap();
    assert!(remediating.status, "{remediating:?}");
    assert!(remediating
        .message
        .starts_with("replacing cp-2 (attempt 2)"));
}

/// The tracker remembers since when a machine has had a problem, forgets it when the
/// problem goes, and reports each start of a crash loop once.
#[test]
fn the_tracker_remembers_since_when() {
    let mut t = health::Tracker::default();
    let at = |secs: i64, s: Sit| {
        let (cp, machines, mut o) = s.build();
        o.now_unix_s = NOW_UNIX_S + secs;
        (cp, machines, o)
    };
    let sick = || sit(3, OLD, vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD)]);
    let (cp, ms, o) = at(0, sick());
    let first = t.observe(&cp, &ms, &o);
    assert_eq!(first.since_unix_s["cp-2"], NOW_UNIX_S);
    assert!(first.became_unhealthy.is_empty(), "a blip is not news yet");
    let (cp, ms, o) = at(10, sick());
    let later = t.observe(&cp, &ms, &o);
    assert_eq!(later.since_unix_s["cp-2"], NOW_UNIX_S);
    assert_eq!(
        later.became_unhealthy,
        [("cp-2".into(), "unreachable".into())]
    );
    let (cp, ms, o) = at(11, sick());
    assert!(
        t.observe(&cp, &ms, &o).became_unhealthy.is_empty(),
        "reported once"
    );
    let (cp, ms, o) = at(20, sit(3, OLD, old3()));
    let fine = t.observe(&cp, &ms, &o);
    assert!(fine.since_unix_s.is_empty());
    assert_eq!(fine.recovered, [("cp-2".into(), 20)]);
    // A blip that was never reported does not recover loudly either.
    let (cp, ms, o) = at(21, sick());
    t.observe(&cp, &ms, &o);
    let (cp, ms, o) = at(22, sit(3, OLD, old3()));
    assert!(t.observe(&cp, &ms, &o).recovered.is_empty());
    let (cp, ms, o) = at(30, sick());
    assert_eq!(
        t.observe(&cp, &ms, &o).since_unix_s["cp-2"],
        NOW_UNIX_S + 30
    );

    let looping = || {
        sit(
            3,
            OLD,
            vec![
                m(1, OLD),
                m(2, OLD).stopped().started_ago(&[20, 10, 3]),
                m(3, OLD),
            ],
        )
    };
    // A full database is repaired in place: a stall after it is counted from its own
    // start (found by the simulator: a defragmentation's stall inherited the alarm's
    // minute and was remediated at once).
    let mut t = health::Tracker::default();
    let full = || {
        let mut s = sit(
            3,
            OLD,
            vec![m(1, OLD), m(2, OLD).alarm("NOSPACE"), m(3, OLD)],
        );
        s.compacted = Some(true);
        s
    };
    let (cp, ms, o) = at(0, full());
    assert_eq!(t.observe(&cp, &ms, &o).since_unix_s["cp-2"], NOW_UNIX_S);
    let (cp, ms, o) = at(30, full());
    assert_eq!(t.observe(&cp, &ms, &o).since_unix_s["cp-2"], NOW_UNIX_S);
    let (cp, ms, o) = at(60, sick());
    assert_eq!(
        t.observe(&cp, &ms, &o).since_unix_s["cp-2"],
        NOW_UNIX_S + 60
    );

    let mut t = health::Tracker::default();
    let (cp, ms, o) = at(0, looping());
    let first = t.observe(&cp, &ms, &o);
    assert_eq!(first.crash_loops_started, [("cp-2".to_string(), 3)]);
    let (cp, ms, o) = at(0, looping());
    assert!(t.observe(&cp, &ms, &o).crash_loops_started.is_empty());
    // Running for a moment between its restarts (not answering yet) is the same loop.
    let (cp, ms, o) = at(
        1,
        sit(3, OLD, vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD)]),
    );
    t.observe(&cp, &ms, &o);
    let (cp, ms, o) = at(2, looping());
    assert!(t.observe(&cp, &ms, &o).crash_loops_started.is_empty());

    // Under NOSPACE it remembers what was defragmented, until the alarm goes; it counts
    // how often the alarm came.
    let full = || {
        sit(
            3,
            OLD,
            vec![m(1, OLD).alarm("NOSPACE"), m(2, OLD), m(3, OLD)],
        )
    };
    let mut t = health::Tracker::default();
    let (cp, ms, o) = at(0, full());
    assert_eq!(t.observe(&cp, &ms, &o).nospace_recurrences, 1);
    t.defragmented("cp-2");
    let (cp, ms, o) = at(5, full());
    let seen = t.observe(&cp, &ms, &o);
    assert_eq!(seen.defragmented.iter().collect::<Vec<_>>(), ["cp-2"]);
    assert_eq!(seen.nospace_recurrences, 1);
    let (cp, ms, o) = at(10, sit(3, OLD, old3()));
    assert!(t.observe(&cp, &ms, &o).defragmented.is_empty());
    t.defragmented("cp-2");
    let (cp, ms, o) = at(20, full());
    let again = t.observe(&cp, &ms, &o);
    assert!(
        again.defragmented.is_empty(),
        "outside an alarm nothing is remembered"
    );
    assert_eq!(again.nospace_recurrences, 2);
    let (cp, ms, o) = at(20 + health::NOSPACE_WINDOW_S, sit(3, OLD, old3()));
    assert_eq!(t.observe(&cp, &ms, &o).nospace_recurrences, 0);

    // Disarmed by quorum and raised again before the next look: a new alarm, not the
    // one its members were defragmented for.
    let mut t = health::Tracker::default();
    let (cp, ms, o) = at(0, full());
    t.observe(&cp, &ms, &o);
    for m in ["cp-2", "cp-3", "cp-1"] {
        t.defragmented(m);
    }
    t.disarmed();
    let (cp, ms, o) = at(1, full());
    let back = t.observe(&cp, &ms, &o);
    assert!(back.defragmented.is_empty(), "{back:?}");
    assert_eq!(back.nospace_recurrences, 2);
}

/// Two of three down: once the leader steps down there is no member list, and the
/// machines are judged by their processes and endpoints alone. The tracker keeps its
/// memory through it: the members still down stay unhealthy since they went down (so
/// `status` says how long), and none is said to recover while down.
#[test]
fn a_lost_quorum_is_no_recovery() {
    let mut t = health::Tracker::default();
    let at = |secs: i64, s: Sit| {
        let (cp, machines, mut o) = s.build();
        o.now_unix_s = NOW_UNIX_S + secs;
        (cp, machines, o)
    };
    let down = || {
        sit(
            3,
            OLD,
            vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD).unreachable()],
        )
    };
    let (cp, ms, o) = at(0, down());
    t.observe(&cp, &ms, &o);
    let (cp, ms, o) = at(health::REPORT_AFTER_S, down());
    let seen = t.observe(&cp, &ms, &o);
    assert_eq!(seen.became_unhealthy.len(), 2, "{seen:?}");
    let (cp, ms, o) = at(health::REPORT_AFTER_S + 1, down().no_leader());
    let lost = t.observe(&cp, &ms, &o);
    assert!(lost.recovered.is_empty(), "{lost:?}");
    assert_eq!(lost.since_unix_s["cp-2"], NOW_UNIX_S, "{lost:?}");
    assert_eq!(lost.since_unix_s["cp-3"], NOW_UNIX_S, "{lost:?}");
    // What status says meanwhile: each machine that does not answer, not "no problem".
    let d = decide(&cp, &ms, &o);
    let degraded = d.condition(ConditionKind::Degraded).unwrap();
    assert!(
        degraded.status && degraded.message.contains("cp-3: unreachable"),
        "{degraded:?}"
    );
    // Back with a leader: the member still down has been unhealthy all along; the one
    // that came back recovered.
    let back = || sit(3, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD).unreachable()]);
    let (cp, ms, o) = at(20, back());
    let again = t.observe(&cp, &ms, &o);
    assert_eq!(again.since_unix_s["cp-3"], NOW_UNIX_S, "{again:?}");
    assert_eq!(again.recovered, [("cp-2".to_string(), 20)], "{again:?}");
}

/// The controller records each distinct refusal once: the maxRetry refusal must read
/// the same from one pass to the next (seen on real etcd: one `blocked` event a second,
/// "the last 8s ago", "the last 9s ago"...).
#[test]
fn the_max_retry_refusal_reads_the_same_a_second_later() {
    let refusal = |ago_s: i64| {
        let s = sit(
            3,
            OLD,
            vec![
                m(1, OLD),
                m(3, OLD),
                m(4, OLD).unreachable().remediated("cp-2", 1, ago_s),
            ],
        )
        .unhealthy_for(4, 60)
        .max_retry(0);
        let (cp, machines, o) = s.build();
        let d = decide(&cp, &machines, &o);
        let blocked = d.condition(ConditionKind::Blocked).unwrap();
        assert!(blocked.status, "{blocked:?}");
        blocked.message.clone()
    };
    assert_eq!(refusal(300), refusal(301));
}

/// `quorum defrag`'s plan: followers first, the leader last, each only while the others
/// hold quorum.
#[test]
fn the_defrag_plan_leaves_the_leader_last() {
    let s = sit(3, OLD, old3()).leader(2);
    let (cp, machines, o) = s.build();
    assert_eq!(
        upkeep::defrag_plan(&cp, &machines, &o),
        ["cp-1", "cp-3", "cp-2"]
    );
    assert_eq!(upkeep::defrag_check(&cp, &machines, &o, "cp-1"), Ok(()));
    let s = sit(3, OLD, vec![m(1, OLD), m(2, OLD), m(3, OLD).unreachable()]);
    let (cp, machines, o) = s.build();
    let err = upkeep::defrag_check(&cp, &machines, &o, "cp-2").unwrap_err();
    assert!(err.contains("1 of 3 voters would serve"), "{err}");
    assert!(upkeep::defrag_check(&cp, &machines, &o, "nope").is_err());
}

/// How a fleet counts a control plane (`quorum_control_planes{state}`): converged,
/// rolling (a change under way, nothing wrong), degraded (a member has a problem, or
/// no healthy quorum), blocked (quorum refuses, or quorum is lost).
#[test]
fn each_situation_counts_in_one_fleet_state() {
    let table: Vec<(&str, Sit, FleetState)> = vec![
        ("converged", sit(3, OLD, old3()), FleetState::Converged),
        (
            "a rollout under way",
            sit(3, NEW, old3()),
            FleetState::Rolling,
        ),
        (
            "a member unreachable",
            sit(3, OLD, vec![m(1, OLD), m(2, OLD).unreachable(), m(3, OLD)]),
            FleetState::Degraded,
        ),
        (
            "two of three stopped, no leader: no healthy quorum",
            sit(
                3,
                OLD,
                vec![m(1, OLD), m(2, OLD).stopped(), m(3, OLD).stopped()],
            )
            .leader(0),
            FleetState::Degraded,
        ),
        (
            "a step refused (maxSurge 0 on one replica)",
            sit(1, NEW, vec![m(1, OLD)]).surge(0),
            FleetState::Blocked,
        ),
    ];
    for (case, s, want) in table {
        let (cp, machines, observed) = s.build();
        let d = decide(&cp, &machines, &observed);
        assert_eq!(d.fleet_state(), want, "{case}: {:?}", d.conditions);
        assert_eq!(
            FleetState::ALL.iter().filter(|f| **f == want).count(),
            1,
            "{case}"
        );
    }
    let names: Vec<&str> = FleetState::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["converged", "rolling", "degraded", "blocked"]);
}

/// Walkthrough fault 3: planned restarts (an in-place upgrade's, two CA rotations')
/// were counted as a crash loop. Only the starts that were not planned count, toward
/// the crash loop and toward the restart backoff.
#[test]
fn planned_restarts_are_no_crash_loop() {
    let starts = [50, 40, 30, 20, 10];
    let down = |planned: &[i64]| {
        let m3 = m(3, NEW).stopped().started_ago(&starts).planned(planned);
        sit(3, NEW, vec![m(1, NEW), m(2, NEW), m3])
    };
    let crashing = down(&[]);
    let (cp, ms, obs) = crashing.build();
    let p = health::assess(&cp, &ms, &obs);
    assert!(
        matches!(p["cp-3"][..], [health::Problem::CrashLoop { starts: 5 }]),
        "{p:?}"
    );
    // Five starts in the window: a backoff of 16 s, of which 10 have passed.
    check("crashing: backed off", &crashing, "wait: cp-3");
    let planned = down(&[50, 40, 30, 20]);
    let (cp, ms, obs) = planned.build();
    let p = health::assess(&cp, &ms, &obs);
    assert!(matches!(p["cp-3"][..], [health::Problem::Exited]), "{p:?}");
    // One crash start, 10 s ago: its 1 s backoff has passed.
    check("planned: restarted", &planned, "start-machine:cp-3");
    let model = MachineObservation {
        starts_unix_s: vec![1, 2, 2, 3],
        planned_starts_unix_s: vec![2, 3],
        ..obs.machines["cp-3"].clone()
    };
    assert_eq!(
        model.crash_starts(),
        [1, 2],
        "each planned start taken off once"
    );
}
