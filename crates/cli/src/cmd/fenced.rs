//! `quorum fenced [NAME] [--prune]`: the directories a rebuild moved out of reach (an
//! old member's machine directory, its data included), and removing them. The
//! controller removes each once `spec.recovery.keepFenced` (7 days by default) has
//! passed; `delete` removes a control plane's; `--prune` removes them now.

use crate::args::{FencedArgs, Output};
use crate::cmd::confirm;
use anyhow::Result;
use quorum_core::fenced::{control_plane_of, parse_fenced};
use quorum_ops::Place;
use quorum_provider::{default_etcd_dir, LocalProvider};
use serde::Serialize;

/// One fenced directory, for people and scripts.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    name: String,
    control_plane: String,
    machine: String,
    fenced_at: String,
    size_bytes: u64,
    path: String,
}

pub fn run(at: &Place, a: FencedArgs) -> Result<()> {
    let provider = LocalProvider::new(&at.home, default_etcd_dir());
    let rows = rows(&provider, a.name.as_deref());
    if !a.prune {
        return show(&rows, &a.output, &provider);
    }
    if rows.is_empty() {
        println!("no fenced directories to remove");
        return Ok(());
    }
    show(&rows, &Output::Table, &provider)?;
    let total: u64 = rows.iter().map(|r| r.size_bytes).sum();
    println!(
        "removing these {} directories ({}) cannot be undone",
        rows.len(),
        quorum_ops::defrag::bytes(total)
    );
    if !a.yes {
        confirm(a.name.as_deref().unwrap_or("all"))?;
    }
    for r in &rows {
        provider.remove_fenced(&r.name)?;
        println!("removed {}", r.path);
    }
    Ok(())
}

fn rows(provider: &LocalProvider, name: Option<&str>) -> Vec<Row> {
    provider
        .list_fenced(name)
        .into_iter()
        .map(|f| {
            let path = provider.fenced_dir().join(&f.name);
            let machine = parse_fenced(&f.name).map_or("", |(m, _)| m).to_string();
            Row {
                control_plane: control_plane_of(&machine).unwrap_or("").to_string(),
                fenced_at: quorum_pki::format_rfc3339(f.fenced_at_unix_s),
                size_bytes: LocalProvider::size_of(&path),
                path: path.display().to_string(),
                name: f.name,
                machine,
            }
        })
        .collect()
}

fn show(rows: &[Row], output: &Output, provider: &LocalProvider) -> Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(rows)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(rows)?),
        Output::Table if rows.is_empty() => println!(
            "no fenced directories in {}",
            provider.fenced_dir().display()
        ),
        Output::Table => {
            let mut table = vec![vec![
                "CONTROL PLANE".to_string(),
                "MACHINE".into(),
                "FENCED (UTC)".into(),
                "SIZE".into(),
                "PATH".into(),
            ]];
            table.extend(rows.iter().map(|r| {
                vec![
                    r.control_plane.clone(),
                    r.machine.clone(),
                    r.fenced_at.clone(),
                    quorum_ops::defrag::bytes(r.size_bytes),
                    r.path.clone(),
                ]
            }));
            print!("{}", quorum_ops::status::columns(&table));
            println!("the controller removes each once spec.recovery.keepFenced has passed (7d by default); `--prune` removes them now");
        }
    }
    Ok(())
}
