//! Chained upgrades in the simulated world (`quorum_core::chain`): in some seeds the
//! person asks for a version two links away (`quorum upgrade --version`), and the road
//! the core plans from the scenarios' releases is recorded: the first link as the
//! spec's version, the rest as the road, which the controller takes link by link.
//!
//! Checked: a link is recorded only while every machine runs the link before it and
//! (with snapshots on) a snapshot taken since that link began was test-restored; no
//! process ever starts on a binary more than one minor above the cluster version (a
//! minor the road skipped); a deposed controller's link is fenced; a run converges only
//! at the road's end.

use super::*;
use quorum_core::chain::Road;

/// The releases the simulated host has: the scenarios' own, and a 3.5 at the stepping
/// stone into 3.6 with a 3.6 beyond it (the simulator runs no binary).
pub(crate) const INSTALLED: [Version; 5] = [
    OLD,
    inplace::MID,
    NEW,
    Version::new(3, 5, 33),
    Version::new(3, 6, 2),
];

/// Where a chained run goes: two minors up from `OLD`, through the stone.
pub(crate) const CHAIN_TARGET: Version = Version::new(3, 6, 2);

impl World {
    /// Records the road to `to` from the members' version `from` as `quorum upgrade`
    /// does (`road::plan`): the first link the spec's, the rest the road. The control
    /// plane was created by a quorum that closes the v2 API, so 3.6 may be entered.
    pub(crate) fn record_road(&mut self, from: Version, to: Version) {
        let links = match quorum_core::road::plan(from, to, &INSTALLED) {
            Ok(links) => links,
            Err(e) => return self.violate(format!("no road {from} -> {to}: {e}")),
        };
        let Some((first, rest)) = links.split_first() else {
            return self.violate(format!("an empty road {from} -> {to}"));
        };
        self.cp.spec.version = *first;
        self.cp.v2_api_never_open = true;
        self.cp.road = (!rest.is_empty()).then(|| Road {
            links: rest.to_vec(),
            link_began_unix_s: self.now_unix_s(),
            snapshots: true,
        });
    }

    /// The controller's `TakeNextLink`: a store write (fenced for a deposed controller),
    /// checked against the ground truth first.
    pub(crate) fn take_next_link(&mut self, from: Version, to: Version, fenced: bool) -> Answer {
        if fenced {
            return Answer::Fenced;
        }
        self.check_link(from, to);
        let now = self.now_unix_s();
        if self.cp.take_next_link(from, to, now) {
            self.in_place.links_taken += 1;
            self.note(format!("the road moves on: etcd {from} -> {to}"));
        }
        Answer::Done
    }

    /// A link taken only once every machine runs `from` and a snapshot since the link
    /// under way began was test-restored.
    fn check_link(&mut self, from: Version, to: Version) {
        let behind: Vec<String> = self
            .machines
            .iter()
            .filter(|m| self.procs.get(&m.name).and_then(|p| p.binary) != Some(from))
            .map(|m| m.name.clone())
            .collect();
        if !behind.is_empty() {
            self.violate(format!(
                "the link to {to} was taken while {behind:?} do not run {from}"
            ));
        }
        let Some(road) = self.cp.road.as_ref().filter(|r| r.snapshots) else {
            return;
        };
        let began = road.link_began_unix_s;
        if !self
            .snapshots
            .iter()
            .any(|s| s.verified && s.taken_at_unix_s > began)
        {
            self.violate(format!(
                "the link to {to} was taken without a verified snapshot since {began}"
            ));
        }
    }

    /// A binary about to start never enters a minor beyond the next one of the
    /// cluster version: that minor was skipped.
    pub(crate) fn check_no_skipped_minor(&mut self, name: &str, binary: Version) {
        let cv = self.cluster_version;
        if binary.major == cv.major && binary.minor > cv.minor + 1 {
            self.violate(format!(
                "{name} started on etcd {binary} while the cluster version is {}.{}: a minor skipped",
                cv.major, cv.minor
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chained(scenario: Scenario, seed: u64) -> Config {
        let mut c = Config::new(seed);
        c.scenario = scenario;
        c.chain = true;
        c.trace = true;
        c
    }

    /// A chained run, by replacement and in place, ends at the road's end with both
    /// links taken after their snapshots, whatever the faults on the way.
    #[test]
    fn a_chained_upgrade_runs_its_road_to_the_end() {
        for scenario in [Scenario::Rollout, Scenario::InPlace] {
            for seed in 0..6 {
                let o = run(chained(scenario, seed));
                assert_eq!(o.violation, None, "{}", o.trace);
                assert!(o.in_place.links_taken >= 1, "{}", o.trace);
                assert!(
                    o.trace.contains(&format!("-> {CHAIN_TARGET}")),
                    "{}",
                    o.trace
                );
            }
        }
    }

    /// The checks see a link taken too early and a start in a skipped minor.
    #[test]
    fn the_checker_sees_an_early_link_and_a_skipped_minor() {
        let mut w = World::new(chained(Scenario::Rollout, 1));
        let next = w.cp.road.as_ref().and_then(|r| r.links.first().copied());
        let at = w.cp.spec.version;
        assert_eq!(next, Some(CHAIN_TARGET), "{}", w.trace);
        // Every member still runs OLD, no snapshot taken since the link began.
        let _ = w.take_next_link(at, CHAIN_TARGET, false);
        let v = w.violation.clone().unwrap_or_default();
        assert!(v.contains("do not run"), "{v}");
        let mut w = World::new(chained(Scenario::Rollout, 1));
        w.check_no_skipped_minor("sim-1", CHAIN_TARGET);
        let v = w.violation.clone().unwrap_or_default();
        assert!(v.contains("a minor skipped"), "{v}");
    }
}
