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
        ) == (
            &other.decision,
            &other.label,
            &other.target_node,
            &other.curator,
            &other.note,
            &other.decided_at,
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
    let mut cache = HashMap::new();
    let mut registries: HashMap<String, Option<Registry>> = HashMap::new();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
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
        match decide_line(
            &line,
            staging_root,
            &state,
            latest.as_deref(),
            registry,
            &mut registries,
            &mut cache,
            &now,
        )? {
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

type LineResult = Result<CuratedRow, (Option<String>, String, String)>;

#[allow(clippy::too_many_arguments)]
fn decide_line(
    line: &str,
    staging: &Path,
    state: &State,
    latest: Option<&str>,
    registry: Option<&Registry>,
    registries: &mut HashMap<String, Option<Registry>>,
    cache: &mut RunItems,
    now: &str,
) -> Result<LineResult, CurateError> {
    let bad = |item: Option<&str>, field: &str, message: String| {
        Ok(Err((item.map(str::to_string), field.to_string(), message)))
    };
    let m = match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return bad(None, "(line)", "expected a JSON object".into()),
        Err(e) => return bad(None, "(line)", format!("malformed JSON: {e}")),
    };
    let text = |k: &str| -> Result<Option<String>, String> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{k}: expected a string")),
        }
    };
    let mut fields = BTreeMap::new();
    for k in [
        "run_id",
        "item_id",
        "decision",
        "label",
        "target_node",
        "curator",
        "note",
        "decided_at",
    ] {
        match text(k) {
            Ok(v) => {
                fields.insert(k, v);
            }
            Err(e) => {
                let item = text_field(&m, "item_id");
                return bad(item.as_deref(), k, e);
            }
        }
    }
    let get = |k: &str| fields.get(k).cloned().flatten();
    let Some(item_id) = get("item_id") else {
        return bad(None, "item_id", "missing".into());
    };
    let item = Some(item_id.as_str());
    let run_id = match get("run_id") {
        Some(r) => {
            if let Err(why) = committed_run(staging, state, &r) {
                return bad(item, "run_id", why);
            }
            r
        }
        None => match latest {
            None => return bad(item, "run_id", "missing, and no run was committed".into()),
            Some(l) => {
                if let Err(why) = committed_run(staging, state, l) {
                    return bad(item, "run_id", format!("missing, and LATEST: {why}"));
                }
                l.to_string()
            }
        },
    };
    run_items(staging, &run_id, cache)?;
    let Some(items) = cache.get(&run_id).and_then(Option::as_ref) else {
        return bad(item, "run_id", format!("no committed run `{run_id}`"));
    };
    let Some(q) = items.get(&item_id) else {
        return bad(
            item,
            "item_id",
            format!("not in the quarantine of run `{run_id}`"),
        );
    };
    let Some(decision) = get("decision") else {
        return bad(item, "decision", "missing".into());
    };
    let Some(curator) = get("curator") else {
        return bad(item, "curator", "missing: who decided".into());
    };
    let decided_at = match get("decided_at") {
        None => return bad(item, "decided_at", "missing".into()),
        Some(t) => match chrono::DateTime::parse_from_rfc3339(&t) {
            Ok(_) => t,
            Err(e) => return bad(item, "decided_at", format!("`{t}` is not RFC3339: {e}")),
        },
    };
    let item_type = text_field(q, "item_type").unwrap_or_default();
    let record_id = text_field(q, "record_id").unwrap_or_default();
    let original_label = text_field(q, "label");
    let original_target = text_field(q, "target_node");
    let reg = match registry {
        Some(r) => Some(r),
        None => registries
            .entry(run_id.clone())
            .or_insert_with(|| run_registry(staging, &run_id))
            .as_ref(),
    };
    let node_known = |t: &str| match t.strip_prefix("memory:") {
        Some(id) => state.contains(id),
        None => reg.is_some_and(|r| r.contains(t)),
    };
    let (label, target_node) = match (decision.as_str(), item_type.as_str()) {
        ("accept", _) => {
            if item_type == "annotation" {
                return bad(
                    item,
                    "decision",
                    "an unreadable annotation has no label to accept: relabel it to a tom_kind or reject it".into(),
                );
            }
            if let Some(l) = &original_label
                && !TOM_KINDS.contains(&l.as_str())
            {
                return bad(
                    item,
                    "decision",
                    format!("`{l}` is outside the vocabulary: relabel it instead of accepting"),
                );
            }
            if item_type == "edge" && !original_target.as_deref().is_some_and(node_known) {
                return bad(
                    item,
                    "decision",
                    "the edge's target is not in the registry: relabel it to a registry node"
                        .into(),
                );
            }
            (original_label.clone(), original_target.clone())
        }
        ("reject", _) => (original_label.clone(), original_target.clone()),
        ("relabel", "edge") => {
            let Some(t) = get("target_node") else {
                return bad(
                    item,
                    "target_node",
                    "a relabelled edge needs a registry node".into(),
                );
            };
            if !node_known(&t) {
                return bad(
                    item,
                    "target_node",
                    format!("`{t}` is not in the node registry"),
                );
            }
            let l = get("label").or(original_label.clone());
            if let Some(l) = &l
                && !TOM_KINDS.contains(&l.as_str())
            {
                return bad(item, "label", format!("`{l}` is not a tom_kind"));
            }
            (l, Some(t))
        }
        ("relabel", _) => {
            let Some(l) = get("label") else {
                return bad(item, "label", "a relabelled tag needs a tom_kind".into());
            };
            if !TOM_KINDS.contains(&l.as_str()) {
                return bad(
                    item,
                    "label",
                    format!("`{l}` is not a tom_kind ({})", TOM_KINDS.join(", ")),
                );
            }
            (Some(l), None)
        }
        (other, _) => {
            return bad(
                item,
                "decision",
                format!("`{other}`: expected accept, reject or relabel"),
            );
        }
    };
    // The record's fingerprint, when this run is the last that processed it.
    let record_fingerprint = state
        .get(&record_id)
        .filter(|e| state.run(e) == run_id)
        .map(|e| hex::encode(e.fingerprint));
    Ok(Ok(CuratedRow {
        run_id: run_id.clone(),
        item_id: item_id.clone(),
        item_type,
        record_id,
        persona_id: text_field(q, "persona_id").unwrap_or_default(),
        record_kind: text_field(q, "record_kind"),
        decision,
        label,
        original_label,
        target_node,
        original_target_node: original_target,
        target_mention: text_field(q, "target_mention"),
        edge_key: text_field(q, "edge_key"),
        affect: text_field(q, "affect"),
        intensity: text_field(q, "intensity"),
        source_quote: text_field(q, "source_quote"),
        quote_start: count_field(q, "quote_start"),
        quote_end: count_field(q, "quote_end"),
        record_text: text_field(q, "record_text").unwrap_or_default(),
        record_fingerprint,
        curator,
        note: get("note"),
        decided_at,
        applied_at: now.to_string(),
    }))
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
    let mut out = json!({
        "pending": pending,
        "pending_by_reason": pending_by_reason,
        "pending_by_type": pending_by_type,
        "runs": per_run,
        "applied": curated.len(),
        "applied_by_decision": by_decision,
        "applied_by_curator": by_curator,
        "last_applied_at": last_applied,
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
