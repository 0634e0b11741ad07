//! The model half on hostile inputs, as the data half has `hostile_inputs.rs`: shards rewritten
//! by other tools (other Arrow types, short or empty rows, ids past the vocabulary, a manifest
//! with wrong counts), damaged checkpoints (truncated or bit-flipped `model.safetensors`, a
//! `config.json` with missing or absurd fields) and damaged or foreign ONNX files, through
//! `train`, `export`, `eval` and `predict`. Types that mean the same are read as the contract's;
//! everything else exits 1 with a message naming the file and the field, never a panic, and
//! leaves nothing half-written.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arrow_array::builder::{Float32Builder, Int64Builder, LargeListBuilder, ListBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int8Type};
use arrow_array::{Array, ArrayRef, Float64Array, Int32Array, LargeStringArray, RecordBatch};
use arrow_schema::{Field, Schema};
use bertpipe::onnx::proto::ModelProto;
use common::{assert_ok, bertpipe_env, fixture_dir, ort_env, read_parquet, run_pipeline, stderr};
use prost::Message;
use sha2::{Digest, Sha256};

/// Sample shards, a tiny classifier trained on them for two steps, and its export: made once.
struct Base {
    shards: PathBuf,
    checkpoint: PathBuf,
    model: PathBuf,
    /// eval's metrics.json on the untouched shards.
    metrics: serde_json::Value,
}

fn run(args: &[&str]) -> std::process::Output {
    let env = ort_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    bertpipe_env(args, &env)
}

fn base() -> &'static Base {
    static B: OnceLock<Base> = OnceLock::new();
    B.get_or_init(|| {
        let dir = fixture_dir();
        let shards = dir.join("imdb");
        assert_ok(&run_pipeline("pipelines/imdb.yaml", &shards, &[]));
        let ft = dir.join("ft");
        assert_ok(&train(&shards, &ft, &[]));
        let checkpoint = ft.join("final");
        let model = dir.join("model.onnx");
        assert_ok(&run(&["export", "onnx", "--checkpoint", p(&checkpoint), "--out", p(&model)]));
        let metrics = eval_metrics(&model, &shards, &dir.join("eval"));
        Base { shards, checkpoint, model, metrics }
    })
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn train(data: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let (d, o) = (format!("data={}", data.display()), format!("output_dir={}", out.display()));
    let mut args = vec!["train", "pipelines/imdb-finetune.yaml", "--quiet", "--set", &d, "--set", &o];
    for s in ["max_steps=2", "eval_split=null"] {
        args.extend(["--set", s]);
    }
    for e in extra {
        args.extend(["--set", e]);
    }
    run(&args)
}

fn eval(model: &Path, data: &Path, out: &Path) -> std::process::Output {
    run(&["eval", "--model", p(model), "--data", p(data), "--split", "test", "--out", p(out), "--quiet"])
}

fn eval_metrics(model: &Path, data: &Path, out: &Path) -> serde_json::Value {
    assert_ok(&eval(model, data, out));
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    let o = m.as_object_mut().unwrap();
    for volatile in ["throughput", "model", "data", "chain", "created_by", "device", "runtime", "outputs"] {
        o.remove(volatile);
    }
    m
}

