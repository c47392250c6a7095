//! Snapshot tests: the sealed receipt, the printed summaries, `report.md`,
//! `curate status`, `verify` and every `--help` text on the bundled sample,
//! pinned with insta (in `snapshots/`) so that a format change is a reviewed diff.
//! Run ids, times, durations, rates, kernel names and temp paths are filtered.

use std::process::Command;

use crate::common::*;

/// Pattern and replacement for what differs from run to run or machine to
/// machine in every output pinned here.
const FILTERS: &[(&str, &str)] = &[
    // Run ids: `20261201T053945Z-8b36` (UTC second, then a pid-salted suffix).
    (r"\b\d{8}T\d{6}Z-[0-9a-f]{4}\b", "[RUN_ID]"),
    // Clock times the program stamps (started_at, finished_at, applied_at):
    // always with milliseconds, unlike the sample's record dates.
    (
        r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z",
        "[TIMESTAMP]",
    ),
    (
        r#""duration_seconds": [0-9.eE+-]+"#,
        r#""duration_seconds": "[DURATION]""#,
    ),
    // report.md: "Annotator `…`, policy `…`, 0.0 s."
    (r"(policy `[0-9a-f]+`, )\d+\.\d s\.", "${1}[DURATION] s."),
    // The receipt's list of sealed files: each of them holds the run id (the
    // tables in a column), so their hashes change every run; the reports
    // also print the run's duration, so their sizes may change.
    (
        r#"("name": "[^"]+",\s*"sha256": )"[0-9a-f]{64}""#,
        r#"${1}"[SHA256]""#,
    ),
    (
        r#""bytes": \d+(,\s*"name": "report\.(?:html|md)")"#,
        r#""bytes": "[BYTES]"${1}"#,
    ),
    // Progress lines: one every 10 s when stderr is not a terminal, so only
    // on a slow machine.
    (r"(?m)^tomlite: progress:[^\n]*\n", ""),
    // `tomlite annotate`'s closing line: time, rates, the machine's kernels.
    (r"\bin \d+\.\ds:", "in [SECONDS]s:"),
    (r"\d+(?:\.\d+)? records/s", "[RATE] records/s"),
    (r"\d+(?:\.\d+)? tokens/s", "[RATE] tokens/s"),
    (r"; kernels [^\n]+", "; kernels [KERNELS]"),
];

/// insta settings with [`FILTERS`] and the scratch directory's and the
/// repository's absolute paths replaced.
fn settings(env: &Env) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    for (pattern, replacement) in FILTERS {
        settings.add_filter(pattern, *replacement);
    }
    let temp = env.dir.path().canonicalize().unwrap();
    for (path, name) in [
        (temp, "[TEMP]"),
        (env.dir.path().to_path_buf(), "[TEMP]"),
        (repo(), "[REPO]"),
    ] {
        settings.add_filter(&regex::escape(&path.display().to_string()), name);
    }
    settings
}

/// `tomlite <args>` in the scratch directory, with no `TOMLITE_*` variable
/// of the caller's environment (they change defaults and the help texts).
fn tomlite(env: &Env, args: &[&str]) -> Ran {
    let mut cmd = bin();
    cmd.current_dir(env.dir.path()).args(args);
    clear_tomlite_env(&mut cmd);
    let output = cmd.output().expect("spawn tomlite");
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn clear_tomlite_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TOMLITE_") {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("CLICOLOR_FORCE");
}

/// A scratch directory holding copies of the bundled sample's records,
/// node registry and annotations, named by relative paths so that no
/// absolute path reaches the outputs.
fn sample_env() -> Env {
    let env = Env::new();
    let sample = repo().join("data/sample");
    for name in ["records.jsonl", "nodes.jsonl", "annotations.jsonl"] {
        std::fs::copy(sample.join(name), env.path(name)).unwrap();
    }
    env
}

const SAMPLE_RUN: &[&str] = &[
    "run",
    "--input",
    "records.jsonl",
    "--nodes",
    "nodes.jsonl",
    "--staging",
    "staging",
];

