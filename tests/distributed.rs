//! Data-parallel training under `mpirun` (the `mpi` feature, OpenMPI): two ranks train what one
//! process trains — weights and logged losses to 1e-4 with dropout on — a run written by two
//! ranks resumes on one, and a rank that dies or disagrees ends the job with an error naming it.
//!
//! `cargo test --release --features mpi --test distributed` (`.ci/run` installs OpenMPI).
#![cfg(feature = "mpi")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_ok, assert_same_losses, metrics, run_pipeline, stderr, weight_gap};
use serde_json::Value;

const CONFIG: &str = "pipelines/imdb-finetune.yaml";

/// Shards of the bundled sample (pipelines/imdb.yaml), made once per test.
fn shards(dir: &Path) -> PathBuf {
    let out = dir.join("imdb");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &out, &[]));
    out
}

/// `--set` arguments of a short run with dropout on (the tiny preset's 0.1), one thread per
/// process, an evaluation and a checkpoint on the way.
fn settings(data: &Path, out: &Path, per_device: usize, extra: &[&str]) -> Vec<String> {
    let mut s = vec![
        format!("data={}", data.display()),
        format!("output_dir={}", out.display()),
        format!("per_device_train_batch_size={per_device}"),
        "max_steps=12".into(),
        "logging_steps=1".into(),
        "eval_strategy=steps".into(),
        "eval_steps=6".into(),
        "save_steps=6".into(),
        "threads=1".into(),
    ];
    s.extend(extra.iter().map(|e| e.to_string()));
    s
}

fn train_args(sets: &[String], flags: &[&str]) -> Vec<String> {
    let mut a = vec!["train".to_string(), CONFIG.into(), "--quiet".into()];
    for s in sets {
        a.extend(["--set".into(), s.clone()]);
    }
    a.extend(flags.iter().map(|f| f.to_string()));
    a
}

