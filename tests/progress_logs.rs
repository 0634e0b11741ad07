//! Progress that reads well in a log (issue 55): when stderr is not a terminal — a scheduler's
//! or `nohup`'s log file, or the pipe these tests read — the bars indicatif would hide become
//! plain lines: `[train] step i/N …` every `logging_steps`, and `[pipeline] …` (and `eval`,
//! `hashing` …) every `BERTPIPE_PROGRESS_SECS` seconds. `--quiet` silences both.

mod common;

use std::path::Path;

use common::chain::{pipelines, write_experiment};
use common::{assert_ok, bertpipe, bertpipe_env, run_pipeline, stderr};
use serde_json::Value;

/// Classification shards of the bundled sample, from `pipelines/imdb.yaml` (quietly).
fn sample_shards(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("imdb");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &out, &[]));
    out
}

/// `bertpipe train pipelines/imdb-finetune.yaml --set data=… --set output_dir=… --set SETTINGS… FLAGS…`
/// with stderr piped, as under a scheduler.
fn train(data: &Path, out: &Path, settings: &[&str], flags: &[&str]) -> std::process::Output {
    let (d, o) = (format!("data={}", data.display()), format!("output_dir={}", out.display()));
    let mut args = vec!["train", "pipelines/imdb-finetune.yaml", "--set", &d, "--set", &o];
    for s in settings {
        args.extend(["--set", s]);
    }
    args.extend_from_slice(flags);
    bertpipe(&args)
}

fn lines_starting<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// `M:SS` or `H:MM:SS`.
fn is_clock(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    (2..=3).contains(&parts.len())
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && parts[1..].iter().all(|p| p.len() == 2)
}

/// The value after `name ` in a line whose fields are two spaces apart.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split("  ").find_map(|f| f.strip_prefix(name)?.strip_prefix(' '))
}

#[test]
fn training_in_a_log_prints_one_plain_line_per_logging_step_with_an_eta() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample_shards(dir.path());
    let out = dir.path().join("ft");
    let settings = ["max_steps=4", "logging_steps=1", "eval_split=none", "per_device_train_batch_size=8"];
    let o = train(&data, &out, &settings, &[]);
    assert_ok(&o);
    let err = stderr(&o);
    assert!(!err.contains('\x1b'), "no terminal control codes in a log: {err:?}");
    let steps = lines_starting(&err, "[train] step ");
    assert_eq!(steps.len(), 4, "one line per step:\n{err}");
    let records: Vec<Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &Value| r.get("loss").is_some())
        .collect();
    assert_eq!(records.len(), 4, "{records:?}");
    for (i, (line, record)) in steps.iter().zip(&records).enumerate() {
        let step = i + 1;
        assert!(line.starts_with(&format!("[train] step {step}/4 ({}%)  ", step * 100 / 4)), "{line}");
        // The loss of the line is the loss of the metrics.jsonl record of the same step.
        let loss = record["loss"].as_f64().unwrap();
        assert_eq!(field(line, "loss"), Some(format!("{loss:.4}").as_str()), "{line} vs {record}");
        assert!(field(line, "lr").is_some_and(|v| v.parse::<f64>().is_ok()), "{line}");
        for unit in ["steps/s", "samples/s", "tokens/s"] {
            let figure = line.split("  ").find_map(|f| f.strip_suffix(&format!(" {unit}")));
            assert!(figure.is_some_and(|v| v.replace(',', "").parse::<f64>().is_ok()), "{unit} in {line}");
        }
        assert!(field(line, "elapsed").is_some_and(is_clock), "{line}");
        assert!(field(line, "eta").is_some_and(is_clock), "{line}");
    }
    assert_eq!(field(steps[3], "eta"), Some("0:00"), "nothing is left after the last step: {}", steps[3]);
    // The closing summary is still there, after the lines.
    let summary = err.find("trained 4 steps").unwrap_or_else(|| panic!("{err}"));
    assert!(err.find(steps[3]).unwrap() < summary, "{err}");
}

#[test]
fn training_lines_follow_logging_steps_and_each_evaluation_gets_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample_shards(dir.path());
    let out = dir.path().join("ft");
    let settings = ["max_steps=5", "logging_steps=2", "eval_steps=4", "per_device_train_batch_size=8"];
    let o = train(&data, &out, &settings, &[]);
    assert_ok(&o);
    let err = stderr(&o);
    let steps: Vec<String> =
        lines_starting(&err, "[train] step ").iter().map(|l| l.split("  ").next().unwrap().to_string()).collect();
    // Every 2 steps, and the last one.
    assert_eq!(steps, ["[train] step 2/5 (40%)", "[train] step 4/5 (80%)", "[train] step 5/5 (100%)"], "{err}");
    let evals = lines_starting(&err, "[train] eval at step ");
    assert_eq!(evals.len(), 2, "at step 4 and at the last step:\n{err}");
    for (line, step) in evals.iter().zip([4, 5]) {
        assert!(line.starts_with(&format!("[train] eval at step {step}/5  split test  ")), "{line}");
        assert!(field(line, "eval_loss").is_some_and(|v| v.parse::<f64>().is_ok()), "{line}");
        assert!(field(line, "eval_accuracy").is_some_and(|v| v.parse::<f64>().is_ok()), "{line}");
        assert!(field(line, "took").is_some_and(is_clock), "{line}");
    }
}

