//! ARCHITECTURE.md's code map stays true to the code: a section per workspace crate and
//! none for a crate that is gone, and every module of the core named in the core's
//! section (the core is where the rules are; a module nobody can find is a rule nobody
//! reads). Fails when they drift; the fix is a sentence in the code map.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The workspace's members, from the root Cargo.toml (`crates/<name>`).
fn members() -> Vec<String> {
    let toml = read(&root().join("Cargo.toml"));
    let line = toml
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .filter(|s| s.starts_with("crates/"))
        .map(|s| s.trim_start_matches("crates/").to_string())
        .collect()
}

/// The code map's sections: (crate directory, its text).
fn sections(doc: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("### `crates/") {
            let name = rest.split('`').next().unwrap_or_default().to_string();
            out.push((name, String::new()));
        } else if line.starts_with("## ") || line.starts_with("### ") {
            out.push((String::new(), String::new()));
        } else if let Some((_, text)) = out.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out.retain(|(name, _)| !name.is_empty());
    out
}

#[test]
fn the_code_map_has_a_section_per_crate_and_none_for_a_crate_gone() {
    let doc = read(&root().join("ARCHITECTURE.md"));
    let mapped: Vec<String> = sections(&doc).into_iter().map(|(n, _)| n).collect();
    let members = members();
    assert!(members.len() >= 10, "{members:?}");
    for m in &members {
        assert!(
            mapped.contains(m),
            "crates/{m} has no section in ARCHITECTURE.md's code map"
        );
    }
    for m in &mapped {
        assert!(
            members.contains(m),
            "ARCHITECTURE.md maps crates/{m}, which is no workspace member"
        );
    }
}

/// The `.rs` files of `dir` (but `skip`) whose name, as `name_of` writes it, the
/// crate's section of ARCHITECTURE.md does not contain.
fn unnamed(section: &str, dir: &str, skip: &str, name_of: &dyn Fn(&str) -> String) -> Vec<String> {
    let doc = read(&root().join("ARCHITECTURE.md"));
    let text = sections(&doc)
        .into_iter()
        .find(|(n, _)| n == section)
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("a {section} section"));
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join(dir)).expect(dir) {
        let file = entry
            .expect("an entry")
            .file_name()
            .to_string_lossy()
            .to_string();
        if file.ends_with(".rs") && file != skip && !text.contains(&name_of(&file)) {
            missing.push(file);
        }
    }
    missing.sort();
    missing
}

#[test]
fn the_core_section_names_every_core_module() {
    let missing = unnamed("core", "crates/core/src", "lib.rs", &|f| f.to_string());
    assert!(
        missing.is_empty(),
        "not in the core's code map: {missing:?}"
    );
}

/// The command list of the cli section is every module of `crates/cli/src/cmd`, each
/// as `` `name` ``.
#[test]
fn the_cli_section_names_every_command_module() {
    let missing = unnamed("cli", "crates/cli/src/cmd", "mod.rs", &|f| {
        format!("`{}`", f.trim_end_matches(".rs"))
    });
    assert!(
        missing.is_empty(),
        "commands not in the cli's code map: {missing:?}"
    );
}
