//! What a machine's directory says about its data and its past: the identity marker
//! of its data directory, what the data directory holds, when its process was
//! started, and the end of its log. Plain files, each read leniently (what cannot be
//! read is reported as such, never as an error that hides the machine) and written
//! atomically (a reader never sees half a file).

use quorum_core::DataMarker;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The identity marker's file name, in the root of the data directory: it travels with
/// the data it describes (a data directory copied from elsewhere brings its own marker
/// or none, never this machine's), and goes when the data directory goes. etcd (3.4.23
/// and 3.5.1, checked) starts with it there, fresh or on existing data, and logs one
/// warning per start ("found invalid file under data directory"), nothing more.
pub const MARKER_FILE: &str = "quorum-member.json";

/// The start history's file name, in the machine directory (beside the data directory:
/// the history outlives a wiped data directory, so a crash loop stays counted).
pub const STARTS_FILE: &str = "starts";

/// How many process starts the history keeps (the most recent ones): the core's
/// bound, which counts crash loops from them.
pub use quorum_core::health::STARTS_KEPT;

/// The most of a log file's end `last_log_lines` reads.
pub const LOG_TAIL_BYTES: u64 = 64 * 1024;

/// The marker that stands for one that exists but cannot be read (not JSON, ids that
/// are not 16 hex digits, unreadable): etcd never gives a cluster or a member the id
/// 0, so it matches no member, and a core that compares ids refuses to start it.
pub const UNREADABLE_MARKER: DataMarker = DataMarker {
    cluster_id: 0,
    member_id: 0,
};

/// The marker as written: ids as 16 hex digits, as etcd prints them (`etcdctl member
/// list`, its logs), so a person can compare them.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MarkerFile {
    cluster_id: String,
    member_id: String,
}

fn hex_id(id: u64) -> String {
    format!("{id:016x}")
}

fn parse_hex_id(s: &str) -> Option<u64> {
    if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// The marker in `data_dir`: `None` when there is no marker file,
/// `UNREADABLE_MARKER` when there is one that cannot be read as a marker.
pub fn read_marker(data_dir: &Path) -> Option<DataMarker> {
    let bytes = match fs::read(data_dir.join(MARKER_FILE)) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(_) => return Some(UNREADABLE_MARKER),
    };
    let parsed = serde_json::from_slice::<MarkerFile>(&bytes)
        .ok()
        .and_then(|m| {
            Some(DataMarker {
                cluster_id: parse_hex_id(&m.cluster_id)?,
                member_id: parse_hex_id(&m.member_id)?,
            })
        });
    Some(parsed.unwrap_or(UNREADABLE_MARKER))
}

/// Writes the marker into `data_dir` atomically and durably (a temporary file,
/// fsynced, renamed over the marker, the directory fsynced). The same marker again
/// rewrites the same bytes.
pub fn write_marker(data_dir: &Path, marker: DataMarker) -> io::Result<()> {
    let doc = MarkerFile {
        cluster_id: hex_id(marker.cluster_id),
        member_id: hex_id(marker.member_id),
    };
    // A two-field struct of strings always serializes.
    let mut bytes = serde_json::to_vec(&doc).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_atomically(data_dir, MARKER_FILE, &bytes)
}

/// Writes `dir/name` as a whole: a temporary file beside it, fsynced, renamed over it,
/// and the directory fsynced, so a crash leaves the old file or the new one.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, dir.join(name))?;
    fs::File::open(dir)?.sync_all()
}

/// What a data directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDirState {
    /// There is no data directory.
    Missing,
    /// It exists and holds nothing but, perhaps, an identity marker.
    Empty,
    /// It holds etcd member data (`member/wal`): what etcd starts from.
    Member,
    /// It holds something, but not member data that etcd would start from (a partly
    /// removed `member/`, files of something else).
    Other,
}

/// What `data_dir` holds.
pub fn data_dir_state(data_dir: &Path) -> DataDirState {
    if data_dir.join("member").join("wal").is_dir() {
        return DataDirState::Member;
    }
    let Ok(entries) = fs::read_dir(data_dir) else {
        return if data_dir.exists() {
            DataDirState::Other
        } else {
            DataDirState::Missing
        };
    };
    let other = entries.flatten().any(|e| e.file_name() != MARKER_FILE);
    if other {
        DataDirState::Other
    } else {
        DataDirState::Empty
    }
}

/// The recorded process starts in `machine_dir`, oldest first, planned ones included:
/// the core's in-place step counts its own (planned) start as the first of its phase,
/// so which starts a crash loop and the backoff should leave out is the core's to say
/// (`read_planned_starts` tells them apart). A missing or garbled history is an empty
/// one.
pub fn read_starts(machine_dir: &Path) -> Vec<i64> {
    read_start_lines(machine_dir)
        .into_iter()
        .map(|(at, _)| at)
        .collect()
}

