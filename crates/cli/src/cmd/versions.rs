//! `quorum versions`: the installed etcd versions; `quorum versions add`: one more.

use crate::args::{VersionsAddArgs, VersionsArgs, VersionsCommand};
use anyhow::{bail, Context, Result};
use quorum_provider::release;
use quorum_provider::{default_etcd_dir, installed_versions};

pub fn run(args: VersionsArgs) -> Result<()> {
    match args.command {
        None => list(),
        Some(VersionsCommand::Add(add)) => add_release(add),
    }
}

fn list() -> Result<()> {
    let dir = default_etcd_dir();
    let vs = installed_versions(&dir);
    if vs.is_empty() {
        bail!(
            "no etcd installed in {}: run scripts/install.sh, `quorum versions add PATH`, or set QUORUM_ETCD_DIR",
            dir.display()
        );
    }
    for v in vs {
        let warn = match v.known_bugs().map(|b| b.fixed_in).max() {
            Some(fixed) => format!("  (known data inconsistency bugs, fixed in {fixed})"),
            None => String::new(),
        };
        println!("{v}{warn}");
    }
    Ok(())
}

fn add_release(args: VersionsAddArgs) -> Result<()> {
    let dir = default_etcd_dir();
    let added = release::add(&dir, &args.paths, &args.sha256, args.version)
        .with_context(|| format!("adding an etcd release to {}", dir.display()))?;
    let what = added.binaries.join(", ");
    if added.changed {
        println!(
            "added etcd {} in {} ({what}: each ran here and reported {})",
            added.version,
            added.dir.display(),
            added.version
        );
    } else {
        println!(
            "etcd {} is already in {} with these binaries ({what}): nothing changed",
            added.version,
            added.dir.display()
        );
    }
    if let Some(w) = added.version.known_bug_warning() {
        println!("note: {w}");
    }
    Ok(())
}
