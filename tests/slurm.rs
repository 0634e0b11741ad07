//! Task arrays under a real Slurm: `slurmctld`, `slurmd` and `slurmdbd` on this machine, started
//! by `scripts/slurm-check.sh`, which runs these tests (`--ignored`, one at a time) with
//! `SLURM_CONF` set. They submit what a user submits — `examples/slurm/submit.sh`,
//! `bertpipe-array.sbatch`, the README's `bertpipe run … --stage` and `bertpipe eval` arrays —
//! wait for Slurm to finish them, read the jobs' states and exit codes back from `sacct`, and
//! compare what the arrays wrote with one process's output.
//!
//! Without a cluster (plain `cargo test`) they are ignored: `scripts/slurm-check.sh` is the one
//! way to run them, and `.ci/run` runs it. What `submit.sh` decides before Slurm sees anything —
//! whether it submits a scan phase, which it asks `bertpipe pipeline validate --json` — is
//! tested without one, by plain `cargo test`, with a stand-in `sbatch` that records its calls.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_bertpipe")
}

fn slurm_conf() -> String {
    std::env::var("SLURM_CONF").expect("SLURM_CONF: run these through scripts/slurm-check.sh")
}

/// A command's stdout, asserting it succeeded.
#[track_caller]
fn ok_stdout(cmd: &mut Command) -> String {
    let o = cmd.env("SLURM_CONF", slurm_conf()).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `sbatch --parsable ARGS` in `cwd` with `env`: the job id.
fn sbatch(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new("sbatch");
    cmd.arg("--parsable").args(args).current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = ok_stdout(&mut cmd);
    out.trim().split(';').next().unwrap().to_string()
}

/// `command` as a job named `name` that starts once `job` (every task of it) has succeeded.
fn after(cwd: &Path, job: &str, name: &str, command: &str, env: &[(&str, &str)]) -> String {
    let (dep, name, wrap) =
        (format!("--dependency=afterok:{job}"), format!("--job-name={name}"), format!("--wrap={command}"));
    sbatch(cwd, &[&dep, &name, SMALL[0], SMALL[1], &wrap], env)
}

/// One `sacct` line: a job, or one task of an array (`123_4`).
#[derive(Debug)]
struct Job {
    id: String,
    name: String,
    state: String,
    exit: String,
}

/// Waits until none of `jobs` (id, number of tasks) is pending or running, and `sacct` has a
/// line in a final state for each of their tasks (the controller sends them to slurmdbd as
/// they end, so they may come a little after the queue empties); returns those lines (printed,
/// for the record).
fn wait(jobs: &[(&str, usize)]) -> Vec<Job> {
    let started = Instant::now();
    let list = jobs.iter().map(|j| j.0).collect::<Vec<_>>().join(",");
    let expected: usize = jobs.iter().map(|j| j.1).sum();
    loop {
        assert!(started.elapsed() < Duration::from_secs(900), "jobs {list} did not finish in 15 minutes");
        let queued = ok_stdout(Command::new("squeue").args(["-h", "-j", &list, "-o", "%i %T"]));
        if queued.trim().is_empty() {
            let text = ok_stdout(Command::new("sacct").args([
                "-n",
                "-P",
                "-X",
                "-j",
                &list,
                "--format=JobID,JobName,State,ExitCode",
            ]));
            let lines: Vec<Job> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    let f: Vec<&str> = l.split('|').collect();
                    Job { id: f[0].into(), name: f[1].into(), state: f[2].into(), exit: f[3].into() }
                })
                .collect();
            let settled = lines.len() >= expected
                && lines.iter().all(|j| !matches!(j.state.as_str(), "PENDING" | "RUNNING" | "REQUEUED" | "COMPLETING"));
            if settled || started.elapsed() > Duration::from_secs(120) {
                eprintln!("sacct -X -j {list}:");
                for j in &lines {
                    eprintln!("  {:<14} {:<16} {:<12} {}", j.id, j.name, j.state, j.exit);
                }
                return lines;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every line of `job` (its array tasks) completed with exit code 0, `tasks` of them.
#[track_caller]
fn assert_completed(lines: &[Job], job: &str, tasks: usize) {
    let mine: Vec<&Job> = lines.iter().filter(|j| j.id == job || j.id.starts_with(&format!("{job}_"))).collect();
    assert_eq!(mine.len(), tasks, "job {job}: {mine:?}");
    for j in mine {
        assert_eq!((j.state.as_str(), j.exit.as_str()), ("COMPLETED", "0:0"), "{j:?}");
    }
}

/// An IMDb-shaped tarball of `per_label` reviews per label and split.
fn tarball(dir: &Path, per_label: usize) -> PathBuf {
    let path = dir.join("aclImdb_v1.tar.gz");
    write_tarball(&path, &bertpipe::synth::corpus(per_label, 0, 17));
    path
}

/// The classification pipeline of the README on `source`, with `extra_steps` after its `dedup`.
fn pipeline(dir: &Path, name: &str, source: &Path, extra_steps: &str, shard_rows: usize) -> PathBuf {
    let vocab = root().join("data/vocab/bert-base-uncased.txt");
    let yaml = format!(
        "name: {name}\nsource: {{type: aclimdb, path: {}, splits: [train, test], labels: [neg, pos]}}\nsteps:\n  - type: html_strip\n  - type: unicode_normalize\n  - type: punctuation\n  - type: noise_score\n  - type: filter\n    min_words: 3\n    max_noise: 15.0\n{extra_steps}  - type: tokenize\n    vocab: {}\n  - type: classify_sequences\n    max_len: 128\nsink: {{type: parquet, path: unused, shard_rows: {shard_rows}}}\n",
        source.display(),
        vocab.display()
    );
    write_pipeline(dir, &format!("{name}.yaml"), &yaml)
}

fn run_once(pipeline: &Path, out: &Path) {
    let set = format!("sink.path={}", out.display());
    assert_ok(&bertpipe(&["pipeline", "run", pipeline.to_str().unwrap(), "--quiet", "--set", &set]));
}

fn sbatch_script() -> String {
    root().join("examples/slurm/bertpipe-array.sbatch").display().to_string()
}

/// Options every job of these tests gets: one CPU and a little memory, so that the one node's
/// CPUs run tasks side by side.
const SMALL: [&str; 2] = ["--cpus-per-task=1", "--mem=1G"];

#[test]
#[ignore = "needs a Slurm cluster: scripts/slurm-check.sh starts one and runs these"]
fn submit_sh_runs_scan_run_and_merge_with_global_dedup_as_one_process_would() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tarball(tmp.path(), 5000); // 20,000 reviews
    let p = pipeline(tmp.path(), "dedup", &corpus, "  - type: dedup\n  - type: near_dedup\n", 2000);
    let (one, many) = (tmp.path().join("one"), tmp.path().join("many"));
    let started = Instant::now();
    run_once(&p, &one);
    let one_secs = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let submit = root().join("examples/slurm/submit.sh");
    let out = ok_stdout(
        Command::new("bash")
            .arg(&submit)
            .args([p.to_str().unwrap(), many.to_str().unwrap(), "4"])
            .args(SMALL)
            .env("BERTPIPE", bin())
            .current_dir(tmp.path()),
    );
    // submitted: scan 12, run 13, merge 14
    let line = out.lines().find(|l| l.starts_with("submitted:")).unwrap_or_else(|| panic!("{out}"));
    let ids: Vec<&str> =
        line.split([',', ' ']).filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit())).collect();
    assert_eq!(ids.len(), 3, "{line}");
    let lines = wait(&[(ids[0], 4), (ids[1], 4), (ids[2], 1)]);
    let array_secs = started.elapsed().as_secs_f64();
    assert_completed(&lines, ids[0], 4);
    assert_completed(&lines, ids[1], 4);
    assert_completed(&lines, ids[2], 1);
    assert_same_rows(&one, &many);
    let m = manifest(&many);
    assert_eq!(m["tasks"]["count"], 4);
    let rejected: u64 = m["splits"]
        .as_object()
        .unwrap()
        .values()
        .map(|s| s["docs_in"].as_u64().unwrap() - s["docs_out"].as_u64().unwrap())
        .sum();
    assert!(rejected > 0, "the generated corpus has duplicates for dedup to find");
    // Each task's log is where the sbatch script says.
    for i in 0..4 {
        let log = tmp.path().join(format!("bertpipe-bertpipe-run-{}_{i}.log", ids[1]));
        let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        assert!(text.contains(&format!("task {i} of 4")), "{text}");
    }
    eprintln!("20,000 reviews: one process {one_secs:.1} s; scan → run → merge as a 4-task array under Slurm {array_secs:.1} s (submission to the merge's end)");
}

