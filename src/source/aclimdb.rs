//! `aclimdb`: the Large Movie Review Dataset, as its folder tree or as the original
//! `aclImdb_v1.tar.gz` read as a stream (never unpacked).

use std::ffi::OsString;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{Emit, InvalidUtf8, PendingFile, RecordMeta, SourceItem, Split};
use crate::contract::partition::Partition;
use crate::contract::progress::Total;

/// A label folder's file count, and its names while they fit ([`AclImdb::list_within`]).
type Listing = Result<(usize, Option<Vec<OsString>>)>;

/// A folder's listing is kept for reading while its names fit in this many bytes (each of IMDb's
/// folders, unsup's 50,000 too); past that only counted, and listed again while it is read, so
/// memory does not hold every name of a large corpus at once.
const KEEP_LISTED: usize = 8 << 20;

/// Listings started by [`AclImdb::list_early`], by folder, until a read takes them.
static EARLY: std::sync::Mutex<Vec<(PathBuf, std::thread::JoinHandle<Listing>)>> = std::sync::Mutex::new(Vec::new());

/// The listings [`AclImdb::list_early`] started: those no read has taken are dropped with it, so
/// a later run in the same process lists its folders afresh.
#[must_use = "the listings are dropped with it"]
pub struct EarlyListing {
    dirs: Vec<PathBuf>,
}

impl Drop for EarlyListing {
    /// Waits for the listings no read took (a run that stopped before reading): none outlives
    /// its run, to note its folder in the read log of whatever the process records next.
    fn drop(&mut self) {
        let untaken: Vec<_> = {
            let mut early = EARLY.lock().unwrap_or_else(|e| e.into_inner());
            self.dirs
                .iter()
                .filter_map(|dir| early.iter().position(|(d, _)| d == dir).map(|at| early.swap_remove(at).1))
                .collect()
        };
        for listing in untaken {
            let _ = listing.join();
        }
    }
}

/// A listing thread's result; its panic goes on in the caller.
fn joined(result: std::thread::Result<Listing>) -> Listing {
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Read aclImdb: `{train,test}/{neg,pos,unsup}/<id>_<rating>.txt`. Files in a label folder
/// whose name does not have that shape (a rating of 0–10) go to the rejects (`bad_file_name`),
/// as do reviews whose rating contradicts their folder (`rating_disagrees`); the dataset's other
/// files (`urls_*.txt`, `*.feat`, `imdb.vocab`, README) are not reviews and are not read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AclImdb {
    /// The `aclImdb` folder (or its parent), or `aclImdb_v1.tar.gz`.
    pub path: PathBuf,
    /// Splits to read, in this order: `train`, `test`.
    #[serde(default = "default_splits")]
    pub splits: Vec<String>,
    /// Label folders to read, in this order: `neg` (label 0), `pos` (1), `unsup` (no label,
    /// train only).
    #[serde(default = "default_labels")]
    pub labels: Vec<LabelDir>,
    /// `replace` (default) or `reject` reviews that are not valid UTF-8.
    #[serde(default)]
    pub on_invalid_utf8: InvalidUtf8,
    /// Re-split what is read: one name, or fractions (`{train: 0.95, validation: 0.05}`)
    /// assigned by a stable hash of the review id and the pipeline seed. Default: the folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LabelDir {
    Neg,
    Pos,
    Unsup,
}

impl LabelDir {
    fn name(self) -> &'static str {
        match self {
            LabelDir::Neg => "neg",
            LabelDir::Pos => "pos",
            LabelDir::Unsup => "unsup",
        }
    }

    fn label(self) -> Option<i64> {
        match self {
            LabelDir::Neg => Some(0),
            LabelDir::Pos => Some(1),
            LabelDir::Unsup => None,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [LabelDir::Neg, LabelDir::Pos, LabelDir::Unsup].into_iter().find(|l| l.name() == s)
    }
}

fn default_splits() -> Vec<String> {
    vec!["train".into(), "test".into()]
}

fn default_labels() -> Vec<LabelDir> {
    vec![LabelDir::Neg, LabelDir::Pos]
}

