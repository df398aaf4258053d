//! In-place rollouts on real etcd processes (`rollout.strategy: InPlace`): the same
//! machines, data directories and members, restarted one at a time on the new binary,
//! followers first and the leader last, with the cluster version moving only once every
//! member runs the new minor; and a release that cannot start, rolled back.

mod common;
#[path = "inplace/support.rs"]
mod inplace;
#[path = "repair/support.rs"]
mod support;

use common::*;
use inplace::*;
use std::time::{Duration, Instant};
use support::{MajorityWatch, Workload};

/// `inPlace.timeout` of the failed-restart test: the least allowed, so it runs fast.
const SHORT_IN_PLACE_TIMEOUT_S: u64 = 5;

/// 3.4.23 -> 3.5.0 -> 3.5.1 in place on `replicas` members, under a client workload:
/// every key written before and during is intact, the cluster version moves to 3.5 only
/// once every member runs 3.5, the members, data directories and markers are the same
/// machines' before and after, no membership step is taken, followers go first.
fn in_place_3_4_to_3_5_1(test: &str, replicas: u32) {
    let mut env = Env::new(test);
    let cp = "ip";
    env.start_controller();
    create_in_place(&env, cp, replicas, V3_4_23, "");
    let keys = write_keys(&env.endpoints(cp), "k/", 500);
    let before = identity(&env, cp);
    let machines: Vec<String> = before.members.keys().cloned().collect();
    let work = Workload::start(&env, cp, "w/", None);
    work.wait_more_acked(20, Duration::from_secs(30));
    let majority = MajorityWatch::start(&env, cp);
    let versions = VersionWatch::start(&env, cp);

    let mut took = Vec::new();
    for (version, line) in [(V3_5_0, (3, 5)), (V3_5_1, (3, 5))] {
        let from = last_event_id(&env, cp);
        let t = Instant::now();
        upgrade_and_wait(&env, cp, version);
        took.push((version, t.elapsed()));
        let s = env.wait_status(
            cp,
            "the cluster version 3.5",
            Duration::from_secs(30),
            |s| s["clusterVersion"] == format!("{}.{}", line.0, line.1),
        );
        assert_eq!(
            machine_versions(&s),
            vec![version; replicas as usize],
            "{s:#}"
        );
        let events = events_after(&env, cp, from);
        assert_in_place_order(&events, &machines);
        assert_no_membership_step(&events);
        // More writes were acknowledged during the rollout.
        work.wait_more_acked(20, Duration::from_secs(30));
    }

    let samples = versions.finish();
    let mixed = assert_cluster_version_moved_last(&samples, (3, 4), (3, 5));
    assert_membership_constant(&samples, &before.member_ids());
    majority.finish_with_majority();
    let tally = work.finish(&env, cp);
    assert_keys(&env.endpoints(cp), "k/", &keys);
    let after = identity(&env, cp);
    assert_eq!(after, before, "the same members, data and markers");
    let first = env.store().events_after(cp, 0, 100_000).unwrap();
    let allocations = first
        .iter()
        .filter(|e| e.ok && kind_is(e, "allocate-machine"))
        .count();
    assert_eq!(allocations, replicas as usize, "{}", history(&first));
    println!(
        "{test}: {} keys and {} acknowledged writes intact; {} samples ({mixed} mixed on 3.4); {}",
        keys.len(),
        tally.acked.len(),
        samples.len(),
        took.iter()
            .map(|(v, d)| format!("to {v} in {:.1}s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[test]
fn in_place_3_members_3_4_23_to_3_5_0_to_3_5_1() {
    in_place_3_4_to_3_5_1("inplace-3", 3);
}

#[test]
fn in_place_5_members_3_4_23_to_3_5_0_to_3_5_1() {
    in_place_3_4_to_3_5_1("inplace-5", 5);
}

/// A release that exits at once: the first member restarted on it is rolled back to
/// 3.4.23 once `inPlace.timeout` has passed, the cluster keeps a majority and answers
/// quorum reads throughout, the history and `status` say why the rollout stopped; once
/// the release is fixed, a retry finishes the rollout.
#[test]
fn a_release_that_cannot_start_is_rolled_back() {
    let mut env = Env::new("inplace-rollback");
    let cp = "rb";
    let bins = EtcdDir::new(env.dir.path());
    bins.install_real(V3_4_23);
    bins.install_broken(V3_5_1);
    env.start_controller_with(&[bins.var()]);
    let path = manifest(
        &env,
        cp,
        3,
        V3_4_23,
        &format!("timeout: {SHORT_IN_PLACE_TIMEOUT_S}s"),
    );
    bins.ok(
        &env,
        &[
            "apply",
            "-f",
            path.to_str().unwrap(),
            "--wait",
            "--timeout",
            CREATE_TIMEOUT,
        ],
    );
    let keys = write_keys(&env.endpoints(cp), "k/", 300);
    let before = identity(&env, cp);
    let majority = MajorityWatch::start(&env, cp);
    let from = last_event_id(&env, cp);
    let t = Instant::now();
    bins.ok(&env, &["upgrade", cp, "--version", V3_5_1]);
    // While the member is down on the broken release, the others serve quorum reads.
    env.wait_status(
        cp,
        "a member restarting on the broken release",
        Duration::from_secs(60),
        |s| {
            s["machines"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["inPlace"]["phase"] == "restarting")
        },
    );
    assert_keys(&env.endpoints(cp), "k/", &keys);

    let s = env.wait_status(
        cp,
        "the rollout stopped by a rollback",
        Duration::from_secs(120),
        |s| blocked(s).0,
    );
    let stopped_after = t.elapsed();
    let (_, message) = blocked(&s);
    let events = events_after(&env, cp, from);
    let h = history(&events);
    // One machine was tried, and it is back on 3.4.23.
    let begun: Vec<&str> = events
        .iter()
        .filter(|e| e.ok && kind_is(e, "begin-in-place"))
        .map(|e| e.machine.as_deref().unwrap())
        .collect();
    assert_eq!(begun.len(), 1, "{h}");
    let victim = begun[0];
    assert!(
        message.contains(&format!(
            "rollout stopped: {victim} was rolled back to etcd {V3_4_23}"
        )),
        "{message}\n{s:#}"
    );
    assert!(message.contains("--retry"), "{message}");
    assert_eq!(machine_versions(&s), vec![V3_4_23; 3], "{s:#}");
    assert_eq!(s["clusterVersion"], "3.4", "{s:#}");
    let row = s["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == victim)
        .unwrap();
    assert_eq!(row["inPlace"]["phase"], "rolled-back", "{row:#}");
    assert_eq!(row["inPlace"]["to"], V3_5_1, "{row:#}");
    // It was started on the broken release, and rolled back only after the timeout.
    let restarting = events
        .iter()
        .find(|e| e.ok && kind_is(e, "set-in-place-phase") && e.message.contains(V3_5_1))
        .unwrap_or_else(|| panic!("{victim} never recorded on {V3_5_1}:\n{h}"));
    let rollback = events
        .iter()
        .find(|e| e.ok && kind_is(e, "set-in-place-phase") && e.message.starts_with("roll "))
        .unwrap_or_else(|| panic!("no rollback:\n{h}"));
    assert!(
        rollback.message.contains(&format!(
            "roll {victim} back to etcd {V3_4_23} (not serving on etcd {V3_5_1}"
        )),
        "{h}"
    );
    let waited_ms = rollback.at_ms - restarting.at_ms;
    assert!(
        waited_ms >= (SHORT_IN_PLACE_TIMEOUT_S * 1000) as i64,
        "rolled back {waited_ms} ms after the restart:\n{h}"
    );
    let starts_between = events
        .iter()
        .filter(|e| {
            kind_is(e, "start-machine")
                && e.machine.as_deref() == Some(victim)
                && e.id > restarting.id
                && e.id < rollback.id
        })
        .count();
    assert!(starts_between >= 1, "never started on {V3_5_1}:\n{h}");
    assert!(
        events.iter().any(|e| e.ok
            && kind_is(e, "end-in-place")
            && e.machine.as_deref() == Some(victim)
            && e.id > rollback.id),
        "the rollback never ended:\n{h}"
    );
    assert_no_membership_step(&events);
    // The cluster serves: a quorum read sees every key, and the victim is itself.
    assert_keys(&env.endpoints(cp), "k/", &keys);
    assert_eq!(identity(&env, cp), before);
    // It stays stopped: nothing more is begun while the release is broken.
    let later = env.status(cp);
    assert!(blocked(&later).0, "{later:#}");
    assert_eq!(
        events_after(&env, cp, from)
            .iter()
            .filter(|e| e.ok && kind_is(e, "begin-in-place"))
            .count(),
        1
    );

    // The release is fixed: a retry finishes the rollout.
    bins.install_real(V3_5_1);
    let t = Instant::now();
    bins.ok(
        &env,
        &[
            "upgrade",
            cp,
            "--retry",
            "--wait",
            "--timeout",
            ROLLOUT_TIMEOUT,
        ],
    );
    let retried_in = t.elapsed();
    let s = env.status(cp);
    assert_eq!(machine_versions(&s), vec![V3_5_1; 3], "{s:#}");
    assert!(!blocked(&s).0, "{s:#}");
    majority.finish_with_majority();
    assert_keys(&env.endpoints(cp), "k/", &keys);
    assert_eq!(identity(&env, cp), before);
    assert_no_membership_step(&events_after(&env, cp, from));
    println!(
        "rolled back and stopped {:.1}s after the upgrade; retried rollout took {:.1}s",
        stopped_after.as_secs_f64(),
        retried_in.as_secs_f64()
    );
}