#[test]
#[ignore = "needs a Slurm cluster: scripts/slurm-check.sh starts one and runs these"]
fn arrays_from_one_stepped_and_throttled_are_the_same_run() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tarball(tmp.path(), 300);
    let p = pipeline(tmp.path(), "plain", &corpus, "", 200);
    let one = tmp.path().join("one");
    run_once(&p, &one);
    for (name, array) in [("from-one", "1-4"), ("stepped", "0-6:2"), ("throttled", "0-3%2")] {
        let out = tmp.path().join(name);
        let (pl, o) = (p.display().to_string(), out.display().to_string());
        let env = [("PHASE", "run"), ("PIPELINE", pl.as_str()), ("OUT", o.as_str()), ("BERTPIPE", bin())];
        let array_arg = format!("--array={array}");
        let mut args = vec![array_arg.as_str(), "--job-name=run"];
        args.extend(SMALL);
        let script = sbatch_script();
        args.push(&script);
        let run = sbatch(tmp.path(), &args, &env);
        let merge = after(tmp.path(), &run, "merge", &format!("{} shards merge {o}", bin()), &[]);
        let lines = wait(&[(&run, 4), (&merge, 1)]);
        assert_completed(&lines, &run, 4);
        assert_completed(&lines, &merge, 1);
        assert_same_rows(&one, &out);
    }
}

