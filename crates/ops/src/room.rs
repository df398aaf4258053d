//! Whether the machines a change needs have somewhere to go, asked before the change
//! is recorded and by `--dry-run`: the rule the core refuses the step by
//! (`quorum_core::placement::room_for`), from the hosts' records. A change whose
//! machines no host can take is refused with the reason and the ways out, not recorded
//! to stall; `--force` records it anyway (the step then waits, Blocked, for a host).

use quorum_core::placement::{room_for, HostView};
use quorum_core::{ControlPlaneSpec, Machine, Strategy};

/// The most machines beside `machines` that `spec` needs at once: its replicas, plus
/// one surge machine while a machine runs another version and the rollout replaces.
pub fn machines_needed(spec: &ControlPlaneSpec, machines: &[Machine]) -> usize {
    let active = machines.iter().filter(|m| !m.deleting).count();
    let rolls = machines.iter().any(|m| m.version != spec.version);
    let surge = rolls && spec.rollout.strategy == Strategy::Replace && spec.rollout.max_surge >= 1;
    (spec.replicas as usize + usize::from(surge)).saturating_sub(active)
}

/// Why the change from `old` to `new` cannot get the machines it needs on `hosts`
/// (`None`: it can, it needs none, or it changes nothing that needs one).
pub fn refusal(
    name: &str,
    old: &ControlPlaneSpec,
    new: &ControlPlaneSpec,
    machines: &[Machine],
    hosts: &[HostView],
) -> Option<String> {
    let asks =
        new.version != old.version || new.replicas != old.replicas || new.rollout != old.rollout;
    let needed = machines_needed(new, machines);
    if new.provider.is_local() || !asks || needed == 0 {
        return None;
    }
    let why = room_for(hosts, machines, new.replicas, needed).err()?;
    let rolls = machines.iter().any(|m| m.version != new.version);
    let ways = if rolls && new.rollout.strategy == Strategy::Replace {
        format!(
            ", or roll out in place, so that no member needs a host of its own beside the one it replaces: `quorum upgrade {name} --version {} --strategy InPlace`",
            new.version
        )
    } else {
        String::new()
    };
    Some(format!(
        "{name}: not recorded: it needs {} at once beside the {} there, and {why}{ways}; pass --force to record it anyway (the step then waits, Blocked, until a host can take it)",
        crate::status::plural(needed as u32, "new machine"),
        crate::status::plural(machines.len() as u32, "machine"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_core::{Placement, ProviderKind, Version};

    const OLD: Version = Version::new(3, 5, 0);
    const NEW: Version = Version::new(3, 5, 1);

    fn spec(replicas: u32, version: Version, strategy: Strategy) -> ControlPlaneSpec {
        let mut s = ControlPlaneSpec::new(replicas, version);
        s.provider = ProviderKind::Hosts;
        s.rollout.strategy = strategy;
        s
    }

    fn on(host: usize) -> Machine {
        Machine {
            requested: None,
            name: format!("hp-{host}"),
            serial: host as u64,
            address: std::net::Ipv4Addr::new(198, 18, 0, host as u8),
            version: OLD,
            bootstrap: true,
            deleting: false,
            tls: false,
            certificates_not_after_unix_s: None,
            remediation: None,
            in_place: None,
            ca_step: None,
            placement: Some(Placement {
                host: format!("h{host}"),
                client_port: 2379,
                peer_port: 2380,
            }),
        }
    }

    fn hosts(n: usize) -> Vec<HostView> {
        (1..=n)
            .map(|i| HostView {
                name: format!("h{i}"),
                zone: None,
                ready: true,
                removing: false,
                load: 0,
            })
            .collect()
    }

    #[test]
    fn a_change_is_refused_where_no_host_can_take_its_machines() {
        let three = vec![on(1), on(2), on(3)];
        let old = spec(3, OLD, Strategy::Replace);
        // (new spec, hosts, refused with)
        let table: Vec<(ControlPlaneSpec, usize, Option<&str>)> = vec![
            (
                spec(3, NEW, Strategy::Replace),
                3,
                Some("it needs 1 new machine at once"),
            ),
            (spec(3, NEW, Strategy::Replace), 4, None),
            (spec(3, NEW, Strategy::InPlace), 3, None),
            (spec(5, OLD, Strategy::Replace), 4, Some("2 new machines")),
            (spec(5, OLD, Strategy::Replace), 5, None),
            // Scaling up and rolling by replacement: five, then one beside them.
            (spec(5, NEW, Strategy::Replace), 5, Some("3 new machines")),
            (spec(3, OLD, Strategy::Replace), 3, None),
        ];
        for (i, (new, n, want)) in table.into_iter().enumerate() {
            let got = refusal("hp", &old, &new, &three, &hosts(n));
            match (got, want) {
                (None, None) => {}
                (Some(g), Some(w)) => assert!(g.contains(w), "row {i}: {g}"),
                (g, w) => panic!("row {i}: got {g:?}, want {w:?}"),
            }
        }
        let stuck = refusal(
            "hp",
            &old,
            &spec(3, NEW, Strategy::Replace),
            &three,
            &hosts(3),
        );
        assert!(stuck.unwrap().contains("--strategy InPlace"));
    }

    #[test]
    fn a_change_that_asks_for_no_machine_is_never_refused_for_room() {
        // Pausing a control plane whose rollout is stuck for want of a host.
        let three = vec![on(1), on(2), on(3)];
        let old = spec(3, NEW, Strategy::Replace);
        let mut paused = old.clone();
        paused.paused = true;
        assert_eq!(refusal("hp", &old, &paused, &three, &hosts(3)), None);
    }
}
