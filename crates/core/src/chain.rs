//! A chained upgrade: the road (`road::plan`) run as consecutive rollouts. The spec's
//! version is the link under way; `ControlPlane.road` holds the links still to go.
//!
//! Invariant: the next link is recorded (`Action::TakeNextLink`, one compare-and-swap
//! of the spec's version and the road) only once every machine runs the link under
//! way and serves, the link's preflight holds (`preflight`), and, unless the person
//! chose `--no-snapshot`, a snapshot taken since the link under way was recorded is
//! kept (the controller verifies a snapshot by a test restore before it records it).
//! So a crash anywhere leaves either the old link (and the rule takes the next again)
//! or the new one (and the rollout rules roll it); no machine is ever asked to run a
//! minor the road skips, since a link is only ever the road's next.

use crate::decide::*;
use crate::model::ControlPlane;
use crate::version::Version;
use serde::{Deserialize, Serialize};

/// The links of a chained upgrade still to go after the spec's version, in order (the
/// last is where the person asked to go), and when the link under way was recorded.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Road {
    /// Never empty: a road whose last link was taken is cleared.
    pub links: Vec<Version>,
    /// When the spec's version (the link under way) was recorded.
    pub link_began_unix_s: i64,
    /// Each link waits for a snapshot taken since the one before began (false:
    /// `--no-snapshot`).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub snapshots: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Road {
    /// Where the road ends.
    pub fn target(&self) -> Option<Version> {
        self.links.last().copied()
    }

    /// The road after `to` was taken (`None`: it was the last link).
    pub fn after_taking(&self, to: Version, now_unix_s: i64) -> Option<Road> {
        let rest: Vec<Version> = match self.links.split_first() {
            Some((first, rest)) if *first == to => rest.to_vec(),
            _ => self.links.clone(),
        };
        (!rest.is_empty()).then_some(Road {
            links: rest,
            link_began_unix_s: now_unix_s,
            snapshots: self.snapshots,
        })
    }
}

impl ControlPlane {
    /// Records the road's next link `to` as the spec's version (`Action::TakeNextLink`),
    /// only while the spec is at `from` and `to` is the road's next: both stores apply
    /// it inside their compare-and-swap write. False, nothing changed, otherwise.
    pub fn take_next_link(&mut self, from: Version, to: Version, now_unix_s: i64) -> bool {
        let next = self.road.as_ref().and_then(|r| r.links.first().copied());
        if self.spec.version != from || next != Some(to) {
            return false;
        }
        self.road = self
            .road
            .as_ref()
            .and_then(|r| r.after_taking(to, now_unix_s));
        self.spec.version = to;
        self.spec_version += 1;
        true
    }
}

/// How long after a failed test restore of a link's snapshot it is tried again.
pub const LINK_VERIFY_RETRY_S: i64 = 60;

/// What etcd's v2 store may hold, as far as quorum knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V2Store {
    /// Created by quorum with etcd's v2 API closed on every member from the start, so
    /// no client ever wrote to it.
    NeverOpen,
    /// Unknown: the v2 API may have been open (a control plane created before quorum
    /// closed it: etcd 3.4 opens it by default).
    MayHoldContent,
}

/// The facts a link's preflight reads (from a fresh observation, the records and the
/// link): the CLI checks the first link with it, the controller every later one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkFacts {
    /// The lowest version a machine runs.
    pub lowest: Version,
    pub to: Version,
    /// The cluster version the leader reported (`None`: not known).
    pub cluster_version: Option<Version>,
    /// Members no machine of quorum's answers for ("zombies"), by name or id.
    pub zombies: Vec<String>,
    /// Learners not yet promoted.
    pub learners: Vec<String>,
    /// Alarms, as "member: alarm".
    pub alarms: Vec<String>,
    pub v2: V2Store,
}

/// Why a link may not be taken now: a `Wait` passes by itself (the controller waits it
/// out), a `Behind` too, within etcd's version monitor's few seconds (the cluster
/// version not raised yet: a cluster just created says 3.0 until then), a `Refuse`
/// needs a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    Wait(String),
    Behind(String),
    Refuse(String),
}

