//! The staged tables: one row struct per table that owns its columns
//! (names, Arrow types, nullability, order) and its values, and a buffered
//! writer that turns rows into Arrow batches of 8,192 for the staging crate.
//!
//! A row struct lists its columns once, as fields: the schema, the cells
//! written and the cells read back ([`crate::stage::cells`]) are all derived
//! from that list, so adding a column is a compile error at every place
//! that builds the row, and the column is read back wherever the row is. A
//! field of a group type ([`Provenance`], [`ParseCells`], ...) stands for
//! that group's columns, in place.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, ListBuilder, StringBuilder, UInt64Builder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use tomlite_staging::{RunDir, TableWriter};

use crate::stage::cells::ReadCells;

/// The Arrow type of a column, as staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// UTF-8 text.
    Text,
    /// 64-bit float.
    Float,
    /// Unsigned 64-bit integer.
    Count,
    /// List of UTF-8 texts (items nullable, as Arrow names them `item`).
    TextList,
}

impl ColumnType {
    fn data_type(self) -> DataType {
        match self {
            Self::Text => DataType::Utf8,
            Self::Float => DataType::Float64,
            Self::Count => DataType::UInt64,
            Self::TextList => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        }
    }

    fn builder(self) -> ColumnBuilder {
        match self {
            Self::Text => ColumnBuilder::Text(StringBuilder::new()),
            Self::Float => ColumnBuilder::Float(Float64Builder::new()),
            Self::Count => ColumnBuilder::Count(UInt64Builder::new()),
            Self::TextList => ColumnBuilder::TextList(ListBuilder::new(StringBuilder::new())),
        }
    }
}

/// One staged column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub column_type: ColumnType,
    /// Whether it may hold nulls.
    pub nullable: bool,
}

/// The builder of one column's values.
pub enum ColumnBuilder {
    /// For [`ColumnType::Text`].
    Text(StringBuilder),
    /// For [`ColumnType::Float`].
    Float(Float64Builder),
    /// For [`ColumnType::Count`].
    Count(UInt64Builder),
    /// For [`ColumnType::TextList`].
    TextList(ListBuilder<StringBuilder>),
}

impl ColumnBuilder {
    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Text(b) => Arc::new(b.finish()),
            Self::Float(b) => Arc::new(b.finish()),
            Self::Count(b) => Arc::new(b.finish()),
            Self::TextList(b) => Arc::new(b.finish()),
        }
    }
}

/// The column builders of a table, handed to a row's cells in column order.
pub struct RowCursor<'b> {
    builders: std::slice::IterMut<'b, ColumnBuilder>,
}

impl RowCursor<'_> {
    /// The next column's builder. The columns and the cells of a row come
    /// from the same [`Cells`] impl, so the order and types always agree.
    fn next(&mut self) -> &mut ColumnBuilder {
        self.builders
            .next()
            .expect("a row has exactly its table's columns")
    }
}

