//! The remote steps of an agent install, as shell text: pure functions of what the
//! probe found and what is wanted, so every branch is a table test and the session
//! only carries them. Each step is idempotent: a binary already in place with the same
//! SHA-256 is not sent again, an agent already running is restarted (its members are
//! detached and keep running), a unit already written is written again whole.
//!
//! Layout on the host, under `prefix` (default `/opt/quorum`):
//! `bin/quorum` (the binary), `state/` (the agent's key, certificate, etcd versions,
//! members' data), `agent.log`, `agent.pid` (detached only), `agent.env` (the join
//! token, 0600, read by systemd or the detached start; removed once the agent joined).

use std::fmt::Write as _;

/// The systemd unit the agent runs as, where systemd runs.
pub const UNIT_NAME: &str = "quorum-agent.service";
/// Where the unit is written.
pub const UNIT_PATH: &str = "/etc/systemd/system/quorum-agent.service";
/// How long a running detached agent gets to stop before the install gives up
/// (it stops in well under a second: its members are not its children to wait for).
pub const AGENT_STOP_DEADLINE_S: u32 = 15;
/// The environment variable the agent reads its join token from (never on a command
/// line, where `ps` would show it).
pub const JOIN_TOKEN_ENV: &str = "QUORUM_JOIN_TOKEN";

/// What the probe found on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// `uname -m`.
    pub arch: String,
    /// systemd is the init system (`/run/systemd/system` exists).
    pub systemd: bool,
    /// The SHA-256 of the binary already at `bin/quorum`, if one is.
    pub installed_sha256: Option<String>,
    /// The user is root (systemd units and `/opt` need it).
    pub root: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("the probe's answer lacks {0:?} (is the remote shell a POSIX sh?): {1:?}")]
    Probe(&'static str, String),
    #[error("{0:?} cannot be an install directory: give an absolute path of letters, digits, '/', '-', '_' and '.'")]
    Prefix(String),
}

/// Checks an install prefix: absolute, plain characters (it is written into a unit
/// file and shell text), no `..`.
pub fn check_prefix(prefix: &str) -> Result<(), PlanError> {
    let plain = prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b));
    let ok = prefix.starts_with('/')
        && prefix.len() > 1
        && plain
        && !prefix.split('/').any(|c| c == "..");
    if ok {
        Ok(())
    } else {
        Err(PlanError::Prefix(prefix.to_string()))
    }
}

/// Quotes `s` for a POSIX shell.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The probe: one line per fact, `key=value`.
pub fn probe_script(prefix: &str) -> String {
    let bin = quote(&format!("{prefix}/bin/quorum"));
    format!(
        "echo arch=$(uname -m)\n\
         if [ -d /run/systemd/system ]; then echo systemd=yes; else echo systemd=no; fi\n\
         echo uid=$(id -u)\n\
         if [ -f {bin} ]; then echo installed=$(sha256sum {bin} | cut -d' ' -f1); else echo installed=; fi\n"
    )
}

/// Reads the probe's answer.
pub fn parse_probe(out: &str) -> Result<Probe, PlanError> {
    let field = |k: &'static str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
            .map(str::trim)
            .ok_or_else(|| PlanError::Probe(k, out.to_string()))
    };
    let installed = field("installed")?;
    Ok(Probe {
        arch: field("arch")?.to_string(),
        systemd: field("systemd")? == "yes",
        installed_sha256: (installed.len() == 64).then(|| installed.to_string()),
        root: field("uid")? == "0",
    })
}

/// The upload: the binary arrives on standard input into a temporary name, is checked
/// against `sha256` there, and only then takes the binary's name (a rename, so a
/// running agent keeps its own copy and an interrupted upload leaves no half binary).
pub fn upload_script(prefix: &str, sha256: &str) -> String {
    let dir = quote(&format!("{prefix}/bin"));
    let tmp = quote(&format!("{prefix}/bin/.quorum.upload"));
    let bin = quote(&format!("{prefix}/bin/quorum"));
    format!(
        "set -eu\n\
         umask 022\n\
         mkdir -p {dir}\n\
         cat > {tmp}\n\
         got=$(sha256sum {tmp} | cut -d' ' -f1)\n\
         if [ \"$got\" != {sha} ]; then rm -f {tmp}; echo \"the binary arrived with SHA-256 $got, not {sha256}\" >&2; exit 3; fi\n\
         chmod 0755 {tmp}\n\
         mv -f {tmp} {bin}\n",
        sha = quote(sha256)
    )
}

