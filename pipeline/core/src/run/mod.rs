//! One run, from input files to a committed run directory.
//!
//! Records stream through ingest → skip-unchanged → annotate → decide →
//! stage, in batches; nothing holds the records themselves in memory. What
//! grows with the input is one entry per record id (the state and the ids
//! seen in this run), a few dozen bytes each.
//!
//! [`run`] orchestrates; beside it: [`config`] (what a run is asked to do),
//! `inputs` (reading and batching), `batch` (annotate and decide one
//! batch), `skip` (poison, failure and time budgets), `items` and
//! `stage_rows` (what becomes of each decided item, and its row), `status`
//! (the event stream and heartbeats), `finish` (receipt, report, commit).

mod batch;
mod budget;
pub mod config;
pub mod error;
pub mod events;
pub mod failed;
mod feed;
mod finish;
mod inputs;
pub mod interrupt;
mod items;
mod mask;
pub mod merge;
mod open_run;
pub mod progress;
pub mod run_id;
mod skip;
mod stage_rows;
mod status;
pub mod summary;

pub use crate::run::config::{DEFAULT_MAX_FAILED_SHARE, MIN_FAILED_FOR_BUDGET, RunConfig, Shard};
pub use crate::run::error::RunError;
pub use crate::run::run_id::new_run_id;
pub use crate::run::summary::RunSummary;
use crate::run::summary::Started;
pub use crate::stage::receipt::{Counts, InputInfo, SensitiveCounts, StopCondition};
pub use tomlite_staging::retry::POISON_AFTER;

use std::time::Instant;

use serde_json::json;
use tomlite_staging::{RunDir, StagingDir, State};

use crate::annotate::Annotator;
use crate::run::events::Event;
use crate::run::failed::keep_failed;
use crate::run::inputs::InputReader;
use crate::run::open_run::OpenRun;
use crate::run::status::{Status, StopOnDrop};

