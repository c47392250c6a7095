//! What tomlite writes for people to read: stdout into a pipe whose reader
//! has gone, report.md in a terminal or a Markdown viewer, and the report's
//! and tables' account of how each raw annotation was read.

use std::process::Stdio;

use serde_json::{Map, Value, json};

use crate::common::*;

/// Runs `tomlite <args>` in `env` with stdout a pipe whose read end is
/// already closed: (exit code, stderr).
fn with_closed_stdout(env: &Env, args: &[&str]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = bin()
        .current_dir(env.dir.path())
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("spawn tomlite");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// `tomlite run ... | true` and `tomlite curate status | head -1` panicked
// (exit 101) on the broken pipe after the work was done.
#[test]
fn a_closed_stdout_pipe_ends_the_output_quietly_after_the_work() {
    let env = Env::new();
    let data = repo().join("data/sample");
    let (records, nodes, annotations) = (
        data.join("records.jsonl"),
        data.join("nodes.jsonl"),
        data.join("annotations.jsonl"),
    );
    let run = [
        "run",
        "--input",
        records.to_str().unwrap(),
        "--nodes",
        nodes.to_str().unwrap(),
        "--annotations",
        annotations.to_str().unwrap(),
        "--staging",
        "staging",
    ];
    let (code, stderr) = with_closed_stdout(&env, &run);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The work is done: the run is committed.
    assert_eq!(env.receipt()["counts"]["processed"], 40);
    for args in [
        &["curate", "status", "--staging", "staging"][..],
        &["curate", "status", "--staging", "staging", "--json"],
        &["policy"],
        &["contract", "schema"],
    ] {
        let (code, stderr) = with_closed_stdout(&env, args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // A failing command keeps its own exit status.
    let (code, stderr) = with_closed_stdout(&env, &["curate", "status"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no staging directory"), "{stderr}");
}

// Any other write error on stdout is reported, not a panic.
#[test]
fn a_full_stdout_is_an_error_naming_standard_output() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return; // no /dev/full on this system
    };
    let out = bin()
        .arg("policy")
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Whether a character would act on a terminal: C0 controls (but the line
/// break Markdown needs), DEL, and C1 controls.
fn acts_on_a_terminal(c: char) -> bool {
    c != '\n' && c.is_control()
}

// report.md passed record text's terminal escapes through (clear screen,
// window title, OSC 52 clipboard writes), a record id with a line break
// forged Markdown sections, and a `|` in a persona id broke the table.
#[test]
fn hostile_ids_and_text_cannot_act_on_a_terminal_or_forge_report_md() {
    let env = Env::new();
    let hostile_text = "Keep answers short. \u{1b}[2J\u{1b}]0;pwned\u{7}\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{9b}31m done\r\n# Forged heading\n| x | y |";
    let id = "r1\n\n## Forged section\n\n- **fake** item";
    let persona = "ada | 999 | 999 | 999 |\u{1b}[31m";
    let quote = "Keep answers short.";
    let mut rec = record(id, hostile_text);
    rec["persona_id"] = json!(persona);
    let mut rec2 = record("r2\u{1b}]0;title\u{7}", "# Keep answers short.\n- item");
    rec2["persona_id"] = json!("bo`b");
    env.jsonl("records.jsonl", &[rec, rec2]);
    // A safety record whose quote is the hostile text: the report's first section.
    let mut first = annotation(
        id,
        vec![tag(
            "preference",
            0.4,
            hostile_text,
            &hostile_text[quote.len() + 1..],
        )],
        vec![],
        ("neutral", 0.9),
        ("low", 0.9),
    );
    first["sensitive"] = json!({"category": "mental_health_self_harm", "confidence": 0.9,
        "quote": &hostile_text[quote.len() + 1..], "quote_start": quote.len() + 1,
        "quote_end": hostile_text.len(), "detector": "model"});
    env.jsonl(
        "annotations.jsonl",
        &[
            first,
            annotation(
                "r2\u{1b}]0;title\u{7}",
                vec![json!({"tom_kind": "preference", "confidence": 0.4,
                            "source_quote": "# Keep answers short.\n- item", "quote_start": 0, "quote_end": 28})],
                vec![],
                ("neutral", 0.9),
                ("low", 0.9),
            ),
        ],
    );
    env.run_std(&[]).ok();
    assert_eq!(env.receipt()["counts"]["quarantined_tags"], 2);
    let md = std::fs::read_to_string(env.latest().join("report.md")).unwrap();
    let bad: Vec<char> = md.chars().filter(|&c| acts_on_a_terminal(c)).collect();
    assert!(bad.is_empty(), "control characters {bad:?} in:\n{md}");
    // The escapes are shown, not dropped.
    assert!(md.contains("\\u{1b}"), "{md}");
    assert!(md.contains("\\u{9b}"), "{md}");
    // Every heading is one of the report's own.
    let headings: Vec<&str> = md.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(headings.len(), 5, "{headings:#?}\n{md}");
    assert!(headings[0].starts_with("# tomlite run "));
    assert_eq!(headings[1], "## Safety records");
    for h in &headings[1..] {
        assert!(
            [
                "## Safety records",
                "## Quarantine by reason",
                "## By persona",
                "## Queue"
            ]
            .iter()
            .any(|p| h.starts_with(p)),
            "{h}"
        );
    }
    // No line of the queue is a list item or a heading that came from a value.
    assert!(!md.lines().any(|l| l.starts_with("- **fake**")), "{md}");
    assert!(
        !md.lines()
            .any(|l| l.trim_start().starts_with("> #") || l.trim_start().starts_with("> -")),
        "{md}"
    );
    // The persona table keeps its four columns: every `|` of the id is escaped.
    let table: Vec<&str> = md
        .split("## By persona")
        .nth(1)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with('|'))
        .collect();
    let cells = |l: &str| {
        let mut n = 0;
        let mut prev = ' ';
        for c in l.chars() {
            if c == '|' && prev != '\\' {
                n += 1;
            }
            prev = c;
        }
        n
    };
    assert_eq!(table.len(), 4, "{table:#?}");
    for row in &table {
        assert_eq!(cells(row), 5, "{row}");
    }
    assert!(md.contains("ada \\| 999"), "{md}");
    // The safety table keeps its five columns.
    let safety: Vec<&str> = md
        .split("## Safety records")
        .nth(1)
        .unwrap()
        .split("| outcome")
        .next()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with('|'))
        .collect();
    assert_eq!(safety.len(), 3, "{safety:#?}");
    for row in &safety {
        assert_eq!(cells(row), 6, "{row}");
    }
}

fn rows_of<'a>(rows: &'a [Map<String, Value>], id: &str) -> Vec<&'a Map<String, Value>> {
    by(rows, "record_id", id)
}

fn read_as(row: &Map<String, Value>) -> (Value, Value) {
    (row["parse_class"].clone(), row["escape_shape"].clone())
}

// Nothing said which records' raw annotator output needed rescue by the
// verdict parser, or how: the class and escape shape are now in every row
// of quarantine, promoted and abstained, and in the report.
#[test]
fn each_row_says_how_its_raw_annotation_was_read() {
    let env = Env::new();
    let text = "Keep answers short. I will run a marathon in May.";
    let ids = [
        "r-strict",
        "r-lenient",
        "r-escape",
        "r-abstain",
        "r-anomaly",
        "r-low",
    ];
    env.jsonl(
        "records.jsonl",
        &ids.iter().map(|id| record(id, text)).collect::<Vec<_>>(),
    );
    let good = r#"{"tags":[{"tom_kind":"preference","confidence":0.91,"source_quote":"Keep answers short."}],"affect":{"label":"neutral","confidence":0.84},"intensity":{"label":"medium","confidence":0.71}}"#;
    let low = good.replace("0.91", "0.3");
    env.jsonl(
        "raw.jsonl",
        &[
            json!({"record_id": "r-strict", "annotator": "llm@1", "raw": good}),
            json!({"record_id": "r-lenient", "annotator": "llm@1", "raw": format!("Sure.\n```json\n{good}\n```")}),
            json!({"record_id": "r-escape", "annotator": "llm@1", "raw": "tom_kind: goal (0.9)\naffect: happy (0.8)\nintensity: high (0.75)\nsource_quote: \"I will run a marathon in May.\""}),
            json!({"record_id": "r-abstain", "annotator": "llm@1", "raw": "Nothing here.\nABSTAIN: best goal (0.42)"}),
            json!({"record_id": "r-anomaly", "annotator": "llm@1", "raw": "I could not decide."}),
            json!({"record_id": "r-low", "annotator": "llm@1", "raw": format!("Here you go: {low}")}),
        ],
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
    let promoted = env.table("promoted_tags");
    let quarantine = env.table("quarantine");
    let abstained = env.table("abstained");
    let s = |x: &str| json!(x);
    assert_eq!(
        read_as(rows_of(&promoted, "r-strict")[0]),
        (s("STRICT"), Value::Null)
    );
    assert_eq!(
        read_as(rows_of(&promoted, "r-lenient")[0]),
        (s("LENIENT-RECOVERY"), Value::Null)
    );
    assert_eq!(
        read_as(rows_of(&promoted, "r-escape")[0]),
        (s("ESCAPE-RECOVERY"), s("key_value_block"))
    );
    assert_eq!(
        read_as(rows_of(&abstained, "r-abstain")[0]),
        (s("ESCAPE-RECOVERY"), s("abstain_marker"))
    );
    assert_eq!(
        read_as(rows_of(&quarantine, "r-anomaly")[0]),
        (s("ANOMALY"), Value::Null)
    );
    assert_eq!(
        read_as(rows_of(&quarantine, "r-low")[0]),
        (s("LENIENT-RECOVERY"), Value::Null)
    );
    // The report says it too.
    let md = std::fs::read_to_string(env.latest().join("report.md")).unwrap();
    assert!(md.contains("## Raw annotations by parse class"), "{md}");
    assert!(md.contains("| LENIENT-RECOVERY | 2 |"), "{md}");
    assert!(
        md.contains("| r-escape | ada | ESCAPE-RECOVERY | key_value_block | 1 | 0 | 0 |"),
        "{md}"
    );
    assert!(md.contains("r-low#tag0"), "{md}");
    assert!(
        md.lines()
            .any(|l| l.contains("r-low#tag0") && l.ends_with("read as LENIENT-RECOVERY")),
        "{md}"
    );
    assert!(
        !md.contains("| r-strict |"),
        "a STRICT record needed no rescue:\n{md}"
    );
    let page = std::fs::read_to_string(env.latest().join("report.html")).unwrap();
    assert!(page.contains(r#""parse_class":"ANOMALY""#));
    assert!(page.contains(r#""escape_shape":"abstain_marker""#));

    // From an annotations file (or the classifier) the columns are null.
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("r1", text)]);
    env.jsonl(
        "annotations.jsonl",
        &[annotation(
            "r1",
            vec![tag("preference", 0.95, text, "Keep answers short.")],
            vec![],
            ("neutral", 0.9),
            ("low", 0.9),
        )],
    );
    env.run_std(&[]).ok();
    let row = &env.table("promoted_tags")[0];
    assert_eq!(read_as(row), (Value::Null, Value::Null));
    let md = std::fs::read_to_string(env.latest().join("report.md")).unwrap();
    assert!(!md.contains("Raw annotations"), "{md}");
}
