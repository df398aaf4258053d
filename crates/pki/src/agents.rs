//! Certificates of host agents (`quorum agent`): the agent makes its own key and a
//! certificate request, and the hosts CA signs it for the host's name and address. The
//! private key never leaves the host; what crosses the network is the request and the
//! certificate.
//!
//! Identities are pinned by SHA-256: of a CA certificate's DER (a join token names the
//! hosts CA that way, as kubeadm's discovery hash does) and of a certificate's or a
//! key's SubjectPublicKeyInfo (the store remembers the key an agent joined with, and an
//! expired certificate is renewed only for that key).

use super::*;
use rcgen::{CertificateSigningRequestParams, PublicKeyData};

/// The common name every agent certificate carries before the host's name: the agent
/// API refuses callers whose certificate says this (agents never command agents).
pub const AGENT_CN_PREFIX: &str = "quorum agent ";
/// The common name of the controller's client certificate towards agents.
pub const CONTROLLER_CN: &str = "quorum controller";

/// A new ECDSA P-256 private key, as PKCS#8 PEM (an agent's own, made on its host).
pub fn new_key_pem() -> Result<String, PkiError> {
    Ok(generate_key("hosts")?.serialize_pem())
}

/// A certificate request for agent `host`, signed by `key_pem`: it proves the requester
/// holds the key. The signer ignores everything in it but the public key.
pub fn certificate_request(key_pem: &str, host: &str) -> Result<String, PkiError> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| PkiError::KeyParse {
        reason: e.to_string(),
    })?;
    let mut params = CertificateParams::default();
    params.distinguished_name = common_name(&format!("{AGENT_CN_PREFIX}{host}"));
    let csr = params
        .serialize_request(&key)
        .and_then(|c| c.pem())
        .map_err(|source| PkiError::Crypto {
            control_plane: "hosts".into(),
            what: "making a certificate request",
            source,
        })?;
    Ok(csr)
}

impl Ca {
    /// Signs agent `host`'s certificate for the key in `csr_pem` (whose signature is
    /// checked): CN "quorum agent <host>", SANs the host's address and its name,
    /// serverAuth (its API) and clientAuth (renewing at the join service). Validity as
    /// for [`Ca::issue_machine`].
    pub fn issue_agent(
        &self,
        csr_pem: &str,
        host: &str,
        address: IpAddr,
        now_unix_s: i64,
        not_after_unix_s: i64,
    ) -> Result<String, PkiError> {
        validate_dns_name(host)?;
        let dns: rcgen::string::Ia5String = host
            .try_into()
            .map_err(|_| PkiError::InvalidDnsName(host.to_string()))?;
        let mut csr =
            CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| PkiError::Csr {
                reason: e.to_string(),
            })?;
        let mut params = self.leaf_params(
            &format!("{AGENT_CN_PREFIX}{host}"),
            now_unix_s,
            not_after_unix_s,
        )?;
        params.subject_alt_names = vec![SanType::IpAddress(address), SanType::DnsName(dns)];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.serial_number = Some(random_serial());
        csr.params = params;
        let cert = csr
            .signed_by(&self.issuer)
            .map_err(|source| PkiError::Crypto {
                control_plane: self.control_plane.clone(),
                what: "signing an agent certificate",
                source,
            })?;
        Ok(cert.pem())
    }

    /// A server certificate for a service of quorum's own at `address` (the join
    /// service): serverAuth only, SAN the address.
    pub fn issue_service(
        &self,
        common_name: &str,
        address: IpAddr,
        now_unix_s: i64,
        not_after_unix_s: i64,
    ) -> Result<Identity, PkiError> {
        let mut params = self.leaf_params(common_name, now_unix_s, not_after_unix_s)?;
        params.subject_alt_names = vec![SanType::IpAddress(address)];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(&mut params)
    }
}

/// SHA-256 of the key a certificate request asks to certify, after checking the
/// request's signature (the requester holds that key).
pub fn request_key_sha256(csr_pem: &str) -> Result<String, PkiError> {
    let csr = CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| PkiError::Csr {
        reason: e.to_string(),
    })?;
    Ok(hex_sha256(&csr.public_key.subject_public_key_info()))
}

/// SHA-256 of the first certificate's DER, in lower-case hex: how a join token pins
/// the hosts CA.
pub fn certificate_sha256(cert_pem: &str) -> Result<String, PkiError> {
    let der = pem_to_der(cert_pem).map_err(|reason| PkiError::CertParse { reason })?;
    Ok(hex_sha256(&der))
}

