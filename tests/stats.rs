//! `bertpipe stats`: exact figures on a hand-checked fixture, the JSON schema, grouping, the
//! three kinds of input agreeing with each other, pictures, and bounded memory.

mod common;

use std::io::Write;
use std::path::Path;

use bertpipe::clean::noise::NoiseScore;
use bertpipe::stats::report::{GroupStats, Summary};
use bertpipe::stats::{self, By, StatsOptions};
use common::*;
use serde_json::Value;

/// Word counts of the fixture: hand-checked quantiles below. Document `i` is "movie" repeated
/// `WORDS[i]` times, so it has `6·w − 1` characters and, with the bert-base-uncased vocabulary,
/// `w` tokens. The last document repeats the first (one exact duplicate).
const WORDS: [usize; 7] = [50, 100, 299, 300, 500, 1000, 50];
const LABELS: [Option<i64>; 7] = [Some(0), Some(1), Some(0), Some(1), Some(1), None, Some(0)];

fn fixture(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("fixture.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    for (i, (w, l)) in WORDS.iter().zip(LABELS).enumerate() {
        let text = vec!["movie"; *w].join(" ");
        let line = serde_json::json!({ "id": format!("doc{i}"), "text": text, "label": l });
        writeln!(f, "{line}").unwrap();
    }
    path
}

#[track_caller]
fn close(got: Option<f64>, want: f64) {
    let got = got.expect("a value");
    assert!((got - want).abs() <= 1e-9 * want.abs().max(1.0), "got {got}, want {want}");
}

/// Linear interpolation between closest ranks (numpy / polars default), computed by hand for
/// sorted words [50, 50, 100, 299, 300, 500, 1000]: h = 6p; p25 → h 1.5 → 50 + .5·50 = 75;
/// median → x[3] = 299; p75 → h 4.5 → 300 + .5·200 = 400; p95 → h 5.7 → 500 + .7·500 = 850;
/// p99 → h 5.94 → 970; p5 → h .3 → 50. Mean 2299/7; sample std (ddof 1) 338.9551873738165
/// (numpy: `np.std(w, ddof=1)`).
fn check_words(s: &Summary) {
    assert_eq!(s.count, 7);
    close(s.min, 50.0);
    close(s.p5, 50.0);
    close(s.p25, 75.0);
    close(s.median, 299.0);
    close(s.mean, 2299.0 / 7.0);
    close(s.p75, 400.0);
    close(s.p95, 850.0);
    close(s.p99, 970.0);
    close(s.max, 1000.0);
    close(s.std, 338.9551873738165);
}

