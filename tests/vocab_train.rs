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
