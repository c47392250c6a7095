//! A run in progress: its open tables, its counts, and what its receipt
//! will list.

use std::collections::BTreeMap;

use tomlite_staging::StateRow;

use crate::annotate::AnnotatorInfo;
use crate::annotate::read_as::ReadAs;
use crate::ingest::record::{Record, Reject};
use crate::rules::decide::SensitiveRecord;
use crate::rules::reason::Reason;
use crate::run::budget::Budget;
use crate::run::config::RunConfig;
use crate::run::error::RunError;
use crate::run::stage_rows::{RejectedInput, StagedTables, parse_cells};
use crate::stage::receipt::{Counts, SensitiveCounts};
use crate::stage::receipt::{FailedRecord, MemoryLink};

/// A run between its start event and the closing of its tables.
pub(super) struct OpenRun<'a> {
    pub(super) cfg: &'a RunConfig,
    pub(super) run_id: String,
    pub(super) info: AnnotatorInfo,
    /// sha256 of the effective policy, for the state.
    pub(super) policy_sha: String,
    pub(super) tables: StagedTables,
    pub(super) counts: Counts,
    /// Quarantined items per reason.
    pub(super) reasons: BTreeMap<String, u64>,
    pub(super) sensitive: SensitiveCounts,
    /// The first memory links, for the receipt.
    pub(super) memory_links: Vec<MemoryLink>,
    /// Curated items by record id: (fingerprint hex, identity, decision).
    pub(super) curated_items: foldhash::HashMap<String, Vec<(String, String, String)>>,
    /// Failed and poison records, for the receipt.
    pub(super) failures: Vec<FailedRecord>,
    /// The time and failure budgets.
    pub(super) budget: Budget,
    /// Batches sent to the annotator so far.
    pub(super) batches: u64,
}

impl<'a> OpenRun<'a> {
    /// Opens the run's tables; loads the curator's decisions, whose items
    /// are not queued again.
    pub(super) fn new(
        cfg: &'a RunConfig,
        run: &mut tomlite_staging::RunDir,
        (run_id, info): (&str, AnnotatorInfo),
        started: std::time::Instant,
    ) -> Result<Self, RunError> {
        let curated_items = crate::curate::Curated::load(&cfg.staging)
            .map_err(|e| RunError::Curated {
                message: e.to_string(),
            })?
            .suppression();
        Ok(Self {
            cfg,
            run_id: run_id.to_string(),
            tables: StagedTables::create(run, &info.id, run_id)?,
            info,
            policy_sha: cfg.policy.sha256(),
            counts: Counts::default(),
            reasons: BTreeMap::new(),
            sensitive: SensitiveCounts::default(),
            memory_links: Vec::new(),
            curated_items,
            failures: Vec::new(),
            budget: Budget::new(cfg.deadline, started),
            batches: 0,
        })
    }
}

impl OpenRun<'_> {
    /// Whether this run reports what belongs to no shard (rejected lines,
    /// annotation problems): unsharded, or shard 0.
    pub(super) fn reports_shared_rejects(&self) -> bool {
        self.cfg.shard.is_none_or(|s| s.index == 0)
    }

    /// Rejects the annotation file's own problems (shard 0 only).
    pub(super) fn reject_annotation_problems(
        &mut self,
        problems: Vec<Reject>,
    ) -> Result<(), RunError> {
        for problem in problems {
            if self.reports_shared_rejects() {
                self.reject(&problem, RejectedInput::Annotations)?;
                self.counts.annotation_rejects += 1;
            }
        }
        Ok(())
    }

    /// Stages a reject of the given input.
    pub(super) fn reject(&mut self, reject: &Reject, input: RejectedInput) -> Result<(), RunError> {
        self.tables.reject(reject, input)?;
        Ok(())
    }

    /// The record's state row: its digests, annotator, policy and outcome.
    pub(super) fn state_row<'r>(
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

    /// Stages an abstained record (`why`: `no_tags` or `no_annotation`).
    pub(super) fn abstain(
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
    pub(super) fn sensitive_row(
        &mut self,
        rec: &Record,
        sensitive: Option<&SensitiveRecord>,
    ) -> Result<(), RunError> {
        let Some(sensitive) = sensitive else {
            return Ok(());
        };
        self.sensitive.add(sensitive);
        self.tables.sensitive(rec, sensitive)?;
        Ok(())
    }

    /// Counts quarantined items per reason.
    pub(super) fn count_reasons(&mut self, reasons: &[Reason]) {
        for reason in reasons {
            *self.reasons.entry(reason.as_str().to_string()).or_default() += 1;
        }
    }

    /// Whether a curator already decided this item of this unchanged record.
    pub(super) fn curated(&self, rec: &Record, identity: &str) -> bool {
        self.curated_items.get(&rec.id).is_some_and(|items| {
            let fingerprint = hex::encode(rec.fingerprint());
            items
                .iter()
                .any(|(decided_fingerprint, decided_identity, _)| {
                    *decided_fingerprint == fingerprint && decided_identity == identity
                })
        })
    }

    /// Queues an annotation that could not be read, unless a curator
    /// already decided it.
    pub(super) fn unparseable(
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
}
