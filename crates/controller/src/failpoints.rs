//! Named crash points around every side effect, for crash-safety tests.
//!
//! Compiled in only with the `failpoints` feature (release builds leave it off, and then
//! every function here is a no-op). Configured from the `FAILPOINTS` environment
//! variable, `name=return` (the `fail` crate's syntax; `1*return` fires once), for
//! example `FAILPOINTS=crash-after-remove-member=return`.
//!
//! - `crash-before-<kind>` / `crash-after-<kind>` for every action kind: the process
//!   exits at once (`_exit(CRASH_EXIT_CODE)`: no destructor, no flush), as a crash does;
//! - `crash-before-publish-status` / `crash-after-publish-status`: around the one store
//!   write that is not an action;
//! - `crash-after-destroy-machine`: inside delete-machine, between destroying the
//!   machine and forgetting its record;
//! - `crash-after-fence-files`: inside fence-machine, between moving the machine's
//!   directory away and forgetting its record;
//! - `lose-answer-<kind>` for membership changes, leader moves and the upkeep calls
//!   (compact, defragment, disarm): the call reached etcd and took effect, but its
//!   answer is lost (the action reports a timeout).

use quorum_core::ActionKind;

/// The failpoint between a fence's two halves: the machine's directory moved away, its
/// record not yet forgotten.
pub const CRASH_AFTER_FENCE_FILES: &str = "crash-after-fence-files";

/// Exit code of a process that crashed at a failpoint.
pub const CRASH_EXIT_CODE: i32 = 86;

/// Action kinds whose answer can be lost after the change took effect.
pub const LOSABLE: [ActionKind; 7] = [
    ActionKind::AddLearner,
    ActionKind::Promote,
    ActionKind::MoveLeader,
    ActionKind::RemoveMember,
    ActionKind::Compact,
    ActionKind::Defragment,
    ActionKind::DisarmAlarm,
];

/// Leadership failpoints, exercised by the tests of several controllers (not crashes):
/// - `ignore-lease-deadline`: the leader skips its own lease deadline, so only the
///   store's fence can stop a deposed leader;
/// - `lose-lease-after-remove-member`: right after etcd acknowledges a member removal,
///   the leader's lease is revoked in the store while the leader still believes it
///   leads (the origin bug report's "leader election lost").
pub const LEADERSHIP: [&str; 2] = ["ignore-lease-deadline", "lose-lease-after-remove-member"];

/// Sharding's crash points, exercised by the sharded fleet's tests (`ha::shards`), which
/// need a management etcd and several replicas:
/// - `crash-before-shard-release`: a shard assigned elsewhere, its passes stopped and
///   awaited, its lease not yet revoked (the new holder waits for it to expire);
/// - `crash-after-shard-release`: its lease revoked, the replica's other shards and its
///   registration still held (they expire).
pub const SHARDING: [&str; 2] = ["crash-before-shard-release", "crash-after-shard-release"];

/// The crash points of `quorum secrets rotate` (`quorum_ops::secrets::rotate`),
/// exercised by `cli/tests/secrets.rs`: after the new key is in the key file; after the
/// store names it; after the first record is re-wrapped; before the old key leaves the
/// file. Every record opens after a crash at any of them, and `rotate` run again
/// finishes the rotation.
pub const SECRETS: [&str; 4] = [
    "crash-after-secrets-key-added",
    "crash-after-secrets-key-named",
    "crash-mid-secrets-rewrap",
    "crash-before-secrets-key-retired",
];

/// Every crash failpoint name, in the order a test should enumerate them.
pub fn all() -> Vec<String> {
    let mut out = Vec::new();
    for kind in ActionKind::ALL {
        out.push(format!("crash-before-{kind}"));
        out.push(format!("crash-after-{kind}"));
    }
    out.push("crash-after-destroy-machine".into());
    out.push(CRASH_AFTER_FENCE_FILES.into());
    out.push("crash-before-publish-status".into());
    out.push("crash-after-publish-status".into());
    for kind in LOSABLE {
        out.push(format!("lose-answer-{kind}"));
    }
    out
}

