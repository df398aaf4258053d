//! What kubectl and etcdctl users expect, on real etcd processes: shell completion,
//! `list -o wide|json|yaml`, `get -o yaml` that applies again unchanged, `status
//! --watch`, and `quorum etcdctl` with fresh endpoints and credentials.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The commands a completion script must offer (every one the CLI has, but `help`).
const COMMANDS: [&str; 20] = [
    "create",
    "credentials",
    "apply",
    "upgrade",
    "scale",
    "status",
    "events",
    "list",
    "get",
    "etcdctl",
    "defrag",
    "completion",
    "delete",
    "controller",
    "pause",
    "haproxy-config",
    "versions",
    "version",
    "demo",
    "bench",
];

#[test]
fn completion_scripts_name_every_command() {
    let env = Env::new("completion");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = env.ok(&["completion", shell]);
        assert!(script.len() > 1_000, "{shell}: {script}");
        for c in COMMANDS {
            assert!(script.contains(c), "{shell}: no {c:?} in the script");
        }
        // Flags too, including the new commands' own (fish names them `-l NAME`).
        for flag in ["watch", "replicas", "home"] {
            let flag = match shell {
                "fish" => format!("-l {flag}"),
                _ => format!("--{flag}"),
            };
            assert!(script.contains(&flag), "{shell}: no {flag}");
        }
    }
    let out = env.run(&["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "a malformed command line");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("possible values: bash"), "{err}");
    // Generating a script touches no home, and takes no store flag.
    assert!(!env.home.exists());
    let out = env.run(&["completion", "bash", "--home", "/tmp"]);
    assert_eq!(out.status.code(), Some(2), "a flag that would do nothing");
}

#[test]
fn each_new_command_teaches_with_an_example() {
    let env = Env::new("new-help");
    for (cmd, example) in [
        (vec!["completion", "--help"], "quorum completion bash"),
        (vec!["list", "--help"], "quorum list -o wide"),
        (vec!["get", "--help"], "quorum get prod -o yaml"),
        (vec!["etcdctl", "--help"], "quorum etcdctl prod -- put"),
        (vec!["status", "--help"], "quorum status prod --watch"),
    ] {
        let help = env.ok(&cmd);
        assert!(help.contains(example), "{cmd:?}:\n{help}");
    }
    // A malformed command line: exit 2.
    // etcdctl's arguments without `--`: the hint shows the command with it.
    let out = env.run(&["etcdctl", "prod", "put", "foo", "bar"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("quorum etcdctl prod -- put foo bar"), "{err}");
    // A malformed control plane name is a usage error, in every command.
    for cmd in ["status", "get", "delete", "upgrade", "snapshots"] {
        let out = env.run(&[cmd, "Bad_Name"]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("invalid name"),
            "{cmd}"
        );
    }
    for args in [
        vec!["list", "-o", "tall"],
        vec!["get"],
        vec!["get", "a", "-o", "table"],
        vec!["etcdctl", "a"],
        vec!["etcdctl", "a", "get", "k"],
        vec!["status", "a", "--timeout", "5s"],
        vec!["status", "a", "--watch", "--timeout", "5"],
        vec!["completion"],
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    // Anything else: one line, exit 1 (here: there is no home, and none is made).
    let reads = [
        vec!["get", "nope"],
        vec!["etcdctl", "nope", "--", "get", "k"],
    ];
    for args in &reads {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("no quorum home"), "{err}");
    }
    assert_eq!(env.ok(&["list", "-o", "json"]).trim(), "[]");
    assert!(!env.home.exists(), "a read created the home");
    env.ok(&["create", "a", "--version", OLD]);
    for args in &reads {
        let err = env.fails(args);
        assert!(err.contains("\"nope\" does not exist"), "{err}");
    }
}

/// The output of a child, collected by a thread as it arrives.
struct Collected {
    child: Child,
    text: Arc<Mutex<String>>,
}

impl Collected {
    fn spawn(mut cmd: std::process::Command) -> Collected {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn quorum");
        let stdout = child.stdout.take().unwrap();
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut t = sink.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        Collected { child, text }
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// Waits (with a deadline) until the output satisfies `cond`.
    fn wait_for(&self, what: &str, cond: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond(&self.text()) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }

    /// CPU time (user + system) the child used so far, from /proc.
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command name (which is in parentheses): utime is the 12th.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<u64> = rest
            .split(' ')
            .skip(11)
            .take(2)
            .map(|x| x.parse().unwrap())
            .collect();
        // SAFETY: sysconf with a valid name has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Duration::from_millis((f[0] + f[1]) * 1000 / ticks)
    }

    /// Waits (with a deadline) for the child to exit; returns its exit code.
    fn exit(mut self, within: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                // The reader thread ends at end of file; give it its last lines.
                std::thread::sleep(Duration::from_millis(50));
                return (st.code(), self.text());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("quorum did not exit in {within:?}:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The entries of a directory.
fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn list_get_watch_and_etcdctl_on_a_real_control_plane() {
    let mut env = Env::new("kubectl-style");
    env.start_controller();
    env.create_and_wait("k", 1, OLD);
    list_agrees_with_status(&env);
    get_applies_again_unchanged(&env);
    etcdctl_runs_with_fresh_credentials(&env);
    // Nothing changes the control plane while it is watched but what the test does.
    env.terminate_controller();
    watch_prints_what_changed(&env);
    // No member: etcdctl has no endpoint to offer, and says so.
    let provider =
        quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir());
    for m in provider.list() {
        provider.kill(&m).unwrap();
    }
    let out = env.run(&["etcdctl", "k", "--", "get", "k"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no endpoint"), "{err}");
    let rows: serde_json::Value = serde_json::from_str(&env.ok(&["list", "-o", "json"])).unwrap();
    assert_eq!(rows[0]["health"], "unavailable", "{rows:#}");
}

/// `list`'s health, state, leader and endpoints are `status`'s; its age is the store's.
fn list_agrees_with_status(env: &Env) {
    let s = env.status("k");
    let rows: serde_json::Value = serde_json::from_str(&env.ok(&["list", "-o", "json"])).unwrap();
    let r = &rows.as_array().unwrap()[0];
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert_eq!(r["name"], "k");
    assert_eq!(r["health"], "healthy", "{r:#}");
    assert_eq!(
        (r["healthyVoters"].as_u64(), r["voters"].as_u64()),
        (Some(1), Some(1))
    );
    for (list, status) in [
        ("state", "operation"),
        ("leader", "leader"),
        ("endpoints", "endpoints"),
        ("clusterVersion", "clusterVersion"),
        ("converged", "converged"),
    ] {
        assert_eq!(r[list], s[status], "{list} vs status's {status}");
    }
    let created = r["createdAt"].as_str().unwrap();
    assert!(created.ends_with('Z') && created.contains('T'), "{created}");
    assert!(r["ageSeconds"].as_i64().unwrap() < 300, "{r:#}");
    let yaml: serde_json::Value = serde_yaml::from_str(&env.ok(&["list", "-o", "yaml"])).unwrap();
    assert_eq!(yaml[0]["name"], "k");

    let table = env.ok(&["list"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("healthy 1/1"), "{table}");
    assert!(table.lines().next().unwrap().ends_with("AGE"), "{table}");
    let wide = env.ok(&["list", "-o", "wide"]);
    let endpoint = s["endpoints"][0].as_str().unwrap();
    assert!(wide.lines().next().unwrap().contains("ENDPOINTS"), "{wide}");
    assert!(wide.contains(endpoint) && wide.contains("k-1"), "{wide}");
}

/// `get -o yaml` (and `-o json`) print what `apply -f` takes back without a change.
fn get_applies_again_unchanged(env: &Env) {
    let before = env.status("k")["spec"].clone();
    for format in ["yaml", "json"] {
        let manifest = env.ok(&["get", "k", "-o", format]);
        let file = env.dir.path().join(format!("k.{format}"));
        std::fs::write(&file, &manifest).unwrap();
        let out = env.ok(&["apply", "-f", file.to_str().unwrap()]);
        assert!(out.contains("unchanged"), "{format}: {manifest}\n=> {out}");
    }
    assert_eq!(env.status("k")["spec"], before);
    let yaml = env.ok(&["get", "k"]);
    assert!(
        yaml.starts_with("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\n"),
        "{yaml}"
    );
}

/// etcdctl of the right version, on the published endpoints, with a certificate in a
/// private directory that is gone when it ends, and its exit status passed through.
fn etcdctl_runs_with_fresh_credentials(env: &Env) {
    let tmp = env.dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let etcdctl = |args: &[&str]| {
        let mut all = vec!["etcdctl", "k", "--"];
        all.extend(args);
        env.cmd(&all).env("TMPDIR", &tmp).output().unwrap()
    };
    let out = etcdctl(&["put", "greeting", "hello"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n");
    let out = etcdctl(&["get", "greeting"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "greeting\nhello\n");
    let out = etcdctl(&["version"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("etcdctl version: {OLD}")),
        "{out:?}"
    );
    // A usage error of etcdctl's own: its exit status, whatever it is, is quorum's.
    let direct = std::process::Command::new(
        quorum_provider::default_etcd_dir()
            .join(OLD)
            .join("etcdctl"),
    )
    .arg("get")
    .output()
    .unwrap();
    let out = etcdctl(&["get"]);
    assert_ne!(direct.status.code(), Some(0));
    assert_eq!(out.status.code(), direct.status.code(), "{out:?}");
    assert!(entries(&tmp).is_empty(), "left behind: {:?}", entries(&tmp));

    // A long run (watch): the directory is private while it runs, and removed after
    // quorum passes SIGTERM on to etcdctl.
    let mut cmd = env.cmd(&["etcdctl", "k", "--", "watch", "greeting"]);
    cmd.env("TMPDIR", &tmp);
    let watch = Collected::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    let dir = loop {
        if let Some(d) = entries(&tmp).into_iter().next() {
            if d.join("client.key").exists() {
                break d;
            }
        }
        assert!(Instant::now() < deadline, "no certificate directory");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(mode(&dir), 0o700);
    for f in ["ca.crt", "client.crt", "client.key"] {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
    // The watch is established when etcdctl runs; put until it reports one.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !watch.text().contains("hello again") {
        assert!(etcdctl(&["put", "greeting", "hello again"])
            .status
            .success());
        assert!(Instant::now() < deadline, "the watch saw nothing");
        std::thread::sleep(Duration::from_millis(200));
    }
    watch.signal(libc::SIGTERM);
    let (code, _) = watch.exit(Duration::from_secs(10));
    assert_eq!(
        code,
        Some(128 + libc::SIGTERM),
        "etcdctl ended by the signal"
    );
    assert!(entries(&tmp).is_empty(), "left behind: {:?}", entries(&tmp));
}

/// Piped, `status --watch` prints a block when something changed and only then, costs
/// little CPU, and ends at its timeout or at Ctrl-C.
fn watch_prints_what_changed(env: &Env) {
    let w = Collected::spawn(env.cmd(&["status", "k", "--watch", "--timeout", "4s"]));
    let started = Instant::now();
    w.wait_for("the first status", |t| t.contains("Blocked"));
    env.ok(&["pause", "k"]);
    w.wait_for("the paused status", |t| t.matches("Blocked").count() == 2);
    let cpu = w.cpu();
    let elapsed = started.elapsed();
    let (code, text) = w.exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{text}");
    let blocks: Vec<&str> = text.split("--- ").filter(|b| !b.is_empty()).collect();
    assert_eq!(blocks.len(), 2, "a block per change, no more:\n{text}");
    assert!(!blocks[0].contains(", paused"), "{}", blocks[0]);
    assert!(blocks[1].contains(", paused"), "{}", blocks[1]);
    // One observation a second, not a busy loop.
    assert!(cpu < elapsed / 2, "{cpu:?} of CPU in {elapsed:?}");
    eprintln!("status --watch: {cpu:?} of CPU in {elapsed:?}");

    let w = Collected::spawn(env.cmd(&["status", "k", "--watch", "-o", "json"]));
    w.wait_for("the first status", |t| t.ends_with("}\n"));
    w.signal(libc::SIGINT);
    let (code, text) = w.exit(Duration::from_secs(5));
    assert_eq!(code, Some(0), "Ctrl-C ends a watch normally");
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["spec"]["paused"], true);
}
