//! Checks on what a user asks for, before anything is stored.

use crate::model::{ControlPlaneSpec, HaproxySpec, Strategy, MAX_REPLICAS, MIN_IN_PLACE_TIMEOUT};
use crate::span::Span;
use crate::version::{check_version_change, Version, VersionChangeError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("spec.provider is chosen at creation: this control plane's members run on {old}, not {new} (create a new control plane to move)")]
    ProviderChange {
        old: &'static str,
        new: &'static str,
    },
    #[error("invalid name {0:?}: use 1 to 40 lowercase letters, digits and '-', starting with a letter and not ending with '-'")]
    Name(String),
    #[error("replicas must be between 1 and {MAX_REPLICAS}, got {0}")]
    ReplicasRange(u32),
    #[error("replicas {0} is even: an even member count tolerates no more failures than {odd} and needs a larger quorum; use {odd} or {next}, or pass --force to insist", odd = .0 - 1, next = .0 + 1)]
    EvenReplicas(u32),
    #[error("rollout.maxSurge must be 0 or 1, got {0}")]
    MaxSurge(u32),
    /// `spec.backup` that cannot be used (the message names the field).
    #[error("{0}")]
    Backup(String),
    #[error("rollout.maxSurge 0 needs at least 3 replicas (removing the only member of 1, or one of 2, loses quorum); use maxSurge 1")]
    SurgeZeroTooSmall,
    #[error("haproxy.runtimeApi must be an absolute path to HAProxy's admin socket, got {0:?}")]
    HaproxySocket(String),
    #[error("haproxy.backend {0:?} is not a backend name: use 1 to 64 letters, digits, '-', '_', '.' or ':'")]
    HaproxyBackend(String),
    #[error("certificates.lifetime {0} is too short: at least {MIN_CERTIFICATE_LIFETIME} (a machine must be able to join and serve before it is due for renewal)")]
    CertificateLifetime(Span),
    #[error("rollout.before.certificatesExpiry {renew} is not shorter than certificates.lifetime {lifetime}: every new machine would be due for replacement at once")]
    CertificateRenewal { renew: Span, lifetime: Span },
    #[error("a control plane cannot switch between TLS and plain HTTP (insecurePlaintext {old} -> {new}): its members could not talk to each other during the rollout; create a new control plane instead")]
    TransportChange { old: bool, new: bool },
    #[error("remediation.unhealthyAfter {0} is too short: at least {MIN_UNHEALTHY_AFTER} (an election or a restart takes seconds, and must not replace a member)")]
    UnhealthyAfter(Span),
    #[error("maintenance.quotaBackendBytes {0} is outside etcd's range: at least {MIN_QUOTA_BACKEND_BYTES} (1 MiB) and at most {MAX_QUOTA_BACKEND_BYTES} (8 GiB, etcd's suggested maximum)")]
    QuotaBackendBytes(u64),
    #[error("remediation.maxRetry {0} is too high: at most {MAX_REMEDIATION_RETRY} (a slot that fails that often needs a person)")]
    MaxRetry(u32),
    #[error("rollout.strategy InPlace needs at least 3 replicas, got {0}: a member restarting in place is down meanwhile, and 1 or 2 would lose quorum with it; use strategy Replace")]
    InPlaceTooSmall(u32),
    #[error("rollout.inPlace.timeout {0} is too short: at least {MIN_IN_PLACE_TIMEOUT} (a member needs seconds to start and catch up, and a shorter deadline rolls back healthy restarts)")]
    InPlaceTimeout(Span),
    #[error(transparent)]
    Version(#[from] VersionChangeError),
}

/// The shortest `remediation.unhealthyAfter` accepted: longer than an election and a
/// process restart, so neither is mistaken for a failure.
pub const MIN_UNHEALTHY_AFTER: Span = Span::from_secs(5);
/// The smallest and largest database quota accepted.
pub const MIN_QUOTA_BACKEND_BYTES: u64 = 1 << 20;
pub const MAX_QUOTA_BACKEND_BYTES: u64 = 8 << 30;
/// The most retries of one slot `remediation.maxRetry` may allow.
pub const MAX_REMEDIATION_RETRY: u32 = 100;

/// The shortest certificate lifetime accepted. Short lifetimes are for tests and
/// demonstrations of renewal; a real control plane wants months.
pub const MIN_CERTIFICATE_LIFETIME: Span = Span::from_secs(60);

/// A control plane name: it becomes part of machine names, directories and etcd's
/// cluster token, so it is kept to a DNS-label-like alphabet.
pub fn validate_name(name: &str) -> Result<(), SpecError> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name.as_bytes()[0].is_ascii_lowercase()
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(SpecError::Name(name.to_string()))
    }
}

