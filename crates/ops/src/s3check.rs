//! `spec.backup.s3` checked where a spec is recorded (create, apply, every change that
//! touches it), so a credentials file that is missing, unreadable or readable by
//! others is said then, not at the first snapshot an hour later. The file is read by
//! this process as the controller would read it (same machine, same path).

use anyhow::{bail, Result};
use quorum_core::s3access::CredentialsSource;
use quorum_core::ControlPlaneSpec;

/// Refuses a credentials file that cannot be used; a note when the variables an `env`
/// reference names are not set here (the controller may have them; this process does
/// not need them to record the spec).
pub fn check(name: &str, spec: &ControlPlaneSpec) -> Result<Option<String>> {
    let Some(r) = spec.backup.s3.as_ref().and_then(|a| a.credentials.as_ref()) else {
        return Ok(None);
    };
    let source = r.source().map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    match (source, quorum_backup::access::read_key(r)) {
        (_, Ok(_)) => Ok(None),
        (CredentialsSource::File(_), Err(why)) => bail!("{name}: {why}"),
        (CredentialsSource::Env(_), Err(why)) => Ok(Some(format!(
            "note: {name}: {why}; the controller, and any quorum command that takes or reads its snapshots, needs them"
        ))),
    }
}
