//! What a run that did not commit leaves: `<staging>/failed/<run_id>/` with
//! the run's `events.jsonl`, ending in the seed's
//! `before_blocked_or_final_response` event (its `bug_or_blocker` is the
//! error, its `status_code` the exit code), and a failure `receipt.json`:
//! the status, the error, the phase it stopped in, what was left untouched
//! and the seed's `timeout_diagnostics`, every path absolute.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::run::config::RunConfig;
use crate::run::error::RunError;
use crate::run::events::{Event, EventLog, FINAL_PHASE, stale_after};
use crate::run::run_id::FAILED_DIR;
use crate::run::run_id::new_run_id;
use crate::stage::receipt::Outcome;

/// How a run ended without committing.
#[derive(Debug, Clone)]
pub struct Ended<'a> {
    /// The run's id.
    pub run_id: &'a str,
    /// The command line.
    pub command: &'a str,
    /// `failed` (exit 1), `blocked` (exit 2 or 3: nothing ran) or
    /// `unfinished` (failed after its commit point).
    pub status: &'a str,
    /// The process's exit code.
    pub exit_code: i32,
    /// The phase or step the run was in.
    pub phase: &'a str,
    /// The error, with its causes.
    pub error: &'a str,
    /// What to do next.
    pub next_step: &'a str,
    /// When the run started.
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// The heartbeat interval the run used.
    pub heartbeat: Duration,
    /// The counts so far.
    pub counts: Value,
    /// What the run left as it was (state, `LATEST`, committed runs).
    pub left_untouched: Value,
    /// The file the run was working on, when known (else the last event's).
    pub artifact: Option<&'a Path>,
}

/// An error and its causes, `: `-separated.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// `path` made absolute (as it is when that fails).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// What a run that ends without committing leaves as it was: the state
/// file, the run `LATEST` names, the committed runs' folder.
pub fn untouched(staging: &Path, note: &str) -> Value {
    let latest = std::fs::read_to_string(staging.join(tomlite_staging::LATEST))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    json!({
        "state": absolute(&staging.join("state/records.parquet")).display().to_string(),
        "latest": latest,
        "runs": absolute(&staging.join("runs")).display().to_string(),
        "note": note,
    })
}

/// `<staging>/failed/`, created when missing; an error when the staging
/// directory does not exist or `failed` is a link or a file.
fn failed_folder(staging: &Path) -> std::io::Result<PathBuf> {
    if !staging.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("staging directory {} does not exist", staging.display()),
        ));
    }
    let failed = staging.join(FAILED_DIR);
    match std::fs::symlink_metadata(&failed) {
        Ok(metadata) if metadata.file_type().is_dir() => {}
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a directory (a link or a file): tomlite does not write through it",
                    failed.display()
                ),
            ));
        }
        Err(_) => match std::fs::create_dir(&failed) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        },
    }
    Ok(failed)
}

/// The event stream of the failed run in `dir`: the run's own `log`
/// (moved into `dir` unless `events_in_place`), or a new one kept in `own`.
fn events_in<'l>(
    dir: &Path,
    ended: &Ended<'_>,
    log: Option<&'l mut EventLog>,
    events_in_place: bool,
    own: &'l mut Option<EventLog>,
) -> std::io::Result<&'l mut EventLog> {
    let moved = dir.join("events.jsonl");
    match log {
        Some(log) => {
            if !events_in_place && log.path().is_file() {
                std::fs::rename(log.path(), &moved)?;
                log.reopen(&moved)?;
            }
            Ok(log)
        }
        None => Ok(own.insert(EventLog::open(&moved, ended.run_id, ended.command)?)),
    }
}

/// Where the failed run's record lies: its folder, its event stream and
/// its receipt, every path absolute.
struct RecordPaths {
    dir: PathBuf,
    events: PathBuf,
    receipt: PathBuf,
}

