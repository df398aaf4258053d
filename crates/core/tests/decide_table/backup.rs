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
    fn snapshot(mut self, id: &'static str, ago_s: i64, verified: bool) -> Self {
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
}

fn new3() -> Vec<Fx> {
    vec![m(1, NEW), m(2, NEW), m(3, NEW)]
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
