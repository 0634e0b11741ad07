//! `bertpipe run EXPERIMENT.yaml`: the stages of an experiment ([`config`]) run in dependency
//! order, each through exactly the library call its own command makes ([`stages`], one file per
//! kind), and only when something it depends on changed.
//!
//! **Keys from content.** A stage's key is the SHA-256 of bertpipe's version, its kind, its
//! resolved configuration, the content digest of every file or folder it reads by path, and —
//! for each stage it reads — the digest of what that stage *produced* (its output's identity,
//! [`stages::StageKind::identity`]), not of how it was made. A stage re-run that writes the same
//! output leaves the stages after it up to date ("early cutoff"). File digests are cached by
//! their stat data ([`digest`]), so an unchanged tree costs a `stat` per file.
//!
//! **Verified outputs.** When a stage finishes, `OUT/.stages/NAME.json` records its key, the
//! parts of the key, the digest of every output file, its identity, its time and figures
//! (written aside and renamed). A stage is up to date only when its key equals the recorded one
//! *and* its outputs still have the recorded digests; otherwise the first difference is the
//! reason it runs. Starting a stage voids its record first, so a stage that fails or is killed
//! is never taken for finished.
//!
//! **Faults.** `OUT/.stages/NAME.started.json` holds the key of a run in progress: the same
//! chain run again resumes that stage (a training from its newest intact checkpoint, a pipeline
//! from its journal) instead of starting it over; `--force` starts it over. One run at a time
//! holds `OUT/.lock` ([`lock`]). A stage's output folder is `OUT/NAME/`, and every path it is
//! told to write is checked to lie under it; nothing outside `OUT` is written or removed.

pub mod config;
pub mod digest;
pub mod lock;
pub mod stages;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::contract::checksum::sha256_bytes;

pub use config::{load, Experiment, Kind, Spec, Stage};
use digest::Digests;
use stages::{Outcome, RunCx};

const STAGES_DIR: &str = ".stages";
/// The digest cache, in `OUT/.stages/`.
const DIGESTS: &str = "digests.json";

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
    /// Queue behind another run holding `OUT/.lock` instead of refusing at once.
    pub wait: bool,
}

/// What makes a stage's key, part by part (so a change can be named).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyParts {
    pub version: String,
    pub kind: String,
    /// SHA-256 of the resolved configuration.
    pub config: String,
    /// Per stage read: the identity of its output.
    pub upstream: BTreeMap<String, String>,
    /// Per file or folder read by path: the digest of its content.
    pub inputs: BTreeMap<String, String>,
}

impl KeyParts {
    pub fn key(&self) -> String {
        sha256_bytes(&serde_json::to_vec(self).expect("key parts serialise"))
    }

    /// The first part that differs from `before` (the record of the last run), in words.
    fn changed_since(&self, before: &KeyParts) -> String {
        if self.version != before.version {
            return format!("bertpipe changed ({} → {})", before.version, self.version);
        }
        for (name, id) in &self.upstream {
            if before.upstream.get(name) != Some(id) {
                return format!("`{name}`'s output changed");
            }
        }
        if self.config != before.config || self.kind != before.kind {
            return "its configuration changed".into();
        }
        for (path, fp) in &self.inputs {
            match before.inputs.get(path) {
                Some(old) if old == fp => {}
                Some(_) => return format!("'{path}' changed"),
                None => return format!("it reads '{path}' now"),
            }
        }
        if let Some(path) = before.inputs.keys().find(|p| !self.inputs.contains_key(*p)) {
            return format!("it no longer reads '{path}'");
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
    /// Every output file, by path relative to `OUT/<stage>/`, with its SHA-256.
    pub outputs: BTreeMap<String, String>,
    /// What stages reading this one see of it.
    pub identity: String,
}

/// What happened to one stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    pub stage: String,
    pub kind: String,
    /// `ran`, `up to date`, `will run`, `may run` (dry run: only if a stage it reads produces
    /// something new), `failed`, `interrupted`, `not run`.
    pub status: String,
    pub reason: String,
    pub seconds: f64,
    pub key: String,
    pub output: PathBuf,
    pub figures: Value,
}

impl StageReport {
    fn of(stage: &Stage, status: &str, reason: String) -> StageReport {
        StageReport {
            stage: stage.name.clone(),
            kind: stage.kind.name().into(),
            status: status.into(),
            reason,
            seconds: 0.0,
            key: String::new(),
            output: stage.out.clone(),
            figures: Value::Null,
        }
    }
}

/// The whole chain's report (`OUT/report.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub experiment: String,
    pub file: PathBuf,
    pub out: PathBuf,
    pub stages: Vec<StageReport>,
    pub interrupted: bool,
    /// Files hashed this run (those the digest cache could not vouch for) and their bytes.
    pub hashed_files: u64,
    pub hashed_bytes: u64,
}

