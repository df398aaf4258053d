//! Mutual TLS for the agent API and the join service, on rustls with the ring provider
//! (no process-wide default is assumed).
//!
//! - The agent serves with its own certificate (swappable: a renewal takes effect at the
//!   next handshake, without a restart) and requires a client certificate from the
//!   hosts CA.
//! - The controller dials agents trusting only the hosts CA: an agent whose certificate
//!   has expired is refused ([`is_expired`] tells that failure apart).
//! - The join service accepts a client without a certificate (a join carries a token
//!   instead) or with one from the hosts CA, also expired by at most
//!   [`RENEW_GRACE_S`]: an agent that was off past its certificate's end can still
//!   renew, for the key it joined with (the service checks the key; see `join`).
//! - An agent joining knows the hosts CA only by its SHA-256 (from the token), so its
//!   dial accepts a chain that carries a CA with that digest and a leaf it signed.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use std::sync::{Arc, RwLock};
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// How long after its end an agent's certificate is still accepted for a renewal of the
/// same key (a host powered off for a month comes back by itself; past that it joins
/// again with a new token).
pub const RENEW_GRACE_S: i64 = 30 * 86_400;

/// Credentials that cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(pub String);

type Result<T> = std::result::Result<T, TlsError>;

pub use tokio_rustls::rustls::ClientConfig;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub fn certs(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| TlsError(format!("{what}: {e}")))?;
    if chain.is_empty() {
        return Err(TlsError(format!("{what}: no certificate in the PEM")));
    }
    Ok(chain)
}

fn key(pem: &str, what: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError(format!("{what}: {e}")))
}

fn roots(ca_pem: &str) -> Result<Arc<rustls::RootCertStore>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca_pem, "hosts CA")? {
        roots
            .add(c)
            .map_err(|e| TlsError(format!("hosts CA: {e}")))?;
    }
    Ok(Arc::new(roots))
}

fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>> {
    let ck = CertifiedKey::from_der(
        certs(cert_pem, "certificate")?,
        key(key_pem, "private key")?,
        &provider(),
    )
    .map_err(|e| TlsError(format!("certificate and key: {e}")))?;
    Ok(Arc::new(ck))
}

/// A certificate and key that can be replaced while connections are served: the next
/// handshake uses the new one.
#[derive(Debug)]
pub struct Identity {
    current: RwLock<Arc<CertifiedKey>>,
}

impl Identity {
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Arc<Identity>> {
        Ok(Arc::new(Identity {
            current: RwLock::new(certified_key(cert_pem, key_pem)?),
        }))
    }

    /// Replaces the certificate (checked against the key first: a mismatch changes
    /// nothing).
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<()> {
        let ck = certified_key(cert_pem, key_pem)?;
        ck.keys_match()
            .map_err(|e| TlsError(format!("the new certificate is not for this key: {e}")))?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = ck;
        Ok(())
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl rustls::server::ResolvesServerCert for Identity {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

impl rustls::client::ResolvesClientCert for Identity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn h2(mut alpn: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    alpn.push(b"h2".to_vec());
    alpn
}

/// The agent's server: its own (swappable) certificate; clients must present a
/// certificate from the hosts CA (which one is allowed is checked per call).
pub fn agent_server(ca_pem: &str, identity: Arc<Identity>) -> Result<Arc<rustls::ServerConfig>> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca_pem)?, provider())
        .build()
        .map_err(|e| TlsError(format!("client verifier: {e}")))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(identity);
    config.alpn_protocols = h2(Vec::new());
    Ok(Arc::new(config))
}

/// A client that trusts only the hosts CA and presents `identity` (the controller's
/// certificate towards agents, or an agent's own when it renews).
pub fn client(ca_pem: &str, identity: Arc<Identity>) -> Result<Arc<rustls::ClientConfig>> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .with_root_certificates(roots(ca_pem)?)
        .with_client_cert_resolver(identity);
    config.alpn_protocols = h2(Vec::new());
    Ok(Arc::new(config))
}

/// The join service's server: its certificate from the hosts CA, sent with the CA
/// itself (a joining agent finds the CA it pinned in the chain); a client certificate
/// is optional and, when present, verified with [`GraceVerifier`].
pub fn join_server(
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<Arc<rustls::ServerConfig>> {
    let mut chain = certs(cert_pem, "join service certificate")?;
    chain.extend(certs(ca_pem, "hosts CA")?);
    let verifier = Arc::new(GraceVerifier::new(ca_pem)?);
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key(key_pem, "join service key")?)
        .map_err(|e| TlsError(format!("join service certificate: {e}")))?;
    config.alpn_protocols = h2(Vec::new());
    Ok(Arc::new(config))
}

/// The client of an agent joining: no client certificate; the server must present a
/// chain with the CA whose DER has SHA-256 `ca_sha256` and a leaf it signed for the
/// address dialled.
pub fn joining_client(ca_sha256: &str) -> Result<Arc<rustls::ClientConfig>> {
    let verifier = Arc::new(PinnedCaVerifier {
        ca_sha256: ca_sha256.to_ascii_lowercase(),
        provider: provider(),
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = h2(Vec::new());
    Ok(Arc::new(config))
}

/// Whether a handshake failed because the peer's certificate has expired (searched
/// through an error's sources, where tonic and tokio-rustls put it).
pub fn is_expired(e: &(dyn std::error::Error + 'static)) -> bool {
    rustls_error(e).is_some_and(|r| {
        matches!(
            r,
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. }
            )
        )
    })
}

/// The rustls error behind `e`, if any.
pub fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if let Some(r) = inner.downcast_ref::<rustls::Error>() {
                    return Some(r);
                }
            }
        }
        cur = err.source();
    }
    None
}

/// The server name to check a peer's certificate against: its IP address.
pub fn server_name(ip: std::net::IpAddr) -> ServerName<'static> {
    ServerName::IpAddress(ip.into())
}

/// The client verifier of the join service: no certificate is fine (a join); a
/// certificate must chain to the hosts CA, and is verified as of its own last second
/// when it has expired by at most [`RENEW_GRACE_S`] (the handler then allows only a
/// renewal of that key).
#[derive(Debug)]
pub struct GraceVerifier {
    inner: Arc<dyn ClientCertVerifier>,
}

impl GraceVerifier {
    fn new(ca_pem: &str) -> Result<GraceVerifier> {
        let inner = WebPkiClientVerifier::builder_with_provider(roots(ca_pem)?, provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsError(format!("client verifier: {e}")))?;
        Ok(GraceVerifier { inner })
    }
}

impl ClientCertVerifier for GraceVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        let now_s = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        let as_of = match quorum_pki::agents::der_validity(end_entity.as_ref()) {
            Ok((_, not_after, _)) if now_s > not_after && now_s - not_after <= RENEW_GRACE_S => {
                UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                    u64::try_from(not_after).unwrap_or(0),
                ))
            }
            _ => now,
        };
        self.inner
            .verify_client_cert(end_entity, intermediates, as_of)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A joining agent's server verifier: the CA is the certificate in the presented chain
/// whose DER has the pinned digest; the leaf must be valid under it for the name
/// dialled.
#[derive(Debug)]
struct PinnedCaVerifier {
    ca_sha256: String,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .find(|c| quorum_pki::agents::der_sha256(c.as_ref()) == self.ca_sha256)
            .ok_or_else(|| {
                rustls::Error::General(format!(
                    "the join service did not present the hosts CA the token names (sha256 {})",
                    self.ca_sha256
                ))
            })?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            self.provider.clone(),
        )
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
        inner.verify_server_cert(end_entity, &[], server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
