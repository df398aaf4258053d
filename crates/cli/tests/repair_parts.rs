//! Repair with the parts we did not write in the way: a real HAProxy in front of the
//! members (the management etcd's faults are in `ha.rs`, `ha/repair_faults.rs`).
//!
//! A 3-member control plane at 3.5.1 names an HAProxy in `spec.haproxy`; the HAProxy runs
//! the configuration `quorum haproxy-config` prints, on an address of the test's own
//! subnet, with its own admin socket. A client workload goes only through HAProxy, the
//! majority watch asks the members themselves (`repair/support.rs`), and a sampler reads
//! HAProxy's backend (and every member's `/health`) every 50 ms, so what HAProxy did is
//! checked from HAProxy's side, not only from the controller's history.
//!
//! - A member's host loses its disk: it leaves the backend before its member is removed,
//!   its replacement enters the backend only once its `/health` passes, and the client
//!   through HAProxy loses no acknowledged write (its failed calls are printed).
//! - An in-place upgrade 3.4.23 → 3.5.1 (no repair, but the same drain): each member
//!   leaves the backend before it is stopped and enters it again only once its
//!   `/health` passes on the new binary; the client through HAProxy loses no
//!   acknowledged write.
//! - HAProxy itself is killed (SIGKILL, by PID) while a remediation is due: the member is
//!   marked for replacement but not removed while HAProxy cannot be kept in step
//!   (`status` says why in `HaproxyInStep`, the history has the error), and the repair
//!   finishes once HAProxy is started again.

mod common;
#[path = "repair/support.rs"]
mod support;

use common::*;
use quorum_haproxy::{HaproxyProcess, RuntimeApi};
use quorum_store::Event;
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

/// HAProxy's frontend is 127.A.B.250 of the test's subnet (machines take .2 and up).
const FRONTEND_HOST: u8 = 250;
/// The backend `spec.haproxy` names (HAProxy's default for quorum).
const BACKEND: &str = quorum_core::DEFAULT_HAPROXY_BACKEND;
/// Every runtime API command of the test gives up after this long.
const RUNTIME_API_TIMEOUT_MS: u64 = 1_000;
/// HAProxy's start (its configuration checked, its socket answering).
const HAPROXY_START_TIMEOUT_MS: u64 = 10_000;
/// Time between two samples of HAProxy's backend.
const LB_SAMPLE_PACE: Duration = Duration::from_millis(50);
/// How long the test watches the controller hold a removal while HAProxy is down: ten
/// times the drain time, and many passes of the controller.
const HOLD_WINDOW: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------
// HAProxy, run as a child of the test.

/// The control plane's HAProxy: where it runs, and the process while it runs.
struct Lb {
    dir: PathBuf,
    socket: PathBuf,
    frontend: SocketAddr,
    process: Option<HaproxyProcess>,
}

impl Lb {
    fn place(env: &Env) -> Lb {
        let (a, b) = env.subnet().split_once('.').unwrap();
        let ip = Ipv4Addr::new(127, a.parse().unwrap(), b.parse().unwrap(), FRONTEND_HOST);
        let dir = env.dir.path().join("lb");
        Lb {
            socket: dir.join("admin.sock"),
            dir,
            frontend: SocketAddr::from((ip, quorum_core::CLIENT_PORT)),
            process: None,
        }
    }

    fn api(&self) -> RuntimeApi {
        RuntimeApi::new(&self.socket, RUNTIME_API_TIMEOUT_MS)
    }

    /// Starts HAProxy on the configuration `quorum haproxy-config` prints now (the
    /// members that are not leaving), as a person would after a restart of its host.
    fn start(&mut self, env: &Env, cp: &str) {
        assert!(self.process.is_none(), "HAProxy runs already");
        let bind = self.frontend.to_string();
        let config = env.ok(&["haproxy-config", cp, "--bind", &bind]);
        let p = HaproxyProcess::start(&self.dir, &config, &self.socket, HAPROXY_START_TIMEOUT_MS)
            .unwrap_or_else(|e| panic!("start HAProxy: {e}"));
        self.process = Some(p);
    }

