//! One test per decision rule and quarantine reason, through the CLI.

use serde_json::{Value, json};

use crate::common::*;

const T: &str = "Sam and I agreed: keep answers short. I felt ignored — again.";
const Q: &str = "keep answers short.";

fn nodes(env: &Env) {
    env.jsonl(
        "nodes.jsonl",
        &[json!({"id": "user:sam", "kind": "user", "name": "Sam Patel", "aliases": ["Sam"]})],
    );
}

type Rows = Vec<serde_json::Map<String, Value>>;

/// Runs one record with one annotation; returns (promoted tags, promoted edges, quarantine).
fn one(record: Value, ann: Value) -> (Env, Rows, Rows, Rows) {
    let env = Env::new();
    nodes(&env);
    env.jsonl("records.jsonl", &[record]);
    env.jsonl("annotations.jsonl", &[ann]);
    env.run_std(&[]).ok();
    let (t, e, q) = (
        env.table("promoted_tags"),
        env.table("promoted_edges"),
        env.table("quarantine"),
    );
    (env, t, e, q)
}

fn good(tags: Vec<Value>, edges: Vec<Value>) -> Value {
    annotation("r1", tags, edges, ("neutral", 0.9), ("medium", 0.9))
}

#[test]
fn thresholds_are_inclusive_for_tags_and_edges() {
    let ann = annotation(
        "r1",
        vec![tag("preference", 0.80, T, Q)],
        vec![edge("r1", "preference", "user:sam", 0.85, T, Q)],
        ("neutral", 0.70),
        ("medium", 0.65),
    );
    let (_, tags, edges, q) = one(record("r1", T), ann);
    assert_eq!(tags.len(), 1, "{q:?}");
    assert_eq!(edges.len(), 1, "{q:?}");
    assert_eq!(tags[0]["source_quote"], Q);
    assert_eq!(edges[0]["target_node"], "user:sam");
}

#[test]
fn just_under_a_threshold_is_confidence_below_threshold() {
    for (kind_c, affect_c, intensity_c) in
        [(0.7999, 0.9, 0.9), (0.9, 0.6999, 0.9), (0.9, 0.9, 0.6499)]
    {
        let ann = annotation(
            "r1",
            vec![tag("preference", kind_c, T, Q)],
            vec![],
            ("neutral", affect_c),
            ("medium", intensity_c),
        );
        let (_, tags, _, q) = one(record("r1", T), ann);
        assert!(tags.is_empty());
        assert_eq!(
            reasons(&q[0]),
            ["confidence_below_threshold"],
            "{kind_c} {affect_c} {intensity_c}"
        );
    }
    let (_, _, edges, q) = one(
        record("r1", T),
        good(
            vec![],
            vec![edge("r1", "preference", "user:sam", 0.8499, T, Q)],
        ),
    );
    assert!(edges.is_empty());
    assert_eq!(reasons(&q[0]), ["confidence_below_threshold"]);
}

#[test]
fn quotes_are_byte_offsets_on_multibyte_text() {
    let quote = "again.";
    let bytes = T.find(quote).unwrap();
    let chars = T[..bytes].chars().count();
    assert_ne!(bytes, chars);
    let mut char_tag = tag("belief", 0.9, T, quote);
    char_tag["quote_start"] = json!(chars);
    char_tag["quote_end"] = json!(chars + quote.chars().count());
    let (_, tags, _, q) = one(
        record("r1", T),
        good(vec![tag("emotion", 0.9, T, quote), char_tag], vec![]),
    );
    assert_eq!(tags.len(), 1);
    assert_eq!(tags[0]["quote_start"], bytes as u64);
    assert_eq!(reasons(&q[0]), ["source_quote_missing"]);
    assert!(q[0]["detail"].as_str().unwrap().contains("not verbatim"));
}

#[test]
fn missing_and_empty_quotes_are_source_quote_missing() {
    let mut no_quote = tag("preference", 0.9, T, Q);
    for k in ["source_quote", "quote_start", "quote_end"] {
        no_quote.as_object_mut().unwrap().remove(k);
    }
    let mut empty = edge("r1", "preference", "user:sam", 0.9, T, Q);
    empty["source_quote"] = json!("");
    let (_, tags, edges, q) = one(record("r1", T), good(vec![no_quote], vec![empty]));
    assert!(tags.is_empty() && edges.is_empty());
    assert_eq!(q.len(), 2);
    assert!(q.iter().all(|r| reasons(r) == ["source_quote_missing"]));
}

