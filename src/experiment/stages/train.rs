//! A training stage: `bertpipe train` with `output_dir: OUT/<stage>/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{json, Value};

use super::{Outcome, RunCx, StageKind};
use crate::config::yaml::{self, Node, Pos};
use crate::config::YamlFile;
use crate::experiment::config::{
    as_str, map_get, pipeline_task, stage_doc, train_config, Ctx, Errors, Kind, Raw, Reads, Spec, Wire,
};
use crate::train::config::TrainConfig;

impl StageKind for TrainConfig {
    fn canonical(&self) -> Value {
        serde_json::to_value(self).expect("a train config serialises")
    }

    /// The number of processes it trains on: the global batch is every rank's batches
    /// together, so a model trained by two ranks is not the one a single process trains. Run
    /// by name (`--stage`), the launcher's world; in the whole chain (one process), whatever
    /// its record says — a stage trained on N ranks by `--stage` is taken as it is — else 1.
    fn environment(&self, cx: &super::EnvCx) -> Result<BTreeMap<String, String>> {
        let size = match cx.alone {
            true => crate::train::dist::World::from_vars(|k| std::env::var(k).ok())?.size.to_string(),
            false => super::as_recorded("1"),
        };
        Ok([("world_size".to_string(), size)].into())
    }

    fn writes(&self, _out: &Path) -> Vec<PathBuf> {
        vec![self.output_dir.clone()]
    }

    /// The model (`final/`, and `best/` when the run keeps one) and the metrics log. The
    /// intermediate `checkpoint-N/` folders are the run's working state (rotated as it goes),
    /// not its result.
    fn outputs(&self, out: &Path) -> Vec<PathBuf> {
        vec![out.join("final"), out.join("best"), out.join("metrics.jsonl")]
    }

    /// Later stages (exports) read the models only: their weights, configuration and
    /// vocabulary, not the trainer state beside them (which logs the run's speed) nor the
    /// metrics log.
    fn identity(&self, _out: &Path, outputs: &BTreeMap<String, String>) -> Result<String> {
        use crate::train::checkpoint::{OPTIMIZER, STATE};
        let models: BTreeMap<String, String> = outputs
            .iter()
            .filter(|(rel, _)| {
                let (dir, file) = rel.split_once('/').unwrap_or(("", rel));
                matches!(dir, "final" | "best") && file != STATE && file != OPTIMIZER
            })
            .map(|(rel, sha)| (rel.clone(), sha.clone()))
            .collect();
        Ok(crate::experiment::digest::digest_of_tree(&models))
    }

    fn run(&self, cx: &RunCx) -> Result<Outcome> {
        let resume = cx.resume && crate::train::checkpoint::newest(&self.output_dir).is_some();
        let opts = crate::train::TrainOptions { resume, overwrite: !resume, quiet: cx.quiet, ..Default::default() };
        let s = crate::train::run(self, &opts).map_err(|e| match resume {
            // The error under it is `train --resume`'s; in a chain, starting over is `--force`.
            true => e.context(format!(
                "resuming `{name}` failed; `bertpipe run {} --force {name}` starts it over",
                cx.exp.file.display(),
                name = cx.stage.name
            )),
            false => e,
        })?;
        if !cx.quiet {
            eprintln!("{}", crate::train::format_summary(&s, "the same `bertpipe run` continues it"));
        }
        if s.interrupted {
            return Ok(Outcome::Interrupted);
        }
        let last_loss = std::fs::read_to_string(self.output_dir.join("metrics.jsonl"))
            .ok()
            .and_then(|t| t.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok()?.get("loss")?.as_f64()));
        let mut f = json!({"steps": s.steps, "epochs": s.epochs, "final_loss": last_loss});
        if let Some(e) = &s.last_eval {
            for k in ["eval_accuracy", "eval_f1", "eval_loss", "eval_mlm_accuracy", "eval_perplexity"] {
                if let Some(v) = e.get(k) {
                    f[k] = v.clone();
                }
            }
        }
        Ok(Outcome::Done(f))
    }
}

