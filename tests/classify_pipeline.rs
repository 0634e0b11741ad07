//! `pipelines/imdb.yaml` end to end: BERT-ready shards that verify and read back, every
//! truncation mode through the binary, and the reader's refusals.

mod common;

use bertpipe::contract::manifest::VocabRef;
use bertpipe::shards::ShardSet;
use bertpipe::tokenize::WordPiece;
use common::*;

fn run_imdb(out: &std::path::Path, extra: &[&str]) {
    assert_ok(&run_pipeline("pipelines/imdb.yaml", out, extra));
}

fn vocab() -> WordPiece {
    WordPiece::from_vocab_file(&root().join("data/vocab/bert-base-uncased.txt"), true, None, 100).unwrap()
}

#[test]
fn imdb_yaml_makes_bert_ready_shards_that_verify_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("imdb");
    run_imdb(&out, &[]);
    assert_reconciles(&out);
    let m = manifest(&out);
    assert_eq!(m["task"], "classify");
    assert_eq!(m["max_len"], 512);
    let tok = &m["tokenizer"];
    assert_eq!(tok["vocab_size"], 30522);
    assert_eq!(tok["special_ids"]["cls"], 101);
    assert_eq!(tok["special_ids"]["sep"], 102);
    assert_eq!(tok["lowercase"], true);
    let t = &m["splits"]["train"]["tokenization"];
    assert!(t["document_tokens"].as_u64().unwrap() > t["docs_over_max_len"].as_u64().unwrap());
    assert!(t["unk_rate"].as_f64().unwrap() < 0.01);

    let shards = ShardSet::open(&out).unwrap();
    shards.verify().unwrap();
    let w = vocab();
    let theirs = VocabRef { sha256: "another file".into(), id: Some(w.vocab_id.clone()) };
    shards.expect_vocab(&theirs, "the test vocabulary").unwrap();
    let (w, mut n, mut tokens) = (vocab(), 0, 0u64);
    for row in shards.rows("train").unwrap() {
        let row = row.unwrap();
        assert!(row.input_ids.len() <= 512 && row.input_ids.len() >= 3);
        assert_eq!((row.input_ids[0], *row.input_ids.last().unwrap()), (101, 102));
        assert!(row.token_type_ids.iter().all(|&t| t == 0) && row.token_type_ids.len() == row.input_ids.len());
        assert!(row.label == Some(0) || row.label == Some(1));
        n += 1;
        tokens += row.input_ids.len() as u64;
    }
    assert_eq!(n, m["splits"]["train"]["rows"].as_u64().unwrap());
    assert_eq!(tokens, m["splits"]["train"]["tokens"].as_u64().unwrap());

    // The ids are the tokenizer's ids for the cleaned text: rerun keeping the text and compare.
    let with_text = tmp.path().join("with-text");
    run_imdb(
        &with_text,
        &["--set", "sink.keep_text=true", "--set", "steps[7].truncation=head", "--set", "steps[7].max_len=100000"],
    );
    let texts = strings(&with_text, "train", "text");
    let first = ShardSet::open(&with_text).unwrap().rows("train").unwrap().next().unwrap().unwrap();
    let mut ids = Vec::new();
    w.encode(&texts[0], &mut ids);
    assert_eq!(first.input_ids[1..first.input_ids.len() - 1], ids.iter().map(|&i| i as i32).collect::<Vec<_>>()[..]);
}

#[test]
fn window_mode_covers_documents_with_chunk_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("win");
    run_imdb(
        &out,
        &["--set", "steps[7]={type: classify_sequences, max_len: 128, truncation: window, window_stride: 100}"],
    );
    assert_reconciles_rows(&out);
    let shards = ShardSet::open(&out).unwrap();
    let rows: Vec<_> = shards.rows("train").unwrap().map(Result::unwrap).collect();
    let m = manifest(&out);
    let t = &m["splits"]["train"]["tokenization"];
    assert_eq!(t["tokens_dropped"], 0, "windows drop nothing");
    assert!(t["rows_per_doc_max"].as_u64().unwrap() > 1);
    // Per document: chunks 0..num_chunks in order, each ≤ 128; window k starts at token
    // 100·k, every window but the last is full, and the last ends at the document's end — so
    // the document lengths add up to the manifest's token count.
    let mut i = 0;
    let (mut docs, mut doc_tokens) = (0u64, 0u64);
    while i < rows.len() {
        let n = rows[i].num_chunks.unwrap() as usize;
        let doc = rows[i].doc_id.clone().unwrap();
        for k in 0..n {
            let r = &rows[i + k];
            assert_eq!((r.doc_id.as_deref(), r.chunk), (Some(doc.as_str()), Some(k as i32)));
            assert_eq!(r.id, format!("{doc}#{k}"));
            assert!(r.input_ids.len() <= 128);
            if k + 1 < n {
                assert_eq!(r.input_ids.len(), 128, "{doc} window {k} is not full");
            }
        }
        doc_tokens += (100 * (n - 1) + rows[i + n - 1].input_ids.len() - 2) as u64;
        i += n;
        docs += 1;
    }
    assert_eq!(docs, m["splits"]["train"]["docs_out"].as_u64().unwrap());
    assert_eq!(doc_tokens, t["document_tokens"].as_u64().unwrap(), "windows cover every token");
}

