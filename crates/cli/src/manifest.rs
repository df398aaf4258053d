//! The YAML manifest of `quorum apply -f`, in the Kubernetes style.

use anyhow::{bail, Context, Result};
use quorum_core::{validate_name, ControlPlaneSpec};
use serde::{Deserialize, Serialize};

pub const API_VERSION: &str = "quorum.dev/v1alpha1";
pub const KIND: &str = "ControlPlane";
/// Manifests larger than this are refused before parsing.
const MAX_MANIFEST_BYTES: usize = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: ControlPlaneSpec,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub name: String,
}

/// Parses and checks a manifest; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> Result<Manifest> {
    if text.len() > MAX_MANIFEST_BYTES {
        bail!(
            "{source}: {} bytes is larger than the {MAX_MANIFEST_BYTES} bytes a manifest may have",
            text.len()
        );
    }
    if text.trim().is_empty() {
        bail!("{source}: the manifest is empty; see `quorum apply --help` for an example");
    }
    let m: Manifest = serde_yaml::from_str(text).with_context(|| {
        format!("{source}: not a valid ControlPlane manifest (see `quorum apply --help` for an example)")
    })?;
    if m.api_version != API_VERSION {
        bail!(
            "{source}: apiVersion is '{}', expected '{API_VERSION}'",
            m.api_version
        );
    }
    if m.kind != KIND {
        bail!("{source}: kind is '{}', expected '{KIND}'", m.kind);
    }
    validate_name(&m.metadata.name).with_context(|| format!("{source}: metadata.name"))?;
    Ok(m)
}

pub const EXAMPLE: &str = "apiVersion: quorum.dev/v1alpha1
kind: ControlPlane
metadata:
  name: prod
spec:
  replicas: 3          # 1, 3, 5 or 7 (even counts need --force)
  version: 3.5.1       # an installed etcd version (see `quorum versions`)
  rollout:
    maxSurge: 1        # 1: add the new member first (default); 0: remove first
  paused: false
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_parses() {
        let m = parse(EXAMPLE, "example").unwrap();
        assert_eq!(m.metadata.name, "prod");
        assert_eq!(m.spec.replicas, 3);
        assert_eq!(m.spec.rollout.max_surge, 1);
    }

    #[test]
    fn defaults_apply() {
        let m = parse(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23}\n",
            "t",
        )
        .unwrap();
        assert_eq!(m.spec.rollout.max_surge, 1);
        assert!(!m.spec.paused);
    }

    #[test]
    fn bad_manifests_say_what_is_wrong() {
        let cases = [
            ("", "empty"),
            ("{", "not a valid"),
            ("apiVersion: v1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23}", "apiVersion"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: Pod\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23}", "kind"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: A}\nspec: {replicas: 1, version: 3.4.23}", "metadata.name"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: banana}", "not a valid"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replica: 1, version: 3.4.23}", "not a valid"),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", parse(text, "t").unwrap_err());
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
