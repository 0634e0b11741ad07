//! `bertpipe run EXPERIMENT.yaml`: the stages of an experiment ([`config`]) run in dependency
//! order, each through exactly the library call its own command makes ([`stages`], one file per
//! kind), and only when something it depends on changed.
//!
//! **Keys from content.** A stage's key is the SHA-256 of bertpipe's version, its kind, its
//! resolved configuration, the paths its configuration names as inputs (a file's content, an
//! object's version; a folder only as a folder), and — for each stage it reads — the digest of
//! what that stage *produced* (its output's identity, [`stages::StageKind::identity`]), not of
//! how it was made. A stage re-run that writes the same output leaves the stages after it up to
//! date ("early cutoff"). File digests are cached by their stat data ([`digest`]), so an
//! unchanged tree costs a `stat` per file.
//!
//! **Read sets.** What a stage depends on outside `OUT` is what its run *actually read*, not
//! what its configuration declares: every input file its command opens, folder it lists and
//! object it fetches goes through [`crate::contract::reads`], which records them while the stage
//! runs (a task of an array records its own, merged when the stage finishes). The record keeps
//! that read set with each file's digest, each listing's names and each object's version, and
//! the stage is up to date only while every one of them is unchanged — a model's external data,
//! the corpus a vocabulary learns from, a hidden file a folder source reads, are inputs because
//! they were read, and a file no stage reads keys nothing. Files under `OUT` are not in read
//! sets: the stages that write them key their readers by their outputs.
//!
//! **Verified outputs.** When a stage finishes, `OUT/.stages/NAME.json` records its key, the
//! parts of the key, its read set, the digest of every output file, its identity, its time and
//! figures (written aside and renamed). A stage is up to date only when its key equals the
//! recorded one, its read set is unchanged *and* its outputs still have the recorded digests;
//! otherwise the first difference is the reason it runs. Starting a stage voids its record
//! first, so a stage that fails or is killed is never taken for finished.
//!
//! **Faults.** `OUT/.stages/NAME.started.json` holds the key of a run in progress: the same
//! chain run again resumes that stage (a training from its newest intact checkpoint, a pipeline
//! from its journal) instead of starting it over; `--force` starts it over. One run at a time
//! holds `OUT/.lock` ([`lock`]). A stage's output folder is `OUT/NAME/`, and every path it is
//! told to write is checked to lie under it; nothing outside `OUT` is written or removed.

pub mod config;
pub mod digest;
pub mod lock;
mod page;
pub mod stages;

use std::collections::{BTreeMap, BTreeSet};
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

/// Refuses an `out` that holds files and is no chain's folder (it has no `OUT/.stages/`): a chain
/// writes `report.json`, `report.md`, `report.html` and a folder per stage there, and would
/// overwrite a user's files of those names (`out: .`, or an unset variable in `--set out=`).
/// With `claim`, an `out` that passes becomes a chain's folder (`.stages/` is made), before
/// anything else is written there; called under `OUT/.lock`, so tasks of an array that start
/// together pass alike.
fn claim_out(out: &Path, claim: bool) -> Result<()> {
    let records = out.join(STAGES_DIR);
    if records.is_dir() {
        return Ok(());
    }
    let mut theirs: Vec<String> = match std::fs::read_dir(out) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != lock::LOCK_FILE)
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("could not list '{}'", out.display())),
    };
    if !theirs.is_empty() {
        theirs.sort();
        let shown = theirs.iter().take(5).map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
        let more = if theirs.len() > 5 { format!(" and {} more", theirs.len() - 5) } else { String::new() };
        bail!(
            "out: '{}' holds files no bertpipe chain wrote ({shown}{more}; it has no {STAGES_DIR}/): a chain writes report.json, report.md, report.html and a folder per stage there, and would overwrite files of those names. Name a new or empty folder as `out`",
            out.display()
        );
    }
    if claim {
        std::fs::create_dir_all(&records).with_context(|| format!("could not create '{}'", records.display()))?;
    }
    Ok(())
}

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
    /// Stop after this stage: the stages after it are not run (`--until`).
    pub until: Option<String>,
    /// Never fetch the pinned ONNX Runtime wheel when none is found (`--no-install`): a stage
    /// that needs one is then an error before any stage runs.
    pub no_install: bool,
}