/// Rows may outnumber documents with windows; documents still reconcile.
fn assert_reconciles_rows(out: &std::path::Path) {
    let m = manifest(out);
    for (split, s) in m["splits"].as_object().unwrap() {
        let rejected: u64 = s["rejected"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(s["docs_in"].as_u64().unwrap(), s["docs_out"].as_u64().unwrap() + rejected, "{split}");
        assert!(s["rows"].as_u64().unwrap() >= s["docs_out"].as_u64().unwrap());
    }
}

#[test]
fn every_truncation_mode_respects_max_len() {
    let tmp = tempfile::tempdir().unwrap();
    for mode in ["head", "tail", "head_tail"] {
        let out = tmp.path().join(mode);
        run_imdb(
            &out,
            &[
                "--set",
                &format!("steps[7].truncation={mode}"),
                "--set",
                "steps[7].max_len=64",
                "--set",
                "steps[7].head_tokens=20",
            ],
        );
        let m = manifest(&out);
        let t = &m["splits"]["test"]["tokenization"];
        assert!(t["docs_over_max_len"].as_u64().unwrap() > 100, "{mode}: most reviews exceed 62 tokens");
        let rows: Vec<_> = ShardSet::open(&out).unwrap().rows("test").unwrap().map(Result::unwrap).collect();
        assert!(rows.iter().all(|r| r.input_ids.len() <= 64), "{mode}");
        assert_eq!(
            rows.len() as u64,
            m["splits"]["test"]["docs_out"].as_u64().unwrap(),
            "{mode}: one row per document"
        );
        let dropped: u64 = t["tokens_dropped"].as_u64().unwrap();
        let kept: u64 = rows.iter().map(|r| r.input_ids.len() as u64 - 2).sum();
        assert_eq!(kept + dropped, t["document_tokens"].as_u64().unwrap(), "{mode}: kept + dropped = all");
    }
}

#[test]
fn reader_refuses_damaged_or_foreign_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("imdb");
    run_imdb(&out, &["--set", "sink.shard_rows=100"]);
    let shards = ShardSet::open(&out).unwrap();
    let other = VocabRef { sha256: "0".repeat(64), id: Some("1".repeat(64)) };
    let e = shards.expect_vocab(&other, "another vocabulary").unwrap_err().to_string();
    assert!(e.contains("vocab mismatch") && e.contains(&"1".repeat(64)), "{e}");
    // An old model that recorded only its file's hash is compared by that.
    let old = VocabRef { sha256: vocab().vocab_sha256, id: None };
    shards.expect_vocab(&old, "an older model").unwrap();

    let victim = out.join("train/part-00001.parquet");
    let mut bytes = std::fs::read(&victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xFF;
    std::fs::write(&victim, &bytes).unwrap();
    let e = ShardSet::open(&out).unwrap().verify().unwrap_err().to_string();
    assert!(e.contains("checksum mismatch") && e.contains("train/part-00001.parquet"), "{e}");

    std::fs::remove_file(&victim).unwrap();
    let e = ShardSet::open(&out).err().unwrap().to_string();
    assert!(e.contains("train/part-00001.parquet") && e.contains("missing"), "{e}");
}

#[test]
fn tokenize_config_errors_are_located() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = std::fs::read_to_string(root().join("pipelines/imdb.yaml")).unwrap();
    let yaml = yaml.replace("../data", &root().join("data").display().to_string());
    let bad = yaml.replace("bert-base-uncased.txt", "nope.txt").replace("head_tokens: 128", "head_tokens: 600");
    let p = write_pipeline(tmp.path(), "bad.yaml", &bad);
    let o = bertpipe(&["pipeline", "validate", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(78));
    let err = stderr(&o);
    assert!(
        err.contains("bad.yaml:23:12: steps[6] (tokenize).vocab: '") && err.contains("nope.txt' does not exist"),
        "{err}"
    );
    assert!(
        err.contains("bad.yaml:28:18: steps[7] (classify_sequences).head_tokens: 600 is more than max_len − 2 = 510"),
        "{err}"
    );
}

#[test]
fn classification_shards_do_not_depend_on_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("t1"), tmp.path().join("t3"));
    run_imdb(&a, &["--threads", "1", "--set", "sink.shard_rows=128"]);
    run_imdb(&b, &["--threads", "3", "--set", "sink.shard_rows=128"]);
    assert_same_output(&a, &b);
}

#[test]
fn a_broken_vocabulary_fails_before_any_output_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let vocab = tmp.path().join("vocab.txt");
    std::fs::write(&vocab, "hello\nworld\n").unwrap();
    let out = tmp.path().join("out");
    let o = run_pipeline("pipelines/imdb.yaml", &out, &["--set", &format!("steps[6].vocab={}", vocab.display())]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("vocab.txt") && err.contains("[PAD]"), "{err}");
    assert!(!out.exists(), "nothing written before the vocabulary loaded");
}
