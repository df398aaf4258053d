//! quorum-provider: machines. The `local` provider runs each machine as a real etcd
//! process of the machine's version, on the machine's own loopback address, with its own
//! data directory and log file under `<home>/machines/<name>/`.
//!
//! Processes are started in their own session (detached), so they outlive the
//! controller as virtual machines would; a later controller finds them again through the
//! pid file, checked against `/proc` so a recycled pid is never mistaken for a machine.
//!
//! Architecture invariant: the provider never talks to etcd's API and knows nothing of
//! membership; it starts, stops, observes and deletes processes and directories.

pub mod data;
pub mod install;
pub mod machines;
pub mod management;
pub mod release;

pub use data::{DataDirState, LOG_TAIL_BYTES, MARKER_FILE, STARTS_KEPT, UNREADABLE_MARKER};
pub use machines::{MachineError, MachineProvider};

use quorum_core::{ClusterState, DataMarker, InitialMember, Machine, ProcessState, Version};
use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Default time a stopping etcd gets between SIGTERM and SIGKILL.
pub const STOP_GRACE_MS: u64 = 10_000;
/// How often a stop polls for the process to be gone (and a pause for it to stop).
const STOP_POLL_MS: u64 = 10;
/// What etcd logs on SIGTERM once its server has stopped: `embed.Etcd.Close` logs it
/// after `EtcdServer.Stop` returned, that is once raft has stopped and the WAL and the
/// database are synced and closed (3.4 and 3.5 alike). All that is left then is to
/// wait, up to 1 s, for the peers' connections to the peer port to close, which
/// changes nothing on disk; a stop ends it at once (measured: each stop of a member of
/// three took about 1 s, of 1.3 s for a whole in-place restart).
const SERVER_STOPPED_LOG_MARK: &str = "\"msg\":\"stopping serving peer traffic\"";
/// How long a pause waits for every thread of the process to stop.
const PAUSE_WAIT_MS: u64 = 2_000;
/// How many times `delete` tries to remove a machine's directory (a last write of the
/// reaper thread may land in it meanwhile).
const DELETE_ATTEMPTS: u32 = 5;
/// How many names `fence` tries for one machine within one second.
const FENCE_NAME_ATTEMPTS: u32 = 100;

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("etcd {version} is not installed in {dir} (installed: {installed}); run scripts/install.sh or set QUORUM_ETCD_DIR")]
    VersionNotInstalled {
        version: Version,
        dir: PathBuf,
        installed: String,
    },
    #[error("machine {machine}: {what}: {source}")]
    Io {
        machine: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("machine {machine} does not accept connections on its client port after {waited_ms} ms (see its etcd.log)")]
    NotReady { machine: String, waited_ms: u64 },
    #[error("machine {machine} speaks TLS but was started without certificates")]
    MissingCertificates { machine: String },
    #[error("machine {machine}: process {pid} did not exit after SIGKILL within {waited_ms} ms")]
    Unkillable {
        machine: String,
        pid: i32,
        waited_ms: u64,
    },
    #[error("machine {machine} is running (process {pid}): stop it before its data is wiped")]
    Running { machine: String, pid: i32 },
    #[error(
        "machine {machine} holds no member data: a data marker names the member whose data it is"
    )]
    NoMemberData { machine: String },
    #[error("machine {machine}: its data directory changed since the start was decided ({found}); not started")]
    DataChanged { machine: String, found: String },
}

pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// Where quorum looks for etcd binaries: `$QUORUM_ETCD_DIR`, else
/// `$XDG_DATA_HOME/quorum/etcd`, else `~/.local/share/quorum/etcd`. Each version is a
/// directory `<dir>/<version>/` holding `etcd` (and `etcdctl`).
pub fn default_etcd_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("QUORUM_ETCD_DIR") {
        return PathBuf::from(d);
    }
    data_home().join("quorum").join("etcd")
}

/// `$XDG_DATA_HOME`, else `~/.local/share`.
pub fn data_home() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".local").join("share")
}