/// Reads a training stage: its file (or `base:` and keys), `data:` wired to a pipeline stage (or
/// the nearest earlier one writing this task's shards), `init_from:` to a train stage's
/// `final/`, `output_dir` set to `OUT/<stage>`. Every path it reads is an input, wherever it was
/// written.
pub(in crate::experiment) fn resolve(ctx: &Ctx, r: &Raw, reads: &mut Reads, errs: &mut Errors) -> Option<Spec> {
    let Reads { out, deps, inputs } = reads;
    crate::experiment::config::refuse_chain_key(r, "output_dir", errs);
    let (doc, file, base) = stage_doc(ctx, r, &["init_from"], errs)?;
    let task = map_get(&doc, "task").and_then(|(n, _)| as_str(n));
    if task.is_none() && map_get(&doc, "source").is_some() && map_get(&doc, "steps").is_some() {
        // A pipeline file given to a train stage: that is the mistake, not the shards the
        // training could not find (it looks for shards of its `task`, which a pipeline lacks).
        // The file as the experiment names it: the stage's own, or its `base:`.
        let named = match (&r.node, map_get(&r.node, "base")) {
            (Node::Scalar(Value::String(p), _), _) => p.clone(),
            (_, Some((b, _))) => as_str(b).unwrap_or_else(|| file.clone()),
            _ => file.clone(),
        };
        errs.at(
            Some(r.pos),
            format!(
                "{}: '{named}' is a pipeline file (`source:`, `steps:`), not a training file (`task:`, `model:`, …); \
                 a pipeline runs as a stage named after it or with `kind: pipeline`",
                r.name
            ),
        );
        return None;
    }
    fn path_value(p: &Path) -> Value {
        Value::String(p.display().to_string())
    }
    // What the chain sets over the document after the `--set`s (its wires win), each placed where
    // it was written — a wire's value in the experiment file, else the key it replaces — so an
    // error about it is reported there, never against a `--set` nobody typed. `output_dir` is
    // always `OUT/<stage>`, `data` the wired shards: a stage need not give either.
    let mut sets: Vec<(&str, Value, Option<Pos>)> = vec![("output_dir", path_value(out), None)];
    // data: the mapping's (a stage or a path), else the nearest earlier pipeline of
    // this task's shards, else the file's own path.
    let explicit = map_get(&r.node, "data").and_then(|(n, p)| Some((as_str(n)?, p, n.pos())));
    let data = match explicit {
        Some((v, pos, at)) => Some((ctx.wire(&r.name, "data", &v, pos, &[Kind::Pipeline], errs)?, Some(pos), Some(at))),
        None => {
            let nearest = ctx.nearest(Kind::Pipeline, |s| pipeline_task(s).as_deref() == task.as_deref());
            if ctx.leans() {
                // The nearest pipeline stage of its task may be one that did not resolve: neither
                // the file's own `data:` nor an older stage's shards stand in for its.
                return None;
            }
            nearest.map(|s| (Wire::Stage(s.name.clone()), None, None))
        }
    };
    match data {
        Some((Wire::Stage(name), pos, at)) => {
            let up = ctx.done.iter().find(|s| s.name == name)?;
            if let (Some(t), Some(have)) = (task.as_deref(), pipeline_task(up)) {
                if t != have {
                    errs.at(
                        pos,
                        format!("{}.data: `{name}` writes {have} shards, but this stage trains `task: {t}`", r.name),
                    );
                }
            }
            sets.push(("data", path_value(&up.out), at));
            deps.push(name);
        }
        Some((Wire::Path(p), _, at)) => {
            sets.push(("data", path_value(&p), at));
            inputs.push(p);
        }
        // Nothing wired and no path of its own: say what would fill it in.
        // Without a `task:` no pipeline's shards can be chosen: the missing (or misspelt) key is
        // the mistake, not the pipeline stages before it.
        None if task.is_none() && map_get(&doc, "data").is_none() => {
            let keys: Vec<String> = match &doc {
                Node::Map(entries, _) => entries.iter().map(|(k, _, _)| k.clone()).collect(),
                _ => Vec::new(),
            };
            let near = keys.iter().find(|k| crate::config::suggest(k, &["task"]).is_some());
            let hint = near.map(|k| format!(" (`{k}` is not a key: did you mean `task`?)")).unwrap_or_default();
            errs.at(
                Some(r.pos),
                format!(
                    "{}: missing `task` (classify or pretrain){hint}, so no shards can be chosen to train on",
                    r.name
                ),
            );
            return None;
        }
        None if map_get(&doc, "data").is_none() && !r.overrides.iter().any(|o| o.starts_with("data=")) => {
            let shards = task.as_deref().map(|t| format!("{t} shards")).unwrap_or_else(|| "shards".into());
            errs.at(
                Some(r.pos),
                format!(
                    "{}: no pipeline stage of {shards} before it to train on; give `data:` (a pipeline stage or a shard folder)",
                    r.name
                ),
            );
            return None;
        }
        None => {}
    }
    let init = map_get(&r.node, "init_from")
        .or_else(|| map_get(&r.node, "model.init_from"))
        .and_then(|(n, p)| Some((as_str(n)?, p, n.pos())));
    if let Some((v, pos, at)) = init {
        let from = match ctx.wire(&r.name, "init_from", &v, pos, &[Kind::Train], errs)? {
            Wire::Stage(name) => {
                let p = ctx.stage_out(&name).join("final");
                deps.push(name);
                p
            }
            Wire::Path(p) => {
                inputs.push(p.clone());
                p
            }
        };
        sets.push(("model.init_from", path_value(&from), Some(at)));
        sets.push(("model.preset", Value::Null, Some(at)));
        sets.push(("model.config", Value::Null, Some(at)));
    }
    let mut y = YamlFile::from_node(doc, &file, &base, &r.overrides);
    for (key, value, at) in sets {
        let path = yaml::parse_path(key).expect("a train config key");
        let pos = at.unwrap_or_else(|| y.root.locate(&path));
        // A document that is not a mapping is reported as such when it is read.
        let _ = y.root.set(&path, Node::Scalar(value, pos));
    }
    let mut c = match train_config(y, deps) {
        Ok(c) => c,
        Err(e) => {
            errs.extend_stage(&r.name, e);
            return None;
        }
    };
    c.output_dir = out.to_path_buf();
    // Every path it reads is an input, wherever it was written (the experiment, a
    // `base:` file or the stage's own file); those a wired stage writes are covered by
    // that stage's output instead.
    let written_by_stages = |p: &Path| p.starts_with(ctx.out);
    for p in [Some(&c.data), c.model.init_from.as_ref(), c.model.config.as_ref()].into_iter().flatten() {
        if !written_by_stages(p) && !inputs.contains(p) {
            inputs.push(p.clone());
        }
    }
    Some(Spec::Train(Box::new(c)))
}
