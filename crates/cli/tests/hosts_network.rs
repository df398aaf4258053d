//! Members on a network of hosts: three Linux network namespaces on a bridge, an agent
//! in each, the controller in the root namespace, real etcd members on the hosts' own
//! addresses, and an independent client workload that checks every acknowledged write.
//! The network fails for real: nftables cuts a host off from its peers in the middle
//! of a rollout.

mod common;

use common::fleet::Fleet;
use common::workload::{assert_acked, Creds, Workload};
use common::*;
use std::time::{Duration, Instant};

#[test]
fn a_host_cut_off_from_its_peers_holds_a_rollout_until_the_network_heals() {
    let f = Fleet::new("hosts_partition", 3);
    let env = &f.env;
    let t = Instant::now();
    create_on_hosts(env, Some("InPlace"));
    println!("created on 3 hosts in {:.1} s", t.elapsed().as_secs_f64());
    let machines = env.store().machines("prod").unwrap();
    for m in &machines {
        assert!(
            f.net.hosts.iter().any(|h| h.ip == m.address),
            "{m:?} is on a host's address"
        );
    }
    let creds = Creds::fetch(env, "prod", &env.dir.path().join("creds"));
    let eps = env.endpoints("prod").endpoints;
    let work = Workload::start(eps.clone(), creds.clone());
    let watch = QuorumWatch::start(env, "prod");

    // h3 loses its peers (both ways); the controller still reaches it.
    let peers = [f.net.hosts[0].ip, f.net.hosts[1].ip];
    f.net.partition(3, &peers, false).unwrap();
    let cut = Instant::now();
    env.ok(&["upgrade", "prod", "--version", NEW]);
    // While cut off, nothing is restarted: the preflight wants every voter healthy.
    let hold = Duration::from_secs(12);
    while cut.elapsed() < hold {
        // A client follows the endpoints quorum publishes (the cut-off member leaves them).
        work.follow(env.endpoints("prod").endpoints);
        for m in env.store().machines("prod").unwrap() {
            assert!(
                m.in_place.is_none() && m.version.to_string() == OLD,
                "a step began during the partition: {m:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = env.ok(&["status", "prod"]);
    println!("during the partition:\n{status}");
    f.net.heal(3).unwrap();
    let healed = Instant::now();
    env.ok(&[
        "upgrade",
        "prod",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        "5m",
    ]);
    let converged_s = healed.elapsed().as_secs_f64();
    let (acked, failures, attempts) = work.finish();
    let (checks, violations) = watch.finish();
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    assert_acked(&env.endpoints("prod").endpoints, &creds, &acked);
    for m in env.store().machines("prod").unwrap() {
        assert_eq!(m.version.to_string(), NEW);
    }
    println!(
        "partition: rollout held {:.1} s (the whole partition), converged {converged_s:.1} s after the heal; \
         workload: {attempts} writes, {} acknowledged and read back, failures {failures:?}; {checks} quorum checks",
        hold.as_secs_f64(),
        acked.len()
    );
}

#[test]
fn a_controller_cut_off_from_one_host_takes_no_step_and_says_why() {
    let f = Fleet::new("hosts_ctl_cut", 3);
    // h2 drops everything from the controller (one way: the controller's packets never
    // arrive, so it hears nothing back either); h2's peers still reach it.
    let cut = |f: &Fleet| f.net.partition(2, &[f.net.controller_ip()], true).unwrap();
    let heal = |f: &Fleet| f.net.heal(2).unwrap();
    one_host_silent_for_a_while(&f, "cut off", cut, heal);
    no_spare_host_for_a_replacement(&f.env);
}

/// Three members on three hosts, a rollout by replacement (walkthrough fault 14): the
/// dry run and the change say no host can take the surge machine, and how out; forced,
/// the step is refused (Blocked, naming `--abort`); cancelled, nothing changed; then
/// switched to in place, it finishes on the same three hosts.
fn no_spare_host_for_a_replacement(env: &Env) {
    let before = env.store().machines("prod").unwrap();
    for extra in [&["--dry-run"][..], &[]] {
        let mut args = vec!["upgrade", "prod", "--version", NEW];
        args.extend(extra);
        let e = env.fails(&args);
        assert!(
            e.contains("no host can take another member") && e.contains("--strategy InPlace"),
            "{e}"
        );
    }
    env.ok(&[
        "upgrade",
        "prod",
        "--version",
        NEW,
        "--force",
        "--no-snapshot",
    ]);
    let s = env.wait_status("prod", "the step refused", Duration::from_secs(30), |s| {
        s["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                c["kind"] == "Blocked"
                    && c["status"] == true
                    && c["message"].as_str().is_some_and(|m| m.contains("--abort"))
            })
        })
    });
    println!("blocked: {}", s["operation"]);
    let out = env.ok(&["upgrade", "prod", "--abort"]);
    assert!(
        out.contains(&format!("rollout to etcd {NEW} cancelled")),
        "{out}"
    );
    env.wait_status("prod", "converged again", Duration::from_secs(60), |s| {
        s["converged"] == true
    });
    assert_eq!(env.store().machines("prod").unwrap(), before);
    env.ok(&[
        "upgrade",
        "prod",
        "--version",
        NEW,
        "--force",
        "--no-snapshot",
    ]);
    let t = Instant::now();
    env.ok(&[
        "upgrade",
        "prod",
        "--strategy",
        "InPlace",
        "--wait",
        "--timeout",
        "3m",
    ]);
    println!(
        "switched to in place: done in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let after = env.store().machines("prod").unwrap();
    assert_eq!(after.len(), 3);
    assert!(
        after.iter().all(|m| m.version.to_string() == NEW),
        "{after:?}"
    );
    assert_eq!(spread(&after), (3, 3));
}

/// A host hangs whole (every process in it SIGSTOPped: its agent and its member) and
/// resumes: the same as a host cut off, and its member serves again where it was.
#[test]
fn a_hung_host_takes_no_step_and_serves_again_when_it_resumes() {
    let f = Fleet::new("hosts_hung", 3);
    let stop = |f: &Fleet| f.net.signal_host(2, libc::SIGSTOP);
    let resume = |f: &Fleet| f.net.signal_host(2, libc::SIGCONT);
    one_host_silent_for_a_while(&f, "hung", stop, resume);
}

/// h2 goes silent (`fault`) under a created control plane: its member is seen
/// unreachable by status and `quorum hosts`; for 10 s (less than remediation's
/// unhealthyAfter) no machine is added, removed or marked; after `heal` every member is
/// healthy again, the same machines.
fn one_host_silent_for_a_while(
    f: &Fleet,
    what: &str,
    fault: impl Fn(&Fleet),
    heal: impl Fn(&Fleet),
) {
    let env = &f.env;
    create_on_hosts(env, None);
    let before = env.store().machines("prod").unwrap();
    fault(f);
    let cut = Instant::now();
    let s = env.wait_status(
        "prod",
        "h2's member seen unreachable",
        Duration::from_secs(30),
        |s| {
            s["machines"].as_array().is_some_and(|ms| {
                ms.iter()
                    .any(|m| m["problems"].as_array().is_some_and(|p| !p.is_empty()))
            })
        },
    );
    println!(
        "{what}: seen after {:.1} s: {}",
        cut.elapsed().as_secs_f64(),
        s["operation"]
    );
    let hosts = env.ok(&["hosts"]);
    println!("{hosts}");
    assert!(hosts.contains("unreachable"), "{hosts}");
    while cut.elapsed() < Duration::from_secs(10) {
        let now = env.store().machines("prod").unwrap();
        assert_eq!(
            now.len(),
            before.len(),
            "a machine was added or removed: {now:?}"
        );
        assert!(now.iter().all(|m| !m.deleting), "{now:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = env.ok(&["status", "prod"]);
    println!("{status}");
    assert!(status.contains("prod-2"), "{status}");
    heal(f);
    let healed = Instant::now();
    env.wait_status(
        "prod",
        "every member healthy again",
        Duration::from_secs(60),
        |s| {
            s["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["kind"] == "Healthy" && c["status"] == true)
            })
        },
    );
    println!(
        "{what}: healthy {:.1} s after the heal",
        healed.elapsed().as_secs_f64()
    );
    assert_eq!(env.store().machines("prod").unwrap(), before);
}

/// A whole host dies during a replacement rollout (every process in it killed: the
/// agent and its etcd member), as a power loss would: quorum never loses quorum, status
/// names the member it cannot reach, nothing is done through the dead host; the host
/// comes back (its agent started again on its state, its member not running), the
/// member is started again, and the rollout finishes with every acknowledged write.
#[test]
fn a_host_killed_during_a_rollout_comes_back_and_the_rollout_finishes() {
    let mut f = Fleet::new("hosts_kill", 4);
    create_on_hosts(&f.env, None);
    let env = &f.env;
    let creds = Creds::fetch(env, "prod", &env.dir.path().join("creds"));
    let work = Workload::start(env.endpoints("prod").endpoints, creds.clone());
    let watch = QuorumWatch::start(env, "prod");
    // The host of the last member (replaced last: its member still votes while the
    // rollout runs).
    let machines = env.store().machines("prod").unwrap();
    let victim = machines.last().unwrap().clone();
    let host = victim.placement.as_ref().unwrap().host.clone();
    let i: usize = host.trim_start_matches('h').parse().unwrap();
    env.ok(&["upgrade", "prod", "--version", NEW]);
    f.net.signal_host(i, libc::SIGKILL);
    let killed = Instant::now();
    let s = env.wait_status(
        "prod",
        "the dead host's member seen unreachable",
        Duration::from_secs(30),
        |s| {
            s["machines"].as_array().is_some_and(|ms| {
                ms.iter().any(|m| {
                    m["name"] == victim.name.as_str()
                        && m["problems"].as_array().is_some_and(|p| !p.is_empty())
                })
            })
        },
    );
    let seen_s = killed.elapsed().as_secs_f64();
    println!("seen after {seen_s:.1} s: {}", s["operation"]);
    let hosts = env.ok(&["hosts"]);
    assert!(hosts.contains("unreachable"), "{hosts}");
    // Down for a while (less than remediation's unhealthyAfter): nothing is done
    // through the dead host, its machine stays recorded, clients follow the endpoints.
    while killed.elapsed() < Duration::from_secs(8) {
        work.follow(env.endpoints("prod").endpoints);
        let now = env.store().machines("prod").unwrap();
        assert!(
            now.iter().any(|m| m.name == victim.name && !m.deleting),
            "{now:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The host boots again: its agent starts on its state; its member is not running.
    // It serves every interface this time (as behind a NAT): the controller still
    // reaches it at the address it was added with.
    f.restart_agent(i, &["--listen", "0.0.0.0"]);
    let back = Instant::now();
    let env = &f.env;
    env.ok(&[
        "upgrade",
        "prod",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        "5m",
    ]);
    let converged_s = back.elapsed().as_secs_f64();
    let (acked, failures, attempts) = work.finish();
    let (checks, violations) = watch.finish();
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    assert_acked(&env.endpoints("prod").endpoints, &creds, &acked);
    let after = env.store().machines("prod").unwrap();
    assert!(
        after.iter().all(|m| m.version.to_string() == NEW),
        "{after:?}"
    );
    let on: std::collections::BTreeSet<_> = after
        .iter()
        .map(|m| m.placement.as_ref().unwrap().host.clone())
        .collect();
    assert_eq!(on.len(), after.len(), "one member per host: {after:?}");
    let log = f.agent_log(i);
    assert!(
        log.contains("0.0.0.0:7390"),
        "served where --listen said:\n{log}"
    );
    println!(
        "host killed: seen {seen_s:.1} s after, down {:.1} s, rollout finished {converged_s:.1} s after it came back; \
         workload: {attempts} writes, {} acknowledged and read back, failures {failures:?}; {checks} quorum checks",
        (back - killed).as_secs_f64(),
        acked.len()
    );
}

/// Creates control plane `prod`, 3 members at 3.4.23 on the hosts, and waits for it.
fn create_on_hosts(env: &Env, strategy: Option<&str>) {
    let mut args = vec![
        "create",
        "prod",
        "--replicas",
        "3",
        "--version",
        OLD,
        "--provider",
        "hosts",
        "--wait",
        "--timeout",
        "3m",
    ];
    if let Some(s) = strategy {
        args.extend(["--strategy", s]);
    }
    env.ok(&args);
}

/// Follows the endpoints quorum publishes into the workload until `done` holds of the
/// store's machines and status says converged (within `limit`).
fn follow_until(
    env: &Env,
    work: &Workload,
    what: &str,
    limit: Duration,
    done: impl Fn(&[quorum_core::Machine]) -> bool,
) -> f64 {
    let t = Instant::now();
    loop {
        work.follow(env.endpoints("prod").endpoints);
        let ms = env.store().machines("prod").unwrap();
        if done(&ms) && env.status("prod")["converged"] == true {
            return t.elapsed().as_secs_f64();
        }
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}: {ms:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Each machine on a host of its own: (machines, distinct hosts).
fn spread(ms: &[quorum_core::Machine]) -> (usize, usize) {
    let on: std::collections::BTreeSet<_> = ms.iter().filter_map(|m| m.host()).collect();
    (ms.len(), on.len())
}

/// A control plane on five hosts, under a client workload that checks every
/// acknowledged write: created, upgraded 3.4.23 to 3.5.1 by replacement, scaled 3 to 5
/// (seven refused: two members would have no host of their own) and back to 3, each
/// member on a host of its own throughout, then deleted with nothing left on the hosts.
#[test]
fn a_control_plane_on_hosts_is_created_upgraded_scaled_and_deleted() {
    let f = Fleet::new("hosts_cp", 5);
    let env = &f.env;
    let t = Instant::now();
    create_on_hosts(env, None);
    let created_s = t.elapsed().as_secs_f64();
    assert_eq!(spread(&env.store().machines("prod").unwrap()), (3, 3));
    let creds = Creds::fetch(env, "prod", &env.dir.path().join("creds"));
    let work = Workload::start(env.endpoints("prod").endpoints, creds.clone());
    let watch = QuorumWatch::start(env, "prod");

    env.ok(&["upgrade", "prod", "--version", NEW]);
    let upgraded_s = follow_until(env, &work, "upgraded", Duration::from_secs(300), |ms| {
        ms.len() == 3 && ms.iter().all(|m| m.version.to_string() == NEW)
    });
    assert_eq!(spread(&env.store().machines("prod").unwrap()), (3, 3));
    env.ok(&["scale", "prod", "--replicas", "5"]);
    let up_s = follow_until(env, &work, "scaled to 5", Duration::from_secs(180), |ms| {
        ms.len() == 5 && ms.iter().all(|m| !m.deleting)
    });
    assert_eq!(spread(&env.store().machines("prod").unwrap()), (5, 5));
    // Seven on five hosts: refused with the reason, never two members on one host;
    // forced, the step is refused (Blocked) instead.
    let e = env.fails(&["scale", "prod", "--replicas", "7"]);
    assert!(
        e.contains("it needs 2 new machines at once beside the 5 machines there"),
        "{e}"
    );
    env.ok(&["scale", "prod", "--replicas", "7", "--force"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = env.ok(&["status", "prod"]);
        if st.contains("no host can take another member") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the refusal was never shown:\n{st}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(spread(&env.store().machines("prod").unwrap()), (5, 5));
    env.ok(&["scale", "prod", "--replicas", "3"]);
    let down_s = follow_until(env, &work, "scaled to 3", Duration::from_secs(180), |ms| {
        ms.len() == 3
    });
    let ms = env.store().machines("prod").unwrap();
    assert_eq!(spread(&ms), (3, 3));
    // Two hosts are free now: one is removed; one with a member is refused, named.
    let used: Vec<String> = ms
        .iter()
        .filter_map(|m| m.host().map(str::to_string))
        .collect();
    let busy = env.fails(&["host", "remove", &used[0]]);
    assert!(busy.contains("still runs a member"), "{busy}");
    let free = (1..=5)
        .map(|i| format!("h{i}"))
        .find(|h| !used.contains(h))
        .unwrap();
    let removed = env.ok(&["host", "remove", &free]);
    assert!(removed.contains("removed"), "{removed}");
    let gone = env.fails(&["host", "remove", &free]);
    assert!(gone.contains("no host"), "{gone}");
    let (acked, failures, attempts) = work.finish();
    let (checks, violations) = watch.finish();
    assert!(violations.is_empty(), "quorum lost: {violations:?}");
    assert_acked(&env.endpoints("prod").endpoints, &creds, &acked);
    let listed = env.ok(&["hosts"]);
    assert!(listed.contains(NEW), "{listed}");
    env.ok(&["delete", "prod", "--yes", "--wait", "--timeout", "2m"]);
    let left: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(&["hosts", "-o", "json"])).unwrap();
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(left.iter().all(|h| h["name"] != free.as_str()), "{left:?}");
    for h in &left {
        assert!(
            h["agent"] == "ready"
                && h["report"]["members"]
                    .as_array()
                    .is_some_and(|m| m.is_empty()),
            "a member left on a host: {h}"
        );
    }
    println!(
        "on 5 hosts: created in {created_s:.1} s, upgraded by replacement in {upgraded_s:.1} s, \
         scaled 3 to 5 in {up_s:.1} s, 5 to 3 in {down_s:.1} s; workload: {attempts} writes, \
         {} acknowledged and read back, failures {failures:?}; {checks} quorum checks",
        acked.len()
    );
}

/// A member on a host whose database is damaged (its first pages overwritten, its
/// process killed): the controller restarts it through the agent, etcd exits at each
/// start, and the crash loop's event quotes why, from the log the agent keeps on the
/// host.
#[test]
fn a_crash_loop_on_a_host_is_explained_from_the_hosts_log() {
    let f = Fleet::new("hosts_crashloop", 3);
    let env = &f.env;
    create_on_hosts(env, None);
    let victim = env
        .store()
        .machines("prod")
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let host = victim.host().unwrap().to_string();
    let i: usize = host.trim_start_matches('h').parse().unwrap();
    let dir = env
        .dir
        .path()
        .join(format!("agent-{host}"))
        .join("machines")
        .join(&victim.name);
    let db = dir.join("data").join("member").join("snap").join("db");
    {
        use std::io::{Seek, Write};
        let mut file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        file.seek(std::io::SeekFrom::Start(0)).unwrap();
        file.write_all(&[0x5a; 16 * 1024]).unwrap();
        file.sync_all().unwrap();
    }
    // Its etcd, by PID, among the host's processes.
    for pid in f.net.pids(i) {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if exe.to_string_lossy().contains("etcd") {
            // SAFETY: kill(2) with a PID read just now from the host's namespace.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let t = Instant::now();
    let deadline = t + Duration::from_secs(90);
    let event = loop {
        let events = env.ok(&["events", "prod", "--last", "0"]);
        if let Some(l) = events.lines().find(|l| l.contains("crash loop")) {
            break l.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no crash loop recorded:\n{events}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    println!("after {:.1} s: {event}", t.elapsed().as_secs_f64());
    assert!(event.contains(&victim.name), "{event}");
    assert!(
        event.contains("its log ends:"),
        "the log's last words, from the host: {event}"
    );
}
