//! Bad input is rejected line by line, with source, line, id, field and
//! error; every other record goes on. JSONL, Parquet and journal folders.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};

use crate::common::*;

#[test]
fn every_kind_of_bad_line_is_rejected_and_the_rest_is_processed() {
    let env = Env::new();
    let ok = |id: &str| record(id, "I like short answers.").to_string();
    let with = |id: &str, k: &str, v: Value| {
        let mut r = record(id, "Fine text.");
        r[k] = v;
        r.to_string()
    };
    let mut missing = record("b-missing", "x");
    missing.as_object_mut().unwrap().remove("persona_id");
    let long = "y".repeat(40 * 1024);
    let mut lines: Vec<Vec<u8>> = vec![
        ok("g-1").into_bytes(),                                         // 1
        b"{\"id\": \"b-json\", \"persona_id\": ".to_vec(),              // 2 malformed JSON
        missing.to_string().into_bytes(),                               // 3 missing field
        with("b-type", "text", json!(42)).into_bytes(),                 // 4 mistyped
        with("b-empty", "text", json!("   ")).into_bytes(),             // 5 empty text
        Vec::new(),                                                     // 6 (invalid UTF-8, below)
        with("b-time", "created_at", json!("28/11/2026")).into_bytes(), // 7 bad timestamp
        with("b-kind", "kind", json!("diary")).into_bytes(),            // 8 unknown kind
        with("b-long", "text", json!(long)).into_bytes(),               // 9 over-long
        ok("g-1").into_bytes(),                                         // 10 duplicate id
        b"".to_vec(),                                                   // 11 blank: skipped
        ok("g-2").into_bytes(),                                         // 12
    ];
    let mut utf8 = br#"{"id": "b-utf8", "persona_id": "ada", "kind": "journal", "source_path": "x", "created_at": "2026-11-28T21:00:00Z", "text": "caf"#.to_vec();
    utf8.extend_from_slice(&[0xff, 0xfe]);
    utf8.extend_from_slice(b"\"}");
    lines[5] = utf8;
    env.write(
        "records.jsonl",
        lines
            .join(&b'\n')
            .into_iter()
            .chain(*b"\n")
            .collect::<Vec<u8>>(),
    );
    env.jsonl("annotations.jsonl", &[]);
    let ran = env.run_std(&[]).ok();
    assert!(
        ran.stdout
            .contains("11 in: 2 processed, 0 skipped (unchanged), 9 rejected"),
        "{}",
        ran.stdout
    );

    let rejects = env.table("rejects");
    let expect: [(u64, Option<&str>, Option<&str>, &str); 9] = [
        (2, Some("b-json"), None, "malformed JSON"),
        (3, Some("b-missing"), Some("persona_id"), "missing"),
        (4, Some("b-type"), Some("text"), "expected a string"),
        (5, Some("b-empty"), Some("text"), "empty"),
        (6, Some("b-utf8"), Some("text"), "invalid UTF-8"),
        (7, Some("b-time"), Some("created_at"), "RFC3339"),
        (8, Some("b-kind"), Some("kind"), "unknown kind"),
        (9, Some("b-long"), Some("text"), "over the limit of 32768"),
        (10, Some("g-1"), Some("id"), "duplicate id"),
    ];
    assert_eq!(rejects.len(), expect.len(), "{rejects:#?}");
    for (row, (line, id, field, needle)) in rejects.iter().zip(expect) {
        assert_eq!(row["line"], line, "{row:?}");
        assert_eq!(row["record_id"].as_str(), id, "{row:?}");
        assert_eq!(row["field"].as_str(), field, "{row:?}");
        assert!(row["error"].as_str().unwrap().contains(needle), "{row:?}");
        assert!(row["source"].as_str().unwrap().ends_with("records.jsonl"));
        assert_eq!(row["input"], "records");
    }
    let abstained = env.table("abstained");
    let ids: Vec<_> = abstained
        .iter()
        .map(|r| r["record_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["g-1", "g-2"]);
}

#[test]
fn the_text_limit_comes_from_the_policy() {
    let env = Env::new();
    env.jsonl(
        "records.jsonl",
        &[record("short", "tiny"), record("long", "this is too long")],
    );
    env.jsonl("annotations.jsonl", &[]);
    env.write("p.yaml", "run:\n  max_text_bytes: 10\n");
    env.run_std(&["--policy", "p.yaml"]).ok();
    let rejects = env.table("rejects");
    assert_eq!(rejects.len(), 1);
    assert_eq!(rejects[0]["record_id"], "long");
    assert!(
        rejects[0]["error"]
            .as_str()
            .unwrap()
            .contains("16 bytes, over the limit of 10")
    );
}

#[test]
fn parquet_records_are_read_and_bad_rows_named_by_row_number() {
    let env = Env::new();
    let s = |v: Vec<Option<&str>>| Arc::new(StringArray::from(v)) as ArrayRef;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("persona_id", DataType::Utf8, true),
        Field::new("kind", DataType::Utf8, true),
        Field::new("source_path", DataType::Utf8, true),
        Field::new("created_at", DataType::Utf8, true),
        Field::new("text", DataType::Utf8, true),
        Field::new("user_id", DataType::Int64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            s(vec![Some("p-1"), Some("p-2"), Some("p-3")]),
            s(vec![Some("ada"), Some("ada"), None]),
            s(vec![
                Some("persona_memory"),
                Some("journal"),
                Some("journal"),
            ]),
            s(vec![Some("m/1.md"), Some("m/2.md"), Some("m/3.md")]),
            s(vec![
                Some("2026-11-28T21:00:00Z"),
                Some("2026-11-28T21:00:00Z"),
                Some("2026-11-28T21:00:00Z"),
            ]),
            s(vec![
                Some("Prefers metric units."),
                Some("Went for a walk."),
                Some("x"),
            ]),
            Arc::new(Int64Array::from(vec![None, Some(7), None])) as ArrayRef,
        ],
    )
    .unwrap();
    let path = env.path("records.parquet");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let text = "Prefers metric units.";
    env.jsonl(
        "annotations.jsonl",
        &[annotation(
            "p-1",
            vec![tag("preference", 0.9, text, text)],
            vec![],
            ("neutral", 0.9),
            ("low", 0.9),
        )],
    );
    env.run(&[
        "--input",
        "records.parquet",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let tags = env.table("promoted_tags");
    assert_eq!(tags.len(), 1);
    assert_eq!(tags[0]["kind"], "persona_memory");
    let rejects = env.table("rejects");
    assert_eq!(rejects.len(), 2);
    assert_eq!(
        (rejects[0]["line"].as_u64(), rejects[0]["field"].as_str()),
        (Some(2), Some("user_id"))
    );
    assert_eq!(
        (rejects[1]["line"].as_u64(), rejects[1]["field"].as_str()),
        (Some(3), Some("persona_id"))
    );
}

#[test]
fn a_folder_of_journals_is_one_record_per_file() {
    let env = Env::new();
    env.write(
        "journals/ada/2026-11-27.md",
        "# 2026-11-27\nI want the migration shipped before the audit.\n",
    );
    env.write(
        "journals/ada/notes.txt",
        "No date here, just a thought about Sam.",
    );
    env.write("journals/milo/x.md", "");
    env.write("journals/loose.md", "Which persona am I?");
    env.write("journals/ada/ignored.pdf", "not a journal");
    env.jsonl("annotations.jsonl", &[]);
    env.run(&[
        "--input",
        "journals",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let abstained = env.table("abstained");
    let ids: Vec<_> = abstained
        .iter()
        .map(|r| r["record_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ada/2026-11-27.md", "ada/notes.txt"]);
    assert!(abstained.iter().all(|r| r["persona_id"] == "ada"));
    let rejects = env.table("rejects");
    let fields: Vec<_> = rejects
        .iter()
        .map(|r| {
            (
                r["record_id"].as_str().unwrap(),
                r["field"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(fields, [("loose.md", "persona_id"), ("milo/x.md", "text")]);

    // With a persona for loose files, the root file is a record too; its date comes from its first line.
    let env2 = Env::new();
    env2.write("j/2026-11-20.md", "2026-11-20\nDon't message me after 9pm.");
    let text = "2026-11-20\nDon't message me after 9pm.";
    env2.jsonl(
        "annotations.jsonl",
        &[annotation(
            "2026-11-20.md",
            vec![tag("boundary", 0.9, text, "Don't message me after 9pm.")],
            vec![],
            ("neutral", 0.9),
            ("high", 0.9),
        )],
    );
    env2.run(&[
        "--input",
        "j",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "staging",
        "--journal-persona",
        "ada",
    ])
    .ok();
    let tags = env2.table("promoted_tags");
    assert_eq!(tags[0]["created_at"], "2026-11-20T00:00:00Z");
    assert_eq!(tags[0]["persona_id"], "ada");
}

#[test]
fn annotation_lines_that_match_no_record_are_reported() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("r1", "Keep it short.")]);
    env.write(
        "annotations.jsonl",
        "{\"record_id\": \"ghost\", \"tags\": []}\n{\"tags\": []}\n{\"record_id\": \"r1\", \"tags\": []}\n{\"record_id\": \"r1\", \"tags\": []}\n",
    );
    let ran = env.run_std(&[]).ok();
    assert!(
        ran.stdout.contains("3 lines match no record"),
        "{}",
        ran.stdout
    );
    let rejects = env.table("rejects");
    let got: Vec<_> = rejects
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["record_id"].as_str(),
                r["input"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (2, None, "annotations"),
            (3, Some("r1"), "annotations"),
            (1, Some("ghost"), "annotations")
        ]
    );
}

/// Every codec the common writers use (snappy is pandas', pyarrow's,
/// Polars' and DuckDB's default): one records file and one registry file
/// per codec and writer, all read in full.
#[test]
fn snappy_gzip_lz4_brotli_and_zstd_parquet_from_pyarrow_and_duckdb_are_read() {
    let fixtures = repo().join("tests/fixtures/parquet");
    let codecs = [
        ("pyarrow", "snappy"),
        ("pyarrow", "gzip"),
        ("pyarrow", "lz4"),
        ("pyarrow", "brotli"),
        ("pyarrow", "zstd"),
        ("pyarrow", "none"),
        ("duckdb", "snappy"),
        ("duckdb", "gzip"),
        ("duckdb", "lz4"),
        ("duckdb", "brotli"),
        ("duckdb", "zstd"),
        ("duckdb", "uncompressed"),
    ];
    let text = "Prefers metric units.";
    for (writer, codec) in codecs {
        let env = Env::new();
        let records = fixtures.join(format!("records-{writer}-{codec}.parquet"));
        let nodes = fixtures.join(format!("nodes-{writer}-{codec}.parquet"));
        env.jsonl(
            "annotations.jsonl",
            &[annotation(
                "c-1",
                vec![tag("preference", 0.9, text, text)],
                vec![edge("c-1", "preference", "user:sam", 0.9, text, text)],
                ("neutral", 0.9),
                ("low", 0.9),
            )],
        );
        let ran = env.run(&[
            "--input",
            records.to_str().unwrap(),
            "--nodes",
            nodes.to_str().unwrap(),
            "--annotations",
            "annotations.jsonl",
            "--staging",
            "staging",
        ]);
        assert_eq!(ran.code, 0, "{writer} {codec}: {}", ran.stderr);
        assert!(env.table("rejects").is_empty(), "{writer} {codec}");
        let receipt = env.receipt();
        assert_eq!(
            receipt["counts"]["processed"], 3,
            "{writer} {codec}: {receipt}"
        );
        let tags = env.table("promoted_tags");
        assert_eq!(tags.len(), 1, "{writer} {codec}");
        assert_eq!(tags[0]["record_id"], "c-1");
        // The registry was read: the edge's target is known.
        for row in env.table("quarantine") {
            assert!(
                !reasons(&row).contains(&"unknown_target_node".to_string()),
                "{writer} {codec}: {row:?}"
            );
        }
    }
}

/// arrow-rs writes both LZ4 framings (the Hadoop-framed `LZ4` and
/// `LZ4_RAW`); both are read back.
#[test]
fn lz4_framed_and_raw_parquet_records_are_read() {
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;
    for compression in [Compression::LZ4, Compression::LZ4_RAW] {
        let env = Env::new();
        let s = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
        let schema = Arc::new(Schema::new(
            [
                "id",
                "persona_id",
                "kind",
                "source_path",
                "created_at",
                "text",
            ]
            .map(|n| Field::new(n, DataType::Utf8, false))
            .to_vec(),
        ));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                s(vec!["z-1"]),
                s(vec!["ada"]),
                s(vec!["persona_memory"]),
                s(vec!["m/1.md"]),
                s(vec!["2026-11-28T21:00:00Z"]),
                s(vec!["Prefers metric units."]),
            ],
        )
        .unwrap();
        let props = WriterProperties::builder()
            .set_compression(compression)
            .build();
        let path = env.path("records.parquet");
        let mut w = parquet::arrow::ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            schema,
            Some(props),
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let text = "Prefers metric units.";
        env.jsonl(
            "annotations.jsonl",
            &[annotation(
                "z-1",
                vec![tag("preference", 0.9, text, text)],
                vec![],
                ("neutral", 0.9),
                ("low", 0.9),
            )],
        );
        let ran = env.run(&[
            "--input",
            "records.parquet",
            "--annotations",
            "annotations.jsonl",
            "--staging",
            "staging",
        ]);
        assert_eq!(ran.code, 0, "{compression:?}: {}", ran.stderr);
        assert_eq!(env.table("promoted_tags").len(), 1, "{compression:?}");
    }
}

/// A staging directory kept inside the journal folder that is the input
/// is never walked: the second night does not read the first night's
/// `report.md` (or anything else it staged) back as a record.
#[test]
fn staging_inside_the_journal_folder_is_never_read_back_as_records() {
    let env = Env::new();
    env.write(
        "journals/ada/2026-11-27.md",
        "# 2026-11-27\nI want the migration shipped before the audit.\n",
    );
    env.write("annotations.jsonl", "");
    for night in 0..2 {
        let ran = env.run(&[
            "--input",
            "journals",
            "--annotations",
            "annotations.jsonl",
            "--staging",
            "journals/staging",
        ]);
        assert_eq!(ran.code, 0, "night {night}: {}", ran.stderr);
        let receipt = read_json_file(
            &env.path("journals/staging")
                .join("runs")
                .join(
                    std::fs::read_to_string(env.path("journals/staging/LATEST"))
                        .unwrap()
                        .trim(),
                )
                .join("receipt.json"),
        );
        assert_eq!(
            receipt["counts"]["records_in"], 1,
            "night {night}: {receipt}"
        );
        assert_eq!(receipt["counts"]["rejected"], 0, "night {night}: {receipt}");
    }
    assert!(env.path("journals/staging/.tomlite-staging").is_file());
}

fn read_json_file(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}
