//! `bertpipe train` end to end on the bundled sample: learning, checkpoints, resume equality,
//! NaN stop, vocabulary and configuration errors, pretraining.

mod common;

use std::path::Path;

use common::{assert_ok, bertpipe, bertpipe_env, metrics, root, run_pipeline, stderr};
use serde_json::Value;

fn shards(dir: &Path, pipeline: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = dir.join(Path::new(pipeline).file_stem().unwrap());
    assert_ok(&run_pipeline(pipeline, &out, extra));
    out
}

fn train(config: &str, data: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    train_flags(config, data, out, extra, &[], env)
}

/// `bertpipe train CONFIG --quiet --set data=… --set output_dir=… --set EXTRA… FLAGS…`.
fn train_flags(
    config: &str,
    data: &Path,
    out: &Path,
    extra: &[&str],
    flags: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let (d, o) = (format!("data={}", data.display()), format!("output_dir={}", out.display()));
    let mut args = vec!["train", config, "--quiet", "--set", &d, "--set", &o];
    for e in extra {
        args.extend(["--set", e]);
    }
    args.extend_from_slice(flags);
    bertpipe_env(&args, env)
}

#[test]
fn fine_tuning_a_tiny_model_on_the_sample_learns_and_writes_hf_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let out = dir.path().join("ft");
    let o = train("pipelines/imdb-finetune.yaml", &data, &out, &[], &[]);
    assert_ok(&o);
    let summary = stderr(&o);
    assert!(summary.contains("final model:") && summary.contains("eval on `test`"), "{summary}");

    let log = metrics(&out);
    let evals: Vec<&Value> = log.iter().filter(|r| r.get("eval_accuracy").is_some()).collect();
    assert_eq!(evals.len(), 3, "one evaluation per epoch");
    let last = evals.last().unwrap();
    let test_acc = last["eval_accuracy"].as_f64().unwrap();
    assert!(test_acc >= 0.85, "test accuracy {test_acc}");
    for key in ["eval_loss", "eval_f1", "eval_roc_auc", "eval_precision", "eval_recall", "eval_confusion"] {
        assert!(last.get(key).is_some(), "{key} missing from {last}");
    }
    let losses: Vec<f64> = log.iter().filter_map(|r| r.get("loss")?.as_f64()).collect();
    assert!(losses.last().unwrap() < &(losses[0] * 0.5), "training loss did not fall: {losses:?}");

    let (train_m, _) = bertpipe::train::evaluate_checkpoint(&out.join("final"), &data, "train", 64).unwrap();
    assert!(train_m.accuracy >= 0.9, "training accuracy {}", train_m.accuracy);
    let (test_m, _) = bertpipe::train::evaluate_checkpoint(&out.join("final"), &data, "test", 64).unwrap();
    assert!((test_m.accuracy - test_acc).abs() < 1e-9, "final/ is the last step's model");

    for f in ["config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"] {
        assert!(out.join("final").join(f).exists(), "final/{f}");
        assert!(out.join("best").join(f).exists(), "best/{f}");
    }
    let ckpts: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("checkpoint-"))
        .collect();
    assert_eq!(ckpts.len(), 2, "save_total_limit 2");
    for c in &ckpts {
        assert!(c.path().join("optimizer.safetensors").exists() && c.path().join("trainer_state.json").exists());
    }
    assert_eq!(
        std::fs::read(out.join("final/vocab.txt")).unwrap(),
        std::fs::read(root().join("data/vocab/bert-base-uncased.txt")).unwrap()
    );
    for f in ["loss.svg", "loss.png", "eval.svg", "eval.png"] {
        assert!(out.join("plots").join(f).metadata().unwrap().len() > 1000, "plots/{f}");
    }
    let config: Value = serde_json::from_str(&std::fs::read_to_string(out.join("final/config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "BertForSequenceClassification");
    assert_eq!(config["id2label"]["0"], "neg");
    assert_eq!(config["vocab_size"], 30522);

    // A second run into the same folder is refused without --overwrite.
    let again = train("pipelines/imdb-finetune.yaml", &data, &out, &[], &[]);
    assert!(!again.status.success() && stderr(&again).contains("--overwrite"), "{}", stderr(&again));
}

/// `dtype: bf16` (meant for CUDA; on the CPU it rounds the same way): the tiny model still
/// learns the sample, the summary says what ran, and the checkpoint holds the f32 master
/// weights, whose logits differ from the bf16 run's only by bf16 rounding.
#[test]
fn bf16_compute_learns_the_sample_and_saves_f32_master_weights() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let out = dir.path().join("bf16");
    let o = train("pipelines/imdb-finetune.yaml", &data, &out, &["dtype=bf16"], &[]);
    assert_ok(&o);
    let summary = stderr(&o);
    assert!(summary.contains("bf16 matrix products") && summary.contains("meant for CUDA"), "{summary}");
    let log = metrics(&out);
    let last = log.iter().rev().find(|r| r.get("eval_accuracy").is_some()).unwrap();
    let bf16_acc = last["eval_accuracy"].as_f64().unwrap();
    assert!(bf16_acc >= 0.85, "test accuracy with bf16 matrix products {bf16_acc}");
    let losses: Vec<f64> = log.iter().filter_map(|r| r.get("loss")?.as_f64()).collect();
    assert!(losses.last().unwrap() < &(losses[0] * 0.5), "training loss did not fall: {losses:?}");

    let weights = std::fs::read(out.join("final/model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&weights).unwrap();
    assert!(tensors.tensors().iter().all(|(_, t)| t.dtype() == safetensors::Dtype::F32), "f32 master weights saved");
    // The f32 evaluation of the saved weights agrees with the bf16 one on nearly every row.
    let (f32_m, _) = bertpipe::train::evaluate_checkpoint(&out.join("final"), &data, "test", 64).unwrap();
    assert!((f32_m.accuracy - bf16_acc).abs() <= 0.05, "f32 {} vs bf16 {bf16_acc}", f32_m.accuracy);
}

#[test]
fn interrupted_and_resumed_training_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let settings =
        ["max_steps=6", "save_steps=2", "logging_steps=1", "eval_split=none", "per_device_train_batch_size=8"];
    let whole = dir.path().join("whole");
    assert_ok(&train("pipelines/imdb-finetune.yaml", &data, &whole, &settings, &[]));

    let parts = dir.path().join("parts");
    let o = train("pipelines/imdb-finetune.yaml", &data, &parts, &settings, &[("BERTPIPE_STOP_AT_STEP", "3")]);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(parts.join("checkpoint-3").join("trainer_state.json").exists(), "Ctrl-C writes a checkpoint");
    assert!(!parts.join("final").exists());
    assert_ok(&train_flags("pipelines/imdb-finetune.yaml", &data, &parts, &settings, &["--resume"], &[]));

    let key = |r: &Value| (r["step"].clone(), r["loss"].clone(), r["learning_rate"].clone(), r["grad_norm"].clone());
    let a: Vec<_> = metrics(&whole).iter().map(key).collect();
    let b: Vec<_> = metrics(&parts).iter().map(key).collect();
    assert_eq!(a.len(), 6);
    assert_eq!(a, b, "losses after --resume differ from the uninterrupted run");
    assert_eq!(
        std::fs::read(whole.join("final/model.safetensors")).unwrap(),
        std::fs::read(parts.join("final/model.safetensors")).unwrap(),
        "final weights differ"
    );

    // A changed config is refused on --resume.
    let o = train_flags("pipelines/imdb-finetune.yaml", &data, &parts, &["max_steps=7"], &["--resume"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("config differs"), "{}", stderr(&o));
}

/// The fused CPU kernels (attention softmax + dropout, bias epilogues, LayerNorm, GELU, the
/// in-place AdamW) against candle's graph of basic ops, with dropout on: dropout is keyed by
/// element position, so both paths drop the same elements and the losses agree.
#[test]
fn fused_kernels_train_as_the_graph_of_basic_ops_does_dropout_included() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let settings = ["max_steps=5", "logging_steps=1", "eval_split=none", "per_device_train_batch_size=8"];
    let fused = dir.path().join("fused");
    assert_ok(&train("pipelines/imdb-finetune.yaml", &data, &fused, &settings, &[]));
    let graph = dir.path().join("graph");
    assert_ok(&train("pipelines/imdb-finetune.yaml", &data, &graph, &settings, &[("BERTPIPE_UNFUSED", "1")]));
    let series =
        |out: &Path, key: &str| -> Vec<f64> { metrics(out).iter().filter_map(|r| r.get(key)?.as_f64()).collect() };
    for key in ["loss", "grad_norm"] {
        let (a, b) = (series(&fused, key), series(&graph, key));
        assert_eq!(a.len(), 5, "{key}: {a:?}");
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-4 * y.abs().max(1.0), "{key}: fused {a:?} vs graph {b:?}");
        }
    }
    // Training with dropout is still repeatable to the bit.
    let again = dir.path().join("again");
    assert_ok(&train("pipelines/imdb-finetune.yaml", &data, &again, &settings, &[]));
    assert_eq!(series(&fused, "loss"), series(&again, "loss"));
}