/// One process, no launcher.
fn single(sets: &[String], flags: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bertpipe"));
    c.args(train_args(sets, flags)).current_dir(common::root());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// `mpirun` of the given programs (MPMD: `-n 1 A : -n 1 B`), each a list of bertpipe arguments;
/// killed (and failed) past `limit`.
fn mpirun(programs: &[(usize, Vec<String>)], env: &[(&str, &str)], limit: Duration) -> (Output, Duration) {
    let mut c = Command::new("mpirun");
    // Root in CI; two ranks on two cores; no binding (each rank runs one thread).
    c.args(["--oversubscribe", "--bind-to", "none"]);
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for (k, v) in env {
        c.args(["-x", &format!("{k}={v}")]);
    }
    for (i, (n, args)) in programs.iter().enumerate() {
        if i > 0 {
            c.arg(":");
        }
        c.args(["-n", &n.to_string(), env!("CARGO_BIN_EXE_bertpipe")]).args(args);
    }
    c.current_dir(common::root()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = c.spawn().expect("mpirun (OpenMPI: apt install openmpi-bin libopenmpi-dev)");
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("mpirun still running after {limit:?}: a hang\nstderr:\n{}", stderr(&o));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (child.wait_with_output().unwrap(), started.elapsed())
}

fn ranks(n: usize, args: Vec<String>) -> Vec<(usize, Vec<String>)> {
    vec![(n, args)]
}

#[test]
fn two_ranks_train_what_one_process_with_their_global_batch_trains() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path());
    let one = dir.path().join("one");
    assert_ok(&single(&settings(&data, &one, 16, &[]), &[], &[]));

    // 2 ranks × 8 rows: the same global batch of 16.
    let two = dir.path().join("two");
    let (o, _) = mpirun(&ranks(2, train_args(&settings(&data, &two, 8, &[]), &[])), &[], Duration::from_secs(300));
    assert_ok(&o);
    let gap = weight_gap(&one.join("final"), &two.join("final"));
    assert!(gap <= 1e-4, "2 ranks × 8 vs 1 × 16: weights differ by {gap:e} of their scale");
    assert!(
        gap > 0.0 || std::env::var_os("BERTPIPE_ALLOW_EXACT").is_some(),
        "bit-identical: is the test running two ranks?"
    );
    assert_same_losses(&one, &two);
    let log = metrics(&two);
    assert!(log.iter().any(|r| r.get("ranks") == Some(&Value::from(2))), "{log:?}");
    assert!(log.iter().any(|r| r.get("allreduce_seconds_per_step").is_some()), "{log:?}");
    // The evaluations (split over the ranks, gathered) equal one process's.
    let evals = |out: &Path| -> Vec<f64> {
        metrics(out).iter().filter_map(|r| r.get("eval_accuracy").and_then(Value::as_f64)).collect()
    };
    assert_eq!(evals(&one), evals(&two));
    assert!(!evals(&one).is_empty());
    // Rank 0 alone wrote: one metrics log, checkpoints, the final model.
    assert!(two.join("checkpoint-12").is_dir() && two.join("final/config.json").is_file());

    // Accumulation is elastic too: 1 process × 8 rows × 2 micro-batches.
    let accum = dir.path().join("accum");
    assert_ok(&single(&settings(&data, &accum, 8, &["gradient_accumulation_steps=2"]), &[], &[]));
    let gap = weight_gap(&one.join("final"), &accum.join("final"));
    assert!(gap <= 1e-4, "1 × 8 × 2 vs 1 × 16: {gap:e}");
    assert_same_losses(&one, &accum);

    // The dry run shows the layout and the global batch; --show-batches which rank takes a row.
    let (o, _) = mpirun(
        &ranks(
            2,
            train_args(&settings(&data, &dir.path().join("plan"), 8, &[]), &["--dry-run", "--show-batches", "0:0..1"]),
        ),
        &[],
        Duration::from_secs(120),
    );
    assert_ok(&o);
    let plan = String::from_utf8_lossy(&o.stdout);
    assert!(plan.contains("rank 0 of 2 (mpirun, local rank 0)"), "{plan}");
    assert!(plan.contains("global batch 16 rows = 8 per device × 2 rank(s) × 1 accumulation step(s)"), "{plan}");
    let rows: Vec<&str> = plan.lines().filter(|l| l.starts_with("0\t0\t1\t")).collect();
    assert_eq!(rows.len(), 16, "{plan}");
    assert_eq!(rows.iter().filter(|l| l.ends_with("\t1")).count(), 8, "{plan}");
    assert_eq!(plan.matches("nothing was trained").count(), 1, "rank 0 alone prints the plan: {plan}");
}

#[test]
fn a_run_of_two_ranks_resumes_on_one_with_the_same_global_batch() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path());
    let whole = dir.path().join("whole");
    assert_ok(&single(&settings(&data, &whole, 16, &[]), &[], &[]));

    // Stopped (as by Ctrl-C) at step 5 on two ranks: a checkpoint, exit 130.
    let cut = dir.path().join("cut");
    let (o, _) = mpirun(
        &ranks(2, train_args(&settings(&data, &cut, 8, &[]), &[])),
        &[("BERTPIPE_STOP_AT_STEP", "5")],
        Duration::from_secs(300),
    );
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(cut.join("checkpoint-5").is_dir(), "{}", stderr(&o));
    assert!(!cut.join("final").exists());
    // Resumed by one process with 16 rows a step: the same run.
    assert_ok(&single(&settings(&data, &cut, 16, &[]), &["--resume"], &[]));
    let gap = weight_gap(&whole.join("final"), &cut.join("final"));
    assert!(gap <= 1e-4, "resumed on one rank: {gap:e}");
    assert_same_losses(&whole, &cut);

    // Another global batch is another run: refused, saying why.
    let o = single(&settings(&data, &cut, 8, &[]), &["--resume"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("same global batch"), "{}", stderr(&o));
}

