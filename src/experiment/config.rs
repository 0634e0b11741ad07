//! The experiment YAML: named stages, each a pipeline, vocabulary, training, export or
//! evaluation, wired to one another by name, resolved into typed configurations in the order
//! they run — with the same located errors (`file:line:col`, the names that would fit) as
//! every other configuration file. A stage's own settings are its command's: a pipeline or
//! training file (typed, `--set` applied), or for vocab, export and eval stages the settings
//! struct the command's flags are (`VocabSettings`, `ExportSettings`, `EvalSettings`). What
//! this file adds is the wiring — which stages and paths each stage reads — and the names:
//! a stage name is `[A-Za-z0-9_-]+`, as it names the folder `OUT/<stage>/`. What the chain sets
//! anyway a stage need not write: a pipeline's `name` (the stage's) and sink (Parquet; its path
//! is `OUT/<stage>`), a training's `output_dir` and, when wired, its `data`.
//!
//! One mistake, one error: a stage that reads one that failed to resolve (by name, or as the
//! nearest of a kind) is not checked — what it would report follows from that stage's errors —
//! and a note after the errors names it once ("note: export and eval not checked: they depend
//! on `data`"). A misspelt top-level key is not also a missing one; a stage whose name cannot
//! be a folder is still read (its own mistakes reported, what reads it checked). A problem in a
//! stage's `base:` file is located in that file, naming the stage that read it.
//!
//! ```yaml
//! name: imdb-sentiment
//! out: ../out/imdb-sentiment       # every stage writes OUT/<stage>/
//! stages:
//!   pretrain_data: imdb-pretrain.yaml
//!   pretrain: imdb-mlm.yaml         # data: the nearest earlier pipeline of pretrain shards
//!   data: imdb.yaml
//!   finetune: { base: imdb-finetune.yaml, init_from: pretrain, num_train_epochs: 2 }
//!   export: { optimize: false }     # from the nearest earlier train stage's final/
//!   eval: { split: test }           # the nearest earlier export, on its training data
//! ```

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::yaml::{self, Node, PathSeg, Pos};
use crate::config::{suggest, ConfigError, ConfigErrors, Pipeline, PipelineStep, YamlFile};
use crate::onnx::eval::EvalSettings;
use crate::onnx::export::ExportSettings;
use crate::train::config::TrainConfig;

use super::stages::eval::Eval;
use super::stages::export::Export;
use super::stages::vocab::Vocab;
use super::stages::StageKind;

/// The kinds of stage, one line each: the variant, the name a file uses (`kind: export`), the
/// type of its resolved configuration, and its file in `stages/` (which implements
/// `StageKind` for that type and reads the stage with `resolve`). This is the one place a new
/// kind is registered.
macro_rules! stage_kinds {
    ($($variant:ident = $name:literal, $spec:ty, $module:ident;)*) => {
        /// What a stage does: the command it runs.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Kind {
            $($variant,)*
        }

        pub const KINDS: &[&str] = &[$($name,)*];

        impl Kind {
            pub fn name(self) -> &'static str {
                KINDS[self as usize]
            }

            fn parse(s: &str) -> Option<Kind> {
                match s {
                    $($name => Some(Kind::$variant),)*
                    _ => None,
                }
            }

            /// Reads a stage of this kind (its module's `resolve`).
            fn resolve(self, ctx: &Ctx, r: &Raw, reads: &mut Reads, errs: &mut Errors) -> Option<Spec> {
                match self {
                    $(Kind::$variant => super::stages::$module::resolve(ctx, r, reads, errs),)*
                }
            }
        }

        /// A stage's resolved configuration, by kind.
        #[derive(Debug, Clone)]
        pub enum Spec {
            $($variant($spec),)*
        }

        impl Spec {
            /// The stage's kind, as the runner calls it.
            pub fn kind(&self) -> &dyn StageKind {
                match self {
                    $(Spec::$variant(s) => s,)*
                }
            }
        }
    };
}

stage_kinds! {
    Pipeline = "pipeline", Box<Pipeline>, pipeline;
    Vocab = "vocab", Vocab, vocab;
    Train = "train", Box<TrainConfig>, train;
    Export = "export", Export, export;
    Eval = "eval", Eval, eval;
}

/// One stage, resolved.
#[derive(Debug, Clone)]
pub struct Stage {
    pub name: String,
    /// Its place in the file.
    pub index: usize,
    pub kind: Kind,
    /// `OUT/<name>/`: the stage's whole output.
    pub out: PathBuf,
    /// The stages it reads, by name.
    pub deps: Vec<String>,
    /// Files named by path (not by a stage) whose contents feed the stage's key.
    pub inputs: Vec<PathBuf>,
    pub spec: Spec,
}

impl Spec {
    /// The resolved configuration as JSON: the part of the stage's key that its own settings
    /// make.
    pub fn canonical(&self) -> Value {
        self.kind().canonical()
    }
}

/// A whole experiment, its stages in the order they run (every stage after those it reads).
#[derive(Debug, Clone)]
pub struct Experiment {
    pub file: PathBuf,
    pub name: String,
    pub out: PathBuf,
    pub stages: Vec<Stage>,
}

