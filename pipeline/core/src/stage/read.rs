//! Staged tables read back (by the report, the curator's commands and the
//! run's curated-item suppression) into the row structs that write them
//! ([`crate::stage::tables`]), or into a view: a row struct of some of a
//! table's columns ([`StagedView`]). The columns read are the row type's
//! own, so a column added to a row is read back wherever the row is.
//!
//! A row borrows its texts from the record batch it was read from
//! ([`crate::stage::cells`]): it lives for one call of the caller's
//! closure, and what is kept is copied.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use crate::stage::cells::{CellProblem, ReadCells, ReadCursor, Values};
use crate::stage::tables::{Cells, Column, ColumnType, StagedTable, StagedView};

/// A staged table that cannot be read: the file, and the column and row
/// at fault when there is one.
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
    /// The file lacks a column that is never null.
    #[error("{}: wrong schema: no `{column}` column, expected {expected}", path.display())]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column.
        column: &'static str,
        /// What the column holds.
        expected: &'static str,
    },
    /// A column is not of its staged type.
    #[error("{}: wrong schema: column `{column}` is {found}, expected {expected}", path.display())]
    WrongType {
        /// The file.
        path: PathBuf,
        /// The column.
        column: &'static str,
        /// Its type in the file.
        found: DataType,
        /// What the column holds.
        expected: &'static str,
    },
    /// A row's cell cannot be read as its field.
    #[error("{}, row {row}: column `{column}` {problem}", path.display())]
    Cell {
        /// The file.
        path: PathBuf,
        /// The row, from 1.
        row: u64,
        /// The column.
        column: &'static str,
        /// What is wrong with the cell.
        problem: CellProblem,
    },
}

/// What a column of a staged type holds, as the errors word it.
fn expected(column_type: ColumnType) -> &'static str {
    match column_type {
        ColumnType::Text => "a string (Utf8)",
        ColumnType::Float => "a float (Float64)",
        ColumnType::Count => "a count (UInt64)",
        ColumnType::TextList => "a list of strings (List(Utf8))",
    }
}