/// Runs the job: the caller has chosen the annotator.
///
/// On an error nothing is committed and the run's temporary directory is
/// removed; its `events.jsonl` is kept, with a failure receipt, in
/// `<staging>/failed/<run_id>/` (see [`crate::run::failed`]). A killed run's
/// leftovers are removed (or, past the commit point, completed) by the next
/// run.
pub fn run(cfg: &RunConfig, annotator: &mut dyn Annotator) -> Result<RunSummary, RunError> {
    let started_at = chrono::Utc::now();
    let clock = Instant::now();
    // A run that stops before its event stream exists still leaves a record.
    let early = |phase: &str, e: RunError| {
        keep_failed(cfg, started_at, phase, &e, None, (json!({}), None));
        e
    };
    let staging = StagingDir::open(&cfg.staging).map_err(|e| early("lock", e.into()))?;
    staging.retry().set_limit(cfg.transient_retries);
    let found = staging.recover().map_err(|e| early("recover", e.into()))?;
    for w in found.warnings() {
        eprintln!("tomlite: warning: recovery {w}");
    }
    let recovered = found.describe();
    let mut state = staging
        .load_state()
        .map_err(|e| early("load state", e.into()))?;
    // Memory links point only at what earlier runs committed.
    annotator.use_memories(crate::graph::memory::MemoryIndex::from_state(&state));
    let run_id = new_run_id(&staging.runs_dir(), started_at);
    let run = staging
        .begin_run(&run_id)
        .map_err(|e| early("begin run", e.into()))?;
    let tmp = run.path().to_path_buf();
    let status = Status::open(cfg, &run, &run_id).map_err(|e| {
        let _ = std::fs::remove_dir_all(&tmp);
        early("open events", e)
    })?;
    let warnings = found.warnings();
    let result = std::thread::scope(|scope| {
        let beat = scope.spawn(|| status.beat(cfg.heartbeat));
        // Stops the heartbeats however run_body ends, a panic included
        // (the scope joins the thread before it passes the panic on).
        let guard = StopOnDrop(&status, beat.thread().clone());
        run_body(
            cfg,
            annotator,
            &staging,
            run,
            &mut state,
            &status,
            Started {
                at: started_at,
                clock,
                recovered,
                warnings,
                run_id: run_id.clone(),
            },
            move || drop(guard),
        )
    });
    if let Err(e) = &result {
        keep_failed_with_stream(cfg, &status, (started_at, &run_id), e);
        if tmp.exists() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    result
}

/// Keeps the record of a run that failed after its event stream opened:
/// the stream, with the phase it was in and its last counts.
fn keep_failed_with_stream(
    cfg: &RunConfig,
    status: &Status,
    (started_at, run_id): (chrono::DateTime<chrono::Utc>, &str),
    e: &RunError,
) {
    let mut log = status.log.lock().unwrap_or_else(|p| p.into_inner());
    let (counts, artifact) = status
        .snapshot
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let phase = log.current_phase().unwrap_or("run").to_string();
    keep_failed(
        cfg,
        started_at,
        &phase,
        e,
        Some((&mut *log, run_id)),
        (counts, artifact.as_deref()),
    );
}

/// The run from its first event to its last: read and stage the inputs,
/// close the tables, write the report and the receipt, commit.
#[allow(clippy::too_many_arguments)]
fn run_body(
    cfg: &RunConfig,
    annotator: &mut dyn Annotator,
    staging: &StagingDir,
    mut run: RunDir,
    state: &mut State,
    status: &Status,
    started: Started,
    stop_heartbeats: impl FnOnce(),
) -> Result<RunSummary, RunError> {
    let info = annotator.info();
    emit_start(cfg, status, &run, state, &started)?;
    let identity = (started.run_id.as_str(), info.clone());
    let mut open = OpenRun::new(cfg, &mut run, identity, started.clock)?;
    open.reject_annotation_problems(annotator.input_problems())?;
    let reader = InputReader {
        open: &mut open,
        annotator: &mut *annotator,
        staging,
        state: &mut *state,
        status,
    };
    let mut read = reader.read_all()?;
    cfg.interrupt.check()?;
    read.settle_waiting(&mut open, state, status)?;
    read.reject_unused(&mut open, annotator)?;
    finish::emit_annotator_counts(status, annotator)?;
    finish::emit_poison(status, &open)?;
    let totals = finish::close_tables(status, open)?;
    let retries_used = staging.retry().used();
    let stats = (annotator.stats(), annotator.sensitive_detectors());
    let receipt = finish::committed_receipt(cfg, staging, (&started, &info, stats), &totals, &read);
    finish::write_report_and_receipt(cfg, staging, (status, &mut run), receipt)?;
    // Nothing is committed from an annotations file that changed under the run.
    annotator.check_unchanged()?;
    // The last point where a signal stops the run: past it, the commit.
    cfg.interrupt.check()?;
    let run_dir = finish::commit(staging, (status, run), state, &totals)?;
    // Heartbeats went on through the commit (their file moved with the
    // directory); the stream now continues at the final path.
    stop_heartbeats();
    let Started {
        run_id, recovered, ..
    } = started;
    finish::emit_committed(cfg, status, &run_dir, (&run_id, &totals.counts, read.stop));
    Ok(totals.summary((run_id, run_dir), read, recovered, retries_used))
}

/// The stream's first event: the run directory, the state's size and what
/// recovery did.
fn emit_start(
    cfg: &RunConfig,
    status: &Status,
    run: &RunDir,
    state: &State,
    started: &Started,
) -> Result<(), RunError> {
    let recovered = &started.recovered;
    status.emit(Event {
        phase: "start",
        current_artifact: Some(run.path()),
        counts: json!({"state_records": state.len(), "recovered": recovered.len(), "shard": cfg.shard}),
        paths: recovered.clone(),
        bug_or_blocker: (!started.warnings.is_empty()).then(|| {
            format!(
                "recovery left alone what this program did not write: {}",
                started.warnings.join("; ")
            )
        }),
        next_step: "stream the inputs through annotate, validate and decide",
        stop_condition: "every input read, or the deadline",
        ..Default::default()
    })
}
