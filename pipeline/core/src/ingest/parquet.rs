//! Parquet record files: each row is turned into the same field map as a
//! JSONL line and checked by the same rules, so a mistyped optional column
//! is reported per row with its field, like a mistyped JSON value. A file
//! no row of which can be a record (not Parquet, a required column missing
//! or of the wrong type) is one reject for the whole file, at line 0.

use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampNanosecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use chrono::{DateTime, SecondsFormat, Utc};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};
use serde_json::{Map, Value};

use crate::ingest::record::{
    IngestError, IngestOptions, Item, Items, Origin, RECORD_FIELDS, REQUIRED_FIELDS, Reject,
    record_from_map,
};

/// Streams the rows of a Parquet file, 1,024 at a time, one row group
/// after the other.
///
/// A file that cannot be read as Parquet, or whose schema lacks a required
/// column or gives one a type no row could pass with, yields one reject for
/// the whole file (line 0, the column as its field) instead of failing the
/// run: the other inputs go on. A row group that cannot be decoded yields
/// one reject at its first row not yet read, naming the rows it loses; the
/// rows before it and the row groups after it stand.
///
/// `file` is the input, opened once: the one its sha256 is read from.
pub fn open_file(file: File, path: &Path, opts: &IngestOptions) -> Result<Items, IngestError> {
    let source = path.display().to_string();
    let meta = match ArrowReaderMetadata::load(&file, ArrowReaderOptions::default()) {
        Ok(m) => m,
        Err(e) => {
            return Ok(whole_file(
                &source,
                None,
                format!("not a readable Parquet file: {e}"),
            ));
        }
    };
    if let Some((field, error)) = schema_problem(meta.schema(), meta.metadata()) {
        return Ok(whole_file(&source, Some(field), error));
    }
    Ok(Box::new(ParquetRecords {
        file,
        meta,
        group: 0,
        reader: None,
        group_end: 0,
        source,
        batch: None,
        pos: 0,
        row: 0,
        opts: opts.clone(),
    }))
}

/// One reject standing for a whole file.
fn whole_file(source: &str, field: Option<&str>, error: String) -> Items {
    Box::new(std::iter::once(Ok(Item::Reject(Reject {
        source: source.to_string(),
        line: 0,
        record_id: None,
        field: field.map(str::to_string),
        error,
    }))))
}

/// Whether a column of this type can hold a value a record field accepts.
fn holds_strings(dt: &DataType, timestamps_too: bool) -> bool {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Timestamp(_, _) => timestamps_too,
        DataType::Dictionary(_, v) => holds_strings(v, timestamps_too),
        _ => false,
    }
}

/// The first required column that is missing or of a type no row could
/// pass with, and the error to report for the file.
fn schema_problem(
    schema: &arrow_schema::SchemaRef,
    meta: &parquet::file::metadata::ParquetMetaData,
) -> Option<(&'static str, String)> {
    let rows = meta.file_metadata().num_rows();
    let found = || {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    for name in REQUIRED_FIELDS {
        match schema.field_with_name(name) {
            Err(_) => {
                return Some((
                    name,
                    format!(
                        "wrong schema: no `{name}` column (columns: {}); \
                         none of the file's {rows} rows can be a record",
                        found()
                    ),
                ));
            }
            Ok(f) if !holds_strings(f.data_type(), name == "created_at") => {
                return Some((
                    name,
                    format!(
                        "wrong schema: column `{name}` is {}, expected a string; \
                         none of the file's {rows} rows can be a record",
                        f.data_type()
                    ),
                ));
            }
            Ok(_) => {}
        }
    }
    None
}

struct ParquetRecords {
    file: File,
    meta: ArrowReaderMetadata,
    /// The next row group to open.
    group: usize,
    /// The open row group's reader.
    reader: Option<ParquetRecordBatchReader>,
    /// Rows in the file up to the end of the open row group.
    group_end: u64,
    source: String,
    batch: Option<Vec<Option<ArrayRef>>>,
    pos: usize,
    /// Rows yielded or skipped so far.
    row: u64,
    opts: IngestOptions,
}

impl ParquetRecords {
    /// A reader of row group `g` alone.
    fn open_group(&self, g: usize) -> Result<ParquetRecordBatchReader, String> {
        let file = self.file.try_clone().map_err(|e| e.to_string())?;
        ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.meta.clone())
            .with_row_groups(vec![g])
            .with_batch_size(1024)
            .build()
            .map_err(|e| e.to_string())
    }

    /// The reject for the unread rest of the open row group; reading goes
    /// on at the next one.
    fn lose_group(&mut self, g: usize, error: String) -> Item {
        let (first, last) = (self.row + 1, self.group_end);
        let groups = self.meta.metadata().num_row_groups();
        self.row = self.group_end;
        self.reader = None;
        self.batch = None;
        Item::Reject(Reject {
            source: self.source.clone(),
            line: first,
            record_id: None,
            field: None,
            error: format!(
                "cannot decode rows {first} to {last} (row group {} of {groups}): {error}; \
                 those rows are not read",
                g + 1
            ),
        })
    }
}

