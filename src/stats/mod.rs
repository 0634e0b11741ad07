//! `bertpipe stats`: length, token and noise statistics of a corpus at any stage — a pipeline
//! (after its cleaning steps, streamed), a finished shard folder (read with the parquet
//! crate), or a source given by its path — as a table, JSON or CSV, with histogram pictures.
//!
//! Every input is first reduced to a per-document table of numbers (`table`), then polars
//! aggregates it (`report`); `render` and `plot` present the result.

pub mod collect;
pub mod leakage;
pub mod plot;
pub mod render;
pub mod report;
pub mod table;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use collect::InputKind;
pub use report::{By, Report};

use crate::config::ConfigErrors;

/// The command-line options of `stats`.
#[derive(Debug, Clone)]
pub struct StatsOptions {
    pub by: Option<By>,
    /// Override the sequence length truncation is measured against (default: the pipeline's or
    /// manifest's `max_len`, else 512).
    pub max_len: Option<u32>,
    /// How many of the noisiest documents to list.
    pub top: usize,
    /// Tokenize with this vocabulary when the input does not tokenize itself.
    pub vocab: Option<PathBuf>,
    pub cased: bool,
    /// `--set key=value` overrides for a pipeline or a source.
    pub set: Vec<String>,
    pub threads: usize,
    pub quiet: bool,
    /// Word-count bucket edges, e.g. `[100, 300, 500]`; default: the data's quartiles.
    pub word_buckets: Option<Vec<u32>>,
    /// The shard folder was checked against its manifest already (a chain's stage output,
    /// vouched for by its record and the digest cache): its shards are not hashed again.
    pub verified: bool,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            by: None,
            max_len: None,
            top: 10,
            vocab: None,
            cased: false,
            set: Vec::new(),
            threads: 0,
            word_buckets: None,
            quiet: true,
            verified: false,
        }
    }
}

/// Why stats could not run: a configuration problem (exit 78) or anything else.
#[derive(Debug)]
pub enum StatsError {
    Config(ConfigErrors),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for StatsError {
    fn from(e: anyhow::Error) -> Self {
        StatsError::Other(e)
    }
}

/// Reads `input` and builds its report.
pub fn run(input: &Path, opts: &StatsOptions) -> Result<(Report, collect::Collected), StatsError> {
    if let Some(e) = &opts.word_buckets {
        if e.is_empty() || e.contains(&0) || e.windows(2).any(|w| w[0] >= w[1]) {
            let given: Vec<String> = e.iter().map(u32::to_string).collect();
            return Err(anyhow::anyhow!(
                "--word-buckets {}: give increasing word counts above 0, e.g. --word-buckets 100,300,500",
                given.join(",")
            )
            .into());
        }
    }
    let (located, kind) = collect::locate(input, opts.quiet)?;
    let input = located.as_path();
    let mut collected = match kind {
        InputKind::Shards => {
            if !opts.set.is_empty() {
                return Err(anyhow::anyhow!("--set applies to pipelines and sources, not to a shard folder").into());
            }
            if opts.vocab.is_some() {
                return Err(
                    anyhow::anyhow!("--vocab applies to pipelines and sources; shards are tokenized already").into()
                );
            }
            collect::from_shards(input, opts)?
        }
        InputKind::Pipeline => {
            let p = crate::config::Pipeline::load(input, &opts.set).map_err(StatsError::Config)?;
            collect::from_pipeline(&p, true, input, opts)?
        }
        InputKind::Source(kind) => {
            let p = collect::source_pipeline(input, kind, &opts.set).map_err(StatsError::Config)?;
            collect::from_pipeline(&p, false, input, opts)?
        }
    };
    let report = report::build(&mut collected, opts.by, opts.max_len, opts.top, opts.word_buckets.as_deref())?;
    Ok((report, collected))
}
