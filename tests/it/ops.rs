//! Nightly operations under faults: a run killed at every named fault point
//! and at random moments recovers to exactly what an uninterrupted run
//! commits; time budget and resume; failing and poison records; the failure
//! budget; transient I/O retries; heartbeats, progress and --quiet; the cron
//! wrapper; shards and `tomlite merge`.
//!
//! Fault points need the `failpoints` feature (scripts/test builds with it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tomlite_staging::State;

use crate::common::*;

/// Every fault point of a run, in the order a run passes them.
const FAULT_POINTS: [&str; 15] = [
    "staged.promoted_tags",
    "staged.promoted_edges",
    "staged.quarantine",
    "staged.abstained",
    "staged.sensitive",
    "staged.rejects",
    "staged.report_html",
    "staged.report_md",
    "staged.receipt",
    "commit.before_run_rename",
    "commit.after_run_rename",
    "commit.before_state_replace",
    "commit.after_state_replace",
    "commit.before_latest_replace",
    "commit.after_latest_replace",
];

const RECORD_TABLES: [&str; 4] = ["promoted_tags", "promoted_edges", "quarantine", "abstained"];

/// `scripts/generate-records N` (with memory edges) into the env: records,
/// annotations and nodes.
fn generate(env: &Env, n: usize, seed: u64) {
    let out = Command::new("python3")
        .arg(repo().join("scripts/generate-records"))
        .args([&n.to_string(), env.dir.path().to_str().unwrap()])
        .args(["--seed", &seed.to_string(), "--memory-edges"])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The first `n` lines of records.jsonl as `name`.
fn head(env: &Env, name: &str, n: usize) {
    let all = std::fs::read_to_string(env.path("records.jsonl")).unwrap();
    let part: String = all.lines().take(n).map(|l| format!("{l}\n")).collect();
    env.write(name, part);
}

fn cmd(env: &Env, staging: &str, input: &str, extra: &[&str]) -> Command {
    let mut c = bin();
    c.current_dir(env.dir.path())
        .arg("run")
        .args(["--input", input, "--annotations", "annotations.jsonl"])
        .args(["--nodes", "nodes.jsonl", "--staging", staging])
        .args(extra);
    c
}

fn run(env: &Env, staging: &str, input: &str, extra: &[&str], faults: Option<&str>) -> Ran {
    let mut c = cmd(env, staging, input, extra);
    match faults {
        Some(f) => c.env("FAILPOINTS", f),
        None => c.env_remove("FAILPOINTS"),
    };
    let o = c.output().expect("spawn tomlite");
    Ran {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// A row as a sortable string without its run id.
fn key(mut row: Map<String, Value>) -> String {
    row.remove("run_id");
    Value::Object(row).to_string()
}

/// What a staging directory holds, checked for the recovery invariants.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// Every committed run's record rows, per table, without run ids, sorted.
    rows: BTreeMap<String, Vec<String>>,
    /// The last run's rejects, without run ids, sorted.
    rejects: Vec<String>,
    /// processed + failed over every committed run.
    processed: u64,
    /// Records in the state.
    state_records: usize,
}

fn outcome(root: &Path) -> Outcome {
    let state = State::load(&root.join("state")).unwrap();
    let committed: Vec<String> = state.runs().to_vec();
    // No temporary directory, next-state file or uncommitted run is left.
    let mut listed: Vec<String> = std::fs::read_dir(root.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    let mut sorted = committed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "runs/ holds exactly the committed runs");
    for e in std::fs::read_dir(root.join("state")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert_eq!(name, "records.parquet", "stray file in state/");
    }
    let latest = std::fs::read_to_string(root.join("LATEST")).unwrap();
    assert_eq!(Some(latest.trim()), committed.last().map(String::as_str));
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut processed = 0;
    for r in &committed {
        let dir = root.join("runs").join(r);
        for t in RECORD_TABLES {
            rows.entry(t.to_string()).or_default().extend(
                read_table(&dir.join(format!("{t}.parquet")))
                    .into_iter()
                    .map(key),
            );
        }
        let receipt: Value =
            serde_json::from_slice(&std::fs::read(dir.join("receipt.json")).unwrap()).unwrap();
        processed += receipt["counts"]["processed"].as_u64().unwrap()
            + receipt["counts"]["failed"].as_u64().unwrap();
    }
    for v in rows.values_mut() {
        v.sort();
    }
    let last = root.join("runs").join(committed.last().unwrap());
    let mut rejects: Vec<String> = read_table(&last.join("rejects.parquet"))
        .into_iter()
        .map(key)
        .collect();
    rejects.sort();
    Outcome {
        rows,
        rejects,
        processed,
        state_records: state.len(),
    }
}

/// Two nights (the first 60 % of the records, then all) into `staging`.
fn two_nights(env: &Env, staging: &str) -> Outcome {
    run(env, staging, "night-1.jsonl", &[], None).ok();
    run(env, staging, "records.jsonl", &[], None).ok();
    outcome(&env.path(staging))
}

fn setup(n: usize) -> Env {
    let env = Env::new();
    generate(&env, n, 11);
    head(&env, "night-1.jsonl", n * 6 / 10);
    env
}

#[test]
fn a_run_killed_at_every_fault_point_recovers_to_the_uninterrupted_outcome() {
    let env = setup(600);
    let reference = two_nights(&env, "reference");
    assert!(reference.processed >= 580, "{reference:?}");
    assert!(reference.rows["promoted_edges"].len() > 10);
    for (i, point) in FAULT_POINTS.iter().enumerate() {
        let staging = format!("s{i}");
        run(&env, &staging, "night-1.jsonl", &[], None).ok();
        let before = std::fs::read(env.path(&staging).join("state/records.parquet")).unwrap();
        let killed = run(
            &env,
            &staging,
            "records.jsonl",
            &[],
            Some(&format!("{point}=return")),
        );
        assert_ne!(killed.code, 0, "{point}: the run was not killed");
        assert!(
            killed.stderr.contains(&format!("fault point {point}")),
            "{}",
            killed.stderr
        );
        let runs_dir = env.path(&staging).join("runs");
        let tmp_left = std::fs::read_dir(&runs_dir).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".tmp-")
        });
        let state_now = std::fs::read(env.path(&staging).join("state/records.parquet")).unwrap();
        let past_commit_point = i
            >= FAULT_POINTS
                .iter()
                .position(|p| *p == "commit.after_run_rename")
                .unwrap();
        // Before the commit point the previous state is intact and the run
        // is a temporary directory; after it the run is published.
        assert_eq!(tmp_left, !past_commit_point, "{point}");
        if i < FAULT_POINTS
            .iter()
            .position(|p| *p == "commit.after_state_replace")
            .unwrap()
        {
            assert_eq!(
                before, state_now,
                "{point}: state changed before its replacement"
            );
        }
        let again = run(&env, &staging, "records.jsonl", &[], None).ok();
        let receipt = env_receipt(&env.path(&staging));
        let recovered = receipt["recovered"].as_array().unwrap().clone();
        let got = outcome(&env.path(&staging));
        assert_eq!(got, reference, "{point}: recovered outcome differs");
        eprintln!(
            "fault point {point:30} killed: tmp dir left {tmp_left:5}, state replaced {:5}; recovery run: processed {}, skipped {}, recovered {:?}",
            before != state_now,
            receipt["counts"]["processed"],
            receipt["counts"]["skipped_unchanged"],
            recovered
                .iter()
                .map(|r| r.as_str().unwrap().rsplit('/').next().unwrap().to_string())
                .collect::<Vec<_>>()
        );
        assert!(!again.stdout.is_empty());
    }
}