#[test]
#[ignore = "needs a Slurm cluster: scripts/slurm-check.sh starts one and runs these"]
fn a_task_cancelled_mid_run_resumes_when_resubmitted_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tarball(tmp.path(), 2000);
    let p = pipeline(tmp.path(), "cancel", &corpus, "", 300);
    let (one, many) = (tmp.path().join("one"), tmp.path().join("many"));
    run_once(&p, &one);
    // Task 2 waits after its second shard (a test hook), as if the node were slow, to be
    // cancelled there; the others run through.
    let wrapper = tmp.path().join("bertpipe-pausing");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n[ \"$SLURM_ARRAY_TASK_ID\" = 2 ] && export BERTPIPE_PAUSE_AFTER_SHARDS=2\nexec {} \"$@\"\n",
            bin()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (pl, o) = (p.display().to_string(), many.display().to_string());
    let w = wrapper.display().to_string();
    let env = [("PHASE", "run"), ("PIPELINE", pl.as_str()), ("OUT", o.as_str()), ("BERTPIPE", w.as_str())];
    let script = sbatch_script();
    let run = sbatch(tmp.path(), &["--array=0-3", "--job-name=run", SMALL[0], SMALL[1], &script], &env);
    let log = tmp.path().join(format!("bertpipe-run-{run}_2.log"));
    let started = Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("paused after 2 shards") {
        assert!(started.elapsed() < Duration::from_secs(300), "task 2 never paused");
        std::thread::sleep(Duration::from_millis(200));
    }
    ok_stdout(Command::new("scancel").arg(format!("{run}_2")));
    let lines = wait(&[(&run, 4)]);
    let cancelled = lines.iter().find(|j| j.id == format!("{run}_2")).unwrap();
    assert!(cancelled.state.starts_with("CANCELLED"), "{cancelled:?}");
    assert_eq!(lines.iter().filter(|j| j.state == "COMPLETED").count(), 3, "{lines:?}");
    let task = many.join("tasks/00002");
    assert!(!task.join("manifest.json").exists() && task.join("_journal.jsonl").exists());
    let kept: Vec<(PathBuf, u64)> = shard_inodes(&task);
    assert_eq!(kept.len(), 2, "two shards finished before the cancel: {kept:?}");

    // Resubmitted alone, as submit.sh says: it resumes, keeping the two shards.
    let env = [
        ("PHASE", "run"),
        ("PIPELINE", pl.as_str()),
        ("OUT", o.as_str()),
        ("BERTPIPE", bin()),
        ("TASKS", "4"),
        ("FIRST", "0"),
    ];
    let again = sbatch(tmp.path(), &["--array=2", "--job-name=rerun", SMALL[0], SMALL[1], &script], &env);
    let merge = after(tmp.path(), &again, "merge", &format!("{} shards merge {o}", bin()), &[]);
    let lines = wait(&[(&again, 1), (&merge, 1)]);
    assert_completed(&lines, &again, 1);
    assert_completed(&lines, &merge, 1);
    for (path, inode) in kept {
        assert_eq!(
            std::fs::metadata(&path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap(),
            inode,
            "{} was rewritten",
            path.display()
        );
    }
    assert_same_rows(&one, &many);
}

/// The shard files under a task folder with their inodes.
fn shard_inodes(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for e in walk_files(dir) {
        if e.extension().is_some_and(|x| x == "parquet") && !e.to_string_lossy().contains("_rejects") {
            let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&e).unwrap());
            out.push((e, ino));
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "needs a Slurm cluster: scripts/slurm-check.sh starts one and runs these"]
fn a_chain_data_stage_as_an_array_then_a_dependent_plain_run() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tarball(tmp.path(), 400);
    let vocab = root().join("data/vocab/bert-base-uncased.txt");
    let chain = |out: &str| {
        format!(
            "name: slurm\nout: {out}\nstages:\n  data:\n    name: corpus\n    source: {{type: aclimdb, path: {}, splits: [train, test], labels: [neg, pos]}}\n    steps:\n      - {{type: html_strip}}\n      - {{type: tokenize, vocab: {}}}\n      - {{type: classify_sequences, max_len: 64}}\n    sink: {{type: parquet, shard_rows: 150}}\n",
            corpus.display(),
            vocab.display()
        )
    };
    let exp = tmp.path().join("exp.yaml");
    std::fs::write(&exp, chain("array")).unwrap();
    let single = tmp.path().join("single.yaml");
    std::fs::write(&single, chain("single")).unwrap();
    assert_ok(&bertpipe(&["run", single.to_str().unwrap(), "--quiet"]));

    // The README's commands: the stage as an array (the task from Slurm's variables), then the
    // plain run, which merges it, as a job that waits for the array.
    let e = exp.display().to_string();
    let stage = format!("--wrap={} run {e} --stage data --quiet", bin());
    let array = sbatch(tmp.path(), &["--array=0-2", "--job-name=stage", SMALL[0], SMALL[1], &stage], &[]);
    let plain = after(tmp.path(), &array, "chain", &format!("{} run {e} --quiet", bin()), &[]);
    let lines = wait(&[(&array, 3), (&plain, 1)]);
    assert_completed(&lines, &array, 3);
    assert_completed(&lines, &plain, 1);
    let (a, s) = (tmp.path().join("array/data"), tmp.path().join("single/data"));
    assert_eq!(manifest(&a)["tasks"]["count"], 3);
    assert_same_rows(&s, &a);
    let status = common::chain::statuses(&tmp.path().join("array"));
    assert_eq!(status.get("data").map(String::as_str), Some("ran"), "{status:?}");
}

