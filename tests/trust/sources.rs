//! Sources: a `parquet` source over a bertpipe output folder (its shards, their label names,
//! not its rejects), JSONL line numbers after blank lines, and `splits:` entries whose names
//! hold glob characters.

use std::collections::BTreeMap;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;
use serde_json::json;

use crate::common::{
    all_rows, assert_ok, assert_reconciles, bertpipe, manifest, root, run_pipeline, stderr, strings, write_pipeline,
};

const WORDS: &str = "a film with a story worth telling and actors worth watching";

/// Every document row of an output (rejects aside): id → label.
fn labels_by_id(out: &Path) -> BTreeMap<String, Option<i64>> {
    let mut by_id = BTreeMap::new();
    for (folder, batch) in all_rows(out) {
        if folder == "_rejects" {
            continue;
        }
        let ids = batch.column_by_name("id").unwrap().as_string::<i32>().clone();
        let labels = batch.column_by_name("label").unwrap().as_primitive::<Int64Type>().clone();
        for i in 0..batch.num_rows() {
            by_id.insert(ids.value(i).to_string(), labels.is_valid(i).then(|| labels.value(i)));
        }
    }
    by_id
}

/// A `parquet` source pointed at a bertpipe output folder (manifest.json, `train/` and `test/`
/// shards, `_rejects/`) reads its shards with their labels and the names the manifest gives
/// them, and not its rejects: with `label_column: label` the label pass listed the folder's top
/// level only and failed ("no .parquet files"), and without it no label column was found (the
/// first shard was looked for at the top level too), so a classification run over the shards
/// warned that no document has a label.
#[test]
fn a_parquet_source_over_an_output_folder_reads_its_shards_labels_and_label_names() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for (split, n) in [("train", 6), ("test", 4)] {
        let mut lines: Vec<String> = (0..n)
            .map(|i| {
                let label = ["neg", "pos"][i % 2];
                format!(r#"{{"id": "{split}-{i}", "text": "{WORDS} {split} {i}", "label": "{label}"}}"#)
            })
            .collect();
        // A line that is not JSON: a reject, with its text, in `_rejects/`.
        lines.push("not json at all".into());
        std::fs::write(d.join(format!("{split}.jsonl")), lines.join("\n") + "\n").unwrap();
    }
    let first = d.join("first");
    let p = write_pipeline(
        d,
        "first.yaml",
        &format!(
            "name: first\nsource: {{ type: jsonl, splits: {{ train: train.jsonl, test: test.jsonl }} }}\nsteps:\n  - type: html_strip\nsink: {{ type: parquet, path: {}, shard_rows: 2 }}\n",
            first.display()
        ),
    );
    assert_ok(&run_pipeline(p.to_str().unwrap(), &first, &[]));
    let m = manifest(&first);
    assert_eq!(m["id2label"], json!({"0": "neg", "1": "pos"}), "{m}");
    assert_eq!(m["rejects"]["rows"], 2, "{m}");
    let want = labels_by_id(&first);
    assert_eq!(want.len(), 10);
    assert_eq!(want["train-1"], Some(1));

    let vocab = root().join("data/vocab/bert-base-uncased.txt");
    let classify = format!(
        "  - type: tokenize\n    vocab: {}\n    lowercase: true\n  - type: classify_sequences\n    max_len: 64\n",
        vocab.display()
    );
    // Found without being named (a classification run), and named.
    for (name, label_column, steps) in
        [("found", "", classify.as_str()), ("named", ", label_column: label", "  - type: html_strip\n")]
    {
        let out = d.join(name);
        let p = write_pipeline(
            d,
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nsource: {{ type: parquet, path: {}{label_column} }}\nsteps:\n{steps}sink: {{ type: parquet, path: {} }}\n",
                first.display(),
                out.display()
            ),
        );
        let o = bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--overwrite"]);
        assert_ok(&o);
        let err = stderr(&o);
        assert!(err.contains("labels neg=0, pos=1 (names from '"), "{name}: {err}");
        assert!(!err.contains("no document has a label"), "{name}: {err}");
        let m = manifest(&out);
        assert_eq!(m["id2label"], json!({"0": "neg", "1": "pos"}), "{name}: {m}");
        assert!(m.get("warnings").is_none(), "{name}: {m}");
        // Every document of the shards once (their own ids), none of the rejects.
        let docs_in: u64 = m["splits"].as_object().unwrap().values().map(|s| s["docs_in"].as_u64().unwrap()).sum();
        assert_eq!(docs_in, 10, "{name}: {m}");
        assert_eq!(labels_by_id(&out), want, "{name}");
        assert_reconciles(&out);
    }
}

