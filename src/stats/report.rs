//! Aggregation with polars: the per-document table becomes the report (counts, distributions,
//! buckets, truncation, noise, duplicates) and the histograms the charts draw.
//!
//! Quantiles use linear interpolation between the closest ranks — numpy's and pandas' default,
//! polars' `QuantileMethod::Linear`: for sorted values `x[0..n]` and probability `p`, with
//! `h = (n − 1)·p`, `q = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`. The standard deviation is the
//! sample one (ddof = 1, as pandas' `describe`), absent for fewer than two values.

use std::collections::BTreeMap;

use anyhow::Result;
use polars::prelude::*;
use serde::Serialize;

use super::collect::{Collected, InputInfo, LabelNames};
use super::table::NoisyDoc;
use crate::contract::document::NoiseComponents;
use crate::contract::manifest::TokenStats;

pub const FORMAT: &str = "bertpipe-stats/1";

/// The statistics of one column within one group. `None` (JSON `null`) where undefined: every
/// field for an empty group, `std` for fewer than two values.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub min: Option<f64>,
    pub p5: Option<f64>,
    pub p25: Option<f64>,
    pub median: Option<f64>,
    pub mean: Option<f64>,
    pub p75: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    pub std: Option<f64>,
}

/// The statistics' names, in [`Summary`] field order after `count`.
pub const SUMMARY_STATS: [&str; 10] = ["min", "p5", "p25", "median", "mean", "p75", "p95", "p99", "max", "std"];
const QUANTILES: [(&str, f64); 6] =
    [("p5", 0.05), ("p25", 0.25), ("median", 0.5), ("p75", 0.75), ("p95", 0.95), ("p99", 0.99)];

impl Summary {
    pub fn values(&self) -> [Option<f64>; 10] {
        [self.min, self.p5, self.p25, self.median, self.mean, self.p75, self.p95, self.p99, self.max, self.std]
    }
}

/// Word-count buckets from their edges: `<e1`, `e1-(e2−1)`, …, `>=en`, each `[min, max)`.
fn word_buckets(edges: &[u32]) -> Vec<(String, u32, Option<u32>)> {
    let mut out = Vec::new();
    let mut lo = 0;
    for &e in edges {
        let label = if lo == 0 { format!("<{e}") } else { format!("{lo}-{}", e - 1) };
        out.push((label, lo, Some(e)));
        lo = e;
    }
    out.push((format!(">={lo}"), lo, None));
    out
}

/// Default bucket edges from the data: the quartiles of the word counts (p25, median, p75,
/// the report's linear quantiles), rounded to two significant digits (174 → 170), so each
/// bucket holds about a quarter of any corpus — tweets or books alike. Empty when there is
/// nothing to split.
pub fn quartile_edges(words: &mut [f32]) -> Vec<u32> {
    if words.is_empty() {
        return Vec::new();
    }
    words.sort_by(f32::total_cmp);
    let mut edges: Vec<u32> = [0.25, 0.5, 0.75]
        .into_iter()
        .map(|q| two_significant(crate::clean::filter::quantile_linear(words, q) as f64))
        .filter(|&e| e > 0)
        .collect();
    edges.dedup();
    edges
}

fn two_significant(x: f64) -> u32 {
    if x < 100.0 {
        return x.round() as u32;
    }
    let scale = 10f64.powi(x.log10().floor() as i32 - 1);
    ((x / scale).round() * scale) as u32
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Bucket {
    pub range: String,
    pub documents: u64,
    pub share: f64,
}

/// What truncation to `max_len` does: documents longer than `limit = max_len − 2` (room for
/// [CLS] and [SEP]) and the tokens cut from them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TruncationFigures {
    pub max_len: u32,
    pub limit: u32,
    pub documents_over: u64,
    pub share_over: f64,
    pub tokens_dropped: u64,
    /// Dropped tokens over all tokens of the group.
    pub tokens_dropped_share: f64,
    /// `computed` from the token counts, or `manifest` (shards hold rows already cut).
    pub source: &'static str,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NoiseStats {
    pub score: Summary,
    pub sent_len_std: Summary,
    pub punct_ratio: Summary,
    pub caps_ratio: Summary,
    pub repeat_ratio: Summary,
    pub mojibake_ratio: Summary,
}

