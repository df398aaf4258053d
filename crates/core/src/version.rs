//! etcd versions and the rules for moving between them.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An etcd release, `major.minor.patch`. Ordered numerically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// The `major.minor` part, which is what etcd's cluster version tracks.
    pub const fn minor_line(self) -> (u32, u32) {
        (self.major, self.minor)
    }

    /// Whether this release is in `KNOWN_BUGS` (a data inconsistency etcd fixed later).
    pub fn has_known_data_inconsistency_bug(self) -> bool {
        self.known_bugs().next().is_some()
    }

    /// The known data-inconsistency bugs of this release, oldest first.
    pub fn known_bugs(self) -> impl Iterator<Item = &'static KnownBug> {
        KNOWN_BUGS.iter().filter(move |b| b.affects(self))
    }

    /// One sentence naming this release's known bugs and the release that fixes them
    /// all (`None` for a release without any).
    pub fn known_bug_warning(self) -> Option<String> {
        let bugs: Vec<&KnownBug> = self.known_bugs().collect();
        let fixed = bugs.iter().map(|b| b.fixed_in).max()?;
        let what: Vec<String> = bugs
            .iter()
            .map(|b| format!("{} ({}, fixed in {})", b.what, b.issue, b.fixed_in))
            .collect();
        Some(format!(
            "etcd {self} has known data inconsistency bugs: {}; use {fixed} or later where you can",
            what.join("; ")
        ))
    }
}

/// A data-inconsistency bug of released etcd versions: quorum warns about these
/// releases (it does not refuse them: 3.5.0 and 3.5.1 are the only 3.5 builds some
/// machines have). Kept as data with its sources; add a row when etcd announces one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownBug {
    /// The first and last affected releases, inclusive.
    pub first: Version,
    pub last: Version,
    pub fixed_in: Version,
    /// What goes wrong, in a few words.
    pub what: &'static str,
    /// The etcd issue or announcement.
    pub issue: &'static str,
}

impl KnownBug {
    pub fn affects(&self, v: Version) -> bool {
        self.first <= v && v <= self.last
    }
}

/// Sources: etcd's `CHANGELOG/CHANGELOG-3.5.md` and `CHANGELOG/README.md` ("production
/// recommendations": v3.5.6 or later), and kubernetes/website#40816.
pub const KNOWN_BUGS: &[KnownBug] = &[
    KnownBug {
        first: Version::new(3, 5, 0),
        last: Version::new(3, 5, 2),
        fixed_in: Version::new(3, 5, 3),
        what: "a member killed under load can apply writes its peers never see",
        issue: "etcd-io/etcd#13766",
    },
    KnownBug {
        first: Version::new(3, 5, 3),
        last: Version::new(3, 5, 3),
        fixed_in: Version::new(3, 5, 4),
        what: "a regression of the #13766 fix can leave a member inconsistent after a crash",
        issue: "etcd 3.5.4 changelog",
    },
    KnownBug {
        first: Version::new(3, 5, 0),
        last: Version::new(3, 5, 5),
        fixed_in: Version::new(3, 5, 6),
        what: "a crash during defragmentation can leave the member inconsistent",
        issue: "etcd 3.5.6 changelog",
    },
    KnownBug {
        first: Version::new(3, 4, 20),
        last: Version::new(3, 4, 21),
        fixed_in: Version::new(3, 4, 22),
        what: "with authentication on, a member added to the cluster can diverge",
        issue: "etcd 3.4.22 changelog",
    },
    KnownBug {
        first: Version::new(3, 5, 5),
        last: Version::new(3, 5, 5),
        fixed_in: Version::new(3, 5, 6),
        what: "with authentication on, a member added to the cluster can diverge",
        issue: "etcd 3.5.6 changelog",
    },
];

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not an etcd version: expected MAJOR.MINOR.PATCH, for example 3.5.1")]
pub struct ParseVersionError {
    pub input: String,
}

impl FromStr for Version {
    type Err = ParseVersionError;

    /// Accepts `3.5.1` and `v3.5.1`, nothing shorter: a `3.5` typed by a user means a
    /// line of releases (`VersionRequest`), never 3.5.0 by accident.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<VersionRequest>() {
            Ok(VersionRequest::Exact(v)) => Ok(v),
            _ => Err(ParseVersionError {
                input: s.to_string(),
            }),
        }
    }
}

impl Version {
    /// etcd's cluster version as it is reported or shown: `3.5.0` or `3.5` (patch 0).
    pub fn parse_cluster_version(s: &str) -> Result<Version, ParseVersionError> {
        match s.parse::<VersionRequest>() {
            Ok(VersionRequest::Exact(v)) => Ok(v),
            Ok(VersionRequest::Line { major, minor }) => Ok(Version::new(major, minor, 0)),
            Err(_) => Err(ParseVersionError {
                input: s.to_string(),
            }),
        }
    }
}

