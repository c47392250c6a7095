//! One run, from input files to a committed run directory.
//!
//! Records stream through ingest → skip-unchanged → annotate → decide →
//! stage, in batches; nothing holds the records themselves in memory. What
//! grows with the input is one entry per record id (the state and the ids
//! seen in this run), a few dozen bytes each.

pub mod events;
pub mod failed;
pub mod merge;
pub mod progress;
mod stage_rows;

pub use crate::stage::receipt::{Counts, InputInfo, SensitiveCounts, StopCondition};

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tomlite_staging::{StagingDir, State, StateRow, fault};

use crate::annotate::read_as::ReadAs;
use crate::annotate::{AnnotateError, Annotator, AnnotatorInfo};
use crate::graph::nodes::Registry;
use crate::ingest::record::{IngestError, IngestOptions, Item, Record, Reject};
use crate::rules::decide::{
    Decision, EdgeItem, Exists, Nodes, SensitiveRecord, TagItem, decide, sensitivity,
};
use crate::rules::policy::Policy;
use crate::rules::reason::Reason;
use crate::run::events::{Event, EventLog};
use crate::run::progress::{Progress, ProgressMode};
use crate::run::stage_rows::{RejectedInput, StagedTables, parse_cells};
use crate::stage::receipt::{
    AnnotatorReceipt, NodesReceipt, Outcome, Receipt, RetryPolicy, ShardReceipt,
};
use crate::stage::tables::ParseCells;

/// Everything a run needs, resolved from the command line and the policy.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Record files or journal folders, in order.
    pub inputs: Vec<PathBuf>,
    /// The staging directory.
    pub staging: PathBuf,
    /// The effective policy.
    pub policy: Policy,
    /// Where the policy came from (`None`: the seed's defaults).
    pub policy_source: Option<PathBuf>,
    /// The node registry and where it came from.
    pub nodes: Option<(PathBuf, Registry)>,
    /// Ignore the state: process every record.
    pub full: bool,
    /// How records are checked.
    pub ingest: IngestOptions,
    /// The command line, for the status stream.
    pub command: String,
    /// Stop taking new records when this instant is near; commit what is
    /// done ([`StopCondition::Deadline`]).
    pub deadline: Option<Instant>,
    /// Process only the records of one shard.
    pub shard: Option<Shard>,
    /// Records per annotator call (default: the annotator's own).
    pub batch_size: Option<usize>,
    /// The run fails without committing when more than this share of the
    /// records annotated so far (at least [`MIN_FAILED_FOR_BUDGET`] of them)
    /// fails; records that failed in earlier runs are not counted.
    pub max_failed_share: f64,
    /// A record whose annotation alone takes longer fails.
    pub record_timeout: Option<Duration>,
    /// Seconds between heartbeats in `events.jsonl`.
    pub heartbeat: Duration,
    /// How progress is shown on stderr.
    pub progress: ProgressMode,
    /// The `committed` event's status code is 6 when poison records were
    /// skipped (the binary's `--escalate-poison`).
    pub escalate_poison: bool,
    /// Retries of a transient I/O error (the seed's default 1, at most
    /// [`tomlite_staging::retry::MAX_RETRIES`]).
    pub transient_retries: u32,
}

impl RunConfig {
    /// A config with the operational defaults (no deadline, no shard,
    /// failure share 0.1, heartbeat 30 s, quiet).
    pub fn new(inputs: Vec<PathBuf>, staging: PathBuf, policy: Policy) -> Self {
        Self {
            inputs,
            staging,
            ingest: IngestOptions {
                max_text_bytes: policy.run.max_text_bytes,
                journal_persona: None,
            },
            policy,
            policy_source: None,
            nodes: None,
            full: false,
            command: String::new(),
            deadline: None,
            shard: None,
            batch_size: None,
            max_failed_share: DEFAULT_MAX_FAILED_SHARE,
            record_timeout: None,
            heartbeat: crate::run::events::HEARTBEAT,
            progress: ProgressMode::Quiet,
            escalate_poison: false,
            transient_retries: tomlite_staging::retry::DEFAULT_RETRIES,
        }
    }
}

pub use tomlite_staging::retry::POISON_AFTER;
/// Default of [`RunConfig::max_failed_share`].
pub const DEFAULT_MAX_FAILED_SHARE: f64 = 0.1;
/// A batch fails the run only with at least this many failed records.
pub const MIN_FAILED_FOR_BUDGET: u64 = 3;

/// One shard of `count`: the records whose persona hashes to `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// How many shards.
    pub count: u32,
}

