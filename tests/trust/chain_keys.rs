//! Stage keys from what a stage actually read (defects 3, 4, 5, 10 and the class behind them):
//! the read set a stage's record keeps is exactly what makes it run again. The metamorphic
//! test walks every file of every stage's recorded read set in a chain of every kind over a
//! copy of the sample: a one-byte change at equal size behind a restored mtime makes exactly
//! the stages that read the file run again, and a change to any other file of the corpus runs
//! nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::chain::{bertpipe, pipelines, report, run, statuses, write_experiment};
use crate::common::{assert_ok, manifest, root};

/// Copies `from` (a folder) to `to`, recursively.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_tree(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Each stage's recorded read set (files only), from `OUT/.stages/NAME.json`.
fn read_sets(out: &Path) -> BTreeMap<String, BTreeSet<PathBuf>> {
    let mut sets = BTreeMap::new();
    for stage in report(out).keys() {
        let rec: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(format!(".stages/{stage}.json"))).unwrap()).unwrap();
        let files = rec["reads"]["files"].as_object().unwrap().keys().map(PathBuf::from).collect();
        sets.insert(stage.clone(), files);
    }
    sets
}

/// One byte of `path` changed, its size kept and its mtime restored; returns what to restore.
fn flip_one_byte(path: &Path) -> (Vec<u8>, std::time::SystemTime) {
    let before = std::fs::read(path).unwrap();
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    let mut after = before.clone();
    let i = after.len() / 2;
    after[i] = if after[i] == b'a' { b'b' } else { b'a' };
    std::fs::write(path, &after).unwrap();
    std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
    (before, mtime)
}

fn restore(path: &Path, (bytes, mtime): (Vec<u8>, std::time::SystemTime)) {
    std::fs::write(path, bytes).unwrap();
    std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
}

/// The dry run's status of every stage, in this process (a dry run reads no corpus: it keys).
fn plan(exp: &bertpipe::experiment::Experiment) -> BTreeMap<String, String> {
    let opts = bertpipe::experiment::RunOptions { dry_run: true, quiet: true, ..Default::default() };
    let r = bertpipe::experiment::run(exp, &opts).unwrap();
    r.stages.into_iter().map(|s| (s.stage, s.status)).collect()
}

/// A chain of every kind over a copy of the sample: the classification pipeline, a cased
/// vocabulary learnt from it, a short fine-tune, an export with external data, evaluations of
/// the chain's export and of a model named by a path outside `out` (with external data).
struct Chain {
    dir: tempfile::TempDir,
    corpus: PathBuf,
    exp: PathBuf,
    out: PathBuf,
}

impl Chain {
    /// Writes the experiment (`keys`), with the eval of the model outside `out` or without.
    fn write(&self, with_path_eval: bool) {
        let d = self.dir.path();
        let mut s = format!(
            "  data:
    base: {imdb}
    source.path: {corpus}
    steps[6].vocab: {vocab}
    steps[7].max_len: 64
    steps[7].truncation: head
  words: {{ kind: vocab, pipeline: data, size: 400, min_frequency: 2, cased: true }}
  finetune:
    base: {finetune}
    max_steps: 2
    save_steps: 2
    eval_split: none
  export: {{ optimize: false, external_data: true }}
  eval: {{ split: test }}
",
            imdb = pipelines("imdb.yaml"),
            corpus = self.corpus.display(),
            vocab = d.join("vocab/bert-base-uncased.txt").display(),
            finetune = pipelines("imdb-finetune.yaml"),
        );
        if with_path_eval {
            s.push_str(&format!(
                "  by_path: {{ kind: eval, model: {}, data: data }}\n",
                d.join("ext/model.onnx").display()
            ));
        }
        write_experiment(d, "chain.yaml", "keys", &s);
    }

    fn new() -> Chain {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus");
        copy_tree(&root().join("data/aclImdb-sample"), &corpus);
        std::fs::create_dir_all(dir.path().join("vocab")).unwrap();
        std::fs::copy(root().join("data/vocab/bert-base-uncased.txt"), dir.path().join("vocab/bert-base-uncased.txt"))
            .unwrap();
        let exp = dir.path().join("chain.yaml");
        let out = dir.path().join("out");
        let c = Chain { dir, corpus, exp, out };
        c.write(false);
        assert_ok(&run(&c.exp, &[], &[]));
        // A model outside `out`, its weights in external data, evaluated by path.
        let ext = c.dir.path().join("ext/model.onnx");
        let (ck, m) = (c.out.join("finetune/final").display().to_string(), ext.display().to_string());
        assert_ok(&bertpipe(&["export", "onnx", "--checkpoint", &ck, "--out", &m, "--external-data"], &[]));
        c.write(true);
        assert_ok(&run(&c.exp, &[], &[]));
        assert!(statuses(&c.out).values().all(|s| s == "up to date" || s == "ran"), "{:?}", statuses(&c.out));
        c
    }
}

