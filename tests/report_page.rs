//! `report.html` as a browser shows it: `stats --plot` writes a page that renders in headless
//! Chromium with every chart loaded and nothing wider than the page, also for a corpus built to
//! break it (markup in labels and texts, a 4,000-character word); the checker itself catches a
//! broken picture and a table wider than the page. The chain's page is checked by
//! `tests/experiment.rs`, `eval`'s by `tests/onnx.rs`.

mod common;

use common::browser;
use common::{assert_ok, bertpipe};

#[test]
fn the_checker_catches_a_broken_picture_and_a_page_wider_than_the_window() {
    let Some(chromium) = browser::chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("bad.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><main style=\"max-width:600px\">\
         <img alt=\"broken\" src=\"data:image/png;base64,AAAA\">\
         <table style=\"width:2000px\"><tr><td>wide</td></tr></table></main></body></html>",
    )
    .unwrap();
    let r = browser::render(&chromium, &page, 1280);
    assert_eq!(r.images, vec![("broken".to_string(), false)]);
    assert!(r.scroll_width > r.width, "{r:?}");
    assert!(r.overflow.iter().any(|o| o.starts_with("TABLE")), "{r:?}");
    let caught = std::panic::catch_unwind(|| r.assert_clean("bad.html"));
    assert!(caught.is_err());
    // The same table in a box that scrolls sideways (as the report puts wide tables) is inside.
    let page = dir.path().join("scrolls.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><main style=\"max-width:600px\"><div style=\"overflow-x:auto\">\
         <table style=\"width:2000px\"><tr><td>wide</td></tr></table></div></main></body></html>",
    )
    .unwrap();
    browser::render(&chromium, &page, 1280).assert_clean("scrolls.html");
}

#[test]
fn stats_plot_writes_a_page_with_every_chart_that_renders_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let o = bertpipe(&["stats", "pipelines/imdb.yaml", "--by", "label", "--quiet", "--plot", plots.to_str().unwrap()]);
    assert_ok(&o);
    let page = plots.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    // Every chart drawn is on the page, inlined.
    let pngs =
        std::fs::read_dir(&plots).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "png"));
    let charts = pngs.count();
    assert!(charts >= 4, "{charts} charts");
    assert_eq!(html.matches("src=\"data:image/png;base64,").count(), charts);
    assert!(html.contains("Statistics of pipeline `imdb`"), "{}", &html[..html.len().min(2000)]);
    assert!(html.contains("Splits and labels"));
    if let Some(r) = browser::check_page(&page, "stats-imdb-pipeline") {
        assert_eq!(r.images.len(), charts, "{r:?}");
    }
}

#[test]
fn a_corpus_made_to_break_the_page_is_shown_escaped_and_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("hostile.jsonl");
    let long_word = "a".repeat(4000);
    let mut lines = Vec::new();
    let long_label = format!("good&\"bad\"{}", "L".repeat(300));
    for i in 0..40 {
        let label = if i % 2 == 0 { "<script>alert(1)</script>" } else { long_label.as_str() };
        let text = format!(
            "Review {i}: </td></table><img src=x onerror=alert(1)> {long_word} and more words {}",
            "!!! ".repeat(i)
        );
        lines.push(serde_json::json!({"id": format!("r{i}<b>"), "text": text, "label": label}).to_string());
    }
    std::fs::write(&corpus, lines.join("\n") + "\n").unwrap();
    let plots = dir.path().join("plots");
    let o =
        bertpipe(&["stats", corpus.to_str().unwrap(), "--by", "label", "--quiet", "--plot", plots.to_str().unwrap()]);
    assert_ok(&o);
    let page = plots.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script>alert"), "a label's markup reached the page as markup");
    assert!(!html.contains("<img src=x"), "a text's markup reached the page as markup");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "the label is not shown");
    if let Some(r) = browser::check_page(&page, "stats-hostile-corpus") {
        assert!(r.images.iter().all(|(_, ok)| *ok));
        assert!(!r.images.is_empty());
    }
}