/// JSONL ids and reject origins are the file's own line numbers, blank lines before the first
/// record counted: the check for a leading `[` consumed them uncounted, so a bad line 4 after
/// two blank lines was reported as line 2 (and ids, which key split fractions and dedup, were
/// off by two).
#[test]
fn jsonl_ids_and_reject_origins_count_leading_blank_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let data = d.join("c.jsonl");
    std::fs::write(&data, format!("\n\n{{\"text\": \"{WORDS} one\"}}\nnot json\n\n{{\"text\": \"{WORDS} two\"}}\n"))
        .unwrap();
    let out = d.join("out");
    let p = write_pipeline(
        d,
        "p.yaml",
        &format!(
            "name: lines\nsource: {{ type: jsonl, path: {} }}\nsteps: []\nsink: {{ type: parquet, path: {} }}\n",
            data.display(),
            out.display()
        ),
    );
    assert_ok(&run_pipeline(p.to_str().unwrap(), &out, &[]));
    assert_eq!(strings(&out, "_rejects", "id"), ["c.jsonl:4"]);
    assert_eq!(strings(&out, "_rejects", "origin"), [format!("{}:4", data.display())]);
    assert_eq!(strings(&out, "train", "id"), ["c.jsonl:3", "c.jsonl:6"]);
    assert_reconciles(&out);
}

/// A `splits:` entry naming a file whose name holds `[` is that file, not a glob that matches
/// nothing (the run was refused: "no file matches"); a bracketed `[` in a glob matches itself.
#[test]
fn a_splits_entry_naming_a_file_with_brackets_is_that_file() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let docs = |n: usize, tag: &str| -> String {
        (0..n).map(|i| format!("{{\"text\": \"{WORDS} {tag} {i}\", \"label\": {}}}\n", i % 2)).collect()
    };
    std::fs::write(d.join("reviews[1].jsonl"), docs(3, "one")).unwrap();
    std::fs::write(d.join("reviews[2].jsonl"), docs(2, "two")).unwrap();
    std::fs::write(d.join("test.jsonl"), docs(2, "test")).unwrap();
    for (name, train, docs_in) in [("named", "reviews[1].jsonl", 3), ("escaped", "reviews[[]*].jsonl", 5)] {
        let out = d.join(name);
        let p = write_pipeline(
            d,
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nsource: {{ type: jsonl, splits: {{ train: '{train}', test: test.jsonl }} }}\nsteps: []\nsink: {{ type: parquet, path: {} }}\n",
                out.display()
            ),
        );
        assert_ok(&bertpipe(&["pipeline", "validate", p.to_str().unwrap()]));
        assert_ok(&run_pipeline(p.to_str().unwrap(), &out, &[]));
        let m = manifest(&out);
        assert_eq!(m["splits"]["train"]["docs_in"], docs_in, "{name}: {m}");
        assert_eq!(m["splits"]["test"]["docs_in"], 2, "{name}: {m}");
        let files: Vec<String> = m["source_files"]["train"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| Path::new(f.as_str().unwrap()).file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        let want: &[&str] =
            if name == "named" { &["reviews[1].jsonl"] } else { &["reviews[1].jsonl", "reviews[2].jsonl"] };
        assert_eq!(files, want, "{name}");
        assert_reconciles(&out);
    }
}

/// A CSV pipeline over `file` (its label column `label` with `neg`/`pos` named in a
/// label_map), writing `out`.
fn csv_pipeline(d: &Path, name: &str, file: &Path, out: &Path) -> std::path::PathBuf {
    write_pipeline(
        d,
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nsource: {{ type: csv, path: {}, label_column: label, label_map: {{ neg: 0, pos: 1 }} }}\nsteps: []\nsink: {{ type: parquet, path: {} }}\n",
            file.display(),
            out.display()
        ),
    )
}

/// CSV ids and reject origins are the line a record starts on, whatever ends the file's lines:
/// the parser's own count was one ahead after an LF-ended record (it has taken the `\n`) and
/// right after a CRLF one, so the same file with LF endings got other ids — and ids decide
/// splits and `duplicate_of`. Empty lines and a quoted field over two lines are counted. A
/// `bad_label` reject keeps the record as it was in the file, not its fields glued together
/// (`Awful just awfulWRONG`).
#[test]
fn csv_ids_are_the_records_own_lines_for_any_line_ending_and_rejects_keep_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let lines = [
        "text,label",
        &format!("{WORDS} one,pos"),
        "",
        &format!("\"{WORDS}\ntwo\",neg"),
        "\"Awful, just awful\",WRONG",
        &format!("{WORDS} three,pos"),
    ];
    let mut seen = Vec::new();
    for (ending, eol) in [("lf", "\n"), ("crlf", "\r\n")] {
        let file = d.join(format!("{ending}.csv"));
        std::fs::write(&file, lines.join(eol) + eol).unwrap();
        let out = d.join(format!("out-{ending}"));
        let p = csv_pipeline(d, ending, &file, &out);
        assert_ok(&run_pipeline(p.to_str().unwrap(), &out, &[]));
        let ids: Vec<String> = strings(&out, "train", "id").iter().map(|i| i.replace(ending, "F")).collect();
        assert_eq!(ids, ["F.csv:2", "F.csv:4", "F.csv:7"], "{ending}");
        assert_eq!(strings(&out, "_rejects", "origin"), [format!("{}:6", file.display())], "{ending}");
        assert_eq!(strings(&out, "_rejects", "text"), ["\"Awful, just awful\",WRONG"], "{ending}");
        assert!(strings(&out, "_rejects", "reason")[0].starts_with("bad_label:"), "{ending}");
        assert_reconciles(&out);
        seen.push(ids);
    }
    assert_eq!(seen[0], seen[1], "LF and CRLF give the same ids");
}

