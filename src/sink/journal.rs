//! The journal of finished shards (`_journal.jsonl`) that `--resume` uses after a crash, and
//! the files a resumed run must not keep.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::contract::checksum::sha256_file;
use crate::contract::manifest::{is_split_name, shard_name, ShardInfo, JOURNAL, REJECTS};

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum JournalLine {
    Header { config_sha256: String },
    Shard { folder: String, shard: ShardInfo },
}

/// Append-only record of completed shards.
pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    pub fn create(out: &Path, config_sha256: &str) -> Result<Journal> {
        let path = out.join(JOURNAL);
        let mut file = File::create(&path).with_context(|| format!("could not create '{}'", path.display()))?;
        writeln!(file, "{}", serde_json::to_string(&JournalLine::Header { config_sha256: config_sha256.into() })?)
            .with_context(|| format!("could not write '{}'", path.display()))?;
        Ok(Journal { file, path })
    }

    /// Opens an existing journal for appending after a resume.
    pub fn append(out: &Path) -> Result<Journal> {
        let path = out.join(JOURNAL);
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("could not open '{}'", path.display()))?;
        Ok(Journal { file, path })
    }

    pub fn record(&mut self, folder: &str, shard: &ShardInfo) -> Result<()> {
        let line = serde_json::to_string(&JournalLine::Shard { folder: folder.into(), shard: shard.clone() })?;
        writeln!(self.file, "{line}")
            .and_then(|()| self.file.flush())
            .with_context(|| format!("could not write '{}'", self.path.display()))
    }

    /// Shards of an interrupted run that are still intact, per folder, in order. Stops at the
    /// first shard of a folder that is missing or fails its checksum: later ones are rewritten.
    pub fn verified_shards(out: &Path, config_sha256: &str) -> Result<BTreeMap<String, Vec<ShardInfo>>> {
        Self::verified_shards_with(out, config_sha256, &mut |shard: &ShardInfo| {
            let file = out.join(&shard.file);
            Ok(file.is_file() && sha256_file(&file).map(|h| h == shard.sha256).unwrap_or(false))
        })
    }

    /// As [`Journal::verified_shards`], with `intact` deciding whether a recorded shard is
    /// still there and whole (on disk, or in a bucket).
    pub fn verified_shards_with(
        out: &Path,
        config_sha256: &str,
        intact: &mut dyn FnMut(&ShardInfo) -> Result<bool>,
    ) -> Result<BTreeMap<String, Vec<ShardInfo>>> {
        let path = out.join(JOURNAL);
        let file = File::open(&path).with_context(|| {
            format!("'{}' has no journal of an interrupted run ({JOURNAL}); run without --resume", out.display())
        })?;
        let mut kept: BTreeMap<String, Vec<ShardInfo>> = BTreeMap::new();
        let mut broken: std::collections::BTreeSet<String> = Default::default();
        for (i, line) in BufReader::new(file).lines().enumerate() {
            let line = line?;
            // A crash can cut the last line short; everything before it is still good.
            let Ok(entry) = serde_json::from_str::<JournalLine>(&line) else {
                break;
            };
            match entry {
                JournalLine::Header { config_sha256: h } => {
                    if i == 0 && h != config_sha256 {
                        bail!(
                            "the pipeline changed since the interrupted run in '{}'; --resume needs the same configuration (use --overwrite to start over)",
                            out.display()
                        );
                    }
                }
                JournalLine::Shard { folder, shard } => {
                    if folder != REJECTS && !is_split_name(&folder) {
                        bail!(
                            "'{}' line {}: folder {folder:?} is not a split name of the shard layout",
                            path.display(),
                            i + 1
                        );
                    }
                    if broken.contains(&folder) {
                        continue;
                    }
                    // The name is checked before anything is read or kept by it.
                    let expected = format!("{folder}/{}", shard_name(kept.get(&folder).map_or(0, Vec::len)));
                    if shard.file == expected && intact(&shard)? {
                        kept.entry(folder).or_default().push(shard);
                    } else {
                        broken.insert(folder);
                    }
                }
            }
        }
        Ok(kept)
    }
}

/// Files a resumed run must not keep: temporaries and shards beyond the verified ones.
pub fn stale_files(out: &Path, kept: &BTreeMap<String, Vec<ShardInfo>>) -> Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    for entry in std::fs::read_dir(out)? {
        let dir = entry?.path();
        if !dir.is_dir() {
            continue;
        }
        let folder = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let keep: Vec<&str> =
            kept.get(&folder).map(|v| v.iter().map(|s| s.file.as_str()).collect()).unwrap_or_default();
        for f in std::fs::read_dir(&dir)? {
            let f = f?.path();
            let rel = format!("{folder}/{}", f.file_name().unwrap_or_default().to_string_lossy());
            if !keep.contains(&rel.as_str()) {
                stale.push(f);
            }
        }
    }
    Ok(stale)
}
