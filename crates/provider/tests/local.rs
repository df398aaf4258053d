//! The local provider on real etcd processes.

use quorum_core::{ClusterState, InitialMember, Machine, ProcessState};
use quorum_provider::{default_etcd_dir, LocalProvider, StartRequest};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn machine(name: &str, last_octet: u8) -> Machine {
    // A subnet of this test's own: 127.251.<pid-derived>.x.
    let b = (std::process::id() % 250) as u8;
    Machine {
        name: name.into(),
        serial: 1,
        address: Ipv4Addr::new(127, 251, b, last_octet),
        version: "3.4.23".parse().unwrap(),
        bootstrap: true,
        deleting: false,
        tls: false,
        certificates_not_after_unix_s: None,
        remediation: None,
    }
}

#[test]
fn start_observe_stop_restart_delete() {
    let dir = tempfile::tempdir().unwrap();
    let p =
        LocalProvider::new(dir.path(), default_etcd_dir()).with_stop_grace(Duration::from_secs(5));
    let m = machine("p-1", 10);
    let initial = [InitialMember {
        name: m.name.clone(),
        peer_url: m.peer_url(),
    }];
    let req = StartRequest {
        machine: &m,
        cluster_token: "p",
        state: ClusterState::New,
        initial_cluster: &initial,
        tls: None,
    };
    assert_eq!(p.observe("p-1").process, ProcessState::Stopped);
    assert!(!p.observe("p-1").has_data);

    let pid = p.start(&req).unwrap();
    assert_eq!(
        p.start(&req).unwrap(),
        pid,
        "starting a running machine is a no-op"
    );
    let addr = SocketAddrV4::new(m.address, quorum_core::CLIENT_PORT);
    wait_for("the client port", Duration::from_secs(20), || {
        TcpStream::connect(addr).is_ok()
    });
    wait_for("member data", Duration::from_secs(20), || {
        p.observe("p-1").has_data
    });
    let st = p.observe("p-1");
    assert_eq!((st.process, st.pid), (ProcessState::Running, Some(pid)));
    assert!(
        !std::fs::read_to_string(p.log_path("p-1"))
            .unwrap()
            .is_empty(),
        "etcd logs to its own file"
    );

    p.stop("p-1").unwrap();
    assert_eq!(p.observe("p-1").process, ProcessState::Stopped);
    p.stop("p-1").unwrap();

    // Restart on the existing data (the initial cluster flags are ignored by etcd then).
    let again = StartRequest {
        initial_cluster: &[],
        tls: None,
        state: ClusterState::Existing,
        ..req.clone()
    };
    let pid2 = p.start(&again).unwrap();
    assert_ne!(pid, pid2);
    wait_for(
        "the client port after restart",
        Duration::from_secs(20),
        || TcpStream::connect(addr).is_ok(),
    );

    p.delete("p-1").unwrap();
    assert_eq!(p.observe("p-1").process, ProcessState::Stopped);
    assert!(!p.machine_dir("p-1").exists());
    p.delete("p-1").unwrap();
}

#[test]
fn a_pid_file_naming_another_process_is_not_a_running_machine() {
    let dir = tempfile::tempdir().unwrap();
    let p = LocalProvider::new(dir.path(), default_etcd_dir());
    std::fs::create_dir_all(p.machine_dir("p-2")).unwrap();
    // This test process is alive, but it is not p-2's etcd.
    std::fs::write(
        p.machine_dir("p-2").join("pid"),
        std::process::id().to_string(),
    )
    .unwrap();
    assert_eq!(p.observe("p-2").process, ProcessState::Stopped);
    p.stop("p-2").unwrap();
    std::fs::write(p.machine_dir("p-2").join("pid"), "garbage").unwrap();
    assert_eq!(p.observe("p-2").process, ProcessState::Stopped);
}

#[test]
fn an_uninstalled_version_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = LocalProvider::new(dir.path(), default_etcd_dir());
    let mut m = machine("p-3", 11);
    m.version = "3.9.9".parse().unwrap();
    let req = StartRequest {
        machine: &m,
        cluster_token: "p",
        state: ClusterState::New,
        initial_cluster: &[],
        tls: None,
    };
    let e = p.start(&req).unwrap_err().to_string();
    assert!(
        e.contains("etcd 3.9.9 is not installed") && e.contains("install.sh"),
        "{e}"
    );
}
