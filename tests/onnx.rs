//! `export onnx`, `eval`, `predict` and `doctor` with the real ONNX Runtime.
//!
//! The runtime is found as a user's would be; when this machine has none, the pinned wheel
//! is installed into bertpipe's cache folder with pip (`bertpipe doctor --install`). A test
//! that still cannot load it fails and says why: none of these pass by skipping.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type};
use arrow_array::Array;
use bertpipe::onnx::proto::ModelProto;
use bertpipe::onnx::{export, runtime, verify};
use common::{assert_ok, bertpipe_env, fixture_dir, ort_env, ort_lib, read_parquet, root, run_pipeline, stderr};
use prost::Message;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn run(args: &[&str]) -> std::process::Output {
    let env = ort_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    bertpipe_env(args, &env)
}

fn tiny_cls() -> PathBuf {
    root().join("tests/fixtures/tiny-bert-cls")
}

/// `bertpipe export onnx --checkpoint CHECKPOINT --out OUT FLAGS…`.
fn export_cli(checkpoint: &Path, out: &Path, flags: &[&str]) -> std::process::Output {
    let (c, o) = (checkpoint.display().to_string(), out.display().to_string());
    let mut args = vec!["export", "onnx", "--checkpoint", &c, "--out", &o];
    args.extend_from_slice(flags);
    run(&args)
}

/// `bertpipe eval --model MODEL --data DATA --out OUT --quiet FLAGS…`.
fn eval_cli(model: &Path, data: &Path, out: &Path, flags: &[&str]) -> std::process::Output {
    let (m, d, o) = (model.display().to_string(), data.display().to_string(), out.display().to_string());
    let mut args = vec!["eval", "--model", &m, "--data", &d, "--out", &o, "--quiet"];
    args.extend_from_slice(flags);
    run(&args)
}

/// Sample shards, a briefly trained tiny classifier on them, and its export: made once.
struct Trained {
    shards: PathBuf,
    checkpoint: PathBuf,
    model: PathBuf,
}

fn trained() -> &'static Trained {
    static T: OnceLock<Trained> = OnceLock::new();
    T.get_or_init(|| {
        let dir = fixture_dir();
        let shards = dir.join("imdb");
        // Text kept, so eval can show the mistakes.
        assert_ok(&run_pipeline("pipelines/imdb.yaml", &shards, &["--set", "sink.keep_text=true"]));
        let ft = dir.join("ft");
        let (d, o) = (format!("data={}", shards.display()), format!("output_dir={}", ft.display()));
        let o = run(&[
            "train",
            "pipelines/imdb-finetune.yaml",
            "--quiet",
            "--set",
            &d,
            "--set",
            &o,
            "--set",
            "max_steps=12",
            "--set",
            "eval_split=null",
        ]);
        assert_ok(&o);
        let checkpoint = ft.join("final");
        let model = dir.join("model.onnx");
        assert_ok(&export_cli(&checkpoint, &model, &[]));
        Trained { shards, checkpoint, model }
    })
}

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("tests/fixtures/golden_model.json")).unwrap()).unwrap()
}

/// A golden fixture's batch shape and PyTorch's classifier logits for it, row-major.
fn batch_and_logits(g: &Value) -> (usize, usize, Vec<f32>) {
    let batch = g["input_ids"].as_array().unwrap().len();
    let seq = ints(&g["input_ids"]).len() / batch;
    (batch, seq, rows_f32(&g["cls_logits"]))
}

/// A fixture's `[rows][values]` as one row-major vector.
fn rows_f32(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
        .collect()
}

/// Export options for a checkpoint with nothing but the graph and precision chosen; `vocab`
/// stands for the vocabulary of a fixture that has no tokenizer of its own.
fn export_options(
    checkpoint: &Path,
    out: PathBuf,
    optimize: bool,
    precision: export::Precision,
    vocab: Option<PathBuf>,
) -> export::ExportOptions {
    export::ExportOptions {
        checkpoint: checkpoint.to_path_buf(),
        out,
        optimize,
        precision,
        vocab,
        max_len: None,
        external_data: false,
        fp16_clamp: false,
        metadata: Vec::new(),
    }
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_i64().unwrap())).collect()
}

#[test]
fn export_matches_pytorch_and_candle_on_dynamic_shapes_plain_and_optimized() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime::init(Some(ort_lib())).unwrap();
    let model = export::load_classifier(&tiny_cls()).unwrap();
    let g = golden();
    let (ids, mask, types) = (ints(&g["input_ids"]), ints(&g["attention_mask"]), ints(&g["token_type_ids"]));
    let (batch, seq, torch) = batch_and_logits(&g);
    let mut plain_logits = Vec::new();
    for optimize in [false, true] {
        let out = dir.path().join(if optimize { "opt.onnx" } else { "plain.onnx" });
        let opts = export_options(&tiny_cls(), out.clone(), optimize, export::Precision::Fp32, None);
        let done = export::export(&opts).unwrap();
        let mut session = rt.open(&done.path, runtime::Provider::Cpu, 1).unwrap();

        // Against PyTorch's logits for the same padded batch (golden fixture).
        let (logits, k) = session.logits(&ids, &mask, &types, batch, seq).unwrap();
        assert_eq!(k, 2);
        let diff = bertpipe::metrics::max_abs_diff(&logits, &torch) as f32;
        assert!(diff < 1e-4, "optimize={optimize}: max |Δ| vs PyTorch {diff}");

        // Against candle on random and tokenized batches of several shapes.
        let cases = verify::standard_cases(&model, &tiny_cls().join("vocab.txt"), true, 64).unwrap();
        let shapes: Vec<(usize, usize)> = cases.iter().map(|c| (c.batch, c.seq)).collect();
        assert!(shapes.contains(&(1, 1)) && shapes.iter().any(|&(b, _)| b > 1), "{shapes:?}");
        for c in verify::compare(&model, &mut session, &cases).unwrap() {
            assert!(c.max_abs_diff < verify::TOLERANCE, "optimize={optimize} {}: {}", c.name, c.max_abs_diff);
        }
        // The fused graph computes what the plain one does.
        let case = &cases[1];
        let (l, _) =
            session.logits(&case.input_ids, &case.attention_mask, &case.token_type_ids, case.batch, case.seq).unwrap();
        if optimize {
            let d = bertpipe::metrics::max_abs_diff(&l, &plain_logits) as f32;
            assert!(d < 1e-4, "optimized vs plain: {d}");
        } else {
            plain_logits = l;
        }

        // The file itself: opset 17, the contract's signature, fused ops only when asked.
        let proto = ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
        assert!(proto.opset_import.iter().any(|o| o.domain.is_empty() && o.version == 17));
        let graph = proto.graph.as_ref().unwrap();
        let inputs: Vec<&str> = graph.input.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(inputs, ["input_ids", "attention_mask", "token_type_ids"]);
        for i in &graph.input {
            let t = i.r#type.as_ref().unwrap().tensor_type.as_ref().unwrap();
            assert_eq!(t.elem_type, 7, "int64");
            let dims: Vec<Option<&str>> =
                t.shape.as_ref().unwrap().dim.iter().map(|d| d.dim_param.as_deref()).collect();
            assert_eq!(dims, [Some("batch"), Some("sequence")]);
        }
        assert_eq!(graph.output[0].name, "logits");
        let ops: Vec<&str> = graph.node.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops.contains(&"Attention"), optimize, "{ops:?}");
        assert_eq!(ops.contains(&"LayerNormalization"), !optimize);
        assert!(graph.initializer.iter().all(|t| !t.raw_data.is_empty()), "weights as raw_data");
    }
}

