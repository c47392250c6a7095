//! The end of a run: the closing events, the tables closed, the receipt
//! and the report written, the commit, and the stream's last events.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::json;
use tomlite_staging::{RunDir, StagingDir, State, fault};

use crate::annotate::{Annotator, AnnotatorInfo};
use crate::run::config::RunConfig;
use crate::run::error::RunError;
use crate::run::events::Event;
use crate::run::inputs::InputsRead;
use crate::run::open_run::OpenRun;
use crate::run::status::Status;
use crate::run::summary::{RunSummary, Started};
use crate::stage::receipt::{
    AnnotatorReceipt, FailedRecord, FailureKind, MemoryLink, NodesReceipt, Outcome, Receipt,
    RetryPolicy, ShardReceipt,
};
use crate::stage::receipt::{Counts, SensitiveCounts, StopCondition};
use tomlite_staging::retry::POISON_AFTER;

/// What a run's receipt and summary total, once its tables are closed.
pub(super) struct Totals {
    pub(super) counts: Counts,
    pub(super) reasons: BTreeMap<String, u64>,
    pub(super) sensitive: SensitiveCounts,
    pub(super) memory_links: Vec<MemoryLink>,
    pub(super) failures: Vec<FailedRecord>,
    /// The closed tables' files.
    pub(super) paths: Vec<String>,
}

/// The annotator's own counts (e.g. the parse classes of raw output).
pub(super) fn emit_annotator_counts(
    status: &Status,
    annotator: &dyn Annotator,
) -> Result<(), RunError> {
    let Some(counts) = annotator.status_counts() else {
        return Ok(());
    };
    status.emit(Event {
        phase: "annotations_parsed",
        counts,
        next_step: "write tables",
        stop_condition: "every annotation read",
        ..Default::default()
    })
}

/// Poison is escalated: the status stream says which records were skipped.
pub(super) fn emit_poison(status: &Status, open: &OpenRun<'_>) -> Result<(), RunError> {
    let skipped = open.counts.poison_skipped;
    if skipped == 0 {
        return Ok(());
    }
    let ids: Vec<String> = open
        .failures
        .iter()
        .filter(|f| f.kind == FailureKind::Poison)
        .take(20)
        .map(|f| format!("{} (failed in {} runs)", f.record_id, f.failures))
        .collect();
    let more = skipped.saturating_sub(ids.len() as u64);
    status.emit(Event {
        phase: "poison",
        counts: json!({"poison_skipped": skipped, "failed": open.counts.failed, "poison_after_failed_runs": POISON_AFTER}),
        bug_or_blocker: Some(format!(
            "{skipped} poison records skipped: {}{}",
            ids.join(", "),
            if more > 0 {
                format!(" and {more} more (see the receipt's `poison`)")
            } else {
                String::new()
            }
        )),
        next_step: "fix the records or the annotator; a changed record, a new annotator or a --full run tries them again",
        stop_condition: "every input read, or the deadline",
        ..Default::default()
    })
}

/// Closes the tables; returns what the run totals.
pub(super) fn close_tables(status: &Status, open: OpenRun<'_>) -> Result<Totals, RunError> {
    status.started("write tables");
    let OpenRun {
        tables,
        counts,
        reasons,
        sensitive,
        memory_links,
        failures,
        ..
    } = open;
    let mut paths = Vec::new();
    for (name, closed) in tables.close()? {
        paths.push(
            std::path::absolute(&closed)
                .unwrap_or(closed)
                .display()
                .to_string(),
        );
        fault::point(&format!("staged.{name}"));
    }
    status.completed("write tables");
    Ok(Totals {
        counts,
        reasons,
        sensitive,
        memory_links,
        failures,
        paths,
    })
}

/// The committed run's receipt.
pub(super) fn committed_receipt(
    cfg: &RunConfig,
    staging: &StagingDir,
    (started, info, stats): (&Started, &AnnotatorInfo, (serde_json::Value, Vec<String>)),
    totals: &Totals,
    read: &InputsRead,
) -> Receipt {
    let retry = staging.retry();
    Receipt {
        run_id: started.run_id.clone(),
        status: Outcome::Committed,
        started_at: started
            .at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        finished_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        duration_seconds: started.clock.elapsed().as_secs_f64(),
        inputs: read.inputs.clone(),
        annotator: AnnotatorReceipt {
            id: info.id.clone(),
            sha256: info.sha256.clone(),
            stats: stats.0,
            sensitive_detectors: stats.1,
        },
        nodes: cfg.nodes.as_ref().map(|(path, registry)| NodesReceipt {
            path: path.display().to_string(),
            sha256: registry.sha256.clone(),
            nodes: registry.len() as u64,
        }),
        policy_sha256: cfg.policy.sha256(),
        policy_source: cfg.policy_source.as_ref().map(|p| p.display().to_string()),
        full: cfg.full,
        shard: Some(cfg.shard.map(|s| ShardReceipt {
            index: s.index,
            count: s.count,
            key: "persona_id".into(),
        })),
        merged_from: None,
        counts: totals.counts.clone(),
        reasons: totals.reasons.clone(),
        sensitive: totals.sensitive.clone(),
        memory_links: totals.memory_links.clone(),
        failed: failures_of(&totals.failures, FailureKind::Failed),
        poison: failures_of(&totals.failures, FailureKind::Poison),
        skipped_from_runs: read.skipped_from.clone(),
        attempts: u64::from(retry.max_attempts()),
        attempts_by_operation: Some(retry.attempts()),
        retries_used: u64::from(retry.used()),
        retry_policy: Some(RetryPolicy {
            tool_transient_retries: retry.limit(),
            default_retries: tomlite_staging::retry::DEFAULT_RETRIES,
            hard_max_retries: tomlite_staging::retry::MAX_RETRIES,
            max_retries: retry.limit(),
            backoff_ms: tomlite_staging::retry::BACKOFF.as_millis() as u64,
            poison_after_failed_runs: POISON_AFTER,
            max_failed_share: cfg.max_failed_share,
        }),
        recovered: started.recovered.clone(),
        stop_condition: Some(read.stop),
        resumable: read.stop == StopCondition::Deadline,
        files: None,
    }
}

