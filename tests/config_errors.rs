//! Configuration errors through the binary: located, gathered, exit code 78.

mod common;

use common::*;

fn validate(yaml: &str) -> (Option<i32>, String) {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(tmp.path(), "bad.yaml", yaml);
    let o = bertpipe(&["pipeline", "validate", p.to_str().unwrap()]);
    (o.status.code(), stderr(&o))
}

const BASE: &str = "name: x
source:
  type: aclimdb
  path: data/aclImdb-sample
steps:
  - type: noise_score
  - type: filter
    max_noise: 15
sink:
  type: parquet
  path: out/x
";

fn with_sample_path(yaml: &str) -> String {
    yaml.replace("data/aclImdb-sample", &root().join("data/aclImdb-sample").display().to_string())
}

#[test]
fn the_sample_pipeline_validates() {
    let o = bertpipe(&["pipeline", "validate", "pipelines/imdb-clean.yaml"]);
    assert_ok(&o);
}

#[test]
fn unknown_key_gets_a_suggestion_and_a_location() {
    let (code, err) = validate(&with_sample_path(&BASE.replace("max_noise: 15", "max_nosie: 15")));
    assert_eq!(code, Some(78));
    assert!(
        err.contains("bad.yaml:8:5: unknown field `max_nosie` in steps[1] (filter), did you mean `max_noise`?"),
        "{err}"
    );
}

#[test]
fn wrong_type_is_located() {
    let (code, err) = validate(&with_sample_path(&BASE.replace("max_noise: 15", "max_noise: loud")));
    assert_eq!(code, Some(78));
    assert!(
        err.contains("bad.yaml:8:16: steps[1] (filter).max_noise: invalid type: string \"loud\", expected f32"),
        "{err}"
    );
}

#[test]
fn missing_source_is_located() {
    let (code, err) = validate(&BASE.replace("data/aclImdb-sample", "no/such/corpus"));
    assert_eq!(code, Some(78));
    assert!(err.contains("bad.yaml:4:9: source.path: '") && err.contains("no/such/corpus' does not exist"), "{err}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let yaml = BASE
        .replace("data/aclImdb-sample", "nowhere")
        .replace("max_noise: 15", "max_nosie: 15")
        .replace("type: noise_score", "type: noise_scor");
    let (code, err) = validate(&yaml);
    assert_eq!(code, Some(78));
    assert!(err.contains("error: 3 configuration problems"), "{err}");
    assert!(err.contains("did you mean `noise_score`?"), "{err}");
}

#[test]
fn run_with_a_bad_override_exits_78() {
    let o = bertpipe(&["pipeline", "run", "pipelines/imdb-clean.yaml", "--set", "steps[4].max_noise=loud"]);
    assert_eq!(o.status.code(), Some(78));
    // Located at the `--set` that gave the value, not at a line of the file it never was on.
    assert!(stderr(&o).contains("--set steps[4].max_noise=loud: steps[4] (filter).max_noise"), "{}", stderr(&o));
}

/// A bad `--set` value of a training file or an experiment's stage is reported against the
/// argument as it was typed (`--set finetune.max_steps=abc`), not at line 1 of a file.
#[test]
fn bad_override_values_name_the_argument_as_typed() {
    let o = bertpipe(&["train", "pipelines/imdb-finetune.yaml", "--dry-run", "--set", "learning_rate=fast"]);
    assert_eq!(o.status.code(), Some(78));
    assert!(
        stderr(&o).contains("--set learning_rate=fast: train config.learning_rate: invalid type"),
        "{}",
        stderr(&o)
    );
    let o = bertpipe(&["run", "pipelines/imdb-experiment.yaml", "--dry-run", "--set", "finetune.max_steps=abc"]);
    assert_eq!(o.status.code(), Some(78));
    let err = stderr(&o);
    assert!(err.contains("--set finetune.max_steps=abc: train config.max_steps: invalid type"), "{err}");
    assert!(!err.contains(":1:1:"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    let o = bertpipe(&["pipeline", "run"]);
    assert_eq!(o.status.code(), Some(2));
}
