//! `quorum config view`: the home, the store, the key file, where snapshots are kept
//! and where etcd comes from, as this command line resolves them, and where each came
//! from (a flag, the environment, the default). It opens nothing: it works with an
//! unreachable store too, which is when it is needed most.

use crate::args::{ConfigArgs, ConfigCommand, Output};
use anyhow::Result;
use quorum_ops::{Origin, Place};
use quorum_store::StoreLocation;
use serde::Serialize;

/// One resolved setting.
#[derive(Serialize)]
struct Setting {
    name: &'static str,
    value: String,
    from: String,
}

/// The S3 settings `spec.backup.store: s3://...` uses, from the environment.
const S3_VARS: [&str; 4] = [
    "AWS_ENDPOINT",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_ALLOW_HTTP",
];

pub fn run(at: &Place, a: ConfigArgs) -> Result<()> {
    let ConfigCommand::View { output } = a.what;
    let settings = settings(at);
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&settings)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(&settings)?),
        Output::Table => {
            let mut rows = vec![vec!["SETTING".into(), "VALUE".into(), "FROM".into()]];
            rows.extend(
                settings
                    .iter()
                    .map(|s| vec![s.name.to_string(), s.value.clone(), s.from.clone()]),
            );
            print!("{}", quorum_ops::status::columns(&rows));
        }
    }
    Ok(())
}

fn settings(at: &Place) -> Vec<Setting> {
    let key_file =
        quorum_store::secrets::KeyFile::resolve(&at.home, at.secrets_key_file.as_deref());
    let etcd_dir = quorum_provider::default_etcd_dir();
    let installed: Vec<String> = quorum_provider::installed_versions(&etcd_dir)
        .iter()
        .map(|v| v.to_string())
        .collect();
    let env_or_default = |var: &'static str| match std::env::var_os(var) {
        Some(v) if !v.is_empty() => Origin::Env(var).to_string(),
        _ => Origin::Default.to_string(),
    };
    vec![
        Setting {
            name: "home",
            value: at.home.display().to_string(),
            from: with_default(at.origins.home, "the user's data directory"),
        },
        Setting {
            name: "store",
            value: match &at.store {
                StoreLocation::Embedded => format!(
                    "embedded: {}",
                    at.home.join(quorum_store::STATE_FILE).display()
                ),
                StoreLocation::Etcd(l) => l.url(),
            },
            from: with_default(at.origins.store, "the state file in the home"),
        },
        Setting {
            name: "key file",
            value: key_file.path().display().to_string(),
            from: with_default(at.origins.key_file, "<home>/secrets.key"),
        },
        Setting {
            name: "snapshots",
            value: format!(
                "{} (a control plane whose spec.backup.store names a bucket: there)",
                at.home.join("backups").join("<name>").display()
            ),
            from: "the home".into(),
        },
        Setting {
            name: "S3",
            value: s3_words(),
            from: "the environment (as every S3 tool reads it)".into(),
        },
        Setting {
            name: "etcd",
            value: format!(
                "{} (installed: {})",
                etcd_dir.display(),
                if installed.is_empty() {
                    "none".into()
                } else {
                    installed.join(", ")
                }
            ),
            from: env_or_default("QUORUM_ETCD_DIR"),
        },
    ]
}

fn with_default(o: Origin, default: &str) -> String {
    match o {
        Origin::Default => format!("the default: {default}"),
        other => other.to_string(),
    }
}

/// What the S3 variables say (a secret's value never: only whether it is set).
fn s3_words() -> String {
    let set: Vec<String> = S3_VARS
        .iter()
        .filter_map(|v| {
            let value = std::env::var(v).ok().filter(|x| !x.is_empty())?;
            Some(match *v {
                "AWS_ACCESS_KEY_ID" => format!("{v} set"),
                _ => format!("{v}={value}"),
            })
        })
        .collect();
    if set.iter().any(|s| s.starts_with("AWS_ENDPOINT=")) {
        set.join(", ")
    } else if set.is_empty() {
        "nothing set: a bucket means AWS itself (set AWS_ENDPOINT for another S3-compatible store)"
            .into()
    } else {
        format!(
            "{}; no AWS_ENDPOINT: a bucket means AWS itself",
            set.join(", ")
        )
    }
}
