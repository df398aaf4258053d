//! Sharding a fleet over controller replicas: which shard a control plane is in, and
//! which live replica should hold each shard.
//!
//! A control plane is in exactly one shard, by a hash of its name that never changes
//! (FNV-1a, 64 bits, modulo the shard count): no process, no version and no restart
//! moves it. The shard count is fixed for every replica sharing a store (the store
//! refuses a replica with another count while any leads).
//!
//! A shard goes to a replica by rank: the live replicas sorted by name, shard `s` to
//! the one at `s mod len`. Every replica computes the same assignment from the same
//! list, and a replica joining or leaving moves only the shards whose rank changes. The
//! assignment says who *should* hold a shard; who *does* is the shard's lease in the
//! store (one holder at a time, fenced): a replica takes a shard only when its lease is
//! free, and gives up one assigned elsewhere before the new holder can take it.
//!
//! Architecture invariant: nothing here reads a clock or the store; liveness arrives
//! as the list of replicas holding a registration lease.

/// The most shards a fleet may have: each is a lease and a store connection per
/// replica, and the store checks them all in one transaction when the count changes.
pub const MAX_SHARDS: u32 = 64;

/// The shard of a control plane: FNV-1a of its name, modulo `count` (`count` of 0 is
/// treated as 1).
pub fn shard_of(name: &str, count: u32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = name
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    // The remainder is below `count`, a u32.
    (hash % u64::from(count.max(1))) as u32
}

/// The replica that should hold `shard`: `replicas` sorted and deduplicated, the one at
/// `shard mod len`. `None` with no live replica.
pub fn owner_of<'a>(shard: u32, replicas: &[&'a str]) -> Option<&'a str> {
    let mut live: Vec<&str> = replicas.to_vec();
    live.sort_unstable();
    live.dedup();
    if live.is_empty() {
        return None;
    }
    Some(live[shard as usize % live.len()])
}

/// The shards `me` should hold among `count`, given the live `replicas` (`me` counts as
/// live even when its registration is not listed yet).
pub fn assigned_to(me: &str, count: u32, replicas: &[&str]) -> Vec<u32> {
    let mut live: Vec<&str> = replicas.to_vec();
    live.push(me);
    (0..count.max(1))
        .filter(|s| owner_of(*s, &live) == Some(me))
        .collect()
}

/// Checks a shard count given on the command line.
pub fn check_count(count: u32) -> Result<u32, String> {
    if (1..=MAX_SHARDS).contains(&count) {
        Ok(count)
    } else {
        Err(format!(
            "--shards must be between 1 and {MAX_SHARDS} (a shard is a lease and a store \
             connection per replica), not {count}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_always_in_the_same_shard_and_shards_spread() {
        // Fixed values: a change of hash would move every control plane.
        assert_eq!(shard_of("", 7), (0xcbf2_9ce4_8422_2325_u64 % 7) as u32);
        assert_eq!(shard_of("prod", 1), 0);
        assert_eq!(shard_of("prod", 0), 0);
        assert_eq!(shard_of("prod", 6), shard_of("prod", 6));
        let mut counts = [0u32; 6];
        for i in 0..600 {
            counts[shard_of(&format!("cp-{i}"), 6) as usize] += 1;
        }
        for c in counts {
            assert!((60..=140).contains(&c), "uneven spread: {counts:?}");
        }
    }

    #[test]
    fn shards_go_round_the_sorted_replicas() {
        let table: &[(u32, &[&str], Option<&str>)] = &[
            (0, &[], None),
            (0, &["b", "a"], Some("a")),
            (1, &["b", "a"], Some("b")),
            (2, &["b", "a"], Some("a")),
            (5, &["c", "a", "b", "a"], Some("c")),
        ];
        for (shard, replicas, want) in table {
            assert_eq!(owner_of(*shard, replicas), *want, "{shard} {replicas:?}");
        }
    }

    #[test]
    fn every_shard_has_exactly_one_owner_and_a_join_moves_few() {
        let three = ["r1", "r2", "r3"];
        let mut all: Vec<u32> = three
            .iter()
            .flat_map(|r| assigned_to(r, 6, &three))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..6).collect::<Vec<_>>());
        assert_eq!(assigned_to("r2", 6, &three), vec![1, 4]);
        // Alone (its own registration not listed yet), a replica holds every shard.
        assert_eq!(assigned_to("r9", 3, &[]), vec![0, 1, 2]);
        // r3 dies: its shards go to the others, theirs stay or move by rank.
        assert_eq!(assigned_to("r1", 6, &["r1", "r2"]), vec![0, 2, 4]);
        assert_eq!(assigned_to("r2", 6, &["r1", "r2"]), vec![1, 3, 5]);
    }

    #[test]
    fn the_count_is_bounded() {
        assert!(check_count(0).is_err());
        assert_eq!(check_count(1), Ok(1));
        assert_eq!(check_count(MAX_SHARDS), Ok(MAX_SHARDS));
        let e = check_count(MAX_SHARDS + 1).unwrap_err();
        assert!(e.contains("between 1 and 64"), "{e}");
    }
}
