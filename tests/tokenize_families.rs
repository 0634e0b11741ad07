//! Any HF `tokenizer.json`: RoBERTa (byte-level BPE, `<s> A </s></s> B </s>`), ModernBERT
//! (byte-level BPE, `[CLS] A [SEP]`, no token types) and XLM-R (SentencePiece Unigram) shaped
//! tokenizers give HF `AutoTokenizer`'s ids, specials, pair layout and words
//! (tests/fixtures/golden_tokenizers.json, scripts/make_tokenizer_families.py); pipelines
//! tokenize, build classifier and pretraining rows and mask whole words with them.

mod common;

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int8Type};
use arrow_array::Array;
use bertpipe::tokenize::Encoder;
use common::*;
use serde_json::Value;

const FAMILIES: [&str; 3] = ["roberta", "modernbert", "xlmr"];

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("tests/fixtures/golden_tokenizers.json")).unwrap())
        .unwrap()
}

fn tokenizer_path(family: &str) -> PathBuf {
    root().join("tests/fixtures/tokenizers").join(family).join("tokenizer.json")
}

fn load(family: &str) -> Encoder {
    let t = bertpipe::tokenize::Tokenize::of_file(&tokenizer_path(family), true, None);
    t.load().unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn ids_specials_and_pair_layout_are_hfs() {
    let g = golden();
    for family in FAMILIES {
        let fam = &g["families"][family];
        let enc = load(family);
        assert!(matches!(enc, Encoder::Hf(_)), "{family}: not a WordPiece tokenizer");
        let info = enc.info();
        let sha = bertpipe::contract::checksum::sha256_file(&tokenizer_path(family)).unwrap();
        assert_eq!(fam["tokenizer_sha256"].as_str().unwrap(), sha, "{family}: fixture made from another file");
        let s = info.special_ids;
        let want = &fam["specials"];
        assert_eq!(
            [s.cls, s.sep, s.pad, s.unk, s.mask],
            ["cls_token", "sep_token", "pad_token", "unk_token", "mask_token"]
                .map(|k| want[k].as_u64().unwrap() as u32),
            "{family}: special ids"
        );
        let cases = fam["cases"].as_array().unwrap();
        assert!(cases.len() >= 40);
        for (i, case) in cases.iter().enumerate() {
            let text = case["text"].as_str().unwrap();
            let mut got = Vec::new();
            enc.encode(text, &mut got).unwrap();
            let want = ids(&case["ids"]);
            assert_eq!(got, want, "{family}: {text:?}");
            // One segment: cls A sep.
            let mut single = vec![s.cls];
            single.extend(&want);
            single.push(s.sep);
            assert_eq!(single, ids(&case["with_specials"]), "{family}: one segment of {text:?}");
            // A pair, with the next case as B: cls A sep… B sep, B typed as the tokenizer says.
            let b = ids(&cases[(i + 1) % cases.len()]["ids"]);
            if b.is_empty() {
                continue; // HF drops an empty B's separators
            }
            let mut pair = single.clone();
            pair.extend(std::iter::repeat_n(s.sep, s.pair_separators as usize - 1));
            let a_len = pair.len();
            pair.extend(&b);
            pair.push(s.sep);
            assert_eq!(pair, ids(&case["pair_ids"]), "{family}: pair starting {text:?}");
            let types = ids(&case["pair_type_ids"]);
            assert!(types[..a_len].iter().all(|&t| t == 0));
            assert!(types[a_len..].iter().all(|&t| t == s.pair_type_ids as u32), "{family}: pair type ids");
        }
        let expect_seps = if family == "modernbert" { 1 } else { 2 };
        assert_eq!(s.pair_separators, expect_seps, "{family}");
        assert!(!s.pair_type_ids, "{family}: no token types");
    }
}

/// Whole-word masking groups tokens into the tokenizer's own words (HF `word_ids()`): every
/// boundary of every case agrees.
#[test]
fn words_are_the_pre_tokenizers_words() {
    let g = golden();
    for family in FAMILIES {
        let enc = load(family);
        let words = enc.words();
        let s = enc.info().special_ids;
        let specials = [s.pad, s.unk, s.cls, s.sep, s.mask];
        let (mut boundaries, mut wrong) = (0, Vec::new());
        for case in g["families"][family]["cases"].as_array().unwrap() {
            let ids = ids(&case["ids"]);
            let word_ids: Vec<u64> = case["word_ids"].as_array().unwrap().iter().map(|w| w.as_u64().unwrap()).collect();
            for i in 1..ids.len() {
                if specials.contains(&ids[i - 1]) || specials.contains(&ids[i]) {
                    continue; // never masked (literal "<s>" in the text)
                }
                boundaries += 1;
                let same = word_ids[i] == word_ids[i - 1];
                if words.continues(&ids, i) != same {
                    let token = |id: u32| match &enc {
                        Encoder::Hf(h) => h.tokenizer().id_to_token(id).unwrap_or_default(),
                        Encoder::WordPiece(_) => id.to_string(),
                    };
                    wrong.push(format!("{:?} {:?} (same word: {same})", token(ids[i - 1]), token(ids[i])));
                }
            }
        }
        assert!(boundaries > 5000, "{family}: {boundaries}");
        assert!(
            wrong.is_empty(),
            "{family}: {} of {boundaries} token boundaries disagree with HF's word_ids, in {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(30)]
        );
    }
}

/// Pretraining encodes the whole text once and finds sentence ends by offsets: the same ids as
/// without sentences (a BPE sentence encoded alone would lose its first word's `Ġ`), ends
/// ascending, the last at the end.
#[test]
fn sentence_ends_do_not_change_the_ids() {
    let g = golden();
    for family in FAMILIES {
        let enc = load(family);
        let mut multi = 0;
        for case in g["families"][family]["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let (mut got, mut ends) = (Vec::new(), Vec::new());
            enc.encode_sentences(text, &mut got, &mut ends).unwrap();
            assert_eq!(got, ids(&case["ids"]), "{family}: {text:?}");
            if got.is_empty() {
                assert!(ends.is_empty());
                continue;
            }
            assert!(ends.windows(2).all(|w| w[0] < w[1]) && ends[0] > 0, "{family}: {ends:?}");
            assert_eq!(*ends.last().unwrap() as usize, got.len());
            multi += (ends.len() > 1) as usize;
        }
        assert!(multi >= 10, "{family}: only {multi} texts of several sentences");
    }
}

/// A pipeline YAML: the sample through cleaning and `tokenize` with `family`'s tokenizer.json,
/// then `tail` (the sequence step).
fn pipeline(dir: &Path, name: &str, family: &str, labels: &str, tail: &str) -> PathBuf {
    let yaml = format!(
        r#"name: {name}
seed: 7
source:
  type: aclimdb
  path: {data}
  splits: [train]
  labels: {labels}
steps:
  - type: html_strip
  - type: unicode_normalize
    form: nfc
  - type: tokenize
    tokenizer: {tok}
{tail}
sink:
  type: parquet
  path: {out}
  shard_rows: 400
"#,
        data = root().join("data/aclImdb-sample").display(),
        tok = tokenizer_path(family).display(),
        out = dir.join(name).display(),
    );
    write_pipeline(dir, &format!("{name}.yaml"), &yaml)
}

fn lists(out: &Path, column: &str) -> Vec<Vec<u32>> {
    let mut rows = Vec::new();
    for shard in shard_files(&out.join("train")) {
        for batch in read_parquet(&shard) {
            let list = batch.column_by_name(column).unwrap_or_else(|| panic!("no column {column}")).as_list::<i32>();
            for i in 0..list.len() {
                rows.push(list.value(i).as_primitive::<Int32Type>().values().iter().map(|&v| v as u32).collect());
            }
        }
    }
    rows
}

fn types(out: &Path) -> Vec<Vec<i8>> {
    let mut rows = Vec::new();
    for shard in shard_files(&out.join("train")) {
        for batch in read_parquet(&shard) {
            let list = batch.column_by_name("token_type_ids").unwrap().as_list::<i32>();
            for i in 0..list.len() {
                rows.push(list.value(i).as_primitive::<Int8Type>().values().to_vec());
            }
        }
    }
    rows
}

#[test]
fn classifier_rows_with_each_family() {
    let dir = tempfile::tempdir().unwrap();
    for family in FAMILIES {
        let tail = "  - type: classify_sequences\n    max_len: 64\n    truncation: head_tail";
        let p = pipeline(dir.path(), &format!("cls-{family}"), family, "[neg, pos]", tail);
        let out = dir.path().join(format!("cls-{family}"));
        assert_ok(&bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet"]));
        assert_reconciles(&out);
        let m = manifest(&out);
        let s = load(family).info().special_ids;
        assert_eq!(m["tokenizer"]["encoder"], "tokenizers", "{family}");
        assert_eq!(m["tokenizer"]["special_ids"]["cls"], s.cls, "{family}");
        let rows = lists(&out, "input_ids");
        assert!(rows.len() > 50);
        for row in &rows {
            assert!(row.len() <= 64 && row[0] == s.cls && *row.last().unwrap() == s.sep, "{family}: {row:?}");
            assert!(!row[1..row.len() - 1].contains(&s.cls), "{family}: a start token inside a row");
        }
    }
}

#[test]
fn pretraining_rows_pairs_packing_and_whole_word_masking_with_each_family() {
    let dir = tempfile::tempdir().unwrap();
    for family in FAMILIES {
        let s = load(family).info().special_ids;
        let words = load(family).words();
        for (variant, tail) in [
            ("nsp", "  - type: pretrain_sequences\n    max_len: 64\n    nsp: true\n    whole_word_mask: true"),
            ("packed", "  - type: pretrain_sequences\n    max_len: 64\n    nsp: false\n    masked_lm_prob: 0.3\n    whole_word_mask: true"),
        ] {
            let name = format!("pt-{family}-{variant}");
            let p = pipeline(dir.path(), &name, family, "[neg, pos, unsup]", tail);
            let out = dir.path().join(&name);
            assert_ok(&bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet"]));
            let m = manifest(&out);
            let frac = m["splits"]["train"]["pretraining"]["masked_fraction"].as_f64().unwrap();
            let want = if variant == "packed" { 0.3 } else { 0.15 };
            assert!((frac - want).abs() < 0.02, "{family} {variant}: masked {frac}");
            let (rows, pos, labels, tt) =
                (lists(&out, "input_ids"), lists(&out, "masked_lm_positions"), lists(&out, "masked_lm_ids"), types(&out));
            assert!(rows.len() > 20, "{family} {variant}: {} rows", rows.len());
            let specials = [s.pad, s.unk, s.cls, s.sep, s.mask];
            let mut cut_words = 0;
            for (((row, pos), labels), tt) in rows.iter().zip(&pos).zip(&labels).zip(&tt) {
                assert!(row.len() <= 64 && row[0] == s.cls && *row.last().unwrap() == s.sep);
                assert!(tt.iter().all(|&t| t == 0), "{family}: no token types");
                if variant == "nsp" {
                    // cls A sep sep B sep (RoBERTa, XLM-R) or cls A sep B sep (ModernBERT).
                    let first = row.iter().position(|&t| t == s.sep).unwrap();
                    let seps = row[first..].iter().take_while(|&&t| t == s.sep).count();
                    assert_eq!(seps as u32, s.pair_separators, "{family}: separators between A and B");
                }
                // Rebuild the unmasked row, then check each chosen word is chosen whole.
                let mut orig = row.clone();
                for (&p, &l) in pos.iter().zip(labels) {
                    assert!(!specials.contains(&l), "{family}: a special token was masked");
                    orig[p as usize] = l;
                }
                let chosen: std::collections::HashSet<u32> = pos.iter().copied().collect();
                for &p in pos {
                    let p = p as usize;
                    let next_joins = p + 1 < orig.len()
                        && !specials.contains(&orig[p + 1])
                        && words.continues(&orig, p + 1);
                    if next_joins && !chosen.contains(&(p as u32 + 1)) {
                        cut_words += 1;
                    }
                }
            }
            assert_eq!(cut_words, 0, "{family} {variant}: words masked in part");
        }
    }
}

/// A tokenizer whose post-processor does not make `start A end` is refused by name, not
/// silently given BERT's layout.
#[test]
fn a_tokenizer_without_a_start_and_end_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(tokenizer_path("roberta")).unwrap()).unwrap();
    json["post_processor"] = Value::Null;
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
    let t = bertpipe::tokenize::Tokenize::of_file(&path, true, None);
    let err = format!("{:#}", t.load().unwrap_err());
    assert!(err.contains(&path.display().to_string()) && err.contains("post-processor makes `A`"), "{err}");
}

/// The crate's tokenizer runs on every worker: the bytes still do not depend on the thread
/// count (RoBERTa packed rows, static whole-word masking).
#[test]
fn bytes_do_not_depend_on_thread_count_with_a_bpe_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let tail = "  - type: pretrain_sequences\n    max_len: 64\n    nsp: false\n    whole_word_mask: true";
    let p = pipeline(dir.path(), "bpe", "roberta", "[neg, pos, unsup]", tail);
    let (a, b) = (dir.path().join("one"), dir.path().join("three"));
    for (out, threads) in [(&a, "1"), (&b, "3")] {
        let o = out.to_str().unwrap();
        let args = ["pipeline", "run", p.to_str().unwrap(), "--quiet", "--threads", threads, "--set"];
        assert_ok(&bertpipe(&[&args[..], &[&format!("sink.path={o}"), "--set", "sink.shard_rows=100"]].concat()));
    }
    assert!(shard_files(&a.join("train")).len() > 1, "several shards");
    assert_same_output(&a, &b);
}

