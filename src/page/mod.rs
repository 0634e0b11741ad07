//! `report.html`: the results as one self-contained page — every picture inlined as a PNG data
//! URI, the style sheet inline, no script and no request to anything outside the file — so it
//! opens offline in any browser, from a scheduler's scratch folder or an e-mail.
//!
//! [`Page`] holds the building blocks (headings, paragraphs, tables, a grid of figures), every
//! text escaped: ids, label names and review snippets come from the user's data. The sections
//! each command writes are built here from what that command leaves on disk (`metrics.json`,
//! `metrics.jsonl`, the charts), so a report of a chain whose stages were up to date shows them
//! as fully as one that ran them: [`stats_section`] (`stats --plot`, and every pipeline stage of
//! `bertpipe run`), [`eval_section`] (`eval`, an eval stage), [`train_section`] (a train stage).

use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine;
use serde_json::Value;

use crate::stats::report::{Report as StatsReport, Summary, SUMMARY_STATS};

/// The style sheet: readable on a laptop and a phone; figures never wider than the page, long
/// ids and snippets wrap, a table of many figures that cannot fit a phone scrolls sideways in
/// its own box (the page does not), figures in as many columns as fit.
const STYLE: &str = "
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif;
  color: #1d232b; background: #f6f7f9; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 24px 48px; }
