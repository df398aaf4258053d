//! Members on hosts: placement, a lost host, a spare host removed.

use super::*;

fn hosts_world(scenario: Scenario) -> World {
    World::new(Config {
        hosts: true,
        ..config(scenario, false)
    })
}

/// Members on hosts are placed by the core: each on a host of its own, never two in
/// zone a (h1 and h2), which a 3-member control plane can lose only one of.
#[test]
fn members_on_hosts_are_placed_one_per_host_and_domain() {
    let w = hosts_world(Scenario::ScaleDown);
    let hosts: Vec<&str> = w
        .machines
        .iter()
        .map(|m| m.placement.as_ref().expect("placed").host.as_str())
        .collect();
    let distinct: BTreeSet<&str> = hosts.iter().copied().collect();
    assert_eq!(distinct.len(), hosts.len(), "{hosts:?}");
    let zone_a = hosts.iter().filter(|h| ["h1", "h2"].contains(h)).count();
    assert!(zone_a <= 1, "{hosts:?}");
    assert!(w.violation.is_none(), "{:?}", w.violation);
}

/// A lost host: its processes stop, every call to its agent fails, and its machines
/// are observed as the hosts provider reports a silent host (taken to run, no version).
#[test]
fn a_lost_host_answers_nothing_and_its_members_are_judged_by_etcd() {
    let mut w = hosts_world(Scenario::Rollout);
    w.host_fault(1_000);
    let Some(down) = w.down_host().map(str::to_string) else {
        panic!("a host was lost: {}", w.trace);
    };
    let victim = w
        .machines
        .iter()
        .find(|m| m.placement.as_ref().is_some_and(|p| p.host == down))
        .map(|m| m.name.clone())
        .unwrap();
    assert!(!w.procs[&victim].running);
    let start = Action::StopMachine {
        machine: victim.clone(),
    };
    assert!(matches!(w.perform(&start, false), Answer::Failed(_)));
    let obs = w.observe();
    let seen = &obs.machines[&victim];
    assert_eq!(seen.process, ProcessState::Running, "as last seen");
    assert!(seen.status.is_none(), "etcd does not hear it");
    assert_eq!(seen.running_version, None);
    // A new machine goes elsewhere.
    let m = w.alloc_machine(false, NEW, None).unwrap();
    assert_ne!(m.placement.unwrap().host, down);
    assert!(w.violation.is_none(), "{:?}", w.violation);
}

/// Rollouts on hosts with hosts lost along the way: every invariant holds and every
/// run converges once the faults stop.
/// An operator removes a spare host mid-run: it is marked, placement gives it nothing
/// while marked, and it is gone a few steps later; the run converges on the rest.
#[test]
fn a_spare_host_removed_mid_run_is_never_placed_on() {
    let (_, removed) = hosts_runs(40, &[Scenario::Rollout, Scenario::ScaleUp]);
    assert!(removed >= 30, "only {removed} of 40 runs removed a host");
}

#[test]
fn rollouts_on_hosts_survive_lost_hosts() {
    let scenarios = [
        Scenario::Rollout,
        Scenario::RolloutSurge0,
        Scenario::InPlace,
    ];
    let (lost, _) = hosts_runs(300, &scenarios);
    assert!(lost > 50, "only {lost} hosts lost in 300 runs");
}

/// Seeds `0..seeds` on hosts, the scenarios in turn, each free of violations; the
/// hosts lost and removed in all.
fn hosts_runs(seeds: u64, scenarios: &[Scenario]) -> (u64, u64) {
    let (mut lost, mut removed) = (0, 0);
    for seed in 0..seeds {
        let mut c = Config::new(seed);
        c.scenario = scenarios[seed as usize % scenarios.len()];
        c.hosts = true;
        let o = run(c);
        assert!(
            o.violation.is_none(),
            "{:?}: {}",
            o.violation,
            replay_command(&o)
        );
        lost += o.hosts_lost;
        removed += o.hosts_removed;
    }
    (lost, removed)
}

/// One host per replica: the rollout by replacement has no host for its surge machine.
/// The core refuses it (Blocked) with the ways out, remediation still replaces a
/// member on its own host (its predecessor's, once that one's member and process are
/// gone), and the person's cancel (while no member changed) or switch to in place
/// ends every run converged (unless remediation replaced every old member first).
#[test]
fn a_rollout_with_no_spare_host_is_refused_then_cancelled_or_switched() {
    let (mut cancelled, mut switched) = (0, 0);
    for k in 0..16u64 {
        let mut c = Config::new(k * 8);
        c.scenario = Scenario::Rollout;
        c.hosts = true;
        c.tight_hosts = true;
        c.trace = true;
        let o = run(c);
        assert!(
            o.violation.is_none(),
            "{:?}: {}",
            o.violation,
            replay_command(&o)
        );
        let refused = o
            .trace
            .contains("refuses: not adding a machine: no host can take");
        assert!(refused, "seed {}: never refused", k * 8);
        cancelled += usize::from(o.trace.contains("OPERATOR cancels the stuck rollout"));
        switched += usize::from(o.trace.contains("OPERATOR switches the stuck rollout"));
    }
    assert!(
        cancelled >= 6 && switched >= 4,
        "{cancelled} cancelled, {switched} switched"
    );
}