impl Experiment {
    pub fn stage(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// The stage a flag names (`--stage`, `--force`, `--until`), or an error that lists the
    /// stages there are.
    pub fn named_stage(&self, flag: &str, name: &str) -> anyhow::Result<&Stage> {
        self.stage(name).ok_or_else(|| {
            let names: Vec<&str> = self.stages.iter().map(|s| s.name.as_str()).collect();
            anyhow::anyhow!("{flag} {name}: no such stage (stages: {})", names.join(", "))
        })
    }
}

/// "an" before a kind's name that starts with a vowel (`an export`, `an eval`), else "a".
pub(crate) fn article(kind: &str) -> &'static str {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// Whether `name` can name a stage: it becomes the folder `OUT/<name>/`, so only letters,
/// digits, `_` and `-` (no separators, no `.` or `..`, nothing absolute).
pub fn valid_stage_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What each kind's output is, for wires.
pub(super) fn output_of(kind: Kind, out: &Path, checkpoint: &str) -> PathBuf {
    match kind {
        Kind::Train => out.join(checkpoint),
        Kind::Export => out.join(super::stages::export::MODEL),
        Kind::Vocab => out.join("vocab.txt"),
        Kind::Pipeline | Kind::Eval => out.to_path_buf(),
    }
}

/// Keys of a stage mapping that are the experiment's, not the command's configuration.
const STAGE_KEYS: &[&str] = &["kind", "base"];
const TOP_KEYS: &[&str] = &["name", "out", "stages"];

/// A stage as read, before it is resolved.
pub(super) struct Raw {
    pub(super) name: String,
    pub(super) pos: Pos,
    /// A path to a YAML file, or an inline mapping.
    pub(super) node: Node,
    /// `--set NAME.rest=value` overrides, as `rest=value`.
    pub(super) overrides: Vec<String>,
    /// Where each of `overrides` is among the command line's `--set`s.
    pub(super) set_at: Vec<usize>,
}

impl Raw {
    /// The stage's mapping with its `--set STAGE.key=value` overrides applied, for the kinds read
    /// from the mapping itself (vocab, export, eval); pipelines and trainings take them through
    /// their own loaders instead, where they also reach into a `base:` file.
    pub(super) fn with_overrides(&self, errs: &mut Errors) -> Raw {
        let mut node = self.node.clone();
        for (i, o) in self.overrides.iter().enumerate() {
            // What a `--set` writes here — a value, a key it adds — is placed at that `--set`
            // (`Pos::of_override` of its place on the command line), and [`Errors`] reports a
            // problem with it against the argument as typed.
            let pos = self.set_at.get(i).map_or(self.pos, |&at| Pos::of_override(at));
            if let Err(message) = crate::config::apply_override(&mut node, o, pos) {
                errs.list.push(ConfigError { file: format!("--set {}.{o}", self.name), pos: None, message });
            }
        }
        Raw { name: self.name.clone(), pos: self.pos, node, overrides: Vec::new(), set_at: Vec::new() }
    }
}

/// Collects errors located in the experiment file — or, for what a `--set` wrote, in that
/// argument; for a line of a stage's `base:` file, in that file.
pub(super) struct Errors {
    pub(super) file: String,
    pub(super) list: Vec<ConfigError>,
    /// The command line's `--set`s, as typed: a position [`Pos::of_override`] made names one.
    pub(super) overrides: Vec<String>,
    /// The `base:` files read so far: a position whose [`Pos::doc`] is `n` is in the `n`-th.
    pub(super) bases: Vec<Base>,
}

/// A stage's `base:` file, as its errors name it.
pub(super) struct Base {
    pub(super) file: String,
    pub(super) stage: String,
    /// Where the experiment file names it.
    pub(super) at: Pos,
}

impl Errors {
    pub(super) fn at(&mut self, pos: Option<Pos>, message: String) {
        let e = ConfigError { file: self.file.clone(), pos, message };
        let e = self.placed(e);
        self.list.push(e);
    }

    /// Errors a stage's loader found. One about a node a `--set` wrote (a stage's settings are
    /// read from its mapping with them applied, [`Raw::with_overrides`]) is reported against
    /// that argument.
    pub(super) fn extend(&mut self, e: ConfigErrors) {
        for err in e.0 {
            let err = self.placed(err);
            self.list.push(err);
        }
    }

    /// `e`, or — when it is about a node a `--set` wrote — `e` against that argument; when it
    /// is about a line of a `base:` file, against that file.
    fn placed(&self, e: ConfigError) -> ConfigError {
        let e = self.in_base(e);
        match e.pos.and_then(Pos::override_index).and_then(|i| self.overrides.get(i)) {
            Some(o) => ConfigError { file: format!("--set {o}"), pos: None, message: e.message },
            None => e,
        }
    }

    /// A stage's own errors: those about a `--set` name it as typed, `--set STAGE.key=value`
    /// (the stage's loader saw only `key=value`); those about a line of its `base:` file are
    /// reported against that file.
    pub(super) fn extend_stage(&mut self, stage: &str, e: ConfigErrors) {
        for mut err in e.0 {
            if let Some(set) = err.file.strip_prefix("--set ") {
                err.file = format!("--set {stage}.{set}");
            }
            let err = self.in_base(err);
            self.list.push(err);
        }
    }

    /// `e`, or — when its position is a line of a `base:` file ([`Pos::doc`]) — `e` at that
    /// line of that file, saying which stage of the experiment read it: the stage's document is
    /// the base with the stage's keys set over it, and the loader that found the problem saw
    /// one document, not which of the two files each line is of.
    fn in_base(&self, e: ConfigError) -> ConfigError {
        let Some(pos) = e.pos.filter(|p| p.doc > 0) else { return e };
        let Some(b) = self.bases.get(pos.doc as usize - 1) else { return e };
        ConfigError {
            file: b.file.clone(),
            pos: Some(Pos { doc: 0, ..pos }),
            message: format!("{}: {}", self.base_of(&b.stage, b.at), e.message),
        }
    }

    /// The clause that says which stage read a `base:` file, and where the experiment names it:
    /// "base of stage `finetune` (exp.yaml:5:19)".
    fn base_of(&self, stage: &str, at: Pos) -> String {
        format!("base of stage `{stage}` ({}:{}:{})", self.file, at.line, at.col)
    }
}

/// Refuses a key the chain sets itself — a pipeline stage's `sink.path`, a training's
/// `output_dir`: always `OUT/<stage>` — where the experiment gives it, in the stage's mapping
/// or by `--set STAGE.KEY=…`, instead of ignoring it. (A stage's own file keeps its own: that
/// file also runs alone, where the key means what it says.)
pub(super) fn refuse_chain_key(r: &Raw, key: &str, errs: &mut Errors) {
    let message = || {
        format!(
            "{name}.{key}: a chain stage writes under OUT/{name}/ and the chain sets `{key}` itself; remove it (a stage's output is read by wiring to the stage)",
            name = r.name
        )
    };
    let mut node = Some(&r.node);
    let mut at = None;
    for part in key.split('.') {
        match node.and_then(|n| map_get(n, part)) {
            Some((n, p)) => (node, at) = (Some(n), Some(p)),
            None => (node, at) = (None, None),
        }
    }
    if let Some(pos) = at {
        errs.at(Some(pos), message());
    }
    for (i, o) in r.overrides.iter().enumerate() {
        if o.split_once('=').is_some_and(|(k, _)| k.trim() == key) {
            errs.at(Some(r.set_at.get(i).map_or(r.pos, |&at| Pos::of_override(at))), message());
        }
    }
}

pub(super) fn map_get<'a>(node: &'a Node, key: &str) -> Option<(&'a Node, Pos)> {
    let Node::Map(entries, _) = node else { return None };
    entries.iter().find(|(k, _, _)| k == key).map(|(_, p, v)| (v, *p))
}

