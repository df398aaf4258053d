//! The road between etcd's minor versions: the release every member must run before a
//! control plane may move to the next minor (its stepping stone), each with what goes
//! wrong below it and where etcd says so.
//!
//! Invariant: `check_version_change` lets a control plane into a new minor only from a
//! release at or above that minor's every stepping stone; a move that skips a minor or
//! starts below a stone is refused, naming the release to go to first and why.
//!
//! Sources, checked in etcd-io/etcd (CHANGELOG/CHANGELOG-3.5.md, each fix under the
//! heading of the first release that has it) and etcd-io/website
//! (content/en/docs/v3.6/upgrades/upgrade_3_6.md, blog/2025/*), 2026-08.

use crate::version::Version;

/// A release every member must run before a control plane moves to the minor `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SteppingStone {
    /// The minor line it leads to, as (major, minor).
    pub to: (u32, u32),
    pub at_least: Version,
    /// What goes wrong when a control plane moves on from below it, in a few words.
    pub why: &'static str,
    /// Where etcd says so.
    pub source: &'static str,
}

/// The stepping stones etcd's own documents name. A row per reason: the stone of a line
/// is the highest `at_least` among its rows; each row below a member's release is a
/// reason given when it is refused.
pub const STEPPING_STONES: &[SteppingStone] = &[
    SteppingStone {
        to: (3, 6),
        at_least: Version::new(3, 5, 20),
        why: "a learner's promotion was kept in the v2 store only, so 3.6 (which reads the v3 store) finds too many learners and the upgrade fails",
        source: "etcd-io/etcd#19557, fixed by #19563 in 3.5.20",
    },
    SteppingStone {
        to: (3, 6),
        at_least: Version::new(3, 5, 24),
        why: "in a replacement upgrade a new member can take that wrong membership from an older member's snapshot",
        source: "etcd-io/etcd#20793, fixed by #20797 in 3.5.24",
    },
    SteppingStone {
        to: (3, 6),
        at_least: Version::new(3, 5, 26),
        why: "members removed long ago come back from the v3 store as zombies and take part in consensus",
        source: "etcd-io/etcd#20967, fixed by #20995 in 3.5.26",
    },
    SteppingStone {
        to: (3, 6),
        at_least: Version::new(3, 5, 32),
        why: "etcd's guide requires it: `etcdutl check v2store` reads the WAL too from there, and 3.6 refuses to start on v2 content",
        source: "etcd's upgrade guide to 3.6 (\"all of your 3.5 members are updated to 3.5.32 or later\"), #21889",
    },
];

/// The release every member must run before moving to `to`'s minor, if etcd names one.
pub fn stone(to: Version) -> Option<Version> {
    STEPPING_STONES
        .iter()
        .filter(|s| s.to == to.minor_line())
        .map(|s| s.at_least)
        .max()
}

/// The reasons a control plane at `from` may not move to `to`'s minor yet: every
/// stone of that minor above `from`. Empty when `to` stays in `from`'s minor.
pub fn below(from: Version, to: Version) -> Vec<&'static SteppingStone> {
    if to.minor_line() == from.minor_line() {
        return Vec::new();
    }
    STEPPING_STONES
        .iter()
        .filter(|s| s.to == to.minor_line() && from < s.at_least)
        .collect()
}