impl NoiseStats {
    /// `(shard column, summary)` in shard column order.
    pub fn columns(&self) -> [(&'static str, &Summary); 6] {
        let c = NoiseComponents::COLUMNS;
        [
            (c[0], &self.score),
            (c[1], &self.sent_len_std),
            (c[2], &self.punct_ratio),
            (c[3], &self.caps_ratio),
            (c[4], &self.repeat_ratio),
            (c[5], &self.mojibake_ratio),
        ]
    }
}

/// Statistics of one group of documents: `all`, or one split / label with `--by`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupStats {
    pub group: String,
    pub documents: u64,
    /// Of all documents kept.
    pub share: f64,
    pub chars: Option<Summary>,
    pub words: Option<Summary>,
    pub word_buckets: Option<Vec<Bucket>>,
    pub tokens: Option<Summary>,
    pub truncation: Option<TruncationFigures>,
    pub noise: Option<NoiseStats>,
    pub unk_rate: Option<f64>,
    /// Documents whose text equals an earlier document's (first occurrence not counted).
    pub duplicates: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CountRow {
    pub split: String,
    pub label: String,
    pub documents: u64,
    pub share: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LabelShare {
    pub label: String,
    pub documents: u64,
    pub share: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DocCounts {
    pub read: u64,
    pub kept: u64,
    pub rejected: u64,
    pub rejected_by_reason: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NoisyOut {
    pub id: String,
    pub split: String,
    pub label: String,
    pub noise_score: f64,
    pub snippet: Option<String>,
}

/// A histogram: `bins` equal bins from 0; values at or past the end count in the last bin.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub metric: &'static str,
    pub width: f64,
    pub bins: usize,
    /// One series per group (`all` without `--by`), counts per bin.
    pub series: Vec<(String, Vec<u64>)>,
    /// Values at or past `width × bins`, per series (already inside the last bin).
    pub overflow: Vec<u64>,
}

impl Histogram {
    pub fn end(&self) -> f64 {
        self.width * self.bins as f64
    }
}

/// The whole report. Keys are stable; see docs/statistics.md.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub format: &'static str,
    pub input: InputInfo,
    /// `document`, or `row` for shards.
    pub unit: &'static str,
    /// `document` (all WordPiece tokens of a document, no specials) or `row` (a shard row's
    /// length, specials included); absent when nothing was tokenized.
    pub token_unit: Option<&'static str>,
    pub by: Option<&'static str>,
    pub max_len: u32,
    pub documents: DocCounts,
    pub counts: Vec<CountRow>,
    pub label_balance: Vec<LabelShare>,
    /// `pipeline`, or `default` when stats scored the text with default `noise_score` settings.
    pub noise_scored_by: Option<&'static str>,
    pub groups: Vec<GroupStats>,
    pub noisiest: Vec<NoisyOut>,
    #[serde(skip)]
    pub histograms: Vec<Histogram>,
    /// The first rejected document of each reason (id, full reason), for the table.
    #[serde(skip)]
    pub reject_examples: BTreeMap<String, (String, String)>,
}

impl Report {
    /// What is counted, in the plural: `documents`, or `rows` for shards.
    pub fn units(&self) -> &'static str {
        if self.unit == "row" {
            "rows"
        } else {
            "documents"
        }
    }
}

/// Grouping for `--by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    Label,
    Split,
}

impl By {
    pub fn name(self) -> &'static str {
        match self {
            By::Label => "label",
            By::Split => "split",
        }
    }
}

fn f64_col(df: &DataFrame, name: &str) -> PolarsResult<Vec<Option<f64>>> {
    Ok(df.column(name)?.cast(&DataType::Float64)?.f64()?.iter().collect())
}