#[test]
#[ignore = "needs a Slurm cluster: scripts/slurm-check.sh starts one and runs these"]
fn eval_as_an_array_merges_to_the_single_run_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = tmp.path().join("imdb");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &shards, &["--set", "sink.shard_rows=40"]));
    let ft = tmp.path().join("ft");
    let (d, o) = (format!("data={}", shards.display()), format!("output_dir={}", ft.display()));
    let train = ["train", "pipelines/imdb-finetune.yaml", "--quiet", "--set", &d, "--set", &o];
    assert_ok(&bertpipe(&[&train[..], &["--set", "max_steps=4", "--set", "eval_split=null"]].concat()));
    let model = tmp.path().join("model.onnx");
    let (c, m) = (ft.join("final").display().to_string(), model.display().to_string());
    assert_ok(&bertpipe(&["export", "onnx", "--checkpoint", &c, "--out", &m]));
    let ort = ort_env();
    let ort: Vec<(&str, &str)> = ort.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = shards.display().to_string();
    let single = tmp.path().join("single");
    let one = single.display().to_string();
    assert_ok(&bertpipe_env(&["eval", "--model", &m, "--data", &s, "--out", &one, "--quiet"], &ort));

    let out = tmp.path().join("array").display().to_string();
    let task = format!("--wrap={} eval --model {m} --data {s} --out {out} --quiet", bin());
    let array = sbatch(tmp.path(), &["--array=1-3", "--job-name=eval", SMALL[0], SMALL[1], &task], &ort);
    let merge = after(tmp.path(), &array, "eval-merge", &format!("{} eval merge {out}", bin()), &ort);
    let lines = wait(&[(&array, 3), (&merge, 1)]);
    assert_completed(&lines, &array, 3);
    assert_completed(&lines, &merge, 1);
    let bytes = |dir: &Path| std::fs::read(dir.join("predictions.parquet")).unwrap();
    assert_eq!(bytes(&single), bytes(&tmp.path().join("array")), "predictions.parquet differs");
    let metrics = |dir: &Path| -> serde_json::Value {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap();
        for k in ["throughput", "timing", "out", "tasks", "seconds"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v["accuracy"].clone()
    };
    assert_eq!(metrics(&single), metrics(&tmp.path().join("array")));
}

