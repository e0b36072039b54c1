//! The shape of the house, checked so it stays the shape `docs/ARCHITECTURE.md` describes: layers
//! that only look down, no import circle at any depth, files and functions a reader can hold in
//! their head, and docs whose map and paths are true.

mod docs;
mod paths;
mod source;
pub mod statements;

use std::collections::{BTreeMap, BTreeSet};

use paths::{defining_module, names, Bindings, Module};
use source::{functions, source_files, SourceFile};

/// The crate's top-level modules by layer, bottom first. A module may name modules of its own
/// layer or below, never above; a new module has to be given its place here.
const LAYERS: &[(&str, &[&str])] = &[
    ("leaf", &["clock", "secret", "telemetry", "validation"]),
    (
        "domain",
        &[
            "auth",
            "cluster",
            "connect",
            "drain",
            "placement",
            "policy",
            "rate_limit",
            "rebalancer",
            "repartitioner",
        ],
    ),
    ("store", &["store"]),
    ("use cases", &["oracle"]),
    ("shell", &["background", "dns", "http", "listener", "tls"]),
    ("configuration", &["config"]),
];

/// Longest a source file may be before its unit tests.
const MAX_FILE_LINES: usize = 900;
/// Longest a function may be, from `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 120;

fn layer_of(top: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, modules))| modules.contains(&top))
        .map(|(rank, (name, _))| (rank, *name))
}

/// Every module-to-module arrow of the code before the tests: from a file's module to the module
/// that defines what it names (followed through re-exports, see [`paths`]). Arrows to a
/// module's own ancestors or descendants are left out: a parent and its children are one room.
fn arrows(files: &[SourceFile]) -> BTreeSet<(Module, Module)> {
    let modules: BTreeSet<Module> = files.iter().map(|f| f.module.clone()).collect();
    let named: Vec<(&SourceFile, paths::Names)> =
        files.iter().map(|f| (f, names(f, &modules))).collect();
    let bindings: Bindings = named
        .iter()
        .flat_map(|(_, names)| names.bindings.clone())
        .collect();
    let mut arrows = BTreeSet::new();
    for (file, names) in named.iter().filter(|(f, _)| !f.module.is_empty()) {
        for path in &names.paths {
            let target = defining_module(path, &modules, &bindings);
            let related = target.starts_with(&file.module) || file.module.starts_with(&target);
            if !related {
                arrows.insert((file.module.clone(), target));
            }
        }
    }
    arrows
}

fn name(module: &[String]) -> String {
    format!("crate::{}", module.join("::"))
}

