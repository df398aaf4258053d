//! Client addresses that outlive their members: where a new machine goes so that a
//! client configured with a fixed list of addresses is never left without one.
//!
//! Invariant: a client given a control plane's client addresses (`clientAddresses`:
//! `create`, `credentials`, `status`), or the addresses its members had at any one
//! moment, finds a voter at one of them after every single membership change of a
//! replacement rollout, a remediation or a scale down and back; it never depends on
//! having refreshed its list in time.
//!
//! Why: many clients (etcd's own with a fixed endpoint list, kube-apiserver's
//! `--etcd-servers`, clients that re-read the member list only when a request fails)
//! learn no new address while the one they use still answers. When a rollout replaced
//! every member at a new address, the clients of the last old member were left with
//! only dead addresses the moment it was removed (issue 28: an HA application lost its
//! leader in 7 of 12 default rollouts).
//!
//! How: each control plane keeps an ordered list of addresses, `replicas + 1` long
//! (one spare for the surge of a replacement). A new machine takes the first address
//! of the list that no machine of the control plane holds and that is free (nothing
//! listens there), so a replacement takes over the address its predecessor freed and
//! the members stay on the first addresses of the list. A fresh address is appended
//! only when none is free (a scale up). A scale down removes the member furthest down
//! the list first (`rank`), so it gives back the addresses clients were told last.
//!
//! Members on hosts (`provider: hosts`) are placed by `placement`; their addresses
//! follow the hosts and are not kept here (`recycles` is false for them).

use std::net::SocketAddrV4;

/// Addresses kept beyond the replicas: room for one surge (`rollout.maxSurge` is at
/// most 1), so a replacement's learner has an address clients already know.
pub const SPARE_ADDRESSES: usize = 1;

/// The most addresses one control plane keeps: two for each of the most replicas (7)
/// and its spare. Past it, a fresh address is used but not kept (it cannot happen in
/// one-at-a-time changes; the bound keeps a record from growing without end).
pub const MAX_CLIENT_ADDRESSES: usize = 16;

/// How long the list should be for `replicas` members.
pub fn wanted_len(replicas: u32) -> usize {
    (replicas as usize + SPARE_ADDRESSES).min(MAX_CLIENT_ADDRESSES)
}

/// Where a new machine goes, and the list as it is after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub address: SocketAddrV4,
    pub addresses: Vec<SocketAddrV4>,
}

/// The address for a new machine of a control plane of `replicas` whose list is
/// `kept` and whose machines hold `held` (leaving ones included, in serial order).
///
/// `usable` says whether nothing else listens on an address; `fresh` hands out an
/// address never used before (`None`: none left). A list recorded before this rule
/// (empty) starts from the addresses the members hold, so clients configured with them
/// keep working.
/// The most fresh addresses one allocation asks its source for (a source that keeps
/// answering addresses already held or listed gives out: the search ends).
const FRESH_ATTEMPTS: usize = 4 * MAX_CLIENT_ADDRESSES;

pub fn take(
    kept: &[SocketAddrV4],
    held: &[SocketAddrV4],
    replicas: u32,
    usable: &dyn Fn(SocketAddrV4) -> bool,
    fresh: &mut dyn FnMut() -> Option<SocketAddrV4>,
) -> Option<Taken> {
    // A fresh address some machine holds was read before that machine was recorded
    // (a store retries such an allocation on its compare); never hand it out.
    // Bounded: a source that keeps answering held addresses ends the search.
    let mut fresh = || {
        (0..FRESH_ATTEMPTS)
            .map(|_| fresh())
            .find(|a| a.is_none_or(|a| !held.contains(&a)))
            .flatten()
    };
    let mut addresses: Vec<SocketAddrV4> = Vec::new();
    let seed = if kept.is_empty() { held } else { kept };
    for a in seed {
        if !addresses.contains(a) && addresses.len() < MAX_CLIENT_ADDRESSES {
            addresses.push(*a);
        }
    }
    let reusable = addresses
        .iter()
        .copied()
        .find(|a| !held.contains(a) && usable(*a));
    let address = match reusable {
        Some(a) => a,
        None => {
            let a = fresh()?;
            if addresses.len() < MAX_CLIENT_ADDRESSES {
                addresses.push(a);
            }
            a
        }
    };
    // Reserve the spare now, so the addresses clients are given at creation already
    // name the one the first replacement will take.
    for _ in 0..FRESH_ATTEMPTS {
        if addresses.len() >= wanted_len(replicas) {
            break;
        }
        let Some(a) = fresh() else { break };
        if !addresses.contains(&a) {
            addresses.push(a);
        }
    }
    debug_assert!(!held.contains(&address), "a held address is never taken");
    Some(Taken { address, addresses })
}

