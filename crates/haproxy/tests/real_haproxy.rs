//! The runtime API against a real HAProxy, with a real etcd behind it.
//!
//! Every test has its own loopback subnet (127.A.B.x, checked to bind) and its own
//! temporary directory; every process it starts is stopped by pid at the end, also on
//! panic (guards). No fixed sleeps: conditions are polled with deadlines.

use quorum_haproxy::{
    config, haproxy_binary, HaproxyError, HaproxyProcess, RuntimeApi, Server, DEFAULT_BACKEND,
};
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const API_TIMEOUT_MS: u64 = 2_000;
const BE: &str = DEFAULT_BACKEND;

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A loopback subnet of this test's own: 127.A.B.x with A in 2..=250.
struct Subnet(u8, u8);

impl Subnet {
    /// Derived from the pid, a per-process counter and the clock; taken only if the
    /// addresses this test uses bind.
    fn pick() -> Subnet {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mut seed = std::process::id()
            .wrapping_mul(2_654_435_761)
            .wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_mul(40_503))
            .wrapping_add(nanos);
        for _ in 0..100 {
            let s = Subnet(2 + (seed % 249) as u8, ((seed / 249) % 256) as u8);
            let free = [(1, 2379), (1, 2380), (2, 2379), (2, 2380), (100, 2379)]
                .iter()
                .map(|&(x, port)| TcpListener::bind(SocketAddr::new(s.ip(x).into(), port)))
                .collect::<Result<Vec<_>, _>>()
                .is_ok();
            if free {
                return s;
            }
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        }
        panic!("no free loopback subnet found");
    }

    fn ip(&self, x: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, self.0, self.1, x)
    }

    fn client(&self, x: u8) -> SocketAddr {
        SocketAddr::new(self.ip(x).into(), 2379)
    }

    /// The HAProxy frontend.
    fn frontend(&self) -> SocketAddr {
        self.client(100)
    }
}

