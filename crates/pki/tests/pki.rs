//! Real crypto, checked by an independent parser (x509-parser with signature
//! verification) and, where it is installed, by the `openssl` binary.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use quorum_pki::{
    create_private_dir, format_rfc3339, format_unix_ms, format_unix_s, not_after_unix_s,
    write_private, Ca, PkiError, DEFAULT_CA_LIFETIME_S,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;

/// 2026-06-01T00:00:00Z: a fixed "now", the crate reads no clock.
const NOW_UNIX_S: i64 = 1_780_272_000;
const DAY_S: i64 = 86_400;

fn der(pem: &str) -> Vec<u8> {
    let (_, p) = parse_x509_pem(pem.as_bytes()).unwrap();
    assert_eq!(p.label, "CERTIFICATE");
    p.contents
}

fn parse(der: &[u8]) -> X509Certificate<'_> {
    let (rest, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    assert!(rest.is_empty());
    cert
}

fn cn(cert: &X509Certificate<'_>) -> String {
    cert.subject()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// Issuer = CA subject, signature verifies with the CA's key, not a CA, serial of 16
/// bytes, validity as requested.
fn check_leaf(leaf: &X509Certificate<'_>, ca: &X509Certificate<'_>, not_after_unix_s: i64) {
    assert_eq!(leaf.issuer().as_raw(), ca.subject().as_raw());
    leaf.verify_signature(Some(ca.public_key())).unwrap();
    assert!(!leaf.is_ca());
    assert_eq!(leaf.raw_serial().len(), 16);
    assert_eq!(leaf.validity().not_before.timestamp(), NOW_UNIX_S - 3_600);
    assert_eq!(leaf.validity().not_after.timestamp(), not_after_unix_s);
}

fn new_ca() -> Ca {
    Ca::generate("prod", NOW_UNIX_S, DEFAULT_CA_LIFETIME_S).unwrap()
}

#[test]
fn ca_is_self_signed_ca_with_requested_validity() {
    let ca = new_ca();
    let ca_der = der(ca.cert_pem());
    let cert = parse(&ca_der);
    assert!(cert.is_ca());
    assert_eq!(cn(&cert), "quorum prod CA");
    assert_eq!(cert.issuer().as_raw(), cert.subject().as_raw());
    cert.verify_signature(None).unwrap();
    assert!(cert.key_usage().unwrap().unwrap().value.key_cert_sign());
    assert_eq!(cert.validity().not_before.timestamp(), NOW_UNIX_S - 3_600);
    let expected_not_after = NOW_UNIX_S + DEFAULT_CA_LIFETIME_S as i64;
    assert_eq!(cert.validity().not_after.timestamp(), expected_not_after);
    assert_eq!(ca.not_after_unix_s(), expected_not_after);
    assert_eq!(not_after_unix_s(ca.cert_pem()).unwrap(), expected_not_after);
    assert!(ca.key_pem().contains("PRIVATE KEY"));
}

#[test]
fn machine_certs_are_signed_for_the_address_and_name_with_both_ekus() {
    let ca = new_ca();
    let ca_der = der(ca.cert_pem());
    let ca_cert = parse(&ca_der);
    let address: IpAddr = "10.0.3.7".parse().unwrap();
    let not_after = NOW_UNIX_S + 90 * DAY_S;
    let certs = ca
        .issue_machine("prod-3.etcd.internal", address, NOW_UNIX_S, not_after)
        .unwrap();
    assert_eq!(certs.not_after_unix_s, not_after);
    assert_ne!(certs.server, certs.peer);
    assert_ne!(certs.server.key_pem, certs.peer.key_pem);

    for identity in [&certs.server, &certs.peer] {
        let leaf_der = der(&identity.cert_pem);
        let leaf = parse(&leaf_der);
        check_leaf(&leaf, &ca_cert, not_after);
        assert_eq!(cn(&leaf), "prod-3.etcd.internal");

        let san = leaf.subject_alternative_name().unwrap().unwrap().value;
        assert_eq!(
            san.general_names,
            vec![
                GeneralName::IPAddress(&[10, 0, 3, 7]),
                GeneralName::DNSName("prod-3.etcd.internal"),
            ]
        );
        let eku = leaf.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && eku.client_auth);
        assert!(!eku.any && !eku.code_signing && !eku.email_protection);
        assert!(eku.other.is_empty());
        let ku = leaf.key_usage().unwrap().unwrap().value;
        assert!(ku.digital_signature() && ku.key_encipherment());
        assert!(!ku.key_cert_sign());
        assert_eq!(not_after_unix_s(&identity.cert_pem).unwrap(), not_after);
        assert!(identity.key_pem.contains("PRIVATE KEY"));
    }
    let server_der = der(&certs.server.cert_pem);
    let peer_der = der(&certs.peer.cert_pem);
    assert_ne!(
        parse(&server_der).raw_serial(),
        parse(&peer_der).raw_serial()
    );
}

