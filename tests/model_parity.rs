//! Our candle BERT against PyTorch `transformers` (golden fixtures from
//! `scripts/make_golden_model.py`): hidden states, every head's logits, losses, gradients after
//! one backward, and parameters after one clipped AdamW step — within 1e-5.

use std::path::{Path, PathBuf};

use bertpipe::model::bert::{ForwardPass, Inputs};
use bertpipe::model::{BertWithHead, ModelKind};
use bertpipe::train::optim::{clip_coefficient, AdamW};
use candle_core::{DType, Device, Tensor};
use serde_json::Value;

const TOL: f64 = 1e-5;
/// After several optimiser steps: float differences of each step carry into the next.
const TOL_STEPS: f64 = 1e-4;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn golden() -> Value {
    golden_of("golden_model.json")
}

fn golden_of(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(file)).unwrap()).unwrap()
}

fn ints(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32))
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(xs) => xs.iter().flat_map(floats).collect(),
        Value::Number(n) => vec![n.as_f64().unwrap()],
        _ => panic!("not a number: {v}"),
    }
}

/// Within `tol` absolutely, and within 1e-4 of the reference's own scale (gradients deep in a
/// small random model are ~1e-6: an absolute bound alone would accept anything there).
fn close(what: &str, ours: &[f64], theirs: &[f64], tol: f64) {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths differ");
    let worst = bertpipe::metrics::max_abs_diff(ours, theirs);
    let scale = bertpipe::metrics::max_abs(theirs);
    assert!(scale > 0.0, "{what}: the reference is all zeros; the test would prove nothing");
    assert!(worst <= tol, "{what}: max |Δ| {worst:e} > {tol:e}");
    assert!(worst <= 1e-4 * scale, "{what}: max |Δ| {worst:e} is more than 1e-4 of the values' scale {scale:e}");
}

fn tensor_f64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

fn inputs(g: &Value) -> (Inputs, usize, usize) {
    let ids = ints(&g["input_ids"]);
    let b = g["input_ids"].as_array().unwrap().len();
    let s = ids.len() / b;
    let inputs =
        Inputs::new(&ids, &ints(&g["token_type_ids"]), &ints(&g["attention_mask"]), b, s, &Device::Cpu).unwrap();
    (inputs, b, s)
}

