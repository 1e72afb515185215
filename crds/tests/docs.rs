//! The README and every page of docs/ keep their code blocks true: each fenced block names its
//! language; every `yaml` block parses, and each migration or wave in it is an object of ferry's
//! own types; every `sh` block is valid shell (`bash -n`), each `make` target it runs exists,
//! and each path of the repository it names is there. (`make check`; no lab.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_crds::{MigrationWave, VirtualMachineMigration};
use serde::Deserialize;

mod common;

use common::doc_blocks::{all_blocks, pages, root};

#[test]
fn every_block_names_its_language() {
    let bare: Vec<String> = all_blocks()
        .iter()
        .filter(|b| b.lang.is_empty())
        .map(|b| format!("{}:{}", b.page, b.line))
        .collect();
    assert!(bare.is_empty(), "blocks without a language: {bare:?}");
}

#[test]
fn every_yaml_block_parses_and_its_migrations_and_waves_are_ferrys_types() {
    let mut objects = 0;
    for b in all_blocks().iter().filter(|b| b.lang == "yaml") {
        let at = format!("{}:{}", b.page, b.line);
        for doc in serde_yaml::Deserializer::from_str(&b.text) {
            let v = serde_yaml::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{at}: not YAML: {e}"));
            match v["kind"].as_str() {
                Some("VirtualMachineMigration") => {
                    serde_yaml::from_value::<VirtualMachineMigration>(v.clone())
                        .unwrap_or_else(|e| panic!("{at}: not a VirtualMachineMigration: {e}"));
                    objects += 1;
                }
                Some("MigrationWave") => {
                    serde_yaml::from_value::<MigrationWave>(v.clone())
                        .unwrap_or_else(|e| panic!("{at}: not a MigrationWave: {e}"));
                    objects += 1;
                }
                _ => {}
            }
        }
    }
    assert!(objects > 0, "the docs show no migration or wave at all");
}

/// The targets the Makefile defines.
fn make_targets() -> Vec<String> {
    std::fs::read_to_string(root().join("Makefile"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('\t') && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .filter(|(t, rest)| !t.contains('=') && !rest.starts_with('='))
        .flat_map(|(t, _)| t.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

/// The repository paths a command names: words that start with one of its top folders (a
/// word with a placeholder in capitals or a glob is left alone).
fn repo_paths(text: &str) -> Vec<String> {
    const TOP: &[&str] = &[
        "deploy/",
        "tests/",
        "assets/",
        "image/",
        "controller/",
        "tui/",
        "crds/",
        "docs/",
        "convert/",
        "staging/",
        "vsphere/",
        ".ci/",
    ];
    text.split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '(' | ')' | '=' | ';'))
        .map(|w| w.trim_end_matches([',', '.', ':']))
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .filter(|w| {
            !w.chars()
                .any(|c| c.is_ascii_uppercase() || matches!(c, '*' | '$' | '<' | '{'))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_sh_block_is_shell_whose_make_targets_and_paths_exist() {
    let targets = make_targets();
    let dir = std::env::temp_dir().join(format!("ferry-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    for (i, b) in all_blocks().iter().filter(|b| b.lang == "sh").enumerate() {
        let at = format!("{}:{}", b.page, b.line);
        let file = dir.join(format!("{i}.sh"));
        std::fs::write(&file, &b.text).unwrap();
        let out = std::process::Command::new("bash")
            .arg("-n")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{at}: not valid shell: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in b.text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.first() == Some(&"make") {
                for t in words[1..].iter().take_while(|w| !w.starts_with('#')) {
                    if t.contains('=') || t.starts_with('-') {
                        continue;
                    }
                    assert!(
                        targets.iter().any(|x| x == t),
                        "{at}: make {t}: no such target"
                    );
                }
            }
            let command = line.split('#').next().unwrap_or_default();
            for p in repo_paths(command) {
                assert!(
                    root().join(&p).exists(),
                    "{at}: {p} is not in the repository"
                );
            }
        }
        checked += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(checked > 0, "the docs show no command at all");
}

#[test]
fn the_readme_is_a_map() {
    let size = std::fs::metadata(root().join("README.md")).unwrap().len();
    assert!(
        size <= 20 * 1024,
        "README.md is {size} bytes; keep it under 20 KiB"
    );
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for page in pages().iter().skip(1) {
        let name = page.file_name().unwrap().to_string_lossy();
        assert!(
            readme.contains(&format!("docs/{name}")),
            "README.md does not link docs/{name}"
        );
    }
}
