//! `tomlite curate apply`: a decisions file, line by line, checked against
//! the runs it names and applied to `curated/`.

use std::path::Path;

use foldhash::{HashMap, HashMapExt};
use serde_json::{Map, Value};
use tomlite_staging::{StagingDir, State};

use crate::graph::nodes::Registry;
use crate::stage::tables::{Quarantine, QuarantineRow};
use crate::vocab::TOM_KINDS;

use super::curated::*;
use super::quote::{DecidedQuote, decided_quote};

/// Quarantined items by run (None: no such run), then by item id.
type RunItems = HashMap<String, Option<HashMap<String, Queued>>>;

/// What a decision needs of the quarantined item it decides, as the run
/// staged it: what it is checked against and what its curated row copies.
struct Queued {
    item_type: String,
    label: Option<String>,
    target_node: Option<String>,
    target_mention: Option<String>,
    edge_key: Option<String>,
    record_id: String,
    persona_id: String,
    record_kind: String,
    record_text: String,
    affect: Option<String>,
    intensity: Option<String>,
    source_quote: Option<String>,
    quote_start: Option<u64>,
    quote_end: Option<u64>,
    confidence: Option<f64>,
    affect_confidence: Option<f64>,
    intensity_confidence: Option<f64>,
}

impl Queued {
    fn from_staged(q: &QuarantineRow<'_>) -> Self {
        let text = |value: Option<&str>| value.map(str::to_string);
        Self {
            item_type: q.item.item_type.to_string(),
            label: text(q.label),
            target_node: text(q.target_node),
            target_mention: text(q.target_mention),
            edge_key: text(q.edge_key),
            record_id: q.item.record_id.to_string(),
            persona_id: q.item.persona_id.to_string(),
            record_kind: q.record_kind.to_string(),
            record_text: q.record_text.to_string(),
            affect: text(q.affect.affect),
            intensity: text(q.affect.intensity),
            source_quote: text(q.quote.source_quote),
            quote_start: q.quote.quote_start,
            quote_end: q.quote.quote_end,
            confidence: q.confidence,
            affect_confidence: q.affect.affect_confidence,
            intensity_confidence: q.affect.intensity_confidence,
        }
    }
}

/// Checks that `run_id` names a committed run of this staging directory:
/// one its state lists, matched by name (never joined as a path), whose
/// directory under `runs/` is a directory, not a link.
fn committed_run(staging: &Path, state: &State, run_id: &str) -> Result<(), String> {
    if !state.runs().iter().any(|r| r == run_id) {
        return Err(format!(
            "`{run_id}` is not a committed run of {} (a run_id is the name of a run its state lists, not a path)",
            staging.display()
        ));
    }
    let plain =
        !run_id.is_empty() && !run_id.starts_with('.') && !run_id.contains(['/', '\\', '\0']);
    let dir = staging.join("runs").join(run_id);
    let is_dir = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_dir());
    if !plain || !is_dir {
        return Err(format!(
            "`{run_id}` is listed by the state but {} is not its run directory",
            dir.display()
        ));
    }
    Ok(())
}

/// Quarantined items of one run, by item id.
fn run_items(staging: &Path, run_id: &str, cache: &mut RunItems) -> Result<(), CurateError> {
    if cache.contains_key(run_id) {
        return Ok(());
    }
    let path = staging.join("runs").join(run_id).join("quarantine.parquet");
    let items = if path.is_file() {
        let mut items = HashMap::new();
        each_row::<Quarantine>(&path, |q| {
            items.insert(q.item.item_id.to_string(), Queued::from_staged(&q));
        })?;
        Some(items)
    } else {
        None
    };
    cache.insert(run_id.to_string(), items);
    Ok(())
}

/// The registry a run used, from its receipt.
pub fn run_registry(staging: &Path, run_id: &str) -> Option<Registry> {
    let receipt = staging.join("runs").join(run_id).join("receipt.json");
    let v: Value = serde_json::from_slice(&std::fs::read(receipt).ok()?).ok()?;
    let p = v["nodes"]["path"].as_str()?;
    Registry::load(Path::new(p)).ok()
}