/// The results of several aggregation queries over the same groups, rows in the same order.
struct Frames(Vec<DataFrame>);

impl Frames {
    /// Runs each query over all documents (one row) or per `key` (one row per group, sorted by
    /// key). One query per metric keeps only that metric's temporaries (a float copy, the sorts
    /// behind its quantiles) alive at a time.
    fn aggregate(df: &DataFrame, key: Option<&str>, queries: Vec<Vec<Expr>>) -> PolarsResult<Frames> {
        let mut frames = Vec::new();
        for exprs in queries {
            let lf = df.clone().lazy();
            let lf = match key {
                None => lf.select(exprs),
                Some(k) => lf.group_by([col(k)]).agg(exprs).sort([k], SortMultipleOptions::default()),
            };
            frames.push(lf.collect()?);
        }
        Ok(Frames(frames))
    }

    fn col(&self, name: &str) -> PolarsResult<Vec<Option<f64>>> {
        let df = self.0.iter().find(|f| f.schema().contains(name)).unwrap_or(&self.0[0]);
        f64_col(df, name)
    }
}

/// Expressions for a [`Summary`] of `m`, named `m|count`, `m|min`, …
fn summary_exprs(m: &str) -> Vec<Expr> {
    let x = || col(m);
    let mut e =
        vec![x().count().cast(DataType::Float64).alias(format!("{m}|count")), x().min().alias(format!("{m}|min"))];
    for (name, p) in QUANTILES {
        e.push(x().quantile(lit(p), QuantileMethod::Linear).alias(format!("{m}|{name}")));
    }
    e.push(x().mean().alias(format!("{m}|mean")));
    e.push(x().max().alias(format!("{m}|max")));
    e.push(x().std(1).alias(format!("{m}|std")));
    e
}

fn read_summary(f: &Frames, row: usize, m: &str) -> PolarsResult<Summary> {
    let v = |s: &str| -> PolarsResult<Option<f64>> { Ok(f.col(&format!("{m}|{s}"))?[row]) };
    let count = v("count")?.unwrap_or(0.0) as u64;
    let s = Summary {
        count,
        min: v("min")?,
        p5: v("p5")?,
        p25: v("p25")?,
        median: v("median")?,
        mean: v("mean")?,
        p75: v("p75")?,
        p95: v("p95")?,
        p99: v("p99")?,
        max: v("max")?,
        std: v("std")?,
    };
    // polars gives NaN, not null, for some empty aggregates; the report says null.
    let clean = |x: Option<f64>| x.filter(|v| v.is_finite());
    Ok(Summary {
        min: clean(s.min),
        p5: clean(s.p5),
        p25: clean(s.p25),
        median: clean(s.median),
        mean: clean(s.mean),
        p75: clean(s.p75),
        p95: clean(s.p95),
        p99: clean(s.p99),
        max: clean(s.max),
        std: clean(s.std),
        ..s
    })
}

/// Everything aggregated per group, as queries: counts first, then one per summarised metric.
fn group_queries(c: &Collected, limit: u32, buckets: &[(String, u32, Option<u32>)]) -> Vec<Vec<Expr>> {
    let cols = c.table.columns;
    let mut counts = vec![len().cast(DataType::Float64).alias("documents")];
    let mut metrics: Vec<&str> = Vec::new();
    if cols.text {
        metrics.extend(["chars", "words"]);
        for (i, (_, lo, hi)) in buckets.iter().enumerate() {
            let mut cond = col("words").gt_eq(lit(*lo));
            if let Some(hi) = hi {
                cond = cond.and(col("words").lt(lit(*hi)));
            }
            counts.push(cond.sum().cast(DataType::Float64).alias(format!("bucket|{i}")));
        }
        counts.push(col("duplicate").sum().cast(DataType::Float64).alias("duplicates"));
    }
    if cols.tokens {
        metrics.push("tokens");
        let tokens = || col("tokens").cast(DataType::Int64);
        counts.push(tokens().sum().cast(DataType::Float64).alias("tokens|sum"));
        counts.push(tokens().gt(lit(limit as i64)).sum().cast(DataType::Float64).alias("trunc|over"));
        counts.push(
            when(tokens().gt(lit(limit as i64)))
                .then(tokens() - lit(limit as i64))
                .otherwise(lit(0i64))
                .sum()
                .cast(DataType::Float64)
                .alias("trunc|dropped"),
        );
    }
    if cols.unk {
        counts.push(col("unk").cast(DataType::Float64).sum().alias("unk|sum"));
    }
    if cols.noise {
        metrics.extend(NoiseComponents::COLUMNS);
    }
    std::iter::once(counts).chain(metrics.into_iter().map(summary_exprs)).collect()
}