pub(super) fn as_str(node: &Node) -> Option<String> {
    match node {
        Node::Scalar(Value::String(s), _) => Some(s.clone()),
        _ => None,
    }
}

/// Relative to `base`, absolute and free of `..` (as every configuration path is).
pub(super) fn absolute(path: &str, base: &Path) -> PathBuf {
    let mut p = PathBuf::from(path);
    crate::config::resolve_path(&mut p, base);
    p
}

/// Reads, overrides, wires and resolves an experiment file; every problem at once.
pub fn load(path: &Path, overrides: &[String]) -> Result<Experiment, ConfigErrors> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError { file: file.clone(), pos: None, message: format!("could not read: {e}") }])
    })?;
    let root = yaml::parse(&text)
        .map_err(|e| ConfigErrors(vec![ConfigError { file: file.clone(), pos: Some(e.pos), message: e.message }]))?;
    let base = std::path::absolute(path.parent().unwrap_or(Path::new("."))).unwrap_or_default();
    let mut errs = Errors { file: file.clone(), list: Vec::new(), overrides: overrides.to_vec(), bases: Vec::new() };
    let Node::Map(entries, _) = &root else {
        errs.at(Some(root.pos()), "an experiment must be a mapping with name, out and stages".into());
        return Err(ConfigErrors(errs.list));
    };
    // A misspelt key (`outt:`) is the one mistake: the key it was meant to be is not reported
    // missing as well.
    let mut meant: Vec<&str> = Vec::new();
    for (k, pos, _) in entries {
        if !TOP_KEYS.contains(&k.as_str()) {
            let fit = suggest(k, TOP_KEYS);
            let hint = fit.as_deref().map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
            errs.at(Some(*pos), format!("unknown top-level key `{k}`{hint} (valid: {})", TOP_KEYS.join(", ")));
            meant.extend(TOP_KEYS.iter().copied().filter(|t| fit.as_deref() == Some(*t)));
        }
    }
    let mut raws = read_stages(&root, meant.contains(&"stages"), &mut errs);
    let mut top = Top {
        name: map_get(&root, "name").and_then(|(n, _)| as_str(n)).unwrap_or_default(),
        out: map_get(&root, "out").and_then(|(n, p)| Some((as_str(n)?, Some(p)))),
    };
    apply_sets(overrides, &mut raws, &mut top, &mut errs);
    if top.name.is_empty() && !meant.contains(&"name") {
        errs.at(Some(root.pos()), "missing `name`".into());
    }
    // Without a usable `out` (its error recorded) the stages are still read, under a stand-in
    // folder, so that their own mistakes are reported with it rather than one run later.
    let out = out_folder(&top, &base, root.pos(), meant.contains(&"out"), &mut errs);
    let usable = out.is_some();
    let out = out.unwrap_or_else(|| base.join("out"));
    let stages = resolve_stages(&raws, &file, &base, &out, &mut errs).map_err(ConfigErrors::sorted)?;
    if !errs.list.is_empty() || !usable {
        return Err(ConfigErrors(errs.list).sorted());
    }
    Ok(Experiment { file: path.to_path_buf(), name: top.name, out, stages })
}

/// The experiment's own keys as read and overridden: its name, and `out` with where it was
/// written (`None`: by `--set`, relative to the current directory).
struct Top {
    name: String,
    out: Option<(String, Option<Pos>)>,
}

/// The `stages:` mapping, each stage as read; a name that cannot be a folder is an error.
/// `misspelt`: a misspelt top-level key meant `stages` (reported already, not again as missing).
fn read_stages(root: &Node, misspelt: bool, errs: &mut Errors) -> Vec<Raw> {
    let mut raws: Vec<Raw> = Vec::new();
    match map_get(root, "stages") {
        Some((Node::Map(stages, _), _)) => {
            let names: Vec<&str> = stages.iter().map(|(k, _, _)| k.as_str()).collect();
            for (k, pos, node) in stages {
                if !valid_stage_name(k) {
                    // A name fit for a folder, when one is near and not another stage's.
                    let fit = folder_name(k);
                    let hint = if fit.is_empty() || names.contains(&fit.as_str()) {
                        String::new()
                    } else {
                        format!(", did you mean `{fit}`?")
                    };
                    errs.at(
                        Some(*pos),
                        format!(
                            "stage name `{k}`: use letters, digits, `_` and `-` only{hint} (a stage writes the folder OUT/<name>/, so a name cannot be a path)"
                        ),
                    );
                }
                // Read all the same (under a stand-in folder, `Ctx::stage_out`): its own
                // mistakes are reported with its name's, and the stages that read it find it —
                // rather than "no train stage before it" for the export after a misnamed one.
                raws.push(Raw {
                    name: k.clone(),
                    pos: *pos,
                    node: node.clone(),
                    overrides: Vec::new(),
                    set_at: Vec::new(),
                });
            }
            if raws.is_empty() {
                errs.at(Some(root.pos()), "`stages` is empty".into());
            }
        }
        // `stages:` with nothing after it.
        Some((Node::Scalar(Value::Null, pos), _)) => errs.at(Some(*pos), "`stages` is empty".into()),
        Some((other, _)) => errs.at(Some(other.pos()), "`stages` must be a mapping of stage names".into()),
        None if misspelt => {}
        None => errs.at(Some(root.pos()), "missing `stages`".into()),
    }
    raws
}

/// `name` made a stage name: each run of other characters one `_`, none at either end
/// (`fine tune` → `fine_tune`, `../x` → `x`); empty when nothing of it is left.
fn folder_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

