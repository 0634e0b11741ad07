//! `OUT/report.html`: the chain's results as one page — the stage table of `report.md`, then a
//! section per stage built from what the stage left in its folder: a pipeline's corpus charts
//! and statistics (its shards read back), a training's curves and last evaluation, an
//! evaluation's figures, confusion matrix, ROC, calibration, confident mistakes and the gate's
//! flips. A stage that did not run this time is shown from its last run's folder, so the page
//! of an up-to-date chain is as full as the one of the run that built it.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use super::{Report, StageReport};
use crate::page::{self, Cell, Page};

/// Writes `OUT/report.html`.
pub fn write(r: &Report) -> Result<()> {
    let mut page = Page::new(format!("Experiment `{}`", r.experiment));
    page.meta(format!("{} → {}", r.file.display(), r.out.display()));
    page.section("Stages");
    let rows = r
        .stages
        .iter()
        .map(|s| {
            vec![
                Cell::Text(s.stage.clone()),
                Cell::Text(s.kind.clone()),
                Cell::Text(s.status.clone()),
                Cell::Num(format!("{:.1}", s.seconds)),
                // Numbers as the rest of the page writes them (`2.887e-8`, not `0.0000`).
                Cell::Long(super::figures_with(&s.figures, page::fmt_num)),
                Cell::Long(s.reason.clone()),
            ]
        })
        .collect();
    page.table(&["stage", "kind", "status", "seconds", "figures", "why"], rows);
    if r.interrupted {
        page.status("interrupted", "the run was interrupted; run the same command to continue");
    }
    for s in &r.stages {
        page.section(&format!("{} ({})", s.stage, s.kind));
        page.status(&s.status, &s.reason);
        if s.status == "not run" && has_output(s) {
            page.note("What its folder holds from its last run:");
        }
        // A section must never cost the chain its report: what cannot be shown is said.
        if let Err(e) = stage_section(&mut page, s) {
            page.note(&format!("Not shown: {e:#}"));
        }
    }
    page.write(&r.out.join(page::REPORT_PAGE))
}

/// Whether the stage's folder holds a finished output to show.
fn has_output(s: &StageReport) -> bool {
    matches!(s.status.as_str(), "ran" | "up to date") || (s.status == "not run" && !s.figures.is_null())
}

fn stage_section(page: &mut Page, s: &StageReport) -> Result<()> {
    if !has_output(s) {
        return Ok(());
    }
    let dir = s.output.as_path();
    match s.kind.as_str() {
        "pipeline" => pipeline(page, s, dir),
        "train" => page::train_section(page, dir),
        "eval" => {
            let path = dir.join("metrics.json");
            let text =
                std::fs::read_to_string(&path).with_context(|| format!("could not read '{}'", path.display()))?;
            let m: Value = serde_json::from_str(&text).with_context(|| format!("'{}' is not JSON", path.display()))?;
            page::eval_section(page, &m, dir)
        }
        _ => {
            figures(page, &s.figures);
            Ok(())
        }
    }
}

fn figures(page: &mut Page, f: &Value) {
    let Some(obj) = f.as_object() else { return };
    page.pairs(obj.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), page::value(v))).collect());
}

/// A pipeline stage: its figures, then `stats` of its shards with the charts drawn in memory.
fn pipeline(page: &mut Page, s: &StageReport, dir: &Path) -> Result<()> {
    figures(page, &s.figures);
    if !dir.join("manifest.json").is_file() {
        // A sink in object storage, or shards moved away: the figures are what is known.
        page.note(&format!("No shard folder at '{}' to draw the corpus from.", dir.display()));
        return Ok(());
    }
    // The runner has just vouched for the shards (their record, the digest cache): reading them
    // for the page does not hash every shard again on every run of the chain.
    let opts = crate::stats::StatsOptions { verified: true, ..Default::default() };
    let (stats, _) = crate::stats::run(dir, &opts).map_err(|e| match e {
        crate::stats::StatsError::Config(c) => anyhow::anyhow!("{c}"),
        crate::stats::StatsError::Other(e) => e,
    })?;
    let charts = page::stats_images(crate::stats::plot::pngs(&stats)?);
    page::stats_section(page, &stats, charts);
    Ok(())
}
