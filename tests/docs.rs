//! README.md and the reference pages under `docs/` hold as written:
//!
//! - **Links.** Every relative link in README.md, ARCHITECTURE.md and `docs/*.md` resolves to a
//!   file or folder of the repository, and a `#anchor` names a heading of the page it points to,
//!   as GitHub makes anchors: the heading's text in lower case, spaces turned into `-`, every
//!   other character that is not a letter, a digit, `-` or `_` dropped, and `-1`, `-2` … added
//!   to a repeated heading. Links with a scheme (`https://…`) are not followed.
//! - **Runnable blocks.** A fenced block opened with ```` ```sh runnable ```` is a bash script
//!   that runs on the bundled sample in seconds to a minute or two. Each one is run with
//!   `bash -e -u -o pipefail -c BLOCK` and must exit 0. They all run in one scratch folder that
//!   holds copies of `pipelines/` and `data/`, so what they write (`out/…`, `vocab/…`) lands
//!   there and never in the checkout; `bertpipe` on the `PATH` is the binary under test,
//!   `ORT_DYLIB_PATH` the pinned ONNX Runtime (`common::ort_lib`), `BERTPIPE_CACHE_DIR` a folder
//!   of the scratch, and no other `BERTPIPE_*` variable is passed on. The order is README.md's
//!   blocks first (the tour), then `docs/*.md` by file name, each page top to bottom — so a
//!   page's block may use what the tour wrote (`out/imdb`, `out/imdb-finetune`, …). A runnable
//!   block may not call `cargo`. Any other info string that mentions `runnable` is an error,
//!   so a misspelt marker cannot turn a check off.
//! - **The front page.** README.md is at most 350 lines, links to every page of `docs/`, and its
//!   "The two commands" section holds the test command that CI (`.ci/run`) runs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The most lines README.md may have.
const README_MAX_LINES: usize = 350;

/// The info string that marks a fenced block as runnable.
const RUNNABLE: [&str; 2] = ["sh", "runnable"];

/// A fenced code block: the line of its opening fence (1-based), its info string, its text.
struct Fenced {
    line: usize,
    info: String,
    body: String,
}

/// A Markdown file split into its fenced blocks and the lines outside them. Each block leaves
/// an empty line in `prose`, so that nothing outside the blocks runs across one.
struct Markdown<'a> {
    blocks: Vec<Fenced>,
    prose: Vec<(usize, &'a str)>,
}

fn parse<'a>(text: &'a str, file: &Path) -> Markdown<'a> {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<Fenced> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if open.is_some() {
            if trimmed.starts_with("```") && trimmed.trim_start_matches('`').trim().is_empty() {
                blocks.extend(open.take());
                prose.push((n, ""));
            } else if let Some(block) = open.as_mut() {
                block.body.push_str(line);
                block.body.push('\n');
            }
        } else if let Some(info) = trimmed.strip_prefix("```") {
            open = Some(Fenced { line: n, info: info.trim().to_string(), body: String::new() });
        } else {
            prose.push((n, line));
        }
    }
    if let Some(block) = open {
        panic!("{}:{}: the code block opened here is never closed", rel(file), block.line);
    }
    Markdown { blocks, prose }
}

fn rel(path: &Path) -> String {
    path.strip_prefix(common::root()).unwrap_or(path).display().to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `docs/*.md`, by file name.
fn docs_pages() -> Vec<PathBuf> {
    let dir = common::root().join("docs");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("an entry of docs/").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    assert!(!pages.is_empty(), "no pages in docs/");
    pages
}

/// The pages whose links are checked.
fn linked_pages() -> Vec<PathBuf> {
    let root = common::root();
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    pages.extend(docs_pages());
    pages
}

/// The anchor GitHub gives a heading with this text.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor of a Markdown file: its ATX headings (`#` to `######`) outside code blocks.
fn anchors(text: &str, file: &Path) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (_, line) in parse(text, file).prose {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 {
            continue;
        }
        let Some(title) = line[hashes..].strip_prefix(' ') else { continue };
        let base = anchor(title.trim().trim_end_matches('#'));
        let count = seen.entry(base.clone()).or_insert(0);
        out.push(if *count == 0 { base } else { format!("{base}-{count}") });
        *count += 1;
    }
    out
}

