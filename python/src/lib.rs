//! `bertpipe._native`: the Python wheel's door into bertpipe's library. The `bertpipe` module
//! (`python/bertpipe/`) builds its Python API on these few calls; each one is the library
//! call the command line makes, so Python and the command cannot disagree.

use std::path::PathBuf;

use bertpipe::model::config::Family;
use bertpipe::train::data::Example;
use bertpipe::train::rows::{MaskChoice, TrainRows};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

create_exception!(_native, BertpipeError, PyException, "An error bertpipe reports: the message says what and where.");

fn error(e: anyhow::Error) -> PyErr {
    BertpipeError::new_err(format!("{e:#}"))
}

/// Runs the command line (`argv[0]` is the program's name) and returns its exit code: the
/// `bertpipe` command the wheel installs. The process is the command's from here: SIGINT and
/// SIGPIPE as for the Cargo-built binary (Python's handler would hold Ctrl-C until the command
/// ended), and the GIL released while it runs.
#[pyfunction]
fn run_cli(py: Python<'_>, argv: Vec<String>) -> i32 {
    bertpipe::app::cli_signals();
    // SAFETY: the default disposition of SIGINT, as a program starts with.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
    let code = py.detach(|| bertpipe::app::run(argv));
    (0..=255u8).find(|&c| std::process::ExitCode::from(c) == code).map_or(1, i32::from)
}

/// `pipeline run`: runs the pipeline file with `--set` overrides; returns what the run wrote
/// as JSON (the manifest, the folder, seconds, bytes of text read).
#[pyfunction]
#[pyo3(signature = (pipeline, overrides, threads=0, overwrite=false, resume=false, quiet=true))]
fn pipeline_run(
    py: Python<'_>,
    pipeline: PathBuf,
    overrides: Vec<String>,
    threads: usize,
    overwrite: bool,
    resume: bool,
    quiet: bool,
) -> PyResult<String> {
    py.detach(|| {
        bertpipe::train::dist::refuse_as_ranks(
            "pipeline run",
            "it on one rank, or as a task array (`--task-index I --task-count N`, docs/scale.md)",
        )
        .map_err(error)?;
        let p = bertpipe::config::Pipeline::load(&pipeline, &overrides)
            .map_err(|e| BertpipeError::new_err(e.to_string()))?;
        let opts = bertpipe::pipeline::RunOptions { threads, resume, overwrite, quiet, task: None };
        let s = bertpipe::pipeline::run(&p, &opts).map_err(error)?;
        Ok(serde_json::json!({
            "out": s.out,
            "seconds": s.elapsed.as_secs_f64(),
            "text_bytes": s.text_bytes,
            "peak_rss_bytes": s.peak_rss,
            "found": s.found,
            "manifest": s.manifest,
        })
        .to_string())
    })
}

/// `stats --json`: the report of a corpus folder, pipeline file or shard folder, as JSON.
#[pyfunction]
#[pyo3(signature = (input, by=None, overrides=Vec::new(), threads=0, quiet=true))]
fn stats(
    py: Python<'_>,
    input: PathBuf,
    by: Option<String>,
    overrides: Vec<String>,
    threads: usize,
    quiet: bool,
) -> PyResult<String> {
    use bertpipe::stats::{StatsError, StatsOptions};
    use clap::ValueEnum;
    let by = match by {
        None => None,
        Some(b) => Some(bertpipe::stats::By::from_str(&b, true).map_err(|_| {
            let names: Vec<String> = bertpipe::stats::By::value_variants()
                .iter()
                .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
                .collect();
            BertpipeError::new_err(format!("by={b:?} is not a grouping; one of: {}", names.join(", ")))
        })?),
    };
    py.detach(|| {
        let opts = StatsOptions { by, set: overrides, threads, quiet, ..StatsOptions::default() };
        match bertpipe::stats::run(&input, &opts) {
            Ok((report, _)) => Ok(serde_json::to_string(&report).expect("the report serialises")),
            Err(StatsError::Config(e)) => Err(BertpipeError::new_err(e.to_string())),
            Err(StatsError::Other(e)) => Err(error(e)),
        }
    })
}

/// One split of a shard folder as `bertpipe train` reads it: verified, in the trainer's order,
/// masked by the trainer's masks (see `bertpipe::train::rows`).
#[pyclass(frozen, module = "bertpipe._native")]
struct Rows {
    inner: TrainRows,
}

