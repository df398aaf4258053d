//! An HAProxy process run as a child, for tests and the benchmark.

use crate::{HaproxyError, RuntimeApi};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Time HAProxy gets between SIGTERM and SIGKILL.
const STOP_GRACE_MS: u64 = 5_000;
/// Time to wait for the process to be gone after SIGKILL.
const KILL_WAIT_MS: u64 = 5_000;
/// How often start and stop poll for a condition.
const POLL_MS: u64 = 10;
/// How much of the log an `Exited` error quotes.
const LOG_TAIL_BYTES: usize = 2_000;

/// The HAProxy binary: `$QUORUM_HAPROXY`, else `/usr/sbin/haproxy`.
pub fn haproxy_binary() -> PathBuf {
    std::env::var_os("QUORUM_HAPROXY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/haproxy"))
}

/// An HAProxy process started by this process (in the foreground mode, `-db`, as a
/// child), stopped on `stop()` or when dropped.
#[derive(Debug)]
pub struct HaproxyProcess {
    child: Option<Child>,
    pid: u32,
    log: PathBuf,
}

impl HaproxyProcess {
    /// Writes `config` to `dir/haproxy.cfg`, checks it with `haproxy -c`, starts
    /// `haproxy -f dir/haproxy.cfg -db` (output appended to `dir/haproxy.log`) and waits
    /// until its runtime socket `socket` (the one `config` declares) answers. All of it
    /// within `timeout_ms`; on any failure the process is stopped again.
    pub fn start(
        dir: &Path,
        config: &str,
        socket: &Path,
        timeout_ms: u64,
    ) -> Result<Self, HaproxyError> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let cfg = dir.join("haproxy.cfg");
        let log = dir.join("haproxy.log");
        fs::create_dir_all(dir).map_err(|e| process_err(format!("create {}", dir.display()), e))?;
        fs::write(&cfg, config).map_err(|e| process_err(format!("write {}", cfg.display()), e))?;
        check_config(&cfg, &dir.join("haproxy-check.log"), deadline, timeout_ms)?;

        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| process_err(format!("open {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| process_err(format!("open {}", log.display()), e))?;
        let child = Command::new(haproxy_binary())
            .arg("-f")
            .arg(&cfg)
            .arg("-db")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| process_err(format!("spawn {}", haproxy_binary().display()), e))?;
        let mut process = Self {
            pid: child.id(),
            child: Some(child),
            log,
        };
        // Dropping `process` on an early return stops HAProxy.
        loop {
            if let Some(status) = process.try_wait()? {
                process.child = None;
                return Err(HaproxyError::Exited {
                    status: status.to_string(),
                    log_tail: tail(&process.log),
                    log: process.log.clone(),
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(HaproxyError::Timeout {
                    socket: socket.to_path_buf(),
                    timeout_ms,
                });
            }
            let probe_ms = (left.as_millis() as u64).clamp(1, 500);
            if RuntimeApi::new(socket, probe_ms)
                .command("show info")
                .is_ok()
            {
                return Ok(process);
            }
            std::thread::sleep(Duration::from_millis(POLL_MS).min(left));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The file HAProxy's output goes to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Stops HAProxy: SIGTERM, then SIGKILL if it has not exited within 5 s. Waits for
    /// it (bounded), so the pid is reaped. Does nothing once stopped.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // The child is not reaped yet, so its pid cannot have been reused.
        if let Ok(pid) = libc::pid_t::try_from(self.pid) {
            if pid > 0 {
                // SAFETY: plain syscall on our own unreaped child's positive pid.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        if wait_exit(&mut child, Duration::from_millis(STOP_GRACE_MS)) {
            return;
        }
        let _ = child.kill();
        // Bounded: a process that survives SIGKILL this long is left to init.
        wait_exit(&mut child, Duration::from_millis(KILL_WAIT_MS));
    }

    fn try_wait(&mut self) -> Result<Option<ExitStatus>, HaproxyError> {
        match self.child.as_mut() {
            Some(c) => c
                .try_wait()
                .map_err(|e| process_err("wait for haproxy".into(), e)),
            None => Ok(None),
        }
    }
}

impl Drop for HaproxyProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `haproxy -c -f cfg`, output to `log`, bounded by `deadline`.
fn check_config(
    cfg: &Path,
    log: &Path,
    deadline: Instant,
    timeout_ms: u64,
) -> Result<(), HaproxyError> {
    let out =
        fs::File::create(log).map_err(|e| process_err(format!("create {}", log.display()), e))?;
    let err = out
        .try_clone()
        .map_err(|e| process_err(format!("create {}", log.display()), e))?;
    let mut child = Command::new(haproxy_binary())
        .arg("-c")
        .arg("-f")
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| process_err(format!("spawn {} -c", haproxy_binary().display()), e))?;
    let left = deadline.saturating_duration_since(Instant::now());
    if !wait_exit(&mut child, left) {
        let _ = child.kill();
        wait_exit(&mut child, Duration::from_millis(KILL_WAIT_MS));
        return Err(process_err(
            "haproxy -c".into(),
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("did not finish within {timeout_ms} ms"),
            ),
        ));
    }
    match child.try_wait() {
        Ok(Some(status)) if status.success() => Ok(()),
        _ => Err(HaproxyError::Config {
            path: cfg.to_path_buf(),
            output: fs::read_to_string(log)
                .unwrap_or_default()
                .trim()
                .to_string(),
        }),
    }
}

/// Polls `child` until it has exited (true) or `limit` has passed (false).
fn wait_exit(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) => {}
            Err(_) => return false,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS).min(left));
    }
}

fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let mut start = text.len().saturating_sub(LOG_TAIL_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].trim().to_string()
}

fn process_err(what: String, source: io::Error) -> HaproxyError {
    HaproxyError::Process { what, source }
}