/// `gradient_checkpointing: true` (recompute each layer in backward) trains as the plain
/// backward does: the same losses and gradient norms step by step, dropout included, for the
/// classifier and for MLM + NSP (whose decoder is tied to the word embeddings, so its two
/// gradients must be summed), and packed rows with block-diagonal attention.
/// Each of `keys` in two runs' metrics.jsonl: as many values, each pair within 1e-4 (relative
/// to 1 or the value); `what` names the comparison in a failure.
fn same_series(a: &Path, b: &Path, keys: &[&str], what: &str) {
    let series =
        |out: &Path, key: &str| -> Vec<f64> { metrics(out).iter().filter_map(|r| r.get(key)?.as_f64()).collect() };
    for key in keys {
        let (x, y) = (series(a, key), series(b, key));
        assert_eq!(x.len(), y.len(), "{what} {key}: {x:?} vs {y:?}");
        for (p, q) in x.iter().zip(&y) {
            assert!((p - q).abs() <= 1e-4 * p.abs().max(1.0), "{what} {key}: {x:?} vs {y:?}");
        }
    }
}

/// Each case (`config`, shards, its own settings) trained twice under `dir` — with `settings`,
/// then with `toggle` too — and the two runs' `keys` held equal ([`same_series`]); the pairs
/// of output folders, for further checks.
fn trains_alike(
    dir: &Path,
    cases: &[(&str, &Path, &[&str])],
    settings: &[&str],
    toggle: &str,
    keys: &[&str],
) -> Vec<(std::path::PathBuf, std::path::PathBuf)> {
    let mut pairs = Vec::new();
    for (k, (config, data, extra)) in cases.iter().enumerate() {
        let mut settings = settings.to_vec();
        settings.extend_from_slice(extra);
        let (without, with) = (dir.join(format!("without{k}")), dir.join(format!("with{k}")));
        assert_ok(&train(config, data, &without, &settings, &[]));
        settings.push(toggle);
        assert_ok(&train(config, data, &with, &settings, &[]));
        same_series(&without, &with, keys, &format!("{config} {extra:?}: without and with {toggle}"));
        pairs.push((without, with));
    }
    pairs
}

