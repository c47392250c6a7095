//! One run, from input files to a committed run directory.
//!
//! Records stream through ingest → skip-unchanged → annotate → decide →
//! stage, in batches; nothing holds the records themselves in memory. What
//! grows with the input is one entry per record id (the state and the ids
//! seen in this run), a few dozen bytes each.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tomlite_staging::{StagingDir, State, StateRow};

use crate::annotation::{AnnotateError, Annotator, AnnotatorInfo};
use crate::decide::{Decision, EdgeItem, Exists, Nodes, Reason, TagItem, decide};
use crate::events::{Event, EventLog};
use crate::nodes::Registry;
use crate::policy::Policy;
use crate::record::{self, IngestError, IngestOptions, Item, Record, Reject};
use crate::tables::{self, Table, Val};

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
    /// An input's sha256 cannot be computed.
    #[error("cannot hash input {}", path.display())]
    Hash {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Counts per outcome; `records_in = rejected + skipped_unchanged + processed`.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Counts {
    /// Lines, rows and files read from the inputs.
    pub records_in: u64,
    /// Of those, rejected.
    pub rejected: u64,
    /// Of those, unchanged since a committed run.
    pub skipped_unchanged: u64,
    /// Of those, annotated and decided in this run.
    pub processed: u64,
    /// Processed records with no tag.
    pub abstained: u64,
    /// Tags promoted.
    pub promoted_tags: u64,
    /// Tags quarantined.
    pub quarantined_tags: u64,
    /// Edges promoted.
    pub promoted_edges: u64,
    /// Edges quarantined.
    pub quarantined_edges: u64,
    /// Of the edges, links to an earlier memory (`memory:<id>` targets).
    pub memory_links: u64,
    /// Of the edges, mentions of people or agents not in the registry.
    pub unknown_mentions: u64,
    /// Items a curator already decided for the same, unchanged record: not
    /// queued again.
    pub curator_suppressed: u64,
    /// Annotations that could not be read, quarantined whole.
    pub quarantined_annotations: u64,
    /// Annotation lines that match no record or cannot be read.
    pub annotation_rejects: u64,
}

/// An input as the receipt lists it.
#[derive(Debug, Clone, Serialize)]
pub struct InputInfo {
    /// The file or folder.
    pub path: String,
    /// sha256 of the file (a folder: of its files' names and hashes).
    pub sha256: String,
    /// Lines, rows or files read.
    pub records: u64,
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
    /// Which runs this one's skipped records were processed in.
    pub skipped_from: Vec<String>,
    /// What a killed earlier run left behind and recovery removed.
    pub recovered: Vec<String>,
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

struct Tables {
    promoted_tags: Table,
    promoted_edges: Table,
    quarantine: Table,
    abstained: Table,
    rejects: Table,
}

/// A record whose edges wait for the end of the input.
struct Pending {
    record: Record,
    tags: Vec<TagItem>,
    edges: Vec<EdgeItem>,
    state: (tomlite_staging::Digest, tomlite_staging::Digest),
    embedding: Option<Vec<i8>>,
}

struct Ctx<'a> {
    cfg: &'a RunConfig,
    run_id: String,
    info: AnnotatorInfo,
    policy_sha: String,
    tables: Tables,
    counts: Counts,
    reasons: BTreeMap<String, u64>,
    /// The first memory links, for the receipt.
    memory_links: Vec<serde_json::Value>,
    /// Curated items by record id: (fingerprint hex, identity, decision).
    suppress: foldhash::HashMap<String, Vec<(String, String, String)>>,
}

/// Runs the job: the caller has chosen the annotator.
pub fn run(cfg: &RunConfig, annotator: &mut dyn Annotator) -> Result<RunSummary, RunError> {
    let started_at = chrono::Utc::now();
    let clock = Instant::now();
    let staging = StagingDir::open(&cfg.staging)?;
    let recovered: Vec<String> = staging
        .recover()?
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut state = staging.load_state()?;
    // Memory links point only at what earlier runs committed.
    annotator.use_memories(crate::memory::MemoryIndex::from_state(&state));
    let run_id = new_run_id(&staging.runs_dir(), started_at);
    let mut run = staging.begin_run(&run_id)?;
    let events_path = run.path().join("events.jsonl");
    let ev_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RunError::Events { path, source }
    };
    let mut events =
        EventLog::open(&events_path, &run_id, &cfg.command).map_err(ev_err(&events_path))?;
    let info = annotator.info();
    events
        .emit(Event {
            phase: "start",
            current_artifact: Some(run.path()),
            counts: json!({"state_records": state.len(), "recovered": recovered.len()}),
            paths: recovered.clone(),
            next_step: "stream the inputs through annotate, validate and decide",
            stop_condition: "every input read",
            ..Default::default()
        })
        .map_err(ev_err(&events_path))?;

    let tables = Tables {
        promoted_tags: Table::create(&mut run, "promoted_tags", tables::PROMOTED_TAGS)?,
        promoted_edges: Table::create(&mut run, "promoted_edges", tables::PROMOTED_EDGES)?,
        quarantine: Table::create(&mut run, "quarantine", tables::QUARANTINE)?,
        abstained: Table::create(&mut run, "abstained", tables::ABSTAINED)?,
        rejects: Table::create(&mut run, "rejects", tables::REJECTS)?,
    };
    let mut ctx = Ctx {
        cfg,
        run_id: run_id.clone(),
        info: info.clone(),
        policy_sha: cfg.policy.sha256(),
        tables,
        counts: Counts::default(),
        reasons: BTreeMap::new(),
        memory_links: Vec::new(),
        suppress: crate::curate::Curated::load(&cfg.staging)
            .map_err(|e| RunError::Curated {
                message: e.to_string(),
            })?
            .suppression(),
    };
    for r in annotator.input_problems() {
        ctx.reject(&r, "annotations")?;
        ctx.counts.annotation_rejects += 1;
    }

    let mut seen = Seen {
        ids: HashMap::new(),
    };
    let mut pending: Vec<Pending> = Vec::new();
    let mut skipped_from: BTreeMap<String, u64> = BTreeMap::new();
    let mut inputs = Vec::new();
    for input in &cfg.inputs {
        events.started(&format!("read {}", input.display()));
        let sha256 = if input.is_dir() {
            crate::sha256_dir(input)
        } else {
            crate::sha256_file(input)
        }
        .map_err(|source| RunError::Hash {
            path: input.clone(),
            source,
        })?;
        let mut count = 0u64;
        let batch_size = annotator.batch_size().max(1);
        let mut batch: Vec<Record> = Vec::with_capacity(batch_size);
        for item in record::open(input, &cfg.ingest)? {
            let item = item?;
            count += 1;
            ctx.counts.records_in += 1;
            match item {
                Item::Reject(r) => {
                    if let Some(id) = &r.record_id {
                        seen.ids.entry(id.as_str().into()).or_insert(false);
                    }
                    ctx.counts.rejected += 1;
                    ctx.reject(&r, "records")?;
                }
                Item::Record(rec) => {
                    if seen.ids.contains_key(rec.id.as_str()) {
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
                        ctx.reject(&r, "records")?;
                        continue;
                    }
                    seen.ids.insert(rec.id.as_str().into(), true);
                    batch.push(*rec);
                    if batch.len() == batch_size {
                        ctx.process(
                            &mut batch,
                            annotator,
                            &mut state,
                            &seen,
                            &mut pending,
                            &mut skipped_from,
                        )?;
                    }
                }
            }
            if events.heartbeat_due() {
                events
                    .emit(Event {
                        phase: "heartbeat",
                        current_artifact: Some(input),
                        counts: serde_json::to_value(&ctx.counts).unwrap_or_default(),
                        next_step: "keep reading this input",
                        stop_condition: "input exhausted",
                        ..Default::default()
                    })
                    .map_err(ev_err(&events_path))?;
            }
        }
        ctx.process(
            &mut batch,
            annotator,
            &mut state,
            &seen,
            &mut pending,
            &mut skipped_from,
        )?;
        events.completed(&format!("read {}", input.display()));
        events
            .emit(Event {
                phase: "input_done",
                current_artifact: Some(input),
                counts: serde_json::to_value(&ctx.counts).unwrap_or_default(),
                next_step: "next input, or settle pending edges",
                stop_condition: "every input read",
                ..Default::default()
            })
            .map_err(ev_err(&events_path))?;
        inputs.push(InputInfo {
            path: input.display().to_string(),
            sha256,
            records: count,
        });
    }

    // Edges to memories that came later in the input are settled now.
    for mut p in pending {
        for e in &mut p.edges {
            e.resolve(|id| seen.ids.get(id) == Some(&true) || state.contains(id));
        }
        let outcome = ctx.stage(&p.record, &p.tags, &p.edges, None)?;
        state.upsert(ctx.state_row(&p.record, p.state, outcome, p.embedding.as_deref()));
    }
    for r in annotator.unused() {
        ctx.reject(&r, "annotations")?;
        ctx.counts.annotation_rejects += 1;
    }
    // The annotator's own counts (e.g. the parse classes of raw output).
    if let Some(counts) = annotator.status_counts() {
        events
            .emit(Event {
                phase: "annotations_parsed",
                counts,
                next_step: "write tables",
                stop_condition: "every annotation read",
                ..Default::default()
            })
            .map_err(ev_err(&events_path))?;
    }

    events.started("write tables");
    let Ctx {
        tables,
        counts,
        reasons,
        memory_links,
        ..
    } = ctx;
    let mut paths = Vec::new();
    for t in [
        tables.promoted_tags,
        tables.promoted_edges,
        tables.quarantine,
        tables.abstained,
        tables.rejects,
    ] {
        paths.push(t.close()?.display().to_string());
    }
    events.completed("write tables");
    let finished_at = chrono::Utc::now();
    let receipt = json!({
        "run_id": run_id,
        "status": "committed",
        "started_at": started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "finished_at": finished_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "duration_seconds": clock.elapsed().as_secs_f64(),
        "inputs": inputs,
        "annotator": {"id": info.id, "sha256": info.sha256, "stats": annotator.stats()},
        "nodes": cfg.nodes.as_ref().map(|(p, r)| json!({"path": p.display().to_string(), "sha256": r.sha256, "nodes": r.len()})),
        "policy_sha256": cfg.policy.sha256(),
        "policy_source": cfg.policy_source.as_ref().map(|p| p.display().to_string()),
        "full": cfg.full,
        "counts": counts,
        "reasons": reasons,
        "memory_links": memory_links,
        "skipped_from_runs": skipped_from,
        "attempts": 1,
        "retries_used": 0,
        "recovered": recovered,
        "stop_condition": "input_exhausted",
    });
    run.write_json("receipt.json", &receipt)?;
    // The curator's report, from the closed tables.
    events.started("write report");
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
    run.write_file("report.md", crate::report::markdown(&data).as_bytes())?;
    events.completed("write report");
    events
        .emit(Event {
            phase: "commit",
            current_artifact: Some(run.path()),
            counts: serde_json::to_value(&counts).unwrap_or_default(),
            paths,
            next_step: "rename the run directory, then replace state and LATEST",
            stop_condition: "LATEST names this run",
            ..Default::default()
        })
        .map_err(ev_err(&events_path))?;
    let run_dir = run.commit(&mut state)?;
    let final_events = run_dir.join("events.jsonl");
    events
        .reopen(&final_events)
        .map_err(ev_err(&final_events))?;
    events.completed("commit");
    events
        .emit(Event {
            phase: "committed",
            current_artifact: Some(&run_dir),
            counts: serde_json::to_value(&counts).unwrap_or_default(),
            status_code: Some(0),
            next_step: "curator reviews the quarantine",
            stop_condition: "run committed",
            ..Default::default()
        })
        .map_err(ev_err(&final_events))?;
    Ok(RunSummary {
        run_id,
        run_dir,
        counts,
        reasons,
        skipped_from: skipped_from.into_keys().collect(),
        recovered,
    })
}