impl Shard {
    /// Parses `K/N` (`0 <= K < N`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| format!("shard `{s}`: expected K/N, e.g. 0/4"))?;
        let index: u32 = k
            .trim()
            .parse()
            .map_err(|_| format!("shard `{s}`: K is not a number"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("shard `{s}`: N is not a number"))?;
        if count == 0 || index >= count {
            return Err(format!("shard `{s}`: need 0 <= K < N"));
        }
        Ok(Self { index, count })
    }

    /// The shard a persona belongs to: the first 8 bytes of sha256(persona)
    /// modulo the count. Stable across machines and releases.
    pub fn of(persona_id: &str, count: u32) -> u32 {
        use sha2::Digest as _;
        let h = sha2::Sha256::digest(persona_id.as_bytes());
        let x = u64::from_be_bytes(h[..8].try_into().expect("8 bytes"));
        (x % u64::from(count)) as u32
    }

    /// Whether a record of this persona is this shard's.
    pub fn owns(&self, persona_id: &str) -> bool {
        Self::of(persona_id, self.count) == self.index
    }
}

/// Errors that stop a run; nothing is committed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The staging directory failed (including: locked).
    #[error(transparent)]
    Staging(#[from] tomlite_staging::Error),
    /// An input cannot be read at all.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// The annotator failed as a whole.
    #[error(transparent)]
    Annotate(#[from] AnnotateError),
    /// The status stream cannot be written.
    #[error("cannot write status events to {}", path.display())]
    Events {
        /// The events file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The report cannot be built.
    #[error(transparent)]
    Report(crate::report::ReportError),
    /// The curated decisions cannot be read.
    #[error("cannot read the curated decisions: {message}")]
    Curated {
        /// What went wrong.
        message: String,
    },
    /// Too many records failed: the annotator is broken, not the records.
    /// Nothing is committed.
    #[error(
        "{failed} of {attempted} records failed to annotate (more than the allowed share {share}; records that failed in earlier runs not counted); first: {first}"
    )]
    FailureBudget {
        /// Failed records so far.
        failed: u64,
        /// Records annotated so far.
        attempted: u64,
        /// The allowed share.
        share: f64,
        /// The first failure.
        first: String,
    },
    /// An input cannot be opened.
    #[error("cannot read input {}", path.display())]
    Hash {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// What a finished run reports.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// The run's id.
    pub run_id: String,
    /// The committed run directory.
    pub run_dir: PathBuf,
    /// Counts per outcome.
    pub counts: Counts,
    /// Quarantined items per reason.
    pub reasons: BTreeMap<String, u64>,
    /// Sensitive records.
    pub sensitive: SensitiveCounts,
    /// Which runs this one's skipped records were processed in.
    pub skipped_from: Vec<String>,
    /// What a killed earlier run left behind and recovery removed or completed.
    pub recovered: Vec<String>,
    /// What ended the run.
    pub stop_condition: StopCondition,
    /// Transient I/O errors retried.
    pub retries_used: u32,
}

struct Seen {
    /// Record id → whether it was a valid record in this input.
    ids: HashMap<Box<str>, bool>,
}

struct RunNodes<'a> {
    registry: Option<&'a Registry>,
    state: &'a State,
    seen: &'a Seen,
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

/// A record whose edges wait for the end of the input.
struct Pending {
    record: Record,
    tags: Vec<TagItem>,
    edges: Vec<EdgeItem>,
    state: (tomlite_staging::Digest, tomlite_staging::Digest),
    embedding: Option<Vec<i8>>,
    read_as: Option<ReadAs>,
    sensitive: Option<Box<SensitiveRecord>>,
}

struct Ctx<'a> {
    cfg: &'a RunConfig,
    run_id: String,
    info: AnnotatorInfo,
    policy_sha: String,
    tables: StagedTables,
    counts: Counts,
    reasons: BTreeMap<String, u64>,
    sensitive: SensitiveCounts,
    /// The first memory links, for the receipt.
    memory_links: Vec<serde_json::Value>,
    /// Curated items by record id: (fingerprint hex, identity, decision).
    suppress: foldhash::HashMap<String, Vec<(String, String, String)>>,
    /// Failed and poison records, for the receipt.
    failures: Vec<serde_json::Value>,
    /// The time budget.
    budget: Budget,
}

/// The status stream, shared with the heartbeat thread.
struct Status {
    log: Mutex<EventLog>,
    /// Counts and the current artifact, for heartbeats.
    snapshot: Mutex<(serde_json::Value, Option<PathBuf>)>,
    stop: AtomicBool,
}

