//! Reading the inputs: each line, row or file becomes a reject or a record
//! of this shard, batched for annotation; ids are checked for duplicates,
//! and edges to memories later in the input are settled at its end.

use std::collections::BTreeMap;
use std::path::Path;

use foldhash::{HashMap, HashMapExt};
use tomlite_staging::{StagingDir, State};

use crate::annotate::Annotator;
use crate::annotate::read_as::ReadAs;
use crate::ingest::record::{IngestError, InputSha, Item, Record, Reject};
use crate::rules::decide::{EdgeItem, SensitiveRecord, TagItem};
use crate::run::error::RunError;
use crate::run::events::Event;
use crate::run::feed::{Feed, Next, Opened, Wait};
use crate::run::open_run::OpenRun;
use crate::run::progress::{Progress, ProgressMode};
use crate::run::stage_rows::RejectedInput;
use crate::run::status::Status;
use crate::stage::receipt::{InputInfo, StopCondition};

/// The record ids read in this run.
pub(super) struct SeenIds {
    /// Record id → whether it was a valid record in this input.
    pub(super) ids: HashMap<Box<str>, bool>,
}

impl SeenIds {
    /// Whether a valid record of this input has the id.
    pub(super) fn is_record(&self, id: &str) -> bool {
        self.ids.get(id) == Some(&true)
    }
}

/// A record whose edges wait for the end of the input.
pub(super) struct WaitingRecord {
    pub(super) record: Record,
    pub(super) tags: Vec<TagItem>,
    pub(super) edges: Vec<EdgeItem>,
    /// Its fingerprint and annotation digest, for the state.
    pub(super) digests: (tomlite_staging::Digest, tomlite_staging::Digest),
    pub(super) embedding: Option<Vec<i8>>,
    pub(super) read_as: Option<ReadAs>,
    pub(super) sensitive: Option<Box<SensitiveRecord>>,
}

/// What reading the inputs leaves for the end of the run.
pub(super) struct InputsRead {
    /// The inputs as the receipt lists them.
    pub(super) inputs: Vec<InputInfo>,
    /// Whether every input was read.
    pub(super) stop: StopCondition,
    /// The record ids read.
    pub(super) seen: SeenIds,
    /// Records whose edges wait for the end of the input.
    pub(super) waiting: Vec<WaitingRecord>,
    /// Skipped records per run that processed them.
    pub(super) skipped_from: BTreeMap<String, u64>,
    /// The inputs the time budget left unread, or read in part, and why.
    pub(super) unread: Vec<String>,
}

/// What the run keeps at hand while it processes a batch.
pub(super) struct Batching<'r> {
    pub(super) state: &'r mut State,
    pub(super) seen: &'r SeenIds,
    pub(super) waiting: &'r mut Vec<WaitingRecord>,
    pub(super) skipped_from: &'r mut BTreeMap<String, u64>,
    pub(super) status: &'r Status,
}

/// How reading one input ended.
enum Ended {
    /// Read to its end (its last batch processed, or deferred at the
    /// deadline).
    Read { deferred: bool },
    /// The time budget stopped it before its end.
    Deadline,
    /// A pipe stalled: nothing came for `waited` before the budget ran short.
    Stalled { waited: std::time::Duration },
}

/// What one item of an input did.
enum Step {
    /// Taken: a reject, or a record batched.
    Taken,
    /// A record that filled the batch, which was then processed.
    BatchProcessed,
    /// Left out (another shard's), not shown in the progress.
    LeftOut,
    /// The time budget ran out: the input stops here.
    Deadline,
}

/// Reads the inputs in order, batching records through annotation.
pub(super) struct InputReader<'r, 'a> {
    pub(super) open: &'r mut OpenRun<'a>,
    pub(super) annotator: &'r mut dyn Annotator,
    pub(super) staging: &'r StagingDir,
    pub(super) state: &'r mut State,
    pub(super) status: &'r Status,
}

