//! Creating a control plane and changing its spec: the checks, then the store write.

use crate::road::{RoadOptions, Route};
use crate::{haproxy, status, Ctx};
use anyhow::{bail, Result};
use quorum_clock::now_ms;
use quorum_core::backup::needs_snapshot;
use quorum_core::{
    validate_name, validate_spec, validate_spec_change, ControlPlane, ControlPlaneSpec,
    HaproxySpec, InPlacePhase, Machine, SnapshotReason, Strategy, Version,
};
use quorum_provider::etcd_binary;

/// Said when a rollout is recorded without the snapshot that should come first.
pub const NO_SNAPSHOT_NOTE: &str = "note: no snapshot was taken before this rollout (--no-snapshot): going back means restoring an older snapshot, if any (`quorum snapshots NAME`)";

pub fn version_warning(v: Version) -> Option<String> {
    v.known_bug_warning().map(|w| format!("warning: {w}"))
}

/// Said at creation when a control plane on hosts has fewer hosts registered than its
/// members need (one member per host; a replacement rollout needs one more for the
/// surge). It is created all the same: hosts may be added after it.
pub fn hosts_note(name: &str, spec: &ControlPlaneSpec, registered: usize) -> Option<String> {
    if spec.provider.is_local() {
        return None;
    }
    let members = spec.replicas as usize;
    let rollout = match spec.rollout.strategy {
        Strategy::Replace => members + spec.rollout.max_surge as usize,
        Strategy::InPlace => members,
    };
    if registered >= rollout {
        return None;
    }
    let needs = if registered < members {
        let more = if rollout > members {
            format!(", and {rollout} for a rollout by replacement")
        } else {
            String::new()
        };
        format!(
            "its {} go on {members} distinct hosts{more}",
            status::plural(spec.replicas, "member")
        )
    } else {
        format!("a rollout by replacement places a new member on a spare host first: {rollout} are needed")
    };
    let have = match registered {
        0 => "no host is registered".to_string(),
        1 => "1 host is registered".to_string(),
        n => format!("{n} hosts are registered"),
    };
    Some(format!(
        "note: {name} runs on hosts and {have}; {needs}. Add them with `quorum host install NAME --ssh USER@HOST` (or `quorum host add`); until then the controller says in status what it cannot place"
    ))
}

/// How a change is made: what the user confirmed, and whether to store it at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChangeOptions {
    /// An even replica count, or a change while a member is unreachable.
    pub force: bool,
    /// A move to an older etcd version (never stored: it confirms this change only).
    pub allow_downgrade: bool,
    /// Check everything and print the plan, but store nothing.
    pub dry_run: bool,
    /// Record a change that starts a rollout without the snapshot taken before it.
    pub no_snapshot: bool,
    /// Change only the spec of this version (`metadata.resourceVersion` of a manifest
    /// `apply` was given): a spec changed since is a conflict, never overwritten.
    pub expect_version: Option<u64>,
}

/// Checks and stores a new control plane.
pub fn create(ctx: &mut Ctx, name: &str, spec: ControlPlaneSpec, force: bool) -> Result<()> {
    let opts = ChangeOptions {
        force,
        ..ChangeOptions::default()
    };
    create_with(ctx, name, spec, opts)
}

/// `create` with options: with `dry_run`, everything is checked and nothing stored.
pub fn create_with(
    ctx: &mut Ctx,
    name: &str,
    spec: ControlPlaneSpec,
    opts: ChangeOptions,
) -> Result<()> {
    check_create(ctx, name, &spec, opts.force)?;
    if opts.dry_run {
        say!(
            ctx,
            "{name}: would create {} at etcd {}\ndry run: nothing was changed",
            status::plural(spec.replicas, "replica"),
            spec.version
        );
        return Ok(());
    }
    let cp = ControlPlane {
        spec_version: 0,
        client_addresses: Vec::new(),
        ca_generation: 0,
        ca_rotation: None,
        road: None,
        // Every member quorum starts has `--enable-v2=false` (`quorum-provider`).
        v2_api_never_open: true,
        name: name.to_string(),
        spec: spec.clone(),
        deleting: false,
        rebuild: None,
    };
    // The control plane's own CA, stored with it in one transaction.
    let ca = own_ca(name, &spec)?;
    ctx.store.create_control_plane(&cp, ca.as_ref(), now_ms())?;
    say_created(ctx, name, &spec)
}