/// Applies a decisions file (JSONL) to the staging directory's curated
/// table. Bad lines are reported and skipped; the others are applied.
pub fn apply(
    staging_root: &Path,
    decisions: &Path,
    registry: Option<&Registry>,
) -> Result<ApplyReport, CurateError> {
    let staging = StagingDir::open(staging_root)?;
    let state = staging.load_state()?;
    let latest = staging.latest()?;
    let mut curated = Curated::load(staging_root)?;
    let file = std::fs::File::open(decisions).map_err(|source| CurateError::Io {
        path: decisions.to_path_buf(),
        source,
    })?;
    let mut report = ApplyReport::default();
    let mut context = DecisionContext {
        staging: staging_root,
        state: &state,
        latest: latest.as_deref(),
        registry,
        registries: HashMap::new(),
        run_items: HashMap::new(),
        now: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let mut changed = false;
    for line in DecisionLines::new(file) {
        let (n, line) = line.map_err(|source| CurateError::Io {
            path: decisions.to_path_buf(),
            source,
        })?;
        report.lines += 1;
        let line = match line {
            Ok(text) => text,
            Err((item_id, message)) => {
                report.errors.push(LineError {
                    line: n,
                    item_id,
                    field: "(line)".into(),
                    message,
                });
                continue;
            }
        };
        match decide_line(&line, &mut context)? {
            Err((item_id, field, message)) => report.errors.push(LineError {
                line: n,
                item_id,
                field,
                message,
            }),
            Ok(row) => {
                let key = (row.run_id.clone(), row.item_id.clone());
                match curated.rows.get(&key) {
                    Some(old) if old.same_decision(&row) => report.unchanged += 1,
                    Some(_) => {
                        report.updated += 1;
                        curated.rows.insert(key, row);
                        changed = true;
                    }
                    None => {
                        report.new += 1;
                        curated.rows.insert(key, row);
                        changed = true;
                    }
                }
            }
        }
    }
    if changed {
        report.written = Some(curated.write(staging_root)?);
    }
    Ok(report)
}

/// The longest decisions line that is read (16 MiB, the record reader's
/// line limit at its default text limit): a longer line is skipped without
/// being held whole and reported by its number.
pub const MAX_DECISION_LINE: usize = 16 << 20;

/// A decisions line: its text, or why it cannot be read (the item it
/// seems to name, the message).
type RawLine = Result<String, (Option<String>, String)>;

/// The lines of a decisions file that are not blank, numbered from 1: each
/// one is read on its own, so a line that is not UTF-8 or longer than
/// [`MAX_DECISION_LINE`] is reported by number and the others are read.
pub(super) struct DecisionLines<R> {
    reader: std::io::BufReader<R>,
    buf: Vec<u8>,
    line: u64,
}

impl<R: std::io::Read> DecisionLines<R> {
    pub(super) fn new(r: R) -> Self {
        Self {
            reader: std::io::BufReader::with_capacity(1 << 16, r),
            buf: Vec::new(),
            line: 0,
        }
    }
}

impl<R: std::io::Read> Iterator for DecisionLines<R> {
    type Item = std::io::Result<(u64, RawLine)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let read = match crate::ingest::bytes::read_line_capped(
                &mut self.reader,
                &mut self.buf,
                MAX_DECISION_LINE,
            ) {
                Ok(Some(l)) => l,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            };
            self.line += 1;
            let n = self.line;
            let mut bytes = &self.buf[..];
            if n == 1 {
                bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
            }
            if read.over {
                let item = crate::ingest::record::sniff_record_id(bytes, "item_id");
                return Some(Ok((
                    n,
                    Err((
                        item,
                        format!(
                            "line is too long: {} bytes, over the limit of {MAX_DECISION_LINE} bytes; skipped, not read",
                            read.len
                        ),
                    )),
                )));
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some(Ok((
                n,
                match std::str::from_utf8(bytes) {
                    Ok(s) => Ok(s.to_string()),
                    Err(e) => Err((
                        crate::ingest::record::sniff_record_id(bytes, "item_id"),
                        format!(
                            "not UTF-8: invalid byte 0x{:02x} at byte {} of the line; the line is skipped",
                            bytes[e.valid_up_to()],
                            e.valid_up_to() + 1
                        ),
                    )),
                },
            )));
        }
    }
}

