//! Helpers for the binary-level tests: run the real `bertpipe`, read shards back.
#![allow(dead_code)]

pub mod browser;
pub mod chain;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use arrow_array::{cast::AsArray, Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn bertpipe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bertpipe")).args(args).current_dir(root()).output().expect("run bertpipe")
}

pub fn bertpipe_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bertpipe"));
    c.args(args).current_dir(root());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run bertpipe")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
pub fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        stderr(o)
    );
}

pub fn manifest(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).expect("manifest.json"))
        .expect("manifest is JSON")
}

pub fn read_parquet(path: &Path) -> Vec<RecordBatch> {
    let f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ParquetRecordBatchReaderBuilder::try_new(f).unwrap().build().unwrap().map(|b| b.unwrap()).collect()
}

/// All values of a string column across the shards of a folder, in order.
pub fn strings(out: &Path, folder: &str, column: &str) -> Vec<String> {
    let mut values = Vec::new();
    for shard in shard_files(&out.join(folder)) {
        for batch in read_parquet(&shard) {
            let col = batch.column_by_name(column).unwrap_or_else(|| panic!("no column {column}"));
            let s = col.as_string::<i32>();
            values.extend((0..s.len()).map(|i| s.value(i).to_string()));
        }
    }
    values
}

pub fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "parquet")).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Every file under `dir` (relative path → bytes), for byte-for-byte comparisons.
pub fn tree_bytes(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    fn walk(base: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.insert(p.strip_prefix(base).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// Asserts `docs_in = docs_out + rejected` per split and that the rejects hold exactly the
/// rejected documents, each with a step and a reason.
#[track_caller]
pub fn assert_reconciles(out: &Path) {
    let m = manifest(out);
    let mut rejected_total = 0;
    for (split, s) in m["splits"].as_object().unwrap() {
        let docs_in = s["docs_in"].as_u64().unwrap();
        let docs_out = s["docs_out"].as_u64().unwrap();
        let rejected: u64 = s["rejected"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(docs_in, docs_out + rejected, "split {split}: {s}");
        assert_eq!(s["rows"].as_u64().unwrap(), docs_out, "split {split}");
        let shard_rows: u64 = s["shards"].as_array().unwrap().iter().map(|x| x["rows"].as_u64().unwrap()).sum();
        assert_eq!(shard_rows, docs_out);
        let read: usize =
            shard_files(&out.join(split)).iter().flat_map(|f| read_parquet(f)).map(|b| b.num_rows()).sum();
        assert_eq!(read as u64, docs_out, "rows on disk for {split}");
        rejected_total += rejected;
    }
    let reasons = strings(out, "_rejects", "reason");
    let steps = strings(out, "_rejects", "step");
    assert_eq!(reasons.len() as u64, rejected_total, "reject rows");
    assert!(reasons.iter().all(|r| !r.is_empty()) && steps.iter().all(|s| !s.is_empty()));
}

/// `bertpipe pipeline run PIPELINE --set sink.path=OUT --quiet EXTRA…`.
pub fn run_pipeline(pipeline: &str, out: &Path, extra: &[&str]) -> Output {
    let out_set = format!("sink.path={}", out.display());
    let mut args = vec!["pipeline", "run", pipeline, "--set", &out_set, "--quiet"];
    args.extend_from_slice(extra);
    bertpipe(&args)
}

/// Writes a pipeline YAML into `dir` and returns its path.
pub fn write_pipeline(dir: &Path, name: &str, yaml: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, yaml).unwrap();
    p
}

/// Asserts two output folders hold the same bytes: every shard and reject file identical, and
/// manifests equal apart from the configuration (whose sink path necessarily differs).
#[track_caller]
pub fn assert_same_output(a: &Path, b: &Path) {
    use sha2::Digest;
    let digest = |dir: &Path| -> std::collections::BTreeMap<String, String> {
        tree_bytes(dir)
            .into_iter()
            .filter(|(k, _)| k != "manifest.json")
            .map(|(k, v)| (k, hex::encode(sha2::Sha256::digest(&v))))
            .collect()
    };
    let (da, db) = (digest(a), digest(b));
    assert_eq!(da, db, "files differ between {} and {}", a.display(), b.display());
    let strip = |dir: &Path| {
        let mut m = manifest(dir);
        let o = m.as_object_mut().unwrap();
        o.remove("config");
        o.remove("config_sha256");
        m
    };
    assert_eq!(strip(a), strip(b), "manifests differ");
}

/// Writes `files` (path, bytes) as a `.tar.gz`, as the aclImdb tarball is packed.
pub fn write_tarball(path: &Path, files: &[(String, Vec<u8>)]) {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let gz = flate2::write::GzEncoder::new(File::create(path).unwrap(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, bytes.as_slice()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
}

/// The ONNX Runtime library the tests use: the pinned version ([`runtime::PINNED_VERSION`],
/// 1.31.1) — found as a user's would be when that is the version found, else from bertpipe's
/// cache folder, else installed there with pip (`bertpipe doctor --install`). Another version
/// on the machine is not used: the tests test what the README says they pin. A test that
/// cannot load it fails and says why: none pass by skipping.
pub fn ort_lib() -> &'static PathBuf {
    use bertpipe::onnx::runtime;
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let pinned = |p: &Path| runtime::library_version(p).ok().as_deref() == Some(runtime::PINNED_VERSION);
        let found = runtime::search(None).expect("searching for ONNX Runtime").0.map(|f| f.path);
        let cached = runtime::libs_in(&runtime::cache_install_dir(false).join("onnxruntime/capi")).into_iter().next();
        let path = match found.into_iter().chain(cached).find(|p| pinned(p)) {
            Some(p) => p,
            None => bertpipe::doctor::install(false).unwrap_or_else(|e| {
                panic!(
                    "ONNX Runtime {} is not on this machine and could not be installed with pip: {e:#}\n{}",
                    runtime::PINNED_VERSION,
                    runtime::install_hint()
                )
            }),
        };
        assert!(pinned(&path), "'{}' is not ONNX Runtime {}", path.display(), runtime::PINNED_VERSION);
        runtime::init(Some(&path))
            .unwrap_or_else(|e| panic!("ONNX Runtime at '{}' does not load: {e:#}", path.display()));
        path
    })
}

/// `ORT_DYLIB_PATH` for a child `bertpipe`.
pub fn ort_env() -> Vec<(&'static str, String)> {
    vec![("ORT_DYLIB_PATH", ort_lib().display().to_string())]
}

/// Every split's rows (and the rejects) of an output, read through its manifest, in order.
pub fn all_rows(out: &Path) -> Vec<(String, RecordBatch)> {
    let m = manifest(out);
    let mut all = Vec::new();
    let mut folders: Vec<(String, &serde_json::Value)> =
        m["splits"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), &v["shards"])).collect();
    folders.push(("_rejects".into(), &m["rejects"]["shards"]));
    for (name, shards) in folders {
        let batches: Vec<RecordBatch> = shards
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| read_parquet(&out.join(s["file"].as_str().unwrap())))
            .collect();
        if batches.is_empty() {
            continue;
        }
        let one = arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap();
        all.push((name, one));
    }
    all
}