/// The checks of a new control plane: a valid name and spec, its etcd binary
/// installed, an S3 bucket that answers, a name no control plane has.
fn check_create(ctx: &Ctx, name: &str, spec: &ControlPlaneSpec, force: bool) -> Result<()> {
    validate_name(name)?;
    validate_spec(spec, force)?;
    etcd_binary(ctx.provider.etcd_dir(), spec.version)?;
    if let Some(note) = crate::s3check::check(name, spec)? {
        say!(ctx, "{note}");
    }
    if ctx.store.control_plane(name)?.is_some() {
        bail!("{name} already exists; change it with `quorum apply`, `upgrade` or `scale`");
    }
    Ok(())
}

/// A new CA for control plane `name`, if its spec uses TLS.
fn own_ca(name: &str, spec: &ControlPlaneSpec) -> Result<Option<quorum_store::StoredCa>> {
    if !spec.tls() {
        return Ok(None);
    }
    let ca = quorum_pki::Ca::generate(
        name,
        quorum_clock::now_unix_s(),
        quorum_pki::DEFAULT_CA_LIFETIME_S,
    )?;
    Ok(Some(quorum_store::StoredCa {
        cert_pem: ca.cert_pem().to_string(),
        key_pem: ca.key_pem().to_string(),
    }))
}

/// What `create` says once the control plane is recorded: what it is, and the notes
/// and warnings its spec calls for.
fn say_created(ctx: &Ctx, name: &str, spec: &ControlPlaneSpec) -> Result<()> {
    say!(
        ctx,
        "{name}: created: {} at etcd {}",
        status::plural(spec.replicas, "replica"),
        spec.version
    );
    if let Some(w) = version_warning(spec.version) {
        say!(ctx, "{w}");
    }
    if !spec.provider.is_local() {
        let registered = quorum_store::hosts::list(&ctx.store)?.len();
        if let Some(note) = hosts_note(name, spec, registered) {
            say!(ctx, "{note}");
        }
    }
    if let Some(h) = spec.haproxy.as_ref().filter(|_| !ctx.quiet) {
        say!(ctx, "{}", haproxy::probe(h, &[]).confirmation(name, h));
    }
    if !spec.tls() {
        say!(ctx, "warning: {name} uses plain HTTP (--insecure-plaintext): anyone who can reach its members can read and change all of its data");
    }
    Ok(())
}

/// Checks a spec change against the live cluster and stores it.
pub async fn change(
    ctx: &mut Ctx,
    name: &str,
    force: bool,
    f: impl Fn(&ControlPlaneSpec) -> ControlPlaneSpec,
) -> Result<()> {
    let opts = ChangeOptions {
        force,
        ..ChangeOptions::default()
    };
    change_with(ctx, name, opts, f).await
}

/// How many times a change is applied again after someone else changed the spec
/// between its read and its write (each time to the spec as it is then).
pub const SPEC_WRITE_ATTEMPTS: u32 = 8;

/// What the first attempt of a change established, so a repeat after a conflict does
/// not take another snapshot for the same version.
#[derive(Default)]
struct Established {
    snapshot_for: Option<quorum_core::Version>,
}

/// How one attempt ended.
enum Attempt {
    Done,
    /// The spec changed under it: nothing was written.
    Conflict {
        version: u64,
    },
}

/// `change` with options: a confirmed downgrade, or a dry run that prints the plan
/// (after every check a real change passes) and stores nothing.
///
/// The change is `f`, applied to the spec as it is read; it is written only if the
/// spec is still the one read (`StateStore::replace_spec`). When someone else changed it
/// in between (another command, `apply`), `f` is applied again to the new spec and every
/// rule checked again, up to `SPEC_WRITE_ATTEMPTS` times: a change never writes back
/// fields it did not mean to change.
pub async fn change_with(
    ctx: &mut Ctx,
    name: &str,
    opts: ChangeOptions,
    f: impl Fn(&ControlPlaneSpec) -> ControlPlaneSpec,
) -> Result<()> {
    change_routed(ctx, name, opts, &Route::Direct, f).await
}

