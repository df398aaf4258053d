//! `quorum secrets status|rotate`: the key file that seals the store's secrets.

use crate::args::SecretsCommand;
use anyhow::Result;
use quorum_ops::{secrets, Place};

pub fn run(at: &Place, c: SecretsCommand) -> Result<()> {
    match c {
        SecretsCommand::Status(a) => {
            let s = secrets::status(at)?;
            if a.output == "json" {
                println!("{}", serde_json::to_string_pretty(&s)?);
                return Ok(());
            }
            let keys = if s.key_file_keys.is_empty() {
                "none yet (made when the first TLS control plane is created)".to_string()
            } else {
                s.key_file_keys.join(", ") + " (the first is current)"
            };
            println!("Key file      {}", s.key_file);
            println!("Its keys      {keys}");
            println!(
                "Store uses    {}",
                s.store_key
                    .as_deref()
                    .unwrap_or("no key yet: nothing is sealed")
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
            println!("Sealed CA keys {records}");
            Ok(())
        }
        SecretsCommand::Rotate(a) => {
            let r = secrets::rotate(at)?;
            if a.output == "json" {
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(());
            }
            println!(
                "{} the key-encryption key: {} re-wrapped with {}; {} removed from {}",
                if r.resumed {
                    "Finished rotating"
                } else {
                    "Rotated"
                },
                r.rewrapped,
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
