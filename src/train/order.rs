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
//! the split and how rows become examples; a second run on the same shards reuses it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

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

const FORMAT: &str = "bertpipe-rows-1";
const INDEX: &str = "rows.idx";
const DATA: &str = "rows.bin";
const META: &str = "store.json";
/// No row of ours comes near this; a larger span means the store is damaged.
const MAX_ROW_BYTES: u64 = 256 << 20;

/// What a store's `store.json` records.
#[derive(Debug, Serialize, Deserialize)]
struct StoreMeta {
    format: String,
    /// The shard folder and split the rows came from, for people reading the cache.
    data: String,
    split: String,
    rows: u64,
    bytes: u64,
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
    /// a concurrent run never leaves a half store where a whole one is expected).
    pub fn open_or_build(
        base: &Path,
        key: &str,
        about: (&Path, &str),
        examples: impl FnOnce(&mut dyn FnMut(&Example) -> Result<()>) -> Result<()>,
    ) -> Result<RowStore> {
        let dir = base.join(key);
        if let Ok(store) = RowStore::open(&dir) {
            return Ok(store);
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("could not remove the incomplete row store '{}'", dir.display()))?;
        }
        std::fs::create_dir_all(base).with_context(|| format!("could not create '{}'", base.display()))?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let tmp = base.join(format!(".tmp-{key}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&tmp).with_context(|| format!("could not create '{}'", tmp.display()))?;
        let built = write_store(&tmp, about, examples);
        if let Err(e) = built {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another run finished the same store first: use theirs.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        RowStore::open(&dir)
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

fn write_store(
    dir: &Path,
    (data_dir, split): (&Path, &str),
    examples: impl FnOnce(&mut dyn FnMut(&Example) -> Result<()>) -> Result<()>,
) -> Result<()> {
    let mut data = BufWriter::new(File::create(dir.join(DATA))?);
    let mut index = BufWriter::new(File::create(dir.join(INDEX))?);
    let (mut at, mut rows) = (0u64, 0u64);
    index.write_all(&0u64.to_le_bytes())?;
    let mut buf = Vec::new();
    examples(&mut |e: &Example| {
        buf.clear();
        encode(e, &mut buf);
        data.write_all(&buf)?;
        at += buf.len() as u64;
        rows += 1;
        index.write_all(&at.to_le_bytes())?;
        Ok(())
    })?;
    data.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    index.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let meta =
        StoreMeta { format: FORMAT.into(), data: data_dir.display().to_string(), split: split.into(), rows, bytes: at };
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
    }
}
