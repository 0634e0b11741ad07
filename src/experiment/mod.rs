//! `bertpipe run EXPERIMENT.yaml`: the stages of an experiment ([`config`]) run in dependency
//! order, each through exactly the library call its own command makes (`pipeline::run`,
//! `vocab::train_vocab`, `train::run`, `onnx::export::export`, `onnx::eval::run`), and only
//! when something it depends on changed.
//!
//! **Keys.** A stage's key is the SHA-256 of bertpipe's version, its kind, its resolved
//! configuration, the keys of the stages it reads, and a fingerprint of every file it names by
//! path (size and modification time of each file under it; the contents of small files such as
//! vocabularies). When a stage finishes, `OUT/.stages/NAME.json` records its key, the parts
//! of the key, its time and figures (written aside and renamed). A stage whose recorded key
//! equals its key now, and whose output is there, is up to date; otherwise the first part that
//! differs is the reason it runs.
//!
//! **Faults.** `OUT/.stages/NAME.started.json` holds the key of a run in progress: the same
//! chain run again resumes that stage (a training from its newest checkpoint, a pipeline from
//! its journal) instead of starting it over. A stage's output folder is `OUT/NAME/`; nothing
//! outside `OUT` is written or removed.

pub mod config;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub use config::{load, Experiment, Kind, Spec, Stage};

const STAGES_DIR: &str = ".stages";

/// Whether a YAML file is an experiment (it has `stages:`), not a pipeline.
pub fn is_experiment(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| crate::config::yaml::parse(&t).ok())
        .is_some_and(|n| matches!(&n, crate::config::yaml::Node::Map(e, _) if e.iter().any(|(k, _, _)| k == "stages")))
}

/// Command-line options of `bertpipe run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Stages to run even when up to date (`all` for every stage).
    pub force: Vec<String>,
    pub dry_run: bool,
    pub quiet: bool,
}

/// What makes a stage's key, part by part (so a change can be named).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyParts {
    pub version: String,
    pub config: String,
    pub upstream: BTreeMap<String, String>,
    pub inputs: BTreeMap<String, String>,
}

impl KeyParts {
    pub fn key(&self) -> String {
        hex::encode(Sha256::digest(serde_json::to_vec(self).expect("key parts serialise")))
    }

    /// The first part that differs from `before`, in words.
    fn changed_since(&self, before: &KeyParts) -> String {
        if self.version != before.version {
            return format!("bertpipe changed ({} → {})", before.version, self.version);
        }
        for (name, key) in &self.upstream {
            if before.upstream.get(name) != Some(key) {
                return format!("`{name}` changed");
            }
        }
        if self.config != before.config {
            return "its configuration changed".into();
        }
        for (path, fp) in &self.inputs {
            if before.inputs.get(path) != Some(fp) {
                return format!("'{path}' changed");
            }
        }
        "its inputs changed".into()
    }
}

/// `OUT/.stages/NAME.json`: a finished stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub stage: String,
    pub kind: String,
    pub key: String,
    pub parts: KeyParts,
    pub seconds: f64,
    pub figures: Value,
}

/// What happened to one stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    pub stage: String,
    pub kind: String,
    /// `ran`, `up to date`, `will run`, `failed`, `interrupted`, `not run`.
    pub status: String,
    pub reason: String,
    pub seconds: f64,
    pub key: String,
    pub output: PathBuf,
    pub figures: Value,
}

/// The whole chain's report (`OUT/report.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub experiment: String,
    pub file: PathBuf,
    pub out: PathBuf,
    pub stages: Vec<StageReport>,
    pub interrupted: bool,
}