/// RoBERTa's export (plain and `--optimize`) against `transformers`' own logits for the RoBERTa
/// fixture's padded batch (scripts/make_golden_roberta.py: padding id 1, `</s></s>`), not
/// against candle: the in-graph position ids and the classification head are checked at the
/// reference. Its signature has no `token_type_ids`.
#[test]
fn roberta_export_matches_transformers_plain_and_optimized() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime::init(Some(ort_lib())).unwrap();
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("tests/fixtures/golden_roberta.json")).unwrap())
            .unwrap();
    let (ids, mask) = (ints(&g["input_ids"]), ints(&g["attention_mask"]));
    let (batch, seq, torch) = batch_and_logits(&g);
    for optimize in [false, true] {
        let out = dir.path().join(if optimize { "opt.onnx" } else { "plain.onnx" });
        // The fixture has no tokenizer; a vocabulary of its 120 rows stands for it in the
        // metadata (a larger one is refused: its ids would index past the embeddings).
        let vocab = tiny_cls().join("vocab.txt");
        let checkpoint = root().join("tests/fixtures/tiny-roberta-cls");
        let opts = export_options(&checkpoint, out.clone(), optimize, export::Precision::Fp32, Some(vocab));
        let done = export::export(&opts).unwrap();
        let mut session = rt.open(&done.path, runtime::Provider::Cpu, 1).unwrap();
        // Token types are not fed to a model without the input (zeros passed, unused).
        let (logits, k) = session.logits(&ids, &mask, &vec![0; ids.len()], batch, seq).unwrap();
        assert_eq!(k, 2);
        let diff = bertpipe::metrics::max_abs_diff(&logits, &torch) as f32;
        assert!(diff < 1e-4, "optimize={optimize}: max |Δ| vs transformers {diff}");
        let proto = ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
        let inputs: Vec<&str> = proto.graph.as_ref().unwrap().input.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(inputs, ["input_ids", "attention_mask"]);
    }
}

/// ModernBERT's export against `transformers`' logits of the ModernBERT fixture
/// (scripts/make_golden_modernbert.py: 11 tokens through ±2-token local layers, so the
/// in-graph window, rotary tables and padding all count), `cls` and `mean` pooling; int8 close
/// to it; inputs `input_ids`, `attention_mask`. The fused graph and fp16 are refused by name.
#[test]
fn modernbert_export_matches_transformers_fp32_and_int8() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime::init(Some(ort_lib())).unwrap();
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("tests/fixtures/golden_modernbert.json")).unwrap())
            .unwrap();
    let (ids, mask) = (ints(&g["input_ids"]), ints(&g["attention_mask"]));
    let (batch, seq, torch) = batch_and_logits(&g);
    let source = root().join("tests/fixtures/tiny-modernbert-cls");
    // The same weights pooled by the mean of each row's tokens.
    let mean = dir.path().join("mean-pooled");
    std::fs::create_dir(&mean).unwrap();
    std::fs::copy(source.join("model.safetensors"), mean.join("model.safetensors")).unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap()).unwrap();
    config["classifier_pooling"] = "mean".into();
    std::fs::write(mean.join("config.json"), config.to_string()).unwrap();
    let torch_mean = rows_f32(&g["cls_logits_mean"]);
    // The fixture has no tokenizer; a vocabulary of its 120 rows stands for it in the metadata
    // (a larger one is refused: its ids would index past the embeddings).
    let vocab = tiny_cls().join("vocab.txt");
    let options = |checkpoint: &Path, name: &str, optimize: bool, precision: export::Precision| {
        export_options(checkpoint, dir.path().join(name), optimize, precision, Some(vocab.clone()))
    };
    for (checkpoint, want, label) in [(&source, &torch, "cls"), (&mean, &torch_mean, "mean")] {
        let mut fp32_logits = Vec::new();
        for precision in [export::Precision::Fp32, export::Precision::Int8] {
            let name = format!("{label}-{}.onnx", precision.name());
            let done = export::export(&options(checkpoint, &name, false, precision)).unwrap();
            let mut session = rt.open(&done.path, runtime::Provider::Cpu, 1).unwrap();
            let (logits, k) = session.logits(&ids, &mask, &vec![0; ids.len()], batch, seq).unwrap();
            assert_eq!(k, 2);
            let diff = bertpipe::metrics::max_abs_diff(&logits, want) as f32;
            eprintln!("ModernBERT {label} pooling, {}: max |Δ logits| vs transformers {diff:e}", precision.name());
            if precision == export::Precision::Fp32 {
                assert!(diff < 1e-4, "{label} pooling, fp32: max |Δ| vs transformers {diff}");
                fp32_logits = logits;
            } else {
                // 7-bit weights and uint8 activations on a random model whose logits span ±10:
                // close, and not the float model itself.
                let scale = bertpipe::metrics::max_abs(want) as f32;
                assert!(diff < 0.1 * scale, "{label} pooling, int8: max |Δ| {diff} (logits up to {scale})");
                assert!(bertpipe::metrics::max_abs_diff(&logits, &fp32_logits) > 0.0, "int8 is not quantised");
            }
            let proto = ModelProto::decode(std::fs::read(&done.path).unwrap().as_slice()).unwrap();
            let graph = proto.graph.as_ref().unwrap();
            let inputs: Vec<&str> = graph.input.iter().map(|i| i.name.as_str()).collect();
            assert_eq!(inputs, ["input_ids", "attention_mask"]);
            let quantized = graph.node.iter().filter(|n| n.op_type == "DynamicQuantizeMatMul").count();
            let want_quantized = if precision == export::Precision::Int8 { 4 * 4 } else { 0 };
            assert_eq!(quantized, want_quantized, "Wqkv, Wo, Wi, Wo of each of the 4 layers");
        }
    }
    for (optimize, precision, says) in
        [(true, export::Precision::Fp32, "without --optimize"), (false, export::Precision::Fp16, "fp32 or int8")]
    {
        let err = export::export(&options(&source, "refused.onnx", optimize, precision)).err().unwrap();
        assert!(format!("{err:#}").contains(says), "{err:#}");
    }
}

#[test]
fn metadata_records_vocabulary_length_labels_and_producer() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.onnx");
    let o = export_cli(&tiny_cls(), &out, &["--verify"]);
    assert_ok(&o);
    let err = stderr(&o);
    assert!(err.contains("verified against candle") && err.contains("max |Δ logits|"), "{err}");
    let rt = runtime::init(Some(ort_lib())).unwrap();
    let m = rt.open(&out, runtime::Provider::Cpu, 1).unwrap();
    let vocab = std::fs::read(tiny_cls().join("vocab.txt")).unwrap();
    assert_eq!(m.metadata["vocab_sha256"], hex::encode(Sha256::digest(&vocab)));
    assert_eq!(m.metadata["max_len"], "64");
    assert_eq!(m.metadata["id2label"], r#"{"0":"neg","1":"pos"}"#);
    assert!(m.metadata["created_by"].starts_with("bertpipe "));
    assert_eq!(m.label_names(), ["neg", "pos"]);
}

#[test]
fn weights_can_live_in_an_external_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ext.onnx");
    let o = export_cli(&tiny_cls(), &out, &["--external-data", "--verify"]);
    assert_ok(&o);
    let data = dir.path().join("ext.onnx.data");
    let model_bytes = std::fs::metadata(&out).unwrap().len();
    let data_bytes = std::fs::metadata(&data).unwrap().len();
    // Tensors under 1 KiB (biases, LayerNorm) stay inline.
    assert!(data_bytes > 90_000 && model_bytes < data_bytes / 3, "model {model_bytes} B, data {data_bytes} B");
    let proto = ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
    let external = proto.graph.unwrap().initializer.iter().filter(|t| t.data_location == 1).count();
    assert!(external >= 10, "{external} external tensors (every weight matrix)");
}

