//! The floor both halves stand on: the types and small services that every room of the data
//! half shares, and that import nothing else of bertpipe. A source, a step or a sink reaches
//! here, never sideways into another room or up into the executor.
//!
//! - [`document`]: the records that flow source → steps → sink;
//! - [`step`]: the trait every step implements and its verdict;
//! - [`manifest`]: the shard folder's layout and `manifest.json`, the tokenizer record;
//! - [`partition`]: which part of the input a task of an array reads;
//! - [`columns`]: Arrow columns read as the contract's types from any type that means the same;
//! - [`interrupt`]: Ctrl-C, handled once for the process;
//! - [`reads`]: what a command read (files opened, folders listed, objects fetched), for the
//!   chain's keys;
//! - [`checksum`], [`progress`], and the cache folder and atomic writes below.

pub mod checksum;
pub mod columns;
pub mod document;
pub mod interrupt;
pub mod manifest;
pub mod partition;
pub mod progress;
pub mod reads;
pub mod step;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use step::{Step, Verdict};

/// Gives `path` the permissions a file made with `std::fs::File::create` has (0666 less the
/// process's umask, read from `/proc/self/status`): for files a library wrote through a
/// private temporary (0600). Where the umask cannot be read, the file is left as it is.
pub fn set_default_mode(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let umask =
        status.lines().find_map(|l| l.strip_prefix("Umask:")).and_then(|m| u32::from_str_radix(m.trim(), 8).ok());
    if let Some(umask) = umask {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666 & !umask))
            .with_context(|| format!("could not set the permissions of '{}'", path.display()))?;
    }
    Ok(())
}

/// This build of bertpipe: its version and a digest of the sources it was built from
/// (`build.rs`). A chain's stage keys carry it, so a binary built from other sources — which
/// may write other shards for the same input — never finds an older binary's stages up to date.
pub const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), " (build ", env!("BERTPIPE_BUILD_ID"), ")");

/// Writes `path` whole or not at all: the bytes go to a temporary file beside it
/// (`.<name>.<pid>-<n>.tmp`, unique to this process and call, so two processes writing the same
/// file never share one), which is then renamed over it (the folder is created if needed).
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    let tmp = temp_path(path);
    std::fs::write(&tmp, bytes).with_context(|| format!("could not write '{}'", tmp.display()))?;
    kill_point();
    std::fs::rename(&tmp, path).with_context(|| format!("could not write '{}'", path.display()))
}

/// A temporary beside `path`, unique to this process and call (`.<name>.<pid>-<n>.tmp`), for a
/// file written in full and then renamed over `path`.
pub fn temp_path(path: &Path) -> std::path::PathBuf {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

/// The file a temporary of [`write_file_atomic`] (`.<name>.<pid>-<n>.tmp`) or of a shard
/// writer (`.<name>.tmp`) stands for: `<name>`; `None` for any other name.
pub fn temp_target(file: &str) -> Option<&str> {
    let inner = file.strip_prefix('.')?.strip_suffix(".tmp")?;
    match inner.rsplit_once('.') {
        Some((name, tag))
            if tag.split_once('-').is_some_and(|(a, b)| {
                !a.is_empty() && !b.is_empty() && (a.bytes().chain(b.bytes())).all(|c| c.is_ascii_digit())
            }) =>
        {
            Some(name)
        }
        _ => Some(inner),
    }
}

/// Raises glibc's `mmap` and trim thresholds so that memory C code frees (and, in the Python
/// wheel, Rust code too) stays with the process for reuse instead of going back to the OS and
/// being faulted in and zeroed again. Peak memory is unchanged. Two users: the trainer, whose ops
/// allocate tensors of the same few large sizes every step, and the `pipeline run` / `run`
/// commands, whose Parquet writers create a zstd context per column chunk (C allocations of
/// ~1 MB that glibc served with a fresh `mmap` each time: 4,000 of html's 6,500 page faults, a
/// 0.96× wall when kept; docs/benchmarks.md). The `bertpipe` binary's own allocator is mimalloc
/// (`src/main.rs`), which this does not touch. A threshold the user set for glibc in the
/// environment (`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=…`, or the older
/// `MALLOC_MMAP_THRESHOLD_`) wins over ours, as `MIMALLOC_PURGE_DELAY` does in `main`.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (option, value, tunable, old_name) in [
        (libc::M_MMAP_THRESHOLD, 32 << 20, "glibc.malloc.mmap_threshold", "MALLOC_MMAP_THRESHOLD_"),
        (libc::M_TRIM_THRESHOLD, 1 << 30, "glibc.malloc.trim_threshold", "MALLOC_TRIM_THRESHOLD_"),
    ] {
        if !user_sets_malloc(std::env::var("GLIBC_TUNABLES").ok().as_deref(), tunable)
            && std::env::var_os(old_name).is_none()
        {
            // SAFETY: mallopt only changes allocator tuning parameters.
            unsafe { libc::mallopt(option, value) };
        }
    }
}

