//! What a run leaves out: records that failed too often (poison), the
//! failure budget, and the time budget that defers the rest to the next run.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::ingest::record::Record;
use crate::run::open_run::OpenRun;
use crate::run::stage_rows::RejectedInput;
use crate::run::{POISON_AFTER, RunError};

/// The time budget: stop taking records when the next batch and the
/// commit would not fit before the deadline.
pub(super) struct Budget {
    deadline: Option<Instant>,
    started: Instant,
    /// The slowest batch so far.
    pub(super) batch: Duration,
    /// Records annotated so far that had not failed in an earlier run, and
    /// how many of them failed: the failure budget's share.
    pub(super) attempted: u64,
    /// See `attempted`.
    pub(super) failed: u64,
}

impl Budget {
    /// A budget with the run's deadline, if any, from `started`.
    pub(super) fn new(deadline: Option<Instant>, started: Instant) -> Self {
        Self {
            deadline,
            started,
            batch: Duration::ZERO,
            attempted: 0,
            failed: 0,
        }
    }

    /// Whether the next batch and the commit might not fit before the deadline.
    pub(super) fn near(&self) -> bool {
        let Some(deadline) = self.deadline else {
            return false;
        };
        // Room for one more batch (with slack) and for closing the tables,
        // the report and the commit.
        let reserve = Duration::from_secs(1) + self.started.elapsed() / 50;
        Instant::now() + self.batch.mul_f64(1.5) + reserve >= deadline
    }
}

impl OpenRun<'_> {
    /// A record whose annotation failed: a reject row, retried next run.
    pub(super) fn failed(
        &mut self,
        rec: &Record,
        failures: u32,
        error: &str,
    ) -> Result<(), RunError> {
        self.counts.failed += 1;
        let message = format!(
            "annotation failed (failed run {failures} of {POISON_AFTER} before the record is skipped as poison): {error}"
        );
        self.failure(
            rec,
            RejectedInput::AnnotationFailed,
            &message,
            json!({"kind": "failed", "error": error}),
            failures,
        )
    }

    /// A poison record: skipped, listed, kept in the state as it was.
    pub(super) fn poison(
        &mut self,
        rec: &Record,
        failures: u32,
        last_run: &str,
    ) -> Result<(), RunError> {
        self.counts.poison_skipped += 1;
        let message = format!(
            "poison: annotation of this content failed in {failures} runs (last: run {last_run}); skipped until the record or the annotator changes"
        );
        let entry = json!({"kind": "poison", "last_failed_run": last_run});
        self.failure(rec, RejectedInput::Poison, &message, entry, failures)
    }

    /// The reject row and the receipt entry of a failed or poison record.
    fn failure(
        &mut self,
        rec: &Record,
        input: RejectedInput,
        message: &str,
        mut entry: serde_json::Value,
        failures: u32,
    ) -> Result<(), RunError> {
        self.tables.failed_record(rec, input, message)?;
        entry["record_id"] = json!(rec.id);
        entry["source"] = json!(rec.origin.source);
        entry["line"] = json!(rec.origin.line);
        entry["failures"] = json!(failures);
        self.failures.push(entry);
        Ok(())
    }
}
