//! Usage errors: a malformed command line exits 2, with clap's layout, whether clap finds
//! the fault while parsing (the value parsers here) or a command finds it afterwards (a
//! value only the core's rules can judge, or two flags that do not go together). Errors
//! about flags name the flag; the same rule broken by a manifest names the manifest's
//! field (the core's own wording).

use crate::args::Cli;
use clap::error::ErrorKind;
use clap::CommandFactory;
use quorum_core::validate::MIN_CERTIFICATE_LIFETIME;
use quorum_core::{SpecError, VersionRequest, MAX_REPLICAS};
use std::fmt::Display;

/// What `--max-surge` accepts.
const MAX_SURGE_ALLOWED: &str =
    "use 0 or 1 (1: add each new member before removing an old one; 0: remove first, 3+ replicas)";

/// A usage error of `quorum <command>` found after parsing; `main` prints it as clap
/// prints its own (with that command's usage line) and exits 2.
pub fn usage_error(command: &str, message: impl Display) -> anyhow::Error {
    let mut cli = Cli::command();
    // Built, so that the subcommand knows its full name for its usage line.
    cli.build();
    let e = match cli.find_subcommand_mut(command) {
        Some(sub) => sub.error(ErrorKind::ValueValidation, message),
        None => cli.error(ErrorKind::ValueValidation, message),
    };
    anyhow::Error::new(e)
}

/// What `--replicas` accepts: the odd counts up to `MAX_REPLICAS`, the even ones with
/// `--force` ("use 1, 3, 5 or 7 (2, 4 or 6 with --force)").
pub fn replicas_allowed() -> String {
    let list = |from: u32| -> String {
        let n: Vec<String> = (from..=MAX_REPLICAS)
            .step_by(2)
            .map(|n| n.to_string())
            .collect();
        match n.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => n.join(""),
        }
    };
    format!("use {} ({} with --force)", list(1), list(2))
}

/// `--replicas N`: a number in the range the core accepts (evenness needs `--force`,
/// which a command checks once it knows whether it was given).
pub fn replicas(s: &str) -> Result<u32, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if (1..=i64::from(MAX_REPLICAS)).contains(&n) => Ok(n as u32),
        _ => Err(replicas_allowed()),
    }
}

/// `--max-surge N`: a number (its range is the core's rule, worded by
/// `create_flag_error`).
pub fn max_surge(s: &str) -> Result<u32, String> {
    s.trim()
        .parse::<u32>()
        .map_err(|_| MAX_SURGE_ALLOWED.to_string())
}

/// `--strategy S`: `Replace` or `InPlace` (also `replace`, `in-place`).
pub fn strategy(s: &str) -> Result<quorum_core::Strategy, String> {
    s.trim().parse()
}

