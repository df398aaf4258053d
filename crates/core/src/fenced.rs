//! Fenced directories: what a rebuild moved out of reach (`Action::FenceMachine`: an old
//! member's whole machine directory, its data included), kept for a person to look at
//! or copy from, and removed once `spec.recovery.keepFenced` has passed.
//!
//! Invariant: a fenced directory is removed only once it is older than `keepFenced`,
//! and only a control plane's own (by the machine name it was fenced from); nothing
//! that is not fenced is ever removed by this rule. One removal per decision, oldest
//! first.

use crate::Span;
use serde::{Deserialize, Serialize};

/// How long fenced directories are kept by default: a week to notice and copy.
pub const DEFAULT_KEEP_FENCED: Span = Span::days(7);

/// `spec.recovery`: what quorum keeps after a rebuild.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecoverySpec {
    /// How long a fenced directory is kept before quorum removes it.
    #[serde(default = "default_keep_fenced")]
    pub keep_fenced: Span,
}

fn default_keep_fenced() -> Span {
    DEFAULT_KEEP_FENCED
}

impl Default for RecoverySpec {
    fn default() -> Self {
        RecoverySpec {
            keep_fenced: DEFAULT_KEEP_FENCED,
        }
    }
}

impl RecoverySpec {
    pub fn is_default(&self) -> bool {
        *self == RecoverySpec::default()
    }
}

/// A fenced directory of a control plane, as the provider reports it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FencedSeen {
    /// Its name under the fenced directory (`prod-2@1796327101`).
    pub name: String,
    pub fenced_at_unix_s: i64,
}

/// The separator between a machine's name and the time it was fenced, in the names of
/// fenced directories (no machine name has it).
pub const FENCED_SEPARATOR: char = '@';

/// The name a fence gives machine `machine`'s directory at `at_unix_s` (the `n`th
/// fence of that name within that second: 0 for the first).
pub fn fenced_name(machine: &str, at_unix_s: i64, n: u32) -> String {
    match n {
        0 => format!("{machine}{FENCED_SEPARATOR}{at_unix_s}"),
        _ => format!("{machine}{FENCED_SEPARATOR}{at_unix_s}-{n}"),
    }
}

/// The machine a fenced directory came from, and when it was fenced: `prod-2@1796327101`
/// and `prod-2@1796327101-1`, and as releases before the separator named them,
/// `prod-2-1796327101` (a Unix time of at least 9 digits last).
pub fn parse_fenced(name: &str) -> Option<(&str, i64)> {
    if let Some((machine, rest)) = name.split_once(FENCED_SEPARATOR) {
        let stamp = rest.split_once('-').map_or(rest, |(s, _)| s);
        return Some((machine, stamp.parse().ok()?));
    }
    let (machine, stamp) = name.rsplit_once('-')?;
    (stamp.len() >= 9 && stamp.bytes().all(|b| b.is_ascii_digit()))
        .then(|| Some((machine, stamp.parse().ok()?)))
        .flatten()
}

/// The control plane machine `machine` (`<cp>-<serial>`) belongs to.
pub fn control_plane_of(machine: &str) -> Option<&str> {
    let (cp, serial) = machine.rsplit_once('-')?;
    (!serial.is_empty() && serial.bytes().all(|b| b.is_ascii_digit())).then_some(cp)
}

/// The fenced directory to remove now, if any: the oldest past `keep`.
pub fn prunable(fenced: &[FencedSeen], keep: Span, now_unix_s: i64) -> Option<&FencedSeen> {
    let keep_s = i64::try_from(keep.as_secs()).unwrap_or(i64::MAX);
    fenced
        .iter()
        .filter(|f| now_unix_s.saturating_sub(f.fenced_at_unix_s) > keep_s)
        .min_by_key(|f| (f.fenced_at_unix_s, f.name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_as_written_and_as_earlier_releases_wrote_them() {
        assert_eq!(fenced_name("prod-2", 1_796_327_101, 0), "prod-2@1796327101");
        let table = [
            ("prod-2@1796327101", Some(("prod-2", 1_796_327_101))),
            ("prod-2@1796327101-1", Some(("prod-2", 1_796_327_101))),
            ("my-cp-12-1796327101", Some(("my-cp-12", 1_796_327_101))),
            ("prod-2@x", None),
            ("prod-2", None),
            ("notes.txt", None),
        ];
        for (name, want) in table {
            assert_eq!(parse_fenced(name), want, "{name}");
        }
        assert_eq!(control_plane_of("my-cp-12"), Some("my-cp"));
        assert_eq!(control_plane_of("a-b"), None);
    }

    #[test]
    fn only_what_is_older_than_keep_goes_oldest_first() {
        let f = |name: &str, at| FencedSeen {
            name: name.into(),
            fenced_at_unix_s: at,
        };
        let now = 1_000_000;
        let dirs = [
            f("a-1@1", now - 100),
            f("a-2@2", now - 50),
            f("a-3@3", now - 5),
        ];
        let table = [
            (Span::from_secs(10), Some("a-1@1")),
            (Span::from_secs(60), Some("a-1@1")),
            (Span::from_secs(100), None),
            (Span::days(7), None),
        ];
        for (keep, want) in table {
            assert_eq!(
                prunable(&dirs, keep, now).map(|d| d.name.as_str()),
                want,
                "{keep:?}"
            );
        }
        assert_eq!(prunable(&[], Span::from_secs(0), now), None);
    }
}