#[test]
fn exact_figures_on_a_hand_checked_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture(dir.path());
    let opts = StatsOptions {
        vocab: Some(root().join("data/vocab/bert-base-uncased.txt")),
        max_len: Some(128),
        top: 3,
        word_buckets: Some(vec![100, 300, 500]),
        ..StatsOptions::default()
    };
    let (r, _) = stats::run(&input, &opts).map_err(|e| format!("{e:?}")).unwrap();
    assert_eq!(r.documents.read, 7);
    assert_eq!(r.documents.kept, 7);
    assert_eq!(r.input.kind, "source");
    assert_eq!(r.input.source_type, "jsonl");
    let all: &GroupStats = &r.groups[0];
    assert_eq!(all.group, "all");
    check_words(all.words.as_ref().unwrap());
    // Characters are 6w − 1, a linear map: every quantile maps the same way.
    let c = all.chars.as_ref().unwrap();
    close(c.p25, 6.0 * 75.0 - 1.0);
    close(c.p95, 6.0 * 850.0 - 1.0);
    close(c.std, 6.0 * 338.9551873738165);
    // "movie" is one token of bert-base-uncased.
    let t = all.tokens.as_ref().unwrap();
    close(t.median, 299.0);
    close(t.p75, 400.0);
    assert_eq!(all.unk_rate, Some(0.0));
    // Buckets: <100 {50, 50}, 100–299 {100, 299}, 300–499 {300}, ≥500 {500, 1000}.
    let buckets: Vec<(&str, u64)> =
        all.word_buckets.as_ref().unwrap().iter().map(|b| (b.range.as_str(), b.documents)).collect();
    assert_eq!(buckets, [("<100", 2), ("100-299", 2), ("300-499", 1), (">=500", 2)]);
    // Without --word-buckets the edges are the table's quartiles, rounded: p25 75, median
    // 299 → 300, p75 400.
    let (r, _) = stats::run(&input, &StatsOptions { word_buckets: None, ..opts.clone() }).unwrap();
    let ranges: Vec<String> = r.groups[0].word_buckets.as_ref().unwrap().iter().map(|b| b.range.clone()).collect();
    assert_eq!(ranges, ["<75", "75-299", "300-399", ">=400"]);
    let bad = StatsOptions { word_buckets: Some(vec![300, 100]), ..opts.clone() };
    let e = match stats::run(&input, &bad) {
        Err(e) => format!("{e:?}"),
        Ok(_) => panic!("--word-buckets 300,100 accepted"),
    };
    assert!(e.contains("increasing word counts"), "{e}");
    // max_len 128 leaves 126 tokens: 299, 300, 500 and 1000 are cut.
    let tr = all.truncation.as_ref().unwrap();
    assert_eq!((tr.limit, tr.documents_over), (126, 4));
    assert_eq!(tr.tokens_dropped, (299 - 126) + (300 - 126) + (500 - 126) + (1000 - 126));
    close(Some(tr.share_over), 4.0 / 7.0);
    assert_eq!(all.duplicates, Some(1));
    // Noise: the same scorer the pipeline uses, applied to each text.
    let scores: Vec<f32> =
        WORDS.iter().map(|w| NoiseScore::default().score(&vec!["movie"; *w].join(" ")).score).collect();
    let n = all.noise.as_ref().unwrap();
    close(n.score.max, scores.iter().cloned().fold(f32::MIN, f32::max) as f64);
    close(n.score.min, scores.iter().cloned().fold(f32::MAX, f32::min) as f64);
    assert_eq!(r.noise_scored_by, Some("default"));
    assert_eq!(r.noisiest.len(), 3);
    assert!(r.noisiest.windows(2).all(|w| w[0].noise_score >= w[1].noise_score));
    assert!(r.noisiest[0].snippet.as_ref().unwrap().starts_with("movie movie"));

    // Counts: neg 3 (one a duplicate), pos 3, unlabelled 1.
    let balance: Vec<(&str, u64)> = r.label_balance.iter().map(|l| (l.label.as_str(), l.documents)).collect();
    assert_eq!(balance, [("0", 3), ("1", 3), ("none", 1)]);
}

#[test]
fn by_label_groups_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture(dir.path());
    let opts = StatsOptions {
        by: Some(By::Label),
        set: vec!["source.label_map={neg: 0, pos: 1}".into()],
        ..Default::default()
    };
    let (r, _) = stats::run(&input, &opts).map_err(|e| format!("{e:?}")).unwrap();
    let groups: Vec<(&str, u64)> = r.groups.iter().map(|g| (g.group.as_str(), g.documents)).collect();
    assert_eq!(groups, [("all", 7), ("neg", 3), ("pos", 3), ("none", 1)]);
    let words = |name: &str| r.groups.iter().find(|g| g.group == name).unwrap().words.unwrap();
    // neg: 50, 299, 50 → median 50, max 299; pos: 100, 300, 500 → median 300; none: 1000.
    close(words("neg").median, 50.0);
    close(words("neg").max, 299.0);
    close(words("pos").median, 300.0);
    close(words("pos").mean, 300.0);
    close(words("none").min, 1000.0);
    assert_eq!(words("none").std, None, "one value has no sample std");
    assert_eq!(r.groups[1].duplicates, Some(1));
    assert_eq!(r.groups[2].duplicates, Some(0));
}

fn json(args: &[&str]) -> Value {
    let o = bertpipe(args);
    assert_ok(&o);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().map(String::as_str).collect()
}

const SUMMARY_KEYS: [&str; 11] = ["count", "min", "p5", "p25", "median", "mean", "p75", "p95", "p99", "max", "std"];

