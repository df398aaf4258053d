//! Where a new machine of the `hosts` provider goes: a pure choice among the hosts
//! registered, given the machines of the control plane already placed.
//!
//! Rules, in order:
//! 1. Only hosts whose agent answers (`HostView::ready`) and that are not being
//!    removed (`HostView::removing`: `quorum host remove` began) are candidates.
//! 2. A host runs at most one machine of a control plane (leaving ones included: a
//!    replacement that surged onto its predecessor's host would put two voters on one
//!    host, and that host's loss would cost two votes). The one exception: a
//!    remediation's replacement may take its predecessor's host (`beside`), recorded
//!    only once that member is removed and its process stopped.
//! 3. Failure domains: a host's `zone` label names its domain (a host without one is
//!    its own). No domain may hold more machines of the control plane than it can
//!    lose, `replicas - quorum(replicas)` (at least 1), so the loss of any one domain
//!    leaves a quorum. A placement past that is refused, never made.
//! 4. Among the candidates left: the domain with the fewest of its machines, then the
//!    host with the fewest members of any control plane, then the name.

use crate::Machine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The label that names a host's failure domain.
pub const ZONE_LABEL: &str = "zone";

/// A host, as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostView {
    pub name: String,
    /// Its failure domain (`zone` label); `None`: the host alone.
    pub zone: Option<String>,
    /// Its agent answered the last look.
    pub ready: bool,
    /// `quorum host remove` began: it takes no new machine.
    pub removing: bool,
    /// Members of every control plane it runs (recorded machines placed there).
    pub load: usize,
}

/// Why no host can take a new machine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("no hosts are registered: add some with `quorum host add NAME --address IP`")]
    NoHosts,
    #[error("no host can take another member: {hosts} hosts, {ready} of them answering{removing}, {used} already run one of this control plane{zones}; add a host")]
    NoFreeHost {
        hosts: usize,
        ready: usize,
        /// ", N being removed" when some are, else empty.
        removing: String,
        used: usize,
        zones: String,
    },
}

/// The most machines of a control plane of `replicas` one failure domain may hold:
/// what it can lose and keep a quorum (at least 1, for 1 or 2 replicas).
pub fn max_per_domain(replicas: u32) -> usize {
    let quorum = replicas / 2 + 1;
    (replicas.saturating_sub(quorum) as usize).max(1)
}

/// The host for a new machine of a control plane of `replicas` whose recorded
/// machines are `machines` (leaving ones included).
pub fn place(
    hosts: &[HostView],
    machines: &[Machine],
    replicas: u32,
) -> Result<String, PlacementError> {
    let used: Vec<&str> = machines.iter().filter_map(Machine::host).collect();
    place_beside(hosts, &used, replicas)
}

/// The machines a new machine is placed beside: all of them, but the one a remediation
/// replaces. That one's replacement is recorded only once its member was removed and
/// its process stopped (`decide`'s rule 9), so its host may take the replacement:
/// without that, a control plane with no spare host could never be repaired.
pub fn beside<'a>(machines: &'a [Machine], replaces: Option<&str>) -> Vec<&'a Machine> {
    machines
        .iter()
        .filter(|m| !(m.deleting && replaces == Some(m.name.as_str())))
        .collect()
}

/// The hosts `count` new machines would go to, one after another, beside `machines`
/// (a scale-up adds them all; a rollout by replacement needs one at a time, as each
/// surge machine's predecessor leaves before the next is made). What `--dry-run` and
/// the record-time check of a change ask, and the core before it allocates.
pub fn room_for(
    hosts: &[HostView],
    machines: &[Machine],
    replicas: u32,
    count: usize,
) -> Result<Vec<String>, PlacementError> {
    let mut used: Vec<String> = machines
        .iter()
        .filter_map(Machine::host)
        .map(str::to_string)
        .collect();
    let mut chosen = Vec::with_capacity(count);
    for _ in 0..count {
        let beside: Vec<&str> = used.iter().map(String::as_str).collect();
        let host = place_beside(hosts, &beside, replicas)?;
        used.push(host.clone());
        chosen.push(host);
    }
    Ok(chosen)
}

/// `place`, with the hosts already used by the control plane's machines given by name
/// (a host once per machine on it).
fn place_beside(
    hosts: &[HostView],
    used: &[&str],
    replicas: u32,
) -> Result<String, PlacementError> {
    if hosts.is_empty() {
        return Err(PlacementError::NoHosts);
    }
    let domain = |h: &HostView| h.zone.clone().unwrap_or_else(|| format!("host {}", h.name));
    let mut per_domain: BTreeMap<String, usize> = BTreeMap::new();
    for h in hosts.iter().filter(|h| used.contains(&h.name.as_str())) {
        *per_domain.entry(domain(h)).or_default() += used.iter().filter(|u| **u == h.name).count();
    }
    let cap = max_per_domain(replicas);
    let best = hosts
        .iter()
        .filter(|h| h.ready && !h.removing && !used.contains(&h.name.as_str()))
        .filter(|h| per_domain.get(&domain(h)).copied().unwrap_or(0) < cap)
        .min_by_key(|h| {
            (
                per_domain.get(&domain(h)).copied().unwrap_or(0),
                h.load,
                h.name.clone(),
            )
        });
    match best {
        Some(h) => Ok(h.name.clone()),
        None => {
            let zoned = hosts.iter().any(|h| h.zone.is_some());
            Err(PlacementError::NoFreeHost {
                hosts: hosts.len(),
                ready: hosts.iter().filter(|h| h.ready).count(),
                removing: match hosts.iter().filter(|h| h.removing).count() {
                    0 => String::new(),
                    n => format!(", {n} being removed"),
                },
                used: hosts
                    .iter()
                    .filter(|h| used.contains(&h.name.as_str()))
                    .count(),
                zones: if zoned {
                    format!(", and no zone may hold more than {cap} of its {replicas}")
                } else {
                    String::new()
                },
            })
        }
    }
}

