//! quorum-pki: the certificate authority of one etcd control plane.
//!
//! Every control plane gets its own CA. The CA signs, for each machine, a server
//! certificate (etcd's client port) and a peer certificate (etcd's peer port), and
//! client certificates for the controller, the CLI and users. Keys are ECDSA P-256:
//! they are generated in microseconds, which matters when a rollout replaces many
//! machines, and every TLS stack etcd talks to accepts them.
//!
//! Architecture invariants:
//! - The crate reads no clock: every function that depends on time takes `now_unix_s`,
//!   so the controller decides what "now" is and tests are deterministic.
//! - Private keys never reach a `Debug` or `Display` output: `Ca`, `Identity` and
//!   `MachineCerts` print `<redacted>` in their place, and no error carries key text.
//! - Private keys reach the disk only through [`write_private`] (mode 0600, atomic
//!   rename) inside directories made by [`create_private_dir`] (mode 0700).

pub mod agents;

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber, PKCS_ECDSA_P256_SHA256,
};
use time::OffsetDateTime;

/// How long a new CA lives when the caller has no reason to choose: ten years, so that
/// a control plane never has to rotate its root during its ordinary life.
pub const DEFAULT_CA_LIFETIME_S: u64 = 10 * 365 * 86_400;

/// How far back `notBefore` is put, so that a machine whose clock is a little behind
/// the controller's does not reject a certificate that was just issued.
pub const CLOCK_SKEW_S: i64 = 3_600;

/// The longest common name X.509 allows (RFC 5280, ub-common-name).
const MAX_COMMON_NAME_LEN: usize = 64;

/// What went wrong issuing, loading or reading certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// The stored CA certificate or key is not valid PEM/DER, or not a key rcgen can use.
    #[error("the stored certificate authority of control plane {control_plane:?} does not parse: {reason}")]
    CaParse {
        control_plane: String,
        reason: String,
    },
    /// The stored key is a valid key, but not the one the stored certificate was made for.
    #[error("the stored certificate authority of control plane {control_plane:?} does not match its key: the private key is not the certificate's")]
    CaKeyMismatch { control_plane: String },
    /// The stored certificate is not allowed to sign certificates.
    #[error("the stored certificate authority of control plane {control_plane:?} is not a CA certificate: {reason}")]
    NotCa {
        control_plane: String,
        reason: String,
    },
    /// The CA lifetime is zero or reaches past what a certificate can carry.
    #[error("a certificate authority lifetime of {lifetime_s} s starting at {now_unix_s} (Unix s) is out of range")]
    Lifetime { now_unix_s: i64, lifetime_s: u64 },
    /// A time cannot be written into a certificate (before year 1 or after year 9999).
    #[error("the time {unix_s} (Unix s) is outside the range a certificate can carry")]
    TimeRange { unix_s: i64 },
    /// The requested expiry is not in the future.
    #[error("a certificate for {subject:?} would expire at {not_after_unix_s} (Unix s), which is not after now ({now_unix_s})")]
    NotAfterNotInFuture {
        subject: String,
        now_unix_s: i64,
        not_after_unix_s: i64,
    },
    /// The requested expiry outlives the CA: the chain would be invalid from the CA's
    /// expiry on, so the caller must rotate the CA first or ask for less.
    #[error("a certificate for {subject:?} would expire at {not_after_unix_s} (Unix s), after the certificate authority of control plane {control_plane:?} ({ca_not_after_unix_s})")]
    NotAfterBeyondCa {
        subject: String,
        control_plane: String,
        not_after_unix_s: i64,
        ca_not_after_unix_s: i64,
    },
    /// The machine name cannot be a DNS subject alternative name.
    #[error("the machine name {0:?} is not a DNS name: use labels of 1 to 63 letters, digits or '-' (not at either end), separated by '.', 253 characters at most")]
    InvalidDnsName(String),
    /// The client common name is empty, too long or has control characters.
    #[error("the common name {0:?} is not usable: use 1 to 64 printable characters")]
    InvalidCommonName(String),
    /// Key generation or signing failed inside rcgen/ring.
    #[error("control plane {control_plane:?}: {what} failed: {source}")]
    Crypto {
        control_plane: String,
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    /// A certificate signing request (an agent's) does not parse, is not signed by its
    /// own key, or asks for a key type quorum does not issue for.
    #[error("the certificate request does not parse or its signature is wrong: {reason}")]
    Csr { reason: String },
    /// A private key given to [`agents::certificate_request`] does not parse.
    #[error("the private key does not parse: {reason}")]
    KeyParse { reason: String },
    /// A certificate given to [`not_after_unix_s`] does not parse.
    #[error("the certificate does not parse: {reason}")]
    CertParse { reason: String },
}

