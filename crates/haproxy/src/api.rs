//! HAProxy's runtime API over its unix stats socket: one command per connection
//! (write `cmd\n`, read to EOF), the whole exchange bounded by one deadline.

use crate::HaproxyError;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The longest answer read from the socket (a `show servers state` of a few thousand
/// servers fits many times over); longer is `Parse`, not an unbounded read.
const MAX_ANSWER_BYTES: usize = 8 << 20;

/// `srv_admin_state` bits that mean maintenance: FMAINT (forced, `set server ... state
/// maint` and a new dynamic server), IMAINT (inherited from a tracked server), CMAINT
/// (`disabled` in the configuration), RMAINT (address resolution failed).
const ADMIN_MAINT_MASK: u32 = 0x01 | 0x02 | 0x04 | 0x20;
/// `srv_op_state` of a running server (SRV_ST_RUNNING).
const OP_STATE_RUNNING: u32 = 2;

const ANSWER_NO_SUCH_SERVER: &str = "No such server.";
const ANSWER_ALREADY_EXISTS: &str = "Already exists a server with the same name in backend.";
const ANSWER_REGISTERED: &str = "New server registered.";
const ANSWER_DELETED: &str = "Server deleted.";

/// One server of a backend, as `show servers state` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub name: String,
    pub addr: SocketAddr,
    /// Any maintenance bit is set in `srv_admin_state`: the server takes no new traffic
    /// (and only such a server can be deleted).
    pub maintenance: bool,
    /// `srv_op_state` is 2 (running). Without health checks (quorum adds servers without
    /// `check`) this is true for every server not in maintenance.
    pub up: bool,
}

/// How the calls through a backend reached its servers, from `show stat` (counters
/// since HAProxy started, servers deleted since included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendConnections {
    /// Calls (HTTP/2 streams) sent to the backend's servers (`stot`).
    pub calls: u64,
    /// Connections opened to the servers (`connect`).
    pub opened: u64,
    /// Calls sent over a connection that was already open (`reuse`).
    pub reused: u64,
}

/// TLS towards a backend server: the names under which a CA file and a client
/// certificate were loaded into HAProxy's memory (`load_ca_file`, `load_certificate`).
/// HAProxy 2.6 reads no file when a server is added at run time, so both must be
/// loaded first; loading them through the socket keeps the client key off the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTls {
    pub ca_file: String,
    pub crt: String,
}

/// A client of HAProxy's runtime API on a unix socket.
#[derive(Clone, Debug)]
pub struct RuntimeApi {
    socket: PathBuf,
    timeout_ms: u64,
}

