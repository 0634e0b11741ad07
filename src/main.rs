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
        Command::Stats(args) => stats(args),
        Command::Train(args) => train(args),
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

fn stats(args: bertpipe::cli::StatsArgs) -> ExitCode {
    use bertpipe::stats::{self, render, StatsError, StatsOptions};
    let opts = StatsOptions {
        by: args.by,
        max_len: args.max_len,
        top: args.top,
        vocab: args.vocab,
        cased: args.cased,
        set: args.set,
        threads: args.threads,
        quiet: args.quiet,
    };
    let (report, collected) = match stats::run(&args.input, &opts) {
        Ok(r) => r,
        Err(StatsError::Config(e)) => return config_failure(&e),
        Err(StatsError::Other(e)) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let text = if args.json {
        serde_json::to_string_pretty(&report).expect("the report serialises") + "\n"
    } else if args.csv {
        render::to_csv(&report)
    } else {
        render::to_table(&report)
    };
    print!("{text}");
    if let Some(dir) = &args.plot {
        match stats::plot::write_all(&report, dir) {
            Ok(files) if !args.quiet => eprintln!("plots: {} files in {}", files.len(), dir.display()),
            Ok(_) => {}
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    if !args.quiet {
        let mb = collected.text_bytes as f64 / 1e6;
        let rss =
            pipeline::progress::peak_rss_bytes().map(pipeline::progress::human_bytes).unwrap_or_else(|| "?".into());
        let rate =
            if mb > 0.0 { format!("{:.1} MB/s of text, ", mb / collected.seconds.max(1e-6)) } else { String::new() };
        eprintln!(
            "stats: {} {}s read in {:.2}s ({rate}peak RSS {rss})",
            collected.read, collected.unit, collected.seconds
        );
    }
    ExitCode::SUCCESS
}

fn train(args: bertpipe::cli::TrainArgs) -> ExitCode {
    use bertpipe::train::{self, config::TrainConfig, TrainOptions};
    let cfg = match TrainConfig::load(&args.config, &args.set) {
        Ok(c) => c,
        Err(e) => return config_failure(&e),
    };
    let opts = TrainOptions { resume: args.resume, overwrite: args.overwrite, quiet: args.quiet, device: args.device };
    match train::run(&cfg, &opts) {
        Ok(s) => {
            eprintln!("{}", train::format_summary(&s));
            if s.interrupted {
                ExitCode::from(130)
            } else {
                ExitCode::SUCCESS
            }
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
