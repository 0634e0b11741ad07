//! The kinds of stage a chain is made of, one file each: what a stage of that kind writes, what
//! later stages see of its output, and how it runs (through exactly the library call its own
//! command makes). The runner (`super::run`) knows none of them: it calls [`StageKind`].

pub mod eval;
pub mod export;
pub mod pipeline;
pub mod train;
pub mod vocab;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::config::{Experiment, Stage};
use super::digest::digest_of_tree;

/// What the runner gives a stage that runs.
pub struct RunCx<'a> {
    pub stage: &'a Stage,
    pub exp: &'a Experiment,
    /// This stage's key.
    pub key: &'a str,
    /// The same key was started before and did not finish: continue it (a training from its
    /// newest intact checkpoint, a pipeline from its journal) instead of starting over. Never
    /// with `forced`.
    pub resume: bool,
    /// `--force`: start over, discarding whatever an earlier attempt left.
    pub forced: bool,
    pub quiet: bool,
}

/// How a stage that ran ended.
pub enum Outcome {
    /// Finished; its headline figures.
    Done(Value),
    /// Stopped by Ctrl-C at a point it can continue from.
    Interrupted,
}

/// What the runner gives a stage asked for its environment ([`StageKind::environment`]): every
/// stage is asked before the first one runs, so a chain that cannot run a late stage (no ONNX
/// Runtime for its export's check or its eval) says so before it trains for minutes.
pub struct EnvCx {
    /// The pinned ONNX Runtime wheel may be fetched with pip when none is found (`bertpipe run`
    /// without `--no-install`).
    pub install: bool,
    /// A dry run: nothing is installed, and a runtime not found is a value, not an error.
    pub dry_run: bool,
    pub quiet: bool,
    /// The stage runs by itself in the world it was started in (`bertpipe run X --stage
    /// TRAIN`, under a launcher or not), not as part of the whole chain.
    pub alone: bool,
}

/// An environment value a stage leaves to its record: what the record says, else `fallback`
/// (what it would be if it ran now). The whole chain runs a training as one process but takes
/// one recorded by `--stage` on N ranks as it is — asking for it by name is how a world size is
/// chosen.
pub fn as_recorded(fallback: &str) -> String {
    format!("{AS_RECORDED}{fallback}")
}

pub(super) const AS_RECORDED: &str = "as recorded, else ";

impl EnvCx {
    /// The version of the ONNX Runtime a stage runs models in (`ort_lib`: its `--ort-lib`),
    /// found and loaded once per process as `eval` finds it; when none is found and the chain
    /// may install, the pinned wheel is fetched into bertpipe's cache first (said in one line).
    pub fn onnx_runtime(&self, ort_lib: Option<&Path>) -> Result<String> {
        use crate::onnx::runtime;
        if self.dry_run {
            return Ok(match runtime::search(ort_lib)? {
                (Some(found), _) => runtime::library_version(&found.path)?,
                (None, _) => "not found".into(),
            });
        }
        if ort_lib.is_none() && self.install && runtime::search(None)?.0.is_none() {
            eprintln!(
                "ONNX Runtime was not found: installing onnxruntime=={} into {} with pip, once (`bertpipe run --no-install` refuses)",
                runtime::PINNED_VERSION,
                runtime::cache_install_dir(false).display()
            );
            runtime::install_pinned(false)?;
        }
        Ok(runtime::init(ort_lib)?.version.clone())
    }
}

pub trait StageKind {
    /// The resolved configuration, as the stage's key sees it.
    fn canonical(&self) -> Value;

    /// What the stage's result depends on besides its configuration and what it reads — the
    /// ONNX Runtime it scores or verifies with, the number of processes it trains on — by
    /// name: part of its key, so a change there runs it again. Asked of every stage before
    /// any stage runs; an error stops the chain there.
    fn environment(&self, _cx: &EnvCx) -> Result<BTreeMap<String, String>> {
        Ok(BTreeMap::new())
    }