/// Which machine provider runs a control plane's members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    #[default]
    Local,
    Hosts,
}

impl ProviderKind {
    pub fn is_local(&self) -> bool {
        *self == ProviderKind::Local
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::Hosts => "hosts",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Placement, Version};

    fn host(name: &str, zone: Option<&str>) -> HostView {
        HostView {
            name: name.into(),
            zone: zone.map(Into::into),
            ready: true,
            removing: false,
            load: 0,
        }
    }

    fn on(host: &str, serial: u64) -> Machine {
        Machine {
            requested: None,
            name: format!("p-{serial}"),
            serial,
            address: std::net::Ipv4Addr::new(198, 18, 0, serial as u8),
            version: Version::new(3, 5, 1),
            bootstrap: true,
            deleting: false,
            tls: false,
            certificates_not_after_unix_s: None,
            remediation: None,
            in_place: None,
            ca_step: None,
            placement: Some(Placement {
                host: host.into(),
                client_port: 2379,
                peer_port: 2380,
            }),
        }
    }

    #[test]
    fn the_cap_per_domain_is_what_the_control_plane_can_lose() {
        let table = [(1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (6, 2), (7, 3)];
        for (replicas, cap) in table {
            assert_eq!(max_per_domain(replicas), cap, "{replicas}");
        }
    }

    /// (hosts, machines, replicas, expected host or an error's words)
    type Row<'a> = (&'a [HostView], Vec<Machine>, u32, Result<&'a str, &'a str>);

    #[test]
    fn placement_table() {
        let abc = [host("a", None), host("b", None), host("c", None)];
        let mut down = abc.clone();
        down[0].ready = false;
        let mut loaded = abc.clone();
        loaded[0].load = 4;
        let mut leaving = abc.clone();
        leaving[0].removing = true;
        let zones = [
            host("a1", Some("a")),
            host("a2", Some("a")),
            host("b1", Some("b")),
            host("b2", Some("b")),
        ];
        let three_zones = [
            host("a1", Some("a")),
            host("a2", Some("a")),
            host("b1", Some("b")),
            host("c1", Some("c")),
        ];
        let table: Vec<Row> = vec![
            (&[], vec![], 3, Err("no hosts are registered")),
            (&abc, vec![], 3, Ok("a")),
            (&abc, vec![on("a", 1)], 3, Ok("b")),
            (&abc, vec![on("a", 1), on("b", 2)], 3, Ok("c")),
            (
                &abc,
                vec![on("a", 1), on("b", 2), on("c", 3)],
                3,
                Err("3 already run one"),
            ),
            (&down, vec![], 3, Ok("b")),
            (
                &down,
                vec![on("b", 1), on("c", 2)],
                3,
                Err("2 of them answering"),
            ),
            (&loaded, vec![], 3, Ok("b")),
            // A host being removed takes nothing new, though it answers.
            (&leaving, vec![], 3, Ok("b")),
            (
                &leaving,
                vec![on("b", 1), on("c", 2)],
                3,
                Err("3 of them answering, 1 being removed"),
            ),
            // Zones: a second member in zone a would be two of three in one zone.
            (&zones, vec![on("a1", 1)], 3, Ok("b1")),
            (
                &zones,
                vec![on("a1", 1), on("b1", 2)],
                3,
                Err("no zone may hold more than 1 of its 3"),
            ),
            (&three_zones, vec![on("a1", 1), on("b1", 2)], 3, Ok("c1")),
            // Five members over three zones: two per zone at most.
            (
                &three_zones,
                vec![on("a1", 1), on("b1", 2), on("c1", 3)],
                5,
                Ok("a2"),
            ),
        ];
        for (i, (hosts, machines, replicas, want)) in table.into_iter().enumerate() {
            let room = room_for(hosts, &machines, replicas, 1).map(|mut h| h.remove(0));
            assert_eq!(
                room,
                place(hosts, &machines, replicas),
                "row {i}: room for one"
            );
            let got = place(hosts, &machines, replicas);
            match (got, want) {
                (Ok(h), Ok(w)) => assert_eq!(h, w, "row {i}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "row {i}: {e}"),
                (got, want) => panic!("row {i}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn room_for_several_places_them_one_beside_the_other() {
        let hosts: Vec<HostView> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| host(n, None))
            .collect();
        let three = vec![on("a", 1), on("b", 2), on("c", 3)];
        assert_eq!(room_for(&hosts, &three, 5, 2).unwrap(), ["d", "e"]);
        let e = room_for(&hosts, &three, 7, 3).unwrap_err();
        assert!(e.to_string().contains("5 already run one"), "{e}");
        assert_eq!(
            room_for(&hosts, &three, 5, 0).unwrap(),
            Vec::<String>::new()
        );
    }
}
