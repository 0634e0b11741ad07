//! Preparing a run: shards checked against the task and the vocabulary, the model built or
//! loaded (or restored for `--resume`), loaders, schedule length, and the output folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use sha2::{Digest, Sha256};

use super::checkpoint::{self, TrainerState};
use super::config::{ClassWeights, Objective, ReportTo, TrainConfig};
use super::data::{LoaderSpec, Order, RowKind};
use super::dist::{self, World};
use super::{device, optim, TrainOptions, Trainer};
use crate::config::Pipeline;
use crate::config::PipelineStep;
use crate::contract::manifest::Manifest;
use crate::model::config::BertConfig;
use crate::model::{BertWithHead, ModelKind};
use crate::sequence::pretrain::Masking;
use crate::shards::ShardSet;

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The manifest's pipeline, typed (it is the resolved pipeline the shards were made with).
pub(super) fn pipeline_of(manifest: &Manifest) -> Option<Pipeline> {
    serde_json::from_value(manifest.config.clone()).ok()
}

/// The trainer's dynamic masking of pretraining shards made by the pipeline `steps`: `None`
/// when the pipeline masked them itself (static); else masks at the pipeline's
/// `masked_lm_prob`, or at `default_rate(vocabulary size)` when it gives none.
pub(super) fn dynamic_mask(
    steps: &[PipelineStep],
    default_rate: impl FnOnce(usize) -> Result<f64>,
) -> Result<Option<Arc<crate::sequence::mask::MaskSpec>>> {
    let step = steps
        .iter()
        .find_map(PipelineStep::as_pretrain)
        .context("the shards' pipeline has no pretrain_sequences step")?;
    if step.masking != Masking::Dynamic {
        return Ok(None);
    }
    let t = steps.iter().find_map(PipelineStep::as_tokenize);
    let encoder = t.context("the shards' pipeline has no tokenize step")?.load()?;
    let rate = default_rate(encoder.info().vocab_size)?;
    Ok(Some(Arc::new(step.mask_spec(&encoder.info(), encoder.words(), rate)?)))
}

/// Class names in label order: the shards' ([`crate::shards::class_names`]: aclImdb folders, an
/// inverted `label_map`, the label names the pipeline found), then `LABEL_i` up to `max_label`.
/// (What this and [`Loaders::new`] read of the manifest's `config` is part of a pipeline
/// stage's identity in `experiment/stages/pipeline.rs`: keep the two in step.)
pub(super) fn label_names(manifest: &Manifest, max_label: usize) -> Vec<String> {
    let mut names = crate::shards::class_names(&manifest.config, &manifest.id2label);
    while names.len() <= max_label {
        names.push(format!("LABEL_{}", names.len()));
    }
    names
}

/// The classes of a checkpoint's classification head, counted in its weights (`classifier.bias`,
/// RoBERTa's `classifier.out_proj.bias`) from the `model.safetensors` header: `None` when it has
/// none (a pretrained encoder, whose head training initialises) or no such file (loading it
/// says why).
fn head_classes(dir: &Path) -> Result<Option<usize>> {
    use std::io::Read;
    let path = dir.join("model.safetensors");
    if !path.is_file() {
        return Ok(None);
    }
    let not_safetensors = |why: &str| format!("'{}' is not a safetensors file ({why})", path.display());
    let mut f = crate::contract::reads::open(&path).with_context(|| format!("could not open '{}'", path.display()))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).with_context(|| not_safetensors("shorter than its header"))?;
    let len = u64::from_le_bytes(len);
    // The format caps its header at 100 MB.
    if len > 100 << 20 || len > f.metadata().map(|m| m.len()).unwrap_or(0) {
        bail!(not_safetensors(&format!("a header of {len} bytes")));
    }
    let mut header = vec![0u8; len as usize];
    f.read_exact(&mut header).with_context(|| not_safetensors("shorter than its header"))?;
    let header: serde_json::Value =
        serde_json::from_slice(&header).with_context(|| not_safetensors("its header is not JSON"))?;
    for name in ["classifier.out_proj.bias", "classifier.bias"] {
        if let Some(shape) = header.get(name).and_then(|t| t.get("shape")).and_then(|s| s.as_array()) {
            return Ok(shape.first().and_then(|d| d.as_u64()).map(|d| d as usize));
        }
    }
    Ok(None)
}

