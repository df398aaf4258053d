//! The YAML manifest of `quorum apply -f`, in the Kubernetes style.

use anyhow::{bail, Context, Result};
use quorum_core::{validate_name, ControlPlaneSpec, Version, VersionRequest};
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
    /// `spec.rollout.allowDowngrade`: confirms a move to an older version for this apply
    /// only; never stored in the spec.
    #[serde(skip)]
    pub allow_downgrade: bool,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    pub name: String,
    /// The spec's version when `quorum get` printed it (`ControlPlane::spec_version`):
    /// `apply` refuses the manifest if the spec changed since, unless
    /// `--force-conflicts`. A manifest written by hand has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

impl Metadata {
    /// The version named, if any; a text quorum never writes is an error naming it.
    pub fn version(&self, source: &str) -> Result<Option<u64>> {
        match &self.resource_version {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                anyhow::anyhow!(
                    "{source}: metadata.resourceVersion: {v:?} is not a version quorum wrote (a whole number, as `quorum get -o yaml` prints it)"
                )
            }),
        }
    }
}

/// The spec as `quorum get` prints it: every field, defaults included (the stored form
/// leaves defaults out), so a reader sees what is in force. `apply` reads it back as it
/// is.
pub fn full_spec(spec: &ControlPlaneSpec) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(spec)?;
    let r = &spec.rollout;
    let defaults = [
        ("paused", serde_json::to_value(spec.paused)?),
        (
            "deletionProtection",
            serde_json::to_value(spec.deletion_protection)?,
        ),
        (
            "insecurePlaintext",
            serde_json::to_value(spec.insecure_plaintext)?,
        ),
        ("remediation", serde_json::to_value(spec.remediation)?),
        ("maintenance", serde_json::to_value(spec.maintenance)?),
        ("backup", serde_json::to_value(&spec.backup)?),
        ("recovery", serde_json::to_value(spec.recovery)?),
        ("provider", serde_json::to_value(spec.provider)?),
    ];
    let rollout_defaults = [
        ("strategy", serde_json::to_value(r.strategy)?),
        ("inPlace", serde_json::to_value(r.in_place)?),
    ];
    if let Some(map) = v.as_object_mut() {
        for (key, value) in defaults {
            map.entry(key).or_insert(value);
        }
        if let Some(rollout) = map.get_mut("rollout").and_then(|x| x.as_object_mut()) {
            for (key, value) in rollout_defaults {
                rollout.entry(key).or_insert(value);
            }
        }
    }
    Ok(v)
}

/// Parses and checks a manifest; `source` names it in errors. `spec.version` is
/// resolved against the `installed` versions exactly as `--version` is (`3.5` is the
/// newest installed 3.5.x).
pub fn parse(text: &str, source: &str, installed: &[Version]) -> Result<Manifest> {
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
    let mut value = value;
    let allow_downgrade = take_allow_downgrade(&mut value, source)?;
    resolve_version(&mut value, source, installed)?;
    // The path to what is wrong (`spec.remediation.unhealthyAfter`) comes first.
    let mut m: Manifest = serde_path_to_error::deserialize(value).map_err(|e| {
        let at = match e.path().to_string() {
            p if p == "." => "the manifest".to_string(),
            p => p,
        };
        anyhow::anyhow!(
            "{source}: {at}: {} (see `quorum apply --help` for an example)",
            humane(&e.inner().to_string())
        )
    })?;
    m.allow_downgrade = allow_downgrade;
    validate_name(&m.metadata.name).with_context(|| format!("{source}: metadata.name"))?;
    Ok(m)
}

/// Takes `spec.rollout.allowDowngrade` out of the document (it confirms one apply and
/// is no part of the stored spec).
fn take_allow_downgrade(value: &mut serde_yaml::Value, source: &str) -> Result<bool> {
    let taken = value
        .get_mut("spec")
        .and_then(|s| s.get_mut("rollout"))
        .and_then(|r| r.as_mapping_mut())
        .and_then(|r| r.remove("allowDowngrade"));
    match taken {
        None => Ok(false),
        Some(serde_yaml::Value::Bool(b)) => Ok(b),
        Some(other) => bail!(
            "{source}: spec.rollout.allowDowngrade must be true or false, not {}",
            scalar_text(&other)
        ),
    }
}

