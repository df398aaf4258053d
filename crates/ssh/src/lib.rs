//! Installs quorum's host agent over SSH (`quorum host install`): SSH carries the
//! binary and starts the agent once; from then on the controller speaks only to the
//! agent's own API (mutual TLS). The remote steps are a pure plan (`plan`); the session
//! (`session`, russh) checks the host's key against a known-hosts file before it sends
//! anything, and bounds every command by a deadline.
//!
//! Architecture invariant: this crate knows nothing of the store, the agent's API or
//! etcd; it moves bytes and runs the plan's text. It never shells out to `ssh`.

pub mod plan;
pub mod session;

pub use session::{Output, Session, SshError, Target};
