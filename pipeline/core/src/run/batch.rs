//! One batch of records: skip what is unchanged or poison, annotate the
//! rest with failures isolated per record, decide, and stage.

use std::time::{Duration, Instant};

use tomlite_staging::{State, StateRow, fault};

use crate::annotate::{Annotated, Annotator};
use crate::graph::nodes::Registry;
use crate::ingest::record::Record;
use crate::rules::decide::{Decision, Exists, Nodes, decide, sensitivity};
use crate::run::error::RunError;
use crate::run::events::{AFTER_CALL, AFTER_REPAIR, BEFORE_CALL, BUG_FOUND, Event};
use crate::run::inputs::{Batching, SeenIds, WaitingRecord};
use crate::run::open_run::OpenRun;
use crate::run::skip::ToAnnotate;
use crate::run::status::Status;
use serde_json::json;
use tomlite_staging::retry::POISON_AFTER;

struct RunNodes<'a> {
    registry: Option<&'a Registry>,
    state: &'a State,
    seen: &'a SeenIds,
}

impl Nodes for RunNodes<'_> {
    fn exists(&self, node: &str) -> Exists {
        if let Some(id) = node.strip_prefix("memory:") {
            if self.seen.ids.get(id) == Some(&true) || self.state.contains(id) {
                return Exists::Yes;
            }
            if self.seen.ids.contains_key(id) {
                return Exists::No;
            }
            return Exists::Later(id.to_string());
        }
        if self.registry.is_some_and(|r| r.contains(node)) {
            Exists::Yes
        } else {
            Exists::No
        }
    }
}

