//! `quorum get NAME`: the control plane's manifest, in the very types `apply -f` parses,
//! so what it prints applies again unchanged; every field of the spec is shown, the
//! defaults in force included.

use crate::args::{GetArgs, ManifestOutput};
use crate::cmd::emit;
use anyhow::Result;
use quorum_ops::manifest::{self, Metadata, API_VERSION, KIND};
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
    // The manifest `apply` parses, with every field of the spec shown (defaults too).
    let m = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": Metadata {
            name: cp.name.clone(),
            resource_version: Some(cp.spec_version.to_string()),
        },
        "spec": manifest::full_spec(&cp.spec)?,
    });
    let text = match a.output {
        ManifestOutput::Yaml => serde_yaml::to_string(&first_things_first(&m)?)?,
        ManifestOutput::Json => format!("{}\n", serde_json::to_string_pretty(&m)?),
    };
    emit(&text)?;
    Ok(())
}

/// The manifest as YAML in the order people read it: the spec's replicas, version and
/// rollout first, then the rest by name.
fn first_things_first(m: &serde_json::Value) -> Result<serde_yaml::Value> {
    use serde_yaml::{Mapping, Value};
    let mut doc: Mapping = serde_yaml::from_value(serde_yaml::to_value(m)?)?;
    let key = Value::from("spec");
    if let Some(Value::Mapping(mut spec)) = doc.remove(&key) {
        let mut ordered = Mapping::new();
        for k in ["replicas", "version", "rollout"] {
            if let Some(v) = spec.remove(k) {
                ordered.insert(Value::from(k), v);
            }
        }
        ordered.extend(spec);
        doc.insert(key, Value::Mapping(ordered));
    }
    Ok(Value::Mapping(doc))
}
