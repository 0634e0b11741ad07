//! Task arrays: N copies of one `pipeline run` command, as a Slurm array or a Kubernetes
//! Indexed Job starts them, each taking a contiguous part of the input and writing a complete
//! output of its own under `<out>/tasks/NNNNN/`; `bertpipe shards merge` then writes the one
//! manifest readers use. Contiguous parts, listed in task order, are the input in its order,
//! so the merged rows are those of a single run, in the same order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::{Pipeline, PipelineStep};
use crate::contract::document::{NearKey, OrderKey, Sketch};
use crate::contract::manifest::{self, is_task_name, Manifest, ShardInfo, TasksInfo, TASKS_DIR};
use crate::contract::partition::Partition;
use crate::contract::progress::{Progress, Total};
use crate::pipeline::corpus::{noise_scores, quantile_threshold};
use crate::pipeline::leakage;
use crate::pipeline::parallel::{self, CorpusPart};
use crate::pipeline::seen::Seen;
use crate::pipeline::{prepare_steps, threads_or_default};
use crate::storage::Remote;

/// This process's place in a task array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub index: u32,
    pub count: u32,
}

impl TaskSpec {
    /// From `--task-index` / `--task-count`, else the scheduler's environment: Slurm's
    /// `SLURM_ARRAY_TASK_ID` (less `SLURM_ARRAY_TASK_MIN`, over `SLURM_ARRAY_TASK_STEP`, so
    /// `--array=1-8` and `--array=0-14:2` work) and `SLURM_ARRAY_TASK_COUNT`, or Kubernetes' `JOB_COMPLETION_INDEX` (the count then comes from
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
                    let step = parse("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
                    let i = id
                        .checked_sub(min)
                        .with_context(|| format!("SLURM_ARRAY_TASK_ID={id} is below SLURM_ARRAY_TASK_MIN={min}"))?;
                    if i % step != 0 {
                        bail!(
                            "SLURM_ARRAY_TASK_ID={id} is not MIN={min} plus a multiple of STEP={step}: submit the array as a range (`--array=0-7`, `1-8`, `0-14:2`), or pass --task-index and --task-count"
                        );
                    }
                    (Some(i / step), "SLURM_ARRAY_TASK_ID")
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

/// The seed of task `index`'s pretraining choices: the pipeline's for task 0, a stream of
/// the project's generator keyed by it and the index for the others.
pub fn task_seed(seed: u64, index: u32) -> u64 {
    if index == 0 {
        return seed;
    }
    crate::rng::Rng::for_key(seed, &[0x5441_534b, index as u64]).next_u64()
}

pub fn task_dir(out: &Path, index: u32) -> PathBuf {
    out.join(task_rel(index))
}

/// `tasks/NNNNN`: task `index`'s folder, relative to the output.
fn task_rel(index: u32) -> String {
    format!("{TASKS_DIR}/{index:05}")
}

/// Where the scan phase leaves each task's fingerprints and scores.
pub const SCAN_DIR: &str = "scan";
const SCAN_FORMAT: &str = "bertpipe-scan/3";

fn scan_file(index: u32) -> String {
    format!("{TASKS_DIR}/{SCAN_DIR}/{index:05}.bin")
}

/// A task array's output folder: on a shared file system, or a bucket prefix.
enum Root {
    Local(PathBuf),
    Remote(Remote),
}

impl Root {
    fn open(out: &Path) -> Result<Root> {
        Ok(if crate::storage::is_remote(out) {
            Root::Remote(Remote::open(out)?)
        } else {
            Root::Local(out.to_path_buf())
        })
    }

    fn display(&self, rel: &str) -> String {
        match self {
            Root::Local(p) => p.join(rel).display().to_string(),
            Root::Remote(r) => r.url_of(rel),
        }
    }

    fn size(&self, rel: &str) -> Result<Option<u64>> {
        match self {
            Root::Local(p) => Ok(std::fs::metadata(p.join(rel)).ok().filter(|m| m.is_file()).map(|m| m.len())),
            Root::Remote(r) => r.size(rel),
        }
    }

    fn read(&self, rel: &str) -> Result<Vec<u8>> {
        match self {
            Root::Local(p) => {
                std::fs::read(p.join(rel)).with_context(|| format!("could not read '{}'", self.display(rel)))
            }
            Root::Remote(r) => Ok(r.get(rel)?.to_vec()),
        }
    }

    /// Writes `rel` whole or not at all (aside and renamed on disk; one PUT in a bucket).
    fn write(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        match self {
            Root::Local(p) => crate::contract::write_file_atomic(&p.join(rel), &bytes),
            Root::Remote(r) => r.put(rel, bytes),
        }
    }

    fn sha256(&self, rel: &str) -> Result<String> {
        match self {
            Root::Local(p) => crate::contract::checksum::sha256_file(&p.join(rel)),
            Root::Remote(r) => r.sha256(rel),
        }
    }

    /// The task folders present (`tasks/NNNNN`), by index.
    fn task_indices(&self) -> Result<Vec<u32>> {
        let mut found = std::collections::BTreeSet::new();
        match self {
            Root::Local(p) => {
                let dir = p.join(TASKS_DIR);
                let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(Vec::new()) };
                for entry in entries {
                    let entry = entry?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if is_task_name(&name) && entry.file_type()?.is_dir() {
                        found.insert(name.parse::<u32>().expect("five digits"));
                    } else if name != SCAN_DIR {
                        bail!(
                            "'{}' is not a task folder of the layout ({TASKS_DIR}/NNNNN, five digits, or {TASKS_DIR}/{SCAN_DIR}); move it away",
                            entry.path().display()
                        );
                    }
                }
            }
            Root::Remote(r) => {
                for (rel, _) in r.child(TASKS_DIR).list()? {
                    let d = rel.split('/').next().unwrap_or_default();
                    if is_task_name(d) && rel.len() > d.len() {
                        found.insert(d.parse::<u32>().expect("five digits"));
                    } else if d != SCAN_DIR {
                        bail!(
                            "'{}' is not in a task folder of the layout ({TASKS_DIR}/NNNNN/…, five digits, or {TASKS_DIR}/{SCAN_DIR}/…); move it away",
                            r.child(TASKS_DIR).url_of(&rel)
                        );
                    }
                }
            }
        }
        Ok(found.into_iter().collect())
    }
}

/// Makes the shared output folder ready for a task: it may already hold other tasks' output,
/// but not a single run's. A merged manifest from an earlier merge is removed, since this task
/// changes what it describes (merge again when every task is done).
pub fn prepare_root(out: &Path) -> Result<()> {
    let root = Root::open(out)?;
    if root.size(manifest::MANIFEST)?.is_some() {
        let m = Manifest::from_json(&root.read(manifest::MANIFEST)?, &root.display(manifest::MANIFEST))?;
        if m.tasks.is_none() {
            bail!(
                "'{}' holds the output of a single run; a task array writes under {TASKS_DIR}/ of its own output folder (choose another sink.path, or remove it)",
                out.display()
            );
        }
        match &root {
            Root::Local(p) => std::fs::remove_file(p.join(manifest::MANIFEST))
                .with_context(|| format!("could not remove the stale merged '{}'", root.display(manifest::MANIFEST)))?,
            Root::Remote(r) => r.delete(manifest::MANIFEST)?,
        }
    }
    if let Root::Local(p) = &root {
        std::fs::create_dir_all(p.join(TASKS_DIR))
            .with_context(|| format!("could not create '{}'", p.join(TASKS_DIR).display()))?;
    }
    Ok(())
}

/// `dedup` and `near_dedup`: steps whose verdicts depend on every document before, in order.
fn is_ordered(s: &PipelineStep) -> bool {
    matches!(s, PipelineStep::Dedup(_) | PipelineStep::NearDedup(_))
}

/// A filter with `max_noise_quantile`: its threshold is a quantile of every document's score.
fn is_quantile(s: &PipelineStep) -> bool {
    matches!(s, PipelineStep::Filter(f) if f.max_noise_quantile.is_some())
}

/// The steps that make a task array of this pipeline run `pipeline scan` first (`dedup`,
/// `near_dedup`, a `max_noise_quantile` filter), by `type:` name in pipeline order; empty: its
/// tasks run `pipeline run` directly. What [`scan`] and [`resolve_from_scans`] go by, for
/// `pipeline validate --json` (which a scheduler's submit script asks, rather than reading the
/// YAML's text). Whether such a pipeline can be a task array at all is [`check_task_array`].
pub fn scan_steps(steps: &[PipelineStep]) -> Vec<&'static str> {
    steps.iter().filter(|s| is_ordered(s) || is_quantile(s)).map(PipelineStep::type_name).collect()
}