#[test]
fn unknown_target_node_and_memory_targets() {
    let t2 = "Talked to Sam again.";
    let env = Env::new();
    nodes(&env);
    // r1 points forward at r2 (later in the input), at r3 (absent) and at an unknown user.
    env.jsonl("records.jsonl", &[record("r1", T), record("r2", t2)]);
    env.jsonl(
        "annotations.jsonl",
        &[
            good(
                vec![],
                vec![
                    edge("r1", "relationship", "memory:r2", 0.9, T, Q),
                    edge("r1", "relationship", "memory:r3", 0.9, T, Q),
                ],
            ),
            annotation(
                "r2",
                vec![],
                vec![edge("r2", "relationship", "user:priya", 0.95, t2, t2)],
                ("neutral", 0.9),
                ("low", 0.9),
            ),
        ],
    );
    env.run_std(&[]).ok();
    let edges = env.table("promoted_edges");
    assert_eq!(edges.len(), 1);
    assert_eq!(edges[0]["target_node"], "memory:r2");
    let q = env.table("quarantine");
    assert_eq!(q.len(), 2);
    for row in &q {
        assert_eq!(reasons(row), ["unknown_target_node"], "{row:?}");
    }
    assert_eq!(by(&q, "target_node", "user:priya").len(), 1);
    assert_eq!(by(&q, "target_node", "memory:r3").len(), 1);
}

#[test]
fn more_than_two_edges_quarantines_all_of_them() {
    let e = |c| edge("r1", "preference", "user:sam", c, T, Q);
    let (_, _, edges, q) = one(
        record("r1", T),
        good(
            vec![tag("preference", 0.9, T, Q)],
            vec![e(0.9), e(0.95), e(0.99)],
        ),
    );
    assert!(edges.is_empty());
    let eq: Vec<_> = by(&q, "item_type", "edge");
    assert_eq!(eq.len(), 3);
    assert!(
        eq.iter()
            .all(|r| reasons(r) == ["more_than_two_edge_candidates"])
    );
}

#[test]
fn more_than_two_tags_is_too_many_labels_for_all() {
    let tags = vec![
        tag("preference", 0.9, T, Q),
        tag("emotion", 0.9, T, "I felt ignored"),
        tag("relationship", 0.9, T, "Sam and I agreed"),
    ];
    let (_, promoted, _, q) = one(record("r1", T), good(tags, vec![]));
    assert!(promoted.is_empty());
    assert_eq!(q.len(), 3);
    assert!(q.iter().all(|r| reasons(r) == ["too_many_labels"]));
}

#[test]
fn free_form_labels_are_quarantined_with_a_suggestion() {
    let ann = annotation(
        "r1",
        vec![
            tag("Knowledge Gap", 0.9, T, Q),
            tag("vibes", 0.9, T, "I felt ignored"),
        ],
        vec![edge("r1", "Preference", "user:sam", 0.9, T, Q)],
        ("frustrated", 0.9),
        ("medium", 0.9),
    );
    let (_, tags, edges, q) = one(record("r1", T), ann);
    assert!(tags.is_empty() && edges.is_empty());
    let kg = by(&q, "label", "Knowledge Gap");
    assert_eq!(reasons(kg[0]), ["freeform_tom_label"]);
    assert_eq!(kg[0]["suggested_label"], "knowledge_gap");
    assert_eq!(kg[0]["suggested_affect"], "angry");
    let vibes = by(&q, "label", "vibes");
    assert_eq!(vibes[0]["suggested_label"], Value::Null);
    let e = by(&q, "item_type", "edge");
    assert_eq!(reasons(e[0]), ["freeform_tom_label"]);
    assert_eq!(e[0]["suggested_label"], "preference");
}

#[test]
fn sensitive_and_safety_records_quarantine_every_item() {
    for flag in ["sensitive", "safety"] {
        let mut r = record("r1", T);
        r["flags"] = json!([flag]);
        let (_, tags, edges, q) = one(
            r,
            good(
                vec![tag("preference", 0.99, T, Q)],
                vec![edge("r1", "preference", "user:sam", 0.99, T, Q)],
            ),
        );
        assert!(tags.is_empty() && edges.is_empty());
        assert_eq!(q.len(), 2);
        assert!(
            q.iter()
                .all(|r| reasons(r) == ["sensitive_boundary_or_safety_record"])
        );
    }
}

