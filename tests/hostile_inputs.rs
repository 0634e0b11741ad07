//! Binary-level tests on hostile inputs: broken encodings, odd files, every source format.
//! Nothing may be dropped silently: counts reconcile and every reject has a reason.

mod common;

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::*;

const CLEAN_STEPS: &str = "steps:
  - type: html_strip
  - type: unicode_normalize
  - type: punctuation
  - type: noise_score
  - type: filter
    min_words: 1
  - type: dedup
";

/// An aclImdb tree with every kind of trouble, and the files in reading order.
fn hostile_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let big: String = "A very long review that goes on and on about the film. ".repeat(5 * 1024 * 1024 / 56);
    let mut junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    junk[10] = 0;
    let files: Vec<(String, Vec<u8>)> = vec![
        ("train/neg/0_1.txt".into(), b"Dreadful.<br /><br />I want my two hours back &amp; my money.".to_vec()),
        ("train/neg/1_2.txt".into(), b"Broken bytes \xff\xfe in the middle of a review.".to_vec()),
        ("train/neg/2_3.txt".into(), b"\xEF\xBB\xBFA review that starts with a byte order mark.".to_vec()),
        ("train/neg/3_4.txt".into(), Vec::new()),
        ("train/neg/4_1.txt".into(), b"Line one of a Windows review.\r\nLine two.\r\n".to_vec()),
        ("train/neg/5_2.txt".into(), junk),
        ("train/neg/6_1.txt".into(), b"Dreadful.<br /><br />I want my two hours back &amp; my money.".to_vec()),
        ("train/neg/notes.txt".into(), b"a file name without a rating".to_vec()),
        ("train/neg/7_9.txt.orig".into(), b"a stray non-txt file".to_vec()),
        ("train/neg/9_11.txt".into(), b"A rating past ten is not aclImdb's.".to_vec()),
        ("train/pos/0_10.txt".into(), big.into_bytes()),
        ("train/pos/1_9.txt".into(), "Sublime \u{201C}Amélie\u{201D}!!! 10/10".as_bytes().to_vec()),
        ("train/pos/2_3.txt".into(), b"Rated three out of ten, yet filed with the positive reviews.".to_vec()),
        ("test/neg/0_2.txt".into(), b"Not good at all.".to_vec()),
        ("test/pos/0_8.txt".into(), b"Loved it.".to_vec()),
    ];
    for (name, bytes) in &files {
        let p = root.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    // The dataset's own non-review files are not documents.
    std::fs::write(root.join("train/urls_neg.txt"), "http://www.imdb.com/title/tt0000001/usercomments\n").unwrap();
    std::fs::write(root.join("train/labeledBow.feat"), "0:1\n").unwrap();
    std::fs::write(root.join("imdb.vocab"), "the\n").unwrap();
    files
}

fn pipeline_for(dir: &Path, source: &str, out: &Path) -> PathBuf {
    let yaml =
        format!("name: hostile\nsource: {source}\n{CLEAN_STEPS}sink: {{ type: parquet, path: {} }}\n", out.display());
    write_pipeline(dir, "p.yaml", &yaml)
}

fn run(p: &Path) -> std::process::Output {
    bertpipe(&["pipeline", "run", p.to_str().unwrap(), "--quiet"])
}

fn rejects_by_id(out: &Path) -> std::collections::BTreeMap<String, String> {
    strings(out, "_rejects", "id").into_iter().zip(strings(out, "_rejects", "reason")).collect()
}