/// Exit 1, every `needles` in the message, no panic.
#[track_caller]
fn assert_refused(o: &std::process::Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "exit 1 expected:\n{err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "a panic:\n{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in:\n{err}");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A copy of the sample shards with `rel`'s batches rewritten by `f` (and written the way
/// pyarrow would, with the new schema), the manifest's size and checksum updated to match —
/// as a user who rewrites a shard and its manifest entry would.
fn rewritten(dir: &Path, rels: &[&str], f: impl Fn(RecordBatch) -> RecordBatch) -> PathBuf {
    let out = dir.join("shards");
    copy_dir(&base().shards, &out);
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    for rel in rels {
        let batches: Vec<RecordBatch> = read_parquet(&out.join(rel)).into_iter().map(&f).collect();
        let file = std::fs::File::create(out.join(rel)).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batches[0].schema(), None).unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
        let bytes = std::fs::read(out.join(rel)).unwrap();
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        for split in manifest["splits"].as_object_mut().unwrap().values_mut() {
            for s in split["shards"].as_array_mut().unwrap() {
                if s["file"] == *rel {
                    s["bytes"] = bytes.len().into();
                    s["sha256"] = hex::encode(Sha256::digest(&bytes)).into();
                    assert_eq!(s["rows"], rows, "a rewrite keeps the rows");
                }
            }
        }
    }
    std::fs::write(out.join("manifest.json"), serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
    out
}

const SHARDS: [&str; 2] = ["train/part-00000.parquet", "test/part-00000.parquet"];

/// `batch` with column `name` replaced (its field's type follows the new array).
fn with_column(batch: RecordBatch, name: &str, array: ArrayRef) -> RecordBatch {
    let schema = batch.schema();
    let mut fields: Vec<Field> = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (i, f) in schema.fields().iter().enumerate() {
        if f.name() == name {
            fields.push(Field::new(name, array.data_type().clone(), true));
            columns.push(array.clone());
        } else {
            fields.push(f.as_ref().clone());
            columns.push(batch.column(i).clone());
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

fn without_column(batch: RecordBatch, name: &str) -> RecordBatch {
    let keep: Vec<usize> = (0..batch.num_columns()).filter(|&i| batch.schema().field(i).name() != name).collect();
    batch.project(&keep).unwrap()
}

/// A list column's rows as i64 lists.
fn lists(batch: &RecordBatch, name: &str) -> Vec<Vec<i64>> {
    let l = batch.column_by_name(name).unwrap().as_list::<i32>();
    (0..l.len())
        .map(|i| {
            let v = l.value(i);
            match v.data_type() {
                arrow_schema::DataType::Int8 => {
                    v.as_primitive::<Int8Type>().values().iter().map(|&x| x as i64).collect()
                }
                _ => v.as_primitive::<Int32Type>().values().iter().map(|&x| x as i64).collect(),
            }
        })
        .collect()
}

fn list_i64(rows: &[Vec<i64>]) -> ArrayRef {
    let mut b = ListBuilder::new(Int64Builder::new());
    for r in rows {
        b.values().append_slice(r);
        b.append(true);
    }
    Arc::new(b.finish())
}

#[test]
fn shards_rewritten_with_types_that_mean_the_same_train_and_score_as_the_originals() {
    let b = base();
    let dir = tempfile::tempdir().unwrap();
    // What pyarrow / polars / datasets write: int32 labels, large_string ids, large_list<int64>
    // ids, list<int64> token types.
    let shards = rewritten(dir.path(), &SHARDS, |batch| {
        let labels: Int32Array = batch
            .column_by_name("label")
            .unwrap()
            .as_primitive::<arrow_array::types::Int64Type>()
            .iter()
            .map(|v| v.map(|x| x as i32))
            .collect();
        let ids: LargeStringArray = batch.column_by_name("id").unwrap().as_string::<i32>().iter().collect();
        let mut large = LargeListBuilder::new(Int64Builder::new());
        for r in lists(&batch, "input_ids") {
            large.values().append_slice(&r);
            large.append(true);
        }
        let types = list_i64(&lists(&batch, "token_type_ids"));
        let batch = with_column(batch, "label", Arc::new(labels));
        let batch = with_column(batch, "id", Arc::new(ids));
        let batch = with_column(batch, "input_ids", Arc::new(large.finish()));
        with_column(batch, "token_type_ids", types)
    });
    let schema = read_parquet(&shards.join(SHARDS[1]))[0].schema();
    assert_eq!(schema.field_with_name("id").unwrap().data_type(), &arrow_schema::DataType::LargeUtf8);
    assert_ok(&train(&shards, &dir.path().join("ft"), &[]));
    assert_eq!(eval_metrics(&b.model, &shards, &dir.path().join("eval")), b.metrics, "the same rows, the same scores");
}

#[test]
fn shards_with_other_meanings_or_broken_rows_are_refused_by_file_and_column() {
    let b = base();
    type Rewrite = Box<dyn Fn(RecordBatch) -> RecordBatch>;
    let cases: Vec<(&str, Rewrite, Vec<&str>)> = vec![
        (
            "float labels",
            Box::new(|batch: RecordBatch| {
                let n = batch.num_rows();
                with_column(batch, "label", Arc::new(Float64Array::from(vec![0.5; n])))
            }),
            vec!["column `label` holds Float64", "integer type"],
        ),
        (
            "float ids",
            Box::new(|batch: RecordBatch| {
                let mut f = ListBuilder::new(Float32Builder::new());
                for r in lists(&batch, "input_ids") {
                    f.values().append_slice(&r.iter().map(|&x| x as f32).collect::<Vec<_>>());
                    f.append(true);
                }
                with_column(batch, "input_ids", Arc::new(f.finish()))
            }),
            vec!["column `input_ids` holds Float32", "integer type"],
        ),
        (
            "short token types",
            Box::new(|batch: RecordBatch| {
                let mut t = lists(&batch, "token_type_ids");
                t[3].pop();
                with_column(batch, "token_type_ids", list_i64(&t))
            }),
            vec!["row 3", "`token_type_ids` has", "same length"],
        ),
        (
            "ids past the vocabulary",
            Box::new(|batch: RecordBatch| {
                let mut ids = lists(&batch, "input_ids");
                ids[2][1] = 30_522;
                with_column(batch, "input_ids", list_i64(&ids))
            }),
            vec!["row 2", "column `input_ids` holds 30522", "0..=30521"],
        ),
        (
            "negative ids",
            Box::new(|batch: RecordBatch| {
                let mut ids = lists(&batch, "input_ids");
                ids[0][1] = -7;
                with_column(batch, "input_ids", list_i64(&ids))
            }),
            vec!["row 0", "column `input_ids` holds -7"],
        ),
        (
            "an empty row",
            Box::new(|batch: RecordBatch| {
                let (mut ids, mut types) = (lists(&batch, "input_ids"), lists(&batch, "token_type_ids"));
                ids[1].clear();
                types[1].clear();
                let batch = with_column(batch, "input_ids", list_i64(&ids));
                with_column(batch, "token_type_ids", list_i64(&types))
            }),
            vec!["row 1", "`input_ids` is empty"],
        ),
        (
            "a negative label",
            Box::new(|batch: RecordBatch| {
                let n = batch.num_rows();
                with_column(batch, "label", Arc::new(arrow_array::Int64Array::from(vec![-1; n])))
            }),
            vec!["column `label` holds -1"],
        ),
        (
            "no input_ids",
            Box::new(|batch: RecordBatch| without_column(batch, "input_ids")),
            vec!["shard has no `input_ids` column"],
        ),
    ];
    for (what, f, needles) in cases {
        let dir = tempfile::tempdir().unwrap();
        let shards = rewritten(dir.path(), &SHARDS, f);
        let mut train_needles = needles.clone();
        train_needles.push("train/part-00000.parquet");
        let out = dir.path().join("ft");
        let o = train(&shards, &out, &[]);
        assert_refused(&o, &train_needles);
        assert!(!out.join("final").exists(), "{what}: train wrote a model");
        let mut eval_needles = needles.clone();
        eval_needles.push("test/part-00000.parquet");
        let out = dir.path().join("eval");
        assert_refused(&eval(&b.model, &shards, &out), &eval_needles);
        assert!(!out.join("metrics.json").exists(), "{what}: eval wrote metrics");
    }
}

#[test]
fn a_manifest_whose_counts_do_not_match_its_shards_is_refused() {
    let b = base();
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("shards");
    copy_dir(&b.shards, &shards);
    let text = std::fs::read_to_string(shards.join("manifest.json")).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    // A split's rows that its shards do not add up to.
    m["splits"]["train"]["rows"] = (m["splits"]["train"]["rows"].as_u64().unwrap() + 5).into();
    std::fs::write(shards.join("manifest.json"), m.to_string()).unwrap();
    assert_refused(
        &train(&shards, &dir.path().join("ft"), &[]),
        &["manifest.json", "`train` has rows", "its shards list"],
    );
    // A shard whose rows (and its split's, consistently) differ from what the file holds.
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rows = m["splits"]["test"]["shards"][0]["rows"].as_u64().unwrap();
    m["splits"]["test"]["shards"][0]["rows"] = (rows * 1000).into();
    m["splits"]["test"]["rows"] = (m["splits"]["test"]["rows"].as_u64().unwrap() + rows * 999).into();
    std::fs::write(shards.join("manifest.json"), m.to_string()).unwrap();
    let out = dir.path().join("eval");
    assert_refused(
        &eval(&b.model, &shards, &out),
        &["test/part-00000.parquet", &format!("holds {rows} rows"), "the manifest says"],
    );
    assert!(!out.join("metrics.json").exists());
}

/// A copy of the trained checkpoint with `file` replaced by what `f` makes of it.
fn damaged_checkpoint(dir: &Path, file: &str, f: impl Fn(Vec<u8>) -> Vec<u8>) -> PathBuf {
    let ckpt = dir.join("ckpt");
    copy_dir(&base().checkpoint, &ckpt);
    let bytes = std::fs::read(ckpt.join(file)).unwrap();
    std::fs::write(ckpt.join(file), f(bytes)).unwrap();
    ckpt
}

fn set_config(bytes: Vec<u8>, key: &str, value: serde_json::Value) -> Vec<u8> {
    let mut c: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    if value.is_null() {
        c.as_object_mut().unwrap().remove(key);
    } else {
        c[key] = value;
    }
    c.to_string().into_bytes()
}

#[test]
fn damaged_checkpoints_are_refused_by_export_and_train_naming_the_file_and_field() {
    type Damage = Box<dyn Fn(Vec<u8>) -> Vec<u8>>;
    // The safetensors header is 8 bytes of length, then JSON; the tensors follow.
    let cases: Vec<(&str, Damage, Vec<&str>)> = vec![
        ("model.safetensors", Box::new(|b: Vec<u8>| b[..b.len() / 2].to_vec()), vec!["model.safetensors"]),
        ("model.safetensors", Box::new(|b: Vec<u8>| b[..5].to_vec()), vec!["model.safetensors"]),
        (
            "model.safetensors",
            Box::new(|mut b: Vec<u8>| {
                b[12] ^= 0x20;
                b
            }),
            vec!["model.safetensors"],
        ),
        (
            "model.safetensors",
            Box::new(|mut b: Vec<u8>| {
                b[7] = 0x7f;
                b
            }),
            vec!["model.safetensors"],
        ),
        (
            "model.safetensors",
            Box::new(|mut b: Vec<u8>| {
                // An exponent bit of the last weight flipped: an infinite or NaN value.
                let n = b.len();
                b[n - 1] |= 0x7f;
                b[n - 2] |= 0x80;
                b
            }),
            vec!["model.safetensors", "NaN or infinite", "damaged"],
        ),
        (
            "config.json",
            Box::new(|b| set_config(b, "hidden_size", serde_json::Value::Null)),
            vec!["config.json", "missing field `hidden_size`"],
        ),
        (
            "config.json",
            Box::new(|b| set_config(b, "num_attention_heads", 0.into())),
            vec!["config.json", "`num_attention_heads` is 0"],
        ),
        (
            "config.json",
            Box::new(|b| set_config(b, "num_attention_heads", 3.into())),
            vec!["config.json", "not a multiple of num_attention_heads 3"],
        ),
        (
            "config.json",
            Box::new(|b| set_config(b, "max_position_embeddings", 1_000_000_000.into())),
            vec!["config.json", "`max_position_embeddings` is 1000000000"],
        ),
        (
            "config.json",
            Box::new(|b| set_config(b, "vocab_size", (-1).into())),
            vec!["config.json", "`vocab_size`: invalid value"],
        ),
        (
            "config.json",
            Box::new(|b| set_config(b, "layer_norm_eps", "tiny".into())),
            vec!["config.json", "layer_norm_eps"],
        ),
        ("config.json", Box::new(|b| b[..b.len() / 3].to_vec()), vec!["config.json", "is not a BERT config.json"]),
    ];
    for (file, damage, needles) in cases {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = damaged_checkpoint(dir.path(), file, damage);
        let onnx = dir.path().join("m.onnx");
        assert_refused(&run(&["export", "onnx", "--checkpoint", p(&ckpt), "--out", p(&onnx)]), &needles);
        assert!(!onnx.exists() && std::fs::read_dir(dir.path()).unwrap().count() == 1, "export left a file");
        let out = dir.path().join("ft");
        let init = format!("model.init_from={}", ckpt.display());
        assert_refused(&train(&base().shards, &out, &["model.preset=null", &init]), &needles);
        assert!(!out.join("final").exists());
    }
}

#[test]
fn damaged_or_foreign_onnx_models_are_refused_by_eval_and_predict() {
    let b = base();
    let bytes = std::fs::read(&b.model).unwrap();
    let mut renamed = ModelProto::decode(bytes.as_slice()).unwrap();
    let graph = renamed.graph.as_mut().unwrap();
    for i in graph.input.iter_mut().filter(|i| i.name == "input_ids") {
        i.name = "ids".into();
    }
    for n in graph.node.iter_mut() {
        for i in n.input.iter_mut().filter(|i| *i == "input_ids") {
            *i = "ids".into();
        }
    }
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        ("truncated.onnx", bytes[..bytes.len() / 2].to_vec(), vec!["truncated.onnx"]),
        ("empty.onnx", Vec::new(), vec!["empty.onnx"]),
        ("foreign.onnx", b"PK\x03\x04 this is a zip file, not a model".to_vec(), vec!["foreign.onnx"]),
        ("renamed.onnx", renamed.encode_to_vec(), vec!["renamed.onnx", "has no `input_ids` input", "ids"]),
    ];
    for (name, content, needles) in cases {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join(name);
        std::fs::write(&model, content).unwrap();
        let out = dir.path().join("eval");
        assert_refused(&eval(&model, &b.shards, &out), &needles);
        assert!(!out.join("metrics.json").exists());
        let o = run(&["predict", "--model", p(&model), "--pipeline", "pipelines/imdb.yaml", "A fine film."]);
        assert_refused(&o, &needles);
    }
}

/// `stats --json` of a shard folder, without what names the folder.
fn stats_json(shards: &Path) -> serde_json::Value {
    let o = run(&["stats", p(shards), "--json", "--by", "label", "--quiet"]);
    assert_ok(&o);
    let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["input"]["path"] = serde_json::Value::Null;
    v
}

#[test]
fn stats_reads_shards_rewritten_by_pandas_or_spark_as_the_originals_and_refuses_fractional_labels() {
    use arrow_array::{BinaryArray, DictionaryArray, Float64Array as F64};
    use bertpipe::contract::columns::{floats, ints};
    let b = base();
    let dir = tempfile::tempdir().unwrap();
    // What pandas (float labels once a NaN passed through, `category` ids), Spark (strings as
    // binary) and others write: the same numbers and texts in other Arrow types.
    let shards = rewritten(dir.path(), &SHARDS, |batch| {
        let col = |n: &str| batch.column_by_name(n).unwrap().clone();
        let labels: F64 =
            ints(col("label").as_ref(), "label").unwrap().into_iter().map(|v| v.map(|x| x as f64)).collect();
        let ids: DictionaryArray<Int32Type> = col("id").as_string::<i32>().iter().collect();
        let lengths: arrow_array::Int64Array = ints(col("length").as_ref(), "length").unwrap().into_iter().collect();
        let noise: F64 =
            floats(col("noise_score").as_ref(), "noise_score").unwrap().into_iter().map(|v| v.map(f64::from)).collect();
        let batch = with_column(batch, "label", Arc::new(labels));
        let batch = with_column(batch, "id", Arc::new(ids));
        let batch = with_column(batch, "length", Arc::new(lengths));
        with_column(batch, "noise_score", Arc::new(noise))
    });
    assert_eq!(stats_json(&shards), stats_json(&b.shards), "the same rows, the same statistics");
    let binary = tempfile::tempdir().unwrap();
    let shards = rewritten(binary.path(), &SHARDS, |batch| {
        let ids: BinaryArray =
            batch.column_by_name("id").unwrap().as_string::<i32>().iter().map(|s| s.map(str::as_bytes)).collect();
        with_column(batch, "id", Arc::new(ids))
    });
    assert_eq!(stats_json(&shards), stats_json(&b.shards), "ids written as binary");
    // A label of 0.5 is no class: refused, naming the column and the row.
    let half = tempfile::tempdir().unwrap();
    let shards = rewritten(half.path(), &SHARDS[..1], |batch| {
        let n = batch.num_rows();
        let labels: F64 = (0..n).map(|i| Some(if i == 3 { 0.5 } else { 1.0 })).collect();
        with_column(batch, "label", Arc::new(labels))
    });
    let o = run(&["stats", p(&shards), "--quiet"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("part-00000.parquet") && err.contains("row 3") && err.contains("`label` holds 0.5"), "{err}");
}
