//! The staged tables: their columns, and a buffered row writer that turns
//! rows into Arrow batches of 8,192 and hands them to the staging crate.

use std::sync::Arc;

use arrow_array::builder::{Float64Builder, ListBuilder, StringBuilder, UInt64Builder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use tomlite_staging::{RunDir, TableWriter};

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// UTF-8 string.
    Str,
    /// 64-bit float.
    F64,
    /// Unsigned 64-bit integer.
    U64,
    /// List of strings.
    List,
}

/// One cell.
#[derive(Debug, Clone, Copy)]
pub enum Val<'a> {
    /// A string or null.
    S(Option<&'a str>),
    /// A float or null.
    F(Option<f64>),
    /// An integer or null.
    U(Option<u64>),
    /// A list of strings.
    L(&'a [&'a str]),
}

/// `(name, type, nullable)` per column.
pub type Columns = &'static [(&'static str, Kind, bool)];

use Kind::*;

/// Promoted tags.
pub const PROMOTED_TAGS: Columns = &[
    ("record_id", Str, false),
    ("persona_id", Str, false),
    ("kind", Str, false),
    ("source_path", Str, false),
    ("created_at", Str, false),
    ("tom_kind", Str, false),
    ("tom_kind_confidence", F64, false),
    ("affect", Str, false),
    ("affect_confidence", F64, false),
    ("intensity", Str, false),
    ("intensity_confidence", F64, false),
    ("source_quote", Str, false),
    ("quote_start", U64, false),
    ("quote_end", U64, false),
    ("annotator", Str, false),
    ("run_id", Str, false),
    ("item_id", Str, false),
    // How the verdict parser read the record's raw output
    // (`--raw-annotations`): null for the classifier and annotation files.
    ("parse_class", Str, true),
    ("escape_shape", Str, true),
];

/// Promoted edges.
pub const PROMOTED_EDGES: Columns = &[
    ("edge_key", Str, false),
    ("record_id", Str, false),
    ("persona_id", Str, false),
    ("source_node", Str, false),
    ("relation", Str, false),
    ("target_node", Str, false),
    ("target_mention", Str, true),
    ("confidence", F64, false),
    ("source_quote", Str, false),
    ("quote_start", U64, false),
    ("quote_end", U64, false),
    ("annotator", Str, false),
    ("run_id", Str, false),
    ("item_id", Str, false),
    // How the verdict parser read the record's raw output
    // (`--raw-annotations`): null for the classifier and annotation files.
    ("parse_class", Str, true),
    ("escape_shape", Str, true),
];

/// The curator's queue.
pub const QUARANTINE: Columns = &[
    ("item_id", Str, false),
    ("item_type", Str, false),
    ("record_id", Str, false),
    ("persona_id", Str, false),
    ("source_path", Str, false),
    ("label", Str, true),
    ("target_node", Str, true),
    ("target_mention", Str, true),
    ("edge_key", Str, true),
    ("reasons", List, false),
    ("suggested_label", Str, true),
    ("confidence", F64, true),
    ("affect", Str, true),
    ("affect_confidence", F64, true),
    ("suggested_affect", Str, true),
    ("intensity", Str, true),
    ("intensity_confidence", F64, true),
    ("suggested_intensity", Str, true),
    ("source_quote", Str, true),
    ("quote_start", U64, true),
    ("quote_end", U64, true),
    ("detail", Str, true),
    ("record_text", Str, false),
    ("raw_annotation", Str, true),
    ("annotator", Str, false),
    ("run_id", Str, false),
    ("record_kind", Str, false),
    // How the verdict parser read the record's raw output
    // (`--raw-annotations`): null for the classifier and annotation files.
    ("parse_class", Str, true),
    ("escape_shape", Str, true),
];

/// Curator decisions applied to quarantined items (`curated/curated.parquet`).
pub const CURATED: Columns = &[
    ("run_id", Str, false),
    ("item_id", Str, false),
    ("item_type", Str, false),
    ("record_id", Str, false),
    ("persona_id", Str, false),
    ("record_kind", Str, true),
    ("decision", Str, false),
    ("label", Str, true),
    ("original_label", Str, true),
    ("target_node", Str, true),
    ("original_target_node", Str, true),
    ("target_mention", Str, true),
    ("edge_key", Str, true),
    ("affect", Str, true),
    ("intensity", Str, true),
    ("source_quote", Str, true),
    ("quote_start", U64, true),
    ("quote_end", U64, true),
    ("record_text", Str, false),
    ("record_fingerprint", Str, true),
    ("curator", Str, false),
    ("note", Str, true),
    ("decided_at", Str, false),
    ("applied_at", Str, false),
];

/// Abstained records.
pub const ABSTAINED: Columns = &[
    ("record_id", Str, false),
    ("persona_id", Str, false),
    ("source_path", Str, false),
    ("best_tom_kind", Str, true),
    ("best_confidence", F64, true),
    ("why", Str, false),
    ("annotator", Str, false),
    ("run_id", Str, false),
    // How the verdict parser read the record's raw output
    // (`--raw-annotations`): null for the classifier and annotation files.
    ("parse_class", Str, true),
    ("escape_shape", Str, true),
];

