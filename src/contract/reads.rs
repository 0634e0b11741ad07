//! What a command actually read: every input file it opens, every folder it lists and every
//! object it fetches goes through this module, which notes it while a recording is on. The
//! chain (`bertpipe run`) records each stage's run and keys the stage by what it read — the
//! content of each file, the names in each listing, the version of each object — instead of by
//! the inputs its configuration declares, which missed whatever was read another way (a
//! model's external data, a corpus a vocabulary learns from, a hidden file a folder source
//! reads). Bazel and Shake discover dependencies the same way; DVC records them as `deps`.
//!
//! Each file is noted with its [`Stamp`] — what `stat` said of it when it was opened — so a file
//! changed while the command ran is told apart from the one it read (the chain then keys the
//! stage as changed, never as the bytes found afterwards). A look for a file that is not there
//! ([`is_file`]) is noted too: a file that appears where none was is a change.
//!
//! Recording is process-wide (a stage's readers run on many threads) and costs one relaxed
//! atomic load per open when off. Caches and a command's own outputs are read with `std::fs`
//! directly: they are not inputs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// What `stat` says of a file, as far as telling a change goes: size, modification and
/// status-change times (ns) and inode. The status-change time moves with any write and no user
/// call sets it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub ino: u64,
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
        Stamp {
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
        }
    }

    /// The file's stamp now; `None` when it cannot be read.
    pub fn now(path: &Path) -> Option<Stamp> {
        std::fs::metadata(path).ok().filter(|m| m.is_file()).map(|m| Stamp::of(&m))
    }
}

/// What one recording saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Files opened for reading (absolute paths), each with its stamp when it was first opened
    /// (`None` when it could not be taken).
    pub files: BTreeMap<PathBuf, Option<Stamp>>,
    /// Files looked for and not found (absolute paths).
    pub absent: BTreeSet<PathBuf>,
    /// Folders whose entries were listed (absolute paths).
    pub listings: BTreeSet<PathBuf>,
    /// Objects fetched from object storage: URL → the version read (ETag, version id or, for a
    /// store that gives neither, size and modification time).
    pub objects: BTreeMap<String, String>,
}

