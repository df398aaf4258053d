//! A control plane's HAProxy as the CLI sees it: HAProxy's own certificate for a TLS
//! control plane's frontend, and a read-only look at the backend (`status`, and the
//! confirmation `create` and `apply` print).

use anyhow::{Context, Result};
use quorum_controller::balancer;
use quorum_core::{Condition, ConditionKind, HaproxySpec};
use quorum_haproxy::{HaproxyError, LbOp, RuntimeApi};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;

/// HAProxy's frontend certificate (SAN: the bind address) and the CA bundle, written
/// into `dir` for the configuration to reference.
pub fn haproxy_frontend_tls(
    name: &str,
    stored: &quorum_store::StoredCa,
    bind: std::net::SocketAddr,
    dir: &Path,
) -> Result<quorum_haproxy::FrontendTls> {
    let ca = quorum_pki::Ca::from_pem(name, &stored.cert_pem, &stored.key_pem)?;
    let now = quorum_clock::now_unix_s();
    let not_after = (now + 365 * 86_400).min(ca.not_after_unix_s());
    let certs = ca.issue_machine(&format!("{name}-haproxy"), bind.ip(), now, not_after)?;
    quorum_pki::create_private_dir(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let tls = quorum_haproxy::FrontendTls {
        crt: dir.join("haproxy.pem"),
        ca_file: dir.join("ca.crt"),
    };
    let bundle = format!(
        "{}\n{}\n",
        certs.server.cert_pem.trim_end(),
        certs.server.key_pem.trim_end()
    );
    quorum_pki::write_private(&tls.crt, bundle.as_bytes())?;
    quorum_pki::write_private(&tls.ca_file, ca.cert_pem().as_bytes())?;
    eprintln!(
        "{name}: wrote HAProxy's certificate {} (mode 0600) and the CA bundle {}",
        tls.crt.display(),
        tls.ca_file.display()
    );
    Ok(tls)
}

/// A read-only look at a control plane's HAProxy: whether its runtime API answers, and
/// how its backend compares with the client endpoints. `status` takes it itself rather
/// than reading what a controller last published, like the rest of its observation: it
/// is then fresh, and true with no controller running (a controller that stopped an hour
/// ago would still say "in step"). It is one `show servers state` command, bounded by
/// the controller's runtime API timeout; it changes nothing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HaproxyState {
    /// The runtime API answered (even if only to say the backend does not exist).
    pub answers: bool,
    /// Why the backend could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The backend's servers as HAProxy reports them.
    pub servers: Vec<LbServer>,
    /// What the controller still has to do to the backend (`add server cp-4 at
    /// 127.0.0.5:2379`, `drain server cp-1`, `delete server cp-1`), in its order.
    pub pending: Vec<String>,
    /// The backend was read and serves exactly the client endpoints: nothing to add,
    /// enable or drain. A drained server still to delete serves nothing and counts as
    /// in step, as it does for the controller's removals.
    pub in_step: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LbServer {
    pub name: String,
    pub address: String,
    /// Takes new requests (not in maintenance).
    pub serving: bool,
}

/// Reads `spec`'s backend and compares it with `desired` (name and client address of
/// each member in the client endpoints). Blocking, bounded by
/// `balancer::RUNTIME_API_TIMEOUT_MS`; run it off the async threads.
pub fn probe(spec: &HaproxySpec, desired: &[(String, SocketAddr)]) -> HaproxyState {
    let api = RuntimeApi::new(&spec.runtime_api, balancer::RUNTIME_API_TIMEOUT_MS);
    let current = match api.servers(&spec.backend) {
        Ok(c) => c,
        Err(e) => {
            // Refused (no such backend) and Parse are answers; the rest is silence.
            let answers = matches!(e, HaproxyError::Refused { .. } | HaproxyError::Parse(_));
            // HAProxy ends its answers with a full stop; the messages go on after it.
            let error = e.to_string().trim_end().trim_end_matches('.').to_string();
            return HaproxyState {
                answers,
                error: Some(error),
                servers: Vec::new(),
                pending: Vec::new(),
                in_step: false,
            };
        }
    };
    let ops = quorum_haproxy::plan(desired, &current);
    HaproxyState {
        answers: true,
        error: None,
        servers: current
            .iter()
            .map(|s| LbServer {
                name: s.name.clone(),
                address: s.addr.to_string(),
                serving: !s.maintenance,
            })
            .collect(),
        in_step: ops.iter().all(|op| matches!(op, LbOp::Delete { .. })),
        pending: ops.iter().map(LbOp::to_string).collect(),
    }
}

impl HaproxyState {
    /// The `HaproxyInStep` condition of control plane `name`, whose HAProxy is `spec`.
    pub fn condition(&self, name: &str, spec: &HaproxySpec) -> Condition {
        let backend = &spec.backend;
        let message = match &self.error {
            Some(e) if self.answers => format!(
                "{e}: the controller cannot keep backend {backend} in step, and holds member \
                 removals until it can (is the backend in HAProxy's configuration? `quorum \
                 haproxy-config {name} --bind ADDR` prints one)"
            ),
            Some(e) => format!(
                "{e}: HAProxy does not answer, so the controller cannot keep backend {backend} \
                 in step, and holds member removals until it answers (is HAProxy running with \
                 this socket? `quorum haproxy-config {name} --bind ADDR` prints a configuration)"
            ),
            None if !self.in_step => format!(
                "backend {backend} is behind the client endpoints (to do: {}); the controller \
                 brings it in step, and member removals wait until then",
                self.pending.join(", ")
            ),
            None => {
                let serving: Vec<&str> = self
                    .servers
                    .iter()
                    .filter(|s| s.serving)
                    .map(|s| s.name.as_str())
                    .collect();
                let mut m = if serving.is_empty() {
                    format!("backend {backend} serves no member (there is no client endpoint)")
                } else {
                    format!(
                        "backend {backend} serves {} (the client endpoints)",
                        serving.join(", ")
                    )
                };
                if !self.pending.is_empty() {
                    m += &format!(
                        "; drained, serving nothing, still to clean up: {}",
                        self.pending.join(", ")
                    );
                }
                m
            }
        };
        Condition {
            kind: ConditionKind::HaproxyInStep,
            status: self.in_step,
            message,
        }
    }

    /// The line `create` and `apply` print when they record `spec` for `name`: the
    /// socket, and whether it answers.
    pub fn confirmation(&self, name: &str, spec: &HaproxySpec) -> String {
        let (socket, backend) = (&spec.runtime_api, &spec.backend);
        match &self.error {
            None => format!(
                "{name}: HAProxy recorded: its runtime API {socket} answers; backend {backend} \
                 has {} now, and the controller keeps it in step with the members",
                crate::status::plural(self.servers.len() as u32, "server")
            ),
            Some(e) if self.answers => format!(
                "{name}: HAProxy recorded, but not usable yet: its runtime API {socket} answers, \
                 and {e}; until backend {backend} can be read the controller holds member removals"
            ),
            Some(e) => format!(
                "{name}: HAProxy recorded, but its runtime API {socket} does not answer ({e}); \
                 until it does the controller holds member removals. Start HAProxy with the \
                 configuration `quorum haproxy-config {name} --bind ADDR` prints"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;

    const STATE_HEADER: &str =
        "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_port\n";

    /// A runtime API that answers `answers.len()` connections, one answer each, in order.
    fn fake_api(tag: &str, answers: Vec<String>) -> (PathBuf, std::thread::JoinHandle<()>) {
        let path =
            std::env::temp_dir().join(format!("quorum-ops-{}-{tag}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let t = std::thread::spawn(move || {
            for answer in answers {
                let (mut conn, _) = listener.accept().unwrap();
                let mut line = String::new();
                BufReader::new(&conn).read_line(&mut line).unwrap();
                assert!(line.starts_with("show servers state "), "{line}");
                conn.write_all(answer.as_bytes()).unwrap();
            }
        });
        (path, t)
    }

    fn spec(socket: &std::path::Path) -> HaproxySpec {
        HaproxySpec {
            runtime_api: socket.display().to_string(),
            backend: "etcd".into(),
        }
    }

    fn member(name: &str, last: u8) -> (String, SocketAddr) {
        (
            name.to_string(),
            SocketAddr::from(([127, 0, 0, last], 2379)),
        )
    }

    #[test]
    fn a_missing_socket_is_out_of_step_and_said_so() {
        let socket =
            std::env::temp_dir().join(format!("quorum-ops-{}-none.sock", std::process::id()));
        let h = spec(&socket);
        let state = probe(&h, &[member("cp-1", 2)]);
        assert!(!state.answers && !state.in_step);
        let c = state.condition("cp", &h);
        assert_eq!(c.kind, ConditionKind::HaproxyInStep);
        assert!(
            !c.status && c.message.contains("HAProxy does not answer"),
            "{}",
            c.message
        );
        let line = state.confirmation("cp", &h);
        assert!(
            line.contains(&format!("runtime API {} does not answer", socket.display())),
            "{line}"
        );
    }

    /// In step means: nothing to add, enable or drain. A drained server still to delete
    /// serves nothing, so it does not count; a member missing from the backend does.
    #[test]
    fn the_backend_is_compared_with_the_endpoints() {
        let servers = format!(
            "{STATE_HEADER}3 etcd 1 cp-1 127.0.0.2 2 0 2379\n3 etcd 2 cp-2 127.0.0.3 0 1 2379\n"
        );
        let (socket, t) = fake_api(
            "compare",
            vec![servers.clone(), servers, "Can't find backend.\n".into()],
        );
        let h = spec(&socket);
        let state = probe(&h, &[member("cp-1", 2)]);
        assert!(state.answers && state.in_step, "{state:?}");
        assert_eq!(state.pending, vec!["delete server cp-2"]);
        let c = state.condition("cp", &h);
        assert!(
            c.status && c.message.contains("serves cp-1 (the client endpoints)"),
            "{}",
            c.message
        );
        assert!(
            c.message.contains("still to clean up: delete server cp-2"),
            "{}",
            c.message
        );

        let state = probe(&h, &[member("cp-1", 2), member("cp-3", 4)]);
        assert!(state.answers && !state.in_step, "{state:?}");
        let c = state.condition("cp", &h);
        assert!(
            !c.status
                && c.message.contains(
                    "behind the client endpoints (to do: add server cp-3 at 127.0.0.4:2379"
                ),
            "{}",
            c.message
        );

        let state = probe(&h, &[]);
        assert!(state.answers && !state.in_step);
        let c = state.condition("cp", &h);
        assert!(
            c.message
                .contains("Can't find backend: the controller cannot"),
            "{}",
            c.message
        );
        let line = state.confirmation("cp", &h);
        assert!(line.contains("answers, and haproxy refused"), "{line}");
        t.join().unwrap();
        let _ = std::fs::remove_file(&socket);
    }
}
