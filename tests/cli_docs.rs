//! The README's "Command line" section is the command line: every command there is one
//! `bertpipe` has, every command `bertpipe` has is there, and each command's flags there are
//! exactly the flags its `--help` lists (help and version aside). Read from the same clap
//! definitions `--help` prints, and checked against `bertpipe … --help` itself.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;

/// The lines of the README's command-line block, joined per command: `["pipeline", "run"]` →
/// the text of its usage lines.
fn readme_commands() -> BTreeMap<Vec<String>, String> {
    let readme = std::fs::read_to_string(common::root().join("README.md")).unwrap();
    let section = readme.split("\n## Command line\n").nth(1).expect("a `## Command line` section");
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
            assert!(!path.is_empty(), "README: `{line}` names no bertpipe command");
            assert!(!out.contains_key(&path), "README lists `bertpipe {}` twice", path.join(" "));
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

/// Every leaf command, by path, with the long flags it takes.
fn leaf_commands() -> BTreeMap<Vec<String>, BTreeSet<String>> {
    fn walk(cmd: &clap::Command, path: &mut Vec<String>, out: &mut BTreeMap<Vec<String>, BTreeSet<String>>) {
        let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|c| c.get_name() != "help").collect();
        if subs.is_empty() {
            let flags = cmd
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long())
                .filter(|l| !matches!(*l, "help" | "version"))
                .map(str::to_string)
                .collect();
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

#[test]
fn the_readme_command_line_section_lists_every_command_with_exactly_its_flags() {
    let readme = readme_commands();
    let leaves = leaf_commands();
    let mut problems = Vec::new();
    for (path, flags) in &leaves {
        let name = path.join(" ");
        let Some(text) = readme.get(path) else {
            problems.push(format!("`bertpipe {name}` is missing from the README's Command line section"));
            continue;
        };
        let documented = long_flags(text);
        for f in flags.difference(&documented) {
            problems.push(format!("`bertpipe {name}`: --{f} is in --help but not in the README"));
        }
        for f in documented.difference(flags) {
            problems.push(format!("`bertpipe {name}`: the README lists --{f}, which --help does not have"));
        }
    }
    for path in readme.keys() {
        if !leaves.contains_key(path) {
            problems.push(format!("the README lists `bertpipe {}`, which is not a command", path.join(" ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The clap definitions read above are what the binary prints: every flag of every command
/// appears in its `--help`.
#[test]
fn each_command_help_prints_the_flags_read_from_its_definition() {
    for (path, flags) in leaf_commands() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let o = common::bertpipe(&args);
        common::assert_ok(&o);
        let help = String::from_utf8_lossy(&o.stdout);
        for f in &flags {
            assert!(help.contains(&format!("--{f}")), "`bertpipe {}` --help lacks --{f}:\n{help}", path.join(" "));
        }
    }
}