/// A PEM certificate and its PEM (PKCS#8) private key.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for Identity {
    /// Prints the certificate and hides the key, so that logging an identity never
    /// leaks a credential.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What a machine needs: a server certificate for etcd's client port and a peer
/// certificate for its peer port, both signed by the control plane's CA.
#[derive(Clone, Debug)]
pub struct MachineCerts {
    pub server: Identity,
    pub peer: Identity,
    /// The `notAfter` both certificates carry, so the controller can plan the renewal.
    pub not_after_unix_s: i64,
}

/// The certificate authority of one control plane.
pub struct Ca {
    control_plane: String,
    cert_pem: String,
    key_pem: String,
    not_after_unix_s: i64,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for Ca {
    /// Hides the key: a CA printed into a log must not hand out the control plane.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ca")
            .field("control_plane", &self.control_plane)
            .field("not_after_unix_s", &self.not_after_unix_s)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl Ca {
    /// A new self-signed CA for control plane `control_plane` (CN "quorum <control_plane>
    /// CA"), valid from `now_unix_s` - 1 h (clock skew between machines) for `lifetime_s`
    /// after `now_unix_s`. Path length 0: it signs only leaf certificates.
    pub fn generate(control_plane: &str, now_unix_s: i64, lifetime_s: u64) -> Result<Ca, PkiError> {
        Ca::generate_generation(control_plane, 0, now_unix_s, lifetime_s)
    }

    /// A new CA of generation `generation` (a CA rotation's new CA): as `generate`, its
    /// common name "quorum <control_plane> CA <generation + 1>" after the first, so
    /// that the two CAs of a rotation are told apart by name, not only by key.
    pub fn generate_generation(
        control_plane: &str,
        generation: u32,
        now_unix_s: i64,
        lifetime_s: u64,
    ) -> Result<Ca, PkiError> {
        let lifetime_err = || PkiError::Lifetime {
            now_unix_s,
            lifetime_s,
        };
        if lifetime_s == 0 {
            return Err(lifetime_err());
        }
        let not_after_unix_s = i64::try_from(lifetime_s)
            .ok()
            .and_then(|l| now_unix_s.checked_add(l))
            .ok_or_else(lifetime_err)?;
        let not_after = to_time(not_after_unix_s).map_err(|_| lifetime_err())?;
        let not_before = to_time(now_unix_s.saturating_sub(CLOCK_SKEW_S))?;

        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(&match generation {
            0 => format!("quorum {control_plane} CA"),
            g => format!("quorum {control_plane} CA {}", u64::from(g) + 1),
        });
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = not_before;
        params.not_after = not_after;
        params.serial_number = Some(random_serial());

        let key = generate_key(control_plane)?;
        let cert = params
            .self_signed(&key)
            .map_err(|source| PkiError::Crypto {
                control_plane: control_plane.to_string(),
                what: "self-signing the certificate authority",
                source,
            })?;
        let key_pem = key.serialize_pem();
        Ok(Ca {
            control_plane: control_plane.to_string(),
            cert_pem: cert.pem(),
            key_pem,
            not_after_unix_s,
            issuer: Issuer::new(params, key),
        })
    }

    /// Reloads a stored CA. Checks that the key is the certificate's and that the
    /// certificate is a CA (basicConstraints CA:TRUE, keyCertSign if key usage is
    /// present), because signing with the wrong key or a leaf certificate would hand
    /// out certificates that nothing verifies; better to fail at load with the control
    /// plane's name than at a machine's first TLS handshake.
    pub fn from_pem(control_plane: &str, cert_pem: &str, key_pem: &str) -> Result<Ca, PkiError> {
        let parse_err = |reason: String| PkiError::CaParse {
            control_plane: control_plane.to_string(),
            reason,
        };
        let der = pem_to_der(cert_pem).map_err(parse_err)?;
        let (_, x509) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| parse_err(format!("certificate: {e}")))?;
        // rcgen's error for a bad key says nothing about the key's content, so it is
        // safe to show.
        let key = KeyPair::from_pem(key_pem).map_err(|e| parse_err(format!("private key: {e}")))?;

        if x509.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(PkiError::CaKeyMismatch {
                control_plane: control_plane.to_string(),
            });
        }
        let not_ca = |reason: &str| PkiError::NotCa {
            control_plane: control_plane.to_string(),
            reason: reason.to_string(),
        };
        let constraints = x509
            .basic_constraints()
            .map_err(|e| parse_err(format!("basicConstraints: {e}")))?;
        match constraints {
            Some(bc) if bc.value.ca => {}
            _ => return Err(not_ca("basicConstraints CA:TRUE is missing")),
        }
        let key_usage = x509
            .key_usage()
            .map_err(|e| parse_err(format!("keyUsage: {e}")))?;
        if let Some(ku) = key_usage {
            if !ku.value.key_cert_sign() {
                return Err(not_ca("keyUsage lacks keyCertSign"));
            }
        }
        let not_after_unix_s = x509.validity().not_after.timestamp();

        let issuer = Issuer::from_ca_cert_der(&der.as_slice().into(), key)
            .map_err(|e| parse_err(format!("certificate: {e}")))?;
        Ok(Ca {
            control_plane: control_plane.to_string(),
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            not_after_unix_s,
            issuer,
        })
    }

