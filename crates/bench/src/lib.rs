//! quorum's benchmark and demo tooling, kept out of the product crates: `quorum bench
//! rollout` (paced clients during a rollout by quorum, replacing machines or restarting
//! them in place, or by a naive script, with pictures), `quorum bench failover` (controller takeover times), `quorum bench snapshot`
//! (snapshot, test restore and seed restore times and sizes by key count) and `quorum demo`.
//! Each drives the same operations as the `quorum` commands (`quorum-ops`) in a
//! throwaway home, and cleans up every process it started.

mod balancer;
pub mod demo;
pub mod failover;
pub mod fleet;
pub mod hostnet;
pub mod hosts;
mod naive;
pub mod patterns;
mod plot;
mod preload;
mod report;
pub mod rollout;
mod serving;
pub mod snapshot;
pub mod sticky;
pub mod watchers;