impl RuntimeApi {
    /// A client of the runtime socket `socket`; every command (connect, write and read
    /// together) must finish within `timeout_ms`.
    pub fn new(socket: impl Into<PathBuf>, timeout_ms: u64) -> Self {
        Self {
            socket: socket.into(),
            timeout_ms,
        }
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends one command and returns HAProxy's raw answer. An `Unknown command` or
    /// `Permission denied` answer is `Refused`; any other answer is returned as is for
    /// the caller to interpret.
    pub fn command(&self, cmd: &str) -> Result<String, HaproxyError> {
        if cmd.contains(['\n', '\r', '\0']) {
            return Err(HaproxyError::InvalidArgument(format!(
                "a runtime command is one line: {cmd:?}"
            )));
        }
        let answer = self.exchange(cmd)?;
        let trimmed = answer.trim_start();
        if trimmed.starts_with("Unknown command") || trimmed.starts_with("Permission denied") {
            return Err(refused(cmd, &answer));
        }
        Ok(answer)
    }

    /// The servers of `backend`, in HAProxy's order. A missing backend is `Refused`.
    pub fn servers(&self, backend: &str) -> Result<Vec<Server>, HaproxyError> {
        check_name("backend", backend)?;
        let cmd = format!("show servers state {backend}");
        let answer = self.command(&cmd)?;
        if answer.lines().next().map(str::trim) != Some("1") {
            // Not the state dump (version line "1"): an error message such as "Can't
            // find backend.".
            return Err(refused(&cmd, &answer));
        }
        parse_servers_state(&answer, backend)
    }

    /// How the calls through `backend` reached its servers: opened versus reused
    /// connections. HAProxy 2.6 never reuses a connection to a server added at run time
    /// (fixed upstream in 3.0), so with TLS each call costs a handshake; this shows it.
    pub fn backend_connections(&self, backend: &str) -> Result<BackendConnections, HaproxyError> {
        check_name("backend", backend)?;
        parse_backend_connections(&self.command("show stat")?, backend)
    }

    /// Adds server `name` at `addr` to `backend` and enables it (a new dynamic server
    /// starts in maintenance): `proto h2` in cleartext, or with `tls` TLS verified
    /// against the loaded CA, presenting the loaded client certificate, h2 by ALPN. A
    /// server of that name already present at the same address counts as added (it is
    /// only enabled); at another address it is `Refused` (drain and delete it first).
    pub fn add_server(
        &self,
        backend: &str,
        name: &str,
        addr: SocketAddr,
        tls: Option<&ServerTls>,
    ) -> Result<(), HaproxyError> {
        check_name("backend", backend)?;
        check_name("server", name)?;
        let cmd = match tls {
            None => format!("add server {backend}/{name} {addr} proto h2"),
            Some(t) => {
                check_name("ca-file", &t.ca_file)?;
                check_name("certificate", &t.crt)?;
                format!(
                    "add server {backend}/{name} {addr} ssl verify required ca-file {} crt {} alpn h2",
                    t.ca_file, t.crt
                )
            }
        };
        let answer = self.command(&cmd)?;
        match answer.trim() {
            ANSWER_REGISTERED => {}
            ANSWER_ALREADY_EXISTS => {
                let present = self.servers(backend)?;
                match present.iter().find(|s| s.name == name) {
                    Some(s) if s.addr == addr => {}
                    Some(s) => {
                        return Err(HaproxyError::Refused {
                            command: cmd,
                            answer: format!("{ANSWER_ALREADY_EXISTS} (at {}, not {addr})", s.addr),
                        })
                    }
                    // Deleted in between: the caller's next round adds it again.
                    None => return Err(refused(&cmd, &answer)),
                }
            }
            _ => return Err(refused(&cmd, &answer)),
        }
        self.enable_server(backend, name)
    }

    /// Enables server `name` (clears forced maintenance: it takes new traffic). A server
    /// that does not exist is `Refused` ("No such server."): it is not serving.
    pub fn enable_server(&self, backend: &str, name: &str) -> Result<(), HaproxyError> {
        check_name("backend", backend)?;
        check_name("server", name)?;
        self.expect(&format!("enable server {backend}/{name}"), &[""], &[])
            .map(|_| ())
    }

    /// Puts server `name` in maintenance (`set server ... state maint`): no new streams
    /// go to it; the streams it carries go on. Idempotent; a server that does not exist
    /// counts as done.
    pub fn set_maintenance(&self, backend: &str, name: &str) -> Result<(), HaproxyError> {
        check_name("backend", backend)?;
        check_name("server", name)?;
        self.expect(
            &format!("set server {backend}/{name} state maint"),
            &[""],
            &[ANSWER_NO_SUCH_SERVER],
        )
        .map(|_| ())
    }

    /// Takes server `name` out of rotation: maintenance (`set_maintenance`), then
    /// `shutdown sessions server` (ends the streams it still carries, so it can be
    /// deleted at once). Idempotent; a server that does not exist counts as drained.
    pub fn drain_server(&self, backend: &str, name: &str) -> Result<(), HaproxyError> {
        self.set_maintenance(backend, name)?;
        self.expect(
            &format!("shutdown sessions server {backend}/{name}"),
            &[""],
            &[ANSWER_NO_SUCH_SERVER],
        )
        .map(|_| ())
    }

    /// Deletes server `name`. HAProxy deletes only a server in maintenance with no
    /// connection attached (idle ones included); otherwise the answer is `Refused` with
    /// HAProxy's reason, and the caller retries later. A server that does not exist
    /// counts as deleted.
    pub fn delete_server(&self, backend: &str, name: &str) -> Result<(), HaproxyError> {
        check_name("backend", backend)?;
        check_name("server", name)?;
        // HAProxy 2.6 can crash when a server is deleted while a stream still refers to
        // it (for example a request waiting to retry after a refused connection; upstream
        // issues 2298 and 2323, fixed in 2.9): delete only once no stream names it.
        let streams = self.command("show sess")?;
        let mark = format!("be={backend} srv={name} ");
        if streams.lines().any(|l| l.contains(&mark)) {
            return Err(HaproxyError::Refused {
                command: format!("del server {backend}/{name}"),
                answer: "streams still refer to the server; deleting it now can crash HAProxy 2.6"
                    .into(),
            });
        }
        self.expect(
            &format!("del server {backend}/{name}"),
            &[ANSWER_DELETED],
            &[ANSWER_NO_SUCH_SERVER],
        )
        .map(|_| ())
    }

    /// Loads (or replaces) a certificate with its key (`pem`: certificate then key) into
    /// HAProxy's memory under `name`: `new ssl cert` (already there is fine), `set ssl
    /// cert`, `commit ssl cert`. Servers using it present the new one on new connections.
    pub fn load_certificate(&self, name: &str, pem: &str) -> Result<(), HaproxyError> {
        self.load("cert", name, pem)
    }

    /// Loads (or replaces) a CA bundle under `name`, like `load_certificate`.
    pub fn load_ca_file(&self, name: &str, pem: &str) -> Result<(), HaproxyError> {
        self.load("ca-file", name, pem)
    }

    /// The names of the certificates (`kind` "cert") or CA files ("ca-file") loaded.
    pub fn loaded(&self, kind: &str) -> Result<Vec<String>, HaproxyError> {
        let answer = self.command(&format!("show ssl {kind}"))?;
        Ok(answer
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            // `show ssl ca-file` adds " - N certificate(s)".
            .map(|l| l.split(" - ").next().unwrap_or(l).to_string())
            .collect())
    }

    fn load(&self, kind: &str, name: &str, pem: &str) -> Result<(), HaproxyError> {
        check_name(kind, name)?;
        let created = self.command(&format!("new ssl {kind} {name}"))?;
        let created_ok = created.contains("New ")
            || created.contains("already exists")
            || created.contains("Already exists");
        if !created_ok {
            return Err(refused(&format!("new ssl {kind} {name}"), &created));
        }
        let set = format!("set ssl {kind} {name}");
        let answer = self.command_with_payload(&set, pem)?;
        // "Transaction created for ..." or "transaction updated for ..." (HAProxy 2.6).
        if !answer.to_ascii_lowercase().contains("transaction") {
            return Err(refused(&set, &answer));
        }
        let commit = format!("commit ssl {kind} {name}");
        let answer = self.command(&commit)?;
        if !answer.contains("Success!") {
            return Err(refused(&commit, &answer));
        }
        Ok(())
    }

    /// A command with a multi-line payload (`cmd <<`, the lines, an empty line). The
    /// payload must not hold an empty line (it would end the payload early).
    fn command_with_payload(&self, cmd: &str, payload: &str) -> Result<String, HaproxyError> {
        let payload = payload.trim_end();
        if cmd.contains(['\n', '\r', '\0'])
            || payload.contains('\0')
            || payload.lines().any(|l| l.trim().is_empty())
        {
            return Err(HaproxyError::InvalidArgument(format!(
                "a payload for {cmd:?} must hold no empty line"
            )));
        }
        let answer = self.exchange(&format!("{cmd} <<\n{payload}\n"))?;
        if answer.trim_start().starts_with("Unknown command") {
            return Err(refused(cmd, &answer));
        }
        Ok(answer)
    }

    /// Sends `cmd`; an answer (trimmed) in `ok` is `Ok(true)`, one in `already` (the
    /// thing is already done, or moot) is `Ok(false)`, anything else is `Refused`.
    fn expect(&self, cmd: &str, ok: &[&str], already: &[&str]) -> Result<bool, HaproxyError> {
        let answer = self.command(cmd)?;
        let trimmed = answer.trim();
        if ok.contains(&trimmed) {
            Ok(true)
        } else if already.contains(&trimmed) {
            Ok(false)
        } else {
            Err(refused(cmd, &answer))
        }
    }

    /// One connection: connect, write `cmd\n`, read to EOF, all before one deadline.
    fn exchange(&self, cmd: &str) -> Result<String, HaproxyError> {
        let deadline = Instant::now() + Duration::from_millis(self.timeout_ms);
        let timeout = || HaproxyError::Timeout {
            socket: self.socket.clone(),
            timeout_ms: self.timeout_ms,
        };
        let io_err = |source: io::Error| {
            if is_timeout(&source) {
                timeout()
            } else {
                HaproxyError::Io {
                    socket: self.socket.clone(),
                    source,
                }
            }
        };
        let mut stream = match connect_unix(&self.socket, remaining(deadline)) {
            Ok(s) => s,
            Err(e) if is_timeout(&e) => return Err(timeout()),
            Err(source) => {
                return Err(HaproxyError::Connect {
                    socket: self.socket.clone(),
                    source,
                })
            }
        };
        stream
            .set_write_timeout(Some(remaining(deadline)))
            .map_err(io_err)?;
        stream
            .write_all(format!("{cmd}\n").as_bytes())
            .map_err(io_err)?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            if Instant::now() >= deadline {
                return Err(timeout());
            }
            stream
                .set_read_timeout(Some(remaining(deadline)))
                .map_err(io_err)?;
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buf[..n]);
                    if answer.len() > MAX_ANSWER_BYTES {
                        return Err(HaproxyError::Parse(format!(
                            "answer to {cmd:?} is longer than {MAX_ANSWER_BYTES} bytes"
                        )));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(e)),
            }
        }
        String::from_utf8(answer)
            .map_err(|_| HaproxyError::Parse(format!("answer to {cmd:?} is not UTF-8")))
    }
}

