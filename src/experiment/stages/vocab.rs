//! A vocabulary stage: `bertpipe vocab train` over a pipeline's cleaned text into
//! `OUT/<stage>/vocab.txt`.

use anyhow::Result;
use serde_json::{json, Value};

use super::{Outcome, RunCx, StageKind};
use crate::config::Pipeline;
use crate::experiment::config::{as_str, map_get, stage_settings, Ctx, Errors, Kind, Raw, Reads, Spec, Wire};
use crate::vocab::VocabSettings;

#[derive(Debug, Clone)]
pub struct Vocab {
    /// The pipeline whose cleaned text it learns from: a pipeline stage's, or a file's.
    pub pipeline: Box<Pipeline>,
    /// The settings `bertpipe vocab train` takes as flags.
    pub settings: VocabSettings,
}

impl StageKind for Vocab {
    fn canonical(&self) -> Value {
        json!({"pipeline": self.pipeline, "settings": self.settings})
    }

    fn run(&self, cx: &RunCx) -> Result<Outcome> {
        let mut opts = self.settings.options(&self.pipeline, cx.stage.out.clone());
        opts.quiet = cx.quiet;
        let r = crate::vocab::train_vocab(&self.pipeline, &opts)?;
        Ok(Outcome::Done(json!({"vocab_size": r.vocab_size, "docs": r.docs, "tokens": r.tokens})))
    }
}

/// Reads a vocab stage: `pipeline:` (a pipeline stage or file) and the command's settings.
pub(in crate::experiment) fn resolve(ctx: &Ctx, r: &Raw, reads: &mut Reads, errs: &mut Errors) -> Option<Spec> {
    let Reads { deps, inputs, .. } = reads;
    let r = &r.with_overrides(errs);
    let (pipeline, ppos) = match map_get(&r.node, "pipeline") {
        Some((n, pos)) => (as_str(n).unwrap_or_default(), pos),
        None => {
            errs.at(Some(r.pos), format!("{}: a vocab stage needs `pipeline:` (a pipeline stage or file)", r.name));
            return None;
        }
    };
    let p = match ctx.wire(&r.name, "pipeline", &pipeline, ppos, &[Kind::Pipeline], errs)? {
        Wire::Stage(name) => {
            deps.push(name.clone());
            let p = match &ctx.done.iter().find(|s| s.name == name)?.spec {
                Spec::Pipeline(p) => (**p).clone(),
                _ => return None,
            };
            // It learns from the pipeline's source, not from its shards: text the tokenizer
            // would change (a cased vocabulary, say) is read before the shards are written, so
            // the corpus keys the stage, not only the shards' identity.
            inputs.extend(p.source.input_paths());
            p
        }
        Wire::Path(path) => match Pipeline::load(&path, &[]) {
            Ok(p) => {
                inputs.push(path);
                // The cleaning steps' text is what it learns from: the source, not the files
                // the tokenize step names.
                inputs.extend(p.source.input_paths());
                p
            }
            Err(e) => {
                errs.extend(e);
                return None;
            }
        },
    };
    let settings = stage_settings(ctx, r, &["pipeline"], "vocab stage", errs)?;
    Some(Spec::Vocab(Vocab { pipeline: Box::new(p), settings }))
}