/// Runs (or with `dry_run`, plans) an experiment. A failing stage stops the chain: its report
/// says `failed` and the error is returned after `report.json` is written.
pub fn run(exp: &Experiment, opts: &RunOptions) -> Result<Report> {
    for f in &opts.force {
        if f != "all" && exp.stage(f).is_none() {
            let names: Vec<&str> = exp.stages.iter().map(|s| s.name.as_str()).collect();
            bail!("--force {f}: no such stage (stages: {})", names.join(", "));
        }
    }
    let records = exp.out.join(STAGES_DIR);
    let mut keys: BTreeMap<String, String> = BTreeMap::new();
    let mut reruns: Vec<String> = Vec::new();
    let mut report = Report {
        experiment: exp.name.clone(),
        file: exp.file.clone(),
        out: exp.out.clone(),
        stages: Vec::new(),
        interrupted: false,
    };
    let mut failure = None;
    for stage in &exp.stages {
        let parts = key_parts(stage, &keys)?;
        let key = parts.key();
        keys.insert(stage.name.clone(), key.clone());
        let done = read_record(&records, &stage.name);
        let forced = opts.force.iter().any(|f| f == "all" || f == &stage.name);
        let upstream_reruns = stage.deps.iter().find(|d| reruns.contains(d));
        let reason = match (&done, forced) {
            (_, true) => Some("--force".to_string()),
            (None, _) => Some("not run before".to_string()),
            (Some(r), _) if r.key != key => Some(r.parts.changed_since(&parts)),
            (Some(_), _) if !output_complete(stage) => {
                Some(format!("its output '{}' is incomplete", stage.out.display()))
            }
            _ => None,
        };
        // A stage after one that runs runs too: its input is being rewritten.
        let reason = match (reason, upstream_reruns) {
            (Some(r), _) => Some(r),
            (None, Some(d)) if opts.dry_run => Some(format!("`{d}` will run")),
            (None, Some(d)) => Some(format!("`{d}` ran")),
            (None, None) => None,
        };
        let mut entry = StageReport {
            stage: stage.name.clone(),
            kind: stage.kind.name().into(),
            status: String::new(),
            reason: reason.clone().unwrap_or_else(|| "its key equals the recorded one".into()),
            seconds: 0.0,
            key: key.clone(),
            output: stage.out.clone(),
            figures: done.as_ref().map(|r| r.figures.clone()).unwrap_or(Value::Null),
        };
        if failure.is_some() {
            entry.status = "not run".into();
            report.stages.push(entry);
            continue;
        }
        match reason {
            None => {
                entry.status = "up to date".into();
                entry.seconds = done.map_or(0.0, |r| r.seconds);
            }
            Some(_) if opts.dry_run => {
                entry.status = "will run".into();
                reruns.push(stage.name.clone());
            }
            Some(_) => {
                reruns.push(stage.name.clone());
                if !opts.quiet {
                    eprintln!("== {} ({}): {}", stage.name, stage.kind.name(), entry.reason);
                }
                let started = Instant::now();
                std::fs::create_dir_all(&records)
                    .with_context(|| format!("could not create '{}'", records.display()))?;
                let resume = read_started(&records, &stage.name).as_deref() == Some(key.as_str());
                crate::contract::write_file_atomic(
                    &records.join(format!("{}.started.json", stage.name)),
                    serde_json::to_string_pretty(&json!({"key": key}))?.as_bytes(),
                )?;
                match run_stage(stage, exp, &keys, resume, opts.quiet) {
                    Ok(StageOutcome::Done(figures)) => {
                        entry.seconds = started.elapsed().as_secs_f64();
                        entry.status = "ran".into();
                        entry.figures = figures.clone();
                        let record = Record {
                            stage: stage.name.clone(),
                            kind: stage.kind.name().into(),
                            key: key.clone(),
                            parts,
                            seconds: entry.seconds,
                            figures,
                        };
                        crate::contract::write_file_atomic(
                            &records.join(format!("{}.json", stage.name)),
                            (serde_json::to_string_pretty(&record)? + "\n").as_bytes(),
                        )?;
                        let _ = std::fs::remove_file(records.join(format!("{}.started.json", stage.name)));
                    }
                    Ok(StageOutcome::Interrupted) => {
                        entry.seconds = started.elapsed().as_secs_f64();
                        entry.status = "interrupted".into();
                        report.interrupted = true;
                        failure = Some(anyhow::anyhow!(
                            "interrupted during `{}`; run the same command to continue",
                            stage.name
                        ));
                    }
                    Err(e) => {
                        entry.seconds = started.elapsed().as_secs_f64();
                        entry.status = "failed".into();
                        entry.reason = format!("{e:#}");
                        failure = Some(e.context(format!("stage `{}` failed", stage.name)));
                    }
                }
            }
        }
        report.stages.push(entry);
    }
    if !opts.dry_run {
        write_reports(&report)?;
    }
    match failure {
        Some(e) if !report.interrupted => Err(e),
        _ => Ok(report),
    }
}

