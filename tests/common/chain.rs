//! Writing experiments, running `bertpipe run` from tests and reading its report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// `bertpipe ARGS…` from the checkout, with the pinned ONNX Runtime and `env` set.
pub fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bertpipe"));
    c.args(args).current_dir(super::root()).env("ORT_DYLIB_PATH", super::ort_lib());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

pub fn bertpipe(args: &[&str], env: &[(&str, &str)]) -> Output {
    command(args, env).output().expect("run bertpipe")
}

/// `pipelines/FILE` of the checkout by absolute path, as a YAML value: the sample pipelines
/// for an experiment written in a temporary folder.
pub fn pipelines(file: &str) -> String {
    super::root().join("pipelines").join(file).display().to_string()
}

/// Writes `dir/FILE`: the experiment `name: NAME`, `out: out` (beside it) with `stages` (the
/// stages' lines, indented two spaces); returns its path.
pub fn write_experiment(dir: &Path, file: &str, name: &str, stages: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, format!("name: {name}\nout: out\nstages:\n{stages}")).unwrap();
    path
}

/// `bertpipe run EXP --dry-run`: the plan, or the configuration errors.
pub fn dry_run(exp: &Path) -> Output {
    bertpipe(&["run", exp.to_str().unwrap(), "--dry-run"], &[])
}

/// `bertpipe run EXP --quiet EXTRA…`.
pub fn run(exp: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec!["run", exp.to_str().unwrap(), "--quiet"];
    args.extend_from_slice(extra);
    bertpipe(&args, env)
}

/// `OUT/report.json`'s stages, by name.
pub fn report(out: &Path) -> BTreeMap<String, Value> {
    let r: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    r["stages"].as_array().unwrap().iter().map(|s| (s["stage"].as_str().unwrap().to_string(), s.clone())).collect()
}

/// Each stage's status in the last run.
pub fn statuses(out: &Path) -> BTreeMap<String, String> {
    report(out).into_iter().map(|(k, v)| (k, v["status"].as_str().unwrap().to_string())).collect()
}

/// `bertpipe eval --json` of a chain's `export` model on its `data` shards, as a user would run
/// it by hand beside the chain's eval stage: the report.
pub fn eval_by_hand(out: &Path, extra: &[&str]) -> Value {
    let (model, data) = (out.join("export/model.onnx"), out.join("data"));
    let mut args =
        vec!["eval", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--json", "--quiet"];
    args.extend_from_slice(extra);
    let o = bertpipe(&args, &[]);
    super::assert_ok(&o);
    serde_json::from_slice(&o.stdout).expect("eval --json prints JSON")
}