#[test]
fn gradient_checkpointing_trains_as_the_plain_backward_does() {
    let dir = tempfile::tempdir().unwrap();
    let cls = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let mlm = shards(dir.path(), "pipelines/imdb-pretrain.yaml", &[]);
    let series =
        |out: &Path, key: &str| -> Vec<f64> { metrics(out).iter().filter_map(|r| r.get(key)?.as_f64()).collect() };
    let cases: [(&str, &Path, &[&str]); 3] = [
        ("pipelines/imdb-finetune.yaml", &cls, &["per_device_train_batch_size=8"]),
        ("pipelines/imdb-mlm.yaml", &mlm, &["per_device_train_batch_size=8"]),
        ("pipelines/imdb-mlm.yaml", &mlm, &["per_device_train_batch_size=4", "attention=block_diagonal"]),
    ];
    let settings = ["max_steps=4", "logging_steps=1", "eval_steps=4", "save_steps=4"];
    let keys = ["loss", "grad_norm", "eval_loss", "eval_mlm_loss"];
    for (plain, _) in trains_alike(dir.path(), &cases, &settings, "gradient_checkpointing=true", &keys) {
        assert!(!series(&plain, "loss").is_empty());
    }
}

/// `padding_free: true` trains as padded batches do: the same losses, gradient norms and
/// evaluations step by step with dropout on (masks are keyed by a token's place in its row),
/// for the classifier without length grouping (batches of very different lengths), MLM + NSP
/// (the MLM positions move into the stream), packed rows with block-diagonal attention, and
/// with gradient checkpointing.
#[test]
fn padding_free_trains_as_padded_batches_do() {
    let dir = tempfile::tempdir().unwrap();
    let cls = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let mlm = shards(dir.path(), "pipelines/imdb-pretrain.yaml", &[]);
    let packed_dir = dir.path().join("packed");
    std::fs::create_dir(&packed_dir).unwrap();
    let packed = shards(&packed_dir, "pipelines/imdb-pretrain.yaml", &["--set", "steps[7].nsp=false"]);
    let series =
        |out: &Path, key: &str| -> Vec<f64> { metrics(out).iter().filter_map(|r| r.get(key)?.as_f64()).collect() };
    let cases: [(&str, &Path, &[&str]); 4] = [
        ("pipelines/imdb-finetune.yaml", &cls, &["per_device_train_batch_size=8", "group_by_length=false"]),
        ("pipelines/imdb-finetune.yaml", &cls, &["per_device_train_batch_size=4", "gradient_checkpointing=true"]),
        ("pipelines/imdb-mlm.yaml", &mlm, &["per_device_train_batch_size=8"]),
        ("pipelines/imdb-mlm.yaml", &packed, &["per_device_train_batch_size=4", "attention=block_diagonal"]),
    ];
    let settings = ["max_steps=3", "logging_steps=1", "eval_steps=3", "save_steps=3"];
    let keys = ["loss", "grad_norm", "eval_loss", "eval_accuracy", "eval_mlm_loss", "eval_nsp_loss"];
    let pairs = trains_alike(dir.path(), &cases, &settings, "padding_free=true", &keys);
    for ((config, _, extra), (padded, free)) in cases.iter().zip(pairs) {
        assert_eq!(series(&padded, "loss").len(), 3, "{config} {extra:?}");
        // Not vacuous: the padded run padded, the padding-free one did not.
        assert!(
            series(&padded, "padding").iter().any(|&p| p > 0.0),
            "{config} {extra:?}: {:?}",
            series(&padded, "padding")
        );
        assert!(series(&free, "padding").iter().all(|&p| p == 0.0), "{config} {extra:?}");
        assert!(!series(&padded, "eval_loss").is_empty(), "{config} {extra:?}");
    }
}