/// `123_9.txt` → (123, 9). Both are plain ASCII digits (no sign: Rust's `parse` would take
/// `+3`); ratings are 0–10 (1–10 in the labelled folders, 0 in `unsup`) written without a
/// leading zero, as the dataset writes them (`010` is not a rating).
fn parse_file_name(name: &str) -> Option<(u64, i8)> {
    let stem = name.strip_suffix(".txt")?;
    let (id, rating) = stem.split_once('_')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(id) || !digits(rating) || (rating.len() > 1 && rating.starts_with('0')) {
        return None;
    }
    Some((id.parse().ok()?, rating.parse().ok().filter(|r| (0..=10).contains(r))?))
}

/// A rating its folder contradicts: aclImdb's `neg` reviews are rated ≤ 4 and its `pos`
/// reviews ≥ 7, so a `pos/…_2.txt` was moved or renamed and its label (the folder's) is in
/// doubt. 5 and 6 (absent from the dataset) are left to the folder.
fn disagreement(label: LabelDir, rating: i8) -> Option<String> {
    let contradicts = match label {
        LabelDir::Neg => rating >= 7,
        LabelDir::Pos => (0..=4).contains(&rating),
        LabelDir::Unsup => false,
    };
    contradicts.then(|| format!("rating_disagrees:rating {rating} in {}", label.name()))
}

pub fn is_tarball(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".tar.gz") || name.ends_with(".tgz")
}

impl AclImdb {
    pub fn check(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        for s in &self.splits {
            if s != "train" && s != "test" {
                problems.push(("splits", format!("unknown split `{s}`: aclImdb has `train` and `test`")));
            }
        }
        if self.splits.is_empty() {
            problems.push(("splits", "no splits selected".into()));
        }
        if self.labels.is_empty() {
            problems.push(("labels", "no labels selected".into()));
        }
        problems
    }

    /// Reads the reviews of `part`: a contiguous range of the review files in reading order.
    pub fn read(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        if is_tarball(&self.path) {
            self.read_tarball(part, out)
        } else {
            self.read_folder(part, out)
        }
    }

    /// The review's metadata, and why it is rejected unread: a name without the
    /// `<id>_<rating>.txt` shape, or a rating its folder contradicts.
    fn meta(
        &self,
        split: &str,
        label: LabelDir,
        name: &str,
        origin: String,
        input_bytes: u64,
    ) -> (RecordMeta, Option<String>) {
        let parsed = parse_file_name(name);
        let reject = match parsed {
            None => Some(format!("bad_file_name:{name}")),
            Some((_, rating)) => disagreement(label, rating),
        };
        let id = match parsed {
            Some(_) => format!("{split}/{}/{}", label.name(), name.trim_end_matches(".txt")),
            None => format!("{split}/{}/{name}", label.name()),
        };
        let meta = RecordMeta {
            id,
            split: split.to_string(),
            label: label.label(),
            rating: parsed.map(|(_, r)| r),
            origin,
            input_bytes,
        };
        (meta, reject)
    }

    fn root(&self) -> Result<PathBuf> {
        let p = &self.path;
        if crate::storage::is_remote(p) {
            bail!(
                "'{}': an aclImdb folder in object storage is 100,000 small objects; upload aclImdb_v1.tar.gz and point source.path at it",
                p.display()
            );
        }
        if p.join("train").is_dir() || p.join("test").is_dir() {
            return Ok(p.clone());
        }
        if p.join("aclImdb").is_dir() {
            return Ok(p.join("aclImdb"));
        }
        bail!(
            "'{}' is not an aclImdb folder: expected train/ and test/ inside it (or pass the aclImdb_v1.tar.gz)",
            p.display()
        )
    }

    /// The label folders to read, in order; a missing one is an error, except `test/unsup`.
    fn label_dirs(&self, root: &Path) -> Result<Vec<(String, LabelDir, PathBuf)>> {
        let mut dirs = Vec::new();
        for split in &self.splits {
            for &label in &self.labels {
                let dir = root.join(split).join(label.name());
                // A folder looked for is noted when it is not there: one that appears later is a
                // change to what this source reads (`test/unsup`, which may be missing).
                if crate::contract::reads::is_dir(&dir) {
                    dirs.push((split.clone(), label, dir));
                } else if dir.exists() {
                    bail!(
                        "'{}' is not a folder: aclImdb keeps each label's reviews in a folder of that name (move the file away, or set source.splits / source.labels to read only what is there)",
                        dir.display()
                    );
                } else if !(label == LabelDir::Unsup && split == "test") {
                    bail!(
                        "'{}' is missing: not a complete aclImdb folder (set source.splits / source.labels to read only what is there)",
                        dir.display()
                    );
                }
            }
        }
        Ok(dirs)
    }

