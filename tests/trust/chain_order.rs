//! Defect 9: the chain's order follows every wire a stage reads — an eval's `baseline:`, a
//! tokenize step's `vocab: STAGE` inside a stage's own pipeline file — so a stage listed before
//! what it reads runs after it, instead of failing mid-run after earlier stages (training
//! included) have run.

use crate::common::chain::{dry_run, pipelines, report, run, statuses, write_experiment};
use crate::common::{assert_ok, root, stderr};

fn plan_order(o: &std::process::Output, names: &[&str]) -> Vec<String> {
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    text.lines().filter_map(|l| l.split_whitespace().next()).filter(|w| names.contains(w)).map(str::to_string).collect()
}

#[test]
fn a_gate_listed_before_its_baseline_runs_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write_experiment(
        dir.path(),
        "chain.yaml",
        "order",
        &format!(
            "  data:
    base: {imdb}
    steps[7].max_len: 64
    steps[7].truncation: head
  finetune: {{ base: {finetune}, max_steps: 2, save_steps: 2, eval_split: none }}
  gate: {{ kind: eval, model: export, baseline: base, max_drop: 100 }}
  export: {{ optimize: false }}
  base: {{ kind: export, from: finetune, optimize: false }}
",
            imdb = pipelines("imdb.yaml"),
            finetune = pipelines("imdb-finetune.yaml")
        ),
    );
    let names = ["data", "finetune", "gate", "export", "base"];
    let o = dry_run(&exp);
    assert_ok(&o);
    let order = plan_order(&o, &names);
    assert_eq!(order, ["data", "finetune", "export", "base", "gate"], "{}", String::from_utf8_lossy(&o.stdout));
    let o = run(&exp, &[], &[]);
    assert_ok(&o);
    let out = dir.path().join("out");
    assert!(statuses(&out).values().all(|s| s == "ran"), "{:?}\n{}", statuses(&out), stderr(&o));
    assert!(report(&out)["gate"]["figures"]["agreement"].as_f64().is_some());
}

#[test]
fn a_vocab_stage_named_inside_a_pipeline_file_runs_before_that_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let imdb = root().join("pipelines/imdb.yaml");
    // The pipeline's own file names the vocab stage; the experiment lists it after the pipeline.
    let text = std::fs::read_to_string(&imdb)
        .unwrap()
        .replace("vocab: ../data/vocab/bert-base-uncased.txt", "vocab: words")
        .replace("../data/aclImdb-sample", &root().join("data/aclImdb-sample").display().to_string());
    let file = dir.path().join("data.yaml");
    std::fs::write(&file, text).unwrap();
    let exp = write_experiment(
        dir.path(),
        "chain.yaml",
        "order",
        &format!(
            "  data: {}\n  words: {{ kind: vocab, pipeline: {}, size: 500, min_frequency: 2 }}\n",
            file.display(),
            imdb.display()
        ),
    );
    let o = dry_run(&exp);
    assert_ok(&o);
    assert_eq!(plan_order(&o, &["data", "words"]), ["words", "data"], "{}", String::from_utf8_lossy(&o.stdout));
}
