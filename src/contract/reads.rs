//! What a command actually read: every input file it opens, every folder it lists and every
//! object it fetches goes through this module, which notes it while a recording is on. The
//! chain (`bertpipe run`) records each stage's run and keys the stage by what it read — the
//! content of each file, the names in each listing, the version of each object — instead of by
//! the inputs its configuration declares, which missed whatever was read another way (a
//! model's external data, a corpus a vocabulary learns from, a hidden file a folder source
//! reads). Bazel and Shake discover dependencies the same way; DVC records them as `deps`.
//!
//! Recording is process-wide (a stage's readers run on many threads) and costs one relaxed
//! atomic load per open when off. Caches and a command's own outputs are read with `std::fs`
//! directly: they are not inputs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What one recording saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Files opened for reading (absolute paths).
    pub files: BTreeSet<PathBuf>,
    /// Folders whose entries were listed (absolute paths).
    pub listings: BTreeSet<PathBuf>,
    /// Objects fetched from object storage: URL → the version read (ETag, version id or, for a
    /// store that gives neither, size and modification time).
    pub objects: BTreeMap<String, String>,
}

impl Recorded {
    /// Adds what `other` saw (a task of an array, read back).
    pub fn merge(&mut self, other: Recorded) {
        self.files.extend(other.files);
        self.listings.extend(other.listings);
        self.objects.extend(other.objects);
    }
}

static ON: AtomicBool = AtomicBool::new(false);
static SEEN: Mutex<Option<Recorded>> = Mutex::new(None);

/// Starts recording (what an earlier recording saw is dropped).
pub fn start() {
    *SEEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Recorded::default());
    ON.store(true, Ordering::SeqCst);
}

/// Stops recording and returns what was seen since [`start`] (empty when none was started).
pub fn finish() -> Recorded {
    ON.store(false, Ordering::SeqCst);
    SEEN.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default()
}

/// Whether a recording is on (to skip work that only feeds it).
pub fn recording() -> bool {
    ON.load(Ordering::Relaxed)
}

fn with(f: impl FnOnce(&mut Recorded)) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    if let Some(r) = SEEN.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        f(r);
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Notes that `path` is read (for files another library opens: ONNX Runtime, safetensors).
pub fn note_file(path: &Path) {
    with(|r| {
        r.files.insert(absolute(path));
    });
}

/// Notes that the folder `path` is listed.
pub fn note_listing(path: &Path) {
    with(|r| {
        r.listings.insert(absolute(path));
    });
}

/// Notes that the object at `url` was read at `version`.
pub fn note_object(url: &str, version: &str) {
    with(|r| {
        r.objects.insert(url.to_string(), version.to_string());
    });
}

/// `File::open`, noted.
pub fn open(path: &Path) -> io::Result<File> {
    let f = File::open(path)?;
    note_file(path);
    Ok(f)
}

/// `std::fs::read`, noted.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    let b = std::fs::read(path)?;
    note_file(path);
    Ok(b)
}

/// `std::fs::read_to_string`, noted.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    let s = std::fs::read_to_string(path)?;
    note_file(path);
    Ok(s)
}

/// `std::fs::read_dir`, noted as a listing.
pub fn read_dir(path: &Path) -> io::Result<std::fs::ReadDir> {
    let d = std::fs::read_dir(path)?;
    note_listing(path);
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_read_while_recording_is_noted() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "b").unwrap();
        read(&a).unwrap();
        start();
        read(&b).unwrap();
        read_dir(dir.path()).unwrap();
        assert!(open(&dir.path().join("missing")).is_err());
        note_object("s3://bucket/x.jsonl", "\"etag\"");
        let seen = finish();
        read(&a).unwrap();
        assert_eq!(seen.files.into_iter().collect::<Vec<_>>(), vec![b]);
        assert_eq!(seen.listings.into_iter().collect::<Vec<_>>(), vec![dir.path().to_path_buf()]);
        assert_eq!(seen.objects.len(), 1);
        assert_eq!(finish(), Recorded::default());
    }
}