/// The reasons, in one sentence each, joined for an error.
pub fn reasons(stones: &[&SteppingStone]) -> String {
    stones
        .iter()
        .map(|s| format!("below {}: {} ({})", s.at_least, s.why, s.source))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why no road leads from one release to another with what is installed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoadError {
    #[error("etcd {from} -> {to} changes the major version; quorum supports etcd 3 only")]
    ChangesMajor { from: Version, to: Version },
    #[error("the road {from} -> {to} passes through {major}.{minor}, and no etcd {major}.{minor}.x is installed (`quorum versions add` adds one)")]
    LineNotInstalled {
        from: Version,
        to: Version,
        major: u32,
        minor: u32,
    },
    #[error("the road {from} -> {to} enters {entering_major}.{entering_minor} only from {stone} or later, and the newest installed {major}.{minor} is {newest} ({reasons}); `quorum versions add` a newer {major}.{minor} release", entering_major = entering.major, entering_minor = entering.minor, major = newest.major, minor = newest.minor)]
    NoStone {
        from: Version,
        to: Version,
        entering: Version,
        stone: Version,
        newest: Version,
        reasons: String,
    },
}

/// The releases a control plane at `from` (its lowest member's) passes through to reach
/// `to`, one rollout each, `to` last. Each link enters at most one minor beyond the one
/// before, and only from at or above that minor's stepping stone; a link that passes a
/// minor is the newest installed release of it (etcd's guides: the latest patch before
/// the next minor). A move within a minor, or down, is the one link `to` (the version
/// rules say whether it may be taken).
pub fn plan(from: Version, to: Version, installed: &[Version]) -> Result<Vec<Version>, RoadError> {
    if from.major != to.major {
        return Err(RoadError::ChangesMajor { from, to });
    }
    if to.minor_line() <= from.minor_line() {
        return Ok(vec![to]);
    }
    let newest_of = |minor: u32| {
        installed
            .iter()
            .copied()
            .filter(|v| v.minor_line() == (from.major, minor))
            .max()
    };
    let mut links = Vec::new();
    let mut at = from;
    for minor in from.minor + 1..=to.minor {
        let entering = if minor == to.minor {
            to
        } else {
            newest_of(minor).ok_or(RoadError::LineNotInstalled {
                from,
                to,
                major: from.major,
                minor,
            })?
        };
        if let Some(stone) = stone(entering).filter(|s| at < *s) {
            // A patch step within the current minor first, to its newest release.
            let newest = newest_of(at.minor).unwrap_or(at).max(at);
            if newest < stone {
                let reasons = reasons(&below(newest, entering));
                return Err(RoadError::NoStone {
                    from,
                    to,
                    entering,
                    stone,
                    newest,
                    reasons,
                });
            }
            links.push(newest);
        }
        links.push(entering);
        at = entering;
    }
    Ok(links)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The road planner: what is installed, the road planned or why there is none.
    #[test]
    fn the_road_is_planned_through_the_newest_patch_and_every_stone() {
        let vs = |list: &str| -> Vec<Version> {
            list.split_whitespace()
                .map(|s| s.parse().unwrap())
                .collect()
        };
        let here = vs("3.4.23 3.5.0 3.5.1 3.5.16 3.5.30");
        let later = vs("3.4.23 3.5.16 3.5.30 3.5.33 3.6.0 3.6.14");
        type Row = (
            &'static str,
            &'static str,
            &'static str,
            Result<&'static str, &'static str>,
        );
        let rows: &[Row] = &[
            // Within a minor, or down: one link.
            ("3.5.16", "3.5.30", "here", Ok("3.5.30")),
            ("3.5.30", "3.5.16", "here", Ok("3.5.16")),
            ("3.5.30", "3.4.23", "here", Ok("3.4.23")),
            // One minor up, no stone for 3.5: one link.
            ("3.4.23", "3.5.30", "here", Ok("3.5.30")),
            // Two minors: through the newest 3.5, which must be 3.6's stone or above.
            ("3.4.23", "3.6.14", "later", Ok("3.5.33 3.6.14")),
            (
                "3.4.23",
                "3.6.0",
                "here",
                Err("newest installed 3.5 is 3.5.30"),
            ),
            (
                "3.4.23",
                "3.6.0",
                "no 3.5",
                Err("no etcd 3.5.x is installed"),
            ),
            // Into 3.6 from below its stone: the newest 3.5 first.
            ("3.5.16", "3.6.14", "later", Ok("3.5.33 3.6.14")),
            ("3.5.33", "3.6.0", "later", Ok("3.6.0")),
            // ... and none installed that is high enough: said, with the reasons.
            (
                "3.5.16",
                "3.6.0",
                "stale",
                Err("newest installed 3.5 is 3.5.30"),
            ),
            ("3.4.23", "3.6.0", "stale", Err("#21889")),
            ("3.5.30", "4.0.0", "here", Err("major")),
        ];
        let stale = vs("3.4.23 3.5.16 3.5.30 3.6.0");
        let no_3_5 = vs("3.4.23 3.6.0");
        for (from, to, set, want) in rows {
            let installed = match *set {
                "here" => &here,
                "later" => &later,
                "no 3.5" => &no_3_5,
                _ => &stale,
            };
            let got = plan(from.parse().unwrap(), to.parse().unwrap(), installed);
            match (want, &got) {
                (Ok(road), Ok(links)) => {
                    let links: Vec<String> = links.iter().map(Version::to_string).collect();
                    assert_eq!(links.join(" "), *road, "{from} -> {to}");
                }
                (Err(words), Err(e)) if e.to_string().contains(words) => {}
                _ => panic!("{from} -> {to} with {set}: want {want:?}, got {got:?}"),
            }
        }
    }

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn the_stone_to_3_6_is_the_highest_row_and_each_row_below_is_a_reason() {
        assert_eq!(stone(v("3.6.0")), Some(v("3.5.32")));
        assert_eq!(stone(v("3.6.14")), Some(v("3.5.32")));
        assert_eq!(stone(v("3.5.30")), None);
        assert_eq!(below(v("3.5.30"), v("3.6.4")).len(), 1);
        assert_eq!(below(v("3.5.16"), v("3.6.4")).len(), 4);
        assert_eq!(below(v("3.5.25"), v("3.6.4")).len(), 2);
        assert!(below(v("3.5.32"), v("3.6.4")).is_empty());
        assert!(below(v("3.5.1"), v("3.5.30")).is_empty());
        let why = reasons(&below(v("3.5.19"), v("3.6.0")));
        assert!(why.contains("#19557") && why.contains("3.5.32"), "{why}");
    }

    #[test]
    fn every_row_leads_to_the_next_minor_and_names_its_source() {
        for s in STEPPING_STONES {
            assert_eq!(s.to, (s.at_least.major, s.at_least.minor + 1), "{s:?}");
            assert!(!s.why.is_empty() && !s.source.is_empty(), "{s:?}");
        }
    }
}
