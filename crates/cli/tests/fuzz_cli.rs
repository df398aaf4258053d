//! Fuzzing the command line where it reaches the store (proptest, the real binary):
//! `create`, `scale`, `upgrade` and `apply -f` with arbitrary arguments either succeed
//! and store exactly what was asked, or fail with an error (one line, for quorum's own
//! refusals) and leave the stored state exactly as it was. No etcd is started: nothing
//! here needs a controller. Cases per property: QUORUM_FUZZ_CASES.

mod common;

use common::*;
use proptest::prelude::*;

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("QUORUM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Strings a user might type, or should never type.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("3.4.23".to_string()),
        Just("3.5".to_string()),
        Just("3.5.1".to_string()),
        Just("3".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("prod".to_string()),
        Just("/tmp/q.sock".to_string()),
        Just("".to_string()),
        "[a-z][a-z0-9-]{0,44}",
        "[ -~]{0,16}",
        // Any character but NUL, which no argv can carry.
        "[^\\x00]{0,16}",
    ]
}

/// The whole stored state, as text: what must not change when a command fails.
fn stored(env: &Env) -> String {
    let store = quorum_store::Store::open(&env.home).unwrap();
    let cps = store.control_planes().unwrap();
    format!("{cps:?}")
}

/// Runs `args` and checks the outcome; returns the exit code.
fn check(env: &Env, args: &[String]) -> Result<Option<i32>, TestCaseError> {
    let before = stored(env);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = env.run(&refs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {}
        Some(1) => {
            let lines = stderr.lines().filter(|l| !l.trim().is_empty()).count();
            prop_assert_eq!(lines, 1, "{:?}: {}", args, stderr);
            prop_assert_eq!(
                stored(env),
                before,
                "{:?} failed but changed the state",
                args
            );
        }
        // clap's usage errors: several lines by design, and nothing was stored.
        Some(2) => prop_assert_eq!(stored(env), before),
        other => prop_assert!(false, "{:?}: exit {:?}: {}", args, other, stderr),
    }
    Ok(out.status.code())
}

proptest! {
    #![proptest_config(cases(48))]

    #[test]
    fn create_with_any_arguments(
        name in word(),
        version in word(),
        replicas in word(),
        surge in word(),
        socket in proptest::option::of(word()),
    ) {
        let env = Env::new("fuzz-create");
        let mut args: Vec<String> = vec!["create".into(), name.clone(), "--version".into(), version, "--replicas".into(), replicas, "--max-surge".into(), surge];
        if let Some(s) = socket {
            args.extend(["--haproxy-runtime-api".to_string(), s]);
        }
        check(&env, &args)?;
    }

    #[test]
    fn changes_with_any_arguments(
        name in prop_oneof![Just("a".to_string()), word()],
        value in word(),
        verb in prop::sample::select(vec!["scale", "upgrade"]),
    ) {
        let env = Env::new("fuzz-change");
        env.ok(&["create", "a", "--version", OLD]);
        let flag = if verb == "scale" { "--replicas" } else { "--version" };
        let code = check(&env, &[verb.to_string(), name, flag.to_string(), value.clone()])?;
        // A value the flag cannot take is a malformed command line, whatever the name.
        let t = value.trim();
        let valid = if verb == "scale" {
            t.parse::<u32>().is_ok_and(|n| (1..=quorum_core::MAX_REPLICAS).contains(&n))
        } else {
            t.parse::<quorum_core::VersionRequest>().is_ok()
        };
        if !valid {
            prop_assert_eq!(code, Some(2), "{} {} {:?}", verb, flag, value);
        }
    }

    #[test]
    fn apply_with_any_manifest(
        name in word(),
        replicas in word(),
        version in word(),
        extra in proptest::option::of(word()),
    ) {
        let env = Env::new("fuzz-apply");
        env.ok(&["create", "a", "--version", OLD]);
        let mut text = format!(
            "apiVersion: quorum.dev/v1alpha1\nkind: ControlPlane\nmetadata:\n  name: {name:?}\nspec:\n  replicas: {replicas:?}\n  version: {version:?}\n"
        );
        if let Some(x) = extra {
            text += &format!("  {x}: 1\n");
        }
        let file = env.dir.path().join("m.yaml");
        std::fs::write(&file, &text).unwrap();
        check(&env, &["apply".into(), "-f".into(), file.display().to_string()])?;
    }
}