fn env_receipt(root: &Path) -> Value {
    let id = std::fs::read_to_string(root.join("LATEST")).unwrap();
    serde_json::from_slice(
        &std::fs::read(root.join("runs").join(id.trim()).join("receipt.json")).unwrap(),
    )
    .unwrap()
}

/// SIGKILL at random moments of a real run, then a recovery run: the
/// invariants hold every time. `TOMLITE_KILL_ITERATIONS` (default 12;
/// scripts/kill-test runs 50).
#[test]
fn sigkill_at_random_moments_always_recovers() {
    let iterations: usize = std::env::var("TOMLITE_KILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let env = setup(1500);
    let clock = Instant::now();
    let reference = two_nights(&env, "reference");
    // One uninterrupted second night, to know how long a run takes.
    let span = clock.elapsed().as_secs_f64() / 2.0 * 1.2;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut killed_before_commit = 0;
    let mut phases: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..iterations {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = Duration::from_secs_f64(span * (seed % 1000) as f64 / 1000.0);
        let staging = format!("k{i}");
        run(&env, &staging, "night-1.jsonl", &[], None).ok();
        let mut child = cmd(&env, &staging, "records.jsonl", &["--quiet"])
            .env_remove("FAILPOINTS")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        if !status.success() {
            killed_before_commit += 1;
        }
        // Where the kill landed, from what it left.
        let root = env.path(&staging);
        let names: Vec<String> = std::fs::read_dir(root.join("runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let committed = State::load(&root.join("state")).unwrap().runs().len();
        let phase = if names.iter().any(|n| n.starts_with(".tmp-")) {
            "writing"
        } else if names.len() > committed {
            "published, state not replaced"
        } else if committed == 2 {
            "committed"
        } else {
            "before the run directory"
        };
        *phases.entry(phase).or_insert(0) += 1;
        run(&env, &staging, "records.jsonl", &[], None).ok();
        assert_eq!(
            outcome(&env.path(&staging)),
            reference,
            "iteration {i}: killed after {at:?}"
        );
        std::fs::remove_dir_all(env.path(&staging)).unwrap();
    }
    eprintln!(
        "{iterations} SIGKILLs within {span:.2} s: {killed_before_commit} killed mid-run, {} after it ended; left behind: {phases:?}; every recovery equal to the uninterrupted outcome",
        iterations - killed_before_commit
    );
}

#[test]
fn a_deadline_commits_what_is_done_and_the_next_run_takes_exactly_the_rest() {
    let env = setup(300);
    let reference = {
        run(&env, "reference", "records.jsonl", &[], None).ok();
        outcome(&env.path("reference"))
    };
    let partial = run(
        &env,
        "staging",
        "records.jsonl",
        &["--max-seconds", "2", "--batch-size", "20"],
        Some("annotate.batch=sleep(250)"),
    );
    assert_eq!(partial.code, 4, "{}\n{}", partial.stdout, partial.stderr);
    assert!(
        partial.stderr.contains("time budget reached"),
        "{}",
        partial.stderr
    );
    let receipt = env_receipt(&env.path("staging"));
    assert_eq!(receipt["stop_condition"], "deadline");
    assert_eq!(receipt["resumable"], true);
    let c = &receipt["counts"];
    let done = c["processed"].as_u64().unwrap();
    assert!(done > 0 && done < 280, "{c}");
    assert!(c["deferred"].as_u64().unwrap() > 0, "{c}");
    let sum: u64 = [
        "rejected",
        "skipped_unchanged",
        "processed",
        "failed",
        "poison_skipped",
        "deferred",
    ]
    .iter()
    .map(|k| c[*k].as_u64().unwrap())
    .sum();
    assert_eq!(sum, c["records_in"].as_u64().unwrap(), "{c}");
    let dir = env
        .path("staging/runs")
        .join(receipt["run_id"].as_str().unwrap());
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(events.contains("\"phase\":\"deadline\""), "{events}");
    assert!(
        events.contains("\"stop_condition\":\"deadline\""),
        "{events}"
    );
    let rest = run(&env, "staging", "records.jsonl", &[], None).ok();
    let r2 = env_receipt(&env.path("staging"));
    assert_eq!(r2["stop_condition"], "input_exhausted");
    assert_eq!(
        r2["counts"]["skipped_unchanged"].as_u64().unwrap(),
        done,
        "{}",
        rest.stdout
    );
    assert_eq!(outcome(&env.path("staging")).rows, reference.rows);
    assert_eq!(
        outcome(&env.path("staging")).processed,
        reference.processed,
        "no record processed twice"
    );
    // --deadline takes the next HH:MM to come; a bad one is a config error.
    let bad = run(
        &env,
        "other",
        "records.jsonl",
        &["--deadline", "25:99"],
        None,
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("HH:MM"), "{}", bad.stderr);
    // A deadline that passed less than 12 h ago (a late start, a retry)
    // means "now": nothing new is taken. One 2 h ahead leaves the run alone.
    let past = (chrono::Local::now() - chrono::Duration::minutes(1))
        .format("%H:%M")
        .to_string();
    let late = run(&env, "other", "records.jsonl", &["--deadline", &past], None);
    assert_eq!(late.code, 4, "{}", late.stderr);
    assert_eq!(env_receipt(&env.path("other"))["counts"]["processed"], 0);
    let ahead = (chrono::Local::now() + chrono::Duration::hours(2))
        .format("%H:%M")
        .to_string();
    run(
        &env,
        "other",
        "records.jsonl",
        &["--deadline", &ahead],
        None,
    )
    .ok();
    assert_eq!(
        env_receipt(&env.path("other"))["stop_condition"],
        "input_exhausted"
    );
}

fn small(env: &Env, texts: &[(&str, &str)]) {
    let mut recs = Vec::new();
    let mut anns = Vec::new();
    for (id, text) in texts {
        recs.push(record(id, text));
        anns.push(annotation(
            id,
            vec![tag("preference", 0.95, text, text)],
            vec![],
            ("neutral", 0.9),
            ("medium", 0.9),
        ));
    }
    env.jsonl("records.jsonl", &recs);
    env.jsonl("annotations.jsonl", &anns);
    env.write("nodes.jsonl", "");
}

#[test]
fn a_failing_record_is_isolated_retried_and_skipped_as_poison_after_three_runs() {
    let env = Env::new();
    small(
        &env,
        &[
            ("r1", "Keep answers short."),
            ("r2", "Code first, prose after."),
        ],
    );
    let fault = Some("annotate.record=return(r2)");
    for n in 1..=3u64 {
        let ran = run(&env, "staging", "records.jsonl", &[], fault).ok();
        let receipt = env_receipt(&env.path("staging"));
        assert_eq!(receipt["counts"]["failed"], 1, "{}", ran.stdout);
        assert_eq!(receipt["failed"][0]["record_id"], "r2");
        assert_eq!(receipt["failed"][0]["failures"], n);
        let rejects = read_table(&env_dir(&env).join("rejects.parquet"));
        let row = by(&rejects, "input", "annotation_failed")[0];
        assert_eq!(row["record_id"], "r2");
        assert_eq!(row["field"], "annotation");
        assert_eq!(row["line"], 2);
        let error = row["error"].as_str().unwrap();
        assert!(error.contains(&format!("failed run {n} of 3")), "{error}");
        assert!(
            error.contains("injected fault: annotating record r2 panicked"),
            "{error}"
        );
        // The batch went on: r1 processed in run 1, unchanged after.
        let r1 = if n == 1 {
            "processed"
        } else {
            "skipped_unchanged"
        };
        assert_eq!(receipt["counts"][r1], 1, "{}", receipt["counts"]);
    }
    // Fourth run, fault gone or not: poison, listed in receipt and report.
    for fault in [fault, None] {
        run(&env, "staging", "records.jsonl", &[], fault).ok();
        let receipt = env_receipt(&env.path("staging"));
        assert_eq!(receipt["counts"]["poison_skipped"], 1);
        assert_eq!(receipt["counts"]["failed"], 0);
        assert_eq!(receipt["poison"][0]["record_id"], "r2");
        assert_eq!(receipt["poison"][0]["failures"], 3);
        let rejects = read_table(&env_dir(&env).join("rejects.parquet"));
        let row = by(&rejects, "input", "poison")[0];
        assert!(
            row["error"].as_str().unwrap().starts_with("poison:"),
            "{row:?}"
        );
        let report = std::fs::read_to_string(env_dir(&env).join("report.md")).unwrap();
        assert!(
            report.contains("`r2` (records.jsonl:2): poison, annotation failed in 3 runs"),
            "{report}"
        );
        let page = std::fs::read_to_string(env_dir(&env).join("report.html")).unwrap();
        assert!(page.contains("poison: annotation of this content failed in 3 runs"));
    }
    // --full gives a poison record one more try.
    run(&env, "staging", "records.jsonl", &["--full"], None).ok();
    let receipt = env_receipt(&env.path("staging"));
    assert_eq!(receipt["counts"]["poison_skipped"], 0);
    assert_eq!(receipt["counts"]["processed"], 2);
    // New content: a fresh try.
    small(
        &env,
        &[
            ("r1", "Keep answers short."),
            ("r2", "Code first, prose after, always."),
        ],
    );
    run(&env, "staging", "records.jsonl", &[], None).ok();
    let receipt = env_receipt(&env.path("staging"));
    assert_eq!(receipt["counts"]["processed"], 1, "{}", receipt["counts"]);
    assert_eq!(receipt["counts"]["poison_skipped"], 0);
    assert_eq!(env.table("promoted_tags")[0]["record_id"], "r2");
}

// A night that skipped poison records exited 0 with nothing in the log and
// no event: cron users never heard of it. Now: a `poison` event, a line on
// stderr even with --quiet, exit 6 with --escalate-poison, which the cron
// wrapper passes, and the wrapper's own log line.
#[test]
fn a_night_that_skips_poison_records_says_so_where_cron_users_look() {
    let env = Env::new();
    small(
        &env,
        &[
            ("r1", "Keep answers short."),
            ("r2", "Code first, prose after."),
        ],
    );
    for _ in 1..=3 {
        run(
            &env,
            "staging",
            "records.jsonl",
            &[],
            Some("annotate.record=return(r2)"),
        )
        .ok();
    }
    // Without the flag: exit 0, but the stream and stderr say it.
    let ran = run(&env, "staging", "records.jsonl", &["--quiet"], None).ok();
    assert!(
        ran.stderr.contains("skipped 1 poison records") && ran.stderr.contains("receipt.json"),
        "{}",
        ran.stderr
    );
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    let poison: Vec<&Value> = events.iter().filter(|e| e["phase"] == "poison").collect();
    assert_eq!(poison.len(), 1, "{events:#?}");
    assert_eq!(poison[0]["evidence"]["counts"]["poison_skipped"], 1);
    let blocker = poison[0]["bug_or_blocker"].as_str().unwrap();
    assert!(blocker.contains("r2"), "{blocker}");
    let committed = events.iter().find(|e| e["phase"] == "committed").unwrap();
    assert_eq!(committed["evidence"]["status_code"], 0);
    // bug_or_blocker is set on a committed run that lost records, on its
    // committed and its final event.
    for phase in ["committed", "before_blocked_or_final_response"] {
        let e = events.iter().find(|e| e["phase"] == phase).unwrap();
        let blocker = e["bug_or_blocker"].as_str().unwrap_or_default();
        assert!(blocker.contains("1 poison records skipped"), "{phase}: {e}");
    }
    // With --escalate-poison: committed all the same, exit 6.
    let ran = run(
        &env,
        "staging",
        "records.jsonl",
        &["--escalate-poison"],
        None,
    );
    assert_eq!(ran.code, 6, "{}", ran.stderr);
    assert_eq!(env.receipt()["counts"]["poison_skipped"], 1);
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    let committed = events.iter().find(|e| e["phase"] == "committed").unwrap();
    assert_eq!(committed["evidence"]["status_code"], 6);
    // The cron wrapper escalates by default and logs what the 6 means.
    let out = Command::new(repo().join("scripts/nightly"))
        .current_dir(env.dir.path())
        .env("TOMLITE_BIN", env!("CARGO_BIN_EXE_tomlite"))
        .env("TOMLITE_LOG_DIR", env.path("logs"))
        .env_remove("FAILPOINTS")
        .args([
            "--input",
            "records.jsonl",
            "--annotations",
            "annotations.jsonl",
        ])
        .args(["--nodes", "nodes.jsonl", "--staging", "staging"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    let log = std::fs::read_dir(env.path("logs"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect::<String>();
    assert!(
        log.contains("exit 6: committed, but poison records were skipped")
            && log.contains("skipped 1 poison records"),
        "{log}"
    );
    // A clean night is still 0 with the flag.
    small(&env, &[("r1", "Keep answers short.")]);
    run(&env, "clean", "records.jsonl", &["--escalate-poison"], None).ok();
}

fn env_dir(env: &Env) -> PathBuf {
    env.latest()
}

#[test]
fn a_broken_annotator_fails_the_run_without_committing() {
    let env = setup(100);
    let ran = run(
        &env,
        "staging",
        "records.jsonl",
        &[],
        Some("annotate.record=return(*)"),
    );
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(ran.stderr.contains("failed to annotate"), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("nothing was committed"),
        "{}",
        ran.stderr
    );
    assert!(!env.path("staging/LATEST").exists());
    assert_eq!(
        std::fs::read_dir(env.path("staging/runs")).unwrap().count(),
        0
    );
    // A few failures under the share pass.
    let ran = run(
        &env,
        "ok",
        "records.jsonl",
        &[],
        Some("annotate.record=return(g-00000010,g-00000020)"),
    )
    .ok();
    assert!(
        ran.stdout.contains("2 records failed to annotate"),
        "{}",
        ran.stdout
    );
}

// The seed's tool transient retry is "default 1, hard max 2"; the code
// retried twice by default and the receipt said `attempts: 1` whatever
// happened. Now one retry by default, two when the operator asks, never
// more, and `attempts` counts what the run did.
#[test]
fn transient_io_retries_follow_the_seed_and_the_receipt_counts_attempts() {
    let env = setup(50);
    run(&env, "none", "records.jsonl", &[], None).ok();
    let r = env_receipt(&env.path("none"));
    assert_eq!(r["attempts"], 1, "{r:#}");
    assert_eq!(r["retries_used"], 0);
    assert_eq!(r["retry_policy"]["tool_transient_retries"], 1);
    assert_eq!(r["retry_policy"]["default_retries"], 1);
    assert_eq!(r["retry_policy"]["hard_max_retries"], 2);
    // One transient error: retried once, two attempts, counted.
    run(
        &env,
        "a",
        "records.jsonl",
        &[],
        Some("io.read_input=1*return"),
    )
    .ok();
    let r = env_receipt(&env.path("a"));
    assert_eq!(r["retries_used"], 1);
    assert_eq!(r["attempts"], 2, "{r:#}");
    assert_eq!(r["attempts_by_operation"]["read_input"], 2, "{r:#}");
    // Two in a row: over the default budget, the run fails naming the file.
    let failed = run(
        &env,
        "b",
        "records.jsonl",
        &[],
        Some("io.read_input=2*return"),
    );
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    assert!(
        failed.stderr.contains("after 1 retry") && failed.stderr.contains("records.jsonl"),
        "{}",
        failed.stderr
    );
    assert!(!env.path("b/LATEST").exists());
    // The operator may allow the seed's hard maximum, two retries, and no more.
    run(
        &env,
        "b",
        "records.jsonl",
        &["--transient-retries", "2"],
        Some("io.read_input=2*return"),
    )
    .ok();
    let r = env_receipt(&env.path("b"));
    assert_eq!(r["retries_used"], 2);
    assert_eq!(r["attempts"], 3);
    assert_eq!(r["retry_policy"]["tool_transient_retries"], 2);
    let over = run(
        &env,
        "x",
        "records.jsonl",
        &["--transient-retries", "3"],
        None,
    );
    assert_eq!(over.code, 2, "{}", over.stderr);
    assert!(
        over.stderr.contains("--transient-retries 3") && over.stderr.contains("hard maximum of 2"),
        "{}",
        over.stderr
    );
    assert!(!env.path("x").exists());
    // Retries of the commit come after the receipt is written.
    run(
        &env,
        "c",
        "records.jsonl",
        &[],
        Some("io.rename_run=1*return;io.replace_state=1*return"),
    )
    .ok();
    assert_eq!(
        env_receipt(&env.path("c"))["retries_used"],
        0,
        "counted before the commit"
    );
    assert_eq!(outcome(&env.path("c")).rows, outcome(&env.path("a")).rows);
}

// The code, the contract and the README give the same retry numbers.
#[test]
fn retry_numbers_agree_in_code_contract_and_readme() {
    use tomlite_staging::retry::{DEFAULT_RETRIES, MAX_RETRIES};
    assert_eq!((DEFAULT_RETRIES, MAX_RETRIES), (1, 2), "the seed's numbers");
    let text = std::fs::read_to_string(repo().join("contracts/tomlite-annotator.yaml")).unwrap();
    let contract: Value = serde_saphyr::from_str(&text).unwrap();
    let t = &contract["retry_policy"]["tool_transient"];
    assert_eq!(t["default_retries"], DEFAULT_RETRIES, "{t}");
    assert_eq!(t["hard_max_retries"], MAX_RETRIES, "{t}");
    assert_eq!(t["default_max_attempts"], 1 + DEFAULT_RETRIES, "{t}");
    assert_eq!(t["absolute_max_attempts"], 1 + MAX_RETRIES, "{t}");
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.contains("retried once by default")
            && readme.contains("`--transient-retries 2`")
            && readme.contains("default 1, hard max 2"),
        "README's retry numbers"
    );
}

#[test]
fn heartbeats_progress_lines_and_quiet() {
    let env = setup(200);
    let ran = run(
        &env,
        "staging",
        "records.jsonl",
        &["--batch-size", "10", "--heartbeat-seconds", "0.3"],
        Some("annotate.batch=sleep(120)"),
    )
    .ok();
    let events = std::fs::read_to_string(env.latest().join("events.jsonl")).unwrap();
    let beats: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["phase"] == "heartbeat")
        .collect();
    assert!(beats.len() >= 3, "{events}");
    for b in &beats {
        for k in [
            "subagent_run_id",
            "current_artifact",
            "command_or_api",
            "next_step",
            "last_started_step",
        ] {
            assert!(!b[k].is_null(), "{k} in {b}");
        }
        assert!(b["evidence"]["counts"]["records_in"].is_u64(), "{b}");
    }
    let seen: Vec<u64> = beats
        .iter()
        .map(|b| b["evidence"]["counts"]["records_in"].as_u64().unwrap())
        .collect();
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]) && seen.last() > seen.first(),
        "{seen:?}"
    );
    // stderr is not a terminal here: plain progress lines with rate and ETA.
    let line = ran
        .stderr
        .lines()
        .find(|l| l.starts_with("tomlite: progress: "))
        .unwrap_or_else(|| panic!("{}", ran.stderr));
    assert!(
        line.contains("/200 records") && line.contains("records/s") && line.contains("ETA"),
        "{line}"
    );
    let quiet = run(
        &env,
        "q",
        "records.jsonl",
        &[
            "--quiet",
            "--batch-size",
            "10",
            "--heartbeat-seconds",
            "0.3",
        ],
        Some("annotate.batch=sleep(120)"),
    )
    .ok();
    assert_eq!(quiet.stdout, "");
    assert_eq!(quiet.stderr, "");
    // On a terminal (util-linux `script` gives the run a pty): a bar redrawn in place.
    let bin = env!("CARGO_BIN_EXE_tomlite");
    let line = format!(
        "{bin} run --input records.jsonl --annotations annotations.jsonl --staging tty --batch-size 10 >/dev/null"
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(env.dir.path())
        .env("FAILPOINTS", "annotate.batch=sleep(50)")
        .output()
        .expect("util-linux script");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{tty}");
    assert!(
        tty.contains("\r[") && tty.contains("/200 records") && tty.contains("ETA"),
        "{tty:?}"
    );
    assert!(
        tty.contains("[########################] 200/200 records"),
        "{tty:?}"
    );
}

#[test]
fn the_cron_wrapper_logs_to_a_dated_file_and_passes_exit_codes_through() {
    let env = setup(50);
    let nightly = |extra: &[&str]| {
        let out = Command::new(repo().join("scripts/nightly"))
            .current_dir(env.dir.path())
            .env("TOMLITE_BIN", env!("CARGO_BIN_EXE_tomlite"))
            .env("TOMLITE_LOG_DIR", env.path("logs"))
            .env_remove("FAILPOINTS")
            .args([
                "--input",
                "records.jsonl",
                "--annotations",
                "annotations.jsonl",
                "--staging",
                "staging",
            ])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let log = env.path("logs").join(format!(
        "tomlite-{}.log",
        chrono::Local::now().format("%Y-%m-%d")
    ));
    let (code, stdout) = nightly(&[]);
    assert_eq!(code, 0);
    assert_eq!(stdout, "", "cron mails only what the wrapper prints");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("start:") && text.contains("exit 0: committed"),
        "{text}"
    );
    // Locked: exit 3, logged, nothing done.
    let lock = tomlite_staging::StagingLock::acquire(&env.path("staging")).unwrap();
    let latest = std::fs::read_to_string(env.path("staging/LATEST")).unwrap();
    let (code, _) = nightly(&[]);
    assert_eq!(code, 3);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("exit 3: locked")
    );
    assert_eq!(
        std::fs::read_to_string(env.path("staging/LATEST")).unwrap(),
        latest
    );
    drop(lock);
    // Partial and config errors pass through too.
    let (code, _) = nightly(&["--max-seconds", "0"]);
    assert_eq!(code, 4);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("exit 4: partial")
    );
    let (code, _) = nightly(&["--shard", "3/2"]);
    assert_eq!(code, 2);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("need 0 <= K < N") && text.contains("exit 2: configuration"),
        "{text}"
    );
}

