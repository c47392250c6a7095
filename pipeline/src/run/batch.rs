//! One batch of records: skip what is unchanged or poison, annotate the
//! rest with failures isolated per record, decide, and stage.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tomlite_staging::{State, StateRow, fault};

use crate::annotate::Annotator;
use crate::graph::nodes::Registry;
use crate::ingest::record::Record;
use crate::rules::decide::{Decision, Exists, Nodes, decide, sensitivity};
use crate::run::inputs::{SeenIds, WaitingRecord};
use crate::run::open_run::OpenRun;
use crate::run::{MIN_FAILED_FOR_BUDGET, POISON_AFTER, RunError};

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

    fn process(
        &mut self,
        batch: &mut Vec<Record>,
        annotator: &mut dyn Annotator,
        state: &mut State,
        seen: &SeenIds,
        pending: &mut Vec<WaitingRecord>,
        skipped_from: &mut BTreeMap<String, u64>,
    ) -> Result<(), RunError> {
        let clock = Instant::now();
        let mut todo = Vec::with_capacity(batch.len());
        for rec in batch.drain(..) {
            let fp = rec.fingerprint();
            let ad = annotator.annotation_digest(&rec)?;
            let prev = state.get(&rec.id).copied();
            // Failures of this content by this annotator so far (a changed
            // record, or a new annotator, starts over).
            let mut failures = 0;
            if let Some(e) = prev.filter(|e| e.fingerprint == fp) {
                if state.outcome(&e) == "failed" {
                    if e.annotation == ad {
                        failures = e.failures;
                    }
                    // Poison until the content or the annotator changes;
                    // --full gives it one more try.
                    if failures >= POISON_AFTER && !self.cfg.full {
                        let last = state.run(&e).to_string();
                        self.poison(&rec, failures, &last)?;
                        continue;
                    }
                } else if !self.cfg.full
                    && e.annotation == ad
                    && state.policy(&e) == self.policy_sha
                {
                    self.counts.skipped_unchanged += 1;
                    *skipped_from.entry(state.run(&e).to_string()).or_default() += 1;
                    continue;
                }
            }
            todo.push((rec, (fp, ad), failures));
        }
        if todo.is_empty() {
            return Ok(());
        }
        let refs: Vec<&Record> = todo.iter().map(|(r, _, _)| r).collect();
        let annotated = annotate_isolated(annotator, &refs, self.cfg.record_timeout);
        // The failure budget counts records that had not failed before: a
        // few known-bad records retried every night must not fail the night
        // (they become poison instead), and it is the run's running share,
        // so small batches cannot hide a broken annotator.
        for (a, (_, _, failures)) in annotated.iter().zip(&todo) {
            if *failures == 0 {
                self.budget.attempted += 1;
                self.budget.failed += u64::from(a.is_err());
            }
        }
        let (failed, attempted) = (self.budget.failed, self.budget.attempted);
        if failed >= MIN_FAILED_FOR_BUDGET
            && failed as f64 > self.cfg.max_failed_share * attempted as f64
        {
            let first = annotated
                .iter()
                .zip(&todo)
                .find_map(|(a, (r, _, _))| a.as_ref().err().map(|e| format!("{}: {e}", r.id)))
                .unwrap_or_default();
            return Err(RunError::FailureBudget {
                failed,
                attempted,
                share: self.cfg.max_failed_share,
                first,
            });
        }
        for ((rec, digests, failures), a) in todo.into_iter().zip(annotated) {
            let a = match a {
                Ok(a) => a,
                Err(error) => {
                    self.failed(&rec, failures + 1, &error)?;
                    state.upsert(StateRow {
                        failures: failures + 1,
                        ..self.state_row(&rec, digests, "failed", None)
                    });
                    continue;
                }
            };
            self.counts.processed += 1;
            let nodes = RunNodes {
                registry: self.cfg.nodes.as_ref().map(|(_, r)| r),
                state,
                seen,
            };
            let decision = decide(&rec, &a, &self.cfg.policy, &nodes);
            let read_as = a.read_as();
            let embedding = match a {
                crate::annotate::Annotated::Parsed(a) => a.embedding,
                _ => None,
            };
            let outcome = match decision {
                Decision::Missing => {
                    let flagged = sensitivity(&rec, None, &self.cfg.policy).record;
                    self.sensitive_row(&rec, flagged.as_ref())?;
                    self.abstain(&rec, None, "no_annotation", read_as)?;
                    "abstained"
                }
                Decision::Unparseable { raw, error } => {
                    let flagged = sensitivity(&rec, None, &self.cfg.policy).record;
                    self.sensitive_row(&rec, flagged.as_ref())?;
                    self.unparseable(&rec, &raw, &error, read_as)?;
                    "unparseable"
                }
                Decision::Annotated {
                    tags,
                    edges,
                    best,
                    sensitive,
                } => {
                    if edges.iter().any(|e| !e.pending.is_empty()) {
                        pending.push(WaitingRecord {
                            record: rec,
                            tags,
                            edges,
                            digests,
                            embedding,
                            read_as,
                            sensitive,
                        });
                        continue;
                    }
                    self.sensitive_row(&rec, sensitive.as_deref())?;
                    self.stage(&rec, &tags, &edges, best.as_ref(), read_as)?
                }
            };
            state.upsert(self.state_row(&rec, digests, outcome, embedding.as_deref()));
        }
        self.budget.batch = self.budget.batch.max(clock.elapsed());
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
) -> Vec<Result<crate::annotate::Annotated, String>> {
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
fn guarded(
    annotator: &mut dyn Annotator,
    records: &[&Record],
) -> Result<Vec<crate::annotate::Annotated>, String> {
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
