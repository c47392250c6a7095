//! The curated table (`curated/curated.parquet`): its rows, read and
//! written whole, and the errors of `curate`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use foldhash::{HashMap, HashMapExt};

use crate::stage::read::{self, ReadError};
use crate::stage::tables::{CuratedDecisionRow, CuratedDecisions, QuoteCells, StagedView, Table};

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
    /// A staged table cannot be read (the error names the file, and the
    /// column and row at fault).
    #[error(transparent)]
    Table(#[from] ReadError),
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
    /// The curator's quote start byte (`None`: the queued quote stands).
    pub decided_quote_start: Option<u64>,
    /// The curator's quote end byte (exclusive).
    pub decided_quote_end: Option<u64>,
    /// The record's text between the curator's offsets.
    pub decided_quote: Option<String>,
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

    pub(super) fn same_decision(&self, other: &CuratedRow) -> bool {
        (
            &self.decision,
            &self.label,
            &self.target_node,
            &self.curator,
            &self.note,
            &self.decided_at,
            (&self.decided_affect, &self.decided_intensity, self.bulk),
            (self.decided_quote_start, self.decided_quote_end),
        ) == (
            &other.decision,
            &other.label,
            &other.target_node,
            &other.curator,
            &other.note,
            &other.decided_at,
            (&other.decided_affect, &other.decided_intensity, other.bulk),
            (other.decided_quote_start, other.decided_quote_end),
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
    pub(super) rows: BTreeMap<(String, String), CuratedRow>,
}

/// Streams the rows of staged table (or view) `V` at `path`.
pub(super) fn each_row<V: StagedView>(
    path: &Path,
    each: impl FnMut(V::Row<'_>),
) -> Result<(), CurateError> {
    Ok(read::each_row::<V>(path, each)?)
}

impl CuratedRow {
    /// An applied decision, as staged.
    fn from_staged(r: &CuratedDecisionRow<'_>) -> Self {
        let text = |value: Option<&str>| value.map(str::to_string);
        CuratedRow {
            run_id: r.run_id.to_string(),
            item_id: r.item_id.to_string(),
            item_type: r.item_type.to_string(),
            record_id: r.record_id.to_string(),
            persona_id: r.persona_id.to_string(),
            record_kind: text(r.record_kind),
            decision: r.decision.to_string(),
            label: text(r.label),
            original_label: text(r.original_label),
            target_node: text(r.target_node),
            original_target_node: text(r.original_target_node),
            target_mention: text(r.target_mention),
            edge_key: text(r.edge_key),
            affect: text(r.affect),
            intensity: text(r.intensity),
            source_quote: text(r.quote.source_quote),
            quote_start: r.quote.quote_start,
            quote_end: r.quote.quote_end,
            record_text: r.record_text.to_string(),
            record_fingerprint: text(r.record_fingerprint),
            curator: r.curator.to_string(),
            note: text(r.note),
            decided_at: r.decided_at.to_string(),
            applied_at: r.applied_at.to_string(),
            decided_affect: text(r.decided_affect),
            decided_intensity: text(r.decided_intensity),
            confidence: r.confidence,
            affect_confidence: r.affect_confidence,
            intensity_confidence: r.intensity_confidence,
            decided_quote_start: r.decided_quote_start,
            decided_quote_end: r.decided_quote_end,
            decided_quote: text(r.decided_quote),
            bulk: r.bulk == 1,
        }
    }
}

impl Curated {
    /// Reads `<staging>/curated/curated.parquet`; absent means nothing curated.
    pub fn load(staging: &Path) -> Result<Self, CurateError> {
        let path = staging.join(CURATED_FILE);
        let mut c = Curated::default();
        if !path.exists() {
            return Ok(c);
        }
        each_row::<CuratedDecisions>(&path, |staged| {
            let row = CuratedRow::from_staged(&staged);
            c.rows
                .insert((row.run_id.clone(), row.item_id.clone()), row);
        })?;
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
                decided_quote_start: r.decided_quote_start,
                decided_quote_end: r.decided_quote_end,
                decided_quote: r.decided_quote.as_deref(),
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
