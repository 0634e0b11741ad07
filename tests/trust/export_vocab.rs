//! Defect 13: `export onnx --vocab` with a vocabulary that does not fit the model. Given the
//! 30,522-token BERT vocabulary for a 120-row model, the export wrote `model.onnx` and
//! `--verify` then died inside candle (`index-select invalid index`, with a backtrace), leaving
//! that model at the output path. Now the vocabulary is checked against the model's word
//! embeddings before anything is written (refused naming both files and both sizes), and the
//! model is written aside and checked there: one that fails `--verify` — or whose check cannot
//! run — never lands at `--out`.

use std::path::{Path, PathBuf};

use bertpipe::onnx::{export, runtime, verify};

use crate::common::{bertpipe_env, chain, ort_lib, root, stderr};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn tiny() -> PathBuf {
    root().join("tests/fixtures/tiny-bert-cls")
}

/// What is in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn a_vocabulary_larger_than_the_models_embeddings_is_refused_before_anything_is_written() {
    let bert = root().join("data/vocab/bert-base-uncased.txt");
    let roberta = root().join("tests/fixtures/tokenizers/roberta/tokenizer.json");
    let tiny = tiny();
    for (vocab, tokens) in [(&bert, Some("30522 tokens")), (&roberta, None)] {
        let flag_sets: [&[&str]; 2] = [&["--verify"], &[]];
        for flags in flag_sets {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("model.onnx");
            let mut args = vec!["export", "onnx", "--checkpoint", p(&tiny), "--out", p(&out), "--vocab", p(vocab)];
            args.extend_from_slice(flags);
            let o = chain::bertpipe(&args, &[]);
            let err = stderr(&o);
            let case = format!("--vocab {} {flags:?}", vocab.display());
            assert!(!o.status.success(), "{case}: the export succeeded:\n{err}");
            assert!(err.contains("does not fit the model"), "{case}: {err}");
            assert!(err.contains(p(vocab)) && err.contains(p(&tiny)), "{case}: both files named: {err}");
            assert!(err.contains("120 rows"), "{case}: the model's size named: {err}");
            if let Some(tokens) = tokens {
                assert!(err.contains(tokens), "{case}: the vocabulary's size named: {err}");
            }
            assert!(!err.contains("index-select") && !err.contains("backtrace"), "{case}: a raw candle error: {err}");
            assert!(!out.exists(), "{case}: a model was left at --out");
            assert!(names(dir.path()).is_empty(), "{case}: the export left {:?}", names(dir.path()));
        }
    }
    // The model's own vocabulary (or one of its size) still exports and verifies.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.onnx");
    let own = tiny.join("vocab.txt");
    let o = chain::bertpipe(
        &["export", "onnx", "--checkpoint", p(&tiny), "--out", p(&out), "--vocab", p(&own), "--verify"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(names(dir.path()), ["model.onnx"], "only the model, no temporary");
}

#[test]
fn a_check_that_cannot_run_leaves_no_model_at_the_output() {
    // No ONNX Runtime: `--verify` cannot run, and nothing is exported (the runtime is found
    // first) — before, model.onnx was written and then the check failed.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.onnx");
    let o = bertpipe_env(
        &["export", "onnx", "--checkpoint", p(&tiny()), "--out", p(&out), "--verify"],
        &[("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so.1")],
    );
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("ORT_DYLIB_PATH"), "{}", stderr(&o));
    assert!(!out.exists() && names(dir.path()).is_empty(), "the export left {:?}", names(dir.path()));
}

#[test]
fn a_model_that_fails_verify_is_removed_and_a_staged_one_lands_only_on_commit() {
    let rt = runtime::init(Some(ort_lib())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.onnx");
    let opts = export::ExportSettings::default().options(tiny(), out.clone(), Vec::new());

    // Written aside: nothing at --out until the commit; dropped, nothing anywhere.
    let staged = export::stage(&opts).unwrap();
    let aside = staged.exported().path.clone();
    assert!(aside.is_file() && aside != out && !out.exists(), "{}", aside.display());
    drop(staged);
    assert!(names(dir.path()).is_empty(), "a dropped export left {:?}", names(dir.path()));
    let staged = export::stage(&opts).unwrap();
    verify::verify_export(rt, staged.exported()).unwrap();
    let done = staged.commit().unwrap();
    assert_eq!(done.path, out);
    assert_eq!(names(dir.path()), ["model.onnx"]);

    // A model that fails its check (the export of one checkpoint, checked against another's
    // weights) is removed, not left looking finished.
    let mut done = export::export(&opts).unwrap();
    done.model = export::load_classifier(&root().join("tests/fixtures/tiny-bert-narrow-cls")).unwrap();
    let err = verify::verify_export(rt, &done).unwrap_err();
    assert!(format!("{err:#}").contains("verification failed"), "{err:#}");
    assert!(!out.exists(), "a model that failed --verify was left at '{}'", out.display());
}

/// `export --max-len 0` (or 1, 2) wrote a model that `eval` and `predict` cannot feed (they send
/// at least `[CLS] token [SEP]`): refused, nothing written. `stats --leakage` refuses the flags it
/// would ignore (`--plot`, `--csv`, …) instead of accepting them.
#[test]
fn a_max_len_without_room_for_a_token_and_flags_leakage_ignores_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.onnx");
    for n in ["0", "2"] {
        let o = bertpipe_env(&["export", "onnx", "--checkpoint", p(&tiny()), "--out", p(&out), "--max-len", n], &[]);
        let err = stderr(&o);
        assert!(!o.status.success() && err.contains(&format!("max_len {n} leaves no room")), "{err}");
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }
    let sample = root().join("data/aclImdb-sample");
    for flag in [&["--plot", p(dir.path())][..], &["--csv"], &["--by", "label"]] {
        let mut args = vec!["stats", "--leakage", p(&sample), "--against", p(&sample)];
        args.extend_from_slice(flag);
        let o = bertpipe_env(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("cannot be used with"), "{flag:?}: {}", stderr(&o));
    }
}
