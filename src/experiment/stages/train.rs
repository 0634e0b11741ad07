//! A training stage: `bertpipe train` with `output_dir: OUT/<stage>/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{json, Value};

use super::{Outcome, RunCx, StageKind};
use crate::config::YamlFile;
use crate::experiment::config::{
    as_str, json_str, map_get, pipeline_task, stage_doc, train_config, Ctx, Errors, Kind, Raw, Reads, Spec, Wire,
};
use crate::train::config::TrainConfig;

impl StageKind for TrainConfig {
    fn canonical(&self) -> Value {
        serde_json::to_value(self).expect("a train config serialises")
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
            eprintln!("{}", crate::train::format_summary(&s));
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
    let (doc, file, base) = stage_doc(ctx, r, &["init_from"], errs)?;
    let mut overrides = r.overrides.clone();
    overrides.push(format!("output_dir={}", json_str(out)));
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
                        format!("{}.data: `{name}` writes {have} shards, but this stage trains `task: {t}`", r.name),
                    );
                }
            }
            deps.push(name);
            overrides.push(format!("data={}", json_str(&up.out)));
        }
        Some((Wire::Path(p), _)) => {
            inputs.push(p.clone());
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
