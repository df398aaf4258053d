//! Snapshots of a control plane's keyspace: what a snapshot record says, how one is
//! named, and when a change must be preceded by one.
//!
//! The I/O (streaming from the leader, writing the file, reading its facts back with
//! etcd's own tool) lives in `quorum-backup`; this module decides and names only.

use crate::{ControlPlaneSpec, Machine, Span, Version};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

// ---------------------------------------------------------------- the spec

/// `spec.backup`: when quorum takes snapshots on its own, and how many it keeps.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackupSpec {
    /// A cron expression (POSIX, 5 fields, or 6 with seconds first; UTC), or `off`.
    #[serde(default = "default_schedule")]
    pub schedule: String,
    #[serde(default)]
    pub retention: RetentionSpec,
    /// Test-restore the newest snapshot again once its last test restore is this old
    /// (one never restored, at once).
    #[serde(default = "default_verify_every")]
    pub verify_every: Span,
    /// Where snapshots are kept: `None`, the local directory `<home>/backups/NAME/`; or
    /// an S3-compatible bucket, `s3://bucket/prefix` (endpoint and credentials from the
    /// environment: `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// How this control plane's bucket is reached (`s3access`): endpoint, region and
    /// where the credentials are; what it leaves out comes from the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<crate::s3access::S3Access>,
}

/// Keep the newest `last` snapshots, plus the newest of each of the last `days` days
/// (UTC); the rest are removed. The newest verified snapshot is always kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetentionSpec {
    #[serde(default = "default_keep_last")]
    pub last: u32,
    #[serde(default = "default_keep_days")]
    pub days: u32,
}

/// Hourly, on the hour.
pub const DEFAULT_SCHEDULE: &str = "0 * * * *";
pub const DEFAULT_KEEP_LAST: u32 = 24;
pub const DEFAULT_KEEP_DAYS: u32 = 7;
/// The schedule that takes none.
pub const SCHEDULE_OFF: &str = "off";

/// Daily.
pub const DEFAULT_VERIFY_EVERY: Span = Span::days(1);

fn default_verify_every() -> Span {
    DEFAULT_VERIFY_EVERY
}

fn default_schedule() -> String {
    DEFAULT_SCHEDULE.to_string()
}
fn default_keep_last() -> u32 {
    DEFAULT_KEEP_LAST
}
fn default_keep_days() -> u32 {
    DEFAULT_KEEP_DAYS
}

impl Default for RetentionSpec {
    fn default() -> Self {
        RetentionSpec {
            last: DEFAULT_KEEP_LAST,
            days: DEFAULT_KEEP_DAYS,
        }
    }
}

impl Default for BackupSpec {
    fn default() -> Self {
        BackupSpec {
            schedule: default_schedule(),
            retention: RetentionSpec::default(),
            verify_every: DEFAULT_VERIFY_EVERY,
            store: None,
            s3: None,
        }
    }
}

impl BackupSpec {
    pub fn is_default(&self) -> bool {
        *self == BackupSpec::default()
    }

    /// The parsed schedule; `None` when it is `off`. An expression that does not parse
    /// is `validate_spec`'s to refuse; here it takes no snapshot.
    pub fn cron(&self) -> Option<croner::Cron> {
        if self.schedule.trim() == SCHEDULE_OFF {
            return None;
        }
        croner::Cron::from_str(&self.schedule).ok()
    }

    /// Why the spec cannot be used, in words, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.schedule.trim() != SCHEDULE_OFF {
            croner::Cron::from_str(&self.schedule).map_err(|e| {
                format!(
                    "backup.schedule {:?} is not a cron expression ({e}); use 5 fields (minute hour day month weekday, UTC) as \"{DEFAULT_SCHEDULE}\", 6 with seconds first, or \"{SCHEDULE_OFF}\"",
                    self.schedule
                )
            })?;
        }
        if self.verify_every.as_secs() == 0 {
            return Err("backup.verifyEvery must be 1s or more".into());
        }
        if let Some(url) = &self.store {
            check_store_url(url)?;
        }
        if let Some(s3) = &self.s3 {
            s3.check(self.store.as_deref())?;
        }
        if self.retention.last == 0 {
            return Err(
                "backup.retention.last must be 1 or more: the newest snapshot is always kept"
                    .into(),
            );
        }
        Ok(())
    }
}

