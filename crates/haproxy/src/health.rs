//! etcd's `/health` over plain HTTP/1.1, bounded by a timeout.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The longest `/health` answer read; etcd's is well under 100 bytes of body.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Asks etcd's `/health` on a client URL address (`GET /health`, HTTP/1.1, `Connection:
/// close`), everything within `timeout_ms`. `Ok` when the status is 200 and the body
/// holds `"health":"true"`; otherwise the reason, for logging (refused, timed out, the
/// status line, or the body).
pub fn etcd_health(addr: SocketAddr, timeout_ms: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("{addr}: no complete /health answer within {timeout_ms} ms"))
    };
    let io = |what: &str, e: io::Error| {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            format!("{addr}: no complete /health answer within {timeout_ms} ms ({what})")
        } else {
            format!("{addr}: {what}: {e}")
        }
    };
    let mut stream = TcpStream::connect_timeout(&addr, left()?).map_err(|e| io("connect", e))?;
    stream
        .set_write_timeout(Some(left()?))
        .map_err(|e| io("set timeout", e))?;
    let request =
        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| io("send", e))?;
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        stream
            .set_read_timeout(Some(left()?))
            .map_err(|e| io("set timeout", e))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                response.extend_from_slice(&buf[..n]);
                if response.len() > MAX_RESPONSE_BYTES {
                    return Err(format!(
                        "{addr}: /health answer longer than {MAX_RESPONSE_BYTES} bytes"
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io("receive", e)),
        }
    }
    judge(&String::from_utf8_lossy(&response)).map_err(|reason| format!("{addr}: {reason}"))
}

/// Judges a complete HTTP response to `GET /health`.
fn judge(response: &str) -> Result<(), String> {
    let status_line = response.lines().next().unwrap_or("");
    let mut parts = status_line.split_whitespace();
    let (version, status) = (parts.next(), parts.next());
    if !version.is_some_and(|v| v.starts_with("HTTP/")) {
        return Err(format!("not an HTTP response: {status_line:?}"));
    }
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or("");
    if status != Some("200") {
        return Err(format!("/health answered {status_line:?}: {}", body.trim()));
    }
    if body.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(format!("/health says unhealthy: {}", body.trim()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_responses() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 30\r\n\r\n{\"health\":\"true\",\"reason\":\"\"}";
        assert_eq!(judge(ok), Ok(()));
        let no_leader = "HTTP/1.1 503 Service Unavailable\r\n\r\n{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}";
        assert!(judge(no_leader).unwrap_err().contains("503"));
        let false_200 = "HTTP/1.1 200 OK\r\n\r\n{\"health\":\"false\"}";
        assert!(judge(false_200).unwrap_err().contains("unhealthy"));
        // The marker in a header, not the body, does not count.
        let in_header = "HTTP/1.1 200 OK\r\nX: \"health\":\"true\"\r\n\r\n{}";
        assert!(judge(in_header).is_err());
        assert!(judge("").is_err());
        assert!(judge("SSH-2.0-OpenSSH\r\n").is_err());
    }

    #[test]
    fn a_silent_server_times_out() {
        // Accepts (backlog) but never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let started = Instant::now();
        let err = etcd_health(addr, 200).unwrap_err();
        assert!(err.contains("within 200 ms"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