impl Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A version as a user writes it: exact (`3.5.1`, `v3.5.1`) or a minor line (`3.5`,
/// meaning the newest installed 3.5.x). Every place that takes a version from a user
/// (flags and manifests) reads it with this and `resolve`s it the same way, so `3.5`
/// can never mean 3.5.0 in one place and 3.5.1 in another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionRequest {
    Exact(Version),
    Line { major: u32, minor: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{input:?} is not an etcd version: write MAJOR.MINOR.PATCH (3.5.1) or MAJOR.MINOR for the newest installed patch (3.5); see `quorum versions`")]
    NotAVersion { input: String },
    #[error("etcd {wanted} is not installed (installed: {installed}); scripts/install.sh installs the supported ones, `quorum versions add` any other release")]
    NotInstalled { wanted: String, installed: String },
}

impl FromStr for VersionRequest {
    type Err = ResolveError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ResolveError::NotAVersion {
            input: s.to_string(),
        };
        let t = s.strip_prefix('v').unwrap_or(s);
        let parts: Vec<&str> = t.split('.').collect();
        let number = |p: &str| -> Result<u32, ResolveError> {
            if p.is_empty() || p.len() > 6 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            p.parse().map_err(|_| err())
        };
        match parts.as_slice() {
            [major, minor] => Ok(VersionRequest::Line {
                major: number(major)?,
                minor: number(minor)?,
            }),
            [major, minor, patch] => Ok(VersionRequest::Exact(Version::new(
                number(major)?,
                number(minor)?,
                number(patch)?,
            ))),
            _ => Err(err()),
        }
    }
}

impl fmt::Display for VersionRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionRequest::Exact(v) => write!(f, "{v}"),
            VersionRequest::Line { major, minor } => write!(f, "{major}.{minor}"),
        }
    }
}