/// `YYYYMMDDTHHMMSSZ-xxxx`: sortable by time, unique in the staging directory.
fn new_run_id(runs: &Path, now: chrono::DateTime<chrono::Utc>) -> String {
    let stamp = now.format("%Y%m%dT%H%M%SZ");
    let salt = (std::process::id() as u64) ^ u64::from(now.timestamp_subsec_nanos());
    for bump in 0.. {
        let id = format!("{stamp}-{:04x}", (salt + bump) & 0xffff);
        if !runs.join(&id).exists()
            && !runs
                .join(format!("{}{id}", tomlite_staging::TMP_PREFIX))
                .exists()
        {
            return id;
        }
    }
    unreachable!("some suffix is free")
}

impl Ctx<'_> {
    fn reject(&mut self, r: &Reject, input: &str) -> Result<(), RunError> {
        self.tables.rejects.push(&[
            Val::S(Some(&r.source)),
            Val::U(Some(r.line)),
            Val::S(r.record_id.as_deref()),
            Val::S(r.field.as_deref()),
            Val::S(Some(&r.error)),
            Val::S(Some(input)),
        ])?;
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
        }
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
        let mut todo = Vec::with_capacity(batch.len());
        for rec in batch.drain(..) {
            let fp = rec.fingerprint();
            let ad = annotator.annotation_digest(&rec)?;
            if !self.cfg.full
                && let Some(e) = state.get(&rec.id)
                && e.fingerprint == fp
                && e.annotation == ad
                && state.policy(e) == self.policy_sha
            {
                self.counts.skipped_unchanged += 1;
                *skipped_from.entry(state.run(e).to_string()).or_default() += 1;
                continue;
            }
            todo.push((rec, (fp, ad)));
        }
        if todo.is_empty() {
            return Ok(());
        }
        let refs: Vec<&Record> = todo.iter().map(|(r, _)| r).collect();
        let annotated = annotator.annotate(&refs)?;
        for ((rec, digests), a) in todo.into_iter().zip(annotated) {
            self.counts.processed += 1;
            let nodes = RunNodes {
                registry: self.cfg.nodes.as_ref().map(|(_, r)| r),
                state,
                seen,
            };
            let decision = decide(&rec, &a, &self.cfg.policy, &nodes);
            let embedding = match a {
                crate::annotation::Annotated::Parsed(a) => a.embedding,
                _ => None,
            };
            let outcome = match decision {
                Decision::Missing => {
                    self.abstain(&rec, None, "no_annotation")?;
                    "abstained"
                }
                Decision::Unparseable { raw, error } => {
                    self.unparseable(&rec, &raw, &error)?;
                    "unparseable"
                }
                Decision::Annotated { tags, edges, best } => {
                    if edges.iter().any(|e| !e.pending.is_empty()) {
                        pending.push(Pending {
                            record: rec,
                            tags,
                            edges,
                            state: digests,
                            embedding,
                        });
                        continue;
                    }
                    self.stage(&rec, &tags, &edges, best.as_ref())?
                }
            };
            state.upsert(self.state_row(&rec, digests, outcome, embedding.as_deref()));
        }
        Ok(())
    }

    fn abstain(
        &mut self,
        rec: &Record,
        best: Option<&(String, f64)>,
        why: &str,
    ) -> Result<(), RunError> {
        self.counts.abstained += 1;
        self.tables.abstained.push(&[
            Val::S(Some(&rec.id)),
            Val::S(Some(&rec.persona_id)),
            Val::S(Some(&rec.source_path)),
            Val::S(best.map(|b| b.0.as_str())),
            Val::F(best.map(|b| b.1)),
            Val::S(Some(why)),
            Val::S(Some(&self.info.id)),
            Val::S(Some(&self.run_id)),
        ])?;
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

    fn unparseable(&mut self, rec: &Record, raw: &str, error: &str) -> Result<(), RunError> {
        if self.curated(rec, "annotation") {
            self.counts.curator_suppressed += 1;
            return Ok(());
        }
        self.counts.quarantined_annotations += 1;
        self.count_reasons(&[Reason::UnparseableAnnotation]);
        let item_id = format!("{}#annotation", rec.id);
        let reasons = [Reason::UnparseableAnnotation.as_str()];
        self.tables.quarantine.push(&[
            Val::S(Some(&item_id)),
            Val::S(Some("annotation")),
            Val::S(Some(&rec.id)),
            Val::S(Some(&rec.persona_id)),
            Val::S(Some(&rec.source_path)),
            Val::S(None),
            Val::S(None),
            Val::S(None),
            Val::S(None),
            Val::L(&reasons),
            Val::S(None),
            Val::F(None),
            Val::S(None),
            Val::F(None),
            Val::S(None),
            Val::S(None),
            Val::F(None),
            Val::S(None),
            Val::S(None),
            Val::U(None),
            Val::U(None),
            Val::S(Some(error)),
            Val::S(Some(&rec.text)),
            Val::S(Some(raw)),
            Val::S(Some(&self.info.id)),
            Val::S(Some(&self.run_id)),
            Val::S(Some(rec.kind.as_str())),
        ])?;
        Ok(())
    }

    /// Writes a record's decided items; returns its outcome for the state.
    fn stage(
        &mut self,
        rec: &Record,
        tags: &[TagItem],
        edges: &[EdgeItem],
        best: Option<&(String, f64)>,
    ) -> Result<&'static str, RunError> {
        let (mut promoted, mut quarantined) = (0, 0);
        if tags.is_empty() {
            self.abstain(rec, best, "no_tags")?;
        }
        for t in tags {
            let quote = t.quote.text.as_deref();
            if t.reasons.is_empty() {
                promoted += 1;
                self.counts.promoted_tags += 1;
                self.tables.promoted_tags.push(&[
                    Val::S(Some(&rec.id)),
                    Val::S(Some(&rec.persona_id)),
                    Val::S(Some(rec.kind.as_str())),
                    Val::S(Some(&rec.source_path)),
                    Val::S(Some(&rec.created_at)),
                    Val::S(t.tom_kind.as_deref()),
                    Val::F(t.confidence),
                    Val::S(t.affect.as_deref()),
                    Val::F(t.affect_confidence),
                    Val::S(t.intensity.as_deref()),
                    Val::F(t.intensity_confidence),
                    Val::S(quote),
                    Val::U(t.quote.start),
                    Val::U(t.quote.end),
                    Val::S(Some(&self.info.id)),
                    Val::S(Some(&self.run_id)),
                    Val::S(Some(&t.item_id)),
                ])?;
            } else if self.curated(
                rec,
                &crate::curate::identity("tag", t.tom_kind.as_deref(), None),
            ) {
                self.counts.curator_suppressed += 1;
            } else {
                quarantined += 1;
                self.counts.quarantined_tags += 1;
                self.count_reasons(&t.reasons);
                let reasons: Vec<&str> = t.reasons.iter().map(|r| r.as_str()).collect();
                let detail = t.detail.join("; ");
                self.tables.quarantine.push(&[
                    Val::S(Some(&t.item_id)),
                    Val::S(Some("tag")),
                    Val::S(Some(&rec.id)),
                    Val::S(Some(&rec.persona_id)),
                    Val::S(Some(&rec.source_path)),
                    Val::S(t.tom_kind.as_deref()),
                    Val::S(None),
                    Val::S(None),
                    Val::S(None),
                    Val::L(&reasons),
                    Val::S(t.suggested_label.as_deref()),
                    Val::F(t.confidence),
                    Val::S(t.affect.as_deref()),
                    Val::F(t.affect_confidence),
                    Val::S(t.suggested_affect.as_deref()),
                    Val::S(t.intensity.as_deref()),
                    Val::F(t.intensity_confidence),
                    Val::S(t.suggested_intensity.as_deref()),
                    Val::S(quote),
                    Val::U(t.quote.start),
                    Val::U(t.quote.end),
                    Val::S(Some(&detail)),
                    Val::S(Some(&rec.text)),
                    Val::S(None),
                    Val::S(Some(&self.info.id)),
                    Val::S(Some(&self.run_id)),
                    Val::S(Some(rec.kind.as_str())),
                ])?;
            }
        }
        for e in edges {
            let quote = e.quote.text.as_deref();
            if e.target_node.is_none() && e.target_mention.is_some() {
                self.counts.unknown_mentions += 1;
            }
            if let Some(t) = e
                .target_node
                .as_deref()
                .filter(|t| t.starts_with("memory:"))
            {
                self.counts.memory_links += 1;
                if self.memory_links.len() < 100 {
                    self.memory_links.push(json!({
                        "record_id": rec.id, "source_node": e.source_node, "relation": e.relation,
                        "target_node": t, "confidence": e.confidence, "edge_key": e.edge_key,
                        "source_quote": quote,
                        "outcome": if e.reasons.is_empty() { "promoted" } else { "quarantined" },
                        "reasons": e.reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                    }));
                }
            }
            if e.reasons.is_empty() {
                promoted += 1;
                self.counts.promoted_edges += 1;
                self.tables.promoted_edges.push(&[
                    Val::S(Some(&e.edge_key)),
                    Val::S(Some(&rec.id)),
                    Val::S(Some(&rec.persona_id)),
                    Val::S(Some(&e.source_node)),
                    Val::S(e.relation.as_deref()),
                    Val::S(e.target_node.as_deref()),
                    Val::S(e.target_mention.as_deref()),
                    Val::F(e.confidence),
                    Val::S(quote),
                    Val::U(e.quote.start),
                    Val::U(e.quote.end),
                    Val::S(Some(&self.info.id)),
                    Val::S(Some(&self.run_id)),
                    Val::S(Some(&e.item_id)),
                ])?;
            } else if self.curated(
                rec,
                &crate::curate::identity("edge", None, Some(&e.edge_key)),
            ) {
                self.counts.curator_suppressed += 1;
            } else {
                quarantined += 1;
                self.counts.quarantined_edges += 1;
                self.count_reasons(&e.reasons);
                let reasons: Vec<&str> = e.reasons.iter().map(|r| r.as_str()).collect();
                let detail = e.detail.join("; ");
                self.tables.quarantine.push(&[
                    Val::S(Some(&e.item_id)),
                    Val::S(Some("edge")),
                    Val::S(Some(&rec.id)),
                    Val::S(Some(&rec.persona_id)),
                    Val::S(Some(&rec.source_path)),
                    Val::S(e.relation.as_deref()),
                    Val::S(e.target_node.as_deref()),
                    Val::S(e.target_mention.as_deref()),
                    Val::S(Some(&e.edge_key)),
                    Val::L(&reasons),
                    Val::S(e.suggested_label.as_deref()),
                    Val::F(e.confidence),
                    Val::S(None),
                    Val::F(None),
                    Val::S(None),
                    Val::S(None),
                    Val::F(None),
                    Val::S(None),
                    Val::S(quote),
                    Val::U(e.quote.start),
                    Val::U(e.quote.end),
                    Val::S(Some(&detail)),
                    Val::S(Some(&rec.text)),
                    Val::S(None),
                    Val::S(Some(&self.info.id)),
                    Val::S(Some(&self.run_id)),
                    Val::S(Some(rec.kind.as_str())),
                ])?;
            }
        }
        Ok(match (tags.is_empty(), promoted, quarantined) {
            (true, 0, 0) => "abstained",
            (_, _, 0) => "promoted",
            (_, 0, _) => "quarantined",
            _ => "mixed",
        })
    }
}
