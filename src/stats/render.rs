//! The report as a terminal table or as CSV.

use std::fmt::Write;

use super::report::{GroupStats, Report, Summary, SUMMARY_STATS};

/// A number in at most 8 characters: integers as is, others with 2–4 significant decimals.
fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x == x.trunc() && x.abs() < 1e9 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) if x.abs() >= 1.0 => format!("{x:.2}"),
        Some(x) => format!("{x:.4}"),
    }
}

/// `1 document`, `2,000 documents`.
fn count(n: u64, unit: &str) -> String {
    format!("{} {unit}{}", thousands(n), if n == 1 { "" } else { "s" })
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// `1234567` → `1,234,567`.
fn thousands(n: u64) -> String {
    indicatif::HumanCount(n).to_string()
}

/// Left-aligned first column, right-aligned others, two spaces apart.
fn table(rows: &[Vec<String>], indent: &str) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..n).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        out.push_str(indent);
        for (i, cell) in r.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            if i == 0 {
                out.push_str(cell);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str("  ");
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    out
}

fn summary_row(name: &str, s: &Summary) -> Vec<String> {
    let mut row = vec![name.to_string()];
    row.extend(s.values().iter().map(|v| num(*v)));
    row
}

fn group_block(r: &Report, g: &GroupStats, out: &mut String) {
    let unit = r.units();
    let title = if g.group == "all" {
        format!("all {}", count(g.documents, r.unit))
    } else {
        format!("{} = {}: {} {unit} ({})", r.by.unwrap_or("group"), g.group, thousands(g.documents), pct(g.share))
    };
    let _ = writeln!(out, "\n{title}");
    let mut rows = vec![std::iter::once(String::new()).chain(SUMMARY_STATS.iter().map(|s| s.to_string())).collect()];
    if let Some(s) = &g.chars {
        rows.push(summary_row("chars", s));
    }
    if let Some(s) = &g.words {
        rows.push(summary_row("words", s));
    }
    if let Some(s) = &g.tokens {
        rows.push(summary_row(if r.token_unit == Some("row") { "tokens/row" } else { "tokens" }, s));
    }
    if let Some(n) = &g.noise {
        for (name, s) in n.columns() {
            let label = if name == "noise_score" { "noise".to_string() } else { format!("  {}", &name[6..]) };
            rows.push(summary_row(&label, s));
        }
    }
    out.push_str(&table(&rows, "  "));
    if let Some(b) = &g.word_buckets {
        let parts: Vec<String> = b.iter().map(|b| format!("{} {}", b.range, pct(b.share))).collect();
        let _ = writeln!(out, "  words: {}", parts.join(" · "));
    }
    if let Some(t) = &g.truncation {
        // The manifest counts documents, whatever the rows are.
        let (from, unit) = if t.source == "manifest" { (" (from the manifest)", "documents") } else { ("", unit) };
        let _ = writeln!(
            out,
            "  max_len {}: {} {unit} ({}) longer than {} tokens; truncation drops {} tokens ({}){from}",
            t.max_len,
            thousands(t.documents_over),
            pct(t.share_over),
            t.limit,
            thousands(t.tokens_dropped),
            pct(t.tokens_dropped_share),
        );
    }
    let mut extra = Vec::new();
    if let Some(u) = g.unk_rate {
        extra.push(format!("[UNK] rate {:.3}%", 100.0 * u));
    }
    if let Some(d) = g.duplicates {
        extra.push(format!("exact duplicates {}", thousands(d)));
    }
    if !extra.is_empty() {
        let _ = writeln!(out, "  {}", extra.join(" · "));
    }
}

/// The readable report printed by default.
/// What was read and kept: `575 rows in the shards; the pipeline rejected 25 documents
/// (duplicate_of 11, max_noise 14)` for shards, `600 documents read, 575 kept, 25 rejected (…)`
/// for a pipeline or a source.
pub fn counts_line(r: &Report) -> String {
    let mut out = String::new();
    let d = &r.documents;
    let unit = r.units();
    if r.input.kind == "shards" {
        let _ = write!(out, "{} {unit} in the shards", thousands(d.kept));
        if d.rejected > 0 {
            let _ = write!(out, "; the pipeline rejected {} documents", thousands(d.rejected));
        }
    } else {
        let _ = write!(
            out,
            "{} read, {} kept, {} rejected",
            count(d.read, "document"),
            thousands(d.kept),
            thousands(d.rejected)
        );
    }
    if d.rejected > 0 {
        let parts: Vec<String> = d.rejected_by_reason.iter().map(|(k, v)| format!("{k} {}", thousands(*v))).collect();
        let _ = write!(out, " ({})", parts.join(", "));
    }
    out
}