/// A checkpoint's classification head and the shards' labels, as training reads them: the
/// labels to train on are the head's classes, matched by name ([`crate::shards::match_labels`]),
/// so a head trained on `negative, neutral, positive` goes on predicting those whatever ids the
/// shards give them. `None` when the checkpoint has no head (one is initialised for the shards'
/// labels). `max_label`: the largest label of the training split.
fn head_labels(cfg: &TrainConfig, dir: &Path, shards: &ShardSet, max_label: usize) -> Result<Option<HeadLabels>> {
    let Some(classes) = head_classes(dir)? else { return Ok(None) };
    let config = BertConfig::read(&dir.join("config.json"))?;
    // A config.json whose id2label counts otherwise than the weights names nothing.
    let head: Vec<String> = if config.num_labels() == classes {
        config.label_names()
    } else {
        (0..classes).map(|i| format!("LABEL_{i}")).collect()
    };
    let ours = shards.class_names();
    let matched = crate::shards::match_labels(
        &ours,
        &head,
        &format!("the shards in '{}'", cfg.data.display()),
        &format!("the checkpoint '{}'", dir.display()),
        "train from a checkpoint with these labels, name the corpus's labels as the checkpoint does with the source's `label_map`, or start from one without a classification head",
    )?;
    if matched.by_name.is_none() && max_label >= classes {
        bail!(
            "split `{}` of '{}' has label {max_label}, but the classification head of the checkpoint '{}' has {classes} classes ({})",
            cfg.train_split,
            cfg.data.display(),
            dir.display(),
            head.join(", ")
        );
    }
    // By name, or by number from a head without names: the head's names, unless the shards
    // have the names it lacks.
    let names = if matched.by_name.is_none() && !crate::shards::unnamed(&ours) { ours } else { head };
    Ok(Some(HeadLabels { names, remap: matched.remap().map(Arc::new), note: matched.note }))
}

/// What [`head_labels`] found: the classes to train, the shards' labels as those classes when
/// they differ, and how they were matched.
struct HeadLabels {
    names: Vec<String>,
    remap: Option<Arc<Vec<usize>>>,
    note: Option<String>,
}

impl Trainer {
    /// Prepares a run: the shards (verified, of the right kind), the files every checkpoint
    /// carries, the loaders, the model and optimiser (fresh, from a checkpoint, or resumed),
    /// the schedule and the metrics log.
    pub fn new(cfg: &TrainConfig, opts: &TrainOptions) -> Result<Trainer> {
        if cfg.threads > 0 {
            std::env::set_var("RAYON_NUM_THREADS", cfg.threads.to_string());
        }
        let world = dist::world()?;
        // One bar, one log: rank 0's.
        let opts = &TrainOptions { quiet: opts.quiet || !world.is_main(), ..opts.clone() };
        let dev = device::open_for_rank(opts.device.as_deref().unwrap_or(&cfg.device), &world)?;
        let shards = open_shards(cfg, opts.quiet)?;
        let extra_files = checkpoint_files(cfg, &shards)?;
        let mut notes = Vec::new();
        if cfg.shuffle_buffer.is_some() {
            notes.push("shuffle_buffer no longer applies: every epoch is a permutation of the whole split".into());
        }
        let data = Loaders::new(cfg, &shards, opts.quiet, &world)?;
        notes.extend(data.label_note.clone());
        if cfg.dtype == super::config::ComputeDtype::Bf16 && dev.is_cpu() {
            notes.push(
                "dtype bf16 on the CPU: the matrix products are rounded as on CUDA, but run slower than f32 (candle widens bf16 to f32 to multiply); bf16 is meant for CUDA".into(),
            );
        }
        let eval = eval_loader(cfg, &shards.manifest, &data.train, &mut notes)?;

        let (model, mut state, resumed) = model_and_state(cfg, opts, &shards, &data, &dev, &world, &mut notes)?;
        let mut optimizer =
            optim::AdamW::new(&model.params, cfg.adam_beta1, cfg.adam_beta2, cfg.adam_epsilon, cfg.weight_decay)?;
        if let Some((_, saved)) = &resumed {
            optimizer.load_state(&model.params, saved, state.global_step)?;
        }
        let resume_from = resumed.map(|(dir, _)| dir);

        // A batch of the loader is an optimiser step's global batch.
        let total_steps = cfg.max_steps.unwrap_or_else(|| data.train.steps_in_epochs(cfg.num_train_epochs)).max(1);
        let warmup_steps = cfg.warmup_steps.unwrap_or_else(|| (cfg.warmup_ratio * total_steps as f64).ceil() as u64);
        // Before anything is written: every rank must be training the same thing.
        same_on_every_rank(&world, cfg, opts, &data.train, &model, state.global_step, total_steps)?;
        let metrics_log = if opts.dry_run || !world.is_main() {
            None
        } else {
            Some(open_metrics_log(&cfg.output_dir, resume_from.is_some().then_some(&state))?)
        };
        state.total_steps = total_steps;
        let class_weights = class_weights(cfg, &data, &mut notes)?;
        let tensorboard = match cfg.report_to {
            ReportTo::Tensorboard if !opts.dry_run && world.is_main() => {
                Some(super::tensorboard::EventWriter::create(&cfg.output_dir, &state.log_history)?)
            }
            _ => None,
        };
        let batches_in_epoch = data.train.batches_in_epoch(state.epoch_index);
        Ok(Trainer {
            cfg: cfg.clone(),
            opts: opts.clone(),
            device: dev,
            model,
            optimizer,
            train: data.train,
            eval,
            label_names: data.label_names,
            extra_files,
            batches_in_epoch,
            state,
            total_steps,
            warmup_steps,
            metrics_log,
            tensorboard,
            class_weights,
            notes,
            world,
        })
    }
}