#[test]
fn machine_certs_take_ipv6_addresses() {
    let ca = new_ca();
    let address: IpAddr = "fd00::17".parse().unwrap();
    let certs = ca
        .issue_machine("m1", address, NOW_UNIX_S, NOW_UNIX_S + DAY_S)
        .unwrap();
    let leaf_der = der(&certs.server.cert_pem);
    let leaf = parse(&leaf_der);
    let san = leaf.subject_alternative_name().unwrap().unwrap().value;
    let IpAddr::V6(v6) = address else {
        unreachable!()
    };
    assert_eq!(
        san.general_names,
        vec![
            GeneralName::IPAddress(&v6.octets()),
            GeneralName::DNSName("m1"),
        ]
    );
}

#[test]
fn client_cert_is_client_auth_only() {
    let ca = new_ca();
    let ca_der = der(ca.cert_pem());
    let ca_cert = parse(&ca_der);
    let not_after = NOW_UNIX_S + 30 * DAY_S;
    let id = ca
        .issue_client("quorum-controller", NOW_UNIX_S, not_after)
        .unwrap();
    let leaf_der = der(&id.cert_pem);
    let leaf = parse(&leaf_der);
    check_leaf(&leaf, &ca_cert, not_after);
    assert_eq!(cn(&leaf), "quorum-controller");
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth);
    assert!(!eku.server_auth && !eku.any);
    assert!(leaf.subject_alternative_name().unwrap().is_none());
}

#[test]
fn reloaded_ca_issues_certs_that_verify_against_the_original() {
    let ca = new_ca();
    let reloaded = Ca::from_pem("prod", ca.cert_pem(), ca.key_pem()).unwrap();
    assert_eq!(reloaded.cert_pem(), ca.cert_pem());
    assert_eq!(reloaded.key_pem(), ca.key_pem());
    assert_eq!(reloaded.not_after_unix_s(), ca.not_after_unix_s());

    let ca_der = der(ca.cert_pem());
    let ca_cert = parse(&ca_der);
    let not_after = NOW_UNIX_S + DAY_S;
    let certs = reloaded
        .issue_machine("m2", "192.0.2.4".parse().unwrap(), NOW_UNIX_S, not_after)
        .unwrap();
    let leaf_der = der(&certs.peer.cert_pem);
    check_leaf(&parse(&leaf_der), &ca_cert, not_after);
    let id = reloaded
        .issue_client("alice", NOW_UNIX_S, not_after)
        .unwrap();
    let leaf_der = der(&id.cert_pem);
    check_leaf(&parse(&leaf_der), &ca_cert, not_after);
}