impl OpenRun<'_> {
    /// Processes the batch in hand, or, when the time budget is near,
    /// leaves it for the next run; returns whether it was left. A signal
    /// stops the run here.
    pub(super) fn process_or_defer(
        &mut self,
        batch: &mut Vec<Record>,
        annotator: &mut dyn Annotator,
        at: Batching<'_>,
    ) -> Result<bool, RunError> {
        self.cfg.interrupt.check()?;
        if !batch.is_empty() && self.budget.near() {
            self.counts.deferred += batch.len() as u64;
            batch.clear();
            return Ok(true);
        }
        self.process(batch, annotator, at)?;
        Ok(false)
    }

    /// Annotates, decides and stages the batch's records, but those
    /// unchanged since a committed run and the poison ones. The stream
    /// has an event before and after the annotator's call, one per failed
    /// record and one after each record's retry.
    pub(super) fn process(
        &mut self,
        batch: &mut Vec<Record>,
        annotator: &mut dyn Annotator,
        at: Batching<'_>,
    ) -> Result<(), RunError> {
        let Batching {
            state,
            seen,
            waiting,
            skipped_from,
            status,
        } = at;
        let clock = Instant::now();
        let mut todo = Vec::with_capacity(batch.len());
        for record in batch.drain(..) {
            if let Some(next) = self.triage(record, annotator, state, skipped_from)? {
                todo.push(next);
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        self.batches += 1;
        let index = self.batches;
        let artifact = status.artifact();
        status.emit(Event {
            phase: BEFORE_CALL,
            current_artifact: artifact.as_deref(),
            counts: json!({"batch": index, "size": todo.len(), "annotator": self.info.id}),
            next_step: "annotate the batch",
            stop_condition: "the annotator returns, or each record of a failed batch is tried alone",
            ..Default::default()
        })?;
        let records: Vec<&Record> = todo.iter().map(|t| &t.record).collect();
        let (annotated, whole) = annotate_isolated(annotator, &records, self.cfg.record_timeout);
        let failed = annotated.iter().filter(|r| r.is_err()).count();
        status.moved(|m| {
            m.annotated += (annotated.len() - failed) as u64;
            m.failed += failed as u64;
        });
        status.emit(Event {
            phase: AFTER_CALL,
            current_artifact: artifact.as_deref(),
            counts: json!({
                "batch": index,
                "size": todo.len(),
                "annotated": annotated.len() - failed,
                "failed": failed,
                "tried_alone": if whole.is_some() { todo.len() } else { 0 },
                "elapsed_seconds": (clock.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            }),
            bug_or_blocker: whole.as_ref().map(|e| {
                format!(
                    "the batch failed as a whole ({e}); each of its {} records was tried alone",
                    todo.len()
                )
            }),
            next_step: "decide and stage the batch's records",
            stop_condition: "every record of the batch staged or failed",
            ..Default::default()
        })?;
        for (next, result) in todo.iter().zip(&annotated) {
            emit_retries(status, next, result, whole.is_some())?;
        }
        self.check_failure_budget(&todo, &annotated)?;
        for (next, result) in todo.into_iter().zip(annotated) {
            match result {
                Ok(annotation) => {
                    self.decide_and_stage(next, annotation, state, seen, waiting)?;
                }
                Err(error) => {
                    let failures = next.failures + 1;
                    self.failed(&next.record, failures, &error)?;
                    emit_failure(status, &next.record, failures, &error)?;
                    state.upsert(StateRow {
                        failures,
                        ..self.state_row(&next.record, next.digests, "failed", None)
                    });
                }
            }
        }
        // Staged: decided and written (not those whose edges wait).
        status.moved(|m| m.staged = self.counts.processed - waiting.len() as u64);
        self.budget.batch = self.budget.batch.max(clock.elapsed());
        Ok(())
    }

    /// Decides an annotated record and stages it, or keeps it waiting
    /// when its edges name memories later in the input.
    fn decide_and_stage(
        &mut self,
        next: ToAnnotate,
        annotation: Annotated,
        state: &mut State,
        seen: &SeenIds,
        waiting: &mut Vec<WaitingRecord>,
    ) -> Result<(), RunError> {
        let ToAnnotate {
            record, digests, ..
        } = next;
        self.counts.processed += 1;
        let nodes = RunNodes {
            registry: self.cfg.nodes.as_ref().map(|(_, r)| r),
            state,
            seen,
        };
        let decision = decide(&record, &annotation, &self.cfg.policy, &nodes);
        let read_as = annotation.read_as();
        let embedding = match annotation {
            Annotated::Parsed(parsed) => parsed.embedding,
            _ => None,
        };
        let outcome = match decision {
            Decision::Missing => {
                let flagged = sensitivity(&record, None, &self.cfg.policy).record;
                self.sensitive_row(&record, flagged.as_ref())?;
                self.abstain(&record, None, "no_annotation", read_as)?;
                "abstained"
            }
            Decision::Unparseable { raw, error } => {
                let flagged = sensitivity(&record, None, &self.cfg.policy).record;
                self.sensitive_row(&record, flagged.as_ref())?;
                self.unparseable(&record, &raw, &error, read_as)?;
                "unparseable"
            }
            Decision::Annotated {
                tags,
                edges,
                best,
                sensitive,
            } => {
                if edges.iter().any(|e| !e.pending.is_empty()) {
                    waiting.push(WaitingRecord {
                        record,
                        tags,
                        edges,
                        digests,
                        embedding,
                        read_as,
                        sensitive,
                    });
                    return Ok(());
                }
                self.sensitive_row(&record, sensitive.as_deref())?;
                self.stage(&record, &tags, &edges, best.as_ref(), read_as)?
            }
        };
        state.upsert(self.state_row(&record, digests, outcome, embedding.as_deref()));
        Ok(())
    }
}

/// The event of a record whose annotation failed: record, field, reason.
fn emit_failure(
    status: &Status,
    record: &Record,
    failures: u32,
    error: &str,
) -> Result<(), RunError> {
    let source = record.origin.source.clone();
    status.emit(Event {
        phase: BUG_FOUND,
        counts: json!({
            "record_id": record.id,
            "source": source,
            "line": record.origin.line,
            "field": "annotation",
            "reason": error,
            "failed_runs": failures,
            "poison_after_failed_runs": POISON_AFTER,
        }),
        bug_or_blocker: Some(format!(
            "record {} ({}:{}), field annotation: {error}",
            record.id, source, record.origin.line
        )),
        next_step: "go on with the other records; the next run tries this one again",
        stop_condition: "every input read, or the deadline",
        ..Default::default()
    })
}

/// The events after a record's retries: tried alone after its batch
/// failed (attempt 2 of 2), and tried again after failing in earlier runs
/// (this run's attempt, of the runs before it is poison).
fn emit_retries(
    status: &Status,
    next: &ToAnnotate,
    result: &Result<Annotated, String>,
    alone: bool,
) -> Result<(), RunError> {
    let outcome = if result.is_ok() {
        "annotated"
    } else {
        "failed"
    };
    let mut retries = Vec::new();
    if alone {
        retries.push(("alone_after_batch_failed", 2, 2));
    }
    if next.failures > 0 {
        retries.push(("next_run", next.failures + 1, POISON_AFTER));
    }
    for (retry, attempt, of) in retries {
        status.emit(Event {
            phase: AFTER_REPAIR,
            counts: json!({
                "record_id": next.record.id,
                "retry": retry,
                "attempt": attempt,
                "of": of,
                "outcome": outcome,
            }),
            bug_or_blocker: result
                .as_ref()
                .err()
                .map(|e| format!("record {} failed again: {e}", next.record.id)),
            next_step: "stage the record, or count its failure",
            stop_condition: "every record of the batch staged or failed",
            ..Default::default()
        })?;
    }
    Ok(())
}

/// Annotates a batch; when the batch fails (a panic, a model error, or
/// slower than the per-record timeout allows), annotates its records one by
/// one, so that a failing record fails alone and the rest go on. Returns,
/// with the results, why the whole batch failed when it did.
fn annotate_isolated(
    annotator: &mut dyn Annotator,
    records: &[&Record],
    timeout: Option<Duration>,
) -> (Vec<Result<Annotated, String>>, Option<String>) {
    fault::point("annotate.batch");
    let clock = Instant::now();
    let whole = guarded(annotator, records);
    let in_time = |elapsed: Duration, n: usize| timeout.is_none_or(|t| elapsed <= t * n as u32);
    let why = match whole {
        Ok(v) if v.len() == records.len() && in_time(clock.elapsed(), records.len()) => {
            return (v.into_iter().map(Ok).collect(), None);
        }
        Ok(v) if v.len() != records.len() => format!(
            "the annotator returned {} results for {} records",
            v.len(),
            records.len()
        ),
        Ok(_) => format!(
            "timeout: the batch took {:.1} s, more than --record-timeout per record",
            clock.elapsed().as_secs_f64()
        ),
        Err(e) => e,
    };
    let results = records
        .iter()
        .map(|r| {
            let clock = Instant::now();
            let mut one = guarded(annotator, std::slice::from_ref(r))?;
            let elapsed = clock.elapsed();
            if !in_time(elapsed, 1) {
                return Err(format!(
                    "timeout: annotating the record alone took {:.1} s, more than --record-timeout {:.1} s",
                    elapsed.as_secs_f64(),
                    timeout.unwrap_or_default().as_secs_f64()
                ));
            }
            one.pop()
                .ok_or_else(|| "the annotator returned no result".to_string())
        })
        .collect();
    (results, Some(why))
}

/// One annotator call with panics caught and errors as text.
fn guarded(annotator: &mut dyn Annotator, records: &[&Record]) -> Result<Vec<Annotated>, String> {
    let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Fault point: `annotate.record=return(ID[,ID...])` makes the
        // annotation of those records (`*`: of every record) panic.
        if let Some(ids) = fault::value("annotate.record")
            && let Some(r) = records
                .iter()
                .find(|r| ids == "*" || ids.split(',').any(|i| i == r.id))
        {
            panic!("injected fault: annotating record {} panicked", r.id);
        }
        annotator.annotate(records)
    }));
    match call {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("annotator error: {e}")),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("panicked: {msg}"))
        }
    }
}