/// `max_tokens_per_batch`: every batch of the dry run's table is within the budget (padded:
/// rows × the longest row; padding-free: the rows' tokens) or one row alone, each epoch draws
/// every row once, epochs may have different batch counts and the steps number on across them;
/// a budgeted run trains that many steps over two epochs, and is resumed exactly.
#[test]
fn a_token_budget_bounds_every_batch_and_keeps_the_order_and_resume_guarantees() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let rows = common::manifest(&data)["splits"]["train"]["rows"].as_u64().unwrap() as usize;
    let budget = 1500;
    let mut totals = Vec::new();
    for free in [false, true] {
        let settings =
            [format!("max_tokens_per_batch={budget}"), format!("padding_free={free}"), "num_train_epochs=2".into()];
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        let out = dir.path().join(format!("plan-{free}"));
        let mut counts = Vec::new();
        let mut last_step = 0;
        for epoch in 0..2 {
            let range = format!("{epoch}:0..100000");
            let o = train_flags(
                "pipelines/imdb-finetune.yaml",
                &data,
                &out,
                &settings,
                &["--dry-run", "--show-batches", &range],
                &[],
            );
            assert_ok(&o);
            let text = String::from_utf8(o.stdout).unwrap();
            assert!(text.contains(&format!("at most {budget} tokens")), "{text}");
            let table = text.split("epoch\tbatch\tstep\trow\tid\tlabel\ttokens\n").nth(1).unwrap();
            let mut batches: std::collections::BTreeMap<u64, (u64, Vec<usize>)> = Default::default();
            let mut seen = vec![0; rows];
            for line in table.lines() {
                let f: Vec<&str> = line.split('\t').collect();
                let (batch, step, row, tokens): (u64, u64, usize, usize) =
                    (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap(), f[6].parse().unwrap());
                batches.entry(batch).or_insert((step, Vec::new())).1.push(tokens);
                seen[row] += 1;
            }
            assert!(seen.iter().all(|&n| n == 1), "free {free} epoch {epoch}: every row once");
            for (b, (step, lens)) in &batches {
                let cost = if free { lens.iter().sum() } else { lens.len() * lens.iter().max().unwrap() };
                assert!(cost <= budget || lens.len() == 1, "free {free} epoch {epoch} batch {b}: {lens:?}");
                assert!(lens.len() <= 16, "at most per_device_train_batch_size rows");
                assert_eq!(*step, last_step + 1, "steps number on across epochs");
                last_step = *step;
            }
            counts.push(batches.len());
        }
        totals.push(counts.iter().sum::<usize>());
        let o = train_flags("pipelines/imdb-finetune.yaml", &data, &out, &settings, &["--dry-run"], &[]);
        let plan = String::from_utf8(o.stdout).unwrap();
        let total: usize = counts.iter().sum();
        assert!(plan.contains(&format!("{total} optimiser steps")), "{counts:?}\n{plan}");
    }
    // Padding-free batches hold more rows under the same budget: fewer of them.
    assert!(totals[1] < totals[0], "batches padded, padding-free: {totals:?}");
    // Trained over the epoch boundary, and resumed exactly: with one window (length grouping
    // over the whole sample) and with many (shuffled batches: a window is a batch's rows, and
    // under the budget it holds several batches, so the resume point is found by counting).
    for (k, group) in ["true", "false"].into_iter().enumerate() {
        let group = format!("group_by_length={group}");
        let settings = [
            "max_tokens_per_batch=1500",
            "padding_free=true",
            "num_train_epochs=2",
            "logging_steps=1",
            "eval_split=none",
            "save_steps=5",
            "per_device_train_batch_size=32",
            &group,
        ];
        let whole = dir.path().join(format!("whole{k}"));
        assert_ok(&train("pipelines/imdb-finetune.yaml", &data, &whole, &settings, &[]));
        let parts = dir.path().join(format!("parts{k}"));
        let o = train("pipelines/imdb-finetune.yaml", &data, &parts, &settings, &[("BERTPIPE_STOP_AT_STEP", "7")]);
        assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
        assert_ok(&train_flags("pipelines/imdb-finetune.yaml", &data, &parts, &settings, &["--resume"], &[]));
        let key = |r: &Value| (r["step"].clone(), r["epoch"].clone(), r["loss"].clone(), r["grad_norm"].clone());
        let (a, b): (Vec<_>, Vec<_>) =
            (metrics(&whole).iter().map(key).collect(), metrics(&parts).iter().map(key).collect());
        assert_eq!(a, b, "{group}: a budgeted run after --resume differs from the uninterrupted one");
        assert_eq!(a.last().unwrap().1.as_f64(), Some(2.0), "{group}: two whole epochs: {:?}", a.last());
        // A --show-batches range from the middle is that part of the range from the start.
        let show = |range: &str| -> Vec<String> {
            let flags = ["--dry-run", "--show-batches", range];
            let o = train_flags("pipelines/imdb-finetune.yaml", &data, &whole, &settings, &flags, &[]);
            assert_ok(&o);
            let text = String::from_utf8(o.stdout).unwrap();
            let table = text.split("epoch\tbatch\tstep\trow\tid\tlabel\ttokens\n").nth(1).unwrap();
            table.lines().map(str::to_string).collect()
        };
        let all = show("1:0..12");
        let batch_of = |l: &String| l.split('\t').nth(1).unwrap().parse::<u64>().unwrap();
        let tail: Vec<String> = all.iter().filter(|l| batch_of(l) >= 5).cloned().collect();
        assert!(!tail.is_empty());
        assert_eq!(show("1:5..12"), tail, "{group}");
    }
}