/// The text with every inline code span blanked out (line breaks kept), so that a `](` inside
/// backticks is not read as a link. A span does not run past a blank line.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let run_at = |i: usize| chars[i..].iter().take_while(|&&c| c == '`').count();
    let blank_line_after = |i: usize| chars[i + 1..].iter().take_while(|&&c| c != '\n').all(|c| c.is_whitespace());
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = run_at(i);
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let r = run_at(j);
                if r == run {
                    close = Some(j + r);
                    break;
                }
                j += r;
            } else if chars[j] == '\n' && blank_line_after(j) {
                break;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.extend(chars[i..end].iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
                i = end;
            }
            None => {
                out.extend(std::iter::repeat_n('`', run));
                i += run;
            }
        }
    }
    out
}

/// The targets of the inline links (and images) of a Markdown file, with their line numbers.
fn links(text: &str, file: &Path) -> Vec<(usize, String)> {
    let md = parse(text, file);
    let numbers: Vec<usize> = md.prose.iter().map(|(n, _)| *n).collect();
    let joined = md.prose.iter().map(|(_, l)| *l).collect::<Vec<_>>().join("\n");
    let blanked = blank_code_spans(&joined);
    let mut out = Vec::new();
    for (index, line) in blanked.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let mut depth = 0usize;
            let mut end = after.len();
            for (k, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = k;
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let inside = after[..end].trim();
            let target = inside.split_whitespace().next().unwrap_or("").trim_start_matches('<').trim_end_matches('>');
            out.push((numbers[index], target.to_string()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = common::root().canonicalize().unwrap();
    let mut anchors_of: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in linked_pages() {
        let text = read(&page);
        for (line, target) in links(&text, &page) {
            let at = format!("{}:{line}: `{target}`", rel(&page));
            if target.is_empty() {
                problems.push(format!("{at}: an empty link"));
                continue;
            }
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            let Ok(dest) = dest.canonicalize() else {
                problems.push(format!("{at}: {} does not exist", dest.display()));
                continue;
            };
            if !dest.starts_with(&root) {
                problems.push(format!("{at}: points outside the repository"));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if dest.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let known = anchors_of.entry(dest.clone()).or_insert_with(|| anchors(&read(&dest), &dest));
            if !known.iter().any(|a| a == fragment) {
                problems.push(format!(
                    "{at}: no heading of {} has the anchor #{fragment} (its anchors: {})",
                    rel(&dest),
                    known.join(", ")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 20, "only {checked} relative links found: is the link reader broken?");
}

#[test]
fn the_readme_is_a_front_page() {
    let root = common::root();
    let readme_path = root.join("README.md");
    let readme = read(&readme_path);
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move reference to docs/"
    );

    // Every page of docs/ is reachable from the front page.
    let targets: Vec<String> = links(&readme, &readme_path).into_iter().map(|(_, t)| t).collect();
    for page in docs_pages() {
        let name = format!("docs/{}", page.file_name().unwrap().to_string_lossy());
        assert!(
            targets.iter().any(|t| t.split('#').next() == Some(name.as_str())),
            "README.md does not link to {name}"
        );
    }

    // The two commands, and the test command CI runs, are the README's.
    let section = readme.split("\n## The two commands\n").nth(1).expect("a `## The two commands` section");
    let section = section.split("\n## ").next().unwrap();
    let commands: Vec<String> = parse(section, &readme_path)
        .blocks
        .into_iter()
        .filter(|b| b.info.split_whitespace().next() == Some("sh"))
        .map(|b| b.body.trim().to_string())
        .collect();
    for command in [
        "cargo run --release -- pipeline run pipelines/imdb.yaml --overwrite",
        "cargo run --release -- run pipelines/imdb-experiment.yaml",
        "cargo test --release",
    ] {
        assert!(commands.iter().any(|c| c == command), "README.md's two commands: `{command}` is missing");
    }
    let ci = read(&root.join(".ci/run"));
    assert!(
        ci.lines().any(|l| l.trim_start().starts_with("cargo test --release")),
        ".ci/run does not run the README's test command `cargo test --release`"
    );
}

/// The Debian packages an `apt-get install` line names (the words after `install` that are
/// not options, up to a comment or a redirection).
fn apt_packages(line: &str) -> std::collections::BTreeSet<String> {
    let line = line.split('#').next().unwrap_or_default();
    let words = line.split_whitespace().skip_while(|w| *w != "install").skip(1);
    words
        .take_while(|w| !w.starts_with('>') && !w.starts_with('&') && !w.starts_with('|'))
        .filter(|w| !w.starts_with('-') && *w != "\\")
        .map(str::to_string)
        .collect()
}

#[test]
fn the_mpi_build_installs_what_ci_installs() {
    // The data-parallel build as README.md and docs/training.md give it must install the
    // packages `.ci/run` installs for it: without libclang-dev the build dies in bindgen.
    let root = common::root();
    let ci = read(&root.join(".ci/run"));
    let lines: Vec<&str> = ci.lines().collect();
    let at = lines.iter().position(|l| l.contains("libopenmpi-dev")).expect(".ci/run installs libopenmpi-dev");
    // The package list continues the `apt-get install … \` line before it.
    let joined = format!("{} {}", lines[at - 1].trim_end_matches('\\'), lines[at]);
    let want = apt_packages(&joined);
    assert!(want.contains("libclang-dev") && want.contains("openmpi-bin"), ".ci/run's MPI packages: {want:?}");
    for page in ["README.md", "docs/training.md"] {
        let text = read(&root.join(page));
        let installs: Vec<&str> =
            text.lines().filter(|l| l.contains("libopenmpi-dev") && l.contains("install")).collect();
        assert!(!installs.is_empty(), "{page} says nowhere what to install for `--features mpi`");
        for line in installs {
            assert_eq!(apt_packages(line), want, "{page}: `{line}` installs other packages than .ci/run");
        }
    }
}

/// The last `n` characters of a command's output.
fn tail(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let skip = text.chars().count().saturating_sub(n);
    text.chars().skip(skip).collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{} → {}: {e}", src.display(), dst.display()));
        }
    }
}

#[test]
fn every_runnable_block_runs_on_the_sample() {
    let root = common::root();
    let scratch = tempfile::tempdir().unwrap();
    let work = scratch.path().join("repo");
    for dir in ["pipelines", "data"] {
        copy_dir(&root.join(dir), &work.join(dir));
    }
    let bin = scratch.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_bertpipe"), bin.join("bertpipe")).unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let ort = common::ort_lib();
    let cache = scratch.path().join("cache");

    let mut pages = vec![root.join("README.md")];
    pages.extend(docs_pages());
    let mut ran: BTreeMap<String, usize> = BTreeMap::new();
    for page in &pages {
        let text = read(page);
        for block in parse(&text, page).blocks {
            let words: Vec<&str> = block.info.split_whitespace().collect();
            if words != RUNNABLE {
                assert!(
                    !block.info.contains("runnable"),
                    "{}:{}: `{}` is not a runnable marker: write ```{}",
                    rel(page),
                    block.line,
                    block.info,
                    RUNNABLE.join(" ")
                );
                continue;
            }
            let at = format!("{}:{}", rel(page), block.line);
            assert!(!block.body.contains("cargo "), "{at}: a runnable block may not call cargo:\n{}", block.body);
            let mut cmd = Command::new("bash");
            cmd.args(["-e", "-u", "-o", "pipefail", "-c", block.body.as_str()]).current_dir(&work);
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("BERTPIPE_") {
                    cmd.env_remove(key);
                }
            }
            cmd.env("PATH", &path).env("ORT_DYLIB_PATH", ort).env("BERTPIPE_CACHE_DIR", &cache);
            let started = Instant::now();
            let o = cmd.output().expect("run bash");
            eprintln!("{at}: {:.1}s", started.elapsed().as_secs_f64());
            assert!(
                o.status.success(),
                "{at}: the runnable block exited with {:?}\n--- block\n{}--- stdout (end)\n{}\n--- stderr (end)\n{}",
                o.status.code(),
                block.body,
                tail(&o.stdout, 4000),
                tail(&o.stderr, 4000)
            );
            *ran.entry(rel(page)).or_insert(0) += 1;
        }
    }
    let tour = ran.get("README.md").copied().unwrap_or(0);
    assert!(tour >= 5, "README.md has {tour} runnable blocks; its five-minute tour has five steps: {ran:?}");
}
