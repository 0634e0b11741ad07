//! `bertpipe pipeline run` end to end on the bundled sample: counts, schema, determinism,
//! resume, overwrite protection.

mod common;

use common::*;

fn sample_run(out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    run_pipeline("pipelines/imdb-clean.yaml", out, extra)
}

#[test]
fn sample_produces_reconciled_shards_with_the_contract_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    assert_ok(&sample_run(&out, &[]));
    assert_reconciles(&out);
    let m = manifest(&out);
    assert_eq!(m["format"], "bertpipe-shards/1");
    assert_eq!(m["splits"]["train"]["docs_in"], 450, "150 neg + 150 pos + 150 unsup");
    assert_eq!(m["splits"]["test"]["docs_in"], 300);
    assert!(m["config_sha256"].as_str().unwrap().len() == 64);
    // The sample has duplicates and shouting on purpose: both must be caught.
    let reasons = strings(&out, "_rejects", "reason");
    assert!(reasons.iter().any(|r| r.starts_with("duplicate_of:train/")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.starts_with("max_noise:")), "{reasons:?}");

    let batch = &read_parquet(&out.join("train/part-00000.parquet"))[0];
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "id",
            "label",
            "rating",
            "noise_score",
            "noise_sent_len_std",
            "noise_punct_ratio",
            "noise_caps_ratio",
            "noise_repeat_ratio",
            "noise_mojibake_ratio",
            "text"
        ]
    );
    let texts = strings(&out, "train", "text");
    assert!(texts
        .iter()
        .all(|t| !t.contains("<br") && !t.contains("&quot;") && !t.contains('\u{201C}') && !t.contains("!!")));
    let ids = strings(&out, "train", "id");
    assert!(ids[0].starts_with("train/neg/"), "input order: neg first, got {}", ids[0]);
    // Shards verify against the manifest.
    for shard in m["splits"]["train"]["shards"].as_array().unwrap() {
        let bytes = std::fs::read(out.join(shard["file"].as_str().unwrap())).unwrap();
        assert_eq!(bytes.len() as u64, shard["bytes"].as_u64().unwrap());
        use sha2::Digest;
        assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), shard["sha256"].as_str().unwrap());
    }
}

#[test]
fn output_bytes_do_not_depend_on_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let mut outs = Vec::new();
    for threads in ["1", "2", "5"] {
        let out = tmp.path().join(format!("t{threads}"));
        assert_ok(&sample_run(&out, &["--threads", threads, "--set", "sink.shard_rows=97"]));
        outs.push(out);
    }
    assert!(tree_bytes(&outs[0]).len() > 6, "several shards expected");
    assert_same_output(&outs[0], &outs[1]);
    assert_same_output(&outs[0], &outs[2]);
}

#[test]
fn resume_after_a_crash_gives_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean");
    assert_ok(&sample_run(&clean, &["--set", "sink.shard_rows=60"]));

    let out = tmp.path().join("crashed");
    let out_set = format!("sink.path={}", out.display());
    let args =
        ["pipeline", "run", "pipelines/imdb-clean.yaml", "--set", &out_set, "--set", "sink.shard_rows=60", "--quiet"];
    let crashed = bertpipe_env(&args, &[("BERTPIPE_CRASH_AFTER_SHARDS", "4")]);
    assert!(!crashed.status.success(), "the crash hook must kill the run");
    assert!(!out.join("manifest.json").exists(), "no manifest after a crash");

    // A rerun without --resume refuses and says how to go on.
    let again = bertpipe(&args);
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("--resume"), "{}", stderr(&again));

    // Damage one finished shard: resume must rewrite it and everything after it.
    // Splits are flushed in name order, so the crash hits while `test` shards are written.
    let second = out.join("test/part-00001.parquet");
    let first_inode = std::fs::metadata(out.join("test/part-00000.parquet"))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    std::fs::write(&second, b"garbage").unwrap();

    let mut resume = args.to_vec();
    resume.push("--resume");
    assert_ok(&bertpipe(&resume));
    assert_reconciles(&out);
    assert_same_output(&clean, &out);
    let inode_after = std::fs::metadata(out.join("test/part-00000.parquet"))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    assert_eq!(first_inode, inode_after, "a verified shard was rewritten instead of kept");
}

