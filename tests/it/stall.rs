//! A night never hangs without telling: a stalled pipe ends the run at the
//! time budget with what was read; heartbeats carry progress counters and
//! `last_progress_at`; SIGTERM and SIGINT stop a run cleanly (a final
//! event, `failed/<run_id>/`, the lock released, exit 143 or 130); the
//! stream has events around each annotator batch, on each record failure
//! and after each record-level retry.
//!
//! Some use fault points: the `failpoints` feature (scripts/test builds
//! with it).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// Records `r1..rN` with one confident tag each, and their annotations.
fn small(env: &Env, n: usize) {
    let mut recs = Vec::new();
    let mut anns = Vec::new();
    for i in 1..=n {
        let id = format!("r{i}");
        let text = format!("Keep answers short, number {i}.");
        recs.push(record(&id, &text));
        anns.push(annotation(
            &id,
            vec![tag("preference", 0.95, &text, &text)],
            vec![],
            ("neutral", 0.9),
            ("medium", 0.9),
        ));
    }
    env.jsonl("records.jsonl", &recs);
    env.jsonl("annotations.jsonl", &anns);
}

/// A FIFO `name` whose writer sends `records.jsonl`'s lines, then holds
/// the pipe open without writing for `hold` seconds: a stalled `ssh … cat`.
fn stalled_pipe(env: &Env, name: &str, hold: u32) -> Child {
    let fifo = env.path(name);
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    Command::new("sh")
        .current_dir(env.dir.path())
        .args([
            "-c",
            &format!("exec 3>{name}; cat records.jsonl >&3; sleep {hold}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh")
}

/// `tomlite run` on `input` with `extra`, started (not waited for).
fn start(env: &Env, staging: &str, input: &str, extra: &[&str], faults: Option<&str>) -> Child {
    let mut c = bin();
    c.current_dir(env.dir.path())
        .arg("run")
        .args(["--input", input, "--annotations", "annotations.jsonl"])
        .args(["--staging", staging])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match faults {
        Some(f) => c.env("FAILPOINTS", f),
        None => c.env_remove("FAILPOINTS"),
    };
    c.spawn().expect("spawn tomlite")
}

/// Waits for `child` at most `limit` (then kills it: the test fails on
/// the code); returns its output and how long it ran from `since`.
fn finish(mut child: Child, since: Instant, limit: Duration) -> (Ran, Duration) {
    while child.try_wait().unwrap().is_none() && since.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = since.elapsed();
    if child.try_wait().unwrap().is_none() {
        let _ = child.kill();
    }
    let o = child.wait_with_output().unwrap();
    let ran = Ran {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    (ran, took)
}

/// Sends `signal` (`TERM`, `INT`) to `child`.
fn kill(child: &Child, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// The events of the run in progress (its temporary directory's stream).
fn events_in_progress(staging: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(staging.join("runs")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path().join("events.jsonl"))
        .filter(|p| p.exists())
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until the run in progress has read `n` records (its heartbeats
/// say so), at most 20 s.
fn wait_read(staging: &Path, n: u64) {
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(20) {
        let read = events_in_progress(staging)
            .iter()
            .filter_map(|e| e["progress"]["records_read"].as_u64())
            .max();
        if read >= Some(n) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "the run never said it read {n} records: {:#?}",
        events_in_progress(staging)
    );
}

// A pipe whose writer stalled (an `ssh … cat`, a `zcat` on a hung mount)
// ignored `--max-seconds 5` and kept the lock until the writer went away.
#[test]
fn a_stalled_pipe_ends_at_the_time_budget_with_what_was_read() {
    let env = Env::new();
    small(&env, 3);
    let mut writer = stalled_pipe(&env, "records.fifo", 25);
    let since = Instant::now();
    let run = start(
        &env,
        "staging",
        "records.fifo",
        &["--max-seconds", "3", "--heartbeat-seconds", "0.2"],
        None,
    );
    let (ran, took) = finish(run, since, Duration::from_secs(20));
    let _ = writer.kill();
    let _ = writer.wait();
    assert_eq!(
        ran.code, 4,
        "after {took:?}\n{}\n{}",
        ran.stdout, ran.stderr
    );
    assert!(took < Duration::from_secs(6), "the run took {took:?}");
    assert!(
        ran.stderr.contains("time budget reached")
            && ran.stderr.contains("records.fifo")
            && ran.stderr.contains("not read to its end"),
        "{}",
        ran.stderr
    );
    // What was read is committed.
    let receipt = env.receipt();
    assert_eq!(receipt["stop_condition"], "deadline", "{receipt}");
    assert_eq!(receipt["counts"]["records_in"], 3, "{receipt}");
    assert_eq!(receipt["counts"]["processed"], 3, "{receipt}");
    assert_eq!(receipt["inputs"][0]["records"], 3, "{receipt}");
    let promoted: Vec<String> = env
        .table("promoted_tags")
        .iter()
        .map(|r| r["record_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(promoted, ["r1", "r2", "r3"]);
    // The stream says where it stalled.
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    let deadline = events.iter().find(|e| e["phase"] == "deadline").unwrap();
    let blocker = deadline["bug_or_blocker"].as_str().unwrap_or_default();
    assert!(
        blocker.contains("records.fifo") && blocker.contains("no record came"),
        "{deadline}"
    );
    // The lock is released: the next run goes ahead.
    env.run_std(&["--quiet"]).ok();
}

// Heartbeats came with unchanged counts and no sign of when anything last
// moved, so the README's stall rule never fired on a stalled night.
#[test]
fn heartbeats_carry_progress_counters_and_last_progress_at() {
    let env = Env::new();
    small(&env, 3);
    let mut writer = stalled_pipe(&env, "records.fifo", 25);
    let since = Instant::now();
    let run = start(
        &env,
        "staging",
        "records.fifo",
        &[
            "--max-seconds",
            "3",
            "--heartbeat-seconds",
            "0.2",
            "--batch-size",
            "2",
        ],
        None,
    );
    let (ran, _) = finish(run, since, Duration::from_secs(20));
    let _ = writer.kill();
    let _ = writer.wait();
    assert_eq!(ran.code, 4, "{}", ran.stderr);
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    let beats: Vec<&Value> = events
        .iter()
        .filter(|e| e["phase"] == "heartbeat")
        .collect();
    assert!(beats.len() >= 5, "{events:#?}");
    for b in &beats {
        let p = &b["progress"];
        for k in ["records_read", "annotated", "staged", "failed"] {
            assert!(p[k].is_u64(), "{k} in {b}");
        }
        assert!(p["last_progress_at"].is_string(), "{b}");
        assert_eq!(b["timeout_diagnostics"]["stale_after_seconds"], 120.0);
    }
    // The first batch (r1, r2) was annotated and staged; r3 waits in hand
    // while the pipe is stalled: the counters stop, and so does
    // `last_progress_at`, while heartbeats go on.
    let stalled: Vec<&Value> = beats
        .iter()
        .filter(|b| b["progress"]["records_read"] == 3)
        .copied()
        .collect();
    assert!(stalled.len() >= 4, "{beats:#?}");
    let moved = &stalled[0]["progress"]["last_progress_at"];
    for b in &stalled {
        assert_eq!(b["progress"]["annotated"], 2, "{b}");
        assert_eq!(b["progress"]["staged"], 2, "{b}");
        assert_eq!(b["progress"]["failed"], 0, "{b}");
        assert_eq!(&b["progress"]["last_progress_at"], moved, "{b}");
    }
    let last_beat = stalled.last().unwrap()["time"].as_str().unwrap();
    let age = chrono::DateTime::parse_from_rfc3339(last_beat).unwrap()
        - chrono::DateTime::parse_from_rfc3339(moved.as_str().unwrap()).unwrap();
    assert!(age.num_milliseconds() >= 1000, "{age:?}");
    // The last event counts all three.
    let last = events.last().unwrap();
    assert_eq!(last["progress"]["staged"], 3, "{last}");
}

// SIGTERM killed the run where it stood: no final event, nothing in
// failed/, and the exit status of a killed process.
#[test]
fn sigterm_leaves_a_final_event_failed_dir_and_exit_143() {
    let env = Env::new();
    small(&env, 3);
    let mut writer = stalled_pipe(&env, "records.fifo", 25);
    let since = Instant::now();
    let run = start(
        &env,
        "staging",
        "records.fifo",
        &["--heartbeat-seconds", "0.1"],
        None,
    );
    wait_read(&env.staging(), 3);
    kill(&run, "TERM");
    let (ran, _) = finish(run, since, Duration::from_secs(20));
    let _ = writer.kill();
    let _ = writer.wait();
    assert_eq!(ran.code, 143, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("SIGTERM"), "{}", ran.stderr);
    // Nothing committed, nothing left in runs/.
    assert!(!env.staging().join("LATEST").exists());
    assert_eq!(
        std::fs::read_dir(env.staging().join("runs"))
            .unwrap()
            .count(),
        0
    );
    let failed: Vec<_> = std::fs::read_dir(env.staging().join("failed"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let events = read_jsonl(&failed[0].join("events.jsonl"));
    assert!(events.iter().any(|e| e["phase"] == "start"), "{events:#?}");
    let last = events.last().unwrap();
    assert_eq!(last["phase"], "before_blocked_or_final_response");
    assert_eq!(last["evidence"]["status_code"], 143);
    assert!(
        last["bug_or_blocker"].as_str().unwrap().contains("SIGTERM"),
        "{last}"
    );
    let receipt: Value =
        serde_json::from_slice(&std::fs::read(failed[0].join("receipt.json")).unwrap()).unwrap();
    assert_eq!(receipt["status"], "failed", "{receipt}");
    assert_eq!(receipt["exit_code"], 143, "{receipt}");
    // The lock is released: the next run goes ahead.
    env.run_std(&["--quiet"]).ok();
    assert_eq!(env.receipt()["counts"]["processed"], 3);
}

// Ctrl-C during annotation: the same clean stop, exit 130.
#[test]
fn sigint_exits_130() {
    let env = Env::new();
    small(&env, 40);
    let since = Instant::now();
    let run = start(
        &env,
        "staging",
        "records.jsonl",
        &["--batch-size", "2", "--heartbeat-seconds", "0.1"],
        Some("annotate.batch=sleep(200)"),
    );
    wait_read(&env.staging(), 4);
    kill(&run, "INT");
    let (ran, took) = finish(run, since, Duration::from_secs(20));
    assert_eq!(ran.code, 130, "{}\n{}", ran.stdout, ran.stderr);
    // It stopped at the next batch, not after all 20.
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(!env.staging().join("LATEST").exists());
    let failed = std::fs::read_dir(env.staging().join("failed"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let events = read_jsonl(&failed.join("events.jsonl"));
    let last = events.last().unwrap();
    assert_eq!(last["evidence"]["status_code"], 130, "{last}");
    assert!(
        last["bug_or_blocker"].as_str().unwrap().contains("SIGINT"),
        "{last}"
    );
    env.run_std(&["--quiet"]).ok();
}

// No event said when an annotator batch started or ended, when a record
// failed, or how a record's retry went.
#[test]
fn annotator_batches_and_record_failures_are_events() {
    let env = Env::new();
    small(&env, 5);
    let ran = start(
        &env,
        "staging",
        "records.jsonl",
        &["--batch-size", "2"],
        Some("annotate.record=return(r2)"),
    );
    let (ran, _) = finish(ran, Instant::now(), Duration::from_secs(30));
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    let of =
        |phase: &str| -> Vec<&Value> { events.iter().filter(|e| e["phase"] == phase).collect() };
    let before = of("before_tool_or_api_call");
    let after = of("after_tool_or_api_call");
    let sizes = |v: &[&Value]| -> Vec<(u64, u64)> {
        v.iter()
            .map(|e| {
                let c = &e["evidence"]["counts"];
                (c["batch"].as_u64().unwrap(), c["size"].as_u64().unwrap())
            })
            .collect()
    };
    assert_eq!(sizes(&before), [(1, 2), (2, 2), (3, 1)], "{before:#?}");
    assert_eq!(sizes(&after), [(1, 2), (2, 2), (3, 1)], "{after:#?}");
    for e in &after {
        assert!(e["evidence"]["counts"]["elapsed_seconds"].is_f64(), "{e}");
    }
    assert_eq!(after[0]["evidence"]["counts"]["failed"], 1, "{}", after[0]);
    assert_eq!(after[0]["evidence"]["counts"]["annotated"], 1);
    assert_eq!(after[1]["evidence"]["counts"]["failed"], 0);
    // Each batch's events bracket it: before, after, before, after, ...
    let order: Vec<&str> = events
        .iter()
        .filter_map(|e| e["phase"].as_str())
        .filter(|p| p.ends_with("_tool_or_api_call"))
        .collect();
    assert_eq!(
        order,
        [
            "before_tool_or_api_call",
            "after_tool_or_api_call",
            "before_tool_or_api_call",
            "after_tool_or_api_call",
            "before_tool_or_api_call",
            "after_tool_or_api_call"
        ]
    );
    // The failure: record, field, reason.
    let failures = of("on_deterministic_bug_found");
    assert_eq!(failures.len(), 1, "{failures:#?}");
    let c = &failures[0]["evidence"]["counts"];
    assert_eq!(c["record_id"], "r2");
    assert_eq!(c["field"], "annotation");
    assert!(
        c["reason"]
            .as_str()
            .unwrap()
            .contains("injected fault: annotating record r2 panicked"),
        "{c}"
    );
    assert!(
        failures[0]["bug_or_blocker"]
            .as_str()
            .unwrap()
            .contains("r2"),
        "{}",
        failures[0]
    );
    // The batch failed as a whole: each of its records was tried alone.
    let retries = of("after_repair_attempt");
    let seen: Vec<(String, u64, String)> = retries
        .iter()
        .map(|e| {
            let c = &e["evidence"]["counts"];
            (
                c["record_id"].as_str().unwrap().to_string(),
                c["attempt"].as_u64().unwrap(),
                c["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("r1".to_string(), 2, "annotated".to_string()),
            ("r2".to_string(), 2, "failed".to_string())
        ]
    );
    // The next run tries r2 again: its run attempt 2 of 3, failed again.
    let ran = start(
        &env,
        "staging",
        "records.jsonl",
        &["--batch-size", "2"],
        Some("annotate.record=return(r2)"),
    );
    let (ran, _) = finish(ran, Instant::now(), Duration::from_secs(30));
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    let again: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["phase"] == "after_repair_attempt" && e["evidence"]["counts"]["retry"] == "next_run"
        })
        .collect();
    assert_eq!(again.len(), 1, "{events:#?}");
    let c = &again[0]["evidence"]["counts"];
    assert_eq!(
        (&c["record_id"], &c["attempt"], &c["of"], &c["outcome"]),
        (
            &Value::from("r2"),
            &Value::from(2),
            &Value::from(3),
            &Value::from("failed")
        ),
        "{c}"
    );
}

// bug_or_blocker was null on a committed run whose records failed.
#[test]
fn bug_or_blocker_is_set_when_records_failed() {
    let env = Env::new();
    small(&env, 4);
    let ran = start(
        &env,
        "staging",
        "records.jsonl",
        &[],
        Some("annotate.record=return(r3)"),
    );
    let (ran, _) = finish(ran, Instant::now(), Duration::from_secs(30));
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(env.receipt()["counts"]["failed"], 1);
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    for phase in ["committed", "before_blocked_or_final_response"] {
        let e = events.iter().find(|e| e["phase"] == phase).unwrap();
        let blocker = e["bug_or_blocker"].as_str().unwrap_or_default();
        assert!(
            blocker.contains("1 records that failed to annotate"),
            "{phase}: {e}"
        );
    }
    // A clean run leaves it null.
    run_clean(&env);
}

fn run_clean(env: &Env) {
    let ran = start(env, "clean", "records.jsonl", &[], None);
    let (ran, _) = finish(ran, Instant::now(), Duration::from_secs(30));
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let id = std::fs::read_to_string(env.path("clean/LATEST")).unwrap();
    let events = read_jsonl(&env.path("clean/runs").join(id.trim()).join("events.jsonl"));
    let committed = events.iter().find(|e| e["phase"] == "committed").unwrap();
    assert!(committed["bug_or_blocker"].is_null(), "{committed}");
}

// The contract claimed per-phase receipt files (`phase_receipt_json`) that
// no run writes. Every receipt, stream mode and cadence point it names is
// now one a run produces.
#[test]
fn the_annotator_contract_claims_only_what_a_run_writes() {
    let text = std::fs::read_to_string(repo().join("contracts/tomlite-annotator.yaml")).unwrap();
    let contract: Value = serde_saphyr::from_str(&text).unwrap();
    let env = Env::new();
    small(&env, 3);
    let ran = start(
        &env,
        "staging",
        "records.jsonl",
        &["--batch-size", "2"],
        Some("annotate.record=return(r2)"),
    );
    let (ran, _) = finish(ran, Instant::now(), Duration::from_secs(30));
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let dir = env.latest();
    for node in contract["dag_spec"]["nodes"].as_array().unwrap() {
        for receipt in node["receipts"].as_array().unwrap() {
            let file = dir.join(receipt.as_str().unwrap());
            assert!(file.is_file(), "node {}: {}", node["id"], file.display());
        }
    }
    let reporting = &contract["status_reporting"];
    for mode in reporting["stream_modes"].as_array().unwrap() {
        match mode.as_str().unwrap() {
            "jsonl_event_stream" => assert!(dir.join("events.jsonl").is_file()),
            "final_response_json" => {
                let events = read_jsonl(&dir.join("events.jsonl"));
                let last = events.last().unwrap();
                assert_eq!(last["phase"], "before_blocked_or_final_response");
                assert_eq!(last["evidence"]["status_code"], 0);
                let receipt: Value =
                    serde_json::from_slice(&std::fs::read(dir.join("receipt.json")).unwrap())
                        .unwrap();
                assert_eq!(receipt["status"], "committed");
            }
            other => panic!("the contract claims stream mode {other}, which no run writes"),
        }
    }
    let events = read_jsonl(&dir.join("events.jsonl"));
    for point in reporting["cadence"].as_array().unwrap() {
        let phase = match point.as_str().unwrap() {
            "after_start" => "start",
            "after_each_phase" => "input_done",
            other => other,
        };
        assert!(
            events.iter().any(|e| e["phase"] == phase),
            "cadence point {point}: no `{phase}` event"
        );
    }
}
