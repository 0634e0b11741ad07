//! Sources, sinks and readers in object storage, against a real S3 server that the harness
//! starts on loopback (s3s-fs, serving a temporary folder; one bucket is one sub-folder): a
//! pipeline from and to a bucket writes the bytes it writes on disk; `stats` and `train` read
//! shards from a bucket; a missing object, a wrong credential and an interrupted upload each
//! give a clear error, and no half-written shard is left behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

const KEY: &str = "bertpipe-test";
const SECRET: &str = "bertpipe-test-secret";
const BUCKET: &str = "corpus";

struct S3Server {
    port: u16,
    /// The folder the server serves (buckets are its sub-folders).
    root: PathBuf,
    /// While this file holds a string, PUT requests whose path contains it fail with HTTP 500.
    fault: PathBuf,
    child: std::process::Child,
}

/// The server binary (tests/s3-server, a crate of its own), built once per test run.
fn server_binary() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target"))
            .join("s3-server");
        let manifest = root().join("tests/s3-server/Cargo.toml");
        eprintln!("building the test S3 server (tests/s3-server) into {}", target.display());
        let o = std::process::Command::new(env!("CARGO"))
            .args(["build", "--release", "--locked", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("run cargo");
        assert!(o.status.success(), "building the test S3 server failed:\n{}", String::from_utf8_lossy(&o.stderr));
        target.join("release/bertpipe-s3-test-server")
    })
}

