//! Content digests of files and folders, with a stat cache.
//!
//! A file's digest is the SHA-256 of its bytes. Hashing a corpus on every run would cost a read
//! of all of it, so digests are cached by what `stat` says of the file — size, modification and
//! status-change times in nanoseconds, inode and device — the way git's index and DVC's state
//! database cache theirs: an unchanged tree costs one `stat` per file. A restored modification
//! time cannot hide a change (writing or `touch -d` moves the status-change time, which no
//! user call sets), and a file touched without a change hashes to the digest it had.
//!
//! **Racy entries.** Timestamps advance in coarse ticks, so a file written twice within one
//! tick can keep its stat data across a change. Like git, an entry is trusted only when the file
//! was last changed well before it was hashed ([`RACY_NS`]); a file hashed right after it was
//! written is hashed again next time, and trusted from then on.
//!
//! A folder of outputs digests as every file under it (hidden temporaries aside): each one's
//! path relative to the folder and its digest, in sorted order. An input is digested as what
//! was read of it ([`crate::contract::reads`]): a file by its bytes, a listed folder by the
//! names in it ([`listing`]), an object by its version; a folder named as an input is not
//! walked (its files are keyed when the stage reads them, so a file it does not read — a
//! `README` beside a corpus, a link to another disk — keys nothing). A missing path digests as
//! missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A cache entry is trusted only if the file's last change came this long before it was hashed.
pub const RACY_NS: u128 = 2_000_000_000;

/// What `stat` says of a file, as far as the cache compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Stat {
    size: u64,
    mtime_ns: u128,
    ctime_ns: u128,
    ino: u64,
    dev: u64,
}

