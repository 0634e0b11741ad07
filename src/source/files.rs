//! Which files a file source reads, and the split of each: its `path` (a file or a folder, every
//! document given `split:`), or `splits:` — files per split, as a corpus is often shipped
//! (`train.tsv` + `test.tsv`), HF `datasets`' `data_files`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{input_files, remote_input_files, InputFile, Split};
use crate::contract::partition::Partition;

/// `splits:` of a file source: for each split, a path, a glob or a list of them. A folder
/// stands for its files of the source's kind; a glob (`*`, `?`, `[…]`) for the files it
/// matches, in name order (in object storage, in its last path component only). A path that
/// exists as given is that file or folder, not a glob, whatever its name holds
/// (`reviews[1].jsonl`); in a glob, a metacharacter in brackets stands for itself, as the
/// `glob` crate reads them (`reviews[[]*].jsonl` matches `reviews[1].jsonl`, `reviews[2].jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FileSplits(pub BTreeMap<String, FileList>);

/// A split's files: one entry or a list of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "serde_json::Value")]
pub enum FileList {
    One(String),
    Many(Vec<String>),
}

impl TryFrom<serde_json::Value> for FileList {
    type Error = String;

    fn try_from(v: serde_json::Value) -> std::result::Result<FileList, String> {
        let help = "a path or glob (`data/train-*.jsonl`) or a list of them";
        match v {
            serde_json::Value::String(s) => Ok(FileList::One(s)),
            serde_json::Value::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    serde_json::Value::String(s) => Ok(s),
                    other => Err(format!("got {other} in a list: expected {help}")),
                })
                .collect::<std::result::Result<_, _>>()
                .map(FileList::Many),
            other => Err(format!("got {other}: expected {help}")),
        }
    }
}

impl FileList {
    pub fn entries(&self) -> &[String] {
        match self {
            FileList::One(s) => std::slice::from_ref(s),
            FileList::Many(v) => v,
        }
    }

    fn entries_mut(&mut self) -> &mut [String] {
        match self {
            FileList::One(s) => std::slice::from_mut(s),
            FileList::Many(v) => v,
        }
    }
}

impl FileSplits {
    /// Makes every local entry absolute: relative to `path` when the source names one (the
    /// folder the entries are in), else to `base` (the configuration's folder, or the working
    /// directory for a `--set`). A relative glob under a folder whose own name holds a glob
    /// metacharacter (`/data/run[2]/`) gets that folder escaped, so only the entry is a pattern.
    pub fn resolve(&mut self, path: &Path, base: &Path) {
        let base = if path.as_os_str().is_empty() { base } else { path };
        for list in self.0.values_mut() {
            for entry in list.entries_mut() {
                if crate::storage::is_remote(Path::new(entry.as_str())) {
                    continue;
                }
                let mut p = PathBuf::from(entry.as_str());
                if p.is_relative() && crate::storage::is_remote(base) {
                    *entry = format!("{}/{entry}", base.display().to_string().trim_end_matches('/'));
                    continue;
                }
                if p.is_relative() && is_glob(entry) && !base.join(&p).exists() {
                    let mut folder = base.to_path_buf();
                    crate::storage::resolve_path(&mut folder, Path::new(""));
                    let folder = folder.to_string_lossy().into_owned();
                    if is_glob(&folder) {
                        *entry = format!("{}/{entry}", glob::Pattern::escape(folder.trim_end_matches('/')));
                        continue;
                    }
                }
                crate::storage::resolve_path(&mut p, base);
                *entry = p.to_string_lossy().into_owned();
            }
        }
    }

    /// Problems found without reading a file: split names, empty lists, local entries that
    /// exist nowhere (a glob that matches nothing).
    pub fn check(&self, path: &Path, split: &Split, exts: &[&str]) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.0.is_empty() {
            problems.push(("splits", "no split given, e.g. {train: train.jsonl, test: test.jsonl}".into()));
        }
        if !path.as_os_str().is_empty() && path.is_file() {
            problems.push((
                "path",
                format!(
                    "'{}' is a file; with `splits`, `path` is the folder their files are in (or leave it out)",
                    path.display()
                ),
            ));
        }
        if *split != Split::default() {
            problems.push((
                "split",
                "give `split` or `splits`, not both: with `splits` each file's split is the one it is listed under"
                    .into(),
            ));
        }
        for name in self.0.keys() {
            problems.extend(Split::Name(name.clone()).check().into_iter().map(|m| ("splits", m)));
        }
        for (name, list) in &self.0 {
            if list.entries().is_empty() {
                problems.push(("splits", format!("split `{name}` lists no files")));
            }
            for entry in list.entries() {
                if crate::storage::is_remote(Path::new(entry.as_str())) {
                    continue;
                }
                if let Err(e) = expand(entry, exts) {
                    problems.push(("splits", format!("split `{name}`: {e:#}")));
                }
            }
        }
        problems
    }

    /// Every file, with its split, in split-name order and then as listed (a glob's or a
    /// folder's files in name order). A file listed twice is an error naming both places.
    fn files(&self, exts: &[&str]) -> Result<Vec<(InputFile, String)>> {
        let mut out: Vec<(InputFile, String)> = Vec::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (name, list) in &self.0 {
            for entry in list.entries() {
                for file in expand(entry, exts).with_context(|| format!("split `{name}`"))? {
                    if let Some(other) = seen.insert(file.display(), name.clone()) {
                        bail!(
                            "'{}' is listed twice (split `{other}` and split `{name}`): each file belongs to one split",
                            file.display()
                        );
                    }
                    out.push((file, name.clone()));
                }
            }
        }
        Ok(out)
    }
}

