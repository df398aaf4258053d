//! Going back a minor: how etcd allows it, per pair of minors, and what it needs.
//!
//! Invariant: quorum never starts a member below its cluster's version (etcd refuses
//! it: the cluster version is the point of no return of a minor upgrade). etcd names
//! two ways back across a minor, each only from certain releases; `way_back` says
//! which applies, or why none does with what is installed, so the refusal says how:
//! - 3.5 -> 3.4: a rolling downgrade, each member restarted in place on a 3.4.32 or
//!   later binary with `--next-cluster-version-compatible`; the first such member
//!   lowers the cluster version (etcd's guide "Downgrade etcd from 3.5 to 3.4",
//!   etcd-io/website content/en/docs/v3.6/downgrades/downgrade_3_5.md);
//! - 3.6 -> 3.5: etcd's downgrade API: `downgrade validate 3.5`, `downgrade enable
//!   3.5` (the leader then lowers the cluster version and members write data 3.5
//!   reads), then each member restarted in place on 3.5, the leader last; `downgrade
//!   cancel` before the last restart goes back (etcd's guide "Downgrade etcd from 3.6
//!   to 3.5", etcdctl 3.6's `downgrade` command).
//!
//! Either way the data stays where it is (in place): a member replaced by one of the
//! older minor would join a cluster whose version it is below.
//!
//! quorum runs neither yet: no release of either pair that supports it is installable
//! here (3.4.32+, 3.6.x), so the refusal gives the plan and the first command.

use crate::version::Version;

/// The oldest 3.4 a 3.5 cluster may go back to (`--next-cluster-version-compatible`).
pub const OLDEST_3_4_BACK_FROM_3_5: Version = Version::new(3, 4, 32);

/// How a cluster goes back from `from`'s minor to `to`'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WayBack {
    /// Each member in place on `to` with `--next-cluster-version-compatible`.
    Rolling { to: Version },
    /// etcd's downgrade API to `to`'s minor, then each member in place on `to`, the
    /// leader last.
    DowngradeApi { to: Version },
}

impl WayBack {
    /// The steps, in words, in order.
    pub fn steps(&self, name: &str) -> Vec<String> {
        match self {
            WayBack::Rolling { to } => vec![
                format!("a snapshot first (`quorum snapshot {name}`)"),
                format!("each member restarted in place on etcd {to} with --next-cluster-version-compatible, followers first (the first lowers the cluster version to {}.{})", to.major, to.minor),
            ],
            WayBack::DowngradeApi { to } => vec![
                format!("a snapshot first (`quorum snapshot {name}`)"),
                format!("`etcdctl downgrade validate {}.{}` then `etcdctl downgrade enable {}.{}`", to.major, to.minor, to.major, to.minor),
                format!("each member restarted in place on etcd {to}, followers first, the leader last; `etcdctl downgrade cancel` goes back until the last"),
            ],
        }
    }
}

/// Why no way back is open.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoWayBack {
    #[error("etcd goes back one minor at a time: {from} -> {to} crosses more")]
    MoreThanOneMinor { from: Version, to: Version },
    #[error("etcd names no way back from {from_major}.{from_minor} to {to_major}.{to_minor}", from_major = from.major, from_minor = from.minor, to_major = to.major, to_minor = to.minor)]
    Unsupported { from: Version, to: Version },
    #[error("a 3.5 cluster goes back only to {OLDEST_3_4_BACK_FROM_3_5} or later (--next-cluster-version-compatible), and {to} is older")]
    TooOld { to: Version },
}

/// The way from a cluster at `from`'s minor back to `to` (a lower minor), by etcd's
/// guides.
pub fn way_back(from: Version, to: Version) -> Result<WayBack, NoWayBack> {
    if from.major != to.major || to.minor + 1 != from.minor {
        return Err(NoWayBack::MoreThanOneMinor { from, to });
    }
    match (from.minor_line(), to.minor_line()) {
        ((3, 5), (3, 4)) if to >= OLDEST_3_4_BACK_FROM_3_5 => Ok(WayBack::Rolling { to }),
        ((3, 5), (3, 4)) => Err(NoWayBack::TooOld { to }),
        ((3, 6), (3, 5)) => Ok(WayBack::DowngradeApi { to }),
        _ => Err(NoWayBack::Unsupported { from, to }),
    }
}

/// The words a refusal to go below the cluster version adds: the way back etcd names
/// and its steps, or why there is none, and that quorum does not run it.
pub fn said(name: &str, cluster: Version, to: Version) -> String {
    match way_back(cluster, to) {
        Ok(way) => format!(
            "etcd's way back: {}; quorum does not run it yet (no etcd release here supports it), so it is left to a person, or restore a snapshot taken before the upgrade (`quorum snapshots {name}`)",
            way.steps(name).join("; then ")
        ),
        Err(why) => format!(
            "{why}; restore a snapshot taken before the upgrade instead (`quorum snapshots {name}`)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    /// Each pair of minors, the way etcd names or why none, with the source.
    #[test]
    fn the_way_back_by_etcds_guides() {
        let rows: &[(&str, &str, Result<&str, &str>, &str)] = &[
            (
                "3.5.30",
                "3.4.32",
                Ok("--next-cluster-version-compatible"),
                "downgrade_3_5.md",
            ),
            (
                "3.5.30",
                "3.4.35",
                Ok("--next-cluster-version-compatible"),
                "downgrade_3_5.md",
            ),
            (
                "3.5.30",
                "3.4.23",
                Err("3.4.32 or later"),
                "downgrade_3_5.md: >= 3.4.32",
            ),
            (
                "3.6.2",
                "3.5.33",
                Ok("downgrade enable 3.5"),
                "downgrade_3_6.md",
            ),
            (
                "3.6.2",
                "3.4.23",
                Err("one minor at a time"),
                "etcd's guides",
            ),
            (
                "3.5.30",
                "3.3.0",
                Err("one minor at a time"),
                "etcd's guides",
            ),
            ("3.4.23", "3.3.27", Err("names no way back"), "no guide"),
        ];
        for (from, to, want, source) in rows {
            let got = way_back(v(from), v(to));
            let words = match &got {
                Ok(w) => Ok(w.steps("cp").join("; ")),
                Err(e) => Err(e.to_string()),
            };
            match (want, &words) {
                (Ok(w), Ok(s)) if s.contains(w) => {}
                (Err(w), Err(s)) if s.contains(w) => {}
                _ => panic!("{from} -> {to} ({source}): want {want:?}, got {words:?}"),
            }
        }
    }

    #[test]
    fn the_downgrade_api_restarts_the_leader_last_and_can_be_cancelled() {
        let steps = WayBack::DowngradeApi { to: v("3.5.33") }.steps("cp");
        assert!(steps[1].contains("validate 3.5") && steps[1].contains("enable 3.5"));
        assert!(steps[2].contains("the leader last") && steps[2].contains("cancel"));
        let said = said("cp", v("3.6.0"), v("3.5.33"));
        assert!(
            said.contains("does not run it yet") && said.contains("quorum snapshots cp"),
            "{said}"
        );
    }
}