    /// The files of one label folder, in id order (names without an id last, by name). The
    /// directory entries' types come with the listing (no `stat` per file on the file systems
    /// that report them; others fall back to one).
    fn list(dir: &Path) -> Result<Vec<OsString>> {
        let (_, files) = Self::list_within(dir, usize::MAX)?;
        Ok(files.expect("no limit"))
    }

    /// How many files one label folder holds, and [`Self::list`]'s names while they take at
    /// most `keep` bytes (past that only the count: a huge folder is listed again as it is read).
    /// Names are kept as the file system gives them: a name that is not UTF-8 is rejected by its
    /// lossy spelling, but read (for the reject's text) by its own.
    fn list_within(dir: &Path, keep: usize) -> Result<(usize, Option<Vec<OsString>>)> {
        let (mut count, mut bytes, mut files) = (0usize, 0usize, Some(Vec::new()));
        for entry in
            crate::contract::reads::read_dir(dir).with_context(|| format!("could not list '{}'", dir.display()))?
        {
            let entry = entry.with_context(|| format!("could not list '{}'", dir.display()))?;
            let kind = entry.file_type().with_context(|| format!("could not list '{}'", dir.display()))?;
            // A symbolic link to a file is read as that file.
            if !(kind.is_file() || (kind.is_symlink() && entry.path().is_file())) {
                continue;
            }
            count += 1;
            if let Some(kept) = &mut files {
                let name = entry.file_name();
                bytes += name.len() + std::mem::size_of::<OsString>();
                if bytes <= keep {
                    kept.push(name);
                } else {
                    files = None;
                }
            }
        }
        if let Some(files) = &mut files {
            files.sort_by_cached_key(|name| {
                let id = name.to_str().and_then(parse_file_name).map_or(u64::MAX, |(id, _)| id);
                (id, name.clone())
            });
        }
        Ok((count, files))
    }

    /// Starts listing this source's label folders on threads of their own, for the next
    /// [`Self::read`] of the same folders to take ([`EarlyListing`]); `None` where there is
    /// nothing to start (a tarball, a folder that is not there: `read` says what is wrong).
    pub fn list_early(&self) -> Option<EarlyListing> {
        if is_tarball(&self.path) {
            return None;
        }
        let dirs: Vec<PathBuf> = self.label_dirs(&self.root().ok()?).ok()?.into_iter().map(|(_, _, d)| d).collect();
        let mut early = EARLY.lock().unwrap_or_else(|e| e.into_inner());
        for dir in &dirs {
            let at = dir.clone();
            early.push((dir.clone(), std::thread::spawn(move || Self::list_within(&at, KEEP_LISTED))));
        }
        Some(EarlyListing { dirs })
    }

    fn read_folder(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        crate::contract::reads::forget_folders();
        let root = self.root()?;
        let dirs = self.label_dirs(&root)?;
        // The file count (for progress, and for this part's range) takes one listing pass, of
        // every folder at once: the workers wait for it (20,000 names took ~5 ms in a row), so
        // `pipeline run` starts it before it loads the vocabulary ([`Self::list_early`]).
        let early: Vec<_> = {
            let mut started = EARLY.lock().unwrap_or_else(|e| e.into_inner());
            dirs.iter()
                .map(|(_, _, dir)| started.iter().position(|(d, _)| d == dir).map(|at| started.swap_remove(at).1))
                .collect()
        };
        let listings: Vec<Listing> = std::thread::scope(|s| {
            let pending: Vec<_> = dirs
                .iter()
                .zip(early)
                .map(|((_, _, dir), early)| early.ok_or_else(|| s.spawn(move || Self::list_within(dir, KEEP_LISTED))))
                .collect();
            pending
                .into_iter()
                .map(|listing| match listing {
                    Ok(started_early) => joined(started_early.join()),
                    Err(started_now) => joined(started_now.join()),
                })
                .collect()
        });
        let (mut counts, mut listed) = (Vec::with_capacity(dirs.len()), Vec::with_capacity(dirs.len()));
        for listing in listings {
            let (count, files) = listing?;
            counts.push(count);
            listed.push(files);
        }
        let range = part.range(counts.iter().sum());
        out.total(Total::Files(range.len() as u64));
        let mut first = 0usize; // index of the folder's first file among all files
        for (((split, label, dir), n), listed) in dirs.into_iter().zip(counts).zip(listed) {
            let (lo, hi) = (range.start.max(first), range.end.min(first + n));
            first += n;
            if lo >= hi {
                continue;
            }
            let files = match listed {
                Some(files) => files,
                None => Self::list(&dir)?,
            };
            if files.len() != n {
                bail!("'{}' changed while being read ({n} files, then {})", dir.display(), files.len());
            }
            for name in files.into_iter().skip(lo - (first - n)).take(hi - lo) {
                let path = dir.join(&name);
                // The size is known once the file is read (`PendingFile::load`).
                let (meta, reject) = self.meta(&split, label, &name.to_string_lossy(), path.display().to_string(), 0);
                // With several workers, opened and read by the worker that cleans it: reading
                // 50,000 small files on this one thread was the floor under every pipeline.
                let file = PendingFile { meta, path, policy: self.on_invalid_utf8, reject };
                out.emit(if out.reads_files() { SourceItem::File(file) } else { file.load()? })?;
            }
        }
        Ok(())
    }