impl Recorded {
    /// Adds what `other` saw (a task of an array, read back).
    pub fn merge(&mut self, other: Recorded) {
        for (p, stamp) in other.files {
            self.files.entry(p).or_insert(stamp);
        }
        self.absent.extend(other.absent);
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

/// Notes that `path` is read (for files another library opens: ONNX Runtime, safetensors),
/// stamped now.
pub fn note_file(path: &Path) {
    if recording() {
        note_stamped(path, Stamp::now(path));
    }
}

fn note_stamped(path: &Path, stamp: Option<Stamp>) {
    with(|r| {
        r.files.entry(absolute(path)).or_insert(stamp);
    });
}

/// `path.is_file()`, noted: a file found is noted when it is read; a file looked for and not
/// there is noted as absent.
pub fn is_file(path: &Path) -> bool {
    let found = path.is_file();
    if !found {
        with(|r| {
            r.absent.insert(absolute(path));
        });
    }
    found
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

/// `File::open`, noted with the open file's stamp.
pub fn open(path: &Path) -> io::Result<File> {
    let f = File::open(path)?;
    if recording() {
        note_stamped(path, f.metadata().ok().map(|m| Stamp::of(&m)));
    }
    Ok(f)
}

/// `std::fs::read`, noted with the file's stamp as it was read.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = open(path)?;
    let mut b = Vec::with_capacity(f.metadata().map_or(0, |m| m.len() as usize));
    f.read_to_end(&mut b)?;
    Ok(b)
}

/// Bumped by [`forget_folders`]: a folder [`read_in_folder`] keeps open from an earlier read
/// is opened again by its path.
static FOLDERS_FORGOTTEN: AtomicU64 = AtomicU64::new(0);

/// Makes every thread's next [`read_in_folder`] open its folder by path again. A source calls
/// it as a read begins: a folder kept open since an earlier read (a thread that outlives one
/// read, as in a long-lived process) may have been renamed away and another made under its
/// path, and the kept handle would still read the old one.
pub fn forget_folders() {
    FOLDERS_FORGOTTEN.fetch_add(1, Ordering::Relaxed);
}

/// [`read`] for the many small files of a folder corpus, which a worker reads one after another
/// from the same few folders. The file is opened relative to its folder, kept open per thread
/// (`openat`: the kernel does not walk the whole path again for every file), read through a
/// per-thread buffer into a vector of its exact size (no `statx` for a size hint, no `lseek`,
/// and no spare capacity held by every document in flight), and `stat`ed only while a
/// recording wants its stamp: 4 system calls a file instead of 7. On the short-review corpus of
/// `benches/pipeline_shapes.sh` (20,000 files of ~150 bytes) reading was a third of the run.
/// A source that reads through it calls [`forget_folders`] as each read begins.
pub fn read_in_folder(path: &Path) -> io::Result<Vec<u8>> {
    use std::cell::RefCell;
    use std::ffi::CString;
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;

    const SCRATCH: usize = 64 * 1024;
    thread_local! {
        /// The folder opened last on this thread, under which [`forget_folders`] count.
        static FOLDER: RefCell<Option<(u64, PathBuf, File)>> = const { RefCell::new(None) };
        static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return read(path) };
    let Ok(name) = CString::new(name.as_bytes()) else { return read(path) };
    let fd = FOLDER.with_borrow_mut(|folder| -> io::Result<i32> {
        let at = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        let open_folder =
            || std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_PATH).open(at);
        let mut fresh = false;
        let generation = FOLDERS_FORGOTTEN.load(Ordering::Relaxed);
        // Compared as bytes: `Path`'s `==` parses both into components for every file (0.65% of
        // a run on short reviews). Two spellings of one folder only open it again.
        if folder
            .as_ref()
            .is_none_or(|(g, d, _)| *g != generation || d.as_os_str().as_bytes() != dir.as_os_str().as_bytes())
        {
            *folder = Some((generation, dir.to_path_buf(), open_folder()?));
            fresh = true;
        }
        loop {
            let (_, _, handle) = folder.as_ref().expect("set above");
            // SAFETY: `name` is a NUL-terminated string and `handle` an open folder.
            let fd = unsafe { libc::openat(handle.as_raw_fd(), name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd >= 0 {
                return Ok(fd);
            }
            let e = io::Error::last_os_error();
            // A folder kept open from an earlier file may have been removed since and made
            // again under the same path: the path decides, as `File::open` would. (One renamed
            // away still answers; [`forget_folders`] covers that between reads.)
            if fresh || !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESTALE)) {
                return Err(e);
            }
            *folder = Some((generation, dir.to_path_buf(), open_folder()?));
            fresh = true;
        }
    })?;
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    if recording() {
        note_stamped(path, file.metadata().ok().map(|m| Stamp::of(&m)));
    }
    BUFFER.with_borrow_mut(|buf| {
        buf.resize(SCRATCH, 0);
        let mut len = 0;
        loop {
            match file.read(&mut buf[len..]) {
                Ok(0) => return Ok(buf[..len].to_vec()),
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if len == buf.len() {
                // Larger than the buffer: the rest is read straight into the result.
                let mut out = buf[..len].to_vec();
                file.read_to_end(&mut out)?;
                return Ok(out);
            }
        }
    })
}

/// `std::fs::read_to_string`, noted with the file's stamp as it was read.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// `path.is_dir()`, noted: a folder found is noted when it is listed; a folder looked for and
/// not there is noted as absent.
pub fn is_dir(path: &Path) -> bool {
    let found = path.is_dir();
    if !found {
        with(|r| {
            r.absent.insert(absolute(path));
        });
    }
    found
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

    /// Files of every size come back whole (the per-thread buffer is 64 KiB), a missing one is
    /// an error, and a folder removed and made again under the same path — with the old one
    /// still held open by this thread — is read from the path, as `File::open` reads it.
    #[test]
    fn folder_reads_are_whole_and_follow_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("f");
        std::fs::create_dir(&folder).unwrap();
        for n in [0usize, 1, 65_535, 65_536, 65_537, 200_000] {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            let p = folder.join(format!("{n}.txt"));
            std::fs::write(&p, &bytes).unwrap();
            assert_eq!(read_in_folder(&p).unwrap(), bytes, "{n} bytes");
        }
        assert_eq!(read_in_folder(&folder.join("none.txt")).unwrap_err().kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&folder).unwrap();
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("new.txt"), "again").unwrap();
        assert_eq!(read_in_folder(&folder.join("new.txt")).unwrap(), b"again");
        // A folder of the same name elsewhere (relative to another folder) is another folder.
        let other = dir.path().join("g");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("new.txt"), "other").unwrap();
        assert_eq!(read_in_folder(&other.join("new.txt")).unwrap(), b"other");
    }

    /// A folder renamed away, with another made under its path, still answers through the
    /// handle this thread keeps: the next read (after `forget_folders`) reads the path's.
    #[test]
    fn a_folder_renamed_away_is_read_by_its_path_after_forget_folders() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("f");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("1.txt"), "old").unwrap();
        assert_eq!(read_in_folder(&folder.join("1.txt")).unwrap(), b"old");
        std::fs::rename(&folder, dir.path().join("f.old")).unwrap();
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("1.txt"), "new").unwrap();
        forget_folders();
        assert_eq!(read_in_folder(&folder.join("1.txt")).unwrap(), b"new");
    }

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
        assert!(!is_file(&dir.path().join("absent.json")));
        note_object("s3://bucket/x.jsonl", "\"etag\"");
        let seen = finish();
        read(&a).unwrap();
        assert_eq!(seen.files.keys().cloned().collect::<Vec<_>>(), vec![b.clone()]);
        assert_eq!(seen.files[&b], Stamp::now(&b), "stamped when read");
        assert_eq!(seen.absent.into_iter().collect::<Vec<_>>(), vec![dir.path().join("absent.json")]);
        assert_eq!(seen.listings.into_iter().collect::<Vec<_>>(), vec![dir.path().to_path_buf()]);
        assert_eq!(seen.objects.len(), 1);
        assert_eq!(finish(), Recorded::default());
    }
}
