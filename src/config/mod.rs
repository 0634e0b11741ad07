//! The pipeline YAML: typed schema, validation that gathers every error with `file:line:col`,
//! `--set` overrides, and path resolution against the YAML file's folder.

pub mod steps;
pub mod yaml;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sink::Sink;
use crate::source::Source;
pub use steps::PipelineStep;
use yaml::{Node, PathSeg, Pos};

/// A whole pipeline, as written in YAML and resolved (overrides applied, paths absolute).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    /// A name for logs and the manifest.
    pub name: String,
    /// Seed for everything random; the same seed, input and config give the same bytes.
    #[serde(default = "default_seed")]
    pub seed: u64,
    pub source: Source,
    #[serde(default)]
    pub steps: Vec<PipelineStep>,
    pub sink: Sink,
    /// What the source found without being named (its label and id fields), for the summary;
    /// the fields themselves are in `source`.
    #[serde(skip)]
    pub detected: Vec<String>,
}

fn default_seed() -> u64 {
    42
}

const TOP_LEVEL_KEYS: &[&str] = &["name", "seed", "source", "steps", "sink"];

/// One configuration problem, located in a file (or a `--set` argument).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub file: String,
    pub pos: Option<Pos>,
    pub message: String,
}

/// The `file` of a note ([`ConfigError::note`]).
const NOTE: &str = "note";

impl ConfigError {
    /// A line printed after the problems that is not one of them: `note: MESSAGE` (the stages
    /// of an experiment left unchecked because they depend on one with errors). Not counted.
    pub fn note(message: String) -> ConfigError {
        ConfigError { file: NOTE.to_string(), pos: None, message }
    }