impl RunOptions {
    fn env_cx(&self, alone: bool) -> stages::EnvCx {
        stages::EnvCx { install: !self.no_install, dry_run: self.dry_run, quiet: self.quiet, alone }
    }
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
    /// Per path the configuration names as an input: a file's digest, an object's version,
    /// `folder` for a folder (what is read in it is keyed by the read set), `missing`.
    pub inputs: BTreeMap<String, String>,
    /// What its result depends on outside the configuration and inputs
    /// ([`stages::StageKind::environment`]): `onnxruntime` (its version), `world_size`.
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
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
        for (what, now) in &self.environment {
            let was = before.environment.get(what).map_or("unknown", String::as_str);
            if was != now {
                return format!("{} changed ({was} → {now})", environment_name(what));
            }
        }
        if let Some(what) = before.environment.keys().find(|k| !self.environment.contains_key(*k)) {
            return format!("it no longer depends on {}", environment_name(what));
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

/// An environment part of a key, in words.
fn environment_name(what: &str) -> &str {
    match what {
        "onnxruntime" => "the ONNX Runtime version",
        "world_size" => "the number of training processes",
        other => other,
    }
}

/// `OUT/.stages/NAME.json`: a finished stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub stage: String,
    pub kind: String,
    pub key: String,
    pub parts: KeyParts,
    /// What the stage's run read outside `OUT`, as it was then.
    pub reads: ReadSet,
    pub seconds: f64,
    pub figures: Value,
    /// Every output file, by path relative to `OUT/<stage>/`, with its SHA-256.
    pub outputs: BTreeMap<String, String>,
    /// What stages reading this one see of it.
    pub identity: String,
}

/// What a stage's run read outside `OUT` ([`crate::contract::reads`]), with what each was.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadSet {
    /// Files read, by absolute path: their SHA-256 — or [`CHANGED_DURING_RUN`] for a file that
    /// changed between the moment it was opened and the moment it was hashed.
    pub files: BTreeMap<PathBuf, String>,
    /// Files looked for and not there.
    pub absent: BTreeSet<PathBuf>,
    /// Folders listed, by absolute path: the digest of their entries' names ([`digest::listing`]).
    pub listings: BTreeMap<PathBuf, String>,
    /// Objects read, by URL: their version ([`crate::storage::version_of`]).
    pub objects: BTreeMap<String, String>,
}

/// The digest recorded for a file that changed while the stage ran: it never matches a file's,
/// so the next run runs the stage again.
const CHANGED_DURING_RUN: &str = "changed while the stage ran";

impl ReadSet {
    /// What was recorded, digested now (right after the run): paths under `out` left out (the
    /// chain's own outputs), and files that are gone again (a run's own temporaries, such as an
    /// object spooled to a local file). A file whose `stat` differs from when it was opened
    /// changed under the run: it is recorded as such, not by the bytes found now.
    fn of(recorded: crate::contract::reads::Recorded, out: &Path, digests: &mut Digests) -> Result<ReadSet> {
        use crate::contract::reads::Stamp;
        let outside = |p: &Path| !p.starts_with(out);
        let mut moved = Vec::new();
        let mut files = Vec::new();
        for (p, stamp) in recorded.files.into_iter().filter(|(p, _)| outside(p)) {
            let now = Stamp::now(&p);
            match (stamp, now) {
                (_, None) => {}
                (Some(then), Some(now)) if then != now => moved.push(p),
                _ => files.push((p.display().to_string(), p)),
            }
        }
        let by_name: BTreeMap<String, PathBuf> = files.iter().cloned().collect();
        let mut files: BTreeMap<PathBuf, String> =
            digests.lookup_all(files)?.into_iter().map(|(name, sha)| (by_name[&name].clone(), sha)).collect();
        for p in moved {
            files.insert(p, CHANGED_DURING_RUN.into());
        }
        let absent = recorded.absent.into_iter().filter(|p| outside(p)).collect();
        let mut listings = BTreeMap::new();
        for p in recorded.listings.into_iter().filter(|p| outside(p)) {
            let d = digest::listing(&p)?;
            listings.insert(p, d);
        }
        Ok(ReadSet { files, absent, listings, objects: recorded.objects })
    }