/// Streams the rows of `V` (a staged table, or a view of one) from the
/// table at `path`, one record batch in memory at a time, decoding only
/// the view's columns. A column the file lacks reads as null when its
/// field is an `Option` (a table staged before the column was added). A
/// missing column that is never null, a column of another type, a null
/// where none may be and a list with a null item are errors naming the
/// file, the column and, for a cell, its row (from 1).
pub fn each_row<V: StagedView>(
    path: &Path,
    mut each: impl FnMut(V::Row<'_>),
) -> Result<(), ReadError> {
    let mut columns = Vec::new();
    <V::Row<'static> as Cells>::columns(V::Table::NAME, &mut columns);
    let table = V::Table::columns();
    assert!(
        columns.iter().all(|column| table.contains(column)),
        "a view of {} reads only the table's columns, as staged",
        V::Table::NAME
    );
    let reader = open(path, &columns)?;
    let mut row_number = 0u64;
    for batch in reader {
        let batch = batch.map_err(|source| ReadError::Arrow {
            path: path.to_path_buf(),
            source,
        })?;
        let decoded = decode(path, &batch, &columns)?;
        for row in 0..batch.num_rows() {
            row_number += 1;
            let mut cursor = ReadCursor::new(&decoded, row);
            let read =
                <V::Row<'_> as ReadCells<'_>>::read(&mut cursor).map_err(|e| ReadError::Cell {
                    path: path.to_path_buf(),
                    row: row_number,
                    column: e.column,
                    problem: e.problem,
                })?;
            each(read);
        }
    }
    Ok(())
}

/// Counts added to a table after tables were staged without them, never
/// null, that read as 0 in a file staged before: `bulk` of
/// `curated.parquet` (decisions applied before bulk decisions existed were
/// made one by one).
const COUNTS_ADDED_LATER: &[&str] = &["bulk"];

fn reads_as_zero_when_absent(column: &Column) -> bool {
    column.column_type == ColumnType::Count
        && !column.nullable
        && COUNTS_ADDED_LATER.contains(&column.name)
}

/// Whether a column of `data_type` holds `column_type`'s values.
fn fits(column_type: ColumnType, data_type: &DataType) -> bool {
    match (column_type, data_type) {
        (ColumnType::Text, DataType::Utf8)
        | (ColumnType::Float, DataType::Float64)
        | (ColumnType::Count, DataType::UInt64) => true,
        (ColumnType::TextList, DataType::List(item)) => item.data_type() == &DataType::Utf8,
        _ => false,
    }
}

/// Opens the table at `path`, its schema checked against `columns`, to
/// read only those.
fn open(path: &Path, columns: &[Column]) -> Result<ParquetRecordBatchReader, ReadError> {
    let parquet = |source| ReadError::Parquet {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(parquet)?;
    let schema = builder.schema().clone();
    let mut roots = Vec::with_capacity(columns.len());
    for column in columns {
        match schema.index_of(column.name) {
            Ok(at) => {
                let found = schema.field(at).data_type();
                if !fits(column.column_type, found) {
                    return Err(wrong_type(path, column, found));
                }
                roots.push(at);
            }
            Err(_) if column.nullable || reads_as_zero_when_absent(column) => {}
            Err(_) => {
                return Err(ReadError::MissingColumn {
                    path: path.to_path_buf(),
                    column: column.name,
                    expected: expected(column.column_type),
                });
            }
        }
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    builder.with_projection(mask).build().map_err(parquet)
}

/// The error of a column of another type than staged.
fn wrong_type(path: &Path, column: &Column, found: &DataType) -> ReadError {
    ReadError::WrongType {
        path: path.to_path_buf(),
        column: column.name,
        found: found.clone(),
        expected: expected(column.column_type),
    }
}

/// A batch's `columns`, each as its staged type (checked when the file
/// was opened), in order.
fn decode<'b>(
    path: &Path,
    batch: &'b RecordBatch,
    columns: &[Column],
) -> Result<Vec<(&'static str, Values<'b>)>, ReadError> {
    columns
        .iter()
        .map(|column| {
            let values = match batch.column_by_name(column.name) {
                None if reads_as_zero_when_absent(column) => Values::Zero,
                None => Values::Absent,
                Some(array) => typed(array, column.column_type)
                    .ok_or_else(|| wrong_type(path, column, array.data_type()))?,
            };
            Ok((column.name, values))
        })
        .collect()
}

/// A column's values as its staged type, if they are of it.
fn typed(array: &ArrayRef, column_type: ColumnType) -> Option<Values<'_>> {
    Some(match column_type {
        ColumnType::Text => Values::Text(array.as_string_opt::<i32>()?),
        ColumnType::Float => Values::Float(array.as_primitive_opt::<Float64Type>()?),
        ColumnType::Count => Values::Count(array.as_primitive_opt::<UInt64Type>()?),
        ColumnType::TextList => {
            let lists = array.as_list_opt::<i32>()?;
            let items = lists.values().as_string_opt::<i32>()?;
            let texts = (0..items.len()).map(|i| items.value(i)).collect();
            Values::TextList(lists, items, texts)
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_schema::{Field, Schema};
    use parquet::arrow::ArrowWriter;

    use arrow_array::{StringArray, UInt64Array};
    use serde_json::Value;

    use super::*;
    use crate::stage::cells::row_json;
    use crate::stage::tables::{
        Provenance, RejectRow, Rejects, Sensitive, SensitiveRow, Table, row, staged_view,
    };

    const REJECTS: [RejectRow<'static>; 2] = [
        RejectRow {
            source: "in.jsonl",
            line: 3,
            record_id: None,
            field: Some("id"),
            error: "missing required field",
            input: "records",
        },
        RejectRow {
            source: "in.parquet",
            line: 0,
            record_id: Some("r-1"),
            field: None,
            error: "wrong schema",
            input: "records",
        },
    ];

    fn write<T: StagedTable>(path: &Path, rows: &[T::Row<'_>]) {
        let mut table = Table::<T>::create_at(path).unwrap();
        for row in rows {
            table.push(row).unwrap();
        }
        table.close().unwrap();
    }

    /// Writes a table of the given columns, outside the staged writer.
    fn write_raw(path: &Path, columns: Vec<(&str, ArrayRef)>) {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let arrays = columns.into_iter().map(|(_, array)| array).collect();
        let batch = RecordBatch::try_new(schema.clone(), arrays).unwrap();
        let mut writer = ArrowWriter::try_new(File::create(path).unwrap(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }

    fn texts(values: &[Option<&str>]) -> ArrayRef {
        Arc::new(StringArray::from(values.to_vec()))
    }

    fn read_all<V: StagedView>(path: &Path) -> Result<Vec<String>, ReadError> {
        let mut rows = Vec::new();
        each_row::<V>(path, |row| rows.push(format!("{row:?}")))?;
        Ok(rows)
    }

    #[test]
    fn rows_read_back_as_the_structs_that_wrote_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rejects.parquet");
        write::<Rejects>(&path, &REJECTS);
        let written: Vec<String> = REJECTS.iter().map(|row| format!("{row:?}")).collect();
        assert_eq!(read_all::<Rejects>(&path).unwrap(), written);

        let flags = ["sensitive", "safety"];
        let sensitive = SensitiveRow {
            record_id: "r",
            persona_id: "p",
            source_path: "s",
            record_kind: "memory",
            category: None,
            confidence: Some(0.75),
            detector: None,
            flags: &flags,
            safety: 1,
            quote: None,
            quote_start: Some(2),
            quote_end: None,
            record_text: "t",
            masked: None,
            provenance: Provenance {
                annotator: "a",
                run_id: "run",
            },
        };
        let no_flags = SensitiveRow {
            flags: &[],
            ..sensitive
        };
        let path = dir.path().join("sensitive.parquet");
        write::<Sensitive>(&path, &[sensitive, no_flags, sensitive]);
        let written: Vec<String> = [sensitive, no_flags, sensitive]
            .iter()
            .map(|row| format!("{row:?}"))
            .collect();
        assert_eq!(read_all::<Sensitive>(&path).unwrap(), written);
    }

    #[test]
    fn a_row_as_json_has_a_field_per_column() {
        let json = row_json(&REJECTS[0]);
        let mut names: Vec<&str> = json.keys().map(String::as_str).collect();
        let mut columns: Vec<&str> = Rejects::columns().iter().map(|c| c.name).collect();
        names.sort_unstable();
        columns.sort_unstable();
        assert_eq!(names, columns);
        assert_eq!(
            Value::Object(json),
            serde_json::json!({"source": "in.jsonl", "line": 3, "record_id": null,
                "field": "id", "error": "missing required field", "input": "records"})
        );
    }

    row! {
        /// Where a reject is.
        pub struct RejectPlace<'a> {
            /// The file.
            pub source: &'a str,
            /// The line.
            pub line: u64,
        }
    }

    staged_view!(
        /// The rejects' places.
        RejectPlaces,
        Rejects,
        RejectPlace
    );

    row! {
        /// A curated decision's id and whether it was decided in bulk.
        pub struct BulkOf<'a> {
            /// The item.
            pub item_id: &'a str,
            /// 1: in bulk.
            pub bulk: u64,
        }
    }

    staged_view!(
        /// Whether each curated decision was made in bulk.
        BulkView,
        crate::stage::tables::CuratedDecisions,
        BulkOf
    );

    #[test]
    fn a_curated_table_staged_before_bulk_decisions_reads_bulk_as_zero() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curated.parquet");
        write_raw(&path, vec![("item_id", texts(&[Some("a#tag0")]))]);
        assert_eq!(read_all::<BulkView>(&path).unwrap().len(), 1);
        let mut bulk = Vec::new();
        each_row::<BulkView>(&path, |r| bulk.push((r.item_id.to_string(), r.bulk))).unwrap();
        assert_eq!(bulk, [("a#tag0".to_string(), 0)]);
        // Present, it is read; another count missing is still an error.
        let ones: ArrayRef = Arc::new(UInt64Array::from(vec![1]));
        write_raw(
            &path,
            vec![("item_id", texts(&[Some("a#tag0")])), ("bulk", ones)],
        );
        bulk.clear();
        each_row::<BulkView>(&path, |r| bulk.push((r.item_id.to_string(), r.bulk))).unwrap();
        assert_eq!(bulk, [("a#tag0".to_string(), 1)]);
        write_raw(&path, vec![("source", texts(&[Some("a")]))]);
        assert!(matches!(
            read_all::<RejectPlaces>(&path).unwrap_err(),
            ReadError::MissingColumn { column: "line", .. }
        ));
    }

    #[test]
    fn a_view_reads_only_its_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rejects.parquet");
        write_raw(
            &path,
            vec![
                ("source", texts(&[Some("in.jsonl")])),
                ("line", Arc::new(UInt64Array::from(vec![7]))),
            ],
        );
        assert_eq!(
            read_all::<RejectPlaces>(&path).unwrap(),
            [r#"RejectPlace { source: "in.jsonl", line: 7 }"#]
        );
        // The whole row needs the columns the view leaves out.
        let error = read_all::<Rejects>(&path).unwrap_err();
        assert!(
            matches!(
                error,
                ReadError::MissingColumn {
                    column: "error",
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn missing_mistyped_and_null_columns_are_named_with_the_file_and_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rejects.parquet");
        let rejects = |line: ArrayRef, input: ArrayRef, field: Option<ArrayRef>| {
            let mut columns = vec![
                ("source", texts(&[Some("a"), Some("b")])),
                ("line", line),
                ("record_id", texts(&[None, None])),
                ("error", texts(&[Some("e"), Some("e")])),
                ("input", input),
            ];
            columns.extend(field.map(|field| ("field", field)));
            write_raw(&path, columns);
            read_all::<Rejects>(&path)
        };
        let lines: ArrayRef = Arc::new(UInt64Array::from(vec![1, 2]));
        let inputs = texts(&[Some("records"), Some("records")]);

        // A nullable column the file lacks (staged before it existed) is null.
        let rows = rejects(lines.clone(), inputs.clone(), None).unwrap();
        assert!(
            rows.iter().all(|row| row.contains("field: None")),
            "{rows:?}"
        );

        let error = rejects(texts(&[Some("1"), Some("2")]), inputs.clone(), None).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{}: wrong schema: column `line` is Utf8, expected a count (UInt64)",
                path.display()
            )
        );
        let error = rejects(lines.clone(), texts(&[Some("records"), None]), None).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{}, row 2: column `input` is null, expected a string",
                path.display()
            )
        );
        let mut field = ListBuilder::new(StringBuilder::new());
        field.append(true);
        field.append(true);
        let error = rejects(lines, inputs, Some(Arc::new(field.finish()))).unwrap_err();
        assert!(
            matches!(
                error,
                ReadError::WrongType {
                    column: "field",
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn a_list_with_a_null_item_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let flags = ["x"];
        let row = SensitiveRow {
            record_id: "r",
            persona_id: "p",
            source_path: "s",
            record_kind: "memory",
            category: None,
            confidence: None,
            detector: None,
            flags: &flags,
            safety: 0,
            quote: None,
            quote_start: None,
            quote_end: None,
            record_text: "t",
            masked: None,
            provenance: Provenance {
                annotator: "a",
                run_id: "run",
            },
        };
        let path = dir.path().join("sensitive.parquet");
        write::<Sensitive>(&path, &[row]);
        // The same table with the flags' item made null.
        let batch = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let mut flags = ListBuilder::new(StringBuilder::new());
        flags.values().append_null();
        flags.append(true);
        let schema = batch.schema();
        let columns = schema
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(field, column)| {
                let column = match field.name().as_str() {
                    "flags" => Arc::new(flags.finish()) as ArrayRef,
                    _ => column.clone(),
                };
                (field.name().as_str(), column)
            })
            .collect::<Vec<_>>();
        let bad = dir.path().join("bad.parquet");
        write_raw(&bad, columns);
        let error = read_all::<Sensitive>(&bad).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{}, row 1: column `flags` holds a null item, expected a list of strings",
                bad.display()
            )
        );
    }
}