/// Why a decisions line is not applied: the item it names (if any), the
/// field at fault, the message.
type LineFault = (Option<String>, String, String);

/// A decisions line applied as a row, or why it is not.
type LineResult = Result<CuratedRow, LineFault>;

/// A [`LineFault`] for `item`'s `field`.
fn fault(item: Option<&str>, field: &str, message: impl Into<String>) -> LineFault {
    (item.map(str::to_string), field.to_string(), message.into())
}

/// What every decisions line of one `apply` is checked against: the
/// staging directory, its state and latest run, the registry given (else
/// each run's own, read once), the quarantined items read so far, and the
/// time the decisions are applied at.
struct DecisionContext<'a> {
    staging: &'a Path,
    state: &'a State,
    latest: Option<&'a str>,
    registry: Option<&'a Registry>,
    registries: HashMap<String, Option<Registry>>,
    run_items: RunItems,
    now: String,
}

/// The text fields of a decisions line (a blank string counts as absent).
struct DecisionFields {
    run_id: Option<String>,
    item_id: Option<String>,
    decision: Option<String>,
    label: Option<String>,
    affect: Option<String>,
    intensity: Option<String>,
    bulk: bool,
    /// The curator's quote offsets, as written (checked against the record).
    quote_start: Option<Value>,
    quote_end: Option<Value>,
    target_node: Option<String>,
    curator: Option<String>,
    note: Option<String>,
    decided_at: Option<String>,
}

/// The item a decisions line names, if it names one as a string.
fn line_item(object: &Map<String, Value>) -> Option<String> {
    object
        .get("item_id")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Parses a decisions line into its fields; the first field that is not a
/// string (or null) is the fault.
fn decision_fields(line: &str) -> Result<DecisionFields, LineFault> {
    let object = match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(object)) => object,
        Ok(_) => return Err(fault(None, "(line)", "expected a JSON object")),
        Err(e) => return Err(fault(None, "(line)", format!("malformed JSON: {e}"))),
    };
    let field = |name: &str| match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => {
            let item = line_item(&object);
            Err(fault(
                item.as_deref(),
                name,
                format!("{name}: expected a string"),
            ))
        }
    };
    let bulk = match object.get("bulk") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            let item = line_item(&object);
            return Err(fault(
                item.as_deref(),
                "bulk",
                "bulk: expected true or false",
            ));
        }
    };
    Ok(DecisionFields {
        run_id: field("run_id")?,
        item_id: field("item_id")?,
        decision: field("decision")?,
        label: field("label")?,
        affect: field("affect")?,
        intensity: field("intensity")?,
        bulk,
        quote_start: object.get("quote_start").cloned(),
        quote_end: object.get("quote_end").cloned(),
        target_node: field("target_node")?,
        curator: field("curator")?,
        note: field("note")?,
        decided_at: field("decided_at")?,
    })
}

/// The committed run a decision names, or the latest one when it names none.
fn resolve_run(
    context: &DecisionContext<'_>,
    run_id: Option<String>,
    item: Option<&str>,
) -> Result<String, LineFault> {
    match run_id {
        Some(run_id) => {
            committed_run(context.staging, context.state, &run_id)
                .map_err(|why| fault(item, "run_id", why))?;
            Ok(run_id)
        }
        None => match context.latest {
            None => Err(fault(item, "run_id", "missing, and no run was committed")),
            Some(latest) => {
                committed_run(context.staging, context.state, latest)
                    .map_err(|why| fault(item, "run_id", format!("missing, and LATEST: {why}")))?;
                Ok(latest.to_string())
            }
        },
    }
}