    /// The tarball's bytes, streamed from disk or from a bucket, and its size.
    fn open_tarball(&self) -> Result<(Box<dyn Read + Send>, u64)> {
        if crate::storage::is_remote(&self.path) {
            let remote = crate::storage::Remote::open(&self.path)?;
            let size = remote.size("")?.with_context(|| format!("'{}' does not exist", remote.url()))?;
            return Ok((Box::new(remote.reader("")?), size));
        }
        let file = crate::contract::reads::open(&self.path)
            .with_context(|| format!("could not open '{}'", self.path.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok((Box::new(file), size))
    }

    /// The review entries of the tarball (one pass of decompression), for a task's range.
    fn count_tarball_reviews(&self) -> Result<usize> {
        let (file, _) = self.open_tarball()?;
        let mut archive = tar::Archive::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, file)));
        let mut n = 0;
        for entry in archive.entries().with_context(|| format!("'{}' is not a readable tar.gz", self.path.display()))? {
            let entry = entry.with_context(|| format!("corrupt archive '{}'", self.path.display()))?;
            if Self::counted(entry.header().entry_type()) && self.review_entry(&entry.path()?).is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Tarball entries a label folder's count includes: files, and links (which a stream
    /// cannot follow: each is a reject, so it is counted rather than lost).
    fn counted(kind: tar::EntryType) -> bool {
        kind.is_file() || kind.is_symlink() || kind.is_hard_link()
    }

    /// `(split, label, file name)` of a tarball entry this source reads, or `None`. A file name
    /// that is not UTF-8 is kept (lossily, as a folder's is) so it becomes a `bad_file_name`
    /// reject instead of vanishing.
    fn review_entry<'p>(&self, path: &'p Path) -> Option<(&'p str, LabelDir, std::borrow::Cow<'p, str>)> {
        let parts: Vec<&std::ffi::OsStr> = path.iter().collect();
        let n = parts.len();
        if n < 3 {
            return None;
        }
        let (split, label_name, name) = (parts[n - 3].to_str()?, parts[n - 2].to_str()?, parts[n - 1]);
        let label = LabelDir::parse(label_name)?;
        let wanted = (split == "train" || split == "test")
            && self.splits.iter().any(|s| s == split)
            && self.labels.contains(&label);
        wanted.then(|| (split, label, name.to_string_lossy()))
    }

