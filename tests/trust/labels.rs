//! Defect 2: labels are classes by name, not by number. A model of `negative, neutral,
//! positive` evaluated on shards of `negative, positive` (ids 0 and 1) scored every positive row
//! as `neutral` and exited 0; `train` from such a checkpoint failed on the head's shape, or, with
//! as many classes in another order, trained the head on swapped meanings and renamed them. Now
//! the shards' label names are matched to the model's `id2label` (`shards::match_labels`):
//! by name, by number only where a side has no names, anything else refused naming both lists.
//!
//! The models are the tiny fixture with a head that says the same class whatever the text
//! (weights 0, one bias 8), so every figure is known without training.

use std::path::{Path, PathBuf};
use std::process::Output;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use serde_json::{json, Value};

use crate::common::{assert_ok, manifest, read_parquet, root, run_pipeline, stderr};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn tiny() -> PathBuf {
    root().join("tests/fixtures/tiny-bert-cls")
}

/// Words of the tiny vocabulary (`w0` … `w15`), a few per row, varied.
fn text(i: usize) -> String {
    (0..3 + i % 4).map(|j| format!("w{}", (i * 7 + j * 5) % 16)).collect::<Vec<_>>().join(" ")
}

/// `negative` × 3 then `positive` × 7 (string labels: the pipeline numbers them 0 and 1).
fn three_negative_seven_positive() -> Vec<Value> {
    (0..10).map(|i| json!(if i < 3 { "negative" } else { "positive" })).collect()
}

/// Classification shards of one split made from `labels` (one row each), tokenized with the tiny
/// vocabulary; `source` adds keys to the source (`, label_map: {…}`). The output folder and the
/// pipeline file.
fn shards(dir: &Path, name: &str, labels: &[Value], split: &str, source: &str) -> (PathBuf, PathBuf) {
    let corpus = dir.join(format!("{name}.jsonl"));
    let lines: Vec<String> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| json!({"id": format!("r{i}"), "text": text(i), "label": l}).to_string())
        .collect();
    std::fs::write(&corpus, lines.join("\n") + "\n").unwrap();
    let yaml = format!(
        "name: {name}\nsource: {{type: jsonl, path: {}, label_field: label, id_field: id, split: {split}{source}}}\nsteps:\n  - type: tokenize\n    vocab: {}\n  - type: classify_sequences\n    max_len: 32\nsink: {{type: parquet, path: unused}}\n",
        corpus.display(),
        tiny().join("vocab.txt").display()
    );
    let pipeline = dir.join(format!("{name}.yaml"));
    std::fs::write(&pipeline, yaml).unwrap();
    let out = dir.join(name);
    assert_ok(&run_pipeline(p(&pipeline), &out, &[]));
    (out, pipeline)
}

