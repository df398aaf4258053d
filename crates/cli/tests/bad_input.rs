//! Bad input: a one-line error saying what is wrong and what to do, a non-zero exit,
//! and the stored state unchanged.

mod common;

use common::*;
use std::time::Duration;

fn spec_of(env: &Env, name: &str) -> serde_json::Value {
    env.status(name)["spec"].clone()
}

fn one_line(err: &str) -> &str {
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected:\n{err}");
    lines[0]
}

/// Runs a malformed command line: exit 2 (clap's layout), nothing on stdout. Returns
/// the error line.
fn usage(env: &Env, args: &[&str]) -> String {
    let out = env.run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "quorum {args:?}: a usage error expected:\n{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "quorum {args:?} printed: {:?}",
        out.stdout
    );
    let first = err.lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("error: "), "{err}");
    first
}

#[test]
fn offline_refusals_change_nothing() {
    let env = Env::new("bad-offline");
    env.ok(&["create", "a", "--replicas", "3", "--version", OLD]);
    let before = spec_of(&env, "a");

    let e = env.fails(&["create", "a", "--replicas", "3", "--version", OLD]);
    assert!(one_line(&e).contains("already exists"), "{e}");
    let e = usage(&env, &["create", "b", "--replicas", "4", "--version", OLD]);
    assert!(e.contains("use 3 or 5, or pass --force"), "{e}");
    let e = env.fails(&["create", "c", "--version", "3.9.9"]);
    assert!(one_line(&e).contains("not installed"), "{e}");
    // delete says what it removes and, without a terminal to ask on, needs --yes
    // (issue 29: it asked nothing); nothing changes.
    let out = env.run(&["delete", "a"]);
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success());
    assert!(said.contains("deleting stops and removes"), "{said}");
    assert!(
        one_line(&err).contains("not confirmed") && err.contains("--yes"),
        "{err}"
    );
    assert!(!env.store().get_control_plane("a").unwrap().deleting);
    // A malformed name is a usage error (exit 2), as every other malformed value.
    let e = usage(&env, &["create", "Bad_Name", "--version", OLD]);
    assert!(e.contains("invalid name"), "{e}");
    let e = env.fails(&["create", "d", "--version", "banana"]);
    assert!(e.contains("not an etcd version"), "{e}");
    // Two minors away is a chained upgrade: here there is no road (no 3.5 at 3.6's
    // stepping stone is installed), and the refusal says why.
    let e = env.fails(&["upgrade", "a", "--version", "3.6.0"]);
    assert!(one_line(&e).contains("no road to etcd 3.6.0"), "{e}");
    assert!(one_line(&e).contains("3.5.32 or later"), "{e}");
    let e = env.fails(&["upgrade", "nope", "--version", NEW]);
    assert!(one_line(&e).contains("does not exist"), "{e}");
    let e = usage(&env, &["scale", "a", "--replicas", "0"]);
    assert!(e.contains("use 1, 3, 5 or 7"), "{e}");
    let e = usage(&env, &["scale", "a", "--replicas", "2"]);
    assert!(e.contains("even"), "{e}");
    let e = env.fails(&["upgrade", "a", "--version", NEW, "--timeout", "soon"]);
    assert!(e.contains("not a duration"), "{e}");
    let e = env.fails(&["events", "nope"]);
    assert!(one_line(&e).contains("does not exist"), "{e}");
    let out = env.run(&["events", "a", "--follow", "-o", "yaml"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a malformed command line: {e}");
    assert!(e.contains("not YAML"), "{e}");
    let e = env.fails(&["events", "a", "--last", "-1"]);
    assert!(e.contains("--last"), "{e}");
    let out = env.ok(&["events", "a"]);
    assert!(out.contains("no events yet"), "{out}");

    // Manifests.
    let dir = env.dir.path();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let m = write("broken.yaml", "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 3, version: [}\n");
    let e = env.fails(&["apply", "-f", &m]);
    assert!(
        one_line(&e).contains("not valid YAML") && e.contains("line 4"),
        "{e}"
    );
    let m = write("kind.yaml", "apiVersion: quorum.dev/v1alpha1\nkind: Deployment\nmetadata: {name: a}\nspec: {replicas: 3, version: 3.4.23}\n");
    let e = env.fails(&["apply", "-f", &m]);
    assert!(one_line(&e).contains("kind is 'Deployment'"), "{e}");
    let m = write("even.yaml", "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {name: a}\nspec: {replicas: 4, version: 3.4.23}\n");
    let e = env.fails(&["apply", "-f", &m]);
    assert!(one_line(&e).contains("even"), "{e}");
    let e = env.fails(&["apply", "-f", "/nonexistent/quorum.yaml"]);
    assert!(one_line(&e).contains("cannot read"), "{e}");

    assert_eq!(spec_of(&env, "a"), before, "state changed by refused input");
    let list = env.ok(&["list"]);
    assert!(
        list.contains('a') && !list.contains("b ") && !list.contains("c "),
        "{list}"
    );
}

/// One member down: the change is recorded (quorum replaces the member first, and says
/// so). Quorum lost: a change is refused, unless it only changes how quorum repairs.
#[test]
fn a_down_member_does_not_block_a_change_but_a_lost_quorum_does() {
    let mut env = Env::new("bad-unreachable");
    env.start_controller();
    env.ok(&[
        "create",
        "u",
        "--replicas",
        "3",
        "--version",
        OLD,
        "--wait",
        "--timeout",
        "120s",
    ]);
    // Without a controller to repair it, stop one member hard (by its PID).
    env.kill_controller();
    let provider =
        quorum_provider::LocalProvider::new(&env.home, quorum_provider::default_etcd_dir());
    provider.kill("u-2").unwrap();
    env.wait_status(
        "u",
        "u-2 unhealthy, a leader elected",
        Duration::from_secs(30),
        |s| s["machines"][1]["healthy"] == false && s["leader"].is_string(),
    );
    let out = env.ok(&["upgrade", "u", "--version", NEW]);
    assert!(
        out.contains("note: u-2 not healthy; quorum replaces it first"),
        "{out}"
    );
    assert_eq!(spec_of(&env, "u")["version"], NEW);
    // The rollout has begun (in the spec) but changed no member: its strategy may
    // change, and it may be cancelled without calling it a downgrade.
    let out = env.ok(&["upgrade", "u", "--strategy", "InPlace"]);
    assert!(
        out.contains("rollout strategy recorded: Replace -> InPlace"),
        "{out}"
    );
    assert_eq!(spec_of(&env, "u")["rollout"]["strategy"], "InPlace");
    env.ok(&["upgrade", "u", "--strategy", "Replace"]);
    let out = env.ok(&["upgrade", "u", "--abort", "--dry-run"]);
    assert!(
        out.contains(&format!(
            "would cancel the rollout to etcd {NEW}: every member still runs etcd {OLD}"
        )),
        "{out}"
    );
    assert!(
        !out.contains("would take a snapshot"),
        "a cancel changes no member: {out}"
    );
    assert_eq!(spec_of(&env, "u")["version"], NEW);
    let e = env.fails(&["upgrade", "u", "--abort", "--version", OLD]);
    assert!(e.contains("cannot be used with"), "{e}");
    // Nothing was rolled back, so there is nothing to retry.
    let e = env.fails(&["upgrade", "u", "--retry"]);
    assert!(one_line(&e).contains("no rollout is stopped"), "{e}");
    // The status says which member and why.
    let table = env.ok(&["status", "u"]);
    assert!(table.contains("not healthy: u-2"), "{table}");

    // Two of three down: no leader, so nothing can be checked or done.
    provider.kill("u-3").unwrap();
    env.wait_status("u", "no leader", Duration::from_secs(30), |s| {
        s["leader"].is_null()
    });
    let before = spec_of(&env, "u");
    let e = env.fails(&["scale", "u", "--replicas", "5"]);
    assert!(
        one_line(&e).contains("no member answers as leader") && e.contains("--force"),
        "{e}"
    );
    assert_eq!(spec_of(&env, "u"), before);
    // Changing only how quorum repairs is never refused.
    let manifest = env.dir.path().join("u.yaml");
    let yaml = env.ok(&["get", "u", "-o", "yaml"]);
    // `get` prints every field: the default maxRetry (3) is there to change.
    assert!(yaml.contains("maxRetry: 3"), "{yaml}");
    std::fs::write(&manifest, yaml.replace("maxRetry: 3", "maxRetry: 5")).unwrap();
    env.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    assert_eq!(spec_of(&env, "u")["remediation"]["maxRetry"], 5);

    // A new controller restarts both and rolls the control plane out.
    env.start_controller();
    env.ok(&[
        "upgrade",
        "u",
        "--version",
        NEW,
        "--wait",
        "--timeout",
        "180s",
    ]);
}

/// An HAProxy attachment is checked before it is stored, and `haproxy-config` writes a
/// configuration the real HAProxy accepts.
#[test]
fn haproxy_attachment_and_configuration() {
    let env = Env::new("bad-haproxy");
    let create = |extra: &[&str]| {
        let mut args = vec!["create", "h", "--version", OLD, "--haproxy-runtime-api"];
        args.extend_from_slice(extra);
        usage(&env, &args)
    };
    let e = create(&["relative/admin.sock"]);
    assert!(
        e.contains("'--haproxy-runtime-api <SOCKET>'") && e.contains("absolute path"),
        "{e}"
    );
    let socket = env.dir.path().join("admin.sock");
    let socket = socket.to_str().unwrap();
    let e = create(&[socket, "--haproxy-backend", "etcd;del"]);
    assert!(
        e.contains("'--haproxy-backend <NAME>'") && e.contains("not a backend name"),
        "{e}"
    );
    let e = env.fails(&["status", "h"]);
    assert!(
        e.contains("does not exist"),
        "refused creates store nothing: {e}"
    );

    env.ok(&["create", "plain", "--version", OLD]);
    let e = env.fails(&["haproxy-config", "plain", "--bind", "127.0.0.1:23790"]);
    assert!(one_line(&e).contains("--haproxy-runtime-api"), "{e}");
    let e = env.fails(&["haproxy-config", "plain", "--bind", "localhost"]);
    assert!(e.contains("--bind"), "{e}");

    // Recorded with a line that names the socket and says it does not answer yet.
    let out = env.ok(&[
        "create",
        "h",
        "--version",
        OLD,
        "--haproxy-runtime-api",
        socket,
    ]);
    assert!(
        out.contains(&format!("runtime API {socket} does not answer")),
        "{out}"
    );
    let in_step = |env: &Env| {
        let s = env.status("h");
        let c = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == "HaproxyInStep")
            .cloned()
            .unwrap_or_else(|| panic!("no HaproxyInStep condition: {s}"));
        (
            c["status"] == true,
            c["message"].as_str().unwrap().to_string(),
            s,
        )
    };
    let (ok, message, s) = in_step(&env);
    assert!(
        !ok && message.contains("HAProxy does not answer"),
        "{message}"
    );
    assert_eq!(s["haproxy"]["answers"], false, "{s}");
    let table = env.ok(&["status", "h"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("HaproxyInStep"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.split_whitespace().nth(1) == Some("False") && row.contains(socket),
        "{table}"
    );
    assert_eq!(spec_of(&env, "h")["haproxy"]["runtimeApi"], socket);
    assert_eq!(spec_of(&env, "h")["haproxy"]["backend"], "etcd");
    let cfg = env.ok(&["haproxy-config", "h", "--bind", "127.0.0.1:23790"]);
    assert!(
        cfg.contains(socket) && cfg.contains("backend etcd"),
        "{cfg}"
    );
    let path = env.dir.path().join("haproxy.cfg");
    std::fs::write(&path, &cfg).unwrap();
    let check = std::process::Command::new(quorum_haproxy_binary())
        .args(["-c", "-f", path.to_str().unwrap()])
        .output()
        .expect("run haproxy -c");
    assert!(
        check.status.success(),
        "haproxy rejected the configuration:\n{cfg}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // With HAProxy running that configuration, status sees the backend in step (no
    // member yet, so an empty backend), read-only.
    let pem = env.home.join("haproxy/h/haproxy.pem");
    assert!(pem.exists(), "haproxy-config writes HAProxy's key there");
    let mut haproxy = quorum_haproxy::HaproxyProcess::start(
        &env.dir.path().join("haproxy-run"),
        &cfg,
        std::path::Path::new(socket),
        10_000,
    )
    .expect("start haproxy");
    let (ok, message, s) = in_step(&env);
    assert!(ok && message.contains("serves no member"), "{message}");
    assert_eq!(s["haproxy"]["answers"], true, "{s}");
    // A manifest that names a backend HAProxy does not have: recorded, and said so.
    let manifest = env.dir.path().join("h.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {{name: h}}\n\
             spec:\n  replicas: 3\n  version: {OLD}\n  haproxy: {{runtimeApi: {socket}, backend: other}}\n"
        ),
    )
    .unwrap();
    let out = env.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    assert!(
        out.contains(&format!("runtime API {socket} answers"))
            && out.contains("Can't find backend"),
        "{out}"
    );
    let (ok, message, _) = in_step(&env);
    assert!(!ok && message.contains("Can't find backend"), "{message}");
    haproxy.stop();

    // The deletion takes HAProxy's key with it.
    env.ok(&["delete", "h", "--yes"]);
    assert!(
        !env.home.join("haproxy/h").exists(),
        "delete left HAProxy's directory (and its private key) behind"
    );
}

fn quorum_haproxy_binary() -> std::path::PathBuf {
    std::env::var_os("QUORUM_HAPROXY")
        .map(Into::into)
        .unwrap_or_else(|| "/usr/sbin/haproxy".into())
}

/// A state directory others can read is refused, by the controller and the CLI alike,
/// with the command that fixes it; nothing in it changes.
#[test]
fn a_state_directory_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new("bad-perms");
    env.ok(&["create", "a", "--version", OLD]);
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = env.fails(&["controller", "--metrics-addr", "off"]);
    assert!(
        one_line(&e).contains("chmod 700") && e.contains("other users can read"),
        "{e}"
    );
    let e = env.fails(&["list"]);
    assert!(one_line(&e).contains("chmod 700"), "{e}");
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(spec_of(&env, "a")["version"], OLD);
}

/// The walkthrough's silent downgrade, and the dry runs: a version text means the same
/// in a manifest as on the command line, a downgrade needs a confirmation, and a dry
/// run prints the plan and stores nothing.
#[test]
fn downgrades_are_confirmed_and_dry_runs_change_nothing() {
    let env = Env::new("bad-downgrade");
    env.ok(&["create", "d", "--replicas", "3", "--version", NEW]);
    let before = spec_of(&env, "d");

    // "3.5" in a manifest is the newest installed 3.5.x, as for --version: unchanged.
    let manifest = |version: &str, extra: &str| {
        let p = env.dir.path().join("d.yaml");
        let text = format!(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {{name: d}}\nspec:\n  replicas: 3\n  version: {version}\n  rollout: {{maxSurge: 1{extra}}}\n  backup: {{schedule: \"off\"}}\n"
        );
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let out = env.ok(&["apply", "-f", &manifest("\"3.5\"", "")]);
    assert!(out.contains("unchanged"), "{out}");
    let e = env.fails(&["apply", "-f", &manifest("3.5", "")]);
    assert!(one_line(&e).contains("quote it"), "{e}");

    // A patch downgrade is refused, and the error says how to confirm it.
    let e = env.fails(&["upgrade", "d", "--version", "3.5.0"]);
    assert!(one_line(&e).contains("--allow-downgrade"), "{e}");
    let e = env.fails(&["apply", "-f", &manifest("3.5.0", "")]);
    assert!(one_line(&e).contains("downgrade"), "{e}");
    assert_eq!(spec_of(&env, "d"), before);

    // Dry runs say what would happen and store nothing.
    let out = env.ok(&[
        "upgrade",
        "d",
        "--version",
        "3.5.0",
        "--allow-downgrade",
        "--dry-run",
    ]);
    assert!(
        out.contains(&format!("would roll etcd {NEW} -> 3.5.0")),
        "{out}"
    );
    assert!(out.contains("DOWNGRADE"), "{out}");
    assert!(out.contains("dry run: nothing was changed"), "{out}");
    let out = env.ok(&["scale", "d", "--replicas", "5", "--dry-run"]);
    assert!(out.contains("would scale 3 -> 5 replicas"), "{out}");
    let out = env.ok(&[
        "apply",
        "-f",
        &manifest("3.5.0", ", allowDowngrade: true"),
        "--dry-run",
    ]);
    assert!(
        out.contains(&format!("would roll etcd {NEW} -> 3.5.0")),
        "{out}"
    );
    assert_eq!(spec_of(&env, "d"), before);
    let out = env.run(&["scale", "d", "--replicas", "5", "--dry-run", "--wait"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--dry-run with --wait is a usage error"
    );

    // Confirmed, it is recorded; the confirmation itself is not stored.
    env.ok(&["apply", "-f", &manifest("3.5.0", ", allowDowngrade: true")]);
    let after = spec_of(&env, "d");
    assert_eq!(after["version"], "3.5.0");
    assert!(after["rollout"].get("allowDowngrade").is_none(), "{after}");
}

/// Commands that only read never create a home: they say there is none.
#[test]
fn reading_a_home_that_does_not_exist_creates_nothing() {
    let env = Env::new("bad-nohome");
    let missing = env.dir.path().join("no-such-home");
    let home = missing.display().to_string();
    for args in [
        vec!["status", "a"],
        vec!["events", "a"],
        vec!["upgrade", "a", "--version", NEW],
        vec!["delete", "a", "--yes"],
    ] {
        let mut full = vec!["--home", home.as_str()];
        full.extend(args.iter().copied());
        let e = env.fails(&full);
        assert!(one_line(&e).contains("no quorum home at"), "{args:?}: {e}");
    }
    let out = env.ok(&["--home", &home, "list"]);
    assert!(out.contains("No quorum home at"), "{out}");
    assert!(!missing.exists(), "a read created {home}");
}

/// A malformed command line exits 2 and says what is allowed, naming the flag; the same
/// rule broken in a manifest exits 1 and names the manifest's field. Nothing is stored.
#[test]
fn usage_errors_exit_2_and_name_the_flag() {
    let env = Env::new("bad-usage");
    env.ok(&["create", "a", "--version", OLD]);
    let before = spec_of(&env, "a");
    for n in ["9", "0", "-1", "three"] {
        let e = usage(&env, &["create", "b", "--version", OLD, "--replicas", n]);
        assert!(
            e.contains("'--replicas <N>'")
                && e.contains("use 1, 3, 5 or 7 (2, 4 or 6 with --force)"),
            "{e}"
        );
        assert!(!e.contains("4294967295"), "{e}");
        let e = usage(&env, &["scale", "a", "--replicas", n]);
        assert!(e.contains("use 1, 3, 5 or 7"), "{e}");
    }
    let e = usage(&env, &["create", "b", "--version", OLD, "--replicas", "6"]);
    assert!(
        e.contains("--replicas 6 is even") && e.contains("--force"),
        "{e}"
    );
    for verb in ["create", "upgrade"] {
        let name = if verb == "create" { "b" } else { "a" };
        let e = usage(&env, &[verb, name, "--version", "latest"]);
        assert!(
            e.contains("'--version <VERSION>'") && e.contains("not an etcd version"),
            "{e}"
        );
    }
    // A strategy that does not exist, or in place with too few members.
    let e = usage(
        &env,
        &["create", "b", "--version", OLD, "--strategy", "rolling"],
    );
    assert!(
        e.contains("'--strategy <STRATEGY>'") && e.contains("Replace") && e.contains("InPlace"),
        "{e}"
    );
    let e = usage(
        &env,
        &[
            "create",
            "b",
            "--version",
            OLD,
            "--replicas",
            "1",
            "--strategy",
            "in-place",
        ],
    );
    assert!(
        e.contains("--strategy InPlace needs --replicas 3 or more") && e.contains("Replace"),
        "{e}"
    );
    let e = usage(&env, &["upgrade", "a"]);
    assert!(e.contains("required arguments were not provided"), "{e}");
    // Errors from flags name the flag, not the manifest's field.
    let e = usage(&env, &["create", "b", "--version", OLD, "--max-surge", "2"]);
    assert!(
        e.contains("'--max-surge <N>'") && e.contains("use 0 or 1"),
        "{e}"
    );
    assert!(!e.contains("maxSurge"), "{e}");
    let e = usage(
        &env,
        &[
            "create",
            "b",
            "--version",
            OLD,
            "--replicas",
            "1",
            "--max-surge",
            "0",
        ],
    );
    assert!(
        e.contains("--max-surge 0 needs --replicas 3 or more"),
        "{e}"
    );
    let e = usage(
        &env,
        &[
            "create",
            "b",
            "--version",
            OLD,
            "--certificate-lifetime",
            "10s",
        ],
    );
    assert!(e.contains("'--certificate-lifetime <DURATION>'"), "{e}");
    let e = usage(
        &env,
        &["create", "b", "--version", OLD, "--renew-before", "400d"],
    );
    assert!(
        e.contains("--renew-before 400d is not shorter than --certificate-lifetime 365d"),
        "{e}"
    );
    // A flag that would do nothing.
    let e = usage(&env, &["create", "b", "--version", OLD, "--timeout", "5m"]);
    let full = String::from_utf8_lossy(
        &env.run(&["create", "b", "--version", OLD, "--timeout", "5m"])
            .stderr,
    )
    .into_owned();
    assert!(
        e.contains("required arguments were not provided") && full.contains("--wait"),
        "{full}"
    );
    for args in [
        &["upgrade", "a", "--version", NEW, "--timeout", "1m"][..],
        &["scale", "a", "--replicas", "3", "--timeout", "1m"],
        &["delete", "a", "--yes", "--timeout", "1m"],
        &["create", "b", "--version", OLD, "--haproxy-backend", "etcd"],
    ] {
        usage(&env, args);
    }
    // The manifest's field, from a manifest (a refusal: exit 1, one line).
    let m = env.dir.path().join("surge.yaml");
    std::fs::write(&m, format!("apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata: {{name: b}}\nspec: {{replicas: 3, version: {OLD}, rollout: {{maxSurge: 2}}}}\n")).unwrap();
    let out = env.run(&["apply", "-f", m.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        one_line(&e).contains("rollout.maxSurge must be 0 or 1"),
        "{e}"
    );

    assert_eq!(spec_of(&env, "a"), before, "state changed by refused input");
    let e = env.fails(&["status", "b"]);
    assert!(e.contains("does not exist"), "{e}");
}

/// `--help` puts the store flags under "Global options", and commands that use no
/// state neither show nor accept them; `quorum version` is quorum's own version.
#[test]
fn help_groups_the_global_options() {
    let env = Env::new("bad-help");
    let help = env.ok(&["create", "--help"]);
    let (own, global) = help
        .split_once("Global options:")
        .unwrap_or_else(|| panic!("no global options heading:\n{help}"));
    for flag in [
        "--home",
        "--store",
        "--store-ca",
        "--store-cert",
        "--store-key",
    ] {
        assert!(
            !own.contains(&format!("{flag} ")),
            "{flag} among create's own options:\n{help}"
        );
        assert!(
            global.contains(&format!("{flag} ")),
            "{flag} not a global option:\n{help}"
        );
    }
    for cmd in [
        &["versions", "--help"][..],
        &["version", "--help"],
        &["demo", "--help"],
        &["bench", "--help"],
        &["bench", "rollout", "--help"],
        &["bench", "failover", "--help"],
    ] {
        let help = env.ok(cmd);
        assert!(
            !help.contains("--home") && !help.contains("--store"),
            "{cmd:?}:\n{help}"
        );
    }
    let e = usage(&env, &["versions", "--home", "/tmp/x"]);
    assert!(e.contains("uses no quorum state"), "{e}");
    usage(
        &env,
        &["bench", "rollout", "--store", "etcd://127.0.0.1:2379"],
    );
    // Before the command, a global flag stays accepted everywhere (an alias may add it).
    env.ok(&["--home", env.home.to_str().unwrap(), "versions"]);
    let version = env.ok(&["version"]);
    assert_eq!(version, env.ok(&["-V"]));
    assert!(version.starts_with("quorum "), "{version}");
    assert!(!env.home.exists(), "no command here needed the home");
}

/// A controller whose metrics port is taken (by a controller of another home, say)
/// says so and names the flag that avoids it.
#[test]
fn a_taken_metrics_port_is_explained() {
    let env = Env::new("bad-metrics");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let e = env.fails(&["controller", "--metrics-addr", &addr]);
    let line = one_line(&e);
    assert!(
        line.contains(&addr)
            && line.contains("another quorum controller")
            && line.contains("--metrics-addr 127.0.0.1:PORT"),
        "{e}"
    );
}

/// A deletion a running controller finishes (`delete` without `--wait` returns before
/// it) removes HAProxy's directory, private key included: the controller's forget path.
#[test]
fn a_deletion_the_controller_finishes_removes_haproxys_key() {
    let mut env = Env::new("bad-forget");
    let socket = env.dir.path().join("admin.sock");
    let socket = socket.to_str().unwrap();
    env.ok(&[
        "create",
        "f",
        "--version",
        OLD,
        "--haproxy-runtime-api",
        socket,
    ]);
    // Paused, so the controller starts no machine; a deletion still goes ahead.
    env.ok(&["pause", "f"]);
    env.ok(&["haproxy-config", "f", "--bind", "127.0.0.1:23791"]);
    let dir = env.home.join("haproxy/f");
    assert!(dir.join("haproxy.pem").exists());
    env.start_controller();
    env.wait_status("f", "a controller active", Duration::from_secs(30), |s| {
        s["controller"]["active"] == true
    });
    let out = env.ok(&["delete", "f", "--yes"]);
    assert!(out.contains("the running controller removes"), "{out}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while env.run(&["status", "f"]).status.success() {
        assert!(
            std::time::Instant::now() < deadline,
            "not deleted within 30s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !dir.exists(),
        "the controller forgot f but left HAProxy's directory (and its private key) behind"
    );
}