/// A model trained on RoBERTa-tokenized shards carries the tokenizer as it came: its
/// `tokenizer.json` byte for byte and the `tokenizer_config.json` beside it (`RobertaTokenizer`,
/// so `AutoTokenizer` loads the checkpoint as that tokenizer), its length the shards'; without a
/// config beside the tokenizer, `PreTrainedTokenizerFast` with the tokenizer's special tokens.
#[test]
fn checkpoints_carry_the_tokenizer_and_its_config() {
    let dir = tempfile::tempdir().unwrap();
    let tail = "  - type: classify_sequences\n    max_len: 64";
    for (family, bare) in [("roberta", false), ("xlmr", true)] {
        let mut tok = tokenizer_path(family);
        if bare {
            // The tokenizer.json alone, no tokenizer_config.json beside it.
            let alone = dir.path().join(format!("{family}-alone"));
            std::fs::create_dir_all(&alone).unwrap();
            std::fs::copy(&tok, alone.join("tokenizer.json")).unwrap();
            tok = alone.join("tokenizer.json");
        }
        let yaml = std::fs::read_to_string(pipeline(dir.path(), &format!("data-{family}"), family, "[neg, pos]", tail))
            .unwrap()
            .replace(&tokenizer_path(family).display().to_string(), &tok.display().to_string());
        let p = write_pipeline(dir.path(), &format!("data-{family}.yaml"), &yaml);
        assert_ok(&bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet"]));
        let (data, out) = (dir.path().join(format!("data-{family}")), dir.path().join(format!("model-{family}")));
        let (d, o) = (format!("data={}", data.display()), format!("output_dir={}", out.display()));
        let root = root().join("pipelines/imdb-finetune.yaml");
        let args = ["train", root.to_str().unwrap(), "--quiet", "--set", &d, "--set", &o];
        let extra = ["max_steps=2", "eval_split=none", "per_device_train_batch_size=4"];
        let mut all: Vec<&str> = args.to_vec();
        for e in &extra {
            all.extend(["--set", e]);
        }
        assert_ok(&bertpipe(&all));
        let fin = out.join("final");
        assert_eq!(std::fs::read(fin.join("tokenizer.json")).unwrap(), std::fs::read(&tok).unwrap(), "{family}");
        assert!(!fin.join("vocab.txt").exists());
        let config: Value =
            serde_json::from_str(&std::fs::read_to_string(fin.join("tokenizer_config.json")).unwrap()).unwrap();
        assert_eq!(config["model_max_length"], 64, "{family}");
        if bare {
            assert_eq!(config["tokenizer_class"], "PreTrainedTokenizerFast");
            assert_eq!((config["cls_token"].as_str(), config["mask_token"].as_str()), (Some("<s>"), Some("<mask>")));
        } else {
            assert_eq!(config["tokenizer_class"], "RobertaTokenizer");
            assert_eq!(config["add_prefix_space"], false);
        }
    }
}