impl Hold {
    pub fn why(&self) -> &str {
        match self {
            Hold::Wait(w) | Hold::Behind(w) | Hold::Refuse(w) => w,
        }
    }
}

/// The first minor that has no v2 store: etcd 3.6 refuses to start on a data directory
/// whose v2 store holds custom content (etcd's upgrade guide to 3.6; `etcdutl check
/// v2store`, since 3.5.18).
pub const NO_V2_STORE_FROM: (u32, u32) = (3, 6);

/// A link's preflight, each rule with where etcd says it. Checked in this order: the
/// first that holds the link is the answer.
pub fn preflight(f: &LinkFacts) -> Result<(), Hold> {
    let enters_minor = f.to.minor_line() > f.lowest.minor_line();
    if !f.zombies.is_empty() {
        // etcd-io/etcd#20967: members removed long ago come back as zombies in 3.6.
        return Err(Hold::Wait(format!(
            "members no machine of quorum's answers for ({}): quorum removes them first",
            f.zombies.join(", ")
        )));
    }
    if !f.learners.is_empty() {
        // etcd-io/etcd#19557: a learner's promotion seen differently by 3.5 and 3.6.
        return Err(Hold::Wait(format!(
            "a learner is not yet promoted ({})",
            f.learners.join(", ")
        )));
    }
    if !f.alarms.is_empty() {
        // etcd's upgrade guides: every member healthy before a member is upgraded.
        return Err(Hold::Wait(format!(
            "alarms are raised ({})",
            f.alarms.join(", ")
        )));
    }
    let stones = crate::road::below(f.lowest, f.to);
    if f.to > f.lowest && !stones.is_empty() {
        return Err(Hold::Refuse(format!(
            "a member runs {}, below the stepping stone to {}.{}: {}",
            f.lowest,
            f.to.major,
            f.to.minor,
            crate::road::reasons(&stones)
        )));
    }
    if enters_minor && f.cluster_version.map(Version::minor_line) != Some(f.lowest.minor_line()) {
        // etcd's cluster version is the lowest minor its members run, raised by the
        // leader once every member runs the new one (etcd's upgrade guides: "the
        // cluster version is upgraded ... once all members run" it).
        let seen = f.cluster_version.map_or("not known yet".to_string(), |v| {
            format!("{}.{}", v.major, v.minor)
        });
        return Err(Hold::Behind(format!(
            "the cluster version is {seen}; etcd raises it to {}.{} once every member runs it, and only then may a member run {}.{}",
            f.lowest.major, f.lowest.minor, f.to.major, f.to.minor
        )));
    }
    let drops_v2 =
        f.lowest.minor_line() < NO_V2_STORE_FROM && f.to.minor_line() >= NO_V2_STORE_FROM;
    if drops_v2 && f.v2 == V2Store::MayHoldContent {
        return Err(Hold::Refuse(format!(
            "etcd {}.{} refuses to start on a v2 store with content, and this control plane's v2 API may have been open (created before quorum closed it; etcd 3.4 opens it by default): check a stopped member's data with `etcdutl check v2store --data-dir DIR` (etcd 3.5.18 or later) and remove any v2 keys before going on (etcd's upgrade guide to 3.6)",
            f.to.major, f.to.minor
        )));
    }
    Ok(())
}

/// The facts of a link to `to` for a control plane as observed (what the CLI checks
/// the first link of a version change with).
pub fn link_facts(
    cp: &ControlPlane,
    machines: &[crate::model::Machine],
    observed: &crate::model::Observation,
    to: Version,
) -> LinkFacts {
    View::new(cp, machines, observed).link_facts(to)
}

