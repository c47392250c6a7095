//! The run's status stream (`events.jsonl`) as the run and its heartbeat
//! thread share it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::run::events::{Event, EventLog};
use tomlite_staging::RunDir;

use crate::run::config::RunConfig;
use crate::run::error::RunError;
use crate::stage::receipt::Counts;

/// The status stream, shared with the heartbeat thread.
pub(super) struct Status {
    pub(super) log: Mutex<EventLog>,
    /// Counts and the current artifact, for heartbeats.
    pub(super) snapshot: Mutex<(serde_json::Value, Option<PathBuf>)>,
    pub(super) stop: AtomicBool,
}

impl Status {
    /// Opens the run's `events.jsonl`.
    pub(super) fn open(cfg: &RunConfig, run: &RunDir, run_id: &str) -> Result<Self, RunError> {
        let events_path = run.path().join("events.jsonl");
        let mut log = EventLog::open(&events_path, run_id, &cfg.command).map_err(|source| {
            RunError::Events {
                path: events_path,
                source,
            }
        })?;
        log.set_heartbeat(cfg.heartbeat);
        Ok(Self {
            log: Mutex::new(log),
            snapshot: Mutex::new((serde_json::json!({}), None)),
            stop: AtomicBool::new(false),
        })
    }

    /// Writes one event.
    pub(super) fn emit(&self, e: Event<'_>) -> Result<(), RunError> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.emit(e).map_err(|source| RunError::Events {
            path: log.path().to_path_buf(),
            source,
        })
    }

    /// Marks a step as started.
    pub(super) fn started(&self, step: &str) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .started(step);
    }

    /// Marks a step as completed.
    pub(super) fn completed(&self, step: &str) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .completed(step);
    }

    /// The counts and artifact the next heartbeat shows.
    pub(super) fn set(&self, counts: &Counts, artifact: Option<&Path>) {
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = (
            serde_json::to_value(counts).unwrap_or_default(),
            artifact.map(Path::to_path_buf),
        );
    }

    /// Emits a heartbeat whenever `every` passed without an event, until
    /// [`Status::stop`] is set.
    pub(super) fn beat(&self, every: Duration) {
        let tick = (every / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::park_timeout(tick);
            let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            if self.stop.load(Ordering::Relaxed) || !log.heartbeat_due(every) {
                continue;
            }
            let (counts, artifact) = self
                .snapshot
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let Err(e) = log.emit(Event {
                phase: "heartbeat",
                current_artifact: artifact.as_deref(),
                counts,
                next_step: "keep going",
                stop_condition: "every input read, or the deadline",
                ..Default::default()
            }) {
                eprintln!("tomlite: warning: cannot write a heartbeat: {e}");
            }
        }
    }
}

/// Stops the heartbeat thread when dropped.
pub(super) struct StopOnDrop<'a>(pub(super) &'a Status, pub(super) std::thread::Thread);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Relaxed);
        self.1.unpark();
    }
}