/// Whether a `GLIBC_TUNABLES` value (`name=value:name=value…`) sets `tunable`.
fn user_sets_malloc(tunables: Option<&str>, tunable: &str) -> bool {
    tunables.is_some_and(|t| t.split(':').any(|kv| kv.split('=').next() == Some(tunable)))
}

/// Test hook `BERTPIPE_KILL_AT=N`: the N-th kill point this process passes (1-based) kills it
/// with SIGKILL, as `kill -9` would. Kill points sit between writing a file and renaming it into
/// place ([`write_file_atomic`], shards, checkpoints) and between the chain runner's steps, so
/// a test can stop a run at every place a real kill could land and check what survives.
pub fn kill_point() {
    static PASSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Some(at) = test_hook("BERTPIPE_KILL_AT") else { return };
    let n = PASSED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    if std::env::var_os("BERTPIPE_KILL_TRACE").is_some() {
        eprintln!("kill point {n}");
    }
    if n == at {
        // SAFETY: kill(2) on our own pid with a constant signal has no memory effects.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// The fault-injection switches the tests use to simulate a crash, a Ctrl-C, a diverging loss
/// or a `kill -9`, or a machine with less memory (`BERTPIPE_CRASH_AFTER_SHARDS`, `BERTPIPE_STOP_AT_STEP`,
/// `BERTPIPE_NAN_AT_STEP`, `BERTPIPE_KILL_AT`, `BERTPIPE_MEMORY_AVAILABLE`):
/// test-only, documented as such in the README. A set one is announced on stderr (once per
/// process), so it can never act unnoticed in a real run.
pub const TEST_HOOKS: [&str; 6] = [
    "BERTPIPE_CRASH_AFTER_SHARDS",
    "BERTPIPE_PAUSE_AFTER_SHARDS",
    "BERTPIPE_STOP_AT_STEP",
    "BERTPIPE_NAN_AT_STEP",
    "BERTPIPE_KILL_AT",
    "BERTPIPE_MEMORY_AVAILABLE",
];

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A threshold in `GLIBC_TUNABLES` is the user's: `keep_freed_memory` leaves it.
    #[test]
    fn glibc_tunables_the_user_set_win() {
        let t = "glibc.malloc.trim_threshold=65536:glibc.malloc.mmap_threshold=131072";
        assert!(user_sets_malloc(Some(t), "glibc.malloc.mmap_threshold"));
        assert!(user_sets_malloc(Some(t), "glibc.malloc.trim_threshold"));
        assert!(!user_sets_malloc(Some("glibc.malloc.arena_max=2"), "glibc.malloc.mmap_threshold"));
        assert!(!user_sets_malloc(Some("glibc.malloc.mmap_threshold_x=1"), "glibc.malloc.mmap_threshold"));
        assert!(!user_sets_malloc(None, "glibc.malloc.mmap_threshold"));
    }

    #[test]
    fn temporaries_name_the_file_they_stand_for_and_never_collide() {
        assert_eq!(temp_target(".manifest.json.4242-7.tmp"), Some("manifest.json"));
        assert_eq!(temp_target(".part-00003.parquet.tmp"), Some("part-00003.parquet"));
        assert_eq!(temp_target(".00001.bin.17-0.tmp"), Some("00001.bin"));
        assert_eq!(temp_target("manifest.json"), None);
        assert_eq!(temp_target(".hidden"), None);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("record.json");
        // Two writers of one file: each through its own temporary, the last rename wins whole.
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let f = &f;
                s.spawn(move || write_file_atomic(f, &[i; 4096]).unwrap());
            }
        });
        let bytes = std::fs::read(&f).unwrap();
        assert!(bytes.len() == 4096 && bytes.iter().all(|b| *b == bytes[0]));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary left behind");
    }
}
