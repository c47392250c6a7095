//! The page's data: the run's tables streamed into one JSON value (safety
//! records, counts, histograms, personas, the queue, abstained and rejected
//! rows, failed and recovered records).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{Map, Value, json};

use super::input::{MAX_LISTED, MAX_QUEUE_ITEMS, MAX_RECOVERED, ReportError, ReportInput};
use crate::rules::policy::Policy;
use crate::stage::read::{self, Columns};
use crate::stage::receipt::Receipt;
use crate::stage::tables::{
    Abstained, PromotedEdges, PromotedTags, Quarantine, Rejects, Sensitive, StagedTable,
};
use crate::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};

/// A row's number in `column`, if it holds one.
fn number_field(row: &Map<String, Value>, column: &str) -> Option<f64> {
    row.get(column).and_then(Value::as_f64)
}

/// A row's text in `column`, if it holds one.
fn text_field<'a>(row: &'a Map<String, Value>, column: &str) -> Option<&'a str> {
    row.get(column).and_then(Value::as_str)
}

/// 20 bins of width 0.05 over [0, 1].
fn histogram(values: impl Iterator<Item = f64>) -> Vec<u64> {
    let mut bins = vec![0u64; 20];
    for value in values {
        if value.is_finite() {
            bins[((value.clamp(0.0, 1.0) * 20.0) as usize).min(19)] += 1;
        }
    }
    bins
}

/// UTF-16 offsets of a verbatim quote at byte offsets, for the page's JS.
pub(super) fn utf16_span(
    text: &str,
    start: Option<u64>,
    end: Option<u64>,
    quote: Option<&str>,
) -> Option<(usize, usize)> {
    let (start, end, quote) = (start? as usize, end? as usize, quote?);
    if start > end
        || end > text.len()
        || !text.is_char_boundary(start)
        || !text.is_char_boundary(end)
    {
        return None;
    }
    if &text[start..end] != quote || quote.is_empty() {
        return None;
    }
    let before = text[..start].encode_utf16().count();
    Some((before, before + text[start..end].encode_utf16().count()))
}

/// Streams the rows of the run's table `T` (`columns` of it).
fn each<T: StagedTable>(
    dir: &Path,
    columns: Columns<'_>,
    on_row: impl FnMut(Map<String, Value>),
) -> Result<(), ReportError> {
    read::each_row::<T>(&dir.join(format!("{}.parquet", T::NAME)), columns, on_row).map_err(|e| {
        ReportError {
            table: T::NAME.to_string(),
            message: e.to_string(),
        }
    })
}

/// Records whose raw annotator output needed rescue (`--raw-annotations`
/// read as anything but `STRICT`): the first [`MAX_RECOVERED`] records,
/// each once, with how many of their items each outcome holds.
#[derive(Default)]
struct Recovered {
    records: Vec<Value>,
    index: HashMap<String, usize>,
}

impl Recovered {
    fn add(&mut self, row: &Map<String, Value>, outcome: &str) {
        let Some(class) = text_field(row, "parse_class") else {
            return;
        };
        let shape = text_field(row, "escape_shape");
        if class == crate::annotate::read_as::ParseClass::Strict.as_str() {
            return;
        }
        let id = text_field(row, "record_id").unwrap_or("");
        let position = match self.index.get(id) {
            Some(&i) => i,
            None if self.records.len() < MAX_RECOVERED => {
                self.records.push(json!({
                    "record_id": id, "persona_id": row.get("persona_id"), "parse_class": class,
                    "escape_shape": shape, "promoted": 0, "quarantined": 0, "abstained": 0,
                }));
                self.index.insert(id.to_string(), self.records.len() - 1);
                self.records.len() - 1
            }
            None => return,
        };
        let count = &mut self.records[position][outcome];
        *count = json!(count.as_u64().unwrap_or(0) + 1);
    }
}

/// The safety records listed (the first [`MAX_LISTED`]) and counted, and
/// the category (or `flag:…`) of each sensitive record, and the rule that
/// found it (`rules:<rule id>`) when a rule did, for its queue items.
#[derive(Default)]
struct SafetyRecords {
    listed: Vec<Value>,
    total: usize,
    category_of: HashMap<String, String>,
    rule_of: HashMap<String, String>,
}

