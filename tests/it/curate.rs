//! The curator's loop through the CLI: `curate apply` validates a decisions
//! file line by line and applies the valid lines to `curated/`, idempotently;
//! `curate status` shows what is pending and applied; later runs do not
//! queue a decided item again while its record is unchanged; `train
//! --curated` learns from the decisions.

use serde_json::{Value, json};

use crate::common::*;

fn curate(env: &Env, args: &[&str]) -> Ran {
    env.cmd("curate", args)
}

fn decision(run: &str, item: &str, decision: &str, label: Value, target: Value) -> Value {
    json!({"run_id": run, "item_id": item, "decision": decision, "label": label,
           "target_node": target, "curator": "rosa", "note": null,
           "decided_at": "2026-11-30T08:00:00Z"})
}

#[test]
fn decisions_apply_once_are_validated_by_line_and_stop_requeueing() {
    let env = Env::new();
    let annotations = repo().join("data/sample/annotations.jsonl");
    env.run_sample(&["--annotations", annotations.to_str().unwrap()])
        .ok();
    let run = env.receipt()["run_id"].as_str().unwrap().to_string();
    let queued = env.table("quarantine").len();
    assert_eq!(queued, 28);
    let lines = [
        decision(&run, "s-009#tag0", "accept", json!("goal"), Value::Null),
        decision(&run, "j-009#tag0", "relabel", json!("emotion"), Value::Null),
        decision(&run, "j-007#tag0", "reject", json!("belief"), Value::Null),
        decision(
            &run,
            "j-008#edge0",
            "relabel",
            json!("relationship"),
            json!("person:priya"),
        ),
        decision(&run, "nope#tag0", "accept", Value::Null, Value::Null),
        decision(&run, "s-011#tag0", "relabel", json!("furious"), Value::Null),
        decision(
            &run,
            "s-008#edge0",
            "relabel",
            Value::Null,
            json!("user:nobody"),
        ),
        json!("not an object"),
        decision(&run, "m-006#tag0", "accept", json!("emotion"), Value::Null),
        decision(&run, "j-014#edge1", "accept", Value::Null, Value::Null),
    ];
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    text.push_str("{\"item_id\": \"s-005#tag0\", \"decision\": \n");
    env.write("decisions.jsonl", &text);

    let ran = curate(&env, &["apply", "decisions.jsonl", "--staging", "staging"]);
    // Bad lines make the command fail, and the good ones are applied.
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout
            .contains("11 lines: 5 new, 0 updated, 0 already applied, 6 not applied"),
        "{}",
        ran.stdout
    );
    for expected in [
        "line 5 (nope#tag0): item_id: not in the quarantine of run",
        "line 6 (s-011#tag0): label: `furious` is not a tom_kind",
        "line 7 (s-008#edge0): target_node: `user:nobody` is not in the node registry",
        "line 8: (line): expected a JSON object",
        "line 10 (j-014#edge1): decision: the edge's target is not in the registry",
        "line 11: (line): malformed JSON",
    ] {
        assert!(ran.stderr.contains(expected), "{expected}\n{}", ran.stderr);
    }
    let curated_path = env.staging().join("curated/curated.parquet");
    let curated = read_table(&curated_path);
    assert_eq!(curated.len(), 5);
    let row = |id: &str| by(&curated, "item_id", id)[0].clone();
    assert_eq!(row("j-009#tag0")["label"], "emotion");
    assert_eq!(row("j-009#tag0")["original_label"], "Frustrated");
    assert_eq!(row("j-008#edge0")["target_node"], "person:priya");
    assert_eq!(
        row("j-008#edge0")["original_target_node"],
        "user:priya-unknown"
    );
    assert_eq!(row("j-007#tag0")["decision"], "reject");
    for r in &curated {
        assert_eq!(r["curator"], "rosa");
        assert_eq!(r["decided_at"], "2026-11-30T08:00:00Z");
        assert_eq!(r["record_fingerprint"].as_str().unwrap().len(), 32);
        assert!(!r["record_text"].as_str().unwrap().is_empty());
    }

    // The same file again changes nothing.
    let before = std::fs::read(&curated_path).unwrap();
    let again = curate(&env, &["apply", "decisions.jsonl", "--staging", "staging"]);
    assert!(
        again.stdout.contains("0 new, 0 updated, 5 already applied"),
        "{}",
        again.stdout
    );
    assert_eq!(std::fs::read(&curated_path).unwrap(), before);

    // Status: what is pending and applied.
    let st = curate(
        &env,
        &[
            "status",
            "--staging",
            "staging",
            "--json",
            "--decisions",
            "decisions.jsonl",
        ],
    );
    assert_eq!(st.code, 0, "{}", st.stderr);
    let st: Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(st["pending"], queued as u64 - 5);
    assert_eq!(st["applied"], 5);
    assert_eq!(st["applied_by_decision"]["relabel"], 2);
    assert_eq!(st["decisions_file"]["decided_not_applied"], 6);

    // A full re-run of the unchanged records does not queue the decided items again.
    env.run_sample(&["--annotations", annotations.to_str().unwrap(), "--full"])
        .ok();
    let q = env.table("quarantine");
    assert_eq!(q.len(), queued - 5);
    for id in [
        "s-009#tag0",
        "j-009#tag0",
        "j-007#tag0",
        "j-008#edge0",
        "m-006#tag0",
    ] {
        assert!(by(&q, "item_id", id).is_empty(), "{id} queued again");
    }
    assert_eq!(env.receipt()["counts"]["curator_suppressed"], 5);

    // The decisions become training examples, and the card counts them.
    let out = env.train_small(&["--curated", "staging"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("curated: 5 decisions give"), "{stderr}");
    let card: Value =
        serde_json::from_slice(&std::fs::read(env.path("heads/card.json")).unwrap()).unwrap();
    let td = &card["training_data"];
    assert!(td["curated_examples"].as_u64().unwrap() >= 4, "{td}");
    assert_eq!(td["curated_decisions"]["accepted"], 2);
    assert_eq!(td["curated_decisions"]["relabelled"], 1);
    assert_eq!(td["curated_decisions"]["rejected"], 1);
    // The relabelled edge (an unknown person given a registry node, its
    // relation kept) teaches the relation calibration and the person head.
    assert_eq!(td["curated_decisions"]["edges"], 1);
    assert_eq!(td["curated_decisions"]["edges_not_used"], 0);
    let edges = &td["curated_examples_per_head"]["edges"];
    assert_eq!(edges["relation"], 1, "{td}");
    assert_eq!(edges["person"], 1, "{td}");
    assert_eq!(edges["registry_link"], 0, "{td}");
}

