//! quorum-haproxy: the load balancer in front of a control plane's client endpoints.
//!
//! quorum keeps an HAProxy backend in step with the control plane's client endpoints
//! through HAProxy's runtime API (a unix `stats socket ... level admin`): `plan()` is a
//! pure function from the endpoints wanted and the servers present to the operations
//! that close the gap (`LbOp`), and `RuntimeApi` performs them. `config()` writes the
//! initial configuration, and `HaproxyProcess` runs HAProxy as a child for tests and the benchmark.
//!
//! Architecture invariant: every socket operation is bounded by a timeout (one
//! deadline per runtime command covers connect, write and read); answers HAProxy gives
//! for "already done" (a server that exists with the same address, a server already
//! gone) are success, any other answer that is not the known success text is
//! `HaproxyError::Refused` carrying HAProxy's own text. No async: std and a few libc
//! calls (a connect with a timeout, signals). Members' `/health` is not asked here:
//! the controller asks it through quorum-etcd's one HTTP client.

mod api;
mod config;
mod plan;
mod process;

pub use api::{
    parse_backend_connections, parse_servers_state, BackendConnections, RuntimeApi, Server,
    ServerTls,
};
pub use config::{config, FrontendTls};
pub use plan::{plan, LbOp};
pub use process::{haproxy_binary, HaproxyProcess};

use std::io;
use std::path::PathBuf;

/// The backend quorum manages when it is not told otherwise.
pub const DEFAULT_BACKEND: &str = "etcd";

/// What went wrong talking to (or running) HAProxy.
#[derive(Debug, thiserror::Error)]
pub enum HaproxyError {
    /// The runtime socket could not be connected (missing file, nobody listening).
    #[error("haproxy runtime API {}: connect: {source}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Connected, but writing the command or reading the answer failed.
    #[error("haproxy runtime API {}: {source}", socket.display())]
    Io {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The command (connect, write and read together) did not finish in time.
    #[error("haproxy runtime API {}: no complete answer within {timeout_ms} ms", socket.display())]
    Timeout { socket: PathBuf, timeout_ms: u64 },
    /// HAProxy answered, but not with the known success text: its answer, verbatim.
    #[error("haproxy refused {command:?}: {answer}")]
    Refused { command: String, answer: String },
    /// An answer that should have a known shape did not.
    #[error("haproxy answer did not parse: {0}")]
    Parse(String),
    /// A name or command that cannot be sent safely (HAProxy's CLI splits commands on
    /// `;` and lines on newlines, so such characters would run other commands).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// `haproxy -c` rejected the configuration.
    #[error("haproxy rejected the configuration {}: {output}", path.display())]
    Config { path: PathBuf, output: String },
    /// Writing files for, starting or waiting for the HAProxy process failed.
    #[error("haproxy process: {what}: {source}")]
    Process {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The HAProxy process exited while it was being started.
    #[error("haproxy exited during start ({status}); see {}: {log_tail}", log.display())]
    Exited {
        status: String,
        log: PathBuf,
        log_tail: String,
    },
}
