use std::process::ExitCode;

use bertpipe::clean::PipelineStep;
use bertpipe::cli::{Cli, Command, PipelineCommand, VocabCommand};
use bertpipe::config::{ConfigErrors, Pipeline};
use bertpipe::pipeline::{self, RunOptions};
use clap::Parser;

/// Exit codes: 0 ok, 1 failure, 2 usage (clap), 78 configuration error.
const EXIT_CONFIG: u8 = 78;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Vocab(VocabCommand::Train(args)) => vocab_train(args),
        Command::Pipeline(PipelineCommand::Validate(args)) => {
            match Pipeline::load(&args.config.pipeline, &args.config.set) {
                Ok(p) => {
                    println!(
                        "{}: ok ({} source, {} steps, sink {})",
                        args.config.pipeline.display(),
                        p.source.type_name(),
                        p.steps.len(),
                        p.sink.path().display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => config_failure(&e),
            }
        }
        Command::Pipeline(PipelineCommand::Run(args)) => {
            let p = match Pipeline::load(&args.config.pipeline, &args.config.set) {
                Ok(p) => p,
                Err(e) => return config_failure(&e),
            };
            let opts =
                RunOptions { threads: args.threads, resume: args.resume, overwrite: args.overwrite, quiet: args.quiet };
            match pipeline::run(&p, &opts) {
                Ok(summary) => {
                    if !args.quiet {
                        eprintln!("{}", pipeline::format_summary(&summary));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn vocab_train(args: bertpipe::cli::VocabTrainArgs) -> ExitCode {
    let p = match Pipeline::load(&args.config.pipeline, &args.config.set) {
        Ok(p) => p,
        Err(e) => return config_failure(&e),
    };
    let pipeline_lowercase = p.steps.iter().find_map(|s| match s {
        PipelineStep::Tokenize(t) => Some(t.lowercase),
        _ => None,
    });
    let opts = bertpipe::tokenize::train::VocabTrainOptions {
        size: args.size,
        min_frequency: args.min_frequency,
        lowercase: !args.cased && pipeline_lowercase.unwrap_or(true),
        out: args.out,
        threads: args.threads,
        quiet: args.quiet,
    };
    match bertpipe::tokenize::train::train_vocab(&p, &opts) {
        Ok(r) => {
            eprintln!(
                "vocab: {} tokens from {} documents -> {} and {}\ncoverage on the same corpus: {} tokens, {} [UNK] ({:.4}%)",
                r.vocab_size,
                r.docs,
                r.vocab_txt.display(),
                r.tokenizer_json.display(),
                r.tokens,
                r.unk_tokens,
                100.0 * r.unk_rate()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn config_failure(e: &ConfigErrors) -> ExitCode {
    eprintln!("{e}");
    let n = e.0.len();
    eprintln!("error: {n} configuration problem{}", if n == 1 { "" } else { "s" });
    ExitCode::from(EXIT_CONFIG)
}
