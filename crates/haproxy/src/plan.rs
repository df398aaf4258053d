//! What to do so that a backend serves exactly the wanted endpoints. Pure.

use crate::Server;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

/// One runtime-API operation on a backend's server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LbOp {
    /// A wanted server is missing: add it (and enable it).
    Add { name: String, addr: SocketAddr },
    /// A wanted server is present at the wanted address but in maintenance.
    Enable { name: String },
    /// A present server is not wanted (or is at another address) and still takes
    /// traffic: put it in maintenance (`RuntimeApi::set_maintenance`; `drain_server`
    /// also ends its sessions).
    Drain { name: String },
    /// A present server is not wanted (or is at another address) and is in maintenance
    /// (drained already): delete it.
    Delete { name: String },
}

impl LbOp {
    /// The server the operation is about.
    pub fn name(&self) -> &str {
        match self {
            LbOp::Add { name, .. }
            | LbOp::Enable { name }
            | LbOp::Drain { name }
            | LbOp::Delete { name } => name,
        }
    }

    /// Adds capacity before taking it away: adds and enables, then drains, then deletes.
    fn group(&self) -> u8 {
        match self {
            LbOp::Add { .. } | LbOp::Enable { .. } => 0,
            LbOp::Drain { .. } => 1,
            LbOp::Delete { .. } => 2,
        }
    }
}

impl fmt::Display for LbOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LbOp::Add { name, addr } => write!(f, "add server {name} at {addr}"),
            LbOp::Enable { name } => write!(f, "enable server {name}"),
            LbOp::Drain { name } => write!(f, "drain server {name}"),
            LbOp::Delete { name } => write!(f, "delete server {name}"),
        }
    }
}

