//! A sharded fleet (`quorum controller --shards N`): three replicas share six shards of
//! a fleet of 1-member control planes; one replica is killed -9 in the middle of the
//! fleet's rollout, its share is taken over, every rollout completes and no change is
//! made twice (the store's history says so); a replica that joins takes a share; a
//! replica started with another shard count is refused and says what to do; `status`
//! and `list` name each control plane's owner, and a deletion is finished by it.

use super::store_faults::assert_each_change_once;
use super::*;
use std::collections::{BTreeMap, BTreeSet};

const SHARDS: u32 = 6;
const SHARDS_ARG: &str = "6";

/// Who leads each shard now.
fn shard_leaders(env: &Env) -> BTreeMap<String, String> {
    env.store()
        .scoped_leaders("shard/")
        .unwrap()
        .into_iter()
        .map(|(scope, l)| (scope, l.identity))
        .collect()
}

/// The replica leading control plane `cp`'s shard.
fn owner(env: &Env, cp: &str) -> Option<String> {
    env.store().controller_of(cp).unwrap().0.map(|l| l.identity)
}

#[test]
fn a_sharded_fleet_survives_a_replica_killed_mid_rollout_and_takes_a_joiner_in() {
    let (env, _mgmt) = ha_env("ha-shards");
    let shards = ["--shards", SHARDS_ARG];
    let mut replicas: BTreeMap<&str, Replica> = ["r1", "r2", "r3"]
        .into_iter()
        .map(|id| (id, Replica::start_with(&env, id, &[], &shards)))
        .collect();
    // Every shard is led, and every replica leads some: 2 each.
    wait_for("the shards to be spread", Duration::from_secs(30), || {
        let l = shard_leaders(&env);
        let holders: BTreeSet<&String> = l.values().collect();
        l.len() == SHARDS as usize && holders.len() == 3
    });
    // A replica with another count is refused at once, and told what to do.
    let e = env.fails(&[
        "controller",
        "--metrics-addr",
        "off",
        "--identity",
        "odd",
        "--shards",
        "4",
    ]);
    assert!(e.contains("run with --shards 6"), "{e}");

    // Six 1-member control planes, in several shards.
    let names: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    for n in &names {
        env.create_and_wait(n, 1, OLD);
    }
    let in_shards: BTreeSet<u32> = names
        .iter()
        .map(|n| quorum_core::shards::shard_of(n, SHARDS))
        .collect();
    assert!(in_shards.len() >= 3, "{in_shards:?}");
    // `status` and `list` name the replica that owns each: its shard's leader.
    for n in &names {
        // A shard's lease can lapse for a moment on a loaded machine (2 s TTL): its
        // leader is waited for, and status must name the same one, read after it.
        let mut own = None;
        wait_for(
            &format!("{n}'s shard to be led"),
            Duration::from_secs(30),
            || {
                own = owner(&env, n);
                own.is_some()
            },
        );
        let own = own.expect("its shard is led");
        let s = env.status(n);
        assert_eq!(s["controllerLeader"]["identity"], own.as_str(), "{s:#}");
        let shard = quorum_core::shards::shard_of(n, SHARDS);
        assert_eq!(s["shard"]["index"], shard, "{s:#}");
        let table = env.ok(&["status", n]);
        assert!(table.contains(&format!("shard {shard} of 6")), "{table}");
        wait_for(
            &format!("{n}'s controller to publish"),
            Duration::from_secs(10),
            || env.status(n)["controller"]["identity"] == own.as_str(),
        );
    }
    let wide = env.ok(&["list", "-o", "wide"]);
    for n in &names {
        let own = owner(&env, n).unwrap();
        assert!(
            wide.lines()
                .any(|l| l.starts_with(n.as_str()) && l.contains(own.as_str())),
            "{wide}"
        );
    }

    // The whole fleet upgraded at once; in the middle of it, the owner of a control
    // plane whose new member has just joined is killed -9.
    let after: BTreeMap<&String, i64> = names
        .iter()
        .map(|n| (n, env.store().last_event_id(n).unwrap()))
        .collect();
    for n in &names {
        env.ok(&["upgrade", n, "--version", NEW]);
    }
    let mut mid: Option<String> = None;
    wait_for("a new member to join", Duration::from_secs(120), || {
        let store = env.store();
        mid = names
            .iter()
            .find(|n| {
                store
                    .events_after(n, after[n], 10_000)
                    .unwrap()
                    .iter()
                    .any(|e| e.ok && e.kind == EventKind::Action(ActionKind::AddLearner))
            })
            .cloned();
        mid.is_some()
    });
    let mid = mid.unwrap();
    let victim = owner(&env, &mid).expect("its shard is led");
    let victim_shards: Vec<String> = shard_leaders(&env)
        .into_iter()
        .filter(|(_, l)| *l == victim)
        .map(|(s, _)| s)
        .collect();
    replicas.get_mut(victim.as_str()).unwrap().kill9();
    let killed = Instant::now();
    wait_for(
        "the dead replica's shards to move",
        Duration::from_secs(30),
        || {
            let l = shard_leaders(&env);
            l.len() == SHARDS as usize && l.values().all(|id| *id != victim)
        },
    );
    println!(
        "{victim} (shards {victim_shards:?}) killed -9 mid-rollout of {mid}: its shards led by \
         the others {} ms later (lease TTL {TTL})",
        killed.elapsed().as_millis()
    );
    for n in &names {
        env.wait_status(n, "the rollout to finish", Duration::from_secs(300), |s| {
            s["converged"] == true && machine_versions(s) == vec![NEW; 1]
        });
    }
    // No change made twice, by whichever replica made it.
    for n in &names {
        assert_each_change_once(&env, n);
    }
    let by: BTreeSet<String> = names
        .iter()
        .flat_map(|n| history(&env, n))
        .filter(|(_, step, _)| step.is_some())
        .map(|(by, _, _)| by)
        .collect();
    assert!(by.len() >= 2, "steps by {by:?}");

    // A replica joins: it is given a share, which the others hand over.
    let joined = Instant::now();
    replicas.insert("r4", Replica::start_with(&env, "r4", &[], &shards));
    wait_for(
        "the joiner to lead its share",
        Duration::from_secs(30),
        || {
            let l = shard_leaders(&env);
            l.len() == SHARDS as usize && l.values().filter(|id| *id == "r4").count() == 2
        },
    );
    println!(
        "r4 joined: it leads its 2 shards {} ms after it started",
        joined.elapsed().as_millis()
    );
    // A deletion is finished by the control plane's shard's replica.
    env.ok(&["delete", "s0", "--yes", "--wait", "--timeout", "60s"]);
    assert!(env.store().control_plane("s0").unwrap().is_none());
    let left: Vec<&str> = replicas
        .iter()
        .filter(|(_, r)| r.child.is_some())
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    for id in left {
        assert!(
            replicas[id]
                .log_text()
                .contains("shards assigned to this replica"),
            "{}",
            replicas[id].log_text()
        );
    }
}

