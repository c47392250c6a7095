//! What a run reports: its start (for the receipt and the first event) and
//! the summary a finished run returns.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use crate::stage::receipt::{Counts, SensitiveCounts, StopCondition};

/// What a finished run reports.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// The run's id.
    pub run_id: String,
    /// The committed run directory.
    pub run_dir: PathBuf,
    /// Counts per outcome.
    pub counts: Counts,
    /// Quarantined items per reason.
    pub reasons: BTreeMap<String, u64>,
    /// Sensitive records.
    pub sensitive: SensitiveCounts,
    /// Which runs this one's skipped records were processed in.
    pub skipped_from: Vec<String>,
    /// What a killed earlier run left behind and recovery removed or completed.
    pub recovered: Vec<String>,
    /// What ended the run.
    pub stop_condition: StopCondition,
    /// Transient I/O errors retried.
    pub retries_used: u32,
    /// The inputs a time budget left unread or read in part, each with
    /// why (e.g. a stalled pipe); empty when every input was read.
    pub unread: Vec<String>,
}

/// The run's start, for its receipt and first event.
pub(crate) struct Started {
    pub(crate) at: chrono::DateTime<chrono::Utc>,
    pub(crate) clock: Instant,
    pub(crate) recovered: Vec<String>,
    /// Entries recovery left alone, for the first event's `bug_or_blocker`.
    pub(crate) warnings: Vec<String>,
    pub(crate) run_id: String,
}