fn merge(env: &Env, runs: &[PathBuf]) -> Ran {
    let mut c = bin();
    c.current_dir(env.dir.path())
        .args(["merge", "--staging", "merged", "--nodes", "nodes.jsonl"])
        .args(runs);
    let o = c.output().unwrap();
    Ran {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn latest_run(root: &Path) -> PathBuf {
    let id = std::fs::read_to_string(root.join("LATEST")).unwrap();
    root.join("runs").join(id.trim())
}

#[test]
fn shards_merged_equal_a_single_run_row_for_row() {
    let env = setup(400);
    run(&env, "single", "records.jsonl", &[], None).ok();
    let single = outcome(&env.path("single"));
    let shard = |k: u32, staging: &str, faults: Option<&str>| {
        run(
            &env,
            staging,
            "records.jsonl",
            &["--shard", &format!("{k}/3")],
            faults,
        )
    };
    shard(0, "s0", None).ok();
    shard(1, "s1", None).ok();
    // Shard 1 run twice (a retried pod on a fresh volume).
    shard(1, "s1b", None).ok();
    // Shard 2 killed at its commit, then run again: it recovers.
    let killed = shard(2, "s2", Some("commit.before_run_rename=return"));
    assert_ne!(killed.code, 0);
    shard(2, "s2", None).ok();
    let runs: Vec<PathBuf> = ["s0", "s1", "s1b", "s2"]
        .iter()
        .map(|s| latest_run(&env.path(s)))
        .collect();
    for (i, s) in ["s0", "s1", "s2"].iter().enumerate() {
        let r = env_receipt(&env.path(s));
        assert_eq!(r["shard"]["index"], i);
        assert!(
            r["counts"]["processed"].as_u64().unwrap() > 0,
            "shard {i} is empty: {r}"
        );
    }
    let refused = merge(&env, &runs);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("shard 1 given twice"),
        "{}",
        refused.stderr
    );
    let refused = merge(&env, &[runs[0].clone(), runs[3].clone()]);
    assert!(
        refused.stderr.contains("shard(s) 1 of 3 missing"),
        "{}",
        refused.stderr
    );
    // A shard that ran on other input.
    let mut other = std::fs::read_to_string(env.path("records.jsonl")).unwrap();
    other.push_str(&record("extra-1", "One more line.").to_string());
    other.push('\n');
    env.write("other.jsonl", other);
    run(&env, "s1x", "other.jsonl", &["--shard", "1/3"], None).ok();
    let refused = merge(
        &env,
        &[
            runs[0].clone(),
            latest_run(&env.path("s1x")),
            runs[3].clone(),
        ],
    );
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("ran on other inputs (sha256)"),
        "{}",
        refused.stderr
    );
    assert!(
        !env.path("merged/LATEST").exists(),
        "a refused merge writes nothing"
    );
    let merged = merge(&env, &[runs[3].clone(), runs[0].clone(), runs[1].clone()]).ok();
    assert!(merged.stdout.contains("committed"), "{}", merged.stdout);
    let got = outcome(&env.path("merged"));
    assert_eq!(got.rows, single.rows);
    assert_eq!(got.rejects, single.rejects);
    assert_eq!(got.processed, single.processed);
    assert_eq!(got.state_records, single.state_records);
    let (m, s) = (
        env_receipt(&env.path("merged")),
        env_receipt(&env.path("single")),
    );
    let mut mc = m["counts"].as_object().unwrap().clone();
    mc.remove("other_shards");
    let mut sc = s["counts"].as_object().unwrap().clone();
    sc.remove("other_shards");
    assert_eq!(mc, sc);
    assert_eq!(m["reasons"], s["reasons"]);
    assert_eq!(m["merged_from"].as_array().unwrap().len(), 3);
    let dir = latest_run(&env.path("merged"));
    for t in RECORD_TABLES {
        for row in read_table(&dir.join(format!("{t}.parquet"))) {
            assert_eq!(row["run_id"], m["run_id"]);
        }
    }
    assert!(dir.join("report.html").is_file());
    assert_eq!(m["counts"]["other_shards"], 0);
    let again = merge(&env, &[runs[3].clone(), runs[0].clone(), runs[1].clone()]);
    assert_eq!(again.code, 2);
    assert!(
        again.stderr.contains("was already merged into merged"),
        "{}",
        again.stderr
    );
    // A shard rerun in its own directory after it committed holds only what
    // was left: merged alone it would lose the first run's rows, so refused.
    let killed = shard(0, "t0", Some("commit.after_run_rename=return"));
    assert_ne!(killed.code, 0);
    shard(0, "t0", None).ok();
    let refused = merge(
        &env,
        &[
            latest_run(&env.path("t0")),
            runs[1].clone(),
            runs[3].clone(),
        ],
    );
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("merging") && refused.stderr.contains("alone would lose them"),
        "{}",
        refused.stderr
    );
}