    /// The paths the stage's command is told to write to: each must lie under `OUT/<stage>/`.
    fn writes(&self, out: &Path) -> Vec<PathBuf> {
        vec![out.to_path_buf()]
    }

    /// The files and folders under `out` (`OUT/<stage>/`) that are the stage's result: their
    /// digests are recorded when it finishes and checked before it is called up to date.
    fn outputs(&self, out: &Path) -> Vec<PathBuf> {
        vec![out.to_path_buf()]
    }

    /// What a stage reading this one gets from it, as one digest, from `outputs` (every output
    /// file's digest, by path under `out`, as just recorded): the key of a reader is built from
    /// it, so a re-run that leaves it unchanged leaves the readers up to date. By default all
    /// of the outputs.
    fn identity(&self, _out: &Path, outputs: &BTreeMap<String, String>) -> Result<String> {
        Ok(digest_of_tree(outputs))
    }

    fn run(&self, cx: &RunCx) -> Result<Outcome>;
}

/// A boxed kind is that kind (large configurations are boxed in `Spec`).
impl<T: StageKind + ?Sized> StageKind for Box<T> {
    fn canonical(&self) -> Value {
        (**self).canonical()
    }

    fn environment(&self, cx: &EnvCx) -> Result<BTreeMap<String, String>> {
        (**self).environment(cx)
    }

    fn writes(&self, out: &Path) -> Vec<PathBuf> {
        (**self).writes(out)
    }

    fn outputs(&self, out: &Path) -> Vec<PathBuf> {
        (**self).outputs(out)
    }

    fn identity(&self, out: &Path, outputs: &BTreeMap<String, String>) -> Result<String> {
        (**self).identity(out, outputs)
    }

    fn run(&self, cx: &RunCx) -> Result<Outcome> {
        (**self).run(cx)
    }
}

/// A task array left in a stage's folder (`OUT/<stage>/tasks/`, from `bertpipe run … --stage NAME
/// --task-index I`): removed when the stage is forced, `stale` says it ran another
/// configuration (`why` says how), or what its tasks read is unknown or has changed since
/// ([`super::task_array_stale`]) — the stage then runs as one process; otherwise `merge`d, and
/// a merge that fails — an array not complete — says what to do.
pub(super) fn leftover_array<T>(
    cx: &RunCx,
    why: &str,
    stale: impl FnOnce() -> Result<bool>,
    merge: impl FnOnce() -> Result<T>,
) -> Result<Option<T>> {
    let tasks = cx.stage.out.join(crate::contract::manifest::TASKS_DIR);
    if !tasks.is_dir() {
        return Ok(None);
    }
    // Stale: forced away, run with another configuration (`stale`), or its tasks' reads are
    // unknown or no longer what is there (a merge would record shards of yesterday's corpus).
    let because = if cx.forced {
        Some("--force".to_string())
    } else if stale()? {
        Some(why.to_string())
    } else {
        super::task_array_stale(cx.exp, &cx.stage.name, &mut super::digest::Digests::default())?
    };
    if let Some(because) = because {
        if !cx.quiet {
            eprintln!("`{}`: discarding the task array in '{}' ({because})", cx.stage.name, tasks.display());
        }
        std::fs::remove_dir_all(&tasks).with_context(|| format!("could not remove '{}'", tasks.display()))?;
        // What those tasks read is not what the stage's own run will read.
        super::remove_task_reads(&cx.exp.out.join(super::STAGES_DIR), &cx.stage.name);
        return Ok(None);
    }
    match merge() {
        Ok(m) => Ok(Some(m)),
        Err(e) => bail!(
            "{e:#}\nthe task array of stage `{name}` is not complete: run its missing tasks (`bertpipe run {file} --stage {name} --task-index I --task-count N`), or `bertpipe run {file} --force {name}` to discard them and run the stage as one process",
            name = cx.stage.name,
            file = cx.exp.file.display()
        ),
    }
}