    pub fn is_note(&self) -> bool {
        self.pos.is_none() && self.file == NOTE
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pos {
            Some(p) => write!(f, "{}:{}:{}: {}", self.file, p.line, p.col, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Every problem found in a configuration; loading reports them all at once.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    /// In reading order: by file, then line and column; notes last.
    pub fn sorted(mut self) -> Self {
        self.0.sort_by_key(|e| (e.is_note(), e.file.clone(), e.pos.map(|p| (p.line, p.col))));
        self
    }

    /// How many problems there are: the lines without the notes.
    pub fn problems(&self) -> usize {
        self.0.iter().filter(|e| !e.is_note()).count()
    }
}

/// Collects errors against one YAML tree.
struct Checker<'a> {
    file: String,
    root: &'a Node,
    /// The `--set`s applied to the tree: a value one of them wrote is reported against it.
    overrides: &'a [String],
    errors: Vec<ConfigError>,
}

/// A problem at `pos` of `file`, or — for a value a `--set` wrote — of that `--set` argument.
fn located(file: &str, overrides: &[String], pos: Pos, message: String) -> ConfigError {
    match pos.override_index().and_then(|i| overrides.get(i)) {
        Some(o) => ConfigError { file: format!("--set {o}"), pos: None, message },
        None => ConfigError { file: file.to_string(), pos: Some(pos), message },
    }
}

impl Checker<'_> {
    fn at(&mut self, pos: Pos, message: String) {
        self.errors.push(located(&self.file, self.overrides, pos, message));
    }

    fn at_path(&mut self, path: &[PathSeg], message: String) {
        let pos = self.root.locate(path);
        self.at(pos, message);
    }

    /// Deserialises a `type:`-tagged component at `path`, turning serde's complaints into
    /// located, helpful messages.
    fn tagged<T>(
        &mut self,
        path: Vec<PathSeg>,
        what: &str,
        types: &[&str],
        build: impl Fn(&str, Value) -> Option<Result<T, serde_path_to_error::Error<serde_json::Error>>>,
    ) -> Option<T> {
        let node = self.node(&path)?;
        let label = display_path(&path);
        let Node::Map(..) = node else {
            self.at(node.pos(), format!("{label} must be a mapping with a `type` key"));
            return None;
        };
        let Some(type_node) = node.get("type") else {
            self.at(node.pos(), format!("{label} has no `type`; expected one of: {}", types.join(", ")));
            return None;
        };
        let type_pos = type_node.pos();
        let Node::Scalar(Value::String(type_name), _) = type_node else {
            self.at(type_pos, format!("{label}.type must be a string"));
            return None;
        };
        let mut options = node.to_value();
        options.as_object_mut().map(|o| o.remove("type"));
        match build(type_name, options) {
            None => {
                let hint = suggest(type_name, types).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
                self.at(
                    type_pos,
                    format!("unknown {what} type `{type_name}` in {label}{hint} (valid: {})", types.join(", ")),
                );
                None
            }
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => {
                self.serde_error(&path, &format!("{label} ({type_name})"), e, &["type"]);
                None
            }
        }
    }

    fn plain<T: serde::de::DeserializeOwned>(&mut self, path: Vec<PathSeg>, label: &str) -> Option<T> {
        let node = self.node(&path)?;
        match serde_path_to_error::deserialize(node.to_value()) {
            Ok(v) => Some(v),
            Err(e) => {
                self.serde_error(&path, label, e, &[]);
                None
            }
        }
    }

    fn node(&self, path: &[PathSeg]) -> Option<&Node> {
        let mut node = self.root;
        for seg in path {
            node = match (seg, node) {
                (PathSeg::Key(k), Node::Map(..)) => node.get(k)?,
                (PathSeg::Index(i), Node::Seq(items, _)) => items.get(*i)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// Reports serde's error at its place. An unknown field is reported with every other
    /// unknown key of the same mapping (serde stops at the first); `ignore`: keys taken out
    /// before deserialising (a component's `type`).
    fn serde_error(
        &mut self,
        base: &[PathSeg],
        label: &str,
        e: serde_path_to_error::Error<serde_json::Error>,
        ignore: &[&str],
    ) {
        let mut path = base.to_vec();
        for seg in e.path().iter() {
            match seg {
                serde_path_to_error::Segment::Map { key } => path.push(PathSeg::Key(key.clone())),
                serde_path_to_error::Segment::Seq { index } => path.push(PathSeg::Index(*index)),
                _ => {}
            }
        }
        let inner = e.into_inner().to_string();
        let unknown = parse_unknown(&inner, "unknown field");
        if let Some((field, _)) = &unknown {
            if path.last() == Some(&PathSeg::Key(field.clone())) {
                path.pop();
            }
        }
        let field_path = display_path(&path[base.len()..]);
        let within = if field_path.is_empty() { label.to_string() } else { format!("{label}.{field_path}") };
        if let Some((field, expected)) = unknown {
            let ignored = |k: &str| ignore.contains(&k) && path.len() == base.len();
            let mut unknowns: Vec<(String, Pos)> = match self.node(&path) {
                Some(Node::Map(entries, _)) => entries
                    .iter()
                    .filter(|(k, _, _)| !expected.contains(k) && !ignored(k))
                    .map(|(k, p, _)| (k.clone(), *p))
                    .collect(),
                _ => Vec::new(),
            };
            if !unknowns.iter().any(|(k, _)| *k == field) {
                unknowns = vec![(field, self.root.locate(&path))];
            }
            for (field, pos) in unknowns {
                let hint = suggest(&field, &expected).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
                let valid = if hint.is_empty() && !expected.is_empty() {
                    format!(" (valid: {})", expected.join(", "))
                } else {
                    String::new()
                };
                self.at(pos, format!("unknown field `{field}` in {within}{hint}{valid}"));
            }
        } else if let Some((variant, expected)) = parse_unknown(&inner, "unknown variant") {
            let hint = suggest(&variant, &expected).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
            self.at_path(
                &path,
                format!("invalid value `{variant}` for {within}{hint} (valid: {})", expected.join(", ")),
            );
        } else {
            self.at_path(&path, format!("{within}: {inner}"));
        }
    }
}

/// Parses serde's "unknown field `x`, expected one of `a`, `b`" (or "expected `a`").
fn parse_unknown(msg: &str, prefix: &str) -> Option<(String, Vec<String>)> {
    let rest = msg.strip_prefix(prefix)?.trim_start();
    let mut ticks = rest.split('`').skip(1).step_by(2).map(str::to_string);
    let name = ticks.next()?;
    Some((name, ticks.collect()))
}

/// The nearest valid name, when it is close enough to be a likely typo.
pub fn suggest(given: &str, valid: &[impl AsRef<str>]) -> Option<String> {
    valid
        .iter()
        .map(|v| (strsim::damerau_levenshtein(given, v.as_ref()), v.as_ref()))
        .filter(|(d, v)| *d <= 2.max(v.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, v)| v.to_string())
}

fn display_path(path: &[PathSeg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            PathSeg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            PathSeg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

impl Pipeline {
    /// Reads, overrides, validates and resolves a pipeline file. All problems are returned
    /// together.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Pipeline, ConfigErrors> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: file.clone(),
                pos: None,
                message: format!("could not read the pipeline file: {e}"),
            }])
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Pipeline::from_yaml(&text, &file, &base, overrides)
    }

    /// As [`Pipeline::load`], from YAML text; relative paths resolve against `base`.
    pub fn from_yaml(text: &str, file: &str, base: &Path, overrides: &[String]) -> Result<Pipeline, ConfigErrors> {
        Self::from_yaml_unsorted(text, file, base, overrides).map_err(ConfigErrors::sorted)
    }

    fn from_yaml_unsorted(text: &str, file: &str, base: &Path, overrides: &[String]) -> Result<Pipeline, ConfigErrors> {
        let root = yaml::parse(text).map_err(|e| {
            ConfigErrors(vec![ConfigError { file: file.to_string(), pos: Some(e.pos), message: e.message }])
        })?;
        Self::from_node_unsorted(root, file, base, overrides, &[])
    }

    /// As [`Pipeline::from_yaml`], from an already parsed document (a pipeline written inline
    /// in an experiment file keeps that file's positions); the files in `pending` need not
    /// exist yet (an earlier stage writes them).
    pub fn from_node(
        root: Node,
        file: &str,
        base: &Path,
        overrides: &[String],
        pending: &[PathBuf],
    ) -> Result<Pipeline, ConfigErrors> {
        Self::from_node_unsorted(root, file, base, overrides, pending).map_err(ConfigErrors::sorted)
    }

    fn from_node_unsorted(
        mut root: Node,
        file: &str,
        base: &Path,
        overrides: &[String],
        pending: &[PathBuf],
    ) -> Result<Pipeline, ConfigErrors> {
        let mut errors = Vec::new();
        for (i, o) in overrides.iter().enumerate() {
            if let Err(message) = apply_override(&mut root, o, Pos::of_override(i)) {
                errors.push(ConfigError { file: format!("--set {o}"), pos: None, message });
            }
        }
        let mut c = Checker { file: file.to_string(), root: &root, overrides, errors };
        let Node::Map(entries, _) = &root else {
            c.at(root.pos(), "a pipeline must be a mapping with name, source, steps and sink".into());
            return Err(ConfigErrors(c.errors));
        };
        for (key, pos, _) in entries {
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                let hint = suggest(key, TOP_LEVEL_KEYS).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
                c.at(*pos, format!("unknown top-level key `{key}`{hint} (valid: {})", TOP_LEVEL_KEYS.join(", ")));
            }
        }
        let key = |k: &str| vec![PathSeg::Key(k.into())];
        let require = |c: &mut Checker, k: &str| {
            if root.get(k).is_none() {
                c.at(root.pos(), format!("missing required key `{k}`"));
                false
            } else {
                true
            }
        };
        let name = if require(&mut c, "name") { c.plain::<String>(key("name"), "name") } else { None };
        let seed = if root.get("seed").is_some() { c.plain::<u64>(key("seed"), "seed") } else { Some(default_seed()) };
        let source = if require(&mut c, "source") {
            c.tagged(key("source"), "source", Source::TYPES, Source::from_type_and_value)
        } else {
            None
        };
        let sink = if require(&mut c, "sink") {
            c.tagged(key("sink"), "sink", Sink::TYPES, Sink::from_type_and_value)
        } else {
            None
        };
        let mut steps = Vec::new();
        let mut steps_ok = true;
        match root.get("steps") {
            None => {}
            Some(Node::Seq(items, _)) => {
                for i in 0..items.len() {
                    let path = vec![PathSeg::Key("steps".into()), PathSeg::Index(i)];
                    match c.tagged(path, "step", PipelineStep::TYPES, PipelineStep::from_type_and_value) {
                        Some(s) => steps.push(s),
                        None => steps_ok = false,
                    }
                }
            }
            Some(other) => {
                c.at(other.pos(), "`steps` must be a list".into());
                steps_ok = false;
            }
        }
        if steps_ok {
            check_steps(&mut c, &steps);
        }
        let (Some(name), Some(seed), Some(mut source), Some(mut sink)) = (name, seed, source, sink) else {
            return Err(ConfigErrors(c.errors));
        };
        source.resolve_paths(&base_for(overrides, "source.path", base), &base_for(overrides, "source.splits", base));
        resolve(sink.path_mut(), &base_for(overrides, "sink.path", base));
        for (i, step) in steps.iter_mut().enumerate() {
            let kind = step.type_name();
            for (field, path) in step.paths_mut() {
                resolve(path, &base_for(overrides, &format!("steps[{i}].{field}"), base));
                if !path.exists() && !pending.contains(path) {
                    let here = [PathSeg::Key("steps".into()), PathSeg::Index(i), PathSeg::Key(field.into())];
                    c.at_path(&here, format!("steps[{i}] ({kind}).{field}: '{}' does not exist", path.display()));
                }
            }
        }
        for (field, message) in source.check() {
            c.at_path(
                &[PathSeg::Key("source".into()), PathSeg::Key(field.into())],
                format!("source.{field}: {message}"),
            );
        }
        for (field, message) in sink.check() {
            c.at_path(&[PathSeg::Key("sink".into()), PathSeg::Key(field.into())], format!("sink.{field}: {message}"));
        }
        if !c.errors.is_empty() || !steps_ok {
            return Err(ConfigErrors(c.errors));
        }
        let detected = source.detect_fields();
        Ok(Pipeline { name, seed, source, steps, sink, detected })
    }

    /// The resolved configuration as canonical JSON (for the manifest and its checksum).
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(self).expect("a pipeline always serialises")
    }