#[test]
fn hostile_aclimdb_folder_reconciles_with_reasons() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("aclImdb");
    hostile_tree(&corpus);
    let out = tmp.path().join("out");
    let p = pipeline_for(tmp.path(), &format!("{{ type: aclimdb, path: {} }}", corpus.display()), &out);
    assert_ok(&run(&p));
    assert_reconciles(&out);
    let m = manifest(&out);
    assert_eq!(m["splits"]["train"]["docs_in"], 13, "every file in a label folder is counted");
    assert_eq!(m["splits"]["test"]["docs_in"], 2);
    assert_eq!(m["splits"]["train"]["utf8_replaced"], 1);
    let rejects = rejects_by_id(&out);
    assert_eq!(rejects["train/neg/3_4"], "empty");
    assert_eq!(rejects["train/neg/5_2"], "binary");
    assert_eq!(rejects["train/neg/notes.txt"], "bad_file_name:notes.txt");
    assert_eq!(rejects["train/neg/7_9.txt.orig"], "bad_file_name:7_9.txt.orig");
    assert_eq!(rejects["train/neg/6_1"], "duplicate_of:train/neg/0_1");
    // aclImdb's ratings are 1–10; a positive review rated ≤ 4 has a label in doubt.
    assert_eq!(rejects["train/neg/9_11.txt"], "bad_file_name:9_11.txt");
    assert_eq!(rejects["train/pos/2_3"], "rating_disagrees:rating 3 in pos");
    assert_eq!(rejects.len(), 7);

    let ids = strings(&out, "train", "id");
    let texts = strings(&out, "train", "text");
    let text = |id: &str| &texts[ids.iter().position(|i| i == id).unwrap()];
    assert_eq!(text("train/neg/1_2"), "Broken bytes \u{FFFD}\u{FFFD} in the middle of a review.");
    assert_eq!(text("train/neg/2_3"), "A review that starts with a byte order mark.");
    assert_eq!(text("train/neg/4_1"), "Line one of a Windows review. Line two.");
    assert_eq!(text("train/neg/0_1"), "Dreadful. I want my two hours back & my money.");
    assert_eq!(text("train/pos/1_9"), "Sublime \"Amélie\"! 10/10");
    assert!(text("train/pos/0_10").len() > 5_000_000);
}

#[test]
fn invalid_utf8_can_be_rejected_instead() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("aclImdb");
    hostile_tree(&corpus);
    let out = tmp.path().join("out");
    let p = pipeline_for(
        tmp.path(),
        &format!("{{ type: aclimdb, path: {}, on_invalid_utf8: reject }}", corpus.display()),
        &out,
    );
    assert_ok(&run(&p));
    assert_reconciles(&out);
    assert_eq!(rejects_by_id(&out)["train/neg/1_2"], "invalid_utf8");
    assert_eq!(manifest(&out)["splits"]["train"]["utf8_replaced"], 0);
}