/// With more than one rank: every rank must train the same thing — the resolved config, the
/// shards (their digests), the model's parameters and the step it starts from. Each rank's
/// fingerprint is gathered and compared with rank 0's; a rank that differs is an error on
/// every rank, naming it.
fn same_on_every_rank(
    world: &World,
    cfg: &TrainConfig,
    opts: &TrainOptions,
    train: &LoaderSpec,
    model: &BertWithHead,
    start_step: u64,
    total_steps: u64,
) -> Result<()> {
    if world.size == 1 {
        return Ok(());
    }
    let digests: Vec<String> =
        train.shards.split_stats(&train.split)?.shards.iter().map(|s| s.sha256.clone()).collect();
    let params: usize = model.params.vars.iter().map(|(_, v)| v.elem_count()).sum();
    let flags = format!(
        "--dry-run {} --show-batches {:?} --resume {} --overwrite {} --device {:?}",
        opts.dry_run, opts.show_batches, opts.resume, opts.overwrite, opts.device
    );
    let parts = [
        ("resolved training config", serde_json::to_string(cfg)?),
        ("choice of flags (--dry-run, --resume …)", flags),
        ("gradient bucket size (BERTPIPE_BUCKET_MB)", dist::bucket_floats().to_string()),
        ("training shards", digests.join(",")),
        ("model", format!("{} parameters, {:?}", params, model.config.hidden_size)),
        ("step to start from", format!("{start_step}/{total_steps}")),
    ];
    let mine: Vec<String> = parts.iter().map(|(_, v)| sha256_hex(v.as_bytes())).collect();
    let all = dist::gather_bytes(world, serde_json::to_string(&mine)?.as_bytes())?;
    let all: Vec<Vec<String>> = all.iter().map(|b| serde_json::from_slice(b)).collect::<Result<_, _>>()?;
    for (rank, theirs) in all.iter().enumerate().skip(1) {
        for (i, (what, _)) in parts.iter().enumerate() {
            if theirs.get(i) != all[0].get(i) {
                let short = |h: Option<&String>| h.map_or("?".to_string(), |h| h.chars().take(12).collect());
                bail!(
                    "rank {rank}'s {what} differs from rank 0's (sha256 {}… vs {}…): every rank must be started with the same config, --set values, flags, environment and shards",
                    short(theirs.get(i)),
                    short(all[0].get(i))
                );
            }
        }
    }
    Ok(())
}

/// What a checkpoint must have been written with to be resumed: the resolved config, with
/// the batch counted as the global batch (`per_device_train_batch_size` × ranks ×
/// `gradient_accumulation_steps` rows per optimiser step), so a run written by N ranks resumes
/// on M ranks with the same global batch — and is the same run.
fn run_identity(cfg: &TrainConfig, world: &World) -> Result<String> {
    let mut c = cfg.clone();
    c.per_device_train_batch_size = global_batch(cfg, world);
    c.gradient_accumulation_steps = 1;
    Ok(sha256_hex(serde_json::to_string(&c)?.as_bytes()))
}

/// Rows per optimiser step over every rank.
pub(super) fn global_batch(cfg: &TrainConfig, world: &World) -> usize {
    cfg.per_device_train_batch_size * world.size * cfg.gradient_accumulation_steps
}

/// `class_weights`, resolved against the training split's classes.
fn class_weights(cfg: &TrainConfig, data: &Loaders, notes: &mut Vec<String>) -> Result<Option<Vec<f32>>> {
    let weights = match &cfg.class_weights {
        None => return Ok(None),
        Some(ClassWeights::Named(_)) => super::balanced_class_weights(&data.class_counts)?,
        Some(ClassWeights::Weights(w)) => {
            if w.len() != data.label_names.len() {
                bail!(
                    "class_weights has {} weights, but the shards have {} classes ({})",
                    w.len(),
                    data.label_names.len(),
                    data.label_names.join(", ")
                );
            }
            w.iter().map(|&x| x as f32).collect()
        }
    };
    let shown: Vec<String> = data.label_names.iter().zip(&weights).map(|(n, w)| format!("{n} {w:.4}")).collect();
    notes.push(format!("class weights: {}", shown.join(", ")));
    Ok(Some(weights))
}