impl InputReader<'_, '_> {
    /// Reads every input, or up to the deadline.
    pub(super) fn read_all(mut self) -> Result<InputsRead, RunError> {
        let cfg = self.open.cfg;
        let total: Option<u64> = match cfg.progress {
            ProgressMode::Quiet => None,
            _ => cfg
                .inputs
                .iter()
                .map(|p| crate::run::progress::estimate_records(p))
                .sum(),
        };
        let mut progress = Progress::new(cfg.progress, total);
        let mut lines_read = 0u64;
        let mut read = InputsRead {
            inputs: Vec::new(),
            stop: StopCondition::InputExhausted,
            seen: SeenIds {
                ids: HashMap::new(),
            },
            waiting: Vec::new(),
            skipped_from: BTreeMap::new(),
            unread: Vec::new(),
        };
        for (i, input) in cfg.inputs.iter().enumerate() {
            let ended = self.read_input(input, &mut read, (&mut progress, &mut lines_read))?;
            let why = match ended {
                Ended::Read { deferred: false } => continue,
                Ended::Read { deferred: true } => None,
                Ended::Deadline => Some("the time budget ran out".to_string()),
                Ended::Stalled { waited } => Some(format!(
                    "stalled: no record came for {:.1} s",
                    waited.as_secs_f64()
                )),
            };
            read.stop = StopCondition::Deadline;
            if let Some(why) = why {
                read.unread.push(format!("{} ({why})", input.display()));
            }
            for later in &cfg.inputs[i + 1..] {
                read.unread.push(format!(
                    "{} (not opened: the time budget ran out)",
                    later.display()
                ));
            }
            break;
        }
        progress.finish(lines_read, self.open.counts.processed);
        Ok(read)
    }

    /// Reads one input; returns how it ended.
    fn read_input(
        &mut self,
        input: &Path,
        read: &mut InputsRead,
        (progress, lines_read): (&mut Progress, &mut u64),
    ) -> Result<Ended, RunError> {
        self.status.started(&format!("read {}", input.display()));
        self.status.set(&self.open.counts, Some(input));
        let (mut feed, digest) = match self.open_input(input)? {
            Opened::Ready(feed, digest) => (feed, digest),
            Opened::Stalled { waited } => {
                // A FIFO that no writer opened: nothing was read.
                let ended = Ended::Stalled { waited };
                self.input_done(input, &ended)?;
                read.inputs.push(InputInfo {
                    path: input.display().to_string(),
                    sha256: InputSha::of_nothing().sha256,
                    bytes: 0,
                    records: 0,
                });
                return Ok(ended);
            }
        };
        let batch_size = self
            .open
            .cfg
            .batch_size
            .unwrap_or_else(|| self.annotator.batch_size())
            .max(1);
        let mut records = 0u64;
        let mut batch: Vec<Record> = Vec::with_capacity(batch_size);
        let mut ended = None;
        loop {
            self.open.cfg.interrupt.check()?;
            let next = {
                let budget = &self.open.budget;
                let near = || budget.near();
                feed.next(&Wait {
                    interrupt: &self.open.cfg.interrupt,
                    give_up: &near,
                })?
            };
            let item = match next {
                Next::Item(item) => item?,
                Next::End => break,
                Next::Stalled { waited } => {
                    // What was read is processed and committed; the budget
                    // kept room for one batch.
                    let at = batching(self.state, self.status, read);
                    self.open.process(&mut batch, self.annotator, at)?;
                    ended = Some(Ended::Stalled { waited });
                    break;
                }
            };
            records += 1;
            *lines_read += 1;
            self.status.moved(|m| m.records_read += 1);
            match self.take(item, &mut batch, batch_size, read)? {
                Step::Taken => {}
                Step::BatchProcessed => self.status.set(&self.open.counts, Some(input)),
                Step::LeftOut => continue,
                Step::Deadline => {
                    ended = Some(Ended::Deadline);
                    break;
                }
            }
            progress.update(*lines_read, self.open.counts.processed);
        }
        let ended = match ended {
            Some(ended) => ended,
            None => Ended::Read {
                deferred: self.process_batch(&mut batch, read)?,
            },
        };
        self.input_done(input, &ended)?;
        let sha = digest.finish()?;
        read.inputs.push(InputInfo {
            path: input.display().to_string(),
            sha256: sha.sha256,
            bytes: sha.bytes,
            records,
        });
        Ok(ended)
    }

