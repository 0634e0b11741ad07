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
    let step = Tokenize::of_file(&out.join("tokenizer.json"), true, None);
    let from_json = step.load().unwrap();
    let text = "Amélie is simply brilliant!!! I rated it 3 < 5, unlike Plan 9.";
    let (mut a, mut b) = (Vec::new(), Vec::new());
    from_txt.encode(text, &mut a);
    from_json.encode(text, &mut b).unwrap();
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

/// Past 1,000 distinct characters the trainer keeps the most frequent; which of those tied at
/// the cut-off it keeps is the same on every run (HF's own choice is random).
#[test]
fn the_alphabet_cut_is_the_same_on_every_run() {
    let tmp = tempfile::tempdir().unwrap();
    // 1,200 CJK characters, each once (all tied), and "ab" often enough to merge.
    let mut text: String = (0..1200u32).map(|i| char::from_u32(0x4E00 + i).unwrap()).collect();
    text.push('\n');
    text.push_str(&"ab abab ".repeat(50));
    text.push('\n');
    std::fs::write(tmp.path().join("in.txt"), text).unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p.yaml",
        &format!(
            "name: cjk\nsource: {{ type: text, path: {}, mode: lines, split: unsup }}\nsteps: []\nsink: {{ type: parquet, path: {} }}\n",
            tmp.path().join("in.txt").display(),
            tmp.path().join("out").display()
        ),
    );
    let mut vocabs = Vec::new();
    for run in 0..3 {
        let out = tmp.path().join(format!("v{run}"));
        let o = bertpipe(&[
            "vocab",
            "train",
            pipeline.to_str().unwrap(),
            "--size",
            "3000",
            "--min-frequency",
            "2",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_ok(&o);
        vocabs.push(std::fs::read_to_string(out.join("vocab.txt")).unwrap());
    }
    let cjk = vocabs[0].lines().filter(|l| l.chars().any(|c| ('\u{4E00}'..='\u{9FFF}').contains(&c))).count();
    assert!(cjk > 0 && cjk < 1200, "the alphabet was cut at 1,000 characters: {cjk} CJK tokens");
    assert!(vocabs.iter().all(|v| *v == vocabs[0]), "the vocabularies differ between runs");
}

/// A JSONL corpus whose label field holds names (`"label": "pos"`) trains a vocabulary: the
/// label names are found first, as a pipeline run finds them (every document used to be
/// rejected as an unknown label, and the vocabulary came out as the five specials).
#[test]
fn a_corpus_with_named_labels_trains_a_vocabulary() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("r.jsonl");
    let mut rng = bertpipe::rng::Rng(9);
    let lines: String = (0..200)
        .map(|i| {
            let text = bertpipe::synth::review(&mut rng, None);
            let label = ["neg", "pos"][i % 2];
            format!("{}\n", serde_json::json!({"text": text, "label": label}))
        })
        .collect();
    std::fs::write(&corpus, lines).unwrap();
    let p = tmp.path().join("p.yaml");
    std::fs::write(
        &p,
        format!(
            "name: q\nsource: {{ type: jsonl, path: {} }}\nsteps: []\nsink: {{ type: parquet, path: x }}\n",
            corpus.display()
        ),
    )
    .unwrap();
    let out = tmp.path().join("v");
    let o = bertpipe(&[
        "vocab",
        "train",
        p.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--size",
        "300",
        "--min-frequency",
        "1",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let tokens = std::fs::read_to_string(out.join("vocab.txt")).unwrap().lines().count();
    assert!(tokens > 100, "{tokens} tokens");
}
