use foldhash::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::run_dir::tmp_sibling;
use crate::{Error, sync_dir};

/// A 128-bit content digest (a truncated sha256), stored as 32 hex digits.
pub type Digest = [u8; 16];

const FILE: &str = "records.parquet";
/// `records.parquet.next-<run_id>`: a run's next state, before its commit.
pub(crate) const NEXT_INFIX: &str = ".next-";
const RUNS_KEY: &str = "tomlite.committed_runs";
/// Each committed run's `receipt.json` sha256, by run id.
const RECEIPTS_KEY: &str = "tomlite.receipt_sha256";
const BATCH: usize = 8192;

/// A stored embedding: interned persona and int8 values.
type Vector = (u32, Box<[i8]>);

/// One processed record, as a run reports it to the state.
#[derive(Debug, Clone, Copy)]
pub struct StateRow<'a> {
    /// The record's id.
    pub record_id: &'a str,
    /// Digest of the record's content and metadata.
    pub fingerprint: Digest,
    /// Who annotated it (model id or annotator name).
    pub annotator: &'a str,
    /// Digest of what the annotator produced or of the model's weights.
    pub annotation: Digest,
    /// sha256 of the effective policy.
    pub policy_sha256: &'a str,
    /// The run that processed it.
    pub run_id: &'a str,
    /// What became of it (the pipeline's word).
    pub outcome: &'a str,
    /// The group its embedding is compared within (the persona), if any.
    pub persona_id: Option<&'a str>,
    /// The record's embedding, quantised to int8, if the annotator made one.
    pub embedding: Option<&'a [i8]>,
    /// Committed runs in a row whose annotation of this content failed (0
    /// for a record that was annotated).
    pub failures: u32,
}

/// A record's entry in the state, with its strings interned.
#[derive(Debug, Clone, Copy)]
pub struct StateEntry {
    /// Digest of the record's content and metadata.
    pub fingerprint: Digest,
    /// Digest of the annotation or model.
    pub annotation: Digest,
    annotator: u32,
    policy: u32,
    run: u32,
    outcome: u32,
    /// Committed runs in a row whose annotation of this content failed.
    pub failures: u32,
}

/// The processed-record state: what committed runs processed, by record id.
///
/// Kept in memory as one compact entry per record (digests inline,
/// low-cardinality strings interned), about 100 bytes a record.
#[derive(Debug, Default)]
pub struct State {
    entries: HashMap<Box<str>, StateEntry>,
    strings: Vec<String>,
    string_ix: HashMap<String, u32>,
    runs: Vec<String>,
    /// Run id → sha256 of its `receipt.json`, recorded by its commit (runs
    /// committed before receipts were anchored have none).
    receipts: std::collections::BTreeMap<String, String>,
    /// Record id → (interned persona, int8 embedding).
    vectors: HashMap<Box<str>, Vector>,
}

