//! `bertpipe run EXPERIMENT.yaml` on the bundled sample: the whole chain runs; a second run is
//! up to date; a cleaning change re-runs exactly the stages downstream of it; `--force` and
//! `--dry-run`; located configuration errors; a chain killed during fine-tuning and run again
//! ends with the weights and figures of an uninterrupted chain; the figures equal the single
//! commands'.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::chain::{bertpipe, eval_by_hand, pipelines, report, run, statuses, write_experiment};
use common::{assert_ok, stderr};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The sample chain with small training runs, written into `dir`, writing under `dir/out`.
fn experiment(dir: &Path) -> PathBuf {
    let stages = format!(
        "  pretrain_data: {}
  pretrain:
    base: {}
    max_steps: 20
    eval_steps: 20
    save_steps: 20
  data: {}
  finetune:
    base: {}
    init_from: pretrain
    num_train_epochs: 2
    save_steps: 10
  export: {{ optimize: false }}
  eval: {{ split: test }}
",
        pipelines("imdb-pretrain.yaml"),
        pipelines("imdb-mlm.yaml"),
        pipelines("imdb.yaml"),
        pipelines("imdb-finetune.yaml")
    );
    write_experiment(dir, "chain.yaml", "sample-chain", &stages)
}

/// A digest of every file under each stage's folder.
fn folder_digests(out: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(out).unwrap().flatten() {
        if e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.') {
            let mut h = Sha256::new();
            for (k, v) in common::tree_bytes(&e.path()) {
                h.update(k.as_bytes());
                h.update(Sha256::digest(&v));
            }
            m.insert(e.file_name().to_string_lossy().into_owned(), hex::encode(h.finalize()));
        }
    }
    m
}

/// `OUT/report.html` of the chain: a section per stage, the corpus charts of both pipelines,
/// the curves of both trainings, the evaluation's three charts and tables, all inlined; it
/// renders in headless Chromium with every picture loaded and nothing wider than the page.
fn assert_report_page(out: &Path, stages: &[&str]) -> String {
    let page = out.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    for s in stages {
        assert!(html.contains(&format!(">{s} (")), "no section for `{s}`");
    }
    for part in [
        "Confusion matrix",
        "ROC curve",
        "Reliability diagram",
        "Training and evaluation loss",
        "Splits and labels",
        "By length",
    ] {
        assert!(html.contains(part), "{part} is not on the page");
    }
    assert!(!html.contains("Not shown:"), "a section could not be shown");
    // The pretraining shards: tokens and NSP labels (no noise column); the classification
    // shards: tokens, noise and labels; each training: loss and eval curves; eval: confusion,
    // ROC and calibration.
    let images = html.matches("src=\"data:image/png;base64,").count();
    assert_eq!(images, 2 + 3 + 2 * 2 + 3, "pictures on the page");
    if let Some(r) = common::browser::check_page(&page, "experiment-sample-chain") {
        assert_eq!(r.images.len(), images);
    }
    html
}

/// The page without the parts that say how this run went (status badges, seconds, reasons).
fn strip_status(html: &str) -> String {
    let stages = html.find("<h2 id=\"stages\"").unwrap();
    let first = html[stages + 1..].find("<h2").unwrap() + stages + 1;
    html[first..].lines().filter(|l| !l.contains("class=\"badge")).collect::<Vec<_>>().join("\n")
}

fn expect(statuses: &BTreeMap<String, String>, want: &[(&str, &str)]) {
    let want: BTreeMap<String, String> = want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(statuses, &want);
}

