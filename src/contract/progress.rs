//! Progress on stderr: bytes of input done (MB/s, ETA when the size is known) and documents;
//! for a folder of one file per document, files done out of the files listed. On a terminal, a
//! bar; when stderr is not one (a log file under a scheduler or `nohup`, where indicatif draws
//! nothing), the same figures as plain lines, one every [`line_interval`] (30 s, or
//! `BERTPIPE_PROGRESS_SECS`). Silent with `--quiet`.
//!
//! Every plain line has one shape, fields two spaces apart, so a log can be grepped by its tag:
//!
//! ```text
//! [TAG] DONE/TOTAL UNIT (P%)  FIGURES…  RATE UNIT/s  elapsed M:SS  eta M:SS
//! [pipeline] 212/600 files (35%)  1,410 files/s  2.10 MiB/s  elapsed 0:00  eta 0:00
//! [stats] 12.00 MiB/48.00 MiB (25%)  12,000 docs  2,310 docs/s  2.40 MiB/s  elapsed 0:05  eta 0:16
//! [eval] 1,200/25,000 rows (4%)  310 rows/s  elapsed 0:04  eta 1:17
//! [fetch] 3.00 MiB/6.00 MiB (50%)  3 shards  1.5 shards/s  1.50 MiB/s  elapsed 0:02  eta 0:02
//! [train] step 120/500 (24%)  loss 0.4312  lr 2.00e-3  3.1 steps/s  24.8 samples/s  3,174 tokens/s  elapsed 0:40  eta 2:02
//! ```
//!
//! Counts have thousands separators, durations are `M:SS` (`H:MM:SS` from an hour), the
//! percentage is rounded down; without a known total the `/TOTAL (P%)` and `eta` fields are left
//! out. Training prints its line every `logging_steps` (`bertpipe train`); the others on time.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
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

/// Whether progress goes to stderr as plain lines: not `quiet`, and stderr is somewhere
/// indicatif draws no bar (not a terminal, or `TERM=dumb`).
pub fn plain_lines(quiet: bool) -> bool {
    static HIDDEN: OnceLock<bool> = OnceLock::new();
    !quiet && *HIDDEN.get_or_init(|| ProgressDrawTarget::stderr().is_hidden())
}

/// The time between two plain progress lines (all but training's, which follow
/// `logging_steps`): `BERTPIPE_PROGRESS_SECS` seconds (fractions allowed; 0: at every update),
/// default 30.
pub fn line_interval() -> Duration {
    static EVERY: OnceLock<Duration> = OnceLock::new();
    *EVERY.get_or_init(|| {
        let default = Duration::from_secs(30);
        let Ok(v) = std::env::var("BERTPIPE_PROGRESS_SECS") else { return default };
        match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Duration::from_secs_f64(s.min(1e9)),
            // Said once, not ignored: a log without the lines its owner asked for misleads.
            _ => {
                emit(&format!(
                    "warning: BERTPIPE_PROGRESS_SECS={v:?} is not a number of seconds ≥ 0; progress lines every 30 s"
                ));
                default
            }
        }
    })
}

