//! What a chain depends on outside its files (issue 66, items 1, 11, 12, 13, 15, 16): the ONNX
//! Runtime a late stage needs is found — or fetched, once, saying so — before any stage runs;
//! its version and bertpipe's build are in the keys; `out` must be a chain's folder; keys the
//! chain sets itself are refused where an experiment gives them; `--set STAGE=VALUE` and
//! `report.md` say what they mean.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::chain::{bertpipe, pipelines, report, run, write_experiment};
use crate::common::{assert_ok, ort_lib, stderr};

/// data → finetune (2 steps) → export (verified) → eval, in `dir`.
fn chain(dir: &Path) -> PathBuf {
    let stages = format!(
        "  data: {}
  finetune:
    base: {}
    max_steps: 2
    save_steps: 2
    eval_strategy: 'no'
  export: {{ optimize: false }}
  eval: {{ split: test }}
",
        pipelines("imdb.yaml"),
        pipelines("imdb-finetune.yaml")
    );
    write_experiment(dir, "chain.yaml", "env-chain", &stages)
}

/// The environment of a machine with no ONNX Runtime anywhere bertpipe looks: no
/// `ORT_DYLIB_PATH`, no Python environment, an empty cache and no system folders; `python`
/// stands in for `python3` (for `-c …` and `-m pip …`).
fn bare(cache: &Path, python: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("ORT_DYLIB_PATH", String::new()),
        ("VIRTUAL_ENV", String::new()),
        ("CONDA_PREFIX", String::new()),
        ("BERTPIPE_PYTHON", python.display().to_string()),
        ("BERTPIPE_ORT_SYSTEM_DIRS", "/nonexistent".into()),
        ("BERTPIPE_CACHE_DIR", cache.display().to_string()),
    ]
}

