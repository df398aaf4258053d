//! `quorum rotate-ca`: begin a rotation of a control plane's CA. The controller does
//! the rest, phase by phase (`quorum_core::carotation`).

use crate::ctx::Ctx;
use anyhow::{bail, Result};
use quorum_core::{CaPhase, CaRotation, ControlPlane};

/// What `begin` did.
#[derive(Debug)]
pub enum Begun {
    /// A new CA was made and phase 1 recorded.
    Now(CaRotation),
    /// A rotation was already under way (nothing changed).
    Already(CaRotation),
}

/// Makes the new CA and records the rotation's first phase, in one store write. A
/// rotation already under way is left as it is (and returned).
pub fn begin(ctx: &mut Ctx, name: &str) -> Result<Begun> {
    let cp = ctx.store.get_control_plane(name)?;
    if let Some(r) = &cp.ca_rotation {
        return Ok(Begun::Already(r.clone()));
    }
    refuse_unless_rotatable(ctx, &cp)?;
    let now = quorum_clock::now_unix_s();
    let to = cp.ca_generation + 1;
    let new =
        quorum_pki::Ca::generate_generation(name, to, now, quorum_pki::DEFAULT_CA_LIFETIME_S)?;
    let rotation = CaRotation {
        from: cp.ca_generation,
        to,
        phase: CaPhase::Trust,
        since_unix_s: now,
        started_unix_s: now,
    };
    let next = quorum_store::StoredCa {
        cert_pem: new.cert_pem().to_string(),
        key_pem: new.key_pem().to_string(),
    };
    if !ctx.store.begin_ca_rotation(name, &next, &rotation)? {
        // Another process began one between our read and our write.
        let now = ctx.store.get_control_plane(name)?;
        if let Some(r) = now.ca_rotation {
            return Ok(Begun::Already(r));
        }
        bail!("{name}: the CA rotation could not be recorded; try again");
    }
    Ok(Begun::Now(rotation))
}

/// What `rotate-ca` says before it asks: the CA in force (its generation, when it was
/// issued, until when it is valid), what a rotation does to the members and to clients.
/// `None` when a rotation is under way already (running it again changes nothing).
/// Refuses what `begin` refuses.
pub fn plan(ctx: &Ctx, name: &str) -> Result<Option<String>> {
    let cp = ctx.store.get_control_plane(name)?;
    if cp.ca_rotation.is_some() {
        return Ok(None);
    }
    refuse_unless_rotatable(ctx, &cp)?;
    let ca = ctx.store.certificate_authority(&cp)?;
    let issued = ca
        .as_ref()
        .and_then(|c| quorum_pki::agents::validity(&c.cert_pem).ok())
        .map(|(from, until, _)| {
            format!(
                ", issued {}, valid until {}",
                quorum_pki::format_unix_s(from),
                quorum_pki::format_unix_s(until)
            )
        })
        .unwrap_or_default();
    let members = ctx.store.machines(name)?.len();
    Ok(Some(format!(
        "{name}: rotating its CA (generation {g}{issued}) makes a new one (generation {n}) and moves to it in 3 phases; in each, its {members} {restarted} with new files ({way}), one at a time;\n\
         client certificates from the CA in force stop working in phase 3: get new ones in phase 2 (`quorum credentials {name} --out DIR`)",
        g = cp.ca_generation,
        n = cp.ca_generation + 1,
        members = crate::status::plural(members as u32, "member"),
        restarted = if members == 1 { "is restarted" } else { "are restarted" },
        way = match cp.spec.rollout.strategy {
            quorum_core::Strategy::InPlace => "in place",
            quorum_core::Strategy::Replace => "each replaced by a new machine",
        },
    )))
}

fn refuse_unless_rotatable(ctx: &Ctx, cp: &ControlPlane) -> Result<()> {
    let name = &cp.name;
    if cp.deleting {
        bail!("{name} is being deleted");
    }
    if ctx.store.certificate_authority(cp)?.is_none() {
        bail!("{name} was created with --insecure-plaintext: it has no CA to rotate");
    }
    if cp.rebuild.is_some() {
        bail!("{name} is being rebuilt (a restore or recovery); rotate its CA once `quorum status {name}` shows it converged");
    }
    if cp.spec.haproxy.is_some() {
        bail!(
            "{name} has a load balancer (spec.haproxy): its frontend certificate and CA file are written by `quorum haproxy-config`, which a rotation does not redo yet, so its clients would be cut off after the last phase; remove spec.haproxy to rotate, then run `quorum haproxy-config {name}` again"
        );
    }
    Ok(())
}

/// How a rotation reads in `status` and elsewhere: "phase 2 of 3 (certificates from
/// the new CA), generation 0 -> 1, since 12:00:03 UTC".
pub fn describe(r: &CaRotation) -> String {
    format!(
        "phase {} of 3 ({}), CA generation {} -> {}, phase since {}",
        r.phase.number(),
        r.phase,
        r.from,
        r.to,
        quorum_pki::format_unix_s(r.since_unix_s)
    )
}
