//! The two digests of a snapshot stream: etcd's own (the sha256 of the database, sent
//! as the stream's last 32 bytes) and ours (the sha256 of the whole file as stored).

use quorum_core::backup::SNAPSHOT_DIGEST_BYTES;
use ring::digest::{Context, SHA256};

/// Fed the stream chunk by chunk: hashes everything but the last 32 bytes seen so far
/// (etcd's digest, if the stream ends there), and the whole stream besides.
pub struct StreamDigests {
    database: Context,
    file: Context,
    /// The last bytes seen, not yet known to be database rather than digest.
    held: Vec<u8>,
    bytes: u64,
}

/// What the digests said once the stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digested {
    /// The sha256 of the whole file, hex.
    pub file_sha256: String,
    pub bytes: u64,
}

/// The stream's last 32 bytes are not the sha256 of what came before them: the
/// snapshot is damaged (or was not etcd's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the snapshot's digest does not match its database ({bytes} bytes streamed): etcd's sha256 says {said}, the data hashes to {got}")]
pub struct DigestMismatch {
    pub said: String,
    pub got: String,
    pub bytes: u64,
}

impl Default for StreamDigests {
    fn default() -> Self {
        StreamDigests {
            database: Context::new(&SHA256),
            file: Context::new(&SHA256),
            held: Vec::with_capacity(2 * SNAPSHOT_DIGEST_BYTES),
            bytes: 0,
        }
    }
}

impl StreamDigests {
    pub fn update(&mut self, chunk: &[u8]) {
        self.file.update(chunk);
        self.bytes += chunk.len() as u64;
        if chunk.len() >= SNAPSHOT_DIGEST_BYTES {
            // Everything held, and all of this chunk but its tail, is database.
            self.database.update(&self.held);
            let (body, tail) = chunk.split_at(chunk.len() - SNAPSHOT_DIGEST_BYTES);
            self.database.update(body);
            self.held.clear();
            self.held.extend_from_slice(tail);
        } else {
            self.held.extend_from_slice(chunk);
            let spill = self.held.len().saturating_sub(SNAPSHOT_DIGEST_BYTES);
            self.database.update(&self.held[..spill]);
            self.held.drain(..spill);
        }
        debug_assert!(self.held.len() <= SNAPSHOT_DIGEST_BYTES);
    }

    /// Checks etcd's digest against the database and returns the file's.
    pub fn finish(self) -> Result<Digested, DigestMismatch> {
        let got = hex(self.database.finish().as_ref());
        let said = hex(&self.held);
        if self.held.len() != SNAPSHOT_DIGEST_BYTES || said != got {
            return Err(DigestMismatch {
                said,
                got,
                bytes: self.bytes,
            });
        }
        Ok(Digested {
            file_sha256: hex(self.file.finish().as_ref()),
            bytes: self.bytes,
        })
    }
}

/// The sha256 of `data`, hex (for files read back whole in tests and checks).
pub fn sha256_hex(data: &[u8]) -> String {
    hex(ring::digest::digest(&SHA256, data).as_ref())
}

/// How much of a file is read at a time to hash it.
const HASH_READ_BYTES: usize = 1 << 20;

/// The sha256 of the file at `path`, hex, read a megabyte at a time (never whole).
pub fn sha256_file(path: &std::path::Path) -> Result<String, crate::BackupError> {
    use std::io::Read;
    let err = |e: std::io::Error| crate::BackupError::Store {
        location: path.display().to_string(),
        message: e.to_string(),
    };
    let mut f = std::fs::File::open(path).map_err(err)?;
    let mut ctx = Context::new(&SHA256);
    let mut buf = vec![0u8; HASH_READ_BYTES];
    loop {
        let n = f.read(&mut buf).map_err(err)?;
        if n == 0 {
            return Ok(hex(ctx.finish().as_ref()));
        }
        ctx.update(&buf[..n]);
    }
}

/// Refuses a snapshot file whose SHA-256 is not the one recorded when it was taken.
pub(crate) fn check_unchanged(
    rec: &quorum_core::SnapshotRecord,
    file: &std::path::Path,
) -> Result<(), crate::BackupError> {
    let sha = sha256_file(file)?;
    if sha != rec.sha256 {
        return Err(crate::BackupError::Facts(format!(
            "{} changed since it was taken: its sha256 is {sha}, the record says {}",
            file.display(),
            rec.sha256
        )));
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream as etcd sends it: a database, then its sha256.
    fn stream(db: &[u8]) -> Vec<u8> {
        let mut s = db.to_vec();
        s.extend_from_slice(ring::digest::digest(&SHA256, db).as_ref());
        s
    }

    fn feed(data: &[u8], chunk_sizes: &[usize]) -> Result<Digested, DigestMismatch> {
        let mut d = StreamDigests::default();
        let mut at = 0;
        let mut i = 0;
        while at < data.len() {
            let n = chunk_sizes[i % chunk_sizes.len()].min(data.len() - at);
            d.update(&data[at..at + n]);
            at += n;
            i += 1;
        }
        d.finish()
    }

    #[test]
    fn etcds_digest_checks_out_however_the_stream_is_cut() {
        let db: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let s = stream(&db);
        for sizes in [
            &[1][..],
            &[31],
            &[32],
            &[33],
            &[4096],
            &[5, 64, 1, 1000],
            &[20_000],
        ] {
            let d = feed(&s, sizes).unwrap_or_else(|e| panic!("{sizes:?}: {e}"));
            assert_eq!(d.bytes, s.len() as u64);
            assert_eq!(d.file_sha256, sha256_hex(&s), "{sizes:?}");
        }
    }

    #[test]
    fn a_damaged_or_short_stream_is_refused() {
        let db = vec![7u8; 1000];
        let mut flipped = stream(&db);
        flipped[10] ^= 1;
        assert!(feed(&flipped, &[100]).is_err());
        let full = stream(&db);
        assert!(feed(&full[..full.len() - 1], &[100]).is_err(), "cut short");
        assert!(feed(&db, &[100]).is_err(), "no digest at all");
        assert!(feed(&full[..20], &[7]).is_err(), "shorter than a digest");
    }
}