/// The quarantined item `item_id` of run `run_id`, among the items read.
fn quarantined_item<'r>(
    run_items: &'r RunItems,
    run_id: &str,
    item_id: &str,
) -> Result<&'r Queued, LineFault> {
    let item = Some(item_id);
    let Some(items) = run_items.get(run_id).and_then(Option::as_ref) else {
        return Err(fault(
            item,
            "run_id",
            format!("no committed run `{run_id}`"),
        ));
    };
    items.get(item_id).ok_or_else(|| {
        fault(
            item,
            "item_id",
            format!("not in the quarantine of run `{run_id}`"),
        )
    })
}

/// Who decided what, and when: the fields every decision needs.
struct Signature {
    decision: String,
    curator: String,
    decided_at: String,
}

/// The decision, the curator and an RFC3339 `decided_at`, in that order.
fn signature(fields: &mut DecisionFields, item: Option<&str>) -> Result<Signature, LineFault> {
    let decision = fields
        .decision
        .take()
        .ok_or_else(|| fault(item, "decision", "missing"))?;
    let curator = fields
        .curator
        .take()
        .ok_or_else(|| fault(item, "curator", "missing: who decided"))?;
    let decided_at = fields
        .decided_at
        .take()
        .ok_or_else(|| fault(item, "decided_at", "missing"))?;
    if let Err(e) = chrono::DateTime::parse_from_rfc3339(&decided_at) {
        let message = format!("`{decided_at}` is not RFC3339: {e}");
        return Err(fault(item, "decided_at", message));
    }
    Ok(Signature {
        decision,
        curator,
        decided_at,
    })
}

/// The nodes an edge may point at: committed memories (`memory:<id>`) and
/// the registry's nodes.
struct KnownNodes<'a> {
    state: &'a State,
    registry: Option<&'a Registry>,
}

impl KnownNodes<'_> {
    fn contains(&self, target: &str) -> bool {
        match target.strip_prefix("memory:") {
            Some(id) => self.state.contains(id),
            None => self
                .registry
                .is_some_and(|registry| registry.contains(target)),
        }
    }
}

/// The quarantined item's type, label and target, as the run staged them.
struct Original {
    item_type: String,
    label: Option<String>,
    target: Option<String>,
}

/// Whether an item may be accepted as it is: a label in the vocabulary
/// and, for an edge, a known target.
fn check_accept(
    original: &Original,
    nodes: &KnownNodes<'_>,
    item: Option<&str>,
) -> Result<(), LineFault> {
    if original.item_type == "annotation" {
        return Err(fault(
            item,
            "decision",
            "an unreadable annotation has no label to accept: relabel it to a tom_kind or reject it",
        ));
    }
    if let Some(label) = &original.label
        && !TOM_KINDS.contains(&label.as_str())
    {
        let message =
            format!("`{label}` is outside the vocabulary: relabel it instead of accepting");
        return Err(fault(item, "decision", message));
    }
    if original.item_type == "edge"
        && !original
            .target
            .as_deref()
            .is_some_and(|target| nodes.contains(target))
    {
        return Err(fault(
            item,
            "decision",
            "the edge's target is not in the registry: relabel it to a registry node",
        ));
    }
    Ok(())
}

/// A relabelled edge's label and target: a known node, and a tom_kind
/// (the original label when the line gives none).
fn relabel_edge(
    fields: &DecisionFields,
    original: &Original,
    nodes: &KnownNodes<'_>,
    item: Option<&str>,
) -> Result<(Option<String>, Option<String>), LineFault> {
    let Some(target) = fields.target_node.clone() else {
        return Err(fault(
            item,
            "target_node",
            "a relabelled edge needs a registry node",
        ));
    };
    if !nodes.contains(&target) {
        let message = format!("`{target}` is not in the node registry");
        return Err(fault(item, "target_node", message));
    }
    let label = fields.label.clone().or(original.label.clone());
    if let Some(label) = &label
        && !TOM_KINDS.contains(&label.as_str())
    {
        return Err(fault(item, "label", format!("`{label}` is not a tom_kind")));
    }
    Ok((label, Some(target)))
}

