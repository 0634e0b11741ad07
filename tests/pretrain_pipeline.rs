//! `pipelines/imdb-pretrain.yaml` end to end: rows within max_len, specials never masked,
//! thread-count determinism, and dynamic masking from the library equal to static masking.

mod common;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int8Type};
use arrow_array::Array;
use bertpipe::config::Pipeline;
use bertpipe::config::PipelineStep;
use common::*;

fn run(out: &std::path::Path, extra: &[&str]) {
    assert_ok(&run_pipeline("pipelines/imdb-pretrain.yaml", out, extra));
}

/// A list<int32> column of a split, row by row.
fn lists(out: &std::path::Path, split: &str, column: &str) -> Vec<Vec<u32>> {
    let mut rows = Vec::new();
    for shard in shard_files(&out.join(split)) {
        for batch in read_parquet(&shard) {
            let col = batch.column_by_name(column).unwrap_or_else(|| panic!("no column {column}"));
            let list = col.as_list::<i32>();
            for i in 0..list.len() {
                rows.push(list.value(i).as_primitive::<Int32Type>().values().iter().map(|&v| v as u32).collect());
            }
        }
    }
    rows
}

#[test]
fn pretraining_shards_keep_the_contract() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("pt");
    run(&out, &[]);
    let m = manifest(&out);
    assert_eq!(m["task"], "pretrain");
    assert_eq!(m["max_len"], 128);
    let p = &m["splits"]["train"]["pretraining"];
    let frac = p["masked_fraction"].as_f64().unwrap();
    assert!((frac - 0.15).abs() < 0.01, "{frac}");
    assert!(p["nsp_random"].as_u64().unwrap() > 0 && p["nsp_follows"].as_u64().unwrap() > 0);
    let ids = lists(&out, "train", "input_ids");
    let positions = lists(&out, "train", "masked_lm_positions");
    let labels = lists(&out, "train", "masked_lm_ids");
    assert_eq!(ids.len() as u64, m["splits"]["train"]["rows"].as_u64().unwrap());
    for ((row, pos), lab) in ids.iter().zip(&positions).zip(&labels) {
        assert!(row.len() <= 128 && row[0] == 101 && *row.last().unwrap() == 102);
        assert_eq!(pos.len(), lab.len());
        for (&p, &l) in pos.iter().zip(lab) {
            assert!(![0, 100, 101, 102, 103].contains(&l), "a special token was masked");
            assert!((p as usize) < row.len());
        }
    }
    // NSP labels are int8 0/1, as HF expects.
    let batch = &read_parquet(&out.join("train/part-00000.parquet"))[0];
    let nsp = batch.column_by_name("next_sentence_label").unwrap().as_primitive::<Int8Type>();
    assert!(nsp.values().iter().all(|&v| v == 0 || v == 1));
}

#[test]
fn pretraining_bytes_do_not_depend_on_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    for variant in [vec![], vec!["--set", "steps[7].nsp=false"], vec!["--set", "steps[7].whole_word_mask=true"]] {
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let mut one = variant.clone();
        one.extend(["--threads", "1", "--overwrite", "--set", "sink.shard_rows=300"]);
        let mut three = variant.clone();
        three.extend(["--threads", "3", "--overwrite", "--set", "sink.shard_rows=300"]);
        run(&a, &one);
        run(&b, &three);
        assert_same_output(&a, &b);
    }
}

#[test]
fn dynamic_masking_in_the_trainer_equals_static_masking() {
    let tmp = tempfile::tempdir().unwrap();
    let (st, dy) = (tmp.path().join("static"), tmp.path().join("dynamic"));
    run(&st, &[]);
    run(&dy, &["--set", "steps[7].masking=dynamic"]);
    assert!(!shard_files(&dy.join("train")).is_empty());
    // The trainer's view: the resolved pipeline, prepared, gives the masking function.
    let mut p = Pipeline::load(&root().join("pipelines/imdb-pretrain.yaml"), &[]).unwrap();
    bertpipe::pipeline::prepare_steps(&mut p.steps).unwrap();
    let spec = p.steps.iter().find_map(|s| match s {
        PipelineStep::PretrainSequences(s) => s.mask_spec.clone(),
        _ => None,
    });
    let spec = spec.unwrap();
    for split in ["train", "validation"] {
        let (plain, masked) = (lists(&dy, split, "input_ids"), lists(&st, split, "input_ids"));
        let (pos, lab) = (lists(&st, split, "masked_lm_positions"), lists(&st, split, "masked_lm_ids"));
        assert_eq!(plain.len(), masked.len());
        for (i, row) in plain.iter().enumerate() {
            let m = spec.mask(row, p.seed, 0, i as u64);
            assert_eq!((&m.input_ids, &m.positions, &m.labels), (&masked[i], &pos[i], &lab[i]), "{split} row {i}");
        }
    }
}