impl State {
    /// Reads `dir/records.parquet`; an absent file is an empty state.
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let path = dir.join(FILE);
        let mut state = Self::default();
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(state),
            Err(source) => return Err(Error::io("open", &path, source)),
        };
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|source| Error::parquet(&path, source))?;
        if let Some(kv) = builder.metadata().file_metadata().key_value_metadata() {
            for entry in kv {
                if entry.key == RUNS_KEY {
                    let value = entry.value.as_deref().unwrap_or("[]");
                    state.runs = serde_json::from_str(value).map_err(|e| Error::BadState {
                        path: path.clone(),
                        message: format!("{RUNS_KEY}: {e}"),
                    })?;
                }
                if entry.key == RECEIPTS_KEY {
                    let value = entry.value.as_deref().unwrap_or("{}");
                    state.receipts = serde_json::from_str(value).map_err(|e| Error::BadState {
                        path: path.clone(),
                        message: format!("{RECEIPTS_KEY}: {e}"),
                    })?;
                }
            }
        }
        let reader = builder
            .with_batch_size(BATCH)
            .build()
            .map_err(|source| Error::parquet(&path, source))?;
        for batch in reader {
            let batch = batch.map_err(|source| Error::Arrow {
                path: path.clone(),
                source,
            })?;
            let col = |name: &str| -> Result<&StringArray, Error> {
                batch
                    .column_by_name(name)
                    .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                    .ok_or_else(|| Error::BadState {
                        path: path.clone(),
                        message: format!("column {name} missing or not a string column"),
                    })
            };
            let (ids, fps, anns, annd, pols, runs, outs) = (
                col("record_id")?,
                col("fingerprint")?,
                col("annotator")?,
                col("annotation_sha")?,
                col("policy_sha256")?,
                col("run_id")?,
                col("outcome")?,
            );
            let personas = batch
                .column_by_name("persona_id")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>());
            let vectors = batch
                .column_by_name("embedding")
                .and_then(|c| c.as_any().downcast_ref::<BinaryArray>());
            // Absent in states written before failures were counted.
            let failures = batch
                .column_by_name("failures")
                .and_then(|c| c.as_any().downcast_ref::<UInt32Array>());
            let mut buf: Vec<i8> = Vec::new();
            for i in 0..batch.num_rows() {
                let bad = |what: &str| Error::BadState {
                    path: path.clone(),
                    message: format!("row {}: {what}", i + 1),
                };
                let fingerprint =
                    parse_digest(fps.value(i)).ok_or_else(|| bad("bad fingerprint"))?;
                let annotation =
                    parse_digest(annd.value(i)).ok_or_else(|| bad("bad annotation_sha"))?;
                state.upsert(StateRow {
                    record_id: ids.value(i),
                    fingerprint,
                    annotator: anns.value(i),
                    annotation,
                    policy_sha256: pols.value(i),
                    run_id: runs.value(i),
                    outcome: outs.value(i),
                    persona_id: personas.filter(|p| p.is_valid(i)).map(|p| p.value(i)),
                    embedding: vectors.filter(|v| v.is_valid(i)).map(|v| {
                        buf.clear();
                        buf.extend(v.value(i).iter().map(|&b| b as i8));
                        buf.as_slice()
                    }),
                    failures: failures.filter(|f| f.is_valid(i)).map_or(0, |f| f.value(i)),
                });
            }
        }
        Ok(state)
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.string_ix.get(s) {
            return i;
        }
        let i = u32::try_from(self.strings.len()).expect("fewer than 2^32 distinct strings");
        self.strings.push(s.to_string());
        self.string_ix.insert(s.to_string(), i);
        i
    }

    /// Inserts or replaces a record's entry.
    pub fn upsert(&mut self, row: StateRow<'_>) {
        let entry = StateEntry {
            fingerprint: row.fingerprint,
            annotation: row.annotation,
            annotator: self.intern(row.annotator),
            policy: self.intern(row.policy_sha256),
            run: self.intern(row.run_id),
            outcome: self.intern(row.outcome),
            failures: row.failures,
        };
        if let Some(e) = self.entries.get_mut(row.record_id) {
            *e = entry;
        } else {
            self.entries.insert(row.record_id.into(), entry);
        }
        match (row.persona_id, row.embedding) {
            (Some(p), Some(v)) => {
                let p = self.intern(p);
                self.vectors
                    .insert(row.record_id.into(), (p, v.to_vec().into_boxed_slice()));
            }
            // Reprocessed without an embedding: an old one would describe
            // an old text.
            _ => {
                self.vectors.remove(row.record_id);
            }
        }
    }

    /// Every stored embedding: record id, persona, int8 values.
    pub fn vectors(&self) -> impl Iterator<Item = (&str, &str, &[i8])> {
        self.vectors
            .iter()
            .map(|(id, (p, v))| (&**id, self.strings[*p as usize].as_str(), &**v))
    }

    /// A record's stored embedding and persona.
    pub fn vector(&self, record_id: &str) -> Option<(&str, &[i8])> {
        self.vectors
            .get(record_id)
            .map(|(p, v)| (self.strings[*p as usize].as_str(), &**v))
    }

    /// Every entry as the row that would recreate it.
    pub fn rows(&self) -> impl Iterator<Item = StateRow<'_>> {
        self.entries.iter().map(|(id, e)| {
            let v = self.vectors.get(id);
            StateRow {
                record_id: id,
                fingerprint: e.fingerprint,
                annotator: self.annotator(e),
                annotation: e.annotation,
                policy_sha256: self.policy(e),
                run_id: self.run(e),
                outcome: self.outcome(e),
                persona_id: v.map(|(p, _)| self.strings[*p as usize].as_str()),
                embedding: v.map(|(_, x)| &**x),
                failures: e.failures,
            }
        })
    }

    /// A record's entry.
    pub fn get(&self, record_id: &str) -> Option<&StateEntry> {
        self.entries.get(record_id)
    }

    /// The annotator an entry names.
    pub fn annotator(&self, e: &StateEntry) -> &str {
        &self.strings[e.annotator as usize]
    }

    /// The policy hash an entry names.
    pub fn policy(&self, e: &StateEntry) -> &str {
        &self.strings[e.policy as usize]
    }

    /// The run that processed an entry's record.
    pub fn run(&self, e: &StateEntry) -> &str {
        &self.strings[e.run as usize]
    }

    /// An entry's outcome.
    pub fn outcome(&self, e: &StateEntry) -> &str {
        &self.strings[e.outcome as usize]
    }

    /// Whether a record id is known to the state.
    pub fn contains(&self, record_id: &str) -> bool {
        self.entries.contains_key(record_id)
    }

    /// Number of records in the state.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the state holds no record.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Committed runs, oldest first.
    pub fn runs(&self) -> &[String] {
        &self.runs
    }

    /// The last committed run.
    pub fn last_run(&self) -> Option<&str> {
        self.runs.last().map(String::as_str)
    }

    /// The sha256 of a committed run's `receipt.json`, as its commit
    /// recorded it.
    pub fn receipt_sha256(&self, run_id: &str) -> Option<&str> {
        self.receipts.get(run_id).map(String::as_str)
    }

    /// Records the sha256 of a run's `receipt.json` (done by the commit).
    pub fn anchor_receipt(&mut self, run_id: &str, sha256: &str) {
        self.receipts.insert(run_id.to_string(), sha256.to_string());
    }

    /// Appends a run to the committed-run history (done by the commit).
    pub fn push_run(&mut self, run_id: &str) {
        if self.last_run() != Some(run_id) {
            self.runs.push(run_id.to_string());
        }
    }

    /// Writes the state to `dir/records.parquet` by atomic replacement,
    /// rows sorted by record id so that equal states give equal files.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, Error> {
        let path = dir.join(FILE);
        let tmp = tmp_sibling(&path);
        self.write_file(&tmp, &path)?;
        fs::rename(&tmp, &path).map_err(|source| Error::io("rename", &path, source))?;
        sync_dir(dir)?;
        Ok(path)
    }

    /// The file a run's next state waits in until its commit: see
    /// [`crate::RunDir::commit`].
    pub(crate) fn next_path(dir: &Path, run_id: &str) -> PathBuf {
        dir.join(format!("{FILE}{NEXT_INFIX}{run_id}"))
    }

    /// Writes the state, complete and synced, to `tmp` (errors name `path`).
    pub(crate) fn write_file(&self, tmp: &Path, path: &Path) -> Result<(), Error> {
        let path = path.to_path_buf();
        let tmp = tmp.to_path_buf();
        let schema = Arc::new(Schema::new(
            [
                "record_id",
                "fingerprint",
                "annotator",
                "annotation_sha",
                "policy_sha256",
                "run_id",
                "outcome",
            ]
            .map(|n| Field::new(n, DataType::Utf8, false))
            .into_iter()
            .chain([
                Field::new("persona_id", DataType::Utf8, true),
                Field::new("embedding", DataType::Binary, true),
                Field::new("failures", DataType::UInt32, false),
            ])
            .collect::<Vec<_>>(),
        ));
        let file =
            crate::files::create_fresh(&tmp).map_err(|source| Error::io("create", &tmp, source))?;
        let clone = file
            .try_clone()
            .map_err(|source| Error::io("open", &tmp, source))?;
        let runs_json = serde_json::to_string(&self.runs).map_err(|source| Error::Json {
            path: path.clone(),
            source,
        })?;
        let receipts_json =
            serde_json::to_string(&self.receipts).map_err(|source| Error::Json {
                path: path.clone(),
                source,
            })?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_key_value_metadata(Some(vec![
                KeyValue::new(RUNS_KEY.to_string(), runs_json),
                KeyValue::new(RECEIPTS_KEY.to_string(), receipts_json),
            ]))
            .build();
        let mut writer = ArrowWriter::try_new(clone, schema.clone(), Some(props))
            .map_err(|source| Error::parquet(&tmp, source))?;
        let mut ids: Vec<&str> = self.entries.keys().map(|k| &**k).collect();
        ids.sort_unstable();
        for chunk in ids.chunks(BATCH) {
            let mut cols: [Vec<String>; 6] = Default::default();
            for id in chunk {
                let e = &self.entries[*id];
                cols[0].push(hex(&e.fingerprint));
                cols[1].push(self.annotator(e).to_string());
                cols[2].push(hex(&e.annotation));
                cols[3].push(self.policy(e).to_string());
                cols[4].push(self.run(e).to_string());
                cols[5].push(self.outcome(e).to_string());
            }
            let mut arrays: Vec<ArrayRef> = vec![Arc::new(StringArray::from(chunk.to_vec()))];
            arrays.extend(
                cols.into_iter()
                    .map(|c| Arc::new(StringArray::from(c)) as ArrayRef),
            );
            let vecs: Vec<Option<&Vector>> = chunk.iter().map(|id| self.vectors.get(*id)).collect();
            arrays.push(Arc::new(StringArray::from(
                vecs.iter()
                    .map(|v| v.map(|(p, _)| self.strings[*p as usize].as_str()))
                    .collect::<Vec<_>>(),
            )));
            // int8 values as their two's-complement bytes.
            let bytes: Vec<Option<Vec<u8>>> = vecs
                .iter()
                .map(|v| v.map(|(_, x)| x.iter().map(|&b| b as u8).collect()))
                .collect();
            arrays.push(Arc::new(BinaryArray::from(
                bytes.iter().map(|b| b.as_deref()).collect::<Vec<_>>(),
            )));
            arrays.push(Arc::new(UInt32Array::from(
                chunk
                    .iter()
                    .map(|id| self.entries[*id].failures)
                    .collect::<Vec<_>>(),
            )));
            let batch =
                RecordBatch::try_new(schema.clone(), arrays).map_err(|source| Error::Arrow {
                    path: tmp.clone(),
                    source,
                })?;
            writer
                .write(&batch)
                .map_err(|source| Error::parquet(&tmp, source))?;
        }
        writer
            .close()
            .map_err(|source| Error::parquet(&tmp, source))?;
        file.sync_all()
            .map_err(|source| Error::io("sync", &tmp, source))
    }
}