/// Columns and the values of one row in them: a staged table's row, a group
/// of columns several rows share, or one cell.
pub trait Cells {
    /// Appends the columns to `out`; a single cell is named `name`, a group
    /// names its own columns.
    fn columns(name: &'static str, out: &mut Vec<Column>);
    /// Appends this row's values, one per column, in column order.
    fn append(&self, cursor: &mut RowCursor<'_>);
}

/// A single-column cell: its type, nullability and how it is appended.
macro_rules! cell {
    ($ty:ty, $column_type:ident, $nullable:expr, |$value:ident, $builder:ident| $append:expr) => {
        impl Cells for $ty {
            fn columns(name: &'static str, out: &mut Vec<Column>) {
                out.push(Column {
                    name,
                    column_type: ColumnType::$column_type,
                    nullable: $nullable,
                });
            }
            fn append(&self, cursor: &mut RowCursor<'_>) {
                let $value = self;
                match cursor.next() {
                    ColumnBuilder::$column_type($builder) => $append,
                    _ => unreachable!("a cell's builder has the cell's column type"),
                }
            }
        }
    };
}

cell!(&str, Text, false, |value, builder| builder
    .append_value(value));
cell!(Option<&str>, Text, true, |value, builder| builder
    .append_option(*value));
cell!(f64, Float, false, |value, builder| builder
    .append_value(*value));
cell!(Option<f64>, Float, true, |value, builder| builder
    .append_option(*value));
cell!(u64, Count, false, |value, builder| builder
    .append_value(*value));
cell!(Option<u64>, Count, true, |value, builder| builder
    .append_option(*value));
cell!(&[&str], TextList, false, |values, builder| {
    for value in values.iter() {
        builder.values().append_value(value);
    }
    builder.append(true);
});

/// Declares a row (or column group) struct whose fields are its columns,
/// in order, and implements [`Cells`] (how it is written) and
/// [`ReadCells`] (how it is read back) from that one list. A view of a
/// table ([`StagedView`]) declares its row struct with it too.
macro_rules! row {
    (
        $(#[$meta:meta])*
        pub struct $name:ident<'a> {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<'a> {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl<'a> $crate::stage::tables::Cells for $name<'a> {
            fn columns(
                _group: &'static str,
                out: &mut Vec<$crate::stage::tables::Column>,
            ) {
                $( <$ty as $crate::stage::tables::Cells>::columns(stringify!($field), out); )*
            }
            fn append(&self, cursor: &mut $crate::stage::tables::RowCursor<'_>) {
                $( $crate::stage::tables::Cells::append(&self.$field, cursor); )*
            }
        }

        impl<'a> $crate::stage::cells::ReadCells<'a> for $name<'a> {
            fn read(
                cursor: &mut $crate::stage::cells::ReadCursor<'a>,
            ) -> Result<Self, $crate::stage::cells::CellError> {
                Ok(Self {
                    $( $field: <$ty as $crate::stage::cells::ReadCells<'a>>::read(cursor)?, )*
                })
            }
            fn json_fields(
                &self,
                _group: &'static str,
                out: &mut serde_json::Map<String, serde_json::Value>,
            ) {
                $( $crate::stage::cells::ReadCells::json_fields(&self.$field, stringify!($field), out); )*
            }
        }
    };
}

pub(crate) use row;

row! {
    /// Who staged a row: the annotator's id and the run's.
    pub struct Provenance<'a> {
        /// The annotator's id.
        pub annotator: &'a str,
        /// The run's id.
        pub run_id: &'a str,
    }
}

row! {
    /// How the verdict parser read the record's raw output
    /// (`--raw-annotations`): null for the classifier and annotation files.
    pub struct ParseCells<'a> {
        /// The parse class.
        pub parse_class: Option<&'a str>,
        /// The escape shape it recovered, if any.
        pub escape_shape: Option<&'a str>,
    }
}

row! {
    /// A quote and its byte offsets in the record's text, each possibly absent.
    pub struct QuoteCells<'a> {
        /// The quote.
        pub source_quote: Option<&'a str>,
        /// Its first byte.
        pub quote_start: Option<u64>,
        /// Its end byte.
        pub quote_end: Option<u64>,
    }
}

row! {
    /// A promoted tag (`promoted_tags`).
    pub struct PromotedTagRow<'a> {
        /// The record.
        pub record_id: &'a str,
        /// Its persona.
        pub persona_id: &'a str,
        /// Its kind.
        pub kind: &'a str,
        /// Its source path.
        pub source_path: &'a str,
        /// When it was written.
        pub created_at: &'a str,
        /// The tag.
        pub tom_kind: &'a str,
        /// Its confidence.
        pub tom_kind_confidence: f64,
        /// The record's affect.
        pub affect: &'a str,
        /// Its confidence.
        pub affect_confidence: f64,
        /// The record's intensity.
        pub intensity: &'a str,
        /// Its confidence.
        pub intensity_confidence: f64,
        /// The supporting quote.
        pub source_quote: &'a str,
        /// Its first byte.
        pub quote_start: u64,
        /// Its end byte.
        pub quote_end: u64,
        /// Annotator and run.
        pub provenance: Provenance<'a>,
        /// `<record id>#tag<n>`.
        pub item_id: &'a str,
        /// How the raw output was read.
        pub parse: ParseCells<'a>,
    }
}

