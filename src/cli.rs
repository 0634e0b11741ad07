//! Command-line definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "bertpipe", version = crate::contract::BUILD, about = "Get text into BERT and BERT back out again", propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an experiment: one YAML chaining pipelines, vocabularies, training, export and
    /// evaluation; each stage re-runs only when something it depends on changed.
    #[command(after_help = "Examples:
  bertpipe run pipelines/imdb-experiment.yaml                 # the whole chain, what changed only
  bertpipe run pipelines/imdb-experiment.yaml --dry-run       # each stage: will run or up to date, and why
  bertpipe run pipelines/imdb-experiment.yaml --set data.steps[4].max_noise=12
  bertpipe run pipelines/imdb-experiment.yaml --force finetune   # or --force all
  bertpipe run pipelines/imdb-experiment.yaml --stage data --task-index I --task-count 4  # one task of a stage
  bertpipe run pipelines/imdb-experiment.yaml --until data && srun -n 4 bertpipe run pipelines/imdb-experiment.yaml --stage finetune")]
    Run(ExperimentArgs),
    /// Run or check declarative YAML pipelines.
    #[command(subcommand)]
    Pipeline(PipelineCommand),
    /// Build tokenizer vocabularies.
    #[command(subcommand)]
    Vocab(VocabCommand),
    /// Work on shard folders: merge the outputs of a task array.
    #[command(subcommand)]
    Shards(ShardsCommand),
    /// Length, token and noise statistics (table, JSON or CSV, and pictures) of a pipeline's
    /// cleaned corpus, a finished shard folder, or a source read as is.
    #[command(after_help = "Examples:
  bertpipe stats data/aclImdb-sample                # the raw corpus, as read
  bertpipe stats pipelines/imdb.yaml --by label     # after the cleaning steps, with tokens
  bertpipe stats out/imdb --plot out/imdb-plots     # finished shards, SVG + PNG charts
  bertpipe stats /data/aclImdb_v1.tar.gz --vocab data/vocab/bert-base-uncased.txt --max-len 256
  bertpipe stats reviews.jsonl --set source.label_map='{neg: 0, pos: 1}' --json > stats.json")]
    Stats(StatsArgs),
    /// Train BERT with candle on shards from `pipeline run`: fine-tune a classifier or
    /// pretrain (MLM + NSP, or MLM on packed rows), from scratch or from an HF checkpoint.
    #[command(after_help = "Examples:
  bertpipe train pipelines/imdb-finetune.yaml
  bertpipe train pipelines/imdb-finetune.yaml --set learning_rate=3e-5 --set num_train_epochs=2
  bertpipe train pipelines/imdb-finetune.yaml --set model.init_from=/models/bert-base-uncased
  bertpipe train pipelines/imdb-mlm.yaml --device cuda
  bertpipe train pipelines/imdb-finetune.yaml --resume      # continue after Ctrl-C or a crash
  bertpipe train pipelines/imdb-finetune.yaml --dry-run --show-batches 0:0..2   # plan and rows")]
    Train(TrainArgs),
    /// Export a trained checkpoint.
    #[command(subcommand)]
    Export(ExportCommand),
    /// Evaluate an exported model with ONNX Runtime on one split of a shard folder: metrics
    /// (per row and per document), slices by length and noise, calibration, confident
    /// mistakes, non-finite rows, throughput; metrics.json, predictions.parquet and pictures.
    /// Memory stays flat in the split's size; as a task array, `eval merge` joins the tasks.
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        after_help = "Examples:
  bertpipe eval --model out/imdb-finetune.onnx --data out/imdb --split test
  bertpipe eval --model model.onnx --data out/imdb --device cuda --batch-size 128 --json > metrics.json
  bertpipe eval --model model.onnx --data out/imdb --max-len 512     # fixed padding instead of per batch
  bertpipe eval --model model-int8.onnx --data out/imdb --baseline model.onnx --max-drop 0.5
  # four GPUs of one machine, then the merge:
  for i in 0 1 2 3; do bertpipe eval --model model.onnx --data out/imdb --out out/eval \\
    --task-index $i --task-count 4 --device cuda:$i --quiet & done; wait
  bertpipe eval merge out/eval"
    )]
    Eval(EvalArgs),
    /// Classify raw text with an exported model, through exactly a pipeline's cleaning,
    /// tokenisation and sequence building (windows voted per document).
    #[command(after_help = "Examples:
  bertpipe predict --model model.onnx --pipeline pipelines/imdb.yaml \"A wonderful film.\" \"Dreadful.\"
  bertpipe predict --model model.onnx --pipeline pipelines/imdb.yaml --input reviews.txt --json")]
    Predict(PredictArgs),
    /// What bertpipe found on this machine: ONNX Runtime (path, version, providers), CUDA
    /// devices, candle's CUDA build; with the fix for anything missing.
    Doctor(DoctorArgs),
}

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// An HF BERT sequence-classification checkpoint (ours or theirs) to ONNX: inputs
    /// input_ids, attention_mask, token_type_ids (int64, dynamic batch and sequence), output
    /// logits; opset 17; vocab_sha256, max_len and id2label in the metadata.
    #[command(after_help = "Examples:
  bertpipe export onnx --checkpoint out/imdb-finetune/final --out out/imdb-finetune.onnx --verify
  bertpipe export onnx --checkpoint out/imdb-finetune/final --out model-opt.onnx --optimize --verify
  bertpipe export onnx --checkpoint out/imdb-finetune/final --out model-int8.onnx --quantize int8 --verify
  bertpipe export onnx --checkpoint out/imdb-finetune/final --out model-fp16.onnx --fp16 --optimize   # for CUDA")]
    Onnx(ExportOnnxArgs),
}