/// The column names of an answer's `# name name ...` header line, so that columns are
/// found by name (HAProxy adds columns between versions).
struct Columns<'a> {
    names: Vec<&'a str>,
    answer: &'static str,
}

impl<'a> Columns<'a> {
    /// `line` split on `sep` (`None`: on whitespace); `answer` names the command.
    fn parse(
        line: Option<&'a str>,
        answer: &'static str,
        sep: Option<char>,
    ) -> Result<Self, HaproxyError> {
        let Some(h) = line.and_then(|h| h.strip_prefix('#')) else {
            return Err(HaproxyError::Parse(format!(
                "{answer}: no '# name ...' header line"
            )));
        };
        let names = match sep {
            Some(c) => h.split(c).map(str::trim).collect(),
            None => h.split_whitespace().collect(),
        };
        Ok(Columns { names, answer })
    }

    fn index(&self, name: &str) -> Result<usize, HaproxyError> {
        self.names
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| HaproxyError::Parse(format!("{}: no {name} column", self.answer)))
    }
}

/// Parses the `BACKEND` row of `backend` out of a `show stat` answer (CSV whose first
/// line is `# pxname,svname,...`); columns are found by their header names.
pub fn parse_backend_connections(
    answer: &str,
    backend: &str,
) -> Result<BackendConnections, HaproxyError> {
    let mut lines = answer.lines().map(str::trim).filter(|l| !l.is_empty());
    let header = Columns::parse(lines.next(), "show stat", Some(','))?;
    let col = |name: &str| header.index(name);
    let (px, sv) = (col("pxname")?, col("svname")?);
    let (stot, connect, reuse) = (col("stot")?, col("connect")?, col("reuse")?);
    let row: Vec<&str> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f.get(px) == Some(&backend) && f.get(sv) == Some(&"BACKEND"))
        .ok_or_else(|| HaproxyError::Parse(format!("show stat: no backend {backend:?}")))?;
    let number = |i: usize, what: &str| -> Result<u64, HaproxyError> {
        let field = row.get(i).copied().unwrap_or_default();
        // An empty counter is one HAProxy does not keep for this row: zero.
        if field.is_empty() {
            return Ok(0);
        }
        field.parse().map_err(|_| {
            HaproxyError::Parse(format!(
                "show stat: backend {backend:?} has {what} {field:?}"
            ))
        })
    };
    Ok(BackendConnections {
        calls: number(stot, "stot")?,
        opened: number(connect, "connect")?,
        reused: number(reuse, "reuse")?,
    })
}

