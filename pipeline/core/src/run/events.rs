//! `events.jsonl`: the seed's status stream ("Project-Agent Status
//! Reporting"). Every event carries `subagent_run_id`, `phase`,
//! `current_artifact`, `command_or_api`, `evidence` (`counts`, `paths`,
//! `status_code`, `duration_seconds`), `bug_or_blocker`, `next_step` and
//! `stop_condition`; long phases send a heartbeat at least every 30 s.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Seconds between heartbeats during a long phase.
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// The seed's `stale_after_seconds`: a running run whose last event is
/// older than this is stalled (see [`stale_after`]).
pub const STALE_AFTER: Duration = Duration::from_secs(120);
/// Phase of the last event of every run, committed or not (the seed's
/// cadence point of the same name).
pub const FINAL_PHASE: &str = "before_blocked_or_final_response";
/// Phase of the event before each annotator batch (the seed's cadence point).
pub const BEFORE_CALL: &str = "before_tool_or_api_call";
/// Phase of the event after each annotator batch (the seed's cadence point).
pub const AFTER_CALL: &str = "after_tool_or_api_call";
/// Phase of the event of a record that failed (the seed's cadence point).
pub const BUG_FOUND: &str = "on_deterministic_bug_found";
/// Phase of the event after a record's retry (the seed's cadence point).
pub const AFTER_REPAIR: &str = "after_repair_attempt";

/// Whether `phase` is one of the per-batch and per-record events: they
/// neither stand for the run's phase nor delay a heartbeat.
pub fn is_fine_grained(phase: &str) -> bool {
    [BEFORE_CALL, AFTER_CALL, BUG_FOUND, AFTER_REPAIR].contains(&phase)
}

/// When a monitor should treat a run as stalled: the seed's 120 s, or four
/// heartbeats when the heartbeat is set slower than 30 s.
pub fn stale_after(heartbeat: Duration) -> Duration {
    STALE_AFTER.max(heartbeat * 4)
}

/// An append-only event stream.
#[derive(Debug)]
pub struct EventLog {
    file: File,
    path: PathBuf,
    run_id: String,
    command: String,
    started: Instant,
    last: Instant,
    last_started: Option<String>,
    last_completed: Option<String>,
    last_phase: Option<String>,
    last_artifact: Option<PathBuf>,
    heartbeat: Duration,
}

/// One status event.
#[derive(Debug, Default)]
pub struct Event<'a> {
    /// Phase name.
    pub phase: &'a str,
    /// The file being worked on.
    pub current_artifact: Option<&'a Path>,
    /// Counts so far.
    pub counts: Value,
    /// Paths produced.
    pub paths: Vec<String>,
    /// Exit status, when known.
    pub status_code: Option<i32>,
    /// A bug or blocker found.
    pub bug_or_blocker: Option<String>,
    /// What comes next.
    pub next_step: &'a str,
    /// What ends this phase.
    pub stop_condition: &'a str,
    /// The run's progress counters and `last_progress_at` (a run's stream
    /// sets them on every event; see the README's stall rule).
    pub progress: Option<Value>,
}

impl EventLog {
    /// Creates (or appends to) `path`.
    pub fn open(path: &Path, run_id: &str, command: &str) -> std::io::Result<Self> {
        let file = tomlite_staging::files::open_append(path)?;
        let now = Instant::now();
        Ok(Self {
            file,
            path: path.to_path_buf(),
            run_id: run_id.to_string(),
            command: command.to_string(),
            started: now,
            last: now,
            last_started: None,
            last_completed: None,
            last_phase: None,
            last_artifact: None,
            heartbeat: HEARTBEAT,
        })
    }

    /// Sets the heartbeat interval the events announce in
    /// `timeout_diagnostics` (the default is [`HEARTBEAT`]).
    pub fn set_heartbeat(&mut self, every: Duration) {
        self.heartbeat = every;
    }

    /// Where the run was when it stopped: the step started and not
    /// completed, else the last event's phase.
    pub fn current_phase(&self) -> Option<&str> {
        match (&self.last_started, &self.last_completed) {
            (Some(s), c) if c.as_ref() != Some(s) => Some(s),
            _ => self.last_phase.as_deref(),
        }
    }

    /// The last event's artifact (absolute).
    pub fn last_artifact(&self) -> Option<&Path> {
        self.last_artifact.as_deref()
    }

    /// The last step started and the last completed.
    pub fn steps(&self) -> (Option<&str>, Option<&str>) {
        (self.last_started.as_deref(), self.last_completed.as_deref())
    }

    /// Moves the stream to a new path (after the run directory's rename).
    pub fn reopen(&mut self, path: &Path) -> std::io::Result<()> {
        self.file = tomlite_staging::files::open_append(path)?;
        self.path = path.to_path_buf();
        Ok(())
    }

    /// The stream's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks a step as started (reported in later events).
    pub fn started(&mut self, step: &str) {
        self.last_started = Some(step.to_string());
    }

    /// Marks a step as completed (reported in later events).
    pub fn completed(&mut self, step: &str) {
        self.last_completed = Some(step.to_string());
    }

    /// Whether `every` passed since the last event (per-batch and
    /// per-record events aside).
    pub fn heartbeat_due(&self, every: Duration) -> bool {
        self.last.elapsed() >= every
    }

    /// Appends one event and flushes it.
    pub fn emit(&mut self, e: Event<'_>) -> std::io::Result<()> {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        // The seed: "/absolute/path/or/url-or-null".
        let artifact = e
            .current_artifact
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
        let mut v = json!({
            "subagent_run_id": self.run_id,
            "time": now,
            "phase": e.phase,
            "current_artifact": artifact.as_ref().map(|p| p.display().to_string()),
            "command_or_api": self.command,
            "evidence": {
                "counts": e.counts,
                "paths": e.paths,
                "status_code": e.status_code,
                "duration_seconds": (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            },
            "bug_or_blocker": e.bug_or_blocker,
            "next_step": e.next_step,
            "stop_condition": e.stop_condition,
            "last_started_step": self.last_started,
            "last_completed_step": self.last_completed,
            "timeout_diagnostics": {
                "heartbeat_interval_seconds": self.heartbeat.as_secs_f64(),
                "stale_after_seconds": stale_after(self.heartbeat).as_secs_f64(),
            },
        });
        if let (Some(progress), Some(all)) = (e.progress, v.as_object_mut()) {
            all.insert("progress".into(), progress);
        }
        let mut line = serde_json::to_vec(&v).expect("an event always serialises");
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()?;
        if is_fine_grained(e.phase) {
            return Ok(());
        }
        self.last = Instant::now();
        if e.phase != "heartbeat" {
            self.last_phase = Some(e.phase.to_string());
        }
        if artifact.is_some() {
            self.last_artifact = artifact;
        }
        Ok(())
    }
}