#[test]
fn existing_output_needs_overwrite_and_foreign_folders_are_never_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    assert_ok(&sample_run(&out, &[]));
    let again = sample_run(&out, &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("--overwrite"), "{}", stderr(&again));
    assert_ok(&sample_run(&out, &["--overwrite"]));

    let foreign = tmp.path().join("precious");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("thesis.tex"), "years of work").unwrap();
    let refused = sample_run(&foreign, &["--overwrite"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("does not look like bertpipe output"));
    assert!(foreign.join("thesis.tex").exists());

    // A file named manifest.json does not make a folder bertpipe's: only what its layout
    // holds is removed, and a folder with anything else is refused, naming that file.
    let mixed = tmp.path().join("mixed");
    assert_ok(&sample_run(&mixed, &[]));
    for (rel, text) in [("notes.txt", "mine"), ("train/my-analysis.ipynb", "{}"), ("plots/a.png", "png")] {
        std::fs::create_dir_all(mixed.join(rel).parent().unwrap()).unwrap();
        std::fs::write(mixed.join(rel), text).unwrap();
        let refused = sample_run(&mixed, &["--overwrite"]);
        assert_eq!(refused.status.code(), Some(1), "{rel}");
        let e = stderr(&refused);
        assert!(e.contains("refusing to overwrite") && e.contains(rel), "{rel}: {e}");
        assert!(mixed.join(rel).exists() && mixed.join("manifest.json").exists(), "nothing removed: {rel}");
        std::fs::remove_file(mixed.join(rel)).unwrap();
    }
    std::fs::remove_dir(mixed.join("plots")).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join("Documents")).unwrap();
    std::fs::write(home.join("manifest.json"), "{}").unwrap();
    std::fs::write(home.join("Documents/cv.pdf"), "cv").unwrap();
    let refused = sample_run(&home, &["--overwrite"]);
    assert!(stderr(&refused).contains("cv.pdf") && home.join("Documents/cv.pdf").exists(), "{}", stderr(&refused));
    // A link is not followed or removed either.
    std::os::unix::fs::symlink(&foreign, mixed.join("link")).unwrap();
    assert!(stderr(&sample_run(&mixed, &["--overwrite"])).contains("link"));
    std::fs::remove_file(mixed.join("link")).unwrap();
    assert_ok(&sample_run(&mixed, &["--overwrite"]));
    assert!(foreign.join("thesis.tex").exists());
}

/// Every name a reader joins to the output folder comes from the layout: a manifest or journal
/// naming `../` or an absolute path is refused by name before anything is read or removed.
#[test]
fn manifest_and_journal_paths_outside_the_layout_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    assert_ok(&sample_run(&out, &[]));
    let text = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let victim = tmp.path().join("victim.parquet");
    std::fs::write(&victim, "precious").unwrap();
    for bad in ["../victim.parquet", victim.to_str().unwrap(), "train/../../victim.parquet", "test/part-00000.parquet"]
    {
        let evil = text.replacen("\"train/part-00000.parquet\"", &format!("{bad:?}"), 1);
        assert_ne!(evil, text);
        std::fs::write(out.join("manifest.json"), &evil).unwrap();
        let o = bertpipe(&["stats", out.to_str().unwrap(), "--quiet"]);
        assert_eq!(o.status.code(), Some(1), "{bad}");
        let e = stderr(&o);
        assert!(e.contains("manifest.json") && e.contains("not a path of the shard layout") && e.contains(bad), "{e}");
    }
    let wrong_rows = text.replacen("\"rows\": ", "\"rows\": 1", 1);
    std::fs::write(out.join("manifest.json"), &wrong_rows).unwrap();
    let e = stderr(&bertpipe(&["stats", out.to_str().unwrap(), "--quiet"]));
    assert!(e.contains("manifest.json") && e.contains("its shards list"), "{e}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

    // A journal naming a folder outside the layout: --resume refuses before touching anything.
    std::fs::remove_file(out.join("manifest.json")).unwrap();
    let header = format!(
        "{{\"config_sha256\":\"{}\"}}",
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["config_sha256"].as_str().unwrap()
    );
    let line = "{\"folder\":\"..\",\"shard\":{\"file\":\"../victim.parquet\",\"rows\":1,\"bytes\":8,\"sha256\":\"x\"}}";
    std::fs::write(out.join("_journal.jsonl"), format!("{header}\n{line}\n")).unwrap();
    let e = stderr(&sample_run(&out, &["--resume"]));
    assert!(e.contains("_journal.jsonl") && e.contains("line 2") && e.contains("\"..\""), "{e}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn noise_quantile_filter_drops_the_noisiest_share() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let args = ["--set", "steps[4]={type: filter, max_noise_quantile: 0.9}"];
    assert_ok(&sample_run(&out, &args));
    assert_reconciles(&out);
    let m = manifest(&out);
    let mut reaching = 0u64;
    let mut dropped = 0u64;
    for s in m["splits"].as_object().unwrap().values() {
        reaching += s["docs_in"].as_u64().unwrap();
        dropped += s["rejected"]["max_noise_quantile"].as_u64().unwrap_or(0);
    }
    // 750 scored documents, q = 0.9: the 10% above the interpolated quantile.
    assert_eq!(reaching, 750);
    assert!((74..=75).contains(&dropped), "dropped {dropped}");
}

#[test]
fn summary_reports_counts_and_throughput() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out_set = format!("sink.path={}", out.display());
    let o = bertpipe(&["pipeline", "run", "pipelines/imdb-clean.yaml", "--set", &out_set]);
    assert_ok(&o);
    let err = stderr(&o);
    assert!(err.contains("750 docs in") && err.contains("docs/s") && err.contains("MB/s"), "{err}");
    assert!(err.contains("duplicate_of"), "{err}");
}