/// Why the pipeline cannot run as a task array (its global steps do not combine), if it cannot.
pub fn check_task_array(steps: &[PipelineStep]) -> Result<()> {
    global_steps(steps).map(|_| ())
}

/// The steps that need the whole corpus: the last of `dedup` / `near_dedup` (the ordered
/// steps) and the noise-quantile filter, by position.
fn global_steps(steps: &[PipelineStep]) -> Result<(Option<usize>, Option<usize>)> {
    let ordered = steps.iter().rposition(is_ordered);
    let quantiles: Vec<usize> = steps.iter().enumerate().filter(|(_, s)| is_quantile(s)).map(|(i, _)| i).collect();
    if quantiles.len() > 1 {
        bail!("a task array supports one filter with max_noise_quantile; this pipeline has {}", quantiles.len());
    }
    if ordered.is_some() && !quantiles.is_empty() {
        bail!(
            "a task array cannot yet combine `dedup` or `near_dedup` with a `max_noise_quantile` filter (each needs the other's whole-corpus pass first); use `max_noise` (a fixed score) or run the pipeline as one process"
        );
    }
    Ok((ordered, quantiles.first().copied()))
}

/// What one task's scan found: every document's `dedup` / `near_dedup` keys, in input order
/// and undecided (whether a document is kept depends on the tasks before it, and a near
/// duplicate of a document that an earlier task rejects may be kept: only replaying them all in
/// order gives the single run's verdicts), and the noise scores a quantile filter sees.
#[derive(Debug, Default, PartialEq)]
pub struct Scan {
    pub docs: Vec<(String, Vec<OrderKey>)>,
    pub scores: Vec<f32>,
}