impl S3Server {
    fn start(root: &Path) -> S3Server {
        use std::io::BufRead;
        std::fs::create_dir_all(root.join(BUCKET)).unwrap();
        let fault = root.with_extension("fault");
        let mut child = std::process::Command::new(server_binary())
            .arg(root)
            .args([KEY, SECRET])
            .arg(&fault)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the test S3 server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("the test S3 server printed {line:?}, not a port"));
        S3Server { port, root: root.to_path_buf(), fault, child }
    }

    /// Makes PUTs whose path contains `marker` fail (or none, with `None`).
    fn fail_puts(&self, marker: Option<&str>) {
        std::fs::write(&self.fault, marker.unwrap_or("")).unwrap();
    }

    /// The file behind `s3://corpus/<key>`.
    fn file(&self, key: &str) -> PathBuf {
        self.root.join(BUCKET).join(key)
    }

    fn env(&self, cache: &Path, secret: &str) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", KEY),
            ("AWS_SECRET_ACCESS_KEY", secret),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", &format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP", "true"),
            ("BERTPIPE_CACHE_DIR", cache.to_str().unwrap()),
            ("BERTPIPE_STORE_RETRIES", "1"),
            ("BERTPIPE_STORE_RETRY_SECS", "5"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(env: &[(String, String)], args: &[&str]) -> Output {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    bertpipe_env(args, &env)
}

/// Every shard the manifest of `a` lists has the same bytes in `b` (the rejects the same rows
/// but for their `origin`), and the manifests agree (but for the configuration, whose paths
/// differ).
#[track_caller]
fn assert_same_shards(a: &Path, b: &Path) {
    let (ma, mb) = (manifest(a), manifest(b));
    let files = |m: &serde_json::Value| -> Vec<String> {
        let mut f: Vec<String> = m["splits"]
            .as_object()
            .unwrap()
            .values()
            .chain([&m["rejects"]])
            .flat_map(|s| s["shards"].as_array().unwrap().iter().map(|x| x["file"].as_str().unwrap().to_string()))
            .collect();
        f.sort();
        f
    };
    assert_eq!(files(&ma), files(&mb));
    assert!(!files(&ma).is_empty());
    for f in files(&ma) {
        if f.starts_with("_rejects/") {
            // Rejects say where each record came from: a path in one run, a URL in the other.
            let (ra, rb) = (read_parquet(&a.join(&f)), read_parquet(&b.join(&f)));
            assert_eq!(ra.len(), rb.len());
            for (x, y) in ra.iter().zip(&rb) {
                let drop_origin = |batch: &arrow_array::RecordBatch| {
                    let keep: Vec<usize> =
                        (0..batch.num_columns()).filter(|&i| batch.schema().field(i).name() != "origin").collect();
                    batch.project(&keep).unwrap()
                };
                assert_eq!(drop_origin(x), drop_origin(y), "{f} differs");
            }
            continue;
        }
        assert!(std::fs::read(a.join(&f)).unwrap() == std::fs::read(b.join(&f)).unwrap(), "{f} differs");
    }
    let strip = |mut m: serde_json::Value| {
        for s in m["rejects"]["shards"].as_array_mut().unwrap() {
            let s = s.as_object_mut().unwrap();
            s.remove("bytes");
            s.remove("sha256");
        }
        let o = m.as_object_mut().unwrap();
        o.remove("config");
        o.remove("config_sha256");
        m
    };
    assert_eq!(strip(ma), strip(mb));
}

#[test]
fn a_tarball_in_a_bucket_to_shards_in_a_bucket_gives_the_bytes_written_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"));
    let env = server.env(&tmp.path().join("cache"), SECRET);
    let corpus = bertpipe::synth::corpus(60, 0, 11);
    write_tarball(&tmp.path().join("aclImdb_v1.tar.gz"), &corpus);
    write_tarball(&server.file("in/aclImdb_v1.tar.gz"), &corpus);

    let local = tmp.path().join("local");
    let local_src = format!("source.path={}", tmp.path().join("aclImdb_v1.tar.gz").display());
    let local_out = format!("sink.path={}", local.display());
    let sets = ["sink.shard_rows=40"];
    assert_ok(&run(
        &env,
        &[
            "pipeline",
            "run",
            "pipelines/imdb.yaml",
            "--quiet",
            "--set",
            &local_src,
            "--set",
            &local_out,
            "--set",
            sets[0],
        ],
    ));

    let src = format!("source.path=s3://{BUCKET}/in/aclImdb_v1.tar.gz");
    let out = format!("sink.path=s3://{BUCKET}/out/imdb");
    let o = run(&env, &["pipeline", "run", "pipelines/imdb.yaml", "--set", &src, "--set", &out, "--set", sets[0]]);
    assert_ok(&o);
    assert!(stderr(&o).contains(&format!("s3://{BUCKET}/out/imdb/_rejects/")), "{}", stderr(&o));
    assert_same_shards(&local, &server.file("out/imdb"));
    assert!(!server.file("out/imdb/_journal.jsonl").exists(), "the journal goes once the manifest is there");

    // An existing output in a bucket is refused without --overwrite, replaced with it.
    let o = run(
        &env,
        &["pipeline", "run", "pipelines/imdb.yaml", "--quiet", "--set", &src, "--set", &out, "--set", sets[0]],
    );
    assert!(!o.status.success() && stderr(&o).contains("--overwrite"), "{}", stderr(&o));
    let again = [
        "pipeline",
        "run",
        "pipelines/imdb.yaml",
        "--quiet",
        "--overwrite",
        "--set",
        &src,
        "--set",
        &out,
        "--set",
        sets[0],
    ];
    assert_ok(&run(&env, &again));
    assert_same_shards(&local, &server.file("out/imdb"));

    // --overwrite never reaches outside the layout: not a whole bucket, not a prefix that also
    // holds someone's objects (named), and a manifest naming `../` is refused by readers
    // before anything is written into (or over) the cache.
    let root_out = format!("sink.path=s3://{BUCKET}");
    std::fs::write(server.file("manifest.json"), "{}").unwrap();
    let o = run(
        &env,
        &["pipeline", "run", "pipelines/imdb.yaml", "--quiet", "--overwrite", "--set", &src, "--set", &root_out],
    );
    assert!(!o.status.success() && stderr(&o).contains("whole bucket"), "{}", stderr(&o));
    assert!(server.file("in/aclImdb_v1.tar.gz").exists());
    std::fs::remove_file(server.file("manifest.json")).unwrap();
    std::fs::write(server.file("out/imdb/README.md"), "my notes").unwrap();
    let o = run(&env, &again);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("refusing to overwrite") && e.contains("out/imdb/README.md"), "{e}");
    assert!(server.file("out/imdb/manifest.json").exists() && server.file("out/imdb/README.md").exists());
    std::fs::remove_file(server.file("out/imdb/README.md")).unwrap();
    let text = std::fs::read_to_string(server.file("out/imdb/manifest.json")).unwrap();
    let evil = text.replacen("\"train/part-00000.parquet\"", "\"../../../../escaped.parquet\"", 1);
    std::fs::create_dir_all(server.file("evil")).unwrap();
    std::fs::write(server.file("evil/manifest.json"), evil).unwrap();
    let o = run(&env, &["stats", &format!("s3://{BUCKET}/evil"), "--quiet"]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("not a path of the shard layout") && e.contains("escaped.parquet"),
        "{e}"
    );
    let escaped: Vec<_> = walk_files(tmp.path()).into_iter().filter(|p| p.ends_with("escaped.parquet")).collect();
    assert!(escaped.is_empty(), "{escaped:?}");

    // Readers: stats from the bucket equals stats from disk; train reads its shards.
    let stats = |input: &str| {
        let o = run(&env, &["stats", input, "--json", "--quiet"]);
        assert_ok(&o);
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("input");
        v
    };
    assert_eq!(stats(&format!("s3://{BUCKET}/out/imdb")), stats(local.to_str().unwrap()));
    let train_out = tmp.path().join("model");
    let o = run(
        &env,
        &[
            "train",
            "pipelines/imdb-finetune.yaml",
            "--quiet",
            "--set",
            &format!("data=s3://{BUCKET}/out/imdb"),
            "--set",
            &format!("output_dir={}", train_out.display()),
            "--set",
            "num_train_epochs=1",
        ],
    );
    assert_ok(&o);
    assert!(train_out.join("final/model.safetensors").is_file());

    // Fetching the shards says how far it is in a log (a `[fetch]` line at every shard here),
    // like any other progress, and nothing with --quiet.
    let logged: Vec<(String, String)> =
        env.iter().cloned().chain([("BERTPIPE_PROGRESS_SECS".to_string(), "0".to_string())]).collect();
    let data = format!("data=s3://{BUCKET}/out/imdb");
    let dry_out = format!("output_dir={}", tmp.path().join("dry").display());
    let dry_run = |quiet: bool| {
        let mut args: Vec<&str> =
            vec!["train", "pipelines/imdb-finetune.yaml", "--dry-run", "--set", &data, "--set", &dry_out];
        if quiet {
            args.push("--quiet");
        }
        let o = run(&logged, &args);
        assert_ok(&o);
        stderr(&o)
    };
    let err = dry_run(false);
    assert!(err.lines().any(|l| l.starts_with("[fetch] ") && l.contains(" shards/s ")), "{err}");
    let err = dry_run(true);
    assert!(!err.contains("[fetch]"), "--quiet prints no progress:\n{err}");
}

