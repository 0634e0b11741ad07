//! `--plot DIR`: the report's pictures, each as SVG and PNG, drawn with plotters. Text is laid
//! out (and, in PNGs, rendered) with an embedded DejaVu Sans subset, so no system fonts are
//! needed.
//!
//! - `words.svg/png` (or `chars` without words): length histogram, median and p95 lines;
//! - `tokens.svg/png`: token-length histogram with the `max_len − 2` line;
//! - `noise.svg/png`: noise-score histogram with the p95 line (the noisiest 5% lie past it);
//! - `labels.svg/png`: documents per split and label.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::{Histogram, Report, Summary};

static FONT: &[u8] = include_bytes!("../../data/fonts/DejaVuSans-subset.ttf");
const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (960, 560);

/// tab10's first colours: blue, orange, green, red, purple, brown, pink, grey.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
const LINE_COLORS: [RGBColor; 3] = [RGBColor(20, 20, 20), RGBColor(214, 39, 40), RGBColor(148, 103, 189)];

/// Registers the embedded font once per process; every call reports whether that worked.
fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        [FontStyle::Normal, FontStyle::Bold]
            .into_iter()
            .all(|s| plotters::style::register_font(FAMILY, s, FONT).is_ok())
    });
    if ok {
        Ok(())
    } else {
        Err(anyhow!("the embedded plot font (data/fonts/DejaVuSans-subset.ttf) could not be loaded"))
    }
}

/// A vertical marker on a histogram.
struct Marker {
    label: String,
    x: f64,
}

struct HistogramChart<'a> {
    title: String,
    x_desc: String,
    hist: &'a Histogram,
    markers: Vec<Marker>,
}

fn fmt_x(x: f64) -> String {
    if x == x.trunc() {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn quantile_markers(s: Option<&Summary>) -> Vec<Marker> {
    let Some(s) = s else { return Vec::new() };
    let mut m = Vec::new();
    if let Some(x) = s.median {
        m.push(Marker { label: format!("median {}", fmt_x(x)), x });
    }
    if let Some(x) = s.p95 {
        m.push(Marker { label: format!("p95 {}", fmt_x(x)), x });
    }
    m
}

fn draw_histogram<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &HistogramChart<'_>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let h = c.hist;
    let end = h.end();
    let ymax = h.series.iter().flat_map(|(_, v)| v.iter().copied()).max().unwrap_or(0).max(1);
    let ymax = ymax + ymax / 10 + 1;
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..end, 0u64..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(c.x_desc.as_str())
        .y_desc(if h.series.len() > 1 { "documents (per group)" } else { "documents" })
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .x_label_formatter(&|x| fmt_x(*x))
        .draw()?;
    let overlay = h.series.len() > 1;
    for (i, (name, counts)) in h.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()].mix(if overlay { 0.45 } else { 0.85 });
        let width = h.width;
        let series = chart.draw_series(counts.iter().enumerate().filter(|(_, n)| **n > 0).map(move |(b, &n)| {
            let x0 = b as f64 * width;
            Rectangle::new([(x0, 0), (x0 + width, n)], color.filled())
        }))?;
        if overlay {
            series
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
        }
    }
    for (i, m) in c.markers.iter().enumerate() {
        if !(0.0..=end).contains(&m.x) {
            continue;
        }
        let style = LINE_COLORS[i % LINE_COLORS.len()].stroke_width(2);
        chart
            .draw_series(std::iter::once(PathElement::new(vec![(m.x, 0), (m.x, ymax)], style)))?
            .label(m.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    draw_legend(&mut chart)?;
    root.present()?;
    Ok(())
}

/// The series legend, upper right, the same on every chart.
fn draw_legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>) -> Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: plotters::coord::CoordTranslate,
{
    chart
        .configure_series_labels()
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

struct BarChart {
    title: String,
    /// `(category, value, colour index)`.
    bars: Vec<(String, u64, usize)>,
    total: u64,
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &BarChart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let n = c.bars.len().max(1) as i32;
    let ymax = c.bars.iter().map(|b| b.1).max().unwrap_or(0).max(1);
    let ymax = ymax + ymax / 8 + 1;
    let names: Vec<String> = c.bars.iter().map(|b| b.0.clone()).collect();
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0u64..ymax)?;
    let label_of = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => names.get(*i as usize).cloned().unwrap_or_default(),
        SegmentValue::Last => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len())
        .x_label_formatter(&label_of)
        .y_desc("documents")
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .draw()?;
    chart.draw_series(c.bars.iter().enumerate().map(|(i, (_, v, color))| {
        let mut r = Rectangle::new(
            [(SegmentValue::Exact(i as i32), 0), (SegmentValue::Exact(i as i32 + 1), *v)],
            COLORS[*color % COLORS.len()].mix(0.85).filled(),
        );
        r.set_margin(0, 0, 12, 12);
        r
    }))?;
    let total = c.total.max(1) as f64;
    chart.draw_series(c.bars.iter().enumerate().map(|(i, (_, v, _))| {
        let text = format!("{v} ({:.1}%)", 100.0 * *v as f64 / total);
        let style = (FAMILY, 14).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
        Text::new(text, (SegmentValue::CenterOf(i as i32), *v + ymax / 100), style)
    }))?;
    root.present()?;
    Ok(())
}