/// Installed etcd versions in `dir`, oldest first.
pub fn installed_versions(dir: &Path) -> Vec<Version> {
    let mut out: Vec<Version> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("etcd").exists())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    out.sort();
    out
}

/// Checks that `version` is installed in `dir` and returns its `etcd` binary.
pub fn etcd_binary(dir: &Path, version: Version) -> Result<PathBuf> {
    let bin = dir.join(version.to_string()).join("etcd");
    if bin.exists() {
        return Ok(bin);
    }
    let installed = installed_versions(dir)
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>();
    Err(ProviderError::VersionNotInstalled {
        version,
        dir: dir.to_path_buf(),
        installed: if installed.is_empty() {
            "none".into()
        } else {
            installed.join(", ")
        },
    })
}

/// What the provider sees of a machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineState {
    pub process: ProcessState,
    pub pid: Option<i32>,
    /// The data directory holds member data (`member/wal`).
    pub has_data: bool,
    /// What the data directory holds (`Member` exactly when `has_data`).
    pub data_dir: DataDirState,
    /// The data directory's identity marker (`write_marker`): `None` without one,
    /// `UNREADABLE_MARKER` (ids 0 and 0, which no etcd cluster or member has) for one
    /// that exists but cannot be read, so a caller that compares ids refuses it.
    pub marker: Option<DataMarker>,
    /// When the process was started (Unix seconds), oldest first: the last
    /// `STARTS_KEPT`. Empty when the history is missing or garbled.
    pub starts_unix_s: Vec<i64>,
    /// Those of `starts_unix_s` that followed a stop quorum asked for (planned).
    pub planned_starts_unix_s: Vec<i64>,
    /// The version of the binary the running process was started from (its path is
    /// `<etcd dir>/<version>/etcd`); `None` when stopped or not of that form.
    pub running_version: Option<Version>,
}

/// How to start a machine's etcd.
#[derive(Clone, Debug)]
pub struct StartRequest<'a> {
    pub machine: &'a Machine,
    /// The cluster token: the control plane's name keeps members of different control
    /// planes from ever joining each other.
    pub cluster_token: &'a str,
    pub state: ClusterState,
    /// Empty when the machine has data (etcd then ignores the initial cluster).
    pub initial_cluster: &'a [InitialMember],
    /// The machine's certificates, required when the machine speaks TLS. Written to
    /// `machines/<name>/tls/` (keys 0600, directory 0700) on every start.
    pub tls: Option<MachineTls<'a>>,
    /// etcd's `--quota-backend-bytes` (the spec's `maintenance.quotaBackendBytes`);
    /// `None`: etcd's default, 2 GiB.
    pub quota_backend_bytes: Option<u64>,
    /// The data the start was decided on: `Some(m)` requires the data directory to hold
    /// exactly marker `m` (`Some(None)`: no marker) and, when marked, member data;
    /// anything else refuses the start (`DataChanged`). `None`: no check (the
    /// management etcd, tests).
    pub expect_marker: Option<Option<DataMarker>>,
    /// `--force-new-cluster`: etcd rewrites the membership in its data to itself alone
    /// (keeping every entry it applied). Only a recovery after quorum loss asks for it,
    /// and only once every other old member is fenced.
    pub force_new_cluster: bool,
}

/// Where a local machine's outgoing connections come from: every machine shares this
/// host's loopback, and the kernel picks 127.0.0.1 as the source of a connection to any
/// 127.x address. etcd checks a peer's source address against its certificate, so the
/// peer certificates of local machines name it too (see `Ca::issue_machine_from`).
pub const LOCAL_SOURCE_ADDRESS: std::net::IpAddr =
    std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// What a TLS machine's etcd needs: the CA its peers and clients must be signed by,
/// and its own server and peer certificates.
#[derive(Clone, Copy, Debug)]
pub struct MachineTls<'a> {
    pub ca_pem: &'a str,
    pub certs: &'a quorum_pki::MachineCerts,
}

#[derive(Clone, Debug)]
pub struct LocalProvider {
    machines_dir: PathBuf,
    etcd_dir: PathBuf,
    stop_grace: Duration,
    /// Flags every etcd gets after quorum's own.
    etcd_flags: Vec<String>,
}