/// Whether `entry` holds a glob metacharacter (`*`, `?`, `[`): a pattern, unless a file of
/// that very name exists ([`expand`]).
fn is_glob(entry: &str) -> bool {
    entry.contains(['*', '?', '['])
}

/// The files one `splits:` entry stands for: the file or folder it names when that exists as
/// given (`reviews[1].jsonl` is that file, not a pattern matching `reviews1.jsonl`), else — when
/// it holds `*`, `?` or `[` — the files the glob matches (a metacharacter in brackets, `[[]`,
/// `[*]`, `[?]`, matches itself, as the `glob` crate reads patterns). In object storage, an
/// object named exactly as the last part is that object.
pub(super) fn expand(entry: &str, exts: &[&str]) -> Result<Vec<InputFile>> {
    let path = Path::new(entry);
    if crate::storage::is_remote(path) {
        let (prefix, last) = entry.rsplit_once('/').unwrap_or(("", entry));
        if !is_glob(last) {
            return remote_input_files(path, exts);
        }
        if is_glob(prefix) {
            bail!("'{entry}': in object storage only the last part of a path may be a glob");
        }
        let remote = crate::storage::Remote::open(Path::new(prefix))?;
        let listed: Vec<(String, u64)> = remote.list()?.into_iter().filter(|(rel, _)| !rel.contains('/')).collect();
        if let Some((rel, size)) = listed.iter().find(|(rel, _)| rel == last) {
            return Ok(vec![InputFile::Remote { remote: remote.clone(), rel: rel.clone(), size: *size }]);
        }
        let pattern = glob::Pattern::new(last).with_context(|| format!("'{entry}' is not a valid glob"))?;
        let files: Vec<InputFile> = listed
            .into_iter()
            .filter(|(rel, _)| pattern.matches(rel))
            .map(|(rel, size)| InputFile::Remote { remote: remote.clone(), rel, size })
            .collect();
        if files.is_empty() {
            bail!("no object matches '{entry}'");
        }
        return Ok(files);
    }
    if !is_glob(entry) || path.exists() {
        if !path.exists() {
            bail!("'{entry}' does not exist");
        }
        return Ok(input_files(path, exts)?.into_iter().map(InputFile::Local).collect());
    }
    let mut matched: Vec<PathBuf> = glob::glob(entry)
        .with_context(|| format!("'{entry}' is not a valid glob"))?
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("could not list what '{entry}' matches"))?;
    matched.sort();
    let mut files = Vec::new();
    for p in matched {
        if p.is_dir() {
            files.extend(input_files(&p, exts)?.into_iter().map(InputFile::Local));
        } else if p.is_file() {
            files.push(InputFile::Local(p));
        }
    }
    if files.is_empty() {
        let hint = if entry.contains('[') {
            " (no file has that name either; in a glob, `[[]` matches `[` itself)"
        } else {
            ""
        };
        bail!("no file matches '{entry}'{hint}");
    }
    Ok(files)
}

/// A file a source reads: the file, the split its records get (before `split:` fractions are
/// applied), and the name its record ids start with.
#[derive(Debug)]
pub struct SplitFile {
    pub file: InputFile,
    pub split: String,
    /// The file's name, or as many of its last path components as make it unique among the
    /// files read (`train/data.jsonl` beside `test/data.jsonl`).
    pub key: String,
}

/// The files of `part` of a file source: a contiguous range of the whole listing (a single
/// file is one unit, so it goes whole to the first task of an array). With `splits`, each file
/// has the split it is listed under; without, `split`'s initial name.
pub fn split_files(
    path: &Path,
    splits: Option<&FileSplits>,
    split: &Split,
    exts: &[&str],
    part: Partition,
) -> Result<Vec<SplitFile>> {
    let all: Vec<(InputFile, String)> = match splits {
        Some(s) => s.files(exts)?,
        None => super::input_files_of(path, exts, Partition::WHOLE)?
            .into_iter()
            .map(|f| (f, split.initial().into()))
            .collect(),
    };
    let keys = unique_keys(&all.iter().map(|(f, _)| components(f)).collect::<Vec<_>>());
    let range = part.range(all.len());
    Ok(all
        .into_iter()
        .zip(keys)
        .skip(range.start)
        .take(range.len())
        .map(|((file, split), key)| SplitFile { file, split, key })
        .collect())
}

