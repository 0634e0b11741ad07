//! `bertpipe vocab train`: BERT-ordered specials, files the tokenize step accepts, coverage.

mod common;

use bertpipe::tokenize::{Tokenize, WordPiece};
use common::*;

#[test]
fn trains_a_vocabulary_the_pipeline_can_use() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("vocab");
    let o = bertpipe(&[
        "vocab",
        "train",
        "pipelines/imdb-clean.yaml",
        "--size",
        "600",
        "--min-frequency",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_ok(&o);
    let err = stderr(&o);
    assert!(err.contains("coverage on the same corpus") && err.contains("[UNK]"), "{err}");

    let vocab = std::fs::read_to_string(out.join("vocab.txt")).unwrap();
    let lines: Vec<&str> = vocab.lines().collect();
    assert_eq!(lines[..5], ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]);
    assert!(lines.len() <= 600 && lines.len() > 100, "{}", lines.len());
    assert!(lines.iter().any(|l| l.starts_with("##")), "WordPiece continuations expected");

    // vocab.txt and tokenizer.json give the same ids.
    let from_txt = WordPiece::from_vocab_file(&out.join("vocab.txt"), true, None, 100).unwrap();
    let step = Tokenize {
        vocab: None,
        tokenizer: Some(out.join("tokenizer.json")),
        lowercase: true,
        strip_accents: None,
        max_word_chars: 100,
        encoder: None,
        sentences: false,
    };
    let from_json = step.load().unwrap();
    let text = "Amélie is simply brilliant!!! I rated it 3 < 5, unlike Plan 9.";
    let (mut a, mut b) = (Vec::new(), Vec::new());
    from_txt.encode(text, &mut a);
    from_json.encode(text, &mut b);
    assert_eq!(a, b);
    assert!(!a.contains(&from_txt.specials.unk), "a word of the corpus is covered: {a:?}");

    // A pipeline tokenizes with it.
    let shards = tmp.path().join("shards");
    let vocab_set = format!("steps[6].vocab={}", out.join("vocab.txt").display());
    let o = run_pipeline("pipelines/imdb.yaml", &shards, &["--set", &vocab_set]);
    assert_ok(&o);
    let m = manifest(&shards);
    assert_eq!(m["tokenizer"]["vocab_sha256"].as_str().unwrap(), from_txt.vocab_sha256);
    assert_eq!(m["tokenizer"]["special_ids"]["cls"], 2);
    assert_eq!(m["tokenizer"]["special_ids"]["sep"], 3);
}

#[test]
fn bad_pipeline_is_a_configuration_error() {
    let tmp = tempfile::tempdir().unwrap();
    let o = bertpipe(&[
        "vocab",
        "train",
        "pipelines/imdb.yaml",
        "--set",
        "steps[0].typo=1",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(78));
    assert!(stderr(&o).contains("unknown field `typo`"), "{}", stderr(&o));
}

/// The same corpus gives the same vocabulary on every run and for any thread count (HF's own
/// `Tokenizer::train` does not: its word map has a random seed, which reorders the `##`
/// characters and so the ties between merges).
#[test]
fn the_same_corpus_gives_the_same_vocabulary_for_any_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let mut outputs = Vec::new();
    for (run, threads) in [(0, "1"), (1, "2"), (2, "2")] {
        let out = tmp.path().join(format!("vocab{run}"));
        let o = bertpipe(&[
            "vocab",
            "train",
            "pipelines/imdb-pretrain.yaml",
            "--size",
            "3000",
            "--threads",
            threads,
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_ok(&o);
        let vocab = std::fs::read(out.join("vocab.txt")).unwrap();
        let json = std::fs::read(out.join("tokenizer.json")).unwrap();
        outputs.push((vocab, json));
    }
    let lines = String::from_utf8(outputs[0].0.clone()).unwrap().lines().count();
    assert!(lines > 500, "a real vocabulary: {lines} tokens");
    for (i, o) in outputs.iter().enumerate().skip(1) {
        assert!(o.0 == outputs[0].0, "run {i}: vocab.txt differs from run 0");
        assert!(o.1 == outputs[0].1, "run {i}: tokenizer.json differs from run 0");
    }
}