    fn read_tarball(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        // A task of an array decompresses the whole stream twice (to count, then to read its
        // range): a gzip stream cannot be entered in the middle.
        let range = if part.is_whole() { 0..usize::MAX } else { part.range(self.count_tarball_reviews()?) };
        let (file, size) = self.open_tarball()?;
        out.total(Total::Bytes(size));
        let mut index = 0usize;
        let consumed = Arc::new(AtomicU64::new(0));
        let counting = CountingReader { inner: BufReader::with_capacity(1 << 20, file), count: consumed.clone() };
        let mut archive = tar::Archive::new(flate2::read::MultiGzDecoder::new(counting));
        let mut reported = 0u64;
        let entries =
            archive.entries().with_context(|| format!("'{}' is not a readable tar.gz", self.path.display()))?;
        for entry in entries {
            let mut entry = entry.with_context(|| format!("corrupt archive '{}'", self.path.display()))?;
            let kind = entry.header().entry_type();
            if !Self::counted(kind) {
                continue;
            }
            let path = entry.path()?.into_owned();
            let Some((split, label, name)) = self.review_entry(&path) else {
                continue;
            };
            index += 1;
            if !range.contains(&(index - 1)) {
                if index > range.end {
                    break;
                }
                continue;
            }
            // A link's target is elsewhere in the stream (or outside it): it is not followed,
            // and the link is a reject of its own.
            let mut link = None;
            let mut bytes = Vec::new();
            if kind.is_file() {
                // The header's size is only a hint (a crafted one can claim terabytes): the
                // buffer grows with what is really read.
                bytes.reserve(entry.size().min(1 << 24) as usize);
                entry
                    .read_to_end(&mut bytes)
                    .with_context(|| format!("could not read '{}' in '{}'", path.display(), self.path.display()))?;
            } else {
                let target = entry.link_name().ok().flatten().map(|t| t.display().to_string()).unwrap_or_default();
                link = Some(format!("link_in_tarball:{target}"));
            }
            let now = consumed.load(Ordering::Relaxed);
            let origin = format!("{}:{}", self.path.display(), path.display());
            let (meta, reject) = self.meta(split, label, &name, origin, now - reported);
            reported = now;
            if let Some(reason) = link.or(reject) {
                out.emit(meta.reject(reason, String::from_utf8_lossy(&bytes).into_owned()))?;
                continue;
            }
            out.emit(meta.into_item(bytes, self.on_invalid_utf8))?;
        }
        Ok(())
    }
}

