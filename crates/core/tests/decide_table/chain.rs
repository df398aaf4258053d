//! A chained upgrade (`quorum upgrade --version` two links away): the link's preflight
//! rule by rule, each with where etcd says it, and the decisions of the controller's
//! rule that takes the next link.

use super::*;
use quorum_core::chain::{preflight, Hold, LinkFacts, V2Store};

const STONE: &str = "3.5.33";
const V36: &str = "3.6.2";

fn facts(lowest: &str, to: &str, cluster: Option<&str>) -> LinkFacts {
    LinkFacts {
        lowest: lowest.parse().unwrap(),
        to: to.parse().unwrap(),
        cluster_version: cluster.map(|v| Version::parse_cluster_version(v).unwrap()),
        zombies: vec![],
        learners: vec![],
        alarms: vec![],
        v2: V2Store::NeverOpen,
    }
}

/// Every preflight rule: the situation, the answer (`ok`, `wait: words`, `refuse:
/// words`), and the source of the rule.
#[test]
fn the_link_preflight_table() {
    let ok = || facts(STONE, V36, Some("3.5"));
    let rows: Vec<(&str, LinkFacts, &str, &str)> = vec![
        (
            "all clear into 3.6",
            ok(),
            "ok",
            "etcd's upgrade guide to 3.6",
        ),
        (
            "a patch link needs no cluster version",
            facts("3.5.16", "3.5.30", None),
            "ok",
            "etcd's upgrade guides: a patch upgrade is a restart",
        ),
        (
            "a member without a machine (a zombie)",
            LinkFacts {
                zombies: vec!["c0ffee".into()],
                ..ok()
            },
            "wait: members no machine of quorum's answers for (c0ffee)",
            "etcd-io/etcd#20967 (removed members come back as zombies in 3.6)",
        ),
        (
            "a learner left behind",
            LinkFacts {
                learners: vec!["cp-4".into()],
                ..ok()
            },
            "wait: a learner is not yet promoted (cp-4)",
            "etcd-io/etcd#19557 (too many learners after the upgrade)",
        ),
        (
            "an alarm",
            LinkFacts {
                alarms: vec!["1: NOSPACE".into()],
                ..ok()
            },
            "wait: alarms are raised (1: NOSPACE)",
            "etcd's upgrade guides: every member healthy first",
        ),
        (
            "a member below the stone",
            facts("3.5.30", V36, Some("3.5")),
            "refuse: below 3.5.32",
            "etcd's upgrade guide to 3.6 (3.5.32 or later), #21889",
        ),
        (
            "below every stone, each reason said",
            facts("3.5.16", V36, Some("3.5")),
            "refuse: #19557",
            "road::STEPPING_STONES",
        ),
        (
            "the cluster version not raised yet",
            facts(STONE, V36, Some("3.4")),
            "behind: the cluster version is 3.4",
            "etcd's upgrade guides: the cluster version follows the lowest member",
        ),
        (
            "the cluster version not known",
            facts(STONE, V36, None),
            "behind: the cluster version is not known yet",
            "etcd's upgrade guides",
        ),
        (
            "v2 content possible where 3.6 drops the v2 store",
            LinkFacts {
                v2: V2Store::MayHoldContent,
                ..ok()
            },
            "refuse: etcdutl check v2store",
            "etcd's upgrade guide to 3.6; etcdutl check v2store (3.5.18+)",
        ),
        (
            "v2 content possible, but the link stays in 3.5",
            LinkFacts {
                v2: V2Store::MayHoldContent,
                ..facts("3.5.16", "3.5.30", Some("3.5"))
            },
            "ok",
            "the v2 store goes only in 3.6",
        ),
    ];
    for (case, f, want, source) in rows {
        let got = preflight(&f);
        let ctx = format!("{case} ({source}): got {got:?}");
        match (want, &got) {
            ("ok", Ok(())) => {}
            (w, Err(Hold::Behind(why)))
                if w.strip_prefix("behind: ").is_some_and(|t| why.contains(t)) => {}
            (w, Err(Hold::Wait(why)))
                if w.strip_prefix("wait: ").is_some_and(|t| why.contains(t)) => {}
            (w, Err(Hold::Refuse(why)))
                if w.strip_prefix("refuse: ").is_some_and(|t| why.contains(t)) => {}
            _ => panic!("{ctx}, want {want}"),
        }
    }
}