#[test]
fn jsonl_objects_in_a_bucket_read_as_the_same_files_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"));
    let env = server.env(&tmp.path().join("cache"), SECRET);
    let local_dir = tmp.path().join("jsonl");
    std::fs::create_dir_all(&local_dir).unwrap();
    std::fs::create_dir_all(server.file("jsonl")).unwrap();
    let mut rng = bertpipe::rng::Rng(4);
    for f in 0..3 {
        let mut text = String::new();
        for _ in 0..30 {
            let review = bertpipe::synth::review(&mut rng, None);
            text.push_str(&serde_json::json!({ "text": review }).to_string());
            text.push('\n');
        }
        std::fs::write(local_dir.join(format!("part-{f}.jsonl")), &text).unwrap();
        std::fs::write(server.file(&format!("jsonl/part-{f}.jsonl")), &text).unwrap();
    }
    let pipeline = write_pipeline(
        tmp.path(),
        "j.yaml",
        "name: j\nsource: {type: jsonl, path: x}\nsteps:\n  - type: punctuation\n  - type: dedup\nsink: {type: parquet, path: y, keep_text: true}\n",
    );
    let pipeline = pipeline.to_str().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for (src, out) in [(local_dir.display().to_string(), &a), (format!("s3://{BUCKET}/jsonl"), &b)] {
        let (src, out) = (format!("source.path={src}"), format!("sink.path={}", out.display()));
        assert_ok(&run(&env, &["pipeline", "run", pipeline, "--quiet", "--set", &src, "--set", &out]));
    }
    assert_eq!(manifest(&b)["splits"]["train"]["docs_in"], 90);
    // Record ids carry the file name, origins the URL: the shards' bytes differ only there.
    let ids = |out: &Path| strings(out, "train", "id");
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(strings(&a, "train", "text"), strings(&b, "train", "text"));

    // Files per split: a glob in the bucket reads as the same glob on disk.
    let split_pipeline = |train: String, test: String, out: &Path| {
        let yaml = format!(
            "name: s\nsource: {{type: jsonl, splits: {{train: '{train}', test: '{test}'}}}}\nsteps:\n  - type: punctuation\nsink: {{type: parquet, path: {}, keep_text: true}}\n",
            out.display()
        );
        write_pipeline(tmp.path(), "s.yaml", &yaml)
    };
    let (c, d) = (tmp.path().join("c"), tmp.path().join("d"));
    let local = split_pipeline(
        format!("{}/part-[01].jsonl", local_dir.display()),
        format!("{}/part-2.jsonl", local_dir.display()),
        &c,
    );
    assert_ok(&run(&env, &["pipeline", "run", local.to_str().unwrap(), "--quiet"]));
    let remote =
        split_pipeline(format!("s3://{BUCKET}/jsonl/part-[01].jsonl"), format!("s3://{BUCKET}/jsonl/part-2.jsonl"), &d);
    assert_ok(&run(&env, &["pipeline", "run", remote.to_str().unwrap(), "--quiet"]));
    let m = manifest(&d);
    assert_eq!(
        (m["splits"]["train"]["docs_in"].as_u64(), m["splits"]["test"]["docs_in"].as_u64()),
        (Some(60), Some(30))
    );
    assert_eq!(
        m["source_files"]["train"],
        serde_json::json!([format!("s3://{BUCKET}/jsonl/part-0.jsonl"), format!("s3://{BUCKET}/jsonl/part-1.jsonl")])
    );
    for split in ["train", "test"] {
        assert_eq!(strings(&c, split, "id"), strings(&d, split, "id"));
        assert_eq!(strings(&c, split, "text"), strings(&d, split, "text"));
    }
    let none =
        split_pipeline(format!("s3://{BUCKET}/jsonl/nope-*.jsonl"), format!("s3://{BUCKET}/jsonl/part-2.jsonl"), &d);
    let o = run(&env, &["pipeline", "run", none.to_str().unwrap(), "--quiet", "--overwrite"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("split `train`: no object matches 's3://corpus/jsonl/nope-*.jsonl'"), "{}", stderr(&o));

    // Parquet objects with label names: the names are found in the objects too.
    {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, RecordBatch, StringArray};
        std::fs::create_dir_all(server.file("pq")).unwrap();
        for (split, n) in [("train", 4), ("test", 3)] {
            let texts: Vec<String> = (0..n).map(|i| format!("a {split} review number {i} of a film")).collect();
            let labels: Vec<&str> = (0..n).map(|i| ["good", "bad"][i % 2]).collect();
            let batch = RecordBatch::try_from_iter([
                ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
                ("label", Arc::new(StringArray::from(labels)) as ArrayRef),
            ])
            .unwrap();
            let file = std::fs::File::create(server.file(&format!("pq/{split}.parquet"))).unwrap();
            let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
        }
        let yaml = format!(
            "name: p\nsource: {{type: parquet, splits: {{train: 's3://{BUCKET}/pq/train.parquet', test: 's3://{BUCKET}/pq/test.parquet'}}}}\nsink: {{type: parquet, path: {}}}\n",
            d.display()
        );
        let p = write_pipeline(tmp.path(), "pq.yaml", &yaml);
        let o = run(&env, &["pipeline", "run", p.to_str().unwrap(), "--overwrite"]);
        assert_ok(&o);
        assert!(stderr(&o).contains("labels bad=0, good=1"), "{}", stderr(&o));
        assert_eq!(manifest(&d)["id2label"], serde_json::json!({"0": "bad", "1": "good"}));
    }
}

