//! The decision table: situations and the decision quorum must take in each.
//!
//! Each case builds a control plane, its machine records and an observation with a
//! small fixture language, then states the expected decision:
//! - `"kind:machine kind:machine"`: exactly these actions, in order (machine optional);
//! - `"wait: text"`: no action, waiting for something whose description contains text;
//! - `"refuse: text"`: no action, Blocked, the reason contains text;
//! - `"converged"`: nothing to do, every condition good.

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
    }
}

impl Fx {
    fn deleting(mut self) -> Self {
        self.deleting = true;
        self
    }
    fn learner(mut self) -> Self {
        self.member = Mem::Learner;
        self
    }
    fn no_member(mut self) -> Self {
        self.member = Mem::None;
        self
    }
    /// Allocated but never started: no process, no data.
    fn fresh(mut self) -> Self {
        self.running = false;
        self.has_data = false;
        self.reachable = false;
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
    }
}

impl Sit {
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

    fn build(&self) -> (ControlPlane, Vec<Machine>, Observation) {
        let cp = ControlPlane {
            name: "cp".into(),
            spec: ControlPlaneSpec {
                replicas: self.replicas,
                version: self.version.parse().unwrap(),
                rollout: RolloutStrategy {
                    max_surge: self.max_surge,
                    ..RolloutStrategy::default()
                },
                paused: self.paused,
                haproxy: None,
                certificates: Default::default(),
                insecure_plaintext: true,
                remediation: Default::default(),
                maintenance: Default::default(),
            },
            deleting: self.deleting_cp,
        };
        let machines: Vec<Machine> = self
            .machines
            .iter()
            .map(|f| Machine {
                name: name(f.serial),
                serial: f.serial,
                address: addr(f.serial),
                version: f.version.parse().unwrap(),
                bootstrap: f.bootstrap,
                deleting: f.deleting,
                tls: f.not_after.is_some(),
                certificates_not_after_unix_s: f.not_after,
                remediation: None,
            })
            .collect();
        let leader_id = match self.orphan_leader {
            Some(id) => id,
            None if self.leader == 0 => 0,
            None => member_id(self.leader),
        };
        let mut members = vec![];
        let mut obs = BTreeMap::new();
        for (f, mach) in self.machines.iter().zip(&machines) {
            if f.member != Mem::None {
                let started = f.has_data;
                members.push(Member {
                    id: member_id(f.serial),
                    name: if started {
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
            let status =
                (f.reachable && f.running && self.members_visible).then(|| EndpointStatus {
                    member_id: member_id(f.serial),
                    leader_id,
                    raft_term: 2,
                    raft_index: 1000,
                    raft_applied_index: f.applied,
                    version: Some(f.version.parse().unwrap()),
                    is_learner: f.member == Mem::Learner,
                    alarms: f.alarms.clone(),
                    cluster_id: CLUSTER_ID,
                    revision: 500,
                    db_size_bytes: 0,
                    db_size_in_use_bytes: 0,
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
                    status,
                    marker: None,
                    quorum_read: None,
                    starts_unix_s: vec![],
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
            cluster_version: None,
            machines: obs,
            now_unix_s: NOW_UNIX_S,
            problem_since_unix_s: BTreeMap::new(),
            compacted: None,
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
            "wait: member cp-3 is not healthy",
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
            "wait: alarms: NOSPACE",
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
            "wait: cp-3 is not healthy",
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
            "wait: cp-2 is not healthy",
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
    assert_eq!(d.operation, Operation::RollingOut);
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
    assert!(d.waiting_for.unwrap().contains("cp-3 is not healthy"));
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
            w.machines
                .push(m(serial, v).fresh().no_member().boot(false));
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
            | Action::ForgetControlPlane => {}
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