#[test]
fn quiet_training_prints_no_progress_lines() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample_shards(dir.path());
    let out = dir.path().join("ft");
    let settings = ["max_steps=2", "logging_steps=1", "eval_steps=2", "per_device_train_batch_size=8"];
    let o = train(&data, &out, &settings, &["--quiet"]);
    assert_ok(&o);
    let err = stderr(&o);
    assert!(!err.contains("[train]"), "--quiet prints no progress:\n{err}");
    assert!(err.contains("trained 2 steps"), "the summary stays: {err}");
}

#[test]
fn a_pipeline_in_a_log_prints_plain_progress_lines_on_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out_set = format!("sink.path={}", out.display());
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        let mut args = vec!["pipeline", "run", "pipelines/imdb.yaml", "--set", &out_set, "--overwrite"];
        args.extend_from_slice(extra);
        let o = bertpipe_env(&args, env);
        assert_ok(&o);
        stderr(&o)
    };

    // An interval of 0: a line at every update.
    let err = run(&[("BERTPIPE_PROGRESS_SECS", "0")], &[]);
    assert!(!err.contains('\x1b'), "no terminal control codes in a log: {err:?}");
    let lines = lines_starting(&err, "[pipeline] ");
    assert!(!lines.is_empty(), "plain progress lines:\n{err}");
    for line in &lines {
        // The sample is an aclImdb folder: files done of the files listed.
        let first = line.strip_prefix("[pipeline] ").unwrap().split("  ").next().unwrap();
        let (done, rest) = first.split_once('/').unwrap_or_else(|| panic!("{line}"));
        let (total, pct) = rest.split_once(" files (").unwrap_or_else(|| panic!("{line}"));
        let (done, total): (u64, u64) =
            (done.replace(',', "").parse().unwrap(), total.replace(',', "").parse().unwrap());
        assert!(done >= 1 && done <= total, "{line}");
        assert_eq!(pct, format!("{}%)", done * 100 / total), "{line}");
        assert!(line.contains(" files/s  "), "{line}");
        assert!(field(line, "elapsed").is_some_and(is_clock), "{line}");
        assert!(field(line, "eta").is_some_and(is_clock), "{line}");
    }
    // The summary is unchanged, after the lines.
    assert!(err.contains("imdb: 600 docs in"), "{err}");

    // The default interval (30 s) or a long one: nothing in so short a run.
    let err = run(&[("BERTPIPE_PROGRESS_SECS", "3600")], &[]);
    assert!(!err.contains("[pipeline]"), "{err}");
    assert!(err.contains("imdb: 600 docs in"), "{err}");

    // --quiet: nothing at all, whatever the interval.
    let err = run(&[("BERTPIPE_PROGRESS_SECS", "0")], &["--quiet"]);
    assert!(err.is_empty(), "--quiet prints nothing: {err}");
}

/// The case of the issue: `bertpipe run` under a scheduler printed nothing between
/// `== finetune (train): not run before` and the end of the training.
#[test]
fn a_chain_in_a_log_shows_each_stage_progress_under_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write_experiment(
        dir.path(),
        "chain.yaml",
        "logs",
        &format!(
            "  data:\n    base: {}\n  finetune: {{ base: {}, max_steps: 3, logging_steps: 1, eval_split: none }}\n",
            pipelines("imdb.yaml"),
            pipelines("imdb-finetune.yaml")
        ),
    );
    let exp = exp.to_str().unwrap();
    let o = bertpipe_env(&["run", exp], &[("BERTPIPE_PROGRESS_SECS", "0")]);
    assert_ok(&o);
    let err = stderr(&o);
    let at = |needle: &str| err.find(needle).unwrap_or_else(|| panic!("no `{needle}` in\n{err}"));
    let (data, finetune) = (at("== data (pipeline)"), at("== finetune (train)"));
    let pipeline_line = at("\n[pipeline] ");
    assert!(data < pipeline_line && pipeline_line < finetune, "{err}");
    let mut last = finetune;
    for step in 1..=3 {
        let line = at(&format!("\n[train] step {step}/3 ("));
        assert!(line > last, "step {step} after the header and the step before it:\n{err}");
        last = line;
    }

    let quiet = bertpipe_env(&["run", exp, "--quiet", "--force", "all"], &[("BERTPIPE_PROGRESS_SECS", "0")]);
    assert_ok(&quiet);
    let err = stderr(&quiet);
    assert!(!err.contains("[train]") && !err.contains("[pipeline]"), "--quiet prints no progress:\n{err}");
}