/// A pipeline over a two-line JSONL corpus in `dir` whose steps are the YAML lines `steps`.
fn jsonl_pipeline(dir: &Path, name: &str, steps: &str) -> PathBuf {
    std::fs::write(
        dir.join("docs.jsonl"),
        "{\"text\": \"a review\", \"label\": 1}\n{\"text\": \"another one\", \"label\": 0}\n",
    )
    .unwrap();
    let yaml = format!(
        "name: {name}\nsource: {{type: jsonl, path: docs.jsonl}}\nsteps:\n{steps}sink: {{type: parquet, path: out-{name}}}\n"
    );
    write_pipeline(dir, &format!("{name}.yaml"), &yaml)
}

/// `dedup` and `max_noise_quantile` only in comments: no global step (the old `submit.sh`
/// grepped the YAML's text and submitted a scan phase whose tasks all exit 1, stalling the run
/// phase's `afterok` for good).
const COMMENTED: &str = "  - type: html_strip\n  # - type: dedup    (off: this corpus has no copies)\n  # a filter with max_noise_quantile: 0.9 would need a noise_score first\n";
const DEDUP: &str = "  - type: html_strip\n  - type: dedup\n";
/// A global step pair that no task array supports yet.
const QUANTILE_AND_DEDUP: &str =
    "  - type: noise_score\n  - type: filter\n    max_noise_quantile: 0.9\n  - type: dedup\n";