/// The [`FINAL_PHASE`] event that ends the failed run's stream.
fn emit_final(log: &mut EventLog, ended: &Ended<'_>, paths: &RecordPaths) -> std::io::Result<()> {
    log.emit(Event {
        phase: FINAL_PHASE,
        current_artifact: Some(&paths.dir),
        counts: ended.counts.clone(),
        paths: vec![
            paths.events.display().to_string(),
            paths.receipt.display().to_string(),
        ],
        status_code: Some(ended.exit_code),
        bug_or_blocker: Some(ended.error.to_string()),
        next_step: ended.next_step,
        stop_condition: "the run ended without committing",
        progress: None,
    })
}

/// The failure receipt: the first receipt's fields, then what the run
/// left untouched and the seed's `timeout_diagnostics` (the steps and
/// artifact from its stream).
fn failure_receipt(
    staging: &Path,
    ended: &Ended<'_>,
    events: &Path,
    (started_step, completed_step): (Option<&str>, Option<&str>),
    artifact: Option<String>,
) -> Value {
    let finished_at = chrono::Utc::now();
    let mut receipt = first_receipt(ended);
    let more = json!({
        "command": ended.command,
        "started_at": ended.started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "finished_at": finished_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "duration_seconds": (finished_at - ended.started_at).num_milliseconds() as f64 / 1000.0,
        "staging": absolute(staging).display().to_string(),
        "events": events.display().to_string(),
        "counts": ended.counts.clone(),
        "left_untouched": ended.left_untouched.clone(),
        "timeout_diagnostics": {
            "heartbeat_interval_seconds": ended.heartbeat.as_secs_f64(),
            "stale_after_seconds": stale_after(ended.heartbeat).as_secs_f64(),
            "last_started_command": started_step,
            "last_completed_command": completed_step,
            "current_artifact_path": artifact,
        },
    });
    if let (Some(all), Value::Object(more)) = (receipt.as_object_mut(), more) {
        all.extend(more);
    }
    receipt
}

/// Writes `receipt` to `path` as a new file, synced.
fn write_new(path: &Path, receipt: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(receipt).expect("a receipt always serialises");
    bytes.push(b'\n');
    let mut file = tomlite_staging::files::create_fresh(path)?;
    file.write_all(&bytes)?;
    file.sync_all()
}

/// The small receipt written before anything else (a few hundred bytes:
/// on a nearly full disk it is the one that fits), replaced by the full
/// one when that can be written.
fn first_receipt(ended: &Ended<'_>) -> Value {
    json!({
        "run_id": ended.run_id,
        "status": ended.status,
        "exit_code": ended.exit_code,
        "error": ended.error,
        "bug_or_blocker": ended.error,
        "phase": ended.phase,
        "next_step": ended.next_step,
    })
}

/// Replaces the first receipt by the full one (written beside it, then
/// renamed over it); when that cannot be written, the first one stays and
/// the partial file is removed, so the receipt is never empty.
fn write_receipt(receipt: &Value, paths: &RecordPaths) -> std::io::Result<()> {
    let tmp = paths.dir.join("receipt.json.tmp");
    let written = match tomlite_staging::fault::value("failed.full_receipt") {
        Some(_) => std::fs::write(&tmp, b"{").and_then(|()| {
            Err(std::io::Error::other(
                "no space left on device (fault point)",
            ))
        }),
        None => write_new(&tmp, receipt),
    }
    .and_then(|()| std::fs::rename(&tmp, &paths.receipt));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    tomlite_staging::sync_dir(&paths.dir).map_err(std::io::Error::other)?;
    written
}