/// Sensitive records: one row per record flagged by its producer or with
/// a detection the policy quarantines (`persona_memory_policy.sensitive_content`),
/// whether it has tags or abstained.
pub const SENSITIVE: Columns = &[
    ("record_id", Str, false),
    ("persona_id", Str, false),
    ("source_path", Str, false),
    ("record_kind", Str, false),
    // The detection: null when the record is only flagged.
    ("category", Str, true),
    ("confidence", F64, true),
    ("detector", Str, true),
    // The producer's flags (`sensitive`, `safety`); empty when only detected.
    ("flags", List, false),
    // 1: a safety record (category `mental_health_self_harm` or flag
    // `safety`), listed first in the report; 0 otherwise.
    ("safety", U64, false),
    ("quote", Str, true),
    ("quote_start", U64, true),
    ("quote_end", U64, true),
    ("record_text", Str, false),
    ("annotator", Str, false),
    ("run_id", Str, false),
];

/// Rejected input lines, rows, files and annotation lines.
pub const REJECTS: Columns = &[
    ("source", Str, false),
    ("line", U64, false),
    ("record_id", Str, true),
    ("field", Str, true),
    ("error", Str, false),
    ("input", Str, false),
];

/// The Arrow schema of a table.
pub fn schema(cols: Columns) -> SchemaRef {
    Arc::new(Schema::new(
        cols.iter()
            .map(|(name, kind, nullable)| {
                let dt = match kind {
                    Str => DataType::Utf8,
                    F64 => DataType::Float64,
                    U64 => DataType::UInt64,
                    List => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                };
                Field::new(*name, dt, *nullable)
            })
            .collect::<Vec<_>>(),
    ))
}

enum Builder {
    S(StringBuilder),
    F(Float64Builder),
    U(UInt64Builder),
    L(ListBuilder<StringBuilder>),
}

/// A staged table: rows are buffered and written in batches.
pub struct Table {
    name: &'static str,
    schema: SchemaRef,
    builders: Vec<Builder>,
    buffered: usize,
    writer: TableWriter,
}

const BATCH_ROWS: usize = 8192;

impl Table {
    /// Opens `<name>.parquet` in the run directory.
    pub fn create(
        run: &mut RunDir,
        name: &'static str,
        cols: Columns,
    ) -> Result<Self, tomlite_staging::Error> {
        let schema = schema(cols);
        let writer = run.table(name, schema.clone())?;
        Ok(Self {
            name,
            builders: Self::builders(cols),
            schema,
            buffered: 0,
            writer,
        })
    }

    /// Opens a table at `path`, outside any run directory (the curated table).
    pub fn create_at(
        path: &std::path::Path,
        name: &'static str,
        cols: Columns,
    ) -> Result<Self, tomlite_staging::Error> {
        let schema = schema(cols);
        let writer = TableWriter::create(path, schema.clone())?;
        Ok(Self {
            name,
            builders: Self::builders(cols),
            schema,
            buffered: 0,
            writer,
        })
    }

    fn builders(cols: Columns) -> Vec<Builder> {
        cols.iter()
            .map(|(_, k, _)| match k {
                Str => Builder::S(StringBuilder::new()),
                F64 => Builder::F(Float64Builder::new()),
                U64 => Builder::U(UInt64Builder::new()),
                List => Builder::L(ListBuilder::new(StringBuilder::new())),
            })
            .collect()
    }

    /// The table's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Appends one row; the cells follow the table's columns.
    pub fn push(&mut self, row: &[Val<'_>]) -> Result<(), tomlite_staging::Error> {
        assert_eq!(
            row.len(),
            self.builders.len(),
            "row width of table {}",
            self.name
        );
        for (b, v) in self.builders.iter_mut().zip(row) {
            match (b, v) {
                (Builder::S(b), Val::S(s)) => b.append_option(*s),
                (Builder::F(b), Val::F(f)) => b.append_option(*f),
                (Builder::U(b), Val::U(u)) => b.append_option(*u),
                (Builder::L(b), Val::L(xs)) => {
                    for x in *xs {
                        b.values().append_value(x);
                    }
                    b.append(true);
                }
                _ => panic!("cell type does not match its column in table {}", self.name),
            }
        }
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
        let arrays: Vec<ArrayRef> = self
            .builders
            .iter_mut()
            .map(|b| match b {
                Builder::S(b) => Arc::new(b.finish()) as ArrayRef,
                Builder::F(b) => Arc::new(b.finish()) as ArrayRef,
                Builder::U(b) => Arc::new(b.finish()) as ArrayRef,
                Builder::L(b) => Arc::new(b.finish()) as ArrayRef,
            })
            .collect();
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)
            .unwrap_or_else(|e| panic!("table {}: rows do not fit the schema: {e}", self.name));
        self.buffered = 0;
        self.writer.write(&batch)
    }

    /// Rows written or buffered.
    pub fn rows(&self) -> usize {
        self.writer.rows() + self.buffered
    }

    /// Flushes, writes the footer and syncs; returns the file.
    pub fn close(mut self) -> Result<std::path::PathBuf, tomlite_staging::Error> {
        self.flush()?;
        self.writer.close()
    }
}