/// One task of a pipeline stage, as a member of a task array (`bertpipe run … --stage NAME
/// --task-index I --task-count N`, with `scan` its first phase): exactly `pipeline scan` /
/// `pipeline run` of the stage's pipeline. The next plain run merges the tasks.
pub fn run_task(
    exp: &Experiment,
    name: &str,
    task: crate::pipeline::tasks::TaskSpec,
    scan: bool,
    quiet: bool,
) -> Result<()> {
    let Some(stage) = exp.stage(name) else {
        let names: Vec<&str> = exp.stages.iter().map(|s| s.name.as_str()).collect();
        bail!("--stage {name}: no such stage (stages: {})", names.join(", "));
    };
    let Spec::Pipeline(p) = &stage.spec else {
        bail!("--stage {name}: only a pipeline stage runs as a task array; `{name}` is a {} stage", stage.kind.name());
    };
    if scan {
        crate::pipeline::tasks::scan(p, task, 0, quiet)?;
    } else {
        let opts = crate::pipeline::RunOptions { threads: 0, resume: false, overwrite: true, quiet, task: Some(task) };
        let s = crate::pipeline::run(p, &opts)?;
        if !quiet {
            eprintln!("{}", crate::pipeline::format_summary(&s));
        }
    }
    Ok(())
}

enum StageOutcome {
    Done(Value),
    Interrupted,
}

/// Whether a stage's output is there as its command leaves it when it finishes.
fn output_complete(stage: &Stage) -> bool {
    let o = &stage.out;
    match stage.kind {
        Kind::Pipeline => o.join(crate::contract::manifest::MANIFEST).exists(),
        Kind::Vocab => o.join("vocab.txt").exists(),
        Kind::Train => o.join("final").join("model.safetensors").exists(),
        Kind::Export => o.join("model.onnx").exists(),
        Kind::Eval => o.join("metrics.json").exists(),
    }
}

fn read_record(dir: &Path, stage: &str) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(dir.join(format!("{stage}.json"))).ok()?).ok()
}

fn read_started(dir: &Path, stage: &str) -> Option<String> {
    let v: Value = serde_json::from_slice(&std::fs::read(dir.join(format!("{stage}.started.json"))).ok()?).ok()?;
    v.get("key")?.as_str().map(str::to_string)
}

/// The parts of a stage's key.
fn key_parts(stage: &Stage, keys: &BTreeMap<String, String>) -> Result<KeyParts> {
    let mut inputs = BTreeMap::new();
    for p in &stage.inputs {
        inputs.insert(p.display().to_string(), fingerprint(p)?);
    }
    Ok(KeyParts {
        version: env!("CARGO_PKG_VERSION").to_string(),
        config: hex::encode(Sha256::digest(serde_json::to_vec(&stage.spec.canonical())?)),
        upstream: stage.deps.iter().map(|d| (d.clone(), keys.get(d).cloned().unwrap_or_default())).collect(),
        inputs,
    })
}

/// Files up to this size are fingerprinted by their contents, larger ones by size and mtime.
const HASHED_BYTES: u64 = 1 << 20;

/// A file's or folder's fingerprint: for each file under it (sorted), its relative path, size
/// and modification time — or its contents' SHA-256 when small. A missing path fingerprints
/// as missing (the stage's own command then says what is wrong).
fn fingerprint(path: &Path) -> Result<String> {
    if crate::storage::is_remote(path) {
        return Ok(format!("remote {}", path.display()));
    }
    let mut files = Vec::new();
    collect_files(path, &mut files);
    files.sort();
    let mut h = Sha256::new();
    if files.is_empty() && !path.exists() {
        h.update(b"missing");
    }
    for f in files {
        let meta = std::fs::metadata(&f).with_context(|| format!("could not read '{}'", f.display()))?;
        h.update(f.strip_prefix(path).unwrap_or(&f).display().to_string().as_bytes());
        h.update(meta.len().to_le_bytes());
        if meta.len() <= HASHED_BYTES {
            h.update(Sha256::digest(std::fs::read(&f)?));
        } else {
            let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            h.update(mtime.map_or(0, |d| d.as_nanos()).to_le_bytes());
        }
    }
    Ok(hex::encode(h.finalize()))
}

fn collect_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
    } else if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            collect_files(&e.path(), out);
        }
    }
}