/// Writes `dir/NAME.parquet`: a `text` column and `label` as given, with `metadata`
/// (key → value) in the file's key-value metadata.
fn parquet_file(dir: &Path, name: &str, label: arrow_array::ArrayRef, metadata: &[(&str, &str)]) -> std::path::PathBuf {
    use std::sync::Arc;
    let n = label.len();
    let text: arrow_array::ArrayRef =
        Arc::new(arrow_array::StringArray::from((0..n).map(|i| format!("{WORDS} {i}")).collect::<Vec<_>>()));
    let batch = arrow_array::RecordBatch::try_from_iter([("text", text), ("label", label)]).unwrap();
    let kv: Vec<parquet::file::metadata::KeyValue> =
        metadata.iter().map(|(k, v)| parquet::file::metadata::KeyValue::new(k.to_string(), v.to_string())).collect();
    let props = parquet::file::properties::WriterProperties::builder().set_key_value_metadata(Some(kv)).build();
    let path = dir.join(format!("{name}.parquet"));
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(props))
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    path
}

/// Runs a `parquet` source over `file` with `label_column: label` into `dir/out-NAME`.
fn run_parquet(d: &Path, name: &str, file: &Path) -> (std::path::PathBuf, String) {
    let out = d.join(format!("out-{name}"));
    let p = write_pipeline(
        d,
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nsource: {{ type: parquet, path: {}, label_column: label }}\nsteps: []\nsink: {{ type: parquet, path: {} }}\n",
            file.display(),
            out.display()
        ),
    );
    let o = bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--overwrite"]);
    assert_ok(&o);
    (out, stderr(&o))
}

/// The labels of a Parquet column as pandas and `datasets` write them: float64 (pandas, for an
/// integer column with a missing value) gives whole floats as ids and NaN as a `bad_label`
/// reject; a dictionary (pandas `Categorical`) gives its values' names; integer ids with HF
/// `datasets`' ClassLabel names in the file's metadata keep those names. Before, every label of
/// the first two came out null (with a warning to name the label field the user had named) and
/// the ClassLabel names were ignored.
#[test]
fn parquet_labels_as_pandas_and_datasets_write_them() {
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let by_row = |out: &Path| -> Vec<(String, Option<i64>)> { labels_by_id(out).into_iter().collect::<Vec<_>>() };

    let floats = Arc::new(arrow_array::Float64Array::from(vec![
        Some(0.0),
        Some(1.0),
        Some(f64::NAN),
        Some(1.0),
        None,
        Some(2.5),
    ]));
    let f = parquet_file(d, "floats", floats, &[]);
    let (out, err) = run_parquet(d, "floats", &f);
    let got = by_row(&out);
    let name = |row: usize| format!("floats.parquet:{row}");
    assert_eq!(got, vec![(name(1), Some(0)), (name(2), Some(1)), (name(4), Some(1)), (name(5), None)], "{err}");
    let reasons = strings(&out, "_rejects", "reason");
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].starts_with("bad_label:") && reasons[0].contains("NaN"), "{reasons:?}");
    assert!(reasons[1].starts_with("bad_label:") && reasons[1].contains("2.5"), "{reasons:?}");
    assert_reconciles(&out);

    let keys = arrow_array::Int8Array::from(vec![1, 0, 1, 1]);
    let values = Arc::new(arrow_array::StringArray::from(vec!["neg", "pos"]));
    let dict = Arc::new(arrow_array::DictionaryArray::try_new(keys, values).unwrap());
    let f = parquet_file(d, "categorical", dict, &[]);
    let (out, err) = run_parquet(d, "categorical", &f);
    assert!(err.contains("labels neg=0, pos=1"), "{err}");
    let labels: Vec<Option<i64>> = by_row(&out).into_iter().map(|(_, l)| l).collect();
    assert_eq!(labels, [Some(1), Some(0), Some(1), Some(1)]);
    assert_eq!(manifest(&out)["id2label"], json!({"0": "neg", "1": "pos"}));

    // `datasets`' ClassLabel, names not in sorted order: the ids keep their names.
    let hf = r#"{"info": {"features": {"text": {"dtype": "string", "_type": "Value"}, "label": {"names": ["pos", "neg"], "_type": "ClassLabel"}}}}"#;
    let ids = Arc::new(arrow_array::Int64Array::from(vec![0, 1, 1, 0]));
    let f = parquet_file(d, "classlabel", ids, &[("huggingface", hf)]);
    let (out, err) = run_parquet(d, "classlabel", &f);
    assert!(err.contains("labels pos=0, neg=1 (names from the files' HF `datasets` ClassLabel)"), "{err}");
    assert_eq!(manifest(&out)["id2label"], json!({"0": "pos", "1": "neg"}));
    let labels: Vec<Option<i64>> = by_row(&out).into_iter().map(|(_, l)| l).collect();
    assert_eq!(labels, [Some(0), Some(1), Some(1), Some(0)]);
}