#[test]
fn a_byte_changed_in_any_file_a_stage_read_reruns_exactly_the_stages_that_read_it() {
    let c = Chain::new();
    let exp = bertpipe::experiment::load(&c.exp, &[]).unwrap();
    let sets = read_sets(&c.out);
    let everything: BTreeSet<PathBuf> = sets.values().flatten().cloned().collect();
    // What each stage must have read, at least.
    let ext_data = c.dir.path().join("ext/model.onnx.data");
    assert!(sets["by_path"].contains(&ext_data), "defect 4: external data is read: {:?}", sets["by_path"]);
    let review = |split: &str| sets["words"].iter().any(|p| p.starts_with(c.corpus.join(split)));
    assert!(review("train") && review("test"), "defect 3: the vocabulary read the corpus");
    assert!(sets["finetune"].iter().any(|p| p.ends_with("bert-base-uncased.txt")), "{:?}", sets["finetune"]);
    assert!(plan(&exp).values().all(|s| s == "up to date"), "{:?}", plan(&exp));
    // The eval task fingerprint (what tells a stale task array) covers the external data too.
    let opts = bertpipe::onnx::eval::EvalSettings::default().options(
        c.dir.path().join("ext/model.onnx"),
        c.out.join("data"),
        None,
        bertpipe::onnx::eval::ScoreLeaked::IfRecorded,
    );
    let before = bertpipe::onnx::eval::fingerprint(&opts).unwrap();
    let saved = flip_one_byte(&ext_data);
    assert_ne!(bertpipe::onnx::eval::fingerprint(&opts).unwrap(), before, "defect 4: the task fingerprint");
    restore(&ext_data, saved);

    for f in &everything {
        let saved = flip_one_byte(f);
        let got = plan(&exp);
        restore(f, saved);
        for (stage, set) in &sets {
            if set.contains(f) {
                assert_eq!(got[stage], "will run", "{stage} read '{}': {got:?}", f.display());
            } else {
                assert_ne!(got[stage], "will run", "{stage} did not read '{}': {got:?}", f.display());
            }
        }
    }
    // Files no stage read (the corpus's other files, the vocabulary folder) key nothing.
    let others: Vec<PathBuf> = files_under(&c.corpus)
        .into_iter()
        .chain(files_under(&c.dir.path().join("vocab")))
        .filter(|p| !everything.contains(p))
        .collect();
    assert!(others.iter().any(|p| p.ends_with("imdb.vocab")), "the sample has files no stage reads");
    for f in &others {
        let saved = flip_one_byte(f);
        let got = plan(&exp);
        restore(f, saved);
        assert!(got.values().all(|s| s == "up to date"), "'{}' is read by no stage: {got:?}", f.display());
    }
    assert!(plan(&exp).values().all(|s| s == "up to date"));

    // Defect 3 for real: " the " → " THE " in a review changes no shard (the tokenizer lower-cases)
    // but does change what a cased vocabulary learns from.
    let review = everything
        .iter()
        .find(|p| p.starts_with(c.corpus.join("train")) && std::fs::read_to_string(p).unwrap().contains(" the "))
        .unwrap();
    let text = std::fs::read_to_string(review).unwrap();
    std::fs::write(review, text.replacen(" the ", " THE ", 1)).unwrap();
    assert_ok(&run(&c.exp, &[], &[]));
    let st = statuses(&c.out);
    assert_eq!((st["data"].as_str(), st["words"].as_str()), ("ran", "ran"), "{st:?}");
    assert!(report(&c.out)["words"]["reason"].as_str().unwrap().contains("changed"), "{:?}", report(&c.out)["words"]);
    assert_ok(&run(&c.exp, &[], &[]));
    assert!(statuses(&c.out).values().all(|s| s == "up to date"));
}