/// What the agent's command line is, and where its state lives.
fn agent_command(prefix: &str) -> String {
    format!(
        "{} agent --state-dir {}",
        quote(&format!("{prefix}/bin/quorum")),
        quote(&format!("{prefix}/state"))
    )
}

/// The unit: `KillMode=process` because the members the agent starts are detached
/// and must outlive a restart of the agent (systemd would otherwise kill the whole
/// cgroup, every member with it).
pub fn unit_text(prefix: &str) -> String {
    format!(
        "[Unit]\n\
         Description=quorum host agent (etcd members for the quorum controller)\n\
         After=network-online.target\n\
         Wants=network-online.target\n\
         \n\
         [Service]\n\
         ExecStart={prefix}/bin/quorum agent --state-dir {prefix}/state\n\
         EnvironmentFile=-{prefix}/agent.env\n\
         KillMode=process\n\
         Restart=always\n\
         RestartSec=2\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n"
    )
}

/// Starts (or restarts) the agent the way the host runs services; `token` is given
/// when the agent has yet to join. Prints `started=<how>`.
pub fn start_script(prefix: &str, systemd: bool, token: Option<&str>) -> String {
    let mut s = String::from("set -eu\numask 077\n");
    let _ = writeln!(s, "mkdir -p {}", quote(&format!("{prefix}/state")));
    let env = quote(&format!("{prefix}/agent.env"));
    match token {
        Some(t) => {
            let _ = writeln!(
                s,
                "printf '%s\\n' {} > {env}",
                quote(&format!("{JOIN_TOKEN_ENV}={t}"))
            );
        }
        None => {
            let _ = writeln!(s, "rm -f {env}");
        }
    }
    if systemd {
        let _ = write!(
            s,
            "cat > {unit} <<'QUORUM_UNIT'\n{text}QUORUM_UNIT\n\
             chmod 0644 {unit}\n\
             systemctl daemon-reload\n\
             systemctl enable {UNIT_NAME} >/dev/null 2>&1\n\
             systemctl restart {UNIT_NAME}\n\
             echo started=systemd\n",
            unit = UNIT_PATH,
            text = unit_text(prefix)
        );
        return s;
    }
    let pidfile = quote(&format!("{prefix}/agent.pid"));
    let bin = format!("{prefix}/bin/quorum");
    // A detached agent already running (its pid file names a live process whose
    // executable is ours, replaced or not) is stopped first: one agent per host.
    let _ = write!(
        s,
        "if [ -f {pidfile} ]; then\n\
         \x20 pid=$(cat {pidfile})\n\
         \x20 case \"$(readlink /proc/$pid/exe 2>/dev/null || true)\" in\n\
         \x20   {bin_q}*)\n\
         \x20     kill -TERM \"$pid\" 2>/dev/null || true\n\
         \x20     i=0\n\
         \x20     while kill -0 \"$pid\" 2>/dev/null; do\n\
         \x20       i=$((i + 1))\n\
         \x20       if [ $i -gt {polls} ]; then echo \"the running agent (pid $pid) did not stop within {AGENT_STOP_DEADLINE_S} s\" >&2; exit 4; fi\n\
         \x20       sleep 0.1\n\
         \x20     done;;\n\
         \x20 esac\n\
         fi\n\
         cd /\n",
        bin_q = quote(&bin),
        polls = AGENT_STOP_DEADLINE_S * 10
    );
    let _ = write!(
        s,
        "if [ -f {env} ]; then set -a; . {env}; set +a; fi\n\
         setsid {cmd} >> {log} 2>&1 < /dev/null &\n\
         echo $! > {pidfile}\n\
         echo started=detached pid=$!\n",
        cmd = agent_command(prefix),
        log = quote(&format!("{prefix}/agent.log")),
    );
    s
}

/// After the join: the token file goes (the token is spent; the agent restarts on its
/// own key and certificate).
pub fn forget_token_script(prefix: &str) -> String {
    format!("rm -f {}", quote(&format!("{prefix}/agent.env")))
}

