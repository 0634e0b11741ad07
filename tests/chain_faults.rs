//! `bertpipe run` never calls a stage "up to date" unless its outputs are the result of today's
//! inputs, whatever happened in between: a failed stage, a change at equal size behind a
//! restored mtime, a training's own `data:` path, a name that points outside `out:`, two runs at
//! once, Ctrl-C between stages, a leftover task array, a damaged checkpoint, a bucket `out:`,
//! and `kill -9` anywhere. Each test reproduces one way the chain used to lie.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::chain::{bertpipe, command, eval_by_hand, pipelines, report, run, statuses, write_experiment};
use common::{assert_ok, manifest, root, stderr};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The classification shards of the sample, short rows (fast to train on).
fn data_stage() -> String {
    format!("  data:\n    base: {}\n    steps[7].max_len: 64\n    steps[7].truncation: head\n", pipelines("imdb.yaml"))
}

/// A tiny fine-tune: 4 steps, a checkpoint every 2.
fn finetune_stage(name: &str, extra: &str) -> String {
    format!(
        "  {name}:\n    base: {}\n    max_steps: 4\n    save_steps: 2\n    logging_steps: 1\n{extra}",
        pipelines("imdb-finetune.yaml")
    )
}

/// data → finetune → export → eval, writing under `dir/out`.
fn small_chain(dir: &Path) -> PathBuf {
    write_chain(
        dir,
        &format!(
            "{}{}  export: {{ optimize: false }}\n  eval: {{ split: test }}\n",
            data_stage(),
            finetune_stage("finetune", "")
        ),
    )
}

/// The experiment `faults` with `stages`, as `dir/chain.yaml`.
fn write_chain(dir: &Path, stages: &str) -> PathBuf {
    write_experiment(dir, "chain.yaml", "faults", stages)
}

#[track_caller]
fn expect(out: &Path, want: &[(&str, &str)]) {
    let got = statuses(out);
    for (stage, status) in want {
        assert_eq!(got.get(*stage).map(String::as_str), Some(*status), "{stage}: {got:?}\n{:?}", report(out)[*stage]);
    }
}

fn sha(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))))
}

/// Every file under `dir` with its SHA-256, by relative path.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    common::tree_bytes(dir).into_iter().map(|(k, v)| (k, hex::encode(Sha256::digest(&v)))).collect()
}

/// Asserts every stage that says `up to date` or `ran` has exactly the outputs its record holds.
#[track_caller]
fn assert_records_hold(out: &Path) {
    for (stage, r) in report(out) {
        if !matches!(r["status"].as_str(), Some("up to date" | "ran")) {
            continue;
        }
        let rec: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(format!(".stages/{stage}.json"))).unwrap()).unwrap();
        for (rel, want) in rec["outputs"].as_object().unwrap() {
            assert_eq!(&Value::String(sha(&out.join(&stage).join(rel))), want, "{stage}/{rel}");
        }
    }
}

#[test]
fn a_stage_that_failed_is_never_up_to_date_with_the_output_it_left() {
    let dir = tempfile::tempdir().unwrap();
    let exp = small_chain(dir.path());
    let out = dir.path().join("out");
    assert_ok(&run(&exp, &[], &[]));
    let fp32 = sha(&out.join("export/model.onnx"));
    // An export the stage starts and cannot finish (a max_len with no room for a token): its
    // record is voided as it starts. (A runtime that cannot load now stops the chain before
    // any stage runs: tests/trust/chain_env.rs.)
    let o = run(&exp, &["--set", "export.precision=int8", "--set", "export.max_len=2"], &[]);
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("max_len 2 leaves no room"), "{}", stderr(&o));
    expect(&out, &[("export", "failed"), ("eval", "not run")]);
    // The first command again: export runs (its record was voided), and ends with the fp32 model.
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("data", "up to date"), ("finetune", "up to date"), ("export", "ran")]);
    assert_eq!(sha(&out.join("export/model.onnx")), fp32);
    let why = &report(&out)["export"]["reason"];
    assert!(why.as_str().unwrap().contains("did not finish"), "{why}");

    // An output changed after it was written is named, and its stage runs again.
    std::fs::write(out.join("export/model.onnx"), b"not a model").unwrap();
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--dry-run"], &[]);
    assert_ok(&o);
    let plan = String::from_utf8_lossy(&o.stdout).to_string();
    let line = plan.lines().find(|l| l.starts_with("export ")).unwrap();
    assert!(line.contains("will run") && line.contains("export/model.onnx' changed since it was written"), "{plan}");
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("export", "ran"), ("eval", "up to date")]);
    assert_eq!(sha(&out.join("export/model.onnx")), fp32, "the same model again: eval is up to date");
    assert_records_hold(&out);
}

