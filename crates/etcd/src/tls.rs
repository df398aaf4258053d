//! Mutual TLS towards members: the gRPC client's options (etcd-client on rustls) and a
//! rustls configuration for etcd's plain HTTP endpoints (`/version`, `/health`).

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::Arc;
use tokio_rustls::rustls;

/// The credentials a client presents to the members of one control plane: the control
/// plane's CA (the only one trusted) and a client certificate it signed.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Credentials that cannot be used (PEM that does not parse, a key that does not match).
#[derive(Debug, Clone, thiserror::Error)]
#[error("client TLS credentials: {0}")]
pub struct TlsError(pub String);

impl ClientTls {
    /// For etcd-client (`ConnectOptions::with_tls`).
    pub fn grpc_options(&self) -> etcd_client::TlsOptions {
        etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&self.ca_pem))
            .identity(etcd_client::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
    }

    /// A rustls client configuration that trusts only the CA and presents the client
    /// certificate, with the ring provider (no process-wide default is assumed).
    pub fn rustls_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| TlsError(format!("{what}: {e}"));
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| bad("CA certificate", &e))?;
            roots.add(cert).map_err(|e| bad("CA certificate", &e))?;
        }
        if roots.is_empty() {
            return Err(TlsError("no CA certificate in the CA bundle".into()));
        }
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| bad("client certificate", &e))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| bad("client key", &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("TLS versions", &e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| bad("client certificate and key", &e))?;
        Ok(Arc::new(config))
    }
}

/// The name a member's certificate is checked against: the host of its URL (an IP
/// address for quorum's machines, which carry it as a SAN).
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(host.to_string())
        .map_err(|e| TlsError(format!("{host:?} is not a server name: {e}")))
}
