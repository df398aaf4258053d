//! Scheduled snapshots and retention (`spec.backup`): taken only with nothing else to
//! do, never while a rollout, a repair or a defragmentation is due; pruned one at a
//! time, oldest first, never the newest verified.

use super::*;

const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

impl Sit {
    /// The control plane was created this long ago (the schedule counts from there).
    fn created_ago(mut self, s: i64) -> Self {
        self.created_ago_s = Some(s);
        self
    }
    pub(super) fn snapshot(mut self, id: &'static str, ago_s: i64, verified: bool) -> Self {
        self.snapshots.push((id, ago_s, verified));
        self
    }
    fn schedule(mut self, cron: &str) -> Self {
        self.backup.schedule = cron.into();
        self
    }
    fn keep(mut self, last: u32, days: u32) -> Self {
        self.backup.retention = RetentionSpec { last, days };
        self
    }
    /// A fenced directory, fenced this long ago.
    fn fenced(mut self, name: &'static str, ago_s: i64) -> Self {
        self.fenced.push((name, ago_s));
        self
    }
    /// Snapshot `id` was last restored this long ago (`None`: never).
    pub(super) fn restored(mut self, id: &'static str, ago_s: Option<i64>) -> Self {
        self.restored_ago_s.insert(id, ago_s);
        self
    }
}

fn new3() -> Vec<Fx> {
    vec![m(1, NEW), m(2, NEW), m(3, NEW)]
}

/// A failed test restore of the newest snapshot is a condition, never a reason to act
/// or to stay unconverged; once a newer snapshot restores, it is gone.
#[test]
fn a_failed_test_restore_is_a_warning_condition() {
    let failed = sit(3, NEW, new3())
        .created_ago(2 * DAY)
        .schedule("off")
        .snapshot("s0", 10 * 60, false)
        .restored("s0", Some(5 * 60));
    let d = check("the newest failed its restore", &failed, "converged");
    let c = d
        .condition(ConditionKind::SnapshotRestoreFailed)
        .expect("a condition");
    assert!(
        c.status && c.message.contains("s0") && c.message.contains("did not serve"),
        "{c:?}"
    );
    let newer = failed.snapshot("s1", 0, true);
    let d = check("a newer one restored", &newer, "converged");
    assert!(d.condition(ConditionKind::SnapshotRestoreFailed).is_none());
}

#[test]
fn backup_table() {
    // NOW_UNIX_S is 2027-01-15T08:00:00Z: on the hour.
    let cases: Vec<(&str, Sit, &str)> = vec![
        (
            "hourly: never taken, created before the hour",
            sit(3, NEW, new3()).created_ago(10 * 60),
            "take-snapshot",
        ),
        (
            "hourly: taken at the hour, nothing due",
            sit(3, NEW, new3()).created_ago(DAY).snapshot("s0", 0, true),
            "converged",
        ),
        (
            "hourly: the newest is an hour old",
            sit(3, NEW, new3())
                .created_ago(DAY)
                .snapshot("s0", HOUR, true),
            "take-snapshot",
        ),
        (
            "a reader that does not know when it was created decides nothing",
            sit(3, NEW, new3()).snapshot("s0", HOUR, true),
            "converged",
        ),
        (
            "schedule off: none taken",
            sit(3, NEW, new3()).created_ago(DAY).schedule("off"),
            "converged",
        ),
        (
            "every 2 s (seconds first)",
            sit(3, NEW, new3())
                .created_ago(DAY)
                .schedule("*/2 * * * * *")
                .snapshot("s0", 2, false),
            "take-snapshot",
        ),
        (
            "a rollout comes first (a snapshot preceded it)",
            sit(3, NEW, old3()).created_ago(DAY),
            "allocate-machine",
        ),
        (
            "a scale comes first",
            sit(5, NEW, new3()).created_ago(DAY),
            "allocate-machine",
        ),
        (
            "a stopped member is restarted first",
            sit(3, NEW, vec![m(1, NEW), m(2, NEW).stopped(), m(3, NEW)]).created_ago(DAY),
            "start-machine:cp-2",
        ),
        (
            "without a leader nothing is taken",
            sit(3, NEW, new3()).created_ago(DAY).no_leader(),
            "wait: ",
        ),
        // ---- retention, once nothing is due
        (
            "retention: the oldest beyond the last 2 goes first",
            sit(3, NEW, new3())
                .created_ago(DAY)
                .keep(2, 0)
                .snapshot("s0", 0, true)
                .snapshot("s1", HOUR, false)
                .snapshot("s2", 2 * HOUR, false)
                .snapshot("s3", 3 * HOUR, false),
            "prune-snapshot:s3",
        ),
        (
            "retention: the newest verified is kept, however old",
            sit(3, NEW, new3())
                .created_ago(DAY)
                .keep(1, 0)
                .snapshot("s0", 0, false)
                .snapshot("s1", HOUR, true),
            "converged",
        ),
        (
            "retention: a day's newest is kept for `days` days",
            sit(3, NEW, new3())
                .created_ago(3 * DAY)
                .keep(1, 2)
                .snapshot("s0", 0, true)
                .snapshot("s1", DAY, false)
                .snapshot("s2", 2 * DAY, false),
            "prune-snapshot:s2",
        ),
        // ---- fenced directories (spec.recovery.keepFenced, a week by default)
        (
            "a fenced directory older than a week goes, with nothing else to do",
            sit(3, NEW, new3())
                .created_ago(9 * DAY)
                .schedule("off")
                .fenced("cp-9@1", 6 * DAY)
                .fenced("cp-8@2", 8 * DAY),
            "prune-fenced:cp-8@2",
        ),
        (
            "one younger than a week stays",
            sit(3, NEW, new3())
                .created_ago(9 * DAY)
                .schedule("off")
                .fenced("cp-9@1", 6 * DAY),
            "converged",
        ),
        (
            "a rollout comes first",
            sit(3, NEW, vec![m(1, NEW), m(2, NEW), m(3, OLD)])
                .created_ago(9 * DAY)
                .schedule("off")
                .fenced("cp-8@2", 8 * DAY),
            "allocate-machine",
        ),
        // ---- test restores (verifyEvery, a day by default)
        (
            "the newest never restored (taken with --no-verify, or before a rollout)",
            sit(3, NEW, new3())
                .created_ago(DAY)
                .schedule("off")
                .snapshot("s0", 10 * 60, false)
                .restored("s0", None),
            "verify-snapshot:s0",
        ),
        (
            "the newest restored a day ago: again",
            sit(3, NEW, new3())
                .created_ago(2 * DAY)
                .schedule("off")
                .snapshot("s0", DAY, true),
            "verify-snapshot:s0",
        ),
        (
            "the newest restored an hour ago: nothing",
            sit(3, NEW, new3())
                .created_ago(2 * DAY)
                .schedule("off")
                .snapshot("s0", DAY, true)
                .restored("s0", Some(HOUR)),
            "converged",
        ),
        (
            "only the newest is restored again, not an older one never restored",
            sit(3, NEW, new3())
                .created_ago(2 * DAY)
                .snapshot("s0", 0, true)
                .snapshot("s1", HOUR, false)
                .restored("s1", None),
            "converged",
        ),
        (
            "a due snapshot comes before pruning",
            sit(3, NEW, new3())
                .created_ago(DAY)
                .keep(1, 0)
                .snapshot("s0", HOUR, true)
                .snapshot("s1", 2 * HOUR, false),
            "take-snapshot",
        ),
    ];
    for (case, s, expect) in &cases {
        check(case, s, expect);
    }
}