/// `change_with`, a version change taking `route`: along a road (`quorum upgrade`), the
/// first link is recorded as the spec's version and the rest as the road
/// (`crate::road`).
pub async fn change_routed(
    ctx: &mut Ctx,
    name: &str,
    opts: ChangeOptions,
    route: &Route,
    f: impl Fn(&ControlPlaneSpec) -> ControlPlaneSpec,
) -> Result<()> {
    let mut done = Established::default();
    let mut seen = Vec::new();
    for _ in 0..SPEC_WRITE_ATTEMPTS {
        match attempt_change(ctx, name, opts, route, &f, &mut done).await? {
            Attempt::Done => return Ok(()),
            Attempt::Conflict { version } => {
                seen.push(version);
                say!(
                    ctx,
                    "{name}: its spec changed while this change was being checked (version {version}); applying this change again to the spec as it is now"
                );
            }
        }
    }
    bail!(
        "{name}: the spec kept changing while this change was being checked ({} times: versions {}); nothing of this change was recorded: run it again",
        seen.len(),
        seen.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    )
}

/// The checks of a change against the cluster as it is: the strategy changes only
/// between steps, the version rules (those that need no cluster first, then those that
/// need its version), the binary installed, room on the hosts. True if the change
/// cancels a rollout that changed no member (`quorum_core::abort`), which is no
/// downgrade.
async fn check_change(
    ctx: &mut Ctx,
    cp: &ControlPlane,
    new: &ControlPlaneSpec,
    machines: &[Machine],
    force: bool,
    allow_downgrade: bool,
) -> Result<bool> {
    let name = &cp.name;
    let untouched = quorum_core::abort::untouched(&cp.spec, machines);
    if new.rollout.strategy != cp.spec.rollout.strategy {
        if let Some(busy) = quorum_core::abort::mid_step(&cp.spec, machines) {
            bail!(
                "{name}: the rollout strategy changes only between steps, and {busy}; wait for the step to finish (`quorum status {name}`), then change the strategy"
            );
        }
    }
    let cancels = untouched.is_some_and(|v| v == new.version && new.version != cp.spec.version);
    let allow_downgrade = allow_downgrade || cancels;
    let lowest = machines.iter().map(|m| m.version).min();
    // The version rules that need no cluster first: they give the clearest answer. A
    // downgrade is judged once the cluster version is known: "below the cluster
    // version" is the final answer, which no confirmation lifts.
    validate_spec_change(&cp.spec, new, lowest, None, force, true)
        .map_err(|e| with_road(ctx, cp, lowest, new, e))?;
    etcd_binary(ctx.provider.etcd_dir(), new.version)?;
    let (cluster_version, link) = live_cluster_version(ctx, cp, new, force).await?;
    // Only a change of the version: the rollout under way was checked when recorded.
    let enters_minor = lowest.is_some_and(|l| new.version.minor_line() > l.minor_line());
    if enters_minor && new.version != cp.spec.version {
        first_link(ctx, cp, new.version, link, force).await?;
    }
    validate_spec_change(
        &cp.spec,
        new,
        lowest,
        cluster_version,
        force,
        allow_downgrade,
    )
    .map_err(|e| with_way_back(name, e))?;
    if !force && !new.provider.is_local() {
        let hosts: Vec<_> = quorum_store::hosts::list(&ctx.store)?
            .iter()
            .map(quorum_store::hosts::HostRecord::placement_view)
            .collect();
        if let Some(why) = crate::room::refusal(name, &cp.spec, new, machines, &hosts) {
            bail!("{why}");
        }
    }
    Ok(cancels)
}

/// A refusal to go below the cluster version, with the way back etcd names for that
/// pair of minors (`quorum_core::downgrade`).
fn with_way_back(name: &str, e: quorum_core::SpecError) -> anyhow::Error {
    use quorum_core::VersionChangeError as V;
    match &e {
        quorum_core::SpecError::Version(V::BelowClusterVersion { to, cluster }) => {
            let way = quorum_core::downgrade::said(name, *cluster, *to);
            anyhow::anyhow!("{e}. {way}")
        }
        _ => e.into(),
    }
}

