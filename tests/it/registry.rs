//! The node registry as the classifier uses it: which names may be linked,
//! and which edge candidates its mentions become.

use serde_json::{Map, Value, json};

use crate::common::*;

fn node(id: &str, name: &str, aliases: &[&str]) -> Value {
    json!({"id": id, "kind": "person", "name": name, "aliases": aliases})
}

// Single characters, stop words, punctuation and zero-width names were
// accepted as aliases, linked in nearly every record and pushed records
// over the edge limit.
#[test]
fn names_that_would_link_nearly_every_record_are_refused_naming_line_and_field() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("r1", "Keep answers short.")]);
    for (name, aliases, field, says) in [
        ("Ida Berg", &["I"][..], "aliases[0]", "fewer than two letters"),
        ("Ada Lind", &["Ada", "a"], "aliases[1]", "fewer than two letters"),
        ("Theo Marsh", &["the"], "aliases[0]", "common word"),
        ("Theo Marsh", &["The"], "aliases[0]", "common word"),
        ("Dot Fenn", &["."], "aliases[0]", "fewer than two letters"),
        ("Zed Wu", &["\u{200b}"], "aliases[0]", "U+200B"),
        ("Zed Wu", &["Zed\u{200b}"], "aliases[0]", "U+200B"),
        ("Bidi Roe", &["Bi\u{202e}di"], "aliases[0]", "U+202E"),
        ("I", &[], "name", "fewer than two letters"),
        ("and", &[], "name", "common word"),
    ] {
        env.jsonl(
            "nodes.jsonl",
            &[
                node("person:ok", "Okafor Nwosu", &["Okafor"]),
                node("person:x", name, aliases),
            ],
        );
        let ran = env.run(&[
            "--input",
            "records.jsonl",
            "--nodes",
            "nodes.jsonl",
            "--staging",
            "staging",
        ]);
        assert_eq!(ran.code, 2, "{name:?} {aliases:?}: {}", ran.stderr);
        assert!(
            ran.stderr.contains("nodes.jsonl, line 2: ") && ran.stderr.contains(field),
            "{name:?} {aliases:?}: {}",
            ran.stderr
        );
        assert!(ran.stderr.contains(says), "{}", ran.stderr);
        assert!(!env.staging().join("LATEST").exists(), "nothing ran");
    }
    // Short names that are names still load.
    env.jsonl(
        "nodes.jsonl",
        &[node("person:al", "Al", &["Jo", "Ed", "Bo-Ra", "O'Neil"])],
    );
    env.run(&[
        "--input",
        "records.jsonl",
        "--nodes",
        "nodes.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
}

fn edges_of(env: &Env, record: &str) -> Vec<Map<String, Value>> {
    let mut out = env.table("promoted_edges");
    for r in &mut out {
        r.insert("reasons".into(), json!([]));
    }
    out.extend(
        env.table("quarantine")
            .into_iter()
            .filter(|r| r["item_type"] == "edge"),
    );
    out.retain(|r| r["record_id"] == record);
    out
}