impl View<'_> {
    /// The facts of a link to `to` from this observation.
    pub(crate) fn link_facts(&self, to: Version) -> LinkFacts {
        let lowest = self
            .seen
            .iter()
            .map(|s| s.machine.version)
            .min()
            .unwrap_or(self.spec().version);
        let members = self.members.into_iter().flatten();
        LinkFacts {
            lowest,
            to,
            cluster_version: self.cluster_version,
            zombies: self.orphans.iter().map(|m| self.name_of(m)).collect(),
            learners: members
                .filter(|m| m.is_learner)
                .map(|m| self.name_of(m))
                .collect(),
            alarms: self
                .alarms
                .iter()
                .map(|(id, alarm)| format!("{id:x}: {alarm}"))
                .collect(),
            v2: if self.cp.v2_api_never_open {
                V2Store::NeverOpen
            } else {
                V2Store::MayHoldContent
            },
        }
    }

    /// With no machine outdated and the size right, on a chained upgrade: once every
    /// machine serves on the link under way, the preflight holds and the snapshot is
    /// kept, record the next link.
    pub(crate) fn advance_road(&self) -> Option<Step> {
        let road = self.cp.road.as_ref()?;
        let next = *road.links.first()?;
        let op = Operation::RollingOut;
        let at = self.spec().version;
        if let Some(stopped) = self.stopped_rollout() {
            return Some(stopped);
        }
        let waiting = |why: String| Some(Step::wait(op, format!("the road to {next}: {why}")));
        for s in &self.seen {
            if s.machine.deleting || s.machine.in_place.is_some() {
                return waiting(format!("{} is still changing", s.machine.name));
            }
            let serves = s.member.is_some_and(|m| !m.is_learner && self.healthy(m));
            if !serves {
                return waiting(format!("waiting for {} to serve on {at}", s.machine.name));
            }
        }
        match preflight(&self.link_facts(next)) {
            Err(Hold::Wait(why) | Hold::Behind(why)) => return waiting(why),
            Err(Hold::Refuse(why)) => {
                return Some(Step::refuse(
                    op,
                    format!("the road to {next} stops at {at}: {why}"),
                ))
            }
            Ok(()) => {}
        }
        if road.snapshots {
            if let Some(step) = self.link_snapshot(road, at, next) {
                return Some(step);
            }
        }
        Some(Step::act(op, Action::TakeNextLink { from: at, to: next }))
    }

    /// The snapshot a link waits for: one taken after the link under way began and
    /// test-restored. None taken: take one. Taken and never test-restored: restore it.
    /// Its test restore failed: try again every `LINK_VERIFY_RETRY_S` (a restore that
    /// keeps failing holds the road, and says so). `None`: kept, go on.
    fn link_snapshot(&self, road: &Road, at: Version, next: Version) -> Option<Step> {
        let op = Operation::RollingOut;
        let since = self
            .snapshots
            .iter()
            // After the link began, not in its second: the snapshot `quorum upgrade`
            // takes before recording the road predates the link under way.
            .filter(|s| s.taken_at_unix_s > road.link_began_unix_s);
        if since.clone().any(|s| s.verified) {
            return None;
        }
        let Some(newest) = since.max_by_key(|s| s.taken_at_unix_s) else {
            return Some(
                Step::act(op, Action::TakeSnapshot { before: Some(next) })
                    .because(format!("the snapshot before the rollout {at} -> {next}")),
            );
        };
        // Never test-restored (one `quorum snapshot` took): now; failed: once a while.
        let retry = newest
            .restored_at_unix_s
            .is_none_or(|tried| self.now_unix_s >= tried + LINK_VERIFY_RETRY_S);
        if retry {
            return Some(Step::act(
                op,
                Action::VerifySnapshot {
                    id: newest.id.clone(),
                },
            ));
        }
        Some(Step::wait(
            op,
            format!(
                "the road to {next}: snapshot {} failed its test restore ({}); tried again every {LINK_VERIFY_RETRY_S} s (`quorum snapshots {}`)",
                newest.id,
                newest.restore_failed.as_deref().unwrap_or("no reason recorded"),
                self.cp.name
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn a_taken_link_leaves_the_rest_and_the_last_clears_the_road() {
        let road = Road {
            links: vec![v("3.5.33"), v("3.6.14")],
            link_began_unix_s: 10,
            snapshots: true,
        };
        let after = road.after_taking(v("3.5.33"), 99).unwrap();
        assert_eq!(after.links, vec![v("3.6.14")]);
        assert_eq!(after.link_began_unix_s, 99);
        assert_eq!(after.after_taking(v("3.6.14"), 120), None);
        // Taking a version that is not the next leaves the links as they are.
        assert_eq!(road.after_taking(v("3.6.14"), 5).unwrap().links, road.links);
    }
}