/// `--set STAGE.key=value` reaches into a stage; `--set out=…` / `name=…` the experiment.
fn apply_sets(overrides: &[String], raws: &mut [Raw], top: &mut Top, errs: &mut Errors) {
    let stage_names: Vec<String> = raws.iter().map(|r| r.name.clone()).collect();
    for (i, o) in overrides.iter().enumerate() {
        let Some((key, value)) = o.split_once('=') else {
            errs.list.push(ConfigError { file: format!("--set {o}"), pos: None, message: "expected key=value".into() });
            continue;
        };
        let key = key.trim();
        let (head, rest) = match key.find(['.', '[']) {
            Some(i) => (&key[..i], key[i..].trim_start_matches('.')),
            None => (key, ""),
        };
        match (head, rest) {
            ("out", "") => top.out = Some((value.trim().to_string(), None)),
            ("name", "") => top.name = value.trim().to_string(),
            (stage, rest) if !rest.is_empty() && stage_names.iter().any(|n| n == stage) => {
                let raw = raws.iter_mut().find(|r| r.name == stage).expect("a known stage");
                raw.overrides.push(format!("{rest}={value}"));
                raw.set_at.push(i);
            }
            (stage, "") if stage_names.iter().any(|n| n == stage) => {
                errs.list.push(ConfigError {
                    file: format!("--set {o}"),
                    pos: None,
                    message: format!(
                        "`{stage}` is a stage: --set sets one of its keys, `--set {stage}.KEY=VALUE` (a whole stage is set in the experiment file)"
                    ),
                });
            }
            _ => {
                let names: Vec<&str> = stage_names.iter().map(String::as_str).chain(["out", "name"]).collect();
                let hint = suggest(head, &names).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
                errs.list.push(ConfigError {
                    file: format!("--set {o}"),
                    pos: None,
                    message: format!(
                        "`{head}` is not a stage{hint} (stages: {}); write STAGE.key=value",
                        stage_names.join(", ")
                    ),
                });
            }
        }
    }
}

/// `out`, absolute: relative to the experiment file, or to the current directory when `--set`
/// gave it. The records, the lock and the digest cache live beside the outputs, on a local file
/// system; a bucket is for a pipeline's shards (`bertpipe pipeline run` with a bucket
/// `sink.path`), not for a chain's folder.
/// `misspelt`: a misspelt top-level key meant `out` (reported already, not again as missing).
fn out_folder(top: &Top, base: &Path, root: Pos, misspelt: bool, errs: &mut Errors) -> Option<PathBuf> {
    let Some((out, at)) = &top.out else {
        if !misspelt {
            errs.at(Some(root), "missing `out` (the folder every stage writes under)".into());
        }
        return None;
    };
    if out.contains("://") {
        let message = format!(
            "out: '{out}' is object storage; an experiment's `out` must be a local folder (its records and lock live there). Write shards to a bucket with `bertpipe pipeline run`, or sync OUT there after the run"
        );
        match at {
            None => errs.list.push(ConfigError { file: format!("--set out={out}"), pos: None, message }),
            Some(pos) => errs.at(Some(*pos), message),
        }
        return None;
    }
    if out.trim().is_empty() {
        // An unset shell variable (`--set out=$OUT`) would make the current folder the output.
        let message =
            "out is empty: name the folder every stage writes under (an unset shell variable in `--set out=$VAR`?)"
                .to_string();
        match at {
            None => errs.list.push(ConfigError { file: format!("--set out={out}"), pos: None, message }),
            Some(pos) => errs.at(Some(*pos), message),
        }
        return None;
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| base.to_path_buf());
    Some(absolute(out, if at.is_none() { &cwd } else { base }))
}

/// Every stage resolved, each after those it names (file order where the wires allow, so a
/// wire may point forwards); a cycle is an error.
fn resolve_stages(
    raws: &[Raw],
    file: &str,
    base: &Path,
    out: &Path,
    errs: &mut Errors,
) -> Result<Vec<Stage>, ConfigErrors> {
    // Kinds first: wires are checked against them.
    let kinds: Vec<Option<Kind>> = raws.iter().map(|r| stage_kind(r, base, errs)).collect();
    let known: Vec<(String, Kind, Pos)> =
        raws.iter().zip(&kinds).filter_map(|(r, k)| Some((r.name.clone(), (*k)?, r.pos))).collect();
    let order = match resolve_order(raws, &known) {
        Ok(o) => o,
        Err(cycle) => {
            let pos = raws.iter().find(|r| r.name == cycle[0]).map(|r| r.pos);
            errs.at(pos, format!("stages form a cycle: {}", cycle.join(" → ")));
            return Err(ConfigErrors(std::mem::take(&mut errs.list)));
        }
    };
    let mut stages: Vec<Stage> = Vec::new();
    // Stages that did not resolve, or read one that did not — first those whose kind could not
    // be told (one may be what a later stage reads, by name or as the nearest of its kind: the
    // one a misspelt `kind:` was suggested, else any).
    let mut tainted: Vec<Tainted> = raws
        .iter()
        .zip(&kinds)
        .enumerate()
        .filter(|(_, (_, k))| k.is_none())
        .map(|(i, (r, _))| {
            // The kind a misspelt `kind:` was suggested — or, without one, a misspelt name.
            let given = match map_get(&r.node, "kind") {
                Some((k, _)) => as_str(k),
                None => Some(r.name.clone()),
            };
            let meant = given.and_then(|k| suggest(&k, KINDS)).and_then(|k| Kind::parse(&k));
            Tainted { name: r.name.clone(), kind: meant, index: i, roots: vec![r.name.clone()] }
        })
        .collect();
    // The stages left unchecked because they read a tainted one: (place, name, the stages whose
    // errors they wait on).
    let mut unchecked: Vec<(usize, String, Vec<String>)> = Vec::new();
    for i in order {
        let (r, Some(kind)) = (&raws[i], kinds[i]) else { continue };
        let before = errs.list.len();
        let (stage, leaned_on) = {
            let ctx = Ctx {
                file,
                base,
                out,
                known: &known,
                index: i,
                done: &stages,
                tainted: &tainted,
                leaned_on: RefCell::new(Vec::new()),
            };
            let stage = resolve_stage(&ctx, r, kind, errs);
            (stage, ctx.leaned_on.into_inner())
        };
        if !leaned_on.is_empty() {
            // It reads a stage that failed (or read one that did): what it would add — `no train
            // stage before it` when the train stage had an error, a training's `data:` falling
            // back to its file's own path when its pipeline had one — follows from that stage's
            // errors, which say what to fix, once. It is checked when they are fixed.
            errs.list.truncate(before);
            let mut roots: Vec<String> = Vec::new();
            for t in tainted.iter().filter(|t| leaned_on.contains(&t.name)) {
                for n in &t.roots {
                    if !roots.contains(n) {
                        roots.push(n.clone());
                    }
                }
            }
            unchecked.push((i, r.name.clone(), roots.clone()));
            tainted.push(Tainted { name: r.name.clone(), kind: Some(kind), index: i, roots });
        } else if stage.is_none() {
            tainted.push(Tainted { name: r.name.clone(), kind: Some(kind), index: i, roots: vec![r.name.clone()] });
        }
        if let Some(s) = stage {
            stages.push(s);
        }
    }
    // Once per group of stages waiting on the same ones, after the problems: not one of them.
    if !errs.list.is_empty() {
        unchecked.sort_by_key(|(i, _, _)| *i);
        let mut groups: Vec<(Vec<String>, Vec<String>)> = Vec::new();
        for (_, name, roots) in unchecked {
            match groups.iter_mut().find(|(r, _)| *r == roots) {
                Some((_, names)) => names.push(name),
                None => groups.push((roots, vec![name])),
            }
        }
        for (roots, names) in groups {
            errs.list.push(ConfigError::note(not_checked(&names, &roots)));
        }
    }
    // The run order comes from what each stage was resolved to read, not from the wires named
    // in the file alone: a wire found only inside a stage's own file (a tokenize step's
    // `vocab: STAGE` in a pipeline file) still puts that stage first.
    match run_order(&stages) {
        Ok(order) => {
            let mut slots: Vec<Option<Stage>> = stages.into_iter().map(Some).collect();
            Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
        }
        Err(cycle) => {
            let pos = raws.iter().find(|r| r.name == cycle[0]).map(|r| r.pos);
            errs.at(pos, format!("stages form a cycle: {}", cycle.join(" → ")));
            Err(ConfigErrors(std::mem::take(&mut errs.list)))
        }
    }
}