#[derive(Serialize, Deserialize)]
struct ScanHeader {
    format: String,
    config_sha256: String,
    task: TaskSpec,
    docs: u64,
    scores: u64,
}

/// `pipeline scan`: the first phase of a task array whose pipeline has `dedup`, `near_dedup`
/// or a `max_noise_quantile` filter. Runs the steps up to the last of them over this task's
/// part and writes `<out>/tasks/scan/NNNNN.bin` (complete or absent: written aside, then renamed).
pub fn scan(pipeline: &Pipeline, task: TaskSpec, threads: usize, quiet: bool) -> Result<Scan> {
    let pipeline = &*pipeline.with_labels_found()?;
    let crate::sink::Sink::Parquet(sink) = &pipeline.sink;
    let config_sha256 = pipeline.config_sha256();
    let mut steps = pipeline.steps.clone();
    prepare_steps(&mut steps)?;
    let (ordered, quantile) = global_steps(&steps)?;
    let threads = threads_or_default(threads);
    let input = |seen: Seen| CorpusPart { source: &pipeline.source, seed: pipeline.seed, part: task.part(), seen };
    let mut found = Scan::default();
    match (ordered, quantile) {
        (Some(last), _) => {
            let progress = Progress::new(quiet, "scan");
            let set_total = |t: Total| progress.set_total(t);
            let (_, seen) = parallel::stream(
                input(Seen::recording()),
                &steps[..=last],
                threads,
                &set_total,
                &|_: &crate::contract::document::Document| (),
                |outcome, _| {
                    progress.advance(outcome.input_bytes(), 1);
                    Ok(())
                },
            )?;
            found.docs = seen.into_recorded();
            progress.finish();
        }
        (None, Some(q)) => found.scores = noise_scores(input(Seen::for_steps(&[])), &steps[..q], threads, quiet)?,
        (None, None) => bail!(
            "this pipeline has no `dedup`, `near_dedup` or `max_noise_quantile` filter: its tasks need no scan, run `pipeline run` directly"
        ),
    }
    write_scan(&sink.path, &config_sha256, task, &found)?;
    Ok(found)
}

const TAG_EXACT: u8 = 0;
const TAG_NEAR: u8 = 1;