/// Parses a `show servers state` answer: the version line `1`, a `# be_id be_name ...`
/// header, then one line per server. Columns are found by their header names, not
/// positions; lines of other backends than `backend` are skipped.
pub fn parse_servers_state(answer: &str, backend: &str) -> Result<Vec<Server>, HaproxyError> {
    let mut lines = answer.lines().map(str::trim).filter(|l| !l.is_empty());
    match lines.next() {
        Some("1") => {}
        other => {
            return Err(HaproxyError::Parse(format!(
                "show servers state: expected the format version 1, got {other:?}"
            )))
        }
    }
    let header = Columns::parse(lines.next(), "show servers state", None)?;
    let col = |name: &str| header.index(name);
    let (be_name, srv_name, srv_addr, srv_port, op_state, admin_state) = (
        col("be_name")?,
        col("srv_name")?,
        col("srv_addr")?,
        col("srv_port")?,
        col("srv_op_state")?,
        col("srv_admin_state")?,
    );
    let mut out = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() != header.names.len() {
            return Err(HaproxyError::Parse(format!(
                "show servers state: {} fields for {} columns: {line:?}",
                fields.len(),
                header.names.len()
            )));
        }
        if fields[be_name] != backend {
            continue;
        }
        let number = |i: usize, what: &str| {
            fields[i].parse::<u32>().map_err(|_| {
                HaproxyError::Parse(format!("show servers state: {what} {:?}", fields[i]))
            })
        };
        let ip: IpAddr = fields[srv_addr].parse().map_err(|_| {
            HaproxyError::Parse(format!(
                "show servers state: server {} has address {:?}",
                fields[srv_name], fields[srv_addr]
            ))
        })?;
        let port = fields[srv_port].parse::<u16>().map_err(|_| {
            HaproxyError::Parse(format!(
                "show servers state: server {} has port {:?}",
                fields[srv_name], fields[srv_port]
            ))
        })?;
        out.push(Server {
            name: fields[srv_name].to_string(),
            addr: SocketAddr::new(ip, port),
            maintenance: number(admin_state, "srv_admin_state")? & ADMIN_MAINT_MASK != 0,
            up: number(op_state, "srv_op_state")? == OP_STATE_RUNNING,
        });
    }
    Ok(out)
}

