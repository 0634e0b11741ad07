//! Task arrays: N copies of one `pipeline run` command, as a Slurm array or a Kubernetes
//! Indexed Job starts them, each taking a contiguous part of the input and writing a complete
//! output of its own under `<out>/tasks/NNNNN/`; `bertpipe shards merge` then writes the one
//! manifest readers use. Contiguous parts, listed in task order, are the input in its order,
//! so the merged rows are those of a single run, in the same order.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clean::dedup::DedupIndex;
use crate::config::Pipeline;
use crate::document::DedupKey;
use crate::pipeline::parallel::{self, Input, Outcome};
use crate::pipeline::progress::Progress;
use crate::pipeline::{prepare_steps, threads_or_default, PipelineStep};
use crate::sink::manifest::{self, Manifest, TasksInfo};
use crate::sink::shard::sha256_file;
use crate::source::Total;

/// Where a task's own output goes, under the pipeline's output folder.
pub const TASKS_DIR: &str = "tasks";

/// This process's place in a task array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub index: u32,
    pub count: u32,
}

impl TaskSpec {
    /// From `--task-index` / `--task-count`, else the scheduler's environment: Slurm's
    /// `SLURM_ARRAY_TASK_ID` (less `SLURM_ARRAY_TASK_MIN`, so `--array=1-8` works) and
    /// `SLURM_ARRAY_TASK_COUNT`, or Kubernetes' `JOB_COMPLETION_INDEX` (the count then comes from
    /// `--task-count`). `None` when there is no array: one process reads everything.
    pub fn resolve(index: Option<u32>, count: Option<u32>) -> Result<Option<TaskSpec>> {
        Self::resolve_with(index, count, |k| std::env::var(k).ok())
    }

