//! Task arrays: the same pipeline as N processes (`pipeline scan` where needed, `pipeline run
//! --task-index I --task-count N`, `shards merge`) gives the rows of one process, in the same
//! order, with the same counts, rejects and token figures — for folders, tarballs, JSONL files
//! and Parquet row groups — and every way it can go wrong says what to do.

mod common;

use std::path::Path;

use arrow_array::RecordBatch;
use common::*;

/// Runs `pipeline` as `n` tasks into `out` (scan first when `scan`), then merges.
fn run_as_tasks(pipeline: &str, out: &Path, n: u32, scan: bool, sets: &[&str]) {
    let out_set = format!("sink.path={}", out.display());
    let mut common: Vec<&str> = vec!["--set", &out_set, "--quiet"];
    for s in sets {
        common.extend(["--set", s]);
    }
    let count = n.to_string();
    for phase in ["scan", "run"] {
        if phase == "scan" && !scan {
            continue;
        }
        for i in 0..n {
            let index = i.to_string();
            let mut args = vec!["pipeline", phase, pipeline, "--task-index", &index, "--task-count", &count];
            args.extend(&common);
            assert_ok(&bertpipe(&args));
        }
    }
    assert_ok(&bertpipe(&["shards", "merge", out.to_str().unwrap()]));
}

/// Runs `pipeline` once into `DIR/one` and as `n` tasks into `DIR/many`, asserts that the two
/// give the same rows, and returns both folders.
fn one_and_many(dir: &Path, pipeline: &str, n: u32, sets: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
    let (one, many) = (dir.join("one"), dir.join("many"));
    run_once(pipeline, &one, sets);
    run_as_tasks(pipeline, &many, n, true, sets);
    assert_same_rows(&one, &many);
    (one, many)
}

fn run_once(pipeline: &str, out: &Path, sets: &[&str]) {
    let out_set = format!("sink.path={}", out.display());
    let mut args = vec!["pipeline", "run", pipeline, "--set", &out_set, "--quiet"];
    for s in sets {
        args.extend(["--set", s]);
    }
    assert_ok(&bertpipe(&args));
}

#[test]
fn the_sample_as_three_tasks_is_the_single_run_and_reads_as_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, many) = one_and_many(tmp.path(), "pipelines/imdb.yaml", 3, &[]);
    let m = manifest(&many);
    assert_eq!(m["tasks"]["count"], 3);
    assert!(m["splits"]["train"]["shards"][0]["file"].as_str().unwrap().starts_with("tasks/00000/train/"));
    // Cross-task duplicates were found: the sample has some, and the counts equal the single run's.
    assert!(m["splits"]["train"]["rejected"]["duplicate_of"].as_u64().unwrap() > 0);

    // Readers see one output: ShardSet (train, eval) and stats.
    let set = bertpipe::shards::ShardSet::open(&many).unwrap();
    set.verify().unwrap();
    let ids: Vec<String> = set.rows("test").unwrap().map(|r| r.unwrap().id).collect();
    let want: Vec<String> =
        bertpipe::shards::ShardSet::open(&one).unwrap().rows("test").unwrap().map(|r| r.unwrap().id).collect();
    assert_eq!(ids, want);
    let stats = |out: &Path| {
        let o = bertpipe(&["stats", out.to_str().unwrap(), "--json", "--quiet", "--by", "label"]);
        assert_ok(&o);
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("input");
        v
    };
    assert_eq!(stats(&one), stats(&many));
}

#[test]
fn scheduler_environment_picks_the_task() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out_set = format!("sink.path={}", out.display());
    // Slurm numbers `--array=1-2` from 1: the second task is index 1.
    let o = bertpipe_env(
        &["pipeline", "run", "pipelines/imdb-clean.yaml", "--set", &out_set, "--quiet"],
        &[("SLURM_ARRAY_TASK_ID", "2"), ("SLURM_ARRAY_TASK_MIN", "1"), ("SLURM_ARRAY_TASK_COUNT", "2")],
    );
    let err = stderr(&o);
    // imdb-clean has dedup: task 1 of 2 needs task 0's scan, and says how to make it.
    assert!(!o.status.success() && err.contains("pipeline scan") && err.contains("task 0"), "{err}");
    let o = bertpipe_env(
        &["pipeline", "scan", "pipelines/imdb-clean.yaml", "--set", &out_set, "--quiet", "--task-count", "2"],
        &[("JOB_COMPLETION_INDEX", "0")],
    );
    assert_ok(&o);
    assert!(out.join("tasks/scan/00000.bin").is_file());
    let o = bertpipe_env(
        &["pipeline", "run", "pipelines/imdb-clean.yaml", "--set", &out_set, "--quiet"],
        &[("JOB_COMPLETION_INDEX", "1")],
    );
    assert!(!o.status.success() && stderr(&o).contains("--task-count"), "{}", stderr(&o));
    let o = bertpipe_env(
        &["pipeline", "run", "pipelines/imdb-clean.yaml", "--set", &out_set, "--quiet", "--task-count", "2"],
        &[("JOB_COMPLETION_INDEX", "1")],
    );
    assert_ok(&o);
    assert!(out.join("tasks/00001/manifest.json").is_file());
}