/// What a stage's record says now.
enum Recorded {
    Missing,
    /// There, but not readable as a record of this bertpipe.
    Unreadable,
    Found(Box<Record>),
}

/// Where the chain is: the output identities of the stages decided so far.
#[derive(Default)]
struct Chain {
    /// Stages whose output is known now (up to date, or ran): its identity.
    identities: BTreeMap<String, String>,
    /// Dry run: stages that will (or may) run, with the identity their output had before.
    pending: BTreeMap<String, Option<String>>,
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
    crate::contract::interrupt::install();
    // A dry run changes no stage; it keeps what it hashed in the digest cache when no other run
    // holds the folder (and so never waits for one).
    let lock = match opts.dry_run {
        false => Some(lock::acquire(&exp.out, lock::Mode::Exclusive, opts.wait)?),
        true if exp.out.is_dir() => lock::acquire(&exp.out, lock::Mode::Exclusive, false).ok(),
        true => None,
    };
    let records = exp.out.join(STAGES_DIR);
    let mut digests = Digests::open(&records.join(DIGESTS), opts.quiet);
    let mut chain = Chain::default();
    let mut report = Report {
        experiment: exp.name.clone(),
        file: exp.file.clone(),
        out: exp.out.clone(),
        stages: Vec::new(),
        interrupted: false,
        hashed_files: 0,
        hashed_bytes: 0,
    };
    let mut failure: Option<anyhow::Error> = None;
    for stage in &exp.stages {
        if failure.is_some() {
            let mut entry = StageReport::of(stage, "not run", "an earlier stage did not finish".into());
            if let Recorded::Found(r) = read_record(&records, &stage.name) {
                entry.figures = r.figures;
            }
            report.stages.push(entry);
            continue;
        }
        let entry = match decide_and_run(exp, stage, opts, &records, &mut digests, &mut chain) {
            Ok((entry, stopped)) => {
                if let Some(e) = stopped {
                    report.interrupted = entry.status == "interrupted";
                    failure = Some(e);
                }
                entry
            }
            Err(e) => {
                // The chain could not even decide (an unreadable input, an output folder it
                // cannot write): the stage fails with that reason.
                let entry = StageReport::of(stage, "failed", format!("{e:#}"));
                failure = Some(e.context(format!("stage `{}` failed", stage.name)));
                entry
            }
        };
        report.stages.push(entry);
        // Kept after each stage, so a kill loses no hashing done before it.
        if lock.is_some() {
            digests.save(false)?;
        }
    }
    if lock.is_some() {
        digests.save(true)?;
    }
    report.hashed_files = digests.hashed_files;
    report.hashed_bytes = digests.hashed_bytes;
    if !opts.dry_run {
        write_reports(&report)?;
    }
    match failure {
        Some(e) if !report.interrupted => Err(e),
        _ => Ok(report),
    }
}