    /// The pipeline ready to read: labels that are names numbered in sorted order when there is
    /// no `label_map` ([`Source::find_labels`]). That is a pass over the corpus's label field,
    /// so it is made when a run (or a task's scan, or `stats`) starts, not when the
    /// configuration is read; the configuration and its hash stay as written.
    pub fn with_labels_found(&self) -> anyhow::Result<std::borrow::Cow<'_, Pipeline>> {
        if !self.source.may_have_label_names() {
            return Ok(std::borrow::Cow::Borrowed(self));
        }
        let mut p = self.clone();
        if let Some(found) = p.source.find_labels()? {
            p.detected.push(found);
        }
        Ok(std::borrow::Cow::Owned(p))
    }

    /// SHA-256 of [`Self::canonical_json`]: the `config_sha256` of the manifest, the journal,
    /// and a task array's scan files and task manifests.
    pub fn config_sha256(&self) -> String {
        crate::contract::checksum::sha256_bytes(self.canonical_json().as_bytes())
    }
}

/// A YAML configuration file other than a pipeline (e.g. a training config): parsed with
/// positions and `--set` overrides applied, deserialised into one typed struct with the same
/// located, suggestion-carrying errors as pipelines.
pub struct YamlFile {
    pub file: String,
    pub root: Node,
    /// The file's folder: relative paths in it resolve against this.
    pub base: PathBuf,
    /// The `--set` overrides applied: a path they give is relative to the current directory.
    overrides: Vec<String>,
    errors: Vec<ConfigError>,
}