impl LocalProvider {
    pub fn new(home: &Path, etcd_dir: PathBuf) -> Self {
        LocalProvider {
            machines_dir: home.join("machines"),
            etcd_dir,
            stop_grace: Duration::from_millis(STOP_GRACE_MS),
            etcd_flags: Vec::new(),
        }
    }

    /// Flags every etcd this provider starts gets after quorum's own, for example
    /// `--quota-backend-bytes=16777216` (tests reach NOSPACE quickly with a small quota).
    pub fn with_etcd_flags(mut self, flags: Vec<String>) -> Self {
        self.etcd_flags = flags;
        self
    }

    pub fn with_stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    pub fn etcd_dir(&self) -> &Path {
        &self.etcd_dir
    }

    pub fn machine_dir(&self, name: &str) -> PathBuf {
        self.machines_dir.join(name)
    }

    pub fn data_dir(&self, name: &str) -> PathBuf {
        self.machine_dir(name).join("data")
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.machine_dir(name).join("etcd.log")
    }

    fn pid_path(&self, name: &str) -> PathBuf {
        self.machine_dir(name).join("pid")
    }

    /// Observes a machine: is its process alive, what its data directory holds and
    /// says it is, when it was started.
    pub fn observe(&self, name: &str) -> MachineState {
        let pid = self.live_pid(name);
        let data_dir = self.data_dir(name);
        let state = data::data_dir_state(&data_dir);
        // The start history, read once: every start, and which of them were planned.
        let history = data::read_start_lines(&self.machine_dir(name));
        let planned = history.iter().filter(|(_, p)| *p).map(|(at, _)| *at);
        MachineState {
            process: if pid.is_some() {
                ProcessState::Running
            } else {
                ProcessState::Stopped
            },
            pid,
            has_data: state == DataDirState::Member,
            data_dir: state,
            marker: data::read_marker(&data_dir),
            planned_starts_unix_s: planned.collect(),
            starts_unix_s: history.iter().map(|(at, _)| *at).collect(),
            running_version: pid.and_then(binary_version),
        }
    }

    /// Writes the identity marker of the machine's data directory (atomically and
    /// durably; the same marker again is success). Only beside member data: a marker
    /// names whose data it is.
    /// The data directory still holds what a start was decided on: exactly marker
    /// `expected` and, when marked, member data (checked just before etcd runs, so a
    /// disk lost or data swapped since the observation is never started).
    fn check_data(&self, name: &str, expected: Option<DataMarker>) -> Result<()> {
        let dir = self.data_dir(name);
        let found = data::read_marker(&dir);
        let has_member_data = dir.join("member").join("wal").is_dir();
        let hex = |m: Option<DataMarker>| match m {
            Some(m) => format!("member {:x} of cluster {:x}", m.member_id, m.cluster_id),
            None => "no marker".to_string(),
        };
        let changed = if found != expected {
            Some(format!("{}, expected {}", hex(found), hex(expected)))
        } else if expected.is_some() && !has_member_data {
            Some("the marked member data is gone".to_string())
        } else {
            None
        };
        match changed {
            Some(found) => Err(ProviderError::DataChanged {
                machine: name.to_string(),
                found,
            }),
            None => Ok(()),
        }
    }

    pub fn write_marker(&self, name: &str, marker: DataMarker) -> Result<()> {
        let data_dir = self.data_dir(name);
        if data::data_dir_state(&data_dir) != DataDirState::Member {
            return Err(ProviderError::NoMemberData {
                machine: name.to_string(),
            });
        }
        data::write_marker(&data_dir, marker).map_err(|e| ProviderError::Io {
            machine: name.to_string(),
            what: "write data marker",
            source: e,
        })
    }

