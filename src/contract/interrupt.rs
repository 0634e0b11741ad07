//! Ctrl-C and SIGTERM, handled once for the whole process.
//!
//! Whatever runs (one command, or a chain of stages one after another) shares one handler,
//! installed on first use. Work that can stop cleanly — a training loop, which checkpoints
//! first — registers itself with [`graceful`] while it runs, and polls [`requested`]; a signal
//! then only raises the flag. A signal with no graceful work running (a pipeline, an export, an
//! evaluation, or the chain between stages) ends the process at once with exit code 130: those
//! stages write whole files or journals, so what they leave is resumed or redone by the next
//! run, never taken for finished. A second signal always ends the process.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static GRACEFUL: AtomicUsize = AtomicUsize::new(0);
static INSTALL: std::sync::Once = std::sync::Once::new();

/// Exit code of a process stopped by Ctrl-C (128 + SIGINT), as shells report it.
pub const EXIT_CODE: i32 = 130;

/// Installs the process's handler (once; later calls do nothing).
pub fn install() {
    INSTALL.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            let again = REQUESTED.swap(true, Ordering::SeqCst);
            if again || GRACEFUL.load(Ordering::SeqCst) == 0 {
                eprintln!("\ninterrupted");
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