#[test]
fn a_rank_that_dies_or_disagrees_ends_the_job_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path());
    let limit = Duration::from_secs(120);

    let args =
        |name: &str, data: &Path, extra: &[&str]| train_args(&settings(data, &dir.path().join(name), 8, extra), &[]);

    // Killed at step 3: mpirun ends the other rank (waiting in the all-reduce) and names it.
    let (o, took) = mpirun(&ranks(2, args("killed", &data, &[])), &[("BERTPIPE_KILL_RANK_AT_STEP", "1:3")], limit);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("rank 1"), "{err}");
    assert!(took < Duration::from_secs(90), "{took:?}");

    // An error on one rank: said with its rank, and the job ends.
    let (o, _) = mpirun(&ranks(2, args("failed", &data, &[])), &[("BERTPIPE_FAIL_RANK_AT_STEP", "1:3")], limit);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("error: rank 1 of 2 (mpirun): failing at step 3"), "{err}");

    // Ranks started with different configs: an error at the start, before any step.
    let (o, _) =
        mpirun(&[(1, args("differ", &data, &[])), (1, args("differ", &data, &["learning_rate=1e-3"]))], &[], limit);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("rank 1's resolved training config differs from rank 0's"), "{err}");
    assert!(!dir.path().join("differ/metrics.jsonl").exists(), "nothing written before the ranks agree");

    // One rank started with --dry-run: an error on both, not a rank left waiting for the other.
    let dry = train_args(&settings(&data, &dir.path().join("dry"), 8, &[]), &["--dry-run"]);
    let (o, took) = mpirun(&[(1, args("dry", &data, &[])), (1, dry)], &[], limit);
    let err = stderr(&o);
    assert!(
        !o.status.success() && err.contains("rank 1's choice of flags (--dry-run, --resume …) differs from rank 0's"),
        "{err}"
    );
    assert!(took < Duration::from_secs(90), "{took:?}");

    // A rank that cannot read the shards says which rank and which path.
    let missing = dir.path().join("nowhere");
    let (o, _) = mpirun(&[(1, args("lost", &data, &[])), (1, args("lost", &missing, &[]))], &[], limit);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("error: rank 1 of 2 (mpirun)") && err.contains(&missing.display().to_string()), "{err}");
}

