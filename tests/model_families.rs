//! RoBERTa end to end: shards from a RoBERTa-shaped `tokenizer.json`, a RoBERTa `config.json`
//! trained from scratch (MLM on packed rows, then fine-tuned), exported to fp32 and int8 ONNX
//! without `token_type_ids`, evaluated — all through `bertpipe run`; and the refusals that
//! keep a RoBERTa from being given what it cannot take (NSP rows, token type 1).

mod common;

use std::path::{Path, PathBuf};

use common::chain::{bertpipe, report, run};
use common::{assert_ok, root, stderr};
use serde_json::Value;

fn tokenizer() -> PathBuf {
    root().join("tests/fixtures/tokenizers/roberta/tokenizer.json")
}

/// A small RoBERTa of the fixture tokenizer's vocabulary (ids 0–3 `<s> <pad> </s> <unk>`).
fn roberta_config(dir: &Path) -> PathBuf {
    let config = serde_json::json!({
        "model_type": "roberta", "vocab_size": 1795, "hidden_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 512, "max_position_embeddings": 514,
        "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
        "layer_norm_eps": 1e-5, "hidden_act": "gelu", "initializer_range": 0.02
    });
    let path = dir.join("roberta-config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// A pipeline file of the repository with the RoBERTa tokenizer instead of BERT's vocab.txt.
fn with_tokenizer(dir: &Path, file: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join("pipelines").join(file)).unwrap();
    let text = text
        .replace("vocab: ../data/vocab/bert-base-uncased.txt", &format!("tokenizer: {}", tokenizer().display()))
        .replace("../data/", &format!("{}/data/", root().display()));
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_roberta_trains_from_scratch_exports_and_evaluates_through_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (pretrain, data) = (with_tokenizer(d, "imdb-pretrain.yaml"), with_tokenizer(d, "imdb.yaml"));
    let config = roberta_config(d);
    let yaml = format!(
        "name: roberta-chain
out: {out}
stages:
  pretrain_data:
    base: {pretrain}
    steps[7].nsp: false
    steps[7].max_len: 128
  pretrain:
    base: {mlm}
    model.preset: null
    model.config: {config}
    max_steps: 20
    eval_steps: 20
    save_steps: 20
  data: {data}
  finetune:
    base: {finetune}
    init_from: pretrain
    num_train_epochs: 3
    learning_rate: 1.0e-3
  export: {{ optimize: false }}
  export_int8: {{ kind: export, precision: int8 }}
  eval: {{ split: test, model: export_int8, data: data }}
",
        out = d.join("out").display(),
        pretrain = pretrain.display(),
        mlm = root().join("pipelines/imdb-mlm.yaml").display(),
        config = config.display(),
        data = data.display(),
        finetune = root().join("pipelines/imdb-finetune.yaml").display(),
    );
    let exp = d.join("chain.yaml");
    std::fs::write(&exp, yaml).unwrap();
    assert_ok(&run(&exp, &[], &[]));
    let out = d.join("out");
    let r = report(&out);
    for stage in ["pretrain_data", "pretrain", "data", "finetune", "export", "export_int8", "eval"] {
        assert_eq!(r[stage]["status"], "ran", "{stage}: {}", r[stage]);
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("finetune/final/config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "RobertaForSequenceClassification");
    assert_eq!(config["model_type"], "roberta");
    let pretrained: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("pretrain/final/config.json")).unwrap()).unwrap();
    assert_eq!(pretrained["architectures"][0], "RobertaForMaskedLM");
    // fp32 equals candle within 1e-4 (the export's own --verify, on by default in a chain).
    let diff = r["export"]["figures"]["verify_max_abs_diff"].as_f64().unwrap_or_else(|| panic!("{}", r["export"]));
    assert!(diff < 1e-4, "fp32 export vs candle: {diff}");
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("eval/metrics.json")).unwrap()).unwrap();
    let accuracy = metrics["metrics"]["accuracy"].as_f64().unwrap_or_else(|| panic!("{}", metrics["metrics"]));
    assert!(
        accuracy > 0.6,
        "the int8 RoBERTa learned the sample's sentiment: accuracy {accuracy}; finetune {}",
        r["finetune"]
    );
    // The exported model takes no token types, as HF's RoBERTa exports do.
    let onnx = std::fs::read(out.join("export_int8/model.onnx")).unwrap();
    let model = <bertpipe::onnx::proto::ModelProto as prost::Message>::decode(&onnx[..]).unwrap();
    let inputs: Vec<String> = model.graph.unwrap().input.iter().map(|i| i.name.clone()).collect();
    assert_eq!(inputs, ["input_ids", "attention_mask"]);
}

#[test]
fn a_roberta_refuses_nsp_rows_and_bert_token_types() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = roberta_config(d);
    // NSP pairs (the pretraining pipeline's default) need a head RoBERTa does not have.
    let nsp = d.join("nsp");
    let p = with_tokenizer(d, "imdb-pretrain.yaml");
    let o = bertpipe(
        &["pipeline", "run", p.to_str().unwrap(), "--quiet", "--set", &format!("sink.path={}", nsp.display())],
        &[],
    );
    assert_ok(&o);
    let mlm = root().join("pipelines/imdb-mlm.yaml");
    let train = |data: &Path, task_out: &str| {
        bertpipe(
            &[
                "train",
                mlm.to_str().unwrap(),
                "--quiet",
                "--set",
                &format!("data={}", data.display()),
                "--set",
                &format!("output_dir={}", d.join(task_out).display()),
                "--set",
                "model.preset=null",
                "--set",
                &format!("model.config={}", config.display()),
                "--set",
                "max_steps=1",
            ],
            &[],
        )
    };
    let o = train(&nsp, "m1");
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nsp: false"), "{}", stderr(&o));
    // Shards of BERT's vocabulary give pair segments token type 1 (and another vocabulary).
    let bert = d.join("bert");
    let p = root().join("pipelines/imdb-pretrain.yaml");
    assert_ok(&bertpipe(
        &["pipeline", "run", p.to_str().unwrap(), "--quiet", "--set", &format!("sink.path={}", bert.display())],
        &[],
    ));
    let o = train(&bert, "m2");
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("token type 1") || err.contains("vocab"), "{err}");
}