fn write_scan(out: &Path, config_sha256: &str, task: TaskSpec, scan: &Scan) -> Result<()> {
    let header = ScanHeader {
        format: SCAN_FORMAT.into(),
        config_sha256: config_sha256.into(),
        task,
        docs: scan.docs.len() as u64,
        scores: scan.scores.len() as u64,
    };
    let mut w = serde_json::to_vec(&header)?;
    w.push(b'\n');
    for (id, keys) in &scan.docs {
        w.extend_from_slice(&(id.len() as u32).to_le_bytes());
        w.extend_from_slice(id.as_bytes());
        w.push(u8::try_from(keys.len()).expect("at most one dedup and one near_dedup step"));
        for key in keys {
            match key {
                OrderKey::Exact(k) => {
                    w.push(TAG_EXACT);
                    w.extend_from_slice(k);
                }
                OrderKey::Near(n) => {
                    w.push(TAG_NEAR);
                    w.extend_from_slice(&n.salt.to_le_bytes());
                    w.extend_from_slice(&n.words.to_le_bytes());
                    let signature = n.sketch.signature();
                    w.extend_from_slice(&(signature.len() as u16).to_le_bytes());
                    for v in signature {
                        w.extend_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
    }
    for score in &scan.scores {
        w.extend_from_slice(&score.to_le_bytes());
    }
    Root::open(out)?.write(&scan_file(task.index), w)
}

fn read_scan(root: &Root, config_sha256: &str, task: TaskSpec) -> Result<Scan> {
    let rel = scan_file(task.index);
    parse_scan(&root.read(&rel)?, &root.display(&rel), config_sha256, task)
}

/// Takes `n` bytes off the front of `r`, or says the file is truncated.
fn take<'a>(r: &mut &'a [u8], n: usize, shown: &str) -> Result<&'a [u8]> {
    if n > r.len() {
        bail!("'{shown}' is truncated or corrupt: {n} bytes wanted, but only {} bytes follow", r.len());
    }
    let (head, rest) = r.split_at(n);
    *r = rest;
    Ok(head)
}

fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// A scan file's contents (`shown` names it in errors). Every count and length in it is
/// checked against the bytes that are left before anything is allocated for it.
pub fn parse_scan(bytes: &[u8], shown: &str, config_sha256: &str, task: TaskSpec) -> Result<Scan> {
    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
        bail!("'{shown}' is not a bertpipe scan file (no header line)");
    };
    let header: ScanHeader =
        serde_json::from_slice(&bytes[..end]).with_context(|| format!("'{shown}' is not a bertpipe scan file"))?;
    let mut r = &bytes[end + 1..];
    if header.format != SCAN_FORMAT {
        bail!("'{shown}' has format `{}`; this bertpipe reads `{SCAN_FORMAT}` (scan again)", header.format);
    }
    if header.config_sha256 != config_sha256 {
        bail!(
            "'{shown}' was scanned with another pipeline configuration; scan again (`pipeline scan` with --task-index {})",
            task.index
        );
    }
    if header.task != task {
        bail!(
            "'{shown}' is the scan of task {} of {}, not of task {} of {}",
            header.task.index,
            header.task.count,
            task.index,
            task.count
        );
    }
    // A document takes at least 5 bytes and a score 4: counts beyond what is left are corrupt.
    let left = r.len() as u64;
    if header.docs.saturating_mul(5).saturating_add(header.scores.saturating_mul(4)) > left {
        bail!(
            "'{shown}' is truncated or corrupt: its header lists {} documents and {} scores, but only {left} bytes follow",
            header.docs,
            header.scores
        );
    }
    let mut scan = Scan::default();
    for _ in 0..header.docs {
        let len = u32::from_le_bytes(take(&mut r, 4, shown)?.try_into().expect("4 bytes")) as usize;
        if len > r.len() {
            bail!("'{shown}' is truncated or corrupt: a document id of {len} bytes, but only {} bytes follow", r.len());
        }
        let id =
            String::from_utf8(take(&mut r, len, shown)?.to_vec()).with_context(|| format!("'{shown}' is corrupt"))?;
        let n = take(&mut r, 1, shown)?[0];
        let mut keys = Vec::with_capacity(n.min(2) as usize);
        for _ in 0..n {
            match take(&mut r, 1, shown)?[0] {
                TAG_EXACT => keys.push(OrderKey::Exact(take(&mut r, 16, shown)?.try_into().expect("16 bytes"))),
                TAG_NEAR => {
                    let salt = le_u64(take(&mut r, 8, shown)?);
                    let words = le_u64(take(&mut r, 8, shown)?);
                    let hashes = u16::from_le_bytes(take(&mut r, 2, shown)?.try_into().expect("2 bytes")) as usize;
                    let signature = take(&mut r, hashes * 4, shown)?
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                        .collect();
                    keys.push(OrderKey::Near(NearKey { salt, words, sketch: Sketch::new(signature, hashes) }));
                }
                tag => bail!("'{shown}' is corrupt: a key of unknown kind {tag}"),
            }
        }
        scan.docs.push((id, keys));
    }
    for _ in 0..header.scores {
        scan.scores.push(f32::from_le_bytes(take(&mut r, 4, shown)?.try_into().expect("4 bytes")));
    }
    Ok(scan)
}

/// For task `task` of an array: what `dedup` and `near_dedup` had kept before this task's
/// first document in a single run — every earlier task's documents replayed in input order,
/// decided exactly as one process decides them — and each `max_noise_quantile` resolved over
/// every task's scores (the single run's threshold).
pub fn resolve_from_scans(out: &Path, config_sha256: &str, task: TaskSpec, steps: &mut [PipelineStep]) -> Result<Seen> {
    let (ordered, quantile) = global_steps(steps)?;
    let mut seen = Seen::for_steps(steps);
    let needed: Vec<u32> = match (ordered, quantile) {
        (Some(_), _) => (0..task.index).collect(),
        (None, Some(_)) => (0..task.count).collect(),
        (None, None) => return Ok(seen),
    };
    let root = Root::open(out)?;
    let mut missing = Vec::new();
    for &i in &needed {
        if root.size(&scan_file(i))?.is_none() {
            missing.push(i.to_string());
        }
    }
    if !missing.is_empty() {
        let has = |f: fn(&PipelineStep) -> bool| steps.iter().any(f);
        let what =
            match (has(|s| matches!(s, PipelineStep::Dedup(_))), has(|s| matches!(s, PipelineStep::NearDedup(_)))) {
                (true, true) => "`dedup` and `near_dedup`",
                (true, false) => "`dedup`",
                (false, true) => "`near_dedup`",
                (false, false) => "a `max_noise_quantile` filter",
            };
        bail!(
            "this pipeline has {what}: across {} tasks, `bertpipe pipeline scan` must run first for task{} {} (its files go to '{}'), then `pipeline run` for each task",
            task.count,
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            root.display(&format!("{TASKS_DIR}/{SCAN_DIR}"))
        );
    }
    // A scan whose signatures are not of this pipeline's `near_dedup` (a file damaged in a way
    // that kept its structure) is refused here, by name, rather than tripping the index.
    let near_hashes = steps.iter().find_map(|s| match s {
        PipelineStep::NearDedup(n) => Some(n.params().hashes()),
        _ => None,
    });
    let mut scores = Vec::new();
    for i in needed {
        let scan = read_scan(&root, config_sha256, TaskSpec { index: i, count: task.count })?;
        for (id, keys) in scan.docs {
            for key in &keys {
                let OrderKey::Near(n) = key else { continue };
                let got = n.sketch.signature().len();
                if got != 0 && near_hashes != Some(got) {
                    bail!(
                        "'{}' is corrupt or from another pipeline: document '{id}' has a near_dedup signature of {got} hashes, this pipeline's near_dedup has {}; run `bertpipe pipeline scan` for task {i} again",
                        root.display(&scan_file(i)),
                        near_hashes.map_or("none".to_string(), |h| format!("{h}")),
                    );
                }
            }
            seen.resolve(keys, &id);
        }
        scores.extend(scan.scores);
    }
    if let Some(q) = quantile {
        if let PipelineStep::Filter(f) = &mut steps[q] {
            let quantile = f.max_noise_quantile.expect("a quantile filter");
            f.resolved_quantile_threshold = Some(quantile_threshold(scores, quantile));
        }
    }
    Ok(seen)
}

/// The pipeline configurations (`config_sha256`) a local task array in `out` was run with, as
/// its tasks recorded them: in a finished task's manifest or an unfinished one's journal. Empty
/// when no task got that far. The chain uses it to tell an array of today's configuration (to
/// merge, or to finish) from a stale one (to replace).
pub fn recorded_configs(out: &Path) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(out.join(TASKS_DIR)).into_iter().flatten().flatten() {
        if !is_task_name(&e.file_name().to_string_lossy()) {
            continue;
        }
        let dir = e.path();
        let from_manifest = std::fs::read(dir.join(manifest::MANIFEST))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("config_sha256")?.as_str().map(str::to_string));
        let from_journal = || {
            let text = std::fs::read_to_string(dir.join(manifest::JOURNAL)).ok()?;
            let first: serde_json::Value = serde_json::from_str(text.lines().next()?).ok()?;
            first.get("config_sha256")?.as_str().map(str::to_string)
        };
        if let Some(c) = from_manifest.or_else(from_journal) {
            found.insert(c);
        }
    }
    found
}