/// A chart that can be drawn on any plotters backend.
trait Chart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;
}

impl Chart for HistogramChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        draw_histogram(root, self)
    }
}

impl Chart for BarChart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        draw_bars(root, self)
    }
}

/// Writes `stem.svg` and `stem.png` with the same drawing.
fn both(dir: &Path, stem: &str, chart: &impl Chart) -> Result<Vec<PathBuf>> {
    let svg = dir.join(format!("{stem}.svg"));
    let png = dir.join(format!("{stem}.png"));
    chart
        .draw(&SVGBackend::new(&svg, SIZE).into_drawing_area())
        .with_context(|| format!("could not draw '{}'", svg.display()))?;
    let bytes = png_bytes(chart).with_context(|| format!("could not draw '{}'", png.display()))?;
    std::fs::write(&png, bytes).with_context(|| format!("could not write '{}'", png.display()))?;
    Ok(vec![svg, png])
}

/// The report's charts: a histogram per metric it measured, and the label counts.
enum StatsChart<'a> {
    Histogram(HistogramChart<'a>),
    Bars(BarChart),
}

impl Chart for StatsChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        match self {
            StatsChart::Histogram(h) => draw_histogram(root, h),
            StatsChart::Bars(b) => draw_bars(root, b),
        }
    }
}

/// Every chart the report has data for, with its file stem.
fn stats_charts(r: &Report) -> Vec<(&'static str, StatsChart<'_>)> {
    let all = &r.groups[0];
    let units = r.units();
    let mut charts = Vec::new();
    for h in &r.histograms {
        let overflow: u64 = h.overflow.iter().sum();
        let tail = if overflow > 0 {
            format!(" (last bar: ≥ {}, {} {units})", fmt_x(h.end() - h.width), overflow)
        } else {
            String::new()
        };
        let (stem, title, x_desc, markers) = match h.metric {
            "words" => (
                "words",
                format!("Words per {} — {} {units}", r.unit, all.documents),
                format!("words{tail}"),
                quantile_markers(all.words.as_ref()),
            ),
            "tokens" => {
                let mut m = quantile_markers(all.tokens.as_ref());
                if r.token_unit == Some("row") {
                    // Rows count their special tokens: the limit is max_len itself.
                    m.push(Marker { label: format!("max_len {}", r.max_len), x: r.max_len as f64 });
                } else {
                    let limit = r.max_len.saturating_sub(2) as f64;
                    m.push(Marker { label: format!("max_len {} − 2 = {}", r.max_len, fmt_x(limit)), x: limit });
                }
                let what = if r.token_unit == Some("row") { "row (special tokens included)" } else { r.unit };
                ("tokens", format!("WordPiece tokens per {what}"), format!("tokens{tail}"), m)
            }
            _ => {
                let p95 = all.noise.as_ref().and_then(|n| n.score.p95);
                let m = p95.map(|x| vec![Marker { label: format!("p95 {} (noisiest 5% beyond)", fmt_x(x)), x }]);
                (
                    "noise",
                    format!("Noise score — {} {units}", all.documents),
                    format!("noise_score{tail}"),
                    m.unwrap_or_default(),
                )
            }
        };
        charts.push((stem, StatsChart::Histogram(HistogramChart { title, x_desc, hist: h, markers })));
    }
    if !r.counts.is_empty() {
        let mut labels: Vec<&str> = Vec::new();
        let bars = r
            .counts
            .iter()
            .map(|c| {
                let color = labels.iter().position(|l| *l == c.label).unwrap_or_else(|| {
                    labels.push(&c.label);
                    labels.len() - 1
                });
                (format!("{}/{}", c.split, c.label), c.documents, color)
            })
            .collect();
        let title = if r.unit == "row" { "Rows per split and label" } else { "Documents per split and label" };
        charts.push(("labels", StatsChart::Bars(BarChart { title: title.to_string(), bars, total: r.documents.kept })));
    }
    charts
}

/// Draws every chart the report has data for into `dir` (created if needed); returns the files.
pub fn write_all(r: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    let mut files = Vec::new();
    for (stem, chart) in stats_charts(r) {
        files.extend(both(dir, stem, &chart)?);
    }
    Ok(files)
}

/// The same charts as [`write_all`], as PNG files in memory: `(stem, bytes)` (for a report page).
pub fn pngs(r: &Report) -> Result<Vec<(&'static str, Vec<u8>)>> {
    register_font()?;
    stats_charts(r).into_iter().map(|(stem, chart)| Ok((stem, png_bytes(&chart)?))).collect()
}