/// Replaces `spec.version` by the exact version it means among the installed ones
/// (quorum_core::VersionRequest, the one resolution every command uses). A version YAML
/// reads as a number (`version: 3.5`) is refused: `3.10` would read as 3.1.
fn resolve_version(
    value: &mut serde_yaml::Value,
    source: &str,
    installed: &[Version],
) -> Result<()> {
    let Some(v) = value.get_mut("spec").and_then(|s| s.get_mut("version")) else {
        return Ok(());
    };
    let text = match &*v {
        serde_yaml::Value::String(t) => t.clone(),
        serde_yaml::Value::Number(n) => bail!(
            "{source}: spec.version {n} reads as a number in YAML (3.10 would read as 3.1); quote it: version: \"{n}\""
        ),
        _ => return Ok(()), // the typed parse below says what is wrong with it
    };
    let exact = text
        .parse::<VersionRequest>()
        .and_then(|r| r.resolve(installed))
        .with_context(|| format!("{source}: spec.version"))?;
    *v = serde_yaml::Value::String(exact.to_string());
    Ok(())
}

/// A YAML value as a short text for an error.
fn scalar_text(v: &serde_yaml::Value) -> String {
    serde_yaml::to_string(v)
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|_| "that".into())
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
            "expected a mapping (maxSurge, before)",
        )
        .replace(
            "expected struct RolloutBefore",
            "expected a mapping (certificatesExpiry)",
        )
        .replace(
            "expected struct CertificatesSpec",
            "expected a mapping (lifetime)",
        )
        .replace("expected struct Metadata", "expected a mapping (name)")
        .replace(
            "expected struct BackupSpec",
            "expected a mapping (schedule, retention)",
        )
        .replace(
            "expected struct RetentionSpec",
            "expected a mapping (last, days)",
        )
        .replace("expected struct Manifest", "expected a mapping")
        .replace("expected a boolean", "expected true or false")
}

pub const EXAMPLE: &str = "apiVersion: quorum.dev/v1alpha1
kind: ControlPlane
metadata:
  name: prod
spec:
  replicas: 3          # 1, 3, 5 or 7 (even counts need --force)
  version: \"3.5.30\"    # an installed etcd version (see `quorum versions`); \"3.5\" means
                       # the newest installed 3.5.x (quote it: YAML reads 3.5 as a number)
  rollout:
    maxSurge: 1        # 1: add the new member first (default); 0: remove first
    # allowDowngrade: true  # confirms a move to an older version, for this apply only
    before:
      certificatesExpiry: 73d  # replace a machine whose certificates expire within this
                               # (default: a fifth of certificates.lifetime)
  certificates:
    lifetime: 365d     # each machine's certificates (mutual TLS): d, h, m, s
  remediation:         # a member that fails on its own is replaced, one at a time
    unhealthyAfter: 30s  # a problem must last this long (at least 5s)
    maxRetry: 3        # replacements of one slot in a row (each failing within
    retryPeriod: 1m    #   minHealthyPeriod of the last) before quorum stops and asks
    minHealthyPeriod: 1h
  maintenance:
    defragWhenFragmentedAbove: 50%  # defragment a member once this much of its
                       # database is free (0 turns it off); NOSPACE is always repaired
  backup:
    schedule: \"0 * * * *\"  # scheduled snapshots: cron (UTC; 6 fields: seconds first), or off
    retention:
      last: 24         # keep the newest 24, plus the newest of each of the last 7 days
      days: 7          #   (the newest verified snapshot is always kept)
  recovery:
    keepFenced: 7d     # a restore or recovery sets old members' data aside (`quorum
                       #   fenced`); removed this long after
  paused: false
  deletionProtection: false  # true: `quorum delete` is refused until it is turned off
  # insecurePlaintext: true  # DANGEROUS: plain HTTP, no certificates (only at creation)
  # haproxy:           # optional: an HAProxy quorum keeps in step (see `quorum haproxy-config`)
  #   runtimeApi: /run/haproxy/admin.sock
  #   backend: etcd
";

#[cfg(test)]
mod tests {
    use super::*;

    /// What the tests pretend is installed.
    const INSTALLED: [Version; 3] = [
        Version::new(3, 4, 23),
        Version::new(3, 5, 0),
        Version::new(3, 5, 1),
    ];