/// The files that make each split, as the manifest records them (paths or URLs).
pub fn files_by_split(splits: &FileSplits, exts: &[&str]) -> Result<BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, split) in splits.files(exts)? {
        out.entry(split).or_default().push(file.display());
    }
    Ok(out)
}

/// A file's path components (a URL's `/`-separated parts). Bytes of a name that are not
/// UTF-8 are written `\xFF`, not replaced: two names that differ only there stay two ids. The
/// root is an empty component, so a key that climbs to it reads `/tmp/…`, not `//tmp/…`.
fn components(f: &InputFile) -> Vec<String> {
    use std::os::unix::ffi::OsStrExt;
    use std::path::Component;
    let escaped = |bytes: &[u8]| {
        let mut out = String::new();
        for chunk in bytes.utf8_chunks() {
            out.push_str(chunk.valid());
            for b in chunk.invalid() {
                out.push_str(&format!("\\x{b:02X}"));
            }
        }
        out
    };
    match f {
        InputFile::Local(p) => p
            .components()
            .map(|c| match c {
                Component::RootDir => String::new(),
                c => escaped(c.as_os_str().as_bytes()),
            })
            .collect(),
        InputFile::Remote { .. } => f.display().split('/').map(str::to_string).collect(),
    }
}

/// For each path (as components), its shortest tail that no other path shares.
fn unique_keys(paths: &[Vec<String>]) -> Vec<String> {
    let tail = |p: &[String], k: usize| p[p.len().saturating_sub(k)..].join("/");
    let mut keys = vec![String::new(); paths.len()];
    let mut open: Vec<usize> = (0..paths.len()).collect();
    let mut k = 1;
    while !open.is_empty() {
        let candidates: Vec<String> = open.iter().map(|&i| tail(&paths[i], k)).collect();
        let mut count: HashMap<&str, usize> = HashMap::new();
        for c in &candidates {
            *count.entry(c.as_str()).or_default() += 1;
        }
        let mut next = Vec::new();
        for (c, &i) in candidates.iter().zip(&open) {
            if count[c.as_str()] == 1 || k >= paths[i].len() {
                keys[i] = c.clone();
            } else {
                next.push(i);
            }
        }
        open = next;
        k += 1;
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(s: &str) -> Vec<String> {
        s.split('/').map(str::to_string).collect()
    }

    /// Names that differ only in bytes that are not UTF-8 keep apart; a key that climbs to the
    /// root starts with one `/`.
    #[test]
    fn names_that_are_not_utf8_keep_their_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let file = |b: &[u8]| InputFile::Local(PathBuf::from(std::ffi::OsStr::from_bytes(b)));
        let a = components(&file(b"/tmp/c/e\xff.txt"));
        let b = components(&file(b"/tmp/c/e\xfe.txt"));
        assert_eq!(a.last().unwrap(), "e\\xFF.txt");
        assert_ne!(a, b);
        assert_eq!(unique_keys(&[a.clone(), b]), vec!["e\\xFF.txt", "e\\xFE.txt"]);
        assert_eq!(unique_keys(&[a.clone(), a]), vec!["/tmp/c/e\\xFF.txt", "/tmp/c/e\\xFF.txt"]);
    }

    #[test]
    fn keys_are_the_shortest_unique_tails() {
        let paths = ["/d/train/data.jsonl", "/d/test/data.jsonl", "/d/extra.jsonl", "/e/x/a.jsonl", "/f/x/a.jsonl"];
        let keys = unique_keys(&paths.iter().map(|p| parts(p)).collect::<Vec<_>>());
        assert_eq!(keys, ["train/data.jsonl", "test/data.jsonl", "extra.jsonl", "e/x/a.jsonl", "f/x/a.jsonl"]);
    }

    /// A `splits:` entry that names an existing file is that file, whatever its name holds; a
    /// bracketed metacharacter matches itself; a glob under a folder whose name holds `[` matches
    /// in that folder.
    #[test]
    fn an_existing_name_with_glob_characters_is_that_file() {
        let dir = std::env::temp_dir().join(format!("bertpipe-splits-brackets-{}", std::process::id()));
        let nested = dir.join("run[2]");
        std::fs::create_dir_all(&nested).unwrap();
        for f in ["reviews[1].jsonl", "reviews[2].jsonl", "reviews1.jsonl", "what?.jsonl"] {
            std::fs::write(dir.join(f), "{}\n").unwrap();
        }
        std::fs::write(nested.join("train-1.jsonl"), "{}\n").unwrap();
        let names = |entry: &str| -> Vec<String> {
            expand(&dir.join(entry).to_string_lossy(), &["jsonl"])
                .unwrap_or_else(|e| panic!("{entry}: {e:#}"))
                .iter()
                .map(InputFile::name)
                .collect()
        };
        assert_eq!(names("reviews[1].jsonl"), ["reviews[1].jsonl"]);
        assert_eq!(names("what?.jsonl"), ["what?.jsonl"]);
        assert_eq!(names("reviews[[]*].jsonl"), ["reviews[1].jsonl", "reviews[2].jsonl"]);
        assert_eq!(names("reviews[12].jsonl"), ["reviews1.jsonl"], "no such file: a glob");
        let e = expand(&dir.join("reviews[3].jsonl").to_string_lossy(), &["jsonl"]).unwrap_err().to_string();
        assert!(e.contains("no file matches") && e.contains("`[[]` matches `[` itself"), "{e}");

        let mut s: FileSplits =
            serde_json::from_str(r#"{"train": ["train-*.jsonl"], "test": "../reviews[1].jsonl"}"#).unwrap();
        s.resolve(Path::new(""), &nested);
        assert!(s.check(Path::new(""), &Split::default(), &["jsonl"]).is_empty(), "{:?}", s);
        let got: Vec<(String, String)> =
            s.files(&["jsonl"]).unwrap().into_iter().map(|(f, split)| (f.name(), split)).collect();
        let want = [("reviews[1].jsonl", "test"), ("train-1.jsonl", "train")];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn lists_and_globs_expand_in_order_and_a_file_belongs_to_one_split() {
        let dir = std::env::temp_dir().join(format!("bertpipe-splits-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("more")).unwrap();
        for f in ["train-2.jsonl", "train-1.jsonl", "test.jsonl", "more/a.jsonl", "more/b.txt"] {
            std::fs::write(dir.join(f), "{}\n").unwrap();
        }
        let yaml = r#"{"train": ["train-*.jsonl", "more"], "test": "test.jsonl"}"#;
        let mut s: FileSplits = serde_json::from_str(yaml).unwrap();
        s.resolve(Path::new(""), &dir);
        assert!(s.check(Path::new(""), &Split::default(), &["jsonl"]).is_empty());
        let got: Vec<(String, String)> = s
            .files(&["jsonl"])
            .unwrap()
            .into_iter()
            .map(|(f, split)| (f.display().trim_start_matches(&*dir.to_string_lossy()).to_string(), split))
            .collect();
        let want = [
            ("/test.jsonl", "test"),
            ("/train-1.jsonl", "train"),
            ("/train-2.jsonl", "train"),
            ("/more/a.jsonl", "train"),
        ];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));

        // Tasks take contiguous ranges of the whole listing.
        let a = split_files(Path::new(""), Some(&s), &Split::default(), &["jsonl"], Partition { index: 0, count: 3 })
            .unwrap();
        let b = split_files(Path::new(""), Some(&s), &Split::default(), &["jsonl"], Partition { index: 1, count: 3 })
            .unwrap();
        let c = split_files(Path::new(""), Some(&s), &Split::default(), &["jsonl"], Partition { index: 2, count: 3 })
            .unwrap();
        assert_eq!(a.len() + b.len() + c.len(), 4);

        let twice: FileSplits =
            serde_json::from_str(&format!(r#"{{"train": "{0}/*.jsonl", "test": "{0}/test.jsonl"}}"#, dir.display()))
                .unwrap();
        let e = twice.files(&["jsonl"]).unwrap_err().to_string();
        assert!(e.contains("test.jsonl' is listed twice (split `test` and split `train`)"), "{e}");

        let none: FileSplits = serde_json::from_str(r#"{"train": "nothing-*.jsonl", "test": "gone.jsonl"}"#).unwrap();
        let mut none = none;
        none.resolve(Path::new(""), &dir);
        let problems: Vec<String> =
            none.check(Path::new(""), &Split::Name("x".into()), &["jsonl"]).into_iter().map(|p| p.1).collect();
        let all = problems.join("\n");
        assert!(all.contains("split `train`: no file matches"), "{all}");
        assert!(all.contains("split `test`: '") && all.contains("gone.jsonl' does not exist"), "{all}");
        assert!(all.contains("give `split` or `splits`, not both"), "{all}");
        let e = serde_json::from_str::<FileSplits>(r#"{"train": 3}"#).unwrap_err().to_string();
        assert!(e.contains("a path or glob"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