fn at(version: &'static str) -> Vec<Fx> {
    vec![m(1, version), m(2, version), m(3, version)]
}

#[test]
fn the_next_link_is_taken_only_after_the_one_under_way() {
    let cases: Vec<(&str, Sit, &str)> = vec![
        (
            "every member serves on the link, a snapshot since: the next link",
            sit(3, STONE, at(STONE))
                .cluster_version("3.5")
                .road(&[V36], 100)
                .snapshot("s1", 10, true),
            "take-next-link",
        ),
        (
            "no snapshot since the link began: one first, before the next link",
            sit(3, STONE, at(STONE))
                .cluster_version("3.5")
                .road(&[V36], 100)
                .snapshot("s0", 200, true),
            "take-snapshot",
        ),
        (
            "the snapshot `quorum upgrade` took as it recorded the road: not since",
            sit(3, STONE, at(STONE))
                .cluster_version("3.5")
                .road(&[V36], 100)
                .snapshot("s0", 100, true),
            "take-snapshot",
        ),
        (
            "the snapshot's test restore failed just now: wait",
            sit(3, STONE, at(STONE))
                .cluster_version("3.5")
                .road(&[V36], 100)
                .snapshot("s1", 10, false),
            "wait: failed its test restore",
        ),
        (
            "a snapshot never test-restored (`quorum snapshot`): restored now",
            sit(3, STONE, at(STONE))
                .cluster_version("3.5")
                .road(&[V36], 100)
                .snapshot("s1", 10, false)
                .restored("s1", None),
            "verify-snapshot:s1",
        ),
        (
            "...and a minute later: its test restore again",
            sit(3, STONE, at(STONE))
                .cluster_version("3.5")
                .road(&[V36], 100)
                .snapshot("s1", 90, false),
            "verify-snapshot:s1",
        ),
        (
            "a machine still on the link before: the rollout goes on, not the road",
            sit(3, STONE, vec![m(1, STONE), m(2, STONE), m(3, OLD)])
                .cluster_version("3.4")
                .road(&[V36], 100),
            "allocate-machine",
        ),
        (
            "every member on 3.5, the cluster version still 3.4: wait for etcd",
            sit(3, STONE, at(STONE))
                .cluster_version("3.4")
                .road(&[V36], 100)
                .snapshot("s1", 10, true),
            "wait: the cluster version is 3.4",
        ),
        (
            "a control plane whose v2 API may have been open: refused before 3.6",
            sit(3, STONE, at(STONE))
                .cluster_version("3.5")
                .road(&[V36], 100)
                .v2_maybe_open()
                .snapshot("s1", 10, true),
            "refuse: etcdutl check v2store",
        ),
        (
            "a member that does not answer: wait for it",
            sit(
                3,
                STONE,
                vec![m(1, STONE), m(2, STONE), m(3, STONE).unreachable()],
            )
            .cluster_version("3.5")
            .road(&[V36], 100)
            .snapshot("s1", 10, true),
            "wait: cp-3",
        ),
        (
            "a patch link within 3.5 (--via): no cluster version needed",
            sit(3, "3.5.16", at("3.5.16"))
                .road(&["3.5.30"], 100)
                .snapshot("s1", 10, true),
            "take-next-link",
        ),
        (
            "in place, the same rule",
            sit(3, STONE, at(STONE))
                .in_place()
                .cluster_version("3.5")
                .road(&[V36], 100)
                .snapshot("s1", 10, true),
            "take-next-link",
        ),
        (
            "the road through: converged",
            sit(3, V36, at(V36)).cluster_version("3.6"),
            "converged",
        ),
    ];
    for (case, s, expect) in &cases {
        check(case, s, expect);
    }
}