/// A spec on its own. `allow_even` is the user's explicit `--force`.
pub fn validate_spec(spec: &ControlPlaneSpec, allow_even: bool) -> Result<(), SpecError> {
    if spec.replicas == 0 || spec.replicas > MAX_REPLICAS {
        return Err(SpecError::ReplicasRange(spec.replicas));
    }
    if spec.replicas.is_multiple_of(2) && !allow_even {
        return Err(SpecError::EvenReplicas(spec.replicas));
    }
    if spec.rollout.max_surge > 1 {
        return Err(SpecError::MaxSurge(spec.rollout.max_surge));
    }
    if spec.rollout.max_surge == 0 && spec.replicas < 3 {
        return Err(SpecError::SurgeZeroTooSmall);
    }
    if spec.rollout.strategy == Strategy::InPlace && spec.replicas < 3 {
        return Err(SpecError::InPlaceTooSmall(spec.replicas));
    }
    if spec.rollout.in_place.timeout < MIN_IN_PLACE_TIMEOUT {
        return Err(SpecError::InPlaceTimeout(spec.rollout.in_place.timeout));
    }
    if let Some(h) = &spec.haproxy {
        validate_haproxy(h)?;
    }
    spec.backup.check().map_err(SpecError::Backup)?;
    let lifetime = spec.certificates.lifetime;
    if lifetime < MIN_CERTIFICATE_LIFETIME {
        return Err(SpecError::CertificateLifetime(lifetime));
    }
    let renew = spec.certificates_renew_before();
    if renew >= lifetime {
        return Err(SpecError::CertificateRenewal { renew, lifetime });
    }
    let r = &spec.remediation;
    if r.unhealthy_after < MIN_UNHEALTHY_AFTER {
        return Err(SpecError::UnhealthyAfter(r.unhealthy_after));
    }
    if r.max_retry > MAX_REMEDIATION_RETRY {
        return Err(SpecError::MaxRetry(r.max_retry));
    }
    if let Some(q) = spec.maintenance.quota_backend_bytes {
        if !(MIN_QUOTA_BACKEND_BYTES..=MAX_QUOTA_BACKEND_BYTES).contains(&q) {
            return Err(SpecError::QuotaBackendBytes(q));
        }
    }
    Ok(())
}

fn validate_haproxy(h: &HaproxySpec) -> Result<(), SpecError> {
    let socket_ok = h.runtime_api.starts_with('/')
        && h.runtime_api.len() < 108 // sun_path of a unix socket address
        && !h.runtime_api.contains(char::is_whitespace);
    if !socket_ok {
        return Err(SpecError::HaproxySocket(h.runtime_api.clone()));
    }
    let backend_ok = !h.backend.is_empty()
        && h.backend.len() <= 64
        && h.backend
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if !backend_ok {
        return Err(SpecError::HaproxyBackend(h.backend.clone()));
    }
    Ok(())
}