/// P(relation right) at `p_kind` under a card's edge calibration.
fn relation_at(card: &Value, p_kind: f64) -> f64 {
    let w: Vec<f64> = card["edges"]["mention"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let z = (p_kind / (1.0 - p_kind)).ln();
    1.0 / (1.0 + (-(w[0] + w[1] * z)).exp())
}

fn trained_card(env: &Env, extra: &[&str], name: &str) -> (Value, String) {
    let out = env.train_small(extra);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    std::fs::rename(env.path("heads"), env.path(name)).unwrap();
    let card = std::fs::read(env.path(name).join("card.json")).unwrap();
    (serde_json::from_slice(&card).unwrap(), stderr)
}

// `train --curated` learns the edge model from the curator's edge
// decisions: accepted edges are right relations and right registry links,
// a retargeted unknown person is a person, rejected edges are wrong in the
// part the model doubts more; a memory link and a relation outside the
// vocabulary teach nothing. Accepting relations does not lower P(relation
// right) where they lie, rejecting them does not raise it.
#[test]
fn train_curated_learns_the_edge_model_from_edge_decisions() {
    let env = Env::new();
    let accepted_run = sample_into(&env, "staging");
    let rejected_run = sample_into(&env, "rejected");
    let registry_edges = [
        "m-005#edge0",
        "s-006#edge0",
        "s-006#edge1",
        "s-007#edge0",
        "j-010#edge0",
    ];
    let mut accepted: Vec<Value> = registry_edges
        .iter()
        .map(|item| decision(&accepted_run, item, "accept", Value::Null, Value::Null))
        .collect();
    accepted.extend([
        decision(
            &accepted_run,
            "j-008#edge0",
            "relabel",
            Value::Null,
            json!("person:priya"),
        ),
        decision(
            &accepted_run,
            "m-010#edge0",
            "relabel",
            json!("relationship"),
            json!("person:jonas"),
        ),
        decision(
            &accepted_run,
            "j-014#edge1",
            "reject",
            Value::Null,
            Value::Null,
        ),
    ]);
    let rejected: Vec<Value> = registry_edges
        .iter()
        .map(|item| decision(&rejected_run, item, "reject", Value::Null, Value::Null))
        .collect();
    env.jsonl("accepted.jsonl", &accepted);
    env.jsonl("rejected.jsonl", &rejected);
    for (file, staging) in [
        ("accepted.jsonl", "staging"),
        ("rejected.jsonl", "rejected"),
    ] {
        let applied = curate(&env, &["apply", file, "--staging", staging]);
        assert_eq!(applied.code, 0, "{}{}", applied.stdout, applied.stderr);
    }

    let (base, _) = trained_card(&env, &[], "heads-base");
    let (learned, stderr) = trained_card(&env, &["--curated", "staging"], "heads-accepted");
    // Five accepted registry edges and the retargeted one give relation
    // rows; the accepted ones whose mention the run's registry matches give
    // link counts; the unknown person a person example.
    assert!(
        stderr.contains("curated: 8 edge decisions teach the edge model: 6 relation rows"),
        "{stderr}"
    );
    let td = &learned["training_data"];
    let edges = &td["curated_examples_per_head"]["edges"];
    assert_eq!(edges["relation"], 6, "{td}");
    assert_eq!(edges["person"], 1, "{td}");
    let links = edges["registry_link"].as_u64().unwrap();
    assert!((1..=5).contains(&links), "{td}");
    assert_eq!(td["curated_decisions"]["edges"], 8, "{td}");
    assert_eq!(td["curated_decisions"]["edges_not_used"], 2, "{td}");
    assert_eq!(td["curated_edges_not_used"]["memory_link"], 1, "{td}");
    assert_eq!(
        td["curated_edges_not_used"]["relation_outside_vocabulary"], 1,
        "{td}"
    );
    assert!(
        stderr.contains(&format!("{links} registry-link counts, 1 person examples")),
        "{stderr}"
    );
    // The model changed, in the direction the decisions say.
    let person = |card: &Value| card["heads"][3]["metrics"]["curated"].clone();
    assert_eq!(person(&learned)["relation"], 6);
    let p_kind = person(&learned)["relation_mean_p_kind"].as_f64().unwrap();
    assert_ne!(learned["edges"]["mention"], base["edges"]["mention"]);
    assert!(
        relation_at(&learned, p_kind) > relation_at(&base, p_kind),
        "{} {} at {p_kind}",
        learned["edges"]["mention"],
        base["edges"]["mention"]
    );
    // Right links only: the registry-link priors do not fall.
    for class in ["link_exact_case", "link_other_case"] {
        let (l, b) = (
            learned["edges"][class].as_f64().unwrap(),
            base["edges"][class].as_f64().unwrap(),
        );
        assert!(l >= b, "{class}: {l} < {b}");
    }

    // The same edges rejected: each blames its relation or its link, and
    // neither rises.
    let (rejected_card, stderr) = trained_card(&env, &["--curated", "rejected"], "heads-rejected");
    assert!(
        stderr.contains("curated: 5 edge decisions teach the edge model"),
        "{stderr}"
    );
    let used = person(&rejected_card);
    assert_eq!(used["used"], 5, "{used}");
    assert_eq!(
        used["relation"].as_u64().unwrap() + used["registry_link"].as_u64().unwrap(),
        5,
        "{used}"
    );
    assert_eq!(used["person"], 0, "{used}");
    assert_ne!(rejected_card["edges"], base["edges"]);
    if let Some(p_kind) = used["relation_mean_p_kind"].as_f64() {
        assert!(relation_at(&rejected_card, p_kind) < relation_at(&base, p_kind));
    }
    for class in ["link_exact_case", "link_other_case"] {
        let (r, b) = (
            rejected_card["edges"][class].as_f64().unwrap(),
            base["edges"][class].as_f64().unwrap(),
        );
        assert!(r <= b, "{class}: {r} > {b}");
    }
}

/// The sample, annotated from its annotations file, into staging directory `staging`.
fn sample_into(env: &Env, staging: &str) -> String {
    let data = repo().join("data/sample");
    let (records, nodes, annotations) = (
        data.join("records.jsonl"),
        data.join("nodes.jsonl"),
        data.join("annotations.jsonl"),
    );
    env.run(&[
        "--input",
        records.to_str().unwrap(),
        "--nodes",
        nodes.to_str().unwrap(),
        "--annotations",
        annotations.to_str().unwrap(),
        "--staging",
        staging,
    ])
    .ok();
    let id = std::fs::read_to_string(env.path(staging).join("LATEST")).unwrap();
    id.trim().to_string()
}

// `curate apply` followed a run_id anywhere (another staging dir by a
// relative or absolute path, an uncommitted `.tmp-*` dir, `<A>/../<A>`, a
// LATEST that names a path) and read the registry from that folder's receipt.
#[test]
fn curate_apply_takes_only_committed_runs_of_its_staging_dir_by_name() {
    let env = Env::new();
    let a = sample_into(&env, "staging");
    let r = sample_into(&env, "other");
    // An uncommitted copy of a run inside this staging dir.
    let tmp = env.staging().join("runs/.tmp-fake");
    std::fs::create_dir_all(&tmp).unwrap();
    for f in ["quarantine.parquet", "receipt.json"] {
        std::fs::copy(env.path("other/runs").join(&r).join(f), tmp.join(f)).unwrap();
    }
    let absolute = env.path("other/runs").join(&r);
    let item = "j-007#tag0";
    let hostile = [
        format!("../../other/runs/{r}"),
        absolute.to_str().unwrap().to_string(),
        ".tmp-fake".to_string(),
        format!("{a}/../{a}"),
        r.clone(),
        format!("./{a}"),
    ];
    let mut lines: Vec<Value> = hostile
        .iter()
        .map(|run| decision(run, item, "reject", Value::Null, Value::Null))
        .collect();
    lines.push(decision(&a, item, "reject", Value::Null, Value::Null));
    env.jsonl("decisions.jsonl", &lines);
    let ran = curate(&env, &["apply", "decisions.jsonl", "--staging", "staging"]);
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout
            .contains("7 lines: 1 new, 0 updated, 0 already applied, 6 not applied"),
        "{}",
        ran.stdout
    );
    for (i, run) in hostile.iter().enumerate() {
        let expected = format!(
            "line {} ({item}): run_id: `{run}` is not a committed run of staging",
            i + 1
        );
        assert!(ran.stderr.contains(&expected), "{expected}\n{}", ran.stderr);
    }
    let curated = read_table(&env.staging().join("curated/curated.parquet"));
    assert_eq!(curated.len(), 1);
    assert_eq!(curated[0]["run_id"], a.as_str());

    // The fallback to LATEST: a LATEST that names a path is not followed.
    env.write(
        "staging/LATEST",
        format!("../../other/runs/{r}\n").as_bytes(),
    );
    let mut line = decision("", "j-009#tag0", "reject", Value::Null, Value::Null);
    line.as_object_mut().unwrap().remove("run_id");
    env.jsonl("latest.jsonl", &[line.clone()]);
    let ran = curate(&env, &["apply", "latest.jsonl", "--staging", "staging"]);
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains(&format!(
            "line 1 (j-009#tag0): run_id: missing, and LATEST: `../../other/runs/{r}` is not a committed run"
        )),
        "{}",
        ran.stderr
    );
    // A LATEST naming a committed run of this dir is followed.
    env.write("staging/LATEST", format!("{a}\n").as_bytes());
    curate(&env, &["apply", "latest.jsonl", "--staging", "staging"]).ok();
    let curated = read_table(&env.staging().join("curated/curated.parquet"));
    assert_eq!(curated.len(), 2);
    assert!(curated.iter().all(|c| c["run_id"] == a.as_str()));
}