/// A chain of one pipeline stage over a JSONL folder.
fn folder_chain(dir: &Path) -> PathBuf {
    write_experiment(
        dir,
        "chain.yaml",
        "folder",
        &format!(
            "  data:
    name: corpus
    source: {{ type: jsonl, path: {} }}
    steps:
      - {{ type: tokenize, vocab: {} }}
      - {{ type: classify_sequences, max_len: 32 }}
    sink: {{ type: parquet }}
",
            dir.join("corpus").display(),
            root().join("data/vocab/bert-base-uncased.txt").display()
        ),
    )
}

fn jsonl(n: usize, tag: &str) -> String {
    (0..n).map(|i| format!("{{\"text\": \"{tag} review {i} says the film was fine\"}}\n")).collect()
}

#[test]
fn a_hidden_file_a_folder_source_reads_keys_the_stage() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.jsonl"), jsonl(20, "a")).unwrap();
    std::fs::write(corpus.join(".old-b.jsonl"), jsonl(20, "b")).unwrap();
    let exp = folder_chain(dir.path());
    let out = dir.path().join("out");
    assert_ok(&run(&exp, &[], &[]));
    let read = manifest(&out.join("data"))["splits"]["train"]["docs_in"].as_u64().unwrap();
    assert_eq!(read, 40, "the folder source reads the hidden file");
    // Appended to: the stage runs and reads it all.
    std::fs::write(corpus.join(".old-b.jsonl"), jsonl(50, "b")).unwrap();
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(statuses(&out)["data"], "ran");
    assert_eq!(manifest(&out.join("data"))["splits"]["train"]["docs_in"], 70);
}

#[test]
fn links_under_a_source_folder_are_read_as_the_reader_reads_them_and_hash_nothing_else() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.jsonl"), jsonl(10, "a")).unwrap();
    // A cycle, a dangling link, a link to an unrelated folder holding a large file, and a link
    // to a file (read as that file).
    symlink(&corpus, corpus.join("loop")).unwrap();
    symlink(dir.path().join("nowhere"), corpus.join("dangling.jsonl")).unwrap();
    let big = dir.path().join("unrelated");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::write(big.join("huge.jsonl"), vec![b'x'; 8 << 20]).unwrap();
    symlink(&big, corpus.join("elsewhere")).unwrap();
    std::fs::write(dir.path().join("b.jsonl"), jsonl(5, "b")).unwrap();
    symlink(dir.path().join("b.jsonl"), corpus.join("b.jsonl")).unwrap();
    let exp = folder_chain(dir.path());
    let out = dir.path().join("out");
    let o = run(&exp, &[], &[]);
    assert_ok(&o);
    assert_eq!(manifest(&out.join("data"))["splits"]["train"]["docs_in"], 15, "a.jsonl and the linked b.jsonl");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert!(r["hashed_bytes"].as_u64().unwrap() < 4 << 20, "the unrelated folder was hashed: {r}");
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(statuses(&out)["data"], "up to date");
    // The linked file is read through the link: a change to it runs the stage.
    std::fs::write(dir.path().join("b.jsonl"), jsonl(6, "b")).unwrap();
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(statuses(&out)["data"], "ran");
}

/// A task array's tasks record what they read, digested in their own processes: a merge records
/// that (not what is there when it merges), a corpus changed between the tasks and the merge —
/// or after a merge — discards the array and runs the stage as one process, and an array once
/// merged is never merged again as a later run's output.
#[test]
fn a_task_array_merges_only_what_its_tasks_read_and_only_once() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.jsonl"), jsonl(30, "a")).unwrap();
    std::fs::write(corpus.join("b.jsonl"), jsonl(30, "b")).unwrap();
    let exp = folder_chain(dir.path());
    let out = dir.path().join("out");
    let e = exp.to_str().unwrap();
    let tasks = || {
        for i in ["0", "1"] {
            assert_ok(&bertpipe(
                &["run", e, "--quiet", "--stage", "data", "--task-index", i, "--task-count", "2"],
                &[],
            ));
        }
    };
    let docs = || manifest(&out.join("data"))["splits"]["train"]["docs_in"].as_u64().unwrap();
    tasks();
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!((statuses(&out)["data"].as_str(), docs()), ("ran", 60));
    let rec: Value = serde_json::from_str(&std::fs::read_to_string(out.join(".stages/data.json")).unwrap()).unwrap();
    let read: Vec<&String> = rec["reads"]["files"].as_object().unwrap().keys().collect();
    assert!(read.iter().any(|k| k.ends_with("a.jsonl")) && read.iter().any(|k| k.ends_with("b.jsonl")), "{rec}");

    // After the merge, a new file: the old tasks are not merged again; the stage reads it all.
    std::fs::write(corpus.join("c.jsonl"), jsonl(5, "c")).unwrap();
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!((statuses(&out)["data"].as_str(), docs()), ("ran", 65));

    // A file changed (same size) between the tasks and the merge: the array is discarded.
    // (Tasks write into a folder no single run has written: a fresh `out`.)
    std::fs::remove_dir_all(&out).unwrap();
    tasks();
    let text = std::fs::read_to_string(corpus.join("a.jsonl")).unwrap();
    std::fs::write(corpus.join("a.jsonl"), text.replace("a review 0 ", "A review 0 ")).unwrap();
    let o = bertpipe(&["run", e], &[]);
    assert_ok(&o);
    assert!(crate::common::stderr(&o).contains("discarding the task array"), "{}", crate::common::stderr(&o));
    let texts = crate::common::strings(&out.join("data"), "train", "id");
    assert_eq!(texts.len(), 65);
    assert_ok(&run(&exp, &[], &[]));
    assert_eq!(statuses(&out)["data"], "up to date");
}

