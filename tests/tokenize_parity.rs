//! Token ids identical to HF: the golden fixture from HF's Python tokenizers
//! (scripts/make_golden_tokens.py), the whole bundled sample and random text against the
//! `tokenizers` crate as the reference.

use std::path::PathBuf;

use bertpipe::tokenize::WordPiece;
use tokenizers::Tokenizer;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn vocab() -> PathBuf {
    root().join("data/vocab/bert-base-uncased.txt")
}

fn ours(lowercase: bool) -> WordPiece {
    WordPiece::from_vocab_file(&vocab(), lowercase, None, 100).unwrap()
}

fn encode(w: &WordPiece, text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    w.encode(text, &mut out);
    out
}

/// HF's BertWordPieceTokenizer, built from the crate's parts.
fn reference(lowercase: bool) -> Tokenizer {
    bertpipe::tokenize::hf_bert_tokenizer(&vocab(), lowercase).unwrap()
}

#[test]
fn golden_fixture_from_hf_python() {
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("tests/fixtures/golden_wordpiece.json")).unwrap())
            .unwrap();
    let (uncased, cased) = (ours(true), ours(false));
    assert_eq!(fixture["vocab_sha256"].as_str().unwrap(), uncased.vocab_sha256, "fixture made with another vocab");
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() > 50);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = |k: &str| case[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect::<Vec<_>>();
        assert_eq!(encode(&uncased, text), want("uncased"), "uncased: {text:?}");
        assert_eq!(encode(&cased, text), want("cased"), "cased: {text:?}");
    }
}

#[test]
fn whole_sample_matches_the_tokenizers_crate() {
    let (w, hf) = (ours(true), reference(true));
    let mut files = 0;
    let mut tokens = 0;
    for split in ["train", "test"] {
        for label in ["neg", "pos", "unsup"] {
            let Ok(dir) = std::fs::read_dir(root().join("data/aclImdb-sample").join(split).join(label)) else {
                continue;
            };
            for f in dir {
                let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
                let want = hf.encode(text.as_str(), false).unwrap().get_ids().to_vec();
                assert_eq!(encode(&w, &text), want, "{text:?}");
                files += 1;
                tokens += want.len();
            }
        }
    }
    assert_eq!(files, 750);
    assert!(tokens > 100_000);
}

#[test]
fn random_text_matches_the_tokenizers_crate() {
    // Pieces chosen to collide: ASCII words and punctuation, accents, combining marks, CJK,
    // emoji, controls, odd whitespace, special tokens, long runs.
    const PIECES: &[&str] = &[
        "the",
        "movie",
        "un",
        "##",
        "believ",
        "able",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        ".",
        "!",
        "?",
        "'",
        "\"",
        ",",
        "-",
        "[",
        "]",
        "[SEP]",
        "[CLS]",
        "[MASK]",
        "é",
        "e\u{301}",
        "\u{301}",
        "ñ",
        "Ø",
        "ß",
        "İ",
        "Σ",
        "ς",
        "東",
        "京",
        "タ",
        "한",
        "😀",
        "👍🏽",
        "\u{200b}",
        "\u{feff}",
        "\u{0}",
        "\u{7}",
        "\u{b}",
        "\u{85}",
        "\u{a0}",
        "\u{3000}",
        "…",
        "—",
        "«",
        "¿",
        "½",
        "²",
        "ﬁ",
        "Ａ",
        "\u{f900}",
        "\u{37e}",
        "x",
        "zq",
        "aaaaaaaaaaaaaaaaaaaaaaaaa",
        "123",
        "1,000",
        "$",
        "%",
        "@",
        "#",
        "~",
        "^",
        "\u{1d165}",
        "\u{1d16d}",
        "\u{fffd}",
        "\u{e000}",
        "Ǆ",
        "ǅ",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for lowercase in [true, false] {
        let (w, hf) = (ours(lowercase), reference(lowercase));
        for _ in 0..3000 {
            let len = next(40);
            let text: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
            let want = hf.encode(text.as_str(), false).unwrap().get_ids().to_vec();
            assert_eq!(encode(&w, &text), want, "lowercase {lowercase}: {text:?}");
        }
    }
}

#[test]
fn tokenizer_json_loads_and_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    reference(true).save(&path, false).unwrap();
    let step = bertpipe::tokenize::Tokenize::of_file(&path, true, None);
    let enc = step.load().unwrap();
    assert_eq!(enc.info().encoder, "wordpiece", "a BERT tokenizer.json takes the fast path");
    let text = "Crème brûlée [SEP] 東京 don't!!";
    let mut got = Vec::new();
    enc.encode(text, &mut got).unwrap();
    assert_eq!(got, reference(true).encode(text, false).unwrap().get_ids());
}

