//! Defect 12: the row store's temporaries leaked and its cache was never pruned. A training
//! stopped while it copied the split (Ctrl-C twice, SIGTERM) exited from the signal handler
//! and left `rows/.tmp-*` behind (76–124 MB each), as did one killed outright, and nothing ever
//! removed a store: 827 MB of stores for 99 MB of shards after a few changes. Now the build's
//! folder is scratch the handler removes before it exits, the next training sweeps what a
//! killed one left, and `rows/` keeps at most four stores, least recently used out first
//! (`train::order`). Each test caches in its own folder (`BERTPIPE_CACHE_DIR`).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use crate::common::{assert_ok, root, run_pipeline};

/// The sample's classification shards (`pipelines/imdb.yaml`) under `dir`.
fn shards(dir: &Path) -> PathBuf {
    let data = dir.join("imdb");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &data, &[]));
    data
}

/// `bertpipe train pipelines/imdb-finetune.yaml` on `data` into `out`: one step, no evaluation,
/// with bertpipe's cache in `cache`.
fn train(data: &Path, out: &Path, cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bertpipe"));
    c.current_dir(root()).env("BERTPIPE_CACHE_DIR", cache);
    c.args(["train", "pipelines/imdb-finetune.yaml", "--quiet"]);
    c.arg("--set").arg(format!("data={}", data.display()));
    c.arg("--set").arg(format!("output_dir={}", out.display()));
    for s in ["max_steps=1", "eval_split=none", "per_device_train_batch_size=8"] {
        c.arg("--set").arg(s);
    }
    c
}

/// The names in `rows`, sorted (none when it is not there).
fn names(rows: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(rows)
        .map(|rd| rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn temporaries(rows: &Path) -> Vec<String> {
    names(rows).into_iter().filter(|n| n.starts_with(".tmp-")).collect()
}

/// A store's folder name: 24 hex digits.
fn is_store(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A training whose row store build waits after copying its first shard (test hook
/// `BERTPIPE_PAUSE_AFTER_SHARDS`), returned once it waits there — with its stderr, which
/// a thread reads to the end (a closed pipe would fail the handler's own message).
fn paused_training(data: &Path, out: &Path, cache: &Path) -> (Child, Receiver<String>) {
    let mut child = train(data, out, cache)
        .env("BERTPIPE_PAUSE_AFTER_SHARDS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line.contains("row store paused after 1 shards") => return (child, rx),
            Ok(line) => seen.push(line),
            Err(RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the row store build never paused:\n{}", seen.join("\n"));
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait().unwrap();
                panic!("the training ended ({status}) without pausing its row store build:\n{}", seen.join("\n"));
            }
        }
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
}

#[test]
fn a_training_stopped_or_killed_while_it_copies_the_split_leaves_no_temporary_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path());
    let cache = dir.path().join("cache");
    let rows = cache.join("rows");

    // SIGTERM twice (the first asks the training to stop at its next step, the second stops it
    // at once, as a second Ctrl-C does): the handler removes the half-built store and exits 130.
    let (mut child, rx) = paused_training(&data, &dir.path().join("t1"), &cache);
    assert_eq!(temporaries(&rows).len(), 1, "the build is under way: {:?}", names(&rows));
    signal(&child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    let said: Vec<String> = rx.try_iter().collect();
    assert_eq!(status.code(), Some(130), "{status}: {}", said.join("\n"));
    assert!(names(&rows).is_empty(), "a stopped build left {:?}", names(&rows));

    // SIGKILL runs no code of ours: the temporary stays, and the next training removes it (its
    // process is gone) and builds the store whole.
    let (mut child, _rx) = paused_training(&data, &dir.path().join("t2"), &cache);
    child.kill().unwrap();
    child.wait().unwrap();
    let left = temporaries(&rows);
    assert_eq!(left.len(), 1, "{:?}", names(&rows));
    assert_ok(&train(&data, &dir.path().join("t3"), &cache).output().unwrap());
    let after = names(&rows);
    assert!(temporaries(&rows).is_empty(), "the killed build's {left:?} was not swept: {after:?}");
    assert!(after.len() == 1 && is_store(&after[0]), "{after:?}");
}

/// Sets a file's or a folder's modification time.
fn set_mtime(path: &Path, when: SystemTime) {
    std::fs::File::open(path).unwrap().set_modified(when).unwrap();
}

fn hours_ago(h: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(h * 3600)
}

/// A folder under `rows` holding a file, written `age` hours ago (folder and file).
fn folder(rows: &Path, name: &str, age: u64) -> PathBuf {
    let d = rows.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("rows.bin"), vec![0u8; 1000]).unwrap();
    set_mtime(&d.join("rows.bin"), hours_ago(age));
    set_mtime(&d, hours_ago(age));
    d
}

#[test]
fn the_cache_keeps_the_most_recently_used_stores_and_sweeps_what_dead_builds_left() {
    let dir = tempfile::tempdir().unwrap();
    let data = shards(dir.path());
    let cache = dir.path().join("cache");
    let rows = cache.join("rows");
    // Five stores of earlier trainings, last used 50, 40, 30, 20 and 10 hours ago.
    let old: Vec<String> = (1..=5).map(|i| format!("{i:024x}")).collect();
    for (i, name) in old.iter().enumerate() {
        let d = folder(&rows, name, 0);
        std::fs::write(d.join("store.json"), "{}").unwrap();
        set_mtime(&d.join("store.json"), hours_ago(50 - 10 * i as u64));
    }
    // What builds left: this host's, by a process that is gone and by one that runs (this
    // test); another host's, fresh and long idle; one from before owners were recorded, long
    // idle and fresh; a removal cut short.
    let here = bertpipe::train::order::owner_tag();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let me = std::process::id();
    let swept = [
        format!(".tmp-{}-{here}-{gone_pid}-1", old[0]),
        format!(".tmp-{}-00000000-{me}-2", old[0]),
        format!(".tmp-{}-{gone_pid}-3", old[0]),
        format!(".old-{}-{gone_pid}-4", old[0]),
    ];
    let kept = [
        format!(".tmp-{}-{here}-{me}-5", old[1]),
        format!(".tmp-{}-00000000-{gone_pid}-6", old[1]),
        format!(".tmp-{}-{gone_pid}-7", old[1]),
    ];
    for (name, age) in swept.iter().zip([0, 7, 7, 0]).chain(kept.iter().zip([0, 0, 0])) {
        folder(&rows, name, age);
    }

    assert_ok(&train(&data, &dir.path().join("t"), &cache).output().unwrap());
    let after = names(&rows);
    let new: Vec<&String> = after.iter().filter(|n| is_store(n) && !old.contains(n)).collect();
    assert_eq!(new.len(), 1, "the training's store: {after:?}");
    // Four stores: the one in use and the three used most recently before it.
    let mut want: Vec<String> = vec![new[0].clone(), old[2].clone(), old[3].clone(), old[4].clone()];
    want.extend(kept.iter().cloned());
    want.sort();
    assert_eq!(after, want, "swept {swept:?}");
}