fn read_group(
    c: &Collected,
    df: &Frames,
    row: usize,
    group: String,
    total: u64,
    max_len: u32,
    word_buckets: &[(String, u32, Option<u32>)],
) -> Result<GroupStats> {
    let cols = c.table.columns;
    let limit = max_len.saturating_sub(2);
    let get = |name: &str| -> PolarsResult<f64> { Ok(df.col(name)?[row].unwrap_or(0.0)) };
    let documents = get("documents")? as u64;
    let share = |n: u64| if documents == 0 { 0.0 } else { n as f64 / documents as f64 };
    let mut g = GroupStats {
        group,
        documents,
        share: if total == 0 { 0.0 } else { documents as f64 / total as f64 },
        chars: None,
        words: None,
        word_buckets: None,
        tokens: None,
        truncation: None,
        noise: None,
        unk_rate: None,
        duplicates: None,
    };
    if cols.text {
        g.chars = Some(read_summary(df, row, "chars")?);
        g.words = Some(read_summary(df, row, "words")?);
        let mut buckets = Vec::new();
        for (i, (range, _, _)) in word_buckets.iter().enumerate() {
            let n = get(&format!("bucket|{i}"))? as u64;
            buckets.push(Bucket { range: range.clone(), documents: n, share: share(n) });
        }
        g.word_buckets = Some(buckets);
        g.duplicates = Some(get("duplicates")? as u64);
    }
    if cols.tokens {
        g.tokens = Some(read_summary(df, row, "tokens")?);
        if c.token_unit == Some("document") {
            let sum = get("tokens|sum")?;
            let over = get("trunc|over")? as u64;
            let dropped = get("trunc|dropped")? as u64;
            g.truncation = Some(TruncationFigures {
                max_len,
                limit,
                documents_over: over,
                share_over: share(over),
                tokens_dropped: dropped,
                tokens_dropped_share: if sum > 0.0 { dropped as f64 / sum } else { 0.0 },
                source: "computed",
            });
        }
    }
    if cols.unk {
        let sum = get("tokens|sum")?;
        g.unk_rate = Some(if sum > 0.0 { get("unk|sum")? / sum } else { 0.0 });
    }
    if cols.noise {
        let s = |i: usize| read_summary(df, row, NoiseComponents::COLUMNS[i]);
        g.noise = Some(NoiseStats {
            score: s(0)?,
            sent_len_std: s(1)?,
            punct_ratio: s(2)?,
            caps_ratio: s(3)?,
            repeat_ratio: s(4)?,
            mojibake_ratio: s(5)?,
        });
    }
    Ok(g)
}

