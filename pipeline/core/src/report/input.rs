//! What the report is built from, its limits and its error: shared by the
//! report's sections, so none of them imports the module that assembles them.

use std::path::Path;

use serde_json::Value;

use crate::graph::nodes::Registry;
use crate::rules::policy::Policy;
use crate::stage::receipt::Receipt;

/// Queue items the page holds at most (it says when it holds fewer): more
/// than a curator works through in a night, and the page stays quick and
/// the run's memory bounded on a million-record night.
pub const MAX_QUEUE_ITEMS: usize = 25_000;
/// Abstained and rejected rows the page lists at most.
pub const MAX_LISTED: usize = 5_000;
/// Records read by a verdict parser's recovery (not `STRICT`) the report
/// lists at most; the counts cover every row.
pub const MAX_RECOVERED: usize = 1_000;

/// Errors of building the report.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the report from {table}: {message}")]
pub struct ReportError {
    /// The table that could not be read.
    pub table: String,
    /// What went wrong.
    pub message: String,
}

/// What the report is built from.
pub struct ReportInput<'a> {
    /// The run directory (its tables closed).
    pub dir: &'a Path,
    /// The run's receipt.
    pub receipt: &'a Receipt,
    /// The previous committed run's receipt, if any, as read (a receipt of
    /// any earlier version: only its run id, counts and reasons are shown).
    pub previous: Option<Value>,
    /// The effective policy.
    pub policy: &'a Policy,
    /// The node registry, if any.
    pub registry: Option<&'a Registry>,
}