    /// The CA's subject common name (which generation it is, for people).
    pub fn common_name(&self) -> String {
        names(&self.cert_pem)
            .map(|(subject, _)| subject)
            .unwrap_or_default()
    }

    /// The CA certificate, PEM: what machines and clients trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key, PEM (PKCS#8), for storing it. Callers must never print it.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The CA's `notAfter`: no certificate it issues may outlive it.
    pub fn not_after_unix_s(&self) -> i64 {
        self.not_after_unix_s
    }

    /// The control plane this CA belongs to.
    pub fn control_plane(&self) -> &str {
        &self.control_plane
    }

    /// Server and peer certificates for one machine. SANs are exactly the machine's IP
    /// address and its DNS name `name`. Both certificates carry the serverAuth and
    /// clientAuth extended key usages, because etcd's grpc-gateway and its peers present
    /// the same certificate when they dial as clients. Key usages digitalSignature and
    /// keyEncipherment. Valid from `now_unix_s` - 1 h to `not_after_unix_s`, which must
    /// be after `now_unix_s` and not after the CA's own expiry (an error, not a clamp,
    /// so that the caller knows the CA needs rotating).
    pub fn issue_machine(
        &self,
        name: &str,
        address: IpAddr,
        now_unix_s: i64,
        not_after_unix_s: i64,
    ) -> Result<MachineCerts, PkiError> {
        self.issue_machine_from(name, address, &[], now_unix_s, not_after_unix_s)
    }

