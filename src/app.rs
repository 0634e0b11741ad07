//! The command line: what `bertpipe`'s `main` runs, and the `bertpipe` command of the Python
//! wheel (`python/`) too, so both are one program. Each command parses its flags (clap, in
//! [`crate::cli`]), calls the library and turns the result into printing and an exit code.

use std::process::ExitCode;

use crate::cli::{Cli, Command, PipelineCommand, VocabCommand};
use crate::config::{ConfigErrors, Pipeline};
use crate::pipeline::{self, RunOptions};
use clap::Parser;

/// Exit codes: 0 ok, 1 failure, 2 usage (clap), 78 configuration error.
const EXIT_CONFIG: u8 = 78;

/// Signals as a command-line program wants them, called before [`run`] by `main` and the
/// wheel's command: SIGPIPE back to its default, so `bertpipe … | head` ends quietly when
/// `head` has read enough (Rust's runtime and Python both ignore it, which turns the next write
/// into an error, or a panic in `print!`). Under a launcher with more than one rank it stays
/// ignored: MPI's own sockets must not end a rank.
pub fn cli_signals() {
    let ranks = crate::train::dist::World::from_vars(|k| std::env::var(k).ok()).map_or(1, |w| w.size);
    if ranks == 1 {
        // SAFETY: setting a signal's disposition to its default, before any thread of ours runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

/// Runs the command line `args` (the program's name first, as `std::env::args_os` gives it)
/// and says how it ended. Printing and exit codes are the command's own.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    match cli.command {
        Command::Vocab(VocabCommand::Train(args)) => vocab_train(args),
        Command::Stats(args) => stats(args),
        Command::Train(args) => train(args),
        Command::Run(args) => run_experiment(args),
        // Every rank would write the same files.
        Command::Export(crate::cli::ExportCommand::Onnx(args)) => {
            refused_under_a_launcher("export onnx", "it once, without a launcher")
                .unwrap_or_else(|| report(export_onnx(args)))
        }
        Command::Eval(args) => refused_under_a_launcher(
            "eval",
            "it once, without a launcher, or as a task array (`--task-index I --task-count N`, docs/scale.md)",
        )
        .unwrap_or_else(|| report(eval(args))),
        Command::Predict(args) => predict(args),
        Command::Doctor(args) => doctor(args),
        Command::Pipeline(PipelineCommand::Scan(args)) => pipeline_scan(args),
        Command::Shards(crate::cli::ShardsCommand::Merge(args)) => report(shards_merge(args)),
        Command::Pipeline(PipelineCommand::Validate(args))
            if crate::experiment::is_experiment(&args.config.pipeline) =>
        {
            match crate::experiment::load(&args.config.pipeline, &args.config.set) {
                Ok(e) if args.json => print_json(&experiment_facts(&args.config.pipeline, &e)),
                Ok(e) => {
                    let stages: Vec<String> =
                        e.stages.iter().map(|s| format!("{} ({})", s.name, s.kind.name())).collect();
                    println!(
                        "{}: ok (experiment `{}`: {})",
                        args.config.pipeline.display(),
                        e.name,
                        stages.join(" → ")
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => config_failure(&e),
            }
        }
        Command::Pipeline(PipelineCommand::Validate(args)) => {
            match Pipeline::load(&args.config.pipeline, &args.config.set) {
                Ok(p) if args.json => print_json(&pipeline_facts(&args.config.pipeline, &p)),
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
            if let Some(code) = refused_under_a_launcher(
                "pipeline run",
                "it once, or as a task array (`--task-index I --task-count N`, docs/scale.md)",
            ) {
                return code;
            }
            let p = match Pipeline::load(&args.config.pipeline, &args.config.set) {
                Ok(p) => p,
                Err(e) => return config_failure(&e),
            };
            let task = match task_spec(&args.task) {
                Ok(t) => t,
                Err(code) => return code,
            };
            // The command's process: C allocations (the shards' zstd contexts) are reused.
            crate::contract::keep_freed_memory();
            let opts = RunOptions {
                threads: args.threads,
                resume: args.resume,
                overwrite: args.overwrite,
                quiet: args.quiet,
                task,
            };
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

/// `pipeline validate --json` of a valid pipeline: what a script needs to know of it, as one
/// JSON object — above all whether a task array of it runs `pipeline scan` first
/// (`needs_scan`, from the steps themselves: a `dedup` in a comment is no step), and why it
/// cannot be a task array at all (`task_array_error`, else null).
fn pipeline_facts(file: &std::path::Path, p: &Pipeline) -> serde_json::Value {
    let scan_steps = pipeline::tasks::scan_steps(&p.steps);
    let task_array_error = pipeline::tasks::check_task_array(&p.steps).err().map(|e| format!("{e:#}"));
    let steps: Vec<&str> = p.steps.iter().map(|s| s.type_name()).collect();
    serde_json::json!({
        "file": file.display().to_string(),
        "ok": true,
        "kind": "pipeline",
        "name": p.name,
        "seed": p.seed,
        "source": {
            "type": p.source.type_name(),
            "path": p.source.path().display().to_string(),
            "detected": p.detected,
        },
        "splits": p.source.split_names(),
        "steps": steps,
        "sink": { "type": p.sink.type_name(), "path": p.sink.path().display().to_string() },
        "needs_scan": !scan_steps.is_empty(),
        "scan_steps": scan_steps,
        "task_array_error": task_array_error,
        "config_sha256": p.config_sha256(),
    })
}

/// `pipeline validate --json` of a valid experiment: its name, output folder and stages.
fn experiment_facts(file: &std::path::Path, e: &crate::experiment::Experiment) -> serde_json::Value {
    let stages: Vec<serde_json::Value> =
        e.stages.iter().map(|s| serde_json::json!({ "name": s.name, "kind": s.kind.name() })).collect();
    serde_json::json!({
        "file": file.display().to_string(),
        "ok": true,
        "kind": "experiment",
        "name": e.name,
        "out": e.out.display().to_string(),
        "stages": stages,
    })
}

/// Prints `value` as pretty JSON (one top-level key a line) on stdout.
fn print_json(value: &serde_json::Value) -> ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The task array this process belongs to (flags or the scheduler's environment), or the usage
/// exit code after saying what is wrong.
fn task_spec(args: &crate::cli::TaskArgs) -> Result<Option<pipeline::tasks::TaskSpec>, ExitCode> {
    pipeline::tasks::TaskSpec::resolve(args.task_index, args.task_count).map_err(|e| {
        eprintln!("error: {e:#}");
        ExitCode::from(2)
    })
}

/// The task of a command that only runs as one (`what` says which), or the usage exit code
/// after saying how to give it.
fn required_task(args: &crate::cli::TaskArgs, what: &str) -> Result<pipeline::tasks::TaskSpec, ExitCode> {
    match task_spec(args)? {
        Some(t) => Ok(t),
        None => {
            eprintln!("error: {what}: pass --task-index I --task-count N (or run it in a Slurm array / Kubernetes Indexed Job)");
            Err(ExitCode::from(2))
        }
    }
}

fn pipeline_scan(args: crate::cli::ScanArgs) -> ExitCode {
    let p = match Pipeline::load(&args.config.pipeline, &args.config.set) {
        Ok(p) => p,
        Err(e) => return config_failure(&e),
    };
    let task = match required_task(&args.task, "`pipeline scan` is the first phase of a task array") {
        Ok(t) => t,
        Err(code) => return code,
    };
    let started = std::time::Instant::now();
    report(pipeline::tasks::scan(&p, task, args.threads, args.quiet).map(|scan| {
        if !args.quiet {
            eprintln!(
                "scan of task {} of {}: keys of {} documents, {} noise scores in {:.2}s",
                task.index,
                task.count,
                scan.docs.len(),
                scan.scores.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }))
}

fn shards_merge(args: crate::cli::MergeArgs) -> anyhow::Result<()> {
    let m = pipeline::tasks::merge(&args.out, args.quiet)?;
    if !args.quiet {
        let docs_in: u64 = m.splits.values().map(|s| s.docs_in).sum();
        let docs_out: u64 = m.splits.values().map(|s| s.docs_out).sum();
        let shards: usize = m.splits.values().map(|s| s.shards.len()).sum();
        eprintln!(
            "merged {} tasks into {}: {docs_in} docs in, {docs_out} out, {} rejected, {shards} shards",
            m.tasks.map_or(0, |t| t.count),
            args.out.join("manifest.json").display(),
            docs_in - docs_out
        );
    }
    Ok(())
}

fn vocab_train(args: crate::cli::VocabTrainArgs) -> ExitCode {
    let p = match Pipeline::load(&args.config.pipeline, &args.config.set) {
        Ok(p) => p,
        Err(e) => return config_failure(&e),
    };
    let mut opts = args.settings.options(&p, args.out);
    opts.threads = args.threads;
    opts.quiet = args.quiet;
    match crate::vocab::train_vocab(&p, &opts) {
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

/// `FOLDER[:SPLIT]` (a suffix that is not a split name belongs to the path: `s3://…`).
fn folder_and_split(s: &str) -> (std::path::PathBuf, Option<String>) {
    match s.rsplit_once(':') {
        Some((folder, split)) if crate::contract::manifest::is_split_name(split) && !folder.is_empty() => {
            (std::path::PathBuf::from(folder), Some(split.to_string()))
        }
        _ => (std::path::PathBuf::from(s), None),
    }
}

fn leakage(args: &crate::cli::StatsArgs, eval: &std::path::Path) -> anyhow::Result<()> {
    use crate::stats::leakage;
    let params = crate::clean::minhash::MinHashParams { threshold: args.similarity, ..Default::default() };
    let opts = leakage::LeakageOptions {
        eval: eval.to_path_buf(),
        split: args.split.clone(),
        against: args.against.iter().map(|a| folder_and_split(a)).collect(),
        params,
        listed: args.top,
        set: args.set.clone(),
        threads: args.threads,
        quiet: args.quiet,
    };
    let r = leakage::run(&opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", leakage::format(&r));
    }
    Ok(())
}

fn stats(args: crate::cli::StatsArgs) -> ExitCode {
    use crate::stats::{self, render, StatsError, StatsOptions};
    if let Some(eval) = &args.leakage {
        return report(leakage(&args, eval));
    }
    let Some(input) = args.input.clone() else {
        eprintln!("error: stats needs an input (or --leakage)");
        return ExitCode::from(2);
    };
    let opts = StatsOptions {
        by: args.by,
        max_len: args.max_len,
        top: args.top,
        vocab: args.vocab,
        cased: args.cased,
        set: args.set,
        threads: args.threads,
        quiet: args.quiet,
        word_buckets: args.word_buckets,
        verified: false,
    };
    let (report, collected) = match stats::run(&input, &opts) {
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
        let page = dir.join(crate::page::REPORT_PAGE);
        let written = stats::plot::write_all(&report, dir).and_then(|files| {
            crate::page::write_stats_page(&report, &page, crate::page::stats_images_in(dir)?)?;
            Ok(files)
        });
        match written {
            Ok(files) if !args.quiet => {
                eprintln!("plots: {} files in {}; the report as a page: {}", files.len(), dir.display(), page.display())
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    if !args.quiet {
        let mb = collected.text_bytes as f64 / 1e6;
        let rss = crate::contract::progress::peak_rss_bytes()
            .map(crate::contract::progress::human_bytes)
            .unwrap_or_else(|| "?".into());
        let rate =
            if mb > 0.0 { format!("{:.1} MB/s of text, ", mb / collected.seconds.max(1e-6)) } else { String::new() };
        eprintln!(
            "stats: {} {}s read in {:.2}s ({rate}peak RSS {rss})",
            collected.read, collected.unit, collected.seconds
        );
    }
    ExitCode::SUCCESS
}

fn train(args: crate::cli::TrainArgs) -> ExitCode {
    use crate::train::{self, config::TrainConfig, TrainOptions};
    let cfg = match TrainConfig::load(&args.config, &args.set) {
        Ok(c) => c,
        Err(e) => {
            // Under a launcher, say which rank could not read its config (MPI is not started
            // yet; the launcher ends the other ranks when this one exits).
            if let Ok(w) = train::dist::World::from_vars(|k| std::env::var(k).ok()) {
                if w.size > 1 {
                    eprintln!(
                        "error: rank {} of {} ({}): the training config has problems:",
                        w.rank,
                        w.size,
                        w.launcher.name()
                    );
                }
            }
            return config_failure(&e);
        }
    };
    let opts = TrainOptions {
        resume: args.resume,
        overwrite: args.overwrite,
        quiet: args.quiet,
        device: args.device,
        dry_run: args.dry_run,
        show_batches: args.show_batches,
    };
    // Under a launcher, only rank 0 prints the plan and the summary; an error is printed by the
    // rank that had it, with its rank, and ends the others (they would wait for it forever).
    let main_rank = || train::dist::world().map_or(true, |w| w.is_main());
    let code = if opts.dry_run {
        match train::dry_run(&cfg, &opts) {
            Ok(plan) => {
                if main_rank() {
                    print!("{plan}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => rank_failure(e),
        }
    } else {
        match train::run(&cfg, &opts) {
            Ok(s) => {
                if main_rank() {
                    eprintln!("{}", train::format_summary(&s, "continue with --resume"));
                }
                finished(s.interrupted)
            }
            Err(e) => rank_failure(e),
        }
    };
    train::dist::finish();
    code
}

/// A training error: with more than one rank, said with this rank's number, and every other
/// rank of the job ended (MPI_Abort) so none hangs in a collective waiting for this one.
fn rank_failure(e: anyhow::Error) -> ExitCode {
    use crate::train::dist::{self, World};
    // The launcher's word for the rank when MPI could not start.
    let world = dist::world().ok().or_else(|| World::from_vars(|k| std::env::var(k).ok()).ok());
    match world {
        Some(w) if w.size > 1 => {
            use std::io::Write;
            // One write, so the launcher's own messages do not land inside the line.
            let line = format!("error: rank {} of {} ({}): {e:#}\n", w.rank, w.size, w.launcher.name());
            let _ = std::io::stderr().write_all(line.as_bytes());
            crate::train::dist::abort_others(1);
            ExitCode::FAILURE
        }
        _ => failure(e),
    }
}

/// 130 after Ctrl-C (a checkpoint was written), else success.
fn finished(interrupted: bool) -> ExitCode {
    if interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    }
}

fn failure(e: anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::FAILURE
}

/// `bertpipe COMMAND` started as more than one rank ([`crate::train::dist::refuse_as_ranks`]):
/// refused on every rank, naming it.
fn refused_under_a_launcher(command: &str, instead: &str) -> Option<ExitCode> {
    let e = crate::train::dist::refuse_as_ranks(command, instead).err()?;
    eprintln!("error: {e:#}");
    Some(ExitCode::FAILURE)
}

fn run_experiment(args: crate::cli::ExperimentArgs) -> ExitCode {
    use crate::experiment;
    crate::contract::keep_freed_memory();
    let exp = match experiment::load(&args.experiment, &args.set) {
        Ok(e) => e,
        Err(e) => return config_failure(&e),
    };
    // Under a launcher every rank says it, so each line says which rank.
    let who = match crate::train::dist::World::from_vars(|k| std::env::var(k).ok()) {
        Ok(w) if w.size > 1 => format!("{}: ", w.describe()),
        _ => String::new(),
    };
    let usage = |what: String| {
        use std::io::Write;
        let _ = std::io::stderr().write_all(format!("error: {who}{what}\n").as_bytes());
        ExitCode::from(2)
    };
    let Some(stage) = args.stage.as_deref() else {
        if args.task.task_index.is_some() || args.task.task_count.is_some() {
            return usage("--task-index / --task-count run one task of a stage: name it with --stage STAGE".into());
        }
        return run_chain(exp, args);
    };
    let found = match exp.named_stage("--stage", stage) {
        Ok(s) => s,
        Err(e) => return usage(format!("{e}")),
    };
    // Task flags (or a scheduler's array variables) make it one task of an array.
    let task = match task_spec(&args.task) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let is_train = matches!(found.spec, experiment::Spec::Train(_));
    if is_train && task.is_none() {
        if args.dry_run || args.scan {
            return usage(format!(
                "--stage {stage} runs the train stage; --dry-run is for the whole chain and --scan for a pipeline's tasks"
            ));
        }
        let name = stage.to_owned();
        return train_stage(&exp, &name, args);
    }
    let instead = format!("`{stage}` as a task array, without a launcher");
    if let Some(code) = refused_under_a_launcher("run", &instead) {
        return code;
    }
    let Some(task) = task else {
        let kind = found.kind.name();
        return usage(format!(
            "--stage {stage}: {} {kind} stage runs alone as one task of a task array: pass --task-index I --task-count N (or run it in a Slurm array / Kubernetes Indexed Job); only a train stage runs alone without",
            experiment::config::article(kind)
        ));
    };
    report(experiment::run_task(&exp, stage, task, args.scan, args.quiet))
}

/// `bertpipe run EXPERIMENT --stage TRAIN_STAGE`: the train stage alone, on every rank of a
/// launcher's job ([`crate::experiment::run_train_stage`]).
fn train_stage(exp: &crate::experiment::Experiment, stage: &str, args: crate::cli::ExperimentArgs) -> ExitCode {
    use crate::experiment;
    let opts = experiment::RunOptions {
        force: args.force,
        dry_run: false,
        quiet: args.quiet,
        wait: args.wait,
        until: None,
        no_install: args.no_install,
    };
    let code = match experiment::run_train_stage(exp, stage, &opts) {
        Ok(entry) => {
            let main = crate::train::dist::world().is_ok_and(|w| w.is_main());
            let interrupted = entry.status == "interrupted";
            if main && interrupted {
                eprintln!("interrupted during `{stage}`; run the same command to continue");
            } else if main && !args.quiet {
                eprintln!("`{}`: {} ({})", entry.stage, entry.status, entry.reason);
            }
            finished(interrupted)
        }
        // Every rank knows: none waits for another. One write per rank, so the ranks'
        // lines do not interleave.
        Err(e) if e.downcast_ref::<experiment::Refused>().is_some() => {
            use std::io::Write;
            let _ = std::io::stderr().write_all(format!("error: {e:#}\n").as_bytes());
            ExitCode::FAILURE
        }
        Err(e) => rank_failure(e),
    };
    crate::train::dist::finish();
    code
}

/// `bertpipe run EXPERIMENT` (no `--stage`): the whole chain, or through `--until`.
fn run_chain(exp: crate::experiment::Experiment, args: crate::cli::ExperimentArgs) -> ExitCode {
    use crate::experiment;
    // Every rank would run the whole chain into the same folder: only a train stage runs as
    // ranks (`--stage NAME`).
    let instead = "the chain without a launcher, and a train stage as ranks with `--stage NAME`";
    if let Some(code) = refused_under_a_launcher("run", instead) {
        return code;
    }
    let opts = experiment::RunOptions {
        force: args.force,
        dry_run: args.dry_run,
        quiet: args.quiet,
        wait: args.wait,
        until: args.until,
        no_install: args.no_install,
    };
    match experiment::run(&exp, &opts) {
        Ok(r) => {
            if args.dry_run {
                println!("{}", experiment::format_summary(&r));
            } else {
                eprintln!("{}", experiment::format_summary(&r));
                let page = r.out.join(crate::page::REPORT_PAGE);
                match page.is_file() {
                    true => eprintln!("report: {} (and {})", page.display(), r.out.join("report.md").display()),
                    false => eprintln!("report: {}", r.out.join("report.md").display()),
                }
            }
            if r.interrupted {
                eprintln!("interrupted; run the same command to continue");
            }
            finished(r.interrupted)
        }
        Err(e) => failure(e),
    }
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    r.map_or_else(failure, |()| ExitCode::SUCCESS)
}

fn export_onnx(args: crate::cli::ExportOnnxArgs) -> anyhow::Result<()> {
    use crate::onnx::{export, runtime, verify};
    use anyhow::Context as _;
    let mut settings = args.settings.clone();
    match (&args.quantize, args.fp16) {
        (Some(_), _) => settings.precision = export::Precision::Int8,
        (None, true) => settings.precision = export::Precision::Fp16,
        (None, false) => {}
    }
    let opts = settings.options(args.checkpoint.clone(), args.out.clone(), Vec::new());
    // With --verify the runtime is found before anything is exported, and the model is checked
    // where it was written aside: only a model that passed is renamed to --out.
    let rt = if settings.verify { Some(runtime::init(args.ort.ort_lib.as_deref())?) } else { None };
    let t0 = std::time::Instant::now();
    let staged = export::stage(&opts)?;
    let seconds = t0.elapsed().as_secs_f64();
    let checked = match rt {
        Some(rt) => Some(
            verify::verify_export(rt, staged.exported())
                .with_context(|| format!("the export failed --verify, so '{}' was not written", args.out.display()))?,
        ),
        None => None,
    };
    let done = staged.commit()?;
    let meta = |k: &str| done.metadata.iter().find(|(m, _)| m == k).map(|(_, v)| v.clone()).unwrap_or_default();
    eprintln!(
        "exported {} ({} {} nodes{}, {} parameters, {}) in {:.1}s: {}",
        args.checkpoint.display(),
        done.precision.name(),
        done.nodes,
        if settings.optimize { ", com.microsoft fused ops" } else { "" },
        done.parameters,
        crate::contract::progress::human_bytes(done.bytes),
        seconds,
        done.path.display()
    );
    if let Some(d) = &done.external_data {
        eprintln!("weights: {}", d.display());
    }
    eprintln!(
        "metadata: vocab_sha256 {} (of {}), vocab_id {}, max_len {}, id2label {}",
        meta("vocab_sha256"),
        done.vocab_file.display(),
        meta("vocab_id"),
        meta("max_len"),
        meta("id2label")
    );
    if let (Some(rt), Some(checked)) = (rt, checked) {
        for c in &checked {
            eprintln!("verify {:<32} {:>3} × {:<4} max |Δ logits| {:.3e}", c.name, c.batch, c.seq, c.max_abs_diff);
        }
        let worst = crate::metrics::worst_of(checked.iter().map(|c| c.max_abs_diff as f64));
        let tol = verify::Tolerance::of(done.precision);
        eprintln!(
            "verified against candle (float32) with ONNX Runtime {}: max |Δ logits| {worst:.3e}, within {}",
            rt.version,
            tol.describe()
        );
    }
    Ok(())
}

fn eval(args: crate::cli::EvalArgs) -> anyhow::Result<()> {
    use crate::onnx::eval;
    if let Some(crate::cli::EvalCommand::Merge(m)) = args.command {
        let r = eval::merge(&m.out)?;
        return eval_report(&r, m.json);
    }
    if let Some((key, why)) = args.settings.problems().into_iter().next() {
        anyhow::bail!("--{}: {why}", key.replace('_', "-"));
    }
    let (Some(model), Some(data)) = (args.model, args.data) else {
        anyhow::bail!("eval needs --model and --data");
    };
    let mut opts = args.settings.options(model, data, args.baseline, eval::ScoreLeaked::No);
    opts.out = args.out;
    opts.ort_lib = args.ort.ort_lib;
    opts.quiet = args.quiet;
    if let Some(task) = crate::pipeline::tasks::TaskSpec::resolve(args.task_index, args.task_count)? {
        let part = eval::run_task(&opts, task)?;
        let out = eval::out_dir(&opts);
        eprintln!(
            "eval task {} of {}: {} rows ({} shards) in {:.1}s, {} with non-finite logits → {}\nwhen every task has finished: bertpipe eval merge {}",
            task.index,
            task.count,
            part.rows,
            part.shards[1] - part.shards[0],
            part.model.seconds,
            part.nonfinite,
            eval::task_dir(&out, task.index).display(),
            out.display()
        );
        return Ok(());
    }
    let r = eval::run(&opts)?;
    eval_report(&r, args.json)
}

/// Prints an eval report and fails as it says (non-finite rows unless allowed, a failed gate).
fn eval_report(r: &crate::onnx::eval::EvalReport, json: bool) -> anyhow::Result<()> {
    use crate::onnx::eval;
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        println!("{}", eval::format_report(r));
    }
    match r.failure() {
        Some(why) => anyhow::bail!("{why}"),
        None => Ok(()),
    }
}

fn predict(args: crate::cli::PredictArgs) -> ExitCode {
    use crate::onnx::{eval, predict};
    let pipeline = match Pipeline::load(&args.pipeline, &args.set) {
        Ok(p) => p,
        Err(e) => return config_failure(&e),
    };
    let run = || -> anyhow::Result<()> {
        let inputs = predict::read_inputs(&args.texts, args.input.as_deref())?;
        let mut model = eval::open_model(&args.model, &args.device, args.threads, args.ort.ort_lib.as_deref())?;
        let (steps, pad) = predict::prepare(&pipeline, &model)?;
        eprintln!("model {}: {}, on {}", args.model.display(), eval::precision_of(&model), model.provider.describe());
        if let Some(note) = predict::label_note(&pipeline, &model) {
            eprintln!("note: {note}");
        }
        let preds = predict::predict(&mut model, &steps, pad, &inputs, args.batch_size)?;
        if args.json {
            for p in &preds {
                println!("{}", serde_json::to_string(p)?);
            }
        } else {
            println!("{}", predict::format_table(&preds, &model.label_names()));
        }
        let rejected = preds.iter().filter(|p| p.rejected.is_some()).count();
        if rejected > 0 {
            eprintln!("{rejected} of {} texts rejected by the pipeline (reasons above)", preds.len());
        }
        Ok(())
    };
    report(run())
}

fn doctor(args: crate::cli::DoctorArgs) -> ExitCode {
    use crate::doctor;
    let mut lib = args.ort.ort_lib.clone();
    if args.install {
        match doctor::install(args.gpu) {
            Ok(p) => {
                eprintln!("installed: {}", p.display());
                lib = Some(p);
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut lines = doctor::doctor(lib.as_deref());
    if let Some(m) = &args.model {
        lines.extend(doctor::describe_model(lib.as_deref(), m));
    }
    for (ok, line) in &lines {
        println!("{} {line}", if *ok { "ok  " } else { "--  " });
    }
    // Missing GPU pieces are normal on a CPU machine; only a missing runtime, or a --model
    // that does not open, fails.
    if lines.iter().any(|(ok, l)| !ok && (l.starts_with("ONNX Runtime:") || l.starts_with("model "))) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn config_failure(e: &ConfigErrors) -> ExitCode {
    eprintln!("{e}");
    let n = e.problems();
    eprintln!("error: {n} configuration problem{}", if n == 1 { "" } else { "s" });
    ExitCode::from(EXIT_CONFIG)
}
