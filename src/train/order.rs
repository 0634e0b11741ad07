//! The training order: each epoch is a keyed pseudo-random permutation of the **whole split**,
//! whatever order the corpus was stored in and however it was sharded.
//!
//! Shuffling shard order plus a bounded buffer (what streaming loaders do) cannot mix a corpus
//! stored sorted — aclImdb's reader emits every `neg` review, then every `pos` one, so its
//! shards hold one label each. Like Megatron-LM's indexed datasets, the split is instead copied
//! once into a [`RowStore`]: an uncompressed file of rows plus an index of their offsets, read
//! row by row with positioned reads (`pread`), so any row is one read away and nothing but the
//! rows of the current batch window is held in memory. The order itself costs no memory: a
//! [`Permutation`] maps a position in the epoch to a row with a keyed Feistel network, so
//! position `t` of epoch `e` is known without drawing the `t - 1` before it — which is also
//! what makes resuming mid-epoch exact and immediate.
//!
//! The store lives in bertpipe's cache folder under `rows/`, keyed by the shards' SHA-256s,
//! the split and how rows become examples; a second run on the same shards reuses it, after
//! checking its files against the SHA-256s its `store.json` recorded when it was built.
//!
//! **Temporaries.** A store is built in `rows/.tmp-KEY-OWNER-PID-NANOS/` (`OWNER`: this host
//! and pid namespace, [`owner_tag`]) and renamed into place whole. The folder is scratch
//! ([`crate::contract::interrupt::scratch`]): removed when the build fails, panics or is ended
//! by Ctrl-C or SIGTERM. One left by a process killed outright (SIGKILL, a power cut) is swept
//! by the next training that opens a store there: at once when its owner ran on this host and
//! that process is gone, else once nothing in it has been written for [`STALE_AFTER`].
//!
//! **Pruning** ([`stores_to_prune`]). A store is *used* when a training opens or builds it (its
//! `store.json`'s modification time is set then). After each use `rows/` keeps the store in use
//! and, most recently used first, at most [`KEEP_STORES`] stores in all, within [`KEEP_BYTES`]
//! together; the first one past either limit goes, and every store used less recently than it.
//! A store removed while another training reads it stays readable by that training (its files
//! are open); the next run on those shards builds it again.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::data::Example;

/// A keyed pseudo-random permutation of `0..n`: a balanced Feistel network on the smallest
/// even number of bits that holds `n`, with cycle walking back into range (at most ~4
/// rounds of walking on average, as the domain is below `4n`).
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; ROUNDS],
}

const ROUNDS: usize = 8;

impl Permutation {
    /// The permutation of epoch `epoch` under `seed`.
    pub fn new(n: u64, seed: u64, epoch: u64) -> Permutation {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut rng = crate::rng::Rng::for_key(seed, &[0x4f52_4445, epoch]);
        let keys = std::array::from_fn(|_| rng.next_u64());
        Permutation { n, half_bits, keys }
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The row at position `t` (`t < n`).
    pub fn at(&self, t: u64) -> u64 {
        debug_assert!(t < self.n);
        let mut x = t;
        loop {
            x = self.encrypt(x);
            if x < self.n {
                return x;
            }
        }
    }

    fn encrypt(&self, x: u64) -> u64 {
        let h = self.half_bits;
        let mask = (1u64 << h) - 1;
        let (mut left, mut right) = (x >> h, x & mask);
        for &k in &self.keys {
            let f = mix(right ^ k) & mask;
            (left, right) = (right, left ^ f);
        }
        (left << h) | right
    }
}

/// SplitMix64's finaliser: a strong 64-bit mixing function.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const FORMAT: &str = "bertpipe-rows-2";
const INDEX: &str = "rows.idx";
const DATA: &str = "rows.bin";
const META: &str = "store.json";
/// No row of ours comes near this; a larger span means the store is damaged.
const MAX_ROW_BYTES: u64 = 256 << 20;
/// A store being built: `.tmp-KEY-OWNER-PID-NANOS`.
const TMP_PREFIX: &str = ".tmp-";
/// A store being removed: renamed to `.old-KEY-PID-NANOS` first, so no reader sees half of it.
const OLD_PREFIX: &str = ".old-";
/// The most stores `rows/` keeps, the one in use included (see the module's doc).
pub const KEEP_STORES: usize = 4;
/// The most bytes the stores `rows/` keeps may hold together; the store in use is kept even
/// when it alone is larger.
pub const KEEP_BYTES: u64 = 8 << 30;
/// A temporary store whose owner cannot be asked (another host, or a name without an owner,
/// as builds before owners were recorded left) is stale once nothing in it was written for
/// this long; a live build writes its rows continuously.
pub const STALE_AFTER: Duration = Duration::from_secs(6 * 3600);

/// What a store's `store.json` records.
#[derive(Debug, Serialize, Deserialize)]
struct StoreMeta {
    format: String,
    /// The shard folder and split the rows came from, for people reading the cache.
    data: String,
    split: String,
    rows: u64,
    bytes: u64,
    /// SHA-256 of `rows.idx` and of `rows.bin`, as written: checked on every open, so a store
    /// edited in the cache (same sizes, other bytes) is rebuilt, not trained on.
    index_sha256: String,
    data_sha256: String,
}

/// SHA-256 of a file's bytes, read a megabyte at a time.
fn file_sha256(f: &File) -> Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = f.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok(hex::encode(h.finalize()));
        }
        h.update(&buf[..n]);
        at += n as u64;
    }
}

