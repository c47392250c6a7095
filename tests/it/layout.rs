//! The pipeline's layout (ARCHITECTURE.md): its modules import each other
//! without a cycle, its folders form layers, and nothing in it builds
//! tensors (candle stays in the models crate). Read from the source, so a
//! change that breaks the layout fails here with the path that closes the
//! loop.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/pipeline/src");

/// A module path (`run::merge`) and the file that holds it.
fn modules() -> BTreeMap<String, PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
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
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            // The binary (`main.rs` and its `cli/`) sits on top of the
            // library and is not part of its graph.
            if parts.first().is_some_and(|p| p == "main" || p == "cli") {
                continue;
            }
            out.insert(parts.join("::"), path);
        }
    }
    let mut out = BTreeMap::new();
    walk(Path::new(SRC), Path::new(SRC), &mut out);
    out
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

/// Which modules each module names through `crate::…`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    let path_re = regex::Regex::new(r"crate::((?:[a-z_0-9]+::)*[a-z_0-9]+)").unwrap();
    let mut graph = BTreeMap::new();
    for (name, file) in &modules {
        let mut uses = BTreeSet::new();
        for m in path_re.captures_iter(&code(file)) {
            let parts: Vec<&str> = m[1].split("::").collect();
            // The longest prefix that is a module: `crate::run::merge::x` is run::merge.
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
    let graph = imports();
    let cycles: Vec<String> = graph
        .keys()
        .filter_map(|m| cycle_through(&graph, m))
        .map(|c| format!("{} -> {}", c.join(" -> "), c[0]))
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
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
    &["run", "train"],
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
    // Candle stays in the models crate: the pipeline hands it texts and
    // plain f32 rows (tomlite_models::Rows) and gets scores back.
    let mut found = Vec::new();
    for file in modules().values() {
        let code = code(file);
        for word in ["candle", "Tensor"] {
            if code.contains(word) {
                found.push(format!("{} names `{word}`", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