#[test]
fn json_schema_is_stable() {
    let v = json(&["stats", "pipelines/imdb.yaml", "--json", "--by", "label", "--quiet"]);
    assert_eq!(
        keys(&v),
        [
            "format",
            "input",
            "unit",
            "token_unit",
            "by",
            "max_len",
            "documents",
            "counts",
            "label_balance",
            "noise_scored_by",
            "groups",
            "noisiest"
        ]
    );
    assert_eq!(v["format"], "bertpipe-stats/1");
    assert_eq!(keys(&v["input"]), ["path", "kind", "source_type", "name"]);
    assert_eq!(v["input"]["kind"], "pipeline");
    assert_eq!(v["input"]["name"], "imdb");
    assert_eq!(
        (v["unit"].as_str(), v["token_unit"].as_str(), v["by"].as_str()),
        (Some("document"), Some("document"), Some("label"))
    );
    assert_eq!(v["max_len"], 512);
    assert_eq!(keys(&v["documents"]), ["read", "kept", "rejected", "rejected_by_reason"]);
    let d = &v["documents"];
    assert_eq!(d["read"].as_u64().unwrap(), d["kept"].as_u64().unwrap() + d["rejected"].as_u64().unwrap());
    assert_eq!(keys(&v["counts"][0]), ["split", "label", "documents", "share"]);
    assert_eq!(keys(&v["label_balance"][0]), ["label", "documents", "share"]);
    assert_eq!(v["noise_scored_by"], "pipeline");
    let groups = v["groups"].as_array().unwrap();
    let names: Vec<&str> = groups.iter().map(|g| g["group"].as_str().unwrap()).collect();
    assert_eq!(names, ["all", "neg", "pos"]);
    for g in groups {
        assert_eq!(
            keys(g),
            [
                "group",
                "documents",
                "share",
                "chars",
                "words",
                "word_buckets",
                "tokens",
                "truncation",
                "noise",
                "unk_rate",
                "duplicates"
            ]
        );
        for m in ["chars", "words", "tokens"] {
            assert_eq!(keys(&g[m]), SUMMARY_KEYS, "{m}");
            assert!(g[m]["median"].is_f64(), "{m}.median is a number");
        }
        assert_eq!(
            keys(&g["noise"]),
            ["score", "sent_len_std", "punct_ratio", "caps_ratio", "repeat_ratio", "mojibake_ratio"]
        );
        assert_eq!(keys(&g["noise"]["caps_ratio"]), SUMMARY_KEYS);
        assert_eq!(keys(&g["word_buckets"][0]), ["range", "documents", "share"]);
        assert_eq!(
            keys(&g["truncation"]),
            ["max_len", "limit", "documents_over", "share_over", "tokens_dropped", "tokens_dropped_share", "source"]
        );
        assert!(g["unk_rate"].is_f64());
        assert!(g["duplicates"].is_u64());
    }
    // The groups partition the documents; the counts table agrees.
    let all = groups[0]["documents"].as_u64().unwrap();
    assert_eq!(groups[1..].iter().map(|g| g["documents"].as_u64().unwrap()).sum::<u64>(), all);
    let counted: u64 = v["counts"].as_array().unwrap().iter().map(|c| c["documents"].as_u64().unwrap()).sum();
    assert_eq!(counted, all);
    let neg: u64 = v["counts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["label"] == "neg")
        .map(|c| c["documents"].as_u64().unwrap())
        .sum();
    assert_eq!(neg, groups[1]["documents"].as_u64().unwrap());
    assert_eq!(keys(&v["noisiest"][0]), ["id", "split", "label", "noise_score", "snippet"]);
    assert_eq!(v["noisiest"].as_array().unwrap().len(), 10);
}

#[test]
fn raw_sample_table_and_csv() {
    let o = bertpipe(&["stats", "data/aclImdb-sample", "--quiet"]);
    assert_ok(&o);
    let table = String::from_utf8_lossy(&o.stdout);
    for needle in
        ["750 documents read, 750 kept", "train  unsup", "median", "words: <", "exact duplicates", "noisiest 10:"]
    {
        assert!(table.contains(needle), "missing `{needle}` in:\n{table}");
    }
    let o = bertpipe(&["stats", "data/aclImdb-sample", "--csv", "--quiet", "--by", "split"]);
    assert_ok(&o);
    let csv = String::from_utf8_lossy(&o.stdout);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("group,metric,stat,value"));
    assert!(lines.clone().all(|l| l.split(',').count() >= 4), "every line has 4 fields");
    assert!(csv.contains("\nall,documents,kept,750\n"));
    assert!(csv.contains("\ntrain,documents,count,450\n"), "{csv}");
    assert!(csv.contains("\ntest,words,median,"));
}

