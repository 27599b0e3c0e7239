//! Every config users read must load as written: each ```` ```toml ```` block of README.md and
//! docs/**/*.md, and the config files shipped in demo/ and deploy/. A block that is refused fails
//! this test naming the file, the line and the error.

use std::path::{Path, PathBuf};

use super::*;

/// The repository root (host/ is one level down).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The ```` ```toml ```` blocks of a Markdown file: (line of the fence, text), indentation of an
/// indented fence removed.
fn toml_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None if trimmed.starts_with("```toml") => {
                open = Some((index + 1, indent, String::new()))
            }
            Some(_) if trimmed.starts_with("```") => {
                let (line, _, text) = open.take().unwrap();
                blocks.push((line, text));
            }
            Some((_, indent, text)) => {
                text.push_str(line.get(*indent..).unwrap_or(line.trim_start()));
                text.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// Every `.md` file under `dir`, in its subfolders too.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(markdown_under(&path));
        } else if path.extension().is_some_and(|ext| ext == "md") {
            found.push(path);
        }
    }
    found
}

#[test]
fn every_documented_config_loads_as_written() {
    let root = repo();
    let mut markdown = vec![root.join("README.md")];
    let mut docs = markdown_under(&root.join("docs"));
    docs.sort();
    markdown.extend(docs);
    let mut checked = 0;
    let mut refused = Vec::new();
    for file in &markdown {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, block) in toml_blocks(&text) {
            checked += 1;
            if let Err(error) = Config::from_toml_str(&block, std::iter::empty()) {
                refused.push(format!("{}:{line}: {error}", file.display()));
            }
        }
    }
    for name in [
        "demo/outboxd.toml",
        "demo/postgres.toml",
        "deploy/outboxd.toml",
    ] {
        let path = root.join(name);
        checked += 1;
        if let Err(error) = Config::load(Some(&path), std::iter::empty()) {
            refused.push(format!("{name}: {error}"));
        }
    }
    assert!(
        refused.is_empty(),
        "configs refused as documented:\n{}",
        refused.join("\n")
    );
    assert!(
        checked >= 6,
        "only {checked} configs found: did the docs move?"
    );
}

#[test]
fn toml_blocks_are_found_fenced_and_indented() {
    let text = "a\n```toml\n[worker]\nmode = \"held\"\n```\n- item\n  ```toml\n  [retry]\n  max_attempts = 3\n  ```\n```sh\nx\n```\n";
    let blocks = toml_blocks(text);
    assert_eq!(
        blocks,
        vec![
            (2, "[worker]\nmode = \"held\"\n".to_string()),
            (7, "[retry]\nmax_attempts = 3\n".to_string())
        ]
    );
}
