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
