//! An evaluation stage: `bertpipe eval` of an exported model on a split of shards, its report
//! in `OUT/<stage>/`, gated against a baseline model when one is named.

use std::path::PathBuf;

use anyhow::Result;
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

    fn run(&self, cx: &RunCx) -> Result<Outcome> {
        // The chain reports leakage without being asked: the clean part's score too.
        let mut opts = self.settings.options(
            self.model.clone(),
            self.data.clone(),
            self.baseline.clone(),
            crate::onnx::eval::ScoreLeaked::IfRecorded,
        );
        opts.out = Some(cx.stage.out.clone());
        opts.quiet = cx.quiet;
        let r = crate::onnx::eval::run(&opts)?;
        if !cx.quiet {
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
                    cx.stage.out.join("metrics.json").display()
                );
            }
        }
        Ok(Outcome::Done(f))
    }
}

/// Reads an eval stage: `model:` (or the nearest earlier export stage), `data:` (or the shards
/// that export's training read), `baseline:`, and the command's settings.
pub(in crate::experiment) fn resolve(ctx: &Ctx, r: &Raw, reads: &mut Reads, errs: &mut Errors) -> Option<Spec> {
    let Reads { deps, inputs, .. } = reads;
    let r = &r.with_overrides(errs);
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
    Some(Spec::Eval(Eval { model, data, baseline, settings }))
}