impl YamlFile {
    pub fn load(path: &Path, overrides: &[String]) -> Result<YamlFile, ConfigErrors> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError { file: file.clone(), pos: None, message: format!("could not read: {e}") }])
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::from_text(&text, &file, &base, overrides)
    }

    pub fn from_text(text: &str, file: &str, base: &Path, overrides: &[String]) -> Result<YamlFile, ConfigErrors> {
        let root = yaml::parse(text).map_err(|e| {
            ConfigErrors(vec![ConfigError { file: file.to_string(), pos: Some(e.pos), message: e.message }])
        })?;
        Ok(Self::from_node(root, file, base, overrides))
    }

    /// A parsed document (e.g. a mapping inside an experiment file), with `overrides` applied.
    pub fn from_node(mut root: Node, file: &str, base: &Path, overrides: &[String]) -> YamlFile {
        let mut errors = Vec::new();
        for (i, o) in overrides.iter().enumerate() {
            if let Err(message) = apply_override(&mut root, o, Pos::of_override(i)) {
                errors.push(ConfigError { file: format!("--set {o}"), pos: None, message });
            }
        }
        YamlFile { file: file.to_string(), root, base: base.to_path_buf(), overrides: overrides.to_vec(), errors }
    }

    /// The whole document as `T`; `what` names it in messages ("train config").
    pub fn deserialize<T: serde::de::DeserializeOwned>(&mut self, what: &str) -> Option<T> {
        let mut c =
            Checker { file: self.file.clone(), root: &self.root, overrides: &self.overrides, errors: Vec::new() };
        let v = c.plain::<T>(Vec::new(), what);
        self.errors.extend(c.errors);
        v
    }

    /// Records a problem at `key` (a path like `model.preset` or `steps[2].x`).
    pub fn error(&mut self, key: &str, message: String) {
        let pos = yaml::parse_path(key).map(|p| self.root.locate(&p)).unwrap_or_default();
        self.errors.push(located(&self.file, &self.overrides, pos, format!("{key}: {message}")));
    }

    /// Resolves the relative path at `key` (`data`, `model.init_from`) against the file's
    /// folder — or against the current directory when a `--set` gave it, as every path typed on
    /// a command line is — into an absolute path without `..`.
    pub fn resolve(&self, key: &str, path: &mut PathBuf) {
        resolve(path, &base_for(&self.overrides, key, &self.base));
    }

    /// All problems found so far, sorted; `Ok` when none.
    pub fn finish(self) -> Result<(), ConfigErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(self.errors).sorted())
        }
    }
}