#[test]
fn a_bare_encoder_is_refused_for_export() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.onnx");
    let pretrain = root().join("tests/fixtures/tiny-bert-pretrain");
    let o = export_cli(&pretrain, &out, &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a sequence-classification checkpoint"), "{}", stderr(&o));
    assert!(!out.exists());
}

/// `(key column, P(pos))` for every row of a predictions.parquet, in order.
fn positive_probabilities(predictions: &Path, key: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for b in read_parquet(predictions) {
        let keys = b.column_by_name(key).unwrap().as_string::<i32>().clone();
        let probs = b.column_by_name("probabilities").unwrap().as_list::<i32>().clone();
        for i in 0..b.num_rows() {
            out.push((keys.value(i).to_string(), probs.value(i).as_primitive::<Float32Type>().value(1) as f64));
        }
    }
    out
}

/// Metrics recomputed here from predictions.parquet, without bertpipe's metrics module.
fn independent_metrics(predictions: &Path) -> (f64, f64, f64, Vec<Vec<usize>>) {
    let mut labels = Vec::new();
    let mut p1 = Vec::new();
    let mut predicted = Vec::new();
    for b in read_parquet(predictions) {
        let l = b.column_by_name("label").unwrap().as_primitive::<Int64Type>().clone();
        let pr = b.column_by_name("prediction").unwrap().as_primitive::<Int64Type>().clone();
        let probs = b.column_by_name("probabilities").unwrap().as_list::<i32>().clone();
        for i in 0..b.num_rows() {
            labels.push(l.value(i) as usize);
            predicted.push(pr.value(i) as usize);
            let row = probs.value(i);
            let row = row.as_primitive::<Float32Type>();
            assert!((row.value(0) + row.value(1) - 1.0).abs() < 1e-5);
            p1.push(row.value(1) as f64);
        }
    }
    let n = labels.len();
    let correct = (0..n).filter(|&i| labels[i] == predicted[i]).count();
    let mut confusion = vec![vec![0; 2]; 2];
    for i in 0..n {
        confusion[labels[i]][predicted[i]] += 1;
    }
    let (tp, fp, fneg) = (confusion[1][1] as f64, confusion[0][1] as f64, confusion[1][0] as f64);
    let f1 = 2.0 * tp / (2.0 * tp + fp + fneg);
    // ROC-AUC as the probability that a positive outscores a negative (ties count half).
    let (mut wins, mut pairs) = (0.0, 0.0);
    for i in (0..n).filter(|&i| labels[i] == 1) {
        for j in (0..n).filter(|&j| labels[j] == 0) {
            pairs += 1.0;
            wins += if p1[i] > p1[j] {
                1.0
            } else if p1[i] == p1[j] {
                0.5
            } else {
                0.0
            };
        }
    }
    (correct as f64 / n as f64, f1, wins / pairs, confusion)
}

#[test]
fn eval_on_the_sample_shards_writes_metrics_that_match_its_predictions() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("eval");
    let o = eval_cli(&t.model, &t.shards, &out, &["--split", "test", "--json", "--batch-size", "16"]);
    assert_ok(&o);
    let report: Value = serde_json::from_slice(&o.stdout).expect("--json prints the report");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(report, saved);
    let m = &report["metrics"];
    let (acc, f1, auc, confusion) = independent_metrics(&out.join("predictions.parquet"));
    assert!((m["accuracy"].as_f64().unwrap() - acc).abs() < 1e-12);
    assert!((m["f1"].as_f64().unwrap() - f1).abs() < 1e-12);
    // Probabilities are stored as float32: ranks of near-equal scores may differ slightly.
    assert!((m["roc_auc"].as_f64().unwrap() - auc).abs() < 1e-3, "{} vs {auc}", m["roc_auc"]);
    assert_eq!(serde_json::to_value(&confusion).unwrap(), m["confusion"]);
    let rows = report["rows"].as_u64().unwrap();
    let manifest = common::manifest(&t.shards);
    assert_eq!(rows, manifest["splits"]["test"]["rows"].as_u64().unwrap(), "every row predicted");
    assert!(report["throughput"]["docs_per_second"].as_f64().unwrap() > 0.0);
    assert!(
        report["throughput"]["batch_latency_ms_p95"].as_f64().unwrap()
            >= report["throughput"]["batch_latency_ms_p50"].as_f64().unwrap()
    );
    let slices: u64 = report["by_length"].as_array().unwrap().iter().map(|s| s["examples"].as_u64().unwrap()).sum();
    assert_eq!(slices, rows);
    assert_eq!(report["by_noise"].as_array().unwrap().len(), 4);
    // A 12-step model makes mistakes; the most confident ones carry the kept text.
    let first = report["mistakes"].as_array().unwrap().first().expect("mistakes listed");
    assert!(first["text"].as_str().is_some_and(|s| !s.is_empty()), "kept text shown: {first}");
    for f in ["confusion", "roc", "calibration"] {
        for ext in ["svg", "png"] {
            assert!(out.join(format!("{f}.{ext}")).is_file(), "{f}.{ext}");
        }
    }
    // The same report as a page: the three charts inlined, the mistakes with their texts, and
    // it renders in a browser with every picture loaded.
    let page = out.join("report.html");
    assert!(report["outputs"].as_array().unwrap().iter().any(|o| o.as_str() == page.to_str()), "listed in outputs");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("src=\"data:image/png;base64,").count(), 3);
    let id = first["id"].as_str().unwrap();
    assert!(html.contains("Most confident mistakes") && html.contains(id), "the mistakes are on the page");
    if let Some(r) = common::browser::check_page(&page, "eval-sample") {
        assert_eq!(r.images.len(), 3);
    }

    // The same model in candle (training's evaluation) gives the same metrics.
    let (candle, _) = bertpipe::train::evaluate_checkpoint(&t.checkpoint, &t.shards, "test", 64).unwrap();
    assert!((candle.accuracy - m["accuracy"].as_f64().unwrap()).abs() < 1e-12);
    assert!((candle.loss - m["loss"].as_f64().unwrap()).abs() < 1e-5);

    // Fixed padding gives the same predictions.
    let fixed = dir.path().join("fixed");
    assert_ok(&eval_cli(&t.model, &t.shards, &fixed, &["--max-len", "512", "--batch-size", "8"]));
    let again: Value = serde_json::from_str(&std::fs::read_to_string(fixed.join("metrics.json")).unwrap()).unwrap();
    assert!((again["metrics"]["loss"].as_f64().unwrap() - m["loss"].as_f64().unwrap()).abs() < 1e-5);
}

#[test]
fn eval_refuses_a_model_with_another_vocabulary() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.onnx");
    assert_ok(&export_cli(&tiny_cls(), &model, &[]));
    let o = run(&["eval", "--model", model.to_str().unwrap(), "--data", t.shards.to_str().unwrap(), "--quiet"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    let theirs = common::manifest(&t.shards)["tokenizer"]["vocab_id"].as_str().unwrap().to_string();
    let ours = model_metadata(&model)["vocab_id"].clone();
    assert!(err.contains("vocab mismatch") && err.contains("vocab content id"), "{err}");
    assert!(err.contains(&ours) && err.contains(&theirs), "{err}");
}

#[test]
fn predict_refuses_a_pipeline_with_another_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.onnx");
    assert_ok(&export_cli(&tiny_cls(), &model, &[]));
    let o = run(&["predict", "--model", model.to_str().unwrap(), "--pipeline", "pipelines/imdb.yaml", "A fine film."]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("vocab mismatch") && err.contains(&model_metadata(&model)["vocab_id"]), "{err}");
    assert!(err.contains("pipeline `"), "names the pipeline: {err}");
}