impl VersionRequest {
    /// The version meant: an exact one as it is (whether it is installed is checked
    /// where its binary is needed, after the version rules, whose answer is clearer:
    /// "3.6.0 skips a minor version" beats "3.6.0 is not installed"); a line means its
    /// newest patch among the `installed` ones.
    pub fn resolve(self, installed: &[Version]) -> Result<Version, ResolveError> {
        let found = match self {
            VersionRequest::Exact(v) => Some(v),
            VersionRequest::Line { major, minor } => installed
                .iter()
                .copied()
                .filter(|i| i.minor_line() == (major, minor))
                .max(),
        };
        found.ok_or_else(|| ResolveError::NotInstalled {
            wanted: match self {
                VersionRequest::Exact(v) => v.to_string(),
                VersionRequest::Line { major, minor } => format!("{major}.{minor}.x"),
            },
            installed: if installed.is_empty() {
                "none".to_string()
            } else {
                installed
                    .iter()
                    .map(Version::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })
    }
}

/// Why a version change is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionChangeError {
    #[error("etcd {from} -> {to} skips a minor version; etcd upgrades one minor version at a time: go to {first} first")]
    SkipsMinor {
        from: Version,
        to: Version,
        /// The next minor line (`3.5`, its newest patch), or its stepping stone if the
        /// minor after it has one (`3.5.32 or later`).
        first: String,
    },
    #[error("etcd {from} -> {to}: every member must run {stone} or later before {major}.{minor}, and {from} is below it: {reasons}. Upgrade to {stone} or later first (`quorum versions add` brings a release that is not installed)", major = to.major, minor = to.minor)]
    BelowSteppingStone {
        from: Version,
        to: Version,
        stone: Version,
        /// Each reason, with its source (`road::reasons`).
        reasons: String,
    },
    #[error("etcd {to} is older than the running cluster version {major}.{minor}; etcd cannot go back below its cluster version (restore from a snapshot instead)", major = cluster.major, minor = cluster.minor)]
    BelowClusterVersion { to: Version, cluster: Version },
    #[error("etcd {from} -> {to} changes the major version; quorum supports etcd 3 only")]
    ChangesMajor { from: Version, to: Version },
    #[error("etcd {from} -> {to} is a downgrade; quorum refuses downgrades unless you confirm one (--allow-downgrade, or rollout.allowDowngrade: true in a manifest){warning}", warning = to.known_bug_warning().map(|w| format!(". Note: {w}")).unwrap_or_default())]
    Downgrade { from: Version, to: Version },
}

/// Checks that a control plane running `from` (its lowest member version) with
/// cluster version `cluster` (if known) may move to `to`. Any move to an older version,
/// a patch included, is refused unless `allow_downgrade` confirms it (as kubeadm and the
/// etcd operators refuse one).
pub fn check_version_change(
    from: Version,
    cluster: Option<Version>,
    to: Version,
    allow_downgrade: bool,
) -> Result<(), VersionChangeError> {
    if from.major != to.major {
        return Err(VersionChangeError::ChangesMajor { from, to });
    }
    if to.minor > from.minor + 1 {
        let next = Version::new(from.major, from.minor + 1, 0);
        let after = Version::new(from.major, from.minor + 2, 0);
        let first = match crate::road::stone(after) {
            Some(stone) => format!("{stone} or later"),
            None => format!("{}.{}", next.major, next.minor),
        };
        return Err(VersionChangeError::SkipsMinor { from, to, first });
    }
    if let Some(cluster) = cluster {
        if to.minor_line() < cluster.minor_line() {
            return Err(VersionChangeError::BelowClusterVersion { to, cluster });
        }
    }
    let stones = crate::road::below(from, to);
    if to > from && !stones.is_empty() {
        let stone = stones.iter().map(|s| s.at_least).max().unwrap_or(from);
        let reasons = crate::road::reasons(&stones);
        return Err(VersionChangeError::BelowSteppingStone {
            from,
            to,
            stone,
            reasons,
        });
    }
    if to < from && !allow_downgrade {
        return Err(VersionChangeError::Downgrade { from, to });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let v: Version = "3.5.1".parse().unwrap();
        assert_eq!(v, Version::new(3, 5, 1));
        assert_eq!(v.to_string(), "3.5.1");
        assert_eq!(
            "v3.4.23".parse::<Version>().unwrap(),
            Version::new(3, 4, 23)
        );
        // A user's "3.5" is a line of releases, never 3.5.0 by accident.
        assert!("3.5".parse::<Version>().is_err());
        assert_eq!(
            Version::parse_cluster_version("3.5").unwrap(),
            Version::new(3, 5, 0)
        );
        assert_eq!(
            Version::parse_cluster_version("3.5.0").unwrap(),
            Version::new(3, 5, 0)
        );
        for bad in [
            "",
            "3",
            "3.x.1",
            "3.5.1.2",
            "three",
            "3..1",
            "-3.5.1",
            "3.5.1 beta",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn one_resolution_of_what_users_write() {
        let installed = [
            Version::new(3, 4, 23),
            Version::new(3, 5, 0),
            Version::new(3, 5, 1),
        ];
        let r = |s: &str| {
            s.parse::<VersionRequest>()
                .and_then(|q| q.resolve(&installed))
        };
        // The walkthrough's downgrade: "3.5" is the newest 3.5.x, never 3.5.0.
        assert_eq!(r("3.5"), Ok(Version::new(3, 5, 1)));
        assert_eq!(r("v3.5"), Ok(Version::new(3, 5, 1)));
        assert_eq!(r("3.5.0"), Ok(Version::new(3, 5, 0)));
        assert_eq!(r("3.4"), Ok(Version::new(3, 4, 23)));
        let e = r("3.6").unwrap_err();
        assert!(e.to_string().contains("3.6.x is not installed"), "{e}");
        assert!(e.to_string().contains("3.4.23, 3.5.0, 3.5.1"), "{e}");
        assert_eq!(r("3.5.9"), Ok(Version::new(3, 5, 9)));
        for bad in ["", "3", "latest", "3.5.1.2", " 3.5", "3.5.", "3.x"] {
            assert!(
                matches!(r(bad), Err(ResolveError::NotAVersion { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn orders_numerically() {
        assert!(Version::new(3, 4, 23) < Version::new(3, 5, 0));
        assert!(Version::new(3, 5, 10) > Version::new(3, 5, 9));
    }

    #[test]
    fn version_change_rules() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        assert!(check_version_change(v("3.4.23"), Some(v("3.4.0")), v("3.5.1"), false).is_ok());
        // A patch downgrade is refused unless confirmed, and says so.
        let e = check_version_change(v("3.5.1"), Some(v("3.5.0")), v("3.5.0"), false).unwrap_err();
        assert!(matches!(e, VersionChangeError::Downgrade { .. }));
        assert!(e.to_string().contains("--allow-downgrade"), "{e}");
        assert!(e.to_string().contains("data inconsistency"), "{e}");
        assert!(check_version_change(v("3.5.1"), Some(v("3.5.0")), v("3.5.0"), true).is_ok());
        assert!(matches!(
            check_version_change(v("3.4.23"), None, v("3.6.0"), false),
            Err(VersionChangeError::SkipsMinor { .. })
        ));
        // Confirming a downgrade never lets it go below the cluster version.
        assert!(matches!(
            check_version_change(v("3.5.1"), Some(v("3.5.0")), v("3.4.23"), true),
            Err(VersionChangeError::BelowClusterVersion { .. })
        ));
        // A mixed cluster still at 3.4 may go back to 3.4, once confirmed.
        assert!(check_version_change(v("3.4.23"), Some(v("3.4.0")), v("3.4.23"), false).is_ok());
        assert!(check_version_change(v("3.5.1"), Some(v("3.4.0")), v("3.4.23"), true).is_ok());
        assert!(v("3.5.1").has_known_data_inconsistency_bug());
    }

    /// The policy both strategies apply, as a table: (running, cluster version, wanted,
    /// confirmed downgrade) and whether it is allowed.
    #[test]
    fn version_policy_table() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        let cv = |s: &str| Some(Version::parse_cluster_version(s).unwrap());
        type Row = (
            &'static str,
            Option<Version>,
            &'static str,
            bool,
            Result<(), &'static str>,
        );
        let rows: &[Row] = &[
            // Patch upgrades are fine, within 3.4 and 3.5.
            ("3.5.0", cv("3.5"), "3.5.1", false, Ok(())),
            ("3.4.20", cv("3.4"), "3.4.23", false, Ok(())),
            // One minor at a time.
            ("3.4.23", cv("3.4"), "3.5.0", false, Ok(())),
            ("3.4.23", cv("3.4"), "3.5.1", false, Ok(())),
            ("3.4.23", cv("3.4"), "3.6.0", false, Err("skips a minor")),
            // ... and says where to go first: 3.6's stepping stone.
            (
                "3.4.23",
                cv("3.4"),
                "3.6.0",
                false,
                Err("go to 3.5.32 or later first"),
            ),
            ("3.3.27", None, "3.5.1", false, Err("go to 3.4 first")),
            // Into 3.6 only from its stepping stone (`road`), each reason named.
            (
                "3.5.30",
                cv("3.5"),
                "3.6.4",
                false,
                Err("3.5.32 or later before 3.6"),
            ),
            ("3.5.30", cv("3.5"), "3.6.4", true, Err("#21889")),
            ("3.5.16", cv("3.5"), "3.6.0", false, Err("#19557")),
            ("3.5.32", cv("3.5"), "3.6.0", false, Ok(())),
            ("3.5.33", cv("3.5"), "3.6.14", false, Ok(())),
            // Patch moves and downgrades within a minor are no road.
            ("3.5.16", cv("3.5"), "3.5.30", false, Ok(())),
            ("3.5.30", cv("3.5"), "3.5.16", true, Ok(())),
            ("3.3.27", None, "3.5.1", false, Err("skips a minor")),
            ("3.5.1", cv("3.5"), "4.0.0", false, Err("major")),
            // No downgrade below the cluster version, confirmed or not.
            ("3.5.1", cv("3.5"), "3.4.23", true, Err("cluster version")),
            ("3.5.1", cv("3.5"), "3.4.23", false, Err("cluster version")),
            // A downgrade within the cluster version only when confirmed.
            ("3.5.1", cv("3.5"), "3.5.0", false, Err("--allow-downgrade")),
            ("3.5.1", cv("3.5"), "3.5.0", true, Ok(())),
            // A mixed cluster still at 3.4 may go back to 3.4, confirmed.
            ("3.5.1", cv("3.4"), "3.4.23", true, Ok(())),
            // The same version is no move at all.
            ("3.5.1", cv("3.5"), "3.5.1", false, Ok(())),
        ];
        for (from, cluster, to, confirmed, want) in rows {
            let got = check_version_change(v(from), *cluster, v(to), *confirmed);
            match (want, &got) {
                (Ok(()), Ok(())) => {}
                (Err(words), Err(e)) if e.to_string().contains(words) => {}
                _ => panic!("{from} (cluster {cluster:?}) -> {to} confirmed {confirmed}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn known_bugs_are_warned_about_by_name_and_fix() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        for bad in ["3.5.0", "3.5.1", "3.5.2", "3.5.3", "3.5.5", "3.4.20"] {
            let w = v(bad).known_bug_warning().unwrap_or_default();
            assert!(w.contains(bad) && w.contains("fixed in"), "{bad}: {w:?}");
        }
        let w = v("3.5.1").known_bug_warning().unwrap();
        assert!(
            w.contains("etcd-io/etcd#13766") && w.contains("use 3.5.6 or later"),
            "{w}"
        );
        for good in ["3.4.23", "3.5.6", "3.5.21", "3.6.0", "3.4.22"] {
            assert_eq!(v(good).known_bug_warning(), None, "{good}");
        }
        for b in KNOWN_BUGS {
            assert!(b.first <= b.last && b.last < b.fixed_in, "{b:?}");
        }
    }
}
