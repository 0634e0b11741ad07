//! Ctrl-C and SIGTERM, handled once for the whole process.
//!
//! Whatever runs (one command, or a chain of stages one after another) shares one handler,
//! installed on first use. Work that can stop cleanly — a training loop, which checkpoints
//! first — registers itself with [`graceful`] while it runs, and polls [`requested`]; a signal
//! then only raises the flag. A signal with no graceful work running (a pipeline, an export, an
//! evaluation, or the chain between stages) ends the process at once with exit code 130: those
//! stages write whole files or journals, so what they leave is resumed or redone by the next
//! run, never taken for finished. A second signal always ends the process.
//!
//! Temporary files and folders that are not finished outputs yet — a row store being copied,
//! an export written aside until it is verified — are [`Scratch`] paths: removed when their
//! guard drops (the work failed, returned or panicked) and, when a signal ends the process, by
//! the handler before it exits. Only a kill that runs no code of ours (SIGKILL, a power cut)
//! leaves one: the row store sweeps its own at the next training; an export's is named as a
//! temporary (`.<name>.<pid>-<n>.tmp`), never taken for a finished file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static GRACEFUL: AtomicUsize = AtomicUsize::new(0);
static INSTALL: std::sync::Once = std::sync::Once::new();
/// The live [`Scratch`] paths, by the guard's number.
static SCRATCH: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static SCRATCH_SEQ: AtomicU64 = AtomicU64::new(0);

/// Exit code of a process stopped by Ctrl-C (128 + SIGINT), as shells report it.
pub const EXIT_CODE: i32 = 130;

/// Installs the process's handler (once; later calls do nothing).
pub fn install() {
    INSTALL.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            let again = REQUESTED.swap(true, Ordering::SeqCst);
            if again || GRACEFUL.load(Ordering::SeqCst) == 0 {
                eprintln!("\ninterrupted");
                remove_all_scratch();
                std::process::exit(EXIT_CODE);
            }
            eprintln!("\nstopping at the next step (Ctrl-C again to stop at once)");
        });
    });
}

/// Whether a stop was asked for since the last [`clear`].
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// Forgets a stop that was handled, so the next piece of work starts afresh.
pub fn clear() {
    REQUESTED.store(false, Ordering::SeqCst);
}

/// While the returned guard lives, a signal only raises the flag: the caller stops cleanly at
/// its next check of [`requested`].
pub fn graceful() -> Graceful {
    install();
    GRACEFUL.fetch_add(1, Ordering::SeqCst);
    Graceful(())
}

pub struct Graceful(());

impl Drop for Graceful {
    fn drop(&mut self) {
        GRACEFUL.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Registers `path` (a file or a folder, there or still to be made) as scratch: what this
/// process is writing and has not finished. It is removed when the guard drops — unless
/// [`Scratch::keep`] was called — and by the signal handler (installed here) when a signal
/// ends the process.
pub fn scratch(path: impl Into<PathBuf>) -> Scratch {
    install();
    let path = path.into();
    let id = SCRATCH_SEQ.fetch_add(1, Ordering::SeqCst);
    registry().push((id, path.clone()));
    Scratch { id, path, keep: false }
}

/// A registered scratch path; see [`scratch`].
#[must_use = "a scratch path is removed when its guard drops"]
#[derive(Debug)]
pub struct Scratch {
    id: u64,
    path: PathBuf,
    keep: bool,
}

impl Scratch {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path is no longer scratch (it became a finished output where it lies): it is left
    /// as it is. After a rename away, nothing is at the path and dropping the guard is enough.
    pub fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Removed before it leaves the registry, so a signal in between removes it too.
        if !self.keep {
            remove_path(&self.path);
        }
        registry().retain(|(id, _)| *id != self.id);
    }
}

/// The registry, also after a panic while it was held (a `Vec` push or retain leaves it whole).
fn registry() -> MutexGuard<'static, Vec<(u64, PathBuf)>> {
    SCRATCH.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Removes every live scratch path: the handler's last act before the process exits.
fn remove_all_scratch() {
    let paths: Vec<PathBuf> = registry().iter().map(|(_, p)| p.clone()).collect();
    for p in paths {
        remove_path(&p);
    }
}

/// Removes a file or a folder with all it holds, whichever `path` is; a missing one is fine. A
/// folder another thread is still writing into may gain an entry while it is emptied: tried a
/// few times.
pub fn remove_path(path: &Path) {
    for _ in 0..3 {
        let Ok(meta) = std::fs::symlink_metadata(path) else { return };
        let done = if meta.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
        if done.is_ok() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_removed_on_drop_unless_kept_and_leaves_the_registry() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(".tmp-folder");
        let file = dir.path().join(".tmp-file");
        let kept = dir.path().join("kept");
        {
            let a = scratch(&folder);
            std::fs::create_dir_all(a.path().join("inner")).unwrap();
            std::fs::write(a.path().join("inner/x"), b"x").unwrap();
            let b = scratch(&file);
            std::fs::write(b.path(), b"y").unwrap();
            let c = scratch(&kept);
            std::fs::write(c.path(), b"z").unwrap();
            c.keep();
            let live: Vec<PathBuf> = registry().iter().map(|(_, p)| p.clone()).collect();
            assert!(live.contains(&folder) && live.contains(&file) && !live.contains(&kept));
        }
        assert!(!folder.exists() && !file.exists(), "scratch removed when its guard drops");
        assert!(kept.exists(), "a kept path stays");
        let live: Vec<PathBuf> = registry().iter().map(|(_, p)| p.clone()).collect();
        assert!(!live.contains(&folder) && !live.contains(&file));
        // A panic that unwinds drops the guard too.
        let panicked = dir.path().join(".tmp-panicked");
        let p = panicked.clone();
        let r = std::panic::catch_unwind(move || {
            let s = scratch(p);
            std::fs::create_dir_all(s.path()).unwrap();
            panic!("mid-write");
        });
        assert!(r.is_err() && !panicked.exists());
    }
}