/// The ONNX model's metadata props.
fn model_metadata(model: &Path) -> std::collections::BTreeMap<String, String> {
    let proto = ModelProto::decode(std::fs::read(model).unwrap().as_slice()).unwrap();
    proto.metadata_props.into_iter().map(|p| (p.key, p.value)).collect()
}

/// The `tokenizer.json` HF's `BertTokenizerFast` saves for an uncased `vocab.txt`.
fn bert_tokenizer_json(vocab: &Path, to: &Path) {
    let t = bertpipe::tokenize::hf_bert_tokenizer(vocab, true).unwrap();
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    t.save(to, false).unwrap();
}

/// The sample pipeline, tokenizing with `tokenizer` (a tokenizer.json) instead of vocab.txt.
fn json_pipeline(dir: &Path, tokenizer: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("pipelines/imdb.yaml")).unwrap();
    let text = text
        .replace("vocab: ../data/vocab/bert-base-uncased.txt", &format!("tokenizer: {}", tokenizer.display()))
        .replace("../data/", &format!("{}/data/", root().display()));
    let p = dir.join("imdb-json.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_vocabulary_is_its_content_whichever_file_it_came_from() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    // The checkpoint holds vocab.txt; these shards are tokenized with a tokenizer.json of the
    // same 30,522 tokens: a different file, the same vocabulary.
    let json = dir.path().join("tok/tokenizer.json");
    bert_tokenizer_json(&root().join("data/vocab/bert-base-uncased.txt"), &json);
    let pipeline = json_pipeline(dir.path(), &json);
    let shards = dir.path().join("json-shards");
    assert_ok(&run_pipeline(pipeline.to_str().unwrap(), &shards, &[]));
    let m = common::manifest(&shards);
    let m0 = common::manifest(&t.shards);
    assert_ne!(m["tokenizer"]["vocab_sha256"], m0["tokenizer"]["vocab_sha256"], "two different files");
    assert_eq!(m["tokenizer"]["vocab_id"], m0["tokenizer"]["vocab_id"], "one vocabulary");
    assert_eq!(model_metadata(&t.model)["vocab_id"], m["tokenizer"]["vocab_id"].as_str().unwrap());

    // train from the checkpoint, eval and predict with the model exported from it: accepted.
    let ft = dir.path().join("ft");
    let (d, o, i) = (
        format!("data={}", shards.display()),
        format!("output_dir={}", ft.display()),
        format!("model.init_from={}", t.checkpoint.display()),
    );
    let args = ["train", "pipelines/imdb-finetune.yaml", "--quiet", "--set", &d, "--set", &o, "--set", &i];
    let o =
        run(&[&args[..], &["--set", "model.preset=null", "--set", "max_steps=1", "--set", "eval_split=null"]].concat());
    assert_ok(&o);
    assert_ok(&eval_cli(&t.model, &shards, &dir.path().join("eval"), &[]));
    let m = t.model.to_str().unwrap();
    assert_ok(&run(&["predict", "--model", m, "--pipeline", pipeline.to_str().unwrap(), "A fine film."]));

    // A real difference is still one: two tokens swapped, or the same tokens cased.
    let vocab = std::fs::read_to_string(root().join("data/vocab/bert-base-uncased.txt")).unwrap();
    let mut lines: Vec<&str> = vocab.lines().collect();
    lines.swap(2000, 2001);
    let swapped = dir.path().join("swapped/vocab.txt");
    std::fs::create_dir_all(swapped.parent().unwrap()).unwrap();
    std::fs::write(&swapped, lines.join("\n") + "\n").unwrap();
    let json2 = dir.path().join("swapped/tokenizer.json");
    bert_tokenizer_json(&swapped, &json2);
    let shards2 = dir.path().join("swapped-shards");
    assert_ok(&run_pipeline(json_pipeline(&dir.path().join("swapped"), &json2).to_str().unwrap(), &shards2, &[]));
    let err = stderr(&eval_cli(&t.model, &shards2, &dir.path().join("eval2"), &[]));
    assert!(err.contains("vocab mismatch"), "{err}");
    let cased = dir.path().join("cased");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &cased, &["--set", "steps[6].lowercase=false"]));
    let err = stderr(&eval_cli(&t.model, &cased, &dir.path().join("eval3"), &[]));
    assert!(err.contains("vocab mismatch"), "lowercase changes ids: {err}");
}

#[test]
fn predict_gives_what_eval_gives_for_the_same_text_and_reports_rejects() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("eval");
    assert_ok(&eval_cli(&t.model, &t.shards, &out, &[]));
    let by_id: std::collections::HashMap<String, f64> =
        positive_probabilities(&out.join("predictions.parquet"), "id").into_iter().collect();
    // A .jsonl input with the reviews' own ids, plus an empty text.
    let mut lines = Vec::new();
    let mut want = Vec::new();
    for label in ["neg", "pos"] {
        let folder = root().join("data/aclImdb-sample/test").join(label);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.iter().take(4) {
            let id = format!("test/{label}/{}", f.file_stem().unwrap().to_string_lossy());
            if let Some(p) = by_id.get(&id) {
                lines.push(serde_json::json!({"id": id, "text": std::fs::read_to_string(f).unwrap()}).to_string());
                want.push((id, *p));
            }
        }
    }
    assert!(want.len() >= 6, "sample reviews found in the shards");
    lines.push(serde_json::json!({"id": "empty", "text": ""}).to_string());
    let input = dir.path().join("texts.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let o = run(&[
        "predict",
        "--model",
        t.model.to_str().unwrap(),
        "--pipeline",
        "pipelines/imdb.yaml",
        "--input",
        input.to_str().unwrap(),
        "--json",
    ]);
    assert_ok(&o);
    let preds: Vec<Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(preds.len(), want.len() + 1, "one answer per input, rejects included");
    for (p, (id, p1)) in preds.iter().zip(&want) {
        assert_eq!(p["id"], id.as_str());
        let got = p["probabilities"]["pos"].as_f64().unwrap();
        assert!((got - p1).abs() < 1e-6, "{id}: predict {got} vs eval {p1}");
    }
    let last = preds.last().unwrap();
    assert_eq!(last["id"], "empty");
    assert!(last["rejected"].as_str().unwrap().contains("min_words"), "{last}");
    assert!(stderr(&o).contains("1 of"), "{}", stderr(&o));
}

#[test]
fn windowed_rows_are_scored_per_row_and_per_document_and_predict_votes_the_same_way() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let window = "steps[7]={type: classify_sequences, max_len: 128, truncation: window, window_stride: 100}";
    let shards = dir.path().join("windows");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &shards, &["--set", window]));
    let out = dir.path().join("eval");
    let o = eval_cli(&t.model, &shards, &out, &["--json"]);
    assert_ok(&o);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let (rows, docs) = (r["rows"].as_u64().unwrap(), r["documents"].as_u64().unwrap());
    assert!(rows > docs, "windows: {rows} rows, {docs} documents");
    assert_eq!(r["metrics"]["examples"].as_u64().unwrap(), rows);
    assert_eq!(r["document_metrics"]["examples"].as_u64().unwrap(), docs);
    // Gated on windows, the drop is measured on documents, as eval scores them.
    let base = t.model.display().to_string();
    let o = eval_cli(&t.model, &shards, &dir.path().join("gate"), &["--json", "--baseline", &base]);
    assert_ok(&o);
    let g = serde_json::from_slice::<Value>(&o.stdout).unwrap()["gate"].clone();
    assert_eq!(
        (g["level"].as_str(), g["agreement"].as_f64(), g["drop"].as_f64()),
        (Some("documents"), Some(1.0), Some(0.0))
    );
    assert_eq!(g["document_accuracy"]["model"], r["document_metrics"]["accuracy"]);

    // The mean of a long review's window probabilities is what predict answers for its text.
    let mut windows: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for (doc, p) in positive_probabilities(&out.join("predictions.parquet"), "doc_id") {
        windows.entry(doc).or_default().push(p);
    }
    let (doc, ps) = windows.iter().max_by_key(|(_, v)| v.len()).unwrap();
    assert!(ps.len() >= 3, "{doc} has {} windows", ps.len());
    let text = std::fs::read_to_string(root().join("data/aclImdb-sample").join(format!("{doc}.txt"))).unwrap();
    let o = run(&[
        "predict",
        "--model",
        t.model.to_str().unwrap(),
        "--pipeline",
        "pipelines/imdb.yaml",
        "--set",
        window,
        "--json",
        &text,
    ]);
    assert_ok(&o);
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(p["windows"].as_u64().unwrap() as usize, ps.len());
    let mean = ps.iter().sum::<f64>() / ps.len() as f64;
    assert!((p["probabilities"]["pos"].as_f64().unwrap() - mean).abs() < 1e-6, "{p} vs {mean}");
}

