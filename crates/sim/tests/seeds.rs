//! The simulator's seeds, in the test suite: at least 10,000 across rollouts (maxSurge 1
//! and 0), scale up, scale down and orphan cleanup, with faults, and zero violations;
//! the shared pacing policy really held removals back (drain, load balancer) and backed
//! off; the repair half met every fault it knows (disks lost, crash loops, hung members,
//! foreign data, NOSPACE, lagging members) and remediated, refused and repaired; the
//! in-place rollouts (3 and 5 members) took their steps, met new binaries that fail to
//! start, rolled back, stopped and were retried, and every step ended within its bound.

use quorum_sim::{
    replay_command, run, Config, InPlaceCounts, PacingCounts, RebuildCounts, RepairCounts,
    Scenario, IN_PLACE_END_STEPS, NOSPACE_REPAIR_STEPS,
};
use std::time::Instant;

const SEEDS: u64 = 10_000;
const THREADS: u64 = 2;

#[test]
fn ten_thousand_seeds_hold_every_invariant() {
    let t = Instant::now();
    type Tally = (
        Vec<String>,
        PacingCounts,
        RepairCounts,
        InPlaceCounts,
        RebuildCounts,
        [u64; Scenario::ALL.len()],
    );
    let results: Vec<Tally> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|k| {
                s.spawn(move || {
                    let mut bad = Vec::new();
                    let mut pacing = PacingCounts::default();
                    let mut repair = RepairCounts::default();
                    let mut in_place = InPlaceCounts::default();
                    let mut rebuilds = RebuildCounts::default();
                    let mut per = [0u64; Scenario::ALL.len()];
                    for seed in (k..SEEDS).step_by(THREADS as usize) {
                        let o = run(Config::new(seed));
                        per[Scenario::ALL.iter().position(|x| *x == o.scenario).unwrap()] += 1;
                        pacing.add(&o.pacing);
                        repair.add(&o.repair);
                        in_place.add(&o.in_place);
                        rebuilds.add(&o.rebuilds);
                        if let Some(v) = &o.violation {
                            bad.push(format!(
                                "seed {seed} ({}): {v}\n  replay: {}",
                                o.scenario.name(),
                                replay_command(&o)
                            ));
                        }
                    }
                    (bad, pacing, repair, in_place, rebuilds, per)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut pacing = PacingCounts::default();
    let mut repair = RepairCounts::default();
    let mut in_place = InPlaceCounts::default();
    let mut rebuilds = RebuildCounts::default();
    let mut per = [0u64; Scenario::ALL.len()];
    let mut failures = Vec::new();
    for (bad, p, r, i, b, n) in results {
        failures.extend(bad);
        pacing.add(&p);
        repair.add(&r);
        in_place.add(&i);
        rebuilds.add(&b);
        for (all, one) in per.iter_mut().zip(n) {
            *all += one;
        }
    }
    assert!(per.iter().all(|n| *n > 0), "every scenario ran: {per:?}");
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{SEEDS} seeds in {secs:.1}s ({:.0} seeds/s), {} violations",
        SEEDS as f64 / secs,
        failures.len()
    );
    println!("pacing: {pacing}");
    println!("repair: {repair}");
    println!("in place: {in_place}");
    println!("rebuilds: {rebuilds}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The policy was exercised, so the run cannot pass vacuously.
    assert!(pacing.paced_removals > 0, "{pacing}");
    assert!(pacing.drain_holds > 0, "{pacing}");
    assert!(pacing.lb_faults > 0, "{pacing}");
    assert!(pacing.lb_holds > 0, "{pacing}");
    assert!(pacing.backoff_holds > 0, "{pacing}");
    assert_repair_exercised(&repair);
    assert_in_place_exercised(&in_place);
    // Every majority lost was rebuilt, both ways, by a person's confirmation.
    assert!(rebuilds.quorum_losses > 0, "{rebuilds}");
    assert_eq!(rebuilds.finished, rebuilds.quorum_losses, "{rebuilds}");
    assert!(
        rebuilds.from_member > 0 && rebuilds.from_snapshot > 0,
        "{rebuilds}"
    );
    assert!(rebuilds.fenced > 0, "{rebuilds}");
}

/// Every path of the in-place step ran: steps begun, members stopped, restarted and
/// back in service; new binaries that failed to start, rollbacks, stopped rollouts and
/// the person's retries; steps abandoned (a version changed while draining, or the
/// cluster could no longer spare the member) and left to remediation; the plan's
/// version changes and the cluster version's moves; the bound on every step.
fn assert_in_place_exercised(c: &InPlaceCounts) {
    assert!(
        c.begun > 0 && c.restarts > 0 && c.stops > 0 && c.done > 0,
        "{c}"
    );
    assert!(c.bad_binaries > 0 && c.failed_starts > 0, "{c}");
    assert!(c.rollbacks > 0 && c.rolled_back > 0, "{c}");
    assert!(c.stopped_rollouts > 0 && c.retries > 0, "{c}");
    assert!(c.abandoned > 0 && c.left_to_remediation > 0, "{c}");
    assert!(c.version_changes > 0 && c.cluster_version_moves > 0, "{c}");
    // Each run checks the bound; the figure reached is in the summary.
    assert!(c.end_max_steps <= IN_PLACE_END_STEPS, "{c}");
}

/// Every repair fault happened and every path of the repair half ran: remediation,
/// its refusals (maxRetry spent, quorum at stake), the operator raising maxRetry once
/// the faults stopped, crash-loop events, markers, the NOSPACE repair within its bound.
fn assert_repair_exercised(r: &RepairCounts) {
    assert!(r.disk_losses > 0, "{r}");
    assert!(r.crash_loops > 0, "{r}");
    assert!(r.hangs > 0, "{r}");
    assert!(r.foreign_data > 0, "{r}");
    assert!(r.nospace > 0, "{r}");
    assert!(r.lagging > 0, "{r}");
    assert!(r.remediations > 0, "{r}");
    assert!(r.replacements > 0, "{r}");
    assert!(r.max_retry_refusals > 0, "{r}");
    assert!(r.max_retry_raised > 0, "{r}");
    assert!(r.quorum_refusals > 0, "{r}");
    assert!(r.crash_loop_events > 0, "{r}");
    assert!(r.markers > 0, "{r}");
    assert!(r.compactions > 0 && r.defrags > 0 && r.disarms > 0, "{r}");
    assert!(r.nospace_repaired > 0, "{r}");
    // Each run checks the bound; the figure reached is in the summary.
    assert!(r.nospace_repair_max_steps <= NOSPACE_REPAIR_STEPS, "{r}");
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [7, 1234, 99_999] {
        let a = run(Config::new(seed));
        let b = run(Config::new(seed));
        assert_eq!(a, b, "seed {seed} is not deterministic");
        // Tracing changes nothing but the text kept.
        let mut c = Config::new(seed);
        c.trace = true;
        let traced = run(c);
        assert_eq!(traced.trace_hash, a.trace_hash);
        assert!(traced.trace.contains("start "), "{}", traced.trace);
        assert!(a.faults > 0 || seed == 99_999, "faults were injected");
    }
}

#[test]
fn different_seeds_take_different_paths() {
    let hashes: std::collections::BTreeSet<u64> =
        (0..50).map(|s| run(Config::new(s)).trace_hash).collect();
    assert!(
        hashes.len() > 45,
        "only {} distinct traces of 50",
        hashes.len()
    );
}