/// Draws a chart into an RGB buffer and encodes it as PNG.
fn png_bytes(chart: &impl Chart) -> Result<Vec<u8>> {
    let (w, h) = SIZE;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    chart.draw(&BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area())?;
    let mut png = Vec::new();
    let mut encoder = ::png::Encoder::new(&mut png, w, h);
    encoder.set_color(::png::ColorType::Rgb);
    encoder.set_depth(::png::BitDepth::Eight);
    encoder.set_compression(::png::Compression::Best);
    encoder.write_header()?.write_image_data(&rgb)?;
    Ok(png)
}

/// Lines of `(x, y)` points, e.g. training curves: loss or metrics against the step.
pub struct LineChart<'a> {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub series: &'a [(String, Vec<(f64, f64)>)],
    /// Both axes fixed to [0, 1] (ROC curves, reliability diagrams).
    pub unit_square: bool,
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &LineChart<'_>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let points = || c.series.iter().flat_map(|(_, s)| s.iter()).filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points() {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 || c.unit_square {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = if c.unit_square { 0.0 } else { ((y1 - y0) * 0.08).max(1e-3) };
    let x_end = if c.unit_square { 1.0 } else { x1.max(x0 + 1.0) };
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x_end, (y0 - pad).max(if y0 >= 0.0 { 0.0 } else { f64::MIN })..y1 + pad)?;
    chart
        .configure_mesh()
        .x_desc(c.x_desc.as_str())
        .y_desc(c.y_desc.as_str())
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .x_label_formatter(&|x| fmt_x(*x))
        .draw()?;
    for (i, (name, pts)) in c.series.iter().enumerate() {
        if pts.is_empty() {
            continue;
        }
        let color = COLORS[i % COLORS.len()];
        let style = color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()), style))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        if pts.len() <= 60 {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
    }
    draw_legend(&mut chart)?;
    root.present()?;
    Ok(())
}

impl Chart for LineChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        draw_lines(root, self)
    }
}

/// Writes `dir/stem.svg` and `dir/stem.png`: one line per series, against the step.
pub fn line_chart(
    dir: &Path,
    stem: &str,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    xy_chart(dir, stem, title, "step", y_desc, series, false)
}

/// Writes `dir/stem.svg` and `dir/stem.png`: one line per series of `(x, y)` points;
/// `unit_square` fixes both axes to [0, 1].
pub fn xy_chart(
    dir: &Path,
    stem: &str,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    unit_square: bool,
) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    let chart = LineChart {
        title: title.to_string(),
        x_desc: x_desc.to_string(),
        y_desc: y_desc.to_string(),
        series,
        unit_square,
    };
    both(dir, stem, &chart)
}

/// A confusion matrix: `matrix[true][predicted]` counts, cells shaded by their share of the
/// true class's row.
struct ConfusionChart<'a> {
    title: String,
    names: &'a [String],
    matrix: &'a [Vec<usize>],
}

fn draw_confusion<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &ConfusionChart<'_>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let k = c.names.len().max(1) as i32;
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(60)
        .y_label_area_size(110)
        .build_cartesian_2d((0..k - 1).into_segmented(), (0..k - 1).into_segmented())?;
    let names = c.names;
    let label_of = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => names.get(*i as usize).cloned().unwrap_or_default(),
        SegmentValue::Last => String::new(),
    };
    // Rows run top to bottom in label order: y = k - 1 - true.
    let y_label = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
            names.get((k - 1 - *i) as usize).cloned().unwrap_or_default()
        }
        SegmentValue::Last => String::new(),
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(names.len())
        .y_labels(names.len())
        .x_label_formatter(&label_of)
        .y_label_formatter(&y_label)
        .x_desc("predicted")
        .y_desc("true")
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .draw()?;
    let blue = COLORS[0];
    for (t, row) in c.matrix.iter().enumerate() {
        let total = row.iter().sum::<usize>().max(1) as f64;
        let y = k - 1 - t as i32;
        for (p, &n) in row.iter().enumerate() {
            let share = n as f64 / total;
            let x = p as i32;
            chart.draw_series(std::iter::once(Rectangle::new(
                [
                    (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                    (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
                ],
                blue.mix(0.08 + 0.85 * share).filled(),
            )))?;
            let color = if share > 0.55 { WHITE } else { BLACK };
            let style = (FAMILY, 18).into_font().color(&color).pos(Pos::new(HPos::Center, VPos::Center));
            chart.draw_series(std::iter::once(Text::new(
                format!("{n} ({:.1}%)", 100.0 * share),
                (SegmentValue::CenterOf(x), SegmentValue::CenterOf(y)),
                style,
            )))?;
        }
    }
    root.present()?;
    Ok(())
}

impl Chart for ConfusionChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        draw_confusion(root, self)
    }
}

/// Writes `dir/stem.svg` and `dir/stem.png`: the confusion matrix with counts and row shares.
pub fn confusion_chart(
    dir: &Path,
    stem: &str,
    title: &str,
    names: &[String],
    matrix: &[Vec<usize>],
) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    both(dir, stem, &ConfusionChart { title: title.to_string(), names, matrix })
}