/// A split's examples in training-ready form, with random access by position.
pub struct RowStore {
    dir: PathBuf,
    index: File,
    data: File,
    rows: u64,
    bytes: u64,
}

impl RowStore {
    /// The store for `key` (see [`store_key`]) under `base`: opened when a complete one is
    /// there, else built from `examples` (written aside and renamed into place, so a crash or
    /// a concurrent run never leaves a half store where a whole one is expected). Stale
    /// temporaries of dead builds are swept first, and the stores past the keeping policy are
    /// removed after (see the module's doc).
    pub fn open_or_build(
        base: &Path,
        key: &str,
        about: (&Path, &str),
        examples: impl FnOnce(&mut dyn FnMut(&Example) -> Result<()>) -> Result<()>,
    ) -> Result<RowStore> {
        sweep(base, SystemTime::now());
        let dir = base.join(key);
        let store = match RowStore::open(&dir) {
            Ok(store) => store,
            Err(_) => RowStore::build(base, key, about, examples)?,
        };
        store.touch();
        prune(base, key);
        Ok(store)
    }

    fn build(
        base: &Path,
        key: &str,
        about: (&Path, &str),
        examples: impl FnOnce(&mut dyn FnMut(&Example) -> Result<()>) -> Result<()>,
    ) -> Result<RowStore> {
        let dir = base.join(key);
        if dir.exists() {
            retire(base, &dir)
                .with_context(|| format!("could not remove the incomplete row store '{}'", dir.display()))?;
        }
        std::fs::create_dir_all(base).with_context(|| format!("could not create '{}'", base.display()))?;
        let nanos = SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        // Scratch until renamed: removed on an error, a panic, or a signal that ends the process.
        let tmp = crate::contract::interrupt::scratch(base.join(format!(
            "{TMP_PREFIX}{key}-{}-{}-{nanos}",
            owner_tag(),
            std::process::id()
        )));
        std::fs::create_dir_all(tmp.path()).with_context(|| format!("could not create '{}'", tmp.path().display()))?;
        write_store(tmp.path(), about, examples)?;
        // Another run that finished the same store first wins the rename: theirs is used, and
        // ours goes with the guard.
        let _ = std::fs::rename(tmp.path(), &dir);
        drop(tmp);
        RowStore::open(&dir)
    }

    /// Marks the store used now (its `store.json`'s modification time), for [`prune`]'s order.
    fn touch(&self) {
        let meta = self.dir.join(META);
        if let Ok(f) = std::fs::File::options().write(true).open(&meta) {
            let _ = f.set_modified(SystemTime::now());
        }
    }