/// A model without token types (ModernBERT) trains on shards of a BERT vocab.txt (whose pairs
/// would give type 1) when their rows hold no pairs: classification rows and MLM-only rows are
/// one segment of type 0 each. Next-sentence rows are refused, naming the tokenizer to use.
#[test]
fn a_model_without_token_types_fine_tunes_on_bert_vocabulary_shards() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let fixture = common::root().join("tests/fixtures/tiny-modernbert-cls/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    config["vocab_size"] = 30522.into();
    config["max_position_embeddings"] = 512.into();
    config["pad_token_id"] = 0.into();
    let path = dir.path().join("modernbert.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let model = format!("model.config={}", path.display());
    let settings = ["model.preset=null", &model, "max_steps=2", "eval_split=none", "per_device_train_batch_size=4"];
    let out = dir.path().join("mb");
    assert_ok(&train("pipelines/imdb-finetune.yaml", &data, &out, &settings, &[]));
    assert!(out.join("final/config.json").exists());
    let mlm = shards(dir.path(), "pipelines/imdb-pretrain.yaml", &["--set", "steps[7].nsp=false"]);
    let out = dir.path().join("mlm");
    assert_ok(&train("pipelines/imdb-mlm.yaml", &mlm, &out, &settings, &[]));
    // Not vacuous: those rows really are all type 0.
    use arrow_array::cast::AsArray;
    let files = common::shard_files(&mlm.join("train"));
    assert!(!files.is_empty());
    for batch in files.iter().flat_map(|f| common::read_parquet(f)) {
        let types = batch.column_by_name("token_type_ids").unwrap().as_list::<i32>();
        assert!(types.values().as_primitive::<arrow_array::types::Int8Type>().values().iter().all(|&t| t == 0));
    }
    let nsp_dir = dir.path().join("nsp");
    std::fs::create_dir(&nsp_dir).unwrap();
    let nsp = shards(&nsp_dir, "pipelines/imdb-pretrain.yaml", &[]);
    let o = train("pipelines/imdb-mlm.yaml", &nsp, &dir.path().join("nsp-out"), &settings, &[]);
    assert!(!o.status.success() && stderr(&o).contains("has no token types"), "{}", stderr(&o));
}

#[test]
fn a_nan_loss_stops_with_the_step_and_keeps_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let out = dir.path().join("nan");
    let settings = ["max_steps=5", "save_steps=1", "eval_split=none", "per_device_train_batch_size=4"];
    let o = train("pipelines/imdb-finetune.yaml", &data, &out, &settings, &[("BERTPIPE_NAN_AT_STEP", "3")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("loss is NaN at step 3"), "{err}");
    assert!(err.contains("checkpoint-2") && err.contains("intact"), "{err}");
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("checkpoint-2/trainer_state.json")).unwrap()).unwrap();
    assert_eq!(state["global_step"], 2);
    assert!(!out.join("checkpoint-3").exists() && !out.join("final").exists());
}

#[test]
fn a_checkpoint_with_another_vocabulary_is_refused_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let ckpt = root().join("tests/fixtures/tiny-bert-cls");
    let init = format!("model.init_from={}", ckpt.display());
    let o = train("pipelines/imdb-finetune.yaml", &data, &dir.path().join("x"), &["model.preset=null", &init], &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("vocab mismatch"), "{err}");
    assert!(err.contains("bert-base-uncased.txt") && err.contains("tiny-bert-cls/vocab.txt"), "{err}");
}

#[test]
fn configuration_errors_are_located_with_suggestions() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("t.yaml");
    std::fs::write(
        &yaml,
        "task: classify\ndata: nowhere\nmodel:\n  preset: tiy\noutput_dir: out\nlearning_rat: 1e-3\n",
    )
    .unwrap();
    let o = bertpipe(&["train", yaml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(78));
    let err = stderr(&o);
    assert!(
        err.contains("t.yaml:6:1: unknown field `learning_rat`") && err.contains("did you mean `learning_rate`?"),
        "{err}"
    );

    std::fs::write(&yaml, "task: classify\ndata: nowhere\nmodel:\n  preset: tiy\noutput_dir: out\n").unwrap();
    let err = stderr(&bertpipe(&["train", yaml.to_str().unwrap()]));
    assert!(err.contains("t.yaml:2:7: data:") && err.contains("no manifest.json"), "{err}");
    assert!(err.contains("t.yaml:4:11: model.preset: unknown preset `tiy`, did you mean `tiny`?"), "{err}");

    let o = bertpipe(&["train", "pipelines/imdb-finetune.yaml", "--set", "task=clasify"]);
    assert_eq!(o.status.code(), Some(78));
    assert!(stderr(&o).contains("did you mean `classify`?"), "{}", stderr(&o));
}

