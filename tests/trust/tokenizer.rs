//! Defect 1: a `tokenizer.json` saved with `truncation` and `padding` (many on the Hub are)
//! encodes documents to their full length, as transformers does, not cut at the saved length.

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::Array;

use crate::common::*;

fn rows(out: &Path) -> Vec<Vec<i32>> {
    let mut rows = Vec::new();
    for shard in shard_files(&out.join("train")) {
        for batch in read_parquet(&shard) {
            let list = batch.column_by_name("input_ids").unwrap().as_list::<i32>();
            rows.extend((0..list.len()).map(|i| list.value(i).as_primitive::<Int32Type>().values().to_vec()));
        }
    }
    rows
}

fn pipeline(dir: &Path, name: &str, tokenizer: &Path) -> PathBuf {
    let yaml = format!(
        "name: {name}\nseed: 7\nsource:\n  type: aclimdb\n  path: {data}\n  splits: [train]\n  labels: [neg, pos]\nsteps:\n  - type: html_strip\n  - type: tokenize\n    tokenizer: {tok}\n  - type: classify_sequences\n    max_len: 512\nsink:\n  type: parquet\n  path: {out}\n",
        data = root().join("data/aclImdb-sample").display(),
        tok = tokenizer.display(),
        out = dir.join(name).display(),
    );
    write_pipeline(dir, &format!("{name}.yaml"), &yaml)
}

#[test]
fn a_tokenizer_saved_with_truncation_and_padding_encodes_whole_documents() {
    let dir = tempfile::tempdir().unwrap();
    for family in ["roberta", "modernbert"] {
        let plain = root().join("tests/fixtures/tokenizers").join(family).join("tokenizer.json");
        let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&plain).unwrap()).unwrap();
        let pad = json["added_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["content"] == "<pad>" || t["content"] == "[PAD]")
            .unwrap()
            .clone();
        json["truncation"] =
            serde_json::json!({"direction": "Right", "max_length": 64, "strategy": "LongestFirst", "stride": 0});
        json["padding"] = serde_json::json!({
            "strategy": {"Fixed": 80}, "direction": "Right", "pad_to_multiple_of": null,
            "pad_id": pad["id"], "pad_type_id": 0, "pad_token": pad["content"]
        });
        let saved = dir.path().join(format!("{family}-saved.json"));
        std::fs::write(&saved, serde_json::to_vec(&json).unwrap()).unwrap();

        let (a, b) = (format!("{family}-plain"), format!("{family}-saved"));
        for (name, tok) in [(&a, &plain), (&b, &saved)] {
            let p = pipeline(dir.path(), name, tok);
            assert_ok(&bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet"]));
        }
        let (want, got) = (rows(&dir.path().join(&a)), rows(&dir.path().join(&b)));
        assert!(want.iter().any(|r| r.len() > 100), "{family}: the sample has long reviews");
        assert_eq!(got, want, "{family}: the saved truncation/padding changed the rows");
        let m = manifest(&dir.path().join(&b));
        assert_eq!(m["tokenizer"]["special_ids"]["pad"], pad["id"], "{family}: the pad token still named");
    }
}
