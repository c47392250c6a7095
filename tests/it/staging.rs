//! Staging: incremental reruns, --full, the lock, recovery from a killed run.

use std::fs::{File, OpenOptions};
use std::io::Write;

use serde_json::json;

use crate::common::*;

fn setup() -> Env {
    let env = Env::new();
    let a = "Keep answers short.";
    let b = "Sam is my manager.";
    env.jsonl("records.jsonl", &[record("r1", a), record("r2", b)]);
    env.jsonl(
        "annotations.jsonl",
        &[
            annotation(
                "r1",
                vec![tag("preference", 0.9, a, a)],
                vec![],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
            annotation(
                "r2",
                vec![tag("relationship", 0.9, b, b)],
                vec![],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
        ],
    );
    env
}

#[test]
fn a_second_identical_run_processes_nothing_and_says_so() {
    let env = setup();
    let first = env.run_std(&[]).ok();
    assert!(first.stdout.contains("2 processed"), "{}", first.stdout);
    let first_run = env.latest();
    let second = env.run_std(&[]).ok();
    assert!(
        second.stdout.contains("0 processed, 2 skipped (unchanged)"),
        "{}",
        second.stdout
    );
    assert!(second.stdout.contains("nothing new"), "{}", second.stdout);
    assert_ne!(env.latest(), first_run);
    let receipt = env.receipt();
    assert_eq!(receipt["counts"]["skipped_unchanged"], 2);
    assert_eq!(receipt["counts"]["processed"], 0);
    assert!(env.table("promoted_tags").is_empty());
}

#[test]
fn only_changed_records_are_processed_again() {
    let env = setup();
    env.run_std(&[]).ok();
    let a = "Keep answers short, please.";
    env.jsonl(
        "records.jsonl",
        &[
            record("r1", a),
            record("r2", "Sam is my manager."),
            record("r3", "New one."),
        ],
    );
    env.jsonl(
        "annotations.jsonl",
        &[
            annotation(
                "r1",
                vec![tag("preference", 0.9, a, a)],
                vec![],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
            annotation(
                "r2",
                vec![tag(
                    "relationship",
                    0.9,
                    "Sam is my manager.",
                    "Sam is my manager.",
                )],
                vec![],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
        ],
    );
    let ran = env.run_std(&[]).ok();
    assert!(
        ran.stdout
            .contains("3 in: 2 processed, 1 skipped (unchanged)"),
        "{}",
        ran.stdout
    );
    let tags = env.table("promoted_tags");
    assert_eq!(tags.len(), 1);
    assert_eq!(tags[0]["source_quote"], a);
}

#[test]
fn a_changed_annotation_or_policy_reprocesses_and_full_ignores_the_state() {
    let env = setup();
    env.run_std(&[]).ok();
    let full = env.run_std(&["--full"]).ok();
    assert!(
        full.stdout.contains("2 processed, 0 skipped"),
        "{}",
        full.stdout
    );
    assert_eq!(env.table("promoted_tags").len(), 2);

    env.write(
        "p.yaml",
        "tom_lite_promotion_policy:\n  promote_tags_when:\n    tom_kind_confidence_min: 0.95\n",
    );
    let stricter = env.run_std(&["--policy", "p.yaml"]).ok();
    assert!(
        stricter.stdout.contains("2 processed"),
        "{}",
        stricter.stdout
    );
    assert_eq!(env.table("quarantine").len(), 2);

    let b = "Sam is my manager.";
    env.jsonl(
        "annotations.jsonl",
        &[
            annotation(
                "r1",
                vec![tag(
                    "preference",
                    0.9,
                    "Keep answers short.",
                    "Keep answers short.",
                )],
                vec![],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
            annotation(
                "r2",
                vec![tag("relationship", 0.99, b, b)],
                vec![],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
        ],
    );
    let ran = env.run_std(&["--policy", "p.yaml"]).ok();
    assert!(
        ran.stdout.contains("1 processed, 1 skipped"),
        "{}",
        ran.stdout
    );
    assert_eq!(env.table("promoted_tags")[0]["record_id"], "r2");
}

#[test]
fn a_second_run_is_refused_while_the_lock_is_held() {
    let env = setup();
    std::fs::create_dir_all(env.staging()).unwrap();
    let mut holder = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(env.staging().join(".lock"))
        .unwrap();
    holder.try_lock().unwrap();
    holder.write_all(b"pid 4242 (since 1)\n").unwrap();
    let ran = env.run_std(&[]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(ran.stderr.contains("locked by pid 4242"), "{}", ran.stderr);
    assert!(!env.staging().join("LATEST").exists());
    drop(holder);
    env.run_std(&[]).ok();
}

#[test]
fn leftovers_of_a_killed_run_are_removed_and_its_records_redone_once() {
    let env = setup();
    env.run_std(&[]).ok();
    let committed = env.latest();
    let runs = env.staging().join("runs");
    // A run killed while writing, and one killed after its rename but before the state.
    std::fs::create_dir_all(runs.join(".tmp-20990101T000000Z-dead")).unwrap();
    File::create(runs.join(".tmp-20990101T000000Z-dead/promoted_tags.parquet")).unwrap();
    std::fs::create_dir_all(runs.join("20990101T000000Z-beef")).unwrap();
    std::fs::write(env.staging().join("state/records.parquet.tmp"), b"partial").unwrap();
    let ran = env.run_std(&[]).ok();
    assert!(ran.stdout.contains("removed 3 leftovers"), "{}", ran.stdout);
    assert!(!runs.join(".tmp-20990101T000000Z-dead").exists());
    assert!(!runs.join("20990101T000000Z-beef").exists());
    assert!(committed.exists());
    let receipt = env.receipt();
    assert_eq!(receipt["counts"]["skipped_unchanged"], 2);
    assert_eq!(receipt["recovered"].as_array().unwrap().len(), 3);
}

#[test]
fn outputs_are_readable_and_events_follow_the_seed() {
    let env = setup();
    env.run_std(&[]).ok();
    let dir = env.latest();
    for f in [
        "promoted_tags.parquet",
        "promoted_edges.parquet",
        "quarantine.parquet",
        "abstained.parquet",
        "rejects.parquet",
        "receipt.json",
        "events.jsonl",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let phases: Vec<String> = events
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            for k in [
                "subagent_run_id",
                "phase",
                "current_artifact",
                "command_or_api",
                "evidence",
                "bug_or_blocker",
                "next_step",
                "stop_condition",
            ] {
                assert!(v.get(k).is_some(), "{k} missing in {l}");
            }
            for k in ["counts", "paths", "status_code", "duration_seconds"] {
                assert!(
                    v["evidence"].get(k).is_some(),
                    "evidence.{k} missing in {l}"
                );
            }
            v["phase"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(phases, ["start", "input_done", "commit", "committed"]);
    let receipt = env.receipt();
    assert_eq!(receipt["status"], "committed");
    assert_eq!(receipt["stop_condition"], "input_exhausted");
    assert_eq!(receipt["inputs"][0]["records"], 2);
    assert_eq!(receipt["inputs"][0]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(receipt["policy_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(json!(receipt["counts"]["promoted_tags"]), json!(2));
}

#[test]
fn staging_never_defaults_and_missing_inputs_are_usage_errors() {
    let env = setup();
    let ran = env.run(&[
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
    ]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("--staging"), "{}", ran.stderr);
    let ran = env.run(&[
        "--input",
        "nope.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "s",
    ]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("nope.jsonl"), "{}", ran.stderr);
    env.write("p.yaml", "run:\n  staging: from-policy\n");
    env.run(&[
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--policy",
        "p.yaml",
    ])
    .ok();
    assert!(env.path("from-policy/LATEST").is_file());
}

#[test]
fn an_ambiguous_node_registry_stops_the_run() {
    let env = setup();
    env.jsonl(
        "nodes.jsonl",
        &[
            json!({"id": "user:sam", "kind": "user", "name": "Sam Patel", "aliases": ["Sam"]}),
            json!({"id": "user:sammy", "kind": "user", "name": "Sammy", "aliases": ["sam"]}),
        ],
    );
    let ran = env.run_std(&[]);
    assert_eq!(ran.code, 2);
    assert!(
        ran.stderr.contains("line 2") && ran.stderr.contains("`sam`"),
        "{}",
        ran.stderr
    );
    env.jsonl(
        "nodes.jsonl",
        &[json!({"id": "user:sam", "kind": "user", "name": ""})],
    );
    let ran = env.run_std(&[]);
    assert_eq!(ran.code, 2);
    assert!(
        ran.stderr.contains("name: must not be empty"),
        "{}",
        ran.stderr
    );
}