#[test]
fn without_a_runtime_the_error_says_how_to_install_one() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    let env = [
        ("ORT_DYLIB_PATH", ""),
        ("VIRTUAL_ENV", ""),
        ("CONDA_PREFIX", ""),
        ("BERTPIPE_PYTHON", "/nonexistent/python3"),
        ("BERTPIPE_CACHE_DIR", dir.path().to_str().unwrap()),
        ("BERTPIPE_ORT_SYSTEM_DIRS", ""),
        ("LD_LIBRARY_PATH", ""),
    ];
    let o = bertpipe_env(&["eval", "--model", model.to_str().unwrap(), "--data", "out/none"], &env);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("ONNX Runtime was not found")
            && err.contains("bertpipe doctor --install")
            && err.contains("pip install onnxruntime=="),
        "{err}"
    );
    let o = bertpipe_env(&["doctor"], &env);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("bertpipe doctor --install"));
    let o = bertpipe_env(
        &["eval", "--model", "m.onnx", "--data", "x", "--ort-lib", "/nonexistent/libonnxruntime.so"],
        &env,
    );
    assert!(stderr(&o).contains("--ort-lib '/nonexistent/libonnxruntime.so' does not exist"), "{}", stderr(&o));
}

#[test]
fn doctor_reports_the_runtime_it_found() {
    let o = run(&["doctor"]);
    assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    let version = runtime::library_version(ort_lib()).unwrap();
    assert!(out.contains(&format!("ONNX Runtime {version} at {}", ort_lib().display())), "{out}");
    assert!(out.contains("found via ORT_DYLIB_PATH") && out.contains("CPUExecutionProvider"), "{out}");
    assert!(out.contains("candle CUDA"), "{out}");
}

/// `--verify` on a checkpoint whose logits overflow in both candle and ONNX Runtime: two
/// outputs that are both infinite or NaN are not "max |Δ| 0", the check fails.
#[test]
fn verify_fails_when_the_outputs_are_not_finite_on_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    for f in ["config.json", "vocab.txt"] {
        std::fs::copy(tiny_cls().join(f), ckpt.join(f)).unwrap();
    }
    let mut tensors =
        candle_core::safetensors::load(tiny_cls().join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    // The pooler saturates (tanh of 1e30 is 1 everywhere), and 1 × 3e38 summed over the hidden
    // size is +inf in any order of summation.
    let cpu = candle_core::Device::Cpu;
    let pooler = tensors.keys().find(|k| k.ends_with("pooler.dense.bias")).unwrap().clone();
    let (pooler_shape, weight_shape) = (tensors[&pooler].dims().to_vec(), tensors["classifier.weight"].dims().to_vec());
    tensors.insert(pooler.clone(), candle_core::Tensor::full(1e30f32, pooler_shape, &cpu).unwrap());
    let weight = candle_core::Tensor::full(3e38f32, weight_shape, &cpu).unwrap();
    tensors.insert("classifier.weight".into(), weight);
    candle_core::safetensors::save(&tensors, ckpt.join("model.safetensors")).unwrap();
    let out = dir.path().join("m.onnx");
    let o = export_cli(&ckpt, &out, &["--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("not finite") && !err.contains("panicked"), "{err}");
}

/// A MiniLM-L6-sized classifier (6 layers, 384 hidden, 12 heads, bert-base-uncased's vocabulary)
/// trained for one step on the sample: made once.
fn minilm_sized() -> &'static Path {
    static M: OnceLock<PathBuf> = OnceLock::new();
    M.get_or_init(|| {
        let t = trained();
        let dir = fixture_dir();
        let config = dir.join("config.json");
        let c = serde_json::json!({
            "architectures": ["BertForSequenceClassification"], "model_type": "bert", "vocab_size": 30522,
            "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536,
            "hidden_act": "gelu", "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
            "pad_token_id": 0, "id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1}
        });
        std::fs::write(&config, c.to_string()).unwrap();
        let out = dir.join("ft");
        let sets = [
            format!("data={}", t.shards.display()),
            format!("output_dir={}", out.display()),
            format!("model.config={}", config.display()),
        ];
        let mut args = vec!["train", "pipelines/imdb-finetune.yaml", "--quiet"];
        for s in &sets {
            args.extend(["--set", s.as_str()]);
        }
        args.extend(["--set", "model.preset=null", "--set", "max_steps=1", "--set", "eval_split=null"]);
        args.extend(["--set", "per_device_train_batch_size=4"]);
        assert_ok(&run(&args));
        out.join("final")
    })
}

#[test]
fn int8_and_fp16_exports_stay_within_their_tolerance_of_float32_on_padded_real_text() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime::init(Some(ort_lib())).unwrap();
    let t = trained();
    for (name, checkpoint) in [("tiny", t.checkpoint.as_path()), ("minilm-sized", minilm_sized())] {
        for precision in [export::Precision::Int8, export::Precision::Fp16] {
            for optimize in [false, true] {
                let out = dir.path().join(format!("{name}-{}-{optimize}.onnx", precision.name()));
                let opts = export_options(checkpoint, out.clone(), optimize, precision, None);
                let done = export::export(&opts).unwrap();
                // verify: random padded batches up to max_len and tokenized sentences, against
                // candle in float32, within the precision's tolerance (it errs past it).
                let checked = verify::verify_export(rt, &done)
                    .unwrap_or_else(|e| panic!("{name} {} optimize={optimize}: {e:#}", precision.name()));
                let tol = verify::Tolerance::of(precision);
                for c in &checked {
                    assert!(tol.allows(c.text, c.max_abs_logit, c.max_abs_diff), "{name}: {c:?}");
                    // Not float32 in disguise: every case changes, a little.
                    assert!(c.max_abs_diff > 1e-7, "{name} {} {}: {c:?}", precision.name(), c.name);
                }
                let m = rt.open(&out, runtime::Provider::Cpu, 1).unwrap();
                assert_eq!(m.metadata["precision"], precision.name());
                assert!(m.metadata["quantization"].contains(if precision == export::Precision::Int8 {
                    "per output channel"
                } else {
                    "fp16"
                }));
                let proto = ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
                let graph = proto.graph.as_ref().unwrap();
                let count = |op: &str| graph.node.iter().filter(|n| n.op_type == op).count();
                let layers = done.model.config.num_hidden_layers;
                let out_type = graph.output[0].r#type.as_ref().unwrap().tensor_type.as_ref().unwrap().elem_type;
                assert_eq!(out_type, 1, "logits stay float32");
                match (precision, optimize) {
                    (export::Precision::Int8, false) => assert_eq!(count("DynamicQuantizeMatMul"), 6 * layers),
                    (export::Precision::Int8, true) => {
                        assert_eq!((count("QAttention"), count("DynamicQuantizeMatMul")), (layers, 3 * layers));
                        // The residuals as `Sum` + `LayerNormalization`, the activation without a
                        // bias: the fused fp32 ops are slower on int8 products (export.rs says why).
                        assert_eq!((count("Sum"), count("LayerNormalization")), (2 * layers, 2 * layers));
                        assert_eq!(count("SkipLayerNormalization") + count("BiasGelu"), 0);
                    }
                    _ => {
                        let f16 = graph.initializer.iter().filter(|i| i.data_type == 10).count();
                        assert!(f16 >= 8 * layers, "{f16} fp16 initializers");
                    }
                }
                let weights: usize = graph.initializer.iter().map(|i| i.raw_data.len()).sum();
                let fp32 = done.parameters * 4;
                // int8 stores the encoder's matrices in a quarter of the bytes (the embeddings
                // stay float32); fp16 halves everything.
                let c = &done.model.config;
                let matrices = layers * (4 * c.hidden_size * c.hidden_size + 2 * c.hidden_size * c.intermediate_size);
                let most = match precision {
                    export::Precision::Int8 => fp32 - matrices * 3 + matrices / 10,
                    _ => fp32 * 6 / 10,
                };
                assert!(weights < most, "{name} {}: {weights} B of {fp32}", precision.name());
            }
        }
    }
}

