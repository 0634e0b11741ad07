use std::process::ExitCode;

use bertpipe::cli::{Cli, Command, PipelineCommand};
use bertpipe::config::{ConfigErrors, Pipeline};
use bertpipe::pipeline::{self, RunOptions};
use clap::Parser;

/// Exit codes: 0 ok, 1 failure, 2 usage (clap), 78 configuration error.
const EXIT_CONFIG: u8 = 78;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
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

fn config_failure(e: &ConfigErrors) -> ExitCode {
    eprintln!("{e}");
    let n = e.0.len();
    eprintln!("error: {n} configuration problem{}", if n == 1 { "" } else { "s" });
    ExitCode::from(EXIT_CONFIG)
}