row! {
    /// A promoted edge (`promoted_edges`).
    pub struct PromotedEdgeRow<'a> {
        /// Deterministic key of (source, relation, target).
        pub edge_key: &'a str,
        /// The record.
        pub record_id: &'a str,
        /// Its persona.
        pub persona_id: &'a str,
        /// Source node.
        pub source_node: &'a str,
        /// Relation.
        pub relation: &'a str,
        /// Target node.
        pub target_node: &'a str,
        /// The mention that named the target.
        pub target_mention: Option<&'a str>,
        /// Confidence.
        pub confidence: f64,
        /// The supporting quote.
        pub source_quote: &'a str,
        /// Its first byte.
        pub quote_start: u64,
        /// Its end byte.
        pub quote_end: u64,
        /// Annotator and run.
        pub provenance: Provenance<'a>,
        /// `<record id>#edge<n>`.
        pub item_id: &'a str,
        /// How the raw output was read.
        pub parse: ParseCells<'a>,
    }
}

row! {
    /// The queued item's identity and its record.
    pub struct QueuedItem<'a> {
        /// `<record id>#tag<n>`, `#edge<n>` or `#annotation`.
        pub item_id: &'a str,
        /// `tag`, `edge` or `annotation`.
        pub item_type: &'a str,
        /// The record.
        pub record_id: &'a str,
        /// Its persona.
        pub persona_id: &'a str,
        /// Its source path.
        pub source_path: &'a str,
    }
}

row! {
    /// A queued tag's affect and intensity (null for edges and annotations).
    pub struct QueuedAffect<'a> {
        /// The record's affect.
        pub affect: Option<&'a str>,
        /// Its confidence.
        pub affect_confidence: Option<f64>,
        /// Canonical affect for a free-form one.
        pub suggested_affect: Option<&'a str>,
        /// The record's intensity.
        pub intensity: Option<&'a str>,
        /// Its confidence.
        pub intensity_confidence: Option<f64>,
        /// Canonical intensity for a free-form one.
        pub suggested_intensity: Option<&'a str>,
    }
}

impl QueuedAffect<'_> {
    /// No affect or intensity: an edge's or an unreadable annotation's row.
    pub const NONE: QueuedAffect<'static> = QueuedAffect {
        affect: None,
        affect_confidence: None,
        suggested_affect: None,
        intensity: None,
        intensity_confidence: None,
        suggested_intensity: None,
    };
}

row! {
    /// An item in the curator's queue (`quarantine`).
    pub struct QuarantineRow<'a> {
        /// The item and its record.
        pub item: QueuedItem<'a>,
        /// The tag's tom_kind or the edge's relation.
        pub label: Option<&'a str>,
        /// The edge's target node.
        pub target_node: Option<&'a str>,
        /// The mention that named it.
        pub target_mention: Option<&'a str>,
        /// The edge's key.
        pub edge_key: Option<&'a str>,
        /// Why it is queued.
        pub reasons: &'a [&'a str],
        /// Canonical label for a free-form one.
        pub suggested_label: Option<&'a str>,
        /// The label's confidence.
        pub confidence: Option<f64>,
        /// A tag's affect and intensity.
        pub affect: QueuedAffect<'a>,
        /// The supporting quote.
        pub quote: QuoteCells<'a>,
        /// Human-readable details of the reasons, or the parse error.
        pub detail: Option<&'a str>,
        /// The record's text.
        pub record_text: &'a str,
        /// The annotation as read, when it could not be parsed.
        pub raw_annotation: Option<&'a str>,
        /// Annotator and run.
        pub provenance: Provenance<'a>,
        /// The record's kind.
        pub record_kind: &'a str,
        /// How the raw output was read.
        pub parse: ParseCells<'a>,
    }
}