/// A refusal of a version move that skips a minor or starts below a stepping stone (a
/// manifest, which names one version), with the road that leads there
/// (`quorum_core::road::plan`) from what is installed and the upgrade that takes it, or
/// why there is none.
fn with_road(
    ctx: &Ctx,
    cp: &ControlPlane,
    lowest: Option<quorum_core::Version>,
    new: &ControlPlaneSpec,
    e: quorum_core::SpecError,
) -> anyhow::Error {
    use quorum_core::VersionChangeError as V;
    let quorum_core::SpecError::Version(V::SkipsMinor { .. } | V::BelowSteppingStone { .. }) = &e
    else {
        return e.into();
    };
    let from = lowest.unwrap_or(cp.spec.version).min(cp.spec.version);
    let installed = quorum_provider::installed_versions(ctx.provider.etcd_dir());
    let road = match quorum_core::road::plan(from, new.version, &installed) {
        Ok(links) => {
            let mut all = vec![from];
            all.extend(links.iter().copied());
            let road: Vec<String> = all.iter().map(|v| v.to_string()).collect();
            format!(
                "The road is {}, one rollout each: `quorum upgrade {} --version {}` takes it (`--dry-run` shows it first)",
                road.join(" -> "),
                cp.name,
                new.version
            )
        }
        Err(why) => format!("No road from what is installed: {why}"),
    };
    anyhow::anyhow!("{e}. {road}")
}

/// Whether `new` changes the spec (saying so when it does not), checked on its own:
/// a valid spec, and an S3 bucket that answers when it moves.
fn changes(ctx: &Ctx, cp: &ControlPlane, new: &ControlPlaneSpec, force: bool) -> Result<bool> {
    let name = &cp.name;
    if *new == cp.spec {
        say!(
            ctx,
            "{name}: unchanged (already {} at etcd {})",
            status::plural(new.replicas, "replica"),
            new.version
        );
        return Ok(false);
    }
    validate_spec(new, force)?;
    if new.backup.s3 != cp.spec.backup.s3 {
        if let Some(note) = crate::s3check::check(name, new)? {
            say!(ctx, "{note}");
        }
    }
    Ok(true)
}

/// What `--dry-run` says of a change: its plan, a warning for clients, the snapshot it
/// would take first.
fn say_dry_run(
    ctx: &Ctx,
    cp: &ControlPlane,
    new: &ControlPlaneSpec,
    machines: &[Machine],
    snapshot_first: bool,
) {
    let name = &cp.name;
    for line in plan(name, &cp.spec, new, machines) {
        say!(ctx, "{line}");
    }
    if let Some(w) = reach_warning(name, cp, new, machines) {
        say!(ctx, "{w}");
    }
    if snapshot_first {
        say!(
            ctx,
            "{name}: would take a snapshot from the leader first (--no-snapshot: without one)"
        );
    }
    say!(ctx, "dry run: nothing was changed");
}

/// One attempt of `change_with`: read, apply `f`, check, write if the spec is still
/// the one read.
async fn attempt_change(
    ctx: &mut Ctx,
    name: &str,
    opts: ChangeOptions,
    route: &Route,
    f: &impl Fn(&ControlPlaneSpec) -> ControlPlaneSpec,
    done: &mut Established,
) -> Result<Attempt> {
    let ChangeOptions {
        force,
        allow_downgrade,
        dry_run,
        no_snapshot,
        expect_version,
    } = opts;
    let cp = ctx.store.get_control_plane(name)?;
    if let Some(v) = expect_version.filter(|v| *v != cp.spec_version) {
        bail!("{}", conflict(name, v, &cp, &f(&cp.spec)));
    }
    if cp.deleting {
        bail!("{name} is being deleted; create it again once `quorum list` no longer shows it");
    }
    let machines = ctx.store.machines(name)?;
    let roads = RoadOptions {
        allow_downgrade,
        no_snapshot,
        now_unix_s: quorum_clock::now_unix_s(),
    };
    let (new, road) = crate::road::plan(ctx, &cp, &machines, f(&cp.spec), route, roads)?;
    if !changes(ctx, &cp, &new, force)? && road == cp.road {
        return Ok(Attempt::Done);
    }
    let cancels = check_change(ctx, &cp, &new, &machines, force, allow_downgrade).await?;
    // A cancel changes no member: nothing to go back from.
    let snapshot_first = needs_snapshot(&cp.spec, &new, &machines) && !no_snapshot && !cancels;
    if dry_run {
        if let Some(road) = &road {
            crate::road::say(ctx, &cp, &machines, new.version, road, true);
        }
        say_dry_run(ctx, &cp, &new, &machines, snapshot_first);
        return Ok(Attempt::Done);
    }
    // The rollout starts when the spec changes: the snapshot comes before, or nothing
    // is recorded.
    if snapshot_first && done.snapshot_for != Some(new.version) {
        crate::snapshot::take(ctx, &cp, SnapshotReason::BeforeRollout, Some(new.version), false)
            .await
            .map_err(|e| {
                e.context(format!(
                    "{name}: the change was not recorded: no rollout starts without a snapshot first (pass --no-snapshot to record it without one)"
                ))
            })?;
        done.snapshot_for = Some(new.version);
    }
    // The link begins as recorded: after the snapshot just taken (not the next link's).
    let road = road.map(crate::road::begun_now);
    if !ctx
        .store
        .replace_spec(name, cp.spec_version, &new, road.as_ref())?
    {
        let now = ctx.store.get_control_plane(name)?;
        return Ok(Attempt::Conflict {
            version: now.spec_version,
        });
    }
    say_recorded(ctx, name, &cp.spec, &new, cancels);
    let no_snapshot_taken = needs_snapshot(&cp.spec, &new, &machines) && no_snapshot && !cancels;
    say_after_record(ctx, &cp, &machines, &new, road.as_ref(), no_snapshot_taken).await?;
    Ok(Attempt::Done)
}