/// The recorded starts that followed a stop quorum asked for, oldest first.
pub fn read_planned_starts(machine_dir: &Path) -> Vec<i64> {
    read_start_lines(machine_dir)
        .into_iter()
        .filter(|(_, planned)| *planned)
        .map(|(at, _)| at)
        .collect()
}

/// Every recorded start, with whether it was planned (`<unix s>` or `<unix s> planned`
/// per line), the last `STARTS_KEPT`: one read for an observation that needs both.
pub fn read_start_lines(machine_dir: &Path) -> Vec<(i64, bool)> {
    let Ok(text) = fs::read_to_string(machine_dir.join(STARTS_FILE)) else {
        return Vec::new();
    };
    let parsed: Option<Vec<(i64, bool)>> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.trim().split_once(' ') {
            None => l.trim().parse().ok().map(|at| (at, false)),
            Some((at, PLANNED)) => at.parse().ok().map(|at| (at, true)),
            Some(_) => None,
        })
        .collect();
    let mut starts = parsed.unwrap_or_default();
    // Bounded whatever wrote the file.
    let excess = starts.len().saturating_sub(STARTS_KEPT);
    starts.drain(..excess);
    starts
}

/// How a planned start is marked in the history.
const PLANNED: &str = "planned";
/// Written by a stop quorum asks for; the next start takes it and is planned.
pub const STOP_REQUESTED_FILE: &str = "stop-requested";

/// Notes that quorum stopped the machine on purpose, so its next start is planned.
pub fn request_stop(machine_dir: &Path) -> io::Result<()> {
    if !machine_dir.is_dir() {
        return Ok(());
    }
    write_atomically(machine_dir, STOP_REQUESTED_FILE, b"")
}