#[test]
fn a_training_stage_tracks_the_shards_its_own_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("shards");
    let imdb = pipelines("imdb.yaml");
    let build = |flip: bool| {
        let path = format!("sink.path={}", shards.display());
        let mut args = vec!["pipeline", "run", imdb.as_str(), "--set", &path, "--overwrite", "--quiet"];
        args.extend(["--set", "steps[7].max_len=64", "--set", "steps[7].truncation=head"]);
        if flip {
            args.extend(["--set", "source.labels=[pos, neg]"]);
        }
        assert_ok(&bertpipe(&args, &[]));
    };
    build(false);
    // The training file itself names the shards (no pipeline stage in the chain).
    let train = dir.path().join("train.yaml");
    std::fs::write(
        &train,
        format!(
            "{}\ndata: {}\nmax_steps: 2\nsave_steps: 2\n",
            std::fs::read_to_string(root().join("pipelines/imdb-finetune.yaml"))
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with("data:") && !l.starts_with("output_dir:"))
                .collect::<Vec<_>>()
                .join("\n"),
            shards.display()
        ),
    )
    .unwrap();
    let exp = write_chain(dir.path(), &format!("  finetune: {}\n", train.display()));
    let out = dir.path().join("out");
    assert_ok(&run(&exp, &[], &[]));
    let rec: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(".stages/finetune.json")).unwrap()).unwrap();
    assert!(rec["parts"]["inputs"].as_object().unwrap().keys().any(|k| k.ends_with("shards")), "{rec}");
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("finetune", "up to date")]);
    // Every label flipped: the shards differ, the training runs again.
    build(true);
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("finetune", "ran")]);
    // Named by the file it read that changed (the shards' manifest or a shard).
    let why = report(&out)["finetune"]["reason"].as_str().unwrap().to_string();
    assert!(why.contains("shards/") && why.ends_with("' changed"), "{why}");
}

/// A JSONL corpus of `n` labelled reviews of about 6 kB each (over 1 MB in all: the size past
/// which the chain once trusted size and mtime), and a pipeline stage reading it.
fn jsonl_chain(dir: &Path, n: usize) -> (PathBuf, PathBuf) {
    let corpus = dir.join("corpus.jsonl");
    let lines: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "{{\"id\": \"r{i:04}\", \"label\": {}, \"text\": \"review number {i} says the film was {} and the cast {}.{}\"}}",
                i % 2,
                if i % 2 == 0 { "dull" } else { "great" },
                ["shone", "slept", "tried", "sang"][i % 4],
                " It went on and on.".repeat(300)
            )
        })
        .collect();
    std::fs::write(&corpus, lines.join("\n") + "\n").unwrap();
    assert!(std::fs::metadata(&corpus).unwrap().len() > 1 << 20);
    let stages = format!(
        "  data:
    name: corpus
    source: {{ type: jsonl, path: {}, label_field: label, id_field: id, split: {{ train: 0.8, test: 0.2 }} }}
    steps:
      - {{ type: filter, min_words: 3 }}
      - {{ type: tokenize, vocab: {} }}
      - {{ type: classify_sequences, max_len: 32 }}
    sink: {{ type: parquet }}
",
        corpus.display(),
        root().join("data/vocab/bert-base-uncased.txt").display()
    );
    (write_chain(dir, &stages), corpus)
}