/// A BERT tokenizer.json takes the WordPiece fast path but keeps its own post-processor's
/// sequence layout: with ModernBERT's pair template (`[CLS] A [SEP] B [SEP]`, all type 0) a
/// pair's second segment is not given token type 1, so ModernBERT trains on its shards; with
/// BERT's template it is. Without a post-processor, BERT's layout.
#[test]
fn a_fast_path_tokenizer_json_keeps_its_own_pair_template() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    reference(true).save(&path, false).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let load = |json: &serde_json::Value| {
        std::fs::write(&path, serde_json::to_string(json).unwrap()).unwrap();
        let step = bertpipe::tokenize::Tokenize::of_file(&path, true, None);
        let info = step.load().unwrap().info();
        assert_eq!(info.encoder, "wordpiece", "the fast path");
        info.special_ids
    };
    json["post_processor"] = serde_json::Value::Null;
    let plain = load(&json);
    assert!(plain.pair_type_ids && plain.pair_separators == 1);
    let (cls, sep) = (plain.cls, plain.sep);
    for second_type in [0, 1] {
        json["post_processor"] = serde_json::json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": second_type}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": second_type}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}}
        });
        let s = load(&json);
        assert_eq!(s.pair_type_ids, second_type == 1, "pair template with B of type {second_type}");
        assert_eq!((s.cls, s.sep, s.pad, s.mask, s.pair_separators), (cls, sep, plain.pad, plain.mask, 1));
    }
}

/// A `vocab.txt` is read as HF's `WordPiece::read_file` reads it: each line without trailing
/// whitespace, and a token listed twice keeps its last id (the earlier id is no token's, as is
/// a blank line's).
#[test]
fn vocab_txt_lines_and_repeated_tokens_read_as_hf_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.txt");
    let lines = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the ", "film\t\r", "##s", "the", "##s", "film", "good",
        "##ly  ", "bad", "##ly", "", "thes",
    ];
    std::fs::write(&path, lines.join("\n") + "\r\n").unwrap();
    let w = WordPiece::from_vocab_file(&path, true, None, 100).unwrap();
    // HF's own reading of the file (its WordPiece::from_file), not ours.
    let hf = bertpipe::tokenize::hf_bert_tokenizer(&path, true).unwrap();
    for text in ["the films good", "goodly badly the", "films the film thes"] {
        assert_eq!(encode(&w, text), hf.encode(text, false).unwrap().get_ids(), "{text:?}");
    }
    assert_eq!(encode(&w, "the films badly"), vec![8, 10, 9, 13, 14]);
    // One vocabulary, whichever file: the tokenizer.json HF saves for it has the same identity.
    let json = dir.path().join("tokenizer.json");
    hf.save(&json, false).unwrap();
    let defaults = bertpipe::tokenize::TokenizerConfig::default();
    let from_json = bertpipe::tokenize::file_vocab(&json, &defaults).unwrap();
    let from_txt = bertpipe::tokenize::file_vocab(&path, &defaults).unwrap();
    assert_ne!(from_json.sha256, from_txt.sha256);
    assert_eq!(from_json.id, from_txt.id);
    assert_eq!(from_txt.id.as_deref(), Some(w.vocab_id.as_str()));
}

/// A tokenizer.json whose ids are far beyond its token count would make every table indexed by
/// id (and a model's embeddings) that large: refused by name before anything is allocated.
#[test]
fn a_tokenizer_json_with_an_absurd_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tokenizer.json");
    reference(true).save(&json, false).unwrap();
    let text = std::fs::read_to_string(&json).unwrap().replace("\"[MASK]\":103", "\"[MASK]\":4000000000");
    assert!(text.contains("4000000000"));
    std::fs::write(&json, text).unwrap();
    let err = format!("{:#}", bertpipe::tokenize::file_vocab(&json, &Default::default()).unwrap_err());
    assert!(err.contains("tokenizer.json") && err.contains("4000000000"), "{err}");
}
