//! The `quorum` command line. Everything here is the binary's edge: it parses input
//! (`args`), and runs one command (`cmd`, a module each) on the operations of
//! `quorum-ops`, or the benchmark and demo tooling of `quorum-bench`.

mod args;
mod cmd;
mod usage;

use anyhow::{anyhow, Context, Result};
use args::{Cli, Command};
use clap::Parser;
use quorum_ops::{Origin, Origins, Place};
use quorum_store::StoreLocation;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| usage_error(e));
    init_logging(&cli.command);
    match quorum_controller::failpoints::init_from_env() {
        Ok(set) if !set.is_empty() => eprintln!("failpoints armed: {}", set.join(", ")),
        Ok(_) => {}
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let at = match place(&cli) {
        Ok(at) => at,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(cmd::run(&at, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        // A usage error a command found after parsing: as clap prints its own, exit 2.
        Err(e) => match e.downcast::<clap::Error>() {
            Ok(usage) => {
                let _ = usage.print();
                ExitCode::from(u8::try_from(usage.exit_code()).unwrap_or(2))
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                if let Some(note) = store_note(&e, &at) {
                    eprintln!("{note}");
                }
                ExitCode::FAILURE
            }
        },
    }
}

/// For an error whose meaning depends on the store (a control plane that does not
/// exist, a home that does not, a key that does not open): which store it was, and
/// where that choice came from (`QUORUM_STORE` exported and `--home` given reads the
/// management etcd, not the home's file). Only for a store chosen by a flag or the
/// environment.
fn store_note(e: &anyhow::Error, at: &Place) -> Option<String> {
    use quorum_store::StoreError;
    let depends = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<StoreError>(),
            Some(StoreError::NotFound(_) | StoreError::NoHome { .. } | StoreError::Secrets(_))
        )
    });
    // The default store (the home's file) surprises nobody: the error stays one line.
    let chosen = at.origins.store != Origin::Default;
    (depends && chosen).then(|| {
        format!(
            "note: the store is {}; `quorum config view` shows where each setting came from",
            at.store_words()
        )
    })
}

/// Logs go to stderr, filtered by QUORUM_LOG; the controller logs its steps by default.
fn init_logging(command: &Command) {
    let default = if matches!(command, Command::Controller(_) | Command::Agent(_)) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("QUORUM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// Where this command works, and where each part of that came from.
fn place(cli: &Cli) -> Result<Place> {
    let env_set = |var: &str| std::env::var_os(var).is_some_and(|v| !v.is_empty());
    let origin = |flag: bool, flag_name, var: &'static str| match (flag, env_set(var)) {
        (true, _) => Origin::Flag(flag_name),
        (false, true) => Origin::Env(var),
        (false, false) => Origin::Default,
    };
    Ok(Place {
        store: store_location(cli)?,
        secrets_key_file: cli.secrets_key_file.clone(),
        home: home(cli.home.clone()),
        origins: Origins {
            home: origin(cli.home.is_some(), "--home", "QUORUM_HOME"),
            store: origin(cli.store.is_some(), "--store", "QUORUM_STORE"),
            key_file: origin(
                cli.secrets_key_file.is_some(),
                "--secrets-key-file",
                quorum_store::secrets::KEY_FILE_ENV,
            ),
        },
    })
}

/// `--store` (else `QUORUM_STORE`, else embedded) with its TLS files.
fn store_location(cli: &Cli) -> Result<StoreLocation> {
    let url = cli
        .store
        .clone()
        .or_else(|| std::env::var("QUORUM_STORE").ok())
        .unwrap_or_default();
    let tls = match (&cli.store_ca, &cli.store_cert, &cli.store_key) {
        (Some(ca), Some(cert), Some(key)) => {
            let read = |p: &PathBuf| {
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
            };
            Some(quorum_store::EtcdTls {
                ca_pem: read(ca)?,
                cert_pem: read(cert)?,
                key_pem: read(key)?,
            })
        }
        _ => None,
    };
    StoreLocation::parse(&url, tls).map_err(|e| anyhow!(e))
}

/// `--home`, else `QUORUM_HOME`, else the user's data directory.
fn home(cli_home: Option<PathBuf>) -> PathBuf {
    cli_home
        .or_else(|| {
            std::env::var_os("QUORUM_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| quorum_provider::data_home().join("quorum").join("state"))
}

/// Exits on a malformed command line as clap does (exit 2, help and version on stdout
/// with 0), with a hint where one is known: etcdctl's arguments come after `--`, as with
/// `kubectl exec` (`quorum etcdctl prod put k v` would otherwise only say "unexpected
/// argument 'put'").
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let args: Vec<String> = std::env::args().collect();
    let etcdctl = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(String::as_str)
        == Some("etcdctl");
    if e.kind() == ErrorKind::UnknownArgument && etcdctl && !args.iter().any(|a| a == "--") {
        let rest: Vec<&str> = args
            .iter()
            .skip_while(|a| *a != "etcdctl")
            .skip(1)
            .map(String::as_str)
            .collect();
        let (name, tail) = rest.split_first().unwrap_or((&"NAME", &[]));
        let _ = e.print();
        eprintln!(
            "hint: etcdctl's arguments come after `--`: quorum etcdctl {name} -- {}",
            tail.join(" ")
        );
        std::process::exit(2);
    }
    e.exit()
}