/// The note for stages left unchecked: "finetune, export and eval not checked: they depend on
/// `data`".
fn not_checked(names: &[String], roots: &[String]) -> String {
    fn and(items: Vec<String>) -> String {
        match items.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => items.concat(),
        }
    }
    let roots = and(roots.iter().map(|r| format!("`{r}`")).collect());
    let who = if names.len() == 1 { "it depends" } else { "they depend" };
    format!("{} not checked: {who} on {roots}", and(names.to_vec()))
}

/// A stage that did not resolve, or read one that did not.
pub(super) struct Tainted {
    pub(super) name: String,
    /// `None`: its kind could not be told (a misspelt `kind:` counts as the one suggested).
    pub(super) kind: Option<Kind>,
    /// Its place in the file.
    pub(super) index: usize,
    /// The stages whose own errors it follows from: itself when it failed on its own.
    pub(super) roots: Vec<String>,
}

/// Resolved stages in run order: each after every stage it reads, otherwise as they are.
fn run_order(stages: &[Stage]) -> Result<Vec<usize>, Vec<String>> {
    let deps: Vec<Vec<usize>> = stages
        .iter()
        .map(|s| s.deps.iter().filter_map(|d| stages.iter().position(|x| &x.name == d)).collect())
        .collect();
    let names: Vec<String> = stages.iter().map(|s| s.name.clone()).collect();
    topological(&deps, &names)
}

/// A stage's kind: its `kind:` key, else its name when that is a kind, else what its file or
/// mapping holds (`source` → pipeline, `task` → train).
fn stage_kind(r: &Raw, base: &Path, errs: &mut Errors) -> Option<Kind> {
    if let Some((k, pos)) = map_get(&r.node, "kind") {
        let s = as_str(k).unwrap_or_default();
        return Kind::parse(&s).or_else(|| {
            let hint = suggest(&s, KINDS).map(|x| format!(", did you mean `{x}`?")).unwrap_or_default();
            errs.at(Some(pos), format!("{}.kind: unknown kind `{s}`{hint} (valid: {})", r.name, KINDS.join(", ")));
            None
        });
    }
    if let Some(k) = Kind::parse(&r.name) {
        return Some(k);
    }
    let doc = match (&r.node, map_get(&r.node, "base")) {
        (Node::Scalar(Value::String(p), _), _) => read_doc(&absolute(p, base), errs, r.pos, &r.name, None)?,
        (_, Some((b, _))) => {
            read_doc(&absolute(&as_str(b).unwrap_or_default(), base), errs, r.pos, &r.name, Some(b.pos()))?
        }
        (node, None) => node.clone(),
    };
    if map_get(&doc, "source").is_some() || map_get(&doc, "steps").is_some() {
        Some(Kind::Pipeline)
    } else if map_get(&doc, "task").is_some() {
        Some(Kind::Train)
    } else {
        let kinds = KINDS.join(" | ");
        let message = match suggest(&r.name, KINDS) {
            // A name one letter or two from a kind's (`exprot`) is that kind's, misspelt.
            Some(k) => format!(
                "stage `{}`: cannot tell what it is; did you mean `{k}`? (a stage is named after its kind, or says `kind: {kinds}`)",
                r.name
            ),
            None => {
                format!("stage `{}`: cannot tell what it is; name it after its kind or add `kind: {kinds}`", r.name)
            }
        };
        errs.at(Some(r.pos), message);
        None
    }
}

/// A stage's file, or (`base_at`: where the experiment names it) its `base:` file: a syntax
/// error is at its line of that file, and for a base says which stage read it.
fn read_doc(path: &Path, errs: &mut Errors, pos: Pos, stage: &str, base_at: Option<Pos>) -> Option<Node> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            errs.at(Some(pos), format!("stage `{stage}`: could not read '{}': {e}", path.display()));
            return None;
        }
    };
    match yaml::parse(&text) {
        Ok(n) => Some(n),
        Err(e) => {
            let message = match base_at {
                Some(at) => format!("{}: {}", errs.base_of(stage, at), e.message),
                None => e.message,
            };
            errs.list.push(ConfigError { file: path.display().to_string(), pos: Some(e.pos), message });
            None
        }
    }
}