#[test]
fn keys_come_from_content_a_restored_mtime_hides_nothing_and_a_touch_reruns_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (exp, corpus) = jsonl_chain(dir.path(), 200);
    let out = dir.path().join("out");
    assert_ok(&run(&exp, &[], &[]));
    let shards = tree(&out.join("data"));
    // touch: new times, same bytes. Nothing runs, nothing is rewritten.
    let f = std::fs::File::options().write(true).open(&corpus).unwrap();
    f.set_modified(std::time::SystemTime::now()).unwrap();
    drop(f);
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("data", "up to date")]);
    assert_eq!(tree(&out.join("data")), shards);
    // Every label flipped at equal size, the mtime restored as `touch -d` would.
    let mtime = std::fs::metadata(&corpus).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&corpus).unwrap();
    let flipped = text
        .replace("\"label\": 0", "\"label\": X")
        .replace("\"label\": 1", "\"label\": 0")
        .replace("\"label\": X", "\"label\": 1");
    assert_eq!(flipped.len(), text.len());
    std::fs::write(&corpus, flipped).unwrap();
    std::fs::File::options().write(true).open(&corpus).unwrap().set_modified(mtime).unwrap();
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("data", "ran")]);
    assert!(report(&out)["data"]["reason"].as_str().unwrap().contains("corpus.jsonl' changed"));
    assert_ne!(tree(&out.join("data")), shards);
}

#[test]
fn a_pipeline_change_that_writes_the_same_shards_reruns_only_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let exp = small_chain(dir.path());
    let out = dir.path().join("out");
    assert_ok(&run(&exp, &[], &[]));
    let before: BTreeMap<String, BTreeMap<String, String>> =
        ["data", "finetune", "export"].iter().map(|s| (s.to_string(), tree(&out.join(s)))).collect();
    // No review of the sample has fewer than 2 words: the shards come out the same.
    let change = ["--set", "data.steps[4].min_words=2"];
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--dry-run", change[0], change[1]], &[]);
    assert_ok(&o);
    let plan = String::from_utf8_lossy(&o.stdout).to_string();
    for (stage, status) in [("data", "will run"), ("finetune", "may run"), ("export", "may run"), ("eval", "may run")] {
        let line = plan.lines().find(|l| l.starts_with(&format!("{stage} "))).unwrap_or_else(|| panic!("{plan}"));
        assert!(line.contains(status), "{line}");
    }
    assert_ok(&run(&exp, &change, &[]));
    expect(&out, &[("data", "ran"), ("finetune", "up to date"), ("export", "up to date"), ("eval", "up to date")]);
    for s in ["finetune", "export"] {
        assert_eq!(tree(&out.join(s)), before[s], "{s} untouched");
    }
    // The shards are the same files; the manifest records the new configuration.
    let shards = |t: &BTreeMap<String, String>| {
        t.iter().filter(|(k, _)| k.ends_with(".parquet")).map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>()
    };
    assert_eq!(shards(&tree(&out.join("data"))), shards(&before["data"]));
    assert_records_hold(&out);
}

#[test]
fn stage_names_cannot_leave_out_and_a_bucket_out_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let parent_file = dir.path().join("keep.txt");
    std::fs::write(&parent_file, "mine").unwrap();
    for name in ["../../escaped", "..", "/abs", "a/b", "."] {
        let exp = write_experiment(
            dir.path(),
            "bad.yaml",
            "bad",
            &format!(
                "  ok: {{ kind: eval, model: m.onnx, data: d }}\n  \"{name}\":\n    base: {}\n",
                pipelines("imdb-finetune.yaml")
            ),
        );
        let o = bertpipe(&["run", exp.to_str().unwrap(), "--quiet"], &[]);
        assert_eq!(o.status.code(), Some(78), "{name}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("bad.yaml:5:") && e.contains("stage name") && e.contains("letters, digits"), "{name}: {e}");
    }
    assert_eq!(std::fs::read_to_string(&parent_file).unwrap(), "mine");
    assert!(!dir.path().join("out").exists() && !dir.path().parent().unwrap().join("escaped").exists());

    let exp = dir.path().join("bucket.yaml");
    std::fs::write(&exp, format!("name: b\nout: s3://bucket/exp\nstages:\n{}", data_stage())).unwrap();
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--quiet"], &[]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("bucket.yaml:2:") && stderr(&o).contains("local folder"), "{}", stderr(&o));
    assert!(!dir.path().join("s3:").exists());
    let exp = write_chain(dir.path(), &data_stage());
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--set", "out=s3://bucket/exp", "--dry-run"], &[]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("--set out=s3://bucket/exp"), "{}", stderr(&o));
}