/// A control plane's name, checked as `create` checks it (lowercase letters, digits
/// and '-'), so a malformed one is a usage error (exit 2) everywhere.
pub fn cp_name(s: &str) -> Result<String, String> {
    quorum_core::validate_name(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

/// `--version V`: a version text in the one grammar (`3.5.1`, `v3.5.1`, or `3.5` for the
/// newest installed 3.5.x); whether it is installed is checked by the command.
pub fn version_text(s: &str) -> Result<String, String> {
    let t = s.trim();
    t.parse::<VersionRequest>()
        .map(|_| t.to_string())
        .map_err(|e| e.to_string())
}

/// The store flags given to a command that reads no state (`version`, `versions`, `demo`,
/// `bench`): refused, rather than accepted and ignored.
pub fn no_state<T: Clone + Send + Sync + 'static>(_: &str) -> Result<T, String> {
    Err("this command uses no quorum state: leave --home, --store and --store-* out".into())
}

/// `create`'s spec came from flags: the core's refusals of it become usage errors that
/// name the flag. Other errors pass unchanged.
pub fn create_flag_error(e: anyhow::Error) -> anyhow::Error {
    let Some(spec) = e.downcast_ref::<SpecError>() else {
        return e;
    };
    let message = match spec {
        SpecError::ReplicasRange(_) | SpecError::EvenReplicas(_) => {
            return replicas_error("create", e)
        }
        SpecError::InPlaceTooSmall(n) => format!(
            "--strategy InPlace needs --replicas 3 or more, got {n}: a member restarting in \
             place is down meanwhile, and 1 or 2 would lose quorum with it; use --strategy \
             Replace"
        ),
        SpecError::MaxSurge(n) => {
            format!("invalid value '{n}' for '--max-surge <N>': {MAX_SURGE_ALLOWED}")
        }
        SpecError::SurgeZeroTooSmall => "--max-surge 0 needs --replicas 3 or more (removing \
            the only member of 1, or one of 2, loses quorum); use --max-surge 1"
            .to_string(),
        SpecError::HaproxySocket(s) => format!(
            "invalid value {s:?} for '--haproxy-runtime-api <SOCKET>': use the absolute path \
             of HAProxy's admin socket (under 108 bytes, no spaces)"
        ),
        SpecError::HaproxyBackend(b) => format!(
            "invalid value {b:?} for '--haproxy-backend <NAME>': not a backend name: use 1 to \
             64 letters, digits, '-', '_', '.' or ':'"
        ),
        SpecError::CertificateLifetime(l) => format!(
            "invalid value '{l}' for '--certificate-lifetime <DURATION>': too short; use at \
             least {MIN_CERTIFICATE_LIFETIME} (a machine must be able to join and serve \
             before it is due for renewal)"
        ),
        SpecError::CertificateRenewal { renew, lifetime } => format!(
            "--renew-before {renew} is not shorter than --certificate-lifetime {lifetime}: \
             every new machine would be due for replacement at once"
        ),
        SpecError::Backup(why) => why.replace("backup.schedule", "--backup-schedule"),
        _ => return e,
    };
    usage_error("create", message)
}

/// `scale`'s `--replicas` refused by the core: a usage error naming the flag. Other
/// errors (a refusal that involves the stored spec too, such as its maxSurge) pass
/// unchanged.
pub fn scale_flag_error(e: anyhow::Error) -> anyhow::Error {
    replicas_error("scale", e)
}

fn replicas_error(command: &str, e: anyhow::Error) -> anyhow::Error {
    let message = match e.downcast_ref::<SpecError>() {
        Some(SpecError::ReplicasRange(n)) => {
            format!(
                "invalid value '{n}' for '--replicas <N>': {}",
                replicas_allowed()
            )
        }
        Some(SpecError::EvenReplicas(n)) => format!(
            "--replicas {n} is even: an even member count tolerates no more failures than {} \
             and needs a larger quorum; use {} or {}, or pass --force to insist",
            n - 1,
            n - 1,
            n + 1
        ),
        _ => return e,
    };
    usage_error(command, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks of the whole grammar (ids, groups, `requires`),
    /// which it otherwise runs only when a command is built in a debug binary.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn replicas_say_what_is_allowed() {
        assert_eq!(
            replicas_allowed(),
            "use 1, 3, 5 or 7 (2, 4 or 6 with --force)"
        );
        assert_eq!(replicas("3"), Ok(3));
        assert_eq!(replicas("4"), Ok(4), "evenness is the command's check");
        for bad in ["0", "9", "-1", "x", "", "4294967296"] {
            assert_eq!(replicas(bad), Err(replicas_allowed()), "{bad}");
        }
    }

    #[test]
    fn version_texts_are_checked_in_the_one_grammar() {
        assert_eq!(version_text("3.5").as_deref(), Ok("3.5"));
        assert_eq!(version_text(" v3.5.1 ").as_deref(), Ok("v3.5.1"));
        for bad in ["latest", "3", "3.5.1.2", ""] {
            let e = version_text(bad).unwrap_err();
            assert!(e.contains("is not an etcd version"), "{bad}: {e}");
        }
    }

    /// The core's refusals of a spec built from flags name the flag, and exit 2.
    #[test]
    fn spec_errors_from_flags_name_the_flag() {
        let cases = [
            (SpecError::MaxSurge(2), "'--max-surge <N>'"),
            (
                SpecError::SurgeZeroTooSmall,
                "--max-surge 0 needs --replicas 3",
            ),
            (SpecError::EvenReplicas(4), "--replicas 4 is even"),
            (
                SpecError::HaproxySocket("a".into()),
                "'--haproxy-runtime-api <SOCKET>'",
            ),
            (
                SpecError::HaproxyBackend("a;b".into()),
                "'--haproxy-backend <NAME>'",
            ),
        ];
        for (err, flag) in cases {
            let e = create_flag_error(anyhow::Error::new(err));
            let clap = e.downcast_ref::<clap::Error>().expect("a usage error");
            assert_eq!(clap.exit_code(), 2);
            let text = clap.to_string();
            assert!(text.contains(flag), "{text}");
            assert!(text.contains("Usage: quorum create"), "{text}");
            assert!(
                !text.contains("rollout.") && !text.contains("haproxy."),
                "{text}"
            );
        }
        // Not from a flag: unchanged.
        let other = create_flag_error(anyhow::anyhow!("etcd 9.9.9 is not installed"));
        assert!(other.downcast_ref::<clap::Error>().is_none());
    }
}
