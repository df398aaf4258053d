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
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        if e.to_string().contains("more than one document") {
            anyhow::anyhow!(
                "{source}: holds several YAML documents; apply takes one ControlPlane per file"
            )
        } else {
            anyhow::anyhow!("{source}: not valid YAML: {e}")
        }
    })?;
    let Some(map) = value.as_mapping() else {
        bail!("{source}: a manifest is a YAML mapping with apiVersion, kind, metadata and spec; see `quorum apply --help` for an example");
    };
    // Say what kind of document this is before complaining about its fields.
    let field = |k: &str| map.get(k).and_then(|v| v.as_str()).map(str::to_string);
    match field("apiVersion") {
        Some(v) if v == API_VERSION => {}
        Some(v) => bail!("{source}: apiVersion is '{v}', expected '{API_VERSION}'"),
        None => bail!("{source}: apiVersion is missing, expected '{API_VERSION}'"),
    }
    match field("kind") {
        Some(k) if k == KIND => {}
        Some(k) => bail!("{source}: kind is '{k}', expected '{KIND}'"),
        None => bail!("{source}: kind is missing, expected '{KIND}'"),
    }
    let m: Manifest = serde_yaml::from_str(text).map_err(|e| {
        anyhow::anyhow!("{source}: not a valid ControlPlane manifest: {} (see `quorum apply --help` for an example)", humane(&e.to_string()))
    })?;
    validate_name(&m.metadata.name).with_context(|| format!("{source}: metadata.name"))?;
    Ok(m)
}

/// serde's words for types, in a user's words.
fn humane(msg: &str) -> String {
    msg.replace("expected u32", "expected a whole number")
        .replace(
            "expected struct ControlPlaneSpec",
            "expected a mapping (replicas, version, ...)",
        )
        .replace(
            "expected struct RolloutStrategy",
            "expected a mapping (maxSurge)",
        )
        .replace("expected struct Metadata", "expected a mapping (name)")
        .replace("expected struct Manifest", "expected a mapping")
        .replace("expected a boolean", "expected true or false")
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
  # haproxy:           # optional: an HAProxy quorum keeps in step (see `quorum haproxy-config`)
  #   runtimeApi: /run/haproxy/admin.sock
  #   backend: etcd
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
            ("{", "not valid YAML"),
            ("hello", "a manifest is a YAML mapping"),
            ("apiVersion: v1\nkind: Pod\nmetadata: {name: a}", "apiVersion is 'v1'"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: three, version: 3.4.23}", "expected a whole number"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23}\n---\napiVersion: x", "several YAML documents"),
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
