//! `events.jsonl`: the seed's status stream ("Project-Agent Status
//! Reporting"). Every event carries `subagent_run_id`, `phase`,
//! `current_artifact`, `command_or_api`, `evidence` (`counts`, `paths`,
//! `status_code`, `duration_seconds`), `bug_or_blocker`, `next_step` and
//! `stop_condition`; long phases send a heartbeat at least every 30 s.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Seconds between heartbeats during a long phase.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

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
}

impl EventLog {
    /// Creates (or appends to) `path`.
    pub fn open(path: &Path, run_id: &str, command: &str) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
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
        })
    }

    /// Moves the stream to a new path (after the run directory's rename).
    pub fn reopen(&mut self, path: &Path) -> std::io::Result<()> {
        self.file = OpenOptions::new().create(true).append(true).open(path)?;
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

    /// Whether `every` passed since the last event.
    pub fn heartbeat_due(&self, every: Duration) -> bool {
        self.last.elapsed() >= every
    }

    /// Appends one event and flushes it.
    pub fn emit(&mut self, e: Event<'_>) -> std::io::Result<()> {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let v = json!({
            "subagent_run_id": self.run_id,
            "time": now,
            "phase": e.phase,
            "current_artifact": e.current_artifact.map(|p| p.display().to_string()),
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
        });
        let mut line = serde_json::to_vec(&v).expect("an event always serialises");
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()?;
        self.last = Instant::now();
        Ok(())
    }
}
