//! The fenced code blocks of the README and of every page of docs/, read the same way by the
//! docs' own checks (`crds/tests/docs.rs`, no lab) and by the API server's
//! (`tests/api/tests/api.rs`, a server-side dry-run of every object they show).

use std::path::{Path, PathBuf};

/// The repository's root: the workspace's folder above the crate these tests build in.
pub fn root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    while !dir.join("Cargo.lock").exists() && dir.pop() {}
    dir
}

/// The README and the pages of docs/.
pub fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A fenced block: its page, first line, language and text.
pub struct Block {
    pub page: String,
    pub line: usize,
    pub lang: String,
    pub text: String,
}

pub fn blocks(page: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page
        .strip_prefix(root())
        .unwrap_or(page)
        .display()
        .to_string();
    let mut out = vec![];
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(lang)) => {
                open = Some(Block {
                    page: name.clone(),
                    line: i + 1,
                    lang: lang.trim().to_owned(),
                    text: String::new(),
                });
            }
            (Some(_), Some(_)) => out.push(open.take().unwrap()),
            (Some(b), None) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "{name}: a fence is never closed");
    out
}

pub fn all_blocks() -> Vec<Block> {
    pages().iter().flat_map(|p| blocks(p)).collect()
}