    /// Opens an input once: it is hashed as it is read (a pipe too), see
    /// [`crate::ingest::open_input`]. A pipe is opened and read by a
    /// thread of its own, waited for within the time budget (see
    /// [`crate::run::feed`]).
    fn open_input(&self, input: &Path) -> Result<Opened, RunError> {
        let piped = crate::run::feed::is_piped(input);
        let budget = &self.open.budget;
        let near = || budget.near();
        let wait = Wait {
            interrupt: &self.open.cfg.interrupt,
            give_up: &near,
        };
        let mut stopped = None;
        let opened = self
            .staging
            .retry()
            .io("read_input", || {
                let opened = if piped {
                    match crate::run::feed::open_piped(input, &self.open.cfg.ingest, &wait) {
                        Ok(opened) => opened,
                        Err(e) => {
                            // A signal: no retry.
                            stopped = Some(e);
                            return Ok(Ok(Opened::Stalled {
                                waited: std::time::Duration::ZERO,
                            }));
                        }
                    }
                } else {
                    crate::ingest::open_input(input, &self.open.cfg.ingest)
                        .map(|(items, digest)| Opened::Ready(Feed::Direct(items), digest))
                };
                match opened {
                    // An entry inside a journal folder is named.
                    Err(IngestError::Io { path, source }) if path != *input => Err(
                        std::io::Error::new(source.kind(), format!("{}: {source}", path.display())),
                    ),
                    Err(IngestError::Io { source, .. }) => Err(source),
                    other => Ok(other),
                }
            })
            .map_err(|source| RunError::Hash {
                path: input.to_path_buf(),
                source,
            })?;
        if let Some(e) = stopped {
            return Err(e);
        }
        Ok(opened?)
    }

    /// Takes one item: a reject is staged, a record of this shard batched
    /// (and the batch processed when full).
    fn take(
        &mut self,
        item: Item,
        batch: &mut Vec<Record>,
        batch_size: usize,
        read: &mut InputsRead,
    ) -> Result<Step, RunError> {
        let rec = match item {
            Item::Reject(reject) => return self.take_reject(&reject, &mut read.seen),
            Item::Record(rec) => rec,
        };
        let mine = self.open.cfg.shard.is_none_or(|s| s.owns(&rec.persona_id));
        // Only a record claims its id: a rejected line does not.
        if read.seen.is_record(&rec.id) {
            if !mine {
                self.open.counts.other_shards += 1;
                return Ok(Step::LeftOut);
            }
            self.open.counts.records_in += 1;
            self.open.counts.rejected += 1;
            self.open
                .reject(&duplicate_id(&rec), RejectedInput::Records)?;
            return Ok(Step::LeftOut);
        }
        read.seen.ids.insert(rec.id.as_str().into(), true);
        if !mine {
            self.open.counts.other_shards += 1;
            return Ok(Step::LeftOut);
        }
        self.open.counts.records_in += 1;
        batch.push(*rec);
        if batch.len() < batch_size {
            return Ok(Step::Taken);
        }
        Ok(if self.process_batch(batch, read)? {
            Step::Deadline
        } else {
            Step::BatchProcessed
        })
    }

    /// A line that is no record: it belongs to no persona, so shard 0
    /// reports it.
    fn take_reject(&mut self, reject: &Reject, seen: &mut SeenIds) -> Result<Step, RunError> {
        if let Some(id) = &reject.record_id {
            seen.ids.entry(id.as_str().into()).or_insert(false);
        }
        if !self.open.reports_shared_rejects() {
            self.open.counts.other_shards += 1;
            return Ok(Step::LeftOut);
        }
        self.open.counts.records_in += 1;
        self.open.counts.rejected += 1;
        self.open.reject(reject, RejectedInput::Records)?;
        Ok(Step::Taken)
    }