/// What to publish as the client endpoints, given the decision's `endpoints`, what is
/// published now (`None`: nothing yet) and the machines; `None`: leave it as it is.
///
/// Never an empty list over a non-empty one: with no leader (it was killed; an
/// election is under way) the decision names no endpoint, but a client that follows
/// the endpoints file would then have nothing to connect to, while the members it had
/// still answer and one of them leads again within seconds. What is kept is what was
/// published, less any machine that is gone, leaving, or out of service for an
/// in-place step (those leave the list as they would with a leader, so a drain is
/// never held up). The list moves on as soon as the decision names a member again.
pub fn to_publish(
    endpoints: &[String],
    published: Option<&[String]>,
    machines: &[crate::Machine],
) -> Option<Vec<String>> {
    let serving = |url: &String| {
        machines
            .iter()
            .any(|m| m.client_url() == *url && !m.deleting && !m.in_place_out_of_service())
    };
    let next: Vec<String> = match published {
        Some(p) if endpoints.is_empty() => p.iter().filter(|u| serving(u)).cloned().collect(),
        _ => endpoints.to_vec(),
    };
    (published != Some(next.as_slice())).then_some(next)
}

/// The addresses the members of `members` name in their peer and client URLs. A
/// new machine never takes one: a member whose machine record is gone (an orphan
/// still in the member list) would otherwise be matched to the new machine by its peer
/// URL, and an empty data directory would start as that member.
pub fn named_by(members: &[crate::Member]) -> Vec<std::net::Ipv4Addr> {
    let mut out: Vec<std::net::Ipv4Addr> = members
        .iter()
        .flat_map(|m| m.peer_urls.iter().chain(m.client_urls.iter()))
        .filter_map(|u| address_of_url(u))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The client URLs to give a client of `cp`: its client addresses, or (members on
/// hosts, or a control plane that has recorded no machine since this rule) the client
/// URLs of its machines that are not leaving.
pub fn client_urls(cp: &crate::ControlPlane, machines: &[crate::Machine]) -> Vec<String> {
    if cp.client_addresses.is_empty() {
        return machines
            .iter()
            .filter(|m| !m.deleting)
            .map(crate::Machine::client_url)
            .collect();
    }
    let scheme = if cp.spec.tls() { "https" } else { "http" };
    cp.client_addresses
        .iter()
        .map(|a| format!("{scheme}://{a}"))
        .collect()
}

/// The IPv4 address a URL names (`https://127.1.0.2:2380` -> `127.1.0.2`), if any.
pub fn address_of_url(url: &str) -> Option<std::net::Ipv4Addr> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', ':']).next()?.parse().ok()
}

/// A member's place in the list for a scale down: members further down go first
/// (`None`, an address not in the list, goes before any).
pub fn rank(kept: &[SocketAddrV4], address: SocketAddrV4) -> std::cmp::Reverse<usize> {
    std::cmp::Reverse(
        kept.iter()
            .position(|a| *a == address)
            .unwrap_or(usize::MAX),
    )
}

/// `rank` as the choice of a machine to remove uses it: a scale down (of up-to-date
/// machines) gives back the addresses clients were told last; a rollout replaces
/// outdated machines oldest first, as it always has (every one ranks the same).
pub fn victim_rank(
    kept: &[SocketAddrV4],
    m: &crate::Machine,
    up_to_date: bool,
) -> std::cmp::Reverse<usize> {
    if up_to_date {
        rank(kept, m.client_address())
    } else {
        std::cmp::Reverse(0)
    }
}

/// Whether a client given `given` would be left without a voter during a replacement
/// of every member (`voters`, in the order they are replaced) when each replacement
/// takes the first free address of `kept` (or a fresh one, outside `given`): the
/// first step after which it would be (1-based), or `None` when it never is.
///
/// A replacement adds its member before it removes the old one; what is checked is the
/// moment after each removal, when the fewest voters remain.
pub fn strands(
    given: &[SocketAddrV4],
    voters: &[SocketAddrV4],
    kept: &[SocketAddrV4],
    recycles: bool,
) -> Option<usize> {
    let mut now: Vec<SocketAddrV4> = voters.to_vec();
    for (step, old) in voters.iter().enumerate() {
        let free = kept.iter().copied().find(|a| recycles && !now.contains(a));
        // A fresh address is one no client was given.
        now.push(free.unwrap_or(SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0)));
        now.retain(|a| a != old);
        if !now.iter().any(|a| given.contains(a)) {
            return Some(step + 1);
        }
    }
    None
}