/// The last lines of the agent's log (for an error that says why it did not join).
pub fn log_tail_script(prefix: &str, systemd: bool, lines: u32) -> String {
    if systemd {
        format!("journalctl -u {UNIT_NAME} -n {lines} --no-pager 2>&1 || true")
    } else {
        format!(
            "tail -n {lines} {} 2>&1 || true",
            quote(&format!("{prefix}/agent.log"))
        )
    }
}

/// `uname -m` for the architecture this binary was built for.
pub fn uname_machine(rust_arch: &str) -> &str {
    match rust_arch {
        "x86" => "i686",
        "arm" => "armv7l",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_absolute_and_plain() {
        for ok in ["/opt/quorum", "/tmp/x.1/a-b_c"] {
            assert_eq!(check_prefix(ok), Ok(()), "{ok}");
        }
        for bad in [
            "opt/quorum",
            "/",
            "/opt/../etc",
            "/opt/q uorum",
            "/opt/$(id)",
            "/opt/'q'",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
        assert_eq!(quote("plain"), "'plain'");
    }

    #[test]
    fn probes_are_read_whole_or_refused() {
        let sha = "a".repeat(64);
        let p = parse_probe(&format!(
            "arch=x86_64\nsystemd=no\nuid=0\ninstalled={sha}\n"
        ))
        .unwrap();
        assert_eq!(
            p,
            Probe {
                arch: "x86_64".into(),
                systemd: false,
                installed_sha256: Some(sha),
                root: true
            }
        );
        let fresh = parse_probe("arch=aarch64\nsystemd=yes\nuid=1000\ninstalled=\n").unwrap();
        assert!(fresh.systemd && !fresh.root && fresh.installed_sha256.is_none());
        // A motd or a csh login shell's noise is not an answer.
        assert_eq!(
            parse_probe("Welcome!\narch=x86_64\n"),
            Err(PlanError::Probe(
                "installed",
                "Welcome!\narch=x86_64\n".into()
            ))
        );
    }

    #[test]
    fn the_upload_is_checked_before_it_takes_the_binarys_name() {
        let s = upload_script("/opt/quorum", &"b".repeat(64));
        let check = s.find("sha256sum").unwrap();
        let rename = s.find("mv -f").unwrap();
        assert!(check < rename, "{s}");
        assert!(s.contains("exit 3"), "{s}");
        assert!(s.starts_with("set -eu"), "{s}");
    }

    #[test]
    fn a_detached_start_stops_only_our_agent_and_keeps_the_token_off_the_command_line() {
        let s = start_script("/opt/quorum", false, Some("qj1.secret"));
        assert!(s.contains("QUORUM_JOIN_TOKEN=qj1.secret"), "{s}");
        let line = s.lines().find(|l| l.contains("setsid")).unwrap();
        assert!(
            !line.contains("qj1"),
            "the token is in the environment: {line}"
        );
        assert!(s.contains("readlink /proc/$pid/exe"), "{s}");
        assert!(s.contains("'/opt/quorum/bin/quorum'*)"), "{s}");
        assert!(s.contains("echo $! > '/opt/quorum/agent.pid'"), "{s}");
        assert!(!s.contains("systemctl"), "{s}");
        let joined = start_script("/opt/quorum", false, None);
        assert!(joined.contains("rm -f '/opt/quorum/agent.env'"), "{joined}");
    }

    #[test]
    fn under_systemd_the_unit_keeps_members_alive_across_agent_restarts() {
        let s = start_script("/opt/quorum", true, Some("qj1.t"));
        assert!(s.contains("KillMode=process"), "{s}");
        assert!(s.contains("EnvironmentFile=-/opt/quorum/agent.env"), "{s}");
        assert!(s.contains("systemctl restart quorum-agent.service"), "{s}");
        assert!(!s.contains("setsid"), "{s}");
        assert!(unit_text("/opt/quorum")
            .contains("ExecStart=/opt/quorum/bin/quorum agent --state-dir /opt/quorum/state"));
    }

    #[test]
    fn the_spent_token_is_removed() {
        assert_eq!(forget_token_script("/opt/q"), "rm -f '/opt/q/agent.env'");
    }

    #[test]
    fn logs_come_from_where_the_agent_writes_them() {
        assert!(log_tail_script("/opt/q", true, 20)
            .contains("journalctl -u quorum-agent.service -n 20"));
        assert!(log_tail_script("/opt/q", false, 20).contains("tail -n 20 '/opt/q/agent.log'"));
    }
}
