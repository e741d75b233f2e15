//! docs/development.md's layout names every top-level module of `src/`, so a
//! newcomer reading it finds each room of the house.

use super::{page, repo};

/// The `text` block under "## Layout" in docs/development.md.
fn layout() -> String {
    let text = page("docs/development.md");
    let start = text
        .find("## Layout")
        .expect("docs/development.md has a Layout section");
    let rest = &text[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

#[test]
fn the_development_guide_names_every_top_level_module_of_src() {
    let layout = layout();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(repo().join("src")).expect("src/ is readable") {
        let name = entry
            .expect("src/ entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let module = name.trim_end_matches(".rs");
        let named = [format!("src/{module}.rs"), format!("src/{module}/")]
            .iter()
            .any(|form| layout.contains(form.as_str()));
        if !named {
            missing.push(name);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/development.md's Layout does not name: {missing:?}"
    );
}