/// Reads the sensitive table: safety records head the report, and every
/// queue item of a sensitive record carries its category (or flag).
fn safety_records(dir: &Path) -> Result<SafetyRecords, ReportError> {
    let mut safety = SafetyRecords::default();
    each::<Sensitive>(dir, Columns::All, |row| {
        let id = text_field(&row, "record_id").unwrap_or("").to_string();
        let flags: Vec<&str> = row
            .get("flags")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let label = match text_field(&row, "category") {
            Some(category) => category.to_string(),
            None => format!("flag:{}", flags.join(",")),
        };
        if row.get("safety").and_then(Value::as_u64) == Some(1) {
            safety.total += 1;
            if safety.listed.len() < MAX_LISTED {
                safety.listed.push(json!({
                    "record_id": id, "persona_id": row.get("persona_id"), "record_kind": row.get("record_kind"),
                    "source_path": row.get("source_path"), "category": row.get("category"), "flags": flags,
                    "confidence": row.get("confidence"), "detector": row.get("detector"), "quote": row.get("quote"),
                    "quote_start": row.get("quote_start"), "quote_end": row.get("quote_end"),
                }));
            }
        }
        if safety.category_of.len() < MAX_QUEUE_ITEMS {
            if let Some(rule) = text_field(&row, "detector").filter(|d| d.starts_with("rules:")) {
                safety.rule_of.insert(id.clone(), rule.to_string());
            }
            safety.category_of.insert(id, label);
        }
    })?;
    Ok(safety)
}

/// What covers every row of every outcome: the recovered records, the
/// confidences per head (`[promoted, quarantined]`) and the items per
/// persona (`[promoted, quarantined, abstained]`).
#[derive(Default)]
struct Tallies {
    recovered: Recovered,
    confidences: BTreeMap<&'static str, [Vec<f64>; 2]>,
    personas: BTreeMap<String, [u64; 3]>,
}

/// Index of the promoted outcome in [`Tallies`]' arrays.
const PROMOTED: usize = 0;
/// Index of the quarantined outcome in [`Tallies`]' arrays.
const QUARANTINED: usize = 1;
/// Index of the abstained outcome in [`Tallies::personas`].
const ABSTAINED: usize = 2;

impl Tallies {
    fn confidence(&mut self, head: &'static str, outcome: usize, value: Option<f64>) {
        if let Some(value) = value {
            self.confidences.entry(head).or_default()[outcome].push(value);
        }
    }

    fn persona(&mut self, row: &Map<String, Value>, outcome: usize) {
        let persona = text_field(row, "persona_id").unwrap_or("").to_string();
        self.personas.entry(persona).or_default()[outcome] += 1;
    }

    /// The histograms per head, promoted and quarantined.
    fn histograms(&mut self) -> Map<String, Value> {
        ["tom_kind", "affect", "intensity", "edge"]
            .iter()
            .map(|head| {
                let [promoted, quarantined] = self.confidences.remove(head).unwrap_or_default();
                (
                    head.to_string(),
                    json!({"promoted": histogram(promoted.into_iter()), "quarantined": histogram(quarantined.into_iter())}),
                )
            })
            .collect()
    }

    /// The items per persona, as the page lists them.
    fn personas(&self) -> Vec<Value> {
        self.personas
            .iter()
            .map(|(persona, count)| json!({"persona_id": persona, "promoted": count[PROMOTED], "quarantined": count[QUARANTINED], "abstained": count[ABSTAINED]}))
            .collect()
    }
}

/// Tallies the promoted tags and edges (only counted, never listed).
fn tally_promoted(dir: &Path, tallies: &mut Tallies) -> Result<(), ReportError> {
    each::<PromotedTags>(
        dir,
        Columns::Only(&[
            "persona_id",
            "tom_kind_confidence",
            "affect_confidence",
            "intensity_confidence",
            "record_id",
            "parse_class",
            "escape_shape",
        ]),
        |row| {
            tallies.recovered.add(&row, "promoted");
            tallies.confidence(
                "tom_kind",
                PROMOTED,
                number_field(&row, "tom_kind_confidence"),
            );
            tallies.confidence("affect", PROMOTED, number_field(&row, "affect_confidence"));
            tallies.confidence(
                "intensity",
                PROMOTED,
                number_field(&row, "intensity_confidence"),
            );
            tallies.persona(&row, PROMOTED);
        },
    )?;
    each::<PromotedEdges>(
        dir,
        Columns::Only(&[
            "persona_id",
            "confidence",
            "record_id",
            "parse_class",
            "escape_shape",
        ]),
        |row| {
            tallies.recovered.add(&row, "promoted");
            tallies.confidence("edge", PROMOTED, number_field(&row, "confidence"));
            tallies.persona(&row, PROMOTED);
        },
    )
}