/// Whether the start about to happen follows a stop quorum asked for (and forgets it).
pub fn take_stop_request(machine_dir: &Path) -> io::Result<bool> {
    match fs::remove_file(machine_dir.join(STOP_REQUESTED_FILE)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Adds a start at `at_unix_s` (`planned`: after a stop quorum asked for) to the
/// history in `machine_dir`, keeping the last `STARTS_KEPT`, rewritten atomically.
pub fn record_start(machine_dir: &Path, at_unix_s: i64, planned: bool) -> io::Result<()> {
    let mut starts = read_start_lines(machine_dir);
    starts.push((at_unix_s, planned));
    let excess = starts.len().saturating_sub(STARTS_KEPT);
    starts.drain(..excess);
    let text: String = starts
        .iter()
        .map(|(at, planned)| match planned {
            true => format!("{at} {PLANNED}\n"),
            false => format!("{at}\n"),
        })
        .collect();
    write_atomically(machine_dir, STARTS_FILE, text.as_bytes())
}

/// Where a machine's last exit is recorded (by the process that started it and reaped
/// it; a process that outlived its starter is reaped by init and leaves none).
pub const EXIT_FILE: &str = "last-exit";

/// Records how the machine's process ended ("exited 0", "killed by signal 9") in
/// `machine_dir`, atomically. A machine directory that is gone (deleted) stays gone.
pub fn record_exit(machine_dir: &Path, status: std::process::ExitStatus) -> io::Result<()> {
    use std::os::unix::process::ExitStatusExt;
    if !machine_dir.is_dir() {
        return Ok(());
    }
    let text = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended".to_string(),
    };
    write_atomically(machine_dir, EXIT_FILE, text.as_bytes())
}

/// Forgets the last exit (before a start). None recorded is success.
pub fn clear_exit(machine_dir: &Path) -> io::Result<()> {
    match fs::remove_file(machine_dir.join(EXIT_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// How the machine's last process ended, if its starter saw it.
pub fn read_exit(machine_dir: &Path) -> Option<String> {
    let text = fs::read_to_string(machine_dir.join(EXIT_FILE)).ok()?;
    let text = text.trim();
    (!text.is_empty() && text.len() <= 64).then(|| text.to_string())
}

/// The last `n` lines of the file at `path`, reading at most its last
/// `LOG_TAIL_BYTES` (a line cut by that limit is left out). A missing or unreadable
/// file has no lines; bytes that are not UTF-8 are replaced.
pub fn last_lines(path: &Path, n: usize) -> Vec<String> {
    tail(path, n).unwrap_or_default()
}

fn tail(path: &Path, n: usize) -> io::Result<Vec<String>> {
    let mut f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(LOG_TAIL_BYTES);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.take(LOG_TAIL_BYTES).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<&str> = text.lines().collect();
    if start > 0 && !lines.is_empty() {
        // The read began inside a line.
        lines.remove(0);
    }
    let skip = lines.len().saturating_sub(n);
    Ok(lines[skip..].iter().map(|l| l.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_as_hex_and_rewrites_idempotently() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_marker(d.path()), None);
        let m = DataMarker {
            cluster_id: 0xdead_beef_0000_0001,
            member_id: 42,
        };
        write_marker(d.path(), m).unwrap();
        write_marker(d.path(), m).unwrap();
        assert_eq!(read_marker(d.path()), Some(m));
        let text = fs::read_to_string(d.path().join(MARKER_FILE)).unwrap();
        assert_eq!(
            text,
            "{\"clusterId\":\"deadbeef00000001\",\"memberId\":\"000000000000002a\"}\n"
        );
        assert!(!d.path().join(format!("{MARKER_FILE}.tmp")).exists());
    }

    #[test]
    fn a_garbled_marker_is_unreadable_not_absent() {
        let d = tempfile::tempdir().unwrap();
        for garbled in [
            "",
            "not json",
            "{\"clusterId\":\"1\",\"memberId\":\"2\"}",
            "{\"clusterId\":\"deadbeef0000000g\",\"memberId\":\"000000000000002a\"}",
            "{\"clusterId\":\"deadbeef00000001\"}",
            "{\"clusterId\":\"deadbeef00000001\",\"memberId\":\"000000000000002a\",\"x\":1}",
        ] {
            fs::write(d.path().join(MARKER_FILE), garbled).unwrap();
            assert_eq!(read_marker(d.path()), Some(UNREADABLE_MARKER), "{garbled}");
        }
        // A directory where the file should be: there, but unreadable.
        fs::remove_file(d.path().join(MARKER_FILE)).unwrap();
        fs::create_dir(d.path().join(MARKER_FILE)).unwrap();
        assert_eq!(read_marker(d.path()), Some(UNREADABLE_MARKER));
    }

    #[test]
    fn a_data_directory_is_missing_empty_member_or_other() {
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        assert_eq!(data_dir_state(&data), DataDirState::Missing);
        fs::create_dir(&data).unwrap();
        assert_eq!(data_dir_state(&data), DataDirState::Empty);
        write_marker(&data, UNREADABLE_MARKER).unwrap();
        assert_eq!(data_dir_state(&data), DataDirState::Empty);
        fs::create_dir_all(data.join("member").join("snap")).unwrap();
        assert_eq!(data_dir_state(&data), DataDirState::Other);
        fs::create_dir_all(data.join("member").join("wal")).unwrap();
        assert_eq!(data_dir_state(&data), DataDirState::Member);
    }

    #[test]
    fn the_start_history_keeps_the_last_starts_oldest_first() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_starts(d.path()).is_empty());
        for t in 0..(STARTS_KEPT as i64 + 5) {
            record_start(d.path(), 1_000 + t, false).unwrap();
        }
        let starts = read_starts(d.path());
        assert_eq!(starts.len(), STARTS_KEPT);
        assert_eq!(starts[0], 1_005);
        assert_eq!(*starts.last().unwrap(), 1_000 + STARTS_KEPT as i64 + 4);
        // Garbled: empty, and the next start begins a new history.
        fs::write(d.path().join(STARTS_FILE), "12\nbanana\n").unwrap();
        assert!(read_starts(d.path()).is_empty());
        record_start(d.path(), 7, false).unwrap();
        assert_eq!(read_starts(d.path()), [7]);
        // A planned start (after a stop quorum asked for) is kept, and told apart.
        record_start(d.path(), 8, true).unwrap();
        record_start(d.path(), 9, false).unwrap();
        assert_eq!(read_starts(d.path()), [7, 8, 9]);
        assert_eq!(read_planned_starts(d.path()), [8]);
        assert!(!take_stop_request(d.path()).unwrap());
        request_stop(d.path()).unwrap();
        assert!(take_stop_request(d.path()).unwrap());
        assert!(!take_stop_request(d.path()).unwrap(), "taken once");
        // A file longer than the limit (written by hand) reads bounded.
        let long: String = (0..100).map(|i| format!("{i}\n")).collect();
        fs::write(d.path().join(STARTS_FILE), long).unwrap();
        assert_eq!(read_starts(d.path()).len(), STARTS_KEPT);
        assert_eq!(read_starts(d.path())[0], 100 - STARTS_KEPT as i64);
    }

    #[test]
    fn the_last_lines_come_from_a_bounded_tail() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("etcd.log");
        assert!(last_lines(&log, 5).is_empty());
        fs::write(&log, "one\ntwo\nthree\n").unwrap();
        assert_eq!(last_lines(&log, 2), ["two", "three"]);
        assert_eq!(last_lines(&log, 10), ["one", "two", "three"]);
        assert!(last_lines(&log, 0).is_empty());
        // Far more than the tail: only whole lines from its end, and never more than
        // the tail holds.
        let line = "x".repeat(999);
        let mut big = String::new();
        for i in 0..1_000 {
            big.push_str(&format!("{i:04} {line}\n"));
        }
        big.push_str("last line without a newline");
        fs::write(&log, &big).unwrap();
        let lines = last_lines(&log, 3);
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("0998 ") && lines[1].starts_with("0999 "));
        assert_eq!(lines[2], "last line without a newline");
        let all = last_lines(&log, usize::MAX);
        assert!(all.len() < 70, "{}", all.len());
        assert!(all
            .iter()
            .all(|l| l.len() == 1_004 || l.starts_with("last")));
    }
}
