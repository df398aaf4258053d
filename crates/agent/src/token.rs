//! Join tokens: what `quorum host add` prints and `quorum agent --join` takes. A token
//! names the host, its address, where the join service listens, the hosts CA by the
//! SHA-256 of its DER (the agent trusts the service only if it presents that CA), and a
//! secret of 256 random bits. The store keeps only the secret's SHA-256, and a token
//! works once, before its expiry.
//!
//! Format: `qj1.` then the base64url (no padding) of a JSON object. Opaque to people,
//! one word to paste.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

pub const TOKEN_PREFIX: &str = "qj1.";
/// The longest token accepted (a real one is about 300 characters).
pub const MAX_TOKEN_CHARS: usize = 2_048;

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinToken {
    pub host: String,
    pub address: IpAddr,
    pub endpoint: SocketAddr,
    pub ca_sha256: String,
    pub secret: String,
}

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinToken")
            .field("host", &self.host)
            .field("address", &self.address)
            .field("endpoint", &self.endpoint)
            .field("ca_sha256", &self.ca_sha256)
            .field("secret", &"<redacted>")
            .finish()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error(
        "not a join token: it should begin with {TOKEN_PREFIX:?} (as `quorum host add` prints it)"
    )]
    Prefix,
    #[error("not a join token: longer than {MAX_TOKEN_CHARS} characters")]
    TooLong,
    #[error("the join token is damaged (was it cut when copied?): {0}")]
    Damaged(String),
}

impl JoinToken {
    /// A fresh secret: 32 random bytes, hex.
    pub fn new_secret() -> String {
        let bytes: [u8; 32] = rand::random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// What the store keeps of a secret.
    pub fn secret_sha256(secret: &str) -> String {
        quorum_pki::agents::der_sha256(secret.as_bytes())
    }

    pub fn encode(&self) -> String {
        // Serialising a struct of strings and addresses cannot fail.
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{TOKEN_PREFIX}{}", b64_encode(&json))
    }

    pub fn decode(text: &str) -> Result<JoinToken, TokenError> {
        let text = text.trim();
        if text.len() > MAX_TOKEN_CHARS {
            return Err(TokenError::TooLong);
        }
        let body = text.strip_prefix(TOKEN_PREFIX).ok_or(TokenError::Prefix)?;
        let json = b64_decode(body).ok_or_else(|| TokenError::Damaged("not base64url".into()))?;
        let t: JoinToken =
            serde_json::from_slice(&json).map_err(|e| TokenError::Damaged(e.to_string()))?;
        let hex64 = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !crate::valid_host_name(&t.host) || !hex64(&t.ca_sha256) || !hex64(&t.secret) {
            return Err(TokenError::Damaged("a field is malformed".into()));
        }
        Ok(t)
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn b64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 4 / 3 + 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..=chunk.len() {
            out.push(B64[((n >> (18 - 6 * k)) & 63) as usize] as char);
        }
    }
    out
}

fn b64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> JoinToken {
        JoinToken {
            host: "h1".into(),
            address: "198.18.0.11".parse().unwrap(),
            endpoint: "198.18.0.1:7391".parse().unwrap(),
            ca_sha256: "ab".repeat(32),
            secret: JoinToken::new_secret(),
        }
    }

    #[test]
    fn a_token_round_trips_and_hides_its_secret() {
        let t = token();
        let text = t.encode();
        assert!(text.starts_with("qj1.") && text.len() < 400, "{text}");
        assert_eq!(JoinToken::decode(&format!("  {text}\n")).unwrap(), t);
        assert!(!format!("{t:?}").contains(&t.secret));
    }

    #[test]
    fn a_damaged_token_says_so() {
        let text = token().encode();
        assert_eq!(JoinToken::decode("hello"), Err(TokenError::Prefix));
        let cut = &text[..text.len() - 10];
        assert!(matches!(
            JoinToken::decode(cut),
            Err(TokenError::Damaged(_))
        ));
        let bad = text.replace('.', ".!");
        assert!(matches!(
            JoinToken::decode(&bad),
            Err(TokenError::Damaged(_))
        ));
        for n in 0..=5usize {
            let bytes: Vec<u8> = (0..n as u8).collect();
            assert_eq!(b64_decode(&b64_encode(&bytes)).unwrap(), bytes);
        }
    }
}