row! {
    /// A record with no tag (`abstained`).
    pub struct AbstainedRow<'a> {
        /// The record.
        pub record_id: &'a str,
        /// Its persona.
        pub persona_id: &'a str,
        /// Its source path.
        pub source_path: &'a str,
        /// The best tom_kind, had one been taken.
        pub best_tom_kind: Option<&'a str>,
        /// Its confidence.
        pub best_confidence: Option<f64>,
        /// `no_tags` or `no_annotation`.
        pub why: &'a str,
        /// Annotator and run.
        pub provenance: Provenance<'a>,
        /// How the raw output was read.
        pub parse: ParseCells<'a>,
    }
}

row! {
    /// A sensitive record (`sensitive`): flagged by its producer or with a
    /// detection the policy quarantines (`persona_memory_policy.sensitive_content`),
    /// whether it has tags or abstained.
    pub struct SensitiveRow<'a> {
        /// The record.
        pub record_id: &'a str,
        /// Its persona.
        pub persona_id: &'a str,
        /// Its source path.
        pub source_path: &'a str,
        /// Its kind.
        pub record_kind: &'a str,
        /// The detection's category: null when the record is only flagged.
        pub category: Option<&'a str>,
        /// The detection's confidence.
        pub confidence: Option<f64>,
        /// Which detector found it.
        pub detector: Option<&'a str>,
        /// The producer's flags (`sensitive`, `safety`); empty when only detected.
        pub flags: &'a [&'a str],
        /// 1: a safety record (category `mental_health_self_harm` or flag
        /// `safety`), listed first in the report; 0 otherwise.
        pub safety: u64,
        /// The detection's quote.
        pub quote: Option<&'a str>,
        /// Its first byte.
        pub quote_start: Option<u64>,
        /// Its end byte.
        pub quote_end: Option<u64>,
        /// The record's text (credentials and identifiers masked).
        pub record_text: &'a str,
        /// What was masked in this row's texts: `kind, N bytes,
        /// sha256:xxxxxxxx` per value, `; `-joined; null when nothing was.
        pub masked: Option<&'a str>,
        /// Annotator and run.
        pub provenance: Provenance<'a>,
    }
}

row! {
    /// A rejected input line, row or file, or annotation line (`rejects`).
    pub struct RejectRow<'a> {
        /// The file.
        pub source: &'a str,
        /// Its 1-based line or row (0: the whole file).
        pub line: u64,
        /// The record, when its id could be read.
        pub record_id: Option<&'a str>,
        /// The field at fault.
        pub field: Option<&'a str>,
        /// What is wrong.
        pub error: &'a str,
        /// `records`, `annotations`, `annotation_failed` or `poison`.
        pub input: &'a str,
    }
}

