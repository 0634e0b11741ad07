//! SHA-256 of files and streams, hex-encoded: shard checksums, downloads, config keys.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// SHA-256 of bytes in memory, hex-encoded.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// SHA-256 of a file, hex-encoded.
pub fn sha256_file(path: &Path) -> Result<String> {
    let f = File::open(path).with_context(|| format!("could not open '{}'", path.display()))?;
    sha256_reader(f, std::io::sink()).with_context(|| format!("could not read '{}'", path.display()))
}

/// SHA-256 of everything `from` yields, hex-encoded, copying it to `to` on the way (a
/// download is hashed as it is written; `std::io::sink()` to only hash).
pub fn sha256_reader(mut from: impl std::io::Read, mut to: impl std::io::Write) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            to.flush()?;
            return Ok(hex::encode(h.finalize()));
        }
        h.update(&buf[..n]);
        to.write_all(&buf[..n])?;
    }
}