#[test]
fn a_generated_tarball_as_four_tasks_is_the_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    let tarball = tmp.path().join("aclImdb_v1.tar.gz");
    write_tarball(&tarball, &bertpipe::synth::corpus(120, 40, 7));
    let source = format!("source.path={}", tarball.display());
    let labels = "source.labels=[neg, pos, unsup]";
    let (_, many) = one_and_many(tmp.path(), "pipelines/imdb.yaml", 4, &[&source, labels]);
    assert_eq!(manifest(&many)["splits"]["train"]["docs_in"], 280);
}

#[test]
fn jsonl_files_with_a_noise_quantile_as_three_tasks_are_the_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut rng = bertpipe::rng::Rng(3);
    for f in 0..5 {
        let mut text = String::new();
        for _ in 0..40 {
            let positive = rng.chance(0.5);
            let review = bertpipe::synth::review(&mut rng, Some(positive));
            text.push_str(&serde_json::json!({ "text": review, "label": rng.below(2) }).to_string());
            text.push('\n');
        }
        std::fs::write(data.join(format!("part-{f}.jsonl")), text).unwrap();
    }
    let pipeline = write_pipeline(
        tmp.path(),
        "q.yaml",
        &format!(
            "name: q\nseed: 5\nsource: {{type: jsonl, path: {}, split: {{train: 0.8, validation: 0.2}}}}\nsteps:\n  - type: html_strip\n  - type: noise_score\n  - type: filter\n    max_noise_quantile: 0.8\n  - type: tokenize\n    vocab: {}\n  - type: classify_sequences\n    max_len: 64\nsink: {{type: parquet, path: {}}}\n",
            data.display(),
            root().join("data/vocab/bert-base-uncased.txt").display(),
            tmp.path().join("unused").display()
        ),
    );
    let pipeline = pipeline.to_str().unwrap();
    let (_, many) = one_and_many(tmp.path(), pipeline, 3, &[]);
    let rejected: u64 = manifest(&many)["splits"]
        .as_object()
        .unwrap()
        .values()
        .map(|s| s["rejected"]["max_noise_quantile"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(rejected, 40, "the noisiest 20% of 200 documents, over all tasks together");
}

#[test]
fn parquet_row_groups_are_divided_among_tasks() {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, StringArray};
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("reviews.parquet");
    let mut rng = bertpipe::rng::Rng(9);
    let texts: Vec<String> = (0..300).map(|_| bertpipe::synth::review(&mut rng, None)).collect();
    let batch = RecordBatch::try_from_iter([("review", Arc::new(StringArray::from(texts)) as ArrayRef)]).unwrap();
    let props = parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(40)).build();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&file).unwrap(), batch.schema(), Some(props))
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p.yaml",
        &format!(
            "name: p\nsource: {{type: parquet, path: {}, text_column: review}}\nsteps:\n  - type: punctuation\n  - type: dedup\nsink: {{type: parquet, path: {}, keep_text: true}}\n",
            file.display(),
            tmp.path().join("unused").display()
        ),
    );
    let pipeline = pipeline.to_str().unwrap();
    let (_, many) = one_and_many(tmp.path(), pipeline, 3, &[]);
    // 8 row groups over 3 tasks: every task had some (ids keep the file's row numbers).
    for i in 0..3 {
        let m = manifest(&many.join(format!("tasks/{i:05}")));
        assert!(m["splits"]["train"]["docs_in"].as_u64().unwrap() >= 80, "task {i}: {m}");
    }
}