/// Decides whether `stage` is up to date and runs it when it is not. Returns its report and,
/// when the chain must stop there (the stage failed or was interrupted), the error to end with.
fn decide_and_run(
    exp: &Experiment,
    stage: &Stage,
    opts: &RunOptions,
    records: &Path,
    digests: &mut Digests,
    chain: &mut Chain,
) -> Result<(StageReport, Option<anyhow::Error>)> {
    check_writes(exp, stage)?;
    // What it reads from earlier stages: their outputs' identities. In a dry run a stage that
    // will run has none yet; its earlier identity stands in, and the reader "may run".
    let mut upstream = BTreeMap::new();
    let mut waits_on = None;
    for d in &stage.deps {
        match (chain.identities.get(d), chain.pending.get(d)) {
            (Some(id), _) => {
                upstream.insert(d.clone(), id.clone());
            }
            (None, Some(before)) => {
                waits_on.get_or_insert(d.clone());
                upstream.insert(d.clone(), before.clone().unwrap_or_default());
            }
            (None, None) => {
                bail!("`{}` reads `{d}`, which has not been decided (a bug in the chain's order)", stage.name)
            }
        }
    }
    let parts = key_parts(stage, upstream, digests)?;
    let key = parts.key();
    let recorded = read_record(records, &stage.name);
    let started = read_started(records, &stage.name);
    let forced = opts.force.iter().any(|f| f == "all" || f == &stage.name);
    let reason = match (&recorded, forced) {
        (_, true) => Some("--force".to_string()),
        (Recorded::Missing, _) if started.is_some() => Some("its last run did not finish".into()),
        (Recorded::Missing, _) => Some("not run before".into()),
        (Recorded::Unreadable, _) => Some("its record is unreadable (or written by another bertpipe)".into()),
        (Recorded::Found(r), _) if r.key != key => Some(parts.changed_since(&r.parts)),
        (Recorded::Found(r), _) => outputs_changed(exp, stage, r, digests)?,
    };
    let before = match &recorded {
        Recorded::Found(r) => Some(r.identity.clone()),
        _ => None,
    };
    let why = reason.clone().unwrap_or_else(|| "its key and outputs match its record".into());
    let mut entry = StageReport { key: key.clone(), ..StageReport::of(stage, "", why) };
    if let Recorded::Found(r) = &recorded {
        entry.figures = r.figures.clone();
    }
    match (reason, waits_on) {
        (None, Some(d)) => {
            entry.status = "may run".into();
            entry.reason = format!("only if `{d}` (which will run) writes something new");
            chain.pending.insert(stage.name.clone(), before);
            Ok((entry, None))
        }
        (None, None) => {
            let Recorded::Found(r) = recorded else { unreachable!("up to date means recorded") };
            entry.status = "up to date".into();
            entry.seconds = r.seconds;
            chain.identities.insert(stage.name.clone(), r.identity);
            Ok((entry, None))
        }
        (Some(_), _) if opts.dry_run => {
            entry.status = "will run".into();
            chain.pending.insert(stage.name.clone(), before);
            Ok((entry, None))
        }
        (Some(_), _) => {
            if !opts.quiet {
                eprintln!("== {} ({}): {}", stage.name, stage.kind.name(), entry.reason);
            }
            let resume = !forced && started.as_deref() == Some(key.as_str());
            let stopped = run_one(exp, stage, &key, parts, resume, forced, opts, records, digests, chain, &mut entry)?;
            Ok((entry, stopped))
        }
    }
}