/// The first 100 failure entries of one kind.
fn failures_of(failures: &[FailedRecord], kind: FailureKind) -> Vec<FailedRecord> {
    failures
        .iter()
        .filter(|f| f.kind == kind)
        .take(100)
        .cloned()
        .collect()
}

/// The curator's report from the closed tables, then the receipt, written
/// last: it seals every file written before it.
pub(super) fn write_report_and_receipt(
    cfg: &RunConfig,
    staging: &StagingDir,
    (status, run): (&Status, &mut RunDir),
    receipt: Receipt,
) -> Result<(), RunError> {
    status.started("write report");
    let previous = crate::report::previous_receipt(staging)?;
    let data = crate::report::data(&crate::report::ReportInput {
        dir: run.path(),
        receipt: &receipt,
        previous,
        policy: &cfg.policy,
        registry: cfg.nodes.as_ref().map(|(_, r)| r),
    })
    .map_err(RunError::Report)?;
    run.write_file("report.html", crate::report::html(&data).as_bytes())?;
    fault::point("staged.report_html");
    run.write_file("report.md", crate::report::markdown(&data).as_bytes())?;
    fault::point("staged.report_md");
    let receipt = crate::stage::verify::sealed(receipt, run.path())?;
    run.write_json("receipt.json", &receipt)?;
    fault::point("staged.receipt");
    status.completed("write report");
    Ok(())
}

/// Commits the run directory (the run's commit point); returns it.
pub(super) fn commit(
    staging: &StagingDir,
    (status, run): (&Status, RunDir),
    state: &mut State,
    totals: &Totals,
) -> Result<PathBuf, RunError> {
    status.emit(Event {
        phase: "commit",
        current_artifact: Some(run.path()),
        counts: serde_json::to_value(&totals.counts).unwrap_or_default(),
        paths: totals.paths.clone(),
        next_step: "rename the run directory, then replace state and LATEST",
        stop_condition: "LATEST names this run",
        ..Default::default()
    })?;
    Ok(run.commit(state, staging.retry())?)
}

/// The committed run's last events, in the stream at its final path. The
/// run is committed: a stream that cannot be continued is worth a warning,
/// not a failed run.
pub(super) fn emit_committed(
    cfg: &RunConfig,
    status: &Status,
    run_dir: &std::path::Path,
    (run_id, counts, stop): (&str, &Counts, StopCondition),
) {
    let final_events = run_dir.join("events.jsonl");
    let reopened = {
        let mut log = status.log.lock().unwrap_or_else(|p| p.into_inner());
        log.completed("commit");
        log.reopen(&final_events)
    };
    let ended = reopened.map_err(|source| RunError::Events {
        path: final_events.clone(),
        source,
    });
    let exit_code = if stop == StopCondition::Deadline {
        4
    } else if cfg.escalate_poison && counts.poison_skipped > 0 {
        6
    } else {
        0
    };
    let next_step = if stop == StopCondition::Deadline {
        "run again: the next run takes the records this one left"
    } else {
        "curator reviews the quarantine"
    };
    // A committed run that lost records says so where a blocker is read.
    let bug_or_blocker = (counts.failed > 0 || counts.poison_skipped > 0).then(|| {
        format!(
            "committed with {} records that failed to annotate and {} poison records skipped: see `failed` and `poison` in receipt.json; failed records are tried again next run",
            counts.failed, counts.poison_skipped
        )
    });
    let counts = serde_json::to_value(counts).unwrap_or_default();
    let ended = ended.and_then(|()| {
        status.emit(Event {
            phase: "committed",
            current_artifact: Some(run_dir),
            counts: counts.clone(),
            status_code: Some(exit_code),
            next_step,
            stop_condition: stop.as_str(),
            bug_or_blocker: bug_or_blocker.clone(),
            ..Default::default()
        })?;
        // The seed's last cadence point: every run's stream ends with it.
        status.emit(Event {
            phase: crate::run::events::FINAL_PHASE,
            current_artifact: Some(run_dir),
            counts,
            paths: vec![
                std::path::absolute(run_dir.join("receipt.json"))
                    .unwrap_or_default()
                    .display()
                    .to_string(),
            ],
            status_code: Some(exit_code),
            next_step,
            stop_condition: stop.as_str(),
            bug_or_blocker,
            progress: None,
        })
    });
    if let Err(e) = ended {
        eprintln!("tomlite: warning: run {run_id} committed, but {e}");
    }
}

impl Totals {
    /// The run's summary.
    pub(super) fn summary(
        self,
        (run_id, run_dir): (String, PathBuf),
        read: InputsRead,
        recovered: Vec<String>,
        retries_used: u32,
    ) -> RunSummary {
        RunSummary {
            run_id,
            run_dir,
            counts: self.counts,
            reasons: self.reasons,
            sensitive: self.sensitive,
            skipped_from: read.skipped_from.into_keys().collect(),
            recovered,
            stop_condition: read.stop,
            retries_used,
            unread: read.unread,
        }
    }
}
