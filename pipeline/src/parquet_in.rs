//! Parquet record files: each row is turned into the same field map as a
//! JSONL line and checked by the same rules, so a mistyped column is
//! reported per row with its field, like a mistyped JSON value.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampNanosecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use chrono::{DateTime, SecondsFormat, Utc};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use serde_json::{Map, Value};

use crate::record::{IngestError, IngestOptions, Item, Items, Origin, record_from_map};

const FIELDS: [&str; 8] = [
    "id",
    "persona_id",
    "kind",
    "source_path",
    "created_at",
    "text",
    "flags",
    "user_id",
];

/// Streams the rows of a Parquet file, 1,024 at a time.
pub fn open(path: &Path, opts: &IngestOptions) -> Result<Items, IngestError> {
    let file = File::open(path).map_err(|source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.with_batch_size(1024).build())
        .map_err(|source| IngestError::Parquet {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Box::new(ParquetRecords {
        reader,
        path: path.to_path_buf(),
        source: path.display().to_string(),
        batch: None,
        pos: 0,
        row: 0,
        opts: opts.clone(),
    }))
}

struct ParquetRecords {
    reader: ParquetRecordBatchReader,
    path: std::path::PathBuf,
    source: String,
    batch: Option<Vec<Option<ArrayRef>>>,
    pos: usize,
    row: u64,
    opts: IngestOptions,
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
                    for (name, col) in FIELDS.iter().zip(cols) {
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
            let batch: RecordBatch = match self.reader.next()? {
                Ok(b) => b,
                Err(source) => {
                    return Some(Err(IngestError::Arrow {
                        path: self.path.clone(),
                        source,
                    }));
                }
            };
            if batch.num_rows() == 0 {
                continue;
            }
            self.batch = Some(
                FIELDS
                    .iter()
                    .map(|f| batch.column_by_name(f).cloned())
                    .collect(),
            );
            // A batch where no known column exists still has rows to reject.
            if self
                .batch
                .as_ref()
                .is_some_and(|c| c.iter().all(Option::is_none))
            {
                let n = batch.num_rows();
                self.batch = Some(vec![Some(
                    Arc::new(arrow_array::NullArray::new(n)) as ArrayRef
                )]);
            }
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
        other => serde_json::json!({ "unsupported_type": other.to_string() }),
    }
}
