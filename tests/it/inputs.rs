//! How inputs are opened, hashed and read: journal folders with FIFOs,
//! devices and links, piped input, byte order marks and UTF-16, rejected
//! lines that must not claim their id, and annotations rewritten mid-run.
//! Every run here has a time limit: a hang fails the test instead of
//! blocking it.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

/// Runs `cmd` (stdout and stderr captured, `stdin` fed when given) and
/// fails the test when it takes longer than `secs`.
fn timed(cmd: &mut Command, stdin: Option<&[u8]>, secs: u64) -> Ran {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("spawn tomlite");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        // A run that refuses its input up front (a pipe given as
        // annotations) may exit before reading a byte: the write then
        // meets a closed pipe, which is not the test's failure.
        if let Err(e) = pipe.write_all(bytes) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        }
    }
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(secs) {
            child.kill().ok();
            let o = child.wait_with_output().unwrap();
            panic!(
                "tomlite did not finish in {secs} s (hung); stderr:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    Ran {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn run_cmd(env: &Env, args: &[&str]) -> Command {
    let mut c = bin();
    c.current_dir(env.dir.path())
        .arg("run")
        .args(args)
        .env_remove("FAILPOINTS");
    c
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(ok.success());
}

/// The rejects as (record_id or source file name, error).
fn rejects_by_name(env: &Env) -> Vec<(String, String)> {
    env.table("rejects")
        .iter()
        .map(|r| {
            let name = r["record_id"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| {
                    let s = r["source"].as_str().unwrap();
                    Path::new(s)
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned()
                });
            (name, r["error"].as_str().unwrap().to_string())
        })
        .collect()
}

// Regression: a FIFO named `pipe.md` or a link `zero.md -> /dev/zero` hung
// the run (the folder hash read every entry); a link to a folder outside or
// a link loop failed the run naming the root; an `.md` link to a file outside
// the folder was ingested.
#[test]
fn journal_folder_fifos_devices_and_links_are_rejects_naming_them_not_hangs() {
    let env = Env::new();
    env.write(
        "journals/ada/ok.md",
        "# 2026-11-27\nI want quiet mornings.\n",
    );
    env.write("secret.md", "Not part of the journals.");
    env.write("elsewhere/x.md", "Also outside.");
    let ada = env.path("journals/ada");
    mkfifo(&ada.join("pipe.md"));
    mkfifo(&ada.join("plain-fifo"));
    let link =
        |target: &Path, name: &str| std::os::unix::fs::symlink(target, ada.join(name)).unwrap();
    link(Path::new("/dev/zero"), "zero.md");
    link(&env.path("secret.md"), "outside.md");
    link(&env.path("elsewhere"), "out");
    link(Path::new("loop"), "loop");
    link(Path::new("ok.md"), "inside.md");
    env.jsonl("annotations.jsonl", &[]);
    let ran = timed(
        &mut run_cmd(
            &env,
            &[
                "--input",
                "journals",
                "--annotations",
                "annotations.jsonl",
                "--staging",
                "staging",
            ],
        ),
        None,
        60,
    )
    .ok();
    let ids: Vec<_> = env
        .table("abstained")
        .iter()
        .map(|r| r["record_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["ada/ok.md"], "{}", ran.stdout);
    let rejects = rejects_by_name(&env);
    let names: Vec<&str> = rejects.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "ada/inside.md",
            "ada/loop",
            "ada/out",
            "ada/outside.md",
            "ada/pipe.md",
            "ada/zero.md"
        ],
        "{rejects:#?}"
    );
    let error = |name: &str| &rejects.iter().find(|(n, _)| n == name).unwrap().1;
    assert!(error("ada/pipe.md").contains("FIFO"), "{rejects:#?}");
    for name in [
        "ada/zero.md",
        "ada/outside.md",
        "ada/out",
        "ada/loop",
        "ada/inside.md",
    ] {
        assert!(
            error(name).contains("symbolic link"),
            "{name}: {rejects:#?}"
        );
    }
    let receipt = env.receipt();
    assert_eq!(receipt["inputs"][0]["records"], 7, "{receipt:#}");
    assert_eq!(receipt["counts"]["rejected"], 6);
    // The folder's hash is of the one file read, by the same walker.
    let ok = tomlite::hash::sha256_bytes(&std::fs::read(ada.join("ok.md")).unwrap());
    assert_eq!(
        receipt["inputs"][0]["sha256"],
        tomlite::hash::sha256_bytes(format!("ada/ok.md\0{ok}\n").as_bytes())
    );
}

// Regression: `--input /dev/stdin` (and a FIFO path) committed a run with
// records_in 0, because hashing consumed the stream; a Parquet FIFO or a
// device as input hung.
#[test]
fn piped_input_is_read_once_and_hashed_as_read() {
    let env = Env::new();
    let mut body = String::new();
    for id in ["p-1", "p-2"] {
        body.push_str(&record(id, "I like short answers.").to_string());
        body.push('\n');
    }
    env.jsonl("annotations.jsonl", &[]);
    let args = |input: &'static str, staging: &'static str| {
        vec![
            "--input",
            input,
            "--annotations",
            "annotations.jsonl",
            "--staging",
            staging,
        ]
    };

    // stdin as a pipe.
    let ran = timed(
        &mut run_cmd(&env, &args("/dev/stdin", "s1")),
        Some(body.as_bytes()),
        60,
    )
    .ok();
    let receipt: Value = serde_json::from_slice(
        &std::fs::read(latest_of(&env.path("s1")).join("receipt.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["counts"]["records_in"], 2, "{}", ran.stdout);
    assert_eq!(receipt["counts"]["processed"], 2);
    assert_eq!(receipt["inputs"][0]["records"], 2);
    assert_eq!(
        receipt["inputs"][0]["sha256"],
        tomlite::hash::sha256_bytes(body.as_bytes())
    );

    // A FIFO given by path, written by another process.
    let fifo = env.path("night.jsonl");
    mkfifo(&fifo);
    let writer = {
        let (fifo, body) = (fifo.clone(), body.clone());
        std::thread::spawn(move || std::fs::write(fifo, body).unwrap())
    };
    timed(&mut run_cmd(&env, &args("night.jsonl", "s2")), None, 60).ok();
    writer.join().unwrap();
    let receipt: Value = serde_json::from_slice(
        &std::fs::read(latest_of(&env.path("s2")).join("receipt.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["counts"]["processed"], 2);
    assert_eq!(
        receipt["inputs"][0]["sha256"],
        tomlite::hash::sha256_bytes(body.as_bytes())
    );

    // A Parquet input must be seekable, and a device is no input: refused
    // up front (exit 2), nothing opened.
    mkfifo(&env.path("rows.parquet"));
    let ran = timed(&mut run_cmd(&env, &args("rows.parquet", "s3")), None, 60);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("rows.parquet"), "{}", ran.stderr);
    assert!(ran.stderr.contains("regular file"), "{}", ran.stderr);
    let ran = timed(&mut run_cmd(&env, &args("/dev/zero", "s4")), None, 60);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("/dev/zero"), "{}", ran.stderr);
    assert!(!env.path("s4/LATEST").exists());
    // Annotations are read back by position: a pipe is refused.
    env.jsonl("records.jsonl", &[record("p-1", "I like short answers.")]);
    let ran = timed(
        &mut run_cmd(
            &env,
            &[
                "--input",
                "records.jsonl",
                "--annotations",
                "/dev/stdin",
                "--staging",
                "s5",
            ],
        ),
        Some(b"{}\n"),
        60,
    );
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("not a regular file"), "{}", ran.stderr);
}

fn latest_of(staging: &Path) -> std::path::PathBuf {
    let id = std::fs::read_to_string(staging.join("LATEST")).expect("LATEST");
    staging.join("runs").join(id.trim())
}

const BOM: &[u8] = b"\xef\xbb\xbf";

fn utf16(s: &str, little: bool) -> Vec<u8> {
    let mut out = if little {
        vec![0xff, 0xfe]
    } else {
        vec![0xfe, 0xff]
    };
    for u in s.encode_utf16() {
        out.extend_from_slice(&if little {
            u.to_le_bytes()
        } else {
            u.to_be_bytes()
        });
    }
    out
}

// Regression: a UTF-8 byte order mark turned the first record (and the
// first annotation, and a node registry's first node) into a reject, and a
// journal's text kept it; a UTF-16 file gave one opaque reject per line.
#[test]
fn a_utf8_bom_is_stripped_and_a_utf16_file_is_one_reject_saying_so() {
    let env = Env::new();
    let text = "I want quiet mornings.";
    let lines = |rows: &[Value]| -> String { rows.iter().map(|r| format!("{r}\n")).collect() };
    env.write(
        "records.jsonl",
        [
            BOM,
            lines(&[record("b-1", text), record("b-2", text)]).as_bytes(),
        ]
        .concat(),
    );
    let ann = |id: &str| {
        annotation(
            id,
            vec![tag("preference", 0.95, text, text)],
            vec![],
            ("neutral", 0.9),
            ("low", 0.9),
        )
    };
    env.write(
        "annotations.jsonl",
        [
            BOM,
            lines(&[ann("b-1"), ann("b-2"), ann("ada/j.md")]).as_bytes(),
        ]
        .concat(),
    );
    env.write(
        "nodes.jsonl",
        [
            BOM,
            json!({"id": "user:sam", "kind": "user", "name": "Sam"})
                .to_string()
                .as_bytes(),
            b"\n",
        ]
        .concat(),
    );
    env.write("journals/ada/j.md", [BOM, text.as_bytes()].concat());
    env.write("journals/ada/wide.md", utf16(text, true));
    let body16 = lines(&[record("w-1", text)]);
    env.write("le.jsonl", utf16(&body16, true));
    env.write("be.jsonl", utf16(&body16, false));
    env.write("ann16.jsonl", utf16(&lines(&[ann("w-1")]), true));
    let ran = timed(
        &mut run_cmd(
            &env,
            &[
                "--input",
                "records.jsonl",
                "--input",
                "journals",
                "--input",
                "le.jsonl",
                "--input",
                "be.jsonl",
                "--annotations",
                "annotations.jsonl",
                "--nodes",
                "nodes.jsonl",
                "--staging",
                "staging",
            ],
        ),
        None,
        60,
    )
    .ok();
    let promoted: Vec<_> = env
        .table("promoted_tags")
        .iter()
        .map(|r| r["record_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(promoted, ["b-1", "b-2", "ada/j.md"], "{}", ran.stdout);
    let rejects = rejects_by_name(&env);
    assert_eq!(rejects.len(), 3, "{rejects:#?}");
    for (name, error) in &rejects {
        assert!(
            ["ada/wide.md", "le.jsonl", "be.jsonl"].contains(&name.as_str()),
            "{rejects:#?}"
        );
        assert!(error.contains("UTF-16; convert to UTF-8"), "{rejects:#?}");
    }
    let lines0: Vec<_> = env
        .table("rejects")
        .iter()
        .map(|r| r["line"].clone())
        .collect();
    assert_eq!(
        lines0,
        [json!(1), json!(0), json!(0)],
        "a journal is line 1, a JSONL file line 0"
    );

    // A UTF-16 annotations file is one reject too.
    env.jsonl("records.jsonl", &[record("w-1", text)]);
    timed(
        &mut run_cmd(
            &env,
            &[
                "--input",
                "records.jsonl",
                "--annotations",
                "ann16.jsonl",
                "--staging",
                "s2",
            ],
        ),
        None,
        60,
    )
    .ok();
    let rejects = read_table(&latest_of(&env.path("s2")).join("rejects.parquet"));
    assert_eq!(rejects.len(), 1, "{rejects:#?}");
    assert_eq!(rejects[0]["line"], 0);
    assert_eq!(rejects[0]["input"], "annotations");
    assert!(
        rejects[0]["error"]
            .as_str()
            .unwrap()
            .contains("UTF-16; convert to UTF-8"),
        "{rejects:#?}"
    );
}

// Regression: a corrected line that followed a rejected line with the same
// id was rejected as a duplicate; a broken annotation line after a good one
// for the same record replaced it.
#[test]
fn a_rejected_line_does_not_claim_its_id() {
    let env = Env::new();
    let text = "I want quiet mornings.";
    let mut bad = record("r-1", text);
    bad["kind"] = json!("diary");
    let good = |id: &str| {
        annotation(
            id,
            vec![tag("preference", 0.95, text, text)],
            vec![],
            ("neutral", 0.9),
            ("low", 0.9),
        )
        .to_string()
    };
    env.write(
        "records.jsonl",
        format!("{bad}\n{}\n{}\n", record("r-1", text), record("r-2", text)),
    );
    env.write(
        "annotations.jsonl",
        format!(
            "{{\"record_id\": \"r-1\", \"tags\": [{{\n{}\n{}\n{{\"record_id\": \"r-2\", \"tags\": 5, \"oops\n",
            good("r-1"),
            good("r-2")
        ),
    );
    let ran = env.run_std(&[]).ok();
    let promoted: Vec<_> = env
        .table("promoted_tags")
        .iter()
        .map(|r| r["record_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(promoted, ["r-1", "r-2"], "{}", ran.stdout);
    let rejects = env.table("rejects");
    let got: Vec<_> = rejects
        .iter()
        .map(|r| {
            (
                r["input"].as_str().unwrap(),
                r["line"].as_u64().unwrap(),
                r["record_id"].as_str().unwrap(),
                r["field"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("annotations", 1, "r-1", "record_id"),
            ("annotations", 4, "r-2", "record_id"),
            ("records", 1, "r-1", "kind"),
        ],
        "{rejects:#?}"
    );
    assert!(env.table("quarantine").is_empty());
}

/// Starts `tomlite run` with `faults` (a `sleep` in them: heartbeats every
/// 0.1 s), waits until a heartbeat says the run is inside that sleep (its
/// inputs and annotations open by then), calls `meanwhile`, and waits for it
/// to finish (at most 60 s). Without a sleep, `meanwhile` runs at once.
#[cfg(feature = "failpoints")]
fn run_while(env: &Env, faults: &str, meanwhile: impl FnOnce()) -> Ran {
    let mut c = run_cmd(
        env,
        &[
            "--input",
            "records.jsonl",
            "--annotations",
            "annotations.jsonl",
            "--staging",
            "staging",
            "--batch-size",
            "1",
            "--heartbeat-seconds",
            "0.1",
        ],
    );
    c.env("FAILPOINTS", faults)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let mut child = c.spawn().unwrap();
    let start = Instant::now();
    let runs = env.path("staging/runs");
    let in_sleep = || {
        std::fs::read_dir(&runs).is_ok_and(|d| {
            d.flatten().any(|e| {
                std::fs::read_to_string(e.path().join("events.jsonl"))
                    .is_ok_and(|t| t.contains(r#""phase":"heartbeat""#))
            })
        })
    };
    while faults.contains("sleep") && !in_sleep() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its fault point"
        );
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the run never reached its fault point"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    meanwhile();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().ok();
            panic!("tomlite did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    Ran {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

// Regression: annotation lines are read back by byte offset; a file
// rewritten in place mid-run promoted a record with another record's
// confidence, and a file appended to mid-run was committed from.
#[cfg(feature = "failpoints")]
#[test]
fn annotations_rewritten_or_appended_mid_run_fail_the_run() {
    let text = "I want quiet mornings.";
    let line = |id: &str, conf: f64| {
        annotation(
            id,
            vec![tag("preference", conf, text, text)],
            vec![],
            ("neutral", 0.9),
            ("low", 0.9),
        )
        .to_string()
    };
    let setup = || {
        let env = Env::new();
        env.jsonl("records.jsonl", &[record("r-1", text), record("r-2", text)]);
        env.write(
            "annotations.jsonl",
            format!("{}\n{}\n", line("r-1", 0.95), line("r-2", 0.35)),
        );
        env
    };

    // The lines swapped in place (same lengths): r-2's offset now holds r-1's line.
    let env = setup();
    let path = env.path("annotations.jsonl");
    let ran = run_while(&env, "annotate.batch=1*sleep(3000)", || {
        std::fs::write(
            &path,
            format!("{}\n{}\n", line("r-2", 0.35), line("r-1", 0.95)),
        )
        .unwrap();
    });
    assert_eq!(
        ran.code, 1,
        "stdout:\n{}\nstderr:\n{}",
        ran.stdout, ran.stderr
    );
    assert!(ran.stderr.contains("annotations.jsonl"), "{}", ran.stderr);
    assert!(ran.stderr.contains("changed"), "{}", ran.stderr);
    assert!(!env.path("staging/LATEST").exists());

    // A line appended after the last annotation was read: caught before the commit.
    let env = setup();
    let path = env.path("annotations.jsonl");
    let ran = run_while(&env, "staged.promoted_tags=1*sleep(3000)", || {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(f, "{}", line("r-3", 0.5)).unwrap();
    });
    assert_eq!(
        ran.code, 1,
        "stdout:\n{}\nstderr:\n{}",
        ran.stdout, ran.stderr
    );
    assert!(ran.stderr.contains("annotations.jsonl"), "{}", ran.stderr);
    assert!(ran.stderr.contains("changed"), "{}", ran.stderr);
    assert!(!env.path("staging/LATEST").exists());

    // A records file appended to while it is read: caught when its hash is taken.
    let env = setup();
    let records = env.path("records.jsonl");
    let ran = run_while(&env, "annotate.batch=1*sleep(3000)", || {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&records)
            .unwrap();
        writeln!(f, "{}", record("r-3", text)).unwrap();
    });
    assert_eq!(
        ran.code, 1,
        "stdout:\n{}\nstderr:\n{}",
        ran.stdout, ran.stderr
    );
    assert!(
        ran.stderr
            .contains("records.jsonl changed while it was read"),
        "{}",
        ran.stderr
    );
    assert!(!env.path("staging/LATEST").exists());

    // Unchanged, the receipt's sha256 is of the bytes read.
    let env = setup();
    let ran = run_while(&env, "annotate.batch=off", || {});
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(
        env.receipt()["annotator"]["sha256"],
        tomlite::hash::sha256_bytes(&std::fs::read(env.path("annotations.jsonl")).unwrap())
    );
    let confs: Vec<_> = env
        .table("promoted_tags")
        .iter()
        .map(|r| (r["record_id"].clone(), r["tom_kind_confidence"].clone()))
        .collect();
    assert_eq!(
        confs,
        [(json!("r-1"), json!(0.95))],
        "r-2 at 0.35 is not promoted"
    );
}

// A node registry given as a pipe (`--nodes <(...)`) loaded its nodes but the
// receipt carried the sha256 of nothing: the registry was read a second time
// to hash it, and the pipe was empty by then.
#[test]
fn a_piped_node_registry_is_hashed_as_read() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("p-1", "I like short answers.")]);
    env.jsonl("annotations.jsonl", &[]);
    let registry = std::fs::read(repo().join("data/sample/nodes.jsonl")).unwrap();
    let ran = timed(
        &mut run_cmd(
            &env,
            &[
                "--input",
                "records.jsonl",
                "--annotations",
                "annotations.jsonl",
                "--nodes",
                "/dev/stdin",
                "--staging",
                "s1",
            ],
        ),
        Some(&registry),
        60,
    )
    .ok();
    let receipt: Value = serde_json::from_slice(
        &std::fs::read(latest_of(&env.path("s1")).join("receipt.json")).unwrap(),
    )
    .unwrap();
    let lines = registry
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(receipt["nodes"]["nodes"], lines, "{}", ran.stdout);
    assert_eq!(
        receipt["nodes"]["sha256"],
        tomlite::hash::sha256_bytes(&registry)
    );
}

// Regression: `--staging` naming a file ran, warned that it could not keep
// the failed run's record, and failed with exit 1 ("cannot create
// directory ...: File exists") instead of a configuration error.
#[test]
fn a_staging_path_that_is_a_file_is_a_configuration_error() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("r-1", "I like tea.")]);
    env.jsonl("annotations.jsonl", &[]);
    env.write("not-a-dir", "x");
    let ran = env.run(&[
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "not-a-dir",
    ]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("staging directory not-a-dir exists and is not a directory"),
        "{}",
        ran.stderr
    );
    assert!(!ran.stderr.contains("warning"), "{}", ran.stderr);
    assert_eq!(std::fs::read_to_string(env.path("not-a-dir")).unwrap(), "x");
}
