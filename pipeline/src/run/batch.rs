//! One batch of records: skip what is unchanged or poison, annotate the
//! rest with failures isolated per record, decide, and stage.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tomlite_staging::{State, StateRow, fault};

use crate::annotate::{Annotated, Annotator};
use crate::graph::nodes::Registry;
use crate::ingest::record::Record;
use crate::rules::decide::{Decision, Exists, Nodes, decide, sensitivity};
use crate::run::error::RunError;
use crate::run::inputs::{SeenIds, WaitingRecord};
use crate::run::open_run::OpenRun;
use crate::run::skip::ToAnnotate;

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
    /// leaves it for the next run; returns whether it was left.
    pub(super) fn process_or_defer(
        &mut self,
        batch: &mut Vec<Record>,
        annotator: &mut dyn Annotator,
        state: &mut State,
        seen: &SeenIds,
        pending: &mut Vec<WaitingRecord>,
        skipped_from: &mut BTreeMap<String, u64>,
    ) -> Result<bool, RunError> {
        if !batch.is_empty() && self.budget.near() {
            self.counts.deferred += batch.len() as u64;
            batch.clear();
            return Ok(true);
        }
        self.process(batch, annotator, state, seen, pending, skipped_from)?;
        Ok(false)
    }

    /// Annotates, decides and stages the batch's records, but those
    /// unchanged since a committed run and the poison ones.
    fn process(
        &mut self,
        batch: &mut Vec<Record>,
        annotator: &mut dyn Annotator,
        state: &mut State,
        seen: &SeenIds,
        waiting: &mut Vec<WaitingRecord>,
        skipped_from: &mut BTreeMap<String, u64>,
    ) -> Result<(), RunError> {
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
        let records: Vec<&Record> = todo.iter().map(|t| &t.record).collect();
        let annotated = annotate_isolated(annotator, &records, self.cfg.record_timeout);
        self.check_failure_budget(&todo, &annotated)?;
        for (next, result) in todo.into_iter().zip(annotated) {
            match result {
                Ok(annotation) => self.decide_and_stage(next, annotation, state, seen, waiting)?,
                Err(error) => {
                    let failures = next.failures + 1;
                    self.failed(&next.record, failures, &error)?;
                    state.upsert(StateRow {
                        failures,
                        ..self.state_row(&next.record, next.digests, "failed", None)
                    });
                }
            }
        }
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

/// Annotates a batch; when the batch fails (a panic, a model error, or
/// slower than the per-record timeout allows), annotates its records one by
/// one, so that a failing record fails alone and the rest go on.
fn annotate_isolated(
    annotator: &mut dyn Annotator,
    records: &[&Record],
    timeout: Option<Duration>,
) -> Vec<Result<Annotated, String>> {
    fault::point("annotate.batch");
    let clock = Instant::now();
    let whole = guarded(annotator, records);
    let in_time = |elapsed: Duration, n: usize| timeout.is_none_or(|t| elapsed <= t * n as u32);
    if let Ok(v) = whole
        && v.len() == records.len()
        && in_time(clock.elapsed(), records.len())
    {
        return v.into_iter().map(Ok).collect();
    }
    records
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
        .collect()
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
