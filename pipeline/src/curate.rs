//! The curator's decisions: `tomlite curate apply` and `tomlite curate status`.
//!
//! A decision names a quarantined item of a committed run (`run_id`,
//! `item_id`) and says `accept`, `reject` or `relabel` (to a tom_kind, or an
//! edge to a registry node). Applied decisions live in
//! `<staging>/curated/curated.parquet`, one row per item (the latest
//! decision wins), replaced atomically under the staging lock. Each row
//! keeps the record's text, the quote and the record's fingerprint, so it is
//! a labeled example for `tomlite train --curated` and, while the record is
//! unchanged, later runs do not queue the same item again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use foldhash::{HashMap, HashMapExt};
use serde_json::{Map, Value, json};
use tomlite_staging::{StagingDir, State};

use crate::graph::nodes::Registry;
use crate::stage::read;
use crate::stage::tables::{
    CuratedDecisionRow, CuratedDecisions, Quarantine, QuoteCells, StagedTable, Table,
};
use crate::vocab::TOM_KINDS;

/// The curated table, under the staging root.
pub const CURATED_FILE: &str = "curated/curated.parquet";

/// Errors that stop `curate` as a whole (a bad decision line does not).
#[derive(Debug, thiserror::Error)]
pub enum CurateError {
    /// The staging directory failed (including: locked by a run).
    #[error(transparent)]
    Staging(#[from] tomlite_staging::Error),
    /// A file cannot be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A table cannot be read.
    #[error("cannot read {}: {message}", path.display())]
    Table {
        /// The table.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The node registry cannot be used.
    #[error(transparent)]
    Nodes(#[from] crate::graph::nodes::NodesError),
    /// `train --curated` was given something that holds no decisions to
    /// learn from.
    #[error("--curated {}: {why}", path.display())]
    NothingToLearn {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// What `train --curated DIR` needs before anything is trained: a tomlite
/// staging directory (one with `LATEST` or `runs/`), its
/// `curated/curated.parquet` a regular file (never a FIFO or a device,
/// which would block or never end), every row with a decision, and at
/// least one row. Returns the decisions.
pub fn load_for_training(staging: &Path) -> Result<Curated, CurateError> {
    let refuse = |why: String| CurateError::NothingToLearn {
        path: staging.to_path_buf(),
        why,
    };
    let meta = std::fs::metadata(staging).map_err(|e| {
        refuse(match e.kind() {
            std::io::ErrorKind::NotFound => "does not exist".to_string(),
            _ => format!("cannot be read: {e}"),
        })
    })?;
    if !meta.is_dir() {
        return Err(refuse(
            "is not a directory: give the staging directory that `tomlite curate apply` wrote to"
                .into(),
        ));
    }
    if !staging.join(tomlite_staging::LATEST).is_file() && !staging.join("runs").is_dir() {
        return Err(refuse(
            "is not a tomlite staging directory (it has no LATEST and no runs/)".into(),
        ));
    }
    let table = staging.join(CURATED_FILE);
    match std::fs::metadata(&table) {
        Err(_) => {
            return Err(refuse(format!(
                "has no {CURATED_FILE}: run `tomlite curate apply` with the curator's decisions first"
            )));
        }
        Ok(m) if !m.is_file() => {
            return Err(refuse(format!(
                "{CURATED_FILE} is not a regular file (a FIFO, a device or a folder); it is not opened"
            )));
        }
        Ok(_) => {}
    }
    let curated = Curated::load(staging)?;
    let rows: Vec<&CuratedRow> = curated.rows().collect();
    if rows.is_empty() {
        return Err(refuse(format!("{CURATED_FILE} holds no decisions")));
    }
    if let Some((n, _)) = rows.iter().enumerate().find(|(_, r)| r.decision.is_empty()) {
        return Err(refuse(format!(
            "{CURATED_FILE}, row {}: no `decision` (accept, reject or relabel); is this a curated table?",
            n + 1
        )));
    }
    Ok(curated)
}

/// One applied decision.
#[derive(Debug, Clone, PartialEq)]
pub struct CuratedRow {
    /// The run that queued the item.
    pub run_id: String,
    /// `<record_id>#tag<n>`, `#edge<n>` or `#annotation`.
    pub item_id: String,
    /// `tag`, `edge` or `annotation`.
    pub item_type: String,
    /// The record.
    pub record_id: String,
    /// Its persona.
    pub persona_id: String,
    /// Its kind.
    pub record_kind: Option<String>,
    /// `accept`, `reject` or `relabel`.
    pub decision: String,
    /// The label after the decision (tom_kind, or relation for an edge).
    pub label: Option<String>,
    /// The label the annotator gave.
    pub original_label: Option<String>,
    /// The edge's target after the decision.
    pub target_node: Option<String>,
    /// The edge's target as proposed.
    pub original_target_node: Option<String>,
    /// The edge's mention.
    pub target_mention: Option<String>,
    /// The proposed edge's key.
    pub edge_key: Option<String>,
    /// The record's affect, as annotated.
    pub affect: Option<String>,
    /// The record's intensity, as annotated.
    pub intensity: Option<String>,
    /// The quote.
    pub source_quote: Option<String>,
    /// Quote start byte.
    pub quote_start: Option<u64>,
    /// Quote end byte.
    pub quote_end: Option<u64>,
    /// The record's text.
    pub record_text: String,
    /// The record's fingerprint when decided (hex), if the state had it.
    pub record_fingerprint: Option<String>,
    /// Who decided.
    pub curator: String,
    /// The curator's note.
    pub note: Option<String>,
    /// When the curator decided (RFC3339).
    pub decided_at: String,
    /// When it was applied (RFC3339).
    pub applied_at: String,
    /// The affect the curator set (`None`: the annotated one stands).
    pub decided_affect: Option<String>,
    /// The intensity the curator set (`None`: the annotated one stands).
    pub decided_intensity: Option<String>,
    /// The model's confidence in the label (tom_kind or relation), as queued.
    pub confidence: Option<f64>,
    /// The model's confidence in the affect, as queued.
    pub affect_confidence: Option<f64>,
    /// The model's confidence in the intensity, as queued.
    pub intensity_confidence: Option<f64>,
    /// Decided in bulk ("accept all N shown").
    pub bulk: bool,
}

impl CuratedRow {
    /// What identifies the item across nights while its record is
    /// unchanged: its tom_kind for a tag, its edge key for an edge.
    pub fn identity(&self) -> String {
        identity(
            &self.item_type,
            self.original_label.as_deref(),
            self.edge_key.as_deref(),
        )
    }

    fn same_decision(&self, other: &CuratedRow) -> bool {
        (
            &self.decision,
            &self.label,
            &self.target_node,
            &self.curator,
            &self.note,
            &self.decided_at,
            (&self.decided_affect, &self.decided_intensity, self.bulk),
        ) == (
            &other.decision,
            &other.label,
            &other.target_node,
            &other.curator,
            &other.note,
            &other.decided_at,
            (&other.decided_affect, &other.decided_intensity, other.bulk),
        )
    }
}

/// The identity of a queued item for suppression: `tag:<kind>`,
/// `edge:<edge_key>` or `annotation`.
pub fn identity(item_type: &str, label: Option<&str>, edge_key: Option<&str>) -> String {
    match item_type {
        "tag" => format!("tag:{}", label.unwrap_or("")),
        "edge" => format!("edge:{}", edge_key.unwrap_or("")),
        other => other.to_string(),
    }
}

/// Every applied decision, by (run_id, item_id).
#[derive(Debug, Default, Clone)]
pub struct Curated {
    rows: BTreeMap<(String, String), CuratedRow>,
}

/// A text cell of a staged row read back.
fn text_field(row: &Map<String, Value>, column: &str) -> Option<String> {
    row.get(column).and_then(Value::as_str).map(str::to_string)
}

/// A count cell of a staged row read back.
fn number_field(row: &Map<String, Value>, column: &str) -> Option<f64> {
    row.get(column).and_then(Value::as_f64)
}

fn count_field(row: &Map<String, Value>, column: &str) -> Option<u64> {
    row.get(column).and_then(Value::as_u64)
}

fn read_table<T: StagedTable>(path: &Path) -> Result<Vec<Map<String, Value>>, CurateError> {
    read::all_rows::<T>(path).map_err(|e| CurateError::Table {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

impl Curated {
    /// Reads `<staging>/curated/curated.parquet`; absent means nothing curated.
    pub fn load(staging: &Path) -> Result<Self, CurateError> {
        let path = staging.join(CURATED_FILE);
        let mut c = Curated::default();
        if !path.exists() {
            return Ok(c);
        }
        for m in read_table::<CuratedDecisions>(&path)? {
            let row = CuratedRow {
                run_id: text_field(&m, "run_id").unwrap_or_default(),
                item_id: text_field(&m, "item_id").unwrap_or_default(),
                item_type: text_field(&m, "item_type").unwrap_or_default(),
                record_id: text_field(&m, "record_id").unwrap_or_default(),
                persona_id: text_field(&m, "persona_id").unwrap_or_default(),
                record_kind: text_field(&m, "record_kind"),
                decision: text_field(&m, "decision").unwrap_or_default(),
                label: text_field(&m, "label"),
                original_label: text_field(&m, "original_label"),
                target_node: text_field(&m, "target_node"),
                original_target_node: text_field(&m, "original_target_node"),
                target_mention: text_field(&m, "target_mention"),
                edge_key: text_field(&m, "edge_key"),
                affect: text_field(&m, "affect"),
                intensity: text_field(&m, "intensity"),
                source_quote: text_field(&m, "source_quote"),
                quote_start: count_field(&m, "quote_start"),
                quote_end: count_field(&m, "quote_end"),
                record_text: text_field(&m, "record_text").unwrap_or_default(),
                record_fingerprint: text_field(&m, "record_fingerprint"),
                curator: text_field(&m, "curator").unwrap_or_default(),
                note: text_field(&m, "note"),
                decided_at: text_field(&m, "decided_at").unwrap_or_default(),
                applied_at: text_field(&m, "applied_at").unwrap_or_default(),
                decided_affect: text_field(&m, "decided_affect"),
                decided_intensity: text_field(&m, "decided_intensity"),
                confidence: number_field(&m, "confidence"),
                affect_confidence: number_field(&m, "affect_confidence"),
                intensity_confidence: number_field(&m, "intensity_confidence"),
                bulk: count_field(&m, "bulk") == Some(1),
            };
            c.rows
                .insert((row.run_id.clone(), row.item_id.clone()), row);
        }
        Ok(c)
    }

    /// The applied decisions, by run and item.
    pub fn rows(&self) -> impl Iterator<Item = &CuratedRow> {
        self.rows.values()
    }

    /// Number of applied decisions.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether nothing is curated.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether an item has a decision.
    pub fn contains(&self, run_id: &str, item_id: &str) -> bool {
        self.rows
            .contains_key(&(run_id.to_string(), item_id.to_string()))
    }

    /// Decided items whose record had a known fingerprint: record id →
    /// (fingerprint hex, identity, decision).
    pub fn suppression(&self) -> HashMap<String, Vec<(String, String, String)>> {
        let mut m: HashMap<String, Vec<(String, String, String)>> = HashMap::new();
        for r in self.rows.values() {
            if let Some(fp) = &r.record_fingerprint {
                m.entry(r.record_id.clone()).or_default().push((
                    fp.clone(),
                    r.identity(),
                    r.decision.clone(),
                ));
            }
        }
        m
    }

    /// Writes the table by atomic replacement (synced temp file, rename,
    /// synced directory), rows in (run, item) order.
    pub fn write(&self, staging: &Path) -> Result<PathBuf, CurateError> {
        let path = staging.join(CURATED_FILE);
        let dir = path.parent().unwrap_or(staging).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|source| CurateError::Io {
            path: dir.clone(),
            source,
        })?;
        let tmp = path.with_extension("parquet.tmp");
        let mut table = Table::<CuratedDecisions>::create_at(&tmp)?;
        for r in self.rows.values() {
            table.push(&CuratedDecisionRow {
                run_id: &r.run_id,
                item_id: &r.item_id,
                item_type: &r.item_type,
                record_id: &r.record_id,
                persona_id: &r.persona_id,
                record_kind: r.record_kind.as_deref(),
                decision: &r.decision,
                label: r.label.as_deref(),
                original_label: r.original_label.as_deref(),
                target_node: r.target_node.as_deref(),
                original_target_node: r.original_target_node.as_deref(),
                target_mention: r.target_mention.as_deref(),
                edge_key: r.edge_key.as_deref(),
                affect: r.affect.as_deref(),
                intensity: r.intensity.as_deref(),
                quote: QuoteCells {
                    source_quote: r.source_quote.as_deref(),
                    quote_start: r.quote_start,
                    quote_end: r.quote_end,
                },
                record_text: &r.record_text,
                record_fingerprint: r.record_fingerprint.as_deref(),
                curator: &r.curator,
                note: r.note.as_deref(),
                decided_at: &r.decided_at,
                applied_at: &r.applied_at,
                decided_affect: r.decided_affect.as_deref(),
                decided_intensity: r.decided_intensity.as_deref(),
                confidence: r.confidence,
                affect_confidence: r.affect_confidence,
                intensity_confidence: r.intensity_confidence,
                bulk: u64::from(r.bulk),
            })?;
        }
        table.close()?;
        std::fs::rename(&tmp, &path).map_err(|source| CurateError::Io {
            path: path.clone(),
            source,
        })?;
        tomlite_staging::sync_dir(&dir)?;
        Ok(path)
    }
}

/// A decision line that was not applied.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LineError {
    /// 1-based line of the decisions file.
    pub line: u64,
    /// The item, when the line names one.
    pub item_id: Option<String>,
    /// The offending field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(i) = &self.item_id {
            write!(f, " ({i})")?;
        }
        write!(f, ": {}: {}", self.field, self.message)
    }
}

/// What `curate apply` did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ApplyReport {
    /// Decision lines read.
    pub lines: u64,
    /// Decisions for items that had none.
    pub new: u64,
    /// Decisions that replaced an earlier, different one.
    pub updated: u64,
    /// Decisions already applied exactly as they are.
    pub unchanged: u64,
    /// Lines that were not applied.
    pub errors: Vec<LineError>,
    /// The curated table, when it was written.
    pub written: Option<PathBuf>,
}

/// Quarantined items by run (None: no such run), then by item id.
type RunItems = HashMap<String, Option<HashMap<String, Map<String, Value>>>>;

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
        Some(
            read_table::<Quarantine>(&path)?
                .into_iter()
                .filter_map(|m| text_field(&m, "item_id").map(|id| (id, m)))
                .collect(),
        )
    } else {
        None
    };
    cache.insert(run_id.to_string(), items);
    Ok(())
}

/// The registry a run used, from its receipt.
fn run_registry(staging: &Path, run_id: &str) -> Option<Registry> {
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
struct DecisionLines<R> {
    reader: std::io::BufReader<R>,
    buf: Vec<u8>,
    line: u64,
}

impl<R: std::io::Read> DecisionLines<R> {
    fn new(r: R) -> Self {
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
    target_node: Option<String>,
    curator: Option<String>,
    note: Option<String>,
    decided_at: Option<String>,
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
            let item = text_field(&object, "item_id");
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
            let item = text_field(&object, "item_id");
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
) -> Result<&'r Map<String, Value>, LineFault> {
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
    bulk: bool,
}

/// The curated row of a checked decision: the decision beside what the
/// run staged for the item, and the record's fingerprint when this run is
/// the last that processed it.
fn curated_row(
    quarantined: &Map<String, Value>,
    state: &State,
    decided: Decided,
    original: Original,
    now: &str,
) -> CuratedRow {
    let record_id = text_field(quarantined, "record_id").unwrap_or_default();
    let record_fingerprint = state
        .get(&record_id)
        .filter(|entry| state.run(entry) == decided.run_id)
        .map(|entry| hex::encode(entry.fingerprint));
    CuratedRow {
        run_id: decided.run_id,
        item_id: decided.item_id,
        item_type: original.item_type,
        record_id,
        persona_id: text_field(quarantined, "persona_id").unwrap_or_default(),
        record_kind: text_field(quarantined, "record_kind"),
        decision: decided.signature.decision,
        label: decided.label,
        original_label: original.label,
        target_node: decided.target_node,
        original_target_node: original.target,
        target_mention: text_field(quarantined, "target_mention"),
        edge_key: text_field(quarantined, "edge_key"),
        affect: text_field(quarantined, "affect"),
        intensity: text_field(quarantined, "intensity"),
        source_quote: text_field(quarantined, "source_quote"),
        quote_start: count_field(quarantined, "quote_start"),
        quote_end: count_field(quarantined, "quote_end"),
        record_text: text_field(quarantined, "record_text").unwrap_or_default(),
        record_fingerprint,
        curator: decided.signature.curator,
        note: decided.note,
        decided_at: decided.signature.decided_at,
        applied_at: now.to_string(),
        decided_affect: decided.affect,
        decided_intensity: decided.intensity,
        confidence: number_field(quarantined, "confidence"),
        affect_confidence: number_field(quarantined, "affect_confidence"),
        intensity_confidence: number_field(quarantined, "intensity_confidence"),
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
        item_type: text_field(quarantined, "item_type").unwrap_or_default(),
        label: text_field(quarantined, "label"),
        target: text_field(quarantined, "target_node"),
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
    let decided = Decided {
        run_id,
        item_id,
        signature,
        label,
        target_node,
        note: fields.note,
        affect,
        intensity,
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

/// The confidence bins of the agreement figures: under 0.5, then tenths.
const BINS: [(f64, f64, &str); 6] = [
    (0.0, 0.5, "0.0-0.5"),
    (0.5, 0.6, "0.5-0.6"),
    (0.6, 0.7, "0.6-0.7"),
    (0.7, 0.8, "0.7-0.8"),
    (0.8, 0.9, "0.8-0.9"),
    (0.9, 1.0, "0.9-1.0"),
];

/// Whether the curator agreed with one head on one decided item, and the
/// head's confidence then; `None` when the decision says nothing about
/// that head (a rejected tag's affect, a head without a confidence).
fn agreed(r: &CuratedRow, head: &str) -> Option<(f64, bool)> {
    let accepted_or_relabelled = r.decision == "accept" || r.decision == "relabel";
    match (head, r.item_type.as_str()) {
        ("tom_kind", "tag") | ("edges", "edge") => Some((
            r.confidence?,
            r.decision == "accept" || (r.decision == "relabel" && r.label == r.original_label),
        )),
        ("affect", "tag") if accepted_or_relabelled => Some((
            r.affect_confidence?,
            r.decided_affect.is_none() || r.decided_affect == r.affect,
        )),
        ("intensity", "tag") if accepted_or_relabelled => Some((
            r.intensity_confidence?,
            r.decided_intensity.is_none() || r.decided_intensity == r.intensity,
        )),
        _ => None,
    }
}

/// How often the curator agreed with each head (tom_kind, affect,
/// intensity, edges) per confidence bin, bulk decisions counted apart, and
/// whether, on this user's one-by-one decisions, the items at or above
/// each of the seed's promotion thresholds were at least as often right
/// as the threshold claims. The thresholds are not changed by it.
fn agreement(curated: &Curated) -> Value {
    let policy = crate::rules::policy::Policy::default();
    let tags = &policy.tom_lite_promotion_policy.promote_tags_when;
    let thresholds = [
        ("tom_kind", tags.tom_kind_confidence_min),
        ("affect", tags.affect_confidence_min),
        ("intensity", tags.intensity_confidence_min),
        (
            "edges",
            policy
                .tom_lite_promotion_policy
                .promote_edges_when
                .edge_confidence_min,
        ),
    ];
    let mut out = serde_json::Map::new();
    for (head, threshold) in thresholds {
        let mut bins = vec![(0u64, 0u64); BINS.len()];
        let (mut bulk, mut bulk_agreed) = (0u64, 0u64);
        let (mut above, mut above_agreed) = (0u64, 0u64);
        for r in curated.rows() {
            let Some((confidence, yes)) = agreed(r, head) else {
                continue;
            };
            if r.bulk {
                bulk += 1;
                bulk_agreed += u64::from(yes);
                continue;
            }
            let at = BINS
                .iter()
                .position(|&(lo, hi, _)| confidence >= lo && (confidence < hi || hi >= 1.0))
                .unwrap_or(0);
            bins[at].0 += 1;
            bins[at].1 += u64::from(yes);
            if confidence >= threshold {
                above += 1;
                above_agreed += u64::from(yes);
            }
        }
        let rate = |n: u64, k: u64| (n > 0).then(|| k as f64 / n as f64);
        let rows: Vec<Value> = BINS
            .iter()
            .zip(&bins)
            .map(|(&(_, _, name), &(n, k))| json!({"bin": name, "decided": n, "agreed": k, "rate": rate(n, k)}))
            .collect();
        let holds = rate(above, above_agreed).map(|r| r >= threshold);
        out.insert(
            head.to_string(),
            json!({
                "threshold": threshold,
                "bins": rows,
                "at_or_above_threshold": {"decided": above, "agreed": above_agreed, "rate": rate(above, above_agreed)},
                "threshold_holds": holds,
                "bulk": {"decided": bulk, "agreed": bulk_agreed},
            }),
        );
    }
    Value::Object(out)
}

/// What is pending, decided and applied in a staging directory. Pending:
/// queued items of the run that last processed their record, with no
/// decision yet. With `decisions`, also how many of that file's lines are
/// not applied yet.
pub fn status(staging: &Path, decisions: Option<&Path>) -> Result<Value, CurateError> {
    let state = State::load(&staging.join("state"))?;
    let curated = Curated::load(staging)?;
    let mut pending = 0u64;
    let mut pending_by_reason: BTreeMap<String, u64> = BTreeMap::new();
    let mut pending_by_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut per_run = Vec::new();
    for run in state.runs() {
        let path = staging.join("runs").join(run).join("quarantine.parquet");
        if !path.is_file() {
            continue;
        }
        let (mut queued, mut open) = (0u64, 0u64);
        for q in read_table::<Quarantine>(&path)? {
            queued += 1;
            let record = text_field(&q, "record_id").unwrap_or_default();
            let current = state.get(&record).is_some_and(|e| state.run(e) == run);
            let item = text_field(&q, "item_id").unwrap_or_default();
            if current && !curated.contains(run, &item) {
                open += 1;
                *pending_by_type
                    .entry(text_field(&q, "item_type").unwrap_or_default())
                    .or_default() += 1;
                if let Some(r) = q
                    .get("reasons")
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(Value::as_str)
                {
                    *pending_by_reason.entry(r.to_string()).or_default() += 1;
                }
            }
        }
        pending += open;
        per_run.push(json!({"run_id": run, "queued": queued, "pending": open}));
    }
    let mut by_decision: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_curator: BTreeMap<String, u64> = BTreeMap::new();
    for r in curated.rows() {
        *by_decision.entry(r.decision.clone()).or_default() += 1;
        *by_curator.entry(r.curator.clone()).or_default() += 1;
    }
    let last_applied = curated.rows().map(|r| r.applied_at.clone()).max();
    let agreement = agreement(&curated);
    let mut out = json!({
        "pending": pending,
        "pending_by_reason": pending_by_reason,
        "pending_by_type": pending_by_type,
        "runs": per_run,
        "applied": curated.len(),
        "applied_by_decision": by_decision,
        "applied_by_curator": by_curator,
        "last_applied_at": last_applied,
        "agreement": agreement,
    });
    if let Some(d) = decisions {
        let io = |source| CurateError::Io {
            path: d.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(d).map_err(io)?;
        let (mut lines, mut not_applied) = (0u64, 0u64);
        for l in DecisionLines::new(file) {
            let (_, l) = l.map_err(io)?;
            lines += 1;
            let v: Value = l
                .ok()
                .and_then(|l| serde_json::from_str(&l).ok())
                .unwrap_or(Value::Null);
            let run = v["run_id"].as_str().unwrap_or("");
            let item = v["item_id"].as_str().unwrap_or("");
            let applied = curated.rows.get(&(run.to_string(), item.to_string()));
            let same = applied.is_some_and(|r| {
                Some(r.decision.as_str()) == v["decision"].as_str()
                    && r.decided_at.as_str() == v["decided_at"].as_str().unwrap_or("")
            });
            if !same {
                not_applied += 1;
            }
        }
        out["decisions_file"] = json!({"path": d.display().to_string(), "lines": lines, "decided_not_applied": not_applied});
    }
    Ok(out)
}