h1, h2, h3 { overflow-wrap: anywhere; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 21px; margin: 34px 0 8px; padding-top: 12px; border-top: 2px solid #d8dde3; }
h3 { font-size: 17px; margin: 22px 0 6px; }
p, li { overflow-wrap: anywhere; }
.meta { color: #5b6673; margin: 0 0 6px; overflow-wrap: anywhere; }
.note { color: #5b6673; font-style: italic; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 13px; background: #e4e8ee; }
.badge.ran { background: #d5f0dc; } .badge.failed, .badge.interrupted { background: #f8d6d6; }
.badge.up-to-date { background: #dde8f7; }
.table { overflow-x: auto; margin: 6px 0 14px; }
table { border-collapse: collapse; width: 100%; background: #fff; font-size: 14px; }
th, td { border: 1px solid #dde2e8; padding: 4px 8px; text-align: left; vertical-align: top;
  overflow-wrap: break-word; }
td.long { overflow-wrap: anywhere; min-width: 14em; }
th { background: #eef1f5; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
nav { margin: 10px 0; overflow-wrap: anywhere; }
nav a { margin-right: 12px; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(440px, 100%), 1fr)); gap: 14px; }
figure { margin: 0; background: #fff; border: 1px solid #dde2e8; padding: 6px; min-width: 0; }
figure img { display: block; width: 100%; height: auto; }
figcaption { font-size: 13px; color: #5b6673; padding-top: 4px; overflow-wrap: anywhere; }
";

/// A picture for the page: PNG bytes and what it shows.
pub struct Image {
    pub caption: String,
    pub png: Vec<u8>,
    /// Pixel size, read from the PNG header (the page reserves the space before it decodes).
    size: (u32, u32),
}

impl Image {
    pub fn png(caption: impl Into<String>, png: Vec<u8>) -> Image {
        let size = png_size(&png).unwrap_or((960, 560));
        Image { caption: caption.into(), png, size }
    }

    /// A PNG file written by an earlier step; `None` when it is not there.
    pub fn from_file(caption: impl Into<String>, path: &Path) -> Result<Option<Image>> {
        match std::fs::read(path) {
            Ok(bytes) => {
                if png_size(&bytes).is_none() {
                    anyhow::bail!("'{}' is not a PNG picture", path.display());
                }
                Ok(Some(Image::png(caption, bytes)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("could not read '{}'", path.display())),
        }
    }
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(b: &[u8]) -> Option<(u32, u32)> {
    if b.len() < 24 || &b[..8] != b"\x89PNG\r\n\x1a\n" || &b[12..16] != b"IHDR" {
        return None;
    }
    let w = u32::from_be_bytes(b[16..20].try_into().ok()?);
    let h = u32::from_be_bytes(b[20..24].try_into().ok()?);
    (w > 0 && h > 0).then_some((w, h))
}

/// Text for an HTML text node or a double-quoted attribute.
pub fn esc(s: &str) -> String {
    html_escape::encode_double_quoted_attribute(s).into_owned()
}

/// An anchor from a heading: lower case letters, digits and dashes.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// A table cell: text, a number set right, or running text (a snippet, a review) that may
/// break anywhere so that one long word cannot widen its table.
pub enum Cell {
    Text(String),
    Num(String),
    Long(String),
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Text(s.to_string())
    }
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Text(s)
    }
}

/// A count with thousands separators: `12,500`.
pub fn count(n: u64) -> Cell {
    Cell::Num(indicatif::HumanCount(n).to_string())
}

/// A figure in at most four decimals (an integer as it is).
pub fn num(x: f64) -> Cell {
    Cell::Num(fmt_num(x))
}

/// A share as a percentage: `49.7%`.
pub fn pct(x: f64) -> Cell {
    Cell::Num(format!("{:.1}%", 100.0 * x))
}

pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    if x == x.trunc() && x.abs() < 1e15 {
        let n = indicatif::HumanCount(x.abs() as u64).to_string();
        return if x < 0.0 { format!("-{n}") } else { n };
    }
    if x.abs() < 1e-3 {
        // A learning rate, a p-value, a small share: its significant digits, not `0.0000`.
        return format!("{x:.3e}");
    }
    let s = if x.abs() >= 100.0 { format!("{x:.1}") } else { format!("{x:.4}") };
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A JSON value as a cell: numbers set right, strings as they are, the rest as JSON.
pub fn value(v: &Value) -> Cell {
    match v {
        Value::Null => Cell::Text("–".into()),
        Value::Number(n) => match n.as_u64() {
            Some(u) => count(u),
            None => num(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cell::Text(s.clone()),
        Value::Bool(b) => Cell::Text(b.to_string()),
        other => Cell::Text(other.to_string()),
    }
}

/// Characters past which a word in a table cell may break anywhere.
const LONG_WORD: usize = 24;

/// One page, built top to bottom.
pub struct Page {
    title: String,
    subtitle: Vec<String>,
    nav: Vec<(String, String)>,
    body: String,
}

impl Page {
    pub fn new(title: impl Into<String>) -> Page {
        Page { title: title.into(), subtitle: Vec::new(), nav: Vec::new(), body: String::new() }
    }

    /// A line under the title (what was read, where it was written).
    pub fn meta(&mut self, line: impl AsRef<str>) {
        self.subtitle.push(line.as_ref().to_string());
    }

    /// A section heading, listed in the page's contents.
    pub fn section(&mut self, title: &str) {
        let mut id = slug(title);
        if id.is_empty() || self.nav.iter().any(|(i, _)| *i == id) {
            id = format!("s{}-{id}", self.nav.len() + 1);
        }
        let _ = writeln!(self.body, "<h2 id=\"{}\">{}</h2>", esc(&id), esc(title));
        self.nav.push((id, title.to_string()));
    }

    pub fn heading(&mut self, title: &str) {
        let _ = writeln!(self.body, "<h3>{}</h3>", esc(title));
    }

    pub fn paragraph(&mut self, text: &str) {
        let _ = writeln!(self.body, "<p>{}</p>", esc(text));
    }

    pub fn note(&mut self, text: &str) {
        let _ = writeln!(self.body, "<p class=\"note\">{}</p>", esc(text));
    }

    /// A run status as a coloured badge and a reason after it.
    pub fn status(&mut self, status: &str, reason: &str) {
        let _ = writeln!(
            self.body,
            "<p><span class=\"badge {}\">{}</span> {}</p>",
            esc(&slug(status)),
            esc(status),
            esc(reason)
        );
    }

    /// A table; rows shorter than the header are padded with empty cells.
    pub fn table(&mut self, header: &[&str], rows: Vec<Vec<Cell>>) {
        if rows.is_empty() {
            return;
        }
        self.body.push_str("<div class=\"table\"><table><thead><tr>");
        for h in header {
            let _ = write!(self.body, "<th>{}</th>", esc(h));
        }
        self.body.push_str("</tr></thead><tbody>\n");
        for row in rows {
            self.body.push_str("<tr>");
            let n = row.len();
            for cell in row {
                match cell {
                    // A word too long to stand whole (a label of 300 letters) may break anywhere,
                    // so that it cannot widen its table; short words never break.
                    Cell::Text(t) if t.split_whitespace().any(|w| w.chars().count() > LONG_WORD) => {
                        let _ = write!(self.body, "<td class=\"long\">{}</td>", esc(&t));
                    }
                    Cell::Text(t) => {
                        let _ = write!(self.body, "<td>{}</td>", esc(&t));
                    }
                    Cell::Num(t) => {
                        let _ = write!(self.body, "<td class=\"n\">{}</td>", esc(&t));
                    }
                    Cell::Long(t) => {
                        let _ = write!(self.body, "<td class=\"long\">{}</td>", esc(&t));
                    }
                }
            }
            for _ in n..header.len() {
                self.body.push_str("<td></td>");
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</tbody></table></div>\n");
    }

    /// Name–value pairs as a two-column table.
    pub fn pairs(&mut self, pairs: Vec<(String, Cell)>) {
        let rows = pairs.into_iter().map(|(k, v)| vec![Cell::Text(k), v]).collect();
        self.table(&["", "value"], rows);
    }

    /// Pictures side by side, as many to a row as fit.
    pub fn figures(&mut self, images: Vec<Image>) {
        if images.is_empty() {
            return;
        }
        self.body.push_str("<div class=\"figures\">\n");
        let b64 = base64::engine::general_purpose::STANDARD;
        for im in images {
            let _ = writeln!(
                self.body,
                "<figure><img alt=\"{alt}\" width=\"{w}\" height=\"{h}\" src=\"data:image/png;base64,{data}\"><figcaption>{alt}</figcaption></figure>",
                alt = esc(&im.caption),
                w = im.size.0,
                h = im.size.1,
                data = b64.encode(&im.png)
            );
        }
        self.body.push_str("</div>\n");
    }

    /// The whole document.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(self.body.len() + 4096);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta name=\"generator\" content=\"bertpipe {}\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n<h1>{}</h1>\n",
            env!("CARGO_PKG_VERSION"),
            esc(&self.title),
            esc(&self.title)
        );
        for line in &self.subtitle {
            let _ = writeln!(out, "<p class=\"meta\">{}</p>", esc(line));
        }
        if self.nav.len() > 1 {
            out.push_str("<nav>");
            for (id, title) in &self.nav {
                let _ = write!(out, "<a href=\"#{}\">{}</a>", esc(id), esc(title));
            }
            out.push_str("</nav>\n");
        }
        out.push_str(&self.body);
        out.push_str("</main>\n</body>\n</html>\n");
        out
    }

    /// Writes the page to `path` (atomically: a reader never sees half a page).
    pub fn write(&self, path: &Path) -> Result<()> {
        crate::contract::write_file_atomic(path, self.render().as_bytes())
    }
}

fn summary_cells(name: &str, s: &Summary) -> Vec<Cell> {
    let mut row = vec![Cell::Text(name.to_string())];
    row.extend(s.values().iter().map(|v| match v {
        Some(x) => num(*x),
        None => Cell::Text("–".into()),
    }));
    row
}

/// The stems of the charts `stats` draws ([`crate::stats::plot`]), with what each shows.
const STATS_CHARTS: [(&str, &str); 4] = [
    ("words", "Length in words, with the median and p95"),
    ("tokens", "Length in WordPiece tokens, with max_len"),
    ("noise", "Noise score; the noisiest 5% lie past the p95 line"),
    ("labels", "Documents per split and label"),
];

/// The charts of a stats report drawn in memory ([`crate::stats::plot::pngs`]), captioned.
pub fn stats_images(pngs: Vec<(&'static str, Vec<u8>)>) -> Vec<Image> {
    let caption = |stem: &str| STATS_CHARTS.iter().find(|(s, _)| *s == stem).map_or(stem, |(_, c)| *c).to_string();
    pngs.into_iter().map(|(stem, png)| Image::png(caption(stem), png)).collect()
}

/// The charts `stats --plot DIR` wrote into `dir`, captioned.
pub fn stats_images_in(dir: &Path) -> Result<Vec<Image>> {
    let mut images = Vec::new();
    for (stem, caption) in STATS_CHARTS {
        images.extend(Image::from_file(caption, &dir.join(format!("{stem}.png")))?);
    }
    Ok(images)
}

/// The name of the page each command writes (`eval`'s OUT, `stats --plot`'s DIR, `run`'s OUT).
pub const REPORT_PAGE: &str = "report.html";

/// `stats --plot DIR`: the report and the charts just drawn, as `DIR/report.html`.
pub fn write_stats_page(r: &StatsReport, path: &Path, charts: Vec<Image>) -> Result<()> {
    let what = match &r.input.name {
        Some(name) => format!("{} `{name}`", r.input.kind),
        None => r.input.kind.to_string(),
    };
    let mut page = Page::new(format!("Statistics of {what}"));
    page.meta(format!("{} ({} source)", r.input.path, r.input.source_type));
    stats_section(&mut page, r, charts);
    page.write(path)
}

/// A `stats` report: counts, label balance, the length / token / noise summaries, truncation,
/// the noisiest documents, and its charts.
pub fn stats_section(page: &mut Page, r: &StatsReport, charts: Vec<Image>) {
    let units = r.units();
    page.paragraph(&crate::stats::render::counts_line(r));
    page.figures(charts);
    if !r.counts.is_empty() {
        page.heading("Splits and labels");
        let rows = r
            .counts
            .iter()
            .map(|c| vec![c.split.as_str().into(), c.label.as_str().into(), count(c.documents), pct(c.share)])
            .collect();
        page.table(&["split", "label", units, "share"], rows);
        if !r.label_balance.is_empty() {
            let balance: Vec<String> =
                r.label_balance.iter().map(|l| format!("{} {:.1}%", l.label, 100.0 * l.share)).collect();
            page.paragraph(&format!("Label balance: {}", balance.join(" · ")));
        }
    }
    let mut header = vec!["group / metric"];
    header.extend(SUMMARY_STATS.iter().copied());
    for g in &r.groups {
        page.heading(&format!("{} — {} {units} ({:.1}%)", g.group, fmt_num(g.documents as f64), 100.0 * g.share));
        let mut rows = Vec::new();
        for (name, s) in [("chars", &g.chars), ("words", &g.words), ("tokens", &g.tokens)] {
            if let Some(s) = s {
                rows.push(summary_cells(name, s));
            }
        }
        if let Some(n) = &g.noise {
            for (col, s) in n.columns() {
                rows.push(summary_cells(col, s));
            }
        }
        page.table(&header, rows);
        let mut notes = Vec::new();
        if let Some(t) = &g.truncation {
            notes.push(format!(
                "max_len {}: {} {units} ({:.1}%) longer; truncation drops {} tokens",
                t.max_len,
                fmt_num(t.documents_over as f64),
                100.0 * t.share_over,
                fmt_num(t.tokens_dropped as f64)
            ));
        }
        if let Some(u) = g.unk_rate {
            notes.push(format!("[UNK] rate {:.3}%", 100.0 * u));
        }
        if let Some(dups) = g.duplicates {
            notes.push(format!("{} exact duplicates", fmt_num(dups as f64)));
        }
        if !notes.is_empty() {
            page.paragraph(&notes.join(" · "));
        }
    }
    if !r.noisiest.is_empty() {
        page.heading("Noisiest");
        let rows = r
            .noisiest
            .iter()
            .map(|n| {
                vec![
                    num(n.noise_score),
                    n.id.as_str().into(),
                    n.split.as_str().into(),
                    n.label.as_str().into(),
                    Cell::Long(n.snippet.clone().unwrap_or_default()),
                ]
            })
            .collect();
        page.table(&["score", "id", "split", "label", "snippet"], rows);
    }
}

/// The scalar entries of a JSON object as name–value pairs, in its order.
fn scalars(v: &Value, keys: Option<&[&str]>) -> Vec<(String, Cell)> {
    let Some(obj) = v.as_object() else { return Vec::new() };
    obj.iter()
        .filter(|(k, v)| keys.is_none_or(|ks| ks.contains(&k.as_str())) && !v.is_object() && !v.is_array())
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), value(v)))
        .collect()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn f64_of(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// Per-class precision, recall, F1 and support (`metrics.per_class`, `eval_per_class`).
fn per_class(page: &mut Page, classes: &Value) {
    let Some(classes) = classes.as_array() else { return };
    let rows = classes
        .iter()
        .map(|c| {
            vec![
                str_of(c, "label").into(),
                value(&c["precision"]),
                value(&c["recall"]),
                value(&c["f1"]),
                value(&c["support"]),
            ]
        })
        .collect();
    page.table(&["label", "precision", "recall", "F1", "support"], rows);
}

/// Slices (`by_length`, `by_noise`): bucket, examples, and its figures.
fn slice_table(page: &mut Page, title: &str, slices: Option<&Value>) {
    let Some(rows) = slices.and_then(Value::as_array).filter(|a| !a.is_empty()) else { return };
    page.heading(title);
    let rows = rows
        .iter()
        .map(|s| vec![str_of(s, "bucket").into(), value(&s["examples"]), value(&s["accuracy"]), value(&s["f1"])])
        .collect();
    page.table(&["slice", "examples", "accuracy", "F1"], rows);
}

/// An evaluation (`metrics.json` of `eval` or an eval stage, read as JSON so a report of an
/// earlier run reads the same) with the pictures beside it in `dir`.
pub fn eval_section(page: &mut Page, m: &Value, dir: &Path) -> Result<()> {
    page.paragraph(&format!(
        "{} rows ({} documents) of split `{}` of {} — {} model `{}` on {} (ONNX Runtime {})",
        fmt_num(f64_of(m, "rows")),
        fmt_num(f64_of(m, "documents")),
        str_of(m, "split"),
        str_of(m, "data"),
        str_of(m, "precision"),
        str_of(m, "model"),
        str_of(m, "provider"),
        str_of(m, "onnxruntime"),
    ));
    let mut headline = scalars(&m["metrics"], None);
    if let Some(dm) = m.get("document_metrics").filter(|v| v.is_object()) {
        headline.extend(scalars(dm, None).into_iter().map(|(k, v)| (format!("per document: {k}"), v)));
    }
    page.pairs(headline);
    let mut images = Vec::new();
    for (stem, caption) in [
        ("confusion", "Confusion matrix (rows: true label)"),
        ("roc", "ROC curve"),
        ("calibration", "Reliability diagram: accuracy against confidence"),
    ] {
        images.extend(Image::from_file(caption, &dir.join(format!("{stem}.png")))?);
    }
    page.figures(images);
    if m["metrics"].get("per_class").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        page.heading("Per class");
        per_class(page, &m["metrics"]["per_class"]);
    }
    slice_table(page, "By length (tokens)", m.get("by_length"));
    slice_table(page, "By noise score", m.get("by_noise"));
    if let Some(cal) = m.get("calibration").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        page.heading("Calibration");
        let rows =
            cal.iter().map(|b| vec![value(&b["confidence"]), value(&b["accuracy"]), value(&b["examples"])]).collect();
        page.table(&["mean confidence", "accuracy", "examples"], rows);
    }
    if let Some(l) = m.get("leakage").filter(|v| v.is_object()) {
        page.heading("Leakage");
        let against: Vec<&str> =
            l["against"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        page.paragraph(&format!(
            "{:.2}% of the documents ({} of {}) repeat {}: {} exact, {} near (Jaccard ≥ {})",
            100.0 * f64_of(l, "share"),
            fmt_num(f64_of(l, "leaked")),
            fmt_num(f64_of(l, "documents")),
            if against.is_empty() { "the training splits".to_string() } else { against.join(", ") },
            fmt_num(f64_of(l, "exact")),
            fmt_num(f64_of(l, "near")),
            f64_of(l, "threshold"),
        ));
        if let Some(clean) = l.get("clean").and_then(|c| c.get("metrics")) {
            page.pairs(
                scalars(clean, Some(&["accuracy", "f1", "loss"]))
                    .into_iter()
                    .map(|(k, v)| (format!("clean documents: {k}"), v))
                    .collect(),
            );
        }
    }
    if let Some(mistakes) = m.get("mistakes").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        page.heading("Most confident mistakes");
        let rows = mistakes
            .iter()
            .map(|x| {
                vec![
                    str_of(x, "id").into(),
                    str_of(x, "label").into(),
                    str_of(x, "predicted").into(),
                    value(&x["confidence"]),
                    Cell::Long(str_of(x, "text").to_string()),
                ]
            })
            .collect();
        page.table(&["id", "label", "predicted", "confidence", "text"], rows);
        if mistakes.iter().all(|x| x.get("text").is_none()) {
            page.note("No texts: the shards do not keep them (set `sink.keep_text: true` in the pipeline).");
        }
    }
    let nonfinite = m["nonfinite"]["rows"].as_u64().unwrap_or(0);
    if nonfinite > 0 {
        page.status("failed", &format!("{nonfinite} rows gave NaN or infinite logits (left out of the metrics)"));
    }
    if let Some(g) = m.get("gate").filter(|v| v.is_object()) {
        gate_section(page, g);
    }
    if let Some(t) = m.get("throughput").filter(|v| v.is_object()) {
        page.heading("Throughput");
        page.pairs(scalars(t, None));
    }
    Ok(())
}

/// The gate against a baseline: the verdict, what changed, the flipped predictions.
fn gate_section(page: &mut Page, g: &Value) {
    page.heading(&format!("Against the baseline {}", str_of(g, "baseline")));
    let passed = g["passed"].as_bool().unwrap_or(false);
    page.status(
        if passed { "passed" } else { "failed" },
        &format!(
            "{:+.2} accuracy points lost on {} (95% CI {:.2} to {:.2}; allowed {}; McNemar p = {:.4}, rule {})",
            f64_of(g, "drop"),
            str_of(g, "level"),
            g["drop_ci95"][0].as_f64().unwrap_or(f64::NAN),
            g["drop_ci95"][1].as_f64().unwrap_or(f64::NAN),
            f64_of(g, "max_drop"),
            f64_of(g, "mcnemar_p"),
            str_of(g, "rule"),
        ),
    );
    let mut rows = Vec::new();
    for key in ["accuracy", "f1", "loss", "document_accuracy"] {
        if let Some(c) = g.get(key).filter(|v| v.is_object()) {
            rows.push(vec![key.into(), value(&c["baseline"]), value(&c["model"]), value(&c["change"])]);
        }
    }
    rows.push(vec![
        "docs/s".into(),
        value(&g["baseline_docs_per_second"]),
        value(&g["docs_per_second"]),
        Cell::Num(format!("×{:.2}", f64_of(g, "speedup"))),
    ]);
    page.table(&["", "baseline", "model", "change"], rows);
    page.paragraph(&format!(
        "Agreement {:.2}% of {} rows; {} flipped; largest probability shift {:.4} (mean {:.4})",
        100.0 * f64_of(g, "agreement"),
        fmt_num(f64_of(g, "rows")),
        fmt_num(f64_of(g, "flipped")),
        f64_of(g, "max_probability_shift"),
        f64_of(g, "mean_probability_shift"),
    ));
    if let Some(flips) = g.get("flips").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        page.heading("Flipped predictions (most confident first)");
        let rows = flips
            .iter()
            .map(|f| {
                vec![
                    str_of(f, "id").into(),
                    str_of(f, "label").into(),
                    format!("{} ({:.3})", str_of(f, "baseline_prediction"), f64_of(f, "baseline_confidence")).into(),
                    format!("{} ({:.3})", str_of(f, "prediction"), f64_of(f, "confidence")).into(),
                    Cell::Long(str_of(f, "text").to_string()),
                ]
            })
            .collect();
        page.table(&["id", "label", "baseline", "model", "text"], rows);
    }
}

/// A training run's folder: its last logged figures and evaluation, and the curves it drew.
pub fn train_section(page: &mut Page, dir: &Path) -> Result<()> {
    let log = dir.join("metrics.jsonl");
    let mut last_train: Option<Value> = None;
    let mut last_eval: Option<Value> = None;
    let mut evals = 0usize;
    match std::fs::read_to_string(&log) {
        Ok(text) => {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
                if v.get("eval_loss").is_some() || v.get("split").is_some() {
                    evals += 1;
                    last_eval = Some(v);
                } else if v.get("loss").is_some() {
                    last_train = Some(v);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            page.note(&format!("No training log ('{}' is not there).", log.display()));
        }
        Err(e) => return Err(e).with_context(|| format!("could not read '{}'", log.display())),
    }
    let mut images = Vec::new();
    for (stem, caption) in [("loss", "Training and evaluation loss"), ("eval", "Evaluation metrics")] {
        images.extend(Image::from_file(caption, &dir.join("plots").join(format!("{stem}.png")))?);
    }
    if images.is_empty() {
        page.note(&format!("No curves: '{}' holds no loss.png or eval.png.", dir.join("plots").display()));
    }
    page.figures(images);
    if let Some(t) = &last_train {
        page.heading("Last logged step");
        page.pairs(scalars(t, None));
    }
    if let Some(e) = &last_eval {
        page.heading(&format!("Last evaluation (of {evals})"));
        page.pairs(scalars(e, None));
        per_class(page, &e["eval_per_class"]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_the_data_is_escaped_everywhere() {
        let mut p = Page::new("<script>alert(1)</script>");
        p.meta("a \"quoted\" & <b>bold</b> line");
        p.section("Stage <x>");
        p.table(&["id"], vec![vec![Cell::Text("<img src=x onerror=alert(1)>".into())]]);
        p.figures(vec![Image::png("caption \"<b>\"", PNG_1X1.to_vec())]);
        let html = p.render();
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("<img src=x"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
        assert!(html.contains("&lt;script&gt;"));
        assert!(html.contains("alt=\"caption &quot;&lt;b&gt;&quot;\""));
    }

    #[test]
    fn the_page_needs_nothing_outside_itself() {
        let mut p = Page::new("t");
        p.figures(vec![Image::png("one", PNG_1X1.to_vec())]);
        let html = p.render();
        assert!(html.contains("src=\"data:image/png;base64,iVBORw0KGgo"), "{html}");
        for outside in ["http://", "https://", "<script", "<link", "url("] {
            assert!(!html.contains(outside), "{outside} in {html}");
        }
        assert!(html.contains("width=\"1\" height=\"1\""));
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(fmt_num(12500.0), "12,500");
        assert_eq!(fmt_num(-3.0), "-3");
        assert_eq!(fmt_num(0.99649), "0.9965");
        assert_eq!(fmt_num(45438.7367), "45438.7");
        assert_eq!(fmt_num(88.5), "88.5");
        assert_eq!(fmt_num(11.5), "11.5");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(2e-5), "2.000e-5");
        assert_eq!(fmt_num(-0.00012), "-1.200e-4");
        assert_eq!(slug("Stage `data` (pipeline)"), "stage-data-pipeline");
    }

    #[test]
    fn a_file_that_is_not_a_png_is_an_error_naming_it_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("roc.png");
        std::fs::write(&bad, "<svg/>").unwrap();
        let e = Image::from_file("x", &bad).err().unwrap();
        assert!(e.to_string().contains("roc.png"), "{e}");
        assert!(Image::from_file("x", &dir.path().join("none.png")).unwrap().is_none());
    }

    /// A 1×1 white PNG.
    const PNG_1X1: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53, 0xde, 0x00, 0x00, 0x00,
        0x0c, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0xf8, 0xff, 0xff, 0x3f, 0x00, 0x05, 0xfe, 0x02, 0xfe, 0xdc,
        0xcc, 0x59, 0xe7, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
}
