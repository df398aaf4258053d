//! What the `quorum` commands do, as a library: open a home and its store ([`Ctx`]),
//! create and change a control plane (checked against the core's rules and the live
//! cluster), delete it (the teardown), observe its status, and follow it to a goal.
//! The `quorum` binary parses and dispatches to these; the benchmark and demo tooling
//! (`quorum-bench`) drive the very same operations in a throwaway home.
//!
//! Its errors are messages for the person at the terminal, so it reports them with
//! `anyhow`, like the binary; the product libraries below it use typed errors.

/// `println!` unless the context is quiet.
macro_rules! say {
    ($ctx:expr, $($arg:tt)*) => {
        if !$ctx.quiet {
            println!($($arg)*);
        }
    };
}

pub mod carotation;
mod ctx;
pub mod defrag;
mod haproxy;
pub mod hostinstall;
pub mod hosts;
pub mod manifest;
pub mod member;
pub mod rebuild;
pub mod recreate;
pub mod road;
mod room;
mod s3check;
pub mod secrets;
pub mod snapshot;
mod spec;
pub mod status;
mod teardown;
pub mod wait;

pub use ctx::{list_versions, Ctx, Origin, Origins, Place};
pub use haproxy::{haproxy_frontend_tls, HaproxyState, LbServer};
pub use road::Route;
pub use spec::{
    change, change_routed, change_with, create, create_with, plan, retry_rollout, version_warning,
    ChangeOptions, SPEC_WRITE_ATTEMPTS,
};
pub use teardown::teardown;

use std::time::Duration;

/// `--lease-ttl`: a duration within the bounds the lease rules accept.
pub fn parse_lease_ttl(s: &str) -> Result<Duration, String> {
    let d = wait::parse_duration(s)?;
    quorum_core::lease::check_ttl_ms(d.as_millis() as u64)?;
    Ok(d)
}
