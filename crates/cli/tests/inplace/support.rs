//! What the in-place tests share (`inplace.rs`, and `crash.rs` for its in-place
//! scenarios): a manifest with `rollout.strategy: InPlace`, the identity of each machine
//! (its member id, its data directory's marker and inode) to compare before and after,
//! a watch that samples every member's own version and the cluster version (and the
//! member list) while a rollout runs, and checks on the history of an in-place rollout.

#![allow(dead_code)]

use crate::common::*;
use quorum_core::{DataMarker, Version};
use quorum_store::Event;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const V3_4_23: &str = "3.4.23";
pub const V3_5_0: &str = "3.5.0";
pub const V3_5_1: &str = "3.5.1";

/// Creation of a control plane (TLS) on a loaded machine.
pub const CREATE_TIMEOUT: &str = "120s";
/// An in-place rollout on a loaded machine (5 members, a few seconds each).
pub const ROLLOUT_TIMEOUT: &str = "180s";
/// Time between two samples of the version watch.
const VERSION_WATCH_PACE: Duration = Duration::from_millis(100);

/// Membership steps: none of them belongs in an in-place rollout.
pub const MEMBERSHIP_KINDS: [&str; 6] = [
    "allocate-machine",
    "add-learner",
    "promote",
    "mark-deleting",
    "remove-member",
    "delete-machine",
];

/// Writes a manifest for `cp` (`replicas` at `version`, rolled out in place, with
/// `in_place` lines under `rollout.inPlace`, if any) and returns its path.
pub fn manifest(env: &Env, cp: &str, replicas: u32, version: &str, in_place: &str) -> PathBuf {
    let path = env.dir.path().join(format!("{cp}-{version}.yaml"));
    let mut text = format!(
        "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata:\n  name: {cp}\nspec:\n  replicas: {replicas}\n  version: \"{version}\"\n  rollout:\n    strategy: InPlace\n"
    );
    if !in_place.is_empty() {
        text.push_str("    inPlace:\n");
        for line in in_place.lines().filter(|l| !l.trim().is_empty()) {
            text.push_str("      ");
            text.push_str(line);
            text.push('\n');
        }
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Creates `cp` in place from a manifest and waits until it converged.
pub fn create_in_place(env: &Env, cp: &str, replicas: u32, version: &str, in_place: &str) {
    let path = manifest(env, cp, replicas, version, in_place);
    let path = path.to_str().unwrap();
    env.ok(&["apply", "-f", path, "--wait", "--timeout", CREATE_TIMEOUT]);
}

/// `upgrade CP --version V --wait`.
pub fn upgrade_and_wait(env: &Env, cp: &str, version: &str) -> String {
    env.ok(&[
        "upgrade",
        cp,
        "--version",
        version,
        "--wait",
        "--timeout",
        ROLLOUT_TIMEOUT,
    ])
}

// ---------------------------------------------------------------------------------
// Identity.

/// Who each machine is: what an in-place rollout must leave exactly as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Machine name -> member id (matched by peer URL), every member a voter.
    pub members: BTreeMap<String, u64>,
    /// Machine name -> its data directory's identity marker.
    pub markers: BTreeMap<String, Option<DataMarker>>,
    /// Machine name -> the inode of its data directory (the same directory, not a copy).
    pub data_inodes: BTreeMap<String, u64>,
}

impl Identity {
    pub fn member_ids(&self) -> BTreeSet<u64> {
        self.members.values().copied().collect()
    }
}

/// Opens the control plane's etcd client (its credentials from the store).
pub fn etcd_of(env: &Env, cp: &str, timeouts: quorum_etcd::Timeouts) -> Arc<quorum_etcd::Etcd> {
    let store = env.store();
    let control_plane = store.get_control_plane(cp).unwrap();
    quorum_controller::access::open(&store, &control_plane, "quorum-test", timeouts)
        .unwrap()
        .etcd
}

pub fn provider(env: &Env) -> quorum_provider::LocalProvider {
    quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir())
}