#[test]
fn from_pem_rejects_mismatched_key_garbage_and_non_ca() {
    let a = new_ca();
    let b = Ca::generate("other", NOW_UNIX_S, DEFAULT_CA_LIFETIME_S).unwrap();

    let err = Ca::from_pem("prod", a.cert_pem(), b.key_pem()).unwrap_err();
    assert!(matches!(err, PkiError::CaKeyMismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("\"prod\""), "{err}");

    let err = Ca::from_pem("prod", "not a certificate", a.key_pem()).unwrap_err();
    assert!(matches!(err, PkiError::CaParse { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "the stored certificate authority of control plane \"prod\" does not parse"
        ),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");

    let err = Ca::from_pem("prod", a.cert_pem(), "garbage").unwrap_err();
    assert!(matches!(err, PkiError::CaParse { .. }), "{err:?}");
    assert!(err.to_string().contains("\"prod\""));

    // The key where the certificate belongs: refused without echoing the key.
    let err = Ca::from_pem("prod", a.key_pem(), a.key_pem()).unwrap_err();
    assert!(matches!(err, PkiError::CaParse { .. }), "{err:?}");
    assert!(!err
        .to_string()
        .contains(a.key_pem().lines().nth(1).unwrap()));

    // A truncated certificate.
    let cut = &a.cert_pem()[..a.cert_pem().len() / 2];
    assert!(Ca::from_pem("prod", cut, a.key_pem()).is_err());

    let leaf = a
        .issue_client("alice", NOW_UNIX_S, NOW_UNIX_S + DAY_S)
        .unwrap();
    let err = Ca::from_pem("prod", &leaf.cert_pem, &leaf.key_pem).unwrap_err();
    assert!(matches!(err, PkiError::NotCa { .. }), "{err:?}");
    assert!(err.to_string().contains("\"prod\""));
}

#[test]
fn debug_output_never_contains_a_private_key() {
    let ca = new_ca();
    let certs = ca
        .issue_machine(
            "m1",
            "10.0.0.1".parse().unwrap(),
            NOW_UNIX_S,
            NOW_UNIX_S + DAY_S,
        )
        .unwrap();
    let client = ca
        .issue_client("bob", NOW_UNIX_S, NOW_UNIX_S + DAY_S)
        .unwrap();
    for text in [
        format!("{ca:?}"),
        format!("{ca:#?}"),
        format!("{certs:?}"),
        format!("{certs:#?}"),
        format!("{client:?}"),
    ] {
        assert!(!text.contains("PRIVATE KEY"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }
}

#[test]
fn validity_outside_now_and_ca_expiry_is_an_error() {
    let ca = Ca::generate("prod", NOW_UNIX_S, 365 * DAY_S as u64).unwrap();
    let address: IpAddr = "10.0.0.1".parse().unwrap();

    let err = ca
        .issue_machine("m1", address, NOW_UNIX_S, ca.not_after_unix_s() + 1)
        .unwrap_err();
    assert!(matches!(err, PkiError::NotAfterBeyondCa { .. }), "{err:?}");
    assert!(ca
        .issue_machine("m1", address, NOW_UNIX_S, ca.not_after_unix_s())
        .is_ok());

    for not_after in [NOW_UNIX_S, NOW_UNIX_S - 1] {
        let err = ca
            .issue_machine("m1", address, NOW_UNIX_S, not_after)
            .unwrap_err();
        assert!(
            matches!(err, PkiError::NotAfterNotInFuture { .. }),
            "{err:?}"
        );
        let err = ca.issue_client("bob", NOW_UNIX_S, not_after).unwrap_err();
        assert!(
            matches!(err, PkiError::NotAfterNotInFuture { .. }),
            "{err:?}"
        );
    }
    let err = ca
        .issue_client("bob", NOW_UNIX_S, ca.not_after_unix_s() + 1)
        .unwrap_err();
    assert!(matches!(err, PkiError::NotAfterBeyondCa { .. }), "{err:?}");
}

#[test]
fn bad_names_and_lifetimes_are_errors() {
    let ca = new_ca();
    let address: IpAddr = "10.0.0.1".parse().unwrap();
    for name in ["", "-a", "a-", "a..b", "a b", "é", &"a".repeat(64)] {
        let err = ca
            .issue_machine(name, address, NOW_UNIX_S, NOW_UNIX_S + DAY_S)
            .unwrap_err();
        assert!(
            matches!(err, PkiError::InvalidDnsName(_)),
            "{name:?}: {err:?}"
        );
    }
    for cn in ["", "a\nb", &"a".repeat(65)] {
        let err = ca
            .issue_client(cn, NOW_UNIX_S, NOW_UNIX_S + DAY_S)
            .unwrap_err();
        assert!(
            matches!(err, PkiError::InvalidCommonName(_)),
            "{cn:?}: {err:?}"
        );
    }
    assert!(matches!(
        Ca::generate("prod", NOW_UNIX_S, 0).unwrap_err(),
        PkiError::Lifetime { .. }
    ));
    assert!(matches!(
        Ca::generate("prod", NOW_UNIX_S, u64::MAX).unwrap_err(),
        PkiError::Lifetime { .. }
    ));
    assert!(matches!(
        not_after_unix_s("garbage").unwrap_err(),
        PkiError::CertParse { .. }
    ));
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn write_private_creates_0600_and_fixes_a_wider_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.key");
    write_private(&path, b"secret one").unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(std::fs::read(&path).unwrap(), b"secret one");

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(mode(&path), 0o644);
    write_private(&path, b"two").unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(std::fs::read(&path).unwrap(), b"two");

    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("ca.key")]);

    // A missing parent directory is an error, not a silent mkdir.
    assert!(write_private(&dir.path().join("missing/ca.key"), b"x").is_err());
}

#[test]
fn create_private_dir_gives_0700() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/pki");
    create_private_dir(&nested).unwrap();
    assert!(nested.is_dir());
    assert_eq!(mode(&nested), 0o700);

    let existing = dir.path().join("existing");
    std::fs::create_dir(&existing).unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o755)).unwrap();
    create_private_dir(&existing).unwrap();
    assert_eq!(mode(&existing), 0o700);

    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(create_private_dir(&file).is_err());
}