/// The shards, verified against their manifest and of the kind the objective trains on; a
/// bucket's download shows its progress unless `quiet`.
fn open_shards(cfg: &TrainConfig, quiet: bool) -> Result<Arc<ShardSet>> {
    let shards = Arc::new(ShardSet::open_with(&cfg.data, quiet)?);
    shards.verify()?;
    let m = &shards.manifest;
    let want = match cfg.task {
        Objective::Classify => "classify",
        Objective::Pretrain => "pretrain",
    };
    if m.task != want {
        bail!(
            "task `{want}` needs {want} shards, but '{}' holds `{}` shards (pipeline `{}`); point `data` at the output of a pipeline with a {} step",
            cfg.data.display(),
            m.task,
            m.name,
            if want == "classify" { "classify_sequences" } else { "pretrain_sequences" }
        );
    }
    Ok(shards)
}

/// The tokenizer files copied into every checkpoint: the vocabulary (the checkpoint's, which
/// must be the shards', else the shards' own file, unchanged since) and tokenizer_config.json.
fn checkpoint_files(cfg: &TrainConfig, shards: &ShardSet) -> Result<Vec<(String, Vec<u8>)>> {
    let m = &shards.manifest;
    let tok = shards.tokenizer()?;
    let mut files = Vec::new();
    let init_vocab = match &cfg.model.init_from {
        Some(dir) => crate::tokenize::folder_vocab(dir)?,
        None => None,
    };
    if let Some((v, vocab)) = &init_vocab {
        shards.expect_vocab(vocab, &format!("the checkpoint's '{}'", v.display()))?;
        // The checkpoint's own files travel on: the vocabulary as it was, in either format.
        let dir = cfg.model.init_from.as_ref().expect("a checkpoint folder");
        for name in ["vocab.txt", "tokenizer.json"] {
            let path = dir.join(name);
            if crate::contract::reads::is_file(&path) {
                let bytes = crate::contract::reads::read(&path)
                    .with_context(|| format!("could not read '{}'", path.display()))?;
                files.push((name.to_string(), bytes));
            }
        }
    } else if let Some(v) = m.vocab_file() {
        let bytes = crate::contract::reads::read(&v)
            .with_context(|| format!("could not read the shards' vocabulary '{}'", v.display()))?;
        if sha256_hex(&bytes) != tok.vocab_sha256 {
            bail!(
                "'{}' changed since the shards were written (sha256 differs from the manifest's {})",
                v.display(),
                tok.vocab_sha256
            );
        }
        // A tokenizer.json travels as such: AutoTokenizer reads it in place of vocab.txt.
        let name = if v.extension().is_some_and(|e| e == "json") { "tokenizer.json" } else { "vocab.txt" };
        files.push((name.to_string(), bytes));
    }
    let tokenizer_config = if tok.encoder == "tokenizers" {
        let json = files.iter().find(|(name, _)| name == "tokenizer.json").map(|(_, b)| b.as_slice());
        let beside = match &init_vocab {
            Some((v, _)) => v.parent().map(Path::to_path_buf),
            None => m.vocab_file().and_then(|v| v.parent().map(Path::to_path_buf)),
        };
        hf_tokenizer_config(json, beside.as_deref(), tok, m.longest_row())?
    } else {
        serde_json::json!({
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": tok.lowercase,
            "strip_accents": tok.strip_accents.unwrap_or(tok.lowercase),
            "model_max_length": m.longest_row(),
        })
    };
    files.push((
        "tokenizer_config.json".to_string(),
        (serde_json::to_string_pretty(&tokenizer_config)? + "\n").into_bytes(),
    ));
    Ok(files)
}

/// The `tokenizer_config.json` of a checkpoint whose vocabulary is an HF `tokenizer.json` that is
/// not BERT's: the one beside the tokenizer (RoBERTa's, ModernBERT's: its class and settings)
/// when there is one, else `PreTrainedTokenizerFast` with the tokenizer's special tokens, so
/// `AutoTokenizer` loads the checkpoint folder as the tokenizer it was made with; the length is
/// the shards' longest row.
fn hf_tokenizer_config(
    json: Option<&[u8]>,
    beside: Option<&Path>,
    tok: &crate::contract::manifest::TokenizerInfo,
    max_len: usize,
) -> Result<serde_json::Value> {
    use serde_json::Value;
    let existing = beside.map(|d| d.join("tokenizer_config.json")).filter(|p| crate::contract::reads::is_file(p));
    let mut config = match existing {
        Some(p) => {
            let bytes =
                crate::contract::reads::read(&p).with_context(|| format!("could not read '{}'", p.display()))?;
            serde_json::from_slice::<Value>(&bytes).with_context(|| format!("'{}' is not JSON", p.display()))?
        }
        None => {
            let mut c = serde_json::json!({ "tokenizer_class": "PreTrainedTokenizerFast" });
            if let Some(json) = json {
                let t = crate::tokenize::parse_tokenizer_json(json).context("tokenizer.json")?;
                let s = tok.special_ids;
                for (key, id) in [
                    ("cls_token", s.cls),
                    ("sep_token", s.sep),
                    ("pad_token", s.pad),
                    ("unk_token", s.unk),
                    ("mask_token", s.mask),
                ] {
                    if let Some(token) = t.id_to_token(id) {
                        c[key] = Value::String(token);
                    }
                }
            }
            c
        }
    };
    if !config.is_object() {
        bail!("tokenizer_config.json beside the tokenizer is not a JSON object");
    }
    config["model_max_length"] = Value::from(max_len);
    Ok(config)
}

