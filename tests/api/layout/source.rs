//! A reader of this crate's own source, enough to measure its shape: which module a file is,
//! its code with comments and literals blanked (so braces and paths in them do not count), where
//! its tests begin and its functions' lengths. What it names is in [`super::paths`].

use std::path::{Path, PathBuf};

/// One `.rs` file under `src/`.
pub struct SourceFile {
    /// Repository-relative, with `/` separators (`src/http/mod.rs`).
    pub path: String,
    /// Its module path from the crate root: `src/http/mod.rs` is `["http"]`, `src/lib.rs` is `[]`.
    pub module: Vec<String>,
    /// The file's lines with comments, strings and character literals blanked; line numbers kept.
    pub code: Vec<String>,
    /// How many lines come before its unit tests (the first unindented `#[cfg(test)]` that opens
    /// a module), or all of them.
    pub lines_before_tests: usize,
}

/// A function and how many lines it spans, from `fn` to its closing brace.
pub struct Function {
    pub name: String,
    pub line: usize,
    pub lines: usize,
}

pub fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file of the library and the binary, sorted by path.
pub fn source_files() -> Vec<SourceFile> {
    let root = repository();
    let mut paths = Vec::new();
    collect(&root.join("src"), "rs", &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let relative = relative(&root, &path);
            let code: Vec<String> = blank_comments_and_literals(&text)
                .lines()
                .map(str::to_owned)
                .collect();
            SourceFile {
                module: module_of(&relative),
                lines_before_tests: tests_start(&code).unwrap_or(code.len()),
                path: relative,
                code,
            }
        })
        .collect()
}

/// Every file under `dir` whose name ends in `.{extension}`.
pub fn collect(dir: &Path, extension: &str, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, extension, into);
        } else if path.extension().is_some_and(|e| e == extension) {
            into.push(path);
        }
    }
}

pub fn relative(root: &Path, path: &Path) -> String {
    let parts: Vec<String> = path
        .strip_prefix(root)
        .unwrap()
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

fn module_of(relative: &str) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .trim_start_matches("src/")
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The first unindented `#[cfg(test)]` on a module with a body (`mod tests { … }`); a
/// `#[cfg(test)] mod tests;` declaration is not where the file's own code ends.
fn tests_start(code: &[String]) -> Option<usize> {
    code.windows(2).position(|pair| {
        let opens_module = pair[1].starts_with("mod ") || pair[1].starts_with("pub(crate) mod ");
        pair[0].starts_with("#[cfg(test)]") && opens_module && pair[1].trim_end().ends_with('{')
    })
}

/// `text` with every comment, string and character literal replaced by spaces (newlines kept):
/// what is left is code, where a brace is a brace and a path is a path.
pub fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let (c, next) = (chars[i], chars.get(i + 1).copied());
        let literal_end = if c == '/' && next == Some('/') {
            Some(line_end(&chars, i))
        } else if c == '/' && next == Some('*') {
            Some(block_comment_end(&chars, i))
        } else if c == '\'' {
            char_literal_end(&chars, i)
        } else {
            string_end(&chars, i)
        };
        match literal_end {
            Some(end) => {
                out.extend(
                    chars[i..end]
                        .iter()
                        .map(|&c| if c == '\n' { c } else { ' ' }),
                );
                i = end;
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

fn line_end(chars: &[char], start: usize) -> usize {
    chars[start..]
        .iter()
        .position(|&c| c == '\n')
        .map_or(chars.len(), |n| start + n)
}

fn block_comment_end(chars: &[char], start: usize) -> usize {
    let (mut depth, mut i) = (0, start);
    while i + 1 < chars.len() {
        match (chars[i], chars[i + 1]) {
            ('/', '*') => {
                depth += 1;
                i += 2;
            }
            ('*', '/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    chars.len()
}

/// Where the string literal starting at `start` ends (`"…"`, `b"…"`, `r#"…"#`, `br"…"`), if
/// one starts there.
fn string_end(chars: &[char], start: usize) -> Option<usize> {
    if start > 0 && is_identifier(chars[start - 1]) {
        return None;
    }
    let mut i = start;
    if chars[i] == 'b' {
        i += 1;
    }
    let raw = chars.get(i) == Some(&'r');
    let mut hashes = 0;
    if raw {
        i += 1;
        hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
        i += hashes;
    }
    if chars.get(i) != Some(&'"') {
        return None;
    }
    i += 1;
    while i < chars.len() {
        if !raw && chars[i] == '\\' {
            i += 2;
            continue;
        }
        let closing_hashes = chars[i + 1..].iter().take(hashes).filter(|&&c| c == '#');
        if chars[i] == '"' && closing_hashes.count() == hashes {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(chars.len())
}

/// Where the character literal at `start` ends (`'x'`, `'\n'`, `'\''`, `'\u{7f}'`), or `None`
/// when the quote opens a lifetime or a label.
fn char_literal_end(chars: &[char], start: usize) -> Option<usize> {
    if chars.get(start + 1) == Some(&'\\') {
        let close = chars.get(start + 3..)?.iter().position(|&c| c == '\'')?;
        return Some(start + 3 + close + 1);
    }
    (chars.get(start + 2) == Some(&'\'')).then_some(start + 3)
}

fn is_identifier(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The functions of the code before its tests, with their lengths.
pub fn functions(file: &SourceFile) -> Vec<Function> {
    let code = &file.code[..file.lines_before_tests];
    let mut found = Vec::new();
    for (number, line) in code.iter().enumerate() {
        let Some(at) = find_keyword(line, "fn") else {
            continue;
        };
        let name: String = line[at + 2..]
            .trim_start()
            .chars()
            .take_while(|&c| is_identifier(c))
            .collect();
        if name.is_empty() {
            continue; // `fn(…)` as a type
        }
        if let Some(end) = body_end(code, number, at) {
            found.push(Function {
                name,
                line: number + 1,
                lines: end - number + 1,
            });
        }
    }
    found
}

fn find_keyword(line: &str, keyword: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    line.match_indices(keyword).map(|(at, _)| at).find(|&at| {
        let before = at == 0 || !is_identifier(bytes[at - 1] as char);
        let after = bytes
            .get(at + keyword.len())
            .is_some_and(|&b| b == b' ' || b == b'<');
        before && after
    })
}

/// The line where the body opened after column `from` of line `start` closes; `None` for a
/// declaration without a body (a `;` outside brackets before any `{`, as in a trait).
fn body_end(code: &[String], start: usize, from: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut brackets = 0usize;
    let mut opened = false;
    for (number, line) in code.iter().enumerate().skip(start) {
        let text = if number == start { &line[from..] } else { line };
        for c in text.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' if opened => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(number);
                    }
                }
                '(' | '[' if !opened => brackets += 1,
                ')' | ']' if !opened => brackets = brackets.saturating_sub(1),
                ';' if !opened && brackets == 0 => return None,
                _ => {}
            }
        }
    }
    None
}
