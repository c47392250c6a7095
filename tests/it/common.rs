//! Helpers: run the real `tomlite` binary in a temp dir and read its outputs back.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Value, json};

/// A scratch directory with input files and a staging directory.
pub struct Env {
    pub dir: tempfile::TempDir,
}

/// The finished command.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    fn from(o: Output) -> Self {
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tomlite"))
}

/// The repository root (for the bundled sample).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Env {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn staging(&self) -> PathBuf {
        self.path("staging")
    }

    /// Writes `lines` as a file and returns its path.
    pub fn write(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p
    }

    pub fn jsonl(&self, name: &str, rows: &[Value]) -> PathBuf {
        let mut s = String::new();
        for r in rows {
            s.push_str(&r.to_string());
            s.push('\n');
        }
        self.write(name, s)
    }

    /// `tomlite <sub> <args>` in the temp dir.
    pub fn cmd(&self, sub: &str, args: &[&str]) -> Ran {
        let mut cmd = bin();
        cmd.current_dir(self.dir.path()).arg(sub).args(args);
        Ran::from(cmd.output().expect("spawn tomlite"))
    }

    /// `tomlite train --frozen` on the first 40 records of `part-a.jsonl`
    /// for 2 epochs into `heads/` (cache in `cache/`), with `extra` arguments.
    pub fn train_small(&self, extra: &[&str]) -> Output {
        let shared = repo().join("data/goemotions");
        let data = repo().join("data/training/tom_lite/part-a.jsonl");
        bin()
            .current_dir(self.dir.path())
            .args([
                "train", "--frozen", "--limit", "40", "--epochs", "2", "--out", "heads", "--cache",
                "cache",
            ])
            .args([
                "--goemotions",
                shared.to_str().unwrap(),
                "--data",
                data.to_str().unwrap(),
            ])
            .args(extra)
            .output()
            .unwrap()
    }

    /// `tomlite run --input records.jsonl --nodes <the sample's registry> --staging staging`.
    pub fn run_with_sample_nodes(&self) -> Ran {
        let nodes = repo().join("data/sample/nodes.jsonl");
        self.run(&[
            "--input",
            "records.jsonl",
            "--nodes",
            nodes.to_str().unwrap(),
            "--staging",
            "staging",
        ])
    }

    /// `tomlite run` with the given extra arguments, in the temp dir.
    pub fn run(&self, args: &[&str]) -> Ran {
        let mut cmd = bin();
        cmd.current_dir(self.dir.path()).arg("run").args(args);
        Ran::from(cmd.output().expect("spawn tomlite"))
    }

    /// `tomlite run --input records.jsonl --annotations annotations.jsonl --staging staging [--nodes nodes.jsonl]`.
    pub fn run_std(&self, extra: &[&str]) -> Ran {
        let mut args = vec![
            "--input",
            "records.jsonl",
            "--annotations",
            "annotations.jsonl",
            "--staging",
            "staging",
        ];
        if self.path("nodes.jsonl").exists() {
            args.extend(["--nodes", "nodes.jsonl"]);
        }
        args.extend(extra);
        self.run(&args)
    }

    /// `tomlite run` on the bundled sample (records and node registry) into
    /// `staging`, with `extra` arguments.
    pub fn run_sample(&self, extra: &[&str]) -> Ran {
        let data = repo().join("data/sample");
        let records = data.join("records.jsonl");
        let nodes = data.join("nodes.jsonl");
        let mut args = vec![
            "--input",
            records.to_str().unwrap(),
            "--nodes",
            nodes.to_str().unwrap(),
            "--staging",
            "staging",
        ];
        args.extend(extra);
        self.run(&args)
    }

    /// The directory `LATEST` names.
    pub fn latest(&self) -> PathBuf {
        let id = std::fs::read_to_string(self.staging().join("LATEST")).expect("LATEST");
        self.staging().join("runs").join(id.trim())
    }

    pub fn table(&self, name: &str) -> Vec<Map<String, Value>> {
        read_table(&self.latest().join(format!("{name}.parquet")))
    }

    pub fn receipt(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.latest().join("receipt.json")).unwrap()).unwrap()
    }
}

