//! `tomlite run`: opens the annotator, runs the night and maps its outcome
//! to an exit status; a configuration error still leaves a blocked record.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use tomlite::annotate::Annotator;
use tomlite::annotate::file::FileAnnotator;
use tomlite::annotate::with_rules::WithRules;
use tomlite::graph::nodes::Registry;
use tomlite::run::interrupt::Signal;
use tomlite::run::{RunConfig, RunError, RunSummary, StopCondition};

use super::load_classifier;
use crate::cli::settings::{AnnotatorSource, RunSettings, command_line};
use crate::cli::summary;
use crate::{ExitStatus, Failure};

/// Runs `command`, which sets its argument to the staging directory as soon
/// as it is known. A usage or configuration error leaves its record too, in
/// a staging directory that exists (one is never created for it).
pub fn keep_blocked_record(
    staging: Option<PathBuf>,
    command: impl FnOnce(&mut Option<PathBuf>) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let started = chrono::Utc::now();
    let mut staging = staging;
    let result = command(&mut staging);
    if let (Err(failure), Some(staging)) = (&result, staging)
        && failure.status == ExitStatus::Config
        && staging.is_dir()
    {
        record_blocked(&staging, started, failure);
    }
    result
}

/// Writes the failed-run record of a run that a configuration error stopped.
fn record_blocked(staging: &Path, started: chrono::DateTime<chrono::Utc>, failure: &Failure) {
    let command = command_line();
    let run_id = tomlite::run::new_run_id(&staging.join("runs"), started);
    let error = format!("{:#}", failure.error);
    let ended = tomlite::run::failed::Ended {
        run_id: &run_id,
        command: &command,
        status: "blocked",
        exit_code: ExitStatus::Config as i32,
        phase: "configure",
        error: &error,
        next_step: "fix the usage or configuration error that bug_or_blocker names, then run again",
        started_at: started,
        heartbeat: tomlite::run::events::HEARTBEAT,
        counts: serde_json::json!({}),
        left_untouched: tomlite::run::failed::untouched(
            staging,
            "nothing ran: the staging directory was not opened",
        ),
        artifact: None,
    };
    if let Err(error) = tomlite::run::failed::record(staging, &ended, None, false) {
        eprintln!("tomlite: warning: cannot keep the record of the blocked run {run_id}: {error}");
    }
}

/// `tomlite run`: reads the registry, opens the annotator, fixes the time
/// budget and runs.
pub fn run(settings: RunSettings) -> Result<(), Failure> {
    let RunSettings {
        mut config,
        nodes,
        annotator,
        budget,
        quiet,
    } = settings;
    if let Some(path) = nodes {
        let registry = Registry::load(&path).map_err(Failure::config)?;
        config.nodes = Some((path, registry));
    }
    // From here SIGTERM and SIGINT stop the run cleanly (exit 143, 130)
    // instead of killing it where it stands.
    match tomlite::run::interrupt::Interrupt::on_signals() {
        Ok(flag) => config.interrupt = flag,
        Err(e) => eprintln!(
            "tomlite: warning: cannot catch SIGTERM and SIGINT ({e}); a signal kills the run without its record"
        ),
    }
    let mut annotator = open_annotator(&annotator, &config)?;
    config.deadline = budget.deadline();
    match tomlite::run::run(&config, annotator.as_mut()) {
        Ok(run_summary) => finish(&run_summary, quiet, config.escalate_poison),
        Err(error) => Err(run_failure(error)),
    }
}

/// The annotations file, the raw annotator output, or the classifier (with
/// the run's node registry).
fn open_annotator(
    source: &AnnotatorSource,
    config: &RunConfig,
) -> Result<Box<dyn Annotator>, Failure> {
    let sensitive = &config.policy.persona_memory_policy.sensitive_content;
    // The rules need no model: annotations made elsewhere get them too.
    let with_rules = |inner: Box<dyn Annotator>| -> Box<dyn Annotator> {
        if sensitive.detect {
            Box::new(WithRules::new(inner, sensitive.thresholds()))
        } else {
            inner
        }
    };
    Ok(match source {
        AnnotatorSource::Annotations(annotations) => with_rules(Box::new(
            FileAnnotator::open(annotations)
                .with_context(|| format!("cannot use --annotations {}", annotations.display()))
                .map_err(Failure::config)?,
        )),
        AnnotatorSource::RawAnnotations(raw) => with_rules(Box::new(
            FileAnnotator::open_raw(raw)
                .with_context(|| format!("cannot use --raw-annotations {}", raw.display()))
                .map_err(Failure::config)?,
        )),
        AnnotatorSource::Classifier(model) => {
            let mut classifier = load_classifier(model, &config.policy)?;
            if let Some((_, registry)) = &config.nodes {
                classifier.set_registry(registry);
            }
            Box::new(classifier)
        }
    })
}

/// Prints the summary and the poison warning of a committed run; a time
/// budget reached, or poison under `--escalate-poison`, has its own status.
fn finish(run_summary: &RunSummary, quiet: bool, escalate_poison: bool) -> Result<(), Failure> {
    if !quiet {
        summary::print_run_summary(run_summary);
    }
    // Poison is said even with --quiet: it is what cron must see.
    let poison = run_summary.counts.poison_skipped;
    if poison > 0 {
        eprintln!(
            "tomlite: warning: run {} skipped {poison} poison records (their annotation failed in {} runs); see `poison` in {}",
            run_summary.run_id,
            tomlite::run::POISON_AFTER,
            run_summary.run_dir.join("receipt.json").display()
        );
    }
    if run_summary.stop_condition == StopCondition::Deadline {
        let unread = if run_summary.unread.is_empty() {
            String::new()
        } else {
            format!("; not read to its end: {}", run_summary.unread.join(", "))
        };
        return Err(Failure {
            status: ExitStatus::Partial,
            error: anyhow!(
                "time budget reached: run {} committed {} records and left {} (and the rest of the input) for the next run{unread}",
                run_summary.run_id,
                run_summary.counts.processed + run_summary.counts.failed,
                run_summary.counts.deferred
            ),
        });
    }
    if poison > 0 && escalate_poison {
        return Err(Failure {
            status: ExitStatus::Poison,
            error: anyhow!(
                "run {} committed, but skipped {poison} poison records (--escalate-poison)",
                run_summary.run_id
            ),
        });
    }
    Ok(())
}

/// A lock held by another run exits 3; every other failure exits 1, saying
/// whether anything was committed.
fn run_failure(error: RunError) -> Failure {
    match error {
        RunError::Staging(locked @ tomlite_staging::Error::Locked { .. }) => Failure {
            status: ExitStatus::Locked,
            error: anyhow::Error::new(locked)
                .context("another run is in progress; nothing was done"),
        },
        RunError::Interrupted { signal } => Failure {
            status: match signal {
                Signal::Term => ExitStatus::Terminated,
                Signal::Int => ExitStatus::Interrupted,
            },
            error: anyhow::Error::new(RunError::Interrupted { signal }).context(
                "run stopped; its events and receipt are in the staging directory's failed/",
            ),
        },
        RunError::Staging(unfinished @ tomlite_staging::Error::Unfinished { .. }) => Failure {
            status: ExitStatus::Failed,
            error: anyhow::Error::new(unfinished)
                .context("run failed after its commit point; the next run's recovery completes it"),
        },
        error => Failure {
            status: ExitStatus::Failed,
            error: anyhow::Error::new(error).context("run failed; nothing was committed"),
        },
    }
}