/// Where ONNX Runtime comes from (else ORT_DYLIB_PATH, a Python environment, the cache, the
/// system).
#[derive(Debug, Args)]
pub struct OrtArgs {
    /// The ONNX Runtime library (libonnxruntime.so) to load.
    #[arg(long, value_name = "PATH")]
    pub ort_lib: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExportOnnxArgs {
    /// The checkpoint folder (config.json, model.safetensors, vocab.txt).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// The ONNX file to write.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[command(flatten)]
    pub settings: crate::onnx::export::ExportSettings,
    /// Same as `--precision int8` (kept for scripts written before `--precision`).
    #[arg(long, value_name = "int8", value_parser = ["int8"], hide = true, conflicts_with_all = ["fp16", "precision"])]
    pub quantize: Option<String>,
    /// Same as `--precision fp16` (kept for scripts written before `--precision`).
    #[arg(long, hide = true, conflicts_with = "precision")]
    pub fp16: bool,
    #[command(flatten)]
    pub ort: OrtArgs,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The ONNX model (from `bertpipe export onnx`).
    #[arg(long, value_name = "FILE", required = true)]
    pub model: Option<PathBuf>,
    /// The shard folder (with manifest.json).
    #[arg(long, value_name = "DIR", required = true)]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub settings: crate::onnx::eval::EvalSettings,
    /// Output folder (default: MODEL-eval-SPLIT beside the model).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also run this model (e.g. the fp32 export an int8 one came from) on the same rows and
    /// report what changed: agreement, accuracy / F1 / loss overall and per slice, the largest
    /// probability shifts, the flipped predictions (`gate` in metrics.json).
    #[arg(long, value_name = "BASE.onnx")]
    pub baseline: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// This task's index, from 0, in a task array (default: (SLURM_ARRAY_TASK_ID −
    /// SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP, or JOB_COMPLETION_INDEX on Kubernetes): it evaluates its share of
    /// the split's shards into OUT/tasks/NNNNN/; `bertpipe eval merge OUT` reports.
    #[arg(long, value_name = "I")]
    pub task_index: Option<u32>,
    /// How many tasks the split is divided among (default: SLURM_ARRAY_TASK_COUNT).
    #[arg(long, value_name = "N")]
    pub task_count: Option<u32>,
    #[command(flatten)]
    pub ort: OrtArgs,
    #[command(subcommand)]
    pub command: Option<EvalCommand>,
}

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Join the tasks of an eval task array (OUT/tasks/NNNNN/) into OUT/predictions.parquet and
    /// OUT/metrics.json: the report one process would have written.
    #[command(after_help = "Examples:
  bertpipe eval merge out/eval")]
    Merge(EvalMergeArgs),
}

