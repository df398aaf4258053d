//! `quorum status`: the live observation and decision, as a table, JSON or YAML.

use crate::args::{Output, StatusArgs};
use anyhow::Result;
use quorum_ops::{status, Ctx, Place};

pub async fn run(at: &Place, a: StatusArgs) -> Result<()> {
    let ctx = Ctx::open_existing(at)?;
    let cp = ctx.store.get_control_plane(&a.name)?;
    let s = ctx.live(&cp).await?;
    match a.output {
        Output::Table => print!("{}", status::render_table(&s)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&s)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(&s)?),
    }
    Ok(())
}