/// TruncationFigures and [UNK] figures from a manifest, summed over `splits`.
fn manifest_figures(c: &Collected, splits: &[&str], max_len: u32, g: &mut GroupStats) {
    let entries: Vec<&(u64, TokenStats)> = splits.iter().filter_map(|s| c.manifest_tokens.get(*s)).collect();
    if entries.is_empty() {
        return;
    }
    let docs: u64 = entries.iter().map(|(docs, _)| docs).sum();
    let figures: Vec<&TokenStats> = entries.iter().map(|(_, t)| t).collect();
    let tokens: u64 = figures.iter().map(|t| t.document_tokens).sum();
    let unk: u64 = figures.iter().map(|t| t.unk_tokens).sum();
    let over: u64 = figures.iter().map(|t| t.docs_over_max_len).sum();
    let dropped: u64 = figures.iter().map(|t| t.tokens_dropped).sum();
    g.unk_rate = Some(if tokens > 0 { unk as f64 / tokens as f64 } else { 0.0 });
    if !c.manifest_truncation {
        return;
    }
    // The rows were cut at the manifest's max_len, whatever --max-len says.
    let max_len = c.max_len.unwrap_or(max_len);
    g.truncation = Some(TruncationFigures {
        max_len,
        limit: max_len.saturating_sub(2),
        documents_over: over,
        share_over: if docs > 0 { over as f64 / docs as f64 } else { 0.0 },
        tokens_dropped: dropped,
        tokens_dropped_share: if tokens > 0 { dropped as f64 / tokens as f64 } else { 0.0 },
        source: "manifest",
    });
}

/// Builds the report from what was collected.
/// `word_edges`: word-count bucket edges (default: the data's quartiles, [`quartile_edges`]).
pub fn build(
    c: &mut Collected,
    by: Option<By>,
    max_len: Option<u32>,
    top: usize,
    word_edges: Option<&[u32]>,
) -> Result<Report> {
    let max_len = max_len.or(c.max_len).unwrap_or(512);
    let limit = max_len.saturating_sub(2);
    let df = c.table.take_frame()?;
    let c = &*c;
    let total = df.height() as u64;
    let edges = match word_edges {
        Some(e) => e.to_vec(),
        None if c.table.columns.text => {
            quartile_edges(&mut f64_col(&df, "words")?.into_iter().flatten().map(|w| w as f32).collect::<Vec<_>>())
        }
        None => Vec::new(),
    };
    let buckets = word_buckets(&edges);

    let all = Frames::aggregate(&df, None, group_queries(c, limit, &buckets))?;
    let mut groups = vec![read_group(c, &all, 0, "all".into(), total, max_len, &buckets)?];
    let splits: Vec<&str> = c.table.splits.iter().map(String::as_str).collect();
    if c.token_unit == Some("row") {
        manifest_figures(c, &splits, max_len, &mut groups[0]);
    }
    let key = by.map(|b| b.name());
    if let Some(key) = key {
        let g = Frames::aggregate(&df, Some(key), group_queries(c, limit, &buckets))?;
        let mut rows: Vec<(GroupKey, usize)> =
            group_keys(&g.0[0], key)?.into_iter().enumerate().map(|(i, k)| (k, i)).collect();
        rows.sort();
        for (k, row) in rows {
            let name = k.name(&c.table.splits, &c.labels);
            let mut stats = read_group(c, &g, row, name, total, max_len, &buckets)?;
            if let GroupKey::Split(code) = k {
                if c.token_unit == Some("row") {
                    manifest_figures(c, &[splits[code as usize]], max_len, &mut stats);
                }
            }
            groups.push(stats);
        }
    }

    // Counts per split and label, and the label balance.
    let counts_df = df.clone().lazy().group_by([col("split"), col("label")]).agg([len().alias("n")]).collect()?;
    let split_codes: Vec<Option<u32>> = counts_df.column("split")?.u32()?.iter().collect();
    let label_ids: Vec<Option<i64>> = counts_df.column("label")?.i64()?.iter().collect();
    let ns: Vec<Option<f64>> = f64_col(&counts_df, "n")?;
    let mut counts: Vec<(u32, GroupKey, u64)> = split_codes
        .iter()
        .zip(&label_ids)
        .zip(&ns)
        .map(|((s, l), n)| (s.unwrap_or(0), GroupKey::label(*l), n.unwrap_or(0.0) as u64))
        .collect();
    counts.sort();
    let frac = |n: u64| if total == 0 { 0.0 } else { n as f64 / total as f64 };
    let count_rows = counts
        .iter()
        .map(|(s, l, n)| CountRow {
            split: c.table.splits[*s as usize].clone(),
            label: l.name(&c.table.splits, &c.labels),
            documents: *n,
            share: frac(*n),
        })
        .collect();
    let mut balance: BTreeMap<GroupKey, u64> = BTreeMap::new();
    for (_, l, n) in &counts {
        *balance.entry(*l).or_default() += n;
    }
    let label_balance = balance
        .into_iter()
        .map(|(l, n)| LabelShare { label: l.name(&c.table.splits, &c.labels), documents: n, share: frac(n) })
        .collect();

    let histograms = histograms(c, &df, key, &groups, max_len)?;
    let noisiest = c
        .table
        .noisiest()
        .into_iter()
        .take(top)
        .map(|d: NoisyDoc| NoisyOut {
            label: c.labels.name(d.label),
            id: d.id,
            split: d.split,
            noise_score: d.noise_score as f64,
            snippet: d.snippet,
        })
        .collect();
    let rejected: u64 = c.rejected.values().sum();
    Ok(Report {
        format: FORMAT,
        input: c.input.clone(),
        unit: c.unit,
        token_unit: c.token_unit,
        by: key,
        max_len,
        documents: DocCounts { read: c.read, kept: total, rejected, rejected_by_reason: c.rejected.clone() },
        counts: count_rows,
        label_balance,
        noise_scored_by: c.noise_scored_by,
        groups,
        noisiest,
        histograms,
        reject_examples: c.reject_examples.clone(),
    })
}