#[test]
fn tarball_reads_as_a_stream_and_matches_the_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("aclImdb");
    let files = hostile_tree(&corpus);
    let tarball = tmp.path().join("aclImdb_v1.tar.gz");
    {
        let gz = flate2::write::GzEncoder::new(std::fs::File::create(&tarball).unwrap(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        tar.append_dir_all("aclImdb/x", tmp.path().join("nothing-here")).ok();
        for extra in ["imdb.vocab", "train/urls_neg.txt"] {
            tar.append_path_with_name(corpus.join(extra), format!("aclImdb/{extra}")).unwrap();
        }
        for (name, _) in &files {
            tar.append_path_with_name(corpus.join(name), format!("aclImdb/{name}")).unwrap();
        }
        // A file name that is not UTF-8, in both; links, which only the folder can follow.
        let odd = std::ffi::OsStr::from_bytes(b"50_\xff2.txt");
        std::fs::write(corpus.join("train/neg").join(odd), "An odd name.").unwrap();
        let mut odd_tar = std::ffi::OsString::from("aclImdb/train/neg/");
        odd_tar.push(odd);
        tar.append_path_with_name(corpus.join("train/neg").join(odd), odd_tar).unwrap();
        for (kind, name) in [(tar::EntryType::Symlink, "51_1.txt"), (tar::EntryType::Link, "52_2.txt")] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(0);
            h.set_mode(0o644);
            tar.append_link(&mut h, format!("aclImdb/train/neg/{name}"), "aclImdb/train/neg/0_1.txt").unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
    }
    let out_dir = tmp.path().join("from-folder");
    let out_tar = tmp.path().join("from-tar");
    assert_ok(&run(&pipeline_for(tmp.path(), &format!("{{ type: aclimdb, path: {} }}", corpus.display()), &out_dir)));
    assert_ok(&run(&pipeline_for(tmp.path(), &format!("{{ type: aclimdb, path: {} }}", tarball.display()), &out_tar)));
    assert_reconciles(&out_tar);
    for split in ["train", "test"] {
        for shard in shard_files(&out_dir.join(split)) {
            let twin = out_tar.join(split).join(shard.file_name().unwrap());
            assert_eq!(std::fs::read(&shard).unwrap(), std::fs::read(&twin).unwrap(), "{}", shard.display());
        }
    }
    // Nothing in a label folder vanishes from the stream: the odd name is rejected as the
    // folder rejects it, and each link is counted and rejected with its target.
    let (m_dir, m_tar) = (manifest(&out_dir), manifest(&out_tar));
    assert_eq!(m_dir["splits"]["train"]["docs_in"], 14);
    assert_eq!(m_tar["splits"]["train"]["docs_in"], 16);
    let mut from_tar = rejects_by_id(&out_tar);
    assert_eq!(from_tar.remove("train/neg/51_1").as_deref(), Some("link_in_tarball:aclImdb/train/neg/0_1.txt"));
    assert_eq!(from_tar.remove("train/neg/52_2").as_deref(), Some("link_in_tarball:aclImdb/train/neg/0_1.txt"));
    assert_eq!(from_tar, rejects_by_id(&out_dir), "the tarball rejects what the folder does");
    assert_eq!(from_tar["train/neg/50_\u{FFFD}2.txt"], "bad_file_name:50_\u{FFFD}2.txt");
}

#[test]
fn jsonl_csv_text_and_parquet_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("in.jsonl"),
        b"\xEF\xBB\xBF{\"text\": \"First review, fine.\", \"label\": \"pos\", \"id\": \"a\"}\r\n\n{\"text\": \"Second <b>one</b>.\", \"label\": \"neg\"}\nnot json at all\n{\"label\": \"pos\"}\n{\"text\": \"third\", \"label\": \"meh\"}\n",
    )
    .unwrap();
    let out = d.join("o-jsonl");
    let p = pipeline_for(
        d,
        &format!(
            "{{ type: jsonl, path: {}, label_field: label, id_field: id, label_map: {{neg: 0, pos: 1}} }}",
            d.join("in.jsonl").display()
        ),
        &out,
    );
    assert_ok(&run(&p));
    assert_reconciles(&out);
    let r = rejects_by_id(&out);
    assert!(r["in.jsonl:4"].starts_with("bad_json:"), "{r:?}");
    assert_eq!(r["in.jsonl:5"], "missing_field:text");
    assert!(r["in.jsonl:6"].starts_with("bad_label:"), "{r:?}");
    assert_eq!(strings(&out, "train", "id"), ["a", "in.jsonl:3"]);
    assert_eq!(strings(&out, "train", "text"), ["First review, fine.", "Second one."]);
    assert_eq!(manifest(&out)["splits"]["train"]["utf8_replaced"], 0);

    // Invalid UTF-8 inside a JSON string is replaced and counted.
    std::fs::write(d.join("bad.jsonl"), b"{\"text\": \"caf\xe9 au lait\"}\n").unwrap();
    let out = d.join("o-jsonl-bad");
    assert_ok(&run(&pipeline_for(d, &format!("{{ type: jsonl, path: {} }}", d.join("bad.jsonl").display()), &out)));
    assert_eq!(strings(&out, "train", "text"), ["caf\u{FFFD} au lait"]);
    assert_eq!(manifest(&out)["splits"]["train"]["utf8_replaced"], 1);

    std::fs::write(
        d.join("in.csv"),
        "id,review,sentiment\r\n1,\"Multi-line\nreview, with \"\"quotes\"\"\",1\n2,Short one,0\n3,too,many,fields\n",
    )
    .unwrap();
    let out = d.join("o-csv");
    let p = pipeline_for(
        d,
        &format!(
            "{{ type: csv, path: {}, text_column: review, label_column: sentiment, id_column: id }}",
            d.join("in.csv").display()
        ),
        &out,
    );
    assert_ok(&run(&p));
    assert_reconciles(&out);
    assert_eq!(strings(&out, "train", "text"), ["Multi-line review, with \"quotes\"", "Short one"]);
    assert!(strings(&out, "_rejects", "reason")[0].starts_with("bad_csv:"));
    // The malformed record is kept in the rejects, not an empty text.
    assert_eq!(strings(&out, "_rejects", "text"), ["3,too,many,fields"]);

    // A folder of .tsv files is read with tabs (a single .tsv file was already).
    std::fs::create_dir_all(d.join("tsvs")).unwrap();
    std::fs::write(d.join("tsvs/a.tsv"), "text\tlabel\nGood, fine, great film\t1\n").unwrap();
    std::fs::write(d.join("tsvs/b.tsv"), "text\tlabel\nBad, awful, boring film\t0\n").unwrap();
    let out = d.join("o-tsv");
    let p = pipeline_for(d, &format!("{{ type: csv, path: {}, label_column: label }}", d.join("tsvs").display()), &out);
    assert_ok(&run(&p));
    assert_eq!(strings(&out, "train", "text"), ["Good, fine, great film", "Bad, awful, boring film"]);

    std::fs::write(d.join("in.txt"), "Para one line one.\nline two.\n\n\nPara two.\n").unwrap();
    let out = d.join("o-text");
    let p = pipeline_for(
        d,
        &format!("{{ type: text, path: {}, mode: paragraphs, split: unsup }}", d.join("in.txt").display()),
        &out,
    );
    assert_ok(&run(&p));
    assert_eq!(strings(&out, "unsup", "id"), ["in.txt:1", "in.txt:5"]);
    assert_eq!(strings(&out, "unsup", "text"), ["Para one line one. line two.", "Para two."]);

    // Our own shards are a valid Parquet source.
    let shard = d.join("o-csv/train/part-00000.parquet");
    let out = d.join("o-parquet");
    let p = pipeline_for(
        d,
        &format!(
            "{{ type: parquet, path: {}, text_column: text, label_column: label, id_column: id, split: test }}",
            shard.display()
        ),
        &out,
    );
    assert_ok(&run(&p));
    assert_eq!(strings(&out, "test", "id"), ["1", "2"]);
    let missing = pipeline_for(
        d,
        &format!("{{ type: parquet, path: {}, text_column: body }}", shard.display()),
        &d.join("o-bad"),
    );
    let o = run(&missing);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("has no column `body` (text_column); columns: id, label"), "{}", stderr(&o));
}

