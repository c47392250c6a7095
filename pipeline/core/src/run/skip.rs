//! What a run leaves out: records that failed too often (poison), the
//! failure budget, and the time budget that defers the rest to the next run.

use std::collections::BTreeMap;

use tomlite_staging::{Digest, State};

use crate::annotate::{Annotated, Annotator};
use crate::ingest::record::Record;
use crate::run::config::MIN_FAILED_FOR_BUDGET;
use crate::run::error::RunError;
use crate::run::open_run::OpenRun;
use crate::run::stage_rows::RejectedInput;
use crate::stage::receipt::{FailedRecord, FailureKind};
use tomlite_staging::retry::POISON_AFTER;

/// A record to annotate in this run.
pub(super) struct ToAnnotate {
    pub(super) record: Record,
    /// Its fingerprint and its annotation digest, for the state.
    pub(super) digests: (Digest, Digest),
    /// Runs in which the annotation of this content by this annotator
    /// failed so far.
    pub(super) failures: u32,
}

impl OpenRun<'_> {
    /// A record whose annotation failed: a reject row, retried next run.
    pub(super) fn failed(
        &mut self,
        record: &Record,
        failures: u32,
        error: &str,
    ) -> Result<(), RunError> {
        self.counts.failed += 1;
        let message = format!(
            "annotation failed (failed run {failures} of {POISON_AFTER} before the record is skipped as poison): {error}"
        );
        self.tables
            .failed_record(record, RejectedInput::AnnotationFailed, &message)?;
        self.failures.push(FailedRecord {
            error: Some(error.to_string()),
            ..failed_record(record, FailureKind::Failed, failures)
        });
        Ok(())
    }

    /// A poison record: skipped, listed, kept in the state as it was.
    pub(super) fn poison(
        &mut self,
        record: &Record,
        failures: u32,
        last_run: &str,
    ) -> Result<(), RunError> {
        self.counts.poison_skipped += 1;
        let message = format!(
            "poison: annotation of this content failed in {failures} runs (last: run {last_run}); skipped until the record or the annotator changes"
        );
        self.tables
            .failed_record(record, RejectedInput::Poison, &message)?;
        self.failures.push(FailedRecord {
            last_failed_run: Some(last_run.to_string()),
            ..failed_record(record, FailureKind::Poison, failures)
        });
        Ok(())
    }

    /// Whether a record is annotated: not when it is unchanged since a
    /// committed run (same content, annotation and policy) or poison.
    pub(super) fn triage(
        &mut self,
        record: Record,
        annotator: &mut dyn Annotator,
        state: &State,
        skipped_from: &mut BTreeMap<String, u64>,
    ) -> Result<Option<ToAnnotate>, RunError> {
        let fingerprint = record.fingerprint();
        let annotation = annotator.annotation_digest(&record)?;
        let earlier = state.get(&record.id).copied();
        // Failures of this content by this annotator so far (a changed
        // record, or a new annotator, starts over).
        let mut failures = 0;
        if let Some(entry) = earlier.filter(|e| e.fingerprint == fingerprint) {
            if state.outcome(&entry) == "failed" {
                if entry.annotation == annotation {
                    failures = entry.failures;
                }
                // Poison until the content or the annotator changes;
                // --full gives it one more try.
                if failures >= POISON_AFTER && !self.cfg.full {
                    let last = state.run(&entry).to_string();
                    self.poison(&record, failures, &last)?;
                    return Ok(None);
                }
            } else if !self.cfg.full
                && entry.annotation == annotation
                && state.policy(&entry) == self.policy_sha
            {
                self.counts.skipped_unchanged += 1;
                *skipped_from
                    .entry(state.run(&entry).to_string())
                    .or_default() += 1;
                return Ok(None);
            }
        }
        Ok(Some(ToAnnotate {
            record,
            digests: (fingerprint, annotation),
            failures,
        }))
    }

    /// Fails the run when too many records failed to annotate.
    ///
    /// The failure budget counts records that had not failed before: a
    /// few known-bad records retried every night must not fail the night
    /// (they become poison instead), and it is the run's running share,
    /// so small batches cannot hide a broken annotator.
    pub(super) fn check_failure_budget(
        &mut self,
        todo: &[ToAnnotate],
        annotated: &[Result<Annotated, String>],
    ) -> Result<(), RunError> {
        for (result, next) in annotated.iter().zip(todo) {
            if next.failures == 0 {
                self.budget.attempted += 1;
                self.budget.failed += u64::from(result.is_err());
            }
        }
        let (failed, attempted) = (self.budget.failed, self.budget.attempted);
        let over_budget = failed >= MIN_FAILED_FOR_BUDGET
            && failed as f64 > self.cfg.max_failed_share * attempted as f64;
        if !over_budget {
            return Ok(());
        }
        let first = annotated
            .iter()
            .zip(todo)
            .find_map(|(result, next)| {
                result
                    .as_ref()
                    .err()
                    .map(|e| format!("{}: {e}", next.record.id))
            })
            .unwrap_or_default();
        Err(RunError::FailureBudget {
            failed,
            attempted,
            share: self.cfg.max_failed_share,
            first,
        })
    }
}

/// The receipt entry of a failed or poison record.
fn failed_record(record: &Record, kind: FailureKind, failures: u32) -> FailedRecord {
    FailedRecord {
        kind,
        record_id: record.id.clone(),
        source: record.origin.source.clone(),
        line: record.origin.line,
        failures,
        error: None,
        last_failed_run: None,
    }
}