/// `(id, predicted class, P(label), label)` of every row of a predictions.parquet, in order.
fn prediction_rows(predictions: &Path) -> Vec<(String, i64, f64, i64)> {
    let mut out = Vec::new();
    for b in read_parquet(predictions) {
        let id = b.column_by_name("id").unwrap().as_string::<i32>().clone();
        let l = b.column_by_name("label").unwrap().as_primitive::<Int64Type>().clone();
        let pr = b.column_by_name("prediction").unwrap().as_primitive::<Int64Type>().clone();
        let probs = b.column_by_name("probabilities").unwrap().as_list::<i32>().clone();
        for i in 0..b.num_rows() {
            let p = probs.value(i);
            let p = p.as_primitive::<Float32Type>().value(l.value(i) as usize) as f64;
            out.push((id.value(i).to_string(), pr.value(i), p, l.value(i)));
        }
    }
    out
}

#[test]
fn the_int8_gate_agrees_on_the_sample_and_its_figures_follow_from_the_two_prediction_files() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let int8 = dir.path().join("int8.onnx");
    let o = export_cli(&t.checkpoint, &int8, &["--quantize", "int8", "--verify"]);
    assert_ok(&o);
    assert!(stderr(&o).contains("int8") && stderr(&o).contains("verified against candle"), "{}", stderr(&o));
    let out = dir.path().join("gate");
    let base = t.model.display().to_string();
    let o = eval_cli(&int8, &t.shards, &out, &["--baseline", &base, "--json"]);
    assert_ok(&o);
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["precision"], "int8");
    let g = &report["gate"];
    assert_eq!((g["precision"].as_str(), g["baseline_precision"].as_str()), (Some("int8"), Some("fp32")));
    assert!(g["agreement"].as_f64().unwrap() >= 0.99, "int8 agrees with fp32 on ≥ 99% of rows: {g}");
    assert_eq!(g["passed"], true);
    // The fused int8 graph (`QAttention`, its own residual tail) too.
    let fused = dir.path().join("int8-optimize.onnx");
    assert_ok(&export_cli(&t.checkpoint, &fused, &["--precision", "int8", "--optimize", "--verify"]));
    let o = eval_cli(&fused, &t.shards, &dir.path().join("gate-optimize"), &["--baseline", &base, "--json"]);
    assert_ok(&o);
    let fg = &serde_json::from_slice::<Value>(&o.stdout).unwrap()["gate"];
    assert!(fg["agreement"].as_f64().unwrap() >= 0.99, "int8 --optimize agrees with fp32 on ≥ 99% of rows: {fg}");

    // The figures again, from the two prediction files alone.
    let model = prediction_rows(&out.join("predictions.parquet"));
    let baseline = prediction_rows(&out.join("baseline_predictions.parquet"));
    assert_eq!(model.len(), baseline.len());
    assert!(model.iter().zip(&baseline).all(|(a, b)| a.0 == b.0 && a.3 == b.3), "same rows, same order");
    let n = model.len() as f64;
    let agree = model.iter().zip(&baseline).filter(|(a, b)| a.1 == b.1).count();
    let acc = |rows: &[(String, i64, f64, i64)]| rows.iter().filter(|r| r.1 == r.3).count() as f64 / n;
    let loss = |rows: &[(String, i64, f64, i64)]| rows.iter().map(|r| -r.2.max(1e-12).ln()).sum::<f64>() / n;
    assert!((g["agreement"].as_f64().unwrap() - agree as f64 / n).abs() < 1e-12);
    assert_eq!(g["flipped"].as_u64().unwrap() as usize, model.len() - agree);
    assert_eq!(g["flips"].as_array().unwrap().len(), model.len() - agree);
    assert!((g["accuracy"]["baseline"].as_f64().unwrap() - acc(&baseline)).abs() < 1e-12);
    assert!((g["accuracy"]["model"].as_f64().unwrap() - acc(&model)).abs() < 1e-12);
    assert!((g["drop"].as_f64().unwrap() - 100.0 * (acc(&baseline) - acc(&model))).abs() < 1e-9);
    // Probabilities are stored as float32.
    assert!((g["loss"]["baseline"].as_f64().unwrap() - loss(&baseline)).abs() < 1e-5);
    assert!((g["loss"]["change"].as_f64().unwrap() - (loss(&model) - loss(&baseline))).abs() < 1e-5);
    let slices: u64 = g["by_length"].as_array().unwrap().iter().map(|s| s["examples"].as_u64().unwrap()).sum();
    assert_eq!(slices as usize, model.len(), "every row in one length slice");
    // The baseline's side is the plain eval of the fp32 model.
    let plain = eval_cli(&t.model, &t.shards, &dir.path().join("plain"), &["--json"]);
    assert_ok(&plain);
    let plain: Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert_eq!(plain["metrics"]["accuracy"], g["accuracy"]["baseline"]);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(saved["gate"], *g);
}

/// A copy of `checkpoint` whose classifier gives the opposite logits (−W, −b).
fn negated_classifier(checkpoint: &Path, to: &Path) {
    edited_checkpoint(checkpoint, to, |name| name.starts_with("classifier."), |v| -v);
}