/// The identity of every machine of `cp` now (every member must be a voter).
pub fn identity(env: &Env, cp: &str) -> Identity {
    let machines = env.store().machines(cp).unwrap();
    let urls: Vec<String> = machines.iter().map(|m| m.client_url()).collect();
    let etcd = etcd_of(env, cp, Default::default());
    let view = rt().block_on(etcd.observe(&urls));
    let members = view.members.expect("a leader answers the member list");
    assert_eq!(members.len(), machines.len(), "{members:?} vs {machines:?}");
    let provider = provider(env);
    let mut id = Identity {
        members: BTreeMap::new(),
        markers: BTreeMap::new(),
        data_inodes: BTreeMap::new(),
    };
    for m in &machines {
        let member = members
            .iter()
            .find(|x| x.peer_urls.contains(&m.peer_url()))
            .unwrap_or_else(|| panic!("{} has no member: {members:?}", m.name));
        assert!(!member.is_learner, "{} is a learner", m.name);
        id.members.insert(m.name.clone(), member.id);
        let marker = provider.observe(&m.name).marker;
        assert!(marker.is_some(), "{} has no data marker", m.name);
        id.markers.insert(m.name.clone(), marker);
        let inode = std::fs::metadata(provider.data_dir(&m.name)).unwrap().ino();
        id.data_inodes.insert(m.name.clone(), inode);
    }
    id
}

// ---------------------------------------------------------------------------------
// The version watch.

/// One sample: what each machine's etcd said of itself and of the cluster version.
#[derive(Clone, Debug)]
pub struct VersionSample {
    pub at: Duration,
    /// Machine -> the version its etcd reports (`None`: it did not answer).
    pub servers: BTreeMap<String, Option<Version>>,
    /// Machine -> the cluster version its `/version` reports, asked after every status
    /// of the sample (`None`: no answer, or none decided yet).
    pub cluster: BTreeMap<String, Option<Version>>,
    /// Member ids of the member list, when some member answered one.
    pub members: Option<BTreeSet<u64>>,
}

impl VersionSample {
    fn line(&self) -> String {
        let show = |v: &Option<Version>| v.map_or("-".to_string(), |v| v.to_string());
        let servers: Vec<String> = self
            .servers
            .iter()
            .map(|(m, v)| format!("{m}={}", show(v)))
            .collect();
        let cluster: Vec<String> = self
            .cluster
            .iter()
            .map(|(m, v)| format!("{m}={}", show(v)))
            .collect();
        format!(
            "+{:.1}s servers [{}] cluster [{}]",
            self.at.as_secs_f64(),
            servers.join(" "),
            cluster.join(" ")
        )
    }

    /// Whether some answering member runs `major.minor`.
    fn runs_line(&self, major: u32, minor: u32) -> bool {
        self.servers
            .values()
            .flatten()
            .any(|v| v.major == major && v.minor == minor)
    }

    /// The highest cluster version some member reported.
    fn cluster_version(&self) -> Option<Version> {
        self.cluster.values().flatten().max().copied()
    }
}

/// Samples every machine of a control plane every `VERSION_WATCH_PACE`: each member's
/// own version first, then each member's cluster version, then the member list.
pub struct VersionWatch {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<VersionSample>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl VersionWatch {
    pub fn start(env: &Env, cp: &str) -> VersionWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (home, location, cp) = (env.home.clone(), env.store_location(), cp.to_string());
        let etcd = etcd_of(
            env,
            &cp,
            quorum_etcd::Timeouts {
                connect_ms: 500,
                observe_ms: 1_000,
                change_ms: 1_000,
            },
        );
        let (stop2, samples2) = (stop.clone(), samples.clone());
        let started = Instant::now();
        let handle = std::thread::spawn(move || {
            let store = quorum_store::Store::connect(&location, &home).unwrap();
            rt().block_on(async move {
                let mut machines = Vec::new();
                while !stop2.load(Ordering::Relaxed) {
                    if let Ok(ms) = store.machines(&cp) {
                        machines = ms;
                    }
                    let at = started.elapsed();
                    let mut servers = BTreeMap::new();
                    for m in &machines {
                        let st = etcd.status(&m.client_url()).await.ok();
                        servers.insert(m.name.clone(), st.and_then(|s| s.version));
                    }
                    let mut cluster = BTreeMap::new();
                    let mut members = None;
                    for m in &machines {
                        let url = m.client_url();
                        let cv = etcd.cluster_version(&url).await.ok().flatten();
                        cluster.insert(m.name.clone(), cv);
                        if members.is_none() {
                            if let Ok(ms) = etcd.member_list(&url).await {
                                members = Some(ms.iter().map(|m| m.id).collect());
                            }
                        }
                    }
                    samples2.lock().unwrap().push(VersionSample {
                        at,
                        servers,
                        cluster,
                        members,
                    });
                    tokio::time::sleep(VERSION_WATCH_PACE).await;
                }
            });
        });
        VersionWatch {
            stop,
            samples,
            handle: Some(handle),
        }
    }

