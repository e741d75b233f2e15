//! docs/development.md's layout names every file of `src/`, so a newcomer
//! reading it finds each room of the house and what is in it.
//!
//! The rule, in the form the layout block already takes:
//!
//! * A file directly in `src/` is named by its path (`src/lib.rs`), or, for
//!   a module with a folder, by the folder (`src/tick/`).
//! * A file inside a folder of `src/` is named in that folder's entry: the
//!   layout block's text from the first `src/{folder}/` to the next
//!   unindented line (the next entry). After `src/{folder}/` come the
//!   folders between, each as `name/`, then the file's name, each after
//!   the one before and each a whole word: `src/tick/claim/choose/tests.rs`
//!   is named by `src/tick/ ... claim/ ... choose/ ... tests.rs`.
//! * A folder without Rust source in it (the console's `templates/` and
//!   `static/`) is named as a folder in the same way, which names its
//!   files.

use std::path::Path;

use super::{page, repo};

/// The ```text block under "## Layout" in docs/development.md.
fn layout() -> String {
    let text = page("docs/development.md");
    let start = text
        .find("## Layout")
        .expect("docs/development.md has a Layout section");
    let rest = &text[start..];
    let block = rest
        .find("```text\n")
        .map(|i| &rest[i + "```text\n".len()..])
        .expect("the Layout section has a ```text block");
    let end = block.find("\n```").unwrap_or(block.len());
    block[..end].to_owned()
}

/// Where `word` occurs in `text` at or after `from` as a whole word (not
/// preceded by a letter, digit, `_` or `.`; a file's name not followed by
/// a letter, digit or `_`): the offset just past it.
fn word_after(text: &str, word: &str, from: usize) -> Option<usize> {
    let part = |c: char| c.is_alphanumeric() || c == '_';
    let mut at = from;
    while let Some(i) = text[at..].find(word) {
        let start = at + i;
        let end = start + word.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let starts = !before.is_some_and(|c| part(c) || c == '.');
        let ends = word.ends_with('/') || !after.is_some_and(part);
        if starts && ends {
            return Some(end);
        }
        at = start + 1;
    }
    None
}

/// The entry of folder `src/{folder}/`: what follows its first mention, to
/// the next unindented line.
fn entry_of<'a>(layout: &'a str, folder: &str) -> Option<&'a str> {
    let start = word_after(layout, &format!("src/{folder}/"), 0)?;
    let rest = &layout[start..];
    let mut end = rest.find('\n').unwrap_or(rest.len());
    while let Some(line) = rest[end..].strip_prefix('\n') {
        if !line.starts_with(' ') {
            break;
        }
        end += 1 + line.find('\n').unwrap_or(line.len());
    }
    Some(&rest[..end])
}

/// Whether `entry` names `names` (folders as `name/`, then a file), each
/// after the one before.
fn names_in_order(entry: &str, names: &[String]) -> bool {
    let mut at = 0;
    for name in names {
        match word_after(entry, name, at) {
            Some(end) => at = end,
            None => return false,
        }
    }
    true
}

/// Whether `dir` holds a Rust source file, at any depth.
fn has_rust(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .any(|p| {
            if p.is_dir() {
                has_rust(&p)
            } else {
                p.extension().is_some_and(|x| x == "rs")
            }
        })
}

/// What must be named inside `dir`, each as the names its entry gives in
/// order (`before`, the folders above it, then its own): every file, and a
/// folder without Rust source as a whole (`templates/`).
fn to_name(dir: &Path, before: &[String], out: &mut Vec<Vec<String>>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let mut names = before.to_vec();
        if !path.is_dir() {
            names.push(name);
            out.push(names);
        } else if has_rust(&path) {
            names.push(format!("{name}/"));
            to_name(&path, &names, out);
        } else {
            names.push(format!("{name}/"));
            out.push(names);
        }
    }
}

#[test]
fn the_development_guide_names_every_file_of_src() {
    let layout = layout();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(repo().join("src")).expect("src/ is readable") {
        let path = entry.expect("src/ entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if !path.is_dir() {
            let module = name.trim_end_matches(".rs");
            let named = [format!("src/{module}.rs"), format!("src/{module}/")]
                .iter()
                .any(|form| word_after(&layout, form, 0).is_some());
            if !named {
                missing.push(format!("src/{name}"));
            }
            continue;
        }
        let Some(entry) = entry_of(&layout, &name) else {
            missing.push(format!("src/{name}/"));
            continue;
        };
        let mut inside = Vec::new();
        to_name(&path, &[], &mut inside);
        for names in inside {
            if !names_in_order(entry, &names) {
                missing.push(format!("src/{name}/{}", names.concat()));
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/development.md's Layout does not name (the rule: tests/docs/layout.rs): {missing:?}"
    );
}