/// Writes one plain progress line to stderr (a failed write is not an error of the run).
pub fn emit(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// `M:SS` under an hour, `H:MM:SS` from one.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// `12,345,678`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate per second: `2,310` from 100, `31.4` from 1, `0.25` below.
pub fn rate(per_sec: f64) -> String {
    if !per_sec.is_finite() || per_sec < 0.0 {
        "0".to_string()
    } else if per_sec >= 100.0 {
        thousands(per_sec.round() as u64)
    } else if per_sec >= 1.0 {
        format!("{per_sec:.1}")
    } else {
        format!("{per_sec:.2}")
    }
}

/// `done` of `total` in whole percent, rounded down (100 for an empty total).
pub fn percent(done: u64, total: u64) -> u64 {
    if total == 0 {
        100
    } else {
        (done.min(total) as u128 * 100 / total as u128) as u64
    }
}

/// The time left at the rate so far (`done` units in `elapsed`), as [`clock`]; `?` before the
/// first unit.
pub fn eta(done: u64, total: u64, elapsed: Duration) -> String {
    if done == 0 {
        return "?".to_string();
    }
    let left = elapsed.as_secs_f64() * total.saturating_sub(done) as f64 / done as f64;
    clock(Duration::from_secs_f64(if left.is_finite() { left.clamp(0.0, 1e9) } else { 0.0 }))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Plain lines in a log: their tag, how often, and when the next one is due.
struct Lines {
    tag: String,
    every_ms: u64,
    /// Milliseconds after the start at which the next line is due.
    next_ms: AtomicU64,
}

impl Lines {
    fn new(tag: &str) -> Lines {
        let every_ms = millis(line_interval());
        Lines { tag: tag.to_string(), every_ms, next_ms: AtomicU64::new(every_ms) }
    }

    /// Whether a line is due `now_ms` after the start; true for one caller of several threads.
    fn due(&self, now_ms: u64) -> bool {
        let next = self.next_ms.load(Ordering::Relaxed);
        now_ms >= next
            && self
                .next_ms
                .compare_exchange(next, now_ms.saturating_add(self.every_ms), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// `DONE/TOTAL UNIT (P%)`, or `DONE UNIT` without a total.
fn amount(done: u64, total: Option<u64>, unit: &str) -> String {
    match total {
        Some(t) => format!("{}/{} {unit} ({}%)", thousands(done), thousands(t), percent(done, t)),
        None => format!("{} {unit}", thousands(done)),
    }
}

/// A count of `len` units (`eval`'s rows, the row store's): a [`bar`] on a terminal; in a log,
/// a plain line `[TAG] POS/LEN UNIT (P%)  RATE UNIT/s  elapsed M:SS  eta M:SS` every
/// [`line_interval`].
pub struct Counter {
    bar: ProgressBar,
    lines: Option<Lines>,
    unit: String,
    len: u64,
    pos: AtomicU64,
    started: Instant,
}

impl Counter {
    /// `bar(quiet, Some(len), hz, template)` on a terminal; `tag` and `unit` name the plain lines.
    pub fn new(quiet: bool, len: u64, hz: u8, template: &str, tag: &str, unit: &str) -> Counter {
        let lines = if plain_lines(quiet) { Some(Lines::new(tag)) } else { None };
        Counter {
            bar: bar(quiet || lines.is_some(), Some(len), hz, template),
            lines,
            unit: unit.to_string(),
            len,
            pos: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        let pos = self.pos.fetch_add(n, Ordering::Relaxed) + n;
        let Some(lines) = &self.lines else { return };
        let elapsed = self.started.elapsed();
        if lines.due(millis(elapsed)) {
            let secs = elapsed.as_secs_f64().max(1e-3);
            emit(&format!(
                "[{}] {}  {} {}/s  elapsed {}  eta {}",
                lines.tag,
                amount(pos, Some(self.len), &self.unit),
                rate(pos as f64 / secs),
                self.unit,
                clock(elapsed),
                eta(pos, self.len, elapsed)
            ));
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    docs: AtomicU64,
    bytes: AtomicU64,
    /// The bar counts files (documents), not bytes.
    by_files: AtomicBool,
    /// What [`Progress::advance`]'s count is of, by bytes: `docs`, or another unit
    /// ([`Progress::counting`]).
    unit: String,
    /// In a log: plain lines instead of the (hidden) bar.
    lines: Option<Lines>,
}

impl Progress {
    /// A bar prefixed `what`; in a log, plain lines tagged `[what]` (see [`Progress::log_as`]).
    pub fn new(quiet: bool, what: &str) -> Progress {
        let lines = if plain_lines(quiet) { Some(Lines::new(what)) } else { None };
        let bar = bar(
            quiet || lines.is_some(),
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
            unit: "docs".to_string(),
            lines,
        }
    }

    /// Names what is counted beside the bytes (`docs` unless told): a download counts `shards`.
    pub fn counting(mut self, unit: &str) -> Progress {
        self.unit = unit.to_string();
        self
    }

    /// Tags the plain lines `[tag]` instead of the bar's prefix (`pipeline run`'s bar says
    /// `run`, its lines `[pipeline]`).
    pub fn log_as(mut self, tag: &str) -> Progress {
        if let Some(lines) = &mut self.lines {
            lines.tag = tag.to_string();
        }
        self
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
        if let Some(lines) = &self.lines {
            let elapsed = self.started.elapsed();
            if lines.due(millis(elapsed)) {
                emit(&self.line(&lines.tag, n, read, by_files, elapsed));
            }
            return;
        }
        if n % 256 == 0 {
            let secs = self.started.elapsed().as_secs_f64().max(1e-3);
            let rate = n as f64 / secs;
            self.bar.set_message(if by_files {
                format!("{n} docs ({rate:.0}/s, {}/s)", HumanBytes((read as f64 / secs) as u64))
            } else {
                format!("{n} {} ({rate:.0}/s)", self.unit)
            });
        }
    }

    /// The plain line for `docs` documents and `read` bytes done: by files
    /// `[TAG] 212/600 files (35%)  1,410 files/s  2.10 MiB/s  elapsed 0:00  eta 0:00`, by bytes
    /// `[TAG] 12.00 MiB/48.00 MiB (25%)  12,000 docs  2,310 docs/s  2.40 MiB/s  elapsed 0:05  eta 0:16`
    /// (the MiB/s field only when bytes are counted).
    fn line(&self, tag: &str, docs: u64, read: u64, by_files: bool, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64().max(1e-3);
        let total = self.bar.length().filter(|&t| t > 0);
        let mut fields = Vec::new();
        if by_files {
            fields.push(amount(docs, total, "files"));
            fields.push(format!("{} files/s", rate(docs as f64 / secs)));
        } else {
            fields.push(match total {
                Some(t) => format!("{}/{} ({}%)", HumanBytes(read), HumanBytes(t), percent(read, t)),
                None => HumanBytes(read).to_string(),
            });
            fields.push(format!("{} {}", thousands(docs), self.unit));
            fields.push(format!("{} {}/s", rate(docs as f64 / secs), self.unit));
        }
        if read > 0 {
            fields.push(format!("{}/s", HumanBytes((read as f64 / secs) as u64)));
        }
        fields.push(format!("elapsed {}", clock(elapsed)));
        if let Some(t) = total {
            fields.push(format!("eta {}", eta(if by_files { docs } else { read }, t, elapsed)));
        }
        format!("[{tag}] {}", fields.join("  "))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_line_figures_have_one_stable_shape() {
        assert_eq!(clock(Duration::from_secs(0)), "0:00");
        assert_eq!(clock(Duration::from_secs(122)), "2:02");
        assert_eq!(clock(Duration::from_secs(3 * 3600 + 5 * 60 + 7)), "3:05:07");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12_000), "12,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(rate(2310.4), "2,310");
        assert_eq!(rate(31.44), "31.4");
        assert_eq!(rate(0.254), "0.25");
        assert_eq!(rate(f64::NAN), "0");
        assert_eq!(percent(120, 500), 24);
        assert_eq!(percent(7, 0), 100);
        assert_eq!(percent(u64::MAX, u64::MAX), 100);
        assert_eq!(eta(0, 10, Duration::from_secs(5)), "?");
        assert_eq!(eta(120, 500, Duration::from_secs(40)), "2:06");
        assert_eq!(eta(500, 500, Duration::from_secs(40)), "0:00");
        assert_eq!(amount(12_000, Some(50_000), "docs"), "12,000/50,000 docs (24%)");
        assert_eq!(amount(12_000, None, "docs"), "12,000 docs");
    }

    #[test]
    fn a_download_s_line_counts_what_it_fetches() {
        let p = Progress::new(true, "fetch").counting("shards");
        p.set_total(Total::Bytes(6 << 20));
        assert_eq!(
            p.line("fetch", 3, 3 << 20, false, Duration::from_secs(2)),
            "[fetch] 3.00 MiB/6.00 MiB (50%)  3 shards  1.5 shards/s  1.50 MiB/s  elapsed 0:02  eta 0:02"
        );
        let docs = Progress::new(true, "stats");
        assert!(docs.line("stats", 12, 1 << 20, false, Duration::from_secs(1)).contains("  12 docs  12.0 docs/s  "));
    }

    #[test]
    fn a_line_is_due_once_per_interval() {
        let lines = Lines { tag: "t".into(), every_ms: 1000, next_ms: AtomicU64::new(1000) };
        assert!(!lines.due(999));
        assert!(lines.due(1000));
        assert!(!lines.due(1500));
        assert!(lines.due(2000));
        let every = Lines { tag: "t".into(), every_ms: 0, next_ms: AtomicU64::new(0) };
        assert!(every.due(0) && every.due(0) && every.due(3));
    }
}
