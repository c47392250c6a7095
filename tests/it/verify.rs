//! Sealed receipts: `receipt.json` lists every file of its run with size and
//! sha256; `tomlite verify RUN_DIR` and `tomlite verify --staging DIR`
//! re-check them (and the state's list of runs), exit 0 or 1.

use serde_json::Value;

use crate::common::*;

fn verify(env: &Env, args: &[&str]) -> Ran {
    env.cmd("verify", args)
}

fn sample(env: &Env) {
    let annotations = repo().join("data/sample/annotations.jsonl");
    env.run_sample(&["--annotations", annotations.to_str().unwrap()])
        .ok();
}

// Nothing let a reader check a committed run: a changed, deleted or added
// file in a run directory went unnoticed.
#[test]
fn verify_names_a_tampered_deleted_or_unlisted_file_of_a_sealed_run() {
    let env = Env::new();
    sample(&env);
    let dir = env.latest();
    let receipt = env.receipt();
    let files = receipt["files"].as_array().expect("a files list");
    let mut names: Vec<&str> = files.iter().map(|f| f["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".tomlite-run",
            "abstained.parquet",
            "promoted_edges.parquet",
            "promoted_tags.parquet",
            "quarantine.parquet",
            "rejects.parquet",
            "report.html",
            "report.md",
            "sensitive.parquet"
        ]
    );
    for f in files {
        let bytes = std::fs::read(dir.join(f["name"].as_str().unwrap())).unwrap();
        assert_eq!(f["bytes"], bytes.len() as u64);
        assert_eq!(f["sha256"].as_str().unwrap().len(), 64);
    }
    let run_dir = dir.to_str().unwrap().to_string();
    let ok = verify(&env, &[&run_dir]).ok();
    assert!(ok.stdout.contains("(9 files)"), "{}", ok.stdout);
    verify(&env, &["--staging", "staging"]).ok();

    // One byte changed, same size.
    let tags = dir.join("promoted_tags.parquet");
    let original = std::fs::read(&tags).unwrap();
    let mut bytes = original.clone();
    bytes[100] ^= 0xff;
    std::fs::write(&tags, &bytes).unwrap();
    for args in [vec![run_dir.as_str()], vec!["--staging", "staging"]] {
        let bad = verify(&env, &args);
        assert_eq!(bad.code, 1, "{}{}", bad.stdout, bad.stderr);
        assert!(
            bad.stdout
                .contains("promoted_tags.parquet: content differs: the receipt says sha256"),
            "{}",
            bad.stdout
        );
    }
    // Truncated.
    std::fs::write(&tags, &original[..original.len() - 1]).unwrap();
    let bad = verify(&env, &[&run_dir]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stdout.contains(&format!(
            "promoted_tags.parquet: size differs: the receipt says {} bytes, the file has {}",
            original.len(),
            original.len() - 1
        )),
        "{}",
        bad.stdout
    );
    std::fs::write(&tags, &original).unwrap();
    verify(&env, &[&run_dir]).ok();

    // Deleted.
    let rejects = std::fs::read(dir.join("rejects.parquet")).unwrap();
    std::fs::remove_file(dir.join("rejects.parquet")).unwrap();
    let bad = verify(&env, &[&run_dir]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stdout
            .contains("rejects.parquet: missing (the receipt lists it)"),
        "{}",
        bad.stdout
    );
    std::fs::write(dir.join("rejects.parquet"), rejects).unwrap();

    // Added, unlisted.
    std::fs::write(dir.join("extra.parquet"), "PAR1").unwrap();
    let bad = verify(&env, &[&run_dir, "--json"]);
    assert_eq!(bad.code, 1);
    let v: Value = serde_json::from_str(&bad.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let diffs = v["runs"][0]["differences"].as_array().unwrap();
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert!(
        diffs[0]
            .as_str()
            .unwrap()
            .ends_with("extra.parquet: not listed in the receipt"),
        "{diffs:?}"
    );
    std::fs::remove_file(dir.join("extra.parquet")).unwrap();
    verify(&env, &[&run_dir]).ok();

    // The receipt's own files list edited.
    let receipt_path = dir.join("receipt.json");
    let text = std::fs::read_to_string(&receipt_path).unwrap();
    let mut r: Value = serde_json::from_str(&text).unwrap();
    r.as_object_mut().unwrap().remove("files");
    std::fs::write(&receipt_path, r.to_string()).unwrap();
    let bad = verify(&env, &[&run_dir]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stdout.contains("receipt.json: lists no files"),
        "{}",
        bad.stdout
    );
    std::fs::write(&receipt_path, text).unwrap();
    verify(&env, &["--staging", "staging"]).ok();
}

// The state's list of runs was checked by nothing: a committed run that went
// missing, a folder no state lists, or a LATEST that lags went unnoticed.
#[test]
fn verify_staging_checks_the_state_list_of_runs_against_runs_and_latest() {
    let env = Env::new();
    sample(&env);
    let first = env.latest();
    let annotations = repo().join("data/sample/annotations.jsonl");
    env.run_sample(&["--annotations", annotations.to_str().unwrap(), "--full"])
        .ok();
    let second = env.latest();
    let ok = verify(&env, &["--staging", "staging"]).ok();
    assert_eq!(ok.stdout.matches("(9 files)").count(), 2, "{}", ok.stdout);

    // A temporary directory (a run in progress) is left out, not a difference.
    std::fs::create_dir(env.staging().join("runs/.tmp-x")).unwrap();
    let ok = verify(&env, &["--staging", "staging"]).ok();
    assert!(ok.stdout.contains("skipped"), "{}", ok.stdout);
    // ... and it is not a committed run.
    let tmp = env.staging().join("runs/.tmp-x");
    std::fs::copy(first.join("receipt.json"), tmp.join("receipt.json")).unwrap();
    let bad = verify(&env, &[tmp.to_str().unwrap()]);
    assert_eq!(bad.code, 1);
    assert!(bad.stdout.contains("an unfinished run"), "{}", bad.stdout);

    // A folder no state lists.
    let stray = env.staging().join("runs/20990101T000000Z-0000");
    std::fs::create_dir(&stray).unwrap();
    let bad = verify(&env, &["--staging", "staging"]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stdout
            .contains("runs/20990101T000000Z-0000: not listed by the state"),
        "{}",
        bad.stdout
    );
    std::fs::remove_dir(&stray).unwrap();

    // LATEST names the first run.
    let latest = std::fs::read(env.staging().join("LATEST")).unwrap();
    let first_id = first.file_name().unwrap().to_str().unwrap();
    env.write("staging/LATEST", format!("{first_id}\n"));
    let bad = verify(&env, &["--staging", "staging"]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stdout.contains(&format!(
            "LATEST: names run {first_id}, but the state's last run is"
        )),
        "{}",
        bad.stdout
    );
    std::fs::write(env.staging().join("LATEST"), latest).unwrap();

    // A committed run gone.
    let gone = env.path("gone");
    std::fs::rename(&second, &gone).unwrap();
    let bad = verify(&env, &["--staging", "staging"]);
    assert_eq!(bad.code, 1);
    let second_id = second.file_name().unwrap().to_str().unwrap();
    assert!(
        bad.stdout
            .contains(&format!("missing (the state lists run {second_id})")),
        "{}",
        bad.stdout
    );
    // Moved out of its staging directory, its files still verify.
    verify(&env, &[gone.to_str().unwrap()]).ok();
    // Not a staging directory, or no run directory: usage error.
    assert_eq!(verify(&env, &["--staging", "gone"]).code, 2);
    assert_eq!(verify(&env, &["nowhere"]).code, 2);
    assert_eq!(verify(&env, &[]).code, 2);
}

// verify passed a table rewritten together with its receipt entry, and
// edited counts: the receipt was anchored nowhere else. It also hung on a
// FIFO receipt.json.
#[test]
fn verify_catches_a_rewritten_receipt_recounts_the_tables_and_refuses_a_fifo_receipt() {
    let env = Env::new();
    sample(&env);
    let dir = env.latest();
    let run_dir = dir.to_str().unwrap().to_string();
    let receipt_path = dir.join("receipt.json");
    let original = std::fs::read_to_string(&receipt_path).unwrap();

    // A table replaced (the abstained table in the promoted tags' place)
    // and its receipt entry rewritten to match: every file matches the
    // receipt, but the receipt is not the one the commit recorded, and
    // the receipt's count no longer matches the table's rows.
    let tags = dir.join("promoted_tags.parquet");
    let swapped = std::fs::read(dir.join("abstained.parquet")).unwrap();
    std::fs::write(&tags, &swapped).unwrap();
    let mut r: Value = serde_json::from_str(&original).unwrap();
    for f in r["files"].as_array_mut().unwrap() {
        if f["name"] == "promoted_tags.parquet" {
            f["bytes"] = Value::from(swapped.len() as u64);
            f["sha256"] = Value::from(tomlite::hash::sha256_bytes(&swapped));
        }
    }
    std::fs::write(&receipt_path, r.to_string()).unwrap();
    let bad = verify(&env, &[&run_dir]);
    assert_eq!(bad.code, 1, "{}{}", bad.stdout, bad.stderr);
    assert!(
        bad.stdout
            .contains("receipt.json: differs from the receipt its commit recorded in the state"),
        "{}",
        bad.stdout
    );
    assert!(
        bad.stdout.contains("receipt.json: counts promoted_tags = ")
            && bad.stdout.contains("but promoted_tags.parquet holds"),
        "{}",
        bad.stdout
    );

    // A FIFO in the receipt's place is named, not read.
    std::fs::remove_file(&receipt_path).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&receipt_path)
        .status()
        .unwrap();
    assert!(made.success());
    let bad = verify(&env, &[&run_dir]);
    assert_eq!(bad.code, 1, "{}{}", bad.stdout, bad.stderr);
    assert!(
        bad.stdout.contains("receipt.json: not a regular file"),
        "{}",
        bad.stdout
    );
}