#[test]
fn several_reasons_stay_together() {
    let mut t = tag("Preference", 0.5, T, Q);
    t["quote_start"] = json!(0);
    let mut r = record("r1", T);
    r["flags"] = json!(["sensitive"]);
    let (_, _, _, q) = one(r, good(vec![t], vec![]));
    assert_eq!(
        reasons(&q[0]),
        [
            "confidence_below_threshold",
            "source_quote_missing",
            "freeform_tom_label",
            "sensitive_boundary_or_safety_record"
        ]
    );
}

#[test]
fn unreadable_annotation_is_quarantined_whole_and_kept_raw() {
    let env = Env::new();
    env.jsonl(
        "records.jsonl",
        &[record("r1", T), record("r2", "Nothing to see.")],
    );
    env.write(
        "annotations.jsonl",
        "{\"record_id\": \"r1\", \"tags\": [{\"tom_kind\": \"goal\", \"confid\n{\"record_id\": \"r2\", \"tags\": []}\n",
    );
    env.run_std(&[]).ok();
    let q = env.table("quarantine");
    assert_eq!(q.len(), 1);
    assert_eq!(q[0]["record_id"], "r1");
    assert_eq!(reasons(&q[0]), ["unparseable_annotation"]);
    assert!(
        q[0]["raw_annotation"]
            .as_str()
            .unwrap()
            .starts_with("{\"record_id\": \"r1\"")
    );
    assert_eq!(q[0]["record_text"], T);
}

#[test]
fn no_annotation_or_no_tags_is_abstained_with_the_best_guess() {
    let env = Env::new();
    env.jsonl(
        "records.jsonl",
        &[record("r1", T), record("r2", "Bus at 8.")],
    );
    env.jsonl(
        "annotations.jsonl",
        &[json!({"record_id": "r2", "tags": [], "best_tom_kind": "goal", "best_confidence": 0.21})],
    );
    let ran = env.run_std(&[]).ok();
    assert!(ran.stdout.contains("2 records abstained"), "{}", ran.stdout);
    let a = env.table("abstained");
    let r1 = by(&a, "record_id", "r1");
    assert_eq!(r1[0]["best_tom_kind"], Value::Null);
    assert_eq!(r1[0]["why"], "no_annotation");
    let r2 = by(&a, "record_id", "r2");
    assert_eq!(r2[0]["best_tom_kind"], "goal");
    assert_eq!(r2[0]["best_confidence"], 0.21);
    assert!(env.table("quarantine").is_empty());
}

#[test]
fn edge_keys_are_the_same_on_every_night() {
    let ann = good(
        vec![],
        vec![edge("r1", "preference", "user:sam", 0.9, T, Q)],
    );
    let (_, _, e1, _) = one(record("r1", T), ann.clone());
    let (_, _, e2, _) = one(record("r1", T), ann);
    assert_eq!(e1[0]["edge_key"], e2[0]["edge_key"]);
    assert_eq!(e1[0]["edge_key"].as_str().unwrap().len(), 32);
}

#[test]
fn an_edge_without_a_target_is_quarantined() {
    let env = Env::new();
    nodes(&env);
    env.jsonl("records.jsonl", &[record("r1", T)]);
    let s = T.find(Q).unwrap();
    let no_target = json!({"source_node": "memory:r1", "relation": "preference",
        "target_mention": "Priya", "confidence": 0.95,
        "source_quote": Q, "quote_start": s, "quote_end": s + Q.len()});
    let bare = json!({"relation": "preference", "confidence": 0.95,
        "source_quote": Q, "quote_start": s, "quote_end": s + Q.len()});
    env.jsonl(
        "annotations.jsonl",
        &[good(
            vec![tag("preference", 0.9, T, Q)],
            vec![no_target, bare],
        )],
    );
    env.run_std(&[]).ok();
    assert!(env.table("promoted_edges").is_empty());
    let q = env.table("quarantine");
    let edges: Vec<_> = q.iter().filter(|r| r["item_type"] == "edge").collect();
    assert_eq!(edges.len(), 2);
    for e in &edges {
        assert_eq!(reasons(e), ["unknown_target_node"]);
    }
    assert!(
        edges[0]["detail"]
            .as_str()
            .unwrap()
            .contains("no registry node for the mention `Priya`")
    );
    assert!(
        edges[1]["detail"]
            .as_str()
            .unwrap()
            .contains("edge has no target node")
    );
}

/// A decisions line for item `item` of the run LATEST names.
fn decided(item: &str, decision: &str, label: &str) -> Value {
    json!({"item_id": item, "decision": decision, "label": label,
           "curator": "rosa", "decided_at": "2026-12-01T08:00:00Z"})
}