#[test]
fn pretraining_lowers_the_mlm_loss_and_checkpoints_load_as_classifiers() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb-pretrain.yaml", &[]);
    let out = dir.path().join("mlm");
    assert_ok(&train("pipelines/imdb-mlm.yaml", &data, &out, &["max_steps=60", "eval_steps=60", "save_steps=60"], &[]));
    let log = metrics(&out);
    let losses: Vec<f64> = log.iter().filter_map(|r| r.get("loss")?.as_f64()).collect();
    assert!(losses[0] - losses.last().unwrap() > 2.0, "MLM+NSP loss did not fall clearly: {losses:?}");
    let eval = log.iter().rev().find(|r| r.get("eval_mlm_accuracy").is_some()).unwrap();
    for key in ["eval_mlm_loss", "eval_perplexity", "eval_nsp_accuracy", "eval_nsp_loss"] {
        assert!(eval.get(key).is_some(), "{key}: {eval}");
    }
    let config: Value = serde_json::from_str(&std::fs::read_to_string(out.join("final/config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "BertForPreTraining");

    // Classification shards, wrong task: refused with what to do.
    let o = train("pipelines/imdb-finetune.yaml", &data, &dir.path().join("wrong"), &[], &[]);
    assert!(stderr(&o).contains("holds `pretrain` shards"), "{}", stderr(&o));

    // The pretrained encoder fine-tunes: classifier initialised, MLM/NSP heads listed as unused.
    let cls = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let init = format!("model.init_from={}", out.join("final").display());
    let o = train(
        "pipelines/imdb-finetune.yaml",
        &cls,
        &dir.path().join("ft"),
        &["model.preset=null", &init, "max_steps=2", "eval_split=none"],
        &[],
    );
    assert_ok(&o);
    let err = stderr(&o);
    assert!(err.contains("initialised (not in the checkpoint): classifier.weight, classifier.bias"), "{err}");
    assert!(err.contains("not used from the checkpoint: cls.predictions.bias"), "{err}");
}

#[test]
fn dynamic_masking_and_packed_rows_with_block_diagonal_attention_train() {
    let dir = tempfile::tempdir().unwrap();
    let packed = shards(
        dir.path(),
        "pipelines/imdb-pretrain.yaml",
        &["--set", "steps[7].nsp=false", "--set", "steps[7].masking=dynamic"],
    );
    let out = dir.path().join("packed");
    let o = train(
        "pipelines/imdb-mlm.yaml",
        &packed,
        &out,
        &["max_steps=4", "eval_steps=4", "save_steps=4", "attention=block_diagonal", "per_device_train_batch_size=8"],
        &[],
    );
    assert_ok(&o);
    let config: Value = serde_json::from_str(&std::fs::read_to_string(out.join("final/config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "BertForMaskedLM");
    let eval = metrics(&out).into_iter().rev().find(|r| r.get("eval_mlm_loss").is_some()).unwrap();
    assert!(eval["eval_mlm_loss"].as_f64().unwrap().is_finite() && eval.get("eval_nsp_loss").is_none(), "{eval}");
}

#[test]
fn dry_run_prints_the_plan_and_the_batches_training_draws_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let out = dir.path().join("plan");
    let show = |range: &str| -> Vec<String> {
        let o =
            train_flags("pipelines/imdb-finetune.yaml", &data, &out, &[], &["--dry-run", "--show-batches", range], &[]);
        assert_ok(&o);
        let text = String::from_utf8(o.stdout).unwrap();
        let table = text.split("epoch\tbatch\tstep\trow\tid\tlabel\ttokens\n").nth(1).unwrap_or_default().to_string();
        table.lines().map(str::to_string).collect()
    };
    let o = train_flags("pipelines/imdb-finetune.yaml", &data, &out, &[], &["--dry-run"], &[]);
    assert_ok(&o);
    let plan = String::from_utf8(o.stdout).unwrap();
    let rows = common::manifest(&data)["splits"]["train"]["rows"].as_u64().unwrap();
    for want in [
        format!("permutation of all {rows} rows (seed 42)"),
        format!("{} per epoch", rows.div_ceil(16)),
        format!("{} optimiser steps (3.00 epochs", 3 * rows.div_ceil(16)),
        "BertForSequenceClassification, 2 layers, hidden 128".into(),
        "eval        split `test`".into(),
        "nothing was trained".into(),
    ] {
        assert!(plan.contains(&want), "{want:?} not in\n{plan}");
    }
    assert!(!out.exists(), "a dry run writes nothing into output_dir");
    assert!(plan.contains("peak RSS, evaluation and checkpoints included"), "{plan}");
    assert!(!plan.contains("warning"), "{plan}");

    // On a machine with less memory than the estimate: a warning with the settings that fit.
    let o = train_flags(
        "pipelines/imdb-finetune.yaml",
        &data,
        &out,
        &[],
        &["--dry-run"],
        &[("BERTPIPE_MEMORY_AVAILABLE", "100000000")],
    );
    assert_ok(&o);
    let plan = String::from_utf8(o.stdout).unwrap();
    let warning = plan.lines().find(|l| l.starts_with("warning")).unwrap_or_else(|| panic!("no warning in\n{plan}"));
    assert!(warning.contains("is more than this machine's available memory (95.37 MiB)"), "{warning}");
    assert!(warning.contains("gradient_checkpointing: true (≈"), "{warning}");
    let o = train_flags(
        "pipelines/imdb-finetune.yaml",
        &data,
        &out,
        &["gradient_checkpointing=true"],
        &["--dry-run"],
        &[("BERTPIPE_MEMORY_AVAILABLE", "1000000")],
    );
    let plan = String::from_utf8(o.stdout).unwrap();
    assert!(plan.contains("(gradient checkpointing)") && plan.contains("no single setting brings it under"), "{plan}");

    // A whole epoch shows each row once; a part of it is those lines of the whole.
    let per_epoch = rows.div_ceil(16);
    let whole = show(&format!("0:0..{per_epoch}"));
    assert_eq!(whole.len() as u64, rows);
    let mut seen: Vec<u64> = whole.iter().map(|l| l.split('\t').nth(3).unwrap().parse().unwrap()).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..rows).collect::<Vec<_>>());
    let part = show("0:3..=4");
    let batch_of = |l: &String| l.split('\t').nth(1).unwrap().parse::<u64>().unwrap();
    let expected: Vec<String> = whole.iter().filter(|l| (3..5).contains(&batch_of(l))).cloned().collect();
    assert_eq!(part, expected);
    assert_ne!(show("1:3..=4"), part, "another epoch, another order");
    assert!(part[0].starts_with("0\t3\t4\t"), "batch 3 feeds optimiser step 4: {}", part[0]);

    let o = train_flags(
        "pipelines/imdb-finetune.yaml",
        &data,
        &out,
        &[],
        &["--dry-run", "--show-batches", "0:999..1000"],
        &[],
    );
    assert!(!o.status.success() && stderr(&o).contains("epoch 0 has"), "{}", stderr(&o));
    let o = bertpipe(&["train", "pipelines/imdb-finetune.yaml", "--show-batches", "0:1..2"]);
    assert!(!o.status.success() && stderr(&o).contains("--dry-run"), "{}", stderr(&o));
}

#[test]
fn early_stopping_class_weights_and_tensorboard_events() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    // Accuracy cannot improve by more than 1: the second evaluation stops the run.
    let out = dir.path().join("early");
    let o = train(
        "pipelines/imdb-finetune.yaml",
        &data,
        &out,
        &["early_stopping_patience=1", "early_stopping_threshold=1.0", "report_to=tensorboard"],
        &[],
    );
    assert_ok(&o);
    let rows = common::manifest(&data)["splits"]["train"]["rows"].as_u64().unwrap();
    let per_epoch = rows.div_ceil(16);
    let err = stderr(&o);
    assert!(err.contains(&format!("stopped early at step {} of {}", 2 * per_epoch, 3 * per_epoch)), "{err}");
    assert!(err.contains("precision") && err.contains("support") && err.contains("\nneg "), "per-class table: {err}");
    assert!(out.join("final/model.safetensors").exists());
    let evals = metrics(&out).into_iter().filter(|r| r.get("eval_accuracy").is_some()).count();
    assert_eq!(evals, 2);
    let events: Vec<_> = std::fs::read_dir(out.join("runs")).unwrap().flatten().collect();
    assert_eq!(events.len(), 1);
    let bytes = std::fs::read(events[0].path()).unwrap();
    for tag in [&b"train/loss"[..], b"train/learning_rate", b"eval/accuracy", b"brain.Event:2"] {
        assert!(bytes.windows(tag.len()).any(|w| w == tag), "{}", String::from_utf8_lossy(tag));
    }

    // Equal class weights train as no weights; `balanced` says what it chose.
    let first_loss = |extra: &[&str], name: &str| -> f64 {
        let out = dir.path().join(name);
        let mut settings = vec!["max_steps=1", "logging_steps=1", "eval_split=none"];
        settings.extend_from_slice(extra);
        let o = train("pipelines/imdb-finetune.yaml", &data, &out, &settings, &[]);
        assert_ok(&o);
        if extra.contains(&"class_weights=balanced") {
            assert!(stderr(&o).contains("note: class weights: neg "), "{}", stderr(&o));
        }
        metrics(&out).iter().find_map(|r| r.get("loss")?.as_f64()).unwrap()
    };
    let plain = first_loss(&[], "plain");
    let equal = first_loss(&["class_weights=[2.0, 2.0]"], "equal");
    assert!((plain - equal).abs() < 1e-5, "{plain} vs {equal}");
    let balanced = first_loss(&["class_weights=balanced"], "balanced");
    assert!(balanced.is_finite());
    let o = train("pipelines/imdb-finetune.yaml", &data, &dir.path().join("w3"), &["class_weights=[1, 2, 3]"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("3 weights, but the shards have 2 classes"), "{}", stderr(&o));

    // Evaluation strategies: `no` evaluates nothing; `steps` needs eval_steps.
    let out = dir.path().join("no-eval");
    assert_ok(&train("pipelines/imdb-finetune.yaml", &data, &out, &["max_steps=3", "eval_strategy=no"], &[]));
    assert!(metrics(&out).iter().all(|r| r.get("eval_accuracy").is_none()));
    let o = train("pipelines/imdb-finetune.yaml", &data, &dir.path().join("x"), &["eval_strategy=steps"], &[]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("eval_steps"), "{}", stderr(&o));
}

/// A path given with `--set` is relative to the current directory (here the checkout, as in
/// the README's pretrain → fine-tune command); one written in the YAML, to the YAML's folder.
#[test]
fn set_paths_are_relative_to_the_current_directory() {
    let out = root().join("out/test-set-paths");
    let _ = std::fs::remove_dir_all(&out);
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &out, &[]));
    // The README's form: relative to where the command runs, not to pipelines/.
    let o = bertpipe(&["train", "pipelines/imdb-finetune.yaml", "--set", "data=out/test-set-paths", "--dry-run"]);
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("'{}'", out.display())));
    let o = bertpipe(&[
        "train",
        "pipelines/imdb-finetune.yaml",
        "--set",
        "model.preset=null",
        "--set",
        "model.init_from=out/nowhere",
        "--dry-run",
    ]);
    assert!(
        stderr(&o).contains(&format!("'{}' does not exist", root().join("out/nowhere").display())),
        "{}",
        stderr(&o)
    );
    // The pipeline's own paths, and `--set` ones, from another directory.
    let elsewhere = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_bertpipe"))
        .args([
            "pipeline",
            "run",
            root().join("pipelines/imdb.yaml").to_str().unwrap(),
            "--quiet",
            "--set",
            "sink.path=shards",
        ])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(elsewhere.path().join("shards/manifest.json").exists(), "sink.path relative to the current directory");
    let _ = std::fs::remove_dir_all(&out);
}