impl Iterator for ParquetRecords {
    type Item = Result<Item, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(cols) = &self.batch {
                let len = cols.iter().flatten().map(|c| c.len()).next().unwrap_or(0);
                if self.pos < len {
                    let i = self.pos;
                    self.pos += 1;
                    self.row += 1;
                    let mut m = Map::new();
                    for (name, col) in RECORD_FIELDS.iter().zip(cols) {
                        if let Some(col) = col {
                            m.insert((*name).to_string(), cell(col, i));
                        }
                    }
                    let origin = Origin {
                        source: self.source.clone(),
                        line: self.row,
                    };
                    return Some(Ok(match record_from_map(&m, origin, &self.opts) {
                        Ok(r) => Item::Record(Box::new(r)),
                        Err(r) => Item::Reject(r),
                    }));
                }
                self.batch = None;
            }
            let Some(reader) = self.reader.as_mut() else {
                let groups = self.meta.metadata().row_groups();
                let g = self.group;
                let group = groups.get(g)?;
                self.group_end += u64::try_from(group.num_rows()).unwrap_or(0);
                self.group = g + 1;
                match self.open_group(g) {
                    Ok(r) => self.reader = Some(r),
                    Err(e) => return Some(Ok(self.lose_group(g, e))),
                }
                continue;
            };
            let batch: RecordBatch = match reader.next() {
                None => {
                    self.reader = None;
                    continue;
                }
                Some(Ok(b)) => b,
                Some(Err(e)) => return Some(Ok(self.lose_group(self.group - 1, e.to_string()))),
            };
            if batch.num_rows() == 0 {
                continue;
            }
            self.batch = Some(
                RECORD_FIELDS
                    .iter()
                    .map(|f| batch.column_by_name(f).cloned())
                    .collect(),
            );
            self.pos = 0;
        }
    }
}

/// Reads every row of a small Parquet file (the node registry) as field maps.
pub fn rows(path: &Path, fields: &[&str]) -> Result<Vec<Map<String, Value>>, IngestError> {
    let mut out = Vec::new();
    rows_each(path, fields, |m| out.push(m))?;
    Ok(out)
}

/// Streams the rows of a Parquet file as field maps (only `fields`), one
/// batch in memory at a time.
pub fn rows_each(
    path: &Path,
    fields: &[&str],
    mut each: impl FnMut(Map<String, Value>),
) -> Result<(), IngestError> {
    let file = File::open(path).map_err(|source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|source| IngestError::Parquet {
            path: path.to_path_buf(),
            source,
        })?;
    for batch in reader {
        let batch = batch.map_err(|source| IngestError::Arrow {
            path: path.to_path_buf(),
            source,
        })?;
        let cols: Vec<(&str, &ArrayRef)> = fields
            .iter()
            .filter_map(|f| batch.column_by_name(f).map(|c| (*f, c)))
            .collect();
        for i in 0..batch.num_rows() {
            let mut m = Map::new();
            for (f, col) in &cols {
                m.insert((*f).to_string(), cell(col, i));
            }
            each(m);
        }
    }
    Ok(())
}

/// One cell as a JSON value: strings stay strings, timestamps become RFC3339,
/// lists become arrays, other types keep their JSON type (and are then
/// rejected by the field check that expected a string).
fn cell(col: &ArrayRef, i: usize) -> Value {
    if col.is_null(i) {
        return Value::Null;
    }
    match col.data_type() {
        DataType::Utf8 => Value::from(col.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Value::from(col.as_string::<i64>().value(i)),
        DataType::Utf8View => Value::from(col.as_string_view().value(i)),
        DataType::Timestamp(_, _) => {
            let ns = arrow_cast::cast(
                &col.slice(i, 1),
                &DataType::Timestamp(TimeUnit::Nanosecond, None),
            )
            .ok()
            .map(|a| a.as_primitive::<TimestampNanosecondType>().value(0));
            match ns {
                Some(ns) => {
                    let t: DateTime<Utc> = DateTime::from_timestamp_nanos(ns);
                    Value::from(t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
                }
                None => Value::from(format!("{:?}", col.data_type())),
            }
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let list = match col.data_type() {
                DataType::List(_) => col.as_list::<i32>().value(i),
                _ => col.as_list::<i64>().value(i),
            };
            Value::Array((0..list.len()).map(|j| cell(&list, j)).collect())
        }
        DataType::Boolean => Value::from(col.as_boolean().value(i)),
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => match arrow_cast::cast(&col.slice(i, 1), &DataType::Int64) {
            Ok(a) => Value::from(a.as_primitive::<Int64Type>().value(0)),
            Err(_) => Value::Null,
        },
        DataType::UInt64 => Value::from(
            col.as_primitive::<arrow_array::types::UInt64Type>()
                .value(i),
        ),
        DataType::Float64 => Value::from(col.as_primitive::<Float64Type>().value(i)),
        DataType::Float32 => match arrow_cast::cast(&col.slice(i, 1), &DataType::Float64) {
            Ok(a) => Value::from(a.as_primitive::<Float64Type>().value(0)),
            Err(_) => Value::Null,
        },
        DataType::Null => Value::Null,
        DataType::Dictionary(_, values) => match arrow_cast::cast(&col.slice(i, 1), values) {
            Ok(a) => cell(&a, 0),
            Err(_) => Value::Null,
        },
        other => serde_json::json!({ "unsupported_type": other.to_string() }),
    }
}
