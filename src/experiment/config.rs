//! The experiment YAML: named stages, each a pipeline, vocabulary, training, export or
//! evaluation, wired to one another by name, resolved into typed configurations in the order
//! they run — with the same located errors (`file:line:col`, the names that would fit) as
//! every other configuration file.
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

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::yaml::{self, Node, PathSeg, Pos};
use crate::config::{suggest, ConfigError, ConfigErrors, Pipeline, PipelineStep, YamlFile};
use crate::onnx::export::Precision;
use crate::train::config::TrainConfig;

/// What a stage does: the command it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pipeline,
    Vocab,
    Train,
    Export,
    Eval,
}

pub const KINDS: &[&str] = &["pipeline", "vocab", "train", "export", "eval"];

impl Kind {
    pub fn name(self) -> &'static str {
        KINDS[self as usize]
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "pipeline" => Kind::Pipeline,
            "vocab" => Kind::Vocab,
            "train" => Kind::Train,
            "export" => Kind::Export,
            "eval" => Kind::Eval,
            _ => return None,
        })
    }
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

#[derive(Debug, Clone)]
pub enum Spec {
    Pipeline(Box<Pipeline>),
    Vocab {
        pipeline: Box<Pipeline>,
        size: usize,
        min_frequency: u64,
        lowercase: bool,
    },
    Train(Box<TrainConfig>),
    Export {
        checkpoint: PathBuf,
        optimize: bool,
        max_len: Option<usize>,
        verify: bool,
        precision: Precision,
    },
    Eval {
        model: PathBuf,
        data: PathBuf,
        split: String,
        batch_size: usize,
        device: String,
        mistakes: usize,
        /// The model to gate against (`baseline:`, an export stage or a path) and the accuracy
        /// points it may lose.
        baseline: Option<PathBuf>,
        max_drop: f64,
    },
}

impl Spec {
    /// The resolved configuration as JSON: the part of the stage's key that its own settings
    /// make.
    pub fn canonical(&self) -> Value {
        match self {
            Spec::Pipeline(p) => serde_json::to_value(p).expect("a pipeline serialises"),
            Spec::Vocab { pipeline, size, min_frequency, lowercase } => serde_json::json!({
                "pipeline": pipeline, "size": size, "min_frequency": min_frequency, "lowercase": lowercase
            }),
            Spec::Train(c) => serde_json::to_value(c).expect("a train config serialises"),
            // Keys added later (precision, baseline) appear only when set: a stage written before
            // them keeps its key.
            Spec::Export { checkpoint, optimize, max_len, verify, precision } => {
                let mut v = serde_json::json!({
                    "checkpoint": checkpoint, "optimize": optimize, "max_len": max_len, "verify": verify
                });
                if *precision != Precision::Fp32 {
                    v["precision"] = precision.name().into();
                }
                v
            }
            Spec::Eval { model, data, split, batch_size, device, mistakes, baseline, max_drop } => {
                let mut v = serde_json::json!({
                    "model": model, "data": data, "split": split, "batch_size": batch_size, "device": device,
                    "mistakes": mistakes
                });
                if let Some(b) = baseline {
                    v["baseline"] = serde_json::json!(b);
                    v["max_drop"] = serde_json::json!(max_drop);
                }
                v
            }
        }
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
}

/// What each kind's output is, for wires.
fn output_of(kind: Kind, out: &Path, checkpoint: &str) -> PathBuf {
    match kind {
        Kind::Train => out.join(checkpoint),
        Kind::Export => out.join("model.onnx"),
        Kind::Vocab => out.join("vocab.txt"),
        Kind::Pipeline | Kind::Eval => out.to_path_buf(),
    }
}

/// Keys of a stage mapping that are the experiment's, not the command's configuration.
const STAGE_KEYS: &[&str] = &["kind", "base"];
const EXPORT_KEYS: &[&str] = &["kind", "from", "checkpoint", "optimize", "max_len", "verify", "precision"];
const EVAL_KEYS: &[&str] =
    &["kind", "model", "data", "split", "batch_size", "device", "mistakes", "baseline", "max_drop"];
const VOCAB_KEYS: &[&str] = &["kind", "pipeline", "size", "min_frequency", "cased"];
const TOP_KEYS: &[&str] = &["name", "out", "stages"];

/// A stage as read, before it is resolved.
struct Raw {
    name: String,
    pos: Pos,
    /// A path to a YAML file, or an inline mapping.
    node: Node,
    /// `--set NAME.rest=value` overrides, as `rest=value`.
    overrides: Vec<String>,
}

/// Collects errors located in the experiment file.
struct Errors {
    file: String,
    list: Vec<ConfigError>,
}

impl Errors {
    fn at(&mut self, pos: Option<Pos>, message: String) {
        self.list.push(ConfigError { file: self.file.clone(), pos, message });
    }

