//! A process that opens the state file twice (the controller and its join service do)
//! keeps every write, even when another process opens and closes the file meanwhile.
//!
//! Closing any descriptor of a file drops every POSIX lock the process holds on it,
//! SQLite's included; the second open used to open the state file with `std::fs` to
//! create it, and a CLI closing its connection then deleted the WAL the controller was
//! still writing to. Every write after that was lost.

use quorum_store::Store;
use std::process::Command;

#[test]
fn a_second_open_in_one_process_loses_no_write_of_the_first() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    let first = Store::open(&home).unwrap();
    first.setting_or_init("probe", "0").unwrap();
    let _second = Store::open(&home).unwrap();
    // Another process opens the file and closes it: SQLite's last-connection cleanup
    // runs there if this process's locks were dropped.
    let db = home.join("quorum.db");
    let other = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('select count(*) from meta').fetchall(); c.close()",
        ])
        .arg(&db)
        .status()
        .expect("python3 runs (scripts/install.sh installs it)");
    assert!(other.success());
    assert!(first.replace_setting("probe", "0", "1").unwrap());
    drop(first);
    let reopened = Store::open(&home).unwrap();
    assert_eq!(reopened.setting("probe").unwrap().as_deref(), Some("1"));
    let deleted = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|p| p.to_string_lossy().contains("(deleted)") && p.starts_with(&home))
        .count();
    assert_eq!(deleted, 0, "a connection still writes to a deleted WAL");
}