/// SHA-256 of a DER certificate (as a TLS handshake presents it), in lower-case hex.
pub fn der_sha256(der: &[u8]) -> String {
    hex_sha256(der)
}

/// SHA-256 of the first certificate's SubjectPublicKeyInfo, in lower-case hex: the
/// identity of the key it certifies, the same across renewals.
pub fn certificate_key_sha256(cert_pem: &str) -> Result<String, PkiError> {
    let der = pem_to_der(cert_pem).map_err(|reason| PkiError::CertParse { reason })?;
    certificate_der_key_sha256(&der)
}

/// [`certificate_key_sha256`] of a DER certificate.
pub fn certificate_der_key_sha256(der: &[u8]) -> Result<String, PkiError> {
    let (_, x509) = x509_parser::parse_x509_certificate(der).map_err(|e| PkiError::CertParse {
        reason: e.to_string(),
    })?;
    Ok(hex_sha256(x509.public_key().raw))
}

/// SHA-256 of a private key's SubjectPublicKeyInfo, in lower-case hex (equal to
/// [`certificate_key_sha256`] of a certificate for that key).
pub fn key_sha256(key_pem: &str) -> Result<String, PkiError> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| PkiError::KeyParse {
        reason: e.to_string(),
    })?;
    Ok(hex_sha256(&key.subject_public_key_info()))
}

/// The first certificate's validity, `(notBefore, notAfter)` in Unix seconds, and its
/// subject's common name.
pub fn validity(cert_pem: &str) -> Result<(i64, i64, String), PkiError> {
    let der = pem_to_der(cert_pem).map_err(|reason| PkiError::CertParse { reason })?;
    der_validity(&der)
}

/// [`validity`] of a DER certificate.
pub fn der_validity(der: &[u8]) -> Result<(i64, i64, String), PkiError> {
    let (_, x509) = x509_parser::parse_x509_certificate(der).map_err(|e| PkiError::CertParse {
        reason: e.to_string(),
    })?;
    let cn = x509
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let v = x509.validity();
    Ok((v.not_before.timestamp(), v.not_after.timestamp(), cn))
}

fn hex_sha256(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn an_agent_certificate_certifies_the_requesters_key_for_its_host() {
        let ca = Ca::generate("hosts", NOW, 86_400).unwrap();
        let key = new_key_pem().unwrap();
        let csr = certificate_request(&key, "h1").unwrap();
        let addr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 11));
        let cert = ca.issue_agent(&csr, "h1", addr, NOW, NOW + 3_600).unwrap();
        assert_eq!(
            certificate_key_sha256(&cert).unwrap(),
            key_sha256(&key).unwrap()
        );
        assert_eq!(request_key_sha256(&csr).unwrap(), key_sha256(&key).unwrap());
        let (nb, na, cn) = validity(&cert).unwrap();
        assert_eq!(
            (nb, na, cn.as_str()),
            (NOW - CLOCK_SKEW_S, NOW + 3_600, "quorum agent h1")
        );
        assert_eq!(names(&cert).unwrap().1, "quorum hosts CA");
        assert_eq!(certificate_sha256(ca.cert_pem()).unwrap().len(), 64);
    }

    #[test]
    fn a_tampered_request_is_refused() {
        let ca = Ca::generate("hosts", NOW, 86_400).unwrap();
        let csr = certificate_request(&new_key_pem().unwrap(), "h1").unwrap();
        let addr = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let err = ca
            .issue_agent("not a request", "h1", addr, NOW, NOW + 60)
            .unwrap_err();
        assert!(matches!(err, PkiError::Csr { .. }), "{err}");
        // One byte of the body changed: the signature no longer matches.
        let mut der = x509_parser::pem::parse_x509_pem(csr.as_bytes())
            .unwrap()
            .1
            .contents;
        let i = der.len() / 2;
        der[i] ^= 0x01;
        let b64 = base64_lines(&der);
        let bad = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{b64}-----END CERTIFICATE REQUEST-----\n"
        );
        assert!(ca.issue_agent(&bad, "h1", addr, NOW, NOW + 60).is_err());
        assert!(matches!(
            ca.issue_agent(&csr, "no/such host", addr, NOW, NOW + 60),
            Err(PkiError::InvalidDnsName(_))
        ));
    }

    fn base64_lines(der: &[u8]) -> String {
        const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in der.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for k in 0..4 {
                if k <= chunk.len() {
                    out.push(T[((n >> (18 - 6 * k)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        let mut lines = String::new();
        for line in out.as_bytes().chunks(64) {
            lines.push_str(std::str::from_utf8(line).unwrap());
            lines.push('\n');
        }
        lines
    }
}