#[derive(Debug, Args)]
pub struct EvalMergeArgs {
    /// The `--out` folder the tasks wrote under.
    #[arg(value_name = "OUT")]
    pub out: PathBuf,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PredictArgs {
    /// The ONNX model (from `bertpipe export onnx`).
    #[arg(long, value_name = "FILE")]
    pub model: PathBuf,
    /// The pipeline whose cleaning, tokenize and classify_sequences steps the text goes through.
    #[arg(long, value_name = "PIPELINE.yaml")]
    pub pipeline: PathBuf,
    /// Override a pipeline value, as with `pipeline run` (e.g. `steps[7].truncation=window`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Texts to classify.
    pub texts: Vec<String>,
    /// A file of texts: one per line, or .jsonl with a `text` (and optional `id`) field; `-`
    /// for standard input.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
    /// `cpu`, `cuda` or `cuda:N` (CUDA never falls back to the CPU silently).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Rows (texts, or their windows) per ONNX Runtime call.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    #[command(flatten)]
    pub ort: OrtArgs,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Install the pinned ONNX Runtime into bertpipe's cache folder with pip.
    #[arg(long)]
    pub install: bool,
    /// With --install: the CUDA build (onnxruntime-gpu[cuda,cudnn]).
    #[arg(long, requires = "install")]
    pub gpu: bool,
    /// Also describe an exported model: precision and scheme, graph, labels, vocabulary, and
    /// whether it loads in this runtime.
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub ort: OrtArgs,
}

#[derive(Debug, Args)]
pub struct ExperimentArgs {
    /// The experiment YAML (name, out, stages).
    pub experiment: PathBuf,
    /// Override a value: `STAGE.key.path=value` reaches into a stage (`finetune.learning_rate=3e-5`,
    /// `data.steps[4].max_noise=12`); `out=DIR`. The value is parsed as YAML. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Print each stage, whether it would run and why; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run this stage even when it is up to date (repeatable; `all` for every stage).
    #[arg(long, value_name = "STAGE")]
    pub force: Vec<String>,
    /// No progress bars or stage output; the closing summary only.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// When another run holds OUT/.lock, wait for it to finish instead of exiting at once.
    #[arg(long)]
    pub wait: bool,
    /// Run this stage alone. A pipeline or eval stage: one task of a task array (with
    /// --task-index / --task-count or the scheduler's variables); the next plain `bertpipe run`
    /// merges the tasks and goes on. A train stage: its training, data-parallel under a launcher
    /// (`srun -n 4 bertpipe run X --stage finetune`), once the stages it reads are up to date.
    #[arg(long, value_name = "STAGE", conflicts_with = "until")]
    pub stage: Option<String>,
    /// Stop after this stage (the stages after it are not run): `--until data` prepares what a
    /// train stage run under a launcher reads.
    #[arg(long, value_name = "STAGE")]
    pub until: Option<String>,
    /// When a stage needs ONNX Runtime (an export's verify, an eval) and none is found, fail
    /// before any stage runs instead of fetching the pinned wheel with pip into bertpipe's cache.
    #[arg(long)]
    pub no_install: bool,
    /// With --stage: the array's first phase (`pipeline scan`), for pipelines with dedup or a
    /// noise-quantile filter.
    #[arg(long, requires = "stage")]
    pub scan: bool,
    #[command(flatten)]
    pub task: TaskArgs,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The training YAML (task, data, model, output_dir and HF-style training arguments).
    pub config: PathBuf,
    /// Override a value: `key.path=value`, e.g. `learning_rate=3e-5` or `model.preset=mini`.
    /// The value is parsed as YAML. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Continue from the newest complete checkpoint in output_dir: model, optimiser, schedule,
    /// data position; the losses equal an uninterrupted run's.
    #[arg(long, conflicts_with = "overwrite")]
    pub resume: bool,
    /// Start again in an output_dir that already holds a run (its checkpoints are removed).
    #[arg(long)]
    pub overwrite: bool,
    /// `cpu`, `cuda` or `cuda:N`; overrides `device:` in the YAML.
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<String>,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Check everything (shards, vocabulary, model, output folder), print the plan — rows,
    /// steps per epoch, schedule, order, memory estimate — and train nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: print the rows of batches FROM..TO (or FROM..=TO) of epoch EPOCH, one
    /// tab-separated line per row, exactly as training draws them (e.g. `0:120..124` to see the
    /// batches around a loss spike at step 122).
    #[arg(long, value_name = "EPOCH:FROM..TO", requires = "dry_run")]
    pub show_batches: Option<crate::train::BatchRange>,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// A pipeline YAML; a shard folder (with manifest.json); or a source: an aclImdb folder or
    /// .tar.gz, or a .jsonl / .csv / .tsv / .parquet / .txt file (or folder of them).
    #[arg(required_unless_present = "leakage")]
    pub input: Option<PathBuf>,
    /// Instead of statistics: how many documents of this input's --split the --against corpora
    /// already hold, exactly or nearly (MinHash). An input is a pipeline YAML (its cleaned
    /// documents), a source, or a shard folder that kept its text (`sink.keep_text`).
    #[arg(
        long,
        value_name = "EVAL_INPUT",
        conflicts_with_all = ["input", "csv", "plot", "by", "max_len", "word_buckets", "vocab"],
        requires = "against"
    )]
    pub leakage: Option<PathBuf>,
    /// With --leakage: a training pipeline, source or shard folder, optionally `:SPLIT`
    /// (default: all its splits). Repeatable.
    #[arg(long, value_name = "INPUT[:SPLIT]", requires = "leakage")]
    pub against: Vec<String>,
    /// With --leakage: the evaluated split.
    #[arg(long, default_value = "test", requires = "leakage")]
    pub split: String,
    /// With --leakage: the estimated Jaccard similarity of 5-word shingles at which a document
    /// is a near-duplicate.
    #[arg(long, value_name = "S", default_value_t = 0.8, requires = "leakage")]
    pub similarity: f64,
    /// Also report each split or label separately.
    #[arg(long, value_enum)]
    pub by: Option<crate::stats::By>,
    /// Print the report as JSON (stable keys, documented in docs/statistics.md).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print the report as CSV: group,metric,stat,value.
    #[arg(long)]
    pub csv: bool,
    /// Write charts (SVG and PNG) into this folder.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// How many of the noisiest documents to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Sequence length to measure truncation against (default: the pipeline's or the shards'
    /// max_len, else 512).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(3..))]
    pub max_len: Option<u32>,
    /// Word-count bucket edges, increasing, e.g. `100,300,500` (default: the quartiles of
    /// the data's word counts, rounded to two significant digits).
    #[arg(long, value_name = "N,N,…", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub word_buckets: Option<Vec<u32>>,
    /// Count WordPiece tokens with this vocab.txt when the input does not tokenize.
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,
    /// With --vocab: keep case and accents.
    #[arg(long, requires = "vocab")]
    pub cased: bool,
    /// Override a pipeline or source value, e.g. `source.label_field=sentiment`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Worker threads for a streaming pass (default: all cores).
    #[arg(long, short = 'j', value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// No progress bar and no closing line on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum VocabCommand {
    /// Learn a WordPiece vocabulary from a pipeline's source after its cleaning steps; writes
    /// vocab.txt and tokenizer.json (usable by the tokenize step) and reports the [UNK] rate.
    #[command(after_help = "Examples:
  bertpipe vocab train pipelines/imdb-pretrain.yaml --size 30522 --out vocab/imdb
  bertpipe vocab train pipelines/imdb.yaml --size 8000 --min-frequency 5 --out /tmp/v --cased")]
    Train(VocabTrainArgs),
}