struct CountingReader<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(parse_file_name("123_9.txt"), Some((123, 9)));
        assert_eq!(parse_file_name("0_0.txt"), Some((0, 0)));
        assert_eq!(parse_file_name("123.txt"), None);
        assert_eq!(parse_file_name("123_9.feat"), None);
        assert_eq!(parse_file_name("a_b.txt"), None);
        assert_eq!(parse_file_name("7_10.txt"), Some((7, 10)));
        assert_eq!(parse_file_name("7_11.txt"), None, "ratings are 0-10");
        assert_eq!(parse_file_name("7_-1.txt"), None);
        for signed_or_padded in ["7_+3.txt", "7_-0.txt", "7_03.txt", "7_010.txt", "7_00.txt", "+7_3.txt", "7_ 3.txt"] {
            assert_eq!(parse_file_name(signed_or_padded), None, "{signed_or_padded}");
        }
        assert_eq!(parse_file_name("007_3.txt"), Some((7, 3)), "an id may have leading zeros");
    }

    /// A folder's count is every file (a link to a file too, not a subfolder), its names come
    /// in id order while they fit the budget, and past it only the count is kept.
    #[test]
    fn a_listing_keeps_names_within_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["10_3.txt", "9_1.txt", "notes.txt", "100_2.txt"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        std::fs::create_dir(dir.path().join("5_5.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("9_1.txt"), dir.path().join("2_4.txt")).unwrap();
        let want = ["2_4.txt", "9_1.txt", "10_3.txt", "100_2.txt", "notes.txt"];
        let (n, files) = AclImdb::list_within(dir.path(), usize::MAX).unwrap();
        assert_eq!((n, files.unwrap()), (5, want.map(OsString::from).to_vec()));
        let fits: usize = want.iter().map(|f| f.len() + std::mem::size_of::<OsString>()).sum();
        assert!(AclImdb::list_within(dir.path(), fits).unwrap().1.is_some());
        assert_eq!(AclImdb::list_within(dir.path(), fits - 1).unwrap(), (5, None));
        assert_eq!(AclImdb::list(dir.path()).unwrap(), want.map(OsString::from).to_vec());
        assert!(
            format!("{:#}", AclImdb::list_within(&dir.path().join("none"), 1).unwrap_err()).contains("could not list")
        );
    }

    struct Ids(Vec<String>);
    impl Emit for Ids {
        fn emit(&mut self, item: SourceItem) -> Result<()> {
            self.0.push(item.id().to_string());
            Ok(())
        }
    }

    fn ids(source: &AclImdb) -> Vec<String> {
        let mut ids = Ids(Vec::new());
        source.read(Partition::WHOLE, &mut ids).unwrap();
        ids.0
    }

    /// Listings started early are what the next read takes (the same documents in the same
    /// order), and those no read took go with their guard: a later read lists afresh and sees
    /// a file added meanwhile.
    #[test]
    fn early_listings_are_the_next_reads_and_go_with_their_guard() {
        let dir = tempfile::tempdir().unwrap();
        for split in ["train", "test"] {
            for (label, rating) in [("neg", 2), ("pos", 9)] {
                let folder = dir.path().join(split).join(label);
                std::fs::create_dir_all(&folder).unwrap();
                for id in [3, 1, 20] {
                    std::fs::write(folder.join(format!("{id}_{rating}.txt")), format!("{split} {label} {id}")).unwrap();
                }
            }
        }
        let source = AclImdb {
            path: dir.path().to_path_buf(),
            splits: default_splits(),
            labels: vec![LabelDir::Neg, LabelDir::Pos],
            on_invalid_utf8: InvalidUtf8::default(),
            split: None,
        };
        let plain = ids(&source);
        assert_eq!(plain.len(), 12);
        let early = source.list_early().expect("a folder tree");
        assert_eq!(ids(&source), plain);
        assert!(EARLY.lock().unwrap().iter().all(|(d, _)| !d.starts_with(dir.path())), "the read took them");
        drop(early);

        // A label "folder" that is a file is said to be one, not missing (and nothing is listed).
        std::fs::write(dir.path().join("test/unsup"), "x").unwrap();
        let with_unsup = AclImdb {
            splits: vec!["test".into()],
            labels: vec![LabelDir::Neg, LabelDir::Pos, LabelDir::Unsup],
            ..source.clone()
        };
        assert!(with_unsup.list_early().is_none());
        let err = format!("{:#}", with_unsup.read(Partition::WHOLE, &mut Ids(Vec::new())).unwrap_err());
        assert!(err.contains("test/unsup' is not a folder"), "{err}");
        std::fs::remove_file(dir.path().join("test/unsup")).unwrap();

        let early = source.list_early().expect("a folder tree");
        assert_eq!(EARLY.lock().unwrap().iter().filter(|(d, _)| d.starts_with(dir.path())).count(), 4);
        drop(early);
        assert!(EARLY.lock().unwrap().iter().all(|(d, _)| !d.starts_with(dir.path())), "the guard dropped them");
        std::fs::write(dir.path().join("train/neg/7_1.txt"), "new").unwrap();
        let after = ids(&source);
        assert_eq!(after.len(), 13, "{after:?}");
    }

    /// A file name that is not UTF-8 is rejected under its lossy spelling, with its own text:
    /// not the text of another file whose name is that spelling.
    #[test]
    fn a_name_that_is_not_utf8_is_read_by_its_own_bytes() {
        use std::os::unix::ffi::OsStrExt;
        struct Texts(Vec<(String, String)>);
        impl Emit for Texts {
            fn emit(&mut self, item: SourceItem) -> Result<()> {
                if let SourceItem::Reject(r) = item {
                    self.0.push((r.reason, r.text));
                }
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("train/neg");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(std::ffi::OsStr::from_bytes(b"30\xff_1.txt")), "raw").unwrap();
        std::fs::write(folder.join("30\u{FFFD}_1.txt"), "replacement").unwrap();
        let source = AclImdb {
            path: dir.path().to_path_buf(),
            splits: vec!["train".into()],
            labels: vec![LabelDir::Neg],
            on_invalid_utf8: InvalidUtf8::default(),
            split: None,
        };
        let mut texts = Texts(Vec::new());
        source.read(Partition::WHOLE, &mut texts).unwrap();
        texts.0.sort();
        let reason = "bad_file_name:30\u{FFFD}_1.txt".to_string();
        assert_eq!(texts.0, [(reason.clone(), "raw".to_string()), (reason, "replacement".to_string())]);
    }

    #[test]
    fn ratings_the_folder_contradicts() {
        for r in 0..=10 {
            assert_eq!(disagreement(LabelDir::Neg, r).is_some(), r >= 7, "neg {r}");
            assert_eq!(disagreement(LabelDir::Pos, r).is_some(), r <= 4, "pos {r}");
            assert_eq!(disagreement(LabelDir::Unsup, r), None);
        }
        assert_eq!(disagreement(LabelDir::Neg, 9).unwrap(), "rating_disagrees:rating 9 in neg");
    }
}