    fn parse(text: &str, source: &str) -> Result<Manifest> {
        super::parse(text, source, &INSTALLED)
    }

    #[test]
    fn a_version_line_means_its_newest_installed_patch() {
        let doc = |v: &str| {
            format!("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {{name: a}}\nspec: {{replicas: 1, version: {v}}}\n")
        };
        // The walkthrough's silent downgrade: "3.5" is 3.5.1 here, as for --version.
        assert_eq!(
            parse(&doc("\"3.5\""), "t").unwrap().spec.version,
            Version::new(3, 5, 1)
        );
        assert_eq!(
            parse(&doc("3.5.0"), "t").unwrap().spec.version,
            Version::new(3, 5, 0)
        );
        let e = format!("{:#}", parse(&doc("3.5"), "t").unwrap_err());
        assert!(e.contains("quote it"), "{e}");
        let e = format!("{:#}", parse(&doc("\"3.6\""), "t").unwrap_err());
        assert!(e.contains("3.6.x is not installed"), "{e}");
        let e = format!("{:#}", parse(&doc("latest"), "t").unwrap_err());
        assert!(e.contains("not an etcd version"), "{e}");
    }

    #[test]
    fn allow_downgrade_confirms_one_apply_and_is_not_stored() {
        let text = "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.5.0, rollout: {maxSurge: 1, allowDowngrade: true}}\n";
        let m = parse(text, "t").unwrap();
        assert!(m.allow_downgrade);
        let stored = serde_json::to_string(&m.spec).unwrap();
        assert!(!stored.contains("allowDowngrade"), "{stored}");
        let bad = text.replace("allowDowngrade: true", "allowDowngrade: yes please");
        let e = format!("{:#}", parse(&bad, "t").unwrap_err());
        assert!(e.contains("must be true or false"), "{e}");
    }

    #[test]
    fn the_example_parses() {
        let m = parse(EXAMPLE, "example").unwrap();
        assert_eq!(m.metadata.name, "prod");
        assert_eq!(m.spec.replicas, 3);
        assert_eq!(m.spec.rollout.max_surge, 1);
        assert_eq!(m.spec.certificates.lifetime, quorum_core::Span::days(365));
        assert_eq!(
            m.spec.rollout.before.certificates_expiry,
            Some(quorum_core::Span::days(73))
        );
        assert!(m.spec.tls());
        assert_eq!(m.spec.remediation, quorum_core::RemediationSpec::default());
        assert_eq!(m.spec.maintenance, quorum_core::MaintenanceSpec::default());
        assert_eq!(m.spec.backup, quorum_core::BackupSpec::default());
    }

    #[test]
    fn a_backup_schedule_that_is_no_cron_expression_is_refused_by_name() {
        let text = "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.5.0, backup: {schedule: every hour}}\n";
        let m = parse(text, "m.yaml").unwrap();
        let e = quorum_core::validate_spec(&m.spec, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("backup.schedule") && e.contains("\"every hour\""),
            "{e}"
        );
        let text = text.replace("schedule: every hour", "retention: 3");
        let e = format!("{:#}", parse(&text, "m.yaml").unwrap_err());
        assert!(e.contains("expected a mapping (last, days)"), "{e}");
    }