/// Runs one stage through its command's library call; its headline figures.
fn run_stage(
    stage: &Stage,
    exp: &Experiment,
    keys: &BTreeMap<String, String>,
    resume: bool,
    quiet: bool,
) -> Result<StageOutcome> {
    let figures = match &stage.spec {
        Spec::Pipeline(p) => {
            let started = Instant::now();
            // A task array that ran this stage (`--stage`) with this configuration is merged;
            // otherwise the stage runs as one process (replacing any stale tasks).
            let merged = if stage.out.join(crate::contract::manifest::TASKS_DIR).is_dir() {
                let m = crate::pipeline::tasks::merge(&stage.out, quiet)?;
                let want = hex::encode(Sha256::digest(p.canonical_json().as_bytes()));
                (m.config_sha256 == want).then_some(m)
            } else {
                None
            };
            let manifest = match merged {
                Some(m) => m,
                None => {
                    let journal = stage.out.join(crate::contract::manifest::JOURNAL);
                    let resume = resume && journal.exists();
                    let opts =
                        crate::pipeline::RunOptions { threads: 0, resume, overwrite: !resume, quiet, task: None };
                    let s = crate::pipeline::run(p, &opts)?;
                    if !quiet {
                        eprintln!("{}", crate::pipeline::format_summary(&s));
                    }
                    s.manifest
                }
            };
            let (docs_in, docs_out, rows) =
                manifest.splits.values().fold((0, 0, 0), |(a, b, c), x| (a + x.docs_in, b + x.docs_out, c + x.rows));
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            json!({"docs_in": docs_in, "docs_out": docs_out, "rejected": docs_in - docs_out, "rows": rows,
                   "docs_per_second": (docs_in as f64 / secs).round()})
        }
        Spec::Vocab { pipeline, size, min_frequency, lowercase } => {
            let opts = crate::vocab::VocabTrainOptions {
                size: *size,
                min_frequency: *min_frequency,
                lowercase: *lowercase,
                out: stage.out.clone(),
                threads: 0,
                quiet,
            };
            let r = crate::vocab::train_vocab(pipeline, &opts)?;
            json!({"vocab_size": r.vocab_size, "docs": r.docs, "tokens": r.tokens})
        }
        Spec::Train(c) => {
            let resume = resume && crate::train::checkpoint::newest(&c.output_dir).is_some();
            let opts = crate::train::TrainOptions { resume, overwrite: !resume, quiet, ..Default::default() };
            let s = crate::train::run(c, &opts)?;
            if !quiet {
                eprintln!("{}", crate::train::format_summary(&s));
            }
            if s.interrupted {
                return Ok(StageOutcome::Interrupted);
            }
            let last_loss = std::fs::read_to_string(c.output_dir.join("metrics.jsonl")).ok().and_then(|t| {
                t.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok()?.get("loss")?.as_f64())
            });
            let mut f = json!({"steps": s.steps, "epochs": s.epochs, "final_loss": last_loss});
            if let Some(e) = &s.last_eval {
                for k in ["eval_accuracy", "eval_f1", "eval_loss", "eval_mlm_accuracy", "eval_perplexity"] {
                    if let Some(v) = e.get(k) {
                        f[k] = v.clone();
                    }
                }
            }
            f
        }
        Spec::Export { checkpoint, optimize, max_len, verify, precision } => {
            std::fs::create_dir_all(&stage.out)?;
            let chain: BTreeMap<&str, &str> = keys
                .iter()
                .filter(|(n, _)| is_upstream(exp, stage, n))
                .map(|(n, k)| (n.as_str(), k.as_str()))
                .collect();
            let opts = crate::onnx::export::ExportOptions {
                checkpoint: checkpoint.clone(),
                out: stage.out.join("model.onnx"),
                optimize: *optimize,
                precision: *precision,
                vocab: None,
                max_len: *max_len,
                external_data: false,
                metadata: vec![
                    ("bertpipe_experiment".into(), exp.name.clone()),
                    ("bertpipe_chain".into(), serde_json::to_string(&chain)?),
                ],
            };
            let done = crate::onnx::export::export(&opts)?;
            let mut f = json!({"nodes": done.nodes, "parameters": done.parameters, "bytes": done.bytes});
            if *verify {
                let rt = crate::onnx::runtime::init(None)?;
                let checked = crate::onnx::verify::verify_export(rt, &done)?;
                let worst = crate::metrics::worst_of(checked.iter().map(|c| c.max_abs_diff as f64));
                f["verify_max_abs_diff"] = json!(worst);
            }
            f
        }
        Spec::Eval { model, data, split, batch_size, device, mistakes, baseline, max_drop } => {
            let opts = crate::onnx::eval::EvalOptions {
                model: model.clone(),
                data: data.clone(),
                split: split.clone(),
                device: device.clone(),
                batch_size: *batch_size,
                pad_to: None,
                threads: 0,
                out: Some(stage.out.clone()),
                ort_lib: None,
                quiet,
                mistakes: *mistakes,
                length_edges: None,
                baseline: baseline.clone(),
                max_drop: *max_drop,
                // The chain reports leakage without being asked: the clean part's score too.
                exclude_leaked: crate::onnx::eval::ScoreLeaked::IfRecorded,
            };
            let r = crate::onnx::eval::run(&opts)?;
            if !quiet {
                eprintln!("{}", crate::onnx::eval::format_report(&r));
            }
            let mut f = json!({"rows": r.rows, "docs_per_second": r.throughput.docs_per_second});
            if let Some(m) = &r.metrics {
                f["accuracy"] = json!(m.accuracy);
                f["f1"] = json!(m.f1);
                f["loss"] = json!(m.loss);
            }
            if let Some(l) = &r.leakage {
                f["leaked_share"] = json!(l.share);
                f["leaked"] = json!(l.leaked);
                if let Some(m) = l.clean.as_ref().and_then(|c| c.document_metrics.as_ref().or(c.metrics.as_ref())) {
                    f["clean_accuracy"] = json!(m.accuracy);
                }
            }
            if let Some(g) = &r.gate {
                f["agreement"] = json!(g.agreement);
                f["accuracy_drop_points"] = json!(g.drop);
                if !g.passed {
                    anyhow::bail!(
                        "the gate failed: the model loses {:.2} accuracy points on {} against the baseline {} (max_drop {}); agreement {:.2}%, {} flipped (see {})",
                        g.drop,
                        g.level,
                        g.baseline,
                        g.max_drop,
                        100.0 * g.agreement,
                        g.flipped,
                        stage.out.join("metrics.json").display()
                    );
                }
            }
            f
        }
    };
    Ok(StageOutcome::Done(figures))
}