    /// [`Ca::issue_machine`] for a machine whose outgoing connections come from other
    /// addresses than its own (`sources`, added as IP SANs of the peer certificate):
    /// etcd checks that a peer connects from an address its certificate names, and
    /// machines sharing one host (quorum's local provider, on loopback) all connect
    /// from 127.0.0.1.
    pub fn issue_machine_from(
        &self,
        name: &str,
        address: IpAddr,
        sources: &[IpAddr],
        now_unix_s: i64,
        not_after_unix_s: i64,
    ) -> Result<MachineCerts, PkiError> {
        validate_dns_name(name)?;
        let dns: rcgen::string::Ia5String = name
            .try_into()
            .map_err(|_| PkiError::InvalidDnsName(name.to_string()))?;
        let mut params = self.leaf_params(name, now_unix_s, not_after_unix_s)?;
        params.subject_alt_names = vec![SanType::IpAddress(address), SanType::DnsName(dns.clone())];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server = self.sign(&mut params)?;
        let extra = sources
            .iter()
            .filter(|a| **a != address)
            .map(|a| SanType::IpAddress(*a));
        params.subject_alt_names = [SanType::IpAddress(address), SanType::DnsName(dns)]
            .into_iter()
            .chain(extra)
            .collect();
        let peer = self.sign(&mut params)?;
        Ok(MachineCerts {
            server,
            peer,
            not_after_unix_s,
        })
    }

    /// A client certificate (clientAuth only, no SANs) with CN = `common_name`: for the
    /// controller, the CLI and users (`quorum credentials`). Same validity rules as
    /// [`Ca::issue_machine`].
    pub fn issue_client(
        &self,
        common_name: &str,
        now_unix_s: i64,
        not_after_unix_s: i64,
    ) -> Result<Identity, PkiError> {
        let ok = !common_name.is_empty()
            && common_name.chars().count() <= MAX_COMMON_NAME_LEN
            && !common_name.chars().any(char::is_control);
        if !ok {
            return Err(PkiError::InvalidCommonName(common_name.to_string()));
        }
        let mut params = self.leaf_params(common_name, now_unix_s, not_after_unix_s)?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(&mut params)
    }

