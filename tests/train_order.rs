//! The training order on corpora stored sorted: every window of 1,000 consecutive training
//! rows holds the split's mix within sampling noise, for several shard sizes, batch sizes and
//! length grouping, and a resumed epoch draws exactly the batches of an uninterrupted one.
//! Classification rows come from a label-sorted JSONL file; pretraining rows from an aclImdb
//! tarball read `neg`, then `pos`, then `unsup`.

mod common;

use std::sync::Arc;

use bertpipe::shards::ShardSet;
use bertpipe::train::data::{Batch, LoaderSpec, Order, RowKind};
use common::{assert_ok, root, run_pipeline, write_pipeline, write_tarball};

/// Rows per window of the mixing check.
const WINDOW: usize = 1000;

/// χ² of `classes`' counts in each window of `WINDOW` consecutive rows against the whole
/// sequence's mix, with the finite-population factor of drawing without replacement: each
/// sliding window (every 100 rows) stays under the 1-in-a-million quantile, and the sum over
/// disjoint windows within six standard deviations of its χ² expectation.
#[track_caller]
fn assert_mixed(what: &str, classes: &[usize], k: usize) {
    let n = classes.len();
    assert!(n >= 4 * WINDOW, "{what}: {n} rows are too few to check");
    let mut total = vec![0usize; k];
    classes.iter().for_each(|&c| total[c] += 1);
    let p: Vec<f64> = total.iter().map(|&t| t as f64 / n as f64).collect();
    assert!(p.iter().all(|&p| p > 0.1), "{what}: the split's mix {p:?}");
    let fpc = (n - 1) as f64 / (n - WINDOW) as f64;
    let chi2 = |from: usize| -> f64 {
        let mut c = vec![0usize; k];
        classes[from..from + WINDOW].iter().for_each(|&x| c[x] += 1);
        let e: Vec<f64> = p.iter().map(|p| p * WINDOW as f64).collect();
        c.iter().zip(&e).map(|(&o, &e)| (o as f64 - e).powi(2) / e).sum::<f64>() * fpc
    };
    // χ² quantiles at 1 − 1e-6 for 1 and 2 degrees of freedom.
    let bound = [23.93, 27.63][k - 2];
    for from in (0..=n - WINDOW).step_by(100) {
        let x = chi2(from);
        assert!(x < bound, "{what}: rows {from}..{}: χ² {x:.1} ≥ {bound} (mix {p:?})", from + WINDOW);
    }
    let disjoint = n / WINDOW;
    let sum: f64 = (0..disjoint).map(|w| chi2(w * WINDOW)).sum();
    let df = ((k - 1) * disjoint) as f64;
    assert!(sum < df + 6.0 * (2.0 * df).sqrt(), "{what}: Σχ² {sum:.1} over {disjoint} windows (df {df})");
}

fn epoch_batches(spec: &LoaderSpec, epoch: u64, skip: u64) -> Vec<Batch> {
    spec.epoch_from(epoch, skip).unwrap().map(|b| b.unwrap()).collect()
}

/// Resuming at any batch — the first, inside the first window, at a window's edge, the
/// last — gives the batches an uninterrupted epoch gives from there: the same rows, masked
/// the same way.
#[track_caller]
fn assert_resumes_exactly(spec: &LoaderSpec, epoch: u64) {
    let all = epoch_batches(spec, epoch, 0);
    let per_window = (spec.window_rows() as u64).div_ceil(spec.batch_size as u64);
    let n = all.len() as u64;
    for skip in [1, 3, per_window, per_window + 1, 2 * per_window - 1, n - 1, n] {
        if skip > n {
            continue;
        }
        let resumed = epoch_batches(spec, epoch, skip);
        assert_eq!(resumed.len() as u64, n - skip, "skip {skip}");
        for (a, b) in all[skip as usize..].iter().zip(&resumed) {
            assert_eq!((&a.indices, &a.input_ids, &a.mlm_labels), (&b.indices, &b.input_ids, &b.mlm_labels));
        }
    }
}

fn permuted(mut spec: LoaderSpec) -> LoaderSpec {
    spec.order = Order::Permuted(Arc::new(spec.row_store(true).unwrap()));
    spec
}