/// Cross-step rules: noise filters need a score, dedup, near_dedup and tokenize appear once, sequences
/// need tokens and come last.
fn check_steps(c: &mut Checker, steps: &[PipelineStep]) {
    let mut scored = false;
    let mut dedups = 0;
    let mut near_dedups = 0;
    let mut tokenized = false;
    let mut sequenced = false;
    for (i, step) in steps.iter().enumerate() {
        let here = |field: &str| vec![PathSeg::Key("steps".into()), PathSeg::Index(i), PathSeg::Key(field.into())];
        if sequenced {
            c.at_path(
                &here("type"),
                format!("steps[{i}] ({}) comes after the sequence step, which must be the last step", step.type_name()),
            );
        }
        match step {
            PipelineStep::Tokenize(t) => {
                if tokenized {
                    c.at_path(&here("type"), format!("steps[{i}]: only one tokenize step is allowed"));
                }
                tokenized = true;
                if t.vocab.is_some() == t.tokenizer.is_some() {
                    c.at_path(
                        &here("type"),
                        format!("steps[{i}] (tokenize) needs exactly one of `vocab` (a vocab.txt) or `tokenizer` (a tokenizer.json)"),
                    );
                }
                if t.max_word_chars == 0 {
                    c.at_path(
                        &here("max_word_chars"),
                        format!("steps[{i}] (tokenize).max_word_chars must be at least 1"),
                    );
                }
            }
            PipelineStep::ClassifySequences(_) | PipelineStep::PretrainSequences(_) => {
                let kind = step.type_name();
                if !tokenized {
                    c.at_path(&here("type"), format!("steps[{i}] ({kind}) needs a tokenize step before it"));
                }
                sequenced = true;
                let problems = match step {
                    PipelineStep::ClassifySequences(s) => s.check(),
                    PipelineStep::PretrainSequences(s) => s.check(),
                    _ => Vec::new(),
                };
                for (field, message) in problems {
                    c.at_path(&here(field), format!("steps[{i}] ({kind}).{field}: {message}"));
                }
            }
            PipelineStep::NoiseScore(_) => scored = true,
            PipelineStep::Dedup(_) => {
                dedups += 1;
                if dedups > 1 {
                    c.at_path(&here("type"), format!("steps[{i}]: only one dedup step is allowed"));
                }
            }
            PipelineStep::NearDedup(n) => {
                near_dedups += 1;
                if near_dedups > 1 {
                    c.at_path(&here("type"), format!("steps[{i}]: only one near_dedup step is allowed"));
                }
                if let Err(e) = n.params().check() {
                    c.at_path(&here("type"), format!("steps[{i}] (near_dedup): {e}"));
                }
            }
            PipelineStep::Filter(f) => {
                for (field, set) in
                    [("max_noise", f.max_noise.is_some()), ("max_noise_quantile", f.max_noise_quantile.is_some())]
                {
                    if set && !scored {
                        c.at_path(
                            &here(field),
                            format!("steps[{i}] (filter).{field} needs a noise_score step before it"),
                        );
                    }
                }
                if let Some(q) = f.max_noise_quantile {
                    if !(q > 0.0 && q <= 1.0) {
                        c.at_path(
                            &here("max_noise_quantile"),
                            format!("steps[{i}] (filter).max_noise_quantile must be in (0, 1], got {q}"),
                        );
                    }
                }
                for (lo, hi, a, b) in [
                    ("min_words", "max_words", f.min_words, f.max_words),
                    ("min_chars", "max_chars", f.min_chars, f.max_chars),
                ] {
                    if let (Some(a), Some(b)) = (a, b) {
                        if a > b {
                            c.at_path(&here(lo), format!("steps[{i}] (filter): {lo} ({a}) is greater than {hi} ({b})"));
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// The folder a relative path at `key` is relative to: the current directory when an override
/// set it (`--set key=…`, or a `--set` of a mapping or list that holds it), else `base`, the
/// YAML file's folder.
fn base_for(overrides: &[String], key: &str, base: &Path) -> PathBuf {
    let from_command_line = overrides.iter().filter_map(|o| o.split_once('=')).any(|(k, _)| {
        let k = k.trim();
        key == k || key.strip_prefix(k).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    });
    if from_command_line {
        std::env::current_dir().unwrap_or_else(|_| base.to_path_buf())
    } else {
        base.to_path_buf()
    }
}

/// Relative paths are relative to `base`; the result is absolute and free of `..`.
/// Object-storage URLs (`s3://…`) are left as they are.
pub fn resolve_path(path: &mut PathBuf, base: &Path) {
    resolve(path, base)
}

fn resolve(path: &mut PathBuf, base: &Path) {
    crate::storage::resolve_path(path, base)
}

/// Applies one `--set key.path[2].field=value` to `root`; the value is parsed as YAML. Its
/// nodes, and any key the override adds, are placed at `pos` (where errors about them — a bad
/// value, a misspelt key — are reported).
pub(crate) fn apply_override(root: &mut Node, spec: &str, pos: Pos) -> Result<(), String> {
    let (key, value) = spec.split_once('=').ok_or("expected key=value, e.g. steps[3].max_noise=12")?;
    let path = yaml::parse_path(key.trim())?;
    let value = yaml::parse(value).map_err(|e| format!("value is not valid YAML: {}", e.message))?;
    let mut value = match value {
        Node::Map(entries, _) if entries.is_empty() => Node::Scalar(Value::Null, pos),
        v => v,
    };
    value.place_at(pos);
    root.set(&path, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name: t\nsource: { type: jsonl, path: in.jsonl }\nsteps:\n  - type: html_strip\n  - type: noise_score\n  - type: filter\n    max_noise: 15\nsink: { type: parquet, path: out }\n";

    fn load(text: &str, overrides: &[&str]) -> Result<Pipeline, ConfigErrors> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.jsonl"), "{\"text\": \"x\"}\n").unwrap();
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Pipeline::from_yaml(text, "p.yaml", dir.path(), &o)
    }

    #[test]
    fn good_pipeline_loads_and_resolves_paths() {
        let p = load(GOOD, &[]).unwrap();
        assert_eq!(p.steps.len(), 3);
        assert!(p.source.path().is_absolute());
        assert_eq!(p.seed, 42);
    }

    #[test]
    fn unknown_field_has_position_and_suggestion() {
        let text = GOOD.replace("max_noise: 15", "max_nosie: 15");
        let e = load(&text, &[]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("p.yaml:7:5: unknown field `max_nosie` in steps[2] (filter), did you mean `max_noise`?"),
            "{msg}"
        );
    }

    #[test]
    fn every_unknown_key_of_a_block_is_reported() {
        // The csv source's keys are text_column / label_column: both wrong keys are named.
        let text = GOOD.replace(
            "source: { type: jsonl, path: in.jsonl }",
            "source:\n  type: csv\n  path: in.jsonl\n  text: review\n  label: sentiment",
        );
        let msg = load(&text, &[]).unwrap_err().to_string();
        assert!(msg.contains("p.yaml:5:3: unknown field `text` in source (csv)"), "{msg}");
        assert!(msg.contains("p.yaml:6:3: unknown field `label` in source (csv)"), "{msg}");
        assert!(!msg.contains("`type`"), "type is not an unknown field: {msg}");
        let text = GOOD.replace("max_noise: 15", "max_nosie: 15\n    min_wrds: 3");
        let msg = load(&text, &[]).unwrap_err().to_string();
        assert!(msg.contains("`max_nosie` in steps[2] (filter), did you mean `max_noise`?"), "{msg}");
        assert!(msg.contains("`min_wrds` in steps[2] (filter), did you mean `min_words`?"), "{msg}");
    }

    #[test]
    fn all_errors_are_gathered() {
        let text = "name: t\nsourc: {}\nsource: { type: jsonl, path: missing.jsonl }\nsteps:\n  - type: html_strp\n  - type: filter\n    min_words: lots\nsink: { type: parquet, path: out, compresion: zstd }\n";
        let e = load(text, &[]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("p.yaml:2:1: unknown top-level key `sourc`, did you mean `source`?"), "{msg}");
        assert!(
            msg.contains("p.yaml:5:11: unknown step type `html_strp` in steps[0], did you mean `html_strip`?"),
            "{msg}"
        );
        assert!(msg.contains("p.yaml:7:16: steps[1] (filter).min_words: invalid type: string \"lots\""), "{msg}");
        assert!(msg.contains("did you mean `compression`?"), "{msg}");
        assert_eq!(e.0.len(), 4, "{msg}");
    }

    #[test]
    fn missing_file_is_reported_at_its_key() {
        let text = GOOD.replace("in.jsonl", "nope.jsonl");
        let msg = load(&text, &[]).unwrap_err().to_string();
        assert!(msg.contains("p.yaml:2:30: source.path: '") && msg.contains("nope.jsonl' does not exist"), "{msg}");
    }

    #[test]
    fn overrides_apply_and_are_validated() {
        let p = load(GOOD, &["steps[2].max_noise=12", "seed=7"]).unwrap();
        assert_eq!(p.seed, 7);
        match &p.steps[2] {
            PipelineStep::Filter(f) => assert_eq!(f.max_noise, Some(12.0)),
            s => panic!("{s:?}"),
        }
        let e = load(GOOD, &["steps[9].max_noise=1"]).unwrap_err();
        assert!(e.to_string().contains("--set steps[9].max_noise=1: index [9] is out of range"), "{e}");
        // A bad value is reported against the `--set` that gave it, not a line of the file.
        let e = load(GOOD, &["seed=7", "steps[2].max_noise=loud"]).unwrap_err();
        assert!(e.to_string().starts_with("--set steps[2].max_noise=loud: "), "{e}");
        assert!(e.to_string().contains("max_noise: invalid type"), "{e}");
        let e = load(GOOD, &["sink={type: parquet, path: out, shard_rowz: 5}"]).unwrap_err();
        assert!(e.to_string().starts_with("--set sink={type: parquet"), "{e}");
        assert!(e.to_string().contains("shard_rowz"), "{e}");
    }

    #[test]
    fn a_misspelt_override_key_is_reported_against_the_argument() {
        // Once, against the `--set` that added the key, not at its parent's line of the file.
        let e = load(GOOD, &["seed=7", "sink.pathh=/x"]).unwrap_err();
        assert_eq!(e.to_string(), "--set sink.pathh=/x: unknown field `pathh` in sink (parquet), did you mean `path`?");
        let e = load(GOOD, &["sed=7"]).unwrap_err();
        assert!(e.to_string().starts_with("--set sed=7: unknown top-level key `sed`, did you mean `seed`?"), "{e}");
        let e = load(GOOD, &["steps[2].max_nosie=3"]).unwrap_err();
        assert!(e.to_string().starts_with("--set steps[2].max_nosie=3: unknown field `max_nosie`"), "{e}");
        // A typed file other than a pipeline (a train config) the same way.
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Small {
            #[allow(dead_code)]
            learning_rate: f64,
        }
        let overrides = ["lerning_rate=2".to_string()];
        let mut y = YamlFile::from_text("learning_rate: 1\n", "t.yaml", Path::new("."), &overrides).unwrap();
        assert!(y.deserialize::<Small>("train config").is_none());
        assert_eq!(
            y.finish().unwrap_err().to_string(),
            "--set lerning_rate=2: unknown field `lerning_rate` in train config, did you mean `learning_rate`?"
        );
    }

    #[test]
    fn noise_filter_without_score_is_an_error() {
        let text = GOOD.replace("  - type: noise_score\n", "");
        let msg = load(&text, &[]).unwrap_err().to_string();
        assert!(msg.contains("needs a noise_score step before it"), "{msg}");
    }

    #[test]
    fn bad_enum_value_suggests() {
        let text = GOOD.replace("  - type: html_strip\n", "  - type: unicode_normalize\n    form: nfkz\n");
        let msg = load(&text, &[]).unwrap_err().to_string();
        assert!(msg.contains("invalid value `nfkz`") && msg.contains("(valid: nfc, nfd, nfkc, nfkd)"), "{msg}");
    }

    #[test]
    fn suggestions_only_for_close_names() {
        assert_eq!(suggest("max_nosie", &["max_noise", "min_words"]).as_deref(), Some("max_noise"));
        assert_eq!(suggest("banana", &["max_noise", "min_words"]), None);
    }
}
