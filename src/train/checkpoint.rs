//! Checkpoint folders: `<out>/checkpoint-<step>/` in HF layout (`config.json`,
//! `model.safetensors`, `vocab.txt`) plus `trainer_state.json` and `optimizer.safetensors`
//! for `--resume`; `best/` and `final/` beside them. Every folder is written under a
//! temporary name and renamed into place, so a crash never leaves a half-written checkpoint
//! where `--resume` would look.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

pub const STATE: &str = "trainer_state.json";
pub const OPTIMIZER: &str = "optimizer.safetensors";

/// Where the run is: enough to continue it exactly.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TrainerState {
    pub format: String,
    /// Optimiser steps taken.
    pub global_step: u64,
    /// The epoch in progress (0-based) and the batches of it already trained on.
    pub epoch_index: u64,
    pub batch_in_epoch: u64,
    pub total_steps: u64,
    pub best: Option<Best>,
    /// SHA-256 of the resolved training config: `--resume` refuses a different one.
    pub config_sha256: String,
    /// Every `metrics.jsonl` record so far.
    pub log_history: Vec<serde_json::Value>,
    /// Evaluations in a row without improvement (early stopping).
    #[serde(default)]
    pub evals_without_improvement: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Best {
    pub metric: String,
    pub value: f64,
    pub step: u64,
}

pub const STATE_FORMAT: &str = "bertpipe-trainer-state/1";

impl TrainerState {
    pub fn write(&self, dir: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        std::fs::write(dir.join(STATE), text)
            .with_context(|| format!("could not write '{}'", dir.join(STATE).display()))
    }

    pub fn read(dir: &Path) -> Result<TrainerState> {
        let path = dir.join(STATE);
        let text = std::fs::read_to_string(&path).with_context(|| format!("could not read '{}'", path.display()))?;
        let s: TrainerState = serde_json::from_str(&text)
            .with_context(|| format!("'{}' is not a bertpipe trainer state", path.display()))?;
        Ok(s)
    }
}

/// Writes a folder through `fill(tmp)`, then renames it to `dir` (replacing an older one).
pub fn write_atomic(dir: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let parent = dir.parent().context("checkpoint folder has no parent")?;
    let name = dir.file_name().context("checkpoint folder has no name")?.to_string_lossy();
    let tmp = parent.join(format!(".tmp-{name}"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("could not create '{}'", tmp.display()))?;
    fill(&tmp)?;
    crate::contract::kill_point();
    if dir.exists() {
        let old = parent.join(format!(".old-{name}"));
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        std::fs::rename(dir, &old)?;
        std::fs::rename(&tmp, dir)?;
        std::fs::remove_dir_all(&old)?;
    } else {
        std::fs::rename(&tmp, dir).with_context(|| format!("could not move '{}' into place", dir.display()))?;
    }
    Ok(())
}

/// Complete `checkpoint-<step>` folders, oldest first.
pub fn list(out: &Path) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let step = name.strip_prefix("checkpoint-")?.parse::<u64>().ok()?;
            let p = e.path();
            (p.join(STATE).exists() && p.join(OPTIMIZER).exists() && p.join("model.safetensors").exists())
                .then_some((step, p))
        })
        .collect();
    found.sort();
    found
}

/// The newest complete checkpoint.
pub fn newest(out: &Path) -> Option<(u64, PathBuf)> {
    list(out).pop()
}

/// Removes the oldest checkpoints beyond `keep` (0 keeps all).
pub fn rotate(out: &Path, keep: usize) -> Result<()> {
    if keep == 0 {
        return Ok(());
    }
    let all = list(out);
    for (_, p) in all.iter().take(all.len().saturating_sub(keep)) {
        std::fs::remove_dir_all(p).with_context(|| format!("could not remove '{}'", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(out: &Path, step: u64) {
        write_atomic(&out.join(format!("checkpoint-{step}")), |d| {
            for f in [STATE, OPTIMIZER, "model.safetensors"] {
                std::fs::write(d.join(f), "x")?;
            }
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn newest_and_rotation_ignore_incomplete_folders() {
        let dir = tempfile::tempdir().unwrap();
        for s in [5, 10, 15] {
            fake(dir.path(), s);
        }
        std::fs::create_dir_all(dir.path().join("checkpoint-20")).unwrap(); // no files: a crash mid-write
        std::fs::create_dir_all(dir.path().join(".tmp-checkpoint-25")).unwrap();
        assert_eq!(newest(dir.path()).unwrap().0, 15);
        rotate(dir.path(), 2).unwrap();
        assert_eq!(list(dir.path()).iter().map(|c| c.0).collect::<Vec<_>>(), vec![10, 15]);
        fake(dir.path(), 15); // replacing an existing folder works
        assert_eq!(newest(dir.path()).unwrap().0, 15);
    }
}