    pub fn resolve_with(
        index: Option<u32>,
        count: Option<u32>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TaskSpec>> {
        let parse = |name: &str| -> Result<Option<u32>> {
            env(name)
                .map(|v| v.trim().parse::<u32>().with_context(|| format!("{name}={v:?} is not a task number")))
                .transpose()
        };
        let (index, from) = match index {
            Some(i) => (Some(i), "--task-index"),
            None => match parse("SLURM_ARRAY_TASK_ID")? {
                Some(id) => {
                    let min = parse("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
                    let i = id
                        .checked_sub(min)
                        .with_context(|| format!("SLURM_ARRAY_TASK_ID={id} is below SLURM_ARRAY_TASK_MIN={min}"))?;
                    (Some(i), "SLURM_ARRAY_TASK_ID")
                }
                None => (parse("JOB_COMPLETION_INDEX")?, "JOB_COMPLETION_INDEX"),
            },
        };
        let count = match count {
            Some(c) => Some(c),
            None if from == "SLURM_ARRAY_TASK_ID" => parse("SLURM_ARRAY_TASK_COUNT")?,
            None => None,
        };
        match (index, count) {
            (None, None) => Ok(None),
            (Some(_), None) => bail!(
                "the task index comes from {from} but the task count is unknown: pass --task-count N (on Kubernetes, the Job's `completions`)"
            ),
            (None, Some(_)) => bail!("--task-count needs --task-index (or SLURM_ARRAY_TASK_ID / JOB_COMPLETION_INDEX)"),
            (Some(index), Some(count)) => {
                if count == 0 {
                    bail!("--task-count must be at least 1");
                }
                if index >= count {
                    bail!("task index {index} (from {from}) is not below the task count {count}: indices run from 0 to {}", count - 1);
                }
                Ok(Some(TaskSpec { index, count }))
            }
        }
    }

    /// `<out>/tasks/NNNNN`: the folder this task writes, a complete output of its own.
    pub fn dir(&self, out: &Path) -> PathBuf {
        task_dir(out, self.index)
    }

    pub fn part(&self) -> Partition {
        Partition { index: self.index, count: self.count }
    }
}

/// The seed of task `index`'s pretraining choices: the pipeline's for task 0, a SplitMix64
/// mix of it and the index for the others.
pub fn task_seed(seed: u64, index: u32) -> u64 {
    if index == 0 {
        return seed;
    }
    let mut z = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn task_dir(out: &Path, index: u32) -> PathBuf {
    out.join(TASKS_DIR).join(format!("{index:05}"))
}

/// Where the scan phase leaves each task's fingerprints and scores.
pub const SCAN_DIR: &str = "scan";
const SCAN_FORMAT: &str = "bertpipe-scan/1";

fn scan_file(out: &Path, index: u32) -> PathBuf {
    out.join(TASKS_DIR).join(SCAN_DIR).join(format!("{index:05}.bin"))
}

/// Makes the shared output folder ready for a task: it may already hold other tasks' output,
/// but not a single run's. A merged manifest from an earlier merge is removed, since this task
/// changes what it describes (merge again when every task is done).
pub fn prepare_root(out: &Path) -> Result<()> {
    let path = out.join(manifest::MANIFEST);
    if path.exists() {
        let m = Manifest::read(out)?;
        if m.tasks.is_none() {
            bail!(
                "'{}' holds the output of a single run; a task array writes under {TASKS_DIR}/ of its own output folder (choose another sink.path, or remove it)",
                out.display()
            );
        }
        std::fs::remove_file(&path)
            .with_context(|| format!("could not remove the stale merged '{}'", path.display()))?;
    }
    std::fs::create_dir_all(out.join(TASKS_DIR))
        .with_context(|| format!("could not create '{}'", out.join(TASKS_DIR).display()))
}

/// The steps that need the whole corpus: `(dedup, noise-quantile filter)` positions.
fn global_steps(steps: &[PipelineStep]) -> Result<(Option<usize>, Option<usize>)> {
    let dedup = steps.iter().position(|s| matches!(s, PipelineStep::Dedup(_)));
    let quantiles: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, PipelineStep::Filter(f) if f.max_noise_quantile.is_some()))
        .map(|(i, _)| i)
        .collect();
    if quantiles.len() > 1 {
        bail!("a task array supports one filter with max_noise_quantile; this pipeline has {}", quantiles.len());
    }
    if dedup.is_some() && !quantiles.is_empty() {
        bail!(
            "a task array cannot yet combine `dedup` with a `max_noise_quantile` filter (each needs the other's whole-corpus pass first); use `max_noise` (a fixed score) or run the pipeline as one process"
        );
    }
    Ok((dedup, quantiles.first().copied()))
}

/// Whether a task array of this pipeline needs `pipeline scan` before `pipeline run`.
pub fn needs_scan(steps: &[PipelineStep]) -> Result<bool> {
    let (d, q) = global_steps(steps)?;
    Ok(d.is_some() || q.is_some())
}

/// What one task's scan found: the fingerprints its documents claim for `dedup` (first
/// occurrences within the task, in input order) and the noise scores a quantile filter sees.
#[derive(Debug, Default, PartialEq)]
pub struct Scan {
    pub keys: Vec<(DedupKey, String)>,
    pub scores: Vec<f32>,
}

#[derive(Serialize, Deserialize)]
struct ScanHeader {
    format: String,
    config_sha256: String,
    task: TaskSpec,
    keys: u64,
    scores: u64,
}

/// `pipeline scan`: the first phase of a task array whose pipeline has `dedup` or a
/// `max_noise_quantile` filter. Runs the steps before that step over this task's part and
/// writes `<out>/tasks/scan/NNNNN.bin` (complete or absent: written aside, then renamed).
pub fn scan(pipeline: &Pipeline, task: TaskSpec, threads: usize, quiet: bool) -> Result<Scan> {
    let crate::sink::Sink::Parquet(sink) = &pipeline.sink;
    let config_sha256 = hex::encode(Sha256::digest(pipeline.canonical_json().as_bytes()));
    let mut steps = pipeline.steps.clone();
    prepare_steps(&mut steps)?;
    let (dedup, quantile) = global_steps(&steps)?;
    let threads = threads_or_default(threads);
    let input =
        || Input { source: &pipeline.source, seed: pipeline.seed, part: task.part(), dedup: DedupIndex::default() };
    let mut found = Scan::default();
    let progress = Progress::new(quiet, "scan");
    let set_total = |t: Total| progress.set_total(t);
    match (dedup, quantile) {
        (Some(d), _) => {
            parallel::process(input(), &steps[..=d], threads, &set_total, |outcome| {
                progress.advance(outcome.input_bytes(), 1);
                if let Outcome::Kept(doc) = outcome {
                    found.keys.push((doc.dedup_key.expect("the dedup step sets a key"), doc.id));
                }
                Ok(())
            })?;
        }
        (None, Some(q)) => {
            parallel::process(input(), &steps[..q], threads, &set_total, |outcome| {
                progress.advance(outcome.input_bytes(), 1);
                if let Outcome::Kept(doc) = outcome {
                    found.scores.push(doc.noise.map_or(0.0, |n| n.score));
                }
                Ok(())
            })?;
        }
        (None, None) => bail!(
            "this pipeline has no `dedup` and no `max_noise_quantile` filter: its tasks need no scan, run `pipeline run` directly"
        ),
    }
    progress.finish();
    write_scan(&sink.path, &config_sha256, task, &found)?;
    Ok(found)
}

fn write_scan(out: &Path, config_sha256: &str, task: TaskSpec, scan: &Scan) -> Result<()> {
    let path = scan_file(out, task.index);
    let dir = path.parent().expect("scan files live in a folder");
    std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    let tmp = path.with_extension("bin.tmp");
    let file = std::fs::File::create(&tmp).with_context(|| format!("could not create '{}'", tmp.display()))?;
    let mut w = BufWriter::new(file);
    let header = ScanHeader {
        format: SCAN_FORMAT.into(),
        config_sha256: config_sha256.into(),
        task,
        keys: scan.keys.len() as u64,
        scores: scan.scores.len() as u64,
    };
    serde_json::to_writer(&mut w, &header)?;
    w.write_all(b"\n")?;
    for (key, id) in &scan.keys {
        w.write_all(key)?;
        w.write_all(&(id.len() as u32).to_le_bytes())?;
        w.write_all(id.as_bytes())?;
    }
    for score in &scan.scores {
        w.write_all(&score.to_le_bytes())?;
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, &path).with_context(|| format!("could not write '{}'", path.display()))?;
    Ok(())
}

fn read_scan(out: &Path, config_sha256: &str, task: TaskSpec) -> Result<Scan> {
    let path = scan_file(out, task.index);
    let file = std::fs::File::open(&path).with_context(|| format!("could not open '{}'", path.display()))?;
    let mut r = BufReader::new(file);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let header: ScanHeader =
        serde_json::from_str(&line).with_context(|| format!("'{}' is not a bertpipe scan file", path.display()))?;
    if header.format != SCAN_FORMAT {
        bail!("'{}' has format `{}`; this bertpipe reads `{SCAN_FORMAT}`", path.display(), header.format);
    }
    if header.config_sha256 != config_sha256 {
        bail!(
            "'{}' was scanned with another pipeline configuration; scan again (`pipeline scan` with --task-index {})",
            path.display(),
            task.index
        );
    }
    if header.task != task {
        bail!(
            "'{}' is the scan of task {} of {}, not of task {} of {}",
            path.display(),
            header.task.index,
            header.task.count,
            task.index,
            task.count
        );
    }
    let truncated = || format!("'{}' is truncated", path.display());
    let mut scan = Scan::default();
    for _ in 0..header.keys {
        let mut key = [0u8; 16];
        let mut len = [0u8; 4];
        r.read_exact(&mut key).with_context(truncated)?;
        r.read_exact(&mut len).with_context(truncated)?;
        let mut id = vec![0u8; u32::from_le_bytes(len) as usize];
        r.read_exact(&mut id).with_context(truncated)?;
        scan.keys.push((key, String::from_utf8(id).with_context(|| format!("'{}' is corrupt", path.display()))?));
    }
    for _ in 0..header.scores {
        let mut b = [0u8; 4];
        r.read_exact(&mut b).with_context(truncated)?;
        scan.scores.push(f32::from_le_bytes(b));
    }
    Ok(scan)
}

/// For task `task` of an array: the dedup index holding every fingerprint that earlier tasks
/// claimed (so a document is a duplicate exactly when it would be in a single run), and each
/// `max_noise_quantile` resolved over every task's scores (the single run's threshold).
pub fn resolve_from_scans(
    out: &Path,
    config_sha256: &str,
    task: TaskSpec,
    steps: &mut [PipelineStep],
) -> Result<DedupIndex> {
    let (dedup, quantile) = global_steps(steps)?;
    let mut index = DedupIndex::default();
    let needed: Vec<u32> = match (dedup, quantile) {
        (Some(_), _) => (0..task.index).collect(),
        (None, Some(_)) => (0..task.count).collect(),
        (None, None) => return Ok(index),
    };
    let missing: Vec<String> = needed.iter().filter(|&&i| !scan_file(out, i).exists()).map(|i| i.to_string()).collect();
    if !missing.is_empty() {
        bail!(
            "this pipeline has {}: across {} tasks, `bertpipe pipeline scan` must run first for task{} {} (its files go to '{}'), then `pipeline run` for each task",
            if dedup.is_some() { "`dedup`" } else { "a `max_noise_quantile` filter" },
            task.count,
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            out.join(TASKS_DIR).join(SCAN_DIR).display()
        );
    }
    let mut scores = Vec::new();
    for i in needed {
        let scan = read_scan(out, config_sha256, TaskSpec { index: i, count: task.count })?;
        for (key, id) in &scan.keys {
            index.check(*key, id);
        }
        scores.extend(scan.scores);
    }
    if let Some(q) = quantile {
        if let PipelineStep::Filter(f) = &mut steps[q] {
            scores.sort_by(f32::total_cmp);
            let quantile = f.max_noise_quantile.expect("a quantile filter");
            f.resolved_quantile_threshold = Some(if scores.is_empty() {
                f32::INFINITY
            } else {
                crate::clean::filter::quantile_linear(&scores, quantile)
            });
        }
    }
    Ok(index)
}

/// `bertpipe shards merge OUT`: checks every task's manifest and shards (present, finished,
/// same pipeline, sizes and checksums) and writes `OUT/manifest.json`, listing the tasks'
/// shards in task order — the input's order — with their counts added up.
pub fn merge(out: &Path) -> Result<Manifest> {
    let tasks_dir = out.join(TASKS_DIR);
    let mut found: BTreeMap<u32, PathBuf> = BTreeMap::new();
    let entries = std::fs::read_dir(&tasks_dir).with_context(|| {
        format!("'{}' holds no task outputs (expected {TASKS_DIR}/00000, {TASKS_DIR}/00001, …)", out.display())
    })?;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Ok(i) = name.parse::<u32>() {
            if entry.path().is_dir() {
                found.insert(i, entry.path());
            }
        }
    }
    if found.is_empty() {
        bail!("'{}' holds no task outputs", tasks_dir.display());
    }
    let mut manifests: Vec<Manifest> = Vec::new();
    let mut count = None;
    let mut problems = Vec::new();
    for (&i, dir) in &found {
        if !dir.join(manifest::MANIFEST).exists() {
            problems.push(if dir.join(manifest::JOURNAL).exists() {
                format!(
                    "task {i} is unfinished ('{}' has a journal but no manifest): run it again with --resume",
                    dir.display()
                )
            } else {
                format!("task {i} has not finished ('{}' has no manifest.json)", dir.display())
            });
            continue;
        }
        let m = Manifest::read(dir)?;
        match m.tasks {
            Some(TasksInfo { index: Some(index), count: c }) if index == i => {
                if *count.get_or_insert(c) != c {
                    bail!(
                        "task {i} ran as one of {c} tasks, task {} as one of {}: merge outputs of one task array",
                        found.keys().next().unwrap_or(&0),
                        count.unwrap_or(0)
                    );
                }
            }
            _ => bail!("'{}' is not the output of task {i} of a task array", dir.display()),
        }
        manifests.push(m);
    }
    let count = count.unwrap_or(found.len() as u32);
    let missing: Vec<String> = (0..count).filter(|i| !found.contains_key(i)).map(|i| i.to_string()).collect();
    if !missing.is_empty() {
        problems.push(format!(
            "task{} {} of {count} ha{} no output under '{}'",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            if missing.len() == 1 { "s" } else { "ve" },
            tasks_dir.display()
        ));
    }
    if let Some(extra) = found.keys().find(|&&i| i >= count) {
        problems.push(format!("'{}' is task {extra}, but the array has {count} tasks", found[extra].display()));
    }
    if !problems.is_empty() {
        bail!("cannot merge '{}' yet:\n  {}", out.display(), problems.join("\n  "));
    }
    let first = &manifests[0];
    for (i, m) in manifests.iter().enumerate() {
        if m.config_sha256 != first.config_sha256 {
            bail!(
                "task {i} ran another pipeline configuration than task 0 (config_sha256 {} vs {})",
                m.config_sha256,
                first.config_sha256
            );
        }
    }
    // Every shard, checked in parallel: present, the recorded size, the recorded checksum.
    let mut shards = Vec::new();
    for (i, m) in manifests.iter().enumerate() {
        let dir = task_dir(out, i as u32);
        for s in m.splits.values().flat_map(|s| &s.shards).chain(&m.rejects.shards) {
            shards.push((dir.join(&s.file), s.bytes, s.sha256.clone()));
        }
    }
    shards.par_iter().try_for_each(|(path, bytes, sha)| -> Result<()> {
        let meta = std::fs::metadata(path)
            .with_context(|| format!("shard '{}', listed in its task's manifest, is missing", path.display()))?;
        if meta.len() != *bytes {
            bail!("shard '{}' has {} bytes, its task's manifest says {bytes}", path.display(), meta.len());
        }
        let got = sha256_file(path)?;
        if &got != sha {
            bail!(
                "checksum mismatch for '{}': its task's manifest says {sha}, the file hashes to {got}",
                path.display()
            );
        }
        Ok(())
    })?;