/// How a machine is reached: its URLs and its client address.
impl crate::Machine {
    fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    pub fn peer_url(&self) -> String {
        let port = self
            .placement
            .as_ref()
            .map_or(crate::model::PEER_PORT, |p| p.peer_port);
        format!("{}://{}:{}", self.scheme(), self.address, port)
    }

    pub fn client_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.client_address())
    }

    /// Its client address (IP and port), as `client_url` names it.
    pub fn client_address(&self) -> std::net::SocketAddrV4 {
        let port = self
            .placement
            .as_ref()
            .map_or(crate::model::CLIENT_PORT, |p| p.client_port);
        std::net::SocketAddrV4::new(self.address, port)
    }
}

#[cfg(test)]
mod tests {

    /// What, the decision's endpoints, the published ones, the machines, and what is
    /// published next (`None`: nothing changes).
    type Publish = (
        &'static str,
        Vec<String>,
        Option<Vec<String>>,
        Vec<crate::Machine>,
        Option<Vec<String>>,
    );

    #[test]
    fn an_empty_list_never_replaces_a_published_one() {
        use crate::Machine;
        let m = |serial: u64, a: u8| Machine {
            address: std::net::Ipv4Addr::new(127, 0, 9, a),
            serial,
            name: format!("r-{serial}"),
            ..serde_json::from_value(serde_json::json!({
                "name": "r-1", "serial": 1, "address": "127.9.0.1", "version": "3.5.1",
                "bootstrap": false, "deleting": false, "tls": false
            }))
            .expect("a machine record")
        };
        let (a, b, c) = (m(1, 1), m(2, 2), m(3, 3));
        let mut leaving = c.clone();
        leaving.deleting = true;
        let urls = |ms: &[&Machine]| ms.iter().map(|m| m.client_url()).collect::<Vec<_>>();
        let all = urls(&[&a, &b, &c]);
        let ab = urls(&[&a, &b]);
        let machines = [a.clone(), b.clone(), c.clone()];
        let table: [Publish; 6] = [
            (
                "nothing yet: even none is published",
                vec![],
                None,
                machines.to_vec(),
                Some(vec![]),
            ),
            (
                "the same: nothing to do",
                ab.clone(),
                Some(ab.clone()),
                machines.to_vec(),
                None,
            ),
            (
                "no leader: the members it had stay",
                vec![],
                Some(all.clone()),
                machines.to_vec(),
                None,
            ),
            (
                "no leader: one leaving goes all the same",
                vec![],
                Some(all.clone()),
                vec![a.clone(), b.clone(), leaving],
                Some(ab.clone()),
            ),
            (
                "no leader: one whose record is gone goes",
                vec![],
                Some(all.clone()),
                vec![a.clone(), b.clone()],
                Some(ab.clone()),
            ),
            (
                "the decision names members again: they are the list",
                urls(&[&a]),
                Some(all.clone()),
                machines.to_vec(),
                Some(urls(&[&a])),
            ),
        ];
        for (what, new, published, ms, want) in table {
            assert_eq!(to_publish(&new, published.as_deref(), &ms), want, "{what}");
        }
    }

    use super::*;
    use std::net::Ipv4Addr;