/// `bertpipe pipeline validate --json PIPELINE`, which must succeed: its JSON.
fn validate_json(p: &Path) -> serde_json::Value {
    let o = bertpipe(&["pipeline", "validate", "--json", p.to_str().unwrap()]);
    assert_ok(&o);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn validate_json_says_whether_a_task_array_needs_a_scan_from_the_steps_not_the_text() {
    use serde_json::json;
    let tmp = tempfile::tempdir().unwrap();
    let commented = jsonl_pipeline(tmp.path(), "commented", COMMENTED);
    let v = validate_json(&commented);
    assert_eq!(v["kind"], "pipeline", "{v}");
    assert_eq!(v["name"], "commented", "{v}");
    assert_eq!(v["needs_scan"], false, "{v}");
    assert_eq!(v["scan_steps"], json!([]), "{v}");
    assert_eq!(v["task_array_error"], serde_json::Value::Null, "{v}");
    assert_eq!(v["steps"], json!(["html_strip"]), "{v}");
    assert_eq!(v["splits"], json!(["train"]), "{v}");
    assert_eq!(v["source"]["type"], "jsonl", "{v}");
    assert_eq!(v["sink"]["type"], "parquet", "{v}");
    assert!(v["sink"]["path"].as_str().unwrap().ends_with("out-commented"), "{v}");
    assert!(v["source"]["detected"].to_string().contains("label from field `label`"), "{v}");
    assert_eq!(v["config_sha256"].as_str().map(str::len), Some(64), "{v}");

    let dedup = jsonl_pipeline(tmp.path(), "dedup", DEDUP);
    let v = validate_json(&dedup);
    assert_eq!(v["needs_scan"], true, "{v}");
    assert_eq!(v["scan_steps"], json!(["dedup"]), "{v}");
    assert_eq!(v["task_array_error"], serde_json::Value::Null, "{v}");

    let both = jsonl_pipeline(tmp.path(), "both", QUANTILE_AND_DEDUP);
    let v = validate_json(&both);
    assert_eq!(v["needs_scan"], true, "{v}");
    assert_eq!(v["scan_steps"], json!(["filter", "dedup"]), "{v}");
    assert!(v["task_array_error"].as_str().unwrap_or_default().contains("cannot yet combine"), "{v}");

    // The scan phase agrees: it refuses the commented pipeline and scans the other.
    let scan = |p: &Path, out: &str| {
        let set = format!("sink.path={}", tmp.path().join(out).display());
        let args = ["pipeline", "scan", p.to_str().unwrap(), "--task-index", "0", "--task-count", "2", "--quiet"];
        bertpipe(&[&args[..], &["--set", set.as_str()]].concat())
    };
    let o = scan(&commented, "scan-commented");
    assert!(!o.status.success() && stderr(&o).contains("need no scan"), "{}", stderr(&o));
    assert_ok(&scan(&dedup, "scan-dedup"));

    // A file with a problem: the problem on stderr (exit 78), nothing on stdout.
    let broken = jsonl_pipeline(tmp.path(), "broken", "  - type: dedupe\n");
    let o = bertpipe(&["pipeline", "validate", "--json", broken.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "{}", String::from_utf8_lossy(&o.stdout));
}

/// `submit.sh` with a stand-in `sbatch` on the PATH that records each call (`PHASE=… ARGS`) and
/// answers a job id: `(exit status, stdout, stderr, the recorded calls)`.
fn submit_with_fake_sbatch(dir: &Path, pipeline: &Path, name: &str) -> (Option<i32>, String, String, Vec<String>) {
    use std::os::unix::fs::PermissionsExt;
    let bin_dir = dir.join("fake-bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let sbatch = bin_dir.join("sbatch");
    std::fs::write(
        &sbatch,
        "#!/bin/sh\necho \"PHASE=${PHASE:-} $*\" >> \"$SBATCH_LOG\"\necho $(( $(wc -l < \"$SBATCH_LOG\") + 100 ))\n",
    )
    .unwrap();
    std::fs::set_permissions(&sbatch, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = dir.join(format!("{name}.sbatch.log"));
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = dir.join(format!("array-{name}"));
    let o = Command::new("bash")
        .arg(root().join("examples/slurm/submit.sh"))
        .args([pipeline.to_str().unwrap(), out.to_str().unwrap(), "3", "--mem=1G"])
        .env("PATH", path)
        .env("BERTPIPE", bin())
        .env("SBATCH_LOG", &log)
        .current_dir(dir)
        .output()
        .unwrap();
    let calls = std::fs::read_to_string(&log).unwrap_or_default().lines().map(str::to_string).collect();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        calls,
    )
}

/// `submit.sh` submits the scan phase when bertpipe says the steps need it — not when `dedup`
/// is only in a comment — and nothing for a pipeline that cannot be a task array.
#[test]
fn submit_sh_submits_a_scan_phase_only_for_steps_that_need_one() {
    let tmp = tempfile::tempdir().unwrap();

    let commented = jsonl_pipeline(tmp.path(), "commented", COMMENTED);
    let (code, out, err, calls) = submit_with_fake_sbatch(tmp.path(), &commented, "commented");
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(calls.len(), 2, "run and merge only: {calls:#?}");
    assert!(calls[0].starts_with("PHASE=run ") && !calls[0].contains("--dependency"), "{calls:#?}");
    assert!(calls[1].contains("--dependency=afterok:101") && calls[1].contains("shards merge"), "{calls:#?}");
    assert!(out.contains("submitted: run 101, merge 102"), "{out}");

    let dedup = jsonl_pipeline(tmp.path(), "dedup", DEDUP);
    let (code, out, err, calls) = submit_with_fake_sbatch(tmp.path(), &dedup, "dedup");
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(calls.len(), 3, "scan, run and merge: {calls:#?}");
    assert!(calls[0].starts_with("PHASE=scan ") && calls[0].contains("--array=0-2"), "{calls:#?}");
    assert!(calls[1].starts_with("PHASE=run ") && calls[1].contains("--dependency=afterok:101"), "{calls:#?}");
    assert!(out.contains("submitted: scan 101, run 102, merge 103"), "{out}");

    let both = jsonl_pipeline(tmp.path(), "both", QUANTILE_AND_DEDUP);
    let (code, out, err, calls) = submit_with_fake_sbatch(tmp.path(), &both, "both");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(calls.is_empty(), "nothing submitted: {calls:#?}");
    assert!(err.contains("cannot run as a task array") && err.contains("cannot yet combine"), "{err}");

    let broken = jsonl_pipeline(tmp.path(), "broken", "  - type: dedupe\n");
    let (code, out, err, calls) = submit_with_fake_sbatch(tmp.path(), &broken, "broken");
    assert_eq!(code, Some(78), "{out}{err}");
    assert!(calls.is_empty(), "nothing submitted: {calls:#?}");
    assert!(err.contains("dedupe"), "{err}");
}

/// Data-parallel training as a Slurm job of two tasks — `sbatch --ntasks=2` running
/// `srun --mpi=pmix bertpipe train` — trains what one process with the same global batch (16
/// rows: 8 per task × 2) trains: the weights and logged losses to 1e-4, dropout on.
#[cfg(feature = "mpi")]
#[test]
#[ignore = "needs a Slurm cluster: scripts/slurm-check.sh starts one and runs these"]
fn a_two_task_training_job_trains_what_one_process_trains() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("imdb");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &data, &[]));
    let config = root().join("pipelines/imdb-finetune.yaml").display().to_string();
    let sets = |out: &str, per_device: usize| {
        [
            format!("data={}", data.display()),
            format!("output_dir={}", tmp.path().join(out).display()),
            format!("per_device_train_batch_size={per_device}"),
            "max_steps=8".into(),
            "logging_steps=1".into(),
            "threads=1".into(),
        ]
        .iter()
        .map(|s| format!("--set {s}"))
        .collect::<Vec<_>>()
        .join(" ")
    };
    let one = format!("{} train {config} --quiet {}", bin(), sets("one", 16));
    assert_ok(&Command::new("sh").args(["-c", &one]).current_dir(root()).output().unwrap());
    let wrap = format!("--wrap=srun --mpi=pmix {} train {config} --quiet {}", bin(), sets("two", 8));
    let job =
        sbatch(tmp.path(), &["--ntasks=2", "--cpus-per-task=1", "--mem-per-cpu=1G", "--job-name=ddp", &wrap], &[]);
    let lines = wait(&[(&job, 1)]);
    let log = std::fs::read_to_string(tmp.path().join(format!("slurm-{job}.out"))).unwrap_or_default();
    assert!(lines.iter().any(|j| j.id == job && j.state == "COMPLETED" && j.exit == "0:0"), "{lines:?}\n{log}");
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    let gap = weight_gap(&one.join("final"), &two.join("final"));
    assert!(gap <= 1e-4, "2 Slurm tasks × 8 vs 1 × 16: weights differ by {gap:e} of their scale\n{log}");
    assert_same_losses(&one, &two);
    let ranks = std::fs::read_to_string(two.join("metrics.jsonl")).unwrap();
    assert!(ranks.contains("\"ranks\":2"), "{ranks}");
}