#[test]
fn a_chain_runs_is_then_up_to_date_and_a_change_reruns_exactly_what_is_downstream() {
    let dir = tempfile::tempdir().unwrap();
    let exp = experiment(dir.path());
    let out = dir.path().join("out");
    let o = run(&exp, &[], &[]);
    assert_ok(&o);
    let all = ["pretrain_data", "pretrain", "data", "finetune", "export", "eval"];
    expect(&statuses(&out), &all.map(|s| (s, "ran")));
    for f in [
        "pretrain/final/model.safetensors",
        "finetune/final/model.safetensors",
        "export/model.onnx",
        "eval/metrics.json",
        "report.md",
    ] {
        assert!(out.join(f).exists(), "{f}");
    }
    // The finetune stage started from the pretrain stage's weights, on the `data` shards.
    let err = stderr(&o);
    assert!(err.contains("stage") && err.contains("finetune"), "{err}");
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("finetune/final/config.json")).unwrap()).unwrap();
    assert_eq!(state["architectures"][0], "BertForSequenceClassification");

    // The chain's figures are the single commands' on the same inputs.
    let single = eval_by_hand(&out, &["--split", "test"]);
    let r = report(&out);
    assert_eq!(r["eval"]["figures"]["accuracy"], single["metrics"]["accuracy"]);
    assert_eq!(r["eval"]["figures"]["f1"], single["metrics"]["f1"]);
    let manifest = common::manifest(&out.join("data"));
    let docs_out: u64 = manifest["splits"].as_object().unwrap().values().map(|s| s["docs_out"].as_u64().unwrap()).sum();
    assert_eq!(r["data"]["figures"]["docs_out"].as_u64(), Some(docs_out));
    // The ONNX model names the stage that made it by its key, and the key's record leads back to
    // the checkpoint by content.
    let onnx = std::fs::read(out.join("export/model.onnx")).unwrap();
    let export_key = r["export"]["key"].as_str().unwrap();
    assert!(onnx.windows(export_key.len()).any(|w| w == export_key.as_bytes()), "the stage key in the metadata");
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("eval/metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["chain"]["experiment"], "sample-chain");
    assert_eq!(metrics["chain"]["stages"]["export"], export_key, "the eval report names the stage");
    let record = |s: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(out.join(format!(".stages/{s}.json"))).unwrap()).unwrap()
    };
    assert_eq!(record("export")["parts"]["upstream"]["finetune"], record("finetune")["identity"]);
    let page = assert_report_page(&out, &all);

    // Again: nothing runs, nothing changes.
    let before = folder_digests(&out);
    let o = run(&exp, &[], &[]);
    assert_ok(&o);
    expect(&statuses(&out), &all.map(|s| (s, "up to date")));
    assert_eq!(folder_digests(&out), before);
    assert!(stderr(&o).contains("up to date"), "{}", stderr(&o));
    // The page of an up-to-date chain shows every stage as fully as the run that built it.
    assert_eq!(strip_status(&assert_report_page(&out, &all)), strip_status(&page));

    // --dry-run after a cleaning change: what would run and the first reason, nothing run.
    let change = ["--set", "data.steps[4].max_noise=12"];
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--dry-run", change[0], change[1]], &[]);
    assert_ok(&o);
    let plan = String::from_utf8_lossy(&o.stdout).to_string();
    for (stage, status, why) in [
        ("pretrain_data", "up to date", ""),
        ("data", "will run", "its configuration changed"),
        // Whether the stages after `data` run depends on what it writes: shown, not guessed.
        ("finetune", "may run", "only if `data` (which will run) writes something new"),
        ("eval", "may run", ""),
    ] {
        let line = plan.lines().find(|l| l.starts_with(&format!("{stage} "))).unwrap_or_else(|| panic!("{plan}"));
        assert!(line.contains(status) && line.contains(why), "{line}");
    }
    assert_eq!(folder_digests(&out), before, "a dry run changes nothing");

    // The change itself: max_noise 12 rejects one more test review (the training shards stay
    // byte-identical). `data` runs; `finetune` runs, as its evaluation split changed, and ends
    // with the same weights, so the export of them is up to date; `eval` reads the changed test
    // split and runs. The pretraining half is untouched.
    let train_shard = std::fs::read(out.join("data/train/part-00000.parquet")).unwrap();
    let o = run(&exp, &change, &[]);
    assert_ok(&o);
    expect(
        &statuses(&out),
        &[
            ("pretrain_data", "up to date"),
            ("pretrain", "up to date"),
            ("data", "ran"),
            ("finetune", "ran"),
            ("export", "up to date"),
            ("eval", "ran"),
        ],
    );
    assert!(std::fs::read(out.join("data/train/part-00000.parquet")).unwrap() == train_shard);
    let after = folder_digests(&out);
    for s in ["pretrain_data", "pretrain", "export"] {
        assert_eq!(after[s], before[s], "{s} untouched");
    }
    for s in ["data", "finetune", "eval"] {
        assert_ne!(after[s], before[s], "{s} rewritten");
    }

    // --force re-runs a stage; what reads it runs only if the stage wrote something new (an
    // export of the same checkpoint writes the same model, so the evaluation stays).
    let model = std::fs::read(out.join("export/model.onnx")).unwrap();
    let o = run(&exp, &["--set", "data.steps[4].max_noise=12", "--force", "export"], &[]);
    assert_ok(&o);
    let st = statuses(&out);
    assert_eq!(
        (st["export"].as_str(), st["eval"].as_str(), st["finetune"].as_str()),
        ("ran", "up to date", "up to date")
    );
    assert!(std::fs::read(out.join("export/model.onnx")).unwrap() == model, "the export is deterministic");
    let o = run(&exp, &["--force", "nosuch"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("--force nosuch: no such stage"), "{}", stderr(&o));
}

