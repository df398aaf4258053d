//! `quorum status`: the live observation and decision, as a table, JSON or YAML.

use crate::args::{Output, StatusArgs};
use crate::cmd::watch;
use anyhow::Result;
use quorum_ops::{status, Ctx, Place};

pub async fn run(at: &Place, a: StatusArgs) -> Result<()> {
    let ctx = Ctx::open_existing(at)?;
    if a.watch {
        return watch::run(&ctx, &a.name, a.output, a.timeout).await;
    }
    let cp = ctx.store.get_control_plane(&a.name)?;
    let mut s = ctx.live(&cp).await?;
    // Each member of a management etcd, probed now (empty for the embedded store).
    s.store = ctx.store.endpoint_health(true);
    print!("{}", render(&s, a.output)?);
    Ok(())
}

/// One status in the chosen format.
pub fn render(s: &status::Status, output: Output) -> Result<String> {
    Ok(match output {
        Output::Table => status::render_table(s),
        Output::Json => format!("{}\n", serde_json::to_string_pretty(s)?),
        Output::Yaml => serde_yaml::to_string(s)?,
    })
}