/// What a launcher sets for rank 1 of 2, given to a bertpipe built without MPI: one error that
/// names the rank and says how to build with MPI; the chain and `pipeline run` refuse to run as
/// ranks.
#[cfg(not(feature = "mpi"))]
#[test]
fn ranks_without_mpi_are_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let out = dir.path().join("ranks");
    let env = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_LOCAL_RANK", "1")];
    let o = train("pipelines/imdb-finetune.yaml", &data, &out, &[], &env);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("error: rank 1 of 2 (mpirun): mpirun started 2 ranks, but this bertpipe was built without MPI"),
        "{err}"
    );
    assert!(err.contains("--features mpi") && err.lines().count() == 1, "{err}");
    assert!(!out.exists(), "nothing written");
    let torchrun = [("RANK", "0"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "0")];
    let o = bertpipe_env(&["run", "pipelines/imdb-experiment.yaml", "--dry-run"], &torchrun);
    let err = stderr(&o);
    assert!(
        !o.status.success() && err.contains("rank 0 of 4 (torchrun): `bertpipe run` does not run under a launcher"),
        "{err}"
    );
    // `pipeline run` as ranks would race on one output folder.
    let o = bertpipe_env(
        &["pipeline", "run", "pipelines/imdb.yaml", "--set", &format!("sink.path={}", dir.path().join("p").display())],
        &env,
    );
    let err = stderr(&o);
    assert!(
        !o.status.success()
            && err.contains("rank 1 of 2 (mpirun): `bertpipe pipeline run` does not run under a launcher")
            && err.contains("task array"),
        "{err}"
    );
    assert!(!dir.path().join("p").exists(), "nothing written");
    // `export onnx` and `eval` too: every rank wrote the same --out.
    let model = dir.path().join("m.onnx");
    for args in [
        vec!["export", "onnx", "--checkpoint", "nowhere", "--out", model.to_str().unwrap()],
        vec!["eval", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap()],
    ] {
        let o = bertpipe_env(&args, &env);
        let err = stderr(&o);
        let what = format!(
            "rank 1 of 2 (mpirun): `bertpipe {}` does not run under a launcher",
            args[..args.len() - 4].join(" ")
        );
        assert!(!o.status.success() && err.contains(&what), "{what}: {err}");
    }
    assert!(!model.exists(), "nothing written");
}

/// `bertpipe … | head -1`: when the reader stops, bertpipe ends quietly (SIGPIPE), not with a
/// panic about a broken pipe.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path(), "pipelines/imdb.yaml", &[]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bertpipe"))
        .args(["train", "pipelines/imdb-finetune.yaml", "--dry-run", "--show-batches", "0:0..19"])
        .args(["--set", &format!("data={}", data.display())])
        .args(["--set", &format!("output_dir={}", dir.path().join("never").display())])
        .args(["--set", "per_device_train_batch_size=1"])
        .current_dir(common::root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before bertpipe has written anything (it opens and checks the
    // shards first): its first write finds the pipe closed.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{err}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?} {err}", out.status);
}
