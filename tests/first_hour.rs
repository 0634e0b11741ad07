//! The first hour with `bertpipe run` (issue 55): an inline pipeline stage needs only its
//! `source:` and `steps:` (its name is the stage's, its sink Parquet at OUT/<stage>), a training
//! stage needs neither `output_dir` nor, when wired, `data`; and one mistake gives one error —
//! the stages that depend on the broken one are named once, in a note, not with errors of their
//! own that follow from it; a misspelt key is not also a missing one, a misnamed stage is still
//! read, and a problem in a `base:` file is located in that file.

mod common;

use std::path::{Path, PathBuf};

use common::chain::{dry_run, pipelines, run, write_experiment};
use common::{assert_ok, root, stderr};

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

/// The experiment `first-hour` with `stages`, as `dir/file`.
fn write(dir: &Path, file: &str, stages: &str) -> PathBuf {
    write_experiment(dir, file, "first-hour", stages)
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
    let err = one_problem(&exp);
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
    let err = one_problem(&exp);
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
    assert_eq!(problems(&err).len(), 1, "{err}");
    // At the experiment's line 4, where it was written: not in the base file's name or lines.
    assert!(problems(&err)[0].starts_with(&format!("{}:4:", exp.display())), "{err}");
    assert!(problems(&err)[0].contains("nowhere' is not a finished shard folder"), "{err}");

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
    let err = one_problem(&exp);
    assert!(
        problems(&err)[0].contains("wirekind.yaml:5:")
            && problems(&err)[0]
                .contains("finetune.data: `export` is an export stage; data must name a pipeline stage"),
        "{err}"
    );
    assert!(!err.contains("no train stage"), "{err}");
}

/// A misspelt top-level key is one error: the key it was meant to be is not also "missing", a
/// `stages` that is not a mapping is not also "empty" — and without a usable `out` the stages
/// are still read, so a mistake in one is reported in the same run.
#[test]
fn a_misspelt_top_level_key_is_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = format!("  data: {}\n", pipelines("imdb.yaml"));
    let cases = [
        (
            "outt.yaml",
            format!("name: x\noutt: out\nstages:\n{data}"),
            ":2:1: unknown top-level key `outt`, did you mean `out`?",
        ),
        (
            "namee.yaml",
            format!("namee: x\nout: out\nstages:\n{data}"),
            ":1:1: unknown top-level key `namee`, did you mean `name`?",
        ),
        (
            "stagess.yaml",
            format!("name: x\nout: out\nstagess:\n{data}"),
            ":3:1: unknown top-level key `stagess`, did you mean `stages`?",
        ),
        (
            "list.yaml",
            "name: x\nout: out\nstages: [data]\n".to_string(),
            ":3:9: `stages` must be a mapping of stage names",
        ),
    ];
    for (file, text, want) in cases {
        let exp = dir.path().join(file);
        std::fs::write(&exp, text).unwrap();
        let o = dry_run(&exp);
        assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(problems(&err).len(), 1, "{err}");
        assert!(problems(&err)[0].starts_with(&format!("{}{want}", exp.display())), "{err}");
        assert!(!err.contains("missing `") && !err.contains("is empty"), "{err}");
    }

    // With `outt:` for `out:`, a training's misspelt key is found in the same run: two mistakes,
    // two errors.
    let exp = dir.path().join("both.yaml");
    let finetune = format!("  finetune: {{ base: {}, learning_rat: 1 }}\n", pipelines("imdb-finetune.yaml"));
    std::fs::write(&exp, format!("name: x\noutt: out\nstages:\n{data}{finetune}")).unwrap();
    let err = stderr(&dry_run(&exp));
    assert_eq!(problems(&err).len(), 2, "{err}");
    assert!(problems(&err)[0].starts_with(&format!("{}:2:1: unknown top-level key `outt`", exp.display())), "{err}");
    assert!(problems(&err)[1].starts_with(&format!("{}:5:", exp.display())), "{err}");
    assert!(problems(&err)[1].contains("unknown field `learning_rat` in train config, did you mean `learning_rate`?"));
    assert!(err.contains("error: 2 configuration problems\n"), "{err}");
}