/// What resolving one stage can see.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
    pub(super) base: &'a Path,
    pub(super) out: &'a Path,
    /// Every stage whose kind is known: (name, kind, position).
    pub(super) known: &'a [(String, Kind, Pos)],
    /// This stage's place in the file.
    pub(super) index: usize,
    /// The stages resolved so far (those before this one in the file).
    pub(super) done: &'a [Stage],
    /// The stages that did not resolve, or read one that did not.
    pub(super) tainted: &'a [Tainted],
    /// The tainted stages this one reads (by name, or as the nearest of a kind): its errors then
    /// follow from theirs.
    pub(super) leaned_on: RefCell<Vec<String>>,
}

impl Ctx<'_> {
    /// Whether this stage reads a tainted stage (so far).
    pub(super) fn leans(&self) -> bool {
        !self.leaned_on.borrow().is_empty()
    }

    fn lean_on(&self, name: &str) {
        let mut on = self.leaned_on.borrow_mut();
        if !on.iter().any(|n| n == name) {
            on.push(name.to_string());
        }
    }

    /// `value` at `key` names a stage (of one of `want`) or is a path. A bare word that is
    /// neither a stage nor an existing path is an unknown stage, with the names that would fit.
    pub(super) fn wire(
        &self,
        stage: &str,
        key: &str,
        value: &str,
        pos: Pos,
        want: &[Kind],
        errs: &mut Errors,
    ) -> Option<Wire> {
        let value = named(self.known, value).map_or(value, |(n, _, _)| n.as_str());
        if self.tainted.iter().any(|t| t.name == value) {
            self.lean_on(value);
            if !self.known.iter().any(|(n, _, _)| n == value) {
                // Its kind could not be told (that is its error): nothing to check the wire by.
                return None;
            }
        }
        if let Some((n, k, _)) = self.known.iter().find(|(n, _, _)| n == value) {
            if n == stage {
                errs.at(Some(pos), format!("{stage}.{key}: a stage cannot read itself"));
                return None;
            }
            if !want.contains(k) {
                let fits: Vec<&str> =
                    self.known.iter().filter(|(_, k, _)| want.contains(k)).map(|(n, _, _)| n.as_str()).collect();
                let kinds: Vec<&str> = want.iter().map(|k| k.name()).collect();
                errs.at(
                    Some(pos),
                    format!(
                        "{stage}.{key}: `{value}` is {} {} stage; {key} must name {} {} stage{}",
                        article(k.name()),
                        k.name(),
                        article(kinds[0]),
                        kinds.join(" or "),
                        if fits.is_empty() { String::new() } else { format!(" ({})", fits.join(", ")) }
                    ),
                );
                return None;
            }
            return Some(Wire::Stage(n.clone()));
        }
        let path = absolute(value, self.base);
        let looks_like_a_name = !value.contains(['/', '.']) && !path.exists();
        if looks_like_a_name {
            let names: Vec<&str> = self.known.iter().map(|(n, _, _)| n.as_str()).collect();
            let hint = suggest(value, &names).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
            errs.at(
                Some(pos),
                format!("{stage}.{key}: no stage `{value}` and no such path{hint} (stages: {})", names.join(", ")),
            );
            return None;
        }
        Some(Wire::Path(path))
    }

    /// `key` of the stage's mapping as what the stage reads: the output of the stage of kind
    /// `want` it names (a dependency) or a path (an input). `Some(None)` when the key is not
    /// there; `None` when it is wrong (the error recorded).
    pub(super) fn read_wire(
        &self,
        r: &Raw,
        key: &str,
        want: Kind,
        deps: &mut Vec<String>,
        inputs: &mut Vec<PathBuf>,
        errs: &mut Errors,
    ) -> Option<Option<PathBuf>> {
        let Some((value, pos)) = map_get(&r.node, key).and_then(|(n, p)| Some((as_str(n)?, p))) else {
            return Some(None);
        };
        Some(Some(match self.wire(&r.name, key, &value, pos, &[want], errs)? {
            Wire::Stage(n) => {
                let p = output_of(want, &self.stage_out(&n), "final");
                deps.push(n);
                p
            }
            Wire::Path(p) => {
                inputs.push(p.clone());
                p
            }
        }))
    }

    /// The nearest stage before this one in the file, of kind `kind`, passing `ok`. A tainted
    /// stage of the kind (or of a kind not told) at or after it — one that may have been the
    /// nearest — marks this stage as leaning on it.
    pub(super) fn nearest(&self, kind: Kind, ok: impl Fn(&Stage) -> bool) -> Option<&Stage> {
        let found =
            self.done.iter().filter(|s| s.index < self.index && s.kind == kind && ok(s)).max_by_key(|s| s.index);
        let from = found.map(|s| s.index);
        for t in self.tainted {
            if t.kind.is_none_or(|k| k == kind) && t.index < self.index && from.is_none_or(|f| t.index >= f) {
                self.lean_on(&t.name);
            }
        }
        found
    }

    pub(super) fn stage_out(&self, name: &str) -> PathBuf {
        // A name that cannot be a folder is an error already; the stage is read under one its
        // name cannot lead out of `out` (nothing runs: the file has an error).
        match valid_stage_name(name) {
            true => self.out.join(name),
            false => self.out.join(format!("{}_", folder_name(name))),
        }
    }
}

pub(super) enum Wire {
    Stage(String),
    Path(PathBuf),
}

