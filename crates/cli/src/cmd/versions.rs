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
        let warn = if v.has_known_data_inconsistency_bug() {
            "  (known data inconsistency bug, fixed in 3.5.3)"
        } else {
            ""
        };
        println!("{v}{warn}");
    }
    Ok(())
}