    #[test]
    fn a_strategy_reads_as_the_flag_reads_it() {
        for text in ["inplace", "InPlace", "in-place", "INPLACE"] {
            let doc = format!("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {{name: a}}\nspec: {{replicas: 3, version: 3.4.23, rollout: {{strategy: {text}}}}}\n");
            let m = parse(&doc, "t").unwrap();
            assert_eq!(
                m.spec.rollout.strategy,
                quorum_core::Strategy::InPlace,
                "{text}"
            );
        }
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
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: three, version: 3.4.23}", "t: spec.replicas: invalid type: string \"three\", expected a whole number"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: -3, version: 3.4.23}", "t: spec.replicas: invalid value: integer `-3`, expected a whole number"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 3, version: 3.4.23, remediation: {unhealthyAfter: 30}}", "t: spec.remediation.unhealthyAfter: 30 has no unit: write 30s"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 3, version: 3.4.23, rollout: {strategy: sideways}}", "t: spec.rollout.strategy: \"sideways\" is not a rollout strategy"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23}\n---\napiVersion: x", "several YAML documents"),
            ("apiVersion: v1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23}", "apiVersion"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: Pod\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23}", "kind"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: A}\nspec: {replicas: 1, version: 3.4.23}", "metadata.name"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: banana}", "not an etcd version"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replica: 1, version: 3.4.23}", "t: spec.replica: unknown field `replica`, expected one of `replicas`"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23, certificates: {lifetime: 1y}}", "is not a duration"),
            ("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 1, version: 3.4.23, certificates: {lifetime: 365}}", "spec.certificates.lifetime: 365 has no unit: write 365s"),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", parse(text, "t").unwrap_err());
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    /// Fuzzing the parser: cases per property from QUORUM_FUZZ_CASES.
    fn cases(default: u32) -> proptest::test_runner::Config {
        let n = std::env::var("QUORUM_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default);
        proptest::test_runner::Config {
            cases: n,
            failure_persistence: None,
            ..Default::default()
        }
    }

    /// Values a field may take: right ones, wrong types, odd strings.
    fn scalar() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            Just("3".to_string()),
            Just("3.5.1".to_string()),
            Just("3.4.23".to_string()),
            Just("true".to_string()),
            Just("null".to_string()),
            Just("[1, 2]".to_string()),
            Just("{a: 1}".to_string()),
            Just("-1".to_string()),
            Just("4294967296".to_string()),
            Just("/run/x.sock".to_string()),
            Just("\"a\\nb\"".to_string()),
            "[a-z0-9.-]{0,12}",
            any::<i64>().prop_map(|n| n.to_string()),
        ]
    }

    fn manifest_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let field =
            |k: &'static str| proptest::option::of(scalar().prop_map(move |v| format!("{k}: {v}")));
        (
            proptest::option::of(prop_oneof![
                Just(API_VERSION.to_string()),
                "[a-z./0-9]{0,20}"
            ]),
            proptest::option::of(prop_oneof![Just(KIND.to_string()), "[A-Za-z]{0,12}"]),
            proptest::option::of(prop_oneof!["[a-z][a-z0-9-]{0,45}", ".{0,20}"]),
            (
                field("replicas"),
                field("version"),
                field("paused"),
                field("extra"),
            ),
            (
                proptest::option::of(field("maxSurge")),
                proptest::option::of((field("runtimeApi"), field("backend"))),
            ),
        )
            .prop_map(|(api, kind, name, (r, v, p, x), (surge, hap))| {
                let mut t = String::new();
                if let Some(a) = api {
                    t += &format!("apiVersion: {a}\n");
                }
                if let Some(k) = kind {
                    t += &format!("kind: {k}\n");
                }
                if let Some(n) = name {
                    t += &format!("metadata:\n  name: {n:?}\n");
                }
                t += "spec:\n";
                for f in [r, v, p, x].into_iter().flatten() {
                    t += &format!("  {f}\n");
                }
                if let Some(s) = surge {
                    t += &format!("  rollout:\n    {}\n", s.unwrap_or_default());
                }
                if let Some((a, b)) = hap {
                    t += "  haproxy:\n";
                    for f in [a, b].into_iter().flatten() {
                        t += &format!("    {f}\n");
                    }
                }
                t
            })
    }

    proptest::proptest! {
        #![proptest_config(cases(512))]

        /// Any text: a manifest or a one-line error, never a panic.
        #[test]
        fn any_text_is_a_manifest_or_one_line_error(text in ".{0,400}") {
            if let Err(e) = parse(&text, "fuzz") {
                let msg = format!("{e:#}");
                proptest::prop_assert!(!msg.contains('\n'), "{msg}");
            }
        }

        /// Manifest-shaped documents with every field right, wrong or missing: what
        /// parses has a valid name; what does not says why in one line.
        #[test]
        fn manifest_shaped_text_is_checked(text in manifest_text()) {
            match parse(&text, "fuzz") {
                Ok(m) => {
                    proptest::prop_assert!(validate_name(&m.metadata.name).is_ok());
                    proptest::prop_assert_eq!(m.api_version.as_str(), API_VERSION);
                    proptest::prop_assert_eq!(m.kind.as_str(), KIND);
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    proptest::prop_assert!(!msg.contains('\n'), "{text}\n=> {msg}");
                }
            }
        }
    }
}
