//! One run per output folder: `OUT/.lock`, held with an OS file lock (`flock`) for as long as
//! the run lives — released by the kernel however the process ends, so a crash or `kill -9`
//! never leaves a stale lock behind. A whole-chain run holds it exclusively; tasks of an array
//! (`--stage NAME --task-index I`) share it with one another, so they run side by side but never
//! beside a chain run on the same folder. The file holds the pid of the last holder, named when
//! a second run is refused.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::{bail, Context, Result};

pub const LOCK_FILE: &str = ".lock";

/// A held lock; dropping it releases it.
#[derive(Debug)]
pub struct OutLock {
    _file: File,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A whole run: no other run of any kind on the folder.
    Exclusive,
    /// A task of an array: other tasks may run beside it, a whole run may not.
    Shared,
}

/// Takes `OUT/.lock`. Without `wait`, a lock another process holds is an error at once, naming
/// that process; with it, the call blocks until the lock is free.
pub fn acquire(out: &Path, mode: Mode, wait: bool) -> Result<OutLock> {
    std::fs::create_dir_all(out).with_context(|| format!("could not create '{}'", out.display()))?;
    let path = out.join(LOCK_FILE);
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("could not open '{}'", path.display()))?;
    let op = match mode {
        Mode::Exclusive => libc::LOCK_EX,
        Mode::Shared => libc::LOCK_SH,
    } | if wait { 0 } else { libc::LOCK_NB };
    loop {
        // SAFETY: flock on a file descriptor we own; no memory is shared with the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => bail!(
                "another bertpipe run ({}) is using '{}' (it holds '{}'); wait for it to finish, or pass --wait to queue behind it",
                holder(&path),
                out.display(),
                path.display()
            ),
            _ => return Err(err).with_context(|| format!("could not lock '{}'", path.display())),
        }
    }
    if mode == Mode::Exclusive {
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
    }
    Ok(OutLock { _file: file })
}

/// Who holds the lock, in words: the pid a whole run wrote, while that process lives; else
/// tasks of an array (which share the lock and write no pid).
fn holder(path: &Path) -> String {
    let pid: Option<i32> = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok());
    // SAFETY: kill with signal 0 only checks that the process exists.
    match pid.filter(|&p| p > 0 && unsafe { libc::kill(p, 0) } == 0) {
        Some(p) => format!("pid {p}"),
        None => "tasks of an array, `bertpipe run … --stage`".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_whole_run_is_refused_naming_the_holder_and_tasks_share() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path(), Mode::Exclusive, false).unwrap();
        let e = acquire(dir.path(), Mode::Exclusive, false).unwrap_err().to_string();
        assert!(e.contains(&format!("pid {}", std::process::id())) && e.contains("--wait"), "{e}");
        assert!(acquire(dir.path(), Mode::Shared, false).is_err(), "a task beside a whole run");
        drop(first);
        // The whole run has ended (its pid is gone); tasks hold the lock now, and are named.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), format!("{}\n", gone.id())).unwrap();
        let a = acquire(dir.path(), Mode::Shared, false).unwrap();
        let _b = acquire(dir.path(), Mode::Shared, false).unwrap();
        let e = acquire(dir.path(), Mode::Exclusive, false).unwrap_err().to_string();
        assert!(e.contains("tasks of an array") && !e.contains(&format!("pid {}", gone.id())), "{e}");
        drop(a);
    }
}
