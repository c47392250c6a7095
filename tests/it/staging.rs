//! Staging: incremental reruns, --full, the lock, recovery from a killed run.

use std::fs::OpenOptions;
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

/// `run_std` with `FAILPOINTS` set.
#[cfg(feature = "failpoints")]
fn run_faulty(env: &Env, faults: &str) -> Ran {
    let o = bin()
        .current_dir(env.dir.path())
        .args(["run", "--input", "records.jsonl"])
        .args(["--annotations", "annotations.jsonl", "--staging", "staging"])
        .env("FAILPOINTS", faults)
        .output()
        .unwrap();
    Ran {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Entries of `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(feature = "failpoints")]
#[test]
fn leftovers_of_a_killed_run_are_removed_and_its_records_redone_once() {
    let env = setup();
    env.run_std(&[]).ok();
    let committed = env.latest();
    let runs = env.staging().join("runs");
    // A run killed while writing: its temporary directory holds the marker.
    let killed = run_faulty(&env, "staged.receipt=return");
    assert_ne!(killed.code, 0, "{}", killed.stderr);
    let tmp: Vec<String> = names(&runs)
        .into_iter()
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert_eq!(tmp.len(), 1, "{:?}", names(&runs));
    assert!(runs.join(&tmp[0]).join(".tomlite-run").is_file());
    std::fs::write(env.staging().join("state/records.parquet.tmp"), b"partial").unwrap();
    std::fs::write(env.staging().join("LATEST.tmp"), b"partial").unwrap();
    let ran = env.run_std(&[]).ok();
    assert!(ran.stdout.contains("removed 3 leftovers"), "{}", ran.stdout);
    assert!(!runs.join(&tmp[0]).exists());
    assert!(!env.staging().join("LATEST.tmp").exists());
    assert!(committed.exists());
    let receipt = env.receipt();
    assert_eq!(receipt["counts"]["skipped_unchanged"], 2);
    // The three leftovers, and the killed run's events kept in failed/.
    let recovered = receipt["recovered"].as_array().unwrap();
    assert_eq!(recovered.len(), 4, "{recovered:?}");
    assert!(
        recovered[3]
            .as_str()
            .unwrap()
            .starts_with("kept the killed run's events in"),
        "{recovered:?}"
    );
    assert!(ran.stdout.contains("kept the killed run's events in"));
}

// Recovery used to remove every entry of runs/ it could not place: a
// plain file failed every later run ("Not a directory"), a folder of
// someone else's and a `.tmp-*` this program did not write were deleted.
#[test]
fn recovery_leaves_alone_what_it_did_not_write() {
    let env = setup();
    env.run_std(&[]).ok();
    let first = env.latest();
    let runs = env.staging().join("runs");
    std::fs::write(runs.join("README.txt"), b"what these runs are\n").unwrap();
    std::fs::create_dir_all(runs.join("exp/a")).unwrap();
    std::fs::write(runs.join("exp/a/notes.txt"), b"mine").unwrap();
    std::fs::create_dir_all(runs.join(".tmp-keep")).unwrap();
    std::fs::write(runs.join(".tmp-keep/data.bin"), b"not tomlite's").unwrap();
    // A `.tmp-*` link to a folder that even holds a marker: never followed.
    let outside = env.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join(".tomlite-run"), b"tomlite run directory x\n").unwrap();
    std::fs::write(outside.join("precious.txt"), b"keep").unwrap();
    std::os::unix::fs::symlink(&outside, runs.join(".tmp-x")).unwrap();
    for night in 0..2 {
        let ran = env.run_std(&[]).ok();
        assert!(
            ran.stderr.contains("warning: recovery left alone")
                && ran.stderr.contains("README.txt"),
            "night {night}: {}",
            ran.stderr
        );
        assert!(
            ran.stdout.contains("left alone  4 entries"),
            "{}",
            ran.stdout
        );
        let receipt = env.receipt();
        let recovered: Vec<&str> = receipt["recovered"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(recovered.len(), 4, "{recovered:?}");
        assert!(
            recovered.iter().all(|l| l.starts_with("left alone")),
            "{recovered:?}"
        );
        assert!(
            recovered
                .iter()
                .any(|l| l.contains(".tmp-x: a symbolic link (never followed)")),
            "{recovered:?}"
        );
        let events = read_jsonl(&env.latest().join("events.jsonl"));
        assert!(
            events[0]["bug_or_blocker"]
                .as_str()
                .is_some_and(|b| b.contains("exp")),
            "{}",
            events[0]
        );
    }
    assert_eq!(
        std::fs::read(runs.join("README.txt")).unwrap(),
        b"what these runs are\n"
    );
    assert_eq!(
        std::fs::read(runs.join("exp/a/notes.txt")).unwrap(),
        b"mine"
    );
    assert!(runs.join(".tmp-keep/data.bin").is_file());
    assert_eq!(
        std::fs::read(outside.join("precious.txt")).unwrap(),
        b"keep"
    );
    assert!(
        std::fs::symlink_metadata(runs.join(".tmp-x"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(first.is_dir());
}

// A lost state file, or one restored from an older backup, made recovery
// delete the committed runs it did not list (exit 0).
#[test]
fn a_lost_or_older_state_stops_the_run_instead_of_deleting_committed_runs() {
    let env = setup();
    env.run_std(&[]).ok();
    let first = env.latest();
    let state = env.staging().join("state/records.parquet");
    let backup = std::fs::read(&state).unwrap();
    env.write(
        "records.jsonl",
        format!("{}\n", record("r3", "Another line.")),
    );
    env.run_std(&[]).ok();
    let second = env.latest();
    assert_ne!(first, second);
    let runs_before = names(&env.staging().join("runs"));
    // Restored from last night's backup.
    std::fs::write(&state, &backup).unwrap();
    let ran = env.run_std(&[]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let second_id = second.file_name().unwrap().to_str().unwrap();
    assert!(
        ran.stderr
            .contains(&format!("does not list the committed run(s) {second_id}"))
            && ran.stderr.contains("Restore the state file"),
        "{}",
        ran.stderr
    );
    assert_eq!(names(&env.staging().join("runs")), runs_before);
    assert_eq!(std::fs::read(&state).unwrap(), backup);
    // Lost altogether: both runs are named, none is deleted.
    std::fs::remove_file(&state).unwrap();
    let ran = env.run_std(&[]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let first_id = first.file_name().unwrap().to_str().unwrap();
    assert!(
        ran.stderr.contains(first_id) && ran.stderr.contains(second_id),
        "{}",
        ran.stderr
    );
    assert_eq!(names(&env.staging().join("runs")), runs_before);
    assert!(first.join("receipt.json").is_file() && second.join("receipt.json").is_file());
    // Each refusal left its record.
    let failed = names(&env.staging().join("failed"));
    assert_eq!(failed.len(), 2, "{failed:?}");
    let receipt: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            env.staging()
                .join("failed")
                .join(&failed[1])
                .join("receipt.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["status"], "blocked");
    assert_eq!(receipt["phase"], "recover");
    assert_eq!(receipt["exit_code"], 1);
}

// A `.lock` or `LATEST.tmp` planted as a link made tomlite truncate and
// write the file it points to.
#[test]
fn no_file_in_staging_is_written_through_a_link() {
    let env = setup();
    let victim = env.write("victim.txt", "precious\n");
    std::fs::create_dir_all(env.staging()).unwrap();
    let lock = env.staging().join(".lock");
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    let ran = env.run_std(&[]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains(".lock") && ran.stderr.contains("symbolic link"),
        "{}",
        ran.stderr
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
    std::fs::remove_file(&lock).unwrap();
    env.run_std(&[]).ok();
    let latest_tmp = env.staging().join("LATEST.tmp");
    std::os::unix::fs::symlink(&victim, &latest_tmp).unwrap();
    env.write("records.jsonl", format!("{}\n", record("r9", "New words.")));
    let before = std::fs::read_to_string(env.staging().join("LATEST")).unwrap();
    let ran = env.run_std(&[]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("LATEST.tmp") && ran.stderr.contains("symbolic link"),
        "{}",
        ran.stderr
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
    assert_eq!(
        std::fs::read_to_string(env.staging().join("LATEST")).unwrap(),
        before
    );
    assert!(
        std::fs::symlink_metadata(&latest_tmp)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A dangling link is refused the same way (O_CREAT would follow it).
    std::fs::remove_file(&latest_tmp).unwrap();
    let gone = env.path("would-be-created.txt");
    std::os::unix::fs::symlink(&gone, &latest_tmp).unwrap();
    assert_eq!(env.run_std(&[]).code, 1);
    assert!(!gone.exists());
}

/// The one folder under `<staging>/failed/`, its receipt and its events.
fn only_failed(
    env: &Env,
) -> (
    std::path::PathBuf,
    serde_json::Value,
    Vec<serde_json::Value>,
) {
    let failed = env.staging().join("failed");
    let dirs = names(&failed);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = failed.join(&dirs[0]);
    let receipt =
        serde_json::from_slice(&std::fs::read(dir.join("receipt.json")).unwrap()).unwrap();
    let events = read_jsonl(&dir.join("events.jsonl"));
    (dir, receipt, events)
}

// A failed run deleted its events.jsonl with its temporary directory, and
// no event ever set bug_or_blocker.
#[cfg(feature = "failpoints")]
#[test]
fn a_failed_run_keeps_its_events_and_a_failure_receipt() {
    let env = setup();
    let ran = run_faulty(&env, "io.read_input=3*return");
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(names(&env.staging().join("runs")).is_empty());
    assert!(!env.staging().join("LATEST").exists());
    let (dir, receipt, events) = only_failed(&env);
    assert!(dir.is_absolute());
    let phases: Vec<&str> = events
        .iter()
        .map(|e| e["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["start", "before_blocked_or_final_response"]);
    let last = events.last().unwrap();
    let blocker = last["bug_or_blocker"].as_str().unwrap();
    assert!(
        blocker.contains("after 1 retry") && blocker.contains("records.jsonl"),
        "{blocker}"
    );
    assert_eq!(last["evidence"]["status_code"], 1);
    for e in &events {
        let artifact = e["current_artifact"].as_str().unwrap();
        assert!(artifact.starts_with('/'), "{e}");
        assert_eq!(
            e["timeout_diagnostics"]["stale_after_seconds"], 120.0,
            "{e}"
        );
    }
    assert_eq!(receipt["status"], "failed");
    assert_eq!(receipt["exit_code"], 1);
    assert_eq!(receipt["bug_or_blocker"], blocker);
    assert!(
        receipt["phase"].as_str().unwrap().starts_with("read "),
        "{receipt}"
    );
    assert!(receipt["events"].as_str().unwrap().starts_with('/'));
    assert_eq!(receipt["left_untouched"]["latest"], serde_json::Value::Null);
    assert!(
        receipt["left_untouched"]["note"]
            .as_str()
            .unwrap()
            .contains("nothing was committed")
    );
    let diag = &receipt["timeout_diagnostics"];
    assert_eq!(diag["stale_after_seconds"], 120.0);
    assert_eq!(diag["heartbeat_interval_seconds"], 30.0);
    assert!(
        diag["last_started_command"]
            .as_str()
            .unwrap()
            .starts_with("read ")
    );
    assert!(
        diag["current_artifact_path"]
            .as_str()
            .unwrap()
            .ends_with("records.jsonl")
    );
    // The next run is not disturbed by the record and commits.
    env.run_std(&[]).ok();
    let events = read_jsonl(&env.latest().join("events.jsonl"));
    let last = events.last().unwrap();
    assert_eq!(last["phase"], "before_blocked_or_final_response");
    assert_eq!(last["evidence"]["status_code"], 0);
    assert!(last["bug_or_blocker"].is_null());
}

// A run that failed after its commit point left no status record either.
#[cfg(feature = "failpoints")]
#[test]
fn a_run_that_fails_after_its_commit_point_is_recorded_as_unfinished() {
    let env = setup();
    let ran = run_faulty(&env, "io.replace_state=3*return");
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("the next run's recovery completes it"),
        "{}",
        ran.stderr
    );
    let failed = env.staging().join("failed");
    let dirs = names(&failed);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = failed.join(&dirs[0]);
    let receipt: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("receipt.json")).unwrap()).unwrap();
    assert_eq!(receipt["status"], "unfinished");
    // The stream stays with the published run and ends with the blocker.
    let published = env.staging().join("runs").join(dir.file_name().unwrap());
    let events = read_jsonl(&published.join("events.jsonl"));
    let last = events.last().unwrap();
    assert_eq!(last["phase"], "before_blocked_or_final_response");
    assert!(
        last["bug_or_blocker"]
            .as_str()
            .unwrap()
            .contains("unfinished"),
        "{last}"
    );
    assert_eq!(
        receipt["events"].as_str().unwrap(),
        std::path::absolute(published.join("events.jsonl"))
            .unwrap()
            .to_str()
            .unwrap()
    );
    // The next run completes the commit.
    let ran = env.run_std(&[]).ok();
    assert!(ran.stdout.contains("2 skipped"), "{}", ran.stdout);
}

// Exits 2 (configuration) and 3 (locked) wrote no event at all.
#[test]
fn blocked_runs_leave_a_status_record_too() {
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
    let (dir, receipt, events) = only_failed(&env);
    assert_eq!(receipt["status"], "blocked");
    assert_eq!(receipt["exit_code"], 3);
    assert_eq!(receipt["phase"], "lock");
    assert!(
        receipt["error"].as_str().unwrap().contains("pid 4242"),
        "{receipt}"
    );
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["phase"], "before_blocked_or_final_response");
    assert_eq!(events[0]["evidence"]["status_code"], 3);
    assert!(
        events[0]["bug_or_blocker"]
            .as_str()
            .unwrap()
            .contains("locked by pid 4242")
    );
    drop(holder);
    std::fs::remove_dir_all(&dir).unwrap();
    // A configuration error, with the staging directory there.
    let ran = env.run_std(&["--nodes", "missing-nodes.jsonl"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    let (_, receipt, events) = only_failed(&env);
    assert_eq!(receipt["status"], "blocked");
    assert_eq!(receipt["exit_code"], 2);
    assert!(
        receipt["error"]
            .as_str()
            .unwrap()
            .contains("missing-nodes.jsonl"),
        "{receipt}"
    );
    assert_eq!(events[0]["evidence"]["status_code"], 2);
    // No staging directory is created for a usage error.
    let ran = env.run(&[
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "typo",
        "--nodes",
        "missing.jsonl",
    ]);
    assert_eq!(ran.code, 2);
    assert!(!env.path("typo").exists());
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
        "sensitive.parquet",
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
    assert_eq!(
        phases,
        [
            "start",
            "before_tool_or_api_call",
            "after_tool_or_api_call",
            "input_done",
            "commit",
            "committed",
            "before_blocked_or_final_response"
        ]
    );
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