    /// Adds what `other` (a task of an array) read, as it was when that task read it.
    fn merge(&mut self, other: ReadSet) {
        for (p, sha) in other.files {
            match self.files.get(&p) {
                // Two readings that disagree: the file changed in between.
                Some(mine) if mine != &sha => {
                    self.files.insert(p, CHANGED_DURING_RUN.into());
                }
                _ => {
                    self.files.insert(p, sha);
                }
            }
        }
        self.absent.extend(other.absent);
        self.listings.extend(other.listings);
        self.objects.extend(other.objects);
    }

    /// The first thing read that is not as it was, in words; `None` when all are.
    fn changed(&self, digests: &mut Digests) -> Result<Option<String>> {
        for (p, want) in &self.listings {
            if &digest::listing(p)? != want {
                return Ok(Some(format!("the files in '{}' changed", p.display())));
            }
        }
        if let Some(p) = self.absent.iter().find(|p| p.exists()) {
            return Ok(Some(format!("'{}' appeared (its last run looked for it and found none)", p.display())));
        }
        if let Some((p, _)) = self.files.iter().find(|(_, sha)| sha.as_str() == CHANGED_DURING_RUN) {
            return Ok(Some(format!("'{}' changed while its last run read it", p.display())));
        }
        if let Some(gone) = self.files.keys().find(|p| !p.is_file()) {
            return Ok(Some(format!("'{}', which it read, is gone", gone.display())));
        }
        let present: Vec<(String, PathBuf)> = self.files.keys().map(|p| (p.display().to_string(), p.clone())).collect();
        let now = digests.lookup_all(present)?;
        for (p, want) in &self.files {
            if now.get(&p.display().to_string()) != Some(want) {
                return Ok(Some(format!("'{}' changed", p.display())));
            }
        }
        for (url, want) in &self.objects {
            let remote = crate::storage::Remote::open(Path::new(url))?;
            match remote.version("")? {
                None => return Ok(Some(format!("'{url}', which it read, is gone"))),
                Some(v) if &v != want => return Ok(Some(format!("'{url}' changed"))),
                _ => {}
            }
        }
        Ok(None)
    }
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
    /// Each stage's environment, asked before the first stage runs ([`preflight`]).
    environments: BTreeMap<String, BTreeMap<String, String>>,
    /// Deciding for a stage run by itself ([`run_train_stage`]), not the whole chain.
    alone: bool,
}

/// Asks every stage the chain will run up to `--until` for its environment before any runs:
/// a stage that cannot run on this machine (no ONNX Runtime for an export's check or an eval,
/// and none may be installed) stops the chain before it has trained for minutes.
fn preflight(exp: &Experiment, opts: &RunOptions, chain: &mut Chain) -> Result<()> {
    let cx = opts.env_cx(false);
    for stage in &exp.stages {
        let env = stage
            .spec
            .kind()
            .environment(&cx)
            .with_context(|| format!("stage `{}` cannot run on this machine, so no stage was run", stage.name))?;
        chain.environments.insert(stage.name.clone(), env);
        if opts.until.as_deref() == Some(stage.name.as_str()) {
            break;
        }
    }
    Ok(())
}