/// `bertpipe shards merge OUT`: checks every task's manifest and shards (present, finished,
/// same pipeline, sizes and checksums) and writes `OUT/manifest.json`, listing the tasks'
/// shards in task order — the input's order — with their counts added up. Reading every shard
/// back for its checksum is the long part: it shows progress unless `quiet`.
pub fn merge(out: &Path, quiet: bool) -> Result<Manifest> {
    let root = Root::open(out)?;
    let found = root.task_indices()?;
    if found.is_empty() {
        bail!("'{}' holds no task outputs (expected {TASKS_DIR}/00000, {TASKS_DIR}/00001, …)", root.display(""));
    }
    let mut manifests: Vec<Manifest> = Vec::new();
    let mut count = None;
    let mut problems = Vec::new();
    for &i in &found {
        let dir = task_rel(i);
        let manifest_rel = format!("{dir}/{}", manifest::MANIFEST);
        if root.size(&manifest_rel)?.is_none() {
            problems.push(if root.size(&format!("{dir}/{}", manifest::JOURNAL))?.is_some() {
                format!(
                    "task {i} is unfinished ('{}' has a journal but no manifest): run it again with --resume",
                    root.display(&dir)
                )
            } else {
                format!("task {i} has not finished ('{}' has no manifest.json)", root.display(&dir))
            });
            continue;
        }
        let m = Manifest::from_json(&root.read(&manifest_rel)?, &root.display(&manifest_rel))?;
        match m.tasks {
            Some(TasksInfo { index: Some(index), count: c }) if index == i => {
                if *count.get_or_insert(c) != c {
                    bail!(
                        "task {i} ran as one of {c} tasks, task {} as one of {}: merge outputs of one task array",
                        found[0],
                        count.unwrap_or(0)
                    );
                }
            }
            _ => bail!("'{}' is not the output of task {i} of a task array", root.display(&dir)),
        }
        manifests.push(m);
    }
    let count = count.unwrap_or(found.len() as u32);
    let missing: Vec<String> = (0..count).filter(|i| !found.contains(i)).map(|i| i.to_string()).collect();
    if !missing.is_empty() {
        problems.push(format!(
            "task{} {} of {count} ha{} no output under '{}'",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            if missing.len() == 1 { "s" } else { "ve" },
            root.display(TASKS_DIR)
        ));
    }
    if let Some(extra) = found.iter().find(|&&i| i >= count) {
        problems
            .push(format!("'{}' is task {extra}, but the array has {count} tasks", root.display(&task_rel(*extra))));
    }
    if !problems.is_empty() {
        bail!("cannot merge '{}' yet:\n  {}", root.display(""), problems.join("\n  "));
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
        let dir = task_rel(i as u32);
        for s in m.splits.values().flat_map(|s| &s.shards).chain(&m.rejects.shards) {
            shards.push((format!("{dir}/{}", s.file), s.bytes, s.sha256.clone()));
        }
    }
    let progress = Progress::new(quiet, "merge");
    progress.set_total(Total::Bytes(shards.iter().map(|s| s.1).sum()));
    shards.par_iter().try_for_each(|(rel, bytes, sha)| -> Result<()> {
        let shown = root.display(rel);
        let Some(size) = root.size(rel)? else {
            bail!("shard '{shown}', listed in its task's manifest, is missing");
        };
        if size != *bytes {
            bail!("shard '{shown}' has {size} bytes, its task's manifest says {bytes}");
        }
        let got = root.sha256(rel)?;
        if &got != sha {
            bail!("checksum mismatch for '{shown}': its task's manifest says {sha}, the file hashes to {got}");
        }
        progress.advance(*bytes, 1);
        Ok(())
    })?;
    progress.finish();

    let mut merged = first.clone();
    merged.splits.clear();
    merged.rejects = Default::default();
    merged.tasks = Some(TasksInfo { index: None, count });
    // Each task saw only its part: the whole array's leakage is measured from their parts.
    merged.leakage = merged_leakage(&root, &manifests)?;
    merged.leakage_part = None;
    for (i, m) in manifests.into_iter().enumerate() {
        let prefix = format!("{}/", task_rel(i as u32));
        for (name, s) in m.splits {
            merged.splits.entry(name).or_default().add(s, &prefix);
        }
        merged.rejects.rows += m.rejects.rows;
        merged.rejects.shards.extend(m.rejects.shards.into_iter().map(|s| s.under(&prefix)));
    }
    merged.splits.values_mut().for_each(manifest::SplitStats::finish);
    merged.warnings = merged.label_warnings();
    root.write(manifest::MANIFEST, merged.to_json()?)?;
    Ok(merged)
}