    /// Parameters common to every leaf: subject CN, validity (checked against now and
    /// the CA), CA:FALSE, and an authority key identifier so verifiers can find the CA.
    fn leaf_params(
        &self,
        subject: &str,
        now_unix_s: i64,
        not_after_unix_s: i64,
    ) -> Result<CertificateParams, PkiError> {
        if not_after_unix_s <= now_unix_s {
            return Err(PkiError::NotAfterNotInFuture {
                subject: subject.to_string(),
                now_unix_s,
                not_after_unix_s,
            });
        }
        if not_after_unix_s > self.not_after_unix_s {
            return Err(PkiError::NotAfterBeyondCa {
                subject: subject.to_string(),
                control_plane: self.control_plane.clone(),
                not_after_unix_s,
                ca_not_after_unix_s: self.not_after_unix_s,
            });
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(subject);
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        params.not_before = to_time(now_unix_s.saturating_sub(CLOCK_SKEW_S))?;
        params.not_after = to_time(not_after_unix_s)?;
        Ok(params)
    }

    /// Signs `params` for a fresh key with a fresh random serial.
    fn sign(&self, params: &mut CertificateParams) -> Result<Identity, PkiError> {
        params.serial_number = Some(random_serial());
        let key = generate_key(&self.control_plane)?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|source| PkiError::Crypto {
                control_plane: self.control_plane.clone(),
                what: "signing a certificate",
                source,
            })?;
        Ok(Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A moment as people read it, in UTC: `2027-12-02 20:15:00 UTC` (or the seconds, for a
/// moment `time` cannot represent).
pub fn format_unix_s(unix_s: i64) -> String {
    match OffsetDateTime::from_unix_timestamp(unix_s) {
        Ok(t) => format!("{} UTC", date_time(t)),
        Err(_) => format!("{unix_s} s after the Unix epoch"),
    }
}

/// A moment as machines read it: RFC 3339 in UTC, `2027-12-02T20:15:00Z` (for JSON and
/// YAML output; or the seconds, for a moment `time` cannot represent).
pub fn format_rfc3339(unix_s: i64) -> String {
    match OffsetDateTime::from_unix_timestamp(unix_s) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("{unix_s} s after the Unix epoch"),
    }
}

/// A moment to the millisecond, in UTC, for columns headed "(UTC)":
/// `2026-12-03 06:11:32.466` (or the milliseconds, for a moment `time` cannot represent).
pub fn format_unix_ms(unix_ms: i64) -> String {
    let (s, ms) = (unix_ms.div_euclid(1000), unix_ms.rem_euclid(1000));
    match OffsetDateTime::from_unix_timestamp(s) {
        Ok(t) => format!("{}.{ms:03}", date_time(t)),
        Err(_) => format!("{unix_ms} ms after the Unix epoch"),
    }
}

/// `2026-12-03 06:11:32`.
fn date_time(t: OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The `notAfter` of a PEM certificate, in Unix seconds: to report and check the expiry
/// of certificate files on disk.
pub fn not_after_unix_s(cert_pem: &str) -> Result<i64, PkiError> {
    let der = pem_to_der(cert_pem).map_err(|reason| PkiError::CertParse { reason })?;
    let (_, x509) = x509_parser::parse_x509_certificate(&der).map_err(|e| PkiError::CertParse {
        reason: e.to_string(),
    })?;
    Ok(x509.validity().not_after.timestamp())
}

/// The subject's and the issuer's common names of the first certificate in `cert_pem`
/// (which CA issued a member's certificate, for the tests and for people).
pub fn names(cert_pem: &str) -> Result<(String, String), PkiError> {
    let der = pem_to_der(cert_pem).map_err(|reason| PkiError::CertParse { reason })?;
    let (_, x509) = x509_parser::parse_x509_certificate(&der).map_err(|e| PkiError::CertParse {
        reason: e.to_string(),
    })?;
    let cn = |n: &x509_parser::x509::X509Name<'_>| {
        n.iter_common_name()
            .next()
            .and_then(|c| c.as_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    Ok((cn(x509.subject()), cn(x509.issuer())))
}

/// Writes `contents` to `path` with mode 0600, through a temporary file in the same
/// directory that is renamed over `path`, so that a reader never sees half a key and the
/// key is never readable by others, not even for a moment. The temporary file is created
/// exclusively (no symlink is followed) with mode 0600 and then set to exactly 0600,
/// since the umask may have taken bits away. A pre-existing `path` with wider
/// permissions is replaced by the 0600 file. The parent directory must exist.
pub fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    let file_name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no file name", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(
        ".tmp.{}.{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let tmp = dir.join(tmp_name);

    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        // Make the rename itself durable.
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        // Best effort: the error that matters is the one returned.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `dir` (and its missing parents, with default permissions) and sets `dir`
/// itself to 0700, also when it already existed: it holds private keys.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() {
            fs::create_dir_all(parent)?;
        }
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(e) => return Err(e),
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// A new ECDSA P-256 key.
fn generate_key(control_plane: &str) -> Result<KeyPair, PkiError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|source| PkiError::Crypto {
        control_plane: control_plane.to_string(),
        what: "generating a key",
        source,
    })
}

/// 16 random bytes, top bit cleared (serials are positive) and next bit set (so the DER
/// integer is always exactly 16 bytes long): unpredictable serials, and two
/// certificates for the same name never collide.
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

fn to_time(unix_s: i64) -> Result<OffsetDateTime, PkiError> {
    OffsetDateTime::from_unix_timestamp(unix_s).map_err(|_| PkiError::TimeRange { unix_s })
}

/// The DER bytes of the first PEM block, which must be a CERTIFICATE.
fn pem_to_der(cert_pem: &str) -> Result<Vec<u8>, String> {
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).map_err(|e| format!("PEM: {e}"))?;
    if pem.label != "CERTIFICATE" {
        return Err(format!(
            "PEM block is {:?}, expected \"CERTIFICATE\"",
            pem.label
        ));
    }
    Ok(pem.contents)
}

/// A DNS name as RFC 1123 allows it: etcd clients dial machines by this name, and a SAN
/// that no resolver can produce would make the certificate useless.
fn validate_dns_name(name: &str) -> Result<(), PkiError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(PkiError::InvalidDnsName(name.to_string()))
    }
}
