//! One staged cell, and so a row, read back from a record batch: the
//! reading twin of the writer's `Cells` ([`crate::stage::tables`]). The
//! row structs' `row!` implements [`ReadCells`] from the same field list
//! as their columns; [`crate::stage::read`] decodes the batches.

use arrow_array::{Array, Float64Array, ListArray, StringArray, UInt64Array};
use serde_json::{Map, Value};

/// What is wrong with one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CellProblem {
    /// Null in a column that is never null.
    #[error("is null, expected {0}")]
    Null(&'static str),
    /// A list with a null item.
    #[error("holds a null item, expected a list of strings")]
    NullItem,
}

/// A cell that cannot be read as its field: its column and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellError {
    /// The column.
    pub column: &'static str,
    /// Why.
    pub problem: CellProblem,
}

/// A row (or column group, or cell) read from a batch's columns, one per
/// column in column order; and its values as JSON fields named as its
/// columns (how the report lists a row whole).
pub trait ReadCells<'a>: Sized {
    /// Reads the values from the cursor's columns, in column order.
    fn read(cursor: &mut ReadCursor<'a>) -> Result<Self, CellError>;
    /// Inserts the values into `out`: a single cell as `name`, a group as
    /// its own columns.
    fn json_fields(&self, name: &'static str, out: &mut Map<String, Value>);
}

/// A row as JSON: one field per column.
pub fn row_json<'a>(row: &impl ReadCells<'a>) -> Map<String, Value> {
    let mut out = Map::new();
    row.json_fields("", &mut out);
    out
}

/// One column of a record batch, as its staged type.
pub(crate) enum Values<'a> {
    /// A nullable column the file lacks (a table staged before it was
    /// added): every cell reads as null.
    Absent,
    /// A count the file lacks that reads as 0 (see `read::each_row`).
    Zero,
    /// Texts.
    Text(&'a StringArray),
    /// Floats.
    Float(&'a Float64Array),
    /// Counts.
    Count(&'a UInt64Array),
    /// Lists of texts: the lists, their items, and the items'
    /// texts in order (a null item as empty) for rows to borrow slices of.
    TextList(&'a ListArray, &'a StringArray, Vec<&'a str>),
}

/// The columns of one row of a batch, by name, handed to a row's cells in
/// column order (the reading twin of the writer's `RowCursor`).
pub struct ReadCursor<'a> {
    columns: std::slice::Iter<'a, (&'static str, Values<'a>)>,
    row: usize,
}

impl<'a> ReadCursor<'a> {
    /// Row `row` of a batch's `columns`, in the order of the row type read.
    pub(crate) fn new(columns: &'a [(&'static str, Values<'a>)], row: usize) -> Self {
        Self {
            columns: columns.iter(),
            row,
        }
    }

    /// The next column's name and values, and the row. The columns and the
    /// cells read come from the same `row!` field list, so they always agree.
    fn next(&mut self) -> (&'static str, &'a Values<'a>, usize) {
        let (name, values) = self
            .columns
            .next()
            .expect("a row reads exactly its columns");
        (name, values, self.row)
    }
}

/// A text cell: `None` when null (or its column absent).
fn text<'a>(values: &'a Values<'a>, row: usize) -> Result<Option<&'a str>, CellProblem> {
    Ok(match values {
        Values::Text(array) => array.is_valid(row).then(|| array.value(row)),
        Values::Absent => None,
        _ => unreachable!("a cell reads its own column type"),
    })
}

/// A float cell: `None` when null (or its column absent).
fn float<'a>(values: &'a Values<'a>, row: usize) -> Result<Option<f64>, CellProblem> {
    Ok(match values {
        Values::Float(array) => array.is_valid(row).then(|| array.value(row)),
        Values::Absent => None,
        _ => unreachable!("a cell reads its own column type"),
    })
}

/// A count cell: `None` when null (or its column absent).
fn count<'a>(values: &'a Values<'a>, row: usize) -> Result<Option<u64>, CellProblem> {
    Ok(match values {
        Values::Count(array) => array.is_valid(row).then(|| array.value(row)),
        Values::Zero => Some(0),
        Values::Absent => None,
        _ => unreachable!("a cell reads its own column type"),
    })
}

/// A list-of-texts cell: `None` when null (or its column absent); a null
/// item is an error.
fn text_list<'a>(values: &'a Values<'a>, row: usize) -> Result<Option<&'a [&'a str]>, CellProblem> {
    match values {
        Values::TextList(lists, items, texts) => {
            if lists.is_null(row) {
                return Ok(None);
            }
            let offsets = lists.value_offsets();
            let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
            if (start..end).any(|i| items.is_null(i)) {
                return Err(CellProblem::NullItem);
            }
            Ok(Some(&texts[start..end]))
        }
        Values::Absent => Ok(None),
        _ => unreachable!("a cell reads its own column type"),
    }
}

/// A single-column cell read back, as a required and as an optional field:
/// how its value is taken from its column, what a null should have been,
/// and its JSON.
macro_rules! read_cell {
    ($required:ty, $optional:ty, $get:ident, $expected:literal, |$value:ident| $json:expr) => {
        impl<'a> ReadCells<'a> for $required {
            fn read(cursor: &mut ReadCursor<'a>) -> Result<Self, CellError> {
                let (column, values, row) = cursor.next();
                match $get(values, row) {
                    Ok(Some(value)) => Ok(value),
                    Ok(None) => Err(CellError {
                        column,
                        problem: CellProblem::Null($expected),
                    }),
                    Err(problem) => Err(CellError { column, problem }),
                }
            }
            fn json_fields(&self, name: &'static str, out: &mut Map<String, Value>) {
                let $value = self;
                out.insert(name.to_string(), $json);
            }
        }

        impl<'a> ReadCells<'a> for $optional {
            fn read(cursor: &mut ReadCursor<'a>) -> Result<Self, CellError> {
                let (column, values, row) = cursor.next();
                $get(values, row).map_err(|problem| CellError { column, problem })
            }
            fn json_fields(&self, name: &'static str, out: &mut Map<String, Value>) {
                let json = match self {
                    Some($value) => $json,
                    None => Value::Null,
                };
                out.insert(name.to_string(), json);
            }
        }
    };
}

read_cell!(&'a str, Option<&'a str>, text, "a string", |value| {
    Value::from(*value)
});
read_cell!(f64, Option<f64>, float, "a float", |value| Value::from(
    *value
));
read_cell!(u64, Option<u64>, count, "a count", |value| Value::from(
    *value
));
read_cell!(
    &'a [&'a str],
    Option<&'a [&'a str]>,
    text_list,
    "a list of strings",
    |value| Value::Array(value.iter().map(|&text| Value::from(text)).collect())
);