#[test]
fn merge_refuses_missing_and_unfinished_tasks_and_a_failed_task_resumes_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, many) = (tmp.path().join("one"), tmp.path().join("many"));
    let sets = ["sink.shard_rows=20"];
    run_once("pipelines/imdb-clean.yaml", &one, &sets);
    let out_set = format!("sink.path={}", many.display());
    let task = |phase: &str, i: &str, extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["pipeline", phase, "pipelines/imdb-clean.yaml", "--task-index", i, "--task-count", "3"];
        args.extend(["--set", &out_set, "--set", sets[0], "--quiet"]);
        args.extend(extra);
        bertpipe_env(&args, env)
    };
    for i in ["0", "1", "2"] {
        assert_ok(&task("scan", i, &[], &[]));
    }
    assert_ok(&task("run", "0", &[], &[]));
    let merge = || bertpipe(&["shards", "merge", many.to_str().unwrap()]);
    let e = stderr(&merge());
    assert!(e.contains("tasks 1, 2 of 3 have no output"), "{e}");
    // Task 1 dies after its second shard: merge says to resume it.
    let crashed = task("run", "1", &[], &[("BERTPIPE_CRASH_AFTER_SHARDS", "2")]);
    assert!(!crashed.status.success());
    assert_ok(&task("run", "2", &[], &[]));
    let e = stderr(&merge());
    assert!(e.contains("task 1 is unfinished") && e.contains("--resume"), "{e}");
    assert!(!many.join("manifest.json").exists(), "no manifest before every task is done");
    assert_ok(&task("run", "1", &["--resume"], &[]));
    assert_ok(&merge());
    assert_same_rows(&one, &many);
    // A damaged shard is caught by the merge, naming it.
    let m = manifest(&many);
    let shard = many.join(m["splits"]["train"]["shards"][1]["file"].as_str().unwrap());
    let mut bytes = std::fs::read(&shard).unwrap();
    let last = bytes.len() - 10;
    bytes[last] ^= 1;
    std::fs::write(&shard, bytes).unwrap();
    let e = stderr(&merge());
    assert!(e.contains("checksum mismatch") && e.contains(shard.file_name().unwrap().to_str().unwrap()), "{e}");
    // Only folders of the layout's shape are read as tasks: anything else is refused by name.
    for odd in ["7", "..00001", "00001.bak"] {
        std::fs::create_dir_all(many.join("tasks").join(odd)).unwrap();
        let e = stderr(&merge());
        assert!(e.contains("is not a task folder") && e.contains(odd), "{odd}: {e}");
        std::fs::remove_dir(many.join("tasks").join(odd)).unwrap();
    }
    // A single run's output is not a place for tasks.
    let out_set = format!("sink.path={}", one.display());
    let o = bertpipe(&[
        "pipeline",
        "run",
        "pipelines/imdb-clean.yaml",
        "--task-index",
        "0",
        "--task-count",
        "2",
        "--set",
        &out_set,
    ]);
    assert!(!o.status.success() && stderr(&o).contains("single run"), "{}", stderr(&o));
}

/// The Slurm example, run as Slurm would run it (its environment, no `sbatch`): three tasks of
/// each phase, then the merge, give the single run's rows.
#[test]
fn the_slurm_example_runs_a_task_array() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, many) = (tmp.path().join("one"), tmp.path().join("many"));
    run_once("pipelines/imdb.yaml", &one, &[]);
    let script = root().join("examples/slurm/bertpipe-array.sbatch");
    for phase in ["scan", "run"] {
        for id in 1..=3 {
            let o = std::process::Command::new("bash")
                .arg(&script)
                .current_dir(root())
                .env("PHASE", phase)
                .env("PIPELINE", "pipelines/imdb.yaml")
                .env("OUT", &many)
                .env("BERTPIPE", env!("CARGO_BIN_EXE_bertpipe"))
                .env("SLURM_ARRAY_TASK_ID", id.to_string())
                .env("SLURM_ARRAY_TASK_MIN", "1")
                .env("SLURM_ARRAY_TASK_COUNT", "3")
                .env("SLURM_CPUS_PER_TASK", "2")
                .output()
                .unwrap();
            assert_ok(&o);
        }
    }
    assert_ok(&bertpipe(&["shards", "merge", many.to_str().unwrap()]));
    assert_same_rows(&one, &many);
    for script in ["examples/slurm/submit.sh", "examples/kubernetes/run.sh"] {
        let o = std::process::Command::new("bash").args(["-n", script]).current_dir(root()).output().unwrap();
        assert_ok(&o);
    }
}

