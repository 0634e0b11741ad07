//! The first hour with `bertpipe run` (issue 55): an inline pipeline stage needs only its
//! `source:` and `steps:` (its name is the stage's, its sink Parquet at OUT/<stage>), a training
//! stage needs neither `output_dir` nor, when wired, `data`; and one mistake gives one error —
//! the stages that depend on the broken one are named once, in a note, not with errors of their
//! own that follow from it.

mod common;

use std::path::{Path, PathBuf};

use common::chain::{bertpipe, run};
use common::{assert_ok, root, stderr};

fn pipelines(f: &str) -> String {
    root().join("pipelines").join(f).display().to_string()
}

/// An inline pipeline stage of the sample's classification shards (short rows) with only
/// `source:` and `steps:`; `first_step` is the first step's type.
fn inline_data(stage: &str, first_step: &str) -> String {
    format!(
        "  {stage}:
    source: {{ type: aclimdb, path: {sample}, splits: [train, test], labels: [neg, pos] }}
    steps:
      - type: {first_step}
      - type: tokenize
        vocab: {vocab}
        lowercase: true
      - type: classify_sequences
        max_len: 64
        truncation: head
",
        sample = root().join("data/aclImdb-sample").display(),
        vocab = root().join("data/vocab/bert-base-uncased.txt").display(),
    )
}

fn write(dir: &Path, file: &str, stages: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, format!("name: first-hour\nout: out\nstages:\n{stages}")).unwrap();
    path
}

fn dry_run(exp: &Path) -> std::process::Output {
    bertpipe(&["run", exp.to_str().unwrap(), "--dry-run"], &[])
}

/// The lines of a failed load that are problems: not the notes, not the count.
fn problems(err: &str) -> Vec<&str> {
    err.lines().filter(|l| !l.starts_with("note: ") && !l.starts_with("error: ")).collect()
}

fn notes(err: &str) -> Vec<&str> {
    err.lines().filter(|l| l.starts_with("note: ")).collect()
}

#[test]
fn an_inline_pipeline_stage_needs_only_source_and_steps() {
    let dir = tempfile::tempdir().unwrap();
    // With a training after it that gives neither `data` nor `output_dir`, an export and an eval.
    let chain = write(
        dir.path(),
        "chain.yaml",
        &format!(
            "{}  finetune: {{ task: classify, model: {{ preset: tiny }} }}\n  export: {{ optimize: false }}\n  eval: {{ split: test }}\n",
            inline_data("data", "html_strip")
        ),
    );
    let o = dry_run(&chain);
    assert_ok(&o);
    let plan = String::from_utf8_lossy(&o.stdout).to_string();
    for stage in ["data", "finetune", "export", "eval"] {
        let line = plan.lines().find(|l| l.starts_with(&format!("{stage} "))).unwrap_or_else(|| panic!("{plan}"));
        assert!(line.contains("will run"), "{line}");
    }

    // Run for real: the shards and their manifest are in OUT/<stage>, under the stage's name. A
    // stage read from a pipeline file keeps the file's own name (its sink path is still OUT's).
    let exp = write(
        dir.path(),
        "pipeline.yaml",
        &format!("{}  from_file: {}\n", inline_data("reviews", "html_strip"), pipelines("imdb.yaml")),
    );
    assert_ok(&dry_run(&exp));
    assert_ok(&run(&exp, &[], &[]));
    let out = dir.path().join("out");
    let reviews = common::manifest(&out.join("reviews"));
    assert_eq!(reviews["name"], "reviews", "{reviews}");
    assert!(!common::shard_files(&out.join("reviews/train")).is_empty(), "no shards in OUT/reviews/train");
    assert_eq!(common::manifest(&out.join("from_file"))["name"], "imdb");
}