    /// A complete store, checked for consistency (its files' sizes agree with its record).
    pub fn open(dir: &Path) -> Result<RowStore> {
        let meta_path = dir.join(META);
        let meta: StoreMeta = serde_json::from_slice(
            &std::fs::read(&meta_path).with_context(|| format!("could not read '{}'", meta_path.display()))?,
        )
        .with_context(|| format!("'{}' is not a row store record", meta_path.display()))?;
        if meta.format != FORMAT {
            bail!("'{}' is format `{}`, not `{FORMAT}`", dir.display(), meta.format);
        }
        let index = File::open(dir.join(INDEX))?;
        let data = File::open(dir.join(DATA))?;
        let index_len = index.metadata()?.len();
        if Some(index_len) != meta.rows.checked_add(1).and_then(|n| n.checked_mul(8))
            || data.metadata()?.len() != meta.bytes
        {
            bail!("the row store '{}' is incomplete (its files do not match store.json)", dir.display());
        }
        // A few hundred milliseconds for a large split (SHA-256 runs at 1–2 GB/s), against a
        // training of minutes: its bytes are the ones written.
        if file_sha256(&index)? != meta.index_sha256 || file_sha256(&data)? != meta.data_sha256 {
            bail!("the row store '{}' changed since it was built (its SHA-256 differs from store.json)", dir.display());
        }
        Ok(RowStore { dir: dir.to_path_buf(), index, data, rows: meta.rows, bytes: meta.bytes })
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The example at position `i` of the store.
    pub fn get(&self, i: u64) -> Result<Example> {
        if i >= self.rows {
            bail!("row {i} is past the end of the row store '{}' ({} rows)", self.dir.display(), self.rows);
        }
        let mut span = [0u8; 16];
        self.index.read_exact_at(&mut span, i * 8).with_context(|| self.damaged())?;
        let start = u64::from_le_bytes(span[..8].try_into().expect("8 bytes"));
        let end = u64::from_le_bytes(span[8..].try_into().expect("8 bytes"));
        if end < start || end - start > MAX_ROW_BYTES || end > self.bytes {
            bail!("{}: row {i} spans bytes {start}..{end}", self.damaged());
        }
        let mut buf = vec![0u8; (end - start) as usize];
        self.data.read_exact_at(&mut buf, start).with_context(|| self.damaged())?;
        decode(&buf).with_context(|| format!("{}: row {i}", self.damaged()))
    }

    /// Each row's token count, in store order, from the index and each row's 12-byte header
    /// (its split index, then the length of its ids) — without reading or decoding the rows.
    pub fn tokens_per_row(&self) -> Result<Vec<u32>> {
        let mut index = vec![0u8; (self.rows as usize + 1) * 8];
        self.index.read_exact_at(&mut index, 0).with_context(|| self.damaged())?;
        let offsets: Vec<u64> =
            index.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        let mut header = [0u8; 12];
        offsets
            .windows(2)
            .enumerate()
            .map(|(i, span)| {
                if span[1] < span[0].saturating_add(12) || span[1] > self.bytes {
                    bail!("{}: row {i} spans bytes {}..{}", self.damaged(), span[0], span[1]);
                }
                self.data.read_exact_at(&mut header, span[0]).with_context(|| self.damaged())?;
                Ok(u32::from_le_bytes(header[8..].try_into().expect("4 bytes")))
            })
            .collect()
    }

    fn damaged(&self) -> String {
        format!("the row store '{}' is damaged (delete it and it is rebuilt)", self.dir.display())
    }
}

/// The store's name: a digest of everything that decides its contents.
pub fn store_key(split: &str, shard_digests: &[&str], kind: &str) -> String {
    let mut h = Sha256::new();
    for part in [FORMAT, split, kind].into_iter().chain(shard_digests.iter().copied()) {
        h.update(part.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())[..24].to_string()
}

/// Test hook `BERTPIPE_PAUSE_AFTER_SHARDS=N`: a row store being built waits after copying the
/// rows of N shards until the process is ended from outside (a second Ctrl-C, SIGTERM or
/// SIGKILL; the first Ctrl-C of a training only asks it to stop at its next step), so a test
/// can end a build at a known point and check what it leaves.
pub fn pause_point(shards_copied: usize) {
    if crate::contract::test_hook("BERTPIPE_PAUSE_AFTER_SHARDS") == Some(shards_copied as u64) {
        eprintln!("row store paused after {shards_copied} shards (BERTPIPE_PAUSE_AFTER_SHARDS)");
        loop {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Who builds a temporary store, in its name: 8 hex digits of the host's name and this
/// process's pid namespace, so a pid in the name is only looked up where it means something.
pub fn owner_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer it is given.
        let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8_lossy(&buf[..end]).into_owned()
        } else {
            String::new()
        };
        let namespace = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
        let mut h = Sha256::new();
        h.update(host.as_bytes());
        h.update([0]);
        h.update(namespace.as_bytes());
        hex::encode(h.finalize())[..8].to_string()
    })
}

/// The owner (tag, pid) a temporary store's name records; `None` for a name without one.
fn tmp_owner(name: &str) -> Option<(&str, u32)> {
    let parts: Vec<&str> = name.strip_prefix(TMP_PREFIX)?.split('-').collect();
    match parts[..] {
        [_key, tag, pid, _nanos] => Some((tag, pid.parse().ok()?)),
        _ => None,
    }
}

/// Whether a temporary store is stale: its owner is this host's (`here`) and its process is
/// gone, or — owner elsewhere or unknown — nothing was written in it for [`STALE_AFTER`]. A live
/// process on this host keeps its temporary however long it takes.
pub fn is_stale(owner: Option<(&str, u32)>, here: &str, alive: impl Fn(u32) -> bool, idle: Duration) -> bool {
    match owner {
        Some((tag, pid)) if tag == here => !alive(pid),
        _ => idle >= STALE_AFTER,
    }
}

/// Whether process `pid` exists on this host (signal 0 checks without sending anything).
fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) }
}

