//! Fuzz targets: bertpipe's readers of outside input, each a function of arbitrary bytes that
//! must return (an error is fine) and never panic, abort or touch anything outside its own
//! scratch folder. `fuzz/` runs them under libFuzzer (`scripts/fuzz.sh TARGET SECONDS`, nightly);
//! `tests/fuzz_replay.rs` runs them on stable in `cargo test`, on the seed corpus
//! (`fuzz/seeds/TARGET/`), on every input a fuzzing run ever found (`fuzz/regressions/TARGET/`)
//! and on a bounded number of mutations of those.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::contract::manifest::{is_shard_path, Manifest};
use crate::contract::partition::Partition;
use crate::model::{BertWithHead, ModelKind};
use crate::pipeline::tasks::{parse_scan, TaskSpec};
use crate::sink::journal::Journal;
use crate::source::{Emit, Source, SourceItem};

/// A fuzz target: arbitrary bytes in, nothing out.
pub type Target = fn(&[u8]);

/// Every target, by name (the names of `fuzz/fuzz_targets/*.rs`).
pub const TARGETS: [(&str, Target); 7] = [
    ("pipeline_yaml", pipeline_yaml),
    ("experiment_yaml", experiment_yaml),
    ("tokenizer", tokenizer),
    ("tokenizer_json", tokenizer_json),
    ("sources", sources),
    ("contract_files", contract_files),
    ("model_files", model_files),
];

/// A scratch folder of this process, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "bertpipe-fuzz-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The pipeline YAML loader on arbitrary text: a located error or a pipeline.
pub fn pipeline_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let base = Path::new("/nonexistent-fuzz-base");
    if let Ok(p) = crate::config::Pipeline::from_yaml(text, "fuzz.yaml", base, &[]) {
        // A loaded pipeline serialises (the manifest records it).
        let _ = p.canonical_json();
    }
}

/// An experiment file of arbitrary contents, read and resolved (stage files it names are
/// looked up relative to a scratch folder; none exist): an experiment or located errors.
pub fn experiment_yaml(data: &[u8]) {
    let dir = Scratch::new();
    let path = dir.path().join("experiment.yaml");
    std::fs::write(&path, data).unwrap();
    let _ = crate::experiment::load(&path, &[]);
}

/// A `tokenizer.json` of arbitrary contents (saved with truncation, padding, post-processors
/// of any shape …) loaded as a pipeline's tokenize step loads it, then encoding a review: an
/// encoder or an error, and an encoder's ids are in its vocabulary.
pub fn tokenizer_json(data: &[u8]) {
    let dir = Scratch::new();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, data).unwrap();
    let step = crate::tokenize::Tokenize::of_file(&path, true, None);
    let Ok(encoder) = step.load() else { return };
    let mut ids = Vec::new();
    let text = "A wonderful, moving film.<br /><br />I want my two hours back! ".repeat(40);
    if encoder.encode(&text, &mut ids).is_ok() {
        let size = encoder.info().vocab_size as u32;
        assert!(ids.iter().all(|&id| id < size), "an id past the vocabulary of {size}");
    }
}

/// The WordPiece encoder on arbitrary text (the first byte picks cased or uncased), against the
/// `tokenizers` crate's BERT tokenizer with the bundled bert-base-uncased vocabulary: the ids
/// must be equal.
pub fn tokenizer(data: &[u8]) {
    use tokenizers::Tokenizer;
    const VOCAB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/vocab/bert-base-uncased.txt");
    type Pair = (crate::tokenize::WordPiece, Tokenizer);
    fn pair(lowercase: bool) -> Pair {
        let ours = crate::tokenize::WordPiece::from_vocab_file(VOCAB.as_ref(), lowercase, None, 100).unwrap();
        (ours, crate::tokenize::hf_bert_tokenizer(VOCAB.as_ref(), lowercase).unwrap())
    }
    static PAIRS: OnceLock<[Pair; 2]> = OnceLock::new();
    let pairs = PAIRS.get_or_init(|| [pair(true), pair(false)]);
    let Some((&first, rest)) = data.split_first() else { return };
    let (ours, hf) = &pairs[(first & 1) as usize];
    // Arbitrary bytes reach the tokenizer as sources decode them: invalid UTF-8 replaced.
    let text = String::from_utf8_lossy(rest);
    let mut got = Vec::new();
    ours.encode(&text, &mut got);
    let want = hf.encode(text.as_ref(), false).unwrap();
    assert_eq!(got, want.get_ids(), "lowercase {}: {text:?}", first & 1 == 0);
}

struct Collect;

impl Emit for Collect {
    fn emit(&mut self, item: SourceItem) -> anyhow::Result<()> {
        // Files handed over unread are read here, as a worker would.
        if let SourceItem::File(f) = item {
            let _ = f.load();
        }
        Ok(())
    }
}