    /// Removes the machine's data directory, its marker with it (the start history and
    /// the log stay). The machine must not be running; no data directory is success.
    pub fn wipe_data(&self, name: &str) -> Result<()> {
        if let Some(pid) = self.live_pid(name) {
            return Err(ProviderError::Running {
                machine: name.to_string(),
                pid,
            });
        }
        match fs::remove_dir_all(self.data_dir(name)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ProviderError::Io {
                machine: name.to_string(),
                what: "remove data directory",
                source: e,
            }),
        }
    }

    /// Whether quorum stopped the machine on purpose since its last start (its next
    /// start is planned).
    pub fn stop_was_requested(&self, name: &str) -> bool {
        self.machine_dir(name)
            .join(data::STOP_REQUESTED_FILE)
            .exists()
    }

    /// How the machine's last process ended ("exited 1", "killed by signal 9"), when
    /// this process started and reaped it.
    pub fn last_exit(&self, name: &str) -> Option<String> {
        data::read_exit(&self.machine_dir(name))
    }

    /// The last `n` lines of the machine's etcd log, from at most its last
    /// `LOG_TAIL_BYTES` (what etcd said before it exited: "member ... has already been
    /// bootstrapped"). No log: no lines.
    pub fn last_log_lines(&self, name: &str, n: usize) -> Vec<String> {
        data::last_lines(&self.log_path(name), n)
    }

    /// The pid from the pid file, if that process is alive and is this machine's etcd.
    fn live_pid(&self, name: &str) -> Option<i32> {
        let pid: i32 = fs::read_to_string(self.pid_path(name))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let data_dir = self.data_dir(name);
        process_is(pid, &data_dir).then_some(pid)
    }

    /// Writes a machine's certificates and returns etcd's flags for them: mutual TLS on
    /// the client port (`--client-cert-auth`) and on the peer port
    /// (`--peer-client-cert-auth`), each trusting only the control plane's CA.
    fn write_tls(&self, machine: &str, tls: MachineTls<'_>) -> Result<Vec<String>> {
        let io_err = |what, source| ProviderError::Io {
            machine: machine.to_string(),
            what,
            source,
        };
        let dir = self.machine_dir(machine).join("tls");
        quorum_pki::create_private_dir(&dir).map_err(|e| io_err("create tls directory", e))?;
        let files = [
            ("ca.crt", tls.ca_pem),
            ("server.crt", tls.certs.server.cert_pem.as_str()),
            ("server.key", tls.certs.server.key_pem.as_str()),
            ("peer.crt", tls.certs.peer.cert_pem.as_str()),
            ("peer.key", tls.certs.peer.key_pem.as_str()),
        ];
        for (name, pem) in files {
            quorum_pki::write_private(&dir.join(name), pem.as_bytes())
                .map_err(|e| io_err("write certificate", e))?;
        }
        let f = |name: &str| dir.join(name).display().to_string();
        Ok(vec![
            format!("--cert-file={}", f("server.crt")),
            format!("--key-file={}", f("server.key")),
            format!("--trusted-ca-file={}", f("ca.crt")),
            "--client-cert-auth=true".into(),
            format!("--peer-cert-file={}", f("peer.crt")),
            format!("--peer-key-file={}", f("peer.key")),
            format!("--peer-trusted-ca-file={}", f("ca.crt")),
            "--peer-client-cert-auth=true".into(),
        ])
    }

    /// Starts the machine's etcd, detached, and records the start in its history.
    /// Already running is success (and no new start).
    pub fn start(&self, req: &StartRequest<'_>) -> Result<i32> {
        let m = req.machine;
        if let Some(pid) = self.live_pid(&m.name) {
            return Ok(pid);
        }
        if let Some(expected) = req.expect_marker {
            self.check_data(&m.name, expected)?;
        }
        let bin = etcd_binary(&self.etcd_dir, m.version)?;
        let dir = self.machine_dir(&m.name);
        // Owner-only: the directory holds the machine's private keys and its data.
        quorum_pki::create_private_dir(&dir)
            .map_err(|e| io_error(m, "create machine directory", e))?;
        let args = self.etcd_args(req)?;
        let cmd = self.command(m, &bin, &args)?;
        self.spawn_recorded(m, cmd)
    }

    /// The flags of `req.machine`'s etcd (its certificates written where they point).
    fn etcd_args(&self, req: &StartRequest<'_>) -> Result<Vec<String>> {
        let m = req.machine;
        let mut args: Vec<String> = vec![
            format!("--name={}", m.name),
            format!("--data-dir={}", self.data_dir(&m.name).display()),
            format!("--listen-client-urls={}", m.client_url()),
            format!("--advertise-client-urls={}", m.client_url()),
            format!("--listen-peer-urls={}", m.peer_url()),
            format!("--initial-advertise-peer-urls={}", m.peer_url()),
            format!("--initial-cluster-token={}", req.cluster_token),
            // etcd's default since 3.4, stated so it cannot change under us: it refuses a
            // membership change that would leave fewer healthy voters than a quorum. A
            // deposed controller's stale removal relies on it (ARCHITECTURE.md).
            "--strict-reconfig-check=true".into(),
            // A member cut off from its peers campaigns in vain; without pre-vote each
            // campaign raises its term, and when it comes back that term deposes the
            // leader: seconds without one, caused by a member that was only away. etcd
            // 3.5 and later default to it; 3.4 does not (seen: a 3.4.23 member healed
            // after 12 s apart left its cluster without a leader for 3.2 s).
            "--pre-vote=true".into(),
            "--logger=zap".into(),
            "--log-outputs=stderr".into(),
        ];
        if m.tls {
            let tls = req.tls.ok_or_else(|| ProviderError::MissingCertificates {
                machine: m.name.clone(),
            })?;
            args.extend(self.write_tls(&m.name, tls)?);
        }
        args.extend(cluster_args(req));
        // etcd's v2 API stays closed: 3.4 opens it by default, and what a client writes
        // through it stays in the v2 store, on which 3.6 refuses to start. 3.6 has no
        // v2 API and no such flag.
        if m.version.minor_line() < quorum_core::chain::NO_V2_STORE_FROM {
            args.push("--enable-v2=false".into());
        }
        if let Some(q) = req.quota_backend_bytes {
            args.push(format!("--quota-backend-bytes={q}"));
        }
        if req.force_new_cluster {
            args.push("--force-new-cluster".into());
        }
        args.extend(self.etcd_flags.iter().cloned());
        Ok(args)
    }

    /// The command that runs `bin` with `args` for `m`: in its directory, its output to
    /// its log, in a session of its own.
    fn command(&self, m: &Machine, bin: &Path, args: &[String]) -> Result<Command> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(&m.name))
            .map_err(|e| io_error(m, "open log file", e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| io_error(m, "open log file", e))?;
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .current_dir(self.machine_dir(&m.name))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // etcd reads ETCD_* variables as flags and refuses a flag given twice.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(k);
            }
        }
        // SAFETY: setsid is async-signal-safe; it detaches etcd into its own session so
        // a signal to the controller's process group does not reach the machines.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(cmd)
    }

    /// Spawns `cmd` for `m`, with its pid file, a reaper that records how it exits, and
    /// the start in its history.
    fn spawn_recorded(&self, m: &Machine, mut cmd: Command) -> Result<i32> {
        let dir = self.machine_dir(&m.name);
        // The last exit describes the process started now once it ends, never an
        // earlier one (a process that outlives this one ends unseen: no file).
        data::clear_exit(&dir).map_err(|e| io_error(m, "clear the last exit", e))?;
        // A start after a stop quorum asked for (an in-place step's, a CA rotation's)
        // is recorded as planned (`data::read_planned_starts`).
        let planned =
            data::take_stop_request(&dir).map_err(|e| io_error(m, "read the stop request", e))?;
        let mut child = cmd.spawn().map_err(|e| io_error(m, "spawn etcd", e))?;
        let pid = child.id() as i32;
        // Write the pid file atomically: a reader never sees a partial pid.
        let tmp = dir.join("pid.tmp");
        fs::write(&tmp, pid.to_string())
            .and_then(|_| fs::rename(&tmp, self.pid_path(&m.name)))
            .map_err(|e| io_error(m, "write pid file", e))?;
        // Reap the child when it exits so it does not linger as a zombie while this
        // process lives; if this process dies first, init adopts and reaps it.
        let reaped_dir = dir.clone();
        std::thread::Builder::new()
            .name(format!("reap-{pid}"))
            .spawn(move || {
                if let Ok(status) = child.wait() {
                    // Best effort: what it says is for people and reports.
                    let _ = data::record_exit(&reaped_dir, status);
                }
            })
            .map_err(|e| io_error(m, "spawn reaper thread", e))?;
        // Every start is counted (a crash loop is seen from these); the process runs
        // either way, so a failure here is reported after the reaper is in place.
        data::record_start(&dir, now_unix_s(), planned)
            .map_err(|e| io_error(m, "record the start", e))?;
        Ok(pid)
    }

    /// Stops the machine's etcd: SIGTERM (and SIGCONT, for a paused one), then SIGKILL
    /// once etcd logs that its server has stopped (its data closed; what remains is a
    /// wait of up to 1 s for its peers' connections) or after the grace period. A
    /// machine that is not running is success.
    pub fn stop(&self, name: &str) -> Result<()> {
        let Some(pid) = self.live_pid(name) else {
            return Ok(());
        };
        let data_dir = self.data_dir(name);
        // Asked for: the next start is planned (best effort: a start not marked planned
        // is the worst that a failure here does).
        let _ = data::request_stop(&self.machine_dir(name));
        // Only what etcd logs after the signal counts.
        let log = self.log_path(name);
        let log_from = fs::metadata(&log).map_or(0, |m| m.len());
        signal(pid, libc::SIGTERM);
        // A stopped (SIGSTOP) process handles nothing, SIGTERM included, until it is
        // continued: without this it would take the whole grace, then SIGKILL.
        signal(pid, libc::SIGCONT);
        let deadline = Instant::now() + self.stop_grace;
        loop {
            if !process_is(pid, &data_dir) {
                return Ok(());
            }
            if Instant::now() >= deadline || logged_since(&log, log_from, SERVER_STOPPED_LOG_MARK) {
                break;
            }
            std::thread::sleep(Duration::from_millis(STOP_POLL_MS));
        }
        signal(pid, libc::SIGKILL);
        let kill_wait = Duration::from_secs(5);
        if wait_gone(pid, &data_dir, kill_wait) {
            return Ok(());
        }
        Err(ProviderError::Unkillable {
            machine: name.to_string(),
            pid,
            waited_ms: kill_wait.as_millis() as u64,
        })
    }

    /// Kills the machine's etcd at once (SIGKILL): for tests and teardown of a machine
    /// that is leaving anyway.
    pub fn kill(&self, name: &str) -> Result<()> {
        let Some(pid) = self.live_pid(name) else {
            return Ok(());
        };
        signal(pid, libc::SIGKILL);
        if wait_gone(pid, &self.data_dir(name), Duration::from_secs(5)) {
            Ok(())
        } else {
            Err(ProviderError::Unkillable {
                machine: name.to_string(),
                pid,
                waited_ms: 5_000,
            })
        }
    }

    /// Pauses the machine's etcd (SIGSTOP): for fault tests. It keeps its sockets, so
    /// connections to it are accepted and never answered. Returns once every thread of
    /// it has stopped (the kernel stops them as each is next scheduled; a busy machine
    /// could otherwise answer a last request after this returns), or after
    /// `PAUSE_WAIT_MS`. Not running is success.
    pub fn pause(&self, name: &str) {
        if let Some(pid) = self.live_pid(name) {
            signal(pid, libc::SIGSTOP);
            let deadline = Instant::now() + Duration::from_millis(PAUSE_WAIT_MS);
            while !all_threads_stopped(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(STOP_POLL_MS));
            }
        }
    }

    /// Resumes a paused machine's etcd (SIGCONT).
    pub fn resume(&self, name: &str) {
        if let Some(pid) = self.live_pid(name) {
            signal(pid, libc::SIGCONT);
        }
    }

    /// Deletes the machine: stops it if needed, then removes its directory. An absent
    /// machine is success.
    pub fn delete(&self, name: &str) -> Result<()> {
        self.stop(name)?;
        let io_err = |what, source| ProviderError::Io {
            machine: name.to_string(),
            what,
            source,
        };
        // Moved aside first: the thread that reaped the process may still be writing
        // its exit into the directory, and a file made during a removal fails it
        // ("directory not empty"). After the move such a write finds no directory.
        let gone = self.machines_dir.join(format!(
            ".{name}.deleting-{}-{}",
            std::process::id(),
            now_unix_s()
        ));
        match fs::rename(self.machine_dir(name), &gone) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("move machine directory aside", e)),
        }
        let mut last = None;
        for attempt in 0..DELETE_ATTEMPTS {
            match fs::remove_dir_all(&gone) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(STOP_POLL_MS << attempt));
        }
        Err(io_err(
            "remove machine directory",
            last.unwrap_or_else(|| io::Error::other("gave up")),
        ))
    }

    /// Fences the machine for good: stops it if needed, then moves its whole directory
    /// (data, certificates, pid file) to `<home>/fenced/<name>-<unix s>`, where no start
    /// finds it. Its etcd, started again by hand with its old flags, finds neither its
    /// data nor its keys. Moved, not removed: after a quorum loss it may be the last
    /// copy of something a person wants back. Returns where it went; an absent machine
    /// is success (`None`).
    pub fn fence(&self, name: &str) -> Result<Option<PathBuf>> {
        self.stop(name)?;
        let from = self.machine_dir(name);
        if !from.exists() {
            return Ok(None);
        }
        let io_err = |what, source| ProviderError::Io {
            machine: name.to_string(),
            what,
            source,
        };
        let fenced = self.fenced_dir();
        quorum_pki::create_private_dir(&fenced)
            .map_err(|e| io_err("create fenced directory", e))?;
        // A second fence of the same name within a second gets its own place.
        let stamp = now_unix_s();
        let to = (0..FENCE_NAME_ATTEMPTS)
            .map(|i| fenced.join(quorum_core::fenced::fenced_name(name, stamp, i)))
            .find(|p| !p.exists())
            .ok_or_else(|| {
                io_err(
                    "find a free name under fenced/",
                    io::Error::from(io::ErrorKind::AlreadyExists),
                )
            })?;
        fs::rename(&from, &to).map_err(|e| io_err("move machine directory to fenced/", e))?;
        Ok(Some(to))
    }

    /// Where fenced machines' directories go: beside `machines/`.
    pub fn fenced_dir(&self) -> PathBuf {
        match self.machines_dir.parent() {
            Some(home) => home.join("fenced"),
            None => self.machines_dir.join(".fenced"),
        }
    }

    /// The fenced directories of control plane `cp` (all with `None`), by name, with
    /// when each was fenced. Names that are no fence's are left out.
    pub fn list_fenced(&self, cp: Option<&str>) -> Vec<quorum_core::fenced::FencedSeen> {
        use quorum_core::fenced::{control_plane_of, parse_fenced, FencedSeen};
        let mut out: Vec<FencedSeen> = fs::read_dir(self.fenced_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter_map(|name| {
                let (machine, at) = parse_fenced(&name)?;
                let mine = cp.is_none_or(|cp| control_plane_of(machine) == Some(cp));
                mine.then(|| FencedSeen {
                    fenced_at_unix_s: at,
                    name: name.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| (a.fenced_at_unix_s, &a.name).cmp(&(b.fenced_at_unix_s, &b.name)));
        out
    }

    /// Removes the fenced directory `name` (a name `list_fenced` gave); gone already is
    /// success. A name that is no fence's, or that leaves the fenced directory, is
    /// refused.
    pub fn remove_fenced(&self, name: &str) -> Result<()> {
        let ok = quorum_core::fenced::parse_fenced(name).is_some()
            && !name.contains('/')
            && !name.starts_with('.');
        if !ok {
            return Err(ProviderError::Io {
                machine: name.to_string(),
                what: "remove a fenced directory (not a fenced directory's name)",
                source: io::Error::from(io::ErrorKind::InvalidInput),
            });
        }
        match fs::remove_dir_all(self.fenced_dir().join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(ProviderError::Io {
                machine: name.to_string(),
                what: "remove a fenced directory",
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// The bytes under `path` (a fenced directory's size, for people), bounded.
    pub fn size_of(path: &Path) -> u64 {
        fn walk(p: &Path, left: &mut u32) -> u64 {
            if *left == 0 {
                return 0;
            }
            *left -= 1;
            match fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => fs::read_dir(p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| walk(&e.path(), left))
                    .sum(),
                Ok(m) => m.len(),
                Err(_) => 0,
            }
        }
        let mut left = MAX_SIZE_ENTRIES;
        walk(path, &mut left)
    }

    /// Names of the machine directories present (for finding leftovers).
    pub fn list(&self) -> Vec<String> {
        let mut out: Vec<String> = fs::read_dir(&self.machines_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            // Directories being deleted (and `.fenced` without a home) are no machines.
            .filter(|n| !n.starts_with('.'))
            .collect();
        out.sort();
        out
    }
}

/// The most entries `size_of` looks at (a size is for people: bounded, not exact).
const MAX_SIZE_ENTRIES: u32 = 100_000;

use quorum_clock::now_unix_s;

fn signal(pid: i32, sig: i32) {
    assert!(pid > 0, "never signal a process group or every process");
    // SAFETY: plain syscall on a positive pid; errors (already gone) are ignored.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Whether every thread of `pid` is stopped by a signal (state `T` in
/// `/proc/<pid>/task/<tid>/stat`). A process that is gone counts as stopped.
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        let Ok(stat) = fs::read_to_string(t.path().join("stat")) else {
            // The thread exited meanwhile.
            return true;
        };
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        matches!(state, Some("T") | Some("Z") | Some("X") | None)
    })
}

/// The version of the etcd binary process `pid` runs: the name of the directory its
/// program (`argv[0]`, as `start` gave it) lies in.
fn binary_version(pid: i32) -> Option<Version> {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let program = cmdline.split(|b| *b == 0).next()?;
    let program = Path::new(std::str::from_utf8(program).ok()?);
    program.parent()?.file_name()?.to_str()?.parse().ok()
}

/// Is `pid` alive (not a zombie) and an etcd using `data_dir`?
fn process_is(pid: i32, data_dir: &Path) -> bool {
    if pid <= 0 {
        return false;
    }
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state is the first field after the parenthesised command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, Some("Z") | Some("X") | None) {
        return false;
    }
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let want = format!("--data-dir={}", data_dir.display());
    cmdline.split(|b| *b == 0).any(|arg| arg == want.as_bytes())
}

/// Whether the log at `path` holds `mark` after its first `from` bytes.
fn logged_since(path: &Path, from: u64, mark: &str) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = fs::File::open(path) else {
        return false;
    };
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err() || f.read_to_end(&mut buf).is_err() {
        return false;
    }
    String::from_utf8_lossy(&buf).contains(mark)
}

fn wait_gone(pid: i32, data_dir: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !process_is(pid, data_dir) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(STOP_POLL_MS));
    }
}

/// An I/O failure of machine `m`'s, saying what was being done.
fn io_error(m: &Machine, what: &'static str, source: io::Error) -> ProviderError {
    ProviderError::Io {
        machine: m.name.clone(),
        what,
        source,
    }
}

/// `--initial-cluster` and `--initial-cluster-state`, when the request names a cluster
/// to join or form (none: the member's data says it).
fn cluster_args(req: &StartRequest<'_>) -> Vec<String> {
    if req.initial_cluster.is_empty() {
        return Vec::new();
    }
    let cluster = req
        .initial_cluster
        .iter()
        .map(|im| format!("{}={}", im.name, im.peer_url))
        .collect::<Vec<_>>()
        .join(",");
    let state = match req.state {
        ClusterState::New => "new",
        ClusterState::Existing => "existing",
    };
    vec![
        format!("--initial-cluster={cluster}"),
        format!("--initial-cluster-state={state}"),
    ]
}