#[test]
fn the_cluster_manifests_are_indexed_jobs_and_job_arrays() {
    let load = |p: &str| -> Value {
        serde_saphyr::from_str(&std::fs::read_to_string(repo().join(p)).unwrap()).unwrap()
    };
    let job = load("scripts/k8s/shards-job.yaml");
    assert_eq!(job["kind"], "Job");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    assert!(job["spec"]["backoffLimitPerIndex"].as_u64().is_some());
    assert_eq!(job["spec"]["completions"], job["spec"]["parallelism"]);
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    let args = c["args"][0].as_str().unwrap();
    assert!(
        args.contains("--shard \"${JOB_COMPLETION_INDEX}/${SHARDS}\""),
        "{args}"
    );
    assert!(args.contains("shard-${JOB_COMPLETION_INDEX}"), "{args}");
    assert_eq!(
        c["env"][0]["value"].as_str().unwrap(),
        job["spec"]["completions"].to_string()
    );
    let merge = load("scripts/k8s/merge-job.yaml");
    assert!(
        merge["spec"]["template"]["spec"]["containers"][0]["args"][0]
            .as_str()
            .unwrap()
            .contains("tomlite merge --staging")
    );
    let sbatch = std::fs::read_to_string(repo().join("scripts/slurm/night.sbatch")).unwrap();
    assert!(
        sbatch.contains("#SBATCH --array=") && sbatch.contains("--shard \"${SLURM_ARRAY_TASK_ID}/")
    );
    let submit = std::fs::read_to_string(repo().join("scripts/slurm/submit")).unwrap();
    assert!(
        submit.contains("--dependency=\"afterok:${array}\"") && submit.contains("tomlite merge")
    );
}

