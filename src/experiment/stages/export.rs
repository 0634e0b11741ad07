//! An export stage: `bertpipe export onnx` of a training stage's checkpoint (or a path) into
//! `OUT/<stage>/model.onnx`, verified against candle when asked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{json, Value};

use super::{Outcome, RunCx, StageKind};
use crate::experiment::config::{
    absolute, as_str, map_get, output_of, stage_settings, Ctx, Errors, Kind, Raw, Reads, Spec, Wire,
};
use crate::onnx::export::ExportSettings;

#[derive(Debug, Clone)]
pub struct Export {
    /// The checkpoint folder: a train stage's `final/` or `best/`, or a path.
    pub checkpoint: PathBuf,
    /// The settings `bertpipe export onnx` takes as flags.
    pub settings: ExportSettings,
}

/// The model file an export stage writes in its folder.
pub const MODEL: &str = "model.onnx";

impl StageKind for Export {
    fn canonical(&self) -> Value {
        json!({"checkpoint": self.checkpoint, "settings": self.settings})
    }

    /// The ONNX Runtime `verify` checks the model in.
    fn environment(&self, cx: &super::EnvCx) -> Result<BTreeMap<String, String>> {
        match self.settings.verify {
            true => Ok([("onnxruntime".to_string(), cx.onnx_runtime(None)?)].into()),
            false => Ok(BTreeMap::new()),
        }
    }

    /// The model and, past protobuf's limit, its external weights: not whatever else lands in
    /// the folder (`bertpipe eval` of the model writes its report beside it by default).
    fn outputs(&self, out: &Path) -> Vec<PathBuf> {
        vec![out.join(MODEL), out.join(format!("{MODEL}.data"))]
    }

    fn run(&self, cx: &RunCx) -> Result<Outcome> {
        let out = &cx.stage.out;
        std::fs::create_dir_all(out)?;
        // The model names the stage that made it by its key — and only by what the key covers:
        // an output that depended on anything else (say the keys of the stages before, which
        // change with their configuration while their output stays) could not be called up to
        // date from the key. The key's parts, in OUT/.stages/<stage>.json, lead back through
        // the checkpoint's stage to the shards and the corpus, each by content.
        let chain: BTreeMap<&str, &str> = [(cx.stage.name.as_str(), cx.key)].into();
        let metadata = vec![
            ("bertpipe_experiment".into(), cx.exp.name.clone()),
            ("bertpipe_chain".into(), serde_json::to_string(&chain)?),
        ];
        let opts = self.settings.options(self.checkpoint.clone(), out.join(MODEL), metadata);
        let done = crate::onnx::export::export(&opts)?;
        let mut f = json!({"nodes": done.nodes, "parameters": done.parameters, "bytes": done.bytes});
        if self.settings.verify {
            let rt = crate::onnx::runtime::init(None)?;
            let checked = crate::onnx::verify::verify_export(rt, &done)?;
            let worst = crate::metrics::worst_of(checked.iter().map(|c| c.max_abs_diff as f64));
            f["verify_max_abs_diff"] = json!(worst);
        }
        Ok(Outcome::Done(f))
    }
}

/// Reads an export stage: `from:` (or the nearest earlier train stage), `checkpoint: final |
/// best | PATH`, and the command's settings.
pub(in crate::experiment) fn resolve(ctx: &Ctx, r: &Raw, reads: &mut Reads, errs: &mut Errors) -> Option<Spec> {
    let Reads { deps, inputs, .. } = reads;
    let r = &r.with_overrides(errs);
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
            errs.at(Some(r.pos), format!("{}: no train stage before it to export; give `checkpoint: PATH`", r.name));
            return None;
        }
        (path, _) => {
            let p = absolute(path, ctx.base);
            inputs.push(p.clone());
            p
        }
    };
    let mut settings: ExportSettings = stage_settings(ctx, r, &["from", "checkpoint"], "export stage", errs)?;
    // A chain verifies what it exports unless told not to (`verify: false`): an export that
    // drifted from its checkpoint would otherwise be evaluated as if it were the model.
    if map_get(&r.node, "verify").is_none() {
        settings.verify = true;
    }
    if let Some(v) = &mut settings.vocab {
        *v = absolute(&v.display().to_string(), ctx.base);
        inputs.push(v.clone());
    }
    Some(Spec::Export(Export { checkpoint, settings }))
}
