//! A pipeline's output in object storage. Shards are written to a local staging folder as on
//! disk, and each one is uploaded — in one request, or a multipart upload that becomes visible
//! only when it completes — as soon as it is complete, then removed locally. The journal is
//! uploaded after every shard (the bucket's copy lists only shards already there), and
//! `manifest.json` last, after which the journal is deleted: the same completeness rules as on
//! disk, so `--resume` works from the bucket alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::journal::Journal;
use crate::contract::checksum::sha256_file;
use crate::contract::manifest::{Manifest, ShardInfo, JOURNAL, MANIFEST};
use crate::contract::progress::{Progress, Total};
use crate::storage::Remote;

pub struct RemoteOut {
    pub remote: Remote,
    /// Where shards are written before they are uploaded.
    pub staging: PathBuf,
}

impl RemoteOut {
    pub fn new(url: &Path) -> Result<RemoteOut> {
        let remote = Remote::open(url)?;
        let staging = crate::storage::local_folder(remote.url()).join("staging");
        Ok(RemoteOut { remote, staging })
    }

    /// As `prepare_output` does on disk: a fresh prefix, one replaced with `--overwrite` (only
    /// if it holds bertpipe output), or — with `--resume` — the shards of the interrupted run
    /// that are in the bucket and verify, with everything else removed. The bucket's journal
    /// is copied into the staging folder for appending.
    pub fn prepare(
        &self,
        resume: bool,
        overwrite: bool,
        config_sha256: &str,
    ) -> Result<BTreeMap<String, Vec<ShardInfo>>> {
        let url = self.remote.url();
        let objects = self.remote.list()?;
        let has = |name: &str| objects.iter().any(|(rel, _)| rel == name);
        if self.staging.exists() {
            std::fs::remove_dir_all(&self.staging)
                .with_context(|| format!("could not clear the staging folder '{}'", self.staging.display()))?;
        }
        std::fs::create_dir_all(&self.staging)
            .with_context(|| format!("could not create the staging folder '{}'", self.staging.display()))?;
        if resume {
            if has(MANIFEST) {
                bail!("'{url}' is already complete (manifest.json exists); nothing to resume");
            }
            if !has(JOURNAL) {
                bail!("'{url}' holds no interrupted run to resume (no {JOURNAL}); run without --resume");
            }
            self.remote.download(JOURNAL, &self.staging.join(JOURNAL))?;
            let sizes: BTreeMap<&str, u64> = objects.iter().map(|(rel, size)| (rel.as_str(), *size)).collect();
            let kept = Journal::verified_shards_with(&self.staging, config_sha256, &mut |shard: &ShardInfo| {
                Ok(sizes.get(shard.file.as_str()) == Some(&shard.bytes)
                    && self.remote.sha256(&shard.file)? == shard.sha256)
            })?;
            let keep: Vec<&str> = kept.values().flatten().map(|s| s.file.as_str()).collect();
            for (rel, _) in &objects {
                if rel != JOURNAL && !keep.contains(&rel.as_str()) {
                    self.remote.delete(rel)?;
                }
            }
            return Ok(kept);
        }
        if !objects.is_empty() {
            if !overwrite {
                bail!(
                    "output '{url}' is not empty; pass --overwrite to replace it{}",
                    if has(JOURNAL) { ", or --resume to finish the interrupted run" } else { "" }
                );
            }
            if !has(MANIFEST) && !has(JOURNAL) {
                bail!("refusing to overwrite '{url}': it has no manifest.json or journal, so it does not look like bertpipe output");
            }
            if self.remote.is_bucket_root() {
                bail!("refusing to overwrite '{url}': it is a whole bucket; write shards under a prefix (s3://bucket/NAME)");
            }
            if let Some((rel, _)) = objects.iter().find(|(rel, _)| !crate::contract::manifest::is_layout_file(rel)) {
                bail!(
                    "refusing to overwrite '{url}': it holds '{}', which is not part of bertpipe's output (move it away, or choose another sink.path)",
                    self.remote.url_of(rel)
                );
            }
            // The manifest goes first, so a reader never sees it next to missing shards.
            self.remote.delete(MANIFEST)?;
            for (rel, _) in &objects {
                self.remote.delete(rel)?;
            }
        }
        Ok(BTreeMap::new())
    }

