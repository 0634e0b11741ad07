//! The floor both halves stand on: the types and small services that every room of the data
//! half shares, and that import nothing else of bertpipe. A source, a step or a sink reaches
//! here, never sideways into another room or up into the executor.
//!
//! - [`document`]: the records that flow source → steps → sink;
//! - [`step`]: the trait every step implements and its verdict;
//! - [`manifest`]: the shard folder's layout and `manifest.json`, the tokenizer record;
//! - [`partition`]: which part of the input a task of an array reads;
//! - [`columns`]: Arrow columns read as the contract's types from any type that means the same;
//! - [`checksum`], [`progress`], and the cache folder and atomic writes below.

pub mod checksum;
pub mod columns;
pub mod document;
pub mod manifest;
pub mod partition;
pub mod progress;
pub mod step;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use step::{Step, Verdict};

/// Writes `path` whole or not at all: the bytes go to `.<name>.tmp` beside it, which is then
/// renamed over it (the folder is created if needed).
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    let tmp = dir.join(format!(".{}.tmp", path.file_name().unwrap_or_default().to_string_lossy()));
    std::fs::write(&tmp, bytes).with_context(|| format!("could not write '{}'", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("could not write '{}'", path.display()))
}

/// The fault-injection switches the tests use to simulate a crash, a Ctrl-C or a diverging
/// loss (`BERTPIPE_CRASH_AFTER_SHARDS`, `BERTPIPE_STOP_AT_STEP`, `BERTPIPE_NAN_AT_STEP`):
/// test-only, documented as such in the README. A set one is announced on stderr (once per
/// process), so it can never act unnoticed in a real run.
pub const TEST_HOOKS: [&str; 3] = ["BERTPIPE_CRASH_AFTER_SHARDS", "BERTPIPE_STOP_AT_STEP", "BERTPIPE_NAN_AT_STEP"];

/// The value of test hook `name` (one of [`TEST_HOOKS`]), when it is set to a number.
pub fn test_hook(name: &str) -> Option<u64> {
    static HOOKS: std::sync::OnceLock<Vec<Option<u64>>> = std::sync::OnceLock::new();
    let hooks = HOOKS.get_or_init(|| {
        TEST_HOOKS
            .iter()
            .map(|h| {
                let value = std::env::var(h).ok()?;
                eprintln!("warning: test hook {h}={value} is set (fault injection for bertpipe's tests; unset it)");
                value.parse().ok()
            })
            .collect()
    });
    TEST_HOOKS.iter().position(|h| *h == name).and_then(|i| hooks[i])
}

/// bertpipe's cache folder — ONNX Runtime installed by `doctor --install`, object-storage
/// staging and fetched shard folders: `$BERTPIPE_CACHE_DIR`, else `$XDG_CACHE_HOME/bertpipe`,
/// else `~/.cache/bertpipe`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("BERTPIPE_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("bertpipe");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("bertpipe")
}