    fn extend(&mut self, e: ConfigErrors) {
        self.list.extend(e.0);
    }
}

fn map_get<'a>(node: &'a Node, key: &str) -> Option<(&'a Node, Pos)> {
    let Node::Map(entries, _) = node else { return None };
    entries.iter().find(|(k, _, _)| k == key).map(|(_, p, v)| (v, *p))
}

fn as_str(node: &Node) -> Option<String> {
    match node {
        Node::Scalar(Value::String(s), _) => Some(s.clone()),
        _ => None,
    }
}

fn scalar(node: &Node) -> Option<&Value> {
    match node {
        Node::Scalar(v, _) => Some(v),
        _ => None,
    }
}

/// Relative to `base`, absolute and free of `..` (as every configuration path is).
fn absolute(path: &str, base: &Path) -> PathBuf {
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
    let mut errs = Errors { file: file.clone(), list: Vec::new() };
    let cwd = std::env::current_dir().unwrap_or_else(|_| base.clone());

    let Node::Map(entries, _) = &root else {
        errs.at(Some(root.pos()), "an experiment must be a mapping with name, out and stages".into());
        return Err(ConfigErrors(errs.list));
    };
    for (k, pos, _) in entries {
        if !TOP_KEYS.contains(&k.as_str()) {
            let hint = suggest(k, TOP_KEYS).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
            errs.at(Some(*pos), format!("unknown top-level key `{k}`{hint} (valid: {})", TOP_KEYS.join(", ")));
        }
    }
    let mut name = map_get(&root, "name").and_then(|(n, _)| as_str(n)).unwrap_or_default();
    let mut out = map_get(&root, "out").and_then(|(n, _)| as_str(n)).map(|o| absolute(&o, &base));
    let mut raws: Vec<Raw> = Vec::new();
    match map_get(&root, "stages") {
        Some((Node::Map(stages, _), _)) => {
            for (k, pos, node) in stages {
                raws.push(Raw { name: k.clone(), pos: *pos, node: node.clone(), overrides: Vec::new() });
            }
        }
        Some((other, _)) => errs.at(Some(other.pos()), "`stages` must be a mapping of stage names".into()),
        None => errs.at(Some(root.pos()), "missing `stages`".into()),
    }
    if raws.is_empty() && map_get(&root, "stages").is_some() {
        errs.at(Some(root.pos()), "`stages` is empty".into());
    }
    // `--set STAGE.key=value` reaches into a stage; `--set out=…` / `name=…` the experiment.
    let stage_names: Vec<String> = raws.iter().map(|r| r.name.clone()).collect();
    for o in overrides {
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
            ("out", "") => out = Some(absolute(value.trim(), &cwd)),
            ("name", "") => name = value.trim().to_string(),
            (stage, rest) if !rest.is_empty() && stage_names.iter().any(|n| n == stage) => {
                let raw = raws.iter_mut().find(|r| r.name == stage).expect("a known stage");
                raw.overrides.push(format!("{rest}={value}"));
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
    if name.is_empty() {
        errs.at(Some(root.pos()), "missing `name`".into());
    }
    let Some(out) = out else {
        errs.at(Some(root.pos()), "missing `out` (the folder every stage writes under)".into());
        return Err(ConfigErrors(errs.list).sorted());
    };

    // Kinds first: wires are checked against them.
    let mut kinds: Vec<Option<Kind>> = Vec::new();
    for r in &raws {
        kinds.push(stage_kind(r, &base, &mut errs));
    }
    let known: Vec<(String, Kind, Pos)> =
        raws.iter().zip(&kinds).filter_map(|(r, k)| Some((r.name.clone(), (*k)?, r.pos))).collect();

    // Resolve every stage after those it names (file order where the wires allow), so a wire
    // may point forwards; a cycle is an error.
    let order = match resolve_order(&raws, &known) {
        Ok(o) => o,
        Err(cycle) => {
            let pos = raws.iter().find(|r| r.name == cycle[0]).map(|r| r.pos);
            errs.at(pos, format!("stages form a cycle: {}", cycle.join(" → ")));
            return Err(ConfigErrors(errs.list));
        }
    };
    let mut stages: Vec<Stage> = Vec::new();
    for i in order {
        let (r, Some(kind)) = (&raws[i], kinds[i]) else { continue };
        let ctx = Ctx { file: &file, base: &base, out: &out, known: &known, index: i, done: &stages };
        if let Some(s) = resolve_stage(&ctx, r, kind, &mut errs) {
            stages.push(s);
        }
    }
    if !errs.list.is_empty() {
        return Err(ConfigErrors(errs.list).sorted());
    }
    Ok(Experiment { file: path.to_path_buf(), name, out, stages })
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
        (Node::Scalar(Value::String(p), _), _) => read_doc(&absolute(p, base), errs, r.pos, &r.name)?,
        (_, Some((b, _))) => read_doc(&absolute(&as_str(b).unwrap_or_default(), base), errs, r.pos, &r.name)?,
        (node, None) => node.clone(),
    };
    if map_get(&doc, "source").is_some() || map_get(&doc, "steps").is_some() {
        Some(Kind::Pipeline)
    } else if map_get(&doc, "task").is_some() {
        Some(Kind::Train)
    } else {
        errs.at(
            Some(r.pos),
            format!(
                "stage `{}`: cannot tell what it is; name it after its kind or add `kind: {}`",
                r.name,
                KINDS.join(" | ")
            ),
        );
        None
    }
}

fn read_doc(path: &Path, errs: &mut Errors, pos: Pos, stage: &str) -> Option<Node> {
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
            errs.list.push(ConfigError { file: path.display().to_string(), pos: Some(e.pos), message: e.message });
            None
        }
    }
}

