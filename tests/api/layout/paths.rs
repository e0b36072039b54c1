//! Which modules a file names, read the way the compiler reads them: every `use` tree (nested
//! groups, `self`, `as`) and every `crate::`, `super::` and `self::` path in the code, made
//! absolute from the crate root (inline `mod x { … }` blocks included), then followed through
//! the `use` declarations of the module it lands in, so that `crate::store::Activation` counts as
//! naming `store::directory`, where `Activation` is defined, not `store`.

use std::collections::{BTreeMap, BTreeSet};

use super::source::SourceFile;

/// A module path from the crate root: `["store", "postgres"]`.
pub type Module = Vec<String>;

/// What a file's `use` declarations bind: in a module (file or inline), a name → the absolute
/// path it stands for.
pub type Bindings = BTreeMap<(Module, String), Vec<String>>;

/// What one file names and binds.
pub struct Names {
    /// Absolute paths named by the code before the tests.
    pub paths: Vec<Vec<String>>,
    pub bindings: Bindings,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSeparator,
    Open,
    Close,
    Comma,
    Star,
    Semicolon,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        let token = match c {
            ':' if chars.get(i + 1) == Some(&':') => {
                i += 1;
                Token::PathSeparator
            }
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            '*' => Token::Star,
            ';' => Token::Semicolon,
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            _ => Token::Other,
        };
        tokens.push(token);
        i += 1;
    }
    tokens
}

fn ident(token: Option<&Token>) -> Option<&str> {
    match token {
        Some(Token::Ident(name)) => Some(name),
        _ => None,
    }
}

/// Everything `file` names and binds, its paths absolute (paths into other crates are left out).
pub fn names(file: &SourceFile, modules: &BTreeSet<Module>) -> Names {
    let tokens = tokens(&file.code[..file.lines_before_tests].join("\n"));
    let mut names = Names {
        paths: Vec::new(),
        bindings: Bindings::new(),
    };
    // Inline modules open here: (name, the brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let here: Module = file
            .module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        let after_separator = i > 0 && tokens[i - 1] == Token::PathSeparator;
        match (&tokens[i], ident(tokens.get(i + 1)), tokens.get(i + 2)) {
            (Token::Ident(keyword), Some(name), Some(Token::Open)) if keyword == "mod" => {
                depth += 1;
                inline.push((name.to_owned(), depth));
                i += 3;
                continue;
            }
            (Token::Open, ..) => depth += 1,
            (Token::Close, ..) => {
                if inline.last().is_some_and(|(_, at)| *at == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            (Token::Ident(keyword), ..) if keyword == "use" && !after_separator => {
                let mut leaves = Vec::new();
                i += 1;
                use_tree(&tokens, &mut i, &[], &mut leaves);
                while i < tokens.len() && tokens[i] != Token::Semicolon {
                    i += 1;
                }
                for (path, binds) in leaves {
                    if let Some(absolute) = absolute(&here, &path, modules) {
                        if let Some(name) = binds {
                            names
                                .bindings
                                .insert((here.clone(), name), absolute.clone());
                        }
                        names.paths.push(absolute);
                    }
                }
                continue;
            }
            (Token::Ident(head), ..)
                if matches!(head.as_str(), "crate" | "super" | "self")
                    && tokens.get(i + 1) == Some(&Token::PathSeparator)
                    && !after_separator =>
            {
                let mut path = vec![head.clone()];
                i += 1;
                while tokens.get(i) == Some(&Token::PathSeparator) {
                    let Some(segment) = ident(tokens.get(i + 1)) else {
                        break;
                    };
                    path.push(segment.to_owned());
                    i += 2;
                }
                names.paths.extend(absolute(&here, &path, modules));
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// Reads one use tree (or one item of a group) from `tokens[*at]`, as leaves: the path as
/// written, and the name it binds (`None` for a glob).
fn use_tree(
    tokens: &[Token],
    at: &mut usize,
    prefix: &[String],
    leaves: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(*at) {
            Some(Token::Open) => {
                *at += 1;
                loop {
                    use_tree(tokens, at, &path, leaves);
                    match tokens.get(*at) {
                        Some(Token::Comma) => *at += 1,
                        Some(Token::Close) => {
                            *at += 1;
                            break;
                        }
                        _ => break,
                    }
                    if tokens.get(*at) == Some(&Token::Close) {
                        *at += 1;
                        break;
                    }
                }
                break;
            }
            Some(Token::Star) => {
                *at += 1;
                leaves.push((path.clone(), None));
                break;
            }
            Some(Token::Ident(name)) if name == "self" && !path.is_empty() => {
                *at += 1;
                let bound = path.last().cloned();
                leaves.push((path.clone(), alias(tokens, at).or(bound)));
                break;
            }
            Some(Token::Ident(name)) => {
                path.push(name.clone());
                *at += 1;
                if tokens.get(*at) == Some(&Token::PathSeparator) {
                    *at += 1;
                    continue;
                }
                let bound = alias(tokens, at).unwrap_or_else(|| name.clone());
                leaves.push((path.clone(), Some(bound)));
                break;
            }
            _ => break,
        }
    }
}

/// `as name` after a use-tree leaf: the name it binds instead (`_` binds none).
fn alias(tokens: &[Token], at: &mut usize) -> Option<String> {
    if ident(tokens.get(*at)) != Some("as") {
        return None;
    }
    let name = ident(tokens.get(*at + 1))?.to_owned();
    *at += 2;
    Some(name)
}

/// `path` as written in module `here`, from the crate root; `None` for a path into another
/// crate. `super` is the parent of `here` (for `src/a/mod.rs`, module `a`, the crate root).
fn absolute(here: &[String], path: &[String], modules: &BTreeSet<Module>) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = here.to_vec();
    let mut rest = path;
    match first.as_str() {
        "crate" => {
            base.clear();
            rest = &path[1..];
        }
        "self" => rest = &path[1..],
        "super" => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => {
            let child: Module = here.iter().chain([first]).cloned().collect();
            if !modules.contains(&child) {
                return None;
            }
        }
    }
    Some(base.into_iter().chain(rest.iter().cloned()).collect())
}

/// The module that defines what `path` names: the longest module `path` starts with, followed
/// through a `use` in that module when the next segment is a name it binds.
pub fn defining_module(path: &[String], modules: &BTreeSet<Module>, bindings: &Bindings) -> Module {
    let mut path = path.to_vec();
    for _ in 0..16 {
        let module = (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|prefix| modules.contains(prefix))
            .unwrap_or_default();
        let next = path.get(module.len()).cloned();
        match next.and_then(|name| bindings.get(&(module.clone(), name))) {
            Some(target) if !path.starts_with(target) => {
                path = target
                    .iter()
                    .chain(&path[module.len() + 1..])
                    .cloned()
                    .collect();
            }
            _ => return module,
        }
    }
    Vec::new()
}