/// A relabelled tag's label: a tom_kind.
fn relabel_tag(fields: &DecisionFields, item: Option<&str>) -> Result<Option<String>, LineFault> {
    let Some(label) = fields.label.clone() else {
        return Err(fault(item, "label", "a relabelled tag needs a tom_kind"));
    };
    if !TOM_KINDS.contains(&label.as_str()) {
        let message = format!("`{label}` is not a tom_kind ({})", TOM_KINDS.join(", "));
        return Err(fault(item, "label", message));
    }
    Ok(Some(label))
}

/// The label and target the decision leaves the item with, checked by the
/// kind of decision and of item.
fn decided_label_and_target(
    decision: &str,
    fields: &DecisionFields,
    original: &Original,
    nodes: &KnownNodes<'_>,
    item: Option<&str>,
) -> Result<(Option<String>, Option<String>), LineFault> {
    match (decision, original.item_type.as_str()) {
        ("accept", _) => {
            check_accept(original, nodes, item)?;
            Ok((original.label.clone(), original.target.clone()))
        }
        ("reject", _) => Ok((original.label.clone(), original.target.clone())),
        ("relabel", "edge") => relabel_edge(fields, original, nodes, item),
        ("relabel", _) => Ok((relabel_tag(fields, item)?, None)),
        (other, _) => Err(fault(
            item,
            "decision",
            format!("`{other}`: expected accept, reject or relabel"),
        )),
    }
}

/// The affect and intensity a decision sets: only on a tag, each from
/// the vocabulary.
fn decided_affect_and_intensity(
    fields: &DecisionFields,
    original: &Original,
    item: Option<&str>,
) -> Result<(Option<String>, Option<String>), LineFault> {
    for (name, value, vocabulary) in [
        ("affect", &fields.affect, &crate::vocab::AFFECTS[..]),
        (
            "intensity",
            &fields.intensity,
            &crate::vocab::INTENSITIES[..],
        ),
    ] {
        let Some(value) = value else { continue };
        if original.item_type != "tag" {
            return Err(fault(item, name, format!("{name}: only a tag has one")));
        }
        if !vocabulary.contains(&value.as_str()) {
            let message = format!("`{value}` is not one of {}", vocabulary.join(", "));
            return Err(fault(item, name, message));
        }
    }
    Ok((fields.affect.clone(), fields.intensity.clone()))
}

/// What a checked decision says about its item.
struct Decided {
    run_id: String,
    item_id: String,
    signature: Signature,
    label: Option<String>,
    target_node: Option<String>,
    note: Option<String>,
    affect: Option<String>,
    intensity: Option<String>,
    quote: Option<DecidedQuote>,
    bulk: bool,
}

