//! `quorum host install` against a real sshd (Debian's openssh-server) in each test
//! host: the host's key checked against a known-hosts file (an unknown key and a
//! changed key refused before anything is written, here or there), the binary copied
//! and checked, the agent started detached (no systemd here), joined and answering;
//! a control plane placed on the installed agents; an install run again restarts the
//! agent with the same binary and the members keep running.

mod common;

use common::fleet::Fleet;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Makes an ed25519 key pair at `path` (and `path`.pub); returns the public line.
fn keygen(path: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "quorum-test", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen (openssh-client; scripts/install.sh installs openssh-server)");
    assert!(out.status.success(), "ssh-keygen: {out:?}");
    std::fs::read_to_string(path.with_extension("pub"))
        .unwrap()
        .trim()
        .to_string()
}

/// The known-hosts line for `ip` and a public key line (`type base64 comment`).
fn known(ip: &str, public: &str) -> String {
    let mut parts = public.split_whitespace();
    format!("{ip} {} {}\n", parts.next().unwrap(), parts.next().unwrap())
}

/// SSH for a fleet: a client key, and an sshd in every host on port 22 that lets the
/// client key in as root; returns the client key and each host's public host key.
struct Ssh {
    key: PathBuf,
    host_keys: Vec<String>,
}

fn start_sshd(f: &mut Fleet) -> Ssh {
    // sshd refuses to start without its privilege-separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    let dir = f.env.dir.path().join("ssh");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("client_ed25519");
    let client = keygen(&key);
    let authorized = dir.join("authorized_keys");
    std::fs::write(&authorized, format!("{client}\n")).unwrap();
    let mut host_keys = Vec::new();
    for i in 1..=f.net.hosts.len() {
        let ip = f.net.hosts[i - 1].ip;
        let host_key = dir.join(format!("h{i}_host_ed25519"));
        host_keys.push(keygen(&host_key));
        let config = dir.join(format!("h{i}_sshd_config"));
        std::fs::write(
            &config,
            format!(
                "ListenAddress {ip}:22\nHostKey {}\nAuthorizedKeysFile {}\nPidFile {}\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n",
                host_key.display(),
                authorized.display(),
                dir.join(format!("h{i}_sshd.pid")).display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join(format!("h{i}_sshd.log"))).unwrap();
        let mut cmd = f.net.command(i, "/usr/sbin/sshd");
        cmd.arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        f.agents
            .push(cmd.spawn().expect("/usr/sbin/sshd (openssh-server)"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect((ip, 22)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd in h{i} never listened: {}",
                std::fs::read_to_string(dir.join(format!("h{i}_sshd.log"))).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ssh { key, host_keys }
}

fn install_args<'a>(
    f: &'a Fleet,
    i: usize,
    ssh: &'a Ssh,
    known_hosts: &'a Path,
    prefix: &'a Path,
) -> Vec<String> {
    vec![
        "host".into(),
        "install".into(),
        format!("h{i}"),
        "--ssh".into(),
        format!("root@{}", f.net.hosts[i - 1].ip),
        "--key".into(),
        ssh.key.display().to_string(),
        "--known-hosts".into(),
        known_hosts.display().to_string(),
        "--prefix".into(),
        prefix.display().to_string(),
    ]
}

fn run(env: &Env, args: &[String]) -> std::process::Output {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    env.cmd(&a).output().unwrap()
}

fn hosts_json(env: &Env) -> Vec<serde_json::Value> {
    let out = env.ok(&["hosts", "-o", "json"]);
    serde_json::from_str::<serde_json::Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn agents_installed_over_ssh_join_run_members_and_survive_a_reinstall() {
    let mut f = Fleet::bare("hosts_ssh", 3);
    let ssh = start_sshd(&mut f);
    let dir = f.env.dir.path().to_path_buf();
    let prefix = |i: usize| dir.join(format!("h{i}-opt"));

    // A host key nobody recorded: refused before a byte is sent, nothing recorded.
    let empty = dir.join("known_hosts.empty");
    std::fs::write(&empty, "").unwrap();
    let out = run(&f.env, &install_args(&f, 1, &ssh, &empty, &prefix(1)));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an unknown host key was trusted");
    assert!(
        err.contains("does not know") && err.contains("SHA256:") && err.contains("ssh-keyscan"),
        "{err}"
    );
    // A changed host key (the file names another key for h1): refused likewise.
    let impostor = keygen(&dir.join("ssh").join("impostor"));
    let wrong = dir.join("known_hosts.wrong");
    std::fs::write(&wrong, known(&f.net.hosts[0].ip.to_string(), &impostor)).unwrap();
    let out = run(&f.env, &install_args(&f, 1, &ssh, &wrong, &prefix(1)));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a changed host key was trusted");
    assert!(err.contains("differs from the one on line 1"), "{err}");
    assert!(hosts_json(&f.env).is_empty(), "nothing was recorded");
    assert!(!prefix(1).exists(), "nothing was written on the host");

    // The right keys: three fresh hosts, each installed, joined and answering.
    let known_hosts = dir.join("known_hosts");
    let lines: String = (0..3)
        .map(|i| known(&f.net.hosts[i].ip.to_string(), &ssh.host_keys[i]))
        .collect();
    std::fs::write(&known_hosts, lines).unwrap();
    for i in 1..=3 {
        let t = Instant::now();
        let out = run(&f.env, &install_args(&f, i, &ssh, &known_hosts, &prefix(i)));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "install h{i}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("installed") && stdout.contains("joined"),
            "{stdout}"
        );
        println!(
            "h{i} in {:.1} s: {}",
            t.elapsed().as_secs_f64(),
            stdout.trim()
        );
        assert!(
            !prefix(i).join("agent.env").exists(),
            "the spent token was left on h{i}"
        );
        let bin = prefix(i).join("bin").join("quorum");
        assert_eq!(
            std::fs::read(&bin).unwrap().len(),
            std::fs::metadata(env!("CARGO_BIN_EXE_quorum"))
                .unwrap()
                .len() as usize
        );
    }
    f.wait_ready(3);

    // A control plane on the installed agents, its keys read back.
    let env = &f.env;
    env.ok(&[
        "create",
        "app",
        "--replicas",
        "3",
        "--version",
        NEW,
        "--provider",
        "hosts",
        "--wait",
        "--timeout",
        "3m",
    ]);
    for k in 0..20 {
        env.ok(&[
            "etcdctl",
            "app",
            "--",
            "put",
            &format!("k{k}"),
            &format!("v{k}"),
        ]);
    }
    let pids_before = member_pids(&f);
    assert_eq!(pids_before.len(), 3, "{pids_before:?}");

    // Installed again: the same binary is not sent again, the agent restarts, the
    // members keep running (the same processes) and serve.
    let out = run(&f.env, &install_args(&f, 1, &ssh, &known_hosts, &prefix(1)));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("binary already there") && stdout.contains("already joined"),
        "{stdout}"
    );
    f.wait_ready(3);
    assert_eq!(member_pids(&f), pids_before, "the members kept running");
    env.wait_status(
        "app",
        "converged after the reinstall",
        Duration::from_secs(60),
        |s| s["converged"] == true,
    );
    let got = env.ok(&[
        "etcdctl",
        "app",
        "--",
        "get",
        "k",
        "--prefix",
        "--keys-only",
    ]);
    assert_eq!(got.lines().filter(|l| !l.is_empty()).count(), 20, "{got}");
    env.ok(&["delete", "app", "--yes", "--wait", "--timeout", "2m"]);
}

/// The PIDs of the etcd members on the hosts, by host.
fn member_pids(f: &Fleet) -> Vec<(usize, Vec<i32>)> {
    (1..=f.net.hosts.len())
        .map(|i| {
            let mut etcd: Vec<i32> = f
                .net
                .pids(i)
                .into_iter()
                .filter(|p| {
                    std::fs::read_link(format!("/proc/{p}/exe"))
                        .map(|e| e.to_string_lossy().contains("etcd"))
                        .unwrap_or(false)
                })
                .collect();
            etcd.sort();
            (i, etcd)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect()
}