/// How long since anything in `dir` (the folder or a file directly in it) was written.
fn idle_for(dir: &Path, now: SystemTime) -> Duration {
    let newest = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .chain(std::fs::metadata(dir).ok().and_then(|m| m.modified().ok()))
        .max();
    newest.map_or(Duration::ZERO, |t| now.duration_since(t).unwrap_or(Duration::ZERO))
}

/// Removes what dead work left under `base`: stale temporary stores ([`is_stale`]) and stores
/// whose removal was cut short (`.old-*`). Best effort: what cannot be removed stays.
fn sweep(base: &Path, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let gone = if name.starts_with(OLD_PREFIX) {
            true
        } else if name.starts_with(TMP_PREFIX) {
            is_stale(tmp_owner(&name), owner_tag(), pid_alive, idle_for(&path, now))
        } else {
            false
        };
        if gone {
            crate::contract::interrupt::remove_path(&path);
        }
    }
}

/// A complete store under `rows/`, as the keeping policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedStore {
    /// The folder's name: the store's key.
    pub name: String,
    /// When a training last opened or built it.
    pub last_used: SystemTime,
    pub bytes: u64,
}

/// The keeping policy (the module's doc): the stores to remove, given the ones there and the
/// one in use. The store in use always stays; the others, most recently used first (ties by
/// name), stay while the kept ones number at most `keep` and hold at most `max_bytes`; the
/// first that does not fit goes, and so does every store used less recently than it.
pub fn stores_to_prune(stores: &[CachedStore], in_use: &str, keep: usize, max_bytes: u64) -> Vec<String> {
    let mut others: Vec<&CachedStore> = stores.iter().filter(|s| s.name != in_use).collect();
    others.sort_by(|a, b| b.last_used.cmp(&a.last_used).then_with(|| a.name.cmp(&b.name)));
    let (mut count, mut bytes) = (1usize, stores.iter().find(|s| s.name == in_use).map_or(0, |s| s.bytes));
    let mut full = false;
    let mut gone = Vec::new();
    for s in others {
        full = full || count >= keep || bytes.saturating_add(s.bytes) > max_bytes;
        if full {
            gone.push(s.name.clone());
        } else {
            count += 1;
            bytes += s.bytes;
        }
    }
    gone
}

/// Whether `name` is a store's folder name (a [`store_key`]: 24 hex digits).
fn is_store_name(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The complete stores under `base` (folders named like a key), with their last use and size.
fn cached_stores(base: &Path) -> Vec<CachedStore> {
    let Ok(entries) = std::fs::read_dir(base) else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if !is_store_name(&name) || !path.is_dir() {
            continue;
        }
        // A folder without a record (damaged) counts as used longest ago.
        let last_used = std::fs::metadata(path.join(META)).and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
        let bytes = std::fs::read_dir(&path)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum();
        out.push(CachedStore { name, last_used, bytes });
    }
    out
}

/// Applies the keeping policy to `base` after `in_use` was used. Best effort.
fn prune(base: &Path, in_use: &str) {
    for name in stores_to_prune(&cached_stores(base), in_use, KEEP_STORES, KEEP_BYTES) {
        let _ = retire(base, &base.join(name));
    }
}

