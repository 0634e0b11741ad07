//! The fuzz targets (`bertpipe::fuzz`) on stable, in `cargo test`: every seed
//! (`fuzz/seeds/TARGET/`), every input a libFuzzer run found (`fuzz/regressions/TARGET/`, kept
//! after its fix), then seeded mutations of them — bit flips, byte changes, cuts, inserts,
//! splices — for a bounded time per target (`FUZZ_REPLAY_SECS`, default 3). A target that
//! panics fails the test and the input is written next to the target's regressions folder
//! under `$CARGO_TARGET_DIR/fuzz-replay/`, to be kept once fixed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn inputs(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `input` (the first byte, the target's selector, is kept most of the time).
fn mutate(input: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut v = input.to_vec();
    let interesting: [&[u8]; 10] =
        [b"\x00", b"\xff", b"..", b"/", b"\"", b"\n", b"-1", b"4294967295", b"1e308", "\u{FFFD}\u{0301}".as_bytes()];
    for _ in 0..1 + rng.below(4) {
        let at = 1.min(v.len()) + rng.below(v.len().saturating_sub(1).max(1));
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => v.truncate(at.min(v.len())),
            3 => {
                let w = interesting[rng.below(interesting.len())];
                let at = at.min(v.len());
                v.splice(at..at, w.iter().copied());
            }
            4 if v.len() > at => {
                let n = rng.below((v.len() - at).min(64)) + 1;
                v.drain(at..(at + n).min(v.len()));
            }
            5 if !other.is_empty() => {
                let from = rng.below(other.len());
                let n = rng.below(other.len() - from) + 1;
                let at = at.min(v.len());
                v.splice(at..at, other[from..from + n].iter().copied());
            }
            _ => {
                // A span repeated: long lines, deep nesting, big counts.
                if v.len() > at {
                    let n = rng.below((v.len() - at).min(32)) + 1;
                    let span = v[at..at + n].to_vec();
                    for _ in 0..rng.below(8) + 1 {
                        v.splice(at..at, span.iter().copied());
                    }
                }
            }
        }
    }
    v
}

fn run_one(name: &str, target: fn(&[u8]), input: &[u8]) {
    let result = std::panic::catch_unwind(|| target(input));
    if let Err(e) = result {
        let dir = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target"))
            .join("fuzz-replay")
            .join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("crash-{:016x}", input.iter().fold(0u64, |h, &b| h.rotate_left(5) ^ b as u64)));
        std::fs::write(&file, input).unwrap();
        let msg = e.downcast_ref::<String>().cloned().or(e.downcast_ref::<&str>().map(|s| s.to_string()));
        panic!("fuzz target `{name}` panicked ({}); input written to '{}'", msg.unwrap_or_default(), file.display());
    }
}

#[test]
fn every_fuzz_target_survives_its_corpus_and_bounded_mutations() {
    let secs: u64 = std::env::var("FUZZ_REPLAY_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for (name, target) in bertpipe::fuzz::TARGETS {
        let seeds = inputs(&root().join("fuzz/seeds").join(name));
        let found = inputs(&root().join("fuzz/regressions").join(name));
        assert!(!seeds.is_empty(), "no seeds for `{name}` in fuzz/seeds/{name}");
        let corpus: Vec<Vec<u8>> = seeds.into_iter().chain(found).collect();
        for input in &corpus {
            run_one(name, target, input);
        }
        let mut rng = Rng(0x5eed ^ name.len() as u64);
        let (start, mut n) = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(secs) {
            let input = &corpus[rng.below(corpus.len())];
            let other = &corpus[rng.below(corpus.len())];
            run_one(name, target, &mutate(input, other, &mut rng));
            n += 1;
        }
        eprintln!("fuzz target `{name}`: {} corpus inputs, {n} mutations in {secs} s", corpus.len());
    }
}
