//! The page's data: the run's tables streamed into one JSON value (safety
//! records, counts, histograms, personas, the queue, abstained and rejected
//! rows, failed and recovered records).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{Map, Value, json};

use super::input::{MAX_LISTED, MAX_QUEUE_ITEMS, MAX_RECOVERED, ReportError, ReportInput};
use crate::rules::policy::Policy;
use crate::stage::cells::{self, ReadCells};
use crate::stage::read;
use crate::stage::receipt::Receipt;
use crate::stage::tables::{
    Abstained, ParseCells, PromotedEdges, PromotedTags, Quarantine, QuarantineRow, Rejects,
    Sensitive, StagedTable, StagedView, row, staged_view,
};
use crate::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};

row! {
    /// What the report tallies of a promoted tag (it never lists one).
    pub struct PromotedTagTally<'a> {
        /// Its persona.
        pub persona_id: &'a str,
        /// The tag's confidence.
        pub tom_kind_confidence: f64,
        /// The affect's.
        pub affect_confidence: f64,
        /// The intensity's.
        pub intensity_confidence: f64,
        /// The record.
        pub record_id: &'a str,
        /// How the raw output was read.
        pub parse: ParseCells<'a>,
    }
}

staged_view!(
    /// The promoted tags as the report tallies them ([`PromotedTagTally`]).
    PromotedTagTallies,
    PromotedTags,
    PromotedTagTally
);

row! {
    /// What the report tallies of a promoted edge (it never lists one).
    pub struct PromotedEdgeTally<'a> {
        /// Its persona.
        pub persona_id: &'a str,
        /// The edge's confidence.
        pub confidence: f64,
        /// The record.
        pub record_id: &'a str,
        /// How the raw output was read.
        pub parse: ParseCells<'a>,
    }
}

staged_view!(
    /// The promoted edges as the report tallies them ([`PromotedEdgeTally`]).
    PromotedEdgeTallies,
    PromotedEdges,
    PromotedEdgeTally
);

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

