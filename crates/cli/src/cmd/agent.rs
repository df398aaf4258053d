//! `quorum agent`: the host agent in the foreground, until Ctrl-C or SIGTERM (its
//! members keep running).

use crate::args::AgentArgs;
use anyhow::Result;
use quorum_agent::runtime::{self, AgentConfig};

pub async fn run(a: AgentArgs) -> Result<()> {
    let state_dir = a
        .state_dir
        .unwrap_or_else(|| quorum_provider::data_home().join("quorum").join("agent"));
    let config = AgentConfig {
        state_dir: state_dir.clone(),
        listen: a.listen,
        join: a.join,
        stop_grace: a.stop_grace,
    };
    eprintln!(
        "quorum agent: state {} (Ctrl-C to stop; members keep running)",
        state_dir.display()
    );
    runtime::run(config, shutdown()).await?;
    Ok(())
}

/// Resolves at SIGINT or SIGTERM.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
