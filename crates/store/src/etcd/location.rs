//! Where the management etcd is (`--store etcd://host:port,host:port[/prefix]`) and the
//! client certificate it may require.

/// Client certificate for a management etcd that requires one (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls")
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// `etcd://host:port,host:port[/prefix]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdLocation {
    pub endpoints: Vec<String>,
    /// Key prefix, starting and ending with `/`.
    pub prefix: String,
    pub tls: Option<EtcdTls>,
}

impl EtcdLocation {
    pub fn parse(s: &str, tls: Option<EtcdTls>) -> Result<EtcdLocation, String> {
        let rest = s.strip_prefix("etcd://").ok_or_else(|| {
            format!("--store {s:?}: expected `embedded` or `etcd://host:port,host:port[/prefix]`")
        })?;
        let (hosts, prefix) = match rest.split_once('/') {
            Some((h, p)) => (h, format!("/{}/", p.trim_matches('/'))),
            None => (rest, "/quorum/".to_string()),
        };
        if prefix == "//" {
            return Err(format!("--store {s:?}: the key prefix is empty"));
        }
        let mut endpoints = Vec::new();
        for h in hosts.split(',').map(str::trim) {
            let (host, port) = h
                .rsplit_once(':')
                .ok_or_else(|| format!("--store {s:?}: {h:?} is not host:port"))?;
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(format!("--store {s:?}: {h:?} is not host:port"));
            }
            let scheme = if tls.is_some() { "https" } else { "http" };
            endpoints.push(format!("{scheme}://{h}"));
        }
        Ok(EtcdLocation {
            endpoints,
            prefix,
            tls,
        })
    }

    /// The location as the user writes it (`etcd://h:p,h:p/prefix`).
    pub fn url(&self) -> String {
        let hosts: Vec<&str> = self
            .endpoints
            .iter()
            .map(|e| e.split_once("://").map_or(e.as_str(), |(_, h)| h))
            .collect();
        format!(
            "etcd://{}{}",
            hosts.join(","),
            self.prefix.trim_end_matches('/')
        )
    }
}
