//! Progress on stderr: bytes of input done (MB/s, ETA when the size is known) and documents;
//! for a folder of one file per document, files done out of the files listed. Silent with
//! `--quiet` or when stderr is not a terminal.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How much input there is, when a source knows it up front (drives progress and ETA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Total {
    /// Bytes of input files (compressed, for a tarball).
    Bytes(u64),
    /// Files of a folder, one document each: counted from the listing, which needs no
    /// `stat` per file (that pass cost 5% of a whole IMDb run, on the reader thread).
    Files(u64),
}

/// A bar of `len` units drawn on stderr `hz` times a second (hidden with `quiet`), in the one
/// style every command uses; `template` is indicatif's, `{wide_bar}` and all.
pub fn bar(quiet: bool, len: Option<u64>, hz: u8, template: &str) -> ProgressBar {
    let target = if quiet { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr_with_hz(hz) };
    let bar = ProgressBar::with_draw_target(len, target);
    bar.set_style(style(template));
    bar
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).expect("valid template").progress_chars("=> ")
}

pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    docs: AtomicU64,
    bytes: AtomicU64,
    /// The bar counts files (documents), not bytes.
    by_files: AtomicBool,
}

impl Progress {
    pub fn new(quiet: bool, what: &str) -> Progress {
        let bar = bar(
            quiet,
            None,
            5,
            "{prefix:.bold} [{elapsed_precise}] {wide_bar:.cyan/blue} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        );
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress {
            bar,
            started: Instant::now(),
            docs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            by_files: AtomicBool::new(false),
        }
    }

    /// Sets the size of the input; call before the first [`Progress::advance`].
    pub fn set_total(&self, total: Total) {
        match total {
            Total::Bytes(bytes) => self.bar.set_length(bytes),
            Total::Files(files) => {
                self.by_files.store(true, Ordering::Relaxed);
                self.bar.set_style(style(
                    "{prefix:.bold} [{elapsed_precise}] {wide_bar:.cyan/blue} {human_pos}/{human_len} files ETA {eta} {msg}",
                ));
                self.bar.set_length(files);
            }
        }
    }

    pub fn advance(&self, bytes: u64, docs: u64) {
        let by_files = self.by_files.load(Ordering::Relaxed);
        self.bar.inc(if by_files { docs } else { bytes });
        let n = self.docs.fetch_add(docs, Ordering::Relaxed) + docs;
        let read = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if n % 256 == 0 {
            let secs = self.started.elapsed().as_secs_f64().max(1e-3);
            let rate = n as f64 / secs;
            self.bar.set_message(if by_files {
                format!("{n} docs ({rate:.0}/s, {}/s)", HumanBytes((read as f64 / secs) as u64))
            } else {
                format!("{n} docs ({rate:.0}/s)")
            });
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Peak resident memory of this process, from `/proc/self/status` (Linux), if available.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub fn human_bytes(b: u64) -> String {
    HumanBytes(b).to_string()
}