/// Whether `name` is `stage` or one of the stages it reads, directly or not.
fn is_upstream(exp: &Experiment, stage: &Stage, name: &str) -> bool {
    if stage.name == name {
        return true;
    }
    stage.deps.iter().any(|d| exp.stage(d).is_some_and(|s| is_upstream(exp, s, name)))
}

/// `OUT/report.json` and `OUT/report.md`.
fn write_reports(r: &Report) -> Result<()> {
    std::fs::create_dir_all(&r.out)?;
    crate::contract::write_file_atomic(
        &r.out.join("report.json"),
        (serde_json::to_string_pretty(r)? + "\n").as_bytes(),
    )?;
    crate::contract::write_file_atomic(&r.out.join("report.md"), format_markdown(r).as_bytes())
}

/// The headline figures of a stage, in words.
fn figures_line(f: &Value) -> String {
    let Some(obj) = f.as_object() else { return String::new() };
    obj.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v.as_f64() {
            Some(x) if x.fract() != 0.0 => format!("{k} {x:.4}"),
            _ => format!("{k} {v}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn format_markdown(r: &Report) -> String {
    let mut s = format!("# {}\n\n`{}` → `{}`\n\n", r.experiment, r.file.display(), r.out.display());
    s.push_str("| stage | kind | status | seconds | figures | why |\n|---|---|---|---:|---|---|\n");
    for st in &r.stages {
        s.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {} |\n",
            st.stage,
            st.kind,
            st.status,
            st.seconds,
            figures_line(&st.figures),
            st.reason.replace('|', "\\|")
        ));
    }
    s.push_str("\nStage keys (SHA-256 of version, configuration, upstream keys and inputs):\n\n");
    for st in &r.stages {
        s.push_str(&format!("- `{}`: `{}`\n", st.stage, &st.key[..16]));
    }
    s
}

/// The closing summary: one line per stage.
pub fn format_summary(r: &Report) -> String {
    let w = r.stages.iter().map(|s| s.stage.len()).max().unwrap_or(5).max(5);
    let mut out = vec![format!("{:<w$}  {:<8}  {:<11}  {:>8}  figures / why", "stage", "kind", "status", "seconds")];
    for s in &r.stages {
        let detail = match s.status.as_str() {
            "ran" => figures_line(&s.figures),
            "up to date" => format!("{} ({})", figures_line(&s.figures), s.reason),
            _ => s.reason.clone(),
        };
        out.push(format!("{:<w$}  {:<8}  {:<11}  {:>8.1}  {detail}", s.stage, s.kind, s.status, s.seconds));
    }
    out.join("\n")
}
