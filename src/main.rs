use std::ffi::{c_int, c_long};
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    keep_freed_memory_a_second();
    bertpipe::app::cli_signals();
    bertpipe::app::run(std::env::args_os())
}

/// `mi_option_purge_delay` in mimalloc v2's `mi_option_e` (the `v2` feature of the `mimalloc`
/// dependency; `libmimalloc-sys` names no constant for it). A test below holds the number to the
/// option's documented default.
const MI_OPTION_PURGE_DELAY: c_int = 15;

/// How long freed memory stays with the process before it goes back to the OS, in ms.
const PURGE_DELAY_MS: c_long = 1000;

extern "C" {
    #[cfg(test)]
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// A training step frees its activations and allocates the same sizes again a few milliseconds
/// later. mimalloc hands freed memory back to the OS after 10 ms, so every step faulted its
/// activations in afresh and the kernel zeroed them (~380,000 page faults in 30 steps of
/// BERT-mini). Kept for a second, it is reused: those 30 steps 29.9 → 27.1 s, MiniLM-L6 at 512
/// tokens 35.7 → 32.6 s (peak RSS +21% and +2%; docs/benchmarks.md#freed-memory-kept-a-second).
/// `contract::keep_freed_memory` does the same for glibc's malloc (C code's, and the wheel's).
/// Pipelines and evaluation do not change. A `MIMALLOC_PURGE_DELAY` in the environment wins.
fn keep_freed_memory_a_second() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() && std::env::var_os("MIMALLOC_RESET_DELAY").is_none() {
        // SAFETY: mimalloc's option setter, called before any other thread of ours exists.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option number is mimalloc's purge delay: its default is 10 ms, or what
    /// `MIMALLOC_PURGE_DELAY` says when the tests run with it (a wrong number would read another
    /// option, e.g. `eager_commit_delay` = 1 or `use_numa_nodes` = 0).
    #[test]
    fn the_option_set_is_the_purge_delay() {
        let expected = std::env::var("MIMALLOC_PURGE_DELAY").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(10);
        // SAFETY: reading an option.
        assert_eq!(unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) }, expected);
    }

    /// After `contract::keep_freed_memory` (which `pipeline run`, `run` and `train` call) glibc
    /// serves a 24 MiB block from its heap, to be reused, not from a fresh `mmap` (`mallinfo2`
    /// counts the mapped blocks). Without it the threshold starts at 128 KiB, and in this binary,
    /// whose Rust allocations are mimalloc's, nothing frees a large glibc block to raise it.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn c_allocations_are_kept_for_reuse() {
        bertpipe::contract::keep_freed_memory();
        // SAFETY: malloc, the allocator's counters, free.
        let mapped = unsafe {
            let before = libc::mallinfo2().hblks;
            let p = std::hint::black_box(libc::malloc(24 << 20));
            assert!(!p.is_null());
            let mapped = libc::mallinfo2().hblks - before;
            libc::free(p);
            mapped
        };
        assert_eq!(mapped, 0, "glibc mapped a 24 MiB block afresh");
    }
}