#[test]
fn a_chain_killed_during_finetune_continues_to_the_same_weights_and_figures() {
    let dir = tempfile::tempdir().unwrap();
    let whole = experiment(dir.path());
    let other = tempfile::tempdir().unwrap();
    let killed = experiment(other.path());
    assert_ok(&run(&whole, &[], &[]));
    // Pretraining takes 20 steps; fine-tuning is stopped as Ctrl-C would at its step 25.
    let o = run(&killed, &[], &[("BERTPIPE_STOP_AT_STEP", "25")]);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let out = other.path().join("out");
    let st = statuses(&out);
    assert_eq!(
        (st["pretrain"].as_str(), st["finetune"].as_str(), st["export"].as_str()),
        ("ran", "interrupted", "not run")
    );
    let o = run(&killed, &[], &[]);
    assert_ok(&o);
    let st = statuses(&out);
    assert_eq!((st["pretrain"].as_str(), st["finetune"].as_str(), st["eval"].as_str()), ("up to date", "ran", "ran"));
    let weights = |d: &Path| std::fs::read(d.join("out/finetune/final/model.safetensors")).unwrap();
    assert!(weights(dir.path()) == weights(other.path()), "resumed fine-tuning ends with the same weights");
    let figures = |d: &Path| report(&d.join("out"))["eval"]["figures"]["accuracy"].clone();
    assert_eq!(figures(dir.path()), figures(other.path()));
}

#[test]
fn cycles_bad_wires_and_unknown_stages_are_located_configuration_errors() {
    let dir = tempfile::tempdir().unwrap();
    // `file`: the experiment `name` with `stages`; `want`: what its errors must say.
    let check = |file: &str, name: &str, stages: String, want: &[&str]| {
        let path = write_experiment(dir.path(), file, name, &stages);
        for args in
            [vec!["run", path.to_str().unwrap(), "--dry-run"], vec!["pipeline", "validate", path.to_str().unwrap()]]
        {
            let o = bertpipe(&args, &[]);
            assert_eq!(o.status.code(), Some(78), "{args:?}: {}", stderr(&o));
            for w in want {
                assert!(stderr(&o).contains(w), "{w:?} not in\n{}", stderr(&o));
            }
        }
    };
    check(
        "cycle.yaml",
        "c",
        format!(
            "  a: {{ base: {0}, init_from: b }}\n  b: {{ base: {0}, init_from: a }}\n",
            pipelines("imdb-finetune.yaml")
        ),
        &["cycle.yaml:4:3: stages form a cycle: a → b → a"],
    );
    check(
        "wire.yaml",
        "w",
        format!(
            "  data: {}\n  export: {{ checkpoint: /nowhere }}\n  finetune: {{ base: {}, data: export }}\n",
            pipelines("imdb.yaml"),
            pipelines("imdb-finetune.yaml")
        ),
        &["wire.yaml:6:", "finetune.data: `export` is an export stage; data must name a pipeline stage (data)"],
    );
    check(
        "unknown.yaml",
        "u",
        format!(
            "  pretrain: {}\n  finetune: {{ base: {}, init_from: pretrian }}\n",
            pipelines("imdb-mlm.yaml"),
            pipelines("imdb-finetune.yaml")
        ),
        &["unknown.yaml:5:", "finetune.init_from: no stage `pretrian` and no such path, did you mean `pretrain`?"],
    );
    check(
        "kind.yaml",
        "k",
        "  score: { kind: evl }\n".into(),
        &["kind.yaml:4:12: score.kind: unknown kind `evl`, did you mean `eval`?"],
    );
    // A stage's own file keeps its own located errors.
    check(
        "inner.yaml",
        "i",
        format!(
            "  data: {}\n  finetune: {{ base: {}, learning_rat: 1 }}\n",
            pipelines("imdb.yaml"),
            pipelines("imdb-finetune.yaml")
        ),
        &["unknown field `learning_rat`", "did you mean `learning_rate`?"],
    );
}