/// The curated row of a checked decision: the decision beside what the
/// run staged for the item, and the record's fingerprint when this run is
/// the last that processed it.
fn curated_row(
    quarantined: &Queued,
    state: &State,
    decided: Decided,
    original: Original,
    now: &str,
) -> CuratedRow {
    let record_fingerprint = state
        .get(&quarantined.record_id)
        .filter(|entry| state.run(entry) == decided.run_id)
        .map(|entry| hex::encode(entry.fingerprint));
    CuratedRow {
        run_id: decided.run_id,
        item_id: decided.item_id,
        item_type: original.item_type,
        record_id: quarantined.record_id.clone(),
        persona_id: quarantined.persona_id.clone(),
        record_kind: Some(quarantined.record_kind.clone()),
        decision: decided.signature.decision,
        label: decided.label,
        original_label: original.label,
        target_node: decided.target_node,
        original_target_node: original.target,
        target_mention: quarantined.target_mention.clone(),
        edge_key: quarantined.edge_key.clone(),
        affect: quarantined.affect.clone(),
        intensity: quarantined.intensity.clone(),
        source_quote: quarantined.source_quote.clone(),
        quote_start: quarantined.quote_start,
        quote_end: quarantined.quote_end,
        record_text: quarantined.record_text.clone(),
        record_fingerprint,
        curator: decided.signature.curator,
        note: decided.note,
        decided_at: decided.signature.decided_at,
        applied_at: now.to_string(),
        decided_affect: decided.affect,
        decided_intensity: decided.intensity,
        confidence: quarantined.confidence,
        affect_confidence: quarantined.affect_confidence,
        intensity_confidence: quarantined.intensity_confidence,
        decided_quote_start: decided.quote.as_ref().map(|q| q.start),
        decided_quote_end: decided.quote.as_ref().map(|q| q.end),
        decided_quote: decided.quote.map(|q| q.text),
        bulk: decided.bulk,
    }
}

/// A decisions line's fields, with the item it names and the committed
/// run it decides in.
fn line_target(
    line: &str,
    context: &DecisionContext<'_>,
) -> Result<(DecisionFields, String, String), LineFault> {
    let mut fields = decision_fields(line)?;
    let Some(item_id) = fields.item_id.take() else {
        return Err(fault(None, "item_id", "missing"));
    };
    let run_id = resolve_run(context, fields.run_id.take(), Some(&item_id))?;
    Ok((fields, item_id, run_id))
}

/// Checks a decision against the quarantined item it decides (the run's
/// items already read) and builds its row.
fn decide_item(
    mut fields: DecisionFields,
    item_id: String,
    run_id: String,
    context: &mut DecisionContext<'_>,
) -> LineResult {
    let item = Some(item_id.as_str());
    let quarantined = quarantined_item(&context.run_items, &run_id, &item_id)?;
    let signature = signature(&mut fields, item)?;
    let original = Original {
        item_type: quarantined.item_type.clone(),
        label: quarantined.label.clone(),
        target: quarantined.target_node.clone(),
    };
    let staging = context.staging;
    let registry = context.registry.or_else(|| {
        let registry = context.registries.entry(run_id.clone());
        registry
            .or_insert_with(|| run_registry(staging, &run_id))
            .as_ref()
    });
    let nodes = KnownNodes {
        state: context.state,
        registry,
    };
    let (label, target_node) =
        decided_label_and_target(&signature.decision, &fields, &original, &nodes, item)?;
    let (affect, intensity) = decided_affect_and_intensity(&fields, &original, item)?;
    // A tag's quote, or an edge's evidence: a real span of the record.
    let quote = decided_quote(
        fields.quote_start.as_ref(),
        fields.quote_end.as_ref(),
        &quarantined.record_text,
    )
    .map_err(|(field, message)| fault(item, field, message))?;
    let decided = Decided {
        run_id,
        item_id,
        signature,
        label,
        target_node,
        note: fields.note,
        affect,
        intensity,
        quote,
        bulk: fields.bulk,
    };
    Ok(curated_row(
        quarantined,
        context.state,
        decided,
        original,
        &context.now,
    ))
}

/// Checks one decisions line: its fields, the run it names, the item it
/// decides, the decision for that kind of item; then builds the row. A bad
/// line is a [`LineFault`]; an unreadable run table stops the `apply`.
fn decide_line(line: &str, context: &mut DecisionContext<'_>) -> Result<LineResult, CurateError> {
    let (fields, item_id, run_id) = match line_target(line, context) {
        Ok(target) => target,
        Err(why) => return Ok(Err(why)),
    };
    run_items(context.staging, &run_id, &mut context.run_items)?;
    Ok(decide_item(fields, item_id, run_id, context))
}