/// `tomlite run` on the sample with its annotations file.
fn run_sample_annotations(env: &Env) -> Ran {
    let args: Vec<&str> = SAMPLE_RUN
        .iter()
        .copied()
        .chain(["--annotations", "annotations.jsonl"])
        .collect();
    tomlite(env, &args).ok()
}

/// Stdout, then stderr under a `--- stderr` line.
fn stdout_and_stderr(ran: &Ran) -> String {
    format!("{}\n--- stderr\n{}", ran.stdout, ran.stderr)
}

fn read_in_run(env: &Env, name: &str) -> String {
    std::fs::read_to_string(env.latest().join(name)).unwrap()
}

#[test]
fn sample_run_with_annotations_file_receipt_summary_and_report() {
    let env = sample_env();
    let ran = run_sample_annotations(&env);
    settings(&env).bind(|| {
        insta::assert_snapshot!("annotations_run_stdout", ran.stdout);
        insta::assert_snapshot!("annotations_run_stderr", ran.stderr);
        insta::assert_snapshot!("annotations_run_receipt", read_in_run(&env, "receipt.json"));
        insta::assert_snapshot!("annotations_run_report_md", read_in_run(&env, "report.md"));
    });
}

#[test]
fn sample_staging_curate_status_and_verify() {
    let env = sample_env();
    run_sample_annotations(&env);
    let outputs = [
        (
            "curate_status",
            vec!["curate", "status", "--staging", "staging"],
        ),
        (
            "curate_status_json",
            vec!["curate", "status", "--staging", "staging", "--json"],
        ),
        ("verify_staging", vec!["verify", "--staging", "staging"]),
        (
            "verify_staging_json",
            vec!["verify", "--staging", "staging", "--json"],
        ),
    ];
    settings(&env).bind(|| {
        for (name, args) in outputs {
            let output = stdout_and_stderr(&tomlite(&env, &args).ok());
            insta::assert_snapshot!(name, output);
        }
    });
}

#[test]
fn sample_run_with_the_local_classifier_receipt_and_summary() {
    let env = sample_env();
    let ran = tomlite(&env, SAMPLE_RUN).ok();
    let mut settings = settings(&env);
    // The tables hold the model's confidences, whose last bits may differ
    // between machines: their sizes are not pinned here (the annotations-file
    // run pins them).
    settings.add_filter(
        r#""bytes": \d+(,\s*"name": "[^"]+\.parquet")"#,
        r#""bytes": "[BYTES]"${1}"#,
    );
    settings.bind(|| {
        insta::assert_snapshot!("classifier_run_stdout", ran.stdout);
        insta::assert_snapshot!("classifier_run_stderr", ran.stderr);
        insta::assert_snapshot!("classifier_run_receipt", read_in_run(&env, "receipt.json"));
    });
}

#[test]
fn sample_annotate_with_the_local_classifier_summary() {
    let env = sample_env();
    let ran = tomlite(
        &env,
        &[
            "annotate",
            "--input",
            "records.jsonl",
            "--nodes",
            "nodes.jsonl",
            "--out",
            "out.jsonl",
        ],
    )
    .ok();
    let output = stdout_and_stderr(&ran);
    settings(&env).bind(|| {
        insta::assert_snapshot!("classifier_annotate_output", output);
    });
}

/// The subcommands a `--help` text lists under "Commands:" (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn help_texts_of_tomlite_and_every_subcommand() {
    let env = Env::new();
    let mut pending = vec![Vec::<String>::new()];
    let mut pinned = Vec::new();
    settings(&env).bind(|| {
        while let Some(path) = pending.pop() {
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.push("--help");
            let ran = tomlite(&env, &args).ok();
            assert!(ran.stderr.is_empty(), "{}", ran.stderr);
            let name = std::iter::once("help")
                .chain(path.is_empty().then_some("tomlite"))
                .chain(path.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join("_")
                .replace('-', "_");
            let help = ran.stdout;
            insta::assert_snapshot!(name.clone(), help);
            for sub in subcommands(&help) {
                let mut child = path.clone();
                child.push(sub);
                pending.push(child);
            }
            pinned.push(name);
        }
    });
    // tomlite, its ten commands, curate's two and contract's two.
    assert_eq!(pinned.len(), 15, "{pinned:?}");
}