/// Writes `<staging>/failed/<run_id>/`: `events.jsonl` (the run's stream
/// `log`, moved there unless `events_in_place`; a new one when the run had
/// none) ending in a [`FINAL_PHASE`] event, and `receipt.json`. Returns
/// the folder. The staging directory must exist: a usage error never
/// creates one.
pub fn record(
    staging: &Path,
    ended: &Ended<'_>,
    log: Option<&mut EventLog>,
    events_in_place: bool,
) -> std::io::Result<PathBuf> {
    let dir = absolute(&failed_folder(staging)?.join(ended.run_id));
    std::fs::create_dir(&dir)?;
    // First a small receipt: a full disk leaves that one, never 0 bytes.
    write_new(&dir.join("receipt.json"), &first_receipt(ended))?;
    let mut own = None;
    let log = events_in(&dir, ended, log, events_in_place, &mut own)?;
    log.set_heartbeat(ended.heartbeat);
    let artifact = ended
        .artifact
        .map(absolute)
        .or_else(|| log.last_artifact().map(Path::to_path_buf))
        .map(|path| path.display().to_string());
    let paths = RecordPaths {
        events: absolute(log.path()),
        receipt: dir.join("receipt.json"),
        dir,
    };
    emit_final(log, ended, &paths)?;
    let receipt = failure_receipt(staging, ended, &paths.events, log.steps(), artifact);
    write_receipt(&receipt, &paths)?;
    Ok(paths.dir)
}

/// How a run that ended on `e` is recorded: its status, what to do next,
/// and the note on what it left untouched.
fn how_it_ended(e: &RunError, unfinished: bool) -> (&'static str, &'static str, &'static str) {
    match e {
        RunError::Staging(tomlite_staging::Error::Locked { .. }) => (
            Outcome::Blocked.as_str(),
            "wait for the run that holds the lock to end (or check it is alive), then run again",
            "another run holds the staging directory: this run changed nothing but this folder",
        ),
        _ if unfinished => (
            Outcome::Unfinished.as_str(),
            "run again: the next run's recovery completes this run's commit",
            "the run is published in runs/; the state or LATEST was not replaced yet",
        ),
        RunError::Interrupted { .. } => (
            Outcome::Failed.as_str(),
            "run again when it is time: nothing was committed, the next run redoes these records",
            "stopped by a signal before the commit point: the state, LATEST and the committed runs are as the last committed run left them",
        ),
        RunError::Staging(tomlite_staging::Error::StateBehind { .. }) => (
            Outcome::Blocked.as_str(),
            "restore the state file that lists the committed runs, or move those runs out of runs/ (see the error)",
            "recovery stopped before changing anything",
        ),
        _ => (
            Outcome::Failed.as_str(),
            "fix what bug_or_blocker names and run again: nothing was committed, the next run redoes these records",
            "nothing was committed: the state, LATEST and the committed runs are as the last committed run left them",
        ),
    }
}

/// Keeps the record of a run that ended on `e` in `<staging>/failed/`:
/// its event stream (`log`, with its run id) or a new one; a warning when
/// that cannot be written (the run's own error is what matters).
pub(super) fn keep_failed(
    cfg: &RunConfig,
    started_at: chrono::DateTime<chrono::Utc>,
    phase: &str,
    e: &RunError,
    log: Option<(&mut EventLog, &str)>,
    (counts, artifact): (serde_json::Value, Option<&Path>),
) {
    let unfinished = matches!(
        e,
        RunError::Staging(tomlite_staging::Error::Unfinished { .. })
    );
    let (status, next_step, note) = how_it_ended(e, unfinished);
    let error = crate::run::failed::chain(e);
    let (log, run_id) = match log {
        Some((log, id)) => {
            if unfinished {
                // The stream moved with the published run directory.
                let published = cfg.staging.join("runs").join(id).join("events.jsonl");
                let _ = log.reopen(&published);
            }
            (Some(log), id.to_string())
        }
        None => (
            None,
            new_run_id(&cfg.staging.join("runs"), chrono::Utc::now()),
        ),
    };
    let in_place = unfinished;
    let ended = crate::run::failed::Ended {
        run_id: &run_id,
        command: &cfg.command,
        status,
        exit_code: e.exit_code(),
        phase,
        error: &error,
        next_step,
        started_at,
        heartbeat: cfg.heartbeat,
        counts,
        left_untouched: crate::run::failed::untouched(&cfg.staging, note),
        artifact,
    };
    if let Err(w) = crate::run::failed::record(&cfg.staging, &ended, log, in_place) {
        eprintln!("tomlite: warning: cannot keep the record of failed run {run_id}: {w}");
    }
}
