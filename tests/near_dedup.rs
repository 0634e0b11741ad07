//! `near_dedup`: planted near copies are rejected at and above the threshold and not far below
//! it, each reject names a first document it truly resembles, every thread count gives the same
//! bytes, and a task array gives the single run's rejects — `dedup` beside it included.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bertpipe::clean::minhash::jaccard;
use bertpipe::synth::{near_duplicate_corpus, PlantedDoc};
use common::*;

fn write_corpus(dir: &Path, n: usize, seed: u64) -> (PathBuf, Vec<PlantedDoc>) {
    let docs = near_duplicate_corpus(n, 0.3, seed);
    let mut jsonl = String::new();
    for d in &docs {
        jsonl.push_str(&serde_json::json!({"id": d.id, "text": d.text}).to_string());
        jsonl.push('\n');
    }
    let path = dir.join("docs.jsonl");
    std::fs::write(&path, jsonl).unwrap();
    (path, docs)
}

fn pipeline(dir: &Path, data: &Path, steps: &str) -> String {
    write_pipeline(
        dir,
        "near.yaml",
        &format!(
            "name: near\nsource: {{type: jsonl, path: {}, id_field: id}}\nsteps:\n{steps}sink: {{type: parquet, path: {}, keep_text: true, shard_rows: 150}}\n",
            data.display(),
            dir.join("unused").display()
        ),
    )
    .to_str()
    .unwrap()
    .to_string()
}

/// `(rejected id, reason)` of every reject.
fn rejects(out: &Path) -> Vec<(String, String)> {
    strings(out, "_rejects", "id").into_iter().zip(strings(out, "_rejects", "reason")).collect()
}

#[test]
fn planted_near_copies_are_found_at_the_threshold_and_not_far_below_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, docs) = write_corpus(tmp.path(), 1200, 7);
    let p = pipeline(tmp.path(), &data, "  - type: near_dedup\n");
    let out = tmp.path().join("t1");
    assert_ok(&run_pipeline(&p, &out, &["--threads", "1"]));
    assert_reconciles(&out);
    let by_id: HashMap<&str, &PlantedDoc> = docs.iter().map(|d| (d.id.as_str(), d)).collect();
    let rejected: HashMap<String, String> = rejects(&out).into_iter().collect();
    let steps = strings(&out, "_rejects", "step");
    assert!(steps.iter().all(|s| s == "near_dedup"), "{steps:?}");

    // Precision: every reject names an earlier document it truly resembles.
    for (id, reason) in &rejected {
        let rest = reason.strip_prefix("near_duplicate_of:").unwrap_or_else(|| panic!("{reason}"));
        let (first, s) = rest.rsplit_once(" (similarity ").unwrap();
        let s: f64 = s.trim_end_matches(')').parse().unwrap();
        assert!(s >= 0.8, "{id}: {reason}");
        let exact = jaccard(&by_id[id.as_str()].text, &by_id[first].text, 5);
        assert!(exact >= 0.6, "{id} rejected as a copy of {first} at exact Jaccard {exact:.3}");
        let (a, b): (usize, usize) = (id[4..].parse().unwrap(), first[4..].parse().unwrap());
        assert!(b < a, "the first in input order is kept: {id} vs {first}");
    }
    // Recall by exact similarity to the planted source, when that source was kept (a copy of a
    // rejected copy may rightly be kept: its source is gone and the original is further away).
    let (mut high, mut high_found, mut low_found, mut planted) = (0, 0, 0, 0);
    for d in &docs {
        let Some(of) = d.copy_of else { continue };
        let source = &docs[of];
        if rejected.contains_key(&source.id) {
            continue;
        }
        planted += 1;
        let exact = jaccard(&d.text, &source.text, 5);
        let found = rejected.contains_key(&d.id);
        if exact >= 0.9 {
            high += 1;
            high_found += found as usize;
        }
        if exact < 0.5 && found {
            // Acceptable only when it names another document it resembles (checked above).
            let first = rejected[&d.id].strip_prefix("near_duplicate_of:").unwrap().rsplit_once(" (").unwrap().0;
            low_found += (first == source.id) as usize;
        }
    }
    assert!(planted > 200 && high > 40, "planted {planted}, {high} at ≥ 0.9");
    assert!(high_found * 100 >= high * 97, "{high_found} of {high} copies at Jaccard ≥ 0.9 found");
    assert_eq!(low_found, 0, "copies far below the threshold are not matched to their source");
    // Any thread count: the same bytes.
    for threads in ["2", "8"] {
        let o = tmp.path().join(format!("t{threads}"));
        assert_ok(&run_pipeline(&p, &o, &["--threads", threads]));
        assert_same_output(&out, &o);
    }
}

#[test]
fn near_dedup_and_dedup_as_a_task_array_give_the_single_runs_rejects() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, _) = write_corpus(tmp.path(), 900, 11);
    for steps in [
        "  - type: near_dedup\n",
        "  - type: punctuation\n  - type: dedup\n  - type: filter\n    min_words: 40\n  - type: near_dedup\n    scope: global\n",
        "  - type: near_dedup\n    threshold: 0.7\n  - type: dedup\n",
    ] {
        let p = pipeline(tmp.path(), &data, steps);
        let (one, many) = (tmp.path().join("one"), tmp.path().join("many"));
        for d in [&one, &many] {
            let _ = std::fs::remove_dir_all(d);
        }
        assert_ok(&run_pipeline(&p, &one, &[]));
        let out_set = format!("sink.path={}", many.display());
        // Without the scans, a later task says what to run first.
        let o = bertpipe(&["pipeline", "run", &p, "--task-index", "1", "--task-count", "3", "--set", &out_set, "--quiet"]);
        assert!(!o.status.success() && stderr(&o).contains("pipeline scan"), "{}", stderr(&o));
        for phase in ["scan", "run"] {
            for i in ["0", "1", "2"] {
                let args = ["pipeline", phase, &p, "--task-index", i, "--task-count", "3", "--set", &out_set, "--quiet"];
                assert_ok(&bertpipe(&args));
            }
        }
        assert_ok(&bertpipe(&["shards", "merge", many.to_str().unwrap()]));
        let got: Vec<(String, String)> = {
            let m = manifest(&many);
            let mut all = Vec::new();
            for s in m["rejects"]["shards"].as_array().unwrap() {
                let f = many.join(s["file"].as_str().unwrap());
                let ids = column(&f, "id");
                all.extend(ids.into_iter().zip(column(&f, "reason")));
            }
            all
        };
        let want = rejects(&one);
        assert!(want.iter().any(|(_, r)| r.starts_with("near_duplicate_of:")), "{steps}: some near copies");
        assert_eq!(got, want, "{steps}");
        for kind in ["near_duplicate_of", "duplicate_of"] {
            let count = |m: &serde_json::Value| -> u64 {
                m["splits"].as_object().unwrap().values().map(|s| s["rejected"][kind].as_u64().unwrap_or(0)).sum()
            };
            assert_eq!(count(&manifest(&many)), count(&manifest(&one)), "{steps}: {kind}");
        }
        assert_eq!(strings(&one, "train", "id"), {
            let m = manifest(&many);
            m["splits"]["train"]["shards"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| column(&many.join(s["file"].as_str().unwrap()), "id"))
                .collect::<Vec<_>>()
        });
    }
}

fn column(file: &Path, name: &str) -> Vec<String> {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    let mut out = Vec::new();
    for b in read_parquet(file) {
        let c = b.column_by_name(name).unwrap();
        let s = c.as_string::<i32>();
        out.extend((0..s.len()).map(|i| s.value(i).to_string()));
    }
    out
}