/// A file a stage looked for and did not find is in its read set too: a `tokenizer_config.json`
/// that appears beside the pipeline's `tokenizer.json` (which the training reads to write its
/// checkpoint's) runs the stages that looked for it, and a change to it runs them again.
#[test]
fn a_file_that_appears_where_a_stage_looked_for_one_runs_it() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("tok");
    std::fs::create_dir_all(&tok).unwrap();
    let fixture = root().join("tests/fixtures/tokenizers/roberta");
    std::fs::copy(fixture.join("tokenizer.json"), tok.join("tokenizer.json")).unwrap();
    let exp = write_experiment(
        dir.path(),
        "chain.yaml",
        "tok",
        &format!(
            "  data:
    base: {imdb}
    steps[6]: {{ type: tokenize, tokenizer: {tok} }}
    steps[7].max_len: 64
    steps[7].truncation: head
  finetune:
    base: {finetune}
    max_steps: 1
    save_steps: 1
    eval_split: none
",
            imdb = pipelines("imdb.yaml"),
            tok = tok.join("tokenizer.json").display(),
            finetune = pipelines("imdb-finetune.yaml"),
        ),
    );
    let out = dir.path().join("out");
    assert_ok(&run(&exp, &[], &[]));
    let loader = bertpipe::experiment::load(&exp, &[]).unwrap();
    assert!(plan(&loader).values().all(|s| s == "up to date"));
    std::fs::copy(fixture.join("tokenizer_config.json"), tok.join("tokenizer_config.json")).unwrap();
    let got = plan(&loader);
    assert_eq!(got["finetune"], "will run", "{got:?}");
    assert_ok(&run(&exp, &[], &[]));
    assert_ok(&run(&exp, &[], &[]));
    assert!(statuses(&out).values().all(|s| s == "up to date"));
    let text = std::fs::read_to_string(tok.join("tokenizer_config.json")).unwrap();
    std::fs::write(tok.join("tokenizer_config.json"), text.replacen('{', "{ ", 1)).unwrap();
    assert_eq!(plan(&loader)["finetune"], "will run");
}

/// An aclImdb label folder that may be missing (`test/unsup`) and was, is in the read set as
/// absent: one that appears runs the stage.
#[test]
fn a_label_folder_that_appears_runs_the_stage_that_found_none() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("imdb");
    copy_tree(&root().join("data/aclImdb-sample"), &corpus);
    assert!(!corpus.join("test/unsup").exists());
    let exp = write_experiment(
        dir.path(),
        "chain.yaml",
        "unsup",
        &format!(
            "  data:\n    source: {{ type: aclimdb, path: {}, splits: [train, test], labels: [neg, pos, unsup] }}\n    steps:\n      - {{ type: tokenize, vocab: {} }}\n      - {{ type: classify_sequences, max_len: 32 }}\n",
            corpus.display(),
            root().join("data/vocab/bert-base-uncased.txt").display()
        ),
    );
    assert_ok(&run(&exp, &[], &[]));
    let loaded = bertpipe::experiment::load(&exp, &[]).unwrap();
    assert_eq!(plan(&loaded)["data"], "up to date");
    std::fs::create_dir_all(corpus.join("test/unsup")).unwrap();
    std::fs::write(corpus.join("test/unsup/9999_0.txt"), "An unlabelled review of a film.").unwrap();
    assert_eq!(plan(&loaded)["data"], "will run");
}