    /// Processes the batch, or defers it when the time budget is near;
    /// returns whether it was deferred.
    fn process_batch(
        &mut self,
        batch: &mut Vec<Record>,
        read: &mut InputsRead,
    ) -> Result<bool, RunError> {
        let at = batching(self.state, self.status, read);
        self.open.process_or_defer(batch, self.annotator, at)
    }

    /// The input's last events: read, or stopped at the deadline (a
    /// stalled pipe says so in `bug_or_blocker`).
    fn input_done(&self, input: &Path, ended: &Ended) -> Result<(), RunError> {
        self.status.completed(&format!("read {}", input.display()));
        self.status.set(&self.open.counts, Some(input));
        let stopped = !matches!(ended, Ended::Read { deferred: false });
        let bug_or_blocker = match ended {
            Ended::Stalled { waited } => Some(format!(
                "input {} stalled: no record came for {:.1} s, and the time budget ran short; the records read are committed, the rest of the input was not read",
                input.display(),
                waited.as_secs_f64()
            )),
            _ => None,
        };
        self.status.emit(Event {
            phase: if stopped { "deadline" } else { "input_done" },
            current_artifact: Some(input),
            counts: serde_json::to_value(&self.open.counts).unwrap_or_default(),
            bug_or_blocker,
            next_step: if stopped {
                "commit what is done; the next run takes the rest"
            } else {
                "next input, or settle pending edges"
            },
            stop_condition: "every input read, or the deadline",
            ..Default::default()
        })
    }
}

/// What processing a batch works with.
fn batching<'b>(
    state: &'b mut State,
    status: &'b Status,
    read: &'b mut InputsRead,
) -> Batching<'b> {
    Batching {
        state,
        seen: &read.seen,
        waiting: &mut read.waiting,
        skipped_from: &mut read.skipped_from,
        status,
    }
}

/// The reject of a record whose id an earlier line or row already had.
fn duplicate_id(rec: &Record) -> Reject {
    Reject {
        source: rec.origin.source.clone(),
        line: rec.origin.line,
        record_id: Some(rec.id.clone()),
        field: Some("id".into()),
        error: "duplicate id: an earlier line or row of the input has the same id".into(),
    }
}

impl InputsRead {
    /// Stages the records whose edges waited for the end of the input, with
    /// those edges settled; at the deadline they are deferred to the next
    /// run instead, which sees the whole input.
    pub(super) fn settle_waiting(
        &mut self,
        open: &mut OpenRun<'_>,
        state: &mut State,
        status: &Status,
    ) -> Result<(), RunError> {
        let waiting = std::mem::take(&mut self.waiting);
        if self.stop == StopCondition::Deadline {
            open.counts.processed -= waiting.len() as u64;
            open.counts.deferred += waiting.len() as u64;
            return Ok(());
        }
        for mut record in waiting {
            for edge in &mut record.edges {
                edge.resolve(|id| self.seen.is_record(id) || state.contains(id));
            }
            open.sensitive_row(&record.record, record.sensitive.as_deref())?;
            let outcome = open.stage(
                &record.record,
                &record.tags,
                &record.edges,
                None,
                record.read_as,
            )?;
            state.upsert(open.state_row(
                &record.record,
                record.digests,
                outcome,
                record.embedding.as_deref(),
            ));
            status.moved(|m| m.staged += 1);
        }
        Ok(())
    }

    /// Rejects the annotations no record of the input used (read to the
    /// end only); another shard's record is not a stray annotation.
    pub(super) fn reject_unused(
        &self,
        open: &mut OpenRun<'_>,
        annotator: &mut dyn Annotator,
    ) -> Result<(), RunError> {
        if self.stop != StopCondition::InputExhausted {
            return Ok(());
        }
        for reject in annotator.unused() {
            let elsewhere = reject
                .record_id
                .as_deref()
                .is_some_and(|id| self.seen.ids.contains_key(id));
            if open.reports_shared_rejects() && !elsewhere {
                open.reject(&reject, RejectedInput::Annotations)?;
                open.counts.annotation_rejects += 1;
            }
        }
        Ok(())
    }
}