/// `backup.store` is `s3://bucket[/prefix]` with a bucket S3 accepts (3 to 63 lowercase
/// letters, digits, dots and dashes).
fn check_store_url(url: &str) -> Result<(), String> {
    let bucket = url
        .strip_prefix("s3://")
        .map(|rest| rest.split('/').next().unwrap_or(""))
        .ok_or_else(|| {
            format!("backup.store {url:?} is not an S3 URL: use s3://bucket/prefix (or leave it out for <home>/backups/NAME/)")
        })?;
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
    if !ok {
        return Err(format!(
            "backup.store {url:?}: {bucket:?} is not an S3 bucket name (3 to 63 lowercase letters, digits, '.' and '-')"
        ));
    }
    Ok(())
}

/// The first time `cron` fires strictly after `after_unix_s` (UTC), if any.
pub fn next_fire_unix_s(cron: &croner::Cron, after_unix_s: i64) -> Option<i64> {
    let at = chrono::DateTime::from_timestamp(after_unix_s, 0)?;
    cron.find_next_occurrence(&at, false)
        .ok()
        .map(|t| t.timestamp())
}

/// Whether a scheduled snapshot is due at `now_unix_s`: the schedule fired since the
/// newest snapshot (or, with none, since the control plane was created).
pub fn snapshot_due(
    spec: &BackupSpec,
    newest_unix_s: Option<i64>,
    created_unix_s: i64,
    now_unix_s: i64,
) -> bool {
    let Some(cron) = spec.cron() else {
        return false;
    };
    let since = newest_unix_s.unwrap_or(created_unix_s);
    next_fire_unix_s(&cron, since).is_some_and(|t| t <= now_unix_s)
}

/// A recorded snapshot as the decision sees it.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSeen {
    pub id: String,
    pub taken_at_unix_s: i64,
    /// The revision it holds (what a restore from it keeps).
    #[serde(default)]
    pub revision: i64,
    /// Its last test restore succeeded.
    pub verified: bool,
    /// When it was last test-restored (succeeded or not), if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_at_unix_s: Option<i64>,
    /// Why its last test restore failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_failed: Option<String>,
}

/// The newest snapshot when it is due for a test restore: never restored, or last
/// restored `verify_every` ago or more.
pub fn verify_due<'a>(
    snapshots: &'a [SnapshotSeen],
    spec: &BackupSpec,
    now_unix_s: i64,
) -> Option<&'a SnapshotSeen> {
    let newest = newest(snapshots)?;
    let every = i64::try_from(spec.verify_every.as_secs()).unwrap_or(i64::MAX);
    match newest.restored_at_unix_s {
        None => Some(newest),
        Some(t) if now_unix_s - t >= every => Some(newest),
        Some(_) => None,
    }
}

/// The newest snapshot (the latest taken; in one second, the last of `snapshot_id`'s
/// sequence).
pub fn newest(snapshots: &[SnapshotSeen]) -> Option<&SnapshotSeen> {
    snapshots.iter().max_by_key(|s| age_key(s))
}

/// The newest snapshot whose last test restore succeeded: the one a recovery offers.
pub fn newest_verified(snapshots: &[SnapshotSeen]) -> Option<&SnapshotSeen> {
    snapshots
        .iter()
        .filter(|s| s.verified)
        .max_by_key(|s| age_key(s))
}

/// Orders snapshots by when they were taken: the time, then, within one second, the
/// place in `snapshot_id`'s sequence (`…-r7.db` first, then `…-r7-2.db`, …), which
/// the ids' text order gets wrong (`-` sorts before `.`).
fn age_key(s: &SnapshotSeen) -> (i64, u32, &str) {
    (s.taken_at_unix_s, sequence_of(&s.id), &s.id)
}