#[test]
fn a_misspelt_step_type_in_an_inline_stage_is_one_error() {
    let dir = tempfile::tempdir().unwrap();
    // The training's base file has its own `data: ../out/imdb`: with the pipeline stage broken,
    // that path is not a stand-in for its shards (no "is not a finished shard folder").
    let exp = write(
        dir.path(),
        "typo.yaml",
        &format!(
            "{}  finetune: {{ base: {} }}\n  export: {{ optimize: false }}\n  eval: {{ split: test }}\n",
            inline_data("data", "html_stripp"),
            pipelines("imdb-finetune.yaml")
        ),
    );
    let o = dry_run(&exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    let want =
        format!("{}:7:15: unknown step type `html_stripp` in steps[0], did you mean `html_strip`?", exp.display());
    assert_eq!(problems(&err).len(), 1, "{err}");
    assert!(problems(&err)[0].starts_with(&want), "{err}");
    assert_eq!(notes(&err), ["note: finetune, export and eval not checked: they depend on `data`"], "{err}");
    assert!(err.contains("error: 1 configuration problem\n"), "{err}");
    for follow_on in
        ["no train stage", "no export stage", "finished shard folder", "missing required key", "sink has no"]
    {
        assert!(!err.contains(follow_on), "{follow_on:?} in\n{err}");
    }
}

#[test]
fn a_misspelt_key_of_a_training_stage_is_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "key.yaml",
        &format!(
            "  data: {}\n  finetune: {{ base: {}, learning_rat: 1.0e-3 }}\n  export: {{ optimize: false }}\n  eval: {{ split: test }}\n",
            pipelines("imdb.yaml"),
            pipelines("imdb-finetune.yaml")
        ),
    );
    let o = dry_run(&exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(problems(&err).len(), 1, "{err}");
    assert!(
        problems(&err)[0].contains("unknown field `learning_rat` in train config, did you mean `learning_rate`?"),
        "{err}"
    );
    assert_eq!(notes(&err), ["note: export and eval not checked: they depend on `finetune`"], "{err}");
    assert!(err.contains("error: 1 configuration problem\n"), "{err}");
    assert!(!err.contains("no train stage") && !err.contains("no export stage"), "{err}");
}

/// A training stage whose file cannot be read is of no kind the chain can tell: the export and
/// the eval after it wait on it rather than report that there is no training before them.
#[test]
fn a_training_stage_that_cannot_be_read_is_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "missing.yaml",
        &format!(
            "  data: {}\n  finetune: {{ base: {} }}\n  export: {{ optimize: false }}\n  eval: {{ split: test }}\n",
            pipelines("imdb.yaml"),
            dir.path().join("nope.yaml").display()
        ),
    );
    let o = dry_run(&exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(problems(&err).len(), 1, "{err}");
    assert!(problems(&err)[0].contains("stage `finetune`: could not read"), "{err}");
    assert_eq!(notes(&err), ["note: export and eval not checked: they depend on `finetune`"], "{err}");
    assert!(!err.contains("no train stage"), "{err}");
}

/// What the chain wires into a training is reported where it was written, never against a
/// `--set` nobody typed; an inline training with nothing to train on says so.
#[test]
fn a_training_stage_s_wires_are_located_in_the_experiment() {
    let dir = tempfile::tempdir().unwrap();
    let finetune = format!("  finetune: {{ base: {}, data: ./nowhere }}\n", pipelines("imdb-finetune.yaml"));
    let exp = write(dir.path(), "nowhere.yaml", &finetune);
    let o = dry_run(&exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("--set"), "{err}");
    assert!(err.contains(&format!("{} (stage `finetune`, base '", exp.display())), "{err}");
    assert!(err.contains("):4:") && err.contains("nowhere' is not a finished shard folder"), "{err}");
    assert_eq!(problems(&err).len(), 1, "{err}");

    let exp = write(dir.path(), "nodata.yaml", "  finetune: { task: classify, model: { preset: tiny } }\n");
    let o = dry_run(&exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "{}:4:3: finetune: no pipeline stage of classify shards before it to train on; give `data:`",
            exp.display()
        )),
        "{err}"
    );
    assert_eq!(problems(&err).len(), 1, "{err}");
}

/// A wire naming a *later* stage of the wrong kind (`data: export`) is the one mistake, at that
/// wire — not "export: no train stage before it", which it once made the export report.
#[test]
fn a_wire_to_a_later_stage_of_the_wrong_kind_is_one_error_at_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "wirekind.yaml",
        &format!(
            "  data: {}\n  finetune: {{ base: {}, data: export }}\n  export: {{ optimize: false }}\n  eval: {{ split: test }}\n",
            pipelines("imdb.yaml"),
            pipelines("imdb-finetune.yaml")
        ),
    );
    let o = dry_run(&exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(problems(&err).len(), 1, "{err}");
    assert!(
        problems(&err)[0].contains("wirekind.yaml:5:")
            && problems(&err)[0]
                .contains("finetune.data: `export` is an export stage; data must name a pipeline stage"),
        "{err}"
    );
    assert!(!err.contains("no train stage"), "{err}");
}