/// A stage name that cannot be a folder is one error, with a name that can: the stage is still
/// read, so the stages after it find it (no "no train stage before it"), a wire that already
/// uses the suggested name reads it, and a mistake of its own is reported with it.
#[test]
fn a_stage_name_that_cannot_be_a_folder_is_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let (imdb, finetune) = (pipelines("imdb.yaml"), pipelines("imdb-finetune.yaml"));
    let stages = format!(
        "  data: {imdb}\n  fine tune: {{ base: {finetune} }}\n  export: {{ optimize: false, from: fine_tune }}\n  eval: {{ split: test }}\n"
    );
    let exp = write(dir.path(), "name.yaml", &stages);
    let o = dry_run(&exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    let want = format!(
        "{}:5:3: stage name `fine tune`: use letters, digits, `_` and `-` only, did you mean `fine_tune`? (a stage writes the folder OUT/<name>/, so a name cannot be a path)",
        exp.display()
    );
    assert_eq!(problems(&err), [want.as_str()], "{err}");
    assert!(notes(&err).is_empty(), "{err}");
    assert!(err.contains("error: 1 configuration problem\n"), "{err}");

    // Its own misspelt key too: two mistakes, two errors; what reads it waits on it.
    let stages = format!(
        "  data: {imdb}\n  fine.tune: {{ base: {finetune}, learning_rat: 1 }}\n  export: {{ optimize: false }}\n  eval: {{ split: test }}\n"
    );
    let exp = write(dir.path(), "both.yaml", &stages);
    let err = stderr(&dry_run(&exp));
    let found = problems(&err);
    assert_eq!(found.len(), 2, "{err}");
    assert!(found.iter().all(|p| p.starts_with(&format!("{}:5:", exp.display()))), "{err}");
    assert!(found[0].contains("stage name `fine.tune`") && found[0].contains("did you mean `fine_tune`?"), "{err}");
    assert!(found[1].contains("unknown field `learning_rat` in train config, did you mean `learning_rate`?"), "{err}");
    assert_eq!(notes(&err), ["note: export and eval not checked: they depend on `fine.tune`"], "{err}");
    assert!(!err.contains("no train stage") && !err.contains("no export stage"), "{err}");
}

/// An unknown kind, a wire to no stage, a misspelt wire and a stage named near a kind: each one
/// error, at its place, with the name meant where there is one; what depends on it is a note.
#[test]
fn kinds_and_wires_that_name_nothing_are_one_error_each() {
    let dir = tempfile::tempdir().unwrap();
    let (imdb, finetune) = (pipelines("imdb.yaml"), pipelines("imdb-finetune.yaml"));
    let data = format!("  data: {imdb}\n");
    let pipeline_as_train =
        format!(":5:3: finetune: '{imdb}' is a pipeline file (`source:`, `steps:`), not a training file");
    let cases = [
        (
            "kind.yaml",
            format!("{data}  ft: {{ kind: trian, base: {finetune} }}\n  export: {{ optimize: false }}\n"),
            ":5:9: ft.kind: unknown kind `trian`, did you mean `train`? (valid: pipeline, vocab, train, export, eval)",
            "note: export not checked: it depends on `ft`",
        ),
        (
            "nowire.yaml",
            format!("{data}  finetune: {{ base: {finetune}, data: nosuchstage }}\n  export: {{ optimize: false }}\n"),
            ":5:",
            "note: export not checked: it depends on `finetune`",
        ),
        (
            "typo.yaml",
            format!("{data}  finetune: {{ base: {finetune} }}\n  export: {{ optimize: false, from: fintune }}\n"),
            ":6:30: export.from: no stage `fintune` and no such path, did you mean `finetune`?",
            "",
        ),
        (
            "pipeline-as-train.yaml",
            format!("{data}  finetune: {{ kind: train, base: {imdb} }}\n  export: {{ optimize: false }}\n"),
            pipeline_as_train.as_str(),
            "note: export not checked: it depends on `finetune`",
        ),
        (
            "taks.yaml",
            format!("{data}  finetune: {{ kind: train, taks: classify, model: {{ preset: tiny }} }}\n"),
            ":5:3: finetune: missing `task` (classify or pretrain) (`taks` is not a key: did you mean `task`?)",
            "",
        ),
        (
            "exprot.yaml",
            format!(
                "{data}  finetune: {{ base: {finetune} }}\n  exprot: {{ optimize: false }}\n  eval: {{ split: test }}\n"
            ),
            ":6:3: stage `exprot`: cannot tell what it is; did you mean `export`?",
            "note: eval not checked: it depends on `exprot`",
        ),
    ];
    for (file, stages, want, note) in cases {
        let exp = write(dir.path(), file, &stages);
        let o = dry_run(&exp);
        assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(problems(&err).len(), 1, "{err}");
        assert!(problems(&err)[0].starts_with(&format!("{}{want}", exp.display())), "{want:?} in\n{err}");
        let notes_want: Vec<&str> = [note].into_iter().filter(|n| !n.is_empty()).collect();
        assert_eq!(notes(&err), notes_want, "{err}");
    }
    let err = stderr(&dry_run(&dir.path().join("nowire.yaml")));
    assert!(err.contains("finetune.data: no stage `nosuchstage` and no such path (stages: data, finetune, export)"));
}

