//! The run's receipt (`receipt.json`): one serde struct written by `run`
//! and `merge`, read back by `merge`, the report and `verify`, and the
//! counts, inputs and outcome it holds.
//!
//! The receipt is written as a JSON object whose keys are sorted (every
//! nested object too): [`Receipt::to_json`] is the one way to it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rules::decide::SensitiveRecord;

/// How a run ended, as its receipt's `status` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Committed: the state and `LATEST` name it.
    #[default]
    Committed,
    /// Failed: nothing committed (`failed/<run_id>/`).
    Failed,
    /// Blocked before it changed anything (a lock, a state behind `runs/`).
    Blocked,
    /// Published, but the state or `LATEST` not replaced yet.
    Unfinished,
}

impl Outcome {
    /// The receipt's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Committed => "committed",
            Self::Failed => "failed",
            Self::Blocked => "blocked",
            Self::Unfinished => "unfinished",
        }
    }
}

/// A committed run's receipt. A merged run's has `merged_from` and no
/// `shard`, `attempts_by_operation` or `retry_policy`; a run's, the reverse.
/// Read leniently: a field an older receipt lacks takes its default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Receipt {
    /// The run's id.
    pub run_id: String,
    /// How it ended.
    pub status: Outcome,
    /// RFC 3339, milliseconds, UTC.
    pub started_at: String,
    /// RFC 3339, milliseconds, UTC.
    pub finished_at: String,
    /// Wall time.
    pub duration_seconds: f64,
    /// The inputs, in order.
    pub inputs: Vec<InputInfo>,
    /// The annotator.
    pub annotator: AnnotatorReceipt,
    /// The node registry, if any.
    pub nodes: Option<NodesReceipt>,
    /// sha256 of the effective policy.
    pub policy_sha256: String,
    /// Where the policy came from (`None`: the seed's defaults).
    pub policy_source: Option<String>,
    /// Whether the state was ignored.
    pub full: bool,
    /// A run's shard (`Some(None)`: written as null, not sharded); absent
    /// from a merged run's receipt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<Option<ShardReceipt>>,
    /// The shard runs a merged run joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<Vec<MergedShard>>,
    /// Counts per outcome.
    pub counts: Counts,
    /// Quarantined items per reason.
    pub reasons: BTreeMap<String, u64>,
    /// Sensitive records.
    pub sensitive: SensitiveCounts,
    /// The first 100 memory links.
    pub memory_links: Vec<MemoryLink>,
    /// The first 100 records whose annotation failed in this run.
    pub failed: Vec<FailedRecord>,
    /// The first 100 records skipped as poison.
    pub poison: Vec<FailedRecord>,
    /// Skipped records per run that processed them.
    pub skipped_from_runs: BTreeMap<String, u64>,
    /// The most attempts one I/O operation took.
    pub attempts: u64,
    /// Attempts per I/O operation (a run's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts_by_operation: Option<BTreeMap<String, u32>>,
    /// Transient I/O errors retried.
    pub retries_used: u64,
    /// The retry and failure settings (a run's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
    /// What recovery removed or completed before the run.
    pub recovered: Vec<String>,
    /// What ended the run.
    pub stop_condition: Option<StopCondition>,
    /// Whether the next run takes what this one left.
    pub resumable: bool,
    /// The sealed files (set by [`crate::stage::verify::sealed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Value>,
}

impl Receipt {
    /// The receipt as written: a JSON object with sorted keys.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a receipt is plain data")
    }

    /// Reads a receipt from its JSON.
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The shard a run was run as, if any.
    pub fn shard(&self) -> Option<&ShardReceipt> {
        self.shard.as_ref().and_then(Option::as_ref)
    }
}

/// Why a record is in the receipt's `failed` or `poison` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Its annotation failed in this run: retried next run.
    Failed,
    /// Skipped: its annotation failed in too many runs.
    Poison,
}

/// A record whose annotation failed, or that was skipped as poison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedRecord {
    /// Failed or poison.
    pub kind: FailureKind,
    /// The record.
    pub record_id: String,
    /// Its file.
    pub source: String,
    /// Its line or row.
    pub line: u64,
    /// Runs in which its annotation failed.
    pub failures: u32,
    /// The error (failed records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last run it failed in (poison records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_run: Option<String>,
}