#[test]
fn missing_objects_wrong_credentials_and_interrupted_uploads_fail_clearly_and_leave_no_half_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"));
    let env = server.env(&tmp.path().join("cache"), SECRET);
    write_tarball(&server.file("in/aclImdb_v1.tar.gz"), &bertpipe::synth::corpus(60, 0, 12));
    let src = format!("source.path=s3://{BUCKET}/in/aclImdb_v1.tar.gz");
    let out = format!("sink.path=s3://{BUCKET}/out/imdb");
    let args = |extra: &'static [&'static str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "pipeline",
            "run",
            "pipelines/imdb-clean.yaml",
            "--quiet",
            "--set",
            &src,
            "--set",
            &out,
            "--set",
            "sink.shard_rows=30",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let call = |env: &[(String, String)], a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run(env, &a)
    };

    // A missing object.
    let missing = format!("source.path=s3://{BUCKET}/in/nothing.tar.gz");
    let o = run(&env, &["pipeline", "run", "pipelines/imdb-clean.yaml", "--quiet", "--set", &missing, "--set", &out]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("nothing.tar.gz") && e.contains("does not exist"), "{e}");
    assert!(!server.file("out/imdb/manifest.json").exists());

    // A wrong secret key.
    let wrong = server.env(&tmp.path().join("cache"), "not-the-secret");
    let o = call(&wrong, args(&[]));
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("refused") && e.contains("credentials"), "{e}");

    // The upload of the second train shard fails: the run stops naming it; that shard is not
    // in the bucket, nor is a manifest; --resume finishes the run once uploads work again.
    server.fail_puts(Some("train/part-00001"));
    let o = call(&env, args(&[]));
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("could not upload") && e.contains("train/part-00001.parquet"), "{e}");
    assert!(!server.file("out/imdb/train/part-00001.parquet").exists(), "no half-written shard");
    assert!(server.file("out/imdb/train/part-00000.parquet").exists());
    assert!(!server.file("out/imdb/manifest.json").exists());
    server.fail_puts(None);
    let o = call(&env, args(&["--resume"]));
    assert_ok(&o);
    assert!(server.file("out/imdb/manifest.json").exists());
    let local = tmp.path().join("local");
    write_tarball(&tmp.path().join("aclImdb_v1.tar.gz"), &bertpipe::synth::corpus(60, 0, 12));
    let (lsrc, lout) = (
        format!("source.path={}", tmp.path().join("aclImdb_v1.tar.gz").display()),
        format!("sink.path={}", local.display()),
    );
    assert_ok(&run(
        &env,
        &[
            "pipeline",
            "run",
            "pipelines/imdb-clean.yaml",
            "--quiet",
            "--set",
            &lsrc,
            "--set",
            &lout,
            "--set",
            "sink.shard_rows=30",
        ],
    ));
    assert_same_shards(&local, &server.file("out/imdb"));
}