/// `--stage data --task-index I --task-count N` runs one task of a pipeline stage (scan phase
/// first, as the pipeline has dedup); the next plain run merges the tasks and goes on, with
/// the figures of a one-process run.
#[test]
fn a_pipeline_stage_runs_as_a_task_array_and_the_chain_merges_it() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write_experiment(dir.path(), "array.yaml", "array", &format!("  data: {}\n", pipelines("imdb.yaml")));
    let e = exp.to_str().unwrap();
    for phase in [&["--scan"][..], &[]] {
        for i in ["0", "1"] {
            let mut args = vec!["run", e, "--stage", "data", "--task-index", i, "--task-count", "2", "--quiet"];
            args.extend_from_slice(phase);
            assert_ok(&bertpipe(&args, &[]));
        }
    }
    let out = dir.path().join("out");
    assert!(out.join("data/tasks/00001").is_dir());
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(statuses(&out)["data"], "ran");
    let merged = common::manifest(&out.join("data"));
    assert_eq!(merged["tasks"]["count"], 2);
    let single = dir.path().join("single");
    assert_ok(&common::run_pipeline("pipelines/imdb.yaml", &single, &[]));
    let docs = |m: &Value| -> Vec<u64> {
        m["splits"].as_object().unwrap().values().map(|s| s["docs_out"].as_u64().unwrap()).collect()
    };
    assert_eq!(docs(&merged), docs(&common::manifest(&single)));
    assert_eq!(statuses(&out)["data"], "ran");
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(statuses(&out)["data"], "up to date");
    // Only pipeline stages run as arrays.
    let o = bertpipe(&["run", e, "--stage", "nope", "--task-index", "0", "--task-count", "2"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("--stage nope: no such stage"), "{}", stderr(&o));
}

/// A vocab stage learns a vocabulary from a pipeline's cleaned text, and a pipeline stage's
/// tokenize step that names it tokenizes with it.
#[test]
fn a_vocab_stage_feeds_the_tokenize_step_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let imdb = pipelines("imdb.yaml");
    let stages = format!(
        "  data:\n    base: {imdb}\n    steps[6].vocab: words\n  words: {{ kind: vocab, pipeline: {imdb}, size: 2000, min_frequency: 2 }}\n"
    );
    let exp = write_experiment(dir.path(), "vocab.yaml", "own-vocab", &stages);
    assert_ok(&run(&exp, &[], &[]));
    let out = dir.path().join("out");
    let st = statuses(&out);
    assert_eq!((st["words"].as_str(), st["data"].as_str()), ("ran", "ran"));
    let vocab = std::fs::read(out.join("words/vocab.txt")).unwrap();
    let m = common::manifest(&out.join("data"));
    assert_eq!(m["tokenizer"]["vocab_sha256"], hex::encode(Sha256::digest(&vocab)));
    assert!(m["tokenizer"]["vocab_size"].as_u64().unwrap() <= 2000);
}