/// An edge to an earlier memory (`memory:<id>` target).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryLink {
    /// The record the edge is from.
    pub record_id: String,
    /// Its source node.
    pub source_node: String,
    /// Its relation.
    pub relation: Option<String>,
    /// The memory.
    pub target_node: String,
    /// Its confidence.
    pub confidence: Option<f64>,
    /// The edge's key.
    pub edge_key: String,
    /// The supporting quote.
    pub source_quote: Option<String>,
    /// `promoted` or `quarantined`.
    pub outcome: String,
    /// Why it is quarantined.
    pub reasons: Vec<String>,
}

/// The annotator as the receipt names it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AnnotatorReceipt {
    /// Its id.
    pub id: String,
    /// sha256 of what it annotates with.
    pub sha256: String,
    /// Its own statistics (a merged run: each shard's, in shard order).
    pub stats: Value,
    /// The sensitive content detectors that ran on every record
    /// (`model`, `rules:<version>`); empty: none did.
    pub sensitive_detectors: Vec<String>,
}

/// The node registry as the receipt names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodesReceipt {
    /// Its file.
    pub path: String,
    /// Its sha256.
    pub sha256: Option<String>,
    /// How many nodes.
    pub nodes: u64,
}

/// One shard of a sharded run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardReceipt {
    /// This shard.
    pub index: u32,
    /// How many shards.
    pub count: u32,
    /// What records are sharded by (`persona_id`).
    pub key: String,
}

/// A shard run a merged run joined.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MergedShard {
    /// Its shard index.
    pub shard: u32,
    /// How many shards.
    pub count: u32,
    /// Its run id.
    pub run_id: String,
    /// Its run directory.
    pub run_dir: String,
    /// sha256 of its receipt.
    pub receipt_sha256: String,
    /// Its wall time.
    pub duration_seconds: Option<f64>,
}

/// A run's retry and failure settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryPolicy {
    /// Retries of a transient I/O error this run allowed.
    pub tool_transient_retries: u32,
    /// The default.
    pub default_retries: u32,
    /// The hard maximum.
    pub hard_max_retries: u32,
    /// Same as `tool_transient_retries`.
    pub max_retries: u32,
    /// Back-off between attempts.
    pub backoff_ms: u64,
    /// Failed runs of the same content before a record is poison.
    pub poison_after_failed_runs: u32,
    /// The failure budget's share.
    pub max_failed_share: f64,
}

/// What ended a committed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCondition {
    /// Every input was read.
    InputExhausted,
    /// The time budget ran out: the rest is left for the next run.
    Deadline,
}

impl StopCondition {
    /// The receipt's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InputExhausted => "input_exhausted",
            Self::Deadline => "deadline",
        }
    }
}

/// Counts per outcome; `records_in = rejected + skipped_unchanged +
/// processed + failed + poison_skipped + deferred`.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
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
    /// Of `records_in`, records whose annotation failed (panic, model
    /// error, timeout) in this run: retried next run.
    pub failed: u64,
    /// Of `records_in`, records skipped as poison: their annotation failed
    /// in [`POISON_AFTER`](tomlite_staging::retry::POISON_AFTER) runs of the same content.
    pub poison_skipped: u64,
    /// Of `records_in`, records read but left for the next run because the
    /// time budget ran out.
    pub deferred: u64,
    /// Records of other shards (not in `records_in`).
    pub other_shards: u64,
}

/// Sensitive records of a run (the receipt's `sensitive`): records flagged
/// by their producer or with a detection the policy quarantines, tagged or
/// abstained alike.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SensitiveCounts {
    /// Sensitive records (rows of the `sensitive` table).
    pub records: u64,
    /// Of those, safety records: detected `mental_health_self_harm` or flagged `safety`.
    pub safety_records: u64,
    /// Of those, records a producer flagged (with or without a detection).
    pub flagged: u64,
    /// Detected records per category (flag-only records are in none).
    pub by_category: BTreeMap<String, u64>,
}

impl SensitiveCounts {
    /// Counts one sensitive record.
    pub fn add(&mut self, s: &SensitiveRecord) {
        self.records += 1;
        self.safety_records += u64::from(s.safety);
        self.flagged += u64::from(!s.flags.is_empty());
        if let Some(c) = s.detection.as_ref().and_then(|d| d.category.as_ref()) {
            *self.by_category.entry(c.clone()).or_default() += 1;
        }
    }

    /// Adds another run's counts (a shard's, in a merge).
    pub fn merge(&mut self, other: &SensitiveCounts) {
        self.records += other.records;
        self.safety_records += other.safety_records;
        self.flagged += other.flagged;
        for (c, n) in &other.by_category {
            *self.by_category.entry(c.clone()).or_default() += n;
        }
    }
}