    /// Kills HAProxy (SIGKILL, by the PID of the child this test started) and reaps it.
    fn kill9(&mut self) {
        let mut p = self.process.take().expect("HAProxy runs");
        let pid = libc::pid_t::try_from(p.pid()).expect("a pid fits pid_t");
        assert!(pid > 0);
        // SAFETY: kill(2) on the positive pid of a child this test spawned and has not
        // reaped (`p` still holds it), so the pid cannot have been reused.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "SIGKILL");
        // Reaps it (a process already dead is only waited for).
        p.stop();
    }

    /// The last lines of HAProxy's own log.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Lb {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- HAProxy log (last 20 lines):\n{}", self.log_tail());
        }
        if let Some(mut p) = self.process.take() {
            p.stop();
        }
    }
}

/// The servers of the backend that take traffic (not in maintenance).
fn serving(api: &RuntimeApi) -> Result<BTreeSet<String>, String> {
    api.servers(BACKEND)
        .map(|ss| {
            ss.into_iter()
                .filter(|s| !s.maintenance)
                .map(|s| s.name)
                .collect()
        })
        .map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------
// The sampler: HAProxy's backend and every member's /health, as they are.

#[derive(Debug)]
struct LbSample {
    /// When the backend's answer was in (its state is at least that old).
    read_at: Instant,
    /// The servers that took traffic, or why the backend could not be read.
    serving: Result<BTreeSet<String>, String>,
    /// The machines whose `/health` passed, asked right after the backend was read.
    healthy: BTreeSet<String>,
}

struct LbSampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<LbSample>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl LbSampler {
    fn start(env: &Env, cp: &str, lb: &Lb) -> LbSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (stop2, samples2) = (stop.clone(), samples.clone());
        let (home, location, cp) = (env.home.clone(), env.store_location(), cp.to_string());
        let api = lb.api();
        let handle = std::thread::spawn(move || {
            let store = quorum_store::Store::connect(&location, &home).unwrap();
            let timeouts = quorum_etcd::Timeouts {
                connect_ms: 300,
                observe_ms: 1_000,
                change_ms: 1_000,
            };
            let control_plane = store.get_control_plane(&cp).unwrap();
            let etcd = quorum_controller::access::open(
                &store,
                &control_plane,
                "quorum-lb-sampler",
                timeouts,
            )
            .unwrap()
            .etcd;
            let rt = rt();
            while !stop2.load(Ordering::Relaxed) {
                let serving = serving(&api);
                let read_at = Instant::now();
                let machines = store.machines(&cp).unwrap_or_default();
                // One after the other: a dead member answers at once, and the timeouts
                // bound a hung one.
                let healthy = rt.block_on(async {
                    let mut healthy = BTreeSet::new();
                    for m in &machines {
                        if etcd.health(&m.client_url()).await.is_ok() {
                            healthy.insert(m.name.clone());
                        }
                    }
                    healthy
                });
                samples2.lock().unwrap().push(LbSample {
                    read_at,
                    serving,
                    healthy,
                });
                std::thread::sleep(LB_SAMPLE_PACE);
            }
        });
        LbSampler {
            stop,
            samples,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> Vec<LbSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("sampler thread");
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

impl Drop for LbSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Every machine that entered the backend during the samples had passed its `/health`
/// by then (in the same sample, asked right after, or before): the controller adds a
/// member only once it says it is healthy itself. Returns the first sample in which
/// `machine` served.
fn assert_entered_healthy(samples: &[LbSample], machine: &str) -> usize {
    let first = samples
        .iter()
        .position(|s| s.serving.as_ref().is_ok_and(|set| set.contains(machine)))
        .unwrap_or_else(|| panic!("{machine} never served in HAProxy's backend"));
    assert!(
        samples[..=first]
            .iter()
            .any(|s| s.healthy.contains(machine)),
        "{machine} entered HAProxy's backend before its /health passed: {:?}",
        &samples[first.saturating_sub(5)..=first]
    );
    first
}

// ---------------------------------------------------------------------------------
// A control plane behind HAProxy.

/// A controller, a 3-member control plane at 3.5.1 with `spec.haproxy`, its HAProxy
/// started from `quorum haproxy-config` once the control plane exists (its TLS frontend
/// needs the control plane's CA), the backend serving all three, and the workload going
/// through HAProxy only.
fn scene_behind_haproxy(test: &str, cp: &str) -> (Scene, Lb) {
    scene_behind_haproxy_at(test, cp, NEW, "")
}

/// `scene_behind_haproxy` at `version`, with `more` spec lines (YAML, no indent).
fn scene_behind_haproxy_at(test: &str, cp: &str, version: &str, more: &str) -> (Scene, Lb) {
    let mut env = Env::new(test);
    env.start_controller();
    let mut lb = Lb::place(&env);
    std::fs::create_dir_all(&lb.dir).unwrap();
    let spec = format!(
        "{}{more}haproxy:\n  runtimeApi: {}\n",
        remediation(""),
        lb.socket.display()
    );
    apply(&env, cp, version, &spec, &CREATE_FLAGS);
    lb.start(&env, cp);
    let api = lb.api();
    let s = env.wait_status(cp, "HAProxy in step", Duration::from_secs(30), |s| {
        condition(s, "HaproxyInStep").0
            && serving(&api)
                .is_ok_and(|set| set.len() == 3 && names(s).iter().all(|n| set.contains(n)))
    });
    assert!(repaired(&s, &[]), "{s:#}");
    let source = Source::Fixed(vec![format!("https://{}", lb.frontend)]);
    (Scene::watching(env, cp, None, source), lb)
}

/// The first event about `machine` of `kind` done (index), if any.
fn first_done(events: &[Event], kind: &str, machine: &str) -> Option<usize> {
    events
        .iter()
        .position(|e| e.ok && kind_is(e, kind) && about(e, machine))
}

/// The events about `machine` of `kind` done.
fn count_done(events: &[Event], kind: &str, machine: &str) -> usize {
    events
        .iter()
        .filter(|e| e.ok && kind_is(e, kind) && about(e, machine))
        .count()
}

/// The machine that replaced `victim` (in the store's record of the remediation).
fn replacement_of(env: &Env, cp: &str, victim: &str) -> String {
    env.store()
        .machines(cp)
        .unwrap()
        .into_iter()
        .find(|m| m.remediation.as_ref().is_some_and(|r| r.machine == victim))
        .unwrap_or_else(|| panic!("no replacement of {victim} recorded"))
        .name
}

fn member_id(s: &Value, machine: &str) -> u64 {
    let id = row(s, machine).unwrap()["memberId"].as_str().unwrap();
    u64::from_str_radix(id, 16).unwrap()
}

/// HAProxy's own counters of what went wrong in the backend since it started (`show
/// stat`, the BACKEND row): connection errors, response errors, retries, redispatches,
/// and the HTTP 5xx answers it gave.
fn backend_errors(api: &RuntimeApi) -> String {
    let Ok(csv) = api.command("show stat") else {
        return "HAProxy does not answer".into();
    };
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let Some(row) = lines
        .map(|l| l.split(',').collect::<Vec<&str>>())
        .find(|r| r.first() == Some(&BACKEND) && r.get(1) == Some(&"BACKEND"))
    else {
        return format!("no row for backend {BACKEND}");
    };
    ["econ", "eresp", "wretr", "wredis", "hrsp_5xx"]
        .iter()
        .map(|col| {
            let v = header
                .iter()
                .position(|h| h == col)
                .and_then(|i| row.get(i))
                .copied()
                .unwrap_or("?");
            format!("{col}={v}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the workload through HAProxy saw, in one line.
fn failed_calls(t: &Tally) -> String {
    format!(
        "{} acknowledged writes, {} failed writes, {} failed reads, {} failed connects: {:?}",
        t.acked.len(),
        t.write_errors,
        t.read_errors,
        t.connect_errors,
        t.errors
    )
}

// ---------------------------------------------------------------------------------
// Disk loss behind HAProxy.

#[test]
fn disk_loss_behind_haproxy_drains_first_and_adds_the_replacement_once_healthy() {
    let (sc, lb) = scene_behind_haproxy("parts-lb-disk", "l");
    let sampler = LbSampler::start(&sc.env, &sc.cp, &lb);
    let s = sc.status();
    let victim = follower(&s);
    let victim_id = member_id(&s, &victim);
    let before = last_event_id(&sc.env, &sc.cp);
    let t0 = Instant::now();
    disk_loss(&sc.env, &victim, pid_of(&s, &victim));
    let took = wait_repaired(&sc, &victim, t0);
    let bound = Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S);
    assert!(took <= bound, "repaired after {took:?}, over {bound:?}");
    let replacement = replacement_of(&sc.env, &sc.cp, &victim);
    // HAProxy follows: the three members serve, the victim does not.
    let api = lb.api();
    let s = sc.wait("HAProxy in step again", Duration::from_secs(30), |s| {
        condition(s, "HaproxyInStep").0
            && serving(&api)
                .is_ok_and(|set| set.len() == 3 && names(s).iter().all(|n| set.contains(n)))
    });
    assert!(names(&s).contains(&replacement), "{s:#}");
    sc.work.wait_more_acked(20, Duration::from_secs(30));
    let samples = sampler.finish();
    let events = events_after(&sc.env, &sc.cp, before);
    let h = history(&events);
    eprintln!(
        "disk loss of {victim} behind HAProxy: 3 healthy voters after {:.1}s\n{h}",
        took.as_secs_f64()
    );
    assert_replaced_in_order(&events, &victim);
    // The controller's history: drained, then removed; promoted, then added.
    let drained = first_done(&events, "lb-drain", &victim)
        .unwrap_or_else(|| panic!("{victim} never drained from HAProxy:\n{h}"));
    let removed = first_done(&events, "remove-member", &victim)
        .unwrap_or_else(|| panic!("{victim}'s member never removed:\n{h}"));
    assert!(drained < removed, "removed before drained:\n{h}");
    assert_eq!(count_done(&events, "remove-member", &victim), 1, "{h}");
    let promoted = first_done(&events, "promote", &replacement)
        .unwrap_or_else(|| panic!("{replacement} never promoted:\n{h}"));
    let added = first_done(&events, "lb-add", &replacement)
        .unwrap_or_else(|| panic!("{replacement} never added to HAProxy:\n{h}"));
    assert!(promoted < added, "in HAProxy before it was a voter:\n{h}");
    // HAProxy's side. The victim took traffic in no sample read after the last member
    // list that still had its member: it left the backend before its member went.
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    let watch_log = watch.finish_with_majority();
    let last_member = watch_log
        .memberships
        .iter()
        .filter(|(_, ids)| ids.contains(&victim_id))
        .map(|(at, _)| *at)
        .max()
        .expect("the victim's member was seen");
    let out_of_backend = samples
        .iter()
        .find(|s| s.serving.as_ref().is_ok_and(|set| !set.contains(&victim)))
        .map(|s| s.read_at)
        .expect("the victim never left HAProxy's backend");
    assert!(
        out_of_backend < last_member,
        "HAProxy served {victim} until after its member was gone ({:?} after the last member list with it)",
        out_of_backend.duration_since(last_member)
    );
    assert!(
        samples
            .iter()
            .filter(|s| s.read_at > out_of_backend)
            .all(|s| s.serving.as_ref().is_ok_and(|set| !set.contains(&victim))),
        "{victim} came back into HAProxy's backend"
    );
    let entered = assert_entered_healthy(&samples, &replacement);
    eprintln!(
        "HAProxy, sampled {} times: {victim} out of the backend {:.1}s before its member was last seen; \
         {replacement} served from sample {entered} on",
        samples.len(),
        last_member.duration_since(out_of_backend).as_secs_f64()
    );
    let connections = lb.api().backend_connections(BACKEND);
    let errors = backend_errors(&lb.api());
    let tally = work.finish(&env, &cp);
    eprintln!(
        "the client through HAProxy: {}; HAProxy's backend: {connections:?}, {errors}",
        failed_calls(&tally)
    );
    assert_no_orphans(&env, &cp);
    drop(lb);
}

// ---------------------------------------------------------------------------------
// An in-place upgrade behind HAProxy.

#[test]
fn an_in_place_upgrade_behind_haproxy_drains_each_member_before_its_stop() {
    let (sc, lb) = scene_behind_haproxy_at(
        "parts-lb-inplace",
        "p",
        OLD,
        "rollout:\n  strategy: InPlace\n",
    );
    let sampler = LbSampler::start(&sc.env, &sc.cp, &lb);
    let s = sc.status();
    let machines = names(&s);
    let ids: Vec<u64> = machines.iter().map(|m| member_id(&s, m)).collect();
    let before = last_event_id(&sc.env, &sc.cp);
    let t0 = Instant::now();
    sc.env.ok(&["upgrade", &sc.cp, "--version", NEW]);
    let api = lb.api();
    let s = sc.wait(
        "upgraded in place, HAProxy in step",
        Duration::from_secs(120),
        |s| {
            s["converged"] == true
                && rows(s)
                    .iter()
                    .all(|r| r["runningVersion"].as_str() == Some(NEW))
                && condition(s, "HaproxyInStep").0
                && serving(&api).is_ok_and(|set| set.len() == 3)
        },
    );
    let took = t0.elapsed();
    sc.work.wait_more_acked(20, Duration::from_secs(30));
    let samples = sampler.finish();
    let events = events_after(&sc.env, &sc.cp, before);
    let h = history(&events);
    eprintln!(
        "in place behind HAProxy, converged after {:.1}s\n{h}",
        took.as_secs_f64()
    );
    // The same machines and members: nothing joined or left.
    assert_eq!(names(&s), machines);
    assert_eq!(
        machines
            .iter()
            .map(|m| member_id(&s, m))
            .collect::<Vec<_>>(),
        ids
    );
    for kind in ["add-learner", "remove-member", "mark-deleting"] {
        assert!(
            !events.iter().any(|e| e.ok && kind_is(e, kind)),
            "{kind}:\n{h}"
        );
    }
    for m in &machines {
        // The controller drained it from HAProxy before it stopped it...
        let drained = first_done(&events, "lb-drain", m)
            .unwrap_or_else(|| panic!("{m} never drained from HAProxy:\n{h}"));
        let stopped = first_done(&events, "stop-machine", m)
            .unwrap_or_else(|| panic!("{m} never stopped:\n{h}"));
        assert!(drained < stopped, "{m} stopped before it was drained:\n{h}");
        assert_eq!(count_done(&events, "stop-machine", m), 1, "{h}");
        // ...and, from HAProxy's side, it served again only once its /health passed
        // on the new binary: every sample that has it serving after it left the
        // backend has it healthy then or before.
        let left = samples
            .iter()
            .position(|x| x.serving.as_ref().is_ok_and(|set| !set.contains(m)))
            .unwrap_or_else(|| panic!("{m} never left HAProxy's backend"));
        let back = samples[left..]
            .iter()
            .position(|x| x.serving.as_ref().is_ok_and(|set| set.contains(m)))
            .map(|i| left + i)
            .unwrap_or_else(|| panic!("{m} never came back into HAProxy's backend"));
        assert!(
            samples[left..=back].iter().any(|x| x.healthy.contains(m)),
            "{m} re-entered HAProxy's backend before its /health passed"
        );
    }
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    let errors = backend_errors(&lb.api());
    let tally = work.finish(&env, &cp);
    eprintln!(
        "the client through HAProxy: {}; HAProxy's backend: {errors}",
        failed_calls(&tally)
    );
    assert_no_orphans(&env, &cp);
    drop(lb);
}

// ---------------------------------------------------------------------------------
// HAProxy killed while a remediation is due.

#[test]
fn haproxy_killed_while_a_remediation_is_due_holds_the_removal_until_it_is_back() {
    let (sc, mut lb) = scene_behind_haproxy("parts-lb-kill", "k");
    let s = sc.status();
    let victim = follower(&s);
    let victim_id = member_id(&s, &victim);
    let before = last_event_id(&sc.env, &sc.cp);
    disk_loss(&sc.env, &victim, pid_of(&s, &victim));
    // The controller saw the member fail: its remediation is due after unhealthyAfter.
    // HAProxy goes now, before it is.
    let deadline = Instant::now() + Duration::from_secs(30);
    while first_done(&events_after(&sc.env, &sc.cp, before), "unhealthy", &victim).is_none() {
        assert!(Instant::now() < deadline, "{victim} never seen unhealthy");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Events are stamped with the time their pass began, which may be before the kill;
    // their ids are given when written, after the failure they report.
    let before_kill = last_event_id(&sc.env, &sc.cp);
    lb.kill9();
    let events = events_after(&sc.env, &sc.cp, before);
    assert!(
        first_done(&events, "mark-deleting", &victim).is_none(),
        "the remediation began before HAProxy was killed (the test came too late):\n{}",
        history(&events)
    );
    // The remediation begins (marking the machine changes nothing clients see)...
    let deadline = Instant::now() + Duration::from_secs(UNHEALTHY_AFTER_S + REPAIR_BOUND_S);
    let marked = loop {
        let events = events_after(&sc.env, &sc.cp, before);
        if first_done(&events, "mark-deleting", &victim).is_some() {
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "{victim} never marked for replacement:\n{}",
            history(&events)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // ...and stops short of the removal, saying why, for as long as HAProxy is down:
    // watched for a window many passes long (a negative, so it has a length).
    let said = loop {
        let s = sc.status();
        let (in_step, message) = condition(&s, "HaproxyInStep");
        assert!(!in_step, "HAProxy is down, yet in step: {message}");
        let gone = sc
            .watch
            .log
            .lock()
            .unwrap()
            .memberships
            .iter()
            .any(|(at, ids)| *at > marked && !ids.contains(&victim_id));
        assert!(
            !gone,
            "{victim}'s member was removed while HAProxy was down"
        );
        let events = events_after(&sc.env, &sc.cp, before);
        assert_eq!(
            count_done(&events, "remove-member", &victim),
            0,
            "removed while HAProxy was down:\n{}",
            history(&events)
        );
        if marked.elapsed() > HOLD_WINDOW {
            break (s, message);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (s, message) = said;
    assert!(
        message.contains("does not answer") && message.contains("holds member removals"),
        "{message}"
    );
    let next: Vec<&str> = s["nextActions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        next.first()
            .is_some_and(|a| a.contains("remove") && a.contains(&victim)),
        "the next step is not the held removal: {next:?}"
    );
    let (ids, lists) = sc.watch.members_seen_after(marked);
    assert!(lists >= 5, "only {lists} member lists read while held");
    assert!(ids.contains(&victim_id));
    let events = events_after(&sc.env, &sc.cp, before);
    let errors: Vec<&Event> = events
        .iter()
        .filter(|e| kind_is(e, "error") && e.message.starts_with("haproxy: ") && e.id > before_kill)
        .collect();
    assert!(
        !errors.is_empty(),
        "no event says HAProxy fails:\n{}",
        history(&events)
    );
    // Said once for each thing HAProxy did, not at every pass of the controller.
    assert!(errors.len() <= 2, "{}", history(&events));
    // A person starts HAProxy again (its configuration printed afresh): the repair ends.
    let restarted_ms = wall_ms();
    let restarted = Instant::now();
    let held = restarted.duration_since(marked);
    lb.start(&sc.env, &sc.cp);
    let took = wait_repaired(&sc, &victim, restarted);
    let api = lb.api();
    sc.wait("HAProxy in step again", Duration::from_secs(30), |s| {
        condition(s, "HaproxyInStep").0
            && serving(&api)
                .is_ok_and(|set| set.len() == 3 && names(s).iter().all(|n| set.contains(n)))
    });
    sc.work.wait_more_acked(20, Duration::from_secs(30));
    let events = events_after(&sc.env, &sc.cp, before);
    let h = history(&events);
    eprintln!(
        "HAProxy killed with {victim}'s remediation due; held for {:.1}s after the mark, saying: {message}\n\
         repaired {:.1}s after HAProxy was started again\n{h}",
        held.as_secs_f64(),
        took.as_secs_f64()
    );
    let removal = &events[first_done(&events, "remove-member", &victim).expect("removed")];
    let removal_started_ms = removal.at_ms - removal.took_ms.unwrap_or(0);
    assert!(
        removal_started_ms >= restarted_ms,
        "removed {} ms before HAProxy was started again:\n{h}",
        restarted_ms - removal_started_ms
    );
    assert_eq!(count_done(&events, "remove-member", &victim), 1, "{h}");
    assert_eq!(remediations(&events), [victim.as_str()], "{h}");
    let Scene {
        env,
        cp,
        work,
        watch,
    } = sc;
    watch.finish_with_majority();
    let errors = backend_errors(&lb.api());
    let tally = work.finish(&env, &cp);
    eprintln!(
        "the client through HAProxy: {} (HAProxy since its restart: {errors})",
        failed_calls(&tally)
    );
    assert_no_orphans(&env, &cp);
    drop(lb);
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