/// How the shards' rows become training examples.
struct Loaders {
    train: LoaderSpec,
    /// Classification: training rows of each class.
    class_counts: Vec<u64>,
    label_names: Vec<String>,
    /// How the shards' labels were matched to a checkpoint's classification head, when not
    /// plainly.
    label_note: Option<String>,
    model_kind: ModelKind,
    /// Pretraining shards the pipeline masked itself at its default rate (no `masked_lm_prob`).
    masked_at_default_rate: bool,
}

impl Loaders {
    fn new(cfg: &TrainConfig, shards: &Arc<ShardSet>, quiet: bool, world: &World) -> Result<Loaders> {
        let m = &shards.manifest;
        let steps = pipeline_of(m).map(|p| p.steps).unwrap_or_default();
        let pretrain_step = steps.iter().find_map(PipelineStep::as_pretrain);
        // Usable rows and class names from one pass over the label column (classify), or the
        // manifest's row counts (pretrain).
        let mut known: Vec<i64> = Vec::new();
        let (usable_rows, max_label) = match cfg.task {
            Objective::Classify => {
                known = shards.labels(&cfg.train_split)?.into_iter().flatten().collect();
                (known.len() as u64, known.iter().copied().max().unwrap_or(0).max(0) as usize)
            }
            Objective::Pretrain => (shards.shard_rows(&cfg.train_split)?.iter().sum(), 0),
        };
        if usable_rows == 0 {
            bail!("split `{}` of '{}' has no labelled rows to train on", cfg.train_split, cfg.data.display());
        }
        let mut label_names = label_names(m, max_label);
        // A checkpoint's classification head keeps its classes: the shards' labels become them.
        let (mut remap, mut label_note): (Option<Arc<Vec<usize>>>, Option<String>) = (None, None);
        if let (Objective::Classify, Some(dir)) = (cfg.task, &cfg.model.init_from) {
            if let Some(head) = head_labels(cfg, dir, shards, max_label)? {
                (label_names, remap, label_note) = (head.names, head.remap, head.note);
            }
        }
        let mut class_counts = vec![0u64; label_names.len()];
        for &l in &known {
            let class = match &remap {
                Some(ids) => usize::try_from(l).ok().and_then(|l| ids.get(l).copied()),
                None => usize::try_from(l).ok(),
            };
            if let Some(c) = class.and_then(|c| class_counts.get_mut(c)) {
                *c += 1;
            }
        }
        let kind = match cfg.task {
            Objective::Classify => RowKind::Classify { num_labels: label_names.len(), remap },
            Objective::Pretrain => {
                // The trainer masks: at the pipeline's rate, else the model family's.
                let mask =
                    dynamic_mask(&steps, |vocab_size| Ok(model_config(cfg, vocab_size)?.family().masked_lm_prob()))?;
                RowKind::Pretrain { mask }
            }
        };
        let mut train = LoaderSpec {
            shards: shards.clone(),
            split: cfg.train_split.clone(),
            kind,
            // A loader batch is an optimiser step's global batch; each rank takes its part.
            batch_size: global_batch(cfg, world),
            order: Order::InFileOrder,
            group_by_length: cfg.group_by_length,
            pad_to: cfg.pad_to_max_length.then(|| m.longest_row()),
            pad_id: shards.tokenizer()?.special_ids.pad,
            seed: cfg.seed,
            // The global batch's budget, as its rows: per device × ranks × accumulation steps.
            max_tokens: cfg
                .max_tokens_per_batch
                .map(|t| t.saturating_mul(world.size).saturating_mul(cfg.gradient_accumulation_steps)),
            packed: cfg.padding_free,
            lengths: None,
        };
        let store = train.row_store(quiet)?;
        if store.rows() != usable_rows {
            bail!(
                "the row store '{}' holds {} rows, but split `{}` has {usable_rows} usable rows; delete it and it is rebuilt",
                store.dir().display(),
                store.rows(),
                cfg.train_split
            );
        }
        if train.max_tokens.is_some() {
            // How many batches each epoch has depends on the rows' lengths: read once.
            train.lengths = Some(Arc::new(store.tokens_per_row()?));
        }
        train.order = Order::Permuted(Arc::new(store));
        let model_kind = match cfg.task {
            Objective::Classify => ModelKind::SequenceClassification,
            Objective::Pretrain if pretrain_step.is_some_and(|p| p.nsp) => ModelKind::PreTraining,
            Objective::Pretrain => ModelKind::MaskedLm,
        };
        let masked_at_default_rate = cfg.task == Objective::Pretrain
            && pretrain_step.is_some_and(|p| p.masking == Masking::Static && p.masked_lm_prob.is_none());
        Ok(Loaders { train, class_counts, label_names, label_note, model_kind, masked_at_default_rate })
    }
}

