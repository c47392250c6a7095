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
        (
            "Ida Berg",
            &["I"][..],
            "aliases[0]",
            "fewer than two letters",
        ),
        (
            "Ada Lind",
            &["Ada", "a"],
            "aliases[1]",
            "fewer than two letters",
        ),
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

// A registry edge whose relation was under the classifier's abstain floor
// was never proposed nor counted, so `more_than_two_edge_candidates` saw
// fewer candidates than the seed intends ("quarantine ambiguous or weak
// edge candidates").
#[test]
fn weak_registry_edges_are_proposed_and_quarantined_with_their_confidence() {
    assert!(
        repo()
            .join("models/artifacts/all-MiniLM-L6-v2/model.safetensors")
            .is_file(),
        "the encoder is missing: run scripts/fetch-model (CI does) before the tests"
    );
    let env = Env::new();
    let text = "Lena bought bread, Jonas fixed the bike and Sam painted the fence.";
    env.jsonl(
        "records.jsonl",
        &[
            json!({"id": "w-1", "persona_id": "ada", "kind": "persona_memory",
                 "source_path": "personas/ada/memory/w-1.md",
                 "created_at": "2026-11-04T09:00:00Z", "text": text}),
        ],
    );
    env.run_with_sample_nodes().ok();
    // The record carries no persona signal: no tag is sure enough to be
    // promoted (the classifier abstains, or tags a weak kind that the
    // policy quarantines), so every relation is weak.
    assert_eq!(env.receipt()["counts"]["promoted_tags"], 0);
    let edges = edges_of(&env, "w-1");
    let mut targets: Vec<&str> = edges
        .iter()
        .map(|e| e["target_node"].as_str().unwrap())
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        ["person:jonas", "user:lena", "user:sam"],
        "{edges:#?}"
    );
    for e in &edges {
        let conf = e["confidence"].as_f64().unwrap();
        assert!(conf < 0.5, "a weak edge: {e:?}");
        let r = reasons(e);
        assert!(
            r.contains(&"confidence_below_threshold".to_string())
                && r.contains(&"more_than_two_edge_candidates".to_string()),
            "{e:?}"
        );
        let detail = e["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("edge confidence {conf} < 0.85")),
            "{detail}"
        );
    }
    assert_eq!(env.receipt()["counts"]["quarantined_edges"], 3);
}