row! {
    /// A curator decision applied to a quarantined item (`curated/curated.parquet`).
    pub struct CuratedDecisionRow<'a> {
        /// The run that queued the item.
        pub run_id: &'a str,
        /// The item.
        pub item_id: &'a str,
        /// `tag`, `edge` or `annotation`.
        pub item_type: &'a str,
        /// Its record.
        pub record_id: &'a str,
        /// Its persona.
        pub persona_id: &'a str,
        /// The record's kind.
        pub record_kind: Option<&'a str>,
        /// `accept`, `reject` or `relabel`.
        pub decision: &'a str,
        /// The label decided.
        pub label: Option<&'a str>,
        /// The label queued.
        pub original_label: Option<&'a str>,
        /// The target node decided.
        pub target_node: Option<&'a str>,
        /// The target node queued.
        pub original_target_node: Option<&'a str>,
        /// The mention that named the target.
        pub target_mention: Option<&'a str>,
        /// The edge's key.
        pub edge_key: Option<&'a str>,
        /// The tag's affect.
        pub affect: Option<&'a str>,
        /// The tag's intensity.
        pub intensity: Option<&'a str>,
        /// The supporting quote and its offsets.
        pub quote: QuoteCells<'a>,
        /// The record's text.
        pub record_text: &'a str,
        /// sha256 of the record's content, hex.
        pub record_fingerprint: Option<&'a str>,
        /// Who decided.
        pub curator: &'a str,
        /// The curator's note.
        pub note: Option<&'a str>,
        /// When it was decided.
        pub decided_at: &'a str,
        /// When it was applied.
        pub applied_at: &'a str,
        /// The affect the curator set (null: the annotated one stands).
        pub decided_affect: Option<&'a str>,
        /// The intensity the curator set (null: the annotated one stands).
        pub decided_intensity: Option<&'a str>,
        /// The model's confidence in the label (tom_kind or relation), as queued.
        pub confidence: Option<f64>,
        /// The model's confidence in the affect, as queued.
        pub affect_confidence: Option<f64>,
        /// The model's confidence in the intensity, as queued.
        pub intensity_confidence: Option<f64>,
        /// 1: decided in bulk ("accept all N shown"); 0: one by one.
        pub bulk: u64,
        /// The curator's quote start byte (null: the queued quote stands).
        pub decided_quote_start: Option<u64>,
        /// The curator's quote end byte.
        pub decided_quote_end: Option<u64>,
        /// The record's text between the curator's offsets.
        pub decided_quote: Option<&'a str>,
    }
}

/// A staged table: its file name and its row type.
pub trait StagedTable {
    /// The file's name, without `.parquet`.
    const NAME: &'static str;
    /// One row, as written and as read back.
    type Row<'a>: Cells + ReadCells<'a>;

    /// The table's columns, in order.
    fn columns() -> Vec<Column> {
        let mut out = Vec::new();
        <Self::Row<'static> as Cells>::columns(Self::NAME, &mut out);
        out
    }

    /// The table's Arrow schema.
    fn schema() -> SchemaRef {
        Arc::new(Schema::new(
            Self::columns()
                .iter()
                .map(|c| Field::new(c.name, c.column_type.data_type(), c.nullable))
                .collect::<Vec<_>>(),
        ))
    }
}

/// What is read of a staged table ([`crate::stage::read::each_row`]): all
/// its columns, as its row struct (every [`StagedTable`] is its own view),
/// or some, as a row struct of their own (fields named and typed as the
/// columns, declared with [`row`] and [`staged_view`]), so a reader that
/// needs few columns decodes only those.
pub trait StagedView {
    /// The table read.
    type Table: StagedTable;
    /// One row as read: its fields are the columns read.
    type Row<'a>: Cells + ReadCells<'a> + std::fmt::Debug;
}

