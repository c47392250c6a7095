//! The pipeline's layout (ARCHITECTURE.md): its modules import each other
//! without a cycle, its folders form layers, nothing in it builds tensors
//! (candle stays in the models crate), and training is a leaf that only the
//! tool's `train` and `eval` commands reach. Read from the source, so a
//! change that breaks the layout fails here with the path that closes the
//! loop.
//!
//! Three graphs are read, one per crate, because `crate::` names a
//! different root in each: the library (`pipeline/core/src/`, the
//! tomlite-core package), the training crate (`pipeline/train/src/`,
//! tomlite-train) and the binary (`main.rs` and its `cli/` in
//! `pipeline/src/`, whose `lib.rs` only re-exports the library). An import is any path that
//! starts with `crate::`, `super::` or `self::`, in a `use` (braced groups
//! included) or in an expression; `super::` and `self::` are resolved from
//! the module that writes them. The crate root (`lib.rs`, `main.rs`) only
//! declares the modules and holds the binary's exit-code types: it is never
//! counted as imported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library's source (tomlite-core).
const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/pipeline/core/src");
/// The training crate's source (tomlite-train).
const TRAIN_SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/pipeline/train/src");
/// The tool's source: `main.rs`, `cli/` and the re-exporting `lib.rs`.
const BIN_SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/pipeline/src");

/// Which crate of a source folder a graph is read for.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    /// `lib.rs` and every module but the binary's.
    Library,
    /// `main.rs` and `cli/`.
    Binary,
}

/// A module path (`run::merge`) and the file that holds it, for one part of
/// the source tree under `src`. Test-only files (`tests.rs`) are left out:
/// tests may reach anywhere.
fn modules_in(src: &Path, part: Part) -> BTreeMap<String, PathBuf> {
    fn walk(root: &Path, dir: &Path, part: Part, out: &mut BTreeMap<String, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, part, out);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "tests") {
                continue;
            }
            let binary = parts.first().is_some_and(|p| p == "main" || p == "cli");
            if binary != (part == Part::Binary) {
                continue;
            }
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, part, &mut out);
    out
}

/// The library's modules.
fn modules() -> BTreeMap<String, PathBuf> {
    modules_in(Path::new(SRC), Part::Library)
}

/// The code of a file without its comments and its unit-test module (tests
/// may reach anywhere).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a use tree names, read from `s` at `*i` (just after a `::`),
/// each appended to `prefix`: `a::{b, c::{self, d}, e as f}` gives `a::b`,
/// `a::c`, `a::c::d` and `a::e`.
fn use_tree(s: &[u8], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let skip_space = |i: &mut usize| {
        while *i < s.len() && s[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_space(i);
    match s.get(*i) {
        Some(b'{') => {
            *i += 1;
            loop {
                skip_space(i);
                match s.get(*i) {
                    None => return,
                    Some(b'}') => {
                        *i += 1;
                        return;
                    }
                    _ => {}
                }
                use_tree(s, i, prefix, out);
                // Past an `as` alias to the next item or the group's end.
                while *i < s.len() && !matches!(s[*i], b',' | b'}') {
                    *i += 1;
                }
                if s.get(*i) == Some(&b',') {
                    *i += 1;
                }
            }
        }
        Some(b'*') => {
            *i += 1;
            out.push(prefix.to_vec());
        }
        _ => {
            let start = *i;
            while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
                *i += 1;
            }
            let ident = std::str::from_utf8(&s[start..*i]).unwrap();
            if ident.is_empty() || ident == "self" {
                out.push(prefix.to_vec());
                return;
            }
            let mut path = prefix.to_vec();
            path.push(ident.to_string());
            if s[*i..].starts_with(b"::") {
                *i += 2;
                use_tree(s, i, &path, out);
            } else {
                out.push(path);
            }
        }
    }
}

/// Every path a module's code names from its crate's root, `super::` and
/// `self::` resolved against `module` (its own path, `cli::commands::run`),
/// and every path that starts with a bare name read as relative to
/// `module` (only those that name one of its children count, in
/// [`graph_of`]: `std::` or `serde_json::` names no module of the crate).
fn named_paths(code: &str, module: &str) -> Vec<Vec<String>> {
    let start_re = regex::Regex::new(r"\b(crate|super|self)((?:::super)*)::").unwrap();
    let here: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    };
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for m in start_re.captures_iter(code) {
        let ups = match &m[1] {
            "crate" => None,
            "self" => Some(0),
            _ => Some(1 + m[2].matches("super").count()),
        };
        let base: Vec<String> = match ups {
            None => Vec::new(),
            // `super::` above the root is a compile error; read it as the root.
            Some(n) => here[..here.len().saturating_sub(n)].to_vec(),
        };
        let mut i = m.get(0).unwrap().end();
        use_tree(bytes, &mut i, &base, &mut out);
    }
    // A path that starts with a name, not after another `::` or a word:
    // relative to the module itself when the name is one of its children
    // (`use data::TomSet` in `train/mod.rs`); the caller drops the rest.
    let bare_re = regex::Regex::new(r"([a-z_][a-z0-9_]*)::").unwrap();
    for m in bare_re.captures_iter(code) {
        let at = m.get(0).unwrap().start();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c == ':' || c == '$' || c.is_alphanumeric() || c == '_')
            || matches!(&m[1], "crate" | "super" | "self")
        {
            continue;
        }
        let mut i = m.get(1).unwrap().start();
        use_tree(bytes, &mut i, &here, &mut out);
    }
    out
}