/// Shards written with the text kept, read back by stats, agree with the streaming pass over the
/// same pipeline: the same documents, the same cleaned text, the same noise scores.
#[test]
fn shards_pipeline_and_source_agree() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("imdb");
    assert_ok(&run_pipeline("pipelines/imdb.yaml", &out, &["--set", "sink.keep_text=true"]));
    let from_pipeline = json(&["stats", "pipelines/imdb.yaml", "--json", "--quiet", "--by", "split"]);
    let from_shards = json(&["stats", out.to_str().unwrap(), "--json", "--quiet", "--by", "split"]);
    assert_eq!(from_shards["input"]["kind"], "shards");
    assert_eq!(from_shards["unit"], "row");
    assert_eq!(from_shards["token_unit"], "row");
    for (p, s) in from_pipeline["groups"].as_array().unwrap().iter().zip(from_shards["groups"].as_array().unwrap()) {
        assert_eq!(p["group"], s["group"]);
        assert_eq!(p["documents"], s["documents"]);
        for m in ["chars", "words", "word_buckets", "noise", "duplicates", "unk_rate"] {
            assert_eq!(p[m], s[m], "{} {m}", p["group"]);
        }
        // Rows were truncated to max_len; the manifest remembers what truncation did.
        assert_eq!(s["truncation"]["source"], "manifest");
        assert_eq!(p["truncation"]["documents_over"], s["truncation"]["documents_over"]);
        assert_eq!(p["truncation"]["tokens_dropped"], s["truncation"]["tokens_dropped"]);
        assert!(s["tokens"]["max"].as_f64().unwrap() <= 512.0);
    }
    assert_eq!(from_pipeline["documents"]["rejected_by_reason"], from_shards["documents"]["rejected_by_reason"]);
    assert_eq!(from_pipeline["noisiest"], from_shards["noisiest"]);

    // The raw corpus has more documents (unsup and the rejected ones) and no tokens.
    let raw = json(&["stats", "data/aclImdb-sample", "--json", "--quiet"]);
    assert_eq!(raw["documents"]["kept"], 750);
    assert_eq!(raw["groups"][0]["tokens"], Value::Null);
    assert_eq!(raw["token_unit"], Value::Null);

    // A shard that no longer matches its manifest is refused, with the file named.
    let shard = out.join("train/part-00000.parquet");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&shard, bytes).unwrap();
    let o = bertpipe(&["stats", out.to_str().unwrap(), "--quiet"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("checksum mismatch") && stderr(&o).contains("part-00000.parquet"), "{}", stderr(&o));
}

#[test]
fn plots_are_written_and_well_formed() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let o = bertpipe(&["stats", "pipelines/imdb.yaml", "--by", "label", "--quiet", "--plot", plots.to_str().unwrap()]);
    assert_ok(&o);
    let mut names: Vec<String> =
        std::fs::read_dir(&plots).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "labels.png",
            "labels.svg",
            "noise.png",
            "noise.svg",
            "report.html",
            "tokens.png",
            "tokens.svg",
            "words.png",
            "words.svg"
        ]
    );
    for stem in ["labels", "noise", "tokens", "words"] {
        let svg = std::fs::read_to_string(plots.join(format!("{stem}.svg"))).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{stem}.svg does not parse: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
        let texts: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
        assert!(rects > 3, "{stem}.svg has bars ({rects} rects)");
        assert!(!texts.is_empty(), "{stem}.svg has text");

        let png = std::fs::File::open(plots.join(format!("{stem}.png"))).unwrap();
        let mut reader = png::Decoder::new(std::io::BufReader::new(png)).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (960, 560));
        let pixels = &buf[..info.buffer_size()];
        let distinct: std::collections::HashSet<&[u8]> = pixels.chunks(3).collect();
        assert!(distinct.len() > 10, "{stem}.png is not blank ({} colours)", distinct.len());
        let dark = pixels.chunks(3).filter(|p| p.iter().all(|&c| c < 80)).count();
        assert!(dark > 500, "{stem}.png has drawn text and axes ({dark} dark pixels)");
    }
    let words = std::fs::read_to_string(plots.join("words.svg")).unwrap();
    assert!(words.contains("median") && words.contains("p95"), "median and p95 lines are labelled");
    assert!(std::fs::read_to_string(plots.join("tokens.svg")).unwrap().contains("max_len 512"));
}