fn merge_into(env: &Env, staging: &str, runs: &[PathBuf]) -> Ran {
    let o = bin()
        .current_dir(env.dir.path())
        .args(["merge", "--staging", staging, "--nodes", "nodes.jsonl"])
        .args(runs)
        .output()
        .unwrap();
    Ran {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The names under `<root>/runs` and the state's runs.
fn listing(root: &Path) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<String> = std::fs::read_dir(root.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let state = State::load(&root.join("state")).unwrap();
    (names, state.runs().to_vec())
}

// `tomlite merge` into a shard's own staging dir was accepted, and then every
// later night's merge of that shard was refused.
#[test]
fn merge_into_a_shard_staging_dir_is_refused_and_merges_go_on_night_after_night() {
    let env = setup(80);
    for (night, input) in ["night-1.jsonl", "records.jsonl"].iter().enumerate() {
        for k in 0..2 {
            run(
                &env,
                &format!("s{k}"),
                input,
                &["--shard", &format!("{k}/2")],
                None,
            )
            .ok();
        }
        let runs = [latest_run(&env.path("s0")), latest_run(&env.path("s1"))];
        for (k, own) in ["s0", "s1"].iter().enumerate() {
            let before = listing(&env.path(own));
            let refused = merge_into(&env, own, &runs);
            assert_eq!(refused.code, 2, "night {night}: {}", refused.stderr);
            assert!(
                refused
                    .stderr
                    .contains(&format!("is the staging directory of shard {k}")),
                "{}",
                refused.stderr
            );
            assert_eq!(
                listing(&env.path(own)),
                before,
                "a refused merge writes nothing"
            );
        }
        // Through another spelling of the same directory.
        let refused = merge_into(&env, "./s1/../s0", &runs);
        assert_eq!(refused.code, 2, "{}", refused.stderr);
        let merged = merge_into(&env, "merged", &runs);
        assert_eq!(merged.code, 0, "night {night}: {}", merged.stderr);
    }
    assert_eq!(listing(&env.path("merged")).1.len(), 2);
    // The merged runs' receipts are sealed like a run's.
    let verified = env.cmd("verify", &["--staging", "merged"]).ok();
    assert_eq!(
        verified.stdout.matches("(9 files)").count(),
        2,
        "{}",
        verified.stdout
    );
    // A staging directory that holds another night's shard run is a shard's too.
    run(&env, "x0", "night-1.jsonl", &["--shard", "0/2"], None).ok();
    let runs = [latest_run(&env.path("s0")), latest_run(&env.path("s1"))];
    let refused = merge_into(&env, "x0", &runs);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("x0 holds shard run") && refused.stderr.contains("(shard 0/2)"),
        "{}",
        refused.stderr
    );
}

// A shard whose quarantine.parquet was replaced by another valid table
// was merged: items appeared twice, the shard's own were lost, and the
// merged run passed verify.
#[test]
fn merge_refuses_a_shard_whose_table_differs_from_its_sealed_receipt() {
    let env = setup(80);
    for k in 0..2 {
        run(
            &env,
            &format!("s{k}"),
            "records.jsonl",
            &["--shard", &format!("{k}/2")],
            None,
        )
        .ok();
    }
    let runs = [latest_run(&env.path("s0")), latest_run(&env.path("s1"))];
    std::fs::copy(
        runs[0].join("quarantine.parquet"),
        runs[1].join("quarantine.parquet"),
    )
    .unwrap();
    let refused = merge_into(&env, "merged", &runs);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("shard 1 run")
            && refused.stderr.contains("does not match its sealed receipt")
            && refused.stderr.contains("quarantine.parquet"),
        "{}",
        refused.stderr
    );
    assert!(!env.path("merged/runs").exists() || listing(&env.path("merged")).1.is_empty());
}