/// What resolving one stage can see.
struct Ctx<'a> {
    file: &'a str,
    base: &'a Path,
    out: &'a Path,
    /// Every stage whose kind is known: (name, kind, position).
    known: &'a [(String, Kind, Pos)],
    /// This stage's place in the file.
    index: usize,
    /// The stages resolved so far (those before this one in the file).
    done: &'a [Stage],
}

impl Ctx<'_> {
    /// `value` at `key` names a stage (of one of `want`) or is a path. A bare word that is
    /// neither a stage nor an existing path is an unknown stage, with the names that would fit.
    fn wire(&self, stage: &str, key: &str, value: &str, pos: Pos, want: &[Kind], errs: &mut Errors) -> Option<Wire> {
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
                        "{stage}.{key}: `{value}` is {} {} stage; {key} must name a {} stage{}",
                        if k.name().starts_with('e') { "an" } else { "a" },
                        k.name(),
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

    /// The nearest stage before this one in the file, of kind `kind`, passing `ok`.
    fn nearest(&self, kind: Kind, ok: impl Fn(&Stage) -> bool) -> Option<&Stage> {
        self.done.iter().filter(|s| s.index < self.index && s.kind == kind && ok(s)).max_by_key(|s| s.index)
    }

    fn stage_out(&self, name: &str) -> PathBuf {
        self.out.join(name)
    }
}

enum Wire {
    Stage(String),
    Path(PathBuf),
}