/// The evaluation split's loader: `eval_split`, else `test` when the shards have one.
fn eval_loader(
    cfg: &TrainConfig,
    m: &Manifest,
    train: &LoaderSpec,
    notes: &mut Vec<String>,
) -> Result<Option<LoaderSpec>> {
    let eval_split = match cfg.eval_split.as_deref() {
        Some("none") => None,
        Some(s) => Some(s.to_string()),
        None if m.splits.contains_key("test") && cfg.train_split != "test" => Some("test".to_string()),
        None => {
            notes.push("no `test` split and no eval_split: nothing is evaluated during training".into());
            None
        }
    };
    for split in std::iter::once(&cfg.train_split).chain(eval_split.as_ref()) {
        if !m.splits.contains_key(split) {
            bail!(
                "no split `{split}` in '{}'; it has: {}",
                cfg.data.display(),
                m.splits.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    Ok(eval_split.map(|split| LoaderSpec {
        split,
        order: Order::InFileOrder,
        batch_size: cfg.per_device_eval_batch_size,
        // Rows × padded length: what an evaluation batch holds in either layout.
        max_tokens: Some(cfg.eval_max_tokens),
        packed: false,
        lengths: None,
        ..train.clone()
    }))
}

/// A checkpoint's saved optimiser state, by tensor name.
type SavedOptimizer = BTreeMap<String, candle_core::Tensor>;

/// Where a resumed run continues from: the checkpoint folder and its optimiser state.
type ResumePoint = (PathBuf, SavedOptimizer);

/// A checkpoint to resume from, read whole: its trainer state, model and optimiser state.
struct Resumed {
    dir: PathBuf,
    state: TrainerState,
    model: BertWithHead,
    optimizer: SavedOptimizer,
}

/// The newest checkpoint in `out` that reads back whole. A damaged one (a file cut short or
/// unreadable) is skipped for the one before it, and named in `notes`; a checkpoint written by
/// another training configuration is refused, not skipped.
fn newest_intact(
    out: &Path,
    config_sha: &str,
    kind: ModelKind,
    dev: &Device,
    seed: u64,
    notes: &mut Vec<String>,
) -> Result<Resumed> {
    let all = checkpoint::list(out);
    if all.is_empty() {
        bail!("--resume: '{}' holds no complete checkpoint to continue from", out.display());
    }
    let mut damaged = Vec::new();
    for (_, dir) in all.into_iter().rev() {
        let state = match TrainerState::read(&dir) {
            Ok(s) => s,
            Err(e) => {
                damaged.push(format!("{e:#}"));
                continue;
            }
        };
        if state.config_sha256 != config_sha {
            bail!(
                "--resume: the training config differs from the one that wrote '{}'; resume with the same config (and --set values) and the same global batch (per_device_train_batch_size × ranks × gradient_accumulation_steps rows), or start a new output_dir",
                dir.display()
            );
        }
        let read = || -> Result<(BertWithHead, SavedOptimizer)> {
            let model = BertWithHead::from_checkpoint(kind, &dir, None, dev, seed)
                .with_context(|| format!("could not read the model in '{}'", dir.display()))?;
            let path = dir.join(checkpoint::OPTIMIZER);
            let saved = candle_core::safetensors::load(&path, dev)
                .with_context(|| format!("could not read '{}'", path.display()))?;
            Ok((model, saved.into_iter().collect()))
        };
        match read() {
            Ok((model, optimizer)) => {
                for d in &damaged {
                    notes.push(format!("skipped a damaged checkpoint: {d}"));
                }
                return Ok(Resumed { dir, state, model, optimizer });
            }
            Err(e) => damaged.push(format!("{e:#}")),
        }
    }
    bail!(
        "--resume: no checkpoint in '{}' reads back whole:\n  {}\nstart again with --overwrite",
        out.display(),
        damaged.join("\n  ")
    )
}

/// The model and the trainer state: from the newest intact checkpoint (`--resume`, whose
/// folder and optimiser state are returned too), else a checkpoint (`init_from`), a config or a
/// preset, in a fresh output.
fn model_and_state(
    cfg: &TrainConfig,
    opts: &TrainOptions,
    shards: &ShardSet,
    data: &Loaders,
    dev: &Device,
    world: &World,
    notes: &mut Vec<String>,
) -> Result<(BertWithHead, TrainerState, Option<ResumePoint>)> {
    let config_sha = run_identity(cfg, world)?;
    let out = &cfg.output_dir;
    if opts.resume {
        let r = newest_intact(out, &config_sha, data.model_kind, dev, cfg.seed, notes)?;
        return Ok((r.model, r.state, Some((r.dir, r.optimizer))));
    }
    if opts.dry_run {
        if let Err(e) = prepare_output(out, false) {
            notes.push(if opts.overwrite {
                format!("--overwrite would remove the run in '{}'", out.display())
            } else {
                format!("{e:#}")
            });
        }
    } else if world.is_main() {
        // Rank 0 alone prepares (and with --overwrite empties) the folder it alone writes.
        prepare_output(out, opts.overwrite)?;
    }
    let vocab_size = shards.tokenizer()?.vocab_size;
    let mut c = model_config(cfg, vocab_size)?;
    if c.vocab_size < vocab_size {
        bail!("the model's vocab_size {} is smaller than the shards' vocabulary ({vocab_size} tokens)", c.vocab_size);
    }
    let max_len = shards.manifest.longest_row();
    if c.max_sequence() < max_len {
        bail!(
            "the model's positions cover {} tokens but the shards' rows are up to {max_len}; rebuild the shards with max_len ≤ {}",
            c.max_sequence(),
            c.max_sequence()
        );
    }
    // Only next-sentence rows hold pairs (classification and MLM-only rows are one segment, of
    // type 0). A family without token types has no next-sentence head either; this refusal
    // comes first and names the tokenizer to use.
    if data.model_kind == ModelKind::PreTraining
        && !c.family().has_token_types()
        && shards.tokenizer()?.special_ids.pair_type_ids
    {
        bail!(
            "the shards give a pair's second segment token type 1, but {} has no token types: tokenize with the model's own tokenizer.json",
            c.family().name()
        );
    }
    let family_rate = c.family().masked_lm_prob();
    if data.masked_at_default_rate && family_rate != crate::sequence::pretrain::DEFAULT_MASKED_LM_PROB {
        notes.push(format!(
            "the shards were masked by the pipeline at its default 15%; {} pretraining masks {:.0}%: set `masked_lm_prob: {family_rate}` in pretrain_sequences, or `masking: dynamic` to mask at the model's rate",
            c.family().name(),
            family_rate * 100.0
        ));
    }
    if cfg.task == Objective::Classify {
        c.set_labels(&data.label_names);
    }
    let model = match &cfg.model.init_from {
        Some(dir) => BertWithHead::from_checkpoint(data.model_kind, dir, Some(&c), dev, cfg.seed)?,
        None => BertWithHead::fresh(data.model_kind, &c, dev, cfg.seed)?,
    };
    let state =
        TrainerState { format: checkpoint::STATE_FORMAT.into(), config_sha256: config_sha, ..Default::default() };
    if cfg.model.init_from.is_some() {
        if !model.initialised.is_empty() {
            notes.push(format!("initialised (not in the checkpoint): {}", model.initialised.join(", ")));
        }
        if !model.unexpected.is_empty() {
            notes.push(format!("not used from the checkpoint: {}", model.unexpected.join(", ")));
        }
    }
    Ok((model, state, None))
}

/// `metrics.jsonl`, opened for appending; on resume (`state` of the checkpoint) cut back to
/// the lines written up to that checkpoint, which the resumed run then continues.
fn open_metrics_log(out: &Path, resumed: Option<&TrainerState>) -> Result<std::fs::File> {
    std::fs::create_dir_all(out).with_context(|| format!("could not create '{}'", out.display()))?;
    let metrics_path = out.join("metrics.jsonl");
    if let Some(state) = resumed {
        let kept: String = state.log_history.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(&metrics_path, kept)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .with_context(|| format!("could not open '{}'", metrics_path.display()))
}

/// The architecture to start from, with the YAML's dropout overrides.
fn model_config(cfg: &TrainConfig, vocab_size: usize) -> Result<BertConfig> {
    let m = &cfg.model;
    let mut c = if let Some(p) = &m.preset {
        BertConfig::preset(p, vocab_size)?
    } else if let Some(p) = &m.config {
        BertConfig::read(p)?
    } else if let Some(d) = &m.init_from {
        BertConfig::read(&d.join("config.json"))?
    } else {
        bail!("model: give `preset`, `config` or `init_from`");
    };
    if let Some(p) = m.hidden_dropout_prob {
        c.set_hidden_dropout(p);
    }
    if let Some(p) = m.attention_probs_dropout_prob {
        c.set_attention_dropout(p);
    }
    if let Some(p) = m.classifier_dropout {
        c.classifier_dropout = Some(p);
    }
    Ok(c)
}

/// A new run needs an output folder without an earlier run in it, unless `--overwrite`.
fn prepare_output(out: &Path, overwrite: bool) -> Result<()> {
    let ours = |name: &str| {
        name.starts_with("checkpoint-")
            || name.starts_with(".tmp-")
            || name.starts_with(".old-")
            || matches!(name, "best" | "final" | "metrics.jsonl" | "plots" | super::tensorboard::RUNS)
    };
    let existing: Vec<PathBuf> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| ours(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    if existing.is_empty() {
        return Ok(());
    }
    if !overwrite {
        bail!(
            "'{}' already holds a training run; pass --resume to continue it or --overwrite to start again",
            out.display()
        );
    }
    // --overwrite removes a run, not a user's files that sit inside its folders.
    let mut theirs = Vec::new();
    for p in &existing {
        not_written_by_training(p, &mut theirs);
    }
    if !theirs.is_empty() {
        theirs.sort();
        let shown: Vec<String> = theirs.iter().take(5).map(|p| format!("'{}'", p.display())).collect();
        bail!(
            "--overwrite removes the training run in '{}', but {} {} not written by a training ({}); move {} away first",
            out.display(),
            theirs.len(),
            if theirs.len() == 1 { "file there is" } else { "files there are" },
            shown.join(", "),
            if theirs.len() == 1 { "it" } else { "them" }
        );
    }
    for p in existing {
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(())
}

/// The files under `p` (an entry of a training's output folder that [`prepare_output`] would
/// remove) that no training writes there, added to `theirs`: a checkpoint folder holds the
/// model, its tokenizer files and the trainer's state; `plots/` charts; `runs/` TensorBoard
/// event files; `.tmp-*` and `.old-*` are a checkpoint being written or replaced.
fn not_written_by_training(p: &Path, theirs: &mut Vec<PathBuf>) {
    use super::checkpoint::{OPTIMIZER, STATE};
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name.starts_with(".tmp-") || name.starts_with(".old-") || name == "metrics.jsonl" {
        return;
    }
    let ours = |file: &str| -> bool {
        match name.as_str() {
            "plots" => file.ends_with(".png") || file.ends_with(".svg"),
            super::tensorboard::RUNS => file.starts_with("events.out.tfevents."),
            _ => {
                [
                    "config.json",
                    "model.safetensors",
                    "vocab.txt",
                    "tokenizer.json",
                    "tokenizer_config.json",
                    STATE,
                    OPTIMIZER,
                ]
                .contains(&file)
                    || file.starts_with(".tmp")
            }
        }
    };
    if !p.is_dir() {
        // A plain file of a run folder's name (`final`, `plots`): not the run's.
        theirs.push(p.to_path_buf());
        return;
    }
    let mut stack = vec![p.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                _ if ours(&e.file_name().to_string_lossy()) => {}
                _ => theirs.push(e.path()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrite_keeps_files_no_training_writes() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        for f in
            ["final/config.json", "final/model.safetensors", "checkpoint-2/optimizer.safetensors", "plots/loss.png"]
        {
            std::fs::create_dir_all(out.join(f).parent().unwrap()).unwrap();
            std::fs::write(out.join(f), b"x").unwrap();
        }
        std::fs::write(out.join("metrics.jsonl"), b"{}").unwrap();
        std::fs::write(out.join("notes.txt"), b"mine").unwrap();
        std::fs::write(out.join("final/notes.txt"), b"mine").unwrap();
        let e = prepare_output(out, true).unwrap_err().to_string();
        assert!(e.contains("1 file there is not written by a training") && e.contains("final/notes.txt"), "{e}");
        assert!(
            out.join("final/notes.txt").is_file() && out.join("final/model.safetensors").is_file(),
            "nothing removed"
        );
        std::fs::remove_file(out.join("final/notes.txt")).unwrap();
        prepare_output(out, true).unwrap();
        let left: Vec<String> =
            std::fs::read_dir(out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(left, ["notes.txt"], "the run went, the user's file beside it stayed");
    }

    fn manifest(source: serde_json::Value, id2label: serde_json::Value) -> Manifest {
        serde_json::from_value(serde_json::json!({
            "format": "bertpipe-shards/1", "created_by": "test", "task": "classify", "name": "t",
            "config": {"source": source}, "config_sha256": "", "tokenizer": null, "max_len": null,
            "seed": 1, "splits": {}, "rejects": {"rows": 0, "shards": []}, "id2label": id2label,
        }))
        .unwrap()
    }

    #[test]
    fn class_names_come_from_the_label_map_aclimdb_or_the_names_found() {
        let found = serde_json::json!({"0": "negative", "1": "neutral", "2": "positive"});
        let m = manifest(serde_json::json!({"type": "csv"}), found.clone());
        assert_eq!(label_names(&m, 2), ["negative", "neutral", "positive"]);
        assert_eq!(label_names(&m, 3), ["negative", "neutral", "positive", "LABEL_3"]);
        let m = manifest(serde_json::json!({"type": "csv", "label_map": {"bad": 0, "good": 1}}), found);
        assert_eq!(label_names(&m, 1), ["bad", "good"]);
        let m = manifest(serde_json::json!({"type": "aclimdb"}), serde_json::json!({}));
        assert_eq!(label_names(&m, 1), ["neg", "pos"]);
        let m = manifest(serde_json::json!({"type": "jsonl"}), serde_json::json!({"1": "only"}));
        assert_eq!(label_names(&m, 1), ["LABEL_0", "LABEL_1"], "names that do not start at 0 are not used");
    }
}