/// A copy of the tiny classifier whose head has the classes `labels` (its `id2label`) and
/// predicts class `winner` whatever the text: classifier weights 0, bias 8 for `winner`.
fn constant_classifier(to: &Path, labels: &[&str], winner: usize) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    std::fs::copy(tiny().join("vocab.txt"), to.join("vocab.txt")).unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(tiny().join("config.json")).unwrap()).unwrap();
    config["id2label"] = labels.iter().enumerate().map(|(i, l)| (i.to_string(), json!(l))).collect();
    config["label2id"] = labels.iter().enumerate().map(|(i, l)| (l.to_string(), json!(i))).collect();
    std::fs::write(to.join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let bytes = std::fs::read(tiny().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let hidden = st.tensor("classifier.weight").unwrap().shape()[1];
    let k = labels.len();
    let mut bias = vec![0f32; k];
    bias[winner] = 8.0;
    let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("classifier."))
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    let zeros = vec![0f32; k * hidden];
    tensors.push(("classifier.weight".into(), safetensors::Dtype::F32, vec![k, hidden], f32_bytes(&zeros)));
    tensors.push(("classifier.bias".into(), safetensors::Dtype::F32, vec![k], f32_bytes(&bias)));
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(to.join("model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
    to.to_path_buf()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// [`constant_classifier`] exported to `DIR/NAME.onnx`.
fn constant_model(dir: &Path, name: &str, labels: &[&str], winner: usize) -> PathBuf {
    let checkpoint = constant_classifier(&dir.join(name), labels, winner);
    let model = dir.join(format!("{name}.onnx"));
    assert_ok(&crate::common::chain::bertpipe(
        &["export", "onnx", "--checkpoint", p(&checkpoint), "--out", p(&model)],
        &[],
    ));
    model
}

/// `bertpipe eval` of `model` on `data` (split `test`) into `out`, and its `metrics.json` when
/// it wrote one.
fn eval(model: &Path, data: &Path, out: &Path) -> (Output, Option<Value>) {
    let o = crate::common::chain::bertpipe(
        &["eval", "--model", p(model), "--data", p(data), "--out", p(out), "--quiet"],
        &[],
    );
    let report = std::fs::read_to_string(out.join("metrics.json")).ok().map(|t| serde_json::from_str(&t).unwrap());
    (o, report)
}

/// The `label` column of a predictions file.
fn predicted_labels(out: &Path) -> Vec<i64> {
    let mut labels = Vec::new();
    for b in read_parquet(&out.join("predictions.parquet")) {
        let c = b.column_by_name("label").unwrap().as_primitive::<Int64Type>().clone();
        labels.extend((0..c.len()).map(|i| c.value(i)));
    }
    labels
}

#[test]
fn eval_scores_the_shards_labels_as_the_models_classes_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Always `positive`, of three classes.
    let model = constant_model(d, "three", &["negative", "neutral", "positive"], 2);
    let (two, _) = shards(d, "two", &three_negative_seven_positive(), "test", "");
    assert_eq!(manifest(&two)["id2label"], json!({"0": "negative", "1": "positive"}));

    let (o, report) = eval(&model, &two, &d.join("eval"));
    assert_ok(&o);
    let r = report.unwrap();
    let m = &r["metrics"];
    // Before: accuracy 0, the seven positive rows counted as `neutral`.
    assert!((m["accuracy"].as_f64().unwrap() - 0.7).abs() < 1e-12, "{m}");
    assert_eq!(m["confusion"], json!([[0, 0, 3], [0, 0, 0], [0, 0, 7]]), "{m}");
    assert_eq!(r["labels"], json!(["negative", "neutral", "positive"]));
    let how = r["label_match"].as_str().unwrap_or_default();
    assert!(how.contains("by name") && how.contains("1 positive → 2 positive"), "{r}");
    // The predictions' `label` is the model's class, as `prediction` is.
    let mut labels = predicted_labels(&d.join("eval"));
    labels.sort();
    assert_eq!(labels, [0, 0, 0, 2, 2, 2, 2, 2, 2, 2]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("labels     the labels of the shards in"));

    // Names the model does not have: refused before any inference, naming both lists.
    let short: Vec<Value> = (0..10).map(|i| json!(if i < 3 { "neg" } else { "pos" })).collect();
    let (other, pipeline) = shards(d, "short", &short, "test", ", label_map: {neg: 0, pos: 1}");
    let (o, report) = eval(&model, &other, &d.join("eval-short"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("the shards in '{}' have the labels [neg, pos]", other.display()))
            && err.contains("the labels [negative, neutral, positive]")
            && err.contains("`neg`, `pos` are not among the model's"),
        "{err}"
    );
    assert!(report.is_none(), "no report for a refused evaluation");

    // predict answers in the model's classes, and says the pipeline labels others.
    let args = ["predict", "--model", p(&model), "--pipeline", p(&pipeline), "w1 w2 w3"];
    let o = crate::common::chain::bertpipe(&args, &[]);
    assert_ok(&o);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("positive") && table.contains("p(neutral)"), "{table}");
    let err = stderr(&o);
    let note =
        "note: pipeline `short` labels its corpus [neg, pos] but the model's classes are [negative, neutral, positive]";
    assert!(err.contains(note), "{err}");
}

#[test]
fn eval_takes_labels_by_number_only_where_a_side_has_no_names_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (two, _) = shards(d, "two", &three_negative_seven_positive(), "test", "");

    // HF's default names on as many classes as the shards name: by number, said.
    let generic = constant_model(d, "generic", &["LABEL_0", "LABEL_1"], 1);
    let (o, report) = eval(&generic, &two, &d.join("eval-generic"));
    assert_ok(&o);
    let r = report.unwrap();
    assert!((r["metrics"]["accuracy"].as_f64().unwrap() - 0.7).abs() < 1e-12, "{r}");
    let how = r["label_match"].as_str().unwrap_or_default();
    assert!(how.contains("does not name its classes") && how.contains("negative → LABEL_0, positive → LABEL_1"), "{r}");

    // On another count of classes there is no telling which is which: refused.
    let generic3 = constant_model(d, "generic3", &["LABEL_0", "LABEL_1", "LABEL_2"], 2);
    let (o, report) = eval(&generic3, &two, &d.join("eval-generic3"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("does not name its 3 classes [LABEL_0, LABEL_1, LABEL_2]")
            && err.contains("name 2 [negative, positive]"),
        "{err}"
    );
    assert!(report.is_none());

    // Numeric labels, a model with names: label i is class i, said.
    let numbers: Vec<Value> = (0..10).map(|i| json!(i % 2)).collect();
    let (numeric, _) = shards(d, "numeric", &numbers, "test", "");
    assert!(manifest(&numeric).get("id2label").is_none(), "numbers have no names");
    let named = constant_model(d, "named", &["negative", "positive"], 1);
    let (o, report) = eval(&named, &numeric, &d.join("eval-numeric"));
    assert_ok(&o);
    let r = report.unwrap();
    assert!((r["metrics"]["accuracy"].as_f64().unwrap() - 0.5).abs() < 1e-12, "{r}");
    let how = r["label_match"].as_str().unwrap_or_default();
    assert!(how.contains("do not name their labels") && how.contains("0 negative, 1 positive"), "{r}");
}

/// A training configuration from the checkpoint `init_from` on `data`'s `train` split.
fn train_yaml(dir: &Path, name: &str, data: &Path, init_from: &Path) -> PathBuf {
    let out = dir.join(format!("{name}-out"));
    let yaml = format!(
        "task: classify\ndata: {}\ntrain_split: train\neval_split: none\nmodel:\n  init_from: {}\noutput_dir: {}\nper_device_train_batch_size: 4\nmax_steps: 1\n",
        data.display(),
        init_from.display(),
        out.display()
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// `train CONFIG --dry-run --show-batches 0:0..3`: the output, and the labels of the rows of
/// the epoch's batches (sorted), as training feeds them.
fn dry_run_labels(config: &Path) -> (Output, Vec<String>) {
    let o = crate::common::bertpipe(&["train", p(config), "--dry-run", "--show-batches", "0:0..3"]);
    let mut labels: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|f| f.len() == 7 && f[0] == "0")
        .map(|f| f[5].to_string())
        .collect();
    labels.sort();
    (o, labels)
}

#[test]
fn training_from_a_classifier_checkpoint_keeps_its_classes_matched_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (data, _) = shards(d, "two", &three_negative_seven_positive(), "train", "");

    // A head of three classes: the shards' `positive` (1) is its class 2. Before: refused over
    // the head's shape ([3, 32] where the shards' two names wanted [2, 32]).
    let three = constant_classifier(&d.join("three"), &["negative", "neutral", "positive"], 2);
    let config = train_yaml(d, "three", &data, &three);
    let (o, labels) = dry_run_labels(&config);
    assert_ok(&o);
    let plan = String::from_utf8_lossy(&o.stdout);
    assert_eq!(labels, ["0", "0", "0", "2", "2", "2", "2", "2", "2", "2"], "{plan}");
    assert!(plan.contains("1 positive → 2 positive"), "{plan}");
    assert_ok(&crate::common::bertpipe(&["train", p(&config), "--quiet"]));
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("three-out/final/config.json")).unwrap()).unwrap();
    assert_eq!(saved["id2label"], json!({"0": "negative", "1": "neutral", "2": "positive"}));

    // As many classes in another order: the head keeps its meanings. Before: `positive` rows
    // were trained as its class 1 (`negative`), and the classes renamed after the shards.
    let swapped = constant_classifier(&d.join("swapped"), &["positive", "negative"], 0);
    let (o, labels) = dry_run_labels(&train_yaml(d, "swapped", &data, &swapped));
    assert_ok(&o);
    let plan = String::from_utf8_lossy(&o.stdout);
    assert_eq!(labels, ["0", "0", "0", "0", "0", "0", "0", "1", "1", "1"], "{plan}");
}

#[test]
fn training_from_a_head_without_the_shards_labels_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (data, _) = shards(d, "two", &three_negative_seven_positive(), "train", "");
    // The fixture's head is `neg, pos`: not the shards' `negative, positive`. Before: trained,
    // the head's classes renamed.
    let (o, _) = dry_run_labels(&train_yaml(d, "fixture", &data, &tiny()));
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    let err = stderr(&o);
    assert!(
        err.contains("have the labels [negative, positive] and the checkpoint")
            && err.contains("the labels [neg, pos]")
            && err.contains("`negative`, `positive` are not among the model's")
            && err.contains("without a classification head"),
        "{err}"
    );
    // A checkpoint without a classification head takes the shards' labels as they are.
    let encoder = root().join("tests/fixtures/tiny-bert-pretrain");
    let (o, labels) = dry_run_labels(&train_yaml(d, "encoder", &data, &encoder));
    assert_ok(&o);
    assert_eq!(labels, ["0", "0", "0", "1", "1", "1", "1", "1", "1", "1"]);
}