/// The `n` of an id `…-r<rev>-<n>.db` (1 for `…-r<rev>.db`).
fn sequence_of(id: &str) -> u32 {
    let stem = id.strip_suffix(".db").unwrap_or(id);
    let Some((head, last)) = stem.rsplit_once('-') else {
        return 1;
    };
    let after_revision = head.rsplit_once('-').is_some_and(|(_, r)| {
        r.len() > 1 && r.starts_with('r') && r[1..].bytes().all(|b| b.is_ascii_digit())
    });
    match last.parse::<u32>() {
        Ok(n) if after_revision => n,
        _ => 1,
    }
}

/// The snapshots retention removes, oldest first: all but the newest `last`, the
/// newest of each of the last `days` UTC days (counting today), and the newest
/// verified one. `snapshots` in any order.
pub fn retention_plan(
    snapshots: &[SnapshotSeen],
    retention: RetentionSpec,
    now_unix_s: i64,
) -> Vec<String> {
    let mut by_age: Vec<&SnapshotSeen> = snapshots.iter().collect();
    // Newest first.
    by_age.sort_by(|a, b| age_key(b).cmp(&age_key(a)));
    let mut keep: std::collections::BTreeSet<&str> = by_age
        .iter()
        .take(retention.last as usize)
        .map(|s| s.id.as_str())
        .collect();
    let today = now_unix_s.div_euclid(86_400);
    let mut days_seen = std::collections::BTreeSet::new();
    for s in &by_age {
        let day = s.taken_at_unix_s.div_euclid(86_400);
        if today - day < i64::from(retention.days) && days_seen.insert(day) {
            keep.insert(&s.id);
        }
    }
    if let Some(v) = by_age.iter().find(|s| s.verified) {
        keep.insert(&v.id);
    }
    let mut out: Vec<String> = by_age
        .iter()
        .rev()
        .filter(|s| !keep.contains(s.id.as_str()))
        .map(|s| s.id.clone())
        .collect();
    out.dedup();
    out
}

/// The snapshots of a deleted control plane that retention removes, oldest first: its
/// spec is gone, so the retention its newest record kept (`Recreate`) holds, or the
/// default for records that keep none. Nothing new is taken, so the newest `last` stay
/// for good, and those kept only as a day's newest go once their day is past `days`.
pub fn orphan_prunes(records: &[SnapshotRecord], now_unix_s: i64) -> Vec<String> {
    let retention = records
        .iter()
        .max_by_key(|r| r.taken_at_unix_s)
        .and_then(|r| r.recreate.as_ref())
        .map(|k| k.spec.backup.retention)
        .unwrap_or_default();
    let seen: Vec<SnapshotSeen> = records.iter().map(SnapshotRecord::seen).collect();
    retention_plan(&seen, retention, now_unix_s)
}

/// What etcd's own tool (`etcdutl snapshot status`) reads out of a snapshot file: the
/// facts a restore is later checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotFacts {
    /// etcd's hash of the database's contents (crc32, as `etcdutl` prints it).
    pub hash: u32,
    /// The keyspace revision the snapshot holds: writes after it are not in it.
    pub revision: i64,
    /// Keys in the database file, every bucket counted (etcd's `totalKey`: more than the
    /// user's keys, as it counts etcd's own too).
    pub total_keys: u64,
    /// The database's size (etcd's `totalSize`; the file is 32 bytes longer: etcd's
    /// sha256 of the database follows it).
    pub total_size_bytes: u64,
}

/// Why a snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SnapshotReason {
    /// `quorum snapshot NAME`.
    OnDemand,
    /// Before a change that starts a rollout was recorded.
    BeforeRollout,
    /// By the controller, on `spec.backup.schedule`.
    Scheduled,
}

impl SnapshotReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotReason::OnDemand => "on-demand",
            SnapshotReason::BeforeRollout => "before-rollout",
            SnapshotReason::Scheduled => "scheduled",
        }
    }
}

