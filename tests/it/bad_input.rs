//! The bad-input corpus (issue 6, part 7): one night's inputs with every
//! kind of bad line and bad file, good records interleaved. Each bad thing
//! is one reject with its file, line, record id (where one can be read) and
//! field (where one is to blame); every good record is processed; a 50 MB
//! line is never held in memory; a file that cannot be read at all is one
//! reject and the other inputs go on.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};

use crate::common::*;

/// Writes one record batch of string (or `Int64` for `ints`) columns as Parquet.
fn parquet(env: &Env, name: &str, cols: &[(&str, Vec<&str>)], ints: &[(&str, Vec<i64>)]) {
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (n, v) in cols {
        fields.push(Field::new(*n, DataType::Utf8, true));
        arrays.push(Arc::new(StringArray::from(v.clone())));
    }
    for (n, v) in ints {
        fields.push(Field::new(*n, DataType::Int64, true));
        arrays.push(Arc::new(Int64Array::from(v.clone())));
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), arrays).unwrap();
    let file = std::fs::File::create(env.path(name)).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// The record columns for `ids`, every value good.
fn good_columns(ids: &[&'static str]) -> Vec<(&'static str, Vec<&'static str>)> {
    let n = ids.len();
    vec![
        ("id", ids.to_vec()),
        ("persona_id", vec!["ada"; n]),
        ("kind", vec!["persona_memory"; n]),
        ("source_path", vec!["m/p.md"; n]),
        ("created_at", vec!["2026-11-28T21:00:00Z"; n]),
        ("text", vec!["Prefers metric units."; n]),
    ]
}

/// Peak resident memory (VmHWM, KiB) of a running process, if it is still there.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

const HUGE: usize = 50 * 1024 * 1024;

#[test]
fn every_kind_of_bad_input_is_reported_where_it_is_and_the_rest_is_processed() {
    let env = Env::new();
    let good = |id: &str| record(id, "I like short answers.").to_string();
    let with = |id: &str, k: &str, v: Value| {
        let mut r = record(id, "Fine text.");
        r[k] = v;
        r.to_string()
    };

    // a.jsonl: bad lines of every kind between good ones; the last line is
    // cut mid-object with no newline.
    let mut a: Vec<Vec<u8>> = vec![
        good("g-1").into_bytes(),                                                // 1
        br#"{"id": "b-json", "persona_id": "ada", "kind": }"#.to_vec(),          // 2 malformed JSON
        with("b-text-type", "text", json!(["not", "a", "string"])).into_bytes(), // 3
        with("b-flags-type", "flags", json!("sensitive")).into_bytes(),          // 4
        br#"{"id": 17, "persona_id": "ada"}"#.to_vec(),                          // 5 id a number
        Vec::new(),               // 6 raw NUL byte inside a string (below)
        vec![0u8; 8],             // 7 nothing but NUL bytes
        Vec::new(),               // 8 invalid UTF-8 (below)
        good("g-2").into_bytes(), // 9
        // 10: a valid JSON escape of NUL is text like any other.
        record("g-nul-escape", "Before\u{0}after.")
            .to_string()
            .into_bytes(),
        Vec::new(),               // 11: the 50 MB line (below)
        good("g-3").into_bytes(), // 12
        br#"{"id": "b-trunc", "persona_id": "ada", "kind": "jour"#.to_vec(), // 13, no newline
    ];
    let mut nul = br#"{"id": "b-nul", "persona_id": "ada", "kind": "journal", "source_path": "x", "created_at": "2026-11-28T21:00:00Z", "text": "a"#.to_vec();
    nul.extend_from_slice(b"\0b\"}");
    a[5] = nul;
    let mut utf8 = br#"{"id": "b-utf8", "persona_id": "ada", "kind": "journal", "source_path": "x", "created_at": "2026-11-28T21:00:00Z", "text": "caf"#.to_vec();
    utf8.extend_from_slice(&[0xc3, 0x28, 0xff]);
    utf8.extend_from_slice(b"\"}");
    a[7] = utf8;
    let mut huge = br#"{"id": "b-huge", "persona_id": "ada", "kind": "journal", "source_path": "x", "created_at": "2026-11-28T21:00:00Z", "text": ""#.to_vec();
    huge.resize(HUGE, b'z');
    huge.extend_from_slice(b"\"}");
    let huge_len = huge.len();
    a[10] = huge;
    let mut file = std::fs::File::create(env.path("a.jsonl")).unwrap();
    file.write_all(&a.join(&b'\n')).unwrap();
    drop(file);
    drop(a);

    env.write("empty.jsonl", "");
    // Not JSON at all: a CSV export, a compressed file, raw binary.
    env.write(
        "export.csv",
        "id,persona_id,kind,text\nc-1,ada,journal,hello\nc-2,ada,journal,bye\n",
    );
    env.write(
        "records.jsonl.gz",
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x00\x0a\xff\xfe",
    );
    env.write("blob.jsonl", b"\x00\xff\x10\x02\n\x80\x81{}\n");
    // Parquet: not Parquet at all, a schema without the record columns, a
    // required column of the wrong type, then a good file.
    env.write("garbage.parquet", "this is not parquet\n");
    parquet(
        &env,
        "wrong.parquet",
        &[
            ("record_id", vec!["w-1", "w-2", "w-3"]),
            ("body", vec!["a", "b", "c"]),
        ],
        &[],
    );
    let mut typed = good_columns(&["t-1", "t-2"]);
    typed.retain(|(n, _)| *n != "text");
    parquet(&env, "typed.parquet", &typed, &[("text", vec![1, 2])]);
    parquet(&env, "good.parquet", &good_columns(&["p-1", "p-2"]), &[]);

    let text = "I like short answers.";
    env.jsonl(
        "annotations.jsonl",
        &[annotation(
            "g-1",
            vec![tag("preference", 0.9, text, text)],
            vec![],
            ("neutral", 0.9),
            ("low", 0.9),
        )],
    );

    let inputs = [
        "a.jsonl",
        "empty.jsonl",
        "export.csv",
        "records.jsonl.gz",
        "blob.jsonl",
        "garbage.parquet",
        "wrong.parquet",
        "typed.parquet",
        "good.parquet",
    ];
    let mut cmd = bin();
    cmd.current_dir(env.dir.path()).arg("run");
    for i in inputs {
        cmd.args(["--input", i]);
    }
    cmd.args(["--annotations", "annotations.jsonl", "--staging", "staging"]);
    // Watch the process's peak memory while it reads the 50 MB line.
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0;
    let mut samples = 0;
    while child.try_wait().unwrap().is_none() {
        if let Some(kib) = peak_kib(pid) {
            peak = peak.max(kib);
            samples += 1;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    eprintln!("peak RSS {peak} KiB over {samples} samples");
    assert!(samples > 0, "the run was never seen running");
    // The line alone is 50 MiB; the binary's own footprint (the compiled
    // rule sets, the parquet readers) is about 33 MiB in a debug build and
    // less in a release one, so a run that held the line would pass 80 MiB.
    assert!(
        peak < 64 * 1024,
        "peak RSS {peak} KiB: the {huge_len}-byte line was held in memory"
    );

    // Every reject, in input order: file, line, record id, field, message.
    let too_long = format!(
        "line is too long: {huge_len} bytes, over the line limit of 262144 bytes (text limit 32768 bytes); skipped, not loaded"
    );
    type Row<'a> = (&'a str, u64, Option<&'a str>, Option<&'a str>, &'a str);
    let expect: Vec<Row<'_>> = vec![
        (
            "a.jsonl",
            2,
            Some("b-json"),
            None,
            "malformed JSON: expected value at line 1 column 47",
        ),
        (
            "a.jsonl",
            3,
            Some("b-text-type"),
            Some("text"),
            "expected a string, found an array",
        ),
        (
            "a.jsonl",
            4,
            Some("b-flags-type"),
            Some("flags"),
            "expected a list of strings, found a string",
        ),
        (
            "a.jsonl",
            5,
            None,
            Some("id"),
            "expected a string, found a number",
        ),
        (
            "a.jsonl",
            6,
            Some("b-nul"),
            None,
            "malformed JSON: control character (\\u0000-\\u001F) found while parsing a string",
        ),
        (
            "a.jsonl",
            7,
            None,
            None,
            "malformed JSON: expected value at line 1 column 1",
        ),
        (
            "a.jsonl",
            8,
            Some("b-utf8"),
            Some("text"),
            "invalid UTF-8 at byte 127 of the line",
        ),
        ("a.jsonl", 11, Some("b-huge"), Some("text"), &too_long),
        (
            "a.jsonl",
            13,
            Some("b-trunc"),
            None,
            "malformed JSON: EOF while parsing a string at line 1 column 52",
        ),
        (
            "export.csv",
            1,
            None,
            None,
            "malformed JSON: expected value at line 1 column 1",
        ),
        (
            "export.csv",
            2,
            None,
            None,
            "malformed JSON: expected value at line 1 column 1",
        ),
        (
            "export.csv",
            3,
            None,
            None,
            "malformed JSON: expected value at line 1 column 1",
        ),
        (
            "records.jsonl.gz",
            0,
            None,
            None,
            "not JSONL: a gzip-compressed file; decompress it first; the file is not read",
        ),
        (
            "blob.jsonl",
            1,
            None,
            None,
            "invalid UTF-8 at byte 1 of the line",
        ),
        (
            "blob.jsonl",
            2,
            None,
            None,
            "invalid UTF-8 at byte 0 of the line",
        ),
        (
            "garbage.parquet",
            0,
            None,
            None,
            "not a readable Parquet file: ",
        ),
        (
            "wrong.parquet",
            0,
            None,
            Some("id"),
            "wrong schema: no `id` column (columns: record_id, body); none of the file's 3 rows can be a record",
        ),
        (
            "typed.parquet",
            0,
            None,
            Some("text"),
            "wrong schema: column `text` is Int64, expected a string; none of the file's 2 rows can be a record",
        ),
    ];
    let rejects = env.table("rejects");
    let got: Vec<Row<'_>> = rejects
        .iter()
        .map(|r| {
            let source = r["source"].as_str().unwrap();
            (
                source.rsplit('/').next().unwrap(),
                r["line"].as_u64().unwrap(),
                r["record_id"].as_str(),
                r["field"].as_str(),
                r["error"].as_str().unwrap(),
            )
        })
        .collect();
    let wrong: Vec<_> = got
        .iter()
        .zip(&expect)
        .filter(|(g, e)| (g.0, g.1, g.2, g.3) != (e.0, e.1, e.2, e.3) || !g.4.starts_with(e.4))
        .collect();
    assert!(wrong.is_empty(), "got, expected:\n{wrong:#?}");
    assert_eq!(got.len(), expect.len(), "{got:#?}");
    assert!(rejects.iter().all(|r| r["input"] == "records"));
    // The source names the file as given on the command line.
    assert!(
        rejects
            .iter()
            .all(|r| !r["source"].as_str().unwrap().is_empty())
    );
    let garbage = &got[15].4;
    assert!(
        garbage.len() > "not a readable Parquet file: ".len(),
        "the Parquet error says why: {garbage}"
    );

    // Every good record went through: g-1 promoted, the others abstained
    // (no annotation), the Parquet rows after the bad Parquet files too.
    let tags = env.table("promoted_tags");
    assert_eq!(by(&tags, "record_id", "g-1").len(), 1, "{tags:#?}");
    let abstained = env.table("abstained");
    let mut ids: Vec<&str> = abstained
        .iter()
        .map(|r| r["record_id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["g-2", "g-3", "g-nul-escape", "p-1", "p-2"]);
    assert!(env.table("quarantine").is_empty());

    // The counts add up: 13 lines of a.jsonl (8 good or bad lines + 5 more),
    // nothing from the empty file, one item per line or whole-file reject.
    let receipt = env.receipt();
    let counts = &receipt["counts"];
    assert_eq!(counts["rejected"], expect.len() as u64, "{counts}");
    assert_eq!(counts["processed"], 6, "{counts}");
    assert_eq!(counts["records_in"], expect.len() as u64 + 6, "{counts}");
    let per_input: Vec<(String, u64)> = receipt["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let p = PathBuf::from(i["path"].as_str().unwrap());
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                i["records"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = [
        ("a.jsonl", 13),
        ("empty.jsonl", 0),
        ("export.csv", 3),
        ("records.jsonl.gz", 1),
        ("blob.jsonl", 2),
        ("garbage.parquet", 1),
        ("wrong.parquet", 1),
        ("typed.parquet", 1),
        ("good.parquet", 2),
    ]
    .iter()
    .map(|(n, c)| (n.to_string(), *c))
    .collect();
    assert_eq!(per_input, want);
}

#[test]
fn a_parquet_row_group_that_cannot_be_decoded_is_one_reject_and_the_rest_stands() {
    // Three row groups; the second one's `id` page is overwritten with junk.
    let env = Env::new();
    let schema = Arc::new(Schema::new(
        good_columns(&["x"])
            .iter()
            .map(|(n, _)| Field::new(*n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let path = env.path("half.parquet");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        schema.clone(),
        Some(props),
    )
    .unwrap();
    for ids in [["h-1", "h-2"], ["h-3", "h-4"], ["h-5", "h-6"]] {
        let cols: Vec<ArrayRef> = good_columns(&ids)
            .into_iter()
            .map(|(_, v)| Arc::new(StringArray::from(v)) as ArrayRef)
            .collect();
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap())
            .unwrap();
        w.flush().unwrap();
    }
    let meta = w.close().unwrap();
    // The second row group's `id` column chunk: scribble over its page.
    let chunk = &meta.row_groups()[1].columns()[0];
    let start = chunk.data_page_offset() as usize;
    let len = chunk.compressed_size() as usize;
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[start..start + len] {
        *b = 0xff;
    }
    std::fs::write(&path, bytes).unwrap();
    env.write("records.jsonl", format!("{}\n", record("j-1", "Plain.")));
    env.jsonl("annotations.jsonl", &[]);
    env.run(&[
        "--input",
        "half.parquet",
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let mut ids: Vec<String> = env
        .table("abstained")
        .iter()
        .map(|r| r["record_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, ["h-1", "h-2", "h-5", "h-6", "j-1"]);
    let rejects = env.table("rejects");
    assert_eq!(rejects.len(), 1, "{rejects:#?}");
    assert_eq!(rejects[0]["line"], 3);
    let error = rejects[0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("cannot decode rows 3 to 4 (row group 2 of 3): "),
        "{error}"
    );
}
