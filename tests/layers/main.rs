//! The crate's imports run one way: down the layers declared in [`LAYERS`]
//! (the order src/lib.rs's overview describes), and no two files import each
//! other, directly or round a loop.
//!
//! The test reads src/ as text: every `crate::`, `super::` and `self::` path
//! (in `use` lines, `use` trees, and paths written inline) is resolved to the
//! file that defines the module it names; a `pub use` in a folder's mod.rs is
//! followed to the file that defines the item. Two rules are checked:
//! 1. a top-level module imports only modules in a lower layer;
//! 2. the graph of files is free of cycles. A folder's mod.rs declaring,
//!    re-exporting or calling its own files is not an edge: the folder sits
//!    above its files by construction.
//!
//! A third rule keeps the faces (`console`, `commands`) at the door: they
//! name nothing of `db` but what connects (`FACE_MAY_NAME`), and ask
//! `operator` (its `Desk`) everything else.
//!
//! Run it alone with `cargo test --test layers`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom. A module may import only modules of a later entry;
/// modules in one entry may not import each other.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["console", "commands"],
    &["operator"],
    &["shutdown"],
    &["http", "schedule"],
    &["tick"],
    &["lock", "problems"],
    &["db", "mail", "telemetry"],
    &["config", "metrics", "liveness"],
    &["stages", "locale", "dkim", "late_payment"],
    &["domain", "causes"],
];

/// A module path such as `["db", "locks"]`; the crate root is `[]`.
type Module = Vec<String>;

