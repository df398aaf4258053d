//! `quorum versions`: the installed etcd versions.

use anyhow::{bail, Result};
use quorum_provider::{default_etcd_dir, installed_versions};

pub fn run() -> Result<()> {
    let dir = default_etcd_dir();
    let vs = installed_versions(&dir);
    if vs.is_empty() {
        bail!(
            "no etcd installed in {}: run scripts/install.sh (or set QUORUM_ETCD_DIR)",
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