    /// A shard is complete in the staging folder: upload it, then the journal that lists it;
    /// the local copy is removed.
    pub fn shard_done(&self, shard: &ShardInfo) -> Result<()> {
        let local = self.staging.join(&shard.file);
        self.remote.upload(&shard.file, &local)?;
        std::fs::remove_file(&local).ok();
        self.remote.upload(JOURNAL, &self.staging.join(JOURNAL))
    }

    /// Uploads the manifest (written in the staging folder), removes the journal from the
    /// bucket and the staging folder.
    pub fn finish(&self) -> Result<()> {
        self.remote.upload(MANIFEST, &self.staging.join(MANIFEST))?;
        self.remote.delete(JOURNAL)?;
        std::fs::remove_dir_all(&self.staging).ok();
        Ok(())
    }
}

/// A shard folder in a bucket, for readers: downloaded once into the local cache (each shard
/// checked against the manifest's SHA-256 as it arrives; shards already there and intact are
/// not fetched again), then read from disk. Returns the local folder. Its progress is shown:
/// [`fetch_shards_with`] takes the command's `--quiet`.
pub fn fetch_shards(url: &Path) -> Result<PathBuf> {
    fetch_shards_with(url, false)
}

/// As [`fetch_shards`], with the download's progress — a bar on a terminal, a plain `[fetch]`
/// line every [`line_interval`](crate::contract::progress::line_interval) in a log — silenced
/// by `quiet` (the `--quiet` of the command that reads the shards).
pub fn fetch_shards_with(url: &Path, quiet: bool) -> Result<PathBuf> {
    let remote = Remote::open(url)?;
    let local = crate::storage::local_folder(remote.url()).join("shards");
    std::fs::create_dir_all(&local).with_context(|| format!("could not create '{}'", local.display()))?;
    if remote.size(MANIFEST)?.is_none() {
        let unfinished = remote.size(JOURNAL)?.is_some();
        bail!(
            "'{}' is not a finished shard folder (no manifest.json){}",
            remote.url(),
            if unfinished { "; it holds an interrupted run: finish it with `pipeline run … --resume`" } else { "" }
        );
    }
    let manifest_bytes = remote.get(MANIFEST)?;
    let manifest = Manifest::from_json(&manifest_bytes, &remote.url_of(MANIFEST))?;
    let shards: Vec<&ShardInfo> =
        manifest.splits.values().flat_map(|s| &s.shards).chain(&manifest.rejects.shards).collect();
    let progress = Progress::new(quiet, "fetch").counting("shards");
    progress.set_total(Total::Bytes(shards.iter().map(|s| s.bytes).sum()));
    for shard in shards {
        let to = local.join(&shard.file);
        let intact = std::fs::metadata(&to).is_ok_and(|m| m.is_file() && m.len() == shard.bytes)
            && sha256_file(&to).ok().as_deref() == Some(shard.sha256.as_str());
        if !intact {
            let got = remote.download(&shard.file, &to)?;
            if got != shard.sha256 {
                std::fs::remove_file(&to).ok();
                bail!(
                    "checksum mismatch for '{}': the manifest says {}, the object hashes to {got}",
                    remote.url_of(&shard.file),
                    shard.sha256
                );
            }
        }
        progress.advance(shard.bytes, 1);
    }
    progress.finish();
    // The manifest last, as in any shard folder: its presence means every shard is there.
    std::fs::write(local.join(MANIFEST), &manifest_bytes)
        .with_context(|| format!("could not write '{}'", local.join(MANIFEST).display()))?;
    Ok(local)
}