/// The newest installed etcd: `$QUORUM_ETCD_DIR/<version>/` or the default home.
fn etcd_dir() -> PathBuf {
    let base = std::env::var_os("QUORUM_ETCD_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let data = std::env::var_os("XDG_DATA_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                        .join(".local/share")
                });
            data.join("quorum/etcd")
        });
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(&base)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/install.sh", base.display()))
        .flatten()
        .filter(|e| e.path().join("etcd").exists() && e.path().join("etcdctl").exists())
        .filter_map(|e| {
            let v = e
                .file_name()
                .to_str()?
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            Some((v, e.path()))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .unwrap_or_else(|| panic!("no etcd with etcdctl in {}", base.display()))
        .1
}

/// A child process stopped by pid on drop: SIGTERM, then SIGKILL after a bounded wait.
struct Guard {
    child: Option<Child>,
    what: &'static str,
}

impl Guard {
    fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let exited = |c: &mut Child, limit: Duration| {
            let deadline = Instant::now() + limit;
            loop {
                if !matches!(c.try_wait(), Ok(None)) {
                    return true;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        if exited(&mut child, Duration::ZERO) {
            return;
        }
        // SAFETY: our own unreaped child, positive pid.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        if !exited(&mut child, Duration::from_secs(10)) {
            let _ = child.kill();
            assert!(
                exited(&mut child, Duration::from_secs(5)) || std::thread::panicking(),
                "{} survived SIGKILL",
                self.what
            );
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A single-member etcd on `subnet.ip(x)`, logging to `dir/etcd-<x>.log`.
fn start_etcd(dir: &Path, subnet: &Subnet, x: u8) -> Guard {
    let ip = subnet.ip(x);
    let name = format!("m{x}");
    let log = fs::File::create(dir.join(format!("etcd-{x}.log"))).unwrap();
    let mut cmd = Command::new(etcd_dir().join("etcd"));
    cmd.args(["--name", &name])
        .arg("--data-dir")
        .arg(dir.join(format!("etcd-{x}")))
        .arg(format!("--listen-client-urls=http://{ip}:2379"))
        .arg(format!("--advertise-client-urls=http://{ip}:2379"))
        .arg(format!("--listen-peer-urls=http://{ip}:2380"))
        .arg(format!("--initial-advertise-peer-urls=http://{ip}:2380"))
        .arg(format!("--initial-cluster={name}=http://{ip}:2380"))
        .args(["--initial-cluster-state=new", "--initial-cluster-token=hp"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ETCD") {
            cmd.env_remove(k);
        }
    }
    Guard {
        child: Some(cmd.spawn().unwrap()),
        what: "etcd",
    }
}

/// `etcdctl --endpoints <endpoint> <args>`, bounded: (succeeded, stdout + stderr).
fn etcdctl(dir: &Path, endpoint: SocketAddr, args: &[&str]) -> (bool, String) {
    static N: AtomicU32 = AtomicU32::new(0);
    let out_path = dir.join(format!("etcdctl-{}.out", N.fetch_add(1, Ordering::Relaxed)));
    let out = fs::File::create(&out_path).unwrap();
    let mut guard = Guard {
        child: Some(
            Command::new(etcd_dir().join("etcdctl"))
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={endpoint}"))
                .args(["--dial-timeout=2s", "--command-timeout=3s"])
                .args(args)
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap(),
        ),
        what: "etcdctl",
    };
    let child = guard.child.as_mut().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "etcdctl {args:?} hung");
        std::thread::sleep(Duration::from_millis(10));
    };
    (status.success(), fs::read_to_string(&out_path).unwrap())
}

/// `etcdctl watch <key>` through `front`, returned once it has seen a write made
/// directly on the member `direct`.
fn open_watch(dir: &Path, front: SocketAddr, direct: SocketAddr, key: &str) -> Guard {
    let watch_out = dir.join(format!("watch-{key}.out"));
    let out = fs::File::create(&watch_out).unwrap();
    let watch = Guard {
        child: Some(
            Command::new(etcd_dir().join("etcdctl"))
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={front}"))
                .args(["watch", key])
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap(),
        ),
        what: "etcdctl watch",
    };
    let mut n = 0;
    wait_for("the watch through haproxy", Duration::from_secs(20), || {
        n += 1;
        let value = format!("x{n}");
        assert!(etcdctl(dir, direct, &["put", key, &value]).0);
        fs::read_to_string(&watch_out).unwrap().contains(&value)
    });
    watch
}

fn start_haproxy(dir: &Path, subnet: &Subnet, servers: &[(String, SocketAddr)]) -> HaproxyProcess {
    let socket = dir.join("admin.sock");
    let text = config("test", subnet.frontend(), &socket, BE, servers, None);
    HaproxyProcess::start(&dir.join("haproxy"), &text, &socket, 10_000).unwrap()
}

fn api(dir: &Path) -> RuntimeApi {
    RuntimeApi::new(dir.join("admin.sock"), API_TIMEOUT_MS)
}

fn assert_refused<T: std::fmt::Debug>(r: Result<T, HaproxyError>, contains: &str) {
    match r {
        Err(HaproxyError::Refused { answer, .. }) if answer.contains(contains) => {}
        other => panic!("expected Refused containing {contains:?}, got {other:?}"),
    }
}

#[test]
fn config_passes_haproxy_check_and_a_bad_one_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let subnet = Subnet::pick();
    let socket = tmp.path().join("admin.sock");
    for servers in [
        vec![],
        vec![
            ("m1".to_string(), subnet.client(1)),
            ("m2".to_string(), "[::1]:2379".parse().unwrap()),
        ],
    ] {
        let cfg = tmp.path().join("check.cfg");
        fs::write(
            &cfg,
            config("cp", subnet.frontend(), &socket, BE, &servers, None),
        )
        .unwrap();
        let out = Command::new(haproxy_binary())
            .arg("-c")
            .arg("-f")
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let bad = config(
        "cp",
        subnet.frontend(),
        &socket,
        "etcd",
        &[("bad name".into(), subnet.client(1))],
        None,
    );
    match HaproxyProcess::start(&tmp.path().join("bad"), &bad, &socket, 10_000) {
        Err(HaproxyError::Config { output, .. }) => assert!(!output.is_empty()),
        other => panic!("expected a Config error, got {other:?}"),
    }
}

#[test]
fn add_drain_delete_with_traffic_through_haproxy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let subnet = Subnet::pick();
    let _etcd = start_etcd(dir, &subnet, 1);
    let mut haproxy = start_haproxy(dir, &subnet, &[]);
    let api = api(dir);
    assert_eq!(api.servers(BE).unwrap(), vec![]);

    let m1 = subnet.client(1);
    wait_for("etcd's /health", Duration::from_secs(30), || {
        etcd_health(m1).is_ok()
    });

    // Add: registered, enabled, serving.
    api.add_server(BE, "m1", m1, None).unwrap();
    let want_up = vec![Server {
        name: "m1".into(),
        addr: m1,
        maintenance: false,
        up: true,
    }];
    assert_eq!(api.servers(BE).unwrap(), want_up);
    api.add_server(BE, "m1", m1, None).unwrap();
    assert_eq!(api.servers(BE).unwrap(), want_up, "adding twice is a no-op");
    assert_refused(
        api.add_server(BE, "m1", subnet.client(2), None),
        "Already exists",
    );

    let front = subnet.frontend();
    let (ok, out) = etcdctl(dir, front, &["put", "k", "v"]);
    assert!(ok && out.trim() == "OK", "put through haproxy: {out}");
    let (ok, out) = etcdctl(dir, front, &["get", "k"]);
    assert!(ok && out.trim() == "k\nv", "get through haproxy: {out}");

    // Drain: maintenance, no traffic any more; twice is fine.
    api.drain_server(BE, "m1").unwrap();
    api.drain_server(BE, "m1").unwrap();
    let drained = api.servers(BE).unwrap();
    assert_eq!(drained.len(), 1);
    assert!(drained[0].maintenance, "{drained:?}");
    let (ok, out) = etcdctl(dir, front, &["get", "k"]);
    assert!(!ok, "a drained backend serves nothing: {out}");

    // Delete right after the drain: does HAProxy wait for (idle) connections to go?
    let started = Instant::now();
    let first = api.delete_server(BE, "m1");
    eprintln!("del server right after drain (idle connection from earlier calls): {first:?}");
    let mut refusals = 0;
    if first.is_err() {
        wait_for("del server to succeed", Duration::from_secs(30), || {
            let r = api.delete_server(BE, "m1");
            if let Err(e) = &r {
                assert!(
                    matches!(e, HaproxyError::Refused { answer, .. } if answer.contains("connections")),
                    "{e}"
                );
                refusals += 1;
            }
            r.is_ok()
        });
    }
    eprintln!(
        "del server succeeded {} ms after the drain ({refusals} more refusals)",
        started.elapsed().as_millis()
    );
    assert_eq!(api.servers(BE).unwrap(), vec![]);
    api.delete_server(BE, "m1").unwrap();
    api.drain_server(BE, "m1").unwrap();

    // Back again under the same name, then an active watch across drain and delete.
    api.add_server(BE, "m1", m1, None).unwrap();
    assert_eq!(api.servers(BE).unwrap(), want_up);
    let _watch = open_watch(dir, front, m1, "w1");
    api.drain_server(BE, "m1").unwrap();
    let started = Instant::now();
    let first = api.delete_server(BE, "m1");
    eprintln!("del server right after drain with a watch open: {first:?}");
    let mut refusals = 0;
    if first.is_err() {
        wait_for("del server to succeed", Duration::from_secs(30), || {
            let r = api.delete_server(BE, "m1");
            refusals += usize::from(r.is_err());
            r.is_ok()
        });
    }
    eprintln!(
        "del server succeeded {} ms after the drain with a watch open ({refusals} more refusals)",
        started.elapsed().as_millis()
    );
    assert_eq!(api.servers(BE).unwrap(), vec![]);

    // Why a drain ends the sessions too: maintenance alone leaves an open watch on the
    // server, and HAProxy refuses to delete a server with a connection attached.
    api.add_server(BE, "m1", m1, None).unwrap();
    let _watch = open_watch(dir, front, m1, "w2");
    api.set_maintenance(BE, "m1").unwrap();
    api.set_maintenance(BE, "m1").unwrap();
    assert!(api.servers(BE).unwrap()[0].maintenance);
    // Refused either by quorum's own guard (streams still name the server, which would
    // crash HAProxy 2.6) or by HAProxy (a connection is attached).
    match api.delete_server(BE, "m1") {
        Err(HaproxyError::Refused { answer, .. })
            if answer.contains("still has connections")
                || answer.contains("streams still refer") => {}
        other => panic!("expected the delete to be refused, got {other:?}"),
    }
    // Enable takes it back; maintenance again, then the sessions shut: deletable.
    api.enable_server(BE, "m1").unwrap();
    assert_eq!(api.servers(BE).unwrap(), want_up);
    api.set_maintenance(BE, "m1").unwrap();
    api.drain_server(BE, "m1").unwrap();
    api.delete_server(BE, "m1").unwrap();
    assert_eq!(api.servers(BE).unwrap(), vec![]);

    // Stopping HAProxy ends its process (reaped).
    let pid = haproxy.pid();
    haproxy.stop();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    haproxy.stop();
}

#[test]
fn refusals_and_unreachable_sockets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let subnet = Subnet::pick();
    let _haproxy = start_haproxy(dir, &subnet, &[("m1".into(), subnet.client(1))]);
    let api = api(dir);
    let m1 = subnet.client(1);

    // The configured server starts enabled (nothing listens, but no checks run).
    assert_eq!(
        api.servers(BE).unwrap(),
        vec![Server {
            name: "m1".into(),
            addr: m1,
            maintenance: false,
            up: true
        }]
    );
    // A missing backend.
    assert_refused(api.servers("nope"), "backend");
    assert_refused(api.add_server("nope", "m1", m1, None), "No such backend.");
    assert_refused(api.drain_server("nope", "m1"), "backend");
    assert_refused(api.delete_server("nope", "m1"), "No such backend.");
    // Not in maintenance: del is refused with HAProxy's reason.
    assert_refused(api.delete_server(BE, "m1"), "maintenance");
    // Unknown command.
    assert_refused(api.command("frobnicate"), "Unknown command");
    // Servers never added: drain and delete are already done.
    api.drain_server(BE, "ghost").unwrap();
    api.set_maintenance(BE, "ghost").unwrap();
    api.delete_server(BE, "ghost").unwrap();
    // But enabling one is not done: it does not serve.
    assert_refused(api.enable_server(BE, "ghost"), "No such server.");

    // A missing socket: Connect.
    let missing = RuntimeApi::new(dir.join("missing.sock"), 500);
    assert!(matches!(
        missing.servers(BE),
        Err(HaproxyError::Connect { .. })
    ));
    // A socket file nobody listens on any more: Connect.
    let stale = dir.join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    assert!(matches!(
        RuntimeApi::new(&stale, 500).command("show info"),
        Err(HaproxyError::Connect { .. })
    ));
    // A listener that never answers: Timeout, on time.
    let silent = dir.join("silent.sock");
    let _listener = UnixListener::bind(&silent).unwrap();
    let started = Instant::now();
    match RuntimeApi::new(&silent, 300).command("show info") {
        Err(HaproxyError::Timeout {
            timeout_ms: 300, ..
        }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A member's own `/health`, asked the way the controller asks it (quorum-etcd's client).
fn etcd_health(addr: SocketAddr) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let etcd = quorum_etcd::Etcd::new(quorum_etcd::Timeouts::default());
    rt.block_on(etcd.health(&format!("http://{addr}")))
        .map_err(|e| e.to_string())
}

#[test]
fn etcd_health_on_a_closed_port_and_on_etcd() {
    let tmp = tempfile::tempdir().unwrap();
    let subnet = Subnet::pick();
    // Nothing listens on the subnet yet (checked by pick).
    let err = etcd_health(subnet.client(1)).unwrap_err();
    assert!(err.contains("refused"), "{err}");

    let mut etcd = start_etcd(tmp.path(), &subnet, 1);
    wait_for("etcd's /health", Duration::from_secs(30), || {
        etcd_health(subnet.client(1)).is_ok()
    });
    let pid = etcd.pid();
    etcd.stop();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    assert!(etcd_health(subnet.client(1)).is_err());
}