#[test]
fn a_curators_quote_lands_as_the_records_bytes_and_bad_offsets_name_their_field() {
    let ann = annotation(
        "r1",
        vec![
            tag("preference", 0.5, T, Q),
            tag("emotion", 0.5, T, "I felt ignored"),
        ],
        vec![edge("r1", "preference", "user:sam", 0.5, T, Q)],
        ("neutral", 0.9),
        ("medium", 0.9),
    );
    let (env, _, _, q) = one(record("r1", T), ann);
    assert_eq!(q.len(), 3, "{q:?}");
    let quote = "I felt ignored — again.";
    let start = T.find(quote).unwrap();
    let end = start + quote.len();
    let dash = T.find('—').unwrap();
    let with = |mut line: Value, s: Value, e: Value| {
        line["quote_start"] = s;
        line["quote_end"] = e;
        line
    };
    let tag0 = || decided("r1#tag0", "relabel", "emotion");
    let mut alone = tag0();
    alone["quote_start"] = json!(start);
    let lines = [
        with(tag0(), json!(start), json!(end)),
        with(
            decided("r1#edge0", "accept", "preference"),
            json!(0),
            json!(16),
        ),
        decided("r1#tag1", "accept", "emotion"),
        alone,
        with(tag0(), json!(start + 5), json!(start + 2)),
        with(tag0(), json!(start), json!(start)),
        with(tag0(), json!(start), json!(T.len() + 1)),
        with(tag0(), json!(dash + 1), json!(end)),
        with(tag0(), json!(start), json!("65")),
        with(tag0(), json!(start as f64 + 0.5), json!(end)),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    env.write("decisions.jsonl", &text);
    let ran = env.cmd(
        "curate",
        &["apply", "decisions.jsonl", "--staging", "staging"],
    );
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout
            .contains("10 lines: 3 new, 0 updated, 0 already applied, 7 not applied"),
        "{}",
        ran.stdout
    );
    for expected in [
        "line 4 (r1#tag0): quote_end: missing",
        "line 5 (r1#tag0): quote_end: ",
        "line 6 (r1#tag0): quote_end: ",
        "line 7 (r1#tag0): quote_end: ",
        "line 8 (r1#tag0): quote_start: ",
        "line 9 (r1#tag0): quote_end: quote_end: expected a non-negative integer",
        "line 10 (r1#tag0): quote_start: quote_start: expected a non-negative integer",
    ] {
        assert!(ran.stderr.contains(expected), "{expected}\n{}", ran.stderr);
    }
    assert!(ran.stderr.contains("past the end"), "{}", ran.stderr);
    assert!(ran.stderr.contains("multi-byte"), "{}", ran.stderr);

    let curated = read_table(&env.staging().join("curated/curated.parquet"));
    assert_eq!(curated.len(), 3);
    let row = |id: &str| by(&curated, "item_id", id)[0].clone();
    let tag = row("r1#tag0");
    // The curator's quote is the record's exact bytes; the model's stays.
    assert_eq!(tag["decided_quote"], quote);
    assert_eq!(
        tag["decided_quote"].as_str().unwrap().as_bytes(),
        &T.as_bytes()[start..end]
    );
    assert_eq!(tag["decided_quote_start"], start as u64);
    assert_eq!(tag["decided_quote_end"], end as u64);
    assert_eq!(tag["source_quote"], Q);
    assert_eq!(tag["label"], "emotion");
    let edge = row("r1#edge0");
    assert_eq!(edge["decided_quote"], "Sam and I agreed");
    assert_eq!(edge["source_quote"], Q);
    let kept = row("r1#tag1");
    assert_eq!(kept["decided_quote"], Value::Null);
    assert_eq!(kept["decided_quote_start"], Value::Null);
    assert_eq!(kept["source_quote"], "I felt ignored");

    // A different quote for the same item is an update, the same one nothing.
    let again = with(tag0(), json!(0), json!(16));
    env.write("again.jsonl", format!("{again}\n{}\n", lines[0]));
    let ran = env.cmd("curate", &["apply", "again.jsonl", "--staging", "staging"]);
    assert!(
        ran.stdout.contains("2 lines: 0 new, 2 updated"),
        "{}{}",
        ran.stdout,
        ran.stderr
    );
    let curated = read_table(&env.staging().join("curated/curated.parquet"));
    assert_eq!(
        by(&curated, "item_id", "r1#tag0")[0]["decided_quote"],
        quote
    );
}