#[test]
fn openssl_verifies_the_chain() {
    if Command::new("openssl").arg("version").output().is_err() {
        println!("skipped: openssl is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Through a reloaded CA, so openssl checks the path the controller really uses.
    let original = new_ca();
    let ca = Ca::from_pem("prod", original.cert_pem(), original.key_pem()).unwrap();
    let certs = ca
        .issue_machine(
            "prod-1",
            "10.0.0.1".parse().unwrap(),
            NOW_UNIX_S,
            NOW_UNIX_S + 30 * DAY_S,
        )
        .unwrap();
    let client = ca
        .issue_client("quorum-cli", NOW_UNIX_S, NOW_UNIX_S + 30 * DAY_S)
        .unwrap();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, original.cert_pem()).unwrap();
    let at = (NOW_UNIX_S + DAY_S).to_string();
    let cases = [
        ("server.pem", &certs.server.cert_pem, "sslserver"),
        ("server-as-client.pem", &certs.server.cert_pem, "sslclient"),
        ("peer.pem", &certs.peer.cert_pem, "sslserver"),
        ("peer-as-client.pem", &certs.peer.cert_pem, "sslclient"),
        ("client.pem", &client.cert_pem, "sslclient"),
    ];
    for (file, pem, purpose) in cases {
        let path = dir.path().join(file);
        std::fs::write(&path, pem).unwrap();
        let out = Command::new("openssl")
            .args([
                "verify",
                "-x509_strict",
                "-attime",
                &at,
                "-purpose",
                purpose,
                "-CAfile",
            ])
            .arg(&ca_path)
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file} ({purpose}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // And the negative: a client certificate is not a server certificate.
    let out = Command::new("openssl")
        .args(["verify", "-attime", &at, "-purpose", "sslserver", "-CAfile"])
        .arg(&ca_path)
        .arg(dir.path().join("client.pem"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    // Nor does anything verify after it expired.
    let late = (NOW_UNIX_S + 31 * DAY_S).to_string();
    let out = Command::new("openssl")
        .args(["verify", "-attime", &late, "-CAfile"])
        .arg(&ca_path)
        .arg(dir.path().join("server.pem"))
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn moments_print_in_utc() {
    // (ms since the epoch, printed)
    let rows: &[(i64, &str)] = &[
        (0, "1970-01-01 00:00:00.000"),
        (-5, "1969-12-31 23:59:59.995"),
        (86_399_999, "1970-01-01 23:59:59.999"),
        (951_782_400_000, "2000-02-29 00:00:00.000"),
        (1_709_164_800_000, "2024-02-29 00:00:00.000"),
        (4_107_542_400_000, "2100-03-01 00:00:00.000"),
        (1_796_278_292_466, "2026-12-03 06:11:32.466"),
        (1_798_761_599_000, "2026-12-31 23:59:59.000"),
    ];
    for (ms, want) in rows {
        assert_eq!(format_unix_ms(*ms), *want, "{ms}");
    }
    assert_eq!(format_unix_s(NOW_UNIX_S), "2026-06-01 00:00:00 UTC");
    assert_eq!(format_rfc3339(NOW_UNIX_S + 3_723), "2026-06-01T01:02:03Z");
    assert!(format_unix_ms(i64::MAX).ends_with("ms after the Unix epoch"));
}

/// A rotation's new CA is told apart by name; what each issues names its issuer.
#[test]
fn a_later_generation_has_a_name_of_its_own_and_issues_under_it() {
    let now = 1_800_000_000;
    let first = Ca::generate("prod", now, 86_400 * 10).unwrap();
    let second = Ca::generate_generation("prod", 1, now, 86_400 * 10).unwrap();
    assert_eq!(first.common_name(), "quorum prod CA");
    assert_eq!(second.common_name(), "quorum prod CA 2");
    let leaf = second
        .issue_machine("prod-1", "127.0.0.9".parse().unwrap(), now, now + 3600)
        .unwrap();
    let (subject, issuer) = quorum_pki::names(&leaf.server.cert_pem).unwrap();
    assert_eq!(
        (subject.as_str(), issuer.as_str()),
        ("prod-1", "quorum prod CA 2")
    );
    assert!(quorum_pki::names("not a certificate").is_err());
}