/// What to do so that the backend serves exactly the `desired` (name, address) pairs,
/// given the servers `current`ly present. Pure; one round of a level-triggered loop:
/// perform the operations, observe again, plan again.
///
/// - a desired server missing → `Add`;
/// - a desired server present at the same address, in maintenance → `Enable`;
/// - a present server not desired → `Drain` while it takes traffic, `Delete` once it is
///   in maintenance;
/// - a present server with a desired name but another address is not desired this
///   round (`Drain`, next round `Delete`); it is added at the new address only once it
///   is gone, never under the same name while it is present.
///
/// Order: adds and enables first, then drains, then deletes (capacity is added before it
/// is taken away); by name within each group. A name listed twice in `desired` keeps
/// its first address.
pub fn plan(desired: &[(String, SocketAddr)], current: &[Server]) -> Vec<LbOp> {
    let mut wanted: BTreeMap<&str, SocketAddr> = BTreeMap::new();
    for (name, addr) in desired {
        wanted.entry(name.as_str()).or_insert(*addr);
    }
    let present: BTreeMap<&str, &Server> = current.iter().map(|s| (s.name.as_str(), s)).collect();

    let mut ops = Vec::new();
    for (&name, &addr) in &wanted {
        match present.get(name) {
            None => ops.push(LbOp::Add {
                name: name.to_string(),
                addr,
            }),
            Some(s) if s.addr == addr && s.maintenance => ops.push(LbOp::Enable {
                name: name.to_string(),
            }),
            // In service at the wanted address, or at another one (taken away below).
            Some(_) => {}
        }
    }
    for (&name, s) in &present {
        let keep = wanted.get(name) == Some(&s.addr);
        if keep {
            continue;
        }
        ops.push(if s.maintenance {
            LbOp::Delete {
                name: name.to_string(),
            }
        } else {
            LbOp::Drain {
                name: name.to_string(),
            }
        });
    }
    // Stable: within a group the order is already by name.
    ops.sort_by_key(LbOp::group);
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 9, last], 2379))
    }

    fn srv(name: &str, last: u8, maintenance: bool) -> Server {
        Server {
            name: name.into(),
            addr: addr(last),
            maintenance,
            up: !maintenance,
        }
    }

    fn add(name: &str, last: u8) -> LbOp {
        LbOp::Add {
            name: name.into(),
            addr: addr(last),
        }
    }
    fn enable(name: &str) -> LbOp {
        LbOp::Enable { name: name.into() }
    }
    fn drain(name: &str) -> LbOp {
        LbOp::Drain { name: name.into() }
    }
    fn delete(name: &str) -> LbOp {
        LbOp::Delete { name: name.into() }
    }

    #[test]
    fn plan_table() {
        // (situation, desired, current, expected)
        #[allow(clippy::type_complexity)]
        let rows: Vec<(&str, Vec<(&str, u8)>, Vec<Server>, Vec<LbOp>)> = vec![
            ("nothing wanted, nothing there", vec![], vec![], vec![]),
            (
                "empty backend gets every member, by name",
                vec![("m3", 3), ("m1", 1), ("m2", 2)],
                vec![],
                vec![add("m1", 1), add("m2", 2), add("m3", 3)],
            ),
            (
                "converged: nothing to do",
                vec![("m1", 1), ("m2", 2)],
                vec![srv("m1", 1, false), srv("m2", 2, false)],
                vec![],
            ),
            (
                "wanted but in maintenance: enable",
                vec![("m1", 1)],
                vec![srv("m1", 1, true)],
                vec![enable("m1")],
            ),
            (
                "not wanted, in service: drain",
                vec![("m1", 1)],
                vec![srv("m1", 1, false), srv("m2", 2, false)],
                vec![drain("m2")],
            ),
            (
                "not wanted, drained: delete",
                vec![("m1", 1)],
                vec![srv("m1", 1, false), srv("m2", 2, true)],
                vec![delete("m2")],
            ),
            (
                "everything removed",
                vec![],
                vec![srv("m2", 2, true), srv("m1", 1, false)],
                vec![drain("m1"), delete("m2")],
            ),
            (
                "rolling replacement: add before drain before delete",
                vec![("m2", 2), ("m4", 4)],
                vec![srv("m1", 1, true), srv("m2", 2, false), srv("m3", 3, false)],
                vec![add("m4", 4), drain("m3"), delete("m1")],
            ),
            (
                "adds and enables share a group, by name",
                vec![("m1", 1), ("m2", 2), ("m3", 3)],
                vec![srv("m2", 2, true)],
                vec![add("m1", 1), enable("m2"), add("m3", 3)],
            ),
            (
                "moved address, in service: drain, no add under the same name",
                vec![("m1", 5)],
                vec![srv("m1", 1, false)],
                vec![drain("m1")],
            ),
            (
                "moved address, drained: delete, still no add",
                vec![("m1", 5)],
                vec![srv("m1", 1, true)],
                vec![delete("m1")],
            ),
            (
                "moved address, gone: add at the new address",
                vec![("m1", 5)],
                vec![],
                vec![add("m1", 5)],
            ),
            (
                "a name listed twice keeps its first address",
                vec![("m1", 1), ("m1", 7)],
                vec![srv("m1", 1, false)],
                vec![],
            ),
        ];
        for (situation, desired, current, expected) in rows {
            let desired: Vec<(String, SocketAddr)> = desired
                .into_iter()
                .map(|(n, last)| (n.to_string(), addr(last)))
                .collect();
            assert_eq!(plan(&desired, &current), expected, "{situation}");
            // Pure and independent of the order servers are listed in.
            let mut reversed = current.clone();
            reversed.reverse();
            assert_eq!(
                plan(&desired, &reversed),
                expected,
                "{situation} (reversed)"
            );
        }
    }

    #[test]
    fn converges_in_rounds_against_an_ideal_backend() {
        // Apply each round's operations to a model backend; a moved server takes three
        // rounds (drain, delete, add), everything else at most two.
        let desired = vec![("m1".to_string(), addr(5)), ("m2".to_string(), addr(2))];
        let mut backend = vec![srv("m1", 1, false), srv("m3", 3, false)];
        let mut rounds = 0;
        loop {
            let ops = plan(&desired, &backend);
            if ops.is_empty() {
                break;
            }
            rounds += 1;
            assert!(rounds <= 3, "did not converge: {ops:?}");
            for op in ops {
                match op {
                    LbOp::Add { name, addr } => backend.push(Server {
                        name,
                        addr,
                        maintenance: false,
                        up: true,
                    }),
                    LbOp::Enable { name } => backend
                        .iter_mut()
                        .filter(|s| s.name == name)
                        .for_each(|s| s.maintenance = false),
                    LbOp::Drain { name } => backend
                        .iter_mut()
                        .filter(|s| s.name == name)
                        .for_each(|s| s.maintenance = true),
                    LbOp::Delete { name } => backend.retain(|s| s.name != name),
                }
            }
        }
        assert_eq!(rounds, 3);
        backend.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(backend, vec![srv("m1", 5, false), srv("m2", 2, false)]);
    }

    #[test]
    fn display() {
        assert_eq!(add("m1", 1).to_string(), "add server m1 at 127.0.9.1:2379");
        assert_eq!(enable("m1").to_string(), "enable server m1");
        assert_eq!(drain("m1").to_string(), "drain server m1");
        assert_eq!(delete("m1").to_string(), "delete server m1");
    }
}