/// The stage's configuration document: its file, or its `base` file with the mapping's keys
/// set over it, or the mapping itself; and the folder its relative paths are relative to.
pub(super) fn stage_doc(ctx: &Ctx, r: &Raw, reserved: &[&str], errs: &mut Errors) -> Option<(Node, String, PathBuf)> {
    let (mut doc, file, base) = match (&r.node, map_get(&r.node, "base")) {
        (Node::Scalar(Value::String(p), _), _) => {
            let path = absolute(p, ctx.base);
            let doc = read_doc(&path, errs, r.pos, &r.name, None)?;
            return Some((doc, path.display().to_string(), path.parent().unwrap_or(Path::new("")).to_path_buf()));
        }
        (_, Some((b, _))) => {
            let path = absolute(&as_str(b).unwrap_or_default(), ctx.base);
            let mut doc = read_doc(&path, errs, r.pos, &r.name, Some(b.pos()))?;
            // The document is the base with the mapping's keys set over it: each position of
            // the base says it is of that file ([`Errors::in_base`] reports a problem there
            // against the base, at its own line), the rest are the experiment file's.
            errs.bases.push(Base { file: path.display().to_string(), stage: r.name.clone(), at: b.pos() });
            doc.read_from(errs.bases.len() as u32);
            (doc, ctx.file.to_string(), path.parent().unwrap_or(Path::new("")).to_path_buf())
        }
        (Node::Map(..), None) => (Node::Map(Vec::new(), r.node.pos()), ctx.file.to_string(), ctx.base.to_path_buf()),
        (other, None) => {
            errs.at(Some(other.pos()), format!("stage `{}`: give a YAML file or a mapping", r.name));
            return None;
        }
    };
    // The mapping's keys (dotted paths reach inside: `model.preset: mini`) over the base; a
    // relative path among them is relative to the experiment file.
    if let Node::Map(entries, _) = &r.node {
        for (k, pos, v) in entries {
            if STAGE_KEYS.contains(&k.as_str()) || reserved.contains(&k.as_str()) {
                continue;
            }
            let mut v = v.clone();
            if PATH_KEYS.iter().any(|p| path_key_matches(p, k)) {
                if let Some(s) = as_str(&v).filter(|s| named(ctx.known, s).is_none()) {
                    let p = absolute(&s, ctx.base);
                    v = Node::Scalar(Value::String(p.display().to_string()), v.pos());
                }
            } else if k == "source.splits" || k.starts_with("source.splits.") {
                v = absolute_paths(v, ctx.base);
            }
            let path = match yaml::parse_path(k) {
                Ok(p) => p,
                Err(e) => {
                    errs.at(Some(*pos), format!("{}.{k}: {e}", r.name));
                    continue;
                }
            };
            if let Err(e) = doc.set(&path, v) {
                errs.at(Some(*pos), format!("{}.{k}: {e}", r.name));
            }
        }
    }
    Some((doc, file, base))
}

/// A `source.splits` value (files per split) with each of its paths or globs made absolute.
fn absolute_paths(v: Node, base: &Path) -> Node {
    match v {
        Node::Scalar(Value::String(s), pos) => {
            Node::Scalar(Value::String(absolute(&s, base).display().to_string()), pos)
        }
        Node::Seq(items, pos) => Node::Seq(items.into_iter().map(|i| absolute_paths(i, base)).collect(), pos),
        Node::Map(entries, pos) => {
            Node::Map(entries.into_iter().map(|(k, p, n)| (k, p, absolute_paths(n, base))).collect(), pos)
        }
        other => other,
    }
}

/// Keys whose values are paths (`steps[*]` stands for any step).
const PATH_KEYS: &[&str] = &[
    "data",
    "output_dir",
    "model.init_from",
    "model.config",
    "source.path",
    "sink.path",
    "steps[*].vocab",
    "steps[*].tokenizer",
];

fn path_key_matches(pattern: &str, key: &str) -> bool {
    match pattern.split_once("[*]") {
        Some((head, tail)) => key
            .strip_prefix(head)
            .and_then(|rest| rest.strip_prefix('['))
            .and_then(|rest| rest.split_once(']'))
            .is_some_and(|(n, rest)| n.parse::<usize>().is_ok() && rest == tail),
        None => pattern == key,
    }
}

/// What a stage reads, gathered while its kind's `resolve` reads its configuration: the
/// stages (by name) and the files or folders (by path); and where it writes.
pub(super) struct Reads {
    pub(super) out: PathBuf,
    pub(super) deps: Vec<String>,
    pub(super) inputs: Vec<PathBuf>,
}

fn resolve_stage(ctx: &Ctx, r: &Raw, kind: Kind, errs: &mut Errors) -> Option<Stage> {
    let mut reads = Reads { out: ctx.stage_out(&r.name), deps: Vec::new(), inputs: Vec::new() };
    let spec = kind.resolve(ctx, r, &mut reads, errs)?;
    let Reads { out, mut deps, inputs } = reads;
    deps.sort();
    deps.dedup();
    Some(Stage { name: r.name.clone(), index: ctx.index, kind, out, deps, inputs, spec })
}

/// A vocab, export or eval stage's own settings: its mapping without the keys that wire it
/// (`kind`, and `wires` such as `from:` or `model:`), read as the settings struct its command
/// takes flags into — so a key, its default and its check are the command's, with located
/// errors (`file:line:col`, the keys that would fit).
pub(super) fn stage_settings<T: serde::de::DeserializeOwned + HasProblems>(
    ctx: &Ctx,
    r: &Raw,
    wires: &[&str],
    what: &str,
    errs: &mut Errors,
) -> Option<T> {
    let (entries, pos) = match &r.node {
        Node::Map(entries, pos) => (entries.clone(), *pos),
        other => {
            errs.at(Some(other.pos()), format!("stage `{}`: a {what} is a mapping of its settings", r.name));
            return None;
        }
    };
    let own: Vec<_> = entries.into_iter().filter(|(k, _, _)| k != "kind" && !wires.contains(&k.as_str())).collect();
    let mut y = YamlFile::from_node(Node::Map(own, pos), ctx.file, ctx.base, &[]);
    let settings = y.deserialize::<T>(&r.name);
    if let Some(s) = &settings {
        for (key, why) in s.problems() {
            y.error(key, why);
        }
    }
    match y.finish() {
        Ok(()) => settings,
        Err(e) => {
            errs.extend(e);
            None
        }
    }
}