struct Source {
    /// The module each file defines (src/db/mod.rs and src/db.rs: `db`).
    files: BTreeMap<Module, String>,
}

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read_tree(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read_tree(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of(path: &Path) -> Module {
    let rel = path.strip_prefix(src()).unwrap().with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

impl Source {
    fn load() -> Self {
        let mut paths = Vec::new();
        read_tree(&src(), &mut paths);
        let files = paths
            .iter()
            // The binary sits above the library; it is not part of the graph.
            .filter(|p| !p.ends_with("main.rs") || p.parent() != Some(src().as_path()))
            .map(|p| {
                let text = strip_comments(&std::fs::read_to_string(p).unwrap());
                (module_of(p), strip_unit_tests(&text))
            })
            .collect();
        Self { files }
    }

    /// The longest prefix of `path` that is a file's module, followed
    /// through a mod.rs's `pub use child::Item` when the next segment is
    /// such an item.
    fn resolve(&self, path: &[String]) -> Option<Module> {
        let mut best = None;
        for n in 0..=path.len() {
            if self.files.contains_key(&path[..n]) {
                best = Some(n);
            }
        }
        let n = best?;
        let module = path[..n].to_vec();
        if let Some(item) = path.get(n)
            && let Some(child) = self.reexport(&module, item)
        {
            return Some(child);
        }
        Some(module)
    }

    /// The child file a folder's mod.rs re-exports `item` from, if any.
    fn reexport(&self, folder: &Module, item: &str) -> Option<Module> {
        let text = self.files.get(folder)?;
        for stmt in use_statements(text).filter(|s| s.public) {
            for path in expand_tree(&stmt.tree) {
                let path = path.strip_prefix("self::").unwrap_or(&path);
                let segs: Vec<&str> = path.split("::").collect();
                let name = match segs.last() {
                    Some(last) => last.rsplit(" as ").next().unwrap_or(last).trim(),
                    None => continue,
                };
                if name == item && segs.len() >= 2 {
                    let mut child = folder.clone();
                    child.push(segs[0].to_string());
                    if self.files.contains_key(&child) {
                        return Some(child);
                    }
                }
            }
        }
        None
    }

    /// Every module `module`'s file refers to, resolved to files.
    fn imports(&self, module: &Module) -> BTreeSet<Module> {
        let text = &self.files[module];
        let mut out = BTreeSet::new();
        let mut paths: Vec<String> = use_statements(text)
            .flat_map(|s| expand_tree(&s.tree))
            .collect();
        paths.extend(inline_paths(text));
        for path in paths {
            let Some(absolute) = absolute(module, &path) else {
                continue;
            };
            if let Some(target) = self.resolve(&absolute)
                && &target != module
                && !target.is_empty()
            {
                out.insert(target);
            }
        }
        out
    }
}

/// `path` as a path from the crate root, if it starts at `crate`, `super`
/// or `self`.
fn absolute(module: &Module, path: &str) -> Option<Vec<String>> {
    let segs: Vec<String> = path
        .split("::")
        .map(|s| s.split(" as ").next().unwrap_or(s).trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let mut here = module.clone();
    let mut rest = segs.as_slice();
    match rest.first().map(String::as_str) {
        Some("crate" | "$crate") => {
            here.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                here.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    here.extend(rest.iter().cloned());
    Some(here)
}

/// Removes `//` comments (outside string literals) and `/* */` blocks, so
/// doc links and prose do not count as imports.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let (mut i, mut in_str, mut block) = (0, false, 0);
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if block > 0 {
            if c == '*' && next == Some('/') {
                block -= 1;
                i += 2;
            } else {
                if c == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            continue;
        }
        if in_str {
            out.push(c);
            if c == '\\' {
                if let Some(n) = next {
                    out.push(n);
                }
                i += 2;
                continue;
            }
            if c == '"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        match (c, next) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                block += 1;
                i += 2;
            }
            // A char literal such as '"' must not open a string.
            ('\'', _) if chars.get(i + 2) == Some(&'\'') => {
                out.extend(&chars[i..i + 3]);
                i += 3;
            }
            ('"', _) => {
                in_str = true;
                out.push(c);
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Removes `#[cfg(test)] mod ... { ... }` blocks: a unit test's
/// `use super::*` names its own file, not the folder above.
fn strip_unit_tests(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let after = &out[at..];
        let Some(open) = after.find('{') else { break };
        let header = &after[..open];
        if !header.contains("mod ") {
            // An attribute on something else: keep it, look further on.
            out.replace_range(at..at + "#[cfg(test)]".len(), "");
            continue;
        }
        let mut depth = 0;
        let mut end = after.len();
        for (i, c) in after.char_indices().skip(open) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.replace_range(at..at + end, "");
    }
    out
}

struct UseStatement {
    public: bool,
    tree: String,
}

/// Every `use ...;` statement.
fn use_statements(text: &str) -> impl Iterator<Item = UseStatement> + '_ {
    let mut rest = text;
    std::iter::from_fn(move || {
        loop {
            let at = rest.find("use ")?;
            let before = &rest[..at];
            let boundary = before
                .chars()
                .last()
                .is_none_or(|c| c.is_whitespace() || c == ';' || c == '{' || c == '}' || c == ')');
            let line_start = before.rfind('\n').map_or(0, |n| n + 1);
            let prefix = before[line_start..].trim();
            let public = prefix.starts_with("pub");
            let after = &rest[at + 4..];
            let end = after.find(';').unwrap_or(after.len());
            let tree = squeeze(&after[..end]);
            rest = &after[end.min(after.len())..];
            let prefix_ok = prefix.is_empty()
                || prefix.starts_with("pub")
                || prefix.ends_with('}')
                || prefix.ends_with('{')
                || prefix.ends_with(';');
            if boundary && prefix_ok {
                return Some(UseStatement { public, tree });
            }
        }
    })
}

/// A use tree on one line, spaces kept only around `as`.
fn squeeze(tree: &str) -> String {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut out = words.join(" ");
    for p in ["::", "{", "}", ","] {
        out = out
            .replace(&format!(" {p}"), p)
            .replace(&format!("{p} "), p);
    }
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand_tree(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            if p == "self" {
                vec![prefix.trim_end_matches("::").to_string()]
            } else {
                expand_tree(p)
                    .into_iter()
                    .map(|s| format!("{prefix}{s}"))
                    .collect()
            }
        })
        .collect()
}

/// Paths written inline: `crate::a::b`, `super::x`, `self::y`, `$crate::z`.
fn inline_paths(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if starts_word {
            let rest: String = chars[i..chars.len().min(i + 8)].iter().collect();
            if ["crate::", "$crate::", "super::", "self::"]
                .iter()
                .any(|p| rest.starts_with(p))
            {
                let mut j = i;
                while j < chars.len()
                    && (chars[j].is_alphanumeric()
                        || chars[j] == '_'
                        || chars[j] == ':'
                        || chars[j] == '$')
                {
                    j += 1;
                }
                let path: String = chars[i..j].iter().collect();
                // `super::{a, b}` is a use tree, read by `use_statements`.
                if chars.get(j) != Some(&'{') {
                    out.push(path.trim_end_matches(':').to_string());
                }
                i = j;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

fn name(m: &Module) -> String {
    m.join("::")
}

/// Top-level modules that import a module in their own or a higher layer.
fn upward_imports(source: &Source) -> Vec<String> {
    let mut found = BTreeSet::new();
    for module in source.files.keys() {
        let Some(top) = module.first() else { continue };
        for target in source.imports(module) {
            let Some(to) = target.first() else { continue };
            if to == top {
                continue;
            }
            match (layer_of(top), layer_of(to)) {
                (Some(a), Some(b)) if a < b => {}
                _ => {
                    found.insert(format!("{} imports {}", name(module), name(&target)));
                }
            }
        }
    }
    found.into_iter().collect()
}

/// Each cycle of files, once, as `a -> b -> a`.
fn cycles(source: &Source) -> Vec<String> {
    let graph: BTreeMap<Module, BTreeSet<Module>> = source
        .files
        .keys()
        .map(|m| {
            let edges = source
                .imports(m)
                .into_iter()
                // A folder above its own files.
                .filter(|t| !(t.len() > m.len() && t.starts_with(m)))
                .collect();
            (m.clone(), edges)
        })
        .collect();
    let mut found = BTreeSet::new();
    for start in graph.keys() {
        // Shortest way back to `start`, breadth first.
        let mut seen: BTreeMap<Module, Module> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        'search: while let Some(at) = queue.pop_front() {
            for next in graph.get(&at).into_iter().flatten() {
                if next == start {
                    let mut back = vec![at.clone()];
                    while let Some(prev) = seen.get(back.last().unwrap()) {
                        back.push(prev.clone());
                    }
                    back.reverse();
                    let mut loop_: Vec<String> = back.iter().map(name).collect();
                    loop_.push(name(start));
                    // Name the loop from its smallest member, so it is listed once.
                    let members: BTreeSet<String> =
                        loop_[..loop_.len() - 1].iter().cloned().collect();
                    found.insert(format!("{members:?}: {}", loop_.join(" -> ")));
                    break 'search;
                }
                if !seen.contains_key(next) && next != start {
                    seen.insert(next.clone(), at.clone());
                    queue.push_back(next.clone());
                }
            }
        }
    }
    // One line per set of members.
    let mut by_members: BTreeMap<String, String> = BTreeMap::new();
    for line in found {
        let (members, path) = line.split_once(": ").unwrap();
        by_members
            .entry(members.to_string())
            .or_insert(path.to_string());
    }
    by_members.into_values().collect()
}

#[test]
fn every_top_level_module_of_src_is_placed_in_a_layer() {
    let source = Source::load();
    let unplaced: BTreeSet<&String> = source
        .files
        .keys()
        .filter_map(|m| m.first())
        .filter(|top| layer_of(top).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules missing from LAYERS: {unplaced:?}"
    );
}

#[test]
fn no_module_imports_a_module_of_its_own_or_a_higher_layer() {
    let found = upward_imports(&Source::load());
    assert!(
        found.is_empty(),
        "imports against the layer order:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_two_files_of_src_import_each_other_directly_or_round_a_loop() {
    let found = cycles(&Source::load());
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

/// The faces: they format what `operator` answers.
const FACES: &[&str] = &["console", "commands"];

/// What of `db` a face may name: connecting, and the handle it makes.
const FACE_MAY_NAME: &[&str] = &["connect", "connect_lazy", "Db", "conn::is_refused_login"];

/// Each item of `db` that a file of a face names, beyond connecting.
fn faces_past_the_door(source: &Source) -> Vec<String> {
    let mut found = BTreeSet::new();
    for (module, text) in &source.files {
        if !module
            .first()
            .is_some_and(|top| FACES.contains(&top.as_str()))
        {
            continue;
        }
        let mut named: Vec<String> = use_statements(text)
            .flat_map(|s| expand_tree(&s.tree))
            .filter_map(|p| p.strip_prefix("crate::db::").map(str::to_owned))
            .collect();
        // `db::x::y` written inline, after `use crate::db;`, or in full.
        let chars: Vec<char> = text.chars().collect();
        for (i, _) in text.match_indices("db::") {
            let before = text[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let start = text[..i].chars().count() + 4;
            let mut end = start;
            while end < chars.len()
                && (chars[end].is_alphanumeric() || chars[end] == '_' || chars[end] == ':')
            {
                end += 1;
            }
            let path: String = chars[start..end].iter().collect();
            if !path.is_empty() && !path.starts_with('{') {
                named.push(path.trim_end_matches(':').to_owned());
            }
        }
        for path in named {
            let allowed = FACE_MAY_NAME
                .iter()
                .any(|a| path == *a || path.starts_with(&format!("{a}::")));
            if !allowed && path != "self" {
                found.insert(format!("{} names db::{path}", name(module)));
            }
        }
    }
    found.into_iter().collect()
}

#[test]
fn the_faces_reach_the_database_only_through_the_operators_desk() {
    let found = faces_past_the_door(&Source::load());
    assert!(
        found.is_empty(),
        "console and commands may name db only to connect; ask operator (its Desk) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_a_use_tree_an_inline_path_and_a_reexport() {
    let mut files = BTreeMap::new();
    let m = |s: &str| -> Module {
        s.split("::")
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect()
    };
    files.insert(m(""), String::new());
    files.insert(
        m("db"),
        "pub mod a;\npub mod b;\npub use a::Fence;\n".to_string(),
    );
    files.insert(m("db::a"), "use super::{Fence as F, b::{x}};\n".to_string());
    files.insert(
        m("db::b"),
        "fn f() { crate::db::Fence::new(); }\n".to_string(),
    );
    files.insert(m("config"), "use crate::db::b;\n".to_string());
    let source = Source { files };
    assert_eq!(source.imports(&m("db::a")), BTreeSet::from([m("db::b")]));
    assert_eq!(source.imports(&m("db::b")), BTreeSet::from([m("db::a")]));
    assert_eq!(cycles(&source).len(), 1);
    assert_eq!(
        upward_imports(&source),
        vec!["config imports db::b".to_string()]
    );
}