pub fn to_table(r: &Report) -> String {
    let mut out = String::new();
    let i = &r.input;
    let name = i.name.as_deref().unwrap_or_default();
    let _ = match i.kind {
        "pipeline" => {
            writeln!(out, "{}: pipeline \"{name}\" ({} source), after its cleaning steps", i.path, i.source_type)
        }
        "shards" => writeln!(out, "{}: shards of pipeline \"{name}\" ({} source)", i.path, i.source_type),
        _ => writeln!(out, "{}: {} source, read as is", i.path, i.source_type),
    };
    let unit = r.units();
    out.push_str(&counts_line(r));
    out.push('\n');
    for (id, reason) in r.reject_examples.values() {
        let _ = writeln!(out, "  e.g. {id}: {reason}");
    }
    if r.reject_examples.contains_key("bad_label") && r.input.kind == "source" {
        let _ = writeln!(out, "  (string labels need a map: --set source.label_map='{{neg: 0, pos: 1}}')");
    }

    let mut rows = vec![vec!["split".to_string(), "label".into(), unit.into(), "share".into()]];
    for c in &r.counts {
        rows.push(vec![c.split.clone(), c.label.clone(), thousands(c.documents), pct(c.share)]);
    }
    let _ = writeln!(out);
    out.push_str(&table(&rows, "  "));
    if r.label_balance.len() > 1 {
        let parts: Vec<String> = r.label_balance.iter().map(|l| format!("{} {}", l.label, pct(l.share))).collect();
        let _ = writeln!(out, "  label balance: {}", parts.join(" · "));
    }
    for g in &r.groups {
        group_block(r, g, &mut out);
    }
    if r.noise_scored_by == Some("default") {
        let _ = writeln!(
            out,
            "\n  (noise scored with the default noise_score settings: the pipeline has no noise_score step)"
        );
    }
    if !r.noisiest.is_empty() {
        let with_text = r.noisiest.iter().any(|n| n.snippet.is_some());
        let note =
            if with_text { "" } else { " (no text in the input: keep it with `sink.keep_text: true` for snippets)" };
        let _ = writeln!(out, "\nnoisiest {}{note}:", r.noisiest.len());
        let mut rows = vec![vec!["score".to_string(), "id".into(), "label".into(), "snippet".into()]];
        for n in &r.noisiest {
            rows.push(vec![
                format!("{:.2}", n.noise_score),
                n.id.clone(),
                n.label.clone(),
                n.snippet.clone().unwrap_or_default(),
            ]);
        }
        // Left-align everything but the score: render by hand.
        let w_id = rows.iter().map(|r| r[1].chars().count()).max().unwrap_or(0);
        let w_label = rows.iter().map(|r| r[2].chars().count()).max().unwrap_or(0);
        for row in rows {
            let _ = writeln!(
                out,
                "  {:>7}  {:<w_id$}  {:<w_label$}  {}",
                row[0],
                row[1],
                row[2],
                row[3],
                w_id = w_id,
                w_label = w_label
            );
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Long-format CSV: `group,metric,stat,value`, one figure per line.
pub fn to_csv(r: &Report) -> String {
    let mut out = String::from("group,metric,stat,value\n");
    let mut line = |group: &str, metric: &str, stat: &str, value: String| {
        let _ = writeln!(out, "{},{},{},{}", csv_field(group), csv_field(metric), csv_field(stat), value);
    };
    let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
    line("all", "documents", "read", r.documents.read.to_string());
    line("all", "documents", "kept", r.documents.kept.to_string());
    line("all", "documents", "rejected", r.documents.rejected.to_string());
    for (reason, n) in &r.documents.rejected_by_reason {
        line("all", "rejected", reason, n.to_string());
    }
    for c in &r.counts {
        line("all", "count", &format!("{}/{}", c.split, c.label), c.documents.to_string());
    }
    for l in &r.label_balance {
        line("all", "label_share", &l.label, l.share.to_string());
    }
    for g in &r.groups {
        let name = g.group.as_str();
        line(name, "documents", "count", g.documents.to_string());
        line(name, "documents", "share", g.share.to_string());
        let mut summary = |metric: &str, s: &Summary| {
            line(name, metric, "count", s.count.to_string());
            for (stat, v) in SUMMARY_STATS.iter().zip(s.values()) {
                line(name, metric, stat, opt(v));
            }
        };
        if let Some(s) = &g.chars {
            summary("chars", s);
        }
        if let Some(s) = &g.words {
            summary("words", s);
        }
        if let Some(s) = &g.tokens {
            summary("tokens", s);
        }
        if let Some(n) = &g.noise {
            for (col, s) in n.columns() {
                summary(col, s);
            }
        }
        if let Some(b) = &g.word_buckets {
            for b in b {
                line(name, "word_bucket", &b.range, b.documents.to_string());
            }
        }
        if let Some(t) = &g.truncation {
            line(name, "truncation", "max_len", t.max_len.to_string());
            line(name, "truncation", "documents_over", t.documents_over.to_string());
            line(name, "truncation", "share_over", t.share_over.to_string());
            line(name, "truncation", "tokens_dropped", t.tokens_dropped.to_string());
        }
        if let Some(u) = g.unk_rate {
            line(name, "unk_rate", "value", u.to_string());
        }
        if let Some(d) = g.duplicates {
            line(name, "duplicates", "count", d.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(None), "-");
        assert_eq!(num(Some(174.0)), "174");
        assert_eq!(num(Some(1234.567)), "1234.6");
        assert_eq!(num(Some(5.4321)), "5.43");
        assert_eq!(num(Some(0.01234)), "0.0123");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }
}