/// Removes a store folder: renamed out of the way first (so a reader sees all of it or none),
/// then deleted; a removal cut short is finished by the next [`sweep`].
fn retire(base: &Path, dir: &Path) -> Result<()> {
    let nanos = SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let old = base.join(format!("{OLD_PREFIX}{name}-{}-{nanos}", std::process::id()));
    match std::fs::rename(dir, &old) {
        Ok(()) => std::fs::remove_dir_all(&old).with_context(|| format!("could not remove '{}'", old.display())),
        // Gone already (another run retired it).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("could not move '{}' aside", dir.display())),
    }
}

fn write_store(
    dir: &Path,
    (data_dir, split): (&Path, &str),
    examples: impl FnOnce(&mut dyn FnMut(&Example) -> Result<()>) -> Result<()>,
) -> Result<()> {
    let mut data = BufWriter::new(File::create(dir.join(DATA))?);
    let mut index = BufWriter::new(File::create(dir.join(INDEX))?);
    let (mut at, mut rows) = (0u64, 0u64);
    index.write_all(&0u64.to_le_bytes())?;
    let (mut data_sha, mut index_sha) = (Sha256::new(), Sha256::new());
    index_sha.update(0u64.to_le_bytes());
    let mut buf = Vec::new();
    examples(&mut |e: &Example| {
        buf.clear();
        encode(e, &mut buf);
        data.write_all(&buf)?;
        data_sha.update(&buf);
        at += buf.len() as u64;
        rows += 1;
        index.write_all(&at.to_le_bytes())?;
        index_sha.update(at.to_le_bytes());
        Ok(())
    })?;
    data.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    index.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let meta = StoreMeta {
        format: FORMAT.into(),
        data: data_dir.display().to_string(),
        split: split.into(),
        rows,
        bytes: at,
        index_sha256: hex::encode(index_sha.finalize()),
        data_sha256: hex::encode(data_sha.finalize()),
    };
    std::fs::write(dir.join(META), serde_json::to_vec_pretty(&meta)?)?;
    Ok(())
}