// One invalid UTF-8 byte on line 2 aborted the whole decisions file with no
// line number, and a line of any length was held whole in memory.
#[test]
fn curate_apply_skips_a_non_utf8_or_over_long_line_by_number_and_applies_the_rest() {
    let env = Env::new();
    let a = sample_into(&env, "staging");
    let line = |item: &str| decision(&a, item, "reject", Value::Null, Value::Null).to_string();
    let mut bytes = Vec::new();
    bytes.extend(line("j-007#tag0").as_bytes());
    bytes.push(b'\n');
    // Line 2: a note with a byte that is not UTF-8.
    let bad = line("j-009#tag0").replace("\"note\":null", "\"note\":\"caf@\"");
    let (head, tail) = bad.split_once('@').unwrap();
    bytes.extend(head.as_bytes());
    bytes.push(0xe9);
    bytes.extend(tail.as_bytes());
    bytes.push(b'\n');
    bytes.extend(line("s-009#tag0").as_bytes());
    bytes.push(b'\n');
    // Line 4: 17 MiB, over the 16 MiB line limit.
    let long = line("m-006#tag0").replace(
        "\"note\":null",
        &format!("\"note\":\"{}\"", "x".repeat(17 << 20)),
    );
    bytes.extend(long.as_bytes());
    bytes.push(b'\n');
    bytes.extend(line("j-008#edge0").as_bytes());
    bytes.push(b'\n');
    env.write("decisions.jsonl", &bytes);
    let ran = curate(&env, &["apply", "decisions.jsonl", "--staging", "staging"]);
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout
            .contains("5 lines: 3 new, 0 updated, 0 already applied, 2 not applied"),
        "{}",
        ran.stdout
    );
    for expected in [
        "line 2 (j-009#tag0): (line): not UTF-8: invalid byte 0xe9",
        "line 4 (m-006#tag0): (line): line is too long: 17825",
        "over the limit of 16777216 bytes",
    ] {
        assert!(ran.stderr.contains(expected), "{expected}\n{}", ran.stderr);
    }
    let curated = read_table(&env.staging().join("curated/curated.parquet"));
    let mut items: Vec<&str> = curated
        .iter()
        .map(|c| c["item_id"].as_str().unwrap())
        .collect();
    items.sort();
    assert_eq!(items, ["j-007#tag0", "j-008#edge0", "s-009#tag0"]);
    // `curate status --decisions` reads the same file line by line.
    let st = curate(
        &env,
        &[
            "status",
            "--staging",
            "staging",
            "--json",
            "--decisions",
            "decisions.jsonl",
        ],
    );
    assert_eq!(st.code, 0, "{}", st.stderr);
    let st: Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(st["decisions_file"]["lines"], 5);
    assert_eq!(st["decisions_file"]["decided_not_applied"], 2);
}