/// The curator's queue: its first [`MAX_QUEUE_ITEMS`] items, each record
/// text once (items point at it by index), and how many items there are.
#[derive(Default)]
struct Queue {
    texts: Vec<String>,
    text_index: BTreeMap<String, usize>,
    items: Vec<Value>,
    total: usize,
}

impl Queue {
    /// The index of `text` in [`Queue::texts`], added if new.
    fn text_position(&mut self, text: &str) -> usize {
        match self.text_index.get(text) {
            Some(&i) => i,
            None => {
                self.texts.push(text.to_string());
                self.text_index
                    .insert(text.to_string(), self.texts.len() - 1);
                self.texts.len() - 1
            }
        }
    }
}

/// One quarantined row as a queue item of the page.
fn queue_item(
    row: &Map<String, Value>,
    text_position: usize,
    sensitive: Option<&String>,
    rule: Option<&String>,
) -> Value {
    let text = text_field(row, "record_text").unwrap_or("");
    let quote = text_field(row, "source_quote");
    let span = utf16_span(
        text,
        row.get("quote_start").and_then(Value::as_u64),
        row.get("quote_end").and_then(Value::as_u64),
        quote,
    );
    json!({
        "item_id": row.get("item_id"), "item_type": row.get("item_type"), "record_id": row.get("record_id"),
        "persona_id": row.get("persona_id"), "record_kind": row.get("record_kind"), "source_path": row.get("source_path"),
        "label": row.get("label"), "confidence": row.get("confidence"), "suggested_label": row.get("suggested_label"),
        "affect": row.get("affect"), "affect_confidence": row.get("affect_confidence"), "suggested_affect": row.get("suggested_affect"),
        "intensity": row.get("intensity"), "intensity_confidence": row.get("intensity_confidence"), "suggested_intensity": row.get("suggested_intensity"),
        "target_node": row.get("target_node"), "target_mention": row.get("target_mention"), "edge_key": row.get("edge_key"),
        "reasons": row.get("reasons"), "detail": row.get("detail"),
        "quote": quote, "q16_start": span.map(|s| s.0), "q16_end": span.map(|s| s.1),
        "text": text_position, "raw_annotation": row.get("raw_annotation"),
        "parse_class": row.get("parse_class"), "escape_shape": row.get("escape_shape"),
        "sensitive": sensitive, "rule": rule,
    })
}

/// Reads the quarantine table into the queue, tallying every row.
fn read_queue(
    dir: &Path,
    safety: &SafetyRecords,
    tallies: &mut Tallies,
) -> Result<Queue, ReportError> {
    let mut queue = Queue::default();
    each::<Quarantine>(dir, Columns::All, |row| {
        queue.total += 1;
        tallies.recovered.add(&row, "quarantined");
        tallies.persona(&row, QUARANTINED);
        match text_field(&row, "item_type") {
            Some("tag") => {
                tallies.confidence("tom_kind", QUARANTINED, number_field(&row, "confidence"));
                tallies.confidence(
                    "affect",
                    QUARANTINED,
                    number_field(&row, "affect_confidence"),
                );
                tallies.confidence(
                    "intensity",
                    QUARANTINED,
                    number_field(&row, "intensity_confidence"),
                );
            }
            Some("edge") => {
                tallies.confidence("edge", QUARANTINED, number_field(&row, "confidence"))
            }
            _ => {}
        }
        if queue.items.len() >= MAX_QUEUE_ITEMS {
            return;
        }
        let text_position = queue.text_position(text_field(&row, "record_text").unwrap_or(""));
        let record = text_field(&row, "record_id");
        let sensitive = record.and_then(|id| safety.category_of.get(id));
        let rule = record.and_then(|id| safety.rule_of.get(id));
        queue
            .items
            .push(queue_item(&row, text_position, sensitive, rule));
    })?;
    Ok(queue)
}