/// The fixture's MLM positions `(row, position)` as flat indices into `batch × seq`.
fn mlm_positions(g: &Value, seq: usize) -> Tensor {
    let pos: Vec<u32> = g["mlm_positions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_u64().unwrap() as usize * seq + p[1].as_u64().unwrap() as usize) as u32)
        .collect();
    Tensor::from_slice(&pos, pos.len(), &Device::Cpu).unwrap()
}

fn load(kind: ModelKind, name: &str) -> BertWithHead {
    let m = BertWithHead::from_checkpoint(kind, &fixtures().join(name), None, &Device::Cpu, 0).unwrap();
    assert!(m.initialised.is_empty(), "{name}: initialised {:?}", m.initialised);
    assert!(m.unexpected.is_empty(), "{name}: unexpected {:?}", m.unexpected);
    m
}

#[test]
fn hidden_states_and_pretraining_heads_match_transformers() {
    let g = golden();
    let m = load(ModelKind::PreTraining, "tiny-bert-pretrain");
    let (inputs, _, s) = inputs(&g);
    let hidden = m.encoder.forward(&inputs, &mut ForwardPass::eval()).unwrap();
    close("last_hidden_state", &tensor_f64(&hidden), &floats(&g["hidden"]), TOL);

    let pos_t = mlm_positions(&g, s);
    let out = m.forward(&inputs, Some(&pos_t), &mut ForwardPass::eval()).unwrap();
    let mlm = out.mlm_logits.unwrap();
    close("prediction_logits", &tensor_f64(&mlm), &floats(&g["mlm_logits"]), TOL);
    let nsp = out.logits.unwrap();
    close("seq_relationship_logits", &tensor_f64(&nsp), &floats(&g["nsp_logits"]), TOL);

    let ce = |logits: &Tensor, labels: &Value| {
        let l: Vec<u32> = labels.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let t = Tensor::from_slice(&l, l.len(), &Device::Cpu).unwrap();
        candle_nn::loss::cross_entropy(logits, &t).unwrap().to_scalar::<f32>().unwrap() as f64
    };
    let loss = ce(&mlm, &g["mlm_labels"]) + ce(&nsp, &g["nsp_labels"]);
    close("pretraining loss", &[loss], &[g["pretrain_loss"].as_f64().unwrap()], TOL);
}

#[test]
fn classifier_logits_gradients_and_one_adamw_step_match_pytorch() {
    classifier_step(&golden(), "tiny-bert-cls", TOL);
}

/// RoBERTa (scripts/make_golden_roberta.py): no pooler, `RobertaClassificationHead` on `<s>`,
/// position ids from `pad + 1` over the real tokens, the padding rows of the word and position
/// embeddings without gradient.
#[test]
fn roberta_classifier_logits_gradients_and_one_adamw_step_match_pytorch() {
    // The step itself within 1e-4 (the bar for model outputs), not 1e-5: one element of the
    // classifier's dense weight lands 1.04e-5 away — an Adam update m/(√v + ε) of a gradient
    // near ε carries the f32 difference of the grad norm (17.6, 1.6e-6 relative) through.
    classifier_step(&golden_of("golden_roberta.json"), "tiny-roberta-cls", TOL_STEPS);
}

/// A family's MLM checkpoint against its golden file: the class, last hidden states, MLM logits
/// and loss, and no NSP head.
fn mlm_matches_transformers(golden: &str, checkpoint: &str, architecture: &str) {
    let g = golden_of(golden);
    let m = load(ModelKind::MaskedLm, checkpoint);
    assert_eq!(m.config.architectures.as_deref(), Some(&[architecture.to_string()][..]));
    let (inputs, _, s) = inputs(&g);
    let hidden = m.encoder.forward(&inputs, &mut ForwardPass::eval()).unwrap();
    close("last_hidden_state", &tensor_f64(&hidden), &floats(&g["hidden"]), TOL);
    let out = m.forward(&inputs, Some(&mlm_positions(&g, s)), &mut ForwardPass::eval()).unwrap();
    let mlm = out.mlm_logits.unwrap();
    close("MLM logits", &tensor_f64(&mlm), &floats(&g["mlm_logits"]), TOL);
    assert!(out.logits.is_none(), "{architecture} has no NSP head");
    let l: Vec<u32> = g["mlm_labels"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let t = Tensor::from_slice(&l, l.len(), &Device::Cpu).unwrap();
    let loss = candle_nn::loss::cross_entropy(&mlm, &t).unwrap().to_scalar::<f32>().unwrap() as f64;
    close("MLM loss", &[loss], &[g["mlm_loss"].as_f64().unwrap()], TOL);
}

#[test]
fn roberta_hidden_states_mlm_logits_and_loss_match_transformers() {
    mlm_matches_transformers("golden_roberta.json", "tiny-roberta-mlm", "RobertaForMaskedLM");
    // Without padding the ids of the positions are 2, 3, …: a row's hidden states do not
    // depend on how much padding follows it.
    let ids = Tensor::from_slice(&[0u32, 7, 1, 1, 1, 5, 6, 2], (2, 4), &Device::Cpu).unwrap();
    let positions = bertpipe::model::bert::roberta_position_ids(&ids, 1).unwrap();
    let positions: Vec<u32> = positions.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(positions, vec![2, 3, 1, 1, 1, 2, 3, 4]);
}

/// Padding-free batches (one stream of real tokens, attention within each row) against
/// PyTorch's padded ones, for each family: the real tokens' hidden states, the MLM logits at
/// the same positions and (BERT) the NSP logits, within 1e-5.
#[test]
fn padding_free_batches_match_transformers_for_every_family() {
    let cases = [
        ("golden_model.json", "tiny-bert-pretrain", ModelKind::PreTraining),
        ("golden_roberta.json", "tiny-roberta-mlm", ModelKind::MaskedLm),
        ("golden_modernbert.json", "tiny-modernbert-mlm", ModelKind::MaskedLm),
    ];
    for (golden, checkpoint, kind) in cases {
        let g = golden_of(golden);
        let m = load(kind, checkpoint);
        let (ids, types, mask) = (ints(&g["input_ids"]), ints(&g["token_type_ids"]), ints(&g["attention_mask"]));
        let (padded, b, s) = inputs(&g);
        assert!(mask.contains(&0), "{golden}: the fixture's batch has no padding; the test would prove nothing");
        let free = padded.into_packed(&ids, &types, &mask).unwrap();
        let hidden = m.encoder.forward(&free, &mut ForwardPass::eval()).unwrap();
        let theirs = floats(&g["hidden"]);
        let h = theirs.len() / (b * s);
        let real: Vec<f64> =
            (0..b * s).filter(|&i| mask[i] == 1).flat_map(|i| theirs[i * h..(i + 1) * h].to_vec()).collect();
        close(&format!("{checkpoint}: padding-free hidden states"), &tensor_f64(&hidden), &real, TOL);
        let padded_positions: Vec<u32> = tensor_f64(&mlm_positions(&g, s)).iter().map(|&p| p as u32).collect();
        let at: Vec<u32> = padded_positions.iter().map(|&p| free.token_index(p)).collect();
        let at = Tensor::from_vec(at, padded_positions.len(), &Device::Cpu).unwrap();
        let out = m.forward(&free, Some(&at), &mut ForwardPass::eval()).unwrap();
        close(
            &format!("{checkpoint}: padding-free MLM logits"),
            &tensor_f64(&out.mlm_logits.unwrap()),
            &floats(&g["mlm_logits"]),
            TOL,
        );
        if let Some(nsp) = out.logits {
            close(&format!("{checkpoint}: padding-free NSP logits"), &tensor_f64(&nsp), &floats(&g["nsp_logits"]), TOL);
        }
    }
}

#[test]
fn roberta_several_scheduled_adamw_steps_match_pytorch() {
    scheduled_steps(&golden_of("golden_roberta.json"), "tiny-roberta-cls");
}

#[test]
fn roberta_has_no_next_sentence_head_and_round_trips() {
    let dir = fixtures().join("tiny-roberta-mlm");
    let err = BertWithHead::from_checkpoint(ModelKind::PreTraining, &dir, None, &Device::Cpu, 0).err().unwrap();
    assert!(format!("{err:#}").contains("nsp: false"), "{err:#}");
    let m = load(ModelKind::SequenceClassification, "tiny-roberta-cls");
    let out = tempfile::tempdir().unwrap();
    m.save(out.path()).unwrap();
    let again =
        BertWithHead::from_checkpoint(ModelKind::SequenceClassification, out.path(), None, &Device::Cpu, 0).unwrap();
    assert!(again.initialised.is_empty() && again.unexpected.is_empty());
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "RobertaForSequenceClassification");
    assert_eq!(config["model_type"], "roberta");
    // The MLM checkpoint as a classifier: the head is new, `lm_head.*` unused.
    let m = BertWithHead::from_checkpoint(ModelKind::SequenceClassification, &dir, None, &Device::Cpu, 0).unwrap();
    assert_eq!(
        m.initialised,
        vec![
            "classifier.dense.weight",
            "classifier.dense.bias",
            "classifier.out_proj.weight",
            "classifier.out_proj.bias"
        ]
    );
    assert!(m.unexpected.iter().all(|n| n.starts_with("lm_head.")) && !m.unexpected.is_empty(), "{:?}", m.unexpected);
}

fn classifier_step(g: &Value, checkpoint: &str, step_tol: f64) {
    let m = load(ModelKind::SequenceClassification, checkpoint);
    let (inputs, _, _) = inputs(g);
    // Dropout is 0 in the fixture's config, so training mode computes what PyTorch did.
    let logits = m.forward(&inputs, None, &mut ForwardPass::train(1, 0, Vec::new())).unwrap().logits.unwrap();
    close("logits", &tensor_f64(&logits), &floats(&g["cls_logits"]), TOL);
    // The fixture's rows must be told apart by the comparison many times over, or it would
    // not see the input at all.
    let rows: Vec<Vec<f64>> = g["cls_logits"].as_array().unwrap().iter().map(floats).collect();
    for a in 0..rows.len() {
        for b in a + 1..rows.len() {
            let spread = bertpipe::metrics::max_abs_diff(&rows[a], &rows[b]);
            assert!(spread > 1000.0 * TOL, "golden rows {a} and {b} differ by only {spread:e}");
        }
    }
    let labels: Vec<u32> = g["labels"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let loss = candle_nn::loss::cross_entropy(&logits, &Tensor::from_slice(&labels, 3, &Device::Cpu).unwrap()).unwrap();
    close("loss", &[loss.to_scalar::<f32>().unwrap() as f64], &[g["cls_loss"].as_f64().unwrap()], TOL);

    let grads = m.gradients(&loss.backward().unwrap()).unwrap();
    let index = |name: &str| m.params.vars.iter().position(|(n, _)| n == name).unwrap();
    for (name, want) in g["grads"].as_object().unwrap() {
        close(&format!("grad {name}"), &tensor_f64(&grads[index(name)]), &floats(want), TOL);
    }
    // Every parameter received a gradient.
    for (i, (name, _)) in m.params.vars.iter().enumerate() {
        let norm: f32 = grads[i].sqr().unwrap().sum_all().unwrap().to_scalar().unwrap();
        assert!(norm > 0.0, "{name} got no gradient");
    }

    let step = &g["step"];
    let (norm, coef) = clip_coefficient(&grads, step["max_grad_norm"].as_f64().unwrap()).unwrap();
    // A sum over every parameter's gradient: f32 summation order shows at ~1e-6 of the value
    // (RoBERTa's is 17.6), so the bound is relative here.
    let want_norm = g["grad_norm"].as_f64().unwrap();
    close("grad norm", &[norm], &[want_norm], TOL * want_norm.max(1.0));
    let before: Vec<Vec<f64>> = m.params.vars.iter().map(|(_, v)| tensor_f64(v.as_tensor())).collect();
    // The fused in-place update (CPU) and the tensor-op one (other devices) both equal torch's.
    for fused in [true, false] {
        for (i, (_, v)) in m.params.vars.iter().enumerate() {
            let shape = v.as_tensor().shape().clone();
            v.set(
                &candle_core::Tensor::new(before[i].iter().map(|&x| x as f32).collect::<Vec<_>>(), v.device())
                    .unwrap()
                    .reshape(shape)
                    .unwrap(),
            )
            .unwrap();
        }
        let (b1, b2, eps, wd) = (0.9, 0.999, 1e-8, step["weight_decay"].as_f64().unwrap());
        let mut opt = if fused {
            AdamW::new(&m.params, b1, b2, eps, wd).unwrap()
        } else {
            AdamW::new_tensor_ops(&m.params, b1, b2, eps, wd).unwrap()
        };
        opt.step(&m.params, &grads, step["lr"].as_f64().unwrap(), coef).unwrap();
        for (name, want) in g["after_step"].as_object().unwrap() {
            let var = m.params.get(name).unwrap();
            close(
                &format!("{name} after one AdamW step (fused: {fused})"),
                &tensor_f64(var.as_tensor()),
                &floats(want),
                step_tol,
            );
        }
        // Every parameter moved.
        for (i, (name, v)) in m.params.vars.iter().enumerate() {
            let after = tensor_f64(v.as_tensor());
            assert!(after.iter().zip(&before[i]).any(|(a, b)| a != b), "{name} did not change after one step");
        }
    }
}

/// Five AdamW steps under HF's linear warmup/decay schedule (warmup 2 of 6: learning rates 0,
/// .5, 1, .75, .5 of the base), loss and gradients recomputed each step: the moments carried
/// over, bias correction past the first step (where m̂/√v̂ is only sign(g)), a zero learning
/// rate at step 0 that must still update the moments — against PyTorch's AdamW and scheduler.
#[test]
fn several_scheduled_adamw_steps_match_pytorch() {
    scheduled_steps(&golden(), "tiny-bert-cls");
}

fn scheduled_steps(g: &Value, checkpoint: &str) {
    use bertpipe::train::config::Schedule;
    use bertpipe::train::optim::learning_rate;
    let s = &g["schedule"];
    let (base, wd, clip) =
        (s["lr"].as_f64().unwrap(), s["weight_decay"].as_f64().unwrap(), s["max_grad_norm"].as_f64().unwrap());
    let (warmup, total) = (s["warmup"].as_u64().unwrap(), s["total"].as_u64().unwrap());
    let steps = s["steps"].as_array().unwrap();
    assert!(steps.len() >= 3);
    let (inputs, _, _) = inputs(g);
    let labels: Vec<u32> = g["labels"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let labels = Tensor::from_slice(&labels, 3, &Device::Cpu).unwrap();
    for fused in [true, false] {
        let m = load(ModelKind::SequenceClassification, checkpoint);
        let mut opt = if fused {
            AdamW::new(&m.params, 0.9, 0.999, 1e-8, wd).unwrap()
        } else {
            AdamW::new_tensor_ops(&m.params, 0.9, 0.999, 1e-8, wd).unwrap()
        };
        let mut losses = Vec::new();
        for (i, want) in steps.iter().enumerate() {
            let what = |x: &str| format!("step {i} (fused: {fused}): {x}");
            let logits = m.forward(&inputs, None, &mut ForwardPass::train(1, 0, Vec::new())).unwrap().logits.unwrap();
            let loss = candle_nn::loss::cross_entropy(&logits, &labels).unwrap();
            let l = loss.to_scalar::<f32>().unwrap() as f64;
            close(&what("loss"), &[l], &[want["loss"].as_f64().unwrap()], TOL_STEPS);
            losses.push(l);
            let grads = m.gradients(&loss.backward().unwrap()).unwrap();
            let (norm, coef) = clip_coefficient(&grads, clip).unwrap();
            // Relative, as in `classifier_step`: ModernBERT's norm of 28.1 at step 2 differs by
            // 1.01e-4 (3.6e-6 of it, f32 summation order over every parameter).
            let want_norm = want["grad_norm"].as_f64().unwrap();
            close(&what("grad norm"), &[norm], &[want_norm], TOL_STEPS * want_norm.max(1.0));
            let lr = learning_rate(Schedule::Linear, base, i as u64, warmup, total);
            assert!((lr - want["lr"].as_f64().unwrap()).abs() < 1e-12, "{}: {lr} vs {}", what("lr"), want["lr"]);
            opt.step(&m.params, &grads, lr, coef).unwrap();
            for (name, after) in want["after"].as_object().unwrap() {
                let var = m.params.get(name).unwrap();
                close(&what(name), &tensor_f64(var.as_tensor()), &floats(after), TOL_STEPS);
            }
        }
        assert!(losses.last() < losses.first(), "the steps learn: {losses:?}");
    }
}

#[test]
fn checkpoint_round_trip_keeps_every_tensor() {
    let m = load(ModelKind::SequenceClassification, "tiny-bert-cls");
    let dir = tempfile::tempdir().unwrap();
    m.save(dir.path()).unwrap();
    let again =
        BertWithHead::from_checkpoint(ModelKind::SequenceClassification, dir.path(), None, &Device::Cpu, 0).unwrap();
    assert!(again.initialised.is_empty() && again.unexpected.is_empty());
    for ((n1, a), (n2, b)) in m.params.vars.iter().zip(&again.params.vars) {
        assert_eq!(n1, n2);
        assert_eq!(tensor_f64(a.as_tensor()), tensor_f64(b.as_tensor()), "{n1}");
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "BertForSequenceClassification");
    assert_eq!(config["id2label"]["1"], "pos");
}

#[test]
fn a_bare_encoder_checkpoint_loads_with_heads_initialised_and_listed() {
    // The pretraining checkpoint as a classifier: `classifier.*` is new, `cls.*` unused.
    let m = BertWithHead::from_checkpoint(
        ModelKind::SequenceClassification,
        &fixtures().join("tiny-bert-pretrain"),
        None,
        &Device::Cpu,
        0,
    )
    .unwrap();
    assert_eq!(m.initialised, vec!["classifier.weight", "classifier.bias"]);
    assert!(m.unexpected.iter().any(|n| n == "cls.seq_relationship.weight"), "{:?}", m.unexpected);
}

#[test]
fn a_sentence_transformers_style_checkpoint_without_the_bert_prefix_gives_the_same_hidden_states() {
    // sentence-transformers saves a bare `BertModel`: `embeddings.…`, `encoder.…`, no `bert.`.
    let g = golden();
    let src = fixtures().join("tiny-bert-pretrain");
    let dir = tempfile::tempdir().unwrap();
    let tensors = candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    let bare: Vec<(String, Tensor)> = tensors
        .into_iter()
        .filter_map(|(n, t)| Some((n.strip_prefix("bert.")?.to_string(), t)))
        .filter(|(n, _)| !n.starts_with("pooler."))
        .collect();
    assert!(bare.iter().all(|(n, _)| n.starts_with("embeddings.") || n.starts_with("encoder.")));
    bertpipe::model::save_safetensors(&bare, None, &dir.path().join("model.safetensors")).unwrap();
    std::fs::copy(src.join("config.json"), dir.path().join("config.json")).unwrap();
    let m = BertWithHead::from_checkpoint(ModelKind::MaskedLm, dir.path(), None, &Device::Cpu, 0).unwrap();
    assert!(m.initialised.iter().all(|n| n.starts_with("cls.")), "{:?}", m.initialised);
    assert!(m.unexpected.is_empty(), "{:?}", m.unexpected);
    let (inputs, _, _) = inputs(&g);
    let hidden = m.encoder.forward(&inputs, &mut ForwardPass::eval()).unwrap();
    close("last_hidden_state (no prefix)", &tensor_f64(&hidden), &floats(&g["hidden"]), TOL);
}

/// `dtype: bf16`: the matrix products with bf16 operands and f32 results, everything else f32
/// (the f32 master weights untouched) — against PyTorch run the same way
/// (`scripts/make_golden_bf16.py`). Each figure must be far closer to that reference than to
/// the f32 result, so the test fails if bf16 is not applied, or applied anywhere else.
#[test]
fn bf16_matrix_products_match_pytorch_run_the_same_way() {
    let g = golden();
    let b: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("golden_bf16.json")).unwrap()).unwrap();
    let (inputs, _, s) = inputs(&g);
    // Worst |ours − reference|, against the worst |f32 − reference| of the same figure.
    let check = |what: &str, ours: &[f64], bf16: &[f64], f32: &[f64]| {
        let worst = |a: &[f64], b: &[f64]| bertpipe::metrics::max_abs_diff(a, b);
        let (ours_err, f32_err) = (worst(ours, bf16), worst(f32, bf16));
        let scale = bertpipe::metrics::max_abs(bf16);
        eprintln!("{what}: |ours − torch bf16| {ours_err:.2e}, |f32 − torch bf16| {f32_err:.2e}, scale {scale:.2e}");
        assert!(f32_err > 0.0, "{what}: bf16 and f32 agree exactly; the fixture proves nothing");
        assert!(ours_err <= 1e-4 * scale, "{what}: max |Δ| {ours_err:e} is more than 1e-4 of the scale {scale:e}");
        assert!(ours_err * 10.0 <= f32_err, "{what}: {ours_err:e} is not clearly closer than f32's {f32_err:e}");
    };
    let bf16 = || ForwardPass::eval().with_compute(DType::BF16);

    let m = load(ModelKind::SequenceClassification, "tiny-bert-narrow-cls");
    let logits = m
        .forward(&inputs, None, &mut ForwardPass::train(1, 0, Vec::new()).with_compute(DType::BF16))
        .unwrap()
        .logits
        .unwrap();
    assert_eq!(logits.dtype(), DType::F32, "bf16 compute returns f32 logits");
    let f32 = &b["f32"];
    check("classifier logits", &tensor_f64(&logits), &floats(&b["cls_logits"]), &floats(&f32["cls_logits"]));
    let labels: Vec<u32> = g["labels"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let loss = candle_nn::loss::cross_entropy(&logits, &Tensor::from_slice(&labels, 3, &Device::Cpu).unwrap()).unwrap();
    let loss_value = loss.to_scalar::<f32>().unwrap() as f64;
    close("bf16 loss", &[loss_value], &[b["cls_loss"].as_f64().unwrap()], TOL);
    let grads = m.gradients(&loss.backward().unwrap()).unwrap();
    let index = |name: &str| m.params.vars.iter().position(|(n, _)| n == name).unwrap();
    for (name, want) in b["grads"].as_object().unwrap() {
        let i = index(name);
        assert_eq!(grads[i].dtype(), DType::F32, "{name}: the master gradient is f32");
        check(&format!("grad {name}"), &tensor_f64(&grads[i]), &floats(want), &floats(&f32["grads"][name]));
    }
    for (i, (name, v)) in m.params.vars.iter().enumerate() {
        assert_eq!(v.as_tensor().dtype(), DType::F32, "{name}: master weights stay f32");
        let norm: f32 = grads[i].sqr().unwrap().sum_all().unwrap().to_scalar().unwrap();
        assert!(norm > 0.0, "{name} got no gradient through the bf16 casts");
    }

    let m = load(ModelKind::PreTraining, "tiny-bert-narrow-pretrain");
    let pos_t = mlm_positions(&g, s);
    let out = m.forward(&inputs, Some(&pos_t), &mut bf16()).unwrap();
    check("MLM logits", &tensor_f64(&out.mlm_logits.unwrap()), &floats(&b["mlm_logits"]), &floats(&f32["mlm_logits"]));
    check("NSP logits", &tensor_f64(&out.logits.unwrap()), &floats(&b["nsp_logits"]), &floats(&f32["nsp_logits"]));
}

/// `xlm-roberta` and `camembert` are RoBERTa's network under other class names (HF's modules
/// are copies of RoBERTa's; `transformers` gives the fixture's logits for both configs within
/// 1.5e-6): the same weights under those `model_type`s give RoBERTa's logits, and save as their
/// own classes.
#[test]
fn xlm_roberta_and_camembert_checkpoints_are_roberta_under_their_own_names() {
    let g = golden_of("golden_roberta.json");
    let (inputs, _, _) = inputs(&g);
    for (model_type, class) in
        [("xlm-roberta", "XLMRobertaForSequenceClassification"), ("camembert", "CamembertForSequenceClassification")]
    {
        let dir = tempfile::tempdir().unwrap();
        let src = fixtures().join("tiny-roberta-cls");
        std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).unwrap();
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
        config["model_type"] = Value::from(model_type);
        config["architectures"] = Value::Null;
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        let m = BertWithHead::from_checkpoint(ModelKind::SequenceClassification, dir.path(), None, &Device::Cpu, 0)
            .unwrap();
        assert!(m.initialised.is_empty() && m.unexpected.is_empty(), "{model_type}");
        let logits = m.forward(&inputs, None, &mut ForwardPass::eval()).unwrap().logits.unwrap();
        close(&format!("{model_type} logits"), &tensor_f64(&logits), &floats(&g["cls_logits"]), TOL);
        let out = tempfile::tempdir().unwrap();
        m.save(out.path()).unwrap();
        let saved: Value =
            serde_json::from_str(&std::fs::read_to_string(out.path().join("config.json")).unwrap()).unwrap();
        assert_eq!((saved["model_type"].as_str(), saved["architectures"][0].as_str()), (Some(model_type), Some(class)));
    }
}

/// ModernBERT (scripts/make_golden_modernbert.py): rotary positions, GeGLU, pre-norm without
/// biases, layers 0 and 3 global and 1, 2 within a ±2-token window (the batch is 11 long, so
/// the window cuts), the final norm, `head` before the decoder and the classifier.
#[test]
fn modernbert_hidden_states_mlm_logits_and_loss_match_transformers() {
    mlm_matches_transformers("golden_modernbert.json", "tiny-modernbert-mlm", "ModernBertForMaskedLM");
}

#[test]
fn modernbert_classifier_logits_gradients_and_one_adamw_step_match_pytorch() {
    classifier_step(&golden_of("golden_modernbert.json"), "tiny-modernbert-cls", TOL_STEPS);
}

#[test]
fn modernbert_several_scheduled_adamw_steps_match_pytorch() {
    scheduled_steps(&golden_of("golden_modernbert.json"), "tiny-modernbert-cls");
}

/// A config in a checkpoint's own words: `classifier_pooling: mean`, and the older field names
/// Hub configs still carry (`global_rope_theta`, `local_rope_theta`,
/// `global_attn_every_n_layers` instead of `rope_parameters` and `layer_types`).
#[test]
fn modernbert_mean_pooling_and_older_config_fields_match_transformers() {
    let g = golden_of("golden_modernbert.json");
    let src = fixtures().join("tiny-modernbert-cls");
    let (inputs, _, _) = inputs(&g);
    let logits_with = |edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let dir = tempfile::tempdir().unwrap();
        let mut config: serde_json::Map<String, Value> =
            serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
        edit(&mut config);
        std::fs::write(dir.path().join("config.json"), serde_json::to_string(&config).unwrap()).unwrap();
        std::fs::copy(src.join("model.safetensors"), dir.path().join("model.safetensors")).unwrap();
        let m = BertWithHead::from_checkpoint(ModelKind::SequenceClassification, dir.path(), None, &Device::Cpu, 0)
            .unwrap();
        tensor_f64(&m.forward(&inputs, None, &mut ForwardPass::eval()).unwrap().logits.unwrap())
    };
    close(
        "mean-pooled logits",
        &logits_with(&|c| {
            c.insert("classifier_pooling".into(), "mean".into());
        }),
        &floats(&g["cls_logits_mean"]),
        TOL,
    );
    close(
        "logits from the older field names",
        &logits_with(&|c| {
            c.remove("rope_parameters");
            c.remove("layer_types");
            c.insert("global_rope_theta".into(), 160000.0.into());
            c.insert("local_rope_theta".into(), 10000.0.into());
            c.insert("global_attn_every_n_layers".into(), 3.into());
        }),
        &floats(&g["cls_logits"]),
        TOL,
    );
    // Not vacuous: another local base changes the logits.
    let other = logits_with(&|c| {
        c.insert(
            "rope_parameters".into(),
            serde_json::json!({
            "full_attention": {"rope_type": "default", "rope_theta": 160000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}),
        );
    });
    assert!(bertpipe::metrics::max_abs_diff(&other, &floats(&g["cls_logits"])) > 1e-3);
}

#[test]
fn modernbert_has_no_next_sentence_head_round_trips_and_starts_a_classifier_from_mlm() {
    let dir = fixtures().join("tiny-modernbert-mlm");
    let err = BertWithHead::from_checkpoint(ModelKind::PreTraining, &dir, None, &Device::Cpu, 0).err().unwrap();
    assert!(format!("{err:#}").contains("nsp: false"), "{err:#}");
    let m = load(ModelKind::SequenceClassification, "tiny-modernbert-cls");
    let out = tempfile::tempdir().unwrap();
    m.save(out.path()).unwrap();
    let again =
        BertWithHead::from_checkpoint(ModelKind::SequenceClassification, out.path(), None, &Device::Cpu, 0).unwrap();
    assert!(again.initialised.is_empty() && again.unexpected.is_empty());
    for ((n1, a), (n2, b)) in m.params.vars.iter().zip(&again.params.vars) {
        assert_eq!(n1, n2);
        assert_eq!(tensor_f64(a.as_tensor()), tensor_f64(b.as_tensor()), "{n1}");
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "ModernBertForSequenceClassification");
    assert_eq!(config["model_type"], "modernbert");
    for bert_only in ["hidden_act", "hidden_dropout_prob", "type_vocab_size", "layer_norm_eps"] {
        assert!(config.get(bert_only).is_none(), "{bert_only} written into a ModernBERT config");
    }
    // The MLM checkpoint as a classifier: `head` is shared, `classifier` is new, the decoder's
    // bias unused.
    let m = BertWithHead::from_checkpoint(ModelKind::SequenceClassification, &dir, None, &Device::Cpu, 0).unwrap();
    assert_eq!(m.initialised, vec!["classifier.weight", "classifier.bias"]);
    assert_eq!(m.unexpected, vec!["decoder.bias"]);
}

/// A bare `ModernBertModel` (tensors without `model.`, no head) loads as ModernBERT's encoder,
/// with the head initialised and listed, and gives the same hidden states.
#[test]
fn a_bare_modernbert_encoder_loads_under_its_prefix() {
    let g = golden_of("golden_modernbert.json");
    let src = fixtures().join("tiny-modernbert-mlm");
    let tensors = candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    let bare: Vec<(String, Tensor)> =
        tensors.into_iter().filter_map(|(n, t)| n.strip_prefix("model.").map(|n| (n.to_string(), t))).collect();
    assert!(bare.iter().any(|(n, _)| n.starts_with("layers.")));
    let dir = tempfile::tempdir().unwrap();
    bertpipe::model::save_safetensors(&bare, None, &dir.path().join("model.safetensors")).unwrap();
    std::fs::copy(src.join("config.json"), dir.path().join("config.json")).unwrap();
    let m = BertWithHead::from_checkpoint(ModelKind::MaskedLm, dir.path(), None, &Device::Cpu, 0).unwrap();
    assert_eq!(m.initialised, vec!["head.dense.weight", "head.norm.weight", "decoder.bias"]);
    assert!(m.unexpected.is_empty(), "{:?}", m.unexpected);
    let (inputs, _, _) = inputs(&g);
    let hidden = m.encoder.forward(&inputs, &mut ForwardPass::eval()).unwrap();
    close("last_hidden_state (no prefix)", &tensor_f64(&hidden), &floats(&g["hidden"]), TOL);
}
