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

    /// etcd 3.5.0 to 3.5.2 can silently lose consistency after a crash (fixed in 3.5.3).
    pub fn has_known_data_inconsistency_bug(self) -> bool {
        self.major == 3 && self.minor == 5 && self.patch <= 2
    }
}

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

    /// Accepts `3.5.1` and `v3.5.1`; a `major.minor` alone (as etcd reports a cluster
    /// version, `3.5.0` or `3.5`) is read with patch 0.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseVersionError {
            input: s.to_string(),
        };
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.split('.');
        let mut next = |required: bool| -> Result<u32, ParseVersionError> {
            match parts.next() {
                Some(p)
                    if !p.is_empty() && p.len() <= 6 && p.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    p.parse().map_err(|_| err())
                }
                None if !required => Ok(0),
                _ => Err(err()),
            }
        };
        let major = next(true)?;
        let minor = next(true)?;
        let patch = next(false)?;
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(Version::new(major, minor, patch))
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

/// Why a version change is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionChangeError {
    #[error("etcd {from} -> {to} skips a minor version; etcd upgrades one minor version at a time: go to {major}.{next_minor} first", major = from.major, next_minor = from.minor + 1)]
    SkipsMinor { from: Version, to: Version },
    #[error("etcd {to} is older than the running cluster version {cluster}; etcd cannot go back below its cluster version (restore from a snapshot instead)")]
    BelowClusterVersion { to: Version, cluster: Version },
    #[error("etcd {from} -> {to} changes the major version; quorum supports etcd 3 only")]
    ChangesMajor { from: Version, to: Version },
}

/// Checks that a control plane running `from` (its lowest member version) with
/// cluster version `cluster` (if known) may move to `to`.
pub fn check_version_change(
    from: Version,
    cluster: Option<Version>,
    to: Version,
) -> Result<(), VersionChangeError> {
    if from.major != to.major {
        return Err(VersionChangeError::ChangesMajor { from, to });
    }
    if to.minor > from.minor + 1 {
        return Err(VersionChangeError::SkipsMinor { from, to });
    }
    if let Some(cluster) = cluster {
        if to.minor_line() < cluster.minor_line() {
            return Err(VersionChangeError::BelowClusterVersion { to, cluster });
        }
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
        assert_eq!("3.5".parse::<Version>().unwrap(), Version::new(3, 5, 0));
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
    fn orders_numerically() {
        assert!(Version::new(3, 4, 23) < Version::new(3, 5, 0));
        assert!(Version::new(3, 5, 10) > Version::new(3, 5, 9));
    }

    #[test]
    fn version_change_rules() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        assert!(check_version_change(v("3.4.23"), Some(v("3.4.0")), v("3.5.1")).is_ok());
        assert!(check_version_change(v("3.5.1"), Some(v("3.5.0")), v("3.5.0")).is_ok());
        assert!(matches!(
            check_version_change(v("3.4.23"), None, v("3.6.0")),
            Err(VersionChangeError::SkipsMinor { .. })
        ));
        assert!(matches!(
            check_version_change(v("3.5.1"), Some(v("3.5.0")), v("3.4.23")),
            Err(VersionChangeError::BelowClusterVersion { .. })
        ));
        // A mixed cluster still at 3.4 may go back to 3.4.
        assert!(check_version_change(v("3.4.23"), Some(v("3.4.0")), v("3.4.23")).is_ok());
        assert!(v("3.5.1").has_known_data_inconsistency_bug());
        assert!(!v("3.5.3").has_known_data_inconsistency_bug());
    }
}
