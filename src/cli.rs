//! Command-line definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "bertpipe", version, about = "Get text into BERT and BERT back out again", propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run or check declarative YAML pipelines.
    #[command(subcommand)]
    Pipeline(PipelineCommand),
    /// Build tokenizer vocabularies.
    #[command(subcommand)]
    Vocab(VocabCommand),
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
    /// Vocabulary size, special tokens included.
    #[arg(long, default_value_t = 30522)]
    pub size: usize,
    /// Drop words and merges seen fewer times than this.
    #[arg(long, default_value_t = 2)]
    pub min_frequency: u64,
    /// Output folder for vocab.txt and tokenizer.json.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Keep case and accents (default: uncased, like bert-base-uncased). Without this flag the
    /// pipeline's tokenize step, if any, decides.
    #[arg(long)]
    pub cased: bool,
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
  bertpipe pipeline run pipelines/imdb-clean.yaml --resume      # finish a run that was interrupted")]
    Run(RunArgs),
    /// Check a pipeline file and report every problem with file:line:column (exit 78 if any).
    #[command(after_help = "Examples:
  bertpipe pipeline validate pipelines/imdb-clean.yaml
  bertpipe pipeline validate pipelines/imdb-clean.yaml --set sink.shard_rows=500")]
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
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}
