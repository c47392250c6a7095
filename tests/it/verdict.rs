//! The verdict parser through the real CLI: `tomlite parse-annotation` on
//! stdin, and `tomlite run --raw-annotations` through the same validator as
//! every other annotation.

use std::io::Write as _;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::common::*;

/// `tomlite parse-annotation <args>` with `stdin`: (exit code, stdout JSON, stderr).
fn parse(stdin: &[u8], args: &[&str]) -> (i32, Value, String) {
    let mut child = bin()
        .arg("parse-annotation")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || sin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON line ({e}): {stdout}"));
    (
        out.status.code().unwrap(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const GOOD: &str = r#"{"tags":[{"tom_kind":"preference","confidence":0.91,"source_quote":"Keep answers short.","quote_start":0,"quote_end":19}],"affect":{"label":"neutral","confidence":0.84},"intensity":{"label":"medium","confidence":0.71}}"#;

#[test]
fn strict_prints_the_canonical_annotation_and_exits_0() {
    let (code, v, _) = parse(GOOD.as_bytes(), &["--record-id", "j-1"]);
    assert_eq!(code, 0);
    assert_eq!(v["parse_class"], "STRICT");
    assert_eq!(v["escape_shape"], Value::Null);
    let a = &v["annotation"];
    assert_eq!(a["record_id"], "j-1");
    assert_eq!(a["tags"][0]["tom_kind"], "preference");
    assert_eq!(a["tags"][0]["quote_end"], 19);
    assert_eq!(a["affect"], json!({"label": "neutral", "confidence": 0.84}));
}

#[test]
fn lenient_recovery_takes_the_final_object_after_prose_and_a_draft() {
    let draft = GOOD.replace("preference", "goal");
    let text =
        format!("I considered {{the options}}.\nDraft: {draft}\nFinal:\n```json\n{GOOD}\n```\n");
    let (code, v, _) = parse(text.as_bytes(), &[]);
    assert_eq!(code, 0);
    assert_eq!(v["parse_class"], "LENIENT-RECOVERY");
    assert_eq!(v["annotation"]["tags"][0]["tom_kind"], "preference");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("1 earlier") && notes.contains("code fence"),
        "{notes}"
    );
}

#[test]
fn escape_pipe_line() {
    let (code, v, _) = parse(
        b"tom_kind: preference (0.91) | affect: neutral (0.8) | intensity: high (0.7) | quote: \"Keep answers short.\"",
        &["--text", "/dev/null"],
    );
    assert_eq!(code, 0);
    assert_eq!(v["parse_class"], "ESCAPE-RECOVERY");
    assert_eq!(v["escape_shape"], "pipe_line");
    let t = &v["annotation"]["tags"][0];
    assert_eq!(
        (t["tom_kind"].as_str(), t["confidence"].as_f64()),
        (Some("preference"), Some(0.91))
    );
    assert_eq!(t["source_quote"], "Keep answers short.");
    assert_eq!(
        v["annotation"]["intensity"],
        json!({"label": "high", "confidence": 0.7})
    );
    // An empty record text holds no quote: reported, never invented.
    assert_eq!(t["quote_start"], Value::Null);
    assert_eq!(
        v["problems"],
        json!(["tags[0].source_quote: not in the record text"])
    );
}

#[test]
fn escape_key_value_block_on_the_seeds_own_examples() {
    let dir = repo().join("tests/fixtures/verdict");
    for (file, kind, affect, quote) in [
        (
            "seed-tom-lite-1.txt",
            "preference",
            "neutral",
            "simpler ... don't want to overly hallucinate graph connections",
        ),
        (
            "seed-tom-lite-2.txt",
            "boundary",
            "angry",
            "do not create evidence cases directly",
        ),
        (
            "seed-tom-lite-3.txt",
            "knowledge_gap",
            "confused",
            "what does this YAML field mean?",
        ),
    ] {
        let (code, v, _) = parse(&std::fs::read(dir.join(file)).unwrap(), &[]);
        assert_eq!(code, 0, "{file}");
        assert_eq!(v["escape_shape"], "key_value_block", "{file}");
        let a = &v["annotation"];
        assert_eq!(a["tags"][0]["tom_kind"], kind);
        assert_eq!(a["tags"][0]["source_quote"], quote);
        // The seed's examples carry no confidences: none is made up.
        assert_eq!(a["tags"][0]["confidence"], Value::Null);
        assert_eq!(a["affect"]["label"], affect);
    }
}

#[test]
fn escape_relaxed_object() {
    let (code, v, _) = parse(
        b"result = {'tags': [{'tom_kind': 'goal', 'confidence': 0.9, 'source_quote': \"I'll train\",}], 'affect': {'label': 'happy', 'confidence': 0.8}, 'edges': None}",
        &[],
    );
    assert_eq!(code, 0);
    assert_eq!(v["escape_shape"], "relaxed_object");
    assert_eq!(v["annotation"]["tags"][0]["source_quote"], "I'll train");
    assert_eq!(v["annotation"]["edges"], json!([]));
}

#[test]
fn escape_abstain_marker() {
    let (code, v, _) = parse(
        b"Nothing about the user here.\nABSTAIN: best goal (0.42)\n",
        &[],
    );
    assert_eq!(code, 0);
    assert_eq!(v["escape_shape"], "abstain_marker");
    assert_eq!(v["annotation"]["tags"], json!([]));
    assert_eq!(v["annotation"]["best_tom_kind"], "goal");
    assert_eq!(v["annotation"]["best_confidence"], 0.42);
}

#[test]
fn anomaly_exits_5_with_no_annotation() {
    let (code, v, err) = parse(b"The user clearly prefers brevity.", &[]);
    assert_eq!(code, 5);
    assert_eq!(v["parse_class"], "ANOMALY");
    assert_eq!(v["annotation"], Value::Null);
    assert!(err.contains("ANOMALY: no annotation object"), "{err}");
    // --annotation-only prints nothing for an anomaly.
    let out = bin()
        .args(["parse-annotation", "--annotation-only"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(out.stdout.is_empty());
}

#[test]
fn nested_braces_in_quotes_do_not_confuse_the_scan() {
    let text = r#"Here: {"tags":[{"tom_kind":"goal","confidence":0.9,"source_quote":"{\"a\": {b}} }}}"}],"affect":{"label":"happy","confidence":0.9}} ok"#;
    let (code, v, _) = parse(text.as_bytes(), &[]);
    assert_eq!(code, 0);
    assert_eq!(v["parse_class"], "LENIENT-RECOVERY");
    assert_eq!(
        v["annotation"]["tags"][0]["source_quote"],
        "{\"a\": {b}} }}}"
    );
}

#[test]
fn truncated_json_is_an_anomaly_naming_the_unclosed_object() {
    let (code, v, _) = parse(&GOOD.as_bytes()[..120], &[]);
    assert_eq!(code, 5);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("starts at byte 0 but never closes"),
        "{v}"
    );
}

#[test]
fn extra_unknown_fields_are_ignored_and_noted() {
    let text = GOOD.replacen('{', r#"{"reasoning": "long", "model": "x", "#, 1);
    let (code, v, _) = parse(text.as_bytes(), &[]);
    assert_eq!(code, 0);
    assert_eq!(v["parse_class"], "STRICT");
    assert_eq!(
        v["notes"],
        json!(["unknown fields ignored: model, reasoning"])
    );
    assert!(v["annotation"].get("reasoning").is_none());
}

#[test]
fn ten_megabytes_of_prose_is_an_anomaly_in_bounded_time() {
    let unit = "The user talked at length {about things} and said \"many\" words | again. ";
    let prose = unit.repeat(10 * 1024 * 1024 / unit.len() + 1);
    let t = std::time::Instant::now();
    let (code, v, _) = parse(prose.as_bytes(), &[]);
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(code, 5);
    assert_eq!(v["raw_bytes"], prose.len());
    assert!(secs < 30.0, "{secs}s");
    // The same prose with the annotation at its end is recovered.
    let (code, v, _) = parse(format!("{prose}\n{GOOD}").as_bytes(), &[]);
    assert_eq!(code, 0);
    assert_eq!(v["parse_class"], "LENIENT-RECOVERY");
}

/// Records, a raw-annotations file and one run.
fn raw_run(lines: &[Value]) -> Env {
    let env = Env::new();
    let text = "Keep answers short. I will run a marathon in May.";
    let recs: Vec<Value> = [
        "r-strict",
        "r-lenient",
        "r-escape",
        "r-anomaly",
        "r-foreign-quote",
        "r-bad-line",
        "r-no-line",
    ]
    .iter()
    .map(|id| record(id, text))
    .collect();
    env.jsonl("records.jsonl", &recs);
    env.jsonl("raw.jsonl", lines);
    env.run(&[
        "--input",
        "records.jsonl",
        "--raw-annotations",
        "raw.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    env
}

#[test]
fn raw_annotations_go_through_the_same_validator_and_anomalies_are_quarantined() {
    let good = r#"{"tags":[{"tom_kind":"preference","confidence":0.91,"source_quote":"Keep answers short."}],"affect":{"label":"neutral","confidence":0.84},"intensity":{"label":"medium","confidence":0.71}}"#;
    let foreign = good.replace("Keep answers short.", "Never call me again.");
    let prose = "I could not decide what this record means.";
    let env = raw_run(&[
        json!({"record_id": "r-strict", "annotator": "llm@1", "raw": good}),
        json!({"record_id": "r-lenient", "annotator": "llm@1", "raw": format!("Sure.\n```json\n{good}\n```")}),
        json!({"record_id": "r-escape", "annotator": "llm@1", "raw": "tom_kind: goal (0.9) | affect: happy (0.8) | intensity: high (0.75) | quote: \"I will run a marathon in May.\""}),
        json!({"record_id": "r-anomaly", "annotator": "llm@1", "raw": prose}),
        json!({"record_id": "r-foreign-quote", "annotator": "llm@1", "raw": foreign}),
        json!({"record_id": "r-bad-line", "annotator": "llm@1", "raw": 42}),
    ]);
    let promoted = env.table("promoted_tags");
    let ids: Vec<&str> = promoted
        .iter()
        .map(|r| r["record_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["r-strict", "r-lenient", "r-escape"]);
    // Quotes without offsets are anchored at their verbatim place in the record.
    let esc = &by(&promoted, "record_id", "r-escape")[0];
    assert_eq!(
        (esc["quote_start"].as_u64(), esc["quote_end"].as_u64()),
        (Some(20), Some(49))
    );
    assert_eq!(esc["annotator"], "raw:raw.jsonl");

    let q = env.table("quarantine");
    let anomaly = by(&q, "record_id", "r-anomaly");
    assert_eq!(anomaly.len(), 1);
    assert_eq!(anomaly[0]["item_type"], "annotation");
    assert_eq!(reasons(anomaly[0]), ["unparseable_annotation"]);
    assert_eq!(anomaly[0]["raw_annotation"], prose, "the raw text is kept");
    let detail = anomaly[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("raw.jsonl line 4 (record r-anomaly): ANOMALY"),
        "{detail}"
    );
    // A quote that is not in the record: parsed, then quarantined by the validator.
    let foreign_q = by(&q, "record_id", "r-foreign-quote");
    assert_eq!(reasons(foreign_q[0]), ["source_quote_missing"]);
    // A line whose `raw` is not a string: quarantined naming the line and the field.
    let bad = by(&q, "record_id", "r-bad-line");
    assert_eq!(reasons(bad[0]), ["unparseable_annotation"]);
    let detail = bad[0]["detail"].as_str().unwrap();
    assert!(
        detail
            .contains("line 6 (record r-bad-line): field `raw`: expected a string, found a number"),
        "{detail}"
    );
    // No line at all: abstained, as with --annotations.
    let abst = env.table("abstained");
    assert_eq!(
        by(&abst, "record_id", "r-no-line")[0]["why"],
        "no_annotation"
    );

    let receipt = env.receipt();
    let stats = &receipt["annotator"]["stats"]["raw_annotations"];
    assert_eq!(
        stats["parse_classes"],
        json!({"STRICT": 2, "LENIENT-RECOVERY": 1, "ESCAPE-RECOVERY": 1, "ANOMALY": 1})
    );
    assert_eq!(stats["escape_shapes"]["pipe_line"], 1);
    assert_eq!(stats["invalid_lines"], 1);
    assert_eq!(stats["quotes_anchored"], 3);
    assert!(
        receipt["annotator"]["id"]
            .as_str()
            .unwrap()
            .starts_with("raw:")
    );
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    let parsed: Vec<&Value> = events
        .iter()
        .filter(|e| e["phase"] == "annotations_parsed")
        .collect();
    assert_eq!(parsed.len(), 1);
    assert_eq!(
        parsed[0]["evidence"]["counts"]["parse_classes"]["ANOMALY"],
        1
    );
    assert_eq!(
        parsed[0]["evidence"]["counts"]["parse_classes"]["LENIENT-RECOVERY"],
        1
    );
}

#[test]
fn raw_annotations_conflict_with_annotations() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("a", "x")]);
    env.write("raw.jsonl", "");
    env.write("annotations.jsonl", "");
    let r = env.run(&[
        "--input",
        "records.jsonl",
        "--raw-annotations",
        "raw.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "s",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("cannot be used with"), "{}", r.stderr);
}

#[test]
fn a_raw_annotation_naming_another_record_is_quarantined() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("a", "Keep answers short.")]);
    env.jsonl(
        "raw.jsonl",
        &[json!({"record_id": "a", "raw": GOOD.replacen('{', r#"{"record_id": "b", "#, 1)})],
    );
    env.run(&[
        "--input",
        "records.jsonl",
        "--raw-annotations",
        "raw.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let q = env.table("quarantine");
    assert_eq!(reasons(&q[0]), ["unparseable_annotation"]);
    assert!(
        q[0]["detail"]
            .as_str()
            .unwrap()
            .contains("field `record_id`: the STRICT annotation names record `b`")
    );
    assert_eq!(
        env.receipt()["annotator"]["stats"]["raw_annotations"]["record_id_mismatches"],
        1
    );
}

#[test]
fn a_raw_line_over_16_mib_is_quarantined_with_its_start_kept() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("big", "Keep answers short.")]);
    // record_id first: it is found in the part of the line that is read.
    let raw = "x".repeat(17 << 20);
    env.write(
        "raw.jsonl",
        format!("{{\"record_id\": \"big\", \"raw\": \"{raw}\"}}\n"),
    );
    env.run(&[
        "--input",
        "records.jsonl",
        "--raw-annotations",
        "raw.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let q = env.table("quarantine");
    assert_eq!(reasons(&q[0]), ["unparseable_annotation"]);
    assert_eq!(q[0]["raw_annotation"].as_str().unwrap().len(), 64 << 10);
    assert!(
        q[0]["detail"]
            .as_str()
            .unwrap()
            .contains("longer than 16777216 bytes")
    );
    assert_eq!(
        env.receipt()["annotator"]["stats"]["raw_annotations"]["invalid_lines"],
        1
    );
}