#[test]
fn string_labels_without_a_map_are_named_in_sorted_order_and_mixed_ones_ask_for_a_map() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reviews.jsonl");
    std::fs::write(
        &path,
        "{\"text\": \"great film\", \"label\": \"pos\"}\n{\"text\": \"awful\", \"label\": \"neg\"}\n",
    )
    .unwrap();
    let o = bertpipe(&["stats", path.to_str().unwrap(), "--quiet", "--by", "label"]);
    assert_ok(&o);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("2 documents read, 2 kept, 0 rejected"), "{table}");
    assert!(table.contains("label balance: neg 50.0% · pos 50.0%"), "{table}");
    // Names beside numbers: which id a name is cannot be guessed.
    std::fs::write(&path, "{\"text\": \"great film\", \"label\": \"pos\"}\n{\"text\": \"awful\", \"label\": 0}\n")
        .unwrap();
    let o = bertpipe(&["stats", path.to_str().unwrap(), "--quiet"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("holds names (`pos`) and numbers (0): give a label_map"), "{}", stderr(&o));
}

#[test]
fn bad_inputs_say_what_is_wrong() {
    let o = bertpipe(&["stats", "no/such/place"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("'no/such/place' does not exist"), "{}", stderr(&o));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.md"), "hello").unwrap();
    let o = bertpipe(&["stats", dir.path().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a shard folder"), "{}", stderr(&o));

    std::fs::write(dir.path().join("_journal.jsonl"), "{}\n").unwrap();
    let o = bertpipe(&["stats", dir.path().to_str().unwrap()]);
    assert!(stderr(&o).contains("--resume"), "{}", stderr(&o));

    let o = bertpipe(&["stats", "pipelines/imdb.yaml", "--set", "steps[4].max_nois=3"]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("max_nois"), "{}", stderr(&o));

    let o = bertpipe(&["stats", "pipelines/imdb.yaml", "--vocab", "data/vocab/bert-base-uncased.txt"]);
    assert!(stderr(&o).contains("already has a tokenize step"), "{}", stderr(&o));
}

/// The streaming pass keeps numbers, never text: over ~120 MB of text its peak memory stays far
/// below the size of the input.
#[test]
fn streaming_pass_memory_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let words = ["the", "film", "was", "really", "quite", "good,", "though", "long.", "Acting:", "superb!"];
    let mut state = 7u64;
    let mut total = 0usize;
    for i in 0..3000 {
        let mut text = String::new();
        while text.len() < 40_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            text.push_str(words[(state >> 33) as usize % words.len()]);
            text.push(' ');
        }
        total += text.len();
        writeln!(f, "{}", serde_json::json!({ "text": text, "id": i })).unwrap();
    }
    drop(f);
    assert!(total > 110_000_000);
    let o = bertpipe(&["stats", path.to_str().unwrap(), "--json"]);
    assert_ok(&o);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["documents"]["kept"], 3000);
    let err = stderr(&o);
    let rss = err
        .split("peak RSS ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("no peak RSS in: {err}"))
        .to_string();
    let mib: f64 = match rss.split_whitespace().collect::<Vec<_>>()[..] {
        [n, "MiB"] => n.parse().unwrap(),
        [n, "KiB"] => n.parse::<f64>().unwrap() / 1024.0,
        _ => panic!("unexpected RSS `{rss}`"),
    };
    assert!(mib < 100.0, "peak RSS {mib} MiB for {} MB of text", total / 1_000_000);
}

/// Pretraining shards: rows grouped by next-sentence label, lengths within max_len, no
/// truncation figures (pretraining splits documents instead of cutting them).
#[test]
fn pretraining_shards() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pre");
    assert_ok(&run_pipeline("pipelines/imdb-pretrain.yaml", &out, &[]));
    let v = json(&["stats", out.to_str().unwrap(), "--json", "--quiet", "--by", "label"]);
    let m = manifest(&out);
    let names: Vec<&str> = v["groups"].as_array().unwrap().iter().map(|g| g["group"].as_str().unwrap()).collect();
    assert_eq!(names, ["all", "is_next", "random"]);
    let rows: u64 = m["splits"].as_object().unwrap().values().map(|s| s["rows"].as_u64().unwrap()).sum();
    assert_eq!(v["groups"][0]["documents"].as_u64(), Some(rows));
    assert!(v["groups"][0]["tokens"]["max"].as_f64().unwrap() <= m["max_len"].as_f64().unwrap());
    assert_eq!(v["groups"][0]["truncation"], Value::Null);
    assert!(v["groups"][0]["unk_rate"].is_f64());
    assert_eq!(v["max_len"], m["max_len"]);
}

