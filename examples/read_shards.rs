//! Opens a shard folder, verifies it against its manifest and prints a few rows of each split.
//!
//! ```text
//! cargo run --release --example read_shards -- out/imdb [data/vocab/bert-base-uncased.txt]
//! ```

use anyhow::Result;
use bertpipe::shards::ShardSet;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "out/imdb".into());
    let shards = ShardSet::open(dir.as_ref())?;
    shards.verify()?;
    if let Some(vocab) = args.next() {
        let vocab_path: &std::path::Path = vocab.as_ref();
        let config = bertpipe::tokenize::TokenizerConfig::read(vocab_path.parent().unwrap_or(".".as_ref()))?;
        let theirs = bertpipe::tokenize::file_vocab(vocab_path, &config)?;
        shards.expect_vocab(&theirs, &format!("'{vocab}'"))?;
    }
    println!("{dir}: task {}, max_len {:?}, verified", shards.manifest.task, shards.manifest.max_len);
    for split in shards.splits() {
        let mut n = 0;
        let mut tokens = 0;
        for row in shards.rows(split)? {
            let row = row?;
            if n < 3 {
                println!(
                    "  {split} {} label {:?}: {} ids {:?}…",
                    row.id,
                    row.label,
                    row.input_ids.len(),
                    &row.input_ids[..row.input_ids.len().min(8)]
                );
            }
            n += 1;
            tokens += row.input_ids.len();
        }
        println!("  {split}: {n} rows, {tokens} tokens");
    }
    Ok(())
}