#[test]
fn a_label_sorted_split_is_mixed_in_every_window_for_any_shard_size() {
    let dir = tempfile::tempdir().unwrap();
    // Larger than the old 10,000-row shuffle buffer, as IMDb's 25,000 training reviews are.
    let n = 24_000usize;
    // Half `neg`, then half `pos`, as a CSV sorted by label would hold them; lengths vary
    // the same way within each half, so length grouping cannot sort by label.
    let mut jsonl = String::new();
    for i in 0..n {
        let label = if i < n / 2 { "neg" } else { "pos" };
        let words = "fine film ".repeat(1 + i % 23);
        jsonl.push_str(&format!("{{\"id\": \"r{i}\", \"text\": \"row {i} {words}\", \"label\": \"{label}\"}}\n"));
    }
    std::fs::write(dir.path().join("sorted.jsonl"), jsonl).unwrap();
    let vocab = root().join("data/vocab/bert-base-uncased.txt");
    let pipeline = write_pipeline(
        dir.path(),
        "sorted.yaml",
        &format!(
            "name: sorted\nsource: {{ type: jsonl, path: {}, label_field: label, id_field: id, label_map: {{neg: 0, pos: 1}} }}\nsteps:\n  - type: tokenize\n    vocab: {}\n  - type: classify_sequences\n    max_len: 64\nsink: {{ type: parquet, path: unused }}\n",
            dir.path().join("sorted.jsonl").display(),
            vocab.display()
        ),
    );
    for shard_rows in [500usize, 3000, n] {
        let out = dir.path().join(format!("shards-{shard_rows}"));
        let rows = format!("sink.shard_rows={shard_rows}");
        assert_ok(&run_pipeline(pipeline.to_str().unwrap(), &out, &["--set", &rows]));
        let shards = Arc::new(ShardSet::open(&out).unwrap());
        // The input is as hostile as meant: in file order, every `neg` row comes first.
        let labels: Vec<i64> = shards.labels("train").unwrap().into_iter().map(Option::unwrap).collect();
        assert_eq!(labels.len(), n);
        assert!(labels.windows(2).all(|w| w[0] <= w[1]), "the shards are sorted by label");
        for (batch_size, group_by_length) in [(32, true), (8, true), (16, false)] {
            let spec = permuted(LoaderSpec {
                shards: shards.clone(),
                split: "train".into(),
                kind: RowKind::Classify { num_labels: 2, remap: None },
                batch_size,
                order: Order::InFileOrder,
                group_by_length,
                pad_to: None,
                pad_id: 0,
                seed: 42,
                max_tokens: None,
                packed: false,
                lengths: None,
            });
            for epoch in 0..2 {
                let batches = epoch_batches(&spec, epoch, 0);
                assert_eq!(batches.len() as u64, spec.batches_per_epoch(n as u64));
                let order: Vec<usize> = batches.iter().flat_map(|b| b.labels.iter().map(|&l| l as usize)).collect();
                let what = format!(
                    "shards of {shard_rows}, batch {batch_size}, group_by_length {group_by_length}, epoch {epoch}"
                );
                assert_mixed(&what, &order, 2);
                let mut seen: Vec<u64> = batches.iter().flat_map(|b| b.indices.clone()).collect();
                seen.sort_unstable();
                assert_eq!(seen, (0..n as u64).collect::<Vec<_>>(), "{what}: each row once");
            }
            assert_resumes_exactly(&spec, 1);
        }
        if shard_rows == n {
            // Under a token budget each epoch has its own batch count; steps and epochs convert
            // both ways epoch by epoch (the dry run's schedule line).
            let mut budget = permuted(LoaderSpec {
                shards: shards.clone(),
                split: "train".into(),
                kind: RowKind::Classify { num_labels: 2, remap: None },
                batch_size: 32,
                order: Order::InFileOrder,
                group_by_length: false,
                pad_to: None,
                pad_id: 0,
                seed: 42,
                max_tokens: Some(32 * 30),
                packed: true,
                lengths: None,
            });
            let Order::Permuted(store) = &budget.order else { unreachable!("permuted") };
            budget.lengths = Some(Arc::new(store.tokens_per_row().unwrap()));
            let counts: Vec<u64> = (0..3).map(|e| budget.batches_in_epoch(e)).collect();
            assert_eq!(budget.epochs_in_steps(counts[0] + counts[1]), 2.0, "{counts:?}");
            assert_eq!(
                budget.epochs_in_steps(counts[0] + counts[1] / 2),
                1.0 + (counts[1] / 2) as f64 / counts[1] as f64
            );
            for epochs in [0.5, 1.0, 2.25] {
                let back = budget.epochs_in_steps(budget.steps_in_epochs(epochs));
                assert!((back - epochs).abs() <= 1.0 / counts[2] as f64, "{epochs} epochs → {back} ({counts:?})");
            }
        }
    }
}

#[test]
fn pretraining_rows_read_in_neg_pos_unsup_blocks_are_mixed_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let tarball = dir.path().join("aclImdb_v1.tar.gz");
    write_tarball(&tarball, &bertpipe::synth::corpus(700, 1400, 9));
    for masking in ["static", "dynamic"] {
        let out = dir.path().join(format!("pretrain-{masking}"));
        let source = format!("source.path={}", tarball.display());
        let masking_set = format!("steps[7].masking={masking}");
        let extra = ["--set", &source, "--set", "sink.shard_rows=700", "--set", &masking_set];
        assert_ok(&run_pipeline(root().join("pipelines/imdb-pretrain.yaml").to_str().unwrap(), &out, &extra));
        let shards = Arc::new(ShardSet::open(&out).unwrap());
        let n: u64 = shards.shard_rows("train").unwrap().iter().sum();
        assert!(shards.shard_rows("train").unwrap().len() >= 4, "several shards");
        let mask = (masking == "dynamic").then(|| {
            let pipeline: bertpipe::config::Pipeline = serde_json::from_value(shards.manifest.config.clone()).unwrap();
            let steps = &pipeline.steps;
            let tokenize = steps.iter().find_map(bertpipe::config::PipelineStep::as_tokenize).unwrap();
            let encoder = tokenize.load().unwrap();
            let step = steps.iter().find_map(bertpipe::config::PipelineStep::as_pretrain).unwrap();
            Arc::new(step.mask_spec(&encoder.info(), encoder.words(), 0.15).unwrap())
        });
        let spec = permuted(LoaderSpec {
            shards: shards.clone(),
            split: "train".into(),
            kind: RowKind::Pretrain { mask },
            batch_size: 16,
            order: Order::InFileOrder,
            group_by_length: true,
            pad_to: None,
            pad_id: 0,
            seed: 3,
            max_tokens: None,
            packed: false,
            lengths: None,
        });
        for epoch in 0..2 {
            // In file order the split is neg rows, then pos, then unsup: its thirds by
            // position stand for the three blocks.
            let order: Vec<usize> = epoch_batches(&spec, epoch, 0)
                .iter()
                .flat_map(|b| b.indices.iter().map(|&i| (i * 3 / n) as usize))
                .collect();
            assert_eq!(order.len() as u64, n);
            assert_mixed(&format!("pretraining ({masking} masking), epoch {epoch}"), &order, 3);
        }
        assert_resumes_exactly(&spec, 1);
    }
}
