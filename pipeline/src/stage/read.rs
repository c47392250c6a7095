//! Staged tables read back (by the report, the curator's commands and the
//! run's curated-item suppression): rows of a [`StagedTable`] as field maps
//! keyed by its column names.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Value};

use crate::stage::tables::StagedTable;

/// A staged table that cannot be read (worded as the ingest errors the
/// report and curate printed before this reader existed).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file cannot be opened.
    #[error("cannot read input {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not readable Parquet.
    #[error("cannot read Parquet input {}", path.display())]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A batch cannot be decoded.
    #[error("cannot decode Parquet input {}", path.display())]
    Arrow {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: arrow_schema::ArrowError,
    },
}

/// Which of a table's columns to read.
#[derive(Debug, Clone, Copy)]
pub enum Columns<'c> {
    /// Every column of the table.
    All,
    /// Only these.
    Only(&'c [&'c str]),
}

/// Streams the rows of table `T` at `path` as field maps, one batch in
/// memory at a time. A column the file lacks (a run staged before it was
/// added) is absent from the maps.
pub fn each_row<T: StagedTable>(
    path: &Path,
    columns: Columns<'_>,
    mut each: impl FnMut(Map<String, Value>),
) -> Result<(), ReadError> {
    let names: Vec<&str> = match columns {
        Columns::All => T::columns().iter().map(|c| c.name).collect(),
        Columns::Only(names) => names.to_vec(),
    };
    let file = File::open(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|builder| builder.build())
        .map_err(|source| ReadError::Parquet {
            path: path.to_path_buf(),
            source,
        })?;
    for batch in reader {
        let batch = batch.map_err(|source| ReadError::Arrow {
            path: path.to_path_buf(),
            source,
        })?;
        let present: Vec<(&str, &ArrayRef)> = names
            .iter()
            .filter_map(|name| batch.column_by_name(name).map(|column| (*name, column)))
            .collect();
        for row in 0..batch.num_rows() {
            let mut fields = Map::new();
            for (name, column) in &present {
                fields.insert((*name).to_string(), cell(column, row));
            }
            each(fields);
        }
    }
    Ok(())
}

/// Every row of table `T` at `path` (a small table: the curated decisions,
/// one run's queue).
pub fn all_rows<T: StagedTable>(path: &Path) -> Result<Vec<Map<String, Value>>, ReadError> {
    let mut rows = Vec::new();
    each_row::<T>(path, Columns::All, |row| rows.push(row))?;
    Ok(rows)
}

/// One staged cell as JSON: text, a number, a list of texts, or null.
fn cell(column: &ArrayRef, row: usize) -> Value {
    if column.is_null(row) {
        return Value::Null;
    }
    match column.data_type() {
        DataType::Utf8 => Value::from(column.as_string::<i32>().value(row)),
        DataType::Float64 => Value::from(column.as_primitive::<Float64Type>().value(row)),
        DataType::UInt64 => Value::from(column.as_primitive::<UInt64Type>().value(row)),
        DataType::List(_) => {
            let items = column.as_list::<i32>().value(row);
            Value::Array((0..items.len()).map(|i| cell(&items, i)).collect())
        }
        other => serde_json::json!({ "unsupported_type": other.to_string() }),
    }
}