/// Rows of a table listed whole (the first [`MAX_LISTED`]) and counted.
#[derive(Default)]
struct Listed {
    rows: Vec<Value>,
    total: usize,
}

impl Listed {
    fn add(&mut self, row: Map<String, Value>) {
        self.total += 1;
        if self.rows.len() < MAX_LISTED {
            self.rows.push(Value::Object(row));
        }
    }
}

/// Reads the abstained table (tallied) and the rejects table.
fn read_abstained_and_rejects(
    dir: &Path,
    tallies: &mut Tallies,
) -> Result<(Listed, Listed), ReportError> {
    let mut abstained = Listed::default();
    each::<Abstained>(dir, Columns::All, |row| {
        tallies.recovered.add(&row, "abstained");
        tallies.persona(&row, ABSTAINED);
        abstained.add(row);
    })?;
    let mut rejects = Listed::default();
    each::<Rejects>(dir, Columns::All, |row| rejects.add(row))?;
    Ok((abstained, rejects))
}

/// The run's identity from its receipt.
fn run_fields(receipt: &Receipt) -> Value {
    json!({
        "run_id": receipt.run_id, "started_at": receipt.started_at, "finished_at": receipt.finished_at,
        "duration_seconds": receipt.duration_seconds, "annotator": receipt.annotator.id,
        "policy_sha256": receipt.policy_sha256,
        "inputs": receipt.inputs.iter().map(|input| json!({"path": input.path, "records": input.records})).collect::<Vec<_>>(),
    })
}

/// The promotion thresholds per head.
fn thresholds(policy: &Policy) -> Value {
    let when = &policy.tom_lite_promotion_policy;
    json!({
        "tom_kind": when.promote_tags_when.tom_kind_confidence_min,
        "affect": when.promote_tags_when.affect_confidence_min,
        "intensity": when.promote_tags_when.intensity_confidence_min,
        "edge": when.promote_edges_when.edge_confidence_min,
    })
}

/// The page's data (see the template for how it is drawn). Tables are
/// streamed: the queue keeps its first [`MAX_QUEUE_ITEMS`] items, the
/// counts, histograms and personas cover every row.
pub fn data(input: &ReportInput<'_>) -> Result<Value, ReportError> {
    let dir = input.dir;
    let safety = safety_records(dir)?;
    let mut tallies = Tallies::default();
    tally_promoted(dir, &mut tallies)?;
    let queue = read_queue(dir, &safety, &mut tallies)?;
    let (abstained, rejects) = read_abstained_and_rejects(dir, &mut tallies)?;
    let receipt = input.receipt;
    let previous = input
        .previous
        .as_ref()
        .map(|p| json!({"run_id": p["run_id"], "counts": p["counts"], "reasons": p["reasons"]}));
    Ok(json!({
        "run": run_fields(receipt),
        "counts": receipt.counts,
        "sensitive": receipt.sensitive,
        "safety": safety.listed,
        "safety_total": safety.total,
        "previous": previous,
        "reasons": receipt.reasons,
        "personas": tallies.personas(),
        "thresholds": thresholds(input.policy),
        "histograms": tallies.histograms(),
        "vocab": {"tom_kind": TOM_KINDS, "affect": AFFECTS, "intensity": INTENSITIES},
        // `[id, name]` per node: the page's relabel search runs over them.
        "nodes": input.registry.map(|registry| registry.nodes().iter().map(|node| json!([node.id, node.name])).collect::<Vec<_>>()).unwrap_or_default(),
        "texts": queue.texts,
        "queue": queue.items,
        "queue_total": queue.total,
        "abstained": abstained.rows,
        "abstained_total": abstained.total,
        "rejects": rejects.rows,
        "rejects_total": rejects.total,
        "failed": receipt.failed,
        "poison": receipt.poison,
        "parse_classes": receipt.annotator.stats["raw_annotations"]["parse_classes"],
        "escape_shapes": receipt.annotator.stats["raw_annotations"]["escape_shapes"],
        "recovered": tallies.recovered.records,
        // The curator's agreement with the model so far (`curate status`'s
        // figures), when this staging directory has curated decisions.
        "agreement": super::agreement::agreement(dir),
    }))
}
