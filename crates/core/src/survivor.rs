//! Which survivor a recovery may start from (`quorum recover --from-member M`).
//!
//! Invariant: a recovery never starts from a member that holds less than another way
//! back that a person could take instead, unless they say they accept the loss
//! (`--accept-data-loss`): not a learner (it may not hold every committed write), not
//! one behind another survivor that answers, not one behind the newest snapshot that a
//! test restore verified. What each holds is its revision: a member's as it answers
//! (serializable: no quorum needed), a snapshot's as its facts say.
//!
//! `best` is the one answer to "which survivor keeps most": the `QuorumLost` condition
//! names it and the recovery's plan measures a person's choice against it, so the
//! command the condition offers is never the one the plan refuses.

use crate::model::EndpointStatus;
use std::cmp::Reverse;

/// A survivor as the recovery's plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survivor<'a> {
    pub machine: &'a str,
    /// The machine's serial: among survivors that hold the same, the oldest is named.
    pub serial: u64,
    /// Its revision, when it answers (`None`: it does not: it is started from its data,
    /// and what it holds is known only then).
    pub revision: Option<i64>,
    /// The raft index it has applied (its log's last index where that is higher): among
    /// equal revisions, the one further along.
    pub applied_index: u64,
    pub is_learner: bool,
}

impl<'a> Survivor<'a> {
    /// A machine as its own endpoint answered (`status`), or did not.
    pub fn of(machine: &'a str, serial: u64, status: Option<&EndpointStatus>) -> Survivor<'a> {
        Survivor {
            machine,
            serial,
            revision: status.map(|st| st.revision),
            applied_index: status.map_or(0, |st| st.raft_applied_index.max(st.raft_index)),
            is_learner: status.is_some_and(|st| st.is_learner),
        }
    }
}

/// The survivor a recovery keeps most from: a voter that answers, with the highest
/// revision, then the highest applied index, then the oldest. `None` when no voter
/// answers.
pub fn best<'s, 'a>(survivors: &'s [Survivor<'a>]) -> Option<&'s Survivor<'a>> {
    survivors
        .iter()
        .filter(|s| !s.is_learner && s.revision.is_some())
        .max_by_key(|s| (s.revision, s.applied_index, Reverse(s.serial)))
}

/// Why recovering from `chosen` would keep less than another way back, in the words
/// of the refusal (naming the better way); `None` when it is the best known.
/// `snapshot`: the newest verified snapshot's id and revision.
pub fn worse_than_another(
    chosen: &Survivor<'_>,
    others: &[Survivor<'_>],
    snapshot: Option<(&str, i64)>,
) -> Option<String> {
    let name = chosen.machine;
    if chosen.is_learner {
        return Some(format!(
            "{name} was still a learner: it may not hold every write the cluster acknowledged"
        ));
    }
    let mine = chosen.revision?;
    let others: Vec<Survivor<'_>> = others
        .iter()
        .filter(|o| o.machine != name)
        .cloned()
        .collect();
    let better = best(&others).and_then(|b| Some((b.machine, b.revision?)));
    if let Some((other, r)) = better.filter(|(_, r)| *r > mine) {
        return Some(format!(
            "{other} holds more (revision {r}, {name} {mine}): `--from-member {other}` keeps {} more revision(s)",
            r - mine
        ));
    }
    match snapshot {
        Some((id, r)) if r > mine => Some(format!(
            "the verified snapshot {id} holds more (revision {r}, {name} {mine}): `--from-snapshot {id}` keeps {} more revision(s)",
            r - mine
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(machine: &str, revision: Option<i64>, is_learner: bool) -> Survivor<'_> {
        Survivor {
            machine,
            serial: 0,
            revision,
            applied_index: 0,
            is_learner,
        }
    }

    /// What, the survivor chosen, the others, the newest verified snapshot, and the
    /// refusal expected (a part of it).
    type Case<'a> = (
        &'a str,
        Survivor<'a>,
        Vec<Survivor<'a>>,
        Option<(&'a str, i64)>,
        Option<&'a str>,
    );

    #[test]
    fn the_best_is_a_voter_with_the_most_then_the_furthest_then_the_oldest() {
        let v = |m, serial, revision, applied_index| Survivor {
            machine: m,
            serial,
            revision,
            applied_index,
            is_learner: false,
        };
        let learner = Survivor {
            is_learner: true,
            ..v("l", 9, Some(900), 900)
        };
        let all = [
            v("a", 1, Some(100), 50),
            v("b", 2, Some(120), 10),
            learner.clone(),
        ];
        assert_eq!(best(&all).map(|s| s.machine), Some("b"));
        let tie = [v("a", 1, Some(100), 50), v("b", 2, Some(100), 60)];
        assert_eq!(best(&tie).map(|s| s.machine), Some("b"));
        let same = [v("c", 3, Some(100), 60), v("b", 2, Some(100), 60)];
        assert_eq!(best(&same).map(|s| s.machine), Some("b"));
        assert_eq!(best(&[learner, v("q", 4, None, 0)]), None);
        // Whichever it names, measured against the others, is never the worse choice.
        for set in [&all[..], &tie[..], &same[..]] {
            let b = best(set).expect("a best");
            assert_eq!(worse_than_another(b, set, None), None, "{set:?}");
        }
    }

    #[test]
    fn the_worse_choice_is_named_with_the_better_one() {
        let a = s("a", Some(100), false);
        let b = s("b", Some(120), false);
        let quiet = s("c", None, false);
        let learner = s("l", Some(500), true);
        let table: [Case; 7] = [
            (
                "the best survivor",
                b.clone(),
                vec![a.clone(), b.clone()],
                None,
                None,
            ),
            (
                "behind another survivor",
                a.clone(),
                vec![a.clone(), b.clone()],
                None,
                Some("b holds more (revision 120, a 100): `--from-member b` keeps 20"),
            ),
            (
                "behind the verified snapshot",
                b.clone(),
                vec![b.clone()],
                Some(("s1", 130)),
                Some("the verified snapshot s1 holds more"),
            ),
            (
                "ahead of the snapshot",
                b.clone(),
                vec![a.clone()],
                Some(("s1", 110)),
                None,
            ),
            (
                "a learner, whatever it says",
                learner.clone(),
                vec![a.clone()],
                None,
                Some("l was still a learner"),
            ),
            (
                "a learner ahead is no better way back",
                a.clone(),
                vec![learner.clone()],
                None,
                None,
            ),
            (
                "one that does not answer: nothing known to compare",
                quiet.clone(),
                vec![a.clone()],
                Some(("s1", 900)),
                None,
            ),
        ];
        for (what, chosen, others, snap, want) in table {
            let got = worse_than_another(&chosen, &others, snap);
            match want {
                None => assert_eq!(got, None, "{what}"),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(w)),
                    "{what}: {got:?}"
                ),
            }
        }
    }
}