/// The manifest's figures, without what necessarily differs (shard lists, the task marker, the
/// configuration, whose sink path is another folder). The leakage block stays: the merge
/// measures it from every task's part, as one process measures it.
pub fn figures(out: &Path) -> serde_json::Value {
    let mut m = manifest(out);
    for s in m["splits"].as_object_mut().unwrap().values_mut() {
        s.as_object_mut().unwrap().remove("shards");
    }
    m["rejects"].as_object_mut().unwrap().remove("shards");
    let o = m.as_object_mut().unwrap();
    for k in ["tasks", "config", "config_sha256"] {
        o.remove(k);
    }
    m
}

#[track_caller]
pub fn assert_same_rows(one: &Path, many: &Path) {
    let (a, b) = (all_rows(one), all_rows(many));
    assert_eq!(
        a.len(),
        b.len(),
        "folders: {:?} vs {:?}",
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    for ((na, ba), (nb, bb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert!(ba.num_rows() > 0, "{na} is empty");
        assert_eq!(ba, bb, "rows of {na} differ");
    }
    assert_eq!(figures(one), figures(many), "manifest figures differ");
}

/// Every file under `dir`, at any depth.
pub fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The records of a training run's `metrics.jsonl`, in order.
pub fn metrics(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The training losses a run logged in `metrics.jsonl`, by step.
pub fn train_losses(out: &Path) -> Vec<(u64, f64)> {
    metrics(out).iter().filter_map(|r| Some((r.get("step")?.as_u64()?, r.get("loss")?.as_f64()?))).collect()
}

/// Two runs logged the same training losses at the same steps, to 1e-4 relative.
#[track_caller]
pub fn assert_same_losses(a: &Path, b: &Path) {
    let (la, lb) = (train_losses(a), train_losses(b));
    assert_eq!(la.len(), lb.len(), "{la:?}\n{lb:?}");
    for ((sa, x), (sb, y)) in la.iter().zip(&lb) {
        assert_eq!(sa, sb);
        assert!((x - y).abs() <= 1e-4 * x.abs().max(1e-3), "step {sa}: loss {x} vs {y}");
    }
}

/// The largest |a − b| over every tensor of two checkpoint folders, relative to the largest |a|.
pub fn weight_gap(a: &Path, b: &Path) -> f64 {
    let load =
        |p: &Path| candle_core::safetensors::load(p.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let (a, b) = (load(a), load(b));
    assert_eq!(a.len(), b.len());
    let (mut gap, mut scale) = (0f64, 0f64);
    for (name, x) in &a {
        let x = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let y = b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for (p, q) in x.iter().zip(&y) {
            gap = gap.max((p - q).abs() as f64);
            scale = scale.max(p.abs() as f64);
        }
    }
    gap / scale
}

/// A folder for a fixture made once per test binary and held in a `static`. A `static`'s
/// destructor never runs, so a `TempDir` kept there stays on disk after the run (three of them,
/// 1.3 GB, after every full `cargo test`): the folder is removed when the test process exits
/// instead, pass or fail.
pub fn fixture_dir() -> PathBuf {
    use std::sync::{Mutex, Once};
    static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    static AT_EXIT: Once = Once::new();
    extern "C" fn remove_fixture_dirs() {
        let dirs = std::mem::take(&mut *DIRS.lock().unwrap_or_else(|e| e.into_inner()));
        for dir in dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    // SAFETY: registers a plain function without arguments, as `atexit` asks.
    AT_EXIT.call_once(|| assert_eq!(unsafe { libc::atexit(remove_fixture_dirs) }, 0, "atexit"));
    let dir = tempfile::tempdir().expect("a temporary folder").keep();
    DIRS.lock().unwrap_or_else(|e| e.into_inner()).push(dir.clone());
    dir
}
