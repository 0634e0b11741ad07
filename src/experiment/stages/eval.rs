//! An evaluation stage: `bertpipe eval` of an exported model on a split of shards, its report
//! in `OUT/<stage>/`, gated against a baseline model when one is named.

use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::{Outcome, RunCx, StageKind};
use crate::experiment::config::{
    as_str, export_data, map_get, output_of, stage_settings, Ctx, Errors, Kind, Raw, Reads, Spec, Wire,
};
use crate::onnx::eval::EvalSettings;

#[derive(Debug, Clone)]
pub struct Eval {
    /// The model: an export stage's model, or a path.
    pub model: PathBuf,
    /// Where the model comes from, for the report: the export stage's name (the nearest before
    /// this one when `model:` is not given) or the path.
    pub model_from: String,
    /// The shard folder: a pipeline stage's output, or a path.
    pub data: PathBuf,
    /// The model to gate against (an export stage or a path).
    pub baseline: Option<PathBuf>,
    /// The settings `bertpipe eval` takes as flags.
    pub settings: EvalSettings,
}

impl StageKind for Eval {
    fn canonical(&self) -> Value {
        json!({"model": self.model, "data": self.data, "baseline": self.baseline, "settings": self.settings})
    }

    /// The ONNX Runtime the model is scored in: its version is in `metrics.json`.
    fn environment(&self, cx: &super::EnvCx) -> Result<std::collections::BTreeMap<String, String>> {
        Ok([("onnxruntime".to_string(), cx.onnx_runtime(None)?)].into())
    }

    fn run(&self, cx: &RunCx) -> Result<Outcome> {
        let opts = self.options(&cx.stage.out, cx.quiet);
        let r = match leftover_tasks(cx, &opts)? {
            Some(r) => r,
            None => crate::onnx::eval::run(&opts)?,
        };
        if !cx.quiet {
            eprintln!("{}", crate::onnx::eval::format_report(&r));
        }
        let mut f = json!({"model": self.model_from, "rows": r.rows, "docs_per_second": r.throughput.docs_per_second});
        if r.nonfinite.rows > 0 {
            f["nonfinite_rows"] = json!(r.nonfinite.rows);
        }
        if r.tasks > 1 {
            f["tasks"] = json!(r.tasks);
        }
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
            f["mcnemar_p"] = json!(g.mcnemar_p);
        }
        if let Some(why) = r.failure() {
            bail!("{why} (see {})", cx.stage.out.join("metrics.json").display());
        }
        Ok(Outcome::Done(f))
    }
}

impl Eval {
    /// The call `bertpipe eval` would make, into the stage's folder. The chain reports leakage
    /// without being asked: the clean part's score too.
    pub fn options(&self, out: &std::path::Path, quiet: bool) -> crate::onnx::eval::EvalOptions {
        let mut opts = self.settings.options(
            self.model.clone(),
            self.data.clone(),
            self.baseline.clone(),
            crate::onnx::eval::ScoreLeaked::IfRecorded,
        );
        opts.out = Some(out.to_path_buf());
        opts.quiet = quiet;
        opts
    }
}

/// A task array left in the stage's folder ([`super::leftover_array`]): stale when its tasks
/// evaluated another model, data or settings than today's (their fingerprints).
fn leftover_tasks(cx: &RunCx, opts: &crate::onnx::eval::EvalOptions) -> Result<Option<crate::onnx::eval::EvalReport>> {
    let out = &cx.stage.out;
    let stale = || {
        let recorded = crate::onnx::eval::recorded_fingerprints(out);
        let want = crate::onnx::eval::fingerprint(opts)?;
        Ok(recorded.is_empty() || recorded.iter().any(|f| f != &want))
    };
    super::leftover_array(cx, "it evaluated another model, data or settings", stale, || crate::onnx::eval::merge(out))
}

/// Reads an eval stage: `model:` (or the nearest earlier export stage), `data:` (or the shards
/// that export's training read), `baseline:`, and the command's settings.
pub(in crate::experiment) fn resolve(ctx: &Ctx, r: &Raw, reads: &mut Reads, errs: &mut Errors) -> Option<Spec> {
    let Reads { deps, inputs, .. } = reads;
    let r = &r.with_overrides(errs);
    let get = |k: &str| map_get(&r.node, k).and_then(|(n, p)| Some((as_str(n)?, p)));
    let (model, trained_on, model_from) = match get("model") {
        Some((v, pos)) => match ctx.wire(&r.name, "model", &v, pos, &[Kind::Export], errs)? {
            Wire::Stage(n) => {
                deps.push(n.clone());
                (output_of(Kind::Export, &ctx.stage_out(&n), ""), export_data(ctx, &n), n)
            }
            Wire::Path(p) => {
                inputs.push(p.clone());
                let shown = p.display().to_string();
                (p, None, shown)
            }
        },
        None => match ctx.nearest(Kind::Export, |_| true) {
            Some(s) => {
                deps.push(s.name.clone());
                (output_of(Kind::Export, &s.out, ""), export_data(ctx, &s.name), s.name.clone())
            }
            None => {
                errs.at(Some(r.pos), format!("{}: no export stage before it; give `model:`", r.name));
                return None;
            }
        },
    };
    let data = match ctx.read_wire(r, "data", Kind::Pipeline, deps, inputs, errs)? {
        Some(p) => p,
        None => match trained_on {
            Some(n) => {
                deps.push(n.clone());
                ctx.stage_out(&n)
            }
            None => {
                errs.at(Some(r.pos), format!("{}: cannot tell which shards to evaluate on; give `data:`", r.name));
                return None;
            }
        },
    };
    let baseline = ctx.read_wire(r, "baseline", Kind::Export, deps, inputs, errs)?;
    let settings: EvalSettings = stage_settings(ctx, r, &["model", "data", "baseline"], "eval stage", errs)?;
    Some(Spec::Eval(Eval { model, model_from, data, baseline, settings }))
}