fn run_env(exp: &Path, extra: &[&str], env: &[(&'static str, String)]) -> Output {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run(exp, extra, &env)
}

/// Rewrites `OUT/.stages/STAGE.json` as if its run had had `edit` done to its key's parts (the
/// key recomputed from them): a record made by another bertpipe build or runtime.
fn edit_record(out: &Path, stage: &str, edit: impl FnOnce(&mut bertpipe::experiment::KeyParts)) {
    let path = out.join(format!(".stages/{stage}.json"));
    let mut rec: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut parts: bertpipe::experiment::KeyParts = serde_json::from_value(rec["parts"].clone()).unwrap();
    edit(&mut parts);
    rec["key"] = Value::String(parts.key());
    rec["parts"] = serde_json::to_value(&parts).unwrap();
    std::fs::write(&path, serde_json::to_vec_pretty(&rec).unwrap()).unwrap();
}

fn status_and_reason(out: &Path) -> Vec<(String, String, String)> {
    report(out)
        .into_iter()
        .map(|(k, v)| (k, v["status"].as_str().unwrap().to_string(), v["reason"].as_str().unwrap().to_string()))
        .collect()
}

/// A chain with export and eval stages on a machine without ONNX Runtime: with `--no-install`
/// it stops before the first stage (it used to pretrain and fine-tune for minutes, then fail
/// at `export`); without, it fetches the pinned wheel once, in one line, and runs. Its
/// version is in the export's and eval's keys (a record made under 1.20.1 runs them again, and
/// nothing else), and bertpipe's build is in every key (a record of a bertpipe that only said
/// `0.1.0` is not up to date).
#[test]
fn a_chain_finds_onnx_runtime_before_any_stage_and_keys_by_its_version_and_the_build() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let exp = chain(d);
    let out = d.join("out");
    let cache = d.join("cache");
    // A `python3` that has no site-packages and whose `pip install --target DIR` puts the
    // pinned library where the wheel would.
    let python = d.join("python3");
    std::fs::write(
        &python,
        format!(
            "#!/bin/sh\n[ \"$1\" = -m ] || exit 1\necho \"$@\" >> '{log}'\nwhile [ \"$1\" != --target ]; do shift; done\nmkdir -p \"$2/onnxruntime/capi\" && cp '{lib}' \"$2/onnxruntime/capi/libonnxruntime.so.1.31.1\"\n",
            log = d.join("pip.log").display(),
            lib = ort_lib().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let env = bare(&cache, &python);

    let o = run_env(&exp, &["--no-install"], &env);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("stage `export` cannot run on this machine, so no stage was run"), "{err}");
    assert!(err.contains("ONNX Runtime was not found"), "{err}");
    assert!(!out.join("data").exists() && !out.join("finetune").exists(), "a stage ran before the refusal");
    assert!(!d.join("pip.log").exists(), "--no-install ran pip");

    let o = run_env(&exp, &[], &env);
    assert_ok(&o);
    let err = stderr(&o);
    assert_eq!(err.matches("ONNX Runtime was not found: installing onnxruntime==1.31.1").count(), 1, "{err}");
    let pip = std::fs::read_to_string(d.join("pip.log")).unwrap();
    assert_eq!(pip.lines().count(), 1, "{pip}");
    assert!(pip.contains("install") && pip.contains("onnxruntime==1.31.1"), "{pip}");
    assert!(status_and_reason(&out).iter().all(|(_, s, _)| s == "ran"), "{:?}", status_and_reason(&out));
    // Found in the cache now: nothing installed again, every stage up to date.
    let o = run_env(&exp, &[], &env);
    assert_ok(&o);
    assert!(!stderr(&o).contains("installing"), "{}", stderr(&o));
    assert!(status_and_reason(&out).iter().all(|(_, s, _)| s == "up to date"), "{:?}", status_and_reason(&out));

    for stage in ["export", "eval"] {
        edit_record(&out, stage, |p| {
            assert_eq!(p.environment.get("onnxruntime").map(String::as_str), Some("1.31.1"), "{stage}: {p:?}");
            p.environment.insert("onnxruntime".into(), "1.20.1".into());
        });
    }
    assert_ok(&run(&exp, &[], &[]));
    for (stage, status, reason) in status_and_reason(&out) {
        match stage.as_str() {
            "export" | "eval" => {
                assert_eq!(status, "ran", "{stage}: {reason}");
                assert_eq!(reason, "the ONNX Runtime version changed (1.20.1 → 1.31.1)", "{stage}");
            }
            _ => assert_eq!(status, "up to date", "{stage}: {reason}"),
        }
    }
    let metrics: Value = serde_json::from_slice(&std::fs::read(out.join("eval/metrics.json")).unwrap()).unwrap();
    assert!(metrics.to_string().contains("1.31.1"), "metrics.json names the runtime that scored it");

    // A record of an older bertpipe, which keyed by the package version alone.
    edit_record(&out, "finetune", |p| {
        assert!(p.version.starts_with("0.1.0 (build ") && p.version.len() > 20, "{}", p.version);
        p.version = "0.1.0".into();
    });
    let version = bertpipe(&["--version"], &[]);
    let build = bertpipe::contract::BUILD;
    assert!(String::from_utf8_lossy(&version.stdout).contains(build), "--version says the build");
    assert_ok(&run(&exp, &[], &[]));
    let now = status_and_reason(&out);
    let finetune = now.iter().find(|(s, ..)| s == "finetune").unwrap();
    assert_eq!((finetune.1.as_str(), finetune.2.clone()), ("ran", format!("bertpipe changed (0.1.0 → {build})")));
}

/// `out` empty (an unset variable in `--set out=$OUT`, or `out: ""`) is refused, and so is an
/// `out` that holds files no chain wrote (`out: .` in a folder with a user's report.md, or a
/// model.onnx where the export stage would write): before, the current folder became the
/// output and its report.md was overwritten. Nothing is written in either case.
#[test]
fn out_must_be_named_and_be_a_chains_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let exp = chain(d);
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--set", "out=", "--quiet"], &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(78), "{err}");
    assert!(err.contains("--set out=: out is empty"), "{err}");
    let text = std::fs::read_to_string(&exp).unwrap().replace("out: out", "out: \"\"");
    std::fs::write(&exp, &text).unwrap();
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--quiet"], &[]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("chain.yaml:2:") && stderr(&o).contains("out is empty"), "{}", stderr(&o));

    // A folder of the user's: refused, nothing in it touched or added.
    let theirs = d.join("theirs");
    std::fs::create_dir_all(theirs.join("export")).unwrap();
    std::fs::write(theirs.join("report.md"), "my notes\n").unwrap();
    std::fs::write(theirs.join("export/model.onnx"), "my model").unwrap();
    std::fs::write(&exp, text.replace("out: \"\"", "out: theirs")).unwrap();
    for extra in [&["--dry-run"][..], &[]] {
        let mut args = vec!["run", exp.to_str().unwrap(), "--quiet"];
        args.extend_from_slice(extra);
        let o = bertpipe(&args, &[]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{err}");
        assert!(err.contains("holds files no bertpipe chain wrote ('export', 'report.md'"), "{err}");
        let mut names: Vec<String> = std::fs::read_dir(&theirs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["export", "report.md"], "{extra:?}");
        assert_eq!(std::fs::read_to_string(theirs.join("report.md")).unwrap(), "my notes\n");
    }
}

/// A pipeline stage's `sink.path` and a training's `output_dir`, given in the experiment (inline
/// or by `--set`), are refused where they were written: the chain sets both to `OUT/<stage>`,
/// and ignored them silently. `--set finetune=3` says that `finetune` is a stage (it said
/// "`finetune` is not a stage, did you mean `finetune`?"). `report.md` escapes the
/// experiment's name.
#[test]
fn keys_the_chain_sets_are_refused_where_given_and_set_messages_say_what_they_mean() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let stages = format!(
        "  data:\n    base: {}\n    sink: {{ type: parquet, path: elsewhere }}\n  finetune:\n    base: {}\n    output_dir: mine\n",
        pipelines("imdb.yaml"),
        pipelines("imdb-finetune.yaml")
    );
    let exp = write_experiment(d, "inline.yaml", "inline", &stages);
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--dry-run", "--set", "data.sink.path=x"], &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(78), "{err}");
    assert!(
        err.contains("inline.yaml:6:") && err.contains("data.sink.path: a chain stage writes under OUT/data/"),
        "{err}"
    );
    assert!(
        err.contains("inline.yaml:9:") && err.contains("finetune.output_dir: a chain stage writes under OUT/finetune/"),
        "{err}"
    );
    assert!(err.contains("--set data.sink.path=x"), "{err}");

    let exp = chain(d);
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--dry-run", "--set", "finetune=3"], &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(78), "{err}");
    assert!(err.contains("`finetune` is a stage: --set sets one of its keys, `--set finetune.KEY=VALUE`"), "{err}");
    assert!(!err.contains("did you mean"), "{err}");

    // The name as Markdown would read it: a heading, a table row, a link and HTML.
    let name = "a | b\\n# <b>c</b> [x](y)";
    let o =
        bertpipe(&["run", exp.to_str().unwrap(), "--quiet", "--until", "data", "--set", &format!("name={name}")], &[]);
    assert_ok(&o);
    let md = std::fs::read_to_string(d.join("out/report.md")).unwrap();
    let first = md.lines().next().unwrap();
    assert_eq!(first, "# a \\| b\\\\n\\# \\<b\\>c\\</b\\> \\[x\\](y)");
}