/// Runs one stage: voids its record, marks it started, runs it, records its outputs.
#[allow(clippy::too_many_arguments)]
fn run_one(
    exp: &Experiment,
    stage: &Stage,
    key: &str,
    parts: KeyParts,
    resume: bool,
    forced: bool,
    opts: &RunOptions,
    records: &Path,
    digests: &mut Digests,
    chain: &mut Chain,
    entry: &mut StageReport,
) -> Result<Option<anyhow::Error>> {
    let started = Instant::now();
    let record_path = records.join(format!("{}.json", stage.name));
    let started_path = records.join(format!("{}.started.json", stage.name));
    std::fs::create_dir_all(records).with_context(|| format!("could not create '{}'", records.display()))?;
    // Void the record before anything is written: from here until the new record is renamed
    // into place the stage is "not finished", whatever happens to the process.
    match std::fs::remove_file(&record_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("could not remove '{}'", record_path.display()))
        }
        _ => {}
    }
    crate::contract::kill_point();
    crate::contract::write_file_atomic(&started_path, serde_json::to_string_pretty(&json!({"key": key}))?.as_bytes())?;
    let cx = RunCx { stage, exp, key, resume, forced, quiet: opts.quiet };
    let outcome = stage.spec.kind().run(&cx);
    entry.seconds = started.elapsed().as_secs_f64();
    match outcome {
        Ok(Outcome::Done(figures)) => {
            crate::contract::kill_point();
            let kind = stage.spec.kind();
            let outputs = output_digests(kind, &stage.out, digests)?;
            let identity = kind.identity(&stage.out, &outputs)?;
            let record = Record {
                stage: stage.name.clone(),
                kind: stage.kind.name().into(),
                key: key.to_string(),
                parts,
                seconds: entry.seconds,
                figures: figures.clone(),
                outputs,
                identity: identity.clone(),
            };
            crate::contract::write_file_atomic(
                &record_path,
                (serde_json::to_string_pretty(&record)? + "\n").as_bytes(),
            )?;
            let _ = std::fs::remove_file(&started_path);
            crate::contract::kill_point();
            entry.status = "ran".into();
            entry.figures = figures;
            chain.identities.insert(stage.name.clone(), identity);
            Ok(None)
        }
        Ok(Outcome::Interrupted) => {
            entry.status = "interrupted".into();
            Ok(Some(anyhow::anyhow!("interrupted during `{}`; run the same command to continue", stage.name)))
        }
        Err(e) => {
            entry.status = "failed".into();
            entry.reason = format!("{e:#}");
            Ok(Some(e.context(format!("stage `{}` failed", stage.name))))
        }
    }
}

/// Every path the stage is told to write lies under `OUT/<stage>/`, and that folder is a child
/// of `OUT` (stage names are checked when the file is read; this holds the line at run time).
fn check_writes(exp: &Experiment, stage: &Stage) -> Result<()> {
    let own = exp.out.join(&stage.name);
    if stage.out != own || !config::valid_stage_name(&stage.name) {
        bail!("stage `{}` would write '{}', outside '{}'", stage.name, stage.out.display(), exp.out.display());
    }
    for p in stage.spec.kind().writes(&stage.out) {
        if !p.starts_with(&own) {
            bail!(
                "stage `{}` would write '{}'; a stage writes only under '{}'",
                stage.name,
                p.display(),
                own.display()
            );
        }
    }
    Ok(())
}

/// The digest of every output file of a stage, by path relative to its folder.
fn output_digests(kind: &dyn stages::StageKind, out: &Path, digests: &mut Digests) -> Result<BTreeMap<String, String>> {
    let mut all = BTreeMap::new();
    for p in kind.outputs(out) {
        if !p.exists() {
            continue;
        }
        let base = p.strip_prefix(out).unwrap_or(&p).to_string_lossy().replace('\\', "/");
        for (rel, sha) in digests.tree(&p)? {
            let full = match (base.is_empty(), rel.is_empty()) {
                (true, _) => rel,
                (false, true) => base.clone(),
                (false, false) => format!("{base}/{rel}"),
            };
            all.insert(full, sha);
        }
    }
    Ok(all)
}