// A killed run lost its events.jsonl at the next recovery, and nothing
// went to failed/: the stream that says how far it got was removed with
// its temporary directory.
#[test]
fn recovery_keeps_a_killed_runs_events_in_failed() {
    let env = setup(60);
    run(&env, "s", "night-1.jsonl", &[], None).ok();
    let point = "commit.before_run_rename";
    let killed = run(
        &env,
        "s",
        "records.jsonl",
        &[],
        Some(&format!("{point}=return")),
    );
    assert_ne!(killed.code, 0, "{}", killed.stderr);
    let tmp: Vec<String> = std::fs::read_dir(env.path("s/runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert_eq!(tmp.len(), 1, "{tmp:?}");
    let run_id = tmp[0].trim_start_matches(".tmp-").to_string();
    let events_before =
        std::fs::read_to_string(env.path("s/runs").join(&tmp[0]).join("events.jsonl")).unwrap();
    run(&env, "s", "records.jsonl", &[], None).ok();
    let kept = env.path("s/failed").join(&run_id);
    assert_eq!(
        std::fs::read_to_string(kept.join("events.jsonl")).unwrap(),
        events_before
    );
    let receipt: Value =
        serde_json::from_slice(&std::fs::read(kept.join("receipt.json")).unwrap()).unwrap();
    assert_eq!(receipt["status"], "killed");
    assert_eq!(receipt["run_id"], run_id.as_str());
    let recovered = env_receipt(&env.path("s"))["recovered"].to_string();
    assert!(
        recovered.contains("kept the killed run's events in"),
        "{recovered}"
    );
}

// On a full disk, failed/<id>/receipt.json was written as 0 bytes. The
// small receipt is written first; a full one that cannot be written
// leaves it, whole.
#[test]
fn a_failure_receipt_that_cannot_be_written_whole_leaves_the_small_one() {
    let env = setup(20);
    run(&env, "s", "night-1.jsonl", &[], None).ok();
    // The state lost: the next run is blocked and records it in failed/.
    std::fs::remove_file(env.path("s/state/records.parquet")).unwrap();
    let blocked = run(
        &env,
        "s",
        "records.jsonl",
        &[],
        Some("failed.full_receipt=return"),
    );
    assert_eq!(blocked.code, 1, "{}", blocked.stderr);
    let failed: Vec<_> = std::fs::read_dir(env.path("s/failed"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let names: Vec<String> = std::fs::read_dir(&failed[0])
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    let receipt: Value =
        serde_json::from_slice(&std::fs::read(failed[0].join("receipt.json")).unwrap()).unwrap();
    assert_eq!(receipt["status"], "blocked");
    assert_eq!(receipt["exit_code"], 1);
    assert!(receipt["error"].as_str().unwrap().contains("does not list"));
}