/// Writes task `task`'s leakage part into its folder (whole or not at all) and returns what its
/// manifest lists of it.
pub fn write_leakage_part(out: &Path, task: TaskSpec, part: &leakage::Part, config_sha256: &str) -> Result<ShardInfo> {
    let bytes = part.to_bytes(config_sha256);
    let info = ShardInfo {
        file: leakage::PART_FILE.into(),
        rows: part.docs.len() as u64,
        bytes: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&bytes)),
    };
    Root::open(out)?.write(&format!("{}/{}", task_rel(task.index), leakage::PART_FILE), bytes)?;
    Ok(info)
}

/// The array's leakage: every task's part replayed in task order (the input's order), as one
/// process would have measured it. None when the tasks measured none.
fn merged_leakage(root: &Root, manifests: &[Manifest]) -> Result<BTreeMap<String, manifest::LeakageInfo>> {
    let with = manifests.iter().filter(|m| m.leakage_part.is_some()).count();
    if with == 0 {
        return Ok(BTreeMap::new());
    }
    if with < manifests.len() {
        let without: Vec<String> = manifests
            .iter()
            .enumerate()
            .filter(|(_, m)| m.leakage_part.is_none())
            .map(|(i, _)| i.to_string())
            .collect();
        bail!(
            "tasks {} measured no test leakage but the others did (run them again with this bertpipe)",
            without.join(", ")
        );
    }
    let mut whole = leakage::Leakage::default();
    for (i, m) in manifests.iter().enumerate() {
        let info = m.leakage_part.as_ref().expect("checked above");
        let rel = format!("{}/{}", task_rel(i as u32), info.file);
        let shown = root.display(&rel);
        if root.size(&rel)?.is_none() {
            bail!("'{shown}', listed in task {i}'s manifest, is missing");
        }
        let bytes = root.read(&rel)?;
        let sha = hex::encode(Sha256::digest(&bytes));
        if bytes.len() as u64 != info.bytes || sha != info.sha256 {
            bail!(
                "'{shown}' has {} bytes and SHA-256 {sha}; task {i}'s manifest says {} bytes, {}",
                bytes.len(),
                info.bytes,
                info.sha256
            );
        }
        whole.add_part(leakage::Part::parse(&bytes, &shown, &m.config_sha256)?);
    }
    Ok(whole.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts and lengths in a scan file are checked against the bytes that follow before
    /// anything is allocated for them.
    #[test]
    fn a_scan_file_with_absurd_counts_or_lengths_is_refused_by_name() {
        let task = TaskSpec { index: 0, count: 1 };
        let header = |docs: u64, scores: u64| {
            format!("{{\"format\":\"{SCAN_FORMAT}\",\"config_sha256\":\"c\",\"task\":{{\"index\":0,\"count\":1}},\"docs\":{docs},\"scores\":{scores}}}\n").into_bytes()
        };
        // What write_scan writes reads back.
        let scan = Scan {
            docs: vec![
                ("abc".into(), vec![OrderKey::Exact([7u8; 16])]),
                (
                    "d".into(),
                    vec![
                        OrderKey::Exact([1u8; 16]),
                        OrderKey::Near(NearKey { salt: 3, words: 4, sketch: Sketch::new(vec![5, 6, u32::MAX], 3) }),
                    ],
                ),
                ("e".into(), vec![]),
            ],
            scores: vec![2.5],
        };
        let dir = std::env::temp_dir().join(format!("bertpipe-scan-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(TASKS_DIR).join(SCAN_DIR)).unwrap();
        write_scan(&dir, "c", task, &scan).unwrap();
        let bytes = std::fs::read(dir.join(scan_file(0))).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(parse_scan(&bytes, "s.bin", "c", task).unwrap(), scan);
        for cut in [bytes.len() - 1, bytes.len() - 5, bytes.len() - 20] {
            let e = parse_scan(&bytes[..cut], "s.bin", "c", task).unwrap_err().to_string();
            assert!(e.contains("s.bin") && (e.contains("truncated") || e.contains("corrupt")), "{e}");
        }
        let e = parse_scan(&header(u64::MAX / 2, 0), "s.bin", "c", task).unwrap_err().to_string();
        assert!(e.contains("s.bin") && e.contains("documents"), "{e}");
        let mut long_id = header(1, 0);
        long_id.extend_from_slice(&u32::MAX.to_le_bytes());
        long_id.extend_from_slice(&[0u8; 8]);
        let e = parse_scan(&long_id, "s.bin", "c", task).unwrap_err().to_string();
        assert!(e.contains("s.bin") && e.contains("4294967295 bytes"), "{e}");
        assert!(parse_scan(b"no header line", "s.bin", "c", task).unwrap_err().to_string().contains("s.bin"));
    }

    /// A scan's signatures of another length than the pipeline's `near_dedup` makes are an
    /// error naming the file (they would otherwise trip the index's assertion).
    #[test]
    fn a_scan_with_signatures_of_another_length_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("bertpipe-scan-len-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(TASKS_DIR).join(SCAN_DIR)).unwrap();
        let near = NearKey { salt: 3, words: 4, sketch: Sketch::new(vec![5, 6, 7], 3) };
        let scan = Scan { docs: vec![("d".into(), vec![OrderKey::Near(near)])], scores: vec![] };
        write_scan(&dir, "c", TaskSpec { index: 0, count: 2 }, &scan).unwrap();
        let mut steps = vec![PipelineStep::NearDedup(Default::default())];
        let e = resolve_from_scans(&dir, "c", TaskSpec { index: 1, count: 2 }, &mut steps).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("00000.bin") && e.contains("3 hashes") && e.contains("has 112"), "{e}");
    }

    /// What `pipeline validate --json` reports: the steps that need a scan, from the steps.
    #[test]
    fn scan_steps_are_the_global_steps() {
        let quantile =
            || PipelineStep::Filter(crate::clean::Filter { max_noise_quantile: Some(0.9), ..Default::default() });
        let plain = [PipelineStep::HtmlStrip(Default::default()), PipelineStep::Filter(Default::default())];
        assert!(scan_steps(&plain).is_empty());
        assert!(check_task_array(&plain).is_ok());
        let dedup = [PipelineStep::HtmlStrip(Default::default()), PipelineStep::Dedup(Default::default())];
        assert_eq!(scan_steps(&dedup), ["dedup"]);
        assert!(check_task_array(&dedup).is_ok());
        let both = [quantile(), PipelineStep::NearDedup(Default::default())];
        assert_eq!(scan_steps(&both), ["filter", "near_dedup"]);
        assert!(check_task_array(&both).unwrap_err().to_string().contains("cannot yet combine"));
        assert!(check_task_array(&[quantile(), quantile()]).unwrap_err().to_string().contains("one filter"));
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
        // `--array=1-7:2`: ids 1, 3, 5, 7 are tasks 0..4 (the variables Slurm 22.05 sets).
        let stepped = |id: &'static str| {
            move |k: &str| match k {
                "SLURM_ARRAY_TASK_ID" => Some(id.to_string()),
                "SLURM_ARRAY_TASK_MIN" => Some("1".to_string()),
                "SLURM_ARRAY_TASK_MAX" => Some("7".to_string()),
                "SLURM_ARRAY_TASK_STEP" => Some("2".to_string()),
                "SLURM_ARRAY_TASK_COUNT" => Some("4".to_string()),
                _ => None,
            }
        };
        assert_eq!(TaskSpec::resolve_with(None, None, stepped("5")).unwrap(), Some(TaskSpec { index: 2, count: 4 }));
        let e = TaskSpec::resolve_with(None, None, stepped("4")).unwrap_err().to_string();
        assert!(e.contains("STEP=2") && e.contains("--array=0-7"), "{e}");
        let bad = |k: &str| (k == "SLURM_ARRAY_TASK_ID").then(|| "x".to_string());
        assert!(TaskSpec::resolve_with(None, None, bad).unwrap_err().to_string().contains("SLURM_ARRAY_TASK_ID"));
    }
}