/// Why a stage whose key matches is not up to date after all: the first output that is not as
/// recorded. `None` when all are.
fn outputs_changed(exp: &Experiment, stage: &Stage, r: &Record, digests: &mut Digests) -> Result<Option<String>> {
    let now = output_digests(stage.spec.kind(), &stage.out, digests)?;
    let shown = |rel: &str| {
        let p = stage.out.join(rel);
        p.strip_prefix(exp.out.parent().unwrap_or(Path::new(""))).map(Path::to_path_buf).unwrap_or(p)
    };
    for (rel, sha) in &r.outputs {
        match now.get(rel) {
            None => return Ok(Some(format!("'{}' is missing", shown(rel).display()))),
            Some(s) if s != sha => return Ok(Some(format!("'{}' changed since it was written", shown(rel).display()))),
            _ => {}
        }
    }
    if let Some(rel) = now.keys().find(|k| !r.outputs.contains_key(*k)) {
        return Ok(Some(format!("'{}' appeared after it was written", shown(rel).display())));
    }
    Ok(None)
}

/// One task of a pipeline or eval stage, as a member of a task array (`bertpipe run … --stage
/// NAME --task-index I --task-count N`, with `scan` a pipeline's first phase): exactly
/// `pipeline scan` / `pipeline run` of the stage's pipeline, or `eval --task-index` of its
/// evaluation. The next plain run merges the tasks. Tasks share
/// `OUT/.lock` with one another, never with a whole run.
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
    check_writes(exp, stage)?;
    let p = match &stage.spec {
        Spec::Pipeline(p) => p,
        Spec::Eval(e) if !scan => {
            let _lock = lock::acquire(&exp.out, lock::Mode::Shared, false)?;
            let part = crate::onnx::eval::run_task(&e.options(&stage.out, quiet), task)?;
            if !quiet {
                eprintln!(
                    "`{name}` task {} of {}: {} rows; the next `bertpipe run {}` merges the tasks",
                    task.index,
                    task.count,
                    part.rows,
                    exp.file.display()
                );
            }
            return Ok(());
        }
        Spec::Eval(_) => bail!("--scan: `{name}` is an eval stage; only a pipeline stage has a scan phase"),
        _ => bail!(
            "--stage {name}: only pipeline and eval stages run as task arrays; `{name}` is a {} stage",
            stage.kind.name()
        ),
    };
    let _lock = lock::acquire(&exp.out, lock::Mode::Shared, false)?;
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

fn read_record(dir: &Path, stage: &str) -> Recorded {
    match std::fs::read(dir.join(format!("{stage}.json"))) {
        Err(_) => Recorded::Missing,
        Ok(b) => match serde_json::from_slice::<Record>(&b) {
            Ok(r) => Recorded::Found(Box::new(r)),
            Err(_) => Recorded::Unreadable,
        },
    }
}

fn read_started(dir: &Path, stage: &str) -> Option<String> {
    let v: Value = serde_json::from_slice(&std::fs::read(dir.join(format!("{stage}.started.json"))).ok()?).ok()?;
    v.get("key")?.as_str().map(str::to_string)
}

/// The parts of a stage's key.
fn key_parts(stage: &Stage, upstream: BTreeMap<String, String>, digests: &mut Digests) -> Result<KeyParts> {
    let mut inputs = BTreeMap::new();
    for p in &stage.inputs {
        inputs.insert(p.display().to_string(), digests.path(p)?);
    }
    Ok(KeyParts {
        version: env!("CARGO_PKG_VERSION").to_string(),
        kind: stage.kind.name().into(),
        config: sha256_bytes(&serde_json::to_vec(&stage.spec.canonical())?),
        upstream,
        inputs,
    })
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
    s.push_str(
        "\nStage keys (SHA-256 of version, kind, configuration, the content of what it reads by path, and the outputs of the stages it reads):\n\n",
    );
    for st in r.stages.iter().filter(|st| !st.key.is_empty()) {
        s.push_str(&format!("- `{}`: `{}`\n", st.stage, st.key.get(..16).unwrap_or(&st.key)));
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
    if r.hashed_bytes >= 64 << 20 {
        out.push(format!(
            "(hashed {} files, {:.1} MB, that the digest cache could not vouch for)",
            r.hashed_files,
            r.hashed_bytes as f64 / 1e6
        ));
    }
    out.join("\n")
}