/// HAProxy's proxy and server names: letters, digits, `.`, `-`, `_`, `:`. Anything else
/// (spaces, `;`, `/`, newlines) could change what a command means.
fn check_name(what: &str, name: &str) -> Result<(), HaproxyError> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'));
    if valid {
        Ok(())
    } else {
        Err(HaproxyError::InvalidArgument(format!(
            "{what} name {name:?}: HAProxy names use only letters, digits, '.', '-', '_', ':'"
        )))
    }
}

fn refused(cmd: &str, answer: &str) -> HaproxyError {
    HaproxyError::Refused {
        command: cmd.to_string(),
        answer: answer.trim().to_string(),
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Time left before `deadline`, at least 1 ms (a zero socket timeout means "none").
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Connects a unix stream socket within `timeout`. std's `UnixStream::connect` has no
/// timeout and blocks while the listener's backlog is full; Linux bounds a blocking
/// unix connect by the socket's SO_SNDTIMEO (then EAGAIN), so set that first.
fn connect_unix(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a unix socket path is at most {} bytes without NUL",
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: plain syscall; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` outlives the call and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            raw,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `addr` is a valid sockaddr_un and its size is passed.
    let rc = unsafe {
        libc::connect(
            raw,
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        // EAGAIN: the backlog stayed full until SO_SNDTIMEO expired.
        if e.raw_os_error() == Some(libc::EAGAIN) {
            return Err(io::Error::new(io::ErrorKind::TimedOut, e));
        }
        return Err(e);
    }
    Ok(UnixStream::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port";

    /// A `show stat` answer of HAProxy 2.6.12 (from a benchmark run), cut to one
    /// server; the backend row says 5927 calls over 5927 new connections.
    const SHOW_STAT: &str = concat!(
        "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,check_desc,agent_desc,check_rise,check_fall,check_health,agent_rise,agent_fall,agent_health,addr,cookie,mode,algo,conn_rate,conn_rate_max,conn_tot,intercepted,dcon,dses,wrew,connect,reuse,cache_lookups,cache_hits,srv_icur,src_ilim,qtime_max,ctime_max,rtime_max,ttime_max,eint,idle_conn_cur,safe_conn_cur,used_conn_cur,need_conn_est,uweight,agg_server_status,agg_server_check_status,agg_check_status,-,ssl_sess,ssl_reused_sess,ssl_failed_handshake,h2_headers_rcvd,h2_data_rcvd,h2_settings_rcvd,h2_rst_stream_rcvd,h2_goaway_rcvd,h2_detected_conn_protocol_errors,h2_detected_strm_protocol_errors,h2_rst_stream_resp,h2_goaway_resp,h2_open_connections,h2_backend_open_streams,h2_total_connections,h2_backend_total_streams,h1_open_connections,h1_open_streams,h1_total_connections,h1_total_streams,h1_bytes_in,h1_bytes_out,h1_spliced_bytes_in,h1_spliced_bytes_out,\n",
        "etcd,FRONTEND,,,8,8,9986,8,1171480,700190,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,8,,,,0,5921,0,0,0,0,,490,496,5927,,,0,0,0,0,,,,,,,,,,,,,,,,,,,,,http,,0,8,8,0,0,0,0,,,0,0,,,,,,,0,,,,,,,,,-,0,0,0,5927,11854,24,0,0,0,0,0,0,8,6,8,5927,0,0,0,0,0,0,0,0,\n",
        "etcd,bench-safe-haproxy-1,0,0,2,4,,1973,390056,232492,,0,,0,0,0,0,no check,1,1,0,,,14,,,1,3,1,,1973,,2,163,,165,,,,0,1971,0,0,0,0,,,,1971,0,0,,,,,0,,,0,2,4,22,,,,,,,,,,,,127.178.192.2:2379,,http,,,,,,,,0,1973,0,,,0,64,0,42,95,149,0,0,0,2,4,1,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,\n",
        "etcd,BACKEND,0,0,6,8,999,5927,1171480,700190,0,0,,0,0,0,0,UP,3,3,0,,0,14,0,,1,3,0,,5927,,1,490,,496,,,,0,5921,0,0,0,0,,,,5921,0,0,0,0,0,0,0,,,0,2,4,22,,,,,,,,,,,,,,http,roundrobin,,,,,,,0,5927,0,0,0,,,0,42,95,161,0,,,,,3,0,0,0,-,0,0,0,17735,5921,17775,0,0,0,0,0,0,6,6,5927,5927,0,0,0,0,0,0,0,0,\n",
        "\n"
    );

    #[test]
    fn backend_connections_come_from_the_backend_row() {
        assert_eq!(
            parse_backend_connections(SHOW_STAT, "etcd").unwrap(),
            BackendConnections {
                calls: 5927,
                opened: 5927,
                reused: 0
            }
        );
        let err = parse_backend_connections(SHOW_STAT, "other").unwrap_err();
        assert!(err.to_string().contains("no backend \"other\""), "{err}");
        let err = parse_backend_connections("etcd,BACKEND,1\n", "etcd").unwrap_err();
        assert!(err.to_string().contains("header"), "{err}");
        let no_reuse = "# pxname,svname,stot,connect\netcd,BACKEND,3,3\n";
        let err = parse_backend_connections(no_reuse, "etcd").unwrap_err();
        assert!(err.to_string().contains("no reuse column"), "{err}");
        let bad = "# pxname,svname,stot,connect,reuse\netcd,BACKEND,3,x,\n";
        let err = parse_backend_connections(bad, "etcd").unwrap_err();
        assert!(err.to_string().contains("connect \"x\""), "{err}");
        let empty = "# pxname,svname,stot,connect,reuse\netcd,BACKEND,3,3,\n";
        assert_eq!(parse_backend_connections(empty, "etcd").unwrap().reused, 0);
    }

    fn sample(lines: &[&str]) -> String {
        let mut s = format!("1\n{HEADER}\n");
        for l in lines {
            s.push_str(l);
            s.push('\n');
        }
        s.push('\n');
        s
    }

    #[test]
    fn parses_an_empty_backend() {
        assert_eq!(parse_servers_state(&sample(&[]), "etcd").unwrap(), vec![]);
    }

    #[test]
    fn parses_servers_by_header_names() {
        let text = sample(&[
            // Just added: stopped, forced maintenance.
            "3 etcd 1 m2 127.0.9.2 0 1 1 1 0 1 0 0 0 0 0 0 - 2379 - 0 0 - - 0",
            // Enabled.
            "3 etcd 2 m1 127.0.9.1 2 0 1 1 12 1 0 0 0 0 0 0 - 2379 - 0 0 - - 0",
            // Maintenance inherited / from resolution, and an IPv6 address.
            "3 etcd 3 m3 ::1 2 32 1 1 0 1 0 0 0 0 0 0 - 12379 - 0 0 - - 0",
            // Draining (0x08) is not maintenance.
            "3 etcd 4 m4 127.0.9.4 2 8 1 1 0 1 0 0 0 0 0 0 - 2379 - 0 0 - - 0",
            // Another backend's server is skipped.
            "4 other 1 x 127.0.9.9 2 0 1 1 0 1 0 0 0 0 0 0 - 2379 - 0 0 - - 0",
        ]);
        let got = parse_servers_state(&text, "etcd").unwrap();
        let want = vec![
            Server {
                name: "m2".into(),
                addr: "127.0.9.2:2379".parse().unwrap(),
                maintenance: true,
                up: false,
            },
            Server {
                name: "m1".into(),
                addr: "127.0.9.1:2379".parse().unwrap(),
                maintenance: false,
                up: true,
            },
            Server {
                name: "m3".into(),
                addr: "[::1]:12379".parse().unwrap(),
                maintenance: true,
                up: true,
            },
            Server {
                name: "m4".into(),
                addr: "127.0.9.4:2379".parse().unwrap(),
                maintenance: false,
                up: true,
            },
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn finds_columns_by_name_not_position() {
        let text = "1\n# srv_port srv_admin_state be_name srv_op_state srv_name srv_addr\n2379 1 etcd 0 m1 10.0.0.1\n";
        assert_eq!(
            parse_servers_state(text, "etcd").unwrap(),
            vec![Server {
                name: "m1".into(),
                addr: "10.0.0.1:2379".parse().unwrap(),
                maintenance: true,
                up: false,
            }]
        );
    }

    #[test]
    fn rejects_what_is_not_a_state_dump() {
        for text in [
            "Can't find backend.\n\n",
            "",
            "2\n# be_name\n",
            "1\nno header\n",
            "1\n# be_name srv_name srv_addr srv_op_state srv_admin_state\n",
        ] {
            assert!(
                matches!(
                    parse_servers_state(text, "etcd"),
                    Err(HaproxyError::Parse(_))
                ),
                "{text:?}"
            );
        }
        // A short line, a bad address, a bad port.
        for line in [
            "3 etcd 1 m2 127.0.9.2 0 1",
            "3 etcd 1 m2 host.example 0 1 1 1 0 1 0 0 0 0 0 0 - 2379 - 0 0 - - 0",
            "3 etcd 1 m2 127.0.9.2 0 1 1 1 0 1 0 0 0 0 0 0 - 0x95 - 0 0 - - 0",
        ] {
            assert!(
                matches!(
                    parse_servers_state(&sample(&[line]), "etcd"),
                    Err(HaproxyError::Parse(_))
                ),
                "{line:?}"
            );
        }
    }

    #[test]
    fn names_that_could_inject_commands_are_rejected() {
        let api = RuntimeApi::new("/nonexistent/quorum-haproxy.sock", 100);
        let addr: SocketAddr = "127.0.0.1:2379".parse().unwrap();
        for bad in ["", "m1;del server etcd/m2", "m 1", "a/b", "m1\n"] {
            assert!(matches!(
                api.add_server("etcd", bad, addr, None),
                Err(HaproxyError::InvalidArgument(_))
            ));
            assert!(matches!(
                api.drain_server(bad, "m1"),
                Err(HaproxyError::InvalidArgument(_))
            ));
        }
        assert!(matches!(
            api.command("show info\nshow stat"),
            Err(HaproxyError::InvalidArgument(_))
        ));
    }
}