#[pymethods]
impl Rows {
    /// `mask`: `"off"`, a model family (`"bert"`, `"roberta"`, `"modernbert"`: the pipeline's
    /// rate, else the family's) or a rate (`"0.2"`: the pipeline's rate, else this).
    /// `verify`: check every shard's SHA-256 (a copy of a dataset that did may skip it).
    #[new]
    #[pyo3(signature = (path, split, seed=0, mask="bert", quiet=true, verify=true))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        split: String,
        seed: u64,
        mask: &str,
        quiet: bool,
        verify: bool,
    ) -> PyResult<Rows> {
        let choice = match mask {
            "off" => MaskChoice::Off,
            "bert" => MaskChoice::Family(Family::Bert),
            "roberta" => MaskChoice::Family(Family::Roberta),
            "modernbert" => MaskChoice::Family(Family::ModernBert),
            rate => MaskChoice::Rate(rate.parse::<f64>().map_err(|_| {
                BertpipeError::new_err(format!(
                    "mask={rate:?}: say a rate in (0, 1), a model family (bert, roberta, modernbert), True or False"
                ))
            })?),
        };
        let inner = py.detach(|| TrainRows::open(&path, &split, seed, choice, verify, quiet)).map_err(error)?;
        Ok(Rows { inner })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    /// What the rows are (the split, its shards' SHA-256s, how rows become examples).
    #[getter]
    fn key(&self) -> &str {
        &self.inner.key
    }

    /// `classify` or `pretrain`.
    #[getter]
    fn task(&self) -> &str {
        &self.inner.task
    }

    #[getter]
    fn label_names(&self) -> Vec<String> {
        self.inner.label_names.clone()
    }

    #[getter]
    fn pad_id(&self) -> u32 {
        self.inner.pad_id
    }

    /// The masking rate of dynamic masking, else None.
    #[getter]
    fn mask_rate(&self) -> Option<f64> {
        self.inner.mask.as_ref().map(|m| m.masked_lm_prob)
    }

    /// Whether the rows carry the masks their pipeline wrote (static masking).
    #[getter]
    fn static_masks(&self) -> bool {
        self.inner.static_masks
    }

    /// The rows at positions `start..stop` of epoch `epoch`'s order (shuffled), as row numbers.
    fn order(&self, epoch: u64, start: u64, stop: u64) -> Vec<u64> {
        let p = self.inner.order(epoch);
        (start..stop.min(self.inner.len())).map(|t| p.at(t)).collect()
    }

    /// Rows `rows` as training reads them in `epoch`, each a dict of Python lists.
    fn get<'py>(&self, py: Python<'py>, rows: Vec<u64>, epoch: u64) -> PyResult<Bound<'py, PyList>> {
        let examples = py
            .detach(|| rows.iter().map(|&r| self.inner.example(r, epoch)).collect::<anyhow::Result<Vec<_>>>())
            .map_err(error)?;
        self.dicts(py, examples)
    }

    /// Global batches a window of length-grouped rows holds (the trainer's windows).
    #[getter]
    fn group_batches(&self) -> usize {
        bertpipe::train::data::GROUP_BATCHES
    }

    /// Windows of an epoch of length-grouped global batches of `global_batch` rows.
    fn windows(&self, global_batch: usize) -> u64 {
        self.inner.windows(global_batch)
    }

    /// Rank `rank`'s part of each global batch of window `window`, rows grouped by length as
    /// the trainer groups them: a list (a batch) of lists of row dicts.
    fn grouped<'py>(
        &self,
        py: Python<'py>,
        epoch: u64,
        window: u64,
        global_batch: usize,
        rank: usize,
        ranks: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let parts = py.detach(|| self.inner.grouped_window(epoch, window, global_batch, rank, ranks)).map_err(error)?;
        let out = PyList::empty(py);
        for part in parts {
            out.append(self.dicts(py, part)?)?;
        }
        Ok(out)
    }
}

impl Rows {
    fn dicts<'py>(&self, py: Python<'py>, examples: Vec<Example>) -> PyResult<Bound<'py, PyList>> {
        let classify = self.inner.task == "classify";
        let labelled = self.inner.mask.is_some() || self.inner.static_masks;
        let out = PyList::empty(py);
        for e in examples {
            let d = PyDict::new(py);
            d.set_item("index", e.index)?;
            if classify {
                d.set_item("id", &e.id)?;
            }
            let n = e.input_ids.len();
            d.set_item("input_ids", &e.input_ids)?;
            d.set_item("attention_mask", vec![1u32; n])?;
            d.set_item("token_type_ids", &e.token_type_ids)?;
            if let Some(l) = e.label {
                d.set_item("labels", l)?;
            } else if labelled {
                let mut labels = vec![-100i64; n];
                for (&p, &id) in e.masked_positions.iter().zip(&e.masked_ids) {
                    if let Some(l) = labels.get_mut(p as usize) {
                        *l = i64::from(id);
                    }
                }
                d.set_item("labels", labels)?;
            }
            if let Some(l) = e.nsp_label {
                d.set_item("next_sentence_label", l)?;
            }
            if !classify && !e.doc_boundaries.is_empty() {
                d.set_item("doc_boundaries", &e.doc_boundaries)?;
            }
            out.append(d)?;
        }
        Ok(out)
    }
}

/// This process's rank, the number of ranks and the launcher's name, from the variables a
/// launcher sets (mpirun, srun, torchrun), as `bertpipe train` reads them; None without one.
#[pyfunction]
fn launcher_world() -> PyResult<Option<(usize, usize, String)>> {
    match bertpipe::train::dist::World::from_vars(|k| std::env::var(k).ok()) {
        Ok(w) if w.launcher != bertpipe::train::dist::Launcher::None => {
            Ok(Some((w.rank, w.size, w.launcher.name().to_string())))
        }
        Ok(_) => Ok(None),
        Err(e) => Err(error(e)),
    }
}

/// The shard files of `split` (verified against the manifest) and the label names: what
/// `bertpipe.to_hf_dataset` hands to `datasets`.
#[pyfunction]
fn shard_files(py: Python<'_>, path: PathBuf, split: String) -> PyResult<(Vec<PathBuf>, Vec<String>, String)> {
    py.detach(|| {
        let shards = bertpipe::shards::ShardSet::open_with(&path, true)?;
        shards.verify()?;
        let m = &shards.manifest;
        let Some(stats) = m.splits.get(&split) else {
            anyhow::bail!(
                "no split `{split}` in '{}'; it has: {}",
                path.display(),
                m.splits.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        };
        let files = stats.shards.iter().map(|s| shards.root().join(&s.file)).collect();
        let names = bertpipe::shards::class_names(&m.config, &m.id2label);
        Ok((files, names, m.task.clone()))
    })
    .map_err(error)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("BertpipeError", m.py().get_type::<BertpipeError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Rows>()?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline_run, m)?)?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    m.add_function(wrap_pyfunction!(shard_files, m)?)?;
    m.add_function(wrap_pyfunction!(launcher_world, m)?)?;
    Ok(())
}