#[test]
fn shard_bytes_splits_output_by_size() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // The size is checked every 128 rows: 434 train rows of ~1 KB cross 30 kB several times.
    assert_ok(&sample_run(&out, &["--set", "sink.shard_bytes=30000", "--set", "sink.compression=none"]));
    assert_reconciles(&out);
    let shards = manifest(&out)["splits"]["train"]["shards"].as_array().unwrap().clone();
    assert!(shards.len() >= 2, "{shards:?}");
}

#[test]
fn progress_and_summary_stay_plain_when_stderr_is_not_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out_set = format!("sink.path={}", out.display());
    let o = bertpipe(&["pipeline", "run", "pipelines/imdb-clean.yaml", "--set", &out_set]);
    assert_ok(&o);
    assert!(!stderr(&o).contains('\x1b'), "no terminal control codes in a pipe: {:?}", stderr(&o));
    let quiet =
        bertpipe(&["pipeline", "run", "pipelines/imdb-clean.yaml", "--set", &out_set, "--overwrite", "--quiet"]);
    assert_ok(&quiet);
    assert!(quiet.stderr.is_empty(), "--quiet prints nothing: {}", stderr(&quiet));
}

/// A one-file corpus split by fractions: every document lands in the split its id and the seed
/// give, whatever order the file lists it in; counts reconcile; the manifest records the
/// fractions.
#[test]
fn split_fractions_assign_each_document_by_its_id_whatever_the_order() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let rows: Vec<String> = (0..300)
        .map(|i| format!("{{\"id\": \"r{i}\", \"text\": \"Review number {i} is here.\", \"label\": {}}}", i % 2))
        .collect();
    std::fs::write(d.join("a.jsonl"), rows.join("\n") + "\n").unwrap();
    let mut reversed = rows.clone();
    reversed.reverse();
    std::fs::write(d.join("b.jsonl"), reversed.join("\n") + "\n").unwrap();
    let run = |file: &str, out: &str| {
        let yaml = format!(
            "name: s\nseed: 7\nsource: {{ type: jsonl, path: {}, id_field: id, split: {{ train: 0.8, validation: 0.2 }} }}\nsteps: []\nsink: {{ type: parquet, path: {} }}\n",
            d.join(file).display(),
            d.join(out).display()
        );
        let p = write_pipeline(d, &format!("{out}.yaml"), &yaml);
        assert_ok(&bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet"]));
        d.join(out)
    };
    let (a, b) = (run("a.jsonl", "a"), run("b.jsonl", "b"));
    assert_reconciles(&a);
    let m = manifest(&a);
    let (train, val) =
        (m["splits"]["train"]["docs_out"].as_u64().unwrap(), m["splits"]["validation"]["docs_out"].as_u64().unwrap());
    assert_eq!(train + val, 300);
    assert!((35..=85).contains(&val), "validation {val} of 300 for a 0.2 share");
    assert_eq!(m["config"]["source"]["split"]["validation"], 0.2);
    let sorted = |out: &std::path::Path, split: &str| {
        let mut ids = strings(out, split, "id");
        ids.sort();
        ids
    };
    for split in ["train", "validation"] {
        assert_eq!(sorted(&a, split), sorted(&b, split), "{split}: the same ids in either order");
    }
    // Bad fractions are a config error naming the field.
    let yaml = format!(
        "name: s\nsource: {{ type: jsonl, path: {}, split: {{ train: 0.8, validation: 0.3 }} }}\nsteps: []\nsink: {{ type: parquet, path: {} }}\n",
        d.join("a.jsonl").display(),
        d.join("c").display()
    );
    let p = write_pipeline(d, "c.yaml", &yaml);
    let o = bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet"]);
    assert!(!o.status.success() && stderr(&o).contains("fractions must add up to 1"), "{}", stderr(&o));
}