    let mut merged = first.clone();
    merged.splits.clear();
    merged.rejects = Default::default();
    merged.tasks = Some(TasksInfo { index: None, count });
    for (i, m) in manifests.into_iter().enumerate() {
        let prefix = format!("{TASKS_DIR}/{i:05}/");
        for (name, s) in m.splits {
            let into = merged.splits.entry(name).or_default();
            add_split(into, s, &prefix);
        }
        merged.rejects.rows += m.rejects.rows;
        merged.rejects.shards.extend(m.rejects.shards.into_iter().map(|mut s| {
            s.file = format!("{prefix}{}", s.file);
            s
        }));
    }
    for s in merged.splits.values_mut() {
        if let Some(t) = s.tokenization.as_mut() {
            t.unk_rate = t.unk_tokens as f64 / t.document_tokens.max(1) as f64;
            t.rows_per_doc_mean = s.rows as f64 / s.docs_out.max(1) as f64;
        }
        if let Some(p) = s.pretraining.as_mut() {
            p.finish();
        }
    }
    merged.write(out)?;
    Ok(merged)
}

/// Adds one task's split figures to the merged ones (rates are recomputed after).
fn add_split(into: &mut manifest::SplitStats, s: manifest::SplitStats, prefix: &str) {
    into.docs_in += s.docs_in;
    into.docs_out += s.docs_out;
    for (reason, n) in s.rejected {
        *into.rejected.entry(reason).or_default() += n;
    }
    into.rows += s.rows;
    into.tokens = match (into.tokens, s.tokens) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    into.utf8_replaced += s.utf8_replaced;
    if let Some(t) = s.tokenization {
        let m = into.tokenization.get_or_insert_with(Default::default);
        m.document_tokens += t.document_tokens;
        m.unk_tokens += t.unk_tokens;
        m.docs_over_max_len += t.docs_over_max_len;
        m.tokens_dropped += t.tokens_dropped;
        m.rows_per_doc_max = m.rows_per_doc_max.max(t.rows_per_doc_max);
    }
    if let Some(p) = s.pretraining {
        let m = into.pretraining.get_or_insert_with(Default::default);
        m.rows += p.rows;
        m.tokens += p.tokens;
        m.positions += p.positions;
        m.nsp_random += p.nsp_random;
        m.nsp_follows += p.nsp_follows;
        m.tokens_unused += p.tokens_unused;
        m.maskable_tokens += p.maskable_tokens;
        m.masked_tokens += p.masked_tokens;
        m.replaced_mask += p.replaced_mask;
        m.replaced_random += p.replaced_random;
        m.kept += p.kept;
    }
    into.shards.extend(s.shards.into_iter().map(|mut sh| {
        sh.file = format!("{prefix}{}", sh.file);
        sh
    }));
}