#[test]
fn every_top_level_module_has_a_layer_and_no_arrow_runs_up() {
    let files = source_files();
    let mut problems = Vec::new();
    let tops: BTreeSet<&String> = files.iter().filter_map(|f| f.module.first()).collect();
    for top in tops {
        if layer_of(top).is_none() {
            problems.push(format!("crate::{top} has no layer in LAYERS"));
        }
    }
    for (from, to) in arrows(&files) {
        let (Some(a), Some(b)) = (layer_of(&from[0]), layer_of(&to[0])) else {
            continue;
        };
        if b.0 > a.0 {
            problems.push(format!(
                "{} ({}) names {} ({}), a layer above it",
                name(&from),
                a.1,
                name(&to),
                b.1
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn leaves_name_no_other_module_and_nothing_below_names_the_configuration() {
    let files = source_files();
    let mut problems = Vec::new();
    for (from, to) in arrows(&files) {
        if layer_of(&from[0]).is_some_and(|(_, layer)| layer == "leaf") && from[0] != to[0] {
            problems.push(format!("the leaf {} names {}", name(&from), name(&to)));
        }
        if to[0] == "config" {
            problems.push(format!("{} names the configuration", name(&from)));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The domain decides and does no I/O: no database, HTTP, runtime, file, socket, process or
/// environment in it (addresses are data, sockets are not), and it reads neither a clock nor the
/// OS's randomness, so every algorithm runs in a unit test with a clock and a seeded RNG handed in.
#[test]
fn the_domain_does_no_io() {
    let forbidden = [
        "sqlx",
        "axum",
        "tokio",
        "reqwest",
        "hyper",
        "fs",
        "TcpStream",
        "TcpListener",
        "UdpSocket",
        "env",
        "process",
        "SystemTime",
        "Instant",
        "thread_rng",
        "OsRng",
        "from_entropy",
        "getrandom",
    ];
    let mut found = Vec::new();
    for file in source_files() {
        let in_domain = file
            .module
            .first()
            .and_then(|top| layer_of(top))
            .is_some_and(|(_, layer)| layer == "domain");
        if !in_domain {
            continue;
        }
        for (number, line) in file.code[..file.lines_before_tests].iter().enumerate() {
            let words = line.split(|c: char| !(c.is_alphanumeric() || c == '_'));
            for word in words.filter(|word| forbidden.contains(word)) {
                found.push(format!("{}:{}: {word}", file.path, number + 1));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// Import circles at every depth: between top-level modules, between the modules inside each,
/// and one level further down.
#[test]
fn no_import_circle_at_any_depth() {
    let files = source_files();
    let arrows = arrows(&files);
    for depth in 1..=3 {
        let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (from, to) in &arrows {
            let (a, b) = (cut(from, depth), cut(to, depth));
            if !a.starts_with(&b) && !b.starts_with(&a) {
                graph.entry(a).or_default().insert(b);
            }
        }
        if let Some(circle) = find_circle(&graph) {
            let names: Vec<String> = circle.iter().map(|m| name(m)).collect();
            panic!("import circle at depth {depth}: {}", names.join(" → "));
        }
    }
}

fn cut(module: &[String], depth: usize) -> Vec<String> {
    module[..module.len().min(depth)].to_vec()
}

/// A circle in `graph`, as the modules along it with the first repeated at the end.
fn find_circle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        OnPath,
        Done,
    }
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        marks: &mut BTreeMap<Vec<String>, Mark>,
        path: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        marks.insert(node.clone(), Mark::OnPath);
        path.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next) {
                Some(Mark::OnPath) => {
                    let start = path.iter().position(|m| m == next).unwrap();
                    let mut circle = path[start..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(circle) = visit(next, graph, marks, path) {
                        return Some(circle);
                    }
                }
            }
        }
        path.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if !marks.contains_key(node) {
            if let Some(circle) = visit(node, graph, &mut marks, &mut Vec::new()) {
                return Some(circle);
            }
        }
    }
    None
}

#[test]
fn no_source_file_is_long_before_its_tests() {
    let long: Vec<String> = source_files()
        .iter()
        .filter(|f| f.lines_before_tests > MAX_FILE_LINES)
        .map(|f| format!("{}: {} lines", f.path, f.lines_before_tests))
        .collect();
    assert!(long.is_empty(), "over {MAX_FILE_LINES} lines: {long:#?}");
}

#[test]
fn no_function_is_long() {
    let mut long = Vec::new();
    for file in source_files() {
        for function in functions(&file) {
            if function.lines > MAX_FUNCTION_LINES {
                long.push(format!(
                    "{}:{} {}: {} lines",
                    file.path, function.line, function.name, function.lines
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_FUNCTION_LINES} lines: {long:#?}"
    );
}

/// The reader itself, on code shaped to fool a careless one.
#[test]
fn the_source_reader_sees_code_not_comments_or_literals() {
    let text = "fn a() {\n    let s = \"}\"; // }\n    let c = '{';\n    let r = r#\"\"}\"#;\n    \
                let l: &'static str = \"\\\"}\";\n}\nfn b<'a>(x: &'a str) -> &'a str { x }\n";
    let file = SourceFile {
        path: "src/x.rs".to_owned(),
        module: vec!["x".to_owned()],
        code: source::blank_comments_and_literals(text)
            .lines()
            .map(str::to_owned)
            .collect(),
        lines_before_tests: 7,
    };
    let found: Vec<(String, usize)> = functions(&file)
        .into_iter()
        .map(|f| (f.name, f.lines))
        .collect();
    assert_eq!(found, [("a".to_owned(), 6), ("b".to_owned(), 1)]);

    let module = |path: &str| -> Module {
        path.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let modules: BTreeSet<Module> = ["", "http", "http::x", "store", "store::directory", "oracle"]
        .into_iter()
        .map(module)
        .collect();
    let uses = SourceFile {
        path: "src/http/x.rs".to_owned(),
        module: module("http::x"),
        code: source::blank_comments_and_literals(
            "use crate::{store::{Store, directory::Activation as Entry}, oracle};\n\
             use super::super::clock::Millis; // crate::config\n\
             mod inner { use super::super::y::Z; }\n\
             let y = self::z::W; let s = \"crate::dns\"; use serde::Serialize;\n",
        )
        .lines()
        .map(str::to_owned)
        .collect(),
        lines_before_tests: 4,
    };
    let found = names(&uses, &modules);
    let named: Vec<String> = found.paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        named,
        [
            "store::Store",
            "store::directory::Activation",
            "oracle",
            "clock::Millis",
            "http::y::Z",
            "http::x::z::W"
        ]
    );
    let entry = &found.bindings[&(module("http::x"), "Entry".to_owned())];
    assert_eq!(entry, &module("store::directory::Activation"));
    assert!(found
        .bindings
        .contains_key(&(module("http::x::inner"), "Z".to_owned())));

    let reexport: Bindings = [(
        (module("store"), "Activation".to_owned()),
        module("store::directory::Activation"),
    )]
    .into_iter()
    .collect();
    let target = defining_module(&module("store::Activation"), &modules, &reexport);
    assert_eq!(target, module("store::directory"));
}