impl Status {
    fn emit(&self, e: Event<'_>) -> Result<(), RunError> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.emit(e).map_err(|source| RunError::Events {
            path: log.path().to_path_buf(),
            source,
        })
    }

    fn started(&self, step: &str) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .started(step);
    }

    fn completed(&self, step: &str) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .completed(step);
    }

    fn set(&self, counts: &Counts, artifact: Option<&Path>) {
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = (
            serde_json::to_value(counts).unwrap_or_default(),
            artifact.map(Path::to_path_buf),
        );
    }

    /// Emits a heartbeat whenever `every` passed without an event, until
    /// [`Status::stop`] is set.
    fn beat(&self, every: Duration) {
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

/// The time budget: stop taking records when the next batch and the
/// commit would not fit before the deadline.
struct Budget {
    deadline: Option<Instant>,
    started: Instant,
    /// The slowest batch so far.
    batch: Duration,
    /// Records annotated so far that had not failed in an earlier run, and
    /// how many of them failed: the failure budget's share.
    attempted: u64,
    /// See `attempted`.
    failed: u64,
}

impl Budget {
    fn near(&self) -> bool {
        let Some(deadline) = self.deadline else {
            return false;
        };
        // Room for one more batch (with slack) and for closing the tables,
        // the report and the commit.
        let reserve = Duration::from_secs(1) + self.started.elapsed() / 50;
        Instant::now() + self.batch.mul_f64(1.5) + reserve >= deadline
    }
}

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
    let events_path = run.path().join("events.jsonl");
    let log = match EventLog::open(&events_path, &run_id, &cfg.command) {
        Ok(mut log) => {
            log.set_heartbeat(cfg.heartbeat);
            log
        }
        Err(source) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(early(
                "open events",
                RunError::Events {
                    path: events_path,
                    source,
                },
            ));
        }
    };
    let status = Status {
        log: Mutex::new(log),
        snapshot: Mutex::new((json!({}), None)),
        stop: AtomicBool::new(false),
    };
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
            Some((&mut *log, &run_id)),
            (counts, artifact.as_deref()),
        );
        drop(log);
        if tmp.exists() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    result
}

impl RunError {
    /// The exit code this error ends `tomlite run` with: 3 for a locked
    /// staging directory, 1 otherwise (README, "Exit codes").
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Staging(tomlite_staging::Error::Locked { .. }) => 3,
            _ => 1,
        }
    }
}

/// Keeps the record of a run that ended on `e` in `<staging>/failed/`:
/// its event stream (`log`, with its run id) or a new one; a warning when
/// that cannot be written (the run's own error is what matters).
fn keep_failed(
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
    let (status, next_step, note) = match e {
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
    };
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

/// Stops the heartbeat thread when dropped.
struct StopOnDrop<'a>(&'a Status, std::thread::Thread);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Relaxed);
        self.1.unpark();
    }
}

struct Started {
    at: chrono::DateTime<chrono::Utc>,
    clock: Instant,
    recovered: Vec<String>,
    /// Entries recovery left alone, for the first event's `bug_or_blocker`.
    warnings: Vec<String>,
    run_id: String,
}