/// Each source reader on arbitrary file contents (the first byte picks the reader): every
/// record is emitted or rejected, or the read stops with an error. Readers with a label field
/// first look for label names ([`Source::find_labels`]), as a run does. Kinds 8 and 9 are files
/// per split (`splits:` with a glob): the body up to its first 0xFF byte is the train file, the
/// rest the test file, read whole and as the second of two tasks.
pub fn sources(data: &[u8]) {
    let Some((&kind, body)) = data.split_first() else { return };
    let dir = Scratch::new();
    let d = dir.path().display().to_string();
    let (file, mut options) = match kind % 10 {
        0 => ("in.jsonl", serde_json::json!({"type": "jsonl", "label_field": "label", "id_field": "id"})),
        1 => ("in.csv", serde_json::json!({"type": "csv", "label_column": "label"})),
        2 => ("in.tsv", serde_json::json!({"type": "csv"})),
        3 => ("in.txt", serde_json::json!({"type": "text"})),
        4 => ("in.parquet", serde_json::json!({"type": "parquet", "label_column": "label"})),
        5 => ("aclImdb_v1.tar.gz", serde_json::json!({"type": "aclimdb"})),
        6 => ("in.txt", serde_json::json!({"type": "text", "mode": "paragraphs"})),
        7 => ("in.json", serde_json::json!({"type": "jsonl", "label_field": "label"})),
        8 => (
            "jsonl",
            serde_json::json!({"type": "jsonl", "label_field": "label",
            "splits": {"train": format!("{d}/train-*.jsonl"), "test": format!("{d}/test.jsonl")}}),
        ),
        _ => (
            "csv",
            serde_json::json!({"type": "csv", "label_column": "label",
            "splits": {"train": [format!("{d}/train-*.csv")], "test": format!("{d}/test.csv")}}),
        ),
    };
    if options.get("splits").is_some() {
        let cut = body.iter().position(|b| *b == 0xFF).unwrap_or(body.len());
        let (train, test) = (&body[..cut], body.get(cut + 1..).unwrap_or_default());
        std::fs::write(dir.path().join(format!("train-0.{file}")), train).unwrap();
        std::fs::write(dir.path().join(format!("test.{file}")), test).unwrap();
    } else {
        let path = dir.path().join(file);
        std::fs::write(&path, body).unwrap();
        options["path"] = path.display().to_string().into();
    }
    let mut source: Source = serde_json::from_value(options.clone())
        .unwrap_or_else(|e| panic!("the harness's own options do not load: {options}: {e}"));
    let _ = source.find_labels();
    let _ = source.read(7, Partition::WHOLE, &mut Collect);
    if source.file_splits().is_some() {
        let _ = source.read(7, Partition { index: 1, count: 2 }, &mut Collect);
    }
}

/// The readers of files other runs (or other people) leave in an output folder: the manifest,
/// the journal of an interrupted run, a task array's scan file (the first byte picks one).
/// Whatever they accept names only paths of the layout.
pub fn contract_files(data: &[u8]) {
    let Some((&kind, body)) = data.split_first() else { return };
    match kind % 3 {
        0 => {
            if let Ok(m) = Manifest::from_json(body, "manifest.json") {
                let merged = matches!(m.tasks, Some(t) if t.index.is_none());
                for (split, s) in &m.splits {
                    for shard in &s.shards {
                        assert!(is_shard_path(&shard.file, split, merged), "{:?}", shard.file);
                        assert!(!shard.file.contains("..") && !shard.file.starts_with('/'));
                    }
                }
                let _ = m.to_json();
            }
        }
        1 => {
            let dir = Scratch::new();
            std::fs::write(dir.path().join("_journal.jsonl"), body).unwrap();
            let mut asked = Vec::new();
            let _ = Journal::verified_shards_with(dir.path(), "cfg", &mut |s| {
                asked.push(s.file.clone());
                Ok(true)
            });
            for f in &asked {
                assert!(!f.contains("..") && !f.starts_with('/'), "{f:?}");
            }
        }
        _ => {
            let _ = parse_scan(body, "scan.bin", "cfg", TaskSpec { index: 0, count: 1 });
        }
    }
}

/// Loading a checkpoint: `config.json` and `model.safetensors` of arbitrary contents (the
/// first two bytes give the config's length). A model or an error.
pub fn model_files(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let n = (u16::from_le_bytes([data[0], data[1]]) as usize).min(data.len() - 2);
    let (config, weights) = data[2..].split_at(n);
    // The harness's own limit, not the loader's: configurations that are valid but need more
    // than ~64 MB of parameters would only measure the machine's memory.
    if let Ok(c) = serde_json::from_slice::<crate::model::config::BertConfig>(config) {
        let h = c.hidden_size as u128;
        let params = (c.vocab_size as u128 + c.max_position_embeddings as u128 + c.type_vocab_size as u128) * h
            + c.num_hidden_layers as u128 * (4 * h * h + 2 * h * c.intermediate_size as u128);
        if params > 1 << 24 {
            return;
        }
    }
    let dir = Scratch::new();
    std::fs::write(dir.path().join("config.json"), config).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), weights).unwrap();
    for kind in [ModelKind::SequenceClassification, ModelKind::PreTraining] {
        let _ = BertWithHead::from_checkpoint(kind, dir.path(), None, &candle_core::Device::Cpu, 0);
    }
}