/// A problem in a `base:` file is reported at its line of that file, saying which stage of
/// which experiment read it; a key the experiment sets over it, at the experiment's line.
#[test]
fn a_mistake_in_a_base_file_is_located_in_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("pipelines/imdb-finetune.yaml")).unwrap();
    let line = text.lines().position(|l| l.starts_with("learning_rate:")).unwrap() + 1;
    let base = dir.path().join("ft.yaml");
    std::fs::write(&base, text.replace("\nlearning_rate:", "\nlearning_rat:")).unwrap();
    let data = format!("  data: {}\n", pipelines("imdb.yaml"));
    // `ft.yaml` is at column 21 of line 5: `  finetune: { base: ft.yaml`.
    let stages = format!("{data}  finetune: {{ base: ft.yaml, warmup_rati: 0.1 }}\n  export: {{}}\n");
    let exp = write(dir.path(), "base.yaml", &stages);
    let o = dry_run(&exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(problems(&err).len(), 2, "{err}");
    let in_base = format!(
        "{}:{line}:1: base of stage `finetune` ({}:5:21): unknown field `learning_rat` in train config, did you mean `learning_rate`?",
        base.display(),
        exp.display()
    );
    assert!(problems(&err).contains(&in_base.as_str()), "{in_base:?} in\n{err}");
    let in_exp = format!("{}:5:", exp.display());
    let warmup = "unknown field `warmup_rati` in train config";
    assert!(problems(&err).iter().any(|p| p.starts_with(&in_exp) && p.contains(warmup)), "{err}");
    assert_eq!(notes(&err), ["note: export not checked: it depends on `finetune`"], "{err}");

    // A YAML syntax error in the base: at its line of the base file, once.
    std::fs::write(&base, text.replace("\ntask: classify", "\ntask: [classify")).unwrap();
    let exp = write(dir.path(), "syntax.yaml", &format!("{data}  finetune: {{ base: ft.yaml }}\n  export: {{}}\n"));
    let err = stderr(&dry_run(&exp));
    let found = problems(&err);
    assert_eq!(found.len(), 1, "{err}");
    let (at, message) = found[0].split_once(": base of stage").unwrap_or_else(|| panic!("{err}"));
    let line_col = at.strip_prefix(&format!("{}:", base.display())).unwrap_or_else(|| panic!("{err}"));
    assert!(line_col.split(':').all(|n| n.parse::<usize>().is_ok()), "{err}");
    assert!(message.starts_with(&format!(" `finetune` ({}:5:21): ", exp.display())), "{err}");
}

/// A dry run of `exp` that fails as a configuration problem (exit 78) with exactly one
/// problem; its stderr.
#[track_caller]
fn one_problem(exp: &std::path::Path) -> String {
    let o = dry_run(exp);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(problems(&err).len(), 1, "{err}");
    err
}
