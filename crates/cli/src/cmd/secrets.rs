//! `quorum secrets status|rotate`: the key file that seals the store's secrets.

use crate::args::SecretsCommand;
use anyhow::{bail, Result};
use quorum_ops::{secrets, Place};

pub fn run(at: &Place, c: SecretsCommand) -> Result<()> {
    match c {
        SecretsCommand::Status(a) => {
            let s = secrets::status(at)?;
            if a.output == "json" {
                println!("{}", serde_json::to_string_pretty(&s)?);
                return refuse_unopenable(&s);
            }
            let keys = if s.key_file_keys.is_empty() {
                "none (no key file there)".to_string()
            } else {
                s.key_file_keys.join(", ") + " (the first is current)"
            };
            println!("Key file        {}", s.key_file);
            println!("Its keys        {keys}");
            println!(
                "Store uses      {}",
                s.store_key
                    .as_deref()
                    .unwrap_or("no key yet: nothing is sealed (the key file is made then)")
            );
            let records = if s.records_by_key.is_empty() {
                "none".to_string()
            } else {
                s.records_by_key
                    .iter()
                    .map(|(k, n)| format!("{n} with {k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!("Sealed CA keys  {records}");
            refuse_unopenable(&s)
        }
        SecretsCommand::Rotate(a) => {
            let r = secrets::rotate(at)?;
            if a.output == "json" {
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(());
            }
            println!(
                "{} the key-encryption key: {} sealed CA key{} re-wrapped with {}; {} removed from {}",
                if r.resumed {
                    "Finished rotating"
                } else {
                    "Rotated"
                },
                r.rewrapped,
                if r.rewrapped == 1 { "" } else { "s" },
                r.new_key,
                if r.old_keys.is_empty() {
                    "nothing".to_string()
                } else {
                    r.old_keys.join(", ")
                },
                r.key_file
            );
            println!(
                "Processes that read this store with their own copy of the key file need the new one."
            );
            Ok(())
        }
    }
}

/// Exits non-zero when this process cannot open the store's secrets (its key file lacks
/// the key the store names), after the status said what it found.
fn refuse_unopenable(s: &secrets::SecretsStatus) -> Result<()> {
    match &s.store_key {
        Some(k) if !s.key_file_keys.contains(k) => bail!(
            "this process cannot open the store's secrets: they are sealed with key {k}, which \
             {} {}; give it the key file the others use (--secrets-key-file FILE, or \
             QUORUM_SECRETS_KEY_FILE)",
            s.key_file,
            if s.key_file_keys.is_empty() {
                "does not exist"
            } else {
                "does not hold"
            }
        ),
        _ => Ok(()),
    }
}