/// Configures failpoints from `FAILPOINTS`; returns what was configured. An invalid
/// setting is an error (never silently ignored: a test relying on it would pass).
pub fn init_from_env() -> Result<Vec<String>, String> {
    let Ok(spec) = std::env::var("FAILPOINTS") else {
        return Ok(vec![]);
    };
    if !cfg!(feature = "failpoints") {
        return Err(
            "FAILPOINTS is set but this build has no failpoints (build with --features failpoints)"
                .into(),
        );
    }
    let mut known = all();
    known.extend(LEADERSHIP.iter().map(|s| s.to_string()));
    known.extend(SHARDING.iter().map(|s| s.to_string()));
    known.extend(SECRETS.iter().map(|s| s.to_string()));
    let mut set = Vec::new();
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, actions) = item
            .split_once('=')
            .ok_or_else(|| format!("FAILPOINTS entry '{item}' is not name=actions"))?;
        if !known.iter().any(|k| k == name) {
            return Err(format!("FAILPOINTS names an unknown failpoint '{name}'"));
        }
        fail::cfg(name, actions).map_err(|e| format!("FAILPOINTS '{item}': {e}"))?;
        set.push(name.to_string());
    }
    Ok(set)
}

/// Every failpoint must be in `all()`, which the crash test enumerates, or in
/// `LEADERSHIP` or `SHARDING`, which the tests of several controllers enumerate: one
/// that is in none would never be tested. Checked whenever a failpoint is passed in a build with them.
#[cfg(feature = "failpoints")]
fn assert_listed(name: &str) {
    assert!(
        all().iter().any(|n| n == name)
            || LEADERSHIP.contains(&name)
            || SHARDING.contains(&name)
            || SECRETS.contains(&name),
        "failpoint '{name}' is not listed in failpoints::all(), so no test enumerates it"
    );
}

/// Exits the process abruptly if the failpoint `name` is active.
#[allow(unused_variables)]
pub fn crash_point(name: &str) {
    #[cfg(feature = "failpoints")]
    assert_listed(name);
    #[cfg(feature = "failpoints")]
    if fail::eval(name, |_| ()).is_some() {
        eprintln!("failpoint {name}: crashing");
        // SAFETY: _exit ends the process without running anything else, like a crash.
        unsafe { libc_exit(CRASH_EXIT_CODE) }
    }
}

/// Is the failpoint `name` active (for `lose-answer-*`)?
#[allow(unused_variables)]
pub fn active(name: &str) -> bool {
    #[cfg(feature = "failpoints")]
    assert_listed(name);
    #[cfg(feature = "failpoints")]
    if fail::eval(name, |_| ()).is_some() {
        eprintln!("failpoint {name}: firing");
        return true;
    }
    false
}

/// Is the failpoint `name` active? Says nothing (for checks made on every loop).
#[allow(unused_variables)]
pub fn enabled(name: &str) -> bool {
    #[cfg(feature = "failpoints")]
    assert_listed(name);
    #[cfg(feature = "failpoints")]
    if fail::eval(name, |_| ()).is_some() {
        return true;
    }
    false
}

#[cfg(feature = "failpoints")]
unsafe fn libc_exit(code: i32) -> ! {
    extern "C" {
        fn _exit(code: i32) -> !;
    }
    _exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_cover_every_action() {
        let names = all();
        let unique: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        for kind in ActionKind::ALL {
            assert!(names.contains(&format!("crash-before-{kind}")));
            assert!(names.contains(&format!("crash-after-{kind}")));
        }
    }

    /// The crash tests name failpoints by these strings: a renamed kind would leave a
    /// test configuring a failpoint that no longer exists.
    #[test]
    fn names_are_the_ones_the_crash_tests_use() {
        let names = all();
        for name in [
            "crash-before-allocate-machine",
            "crash-after-add-learner",
            "crash-after-remove-member",
            "crash-before-forget-control-plane",
            "crash-after-destroy-machine",
            "crash-after-fence-files",
            "crash-before-force-new-cluster",
            "lose-answer-promote",
            "lose-answer-move-leader",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
        }
        assert_eq!(names.len(), 2 * ActionKind::ALL.len() + 4 + LOSABLE.len());
    }

    #[cfg(feature = "failpoints")]
    #[test]
    #[should_panic(expected = "not listed")]
    fn an_unlisted_failpoint_is_refused() {
        crash_point("crash-somewhere-new");
    }
}
