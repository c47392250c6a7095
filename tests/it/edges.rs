//! Edge candidates of the local classifier through the CLI: registry
//! mention linking, unknown people, memory links across nights, and stable
//! edge keys. The registry is the sample's (`data/sample/nodes.jsonl`).

use serde_json::{Map, Value, json};

use crate::common::*;

/// Every edge of the last run, promoted or quarantined: (record id, target
/// node, mention, edge key, reasons, quote, quote start, quote end).
fn edges(env: &Env) -> Vec<Map<String, Value>> {
    let mut out: Vec<Map<String, Value>> = env.table("promoted_edges");
    for r in &mut out {
        r.insert("reasons".into(), json!([]));
    }
    out.extend(
        env.table("quarantine")
            .into_iter()
            .filter(|r| r["item_type"] == "edge"),
    );
    out
}

fn of<'a>(edges: &'a [Map<String, Value>], record: &str) -> Vec<&'a Map<String, Value>> {
    by(edges, "record_id", record)
}

fn targets(edges: &[&Map<String, Value>]) -> Vec<(Option<String>, String)> {
    let mut t: Vec<(Option<String>, String)> = edges
        .iter()
        .map(|e| {
            (
                e["target_node"].as_str().map(str::to_string),
                e["target_mention"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    t.sort();
    t
}

fn memory(id: &str, text: &str) -> Value {
    json!({"id": id, "persona_id": "ada", "kind": "persona_memory",
           "source_path": format!("personas/ada/memory/{id}.md"),
           "created_at": "2026-11-04T09:00:00Z", "text": text})
}

#[test]
fn mentions_link_by_whole_word_longest_match_any_case_and_possessive() {
    let env = Env::new();
    let records = [
        (
            "e-poss",
            "Never message Sam's phone about work after 21:00 on weekdays.",
        ),
        (
            "e-long",
            "Sam Patel asked Ada never to message him about work after 21:00 on weekdays.",
        ),
        (
            "e-part",
            "Samantha asked Ada never to message her about work after 21:00 on weekdays.",
        ),
        (
            "e-case",
            "sam asked ada never to message him about work after 21:00 on weekdays.",
        ),
    ];
    env.jsonl("records.jsonl", &records.map(|(id, t)| memory(id, t)));
    env.run_with_sample_nodes().ok();
    let all = edges(&env);
    let sam = |id: &str| -> Vec<String> {
        of(&all, id)
            .iter()
            .filter(|e| e["target_node"] == "user:sam")
            .map(|e| e["target_mention"].as_str().unwrap().to_string())
            .collect()
    };
    // Possessive: "Sam's" names Sam.
    assert_eq!(sam("e-poss"), ["Sam"]);
    // Longest match first: one edge, mentioned as the full name.
    assert_eq!(sam("e-long"), ["Sam Patel"]);
    // Not inside another word: Samantha is not Sam (she is an unknown person).
    assert!(sam("e-part").is_empty(), "{:?}", of(&all, "e-part"));
    let samantha = of(&all, "e-part")
        .into_iter()
        .find(|e| e["target_mention"] == "Samantha")
        .expect("Samantha is proposed as an unknown person");
    assert!(samantha["target_node"].is_null());
    assert!(reasons(samantha).contains(&"unknown_target_node".to_string()));
    // Case-insensitive, the text's own spelling kept as the mention; a
    // link in another case than the registry's is doubtful (in training
    // such matches were mostly common words), so it stays under the bar.
    assert_eq!(sam("e-case"), ["sam"]);
    let lower = of(&all, "e-case")
        .into_iter()
        .find(|e| e["target_node"] == "user:sam")
        .unwrap();
    assert!(lower["confidence"].as_f64().unwrap() < 0.5, "{lower:?}");
    assert!(reasons(lower).contains(&"confidence_below_threshold".to_string()));
    let exact = of(&all, "e-long")
        .into_iter()
        .find(|e| e["target_node"] == "user:sam")
        .unwrap();
    assert!(exact["confidence"].as_f64().unwrap() > 0.85, "{exact:?}");
    // Every edge quotes its record verbatim at its byte offsets, and its
    // source is the record.
    for e in &all {
        let id = e["record_id"].as_str().unwrap();
        let text = records.iter().find(|r| r.0 == id).unwrap().1;
        let quote = at_offsets(text, e);
        assert_eq!(quote, e["source_quote"].as_str().unwrap());
        let m = e["target_mention"].as_str().unwrap();
        assert!(quote.contains(m), "{m} not in its quote");
    }
}

#[test]
fn unknown_people_and_agents_are_queued_and_capitalised_non_people_are_not() {
    let env = Env::new();
    env.jsonl(
        "records.jsonl",
        &[
            memory(
                "u-1",
                "On Monday in March, Aunt Rosa asked Ada never to call her before 9am. The CI on GitHub stayed red.",
            ),
            memory(
                "u-2",
                "Sam asked Ada never to let @lintbot post in the team channel after 21:00.",
            ),
        ],
    );
    env.run_with_sample_nodes().ok();
    let all = edges(&env);
    let unknown = |id: &str| -> Vec<String> {
        of(&all, id)
            .iter()
            .filter(|e| e["target_node"].is_null())
            .map(|e| e["target_mention"].as_str().unwrap().to_string())
            .collect()
    };
    // A titled name is one person; the weekday, the month, the acronym and
    // the product are nobody.
    assert_eq!(unknown("u-1"), ["Aunt Rosa"]);
    assert_eq!(unknown("u-2"), ["@lintbot"]);
    for e in all.iter().filter(|e| e["target_node"].is_null()) {
        assert!(reasons(e).contains(&"unknown_target_node".to_string()));
        let detail = e["detail"].to_string();
        assert!(
            detail.contains("no registry node for the mention"),
            "{detail}"
        );
    }
    // The registry's nodes in the same records are linked, not unknown.
    let known = targets(&of(&all, "u-2"));
    assert!(
        known.contains(&(Some("user:sam".into()), "Sam".into())),
        "{known:?}"
    );
}

#[test]
fn a_memory_links_to_an_earlier_night_and_edge_keys_are_stable() {
    let env = Env::new();
    let data = repo().join("data/sample");
    let (n1, n2, nodes) = (
        data.join("night-1.jsonl"),
        data.join("night-2.jsonl"),
        data.join("nodes.jsonl"),
    );
    let night = |inputs: &[&std::path::Path], extra: &[&str]| {
        let mut args: Vec<&str> = Vec::new();
        for i in inputs {
            args.extend(["--input", i.to_str().unwrap()]);
        }
        args.extend(["--nodes", nodes.to_str().unwrap(), "--staging", "staging"]);
        args.extend(extra);
        env.run(&args).ok()
    };
    night(&[&n1], &[]);
    let first = edges(&env);
    // Nothing to link to on the first night.
    assert!(first.iter().all(|e| {
        !e["target_node"]
            .as_str()
            .unwrap_or("")
            .starts_with("memory:")
    }));
    // The state keeps each committed record's int8 embedding (384 bytes).
    let state = read_table(&env.staging().join("state/records.parquet"));
    let m013 = by(&state, "record_id", "m-013")[0];
    assert_eq!(m013["embedding"], 384);
    assert_eq!(m013["persona_id"], "milo");

    night(&[&n1, &n2], &[]);
    let second = edges(&env);
    let link: Vec<_> = of(&second, "m-014")
        .into_iter()
        .filter(|e| e["target_node"] == "memory:m-013")
        .collect();
    assert_eq!(link.len(), 1, "{:?}", of(&second, "m-014"));
    let link = link[0].clone();
    assert!(!reasons(&link).contains(&"unknown_target_node".to_string()));
    let quote = link["source_quote"].as_str().unwrap();
    let text = read_jsonl(&n2)[0]["text"].as_str().unwrap().to_string();
    assert!(text.contains(quote));
    // Night 1's records were skipped, not re-linked.
    assert!(of(&second, "j-017").is_empty());

    // The same record, relation and target keep their key on every night.
    night(&[&n1, &n2], &["--full"]);
    let again = edges(&env);
    for e in first.iter().chain([&link]) {
        let same: Vec<_> = again
            .iter()
            .filter(|x| {
                x["record_id"] == e["record_id"]
                    && x["target_node"] == e["target_node"]
                    && x["target_mention"] == e["target_mention"]
            })
            .collect();
        assert_eq!(same.len(), 1, "{e:?}");
        assert_eq!(same[0]["edge_key"], e["edge_key"], "{e:?}");
    }
    // Unknown people are keyed by their name.
    let rosa: Vec<_> = again
        .iter()
        .filter(|e| e["target_mention"] == "Aunt Rosa")
        .collect();
    assert_eq!(rosa.len(), 1);
    assert_eq!(rosa[0]["edge_key"].as_str().unwrap().len(), 32);
}