#[allow(clippy::too_many_arguments)]
fn run_body(
    cfg: &RunConfig,
    annotator: &mut dyn Annotator,
    staging: &StagingDir,
    mut run: tomlite_staging::RunDir,
    state: &mut State,
    status: &Status,
    started: Started,
    stop_heartbeats: impl FnOnce(),
) -> Result<RunSummary, RunError> {
    let Started {
        at: started_at,
        clock,
        recovered,
        warnings,
        run_id,
    } = started;
    let info = annotator.info();
    status.emit(Event {
        phase: "start",
        current_artifact: Some(run.path()),
        counts: json!({"state_records": state.len(), "recovered": recovered.len(), "shard": cfg.shard}),
        paths: recovered.clone(),
        bug_or_blocker: (!warnings.is_empty()).then(|| {
            format!(
                "recovery left alone what this program did not write: {}",
                warnings.join("; ")
            )
        }),
        next_step: "stream the inputs through annotate, validate and decide",
        stop_condition: "every input read, or the deadline",
        ..Default::default()
    })?;

    let tables = StagedTables::create(&mut run, &info.id, &run_id)?;
    let mut ctx = Ctx {
        cfg,
        run_id: run_id.clone(),
        info: info.clone(),
        policy_sha: cfg.policy.sha256(),
        tables,
        counts: Counts::default(),
        reasons: BTreeMap::new(),
        sensitive: SensitiveCounts::default(),
        memory_links: Vec::new(),
        suppress: crate::curate::Curated::load(&cfg.staging)
            .map_err(|e| RunError::Curated {
                message: e.to_string(),
            })?
            .suppression(),
        failures: Vec::new(),
        budget: Budget {
            deadline: cfg.deadline,
            started: clock,
            batch: Duration::ZERO,
            attempted: 0,
            failed: 0,
        },
    };
    // Problems of the annotation file are reported once, by shard 0.
    let first_shard = cfg.shard.is_none_or(|s| s.index == 0);
    for r in annotator.input_problems() {
        if first_shard {
            ctx.reject(&r, RejectedInput::Annotations)?;
            ctx.counts.annotation_rejects += 1;
        }
    }

    let total: Option<u64> = match cfg.progress {
        ProgressMode::Quiet => None,
        _ => cfg
            .inputs
            .iter()
            .map(|p| crate::run::progress::estimate_records(p))
            .sum(),
    };
    let mut progress = Progress::new(cfg.progress, total);
    let mut seen = Seen {
        ids: HashMap::new(),
    };
    let mut pending: Vec<Pending> = Vec::new();
    let mut skipped_from: BTreeMap<String, u64> = BTreeMap::new();
    let mut inputs = Vec::new();
    let mut stop = StopCondition::InputExhausted;
    let mut lines_read = 0u64;
    let batch_size = cfg
        .batch_size
        .unwrap_or_else(|| annotator.batch_size())
        .max(1);
    'inputs: for input in &cfg.inputs {
        status.started(&format!("read {}", input.display()));
        status.set(&ctx.counts, Some(input));
        // Opened once: hashed as it is read (a pipe too), see ingest::open_input.
        let (items, digest) = staging
            .retry()
            .io("read_input", || {
                match crate::ingest::open_input(input, &cfg.ingest) {
                    // An entry inside a journal folder is named.
                    Err(IngestError::Io { path, source }) if path != *input => Err(
                        std::io::Error::new(source.kind(), format!("{}: {source}", path.display())),
                    ),
                    Err(IngestError::Io { source, .. }) => Err(source),
                    other => Ok(other),
                }
            })
            .map_err(|source| RunError::Hash {
                path: input.clone(),
                source,
            })??;
        let mut count = 0u64;
        let mut batch: Vec<Record> = Vec::with_capacity(batch_size);
        let mut stopped = false;
        for item in items {
            let item = item?;
            count += 1;
            lines_read += 1;
            match item {
                Item::Reject(r) => {
                    if let Some(id) = &r.record_id {
                        seen.ids.entry(id.as_str().into()).or_insert(false);
                    }
                    // A line that is no record belongs to no persona: shard 0 reports it.
                    if !first_shard {
                        ctx.counts.other_shards += 1;
                        continue;
                    }
                    ctx.counts.records_in += 1;
                    ctx.counts.rejected += 1;
                    ctx.reject(&r, RejectedInput::Records)?;
                }
                Item::Record(rec) => {
                    let mine = cfg.shard.is_none_or(|s| s.owns(&rec.persona_id));
                    // Only a record claims its id: a rejected line does not.
                    if seen.ids.get(rec.id.as_str()) == Some(&true) {
                        if !mine {
                            ctx.counts.other_shards += 1;
                            continue;
                        }
                        ctx.counts.records_in += 1;
                        ctx.counts.rejected += 1;
                        let r = Reject {
                            source: rec.origin.source.clone(),
                            line: rec.origin.line,
                            record_id: Some(rec.id.clone()),
                            field: Some("id".into()),
                            error:
                                "duplicate id: an earlier line or row of the input has the same id"
                                    .into(),
                        };
                        ctx.reject(&r, RejectedInput::Records)?;
                        continue;
                    }
                    seen.ids.insert(rec.id.as_str().into(), true);
                    if !mine {
                        ctx.counts.other_shards += 1;
                        continue;
                    }
                    ctx.counts.records_in += 1;
                    batch.push(*rec);
                    if batch.len() == batch_size {
                        stopped = ctx.process_or_defer(
                            &mut batch,
                            annotator,
                            state,
                            &seen,
                            &mut pending,
                            &mut skipped_from,
                        )?;
                        if stopped {
                            break;
                        }
                        status.set(&ctx.counts, Some(input));
                    }
                }
            }
            progress.update(lines_read, ctx.counts.processed);
        }
        if !stopped {
            stopped = ctx.process_or_defer(
                &mut batch,
                annotator,
                state,
                &seen,
                &mut pending,
                &mut skipped_from,
            )?;
        }
        status.completed(&format!("read {}", input.display()));
        status.set(&ctx.counts, Some(input));
        status.emit(Event {
            phase: if stopped { "deadline" } else { "input_done" },
            current_artifact: Some(input),
            counts: serde_json::to_value(&ctx.counts).unwrap_or_default(),
            next_step: if stopped {
                "commit what is done; the next run takes the rest"
            } else {
                "next input, or settle pending edges"
            },
            stop_condition: "every input read, or the deadline",
            ..Default::default()
        })?;
        let sha = digest.finish()?;
        inputs.push(InputInfo {
            path: input.display().to_string(),
            sha256: sha.sha256,
            bytes: sha.bytes,
            records: count,
        });
        if stopped {
            stop = StopCondition::Deadline;
            break 'inputs;
        }
    }
    progress.finish(lines_read, ctx.counts.processed);

    if stop == StopCondition::Deadline {
        // Records whose edges wait for the rest of the input are redone
        // next run, with the whole input in view.
        ctx.counts.processed -= pending.len() as u64;
        ctx.counts.deferred += pending.len() as u64;
        pending.clear();
    }
    // Edges to memories that came later in the input are settled now.
    for mut p in pending {
        for e in &mut p.edges {
            e.resolve(|id| seen.ids.get(id) == Some(&true) || state.contains(id));
        }
        ctx.sensitive_row(&p.record, p.sensitive.as_deref())?;
        let outcome = ctx.stage(&p.record, &p.tags, &p.edges, None, p.read_as)?;
        state.upsert(ctx.state_row(&p.record, p.state, outcome, p.embedding.as_deref()));
    }
    if stop == StopCondition::InputExhausted {
        for r in annotator.unused() {
            // Another shard's record is not a stray annotation.
            let elsewhere = r
                .record_id
                .as_deref()
                .is_some_and(|id| seen.ids.contains_key(id));
            if first_shard && !elsewhere {
                ctx.reject(&r, RejectedInput::Annotations)?;
                ctx.counts.annotation_rejects += 1;
            }
        }
    }
    // The annotator's own counts (e.g. the parse classes of raw output).
    if let Some(counts) = annotator.status_counts() {
        status.emit(Event {
            phase: "annotations_parsed",
            counts,
            next_step: "write tables",
            stop_condition: "every annotation read",
            ..Default::default()
        })?;
    }

    // Poison is escalated: the status stream says which records were skipped.
    if ctx.counts.poison_skipped > 0 {
        let ids: Vec<String> = ctx
            .failures
            .iter()
            .filter(|f| f["kind"] == "poison")
            .take(20)
            .map(|f| {
                format!(
                    "{} (failed in {} runs)",
                    f["record_id"].as_str().unwrap_or_default(),
                    f["failures"]
                )
            })
            .collect();
        let more = ctx.counts.poison_skipped.saturating_sub(ids.len() as u64);
        status.emit(Event {
            phase: "poison",
            counts: json!({"poison_skipped": ctx.counts.poison_skipped, "failed": ctx.counts.failed, "poison_after_failed_runs": POISON_AFTER}),
            bug_or_blocker: Some(format!(
                "{} poison records skipped: {}{}",
                ctx.counts.poison_skipped,
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
        })?;
    }

    status.started("write tables");
    let Ctx {
        tables,
        counts,
        reasons,
        sensitive,
        memory_links,
        failures,
        ..
    } = ctx;
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
    let finished_at = chrono::Utc::now();
    let retries_used = staging.retry().used();
    let receipt = Receipt {
        run_id: run_id.clone(),
        status: Outcome::Committed,
        started_at: started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        finished_at: finished_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        duration_seconds: clock.elapsed().as_secs_f64(),
        inputs,
        annotator: AnnotatorReceipt {
            id: info.id.clone(),
            sha256: info.sha256.clone(),
            stats: annotator.stats(),
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
        counts: counts.clone(),
        reasons: reasons.clone(),
        sensitive: sensitive.clone(),
        memory_links,
        failed: failures_of(&failures, "failed"),
        poison: failures_of(&failures, "poison"),
        skipped_from_runs: skipped_from.clone(),
        attempts: u64::from(staging.retry().max_attempts()),
        attempts_by_operation: Some(staging.retry().attempts()),
        retries_used: u64::from(retries_used),
        retry_policy: Some(RetryPolicy {
            tool_transient_retries: staging.retry().limit(),
            default_retries: tomlite_staging::retry::DEFAULT_RETRIES,
            hard_max_retries: tomlite_staging::retry::MAX_RETRIES,
            max_retries: staging.retry().limit(),
            backoff_ms: tomlite_staging::retry::BACKOFF.as_millis() as u64,
            poison_after_failed_runs: POISON_AFTER,
            max_failed_share: cfg.max_failed_share,
        }),
        recovered: recovered.clone(),
        stop_condition: Some(stop),
        resumable: stop == StopCondition::Deadline,
        files: None,
    };
    // The curator's report, from the closed tables.
    status.started("write report");
    let previous = staging
        .latest()?
        .and_then(|id| std::fs::read(staging.runs_dir().join(id).join("receipt.json")).ok())
        .and_then(|b| serde_json::from_slice(&b).ok());
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
    // The receipt, written last: it seals every file written before it.
    let receipt = crate::stage::verify::sealed(receipt, run.path())?;
    run.write_json("receipt.json", &receipt)?;
    fault::point("staged.receipt");
    status.completed("write report");
    // Nothing is committed from an annotations file that changed under the run.
    annotator.check_unchanged()?;
    status.emit(Event {
        phase: "commit",
        current_artifact: Some(run.path()),
        counts: serde_json::to_value(&counts).unwrap_or_default(),
        paths,
        next_step: "rename the run directory, then replace state and LATEST",
        stop_condition: "LATEST names this run",
        ..Default::default()
    })?;
    let run_dir = run.commit(state, staging.retry())?;
    // Heartbeats went on through the commit (their file moved with the
    // directory); the stream now continues at the final path.
    stop_heartbeats();
    let final_events = run_dir.join("events.jsonl");
    // The run is committed: a status stream that cannot be continued is
    // worth a warning, not a failed run.
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
    let ended = ended.and_then(|()| {
        status.emit(Event {
            phase: "committed",
            current_artifact: Some(&run_dir),
            counts: serde_json::to_value(&counts).unwrap_or_default(),
            status_code: Some(exit_code),
            next_step,
            stop_condition: stop.as_str(),
            ..Default::default()
        })?;
        // The seed's last cadence point: every run's stream ends with it.
        status.emit(Event {
            phase: crate::run::events::FINAL_PHASE,
            current_artifact: Some(&run_dir),
            counts: serde_json::to_value(&counts).unwrap_or_default(),
            paths: vec![
                std::path::absolute(run_dir.join("receipt.json"))
                    .unwrap_or_default()
                    .display()
                    .to_string(),
            ],
            status_code: Some(exit_code),
            next_step,
            stop_condition: stop.as_str(),
            ..Default::default()
        })
    });
    if let Err(e) = ended {
        eprintln!("tomlite: warning: run {run_id} committed, but {e}");
    }
    Ok(RunSummary {
        run_id,
        run_dir,
        counts,
        reasons,
        sensitive,
        skipped_from: skipped_from.into_keys().collect(),
        recovered,
        stop_condition: stop,
        retries_used,
    })
}

/// The first 100 failure entries of one kind (`failed` or `poison`).
fn failures_of(failures: &[serde_json::Value], kind: &str) -> Vec<serde_json::Value> {
    failures
        .iter()
        .filter(|f| f["kind"] == kind)
        .take(100)
        .cloned()
        .collect()
}

/// `YYYYMMDDTHHMMSSZ-xxxx`: sortable by time, unique in the staging directory.
pub fn new_run_id(runs: &Path, now: chrono::DateTime<chrono::Utc>) -> String {
    let stamp = now.format("%Y%m%dT%H%M%SZ");
    let salt = (std::process::id() as u64) ^ u64::from(now.timestamp_subsec_nanos());
    for bump in 0.. {
        let id = format!("{stamp}-{:04x}", (salt + bump) & 0xffff);
        // Any entry counts, a dangling link included; so does a failed
        // run's record of the same id.
        let taken = |p: PathBuf| std::fs::symlink_metadata(p).is_ok();
        if !taken(runs.join(&id))
            && !taken(runs.join(format!("{}{id}", tomlite_staging::TMP_PREFIX)))
            && !runs
                .parent()
                .is_some_and(|root| taken(root.join(crate::run::failed::FAILED_DIR).join(&id)))
        {
            return id;
        }
    }
    unreachable!("some suffix is free")
}

impl Ctx<'_> {
    fn reject(&mut self, r: &Reject, input: RejectedInput) -> Result<(), RunError> {
        self.tables.reject(r, input)?;
        Ok(())
    }

    fn state_row<'r>(
        &'r self,
        record: &'r Record,
        digests: (tomlite_staging::Digest, tomlite_staging::Digest),
        outcome: &'static str,
        embedding: Option<&'r [i8]>,
    ) -> StateRow<'r> {
        StateRow {
            record_id: &record.id,
            fingerprint: digests.0,
            annotator: &self.info.id,
            annotation: digests.1,
            policy_sha256: &self.policy_sha,
            run_id: &self.run_id,
            outcome,
            persona_id: embedding.map(|_| record.persona_id.as_str()),
            embedding,
            failures: 0,
        }
    }

    /// Processes the batch in hand, or, when the time budget is near,
    /// leaves it for the next run; returns whether it was left.
    fn process_or_defer(
        &mut self,
        batch: &mut Vec<Record>,
        annotator: &mut dyn Annotator,
        state: &mut State,
        seen: &Seen,
        pending: &mut Vec<Pending>,
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
        seen: &Seen,
        pending: &mut Vec<Pending>,
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
                        pending.push(Pending {
                            record: rec,
                            tags,
                            edges,
                            state: digests,
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

    /// A record whose annotation failed: a reject row, retried next run.
    fn failed(&mut self, rec: &Record, failures: u32, error: &str) -> Result<(), RunError> {
        self.counts.failed += 1;
        let message = format!(
            "annotation failed (failed run {failures} of {POISON_AFTER} before the record is skipped as poison): {error}"
        );
        self.failure(
            rec,
            RejectedInput::AnnotationFailed,
            &message,
            json!({"kind": "failed", "error": error}),
            failures,
        )
    }

    /// A poison record: skipped, listed, kept in the state as it was.
    fn poison(&mut self, rec: &Record, failures: u32, last_run: &str) -> Result<(), RunError> {
        self.counts.poison_skipped += 1;
        let message = format!(
            "poison: annotation of this content failed in {failures} runs (last: run {last_run}); skipped until the record or the annotator changes"
        );
        let entry = json!({"kind": "poison", "last_failed_run": last_run});
        self.failure(rec, RejectedInput::Poison, &message, entry, failures)
    }

    /// The reject row and the receipt entry of a failed or poison record.
    fn failure(
        &mut self,
        rec: &Record,
        input: RejectedInput,
        message: &str,
        mut entry: serde_json::Value,
        failures: u32,
    ) -> Result<(), RunError> {
        self.tables.failed_record(rec, input, message)?;
        entry["record_id"] = json!(rec.id);
        entry["source"] = json!(rec.origin.source);
        entry["line"] = json!(rec.origin.line);
        entry["failures"] = json!(failures);
        self.failures.push(entry);
        Ok(())
    }

    fn abstain(
        &mut self,
        rec: &Record,
        best: Option<&(String, f64)>,
        why: &str,
        read_as: Option<ReadAs>,
    ) -> Result<(), RunError> {
        self.counts.abstained += 1;
        self.tables
            .abstained(rec, best, why, parse_cells(read_as))?;
        Ok(())
    }

    /// The `sensitive` row and counts of a sensitive record (nothing for
    /// any other).
    fn sensitive_row(&mut self, rec: &Record, s: Option<&SensitiveRecord>) -> Result<(), RunError> {
        let Some(s) = s else {
            return Ok(());
        };
        self.sensitive.add(s);
        self.tables.sensitive(rec, s)?;
        Ok(())
    }

    fn count_reasons(&mut self, reasons: &[Reason]) {
        for r in reasons {
            *self.reasons.entry(r.as_str().to_string()).or_default() += 1;
        }
    }

    /// Whether a curator already decided this item of this unchanged record.
    fn curated(&self, rec: &Record, identity: &str) -> bool {
        self.suppress.get(&rec.id).is_some_and(|items| {
            let fp = hex::encode(rec.fingerprint());
            items.iter().any(|(f, i, _)| *f == fp && i == identity)
        })
    }

    fn unparseable(
        &mut self,
        rec: &Record,
        raw: &str,
        error: &str,
        read_as: Option<ReadAs>,
    ) -> Result<(), RunError> {
        if self.curated(rec, "annotation") {
            self.counts.curator_suppressed += 1;
            return Ok(());
        }
        self.counts.quarantined_annotations += 1;
        self.count_reasons(&[Reason::UnparseableAnnotation]);
        self.tables
            .unreadable_annotation(rec, raw, error, parse_cells(read_as))?;
        Ok(())
    }

    /// Writes a record's decided items; returns its outcome for the state.
    fn stage(
        &mut self,
        rec: &Record,
        tags: &[TagItem],
        edges: &[EdgeItem],
        best: Option<&(String, f64)>,
        read_as: Option<ReadAs>,
    ) -> Result<&'static str, RunError> {
        let parse = parse_cells(read_as);
        if tags.is_empty() {
            self.abstain(rec, best, "no_tags", read_as)?;
        }
        let mut staged = StagedItems::default();
        for tag in tags {
            staged.add(self.stage_tag(rec, tag, parse)?);
        }
        for edge in edges {
            self.count_edge(rec, edge);
            staged.add(self.stage_edge(rec, edge, parse)?);
        }
        Ok(staged.outcome(tags.is_empty()))
    }

    /// Promotes, queues or (when a curator already decided it) drops a tag.
    fn stage_tag(
        &mut self,
        rec: &Record,
        tag: &TagItem,
        parse: ParseCells<'_>,
    ) -> Result<ItemFate, RunError> {
        if tag.reasons.is_empty() {
            self.counts.promoted_tags += 1;
            self.tables.promoted_tag(rec, tag, parse)?;
            return Ok(ItemFate::Promoted);
        }
        let identity = crate::curate::identity("tag", tag.tom_kind.as_deref(), None);
        if self.curated(rec, &identity) {
            self.counts.curator_suppressed += 1;
            return Ok(ItemFate::Suppressed);
        }
        self.counts.quarantined_tags += 1;
        self.count_reasons(&tag.reasons);
        self.tables.quarantined_tag(rec, tag, parse)?;
        Ok(ItemFate::Quarantined)
    }

    /// Promotes, queues or (when a curator already decided it) drops an edge.
    fn stage_edge(
        &mut self,
        rec: &Record,
        edge: &EdgeItem,
        parse: ParseCells<'_>,
    ) -> Result<ItemFate, RunError> {
        if edge.reasons.is_empty() {
            self.counts.promoted_edges += 1;
            self.tables.promoted_edge(rec, edge, parse)?;
            return Ok(ItemFate::Promoted);
        }
        let identity = crate::curate::identity("edge", None, Some(&edge.edge_key));
        if self.curated(rec, &identity) {
            self.counts.curator_suppressed += 1;
            return Ok(ItemFate::Suppressed);
        }
        self.counts.quarantined_edges += 1;
        self.count_reasons(&edge.reasons);
        self.tables.quarantined_edge(rec, edge, parse)?;
        Ok(ItemFate::Quarantined)
    }

    /// Counts an edge's unknown mention and memory link; lists the first
    /// 100 memory links for the receipt.
    fn count_edge(&mut self, rec: &Record, e: &EdgeItem) {
        if e.target_node.is_none() && e.target_mention.is_some() {
            self.counts.unknown_mentions += 1;
        }
        let Some(t) = e
            .target_node
            .as_deref()
            .filter(|t| t.starts_with("memory:"))
        else {
            return;
        };
        self.counts.memory_links += 1;
        if self.memory_links.len() < 100 {
            self.memory_links.push(json!({
                "record_id": rec.id, "source_node": e.source_node, "relation": e.relation,
                "target_node": t, "confidence": e.confidence, "edge_key": e.edge_key,
                "source_quote": e.quote.text.as_deref(),
                "outcome": if e.reasons.is_empty() { "promoted" } else { "quarantined" },
                "reasons": e.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
            }));
        }
    }
}

/// What became of one decided item.
enum ItemFate {
    Promoted,
    Quarantined,
    /// A curator already decided it for this unchanged record.
    Suppressed,
}

/// How many of a record's items were promoted and quarantined.
#[derive(Default)]
struct StagedItems {
    promoted: u64,
    quarantined: u64,
}

impl StagedItems {
    fn add(&mut self, fate: ItemFate) {
        match fate {
            ItemFate::Promoted => self.promoted += 1,
            ItemFate::Quarantined => self.quarantined += 1,
            ItemFate::Suppressed => {}
        }
    }

    /// The record's outcome for the state.
    fn outcome(&self, no_tags: bool) -> &'static str {
        match (no_tags, self.promoted, self.quarantined) {
            (true, 0, 0) => "abstained",
            (_, _, 0) => "promoted",
            (_, 0, _) => "quarantined",
            _ => "mixed",
        }
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
