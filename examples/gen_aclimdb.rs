//! Writes a synthetic corpus in the aclImdb layout (see `bertpipe::synth`): as a folder tree,
//! or as `aclImdb_v1.tar.gz` with `--tar`.
//!
//! ```text
//! cargo run --release --example gen_aclimdb -- --out data/aclImdb-sample --per-label 150 --unsup 150
//! cargo run --release --example gen_aclimdb -- --out /tmp/imdb --per-label 12500 --unsup 0 --tar
//! ```

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

struct Args {
    out: PathBuf,
    per_label: usize,
    unsup: usize,
    seed: u64,
    tar: bool,
}

fn parse_args() -> Args {
    let mut a = Args { out: "data/aclImdb-sample".into(), per_label: 150, unsup: 150, seed: 1, tar: false };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => a.out = val().into(),
            "--per-label" => a.per_label = val().parse().expect("--per-label N"),
            "--unsup" => a.unsup = val().parse().expect("--unsup N"),
            "--seed" => a.seed = val().parse().expect("--seed N"),
            "--tar" => a.tar = true,
            other => panic!("unknown flag {other}; flags: --out DIR --per-label N --unsup N --seed N --tar"),
        }
    }
    a
}

fn main() -> std::io::Result<()> {
    let args = parse_args();
    let files = bertpipe::synth::corpus(args.per_label, args.unsup, args.seed);
    if args.tar {
        write_tar(&args.out, &files)
    } else {
        write_tree(&args.out, &files)
    }
}

fn write_tree(out: &Path, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    for (name, bytes) in files {
        let rel = name.strip_prefix("aclImdb/").unwrap_or(name);
        let path = out.join(rel);
        fs::create_dir_all(path.parent().unwrap())?;
        fs::write(path, bytes)?;
    }
    eprintln!("wrote {} files under {}", files.len(), out.display());
    Ok(())
}

fn write_tar(out: &Path, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    let path = if out.extension().is_some() { out.to_path_buf() } else { out.join("aclImdb_v1.tar.gz") };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let gz = flate2::write::GzEncoder::new(fs::File::create(&path)?, flate2::Compression::new(6));
    let mut tar = tar::Builder::new(gz);
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(1_300_000_000);
        header.set_cksum();
        tar.append_data(&mut header, name, bytes.as_slice())?;
    }
    tar.into_inner()?.finish()?.flush()?;
    eprintln!("wrote {} ({} files)", path.display(), files.len());
    Ok(())
}