    fn a(n: u8) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(127, 9, 0, n), 2379)
    }

    fn fresh_from(n: u8) -> impl FnMut() -> Option<SocketAddrV4> {
        let mut next = n;
        move || {
            next += 1;
            Some(a(next - 1))
        }
    }

    #[test]
    fn the_first_machine_reserves_every_address_and_the_spare() {
        let t = take(&[], &[], 3, &|_| true, &mut fresh_from(1)).unwrap();
        assert_eq!(t.address, a(1));
        assert_eq!(t.addresses, vec![a(1), a(2), a(3), a(4)]);
        let t = take(&t.addresses, &[a(1)], 3, &|_| true, &mut fresh_from(9)).unwrap();
        assert_eq!(
            t.address,
            a(2),
            "bootstrap takes the reserved addresses in order"
        );
        assert_eq!(t.addresses.len(), 4);
    }

    #[test]
    fn a_replacement_takes_the_address_its_predecessor_freed() {
        let kept = [a(1), a(2), a(3), a(4)];
        // The first replacement takes the spare ...
        let t = take(&kept, &[a(1), a(2), a(3)], 3, &|_| true, &mut fresh_from(9)).unwrap();
        assert_eq!(t.address, a(4));
        // ... the second the address the first old member left.
        let t = take(&kept, &[a(2), a(3), a(4)], 3, &|_| true, &mut fresh_from(9)).unwrap();
        assert_eq!(t.address, a(1));
        assert_eq!(t.addresses, kept.to_vec(), "the list does not change");
    }

    #[test]
    fn an_address_something_still_listens_on_is_passed_over() {
        let kept = [a(1), a(2), a(3), a(4)];
        let t = take(
            &kept,
            &[a(2), a(3), a(4)],
            3,
            &|x| x != a(1),
            &mut fresh_from(9),
        )
        .unwrap();
        assert_eq!(t.address, a(9), "a fresh address, kept at the end");
        assert_eq!(t.addresses, vec![a(1), a(2), a(3), a(4), a(9)]);
    }

    #[test]
    fn a_list_recorded_before_the_rule_starts_from_the_members() {
        let t = take(&[], &[a(5), a(6), a(7)], 3, &|_| true, &mut fresh_from(9)).unwrap();
        assert_eq!(t.address, a(9));
        assert_eq!(t.addresses, vec![a(5), a(6), a(7), a(9)]);
    }

    #[test]
    fn a_scale_up_grows_the_list_and_no_address_runs_out_silently() {
        let kept = [a(1), a(2), a(3), a(4)];
        let t = take(
            &kept,
            &[a(1), a(2), a(3), a(4)],
            5,
            &|_| true,
            &mut fresh_from(9),
        )
        .unwrap();
        assert_eq!(t.address, a(9));
        assert_eq!(t.addresses, vec![a(1), a(2), a(3), a(4), a(9), a(10)]);
        assert_eq!(take(&kept, &kept, 3, &|_| true, &mut || None), None);
    }

    #[test]
    fn the_list_is_bounded() {
        let kept: Vec<_> = (1..=MAX_CLIENT_ADDRESSES as u8).map(a).collect();
        let t = take(&kept, &kept, 7, &|_| true, &mut fresh_from(100)).unwrap();
        assert_eq!(t.address, a(100));
        assert_eq!(t.addresses.len(), MAX_CLIENT_ADDRESSES);
    }

    #[test]
    fn an_address_a_member_still_names_is_never_taken() {
        let orphan = crate::Member {
            id: 7,
            name: String::new(),
            peer_urls: vec!["https://127.9.0.1:2380".into()],
            client_urls: vec!["http://127.9.0.2:2379".into()],
            is_learner: false,
        };
        let named = named_by(&[orphan]);
        assert_eq!(named, vec![*a(1).ip(), *a(2).ip()]);
        let kept = [a(1), a(2), a(3), a(4)];
        let usable = |x: SocketAddrV4| !named.contains(x.ip());
        let t = take(&kept, &[a(3), a(4)], 3, &usable, &mut fresh_from(9)).unwrap();
        assert_eq!(t.address, a(9));
    }

    #[test]
    fn a_scale_down_removes_the_member_furthest_down_the_list() {
        let kept = [a(1), a(2), a(3), a(4)];
        assert!(rank(&kept, a(4)) < rank(&kept, a(1)));
        assert!(
            rank(&kept, a(50)) < rank(&kept, a(4)),
            "an unknown address first"
        );
    }

    #[test]
    fn only_a_scale_down_ranks_by_the_list() {
        let kept = [a(1), a(2), a(3), a(4)];
        let at = |n: u8| crate::Machine {
            address: *a(n).ip(),
            ..serde_json::from_value(serde_json::json!({
                "name": "m-1", "serial": 1, "address": "127.9.0.1", "version": "3.5.1",
                "bootstrap": false, "deleting": false, "tls": false
            }))
            .expect("a machine record")
        };
        assert!(victim_rank(&kept, &at(4), true) < victim_rank(&kept, &at(1), true));
        assert_eq!(
            victim_rank(&kept, &at(4), false),
            victim_rank(&kept, &at(1), false)
        );
    }

    #[test]
    fn recycled_addresses_never_strand_a_client_of_any_size() {
        for n in [1u8, 3, 5, 7] {
            let voters: Vec<_> = (1..=n).map(a).collect();
            let kept: Vec<_> = (1..=n + 1).map(a).collect();
            assert_eq!(
                strands(&kept, &voters, &kept, true),
                None,
                "{n} members, the list"
            );
            if n > 1 {
                assert_eq!(strands(&voters, &voters, &kept, true), None, "{n}, members");
            }
        }
    }

    #[test]
    fn fresh_addresses_strand_a_client_of_the_old_members_at_the_last_removal() {
        let voters = [a(1), a(2), a(3)];
        assert_eq!(strands(&voters, &voters, &[], false), Some(3));
        // A single member's client that knows only it is stranded at once.
        assert_eq!(strands(&[a(1)], &[a(1)], &[a(1), a(2)], true), Some(1));
    }
}