/// Runs (or with `dry_run`, plans) an experiment. A failing stage stops the chain: its report
/// says `failed` and the error is returned after `report.json` is written.
pub fn run(exp: &Experiment, opts: &RunOptions) -> Result<Report> {
    for f in opts.force.iter().filter(|f| *f != "all") {
        exp.named_stage("--force", f)?;
    }
    if let Some(u) = &opts.until {
        exp.named_stage("--until", u)?;
    }
    crate::contract::interrupt::install();
    // A dry run changes no stage; it keeps what it hashed in the digest cache when no other run
    // holds the folder (and so never waits for one).
    claim_out(&exp.out, false)?;
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
    preflight(exp, opts, &mut chain)?;
    if lock.is_some() && !opts.dry_run {
        claim_out(&exp.out, true)?;
    }
    let mut failure: Option<anyhow::Error> = None;
    let mut until_passed = false;
    for stage in &exp.stages {
        if until_passed {
            let until = opts.until.as_deref().unwrap_or_default();
            let mut entry = StageReport::of(stage, "not run", format!("after `--until {until}`"));
            if let Recorded::Found(r) = read_record(&records, &stage.name) {
                entry.figures = r.figures;
            }
            report.stages.push(entry);
            continue;
        }
        until_passed = opts.until.as_deref() == Some(stage.name.as_str());
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

/// What the chain knows of a stage before it runs it ([`decide`]).
struct Decided {
    entry: StageReport,
    key: String,
    parts: KeyParts,
    /// Why it runs; `None` when its key, read set and outputs match its record.
    reason: Option<String>,
    /// A stage it reads that will run first (dry run only).
    waits_on: Option<String>,
    recorded: Recorded,
    /// The key of a run of it that started and did not finish.
    started: Option<String>,
    forced: bool,
    /// The identity its output had before (from its record).
    before: Option<String>,
}

impl Decided {
    /// Continue an unfinished run of the same key instead of starting over.
    fn resume(&self) -> bool {
        !self.forced && self.started.as_deref() == Some(self.key.as_str())
    }
}

/// Whether `stage` is up to date, and why not, from what the chain decided before it.
fn decide(
    exp: &Experiment,
    stage: &Stage,
    opts: &RunOptions,
    records: &Path,
    digests: &mut Digests,
    chain: &Chain,
) -> Result<Decided> {
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
    let environment = match chain.environments.get(&stage.name) {
        Some(e) => e.clone(),
        None => stage.spec.kind().environment(&opts.env_cx(chain.alone))?,
    };
    let recorded = read_record(records, &stage.name);
    // Values left to the record ([`stages::as_recorded`]): the record's, for deciding; if the
    // stage runs, the value it runs with.
    let (mut from_record, mut if_run) = (environment.clone(), environment);
    let mut deferred = false;
    for (what, v) in from_record.iter_mut() {
        if let Some(fallback) = v.strip_prefix(stages::AS_RECORDED) {
            deferred = true;
            if_run.insert(what.clone(), fallback.to_string());
            *v = match &recorded {
                Recorded::Found(r) => r.parts.environment.get(what).cloned().unwrap_or_else(|| fallback.to_string()),
                _ => fallback.to_string(),
            };
        }
    }
    let parts = key_parts(stage, upstream, from_record, digests)?;
    let key = parts.key();
    let started = read_started(records, &stage.name);
    let forced = opts.force.iter().any(|f| f == "all" || f == &stage.name);
    let reason = match (&recorded, forced) {
        (_, true) => Some("--force".to_string()),
        (Recorded::Missing, _) if started.as_deref() == Some(key.as_str()) => {
            Some("its last run did not finish".into())
        }
        (Recorded::Missing, _) if started.is_some() => {
            Some("its last run did not finish, and its key changed since (it starts over)".into())
        }
        (Recorded::Missing, _) => Some("not run before".into()),
        (Recorded::Unreadable, _) => Some("its record is unreadable (or written by another bertpipe)".into()),
        (Recorded::Found(r), _) if r.key != key => Some(parts.changed_since(&r.parts)),
        (Recorded::Found(r), _) => match r.reads.changed(digests)? {
            Some(why) => Some(why),
            None => outputs_changed(exp, stage, r, digests)?,
        },
    };
    // A stage that runs is keyed by what it runs with.
    let (key, parts) = match (&reason, deferred) {
        (Some(_), true) => {
            let parts = KeyParts { environment: if_run, ..parts };
            (parts.key(), parts)
        }
        _ => (key, parts),
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
    Ok(Decided { entry, key, parts, reason, waits_on, recorded, started, forced, before })
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
    let d = decide(exp, stage, opts, records, digests, chain)?;
    let resume = d.resume();
    let Decided { mut entry, key, parts, reason, waits_on, recorded, forced, before, .. } = d;
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
    crate::contract::reads::start();
    let outcome = stage.spec.kind().run(&cx);
    let recorded = crate::contract::reads::finish();
    entry.seconds = started.elapsed().as_secs_f64();
    match outcome {
        Ok(Outcome::Done(figures)) => {
            crate::contract::kill_point();
            let mut reads = ReadSet::of(recorded, &exp.out, digests)?;
            // A task array's members read in their own processes: their read sets, as they
            // were when each task read them.
            for (_, r) in task_reads(records, &stage.name) {
                reads.merge(r);
            }
            let kind = stage.spec.kind();
            let outputs = output_digests(kind, &stage.out, digests)?;
            let identity = kind.identity(&stage.out, &outputs)?;
            let record = Record {
                stage: stage.name.clone(),
                kind: stage.kind.name().into(),
                key: key.to_string(),
                parts,
                reads,
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
            remove_task_reads(records, &stage.name);
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
    let stage = exp.named_stage("--stage", name)?;
    check_writes(exp, stage)?;
    let p = match &stage.spec {
        Spec::Pipeline(p) => p,
        Spec::Eval(e) if !scan => {
            claim_out(&exp.out, false)?;
            let _lock = lock::acquire(&exp.out, lock::Mode::Shared, false)?;
            claim_out(&exp.out, true)?;
            crate::contract::reads::start();
            let part = crate::onnx::eval::run_task(&e.options(&stage.out, quiet), task);
            save_task_reads(exp, name, &format!("{}-of-{}", task.index, task.count))?;
            let part = part?;
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
            "--stage {name}: only pipeline and eval stages run as task arrays; `{name}` is {} {} stage{}",
            config::article(stage.kind.name()),
            stage.kind.name(),
            match stage.kind {
                Kind::Train => " (without --task-index it runs alone, under a launcher data-parallel)",
                _ => "",
            }
        ),
    };
    claim_out(&exp.out, false)?;
    let _lock = lock::acquire(&exp.out, lock::Mode::Shared, false)?;
    claim_out(&exp.out, true)?;
    crate::contract::reads::start();
    let tag = format!("{}{}-of-{}", if scan { "scan-" } else { "" }, task.index, task.count);
    if scan {
        let done = crate::pipeline::tasks::scan(p, task, 0, quiet);
        save_task_reads(exp, name, &tag)?;
        done?;
    } else {
        let opts = crate::pipeline::RunOptions { threads: 0, resume: false, overwrite: true, quiet, task: Some(task) };
        let s = crate::pipeline::run(p, &opts);
        save_task_reads(exp, name, &tag)?;
        let s = s?;
        if !quiet {
            eprintln!("{}", crate::pipeline::format_summary(&s));
        }
    }
    Ok(())
}

/// [`run_train_stage`] refused before any training: every rank knows (none waits in a
/// collective), so the job ends without aborting the others.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// What rank 0 decided for a train stage run as ranks ([`run_train_stage`]), sent to every rank.
#[derive(Debug, Serialize, Deserialize)]
enum RankVerdict {
    /// Rank 0 could not go on (its error, in words): every rank stops with it.
    Refused(String),
    UpToDate,
    Run {
        key: String,
        resume: bool,
        forced: bool,
    },
}

/// `bertpipe run EXPERIMENT --stage NAME` for a train stage: that stage alone, exactly as the
/// chain runs it (its key, `--force`, resuming an unfinished run, the record that tells the
/// next chain run it is up to date), and under a launcher (`srun -n 4`, `mpirun -n 4`) on every
/// rank, the training data-parallel as `bertpipe train` is there. The other stages run as
/// always, without a launcher: the stages it reads must be up to date (`bertpipe run EXPERIMENT
/// --until DEP` runs them), and the next plain `bertpipe run` takes it from its record and goes
/// on with the stages after it.
///
/// Rank 0 is the chain: it holds `OUT/.lock`, decides, marks the stage started, records what it
/// read and writes its record. Every other rank waits for rank 0's verdict (one all-gather of a
/// few bytes) and then trains; an error on rank 0 reaches them as that verdict, never as a hang.
pub fn run_train_stage(exp: &Experiment, name: &str, opts: &RunOptions) -> Result<StageReport> {
    let stage = exp.named_stage("--stage", name)?;
    if !matches!(stage.spec, Spec::Train(_)) {
        bail!(
            "--stage {name} without --task-index: only a train stage runs on its own (under a launcher, data-parallel); `{name}` is {} {} stage (a pipeline or eval stage runs as one task of an array with --task-index I --task-count N)",
            config::article(stage.kind.name()),
            stage.kind.name()
        );
    }
    if let Some(other) = opts.force.iter().find(|f| *f != name && *f != "all") {
        bail!("--force {other} with --stage {name}: only `{name}` runs; force the others in a plain `bertpipe run`");
    }
    let world = crate::train::dist::world()?;
    crate::contract::interrupt::install();
    // Every rank runs the same stage of the same experiment, or none does: compared before rank
    // 0 touches anything (voiding the record would lose a finished stage to a mistyped launch).
    if world.size > 1 {
        let fingerprint = sha256_bytes(
            &serde_json::to_vec(&json!({
                "experiment": exp.file,
                "out": exp.out,
                "stage": name,
                "config": stage.spec.canonical(),
                "force": opts.force,
            }))
            .expect("the stage's settings serialise"),
        );
        let all = crate::train::dist::gather_bytes(&world, fingerprint.as_bytes())?;
        if let Some(rank) = all.iter().position(|f| f != &all[0]) {
            let why = format!(
                "rank {rank} runs another experiment, stage, configuration or --force than rank 0 (`{}` --stage {name}); every rank must run the same command",
                exp.file.display()
            );
            return Err(Refused(format!("{}: {why}", world.describe())).into());
        }
    }
    // Rank 0 decides (holding the lock from here until the record is written); the other ranks
    // learn its verdict.
    let mut held = None;
    let mine = world.is_main().then(|| match decide_train_stage(exp, stage, opts) {
        Ok(decision) => {
            let verdict = decision.verdict();
            held = Some(decision);
            verdict
        }
        Err(e) => RankVerdict::Refused(format!("{e:#}")),
    });
    let verdict = match mine {
        Some(v) if world.size == 1 => v,
        mine => {
            let bytes = mine.map(|v| serde_json::to_vec(&v)).transpose()?.unwrap_or_default();
            let all = crate::train::dist::gather_bytes(&world, &bytes)?;
            serde_json::from_slice(&all[0]).context("rank 0's verdict is unreadable")?
        }
    };
    let entry = StageReport::of(stage, "", String::new());
    match verdict {
        RankVerdict::Refused(why) if world.size == 1 => Err(Refused(why).into()),
        RankVerdict::Refused(why) if world.is_main() => Err(Refused(format!("{}: {why}", world.describe())).into()),
        RankVerdict::Refused(_) => {
            Err(Refused(format!("{}: rank 0 refused `{name}` (its error says why)", world.describe())).into())
        }
        RankVerdict::UpToDate => {
            // Rank 0's entry has the recorded figures; the others' only the status.
            let mut entry = held.map_or(entry, |h| h.decided.entry);
            entry.status = "up to date".into();
            entry.reason = "its key and outputs match its record".into();
            Ok(entry)
        }
        RankVerdict::Run { key, resume, forced } => {
            let Some(TrainStageDecision { lock: _lock, records, mut digests, decided: d }) = held else {
                // Another rank: the training only. Rank 0 writes everything the chain keeps.
                let cx = RunCx { stage, exp, key: &key, resume, forced, quiet: true };
                return match stage.spec.kind().run(&cx)? {
                    Outcome::Done(figures) => Ok(StageReport { status: "ran".into(), figures, ..entry }),
                    Outcome::Interrupted => Ok(StageReport { status: "interrupted".into(), ..entry }),
                };
            };
            let mut entry = d.entry;
            if !opts.quiet {
                eprintln!("== {} ({}, {}): {}", stage.name, stage.kind.name(), world.describe(), entry.reason);
            }
            let mut chain = Chain::default();
            let stopped = run_one(
                exp,
                stage,
                &key,
                d.parts,
                resume,
                forced,
                opts,
                &records,
                &mut digests,
                &mut chain,
                &mut entry,
            )?;
            digests.save(true)?;
            match stopped {
                // Stopped on every rank at the same step, with a checkpoint: the same command
                // continues it.
                Some(_) if entry.status == "interrupted" => Ok(entry),
                Some(e) => Err(e),
                None => Ok(entry),
            }
        }
    }
}

/// What rank 0 holds from deciding a train stage until it has run and recorded it.
struct TrainStageDecision {
    lock: lock::OutLock,
    /// `OUT/.stages/`.
    records: PathBuf,
    digests: Digests,
    decided: Decided,
}

impl TrainStageDecision {
    fn verdict(&self) -> RankVerdict {
        let d = &self.decided;
        match d.reason {
            None => RankVerdict::UpToDate,
            Some(_) => RankVerdict::Run { key: d.key.clone(), resume: d.resume(), forced: d.forced },
        }
    }
}

/// Rank 0's decision for [`run_train_stage`]: every stage the train stage reads must be up to
/// date (decided as a dry run decides, nothing run); then the stage's own key, record and
/// unfinished run.
fn decide_train_stage(exp: &Experiment, stage: &Stage, opts: &RunOptions) -> Result<TrainStageDecision> {
    claim_out(&exp.out, false)?;
    let lock = lock::acquire(&exp.out, lock::Mode::Exclusive, opts.wait)?;
    claim_out(&exp.out, true)?;
    let records = exp.out.join(STAGES_DIR);
    let mut digests = Digests::open(&records.join(DIGESTS), opts.quiet);
    let mut chain = Chain::default();
    let plan = RunOptions { dry_run: true, quiet: true, ..Default::default() };
    let mut before = BTreeMap::new();
    for s in exp.stages.iter().take_while(|s| s.name != stage.name) {
        let (entry, _) = decide_and_run(exp, s, &plan, &records, &mut digests, &mut chain)?;
        before.insert(s.name.clone(), entry);
    }
    for dep in &stage.deps {
        let e = &before[dep];
        if e.status != "up to date" {
            bail!(
                "`{}` reads `{dep}`, which is not up to date ({}: {}); run it first without a launcher: `bertpipe run {} --until {dep}`",
                stage.name,
                e.status,
                e.reason,
                exp.file.display()
            );
        }
    }
    // The stage itself is keyed by the world it was started in.
    chain.alone = true;
    let decided = decide(exp, stage, opts, &records, &mut digests, &chain)?;
    Ok(TrainStageDecision { lock, records, digests, decided })
}

/// `OUT/.stages/NAME.reads/`: the read sets of a stage's task-array members, one file each.
fn task_reads_dir(records: &Path, stage: &str) -> PathBuf {
    records.join(format!("{stage}.reads"))
}

/// Stops the recording a task started and keeps what it read — digested now, in the task's
/// process, so the merge (hours later, on a scheduler) records what the task read, not what is
/// there then. Kept even when the task failed: a rerun of it overwrites the file.
fn save_task_reads(exp: &Experiment, stage: &str, tag: &str) -> Result<()> {
    let recorded = crate::contract::reads::finish();
    let reads = ReadSet::of(recorded, &exp.out, &mut Digests::default())?;
    let path = task_reads_dir(&exp.out.join(STAGES_DIR), stage).join(format!("{tag}.json"));
    crate::contract::write_file_atomic(&path, serde_json::to_string(&reads)?.as_bytes())
}

/// What the tasks of a stage's array recorded ([`save_task_reads`]), by task; an unreadable
/// file is an error naming it (a task whose reads are unknown cannot vouch for its output).
fn task_reads(records: &Path, stage: &str) -> Vec<(String, ReadSet)> {
    let Ok(entries) = std::fs::read_dir(task_reads_dir(records, stage)) else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let read = std::fs::read(e.path()).ok().and_then(|b| serde_json::from_slice::<ReadSet>(&b).ok());
        // An unreadable record reads as one that changed: its array is not trusted.
        let read = read.unwrap_or_else(|| {
            let mut r = ReadSet::default();
            r.files.insert(e.path(), CHANGED_DURING_RUN.into());
            r
        });
        out.push((name, read));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Why a task array left in a stage's folder cannot be merged as the stage's output: no task
/// recorded what it read (an array merged before — its tasks' reads are dropped then — or one
/// from an older bertpipe), or something a task read has changed since. `None` when every
/// task's reads are as they were.
pub(crate) fn task_array_stale(exp: &Experiment, stage: &str, digests: &mut Digests) -> Result<Option<String>> {
    let reads = task_reads(&exp.out.join(STAGES_DIR), stage);
    if reads.is_empty() {
        return Ok(Some("its tasks recorded no reads (merged before, or from another bertpipe)".into()));
    }
    for (task, r) in reads {
        if let Some(why) = r.changed(digests)? {
            return Ok(Some(format!("{why} since task {} read it", task.trim_end_matches(".json"))));
        }
    }
    Ok(None)
}

pub(crate) fn remove_task_reads(records: &Path, stage: &str) {
    let _ = std::fs::remove_dir_all(task_reads_dir(records, stage));
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
fn key_parts(
    stage: &Stage,
    upstream: BTreeMap<String, String>,
    environment: BTreeMap<String, String>,
    digests: &mut Digests,
) -> Result<KeyParts> {
    let mut inputs = BTreeMap::new();
    for p in &stage.inputs {
        inputs.insert(p.display().to_string(), digests.input(p)?);
    }
    Ok(KeyParts {
        version: crate::contract::BUILD.to_string(),
        kind: stage.kind.name().into(),
        config: sha256_bytes(&serde_json::to_vec(&stage.spec.canonical())?),
        upstream,
        inputs,
        environment,
    })
}

/// `OUT/report.json`, `OUT/report.md` and `OUT/report.html`. The page is drawn from the stages'
/// folders; a page that cannot be written is said on stderr and costs nothing else (the JSON
/// and Markdown reports hold every figure).
fn write_reports(r: &Report) -> Result<()> {
    std::fs::create_dir_all(&r.out)?;
    crate::contract::write_file_atomic(
        &r.out.join("report.json"),
        (serde_json::to_string_pretty(r)? + "\n").as_bytes(),
    )?;
    crate::contract::write_file_atomic(&r.out.join("report.md"), format_markdown(r).as_bytes())?;
    if let Err(e) = page::write(r) {
        eprintln!("warning: {} not written: {e:#}", r.out.join(crate::page::REPORT_PAGE).display());
    }
    Ok(())
}

/// The headline figures of a stage, in words.
fn figures_line(f: &Value) -> String {
    figures_with(f, |x| format!("{x:.4}"))
}

/// The headline figures in words, `num` writing each number that is not whole.
fn figures_with(f: &Value, num: impl Fn(f64) -> String) -> String {
    let Some(obj) = f.as_object() else { return String::new() };
    obj.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v.as_f64() {
            Some(x) if x.fract() != 0.0 => format!("{k} {}", num(x)),
            _ => format!("{k} {v}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `text` as Markdown text that shows as written: on one line, with every character that
/// Markdown (or the HTML a renderer passes through) would read as markup escaped.
fn markdown_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '|' | '!' | '&' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

pub fn format_markdown(r: &Report) -> String {
    let mut s = format!(
        "# {}\n\n{} → {}\n\n",
        markdown_text(&r.experiment),
        markdown_text(&r.file.display().to_string()),
        markdown_text(&r.out.display().to_string())
    );
    s.push_str("| stage | kind | status | seconds | figures | why |\n|---|---|---|---:|---|---|\n");
    for st in &r.stages {
        s.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {} |\n",
            st.stage,
            st.kind,
            st.status,
            st.seconds,
            markdown_text(&figures_line(&st.figures)),
            markdown_text(&st.reason)
        ));
    }
    s.push_str(
        "\nStage keys (SHA-256 of bertpipe's build, kind, configuration, the inputs it names, the outputs of the stages it reads, and what it runs on: the ONNX Runtime version, the number of training processes; a stage is up to date while every file it read is unchanged too):\n\n",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::reads::{Recorded, Stamp};

    #[test]
    fn a_file_changed_while_the_stage_ran_is_recorded_as_changed_not_by_its_new_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
        std::fs::write(&a, "read once").unwrap();
        std::fs::write(&b, "read, then rewritten").unwrap();
        let mut recorded = Recorded::default();
        recorded.files.insert(a.clone(), Stamp::now(&a));
        recorded.files.insert(b.clone(), Stamp::now(&b));
        recorded.absent.insert(dir.path().join("tokenizer_config.json"));
        // b changes after it was opened (same size: only the stamp's times tell; past a tick of
        // the file system's coarse clock).
        std::thread::sleep(std::time::Duration::from_millis(50));
        let before = std::fs::metadata(&b).unwrap().modified().unwrap();
        std::fs::write(&b, "read, then REWRITTEN").unwrap();
        std::fs::File::options().write(true).open(&b).unwrap().set_modified(before).unwrap();
        let out = dir.path().join("out");
        let mut digests = Digests::default();
        let set = ReadSet::of(recorded, &out, &mut digests).unwrap();
        assert_eq!(set.files[&b], CHANGED_DURING_RUN);
        assert_ne!(set.files[&a], CHANGED_DURING_RUN);
        let why = set.changed(&mut digests).unwrap().unwrap();
        assert!(why.contains("changed while its last run read it"), "{why}");
        // Without b, the set holds until the file looked for appears.
        let mut set = set;
        set.files.remove(&b);
        assert_eq!(set.changed(&mut digests).unwrap(), None);
        std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
        assert!(set.changed(&mut digests).unwrap().unwrap().contains("appeared"));
    }
}
