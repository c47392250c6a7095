//! `scripts/check-training-data`: the labels' step fields (docs/labeling.md,
//! "Recording the step") are checked against the labels they decided, and
//! every shipped data file passes.

use std::process::Command;

use serde_json::{Value, json};

use crate::common::*;

fn check(files: &[std::path::PathBuf]) -> (i32, String) {
    let out = Command::new("python3")
        .arg(repo().join("scripts/check-training-data"))
        .args(files)
        .output()
        .expect("python3");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

fn labeled(id: &str, gold: Value) -> Value {
    let mut r = record(id, "I'm a bit worried the demo will crash.");
    r["gold"] = gold;
    r
}

#[test]
fn step_fields_must_match_the_labels_they_decided() {
    let env = Env::new();
    let quote = "I'm a bit worried the demo will crash.";
    let good = json!({"tom_kinds": ["emotion"], "source_quote": quote, "source_quotes": [quote],
        "affect": "anxious", "intensity": "low", "step_affect": 1, "step_intensity": 3, "people": []});
    let path = env.jsonl("good.jsonl", &[labeled("g-1", good.clone())]);
    assert_eq!(check(&[path]).0, 0);
    let cases = [
        (
            "step_intensity",
            json!(2),
            "gold.intensity",
            "step_intensity 2 means high",
        ),
        (
            "step_affect",
            json!(3),
            "gold.affect",
            "step_affect 3 means neutral",
        ),
        ("step_affect", json!(7), "gold.step_affect", "is not a step"),
        (
            "step_intensity",
            Value::Null,
            "gold.step_intensity",
            "is not a step",
        ),
        (
            "step_affect",
            json!(0),
            "gold.step_affect",
            "step 0 is for records with no persona signal",
        ),
    ];
    for (field, value, named, message) in cases {
        let mut gold = good.clone();
        gold[field] = value.clone();
        let path = env.jsonl("bad.jsonl", &[labeled("b-1", gold)]);
        let (code, out) = check(&[path]);
        assert_eq!(code, 1, "{field}={value}: {out}");
        assert!(
            out.contains("(id 'b-1') field ") && out.contains(named) && out.contains(message),
            "{field}={value}: {out}"
        );
    }
}

#[test]
fn every_shipped_labeled_record_carries_its_steps() {
    let mut files = Vec::new();
    for dir in ["data/training/tom_lite", "data/training/styles"] {
        for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "jsonl") {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 15, "{files:?}");
    let (code, out) = check(&files);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("step_intensity:4"), "{out}");
}
