//! The "Command line" section of `docs/command-line.md` is the command line: every command there
//! is one `bertpipe` has, every command `bertpipe` has is there, and each command's flags there
//! are exactly the flags its `--help` lists (help and version aside): the flags are read from the
//! output of `bertpipe … --help` itself, and must equal the clap definitions' visible flags.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;

/// The page that lists the command line, under its `## Command line` heading.
const PAGE: &str = "docs/command-line.md";

/// The lines of the page's command-line block, joined per command: `["pipeline", "run"]` →
/// the text of its usage lines.
fn documented_commands() -> BTreeMap<Vec<String>, String> {
    let page = std::fs::read_to_string(common::root().join(PAGE)).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    let section = page.split("\n## Command line\n").nth(1).expect("a `## Command line` section");
    let block = section.split("```").nth(1).expect("a code block in it");
    let cli = bertpipe::cli::Cli::command();
    let mut out: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut current: Option<Vec<String>> = None;
    for line in block.lines() {
        if let Some(rest) = line.strip_prefix("bertpipe ") {
            // The command path: words that name subcommands, walking down from the top.
            let mut path = Vec::new();
            let mut cmd = &cli;
            for word in rest.split_whitespace() {
                match cmd.find_subcommand(word) {
                    Some(sub) => {
                        path.push(word.to_string());
                        cmd = sub;
                    }
                    None => break,
                }
            }
            assert!(!path.is_empty(), "{PAGE}: `{line}` names no bertpipe command");
            assert!(!out.contains_key(&path), "{PAGE} lists `bertpipe {}` twice", path.join(" "));
            out.insert(path.clone(), rest.to_string());
            current = Some(path);
        } else if line.starts_with(' ') {
            let path = current.as_ref().expect("a continuation line after a command");
            out.get_mut(path).unwrap().push_str(line);
        }
    }
    out
}

fn long_flags(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for (i, _) in text.match_indices("--") {
        let name: String = text[i + 2..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        if !name.is_empty() {
            flags.insert(name);
        }
    }
    flags
}

/// Every command that runs (leaves, and commands with flags of their own), by path, with the
/// long flags it takes.
fn leaf_commands() -> BTreeMap<Vec<String>, BTreeSet<String>> {
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut BTreeMap<Vec<String>, BTreeSet<String>>) {
        let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|c| c.get_name() != "help").collect();
        let flags: BTreeSet<String> = cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|l| !matches!(*l, "help" | "version"))
            .map(str::to_string)
            .collect();
        // A command that runs itself (flags of its own) and has subcommands too (`eval` and
        // `eval merge`) is documented as both.
        if subs.is_empty() || !flags.is_empty() && !path.is_empty() {
            out.insert(path.clone(), flags);
        }
        for s in subs {
            path.push(s.get_name().to_string());
            walk(s, path, out);
            path.pop();
        }
    }
    let mut out = BTreeMap::new();
    walk(&bertpipe::cli::Cli::command(), &mut Vec::new(), &mut out);
    out
}

/// The long flags `bertpipe PATH… --help` prints (help and version aside): read from the
/// binary's own output, not from the definitions it was built from.
fn help_flags(path: &[String]) -> BTreeSet<String> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let o = common::bertpipe(&args);
    common::assert_ok(&o);
    let help = String::from_utf8_lossy(&o.stdout).into_owned();
    let options = help.split("\nOptions:\n").nth(1).unwrap_or_else(|| panic!("no Options in:\n{help}"));
    // An option's own line is indented by at most six spaces (`  -q, --quiet`, `      --out`);
    // its description, wrapped or listing values, by more. The section ends at a line that is
    // not indented (`Examples:`).
    options
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter(|l| l.len() - l.trim_start().len() <= 6)
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix('-')
                .filter(|r| !r.starts_with('-'))
                .map(|r| r[1..].trim_start_matches(", "))
                .unwrap_or(l);
            let name: String =
                l.strip_prefix("--")?.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            (!matches!(name.as_str(), "help" | "version")).then_some(name)
        })
        .collect()
}

#[test]
fn the_command_line_page_lists_every_command_with_exactly_its_flags() {
    let documented = documented_commands();
    let leaves = leaf_commands();
    let mut problems = Vec::new();
    for (path, defined) in &leaves {
        let name = path.join(" ");
        let flags = help_flags(path);
        assert_eq!(&flags, defined, "`bertpipe {name} --help` prints other flags than its definition has");
        let Some(text) = documented.get(path) else {
            problems.push(format!("`bertpipe {name}` is missing from the Command line section of {PAGE}"));
            continue;
        };
        let listed = long_flags(text);
        for f in flags.difference(&listed) {
            problems.push(format!("`bertpipe {name}`: --{f} is in --help but not in {PAGE}"));
        }
        for f in listed.difference(&flags) {
            problems.push(format!("`bertpipe {name}`: {PAGE} lists --{f}, which --help does not have"));
        }
    }
    for path in documented.keys() {
        if !leaves.contains_key(path) {
            problems.push(format!("{PAGE} lists `bertpipe {}`, which is not a command", path.join(" ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