/// A task array reading from and writing to a bucket: scan, run and merge there; the merged
/// output reads (through `stats`) as the single run on disk does.
#[test]
fn a_task_array_in_a_bucket_merges_into_the_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"));
    let env = server.env(&tmp.path().join("cache"), SECRET);
    let corpus = bertpipe::synth::corpus(50, 0, 13);
    write_tarball(&tmp.path().join("aclImdb_v1.tar.gz"), &corpus);
    write_tarball(&server.file("in/aclImdb_v1.tar.gz"), &corpus);
    let local = tmp.path().join("local");
    let (lsrc, lout) = (
        format!("source.path={}", tmp.path().join("aclImdb_v1.tar.gz").display()),
        format!("sink.path={}", local.display()),
    );
    assert_ok(&run(&env, &["pipeline", "run", "pipelines/imdb.yaml", "--quiet", "--set", &lsrc, "--set", &lout]));

    let src = format!("source.path=s3://{BUCKET}/in/aclImdb_v1.tar.gz");
    let out = format!("sink.path=s3://{BUCKET}/arr");
    for phase in ["scan", "run"] {
        for i in ["0", "1", "2"] {
            let args = [
                "pipeline",
                phase,
                "pipelines/imdb.yaml",
                "--quiet",
                "--task-index",
                i,
                "--task-count",
                "3",
                "--set",
                &src,
                "--set",
                &out,
            ];
            assert_ok(&run(&env, &args));
        }
    }
    assert!(
        server.file("arr/tasks/scan/00001.bin").is_file() && server.file("arr/tasks/00002/manifest.json").is_file()
    );
    let o = run(&env, &["stats", &format!("s3://{BUCKET}/arr"), "--quiet"]);
    assert!(!o.status.success(), "no merged manifest yet");
    assert_ok(&run(&env, &["shards", "merge", &format!("s3://{BUCKET}/arr")]));
    assert_eq!(manifest(&server.file("arr"))["tasks"]["count"], 3);
    let stats = |input: &str| {
        let o = run(&env, &["stats", input, "--json", "--quiet"]);
        assert_ok(&o);
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("input");
        v
    };
    assert_eq!(stats(&format!("s3://{BUCKET}/arr")), stats(local.to_str().unwrap()));
}