impl fmt::Display for SnapshotReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot as quorum's store records it: written once the file is complete,
/// checked by etcd's own trailing digest, and its facts read back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// Unique within the control plane, and the file's name in the snapshot store
    /// (`snapshot_id`).
    pub id: String,
    pub control_plane: String,
    pub taken_at_unix_s: i64,
    pub reason: SnapshotReason,
    /// The machine it was streamed from (the leader at the time).
    pub from_machine: String,
    /// The etcd version that machine ran.
    pub etcd_version: Version,
    /// The spec's version when it was taken, and the one a rollout was about to move to
    /// (`BeforeRollout` only).
    pub spec_version: Version,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_to: Option<Version>,
    /// Where it is kept (the store's own words: a directory, later a bucket).
    pub location: String,
    /// The sha256 of the whole file as stored (hex), to check a copy before a restore.
    pub sha256: String,
    /// The file's length (the database and etcd's 32-byte digest).
    pub size_bytes: u64,
    pub facts: SnapshotFacts,
    /// How long the stream from the leader took.
    pub took_ms: u64,
    /// The last test restore of it, if any: a snapshot counts as verified only once
    /// one succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
    /// What brings the control plane back from this snapshot once it is deleted
    /// (`quorum create NAME --from-snapshot ID`): its spec and its CA when the snapshot
    /// was recorded. `None` in records of earlier releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recreate: Option<Recreate>,
}

/// A control plane's spec and CA as a snapshot record keeps them (`SnapshotRecord::recreate`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recreate {
    pub spec: ControlPlaneSpec,
    /// The CA's generation (how many rotations it has been through).
    #[serde(default)]
    pub ca_generation: u32,
    /// The CA certificate (PEM); `None` for a plaintext control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert_pem: Option<String>,
    /// The CA's key as the store keeps it: sealed for this snapshot record alone
    /// (`quorum_store` seals it before a backend sees it and opens it on request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_key: Option<String>,
}

impl std::fmt::Debug for Recreate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recreate")
            .field("spec", &self.spec)
            .field("ca_generation", &self.ca_generation)
            .field("ca", &self.ca_cert_pem.as_ref().map(|_| "<kept>"))
            .finish()
    }
}

impl SnapshotRecord {
    /// Restored, served, and read back at its revision by the last test restore.
    pub fn verified(&self) -> bool {
        self.verification.as_ref().is_some_and(|v| v.ok)
    }

    /// What the decision needs of it.
    pub fn seen(&self) -> SnapshotSeen {
        SnapshotSeen {
            id: self.id.clone(),
            taken_at_unix_s: self.taken_at_unix_s,
            revision: self.facts.revision,
            verified: self.verified(),
            restored_at_unix_s: self.verification.as_ref().map(|v| v.at_unix_s),
            restore_failed: self.verification.as_ref().filter(|v| !v.ok).map(|v| {
                v.error
                    .clone()
                    .unwrap_or_else(|| "no reason recorded".into())
            }),
        }
    }
}

/// What a test restore of a snapshot came to: restored with etcd's tool, started as a
/// throwaway member, and read back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub at_unix_s: i64,
    /// The member served, at the snapshot's revision.
    pub ok: bool,
    /// The revision and the number of keys the restored member served (0 when it did
    /// not).
    pub revision: i64,
    pub keys: u64,
    pub took_ms: u64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The bytes etcd appends to a snapshot stream: the sha256 of the database before it.
pub const SNAPSHOT_DIGEST_BYTES: usize = 32;

/// How many snapshots of one control plane may be taken in one second at one revision
/// (their ids differ by a suffix).
pub const MAX_SNAPSHOTS_PER_SECOND: u32 = 10;

/// A snapshot's id and file name: the control plane, the time (UTC, to the second) and
/// the revision, so a listing sorts by time and says what it holds at a glance
/// (`prod-20261203T194501Z-r1234.db`); the `n`th taken in the same second at the same
/// revision (from 0) gets `-{n+1}` before `.db`.
pub fn snapshot_id(cp: &str, taken_at_unix_s: i64, revision: i64, n: u32) -> String {
    let base = format!("{cp}-{}-r{revision}", compact_utc(taken_at_unix_s));
    match n {
        0 => format!("{base}.db"),
        n => format!("{base}-{}.db", n + 1),
    }
}