#[derive(Debug, Args)]
pub struct VocabTrainArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub settings: crate::vocab::VocabSettings,
    /// Output folder for vocab.txt and tokenizer.json.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Worker threads for reading and cleaning (default: all cores).
    #[arg(long, short = 'j', value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// No progress bars.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Stream a corpus through the pipeline's steps into Parquet shards and a manifest.
    #[command(after_help = "Examples:
  bertpipe pipeline run pipelines/imdb-clean.yaml
  bertpipe pipeline run pipelines/imdb-clean.yaml --set source.path=/data/aclImdb_v1.tar.gz --overwrite
  bertpipe pipeline run pipelines/imdb-clean.yaml --set steps[5].max_noise=12 --threads 4
  bertpipe pipeline run pipelines/imdb-clean.yaml --resume      # finish a run that was interrupted
  bertpipe pipeline run pipelines/imdb.yaml --task-index 2 --task-count 8   # task 2 of an array of 8
  (in a Slurm array or a Kubernetes Indexed Job the index comes from the environment)")]
    Run(RunArgs),
    /// First phase of a task array whose pipeline has `dedup` or a `max_noise_quantile`
    /// filter: record this task's fingerprints or noise scores for the other tasks.
    #[command(after_help = "Examples:
  bertpipe pipeline scan pipelines/imdb.yaml --task-index 0 --task-count 3
  # then, once every task is scanned: pipeline run … --task-index I, then shards merge OUT")]
    Scan(ScanArgs),
    /// Check a pipeline file and report every problem with file:line:column (exit 78 if any).
    #[command(after_help = "Examples:
  bertpipe pipeline validate pipelines/imdb-clean.yaml
  bertpipe pipeline validate pipelines/imdb-clean.yaml --set sink.shard_rows=500
  bertpipe pipeline validate pipelines/imdb.yaml --json   # needs_scan: whether a task array scans first")]
    Validate(ValidateArgs),
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The pipeline YAML file.
    pub pipeline: PathBuf,
    /// Override a value: `key.path=value`, e.g. `steps[3].max_noise=12` or `source.path=x`.
    /// The value is parsed as YAML. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Worker threads (default: all cores). Output bytes do not depend on it.
    #[arg(long, short = 'j', value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// Finish an interrupted run: keep the shards whose checksums verify, write the rest.
    #[arg(long, conflicts_with = "overwrite")]
    pub resume: bool,
    /// Replace an existing output folder.
    #[arg(long)]
    pub overwrite: bool,
    /// No progress bar and no summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    #[command(flatten)]
    pub task: TaskArgs,
}