/// The chain's train stage as a Slurm job of two tasks, between plain chain runs, as
/// docs/scale.md gives the commands: `bertpipe run X --until data`, then (after it)
/// `srun --mpi=pmix bertpipe run X --stage finetune` in a 2-task job, then (after that) the plain
/// `bertpipe run X`, which takes the stage as up to date. The stage trains what one process with
/// the same global batch trains.
#[cfg(feature = "mpi")]
#[test]
#[ignore = "needs a Slurm cluster: scripts/slurm-check.sh starts one and runs these"]
fn a_chain_train_stage_as_a_two_task_job_between_plain_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let chain = |name: &str, per_device: usize| {
        let path = tmp.path().join(format!("{name}.yaml"));
        let stages = format!(
            "name: {name}\nout: {name}\nstages:\n  data: {}\n  finetune:\n    base: {}\n    per_device_train_batch_size: {per_device}\n    max_steps: 8\n    logging_steps: 1\n    threads: 1\n  export: {{ optimize: false }}\n",
            root().join("pipelines/imdb.yaml").display(),
            root().join("pipelines/imdb-finetune.yaml").display()
        );
        std::fs::write(&path, stages).unwrap();
        path.display().to_string()
    };
    let (one, two) = (chain("one", 16), chain("two", 8));
    assert_ok(&common::chain::bertpipe(&["run", &one, "--quiet"], &[]));
    let ort = format!("ORT_DYLIB_PATH={}", ort_lib().display());
    let data = sbatch(
        tmp.path(),
        &["--job-name=data", SMALL[0], SMALL[1], &format!("--wrap={} run {two} --until data --quiet", bin())],
        &[],
    );
    let dep = format!("--dependency=afterok:{data}");
    let wrap = format!("--wrap=srun --mpi=pmix {} run {two} --stage finetune --quiet", bin());
    let train = sbatch(
        tmp.path(),
        &["--ntasks=2", "--cpus-per-task=1", "--mem-per-cpu=1G", "--job-name=ddp-stage", &dep, &wrap],
        &[],
    );
    let plain = after(tmp.path(), &train, "chain", &format!("env {ort} {} run {two} --quiet", bin()), &[]);
    let lines = wait(&[(&data, 1), (&train, 1), (&plain, 1)]);
    let log = std::fs::read_to_string(tmp.path().join(format!("slurm-{train}.out"))).unwrap_or_default();
    for job in [&data, &train, &plain] {
        assert!(lines.iter().any(|j| &j.id == job && j.state == "COMPLETED" && j.exit == "0:0"), "{lines:?}\n{log}");
    }
    let (a, b) = (tmp.path().join("one/finetune"), tmp.path().join("two/finetune"));
    let gap = weight_gap(&a.join("final"), &b.join("final"));
    assert!(gap <= 1e-4, "the chain's stage on 2 Slurm tasks × 8 vs 1 × 16: {gap:e}\n{log}");
    assert_same_losses(&a, &b);
    assert!(std::fs::read_to_string(b.join("metrics.jsonl")).unwrap().contains("\"ranks\":2"));
    let status = common::chain::statuses(&tmp.path().join("two"));
    assert_eq!(status.get("finetune").map(String::as_str), Some("up to date"), "{status:?}");
    assert_eq!(status.get("export").map(String::as_str), Some("ran"), "{status:?}");
}