/// `20261203T194501Z` for a Unix time (humantime's RFC 3339 without its separators;
/// no clock is read). Times before 1970 are taken as 1970.
pub fn compact_utc(unix_s: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_s.max(0) as u64);
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect()
}

/// Whether recording `new` over `old` starts a rollout that must be preceded by a
/// snapshot: a change of the etcd version (either way; a downgrade most of all) of a
/// control plane with machines, whose members hold data. Scaling, pausing and settings
/// start none: no member runs a new binary, and the data is at no more risk than on
/// any other day. A control plane with no machine yet has nothing to keep.
pub fn needs_snapshot(
    old: &ControlPlaneSpec,
    new: &ControlPlaneSpec,
    machines: &[Machine],
) -> bool {
    old.version != new.version && !machines.is_empty()
}

/// A record read back from the store is the one that was written: its id names the
/// control plane and the revision it holds, and its file is longer than etcd's digest.
/// A record that breaks this is corrupt, not a snapshot to restore from.
pub fn check_record(r: &SnapshotRecord) -> Result<(), String> {
    let named = (0..MAX_SNAPSHOTS_PER_SECOND)
        .any(|n| r.id == snapshot_id(&r.control_plane, r.taken_at_unix_s, r.facts.revision, n));
    if !named {
        let want = snapshot_id(&r.control_plane, r.taken_at_unix_s, r.facts.revision, 0);
        return Err(format!(
            "snapshot record '{}' does not match its contents (expected id '{want}')",
            r.id
        ));
    }
    if r.size_bytes <= SNAPSHOT_DIGEST_BYTES as u64 || r.sha256.len() != 64 {
        return Err(format!(
            "snapshot record '{}' has no file to speak of ({} bytes, sha256 '{}')",
            r.id, r.size_bytes, r.sha256
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: &str, at: i64, verified: bool) -> SnapshotSeen {
        SnapshotSeen {
            id: id.into(),
            taken_at_unix_s: at,
            revision: 0,
            verified,
            restored_at_unix_s: verified.then_some(at),
            restore_failed: None,
        }
    }

    const DAY: i64 = 86_400;
    /// 2027-01-15T08:00:00Z.
    const NOW: i64 = 1_800_000_000;

    #[test]
    fn the_newest_of_one_second_is_the_last_of_its_sequence() {
        let t = NOW;
        let one = seen(&snapshot_id("p-1", t, 7, 0), t, false);
        let two = seen(&snapshot_id("p-1", t, 7, 1), t, false);
        let three = seen(&snapshot_id("p-1", t, 7, 2), t, false);
        assert_eq!(sequence_of(&one.id), 1);
        assert_eq!(sequence_of(&two.id), 2);
        assert_eq!(sequence_of("p-1-20270115T080000Z-r7-x.db"), 1);
        let all = [two.clone(), three.clone(), one.clone()];
        assert_eq!(newest(&all), Some(&three));
        let r = RetentionSpec { last: 1, days: 0 };
        assert_eq!(
            retention_plan(&all, r, NOW),
            vec![one.id.clone(), two.id.clone()]
        );
    }

    #[test]
    fn a_snapshot_is_due_once_the_schedule_fired_since_the_newest() {
        let hourly = BackupSpec::default();
        let every_2s = BackupSpec {
            schedule: "*/2 * * * * *".into(),
            ..BackupSpec::default()
        };
        let off = BackupSpec {
            schedule: "off".into(),
            ..BackupSpec::default()
        };
        let table = [
            // (what, spec, newest, created, now, due)
            (
                "never taken, created before the hour",
                &hourly,
                None,
                NOW - 60,
                NOW,
                true,
            ),
            (
                "never taken, created after the hour",
                &hourly,
                None,
                NOW + 1,
                NOW + 3599,
                false,
            ),
            (
                "taken this hour",
                &hourly,
                Some(NOW),
                NOW - DAY,
                NOW + 3599,
                false,
            ),
            (
                "the next hour came",
                &hourly,
                Some(NOW),
                NOW - DAY,
                NOW + 3600,
                true,
            ),
            (
                "seconds: 2 s later",
                &every_2s,
                Some(NOW),
                NOW - DAY,
                NOW + 2,
                true,
            ),
            (
                "seconds: 1 s later",
                &every_2s,
                Some(NOW),
                NOW - DAY,
                NOW + 1,
                false,
            ),
            ("off", &off, None, 0, NOW, false),
        ];
        for (what, spec, newest, created, now, due) in table {
            assert_eq!(snapshot_due(spec, newest, created, now), due, "{what}");
        }
    }

    #[test]
    fn a_schedule_that_does_not_parse_or_keeps_nothing_is_refused() {
        let mut b = BackupSpec::default();
        assert_eq!(b.check(), Ok(()));
        b.schedule = "every hour".into();
        let e = b.check().unwrap_err();
        assert!(
            e.contains("backup.schedule") && e.contains("0 * * * *"),
            "{e}"
        );
        b.schedule = "off".into();
        assert_eq!(b.check(), Ok(()));
        b.retention.last = 0;
        assert!(b.check().unwrap_err().contains("retention.last"));
    }

    #[test]
    fn retention_keeps_the_last_n_one_a_day_and_the_newest_verified() {
        let r = |last, days| RetentionSpec { last, days };
        let hourly: Vec<SnapshotSeen> = (0..6)
            .map(|h| seen(&format!("h{h}"), NOW - h * 3600, false))
            .collect();
        // Three days back, one a day, the oldest verified.
        let daily = [
            seen("d1", NOW - DAY, false),
            seen("d2", NOW - 2 * DAY, false),
            seen("d3", NOW - 3 * DAY, true),
        ];
        let all: Vec<SnapshotSeen> = hourly.iter().chain(daily.iter()).cloned().collect();
        let table: [(&str, RetentionSpec, Vec<&str>); 5] = [
            ("keep 6, 4 days: all", r(6, 4), vec![]),
            (
                "keep 2, no days: the verified stays",
                r(2, 0),
                vec!["d2", "d1", "h5", "h4", "h3", "h2"],
            ),
            (
                "keep 1, 2 days: today's newest and yesterday's",
                r(1, 2),
                vec!["d2", "h5", "h4", "h3", "h2", "h1"],
            ),
            ("keep 3, 1 day", r(3, 1), vec!["d2", "d1", "h5", "h4", "h3"]),
            ("keep 100", r(100, 0), vec![]),
        ];
        for (what, ret, want) in table {
            assert_eq!(retention_plan(&all, ret, NOW), want, "{what}");
        }
        assert_eq!(retention_plan(&[], r(1, 0), NOW), Vec::<String>::new());
    }

    #[test]
    fn ids_name_the_control_plane_the_utc_time_and_the_revision() {
        let cases = [
            ("prod", 0, 1, 0, "prod-19700101T000000Z-r1.db"),
            (
                "prod",
                1_796_327_101,
                1234,
                0,
                "prod-20261203T194501Z-r1234.db",
            ),
            // The second in the same second, at the same revision.
            (
                "prod",
                1_796_327_101,
                1234,
                1,
                "prod-20261203T194501Z-r1234-2.db",
            ),
            // A leap day, and the last second of a year.
            ("a", 951_782_400, 7, 0, "a-20000229T000000Z-r7.db"),
            ("a", 1_798_761_599, 7, 0, "a-20261231T235959Z-r7.db"),
        ];
        for (cp, t, rev, n, want) in cases {
            assert_eq!(snapshot_id(cp, t, rev, n), want, "{cp} {t} {rev} {n}");
        }
    }

    #[test]
    fn only_a_version_change_of_members_with_data_needs_a_snapshot() {
        let old: ControlPlaneSpec =
            serde_json::from_str(r#"{"replicas":3,"version":"3.5.0"}"#).unwrap();
        let machine: Machine = serde_json::from_str(
            r#"{"name":"a-1","serial":1,"address":"127.0.0.1","version":"3.5.0","bootstrap":true}"#,
        )
        .unwrap();
        let some = [machine];
        type Change = fn(&mut ControlPlaneSpec);
        let table: [(&str, Change, &[Machine], bool); 6] = [
            (
                "upgrade",
                |s| s.version = "3.5.1".parse().unwrap(),
                &some,
                true,
            ),
            (
                "downgrade",
                |s| s.version = "3.4.23".parse().unwrap(),
                &some,
                true,
            ),
            (
                "upgrade before any machine",
                |s| s.version = "3.5.1".parse().unwrap(),
                &[],
                false,
            ),
            ("scale", |s| s.replicas = 5, &some, false),
            ("pause", |s| s.paused = true, &some, false),
            ("nothing", |_| {}, &some, false),
        ];
        for (what, change, machines, want) in table {
            let mut new = old.clone();
            change(&mut new);
            assert_eq!(needs_snapshot(&old, &new, machines), want, "{what}");
        }
    }

    fn record(at: i64) -> SnapshotRecord {
        SnapshotRecord {
            recreate: None,
            id: snapshot_id("prod", at, 9, 0),
            control_plane: "prod".into(),
            taken_at_unix_s: at,
            reason: SnapshotReason::OnDemand,
            from_machine: "prod-1".into(),
            etcd_version: "3.5.1".parse().unwrap(),
            spec_version: "3.5.1".parse().unwrap(),
            rollout_to: None,
            location: "/b".into(),
            sha256: "0".repeat(64),
            size_bytes: 20_512,
            facts: SnapshotFacts {
                hash: 1,
                revision: 9,
                total_keys: 7,
                total_size_bytes: 20_480,
            },
            took_ms: 3,
            verification: None,
        }
    }

    #[test]
    fn a_deleted_control_planes_snapshots_keep_the_retention_they_were_kept_with() {
        // Four daily snapshots, the newest yesterday; none verified.
        let recs: Vec<SnapshotRecord> = (1..=4).map(|d| record(NOW - d * DAY)).collect();
        let with = |last, days| {
            let mut spec = crate::ControlPlaneSpec {
                recovery: Default::default(),
                deletion_protection: false,
                replicas: 3,
                version: "3.5.1".parse().unwrap(),
                rollout: Default::default(),
                paused: false,
                haproxy: None,
                certificates: Default::default(),
                insecure_plaintext: false,
                remediation: Default::default(),
                maintenance: Default::default(),
                backup: Default::default(),
                provider: Default::default(),
            };
            spec.backup.retention = RetentionSpec { last, days };
            let mut out = recs.clone();
            for r in &mut out {
                r.recreate = Some(Recreate {
                    spec: spec.clone(),
                    ca_generation: 0,
                    ca_cert_pem: None,
                    ca_key: None,
                });
            }
            out
        };
        let id = |d: i64| record(NOW - d * DAY).id;
        let table: [(&str, Vec<SnapshotRecord>, Vec<String>); 4] = [
            (
                "last 1, 3 days: the day before yesterday's stays",
                with(1, 3),
                vec![id(4), id(3)],
            ),
            ("last 2, no days", with(2, 0), vec![id(4), id(3)]),
            ("last 10: all stay", with(10, 0), vec![]),
            // Records that keep no spec: the default (24 and 7 days) keeps them all.
            ("no spec kept: the default", recs.clone(), vec![]),
        ];
        for (what, records, want) in table {
            assert_eq!(orphan_prunes(&records, NOW), want, "{what}");
        }
        assert_eq!(orphan_prunes(&[], NOW), Vec::<String>::new());
    }

    #[test]
    fn a_record_that_does_not_match_its_id_is_refused() {
        let r = record(1_796_327_101);
        assert_eq!(check_record(&r), Ok(()));
        let second = SnapshotRecord {
            id: snapshot_id("prod", 1_796_327_101, 9, 1),
            ..r.clone()
        };
        assert_eq!(check_record(&second), Ok(()));
        let mut moved = r.clone();
        moved.control_plane = "other".into();
        assert!(check_record(&moved).is_err());
        let mut rev = r.clone();
        rev.facts.revision = 10;
        assert!(check_record(&rev).is_err());
        let mut empty = r;
        empty.size_bytes = 32;
        assert!(check_record(&empty).is_err());
    }
}