/// Which modules each module imports, for the modules of `modules`: the
/// longest prefix of a named path that is a module (`crate::run::merge::x`
/// is `run::merge`); the root and the module itself are not counted.
fn graph_of(modules: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (name, file) in modules {
        let mut uses = BTreeSet::new();
        for parts in named_paths(&code(file), name) {
            if let Some(target) = (1..=parts.len())
                .rev()
                .map(|k| parts[..k].join("::"))
                .find(|p| modules.contains_key(p))
                && &target != name
            {
                uses.insert(target);
            }
        }
        graph.insert(name.clone(), uses);
    }
    graph
}

/// The library's import graph.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    graph_of(&modules())
}

/// The binary's import graph (`main.rs` is the empty path).
fn binary_imports() -> BTreeMap<String, BTreeSet<String>> {
    graph_of(&modules_in(Path::new(BIN_SRC), Part::Binary))
}

/// The training crate's modules (its `lib.rs` is the empty path).
fn train_modules() -> BTreeMap<String, PathBuf> {
    modules_in(Path::new(TRAIN_SRC), Part::Library)
}

/// A cycle through `start`, if there is one: the modules in order.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn dfs(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if dfs(graph, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    dfs(graph, start, start, &mut path, &mut seen).then_some(path)
}

/// Every cycle of a graph, one line per module on one (`a -> b -> a`).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    graph
        .keys()
        .filter_map(|m| cycle_through(graph, m))
        .map(|c| format!("{} -> {}", c.join(" -> "), c[0]))
        .collect()
}

/// Every module's folder (its first path segment) and the folders it uses.
fn folders(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // lib.rs (the empty path) only declares the folders.
    for (from, uses) in graph.iter().filter(|(m, _)| !m.is_empty()) {
        let entry = out.entry(top(from)).or_default();
        for to in uses {
            if top(to) != top(from) {
                entry.insert(top(to));
            }
        }
    }
    out
}

#[test]
fn the_layout_is_read_from_every_module() {
    let graph = imports();
    // A broken walk or pattern would make the other tests pass vacuously.
    for module in [
        "ingest::record",
        "annotate::classifier",
        "rules::decide",
        "run",
        "report",
    ] {
        assert!(
            graph.contains_key(module),
            "module {module} not found under {SRC}"
        );
    }
    assert!(
        graph["run::batch"].contains("rules::decide"),
        "a batch is decided through rules::decide: {:?}",
        graph["run::batch"]
    );
}