/// What is said once a change is recorded, after what it is: its road, a warning for
/// clients, a rollout without a snapshot, the load balancer to reload.
async fn say_after_record(
    ctx: &Ctx,
    cp: &ControlPlane,
    machines: &[Machine],
    new: &ControlPlaneSpec,
    road: Option<&quorum_core::chain::Road>,
    no_snapshot_taken: bool,
) -> Result<()> {
    match road {
        Some(road) => crate::road::say(ctx, cp, machines, new.version, road, false),
        None => crate::road::say_dropped(ctx, cp, None),
    }
    if let Some(w) = reach_warning(&cp.name, cp, new, machines) {
        say!(ctx, "{w}");
    }
    if no_snapshot_taken {
        say!(ctx, "{NO_SNAPSHOT_NOTE}");
    }
    say_haproxy_change(ctx, cp, new).await
}

/// A change of the load balancer's settings, in words (what to reload where).
async fn say_haproxy_change(ctx: &Ctx, cp: &ControlPlane, new: &ControlPlaneSpec) -> Result<()> {
    if new.haproxy != cp.spec.haproxy && !ctx.quiet {
        let what = haproxy_change(&cp.name, cp.spec.haproxy.clone(), new.haproxy.clone()).await?;
        say!(ctx, "{what}");
    }
    Ok(())
}

/// The refusal of a manifest read at spec version `read`: what changed since, and
/// what applying it anyway (`--force-conflicts`) would set back.
fn conflict(name: &str, read: u64, cp: &ControlPlane, theirs: &ControlPlaneSpec) -> String {
    let differs = spec_differences(&cp.spec, theirs);
    let what = if differs.is_empty() {
        "nothing this manifest sets differs".to_string()
    } else {
        format!("applying it would set {}", differs.join(", "))
    };
    format!(
        "{name}: conflict: the spec changed since this manifest was read (resourceVersion {read}, now {}); {what}; read it again with `quorum get {name} -o yaml`, or apply with --force-conflicts to replace the spec with this one",
        cp.spec_version
    )
}