fn put_u32s(out: &mut Vec<u8>, xs: &[u32]) {
    out.extend_from_slice(&(xs.len() as u32).to_le_bytes());
    for x in xs {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// One example as bytes: index, ids with their segment bytes, label, NSP label, static masks,
/// packing boundaries, row id and document id.
fn encode(e: &Example, out: &mut Vec<u8>) {
    out.extend_from_slice(&e.index.to_le_bytes());
    put_u32s(out, &e.input_ids);
    out.extend(e.token_type_ids.iter().map(|&t| t as u8));
    out.extend_from_slice(&e.label.map_or(-1i64, |l| l as i64).to_le_bytes());
    out.extend_from_slice(&e.nsp_label.map_or(-1i64, |l| l as i64).to_le_bytes());
    put_u32s(out, &e.masked_positions);
    put_u32s(out, &e.masked_ids);
    put_u32s(out, &e.doc_boundaries);
    put_str(out, &e.id);
    put_str(out, &e.doc_id);
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            bail!("a record ends early");
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn u32s(&mut self) -> Result<Vec<u32>> {
        let n = self.u32()? as usize;
        Ok(self
            .take(n.checked_mul(4).context("a length overflows")?)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }
    fn string(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        Ok(std::str::from_utf8(self.take(n)?).context("an id is not UTF-8")?.to_string())
    }
}

fn decode(bytes: &[u8]) -> Result<Example> {
    let mut r = Reader(bytes);
    let index = r.i64()? as u64;
    let input_ids = r.u32s()?;
    let token_type_ids = r.take(input_ids.len())?.iter().map(|&t| t as u32).collect();
    let label = r.i64()?;
    let nsp = r.i64()?;
    let e = Example {
        index,
        input_ids,
        token_type_ids,
        label: (label >= 0).then_some(label as usize),
        nsp_label: (nsp >= 0).then_some(nsp as u32),
        masked_positions: r.u32s()?,
        masked_ids: r.u32s()?,
        doc_boundaries: r.u32s()?,
        id: r.string()?,
        doc_id: r.string()?,
    };
    if !r.0.is_empty() {
        bail!("a record has {} bytes left over", r.0.len());
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_bijections_and_differ_by_epoch() {
        for n in [1u64, 2, 3, 7, 64, 65, 1000, 4097] {
            let p = Permutation::new(n, 7, 0);
            let mut seen = vec![false; n as usize];
            for t in 0..n {
                let x = p.at(t) as usize;
                assert!(!seen[x], "n {n}: {x} twice");
                seen[x] = true;
            }
            assert!(seen.iter().all(|&s| s), "n {n}");
        }
        let (a, b) = (Permutation::new(1000, 7, 0), Permutation::new(1000, 7, 1));
        let same = (0..1000).filter(|&t| a.at(t) == b.at(t)).count();
        assert!(same < 10, "epochs 0 and 1 agree at {same} positions");
        let c = Permutation::new(1000, 8, 0);
        assert!((0..1000).filter(|&t| a.at(t) == c.at(t)).count() < 10);
        // Not the identity, nor anything close to a shift: neighbours land far apart.
        let near = (0..999).filter(|&t| a.at(t).abs_diff(a.at(t + 1)) < 10).count();
        assert!(near < 40, "{near} neighbouring positions map to rows under 10 apart");
    }

    #[test]
    fn a_store_returns_what_was_written_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let examples: Vec<Example> = (0..50u64)
            .map(|i| Example {
                index: i * 2,
                input_ids: (0..(i as u32 % 7 + 1)).map(|t| t + 100).collect(),
                token_type_ids: (0..(i as u32 % 7 + 1)).map(|t| t % 2).collect(),
                label: (i % 3 != 0).then_some(i as usize % 2),
                nsp_label: (i % 2 == 0).then_some(1),
                masked_positions: vec![1, 2],
                masked_ids: vec![7, 8],
                doc_boundaries: if i % 5 == 0 { vec![0, 3] } else { vec![] },
                id: format!("row-{i}"),
                doc_id: format!("doc-{}", i / 2),
            })
            .collect();
        let build = |xs: &[Example]| {
            let xs = xs.to_vec();
            RowStore::open_or_build(dir.path(), "k", (Path::new("data"), "train"), move |put| {
                xs.iter().try_for_each(put)
            })
            .unwrap()
        };
        let store = build(&examples);
        assert_eq!(store.rows(), 50);
        // The token counts from the rows' headers are the decoded rows' (1 to 7 tokens).
        let lengths: Vec<u32> = examples.iter().map(|e| e.input_ids.len() as u32).collect();
        assert_eq!(store.tokens_per_row().unwrap(), lengths);
        for (i, e) in examples.iter().enumerate() {
            let got = store.get(i as u64).unwrap();
            assert_eq!(format!("{got:?}"), format!("{e:?}"));
        }
        assert!(store.get(50).is_err());
        // Reopened, not rebuilt: a store built from nothing would have 0 rows.
        assert_eq!(build(&[]).rows(), 50);
        // A truncated data file is noticed on open, and the store is rebuilt.
        let data = dir.path().join("k").join(DATA);
        let len = std::fs::metadata(&data).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&data).unwrap().set_len(len - 3).unwrap();
        assert!(RowStore::open(&dir.path().join("k")).is_err());
        assert_eq!(build(&examples[..5]).rows(), 5);
        // A byte changed at the same size (a label, a token): refused on open and rebuilt, not
        // read as if it were the shards' rows.
        let len = std::fs::metadata(&data).unwrap().len();
        let mut bytes = std::fs::read(&data).unwrap();
        bytes[len as usize / 2] ^= 1;
        std::fs::write(&data, &bytes).unwrap();
        let e = RowStore::open(&dir.path().join("k")).err().unwrap().to_string();
        assert!(e.contains("changed since it was built"), "{e}");
        let rebuilt = build(&examples[..5]);
        assert_eq!(format!("{:?}", rebuilt.get(2).unwrap()), format!("{:?}", examples[2]));
    }

    fn store(name: &str, used_secs_ago: u64, bytes: u64) -> CachedStore {
        let last_used = SystemTime::now() - Duration::from_secs(used_secs_ago);
        CachedStore { name: name.into(), last_used, bytes }
    }

    #[test]
    fn the_keeping_policy_keeps_the_store_in_use_and_the_most_recently_used_within_both_limits() {
        let stores = [
            store("a", 50, 10),
            store("b", 10, 10),
            store("c", 40, 10),
            store("d", 30, 10),
            store("e", 20, 10),
            store("f", 60, 10),
        ];
        // Four in all: `a` (in use, however old), then b, e, d by last use.
        let mut gone = stores_to_prune(&stores, "a", 4, u64::MAX);
        gone.sort();
        assert_eq!(gone, ["c", "f"]);
        // The size cap: 35 bytes hold the store in use and two more; the first that does not
        // fit goes with every store used before it, even one small enough to fit.
        let sized = [store("in", 0, 15), store("new", 1, 10), store("big", 2, 100), store("small", 3, 1)];
        let mut gone = stores_to_prune(&sized, "in", 10, 35);
        gone.sort();
        assert_eq!(gone, ["big", "small"]);
        // The store in use stays even past the cap alone; with nothing else there, nothing goes.
        assert_eq!(stores_to_prune(&[store("huge", 0, 1000)], "huge", 4, 10), Vec::<String>::new());
        assert_eq!(stores_to_prune(&sized, "in", 1, u64::MAX).len(), 3);
    }

    #[test]
    fn a_temporary_is_stale_when_its_process_is_gone_or_long_idle_elsewhere() {
        let name = format!(".tmp-{}-{}-4242-17", "0".repeat(24), owner_tag());
        assert_eq!(tmp_owner(&name), Some((owner_tag(), 4242)));
        assert_eq!(tmp_owner(".tmp-0123-4242-17"), None, "a name from before owners were recorded");
        let (here, hour) = (owner_tag(), Duration::from_secs(3600));
        let dead = |_: u32| false;
        let live = |_: u32| true;
        assert!(is_stale(Some((here, 1)), here, dead, Duration::ZERO), "this host's dead process");
        assert!(!is_stale(Some((here, 1)), here, live, 100 * hour), "a live process keeps its temporary");
        assert!(!is_stale(Some(("elsewhere", 1)), here, dead, hour), "another host's: only by age");
        assert!(is_stale(Some(("elsewhere", 1)), here, live, STALE_AFTER));
        assert!(!is_stale(None, here, dead, hour) && is_stale(None, here, dead, STALE_AFTER));
        assert!(pid_alive(std::process::id()) && !pid_alive(0) && !pid_alive(u32::MAX));
    }

    #[test]
    fn opening_a_store_sweeps_dead_temporaries_and_prunes_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let one =
            |i: u64| Example { index: i, input_ids: vec![1, 2, 3], token_type_ids: vec![0; 3], ..Default::default() };
        let build = |key: &str| {
            RowStore::open_or_build(base, key, (Path::new("data"), "train"), |put| {
                (0..3).map(one).try_for_each(|e| put(&e))
            })
            .unwrap()
        };
        let keys: Vec<String> =
            (0..6).map(|i| store_key("train", &[format!("shard-{i}").as_str()], "classify:2")).collect();
        for (i, key) in keys.iter().enumerate() {
            build(key.as_str());
            // Distinct last uses, oldest first.
            let meta = base.join(key).join(META);
            let when = SystemTime::now() - Duration::from_secs(1000 - i as u64 * 10);
            std::fs::File::options().write(true).open(&meta).unwrap().set_modified(when).unwrap();
        }
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(base)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let mut want: Vec<String> = keys[keys.len() - KEEP_STORES..].to_vec();
        want.sort();
        assert_eq!(names(), want, "{KEEP_STORES} stores kept, the most recently used");
        // Opening the oldest again makes it the most recently used: when a store is built
        // next (`keys[0]`, pruned before), the least recently used of the others goes.
        build(keys[2].as_str());
        build(keys[0].as_str());
        assert!(base.join(&keys[0]).is_dir() && base.join(&keys[2]).is_dir(), "{:?}", names());
        assert!(!base.join(&keys[3]).exists(), "{:?}", names());
        // What dead work left: a temporary of a process gone on this host, a removal cut short.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = child.id();
        child.wait().unwrap();
        let dead = base.join(format!(".tmp-{}-{}-{gone_pid}-1", keys[1], owner_tag()));
        let live = base.join(format!(".tmp-{}-{}-{}-2", keys[1], owner_tag(), std::process::id()));
        let old = base.join(format!(".old-{}-1-2", keys[1]));
        for d in [&dead, &live, &old] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join(DATA), b"rows").unwrap();
        }
        build(keys[5].as_str());
        assert!(!dead.exists() && !old.exists(), "{:?}", names());
        assert!(live.exists(), "a live build's temporary stays");
        // A build that panics leaves no temporary behind.
        let r = std::panic::catch_unwind(|| {
            RowStore::open_or_build(base, &"f".repeat(24), (Path::new("data"), "train"), |_| panic!("mid-build"))
        });
        assert!(r.is_err());
        assert!(!names().iter().any(|n| n.starts_with(".tmp-") && !live.ends_with(n)), "{:?}", names());
    }
}