#[test]
fn no_module_imports_itself_back() {
    let found = cycles(&imports());
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_binary_is_read_from_every_module() {
    let graph = binary_imports();
    for module in [
        "",
        "cli",
        "cli::summary",
        "cli::settings",
        "cli::commands::annotate",
    ] {
        assert!(
            graph.contains_key(module),
            "module `{module}` of the binary not found under {BIN_SRC}: {:?}",
            graph.keys().collect::<Vec<_>>()
        );
    }
    // `use super::load_classifier` and `use crate::cli::summary` both count.
    assert!(
        graph["cli::commands::annotate"].contains("cli::commands")
            && graph["cli::commands::annotate"].contains("cli::summary"),
        "{:?}",
        graph["cli::commands::annotate"]
    );
    assert!(graph[""].contains("cli::args"), "{:?}", graph[""]);
}

#[test]
fn no_module_of_the_binary_imports_itself_back() {
    let cycles = cycles(&binary_imports());
    assert!(
        cycles.is_empty(),
        "import cycles in the binary:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_training_crate_is_read_from_every_module_and_has_no_cycle() {
    let graph = graph_of(&train_modules());
    for module in ["", "fit", "calibrate", "bagging", "eval", "sensitive"] {
        assert!(
            graph.contains_key(module),
            "module `{module}` of the training crate not found under {TRAIN_SRC}: {:?}",
            graph.keys().collect::<Vec<_>>()
        );
    }
    // lib.rs runs the steps; the heads are fitted through the bagging.
    assert!(graph[""].contains("fit"), "{:?}", graph[""]);
    assert!(graph["fit"].contains("bagging"), "{:?}", graph["fit"]);
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "import cycles in the training crate:\n{}",
        found.join("\n")
    );
}

#[test]
fn only_the_train_and_eval_commands_reach_the_training_crate() {
    // Training is a leaf: the library cannot name it (tomlite-core does not
    // depend on it), and in the tool only the code of `train` and `eval`
    // (their arguments, settings and commands) does.
    let mut naming: Vec<String> = modules_in(Path::new(BIN_SRC), Part::Binary)
        .into_iter()
        .filter(|(_, file)| {
            let code = code(file);
            code.contains("tomlite_train") || code.contains("tomlite::train")
        })
        .map(|(module, _)| module)
        .collect();
    naming.sort();
    assert_eq!(
        naming,
        [
            "cli::args",
            "cli::commands::eval",
            "cli::commands::train",
            "cli::settings"
        ],
        "modules of the tool that name the training crate"
    );
}

/// Writes `files` (path, code) under a new temp folder.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

#[test]
fn a_planted_cycle_is_found_through_super_self_and_braced_imports() {
    // A library whose `a::inner` reaches `b` through `super::super::` in a
    // braced group, and `b` reaches back through `crate::` in an
    // expression; a binary whose command and summary import each other
    // through `super::` and `crate::cli::`. Unit tests may reach anywhere.
    let planted = [
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a/mod.rs", "pub mod inner;\n"),
        (
            "a/inner.rs",
            "use super::super::{c, b::{self, Thing as Other}};\npub fn g() {}\n",
        ),
        (
            "b.rs",
            "pub struct Thing;\npub fn f() {\n    crate::a::inner::g();\n}\n",
        ),
        (
            "c.rs",
            "pub struct C;\n#[cfg(test)]\nmod tests {\n    use crate::a::inner::g;\n}\n",
        ),
        ("main.rs", "mod cli;\nuse cli::commands;\nstruct Failure;\n"),
        ("cli/mod.rs", "pub mod commands;\npub mod summary;\n"),
        ("cli/commands/mod.rs", "pub mod annotate;\nfn load() {}\n"),
        (
            "cli/commands/annotate.rs",
            "use super::load;\nuse crate::{Failure, cli::summary};\npub struct Counts;\n",
        ),
        ("cli/summary.rs", "use super::commands::annotate::Counts;\n"),
    ];
    let dir = tree(&planted);
    let library = graph_of(&modules_in(dir.path(), Part::Library));
    assert_eq!(
        library["a::inner"],
        BTreeSet::from(["b".to_string(), "c".to_string()])
    );
    // `c`'s unit tests reach `a::inner`; they are not counted.
    assert!(library["c"].is_empty(), "{:?}", library["c"]);
    assert_eq!(
        cycles(&library),
        ["a::inner -> b -> a::inner", "b -> a::inner -> b"]
    );
    let binary = graph_of(&modules_in(dir.path(), Part::Binary));
    assert_eq!(
        binary["cli::commands::annotate"],
        BTreeSet::from(["cli::commands".to_string(), "cli::summary".to_string()])
    );
    assert_eq!(
        cycles(&binary),
        [
            "cli::commands::annotate -> cli::summary -> cli::commands::annotate",
            "cli::summary -> cli::commands::annotate -> cli::summary",
        ]
    );

    // The same trees with the loops cut have no cycle.
    let cut: Vec<(&str, &str)> = planted
        .iter()
        .map(|&(path, text)| match path {
            "b.rs" => (path, "pub struct Thing;\n"),
            "cli/summary.rs" => (path, "pub struct Counts;\n"),
            _ => (path, text),
        })
        .collect();
    let dir = tree(&cut);
    assert!(cycles(&graph_of(&modules_in(dir.path(), Part::Library))).is_empty());
    assert!(cycles(&graph_of(&modules_in(dir.path(), Part::Binary))).is_empty());
}

/// ARCHITECTURE.md's layers, bottom first: a folder imports only from its
/// own layer or the ones below. A new folder must be placed here.
const LAYERS: [&[&str]; 7] = [
    &["hash", "vocab", "segment", "ingest"],
    &["graph"],
    &["annotate"],
    &["rules"],
    &["stage", "curate"],
    &["report"],
    &["run"],
];

fn layer_of(folder: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&folder))
}

#[test]
fn the_folders_are_layers() {
    let folders = folders(&imports());
    let cycles: Vec<String> = folders
        .keys()
        .filter_map(|f| cycle_through(&folders, f))
        .map(|c| format!("{} -> {}", c.join(" -> "), c[0]))
        .collect();
    assert!(
        cycles.is_empty(),
        "folders that import each other:\n{}",
        cycles.join("\n")
    );
    let mut upward = Vec::new();
    for (from, uses) in &folders {
        let Some(low) = layer_of(from) else {
            panic!("{from} is in no layer: place it in LAYERS and ARCHITECTURE.md");
        };
        for to in uses {
            let high = layer_of(to).unwrap_or_else(|| panic!("{to} is in no layer"));
            if high > low {
                upward.push(format!(
                    "{from} (layer {}) imports {to} (layer {})",
                    low + 1,
                    high + 1
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports up the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_pipeline_builds_no_tensors() {
    // Candle stays in the models crate: the pipeline and its training hand
    // it texts and plain f32 rows (tomlite_models::Rows) and get scores
    // and heads back.
    let mut found = Vec::new();
    for file in modules().values().chain(train_modules().values()) {
        let code = code(file);
        for word in ["candle", "Tensor"] {
            if code.contains(word) {
                found.push(format!("{} names `{word}`", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