/// Declares a view: a marker type that reads staged table `$table` as row
/// struct `$row` (some of the table's columns).
macro_rules! staged_view {
    ($(#[$meta:meta])* $marker:ident, $table:ty, $row:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        pub struct $marker;

        impl $crate::stage::tables::StagedView for $marker {
            type Table = $table;
            type Row<'a> = $row<'a>;
        }
    };
}

pub(crate) use staged_view;

macro_rules! staged_table {
    ($(#[$meta:meta])* $marker:ident, $name:literal, $row:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        pub struct $marker;

        impl StagedTable for $marker {
            const NAME: &'static str = $name;
            type Row<'a> = $row<'a>;
        }

        impl StagedView for $marker {
            type Table = Self;
            type Row<'a> = $row<'a>;
        }
    };
}

staged_table!(
    /// `promoted_tags.parquet`.
    PromotedTags,
    "promoted_tags",
    PromotedTagRow
);
staged_table!(
    /// `promoted_edges.parquet`.
    PromotedEdges,
    "promoted_edges",
    PromotedEdgeRow
);
staged_table!(
    /// `quarantine.parquet`: the curator's queue.
    Quarantine,
    "quarantine",
    QuarantineRow
);
staged_table!(
    /// `abstained.parquet`.
    Abstained,
    "abstained",
    AbstainedRow
);
staged_table!(
    /// `sensitive.parquet`.
    Sensitive,
    "sensitive",
    SensitiveRow
);
staged_table!(
    /// `rejects.parquet`.
    Rejects,
    "rejects",
    RejectRow
);
staged_table!(
    /// `curated/curated.parquet`: the curator's applied decisions.
    CuratedDecisions,
    "curated",
    CuratedDecisionRow
);

/// The tables of a run directory, in the order they are written.
pub const RUN_TABLES: [&str; 6] = [
    PromotedTags::NAME,
    PromotedEdges::NAME,
    Quarantine::NAME,
    Abstained::NAME,
    Sensitive::NAME,
    Rejects::NAME,
];

/// A staged table being written: rows are buffered and written in batches.
pub struct Table<T: StagedTable> {
    schema: SchemaRef,
    builders: Vec<ColumnBuilder>,
    buffered: usize,
    writer: TableWriter,
    table: PhantomData<T>,
}

const BATCH_ROWS: usize = 8192;

impl<T: StagedTable> Table<T> {
    /// Opens `<name>.parquet` in the run directory.
    pub fn create(run: &mut RunDir) -> Result<Self, tomlite_staging::Error> {
        let schema = T::schema();
        let writer = run.table(T::NAME, schema.clone())?;
        Ok(Self::with_writer(schema, writer))
    }

    /// Opens a table at `path`, outside any run directory (the curated table).
    pub fn create_at(path: &Path) -> Result<Self, tomlite_staging::Error> {
        let schema = T::schema();
        let writer = TableWriter::create(path, schema.clone())?;
        Ok(Self::with_writer(schema, writer))
    }

    fn with_writer(schema: SchemaRef, writer: TableWriter) -> Self {
        Self {
            schema,
            builders: T::columns()
                .iter()
                .map(|c| c.column_type.builder())
                .collect(),
            buffered: 0,
            writer,
            table: PhantomData,
        }
    }

    /// The table's name.
    pub fn name(&self) -> &'static str {
        T::NAME
    }

    /// Appends one row.
    pub fn push(&mut self, row: &T::Row<'_>) -> Result<(), tomlite_staging::Error> {
        row.append(&mut RowCursor {
            builders: self.builders.iter_mut(),
        });
        self.buffered += 1;
        if self.buffered >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), tomlite_staging::Error> {
        if self.buffered == 0 {
            return Ok(());
        }
        let batch = finish_batch(&self.schema, &mut self.builders)
            .unwrap_or_else(|e| panic!("table {}: rows do not fit the schema: {e}", T::NAME));
        self.buffered = 0;
        self.writer.write(&batch)
    }

    /// Rows written or buffered.
    pub fn rows(&self) -> usize {
        self.writer.rows() + self.buffered
    }

    /// Flushes, writes the footer and syncs; returns the file.
    pub fn close(mut self) -> Result<PathBuf, tomlite_staging::Error> {
        self.flush()?;
        self.writer.close()
    }
}

/// The buffered rows as one batch (builders emptied).
fn finish_batch(
    schema: &SchemaRef,
    builders: &mut [ColumnBuilder],
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let arrays: Vec<ArrayRef> = builders.iter_mut().map(ColumnBuilder::finish).collect();
    RecordBatch::try_new(schema.clone(), arrays)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds one batch of `rows` for table `T`: the schema and the row
    /// builder agree when Arrow accepts it.
    fn batch_of<T: StagedTable>(rows: &[T::Row<'_>]) -> RecordBatch {
        let schema = T::schema();
        let mut builders: Vec<ColumnBuilder> = T::columns()
            .iter()
            .map(|c| c.column_type.builder())
            .collect();
        for row in rows {
            let mut cursor = RowCursor {
                builders: builders.iter_mut(),
            };
            row.append(&mut cursor);
            assert!(
                cursor.builders.next().is_none(),
                "row of {} too short",
                T::NAME
            );
        }
        finish_batch(&schema, &mut builders).expect("the row fits its schema")
    }

    const PROVENANCE: Provenance<'static> = Provenance {
        annotator: "annotator",
        run_id: "run",
    };
    const NO_PARSE: ParseCells<'static> = ParseCells {
        parse_class: None,
        escape_shape: None,
    };

    fn names<T: StagedTable>() -> Vec<&'static str> {
        T::columns().iter().map(|c| c.name).collect()
    }

    #[test]
    fn column_order_is_the_staged_one() {
        assert_eq!(
            names::<Rejects>(),
            ["source", "line", "record_id", "field", "error", "input"]
        );
        assert_eq!(
            names::<Abstained>(),
            [
                "record_id",
                "persona_id",
                "source_path",
                "best_tom_kind",
                "best_confidence",
                "why",
                "annotator",
                "run_id",
                "parse_class",
                "escape_shape"
            ]
        );
        assert_eq!(names::<Quarantine>().len(), 29);
        assert_eq!(names::<PromotedTags>().len(), 19);
        assert_eq!(names::<PromotedEdges>().len(), 16);
        assert_eq!(names::<Sensitive>().len(), 16);
        assert_eq!(names::<CuratedDecisions>().len(), 33);
        let quarantine = names::<Quarantine>();
        assert_eq!(
            &quarantine[..5],
            [
                "item_id",
                "item_type",
                "record_id",
                "persona_id",
                "source_path"
            ]
        );
        assert_eq!(
            &quarantine[18..21],
            ["source_quote", "quote_start", "quote_end"]
        );
        assert_eq!(
            &quarantine[25..],
            ["run_id", "record_kind", "parse_class", "escape_shape"]
        );
    }

    #[test]
    fn rows_fit_their_schemas() {
        let reasons = ["confidence_below_threshold"];
        let queued = QuarantineRow {
            item: QueuedItem {
                item_id: "r1#tag0",
                item_type: "tag",
                record_id: "r1",
                persona_id: "p",
                source_path: "s",
            },
            label: Some("belief"),
            target_node: None,
            target_mention: None,
            edge_key: None,
            reasons: &reasons,
            suggested_label: None,
            confidence: Some(0.2),
            affect: QueuedAffect::NONE,
            quote: QuoteCells {
                source_quote: Some("q"),
                quote_start: Some(0),
                quote_end: Some(1),
            },
            detail: None,
            record_text: "q",
            raw_annotation: None,
            provenance: PROVENANCE,
            record_kind: "memory",
            parse: NO_PARSE,
        };
        let batch = batch_of::<Quarantine>(&[queued, queued]);
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), Quarantine::schema());
        let reject = RejectRow {
            source: "in.jsonl",
            line: 3,
            record_id: None,
            field: Some("id"),
            error: "e",
            input: "records",
        };
        assert_eq!(batch_of::<Rejects>(&[reject]).num_rows(), 1);
        let flags = ["safety"];
        let sensitive = SensitiveRow {
            record_id: "r",
            persona_id: "p",
            source_path: "s",
            record_kind: "memory",
            category: None,
            confidence: None,
            detector: None,
            flags: &flags,
            safety: 1,
            quote: None,
            quote_start: None,
            quote_end: None,
            record_text: "t",
            masked: None,
            provenance: PROVENANCE,
        };
        assert_eq!(batch_of::<Sensitive>(&[sensitive]).num_rows(), 1);
    }

    #[test]
    fn nullability_follows_the_field_types() {
        let columns = PromotedEdges::columns();
        let nullable: Vec<&str> = columns
            .iter()
            .filter(|c| c.nullable)
            .map(|c| c.name)
            .collect();
        assert_eq!(nullable, ["target_mention", "parse_class", "escape_shape"]);
        let reasons = Quarantine::columns()
            .into_iter()
            .find(|c| c.name == "reasons")
            .expect("a reasons column");
        assert_eq!(reasons.column_type, ColumnType::TextList);
        assert!(!reasons.nullable);
    }
}