impl Stat {
    fn of(meta: &std::fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| (s.max(0) as u128) * 1_000_000_000 + n.max(0) as u128;
        Stat {
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(into = "Row", from = "Row")]
struct Entry {
    stat: Stat,
    /// When the digest was taken (ns since the epoch).
    hashed_ns: u128,
    sha256: String,
}

/// An entry as the cache file stores it: a plain array (size, mtime_ns, ctime_ns, inode,
/// device, hashed_ns, sha256), a third the size of named fields for a 100k-file corpus.
#[derive(Serialize, Deserialize)]
struct Row(u64, u128, u128, u64, u64, u128, String);

impl From<Entry> for Row {
    fn from(e: Entry) -> Row {
        let s = e.stat;
        Row(s.size, s.mtime_ns, s.ctime_ns, s.ino, s.dev, e.hashed_ns, e.sha256)
    }
}

impl From<Row> for Entry {
    fn from(r: Row) -> Entry {
        let stat = Stat { size: r.0, mtime_ns: r.1, ctime_ns: r.2, ino: r.3, dev: r.4 };
        Entry { stat, hashed_ns: r.5, sha256: r.6 }
    }
}

impl Entry {
    /// Whether the entry still vouches for a file `stat` describes: the same stat data, taken
    /// well after the file's last change (see the module's note on racy entries).
    fn vouches_for(&self, stat: &Stat) -> bool {
        self.stat == *stat && self.hashed_ns > stat.ctime_ns.max(stat.mtime_ns) + RACY_NS
    }
}

/// Trees of at least this many files show a progress bar while they are looked up.
const PROGRESS_FILES: usize = 5_000;

/// A file's digest, and the cache entry to keep when it had to be hashed.
type Lookup = Result<(String, Option<Entry>)>;

/// Digests by absolute path, kept in a file between runs.
#[derive(Debug, Default)]
pub struct Digests {
    entries: BTreeMap<PathBuf, Entry>,
    /// Where the cache is saved; `None` keeps it in memory only.
    file: Option<PathBuf>,
    /// No progress bar while hashing.
    quiet: bool,
    changed: bool,
    /// Files hashed (not served from the cache) and their bytes, for reports.
    pub hashed_files: u64,
    pub hashed_bytes: u64,
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    format: String,
    entries: BTreeMap<PathBuf, Entry>,
}

const FORMAT: &str = "bertpipe-digests/2";

fn now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

impl Digests {
    /// The cache saved in `file`; an absent or unreadable cache starts empty (it only saves
    /// work, never decides anything by itself).
    pub fn open(file: &Path, quiet: bool) -> Digests {
        let entries = std::fs::read(file)
            .ok()
            .and_then(|b| serde_json::from_slice::<OnDisk>(&b).ok())
            .filter(|d| d.format == FORMAT)
            .map(|d| d.entries)
            .unwrap_or_default();
        Digests { entries, file: Some(file.to_path_buf()), quiet, ..Default::default() }
    }

    /// Saves the cache (whole or not at all) when anything was hashed since the last save; with
    /// `prune`, when anything was hashed this run, first drops the entries of files that no
    /// longer exist (a `stat` per entry: done once a run, not after every stage).
    pub fn save(&mut self, prune: bool) -> Result<()> {
        let Some(file) = &self.file else { return Ok(()) };
        let prune = prune && self.hashed_files > 0;
        if !self.changed && !prune {
            return Ok(());
        }
        if prune {
            self.entries.retain(|p, _| p.exists());
        }
        let on_disk = OnDisk { format: FORMAT.into(), entries: std::mem::take(&mut self.entries) };
        let bytes = serde_json::to_vec(&on_disk)?;
        self.entries = on_disk.entries;
        crate::contract::write_file_atomic(file, &bytes)?;
        self.changed = false;
        Ok(())
    }

    /// The SHA-256 of one file's bytes (what [`Self::tree`] does for each file, one at a time).
    pub fn file(&mut self, path: &Path) -> Result<String> {
        let (sha256, fresh) = self.lookup(path)?;
        self.keep(path.to_path_buf(), fresh);
        Ok(sha256)
    }

    /// A file's digest from the cache when an entry vouches for it, else hashed (the new entry
    /// returned, to [`Self::keep`]). Reads the cache only, so files are looked up in parallel.
    fn lookup(&self, path: &Path) -> Lookup {
        let meta = std::fs::metadata(path).with_context(|| format!("could not read '{}'", path.display()))?;
        let stat = Stat::of(&meta);
        if let Some(e) = self.entries.get(path).filter(|e| e.vouches_for(&stat)) {
            return Ok((e.sha256.clone(), None));
        }
        let hashed_ns = now_ns();
        let sha256 = crate::contract::checksum::sha256_file(path)?;
        Ok((sha256.clone(), Some(Entry { stat, hashed_ns, sha256 })))
    }

    fn keep(&mut self, path: PathBuf, fresh: Option<Entry>) {
        if let Some(e) = fresh {
            self.hashed_files += 1;
            self.hashed_bytes += e.stat.size;
            self.entries.insert(path, e);
            self.changed = true;
        }
    }

    /// Every file under `path` (itself if a file) with its digest, by path relative to `path`
    /// (`""` for a file), sorted. Hidden temporaries (`.name.tmp`, `.tmp-…`, `.old-…`) are left
    /// out: they are work in progress, never an output. Files are looked up (and hashed) on
    /// every core, with a progress bar for a large tree (a first run over a corpus of many
    /// files reads all of them).
    pub fn tree(&mut self, path: &Path) -> Result<BTreeMap<String, String>> {
        let mut files = Vec::new();
        collect_files(path, path, &mut files)?;
        self.lookup_all(files)
    }

    /// The digests of `files` (relative name, path), by name: looked up (and hashed) on every
    /// core, with a progress bar when there are many.
    pub fn lookup_all(&mut self, files: Vec<(String, PathBuf)>) -> Result<BTreeMap<String, String>> {
        use crate::contract::progress::{Progress, Total};
        use rayon::prelude::*;
        let progress = Progress::new(self.quiet || files.len() < PROGRESS_FILES, "hashing");
        progress.set_total(Total::Files(files.len() as u64));
        // In chunks, so the bar is touched once per 256 files, not per file.
        let found: Vec<(String, PathBuf, Lookup)> = files
            .par_chunks(256)
            .flat_map_iter(|chunk| {
                let looked: Vec<_> =
                    chunk.iter().map(|(rel, abs)| (rel.clone(), abs.clone(), self.lookup(abs))).collect();
                progress.advance(0, chunk.len() as u64);
                looked
            })
            .collect();
        progress.finish();
        let mut out = BTreeMap::new();
        for (rel, abs, looked) in found {
            let (sha256, fresh) = looked?;
            self.keep(abs, fresh);
            out.insert(rel, sha256);
        }
        Ok(out)
    }

    /// What a stage's key takes of a path its configuration names as an input: a file's
    /// digest; for a folder only that it is one (what the stage reads in it is keyed by its
    /// read set, [`crate::contract::reads`]); for object storage the version of the object, or
    /// of every object under the prefix (ETags, as a local file's content); `missing` when
    /// there is nothing there.
    pub fn input(&mut self, path: &Path) -> Result<String> {
        if crate::storage::is_remote(path) {
            // A prefix lists its objects; an object lists nothing and answers HEAD (asked
            // second: some stores fail a HEAD of a prefix rather than say "not found").
            let remote = crate::storage::Remote::open(path)?;
            let all = remote.versions()?;
            if !all.is_empty() {
                return Ok(format!("objects {}", digest_of_tree(&all.into_iter().collect())));
            }
            return Ok(match remote.version("")? {
                Some(v) => format!("object {v}"),
                None => "missing".into(),
            });
        }
        match std::fs::metadata(path) {
            Err(_) => Ok("missing".into()),
            Ok(m) if m.is_dir() => Ok("folder".into()),
            Ok(_) => self.file(path),
        }
    }
}

/// The digest of a folder's listing: its entries' names and kinds (file, folder, link,
/// other), sorted — what a reader that lists the folder saw, whatever it then opened.
/// `missing` when there is no folder at `path`.
pub fn listing(path: &Path) -> Result<String> {
    let entries = match std::fs::read_dir(path) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok("missing".into()),
        Err(e) => return Err(e).with_context(|| format!("could not list '{}'", path.display())),
    };
    let mut names = Vec::new();
    for e in entries {
        let e = e.with_context(|| format!("could not list '{}'", path.display()))?;
        let t = e.file_type().with_context(|| format!("could not list '{}'", path.display()))?;
        let kind = if t.is_symlink() {
            "link"
        } else if t.is_dir() {
            "folder"
        } else if t.is_file() {
            "file"
        } else {
            "other"
        };
        names.push((e.file_name().to_string_lossy().into_owned(), kind.to_string()));
    }
    Ok(digest_of_tree(&names.into_iter().collect()))
}

/// The digest of a tree listing (relative path → digest).
pub fn digest_of_tree(tree: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (rel, sha) in tree {
        h.update((rel.len() as u64).to_le_bytes());
        h.update(rel.as_bytes());
        h.update(sha.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Whether a file name is a writer's temporary rather than an output.
fn is_temporary(name: &str) -> bool {
    crate::contract::temp_target(name).is_some() || name.starts_with(".tmp-") || name.starts_with(".old-")
}

fn collect_files(root: &Path, path: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("could not read '{}'", path.display()))?;
    if meta.is_file() {
        let rel = path.strip_prefix(root).unwrap_or(path);
        out.push((rel.to_string_lossy().replace('\\', "/"), path.to_path_buf()));
        return Ok(());
    }
    if !meta.is_dir() {
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .with_context(|| format!("could not list '{}'", path.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("could not list '{}'", path.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if is_temporary(&e.file_name().to_string_lossy()) {
            continue;
        }
        collect_files(root, &e.path(), out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(path: &Path, secs: u64) {
        // Make a file look written `secs` ago, as a test cannot wait out RACY_NS.
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
        std::fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
    }

    #[test]
    fn a_change_at_equal_size_and_restored_mtime_is_seen_and_a_touch_is_not_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("corpus.jsonl");
        std::fs::write(&f, "{\"label\": 0}\n").unwrap();
        let mut d = Digests::default();
        let first = d.file(&f).unwrap();
        // Trust the entry (as if hashed long after the write), so only stat data can unseat it.
        d.entries.get_mut(&f).unwrap().hashed_ns += 10 * RACY_NS;
        let meta = std::fs::metadata(&f).unwrap();
        // Same size, mtime restored (as `touch -d` would): the status-change time moved.
        std::fs::write(&f, "{\"label\": 1}\n").unwrap();
        std::fs::File::options().write(true).open(&f).unwrap().set_modified(meta.modified().unwrap()).unwrap();
        let second = d.file(&f).unwrap();
        assert_ne!(first, second, "a same-size change behind a restored mtime");
        // A touch changes the stat data but not the digest.
        age(&f, 0);
        assert_eq!(d.file(&f).unwrap(), second);
    }

    #[test]
    fn a_trusted_entry_costs_no_read_and_a_racy_one_is_hashed_again() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, "x").unwrap();
        let mut d = Digests::default();
        d.file(&f).unwrap();
        // Written just now: racy, hashed again.
        d.file(&f).unwrap();
        assert_eq!(d.hashed_files, 2);
        // Pretend the entry was taken long after the file's last change: trusted.
        d.entries.get_mut(&f).unwrap().hashed_ns += 10 * RACY_NS;
        d.file(&f).unwrap();
        assert_eq!(d.hashed_files, 2);
    }

    #[test]
    fn folders_digest_their_files_by_relative_path_without_temporaries_and_the_cache_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("out");
        std::fs::create_dir_all(a.join("train")).unwrap();
        std::fs::write(a.join("manifest.json"), "{}").unwrap();
        std::fs::write(a.join("train/part-00000.parquet"), "rows").unwrap();
        let cache = dir.path().join("digests.json");
        let mut d = Digests::open(&cache, true);
        let before = digest_of_tree(&d.tree(&a).unwrap());
        std::fs::write(a.join(".manifest.json.77-0.tmp"), "half").unwrap();
        std::fs::create_dir_all(a.join(".tmp-checkpoint-3")).unwrap();
        assert_eq!(digest_of_tree(&d.tree(&a).unwrap()), before, "temporaries are not outputs");
        std::fs::rename(a.join("train/part-00000.parquet"), a.join("train/part-00001.parquet")).unwrap();
        assert_ne!(digest_of_tree(&d.tree(&a).unwrap()), before, "a renamed file changes the folder");
        assert_eq!(d.input(&dir.path().join("nothing")).unwrap(), "missing");
        assert_eq!(d.input(&a).unwrap(), "folder", "a folder input is keyed by what is read in it");
        d.save(true).unwrap();
        let again = Digests::open(&cache, true);
        assert_eq!(again.entries.len(), 2);
    }

    #[test]
    fn a_listing_digests_names_and_kinds_and_not_contents() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.jsonl"), "1").unwrap();
        let before = listing(d).unwrap();
        std::fs::write(d.join("a.jsonl"), "2").unwrap();
        assert_eq!(listing(d).unwrap(), before, "contents are the files' own digests");
        std::fs::write(d.join(".old-b.jsonl"), "3").unwrap();
        assert_ne!(listing(d).unwrap(), before, "a hidden file is a file of the listing");
        assert_eq!(listing(&d.join("nothing")).unwrap(), "missing");
    }
}
