//! Writes a JSON Lines corpus with planted near-duplicates (see
//! `bertpipe::synth::near_duplicate_corpus`): one object per line with `id`, `text`, and for a
//! planted copy `copy_of` (the id it copies) and `changed` (the share of its words replaced).
//! For the near-dedup benchmark and its comparison with `datasketch`.
//!
//! ```text
//! cargo run --release --example gen_near_dups -- --out /tmp/near-50k.jsonl --docs 50000
//! ```

use std::io::Write;

fn main() -> std::io::Result<()> {
    let (mut out, mut docs, mut copies, mut seed) = (String::from("near.jsonl"), 50_000usize, 0.1f64, 1u64);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => out = val(),
            "--docs" => docs = val().parse().expect("--docs N"),
            "--copies" => copies = val().parse().expect("--copies SHARE"),
            "--seed" => seed = val().parse().expect("--seed N"),
            other => panic!("unknown flag {other}; flags: --out FILE --docs N --copies SHARE --seed N"),
        }
    }
    let corpus = bertpipe::synth::near_duplicate_corpus(docs, copies, seed);
    let mut w = std::io::BufWriter::new(std::fs::File::create(&out)?);
    for d in &corpus {
        let mut v = serde_json::json!({"id": d.id, "text": d.text});
        if let Some(of) = d.copy_of {
            v["copy_of"] = serde_json::json!(corpus[of].id);
            v["changed"] = serde_json::json!(d.changed);
        }
        writeln!(w, "{v}")?;
    }
    w.flush()
}