/// The fields (manifest paths) where `theirs` differs from `now`, as "path: now -> theirs".
pub fn spec_differences(now: &ControlPlaneSpec, theirs: &ControlPlaneSpec) -> Vec<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::Object;
        match (a, b) {
            (Object(x), Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let null = serde_json::Value::Null;
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(
                        &p,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(format!("spec.{path}: {a} -> {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    match (serde_json::to_value(now), serde_json::to_value(theirs)) {
        (Ok(a), Ok(b)) => walk("", &a, &b, &mut out),
        _ => out.push("spec".to_string()),
    }
    out
}

/// `quorum upgrade NAME --retry`: forgets the rollbacks that stopped a rollout, so the
/// controller tries the in-place step again (the rule that stops a rollout reads them).
/// Nothing to retry is an error that says so.
pub fn retry_rollout(ctx: &mut Ctx, name: &str) -> Result<()> {
    let machines = ctx.store.machines(name)?;
    let stopped: Vec<&Machine> = machines
        .iter()
        .filter(|m| {
            m.in_place
                .as_ref()
                .is_some_and(|ip| ip.phase == InPlacePhase::RolledBack)
        })
        .collect();
    if stopped.is_empty() {
        bail!("{name}: no rollout is stopped (no member was rolled back); nothing to retry");
    }
    for m in stopped {
        ctx.store
            .update_machine(name, &m.name, "retry an in-place step", &|r| {
                let rolled_back = r
                    .in_place
                    .as_ref()
                    .is_some_and(|ip| ip.phase == InPlacePhase::RolledBack);
                if rolled_back {
                    r.in_place = None;
                }
                rolled_back
            })?;
        let ip = m.in_place.as_ref().map(|ip| (ip.from, ip.to));
        if let Some((from, to)) = ip {
            say!(
                ctx,
                "{name}: retrying {}: etcd {from} -> {to} in place (it was rolled back)",
                m.name
            );
        }
    }
    Ok(())
}

/// Checks the live cluster before a change is recorded: every member answers (unless
/// `force`), and a version change can read the cluster version. Returns that version.
async fn live_cluster_version(
    ctx: &Ctx,
    cp: &ControlPlane,
    new: &ControlPlaneSpec,
    force: bool,
) -> Result<(Option<Version>, quorum_core::chain::LinkFacts)> {
    let name = &cp.name;
    let s = ctx.live(cp).await?;
    // Members that do not answer. Without a leader every machine is suspect; with one,
    // a machine without a member (one still joining) is not.
    let leaderless = s.leader.is_none();
    let unhealthy: Vec<&str> = s
        .machines
        .iter()
        .filter(|m| {
            (leaderless || m.role != quorum_core::Role::NoMember) && !m.healthy && !m.deleting
        })
        .map(|m| m.name.as_str())
        .collect();
    // Changing only how quorum repairs and maintains (or pausing) is what a person does
    // to unblock a repair: never refused for the state the cluster is in.
    let repair_only = ControlPlaneSpec {
        remediation: cp.spec.remediation,
        maintenance: cp.spec.maintenance,
        paused: cp.spec.paused,
        ..new.clone()
    } == cp.spec;
    if !force && !repair_only && !s.machines.is_empty() && !unhealthy.is_empty() {
        if leaderless {
            bail!(
                "{name}: {} not healthy or unreachable, and no member answers as leader (see `quorum status {name}`); bring a member back first, or pass --force to record the change anyway (quorum still refuses every unsafe step)",
                unhealthy.join(", ")
            );
        }
        // A quorum serves: quorum replaces the failed members first (spec.remediation),
        // then makes the change.
        say!(
            ctx,
            "note: {} not healthy; quorum replaces {} first if {} not recover within remediation.unhealthyAfter ({}), then makes this change",
            unhealthy.join(", "),
            if unhealthy.len() == 1 { "it" } else { "them" },
            if unhealthy.len() == 1 { "it does" } else { "they do" },
            new.remediation.unhealthy_after
        );
    }
    let cluster_version = s
        .cluster_version
        .as_deref()
        .and_then(|v| Version::parse_cluster_version(v).ok());
    if new.version != cp.spec.version
        && cluster_version.is_none()
        && !force
        && !s.machines.is_empty()
    {
        bail!("{name}: cannot read the cluster version (no leader answered), so the version change cannot be checked; bring the control plane back first, or pass --force");
    }
    Ok((cluster_version, s.link))
}

/// How long a change into another minor waits for etcd to raise its cluster version
/// (its version monitor looks every few seconds; a cluster just created says 3.0).
pub const CLUSTER_VERSION_WAIT_MS: u64 = 15_000;
/// How often it looks again meanwhile.
const CLUSTER_VERSION_POLL_MS: u64 = 1_000;

/// The preflight of a change into another minor (`quorum_core::chain::preflight`, the
/// rule the controller holds every later link of a road to): a cluster version etcd
/// has not raised yet is waited for, up to `CLUSTER_VERSION_WAIT_MS`; what else passes
/// by itself (a learner, an alarm, a member no machine answers for) refuses the change
/// until it has, unless `force` records it anyway (the controller's rules still wait);
/// what needs a person refuses it whatever the flags.
async fn first_link(
    ctx: &Ctx,
    cp: &ControlPlane,
    to: Version,
    mut link: quorum_core::chain::LinkFacts,
    force: bool,
) -> Result<()> {
    use quorum_core::chain::{preflight, Hold, LinkFacts};
    let name = &cp.name;
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(CLUSTER_VERSION_WAIT_MS);
    loop {
        match preflight(&LinkFacts { to, ..link }) {
            Ok(()) => return Ok(()),
            Err(Hold::Wait(_) | Hold::Behind(_)) if force => return Ok(()),
            Err(Hold::Behind(_)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(CLUSTER_VERSION_POLL_MS)).await;
                link = ctx.live(cp).await?.link;
            }
            Err(Hold::Wait(why) | Hold::Behind(why)) => bail!(
                "{name}: not recorded: before etcd {to}, {why}; run it again once that has passed (`quorum status {name}`), or pass --force to record it now"
            ),
            Err(Hold::Refuse(why)) => bail!("{name}: refused: before etcd {to}: {why}"),
        }
    }
}

/// What a change would do, one line each (for `--dry-run`).
pub fn plan(
    name: &str,
    old: &ControlPlaneSpec,
    new: &ControlPlaneSpec,
    machines: &[quorum_core::Machine],
) -> Vec<String> {
    let mut out = Vec::new();
    let cancels = quorum_core::abort::untouched(old, machines)
        .is_some_and(|v| v == new.version && v != old.version);
    if cancels {
        out.push(format!(
            "{name}: would cancel the rollout to etcd {}: every member still runs etcd {}, so nothing is replaced or restarted",
            old.version, new.version
        ));
    } else if new.version != old.version {
        let what = if new.version > old.version {
            "an upgrade"
        } else {
            "a DOWNGRADE, confirmed"
        };
        let replaced = machines.iter().filter(|m| m.version != new.version).count();
        let how = match new.rollout.strategy {
            Strategy::Replace => "replaced one at a time",
            Strategy::InPlace => "restarted in place one at a time, followers first",
        };
        out.push(format!(
            "{name}: would roll etcd {} -> {} ({what}): {} {how}",
            old.version,
            new.version,
            status::plural(replaced as u32, "machine")
        ));
        if let Some(w) = version_warning(new.version) {
            out.push(w);
        }
    }
    if new.replicas != old.replicas {
        let (verb, n) = if new.replicas > old.replicas {
            ("added", new.replicas - old.replicas)
        } else {
            ("removed", old.replicas - new.replicas)
        };
        out.push(format!(
            "{name}: would scale {} -> {} replicas ({} {verb}, one at a time)",
            old.replicas,
            new.replicas,
            status::plural(n, "machine")
        ));
    }
    if new.paused != old.paused {
        out.push(format!(
            "{name}: would {}",
            if new.paused { "pause it" } else { "resume it" }
        ));
    }
    if new.rollout != old.rollout || new.certificates != old.certificates {
        out.push(format!(
            "{name}: would record new rollout or certificate settings"
        ));
    }
    if new.haproxy != old.haproxy {
        out.push(format!("{name}: would change its HAProxy settings"));
    }
    out
}

/// The line that confirms a change of `spec.haproxy`: the socket, and whether it
/// answers (a look at it, bounded, off the async threads).
async fn haproxy_change(
    name: &str,
    old: Option<HaproxySpec>,
    new: Option<HaproxySpec>,
) -> Result<String> {
    let Some(h) = new else {
        let old = old.map(|o| format!(" backend {} behind {}", o.backend, o.runtime_api));
        return Ok(format!(
            "{name}: HAProxy detached: quorum no longer changes{} (its servers stay as they are)",
            old.unwrap_or_default()
        ));
    };
    let name = name.to_string();
    Ok(
        tokio::task::spawn_blocking(move || haproxy::probe(&h, &[]).confirmation(&name, &h))
            .await?,
    )
}

/// A warning when a rollout by replacement would leave a client configured with
/// today's member addresses (and nothing else) without a live one before it could
/// learn another (`quorum_core::reach::strands`), with what to do instead.
fn reach_warning(
    name: &str,
    cp: &ControlPlane,
    new: &ControlPlaneSpec,
    machines: &[quorum_core::Machine],
) -> Option<String> {
    if new.version == cp.spec.version || new.rollout.strategy != Strategy::Replace {
        return None;
    }
    let today: Vec<std::net::SocketAddrV4> = machines
        .iter()
        .filter(|m| !m.deleting)
        .map(quorum_core::Machine::client_address)
        .collect();
    let local = cp.spec.provider.is_local();
    let step = quorum_core::reach::strands(&today, &today, &cp.client_addresses, local)?;
    let urls: Vec<String> = machines
        .iter()
        .filter(|m| !m.deleting)
        .map(quorum_core::Machine::client_url)
        .collect();
    let knows = urls.join(",");
    Some(if local {
        let all = quorum_core::reach::client_urls(cp, machines).join(",");
        format!(
            "warning: a client that knows only {knows} (the members' addresses today) is left without a live address at replacement {step}; give clients all of {all} (`quorum credentials {name}` prints them), which always name a member"
        )
    } else {
        format!(
            "warning: members on hosts move to the addresses of other hosts: a client that knows only {knows} is left without a live address at replacement {step} unless it re-reads the member list first; have clients follow `quorum status {name} -o json` (endpoints), or roll out in place (--strategy InPlace), which keeps every address"
        )
    })
}

/// Says what a recorded change will do.
fn say_recorded(
    ctx: &Ctx,
    name: &str,
    old: &ControlPlaneSpec,
    new: &ControlPlaneSpec,
    cancelled: bool,
) {
    if new.paused {
        say!(
            ctx,
            "note: {name} is paused: quorum takes no step until `quorum pause {name} --resume`"
        );
    }
    if cancelled {
        say!(
            ctx,
            "{name}: rollout to etcd {} cancelled: every member still runs etcd {}, so nothing is replaced or restarted",
            old.version,
            new.version
        );
    } else if new.version != old.version {
        let what = if new.version > old.version {
            "upgrade"
        } else {
            "downgrade"
        };
        let how = match new.rollout.strategy {
            Strategy::Replace => "member by member, each replaced",
            Strategy::InPlace => "member by member, each restarted in place",
        };
        say!(
            ctx,
            "{name}: {what} recorded: etcd {} -> {} ({how})",
            old.version,
            new.version
        );
        if let Some(w) = version_warning(new.version) {
            say!(ctx, "{w}");
        }
    }
    if new.replicas != old.replicas {
        say!(
            ctx,
            "{name}: scale recorded: {} -> {} replicas",
            old.replicas,
            new.replicas
        );
    }
    if new.rollout.strategy != old.rollout.strategy {
        say!(
            ctx,
            "{name}: rollout strategy recorded: {} -> {}",
            old.rollout.strategy,
            new.rollout.strategy
        );
    } else if new.rollout != old.rollout || new.paused != old.paused {
        say!(ctx, "{name}: rollout settings recorded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum_core::ProviderKind;

    fn on_hosts(replicas: u32, strategy: Strategy) -> ControlPlaneSpec {
        let mut spec: ControlPlaneSpec =
            serde_json::from_str(r#"{"replicas": 3, "version": "3.5.1"}"#).unwrap();
        spec.replicas = replicas;
        spec.provider = ProviderKind::Hosts;
        spec.rollout.strategy = strategy;
        spec
    }

    #[test]
    fn too_few_hosts_for_a_control_plane_on_hosts_are_noted() {
        use Strategy::*;
        let cases: &[(u32, Strategy, usize, Option<&str>)] = &[
            (3, Replace, 0, Some("no host is registered; its 3 members go on 3 distinct hosts, and 4 for a rollout by replacement.")),
            (3, Replace, 1, Some("1 host is registered; its 3 members")),
            (3, Replace, 3, Some("3 hosts are registered; a rollout by replacement places a new member on a spare host first: 4 are needed")),
            (3, Replace, 4, None),
            (3, InPlace, 2, Some("2 hosts are registered; its 3 members go on 3 distinct hosts.")),
            (3, InPlace, 3, None),
            (5, Replace, 9, None),
        ];
        for (replicas, strategy, registered, want) in cases {
            let got = hosts_note("prod", &on_hosts(*replicas, *strategy), *registered);
            match want {
                None => assert_eq!(got, None, "{replicas} {strategy:?} {registered}"),
                Some(w) => {
                    let got = got.unwrap_or_default();
                    assert!(
                        got.contains(w),
                        "{replicas} {strategy:?} {registered}: {got}"
                    );
                    assert!(got.contains("quorum host install"), "{got}");
                }
            }
        }
        let mut local = on_hosts(3, Replace);
        local.provider = ProviderKind::Local;
        assert_eq!(hosts_note("prod", &local, 0), None);
    }
}