/// Defect 16: a chain stage reading from object storage is keyed by the objects' versions
/// (ETags), as local inputs are by content — not by the URL string: an object rewritten at the
/// same size runs the stage again, an untouched bucket runs nothing.
#[test]
fn a_chain_stage_over_a_bucket_is_keyed_by_the_objects_it_read() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"));
    let env = server.env(&tmp.path().join("cache"), SECRET);
    std::fs::create_dir_all(server.file("chain")).unwrap();
    let write = |tag: &str| {
        let text: String =
            (0..20).map(|i| format!("{{\"text\": \"{tag} review {i} says the film was fine\"}}\n")).collect();
        std::fs::write(server.file("chain/a.jsonl"), text).unwrap();
    };
    write("one");
    let exp = common::chain::write_experiment(
        tmp.path(),
        "chain.yaml",
        "bucket",
        &format!(
            "  data:\n    name: b\n    source: {{ type: jsonl, path: 's3://{BUCKET}/chain' }}\n    steps:\n      - {{ type: punctuation }}\n    sink: {{ type: parquet, keep_text: true }}\n"
        ),
    );
    let out = tmp.path().join("out");
    let status = |out: &Path| -> String {
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
        r["stages"][0]["status"].as_str().unwrap().to_string()
    };
    let e = exp.to_str().unwrap();
    assert_ok(&run(&env, &["run", e, "--quiet"]));
    assert_eq!(status(&out), "ran");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(".stages/data.json")).unwrap()).unwrap();
    assert!(rec["reads"]["objects"].as_object().unwrap().keys().any(|k| k.ends_with("chain/a.jsonl")), "{rec}");
    assert_ok(&run(&env, &["run", e, "--quiet"]));
    assert_eq!(status(&out), "up to date");
    // The same size, other bytes.
    write("two");
    assert_ok(&run(&env, &["run", e, "--quiet"]));
    assert_eq!(status(&out), "ran");
    assert!(strings(&out.join("data"), "train", "text").iter().all(|t| t.starts_with("two")));
}
