//! A chained upgrade as `quorum upgrade` records it: the road planned from what is
//! installed (`quorum_core::road::plan`) or the stops the person named (`--via`), every
//! link checked before anything is recorded, the first link as the spec's version and
//! the rest as the control plane's road (`quorum_core::chain`, which the controller
//! runs).

use crate::Ctx;
use anyhow::{bail, Context, Result};
use quorum_core::chain::Road;
use quorum_core::{check_version_change, ControlPlane, ControlPlaneSpec, Machine, Version};
use quorum_provider::etcd_binary;

/// The most links a road may have: etcd 3 has few minors, and a longer road is a typo.
pub const MAX_LINKS: usize = 8;

/// How a change moves the version: as asked (`Direct`: `apply`, `--abort`), or along a
/// road (`Road`: `quorum upgrade --version`, with the stops the person named).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Route {
    #[default]
    Direct,
    Road {
        via: Vec<Version>,
    },
}

/// The spec to record and the road after it, for `wanted` over `cp`. A change that
/// keeps the version keeps the road under way; a direct move to another version drops
/// it; a road with one link is none.
pub fn plan(
    ctx: &Ctx,
    cp: &ControlPlane,
    machines: &[Machine],
    wanted: ControlPlaneSpec,
    route: &Route,
    opts: RoadOptions,
) -> Result<(ControlPlaneSpec, Option<Road>)> {
    let via = match route {
        Route::Road { via } if wanted.version != cp.spec.version || !via.is_empty() => via,
        _ if wanted.version == cp.spec.version => return Ok((wanted, cp.road.clone())),
        _ => return Ok((wanted, None)),
    };
    let from = lowest(cp, machines);
    let links = links(ctx, cp, from, wanted.version, via, opts.allow_downgrade)?;
    let Some((first, rest)) = links.split_first() else {
        bail!("{}: no link to etcd {}", cp.name, wanted.version);
    };
    let road = (!rest.is_empty()).then(|| Road {
        links: rest.to_vec(),
        link_began_unix_s: opts.now_unix_s,
        snapshots: !opts.no_snapshot,
    });
    let spec = ControlPlaneSpec {
        version: *first,
        ..wanted
    };
    Ok((spec, road))
}

/// What a road's plan needs from the change.
#[derive(Clone, Copy, Debug)]
pub struct RoadOptions {
    pub allow_downgrade: bool,
    pub no_snapshot: bool,
    pub now_unix_s: i64,
}

/// The version the road starts from: the lowest a machine runs (a rollout under way
/// has not moved them all), never above the spec's.
fn lowest(cp: &ControlPlane, machines: &[Machine]) -> Version {
    machines
        .iter()
        .map(|m| m.version)
        .min()
        .unwrap_or(cp.spec.version)
        .min(cp.spec.version)
}

/// The links from `from` to `to`: the stops named, then `to`, each checked against the
/// one before by the version rules (so a named road skips no minor and passes every
/// stepping stone), or the road planned from what is installed. Every link's binary
/// must be installed.
fn links(
    ctx: &Ctx,
    cp: &ControlPlane,
    from: Version,
    to: Version,
    via: &[Version],
    allow_downgrade: bool,
) -> Result<Vec<Version>> {
    let name = &cp.name;
    let links = if via.is_empty() {
        let installed = quorum_provider::installed_versions(ctx.provider.etcd_dir());
        quorum_core::road::plan(from, to, &installed)
            .with_context(|| format!("{name}: no road to etcd {to}"))?
    } else {
        let mut all = via.to_vec();
        all.push(to);
        let mut at = from;
        for link in &all {
            if *link == at {
                bail!("{name}: the road named by --via stops at {link} twice, or where it already is: name each release once, in order");
            }
            check_version_change(at, None, *link, allow_downgrade).with_context(|| {
                format!("{name}: the road named by --via does not go: {at} -> {link}")
            })?;
            at = *link;
        }
        all
    };
    if links.len() > MAX_LINKS {
        bail!(
            "{name}: a road of {} links is longer than {MAX_LINKS}; name fewer stops",
            links.len()
        );
    }
    for link in &links {
        etcd_binary(ctx.provider.etcd_dir(), *link)?;
    }
    Ok(links)
}

/// The road with its link under way beginning now (as it is recorded).
pub fn begun_now(road: Road) -> Road {
    Road {
        link_began_unix_s: quorum_clock::now_unix_s(),
        ..road
    }
}

/// The road in words: every release in order, one rollout each.
pub fn describe(from: Version, first: Version, road: &Road) -> String {
    let mut all = vec![from.to_string(), first.to_string()];
    all.extend(road.links.iter().map(Version::to_string));
    let snapshots = if road.snapshots {
        "a snapshot taken and test-restored before each"
    } else {
        "no snapshot before any (--no-snapshot)"
    };
    format!(
        "{}: {} rollouts, one after the other, {snapshots}; each link is taken once every member serves on the one before and its preflight holds (no member without a machine, no learner, no alarm, the cluster version raised, every stepping stone passed)",
        all.join(" -> "),
        road.links.len() + 1
    )
}

/// What is said when a road is recorded, or would be (`--dry-run`).
pub fn say(
    ctx: &Ctx,
    cp: &ControlPlane,
    machines: &[Machine],
    first: Version,
    road: &Road,
    dry_run: bool,
) {
    let name = &cp.name;
    let verb = if dry_run { "would take" } else { "takes" };
    let target = road.target().unwrap_or(first);
    say!(
        ctx,
        "{name}: a chained upgrade to etcd {target} {verb} the road {}",
        describe(lowest(cp, machines), first, road)
    );
}

/// What a change drops: the road under way, when the version moves another way.
pub fn say_dropped(ctx: &Ctx, cp: &ControlPlane, road: Option<&Road>) {
    if let (Some(old), None) = (cp.road.as_ref(), road) {
        say!(
            ctx,
            "{}: the chained upgrade to etcd {} is dropped: its remaining links ({}) are not taken",
            cp.name,
            old.target().map_or("?".to_string(), |v| v.to_string()),
            old.links
                .iter()
                .map(Version::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}