/// A tar entry whose header claims a terabyte (a crafted or cut archive): the reader must not
/// allocate what the header says — the run stops with an error naming the archive, no abort.
#[test]
fn a_tar_entry_claiming_a_terabyte_is_an_error_not_an_abort() {
    let tmp = tempfile::tempdir().unwrap();
    let tarball = tmp.path().join("aclImdb_v1.tar.gz");
    let mut raw = Vec::new();
    let mut header = tar::Header::new_gnu();
    header.set_path("aclImdb/train/pos/0_9.txt").unwrap();
    header.set_size(1 << 40);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    raw.extend_from_slice(header.as_bytes());
    raw.extend_from_slice(&[b'a'; 512]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).unwrap();
    std::fs::write(&tarball, gz.finish().unwrap()).unwrap();
    let out = tmp.path().join("out");
    let p = pipeline_for(tmp.path(), &format!("{{ type: aclimdb, path: {} }}", tarball.display()), &out);
    let o = run(&p);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("aclImdb_v1.tar.gz") && !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
    assert!(!out.join("manifest.json").exists());
}

/// A write the file system refuses (here a file-size limit, as a full disk refuses one) names
/// the shard it was writing: a shard smaller than the write buffer reaches the disk only when it
/// closes, where the error used to come bare ("File too large (os error 27)"). With the limit
/// lifted, `--resume` finishes the run.
#[test]
fn a_refused_write_names_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out_arg = format!("sink.path={}", out.display());
    let args =
        ["pipeline", "run", "pipelines/imdb.yaml", "--quiet", "--overwrite", "--set", "sink.keep_text=true", "--set"];
    // bash's `ulimit -f` counts KiB; SIGXFSZ ignored, the write fails with EFBIG instead.
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg("ulimit -f 40; trap '' XFSZ; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_bertpipe"))
        .args(args)
        .arg(&out_arg)
        .current_dir(root())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&format!("could not write '{}/", out.display()))
            && err.contains(".parquet.tmp'")
            && err.contains("os error 27"),
        "{err}"
    );
    let resumed = bertpipe(&[
        "pipeline",
        "run",
        "pipelines/imdb.yaml",
        "--quiet",
        "--resume",
        "--set",
        "sink.keep_text=true",
        "--set",
        &out_arg,
    ]);
    assert_ok(&resumed);
    assert!(out.join("manifest.json").is_file());
}