/// A task array: the same command run N times, each process reading its part of the input.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// This task's index, from 0 (default: (SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN) /
    /// SLURM_ARRAY_TASK_STEP, or JOB_COMPLETION_INDEX on Kubernetes). Output goes under OUT/tasks/NNNNN/.
    #[arg(long, value_name = "I")]
    pub task_index: Option<u32>,
    /// How many tasks the input is divided among (default: SLURM_ARRAY_TASK_COUNT).
    #[arg(long, value_name = "N")]
    pub task_count: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Worker threads (default: all cores).
    #[arg(long, short = 'j', value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// No progress bar and no summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    #[command(flatten)]
    pub task: TaskArgs,
}

#[derive(Debug, Subcommand)]
pub enum ShardsCommand {
    /// After every task of an array has finished: check each task's manifest and shards and
    /// write OUT/manifest.json, which `stats`, `train`, `eval` and `ShardSet` read.
    #[command(after_help = "Examples:
  bertpipe shards merge out/imdb")]
    Merge(MergeArgs),
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The pipeline's output folder (sink.path), holding tasks/00000, tasks/00001, …
    pub out: PathBuf,
    /// No progress bar and no summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print what the file holds as one JSON object on stdout: a pipeline's name, source, splits,
    /// steps, sink, whether a task array of it runs `pipeline scan` first (`needs_scan`,
    /// `scan_steps`) and why it cannot be one (`task_array_error`); an experiment's stages.
    /// Problems still go to stderr (exit 78).
    #[arg(long)]
    pub json: bool,
}