/// The chain's train stage under a launcher: `bertpipe run X --until data` prepares its shards,
/// `mpirun -n 2 bertpipe run X --stage finetune` trains it on two ranks (the weights of one
/// process with the same global batch), records it, resumes it after a stop, and the next plain
/// `bertpipe run X` takes it as up to date and runs the stages after it.
#[test]
fn the_chain_runs_its_train_stage_as_ranks() {
    use common::chain::{pipelines, run, statuses, write_experiment};
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(300);
    let chain = |name: &str, per_device: usize| {
        let folder = dir.path().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let stages = format!(
            "  data: {}
  finetune:
    base: {}
    per_device_train_batch_size: {per_device}
    max_steps: 12
    logging_steps: 1
    eval_strategy: steps
    eval_steps: 6
    save_steps: 6
    threads: 1
  export: {{ optimize: false }}
",
            pipelines("imdb.yaml"),
            pipelines("imdb-finetune.yaml")
        );
        write_experiment(&folder, "chain.yaml", name, &stages)
    };
    let stage_args = |exp: &Path, extra: &[&str]| {
        let mut a: Vec<String> =
            ["run", exp.to_str().unwrap(), "--stage", "finetune", "--quiet"].map(String::from).into();
        a.extend(extra.iter().map(|e| e.to_string()));
        a
    };
    let env = [("ORT_DYLIB_PATH", common::ort_lib().display().to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // One process, 16 rows a step: the reference.
    let one = chain("one", 16);
    assert_ok(&run(&one, &[], &[]));

    let two = chain("two", 8);
    let out = two.parent().unwrap().join("out");
    // Before its shards exist: refused on every rank, saying what to run — no rank left waiting.
    let (o, took) = mpirun(&ranks(2, stage_args(&two, &[])), &env, limit);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("`finetune` reads `data`, which is not up to date") && err.contains("--until data"), "{err}");
    assert!(err.contains("rank 1 of 2") && err.contains("rank 0 refused `finetune`"), "{err}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    // The whole chain under a launcher: refused, pointing at --stage.
    let (o, _) = mpirun(&ranks(2, ["run", two.to_str().unwrap(), "--quiet"].map(String::from).into()), &env, limit);
    assert!(!o.status.success() && stderr(&o).contains("--stage NAME"), "{}", stderr(&o));

    // --until data: the pipeline runs, the stages after it do not.
    assert_ok(&run(&two, &["--until", "data"], &[]));
    let s = statuses(&out);
    assert_eq!((s["data"].as_str(), s["finetune"].as_str(), s["export"].as_str()), ("ran", "not run", "not run"));

    // Two ranks × 8 rows, stopped at step 5 (a checkpoint, as by Ctrl-C), then the same command:
    // it resumes the unfinished stage instead of starting over.
    let (o, _) = mpirun(&ranks(2, stage_args(&two, &[])), &[env[0], ("BERTPIPE_STOP_AT_STEP", "5")], limit);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(out.join("finetune/checkpoint-5").is_dir() && !out.join(".stages/finetune.json").exists());
    let (o, _) = mpirun(&ranks(2, stage_args(&two, &[])), &env, limit);
    assert_ok(&o);
    let (a, b) = (dir.path().join("one/out/finetune"), out.join("finetune"));
    let gap = weight_gap(&a.join("final"), &b.join("final"));
    assert!(gap <= 1e-4, "the chain's stage on 2 ranks × 8 vs 1 × 16: {gap:e}");
    assert_same_losses(&a, &b);
    assert!(metrics(&b).iter().any(|r| r.get("ranks") == Some(&Value::from(2))));

    // Recorded: the same command is up to date (nothing retrained), and a plain run goes on.
    let log = std::fs::read(b.join("metrics.jsonl")).unwrap();
    let (o, _) = mpirun(&ranks(2, stage_args(&two, &[])), &env, limit);
    assert_ok(&o);
    assert_eq!(std::fs::read(b.join("metrics.jsonl")).unwrap(), log, "an up-to-date stage trained again");
    // Ranks started with other settings: refused on every rank before rank 0 voids anything.
    let other = stage_args(&two, &["--set", "finetune.learning_rate=0.01"]);
    let (o, _) = mpirun(&[(1, stage_args(&two, &[])), (1, other)], &env, limit);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("rank 1 runs another experiment, stage, configuration"), "{err}");
    assert!(out.join(".stages/finetune.json").is_file() && b.join("final").is_dir(), "the record survives");
    assert_ok(&run(&two, &[], &[]));
    let s = statuses(&out);
    assert_eq!((s["data"].as_str(), s["finetune"].as_str(), s["export"].as_str()), ("up to date", "up to date", "ran"));

    // Asked for by name in one process, it is not the model two ranks trained (global batch 8,
    // not 16): the world size is in its key, so it trains again, and records one process.
    // (The whole chain above took the two ranks' record as it is.)
    let alone = stage_args(&two, &[]);
    let o = common::chain::bertpipe(&alone.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    assert_ok(&o);
    assert_ne!(std::fs::read(b.join("metrics.jsonl")).unwrap(), log, "one process found two ranks' stage up to date");
    let rec: Value = serde_json::from_slice(&std::fs::read(out.join(".stages/finetune.json")).unwrap()).unwrap();
    assert_eq!(rec["parts"]["environment"]["world_size"], "1", "{rec}");
    assert!(metrics(&b).iter().all(|r| r.get("ranks").is_none_or(|n| n == &Value::from(1))));

    // --force starts it over (from step 0, on two ranks again).
    let written = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let before = written(&b.join("final/model.safetensors"));
    let (o, _) = mpirun(&ranks(2, stage_args(&two, &["--force", "finetune"])), &env, limit);
    assert_ok(&o);
    assert!(written(&b.join("final/model.safetensors")) > before, "--force did not train again");
    let gap = weight_gap(&a.join("final"), &b.join("final"));
    assert!(gap <= 1e-4, "forced: {gap:e}");
}