/// A change from `old` to `new`, given the lowest version any machine runs now and the
/// cluster version etcd reports (if it could be asked). `allow_downgrade` is the user's
/// confirmation of a move to an older version (never stored: it confirms one change).
pub fn validate_spec_change(
    old: &ControlPlaneSpec,
    new: &ControlPlaneSpec,
    lowest_running: Option<Version>,
    cluster_version: Option<Version>,
    allow_even: bool,
    allow_downgrade: bool,
) -> Result<(), SpecError> {
    validate_spec(new, allow_even)?;
    if new.insecure_plaintext != old.insecure_plaintext {
        return Err(SpecError::TransportChange {
            old: old.insecure_plaintext,
            new: new.insecure_plaintext,
        });
    }
    if new.provider != old.provider {
        return Err(SpecError::ProviderChange {
            old: old.provider.as_str(),
            new: new.provider.as_str(),
        });
    }
    if new.version != old.version {
        let from = lowest_running.unwrap_or(old.version).min(old.version);
        // A downgrade is judged against the spec's version (what members run or are
        // rolling to), so undoing an interrupted upgrade needs the confirmation too.
        // The rules no confirmation lifts come first: their answer is the final one.
        check_version_change(from, cluster_version, new.version, true)?;
        if new.version < old.version && !allow_downgrade {
            return Err(VersionChangeError::Downgrade {
                from: old.version,
                to: new.version,
            }
            .into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RolloutStrategy;

    fn spec(replicas: u32, version: &str, surge: u32) -> ControlPlaneSpec {
        ControlPlaneSpec {
            rollout: RolloutStrategy {
                max_surge: surge,
                ..RolloutStrategy::default()
            },
            ..ControlPlaneSpec::new(replicas, version.parse().unwrap())
        }
    }

    #[test]
    fn the_provider_is_chosen_at_creation() {
        let old = spec(3, "3.5.1", 1);
        let new = ControlPlaneSpec {
            provider: crate::ProviderKind::Hosts,
            ..old.clone()
        };
        let e = validate_spec_change(&old, &new, None, None, false, false).unwrap_err();
        assert!(e.to_string().contains("chosen at creation"), "{e}");
        assert!(validate_spec_change(&new, &new, None, None, false, false).is_ok());
    }

    #[test]
    fn certificate_lifetimes_and_renewal_windows() {
        let mut s = spec(3, "3.5.1", 1);
        assert_eq!(s.certificates_renew_before(), Span::days(73));
        assert!(validate_spec(&s, false).is_ok());
        s.certificates.lifetime = Span::from_secs(59);
        assert!(matches!(
            validate_spec(&s, false),
            Err(SpecError::CertificateLifetime(_))
        ));
        s.certificates.lifetime = Span::from_secs(120);
        assert!(validate_spec(&s, false).is_ok(), "a fifth of 2m is 24s");
        s.rollout.before.certificates_expiry = Some(Span::from_secs(120));
        let e = validate_spec(&s, false).unwrap_err();
        assert!(e.to_string().contains("not shorter than"), "{e}");
        s.rollout.before.certificates_expiry = Some(Span::from_secs(119));
        assert!(validate_spec(&s, false).is_ok());
    }

    #[test]
    fn in_place_needs_three_replicas_and_a_real_deadline() {
        let mut s = spec(3, "3.5.1", 1);
        s.rollout.strategy = Strategy::InPlace;
        assert!(validate_spec(&s, false).is_ok());
        s.replicas = 1;
        let e = validate_spec(&s, false).unwrap_err();
        assert!(matches!(e, SpecError::InPlaceTooSmall(1)), "{e}");
        assert!(e.to_string().contains("use strategy Replace"), "{e}");
        s.replicas = 5;
        s.rollout.in_place.timeout = Span::from_secs(4);
        let e = validate_spec(&s, false).unwrap_err();
        assert!(e.to_string().contains("at least 5s"), "{e}");
        s.rollout.in_place.timeout = Span::from_secs(5);
        assert!(validate_spec(&s, false).is_ok());
        assert_eq!("in-place".parse::<Strategy>(), Ok(Strategy::InPlace));
        assert_eq!("InPlace".parse::<Strategy>(), Ok(Strategy::InPlace));
        assert_eq!("replace".parse::<Strategy>(), Ok(Strategy::Replace));
        assert!("rolling"
            .parse::<Strategy>()
            .unwrap_err()
            .contains("Replace"));
    }

    #[test]
    fn remediation_limits() {
        let mut s = spec(3, "3.5.1", 1);
        s.remediation.unhealthy_after = Span::from_secs(4);
        let e = validate_spec(&s, false).unwrap_err();
        assert!(e.to_string().contains("at least 5s"), "{e}");
        s.remediation.unhealthy_after = Span::from_secs(5);
        assert!(validate_spec(&s, false).is_ok());
        s.remediation.max_retry = 101;
        assert!(matches!(
            validate_spec(&s, false),
            Err(SpecError::MaxRetry(101))
        ));
        s.remediation.max_retry = 0;
        assert!(validate_spec(&s, false).is_ok());
        s.maintenance.quota_backend_bytes = Some(1000);
        assert!(matches!(
            validate_spec(&s, false),
            Err(SpecError::QuotaBackendBytes(1000))
        ));
        s.maintenance.quota_backend_bytes = Some(16 << 20);
        assert!(validate_spec(&s, false).is_ok());
        // The manifest's form: durations with units, a percentage as a number or "40%".
        let parsed: ControlPlaneSpec = serde_json::from_value(serde_json::json!({
            "replicas": 3, "version": "3.5.1",
            "remediation": {"unhealthyAfter": "20s", "maxRetry": 1},
            "maintenance": {"defragWhenFragmentedAbove": 40},
        }))
        .unwrap();
        assert_eq!(parsed.remediation.unhealthy_after, Span::from_secs(20));
        assert_eq!(parsed.remediation.min_healthy_period, Span::from_secs(3600));
        assert_eq!(parsed.maintenance.defrag_when_fragmented_above.0, 40);
        let bad = serde_json::from_value::<ControlPlaneSpec>(serde_json::json!({
            "replicas": 3, "version": "3.5.1",
            "maintenance": {"defragWhenFragmentedAbove": "140%"},
        }));
        assert!(bad.unwrap_err().to_string().contains("not a percentage"));
    }

    #[test]
    fn tls_is_chosen_once() {
        let old = spec(3, "3.5.1", 1);
        let mut new = old.clone();
        new.insecure_plaintext = true;
        let e = validate_spec_change(&old, &new, None, None, false, false).unwrap_err();
        assert!(matches!(e, SpecError::TransportChange { .. }), "{e}");
        assert!(validate_spec_change(&new, &old, None, None, false, false).is_err());
        let mut longer = old.clone();
        longer.certificates.lifetime = Span::days(730);
        assert!(validate_spec_change(&old, &longer, None, None, false, false).is_ok());
    }

    #[test]
    fn names() {
        for ok in ["a", "demo", "prod-eu-1", "x9"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Demo",
            "1abc",
            "a_b",
            "a-",
            "a b",
            "a/b",
            "..",
            &"a".repeat(41),
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn specs() {
        assert!(validate_spec(&spec(3, "3.4.23", 1), false).is_ok());
        assert_eq!(
            validate_spec(&spec(0, "3.4.23", 1), false),
            Err(SpecError::ReplicasRange(0))
        );
        assert_eq!(
            validate_spec(&spec(9, "3.4.23", 1), false),
            Err(SpecError::ReplicasRange(9))
        );
        assert_eq!(
            validate_spec(&spec(4, "3.4.23", 1), false),
            Err(SpecError::EvenReplicas(4))
        );
        assert!(validate_spec(&spec(4, "3.4.23", 1), true).is_ok());
        assert_eq!(
            validate_spec(&spec(3, "3.4.23", 2), false),
            Err(SpecError::MaxSurge(2))
        );
        assert_eq!(
            validate_spec(&spec(1, "3.4.23", 0), false),
            Err(SpecError::SurgeZeroTooSmall)
        );
        let msg = SpecError::EvenReplicas(4).to_string();
        assert!(msg.contains("use 3 or 5"), "{msg}");
    }

    #[test]
    fn downgrades_need_a_confirmation() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        let at = spec(3, "3.5.1", 1);
        let patch_back = spec(3, "3.5.0", 1);
        // The walkthrough's silent downgrade: refused, and the message says how to confirm.
        let e = validate_spec_change(
            &at,
            &patch_back,
            Some(v("3.5.1")),
            Some(v("3.5.0")),
            false,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("--allow-downgrade"), "{e}");
        assert!(validate_spec_change(
            &at,
            &patch_back,
            Some(v("3.5.1")),
            Some(v("3.5.0")),
            false,
            true
        )
        .is_ok());
        // Undoing an interrupted upgrade (one member still at 3.4.23) is a downgrade too.
        let back = spec(3, "3.4.23", 1);
        assert!(matches!(
            validate_spec_change(
                &at,
                &back,
                Some(v("3.4.23")),
                Some(v("3.4.0")),
                false,
                false
            ),
            Err(SpecError::Version(VersionChangeError::Downgrade { .. }))
        ));
        assert!(
            validate_spec_change(&at, &back, Some(v("3.4.23")), Some(v("3.4.0")), false, true)
                .is_ok()
        );
    }

    #[test]
    fn changes() {
        let old = spec(3, "3.4.23", 1);
        let v = |s: &str| s.parse::<Version>().unwrap();
        assert!(validate_spec_change(
            &old,
            &spec(3, "3.5.1", 1),
            Some(v("3.4.23")),
            Some(v("3.4.0")),
            false,
            false
        )
        .is_ok());
        assert!(matches!(
            validate_spec_change(
                &old,
                &spec(3, "3.6.0", 1),
                Some(v("3.4.23")),
                None,
                false,
                false
            ),
            Err(SpecError::Version(VersionChangeError::SkipsMinor { .. }))
        ));
        let new = spec(3, "3.5.1", 1);
        assert!(matches!(
            validate_spec_change(
                &new,
                &spec(3, "3.4.23", 1),
                Some(v("3.5.1")),
                Some(v("3.5.0")),
                false,
                true
            ),
            Err(SpecError::Version(
                VersionChangeError::BelowClusterVersion { .. }
            ))
        ));
        // Changing only replicas never trips the version rules.
        assert!(
            validate_spec_change(&old, &spec(5, "3.4.23", 1), None, None, false, false).is_ok()
        );
    }
}