/// Which part of the input a reader takes: task `index` of `count` gets the `index`-th of
/// `count` contiguous, near-equal ranges of the source's units (files of a folder, entries of
/// a tarball, row groups of Parquet files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub index: u32,
    pub count: u32,
}

impl Partition {
    /// Everything: what a single process reads.
    pub const WHOLE: Partition = Partition { index: 0, count: 1 };

    pub fn is_whole(&self) -> bool {
        self.count <= 1
    }

    /// This part's units out of `n`: `[⌊i·n/N⌋, ⌊(i+1)·n/N⌋)`.
    pub fn range(&self, n: usize) -> Range<usize> {
        let (i, c, n) = (self.index as u128, self.count.max(1) as u128, n as u128);
        ((i * n / c) as usize)..(((i + 1) * n / c) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_tile_the_input_in_order() {
        for n in [0usize, 1, 2, 5, 7, 100, 1001] {
            for count in 1..=9u32 {
                let mut next = 0;
                for index in 0..count {
                    let r = Partition { index, count }.range(n);
                    assert_eq!(r.start, next, "n {n} count {count} index {index}");
                    assert!(r.len() <= n / count as usize + 1);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
        assert_eq!(Partition::WHOLE.range(17), 0..17);
    }

    #[test]
    fn task_from_flags_and_schedulers() {
        let none = |_: &str| None;
        assert_eq!(TaskSpec::resolve_with(None, None, none).unwrap(), None);
        assert_eq!(TaskSpec::resolve_with(Some(2), Some(3), none).unwrap(), Some(TaskSpec { index: 2, count: 3 }));
        let slurm = |k: &str| match k {
            "SLURM_ARRAY_TASK_ID" => Some("4".to_string()),
            "SLURM_ARRAY_TASK_MIN" => Some("1".to_string()),
            "SLURM_ARRAY_TASK_COUNT" => Some("4".to_string()),
            _ => None,
        };
        assert_eq!(TaskSpec::resolve_with(None, None, slurm).unwrap(), Some(TaskSpec { index: 3, count: 4 }));
        let k8s = |k: &str| (k == "JOB_COMPLETION_INDEX").then(|| "1".to_string());
        assert_eq!(TaskSpec::resolve_with(None, Some(2), k8s).unwrap(), Some(TaskSpec { index: 1, count: 2 }));
        let e = TaskSpec::resolve_with(None, None, k8s).unwrap_err().to_string();
        assert!(e.contains("--task-count"), "{e}");
        let e = TaskSpec::resolve_with(Some(3), Some(3), none).unwrap_err().to_string();
        assert!(e.contains("not below the task count 3"), "{e}");
        let bad = |k: &str| (k == "SLURM_ARRAY_TASK_ID").then(|| "x".to_string());
        assert!(TaskSpec::resolve_with(None, None, bad).unwrap_err().to_string().contains("SLURM_ARRAY_TASK_ID"));
    }
}
