//! Corpora as people ship them (issue 43, first part): labels and ids found where they are
//! without a field name, `.json` files holding one array of records, and classification
//! shards without labels said out loud (summary and manifest) instead of found out by `train`.

mod common;

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;
use common::{assert_ok, assert_reconciles, bertpipe, read_parquet, root, shard_files, stderr, write_pipeline};

/// A classification pipeline over `source` (YAML flow map), writing into `out`.
fn pipeline(dir: &Path, source: &str, out: &Path) -> std::path::PathBuf {
    let vocab = root().join("data/vocab/bert-base-uncased.txt");
    let yaml = format!(
        "name: corpus\nsource: {source}\nsteps:\n  - type: tokenize\n    vocab: {}\n    lowercase: true\n  - type: classify_sequences\n    max_len: 64\nsink: {{ type: parquet, path: {} }}\n",
        vocab.display(),
        out.display()
    );
    write_pipeline(dir, "p.yaml", &yaml)
}

fn run(p: &Path) -> std::process::Output {
    bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--overwrite"])
}

/// (id, label) of every row of a split, in order.
fn rows(out: &Path, split: &str) -> Vec<(String, Option<i64>)> {
    let mut v = Vec::new();
    for f in shard_files(&out.join(split)) {
        for b in read_parquet(&f) {
            let id = b.column_by_name("id").unwrap().as_string::<i32>().clone();
            let label = b.column_by_name("label").unwrap().as_primitive::<Int64Type>().clone();
            for i in 0..b.num_rows() {
                v.push((id.value(i).to_string(), label.is_valid(i).then(|| label.value(i))));
            }
        }
    }
    v
}

const WORDS: &str = "a film with a story worth telling and actors worth watching";

#[test]
fn a_label_and_an_id_field_are_found_without_being_named_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("reviews.jsonl");
    let lines: Vec<String> =
        (0..6).map(|i| format!(r#"{{"id": "r{i}", "text": "{WORDS} {i}", "label": {}}}"#, i % 2)).collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("out");
    let o = run(&pipeline(dir.path(), &format!("{{ type: jsonl, path: {} }}", data.display()), &out));
    assert_ok(&o);
    let err = stderr(&o);
    assert!(err.contains("found: label from field `label`, id from field `id`"), "{err}");
    let got = rows(&out, "train");
    assert_eq!(got, (0..6).map(|i| (format!("r{i}"), Some(i % 2))).collect::<Vec<_>>());
    let m = common::manifest(&out);
    assert_eq!(m["config"]["source"]["label_field"], "label", "the manifest records what was read");
    assert!(m.get("warnings").is_none(), "{m}");

    // `sentiment` in a CSV header is found too; a named column wins over any found one.
    let csv = dir.path().join("reviews.csv");
    std::fs::write(&csv, format!("text,sentiment,stars\n{WORDS},1,5\n{WORDS} again,0,1\n")).unwrap();
    let o = run(&pipeline(dir.path(), &format!("{{ type: csv, path: {} }}", csv.display()), &out));
    assert_ok(&o);
    assert!(stderr(&o).contains("found: label from column `sentiment`"), "{}", stderr(&o));
    assert_eq!(rows(&out, "train").iter().map(|r| r.1).collect::<Vec<_>>(), [Some(1), Some(0)]);
    let named = format!("{{ type: csv, path: {}, label_column: stars, label_map: {{'1': 0, '5': 1}} }}", csv.display());
    let o = run(&pipeline(dir.path(), &named, &out));
    assert_ok(&o);
    assert!(!stderr(&o).contains("label from"), "{}", stderr(&o));
    assert_eq!(rows(&out, "train").iter().map(|r| r.1).collect::<Vec<_>>(), [Some(1), Some(0)]);
}

#[test]
fn a_json_file_holding_one_array_of_records_reads_as_records() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("export.json");
    // Pretty-printed over many lines, a BOM, and one element that is not a record.
    let body = format!(
        "\u{feff}[\n  {{\"text\": \"{WORDS}\",\n   \"label\": 1}},\n  {{\"text\": \"{WORDS} two\", \"label\": 0}},\n  42,\n  {{\"text\": \"{WORDS} three\", \"label\": 1}}\n]\n"
    );
    std::fs::write(&data, body).unwrap();
    let out = dir.path().join("out");
    let p = pipeline(dir.path(), &format!("{{ type: jsonl, path: {} }}", data.display()), &out);
    assert_ok(&run(&p));
    assert_reconciles(&out);
    assert_eq!(
        rows(&out, "train"),
        [("export.json:1".to_string(), Some(1)), ("export.json:2".into(), Some(0)), ("export.json:4".into(), Some(1))]
    );
    let reasons = common::strings(&out, "_rejects", "reason");
    assert_eq!(reasons, ["bad_json:not an object"]);
    // `stats` takes the file as the source would.
    let o = bertpipe(&["stats", data.to_str().unwrap(), "--json"]);
    assert_ok(&o);
    // A damaged array names the file and where.
    std::fs::write(&data, format!("[{{\"text\": \"{WORDS}\"}}, {{\"text\": ]")).unwrap();
    let o = run(&p);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("export.json") && err.contains("JSON array") && err.contains("column"), "{err}");
}