#[test]
fn an_int8_export_is_a_stage_and_its_gate_against_the_fp32_export_is_held_in_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let stages = format!(
        "  data: {}
  finetune:
    base: {}
    max_steps: 12
    eval_split: null
  export: {{ optimize: false }}
  export_int8: {{ kind: export, precision: int8, verify: true }}
  gate: {{ kind: eval, model: export_int8, baseline: export, max_drop: 0.5 }}
",
        pipelines("imdb.yaml"),
        pipelines("imdb-finetune.yaml")
    );
    let exp = write_experiment(dir.path(), "chain.yaml", "int8-chain", &stages);
    let out = dir.path().join("out");
    assert_ok(&run(&exp, &[], &[]));
    expect(&statuses(&out), &["data", "finetune", "export", "export_int8", "gate"].map(|s| (s, "ran")));
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("gate/metrics.json")).unwrap()).unwrap();
    assert_eq!(
        (metrics["precision"].as_str(), metrics["gate"]["baseline_precision"].as_str()),
        (Some("int8"), Some("fp32"))
    );
    assert_eq!(metrics["gate"]["passed"], true);
    let r = report(&out);
    assert_eq!(r["gate"]["figures"]["agreement"], metrics["gate"]["agreement"]);
    // The report says which export the eval stage evaluated.
    assert_eq!(r["gate"]["figures"]["model"], "export_int8");
    // The chain verifies its exports without being asked.
    assert!(r["export"]["figures"]["verify_max_abs_diff"].as_f64().is_some(), "{}", r["export"]);
    // The eval stage as a task array: the next run merges it into the one-process report.
    let e = exp.to_str().unwrap();
    for i in ["0", "1"] {
        assert_ok(&bertpipe(&["run", e, "--stage", "gate", "--task-index", i, "--task-count", "2", "--quiet"], &[]));
    }
    assert!(out.join("gate/tasks/00001/part.json").is_file());
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(statuses(&out)["gate"], "ran");
    let r = report(&out);
    assert_eq!(r["gate"]["figures"]["tasks"], 2);
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(out.join("gate/metrics.json")).unwrap()).unwrap();
    for k in ["metrics", "by_length", "calibration", "mistakes", "nonfinite"] {
        assert_eq!(merged[k], metrics[k], "{k}");
    }
    assert_eq!(merged["gate"]["flips"], metrics["gate"]["flips"]);
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(statuses(&out)["gate"], "up to date");
    // The precision is part of the export's key: fp16 re-runs the export and its gate only.
    let o = run(&exp, &["--set", "export_int8.precision=fp16"], &[]);
    assert_ok(&o);
    let st = statuses(&out);
    assert_eq!((st["export"].as_str(), st["export_int8"].as_str(), st["gate"].as_str()), ("up to date", "ran", "ran"));
    // A negative max_drop, or an unknown precision, is a located configuration error.
    let o = run(&exp, &["--set", "export_int8.precision=fp16", "--set", "gate.max_drop=-1"], &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("max_drop"), "{}", stderr(&o));
    let o = run(&exp, &["--set", "export_int8.precision=int4"], &[]);
    assert!(
        !o.status.success()
            && stderr(&o).contains("invalid value `int4` for export_int8.precision, did you mean `int8`?"),
        "{}",
        stderr(&o)
    );
}

/// `--until` stops a chain after a stage; `--stage TRAIN` runs that train stage alone (one
/// process here; under a launcher, data-parallel: `tests/distributed.rs`) and records it, so the
/// next plain run goes on after it; the flags that do not fit are usage errors that say why.
#[test]
fn until_a_stage_then_the_train_stage_alone_then_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let stages = format!(
        "  data: {}\n  finetune:\n    base: {}\n    max_steps: 4\n    per_device_train_batch_size: 8\n  export: {{ optimize: false }}\n",
        pipelines("imdb.yaml"),
        pipelines("imdb-finetune.yaml")
    );
    let exp = write_experiment(dir.path(), "chain.yaml", "until", &stages);
    let out = dir.path().join("out");
    let usage = |extra: &[&str], want: &str| {
        let o = run(&exp, extra, &[]);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
    };
    usage(&["--stage", "nosuch"], "no such stage (stages: data, finetune, export)");
    usage(&["--stage", "export"], "an export stage runs alone as one task of a task array");
    usage(&["--task-index", "0"], "name it with --stage STAGE");
    usage(&["--stage", "finetune", "--task-index", "0"], "the task count is unknown");
    usage(&["--stage", "finetune", "--dry-run"], "--dry-run is for the whole chain");
    let o = run(&exp, &["--until", "nosuch"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("--until nosuch: no such stage"), "{}", stderr(&o));
    assert!(!out.join(".stages").exists(), "nothing ran");

    // The train stage before the stage it reads: refused, saying what to run.
    let o = run(&exp, &["--stage", "finetune"], &[]);
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("`finetune` reads `data`, which is not up to date"), "{}", stderr(&o));
    assert!(!out.join("finetune").exists());

    assert_ok(&run(&exp, &["--until", "data"], &[]));
    let s = statuses(&out);
    assert_eq!((s["data"].as_str(), s["finetune"].as_str(), s["export"].as_str()), ("ran", "not run", "not run"));
    assert_eq!(report(&out)["finetune"]["reason"], "after `--until data`");

    assert_ok(&run(&exp, &["--stage", "finetune"], &[]));
    assert!(out.join("finetune/final/model.safetensors").is_file() && out.join(".stages/finetune.json").is_file());
    let o = run(&exp, &["--stage", "finetune"], &[]);
    assert_ok(&o);
    assert_ok(&run(&exp, &[], &[]));
    let s = statuses(&out);
    assert_eq!((s["data"].as_str(), s["finetune"].as_str(), s["export"].as_str()), ("up to date", "up to date", "ran"));
}
