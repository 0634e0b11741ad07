//! A pipeline stage: `bertpipe pipeline run` of its pipeline into `OUT/<stage>/`, or the merge
//! of a task array that ran it (`bertpipe run … --stage NAME --task-index I --task-count N`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{Outcome, RunCx, StageKind};
use crate::config::yaml::{Node, PathSeg};
use crate::config::Pipeline;
use crate::contract::manifest::{MANIFEST, TASKS_DIR};
use crate::experiment::config::{json_str, stage_doc, wire_vocab, Ctx, Errors, Raw, Reads, Spec};

impl StageKind for Pipeline {
    fn canonical(&self) -> Value {
        serde_json::to_value(self).expect("a pipeline serialises")
    }

    fn writes(&self, _out: &Path) -> Vec<PathBuf> {
        vec![self.sink.path().to_path_buf()]
    }

    /// What readers of the shards get: the manifest without its record of how the shards were
    /// made (the resolved configuration, its hash, the pipeline's name and bertpipe's version),
    /// but with what readers take from that configuration (the source's label names, the
    /// sequence-building settings a trainer masks with). The manifest lists every shard with its
    /// SHA-256, and the shards themselves are verified as outputs: a pipeline re-run that writes
    /// the same shards leaves everything after it up to date.
    fn identity(&self, out: &Path, _outputs: &BTreeMap<String, String>) -> Result<String> {
        let path = out.join(MANIFEST);
        let bytes = std::fs::read(&path).with_context(|| format!("could not read '{}'", path.display()))?;
        let mut m: Value =
            serde_json::from_slice(&bytes).with_context(|| format!("'{}' is not JSON", path.display()))?;
        let config = m.get("config").cloned().unwrap_or(Value::Null);
        if let Some(o) = m.as_object_mut() {
            for how_made in ["config", "config_sha256", "created_by", "name", "seed"] {
                o.remove(how_made);
            }
            let source = &config["source"];
            let sequences: Vec<&Value> = config["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| matches!(s["type"].as_str(), Some("classify_sequences" | "pretrain_sequences")))
                .collect();
            o.insert(
                "read_from_config".into(),
                json!({"source_type": source["type"], "label_map": source["label_map"], "sequences": sequences}),
            );
        }
        Ok(crate::contract::checksum::sha256_bytes(&serde_json::to_vec(&m)?))
    }

    fn run(&self, cx: &RunCx) -> Result<Outcome> {
        let started = Instant::now();
        let out = &cx.stage.out;
        let manifest = match leftover_tasks(self, cx)? {
            Some(m) => m,
            None => {
                let journal = out.join(crate::contract::manifest::JOURNAL);
                let resume = cx.resume && journal.exists();
                let opts =
                    crate::pipeline::RunOptions { threads: 0, resume, overwrite: !resume, quiet: cx.quiet, task: None };
                let s = crate::pipeline::run(self, &opts)?;
                if !cx.quiet {
                    eprintln!("{}", crate::pipeline::format_summary(&s));
                }
                s.manifest
            }
        };
        let (docs_in, docs_out, rows) =
            manifest.splits.values().fold((0, 0, 0), |(a, b, c), x| (a + x.docs_in, b + x.docs_out, c + x.rows));
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        Ok(Outcome::Done(json!({"docs_in": docs_in, "docs_out": docs_out, "rejected": docs_in - docs_out,
            "rows": rows, "docs_per_second": (docs_in as f64 / secs).round()})))
    }
}

/// A task array left in the stage's folder ([`super::leftover_array`]): stale when its tasks ran
/// another configuration, or none is recorded and it has no scan either.
fn leftover_tasks(p: &Pipeline, cx: &RunCx) -> Result<Option<crate::contract::manifest::Manifest>> {
    let out = &cx.stage.out;
    let stale = || {
        let recorded = crate::pipeline::tasks::recorded_configs(out);
        let scanned = out.join(TASKS_DIR).join(crate::pipeline::tasks::SCAN_DIR).is_dir();
        let want = p.config_sha256();
        Ok(recorded.iter().any(|c| c != &want) || (recorded.is_empty() && !scanned))
    };
    super::leftover_array(cx, "it ran another configuration", stale, || crate::pipeline::tasks::merge(out, cx.quiet))
}

/// Reads a pipeline stage: its file (or `base:` and keys), a tokenize step's `vocab:` naming a
/// vocab stage wired to that stage's vocab.txt, `sink.path` set to `OUT/<stage>`; `name` and
/// the sink's `type` default ([`defaults`]). It reads its source and every file a step names.
pub(in crate::experiment) fn resolve(ctx: &Ctx, r: &Raw, reads: &mut Reads, errs: &mut Errors) -> Option<Spec> {
    let Reads { out, deps, inputs } = reads;
    crate::experiment::config::refuse_chain_key(r, "sink.path", errs);
    let (mut doc, file, base) = stage_doc(ctx, r, &[], errs)?;
    defaults(&mut doc, &r.name);
    let pending = wire_vocab(ctx, r, &mut doc, deps, errs);
    let mut overrides = r.overrides.clone();
    overrides.push(format!("sink.path={}", json_str(out)));
    let p = match Pipeline::from_node(doc, &file, &base, &overrides, &pending) {
        Ok(p) => p,
        Err(e) => {
            errs.extend_stage(&r.name, e);
            return None;
        }
    };
    inputs.extend(files_read(&p));
    Some(Spec::Pipeline(Box::new(p)))
}

/// What a pipeline stage need not write, as the chain fills it in: `name` (the stage's, for the
/// manifest and the logs) and a Parquet sink (`sink: { type: parquet }`; its `path` is always
/// `OUT/<stage>`). Each only where the document has none, so a stage's file or `base:` keeps its
/// own. A pipeline file run by `bertpipe pipeline run` still names both.
fn defaults(doc: &mut Node, stage: &str) {
    if !matches!(doc, Node::Map(..)) {
        // Not a mapping: reported as such when the pipeline is read.
        return;
    }
    let at = doc.pos();
    let here = |v: &str| Node::Scalar(Value::String(v.to_string()), at);
    if doc.get("name").is_none() {
        let _ = doc.set(&[PathSeg::Key("name".into())], here(stage));
    }
    let sink_type = match doc.get("sink") {
        None => true,
        Some(sink) => matches!(sink, Node::Map(..)) && sink.get("type").is_none(),
    };
    if sink_type {
        let _ = doc.set(&[PathSeg::Key("sink".into()), PathSeg::Key("type".into())], here("parquet"));
    }
}

/// The files a pipeline reads: its source and every file a step names (a vocabulary, a
/// tokenizer).
pub(in crate::experiment) fn files_read(p: &Pipeline) -> Vec<PathBuf> {
    let mut paths = p.source.input_paths();
    for step in p.steps.clone().iter_mut() {
        paths.extend(step.paths_mut().into_iter().map(|(_, p)| p.clone()));
    }
    paths
}