/// `train --curated` with nothing to learn from stops before training, with
/// exit 2 and a message naming the path and what is wrong: a mistyped path,
/// a plain file, a folder that is no staging directory, a staging directory
/// without `curated/curated.parquet`, a FIFO in its place (never opened),
/// and a table without decisions.
#[test]
fn train_curated_refuses_what_holds_no_decisions_and_never_opens_a_fifo() {
    let env = Env::new();
    env.write("plain.txt", "not a staging dir");
    std::fs::create_dir_all(env.path("empty")).unwrap();
    // A real staging directory, without curated decisions yet.
    env.jsonl("records.jsonl", &[record("t-1", "I prefer bullet points.")]);
    let text = "I prefer bullet points.";
    env.jsonl(
        "annotations.jsonl",
        &[annotation(
            "t-1",
            vec![tag("preference", 0.6, text, text)],
            vec![],
            ("neutral", 0.9),
            ("low", 0.9),
        )],
    );
    env.run_std(&[]).ok();
    let staging = env.staging();
    let cases: Vec<(String, &str)> = vec![
        ("missing-dir".into(), "does not exist"),
        ("plain.txt".into(), "is not a directory"),
        ("empty".into(), "is not a tomlite staging directory"),
        (
            staging.display().to_string(),
            "has no curated/curated.parquet",
        ),
    ];
    let train = |path: &str| {
        let mut child = bin()
            .current_dir(env.path(""))
            .args(["train", "--frozen", "--out", "heads", "--curated", path])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().ok();
                panic!("train --curated {path} hung");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    for (path, why) in &cases {
        let (code, stderr) = train(path);
        assert_eq!(code, 2, "{path}: {stderr}");
        assert!(
            stderr.contains(path.as_str()) && stderr.contains(why),
            "{path}: {stderr}"
        );
    }
    // A FIFO where the table should be is refused without being opened.
    let curated = staging.join("curated");
    std::fs::create_dir_all(&curated).unwrap();
    let fifo = curated.join("curated.parquet");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (code, stderr) = train(staging.to_str().unwrap());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is not a regular file"), "{stderr}");
    std::fs::remove_file(&fifo).unwrap();
    // A Parquet table without a decision column.
    {
        use std::sync::Arc;
        let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "item_id",
            arrow_schema::DataType::Utf8,
            false,
        )]));
        let batch = arrow_array::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow_array::StringArray::from(vec!["x"])) as arrow_array::ArrayRef],
        )
        .unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(
            std::fs::File::create(&fifo).unwrap(),
            schema,
            None,
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let (code, stderr) = train(staging.to_str().unwrap());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("curated.parquet"), "{stderr}");
}