#[test]
fn two_runs_on_one_out_do_not_collide() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough (a training) that the second run starts while the first holds the lock.
    let exp = small_chain(dir.path());
    let out = dir.path().join("out");
    let args = ["run", exp.to_str().unwrap(), "--quiet"];
    let first = command(&args, &[]).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let first_pid = first.id();
    // The second starts once the first holds the lock.
    let lock = out.join(".lock");
    let t = std::time::Instant::now();
    while std::fs::read_to_string(&lock).map_or(true, |s| s.trim().is_empty()) {
        assert!(t.elapsed().as_secs() < 30, "the first run never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let second = bertpipe(&args, &[]);
    let first = first.wait_with_output().unwrap();
    assert_ok(&first);
    assert_eq!(second.status.code(), Some(1), "{}", stderr(&second));
    let e = stderr(&second);
    assert!(e.contains(&format!("pid {first_pid}")) && e.contains("--wait"), "{e}");
    // With --wait the second queues behind the first, and finds everything done.
    std::fs::remove_dir_all(&out).unwrap();
    let first = command(&args, &[]).spawn().unwrap();
    let t = std::time::Instant::now();
    while !lock.exists() {
        assert!(t.elapsed().as_secs() < 30);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut waiting = args.to_vec();
    waiting.push("--wait");
    let second = bertpipe(&waiting, &[]);
    assert_ok(&first.wait_with_output().unwrap());
    assert_ok(&second);
    expect(&out, &[("data", "up to date"), ("finetune", "up to date"), ("eval", "up to date")]);
}

#[test]
fn ctrl_c_stops_any_stage_and_the_next_training_runs_whole() {
    let dir = tempfile::tempdir().unwrap();
    // A training, then a pipeline stage (interrupted), then another training.
    let data2 = format!(
        "  data2:\n    base: {}\n    steps[7].max_len: 96\n    steps[7].truncation: head\n",
        pipelines("imdb.yaml")
    );
    let exp = write_chain(
        dir.path(),
        &format!(
            "{}{}{data2}{}",
            data_stage(),
            finetune_stage("finetune", ""),
            finetune_stage("again", "    data: data2\n")
        ),
    );
    let out = dir.path().join("out");
    let mut child = command(&["run", exp.to_str().unwrap(), "--quiet"], &[]).spawn().unwrap();
    let started = out.join(".stages/data2.started.json");
    let t = std::time::Instant::now();
    while !started.exists() {
        assert!(t.elapsed().as_secs() < 300, "data2 never started");
        assert!(child.try_wait().unwrap().is_none(), "the chain ended before data2 started");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "Ctrl-C during a pipeline stage ends the chain with 130");
    assert!(!out.join(".stages/data2.json").exists(), "an interrupted stage is not recorded as finished");
    let o = run(&exp, &[], &[]);
    assert_ok(&o);
    expect(&out, &[("finetune", "up to date"), ("data2", "ran"), ("again", "ran")]);
    assert_eq!(report(&out)["again"]["figures"]["steps"], 4, "the next training is not stopped by an old Ctrl-C");
}

#[test]
fn a_leftover_task_array_can_be_finished_forced_away_or_is_replaced_when_stale() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write_chain(dir.path(), &data_stage());
    let out = dir.path().join("out");
    let task = |i: &str, extra: &[&str]| {
        let mut args =
            vec!["run", exp.to_str().unwrap(), "--quiet", "--stage", "data", "--task-index", i, "--task-count", "2"];
        args.extend_from_slice(extra);
        bertpipe(&args, &[])
    };
    assert_ok(&task("0", &[]));
    // Task 1 never ran: the plain run says what to do, every time.
    for _ in 0..2 {
        let o = run(&exp, &[], &[]);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("task 1 of 2") && e.contains("--task-index I --task-count N") && e.contains("--force data"),
            "{e}"
        );
    }
    // --force discards the tasks and runs the stage as one process.
    assert_ok(&run(&exp, &["--force", "data"], &[]));
    expect(&out, &[("data", "ran")]);
    assert!(!out.join("data/tasks").exists());
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("data", "up to date")]);

    // A task left by another configuration is stale: a changed run replaces it unasked.
    std::fs::remove_dir_all(&out).unwrap();
    assert_ok(&task("0", &["--set", "data.steps[4].min_words=2"]));
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("data", "ran")]);
    assert!(!out.join("data/tasks").exists());
}