/// Pretraining rows are built within each task, so they are not a single run's; the documents
/// behind them are (same counts, same rejects), and the merged output reads as one.
#[test]
fn pretraining_as_two_tasks_keeps_every_document_and_merges() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, many) = (tmp.path().join("one"), tmp.path().join("many"));
    run_once("pipelines/imdb-pretrain.yaml", &one, &[]);
    run_as_tasks("pipelines/imdb-pretrain.yaml", &many, 2, true, &[]);
    let (a, b) = (manifest(&one), manifest(&many));
    for (split, s) in a["splits"].as_object().unwrap() {
        for k in ["docs_in", "docs_out", "rejected"] {
            assert_eq!(s[k], b["splits"][split][k], "{split} {k}");
        }
        let p = &b["splits"][split]["pretraining"];
        assert!(p["rows"].as_u64().unwrap() > 0 && p["rows"] == b["splits"][split]["rows"], "{split}: {p}");
        let share = p["nsp_random_share"].as_f64().unwrap();
        assert!((0.4..=0.6).contains(&share), "{split}: NSP random share {share}");
    }
    assert_eq!(all_rows(&one).last().unwrap(), all_rows(&many).last().unwrap(), "the rejects are the same");
    let set = bertpipe::shards::ShardSet::open(&many).unwrap();
    set.verify().unwrap();
    assert!(!set.pretrain_shard("train", 1).unwrap().is_empty(), "task 1's first shard reads back");
}

/// `vocab train` over shards (a parquet source pointed at an output folder) reads the same
/// documents from a merged task array as from the single run (the vocabularies themselves are
/// not compared: the `tokenizers` trainer breaks ties between equal counts in hash order, which
/// differs from one process to the next); `stats` on a task array that is not merged yet says
/// to merge it.
#[test]
fn vocab_train_reads_merged_shards_as_it_reads_the_single_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, many) = (tmp.path().join("one"), tmp.path().join("many"));
    run_once("pipelines/imdb-clean.yaml", &one, &[]);
    let out_set = format!("sink.path={}", many.display());
    for i in ["0", "1"] {
        for phase in ["scan", "run"] {
            let args = [
                "pipeline",
                phase,
                "pipelines/imdb-clean.yaml",
                "--task-index",
                i,
                "--task-count",
                "2",
                "--set",
                &out_set,
                "--quiet",
            ];
            assert_ok(&bertpipe(&args));
        }
    }
    let o = bertpipe(&["stats", many.to_str().unwrap(), "--quiet"]);
    assert!(!o.status.success() && stderr(&o).contains("shards merge"), "{}", stderr(&o));
    assert_ok(&bertpipe(&["shards", "merge", many.to_str().unwrap()]));
    let vocab = |shards: &Path, name: &str| {
        let p = write_pipeline(
            tmp.path(),
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nsource: {{type: parquet, path: {}, text_column: text}}\nsteps: []\nsink: {{type: parquet, path: {}}}\n",
                shards.display(),
                tmp.path().join("unused").display()
            ),
        );
        let out = tmp.path().join(format!("vocab-{name}"));
        let o = bertpipe(&[
            "vocab",
            "train",
            p.to_str().unwrap(),
            "--size",
            "500",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ]);
        assert_ok(&o);
        assert!(std::fs::read_to_string(out.join("vocab.txt")).unwrap().lines().count() > 100);
        let err = stderr(&o);
        err.split(" from ").nth(1).and_then(|s| s.split(" documents").next()).unwrap_or_default().to_string()
    };
    let docs =
        manifest(&one)["splits"].as_object().unwrap().values().map(|s| s["docs_out"].as_u64().unwrap()).sum::<u64>();
    assert_eq!(vocab(&one, "one"), docs.to_string());
    assert_eq!(vocab(&many, "many"), docs.to_string());
}

/// An aclImdb folder whose test reviews include exact and near copies (one word changed) of
/// training reviews. Three tasks split the files so that copies and originals fall in different
/// tasks.
fn leaky_corpus(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("aclImdb");
    let mut rng = bertpipe::rng::Rng(31);
    for (label, positive, rating) in [("neg", false, 3), ("pos", true, 8)] {
        for split in ["train", "test"] {
            std::fs::create_dir_all(root.join(split).join(label)).unwrap();
        }
        let mut long = Vec::new();
        for i in 0..40 {
            let text = bertpipe::synth::review(&mut rng, Some(positive));
            if text.split(' ').count() >= 150 {
                long.push(text.clone());
            }
            std::fs::write(root.join(format!("train/{label}/{i}_{rating}.txt")), text).unwrap();
        }
        assert!(long.len() >= 8, "{} long reviews", long.len());
        for i in 0..30 {
            let text = match long.get(i).filter(|_| i < 8) {
                Some(t) if i < 4 => t.clone(),
                Some(t) => {
                    let mut w: Vec<&str> = t.split(' ').collect();
                    w[60] = "zqchanged";
                    w.join(" ")
                }
                None => bertpipe::synth::review(&mut rng, Some(positive)),
            };
            std::fs::write(root.join(format!("test/{label}/{i}_{rating}.txt")), text).unwrap();
        }
    }
    root
}