/// A group key, ordered as reports list groups: splits in input order, labels by id with
/// unlabelled last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum GroupKey {
    Split(u32),
    /// `(unlabelled, id)`: unlabelled sorts after every label.
    Label(bool, i64),
}

impl GroupKey {
    fn label(l: Option<i64>) -> GroupKey {
        GroupKey::Label(l.is_none(), l.unwrap_or(0))
    }

    fn name(&self, splits: &[String], labels: &LabelNames) -> String {
        match *self {
            GroupKey::Split(s) => splits[s as usize].clone(),
            GroupKey::Label(none, id) => labels.name((!none).then_some(id)),
        }
    }
}

fn group_keys(df: &DataFrame, key: &str) -> PolarsResult<Vec<GroupKey>> {
    Ok(match key {
        "split" => df.column("split")?.u32()?.iter().map(|s| GroupKey::Split(s.unwrap_or(0))).collect(),
        _ => df.column("label")?.i64()?.iter().map(GroupKey::label).collect(),
    })
}

/// A "nice" bin width (1, 2, 2.5 or 5 × 10ⁿ; whole numbers for integer metrics) giving about
/// `target` bins up to `end`.
fn bin_layout(end: f64, integer: bool, target: usize) -> (f64, usize) {
    let raw = (end / target as f64).max(f64::MIN_POSITIVE);
    let exp = 10f64.powf(raw.log10().floor());
    let steps: &[f64] = if integer && exp < 10.0 { &[1.0, 2.0, 5.0, 10.0] } else { &[1.0, 2.0, 2.5, 5.0, 10.0] };
    let mut width = steps.iter().map(|s| s * exp).find(|w| *w >= raw).unwrap_or(10.0 * exp);
    if integer {
        width = width.max(1.0).round();
    }
    let bins = ((end / width).ceil() as usize).max(1);
    (width, bins)
}