/// The checks a settings struct makes of its values (beyond their types), by key.
pub(super) trait HasProblems {
    fn problems(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

impl HasProblems for EvalSettings {
    fn problems(&self) -> Vec<(&'static str, String)> {
        EvalSettings::problems(self)
    }
}
impl HasProblems for ExportSettings {}
impl HasProblems for crate::vocab::VocabSettings {}

/// A train config; whether its shards and checkpoint exist is left to the run when they come
/// from stages that have not run yet.
pub(super) fn train_config(y: YamlFile, deps: &[String]) -> Result<TrainConfig, ConfigErrors> {
    TrainConfig::from_yaml(y, deps.is_empty())
}

/// The shards a pipeline stage writes: `classify` or `pretrain`.
pub(super) fn pipeline_task(s: &Stage) -> Option<String> {
    let Spec::Pipeline(p) = &s.spec else { return None };
    p.steps.iter().rev().find_map(|step| match step {
        PipelineStep::ClassifySequences(_) => Some("classify".to_string()),
        PipelineStep::PretrainSequences(_) => Some("pretrain".to_string()),
        _ => None,
    })
}

/// The pipeline stage an export stage's model was trained on.
pub(super) fn export_data(ctx: &Ctx, export: &str) -> Option<String> {
    let e = ctx.done.iter().find(|s| s.name == export)?;
    let train = e.deps.iter().find_map(|d| ctx.done.iter().find(|s| &s.name == d && s.kind == Kind::Train))?;
    train.deps.iter().find(|d| ctx.done.iter().any(|s| &s.name == *d && s.kind == Kind::Pipeline)).cloned()
}

/// A tokenize step's `vocab:` or `tokenizer:` naming a vocab stage reads its vocab.txt.
/// Returns the vocabulary files so wired (written when those stages run).
pub(super) fn wire_vocab(
    ctx: &Ctx,
    r: &Raw,
    doc: &mut Node,
    deps: &mut Vec<String>,
    errs: &mut Errors,
) -> Vec<PathBuf> {
    let Some((Node::Seq(steps, _), _)) = map_get(doc, "steps") else { return Vec::new() };
    let mut sets = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let Some((v, pos)) = map_get(step, "vocab") else { continue };
        let Some(value) = as_str(v) else { continue };
        let vocab_stage = named(ctx.known, &value).is_some_and(|(_, k, _)| *k == Kind::Vocab);
        // A stage that failed may be the vocab stage meant: `wire` leans on it.
        if vocab_stage || ctx.tainted.iter().any(|t| t.name == value) {
            if let Some(Wire::Stage(name)) =
                ctx.wire(&r.name, &format!("steps[{i}].vocab"), &value, pos, &[Kind::Vocab], errs)
            {
                let path = output_of(Kind::Vocab, &ctx.stage_out(&name), "");
                deps.push(name);
                sets.push((i, path));
            }
        }
    }
    let mut pending = Vec::new();
    for (i, file) in sets {
        let key = [PathSeg::Key("steps".into()), PathSeg::Index(i), PathSeg::Key("vocab".into())];
        let pos = doc.locate(&key);
        let _ = doc.set(&key, Node::Scalar(Value::String(file.display().to_string()), pos));
        pending.push(file);
    }
    pending
}

/// A path as a YAML value for a `key=value` override.
pub(super) fn json_str(p: &Path) -> String {
    serde_json::to_string(&p.display().to_string()).expect("a string serialises")
}

/// The names a raw stage's wires give (`data`, `init_from`, `from`, `model`, `pipeline`,
/// `baseline`, a tokenize step's `vocab`) that are stages.
/// A wire naming a stage of a kind it cannot read (`data: export`) orders nothing: the stage is
/// resolved in its place in the file, where that wire is reported as the one mistake.
fn named_wires(r: &Raw, known: &[(String, Kind, Pos)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut take = |n: &Node, want: Kind| {
        if let Some((name, kind, _)) = as_str(n).and_then(|v| named(known, &v)) {
            if *name != r.name && *kind == want {
                out.push(name.clone());
            }
        }
    };
    for (key, want) in [
        ("data", Kind::Pipeline),
        ("init_from", Kind::Train),
        ("model.init_from", Kind::Train),
        ("from", Kind::Train),
        ("model", Kind::Export),
        ("pipeline", Kind::Pipeline),
        ("baseline", Kind::Export),
    ] {
        if let Some((n, _)) = map_get(&r.node, key) {
            take(n, want);
        }
    }
    if let Node::Map(entries, _) = &r.node {
        for (k, _, v) in entries {
            if path_key_matches("steps[*].vocab", k) {
                take(v, Kind::Vocab);
            }
        }
    }
    out
}

/// The stage `value` names: the stage of that name — or a misnamed one (`fine tune`, its name
/// no folder) by the name its error suggests (`fine_tune`). The name is the one mistake,
/// reported at the stage; a wire already written with the name it is to have reads it.
pub(super) fn named<'a>(known: &'a [(String, Kind, Pos)], value: &str) -> Option<&'a (String, Kind, Pos)> {
    known
        .iter()
        .find(|(n, _, _)| n == value)
        .or_else(|| known.iter().find(|(n, _, _)| !valid_stage_name(n) && !value.is_empty() && folder_name(n) == value))
}

/// Stage indices in resolution order: each after the stages it names, otherwise in file order
/// (Kahn's algorithm, lowest index first) — or the names around a cycle.
fn resolve_order(raws: &[Raw], known: &[(String, Kind, Pos)]) -> Result<Vec<usize>, Vec<String>> {
    let deps: Vec<Vec<usize>> = raws
        .iter()
        .map(|r| named_wires(r, known).iter().filter_map(|n| raws.iter().position(|x| &x.name == n)).collect())
        .collect();
    let names: Vec<String> = raws.iter().map(|r| r.name.clone()).collect();
    topological(&deps, &names)
}

/// Kahn's algorithm over `deps` (indices each item needs first), lowest index first — or the
/// names around a cycle.
fn topological(deps: &[Vec<usize>], names: &[String]) -> Result<Vec<usize>, Vec<String>> {
    let n = deps.len();
    let mut placed = vec![false; n];
    let mut order = Vec::new();
    while order.len() < n {
        let next = (0..n).find(|&i| !placed[i] && deps[i].iter().all(|&d| placed[d]));
        match next {
            Some(i) => {
                placed[i] = true;
                order.push(i);
            }
            None => {
                // Walk unplaced dependencies from the first unplaced stage until one repeats.
                let mut path = vec![(0..n).find(|&i| !placed[i]).expect("an unplaced stage")];
                loop {
                    let at = *path.last().expect("non-empty");
                    let d = *deps[at].iter().find(|&&d| !placed[d]).expect("a cycle continues");
                    if let Some(from) = path.iter().position(|&x| x == d) {
                        let mut cycle: Vec<String> = path[from..].iter().map(|&i| names[i].clone()).collect();
                        cycle.push(names[d].clone());
                        return Err(cycle);
                    }
                    path.push(d);
                }
            }
        }
    }
    Ok(order)
}