#[test]
fn resume_skips_a_damaged_checkpoint_for_the_newest_intact_one() {
    let whole = tempfile::tempdir().unwrap();
    let stages = format!("{}{}", data_stage(), finetune_stage("finetune", "    max_steps: 6\n"));
    let stages = stages.replace("    max_steps: 4\n", "");
    assert_ok(&run(&write_chain(whole.path(), &stages), &[], &[]));
    let dir = tempfile::tempdir().unwrap();
    let exp = write_chain(dir.path(), &stages);
    let out = dir.path().join("out");
    // Stopped at step 5: checkpoints 4 and 5 are kept (save_total_limit 2).
    let o = run(&exp, &[], &[("BERTPIPE_STOP_AT_STEP", "5")]);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let damaged = out.join("finetune/checkpoint-5/optimizer.safetensors");
    let bytes = std::fs::read(&damaged).unwrap();
    std::fs::write(&damaged, &bytes[..bytes.len() / 2]).unwrap();
    let o = bertpipe(&["run", exp.to_str().unwrap()], &[]);
    assert_ok(&o);
    let e = stderr(&o);
    assert!(e.contains("skipped a damaged checkpoint") && e.contains("checkpoint-5/optimizer.safetensors"), "{e}");
    expect(&out, &[("finetune", "ran")]);
    let weights = |o: &Path| sha(&o.join("finetune/final/model.safetensors"));
    assert_eq!(
        weights(&out),
        weights(&whole.path().join("out")),
        "resumed from step 4: the weights of an unbroken run"
    );
    // --force starts over rather than resuming from anything.
    let newest = std::fs::read_dir(out.join("finetune"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("optimizer.safetensors").exists())
        .max()
        .unwrap();
    std::fs::write(newest.join("optimizer.safetensors"), b"cut").unwrap();
    assert_ok(&run(&exp, &["--force", "finetune"], &[]));
    assert_eq!(weights(&out), weights(&whole.path().join("out")));
    // No checkpoint intact at all: the chain says how to start over.
    let o = run(&exp, &["--force", "finetune"], &[("BERTPIPE_STOP_AT_STEP", "3")]);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    for e in std::fs::read_dir(out.join("finetune")).unwrap().flatten() {
        if e.path().join("optimizer.safetensors").exists() {
            std::fs::write(e.path().join("optimizer.safetensors"), b"cut").unwrap();
        }
    }
    let o = run(&exp, &[], &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("reads back whole") && e.contains("--force finetune` starts it over"), "{e}");
}

/// The results of a chain that must not depend on how often it was killed: shards, weights, the
/// model, and the evaluation's figures (its report also holds timings).
fn results(out: &Path) -> BTreeMap<String, String> {
    let mut r: BTreeMap<String, String> =
        tree(&out.join("data")).into_iter().filter(|(k, _)| k.ends_with(".parquet")).collect();
    r.insert("weights".into(), sha(&out.join("finetune/final/model.safetensors")));
    r.insert("model".into(), sha(&out.join("export/model.onnx")));
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("eval/metrics.json")).unwrap()).unwrap();
    for k in ["accuracy", "loss", "confusion"] {
        r.insert(k.into(), metrics["metrics"][k].to_string());
    }
    r
}

#[test]
fn killed_anywhere_the_chain_ends_with_the_results_of_an_unbroken_run() {
    use std::os::unix::process::ExitStatusExt;
    // Every run in the same folder, so the chain's keys (which hold its paths, and which the
    // model's metadata carries) are the same each time.
    let dir = tempfile::tempdir().unwrap();
    let exp = small_chain(dir.path());
    let out = dir.path().join("out");
    let o = run(&exp, &[], &[("BERTPIPE_KILL_AT", "1000000"), ("BERTPIPE_KILL_TRACE", "1")]);
    assert_ok(&o);
    let points = stderr(&o).lines().filter(|l| l.starts_with("kill point ")).count();
    assert!(points >= 12, "only {points} kill points in a whole chain");
    let want = results(&out);
    assert!(want.values().all(|v| v != "null"), "{want:?}");
    // Twelve points spread over the whole run, first and last included.
    let at: Vec<usize> = (0..12).map(|i| 1 + i * (points - 1) / 11).collect();
    for k in at {
        std::fs::remove_dir_all(&out).unwrap();
        let o = run(&exp, &[], &[("BERTPIPE_KILL_AT", &k.to_string())]);
        assert_eq!(o.status.signal(), Some(libc::SIGKILL), "kill point {k} of {points}: {}", stderr(&o));
        // Run again, killed again at its own first point (a kill during recovery), then whole.
        let o = run(&exp, &[], &[("BERTPIPE_KILL_AT", "1")]);
        assert!(o.status.signal() == Some(libc::SIGKILL) || o.status.success(), "{}", stderr(&o));
        let o = run(&exp, &[], &[]);
        assert_ok(&o);
        assert_records_hold(&out);
        assert_eq!(results(&out), want, "killed at point {k} of {points}");
        assert_ok(&run(&exp, &[], &[]));
        assert!(statuses(&out).values().all(|s| s == "up to date"), "after kill point {k}: {:?}", statuses(&out));
    }
}