    pub fn finish(mut self) -> Vec<VersionSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("version watch");
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

impl Drop for VersionWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The samples around `i`, for a message.
fn around(samples: &[VersionSample], i: usize) -> String {
    samples[i.saturating_sub(3)..(i + 3).min(samples.len())]
        .iter()
        .map(VersionSample::line)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cluster version moves from `old` (a `major.minor`) only once no member runs it:
/// no sample in which a member still answered on `old` shows a newer cluster version;
/// some sample shows the members mixed (some on `old`, some on `new`) with the cluster
/// version still `old`; and the last samples show `new`. Returns the mixed samples seen.
pub fn assert_cluster_version_moved_last(
    samples: &[VersionSample],
    old: (u32, u32),
    new: (u32, u32),
) -> usize {
    assert!(samples.len() >= 10, "only {} samples", samples.len());
    let line = |v: Version| (v.major, v.minor);
    for (i, s) in samples.iter().enumerate() {
        if s.runs_line(old.0, old.1) {
            let cv = s.cluster_version();
            assert!(
                cv.is_none_or(|cv| line(cv) == old),
                "the cluster version moved to {cv:?} while a member still ran {}.{}:\n{}",
                old.0,
                old.1,
                around(samples, i)
            );
        }
    }
    let mixed = samples
        .iter()
        .filter(|s| {
            s.runs_line(old.0, old.1)
                && s.runs_line(new.0, new.1)
                && s.cluster_version().is_some_and(|cv| line(cv) == old)
        })
        .count();
    assert!(
        mixed > 0,
        "no sample saw the members mixed with the cluster version at {}.{}",
        old.0,
        old.1
    );
    mixed
}

/// Every member list the watch read holds exactly `ids`.
pub fn assert_membership_constant(samples: &[VersionSample], ids: &BTreeSet<u64>) {
    let lists: Vec<(usize, &BTreeSet<u64>)> = samples
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.members.as_ref().map(|m| (i, m)))
        .collect();
    assert!(
        lists.len() * 2 >= samples.len(),
        "only {} of {} samples read a member list",
        lists.len(),
        samples.len()
    );
    for (i, m) in lists {
        assert_eq!(m, ids, "the membership changed:\n{}", around(samples, i));
    }
}

// ---------------------------------------------------------------------------------
// History.

pub fn events_after(env: &Env, cp: &str, after: i64) -> Vec<Event> {
    env.store().events_after(cp, after, 100_000).unwrap()
}

pub fn last_event_id(env: &Env, cp: &str) -> i64 {
    env.store().last_event_id(cp).unwrap()
}

pub fn kind_is(e: &Event, kind: &str) -> bool {
    e.kind.to_string() == kind
}

/// No membership step was taken among `events`.
pub fn assert_no_membership_step(events: &[Event]) {
    let steps: Vec<&Event> = events
        .iter()
        .filter(|e| MEMBERSHIP_KINDS.iter().any(|k| kind_is(e, k)))
        .collect();
    assert!(
        steps.is_empty(),
        "membership steps in an in-place rollout: {steps:?}\n{}",
        history(events)
    );
}

/// The in-place steps of one clean rollout among `events`: every machine of `machines`
/// begun once, each put back in service before the next begins; the leader last: no
/// leadership move during the steps of the followers, and one during the last step,
/// before its machine was stopped. Returns the machines in the order they were upgraded.
pub fn assert_in_place_order(events: &[Event], machines: &[String]) -> Vec<String> {
    let h = || history(events);
    let ok = |e: &&Event, kind: &str| e.ok && kind_is(e, kind);
    let begins: Vec<usize> = (0..events.len())
        .filter(|i| ok(&&events[*i], "begin-in-place"))
        .collect();
    let order: Vec<String> = begins
        .iter()
        .map(|i| events[*i].machine.clone().unwrap())
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    let mut want = machines.to_vec();
    want.sort();
    assert_eq!(sorted, want, "each machine upgraded once:\n{}", h());
    for (n, &b) in begins.iter().enumerate() {
        let machine = &order[n];
        let end = (b..events.len())
            .find(|i| {
                ok(&&events[*i], "end-in-place") && events[*i].machine.as_ref() == Some(machine)
            })
            .unwrap_or_else(|| panic!("{machine} never put back in service:\n{}", h()));
        assert!(
            events[end].message.contains("back in service"),
            "{machine}: {}\n{}",
            events[end].message,
            h()
        );
        if let Some(&next) = begins.get(n + 1) {
            assert!(end < next, "{machine}'s step overlaps the next:\n{}", h());
        }
        let moves: Vec<usize> = (b..end)
            .filter(|i| ok(&&events[*i], "move-leader"))
            .collect();
        let last = n + 1 == begins.len();
        if !last {
            assert!(
                moves.is_empty(),
                "leadership moved during {machine}'s step, before the last:\n{}",
                h()
            );
            continue;
        }
        assert!(
            !moves.is_empty(),
            "the last machine ({machine}) did not lead:\n{}",
            h()
        );
        let stop = (b..end)
            .find(|i| ok(&&events[*i], "stop-machine"))
            .unwrap_or_else(|| panic!("{machine} never stopped:\n{}", h()));
        assert!(
            moves.iter().all(|m| *m < stop),
            "leadership moved after {machine} stopped:\n{}",
            h()
        );
    }
    order
}

// ---------------------------------------------------------------------------------
// A private etcd directory.

/// A directory of etcd binaries for one test: `<dir>/<version>/etcd` links to the
/// installed binary, or is a script that exits at once (a release that cannot start).
pub struct EtcdDir {
    pub path: PathBuf,
}

impl EtcdDir {
    pub fn new(parent: &Path) -> EtcdDir {
        let path = parent.join("etcd-binaries");
        std::fs::create_dir_all(&path).unwrap();
        EtcdDir { path }
    }

