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
    /// The progress counters every event carries.
    moved: Mutex<Moved>,
    pub(super) stop: AtomicBool,
}

/// What a run moved so far, and when it last moved: the heartbeat's proof
/// of progress, not just of life. A monitor calls a run stalled when
/// `last_progress_at` is older than `stale_after_seconds`.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Moved {
    /// Lines, rows or journal files read from the inputs (rejects and
    /// other shards' records included).
    pub(super) records_read: u64,
    /// Records the annotator returned an annotation for.
    pub(super) annotated: u64,
    /// Records decided and written to the staged tables.
    pub(super) staged: u64,
    /// Records whose annotation failed.
    pub(super) failed: u64,
    /// When a counter last moved (the run's start before any did).
    pub(super) last_progress_at: String,
}

/// Now, as the events write times.
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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
            moved: Mutex::new(Moved {
                records_read: 0,
                annotated: 0,
                staged: 0,
                failed: 0,
                last_progress_at: now(),
            }),
            stop: AtomicBool::new(false),
        })
    }

    /// Moves the progress counters (`f` adds to them); `last_progress_at`
    /// becomes now when one moved.
    pub(super) fn moved(&self, f: impl FnOnce(&mut Moved)) {
        let mut m = self.moved.lock().unwrap_or_else(|p| p.into_inner());
        let before = (m.records_read, m.annotated, m.staged, m.failed);
        f(&mut m);
        if (m.records_read, m.annotated, m.staged, m.failed) != before {
            m.last_progress_at = now();
        }
    }

    /// The progress counters as the events carry them.
    fn progress(&self) -> serde_json::Value {
        let m = self.moved.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::to_value(&*m).unwrap_or_default()
    }

    /// The artifact the heartbeats name (the input being read).
    pub(super) fn artifact(&self) -> Option<PathBuf> {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// Writes one event, with the progress counters.
    pub(super) fn emit(&self, mut e: Event<'_>) -> Result<(), RunError> {
        if e.progress.is_none() {
            e.progress = Some(self.progress());
        }
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
                progress: Some(self.progress()),
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