/// Reads a Parquet file into JSON rows (strings, floats, integers, string
/// lists; a binary cell reads as its length in bytes).
pub fn read_table(path: &Path) -> Vec<Map<String, Value>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).expect("table exists"))
        .unwrap()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let schema = batch.schema();
        for i in 0..batch.num_rows() {
            let mut m = Map::new();
            for (f, col) in schema.fields().iter().zip(batch.columns()) {
                m.insert(f.name().clone(), cell(col, i));
            }
            rows.push(m);
        }
    }
    rows
}

fn cell(col: &ArrayRef, i: usize) -> Value {
    if col.is_null(i) {
        return Value::Null;
    }
    match col.data_type() {
        DataType::Utf8 => json!(col.as_string::<i32>().value(i)),
        DataType::Float64 => json!(col.as_primitive::<Float64Type>().value(i)),
        DataType::UInt64 => json!(col.as_primitive::<UInt64Type>().value(i)),
        DataType::UInt32 => json!(col.as_primitive::<UInt32Type>().value(i)),
        DataType::Binary => json!(col.as_binary::<i32>().value(i).len()),
        DataType::List(_) => {
            let l = col.as_list::<i32>().value(i);
            Value::Array((0..l.len()).map(|j| cell(&l, j)).collect())
        }
        other => panic!("unexpected column type {other}"),
    }
}

/// Every line of a JSONL file, parsed.
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The text of `text` at an item's byte offsets (`quote_start`,
/// `quote_end`: a tag, an edge or a sensitive detection, as JSON or as a
/// table row); panics, naming the item, when they are missing or not on
/// character boundaries.
pub fn at_offsets<'a, I>(text: &'a str, item: &I) -> &'a str
where
    I: for<'k> std::ops::Index<&'k str, Output = Value> + std::fmt::Debug + ?Sized,
{
    let offset = |k: &str| {
        item[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} missing in {item:?}")) as usize
    };
    text.get(offset("quote_start")..offset("quote_end"))
        .unwrap_or_else(|| panic!("offsets off the text's characters: {item:?}"))
}

/// A valid record.
pub fn record(id: &str, text: &str) -> Value {
    json!({"id": id, "persona_id": "ada", "kind": "journal", "source_path": format!("journals/{id}.md"),
           "created_at": "2026-11-28T21:00:00Z", "text": text})
}

/// A tag quoting `quote` (found in `text`) with byte offsets.
pub fn tag(kind: &str, conf: f64, text: &str, quote: &str) -> Value {
    let s = text
        .find(quote)
        .unwrap_or_else(|| panic!("{quote:?} not in {text:?}"));
    json!({"tom_kind": kind, "confidence": conf, "source_quote": quote, "quote_start": s, "quote_end": s + quote.len()})
}

/// An edge quoting `quote` (found in `text`).
pub fn edge(
    record_id: &str,
    relation: &str,
    target: &str,
    conf: f64,
    text: &str,
    quote: &str,
) -> Value {
    let s = text.find(quote).unwrap();
    json!({"source_node": format!("memory:{record_id}"), "relation": relation, "target_node": target,
           "confidence": conf, "source_quote": quote, "quote_start": s, "quote_end": s + quote.len()})
}

/// An annotation with the given tags and edges, affect and intensity.
pub fn annotation(
    record_id: &str,
    tags: Vec<Value>,
    edges: Vec<Value>,
    affect: (&str, f64),
    intensity: (&str, f64),
) -> Value {
    json!({"record_id": record_id, "annotator": "test@1", "tags": tags, "edges": edges,
           "affect": {"label": affect.0, "confidence": affect.1},
           "intensity": {"label": intensity.0, "confidence": intensity.1}})
}

/// Rows of `rows` whose `key` equals `value`.
pub fn by<'a>(
    rows: &'a [Map<String, Value>],
    key: &str,
    value: &str,
) -> Vec<&'a Map<String, Value>> {
    rows.iter()
        .filter(|r| r.get(key).and_then(Value::as_str) == Some(value))
        .collect()
}

/// The reasons of a quarantine row, as strings.
pub fn reasons(row: &Map<String, Value>) -> Vec<String> {
    row["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}