/// The report does not depend on how many threads read, clean or aggregate.
#[test]
fn same_report_for_any_thread_count() {
    let args = ["stats", "pipelines/imdb.yaml", "--json", "--quiet", "--by", "label"];
    let one = bertpipe_env(&[&args[..], &["-j", "1"]].concat(), &[("POLARS_MAX_THREADS", "1")]);
    let many = bertpipe_env(&[&args[..], &["-j", "3"]].concat(), &[("POLARS_MAX_THREADS", "4")]);
    assert_ok(&one);
    assert_ok(&many);
    assert_eq!(String::from_utf8_lossy(&one.stdout), String::from_utf8_lossy(&many.stdout));
}

/// A seeded text of `n` words from a vocabulary of 3,000.
fn words(seed: u64, n: usize) -> Vec<String> {
    let mut r = bertpipe::rng::Rng::for_key(seed, &[]);
    (0..n).map(|_| format!("w{}", r.below(3000))).collect()
}

#[test]
fn leakage_counts_the_planted_exact_and_near_copies_of_training_documents() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 300 training documents; 60 test documents: 10 exact copies (recased, repunctuated), 10
    // near copies (2 of 200 words changed: Jaccard ≈ 0.90), 10 far ones (every 3rd word changed:
    // ≈ 0), 30 unrelated.
    let train: Vec<Vec<String>> = (0..300).map(|i| words(i, 200)).collect();
    let mut test: Vec<(String, String)> = Vec::new();
    for i in 0..10 {
        test.push((format!("exact{i}"), train[i].join(", ").to_uppercase()));
        let mut near = train[100 + i].clone();
        for j in [40, 150] {
            near[j] = format!("changed{j}");
        }
        test.push((format!("near{i}"), near.join(" ")));
        let far: Vec<String> = train[200 + i]
            .iter()
            .enumerate()
            .map(|(j, w)| if j % 3 == 0 { format!("far{j}") } else { w.clone() })
            .collect();
        test.push((format!("far{i}"), far.join(" ")));
    }
    for i in 0..30 {
        test.push((format!("new{i}"), words(10_000 + i, 200).join(" ")));
    }
    let jsonl = |rows: Vec<(String, String)>| -> String {
        rows.into_iter().map(|(id, text)| serde_json::json!({"id": id, "text": text}).to_string() + "\n").collect()
    };
    std::fs::write(
        d.join("train.jsonl"),
        jsonl(train.iter().enumerate().map(|(i, w)| (format!("t{i}"), w.join(" "))).collect()),
    )
    .unwrap();
    std::fs::write(d.join("test.jsonl"), jsonl(test)).unwrap();
    let shards = |name: &str, split: &str| {
        let yaml = format!(
            "name: {name}\nsource: {{ type: jsonl, path: {}, id_field: id, split: {split} }}\nsteps: []\nsink: {{ type: parquet, path: {}, keep_text: true }}\n",
            d.join(format!("{name}.jsonl")).display(),
            d.join(name).display()
        );
        let p = write_pipeline(d, &format!("{name}.yaml"), &yaml);
        assert_ok(&bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet"]));
        d.join(name)
    };
    let (train_dir, test_dir) = (shards("train", "train"), shards("test", "test"));
    let o = bertpipe(&[
        "stats",
        "--leakage",
        test_dir.to_str().unwrap(),
        "--against",
        &format!("{}:train", train_dir.display()),
        "--json",
        "--top",
        "100",
    ]);
    assert_ok(&o);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((r["documents"].as_u64(), r["training_documents"].as_u64()), (Some(60), Some(300)));
    assert_eq!((r["exact"].as_u64(), r["near"].as_u64(), r["leaked"].as_u64()), (Some(10), Some(10), Some(20)), "{r}");
    assert!((r["share"].as_f64().unwrap() - 20.0 / 60.0).abs() < 1e-12);
    for l in r["leaks"].as_array().unwrap() {
        let id = l["id"].as_str().unwrap();
        let i: usize = id.trim_start_matches(char::is_alphabetic).parse().unwrap();
        let want = if id.starts_with("exact") { format!("t{i}") } else { format!("t{}", 100 + i) };
        assert!(l["matches"].as_str().unwrap().ends_with(&format!(":train/{want}")), "{l}");
        assert_eq!(l["kind"], if id.starts_with("exact") { "exact" } else { "near" });
        assert!(l["similarity"].as_f64().unwrap() >= 0.8);
    }
    // The table says the same; shards without text are refused, naming the fix.
    let o = bertpipe(&["stats", "--leakage", test_dir.to_str().unwrap(), "--against", train_dir.to_str().unwrap()]);
    assert_ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("20 of 60 documents (33.33%)"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let plain = d.join("plain");
    let yaml = format!(
        "name: plain\nsource: {{ type: jsonl, path: {}, id_field: id, split: train }}\nsteps: []\nsink: {{ type: parquet, path: {}, keep_text: false }}\n",
        d.join("train.jsonl").display(),
        plain.display()
    );
    assert_ok(&bertpipe(&["pipeline", "run", write_pipeline(d, "plain.yaml", &yaml).to_str().unwrap(), "--quiet"]));
    let o = bertpipe(&["stats", "--leakage", test_dir.to_str().unwrap(), "--against", plain.to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("sink.keep_text: true"), "{}", stderr(&o));

    // From pipelines (their cleaned documents, whether or not they keep text), and mixed with
    // shards: the same figures and the same matches.
    let leaks = |r: &Value| -> Vec<(String, String)> {
        r["leaks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let m = l["matches"].as_str().unwrap();
                (l["id"].as_str().unwrap().to_string(), m[m.rfind('/').unwrap()..].to_string())
            })
            .collect()
    };
    let figures = |r: &Value| {
        ["documents", "training_documents", "exact", "near", "leaked"].map(|k| r[k].as_u64().unwrap_or(u64::MAX))
    };
    for (eval, against) in [
        (d.join("test.yaml"), format!("{}:train", d.join("plain.yaml").display())),
        (test_dir.clone(), d.join("plain.yaml").display().to_string()),
        (d.join("test.yaml"), train_dir.display().to_string()),
    ] {
        let o = bertpipe(&[
            "stats",
            "--leakage",
            eval.to_str().unwrap(),
            "--against",
            &against,
            "--json",
            "--top",
            "100",
            "--quiet",
        ]);
        assert_ok(&o);
        let p: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(figures(&p), figures(&r), "{} against {against}: {p}", eval.display());
        assert_eq!(leaks(&p), leaks(&r), "{} against {against}", eval.display());
    }
    // A split the input cannot hold is named.
    let plain_yaml = d.join("plain.yaml").display().to_string();
    let o = bertpipe(&[
        "stats",
        "--leakage",
        d.join("test.yaml").to_str().unwrap(),
        "--split",
        "dev",
        "--against",
        &plain_yaml,
    ]);
    assert!(!o.status.success() && stderr(&o).contains("no split `dev`"), "{}", stderr(&o));
}