/// A stage's settings are its command's: every `bertpipe eval` flag is an eval-stage key, by
/// the same name, default and check, with located errors for the rest.
#[test]
fn an_eval_stage_takes_every_setting_of_the_eval_command() {
    let dir = tempfile::tempdir().unwrap();
    let stages = format!(
        "{}{}  export: {{ optimize: false }}\n  eval: {{ split: test, batch_size: 7, length_edges: [16, 32, 64], mistakes: 3 }}\n",
        data_stage(),
        finetune_stage("finetune", "")
    );
    let exp = write_chain(dir.path(), &stages);
    let out = dir.path().join("out");
    assert_ok(&run(&exp, &[], &[]));
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("eval/metrics.json")).unwrap()).unwrap();
    let rows = metrics["rows"].as_u64().unwrap();
    assert_eq!(metrics["throughput"]["batches"].as_u64().unwrap(), rows.div_ceil(7));
    assert!(metrics["by_length"].as_array().unwrap().len() > 1, "{}", metrics["by_length"]);
    // The same settings as flags give the same figures.
    let single = eval_by_hand(&out, &["--batch-size", "7", "--length-edges", "16,32,64", "--mistakes", "3"]);
    assert_eq!(single["by_length"], metrics["by_length"]);
    assert_eq!(single["throughput"]["batches"], metrics["throughput"]["batches"]);
    // A misspelt key and a value the command refuses are located configuration errors.
    let o = run(&exp, &["--dry-run", "--set", "eval.batch_sise=8"], &[]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("did you mean `batch_size`"), "{}", stderr(&o));
    let o = run(&exp, &["--dry-run", "--set", "eval.max_drop=-1"], &[]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("max_drop") && stderr(&o).contains("≥ 0"), "{}", stderr(&o));
    let o = bertpipe(&["eval", "--model", "m.onnx", "--data", "d", "--baseline", "b.onnx", "--max-drop=-1"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("--max-drop") && stderr(&o).contains("≥ 0"), "{}", stderr(&o));
}

#[test]
fn a_file_new_to_a_split_glob_reruns_the_pipeline_stage() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("corpus")).unwrap();
    let write = |name: &str, n: usize| {
        let lines: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"text": "{name} review {i} says the film was fine", "label": {}}}"#, i % 2))
            .collect();
        std::fs::write(d.join("corpus").join(name), lines.join("\n") + "\n").unwrap();
    };
    write("train-0.jsonl", 6);
    write("test.jsonl", 4);
    // Relative entries of an inline stage are relative to the experiment file.
    let exp = write_chain(
        d,
        &format!(
            "  data:
    name: corpus
    source: {{ type: jsonl, splits: {{ train: 'corpus/train-*.jsonl', test: corpus/test.jsonl }} }}
    steps:
      - {{ type: tokenize, vocab: {} }}
      - {{ type: classify_sequences, max_len: 32 }}
    sink: {{ type: parquet }}
",
            root().join("data/vocab/bert-base-uncased.txt").display()
        ),
    );
    let out = d.join("out");
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(manifest(&out.join("data"))["splits"]["train"]["docs_in"], 6);
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("data", "up to date")]);
    write("train-1.jsonl", 3);
    let o = bertpipe(&["run", exp.to_str().unwrap(), "--dry-run"], &[]);
    assert_ok(&o);
    let plan = String::from_utf8_lossy(&o.stdout).to_string();
    let line = plan.lines().find(|l| l.starts_with("data ")).unwrap();
    assert!(line.contains("will run") && line.contains("train-1.jsonl"), "{plan}");
    assert_ok(&run(&exp, &[], &[]));
    expect(&out, &[("data", "ran")]);
    assert_eq!(manifest(&out.join("data"))["splits"]["train"]["docs_in"], 9);
}