/// A curator sets a tag's affect and intensity, decides in bulk, and
/// `curate status` shows per head and confidence bin how often the
/// curator agreed with the model, bulk decisions apart, and whether the
/// items at or above each threshold were at least as often right.
#[test]
fn decisions_set_affect_and_intensity_and_status_shows_agreement_per_head_and_bin() {
    let env = Env::new();
    let annotations = repo().join("data/sample/annotations.jsonl");
    env.run_sample(&["--annotations", annotations.to_str().unwrap()])
        .ok();
    let run = env.receipt()["run_id"].as_str().unwrap().to_string();
    let quarantine = env.table("quarantine");
    let tags: Vec<&serde_json::Map<String, Value>> = quarantine
        .iter()
        .filter(|r| r["item_type"] == "tag" && r["confidence"].is_number())
        .collect();
    assert!(tags.len() >= 4, "{}", tags.len());
    let id = |i: usize| tags[i]["item_id"].as_str().unwrap().to_string();
    let other_affect = |i: usize| {
        if tags[i]["affect"] == "sad" {
            "happy"
        } else {
            "sad"
        }
    };
    let mut lines = [
        // Accepted as is: agrees with every head.
        decision(&run, &id(0), "accept", Value::Null, Value::Null),
        // Accepted with the affect corrected: agrees on the kind only.
        decision(&run, &id(1), "accept", Value::Null, Value::Null),
        // Rejected: disagrees on the kind, says nothing of the affect.
        decision(&run, &id(2), "reject", Value::Null, Value::Null),
        // Accepted in bulk.
        decision(&run, &id(3), "accept", Value::Null, Value::Null),
        // An affect outside the vocabulary.
        decision(&run, &id(0), "accept", Value::Null, Value::Null),
    ];
    lines[1]["affect"] = json!(other_affect(1));
    lines[1]["intensity"] = json!("extreme");
    lines[3]["bulk"] = json!(true);
    lines[4]["affect"] = json!("furious");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    env.write("decisions.jsonl", &text);
    let ran = curate(&env, &["apply", "decisions.jsonl", "--staging", "staging"]);
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains(&format!(
            "line 5 ({}): affect: `furious` is not one of angry, sad",
            id(0)
        )),
        "{}",
        ran.stderr
    );
    let curated = read_table(&env.staging().join("curated/curated.parquet"));
    assert_eq!(curated.len(), 4);
    let row = |i: usize| by(&curated, "item_id", &id(i))[0].clone();
    assert_eq!(row(1)["decided_affect"], other_affect(1));
    assert_eq!(row(1)["decided_intensity"], "extreme");
    assert_eq!(row(0)["decided_affect"], Value::Null);
    assert_eq!(row(3)["bulk"], 1);
    assert_eq!(row(0)["confidence"], tags[0]["confidence"]);

    let status = curate(&env, &["status", "--staging", "staging", "--json"]).ok();
    let s: Value = serde_json::from_str(&status.stdout).unwrap();
    let a = &s["agreement"];
    let decided = |head: &str| -> (u64, u64) {
        a[head]["bins"]
            .as_array()
            .unwrap()
            .iter()
            .fold((0, 0), |(n, k), b| {
                (
                    n + b["decided"].as_u64().unwrap(),
                    k + b["agreed"].as_u64().unwrap(),
                )
            })
    };
    // One by one: three tags; the kind agreed on two (the rejected one
    // not); the affect on one of the two not rejected.
    assert_eq!(decided("tom_kind"), (3, 2));
    assert_eq!(decided("affect"), (2, 1));
    assert_eq!(decided("intensity"), (2, 1));
    assert_eq!(a["tom_kind"]["bulk"], json!({"decided": 1, "agreed": 1}));
    assert_eq!(a["tom_kind"]["threshold"], 0.8);
    let text = curate(&env, &["status", "--staging", "staging"]).ok();
    assert!(
        text.stdout.contains("agreement") && text.stdout.contains("tom_kind   at >= 0.8:"),
        "{}",
        text.stdout
    );
}