/// The stage's configuration document: its file, or its `base` file with the mapping's keys
/// set over it, or the mapping itself; and the folder its relative paths are relative to.
fn stage_doc(ctx: &Ctx, r: &Raw, reserved: &[&str], errs: &mut Errors) -> Option<(Node, String, PathBuf)> {
    let (mut doc, file, base) = match (&r.node, map_get(&r.node, "base")) {
        (Node::Scalar(Value::String(p), _), _) => {
            let path = absolute(p, ctx.base);
            let doc = read_doc(&path, errs, r.pos, &r.name)?;
            return Some((doc, path.display().to_string(), path.parent().unwrap_or(Path::new("")).to_path_buf()));
        }
        (_, Some((b, _))) => {
            let path = absolute(&as_str(b).unwrap_or_default(), ctx.base);
            let doc = read_doc(&path, errs, r.pos, &r.name)?;
            (
                doc,
                format!("{} (stage `{}`, base '{}')", ctx.file, r.name, path.display()),
                path.parent().unwrap_or(Path::new("")).to_path_buf(),
            )
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
                if let Some(s) = as_str(&v).filter(|s| !ctx.known.iter().any(|(n, _, _)| n == s)) {
                    let p = absolute(&s, ctx.base);
                    v = Node::Scalar(Value::String(p.display().to_string()), v.pos());
                }
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

fn resolve_stage(ctx: &Ctx, r: &Raw, kind: Kind, errs: &mut Errors) -> Option<Stage> {
    // Vocab, export and eval stages are read from their mapping here (pipelines and trainings
    // take the overrides through their own loaders): `--set export.optimize=true` lands in it.
    let applied;
    let r = if matches!(kind, Kind::Vocab | Kind::Export | Kind::Eval) && !r.overrides.is_empty() {
        let mut node = r.node.clone();
        for o in &r.overrides {
            if let Err(m) = crate::config::apply_override(&mut node, o) {
                errs.at(None, format!("--set {}.{o}: {m}", r.name));
            }
        }
        applied = Raw { name: r.name.clone(), pos: r.pos, node, overrides: Vec::new() };
        &applied
    } else {
        r
    };
    let out = ctx.stage_out(&r.name);
    // The stages it reads and the files it names, gathered while its configuration resolves.
    let (mut deps, mut inputs): (Vec<String>, Vec<PathBuf>) = (Vec::new(), Vec::new());
    let spec = match kind {
        Kind::Pipeline => {
            let (mut doc, file, base) = stage_doc(ctx, r, &[], errs)?;
            let pending = wire_vocab(ctx, r, &mut doc, &mut deps, errs);
            let mut overrides = r.overrides.clone();
            overrides.push(format!("sink.path={}", json_str(&out)));
            let p = match Pipeline::from_node(doc, &file, &base, &overrides, &pending) {
                Ok(p) => p,
                Err(e) => {
                    errs.extend(e);
                    return None;
                }
            };
            inputs.push(p.source.path().to_path_buf());
            for step in p.steps.clone().iter_mut() {
                inputs.extend(step.paths_mut().into_iter().map(|(_, p)| p.clone()));
            }
            Spec::Pipeline(Box::new(p))
        }
        Kind::Vocab => {
            let get = |k: &str| map_get(&r.node, k);
            let (pipeline, ppos) = match get("pipeline") {
                Some((n, pos)) => (as_str(n).unwrap_or_default(), pos),
                None => {
                    errs.at(
                        Some(r.pos),
                        format!("{}: a vocab stage needs `pipeline:` (a pipeline stage or file)", r.name),
                    );
                    return None;
                }
            };
            let p = match ctx.wire(&r.name, "pipeline", &pipeline, ppos, &[Kind::Pipeline], errs)? {
                Wire::Stage(name) => {
                    deps.push(name.clone());
                    match &ctx.done.iter().find(|s| s.name == name)?.spec {
                        Spec::Pipeline(p) => (**p).clone(),
                        _ => return None,
                    }
                }
                Wire::Path(path) => match Pipeline::load(&path, &[]) {
                    Ok(p) => {
                        inputs.push(path);
                        inputs.push(p.source.path().to_path_buf());
                        p
                    }
                    Err(e) => {
                        errs.extend(e);
                        return None;
                    }
                },
            };
            let num = |k: &str, d: u64| get(k).and_then(|(n, _)| scalar(n)?.as_u64()).unwrap_or(d);
            let cased = get("cased").and_then(|(n, _)| scalar(n)?.as_bool()).unwrap_or(false);
            unknown_keys(r, VOCAB_KEYS, errs);
            Spec::Vocab {
                pipeline: Box::new(p),
                size: num("size", 30522) as usize,
                min_frequency: num("min_frequency", 2),
                lowercase: !cased,
            }
        }
        Kind::Train => {
            let (doc, file, base) = stage_doc(ctx, r, &["init_from"], errs)?;
            let mut overrides = r.overrides.clone();
            overrides.push(format!("output_dir={}", json_str(&out)));
            let task = map_get(&doc, "task").and_then(|(n, _)| as_str(n));
            // data: the mapping's (a stage or a path), else the nearest earlier pipeline of
            // this task's shards, else the file's own path.
            let explicit = map_get(&r.node, "data").and_then(|(n, p)| Some((as_str(n)?, p)));
            let data = match explicit {
                Some((v, pos)) => Some((ctx.wire(&r.name, "data", &v, pos, &[Kind::Pipeline], errs)?, Some(pos))),
                None => ctx
                    .nearest(Kind::Pipeline, |s| pipeline_task(s).as_deref() == task.as_deref())
                    .map(|s| (Wire::Stage(s.name.clone()), None)),
            };
            match data {
                Some((Wire::Stage(name), pos)) => {
                    let up = ctx.done.iter().find(|s| s.name == name)?;
                    if let (Some(t), Some(have)) = (task.as_deref(), pipeline_task(up)) {
                        if t != have {
                            errs.at(
                                pos,
                                format!(
                                    "{}.data: `{name}` writes {have} shards, but this stage trains `task: {t}`",
                                    r.name
                                ),
                            );
                        }
                    }
                    deps.push(name);
                    overrides.push(format!("data={}", json_str(&up.out)));
                }
                Some((Wire::Path(p), _)) => {
                    inputs.push(p.join(crate::contract::manifest::MANIFEST));
                    overrides.push(format!("data={}", json_str(&p)));
                }
                None => {}
            }
            let init = map_get(&r.node, "init_from")
                .or_else(|| map_get(&r.node, "model.init_from"))
                .and_then(|(n, p)| Some((as_str(n)?, p)));
            if let Some((v, pos)) = init {
                match ctx.wire(&r.name, "init_from", &v, pos, &[Kind::Train], errs)? {
                    Wire::Stage(name) => {
                        deps.push(name.clone());
                        overrides.push(format!("model.init_from={}", json_str(&ctx.stage_out(&name).join("final"))));
                    }
                    Wire::Path(p) => {
                        inputs.push(p.clone());
                        overrides.push(format!("model.init_from={}", json_str(&p)));
                    }
                }
                overrides.push("model.preset=null".into());
                overrides.push("model.config=null".into());
            }
            let y = YamlFile::from_node(doc, &file, &base, &overrides);
            let mut c = match train_config(y, &deps) {
                Ok(c) => c,
                Err(e) => {
                    errs.extend(e);
                    return None;
                }
            };
            c.output_dir = out.clone();
            if let Some(p) = &c.model.config {
                inputs.push(p.clone());
            }
            Spec::Train(Box::new(c))
        }
        Kind::Export => {
            unknown_keys(r, EXPORT_KEYS, errs);
            let get = |k: &str| map_get(&r.node, k).and_then(|(n, p)| Some((as_str(n)?, p)));
            let from = match get("from") {
                Some((v, pos)) => match ctx.wire(&r.name, "from", &v, pos, &[Kind::Train], errs)? {
                    Wire::Stage(n) => Some(n),
                    Wire::Path(_) => {
                        errs.at(Some(pos), format!("{}.from: name a train stage (or give `checkpoint: PATH`)", r.name));
                        return None;
                    }
                },
                None => ctx.nearest(Kind::Train, |_| true).map(|s| s.name.clone()),
            };
            let which = get("checkpoint").map(|(v, _)| v).unwrap_or_else(|| "final".into());
            let checkpoint = match (which.as_str(), &from) {
                ("final" | "best", Some(n)) => {
                    deps.push(n.clone());
                    output_of(Kind::Train, &ctx.stage_out(n), &which)
                }
                ("final" | "best", None) => {
                    errs.at(
                        Some(r.pos),
                        format!("{}: no train stage before it to export; give `checkpoint: PATH`", r.name),
                    );
                    return None;
                }
                (path, _) => {
                    let p = absolute(path, ctx.base);
                    inputs.push(p.clone());
                    p
                }
            };
            let flag = |k: &str| map_get(&r.node, k).and_then(|(n, _)| scalar(n)?.as_bool()).unwrap_or(false);
            let max_len = map_get(&r.node, "max_len").and_then(|(n, _)| scalar(n)?.as_u64()).map(|x| x as usize);
            let precision = match map_get(&r.node, "precision") {
                Some((n, pos)) => match as_str(n).map(|v| Precision::parse(&v)) {
                    Some(Ok(p)) => p,
                    _ => {
                        errs.at(Some(pos), format!("{}.precision: fp32, int8 or fp16", r.name));
                        return None;
                    }
                },
                None => Precision::Fp32,
            };
            Spec::Export { checkpoint, optimize: flag("optimize"), max_len, verify: flag("verify"), precision }
        }
        Kind::Eval => {
            unknown_keys(r, EVAL_KEYS, errs);
            let get = |k: &str| map_get(&r.node, k).and_then(|(n, p)| Some((as_str(n)?, p)));
            let (model, trained_on) = match get("model") {
                Some((v, pos)) => match ctx.wire(&r.name, "model", &v, pos, &[Kind::Export], errs)? {
                    Wire::Stage(n) => {
                        deps.push(n.clone());
                        (output_of(Kind::Export, &ctx.stage_out(&n), ""), export_data(ctx, &n))
                    }
                    Wire::Path(p) => {
                        inputs.push(p.clone());
                        (p, None)
                    }
                },
                None => match ctx.nearest(Kind::Export, |_| true) {
                    Some(s) => {
                        deps.push(s.name.clone());
                        (output_of(Kind::Export, &s.out, ""), export_data(ctx, &s.name))
                    }
                    None => {
                        errs.at(Some(r.pos), format!("{}: no export stage before it; give `model:`", r.name));
                        return None;
                    }
                },
            };
            let data = match get("data") {
                Some((v, pos)) => match ctx.wire(&r.name, "data", &v, pos, &[Kind::Pipeline], errs)? {
                    Wire::Stage(n) => {
                        deps.push(n.clone());
                        ctx.stage_out(&n)
                    }
                    Wire::Path(p) => {
                        inputs.push(p.join(crate::contract::manifest::MANIFEST));
                        p
                    }
                },
                None => match trained_on {
                    Some(n) => {
                        deps.push(n.clone());
                        ctx.stage_out(&n)
                    }
                    None => {
                        errs.at(
                            Some(r.pos),
                            format!("{}: cannot tell which shards to evaluate on; give `data:`", r.name),
                        );
                        return None;
                    }
                },
            };
            let baseline = match get("baseline") {
                Some((v, pos)) => match ctx.wire(&r.name, "baseline", &v, pos, &[Kind::Export], errs)? {
                    Wire::Stage(n) => {
                        deps.push(n.clone());
                        Some(output_of(Kind::Export, &ctx.stage_out(&n), ""))
                    }
                    Wire::Path(p) => {
                        inputs.push(p.clone());
                        Some(p)
                    }
                },
                None => None,
            };
            let max_drop = match map_get(&r.node, "max_drop") {
                Some((n, pos)) => match scalar(n).and_then(|v| v.as_f64()).filter(|x| *x >= 0.0) {
                    Some(x) => x,
                    None => {
                        errs.at(Some(pos), format!("{}.max_drop: accuracy points, a number ≥ 0", r.name));
                        return None;
                    }
                },
                None => crate::onnx::gate::DEFAULT_MAX_DROP,
            };
            let num = |k: &str, d: u64| map_get(&r.node, k).and_then(|(n, _)| scalar(n)?.as_u64()).unwrap_or(d);
            Spec::Eval {
                baseline,
                max_drop,
                model,
                data,
                split: get("split").map(|(v, _)| v).unwrap_or_else(|| "test".into()),
                batch_size: num("batch_size", 32) as usize,
                device: get("device").map(|(v, _)| v).unwrap_or_else(|| "cpu".into()),
                mistakes: num("mistakes", 10) as usize,
            }
        }
    };
    deps.sort();
    deps.dedup();
    Some(Stage { name: r.name.clone(), index: ctx.index, kind, out, deps, inputs, spec })
}

/// A train config; whether its shards and checkpoint exist is left to the run when they come
/// from stages that have not run yet.
fn train_config(y: YamlFile, deps: &[String]) -> Result<TrainConfig, ConfigErrors> {
    TrainConfig::from_yaml(y, deps.is_empty())
}

/// The shards a pipeline stage writes: `classify` or `pretrain`.
fn pipeline_task(s: &Stage) -> Option<String> {
    let Spec::Pipeline(p) = &s.spec else { return None };
    p.steps.iter().rev().find_map(|step| match step {
        PipelineStep::ClassifySequences(_) => Some("classify".to_string()),
        PipelineStep::PretrainSequences(_) => Some("pretrain".to_string()),
        _ => None,
    })
}

/// The pipeline stage an export stage's model was trained on.
fn export_data(ctx: &Ctx, export: &str) -> Option<String> {
    let e = ctx.done.iter().find(|s| s.name == export)?;
    let train = e.deps.iter().find_map(|d| ctx.done.iter().find(|s| &s.name == d && s.kind == Kind::Train))?;
    train.deps.iter().find(|d| ctx.done.iter().any(|s| &s.name == *d && s.kind == Kind::Pipeline)).cloned()
}

/// A tokenize step's `vocab:` or `tokenizer:` naming a vocab stage reads its vocab.txt.
/// Returns the vocabulary files so wired (written when those stages run).
fn wire_vocab(ctx: &Ctx, r: &Raw, doc: &mut Node, deps: &mut Vec<String>, errs: &mut Errors) -> Vec<PathBuf> {
    let Some((Node::Seq(steps, _), _)) = map_get(doc, "steps") else { return Vec::new() };
    let mut sets = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let Some((v, pos)) = map_get(step, "vocab") else { continue };
        let Some(value) = as_str(v) else { continue };
        if ctx.known.iter().any(|(n, k, _)| n == &value && *k == Kind::Vocab) {
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

fn unknown_keys(r: &Raw, valid: &[&str], errs: &mut Errors) {
    let Node::Map(entries, _) = &r.node else { return };
    for (k, pos, _) in entries {
        if !valid.contains(&k.as_str()) {
            let hint = suggest(k, valid).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
            errs.at(Some(*pos), format!("{}: unknown key `{k}`{hint} (valid: {})", r.name, valid.join(", ")));
        }
    }
}

/// A path as a YAML value for a `key=value` override.
fn json_str(p: &Path) -> String {
    serde_json::to_string(&p.display().to_string()).expect("a string serialises")
}

/// The names a raw stage's wires give (`data`, `init_from`, `from`, `model`, `pipeline`, a
/// tokenize step's `vocab`) that are stages.
fn named_wires(r: &Raw, known: &[(String, Kind, Pos)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut take = |n: &Node| {
        if let Some(v) = as_str(n) {
            if v != r.name && known.iter().any(|(k, _, _)| k == &v) {
                out.push(v);
            }
        }
    };
    for key in ["data", "init_from", "model.init_from", "from", "model", "pipeline"] {
        if let Some((n, _)) = map_get(&r.node, key) {
            take(n);
        }
    }
    if let Node::Map(entries, _) = &r.node {
        for (k, _, v) in entries {
            if path_key_matches("steps[*].vocab", k) {
                take(v);
            }
        }
    }
    out
}

/// Stage indices in resolution order: each after the stages it names, otherwise in file order
/// (Kahn's algorithm, lowest index first) — or the names around a cycle.
fn resolve_order(raws: &[Raw], known: &[(String, Kind, Pos)]) -> Result<Vec<usize>, Vec<String>> {
    let deps: Vec<Vec<usize>> = raws
        .iter()
        .map(|r| named_wires(r, known).iter().filter_map(|n| raws.iter().position(|x| &x.name == n)).collect())
        .collect();
    let mut placed = vec![false; raws.len()];
    let mut order = Vec::new();
    while order.len() < raws.len() {
        let next = (0..raws.len()).find(|&i| !placed[i] && deps[i].iter().all(|&d| placed[d]));
        match next {
            Some(i) => {
                placed[i] = true;
                order.push(i);
            }
            None => {
                // Walk unplaced dependencies from the first unplaced stage until one repeats.
                let mut path = vec![(0..raws.len()).find(|&i| !placed[i]).expect("an unplaced stage")];
                loop {
                    let at = *path.last().expect("non-empty");
                    let d = *deps[at].iter().find(|&&d| !placed[d]).expect("a cycle continues");
                    if let Some(from) = path.iter().position(|&x| x == d) {
                        let mut names: Vec<String> = path[from..].iter().map(|&i| raws[i].name.clone()).collect();
                        names.push(raws[d].name.clone());
                        return Err(names);
                    }
                    path.push(d);
                }
            }
        }
    }
    Ok(order)
}