/// Histograms of words (or characters, without words), tokens and noise score, per group.
/// The range reaches the 99th percentile (tokens: at least past `max_len`), so the long tail
/// does not squeeze the picture; the rest counts in the last bin and is reported as overflow.
fn histograms(
    c: &Collected,
    df: &DataFrame,
    key: Option<&str>,
    groups: &[GroupStats],
    max_len: u32,
) -> Result<Vec<Histogram>> {
    let all = &groups[0];
    let mut specs: Vec<(&'static str, f64, bool)> = Vec::new();
    if let Some(p99) = all.words.and_then(|w| w.p99) {
        specs.push(("words", p99.max(1.0), true));
    }
    if let Some(t) = all.tokens {
        if let Some(p99) = t.p99 {
            specs.push(("tokens", p99.max(max_len as f64 * 1.1), true));
        }
    }
    if let Some(p99) = all.noise.as_ref().and_then(|n| n.score.p99) {
        specs.push(("noise_score", p99.max(1.0), false));
    }
    let mut out = Vec::new();
    for (metric, end, integer) in specs {
        let (width, bins) = bin_layout(end, integer, 40);
        let x = || col(metric).cast(DataType::Float64);
        let top = width * bins as f64;
        let bin = when(x().gt_eq(lit(top)))
            .then(lit((bins - 1) as i64))
            .otherwise((x() / lit(width)).cast(DataType::Int64))
            .alias("bin");
        let over = x().gt_eq(lit(top)).alias("over");
        let mut by = vec![col("bin")];
        if let Some(k) = key {
            by.insert(0, col(k));
        }
        let h = df
            .clone()
            .lazy()
            .with_columns([bin, over])
            .filter(col("bin").is_not_null())
            .group_by(by)
            .agg([len().cast(DataType::Float64).alias("n"), col("over").sum().cast(DataType::Float64).alias("over")])
            .collect()?;
        // Without --by there is one series, under no key.
        let keys: Vec<Option<GroupKey>> = match key {
            Some(k) => group_keys(&h, k)?.into_iter().map(Some).collect(),
            None => vec![None; h.height()],
        };
        let bin_ids: Vec<Option<f64>> = f64_col(&h, "bin")?;
        let ns = f64_col(&h, "n")?;
        let overs = f64_col(&h, "over")?;
        let mut series: BTreeMap<Option<GroupKey>, (Vec<u64>, u64)> = BTreeMap::new();
        for i in 0..h.height() {
            let entry = series.entry(keys[i]).or_insert_with(|| (vec![0; bins], 0));
            let b = (bin_ids[i].unwrap_or(0.0) as usize).min(bins - 1);
            entry.0[b] += ns[i].unwrap_or(0.0) as u64;
            entry.1 += overs[i].unwrap_or(0.0) as u64;
        }
        let mut named = Vec::new();
        let mut overflow = Vec::new();
        for (k, (counts, over)) in series {
            let name = k.map_or_else(|| "all".to_string(), |k| k.name(&c.table.splits, &c.labels));
            named.push((name, counts));
            overflow.push(over);
        }
        out.push(Histogram { metric, width, bins, series: named, overflow });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_edges_follow_the_data() {
        assert_eq!(two_significant(174.0), 170);
        assert_eq!(two_significant(1234.0), 1200);
        assert_eq!(two_significant(37.4), 37);
        // Tweets: every bucket gets a share, not all in the first.
        let mut tweets: Vec<f32> = (0..1000).map(|i| (5 + i % 30) as f32).collect();
        let edges = quartile_edges(&mut tweets);
        assert_eq!(edges, [12, 19, 27]);
        let labels: Vec<String> = word_buckets(&edges).into_iter().map(|b| b.0).collect();
        assert_eq!(labels, ["<12", "12-18", "19-26", ">=27"]);
        let imdb: Vec<String> = word_buckets(&[100, 300, 500]).into_iter().map(|b| b.0).collect();
        assert_eq!(imdb, ["<100", "100-299", "300-499", ">=500"]);
        assert!(quartile_edges(&mut []).is_empty());
        // Identical lengths: one edge, two buckets.
        assert_eq!(quartile_edges(&mut [7.0; 10]), [7]);
    }

    #[test]
    fn bin_widths_are_round_numbers() {
        assert_eq!(bin_layout(900.0, true, 40), (25.0, 36));
        assert_eq!(bin_layout(563.2, true, 40), (20.0, 29));
        assert_eq!(bin_layout(10.0, true, 40), (1.0, 10));
        assert_eq!(bin_layout(23.7, false, 40), (1.0, 24));
        assert_eq!(bin_layout(1.0, false, 40), (0.025, 40));
    }
}