/// `curate status` streams each run's queue: on a real staging directory of
/// two nights (the second re-running half the records, so the first run's
/// queue is partly superseded) with decisions on both runs, every run's
/// queued and pending counts, and the pending items by type and first
/// reason, are what the tables themselves say: queued is the run's
/// quarantine rows, pending those whose record the run last processed and
/// whose item has no decision.
#[test]
fn status_streams_the_queues_and_counts_what_the_tables_hold() {
    let env = Env::new();
    let sample = repo().join("data/sample");
    let annotations = sample.join("annotations.jsonl");
    let annotations = annotations.to_str().unwrap();
    env.run_sample(&["--annotations", annotations]).ok();
    let first = env.receipt()["run_id"].as_str().unwrap().to_string();
    let records = std::fs::read_to_string(sample.join("records.jsonl")).unwrap();
    let lines: Vec<&str> = records.lines().collect();
    let half: String = lines[..lines.len() / 2]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    env.write("half.jsonl", half);
    let nodes = sample.join("nodes.jsonl");
    env.run(&[
        "--input",
        "half.jsonl",
        "--nodes",
        nodes.to_str().unwrap(),
        "--annotations",
        annotations,
        "--staging",
        "staging",
        "--full",
    ])
    .ok();
    let second = env.receipt()["run_id"].as_str().unwrap().to_string();
    assert_ne!(first, second);

    let queue = |run: &str| {
        read_table(
            &env.staging()
                .join("runs")
                .join(run)
                .join("quarantine.parquet"),
        )
    };
    let state: std::collections::BTreeMap<String, String> =
        read_table(&env.staging().join("state/records.parquet"))
            .into_iter()
            .map(|r| {
                (
                    r["record_id"].as_str().unwrap().to_string(),
                    r["run_id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
    // Decide two items of each run, on records each run last processed.
    let mut lines = Vec::new();
    for run in [&first, &second] {
        for q in queue(run)
            .iter()
            .filter(|q| state[q["record_id"].as_str().unwrap()] == *run)
            .filter(|q| q["item_type"] == "tag")
            .take(2)
        {
            let label = q["label"].clone();
            lines.push(decision(
                run,
                q["item_id"].as_str().unwrap(),
                "reject",
                label,
                Value::Null,
            ));
        }
    }
    assert_eq!(lines.len(), 4, "{lines:?}");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    env.write("decisions.jsonl", &text);
    curate(&env, &["apply", "decisions.jsonl", "--staging", "staging"]).ok();
    let decided: std::collections::BTreeSet<(String, String)> =
        read_table(&env.staging().join("curated/curated.parquet"))
            .iter()
            .map(|r| {
                (
                    r["run_id"].as_str().unwrap().to_string(),
                    r["item_id"].as_str().unwrap().to_string(),
                )
            })
            .collect();
    assert_eq!(decided.len(), 4);

    // What the tables say.
    let (mut runs, mut pending) = (Vec::new(), 0u64);
    let mut by_type = serde_json::Map::new();
    let mut by_reason = serde_json::Map::new();
    let bump = |m: &mut serde_json::Map<String, Value>, k: &str| {
        let n = m.get(k).and_then(Value::as_u64).unwrap_or(0);
        m.insert(k.to_string(), json!(n + 1));
    };
    for run in [&first, &second] {
        let q = queue(run);
        let open: Vec<_> = q
            .iter()
            .filter(|r| state[r["record_id"].as_str().unwrap()] == *run)
            .filter(|r| {
                !decided.contains(&(run.to_string(), r["item_id"].as_str().unwrap().to_string()))
            })
            .collect();
        for r in &open {
            bump(&mut by_type, r["item_type"].as_str().unwrap());
            if let Some(first_reason) = r["reasons"][0].as_str() {
                bump(&mut by_reason, first_reason);
            }
        }
        pending += open.len() as u64;
        runs.push(json!({"run_id": run, "queued": q.len(), "pending": open.len()}));
    }
    // Both runs hold open and superseded items.
    assert!(runs[0]["pending"].as_u64().unwrap() > 0, "{runs:?}");
    assert!(
        runs[0]["pending"].as_u64().unwrap() + 2 < runs[0]["queued"].as_u64().unwrap(),
        "{runs:?}"
    );

    let st = curate(
        &env,
        &[
            "status",
            "--staging",
            "staging",
            "--json",
            "--decisions",
            "decisions.jsonl",
        ],
    )
    .ok();
    let st: Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(st["runs"], json!(runs));
    assert_eq!(st["pending"], pending);
    assert_eq!(st["pending_by_type"], Value::Object(by_type));
    assert_eq!(st["pending_by_reason"], Value::Object(by_reason));
    assert_eq!(st["applied"], 4);
    assert_eq!(st["applied_by_decision"], json!({"reject": 4}));
    assert_eq!(st["applied_by_curator"], json!({"rosa": 4}));
    assert_eq!(st["decisions_file"]["lines"], 4);
    assert_eq!(st["decisions_file"]["decided_not_applied"], 0);
}

/// Rewrites the Parquet table at `path`, each column through `edit`: the
/// column's name and values, changed or not, or `None` to drop it.
fn rewrite_table(
    path: &std::path::Path,
    edit: impl Fn(&str, &arrow_array::ArrayRef) -> Option<(String, arrow_array::ArrayRef)>,
) {
    use std::sync::Arc;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let batches: Vec<arrow_array::RecordBatch> = reader.map(Result::unwrap).collect();
    let edited: Vec<arrow_array::RecordBatch> = batches
        .iter()
        .map(|batch| {
            let schema = batch.schema();
            let (fields, columns): (Vec<arrow_schema::Field>, Vec<arrow_array::ArrayRef>) = schema
                .fields()
                .iter()
                .zip(batch.columns())
                .filter_map(|(field, column)| edit(field.name(), column))
                .map(|(name, column)| {
                    let field = arrow_schema::Field::new(name, column.data_type().clone(), true);
                    (field, column)
                })
                .unzip();
            arrow_array::RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)
                .unwrap()
        })
        .collect();
    std::fs::remove_file(path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        edited[0].schema(),
        None,
    )
    .unwrap();
    for batch in &edited {
        writer.write(batch).unwrap();
    }
    writer.close().unwrap();
}

/// A run's queue read back by `curate` is checked against the columns the
/// run stages: with a column renamed away, a column of another type, or a
/// null where the run never writes one, `curate apply` and `curate status`
/// stop (exit 1) with an error naming the file, the column and, for a
/// cell, the row; `status`, which reads only the columns it counts, still
/// counts a queue whose other columns are wrong.
#[test]
fn a_staged_queue_with_a_missing_or_mistyped_column_is_refused_by_name() {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use std::sync::Arc;
    let env = Env::new();
    let annotations = repo().join("data/sample/annotations.jsonl");
    env.run_sample(&["--annotations", annotations.to_str().unwrap()])
        .ok();
    let run = env.receipt()["run_id"].as_str().unwrap().to_string();
    let queue = env.latest().join("quarantine.parquet");
    let staged = std::fs::read(&queue).unwrap();
    let item = env.table("quarantine")[0]["item_id"]
        .as_str()
        .unwrap()
        .to_string();
    let line = decision(&run, &item, "reject", Value::Null, Value::Null);
    env.write("decisions.jsonl", format!("{line}\n"));
    let apply = || curate(&env, &["apply", "decisions.jsonl", "--staging", "staging"]);
    let status = || curate(&env, &["status", "--staging", "staging", "--json"]);
    // The commands name the table as they reach it, under `--staging staging`.
    let path = format!("staging/runs/{run}/quarantine.parquet");

    // `item_type` renamed: both commands read it.
    rewrite_table(&queue, |name, column| {
        let name = if name == "item_type" { "kind" } else { name };
        Some((name.to_string(), column.clone()))
    });
    let missing = format!("{path}: wrong schema: no `item_type` column, expected a string (Utf8)");
    for ran in [apply(), status()] {
        assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
        assert!(ran.stderr.contains(&missing), "{}", ran.stderr);
    }

    // `confidence` as text: apply reads it, status does not.
    std::fs::write(&queue, &staged).unwrap();
    rewrite_table(&queue, |name, column| {
        let column = match name {
            "confidence" => Arc::new(arrow_array::StringArray::from(vec!["0.5"; column.len()]))
                as arrow_array::ArrayRef,
            _ => column.clone(),
        };
        Some((name.to_string(), column))
    });
    let ran = apply();
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    let mistyped =
        format!("{path}: wrong schema: column `confidence` is Utf8, expected a float (Float64)");
    assert!(ran.stderr.contains(&mistyped), "{}", ran.stderr);
    let counted = status();
    assert_eq!(counted.code, 0, "{}", counted.stderr);
    let counted: Value = serde_json::from_str(&counted.stdout).unwrap();
    assert_eq!(counted["runs"][0]["queued"], 28, "{counted}");

    // A null record text in the third row.
    std::fs::write(&queue, &staged).unwrap();
    rewrite_table(&queue, |name, column| {
        let column = match name {
            "record_text" => {
                let texts = column.as_string::<i32>();
                let cells: Vec<Option<&str>> = (0..texts.len())
                    .map(|i| (i != 2).then(|| texts.value(i)))
                    .collect();
                Arc::new(arrow_array::StringArray::from(cells)) as arrow_array::ArrayRef
            }
            _ => column.clone(),
        };
        Some((name.to_string(), column))
    });
    let ran = apply();
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    let null = format!("{path}, row 3: column `record_text` is null, expected a string");
    assert!(ran.stderr.contains(&null), "{}", ran.stderr);
    assert!(!env.staging().join("curated/curated.parquet").exists());

    // As staged, the same decision applies.
    std::fs::write(&queue, &staged).unwrap();
    apply().ok();
}