/// A replica that crashes in the middle of handing a shard over (`SHARDING` failpoints:
/// its passes stopped but its lease not revoked, or revoked): the joiner takes the shard
/// when the lease is gone, the crashed replica's other shard when its lease expires,
/// and the control planes of both are upgraded with no change made twice. Both points
/// run at once, each on its own management etcd.
#[test]
fn a_replica_crashing_mid_handover_loses_no_shard_and_repeats_no_step() {
    let runs: Vec<_> = quorum_controller::failpoints::SHARDING
        .into_iter()
        .map(|point| std::thread::spawn(move || handover_crash(point)))
        .collect();
    for r in runs {
        let line = r.join().expect("the scenario passed");
        println!("{line}");
    }
}

fn handover_crash(point: &'static str) -> String {
    let (env, _mgmt) = ha_env(&format!("ha-{point}"));
    let shards = ["--shards", "2"];
    let fp = format!("{point}=return");
    let mut r1 = Replica::start_with(&env, "r1", &[("FAILPOINTS", fp.as_str())], &shards);
    wait_for("r1 to lead both shards", Duration::from_secs(30), || {
        let l = shard_leaders(&env);
        l.len() == 2 && l.values().all(|id| id == "r1")
    });
    // One control plane in each shard; with r2 alive, shard 1 is r2's (sorted: r1, r2).
    let name_in = |shard: u32| {
        (0..100)
            .map(|i| format!("h{i}"))
            .find(|n| quorum_core::shards::shard_of(n, 2) == shard)
            .expect("a name in the shard")
    };
    let (stays, moves) = (name_in(0), name_in(1));
    for n in [&stays, &moves] {
        env.create_and_wait(n, 1, OLD);
    }
    let r2 = Replica::start_with(&env, "r2", &[], &shards);
    let code = r1.exit_code_within(Duration::from_secs(30));
    let crashed = Instant::now();
    assert_eq!(
        code,
        Some(quorum_controller::failpoints::CRASH_EXIT_CODE),
        "r1 should crash at {point}:\n{}",
        r1.log_text()
    );
    wait_for("r2 to lead both shards", Duration::from_secs(30), || {
        let l = shard_leaders(&env);
        l.len() == 2 && l.values().all(|id| id == "r2")
    });
    let took_over_ms = crashed.elapsed().as_millis();
    for n in [&stays, &moves] {
        env.ok(&["upgrade", n, "--version", NEW]);
    }
    for n in [&stays, &moves] {
        env.wait_status(n, "the rollout to finish", Duration::from_secs(180), |s| {
            s["converged"] == true && machine_versions(s) == vec![NEW; 1]
        });
        assert_each_change_once(&env, n);
    }
    assert!(
        r2.log_text().contains("shards assigned to this replica"),
        "{}",
        r2.log_text()
    );
    format!("{point}: r1 crashed handing shard 1 over; r2 led both shards {took_over_ms} ms later, both control planes upgraded")
}
