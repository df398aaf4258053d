//! `quorum get NAME`: the control plane's manifest, in the very types `apply -f` parses,
//! so what it prints applies again unchanged.

use crate::args::{GetArgs, ManifestOutput};
use crate::cmd::emit;
use anyhow::Result;
use quorum_ops::manifest::{Manifest, Metadata, API_VERSION, KIND};
use quorum_ops::{Ctx, Place};

pub fn run(at: &Place, a: GetArgs) -> Result<()> {
    let ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    if cp.deleting {
        eprintln!(
            "note: {} is being deleted; applying this manifest once it is gone creates it anew",
            a.name
        );
    }
    let m = Manifest {
        api_version: API_VERSION.to_string(),
        kind: KIND.to_string(),
        metadata: Metadata {
            name: cp.name,
            resource_version: Some(cp.spec_version.to_string()),
        },
        spec: cp.spec,
        // A confirmation of one apply, never stored: nothing to print.
        allow_downgrade: false,
    };
    let text = match a.output {
        ManifestOutput::Yaml => serde_yaml::to_string(&m)?,
        ManifestOutput::Json => format!("{}\n", serde_json::to_string_pretty(&m)?),
    };
    emit(&text)?;
    Ok(())
}