#[test]
fn test_leakage_of_an_array_is_measured_at_the_merge_as_one_process_measures_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = format!("source.path={}", leaky_corpus(tmp.path()).display());
    let (one, many) = one_and_many(tmp.path(), "pipelines/imdb.yaml", 3, &[&src]);
    // one_and_many compared the whole blocks; here, that there is something to compare.
    let (a, b) = (manifest(&one), manifest(&many));
    assert_eq!(a["leakage"], b["leakage"]);
    let l = &b["leakage"]["test"];
    assert!(l["exact"].as_u64().unwrap() >= 6 && l["near"].as_u64().unwrap() >= 6, "{l}");
    assert_eq!(l["documents"], b["splits"]["test"]["docs_out"]);
    assert!(b.get("leakage_part").is_none(), "the merged manifest lists no part");
    // Each task lists its part, with its checksum; a damaged or missing part is named.
    let part = many.join("tasks/00001/_leakage.bin");
    let t = manifest(&many.join("tasks/00001"));
    assert_eq!(t["leakage_part"]["file"], "_leakage.bin");
    assert!(t.get("leakage").is_none(), "a task measures nothing itself");
    let merge = || bertpipe(&["shards", "merge", many.to_str().unwrap()]);
    let mut bytes = std::fs::read(&part).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 1;
    std::fs::write(&part, &bytes).unwrap();
    let e = stderr(&merge());
    assert!(e.contains("_leakage.bin") && e.contains("SHA-256"), "{e}");
    std::fs::remove_file(&part).unwrap();
    let e = stderr(&merge());
    assert!(e.contains("_leakage.bin") && e.contains("missing"), "{e}");
}

#[test]
fn files_per_split_with_label_names_as_three_tasks_are_the_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(data.join("held-out")).unwrap();
    let mut rng = bertpipe::rng::Rng(11);
    let mut write = |rel: &str, n: usize| {
        let mut text = String::new();
        for _ in 0..n {
            let positive = rng.chance(0.5);
            let review = bertpipe::synth::review(&mut rng, Some(positive));
            let label = if positive { "pos" } else { "neg" };
            text.push_str(&serde_json::json!({ "text": review, "sentiment": label }).to_string());
            text.push('\n');
        }
        std::fs::write(data.join(rel), text).unwrap();
    };
    for f in 0..4 {
        write(&format!("train-{f}.jsonl"), 30);
    }
    write("extra.jsonl", 20);
    write("held-out/a.jsonl", 25);
    write("held-out/b.jsonl", 15);
    let pipeline = write_pipeline(
        tmp.path(),
        "s.yaml",
        &format!(
            "name: s\nsource: {{type: jsonl, path: {}, splits: {{train: ['train-*.jsonl', extra.jsonl], test: held-out}}}}\nsteps:\n  - type: punctuation\n  - type: dedup\n  - type: tokenize\n    vocab: {}\n  - type: classify_sequences\n    max_len: 64\nsink: {{type: parquet, path: {}}}\n",
            data.display(),
            root().join("data/vocab/bert-base-uncased.txt").display(),
            tmp.path().join("unused").display()
        ),
    );
    let pipeline = pipeline.to_str().unwrap();
    // 7 files over 3 tasks: the middle task reads the end of `test` and the start of `train`.
    let (one, many) = one_and_many(tmp.path(), pipeline, 3, &[]);
    let m = manifest(&one);
    assert_eq!(m["id2label"], serde_json::json!({"0": "neg", "1": "pos"}));
    assert_eq!(m["splits"]["test"]["docs_in"], 40);
    assert_eq!(m["splits"]["train"]["docs_in"], 140);
    assert_eq!(m["source_files"]["train"].as_array().unwrap().len(), 5);
    let tasks: Vec<u64> = (0..3)
        .map(|i| {
            let t = manifest(&many.join(format!("tasks/{i:05}")));
            t["splits"].as_object().unwrap().values().map(|s| s["docs_in"].as_u64().unwrap()).sum()
        })
        .collect();
    assert!(tasks.iter().all(|n| *n > 0), "every task read some files: {tasks:?}");
}