/// A copy of a checkpoint whose tensors named so have every float32 value mapped by `f`.
fn edited_checkpoint(checkpoint: &Path, to: &Path, which: impl Fn(&str) -> bool, f: impl Fn(f32) -> f32) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(checkpoint).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    let bytes = std::fs::read(checkpoint.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in st.tensors() {
        let mut data = view.data().to_vec();
        if which(&name) {
            assert_eq!(view.dtype(), safetensors::Dtype::F32);
            for c in data.chunks_exact_mut(4) {
                let v = f(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        tensors.push((name, view.dtype(), view.shape().to_vec(), data));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(to.join("model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn a_model_that_loses_more_than_max_drop_fails_the_gate_with_exit_1() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let flipped_ckpt = dir.path().join("flipped");
    negated_classifier(&t.checkpoint, &flipped_ckpt);
    let flipped = dir.path().join("flipped.onnx");
    assert_ok(&export_cli(&flipped_ckpt, &flipped, &[]));
    // The better of the two is the baseline: the other loses |2·accuracy − 1| of the rows.
    let plain = eval_cli(&t.model, &t.shards, &dir.path().join("plain"), &["--json"]);
    assert_ok(&plain);
    let acc = serde_json::from_slice::<Value>(&plain.stdout).unwrap()["metrics"]["accuracy"].as_f64().unwrap();
    let (baseline, model) = if acc >= 0.5 { (&t.model, &flipped) } else { (&flipped, &t.model) };
    assert!((2.0 * acc - 1.0).abs() > 0.01, "a degenerate fixture: accuracy {acc}");
    let out = dir.path().join("gate");
    let base = baseline.display().to_string();
    // Strict: the drop alone fails it.
    let o = eval_cli(model, &t.shards, &out, &["--baseline", &base, "--strict-gate"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("accuracy points") && err.contains("--max-drop 0.5"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("gate: FAILED"));
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    let g = &saved["gate"];
    assert_eq!((g["passed"].as_bool(), g["rule"].as_str()), (Some(false), Some("strict")));
    assert!((g["drop"].as_f64().unwrap() - 100.0 * (2.0 * acc - 1.0).abs()).abs() < 1e-6, "{g}");
    assert_eq!(g["agreement"].as_f64().unwrap(), 0.0, "every prediction flips");
    // Every row flips, so the discordant rows are all of them: b the baseline's right ones, c
    // the rest; McNemar's p is the binomial tail, and the default rule fails only below 0.05.
    let rows = g["examples"].as_u64().unwrap();
    let (b, c) = (g["baseline_only_right"].as_u64().unwrap(), g["model_only_right"].as_u64().unwrap());
    assert_eq!(b + c, rows);
    assert_eq!(b as f64 / rows as f64, acc.max(1.0 - acc));
    let p = g["mcnemar_p"].as_f64().unwrap();
    assert!((p - bertpipe::onnx::gate::mcnemar_exact(b as usize, c as usize)).abs() < 1e-12);
    let o = eval_cli(model, &t.shards, &out, &["--baseline", &base]);
    assert_eq!(o.status.success(), p >= 0.05, "p = {p}: {}", stderr(&o));
    // With a baseline as good as its own prediction, nothing is lost.
    let o = eval_cli(baseline, &t.shards, &dir.path().join("same"), &["--baseline", &base]);
    assert_ok(&o);
    // A looser gate passes the same pair.
    assert_ok(&eval_cli(model, &t.shards, &out, &["--baseline", &base, "--max-drop", "100"]));
    // --max-drop means nothing without a baseline.
    let o = eval_cli(model, &t.shards, &out, &["--max-drop", "1"]);
    assert!(!o.status.success() && stderr(&o).contains("--baseline"), "{}", stderr(&o));
}

/// An aclImdb-layout corpus whose test split repeats some training reviews: `exact` verbatim
/// and `near` with one word changed (sources of 200 words or more: Jaccard ≈ 0.95), beside
/// fresh reviews. Returns the folder and the planted test files' ids with their kind.
fn leaky_corpus(dir: &Path, exact: usize, near: usize) -> (PathBuf, Vec<(String, &'static str)>) {
    let root = dir.join("aclImdb");
    let mut rng = bertpipe::rng::Rng(77);
    let mut planted = Vec::new();
    for (label, positive, rating) in [("neg", false, 2), ("pos", true, 9)] {
        let mut long = Vec::new();
        for split in ["train", "test"] {
            std::fs::create_dir_all(root.join(split).join(label)).unwrap();
        }
        for i in 0..60 {
            let text = bertpipe::synth::review(&mut rng, Some(positive));
            if text.split(' ').count() >= 200 {
                long.push(text.clone());
            }
            std::fs::write(root.join(format!("train/{label}/{i}_{rating}.txt")), text).unwrap();
        }
        assert!(long.len() >= exact + near, "{} long training reviews", long.len());
        for i in 0..40 {
            let source = long.get(i).filter(|_| i < exact + near);
            let (text, kind) = if let (Some(t), true) = (source, i < exact) {
                (t.clone(), Some("exact"))
            } else if let Some(t) = source {
                let mut w: Vec<&str> = t.split(' ').collect();
                w[100] = "zqchanged";
                (w.join(" "), Some("near"))
            } else {
                (bertpipe::synth::review(&mut rng, Some(positive)), None)
            };
            std::fs::write(root.join(format!("test/{label}/{i}_{rating}.txt")), text).unwrap();
            if let Some(k) = kind {
                planted.push((format!("test/{label}/{i}_{rating}"), k));
            }
        }
    }
    (root, planted)
}

#[test]
fn the_manifest_counts_test_leakage_and_eval_scores_the_clean_and_leaked_parts_apart() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let (corpus, planted) = leaky_corpus(dir.path(), 4, 4);
    let shards = dir.path().join("shards");
    let src = format!("source.path={}", corpus.display());
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &shards, &["--set", &src]));
    let m = common::manifest(&shards);
    let l = &m["leakage"]["test"];
    // What the pipeline kept of the planted pairs (its noise filter and dedup may drop some).
    let kept: std::collections::HashSet<String> =
        ["train", "test"].iter().flat_map(|s| common::strings(&shards, s, "id")).collect();
    let leaks: Vec<(String, bool)> = l["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["id"].as_str().unwrap().to_string(), x["exact"].as_bool().unwrap()))
        .collect();
    let want: Vec<(String, bool)> =
        planted.iter().filter(|(id, _)| kept.contains(id)).map(|(id, k)| (id.clone(), *k == "exact")).collect();
    let mut got = leaks.clone();
    got.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(got, want_sorted, "the planted overlap, and nothing else: {l}");
    assert!(want.len() >= 12, "most planted pairs survive the pipeline: {}", want.len());
    assert_eq!(l["leaked"].as_u64().unwrap() as usize, want.len());
    assert_eq!(l["exact"].as_u64().unwrap() as usize, want.iter().filter(|w| w.1).count());
    assert_eq!(l["against"], serde_json::json!(["train"]));
    assert_eq!(l["documents"], m["splits"]["test"]["docs_out"]);

    // eval shows it, and with --exclude-leaked scores both parts; they add up.
    let out = dir.path().join("eval");
    let o = eval_cli(&t.model, &shards, &out, &["--exclude-leaked", "--json"]);
    assert_ok(&o);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = &r["leakage"];
    assert_eq!(e["leaked"], l["leaked"]);
    let (clean, leaked) = (&e["clean"], &e["leaked_only"]);
    assert_eq!(leaked["documents"].as_u64().unwrap() as usize, want.len());
    assert_eq!(
        clean["documents"].as_u64().unwrap() + leaked["documents"].as_u64().unwrap(),
        r["documents"].as_u64().unwrap()
    );
    let n = |v: &Value| v["metrics"]["examples"].as_f64().unwrap();
    let acc = |v: &Value| v["metrics"]["accuracy"].as_f64().unwrap();
    assert_eq!(n(clean) + n(leaked), n(&r));
    let mixed = (acc(clean) * n(clean) + acc(leaked) * n(leaked)) / n(&r);
    assert!((mixed - acc(&r)).abs() < 1e-12, "{mixed} vs {}", acc(&r));
    let text = eval_cli(&t.model, &shards, &dir.path().join("eval2"), &[]);
    assert_ok(&text);
    let shown = String::from_utf8_lossy(&text.stdout);
    assert!(shown.contains("leakage") && shown.contains(&format!("({} of", want.len())), "{shown}");

    // Without the figure in the manifest, --exclude-leaked says where it comes from.
    let off = dir.path().join("off");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &off, &["--set", &src, "--set", "sink.leakage=off"]));
    assert!(common::manifest(&off).get("leakage").is_none());
    let o = eval_cli(&t.model, &off, &dir.path().join("eval3"), &["--exclude-leaked"]);
    assert!(!o.status.success() && stderr(&o).contains("stats --leakage"), "{}", stderr(&o));
}

/// The issue's reproduction: classifier weights of 3e38 (finite; the loader takes them) make
/// logits overflow. Eval ends, counts and names the rows, leaves them out of the metrics, marks
/// them in the predictions file, and fails unless --allow-nonfinite.
#[test]
fn rows_with_non_finite_logits_are_counted_named_and_fail_the_run_unless_allowed() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge");
    edited_checkpoint(&t.checkpoint, &huge, |n| n == "classifier.weight", |_| 3e38);
    let model = dir.path().join("huge.onnx");
    assert_ok(&export_cli(&huge, &model, &[]));
    let out = dir.path().join("eval");
    let started = std::time::Instant::now();
    let o = eval_cli(&model, &t.shards, &out, &["--json"]);
    assert!(started.elapsed().as_secs() < 120, "took {:?}", started.elapsed());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("NaN or infinite logits") && err.contains("--allow-nonfinite"), "{err}");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = r["rows"].as_u64().unwrap();
    let bad = r["nonfinite"]["rows"].as_u64().unwrap();
    assert!(bad > 0 && bad <= rows, "{}", r["nonfinite"]);
    let ids: Vec<&str> = r["nonfinite"]["ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(ids.len() as u64, bad.min(100));
    // The metrics are of the finite rows only.
    let scored = r["metrics"]["examples"].as_u64().unwrap_or(0);
    assert_eq!(scored + bad, rows - r["unlabelled"].as_u64().unwrap());
    // The predictions file marks them, and lists them first-come in the split's order.
    let batches = read_parquet(&out.join("predictions.parquet"));
    let mut marked = Vec::new();
    for b in &batches {
        let finite = b.column_by_name("finite").unwrap().as_boolean();
        let id = b.column_by_name("id").unwrap().as_string::<i32>();
        let pred = b.column_by_name("prediction").unwrap();
        for i in 0..b.num_rows() {
            if !finite.value(i) {
                assert!(pred.is_null(i), "a non-finite row has no prediction");
                marked.push(id.value(i).to_string());
            }
        }
    }
    assert_eq!(marked.len() as u64, bad);
    assert_eq!(&marked[..ids.len()], &ids[..]);
    // Allowed: the same report, exit 0.
    let o = eval_cli(&model, &t.shards, &dir.path().join("allowed"), &["--allow-nonfinite"]);
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("non-finite"), "{}", String::from_utf8_lossy(&o.stdout));
}

/// The report without what differs between runs by nature: timings, paths, process counts.
fn comparable(mut r: Value) -> Value {
    let o = r.as_object_mut().unwrap();
    for k in ["throughput", "outputs", "tasks", "provider"] {
        o.remove(k);
    }
    if let Some(g) = o.get_mut("gate").and_then(Value::as_object_mut) {
        for k in ["docs_per_second", "baseline_docs_per_second", "speedup"] {
            g.remove(k);
        }
    }
    r
}

/// Eval as a task array: 1, 3 and 7 tasks over uneven shards (windows split across shard
/// boundaries, a baseline that flips every prediction) merge to the single run's predictions
/// byte for byte and its report figure for figure; an incomplete array refuses to merge.
#[test]
fn eval_task_arrays_merge_to_the_single_run_byte_for_byte() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("windows");
    let window = "steps[7]={type: classify_sequences, max_len: 64, truncation: window, window_stride: 48}";
    assert_ok(&run_pipeline(
        "pipelines/imdb.yaml",
        &shards,
        &["--set", window, "--set", "sink.shard_rows=13", "--set", "sink.keep_text=true"],
    ));
    let test_shards = common::manifest(&shards)["splits"]["test"]["shards"].as_array().unwrap().len();
    assert!(test_shards >= 5, "{test_shards} shards");
    let flipped_ckpt = dir.path().join("flipped");
    negated_classifier(&t.checkpoint, &flipped_ckpt);
    let flipped = dir.path().join("flipped.onnx");
    assert_ok(&export_cli(&flipped_ckpt, &flipped, &[]));
    let base = flipped.display().to_string();
    let flags = ["--baseline", base.as_str(), "--max-drop", "100", "--batch-size", "5"];

    let single = dir.path().join("single");
    let o = eval_cli(&t.model, &shards, &single, &[&flags[..], &["--json"]].concat());
    assert_ok(&o);
    let want: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(want["gate"]["flips"].as_array().unwrap().iter().any(|f| f["text"].is_string()));
    assert!(want["documents"].as_u64() < want["rows"].as_u64());
    let files = ["predictions.parquet", "baseline_predictions.parquet"];

    for count in [1usize, 3, 7] {
        let out = dir.path().join(format!("tasks-{count}"));
        for i in 0..count {
            let (ci, cc) = (i.to_string(), count.to_string());
            let o = if i == 1 {
                // The scheduler's variables instead of flags (Slurm: --array=1-N).
                let (m, d, o) =
                    (t.model.display().to_string(), shards.display().to_string(), out.display().to_string());
                let mut args = vec!["eval", "--model", &m, "--data", &d, "--out", &o, "--quiet"];
                args.extend_from_slice(&flags);
                let env = ort_env();
                let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let id = (i + 1).to_string();
                env.extend([
                    ("SLURM_ARRAY_TASK_ID", id.as_str()),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", cc.as_str()),
                ]);
                bertpipe_env(&args, &env)
            } else {
                eval_cli(&t.model, &shards, &out, &[&flags[..], &["--task-index", &ci, "--task-count", &cc]].concat())
            };
            assert_ok(&o);
            if count == 7 && i == 5 {
                // Six of seven done: the merge names what is missing.
                let o = run(&["eval", "merge", &out.display().to_string()]);
                assert!(!o.status.success() && stderr(&o).contains("have not finished: 6"), "{}", stderr(&o));
            }
        }
        let o = run(&["eval", "merge", &out.display().to_string(), "--json"]);
        assert_ok(&o);
        let got: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(got["tasks"].as_u64(), Some(count as u64));
        assert_eq!(comparable(got), comparable(want.clone()), "{count} tasks");
        for f in files {
            assert!(
                std::fs::read(out.join(f)).unwrap() == std::fs::read(single.join(f)).unwrap(),
                "{count} tasks: {f} differs"
            );
        }
    }
}

/// fp16 cannot hold weights beyond ±65504: the export names the tensor, or clamps when told.
#[test]
fn fp16_export_refuses_weights_beyond_its_range_unless_clamped() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big");
    let tensor = "bert.encoder.layer.0.intermediate.dense.weight";
    edited_checkpoint(&t.checkpoint, &big, |n| n == tensor, |v| if v > 0.0 { 1e5 } else { v });
    let o = export_cli(&big, &dir.path().join("fp16.onnx"), &["--precision", "fp16"]);
    assert!(!o.status.success(), "exported");
    let err = stderr(&o);
    assert!(
        err.contains("outside fp16's range") && err.contains("--fp16-clamp") && err.contains("intermediate"),
        "{err}"
    );
    let o = export_cli(&big, &dir.path().join("fp16.onnx"), &["--precision", "fp16", "--fp16-clamp"]);
    assert_ok(&o);
    assert!(stderr(&o).contains("clamped") && stderr(&o).contains("intermediate"), "{}", stderr(&o));
    // fp32 holds them as they are.
    assert_ok(&export_cli(&big, &dir.path().join("fp32.onnx"), &[]));
}

/// A split with no rows (every document filtered out) is an error naming it, not a report with
/// no metrics and exit 0.
#[test]
fn an_empty_split_is_an_error_naming_it() {
    let t = trained();
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("empty");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &shards, &["--set", "steps[4]={type: filter, min_words: 100000}"]));
    assert_eq!(common::manifest(&shards)["splits"]["test"]["rows"], 0);
    let o = eval_cli(&t.model, &shards, &dir.path().join("eval"), &[]);
    assert!(!o.status.success(), "an empty split evaluated");
    assert!(stderr(&o).contains("split `test`") && stderr(&o).contains("has no rows"), "{}", stderr(&o));
}