    fn bin(&self, version: &str) -> PathBuf {
        let dir = self.path.join(version);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("etcd")
    }

    /// `<version>/etcd` links to the installed etcd of that version, and its tools
    /// (`etcdctl`, `etcdutl`: a snapshot's facts are read with them) beside it.
    pub fn install_real(&self, version: &str) {
        let installed = quorum_provider::default_etcd_dir().join(version);
        let real = installed.join("etcd");
        assert!(real.exists(), "etcd {version} is not installed: {real:?}");
        let bin = self.bin(version);
        let _ = std::fs::remove_file(&bin);
        std::os::unix::fs::symlink(&real, &bin).unwrap();
        for tool in ["etcdctl", "etcdutl"] {
            let (from, to) = (installed.join(tool), bin.with_file_name(tool));
            let _ = std::fs::remove_file(&to);
            if from.exists() {
                std::os::unix::fs::symlink(&from, &to).unwrap();
            }
        }
    }

    /// `<version>/etcd` exits at once with an error.
    pub fn install_broken(&self, version: &str) {
        use std::os::unix::fs::PermissionsExt;
        let bin = self.bin(version);
        let _ = std::fs::remove_file(&bin);
        // Written to a new file and renamed: a script being replaced is never run
        // half-written.
        let tmp = bin.with_extension("tmp");
        std::fs::write(
            &tmp,
            "#!/bin/sh\necho \"a broken etcd: exits at once\" >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &bin).unwrap();
    }

    /// Runs `quorum` with its etcd binaries from here; requires success, returns stdout.
    pub fn ok(&self, env: &Env, args: &[&str]) -> String {
        let out = env
            .cmd(args)
            .env("QUORUM_ETCD_DIR", &self.path)
            .output()
            .expect("run quorum");
        assert!(
            out.status.success(),
            "quorum {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `QUORUM_ETCD_DIR` for a controller: (name, value).
    pub fn var(&self) -> (&'static str, &str) {
        ("QUORUM_ETCD_DIR", self.path.to_str().unwrap())
    }
}

/// The Blocked condition of a status: (status, message).
pub fn blocked(s: &serde_json::Value) -> (bool, String) {
    let c = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "Blocked")
        .unwrap_or_else(|| panic!("no Blocked condition: {s:#}"));
    (
        c["status"] == true,
        c["message"].as_str().unwrap_or_default().to_string(),
    )
}