/// An input as the receipt lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct InputInfo {
    /// The file or folder.
    pub path: String,
    /// sha256 of the bytes read: the whole file (a folder: of its journal
    /// files' relative paths and sha256s); a pipe's, of what was read from it.
    pub sha256: String,
    /// Bytes hashed.
    pub bytes: u64,
    /// Lines, rows or files read.
    pub records: u64,
}

impl Counts {
    /// Adds another run's counts (a shard's, in a merge).
    pub fn add(&mut self, other: &Counts) {
        let Counts {
            records_in,
            rejected,
            skipped_unchanged,
            processed,
            abstained,
            promoted_tags,
            quarantined_tags,
            promoted_edges,
            quarantined_edges,
            memory_links,
            unknown_mentions,
            curator_suppressed,
            quarantined_annotations,
            annotation_rejects,
            failed,
            poison_skipped,
            deferred,
            other_shards,
        } = other;
        self.records_in += records_in;
        self.rejected += rejected;
        self.skipped_unchanged += skipped_unchanged;
        self.processed += processed;
        self.abstained += abstained;
        self.promoted_tags += promoted_tags;
        self.quarantined_tags += quarantined_tags;
        self.promoted_edges += promoted_edges;
        self.quarantined_edges += quarantined_edges;
        self.memory_links += memory_links;
        self.unknown_mentions += unknown_mentions;
        self.curator_suppressed += curator_suppressed;
        self.quarantined_annotations += quarantined_annotations;
        self.annotation_rejects += annotation_rejects;
        self.failed += failed;
        self.poison_skipped += poison_skipped;
        self.deferred += deferred;
        self.other_shards += other_shards;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_receipt_writes_shard_as_null_and_no_merge_keys() {
        let receipt = Receipt {
            shard: Some(None),
            stop_condition: Some(StopCondition::InputExhausted),
            ..Receipt::default()
        };
        let json = receipt.to_json();
        assert!(json["shard"].is_null() && json.get("shard").is_some());
        assert!(json.get("merged_from").is_none());
        assert!(json.get("retry_policy").is_none());
        assert!(json.get("files").is_none());
        assert_eq!(json["status"], "committed");
        assert_eq!(json["stop_condition"], "input_exhausted");
        // Keys are sorted, as every receipt was written.
        let keys: Vec<&String> = json.as_object().expect("an object").keys().collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }

    #[test]
    fn a_merged_receipt_has_no_shard_key_and_reads_back() {
        let receipt = Receipt {
            merged_from: Some(vec![MergedShard {
                shard: 1,
                count: 2,
                run_id: "r1".into(),
                ..MergedShard::default()
            }]),
            failed: vec![FailedRecord {
                kind: FailureKind::Failed,
                record_id: "a".into(),
                source: "in.jsonl".into(),
                line: 3,
                failures: 1,
                error: Some("boom".into()),
                last_failed_run: None,
            }],
            ..Receipt::default()
        };
        let json = receipt.to_json();
        assert!(json.get("shard").is_none());
        assert!(json["failed"][0].get("last_failed_run").is_none());
        assert_eq!(json["failed"][0]["kind"], "failed");
        let back = Receipt::from_json(json.to_string().as_bytes()).expect("it reads back");
        assert_eq!(back.shard(), None);
        assert_eq!(back.merged_from.expect("merged")[0].run_id, "r1");
        assert_eq!(back.failed, receipt.failed);
    }

    #[test]
    fn counts_add_every_field() {
        let one = Counts {
            records_in: 1,
            rejected: 2,
            skipped_unchanged: 3,
            processed: 4,
            abstained: 5,
            promoted_tags: 6,
            quarantined_tags: 7,
            promoted_edges: 8,
            quarantined_edges: 9,
            memory_links: 10,
            unknown_mentions: 11,
            curator_suppressed: 12,
            quarantined_annotations: 13,
            annotation_rejects: 14,
            failed: 15,
            poison_skipped: 16,
            deferred: 17,
            other_shards: 18,
        };
        let mut total = one.clone();
        total.add(&one);
        let doubled = serde_json::to_value(&total).expect("plain data");
        let single = serde_json::to_value(&one).expect("plain data");
        for (key, value) in single.as_object().expect("an object") {
            assert_eq!(doubled[key], value.as_u64().expect("a count") * 2, "{key}");
        }
    }
}
