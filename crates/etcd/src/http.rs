//! etcd's plain HTTP endpoints (`/version`, `/health`) through hyper's HTTP/1.1 client,
//! over TLS for `https://` endpoints. One connection per request: these are rare
//! (once per observation) and a pooled connection to a member that was replaced would
//! only be one more thing to invalidate.

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

use crate::tls;

/// Largest body read from `/version` or `/health` (each is a few dozen bytes).
const MAX_HTTP_BODY_BYTES: usize = 64 * 1024;

/// `GET path` on `endpoint` (`http://host:port` or `https://host:port`), returning the
/// status code and the body. An `https://` endpoint needs `tls`: quorum never talks TLS
/// without verifying the member against the control plane's CA. The caller bounds the
/// whole exchange with its own timeout.
pub(crate) async fn get(
    endpoint: &str,
    path: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> io::Result<(u16, Vec<u8>)> {
    let (hostport, secure) = match (
        endpoint.strip_prefix("http://"),
        endpoint.strip_prefix("https://"),
    ) {
        (Some(h), _) => (h, false),
        (_, Some(h)) => (h, true),
        _ => {
            return Err(io::Error::other(format!(
                "{endpoint} is not an http:// or https:// URL"
            )))
        }
    };
    let tcp = tokio::net::TcpStream::connect(hostport).await?;
    if !secure {
        return exchange(tcp, hostport, path).await;
    }
    let config = tls.ok_or_else(|| {
        io::Error::other(format!(
            "{endpoint} needs TLS but no credentials were given"
        ))
    })?;
    let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
    let name = tls::server_name(host).map_err(io::Error::other)?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    exchange(stream, hostport, path).await
}

async fn exchange<S>(stream: S, hostport: &str, path: &str) -> io::Result<(u16, Vec<u8>)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    // The connection task ends when the answer is read and the sender dropped; it
    // never outlives the caller's timeout by more than that.
    let driver = tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, hostport)
        .body(Empty::<Bytes>::new())
        .map_err(io::Error::other)?;
    let res = sender.send_request(req).await.map_err(io::Error::other)?;
    let status = res.status().as_u16();
    let body = Limited::new(res.into_body(), MAX_HTTP_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| io::Error::other(format!("reading the answer to GET {path}: {e}")))?
        .to_bytes()
        .to_vec();
    drop(sender);
    driver.abort();
    Ok((status, body))
}

/// The `etcdcluster` field of a `/version` answer
/// (`{"etcdserver":"3.5.1","etcdcluster":"3.5.0"}`); `None` when it is missing or not
/// JSON (a member still starting says `"not_decided"`, which is not a version either).
pub(crate) fn cluster_version_field(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct VersionAnswer {
        etcdcluster: Option<String>,
    }
    serde_json::from_slice::<VersionAnswer>(body)
        .ok()?
        .etcdcluster
}

/// Whether a `/health` answer says healthy (`{"health":"true",...}`).
pub(crate) fn says_healthy(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct HealthAnswer {
        health: String,
    }
    serde_json::from_slice::<HealthAnswer>(body).is_ok_and(|h| h.health == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_etcds_answers() {
        let v = br#"{"etcdserver":"3.5.1","etcdcluster":"3.5.0"}"#;
        assert_eq!(cluster_version_field(v).as_deref(), Some("3.5.0"));
        assert_eq!(cluster_version_field(b"<html>"), None);
        assert_eq!(cluster_version_field(br#"{"etcdserver":"3.5.1"}"#), None);
        assert!(says_healthy(br#"{"health":"true","reason":""}"#));
        assert!(says_healthy(br#"{"health":"true"}"#));
        assert!(!says_healthy(
            br#"{"health":"false","reason":"RAFT NO LEADER"}"#
        ));
        assert!(!says_healthy(b"true"));
    }

    #[tokio::test]
    async fn refuses_what_is_not_an_http_url() {
        let e = get("etcd://127.0.0.1:1", "/health", None)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("not an http:// or https:// URL"),
            "{e}"
        );
    }
}
