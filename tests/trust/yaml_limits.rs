//! YAML that costs more to read than its size says, and `--set` keys that name nothing.
//!
//! - An alias bomb (nine levels of nine aliases: ~400 bytes standing for 9^9 scalars) made
//!   `pipeline validate`, `run --dry-run` and `train --dry-run` allocate until killed. Every
//!   command that reads a configuration now refuses it at the alias that crosses the bound,
//!   `FILE:LINE:COL`, naming the bound. The test runs the binary under a watchdog (wall clock
//!   and resident memory), so a regression fails the test instead of taking the machine down.
//! - A misspelt key given by `--set` was reported at a line of the file it was never on (or
//!   `FILE:1:1`), and in `bertpipe run` with follow-on errors from the stages after it; it is
//!   reported once, against the argument as typed, with the nearest valid key.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::chain::{pipelines, write_experiment};
use crate::common::{bertpipe, root, stderr};

/// Nine levels of nine aliases, each of the level before: 9^9 scalars once expanded.
fn alias_bomb() -> String {
    let mut s = format!("a: &a [{}]\n", ["x"; 9].join(", "));
    for (prev, name) in ('a'..='h').zip('b'..='i') {
        s.push_str(&format!(
            "{name}: &{name} [{}]\n",
            (0..9).map(|_| format!("*{prev}")).collect::<Vec<_>>().join(", ")
        ));
    }
    s
}

/// The child is killed and reaped when this is dropped (a failed assertion included).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Resident memory of a process, in kB (0 where /proc cannot say).
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// `bertpipe ARGS` with a watchdog: killed (and the test failed) past 60 s or 1 GiB resident,
/// checked every 10 ms. Its exit code and stderr (kept in the file `err_path`).
fn bounded(args: &[&str], err_path: &Path) -> (Option<i32>, String) {
    const WALL: Duration = Duration::from_secs(60);
    const MAX_RSS_KB: u64 = 1 << 20;
    let err_file = std::fs::File::create(err_path).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_bertpipe"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err_file))
        .spawn()
        .expect("run bertpipe");
    let mut child = Reaped(child);
    let start = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().expect("wait for bertpipe") {
            return (status.code(), std::fs::read_to_string(err_path).unwrap_or_default());
        }
        let rss = rss_kb(child.0.id());
        assert!(rss < MAX_RSS_KB, "bertpipe {args:?} held {rss} kB after {:?}: killed", start.elapsed());
        assert!(start.elapsed() < WALL, "bertpipe {args:?} ran past {WALL:?} ({rss} kB): killed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_alias_bomb_is_refused_at_the_alias_that_crosses_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.yaml");
    std::fs::write(&bomb, alias_bomb()).unwrap();
    // An experiment whose stage is the bomb reads it too.
    let exp = write_experiment(dir.path(), "exp.yaml", "e", "  data: bomb.yaml\n");
    let (b, e) = (bomb.to_str().unwrap(), exp.to_str().unwrap());
    // Lines a–e: aliases make 74718 nodes; the first `*e` of line 6 (`f: &f [*e, …`, column 8)
    // would repeat e's 66430 more.
    let want = "bomb.yaml:6:8: alias `*e` would repeat 66430 nodes, bringing the nodes that aliases make to 141148, past the limit of 100000 per document";
    for (i, args) in [
        ["pipeline", "validate", b],
        ["pipeline", "run", b],
        ["run", b, "--dry-run"],
        ["train", b, "--dry-run"],
        ["run", e, "--dry-run"],
        ["pipeline", "validate", e],
    ]
    .into_iter()
    .enumerate()
    {
        let (code, err) = bounded(&args, &dir.path().join(format!("stderr-{i}")));
        assert_eq!(code, Some(78), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn a_misspelt_set_key_is_reported_once_against_the_argument() {
    // A pipeline: not at the `sink:` line of the file.
    let o = bertpipe(&["pipeline", "validate", "pipelines/imdb-clean.yaml", "--set", "sink.pathh=/x"]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--set sink.pathh=/x: unknown field `pathh` in sink (parquet), did you mean `path`?"),
        "{err}"
    );
    assert!(!err.contains("imdb-clean.yaml:"), "{err}");
    assert!(err.contains("error: 1 configuration problem"), "{err}");

    // A training file: not at the first line of the file.
    let o = bertpipe(&["train", "pipelines/imdb-finetune.yaml", "--dry-run", "--set", "lerning_rate=1"]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "--set lerning_rate=1: unknown field `lerning_rate` in train config, did you mean `learning_rate`?"
        ),
        "{err}"
    );
    assert!(!err.contains("imdb-finetune.yaml:"), "{err}");
    assert!(err.contains("error: 1 configuration problem"), "{err}");

    // An experiment's stages: once, as typed, and without the errors of the stages after it
    // (an export with no train stage before it, an eval with no export).
    let dir = tempfile::tempdir().unwrap();
    let exp = write_experiment(
        dir.path(),
        "exp.yaml",
        "e",
        &format!(
            "  data: '{}'\n  training: '{}'\n  export: {{ optimize: false }}\n  eval: {{ split: test }}\n",
            pipelines("imdb.yaml"),
            pipelines("imdb-finetune.yaml")
        ),
    );
    let e = exp.to_str().unwrap();
    let o = bertpipe(&["run", e, "--dry-run", "--set", "training.lerning_rate=1"]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "--set training.lerning_rate=1: unknown field `lerning_rate` in train config, did you mean `learning_rate`?"
        ),
        "{err}"
    );
    assert!(err.contains("error: 1 configuration problem"), "{err}");
    // A stage read from its own mapping (export, eval): the same, not at the stage's line.
    let o = bertpipe(&["run", e, "--dry-run", "--set", "export.optimze=true"]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--set export.optimze=true: unknown field `optimze` in export, did you mean `optimize`?"),
        "{err}"
    );
    assert!(!err.contains("exp.yaml:"), "{err}");
    assert!(err.contains("error: 1 configuration problem"), "{err}");
}
