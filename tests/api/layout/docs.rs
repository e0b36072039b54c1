//! The docs stay true to the tree: the architecture map names every source file, every path and
//! link in the docs leads somewhere, and the docs speak to users (no internal issue numbers).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::source::{collect, relative, repository, source_files};

/// The user-facing Markdown: the README, everything under `docs/`, and the READMEs of `deploy/`
/// and the examples.
fn documents() -> Vec<PathBuf> {
    let root = repository();
    let mut paths = vec![
        root.join("README.md"),
        root.join("deploy/README.md"),
        root.join("examples/orleans/README.md"),
    ];
    collect(&root.join("docs"), "md", &mut paths);
    paths.sort();
    paths
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of a Markdown document outside its fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut kept = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The contents of every `code span` in `text`.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Paths the repository's `.gitignore` keeps out of git (its `/…` lines): docs may name them
/// (`bench/results/`), a clean checkout does not have them.
fn ignored_prefixes() -> Vec<String> {
    read(&repository().join(".gitignore"))
        .lines()
        .filter_map(|line| line.strip_prefix('/'))
        .map(|line| line.trim_end_matches('/').to_owned())
        .collect()
}

#[test]
fn the_architecture_map_names_every_source_file() {
    let map = read(&repository().join("docs/ARCHITECTURE.md"));
    let spans = code_spans(&map);
    let missing: Vec<String> = source_files()
        .into_iter()
        .map(|f| f.path)
        .filter(|path| !spans.contains(&path.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/ARCHITECTURE.md: {missing:#?}"
    );
}

/// Whether a code span is a path in the repository: it starts with one of its top folders, or
/// it has a folder and a file extension (`http/contract.rs`, `grafana/oracle.json`). Commands,
/// URLs and patterns (a space, `://`, a leading `/`, `<`, `*`, `{`, `…`) are not.
fn is_repository_path(span: &str) -> bool {
    let folders = [
        "src/",
        "tests/",
        "docs/",
        "bench/",
        "benches/",
        "contract/",
        "deploy/",
        "examples/",
        "migrations/",
        "openapi/",
        ".ci/",
    ];
    let extensions = [
        ".rs", ".md", ".sql", ".sh", ".json", ".yml", ".yaml", ".lua", ".py", ".ts", ".mjs",
        ".toml", ".svg", ".png",
    ];
    let plain = span
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
    let has_folder = span.contains('/') && !span.starts_with('/');
    plain
        && (folders.iter().any(|f| span.starts_with(f))
            || has_folder && extensions.iter().any(|e| span.ends_with(e)))
}

/// A path a document names leads somewhere from the repository root, from `src/` (the docs
/// name modules that way too) or from the document's own folder.
#[test]
fn every_repository_path_the_docs_name_exists() {
    let root = repository();
    let ignored = ignored_prefixes();
    let mut missing = Vec::new();
    for document in documents() {
        let folder = document.parent().unwrap().to_path_buf();
        let text = prose(&read(&document));
        for span in code_spans(&text)
            .into_iter()
            .filter(|s| is_repository_path(s))
        {
            let is_ignored = ignored
                .iter()
                .any(|prefix| span.starts_with(prefix.as_str()));
            let exists = [root.clone(), root.join("src"), folder.clone()]
                .iter()
                .any(|base| base.join(span).exists());
            if !is_ignored && !exists {
                missing.push(format!("{}: `{span}`", relative(&root, &document)));
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a document's headings; a repeated heading gets `-1`, `-2`… as on GitHub.
fn anchors(document: &Path) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = Vec::new();
    for line in prose(&read(document)).lines() {
        let heading = line.trim_start_matches('#');
        if heading.len() == line.len() || !heading.starts_with(' ') {
            continue;
        }
        let base = anchor(heading);
        let count = seen.entry(base.clone()).or_default();
        anchors.push(match *count {
            0 => base,
            n => format!("{base}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// The targets of the inline links `[text](target)` in `text`.
fn link_targets(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .filter(|target| !target.contains(' '))
        .collect()
}

/// A relative link leads to a file of this repository (not one that happens to sit beside a
/// checkout), and to a heading that exists when it names one.
#[test]
fn every_link_between_documents_leads_somewhere() {
    let root = repository();
    let mut broken = Vec::new();
    for document in documents() {
        let text = prose(&read(&document));
        for target in link_targets(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let linked = if file.is_empty() {
                document.clone()
            } else {
                document.parent().unwrap().join(file)
            };
            let inside = linked
                .canonicalize()
                .is_ok_and(|path| path.starts_with(root.canonicalize().unwrap()));
            let fine = inside
                && (fragment.is_empty()
                    || linked.extension().is_none_or(|e| e != "md")
                    || anchors(&linked).iter().any(|a| a == fragment));
            if !fine {
                broken.push(format!("{}: ({target})", relative(&root, &document)));
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

#[test]
fn the_docs_cite_no_internal_issue_numbers() {
    let root = repository();
    let mut cited = Vec::new();
    for document in documents() {
        for (number, line) in read(&document).lines().enumerate() {
            let lower = line.to_lowercase();
            let cites = lower.match_indices("issue").any(|(at, _)| {
                let rest = lower[at + "issue".len()..].trim_start_matches('s');
                let rest = rest.trim_start().trim_start_matches('#');
                rest.starts_with(|c: char| c.is_ascii_digit())
            });
            if cites {
                cited.push(format!(
                    "{}:{}: {line}",
                    relative(&root, &document),
                    number + 1
                ));
            }
        }
    }
    assert!(cited.is_empty(), "{cited:#?}");
}