/// Streams the rows of the run's table (or view) `V`.
fn each<V: StagedView>(dir: &Path, on_row: impl FnMut(V::Row<'_>)) -> Result<(), ReportError> {
    let name = V::Table::NAME;
    read::each_row::<V>(&dir.join(format!("{name}.parquet")), on_row).map_err(|e| ReportError {
        table: name.to_string(),
        message: e.to_string(),
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

/// Whose raw output a row was read from, and how.
struct ReadFrom<'r> {
    record_id: &'r str,
    persona_id: &'r str,
    parse: &'r ParseCells<'r>,
}

impl Recovered {
    fn add(&mut self, row: ReadFrom<'_>, outcome: &str) {
        let Some(class) = row.parse.parse_class else {
            return;
        };
        let shape = row.parse.escape_shape;
        if class == crate::annotate::read_as::ParseClass::Strict.as_str() {
            return;
        }
        let id = row.record_id;
        let position = match self.index.get(id) {
            Some(&i) => i,
            None if self.records.len() < MAX_RECOVERED => {
                self.records.push(json!({
                    "record_id": id, "persona_id": row.persona_id, "parse_class": class,
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
    each::<Sensitive>(dir, |row| {
        let id = row.record_id.to_string();
        let flags = row.flags;
        let label = match row.category {
            Some(category) => category.to_string(),
            None => format!("flag:{}", flags.join(",")),
        };
        if row.safety == 1 {
            safety.total += 1;
            if safety.listed.len() < MAX_LISTED {
                safety.listed.push(json!({
                    "record_id": id, "persona_id": row.persona_id, "record_kind": row.record_kind,
                    "source_path": row.source_path, "category": row.category, "flags": flags,
                    "confidence": row.confidence, "detector": row.detector, "quote": row.quote,
                    "quote_start": row.quote_start, "quote_end": row.quote_end,
                }));
            }
        }
        if safety.category_of.len() < MAX_QUEUE_ITEMS {
            if let Some(rule) = row.detector.filter(|d| d.starts_with("rules:")) {
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

    /// Tallies a row of `outcome` (`outcome_name` for [`Recovered`]): its
    /// persona, and its record when its raw output needed rescue.
    fn row(&mut self, row: ReadFrom<'_>, outcome: usize, outcome_name: &str) {
        self.personas.entry(row.persona_id.to_string()).or_default()[outcome] += 1;
        self.recovered.add(row, outcome_name);
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
    each::<PromotedTagTallies>(dir, |row| {
        tallies.confidence("tom_kind", PROMOTED, Some(row.tom_kind_confidence));
        tallies.confidence("affect", PROMOTED, Some(row.affect_confidence));
        tallies.confidence("intensity", PROMOTED, Some(row.intensity_confidence));
        let from = ReadFrom {
            record_id: row.record_id,
            persona_id: row.persona_id,
            parse: &row.parse,
        };
        tallies.row(from, PROMOTED, "promoted");
    })?;
    each::<PromotedEdgeTallies>(dir, |row| {
        tallies.confidence("edge", PROMOTED, Some(row.confidence));
        let from = ReadFrom {
            record_id: row.record_id,
            persona_id: row.persona_id,
            parse: &row.parse,
        };
        tallies.row(from, PROMOTED, "promoted");
    })
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
    row: &QuarantineRow<'_>,
    text_position: usize,
    sensitive: Option<&String>,
    rule: Option<&String>,
) -> Value {
    let (item, affect, quote) = (&row.item, &row.affect, &row.quote);
    let span = utf16_span(
        row.record_text,
        quote.quote_start,
        quote.quote_end,
        quote.source_quote,
    );
    json!({
        "item_id": item.item_id, "item_type": item.item_type, "record_id": item.record_id,
        "persona_id": item.persona_id, "record_kind": row.record_kind, "source_path": item.source_path,
        "label": row.label, "confidence": row.confidence, "suggested_label": row.suggested_label,
        "affect": affect.affect, "affect_confidence": affect.affect_confidence, "suggested_affect": affect.suggested_affect,
        "intensity": affect.intensity, "intensity_confidence": affect.intensity_confidence, "suggested_intensity": affect.suggested_intensity,
        "target_node": row.target_node, "target_mention": row.target_mention, "edge_key": row.edge_key,
        "reasons": row.reasons, "detail": row.detail,
        "quote": quote.source_quote, "q16_start": span.map(|s| s.0), "q16_end": span.map(|s| s.1),
        "text": text_position, "raw_annotation": row.raw_annotation,
        "parse_class": row.parse.parse_class, "escape_shape": row.parse.escape_shape,
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
    each::<Quarantine>(dir, |row| {
        queue.total += 1;
        let from = ReadFrom {
            record_id: row.item.record_id,
            persona_id: row.item.persona_id,
            parse: &row.parse,
        };
        tallies.row(from, QUARANTINED, "quarantined");
        match row.item.item_type {
            "tag" => {
                tallies.confidence("tom_kind", QUARANTINED, row.confidence);
                tallies.confidence("affect", QUARANTINED, row.affect.affect_confidence);
                tallies.confidence("intensity", QUARANTINED, row.affect.intensity_confidence);
            }
            "edge" => tallies.confidence("edge", QUARANTINED, row.confidence),
            _ => {}
        }
        if queue.items.len() >= MAX_QUEUE_ITEMS {
            return;
        }
        let text_position = queue.text_position(row.record_text);
        let record = row.item.record_id;
        let sensitive = safety.category_of.get(record);
        let rule = safety.rule_of.get(record);
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
    /// Counts a row, and lists it whole (every column) while there is room.
    fn add<'a>(&mut self, row: &impl ReadCells<'a>) {
        self.total += 1;
        if self.rows.len() < MAX_LISTED {
            self.rows.push(Value::Object(cells::row_json(row)));
        }
    }
}

/// Reads the abstained table (tallied) and the rejects table.
fn read_abstained_and_rejects(
    dir: &Path,
    tallies: &mut Tallies,
) -> Result<(Listed, Listed), ReportError> {
    let mut abstained = Listed::default();
    each::<Abstained>(dir, |row| {
        let from = ReadFrom {
            record_id: row.record_id,
            persona_id: row.persona_id,
            parse: &row.parse,
        };
        tallies.row(from, ABSTAINED, "abstained");
        abstained.add(&row);
    })?;
    let mut rejects = Listed::default();
    each::<Rejects>(dir, |row| rejects.add(&row))?;
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