fn hex(d: &Digest) -> String {
    let mut s = String::with_capacity(32);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn parse_digest(s: &str) -> Option<Digest> {
    if s.len() != 32 {
        return None;
    }
    let mut d = [0u8; 16];
    for (i, out) in d.iter_mut().enumerate() {
        *out = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(id: &'a str, fp: u8, run: &'a str) -> StateRow<'a> {
        StateRow {
            record_id: id,
            fingerprint: [fp; 16],
            annotator: "file",
            annotation: [7; 16],
            policy_sha256: "abc",
            run_id: run,
            outcome: "annotated",
            persona_id: None,
            embedding: None,
            failures: 0,
        }
    }

    #[test]
    fn state_round_trips_through_parquet_with_its_run_history() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = State::default();
        s.upsert(row("b", 1, "r1"));
        s.upsert(row("a", 2, "r1"));
        s.upsert(row("b", 3, "r2"));
        s.push_run("r1");
        s.push_run("r2");
        s.write(dir.path()).unwrap();
        let back = State::load(dir.path()).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back.runs(), ["r1", "r2"]);
        let b = back.get("b").unwrap();
        assert_eq!(b.fingerprint, [3; 16]);
        assert_eq!(back.run(b), "r2");
        assert_eq!(back.annotator(b), "file");
        assert_eq!(back.outcome(b), "annotated");
        assert!(!dir.path().join("records.parquet.tmp").exists());
    }

    #[test]
    fn failures_round_trip_and_rows_recreate_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = State::default();
        s.upsert(StateRow {
            failures: 2,
            outcome: "failed",
            ..row("a", 1, "r1")
        });
        s.upsert(row("b", 1, "r1"));
        s.write(dir.path()).unwrap();
        let back = State::load(dir.path()).unwrap();
        assert_eq!(back.get("a").unwrap().failures, 2);
        assert_eq!(back.get("b").unwrap().failures, 0);
        let mut copy = State::default();
        for r in back.rows() {
            copy.upsert(r);
        }
        assert_eq!(copy.get("a").unwrap().failures, 2);
        assert_eq!(copy.outcome(copy.get("a").unwrap()), "failed");
        assert_eq!(copy.len(), 2);
    }

    #[test]
    fn embeddings_round_trip_and_a_reprocessed_record_without_one_drops_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = State::default();
        let v: Vec<i8> = vec![-128, -1, 0, 1, 127];
        s.upsert(StateRow {
            persona_id: Some("ada"),
            embedding: Some(&v),
            ..row("a", 1, "r1")
        });
        s.upsert(StateRow {
            persona_id: Some("milo"),
            embedding: Some(&[5, 6]),
            ..row("b", 1, "r1")
        });
        s.upsert(row("c", 1, "r1"));
        s.write(dir.path()).unwrap();
        let mut back = State::load(dir.path()).unwrap();
        assert_eq!(back.vector("a"), Some(("ada", &v[..])));
        assert_eq!(back.vector("b"), Some(("milo", &[5i8, 6][..])));
        assert_eq!(back.vector("c"), None);
        assert_eq!(back.vectors().count(), 2);
        back.upsert(row("a", 2, "r2"));
        assert_eq!(back.vector("a"), None);
    }

    #[test]
    fn digest_hex_round_trip_and_rejects_garbage() {
        let d = [0xab; 16];
        assert_eq!(parse_digest(&hex(&d)), Some(d));
        assert_eq!(parse_digest("zz"), None);
        assert_eq!(parse_digest(&"g".repeat(32)), None);
    }
}