#[test]
fn classification_shards_without_labels_are_said_in_the_summary_and_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("plain.jsonl");
    let lines: Vec<String> = (0..4).map(|i| format!(r#"{{"body": "{WORDS} {i}"}}"#)).collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("out");
    let o = run(&pipeline(dir.path(), &format!("{{ type: jsonl, path: {}, text_field: body }}", data.display()), &out));
    assert_ok(&o);
    assert!(stderr(&o).contains("warning: no document has a label"), "{}", stderr(&o));
    let m = common::manifest(&out);
    assert!(m["warnings"][0].as_str().unwrap().contains("no document has a label"), "{m}");

    // Some labelled, some not: how many, per split.
    let lines: Vec<String> = (0..5)
        .map(|i| match i {
            1 | 3 => format!(r#"{{"text": "{WORDS} {i}"}}"#),
            _ => format!(r#"{{"text": "{WORDS} {i}", "label": 1}}"#),
        })
        .collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let o =
        run(&pipeline(dir.path(), &format!("{{ type: jsonl, path: {}, label_field: label }}", data.display()), &out));
    assert_ok(&o);
    assert!(stderr(&o).contains("warning: split `train`: 2 of 5 documents have no label"), "{}", stderr(&o));
    assert_eq!(common::manifest(&out)["splits"]["train"]["unlabelled"], 2);
}

/// A 3-class review corpus as it is shipped: `train.tsv` + `test.tsv`, quoted TSV with HTML
/// entities and string labels (`positive` / `neutral` / `negative`), an `id` column.
fn tsv_corpus(dir: &Path) {
    let names = ["positive", "neutral", "negative"];
    for (split, n) in [("train", 12), ("test", 6)] {
        let mut text = String::from("id\ttext\tlabel\n");
        for i in 0..n {
            text.push_str(&format!(
                "{split}-{i}\t\"{WORDS} &amp; \"\"more\"\"\ton {i}<br />done\"\t{}\n",
                names[i % 3]
            ));
        }
        std::fs::write(dir.join(format!("{split}.tsv")), text).unwrap();
    }
}

#[test]
fn a_corpus_shipped_as_train_and_test_files_reads_as_its_own_splits_with_its_label_names() {
    let dir = tempfile::tempdir().unwrap();
    tsv_corpus(dir.path());
    let out = dir.path().join("out");
    // Relative to the pipeline file's folder, as `path` is.
    let p = pipeline(dir.path(), "{ type: csv, splits: { train: train.tsv, test: test.tsv } }", &out);
    let o = run(&p);
    assert_ok(&o);
    assert_reconciles(&out);
    let err = stderr(&o);
    assert!(err.contains("label from column `label`, id from column `id`"), "{err}");
    assert!(err.contains("labels negative=0, neutral=1, positive=2"), "{err}");
    // The corpus's own test set, every row labelled by name in sorted order.
    let want = |split: &str, n: usize| -> Vec<(String, Option<i64>)> {
        (0..n).map(|i| (format!("{split}-{i}"), Some([2, 1, 0][i % 3]))).collect()
    };
    assert_eq!(rows(&out, "train"), want("train", 12));
    assert_eq!(rows(&out, "test"), want("test", 6));
    let m = common::manifest(&out);
    assert_eq!(m["id2label"], serde_json::json!({"0": "negative", "1": "neutral", "2": "positive"}));
    let files = |split: &str| {
        m["source_files"][split].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(files("train"), [dir.path().join("train.tsv").display().to_string()]);
    assert_eq!(files("test"), [dir.path().join("test.tsv").display().to_string()]);
    assert!(m["config"]["source"].get("label_map").is_none_or(|v| v.is_null()), "the configuration stays as written");

    // `stats` on the pipeline, and on the bare folder with the splits set, shows the names.
    for args in [
        vec!["stats", p.to_str().unwrap(), "--by", "label", "--json"],
        vec![
            "stats",
            dir.path().to_str().unwrap(),
            "--set",
            "source.splits={train: train.tsv, test: test.tsv}",
            "--by",
            "label",
            "--json",
        ],
    ] {
        let o = bertpipe(&args);
        assert_ok(&o);
        let report = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(report.contains("\"neutral\"") && report.contains("\"test\""), "{args:?}: {report}");
    }

    // A label_map still wins; names and numbers mixed without one say what to do.
    let mapped = "{ type: csv, splits: { train: train.tsv, test: test.tsv }, label_map: { negative: 0, neutral: 1, positive: 2 } }";
    let o = run(&pipeline(dir.path(), mapped, &out));
    assert_ok(&o);
    assert!(!stderr(&o).contains("names in sorted order"), "{}", stderr(&o));
    std::fs::write(dir.path().join("test.tsv"), format!("id\ttext\tlabel\nt1\t{WORDS}\t1\nt2\t{WORDS}\tpositive\n"))
        .unwrap();
    let o = run(&pipeline(dir.path(), "{ type: csv, splits: { train: train.tsv, test: test.tsv } }", &out));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(
            "label column `label` holds names (`negative`, `neutral`, `positive`) and numbers (1): give a label_map"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn splits_take_globs_lists_and_folders_and_refuse_what_is_ambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("data/test")).unwrap();
    std::fs::create_dir_all(d.join("more")).unwrap();
    let write = |rel: &str, n: usize| {
        let lines: Vec<String> =
            (0..n).map(|i| format!(r#"{{"text": "{WORDS} {rel} {i}", "label": {}}}"#, i % 2)).collect();
        std::fs::write(d.join(rel), lines.join("\n") + "\n").unwrap();
    };
    write("data/train-1.jsonl", 3);
    write("data/train-0.jsonl", 2);
    write("data/test/a.jsonl", 2);
    write("data/test/b.jsonl", 1);
    write("more/train-0.jsonl", 1); // the same name as a file of data/: ids stay apart
    std::fs::write(d.join("more/export.json"), format!(r#"[{{"text": "{WORDS} array", "label": 1}}]"#)).unwrap();
    let out = d.join("out");
    let source = "{ type: jsonl, path: data, splits: { train: ['train-*.jsonl', ../more], test: test } }";
    let o = run(&pipeline(d, source, &out));
    assert_ok(&o);
    assert_reconciles(&out);
    let ids = |split: &str| rows(&out, split).into_iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(
        ids("train"),
        [
            "data/train-0.jsonl:1",
            "data/train-0.jsonl:2",
            "train-1.jsonl:1",
            "train-1.jsonl:2",
            "train-1.jsonl:3",
            "export.json:1",
            "more/train-0.jsonl:1"
        ]
    );
    assert_eq!(ids("test"), ["a.jsonl:1", "a.jsonl:2", "b.jsonl:1"]);
    assert_eq!(common::manifest(&out)["source_files"]["train"].as_array().unwrap().len(), 4);

    // Every problem of the configuration at once, located.
    let bad = "{ type: jsonl, split: validation, splits: { train: 'data/nothing-*.jsonl', test: data/gone.jsonl } }";
    let o = run(&pipeline(d, bad, &out));
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("p.yaml:2:"), "located: {err}");
    assert!(err.contains("give `split` or `splits`, not both"), "{err}");
    assert!(err.contains("split `train`: no file matches"), "{err}");
    assert!(err.contains("split `test`: '") && err.contains("gone.jsonl' does not exist"), "{err}");
    let twice = "{ type: jsonl, splits: { train: 'data/*.jsonl', test: data/train-0.jsonl } }";
    let o = run(&pipeline(d, twice, &out));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("train-0.jsonl' is listed twice (split `test` and split `train`)"), "{}", stderr(&o));
    let o = run(&pipeline(d, "{ type: jsonl }", &out));
    assert!(stderr(&o).contains("give `path` (a file or a folder of files) or `splits`"), "{}", stderr(&o));
}

#[test]
fn parquet_and_text_files_per_split() {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (split, n) in [("train", 5), ("validation", 3)] {
        let texts: Vec<String> = (0..n).map(|i| format!("{WORDS} {split} {i}")).collect();
        let labels: Vec<&str> = (0..n).map(|i| ["good", "bad"][i % 2]).collect();
        let batch = RecordBatch::try_from_iter([
            ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
            ("sentiment", Arc::new(StringArray::from(labels)) as ArrayRef),
        ])
        .unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(
            std::fs::File::create(d.join(format!("{split}.parquet"))).unwrap(),
            batch.schema(),
            None,
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        std::fs::write(d.join(format!("{split}.txt")), (0..n).map(|i| format!("{WORDS} {i}\n")).collect::<String>())
            .unwrap();
    }
    let out = d.join("out");
    let o =
        run(&pipeline(d, "{ type: parquet, splits: { train: train.parquet, validation: validation.parquet } }", &out));
    assert_ok(&o);
    assert!(
        stderr(&o).contains("label from column `sentiment`") && stderr(&o).contains("labels bad=0, good=1"),
        "{}",
        stderr(&o)
    );
    assert_eq!(rows(&out, "validation").iter().map(|r| r.1).collect::<Vec<_>>(), [Some(1), Some(0), Some(1)]);
    assert_eq!(rows(&out, "train").len(), 5);

    let o = run(&pipeline(d, "{ type: text, splits: { train: train.txt, validation: validation.txt } }", &out));
    assert_ok(&o);
    let m = common::manifest(&out);
    assert_eq!(
        (m["splits"]["train"]["docs_out"].as_u64(), m["splits"]["validation"]["docs_out"].as_u64()),
        (Some(5), Some(3))
    );
}

#[test]
fn a_run_over_files_per_split_resumes_to_the_bytes_of_an_unbroken_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rng = bertpipe::rng::Rng(21);
    for (name, n) in [("train-a.jsonl", 14), ("train-b.jsonl", 9), ("test.jsonl", 11)] {
        let lines: Vec<String> = (0..n)
            .map(|_| {
                let positive = rng.chance(0.5);
                let review = bertpipe::synth::review(&mut rng, Some(positive));
                serde_json::json!({"text": review, "label": if positive { "pos" } else { "neg" }}).to_string()
            })
            .collect();
        std::fs::write(d.join(name), lines.join("\n") + "\n").unwrap();
    }
    let source = "{ type: jsonl, splits: { train: 'train-*.jsonl', test: test.jsonl } }";
    let (clean, crashed) = (d.join("clean"), d.join("crashed"));
    let p = pipeline(d, source, &clean);
    assert_ok(&bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet", "--set", "sink.shard_rows=4"]));
    let out_set = format!("sink.path={}", crashed.display());
    let args = ["pipeline", "run", p.to_str().unwrap(), "--quiet", "--set", "sink.shard_rows=4", "--set", &out_set];
    let o = common::bertpipe_env(&args, &[("BERTPIPE_CRASH_AFTER_SHARDS", "3")]);
    assert!(!o.status.success(), "the crash hook must kill the run");
    let mut resume = args.to_vec();
    resume.push("--resume");
    assert_ok(&bertpipe(&resume));
    assert_reconciles(&crashed);
    common::assert_same_output(&clean, &crashed);
    assert_eq!(common::manifest(&crashed)["id2label"], serde_json::json!({"0": "neg", "1": "pos"}));
}
